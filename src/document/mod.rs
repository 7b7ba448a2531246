//! The business document a transaction set carries: the unit of exactly-once.
//!
//! Control numbers are transport ids: a partner's translator renumbers ISA13, GS06 and ST02
//! when it resends, and a VAN re-envelopes. What does not change is the business event: this
//! PO, this invoice, in this purpose. Each set definition declares the elements that name it
//! (`[document]`), and a set is known by its document key, `QUAL:ID:SET:DOCUMENT:EVENT:VERSION`,
//! and the fingerprint of its own content (the segments between ST and SE). A test
//! interchange's documents (ISA15 not `P`) have keys of their own, the production key and
//! `:test` ([`Usage`]): a partner's onboarding PO never makes its first production PO of the
//! same number a duplicate or a conflict.

mod parts;

pub use parts::{segments as part_segments, Part, Role as PartRole};

use crate::schema::{DocumentSpec, Field, SetDef};
pub use crate::usage::Usage;
use crate::x12::{Group, Interchange, Segment, TransactionSet};

crate::words::words! {
    /// What became of one business document when its set was accepted.
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum DocumentDisposition as as_str {
        /// First sighting of its key: delivered.
        New = "new",
        /// Its key and content were seen before: not delivered again (unless the partner
        /// says `duplicate_documents = "deliver"`).
        Duplicate = "duplicate",
        /// Its key was seen before with other content: held for an operator.
        Conflict = "conflict",
        /// A change (or a copy) of a document never delivered: parked until its original.
        Waiting = "waiting",
        /// A change older than one already delivered: recorded, never delivered.
        Stale = "stale",
    }
}

crate::words::words! {
    /// What a document's event does to the document, from its purpose code.
    pub enum Role as as_str {
        Original = "original",
        Change = "change",
        Copy = "copy",
    }
}

/// The longest text a key part keeps from input: longer values are cut and end in a hash of
/// the whole, so two long values still make two keys.
const MAX_PART: usize = 80;

/// One set's business document, as read from the elements its definition names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identified {
    /// `QUAL:ID:SET:DOCUMENT:EVENT:VERSION`, each part escaped (and `:test` for a test
    /// document).
    pub key: String,
    pub usage: Usage,
    /// `QUAL:ID:OF:DOCUMENT`: the document its changes and copies are about (an 860's is
    /// its 850's).
    pub subject: String,
    pub set_id: String,
    pub document_id: String,
    pub event: String,
    pub version: Option<String>,
    pub kind: Option<String>,
    pub role: Role,
    /// Hex blake3 of the canonical content between ST and SE (of a part: its own segments
    /// and its levels', the set's heading left out). Empty when named by
    /// [`identify_to_write`], which the file of a document needs no fingerprint for.
    pub fingerprint: String,
    /// For a set cut by loop (`per`): which of its documents this is, and where its segments
    /// are.
    pub part: Option<Part>,
}

impl Identified {
    /// Where the document is in its interchange, as the registry finds it again on a
    /// takeover: `group.set`, and for a part of a set `group.set.part`.
    pub fn position(&self, group: usize, set: usize) -> String {
        match &self.part {
            Some(p) => format!("{group}.{set}.{}", p.index),
            None => format!("{group}.{set}"),
        }
    }
}

/// Every document `set` carries by `def`, the sender's `ic`: the set's one, or one per
/// iteration of the loop its `[document]` names (`per`). Empty when it carries none, and
/// when a set cut by loop cannot be cut (a segment without a place, parts that would repeat
/// too much of it) or a part lacks its number (a 270 inquiry without a trace): such a set
/// then travels whole in its interchange's translation, as a set without a document does.
/// A level that holds no part (an 837 subscriber level without a claim) is in no document:
/// said in the log.
pub fn identify_all(
    ic: &Interchange<'_>,
    set: &TransactionSet<'_>,
    def: &SetDef,
) -> Vec<Identified> {
    identify_all_known(ic, set, def, None)
}

/// [`identify_all`], given the set's fingerprint when it is known already (taken with its
/// interchange's, [`crate::fingerprint::SetPrints`]): a set that is one document is then
/// not hashed again.
pub fn identify_all_known(
    ic: &Interchange<'_>,
    set: &TransactionSet<'_>,
    def: &SetDef,
    fingerprint: Option<String>,
) -> Vec<Identified> {
    let (qualifier, id) = (ic.isa.field(5), ic.isa.field(6));
    let Some(per) = def.document.as_ref().and_then(|d| d.per.as_ref()) else {
        return identify_as(qualifier, id, Usage::of(ic), set, def, fingerprint)
            .into_iter()
            .collect();
    };
    let st02 = || {
        crate::text::printable(&String::from_utf8_lossy(
            set.st.element(2).unwrap_or_default(),
        ))
        .to_string()
    };
    let Some(cut) = parts::parts(set, def, per) else {
        tracing::warn!(set = %st02(), at = set.st.offset, per = %per.ids.join(","), "a set is not cut into its documents (a segment without a place, or parts that would repeat too much of it): delivered whole, without a document key");
        return Vec::new();
    };
    if let Some(first) = cut.left_out.first() {
        tracing::warn!(set = %st02(), segments = cut.left_out.len(), at = first, per = %per.ids.join(","), "levels that hold no document (no claim under them) are left out of the set's documents");
    }
    let all = cut
        .parts
        .into_iter()
        .map(|p| identify_part(ic, def, p))
        .collect::<Option<Vec<_>>>();
    if all.is_none() {
        tracing::warn!(set = %st02(), at = set.st.offset, per = %per.ids.join(","), "a part of a set lacks its number: the set is delivered whole, without a document key");
    }
    all.unwrap_or_default()
}

/// The document of one part of `set` (cut by loop), named by its own segments and those of
/// the loops its fields name (found when it was cut: [`Part::named_by`]).
pub fn identify_part(ic: &Interchange<'_>, def: &SetDef, part: Part) -> Option<Identified> {
    let fingerprint = crate::fingerprint::content_fingerprint(
        parts::segments(ic, &part).map(|(s, _)| s),
        &batch_only,
    );
    name_part(ic, def, part, fingerprint)
}

/// The document that `part` of a set (`None`: the whole `set`) was identified as, named
/// again to write its file: its fingerprint is left empty, as the file does not carry it
/// (hashing every set a second time was a tenth of `process`'s work).
pub fn identify_to_write(
    ic: &Interchange<'_>,
    set: &TransactionSet<'_>,
    def: &SetDef,
    part: Option<Part>,
) -> Option<Identified> {
    match part {
        Some(p) => name_part(ic, def, p, String::new()),
        None => {
            let spec = def.document.as_ref()?;
            let heading = Heading::of(set.body.segments(), spec);
            let (qualifier, id) = (ic.isa.field(5), ic.isa.field(6));
            let sender = (qualifier, id, Usage::of(ic));
            named(sender, def, spec, &heading, String::new(), None)
        }
    }
}

fn name_part(
    ic: &Interchange<'_>,
    def: &SetDef,
    part: Part,
    fingerprint: String,
) -> Option<Identified> {
    let spec = def.document.as_ref()?;
    // The segments its fields are read from, found when the set was cut.
    let (input, base, delimiters) = (ic.input(), ic.base, ic.delimiters());
    let found = spec
        .places()
        .into_iter()
        .zip(part.named_by.iter())
        .filter(|(_, at)| **at != usize::MAX)
        .filter_map(|(place, at)| {
            let from = at.checked_sub(base)?;
            let segment = crate::x12::Segments::new(input, from, input.len(), 0, delimiters)
                .in_file_at(base)
                .next()?;
            Some((place, segment))
        })
        .collect();
    let heading = Heading { found };
    let sender = (ic.isa.field(5), ic.isa.field(6), Usage::of(ic));
    named(sender, def, spec, &heading, fingerprint, Some(part))
}

/// The elements that belong to a batch, not to the documents cut from it: BHT03 to BHT05
/// (the batch's reference, date and time), HL01, HL02 and HL04 (the numbers of its levels
/// and whether more follow). A claim batched again among other claims is the same claim;
/// an encounter (BHT06 `RP`) is not a chargeable claim (`CH`), nor a cancellation (270
/// BHT02 `01`) its request.
fn batch_only(id: &[u8], n: usize) -> bool {
    match id {
        b"BHT" => matches!(n, 3..=5),
        b"HL" => matches!(n, 1 | 2 | 4),
        _ => false,
    }
}

/// The document of `set` by `def`, for the sender `qualifier:id` (ISA05, ISA06) of a
/// production interchange; `None` when the definition declares none or the set lacks its
/// number.
pub fn identify(
    qualifier: &[u8],
    id: &[u8],
    set: &TransactionSet<'_>,
    def: &SetDef,
) -> Option<Identified> {
    identify_as(qualifier, id, Usage::Production, set, def, None)
}

fn identify_as(
    qualifier: &[u8],
    id: &[u8],
    usage: Usage,
    set: &TransactionSet<'_>,
    def: &SetDef,
    fingerprint: Option<String>,
) -> Option<Identified> {
    let spec = def.document.as_ref()?;
    let heading = Heading::of(set.body.segments(), spec);
    let fingerprint = fingerprint.unwrap_or_else(|| crate::fingerprint::set_fingerprint(set));
    named(
        (qualifier, id, usage),
        def,
        spec,
        &heading,
        fingerprint,
        None,
    )
}

/// The sender of a document: ISA05, ISA06 and the interchange's usage.
type Sender<'a> = (&'a [u8], &'a [u8], Usage);

fn named(
    (qualifier, id, usage): Sender<'_>,
    def: &SetDef,
    spec: &DocumentSpec,
    heading: &Heading<'_>,
    fingerprint: String,
    cut: Option<Part>,
) -> Option<Identified> {
    // The document's own number must be there; a release number beside it may not be.
    if spec.id.first().is_none_or(|f| heading.value(f).is_empty()) {
        return None;
    }
    let document_id = heading.joined(&spec.id);
    let event = heading.joined(&spec.event);
    let purpose = spec
        .event
        .first()
        .map(|f| heading.value(f))
        .unwrap_or_default();
    let role = if spec.copies.contains(&purpose) {
        Role::Copy
    } else if spec.changes.iter().any(|c| c == "*" || *c == purpose) {
        Role::Change
    } else {
        Role::Original
    };
    let optional = |f: &Option<Field>| {
        f.as_ref()
            .map(|f| heading.value(f))
            .filter(|v| !v.is_empty())
    };
    let version = optional(&spec.version);
    let sender = format!("{}:{}", part(qualifier), part(id));
    let mark = usage.mark();
    let key = format!(
        "{sender}:{}:{document_id}:{event}:{}{mark}",
        part(def.id.as_bytes()),
        version.as_deref().unwrap_or("")
    );
    let subject = format!("{sender}:{}:{document_id}{mark}", part(spec.of.as_bytes()));
    Some(Identified {
        key,
        usage,
        subject,
        set_id: def.id.clone(),
        document_id,
        event,
        version,
        kind: optional(&spec.kind),
        role,
        fingerprint,
        part: cut,
    })
}

/// What a document's file says about its delivery: known once it is decided, so written
/// apart from the rest (a held or parked document's rest is stored until it is delivered).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Delivery<'a> {
    pub disposition: DocumentDisposition,
    /// Its place in the order of deliveries: a consumer applies documents in this order (a
    /// change after its original, whatever order the files are found in).
    pub sequence: Option<i64>,
    /// The interchange this document came in.
    pub interchange: &'a str,
    /// For a duplicate delivered again: the interchange of its first sighting.
    pub duplicate_of: Option<&'a str>,
    /// A change or copy delivered after the wait for its original ran out.
    pub original_missing: bool,
}

/// The start of a document's file, up to what its set fixes: `{"document_key": ...,
/// "delivery": {...},`; then [`write_rest`] (or the rest stored for it), then [`END`].
pub fn head(key: &str, delivery: &Delivery<'_>) -> Vec<u8> {
    let mut out = b"{\"document_key\":".to_vec();
    // invariant: a string and a struct of strings, numbers and booleans always serialise.
    let _ = serde_json::to_writer(&mut out, key);
    out.extend_from_slice(b",\"delivery\":");
    let _ = serde_json::to_writer(&mut out, delivery);
    out.push(b',');
    out
}

/// The document key a file in `out/` was written for, read from its start (`None` for any
/// other file: an interchange's translation, something an operator put there).
pub fn key_in_file(path: &std::path::Path) -> Option<String> {
    use std::io::Read;
    const PREFIX: &[u8] = b"{\"document_key\":";
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_end(&mut head)
        .ok()?;
    let rest = head.strip_prefix(PREFIX)?;
    serde_json::Deserializer::from_slice(rest)
        .into_iter::<String>()
        .next()?
        .ok()
}

/// The end of a document's file.
pub const END: &[u8] = b"}\n";

/// How a document's set is written: for which interchange, and in which text and form.
pub struct Written<'a> {
    pub correlation_id: &'a str,
    /// Whether the interchange's bytes are UTF-8 (else latin1, as translations say).
    pub utf8: bool,
    pub form: crate::translate::Form,
    /// The definitions the set is translated against (the sender's); `None`: built-in.
    pub schemas: Option<&'a crate::schema::Schemas>,
}

/// The part of a document's file its set fixes: what names it, its interchange's
/// correlation id, the envelope around it and the set's JSON (in the partner's form).
pub fn write_rest(
    ic: &Interchange<'_>,
    group: &Group<'_>,
    set: &TransactionSet<'_>,
    d: &Identified,
    how: &Written<'_>,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let utf8 = how.utf8;
    let text = |b: &[u8]| crate::translate::text_of(b.trim_ascii(), utf8);
    let identity = serde_json::json!({
        "set": d.set_id,
        "id": d.document_id,
        "event": d.event,
        "version": d.version,
        "type": d.kind,
        "role": d.role.as_str(),
    });
    let gs = |n| text(group.gs.element(n).unwrap_or_default());
    let envelope = serde_json::json!({
        "sender": format!("{}:{}", text(ic.isa.field(5)), text(ic.isa.field(6))),
        "receiver": format!("{}:{}", text(ic.isa.field(7)), text(ic.isa.field(8))),
        "isa13": text(ic.isa.field(13)),
        "isa_date": text(ic.isa.field(9)),
        "isa_time": text(ic.isa.field(10)),
        "gs01": gs(1),
        "gs02": gs(2),
        "gs03": gs(3),
        "gs04": gs(4),
        "gs05": gs(5),
        "gs06": gs(6),
        "gs08": gs(8),
        "st02": text(set.st.element(2).unwrap_or_default()),
        "usage": d.usage.letter(),
        "encoding": if utf8 { "utf8" } else { "latin1" },
    });
    out.write_all(b"\"identity\":")?;
    serde_json::to_writer(&mut *out, &identity)?;
    out.write_all(b",\"correlation_id\":")?;
    serde_json::to_writer(&mut *out, how.correlation_id)?;
    out.write_all(b",\"envelope\":")?;
    serde_json::to_writer(&mut *out, &envelope)?;
    out.write_all(b",\"set\":")?;
    let version = group.gs.element(8).unwrap_or_default();
    match &d.part {
        None => crate::translate::write_set_with(set, version, utf8, how.form, how.schemas, out),
        Some(part) => {
            let bytes = parts::as_set_bytes(ic, set, part);
            let own = TransactionSet::from_segments(&bytes, ic.delimiters())
                .ok_or_else(|| std::io::Error::other("a document's part is not a set"))?;
            crate::translate::write_set_with(&own, version, utf8, how.form, how.schemas, out)
        }
    }
}

/// The first segment of each kind a spec's fields name, read once.
struct Heading<'a> {
    /// By field place (segment id, loop): the segment found.
    found: Vec<((&'a str, Option<&'a str>), Segment<'a>)>,
}

impl<'a> Heading<'a> {
    /// Where a field is read: its segment id, and its loop when it names one.
    fn place(f: &Field) -> (&str, Option<&str>) {
        (f.segment.as_str(), f.in_loop.as_deref())
    }

    /// From a set's own segments: the first of each id a field names (so that the walk
    /// stops at the last one it needs instead of reading the whole set).
    fn of(all: impl Iterator<Item = Segment<'a>>, spec: &'a DocumentSpec) -> Heading<'a> {
        let wanted = spec.places();
        let mut found: Vec<((&'a str, Option<&'a str>), Segment<'a>)> = Vec::new();
        for segment in all {
            if found.len() == wanted.len() {
                break;
            }
            for w in &wanted {
                if segment.is(w.0.as_bytes()) && !found.iter().any(|(k, _)| k == w) {
                    found.push((*w, segment));
                }
            }
        }
        Heading { found }
    }

    /// A field's value as a key part (escaped, bounded); empty when absent.
    fn value(&self, f: &Field) -> String {
        let place = Heading::place(f);
        self.found
            .iter()
            .find(|(k, _)| *k == place)
            .and_then(|(_, s)| s.elements().nth(f.position.checked_sub(1)?))
            .and_then(|e| match f.component {
                None => Some(e.value),
                Some(c) => e.repetitions().next()?.components().nth(c.checked_sub(1)?),
            })
            .map(|v| part(v).into_owned())
            .unwrap_or_default()
    }

    /// Several fields' values joined by `+`, each in its place (`A++C`), the empty ones at
    /// the end left out (`A` for `A`, ``, ``): a value holds no `+` (it is escaped), so no
    /// two lists of values join into one text.
    fn joined(&self, fields: &[Field]) -> String {
        let values: Vec<String> = fields.iter().map(|f| self.value(f)).collect();
        let used = values
            .iter()
            .rposition(|v| !v.is_empty())
            .map_or(0, |i| i + 1);
        values.get(..used).unwrap_or_default().join("+")
    }
}

/// One value as a part of a document key: trimmed, with the key's separators (`:`, `+`),
/// the escape (`%`), the mark of a shortened value (`~`) and anything that is not printable
/// ASCII written `%XX`, so no two different values make one key; longer than [`MAX_PART`],
/// cut and ended with `~` and a hash of the whole.
pub fn part(value: &[u8]) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    let value = value.trim_ascii();
    let plain =
        |b: &u8| b.is_ascii_graphic() && !matches!(b, b':' | b'+' | b'%' | b'~') || *b == b' ';
    let text = if value.iter().all(plain) {
        // invariant: every byte is printable ASCII.
        Cow::Borrowed(std::str::from_utf8(value).unwrap_or_default())
    } else {
        Cow::Owned(
            value
                .iter()
                .map(|b| {
                    if plain(b) {
                        char::from(*b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect(),
        )
    };
    if text.len() <= MAX_PART {
        return text;
    }
    let hash = blake3::hash(value).to_hex();
    let cut = (0..=MAX_PART - 17)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    Cow::Owned(format!(
        "{}~{}",
        text.get(..cut).unwrap_or_default(),
        hash.get(..16).unwrap_or_default()
    ))
}

/// Compares two change sequence numbers: numerically when both are numbers, otherwise not
/// at all (`None`: a partner's free-text versions cannot make a change stale).
pub fn version_order(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    let n = |v: &str| {
        (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .then(|| v.trim_start_matches('0').to_string())
    };
    let (a, b) = (n(a)?, n(b)?);
    Some(a.len().cmp(&b.len()).then_with(|| a.cmp(&b)))
}

/// Runs `f` on the first set of `text` (a whole interchange), with its interchange and the
/// built-in definition its GS08 and ST01 select.
#[cfg(test)]
pub(crate) fn with_first_set<R>(
    text: &str,
    f: impl FnOnce(&Interchange<'_>, &TransactionSet<'_>, &SetDef) -> R,
) -> R {
    let schemas = crate::schema::builtin().unwrap();
    let ic = crate::x12::Interchanges::new(text.as_bytes(), crate::x12::Limits::default())
        .next()
        .unwrap()
        .unwrap();
    let group = &ic.groups[0];
    let set = group.sets.get(0).unwrap();
    let def = schemas
        .find(group.gs.element(8).unwrap(), set.st.element(1).unwrap())
        .unwrap();
    f(&ic, &set, def)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrap(body: &str) -> String {
        format!(
            "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*U*00401*000000001*0*P*>~GS*PO*ACME*X12GATE*20240101*1200*1*X*004010~ST*850*0001~{body}SE*4*0001~GE*1*1~IEA*1*000000001~"
        )
    }

    fn identified(text: &str) -> Option<Identified> {
        with_first_set(text, |ic, set, def| {
            identify(ic.isa.field(5), ic.isa.field(6), set, def)
        })
    }

    #[test]
    fn an_850_is_known_by_its_po_number_and_purpose() {
        let d = identified(&wrap("BEG*00*SA*PO-1**20240101~PO1*1*10*EA~")).unwrap();
        assert_eq!(d.key, "ZZ:ACME:850:PO-1:00:");
        assert_eq!(d.subject, "ZZ:ACME:850:PO-1");
        assert_eq!(d.role, Role::Original);
        assert_eq!(d.kind.as_deref(), Some("SA"));
        // A release against a blanket order is its own document.
        let r = identified(&wrap("BEG*00*RL*PO-1*7*20240101~PO1*1*10*EA~")).unwrap();
        assert_eq!(r.key, "ZZ:ACME:850:PO-1+7:00:");
        let c = identified(&wrap("BEG*07*SA*PO-1**20240101~PO1*1*10*EA~")).unwrap();
        assert_eq!(c.role, Role::Copy);
        let x = identified(&wrap("BEG*05*SA*PO-1**20240101~PO1*1*10*EA~")).unwrap();
        assert_eq!(x.role, Role::Change);
        assert!(identified(&wrap("BEG*00*SA***20240101~PO1*1*10*EA~")).is_none());
        // A release number without the PO number names no document (it would read as the
        // PO number 7).
        assert!(identified(&wrap("BEG*00*SA**7*20240101~PO1*1*10*EA~")).is_none());
    }

    #[test]
    fn a_test_interchanges_documents_have_keys_of_their_own() {
        let production = wrap("BEG*00*SA*PO-1**20240101~PO1*1*10*EA~");
        let test = production.replace("*0*P*>~", "*0*T*>~");
        let information = production.replace("*0*P*>~", "*0*I*>~");
        let keyed = |text: &str| {
            with_first_set(text, |ic, set, def| {
                identify_all(ic, set, def).into_iter().next().unwrap()
            })
        };
        let (p, t, i) = (keyed(&production), keyed(&test), keyed(&information));
        assert_eq!(p.key, "ZZ:ACME:850:PO-1:00:");
        assert_eq!(p.usage, Usage::Production);
        assert_eq!(t.key, "ZZ:ACME:850:PO-1:00::test");
        assert_eq!(t.subject, "ZZ:ACME:850:PO-1:test");
        assert_eq!(t.usage, Usage::Test);
        assert_eq!(t.fingerprint, p.fingerprint);
        // Information is not production either.
        assert_eq!(i.key, t.key);
        assert_eq!(Usage::of_key(&t.key), Usage::Test);
        assert_eq!(Usage::of_key(&p.key), Usage::Production);
        // A production change whose sequence number is `test` stays production: its key has
        // six parts, a test key seven.
        assert_eq!(Usage::of_key("ZZ:ACME:860:PO-1:04:test"), Usage::Production);
        // The file that writes it names it again under the same key, and says `T`.
        let written = with_first_set(&test, |ic, set, def| {
            let d = identify_to_write(ic, set, def, None).unwrap();
            assert_eq!(d.key, t.key);
            let mut out = Vec::new();
            let how = Written {
                correlation_id: "c",
                utf8: true,
                form: crate::translate::Form::default(),
                schemas: None,
            };
            write_rest(ic, &ic.groups[0], set, &d, &how, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        });
        assert!(written.contains("\"usage\":\"T\""), "{written}");
    }

    #[test]
    fn an_860_changes_the_850s_document_by_its_sequence() {
        let text = wrap("BCH*04*SA*PO-1**3*20240101~POC*1*CA*5~").replace("ST*850", "ST*860");
        let d = identified(&text).unwrap();
        assert_eq!(d.key, "ZZ:ACME:860:PO-1:04:3");
        assert_eq!(d.subject, "ZZ:ACME:850:PO-1");
        assert_eq!(d.role, Role::Change);
        assert_eq!(d.version.as_deref(), Some("3"));
    }

    /// The keys of every document of a fixture's first set.
    fn keys_of(text: &str) -> Vec<String> {
        with_first_set(text, |ic, set, def| {
            identify_all(ic, set, def)
                .into_iter()
                .map(|d| d.key)
                .collect()
        })
    }

    #[test]
    fn healthcare_documents_are_named_by_their_own_numbers_and_the_parties_around_them() {
        // 270: a subscriber's inquiry with its dependent's, by the subscriber's trace.
        assert_eq!(
            keys_of(include_str!("../../fixtures/270-005010X279A1.x12")),
            [
                "30:841234567:270:93175-0001+9841234567::",
                "30:841234567:270:93175-0002+9841234567::"
            ]
        );
        // 276: each claim asked about, with the service provider.
        assert_eq!(
            keys_of(include_str!("../../fixtures/276-005010X212.x12")),
            [
                "30:841234567:276:NWFC-CS-0001+1234567893::",
                "30:841234567:276:NWFC-CS-0002+1234567893::"
            ]
        );
        // The 4010 claims: the institutional's payer is 2010BC, the others' 2010BB.
        for (text, payer) in [
            (include_str!("../../fixtures/837-004010X096A1.x12"), "87726"),
            (include_str!("../../fixtures/837-004010X097A1.x12"), ""),
            (include_str!("../../fixtures/837-004010X098A1.x12"), ""),
        ] {
            let keys = keys_of(text);
            assert!(!keys.is_empty());
            for key in keys {
                let id = key.split(':').nth(3).unwrap();
                let parts: Vec<&str> = id.split('+').collect();
                assert_eq!(parts.len(), 3, "{key}");
                assert!(parts.iter().all(|p| !p.is_empty()), "{key}");
                if !payer.is_empty() {
                    assert_eq!(parts[2], payer, "{key}");
                }
            }
        }
    }

    #[test]
    fn keys_cannot_run_into_each_other() {
        assert_eq!(part(b"A:B"), "A%3AB");
        assert_eq!(part(b"A+B"), "A%2BB");
        assert_eq!(part(b"50%"), "50%25");
        assert_eq!(part(b" PO1 "), "PO1");
        assert_eq!(part(b"A~B"), "A%7EB");
        assert_ne!(part(b"\xff"), part(b"\xfe"));
        let long = part(&[b'A'; 500]);
        assert!(long.len() <= MAX_PART, "{long}");
        assert_ne!(long, part(&[b'A'; 501]));
    }

    #[test]
    fn content_not_envelope_makes_the_fingerprint() {
        let a = identified(&wrap("BEG*00*SA*PO-1**20240101~PO1*1*10*EA~")).unwrap();
        let renumbered = wrap("BEG*00*SA*PO-1**20240101~PO1*1*10*EA~")
            .replace("ST*850*0001", "ST*850*0099")
            .replace("SE*4*0001", "SE*4*0099")
            .replace("*1*X*", "*77*X*")
            .replace('*', "|")
            .replace('~', "\n");
        let b = identified(&renumbered).unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_eq!(a.key, b.key);
        let more = identified(&wrap("BEG*00*SA*PO-1**20240101~PO1*1*11*EA~")).unwrap();
        assert_ne!(a.fingerprint, more.fingerprint);
        // A trailing empty element is the same content.
        let trailing = identified(&wrap("BEG*00*SA*PO-1**20240101*~PO1*1*10*EA~")).unwrap();
        assert_eq!(a.fingerprint, trailing.fingerprint);
    }

    #[test]
    fn versions_compare_as_numbers_or_not_at_all() {
        use std::cmp::Ordering::*;
        assert_eq!(version_order("2", "10"), Some(Less));
        assert_eq!(version_order("003", "3"), Some(Equal));
        assert_eq!(version_order("A", "3"), None);
        assert_eq!(version_order("", "3"), None);
    }
}
