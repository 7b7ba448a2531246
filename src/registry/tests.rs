//! The registry's connections: foreign keys enforced on each, and what that changes (nothing
//! for the data the gateway writes, nothing for registries holding rows from before).

use std::cell::Cell;

use rusqlite::Connection;

use super::*;

#[path = "../../tests/pg_server.rs"]
mod pg_server;

thread_local! {
    /// Set while a test's PostgreSQL variant runs on this thread.
    static ON_POSTGRES: Cell<bool> = const { Cell::new(false) };
}

/// A new schema of the test server for [`Registry::in_memory`], while the thread runs a
/// test's PostgreSQL variant.
pub(crate) fn postgres_for_this_test() -> Option<Postgres> {
    if !ON_POSTGRES.with(Cell::get) {
        return None;
    }
    let url = pg_server::schema().expect("the test server, found when the test began");
    Some(Postgres {
        url,
        password_env: None,
        ca_file: None,
    })
}

/// Runs `test` with every registry it creates on the test PostgreSQL server, each in a new
/// schema; skipped, loudly, when no server can be had (a failure under
/// `X12GATE_REQUIRE_POSTGRES`).
pub(crate) fn on_postgres(test: impl FnOnce()) {
    if pg_server::server().is_none() {
        return;
    }
    ON_POSTGRES.with(|p| p.set(true));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ON_POSTGRES.with(|p| p.set(false));
        }
    }
    let _reset = Reset;
    test();
}

/// Each test once on SQLite and once on PostgreSQL: `mod NAME { fn sqlite; fn postgres }`.
macro_rules! on_both {
    ($($(#[$meta:meta])* fn $name:ident() $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $(#[$meta])*
            #[test]
            fn sqlite() $body
            $(#[$meta])*
            #[test]
            fn postgres() {
                $crate::registry::tests::on_postgres(|| $body)
            }
        }
    )*};
}
pub(crate) use on_both;

const US: Identity<'static> = Identity {
    qualifier: "ZZ",
    id: "US",
};

fn foreign_keys(conn: &Connection) -> i64 {
    conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0))
        .unwrap()
}

fn sqlite(conn: &Conn) -> &Connection {
    conn.sqlite().expect("an SQLite registry")
}

fn count(conn: &Conn, query: &str) -> i64 {
    conn.query_row(query, [], |r| r.get(0)).unwrap()
}

/// Keys of `table`'s rows (`interchange_key` for groups), sorted.
fn keys(conn: &Conn, table: &str) -> Vec<String> {
    let column = if table == "groups" {
        "interchange_key"
    } else {
        "key"
    };
    let mut stmt = conn
        .prepare(&format!("SELECT {column} FROM {table} ORDER BY 1"))
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn group(functional_id: &str, control_number: &str) -> GroupKey {
    GroupKey {
        functional_id: functional_id.into(),
        app_sender: "ACME".into(),
        app_receiver: "US".into(),
        control_number: control_number.into(),
    }
}

/// Whether each of `groups` was seen before, for interchange `key`.
fn seen(r: &mut Registry, key: &str, groups: &[GroupKey]) -> Vec<bool> {
    r.batch(|b| b.claim_groups(key, "ZZ:ACME", groups, 30))
        .unwrap()
}

crate::registry::tests::on_both! {
    fn a_group_number_is_unique_with_its_gs01_gs02_and_gs03() {
        let mut r = Registry::in_memory(US);
        assert_eq!(seen(&mut r, "k1", &[group("PO", "1")]), [false]);
        // The same number in an invoice group is another group (X12.6).
        assert_eq!(seen(&mut r, "k2", &[group("IN", "1")]), [false]);
        let other_receiver = GroupKey {
            app_receiver: "US2".into(),
            ..group("PO", "1")
        };
        assert_eq!(seen(&mut r, "k3", &[other_receiver]), [false]);
        // The same group again, from another interchange: seen; from the same one: ours.
        assert_eq!(seen(&mut r, "k4", &[group("PO", "1")]), [true]);
        assert_eq!(seen(&mut r, "k1", &[group("PO", "1")]), [false]);
    }
}

crate::registry::tests::on_both! {
    fn a_group_recorded_before_migration_4_still_holds_its_number() {
        let mut r = Registry::in_memory(US);
        r.conn
            .execute(
                "INSERT INTO groups VALUES ('ZZ:ACME', '', 'ACME', '', '7', 'old', ?1)",
                [now_ms()],
            )
            .unwrap();
        // Its GS01 and GS03 are unknown: any group with its GS02 and GS06 counts as seen.
        assert_eq!(
            seen(&mut r, "new", &[group("IN", "7"), group("IN", "8")]),
            [true, false]
        );
        assert_eq!(seen(&mut r, "old", &[group("PO", "7")]), [false]);
    }
}

/// Claims, registers one group of and completes `key` through the batch, as `process` does.
fn settle(r: &mut Registry, key: &str) {
    let owner = "host:1:1";
    r.batch(|b| {
        let claim = b.claim_interchange(&ClaimRequest {
            key,
            partner: "ZZ:ACME",
            control_number: "000000101",
            fingerprint: key,
            file: "/in/a.x12",
            owner,
            lease_ms: 60_000,
            is_dead: &|_| false,
        })?;
        assert!(matches!(claim, Claim::Owned { .. }), "{claim:?}");
        b.claim_groups(key, "ZZ:ACME", &[group("PO", key)], 30)?;
        let done = b.complete(
            key,
            owner,
            &Completion {
                disposition: crate::disposition::Disposition::Accepted,
                reason_code: None,
                reason: None,
                acks: &[AckToStore {
                    kind: "997",
                    path: &format!("{key}.997.x12"),
                    bytes: AckBytes::Held(b"ISA~"),
                }],
                outputs: &[],
                released_groups: &[],
                event: EventKind::Accepted,
                detail: "{}",
            },
        )?;
        assert!(done);
        Ok::<_, RegistryError>(())
    })
    .unwrap();
}

#[test]
fn every_connection_enforces_foreign_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let db = Database::from(&path);
    assert_eq!(
        foreign_keys(sqlite(&Registry::create(&db, US).unwrap().conn)),
        1
    );
    assert_eq!(
        foreign_keys(sqlite(&Registry::open(&db, US).unwrap().conn)),
        1
    );
    let read_only = Registry::open_read_only(&db).unwrap().unwrap();
    assert_eq!(foreign_keys(sqlite(&read_only.conn)), 1);
    assert_eq!(foreign_keys(sqlite(&Registry::in_memory(US).conn)), 1);
}

/// A table rebuilt by a future migration must not cascade its drop: whatever the build's
/// default, the migrations leave foreign keys off, and only the opening turns them on.
#[test]
fn migrations_run_without_foreign_keys() {
    let mut conn = Connection::open_in_memory().unwrap();
    conn.pragma_update(None, "foreign_keys", "ON").unwrap();
    assert!(migrations::apply(&mut conn).is_ok());
    assert_eq!(foreign_keys(&conn), 0);
}

#[test]
fn an_acknowledgment_goes_with_its_interchange() {
    let mut r = Registry::in_memory(US);
    settle(&mut r, "ZZ:ACME:000000101");
    assert_eq!(count(&r.conn, "SELECT count(*) FROM acks"), 1);
    let orphan = r.conn.execute(
        "INSERT INTO acks (key, seq, kind, path, bytes) VALUES ('ZZ:ACME:000000999', 0, '997', 'x', x'00')",
        [],
    );
    assert!(
        matches!(orphan.as_ref().map_err(db::Error::is_constraint), Err(true)),
        "{orphan:?}"
    );
    r.conn
        .execute(
            "DELETE FROM interchanges WHERE key = 'ZZ:ACME:000000101'",
            [],
        )
        .unwrap();
    assert_eq!(count(&r.conn, "SELECT count(*) FROM acks"), 0);
}

/// Rows written while nothing enforced the reference: acknowledgments of interchanges that
/// are gone. The registry opens, works, and prunes exactly what it pruned before.
#[test]
fn a_registry_with_orphans_opens_and_works_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    drop(Registry::create(&crate::registry::Database::from(&path), US).unwrap());
    {
        let raw = Connection::open(&path).unwrap();
        raw.pragma_update(None, "foreign_keys", "OFF").unwrap();
        for key in ["ZZ:GONE:000000001", "ZZ:ACME:000000101"] {
            raw.execute(
                "INSERT INTO acks (key, seq, kind, path, bytes) VALUES (?1, 5, '997', 'old', x'00')",
                [key],
            )
            .unwrap();
        }
    }
    let mut r = Registry::open(&crate::registry::Database::from(&path), US).unwrap();
    assert_eq!(
        count(&r.conn, "SELECT count(*) FROM pragma_foreign_key_check"),
        2
    );
    // Completing a key replaces whatever acknowledgments were kept under it.
    settle(&mut r, "ZZ:ACME:000000101");
    settle(&mut r, "ZZ:ACME:000000102");
    assert_eq!(
        keys(&r.conn, "acks"),
        [
            "ZZ:ACME:000000101",
            "ZZ:ACME:000000102",
            "ZZ:GONE:000000001"
        ]
    );
    r.age_for_tests("ZZ:ACME:000000101", 2).unwrap();
    let removed = r.prune(&|_| 1).unwrap();
    assert_eq!(removed, ["ZZ:ACME:000000101"]);
    for table in ["interchanges", "fingerprints", "groups"] {
        assert_eq!(keys(&r.conn, table), ["ZZ:ACME:000000102"], "{table}");
    }
    // The orphan was never an interchange's: prune leaves it where it was.
    assert_eq!(
        keys(&r.conn, "acks"),
        ["ZZ:ACME:000000102", "ZZ:GONE:000000001"]
    );
    let pruned = r
        .history(&EventFilter::default())
        .unwrap()
        .into_iter()
        .rfind(|e| e.event == EventKind::Prune)
        .unwrap();
    assert_eq!(pruned.detail, r#"{"removed":["ZZ:ACME:000000101"]}"#);
}

/// The PostgreSQL schema is SQLite's, column for column (name and NOT NULL), index for
/// index: a migration added to one backend and not the other fails here.
#[test]
fn both_backends_have_the_same_tables_columns_and_indexes() {
    let sqlite = Registry::in_memory(US);
    let mut postgres = None;
    on_postgres(|| postgres = Some(Registry::in_memory(US)));
    let Some(postgres) = postgres else {
        return;
    };
    let rows = |r: &Registry, sql: &str| -> Vec<String> {
        let mut v: Vec<String> = r
            .conn
            .query_map(sql, [], |row| row.get::<String>(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        v.sort();
        v
    };
    let sqlite_columns = rows(
        &sqlite,
        "SELECT m.name || '.' || p.name || CASE WHEN p.\"notnull\" = 1 OR p.pk > 0 THEN ' not null' ELSE '' END
         FROM sqlite_master m, pragma_table_info(m.name) p
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'",
    );
    let postgres_columns = rows(
        &postgres,
        "SELECT CAST(table_name || '.' || column_name || CASE WHEN is_nullable = 'NO' THEN ' not null' ELSE '' END AS TEXT)
         FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name <> 'x12gate_schema'",
    );
    assert!(sqlite_columns.len() > 80, "{sqlite_columns:?}");
    assert_eq!(sqlite_columns, postgres_columns);
    let sqlite_indexes = rows(
        &sqlite,
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%'",
    );
    let postgres_indexes = rows(
        &postgres,
        "SELECT CAST(indexname AS TEXT) FROM pg_indexes
         WHERE schemaname = current_schema()
           AND indexname NOT IN (SELECT conname FROM pg_constraint)",
    );
    assert_eq!(sqlite_indexes, postgres_indexes);
}

on_both! {
    // A NUL byte from a partner's file (PostgreSQL's text cannot hold one) is stored and
    // found again like any other character.
    fn a_nul_byte_in_a_value_is_stored_and_found_again() {
        let mut r = Registry::in_memory(US);
        let nul = GroupKey {
            app_sender: "AC\0ME".into(),
            ..group("PO", "7")
        };
        assert_eq!(seen(&mut r, "ZZ:AC\0ME:000000001", std::slice::from_ref(&nul)), [false]);
        assert_eq!(seen(&mut r, "ZZ:AC\0ME:000000002", &[nul]), [true]);
        assert_eq!(seen(&mut r, "ZZ:ACME:000000003", &[group("PO", "7")]), [false]);
    }
}

on_both! {
    // A group whose GS02 is 64 KiB (a partner's broken file) is registered by its digest:
    // PostgreSQL refuses an index entry that long, which would fail the file on every retry.
    fn a_group_key_of_any_length_is_registered_and_found_again() {
        let mut r = Registry::in_memory(US);
        let long = "S".repeat(65_536);
        let key = GroupKey::of("PO", &long, "X12GATE", "7");
        assert!(key.app_sender.len() < 100, "{}", key.app_sender.len());
        assert_eq!(GroupKey::of("PO", "ACME", "US", "7"), group("PO", "7"));
        assert_ne!(key, GroupKey::of("PO", &"S".repeat(65_535), "X12GATE", "7"));
        assert_eq!(seen(&mut r, "ZZ:ACME:000000001", std::slice::from_ref(&key)), [false]);
        assert_eq!(seen(&mut r, "ZZ:ACME:000000002", &[key]), [true]);
    }
}

crate::registry::tests::on_both! {
    /// An error ignored inside a transaction is never a silent loss: SQLite keeps the
    /// statements that worked and commits them; PostgreSQL, which discards a transaction once
    /// a statement in it failed, refuses the commit instead of reporting one.
    fn a_failed_statement_in_a_transaction_never_commits_silently() {
        let mut r = Registry::in_memory(US);
        let before = count(&r.conn, "SELECT count(*) FROM counters");
        let tx = r.conn.transaction().unwrap();
        assert!(tx.execute("INSERT INTO no_such_table VALUES (1)", []).is_err());
        let written = tx.execute(
            "INSERT INTO counters (partner, kind, value) VALUES ('ZZ:T', 'isa', 5)",
            [],
        );
        let committed = tx.commit();
        let after = count(&r.conn, "SELECT count(*) FROM counters");
        if r.conn.is_postgres() {
            assert!(written.is_err());
            assert!(matches!(committed, Err(db::Error::Aborted)), "{committed:?}");
            assert_eq!(after, before);
        } else {
            assert_eq!(written.unwrap(), 1);
            committed.unwrap();
            assert_eq!(after, before + 1);
        }
        // The connection is usable again, and the next transaction commits.
        let tx = r.conn.transaction().unwrap();
        tx.execute(
            "INSERT INTO counters (partner, kind, value) VALUES ('ZZ:U', 'isa', 6)",
            [],
        )
        .unwrap();
        tx.commit().unwrap();
        assert_eq!(count(&r.conn, "SELECT count(*) FROM counters"), after + 1);
    }
}

crate::registry::tests::on_both! {
    /// A write whose outcome nobody reads (sent later on PostgreSQL, with the next
    /// statement that is waited for) is seen by the statements after it, in order, and one
    /// that fails fails its transaction: nothing of it is committed, and the error says why.
    fn writes_are_seen_in_order_and_a_failing_one_commits_nothing() {
        let mut r = Registry::in_memory(US);
        let before = count(&r.conn, "SELECT count(*) FROM counters");
        let tx = r.conn.transaction().unwrap();
        tx.write("INSERT INTO counters (partner, kind, value) VALUES ('ZZ:A', 'isa', 7)", [])
            .unwrap();
        tx.write("UPDATE counters SET value = value + 1 WHERE partner = 'ZZ:A'", [])
            .unwrap();
        let seen: i64 = tx
            .query_row("SELECT value FROM counters WHERE partner = 'ZZ:A'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(seen, 8);
        // The CHECK (value BETWEEN 1 AND 999999999) refuses the second write: SQLite says so
        // at once, PostgreSQL at the commit that carries it.
        let outcome = (move || {
            tx.write("INSERT INTO counters (partner, kind, value) VALUES ('ZZ:B', 'isa', 9)", [])?;
            tx.write("INSERT INTO counters (partner, kind, value) VALUES ('ZZ:C', 'isa', 0)", [])?;
            tx.write("INSERT INTO counters (partner, kind, value) VALUES ('ZZ:D', 'isa', 9)", [])?;
            tx.commit()
        })();
        let err = outcome.expect_err("a refused write was committed");
        assert!(err.is_constraint(), "{err:?}");
        assert_eq!(count(&r.conn, "SELECT count(*) FROM counters"), before);
        // The connection goes on: the next transaction's writes are committed.
        let tx = r.conn.transaction().unwrap();
        tx.write("INSERT INTO counters (partner, kind, value) VALUES ('ZZ:E', 'isa', 1)", [])
            .unwrap();
        tx.commit().unwrap();
        assert_eq!(count(&r.conn, "SELECT count(*) FROM counters"), before + 1);
    }
}

crate::registry::tests::on_both! {
    /// Numbers for an acknowledgment are taken as a block, both counters in one statement,
    /// and are the numbers one at a time would have given, across the wrap too.
    fn a_block_of_numbers_is_what_one_at_a_time_gives_across_the_wrap() {
        use crate::registry::{counters, Counter, MAX_CONTROL_NUMBER};
        let mut r = Registry::in_memory(US);
        let tx = r.conn.transaction().unwrap();
        assert_eq!(counters::take_in(&tx, "ZZ:A", 2, 3).unwrap(), (vec![1, 2], vec![1, 2, 3]));
        assert_eq!(counters::take_in(&tx, "ZZ:A", 0, 1).unwrap(), (vec![], vec![4]));
        assert_eq!(counters::take_in(&tx, "ZZ:A", 1, 0).unwrap(), (vec![3], vec![]));
        tx.commit().unwrap();
        r.set_control_number("ZZ:A", Counter::Interchange, MAX_CONTROL_NUMBER - 1)
            .unwrap();
        r.set_control_number("ZZ:A", Counter::Group, MAX_CONTROL_NUMBER)
            .unwrap();
        let tx = r.conn.transaction().unwrap();
        assert_eq!(
            counters::take_in(&tx, "ZZ:A", 3, 2).unwrap(),
            (vec![MAX_CONTROL_NUMBER, 1, 2], vec![1, 2])
        );
        // More than one statement's block: the numbers still follow each other.
        let (many, none) = counters::take_in(&tx, "ZZ:B", 2_500, 0).unwrap();
        assert!(none.is_empty());
        assert_eq!(many, (1..=2_500).collect::<Vec<u32>>());
        tx.commit().unwrap();
        assert_eq!(
            r.current_control_number("ZZ:A", Counter::Interchange).unwrap(),
            Some(2)
        );
        assert_eq!(r.next_control_number("ZZ:A", Counter::Group).unwrap(), 3);
    }
}

crate::registry::tests::on_both! {
    /// The numbers of several acknowledgments taken together are those taken one after the
    /// other, whatever each needs and whoever it is for.
    fn numbers_taken_together_are_those_taken_one_after_the_other() {
        use crate::registry::counters;
        let wants = [
            ("ZZ:A", 1, 1),
            ("ZZ:B", 1, 0),
            ("ZZ:A", 0, 0),
            ("ZZ:A", 0, 2),
            ("ZZ:B", 1_200, 3),
            ("ZZ:A", 1, 1),
        ];
        let mut one_by_one = Registry::in_memory(US);
        let tx = one_by_one.conn.transaction().unwrap();
        let expected: Vec<_> = wants
            .iter()
            .map(|(partner, a, b)| counters::take_in(&tx, partner, *a, *b).unwrap())
            .collect();
        tx.commit().unwrap();
        let mut together = Registry::in_memory(US);
        let tx = together.conn.transaction().unwrap();
        let got = counters::take_many(&tx, &wants).unwrap();
        tx.commit().unwrap();
        assert_eq!(got, expected);
        assert_eq!(got.get(5), Some(&(vec![2], vec![4])));
    }
}

crate::registry::tests::on_both! {
    /// Each document's JSON reads back byte for byte from its packing, and one whose kept
    /// bytes are damaged is an error of its own that names it, not of the whole read.
    fn a_damaged_body_fails_alone_and_the_others_read_back() {
        let mut r = Registry::in_memory(US);
        let json = br#"{"document":{"key":"ZZ:ACME:850:PO-1"}}"#.repeat(50);
        let packed = Packed::pack(&json);
        let tx = r.conn.transaction().unwrap();
        for id in 1..=3 {
            tx.execute(
                "INSERT INTO documents (key, subject, partner, set_id, role, fingerprint,
                     interchange_key, position, st02, disposition, delivery, by, seen)
                 VALUES (?1, ?1, 'ZZ:ACME', '850', 'original', 'f', 'ZZ:ACME:1', ?2, '0001',
                     'new', 'delivered', 'me', 1)",
                db::params![format!("K{id}"), format!("1/{id}")],
            )
            .unwrap();
        }
        let ids: Vec<i64> = (1..=3).collect();
        tx.execute(
            "INSERT INTO document_bodies (document_id, packed, packing) VALUES (?1, ?2, 'lz4')",
            db::params![ids[0], packed.bytes()],
        )
        .unwrap();
        tx.execute(
            "INSERT INTO document_bodies (document_id, packed, packing) VALUES (?1, ?2, 'lz4')",
            db::params![ids[1], &packed.bytes()[..packed.bytes().len() / 2]],
        )
        .unwrap();
        tx.commit().unwrap();
        let got = r.document_bodies(&ids).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], Some(Ok(json.clone())));
        let damaged = got[1].clone().unwrap().unwrap_err();
        assert!(damaged.contains("document 2"), "{damaged}");
        assert_eq!(got[2], None, "nothing kept for the third");
    }
}
