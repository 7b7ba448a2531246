//! `x12gate watch`: the only async code. It watches the inbox, decides when a file is
//! complete, takes it out of the inbox into its work folder ([`crate::intake`]) and hands it
//! to a bounded set of blocking workers that run the same synchronous pipeline as `process`.
//!
//! Events (notify, or none with `--poll`) only say "look at this path"; a periodic rescan of
//! the inbox catches whatever events missed (a full channel, a network file system), so no
//! file depends on an event arriving. Parsing, SQLite and fsync run on `spawn_blocking`
//! threads, never on the executor, and each worker owns its registry connection while it
//! works. Files are taken in arrival order (modification time, then name), and batches claim
//! their keys in the order they were dispatched ([`ClaimOrder`]), so the first file to arrive
//! wins a key. On shutdown the watcher stops taking files, stops waiting for other processes'
//! leases and lets the files in flight finish; what is left in its work folder is adopted by
//! the next watcher, and claims are leased, so even an abrupt exit loses and doubles nothing.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use crate::ack::Disposition;
use crate::config::Config;
use crate::inbound::{self, Destination};
use crate::intake::{Intake, IntakeError, Taken};
use crate::pipeline::{self, ClaimOrder, Gateway, Outcomes, ProcessOptions, Report, Source, Turn};
use crate::registry::{EventKind, Registry, RegistryError};
use crate::schema::Schemas;

#[derive(Debug, Clone, Copy, Default)]
pub struct WatchOptions {
    /// Rescan the inbox every `poll_ms` instead of relying on file-system events.
    pub poll: bool,
    /// Process what is in the inbox now, then return (for cron).
    pub once: bool,
    /// The web page beside `/metrics` may act (reprocess, release, retry), for operators
    /// with a token.
    pub allow_actions: bool,
}

/// What stops a watcher: only an unusable database or inbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("inbox {path}: {cause}")]
    Inbox { path: String, cause: std::io::Error },
    #[error(transparent)]
    Intake(#[from] IntakeError),
    #[error("metrics {addr}: {cause}")]
    Metrics {
        addr: std::net::SocketAddr,
        cause: std::io::Error,
    },
    #[error("file events: {0}")]
    Events(#[from] notify::Error),
    #[error(transparent)]
    Web(#[from] crate::web::WebError),
}

/// The web page served beside `/metrics`: none (with a warning) where it would be reachable
/// from other hosts without a token, so that a watcher exporting metrics to the network
/// keeps doing so (a malformed token likewise); `--allow-actions` without a usable token
/// stops the watcher at start.
fn web_site(
    config: &Arc<Config>,
    addr: std::net::SocketAddr,
    options: WatchOptions,
) -> Result<Option<Arc<crate::web::Site>>, WatchError> {
    let tokens = match crate::web::Tokens::from_env() {
        Ok(t) => t,
        Err(e) if !options.allow_actions => {
            tracing::warn!("the web page is not served: {e}; /metrics and /healthz are");
            return Ok(None);
        }
        Err(e) => return Err(crate::web::WebError::from(e).into()),
    };
    match crate::web::Site::new(config.clone(), addr, tokens, options.allow_actions) {
        Ok(site) => Ok(Some(Arc::new(site))),
        Err(e @ crate::web::WebError::Exposed { .. }) if !options.allow_actions => {
            tracing::warn!("the web page is not served: {e}; /metrics and /healthz are");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Counts since start, for the periodic summary and the final line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub files_taken: u64,
    pub accepted: u64,
    pub duplicates: u64,
    pub conflicts: u64,
    pub rejected_files: u64,
    pub retries: u64,
    /// Files left undecided in the work folder at the end (failed, or held elsewhere).
    pub left: u64,
}

/// An inbox file seen but not taken yet: taken once its size and mtime have been still for
/// the settle time.
#[derive(Debug)]
struct Seen {
    size: u64,
    modified: SystemTime,
    /// When the size or mtime last changed (as we observed it).
    changed_at: Instant,
    /// After a failed take (the rename was refused), when to try again.
    not_before: Option<Instant>,
}

/// A taken file waiting for a worker; after an operational failure, not before `not_before`.
#[derive(Debug)]
struct Queued {
    taken: Taken,
    size: u64,
    attempts: u32,
    not_before: Option<Instant>,
}

/// What a batch at work comes back with: what it decided, or (a worker that panicked) the
/// files it held, to retry.
type BatchDone = (Vec<Taken>, Vec<(Queued, Outcome)>);

/// How long newly ready files may wait for company while a batch has just started.
const GATHER: Duration = Duration::from_millis(100);

/// Registry connections shared by the blocking workers: one per worker at most.
type Pool = Arc<Mutex<Vec<Registry>>>;

enum Outcome {
    Done {
        reports: Vec<Report>,
        destination: Destination,
    },
    /// An earlier attempt had placed it already (it was cut short before cleaning up).
    Placed(Destination),
    /// The file left our work folder while we worked on it (a watcher that thought us dead
    /// adopted it): its new owner decides it.
    Gone,
    /// Try again later: an operational failure, or undecided (in progress elsewhere).
    Retry { error: String, operational: bool },
}

impl Outcome {
    /// An operational failure: the file stays in the work folder and is retried.
    fn failed(error: String) -> Outcome {
        Outcome::Retry {
            error,
            operational: true,
        }
    }
}

/// Processes a batch of taken files (one transaction per step for all of them, see
/// `pipeline::Gateway::process`) and places each where it belongs.
fn process_batch(
    batch: Vec<Queued>,
    turn: Turn,
    config: &Config,
    schemas: &Schemas,
    pool: &Pool,
    options: &ProcessOptions,
    live: &crate::metrics::Live,
) -> Vec<(Queued, Outcome)> {
    let started = Instant::now();
    let outcomes = process_batch_timed(batch, turn, config, schemas, pool, options);
    live.batch_seconds.observe(started.elapsed().as_secs_f64());
    outcomes
}

fn process_batch_timed(
    batch: Vec<Queued>,
    turn: Turn,
    config: &Config,
    schemas: &Schemas,
    pool: &Pool,
    options: &ProcessOptions,
) -> Vec<(Queued, Outcome)> {
    // A file placed by an attempt cut short is only cleaned up, not processed again.
    let (placed, todo): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|q| (inbound::placed(&q.taken, config), q))
        .partition(|(p, _)| p.is_some());
    let mut outcomes: Vec<(Queued, Outcome)> = placed
        .into_iter()
        .filter_map(|(p, q)| {
            let p = p?;
            Some(match std::fs::remove_file(&q.taken.path) {
                Ok(()) => (q, Outcome::Placed(p)),
                Err(e) => (q, Outcome::failed(e.to_string())),
            })
        })
        .collect();
    let todo: Vec<Queued> = todo.into_iter().map(|(_, q)| q).collect();
    if todo.is_empty() {
        return outcomes;
    }
    let taken = pool.lock().ok().and_then(|mut p| p.pop());
    let opened = taken.map_or_else(
        || {
            Registry::open(
                &config.gateway.database,
                crate::setup::identity(&config.gateway),
            )
        },
        Ok,
    );
    let mut registry = match opened {
        Ok(r) => r,
        Err(e) => {
            outcomes.extend(
                todo.into_iter()
                    .map(|q| (q, Outcome::failed(e.to_string()))),
            );
            return outcomes;
        }
    };
    // Each batch is its own claimant: two batches of one watcher meeting the same key must
    // see each other's lease (wait, then duplicate), not take each other's claim over.
    static BATCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = BATCHES.fetch_add(1, Ordering::Relaxed);
    let options = ProcessOptions {
        owner: format!("{}:{n}", options.owner),
        ..options.clone()
    };
    let sources: Vec<Source> = todo
        .iter()
        .map(|q| Source {
            read: q.taken.path.clone(),
            name: config
                .gateway
                .inbox
                .join(&q.taken.name)
                .display()
                .to_string(),
        })
        .collect();
    // The watcher needs each interchange's outcome, not each document's: a large file's
    // reports keep the first documents, as the history does.
    let mut kept = Outcomes::keeping(pipeline::RECORDED);
    let result = Gateway::new(config, schemas, &mut registry, options)
        .in_turn(turn)
        .process(&sources, &mut |settled| kept.add(&sources, settled));
    let mut results = match result {
        Ok(()) => kept.into_vec().into_iter(),
        Err(e) => {
            if let Ok(mut p) = pool.lock() {
                p.push(registry);
            }
            outcomes.extend(
                todo.into_iter()
                    .map(|q| (q, Outcome::failed(e.to_string()))),
            );
            return outcomes;
        }
    };
    for q in todo {
        let outcome = outcome_of(&q, results.next().map(|o| o.result), config);
        outcomes.push((q, outcome));
    }
    record_placements(&mut registry, config, &outcomes);
    follow_rejected(&mut registry, config, &outcomes);
    if let Ok(mut p) = pool.lock() {
        p.push(registry);
    }
    outcomes
}

/// What became of one file of a batch, from what the pipeline said of it (`None`: it
/// stopped before reading it), and the file placed where it belongs when it was decided.
fn outcome_of(
    q: &Queued,
    result: Option<Result<Vec<Report>, pipeline::ProcessError>>,
    config: &Config,
) -> Outcome {
    let gone = || !q.taken.path.exists();
    match result {
        None => Outcome::Retry {
            error: "stopped before it was read".into(),
            operational: false,
        },
        Some(Err(_)) if gone() => Outcome::Gone,
        Some(Err(e)) => Outcome::failed(e.to_string()),
        // Undecided here (another process holds it, or the wait was stopped): it stays in
        // the work folder; the retry meets the decision as a duplicate.
        Some(Ok(reports))
            if reports
                .iter()
                .any(|r| r.disposition == Disposition::InProgress) =>
        {
            Outcome::Retry {
                error: "in progress elsewhere; retried later".into(),
                operational: false,
            }
        }
        Some(Ok(reports)) => match inbound::dispose(&q.taken, &reports, config) {
            Ok(destination) => Outcome::Done {
                reports,
                destination,
            },
            Err(_) if gone() => Outcome::Gone,
            // The registry has the decision; the next attempt replays it as a duplicate.
            Err(e) => Outcome::failed(format!(
                "placing {} after processing: {e}",
                q.taken.name.to_string_lossy()
            )),
        },
    }
}

/// Where each interchange's file went, in the history (`show` reads it), in one transaction
/// for the batch. A crash before it loses only this note, never the file or its decision.
fn record_placements(registry: &mut Registry, config: &Config, outcomes: &[(Queued, Outcome)]) {
    let recorded = registry.batch(|b| {
        for (q, outcome) in outcomes {
            let Outcome::Done {
                reports,
                destination,
            } = outcome
            else {
                continue;
            };
            let placed = match destination {
                Destination::Archived(p) => p,
                Destination::Rejected { file, .. } => file,
            };
            let detail = serde_json::json!({
                "file": config.gateway.inbox.join(&q.taken.name).display().to_string(),
                "placed": placed.display().to_string(),
                "ticket": q.taken.ticket(),
            })
            .to_string();
            for r in reports.iter().filter(|r| r.key.is_some()) {
                b.record_note(
                    EventKind::Placed,
                    r.key.as_deref(),
                    r.sender.as_deref(),
                    r.control_number.as_deref(),
                    &detail,
                )?;
            }
        }
        Ok::<_, RegistryError>(())
    });
    if let Err(e) = recorded {
        tracing::warn!(error = %e, "could not record where the files of a batch were placed");
    }
}

/// The earlier files in `rejected/` of interchanges accepted now (a corrected resend)
/// moved to the archive once everything they hold is accepted.
fn follow_rejected(registry: &mut Registry, config: &Config, outcomes: &[(Queued, Outcome)]) {
    let keys: Vec<String> = outcomes
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Done { reports, .. } => Some(reports),
            _ => None,
        })
        .flatten()
        .filter(|r| r.disposition == Disposition::Accepted && r.attempt.is_some_and(|a| a > 1))
        .filter_map(|r| r.key.clone())
        .collect();
    if keys.is_empty() {
        return;
    }
    if let Err(e) = crate::rejected::follow(config, registry, &keys) {
        tracing::warn!(error = %e, "could not move files out of rejected/");
    }
}

/// Exponential backoff with jitter: about 0.5 s, 1 s, 2 s, ... up to `max`.
fn backoff(attempts: u32, max: Duration) -> Duration {
    let base = Duration::from_millis(500)
        .saturating_mul(1u32 << attempts.min(16))
        .min(max);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // 50% to 150% of the base, so retries of many files do not march in step.
    base.mul_f64(0.5 + f64::from(nanos % 1000) / 1000.0)
}

/// An inbox entry: a regular file to consider, or something we leave alone.
enum Entry {
    File { size: u64, modified: SystemTime },
    Other(&'static str),
}

/// Lists the inbox's entries whose names are not ignored. Symbolic links are not followed
/// (`DirEntry::metadata` does not follow them).
fn scan(inbox: &Path) -> std::io::Result<Vec<(PathBuf, Entry)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(inbox)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if inbound::is_ignored(&name) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let e = if meta.is_file() {
            Entry::File {
                size: meta.len(),
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            }
        } else {
            Entry::Other(crate::input::kind_of(&meta))
        };
        found.push((entry.path(), e));
    }
    Ok(found)
}

/// The watcher's state from start to shutdown. One task owns it and runs the loop
/// ([`Watcher::serve`]); the blocking workers get only what they need (the configuration,
/// the registry pool, a batch of files and its turn).
struct Watcher {
    config: Arc<Config>,
    /// The definitions sets are checked against, loaded once by the caller.
    schemas: &'static Schemas,
    /// Our work folder: files are taken into it by rename, and adopted from dead watchers'.
    intake: Intake,
    pool: Pool,
    /// Shared with every batch: the stop flag (shutdown stops waiting for other processes).
    options: Arc<ProcessOptions>,
    order: Arc<ClaimOrder>,
    /// One permit per worker: a batch holds one while it works.
    workers: Arc<Semaphore>,
    /// The figures `/metrics` serves beside the registry's (batch durations).
    live: Arc<crate::metrics::Live>,
    /// The `/metrics` server, when `[gateway] metrics` is set; stopped at the end.
    metrics: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// The web page it serves, told of a reloaded configuration.
    site: Option<Arc<crate::web::Site>>,
    /// The deliverer thread, when a destination goes through the outbox; stopped at the end.
    deliverer: Option<crate::delivery::Background>,
    /// `--once`: stop when everything present was decided.
    once: bool,
    /// Set by the first shutdown signal: no new files, only the batches in flight finish.
    stopping: bool,
    /// Inbox files not complete yet, by path.
    seen: HashMap<PathBuf, Seen>,
    /// Inbox entries that are not regular files (folders, links, FIFOs): warned about once,
    /// left alone.
    warned: HashSet<PathBuf>,
    /// Taken files waiting for a worker.
    queue: Vec<Queued>,
    /// The batches at work.
    tasks: JoinSet<BatchDone>,
    summary: Summary,
    /// How long a file's size and mtime must be still before it is taken (`settle_ms`).
    settle: Duration,
    /// How often the loop looks at the inbox, the queue and the timers below.
    tick_every: Duration,
    /// A full rescan at least this often, events or not (`poll_ms`).
    poll_every: Duration,
    /// The longest backoff of a retried file (`retry_max_seconds`).
    retry_max: Duration,
    /// How often the work folder says we are alive (a quarter of the lease, within bounds).
    beat_every: Duration,
    /// How often the periodic summary is logged (`summary_seconds`).
    summary_every: Duration,
    last_scan: Instant,
    last_dispatch: Instant,
    last_beat: Instant,
    last_adopt: Instant,
    last_summary: Instant,
    /// When waiting documents whose original never came were last looked at.
    last_due: Instant,
    /// When our documents were last looked at (unfinished claims, `[gateway]
    /// outbound_inbox`), and the pass doing it: one at a time, off the event loop (it
    /// writes and fsyncs).
    last_outbound: Instant,
    outbound: Option<tokio::task::JoinHandle<()>>,
}

/// File-system events on the inbox (none with `--poll` or `--once`). They only nudge: the
/// next tick rescans, and a full channel sets `rescan` instead of losing a file.
struct Nudges {
    paths: mpsc::Receiver<PathBuf>,
    /// Rescan at the next tick: an event arrived, or one was lost.
    rescan: Arc<AtomicBool>,
    /// Delivers the events while it lives; its callback holds the sender.
    _watcher: Option<notify::RecommendedWatcher>,
    /// Without a watcher the sender is kept here, so that `paths` stays open and quiet
    /// instead of closed.
    _sender: Option<mpsc::Sender<PathBuf>>,
}

impl Nudges {
    /// Starts watching `inbox`, unless `options` ask for polling or a single pass.
    fn watch(inbox: &Path, options: WatchOptions) -> Result<Nudges, WatchError> {
        let (events_tx, paths) = mpsc::channel::<PathBuf>(4096);
        let rescan = Arc::new(AtomicBool::new(true));
        if options.poll || options.once {
            return Ok(Nudges {
                paths,
                rescan,
                _watcher: None,
                _sender: Some(events_tx),
            });
        }
        use notify::Watcher as _;
        let flag = rescan.clone();
        let mut n =
            notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
                Ok(event) => {
                    for p in event.paths {
                        if events_tx.try_send(p).is_err() {
                            flag.store(true, Ordering::Relaxed);
                        }
                    }
                }
                Err(_) => flag.store(true, Ordering::Relaxed),
            })?;
        n.watch(inbox, notify::RecursiveMode::NonRecursive)?;
        Ok(Nudges {
            paths,
            rescan,
            _watcher: Some(n),
            _sender: None,
        })
    }
}

impl Watcher {
    fn inbox_error(&self, cause: std::io::Error) -> WatchError {
        WatchError::Inbox {
            path: self.config.gateway.inbox.display().to_string(),
            cause,
        }
    }

    /// Rescans the inbox: new files start settling, changed ones start again, vanished ones
    /// are forgotten, entries we do not take are warned about once.
    fn rescan(&mut self, now: Instant) -> Result<(), WatchError> {
        self.last_scan = now;
        let found = scan(&self.config.gateway.inbox).map_err(|e| self.inbox_error(e))?;
        let present: HashSet<&PathBuf> = found.iter().map(|(p, _)| p).collect();
        self.seen.retain(|p, _| present.contains(p));
        self.warned.retain(|p| present.contains(p));
        for (path, entry) in &found {
            match entry {
                Entry::Other(kind) => {
                    if self.warned.insert(path.clone()) {
                        tracing::warn!(path = %crate::text::printable(&path.display().to_string()), "{kind} in the inbox: not taken (only regular files directly in the inbox are), left where it is");
                    }
                }
                Entry::File { size, modified } => {
                    let s = self.seen.entry(path.clone()).or_insert(Seen {
                        size: *size,
                        modified: *modified,
                        changed_at: now,
                        not_before: None,
                    });
                    if s.size != *size || s.modified != *modified {
                        s.size = *size;
                        s.modified = *modified;
                        s.changed_at = now;
                    }
                }
            }
        }
        Ok(())
    }

    /// Inbox files complete now, in arrival order.
    fn settled(&self, now: Instant) -> Vec<(PathBuf, u64)> {
        let mut ready: Vec<(SystemTime, &PathBuf, u64)> = self
            .seen
            .iter()
            .filter(|(_, s)| s.not_before.is_none_or(|t| t <= now))
            .filter(|(_, s)| {
                // A file is complete once it has not been modified for `settle`. An mtime in
                // the future (clock skew on a network share) falls back to our own observation.
                let quiet = SystemTime::now()
                    .duration_since(s.modified)
                    .unwrap_or_else(|_| now.duration_since(s.changed_at));
                // ... and its size and mtime were the same at the last rescan too.
                quiet >= self.settle && now.duration_since(s.changed_at) >= self.tick_every
            })
            .map(|(p, s)| (s.modified, p, s.size))
            .collect();
        ready.sort();
        ready.into_iter().map(|(_, p, n)| (p.clone(), n)).collect()
    }

    /// Puts taken files in the queue, keeping it in arrival order.
    fn enqueue(&mut self, files: impl IntoIterator<Item = Taken>) {
        for taken in files {
            let size = std::fs::symlink_metadata(&taken.path).map_or(0, |m| m.len());
            self.queue.push(Queued {
                taken,
                size,
                attempts: 0,
                not_before: None,
            });
        }
        self.queue.sort_by(|a, b| a.taken.arrival_order(&b.taken));
    }

    /// Hands ready files to free workers: queued ones first (they arrived earlier), then
    /// complete inbox files, each taken out of the inbox only now, as it joins a batch.
    fn dispatch(&mut self, now: Instant) {
        let free = self.workers.available_permits();
        if free == 0 {
            return;
        }
        let due = self
            .queue
            .iter()
            .filter(|q| q.not_before.is_none_or(|t| t <= now))
            .count();
        let mut inbox = self.settled(now).into_iter();
        let total = due + inbox.len();
        if total == 0 {
            return;
        }
        // While a batch has just started, let a few more files gather rather than start a
        // batch of a handful: it is the durable steps, not the files, that cost. The hold is
        // short, so a slow file in flight never keeps the others waiting long.
        if !self.tasks.is_empty()
            && total < pipeline::BATCH_FILES
            && now.duration_since(self.last_dispatch) < GATHER
        {
            return;
        }
        // A trickle goes one file per worker; a flood is split into batches across the free
        // workers, so that each durable step serves many files (as `process` does).
        let size = total.div_ceil(free).clamp(1, pipeline::BATCH_FILES);
        // One pass, both sides kept in arrival order (a queue of thousands after a restart
        // was taken apart one `remove` at a time, each moving the rest).
        let (due, waiting): (Vec<Queued>, Vec<Queued>) = std::mem::take(&mut self.queue)
            .into_iter()
            .partition(|q| q.not_before.is_none_or(|t| t <= now));
        self.queue = waiting;
        let mut due: std::collections::VecDeque<Queued> = due.into();
        loop {
            let Ok(permit) = self.workers.clone().try_acquire_owned() else {
                break;
            };
            let mut batch = Vec::new();
            let mut bytes = 0u64;
            while batch.len() < size && bytes < pipeline::BATCH_BYTES as u64 {
                if let Some(q) = due.pop_front() {
                    bytes += q.size;
                    batch.push(q);
                    continue;
                }
                let Some((path, size)) = inbox.next() else {
                    break;
                };
                if let Some(q) = self.take(&path, size, now) {
                    bytes += q.size;
                    batch.push(q);
                }
            }
            if batch.is_empty() {
                break;
            }
            self.spawn(batch, permit, now);
        }
        // Queued files no batch had room for wait for the next round (two runs in arrival
        // order: the sort merges them).
        self.queue.extend(due);
        self.queue.sort_by(|a, b| a.taken.arrival_order(&b.taken));
    }

    /// Takes one complete inbox file out of the inbox into the work folder, for a batch;
    /// `None` when it stays (unreadable, or the rename failed: retried later) or is gone.
    fn take(&mut self, path: &Path, size: u64, now: Instant) -> Option<Queued> {
        // A file this user cannot read stays in the inbox, where it can be seen, and
        // is named once; moved into the work folder it would only fail there.
        if let Err(e) = std::fs::File::open(path) {
            // Gone: another watcher on the same inbox took it first. Nothing to say.
            if e.kind() == std::io::ErrorKind::NotFound {
                self.seen.remove(path);
                return None;
            }
            if self.warned.insert(path.to_path_buf()) {
                tracing::warn!(file = %crate::text::printable(&path.display().to_string()), error = %e, "cannot read this inbox file: left where it is (fix its permissions)");
            }
            if let Some(s) = self.seen.get_mut(path) {
                s.not_before = Some(now + self.retry_max);
            }
            return None;
        }
        match self.intake.take(path) {
            Ok(Some(taken)) => {
                self.seen.remove(path);
                Some(Queued {
                    taken,
                    size,
                    attempts: 0,
                    not_before: None,
                })
            }
            // Taken by another watcher, or removed.
            Ok(None) => {
                self.seen.remove(path);
                None
            }
            Err(e) => {
                tracing::error!(file = %crate::text::printable(&path.display().to_string()), error = %e, "could not move the file out of the inbox into the work folder; retried later");
                if let Some(s) = self.seen.get_mut(path) {
                    s.not_before = Some(now + backoff(2, self.retry_max));
                }
                None
            }
        }
    }

    /// Hands a batch to a blocking worker, which holds `permit` while it works.
    fn spawn(
        &mut self,
        batch: Vec<Queued>,
        permit: tokio::sync::OwnedSemaphorePermit,
        now: Instant,
    ) {
        self.summary.files_taken += batch.len() as u64;
        self.last_dispatch = now;
        tracing::debug!(files = batch.len(), "batch taken");
        let turn = ClaimOrder::turn(&self.order);
        let held: Vec<Taken> = batch.iter().map(|q| q.taken.clone()).collect();
        let schemas = self.schemas;
        let (config, pool, opts, live) = (
            self.config.clone(),
            self.pool.clone(),
            self.options.clone(),
            self.live.clone(),
        );
        let handle = tokio::task::spawn_blocking(move || {
            let outcomes = process_batch(batch, turn, &config, schemas, &pool, &opts, &live);
            drop(permit);
            outcomes
        });
        self.tasks.spawn(async move {
            match handle.await {
                Ok(outcomes) => (Vec::new(), outcomes),
                // A worker that panicked decided nothing: its files go back to the queue.
                Err(_) => (held, Vec::new()),
            }
        });
    }

    /// Records what became of a file.
    fn record(&mut self, mut q: Queued, outcome: Outcome) {
        match outcome {
            Outcome::Done {
                reports,
                destination,
            } => {
                for r in &reports {
                    match r.disposition {
                        Disposition::Accepted | Disposition::Partial => self.summary.accepted += 1,
                        Disposition::Duplicate => self.summary.duplicates += 1,
                        Disposition::Conflict => self.summary.conflicts += 1,
                        _ => {}
                    }
                }
                if let Destination::Rejected { file, reason } = &destination {
                    self.summary.rejected_files += 1;
                    tracing::warn!(file = %crate::text::printable(&file.display().to_string()), reason = %crate::text::printable(&reason.display().to_string()), "file rejected");
                }
            }
            Outcome::Placed(destination) => {
                tracing::info!(file = %crate::text::printable(&q.taken.name.to_string_lossy()), to = ?destination, "already placed by an attempt cut short; cleaned up");
            }
            Outcome::Gone => {
                tracing::warn!(file = %crate::text::printable(&q.taken.name.to_string_lossy()), "the file left our work folder while we worked on it (adopted by another watcher); it decides it");
            }
            Outcome::Retry { error, operational } => {
                self.summary.retries += 1;
                q.attempts += 1;
                let wait = backoff(q.attempts, self.retry_max);
                q.not_before = Some(Instant::now() + wait);
                let retry_in_ms = wait.as_millis() as u64;
                if operational {
                    tracing::error!(file = %crate::text::printable(&q.taken.name.to_string_lossy()), error = %crate::text::printable(&error), retry_in_ms, "operational failure; the file stays in the work folder and is retried");
                } else {
                    tracing::info!(file = %crate::text::printable(&q.taken.name.to_string_lossy()), error = %crate::text::printable(&error), retry_in_ms, "not decided yet; retried");
                }
                self.queue.push(q);
                self.queue.sort_by(|a, b| a.taken.arrival_order(&b.taken));
            }
        }
    }

    fn log_summary(&self) {
        let s = &self.summary;
        // Where the deliveries stand now: an ERP outage shows in the journal before anything
        // dies.
        let deliveries = tokio::task::block_in_place(|| {
            crate::registry::Registry::open_read_only(&self.config.gateway.database)
                .ok()
                .flatten()
                .and_then(|r| r.delivery_counts().ok())
                .unwrap_or_default()
        });
        let count = |state: crate::registry::DeliveryState| -> u64 {
            deliveries
                .iter()
                .filter(|(_, s, _)| *s == state)
                .map(|c| c.2)
                .sum()
        };
        tracing::info!(
            files_taken = s.files_taken,
            accepted = s.accepted,
            duplicates = s.duplicates,
            conflicts = s.conflicts,
            rejected_files = s.rejected_files,
            retries = s.retries,
            in_flight = self.tasks.len(),
            waiting = self.queue.len() + self.seen.len(),
            rejected_backlog = crate::metrics::rejected_backlog(&self.config),
            delivered = count(crate::registry::DeliveryState::Delivered),
            retrying = count(crate::registry::DeliveryState::Retrying),
            dead = count(crate::registry::DeliveryState::Dead),
            "summary"
        );
    }

    /// With `--once`: everything present was taken and decided; files that failed
    /// operationally wait for the next run.
    fn once_done(&self) -> bool {
        self.tasks.is_empty()
            && self.outbound.as_ref().is_some_and(|t| t.is_finished())
            && self.queue.iter().all(|q| q.not_before.is_some())
            && self.seen.values().all(|s| s.not_before.is_some())
    }

    /// Everything before the first file: the inbox, the registry and the work folder
    /// (unusable, they stop the watcher before it takes anything), the metrics port, and the
    /// files left by watchers that are gone, queued first: they arrived before anything new.
    async fn start(
        config: Arc<Config>,
        schemas: &'static Schemas,
        options: WatchOptions,
    ) -> Result<Watcher, WatchError> {
        let g = &config.gateway;
        std::fs::create_dir_all(&g.inbox).map_err(|source| WatchError::Inbox {
            path: g.inbox.display().to_string(),
            cause: source,
        })?;
        let first = crate::setup::open_registry(&config)?;
        let intake = Intake::open(g)?;
        let lease = Duration::from_secs(g.lease_seconds);
        crate::delivery::clean_stale_folders(&config);
        let settle = Duration::from_millis(g.settle_ms);
        let now = Instant::now();
        let mut w = Watcher {
            config: config.clone(),
            schemas,
            intake,
            pool: Arc::new(Mutex::new(vec![first])),
            options: Arc::new(ProcessOptions::new(false)),
            order: Arc::new(ClaimOrder::default()),
            workers: Arc::new(Semaphore::new(g.workers.max(1))),
            live: Arc::new(crate::metrics::Live::default()),
            metrics: None,
            site: None,
            deliverer: None,
            once: options.once,
            stopping: false,
            seen: HashMap::new(),
            warned: HashSet::new(),
            queue: Vec::new(),
            tasks: JoinSet::new(),
            summary: Summary::default(),
            settle,
            tick_every: Duration::from_millis(
                g.poll_ms.min(settle.as_millis().max(20) as u64 / 2).max(10),
            ),
            poll_every: Duration::from_millis(g.poll_ms),
            retry_max: Duration::from_secs(g.retry_max_seconds),
            beat_every: (lease / 4).clamp(Duration::from_millis(500), Duration::from_secs(10)),
            summary_every: Duration::from_secs(g.summary_seconds.max(1)),
            last_scan: now - Duration::from_secs(3600),
            last_dispatch: now,
            last_beat: now,
            last_adopt: now,
            last_summary: now,
            last_due: now - DUE_EVERY,
            last_outbound: now - Duration::from_secs(3600),
            outbound: None,
        };
        if options.allow_actions && g.metrics.is_none() {
            return Err(crate::web::WebError::NoPage.into());
        }
        // The metrics port is taken before any file: a port in use stops the watcher at start.
        if let Some(addr) = g.metrics {
            let server = crate::metrics::bind(
                addr,
                config.clone(),
                w.live.clone(),
                web_site(&config, addr, options)?.inspect(|site| {
                    site.put_in_force(config.clone(), Some(schemas));
                    w.site = Some(site.clone());
                }),
            )
            .await
            .map_err(|cause| WatchError::Metrics { addr, cause })?;
            w.metrics = Some(tokio::spawn(server));
        }
        let registry = crate::setup::open_registry(&config)?;
        w.deliverer = crate::delivery::Background::start(
            config.clone(),
            registry,
            format!("{}:deliver", w.options.owner),
        );
        let adopted = w.intake.adopt();
        tracing::info!(
            config = %config.path.display(),
            inbox = %g.inbox.display(),
            registry = %g.database,
            work = %w.intake.folder().display(),
            workers = g.workers.max(1),
            settle_ms = g.settle_ms,
            poll_ms = g.poll_ms,
            lease_seconds = g.lease_seconds,
            adopted = adopted.len(),
            metrics = %g.metrics.map_or("off".to_string(), |a| a.to_string()),
            mode = if options.once { "once" } else if options.poll { "poll" } else { "events" },
            "x12gate watch started"
        );
        w.enqueue(adopted);
        Ok(w)
    }

    /// The loop: a shutdown, a batch coming back, an event or the tick wakes it; then, unless
    /// stopping, one [`tick`](Self::tick). It ends when the batches in flight at shutdown
    /// are done, or with `--once` when the inbox is.
    async fn serve(
        &mut self,
        nudges: &mut Nudges,
        hangups: &mut Option<tokio::signal::unix::Signal>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), WatchError> {
        let mut tick = tokio::time::interval(self.tick_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown, if !self.stopping => self.stop(),
                Some(()) = async { match hangups.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                } }, if !self.stopping => self.reload(),
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    self.batch_done(done.unwrap_or_default());
                }
                Some(path) = nudges.paths.recv() => {
                    // Only a nudge: the next tick looks at the file.
                    if path.parent() == Some(self.config.gateway.inbox.as_path()) {
                        nudges.rescan.store(true, Ordering::Relaxed);
                    }
                }
                _ = tick.tick() => {}
            }
            if self.stopping {
                if self.tasks.is_empty() {
                    return Ok(());
                }
                continue;
            }
            self.tick(Instant::now(), nudges)?;
            if self.once && self.once_done() {
                return Ok(());
            }
        }
    }

    /// SIGHUP: `partners.toml` read again and checked as `check` checks it. A good one is
    /// in force for the next batch, the deliverer, the page and `/metrics` (the batches at
    /// work finish on the old one); a bad one, or one that changes `[gateway]` (folders,
    /// registry, listener, timings: read at start), is refused with its reasons and the
    /// running configuration kept. Either way the history records it.
    fn reload(&mut self) {
        let path = self.config.path.clone();
        let checked = tokio::task::block_in_place(|| self.read_again(&path));
        let detail = match checked {
            Ok((config, schemas, changes)) => {
                let config = Arc::new(config);
                tracing::info!(config = %path.display(), %changes, "configuration reloaded: in force for the next files");
                self.config = config.clone();
                self.schemas = schemas;
                self.live.reloaded(config.clone());
                if let Some(site) = &self.site {
                    site.put_in_force(config.clone(), Some(schemas));
                }
                // The deliverer starts again on the new destinations; the old one finishes
                // the attempt it is making, off this loop. Without a registry connection
                // now, the old one goes on (on the destinations it started with).
                match crate::setup::open_registry(&config) {
                    Ok(registry) => {
                        let new = crate::delivery::Background::start(
                            config,
                            registry,
                            format!("{}:deliver", self.options.owner),
                        );
                        if let Some(old) = std::mem::replace(&mut self.deliverer, new) {
                            tokio::task::spawn_blocking(move || drop(old));
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the deliverer keeps the destinations it started with until the next reload or a restart");
                    }
                }
                serde_json::json!({ "reloaded": path.display().to_string(), "changes": changes })
            }
            Err(why) => {
                tracing::error!(config = %path.display(), error = %why, "configuration not reloaded: the running one is kept");
                serde_json::json!({ "refused": path.display().to_string(), "why": why })
            }
        };
        let recorded = tokio::task::block_in_place(|| {
            crate::setup::open_registry(&self.config)?.batch(|b| {
                b.record_note(
                    crate::registry::EventKind::Reloaded,
                    None,
                    None,
                    None,
                    &detail.to_string(),
                )
            })
        });
        if let Err(e) = recorded {
            tracing::warn!(error = %e, "the reload was not recorded in the history");
        }
    }

    /// The configuration at `path` as `check` judges it, with its definitions and what
    /// changed (partners added and removed); why not, when it cannot be put in force.
    fn read_again(&self, path: &Path) -> Result<(Config, &'static Schemas, String), String> {
        let config = Config::load(path).map_err(|e| e.to_string())?;
        if config.gateway != self.config.gateway {
            return Err(
                "[gateway] changed: its folders, registry, listener and timings are \
                read at start; restart the watcher to apply it"
                    .into(),
            );
        }
        let problems: Vec<String> = crate::setup::check(&config)
            .into_iter()
            .filter(|p| !p.operational)
            .map(|p| p.to_string())
            .collect();
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        // Loaded for the life of the process, as at start (a reload a day leaks little).
        let schemas: &'static Schemas = match crate::guides::for_config(&config) {
            Ok(Some(layered)) => Box::leak(Box::new(layered)),
            Ok(None) => crate::schema::builtin().map_err(|e| e.to_string())?,
            Err(e) => return Err(e.to_string()),
        };
        let keys = |c: &Config| -> Vec<String> { c.partners.iter().map(|p| p.key()).collect() };
        let (old, new) = (keys(&self.config), keys(&config));
        let added: Vec<&String> = new.iter().filter(|k| !old.contains(k)).collect();
        let removed: Vec<&String> = old.iter().filter(|k| !new.contains(k)).collect();
        let changes = format!(
            "{} partner(s); added: {}; removed: {}",
            new.len(),
            if added.is_empty() {
                "none".into()
            } else {
                added
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            if removed.is_empty() {
                "none".into()
            } else {
                removed
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
        Ok((config, schemas, changes))
    }

    /// The first shutdown signal: no new files, no more waiting for other processes' leases.
    fn stop(&mut self) {
        tracing::info!(in_flight = self.tasks.len(), "shutting down: taking no new files, no longer waiting for other processes, finishing the files in flight");
        self.options.stop.stop_waiting();
        self.stopping = true;
    }

    /// A batch came back: what it decided is recorded; the files of a worker that failed
    /// are queued again.
    fn batch_done(&mut self, (lost, outcomes): BatchDone) {
        for (q, outcome) in outcomes {
            self.record(q, outcome);
        }
        if let Some(d) = &self.deliverer {
            d.nudge();
        }
        if !lost.is_empty() {
            tracing::error!(files = lost.len(), "a worker failed; its files are retried");
            self.summary.retries += lost.len() as u64;
            self.enqueue(lost);
        }
    }

    /// The periodic work, in order: rescan the inbox when due, say the work folder is alive,
    /// adopt dead watchers' files, hand ready files to free workers, log the summary.
    fn tick(&mut self, now: Instant, nudges: &Nudges) -> Result<(), WatchError> {
        let poll_due = now.duration_since(self.last_scan) >= self.poll_every;
        // At most one rescan per tick, however many events arrive: a flood of events must
        // not turn into a flood of directory listings.
        let scan_due = now.duration_since(self.last_scan) >= self.tick_every;
        if poll_due
            || (scan_due && (!self.seen.is_empty() || nudges.rescan.load(Ordering::Relaxed)))
        {
            nudges.rescan.store(false, Ordering::Relaxed);
            self.rescan(now)?;
        }
        if now.duration_since(self.last_beat) >= self.beat_every {
            self.last_beat = now;
            self.intake.heartbeat();
        }
        if now.duration_since(self.last_adopt) >= Duration::from_secs(2) {
            self.last_adopt = now;
            let adopted = self.intake.adopt();
            self.enqueue(adopted);
            // A watcher killed mid-write (here or on another node sharing the folders)
            // leaves temporary files that only a start would otherwise clear.
            crate::delivery::clean_stale_folders(&self.config);
        }
        self.dispatch(now);
        if now.duration_since(self.last_due) >= DUE_EVERY && self.deliver_due() {
            self.last_due = now;
        }
        if now.duration_since(self.last_outbound) >= self.poll_every && self.send_outbound() {
            self.last_outbound = now;
        }
        if now.duration_since(self.last_summary) >= self.summary_every {
            self.last_summary = now;
            self.log_summary();
        }
        Ok(())
    }

    /// Delivers the waiting documents whose partner's `order_wait_hours` ran out, with a
    /// registry connection no batch is using; `false` when none was free (the next tick
    /// tries again).
    fn deliver_due(&mut self) -> bool {
        let Some(mut registry) = self.pool.lock().ok().and_then(|mut p| p.pop()) else {
            return false;
        };
        match self.gateway(&mut registry).release_due() {
            Ok(done) if !done.is_empty() => {
                tracing::warn!(
                    documents = done.len(),
                    "delivered waiting documents whose original never came"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, "could not deliver waiting documents; trying again later")
            }
        }
        if let Ok(mut p) = self.pool.lock() {
            p.push(registry);
        }
        true
    }

    /// One pass over our documents, off the event loop, with a registry connection no batch
    /// is using: claims left `writing` by a writer now gone finished, then `[gateway]
    /// outbound_inbox` (documents an ERP dropped as files) sent. `false` when the last pass
    /// is still running or no connection was free.
    fn send_outbound(&mut self) -> bool {
        if self.outbound.as_ref().is_some_and(|t| !t.is_finished()) {
            return false;
        }
        let Some(mut registry) = self.pool.lock().ok().and_then(|mut p| p.pop()) else {
            return false;
        };
        let (config, schemas, pool) = (self.config.clone(), self.schemas, self.pool.clone());
        self.outbound = Some(tokio::task::spawn_blocking(move || {
            match crate::send::finish_unfinished(&config, &mut registry) {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    documents = n,
                    "finished our documents whose writer was gone"
                ),
                Err(e) => {
                    tracing::error!(error = %e, "our unfinished documents could not be looked at; trying again later")
                }
            }
            if let Some(folder) = &config.gateway.outbound_inbox {
                let settle = Duration::from_millis(config.gateway.settle_ms);
                let done =
                    crate::send::drain_folder(&config, schemas, &mut registry, folder, settle);
                if done.sent + done.replayed + done.refused > 0 {
                    tracing::info!(sent = done.sent, replayed = done.replayed, refused = done.refused, left = done.left, folder = %folder.display(), "our documents from the outbound inbox");
                }
            }
            if let Ok(mut p) = pool.lock() {
                p.push(registry);
            }
        }));
        true
    }

    /// One delivery pass over everything due, with a registry connection of the pool.
    fn deliver_once(&mut self) {
        let Some(mut registry) = self.pool.lock().ok().and_then(|mut p| p.pop()) else {
            return;
        };
        let stop = self.options.stop.clone();
        if let Err(e) = self
            .gateway(&mut registry)
            .deliver_due(&|| stop.abandoned())
        {
            tracing::error!(error = %e, "deliveries: registry error; they wait for the next run");
        }
        if let Ok(mut p) = self.pool.lock() {
            p.push(registry);
        }
    }

    /// The gateway of this watcher, working in `registry`.
    fn gateway<'g>(&'g self, registry: &'g mut Registry) -> Gateway<'g> {
        Gateway::new(
            &self.config,
            self.schemas,
            registry,
            ProcessOptions::clone(&self.options),
        )
    }

    /// After the loop: the last summary, the files left undecided in the work folder (the
    /// next watcher adopts them), the metrics server stopped, the work folder given up.
    fn finish(mut self) -> Summary {
        self.log_summary();
        let left = self.intake.left();
        if left > 0 {
            tracing::warn!(files = left, work = %self.intake.folder().display(), "files left undecided in the work folder; the next watcher adopts them");
        }
        self.summary.left = left as u64;
        if let Some(server) = self.metrics.take() {
            server.abort();
        }
        if let Some(mut deliverer) = self.deliverer.take() {
            deliverer.stop();
            if self.once && !self.stopping {
                // Like `process`: what is due now is attempted once before a cron run ends.
                self.deliver_once();
            }
        }
        let summary = self.summary;
        self.intake.close();
        summary
    }
}

/// How often the watcher looks for waiting documents past their partner's wait.
const DUE_EVERY: Duration = Duration::from_secs(60);

/// Runs the watcher until `shutdown` resolves (or, with `once`, until the inbox is done).
pub async fn run(
    config: Arc<Config>,
    schemas: &'static Schemas,
    options: WatchOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary, WatchError> {
    // SIGHUP taken first: one during the start (a `systemctl reload` then) must not kill
    // the watcher; it is answered once the loop runs. Without the signal the watcher still
    // runs; a reload then needs a restart.
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut w = Watcher::start(config, schemas, options).await?;
    let mut nudges = Nudges::watch(&w.config.gateway.inbox, options)?;
    w.serve(&mut nudges, &mut hangups, shutdown).await?;
    Ok(w.finish())
}
