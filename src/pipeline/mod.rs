//! Inbound files end to end, synchronously: read, split into interchanges, validate, decide
//! the answer, write the translation and the acknowledgments.
//!
//! `ack` decides and prints, writing nothing. `process` claims each interchange's key in the
//! registry before anything else, decides, writes the translation and the acknowledgments
//! atomically under names derived from the key, and only then completes the claim.
//!
//! Rooms, each importing only those after it: `gateway` (one run: process, release what
//! waited, deliver; what `process`, `watch` and the desk drive), `batch` (the registry flow,
//! a file of each step: claim, decide, write, complete), `documents` (business documents
//! within a round), `flight` (one interchange in flight and the outputs it makes), `large`
//! (an interchange read in parts); this file holds the decision itself and the report.

use chrono::NaiveDateTime;

use crate::ack::{self, Disposition, InterchangeResponse, Outbound};
use crate::check::{self, Checks};
use crate::config::{Config, Layout, Partner, Severity, UnknownPartners, Validation};
use crate::finding::Finding;
use crate::outputs;
use crate::registry::{Counter, Registry, RegistryError};
use crate::schema::Schemas;
use crate::validate::Routing;
use crate::x12::Interchange;

pub use crate::keys::{correlation_id, interchange_key, key_part, typed_key};

/// Everything decided about one interchange before anything is written.
#[derive(Debug, Clone)]
pub struct Decision {
    pub partner: Partner,
    /// Whether the sender is a configured partner.
    pub known: bool,
    pub findings: Vec<Finding>,
    /// Shared: a large interchange's 997/999 is made from it when it is written.
    pub response: std::sync::Arc<InterchangeResponse>,
}

/// Checks an interchange (envelope rules, routing, and with the partner's `validation =
/// "schema"` the sets against `schemas`) and decides its disposition and acknowledgments.
pub fn decide(ic: &Interchange<'_>, config: &Config, schemas: &Schemas) -> Decision {
    decide_with(ic, config, schemas, Vec::new())
}

/// [`decide`] with findings found elsewhere (the registry's group duplicates).
pub fn decide_with(
    ic: &Interchange<'_>,
    config: &Config,
    schemas: &Schemas,
    extra: Vec<Finding>,
) -> Decision {
    decide_found(ic, config, findings(ic, config, schemas), extra)
}

/// The sender's partner settings, and whether it is a configured partner.
pub(crate) fn partner_of(ic: &Interchange<'_>, config: &Config) -> (Partner, bool) {
    let (qualifier, id) = (ic.isa.trimmed(5), ic.isa.trimmed(6));
    match config.partner(qualifier, id) {
        Some(p) => (p.clone(), true),
        None => (Partner::unknown(qualifier, id), false),
    }
}

/// An interchange's own findings (routing, envelope rules, and with the partner's `validation
/// = "schema"` its sets against `schemas`): all of a decision's but the registry's. The work
/// of a decision that needs nothing but the interchange, so it can run on any thread.
pub fn findings(ic: &Interchange<'_>, config: &Config, schemas: &Schemas) -> Vec<Finding> {
    check::interchange(ic, &checks(ic, config, schemas), [])
}

/// What an interchange is checked against: its sender's settings.
fn checks<'c>(ic: &Interchange<'_>, config: &'c Config, schemas: &'c Schemas) -> Checks<'c> {
    let (partner, known) = partner_of(ic, config);
    let accept_unknown = config.gateway.unknown_partners == UnknownPartners::Accept;
    Checks {
        schemas: (partner.checks.validation == Validation::Schema).then_some(schemas),
        routing: Some(Routing {
            qualifier: &config.gateway.id_qualifier,
            id: &config.gateway.id,
            also: &config.gateway.identities,
            sender_known: known || accept_unknown,
        }),
        strict_layout: partner.checks.layout == Layout::Strict,
        unknown_version_rejects: partner.checks.unknown_version == Severity::Reject,
        group_mismatch_warns: partner.checks.group_mismatch == Severity::Warn,
    }
}

/// The decision on an interchange whose own [`findings`] are `found`, with `extra` (the
/// registry's) after them.
pub fn decide_found(
    ic: &Interchange<'_>,
    config: &Config,
    mut found: Vec<Finding>,
    extra: Vec<Finding>,
) -> Decision {
    let (partner, known) = partner_of(ic, config);
    let accept_unknown = config.gateway.unknown_partners == UnknownPartners::Accept;
    found.extend(extra);
    let findings = found;
    let mut response = ack::respond(ic, &findings, &partner);
    if !(known || accept_unknown) {
        // Nobody we know to answer: the rejection is recorded with its reason, not sent.
        response.ta1 = None;
        response.groups.clear();
    }
    Decision {
        partner,
        known,
        findings,
        response: std::sync::Arc::new(response),
    }
}

/// How many control numbers the acknowledgments of a decision carry.
pub fn numbers_needed(decision: &Decision) -> ack::NumbersNeeded {
    ack::numbers_needed(&decision.response, &decision.partner)
}

/// The acknowledgment interchanges for a decision, numbered by `numbers` (sized by
/// [`numbers_needed`]).
pub fn acknowledgments(
    ic: &Interchange<'_>,
    decision: &Decision,
    config: &Config,
    numbers: &ack::Numbers,
    now: NaiveDateTime,
) -> Result<Vec<Outbound>, ack::ShortOfNumbers> {
    ack::write_acknowledgments(
        &decision.response,
        ic,
        &decision.partner,
        &config.gateway,
        numbers,
        now,
    )
}

/// What `ack` shows for one interchange: its decision, and the acknowledgments `process`
/// would send for it.
#[derive(Debug, Clone)]
pub struct Preview {
    pub decision: Decision,
    pub outbound: Vec<Outbound>,
}

/// Why a preview could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Numbers(#[from] ack::ShortOfNumbers),
    /// An invariant broken: see [`large::Large::read_outline`].
    #[error("{0}")]
    Outline(String),
    /// The acknowledgments could not be written where they were to go.
    #[error("writing the acknowledgments: {0}")]
    Io(#[from] std::io::Error),
}

/// Decides `ic` and writes its acknowledgments in memory, numbered after the counters of
/// `registry` (none: from 1); no number is taken, nothing is written or recorded.
pub fn preview(
    ic: &Interchange<'_>,
    config: &Config,
    schemas: &Schemas,
    registry: Option<&Registry>,
    now: NaiveDateTime,
) -> Result<Preview, PreviewError> {
    preview_found(ic, findings(ic, config, schemas), config, registry, now)
}

/// An interchange larger than a piece previewed a part at a time, as [`preview`] previews it
/// read whole: its parts are given in order, then [`PartsPreview::write`] decides it from
/// what they were found to break and its outline (see `large`), never holding it.
pub struct PartsPreview<'c> {
    reading: large::FirstReading<'c>,
    config: &'c Config,
}

impl<'c> PartsPreview<'c> {
    /// Begins with the interchange's first part.
    pub fn begin(first: &Interchange<'_>, config: &'c Config, schemas: &'c Schemas) -> Self {
        let (partner, _) = partner_of(first, config);
        let checks = checks(first, config, schemas);
        let reading = (config.limits, crate::input::WINDOW);
        PartsPreview {
            reading: large::FirstReading::begin(first, None, &partner, checks, reading),
            config,
        }
    }

    /// Adds the interchange's next part.
    pub fn add(&mut self, part: &Interchange<'_>) {
        self.reading.add(part);
    }

    /// Its own findings (as [`findings`] gives them read whole) and its fingerprint, once
    /// the last part was added.
    pub fn found(self) -> (Vec<Finding>, String) {
        let large = self.reading.finish();
        (large.found, large.fingerprint)
    }

    /// The preview, once the last part was added, with its acknowledgments written to `out`
    /// in order as they are made (the 997 of a million sets is never held): those of the
    /// preview returned carry their kind and number, not their bytes.
    pub fn write(
        self,
        registry: Option<&Registry>,
        now: NaiveDateTime,
        out: &mut dyn std::io::Write,
    ) -> Result<Preview, PreviewError> {
        let large = self.reading.finish();
        let ic = large.read_outline().map_err(PreviewError::Outline)?;
        let config = self.config;
        let (decision, numbers) = numbered(&ic, large.found.clone(), config, registry)?;
        let (response, partner) = (&decision.response, &decision.partner);
        let plan = ack::Plan::of(response, &ic, partner, &config.gateway, &numbers, now)?;
        let mut outbound = Vec::new();
        if let Some(mut ta1) = plan.ta1() {
            out.write_all(&ta1.bytes)?;
            ta1.bytes = Vec::new();
            outbound.push(ta1);
        }
        if let Some((kind, control_number)) = plan.group_ack() {
            plan.write_group_acks(&ic, out)?;
            outbound.push(Outbound {
                kind,
                control_number,
                bytes: Vec::new(),
            });
        }
        Ok(Preview { decision, outbound })
    }
}

/// The decision on an interchange whose own [`findings`] are `found`, and the control
/// numbers its acknowledgments would take next (none are taken).
fn numbered(
    ic: &Interchange<'_>,
    found: Vec<Finding>,
    config: &Config,
    registry: Option<&Registry>,
) -> Result<(Decision, ack::Numbers), PreviewError> {
    let decision = decide_found(ic, config, found, Vec::new());
    let partner = decision.partner.key();
    let last = |counter| match registry {
        Some(r) => r.current_control_number(&partner, counter),
        None => Ok(None),
    };
    let numbers = ack::Numbers::following(
        numbers_needed(&decision),
        last(Counter::Interchange)?,
        last(Counter::Group)?,
    );
    Ok((decision, numbers))
}

/// [`preview`] of an interchange whose own [`findings`] are `found`.
fn preview_found(
    ic: &Interchange<'_>,
    found: Vec<Finding>,
    config: &Config,
    registry: Option<&Registry>,
    now: NaiveDateTime,
) -> Result<Preview, PreviewError> {
    let (decision, numbers) = numbered(ic, found, config, registry)?;
    let outbound = acknowledgments(ic, &decision, config, &numbers, now)?;
    Ok(Preview { decision, outbound })
}

/// One line of `process --json`, and the detail of the audit event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub file: String,
    pub correlation_id: Option<String>,
    /// `QUAL:ID` of ISA05/ISA06 and ISA07/ISA08.
    pub sender: Option<String>,
    pub receiver: Option<String>,
    pub control_number: Option<String>,
    pub disposition: Disposition,
    pub reason_code: Option<String>,
    pub reason: Option<String>,
    pub acks: Vec<String>,
    pub outputs: Vec<String>,
    /// Which attempt at this key this was (1 for the first), when we owned the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// For a duplicate: the disposition of the original it replays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed: Option<Disposition>,
    /// Whose expired or failed claim this attempt took over, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_over: Option<String>,
    /// ISA15 as it decides where documents go: `P` (production), or `T` (a test or
    /// information interchange, whose documents go only to test destinations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::document::Usage>,
    /// The business documents among its accepted sets, and what became of each.
    #[serde(default)]
    pub documents: Vec<DocumentReport>,
    /// How many documents it carried, when `documents` lists fewer: `process` lists the
    /// first 1,000 documents and outputs of an interchange, the history's record and the
    /// watcher the first 100 (`documents --interchange KEY` lists them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents_total: Option<usize>,
    /// How many of them were new, when `documents` lists fewer than it carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents_new: Option<usize>,
    /// The registry key (not printed: `history --json` gives it from the event).
    #[serde(skip)]
    pub key: Option<String>,
}

impl Report {
    /// Keeps the first `n` documents and outputs; when either list was longer, says how many
    /// documents there were in `documents_total` (the registry has them all).
    pub fn keep_first(&mut self, n: usize) {
        if self.documents.len() > n || self.outputs.len() > n {
            self.count_documents();
            self.documents.truncate(n);
            self.outputs.truncate(n);
        }
    }

    /// Says in `documents_total` and `documents_new` how many documents it carried (unless
    /// it says so already: its list was cut before).
    pub fn count_documents(&mut self) {
        if self.documents_total.is_none() {
            self.documents_total = Some(self.documents.len());
            self.documents_new = Some(
                self.documents
                    .iter()
                    .filter(|d| d.disposition == crate::document::DocumentDisposition::New)
                    .count(),
            );
        }
    }
}

/// An operational failure: nothing about the interchange was decided or marked done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
    #[error("{path}: {cause}")]
    Io { path: String, cause: std::io::Error },
    #[error("{0}")]
    Translate(String),
    /// An invariant broken: the reservation was sized by [`numbers_needed`].
    #[error(transparent)]
    Numbers(#[from] ack::ShortOfNumbers),
    /// A stop (SIGTERM, SIGINT) cut the batch short; its claims were marked failed.
    #[error("stopped before the batch was complete; its claims were marked failed, so a rerun takes them over at once")]
    Interrupted,
}

/// How `process` behaves.
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    /// Report `in_progress` instead of waiting for another process's live lease.
    pub no_wait: bool,
    /// This process's identity in leases ([`crate::owner::Owner::id`], perhaps with a suffix).
    pub owner: String,
    /// Set by signals: stop waiting, or stop altogether at the next safe point.
    pub stop: Stop,
    /// Only these keys (`reprocess`): the file's other interchanges are left alone.
    pub only: Option<Vec<String>>,
    /// Files larger than this are read in pieces of about this many bytes
    /// ([`crate::input::WINDOW`]; tests make it small).
    pub window: usize,
}

impl ProcessOptions {
    pub fn new(no_wait: bool) -> Self {
        ProcessOptions {
            no_wait,
            owner: crate::owner::Owner::current().id(),
            stop: Stop::default(),
            only: None,
            window: crate::input::WINDOW,
        }
    }
}

/// A request to stop early, shared by whoever hears the signal and the work it stops. It has
/// two levels: `watch`'s first SIGTERM only stops waiting for leases held by other processes
/// (the files in flight finish); `process`'s SIGTERM also abandons its own work at the next
/// step boundary, marking its claims failed so that nobody waits for them.
#[derive(Debug, Clone, Default)]
pub struct Stop(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Stop {
    pub const RUNNING: usize = 0;
    pub const STOP_WAITING: usize = 1;
    pub const ABANDON: usize = 2;

    /// The flag itself, for signal handlers (`signal_hook::flag::register_usize`).
    pub fn flag(&self) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
        self.0.clone()
    }

    pub fn stop_waiting(&self) {
        self.0
            .fetch_max(Self::STOP_WAITING, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn abandon(&self) {
        self.0
            .fetch_max(Self::ABANDON, std::sync::atomic::Ordering::SeqCst);
    }

    fn level(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn waiting_stopped(&self) -> bool {
        self.level() >= Self::STOP_WAITING
    }

    pub fn abandoned(&self) -> bool {
        self.level() >= Self::ABANDON
    }

    /// Sleeps `total` in short steps; `false` when waiting was stopped meanwhile.
    fn sleep(&self, total: std::time::Duration) -> bool {
        let step = std::time::Duration::from_millis(20);
        let until = std::time::Instant::now() + total;
        while std::time::Instant::now() < until {
            if self.waiting_stopped() {
                return false;
            }
            std::thread::sleep(
                step.min(until.saturating_duration_since(std::time::Instant::now())),
            );
        }
        !self.waiting_stopped()
    }
}

/// Claims in arrival order across the concurrent batches of one process: each batch gets a
/// [`Turn`] when it is dispatched and claims its keys only once every batch dispatched before
/// it has claimed its own, so that of two files with one key the earlier arrival always wins,
/// whichever worker gets to the database first.
#[derive(Debug, Default)]
pub struct ClaimOrder {
    /// The next turn to claim, and turns finished out of order.
    state: std::sync::Mutex<(u64, std::collections::BTreeSet<u64>)>,
    changed: std::sync::Condvar,
    issued: std::sync::atomic::AtomicU64,
}

/// One batch's place in a [`ClaimOrder`]; dropping it ends the turn.
#[derive(Debug)]
pub struct Turn {
    order: std::sync::Arc<ClaimOrder>,
    n: u64,
}

impl ClaimOrder {
    /// The next turn, in dispatch order.
    pub fn turn(order: &std::sync::Arc<ClaimOrder>) -> Turn {
        Turn {
            order: order.clone(),
            n: order
                .issued
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst),
        }
    }
}

impl Turn {
    /// Waits until every earlier turn has ended. Bounded: a turn stuck for longer than
    /// `limit` (it cannot be, but a wedged disk could) no longer holds the others up.
    fn wait(&self, limit: std::time::Duration) {
        let Ok(mut state) = self.order.state.lock() else {
            return;
        };
        let until = std::time::Instant::now() + limit;
        while state.0 < self.n {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    turn = self.n,
                    "claim order: an earlier batch did not claim in time; going ahead"
                );
                return;
            }
            state = match self.order.changed.wait_timeout(state, left) {
                Ok((s, _)) => s,
                Err(_) => return,
            };
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Ok(mut state) = self.order.state.lock() {
            state.1.insert(self.n);
            loop {
                let next = state.0;
                if !state.1.remove(&next) {
                    break;
                }
                state.0 += 1;
            }
        }
        self.order.changed.notify_all();
    }
}

/// A file to process: where to read it, and the name that reports and the history give it
/// (for a file the watcher moved into its work folder, the path it arrived under).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub read: std::path::PathBuf,
    pub name: String,
}

impl From<&std::path::Path> for Source {
    fn from(p: &std::path::Path) -> Self {
        Source {
            read: p.to_path_buf(),
            name: p.display().to_string(),
        }
    }
}

/// Outputs are named by key, and by content when the key was first claimed for other content:
/// a takeover of the same content rewrites the same names (nothing doubles), while a
/// corrected resend after a rejection gets names of its own (its 997 never replaces the
/// rejection's 997 before that one was sent).
fn output_stem(key: &str, fingerprint: &str, first_fingerprint: &str) -> String {
    if fingerprint == first_fingerprint {
        outputs::safe_name(key)
    } else {
        format!(
            "{}.{}",
            outputs::safe_name(key),
            fingerprint.get(..8).unwrap_or(fingerprint)
        )
    }
}

fn outbound_name(stem: &str, kind: ack::OutboundKind) -> String {
    format!("{stem}.{}.x12", kind.extension())
}

/// Processes every interchange of one file through the registry; one report per interchange
/// (or one for a part of the file that holds no readable interchange).
fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

mod batch;
mod documents;
mod flight;
mod gateway;
mod large;

/// The default of `gateway.documents_per_run`, kept where the configuration can name it.
pub use crate::config::RUN_DOCUMENTS;
pub use batch::{FileOutcome, Settled, BATCH_BYTES, BATCH_FILES, RECORDED};
pub use documents::{
    discard as discard_documents, release as release_documents, DocumentReport, ReleaseOutcome,
    REPORTED,
};
pub use gateway::{process_files, Gateway, Outcomes};
