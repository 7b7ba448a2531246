//! partners.toml: a serde mirror of the file, then a validated [`Config`] with absolute paths.
//!
//! Unknown keys are errors (a typo in `duplicate_window_days` must not silently mean 30), and
//! every error names the file, the line and what was expected ([`ConfigError`], `error`).
//! Here: the file as a whole and `[gateway]`; `partner` one trading partner, `output` the
//! destinations documents go to, `database` where the registry is, `places` where each key
//! is written. A leaf over the syntax layer: the configuration names the words other layers
//! speak (the JSON [`Form`], [`Database`], [`crate::usage::Usage`]) so that none of them
//! has to be imported from above.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::x12::Limits;

mod database;
mod error;
mod names;
mod output;
mod partner;
mod places;

use database::database;
pub use database::{Database, Postgres};
pub use error::{ConfigError, KeyProblem, Problem};
pub use names::PartnerName;
#[cfg(test)]
pub(crate) use output::destination_defaults;
use output::{destination, RawDestination};
pub use output::{Destination, DestinationKind, HeaderValue, MAX_TIMEOUT_MS, OUT};
use partner::{partner, RawPartner};
pub use partner::{
    AckKind, DuplicateDocuments, Form, InterchangeScope, Layout, OutboundDelimiters, Partner,
    PartnerAck, PartnerChecks, PartnerDuplicates, PartnerOutput, PartnerRetention, Severity,
    Ta1Policy, Validation, DEFAULT_ORDER_WAIT_HOURS,
};
pub use places::Place;
use places::Places;

/// Documents decided in one transaction and written in one round of fsyncs: a run ends at
/// the first set boundary once it holds this many (a set is never split between runs, so
/// one of many claims makes its run that much longer).
pub const RUN_DOCUMENTS: usize = 2_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownPartners {
    Reject,
    Accept,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateway {
    id_qualifier: String,
    id: String,
    #[serde(default = "defaults::inbox")]
    inbox: PathBuf,
    #[serde(default = "defaults::outbox")]
    outbox: PathBuf,
    #[serde(default = "defaults::out")]
    out: PathBuf,
    #[serde(default = "defaults::archive")]
    archive: PathBuf,
    #[serde(default = "defaults::rejected")]
    rejected: PathBuf,
    #[serde(default = "defaults::database")]
    database: PathBuf,
    #[serde(default)]
    database_password_env: Option<String>,
    #[serde(default)]
    database_ca: Option<PathBuf>,
    #[serde(default = "defaults::work")]
    work: PathBuf,
    #[serde(default = "defaults::lease_seconds")]
    lease_seconds: u64,
    #[serde(default = "defaults::unknown_partners")]
    unknown_partners: UnknownPartners,
    #[serde(default)]
    workers: Option<usize>,
    #[serde(default = "defaults::settle_ms")]
    settle_ms: u64,
    #[serde(default = "defaults::poll_ms")]
    poll_ms: u64,
    #[serde(default = "defaults::summary_seconds")]
    summary_seconds: u64,
    #[serde(default = "defaults::retry_max_seconds")]
    retry_max_seconds: u64,
    #[serde(default)]
    metrics: Option<String>,
    #[serde(default = "defaults::documents_per_run")]
    documents_per_run: usize,
    #[serde(default)]
    outbound_inbox: Option<PathBuf>,
    #[serde(default)]
    identity: Vec<RawIdentity>,
}

/// `[[gateway.identity]]`: another ISA05/ISA06 of ours.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    name: String,
    id_qualifier: String,
    id: String,
}

/// One of our interchange ids (the routing rules read them, so the type is theirs).
pub use crate::validate::OurIdentity;

mod defaults {
    use super::UnknownPartners;
    use std::path::PathBuf;
    pub fn inbox() -> PathBuf {
        "data/inbox".into()
    }
    pub fn outbox() -> PathBuf {
        "data/outbox".into()
    }
    pub fn out() -> PathBuf {
        "data/out".into()
    }
    pub fn archive() -> PathBuf {
        "data/archive".into()
    }
    pub fn rejected() -> PathBuf {
        "data/rejected".into()
    }
    pub fn database() -> PathBuf {
        "data/x12gate.db".into()
    }
    pub fn work() -> PathBuf {
        "data/work".into()
    }
    pub fn lease_seconds() -> u64 {
        300
    }
    pub fn unknown_partners() -> UnknownPartners {
        UnknownPartners::Reject
    }
    pub fn settle_ms() -> u64 {
        1000
    }
    pub fn poll_ms() -> u64 {
        1000
    }
    pub fn documents_per_run() -> usize {
        super::RUN_DOCUMENTS
    }
    pub fn summary_seconds() -> u64 {
        60
    }
    pub fn retry_max_seconds() -> u64 {
        300
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    gateway: RawGateway,
    #[serde(default)]
    limits: Limits,
    #[serde(default, rename = "partner")]
    partners: Vec<toml::Spanned<RawPartner>>,
    #[serde(default, rename = "destination")]
    destinations: Vec<toml::Spanned<RawDestination>>,
}

/// A TOML error as an operator reads it: the expected type in words ("a whole number of
/// seconds", not `u64`), and a missing `[gateway]` said as such rather than pointed at the
/// first line of the file.
fn in_words(text: &str, e: &toml::de::Error) -> String {
    if e.message().contains("missing field `gateway`") {
        return "no [gateway] table: the file needs at least [gateway] with id_qualifier and id (our ISA05/ISA06)".into();
    }
    let key = e
        .span()
        .and_then(|span| text.get(..span.start))
        .and_then(|before| before.lines().last())
        .and_then(|line| line.split_once('='))
        .map(|(key, _)| key.trim().to_string())
        .unwrap_or_default();
    let unit = ["seconds", "ms", "days", "bytes", "len"]
        .into_iter()
        .find(|u| key.ends_with(&format!("_{u}")))
        .map(|u| match u {
            "ms" => " of milliseconds",
            "len" => " of bytes",
            "seconds" => " of seconds",
            "days" => " of days",
            _ => " of bytes",
        })
        .unwrap_or("");
    let whole = format!("a whole number{unit}, 0 or more");
    let mut message = e.to_string();
    for (rust, words) in [
        ("expected u64", format!("expected {whole}")),
        ("expected u32", format!("expected {whole}")),
        ("expected usize", format!("expected {whole}")),
        ("expected u16", format!("expected {whole}")),
        ("expected u8", format!("expected {whole}")),
        ("expected a boolean", "expected true or false".to_string()),
    ] {
        message = message.replace(rust, &words);
    }
    if !key.is_empty() && e.message().contains("invalid") {
        message = format!("key `{key}`: {message}");
    }
    message
}

/// The gateway's own identity and folders, all paths absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gateway {
    pub id_qualifier: String,
    pub id: String,
    pub inbox: PathBuf,
    pub outbox: PathBuf,
    pub out: PathBuf,
    /// `out/test/`: the files of test interchanges (ISA15 `T`, `I`), where no reader of
    /// `out/` takes them for production.
    pub test_out: PathBuf,
    pub archive: PathBuf,
    pub rejected: PathBuf,
    /// The registry: an SQLite file, or a PostgreSQL database shared by several nodes.
    pub database: Database,
    /// Where `watch` moves an inbox file before reading it (one folder per watcher process);
    /// on the inbox's file system, never inside the inbox.
    pub work: PathBuf,
    pub lease_seconds: u64,
    pub unknown_partners: UnknownPartners,
    /// Files processed at once by `watch` (default: the number of cores).
    pub workers: usize,
    /// How long a file written in place must keep its size and mtime before `watch` takes it.
    pub settle_ms: u64,
    /// Rescan interval of `watch` (the only source of events with `--poll`).
    pub poll_ms: u64,
    /// Interval of `watch`'s one-line summary.
    pub summary_seconds: u64,
    /// Upper bound of the retry backoff after an operational failure.
    pub retry_max_seconds: u64,
    /// Where `watch` serves `/metrics` and `/healthz` (off when `None`).
    pub metrics: Option<std::net::SocketAddr>,
    /// How many business documents of an interchange are decided in one transaction and
    /// written in one round of fsyncs: what `process` holds of a large interchange's
    /// documents at a time.
    pub documents_per_run: usize,
    /// Where an ERP that can only drop files puts our documents to send (`watch` sends
    /// them, [`crate::send`]); none: no such folder.
    pub outbound_inbox: Option<PathBuf>,
    /// Our interchange ids: `default` (`id_qualifier`, `id` above) first, then each
    /// `[[gateway.identity]]`.
    pub identities: Vec<OurIdentity>,
}

impl Gateway {
    /// The identity of ours named `name`.
    pub fn identity(&self, name: &str) -> Option<&OurIdentity> {
        self.identities.iter().find(|i| i.name == name)
    }

    /// The identity of ours an interchange addressed to ISA07 `qualifier`, ISA08 `id`
    /// (trimmed) is for, if it is one of ours.
    pub fn addressed(&self, qualifier: &str, id: &str) -> Option<&OurIdentity> {
        self.identities
            .iter()
            .find(|i| i.id_qualifier == qualifier && i.id == id)
    }

    /// The ISA05/ISA06 we are to `partner`: its `identity`'s, else `[gateway]`'s.
    pub fn for_partner(&self, partner: &Partner) -> (&str, &str) {
        partner
            .outbound
            .identity
            .as_deref()
            .and_then(|n| self.identity(n))
            .map_or((self.id_qualifier.as_str(), self.id.as_str()), |i| {
                (i.id_qualifier.as_str(), i.id.as_str())
            })
    }
}

/// `[gateway]`, its folders made absolute by `abs`.
/// `default` and each `[[gateway.identity]]`, checked: 2-character qualifiers, 1 to 15
/// character ids, names and ids each declared once.
fn identities(
    qualifier: &str,
    id: &str,
    more: Vec<RawIdentity>,
) -> Result<Vec<OurIdentity>, Problem> {
    let mut all = vec![OurIdentity {
        name: "default".into(),
        id_qualifier: qualifier.to_string(),
        id: id.to_string(),
    }];
    for i in more {
        let bad = |why: String| Problem::Gateway {
            key: "identity",
            value: Some(i.name.clone()),
            why,
        };
        if i.id_qualifier.len() != 2
            || i.id.trim().is_empty()
            || i.id.len() > 15
            || i.id != i.id.trim()
        {
            return Err(bad(format!(
                "{}:{}: expected a 2-character id_qualifier and an id of 1 to 15 characters without padding (ISA05/ISA06)",
                i.id_qualifier, i.id
            )));
        }
        if let Some(o) = all
            .iter()
            .find(|o| o.name == i.name || (o.id_qualifier == i.id_qualifier && o.id == i.id))
        {
            return Err(bad(format!(
                "declared already as {} ({}:{})",
                o.name, o.id_qualifier, o.id
            )));
        }
        all.push(OurIdentity {
            name: i.name,
            id_qualifier: i.id_qualifier,
            id: i.id,
        });
    }
    Ok(all)
}

fn gateway(g: RawGateway, abs: &dyn Fn(PathBuf) -> PathBuf) -> Result<Gateway, Problem> {
    if g.id.trim().is_empty() || g.id.len() > 15 {
        return Err(Problem::Gateway {
            key: "id",
            value: Some(g.id),
            why: "expected 1 to 15 characters (it becomes ISA06/ISA08)".into(),
        });
    }
    if g.id_qualifier.len() != 2 {
        return Err(Problem::Gateway {
            key: "id_qualifier",
            value: Some(g.id_qualifier),
            why: "expected 2 characters (ISA05/ISA07)".into(),
        });
    }
    let identities = identities(&g.id_qualifier, &g.id, g.identity)?;
    let (inbox, work) = (abs(g.inbox), abs(g.work));
    let database = database(g.database, g.database_password_env, g.database_ca, abs)?;
    let metrics = match g.metrics {
        None => None,
        Some(a) => Some(
            a.parse::<std::net::SocketAddr>()
                .map_err(|e| Problem::Gateway {
                    key: "metrics",
                    why: format!("{e}; expected an address and port such as \"127.0.0.1:9101\""),
                    value: Some(a.clone()),
                })?,
        ),
    };
    Ok(Gateway {
        id_qualifier: g.id_qualifier,
        id: g.id,
        inbox,
        work,
        outbox: abs(g.outbox),
        test_out: abs(g.out.clone()).join("test"),
        out: abs(g.out),
        archive: abs(g.archive),
        rejected: abs(g.rejected),
        database,
        lease_seconds: g.lease_seconds,
        unknown_partners: g.unknown_partners,
        workers: g.workers.filter(|w| *w > 0).unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
        }),
        settle_ms: g.settle_ms,
        poll_ms: g.poll_ms.max(10),
        summary_seconds: g.summary_seconds,
        documents_per_run: g.documents_per_run.max(1),
        retry_max_seconds: g.retry_max_seconds.max(1),
        metrics,
        outbound_inbox: g.outbound_inbox.map(abs),
        identities,
    })
}

/// Every `[[destination]]`, each named once; a test folder destination is never `out`.
fn destinations(
    raw: Vec<toml::Spanned<RawDestination>>,
    text: &str,
    base: &Path,
    out: &Path,
) -> Result<Vec<Destination>, Problem> {
    let mut destinations: Vec<Destination> = Vec::new();
    for spanned in raw {
        let line = Place::of(text, spanned.span().start).line;
        let raw = spanned.into_inner();
        let name = raw.name.clone();
        let refused = |problem: KeyProblem| Problem::Destination {
            line,
            destination: name.clone(),
            problem,
        };
        let d = destination(raw, base).map_err(refused)?;
        if destinations.iter().any(|e| e.name == d.name) {
            return Err(Problem::DestinationTwice {
                line,
                destination: d.name,
            });
        }
        if d.usage == crate::usage::Usage::Test && d.is_out(out) {
            return Err(refused(KeyProblem::new(
                "path",
                format!("{} is gateway.out, production's folder; a test folder destination needs a folder of its own (test documents are written in out/test/ in any case)", out.display()),
            )));
        }
        destinations.push(d);
    }
    Ok(destinations)
}

/// The destinations partner `p` names exist, production ones for its documents and test
/// ones for its test documents.
fn check_destinations(p: &Partner, destinations: &[Destination]) -> Result<(), KeyProblem> {
    use crate::usage::Usage;
    let named = p
        .output
        .destination
        .iter()
        .map(|n| ("destination".to_string(), n))
        .chain(
            p.output
                .destinations
                .iter()
                .map(|(set, n)| (format!("destinations.{set}"), n)),
        );
    for (key, name) in named {
        match destinations.iter().find(|d| &d.name == name) {
            None => {
                return Err(KeyProblem::new(
                    &key,
                    format!("no [[destination]] is named {name:?}"),
                ))
            }
            Some(d) if d.usage == Usage::Test => {
                return Err(KeyProblem::new(
                    &key,
                    format!("{name:?} is a test destination (usage = \"test\"): production documents never go there; name it in `test_destinations`"),
                ))
            }
            Some(_) => {}
        }
    }
    for name in &p.output.test_destinations {
        match destinations.iter().find(|d| &d.name == name) {
            None => {
                return Err(KeyProblem::new(
                    "test_destinations",
                    format!("no [[destination]] is named {name:?}"),
                ))
            }
            Some(d) if d.usage != Usage::Test => {
                return Err(KeyProblem::new(
                    "test_destinations",
                    format!("{name:?} is a production destination; a test destination says usage = \"test\" (test documents never go to production)"),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A loaded, checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub path: PathBuf,
    pub gateway: Gateway,
    pub limits: Limits,
    pub partners: Vec<Partner>,
    pub destinations: Vec<Destination>,
    /// [`OUT`]: the folder destination of the partners (and sets) that name none.
    pub out_destination: Destination,
    /// Where each key is written, so that later checks can name a key's line.
    places: Places,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            cause: source,
        })?;
        Self::from_str(&text, path)
    }

    /// Parses `text` as if read from `path`; relative paths resolve against `path`'s folder.
    pub fn from_str(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let invalid = |problem: Problem| ConfigError::Invalid {
            path: path.to_path_buf(),
            problem,
        };
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| invalid(Problem::Toml(in_words(text, &e))))?;
        let base = std::path::absolute(path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let abs = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let gateway = gateway(raw.gateway, &abs).map_err(invalid)?;
        let destinations =
            destinations(raw.destinations, text, &base, &gateway.out).map_err(invalid)?;
        let mut partners: Vec<Partner> = Vec::new();
        for spanned in raw.partners {
            let line = Place::of(text, spanned.span().start).line;
            let raw = spanned.into_inner();
            let name = raw.name.clone();
            let refused = |problem: KeyProblem| {
                invalid(Problem::Partner {
                    line,
                    partner: name.clone(),
                    problem,
                })
            };
            let mut p = partner(raw).map_err(refused)?;
            p.checks.definitions = p.checks.definitions.take().map(abs);
            p.outbound.folder = p.outbound.folder.take().map(abs);
            check_destinations(&p, &destinations).map_err(refused)?;
            if let Some(name) = &p.outbound.identity {
                if gateway.identity(name).is_none() {
                    let names: Vec<&str> =
                        gateway.identities.iter().map(|i| i.name.as_str()).collect();
                    return Err(refused(KeyProblem::new(
                        "identity",
                        format!(
                            "{name:?}: no [[gateway.identity]] has this name (known: {})",
                            names.join(", ")
                        ),
                    )));
                }
            }
            if let Some(first) = partners.iter().find(|q| q.key() == p.key()) {
                return Err(refused(KeyProblem::new(
                    "id",
                    format!(
                        "{} is already declared by partner {:?}",
                        p.key(),
                        first.name
                    ),
                )));
            }
            partners.push(p);
        }
        Ok(Config {
            places: Places::read(text),
            path: path.to_path_buf(),
            gateway,
            limits: raw.limits,
            partners,
            destinations,
            out_destination: Destination::out(),
        })
    }

    /// The value `key` has in table `table` as the file writes it (before defaults and
    /// clamping), for checks that must see what the operator wrote.
    pub fn written(&self, table: &str, key: &str) -> Option<toml::Value> {
        self.places.key(table, key).map(|(_, value)| value.clone())
    }

    /// Where `key` is written in table `table` (`gateway`, `limits`).
    pub fn place_of(&self, table: &str, key: &str) -> Option<Place> {
        self.places.key(table, key).map(|(place, _)| *place)
    }

    /// The 1-based line that sets `key` in table `table` (`gateway`, `limits`).
    pub fn line_of(&self, table: &str, key: &str) -> Option<usize> {
        self.place_of(table, key).map(|p| p.line)
    }

    /// The line that sets `key` in the `[[partner]]` named `name`, or else that table's
    /// header line (the key takes its default).
    pub fn line_of_partner(&self, name: &str, key: &str) -> Option<usize> {
        self.places.partner_key(name, key).map(|p| p.line)
    }

    /// Where `partner`'s production documents of set `set` (ST01) go: the destination it
    /// names for them, or else `out/` ([`OUT`]).
    pub fn destination_for(&self, partner: &Partner, set: &str) -> &Destination {
        partner
            .output
            .destinations
            .get(set)
            .or(partner.output.destination.as_ref())
            .and_then(|name| self.destinations.iter().find(|d| &d.name == name))
            .filter(|d| !d.is_out(&self.gateway.out))
            .unwrap_or(&self.out_destination)
    }

    /// Where `partner`'s documents of set `set` and `usage` go: a production document's
    /// destination ([`Config::destination_for`]); a test document's test destinations, or
    /// `out/` (its `test/` folder) when its production ones would go there too, or else
    /// none (it goes nowhere, [`crate::registry::NO_TEST_DESTINATION`]).
    pub fn destinations_for(
        &self,
        partner: &Partner,
        set: &str,
        usage: crate::usage::Usage,
    ) -> Vec<&Destination> {
        let production = self.destination_for(partner, set);
        match usage {
            crate::usage::Usage::Production => vec![production],
            crate::usage::Usage::Test => {
                let named: Vec<&Destination> = partner
                    .output
                    .test_destinations
                    .iter()
                    .filter_map(|name| self.destination(name))
                    .filter(|d| d.usage == crate::usage::Usage::Test)
                    .collect();
                if named.is_empty() && production.name == OUT {
                    return vec![production];
                }
                named
            }
        }
    }

    /// The destination named `name` ([`OUT`] included).
    pub fn destination(&self, name: &str) -> Option<&Destination> {
        if name == OUT {
            return Some(&self.out_destination);
        }
        self.destinations.iter().find(|d| d.name == name)
    }

    /// Every destination documents can be queued for: [`OUT`] first, then the declared ones
    /// that are not `out/` itself.
    pub fn sendable_destinations(&self) -> impl Iterator<Item = &Destination> {
        std::iter::once(&self.out_destination).chain(
            self.destinations
                .iter()
                .filter(|d| !d.is_out(&self.gateway.out)),
        )
    }

    /// The partner whose key ([`Partner::key`], `QUAL:ID`) is `key`, or an unconfigured
    /// sender's defaults ([`Partner::unknown`]).
    pub fn partner_by_key(&self, key: &str) -> std::borrow::Cow<'_, Partner> {
        match self.partners.iter().find(|p| p.key() == key) {
            Some(p) => std::borrow::Cow::Borrowed(p),
            None => {
                let (qualifier, id) = key.split_once(':').unwrap_or(("", key));
                std::borrow::Cow::Owned(Partner::unknown(qualifier, id))
            }
        }
    }

    /// The partner that sent an interchange, by ISA05/ISA06 (trimmed).
    pub fn partner(&self, qualifier: &str, id: &str) -> Option<&Partner> {
        self.partners
            .iter()
            .find(|p| p.id_qualifier == qualifier && p.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_against_the_file() {
        let c = Config::from_str(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\n",
            Path::new("/etc/x12/partners.toml"),
        )
        .unwrap();
        assert_eq!(c.gateway.inbox, PathBuf::from("/etc/x12/data/inbox"));
        assert_eq!(c.limits, Limits::default());
        // A partner's guide folder too.
        let c = Config::from_str(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\n[[partner]]\nname = \"a\"\nid_qualifier = \"ZZ\"\nid = \"A\"\ndefinitions = \"guides/a\"\n",
            Path::new("/etc/x12/partners.toml"),
        )
        .unwrap();
        assert_eq!(
            c.partners[0].checks.definitions,
            Some(PathBuf::from("/etc/x12/guides/a"))
        );
        assert_eq!(c.line_of_partner("a", "definitions"), Some(8));
    }

    #[test]
    fn unknown_key_names_the_line() {
        let err = Config::from_str(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X\"\ninbx = \"a\"\n",
            Path::new("p.toml"),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("line 4") && msg.contains("inbx"), "{msg}");
    }

    const GATEWAY: &str = "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\n";

    fn load(extra: &str) -> Result<Config, String> {
        Config::from_str(&format!("{GATEWAY}{extra}"), Path::new("p.toml"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn partner_defaults_and_lookup() {
        let c =
            load("[[partner]]\nname = \"Acme\"\nid_qualifier = \"ZZ\"\nid = \"ACME\"\n").unwrap();
        let p = c.partner("ZZ", "ACME").unwrap();
        assert_eq!(p.duplicates.window_days, 30);
        assert_eq!(p.ack.kind, AckKind::FunctionalAck);
        assert_eq!(p.ack.ta1, Ta1Policy::OnError);
        assert_eq!(
            p.duplicates.fingerprint_ignore,
            vec!["ISA09", "ISA10", "GS04", "GS05"]
        );
        assert!(c.partner("01", "ACME").is_none());
    }

    #[test]
    fn partner_typo_wrong_type_and_duplicate_name_the_line() {
        let typo = load("\n[[partner]]\nname = \"Acme\"\nid_qualifier = \"ZZ\"\nid = \"ACME\"\nduplicate_window_dayz = 3\n").unwrap_err();
        assert!(
            typo.contains("line 9") && typo.contains("duplicate_window_dayz"),
            "{typo}"
        );
        let wrong =
            load("[[partner]]\nname = \"Acme\"\nid_qualifier = \"ZZ\"\nid = \"ACME\"\nack = 997\n")
                .unwrap_err();
        assert!(wrong.contains("line 8") && wrong.contains("ack"), "{wrong}");
        let dup = load("[[partner]]\nname = \"A\"\nid_qualifier = \"ZZ\"\nid = \"ACME\"\n\n[[partner]]\nname = \"B\"\nid_qualifier = \"ZZ\"\nid = \"ACME\"\n").unwrap_err();
        assert!(
            dup.contains("line 9") && dup.contains("ZZ:ACME is already declared"),
            "{dup}"
        );
        let bad = load("[[partner]]\nname = \"A\"\nid_qualifier = \"ZZ\"\nid = \"ACME\"\nfingerprint_ignore = [\"ISA13\"]\n").unwrap_err();
        assert!(
            bad.contains("line 4") && bad.contains("fingerprint_ignore"),
            "{bad}"
        );
    }

    #[test]
    fn errors_say_the_type_in_words_and_a_missing_gateway_as_such() {
        let e = Config::from_str(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X\"\nlease_seconds = \"300\"\n",
            Path::new("p.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 4")
                && e.contains("`lease_seconds`")
                && e.contains("expected a whole number of seconds")
                && !e.contains("u64"),
            "{e}"
        );
        let e = Config::from_str(
            "# a comment\n\n[limits]\nmax_file_bytes = 5\n",
            Path::new("p.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("no [gateway] table") && !e.contains("line 1"),
            "{e}"
        );
        let e = load("[[partner]]\nname = \"A\"\nid_qualifier = \"ZZ\"\nid = \"A\"\nduplicate_window_days = -1\n")
            .unwrap_err();
        assert!(
            e.contains("line 8") && e.contains("whole number of days"),
            "{e}"
        );
    }

    #[test]
    fn a_destination_timeout_beyond_a_day_is_refused() {
        let erp =
            "[[destination]]\nname = \"erp\"\nkind = \"http\"\nurl = \"http://127.0.0.1:1/po\"\n";
        let e = load(&format!("{erp}timeout_ms = 9223372036854775807\n")).unwrap_err();
        assert!(
            e.contains("destination \"erp\", key `timeout_ms`: expected at most 86400000 (a day)"),
            "{e}"
        );
        assert!(load(&format!("{erp}timeout_ms = 86400000\n")).is_ok());
    }

    #[test]
    fn test_destinations_are_kept_apart_from_production_ones() {
        use crate::usage::Usage;
        let erp =
            "[[destination]]\nname = \"erp\"\nkind = \"http\"\nurl = \"http://127.0.0.1:1/po\"\n";
        let sandbox = "[[destination]]\nname = \"erp-test\"\nkind = \"http\"\nurl = \"http://127.0.0.1:1/test\"\nusage = \"test\"\n";
        let acme = "[[partner]]\nname = \"Acme\"\nid_qualifier = \"ZZ\"\nid = \"ACME\"\n";
        let c = load(&format!(
            "{erp}{sandbox}{acme}destination = \"erp\"\ntest_destinations = [\"erp-test\"]\n"
        ))
        .unwrap();
        let p = c.partner("ZZ", "ACME").unwrap();
        let names = |u| {
            c.destinations_for(p, "850", u)
                .iter()
                .map(|d| d.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(Usage::Production), ["erp"]);
        assert_eq!(names(Usage::Test), ["erp-test"]);
        assert_eq!(c.destination("erp").unwrap().usage, Usage::Production);
        // Without test destinations a test document goes nowhere, not to production.
        let c = load(&format!("{erp}{sandbox}{acme}destination = \"erp\"\n")).unwrap();
        let p = c.partner("ZZ", "ACME").unwrap();
        assert!(c.destinations_for(p, "850", Usage::Test).is_empty());
        // A production key naming a test destination, and the other way round.
        let e = load(&format!(
            "{erp}{sandbox}{acme}destinations = {{ \"850\" = \"erp-test\" }}\n"
        ))
        .unwrap_err();
        assert!(
            e.contains("line 13")
                && e.contains("partner \"Acme\", key `destinations.850`")
                && e.contains("\"erp-test\" is a test destination"),
            "{e}"
        );
        let e = load(&format!(
            "{erp}{sandbox}{acme}test_destinations = [\"erp\"]\n"
        ))
        .unwrap_err();
        assert!(
            e.contains("partner \"Acme\", key `test_destinations`")
                && e.contains("\"erp\" is a production destination"),
            "{e}"
        );
        let e = load(&format!("{erp}{acme}test_destinations = [\"nope\"]\n")).unwrap_err();
        assert!(
            e.contains("key `test_destinations`")
                && e.contains("no [[destination]] is named \"nope\""),
            "{e}"
        );
        let e = load(&sandbox.replace("\"test\"\n", "\"staging\"\n")).unwrap_err();
        assert!(
            e.contains("destination \"erp-test\", key `usage`")
                && e.contains("expected \"production\" or \"test\""),
            "{e}"
        );
        // `out/` itself is production's.
        let e = load("[[destination]]\nname = \"files\"\nusage = \"test\"\n").unwrap_err();
        assert!(
            e.contains("key `usage`") && e.contains("a `path` of its own"),
            "{e}"
        );
        // ... named by its path too.
        let e = load("[[destination]]\nname = \"files\"\nkind = \"folder\"\npath = \"data/out\"\nusage = \"test\"\n")
            .unwrap_err();
        assert!(
            e.contains("destination \"files\", key `path`") && e.contains("production's folder"),
            "{e}"
        );
    }

    #[test]
    fn wrong_type_in_limits_names_the_line() {
        let err = Config::from_str(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X\"\n[limits]\nmax_element_len = \"big\"\n",
            Path::new("p.toml"),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("line 5") && msg.contains("max_element_len"),
            "{msg}"
        );
    }
}
