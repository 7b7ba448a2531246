//! The `x12gate` binary: arguments in, exit code out. Every decision lives in the library.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use x12gate::config::Config;
use x12gate::x12::Limits;

/// Exit codes of the command line (SPEC section 6).
mod exit {
    pub const OK: u8 = 0;
    pub const OPERATIONAL: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const FINDINGS: u8 = 3;
}

#[derive(Parser)]
#[command(name = "x12gate", version, about = "Inbound ANSI X12 gateway")]
struct Cli {
    /// Configuration file [default: ./partners.toml, used when present]
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// X12 to JSON on stdout (lossless generic form); no registry
    Parse { file: PathBuf },
    /// The JSON of `parse` back to X12 on stdout
    Render { file: PathBuf },
    /// Print the TA1/997/999 that `process` would send for FILE; writes nothing
    Ack { file: PathBuf },
    /// Outbound control-number counters (our ISA13 and GS06) per partner
    Counter {
        #[command(subcommand)]
        action: CounterAction,
    },
    /// Envelope diagnostics with byte offset, segment position and X12 code; no registry
    Validate {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// One JSON object per finding per line
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum CounterAction {
    /// Print the last numbers handed out to PARTNER (QUAL:ID)
    Show { partner: String },
    /// Take the next COUNT numbers and print them, one per line
    Next {
        partner: String,
        #[arg(long, value_enum, default_value = "isa13")]
        kind: CounterKind,
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Set a counter, so that the next number handed out is VALUE + 1
    Set {
        partner: String,
        #[arg(value_enum)]
        kind: CounterKind,
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
    use x12gate::registry::{ControlNumbers, Counter, Registry};
    let op = |e: x12gate::registry::RegistryError| Failure::Operational(e.into());
    let registry = Registry::open(&config.gateway.database).map_err(op)?;
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
                    "{}",
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
            registry
                .set_control_number(&partner, kind.into(), value)
                .map_err(op)?;
        }
    }
    Ok(exit::OK)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(Failure::Usage(e)) => {
            eprintln!("x12gate: {e:#}");
            ExitCode::from(exit::USAGE)
        }
        Err(Failure::Operational(e)) => {
            eprintln!("x12gate: {e:#}");
            ExitCode::from(exit::OPERATIONAL)
        }
    }
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
                eprintln!(
                    "{}: {e}; nothing can be acknowledged for it",
                    file.display()
                );
                code = exit::FINDINGS;
                continue;
            }
        };
        let decision = x12gate::pipeline::decide(&ic, config);
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
        eprintln!(
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

fn run(cli: Cli) -> Result<u8, Failure> {
    let limits = limits(cli.config.as_deref())?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let code = match cli.command {
        Command::Parse { file } => {
            let input = read(&file, &limits)?;
            match x12gate::translate::write_document(&input, limits, &mut out) {
                Ok(()) => exit::OK,
                Err(x12gate::translate::ParseError::Io(e)) => return Err(e.into()),
                Err(e) => {
                    out.flush()?;
                    eprintln!("{}: {e}", file.display());
                    exit::FINDINGS
                }
            }
        }
        Command::Render { file } => {
            let json = std::fs::read(&file)
                .with_context(|| file.display().to_string())
                .map_err(Failure::Usage)?;
            match x12gate::translate::render_document(&json, &mut out) {
                Ok(()) => exit::OK,
                Err(x12gate::translate::RenderError::Io(e)) => return Err(e.into()),
                Err(e) => {
                    eprintln!("{}: {e}", file.display());
                    exit::USAGE
                }
            }
        }
        Command::Ack { file } => {
            let config = config(cli.config.as_deref())?;
            let input = read(&file, &config.limits)?;
            ack(&file, &input, &config, &mut out)?
        }
        Command::Counter { action } => counter(action, &config(cli.config.as_deref())?, &mut out)?,
        Command::Validate { files, json } => {
            let mut any = false;
            for file in &files {
                let findings = match read(file, &limits) {
                    Ok(input) => x12gate::validate::file(&input, limits),
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
                        eprintln!("{}: clean", file.display());
                    } else {
                        eprintln!(
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
