//! `process` through the registry, a batch of files at a time.
//!
//! Every interchange goes through the same steps as it would alone: its key is claimed
//! before anything else, its outputs are written and made durable before its claim is
//! completed, and a crash between any two steps leaves a leased claim that a rerun takes
//! over. What the batch adds is that each step's durable commit, and each round of fsyncs,
//! serves every interchange of the batch at once: on a disk where one fsync costs several
//! milliseconds this is the difference between tens and thousands of interchanges a second.
//!
//! Steps per batch: (1) read and cut the files; (2) claim every key in one transaction;
//! duplicates, conflicts and busy keys leave the batch; (3) in one transaction, register
//! group keys, decide, reserve control numbers and renew the leases (the fence: from here on
//! the writes are covered by a fresh lease); (4) write every output to a temporary file,
//! fsync them in parallel, rename them into place, fsync the folders; (5) complete every
//! claim in one transaction.

//!
//! The steps have a file each: `claim` (2), `decide` (3), `write` (4 and 6), `complete`
//! (5); this file reads and cuts the files (1), gathers their interchanges into windows and
//! runs the rounds that take a window through the steps.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::ack::Disposition;
use crate::config::{Config, Partner};
use crate::fingerprint;
use crate::input::{self, Reader};
use crate::registry::{EventKind, GroupKey, Registry};
use crate::schema::Schemas;
use crate::x12::{Interchange, Interchanges};

use super::documents::{Planned, Progress};
use super::flight::{bounded_reason, Item, Output, Round};
use super::large::FirstReading;
use super::{
    correlation_id, interchange_key, json, Decision, ProcessError, ProcessOptions, Report, Source,
    Turn,
};

mod claim;
mod complete;
mod decide;
mod write;

use claim::{claim_all, AfterClaim, Holder, InFlight, Waiting};
use complete::complete_all;
pub use complete::RECORDED;
use decide::prepare_all;
use write::{make_documents, more_runs, place_acks, to_store, write_all};

/// Files read per batch, and the bytes they may hold together.
pub const BATCH_FILES: usize = 256;

pub const BATCH_BYTES: usize = 64 << 20;

/// What became of one file: its interchanges' reports, or why it could not be read.
#[derive(Debug)]
pub struct FileOutcome {
    pub path: PathBuf,
    pub result: Result<Vec<Report>, ProcessError>,
}

/// An owned interchange once decided, with the outputs of its first run of documents (all
/// of them, for most) built in memory: the record the
/// steps after the decision (`decide`, `write`, `complete`) hand on.
struct Prepared {
    item: usize,
    decision: Decision,
    files: Vec<Output>,
    group_keys: Vec<GroupKey>,
    /// The run of documents being written, handed over in the next run's transaction or the
    /// completion's.
    documents: Planned,
    progress: Progress,
    /// The acknowledgments, written with the last run of documents (so that none is sent
    /// before every document of the interchange is recorded), and the outputs' names' stem.
    acks: Vec<Output>,
    stem: String,
    lost: bool,
}

/// What a run of batches works by: a gateway's configuration, definitions, registry
/// connection and options (lent by [`super::Gateway`], which this module does not know).
pub(super) struct Run<'r> {
    pub config: &'r Config,
    pub schemas: &'r Schemas,
    pub registry: &'r mut Registry,
    pub options: &'r ProcessOptions,
}

/// What [`super::Gateway::process`] hands over as soon as it is settled, in file order.
pub enum Settled {
    /// Reports of the file `sources[file]`: all of them, or for a file read in pieces those
    /// of one piece (its next piece's follow); `last` once the file is done.
    Reports {
        file: usize,
        reports: Vec<Report>,
        last: bool,
    },
    /// The file could not be processed (after any reports of its earlier pieces).
    Failed { file: usize, error: ProcessError },
}

/// [`super::Gateway::process`]: the files read and cut (a file of at most a window,
/// [`ProcessOptions::window`], whole and batched with its neighbours; a larger one in pieces
/// of whole interchanges, [`input::Reader`], each piece a batch of its own, so that memory is
/// a window or the largest interchange, not the file), each file's reports handed to
/// `settled` as soon as they are settled: a caller that prints them holds a piece's reports,
/// not a file's, however many interchanges and documents the file carries. With a `turn`,
/// the first batch claims its keys in that turn.
pub(super) fn process(
    gw: &mut Run<'_>,
    sources: &[Source],
    mut turn: Option<Turn>,
    settled: &mut dyn FnMut(Settled),
) -> Result<(), ProcessError> {
    let (config, options) = (gw.config, gw.options.clone());
    let mut start = 0;
    let mut large: Option<(usize, Box<Reader>)> = None;
    while (start < sources.len() || large.is_some()) && !options.stop.abandoned() {
        if let Some((file, reader)) = large.take() {
            let Some(source) = sources.get(file) else {
                break;
            };
            let mut piece = |reports, last| {
                settled(Settled::Reports {
                    file,
                    reports,
                    last,
                })
            };
            let failure = in_pieces(gw, source, *reader, &mut turn, &mut piece)?;
            if let Err(error) = failure {
                settled(Settled::Failed { file, error });
            }
            continue;
        }
        // A batch: up to BATCH_FILES files and BATCH_BYTES bytes (always at least one file),
        // up to the first file larger than a window.
        let mut inputs = Vec::new();
        let mut bytes = 0;
        while let Some(source) = sources.get(start + inputs.len()) {
            if inputs.len() >= BATCH_FILES || (bytes >= BATCH_BYTES && !inputs.is_empty()) {
                break;
            }
            let read =
                Reader::open(&source.read, config.limits, options.window).and_then(|mut reader| {
                    reader
                        .whole()
                        .map(|whole| whole.ok_or_else(|| Box::new(reader)))
                });
            match read {
                Ok(Err(reader)) => {
                    // A large interchange is read in parts, twice (see `large`), from a
                    // file; standard input is read once, whole.
                    let reader = if source.read == Path::new("-") {
                        reader
                    } else {
                        Box::new(reader.in_parts())
                    };
                    large = Some((start + inputs.len(), reader));
                    break;
                }
                Ok(Ok(whole)) => {
                    bytes += whole.len();
                    inputs.push(Ok(whole));
                }
                Err(e) => inputs.push(Err(e)),
            }
        }
        let batch = &sources[start..start + inputs.len()];
        let first = start;
        start += inputs.len() + usize::from(large.is_some());
        if !inputs.is_empty() {
            let outcomes = run_batch(gw, batch, inputs, turn.take())?;
            for (n, outcome) in outcomes.into_iter().enumerate() {
                let file = first + n;
                settled(match outcome.result {
                    Ok(reports) => Settled::Reports {
                        file,
                        reports,
                        last: true,
                    },
                    Err(error) => Settled::Failed { file, error },
                });
            }
        }
    }
    Ok(())
}

/// One file larger than a window, a piece at a time: each piece's interchanges are settled
/// before the next piece is read, and their reports handed to `settled` with whether they
/// are the file's last (at least once). The inner `Err` is why the rest of the file could not
/// be read.
fn in_pieces(
    gw: &mut Run<'_>,
    source: &Source,
    mut reader: Reader,
    turn: &mut Option<Turn>,
    settled: &mut dyn FnMut(Vec<Report>, bool),
) -> Result<Result<(), ProcessError>, ProcessError> {
    let (config, schemas, options) = (gw.config, gw.schemas, gw.options);
    let registry = &mut *gw.registry;
    let mut reports = Vec::new();
    // A stop that came while waiting in one piece holds for the pieces after it.
    let mut stopped = false;
    // An interchange larger than a piece goes on from one piece to the next.
    let mut first = None;
    let stamp = reader.stamp();
    loop {
        let piece = match reader.next_piece() {
            // The rest of the file is not read: the file is not done, and its retry meets
            // what was settled as duplicates.
            Ok(Some(_)) if options.stop.abandoned() => {
                reports.push(unfinished(&source.name));
                break;
            }
            Ok(Some(piece)) => piece,
            Ok(None) => break,
            Err(input::InputError::TooLarge { size, limit, .. }) => {
                reports.push(file_rejection(
                    registry,
                    &source.name,
                    too_large(size, limit),
                )?);
                break;
            }
            Err(e) => {
                settled(reports, false);
                return Ok(Err(ProcessError::Input(e)));
            }
        };
        let mut read = piece.interchanges();
        let mut slots = Vec::new();
        let mut window = Window::new(config, schemas, options);
        window.stopped = stopped;
        window.first = first.take();
        // Standard input cannot be read twice: its interchanges are never given in parts.
        let path = Some((source.read.as_path(), stamp)).filter(|(p, _)| *p != Path::new("-"));
        let done = window.read((&source.name, path), &mut read, &mut slots, registry, turn);
        if let Err(ProcessError::Input(e)) = done {
            // The file read again is not the one read first (its claims were marked
            // failed): the file fails after the reports of what was settled before, and
            // the run goes on.
            let (mut done, _) = window.finish(registry, turn)?;
            reports.extend(in_order(slots, &mut done));
            settled(reports, false);
            return Ok(Err(ProcessError::Input(e)));
        }
        done?;
        first = window.first.take();
        let (mut done, stop) = window.finish(registry, turn)?;
        stopped = stop;
        let resume = read.resume();
        reports.extend(in_order(slots, &mut done));
        settled(std::mem::take(&mut reports), false);
        // A large interchange's parts are cut from pieces of a megabyte: its first reading
        // then holds that, not a window, while its outline grows.
        reader.set_window(match first {
            Some(_) => options.window.min(super::large::PART_WINDOW),
            None => options.window,
        });
        reader.advance(resume);
    }
    settled(reports, true);
    Ok(Ok(()))
}

/// The report of the part of a file that a stop left unread.
fn unfinished(file: &str) -> Report {
    file_report(
        file,
        Disposition::InProgress,
        "stopped before the rest of the file was read".into(),
    )
}

/// The report of a part of a file that is no interchange: no sender, key or outputs.
fn file_report(file: &str, disposition: Disposition, reason: String) -> Report {
    Report {
        file: file.to_string(),
        correlation_id: None,
        sender: None,
        receiver: None,
        control_number: None,
        disposition,
        reason_code: None,
        reason: Some(reason),
        acks: Vec::new(),
        outputs: Vec::new(),
        attempt: None,
        took_over: None,
        usage: None,
        documents: Vec::new(),
        documents_total: None,
        documents_new: None,
        replayed: None,
        key: None,
    }
}

fn too_large(size: u64, limit: u64) -> String {
    format!("{size} bytes is more than the limit of {limit} bytes (limits.max_file_bytes)")
}

/// Where a report of a file comes from: an interchange still on its way, or a part of the
/// file that held no interchange (reported at once).
enum Slot {
    Item(usize),
    Done(Box<Report>),
}

/// A file's reports in file order, once its interchanges' are in `settled` (by place).
fn in_order(slots: Vec<Slot>, settled: &mut [Option<Report>]) -> Vec<Report> {
    slots
        .into_iter()
        .filter_map(|slot| match slot {
            Slot::Item(i) => settled.get_mut(i).and_then(Option::take),
            Slot::Done(report) => Some(*report),
        })
        .collect()
}

fn run_batch(
    gw: &mut Run<'_>,
    sources: &[Source],
    inputs: Vec<Result<Vec<u8>, crate::input::InputError>>,
    mut turn: Option<Turn>,
) -> Result<Vec<FileOutcome>, ProcessError> {
    let (config, schemas, options) = (gw.config, gw.schemas, gw.options);
    let registry = &mut *gw.registry;
    let shown: Vec<String> = sources.iter().map(|s| s.name.clone()).collect();
    // Buffers first, so that the interchanges can borrow them for the whole batch.
    let mut failures: Vec<Option<ProcessError>> = Vec::with_capacity(inputs.len());
    let mut slots: Vec<Vec<Slot>> = Vec::with_capacity(inputs.len());
    let mut buffers = Vec::with_capacity(inputs.len());
    for (file, read) in inputs.into_iter().enumerate() {
        let name = &shown[file];
        let (buffer, failure, slot) = match read {
            Ok(buffer) => (buffer, None, Vec::new()),
            Err(crate::input::InputError::TooLarge { size, limit, .. }) => (
                Vec::new(),
                None,
                vec![Slot::Done(Box::new(file_rejection(
                    registry,
                    name,
                    too_large(size, limit),
                )?))],
            ),
            Err(e) => (Vec::new(), Some(ProcessError::Input(e)), Vec::new()),
        };
        buffers.push(buffer);
        failures.push(failure);
        slots.push(slot);
    }
    // Interchanges are settled a window at a time (claimed, decided, written, completed),
    // so that a file of a hundred thousand interchanges holds the state of a window, not of
    // the file; each report is kept, by its place in the batch.
    let mut window = Window::new(config, schemas, options);
    for (file, input) in buffers.iter().enumerate() {
        if input.is_empty() && (failures[file].is_some() || !slots[file].is_empty()) {
            continue;
        }
        let mut read = Interchanges::new(input, config.limits);
        window.read(
            (&shown[file], None),
            &mut read,
            &mut slots[file],
            registry,
            &mut turn,
        )?;
    }
    let (mut reports, _) = window.finish(registry, &mut turn)?;
    let outcomes = sources
        .iter()
        .zip(failures)
        .zip(slots)
        .map(|((source, failure), slots)| FileOutcome {
            path: source.read.clone(),
            result: match failure {
                Some(e) => Err(e),
                None => Ok(in_order(slots, &mut reports)),
            },
        })
        .collect();
    Ok(outcomes)
}

/// The interchanges of a batch on their way: settled [`WINDOW`] at a time, each report kept
/// by its place in the batch.
struct Window<'a, 'c> {
    config: &'c Config,
    schemas: &'c Schemas,
    options: &'c ProcessOptions,
    items: Vec<Item<'a>>,
    reports: Vec<Option<Report>>,
    /// A stop came while waiting in an earlier window.
    stopped: bool,
    /// An interchange larger than a piece, being read the first time (a file read in
    /// pieces: see [`Window::part`]).
    first: Option<FirstReading<'c>>,
}

impl<'a, 'c> Window<'a, 'c> {
    fn new(config: &'c Config, schemas: &'c Schemas, options: &'c ProcessOptions) -> Self {
        Window {
            config,
            schemas,
            options,
            items: Vec::with_capacity(WINDOW),
            reports: Vec::new(),
            stopped: false,
            first: None,
        }
    }

    /// Takes every interchange `read` gives (the file `name`'s, read from `path`, with its
    /// stamp, when it can be read again, in parts), settling full windows.
    fn read(
        &mut self,
        (name, path): (&str, Option<(&Path, Option<input::FileStamp>)>),
        read: &mut Interchanges<'a>,
        slots: &mut Vec<Slot>,
        registry: &mut Registry,
        turn: &mut Option<Turn>,
    ) -> Result<(), ProcessError> {
        let only = self.options.only.as_ref();
        for result in read {
            match result {
                Ok(ic) if !ic.is_whole() => {
                    if let Some(path) = path {
                        self.part(name, path, &ic, slots, registry, turn)?;
                    }
                }
                Ok(ic) => {
                    let it = item(name, ic, self.config);
                    if only.is_some_and(|keys| !keys.contains(&it.key)) {
                        continue;
                    }
                    slots.push(Slot::Item(self.reports.len() + self.items.len()));
                    self.items.push(it);
                }
                // Reprocessing one key leaves the file's unreadable parts alone.
                Err(_) if only.is_some() => self.first = None,
                Err(e) => {
                    // What could not be read ends the interchange being read in parts.
                    self.first = None;
                    let report = file_rejection(registry, name, e.to_string())?;
                    slots.push(Slot::Done(Box::new(report)));
                }
            }
            if self.items.len() >= WINDOW {
                self.settle(registry, turn)?;
            }
        }
        Ok(())
    }

    /// A part of an interchange larger than a piece: it is read to its end the first time
    /// (after the interchanges before it are settled), then settled on its own.
    fn part(
        &mut self,
        name: &str,
        path: (&Path, Option<input::FileStamp>),
        ic: &Interchange<'_>,
        slots: &mut Vec<Slot>,
        registry: &mut Registry,
        turn: &mut Option<Turn>,
    ) -> Result<(), ProcessError> {
        if ic.is_first_part() {
            self.first = None;
            let (partner, _) = super::partner_of(ic, self.config);
            let key = super::interchange_key(ic, partner.duplicates.interchange_scope);
            if self
                .options
                .only
                .as_ref()
                .is_some_and(|keys| !keys.contains(&key))
            {
                return Ok(());
            }
            self.settle(registry, turn)?;
            let checks = super::checks(ic, self.config, self.schemas);
            let reading = (self.config.limits, self.options.window);
            self.first = Some(FirstReading::begin(
                ic,
                Some(path),
                &partner,
                checks,
                reading,
            ));
        } else if let Some(first) = &mut self.first {
            first.add(ic);
        }
        if !ic.is_last_part() {
            return Ok(());
        }
        let Some(first) = self.first.take() else {
            return Ok(());
        };
        let large = first.finish();
        // Read once, not yet claimed: where a test changes the file under it.
        fail::fail_point!("large.read");
        let outline = large
            .read_outline()
            .map_err(|e| ProcessError::Translate(format!("{name}: {e}")))?;
        let mut it = item(name, outline, self.config);
        it.utf8 = large.utf8;
        it.fingerprint = large.fingerprint.clone();
        it.large = Some(&large);
        let mut items = [it];
        self.settle_these(&mut items, registry, turn)?;
        let [it] = items;
        slots.push(Slot::Item(self.reports.len()));
        self.reports.push(Some(it.report));
        Ok(())
    }

    fn settle(
        &mut self,
        registry: &mut Registry,
        turn: &mut Option<Turn>,
    ) -> Result<(), ProcessError> {
        if !self.stopped {
            fingerprint_all(&mut self.items);
        }
        let mut items = std::mem::take(&mut self.items);
        self.settle_these(&mut items, registry, turn)?;
        self.reports
            .extend(items.drain(..).map(|it| Some(it.report)));
        // The same room for the next window.
        self.items = items;
        Ok(())
    }

    /// [`settle`] of `items`, this window's or one large interchange's; a stop that came
    /// while waiting holds for what comes after.
    fn settle_these(
        &mut self,
        items: &mut [Item<'_>],
        registry: &mut Registry,
        turn: &mut Option<Turn>,
    ) -> Result<(), ProcessError> {
        let (config, schemas, options) = (self.config, self.schemas, self.options);
        self.stopped |= settle(
            items,
            self.stopped,
            turn,
            config,
            schemas,
            registry,
            options,
        )?;
        Ok(())
    }

    /// Settles what is left; returns every report by its place, and whether a stop came
    /// while waiting.
    fn finish(
        mut self,
        registry: &mut Registry,
        turn: &mut Option<Turn>,
    ) -> Result<(Vec<Option<Report>>, bool), ProcessError> {
        self.settle(registry, turn)?;
        Ok((self.reports, self.stopped))
    }
}

/// Interchanges settled together: enough that each durable step serves many, few enough
/// that a window's state (claims, decisions, outputs) stays small.
const WINDOW: usize = 1024;

/// Claims, decides, writes and completes every item of a window, retrying keys another
/// process holds; with `stopped` (a stop came while waiting in an earlier window), only
/// marks them undecided. Returns whether a stop came while waiting.
fn settle(
    items: &mut [Item<'_>],
    stopped: bool,
    turn: &mut Option<Turn>,
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    options: &ProcessOptions,
) -> Result<bool, ProcessError> {
    if stopped {
        for it in items.iter_mut() {
            it.report.reason = Some("stopped before it was claimed".into());
        }
        return Ok(true);
    }
    let mut pending: Vec<usize> = (0..items.len()).collect();
    let mut backoff = Duration::from_millis(20);
    let mut waiting = Waiting::default();
    while !pending.is_empty() {
        // A key may appear twice in a window (a resend in the same call): the later copy
        // waits for the next round, where it meets the first one's completed claim. So do
        // the interchanges after it, so that each is decided after every one before it, as
        // one at a time (a correction's GS06 is free only once the resend before it was
        // decided).
        let mut seen = std::collections::HashSet::new();
        let first_again = pending
            .iter()
            .position(|i| !seen.insert(items[*i].key.as_str()))
            .unwrap_or(pending.len());
        let later = pending.split_off(first_again);
        let round = pending;
        if let Some(t) = turn.as_ref() {
            let lease = Duration::from_secs(config.gateway.lease_seconds);
            t.wait(lease.min(Duration::from_secs(60)));
        }
        let round_result = run_round(&round, items, config, schemas, registry, options);
        // The turn ends once every interchange of the window has met its first claim,
        // whatever the outcome: a key repeated in the window puts the interchanges after it
        // in a later round, and a batch dispatched after this one must not claim their keys
        // first (the earlier arrival wins a reused control number).
        if later.is_empty() {
            *turn = None;
        }
        if !later.is_empty() {
            // Between two rounds of a window: where a later batch would overtake its claims.
            fail::fail_point!("round.between");
        }
        let busy = round_result?;
        if !busy.is_empty() && later.is_empty() {
            waiting.log(&busy, items);
            if !options.stop.sleep(backoff) {
                // Stopped while waiting: these stay undecided; a rerun meets the holder's
                // decision.
                for (i, holder) in &busy {
                    let report = &mut items[*i].report;
                    report.reason = Some(format!(
                        "stopped while waiting for {}, which holds the claim",
                        crate::owner::describe(&holder.owner)
                    ));
                }
                return Ok(true);
            }
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
        pending = busy.into_iter().map(|(i, _)| i).chain(later).collect();
        pending.sort_unstable();
    }
    Ok(false)
}

/// An interchange read, before its fingerprint is taken (see [`fingerprint_all`]).
fn item<'a>(name: &str, ic: Interchange<'a>, config: &Config) -> Item<'a> {
    let (qualifier, id) = (ic.isa.trimmed(5), ic.isa.trimmed(6));
    let partner = config
        .partner(qualifier, id)
        .cloned()
        .unwrap_or_else(|| Partner::unknown(qualifier, id));
    let key = interchange_key(&ic, partner.duplicates.interchange_scope);
    let report = Report {
        file: name.to_string(),
        correlation_id: Some(correlation_id(&ic)),
        sender: Some(format!("{qualifier}:{id}")),
        receiver: Some(format!("{}:{}", ic.isa.trimmed(7), ic.isa.trimmed(8))),
        control_number: Some(ic.isa.control_number().to_string()),
        disposition: Disposition::InProgress,
        reason_code: None,
        reason: None,
        acks: Vec::new(),
        outputs: Vec::new(),
        attempt: None,
        took_over: None,
        usage: Some(crate::document::Usage::of(&ic)),
        documents: Vec::new(),
        documents_total: None,
        documents_new: None,
        replayed: None,
        key: Some(key.clone()),
    };
    Item {
        utf8: false,
        ic,
        partner,
        key,
        fingerprint: String::new(),
        sets: Default::default(),
        report,
        large: None,
    }
}

/// Each item's fingerprint and its sets', and whether it is UTF-8 (per interchange: its
/// translation is a document of its own), taken on every core.
fn fingerprint_all(items: &mut [Item<'_>]) {
    let taken = crate::cores::in_ranges(items.len(), crate::cores::available(), |run| {
        run.filter_map(|i| items.get(i))
            .map(|it| {
                let ic = &it.ic;
                let utf8 = std::str::from_utf8(ic.bytes()).is_ok();
                let (fp, sets) =
                    fingerprint::with_sets(ic, &it.partner.duplicates.fingerprint_ignore);
                (utf8, fp, sets)
            })
            .collect()
    });
    for (it, (utf8, fp, sets)) in items.iter_mut().zip(taken) {
        it.utf8 = utf8;
        it.fingerprint = fp;
        it.sets = sets;
    }
}

fn file_rejection(
    registry: &mut Registry,
    file: &str,
    reason: String,
) -> Result<Report, ProcessError> {
    let reason = bounded_reason(&reason);
    tracing::warn!(file = %crate::text::printable(file), reason = %crate::text::printable(&reason), "rejected: no readable interchange");
    let report = file_report(file, Disposition::Rejected, reason);
    registry.batch(|b| {
        b.record_event(
            EventKind::Unreadable,
            None,
            None,
            None,
            Disposition::Rejected,
            &json(&report),
        )
    })?;
    Ok(report)
}

/// One round over items with distinct keys; returns the items whose keys are busy elsewhere
/// (to retry) with their holders, having settled every other one. Each step is one
/// transaction or one durable write: (2) claim every key, (3) prepare the owned ones
/// (decide, reserve, renew), (4) write every output, (5) complete; a stop or a failure
/// between two steps marks the owned claims failed, so a rerun takes them over at once.
fn run_round(
    round: &[usize],
    items: &mut [Item<'_>],
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    options: &ProcessOptions,
) -> Result<Vec<(usize, Holder)>, ProcessError> {
    let r = Round {
        config,
        schemas,
        options,
        lease_ms: i64::try_from(config.gateway.lease_seconds.saturating_mul(1000))
            .unwrap_or(i64::MAX),
        run_documents: config.gateway.documents_per_run,
    };
    let mut plans = claim_all(&r, round, items, registry)?;
    let busy: Vec<(usize, Holder)> = plans
        .iter()
        .filter_map(|InFlight { item: i, plan: p }| match p {
            AfterClaim::Busy(h) => Some((*i, h.clone())),
            _ => None,
        })
        .collect();
    let owned: Vec<usize> = plans
        .iter()
        .filter(|InFlight { plan: p, .. }| matches!(p, AfterClaim::Own(_)))
        .map(|f| f.item)
        .collect();
    if !owned.is_empty() {
        fail::fail_point!("claim.after", |_| std::process::abort());
    }
    // A stop cuts short only work this round owns: a round of busy keys (a wait for
    // another process) and replays goes on to its end, so that each gets its report.
    if options.stop.abandoned() && !owned.is_empty() {
        return Err(interrupted(registry, &owned, items, options));
    }
    // What needs only the interchange is checked on every core, before the transaction
    // that decides (so its lock is not held meanwhile).
    let owned_items: Vec<&Item<'_>> = owned.iter().filter_map(|i| items.get(*i)).collect();
    let found = crate::cores::in_ranges(owned_items.len(), crate::cores::available(), |run| {
        run.filter_map(|k| owned_items.get(k))
            .map(|it| match it.large {
                Some(large) => large.found.clone(),
                None => super::findings(&it.ic, r.config, r.schemas),
            })
            .collect()
    });
    drop(owned_items);
    let (mut prepared, writes) = match prepare_all(&r, &mut plans, items, found, registry) {
        Ok(p) => p,
        Err(e) => return Err(fail_all(registry, &owned, items, options, e)),
    };
    for InFlight { item: i, plan } in &plans {
        if matches!(plan, AfterClaim::Replay(_)) {
            // The sender of a resend learns what the first execution produced.
            let it = &mut items[*i];
            if let Err(e) = crate::pipeline::documents::replayed(registry, &it.key, &mut it.report)
            {
                return Err(fail_all(registry, &owned, items, options, e));
            }
        }
    }
    if !owned.is_empty() {
        // Decided and recorded (control numbers, documents), nothing written yet.
        fail::fail_point!("prepare.after", |_| std::process::abort());
    }
    if options.stop.abandoned() && !owned.is_empty() {
        return Err(interrupted(registry, &owned, items, options));
    }
    // The acknowledgments wait for the completion: a 997 that says "accepted" is never in
    // the outbox before the documents it acknowledges are durable and recorded, and one of
    // an attempt that fails before then is never seen (its redo writes the same bytes under
    // the same name, from the reserved numbers). The replays' and refusals' are placed then
    // too, with the decisions they repeat or refuse recorded.
    let replays = writes.len();
    let mut acks = writes;
    let (documents, owned_acks): (Vec<Output>, Vec<Output>) = prepared
        .iter_mut()
        .filter(|p| !p.lost)
        .flat_map(|p| std::mem::take(&mut p.files))
        .partition(|o| o.ack.is_none());
    acks.extend(owned_acks);
    if let Err(e) =
        make_documents(&r, &mut prepared, items).and_then(|()| write_all(&r, documents, items))
    {
        return Err(fail_all(registry, &owned, items, options, e));
    }
    if !owned.is_empty() {
        fail::fail_point!("outputs.after", |_| std::process::abort());
    }
    if let Err(e) = more_runs(&r, &mut prepared, items, registry, &mut acks) {
        return Err(fail_all(registry, &owned, items, options, e));
    }
    let stored = to_store(&r, &mut acks, replays, items);
    let completed = complete_all(
        &r,
        &mut prepared,
        &plans,
        &stored,
        !owned.is_empty(),
        items,
        registry,
    )?;
    if !owned.is_empty() {
        fail::fail_point!("acks.before", |_| std::process::abort());
    }
    // Only the answers of decisions recorded: a claim lost to a takeover is answered by
    // its new owner.
    let owned_by: std::collections::HashSet<usize> = owned.iter().copied().collect();
    acks.retain(|a| !owned_by.contains(&a.item) || completed.contains(&a.item));
    place_acks(&r, acks, items)?;
    Ok(busy)
}

/// A stop that abandons work, between two steps: the batch's claims are marked failed.
fn interrupted(
    registry: &mut Registry,
    owned: &[usize],
    items: &[Item<'_>],
    options: &ProcessOptions,
) -> ProcessError {
    fail_all(registry, owned, items, options, ProcessError::Interrupted)
}

/// After an operational failure mid-batch: mark the batch's claims failed (best effort) so a
/// rerun takes them over at once, and pass the error on.
fn fail_all(
    registry: &mut Registry,
    owned: &[usize],
    items: &[Item<'_>],
    options: &ProcessOptions,
    e: ProcessError,
) -> ProcessError {
    let reason = e.to_string();
    let failed = registry.batch(|b| {
        owned
            .iter()
            .try_for_each(|i| b.fail(&items[*i].key, &options.owner, &reason))
    });
    if let Err(f) = failed {
        tracing::warn!(error = %f, "could not mark the batch's claims failed; they wait for their lease");
    }
    e
}

#[cfg(test)]
mod tests {
    use super::complete::recorded_detail;
    use super::*;

    /// A gateway in `root` that accepts anyone, and a file of `n` copies of the 850 fixture
    /// under distinct control numbers.
    fn gateway(root: &Path, n: usize) -> (Config, PathBuf) {
        let text = format!(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\nunknown_partners = \"accept\"\n\
             outbox = \"{0}/outbox\"\nout = \"{0}/out\"\ndatabase = \"{0}/x12gate.db\"\n",
            root.display()
        );
        let config = Config::from_str(&text, &root.join("p.toml")).unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/850-004010.x12");
        let one = String::from_utf8(std::fs::read(fixture).unwrap()).unwrap();
        let file: String = (0..n)
            .map(|i| {
                one.replace("000000101", &format!("{:09}", 1000 + i))
                    .replace("*101*X*", &format!("*{}*X*", 1000 + i))
                    .replace("GE*1*101~", &format!("GE*1*{}~", 1000 + i))
            })
            .collect();
        let path = root.join("many.x12");
        std::fs::write(&path, file).unwrap();
        (config, path)
    }

    #[test]
    fn the_record_of_an_interchange_lists_its_first_documents_and_says_how_many() {
        let mut report = file_report("f.x12", Disposition::Accepted, String::new());
        report.documents = (0..150)
            .map(|i| super::super::DocumentReport {
                set: "850".into(),
                st02: format!("{i:04}"),
                key: format!("ZZ:ACME:850:PO-{i}:00:"),
                disposition: crate::document::DocumentDisposition::New,
                usage: crate::document::Usage::Production,
                undelivered: None,
                duplicate_of: None,
                output: Some(format!("out/{i}.json")),
                result_ref: None,
            })
            .collect();
        report.outputs = (0..150).map(|i| format!("out/{i}.json")).collect();
        let recorded = recorded_detail(&mut report);
        let detail: serde_json::Value = serde_json::from_str(&recorded).unwrap();
        assert_eq!(detail["documents"].as_array().unwrap().len(), RECORDED);
        assert_eq!(detail["outputs"].as_array().unwrap().len(), RECORDED);
        assert_eq!(detail["documents_total"], 150);
        // The report itself (the `process --json` line) keeps them all.
        assert_eq!((report.documents.len(), report.outputs.len()), (150, 150));
        assert_eq!(report.documents[149].st02, "0149");
        assert_eq!(report.documents_total, None);
        // What the watcher keeps of it is what the history records.
        let mut kept = report.clone();
        kept.keep_first(RECORDED);
        assert_eq!(json(&kept), recorded);
        // Few documents but many outputs: recorded and kept alike.
        report.documents.truncate(99);
        report
            .outputs
            .extend((150..160).map(|i| format!("out/{i}.json")));
        let recorded = recorded_detail(&mut report);
        let mut kept = report.clone();
        kept.keep_first(RECORDED);
        assert_eq!(json(&kept), recorded);
        assert_eq!(kept.documents_total, Some(99));
        report.documents.truncate(3);
        report.outputs.truncate(3);
        let small: serde_json::Value = serde_json::from_str(&recorded_detail(&mut report)).unwrap();
        assert!(small.get("documents_total").is_none());
    }

    #[test]
    fn a_stop_between_pieces_leaves_the_file_unfinished() {
        let dir = tempfile::tempdir().unwrap();
        let (config, path) = gateway(dir.path(), 20);
        let mut registry = crate::setup::open_registry(&config).unwrap();
        let schemas = crate::schema::builtin().unwrap();
        let options = ProcessOptions {
            window: 2_000,
            ..ProcessOptions::new(true)
        };
        let source = Source::from(path.as_path());
        let run = |registry: &mut Registry| {
            let reader = Reader::open(&path, config.limits, options.window).unwrap();
            let mut reports = Vec::new();
            let mut gw = Run {
                config: &config,
                schemas,
                registry,
                options: &options,
            };
            in_pieces(&mut gw, &source, reader, &mut None, &mut |piece, _| {
                reports.extend(piece)
            })
            .unwrap()
            .unwrap();
            reports
        };
        // Read whole, all 20 are accepted.
        let all = run(&mut registry);
        assert_eq!(all.len(), 20);
        assert!(all.iter().all(|r| r.disposition == Disposition::Accepted));
        // Stopped before a piece: that piece and the rest are not read, and the file says so.
        options.stop.abandon();
        let cut = run(&mut registry);
        assert_eq!(cut.len(), 1, "{cut:?}");
        assert_eq!(cut[0].disposition, Disposition::InProgress);
        assert!(cut[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("rest of the file")));
    }
}
