//! The EDI desk's tools on one interchange: `show` (everything known about it, from the
//! registry and the folders), `reprocess` (a rejected interchange again, as a new
//! attempt, after its cause was fixed) and `claims release` (a stuck claim freed for the next
//! attempt).
//!
//! "Where is my 997 for 101?" is answered from the key alone: the claim, every content seen
//! under it, the findings of the file as it is now, each acknowledgment sent with our ISA13
//! and GS06, the outputs, where the inbound file was placed, and the history.

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::disposition::Disposition;
use crate::pipeline::{self, Gateway, ProcessError, ProcessOptions, Report, Source};
use crate::registry::{
    ClaimState, Event, EventFilter, EventKind, Record, Registry, RegistryError, Resolved,
};
use crate::schema::Schemas;

/// Why a key cannot be shown or reprocessed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeskError {
    #[error("{0}: the registry has no such interchange")]
    Unknown(String),
    #[error("{given}: several interchanges match ({}); give QUAL:ID:ISA13", .keys.join(", "))]
    Ambiguous { given: String, keys: Vec<String> },
    #[error("{key}: {why}")]
    Refused { key: String, why: String },
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Process(#[from] ProcessError),
}

/// The registry key an operator means: `QUAL:ID:ISA13`, or `ID:ISA13` when only one sender
/// with that id sent that number; the number may be unpadded.
pub fn resolve(registry: &Registry, given: &str) -> Result<String, DeskError> {
    match registry.resolve(given)? {
        Resolved::One(key) => Ok(key),
        Resolved::Unknown => Err(DeskError::Unknown(given.to_string())),
        Resolved::Several(keys) => Err(DeskError::Ambiguous {
            given: given.to_string(),
            keys,
        }),
    }
}

/// One acknowledgment as sent: its kind, file name, and our control numbers in it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SentAck {
    pub kind: String,
    pub name: String,
    pub isa13: Option<String>,
    pub gs06: Vec<String>,
    pub text: String,
}

/// Everything known about one interchange.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Shown {
    pub record: Record,
    /// Whether the claim's owner is alive, for an unfinished claim.
    pub holder: Option<String>,
    pub acks: Vec<SentAck>,
    /// TA1s sent for conflicting contents under this key (read back from the outbox, where
    /// they are still there; the registry keeps only the accepted content's answers).
    pub conflict_acks: Vec<SentAck>,
    /// Where the inbound file is now (the last placement the watcher recorded, or the file
    /// `process` read), if it still exists.
    pub file_now: Option<PathBuf>,
    /// The findings of that file's interchange as the configuration in force judges it.
    pub findings: Vec<String>,
    /// Its segments as the partner sent them (the first [`SEGMENTS_SHOWN`]), each with its
    /// findings: for the page (`show` prints the file's path).
    #[serde(skip)]
    pub segments: Vec<PartnerSegment>,
    #[serde(skip)]
    pub segments_more: usize,
    /// Its business documents: each sighting's decision and delivery (the first
    /// [`SHOWN_DOCUMENTS`]).
    pub documents: Vec<crate::registry::DocumentRow>,
    /// How many more it carried (`documents --interchange` lists them all).
    #[serde(skip_serializing_if = "is_zero")]
    pub documents_more: usize,
    /// Their deliveries to destinations (none for documents whose file in `out/` is the
    /// delivery).
    pub deliveries: Vec<crate::registry::DeliveryRow>,
    /// Received, acknowledged, delivered: each layer with its time.
    pub layers: Layers,
    pub events: Vec<Event>,
}

/// The three layers of an interchange's way, kept apart: the file claimed (received), the
/// answer written (acknowledged, with our numbers), each document handed to the business
/// system (delivered, with the system's reference).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Layers {
    /// When the interchange was first claimed.
    pub received: Option<String>,
    pub acknowledged: Option<Acknowledged>,
    /// Of its first [`SHOWN_DOCUMENTS`] documents.
    pub delivered: Vec<DeliveredLayer>,
    /// How many documents it carried past those.
    #[serde(skip_serializing_if = "is_zero")]
    pub documents_more: usize,
}

/// The documents of one interchange that `show` and the web page look at: an interchange of
/// a million keeps a page small.
pub const SHOWN_DOCUMENTS: usize = crate::pipeline::REPORTED;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The first [`SHOWN_DOCUMENTS`] documents of interchange `key`, how many more it has, and
/// their deliveries.
fn first_documents(
    registry: &Registry,
    key: &str,
) -> Result<
    (
        Vec<crate::registry::DocumentRow>,
        usize,
        Vec<crate::registry::DeliveryRow>,
    ),
    RegistryError,
> {
    let (documents, total) = registry.first_documents_of(key, SHOWN_DOCUMENTS)?;
    let deliveries = match documents.last() {
        Some(last) => registry.deliveries_of_first(key, last.id)?,
        None => Vec::new(),
    };
    let more = total.saturating_sub(documents.len());
    Ok((documents, more, deliveries))
}

/// When the interchange was decided and answered, and with what.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Acknowledged {
    pub at: String,
    /// `997 ISA13 000000007 GS06 7`, one per acknowledgment.
    pub acks: Vec<AckNumbers>,
}

/// `AT (997 ISA13 000000007 GS06 7; ...)`, as `show` and the web page print it.
impl std::fmt::Display for Acknowledged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let acks: Vec<String> = self
            .acks
            .iter()
            .map(|k| {
                format!(
                    "{} ISA13 {} GS06 {}",
                    k.kind,
                    k.isa13.as_deref().unwrap_or("-"),
                    k.gs06.join(",")
                )
            })
            .collect();
        write!(f, "{} ({})", self.at, acks.join("; "))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AckNumbers {
    pub kind: String,
    pub isa13: Option<String>,
    pub gs06: Vec<String>,
}

/// One document's delivery.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeliveredLayer {
    pub document: String,
    /// The destination's name, or `out` for a document whose file in `out/` delivers it;
    /// none for a document never handed to one (a skipped duplicate, a held conflict).
    pub destination: Option<String>,
    /// `delivered`, `queued`, `retrying`, `dead`; or the document's own delivery when it
    /// was never handed to a destination (`none` for a skipped duplicate, `held`, ...).
    pub state: String,
    pub attempts: u32,
    pub at: Option<String>,
    pub result_ref: Option<String>,
}

/// Our ISA13 and GS06s in an acknowledgment we sent.
fn our_numbers(config: &Config, bytes: &[u8]) -> (Option<String>, Vec<String>) {
    let ic = crate::x12::Interchanges::new(bytes, config.limits)
        .flatten()
        .next();
    (
        ic.as_ref().map(|ic| ic.isa.control_number().to_string()),
        ic.as_ref()
            .map(|ic| ic.groups.iter().map(|g| g.gs.text(6).to_string()).collect())
            .unwrap_or_default(),
    )
}

/// The business system's reference for each document key of `documents` (a duplicate's is
/// its original's).
fn result_refs(
    registry: &Registry,
    documents: &[crate::registry::DocumentRow],
) -> Result<std::collections::HashMap<String, String>, RegistryError> {
    // Asked for at once: an interchange has up to a thousand documents shown.
    let mut keys: Vec<&str> = documents.iter().map(|d| d.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    let found = registry.result_refs(&keys)?;
    Ok(keys
        .into_iter()
        .zip(found)
        .filter_map(|(key, r)| Some((key.to_string(), r?)))
        .collect())
}

fn layers_of(
    config: &Config,
    record: &Record,
    answered_ms: Option<i64>,
    (documents, documents_more): (&[crate::registry::DocumentRow], usize),
    deliveries: &[crate::registry::DeliveryRow],
    refs: &std::collections::HashMap<String, String>,
) -> Layers {
    let acknowledged = answered_ms.map(|at| Acknowledged {
        at: crate::time::rfc3339(at),
        acks: record
            .acks
            .iter()
            .map(|a| {
                let (isa13, gs06) = our_numbers(config, &a.bytes);
                AckNumbers {
                    kind: a.kind.clone(),
                    isa13,
                    gs06,
                }
            })
            .collect(),
    });
    // By document, once: an interchange of many documents has as many deliveries.
    let mut by_document: std::collections::HashMap<
        (&str, &str),
        Vec<&crate::registry::DeliveryRow>,
    > = std::collections::HashMap::new();
    for r in deliveries {
        by_document
            .entry((r.key.as_str(), r.interchange.as_str()))
            .or_default()
            .push(r);
    }
    let mut delivered = Vec::new();
    for d in documents {
        let sent = by_document
            .get(&(d.key.as_str(), d.interchange.as_str()))
            .map_or(&[][..], Vec::as_slice);
        let known = || d.result_ref.clone().or_else(|| refs.get(&d.key).cloned());
        if sent.is_empty() {
            let handed = matches!(
                d.delivery,
                crate::registry::Delivery::Delivered | crate::registry::Delivery::Pending
            );
            delivered.push(DeliveredLayer {
                document: d.key.clone(),
                destination: handed.then(|| "out".to_string()),
                state: d.delivery.as_str().into(),
                attempts: 0,
                at: d.delivered_ms.map(crate::time::rfc3339),
                result_ref: known(),
            });
        }
        for r in sent.iter() {
            delivered.push(DeliveredLayer {
                document: d.key.clone(),
                destination: Some(r.destination.clone()),
                state: r.state.as_str().into(),
                attempts: r.attempts,
                at: r.delivered_ms.map(crate::time::rfc3339),
                result_ref: r.result_ref.clone().or_else(known),
            });
        }
    }
    Layers {
        received: Some(crate::time::rfc3339(record.first_seen_ms)),
        acknowledged,
        delivered,
        documents_more,
    }
}

fn placements(events: &[Event]) -> impl Iterator<Item = PathBuf> + '_ {
    events
        .iter()
        .rev()
        .filter(|e| e.event == EventKind::Placed)
        .filter_map(|e| {
            let v: serde_json::Value = serde_json::from_str(&e.detail).ok()?;
            v["placed"].as_str().map(PathBuf::from)
        })
}

/// Where the interchange's file is now: the newest placement (or the file last read) that
/// holds one of the contents recorded under the key, so that a conflicting resend placed in
/// `rejected/` later is not taken for the accepted file; else the newest placement, as
/// before the contents were compared.
fn file_now(
    config: &Config,
    schemas: &Schemas,
    record: &Record,
    events: &[Event],
) -> Option<PathBuf> {
    let ours = |p: &Path| {
        p.is_file()
            && read_in(p, &record.key, config, schemas).is_some_and(|r| {
                record
                    .fingerprints
                    .iter()
                    .any(|(_, g, _)| *g == r.fingerprint)
            })
    };
    placements(events)
        .chain(record.file.iter().map(PathBuf::from))
        .find(|p| ours(p))
        .or_else(|| placements(events).next())
        .or_else(|| record.file.as_ref().map(PathBuf::from))
        .filter(|p| p.is_file())
}

/// An interchange as its file holds it now.
#[derive(Debug, Clone, PartialEq)]
struct ReadNow {
    findings: Vec<crate::finding::Finding>,
    fingerprint: String,
    /// Its first segments as the partner sent them, each with the findings at it (an
    /// interchange read in parts has none: it is too large to show).
    segments: Vec<PartnerSegment>,
    /// How many segments were left out.
    segments_more: usize,
}

/// One segment of the partner's interchange as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartnerSegment {
    /// Its ordinal in the interchange (the ISA is 1).
    pub ordinal: u32,
    /// Its text, control characters escaped, its first [`SEGMENT_SHOWN`] bytes.
    pub text: String,
    /// The findings at it.
    pub findings: Vec<String>,
}

/// The segments of a partner's interchange a page shows, and the bytes of one.
pub const SEGMENTS_SHOWN: usize = 2_000;
pub const SEGMENT_SHOWN: usize = 512;

/// The segments of `ic` (its first [`SEGMENTS_SHOWN`]), each with the findings at it, and
/// how many were left out.
fn partner_segments(
    ic: &crate::x12::Interchange<'_>,
    findings: &[crate::finding::Finding],
) -> (Vec<PartnerSegment>, usize) {
    let terminator = ic.delimiters().segment;
    let bytes = ic.bytes();
    // Counted as the reader counts them: an empty segment (`~~`) has its ordinal too; only
    // what follows the last terminator (a line ending) is none.
    let body = match bytes.iter().rposition(|b| *b == terminator) {
        Some(last) => bytes.get(..last).unwrap_or_default(),
        None => bytes,
    };
    let mut all = body.split(|b| *b == terminator).map(<[u8]>::trim_ascii);
    let segments: Vec<PartnerSegment> = all
        .by_ref()
        .take(SEGMENTS_SHOWN)
        .zip(1u32..)
        .map(|(raw, ordinal)| PartnerSegment {
            ordinal,
            text: crate::text::printable(crate::text::bounded(
                &String::from_utf8_lossy(raw),
                SEGMENT_SHOWN,
            ))
            .into_owned(),
            findings: findings
                .iter()
                .filter(|f| f.position.segment == ordinal)
                .map(ToString::to_string)
                .collect(),
        })
        .collect();
    (segments, all.count())
}

/// Interchange `key` as `file` holds it: its findings and its fingerprint; `None` when the
/// file does not hold it.
fn read_in(file: &Path, key: &str, config: &Config, schemas: &Schemas) -> Option<ReadNow> {
    read_in_pieces(file, key, (config, schemas), crate::input::WINDOW)
}

/// [`read_in`], the file read in pieces of `window` bytes and an interchange larger than one
/// in parts (as `process` reads them): a click on the page costs a piece, not the file.
fn read_in_pieces(
    file: &Path,
    key: &str,
    (config, schemas): (&Config, &Schemas),
    window: usize,
) -> Option<ReadNow> {
    let partner_of = |ic: &crate::x12::Interchange<'_>| pipeline::partner_of(ic, config).0;
    let key_of = |ic: &crate::x12::Interchange<'_>| {
        crate::keys::interchange_key(ic, partner_of(ic).duplicates.interchange_scope)
    };
    let mut reader = crate::input::Reader::open(file, config.limits, window)
        .ok()?
        .in_parts();
    let mut parts: Option<pipeline::PartsPreview<'_>> = None;
    while let Some(piece) = reader.next_piece().ok()? {
        let mut read = piece.interchanges();
        for result in read.by_ref() {
            let Ok(ic) = result else {
                parts = None;
                continue;
            };
            if ic.is_whole() {
                if key_of(&ic) == key {
                    let ignore = partner_of(&ic).duplicates.fingerprint_ignore;
                    let fingerprint = crate::fingerprint::fingerprint(&ic, &ignore);
                    let findings = pipeline::findings(&ic, config, schemas);
                    let (segments, segments_more) = partner_segments(&ic, &findings);
                    return Some(ReadNow {
                        findings,
                        fingerprint,
                        segments,
                        segments_more,
                    });
                }
                continue;
            }
            if ic.is_first_part() {
                parts = (key_of(&ic) == key)
                    .then(|| pipeline::PartsPreview::begin(&ic, config, schemas));
            } else if let Some(p) = &mut parts {
                p.add(&ic);
            }
            if let Some(p) = parts.take_if(|_| ic.is_last_part()) {
                let (findings, fingerprint) = p.found();
                return Some(ReadNow {
                    findings,
                    fingerprint,
                    segments: Vec::new(),
                    segments_more: 0,
                });
            }
        }
        let resume = read.resume();
        reader.advance(resume);
    }
    None
}

/// Everything known about `key`.
pub fn show(
    config: &Config,
    schemas: &Schemas,
    registry: &Registry,
    key: &str,
) -> Result<Shown, DeskError> {
    let record = registry
        .record(key)?
        .ok_or_else(|| DeskError::Unknown(key.to_string()))?;
    let events = registry.history(&EventFilter {
        key: Some(key.to_string()),
        ..EventFilter::default()
    })?;
    let acks = record
        .acks
        .iter()
        .map(|a| {
            let (isa13, gs06) = our_numbers(config, &a.bytes);
            SentAck {
                kind: a.kind.clone(),
                name: Path::new(&a.path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                isa13,
                gs06,
                text: String::from_utf8_lossy(&a.bytes).into_owned(),
            }
        })
        .collect();
    let conflict_acks = events
        .iter()
        .filter(|e| e.event == EventKind::Conflict)
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(&e.detail).ok())
        .flat_map(|v| {
            v["acks"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p.as_str().map(String::from))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .filter_map(|p| {
            let name = Path::new(&p).file_name()?.to_string_lossy().into_owned();
            let bytes = std::fs::read(config.gateway.outbox.join(&name)).ok()?;
            let ic = crate::x12::Interchanges::new(&bytes, config.limits)
                .flatten()
                .next();
            Some(SentAck {
                kind: "ta1".into(),
                isa13: ic.as_ref().map(|ic| ic.isa.control_number().to_string()),
                gs06: Vec::new(),
                text: String::from_utf8_lossy(&bytes).into_owned(),
                name,
            })
        })
        .collect();
    let file_now = file_now(config, schemas, &record, &events);
    let now = file_now
        .as_deref()
        .and_then(|f| read_in(f, key, config, schemas));
    let findings = now
        .as_ref()
        .map(|r| r.findings.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    let (segments, segments_more) = now
        .map(|r| (r.segments, r.segments_more))
        .unwrap_or_default();
    let holder = record
        .owner
        .as_deref()
        .filter(|_| record.state == ClaimState::InFlight)
        .map(crate::owner::describe);
    let (documents, documents_more, deliveries) = first_documents(registry, key)?;
    let refs = result_refs(registry, &documents)?;
    // The answer the acknowledgments kept now belong to: the latest (a reprocess replaces
    // them; the earlier answers are in the history).
    let answered = events
        .iter()
        .rfind(|e| e.event.is_answer())
        .map(|e| e.at_ms);
    let layers = layers_of(
        config,
        &record,
        answered,
        (&documents, documents_more),
        &deliveries,
        &refs,
    );
    Ok(Shown {
        record,
        holder,
        acks,
        conflict_acks,
        file_now,
        findings,
        segments,
        segments_more,
        documents,
        documents_more,
        deliveries,
        layers,
        events,
    })
}

/// Processes `key` again from its stored file (or `file`), as a new attempt with fresh
/// acknowledgments and control numbers; only a rejected interchange unless `force`. The
/// earlier outcome, and the answers sent for it, stay in the history (`reopened`).
pub fn reprocess(
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    key: &str,
    file: Option<&Path>,
    force: bool,
    options: &ProcessOptions,
) -> Result<Report, DeskError> {
    let refused = |why: String| DeskError::Refused {
        key: key.to_string(),
        why,
    };
    let shown = show(config, schemas, registry, key)?;
    let r = &shown.record;
    if r.state != ClaimState::Completed {
        return Err(refused(format!(
            "not completed ({}); see `x12gate claims`",
            r.state
        )));
    }
    if r.disposition != Some(Disposition::Rejected) && !force {
        let disposition = r.disposition.map_or("", Disposition::as_str);
        return Err(refused(format!(
            "it was {disposition}; reprocessing it may deliver it to the ERP a second time (--force does, knowingly)"
        )));
    }
    let source = match file {
        Some(f) => f.to_path_buf(),
        None => shown.file_now.clone().ok_or_else(|| {
            refused("its file is no longer where it was recorded; give a copy with --file".into())
        })?,
    };
    // The same content only: other content under this number is a corrected resend (send it
    // with `process`) or a conflict, never a reprocessing.
    match read_in(&source, key, config, schemas) {
        None => {
            return Err(refused(format!(
                "{} does not hold this interchange",
                source.display()
            )))
        }
        Some(now) if !r.fingerprints.iter().any(|(_, f, _)| *f == now.fingerprint) => {
            return Err(refused(format!(
                "{} holds other content under this control number (fingerprint {}); process it as a new file instead",
                source.display(),
                now.fingerprint.get(..12).unwrap_or(&now.fingerprint)
            )))
        }
        Some(_) => {}
    }
    let Some(was) = registry.reopen(key, force)? else {
        return Err(refused("it changed meanwhile; see `x12gate show`".into()));
    };
    let only = ProcessOptions {
        only: Some(vec![key.to_string()]),
        ..options.clone()
    };
    let sources = [Source::from(source.as_path())];
    let mut outcomes = pipeline::Outcomes::all();
    let outcome = Gateway::new(config, schemas, registry, only)
        .process(&sources, &mut |settled| outcomes.add(&sources, settled))
        .map_err(DeskError::from)
        .and_then(|()| {
            let reports = outcomes
                .into_vec()
                .into_iter()
                .next()
                .map(|o| o.result)
                .transpose()?
                .unwrap_or_default();
            Ok(reports
                .into_iter()
                .find(|rep| rep.key.as_deref() == Some(key)))
        });
    match outcome {
        Ok(Some(report)) => {
            if report.disposition.is_success() {
                // Its file leaves `rejected/` once all it holds is accepted.
                if let Err(e) = crate::rejected::follow(config, registry, &[key.to_string()]) {
                    tracing::warn!(error = %e, "could not move the file out of rejected/");
                }
                // Its documents handed over as `process` hands them (their files in `out/`
                // written now); what fails waits for `deliver` or a watcher.
                let sent = crate::delivery::Deliverer::new(config, &options.owner).pass(
                    registry,
                    crate::delivery::Scope::QueuedBy(&options.owner),
                    &|| false,
                );
                if let Err(e) = sent {
                    tracing::warn!(error = %e, "delivering the reprocessed documents failed; they wait for the next pass");
                }
            }
            Ok(report)
        }
        // Nothing was decided: the interchange is put back as it was, so that a plain resend
        // still meets its earlier outcome.
        other => {
            registry.restore(key, was)?;
            match other {
                Err(e) => Err(e),
                _ => Err(refused(format!(
                    "{} could not be read again; nothing changed",
                    source.display()
                ))),
            }
        }
    }
}

/// What [`release`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// The claim was in flight: it is failed now. Its owner, described.
    From(String),
    /// The claim had failed already: the next attempt takes it over.
    AlreadyFailed,
}

/// Marks `key`'s claim failed so that the next attempt takes it over at once. Refused while
/// its owner is a live process on this host, and, unless `force`, when its owner cannot be
/// checked from here (another host's): taking a live owner's claim would process it twice.
pub fn release(registry: &mut Registry, key: &str, force: bool) -> Result<Released, DeskError> {
    use crate::owner::{describe, liveness, Liveness};
    let refused = |why: String| DeskError::Refused {
        key: key.to_string(),
        why,
    };
    let Some(claim) = registry.unfinished_claim(key)? else {
        return Err(refused("no unfinished claim (see `x12gate claims`)".into()));
    };
    let Some(owner) = claim
        .owner
        .filter(|_| claim.state == crate::registry::ClaimState::InFlight)
    else {
        return Ok(Released::AlreadyFailed);
    };
    match liveness(&owner) {
        Liveness::Alive => {
            return Err(refused(format!(
                "held by {}, which is working on it; not released",
                describe(&owner)
            )))
        }
        Liveness::Unknown if !force => {
            let why = "which cannot be checked from here; make sure it is dead, then use --force";
            return Err(refused(format!("held by {}, {why}", describe(&owner))));
        }
        _ => {}
    }
    let why = format!("released by an operator from {}", describe(&owner));
    if registry.release(key, &owner, &why)? {
        Ok(Released::From(describe(&owner)))
    } else {
        Err(refused(
            "the claim changed meanwhile; see `x12gate claims`".into(),
        ))
    }
}

/// An operator's release of the documents held or parked under the document key `key`:
/// written to `out/` and, where a destination takes them, handed over at once (as `process`
/// hands over what it queued). Empty when nothing of `key` was held or waiting.
pub fn release_documents(
    config: &Config,
    registry: &mut Registry,
    key: &str,
) -> Result<
    (
        Vec<pipeline::ReleaseOutcome>,
        Option<crate::delivery::Summary>,
    ),
    DeskError,
> {
    // An owner of its own: inside a watcher (the web page's release) the watcher's own id
    // would make the pass below send every delivery the watcher queued, not this release's.
    static RELEASES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = RELEASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let owner = format!("{}:release-{n}", crate::owner::Owner::current().id());
    let done = pipeline::release_documents(config, registry, Some(key), &owner)?;
    if done.is_empty() {
        return Ok((done, None));
    }
    let sent = crate::delivery::Deliverer::new(config, &owner).pass(
        registry,
        crate::delivery::Scope::QueuedBy(&owner),
        &|| false,
    )?;
    Ok((done, Some(sent)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_empty_segment_keeps_its_ordinal_so_findings_land_on_their_segment() {
        let text = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*U*00401*000000001*0*P*>~GS*PO*ACME*X12GATE*20240101*1200*1*X*004010~~ST*850*0001~SE*2*0001~GE*1*1~IEA*1*000000001~\n";
        let ic = crate::x12::Interchanges::new(text.as_bytes(), crate::x12::Limits::default())
            .flatten()
            .next()
            .expect("an interchange");
        let (segments, more) = super::partner_segments(&ic, &[]);
        let shown: Vec<(u32, &str)> = segments
            .iter()
            .map(|s| (s.ordinal, s.text.as_str()))
            .collect();
        assert_eq!(more, 0);
        assert_eq!(shown.get(2), Some(&(3, "")));
        assert_eq!(shown.get(3), Some(&(4, "ST*850*0001")));
        assert_eq!(shown.last(), Some(&(7, "IEA*1*000000001")));
    }

    use super::*;

    /// Read in pieces of a few hundred bytes, an interchange larger than one in parts, a
    /// file gives each interchange's findings and fingerprint as read whole.
    #[test]
    fn an_interchange_is_found_in_its_file_read_in_pieces_as_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let text =
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\nunknown_partners = \"accept\"\n";
        let config = Config::from_str(text, &dir.path().join("p.toml")).unwrap();
        let schemas = crate::schema::builtin().unwrap();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut file = Vec::new();
        for name in [
            "850-004010.x12",
            "856-004010-sopi.x12",
            "850-005010-multi.x12",
        ] {
            file.extend(std::fs::read(fixtures.join(name)).unwrap());
            file.extend_from_slice(b"garbage between\n");
        }
        // The last one with a broken set, so that it has findings.
        let broken = std::fs::read_to_string(fixtures.join("810-004010.x12")).unwrap();
        file.extend(broken.replacen("SE*", "SE*9", 1).into_bytes());
        let path = dir.path().join("f.x12");
        std::fs::write(&path, &file).unwrap();
        let keys = [
            "ZZ:ACME:000000101",
            "ZZ:ACME:000000303",
            "ZZ:ACME:000000302",
            "ZZ:ACME:000000103",
        ];
        let mut any_findings = false;
        for key in keys {
            let whole = read_in_pieces(&path, key, (&config, schemas), usize::MAX >> 1);
            let whole = whole.unwrap_or_else(|| panic!("{key}"));
            any_findings |= !whole.findings.is_empty();
            assert_eq!(whole.fingerprint.len(), 64);
            for window in [200, 500, 1_000] {
                let pieces = read_in_pieces(&path, key, (&config, schemas), window)
                    .unwrap_or_else(|| panic!("{key}, window {window}"));
                assert_eq!(pieces.findings, whole.findings, "{key}, window {window}");
                assert_eq!(
                    pieces.fingerprint, whole.fingerprint,
                    "{key}, window {window}"
                );
            }
        }
        assert!(any_findings);
        let none = read_in_pieces(&path, "ZZ:ACME:000000999", (&config, schemas), 300);
        assert_eq!(none, None);
    }
}
