//! The output model: where documents go (`[[destination]]`), how each destination is
//! reached and how hard it is tried, read and checked one key at a time.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::KeyProblem;
use crate::usage::Usage;

/// Where documents are delivered, as `[[destination]]` declares it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDestination {
    pub(super) name: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    path: Option<PathBuf>,
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    #[serde(default = "destination_defaults::timeout_ms")]
    timeout_ms: u64,
    #[serde(default = "destination_defaults::max_attempts")]
    max_attempts: u32,
    #[serde(default = "destination_defaults::max_age_hours")]
    max_age_hours: u32,
    #[serde(default)]
    result_ref: Option<String>,
    #[serde(default)]
    owner: Option<String>,
    #[serde(default = "destination_defaults::backoff_ms")]
    backoff_ms: u64,
    #[serde(default = "destination_defaults::backoff_max_ms")]
    backoff_max_ms: u64,
    #[serde(default = "destination_defaults::circuit_failures")]
    circuit_failures: u32,
    #[serde(default = "destination_defaults::circuit_cooldown_ms")]
    circuit_cooldown_ms: u64,
    #[serde(default = "destination_defaults::concurrency")]
    concurrency: usize,
    #[serde(default)]
    usage: Option<String>,
}

/// The defaults of a destination's settings (docs/delivery.md's table states what they add up to).
pub(crate) mod destination_defaults {
    pub fn timeout_ms() -> u64 {
        10_000
    }
    pub fn max_attempts() -> u32 {
        12
    }
    pub fn max_age_hours() -> u32 {
        72
    }
    pub fn backoff_ms() -> u64 {
        1_000
    }
    pub fn backoff_max_ms() -> u64 {
        300_000
    }
    pub fn circuit_failures() -> u32 {
        5
    }
    pub fn circuit_cooldown_ms() -> u64 {
        30_000
    }
    pub fn concurrency() -> usize {
        4
    }
}

/// A destination's documents: where they go and how hard to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub name: String,
    pub kind: DestinationKind,
    /// One attempt's limit (the request, or the command's run).
    pub timeout_ms: u64,
    /// After this many failed attempts a delivery is dead-lettered...
    pub max_attempts: u32,
    /// ...or once it was first queued this long ago.
    pub max_age_hours: u32,
    /// A JSON pointer into the answer's body: the business system's reference for the
    /// document (an order number), stored and reported to the senders of duplicates.
    pub result_ref: Option<String>,
    /// Who answers for its dead deliveries when the partner names no `contact`.
    pub owner: Option<String>,
    /// The upper bound of the first retry's delay (full jitter), doubled per attempt...
    pub backoff_ms: u64,
    /// ...up to this.
    pub backoff_max_ms: u64,
    /// Consecutive failures that open the circuit...
    pub circuit_failures: u32,
    /// ...for this long; then one probe per cool-down until one succeeds.
    pub circuit_cooldown_ms: u64,
    /// Requests in flight at once, per deliverer.
    pub concurrency: usize,
    /// Which documents it takes: production ones (the default), or only test ones (named
    /// by a partner's `test_destinations`).
    pub usage: Usage,
}

/// How a destination is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestinationKind {
    /// Document files in a folder: `out/` itself (`path` none, or `gateway.out`), or another
    /// folder, each written from the registry's copy of the document.
    Folder { path: Option<PathBuf> },
    /// A POST of the document's JSON.
    Http {
        url: String,
        headers: Vec<(String, HeaderValue)>,
    },
    /// A program given the document on stdin.
    Command { argv: Vec<String> },
}

/// A header's value: as written, or read from the environment when sent (`env:NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue {
    Literal(String),
    Env(String),
}

/// Requests in flight at once to one destination, per deliverer: each is a thread.
const MAX_CONCURRENCY: usize = 64;

/// Headers x12gate sets itself: a destination's own value would send every document under
/// one key, or with a wrong length.
const RESERVED_HEADERS: &[&str] = &[
    "idempotency-key",
    "x-correlation-id",
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
];

/// Headers that carry secrets: their values must come from the environment.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
];

/// The name of the folder destination every configuration has: the gateway's `out/` (and
/// `out/test/` for test documents), where a partner's documents go when it names no
/// destination. A declared name cannot be it (a `/` is not allowed in one).
pub const OUT: &str = "out/";

impl Destination {
    /// Whether it is `out/` itself: [`OUT`], or a declared folder destination without a
    /// `path` (or with `gateway.out`), which stands for it.
    pub fn is_out(&self, out: &Path) -> bool {
        matches!(&self.kind, DestinationKind::Folder { path } if path.as_deref().is_none_or(|p| p == out))
    }

    /// [`OUT`], with every setting at its default.
    pub(super) fn out() -> Destination {
        use destination_defaults as d;
        Destination {
            name: OUT.to_string(),
            kind: DestinationKind::Folder { path: None },
            timeout_ms: d::timeout_ms(),
            max_attempts: d::max_attempts(),
            max_age_hours: d::max_age_hours(),
            result_ref: None,
            owner: None,
            backoff_ms: d::backoff_ms(),
            backoff_max_ms: d::backoff_max_ms(),
            circuit_failures: d::circuit_failures(),
            circuit_cooldown_ms: d::circuit_cooldown_ms(),
            concurrency: d::concurrency(),
            usage: Usage::Production,
        }
    }
}

/// The longest `timeout_ms` of a destination: a day.
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;

/// Reads one `[[destination]]`, a paragraph per key as `partner` is read; a relative
/// folder resolves against `base`.
pub(super) fn destination(raw: RawDestination, base: &Path) -> Result<Destination, KeyProblem> {
    check_name(&raw.name)?;
    let kind = kind(&raw, base)?;
    if let Some(p) = &raw.result_ref {
        if !p.starts_with('/') {
            return Err(KeyProblem::new(
                "result_ref",
                format!("{p:?}: expected a JSON pointer such as \"/order_id\""),
            ));
        }
    }
    check_counts(&raw)?;
    let usage = usage(raw.usage.as_deref(), &kind)?;
    if raw.concurrency > MAX_CONCURRENCY {
        return Err(KeyProblem::new(
            "concurrency",
            format!("{}: at most {MAX_CONCURRENCY}", raw.concurrency),
        ));
    }
    Ok(Destination {
        name: raw.name,
        kind,
        timeout_ms: raw.timeout_ms,
        max_attempts: raw.max_attempts,
        max_age_hours: raw.max_age_hours,
        result_ref: raw.result_ref,
        owner: raw.owner,
        backoff_ms: raw.backoff_ms,
        backoff_max_ms: raw.backoff_max_ms.max(raw.backoff_ms),
        circuit_failures: raw.circuit_failures,
        circuit_cooldown_ms: raw.circuit_cooldown_ms,
        concurrency: raw.concurrency,
        usage,
    })
}

fn check_name(name: &str) -> Result<(), KeyProblem> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.';
    if name.is_empty() || name.len() > 64 || !name.bytes().all(allowed) {
        return Err(KeyProblem::new(
            "name",
            "expected 1 to 64 letters, digits, '-', '_' or '.'",
        ));
    }
    Ok(())
}

/// How the destination is reached, refusing the keys its kind does not use.
fn kind(raw: &RawDestination, base: &Path) -> Result<DestinationKind, KeyProblem> {
    let unused = |key: &str, given: bool, kind: &str| {
        if given {
            Err(KeyProblem::new(
                key,
                format!("not used by kind = \"{kind}\""),
            ))
        } else {
            Ok(())
        }
    };
    match raw.kind.as_deref().unwrap_or("folder") {
        "folder" => {
            unused("url", raw.url.is_some(), "folder")?;
            unused("command", raw.command.is_some(), "folder")?;
            unused("headers", !raw.headers.is_empty(), "folder")?;
            Ok(DestinationKind::Folder {
                path: raw
                    .path
                    .clone()
                    .map(|p| if p.is_absolute() { p } else { base.join(p) }),
            })
        }
        "http" => {
            unused("path", raw.path.is_some(), "http")?;
            unused("command", raw.command.is_some(), "http")?;
            let url = raw
                .url
                .clone()
                .ok_or_else(|| KeyProblem::new("url", "required with kind = \"http\""))?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(KeyProblem::new(
                    "url",
                    format!("{url:?}: expected an http:// or https:// address"),
                ));
            }
            let headers = raw
                .headers
                .iter()
                .map(|(name, value)| header(name, value))
                .collect::<Result<_, _>>()?;
            Ok(DestinationKind::Http { url, headers })
        }
        "command" => {
            unused("path", raw.path.is_some(), "command")?;
            unused("url", raw.url.is_some(), "command")?;
            unused("headers", !raw.headers.is_empty(), "command")?;
            let argv = raw.command.clone().unwrap_or_default();
            if argv.first().is_none_or(String::is_empty) {
                return Err(KeyProblem::new(
                    "command",
                    "required with kind = \"command\": the program and its arguments, as a list",
                ));
            }
            Ok(DestinationKind::Command { argv })
        }
        other => Err(KeyProblem::new(
            "kind",
            format!("{other:?}: expected \"folder\", \"http\" or \"command\""),
        )),
    }
}

/// One of an HTTP destination's `headers`: never one x12gate sets, never a secret in clear.
fn header(name: &str, value: &str) -> Result<(String, HeaderValue), KeyProblem> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
    {
        return Err(KeyProblem::new(
            "headers",
            format!("{name:?}: not a header name"),
        ));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_HEADERS.contains(&lower.as_str()) {
        return Err(KeyProblem::new(
            "headers",
            format!("{name}: x12gate sets this header itself (the document's key, its correlation id, its length)"),
        ));
    }
    let value = match value.strip_prefix("env:") {
        Some(var) if !var.is_empty() => HeaderValue::Env(var.to_string()),
        _ if SECRET_HEADERS.contains(&lower.as_str()) => {
            return Err(KeyProblem::new(
                "headers",
                format!("{name}: a secret is never written in this file; give \"env:VARIABLE\" and set the variable in the gateway's environment"),
            ))
        }
        _ => HeaderValue::Literal(value.to_string()),
    };
    Ok((name.to_string(), value))
}

/// Counts and times that must be 1 or more, and a timeout whose deadline can be computed.
fn check_counts(raw: &RawDestination) -> Result<(), KeyProblem> {
    for (key, value) in [
        ("timeout_ms", raw.timeout_ms),
        ("max_attempts", u64::from(raw.max_attempts)),
        ("circuit_failures", u64::from(raw.circuit_failures)),
        ("concurrency", raw.concurrency as u64),
        ("max_age_hours", u64::from(raw.max_age_hours)),
    ] {
        if value == 0 {
            return Err(KeyProblem::new(key, "expected 1 or more"));
        }
    }
    // A deadline past the end of time cannot be computed (it panicked).
    if raw.timeout_ms > MAX_TIMEOUT_MS {
        return Err(KeyProblem::new(
            "timeout_ms",
            format!("expected at most {MAX_TIMEOUT_MS} (a day)"),
        ));
    }
    Ok(())
}

/// Which documents it takes; a test folder destination needs a folder of its own.
fn usage(written: Option<&str>, kind: &DestinationKind) -> Result<Usage, KeyProblem> {
    let usage = match written {
        None | Some("production") => Usage::Production,
        Some("test") => Usage::Test,
        Some(other) => {
            return Err(KeyProblem::new(
                "usage",
                format!("{other:?}: expected \"production\" or \"test\""),
            ))
        }
    };
    if usage == Usage::Test && matches!(kind, DestinationKind::Folder { path } if path.is_none()) {
        return Err(KeyProblem::new(
            "usage",
            "a test folder destination needs a `path` of its own: `out/` is production's (test documents are written in out/test/ in any case)",
        ));
    }
    Ok(usage)
}
