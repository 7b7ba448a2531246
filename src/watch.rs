//! `x12gate watch`: the only async code. It watches the inbox, decides when a file is
//! complete, and hands complete files to a bounded set of blocking workers that run the same
//! synchronous pipeline as `process`.
//!
//! Events (notify, or none with `--poll`) only say "look at this path"; a periodic rescan of
//! the inbox catches whatever events missed (a full channel, a network file system), so no
//! file depends on an event arriving. Parsing, SQLite and fsync run on `spawn_blocking`
//! threads, never on the executor, and each worker owns its registry connection while it
//! works. On shutdown the watcher stops taking files and waits for the ones in flight; claims
//! are leased, so even an abrupt exit loses and doubles nothing.

use std::collections::HashMap;
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
use crate::pipeline::{self, ProcessOptions, Report};
use crate::registry::{Registry, RegistryError};

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
}

/// One inbox file the watcher knows about.
#[derive(Debug)]
struct Candidate {
    size: u64,
    modified: SystemTime,
    /// When the size or mtime last changed (as we observed it).
    changed_at: Instant,
    in_flight: bool,
    attempts: u32,
    not_before: Option<Instant>,
}

/// How long newly ready files may wait for company while a batch has just started.
const GATHER: Duration = Duration::from_millis(100);

/// Registry connections shared by the blocking workers: one per worker at most.
type Pool = Arc<Mutex<Vec<Registry>>>;

enum Outcome {
    Done {
        reports: Vec<Report>,
        destination: Destination,
    },
    Failed(String),
}

/// Processes a batch of files (one transaction per step for all of them, see
/// `pipeline::process_files`) and moves each where it belongs.
fn process_batch(
    paths: Vec<PathBuf>,
    config: &Config,
    pool: &Pool,
    options: &ProcessOptions,
) -> Vec<(PathBuf, Outcome)> {
    let taken = pool.lock().ok().and_then(|mut p| p.pop());
    let mut registry = match taken.map_or_else(|| Registry::open(&config.gateway.database), Ok) {
        Ok(r) => r,
        Err(e) => {
            return paths
                .into_iter()
                .map(|p| (p, Outcome::Failed(e.to_string())))
                .collect()
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
    let result = pipeline::process_files(&paths, config, &mut registry, &options);
    if let Ok(mut p) = pool.lock() {
        p.push(registry);
    }
    let outcomes = match result {
        Ok(outcomes) => outcomes,
        Err(e) => {
            return paths
                .into_iter()
                .map(|p| (p, Outcome::Failed(e.to_string())))
                .collect()
        }
    };
    outcomes
        .into_iter()
        .map(|o| {
            let outcome = match o.result {
                Err(e) => Outcome::Failed(e.to_string()),
                // Undecided here (another process took the claim over): leave the file in the
                // inbox; the retry meets the decision as a duplicate.
                Ok(reports)
                    if reports
                        .iter()
                        .any(|r| r.disposition == Disposition::InProgress) =>
                {
                    Outcome::Failed("in progress elsewhere; retried later".into())
                }
                Ok(reports) => match inbound::dispose(&o.path, &reports, config) {
                    Ok(destination) => Outcome::Done {
                        reports,
                        destination,
                    },
                    // The registry has the decision; the next attempt replays it as a duplicate.
                    Err(e) => Outcome::Failed(format!(
                        "moving {} after processing: {e}",
                        o.path.display()
                    )),
                },
            };
            (o.path, outcome)
        })
        .collect()
}

/// Records what became of a file taken from the inbox.
fn record_outcome(
    candidates: &mut HashMap<PathBuf, Candidate>,
    summary: &mut Summary,
    path: PathBuf,
    outcome: Outcome,
    retry_max: Duration,
) {
    match outcome {
        Outcome::Done {
            reports,
            destination,
        } => {
            candidates.remove(&path);
            for r in &reports {
                match r.disposition {
                    Disposition::Accepted | Disposition::Partial => summary.accepted += 1,
                    Disposition::Duplicate => summary.duplicates += 1,
                    Disposition::Conflict => summary.conflicts += 1,
                    _ => {}
                }
            }
            if let Destination::Rejected { file, reason } = &destination {
                summary.rejected_files += 1;
                tracing::warn!(file = %file.display(), reason = %reason.display(), "file rejected");
            }
        }
        Outcome::Failed(error) => {
            summary.retries += 1;
            if let Some(c) = candidates.get_mut(&path) {
                c.in_flight = false;
                c.attempts += 1;
                let wait = backoff(c.attempts, retry_max);
                c.not_before = Some(Instant::now() + wait);
                tracing::error!(file = %path.display(), %error, retry_in_ms = wait.as_millis() as u64, "operational failure; the file stays in the inbox");
            }
        }
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

fn rejected_backlog(config: &Config) -> usize {
    std::fs::read_dir(&config.gateway.rejected)
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.path().is_file() && !e.file_name().to_string_lossy().ends_with(".reason.json")
                })
                .count()
        })
        .unwrap_or(0)
}

fn log_summary(s: &Summary, config: &Config, in_flight: usize, waiting: usize) {
    tracing::info!(
        files_taken = s.files_taken,
        accepted = s.accepted,
        duplicates = s.duplicates,
        conflicts = s.conflicts,
        rejected_files = s.rejected_files,
        retries = s.retries,
        in_flight,
        waiting,
        rejected_backlog = rejected_backlog(config),
        "summary"
    );
}

/// Lists the inbox's candidate files (regular files with names not ignored).
fn scan(inbox: &Path) -> std::io::Result<Vec<(PathBuf, u64, SystemTime)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(inbox)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if inbound::is_ignored(&name) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_file() {
            found.push((
                entry.path(),
                meta.len(),
                meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            ));
        }
    }
    found.sort();
    Ok(found)
}

/// Runs the watcher until `shutdown` resolves (or, with `once`, until the inbox is done).
pub async fn run(
    config: Arc<Config>,
    options: WatchOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary, WatchError> {
    let g = &config.gateway;
    let inbox = g.inbox.clone();
    std::fs::create_dir_all(&inbox).map_err(|source| WatchError::Inbox {
        path: inbox.display().to_string(),
        cause: source,
    })?;
    // An unusable database stops the watcher before it takes anything.
    let first = Registry::open(&g.database)?;
    let pool: Pool = Arc::new(Mutex::new(vec![first]));
    let lease = Duration::from_secs(g.lease_seconds);
    for dir in [&g.out, &g.outbox] {
        crate::outputs::clean_stale(dir, lease);
    }
    let process_options = Arc::new(ProcessOptions::new(false));
    let settle = Duration::from_millis(g.settle_ms);
    let retry_max = Duration::from_secs(g.retry_max_seconds);
    let workers = Arc::new(Semaphore::new(g.workers.max(1)));

    // File events only nudge: a full channel sets `rescan` instead of losing a file.
    let (events_tx, mut events) = mpsc::channel::<PathBuf>(4096);
    let rescan = Arc::new(AtomicBool::new(true));
    let _watcher = if options.poll || options.once {
        None
    } else {
        use notify::Watcher;
        let flag = rescan.clone();
        let mut w =
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
        w.watch(&inbox, notify::RecursiveMode::NonRecursive)?;
        Some(w)
    };

    let mut candidates: HashMap<PathBuf, Candidate> = HashMap::new();
    let mut tasks: JoinSet<Vec<(PathBuf, Outcome)>> = JoinSet::new();
    let mut summary = Summary::default();
    let tick_every =
        Duration::from_millis(g.poll_ms.min(settle.as_millis().max(20) as u64 / 2).max(10));
    let mut tick = tokio::time::interval(tick_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_scan = Instant::now() - Duration::from_secs(3600);
    let mut last_summary = Instant::now();
    let mut last_dispatch = Instant::now();
    let summary_every = Duration::from_secs(g.summary_seconds.max(1));
    tokio::pin!(shutdown);
    let mut stopping = false;

    loop {
        tokio::select! {
            biased;
            () = &mut shutdown, if !stopping => {
                tracing::info!(in_flight = tasks.len(), "shutting down: taking no new files, finishing the ones in flight");
                stopping = true;
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                for (path, outcome) in done.unwrap_or_default() {
                    record_outcome(&mut candidates, &mut summary, path, outcome, retry_max);
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
            if tasks.is_empty() {
                break;
            }
            continue;
        }
        let now = Instant::now();
        let poll_due = now.duration_since(last_scan) >= Duration::from_millis(g.poll_ms);
        let waiting = candidates.values().any(|c| !c.in_flight);
        // At most one rescan per tick, however many events arrive: a flood of events must
        // not turn into a flood of directory listings.
        let scan_due = now.duration_since(last_scan) >= tick_every;
        if poll_due || (scan_due && (waiting || rescan.load(Ordering::Relaxed))) {
            rescan.store(false, Ordering::Relaxed);
            last_scan = now;
            let found = scan(&inbox).map_err(|source| WatchError::Inbox {
                path: inbox.display().to_string(),
                cause: source,
            })?;
            let present: std::collections::HashSet<&PathBuf> =
                found.iter().map(|(p, ..)| p).collect();
            candidates.retain(|p, c| c.in_flight || present.contains(p));
            for (path, size, modified) in &found {
                let c = candidates.entry(path.clone()).or_insert(Candidate {
                    size: *size,
                    modified: *modified,
                    changed_at: now,
                    in_flight: false,
                    attempts: 0,
                    not_before: None,
                });
                if c.size != *size || c.modified != *modified {
                    c.size = *size;
                    c.modified = *modified;
                    c.changed_at = now;
                }
            }
        }
        // Hand settled files to free workers, oldest names first.
        let mut ready: Vec<PathBuf> = candidates
            .iter()
            .filter(|(_, c)| !c.in_flight && c.not_before.is_none_or(|t| t <= now))
            .filter(|(_, c)| {
                // A file is complete once it has not been modified for `settle`. An mtime in
                // the future (clock skew on a network share) falls back to our own observation.
                let quiet = SystemTime::now()
                    .duration_since(c.modified)
                    .unwrap_or_else(|_| now.duration_since(c.changed_at));
                // ... and its size and mtime were the same at the last rescan too.
                quiet >= settle && now.duration_since(c.changed_at) >= tick_every
            })
            .map(|(p, _)| p.clone())
            .collect();
        ready.sort();
        // A trickle goes one file per worker; a flood is split into batches across the free
        // workers, so that each durable step serves many files (as `process` does).
        let free = workers.available_permits().max(1);
        let size = ready.len().div_ceil(free).clamp(1, pipeline::BATCH_FILES);
        // While a batch has just started, let a few more files gather rather than start a
        // batch of a handful: it is the durable steps, not the files, that cost. The hold is
        // short, so a slow file in flight never keeps the others waiting long.
        let gathering = !tasks.is_empty()
            && ready.len() < pipeline::BATCH_FILES
            && now.duration_since(last_dispatch) < GATHER;
        if gathering {
            ready.clear();
        }
        for chunk in ready.chunks(size) {
            let Ok(permit) = workers.clone().try_acquire_owned() else {
                break;
            };
            for path in chunk {
                if let Some(c) = candidates.get_mut(path) {
                    c.in_flight = true;
                }
            }
            summary.files_taken += chunk.len() as u64;
            last_dispatch = now;
            tracing::debug!(files = chunk.len(), "batch taken");
            let paths = chunk.to_vec();
            let again = paths.clone();
            let (config, pool, opts) = (config.clone(), pool.clone(), process_options.clone());
            let handle = tokio::task::spawn_blocking(move || {
                let outcomes = process_batch(paths, &config, &pool, &opts);
                drop(permit);
                outcomes
            });
            tasks.spawn(async move {
                handle.await.unwrap_or_else(|e| {
                    again
                        .into_iter()
                        .map(|p| (p, Outcome::Failed(e.to_string())))
                        .collect()
                })
            });
        }
        if now.duration_since(last_summary) >= summary_every {
            last_summary = now;
            log_summary(
                &summary,
                &config,
                tasks.len(),
                candidates.values().filter(|c| !c.in_flight).count(),
            );
        }
        if options.once
            && tasks.is_empty()
            && candidates
                .values()
                .all(|c| c.not_before.is_some() || c.in_flight)
        {
            // Everything present was taken; files that failed operationally wait for the next run.
            break;
        }
    }
    log_summary(
        &summary,
        &config,
        0,
        candidates.values().filter(|c| !c.in_flight).count(),
    );
    Ok(summary)
}
