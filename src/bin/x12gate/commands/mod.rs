//! One function per command: it takes the parsed arguments and the configuration, calls the
//! library, and prints; the decisions are the library's.

pub mod definitions;
pub mod deliveries;
pub mod desk;
pub mod documents;
pub mod inspect;
pub mod outbound;
pub mod process;
pub mod registry;
pub mod setup;

use std::path::Path;

use x12gate::config::Config;
use x12gate::x12::Limits;

use crate::exit::{registry_failure, Failure};

/// An input file within the configured size: one that does not exist (or is not a regular
/// file) is a usage mistake, any other failure to read it operational.
fn read(path: &Path, limits: &Limits) -> Result<Vec<u8>, Failure> {
    x12gate::input::read(path, limits.max_file_bytes).map_err(input_failure)
}

/// An input file within the configured size, opened for reading in pieces.
fn open(path: &Path, limits: &Limits) -> Result<x12gate::input::Reader, Failure> {
    x12gate::input::Reader::open(path, *limits, x12gate::input::WINDOW).map_err(input_failure)
}

/// A file that does not exist (or is not a regular file) is a usage mistake, any other
/// failure to read it operational.
fn input_failure(e: x12gate::input::InputError) -> Failure {
    if e.is_not_found() {
        Failure::Usage(e.into())
    } else {
        Failure::Operational(e.into())
    }
}

/// The existing registry (history, stats, prune, claims, counter): never created here.
/// A partner as typed on the command line (`QUAL:ID`, `ID` or its name): its `QUAL:ID`, or
/// exit 2 naming the closest configured partner.
fn partner_arg(config: &Config, typed: &str) -> Result<String, Failure> {
    config
        .partner_named(typed)
        .map(x12gate::config::Partner::key)
        .map_err(|e| Failure::Usage(e.into()))
}

/// The document keys a key as typed names: the key whole, without its sender
/// (`850:PO-4471:00:`), or the document's id alone (`PO-4471`); exit 2 when it names none.
fn document_keys(
    registry: &x12gate::registry::Registry,
    typed: &str,
) -> Result<Vec<String>, Failure> {
    use x12gate::registry::Resolved;
    match registry.resolve_document(typed).map_err(registry_failure)? {
        Resolved::One(key) => Ok(vec![key]),
        Resolved::Several(keys) => Ok(keys),
        Resolved::Unknown => Err(Failure::Usage(anyhow::anyhow!(
            "{}: no document has this key, key without its sender (SET:DOCUMENT:EVENT:VERSION) \
             or document id (x12gate documents --all lists them)",
            x12gate::text::printable(typed)
        ))),
    }
}

/// The one document key a key as typed names, for a command that acts on it; exit 2 when it
/// names none or several (listed).
fn document_key(registry: &x12gate::registry::Registry, typed: &str) -> Result<String, Failure> {
    let mut keys = document_keys(registry, typed)?;
    match keys.len() {
        1 => Ok(keys.remove(0)),
        _ => Err(Failure::Usage(anyhow::anyhow!(
            "{}: names several documents ({}); give the whole key",
            x12gate::text::printable(typed),
            keys.iter()
                .map(|k| x12gate::text::printable(k).into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The interchange key a key as typed names (`QUAL:ID:ISA13`, `ID:ISA13`, the number
/// unpadded); exit 2 when it names none or several.
fn interchange_key(registry: &x12gate::registry::Registry, typed: &str) -> Result<String, Failure> {
    x12gate::desk::resolve(registry, typed).map_err(|e| Failure::Usage(e.into()))
}

/// A partner to list by: as [`partner_arg`], except that a `QUAL:ID` no partner configures
/// is taken as written, said so on stderr: a sender removed from the configuration (or never
/// in it) still has its history.
fn partner_filter(config: &Config, typed: &str) -> Result<String, Failure> {
    match config.partner_named(typed) {
        Ok(p) => Ok(p.key()),
        Err(e) => match typed.trim().split_once(':') {
            Some((q, id)) if !q.trim().is_empty() && !id.trim().is_empty() => {
                let key = format!("{}:{}", q.trim(), id.trim());
                say!(
                    "INFO",
                    "x12gate: {} is not a configured partner: listing what the registry holds under it",
                    x12gate::text::printable(&key)
                );
                Ok(key)
            }
            _ => Err(Failure::Usage(e.into())),
        },
    }
}

fn open_registry(config: &Config) -> Result<x12gate::registry::Registry, Failure> {
    x12gate::registry::Registry::open(
        &config.gateway.database,
        x12gate::setup::identity(&config.gateway),
    )
    .map_err(registry_failure)
}

/// The transaction-set definitions in force: the built-in ones, with the guides the
/// configuration's partners name (`definitions`) layered over them; a failure to load them
/// stops the command rather than letting it check less than it says (a guide that does not
/// load is a configuration error, exit 2, naming its file and line).
fn definitions(config: Option<&Config>) -> Result<&'static x12gate::schema::Schemas, Failure> {
    let builtin =
        x12gate::schema::builtin().map_err(|e| Failure::Operational(anyhow::anyhow!("{e}")))?;
    match config.map(x12gate::guides::for_config).transpose() {
        Ok(Some(Some(layered))) => {
            // Loaded once per process and read until it exits, as the built-in ones are.
            Ok(Box::leak(Box::new(layered)))
        }
        Ok(_) => Ok(builtin),
        Err(e) => Err(Failure::Usage(e.into())),
    }
}

/// The checks that come before any work; every problem on its own line, exit 2.
fn preflight(config: &Config) -> Result<(), Failure> {
    let mut problems = x12gate::setup::check(config);
    if !problems.iter().any(|p| p.key == "gateway.database") {
        problems.extend(x12gate::setup::counter_problems(config));
    }
    if problems.is_empty() {
        return Ok(());
    }
    for p in &problems {
        say!("ERROR", "x12gate: {}: {p}", config.path.display());
    }
    // A registry that cannot be reached (a database server down) is an operational
    // failure, exit 1, for a supervisor to retry; not a mistake in the file.
    if problems.iter().all(|p| p.operational) {
        return Err(Failure::Operational(anyhow::anyhow!(
            "the registry cannot be reached; nothing was processed"
        )));
    }
    Err(Failure::Usage(anyhow::anyhow!(
        "{} problem(s) in {}; nothing was processed",
        problems.len(),
        config.path.display()
    )))
}

/// A registry time (milliseconds since the epoch) in local time, as `show` and `claims`
/// print it.
fn local_time(ms: i64) -> String {
    x12gate::time::local_rfc3339(ms)
}
