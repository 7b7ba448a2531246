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

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::ack::{self, Disposition};
use crate::config::{Config, Partner};
use crate::finding::Finding;
use crate::input::{self, Reader};
use crate::registry::{
    AckBytes, AckToStore, Batch, Claim, ClaimRequest, Completion, EventKind, GroupKey, Previous,
    Registry, Renewed, Reservation, StoredAck,
};
use crate::schema::Schemas;
use crate::x12::{Interchange, Interchanges};
use crate::{fingerprint, outputs, validate};

use super::documents::{Planned, Progress};
use super::large::{FirstReading, Large};
use super::{
    acknowledgments, correlation_id, decide_found, decide_with, interchange_key, json,
    numbers_needed, outbound_name, output_stem, Decision, ProcessError, ProcessOptions, Report,
    Source, Turn,
};

/// Files read per batch, and the bytes they may hold together.
pub const BATCH_FILES: usize = 256;
pub const BATCH_BYTES: usize = 64 << 20;

/// What became of one file: its interchanges' reports, or why it could not be read.
#[derive(Debug)]
pub struct FileOutcome {
    pub path: PathBuf,
    pub result: Result<Vec<Report>, ProcessError>,
}

/// One interchange on its way through a batch.
pub(super) struct Item<'a> {
    pub utf8: bool,
    pub ic: Interchange<'a>,
    pub partner: Partner,
    pub key: String,
    fingerprint: String,
    pub report: Report,
    /// For an interchange larger than a piece: what its first reading took (its `ic` is
    /// then the outline), and its second reading.
    pub large: Option<&'a Large>,
}

/// An owned interchange once decided, with the outputs of its first run of documents (all
/// of them, for most) built in memory.
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

/// Processes one file (a batch of one): what `watch` does for each file it takes.
pub fn process_file(
    path: &Path,
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    options: &ProcessOptions,
) -> Result<Vec<Report>, ProcessError> {
    let mut outcomes = process_files(
        &[Source::from(path)],
        config,
        schemas,
        registry,
        options,
        None,
    )?;
    match outcomes.pop() {
        Some(o) => o.result,
        None => Ok(Vec::new()),
    }
}

/// Processes files in batches. `Err` only for what stops the run (the registry, outputs that
/// cannot be written, a stop mid-batch); a file that cannot be read is an `Err` in its own
/// outcome. With a `turn`, the first batch claims its keys in that turn (see
/// [`super::ClaimOrder`]); callers that need the order for every file pass at most
/// [`BATCH_FILES`] files of at most [`BATCH_BYTES`] together. After a stop request that
/// abandons work, the files not yet begun are left out of the outcomes.
///
/// A file of at most a window ([`ProcessOptions::window`]) is read whole and batched with its neighbours;
/// a larger one is read in pieces of whole interchanges ([`input::Reader`]), each piece a
/// batch of its own, so that memory is a window (or the largest interchange), not the file.
pub fn process_files(
    sources: &[Source],
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    options: &ProcessOptions,
    turn: Option<Turn>,
) -> Result<Vec<FileOutcome>, ProcessError> {
    process_files_keeping(
        sources,
        config,
        schemas,
        registry,
        options,
        turn,
        usize::MAX,
    )
}

/// [`process_files`], each report keeping at most `kept` of its documents and outputs
/// ([`Report::keep_first`]) as soon as it is settled: what a caller that needs every
/// interchange's outcome but not every document's (the watcher) holds of a large file.
pub fn process_files_keeping(
    sources: &[Source],
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    options: &ProcessOptions,
    turn: Option<Turn>,
    kept: usize,
) -> Result<Vec<FileOutcome>, ProcessError> {
    let mut outcomes: Vec<(usize, FileOutcome)> = Vec::with_capacity(sources.len());
    process_files_into(
        sources,
        config,
        schemas,
        registry,
        options,
        turn,
        &mut |settled| {
            let (file, result) = match settled {
                Settled::Reports {
                    file, mut reports, ..
                } => {
                    for report in &mut reports {
                        report.keep_first(kept);
                    }
                    (file, Ok(reports))
                }
                Settled::Failed { file, error } => (file, Err(error)),
            };
            match outcomes.last_mut() {
                // A large file's later pieces, or the failure that ended it.
                Some((last, outcome)) if *last == file => match (&mut outcome.result, result) {
                    (Ok(had), Ok(more)) => had.extend(more),
                    (had, result) => *had = result,
                },
                _ => outcomes.push((
                    file,
                    FileOutcome {
                        path: sources
                            .get(file)
                            .map(|s| s.read.clone())
                            .unwrap_or_default(),
                        result,
                    },
                )),
            }
        },
    )?;
    Ok(outcomes.into_iter().map(|(_, o)| o).collect())
}

/// What [`process_files_into`] hands over as soon as it is settled, in file order.
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

/// [`process_files`], each file's reports handed to `settled` as soon as they are settled
/// (a large file's a piece at a time) instead of gathered: a caller that prints them holds a
/// piece's reports, not a file's, however many interchanges and documents the file carries.
/// Every file begun gets at least one hand-over.
pub fn process_files_into(
    sources: &[Source],
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    options: &ProcessOptions,
    mut turn: Option<Turn>,
    settled: &mut dyn FnMut(Settled),
) -> Result<(), ProcessError> {
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
            let failure = in_pieces(
                source, *reader, config, schemas, registry, options, &mut turn, &mut piece,
            )?;
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
            let outcomes = run_batch(
                batch,
                inputs,
                config,
                schemas,
                registry,
                options,
                turn.take(),
            )?;
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
#[allow(clippy::too_many_arguments)]
fn in_pieces(
    source: &Source,
    mut reader: Reader,
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    options: &ProcessOptions,
    turn: &mut Option<Turn>,
    settled: &mut dyn FnMut(Vec<Report>, bool),
) -> Result<Result<(), ProcessError>, ProcessError> {
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
    sources: &[Source],
    inputs: Vec<Result<Vec<u8>, crate::input::InputError>>,
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    options: &ProcessOptions,
    mut turn: Option<Turn>,
) -> Result<Vec<FileOutcome>, ProcessError> {
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
                Ok(ic) if ic.part != crate::x12::Part::WHOLE => {
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
        if ic.part.first {
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
        if !ic.part.last {
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
        // The turn ends with the first claim transaction, whatever its outcome.
        *turn = None;
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
        report,
        large: None,
    }
}

/// Each item's fingerprint, and whether it is UTF-8 (per interchange: its translation is a
/// document of its own), taken on every core.
fn fingerprint_all(items: &mut [Item<'_>]) {
    let taken = crate::cores::in_ranges(items.len(), crate::cores::available(), |run| {
        run.filter_map(|i| items.get(i))
            .map(|it| {
                let ic = &it.ic;
                let utf8 = std::str::from_utf8(ic.bytes()).is_ok();
                let fp = fingerprint::fingerprint(ic, &it.partner.duplicates.fingerprint_ignore);
                (utf8, fp)
            })
            .collect()
    });
    for (it, (utf8, fp)) in items.iter_mut().zip(taken) {
        it.utf8 = utf8;
        it.fingerprint = fp;
    }
}

/// A part of a file that holds no readable interchange: nothing can be claimed or answered.
/// The longest reason a report, a reason file, the history or the registry keeps: findings
/// quote values from input, and an input value must not grow every record of it.
const MAX_REASON: usize = 512;

fn bounded_reason(text: &str) -> String {
    crate::text::shortened(text, MAX_REASON).into_owned()
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

fn span(item: &Item<'_>) -> tracing::Span {
    // At ERROR level so the span (and its correlation id) is on every line any filter lets through.
    let id = item.report.correlation_id.as_deref().unwrap_or("-");
    tracing::error_span!("interchange", correlation_id = %crate::text::printable(id))
}

/// Whether a takeover was from an owner (worth a warn line per owner) or of a claim marked
/// failed (an operational failure, a stop, a release or a reprocess: said where it happened).
enum PreviousKind {
    Owner,
    Failed,
}

/// Who holds a key we wait for, and until when.
#[derive(Debug, Clone)]
struct Holder {
    owner: String,
    lease_expires_ms: i64,
}

/// Tells, at the default log level, what a batch waits for: once per holder, then every
/// half minute while the wait goes on.
#[derive(Default)]
struct Waiting {
    told: std::collections::HashMap<String, std::time::Instant>,
}

impl Waiting {
    fn log(&mut self, busy: &[(usize, Holder)], items: &[Item<'_>]) {
        let mut by_owner: std::collections::BTreeMap<&str, (usize, i64, &str)> =
            std::collections::BTreeMap::new();
        for (i, h) in busy {
            let e = by_owner.entry(h.owner.as_str()).or_insert((
                0,
                h.lease_expires_ms,
                items[*i].key.as_str(),
            ));
            e.0 += 1;
            e.1 = e.1.max(h.lease_expires_ms);
        }
        let now = std::time::Instant::now();
        for (owner, (count, until, first)) in by_owner {
            let due = self
                .told
                .get(owner)
                .is_none_or(|t| now.duration_since(*t) >= Duration::from_secs(30));
            if !due {
                continue;
            }
            self.told.insert(owner.to_string(), now);
            let until = crate::time::local_rfc3339(until);
            // Another batch of this very process (a watcher's workers meeting one key) is a
            // short, normal wait; only another process is news for the operator.
            if owner.starts_with(&crate::owner::Owner::current().id()) {
                tracing::debug!(
                    interchanges = count,
                    first,
                    "waiting for another batch of this process"
                );
                continue;
            }
            tracing::warn!(
                holder = %crate::owner::describe(owner),
                interchanges = count,
                first = first,
                lease_until = %until,
                "waiting for another process that holds these interchanges, at most until its lease ends (SIGTERM or SIGINT stops the wait)"
            );
        }
    }
}

/// What a round does with an interchange once its claim is answered.
enum AfterClaim {
    /// Retry in a later round (another process holds it).
    Busy(Holder),
    /// Settled without writing (in progress elsewhere, with `--no-wait`).
    Event(EventKind),
    /// Replay these stored acknowledgments (a duplicate).
    Replay(Vec<StoredAck>),
    /// Refuse with a TA1 R 025 (a conflict); the decision is made when the claim answers.
    Refuse(Box<Decision>),
    /// Ours: the content the key was first claimed for.
    Own(String),
}

/// One output to write: where, what, and for which interchange (and whether it is an
/// acknowledgment, of which kind).
pub(super) struct Output {
    pub item: usize,
    pub dir: Folder,
    pub name: String,
    pub content: Content,
    pub ack: Option<String>,
    /// An acknowledgment's own ISA13, to name it apart from an earlier decision's.
    pub isa13: Option<u32>,
}

/// The folder of the gateway an output goes to (named, not held as a path: an interchange
/// of a million documents has a million outputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Folder {
    Out,
    /// `out/test/`, for the files of a test interchange.
    TestOut,
    Outbox,
}

impl Folder {
    pub fn path(self, gateway: &crate::config::Gateway) -> &Path {
        match self {
            Folder::Out => &gateway.out,
            Folder::TestOut => &gateway.test_out,
            Folder::Outbox => &gateway.outbox,
        }
    }

    /// Where the files of an interchange or document of `usage` go.
    pub fn out(usage: crate::document::Usage) -> Folder {
        match usage {
            crate::document::Usage::Production => Folder::Out,
            crate::document::Usage::Test => Folder::TestOut,
        }
    }
}

/// What an output holds: bytes made already (acknowledgments), or a translation written
/// straight into its file when the outputs are written, so that a large interchange's JSON
/// is never held in memory.
pub(super) enum Content {
    Bytes(Vec<u8>),
    /// A large interchange's 997/999, made as it is written.
    Made(Box<MadeAck>),
    /// The interchange's translation in `form`, with the sets `keep[group][set]` accepts.
    Translation {
        form: crate::translate::Form,
        keep: Vec<Vec<bool>>,
    },
    /// A business document's file, made when it is written (its set read again, so that a
    /// large interchange's documents hold a few numbers each until then).
    Document {
        group: usize,
        set: usize,
        /// For a set cut by loop: the part.
        part: Option<crate::document::Part>,
        decided: crate::registry::Decided,
    },
}

/// What makes a large interchange's 997/999 again, the same bytes each time: to its file,
/// then into the registry (a million sets' loops are 20 MB, never held).
#[derive(Clone)]
pub(super) struct MadeAck {
    response: std::sync::Arc<ack::InterchangeResponse>,
    partner: Partner,
    numbers: ack::Numbers,
    at: chrono::NaiveDateTime,
}

impl MadeAck {
    fn write(
        &self,
        ic: &Interchange<'_>,
        gateway: &crate::config::Gateway,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        let (response, partner) = (&self.response, &self.partner);
        ack::Plan::of(response, ic, partner, gateway, &self.numbers, self.at)
            .map_err(std::io::Error::other)?
            .write_group_acks(ic, out)
    }
}

/// An acknowledgment written, kept for its completion to store.
pub(super) enum Kept {
    Held(StoredAck),
    Made {
        kind: String,
        path: String,
        made: Box<MadeAck>,
    },
}

/// Writes one output's content to `out`.
type Writer<'a> = Box<dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()> + Sync + 'a>;

/// What one round works by: the configuration, the definitions, how to process, and the
/// lease every claim of it takes.
pub(super) struct Round<'c> {
    pub config: &'c Config,
    pub schemas: &'c Schemas,
    options: &'c ProcessOptions,
    lease_ms: i64,
    /// Documents decided in one transaction and written in one round of fsyncs, at most.
    pub run_documents: usize,
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
        .filter_map(|(i, p)| match p {
            AfterClaim::Busy(h) => Some((*i, h.clone())),
            _ => None,
        })
        .collect();
    let owned: Vec<usize> = plans
        .iter()
        .filter(|(_, p)| matches!(p, AfterClaim::Own(_)))
        .map(|(i, _)| *i)
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
    for (i, plan) in &plans {
        if matches!(plan, AfterClaim::Replay(_)) {
            // The sender of a resend learns what the first execution produced.
            let it = &mut items[*i];
            if let Err(e) = super::documents::replayed(registry, &it.key, &mut it.report) {
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
    if let Err(e) = write_all(&r, documents, items) {
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

/// The acknowledgments in `acks` listed in their interchanges' reports (the completions
/// record where they go), and those after the first `replays` (already stored) kept for
/// their completions to store, by item.
fn to_store(
    r: &Round<'_>,
    acks: &mut [Output],
    replays: usize,
    items: &mut [Item<'_>],
) -> std::collections::HashMap<usize, Vec<Kept>> {
    let mut stored: std::collections::HashMap<usize, Vec<Kept>> = std::collections::HashMap::new();
    for (n, a) in acks.iter_mut().enumerate() {
        if let (true, Some(isa13)) = (n >= replays, a.isa13) {
            a.name = apart(&r.config.gateway.outbox, &a.name, isa13);
        }
        let path = a.dir.path(&r.config.gateway).join(&a.name);
        let path = std::path::absolute(&path).unwrap_or(path);
        items[a.item].report.acks.push(path.display().to_string());
        let (true, Some(kind)) = (n >= replays, a.ack.clone()) else {
            continue;
        };
        let kept = match &a.content {
            Content::Made(made) => Kept::Made {
                kind,
                path: a.name.clone(),
                made: made.clone(),
            },
            Content::Bytes(bytes) => Kept::Held(StoredAck {
                kind,
                path: a.name.clone(),
                bytes: bytes.clone(),
            }),
            // invariant: an acknowledgment's content is made or held, never a translation.
            Content::Translation { .. } | Content::Document { .. } => continue,
        };
        stored.entry(a.item).or_default().push(kept);
    }
    stored
}

/// `name` in the outbox, or when an earlier decision's acknowledgment is there under it (a
/// reprocess, a conflicting content refused again) the same name with our ISA13 before its
/// kind, so that a second acknowledgment never replaces the first before it was sent. An
/// attempt's own acknowledgment is never there before its completion, so a redo keeps the
/// name it was recorded with.
fn apart(outbox: &Path, name: &str, isa13: u32) -> String {
    if std::fs::symlink_metadata(outbox.join(name)).is_err() {
        return name.to_string();
    }
    match name.strip_suffix(".x12").and_then(|n| n.rsplit_once('.')) {
        Some((stem, kind)) => format!("{stem}.{isa13:09}.{kind}.x12"),
        None => format!("{name}.{isa13:09}"),
    }
}

/// Step (6): the acknowledgments of decisions recorded placed in the outbox, durably. A
/// failure here leaves the decisions recorded: the rerun finds them duplicates and places
/// their stored acknowledgments, under the same names.
fn place_acks(r: &Round<'_>, acks: Vec<Output>, items: &[Item<'_>]) -> Result<(), ProcessError> {
    if acks.is_empty() {
        return Ok(());
    }
    let writers: Vec<Writer<'_>> = acks
        .iter()
        .map(|a| -> Writer<'_> {
            match &a.content {
                Content::Made(made) => {
                    let it = &items[a.item];
                    Box::new(move |out| made.write(&it.ic, &r.config.gateway, out))
                }
                Content::Bytes(bytes) => Box::new(move |out| out.write_all(bytes)),
                Content::Translation { .. } | Content::Document { .. } => Box::new(|_| Ok(())),
            }
        })
        .collect();
    let files: Vec<(&Path, &str, &outputs::Content<'_>)> = acks
        .iter()
        .zip(&writers)
        .map(|(a, write)| {
            (
                a.dir.path(&r.config.gateway),
                a.name.as_str(),
                write.as_ref(),
            )
        })
        .collect();
    outputs::write_many(&files, &r.options.owner).map_err(|e| ProcessError::Io {
        path: e.path.display().to_string(),
        cause: e.cause,
    })?;
    Ok(())
}

/// Step (2): every key of the round claimed in one transaction, and what to do with each.
fn claim_all(
    r: &Round<'_>,
    round: &[usize],
    items: &mut [Item<'_>],
    registry: &mut Registry,
) -> Result<Vec<(usize, AfterClaim)>, ProcessError> {
    // The registry keeps where the file was, whatever folder `process` was run from.
    let files: std::collections::HashMap<usize, String> = round
        .iter()
        .map(|&i| {
            let f = &items[i].report.file;
            // Standard input has no path to keep.
            let abs = if f == "-" {
                f.clone()
            } else {
                std::path::absolute(f).map_or_else(|_| f.clone(), |p| p.display().to_string())
            };
            (i, abs)
        })
        .collect();
    let partners: Vec<String> = round.iter().map(|&i| items[i].partner.key()).collect();
    let requests: Vec<ClaimRequest<'_>> = round
        .iter()
        .zip(&partners)
        .map(|(&i, partner)| {
            let it = &items[i];
            ClaimRequest {
                key: &it.key,
                partner,
                control_number: it.ic.isa.control_number(),
                fingerprint: &it.fingerprint,
                file: files
                    .get(&i)
                    .map_or(it.report.file.as_str(), String::as_str),
                owner: &r.options.owner,
                lease_ms: r.lease_ms,
                is_dead: &crate::owner::is_dead,
            }
        })
        .collect();
    let claims: Vec<Claim> = registry.batch_again(|b| b.claim_interchanges(&requests))?;
    let mut takeovers: std::collections::BTreeMap<String, usize> = Default::default();
    let plans = round
        .iter()
        .zip(claims)
        .map(|(&i, claim)| {
            let plan = after_claim(&mut items[i], claim, r.options.no_wait, &mut takeovers);
            (i, plan)
        })
        .collect();
    for (from, n) in &takeovers {
        tracing::warn!(interchanges = n, "taking over unfinished claims of {from}");
    }
    Ok(plans)
}

/// What to do with an interchange once its claim answered `claim`, its report updated to
/// say so; takeovers of other processes' claims are counted in `takeovers`, by process.
fn after_claim(
    it: &mut Item<'_>,
    claim: Claim,
    no_wait: bool,
    takeovers: &mut std::collections::BTreeMap<String, usize>,
) -> AfterClaim {
    let _enter = span(it).entered();
    match claim {
        Claim::Busy { owner, .. } if no_wait => {
            let holder = crate::owner::describe(&owner);
            tracing::info!(%holder, "in progress elsewhere; not waiting");
            it.report.reason = Some(format!("{holder} holds the claim"));
            AfterClaim::Event(EventKind::InProgress)
        }
        Claim::Busy {
            owner,
            lease_expires_ms,
        } => AfterClaim::Busy(Holder {
            owner,
            lease_expires_ms,
        }),
        Claim::Duplicate(done) => {
            // The original's outcome travels with the replay: an exact resend of a rejected
            // interchange is answered the same way and is still a rejected file.
            it.report.replayed = done.disposition;
            if it.report.replayed.is_some_and(|d| !d.is_success()) {
                it.report.reason_code = done.reason_code.clone();
                it.report.reason = done.reason.clone();
            }
            it.report.disposition = Disposition::Duplicate;
            tracing::info!(
                acks = done.acks.len(),
                "duplicate: original acknowledgments replayed"
            );
            AfterClaim::Replay(done.acks)
        }
        Claim::Conflict(earlier) => {
            let response = ack::conflict(&it.ic, &it.partner, &earlier.fingerprint);
            it.report.disposition = Disposition::Conflict;
            it.report.reason_code = Some(crate::finding::Ta105::DuplicateControlNumber.to_string());
            it.report.reason = response.reason.as_ref().map(|r| bounded_reason(&r.text));
            tracing::error!(earlier = %earlier.fingerprint, now = %it.fingerprint, "CONFLICT: control number reused for different content; nothing processed");
            AfterClaim::Refuse(Box::new(Decision {
                partner: it.partner.clone(),
                known: true,
                findings: Vec::new(),
                response: std::sync::Arc::new(response),
            }))
        }
        Claim::Owned {
            attempt,
            previous,
            first_fingerprint,
        } => {
            it.report.attempt = Some(attempt);
            let (why, previous_kind) = match &previous {
                Previous::Expired { .. } => ("its lease expired", PreviousKind::Owner),
                Previous::Dead { .. } => ("its process is dead", PreviousKind::Owner),
                _ => ("it failed", PreviousKind::Failed),
            };
            it.report.took_over = match previous {
                Previous::Expired { owner } | Previous::Dead { owner } => Some(owner),
                Previous::Failed => Some("failed attempt".into()),
                _ => None,
            };
            if let Some(from) = &it.report.took_over {
                tracing::info!(attempt, took_over = %from, "taking over an unfinished claim: {why}");
                if !matches!(previous_kind, PreviousKind::Failed) {
                    *takeovers
                        .entry(format!("{} ({why})", crate::owner::describe(from)))
                        .or_default() += 1;
                }
            }
            AfterClaim::Own(first_fingerprint)
        }
    }
}

/// Step (3), in one transaction: the owned interchanges decided (from `found`, their own
/// findings, in plan order), their control numbers reserved and their leases renewed; the
/// stored answers of duplicates, and the TA1s of conflicts numbered.
fn prepare_all(
    r: &Round<'_>,
    plans: &mut [(usize, AfterClaim)],
    items: &[Item<'_>],
    found: Vec<Vec<Finding>>,
    registry: &mut Registry,
) -> Result<(Vec<Prepared>, Vec<Output>), ProcessError> {
    registry.batch(|b| {
        let mut prepared = Vec::new();
        let mut outputs = Vec::new();
        // The fences first, all at once (a fence touches only its own key); then the group
        // keys of the interchanges still ours, all at once too, in order (a key two of them
        // carry is the second one's duplicate, as one after the other).
        let owned: Vec<&Item<'_>> = plans
            .iter()
            .filter(|(_, plan)| matches!(plan, AfterClaim::Own(_)))
            .filter_map(|(i, _)| items.get(*i))
            .collect();
        let keys: Vec<&str> = owned.iter().map(|it| it.key.as_str()).collect();
        let renewed = b.renew_many(&keys, &r.options.owner, r.lease_ms)?;
        let groups: Vec<Vec<GroupKey>> = owned.iter().map(|it| group_keys(&it.ic)).collect();
        let partners: Vec<String> = owned.iter().map(|it| it.partner.key()).collect();
        let checked: Vec<bool> = owned
            .iter()
            .zip(&renewed)
            .zip(&groups)
            .map(|((it, renewed), groups)| {
                renewed.is_some() && it.partner.duplicates.check_groups && !groups.is_empty()
            })
            .collect();
        let claims: Vec<(&str, &str, &[GroupKey], u32)> = owned
            .iter()
            .zip(&keys)
            .zip(&partners)
            .zip(&groups)
            .zip(&checked)
            .filter(|(_, checked)| **checked)
            .map(|((((it, key), partner), groups), _)| {
                (
                    *key,
                    partner.as_str(),
                    groups.as_slice(),
                    it.partner.duplicates.window_days,
                )
            })
            .collect();
        let mut seen = b.claim_groups_many(&claims)?.into_iter();
        let mut shared = Shared::of(&claims);
        drop(claims);
        let mut ready = renewed.into_iter().zip(groups).zip(checked).zip(found);
        // Into the outbox of the configuration in force, whatever folder the first answer
        // went to (a restored or moved gateway): rows store the name, older rows an absolute
        // path of which only the name counts. The bytes are moved, not copied: a replayed 997
        // of a million sets is 22 MB.
        for (i, plan) in plans.iter_mut() {
            let AfterClaim::Replay(acks) = plan else {
                continue;
            };
            outputs.extend(acks.iter_mut().map(|a| {
                Output {
                    item: *i,
                    dir: Folder::Outbox,
                    name: Path::new(&a.path)
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    content: Content::Bytes(std::mem::take(&mut a.bytes)),
                    ack: Some(a.kind.clone()),
                    isa13: None,
                }
            }));
        }
        // Each interchange decided; then the control numbers all of them need, taken
        // together in their order (as one after the other would take them).
        let mut stages = Vec::new();
        for (i, plan) in plans.iter() {
            let it = &items[*i];
            match plan {
                AfterClaim::Own(first) => {
                    let (((renewed, groups), checked), found) = ready
                        .next()
                        .unwrap_or((((None, Vec::new()), false), Vec::new()));
                    let mut seen_before = if checked {
                        seen.next().unwrap_or_default()
                    } else {
                        Vec::new()
                    };
                    let partner = it.partner.key();
                    if checked {
                        shared.claim_freed(b, it, &partner, &groups, &mut seen_before)?;
                    }
                    stages.push(match renewed {
                        Some(renewed) => {
                            let owned = decide_owned(r, it, renewed, found, groups, &seen_before);
                            if checked {
                                shared.release(b, it, &partner, &owned)?;
                            }
                            Stage::Own(first, Box::new(owned))
                        }
                        None => Stage::Lost,
                    });
                }
                AfterClaim::Refuse(decision) => stages.push(Stage::Refuse(decision)),
                AfterClaim::Replay(_) | AfterClaim::Busy(_) | AfterClaim::Event(_) => {
                    stages.push(Stage::Done)
                }
            }
        }
        let partners: Vec<String> = stages
            .iter()
            .map(|stage| match stage {
                Stage::Own(_, owned) => owned.decision.partner.key(),
                Stage::Refuse(decision) => decision.partner.key(),
                Stage::Lost | Stage::Done => String::new(),
            })
            .collect();
        // A content refused before whose TA1 is still in the outbox (a redo after a crash
        // cut the placing of its file short): that TA1 again, no new number.
        let earlier: Vec<Option<Vec<u8>>> = plans
            .iter()
            .zip(&stages)
            .map(|((i, _), stage)| match stage {
                Stage::Refuse(_) => std::fs::read(
                    r.config
                        .gateway
                        .outbox
                        .join(refusal_name(&items[*i], ack::OutboundKind::Ta1)),
                )
                .ok(),
                _ => None,
            })
            .collect();
        let wants: Vec<(&str, usize, usize)> = stages
            .iter()
            .zip(&partners)
            .zip(&earlier)
            .map(|((stage, partner), earlier)| {
                let needed = match stage {
                    Stage::Own(_, owned) if owned.reserved.is_none() => {
                        numbers_needed(&owned.decision)
                    }
                    Stage::Refuse(decision) if earlier.is_none() => numbers_needed(decision),
                    _ => ack::NumbersNeeded { isa13: 0, gs06: 0 },
                };
                (partner.as_str(), needed.isa13, needed.gs06)
            })
            .collect();
        let mut taken = b.take_control_numbers(&wants)?.into_iter();
        // Documents are decided in file order, a run's worth in this transaction (across the
        // batch's interchanges): once the run is full, the rest wait for `more_runs`, which
        // decides them in order, a run at a time.
        let mut budget = r.run_documents;
        let mut earlier = earlier.into_iter();
        for ((i, _), stage) in plans.iter().zip(stages) {
            let earlier = earlier.next().flatten();
            let it = &items[*i];
            let (isa13, gs06) = taken.next().unwrap_or_default();
            match stage {
                Stage::Own(first, mut owned) => {
                    let reservation = match owned.reserved.take() {
                        Some(earlier) => earlier,
                        None => {
                            // Reserved with the claim, so a takeover of this claim writes
                            // the very same bytes.
                            let reservation = Reservation {
                                at_ms: crate::registry::now_ms(),
                                isa13,
                                gs06,
                            };
                            b.keep_reservation(&it.key, &reservation)?;
                            reservation
                        }
                    };
                    let mut p = prepare(r, *i, it, first, *owned, reservation)?;
                    if budget > 0 {
                        budget = next_run(b, r, &mut p, it, budget)?;
                    }
                    // An interchange with nothing to decide (a rejected one) is answered now,
                    // whether it waits or not.
                    p.files = run_files(&mut p, &it.ic);
                    prepared.push(p);
                }
                Stage::Lost => prepared.push(Prepared {
                    item: *i,
                    decision: decide_with(&it.ic, r.config, r.schemas, Vec::new()),
                    files: Vec::new(),
                    group_keys: Vec::new(),
                    documents: Planned::default(),
                    progress: Progress::new(&it.ic, false),
                    acks: Vec::new(),
                    stem: String::new(),
                    lost: true,
                }),
                Stage::Refuse(_) if earlier.is_some() => outputs.push(Output {
                    item: *i,
                    dir: Folder::Outbox,
                    name: refusal_name(it, ack::OutboundKind::Ta1),
                    content: Content::Bytes(earlier.unwrap_or_default()),
                    ack: Some(ack::OutboundKind::Ta1.extension().to_string()),
                    isa13: None,
                }),
                Stage::Refuse(decision) => {
                    let now = chrono::Local::now().naive_local();
                    // Not reserved: nothing is claimed, and a resend once the first answer
                    // has left the outbox is refused afresh.
                    let numbers = ack::Numbers { isa13, gs06 };
                    for o in acknowledgments(&it.ic, decision, r.config, &numbers, now)? {
                        outputs.push(Output {
                            item: *i,
                            dir: Folder::Outbox,
                            name: refusal_name(it, o.kind),
                            content: Content::Bytes(o.bytes),
                            ack: Some(o.kind.extension().to_string()),
                            isa13: Some(o.control_number),
                        });
                    }
                }
                Stage::Done => {}
            }
        }
        Ok::<_, ProcessError>((prepared, outputs))
    })
}

/// The file name of the TA1 refusing `it`'s content (a conflict).
fn refusal_name(it: &Item<'_>, kind: ack::OutboundKind) -> String {
    let fp = it.fingerprint.get(..12).unwrap_or(&it.fingerprint);
    format!(
        "{}.conflict-{fp}.{}.x12",
        outputs::safe_name(&it.key),
        kind.extension()
    )
}

/// Step (4): every translation and document written durably, each report told where.
fn write_all(
    r: &Round<'_>,
    writes: Vec<Output>,
    items: &mut [Item<'_>],
) -> Result<(), ProcessError> {
    // A file changed since it was first read fails alone (an output that cannot be written
    // stops the run): it is looked at before its translation reads it again.
    for w in &writes {
        if let (Content::Translation { .. }, Some(large)) = (&w.content, items[w.item].large) {
            large.unchanged()?;
        }
    }
    let written = {
        let items: &[Item<'_>] = items;
        let writers: Vec<Writer<'_>> = writes
            .iter()
            .map(|w| -> Writer<'_> {
                match &w.content {
                    Content::Bytes(bytes) => Box::new(move |out| out.write_all(bytes)),
                    Content::Made(made) => {
                        let it = &items[w.item];
                        Box::new(move |out| made.write(&it.ic, &r.config.gateway, out))
                    }
                    Content::Document {
                        group,
                        set,
                        part,
                        decided,
                    } => {
                        let it = &items[w.item];
                        Box::new(move |out| {
                            super::documents::write_document(
                                r.schemas,
                                it,
                                (*group, *set, part.as_ref()),
                                decided,
                                out,
                            )
                        })
                    }
                    Content::Translation { form, keep } => {
                        let it = &items[w.item];
                        Box::new(move |out| {
                            let keep = |g: usize, s: usize| {
                                keep.get(g).and_then(|k| k.get(s)).copied().unwrap_or(false)
                            };
                            if let Some(large) = it.large {
                                return large.write_translation(*form, r.schemas, &keep, out);
                            }
                            crate::translate::write_interchange_document_with(
                                &it.ic,
                                it.utf8,
                                *form,
                                Some(r.schemas),
                                &keep,
                                out,
                            )
                            .map_err(|e| match e {
                                crate::translate::ParseError::Io(e) => e,
                                e => std::io::Error::other(format!("translating: {e}")),
                            })
                        })
                    }
                }
            })
            .collect();
        let files: Vec<(&Path, &str, &outputs::Content<'_>)> = writes
            .iter()
            .zip(&writers)
            .map(|(w, write)| {
                (
                    w.dir.path(&r.config.gateway),
                    w.name.as_str(),
                    write.as_ref(),
                )
            })
            .collect();
        outputs::write_many(&files, &r.options.owner)
    };
    let written = written.map_err(|outputs::WriteError { path, cause }| {
        // The file read again for a translation is not the one read first: it fails alone.
        if cause.get_ref().is_some_and(|e| e.is::<input::InputError>()) {
            if let Some(Ok(e)) = cause
                .into_inner()
                .map(|e| e.downcast::<input::InputError>())
            {
                return ProcessError::Input(*e);
            }
            return ProcessError::Translate("a file read again failed".into());
        }
        // The file it failed on names its folder (`out/` full, not the outbox).
        ProcessError::Io {
            path: path.display().to_string(),
            cause,
        }
    })?;
    for (w, path) in writes.into_iter().zip(written) {
        let path = path.display().to_string();
        let report = &mut items[w.item].report;
        match w.content {
            // The interchange's translation first (with a large interchange's last run, after
            // thousands of documents), then the first documents' files: each document's
            // report says where it went.
            Content::Translation { .. } => report.outputs.insert(0, path),
            _ if report.outputs.len() < super::documents::REPORTED => report.outputs.push(path),
            _ => {}
        }
    }
    Ok(())
}

/// Step (5), in one transaction: every owned claim completed with what was written for it,
/// every other decision recorded.
fn complete_all(
    r: &Round<'_>,
    prepared: &mut [Prepared],
    plans: &[(usize, AfterClaim)],
    stored: &std::collections::HashMap<usize, Vec<Kept>>,
    any_owned: bool,
    items: &mut [Item<'_>],
    registry: &mut Registry,
) -> Result<std::collections::HashSet<usize>, ProcessError> {
    for p in prepared.iter_mut() {
        let it = &mut items[p.item];
        let response = &p.decision.response;
        it.report.disposition = response.disposition;
        it.report.reason_code = response
            .reason
            .as_ref()
            .and_then(|r| r.code)
            .map(|c| c.to_string());
        it.report.reason = response.reason.as_ref().map(|r| bounded_reason(&r.text));
        p.progress.move_into(&mut it.report);
    }
    if any_owned {
        fail::fail_point!("complete.before", |_| std::process::abort());
    }
    let details: Vec<String> = prepared
        .iter()
        .map(|p| recorded_detail(&mut items[p.item].report))
        .collect();
    // The other decisions' events, as small (a replay lists its original's documents).
    let noted: Vec<Option<String>> = plans
        .iter()
        .map(|(i, plan)| match plan {
            AfterClaim::Busy(_) | AfterClaim::Own(_) => None,
            _ => Some(recorded_detail(&mut items[*i].report)),
        })
        .collect();
    let completed: Vec<(usize, bool)> = registry.batch_again(|b| {
        let mut completed = Vec::new();
        // The claims still ours, each with the group keys its groups not wholly accepted
        // release.
        let mut ours = Vec::new();
        for (p, detail) in prepared.iter().zip(&details) {
            if p.lost {
                completed.push((p.item, false));
                continue;
            }
            let released = released_groups(&p.decision, &p.group_keys);
            ours.push((p, detail, released));
        }
        // What makes each acknowledgment not held (a large interchange's 997/999), then
        // every acknowledgment as the registry stores it.
        type Make<'m> = Box<dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()> + 'm>;
        let kept_of = |p: &Prepared| stored.get(&p.item).map_or(&[][..], Vec::as_slice);
        let makers: Vec<Vec<Make<'_>>> = ours
            .iter()
            .map(|(p, ..)| {
                let ic = &items[p.item].ic;
                kept_of(p)
                    .iter()
                    .filter_map(|k| match k {
                        Kept::Made { made, .. } => {
                            Some(Box::new(move |out: &mut dyn std::io::Write| {
                                made.write(ic, &r.config.gateway, out)
                            }) as Make<'_>)
                        }
                        Kept::Held(_) => None,
                    })
                    .collect()
            })
            .collect();
        let to_store: Vec<Vec<AckToStore<'_>>> = ours
            .iter()
            .zip(&makers)
            .map(|((p, ..), makers)| {
                let mut makers = makers.iter();
                kept_of(p)
                    .iter()
                    .filter_map(|k| match k {
                        Kept::Held(a) => Some(a.to_store()),
                        // One maker each, in order (made just above).
                        Kept::Made { kind, path, .. } => makers.next().map(|make| AckToStore {
                            kind,
                            path,
                            bytes: AckBytes::Made(make.as_ref()),
                        }),
                    })
                    .collect()
            })
            .collect();
        let completions: Vec<(&str, Completion<'_>)> = ours
            .iter()
            .zip(&to_store)
            .map(|((p, detail, released), acks)| {
                let it = &items[p.item];
                let response = &p.decision.response;
                (
                    it.key.as_str(),
                    Completion {
                        disposition: response.disposition,
                        reason_code: it.report.reason_code.as_deref(),
                        reason: it.report.reason.as_deref(),
                        acks,
                        outputs: it
                            .report
                            .outputs
                            .get(..it.report.outputs.len().min(RECORDED))
                            .unwrap_or_default(),
                        released_groups: released,
                        event: response.disposition.into(),
                        detail,
                    },
                )
            })
            .collect();
        let done = b.complete_many(&r.options.owner, &completions)?;
        // Only a later attempt can find sightings an earlier one recorded and this one did
        // not; a first attempt's (a key never seen, or pruned) are all its own, and reading
        // them back would cost a million ids for a large interchange.
        let again: Vec<bool> = ours
            .iter()
            .map(|(p, ..)| items[p.item].report.attempt.is_some_and(|a| a > 1))
            .collect();
        let keys: Vec<&str> = completions
            .iter()
            .zip(&again)
            .filter(|(_, again)| **again)
            .map(|((key, _), _)| *key)
            .collect();
        let mut recorded = b.recorded_documents(&keys)?.into_iter();
        for (((p, ..), done), again) in ours.iter().zip(done).zip(again) {
            let recorded = if again {
                recorded.next().unwrap_or_default()
            } else {
                Vec::new()
            };
            if done {
                let key = &items[p.item].key;
                super::documents::complete(
                    b,
                    r.config,
                    &r.options.owner,
                    key,
                    &recorded,
                    &p.documents,
                    &p.progress,
                )?;
            }
            completed.push((p.item, done));
        }
        for ((i, plan), detail) in plans.iter().zip(&noted) {
            let event = match plan {
                AfterClaim::Replay(_) => EventKind::Duplicate,
                AfterClaim::Refuse(_) => EventKind::Conflict,
                AfterClaim::Event(event) => *event,
                AfterClaim::Busy(_) | AfterClaim::Own(_) => continue,
            };
            let Some(detail) = detail else {
                continue;
            };
            let it = &items[*i];
            b.record_event(
                event,
                Some(&it.key),
                Some(&it.partner.key()),
                it.report.control_number.as_deref(),
                it.report.disposition,
                detail,
            )?;
        }
        Ok::<_, ProcessError>(completed)
    })?;
    let mut recorded = std::collections::HashSet::new();
    for (i, done) in completed {
        let it = &mut items[i];
        let _enter = span(it).entered();
        if done {
            recorded.insert(i);
            tracing::info!(
                disposition = it.report.disposition.as_str(),
                acks = it.report.acks.len(),
                outputs = it.report.outputs.len(),
                "completed"
            );
        } else {
            lost_claim(&mut it.report);
        }
    }
    Ok(recorded)
}

/// The documents and outputs an audit event (and the claim's row) lists: the first ones of
/// an interchange that carries many (the registry's documents table has them all), so one
/// record stays small.
pub const RECORDED: usize = 100;

/// The report as the completion's audit event records it.
fn recorded_detail(report: &mut Report) -> String {
    if report.documents.len() <= RECORDED && report.outputs.len() <= RECORDED {
        return json(report);
    }
    let counted = (report.documents_total, report.documents_new);
    report.count_documents();
    let documents = report
        .documents
        .split_off(report.documents.len().min(RECORDED));
    let outputs = report.outputs.split_off(report.outputs.len().min(RECORDED));
    let detail = json(report);
    report.documents.extend(documents);
    report.outputs.extend(outputs);
    (report.documents_total, report.documents_new) = counted;
    detail
}

/// An owned interchange whose fence held, decided.
struct Owned {
    decision: Decision,
    group_keys: Vec<GroupKey>,
    /// The control numbers an earlier attempt reserved for its acknowledgments, when there
    /// are enough; else this attempt takes them.
    reserved: Option<Reservation>,
}

/// Where each plan of a round stands between deciding and preparing.
enum Stage<'p> {
    Own(&'p str, Box<Owned>),
    /// Our lease was lost: another process took the claim over; nothing is recorded.
    Lost,
    Refuse(&'p Decision),
    Done,
}

/// Decides an interchange whose fence held, from its own findings (`found`): the groups seen
/// in earlier interchanges of this sender (`seen_before`, registered by `prepare_all`) are
/// findings of this one too.
fn decide_owned(
    r: &Round<'_>,
    it: &Item<'_>,
    renewed: Renewed,
    found: Vec<Finding>,
    group_keys: Vec<GroupKey>,
    seen_before: &[bool],
) -> Owned {
    let extra = seen_before
        .iter()
        .enumerate()
        .filter(|(_, seen)| **seen)
        .filter_map(|(gi, _)| match it.large {
            Some(large) => large
                .gs_in_file(&it.ic, gi)
                .map(|gs| validate::group_seen_before_at(gi, &gs)),
            None => validate::group_seen_before(&it.ic, gi),
        })
        .collect();
    let decision = decide_found(&it.ic, r.config, found, extra);
    let needed = numbers_needed(&decision);
    let reserved = renewed
        .reserved
        .filter(|r| r.isa13.len() >= needed.isa13 && r.gs06.len() >= needed.gs06);
    Owned {
        decision,
        group_keys,
        reserved,
    }
}

/// The keys of `decision`'s groups that are not wholly accepted: released by its
/// completion, so a corrected resend may use them again.
fn released_groups(decision: &Decision, keys: &[GroupKey]) -> Vec<GroupKey> {
    let accepted = &decision.response.accepted_sets;
    keys.iter()
        .enumerate()
        .filter(|(gi, _)| {
            !accepted
                .get(*gi)
                .is_some_and(|s| !s.is_empty() && s.iter().all(|a| *a))
        })
        .map(|(_, k)| k.clone())
        .collect()
}

/// The group keys that several interchanges of a round carry, and those of them an earlier
/// one has released since the round registered them all at once. Registered together, a key
/// two interchanges carry is found taken by the second; but when the first is rejected, one
/// after the other the second would find it free again (the first's completion releases it):
/// so the first releases it as soon as it is decided, and the second claims it again before
/// it is decided. A crash before the round completes leaves the key with the second, whose
/// rerun keeps it; the first, rejected already, is rejected again.
struct Shared {
    carried: std::collections::HashSet<(String, GroupKey)>,
    freed: std::collections::HashSet<(String, GroupKey)>,
}

impl Shared {
    fn of(claims: &[(&str, &str, &[GroupKey], u32)]) -> Self {
        let mut once = std::collections::HashSet::new();
        let mut carried = std::collections::HashSet::new();
        for (_, partner, groups, _) in claims {
            for g in groups.iter() {
                let k = (partner.to_string(), g.clone());
                if !once.insert(k.clone()) {
                    carried.insert(k);
                }
            }
        }
        Shared {
            carried,
            freed: Default::default(),
        }
    }

    /// Claims again the groups of `it` found taken that an earlier interchange of the round
    /// has freed, updating `seen` with what the claim finds now.
    fn claim_freed(
        &mut self,
        b: &Batch<'_>,
        it: &Item<'_>,
        partner: &str,
        groups: &[GroupKey],
        seen: &mut [bool],
    ) -> Result<(), ProcessError> {
        if self.freed.is_empty() {
            return Ok(());
        }
        let again: Vec<usize> = groups
            .iter()
            .enumerate()
            .filter(|(gi, g)| {
                seen.get(*gi).copied().unwrap_or(false)
                    && self.freed.contains(&(partner.to_string(), (*g).clone()))
            })
            .map(|(gi, _)| gi)
            .collect();
        if again.is_empty() {
            return Ok(());
        }
        let these: Vec<GroupKey> = again
            .iter()
            .filter_map(|gi| groups.get(*gi).cloned())
            .collect();
        let found = b.claim_groups(&it.key, partner, &these, it.partner.duplicates.window_days)?;
        for ((gi, g), taken) in again.iter().zip(these).zip(found) {
            if let Some(s) = seen.get_mut(*gi) {
                *s = taken;
            }
            if !taken {
                self.freed.remove(&(partner.to_string(), g));
            }
        }
        Ok(())
    }

    /// Releases at once the keys `owned` will not keep that a later interchange carries.
    fn release(
        &mut self,
        b: &Batch<'_>,
        it: &Item<'_>,
        partner: &str,
        owned: &Owned,
    ) -> Result<(), ProcessError> {
        if self.carried.is_empty() {
            return Ok(());
        }
        let released: Vec<GroupKey> = released_groups(&owned.decision, &owned.group_keys)
            .into_iter()
            .filter(|g| self.carried.contains(&(partner.to_string(), g.clone())))
            .collect();
        if released.is_empty() {
            return Ok(());
        }
        b.release_groups(&it.key, partner, &released)?;
        self.freed
            .extend(released.into_iter().map(|g| (partner.to_string(), g)));
        Ok(())
    }
}

/// The keys of an interchange's groups (GS01, GS02, GS03, GS06).
fn group_keys(ic: &Interchange<'_>) -> Vec<GroupKey> {
    ic.groups
        .iter()
        .map(|g| GroupKey::of(g.gs.text(1), g.gs.text(2), g.gs.text(3), g.gs.text(6)))
        .collect()
}

/// Step (3) for one owned interchange, inside the batch's transaction: its acknowledgments
/// made; its documents are decided by [`next_run`].
fn prepare(
    r: &Round<'_>,
    i: usize,
    it: &Item<'_>,
    first_fingerprint: &str,
    owned: Owned,
    reservation: Reservation,
) -> Result<Prepared, ProcessError> {
    let ic = &it.ic;
    let Owned {
        decision,
        group_keys,
        ..
    } = owned;
    let now = chrono::Local::now().naive_local();
    let at = chrono::DateTime::from_timestamp_millis(reservation.at_ms)
        .map(|t| t.with_timezone(&chrono::Local).naive_local())
        .unwrap_or(now);
    let numbers = ack::Numbers {
        isa13: reservation.isa13,
        gs06: reservation.gs06,
    };
    let stem = output_stem(&it.key, &it.fingerprint, first_fingerprint);
    let ack_file = |kind: ack::OutboundKind, control: u32, content| Output {
        item: i,
        dir: Folder::Outbox,
        name: outbound_name(&stem, kind),
        ack: Some(kind.extension().to_string()),
        isa13: Some(control),
        content,
    };
    let acks = if it.large.is_some() {
        // A large interchange's 997/999 is made when it is written, never held.
        let plan = ack::Plan::of(
            &decision.response,
            ic,
            &decision.partner,
            &r.config.gateway,
            &numbers,
            at,
        )?;
        let made = plan.group_ack().map(|(kind, control)| {
            let made = MadeAck {
                response: std::sync::Arc::clone(&decision.response),
                partner: decision.partner.clone(),
                numbers,
                at,
            };
            ack_file(kind, control, Content::Made(Box::new(made)))
        });
        plan.ta1()
            .map(|o| ack_file(o.kind, o.control_number, Content::Bytes(o.bytes)))
            .into_iter()
            .chain(made)
            .collect()
    } else {
        acknowledgments(ic, &decision, r.config, &numbers, at)?
            .into_iter()
            .map(|o| ack_file(o.kind, o.control_number, Content::Bytes(o.bytes)))
            .collect()
    };
    let rejected = decision.response.disposition == Disposition::Rejected;
    let progress = Progress::new(ic, !rejected);
    Ok(Prepared {
        item: i,
        decision,
        files: Vec::new(),
        group_keys,
        documents: Planned::default(),
        progress,
        acks,
        stem,
        lost: false,
    })
}

/// Records and decides the next of `p`'s documents, about `budget` of them (inside a
/// transaction); returns the budget left for the interchanges after it: none when `p` has
/// documents left.
fn next_run(
    b: &Batch<'_>,
    r: &Round<'_>,
    p: &mut Prepared,
    it: &Item<'_>,
    budget: usize,
) -> Result<usize, ProcessError> {
    let accepted = accepted_by(&p.decision);
    p.documents = super::documents::plan(b, r, (p.item, it), &accepted, &mut p.progress, budget)?;
    Ok(if p.progress.next.is_some() {
        0
    } else {
        budget.saturating_sub(p.documents.decided)
    })
}

/// Whether set `si` of group `gi` is accepted, by `decision`.
fn accepted_by(decision: &Decision) -> impl Fn(usize, usize) -> bool + '_ {
    |gi: usize, si: usize| {
        decision
            .response
            .accepted_sets
            .get(gi)
            .and_then(|s| s.get(si))
            .copied()
            .unwrap_or(false)
    }
}

/// The files of the run of documents just planned; with the last run, the interchange's
/// translation (its accepted sets that carry no document, known once every run is planned)
/// and its acknowledgments first.
fn run_files(p: &mut Prepared, ic: &Interchange<'_>) -> Vec<Output> {
    let mut files = Vec::new();
    if p.progress.next.is_none() {
        let accepted = accepted_by(&p.decision);
        let keyed = &p.progress.keyed;
        // Sets that carry a business document are delivered in its own file.
        let keep = |gi: usize, si: usize| {
            accepted(gi, si)
                && !keyed
                    .get(gi)
                    .and_then(|g| g.get(si))
                    .copied()
                    .unwrap_or(false)
        };
        if p.decision.response.disposition != Disposition::Rejected
            && p.progress.interchange_file(&accepted)
        {
            // Written straight into its file with the others; only whether its sets are
            // kept is decided here.
            files.push(Output {
                item: p.item,
                dir: Folder::out(crate::document::Usage::of(ic)),
                name: format!("{}.json", p.stem),
                content: Content::Translation {
                    form: p.decision.partner.output.translation,
                    keep: ic
                        .groups
                        .iter()
                        .enumerate()
                        .map(|(gi, group)| (0..group.sets.len()).map(|si| keep(gi, si)).collect())
                        .collect(),
                },
                ack: None,
                isa13: None,
            });
        }
        files.append(&mut p.acks);
    }
    files.reserve_exact(p.documents.outputs.len());
    files.append(&mut p.documents.outputs);
    files
}

/// Steps (3) and (4) again while owned interchanges have documents left to decide, a run at
/// a time, in file order (a run may span interchanges): in one transaction the leases of
/// every claim of the round still ours are renewed (the fence; they all wait for the last
/// run), the runs written before are handed over, and the next run's documents are
/// decided; then its files are written. An interchange whose lease was lost stops there (its
/// takeover decides the rest again, finding what was recorded). The acknowledgments written
/// go into `acks`, to place once the completion is recorded.
fn more_runs(
    r: &Round<'_>,
    prepared: &mut [Prepared],
    items: &mut [Item<'_>],
    registry: &mut Registry,
    acks: &mut Vec<Output>,
) -> Result<(), ProcessError> {
    while prepared
        .iter()
        .any(|p| !p.lost && p.progress.next.is_some())
    {
        if r.options.stop.abandoned() {
            return Err(ProcessError::Interrupted);
        }
        registry.batch(|b| {
            let held: Vec<&str> = prepared
                .iter()
                .filter(|p| !p.lost)
                .map(|p| items[p.item].key.as_str())
                .collect();
            let mut renewed = b
                .renew_many(&held, &r.options.owner, r.lease_ms)?
                .into_iter()
                .map(|r| r.is_some());
            let mut budget = r.run_documents;
            for p in prepared.iter_mut().filter(|p| !p.lost) {
                if !renewed.next().unwrap_or(false) {
                    p.lost = true;
                    continue;
                }
                let it = &items[p.item];
                // Handed over once: what the completion hands over is what is left.
                let written = std::mem::take(&mut p.documents);
                super::documents::hand_over_run(b, r.config, &r.options.owner, &it.key, &written)?;
                if budget > 0 && p.progress.next.is_some() {
                    budget = next_run(b, r, p, it, budget)?;
                    p.files = run_files(p, &it.ic);
                }
            }
            Ok::<_, ProcessError>(())
        })?;
        let (files, last_acks): (Vec<Output>, Vec<Output>) = prepared
            .iter_mut()
            .filter(|p| !p.lost)
            .flat_map(|p| std::mem::take(&mut p.files))
            .partition(|o| o.ack.is_none());
        write_all(r, files, items)?;
        acks.extend(last_acks);
        fail::fail_point!("run.after", |_| std::process::abort());
    }
    Ok(())
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

/// Reports an interchange whose claim another process took over from us: not ours to report
/// as decided.
fn lost_claim(report: &mut Report) {
    tracing::warn!("lease lost: another process took this interchange over; its result stands");
    report.disposition = Disposition::InProgress;
    report.reason_code = None;
    report.reason = Some(
        "our lease expired and another process took this interchange over; see history".into(),
    );
    report.acks.clear();
    report.outputs.clear();
    report.documents.clear();
    report.documents_total = None;
    report.documents_new = None;
}

#[cfg(test)]
mod tests {
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
            in_pieces(
                &source,
                reader,
                &config,
                schemas,
                registry,
                &options,
                &mut None,
                &mut |piece, _| reports.extend(piece),
            )
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
