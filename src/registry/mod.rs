//! The registry: the one place that holds SQL.
//!
//! Everything the gateway must remember across processes and crashes lives in one SQLite
//! database: today the outbound control-number counters, later the interchange claims. Methods
//! speak the domain (`next_control_number`), never SQL, so that another store (several gateway
//! nodes sharing PostgreSQL) can implement the same traits.
//!
//! Durability: WAL with `synchronous = FULL`, so a committed transaction survives power loss,
//! not only a process crash (`NORMAL` in WAL mode may lose the last commits on power loss).
//! Concurrency: a busy timeout lets several processes share the file; every counter step is one
//! statement, so two processes never hand out the same number.

mod claims;
mod counters;
mod migrations;

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

pub use claims::{
    now_ms, Batch, Claim, ClaimRequest, Completed, Completion, Event, EventFilter, Previous,
    Reservation, StoredAck,
};
pub use counters::{ControlNumbers, Counter, PreviewCounters, MAX_CONTROL_NUMBER};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    #[error("registry {path}: {cause}")]
    Sqlite {
        path: String,
        cause: rusqlite::Error,
    },
    #[error("registry {path}: {cause}")]
    Io { path: String, cause: std::io::Error },
    #[error("registry {path}: schema version {found} is newer than this x12gate knows ({known})")]
    TooNew {
        path: String,
        found: i64,
        known: i64,
    },
}

/// How long a writer waits for another process's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

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

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// An open registry database.
pub struct Registry {
    conn: Connection,
    path: String,
}

impl Registry {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    ///
    /// Several processes may start at once on a database that does not exist yet. Switching a
    /// new file to WAL and the first migration take locks for which SQLite does not always
    /// call the busy handler (it answers "database is locked" at once rather than risk a
    /// deadlock), so the whole opening is retried on a busy database, up to [`BUSY_TIMEOUT`].
    pub fn open(path: &Path) -> Result<Registry, RegistryError> {
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(2);
        loop {
            match Self::open_once(path) {
                Err(RegistryError::Sqlite { cause, .. })
                    if is_busy(&cause) && started.elapsed() < BUSY_TIMEOUT =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                other => return other,
            }
        }
    }

    fn open_once(path: &Path) -> Result<Registry, RegistryError> {
        let shown = path.display().to_string();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| RegistryError::Io {
                path: shown.clone(),
                cause: source,
            })?;
        }
        let sql = |source| RegistryError::Sqlite {
            path: shown.clone(),
            cause: source,
        };
        let conn = Connection::open(path).map_err(sql)?;
        conn.busy_handler(Some(wait_for_lock)).map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql)?;
        let mut registry = Registry { conn, path: shown };
        migrations::apply(&mut registry.conn).map_err(|e| match e {
            migrations::Error::Sqlite(source) => RegistryError::Sqlite {
                path: registry.path.clone(),
                cause: source,
            },
            migrations::Error::TooNew { found, known } => RegistryError::TooNew {
                path: registry.path.clone(),
                found,
                known,
            },
        })?;
        Ok(registry)
    }

    /// Opens an existing database without writing to it (no migration); `None` when there is
    /// no database yet.
    pub fn open_read_only(path: &Path) -> Result<Option<Registry>, RegistryError> {
        if !path.exists() {
            return Ok(None);
        }
        let shown = path.display().to_string();
        let sql = |source| RegistryError::Sqlite {
            path: shown.clone(),
            cause: source,
        };
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(sql)?;
        conn.busy_handler(Some(wait_for_lock)).map_err(sql)?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(sql)?;
        if version == 0 {
            return Ok(None);
        }
        Ok(Some(Registry { conn, path: shown }))
    }

    fn sql(&self, source: rusqlite::Error) -> RegistryError {
        RegistryError::Sqlite {
            path: self.path.clone(),
            cause: source,
        }
    }
}
