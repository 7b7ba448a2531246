//! A gateway's set-up, before any work: the checks of `x12gate check` (which `process` and
//! `watch` run too, before they claim anything), `x12gate init`, and opening the registry.
//!
//! The registry is the memory of what was processed and which control numbers were sent; a
//! new, empty one in its place means double deliveries and reused numbers. So it is created
//! only by `init`, or by the first `process`/`watch` of a gateway that has no history yet (no
//! registry, nothing in `outbox/` or `archive/`), which keeps the README's one-command start.
//! Anywhere else a missing registry is an error that names the path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{Config, Gateway};
use crate::registry::{Counter, Identity, Registry, RegistryError};

/// One thing wrong with a configuration, naming the key and its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `gateway.inbox`, `partner "Acme".duplicate_window_days`, ...
    pub key: String,
    pub line: Option<usize>,
    pub message: String,
    /// Not a mistake in the set-up but a failure to reach what it names (a PostgreSQL
    /// server that is down): worth retrying, not fixing.
    pub operational: bool,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}, `{}`: {}", self.key, self.message),
            None => write!(f, "`{}`: {}", self.key, self.message),
        }
    }
}

/// The gateway's identity in its registry.
pub fn identity(g: &Gateway) -> Identity<'_> {
    Identity {
        qualifier: &g.id_qualifier,
        id: &g.id,
    }
}

/// The folders files move between, by their keys.
fn folders(g: &Gateway) -> [(&'static str, &Path); 6] {
    [
        ("inbox", &g.inbox),
        ("outbox", &g.outbox),
        ("out", &g.out),
        ("archive", &g.archive),
        ("rejected", &g.rejected),
        ("work", &g.work),
    ]
}

/// Whether this user can create files in `dir` (an existing folder): a probe file created
/// and removed at once.
fn writable(dir: &Path) -> bool {
    let probe = dir.join(format!(".x12gate-check-{}", std::process::id()));
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            true
        }
        Err(_) => false,
    }
}

/// What is wrong with folder `path`, if anything: it must be a folder we can write to, or
/// not exist yet under a folder we can write to.
fn folder_problem(path: &Path) -> Option<String> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_dir() => Some(format!("{} is a file, not a folder", path.display())),
        Ok(_) if !writable(path) => {
            Some(format!("{}: this user cannot write here", path.display()))
        }
        Ok(_) => None,
        Err(_) => {
            let mut up = path.parent();
            while let Some(p) = up {
                match std::fs::metadata(p) {
                    Ok(m) if m.is_dir() => {
                        return (!writable(p)).then(|| {
                            format!(
                            "{} does not exist and cannot be created: this user cannot write to {}",
                            path.display(),
                            p.display()
                        )
                        })
                    }
                    Ok(_) => {
                        return Some(format!(
                            "{} cannot be created: {} is a file",
                            path.display(),
                            p.display()
                        ))
                    }
                    Err(_) => up = p.parent(),
                }
            }
            Some(format!("{}: no existing parent folder", path.display()))
        }
    }
}

/// `path` resolved as the kernel would: the part that exists canonical (symbolic links and
/// `..` followed), the rest, which does not exist yet, normalised as written.
fn resolve(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut at = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                at.pop();
            }
            other => {
                at.push(other);
                if let Ok(real) = std::fs::canonicalize(&at) {
                    at = real;
                }
            }
        }
    }
    at
}

/// What shows that a gateway has processed files before: acknowledgments in the outbox or
/// files in the archive. `None` for a gateway without history.
pub fn history(g: &Gateway) -> Option<String> {
    fn files(dir: &Path, deep: bool, limit: usize) -> usize {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        let mut n = 0;
        for e in entries.flatten() {
            if n >= limit {
                break;
            }
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_file() => n += 1,
                Ok(t) if t.is_dir() && deep => n += files(&e.path(), true, limit - n),
                _ => {}
            }
        }
        n
    }
    let found: Vec<String> = [
        ("the outbox", &g.outbox, false),
        ("the archive", &g.archive, true),
    ]
    .into_iter()
    .filter_map(|(what, dir, deep)| {
        let n = files(dir, deep, 1000);
        (n > 0).then(|| {
            format!(
                "{what} holds {n}{} file(s)",
                if n >= 1000 { "+" } else { "" }
            )
        })
    })
    .collect();
    (!found.is_empty()).then(|| found.join(", "))
}

/// The longest lease `check` accepts: long enough for any file (a claim's lease is renewed
/// while its work goes on), short enough that a hung process's claims are not held for ever.
pub const MAX_LEASE_SECONDS: u64 = 86_400;

/// Every problem of `config` that would make `process` or `watch` lose, double or misplace
/// a file, without changing anything.
// Independent checks, in the order `x12gate check` reports them.
pub fn check(config: &Config) -> Vec<Problem> {
    let mut problems = Vec::new();
    folder_checks(config, &mut problems);
    registry_checks(config, &mut problems);
    setting_checks(config, &mut problems);
    destination_checks(config, &mut problems);
    problems
}

/// A problem with the gateway's `key`, at its line.
fn gateway_key(config: &Config, key: &str, message: String) -> Problem {
    Problem {
        key: format!("gateway.{key}"),
        line: config.line_of("gateway", key),
        message,
        operational: false,
    }
}

/// The gateway's folders: each usable, none the same as or inside another, the ones files
/// move between on the inbox's file system.
fn folder_checks(config: &Config, problems: &mut Vec<Problem>) {
    let g = &config.gateway;
    let gateway_key = |key: &str, message: String| gateway_key(config, key, message);
    let named = folders(g);
    for (key, path) in named {
        if let Some(m) = folder_problem(path) {
            problems.push(gateway_key(key, m));
        }
    }
    // Distinct, and none inside another: a watcher would take its own outputs as input, or
    // reject its rejections forever. Compared as resolved (`..` and symbolic links of the
    // part that exists followed), so that neither hides an overlap.
    let resolved: Vec<(&str, PathBuf)> = named.iter().map(|(k, p)| (*k, resolve(p))).collect();
    for (i, (a, pa)) in resolved.iter().enumerate() {
        for (b, pb) in resolved.iter().skip(i + 1) {
            let m = if pa == pb {
                Some(format!(
                    "is the same folder as `gateway.{b}` ({})",
                    pa.display()
                ))
            } else if pa.starts_with(pb) {
                Some(format!(
                    "{} is inside `gateway.{b}` ({})",
                    pa.display(),
                    pb.display()
                ))
            } else if pb.starts_with(pa) {
                Some(format!("contains `gateway.{b}` ({})", pb.display()))
            } else {
                None
            };
            if let Some(m) = m {
                problems.push(gateway_key(a, m));
            }
        }
    }
    // Files move between these by rename and hard link: one file system.
    {
        use std::os::unix::fs::MetadataExt;
        let device = |p: &Path| {
            p.ancestors()
                .find_map(|a| std::fs::metadata(a).ok())
                .map(|m| m.dev())
        };
        let inbox = device(&g.inbox);
        for (key, path) in [
            ("work", &g.work),
            ("archive", &g.archive),
            ("rejected", &g.rejected),
        ] {
            if inbox.is_some() && device(path) != inbox {
                problems.push(gateway_key(
                    key,
                    format!(
                        "{} is on another file system than the inbox {}: files move between them by rename and hard link; put it beside the inbox",
                        path.display(),
                        g.inbox.display()
                    ),
                ));
            }
        }
    }
}

/// Where the registry is: not among the work, not a folder, and readable.
fn registry_checks(config: &Config, problems: &mut Vec<Problem>) {
    let g = &config.gateway;
    let gateway_key = |key: &str, message: String| gateway_key(config, key, message);
    let file = g.database.file();
    if file.is_some_and(|f| f.starts_with(&g.inbox) || f.starts_with(&g.work)) {
        problems.push(gateway_key(
            "database",
            format!("{} is inside the inbox or the work folder", g.database),
        ));
    }
    if file.is_some_and(Path::is_dir) {
        problems.push(gateway_key(
            "database",
            format!("{} is a folder", g.database),
        ));
    } else if let Err(e) = registry_problem(g) {
        let operational = e.is_unreachable();
        problems.push(Problem {
            operational,
            ..gateway_key("database", e.to_string())
        });
    }
}

/// Numbers the loader would take but that cannot work: zero workers, leases out of range,
/// zero limits, duplicate windows shorter than a day.
fn setting_checks(config: &Config, problems: &mut Vec<Problem>) {
    let g = &config.gateway;
    let gateway_key = |key: &str, message: String| gateway_key(config, key, message);
    // The loader makes 0 workers "one per core" and lifts a short poll to 10 ms; a 0 the
    // operator wrote is still a mistake to report.
    for key in ["workers", "poll_ms", "summary_seconds", "retry_max_seconds"] {
        if config
            .written("gateway", key)
            .is_some_and(|v| v.as_integer().is_some_and(|n| n < 1))
        {
            problems.push(gateway_key(key, "must be at least 1".into()));
        }
    }
    if g.lease_seconds < 1 {
        problems.push(gateway_key(
            "lease_seconds",
            "must be at least 1 second".into(),
        ));
    } else if g.lease_seconds > MAX_LEASE_SECONDS {
        problems.push(gateway_key(
            "lease_seconds",
            format!(
                "must be at most {MAX_LEASE_SECONDS} seconds (one day): a claim of a process that hangs is taken over only after its lease"
            ),
        ));
    }
    let limits = &config.limits;
    for (key, zero) in [
        ("max_file_bytes", limits.max_file_bytes == 0),
        ("max_segments_per_set", limits.max_segments_per_set == 0),
        ("max_element_len", limits.max_element_len == 0),
    ] {
        if zero {
            problems.push(Problem {
                key: format!("limits.{key}"),
                line: config.line_of("limits", key),
                message: "must be more than 0".into(),
                operational: false,
            });
        }
    }
    for p in &config.partners {
        if p.duplicates.window_days < 1 {
            problems.push(Problem {
                key: format!("partner {:?}.duplicate_window_days", p.name),
                line: config.line_of_partner(&p.name, "duplicate_window_days"),
                message: "must be at least 1 day: a resend after a shorter window would be processed again".into(),
                operational: false,
            });
        }
    }
}

/// Each destination's folder usable and outside the inbox, its environment set.
fn destination_checks(config: &Config, problems: &mut Vec<Problem>) {
    let g = &config.gateway;
    for d in &config.destinations {
        let key = |k: &str| format!("destination {:?}.{k}", d.name);
        if let crate::config::DestinationKind::Folder { path: Some(path) } = &d.kind {
            let inside = [&g.inbox, &g.work]
                .into_iter()
                .any(|f| resolve(path).starts_with(resolve(f)));
            if inside {
                problems.push(Problem {
                    key: key("path"),
                    line: None,
                    message: format!(
                        "{} is inside the inbox or the work folder: delivered documents would be taken as input",
                        path.display()
                    ),
                    operational: false,
                });
            } else if let Some(m) = folder_problem(path) {
                problems.push(Problem {
                    key: key("path"),
                    line: None,
                    message: m,
                    operational: false,
                });
            }
        }
        for var in crate::delivery::missing_environment(d) {
            problems.push(Problem {
                key: key("headers"),
                line: None,
                message: format!(
                    "the environment variable {var} is not set: its deliveries would wait until it is"
                ),
                operational: false,
            });
        }
    }
}

/// The counters numbers already sent are ahead of, as problems (`gateway.outbox`): for
/// `check` and the start of `process` and `watch`, not `/healthz` (it reads the outbox; a
/// running gateway takes each number before it writes it, so it cannot fall behind).
pub fn counter_problems(config: &Config) -> Vec<Problem> {
    let problem = |message: String, operational: bool| Problem {
        key: "gateway.outbox".into(),
        line: config.line_of("gateway", "outbox"),
        message,
        operational,
    };
    match counters_behind(config) {
        Ok(behind) => behind
            .iter()
            .map(|b| problem(b.to_string(), false))
            .collect(),
        Err(e) => vec![problem(
            format!("the counters could not be compared with it: {e}"),
            e.is_unreachable(),
        )],
    }
}

/// The registry's outbound counters that numbers already sent are ahead of (see
/// [`crate::sent`]); none when there is no registry yet.
pub fn counters_behind(config: &Config) -> Result<Vec<crate::sent::Behind>, RegistryError> {
    let g = &config.gateway;
    match Registry::open_read_only(&g.database)? {
        Some(registry) => crate::sent::behind(&registry, &crate::sent::folders(config)),
        None => Ok(Vec::new()),
    }
}

/// `--repair-counters`: moves every counter numbers already sent are ahead of past them,
/// recorded in the history; what was moved.
pub fn repair_counters(config: &Config) -> Result<Vec<crate::sent::Behind>, RegistryError> {
    let g = &config.gateway;
    if !Registry::exists(&g.database) {
        return Ok(Vec::new());
    }
    let mut registry = Registry::open(&g.database, identity(g))?;
    let behind = crate::sent::behind(&registry, &crate::sent::folders(config))?;
    let moves: Vec<_> = behind
        .iter()
        .map(|b| (b.partner.clone(), b.counter, b.sent))
        .collect();
    if !moves.is_empty() {
        registry.repair_counters(&moves)?;
    }
    Ok(behind)
}

/// Whether the registry can be used as it is: present and ours, or absent (or still being
/// created) in a gateway without history, where the first run creates it. Read only.
fn registry_problem(g: &Gateway) -> Result<(), RegistryError> {
    // The history is looked at first, as `open_registry` does: a gateway writes to its
    // outbox only after its registry exists, so a history seen now is a registry the check
    // below finds. Looked at after, it could be one that another process, starting at the
    // same moment on a new gateway, created and used in between (16 processes at once saw it).
    let history = history(g);
    match Registry::verify(&g.database, identity(g)) {
        Err(RegistryError::Missing { .. }) => match history {
            Some(h) => Err(missing_with_history(g, &h)),
            None => Ok(()),
        },
        other => other,
    }
}

/// The registry's damage, as `check` reports it: what SQLite's page check found (it reads
/// the whole file, so `check` runs it, not every start of `process`), and what to do.
pub fn registry_damage(config: &Config) -> Option<Problem> {
    let g = &config.gateway;
    let (message, operational) = match Registry::damage(&g.database) {
        Ok(found) if found.is_empty() => return None,
        Ok(found) => (
            format!(
                "registry {} is damaged ({} finding(s) of PRAGMA quick_check, the first: {}): stop every node, keep the file for a look, and restore the last `x12gate backup`",
                g.database,
                found.len(),
                crate::text::printable(found.first().map_or("", String::as_str))
            ),
            false,
        ),
        // A registry busy past the timeout, or unreadable for a reason of the system: not
        // a finding about its pages.
        Err(e) => (e.to_string(), true),
    };
    Some(Problem {
        key: "gateway.database".into(),
        line: config.line_of("gateway", "database"),
        message,
        operational,
    })
}

fn missing_with_history(g: &Gateway, history: &str) -> RegistryError {
    RegistryError::Missing {
        path: g.database.to_string(),
        what: format!(
            "no registry here, but this gateway has a history ({history}): a new registry would process resends again and reuse control numbers already sent; `x12gate init` reads the highest numbers from the outbox"
        ),
    }
}

/// Opens the gateway's registry for `process`, `watch` and `counter`: the existing one, or,
/// in a gateway without history, a new one (said in a warn line). Several processes may
/// start at once on a new gateway; creating opens what another one created first.
pub fn open_registry(config: &Config) -> Result<Registry, RegistryError> {
    let g = &config.gateway;
    match history(g) {
        Some(h) if !Registry::exists(&g.database) => Err(missing_with_history(g, &h)),
        Some(_) => Registry::open(&g.database, identity(g)),
        None => {
            if !Registry::exists(&g.database) {
                tracing::warn!(database = %g.database, "no registry yet: creating it (the first run of a gateway without history)");
            }
            Registry::create(&g.database, identity(g))
        }
    }
}

/// What `init` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initialized {
    pub database: crate::registry::Database,
    pub installation: String,
    /// Per partner (`QUAL:ID`), the last ISA13 and GS06 taken as used: the next numbers
    /// sent are above them.
    pub counters: BTreeMap<String, (u32, u32)>,
    /// Outbox files read for their numbers.
    pub outbox_files: usize,
}

/// Why `init` did nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    #[error("registry {0} exists already (installation {1}); nothing changed")]
    Exists(String, String),
    /// The gateway has a history but the outbox shows no number we sent: the numbers must be
    /// given, or the first acknowledgments would reuse numbers partners already have.
    #[error("this gateway has a history ({0}) but its outbox holds no acknowledgment to read our last control numbers from; give --isa13-from and --gs06-from above the last numbers the partners received")]
    NumbersUnknown(String),
    #[error("{path}: {cause}")]
    Io { path: String, cause: std::io::Error },
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// `x12gate init`: creates the folders and the registry. When the outbox already holds
/// acknowledgments (a registry lost and rebuilt), the counters start above the highest
/// numbers found there, or above `isa13_from`/`gs06_from` minus one for every partner when
/// given, so no control number is ever sent twice.
pub fn init(
    config: &Config,
    isa13_from: Option<u32>,
    gs06_from: Option<u32>,
) -> Result<Initialized, InitError> {
    let g = &config.gateway;
    if Registry::exists(&g.database) {
        let installation =
            match Registry::open(&g.database, identity(g)).and_then(|r| r.installation()) {
                Ok(installation) => installation,
                // A server that cannot be reached is not a registry that exists.
                Err(e) if g.database.file().is_none() => return Err(e.into()),
                Err(e) => format!("unreadable: {e}"),
            };
        return Err(InitError::Exists(g.database.to_string(), installation));
    }
    let outbound = g.outbound_inbox.iter().map(PathBuf::as_path);
    for dir in folders(g).into_iter().map(|(_, d)| d).chain(outbound) {
        std::fs::create_dir_all(dir).map_err(|cause| InitError::Io {
            path: dir.display().to_string(),
            cause,
        })?;
    }
    let mut found = Vec::new();
    let outbox_files = crate::sent::folders(config)
        .iter()
        .map(|f| crate::sent::in_outbox(f, |n| found.push(n)))
        .sum();
    let mut counters = crate::sent::highest(found);
    if counters.is_empty() && (isa13_from.is_none() || gs06_from.is_none()) {
        if let Some(h) = history(g) {
            return Err(InitError::NumbersUnknown(h));
        }
    }
    for p in &config.partners {
        counters.entry(p.key()).or_insert((0, 0));
    }
    for (isa13, gs06) in counters.values_mut() {
        *isa13 = (*isa13).max(isa13_from.map_or(0, |n| n.saturating_sub(1)));
        *gs06 = (*gs06).max(gs06_from.map_or(0, |n| n.saturating_sub(1)));
    }
    let registry = Registry::create(&g.database, identity(g))?;
    for (partner, (isa13, gs06)) in &counters {
        for (counter, value) in [(Counter::Interchange, *isa13), (Counter::Group, *gs06)] {
            if value > 0 {
                registry.set_control_number(partner, counter, value)?;
            }
        }
    }
    counters.retain(|_, (a, b)| *a > 0 || *b > 0);
    Ok(Initialized {
        database: g.database.clone(),
        installation: registry.installation()?,
        counters,
        outbox_files,
    })
}
