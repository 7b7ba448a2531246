//! The registry on a PostgreSQL server, for several gateway nodes sharing one registry.
//!
//! The tables are SQLite's, column for column, with PostgreSQL's types (`BIGINT` for every
//! integer, `BYTEA` for blobs, text compared byte by byte with `COLLATE "C"` as SQLite
//! compares it); `instr` is defined as SQLite has it so the shared SQL runs unchanged. The
//! schema's version is kept in `x12gate_schema`, migrated under the writers' lock so that
//! several nodes starting at once migrate once.

use std::sync::Arc;
use std::time::Duration;

use super::db::{read, Conn, Pg};
use crate::config::Postgres;

/// How long the server lets a session sit idle inside a transaction. The registry's
/// transactions run statements back to back; only a node that stopped in the middle of one
/// (power, network) leaves it idle.
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(60);

/// Connecting: the location ([`Postgres`]) is the configuration's.
impl Postgres {
    fn config(&self, read_only: bool) -> Result<tokio_postgres::Config, String> {
        let mut config: tokio_postgres::Config = self
            .url
            .parse()
            .map_err(|e| format!("the database URL does not parse: {e}"))?;
        if config.get_password().is_none() {
            let var = self.password_env.as_deref().unwrap_or("PGPASSWORD");
            match std::env::var(var) {
                Ok(p) => {
                    config.password(p);
                }
                Err(_) if self.password_env.is_some() => {
                    return Err(format!(
                        "the environment variable {var} (database_password_env) is not set"
                    ))
                }
                Err(_) => {}
            }
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_application_name().is_none() {
            config.application_name("x12gate");
        }
        // On every connection, reconnections included: a writer waits for the writers'
        // lock as long as SQLite's busy timeout, and the server ends a session left idle
        // inside a transaction (a node that lost power or its network mid-transaction
        // holds the lock until then, not until TCP notices hours later).
        // The URL's own `options` come last, so they may set other times.
        let mut options = format!(
            "-c lock_timeout={} -c idle_in_transaction_session_timeout={}",
            super::BUSY_TIMEOUT.as_millis(),
            IDLE_IN_TRANSACTION.as_millis()
        );
        if let Some(own) = config.get_options() {
            options.push(' ');
            options.push_str(own);
        }
        if read_only {
            options.push_str(" -c default_transaction_read_only=on");
        }
        config.options(&options);
        Ok(config)
    }

    fn tls(&self) -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if let Some(path) = &self.ca_file {
            use rustls::pki_types::pem::PemObject;
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("database_ca {}: {e}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("database_ca {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("database_ca {}: {e}", path.display()))?;
            }
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
    }

    /// A connection, opened again by the connection itself when the server dropped it;
    /// `read_only`: one that cannot write, reconnections included.
    pub(super) fn connect(&self, read_only: bool) -> Result<Conn, ConnectError> {
        let config = self.config(read_only).map_err(ConnectError::Setup)?;
        let plain = config.get_ssl_mode() == tokio_postgres::config::SslMode::Disable;
        let tls = if plain {
            None
        } else {
            Some(self.tls().map_err(ConnectError::Setup)?)
        };
        // The runtime drives the connection's task only while the registry waits on it.
        let open = move |runtime: &tokio::runtime::Runtime| match &tls {
            None => runtime
                .block_on(config.connect(tokio_postgres::NoTls))
                .map(|(client, connection)| (client, runtime.spawn(connection))),
            Some(tls) => runtime
                .block_on(config.connect(tls.clone()))
                .map(|(client, connection)| (client, runtime.spawn(connection))),
        };
        let pg = Pg::new(Box::new(open)).map_err(ConnectError::Server)?;
        Ok(Conn::Postgres(Box::new(std::cell::RefCell::new(pg))))
    }
}

#[derive(Debug)]
pub(super) enum ConnectError {
    /// The settings are wrong (exit 2).
    Setup(String),
    Server(super::db::Error),
}

/// The schema, version by version; never edit a shipped entry. Version 1 is SQLite's
/// schema as of its version 7; a later SQLite migration gets its counterpart here.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE FUNCTION instr(haystack TEXT, needle TEXT) RETURNS INTEGER
    LANGUAGE sql IMMUTABLE STRICT AS 'SELECT strpos(haystack, needle)';
-- The file names in an event's `acks` list; none when the detail is not such JSON.
CREATE FUNCTION acks_of(detail TEXT) RETURNS SETOF TEXT LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN QUERY SELECT jsonb_array_elements_text(detail::jsonb -> 'acks');
EXCEPTION WHEN others THEN
    RETURN;
END $$;
CREATE TABLE counters (
    partner TEXT COLLATE "C" NOT NULL,
    kind    TEXT COLLATE "C" NOT NULL,
    value   BIGINT NOT NULL CHECK (value BETWEEN 1 AND 999999999),
    PRIMARY KEY (partner, kind)
);
CREATE TABLE interchanges (
    key            TEXT COLLATE "C" PRIMARY KEY,
    partner        TEXT COLLATE "C" NOT NULL,
    control_number TEXT COLLATE "C" NOT NULL,
    fingerprint    TEXT COLLATE "C" NOT NULL,
    state          TEXT COLLATE "C" NOT NULL CHECK (state IN ('in_flight', 'completed', 'failed')),
    owner          TEXT COLLATE "C",
    lease_expires  BIGINT,
    attempts       BIGINT NOT NULL,
    disposition    TEXT COLLATE "C",
    reason_code    TEXT COLLATE "C",
    reason         TEXT COLLATE "C",
    reservation    TEXT COLLATE "C",
    outputs        TEXT COLLATE "C",
    file           TEXT COLLATE "C",
    first_seen     BIGINT NOT NULL,
    last_seen      BIGINT NOT NULL
);
CREATE INDEX interchanges_partner_seen ON interchanges (partner, last_seen);
CREATE TABLE acks (
    key   TEXT COLLATE "C" NOT NULL REFERENCES interchanges (key) ON DELETE CASCADE,
    seq   BIGINT NOT NULL,
    kind  TEXT COLLATE "C" NOT NULL,
    path  TEXT COLLATE "C" NOT NULL,
    bytes BYTEA NOT NULL,
    PRIMARY KEY (key, seq)
);
CREATE TABLE fingerprints (
    key         TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT COLLATE "C" NOT NULL,
    attempt     BIGINT NOT NULL,
    seen        BIGINT NOT NULL,
    PRIMARY KEY (key, attempt)
);
CREATE TABLE groups (
    partner         TEXT COLLATE "C" NOT NULL,
    functional_id   TEXT COLLATE "C" NOT NULL,
    app_sender      TEXT COLLATE "C" NOT NULL,
    app_receiver    TEXT COLLATE "C" NOT NULL,
    control_number  TEXT COLLATE "C" NOT NULL,
    interchange_key TEXT COLLATE "C" NOT NULL,
    seen            BIGINT NOT NULL,
    PRIMARY KEY (partner, functional_id, app_sender, app_receiver, control_number)
);
CREATE TABLE events (
    id             BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    at             BIGINT NOT NULL,
    event          TEXT COLLATE "C" NOT NULL,
    key            TEXT COLLATE "C",
    partner        TEXT COLLATE "C",
    control_number TEXT COLLATE "C",
    disposition    TEXT COLLATE "C",
    detail         TEXT COLLATE "C" NOT NULL
);
CREATE INDEX events_partner_at ON events (partner, at);
CREATE INDEX events_key ON events (key) WHERE key IS NOT NULL;
CREATE INDEX events_at ON events (at) WHERE disposition IS NOT NULL;
CREATE TABLE gateway (
    one            BIGINT PRIMARY KEY CHECK (one = 1),
    id_qualifier   TEXT COLLATE "C" NOT NULL,
    id             TEXT COLLATE "C" NOT NULL,
    installation   TEXT COLLATE "C" NOT NULL,
    created        BIGINT NOT NULL
);
CREATE TABLE documents (
    id               BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    key              TEXT COLLATE "C" NOT NULL,
    subject          TEXT COLLATE "C" NOT NULL,
    partner          TEXT COLLATE "C" NOT NULL,
    set_id           TEXT COLLATE "C" NOT NULL,
    role             TEXT COLLATE "C" NOT NULL CHECK (role IN ('original', 'change', 'copy')),
    version          TEXT COLLATE "C",
    fingerprint      TEXT COLLATE "C" NOT NULL,
    interchange_key  TEXT COLLATE "C" NOT NULL,
    position         TEXT COLLATE "C" NOT NULL,
    st02             TEXT COLLATE "C" NOT NULL,
    disposition      TEXT COLLATE "C" NOT NULL
        CHECK (disposition IN ('new', 'duplicate', 'conflict', 'waiting', 'stale')),
    duplicate_of     BIGINT,
    delivery         TEXT COLLATE "C" NOT NULL
        CHECK (delivery IN ('pending', 'delivered', 'none', 'held', 'parked', 'discarded')),
    by               TEXT COLLATE "C" NOT NULL,
    released_by      BIGINT,
    sequence         BIGINT UNIQUE,
    original_missing BIGINT NOT NULL DEFAULT 0,
    output           TEXT COLLATE "C",
    body             BYTEA,
    seen             BIGINT NOT NULL,
    delivered_at     BIGINT,
    result_ref       TEXT COLLATE "C",
    UNIQUE (interchange_key, position, fingerprint)
);
CREATE TABLE document_sequence (
    one   BIGINT PRIMARY KEY CHECK (one = 1),
    value BIGINT NOT NULL
);
CREATE INDEX documents_key ON documents (key, fingerprint);
CREATE INDEX documents_subject ON documents (subject, role);
CREATE INDEX documents_released_by ON documents (released_by) WHERE released_by IS NOT NULL;
CREATE INDEX documents_open ON documents (delivery) WHERE delivery IN ('pending', 'held', 'parked');
CREATE INDEX documents_seen ON documents (seen);
CREATE TABLE deliveries (
    id              BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    document_id     BIGINT NOT NULL,
    key             TEXT COLLATE "C" NOT NULL,
    destination     TEXT COLLATE "C" NOT NULL,
    partner         TEXT COLLATE "C" NOT NULL,
    interchange_key TEXT COLLATE "C" NOT NULL,
    correlation_id  TEXT COLLATE "C" NOT NULL,
    file            TEXT COLLATE "C" NOT NULL,
    state           TEXT COLLATE "C" NOT NULL
        CHECK (state IN ('queued', 'retrying', 'dead', 'delivered')),
    attempts        BIGINT NOT NULL DEFAULT 0,
    queued_by       TEXT COLLATE "C" NOT NULL,
    owner           TEXT COLLATE "C",
    lease_expires   BIGINT,
    next_at         BIGINT NOT NULL,
    created         BIGINT NOT NULL,
    last_at         BIGINT,
    last_status     TEXT COLLATE "C",
    last_error      TEXT COLLATE "C",
    delivered_at    BIGINT,
    result_ref      TEXT COLLATE "C",
    idempotency_key TEXT COLLATE "C" NOT NULL,
    UNIQUE (document_id, destination)
);
CREATE INDEX deliveries_due ON deliveries (destination, next_at)
    WHERE state IN ('queued', 'retrying');
CREATE INDEX deliveries_key ON deliveries (key);
CREATE INDEX deliveries_interchange ON deliveries (interchange_key);
CREATE INDEX deliveries_document ON deliveries (document_id);
CREATE TABLE circuits (
    destination   TEXT COLLATE "C" PRIMARY KEY,
    state         TEXT COLLATE "C" NOT NULL CHECK (state IN ('closed', 'open', 'probing')),
    failures      BIGINT NOT NULL,
    open_until    BIGINT,
    probe_owner   TEXT COLLATE "C",
    probe_expires BIGINT,
    changed       BIGINT NOT NULL
);
"#,
    r#"
DROP INDEX documents_key;
DROP INDEX documents_subject;
CREATE INDEX documents_key_first ON documents (key, fingerprint, id);
CREATE INDEX documents_key_id ON documents (key, id);
CREATE INDEX documents_subject_first ON documents (subject, role, id);
CREATE INDEX documents_subject_delivery ON documents (subject, delivery);
"#,
    r#"
CREATE TABLE ack_parts (
    key   TEXT COLLATE "C" NOT NULL,
    seq   BIGINT NOT NULL,
    part  BIGINT NOT NULL,
    bytes BYTEA NOT NULL,
    PRIMARY KEY (key, seq, part),
    FOREIGN KEY (key, seq) REFERENCES acks (key, seq) ON DELETE CASCADE
);
"#,
    r#"
ALTER TABLE deliveries ADD COLUMN subject TEXT COLLATE "C", ADD COLUMN sequence BIGINT,
    ADD COLUMN failures BIGINT NOT NULL DEFAULT 0;
UPDATE deliveries SET
    subject = COALESCE((SELECT d.subject FROM documents d WHERE d.id = deliveries.document_id), key),
    sequence = (SELECT d.sequence FROM documents d WHERE d.id = deliveries.document_id),
    failures = attempts;
ALTER TABLE deliveries ALTER COLUMN subject SET NOT NULL;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_state_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('queued', 'retrying', 'blocked', 'dead', 'delivered', 'discarded'));
CREATE INDEX deliveries_order ON deliveries (destination, subject, sequence)
    WHERE state != 'delivered';
"#,
    r#"
CREATE TABLE document_bodies (
    document_id BIGINT PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE,
    body        BYTEA NOT NULL
);
"#,
    // Compressed by x12gate already (registry/bodies.rs, and the migration of SQLite's 12):
    // TOAST's own compression would only spend time finding that out.
    r#"
ALTER TABLE document_bodies RENAME COLUMN body TO packed;
ALTER TABLE document_bodies ADD COLUMN packing TEXT COLLATE "C" NOT NULL DEFAULT 'none'
    CHECK (packing IN ('none', 'lz4'));
ALTER TABLE document_bodies ALTER COLUMN packed SET STORAGE EXTERNAL;
DROP INDEX IF EXISTS deliveries_document;
"#,
    r#"
CREATE TABLE outbound (
    key             TEXT COLLATE "C" PRIMARY KEY,
    partner         TEXT COLLATE "C" NOT NULL,
    set_id          TEXT COLLATE "C" NOT NULL,
    document_id     TEXT COLLATE "C" NOT NULL,
    fingerprint     TEXT COLLATE "C" NOT NULL,
    idempotency_key TEXT COLLATE "C",
    state           TEXT COLLATE "C" NOT NULL CHECK (state IN ('writing', 'sent')),
    owner           TEXT COLLATE "C",
    lease_expires   BIGINT,
    isa13           BIGINT NOT NULL,
    gs06            BIGINT NOT NULL,
    st02            TEXT COLLATE "C" NOT NULL,
    file            TEXT COLLATE "C" NOT NULL,
    bytes           BYTEA NOT NULL,
    created         BIGINT NOT NULL,
    sent_at         BIGINT,
    ack             TEXT COLLATE "C" NOT NULL DEFAULT 'waiting' CHECK (ack IN ('waiting',
        'not_expected', 'accepted', 'accepted_with_errors', 'partially_accepted', 'rejected')),
    ack_kind        TEXT COLLATE "C",
    ack_detail      TEXT,
    ack_at          BIGINT,
    ack_late        BIGINT NOT NULL DEFAULT 0,
    ack_due         BIGINT,
    acks_seen       BIGINT NOT NULL DEFAULT 0,
    resends         BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX outbound_numbers ON outbound (partner, isa13);
CREATE INDEX outbound_groups ON outbound (partner, gs06);
CREATE INDEX outbound_created ON outbound (created);
CREATE INDEX outbound_writing ON outbound (created) WHERE state = 'writing';
CREATE TABLE unmatched_acks (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    partner         TEXT COLLATE "C" NOT NULL,
    kind            TEXT COLLATE "C" NOT NULL,
    what            TEXT NOT NULL,
    interchange_key TEXT COLLATE "C" NOT NULL,
    seen            BIGINT NOT NULL
);
"#,
    r#"
CREATE TABLE outbound_interchanges (
    partner TEXT COLLATE "C" NOT NULL,
    isa13   BIGINT NOT NULL,
    file    TEXT COLLATE "C" NOT NULL,
    bytes   BYTEA NOT NULL,
    created BIGINT NOT NULL,
    moved   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (partner, isa13)
);
INSERT INTO outbound_interchanges (partner, isa13, file, bytes, created)
    SELECT partner, isa13, file, bytes, created FROM outbound;
ALTER TABLE outbound DROP COLUMN bytes;
DROP INDEX outbound_numbers;
CREATE INDEX outbound_numbers ON outbound (partner, isa13);
CREATE UNIQUE INDEX outbound_sets ON outbound (partner, gs06, st02);
"#,
];

pub(super) fn known() -> i64 {
    MIGRATIONS.len() as i64
}

/// The schema version of the database `conn` is connected to; 0 when it holds no registry.
pub(super) fn version(conn: &Conn) -> super::db::Result<i64> {
    let present: Option<String> = conn.query_row(
        "SELECT CAST(to_regclass('x12gate_schema') AS TEXT)",
        [],
        read,
    )?;
    if present.is_none() {
        return Ok(0);
    }
    conn.query_row(
        "SELECT max(version) FROM x12gate_schema",
        [],
        read::<Option<i64>>,
    )
    .map(|v| v.unwrap_or(0))
}

pub(super) enum Migrated {
    Done,
    TooNew { found: i64, known: i64 },
}

/// Brings the schema up to date in one transaction under the writers' lock.
pub(super) fn migrate(conn: &mut Conn) -> super::db::Result<Migrated> {
    // Up to date: only read, so that a node starts while another holds the writers' lock
    // (frozen in the middle of a transaction); its work then waits for the lock as a running
    // node's does.
    if version(conn)? == known() {
        return Ok(Migrated::Done);
    }
    let tx = conn.transaction()?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS x12gate_schema (version BIGINT PRIMARY KEY, applied BIGINT NOT NULL)",
    )?;
    let found = version(&tx)?;
    let known = known();
    if found > known {
        return Ok(Migrated::TooNew { found, known });
    }
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(found).unwrap_or(0))
    {
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO x12gate_schema (version, applied) VALUES (?1, ?2)",
            super::db::params![i as i64 + 1, super::now_ms()],
        )?;
    }
    tx.commit()?;
    Ok(Migrated::Done)
}
