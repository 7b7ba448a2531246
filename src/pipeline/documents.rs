//! Business documents on an interchange's way through `process`: which accepted sets carry
//! one, what the registry decides for each (in the transaction that prepares the
//! interchange), and the files that deliver them; and the deliveries that happen outside an
//! interchange's round (an operator's release, a wait for an original that ran out).

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::{Config, Partner};
use crate::document::{self, DocumentDisposition, Identified, Usage};
use crate::outputs;
use crate::registry::{
    Batch, Decided, Delivery, EventKind, Queue, Registry, Release, Released, Sighting,
    NO_TEST_DESTINATION,
};

use crate::x12::{Group, Interchange, TransactionSet};

use super::flight::{Folder, Item, Round};
use super::ProcessError;

/// One document of an interchange, as `process --json` and the history report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentReport {
    pub set: String,
    pub st02: String,
    pub key: String,
    pub disposition: DocumentDisposition,
    /// `P`, or `T` for a test document (its key ends in `:test`).
    #[serde(default)]
    pub usage: Usage,
    /// Why a document written now goes to no destination: a test document whose partner
    /// names no `test_destinations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undelivered: Option<String>,
    /// The interchange of the sighting this one repeats or conflicts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<String>,
    /// The file that delivers it, when it is delivered now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The business system's reference for it, once a delivery returns one.
    pub result_ref: Option<String>,
}

/// One run of an interchange's documents, decided: what they hand over. A large
/// interchange is decided, made and handed over a run at a time, so that what it holds of
/// its documents is one run's.
#[derive(Default)]
pub(super) struct Planned {
    /// The documents, kept (and queued for their destinations) with the next run's
    /// transaction, or the completion's for the last run.
    pub named: Vec<Named>,
    /// Parked documents of this partner that this interchange's original let go.
    pub released: Vec<Released>,
    /// How many documents the run decided.
    pub decided: usize,
}

/// The documents of one interchange across its runs: what is held of each until the
/// interchange completes is a few bytes (a flag per set; on a later attempt a sighting's id
/// too), and a report for the first [`REPORTED`].
pub(super) struct Progress {
    /// `[group][set]`: the set carries a document, delivered in its own file and so left
    /// out of the interchange's translation.
    pub keyed: Vec<Vec<bool>>,
    /// Where the next run starts (group, set); none once every set was planned.
    pub next: Option<(usize, usize)>,
    /// Every sighting a later attempt decided (an earlier attempt's others are withdrawn);
    /// empty on a first attempt, which has nothing to withdraw.
    pub recorded: Vec<i64>,
    /// The reports of the first [`REPORTED`] documents.
    pub reports: Vec<DocumentReport>,
    /// How many documents there were, and how many of them new.
    pub total: usize,
    pub new: usize,
}

/// The documents (and outputs) of one interchange that its report lists; `documents_total`
/// and `documents_new` count them all, and the registry has every one.
pub const REPORTED: usize = 1_000;

impl Progress {
    /// Nothing planned yet; `planned`: whether there is anything to plan (the interchange
    /// was not rejected).
    pub fn new(ic: &crate::x12::Interchange<'_>, planned: bool) -> Self {
        Progress {
            keyed: ic
                .groups
                .iter()
                .map(|g| vec![false; g.sets.len()])
                .collect(),
            next: planned.then_some((0, 0)),
            recorded: Vec::new(),
            reports: Vec::new(),
            total: 0,
            new: 0,
        }
    }

    /// Counts a document; `report` makes its report while the list has room (past it, what
    /// a report needs is not looked up).
    fn report(
        &mut self,
        disposition: DocumentDisposition,
        report: impl FnOnce() -> Result<DocumentReport, ProcessError>,
    ) -> Result<(), ProcessError> {
        self.total += 1;
        if disposition == DocumentDisposition::New {
            self.new += 1;
        }
        if self.reports.len() < REPORTED {
            self.reports.push(report()?);
        }
        Ok(())
    }

    /// Whether the interchange's own translation file is written: it holds the accepted
    /// sets that carry no document (and stays as before for an interchange without any).
    pub fn interchange_file(&self, accepted: &dyn Fn(usize, usize) -> bool) -> bool {
        let mut any_keyed = false;
        for (gi, sets) in self.keyed.iter().enumerate() {
            for (si, keyed) in sets.iter().enumerate() {
                if !keyed && accepted(gi, si) {
                    return true;
                }
                any_keyed |= keyed;
            }
        }
        !any_keyed
    }

    /// Moves the reports into `report`, saying how many there were when it lists fewer.
    pub fn move_into(&mut self, report: &mut crate::pipeline::Report) {
        report.documents = std::mem::take(&mut self.reports);
        if self.total > report.documents.len() {
            report.documents_total = Some(self.total);
            report.documents_new = Some(self.new);
        }
    }
}

/// A document as its completion keeps it and hands it to its destinations.
#[derive(Debug, Clone)]
pub(super) struct Named {
    pub id: i64,
    /// Its file's name, in `out/` (`out/test/`) or a folder destination's folder.
    pub name: String,
    /// Its JSON.
    pub body: Body,
    pub key: String,
    pub set: String,
    /// Shared by every document of an interchange.
    pub partner: Arc<str>,
    pub interchange: Arc<str>,
    pub correlation: Arc<str>,
    /// What its destination dedupes it by.
    pub idempotency: String,
}

/// A document's JSON: made, or to be made when its run is (its set read again from the
/// interchange in memory, so that a run's documents hold a few numbers each until then).
#[derive(Debug, Clone)]
pub(super) enum Body {
    /// Packed as the registry keeps it (on the core that made it).
    Made(crate::registry::Packed),
    ToMake {
        group: usize,
        set: usize,
        /// For a set cut by loop: the part.
        part: Option<crate::document::Part>,
        decided: crate::registry::Decided,
    },
}

/// What a destination dedupes a sighting by: its document key, so that a resend is booked
/// once; for a conflict an operator released, the key with the sighting's number, since its
/// content is not the one booked under the key (sent with the key, a deduping ERP would
/// answer 409 and the operator's decision would be lost).
fn idempotency_key(key: &str, disposition: DocumentDisposition, sighting: i64) -> String {
    if disposition == DocumentDisposition::Conflict {
        format!("{key}.{sighting}")
    } else {
        key.to_string()
    }
}

/// `QUAL:ID:ISA13` of an interchange key (whose scope may name the receiver too).
fn correlation_of(interchange_key: &str) -> String {
    match interchange_key.split_once('>') {
        Some((sender, rest)) => rest.rsplit_once(':').map_or_else(
            || interchange_key.to_string(),
            |(_, n)| format!("{sender}:{n}"),
        ),
        None => interchange_key.to_string(),
    }
}

/// Where the file of the document `key` is written: `out/`, or `out/test/` for a test one.
fn folder_of(key: &str) -> Folder {
    Folder::out(Usage::of_key(key))
}

/// A document's file name: its key's, or for a later sighting delivered too (a duplicate
/// delivered again, a conflict released) its key's with the sighting's number in the
/// registry, which a takeover finds again.
fn file_name(key: &str, first: bool, sighting: i64) -> String {
    if first {
        format!("{}.json", outputs::safe_name(key))
    } else {
        format!("{}.{sighting}.json", outputs::safe_name(key))
    }
}

/// Records and decides the documents of the next run of accepted sets of `it` (inside the
/// prepare transaction, or a run's own), about `budget` of them (a set is never cut), and
/// plans the files that deliver them; `progress` says where the run starts and learns where
/// the next one does.
pub(super) fn plan(
    b: &Batch<'_>,
    r: &Round<'_>,
    it: &Item<'_>,
    accepted: &dyn Fn(usize, usize) -> bool,
    progress: &mut Progress,
    budget: usize,
) -> Result<Planned, ProcessError> {
    let reported = progress.reports.len();
    let planned = plan_run(b, r, it, accepted, progress, budget)?;
    // What the first delivery of each duplicate produced, for the sender of a repeat: asked
    // for once for the run's reports (one round trip on PostgreSQL, where it was one each).
    let duplicates: Vec<(usize, &str)> = progress
        .reports
        .iter()
        .enumerate()
        .skip(reported)
        .filter(|(_, d)| d.disposition == DocumentDisposition::Duplicate)
        .map(|(i, d)| (i, d.key.as_str()))
        .collect();
    let keys: Vec<&str> = duplicates.iter().map(|(_, k)| *k).collect();
    let found = b.result_refs(&keys)?;
    let at: Vec<usize> = duplicates.iter().map(|(i, _)| *i).collect();
    for (i, result_ref) in at.into_iter().zip(found) {
        if let Some(report) = progress.reports.get_mut(i) {
            report.result_ref = result_ref;
        }
    }
    Ok(planned)
}

fn plan_run(
    b: &Batch<'_>,
    r: &Round<'_>,
    it: &Item<'_>,
    accepted: &dyn Fn(usize, usize) -> bool,
    progress: &mut Progress,
    budget: usize,
) -> Result<Planned, ProcessError> {
    let ic = &it.ic;
    let mut planned = Planned::default();
    let Some((first_group, first_set)) = progress.next.take() else {
        return Ok(planned);
    };
    let (mut in_run, mut in_bytes) = (0usize, 0usize);
    let run = RunOf::new(r, it);
    let mut visit = |gi: usize,
                     si: usize,
                     ic: &Interchange<'_>,
                     group: &Group<'_>,
                     set: &TransactionSet<'_>|
     -> Result<bool, ProcessError> {
        if in_run >= budget || in_bytes >= RUN_BYTES {
            progress.next = Some((gi, si));
            return Ok(false);
        }
        if !accepted(gi, si) {
            return Ok(true);
        }
        let version = group.gs.element(8).unwrap_or_default();
        let Some(def) = run
            .schemas
            .find(version, set.st.element(1).unwrap_or_default())
        else {
            return Ok(true);
        };
        let found = document::identify_all_known(ic, set, def, it.sets.of(set));
        if found.is_empty() {
            return Ok(true);
        }
        if let Some(k) = progress.keyed.get_mut(gi).and_then(|g| g.get_mut(si)) {
            *k = true;
        }
        in_run += found.len();
        in_bytes = in_bytes.saturating_add(set.body.len());
        let at = At {
            gi,
            si,
            ic,
            group,
            set,
            st02: document::part(set.st.element(2).unwrap_or_default()).into_owned(),
        };
        for d in found {
            run.document(b, &at, &d, &mut planned, progress)?;
        }
        Ok(true)
    };
    match it.large {
        Some(large) => large.each_set((first_group, first_set), &mut visit)?,
        None => each_set(ic, (first_group, first_set), &mut visit)?,
    }
    // A run full by its bytes is full for the interchanges after this one too.
    planned.decided = match in_bytes >= RUN_BYTES {
        true => budget.max(in_run),
        false => in_run,
    };
    Ok(shrunk(planned))
}

/// The X12 bytes of the sets one run decides, at most (the first set of a run whatever its
/// size): a run's documents' JSON (about five times their X12) is held until the transaction
/// that keeps it, so this bounds that memory where `documents_per_run` counts documents.
const RUN_BYTES: usize = 4 << 20;

/// What each document of an interchange's run is planned with.
struct RunOf<'a, 'c, 'i> {
    r: &'a Round<'c>,
    it: &'a Item<'i>,
    /// Only a later attempt withdraws what an earlier one recorded and it did not decide
    /// again: a first attempt keeps no ids (8 bytes a document, 8 MB for a million).
    again: bool,
    partner: String,
    correlation: String,
    /// The partner, interchange and correlation id every file of the run names, shared.
    shared: (Arc<str>, Arc<str>, Arc<str>),
    /// The sender's guide, when it has one, names its documents as it read them.
    schemas: &'c crate::schema::Schemas,
}

/// The set a document is cut from, and where it is.
struct At<'s, 'x> {
    gi: usize,
    si: usize,
    ic: &'s Interchange<'x>,
    group: &'s Group<'x>,
    set: &'s TransactionSet<'x>,
    st02: String,
}

impl<'a, 'c, 'i> RunOf<'a, 'c, 'i> {
    fn new(r: &'a Round<'c>, it: &'a Item<'i>) -> Self {
        let partner = it.partner.key();
        let correlation = it.report.correlation_id.clone().unwrap_or_default();
        let shared = (
            partner.as_str().into(),
            it.key.as_str().into(),
            correlation.as_str().into(),
        );
        RunOf {
            r,
            it,
            again: it.report.attempt.is_some_and(|a| a > 1),
            schemas: r
                .schemas
                .for_sender(it.ic.isa.trimmed(5), it.ic.isa.trimmed(6)),
            partner,
            correlation,
            shared,
        }
    }

    /// One document recorded and decided, its file planned, its report kept, and the
    /// parked documents its original lets go planned too.
    fn document(
        &self,
        b: &Batch<'_>,
        at: &At<'_, '_>,
        d: &Identified,
        planned: &mut Planned,
        progress: &mut Progress,
    ) -> Result<(), ProcessError> {
        let it = self.it;
        let position = d.position(at.gi, at.si);
        let (decided, released) = b.record_document(&Sighting {
            key: &d.key,
            subject: &d.subject,
            partner: &self.partner,
            set_id: &d.set_id,
            role: d.role,
            version: d.version.as_deref(),
            fingerprint: &d.fingerprint,
            interchange_key: &it.key,
            position: &position,
            st02: &at.st02,
            deliver_duplicates: it.partner.duplicates.documents
                == crate::config::DuplicateDocuments::Deliver,
        })?;
        if self.again {
            progress.recorded.push(decided.id);
        }
        if matches!(decided.delivery, Delivery::Held | Delivery::Parked) && !decided.again {
            let mut body = Vec::new();
            self.rest(at, d, &mut body)
                .map_err(|cause| ProcessError::Io {
                    path: it.report.file.clone(),
                    cause,
                })?;
            b.keep_document_body(decided.id, &body)?;
        }
        log_decision(d, &decided);
        // A waiting or held document is written by whoever lets it go (from its stored
        // rest), never by its own interchange: a takeover writes it once.
        let own = matches!(
            decided.disposition,
            DocumentDisposition::New | DocumentDisposition::Duplicate
        );
        let (output, undelivered) =
            if own && matches!(decided.delivery, Delivery::Pending | Delivery::Delivered) {
                self.deliver_now(at, d, &decided, planned)?
            } else {
                (None, None)
            };
        progress.report(decided.disposition, || {
            Ok(DocumentReport {
                set: d.set_id.clone(),
                st02: at.st02.clone(),
                key: d.key.clone(),
                disposition: decided.disposition,
                usage: d.usage,
                undelivered,
                duplicate_of: decided.duplicate_of.clone(),
                output,
                // A duplicate's, asked for with the run's others (see `plan`).
                result_ref: None,
            })
        })?;
        for rel in released {
            self.let_go(rel, planned);
        }
        Ok(())
    }

    /// The rest of a document's file (all but its head), written to `out`.
    fn rest(
        &self,
        at: &At<'_, '_>,
        d: &Identified,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        document::write_rest(
            at.ic,
            at.group,
            at.set,
            d,
            &document::Written {
                correlation_id: &self.correlation,
                utf8: self.it.utf8,
                form: self.it.partner.output.translation,
                schemas: Some(self.schemas),
            },
            out,
        )
    }

    /// A document delivered now, planned; its file in `out/` when it goes there, and why it
    /// goes to no destination when it does not.
    fn deliver_now(
        &self,
        at: &At<'_, '_>,
        d: &Identified,
        decided: &Decided,
        planned: &mut Planned,
    ) -> Result<(Option<String>, Option<String>), ProcessError> {
        let (r, it) = (self.r, self.it);
        let name = file_name(&d.key, decided.first, decided.id);
        let goes = r.config.destinations_for(&it.partner, &d.set_id, d.usage);
        let output = goes
            .iter()
            .any(|g| g.name == crate::config::OUT)
            .then(|| shown(Folder::out(d.usage).path(&r.config.gateway), &name));
        let undelivered = (goes.is_empty()).then(|| NO_TEST_DESTINATION.to_string());
        let body = if it.large.is_some() {
            // Read again only now: written from memory with the run.
            let mut bytes = document::head(&d.key, &delivery_of(decided, &it.key));
            self.rest(at, d, &mut bytes)
                .map_err(|cause| ProcessError::Io {
                    path: it.report.file.clone(),
                    cause,
                })?;
            bytes.extend_from_slice(document::END);
            Body::Made(crate::registry::Packed::pack(&bytes))
        } else {
            Body::ToMake {
                group: at.gi,
                set: at.si,
                part: d.part.clone(),
                decided: decided.clone(),
            }
        };
        let (partner, interchange, correlation) = &self.shared;
        planned.named.push(Named {
            id: decided.id,
            name,
            body,
            key: d.key.clone(),
            set: d.set_id.clone(),
            partner: partner.clone(),
            interchange: interchange.clone(),
            correlation: correlation.clone(),
            idempotency: idempotency_key(&d.key, decided.disposition, decided.id),
        });
        Ok((output, undelivered))
    }

    /// A parked document this one's original lets go, planned.
    fn let_go(&self, rel: Released, planned: &mut Planned) {
        planned.named.push(Named {
            id: rel.id,
            name: file_name(&rel.key, rel.first, rel.id),
            body: Body::Made(crate::registry::Packed::pack(&released_file(&rel))),
            key: rel.key.clone(),
            set: rel.set_id.clone(),
            partner: self.shared.0.clone(),
            interchange: rel.interchange_key.as_str().into(),
            correlation: correlation_of(&rel.interchange_key).into(),
            idempotency: idempotency_key(&rel.key, rel.disposition, rel.id),
        });
        tracing::info!(document = %crate::text::printable(&rel.key), waited_in = %crate::text::printable(&rel.interchange_key), "delivering a waiting document after its original");
        planned.released.push(rel);
    }
}

/// [`super::large::Large::each_set`] for an interchange read whole.
fn each_set(
    ic: &Interchange<'_>,
    from: (usize, usize),
    visit: &mut super::large::Visit<'_>,
) -> Result<(), ProcessError> {
    for (gi, group) in ic.groups.iter().enumerate().skip(from.0) {
        let first = if gi == from.0 { from.1 } else { 0 };
        for si in first..group.sets.len() {
            let Some(set) = group.sets.get(si) else {
                continue;
            };
            if !visit(gi, si, ic, group, &set)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The file in `out/` (`out/test/`) that will deliver `n`, when `out/` is one of its
/// destinations.
pub(super) fn out_file(config: &Config, partner: &Partner, n: &Named) -> Option<String> {
    config
        .destinations_for(partner, &n.set, Usage::of_key(&n.key))
        .iter()
        .any(|d| d.name == crate::config::OUT)
        .then(|| shown(folder_of(&n.key).path(&config.gateway), &n.name))
}

/// A run's lists are held until it is handed over: without their growth's spare room.
fn shrunk(mut planned: Planned) -> Planned {
    planned.named.shrink_to_fit();
    planned
}

/// Writes the file of the document in set `set` of group `group` of `it` (or in `part` of
/// it), as `decided`.
pub(super) fn write_document(
    schemas: &crate::schema::Schemas,
    it: &Item<'_>,
    (group, set, part): (usize, usize, Option<&document::Part>),
    decided: &Decided,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let ic = &it.ic;
    let gone = || std::io::Error::other("a document's set is not where it was decided");
    let g = ic.groups.get(group).ok_or_else(gone)?;
    let s = g.sets.get(set).ok_or_else(gone)?;
    let schemas = schemas.for_sender(ic.isa.trimmed(5), ic.isa.trimmed(6));
    let def = schemas
        .find(
            g.gs.element(8).unwrap_or_default(),
            s.st.element(1).unwrap_or_default(),
        )
        .ok_or_else(gone)?;
    let d = document::identify_to_write(ic, &s, def, part.cloned()).ok_or_else(gone)?;
    out.write_all(&document::head(&d.key, &delivery_of(decided, &it.key)))?;
    document::write_rest(
        ic,
        g,
        &s,
        &d,
        &document::Written {
            correlation_id: it.report.correlation_id.as_deref().unwrap_or_default(),
            utf8: it.utf8,
            form: it.partner.output.translation,
            schemas: Some(schemas),
        },
        out,
    )?;
    out.write_all(document::END)
}

fn delivery_of<'a>(decided: &'a Decided, interchange: &'a str) -> document::Delivery<'a> {
    document::Delivery {
        disposition: decided.disposition,
        sequence: decided.sequence,
        interchange,
        duplicate_of: decided.duplicate_of.as_deref(),
        original_missing: decided.original_missing,
    }
}

/// The file of a document delivered from its stored rest.
fn released_file(rel: &Released) -> Vec<u8> {
    let mut bytes = document::head(
        &rel.key,
        &document::Delivery {
            disposition: rel.disposition,
            sequence: Some(rel.sequence),
            interchange: &rel.interchange_key,
            duplicate_of: rel.duplicate_of.as_deref(),
            original_missing: rel.original_missing,
        },
    );
    bytes.extend_from_slice(&rel.body);
    bytes.extend_from_slice(document::END);
    bytes
}

fn shown(dir: &Path, name: &str) -> String {
    let p = dir.join(name);
    std::path::absolute(&p).unwrap_or(p).display().to_string()
}

fn log_decision(d: &Identified, decided: &Decided) {
    let key = crate::text::printable(&d.key);
    match decided.disposition {
        DocumentDisposition::New => tracing::debug!(document = %key, "new document"),
        DocumentDisposition::Duplicate => tracing::info!(
            document = %key,
            original = %crate::text::printable(decided.duplicate_of.as_deref().unwrap_or("-")),
            delivered = decided.delivery == Delivery::Pending,
            "duplicate document: seen before with the same content"
        ),
        DocumentDisposition::Conflict => tracing::error!(
            document = %key,
            fingerprint = %d.fingerprint,
            earlier_fingerprint = %decided.earlier_fingerprint.as_deref().unwrap_or("-"),
            earlier = %crate::text::printable(decided.duplicate_of.as_deref().unwrap_or("-")),
            "CONFLICT: document key seen before with other content; held (x12gate documents --held)"
        ),
        DocumentDisposition::Waiting => {
            tracing::info!(document = %key, "change for a document never delivered: waiting for its original")
        }
        DocumentDisposition::Stale => {
            tracing::warn!(document = %key, version = ?d.version, "stale change: a newer change was delivered already; not delivered")
        }
    }
}

/// The documents an interchange carried the first time, as the report of its exact resend
/// lists them (the first [`REPORTED`]; it says how many there were): duplicates of the
/// original's, with the business system's reference for each.
pub(super) fn replayed(
    registry: &Registry,
    interchange: &str,
    report: &mut crate::pipeline::Report,
) -> Result<(), ProcessError> {
    let (rows, total) = registry.first_documents_of(interchange, REPORTED)?;
    if total > rows.len() {
        report.documents_total = Some(total);
        report.documents_new = Some(0);
    }
    // The references not kept on the sightings themselves, asked for all at once.
    let missing: Vec<&str> = rows
        .iter()
        .filter(|r| r.result_ref.is_none())
        .map(|r| r.key.as_str())
        .collect();
    let mut found = registry.result_refs(&missing)?.into_iter();
    let reports = &mut report.documents;
    reports.clear();
    for row in rows {
        let result_ref = match row.result_ref {
            Some(r) => Some(r),
            None => found.next().flatten(),
        };
        reports.push(DocumentReport {
            set: row.set,
            st02: row.st02,
            usage: Usage::of_key(&row.key),
            undelivered: None,
            key: row.key,
            disposition: DocumentDisposition::Duplicate,
            duplicate_of: Some(row.interchange),
            output: None,
            result_ref,
        });
    }
    Ok(())
}

/// Keeps these documents' JSON and queues each for its destinations (`out/` among them,
/// whose files the deliverer writes), in the transaction that completes the round or the
/// release that let them go: the document is durable once, with the decision.
fn hand_over(
    b: &Batch<'_>,
    config: &Config,
    owner: &str,
    named: &[Named],
) -> Result<(), ProcessError> {
    for n in named {
        let Body::Made(body) = &n.body else {
            return Err(ProcessError::Translate(format!(
                "document {} was recorded before it was made",
                crate::text::printable(&n.key)
            )));
        };
        b.hand_over(n.id, &n.name, body)?;
    }
    if named.is_empty() {
        return Ok(());
    }
    // Looked up by key once, not once per document and partner.
    let mut partners: std::collections::HashMap<&str, std::borrow::Cow<'_, Partner>> =
        std::collections::HashMap::new();
    for n in named {
        let partner = partners
            .entry(&n.partner)
            .or_insert_with(|| config.partner_by_key(&n.partner));
        // A test document only to its partner's test destinations, a production one never.
        let folder = folder_of(&n.key);
        let usage = Usage::of_key(&n.key);
        for destination in config.destinations_for(partner, &n.set, usage) {
            b.queue_delivery(&Queue {
                document_id: n.id,
                key: &n.key,
                idempotency_key: &n.idempotency,
                destination: &destination.name,
                partner: &n.partner,
                interchange_key: &n.interchange,
                correlation_id: &n.correlation,
                file: &shown(folder.path(&config.gateway), &n.name),
                queued_by: owner,
            })?;
        }
    }
    Ok(())
}

/// Records, in the transaction after a run's files were written (the next run's, or the
/// completion's), where each of its documents went and hands them to their destinations,
/// with a note for the waiting ones it let go. Done again by a takeover, it changes nothing.
pub(super) fn hand_over_run(
    b: &Batch<'_>,
    config: &Config,
    owner: &str,
    key: &str,
    planned: &Planned,
) -> Result<(), ProcessError> {
    hand_over(b, config, owner, &planned.named)?;
    if !planned.released.is_empty() {
        note(b, EventKind::DocumentsReleased, &planned.released, key)?;
    }
    Ok(())
}

/// In the completion transaction: the last run handed over, and the sightings an earlier
/// attempt recorded that this one did not (`recorded`: the earlier attempts') withdrawn.
pub(super) fn complete(
    b: &Batch<'_>,
    config: &Config,
    owner: &str,
    key: &str,
    recorded: &[(i64, crate::registry::Delivery)],
    last: &Planned,
    progress: &Progress,
) -> Result<(), ProcessError> {
    hand_over_run(b, config, owner, key, last)?;
    let (withdrawn, delivered) = b.withdraw_documents(recorded, &progress.recorded)?;
    if withdrawn > 0 {
        tracing::warn!(
            documents = withdrawn,
            "an earlier attempt's documents withdrawn: this attempt judged the interchange otherwise"
        );
    }
    if delivered > 0 {
        tracing::error!(
            documents = delivered,
            "an earlier attempt delivered documents that this attempt did not decide again (it judged the interchange otherwise): they stay recorded as delivered; check them with x12gate documents --interchange"
        );
    }
    Ok(())
}

fn note(
    b: &Batch<'_>,
    event: EventKind,
    released: &[Released],
    by: &str,
) -> Result<(), ProcessError> {
    for rel in released {
        let detail = serde_json::json!({
            "document": rel.key,
            "set": rel.set_id,
            "st02": rel.st02,
            "interchange": rel.interchange_key,
            "sequence": rel.sequence,
            "original_missing": rel.original_missing,
            "by": by,
        });
        b.record_note(
            event,
            Some(&rel.interchange_key),
            None,
            None,
            &detail.to_string(),
        )?;
    }
    Ok(())
}

/// What a release outside a round did.
#[derive(Debug, Clone, Serialize)]
pub struct ReleaseOutcome {
    pub key: String,
    pub interchange: String,
    pub st02: String,
    pub sequence: i64,
    pub original_missing: bool,
    /// Its file in `out/`, or the destinations it is queued for.
    pub output: String,
}

/// Delivers held or parked documents outside an interchange's round: an operator's release
/// of `key`, or (`None`) every parked document whose partner's `order_wait_hours` ran out.
/// Marked pending, written, then marked delivered: a crash in between leaves them pending
/// for the next release or sweep, which writes the very same files again.
pub fn release(
    config: &Config,
    registry: &mut Registry,
    key: Option<&str>,
    owner: &str,
) -> Result<Vec<ReleaseOutcome>, ProcessError> {
    let now = crate::registry::now_ms();
    let waited = |partner: &str, seen: i64| {
        let hours = config
            .partners
            .iter()
            .find(|p| p.key() == partner)
            .map_or(crate::config::DEFAULT_ORDER_WAIT_HOURS, |p| {
                p.output.order_wait_hours
            });
        now.saturating_sub(seen) >= i64::from(hours) * 3_600_000
    };
    let (which, by) = match key {
        Some(k) => (Release::Key(k), "operator"),
        None => (Release::Due(&waited), "timeout"),
    };
    let released =
        registry.batch(|b| b.release_documents(&which, owner, &crate::owner::is_dead))?;
    if released.is_empty() {
        return Ok(Vec::new());
    }
    // Marked pending, nothing kept yet: the next release or sweep finishes it.
    fail::fail_point!("release.marked", |_| std::process::abort());
    let named: Vec<Named> = released
        .iter()
        .map(|rel| Named {
            id: rel.id,
            name: file_name(&rel.key, rel.first, rel.id),
            body: Body::Made(crate::registry::Packed::pack(&released_file(rel))),
            key: rel.key.clone(),
            set: rel.set_id.clone(),
            partner: rel.partner.as_str().into(),
            interchange: rel.interchange_key.as_str().into(),
            correlation: correlation_of(&rel.interchange_key).into(),
            idempotency: idempotency_key(&rel.key, rel.disposition, rel.id),
        })
        .collect();
    registry.batch(|b| {
        hand_over(b, config, owner, &named)?;
        note(b, EventKind::DocumentsReleased, &released, by)
    })?;
    for rel in &released {
        if rel.original_missing {
            tracing::warn!(document = %crate::text::printable(&rel.key), "delivered without its original (order_wait_hours ran out, or released by an operator)");
        } else {
            tracing::info!(document = %crate::text::printable(&rel.key), "held document released");
        }
    }
    Ok(released
        .into_iter()
        .zip(named)
        .map(|(rel, n)| ReleaseOutcome {
            output: goes_to(config, &n),
            key: rel.key,
            interchange: rel.interchange_key,
            st02: rel.st02,
            sequence: rel.sequence,
            original_missing: rel.original_missing,
        })
        .collect())
}

/// Where a document handed over goes, in words: its file in `out/`, or its destinations.
fn goes_to(config: &Config, n: &Named) -> String {
    let partner = config.partner_by_key(&n.partner);
    let usage = Usage::of_key(&n.key);
    let names: Vec<String> = config
        .destinations_for(&partner, &n.set, usage)
        .iter()
        .map(|d| match d.name == crate::config::OUT {
            true => shown(folder_of(&n.key).path(&config.gateway), &n.name),
            false => d.name.clone(),
        })
        .collect();
    match names.is_empty() {
        true => format!("nowhere ({NO_TEST_DESTINATION})"),
        false => names.join(", "),
    }
}

/// Discards the held or parked documents of `key` (an operator's decision); how many.
pub fn discard(registry: &mut Registry, key: &str) -> Result<usize, ProcessError> {
    registry.batch(|b| {
        let n = b.discard_documents(key)?;
        if n > 0 {
            let detail = serde_json::json!({ "document": key, "discarded": n }).to_string();
            b.record_note(EventKind::DocumentsDiscarded, None, None, None, &detail)?;
        }
        Ok::<_, ProcessError>(n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_conflict_is_sent_under_a_key_of_its_own() {
        let k = "ZZ:ACME:850:PO-1:00:";
        assert_eq!(idempotency_key(k, DocumentDisposition::New, 7), k);
        assert_eq!(idempotency_key(k, DocumentDisposition::Duplicate, 7), k);
        assert_eq!(idempotency_key(k, DocumentDisposition::Waiting, 7), k);
        assert_eq!(
            idempotency_key(k, DocumentDisposition::Conflict, 7),
            "ZZ:ACME:850:PO-1:00:.7"
        );
    }

    #[test]
    fn the_correlation_id_of_a_key_names_the_sender_and_isa13() {
        assert_eq!(correlation_of("ZZ:ACME:000000101"), "ZZ:ACME:000000101");
        assert_eq!(
            correlation_of("ZZ:ACME>ZZ:X12GATE:000000101"),
            "ZZ:ACME:000000101"
        );
    }
}
