//! The registry: the one place that holds SQL.
//!
//! Everything the gateway must remember across processes and crashes: interchange claims
//! and their completions (`claims`), our outbound control numbers (`counters`), business
//! documents and what was decided for them (`documents`), the outbox of deliveries
//! (`deliveries`), the audit trail, and the desk page's reads (`overview`). Methods speak
//! the domain (`claim_interchange`, `complete`, `take_control_numbers`), never SQL; one
//! store type runs the same statements on SQLite (the default) or a PostgreSQL server
//! several nodes share (`db`, `postgres`), with one append-only list of migrations. Rows
//! are read through `db::FromRow`: each row struct's column list is written once, beside
//! the reading of its fields. The web page and `/metrics` share a few read-only
//! connections (`readers`) instead of opening the registry per page view and scrape.
//!
//! Where the registry is comes from the configuration (`config::Database`); what it
//! stores is spoken in the lower layers' words (dispositions, document keys), never in the
//! pipeline's or the deliverer's types, which sit above it.
//!
//! Durability: SQLite in WAL mode with `synchronous = FULL`, so a committed transaction
//! survives power loss, not only a process crash. Concurrency: a busy timeout lets several
//! processes share the file; every write runs under the writers' lock, so two processes never
//! hand out the same number or both see a key absent.

mod bodies;
mod claims;
mod counters;
pub(crate) mod db;
mod deliveries;
mod documents;
mod migrations;
mod outbound;
mod overview;
mod postgres;
mod readers;
mod vocabulary;

use std::path::Path;
use std::time::Duration;

use db::{read, Conn, OptionalExtension};
use rusqlite::Connection;

pub use crate::config::{Database, Postgres};
pub use bodies::Packed;
pub use db::WRITER_LOCK;

pub use claims::{
    now_ms, AckBytes, AckToStore, Batch, Claim, ClaimRequest, Completed, Completion, Event,
    EventFilter, GroupKey, Previous, Record, Renewed, Reservation, Resolved, Snapshot, StoredAck,
    Unfinished,
};
pub use counters::{Counter, MAX_CONTROL_NUMBER};
pub use deliveries::{
    Attempted, CircuitState, Claimed, Confirmed, DeliveryFilter, DeliveryRow, DeliveryState,
    DestinationLast, Gate, Policy, Queue, Recorded, Retry, Wanted, PROTOCOL_ERROR,
};
pub use documents::{
    Decided, Delivery, DocumentRow, KeptBody, Release, Released, Sighting, NO_TEST_DESTINATION,
};
pub use outbound::{NewOutbound, OutboundClaim, OutboundRow, Placement, Settled};
pub use overview::{Found, Listed, Search};
pub use readers::{Reader, Readers};
pub use vocabulary::{ClaimState, EventKind, UnknownWord};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    #[error("registry {path}: {cause}")]
    Store { path: String, cause: db::Error },
    /// A PostgreSQL setting that cannot work (an unparsable URL, a missing password
    /// variable, an unreadable CA file).
    #[error("registry {path}: {what}")]
    Settings { path: String, what: String },
    #[error("registry {path}: {cause}")]
    Io { path: String, cause: std::io::Error },
    #[error("registry {path}: schema version {found} is newer than this x12gate knows ({known})")]
    TooNew {
        path: String,
        found: i64,
        known: i64,
    },
    /// No registry where the configuration says (or an empty file): a typo in `database`,
    /// or a lost registry; never silently replaced by a new one.
    #[error("registry {path}: {what}; if this is a new gateway run `x12gate init`, otherwise fix `database` or restore the registry")]
    Missing { path: String, what: String },
    /// A file that is not an x12gate registry.
    #[error("registry {path}: not an x12gate registry ({what}); fix `database`")]
    Foreign { path: String, what: String },
    /// Another gateway's registry.
    #[error("registry {path} belongs to gateway {found} (installation {installation}), not to {expected} of this configuration; fix `database` or `[gateway] id`")]
    NotOurs {
        path: String,
        found: String,
        expected: String,
        installation: String,
    },
}

impl RegistryError {
    /// A PostgreSQL server that cannot be reached (down, or the network): worth retrying.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, RegistryError::Store { cause, .. } if cause.is_unreachable())
    }

    /// A mistake in the configuration or the set-up (exit 2), not an operational failure.
    pub fn is_setup(&self) -> bool {
        matches!(
            self,
            RegistryError::Missing { .. }
                | RegistryError::Settings { .. }
                | RegistryError::Foreign { .. }
                | RegistryError::NotOurs { .. }
                | RegistryError::TooNew { .. }
        )
    }
}

/// Whose registry it is: our ISA05/ISA06 (`[gateway] id_qualifier`, `id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity<'a> {
    pub qualifier: &'a str,
    pub id: &'a str,
}

impl std::fmt::Display for Identity<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.qualifier, self.id)
    }
}

/// How long a writer waits for another process's transaction before giving up.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// SQLite's busy handler: retry every millisecond up to [`BUSY_TIMEOUT`]. The built-in
/// timeout backs off to 100 ms sleeps, which idles a writer long after a short transaction
/// of another worker or process has let go of the lock.
fn wait_for_lock(attempt: i32) -> bool {
    const STEP: Duration = Duration::from_millis(1);
    let waited = STEP.saturating_mul(u32::try_from(attempt).unwrap_or(u32::MAX));
    if waited >= BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(STEP);
    true
}

/// A connection that cannot write, waiting for other processes' locks like the others.
fn read_only(path: &Path, shown: &str) -> Result<Connection, RegistryError> {
    let sql = |source: rusqlite::Error| store(shown, source);
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(sql)?;
    conn.busy_handler(Some(wait_for_lock)).map_err(sql)?;
    enforce_foreign_keys(&conn).map_err(sql)?;
    Ok(conn)
}

fn store(shown: &str, cause: impl Into<db::Error>) -> RegistryError {
    RegistryError::Store {
        path: shown.to_string(),
        cause: cause.into(),
    }
}

/// Keeps the schema's references (`acks` rows go with their interchange, and `ack_parts`
/// rows with their ack, `ON DELETE CASCADE`) enforced whatever SQLite the registry is built
/// with. SQLite enforces foreign keys only on connections that ask, unless it is compiled
/// to default to them, as the bundled build is (`libsqlite3-sys` sets
/// `SQLITE_DEFAULT_FOREIGN_KEYS=1`): every registry connection has enforced them all along,
/// and asking makes that independent of a build flag of a dependency (a system SQLite,
/// another backend's port) instead of changing it.
///
/// Kept rather than dropped by a migration: nothing the gateway does relies on the cascade
/// or trips over the reference. `prune` removes an interchange's acknowledgments itself
/// before the interchange, so the cascade finds nothing; `release`, `reopen`, `restore` and
/// `complete` never delete an interchange, and `complete` stores acknowledgments only for a
/// claim it has just found; retention deletes files, not rows. Rows are not checked when a
/// connection opens, so a registry holding orphans (an acknowledgment whose interchange is
/// gone) opens and works as before. Dropping the cascade would rebuild `acks`, every
/// acknowledgment kept, while every other process waits for the lock.
fn enforce_foreign_keys(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "foreign_keys", "ON")
}

/// `PRAGMA user_version` and the number of schema objects; a file that is not SQLite is
/// [`RegistryError::Foreign`].
fn version_and_tables(conn: &Connection, shown: &str) -> Result<(i64, i64), RegistryError> {
    conn.query_row(
        "SELECT (SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .map_err(|e| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => RegistryError::Foreign {
            path: shown.to_string(),
            what: "not an SQLite database".into(),
        },
        _ => store(shown, e),
    })
}

fn foreign_tables(shown: &str, tables: i64) -> RegistryError {
    RegistryError::Foreign {
        path: shown.to_string(),
        what: format!("an SQLite database with {tables} object(s) of another program"),
    }
}

/// The page cache of a registry connection, in KiB.
const CACHE_KIB: i64 = 16 << 10;

/// An open registry database.
pub struct Registry {
    conn: Conn,
    path: String,
}

/// The gateway recorded in a registry: (ISA05, ISA06, installation).
fn recorded_identity(conn: &Conn) -> db::Result<Option<(String, String, String)>> {
    conn.query_row(
        "SELECT id_qualifier, id, installation FROM gateway WHERE one = 1",
        [],
        read,
    )
    .optional()
}

fn not_ours(
    shown: &str,
    who: Identity<'_>,
    recorded: Option<(String, String, String)>,
) -> Result<(), RegistryError> {
    match recorded {
        Some((qualifier, id, installation)) if qualifier != who.qualifier || id != who.id => {
            Err(RegistryError::NotOurs {
                path: shown.to_string(),
                found: format!("{qualifier}:{id}"),
                expected: who.to_string(),
                installation,
            })
        }
        _ => Ok(()),
    }
}

const NO_POSTGRES_REGISTRY: &str =
    "the database holds no x12gate registry (no table x12gate_schema)";

/// [`RegistryError::TooNew`] for a schema of a later x12gate.
fn not_too_new(shown: &str, found: i64, known: i64) -> Result<(), RegistryError> {
    if found > known {
        return Err(RegistryError::TooNew {
            path: shown.to_string(),
            found,
            known,
        });
    }
    Ok(())
}

fn connect_postgres(pg: &Postgres) -> Result<Conn, RegistryError> {
    connecting(pg, false)
}

fn connecting(pg: &Postgres, read_only: bool) -> Result<Conn, RegistryError> {
    pg.connect(read_only).map_err(|e| match e {
        postgres::ConnectError::Setup(what) => RegistryError::Settings {
            path: pg.shown(),
            what,
        },
        postgres::ConnectError::Server(cause) => store(&pg.shown(), cause),
    })
}

impl Registry {
    /// Opens the existing registry at `db` for the gateway `who`, bringing its schema up
    /// to date. A missing or empty file (a PostgreSQL database without the registry's
    /// tables), a file that is not a registry and another gateway's registry are errors
    /// ([`RegistryError::is_setup`]); nothing is created.
    pub fn open(db: &Database, who: Identity<'_>) -> Result<Registry, RegistryError> {
        match db {
            Database::Sqlite(path) => Self::opening(path, who, false),
            Database::Postgres(pg) => Self::open_postgres(pg, who, false),
        }
    }

    /// Creates the registry at `db` (and its folder) for `who`, or opens it when another
    /// process created it first: `x12gate init`, and the first run of a gateway without
    /// history.
    pub fn create(db: &Database, who: Identity<'_>) -> Result<Registry, RegistryError> {
        match db {
            Database::Sqlite(path) => Self::opening(path, who, true),
            Database::Postgres(pg) => Self::open_postgres(pg, who, true),
        }
    }

    fn open_postgres(
        pg: &Postgres,
        who: Identity<'_>,
        create: bool,
    ) -> Result<Registry, RegistryError> {
        let shown = pg.shown();
        let mut conn = connect_postgres(pg)?;
        let found = postgres::version(&conn).map_err(|e| store(&shown, e))?;
        if found == 0 && !create {
            return Err(RegistryError::Missing {
                path: shown,
                what: NO_POSTGRES_REGISTRY.into(),
            });
        }
        match postgres::migrate(&mut conn).map_err(|e| store(&shown, e))? {
            postgres::Migrated::Done => {}
            postgres::Migrated::TooNew { found, known } => {
                return Err(RegistryError::TooNew {
                    path: shown,
                    found,
                    known,
                })
            }
        }
        let mut registry = Registry { conn, path: shown };
        registry.claim_identity(who)?;
        Ok(registry)
    }

    /// Checks, reading only, that `db` holds a registry of `who` that this version can
    /// open: the errors of [`Registry::open`], without migrating or recording anything.
    pub fn verify(db: &Database, who: Identity<'_>) -> Result<(), RegistryError> {
        let path = match db {
            Database::Sqlite(path) => path,
            Database::Postgres(pg) => {
                let shown = pg.shown();
                let conn = connect_postgres(pg)?;
                let version = postgres::version(&conn).map_err(|e| store(&shown, e))?;
                if version == 0 {
                    return Err(RegistryError::Missing {
                        path: shown,
                        what: NO_POSTGRES_REGISTRY.into(),
                    });
                }
                not_too_new(&shown, version, postgres::known())?;
                let recorded = recorded_identity(&conn).map_err(|e| store(&shown, e))?;
                return not_ours(&shown, who, recorded);
            }
        };
        let shown = path.display().to_string();
        if !Self::file_exists(path) {
            return Err(RegistryError::Missing {
                path: shown,
                what: "no such file".into(),
            });
        }
        let conn = read_only(path, &shown)?;
        let (version, tables) = version_and_tables(&conn, &shown)?;
        if version == 0 && tables > 0 {
            return Err(foreign_tables(&shown, tables));
        }
        if version == 0 {
            return Err(RegistryError::Missing {
                path: shown,
                what: "the database is empty".into(),
            });
        }
        not_too_new(&shown, version, migrations::known())?;
        if version >= 3 {
            let recorded = recorded_identity(&Conn::Sqlite(conn)).map_err(|e| store(&shown, e))?;
            not_ours(&shown, who, recorded)?;
        }
        Ok(())
    }

    /// What SQLite's `PRAGMA quick_check` finds wrong in the registry at `db` (its first ten
    /// findings), read only; empty when its pages are sound, when there is no file yet, and
    /// on PostgreSQL (the server checks its own pages). A damaged registry can lose a key
    /// from an index and take a resend for new: `check` says so before any work does.
    pub fn damage(db: &Database) -> Result<Vec<String>, RegistryError> {
        let Database::Sqlite(path) = db else {
            return Ok(Vec::new());
        };
        if !Self::file_exists(path) {
            return Ok(Vec::new());
        }
        let shown = path.display().to_string();
        let conn = read_only(path, &shown)?;
        let found = conn.prepare("PRAGMA quick_check(10)").and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        });
        match found {
            Ok(rows) if rows.iter().all(|l| l == "ok") => Ok(Vec::new()),
            // A row may hold several findings, a line each, under a line naming the schema.
            Ok(rows) => Ok(rows
                .iter()
                .flat_map(|r| r.lines())
                .filter(|l| !l.starts_with("***"))
                .map(str::to_string)
                .collect()),
            // Damage the check itself stumbles on (a page it cannot even read) is a finding.
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
                ) =>
            {
                Ok(vec![e.to_string()])
            }
            Err(e) => Err(store(&shown, e)),
        }
    }

    /// A consistent copy of the registry at `dest`, taken while other processes keep
    /// working: SQLite's online backup in one step (a read transaction: in WAL mode writers
    /// go on meanwhile, and a one-step copy never restarts), into a temporary name renamed
    /// into place once the copy passes `PRAGMA integrity_check`, so `dest` is whole or
    /// absent. `dest` must not exist. Returns the pages copied. A PostgreSQL registry is
    /// backed up with the server's own tools (`pg_dump`), not here.
    pub fn backup(&self, dest: &Path) -> Result<u64, RegistryError> {
        let shown = dest.display().to_string();
        let io = |cause: std::io::Error| RegistryError::Io {
            path: shown.clone(),
            cause,
        };
        let Some(conn) = self.conn.sqlite() else {
            return Err(RegistryError::Settings {
                path: self.path.clone(),
                what: "a PostgreSQL registry is backed up with pg_dump (or the server's own backups), not by x12gate".into(),
            });
        };
        if dest.exists() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "the backup's destination exists already; give a new name",
            )));
        }
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "backup".into());
        let tmp = dest.with_file_name(format!(".{name}.{}.partial", std::process::id()));
        let sql = |source: rusqlite::Error| store(&shown, source);
        let copied = (|| {
            let mut copy = Connection::open(&tmp).map_err(sql)?;
            let pages = {
                let backup = rusqlite::backup::Backup::new(conn, &mut copy).map_err(sql)?;
                // All pages in one step; a writer holding a lock only delays it.
                let mut tries = 0;
                loop {
                    match backup.step(-1).map_err(sql)? {
                        rusqlite::backup::StepResult::Done => break,
                        rusqlite::backup::StepResult::More => {}
                        _ if tries < 3000 => {
                            tries += 1;
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        _ => {
                            return Err(io(std::io::Error::other(
                                "the registry stayed locked for 30 s; try again",
                            )))
                        }
                    }
                }
                backup.progress().pagecount
            };
            // The copy is a registry on its own: one file, no WAL beside it.
            copy.pragma_update(None, "journal_mode", "DELETE")
                .map_err(sql)?;
            let ok: String = copy
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .map_err(sql)?;
            if ok != "ok" {
                return Err(io(std::io::Error::other(format!(
                    "the copy fails its integrity check: {ok}"
                ))));
            }
            Ok(u64::try_from(pages).unwrap_or(0))
        })();
        match copied {
            Ok(pages) => {
                if let Err(e) = std::fs::rename(&tmp, dest) {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(io(e));
                }
                Ok(pages)
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// Whether `db` holds a registry at all: a file with content (no SQL is run), or a
    /// PostgreSQL database with the registry's tables. A server that cannot be reached
    /// counts as holding one, so that opening it reports why it cannot be reached.
    pub fn exists(db: &Database) -> bool {
        match db {
            Database::Sqlite(path) => Self::file_exists(path),
            Database::Postgres(pg) => match connect_postgres(pg) {
                Ok(conn) => postgres::version(&conn).map_or(true, |v| v > 0),
                Err(_) => true,
            },
        }
    }

    fn file_exists(path: &Path) -> bool {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > 0)
    }

    /// Whether this registry is on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.conn.is_postgres()
    }

    /// Several processes may start at once on a database that does not exist yet. Switching a
    /// new file to WAL and the first migration take locks for which SQLite does not always
    /// call the busy handler (it answers "database is locked" at once rather than risk a
    /// deadlock), so the whole opening is retried on a busy database, up to [`BUSY_TIMEOUT`].
    fn opening(path: &Path, who: Identity<'_>, create: bool) -> Result<Registry, RegistryError> {
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(2);
        loop {
            match Self::open_once(path, who, create) {
                Err(RegistryError::Store { cause, .. })
                    if cause.is_busy() && started.elapsed() < BUSY_TIMEOUT =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                other => return other,
            }
        }
    }

    fn open_once(path: &Path, who: Identity<'_>, create: bool) -> Result<Registry, RegistryError> {
        let shown = path.display().to_string();
        if create {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|source| RegistryError::Io {
                    path: shown.clone(),
                    cause: source,
                })?;
            }
        } else if !Self::file_exists(path) {
            let what = if path.exists() {
                "the file is empty"
            } else {
                "no such file"
            };
            return Err(RegistryError::Missing {
                path: shown,
                what: what.into(),
            });
        }
        let sql = |source: rusqlite::Error| store(&shown, source);
        let conn = Connection::open(path).map_err(sql)?;
        conn.busy_handler(Some(wait_for_lock)).map_err(sql)?;
        // Not a database at all, or somebody else's: refuse before writing anything.
        let (version, tables) = version_and_tables(&conn, &shown)?;
        if version == 0 && tables > 0 {
            return Err(foreign_tables(&shown, tables));
        }
        if version == 0 && !create {
            return Err(RegistryError::Missing {
                path: shown,
                what: "the database is empty".into(),
            });
        }
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql)?;
        // A statement's journal (kept so that it can be undone alone) and the b-trees SQLite
        // builds for `IN (...)` lists in memory, not in temporary files: a document's JSON
        // written into one was written twice more, 280 MB for a 20 MB file.
        conn.pragma_update(None, "temp_store", "MEMORY")
            .map_err(sql)?;
        // Pages kept in memory between statements (SQLite's default is 2 MB): a batch's
        // documents touch every index of the documents and deliveries tables at scattered
        // places, and pages evicted were read back from the file, or spilled into the log
        // before the commit and written there again.
        conn.pragma_update(None, "cache_size", -CACHE_KIB)
            .map_err(sql)?;
        let mut registry = Registry::migrated(conn, shown)?;
        registry.claim_identity(who)?;
        Ok(registry)
    }

    /// `conn` with its schema brought up to date and its foreign keys enforced.
    fn migrated(mut conn: Connection, shown: String) -> Result<Registry, RegistryError> {
        migrations::apply(&mut conn).map_err(|e| match e {
            migrations::Error::Sqlite(source) => store(&shown, source),
            migrations::Error::TooNew { found, known } => RegistryError::TooNew {
                path: shown.clone(),
                found,
                known,
            },
        })?;
        enforce_foreign_keys(&conn).map_err(|e| store(&shown, e))?;
        Ok(Registry {
            conn: Conn::Sqlite(conn),
            path: shown,
        })
    }

    /// A new, empty registry of `who` for the registry's own tests: in memory, or on the
    /// test PostgreSQL server in a schema of its own when the thread runs a test's
    /// PostgreSQL variant (see [`tests::on_postgres`]).
    #[cfg(test)]
    pub(crate) fn in_memory(who: Identity<'_>) -> Registry {
        if let Some(pg) = tests::postgres_for_this_test() {
            return Registry::create(&Database::Postgres(pg), who)
                .expect("a registry on the test server");
        }
        let conn = Connection::open_in_memory().expect("an in-memory database");
        let mut registry =
            Registry::migrated(conn, ":memory:".into()).expect("the migrations apply");
        registry
            .claim_identity(who)
            .expect("a new registry's identity");
        registry
    }

    /// Records `who` as the registry's gateway if none is recorded yet (a new registry, or
    /// one from before identities were kept), then checks that it is `who`.
    fn claim_identity(&mut self, who: Identity<'_>) -> Result<(), RegistryError> {
        let path = self.path.clone();
        let sql = |source| store(&path, source);
        // Recorded already (every start but the first): read, not written, so that a node
        // starts while another holds the write lock (see `migrations::apply`).
        if let Some(recorded) = recorded_identity(&self.conn).map_err(sql)? {
            return not_ours(&path, who, Some(recorded));
        }
        let tx = self.conn.transaction().map_err(sql)?;
        let installation = blake3::hash(
            format!(
                "{:?}{}{}",
                std::time::SystemTime::now(),
                std::process::id(),
                path
            )
            .as_bytes(),
        )
        .to_hex()[..16]
            .to_string();
        let now = claims::now_ms();
        let inserted = tx
            .execute(
                "INSERT INTO gateway (one, id_qualifier, id, installation, created)
                 VALUES (1, ?1, ?2, ?3, ?4) ON CONFLICT (one) DO NOTHING",
                db::params![who.qualifier, who.id, installation, now],
            )
            .map_err(sql)?;
        if inserted == 1 {
            let detail =
                serde_json::json!({ "gateway": who.to_string(), "installation": installation })
                    .to_string();
            claims::insert_event(
                &tx,
                now,
                EventKind::Init,
                claims::About::default(),
                None,
                &detail,
            )
            .map_err(sql)?;
        }
        let recorded = recorded_identity(&tx).map_err(sql)?;
        tx.commit().map_err(sql)?;
        not_ours(&path, who, recorded)
    }

    /// The installation id recorded when the registry was created.
    pub fn installation(&self) -> Result<String, RegistryError> {
        self.conn
            .query_row("SELECT installation FROM gateway WHERE one = 1", [], read)
            .map_err(|e| self.sql(e))
    }

    /// Opens an existing database without writing to it (no migration); `None` when there is
    /// no database yet.
    pub fn open_read_only(db: &Database) -> Result<Option<Registry>, RegistryError> {
        let path = match db {
            Database::Sqlite(path) => path,
            Database::Postgres(pg) => {
                let shown = pg.shown();
                let conn = connecting(pg, true)?;
                if postgres::version(&conn).map_err(|e| store(&shown, e))? == 0 {
                    return Ok(None);
                }
                return Ok(Some(Registry { conn, path: shown }));
            }
        };
        if !path.exists() {
            return Ok(None);
        }
        let shown = path.display().to_string();
        let conn = read_only(path, &shown)?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| store(&shown, e))?;
        if version == 0 {
            return Ok(None);
        }
        Ok(Some(Registry {
            conn: Conn::Sqlite(conn),
            path: shown,
        }))
    }

    fn sql(&self, source: db::Error) -> RegistryError {
        store(&self.path, source)
    }
}

#[cfg(test)]
mod tests;
