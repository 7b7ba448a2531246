//! Schema migrations: an append-only list, applied in one transaction, tracked by
//! `PRAGMA user_version`. Never edit a shipped entry; add a new one.

use rusqlite::{Connection, TransactionBehavior};

const MIGRATIONS: &[&str] = &[
    // 1: outbound control-number counters, per partner and kind (ISA13, GS06).
    "CREATE TABLE counters (
        partner TEXT NOT NULL,
        kind    TEXT NOT NULL,
        value   INTEGER NOT NULL CHECK (value BETWEEN 1 AND 999999999),
        PRIMARY KEY (partner, kind)
    ) STRICT;",
];

pub enum Error {
    Sqlite(rusqlite::Error),
    TooNew { found: i64, known: i64 },
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Sqlite(e)
    }
}

pub fn apply(conn: &mut Connection) -> Result<(), Error> {
    // IMMEDIATE takes the write lock first, so two processes starting at once migrate once.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if found > known {
        return Err(Error::TooNew { found, known });
    }
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(found).unwrap_or(0))
    {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i as i64 + 1)?;
    }
    tx.commit()?;
    Ok(())
}
