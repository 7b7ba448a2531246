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
use crate::pipeline::{self, ClaimOrder, ProcessOptions, Report, Source, Turn};
use crate::registry::{EventKind, Registry, RegistryError};
use crate::schema::Schemas;

#[derive(Debug, Clone, Copy, Default)]
pub struct WatchOptions {
    /// Rescan the inbox every `poll_ms` instead of relying on file-system events.
    pub poll: bool,
    /// Process what is in the inbox now, then return (for cron).
    pub once: bool,
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

/// Processes a batch of taken files (one transaction per step for all of them, see
/// `pipeline::process_files`) and places each where it belongs.
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
    let retry = |e: String| Outcome::Retry {
        error: e,
        operational: true,
    };
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
                Err(e) => (q, retry(e.to_string())),
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
            outcomes.extend(todo.into_iter().map(|q| (q, retry(e.to_string()))));
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
    let result = pipeline::process_files(
        &sources,
        config,
        schemas,
        &mut registry,
        &options,
        Some(turn),
    );
    let mut results = match result {
        Ok(results) => results.into_iter(),
        Err(e) => {
            if let Ok(mut p) = pool.lock() {
                p.push(registry);
            }
            outcomes.extend(todo.into_iter().map(|q| (q, retry(e.to_string()))));
            return outcomes;
        }
    };
    for q in todo {
        let gone = || !q.taken.path.exists();
        let outcome = match results.next().map(|o| o.result) {
            None => Outcome::Retry {
                error: "stopped before it was read".into(),
                operational: false,
            },
            Some(Err(_)) if gone() => Outcome::Gone,
            Some(Err(e)) => retry(e.to_string()),
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
                Err(e) => retry(format!("placing {} after processing: {e}", q.taken.name)),
            },
        };
        outcomes.push((q, outcome));
    }
    record_placements(&mut registry, config, &outcomes);
    if let Ok(mut p) = pool.lock() {
        p.push(registry);
    }
    outcomes
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

/// The watcher's state between ticks. One task owns it; the blocking workers get only what
/// they need (the configuration, the registry pool, a batch of files and its turn).
struct Watcher {
    config: Arc<Config>,
    schemas: &'static Schemas,
    intake: Intake,
    pool: Pool,
    options: Arc<ProcessOptions>,
    order: Arc<ClaimOrder>,
    workers: Arc<Semaphore>,
    live: Arc<crate::metrics::Live>,
    /// Inbox files not complete yet, by path.
    seen: HashMap<PathBuf, Seen>,
    /// Inbox entries that are not regular files (folders, links, FIFOs): warned about once,
    /// left alone.
    warned: HashSet<PathBuf>,
    /// Taken files waiting for a worker.
    queue: Vec<Queued>,
    tasks: JoinSet<BatchDone>,
    summary: Summary,
    settle: Duration,
    tick_every: Duration,
    retry_max: Duration,
    last_scan: Instant,
    last_dispatch: Instant,
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
        let due: Vec<usize> = (0..self.queue.len())
            .filter(|i| self.queue[*i].not_before.is_none_or(|t| t <= now))
            .collect();
        let mut inbox = self.settled(now).into_iter();
        let total = due.len() + inbox.len();
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
        let mut due: std::collections::VecDeque<Queued> = {
            let mut picked = Vec::with_capacity(due.len());
            for i in due.into_iter().rev() {
                picked.push(self.queue.remove(i));
            }
            picked.reverse();
            picked.into()
        };
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
                // A file this user cannot read stays in the inbox, where it can be seen, and
                // is named once; moved into the work folder it would only fail there.
                if let Err(e) = std::fs::File::open(&path) {
                    if self.warned.insert(path.clone()) {
                        tracing::warn!(file = %crate::text::printable(&path.display().to_string()), error = %e, "cannot read this inbox file: left where it is (fix its permissions)");
                    }
                    if let Some(s) = self.seen.get_mut(&path) {
                        s.not_before = Some(now + self.retry_max);
                    }
                    continue;
                }
                match self.intake.take(&path) {
                    Ok(Some(taken)) => {
                        self.seen.remove(&path);
                        bytes += size;
                        batch.push(Queued {
                            taken,
                            size,
                            attempts: 0,
                            not_before: None,
                        });
                    }
                    // Taken by another watcher, or removed.
                    Ok(None) => {
                        self.seen.remove(&path);
                    }
                    Err(e) => {
                        tracing::error!(file = %crate::text::printable(&path.display().to_string()), error = %e, "could not move the file out of the inbox into the work folder; retried later");
                        if let Some(s) = self.seen.get_mut(&path) {
                            s.not_before = Some(now + backoff(2, self.retry_max));
                        }
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
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
        // Queued files no batch had room for wait for the next round.
        self.queue.extend(due);
        self.queue.sort_by(|a, b| a.taken.arrival_order(&b.taken));
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
                tracing::info!(file = %crate::text::printable(&q.taken.name), to = ?destination, "already placed by an attempt cut short; cleaned up");
            }
            Outcome::Gone => {
                tracing::warn!(file = %crate::text::printable(&q.taken.name), "the file left our work folder while we worked on it (adopted by another watcher); it decides it");
            }
            Outcome::Retry { error, operational } => {
                self.summary.retries += 1;
                q.attempts += 1;
                let wait = backoff(q.attempts, self.retry_max);
                q.not_before = Some(Instant::now() + wait);
                let retry_in_ms = wait.as_millis() as u64;
                if operational {
                    tracing::error!(file = %crate::text::printable(&q.taken.name), error = %crate::text::printable(&error), retry_in_ms, "operational failure; the file stays in the work folder and is retried");
                } else {
                    tracing::info!(file = %crate::text::printable(&q.taken.name), error = %crate::text::printable(&error), retry_in_ms, "not decided yet; retried");
                }
                self.queue.push(q);
                self.queue.sort_by(|a, b| a.taken.arrival_order(&b.taken));
            }
        }
    }

    fn log_summary(&self) {
        let s = &self.summary;
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
            "summary"
        );
    }

    /// With `--once`: everything present was taken and decided; files that failed
    /// operationally wait for the next run.
    fn once_done(&self) -> bool {
        self.tasks.is_empty()
            && self.queue.iter().all(|q| q.not_before.is_some())
            && self.seen.values().all(|s| s.not_before.is_some())
    }
}

/// Runs the watcher until `shutdown` resolves (or, with `once`, until the inbox is done).
pub async fn run(
    config: Arc<Config>,
    schemas: &'static Schemas,
    options: WatchOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary, WatchError> {
    let g = &config.gateway;
    let inbox = g.inbox.clone();
    std::fs::create_dir_all(&inbox).map_err(|source| WatchError::Inbox {
        path: inbox.display().to_string(),
        cause: source,
    })?;
    // An unusable database or set of folders stops the watcher before it takes anything.
    let first = crate::setup::open_registry(&config)?;
    let intake = Intake::open(g)?;
    let lease = Duration::from_secs(g.lease_seconds);
    for dir in [&g.out, &g.outbox, &g.rejected] {
        crate::outputs::clean_stale(dir, lease);
    }
    let settle = Duration::from_millis(g.settle_ms);
    let tick_every =
        Duration::from_millis(g.poll_ms.min(settle.as_millis().max(20) as u64 / 2).max(10));
    let mut w = Watcher {
        config: config.clone(),
        schemas,
        intake,
        pool: Arc::new(Mutex::new(vec![first])),
        options: Arc::new(ProcessOptions::new(false)),
        order: Arc::new(ClaimOrder::default()),
        workers: Arc::new(Semaphore::new(g.workers.max(1))),
        live: Arc::new(crate::metrics::Live::default()),
        seen: HashMap::new(),
        warned: HashSet::new(),
        queue: Vec::new(),
        tasks: JoinSet::new(),
        summary: Summary::default(),
        settle,
        tick_every,
        retry_max: Duration::from_secs(g.retry_max_seconds),
        last_scan: Instant::now() - Duration::from_secs(3600),
        last_dispatch: Instant::now(),
    };
    // The metrics port is taken before any file: a port in use stops the watcher at start.
    let metrics = match g.metrics {
        None => None,
        Some(addr) => {
            let server = crate::metrics::bind(addr, config.clone(), w.live.clone())
                .await
                .map_err(|cause| WatchError::Metrics { addr, cause })?;
            Some(tokio::spawn(server))
        }
    };
    // Files left by watchers that are gone come first: they arrived before anything new.
    let adopted = w.intake.adopt();
    tracing::info!(
        config = %config.path.display(),
        inbox = %inbox.display(),
        registry = %g.database.display(),
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

    // File events only nudge: a full channel sets `rescan` instead of losing a file.
    let (events_tx, mut events) = mpsc::channel::<PathBuf>(4096);
    let rescan = Arc::new(AtomicBool::new(true));
    let _events = if options.poll || options.once {
        None
    } else {
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
        n.watch(&inbox, notify::RecursiveMode::NonRecursive)?;
        Some(n)
    };

    let mut tick = tokio::time::interval(tick_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_summary = Instant::now();
    let mut last_adopt = Instant::now();
    let mut last_beat = Instant::now();
    let summary_every = Duration::from_secs(g.summary_seconds.max(1));
    let beat_every = (lease / 4).clamp(Duration::from_millis(500), Duration::from_secs(10));
    tokio::pin!(shutdown);
    let mut stopping = false;

    loop {
        tokio::select! {
            biased;
            () = &mut shutdown, if !stopping => {
                tracing::info!(in_flight = w.tasks.len(), "shutting down: taking no new files, no longer waiting for other processes, finishing the files in flight");
                w.options.stop.stop_waiting();
                stopping = true;
            }
            Some(done) = w.tasks.join_next(), if !w.tasks.is_empty() => {
                let (lost, outcomes) = done.unwrap_or_default();
                for (q, outcome) in outcomes {
                    w.record(q, outcome);
                }
                if !lost.is_empty() {
                    tracing::error!(files = lost.len(), "a worker failed; its files are retried");
                    w.summary.retries += lost.len() as u64;
                    w.enqueue(lost);
                }
            }
            Some(path) = events.recv() => {
                // Only a nudge: the next tick looks at the file.
                if path.parent() == Some(inbox.as_path()) {
                    rescan.store(true, Ordering::Relaxed);
                }
            }
            _ = tick.tick() => {}
        }

        if stopping {
            if w.tasks.is_empty() {
                break;
            }
            continue;
        }
        let now = Instant::now();
        let poll_due = now.duration_since(w.last_scan) >= Duration::from_millis(g.poll_ms);
        // At most one rescan per tick, however many events arrive: a flood of events must
        // not turn into a flood of directory listings.
        let scan_due = now.duration_since(w.last_scan) >= tick_every;
        if poll_due || (scan_due && (!w.seen.is_empty() || rescan.load(Ordering::Relaxed))) {
            rescan.store(false, Ordering::Relaxed);
            w.rescan(now)?;
        }
        if now.duration_since(last_beat) >= beat_every {
            last_beat = now;
            w.intake.heartbeat();
        }
        if now.duration_since(last_adopt) >= Duration::from_secs(2) {
            last_adopt = now;
            let adopted = w.intake.adopt();
            w.enqueue(adopted);
        }
        w.dispatch(now);
        if now.duration_since(last_summary) >= summary_every {
            last_summary = now;
            w.log_summary();
        }
        if options.once && w.once_done() {
            break;
        }
    }
    w.log_summary();
    let left = w.intake.left();
    if left > 0 {
        tracing::warn!(files = left, work = %w.intake.folder().display(), "files left undecided in the work folder; the next watcher adopts them");
    }
    w.summary.left = left as u64;
    if let Some(server) = metrics {
        server.abort();
    }
    let summary = w.summary;
    w.intake.close();
    Ok(summary)
}
