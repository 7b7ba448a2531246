//! Schema migrations: an append-only list, applied in one transaction, tracked by
//! `PRAGMA user_version`. Never edit a shipped entry; add a new one.
//!
//! They run with foreign keys off, as SQLite's procedure for changing a table's schema asks:
//! a table rebuilt by create, copy, drop and rename would otherwise cascade its drop into the
//! tables that refer to it (`acks` into `interchanges`). A rebuild that touches a reference
//! checks it with `PRAGMA foreign_key_check` before its transaction commits; the registry
//! switches foreign keys on again once the migrations have run.

use rusqlite::{Connection, TransactionBehavior};

const MIGRATIONS: &[&str] = &[
    // 1: outbound control-number counters, per partner and kind (ISA13, GS06).
    "CREATE TABLE counters (
        partner TEXT NOT NULL,
        kind    TEXT NOT NULL,
        value   INTEGER NOT NULL CHECK (value BETWEEN 1 AND 999999999),
        PRIMARY KEY (partner, kind)
    ) STRICT;",
    // 2: interchange claims, their acknowledgments, group keys and the audit trail.
    "CREATE TABLE interchanges (
        key            TEXT PRIMARY KEY,
        partner        TEXT NOT NULL,
        control_number TEXT NOT NULL,
        fingerprint    TEXT NOT NULL,
        state          TEXT NOT NULL CHECK (state IN ('in_flight', 'completed', 'failed')),
        owner          TEXT,
        lease_expires  INTEGER,
        attempts       INTEGER NOT NULL,
        disposition    TEXT,
        reason_code    TEXT,
        reason         TEXT,
        reservation    TEXT,
        outputs        TEXT,
        file           TEXT,
        first_seen     INTEGER NOT NULL,
        last_seen      INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX interchanges_partner_seen ON interchanges (partner, last_seen);
    CREATE TABLE acks (
        key   TEXT NOT NULL REFERENCES interchanges (key) ON DELETE CASCADE,
        seq   INTEGER NOT NULL,
        kind  TEXT NOT NULL,
        path  TEXT NOT NULL,
        bytes BLOB NOT NULL,
        PRIMARY KEY (key, seq)
    ) STRICT;
    CREATE TABLE fingerprints (
        key         TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        attempt     INTEGER NOT NULL,
        seen        INTEGER NOT NULL,
        PRIMARY KEY (key, attempt)
    ) STRICT;
    CREATE TABLE groups (
        partner         TEXT NOT NULL,
        app_sender      TEXT NOT NULL,
        control_number  TEXT NOT NULL,
        interchange_key TEXT NOT NULL,
        seen            INTEGER NOT NULL,
        PRIMARY KEY (partner, app_sender, control_number)
    ) STRICT;
    CREATE TABLE events (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        at             INTEGER NOT NULL,
        event          TEXT NOT NULL,
        key            TEXT,
        partner        TEXT,
        control_number TEXT,
        disposition    TEXT,
        detail         TEXT NOT NULL
    ) STRICT;
    CREATE INDEX events_partner_at ON events (partner, at);",
    // 3: whose registry this is: the gateway's ISA05/ISA06 and an installation id, so that a
    // configuration pointing at another gateway's registry is refused.
    "CREATE TABLE gateway (
        one            INTEGER PRIMARY KEY CHECK (one = 1),
        id_qualifier   TEXT NOT NULL,
        id             TEXT NOT NULL,
        installation   TEXT NOT NULL,
        created        INTEGER NOT NULL
    ) STRICT;",
    // 4: a group is keyed as X12.6 keys it, by GS01, GS02, GS03 and GS06 together. Rows from
    // before keep their GS02 and GS06 with an empty GS01 and GS03 ("any"), and still count as
    // seen for their number until they leave the window.
    "CREATE TABLE groups_v4 (
        partner         TEXT NOT NULL,
        functional_id   TEXT NOT NULL,
        app_sender      TEXT NOT NULL,
        app_receiver    TEXT NOT NULL,
        control_number  TEXT NOT NULL,
        interchange_key TEXT NOT NULL,
        seen            INTEGER NOT NULL,
        PRIMARY KEY (partner, functional_id, app_sender, app_receiver, control_number)
    ) STRICT;
    INSERT INTO groups_v4
        SELECT partner, '', app_sender, '', control_number, interchange_key, seen FROM groups;
    DROP TABLE groups;
    ALTER TABLE groups_v4 RENAME TO groups;",
    // 5: business documents: every sighting of a keyed set, its decision and its delivery.
    "CREATE TABLE documents (
        id               INTEGER PRIMARY KEY AUTOINCREMENT,
        key              TEXT NOT NULL,
        subject          TEXT NOT NULL,
        partner          TEXT NOT NULL,
        set_id           TEXT NOT NULL,
        role             TEXT NOT NULL CHECK (role IN ('original', 'change', 'copy')),
        version          TEXT,
        fingerprint      TEXT NOT NULL,
        interchange_key  TEXT NOT NULL,
        position         TEXT NOT NULL,
        st02             TEXT NOT NULL,
        disposition      TEXT NOT NULL
            CHECK (disposition IN ('new', 'duplicate', 'conflict', 'waiting', 'stale')),
        duplicate_of     INTEGER,
        delivery         TEXT NOT NULL
            CHECK (delivery IN ('pending', 'delivered', 'none', 'held', 'parked', 'discarded')),
        by               TEXT NOT NULL,
        released_by      INTEGER,
        sequence         INTEGER UNIQUE,
        original_missing INTEGER NOT NULL DEFAULT 0,
        output           TEXT,
        body             BLOB,
        seen             INTEGER NOT NULL,
        delivered_at     INTEGER,
        UNIQUE (interchange_key, position, fingerprint)
    ) STRICT;
    CREATE TABLE document_sequence (
        one   INTEGER PRIMARY KEY CHECK (one = 1),
        value INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX documents_key ON documents (key, fingerprint);
    CREATE INDEX documents_subject ON documents (subject, role);
    CREATE INDEX documents_released_by ON documents (released_by) WHERE released_by IS NOT NULL;
    CREATE INDEX documents_open ON documents (delivery) WHERE delivery IN ('pending', 'held', 'parked');",
    // 6: the outbox: one row per document and destination, queued in the transaction that
    // completes the document's interchange; the circuit of each destination; and the business
    // system's reference for a document, once known.
    "CREATE TABLE deliveries (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        document_id     INTEGER NOT NULL,
        key             TEXT NOT NULL,
        destination     TEXT NOT NULL,
        partner         TEXT NOT NULL,
        interchange_key TEXT NOT NULL,
        correlation_id  TEXT NOT NULL,
        file            TEXT NOT NULL,
        state           TEXT NOT NULL
            CHECK (state IN ('queued', 'retrying', 'dead', 'delivered')),
        attempts        INTEGER NOT NULL DEFAULT 0,
        queued_by       TEXT NOT NULL,
        owner           TEXT,
        lease_expires   INTEGER,
        next_at         INTEGER NOT NULL,
        created         INTEGER NOT NULL,
        last_at         INTEGER,
        last_status     TEXT,
        last_error      TEXT,
        delivered_at    INTEGER,
        result_ref      TEXT,
        idempotency_key TEXT NOT NULL,
        UNIQUE (document_id, destination)
    ) STRICT;
    CREATE INDEX deliveries_due ON deliveries (destination, next_at)
        WHERE state IN ('queued', 'retrying');
    CREATE INDEX deliveries_key ON deliveries (key);
    CREATE INDEX deliveries_interchange ON deliveries (interchange_key);
    CREATE INDEX deliveries_document ON deliveries (document_id);
    CREATE INDEX events_key ON events (key) WHERE key IS NOT NULL;
    CREATE TABLE circuits (
        destination   TEXT PRIMARY KEY,
        state         TEXT NOT NULL CHECK (state IN ('closed', 'open', 'probing')),
        failures      INTEGER NOT NULL,
        open_until    INTEGER,
        probe_owner   TEXT,
        probe_expires INTEGER,
        changed       INTEGER NOT NULL
    ) STRICT;
    ALTER TABLE documents ADD COLUMN result_ref TEXT;",
    // 7: the web page's overview counts decisions and documents since a time.
    "CREATE INDEX events_at ON events (at) WHERE disposition IS NOT NULL;
    CREATE INDEX documents_seen ON documents (seen);",
    // 8: a key's first sighting (with a content, or any) and a subject's first original and
    // open sightings found by index, not by reading every sighting of the key or subject (a
    // file of 100,000 copies of one PO read 5 billion rows).
    "DROP INDEX documents_key;
    DROP INDEX documents_subject;
    CREATE INDEX documents_key_first ON documents (key, fingerprint, id);
    CREATE INDEX documents_key_id ON documents (key, id);
    CREATE INDEX documents_subject_first ON documents (subject, role, id);
    CREATE INDEX documents_subject_delivery ON documents (subject, delivery);",
    // 9: an acknowledgment's bytes past its first part, a part a row: the 997 of a million
    // sets is 25 MB, and one row of it was copied three times more on its way into SQLite.
    "CREATE TABLE ack_parts (
        key   TEXT NOT NULL,
        seq   INTEGER NOT NULL,
        part  INTEGER NOT NULL,
        bytes BLOB NOT NULL,
        PRIMARY KEY (key, seq, part),
        FOREIGN KEY (key, seq) REFERENCES acks (key, seq) ON DELETE CASCADE
    ) STRICT;",
    // 10: deliveries keep their document's place in the order of deliveries (its subject,
    // the PO its changes are about, and its sequence), so that a destination gets a PO's
    // documents one at a time and in order; a row behind a dead one is `blocked`; and
    // `failures` counts only the attempts that count against `max_attempts` (made while the
    // circuit was closed, not probes). Rows from before count every attempt they made.
    "CREATE TABLE deliveries_v10 (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        document_id     INTEGER NOT NULL,
        key             TEXT NOT NULL,
        destination     TEXT NOT NULL,
        partner         TEXT NOT NULL,
        interchange_key TEXT NOT NULL,
        correlation_id  TEXT NOT NULL,
        file            TEXT NOT NULL,
        state           TEXT NOT NULL
            CHECK (state IN ('queued', 'retrying', 'blocked', 'dead', 'delivered', 'discarded')),
        attempts        INTEGER NOT NULL DEFAULT 0,
        queued_by       TEXT NOT NULL,
        owner           TEXT,
        lease_expires   INTEGER,
        next_at         INTEGER NOT NULL,
        created         INTEGER NOT NULL,
        last_at         INTEGER,
        last_status     TEXT,
        last_error      TEXT,
        delivered_at    INTEGER,
        result_ref      TEXT,
        idempotency_key TEXT NOT NULL,
        subject         TEXT NOT NULL,
        sequence        INTEGER,
        failures        INTEGER NOT NULL DEFAULT 0,
        UNIQUE (document_id, destination)
    ) STRICT;
    INSERT INTO deliveries_v10
        SELECT id, document_id, key, destination, partner, interchange_key, correlation_id,
            file, state, attempts, queued_by, owner, lease_expires, next_at, created, last_at,
            last_status, last_error, delivered_at, result_ref, idempotency_key,
            COALESCE((SELECT d.subject FROM documents d WHERE d.id = deliveries.document_id), key),
            (SELECT d.sequence FROM documents d WHERE d.id = deliveries.document_id),
            attempts
        FROM deliveries;
    INSERT INTO sqlite_sequence (name, seq)
        SELECT 'deliveries_v10', seq FROM sqlite_sequence WHERE name = 'deliveries'
        AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'deliveries_v10');
    UPDATE sqlite_sequence
        SET seq = max(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'deliveries'), 0))
        WHERE name = 'deliveries_v10';
    DROP TABLE deliveries;
    ALTER TABLE deliveries_v10 RENAME TO deliveries;
    CREATE INDEX deliveries_due ON deliveries (destination, next_at)
        WHERE state IN ('queued', 'retrying');
    CREATE INDEX deliveries_key ON deliveries (key);
    CREATE INDEX deliveries_interchange ON deliveries (interchange_key);
    CREATE INDEX deliveries_document ON deliveries (document_id);
    CREATE INDEX deliveries_order ON deliveries (destination, subject, sequence)
        WHERE state != 'delivered';",
    // 11: every document's JSON, made durable in the transaction that records where it goes
    // (one commit per batch), instead of a file per document fsynced before it: the
    // destinations read it from here, a folder destination writes it out as a file.
    "CREATE TABLE document_bodies (
        document_id INTEGER PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE,
        body        BLOB NOT NULL
    ) STRICT;",
    // 12: a document's JSON kept compressed (registry/bodies.rs); rows kept before stay plain.
    // The column is renamed so that a process of version 11 still running (a rolling
    // upgrade) fails loudly on it rather than sending compressed bytes as JSON. And one index
    // less to keep per delivery queued: (document_id, destination) is unique, so its own
    // index finds a document's deliveries already.
    "ALTER TABLE document_bodies RENAME COLUMN body TO packed;
    ALTER TABLE document_bodies ADD COLUMN packing TEXT NOT NULL DEFAULT 'none'
        CHECK (packing IN ('none', 'lz4'));
    DROP INDEX deliveries_document;",
    // 13: our own documents to partners (send): one row per outbound document key, with its
    // numbers and the bytes of its interchange (written again as they were after a crash),
    // and the partner's acknowledgment of it; acknowledgments that match nothing we sent.
    "CREATE TABLE outbound (
        key             TEXT PRIMARY KEY,
        partner         TEXT NOT NULL,
        set_id          TEXT NOT NULL,
        document_id     TEXT NOT NULL,
        fingerprint     TEXT NOT NULL,
        idempotency_key TEXT,
        state           TEXT NOT NULL CHECK (state IN ('writing', 'sent')),
        owner           TEXT,
        lease_expires   INTEGER,
        isa13           INTEGER NOT NULL,
        gs06            INTEGER NOT NULL,
        st02            TEXT NOT NULL,
        file            TEXT NOT NULL,
        bytes           BLOB NOT NULL,
        created         INTEGER NOT NULL,
        sent_at         INTEGER,
        ack             TEXT NOT NULL DEFAULT 'waiting' CHECK (ack IN ('waiting', 'not_expected',
            'accepted', 'accepted_with_errors', 'partially_accepted', 'rejected')),
        ack_kind        TEXT,
        ack_detail      TEXT,
        ack_at          INTEGER,
        ack_late        INTEGER NOT NULL DEFAULT 0,
        ack_due         INTEGER,
        acks_seen       INTEGER NOT NULL DEFAULT 0,
        resends         INTEGER NOT NULL DEFAULT 0
    ) STRICT;
    CREATE UNIQUE INDEX outbound_numbers ON outbound (partner, isa13);
    CREATE INDEX outbound_groups ON outbound (partner, gs06);
    CREATE INDEX outbound_created ON outbound (created);
    -- What the watcher's sweep reads every pass: only the claims still being written.
    CREATE INDEX outbound_writing ON outbound (created) WHERE state = 'writing';
    CREATE TABLE unmatched_acks (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        partner         TEXT NOT NULL,
        kind            TEXT NOT NULL,
        what            TEXT NOT NULL,
        interchange_key TEXT NOT NULL,
        seen            INTEGER NOT NULL
    ) STRICT;",
    // 14: several of our documents in one interchange (a partner's outbound_batch_ms): the
    // interchange's bytes kept once, beside the documents it carries, which share its ISA13
    // (and their group's GS06) and differ by ST02.
    "CREATE TABLE outbound_interchanges (
        partner TEXT NOT NULL,
        isa13   INTEGER NOT NULL,
        file    TEXT NOT NULL,
        bytes   BLOB NOT NULL,
        created INTEGER NOT NULL,
        -- Its sets sent since with new numbers (resend --new-numbers): then these bytes
        -- are never written again, or the partner would have those sets twice.
        moved   INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (partner, isa13)
    ) STRICT;
    INSERT INTO outbound_interchanges (partner, isa13, file, bytes, created)
        SELECT partner, isa13, file, bytes, created FROM outbound;
    ALTER TABLE outbound DROP COLUMN bytes;
    DROP INDEX outbound_numbers;
    CREATE INDEX outbound_numbers ON outbound (partner, isa13);
    CREATE UNIQUE INDEX outbound_sets ON outbound (partner, gs06, st02);",
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

/// The schema version this x12gate writes.
pub fn known() -> i64 {
    MIGRATIONS.len() as i64
}

pub fn apply(conn: &mut Connection) -> Result<(), Error> {
    let known = MIGRATIONS.len() as i64;
    // A registry up to date is only read: a node started while another holds the write lock
    // (one frozen in the middle of a transaction) opens at once, and its work then waits for
    // the lock as a running node's does, rather than the start failing after the timeout.
    let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found == known {
        return Ok(());
    }
    // Outside the transaction: inside one, SQLite ignores the pragma.
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    // IMMEDIATE takes the write lock first, so two processes starting at once migrate once.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_of_a_version_3_registry_keep_their_rows_with_gs01_and_gs03_unknown() {
        let mut conn = Connection::open_in_memory().unwrap();
        for (i, sql) in MIGRATIONS.iter().take(3).enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", i as i64 + 1)
                .unwrap();
        }
        conn.execute(
            "INSERT INTO groups VALUES ('ZZ:ACME', 'ACME', '7', 'ZZ:ACME:000000001', 42)",
            [],
        )
        .unwrap();
        apply(&mut conn).map_err(|_| "migration failed").unwrap();
        let row: (String, String, String, String, String, i64) = conn
            .query_row(
                "SELECT functional_id, app_sender, app_receiver, control_number, interchange_key, seen FROM groups",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
            )
            .unwrap();
        let want = ("", "ACME", "", "7", "ZZ:ACME:000000001", 42);
        assert_eq!(
            (
                row.0.as_str(),
                row.1.as_str(),
                row.2.as_str(),
                row.3.as_str(),
                row.4.as_str(),
                row.5
            ),
            want
        );
        assert_eq!(known(), 14);
    }

    #[test]
    fn an_outbound_document_of_version_13_keeps_its_interchange_and_numbers_stay_unique() {
        let mut conn = Connection::open_in_memory().unwrap();
        for (i, sql) in MIGRATIONS.iter().take(13).enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", i as i64 + 1)
                .unwrap();
        }
        conn.execute_batch(
            "INSERT INTO outbound (key, partner, set_id, document_id, fingerprint, state, isa13,
                 gs06, st02, file, bytes, created)
             VALUES ('K', 'ZZ:ACME', '810', 'INV-1', 'f', 'sent', 7, 3, '0001',
                 'ZZ_ACME_000000007.810.x12', CAST('ISA*...' AS BLOB), 5);",
        )
        .unwrap();
        apply(&mut conn).map_err(|_| "migration failed").unwrap();
        let kept: (String, Vec<u8>, i64) = conn
            .query_row(
                "SELECT i.file, i.bytes, i.created FROM outbound o JOIN outbound_interchanges i
                     ON i.partner = o.partner AND i.isa13 = o.isa13 WHERE o.key = 'K'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(
            kept,
            ("ZZ_ACME_000000007.810.x12".into(), b"ISA*...".to_vec(), 5)
        );
        // A second set in the same interchange is allowed; the same set twice is not.
        let insert = |key: &str, st02: &str| {
            conn.execute(
                "INSERT INTO outbound (key, partner, set_id, document_id, fingerprint, state,
                     isa13, gs06, st02, file, created)
                 VALUES (?1, 'ZZ:ACME', '810', ?1, 'f', 'sent', 7, 3, ?2, 'f', 5)",
                [key, st02],
            )
        };
        assert!(insert("K2", "0002").is_ok());
        assert!(insert("K3", "0002").is_err());
    }

    #[test]
    fn a_body_kept_plain_by_version_11_reads_as_it_was() {
        let mut conn = Connection::open_in_memory().unwrap();
        for (i, sql) in MIGRATIONS.iter().take(11).enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", i as i64 + 1)
                .unwrap();
        }
        conn.execute_batch(
            "INSERT INTO documents (key, subject, partner, set_id, role, fingerprint, interchange_key,
                 position, st02, disposition, delivery, by, seen)
             VALUES ('K', 'K', 'ZZ:ACME', '850', 'original', 'f', 'ZZ:ACME:1', '1/1', '0001',
                 'new', 'delivered', 'me', 1);
             INSERT INTO document_bodies (document_id, body) VALUES (1, CAST('{\"a\":1}' AS BLOB));",
        )
        .unwrap();
        apply(&mut conn).map_err(|_| "migration failed").unwrap();
        let (body, packing): (Vec<u8>, String) = conn
            .query_row("SELECT packed, packing FROM document_bodies", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        let read = super::super::bodies::unpack("r.db", 1, body, &packing).unwrap();
        assert_eq!(read, br#"{"a":1}"#);
    }

    #[test]
    fn deliveries_of_a_version_9_registry_take_their_documents_place_and_count_every_attempt() {
        let mut conn = Connection::open_in_memory().unwrap();
        for (i, sql) in MIGRATIONS.iter().take(9).enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", i as i64 + 1)
                .unwrap();
        }
        conn.execute_batch(
            "INSERT INTO documents (id, key, subject, partner, set_id, role, fingerprint,
                 interchange_key, position, st02, disposition, delivery, by, sequence, seen)
             VALUES (7, 'K', 'ZZ:ACME:850:PO-1', 'ZZ:ACME', '850', 'original', 'f',
                 'ZZ:ACME:000000001', '0.0', '0001', 'new', 'delivered', 'x', 5, 0);
             INSERT INTO deliveries (id, document_id, key, destination, partner, interchange_key,
                 correlation_id, file, state, attempts, queued_by, next_at, created,
                 idempotency_key)
             VALUES (3, 7, 'K', 'erp', 'ZZ:ACME', 'ZZ:ACME:000000001', 'c', 'f', 'retrying', 4,
                 'p', 0, 0, 'K'),
                 (9, 8, 'GONE', 'erp', 'ZZ:ACME', 'ZZ:ACME:000000001', 'c', 'f', 'queued', 0,
                 'p', 0, 0, 'GONE');
             DELETE FROM deliveries WHERE id = 9;",
        )
        .unwrap();
        apply(&mut conn).map_err(|_| "migration failed").unwrap();
        let row: (String, Option<i64>, i64, i64) = conn
            .query_row(
                "SELECT subject, sequence, failures, attempts FROM deliveries WHERE id = 3",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(row, ("ZZ:ACME:850:PO-1".into(), Some(5), 4, 4));
        // Ids are never handed out again, and the new state is allowed.
        conn.execute(
            "INSERT INTO deliveries (document_id, key, destination, partner, interchange_key,
                 correlation_id, file, state, queued_by, next_at, created, idempotency_key,
                 subject)
             VALUES (8, 'L', 'erp', 'ZZ:ACME', 'i', 'c', 'f', 'blocked', 'p', 0, 0, 'L', 'S')",
            [],
        )
        .unwrap();
        let id: i64 = conn
            .query_row("SELECT id FROM deliveries WHERE key = 'L'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(id, 10);
    }
}
