//! Our own documents to partners (invoices, ship notices, PO acknowledgments): the ERP's JSON
//! read, checked against the set's definition and the partner's guide, named by its business
//! key, and enveloped with the numbers the registry gives; and the partner's TA1, 997 and 999
//! read for what they say about what we sent.
//!
//! Nothing here touches the registry or the disk: `send` (above the registry) claims the key,
//! takes the numbers and writes the file. [`prepare`] does everything that must happen
//! *before* a number is taken, so a refused document never costs the partner a gap in its
//! control numbers; [`Prepared::render`] is a pure function of the numbers and the time, so
//! the interchange recorded with a claim can be written again byte for byte after a crash.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::check::{self, Checks};
use crate::config::{Config, Partner};
use crate::document::{self, Usage};
use crate::finding::Finding;
use crate::schema::Schemas;
use crate::translate::{JsonElement, JsonInterchange};
use crate::x12::{Interchange, Interchanges, Limits, Segment};

/// The largest outbound document accepted: one transaction set of a business document, far
/// below what a partner's translator takes in one interchange.
pub const MAX_REQUEST_BYTES: usize = 16 << 20;

/// What the ERP hands over: one transaction set and to whom. The file `out/` holds for an
/// inbound document reads as one too (its `envelope.sender` is then the partner, its other
/// fields are ignored), so a document received can be sent back as it was read.
#[derive(Debug, Deserialize)]
struct Request {
    #[serde(default)]
    partner: Option<String>,
    /// ISA15: `P` (the default) or `T`.
    #[serde(default)]
    usage: Option<String>,
    /// GS08, when neither the definition nor the partner's `outbound_version` says it.
    #[serde(default)]
    version: Option<String>,
    set: OutboundSet,
    #[serde(default)]
    envelope: Option<SeenEnvelope>,
}

/// The set as the ERP writes it: the JSON form of a set, ST02 and SE free to be `null` (or
/// absent: they are ours to number and count).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutboundSet {
    st: Vec<Option<JsonElement>>,
    #[serde(default)]
    segments: Option<Vec<crate::translate::JsonSegment>>,
    #[serde(default)]
    schema: Option<String>,
    #[serde(default)]
    content: Option<serde_json::Value>,
    #[serde(default)]
    #[allow(dead_code)] // read to be accepted, never used: SE is ours to write
    se: Option<Vec<Option<JsonElement>>>,
}

/// The envelope an `out/` file records of the interchange that carried it.
#[derive(Debug, Deserialize)]
struct SeenEnvelope {
    #[serde(default)]
    sender: Option<String>,
    #[serde(default)]
    usage: Option<String>,
}

/// Why a document is not sent: every case is the ERP's to fix, and nothing was taken.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("too large: {size} bytes, at most {MAX_REQUEST_BYTES} are read")]
    TooLarge { size: usize },
    #[error("invalid JSON at byte {byte} (line {line}, column {column}): {message}")]
    Json {
        byte: usize,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{0}")]
    Partner(String),
    #[error("{0}")]
    Set(String),
    #[error("{} finding(s) that reject the set; the first: {}", .0.len(), .0.first().map(|f| f.message.as_str()).unwrap_or(""))]
    Invalid(Vec<Finding>),
    #[error("{0}")]
    Key(String),
}

impl Refusal {
    /// The findings of an invalid document (`validate --json`'s shape), none otherwise.
    pub fn findings(&self) -> &[Finding] {
        match self {
            Refusal::Invalid(f) => f,
            _ => &[],
        }
    }
}

/// A document ready to be enveloped: checked, named, and fingerprinted.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub partner: Partner,
    /// `{our QUAL:ID}:{partner QUAL:ID}:{set}:{document}:{event}:{version}` (and `:test`).
    pub key: String,
    pub set_id: String,
    pub document_id: String,
    pub usage: Usage,
    /// The set's content (between ST and SE, control numbers left out): what makes a retry
    /// the same document.
    pub fingerprint: String,
    /// GS01 and GS08.
    pub functional_id: String,
    pub version: String,
    /// Warnings the checks found (never a reason to refuse).
    pub warnings: Vec<Finding>,
    /// Time spent reading the JSON and rendering the set, and checking and naming it (the
    /// shares `benches/send.sh` reports).
    pub rendering: std::time::Duration,
    pub validation: std::time::Duration,
    /// The ERP's own key for the request (`Idempotency-Key`), recorded beside ours.
    pub idempotency_key: Option<String>,
    body: Vec<crate::translate::JsonSegment>,
    /// ST03 on (a guide's implementation convention reference), as the ERP gave them.
    st_rest: Vec<JsonElement>,
    ours: (String, String),
}

/// The numbers an interchange carries: ISA13 and GS06 from the partner's counters; ST02 is
/// the set's place in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Numbers {
    pub isa13: u32,
    pub gs06: u32,
}

/// The ST02 of the one set of an outbound group.
pub const ST02: &str = "0001";

/// Reads, checks and names one outbound document; `partner` (a `--partner` given on the
/// command line) is used when the document names none.
pub fn prepare(
    config: &Config,
    schemas: &Schemas,
    json: &[u8],
    partner: Option<&str>,
) -> Result<Prepared, Refusal> {
    if json.len() > MAX_REQUEST_BYTES {
        return Err(Refusal::TooLarge { size: json.len() });
    }
    let started = std::time::Instant::now();
    let request: Request = serde_json::from_slice(json).map_err(|e| Refusal::Json {
        byte: byte_at(json, e.line(), e.column()),
        line: e.line(),
        column: e.column(),
        message: crate::text::bounded(&e.to_string(), 300).to_string(),
    })?;
    let named = request
        .partner
        .as_deref()
        .or(partner)
        .or(request.envelope.as_ref().and_then(|e| e.sender.as_deref()))
        .ok_or_else(|| {
            Refusal::Partner(
                "no partner: the document names none (\"partner\": \"QUAL:ID\") and none was given"
                    .into(),
            )
        })?;
    let partner = find_partner(config, named)?.clone();
    let usage = match request
        .usage
        .as_deref()
        .or(request.envelope.as_ref().and_then(|e| e.usage.as_deref()))
    {
        None | Some("P") => Usage::Production,
        Some("T") => Usage::Test,
        Some(other) => {
            return Err(Refusal::Set(format!(
                "usage {:?}: expected \"P\" (production) or \"T\" (test)",
                crate::text::bounded(other, 20)
            )))
        }
    };
    let set_id = match request.set.st.first() {
        Some(Some(JsonElement::Simple(id))) if crate::schema::names_a_set(id.as_bytes()) => {
            id.clone()
        }
        _ => {
            return Err(Refusal::Set(
                "set: ST01 must be the transaction set's id (\"st\": [\"810\", null])".into(),
            ))
        }
    };
    let version = version_of(&request, &partner)?;
    let functional_id = crate::validate::functional_groups_of(set_id.as_bytes())
        .and_then(|g| g.first())
        .ok_or_else(|| {
            Refusal::Set(format!(
                "set {set_id}: no functional group (GS01) is known for it"
            ))
        })?
        .to_string();
    let st_rest = request
        .set
        .st
        .iter()
        .skip(2)
        .map(|e| e.clone().unwrap_or(JsonElement::Simple(String::new())))
        .collect();
    // Moved, not copied: a document may be megabytes.
    let set = crate::translate::JsonSet {
        st: Vec::new(),
        segments: request.set.segments,
        schema: request.set.schema,
        content: request.set.content,
        se: None,
    };
    let body = crate::translate::set_body(&set, "set").map_err(|e| Refusal::Set(e.to_string()))?;
    drop(set);
    let (qualifier, id) = config.gateway.for_partner(&partner);
    let ours = (qualifier.to_string(), id.to_string());
    let mut prepared = Prepared {
        key: String::new(),
        set_id,
        document_id: String::new(),
        usage,
        fingerprint: String::new(),
        functional_id,
        version,
        warnings: Vec::new(),
        rendering: started.elapsed(),
        validation: std::time::Duration::ZERO,
        idempotency_key: None,
        body,
        st_rest,
        ours,
        partner,
    };
    prepared.check_and_name(schemas)?;
    Ok(prepared)
}

/// The byte offset (0-based) of serde_json's 1-based `line` and `column` in `json`.
fn byte_at(json: &[u8], line: usize, column: usize) -> usize {
    let start: usize = json
        .split(|b| *b == b'\n')
        .take(line.saturating_sub(1))
        .map(|l| l.len() + 1)
        .sum();
    (start + column.saturating_sub(1)).min(json.len())
}

/// The configured partner a document names, as every command names one (`QUAL:ID`, `ID`
/// or its name).
fn find_partner<'c>(config: &'c Config, named: &str) -> Result<&'c Partner, Refusal> {
    config.partner_named(named).map_err(|e| {
        Refusal::Partner(format!(
            "partner: {e} in {} ([[partner]] id_qualifier and id)",
            config.path.display()
        ))
    })
}

/// GS08: the document's `version`, else the partner's `outbound_version` when it is of the
/// definition's release (or there is no definition), else the definition's release.
fn version_of(request: &Request, partner: &Partner) -> Result<String, Refusal> {
    let release = request
        .set
        .schema
        .as_deref()
        .and_then(|s| s.split_once('/'))
        .map(|(v, _)| v.to_string());
    let chosen = request.version.clone().or_else(|| {
        partner
            .outbound
            .version
            .clone()
            .filter(|v| release.as_deref().is_none_or(|r| v.starts_with(r)))
            .or(release)
    });
    match chosen {
        Some(v) if crate::schema::names_a_release(v.as_bytes()) && v.len() <= 12 => Ok(v),
        Some(v) => Err(Refusal::Set(format!(
            "version {:?}: expected an X12 release (\"004010\") or a guide (\"005010X222A1\")",
            crate::text::bounded(&v, 20)
        ))),
        None => Err(Refusal::Set(
            "no version: a generic set needs \"version\" (GS08) or the partner's outbound_version"
                .into(),
        )),
    }
}

impl Prepared {
    /// The document checked against its definition (the partner's guide first) and named;
    /// a finding that would make the partner reject it refuses it.
    fn check_and_name(&mut self, schemas: &Schemas) -> Result<(), Refusal> {
        // A probe: the interchange as it will be sent, with numbers that are not taken.
        let when =
            DateTime::<Utc>::from_timestamp_millis(crate::time::now_ms()).unwrap_or_default();
        let started = std::time::Instant::now();
        let probe = self.render(Numbers { isa13: 1, gs06: 1 }, when)?;
        self.rendering += started.elapsed();
        let started = std::time::Instant::now();
        let schemas = schemas.for_sender(&self.partner.id_qualifier, &self.partner.id);
        let mut read = Interchanges::new(&probe, Limits::default());
        let ic = match read.next() {
            Some(Ok(ic)) => ic,
            Some(Err(e)) => return Err(Refusal::Set(format!("the set does not read as X12: {e}"))),
            None => return Err(Refusal::Set("the set renders as nothing".into())),
        };
        let checks = Checks {
            schemas: Some(schemas),
            routing: None,
            strict_layout: true,
            unknown_version_rejects: true,
            group_mismatch_warns: false,
        };
        let (warnings, errors): (Vec<Finding>, Vec<Finding>) = check::interchange(&ic, &checks, [])
            .into_iter()
            .partition(Finding::is_warning);
        if !errors.is_empty() {
            return Err(Refusal::Invalid(errors));
        }
        self.warnings = warnings;
        let set = ic
            .groups
            .first()
            .and_then(|g| g.sets.iter().next())
            .ok_or_else(|| Refusal::Set("the set renders as nothing".into()))?;
        let def = schemas
            .find(self.version.as_bytes(), self.set_id.as_bytes())
            .ok_or_else(|| {
                Refusal::Key(format!(
                    "no definition of {} in {}: a document is sent only when its key can be read from its business fields",
                    self.set_id, self.version
                ))
            })?;
        let spec = def.document.as_ref().ok_or_else(|| {
            Refusal::Key(format!(
                "the definition of {} in {} declares no [document] key; it cannot be sent exactly once",
                self.set_id, self.version
            ))
        })?;
        let found = document::identify_all(&ic, &set, def);
        let one = match found.as_slice() {
            [one] => one,
            [] => {
                let fields: Vec<String> = spec.id.iter().map(ToString::to_string).collect();
                return Err(Refusal::Key(format!(
                    "{} {} is empty: the document's number is its key",
                    self.set_id,
                    fields.join(" / ")
                )));
            }
            more => {
                return Err(Refusal::Key(format!(
                    "the set carries {} documents (one per {}); send each in a set of its own",
                    more.len(),
                    spec.per
                        .as_ref()
                        .map(|p| p.ids.join(","))
                        .unwrap_or_default()
                )))
            }
        };
        // Our own key's first part is us (ISA05:ISA06); the partner follows, so that one
        // invoice number sent to two partners is two documents.
        let ours = format!(
            "{}:{}:",
            document::part(self.ours.0.as_bytes()),
            document::part(self.ours.1.as_bytes())
        );
        let rest = one.key.strip_prefix(&ours).unwrap_or(&one.key);
        self.key = format!(
            "{ours}{}:{}:{rest}",
            self.partner.id_qualifier, self.partner.id
        );
        self.document_id = one.document_id.clone();
        self.fingerprint = one.fingerprint.clone();
        self.validation = started.elapsed();
        Ok(())
    }

    /// The interchange that carries the document alone, with these numbers, at this time:
    /// the same arguments always give the same bytes.
    pub fn render(&self, numbers: Numbers, when: DateTime<Utc>) -> Result<Vec<u8>, Refusal> {
        render_together(
            &[Placed {
                document: self,
                gs06: numbers.gs06,
                st02: 1,
            }],
            numbers.isa13,
            when,
        )
    }

    /// What may share an interchange with this document: the same partner, identity of
    /// ours, usage and release (ISA12 follows the release). Groups within it are by GS01.
    pub fn envelope_key(&self) -> EnvelopeKey {
        (
            self.partner.key(),
            format!("{}:{}", self.ours.0, self.ours.1),
            self.usage == Usage::Test,
            self.version.clone(),
        )
    }

    /// This document's set with its ST02 and the envelope it would travel in alone.
    fn alone(
        &self,
        gs06: u32,
        st02: u32,
        isa13: u32,
        when: DateTime<Utc>,
    ) -> Result<JsonInterchange, Refusal> {
        let delimiters = match &self.partner.ack.delimiters {
            Some(d) => (d.delimiters, d.line_ending),
            None => (crate::translate::ONE_SET_DELIMITERS, "\n"),
        };
        let envelope = crate::translate::OneSetEnvelope {
            sender: format!("{}:{}", self.ours.0, self.ours.1),
            receiver: self.partner.key(),
            isa_date: when.format("%y%m%d").to_string(),
            isa_time: when.format("%H%M").to_string(),
            isa13: format!("{isa13:09}"),
            usage: match self.usage {
                Usage::Production => "P".into(),
                Usage::Test => "T".into(),
            },
            gs01: self.functional_id.clone(),
            gs02: self.ours.1.clone(),
            gs03: self.partner.id.clone(),
            gs04: when.format("%Y%m%d").to_string(),
            gs05: when.format("%H%M").to_string(),
            gs06: gs06.to_string(),
            gs08: self.version.clone(),
            st02: format!("{st02:04}"),
        };
        let doc = crate::translate::one_set_document(
            &envelope,
            delimiters,
            &self.set_id,
            &self.st_rest,
            self.body.clone(),
        );
        doc.interchanges
            .into_iter()
            .next()
            .ok_or_else(|| Refusal::Set("the envelope writer made no interchange".into()))
    }
}

/// Partner, identity of ours, test usage, release: what documents sharing an interchange
/// have in common.
pub type EnvelopeKey = (String, String, bool, String);

/// A document's place in an interchange of several: its group's GS06 and its ST02.
#[derive(Debug, Clone, Copy)]
pub struct Placed<'a> {
    pub document: &'a Prepared,
    pub gs06: u32,
    pub st02: u32,
}

/// The interchange `isa13` carrying `placed` (documents sharing an [`Prepared::envelope_key`],
/// the first one's envelope), each set in the group of its GS06 in the order given: the
/// same arguments always give the same bytes.
pub fn render_together(
    placed: &[Placed<'_>],
    isa13: u32,
    when: DateTime<Utc>,
) -> Result<Vec<u8>, Refusal> {
    let mut interchange: Option<JsonInterchange> = None;
    for p in placed {
        let alone = p.document.alone(p.gs06, p.st02, isa13, when)?;
        let Some(ic) = interchange.as_mut() else {
            interchange = Some(alone);
            continue;
        };
        for group in alone.groups {
            let same = |g: &&mut crate::translate::JsonGroup| g.gs.get(5) == group.gs.get(5);
            match ic.groups.iter_mut().find(same) {
                Some(g) => g.sets.extend(group.sets),
                None => ic.groups.push(group),
            }
        }
    }
    let mut ic = interchange.ok_or_else(|| Refusal::Set("no document to envelope".into()))?;
    let simple = |n: usize| JsonElement::Simple(n.to_string());
    for g in &mut ic.groups {
        if let Some(ge01) = g.ge.as_mut().and_then(|ge| ge.first_mut()) {
            *ge01 = simple(g.sets.len());
        }
    }
    if let Some(iea01) = ic.iea.as_mut().and_then(|iea| iea.first_mut()) {
        *iea01 = simple(ic.groups.len());
    }
    let doc = crate::translate::Document {
        encoding: crate::translate::Encoding::Utf8,
        interchanges: vec![ic],
    };
    let mut out = Vec::new();
    crate::translate::render(&doc, &mut out).map_err(|e| Refusal::Set(e.to_string()))?;
    Ok(out)
}

/// What a partner's acknowledgment says about something we sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    /// A TA1 about our interchange ISA13: accepted (`A`), accepted with errors (`E`),
    /// rejected (`R`), with its note code (TA105).
    Interchange {
        isa13: u32,
        status: String,
        note: String,
    },
    /// A 997/999's AK2 loop about one of our sets: GS06 (AK102), ST02 (AK202), the status
    /// (AK501/IK501) and the errors' segments (AK3/AK4, IK3/IK4) as they were sent.
    Set {
        gs06: u32,
        st02: String,
        status: String,
        detail: String,
        kind: &'static str,
    },
    /// A 997/999's group whose sets are not listed one by one (AK9 alone): every set of our
    /// group GS06.
    Group {
        gs06: u32,
        status: String,
        detail: String,
        kind: &'static str,
    },
    /// An acknowledgment whose number of ours cannot be read (a TA101 or AK102 that is not
    /// a control number, a 997 without AK1): it names nothing, and is kept as unmatched.
    Unnumbered { kind: &'static str, what: String },
}

impl Said {
    /// `TA1`, `997` or `999`.
    pub fn kind(&self) -> &'static str {
        match self {
            Said::Interchange { .. } => "TA1",
            Said::Set { kind, .. } | Said::Group { kind, .. } | Said::Unnumbered { kind, .. } => {
                kind
            }
        }
    }

    /// The ISA13 of ours it names (a TA1's).
    pub fn isa13(&self) -> Option<u32> {
        match self {
            Said::Interchange { isa13, .. } => Some(*isa13),
            _ => None,
        }
    }

    /// The GS06 of ours it names (a 997/999's AK102).
    pub fn gs06(&self) -> Option<u32> {
        match self {
            Said::Set { gs06, .. } | Said::Group { gs06, .. } => Some(*gs06),
            Said::Interchange { .. } | Said::Unnumbered { .. } => None,
        }
    }

    /// The ST02 of ours it names (AK202); `None`: every set it covers.
    pub fn st02(&self) -> Option<&str> {
        match self {
            Said::Set { st02, .. } => Some(st02),
            _ => None,
        }
    }

    /// What it makes of the documents it names: `accepted`, `accepted_with_errors`,
    /// `partially_accepted` or `rejected`; `None` when it settles nothing (a TA1 that
    /// accepts the envelope leaves the 997 to come; a status we cannot read).
    pub fn state(&self) -> Option<&'static str> {
        let status = match self {
            Said::Interchange { status, .. } => {
                return (status == "R").then_some("rejected");
            }
            Said::Unnumbered { .. } => return None,
            Said::Set { status, .. } | Said::Group { status, .. } => status.as_str(),
        };
        match status {
            "A" => Some("accepted"),
            "E" => Some("accepted_with_errors"),
            "P" => Some("partially_accepted"),
            "M" | "R" | "W" | "X" => Some("rejected"),
            _ => None,
        }
    }

    /// What the desk reads of it: the status, a TA1's note code, a 997's AK3/AK4 segments.
    pub fn detail(&self) -> String {
        match self {
            Said::Interchange { status, note, .. } => format!("TA1 {status} {note}"),
            Said::Set {
                status,
                detail,
                kind,
                ..
            }
            | Said::Group {
                status,
                detail,
                kind,
                ..
            } => format!("{kind} {status} {detail}").trim_end().to_string(),
            Said::Unnumbered { kind, what } => format!("{kind} {what}"),
        }
    }
}

/// The longest error detail kept of one acknowledgment (its AK3/AK4 segments).
const MAX_DETAIL: usize = 2000;

/// What an interchange from a partner acknowledges of ours: its TA1s, and each 997 or 999.
pub fn acknowledged(ic: &Interchange<'_>) -> Vec<Said> {
    let mut said = Vec::new();
    for ta1 in &ic.ta1 {
        let ta101 = ta1.element(1).unwrap_or_default();
        said.push(match number(ta101) {
            Some(isa13) => Said::Interchange {
                isa13,
                status: text(ta1.element(4).unwrap_or_default()),
                note: text(ta1.element(5).unwrap_or_default()),
            },
            None => Said::Unnumbered {
                kind: "TA1",
                what: format!("TA101 {:?} is not a control number", text(ta101)),
            },
        });
    }
    for group in &ic.groups {
        for set in &group.sets {
            let kind = match set.st.element(1).unwrap_or_default() {
                b"997" => "997",
                b"999" => "999",
                _ => continue,
            };
            said.extend(read_ack(set.body.segments(), kind));
        }
    }
    said
}

/// One 997/999 set's body: AK1 names our group, each AK2 loop one of our sets, AK9 the group.
fn read_ack<'a>(segments: impl Iterator<Item = Segment<'a>>, kind: &'static str) -> Vec<Said> {
    let mut said = Vec::new();
    let mut gs06 = None;
    let mut open: Option<(String, String)> = None; // ST02, detail
    let mut any_set = false;
    let close = |open: &mut Option<(String, String)>,
                 status: String,
                 said: &mut Vec<Said>,
                 gs06| match (open.take(), gs06) {
        (Some((st02, detail)), Some(gs06)) => said.push(Said::Set {
            gs06,
            st02,
            status,
            detail,
            kind,
        }),
        (Some((st02, _)), None) => said.push(Said::Unnumbered {
            kind,
            what: format!("AK2 ST02 {st02} {status} under no readable AK102"),
        }),
        (None, _) => {}
    };
    for s in segments {
        match s.id {
            b"AK1" => gs06 = number(s.element(2).unwrap_or_default()),
            b"AK2" => {
                close(&mut open, String::new(), &mut said, gs06);
                any_set = true;
                open = Some((text(s.element(2).unwrap_or_default()), String::new()));
            }
            b"AK3" | b"AK4" | b"IK3" | b"IK4" | b"CTX" => {
                if let Some((_, detail)) = open.as_mut() {
                    if detail.len() < MAX_DETAIL {
                        let line = s
                            .elements()
                            .map(|e| text(e.value))
                            .collect::<Vec<_>>()
                            .join("*");
                        let segment = format!("{}*{line}~", text(s.id));
                        let room = MAX_DETAIL.saturating_sub(detail.len());
                        // Cut at a character's boundary: a partner's bytes may be any text.
                        detail.push_str(crate::text::bounded(&segment, room));
                    }
                }
            }
            b"AK5" | b"IK5" => {
                let status = text(s.element(1).unwrap_or_default());
                close(&mut open, status, &mut said, gs06);
            }
            b"AK9" => {
                close(&mut open, String::new(), &mut said, gs06);
                if let (false, Some(gs06)) = (any_set, gs06) {
                    said.push(Said::Group {
                        gs06,
                        status: text(s.element(1).unwrap_or_default()),
                        detail: String::new(),
                        kind,
                    });
                }
            }
            _ => {}
        }
    }
    close(&mut open, String::new(), &mut said, gs06);
    said
}

fn number(v: &[u8]) -> Option<u32> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 9 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// A value from a partner's acknowledgment, bounded and printable.
fn text(v: &[u8]) -> String {
    let s = String::from_utf8_lossy(v);
    crate::text::printable(crate::text::bounded(&s, 80)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(text: &str) -> Vec<Said> {
        let ic = Interchanges::new(text.as_bytes(), Limits::default())
            .next()
            .and_then(Result::ok)
            .expect("an interchange");
        acknowledged(&ic)
    }

    const ISA: &str = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *261201*0930*^*00501*000000777*0*P*>~";

    #[test]
    fn a_999_names_each_set_and_its_status_and_a_long_detail_is_cut_at_a_character() {
        let many =
            "IK3*N1*5**8~IK4*2*98*7*\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}~"
                .repeat(200);
        let text = format!(
            "{ISA}GS*FA*ACME*X12GATE*20261201*0930*777*X*005010X231A1~ST*999*0001*005010X231A1~AK1*HC*12*005010X222A1~AK2*837*0001~{many}IK5*E~AK2*837*0002~IK5*R*5~AK9*P*2*2*1~SE*9*0001~GE*1*777~IEA*1*000000777~"
        );
        let said = said(&text);
        assert_eq!(said.len(), 2);
        assert_eq!(said[0].state(), Some("accepted_with_errors"));
        assert_eq!((said[0].gs06(), said[0].st02()), (Some(12), Some("0001")));
        assert!(said[0].detail().len() <= MAX_DETAIL + 10);
        assert_eq!(said[1].state(), Some("rejected"));
        assert_eq!(said[1].kind(), "999");
    }

    #[test]
    fn an_acknowledgment_without_a_readable_number_of_ours_is_kept_unnumbered() {
        let text = format!(
            "{ISA}TA1*ABC*261201*0930*R*006~GS*FA*ACME*X12GATE*20261201*0930*777*X*004010~ST*997*0001~AK1*IN*X9~AK2*810*0001~AK5*A~AK9*A*1*1*1~SE*6*0001~GE*1*777~IEA*1*000000777~"
        );
        let said = said(&text);
        assert_eq!(said.len(), 2);
        assert!(said
            .iter()
            .all(|s| s.gs06().is_none() && s.isa13().is_none() && s.state().is_none()));
        assert_eq!(
            said[0].detail(),
            "TA1 TA101 \"ABC\" is not a control number"
        );
        assert_eq!(
            said[1].detail(),
            "997 AK2 ST02 0001 A under no readable AK102"
        );
    }

    #[test]
    fn a_997_without_set_loops_speaks_for_its_group_and_a_ta1_for_its_interchange() {
        let text = format!(
            "{ISA}TA1*000000042*261201*0930*R*006~GS*FA*ACME*X12GATE*20261201*0930*777*X*004010~ST*997*0001~AK1*IN*9~AK9*P*3*3*2~SE*4*0001~GE*1*777~IEA*1*000000777~"
        );
        let said = said(&text);
        assert_eq!(said.len(), 2);
        assert_eq!(
            (said[0].isa13(), said[0].state()),
            (Some(42), Some("rejected"))
        );
        assert_eq!(said[0].detail(), "TA1 R 006");
        assert_eq!((said[1].gs06(), said[1].st02()), (Some(9), None));
        assert_eq!(said[1].state(), Some("partially_accepted"));
    }
}
