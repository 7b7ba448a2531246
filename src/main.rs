//! The `x12gate` binary: arguments in, exit code out. Every decision lives in the library.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use x12gate::config::Config;
use x12gate::x12::Limits;

/// Whether stderr carries JSON lines (`--log-format json`): then the lines the binary
/// itself prints (errors, summaries) are JSON objects too, shaped like the log lines.
static JSON_LOGS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A line for the operator on stderr, at `level` (`ERROR`, `WARN`, `INFO`): plain text, or
/// one JSON object with `--log-format json`, so that a JSON stream stays JSON.
macro_rules! say {
    ($level:expr, $($arg:tt)*) => {
        say_line($level, &format!($($arg)*))
    };
}

fn say_line(level: &str, message: &str) {
    // Messages quote input (a sender id, a segment): escaped, and cut to a sane length.
    let message = x12gate::text::printable(&x12gate::text::shortened(message, 4096)).into_owned();
    let message = message.as_str();
    if JSON_LOGS.load(std::sync::atomic::Ordering::Relaxed) {
        let line = serde_json::json!({
            "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "level": level,
            "fields": { "message": message },
            "target": "x12gate",
        });
        eprintln!("{line}");
    } else {
        eprintln!("{message}");
    }
}

/// Exit codes of the command line (SPEC section 6).
mod exit {
    pub const OK: u8 = 0;
    pub const OPERATIONAL: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const FINDINGS: u8 = 3;
    /// Stopped by SIGINT/SIGTERM before every file was processed.
    pub const INTERRUPTED: u8 = 130;
}

#[derive(Parser)]
#[command(
    name = "x12gate",
    version,
    about = "Inbound ANSI X12 gateway",
    after_help = "Dispositions: accepted, partial, rejected, duplicate, conflict, in_progress.\n\
Exit codes: 0 everything accepted or replayed (validate, check: no findings); 3 anything \
rejected, partial, in conflict or in progress (validate: findings); 1 operational failure \
(I/O, database), nothing marked done; 2 usage or configuration error (a file that does not \
exist or is not a regular file included); 130 stopped by SIGINT/SIGTERM. `watch --once`: 1 \
when files could not be finished, else 3 when it rejected any, else 0."
)]
struct Cli {
    /// Configuration file [default: ./partners.toml, used when present]
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Log lines on stderr as text or as JSON objects (filter with RUST_LOG, default warn)
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// X12 to JSON on stdout: sets with a definition in the structured form (loops, named
    /// elements), others in the lossless generic form; no registry
    Parse {
        /// An X12 file (`-`: standard input)
        file: PathBuf,
        /// The generic form for every set (segments in order, elements by position)
        #[arg(long)]
        raw: bool,
    },
    /// The JSON of `parse` (either form) back to X12 on stdout
    Render {
        /// The JSON document (`-`: standard input)
        file: PathBuf,
    },
    /// Process files once through the registry: claim, validate, translate, acknowledge
    Process {
        /// X12 files (`-`: standard input)
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// One JSON object per interchange per line
        #[arg(long)]
        json: bool,
        /// Report `in_progress` instead of waiting when another process holds an interchange
        #[arg(long)]
        no_wait: bool,
    },
    /// Watch the inbox until SIGINT/SIGTERM; finish in-flight files, then exit 0
    Watch {
        /// Rescan the inbox every poll_ms instead of relying on file events (network file systems)
        #[arg(long)]
        poll: bool,
        /// Process what is in the inbox now, then exit (for cron)
        #[arg(long)]
        once: bool,
    },
    /// The audit trail: one line per decision taken (and notes: init, placed, released)
    History {
        /// Only this sender: QUAL:ID, or ID when one configured partner has it
        #[arg(long)]
        partner: Option<String>,
        /// Only this ISA13 (the number may be unpadded: 101 is 000000101)
        #[arg(long)]
        control_number: Option<String>,
        /// Only this disposition: accepted, partial, rejected, duplicate, conflict, in_progress
        #[arg(long)]
        disposition: Option<String>,
        /// Only events at or after this time: RFC 3339, a UTC time (2026-12-01T08:00:00) or a UTC date (YYYY-MM-DD)
        #[arg(long)]
        since: Option<String>,
        /// Only events at or before this time: RFC 3339, a UTC time or a UTC date (its end)
        #[arg(long)]
        until: Option<String>,
        /// One JSON object per event per line, with every field of `process --json` and the time
        #[arg(long)]
        json: bool,
    },
    /// Counts by partner: interchanges by disposition, decisions by kind (duplicates and
    /// conflicts included), and the rejected-file backlog
    Stats {
        /// One JSON object
        #[arg(long)]
        json: bool,
    },
    /// Remove keys older than each partner's duplicate_window_days; with --files, list the
    /// files past their partner's retention_days instead (deleted with --apply)
    Prune {
        /// Files in archive/, out/ and outbox/ past retention (never one a key in the
        /// registry still refers to), instead of keys
        #[arg(long)]
        files: bool,
        /// With --files: delete them (without it, only list them)
        #[arg(long, requires = "files")]
        apply: bool,
    },
    /// Create the folders and the registry of a new gateway (or rebuild a lost registry:
    /// the counters start above the highest control numbers found in the outbox)
    Init {
        /// The first ISA13 to send to every partner (at least; the outbox may say higher)
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=999_999_999))]
        isa13_from: Option<u32>,
        /// The first GS06 to send to every partner (at least)
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=999_999_999))]
        gs06_from: Option<u32>,
    },
    /// Check the configuration, folders and registry without changing anything (process
    /// and watch run the same checks first)
    Check,
    /// The metrics `watch` serves at /metrics, printed once (for cron and node-exporter's
    /// textfile collector)
    Metrics,
    /// A consistent copy of the registry, safe while `watch` runs (copying the file is not:
    /// the registry is in WAL mode)
    Backup {
        /// Where to write the copy (must not exist)
        dest: PathBuf,
    },
    /// Everything about one interchange: claim, contents seen, findings, acknowledgments
    /// sent (with our ISA13/GS06), outputs, where its file is, history
    Show {
        /// QUAL:ID:ISA13, or ID:ISA13 when the id is unique; the number may be unpadded
        key: String,
        /// The same as one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Process rejected interchanges again from their stored file (after adding a partner,
    /// fixing a limit or a definition), as a new attempt with fresh acknowledgments
    Reprocess {
        /// Interchange keys: QUAL:ID:ISA13, or ID:ISA13 when one sender has that id
        #[arg(required = true)]
        keys: Vec<String>,
        /// Read this copy of the interchange instead of the stored one
        #[arg(long)]
        file: Option<PathBuf>,
        /// Also reprocess an accepted interchange: the ERP may receive it twice
        #[arg(long)]
        force: bool,
        /// One JSON object per interchange per line
        #[arg(long)]
        json: bool,
    },
    /// Unfinished claims (in flight or failed); `claims release KEY` frees one
    Claims {
        #[command(subcommand)]
        action: Option<ClaimsAction>,
        /// One JSON object per claim per line
        #[arg(long)]
        json: bool,
    },
    /// Print the TA1/997/999 that `process` would send for FILE; writes nothing
    Ack {
        /// An X12 file (`-`: standard input)
        file: PathBuf,
    },
    /// Outbound control-number counters (our ISA13 and GS06) per partner
    Counter {
        #[command(subcommand)]
        action: CounterAction,
    },
    /// Diagnostics with byte offset, segment position and X12 code: envelope rules, and
    /// every set with a definition checked against it; no registry
    Validate {
        /// X12 files (`-`: standard input)
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// One JSON object per finding per line
        #[arg(long)]
        json: bool,
        /// Envelope rules only: skip the transaction-set definitions (a partner's
        /// `validation = "envelope"`)
        #[arg(long)]
        envelope: bool,
    },
}

#[derive(Subcommand)]
enum ClaimsAction {
    /// Mark KEY's claim failed so the next attempt takes it over at once; refused while its
    /// owner is a live process on this host, and for another host's owner without --force
    Release {
        /// QUAL:ID:ISA13 (the control number may be unpadded)
        key: String,
        /// Release a claim whose owner is on another host (make sure it is dead)
        #[arg(long)]
        force: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum CounterAction {
    /// Print the last numbers handed out to PARTNER (QUAL:ID)
    Show {
        /// A configured partner, QUAL:ID
        partner: String,
    },
    /// Take the next COUNT numbers and print them, one per line (9 digits, as sent)
    Next {
        /// A configured partner, QUAL:ID
        partner: String,
        /// Which counter: our ISA13 or our GS06
        #[arg(long, value_enum, default_value = "isa13")]
        kind: CounterKind,
        /// How many numbers to take
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Set a counter, so that the next number handed out is VALUE + 1
    Set {
        /// A configured partner, QUAL:ID
        partner: String,
        /// isa13 or gs06
        #[arg(value_enum)]
        kind: CounterKind,
        /// The number just sent: the next one handed out is VALUE + 1 (1 to 999999999)
        #[arg(value_parser = clap::value_parser!(u32).range(1..=999_999_999))]
        value: u32,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum CounterKind {
    Isa13,
    Gs06,
}

impl From<CounterKind> for x12gate::registry::Counter {
    fn from(k: CounterKind) -> Self {
        match k {
            CounterKind::Isa13 => x12gate::registry::Counter::Interchange,
            CounterKind::Gs06 => x12gate::registry::Counter::Group,
        }
    }
}

fn counter(action: CounterAction, config: &Config, out: &mut impl Write) -> Result<u8, Failure> {
    use x12gate::registry::{ControlNumbers, Counter};
    let op = registry_failure;
    let partner = match &action {
        CounterAction::Show { partner }
        | CounterAction::Next { partner, .. }
        | CounterAction::Set { partner, .. } => partner,
    };
    if !config.partners.iter().any(|p| &p.key() == partner) {
        return Err(Failure::Usage(anyhow::anyhow!(
            "{}: not a configured partner (QUAL:ID; configured: {})",
            x12gate::text::printable(partner),
            config
                .partners
                .iter()
                .map(|p| p.key())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // Counters live in the registry of a gateway that exists: `init` first.
    let registry = open_registry(config)?;
    match action {
        CounterAction::Show { partner } => {
            for (name, c) in [("ISA13", Counter::Interchange), ("GS06", Counter::Group)] {
                let v = registry.current_control_number(&partner, c).map_err(op)?;
                writeln!(
                    out,
                    "{partner} {name} {}",
                    v.map_or("none".to_string(), |v| format!("{v:09}"))
                )?;
            }
        }
        CounterAction::Next {
            partner,
            kind,
            count,
        } => {
            for _ in 0..count {
                writeln!(
                    out,
                    "{:09}",
                    registry
                        .next_control_number(&partner, kind.into())
                        .map_err(op)?
                )?;
            }
        }
        CounterAction::Set {
            partner,
            kind,
            value,
        } => {
            let counter: Counter = kind.into();
            let before = registry
                .current_control_number(&partner, counter)
                .map_err(op)?;
            registry
                .set_control_number(&partner, counter, value)
                .map_err(op)?;
            let name = match kind {
                CounterKind::Isa13 => "ISA13",
                CounterKind::Gs06 => "GS06",
            };
            writeln!(
                out,
                "{partner} {name} {value:09} (was {}); the next one sent is {:09}",
                before.map_or("none".to_string(), |v| format!("{v:09}")),
                value % 999_999_999 + 1
            )?;
        }
    }
    Ok(exit::OK)
}

fn main() -> ExitCode {
    // Crash points for tests, armed by FAILPOINTS (SPEC section 8); absent from normal builds.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() && wants_json_logs() => {
            JSON_LOGS.store(true, std::sync::atomic::Ordering::Relaxed);
            say!("ERROR", "{}", e.render());
            return ExitCode::from(exit::USAGE);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    // The watcher's own lines (start-up, summary, shutdown) are for the operator: shown by
    // default. Per-interchange lines at info stay behind RUST_LOG.
    let default = match cli.command {
        Command::Watch { .. } => "warn,x12gate::watch=info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match cli.log_format {
        LogFormat::Json => {
            JSON_LOGS.store(true, std::sync::atomic::Ordering::Relaxed);
            logs.json().init()
        }
        LogFormat::Text => {
            use std::io::IsTerminal;
            logs.with_ansi(std::io::stderr().is_terminal()).init()
        }
    }
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(Failure::Usage(e)) => {
            say!("ERROR", "x12gate: {e:#}");
            ExitCode::from(exit::USAGE)
        }
        Err(Failure::Operational(e)) => {
            say!("ERROR", "x12gate: {e:#}");
            ExitCode::from(exit::OPERATIONAL)
        }
    }
}

/// Whether the arguments ask for JSON logs, read before clap could parse them (to report
/// clap's own errors in that form).
fn wants_json_logs() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .any(|w| w[0] == "--log-format" && w[1] == "json")
        || args.iter().any(|a| a == "--log-format=json")
}

enum Failure {
    Usage(anyhow::Error),
    Operational(anyhow::Error),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Operational(e.into())
    }
}

/// The configuration's limits; the default file is optional for the commands that need no registry.
fn limits(config: Option<&Path>) -> Result<Limits, Failure> {
    let default = Path::new("partners.toml");
    let path = match config {
        Some(p) => p,
        None if default.exists() => default,
        None => return Ok(Limits::default()),
    };
    Config::load(path)
        .map(|c| c.limits)
        .map_err(|e| Failure::Usage(e.into()))
}

/// The configuration, required: the default file must exist for commands that need it.
fn config(path: Option<&Path>) -> Result<Config, Failure> {
    let path = path.unwrap_or(Path::new("partners.toml"));
    Config::load(path).map_err(|e| Failure::Usage(e.into()))
}

fn read(path: &Path, limits: &Limits) -> Result<Vec<u8>, Failure> {
    x12gate::input::read(path, limits.max_file_bytes).map_err(|e| {
        if e.is_not_found() {
            Failure::Usage(e.into())
        } else {
            Failure::Operational(e.into())
        }
    })
}

/// `ack`: decides every interchange of `input` and prints the acknowledgments; control numbers
/// are previewed (the registry's next values), never taken.
fn ack(file: &Path, input: &[u8], config: &Config, out: &mut impl Write) -> Result<u8, Failure> {
    use x12gate::ack::Disposition;
    use x12gate::registry::{PreviewCounters, Registry};
    let registry = Registry::open_read_only(&config.gateway.database)
        .map_err(|e| Failure::Operational(e.into()))?;
    let now = chrono::Local::now().naive_local();
    let mut code = exit::OK;
    for result in x12gate::x12::Interchanges::new(input, config.limits) {
        let ic = match result {
            Ok(ic) => ic,
            Err(e) => {
                say!(
                    "ERROR",
                    "{}: {e}; nothing can be acknowledged for it",
                    file.display()
                );
                code = exit::FINDINGS;
                continue;
            }
        };
        let decision = x12gate::pipeline::decide(&ic, config, definitions()?);
        let counters = PreviewCounters::after(registry.as_ref(), &decision.partner.key())
            .map_err(|e| Failure::Operational(e.into()))?;
        let outbound = x12gate::pipeline::acknowledgments(&ic, &decision, config, &counters, now)
            .map_err(|e| Failure::Operational(e.into()))?;
        for o in &outbound {
            out.write_all(&o.bytes)?;
        }
        let r = &decision.response;
        let sends: Vec<String> = outbound
            .iter()
            .map(|o| {
                format!(
                    "{} {:09}",
                    o.kind.extension().to_uppercase(),
                    o.control_number
                )
            })
            .collect();
        say!(
            "INFO",
            "{}: {} {}{}; sends {}",
            file.display(),
            x12gate::pipeline::correlation_id(&ic),
            r.disposition.as_str(),
            r.reason
                .as_ref()
                .map(|x| format!(
                    " ({}{})",
                    x.code.map(|c| format!("{c} ")).unwrap_or_default(),
                    x.text
                ))
                .unwrap_or_default(),
            if sends.is_empty() {
                "nothing".to_string()
            } else {
                sends.join(", ")
            },
        );
        if r.disposition != Disposition::Accepted {
            code = exit::FINDINGS;
        }
    }
    Ok(code)
}

/// A registry error as the command line sees it: a missing, foreign or other gateway's
/// registry is a set-up mistake (exit 2), the rest operational (exit 1).
fn registry_failure(e: x12gate::registry::RegistryError) -> Failure {
    if e.is_setup() {
        Failure::Usage(e.into())
    } else {
        Failure::Operational(e.into())
    }
}

/// The existing registry (history, stats, prune, claims, counter): never created here.
fn open_registry(config: &Config) -> Result<x12gate::registry::Registry, Failure> {
    x12gate::registry::Registry::open(
        &config.gateway.database,
        x12gate::setup::identity(&config.gateway),
    )
    .map_err(registry_failure)
}

/// The checks that come before any work; every problem on its own line, exit 2.
fn preflight(config: &Config) -> Result<(), Failure> {
    let problems = x12gate::setup::check(config);
    if problems.is_empty() {
        return Ok(());
    }
    for p in &problems {
        say!("ERROR", "x12gate: {}: {p}", config.path.display());
    }
    Err(Failure::Usage(anyhow::anyhow!(
        "{} problem(s) in {}; nothing was processed",
        problems.len(),
        config.path.display()
    )))
}

fn init(
    config: &Config,
    isa13_from: Option<u32>,
    gs06_from: Option<u32>,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    use x12gate::setup::InitError;
    let done = x12gate::setup::init(config, isa13_from, gs06_from).map_err(|e| match e {
        InitError::Exists(..) | InitError::NumbersUnknown(_) => Failure::Usage(e.into()),
        InitError::Registry(e) => registry_failure(e),
        e => Failure::Operational(e.into()),
    })?;
    writeln!(
        out,
        "created registry {} (installation {})",
        done.database.display(),
        done.installation
    )?;
    if done.outbox_files > 0 {
        writeln!(
            out,
            "read {} file(s) in the outbox for the control numbers already sent",
            done.outbox_files
        )?;
    }
    for (partner, (isa13, gs06)) in &done.counters {
        writeln!(
            out,
            "{partner}: next ISA13 {:09}, next GS06 {}",
            isa13 + 1,
            gs06 + 1
        )?;
    }
    Ok(exit::OK)
}

/// The built-in transaction-set definitions, loaded once; a failure to load them stops the
/// command rather than letting it check less than it says.
fn definitions() -> Result<&'static x12gate::schema::Schemas, Failure> {
    x12gate::schema::builtin().map_err(|e| Failure::Operational(anyhow::anyhow!("{e}")))
}

fn desk_failure(e: x12gate::desk::DeskError) -> Failure {
    use x12gate::desk::DeskError;
    match e {
        DeskError::Registry(e) => registry_failure(e),
        DeskError::Process(e) => Failure::Operational(e.into()),
        e => Failure::Usage(e.into()),
    }
}

fn local_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.with_timezone(&chrono::Local).to_rfc3339())
        .unwrap_or_default()
}

/// `show`: one interchange whole.
fn show(config: &Config, key: &str, json: bool, out: &mut impl Write) -> Result<u8, Failure> {
    let registry = open_registry(config)?;
    let key = x12gate::desk::resolve(&registry, key).map_err(desk_failure)?;
    let s = x12gate::desk::show(config, definitions()?, &registry, &key).map_err(desk_failure)?;
    if json {
        let mut v = serde_json::to_value(&s).map_err(|e| Failure::Operational(e.into()))?;
        let events: Vec<serde_json::Value> = s
            .events
            .iter()
            .map(|e| {
                let mut d: serde_json::Value =
                    serde_json::from_str(&e.detail).unwrap_or_else(|_| serde_json::json!({}));
                if let Some(o) = d.as_object_mut() {
                    o.insert("time".into(), local_time(e.at_ms).into());
                    o.insert("event".into(), e.event.as_str().into());
                }
                d
            })
            .collect();
        if let Some(o) = v.as_object_mut() {
            o.insert("events".into(), events.into());
        }
        writeln!(out, "{v}")?;
        return Ok(exit::OK);
    }
    let r = &s.record;
    let outcome = match (&r.disposition, &r.reason) {
        (Some(d), Some(why)) => format!(
            "{d} ({}{why})",
            r.reason_code
                .as_deref()
                .map(|c| format!("{c} "))
                .unwrap_or_default()
        ),
        (Some(d), None) => d.to_string(),
        (None, _) => "-".into(),
    };
    let outcome = x12gate::text::printable(&outcome);
    writeln!(
        out,
        "{}  {}  {outcome}",
        x12gate::text::printable(&r.key),
        r.state
    )?;
    writeln!(
        out,
        "  partner {}, attempts {}, first seen {}, last seen {}",
        r.partner,
        r.attempts,
        local_time(r.first_seen_ms),
        local_time(r.last_seen_ms)
    )?;
    if let Some(h) = &s.holder {
        writeln!(
            out,
            "  held by {h}{}",
            r.lease_expires_ms
                .map(|t| format!(", lease until {}", local_time(t)))
                .unwrap_or_default()
        )?;
    }
    for (attempt, fp, at) in &r.fingerprints {
        writeln!(
            out,
            "  content of attempt {attempt}: {fp} ({})",
            local_time(*at)
        )?;
    }
    match &s.file_now {
        Some(f) => writeln!(out, "  file: {}", f.display())?,
        None => writeln!(
            out,
            "  file: not found (recorded as {})",
            r.file.as_deref().unwrap_or("-")
        )?,
    }
    if !s.findings.is_empty() {
        writeln!(out, "  findings:")?;
        for f in &s.findings {
            writeln!(out, "    {f}")?;
        }
    }
    for a in &s.acks {
        writeln!(
            out,
            "  sent {} {}: our ISA13 {}, GS06 {}",
            a.kind.to_uppercase(),
            a.name,
            a.isa13.as_deref().unwrap_or("-"),
            if a.gs06.is_empty() {
                "-".to_string()
            } else {
                a.gs06.join(", ")
            }
        )?;
        for line in a.text.lines() {
            writeln!(out, "    {}", x12gate::text::printable(line))?;
        }
    }
    for a in &s.conflict_acks {
        writeln!(
            out,
            "  sent TA1 {} for other content (a conflict): our ISA13 {}",
            a.name,
            a.isa13.as_deref().unwrap_or("-")
        )?;
        for line in a.text.lines() {
            writeln!(out, "    {}", x12gate::text::printable(line))?;
        }
    }
    for o in &r.outputs {
        writeln!(out, "  output: {o}")?;
    }
    writeln!(out, "  history:")?;
    for e in &s.events {
        writeln!(out, "    {} {}", local_time(e.at_ms), e.event)?;
    }
    Ok(exit::OK)
}

/// `reprocess`: rejected interchanges again, each as a new attempt.
fn reprocess(
    config: &Config,
    keys: &[String],
    file: Option<&Path>,
    force: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    preflight(config)?;
    let mut registry = open_registry(config)?;
    let options = x12gate::pipeline::ProcessOptions::new(false);
    let mut code = exit::OK;
    for given in keys {
        let key = x12gate::desk::resolve(&registry, given).map_err(desk_failure)?;
        if force {
            say!("WARN", "x12gate: {key}: reprocessing with --force: if it was accepted, the ERP may receive it twice");
        }
        let r = x12gate::desk::reprocess(
            config,
            definitions()?,
            &mut registry,
            &key,
            file,
            force,
            &options,
        )
        .map_err(desk_failure)?;
        if !r.disposition.is_success() {
            code = exit::FINDINGS;
        }
        if json {
            writeln!(
                out,
                "{}",
                serde_json::to_string(&r).map_err(|e| Failure::Operational(e.into()))?
            )?;
        } else {
            writeln!(
                out,
                "{key}: attempt {} {}{}",
                r.attempt.unwrap_or(0),
                r.disposition.as_str(),
                r.reason
                    .as_ref()
                    .map(|x| format!(" ({x})"))
                    .unwrap_or_default()
            )?;
        }
    }
    Ok(code)
}

fn claims(
    config: &Config,
    action: Option<ClaimsAction>,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    use x12gate::owner::{describe, liveness, Liveness};
    let mut registry = open_registry(config)?;
    let op = |e: x12gate::registry::RegistryError| Failure::Operational(e.into());
    let time = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .map(|t| t.with_timezone(&chrono::Local).to_rfc3339())
            .unwrap_or_default()
    };
    match action {
        None => {
            for c in registry.unfinished().map_err(op)? {
                let holder = c.owner.as_deref().map(describe);
                if json {
                    let mut v =
                        serde_json::to_value(&c).map_err(|e| Failure::Operational(e.into()))?;
                    if let Some(o) = v.as_object_mut() {
                        let age = (x12gate::registry::now_ms() - c.first_seen_ms).max(0) / 1000;
                        o.insert("age_seconds".into(), age.into());
                        o.insert("holder".into(), holder.into());
                        o.insert("lease_expires".into(), c.lease_expires_ms.map(time).into());
                    }
                    writeln!(out, "{v}")?;
                } else {
                    let age = (x12gate::registry::now_ms() - c.first_seen_ms).max(0) / 1000;
                    writeln!(
                        out,
                        "{:<30} {:<9} attempt {} {} {} since {} (age {}s) {}",
                        x12gate::text::printable(&c.key),
                        c.state,
                        c.attempts,
                        holder.unwrap_or_else(|| "no owner".into()),
                        c.lease_expires_ms
                            .map(|t| format!("lease until {}", time(t)))
                            .unwrap_or_default(),
                        time(c.first_seen_ms),
                        age,
                        c.file.as_deref().unwrap_or("-")
                    )?;
                }
            }
            Ok(exit::OK)
        }
        Some(ClaimsAction::Release { key, force }) => {
            let key = x12gate::pipeline::typed_key(&key);
            let Some(claim) = registry.unfinished_claim(&key).map_err(op)? else {
                return Err(Failure::Usage(anyhow::anyhow!(
                    "{key}: no unfinished claim (see `x12gate claims`)"
                )));
            };
            let Some(owner) = claim
                .owner
                .filter(|_| claim.state == x12gate::registry::ClaimState::InFlight)
            else {
                writeln!(out, "{key}: already failed; the next attempt takes it over")?;
                return Ok(exit::OK);
            };
            match liveness(&owner) {
                Liveness::Alive => {
                    return Err(Failure::Usage(anyhow::anyhow!(
                        "{key}: held by {}, which is working on it; not released",
                        describe(&owner)
                    )))
                }
                Liveness::Unknown if !force => {
                    return Err(Failure::Usage(anyhow::anyhow!(
                        "{key}: held by {}, which cannot be checked from here; make sure it is dead, then use --force",
                        describe(&owner)
                    )))
                }
                _ => {}
            }
            let why = format!("released by an operator from {}", describe(&owner));
            if registry.release(&key, &owner, &why).map_err(op)? {
                writeln!(out, "{key}: released from {}", describe(&owner))?;
                Ok(exit::OK)
            } else {
                Err(Failure::Usage(anyhow::anyhow!(
                    "{key}: the claim changed meanwhile; see `x12gate claims`"
                )))
            }
        }
    }
}

/// Milliseconds since the epoch for `--since`/`--until`: RFC 3339; a date and time without a
/// zone (`2026-12-01T08:00:00`), taken as UTC; or a date (its start, or its end when
/// `end_of_day`), in UTC too.
fn parse_time(s: &str, end_of_day: bool) -> Result<i64, Failure> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, format) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    let date = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| {
        Failure::Usage(anyhow::anyhow!(
            "{s:?}: expected RFC 3339 (2026-01-31T09:30:00Z), a UTC time (2026-01-31T09:30:00) or a date (2026-01-31)"
        ))
    })?;
    let time = if end_of_day {
        date.and_hms_milli_opt(23, 59, 59, 999)
    } else {
        date.and_hms_opt(0, 0, 0)
    };
    time.map(|t| t.and_utc().timestamp_millis())
        .ok_or_else(|| Failure::Usage(anyhow::anyhow!("{s:?}: not a valid time")))
}

/// The filters of `history` as the registry keeps them: a bare partner id resolved to
/// `QUAL:ID` when one configured partner has it, the control number padded, the
/// disposition checked against the list.
fn history_filter(
    config: &Config,
    partner: Option<String>,
    control_number: Option<String>,
    disposition: Option<String>,
    since: Option<&str>,
    until: Option<&str>,
) -> Result<x12gate::registry::EventFilter, Failure> {
    use x12gate::ack::Disposition;
    let partner = match partner {
        Some(p) if !p.contains(':') => {
            let matching: Vec<String> = config
                .partners
                .iter()
                .filter(|q| q.id == p)
                .map(|q| q.key())
                .collect();
            match matching.as_slice() {
                [one] => Some(one.clone()),
                [] => {
                    return Err(Failure::Usage(anyhow::anyhow!(
                        "--partner {p}: no configured partner has this id; give QUAL:ID"
                    )))
                }
                _ => {
                    return Err(Failure::Usage(anyhow::anyhow!(
                        "--partner {p}: several partners have this id ({}); give QUAL:ID",
                        matching.join(", ")
                    )))
                }
            }
        }
        other => other,
    };
    let control_number = control_number.map(|n| {
        if !n.is_empty() && n.len() < 9 && n.bytes().all(|b| b.is_ascii_digit()) {
            format!("{n:0>9}")
        } else {
            n
        }
    });
    let disposition = disposition
        .map(|d| {
            Disposition::parse(&d).ok_or_else(|| {
                Failure::Usage(anyhow::anyhow!(
                    "--disposition {d}: expected one of {}",
                    Disposition::ALL.map(|k| k.as_str()).join(", ")
                ))
            })
        })
        .transpose()?;
    Ok(x12gate::registry::EventFilter {
        key: None,
        partner,
        control_number,
        disposition,
        since_ms: since.map(|s| parse_time(s, false)).transpose()?,
        until_ms: until.map(|s| parse_time(s, true)).transpose()?,
    })
}

/// `process`: every file through the registry; per-file problems are counted and the run
/// goes on, operational failures stop it with nothing of the failing interchange marked done.
fn process(
    files: &[PathBuf],
    json: bool,
    no_wait: bool,
    config: &Config,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    use std::io::IsTerminal;
    preflight(config)?;
    let schemas = definitions()?;
    let mut registry = x12gate::setup::open_registry(config).map_err(registry_failure)?;
    let options = x12gate::pipeline::ProcessOptions::new(no_wait);
    stop_on_signals(&options.stop)?;
    let lease = std::time::Duration::from_secs(config.gateway.lease_seconds);
    for dir in [
        &config.gateway.out,
        &config.gateway.outbox,
        &config.gateway.rejected,
    ] {
        x12gate::outputs::clean_stale(dir, lease);
    }
    let progress = (files.len() > 20 && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(files.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} files {per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let mut code = exit::OK;
    let (mut operational, mut usage) = (false, false);
    let mut done = 0;
    for chunk in files.chunks(x12gate::pipeline::BATCH_FILES) {
        if options.stop.abandoned() {
            break;
        }
        let sources: Vec<x12gate::pipeline::Source> = chunk
            .iter()
            .map(|p| x12gate::pipeline::Source::from(p.as_path()))
            .collect();
        // An unusable database, or outputs that cannot be written, stop the run with nothing
        // of the failing batch marked done.
        let outcomes = match x12gate::pipeline::process_files(
            &sources,
            config,
            schemas,
            &mut registry,
            &options,
            None,
        ) {
            Ok(outcomes) => outcomes,
            Err(x12gate::pipeline::ProcessError::Interrupted) => break,
            Err(e) => return Err(Failure::Operational(e.into())),
        };
        done += outcomes.len();
        for outcome in outcomes {
            let reports = match outcome.result {
                Ok(reports) => reports,
                // A file that cannot be read is counted and the run goes on: a path that
                // does not exist or is not a regular file is a usage mistake (exit 2), an
                // unreadable one an operational failure (exit 1).
                Err(e) => {
                    let mistake = matches!(
                        &e,
                        x12gate::pipeline::ProcessError::Input(i) if i.is_not_found()
                    );
                    usage |= mistake;
                    operational |= !mistake;
                    let message = x12gate::text::printable(&e.to_string()).into_owned();
                    if json {
                        let line = serde_json::json!({
                            "file": outcome.path.display().to_string(),
                            "disposition": null,
                            "error": message,
                        });
                        writeln!(out, "{line}")?;
                    }
                    say!("ERROR", "x12gate: {message}");
                    continue;
                }
            };
            for r in &reports {
                if !r.disposition.is_success() {
                    code = exit::FINDINGS;
                }
                if json {
                    writeln!(
                        out,
                        "{}",
                        serde_json::to_string(r).map_err(|e| Failure::Operational(e.into()))?
                    )?;
                } else {
                    let reason = r.reason.as_ref().map(|x| {
                        let code = r
                            .reason_code
                            .as_ref()
                            .map(|c| format!("{c} "))
                            .unwrap_or_default();
                        format!(" ({code}{x})")
                    });
                    let line = format!(
                        "{}: {} {}{}",
                        r.file,
                        r.correlation_id.as_deref().unwrap_or("-"),
                        r.disposition.as_str(),
                        reason.unwrap_or_default()
                    );
                    let line = x12gate::text::printable(&line);
                    // The report is stdout's, whatever stderr's progress bar is doing.
                    match &progress {
                        Some(bar) => bar.suspend(|| writeln!(out, "{line}"))?,
                        None => writeln!(out, "{line}")?,
                    }
                }
            }
        }
        if let Some(bar) = &progress {
            bar.inc(chunk.len() as u64);
        }
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    if options.stop.abandoned() {
        out.flush()?;
        say!("WARN", 
            "x12gate: stopped by a signal: {} of {} file(s) not processed; claims cut short were marked failed, so a rerun takes them over at once",
            files.len().saturating_sub(done),
            files.len()
        );
        return Ok(exit::INTERRUPTED);
    }
    Ok(if operational {
        exit::OPERATIONAL
    } else if usage {
        exit::USAGE
    } else {
        code
    })
}

/// SIGTERM and SIGINT ask `process` to stop at the next safe point (waits end at once, work
/// in progress is abandoned between steps with its claims marked failed); a second signal
/// exits at once, which is safe because claims are leased and owners are checked for life.
fn stop_on_signals(stop: &x12gate::pipeline::Stop) -> Result<(), Failure> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let again = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [SIGTERM, SIGINT] {
        signal_hook::flag::register_conditional_shutdown(
            signal,
            i32::from(exit::INTERRUPTED),
            again.clone(),
        )?;
        signal_hook::flag::register(signal, again.clone())?;
        signal_hook::flag::register_usize(signal, stop.flag(), x12gate::pipeline::Stop::ABANDON)?;
    }
    Ok(())
}

/// `watch`: the tokio runtime, and the signals. The first SIGINT/SIGTERM stops taking files
/// and lets the ones in flight finish; a second one exits at once, which is safe because
/// claims are leased.
fn watch(config: Config, poll: bool, once: bool) -> Result<u8, Failure> {
    preflight(&config)?;
    let schemas = definitions()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Operational(e.into()))?;
    let options = x12gate::watch::WatchOptions { poll, once };
    let summary = runtime
        .block_on(async move {
            let shutdown = async {
                let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
                    return std::future::pending().await;
                };
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                tokio::spawn(async move {
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                    say!("WARN", "x12gate: second signal, exiting now; unfinished claims are taken over at once by the next run on this host");
                    std::process::exit(130);
                });
            };
            // The configuration is read once, at start: SIGHUP (a closed terminal, a habit of
            // daemons) must not kill the watcher, and does not reload it either.
            if let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        tracing::warn!("SIGHUP ignored: the configuration is read at start; restart the watcher to apply a change");
                    }
                });
            }
            x12gate::watch::run(std::sync::Arc::new(config), schemas, options, shutdown).await
        })
        .map_err(|e| Failure::Operational(e.into()))?;
    say!("INFO", 
        "x12gate watch: {} file(s) taken, {} accepted, {} duplicate(s), {} conflict(s), {} file(s) rejected",
        summary.files_taken, summary.accepted, summary.duplicates, summary.conflicts, summary.rejected_files
    );
    // `--once` reports like `process`: files it could not finish are exit 1 (they wait in
    // the work folder for the next run), anything rejected or in conflict exit 3.
    if once && summary.left > 0 {
        say!(
            "ERROR",
            "x12gate: {} file(s) could not be finished; they wait in the work folder for the next run",
            summary.left
        );
        return Ok(exit::OPERATIONAL);
    }
    Ok(
        if once && (summary.rejected_files > 0 || summary.conflicts > 0) {
            exit::FINDINGS
        } else {
            exit::OK
        },
    )
}

fn history(
    config: &Config,
    filter: &x12gate::registry::EventFilter,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let registry = open_registry(config)?;
    for e in registry
        .history(filter)
        .map_err(|e| Failure::Operational(e.into()))?
    {
        let time = chrono::DateTime::from_timestamp_millis(e.at_ms)
            .map(|t| t.to_rfc3339())
            .unwrap_or_default();
        if json {
            let mut v: serde_json::Value =
                serde_json::from_str(&e.detail).unwrap_or(serde_json::Value::Null);
            if !v.is_object() {
                v = serde_json::json!({});
            }
            if let Some(o) = v.as_object_mut() {
                o.insert("time".into(), time.into());
                o.insert("event".into(), e.event.as_str().into());
                o.insert("key".into(), e.key.clone().into());
            }
            writeln!(out, "{v}")?;
        } else {
            // Time, key, what happened (the disposition, or the note's kind), then the file
            // and the reason or where the file went.
            let detail: serde_json::Value =
                serde_json::from_str(&e.detail).unwrap_or(serde_json::Value::Null);
            let field = |name: &str| detail[name].as_str().map(x12gate::text::printable);
            let what = e.disposition.map_or(e.event.as_str(), |d| d.as_str());
            let mut line = format!(
                "{time} {:<30} {what:<11}",
                x12gate::text::printable(e.key.as_deref().unwrap_or("-"))
            );
            if e.event.as_str() != what {
                line.push_str(&format!(" ({})", e.event));
            }
            if let Some(file) = field("file") {
                line.push_str(&format!(" {file}"));
            }
            if let Some(placed) = field("placed") {
                line.push_str(&format!(" -> {placed}"));
            }
            if let Some(reason) = field("reason") {
                let code = field("reason_code")
                    .map(|c| format!("{c} "))
                    .unwrap_or_default();
                line.push_str(&format!(": {code}{reason}"));
            }
            writeln!(out, "{line}")?;
        }
    }
    Ok(exit::OK)
}

fn stats(config: &Config, json: bool, out: &mut impl Write) -> Result<u8, Failure> {
    let registry = open_registry(config)?;
    let rows = registry
        .stats()
        .map_err(|e| Failure::Operational(e.into()))?;
    let backlog = x12gate::metrics::rejected_backlog(config);
    let decisions = registry
        .decisions()
        .map_err(|e| Failure::Operational(e.into()))?;
    if json {
        let by: Vec<serde_json::Value> = rows
            .iter()
            .map(|(p, d, n)| serde_json::json!({ "partner": p, "disposition": d, "count": n }))
            .collect();
        let decided: Vec<serde_json::Value> = decisions
            .iter()
            .map(|(p, d, n)| serde_json::json!({ "partner": p, "decision": d, "count": n }))
            .collect();
        writeln!(
            out,
            "{}",
            serde_json::json!({ "interchanges": by, "decisions": decided, "rejected_backlog": backlog })
        )?;
    } else {
        writeln!(out, "interchanges (one per key), by disposition:")?;
        for (p, d, n) in &rows {
            writeln!(out, "  {:<24} {d:<12} {n}", x12gate::text::printable(p))?;
        }
        writeln!(
            out,
            "decisions (every file's interchanges, resends included):"
        )?;
        for (p, d, n) in &decisions {
            let p = if p.is_empty() { "(no partner)" } else { p };
            writeln!(out, "  {:<24} {d:<12} {n}", x12gate::text::printable(p))?;
        }
        writeln!(
            out,
            "rejected backlog: {backlog} file(s) in {}",
            config.gateway.rejected.display()
        )?;
    }
    Ok(exit::OK)
}

fn run(cli: Cli) -> Result<u8, Failure> {
    let limits = limits(cli.config.as_deref())?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let code = match cli.command {
        Command::Parse { file, raw } => {
            let input = read(&file, &limits)?;
            let form = if raw {
                x12gate::translate::Form::Raw
            } else {
                x12gate::translate::Form::Structured
            };
            // A dry run first, so that a file that cannot be translated leaves nothing
            // half-written on stdout.
            let dry =
                x12gate::translate::write_document(&input, limits, form, &mut std::io::sink());
            match dry
                .and_then(|()| x12gate::translate::write_document(&input, limits, form, &mut out))
            {
                Ok(()) => exit::OK,
                Err(x12gate::translate::ParseError::Io(e)) => return Err(e.into()),
                Err(e) => {
                    out.flush()?;
                    say!("ERROR", "{}: {e}", file.display());
                    exit::FINDINGS
                }
            }
        }
        Command::Render { file } => {
            // The JSON of a file within max_file_bytes is several times larger.
            let json = x12gate::input::read(&file, limits.max_file_bytes.saturating_mul(16))
                .with_context(|| file.display().to_string())
                .map_err(Failure::Usage)?;
            // Rendered in memory first (the X12 is smaller than the JSON already read), so
            // that a document that fails halfway leaves nothing on stdout.
            let mut rendered = Vec::new();
            match x12gate::translate::render_document(&json, &mut rendered) {
                Ok(()) => {
                    out.write_all(&rendered)?;
                    exit::OK
                }
                Err(x12gate::translate::RenderError::Io(e)) => return Err(e.into()),
                Err(e) => {
                    say!("ERROR", "{}: {e}", file.display());
                    exit::USAGE
                }
            }
        }
        Command::Ack { file } => {
            let config = config(cli.config.as_deref())?;
            let input = read(&file, &config.limits)?;
            ack(&file, &input, &config, &mut out)?
        }
        Command::Process {
            files,
            json,
            no_wait,
        } => process(
            &files,
            json,
            no_wait,
            &config(cli.config.as_deref())?,
            &mut out,
        )?,
        Command::Watch { poll, once } => watch(config(cli.config.as_deref())?, poll, once)?,
        Command::History {
            partner,
            control_number,
            disposition,
            since,
            until,
            json,
        } => {
            let config = config(cli.config.as_deref())?;
            let filter = history_filter(
                &config,
                partner,
                control_number,
                disposition,
                since.as_deref(),
                until.as_deref(),
            )?;
            history(&config, &filter, json, &mut out)?
        }
        Command::Stats { json } => stats(&config(cli.config.as_deref())?, json, &mut out)?,
        Command::Prune { files: true, apply } => {
            let config = config(cli.config.as_deref())?;
            let registry = open_registry(&config)?;
            let plan = x12gate::retention::plan(&config, &registry).map_err(registry_failure)?;
            for (path, partner, age) in &plan.delete {
                writeln!(
                    out,
                    "{} {} ({partner}, {age} days old)",
                    if apply { "deleted" } else { "would delete" },
                    x12gate::text::printable(&path.display().to_string())
                )?;
            }
            let done = if apply {
                x12gate::retention::apply(&config, &plan)?
            } else {
                0
            };
            say!(
                "INFO",
                "{} file(s) past retention{}; {} kept for keys still in the registry, {} kept as no partner could be told",
                plan.delete.len(),
                if apply { format!(", {done} deleted") } else { " (dry run: --apply deletes them)".into() },
                plan.live,
                plan.unattributed
            );
            exit::OK
        }
        Command::Prune { .. } => {
            let config = config(cli.config.as_deref())?;
            let mut registry = open_registry(&config)?;
            let windows = |partner: &str| {
                config
                    .partners
                    .iter()
                    .find(|p| p.key() == partner)
                    .map_or(30, |p| p.duplicate_window_days)
            };
            let removed = registry
                .prune(&windows)
                .map_err(|e| Failure::Operational(e.into()))?;
            for key in &removed {
                writeln!(out, "{}", x12gate::text::printable(key))?;
            }
            say!("INFO", "pruned {} key(s)", removed.len());
            exit::OK
        }
        Command::Counter { action } => counter(action, &config(cli.config.as_deref())?, &mut out)?,
        Command::Init {
            isa13_from,
            gs06_from,
        } => init(
            &config(cli.config.as_deref())?,
            isa13_from,
            gs06_from,
            &mut out,
        )?,
        Command::Check => {
            let config = config(cli.config.as_deref())?;
            let problems = x12gate::setup::check(&config);
            for p in &problems {
                writeln!(out, "{}: {p}", config.path.display())?;
            }
            if problems.is_empty() {
                writeln!(out, "{}: no problems", config.path.display())?;
                exit::OK
            } else {
                exit::USAGE
            }
        }
        Command::Show { key, json } => show(&config(cli.config.as_deref())?, &key, json, &mut out)?,
        Command::Reprocess {
            keys,
            file,
            force,
            json,
        } => reprocess(
            &config(cli.config.as_deref())?,
            &keys,
            file.as_deref(),
            force,
            json,
            &mut out,
        )?,
        Command::Metrics => {
            let config = config(cli.config.as_deref())?;
            let text = x12gate::metrics::render(&config, None).map_err(registry_failure)?;
            out.write_all(text.as_bytes())?;
            exit::OK
        }
        Command::Backup { dest } => {
            let config = config(cli.config.as_deref())?;
            if dest.exists() {
                return Err(Failure::Usage(anyhow::anyhow!(
                    "{}: exists already; a backup never overwrites, give a new name",
                    dest.display()
                )));
            }
            // Read only: a backup taken by a newer binary must not migrate the live registry.
            let registry = x12gate::registry::Registry::open_read_only(&config.gateway.database)
                .map_err(registry_failure)?
                .ok_or_else(|| {
                    Failure::Usage(anyhow::anyhow!(
                        "{}: no registry to back up",
                        config.gateway.database.display()
                    ))
                })?;
            let pages = registry.backup(&dest).map_err(registry_failure)?;
            writeln!(
                out,
                "{}: a consistent copy of {} ({pages} pages), integrity checked",
                dest.display(),
                config.gateway.database.display()
            )?;
            exit::OK
        }
        Command::Claims { action, json } => {
            claims(&config(cli.config.as_deref())?, action, json, &mut out)?
        }
        Command::Validate {
            files,
            json,
            envelope,
        } => {
            let checks = x12gate::check::Checks {
                schemas: if envelope { None } else { Some(definitions()?) },
                routing: None,
            };
            let mut any = false;
            for file in &files {
                let findings = match read(file, &limits) {
                    Ok(input) => x12gate::check::file(&input, limits, &checks),
                    Err(Failure::Operational(e)) => {
                        match e.downcast_ref::<x12gate::input::InputError>() {
                            Some(x12gate::input::InputError::TooLarge { size, limit, .. }) => {
                                vec![x12gate::validate::too_large(*size, *limit)]
                            }
                            _ => return Err(Failure::Operational(e)),
                        }
                    }
                    Err(e) => return Err(e),
                };
                any |= !findings.is_empty();
                for f in &findings {
                    if json {
                        let mut v =
                            serde_json::to_value(f).map_err(|e| Failure::Operational(e.into()))?;
                        if let Some(o) = v.as_object_mut() {
                            o.insert("file".into(), file.display().to_string().into());
                        }
                        writeln!(out, "{v}")?;
                    } else {
                        writeln!(out, "{}: {f}", file.display())?;
                    }
                }
                if !json {
                    let n = findings.len();
                    if n == 0 {
                        say!("INFO", "{}: clean", file.display());
                    } else {
                        say!(
                            "INFO",
                            "{}: {n} finding{}",
                            file.display(),
                            if n == 1 { "" } else { "s" }
                        );
                    }
                }
            }
            if any {
                exit::FINDINGS
            } else {
                exit::OK
            }
        }
    };
    out.flush()?;
    Ok(code)
}
