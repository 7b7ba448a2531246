//! The `x12gate` binary: arguments in, exit code out. Every decision lives in the library.
//!
//! [`args`] is the command line as clap reads it, [`commands`] one function per command,
//! [`exit`] the exit codes and the failures that map to them, [`say`] the lines for the
//! operator on stderr. This file reads the configuration, once, and dispatches.

// Issue 39: no function over 100 lines (clippy.toml) or 7 parameters; tests are exempt.
#![cfg_attr(not(test), warn(clippy::too_many_lines, clippy::too_many_arguments))]

// First, so that `say!` is in scope in the modules below it.
#[macro_use]
mod say;
mod args;
mod commands;
mod exit;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use x12gate::config::Config;
use x12gate::x12::Limits;

use args::{Cli, Command, LogFormat, RejectedAction};
use exit::Failure;

/// glibc gives every thread that allocates an arena of its own, up to eight per core, and each
/// keeps the memory its thread freed. `process` writes a batch's outputs from up to 32
/// threads (for their fsyncs, not for the cores), each building a document's JSON: their
/// arenas held a fifth of its peak memory (72 MB for a 20 MB file, 52 MB with one arena per
/// core, in the same time). One per core, at least two, as threads that compute contend for
/// no more than that; for every command, and unless the operator set glibc's own limit
/// (`MALLOC_ARENA_MAX`, or `arena_max` in `GLIBC_TUNABLES`), which is theirs to keep.
fn fewer_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let tuned = std::env::var_os("MALLOC_ARENA_MAX").is_some()
            || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("arena_max"));
        if tuned {
            return;
        }
        let arenas = x12gate::cores::available().max(2);
        // SAFETY: mallopt only sets a tunable of glibc's allocator; it is called first thing
        // in main, before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, i32::try_from(arenas).unwrap_or(i32::MAX));
        }
    }
}

fn main() -> ExitCode {
    fewer_arenas();
    // Crash points for tests, armed by FAILPOINTS (SPEC section 8); absent from normal builds.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() && args::wants_json_logs() => {
            say::JSON_LOGS.store(true, std::sync::atomic::Ordering::Relaxed);
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
    logs(&cli);
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(Failure::Operational(e)) if exit::is_closed_pipe(&e) => {
            ExitCode::from(exit::PIPE_CLOSED)
        }
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

/// The log lines on stderr: `RUST_LOG`'s filter, in the form `--log-format` asks for.
fn logs(cli: &Cli) {
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
            say::JSON_LOGS.store(true, std::sync::atomic::Ordering::Relaxed);
            logs.json().init()
        }
        LogFormat::Text => {
            use std::io::IsTerminal;
            logs.with_ansi(std::io::stderr().is_terminal()).init()
        }
    }
}

/// Where the configuration is when `--config` is not given.
const DEFAULT_CONFIG: &str = "partners.toml";

/// The configuration, read once for the whole invocation: the file `--config` names, or
/// `./partners.toml` when it exists; `None` when neither is there.
fn configuration(path: Option<&Path>) -> Result<Option<Config>, Failure> {
    let default = Path::new(DEFAULT_CONFIG);
    let path = match path {
        Some(p) => p,
        None if default.exists() => default,
        None => return Ok(None),
    };
    Config::load(path)
        .map(Some)
        .map_err(|e| Failure::Usage(e.into()))
}

/// The configuration of a command that cannot work without one (anything that uses the
/// registry or the partners): its absence is a usage error.
fn required(config: Option<Config>) -> Result<Config, Failure> {
    match config {
        Some(config) => Ok(config),
        // Loading the file that is not there says so in the words of every other
        // configuration error.
        None => Config::load(Path::new(DEFAULT_CONFIG)).map_err(|e| Failure::Usage(e.into())),
    }
}

/// One command, with its arguments: the commands that need no registry (parse, render,
/// validate) take only the limits, and work without a configuration file.
fn run(cli: Cli) -> Result<u8, Failure> {
    let config = configuration(cli.config.as_deref())?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let code = offline(cli.command, config, &mut out)?;
    out.flush()?;
    Ok(code)
}

type Out<'a> = std::io::BufWriter<std::io::StdoutLock<'a>>;

/// The commands that work without a configuration file; every other one is refused
/// without it ([`required`]).
fn offline(command: Command, config: Option<Config>, out: &mut Out<'_>) -> Result<u8, Failure> {
    use commands::inspect;
    let limits = config.as_ref().map_or_else(Limits::default, |c| c.limits);
    Ok(match command {
        Command::Parse { file, raw } => inspect::parse(&file, raw, config.as_ref(), out)?,
        Command::Render { file } => inspect::render(&file, limits, out)?,
        Command::Definitions { action } => {
            commands::definitions::run(action, config.as_ref(), out)?
        }
        Command::Validate {
            files,
            json,
            envelope,
        } => inspect::validate(&files, json, envelope, config.as_ref(), out)?,
        Command::Ack { file } => inspect::ack(&file, &required(config)?, out)?,
        command => gateway(command, required(config)?, out)?,
    })
}

/// The commands that run the gateway: processing, delivery, the watcher and the page.
fn gateway(command: Command, config: Config, out: &mut Out<'_>) -> Result<u8, Failure> {
    use commands::{deliveries, process, setup};
    Ok(match command {
        Command::Process {
            files,
            json,
            no_wait,
            no_deliver,
            window,
            repair_counters,
        } => {
            if repair_counters {
                setup::repair_counters(&config)?;
            }
            let args = process::ProcessArgs {
                files,
                json,
                no_wait,
                no_deliver,
                window,
            };
            process::process(&args, &config, out)?
        }
        Command::Deliver {
            drain,
            timeout,
            json,
        } => deliveries::deliver(&config, drain, timeout, json, out)?,
        Command::Send {
            files,
            partner,
            idempotency_key,
            check,
            timings,
            json,
        } => {
            let args = commands::outbound::SendArgs {
                files: &files,
                partner: partner.as_deref(),
                idempotency_key: idempotency_key.as_deref(),
                check,
                timings,
                json,
            };
            commands::outbound::send(&config, &args, out)?
        }
        Command::Sent {
            state,
            partner,
            since,
            unmatched,
            json,
        } => commands::outbound::sent(
            &config,
            state.as_deref(),
            partner.as_deref(),
            since.as_deref(),
            unmatched,
            json,
            out,
        )?,
        Command::Resend {
            key,
            new_numbers,
            json,
        } => commands::outbound::resend(&config, &key, new_numbers, json, out)?,
        Command::Deliveries {
            action,
            state,
            partner,
            json,
        } => deliveries::deliveries(
            &config,
            action,
            state.as_deref(),
            partner.as_deref(),
            json,
            out,
        )?,
        Command::Confirm {
            key,
            reference,
            force,
        } => deliveries::confirm(&config, &key, &reference, force, out)?,
        Command::Watch {
            poll,
            once,
            allow_actions,
            repair_counters,
        } => {
            if repair_counters {
                setup::repair_counters(&config)?;
            }
            process::watch(config, poll, once, allow_actions)?
        }
        Command::Serve {
            listen,
            allow_actions,
        } => process::serve(config, listen, allow_actions)?,
        command => records(command, &config, out)?,
    })
}

/// The commands over the registry's records: history, counters, set-up.
fn records(command: Command, config: &Config, out: &mut Out<'_>) -> Result<u8, Failure> {
    use commands::{registry, setup};
    Ok(match command {
        Command::History {
            partner,
            control_number,
            disposition,
            since,
            until,
            json,
        } => {
            let filter = registry::history_filter(
                config,
                partner,
                control_number,
                disposition,
                since.as_deref(),
                until.as_deref(),
            )?;
            registry::history(config, &filter, json, out)?
        }
        Command::Stats { json } => registry::stats(config, json, out)?,
        Command::Prune { files: true, apply } => registry::prune_files(config, apply, out)?,
        Command::Prune { .. } => registry::prune_keys(config, out)?,
        Command::Counter { action } => registry::counter(action, config, out)?,
        Command::Metrics => registry::metrics(config, out)?,
        Command::Backup { dest } => registry::backup(config, &dest, out)?,
        Command::Init {
            isa13_from,
            gs06_from,
        } => setup::init(config, isa13_from, gs06_from, out)?,
        Command::Check => setup::check(config, out)?,
        command => desk(command, config, out)?,
    })
}

/// The operator's desk: one interchange or document shown, reprocessed, released.
fn desk(command: Command, config: &Config, out: &mut Out<'_>) -> Result<u8, Failure> {
    use commands::{desk, documents};
    Ok(match command {
        Command::Show { key, json } => desk::show(config, &key, json, out)?,
        Command::Reprocess {
            keys,
            file,
            force,
            json,
        } => desk::reprocess(config, &keys, file.as_deref(), force, json, out)?,
        Command::Documents {
            action,
            held,
            waiting,
            all,
            key,
            interchange,
            json,
        } => documents::documents(
            config,
            action,
            &documents::Listing {
                held,
                waiting,
                all,
                key,
                interchange,
                json,
            },
            out,
        )?,
        Command::Scan {
            paths,
            json,
            backfill,
        } => documents::scan(config, &paths, json, backfill, out)?,
        Command::Claims { action, json } => desk::claims(config, action, json, out)?,
        Command::Rejected {
            action: RejectedAction::Resolve { target, note },
        } => desk::resolve_rejected(config, &target, note.as_deref(), out)?,
        // invariant: every command is matched by `offline`, `gateway`, `records` or here.
        _ => exit::USAGE,
    })
}
