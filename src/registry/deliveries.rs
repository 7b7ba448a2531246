//! The outbox: one row per document and destination, queued in the transaction that
//! completes the document's interchange (or its release), so that a document is never sent
//! without being recorded, nor recorded without being queued. A deliverer claims due rows
//! with a lease, as interchanges are claimed, so that no two processes send one row at once;
//! its outcome is written only while it still holds the lease (the fence). Each destination
//! has one circuit, shared by every process on the registry, so that an outage costs one
//! probe per cool-down however many deliverers run.

use crate::registry::db::{from_row, params, read, OptionalExtension};
use serde::Serialize;

use super::claims::now_ms;
use super::{Batch, EventKind, Registry, RegistryError};

crate::words::words! {
    /// Where a delivery stands (the `state` column).
    pub enum DeliveryState as as_str {
        /// Waiting for its first attempt.
        Queued = "queued",
        /// Failed at least once; tried again at `next_at`.
        Retrying = "retrying",
        /// Behind a dead delivery of an earlier document of its PO (its subject) to the same
        /// destination: sent once that one is retried and delivered, never before.
        Blocked = "blocked",
        /// Given up (a permanent refusal, or out of attempts or time): an operator's.
        Dead = "dead",
        Delivered = "delivered",
        /// Dead, then let go by an operator (`deliveries discard`): never sent, and no longer
        /// holding its PO's later documents.
        Discarded = "discarded",
    }
}

crate::words::words! {
    /// A destination's circuit (the `circuits.state` column).
    pub enum CircuitState as as_str {
        Closed = "closed",
        /// Too many failures in a row: nothing is sent until `open_until`.
        Open = "open",
        /// One process sends one delivery to learn whether the destination is back.
        Probing = "probing",
    }
}

/// A document handed to a destination, as the completing transaction queues it.
#[derive(Debug, Clone)]
pub struct Queue<'a> {
    pub document_id: i64,
    pub key: &'a str,
    /// What the destination dedupes by: the document key, or for a conflict an operator
    /// released, the key with the sighting's number (its content is not the key's first).
    pub idempotency_key: &'a str,
    pub destination: &'a str,
    pub partner: &'a str,
    pub interchange_key: &'a str,
    pub correlation_id: &'a str,
    /// The document's file (in `out/`), sent as it is.
    pub file: &'a str,
    /// The process that queued it (`process` delivers what it queued itself).
    pub queued_by: &'a str,
}

/// A delivery claimed for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub id: i64,
    pub document_id: i64,
    pub key: String,
    pub idempotency_key: String,
    pub destination: String,
    pub partner: String,
    pub interchange_key: String,
    pub correlation_id: String,
    pub file: String,
    /// Attempts made before this one.
    pub attempts: u32,
    /// Of those, the failures that count against `max_attempts` (not the probes').
    pub failures: u32,
    pub created_ms: i64,
    /// The document its changes are about, and its place in the order of deliveries.
    pub subject: String,
    pub sequence: Option<i64>,
}

/// What an attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempted {
    /// Taken (or already booked before): with the business system's reference, if any.
    Delivered {
        status: String,
        result_ref: Option<String>,
    },
    /// Refused for good (a 4xx other than 409): dead at once.
    Refused { status: String, error: String },
    /// Failed in a way that may pass (5xx, a timeout, no connection): tried again.
    Failed { status: String, error: String },
    /// Never reached the destination (its file gone or unreadable here, a program that
    /// cannot start): dead at once when `permanent`, else tried again; either way the
    /// destination's circuit is left as it is, since the destination was not asked.
    Unsent {
        status: String,
        error: String,
        permanent: bool,
    },
}

/// Which deliveries [`Registry::claim_deliveries`] takes: up to `limit` of `destination`
/// due by `due_ms`; with `queued_by`, only those that process queued.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    pub destination: &'a str,
    pub limit: usize,
    pub due_ms: i64,
    pub queued_by: Option<&'a str>,
}

/// The limits an outcome is judged by: the destination's settings.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub max_attempts: u32,
    pub max_age_ms: i64,
    pub circuit_failures: u32,
    pub cooldown_ms: i64,
}

/// What recording an attempt changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub state: DeliveryState,
    pub attempts: u32,
    /// Deliveries of later documents of its PO that this dead one now blocks.
    pub blocked: usize,
    /// The circuit's new state, when this attempt changed it.
    pub circuit: Option<CircuitState>,
    /// Whether the circuit is open after it (by this attempt or another deliverer's).
    pub open: bool,
}

/// Whether a destination may be sent to now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Closed: send.
    Closed,
    /// This process won the probe: send one delivery.
    Probe,
    /// Open, or another process is probing: nothing before this time.
    Wait { until_ms: i64 },
}

/// One delivery as `deliveries` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryRow {
    pub id: i64,
    pub key: String,
    pub destination: String,
    pub partner: String,
    pub interchange: String,
    pub correlation_id: String,
    pub state: DeliveryState,
    pub attempts: u32,
    pub last_status: Option<String>,
    pub last_error: Option<String>,
    pub result_ref: Option<String>,
    pub file: String,
    pub created_ms: i64,
    pub next_ms: i64,
    pub last_ms: Option<i64>,
    pub delivered_ms: Option<i64>,
    /// The process sending it now, if any.
    pub claimed_by: Option<String>,
    /// What it is sent with as `Idempotency-Key`.
    pub idempotency_key: String,
    /// The document its changes are about (a PO): its deliveries go out one at a time, in
    /// `sequence` order.
    pub subject: String,
    pub sequence: Option<i64>,
    /// Failed attempts that count against `max_attempts`: those made while the circuit was
    /// closed (a failed probe does not count).
    pub failures: u32,
}

/// Which deliveries a page lists.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeliveryFilter<'a> {
    pub state: Option<DeliveryState>,
    pub partner: Option<&'a str>,
    pub destination: Option<&'a str>,
    pub since_ms: Option<i64>,
}

/// What the overview says of a destination besides its counts.
#[derive(Debug, Clone, Default)]
pub struct DestinationLast {
    pub destination: String,
    pub delivered_ms: Option<i64>,
    pub failed_ms: Option<i64>,
    pub status: Option<String>,
    pub error: Option<String>,
}

/// A circuit as `circuit_gate` reads it: state, open until, prober, probe expiry.
type CircuitRow = (CircuitState, Option<i64>, Option<String>, Option<i64>);

/// A circuit as `circuits` lists it: destination, state, failures in a row, open until.
pub type Circuit = (String, CircuitState, u32, Option<i64>);

/// Which dead deliveries `retry` puts back.
pub enum Retry<'a> {
    Key(&'a str),
    AllDead,
}

/// The status of an attempt whose answer was not a whole, well-formed HTTP answer (cut off
/// mid-body, a body that is not what its framing says, a status line or header that does not
/// parse): never a delivery, tried again on a connection of its own, and counted
/// (`x12gate_destination_protocol_errors_total`). The registry's word: it counts them.
pub const PROTOCOL_ERROR: &str = "protocol";

/// The longest status, error or reference kept: an answer's body never fills the registry.
const KEPT: usize = 300;

fn kept(text: &str) -> String {
    crate::text::shortened(&crate::text::printable(text), KEPT).into_owned()
}

/// What an attempt's `outcome` makes of its row: (state, status, error, the business
/// system's reference), each as stored. A failure that may pass is retried unless the row
/// `dies` of it (out of attempts, or too old).
fn settled(
    outcome: &Attempted,
    dies: bool,
) -> (DeliveryState, String, Option<String>, Option<String>) {
    let (state, status, error, reference) = match outcome {
        Attempted::Delivered { status, result_ref } => (
            DeliveryState::Delivered,
            status,
            None,
            result_ref.as_deref().map(kept),
        ),
        Attempted::Refused { status, error }
        | Attempted::Unsent {
            status,
            error,
            permanent: true,
        } => (DeliveryState::Dead, status, Some(kept(error)), None),
        Attempted::Failed { status, error }
        | Attempted::Unsent {
            status,
            error,
            permanent: false,
        } => (
            if dies {
                DeliveryState::Dead
            } else {
                DeliveryState::Retrying
            },
            status,
            Some(kept(error)),
            None,
        ),
    };
    (state, kept(status), error, reference)
}

/// What `confirm` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Confirmed {
    /// No delivered sighting of the document.
    Unknown,
    /// Recorded; the reference it replaced, if any.
    Recorded(Option<String>),
    /// Not recorded: the document has this other reference (`force` replaces it).
    Kept(String),
}

/// A delivery queued for a document, blocked when an earlier one of its subject is dead or
/// blocked (read by `deliveries_order`, see [`IN_TURN`]).
const QUEUE: &str =
    "INSERT INTO deliveries (document_id, key, destination, partner, interchange_key,
             correlation_id, file, state, queued_by, next_at, created, idempotency_key,
             subject, sequence)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7,
             CASE WHEN EXISTS (SELECT 1 FROM deliveries e, documents d
                 WHERE d.id = ?1 AND e.destination = ?3 AND e.subject = d.subject
                 AND e.sequence < d.sequence AND e.state IN ('dead', 'blocked')
                 AND e.state != 'delivered')
             THEN 'blocked' ELSE 'queued' END,
             ?8, ?9, ?9, ?10,
             COALESCE((SELECT subject FROM documents WHERE id = ?1), ?2),
             (SELECT sequence FROM documents WHERE id = ?1))
         ON CONFLICT (document_id, destination) DO NOTHING";

impl Batch<'_> {
    /// Records one attempt at `c`, if `owner` still holds its lease (`None` otherwise: the
    /// row was taken over, and its new owner records its own attempt). The next retry, if
    /// any, is `retry_in_ms` from now. The attempt is in the audit trail with its status and
    /// duration, and moves the destination's circuit.
    pub fn record_attempt(
        &self,
        c: &Claimed,
        owner: &str,
        outcome: &Attempted,
        duration_ms: u64,
        policy: Policy,
        retry_in_ms: i64,
    ) -> Result<Option<Recorded>, RegistryError> {
        let b = self;
        let now = now_ms();
        let attempts = c.attempts.saturating_add(1);
        let old = now.saturating_sub(c.created_ms) >= policy.max_age_ms;
        let circuit = read_circuit(&b.tx, &c.destination).map_err(|e| b.sql(e))?;
        // A probe tells whether the destination is back, not whether this document can be
        // delivered: its failure costs the row nothing, so an outage of any length (shorter
        // than max_age) dead-letters nothing.
        let probe = circuit.0 == CircuitState::Probing && circuit.2.as_deref() == Some(owner);
        let failures = match outcome {
            Attempted::Failed { .. } | Attempted::Unsent { .. } if !probe => {
                c.failures.saturating_add(1)
            }
            _ => c.failures,
        };
        let dies = failures >= policy.max_attempts || old;
        let (state, status, error, reference) = settled(outcome, dies);
        let changed =
            b.tx.prepare_cached(
                "UPDATE deliveries SET state = ?3, attempts = ?4, last_at = ?5,
                     last_status = ?6, last_error = ?7,
                     result_ref = COALESCE(?8, result_ref),
                     delivered_at = CASE WHEN ?3 = 'delivered' THEN CAST(?5 AS BIGINT) END,
                     next_at = CASE WHEN ?3 = 'retrying' THEN ?9 ELSE next_at END,
                     owner = NULL, lease_expires = NULL, failures = ?10
                 WHERE id = ?1 AND owner = ?2",
            )
            .and_then(|mut s| {
                s.execute(params![
                    c.id,
                    owner,
                    state,
                    attempts,
                    now,
                    status,
                    error,
                    reference,
                    now.saturating_add(retry_in_ms),
                    failures
                ])
            })
            .map_err(|e| b.sql(e))?;
        if changed == 0 {
            return Ok(None);
        }
        if let Some(reference) = &reference {
            b.tx.prepare_cached(
                "UPDATE documents SET result_ref = ?2 WHERE id = ?1 AND result_ref IS NULL",
            )
            .and_then(|mut s| s.execute(params![c.document_id, reference]))
            .map_err(|e| b.sql(e))?;
        }
        // The later documents of its PO wait for an operator's retry of this one.
        let blocked = if state == DeliveryState::Dead {
            b.tx.prepare_cached(
                "UPDATE deliveries SET state = 'blocked'
                 WHERE destination = ?1 AND subject = ?2 AND sequence > ?3
                 AND state IN ('queued', 'retrying')",
            )
            .and_then(|mut s| s.execute(params![c.destination, c.subject, c.sequence]))
            .map_err(|e| b.sql(e))?
        } else {
            0
        };
        let (now_state, circuit) =
            move_circuit(&b.tx, &c.destination, circuit, outcome, policy, now)
                .map_err(|e| b.sql(e))?;
        let detail = serde_json::json!({
            "document": c.key,
            "destination": c.destination,
            "attempt": attempts,
            "status": status,
            "duration_ms": duration_ms,
            "state": state,
            "probe": probe,
            "blocked": blocked,
            "error": error,
            "result_ref": reference,
            "circuit": circuit,
        });
        // The delivering attempt is an event of its own: the history's `delivered` line.
        let kind = if state == DeliveryState::Delivered {
            EventKind::Delivered
        } else {
            EventKind::DeliveryAttempt
        };
        // A file written into `out/` is no event of its own: the interchange's names it
        // already, and a history of one line per document would hide what happened.
        let quiet = kind == EventKind::Delivered && c.destination == crate::config::OUT;
        if !quiet {
            // Under its interchange's control number too, so `history --control-number` has it.
            b.record_note(
                kind,
                Some(&c.interchange_key),
                Some(&c.partner),
                c.interchange_key.rsplit(':').next(),
                &detail.to_string(),
            )?;
        }
        Ok(Some(Recorded {
            state,
            attempts,
            blocked,
            circuit,
            open: now_state != CircuitState::Closed,
        }))
    }

    /// Queues a document for its destination, in its place among its PO's documents there
    /// (`blocked` already when an earlier one is dead); a takeover's second queueing is a
    /// no-op.
    pub fn queue_delivery(&self, q: &Queue<'_>) -> Result<(), RegistryError> {
        let now = now_ms();
        self.tx
            .prepare_cached(QUEUE)
            .and_then(|mut s| {
                s.execute(params![
                    q.document_id,
                    q.key,
                    q.destination,
                    q.partner,
                    q.interchange_key,
                    q.correlation_id,
                    q.file,
                    q.queued_by,
                    now,
                    q.idempotency_key
                ])
            })
            .map(drop)
            .map_err(|e| self.sql(e))
    }

    /// The business system's reference for each of `keys`, from the first sighting of each
    /// that has one, in order (one round trip for them all on PostgreSQL).
    pub fn result_refs(&self, keys: &[&str]) -> Result<Vec<Option<String>>, RegistryError> {
        result_refs(&self.tx, keys).map_err(|e| self.sql(e))
    }
}

/// The first reference the business system gave for a document key.
const RESULT_REF: &str =
    "SELECT result_ref FROM documents WHERE key = ?1 AND result_ref IS NOT NULL
         ORDER BY id LIMIT 1";

fn result_refs(
    conn: &crate::registry::db::Conn,
    keys: &[&str],
) -> crate::registry::db::Result<Vec<Option<String>>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let runs: Vec<Vec<crate::registry::db::Value>> = keys
        .iter()
        .map(|k| vec![crate::registry::db::Value::Text((*k).to_string())])
        .collect();
    let found = conn.query_each(RESULT_REF, &runs, read::<String>)?;
    Ok(found
        .into_iter()
        .map(|rows| rows.into_iter().next())
        .collect())
}

from_row!(
    Claimed,
    CLAIMED {
        id: "id",
        document_id: "document_id",
        key: "key",
        destination: "destination",
        partner: "partner",
        interchange_key: "interchange_key",
        correlation_id: "correlation_id",
        file: "file",
        attempts: "attempts",
        created_ms: "created",
        idempotency_key: "idempotency_key",
        failures: "failures",
        subject: "subject",
        sequence: "sequence",
    }
);

/// A row's turn at its destination: no earlier document of its PO is still to be settled
/// there (a row queued, retrying, in flight, blocked or dead), nor still being written (its
/// row not queued yet). Checked in the claim itself, so it holds across deliverers and
/// nodes, and it leaves at most one row of a PO claimable at a time.
/// Where the dead deliveries of document `key` (of every document, without) stand:
/// (destination, subject), what their blocked followers are found by.
fn dead_places(b: &Batch<'_>, key: Option<&str>) -> Result<Vec<(String, String)>, RegistryError> {
    b.tx.prepare_cached(
        "SELECT DISTINCT destination, subject FROM deliveries
         WHERE state = 'dead' AND (key = ?1 OR ?1 IS NULL)",
    )
    .and_then(|mut s| {
        s.query_map(params![key], read)?
            .collect::<Result<Vec<_>, _>>()
    })
    .map_err(|e| b.sql(e))
}

/// Puts back in the queue the blocked deliveries of each (destination, subject) that no dead
/// one holds any more (their age counts from now: they never had their turn); how many.
fn release_blocked(
    b: &Batch<'_>,
    places: &[(String, String)],
    now: i64,
) -> Result<usize, RegistryError> {
    let mut released = 0;
    for (destination, subject) in places {
        released +=
            b.tx.prepare_cached(
                "UPDATE deliveries SET state = 'queued', next_at = ?3, created = ?3
                 WHERE destination = ?1 AND subject = ?2 AND state = 'blocked'
                 AND state != 'delivered'
                 AND NOT EXISTS (SELECT 1 FROM deliveries e
                     WHERE e.destination = deliveries.destination
                     AND e.subject = deliveries.subject
                     AND e.sequence < deliveries.sequence AND e.state = 'dead'
                     AND e.state != 'delivered')",
            )
            .and_then(|mut s| s.execute(params![destination, subject, now]))
            .map_err(|e| b.sql(e))?;
    }
    Ok(released)
}

/// Whether a delivery's turn has come. Every read of the earlier deliveries of a subject
/// says `state != 'delivered'`, though its other terms imply it: SQLite uses the partial index
/// `deliveries_order` only for a query that names the index's own condition, and without it
/// each delivery queued or claimed scanned every delivery (quadratic in the outbox: 132 s
/// instead of 14 s for `process --no-deliver` of 28,728 documents to one HTTP destination).
const IN_TURN: &str = "NOT EXISTS (SELECT 1 FROM deliveries e
        WHERE e.destination = deliveries.destination AND e.subject = deliveries.subject
        AND e.sequence < deliveries.sequence AND e.state NOT IN ('delivered', 'discarded')
        AND e.state != 'delivered')
    AND NOT EXISTS (SELECT 1 FROM documents d WHERE d.subject = deliveries.subject
        AND d.sequence < deliveries.sequence AND d.delivery = 'pending')";

from_row!(DeliveryRow, pub(super) ROW {
    id: "id",
    key: "key",
    destination: "destination",
    partner: "partner",
    interchange: "interchange_key",
    correlation_id: "correlation_id",
    state: "state",
    attempts: "attempts",
    last_status: "last_status",
    last_error: "last_error",
    result_ref: "result_ref",
    file: "file",
    created_ms: "created",
    next_ms: "next_at",
    last_ms: "last_at",
    delivered_ms: "delivered_at",
    claimed_by: "owner",
    idempotency_key: "idempotency_key",
    subject: "subject",
    sequence: "sequence",
    failures: "failures",
});

impl Registry {
    /// Claims the deliveries `wanted` for `owner`, leased for `lease_ms`: unclaimed ones,
    /// ones whose lease ran out, and ones of a dead process.
    pub fn claim_deliveries(
        &mut self,
        wanted: Wanted<'_>,
        owner: &str,
        lease_ms: i64,
        is_dead: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<Claimed>, RegistryError> {
        let Wanted {
            destination,
            limit,
            due_ms,
            queued_by,
        } = wanted;
        self.batch(|b| {
            let now = now_ms();
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let mut found: Vec<(Claimed, Option<String>)> =
                b.tx.prepare_cached(&format!(
                    "SELECT {CLAIMED}, owner FROM deliveries
                     WHERE destination = ?1 AND state IN ('queued', 'retrying') AND next_at <= ?5
                     AND (queued_by = ?3 OR ?3 IS NULL)
                     AND (owner IS NULL OR lease_expires < ?2) AND {IN_TURN}
                     ORDER BY next_at, id LIMIT ?4"
                ))
                .and_then(|mut s| {
                    s.query_map(
                        params![destination, now, queued_by, limit, due_ms.min(now)],
                        read,
                    )?
                    .collect::<Result<Vec<_>, _>>()
                })
                .map_err(|e| b.sql(e))?;
            if (found.len() as i64) < limit {
                // Leases still running, of processes that are gone: adopted at once.
                let owners: Vec<String> =
                    b.tx.prepare_cached(
                        "SELECT DISTINCT owner FROM deliveries
                         WHERE destination = ?1 AND state IN ('queued', 'retrying')
                         AND owner IS NOT NULL AND lease_expires >= ?2 AND owner != ?3",
                    )
                    .and_then(|mut s| {
                        s.query_map(params![destination, now, owner], read)?
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .map_err(|e| b.sql(e))?;
                for dead in owners.iter().filter(|o| is_dead(o)) {
                    let more = limit - found.len() as i64;
                    if more <= 0 {
                        break;
                    }
                    let rows =
                        b.tx.prepare_cached(&format!(
                            "SELECT {CLAIMED}, owner FROM deliveries
                             WHERE destination = ?1 AND state IN ('queued', 'retrying')
                             AND next_at <= ?2 AND owner = ?3 AND (queued_by = ?4 OR ?4 IS NULL)
                             AND {IN_TURN}
                             ORDER BY next_at, id LIMIT ?5"
                        ))
                        .and_then(|mut s| {
                            s.query_map(
                                params![destination, due_ms.min(now), dead, queued_by, more],
                                read,
                            )?
                            .collect::<Result<Vec<_>, _>>()
                        })
                        .map_err(|e| b.sql(e))?;
                    found.extend(rows);
                }
            }
            for (c, _) in &found {
                b.tx.prepare_cached(
                    "UPDATE deliveries SET owner = ?2, lease_expires = ?3 WHERE id = ?1",
                )
                .and_then(|mut s| s.execute(params![c.id, owner, now.saturating_add(lease_ms)]))
                .map_err(|e| b.sql(e))?;
            }
            Ok(found.into_iter().map(|(c, _)| c).collect())
        })
    }

    /// Extends `owner`'s lease of each of `ids` by `lease_ms`, just before they are sent;
    /// returns those it still held (a row whose lease ran out may be another deliverer's
    /// now, and is not sent again by this one).
    pub fn renew_deliveries(
        &mut self,
        owner: &str,
        ids: &[i64],
        lease_ms: i64,
    ) -> Result<Vec<i64>, RegistryError> {
        self.batch(|b| {
            let now = now_ms();
            let mut held = Vec::new();
            for id in ids {
                let n =
                    b.tx.prepare_cached(
                        "UPDATE deliveries SET lease_expires = ?3
                         WHERE id = ?1 AND owner = ?2 AND lease_expires > ?4
                         AND state IN ('queued', 'retrying')",
                    )
                    .and_then(|mut s| {
                        s.execute(params![id, owner, now.saturating_add(lease_ms), now])
                    })
                    .map_err(|e| b.sql(e))?;
                if n > 0 {
                    held.push(*id);
                }
            }
            Ok(held)
        })
    }

    /// When each of `destinations` next has a row this deliverer could send (of
    /// `queued_by`, when given): its retry time, or when another live deliverer's lease of
    /// it ends (a dead one's is taken over at once), and never before the destination's
    /// circuit lets anything through.
    pub fn next_sendable(
        &self,
        destinations: &[&str],
        queued_by: Option<&str>,
        is_dead: &dyn Fn(&str) -> bool,
    ) -> Result<Option<i64>, RegistryError> {
        let now = now_ms();
        let mut earliest: Option<i64> = None;
        for d in destinations {
            // (owner, earliest retry, earliest lease end); no owner: free or expired.
            let rows: Vec<(Option<String>, i64, i64)> = self
                .conn
                .prepare_cached(&format!(
                    "SELECT CASE WHEN lease_expires > ?3 THEN owner END AS holder,
                         MIN(next_at), MIN(COALESCE(lease_expires, 0))
                     FROM deliveries WHERE destination = ?1 AND state IN ('queued', 'retrying')
                     AND (queued_by = ?2 OR ?2 IS NULL) AND {IN_TURN}
                     GROUP BY holder"
                ))
                .and_then(|mut s| {
                    s.query_map(params![d, queued_by, now], read)?
                        .collect::<Result<Vec<_>, _>>()
                })
                .map_err(|e| self.sql(e))?;
            let due = rows
                .into_iter()
                .map(|(holder, next_at, lease)| match holder {
                    Some(h) if !is_dead(&h) => next_at.max(lease),
                    _ => next_at,
                })
                .min();
            let Some(mut due) = due else { continue };
            let gate: Option<(CircuitState, Option<i64>, Option<i64>)> = self
                .conn
                .prepare_cached(
                    "SELECT state, open_until, probe_expires FROM circuits WHERE destination = ?1",
                )
                .and_then(|mut s| s.query_row([d], read).optional())
                .map_err(|e| self.sql(e))?;
            match gate {
                Some((CircuitState::Open, until, _)) => due = due.max(until.unwrap_or(0)),
                Some((CircuitState::Probing, _, expires)) => due = due.max(expires.unwrap_or(0)),
                _ => {}
            }
            earliest = Some(earliest.map_or(due, |e| e.min(due)));
        }
        Ok(earliest)
    }

    /// Gives back deliveries claimed but not sent (a circuit opened, a stop).
    pub fn unclaim_deliveries(&mut self, owner: &str, ids: &[i64]) -> Result<(), RegistryError> {
        self.batch(|b| {
            for id in ids {
                b.tx.prepare_cached(
                    "UPDATE deliveries SET owner = NULL, lease_expires = NULL
                     WHERE id = ?1 AND owner = ?2",
                )
                .and_then(|mut s| s.execute(params![id, owner]))
                .map_err(|e| b.sql(e))?;
            }
            Ok(())
        })
    }

    /// Records one attempt at `c`, if `owner` still holds its lease (`None` otherwise: the
    /// row was taken over, and its new owner records its own attempt). The next retry, if
    /// any, is `retry_in_ms` from now. The attempt is in the audit trail with its status and
    /// duration, and moves the destination's circuit.
    pub fn record_attempt(
        &mut self,
        c: &Claimed,
        owner: &str,
        outcome: &Attempted,
        duration_ms: u64,
        policy: Policy,
        retry_in_ms: i64,
    ) -> Result<Option<Recorded>, RegistryError> {
        self.batch(|b| b.record_attempt(c, owner, outcome, duration_ms, policy, retry_in_ms))
    }

    /// Whether `destination` may be sent to now, and if its circuit is open and cooled down,
    /// whether `owner` is the one to probe it (for `probe_ms`).
    pub fn circuit_gate(
        &mut self,
        destination: &str,
        owner: &str,
        probe_ms: i64,
        is_dead: &dyn Fn(&str) -> bool,
    ) -> Result<Gate, RegistryError> {
        self.batch(|b| {
            let now = now_ms();
            let found: Option<CircuitRow> =
                b.tx.prepare_cached(
                    "SELECT state, open_until, probe_owner, probe_expires FROM circuits
                     WHERE destination = ?1",
                )
                .and_then(|mut s| s.query_row([destination], read).optional())
                .map_err(|e| b.sql(e))?;
            let probe = match found {
                None | Some((CircuitState::Closed, ..)) => return Ok(Gate::Closed),
                Some((CircuitState::Open, until, ..)) => {
                    let until = until.unwrap_or(0);
                    if now < until {
                        return Ok(Gate::Wait { until_ms: until });
                    }
                    true
                }
                Some((CircuitState::Probing, _, prober, expires)) => {
                    let expires = expires.unwrap_or(0);
                    let gone = now >= expires || prober.as_deref().is_some_and(is_dead);
                    if !gone {
                        return Ok(Gate::Wait { until_ms: expires });
                    }
                    true
                }
            };
            debug_assert!(probe);
            b.tx.prepare_cached(
                "UPDATE circuits SET state = 'probing', probe_owner = ?2, probe_expires = ?3,
                     changed = ?4
                 WHERE destination = ?1",
            )
            .and_then(|mut s| {
                s.execute(params![
                    destination,
                    owner,
                    now.saturating_add(probe_ms),
                    now
                ])
            })
            .map_err(|e| b.sql(e))?;
            Ok(Gate::Probe)
        })
    }

    /// Gives a won probe back unsent (nothing was due, or a stop): the circuit is open and
    /// cooled down again, for the next deliverer to probe.
    pub fn abandon_probe(&mut self, destination: &str, owner: &str) -> Result<(), RegistryError> {
        self.batch(|b| {
            b.tx.prepare_cached(
                "UPDATE circuits SET state = 'open', probe_owner = NULL, probe_expires = NULL
                 WHERE destination = ?1 AND state = 'probing' AND probe_owner = ?2",
            )
            .and_then(|mut s| s.execute(params![destination, owner]))
            .map(drop)
            .map_err(|e| b.sql(e))
        })
    }

    /// Deliveries, oldest first: all, or those in `state`, or of `partner`, or of `key`.
    pub fn deliveries(
        &self,
        state: Option<DeliveryState>,
        partner: Option<&str>,
        key: Option<&str>,
    ) -> Result<Vec<DeliveryRow>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {ROW} FROM deliveries
                 WHERE (state = ?1 OR ?1 IS NULL) AND (partner = ?2 OR ?2 IS NULL)
                 AND (key = ?3 OR ?3 IS NULL)
                 ORDER BY id"
            ))
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params![state, partner, key], read)
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// A page of deliveries, newest first, those `filter` keeps: at most `limit` from the
    /// `offset`th.
    pub fn deliveries_page(
        &self,
        filter: &DeliveryFilter<'_>,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<DeliveryRow>, RegistryError> {
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {ROW} FROM deliveries
                 WHERE (state = ?1 OR ?1 IS NULL) AND (partner = ?2 OR ?2 IS NULL)
                 AND (destination = ?3 OR ?3 IS NULL) AND created >= ?4
                 ORDER BY id DESC LIMIT ?5 OFFSET ?6"
            ))
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(
                params![
                    filter.state,
                    filter.partner,
                    filter.destination,
                    filter.since_ms.unwrap_or(0),
                    n(limit),
                    n(offset)
                ],
                read,
            )
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// Each destination's last delivery (when), and its last failed attempt of a document
    /// not delivered since (when, status, error): what the overview says of a destination.
    pub fn destination_lasts(&self) -> Result<Vec<DestinationLast>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT d.destination, max(d.delivered_at),
                     (SELECT f.last_at FROM deliveries f WHERE f.destination = d.destination
                        AND f.state <> 'delivered' AND f.last_error IS NOT NULL
                        ORDER BY f.last_at DESC LIMIT 1),
                     (SELECT f.last_status FROM deliveries f WHERE f.destination = d.destination
                        AND f.state <> 'delivered' AND f.last_error IS NOT NULL
                        ORDER BY f.last_at DESC LIMIT 1),
                     (SELECT f.last_error FROM deliveries f WHERE f.destination = d.destination
                        AND f.state <> 'delivered' AND f.last_error IS NOT NULL
                        ORDER BY f.last_at DESC LIMIT 1)
                 FROM deliveries d GROUP BY d.destination ORDER BY d.destination",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                let (destination, delivered_ms, failed_ms, status, error) = read(r)?;
                Ok(DestinationLast {
                    destination,
                    delivered_ms,
                    failed_ms,
                    status,
                    error,
                })
            })
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// The deliveries of one interchange's documents up to the sighting `last_document`
    /// (in the interchange's order: those of its first documents).
    pub fn deliveries_of_first(
        &self,
        interchange_key: &str,
        last_document: i64,
    ) -> Result<Vec<DeliveryRow>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {ROW} FROM deliveries WHERE interchange_key = ?1 AND document_id <= ?2
                 ORDER BY id"
            ))
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params![interchange_key, last_document], read)
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// How many deliveries each destination has in each state.
    pub fn delivery_counts(&self) -> Result<Vec<(String, DeliveryState, u64)>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT destination, state, count(*) FROM deliveries
                 GROUP BY destination, state ORDER BY destination, state",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt.query_map([], read).map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// Each destination's circuit: (destination, state, consecutive failures, open until).
    pub fn circuits(&self) -> Result<Vec<Circuit>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT destination, state, failures, open_until FROM circuits ORDER BY destination",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt.query_map([], read).map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// Puts dead deliveries back in the queue with their attempts and age reset, and
    /// releases the ones they blocked (each still waits for its turn, so they go out in
    /// order after them): how many were retried, and how many released.
    pub fn retry_deliveries(&mut self, which: &Retry<'_>) -> Result<(usize, usize), RegistryError> {
        self.batch(|b| {
            let now = now_ms();
            let key = match which {
                Retry::Key(k) => Some(*k),
                Retry::AllDead => None,
            };
            let places = dead_places(b, key)?;
            let n =
                b.tx.prepare_cached(
                    "UPDATE deliveries SET state = 'queued', attempts = 0, failures = 0,
                         next_at = ?2, created = ?2, owner = NULL, lease_expires = NULL
                     WHERE state = 'dead' AND (key = ?1 OR ?1 IS NULL)",
                )
                .and_then(|mut s| s.execute(params![key, now]))
                .map_err(|e| b.sql(e))?;
            let released = release_blocked(b, &places, now)?;
            if n > 0 {
                let detail =
                    serde_json::json!({ "document": key, "retried": n, "released": released })
                        .to_string();
                b.record_note(EventKind::DeliveriesRetried, None, None, None, &detail)?;
            }
            Ok((n, released))
        })
    }

    /// Lets the dead deliveries of document `key` go unsent (`deliveries discard`): an
    /// original the destination refuses for good no longer holds its PO's later documents,
    /// which are released in order. Recorded in the history with the operator's `note`.
    /// Returns (discarded, released).
    pub fn discard_deliveries(
        &mut self,
        key: &str,
        note: Option<&str>,
    ) -> Result<(usize, usize), RegistryError> {
        self.batch(|b| {
            let now = now_ms();
            let places = dead_places(b, Some(key))?;
            let n =
                b.tx.prepare_cached(
                    "UPDATE deliveries SET state = 'discarded', owner = NULL, lease_expires = NULL
                     WHERE state = 'dead' AND key = ?1",
                )
                .and_then(|mut s| s.execute(params![key]))
                .map_err(|e| b.sql(e))?;
            let released = release_blocked(b, &places, now)?;
            if n > 0 {
                let detail = serde_json::json!({
                    "document": key,
                    "discarded": n,
                    "released": released,
                    "note": note.map(kept),
                })
                .to_string();
                b.record_note(EventKind::DeliveriesDiscarded, None, None, None, &detail)?;
            }
            Ok((n, released))
        })
    }

    /// The dead deliveries that hold the blocked ones of document `key`: (key, destination).
    pub fn blocking(&self, key: &str) -> Result<Vec<(String, String)>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT DISTINCT e.key, e.destination FROM deliveries b, deliveries e
                 WHERE b.key = ?1 AND b.state = 'blocked' AND e.destination = b.destination
                 AND e.subject = b.subject AND e.sequence < b.sequence AND e.state = 'dead'
                 ORDER BY e.key, e.destination",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt.query_map([key], read).map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// Records the business system's reference for document `key` (an operator's or the
    /// ERP's `confirm`) on its first delivered sighting. A different reference already
    /// recorded there (a destination's answer, or an earlier `confirm`) is kept unless
    /// `force`: the ERP's own order number is not lost to a typo. A forced change keeps the
    /// destination's answer on its delivery row and both references in the history.
    pub fn confirm(
        &mut self,
        key: &str,
        reference: &str,
        force: bool,
    ) -> Result<Confirmed, RegistryError> {
        self.batch(|b| {
            let found: Option<(i64, Option<String>, String)> = b
                .tx
                .prepare_cached(
                    "SELECT id, result_ref, interchange_key FROM documents
                     WHERE key = ?1 AND delivery = 'delivered' ORDER BY id LIMIT 1",
                )
                .and_then(|mut s| {
                    s.query_row([key], read)
                        .optional()
                })
                .map_err(|e| b.sql(e))?;
            let Some((id, before, interchange)) = found else {
                return Ok(Confirmed::Unknown);
            };
            let reference = kept(reference);
            if let Some(existing) = before.as_ref().filter(|b| **b != reference && !force) {
                return Ok(Confirmed::Kept(existing.clone()));
            }
            b.tx.prepare_cached("UPDATE documents SET result_ref = ?2 WHERE id = ?1")
                .and_then(|mut s| s.execute(params![id, reference]))
                .map_err(|e| b.sql(e))?;
            b.tx.prepare_cached(
                "UPDATE deliveries SET result_ref = ?2 WHERE document_id = ?1 AND result_ref IS NULL",
            )
            .and_then(|mut s| s.execute(params![id, reference]))
            .map_err(|e| b.sql(e))?;
            let detail = serde_json::json!({
                "document": key,
                "result_ref": reference,
                "before": before,
                "forced": force && before.as_ref().is_some_and(|b| *b != reference),
            })
            .to_string();
            b.record_note(
                EventKind::Confirmed,
                Some(&interchange),
                None,
                None,
                &detail,
            )?;
            Ok(Confirmed::Recorded(before))
        })
    }

    /// The business system's reference for each of `keys` (document keys), in order: one
    /// round trip for them all on PostgreSQL (a resend's report, or a line of `history`, names
    /// up to a thousand documents).
    pub fn result_refs(&self, keys: &[&str]) -> Result<Vec<Option<String>>, RegistryError> {
        result_refs(&self.conn, keys).map_err(|e| self.sql(e))
    }

    /// Attempts per destination whose answer was not a whole HTTP answer to its request
    /// (status `protocol`), from the audit trail: they only grow, and survive restarts.
    pub fn protocol_errors(&self) -> Result<Vec<(String, u64)>, RegistryError> {
        // The LIKE narrows the scan to the few such events; each is read back to be sure.
        let details: Vec<String> = self.all(
            "SELECT detail FROM events WHERE event = 'delivery_attempt'
             AND detail LIKE '%\"status\":\"protocol\"%'",
            [],
            read,
        )?;
        let mut counts = std::collections::BTreeMap::<String, u64>::new();
        for detail in details {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&detail) else {
                continue;
            };
            if v["status"] == PROTOCOL_ERROR {
                if let Some(d) = v["destination"].as_str() {
                    *counts.entry(d.to_string()).or_default() += 1;
                }
            }
        }
        Ok(counts.into_iter().collect())
    }
}

/// A destination's circuit as an attempt finds it: state, failures in a row, prober.
fn read_circuit(
    tx: &crate::registry::db::Conn,
    destination: &str,
) -> crate::registry::db::Result<(CircuitState, u32, Option<String>)> {
    Ok(tx
        .prepare_cached("SELECT state, failures, probe_owner FROM circuits WHERE destination = ?1")?
        .query_row([destination], read)
        .optional()?
        .unwrap_or((CircuitState::Closed, 0, None)))
}

/// The circuit after an attempt: a success (or a refusal, which the destination answered)
/// closes it; a failure counts, and opens it at `circuit_failures` in a row, or again when
/// it was the probe. Returns the state after, and whether it changed.
fn move_circuit(
    tx: &crate::registry::db::Conn,
    destination: &str,
    (state, failures, _): (CircuitState, u32, Option<String>),
    outcome: &Attempted,
    policy: Policy,
    now: i64,
) -> crate::registry::db::Result<(CircuitState, Option<CircuitState>)> {
    let (next, failures, open_until) = match outcome {
        Attempted::Unsent { .. } => {
            // Not the destination's doing: a probe that never went out gives the probe back.
            let back = if state == CircuitState::Probing {
                CircuitState::Open
            } else {
                state
            };
            tx.prepare_cached(
                "UPDATE circuits SET state = ?2, probe_owner = NULL, probe_expires = NULL
                 WHERE destination = ?1 AND state = 'probing'",
            )?
            .execute(params![destination, back])?;
            return Ok((back, (back != state).then_some(back)));
        }
        Attempted::Delivered { .. } | Attempted::Refused { .. } => (CircuitState::Closed, 0, None),
        Attempted::Failed { .. } => {
            let failures = failures.saturating_add(1);
            if state == CircuitState::Probing
                || state == CircuitState::Open
                || failures >= policy.circuit_failures
            {
                (
                    CircuitState::Open,
                    failures,
                    Some(now.saturating_add(policy.cooldown_ms)),
                )
            } else {
                (CircuitState::Closed, failures, None)
            }
        }
    };
    tx.prepare_cached(
        "INSERT INTO circuits (destination, state, failures, open_until, changed)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (destination) DO UPDATE SET state = ?2, failures = ?3,
             open_until = COALESCE(?4, circuits.open_until), probe_owner = NULL,
             probe_expires = NULL,
             changed = CASE WHEN circuits.state = ?2 THEN circuits.changed ELSE ?5 END",
    )?
    .execute(params![destination, next, failures, open_until, now])?;
    Ok((next, (next != state).then_some(next)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Identity;

    fn registry() -> Registry {
        Registry::in_memory(Identity {
            qualifier: "ZZ",
            id: "US",
        })
    }

    /// Queueing a delivery and asking whose turn it is read the earlier deliveries of the
    /// subject by index: a scan of every delivery made `process` to an HTTP destination
    /// quadratic in the outbox.
    #[test]
    fn the_earlier_deliveries_of_a_subject_are_read_by_index() {
        let r = registry();
        let plan = |sql: &str| -> Vec<String> {
            r.conn
                .query_map(
                    &format!("EXPLAIN QUERY PLAN {sql}"),
                    params![1, "k", "erp", "p", "i", "c", "f", "q", 0, "idem"],
                    |row| row.get(3),
                )
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let claim = format!(
            "SELECT id FROM deliveries WHERE destination = ?3 AND state IN ('queued', 'retrying')
             AND ?1 + ?2 + ?4 + ?5 + ?6 + ?7 + ?8 + ?9 + ?10 IS NOT NULL AND {IN_TURN}"
        );
        for sql in [QUEUE, claim.as_str()] {
            let plan = plan(sql);
            assert!(
                plan.iter()
                    .any(|l| l.contains("USING INDEX deliveries_order")),
                "{plan:#?}"
            );
            assert!(!plan.iter().any(|l| l.starts_with("SCAN")), "{plan:#?}");
        }
    }

    fn wanted<'a>(
        destination: &'a str,
        limit: usize,
        due_ms: i64,
        queued_by: Option<&'a str>,
    ) -> Wanted<'a> {
        Wanted {
            destination,
            limit,
            due_ms,
            queued_by,
        }
    }

    fn queue(r: &mut Registry, document_id: i64, key: &str) {
        r.batch(|b| {
            b.queue_delivery(&Queue {
                document_id,
                key,
                destination: "erp",
                partner: "ZZ:ACME",
                interchange_key: "ZZ:ACME:000000001",
                correlation_id: "ZZ:ACME:000000001",
                file: "/nowhere",
                queued_by: "p1",
                idempotency_key: key,
            })
        })
        .unwrap();
    }

    const POLICY: Policy = Policy {
        max_attempts: 3,
        max_age_ms: 3_600_000,
        circuit_failures: 2,
        cooldown_ms: 60_000,
    };

    fn failed() -> Attempted {
        Attempted::Failed {
            status: "503".into(),
            error: "busy".into(),
        }
    }

    fn claim(r: &mut Registry, owner: &str) -> Vec<Claimed> {
        r.claim_deliveries(wanted("erp", 10, i64::MAX, None), owner, 60_000, &|_| false)
            .unwrap()
    }

    fn state(r: &Registry, key: &str) -> (DeliveryState, u32) {
        let row = r.deliveries(None, None, Some(key)).unwrap().remove(0);
        (row.state, row.attempts)
    }

    /// Document `id` of PO `po`, at `sequence` in the order of deliveries, with `delivery`
    /// (`pending`: still being written, no row queued); its key is `po:sequence`.
    fn document(r: &mut Registry, id: i64, po: &str, sequence: i64, delivery: &str) -> String {
        let key = format!("{po}:{sequence}");
        r.conn
            .execute(
                "INSERT INTO documents (id, key, subject, partner, set_id, role, fingerprint,
                     interchange_key, position, st02, disposition, delivery, by, sequence, seen)
                 VALUES (?1, ?2, ?3, 'ZZ:ACME', '850', 'original', ?2, 'ZZ:ACME:000000001',
                     ?4, '0001', 'new', ?5, 'x', ?6, 0)",
                params![id, key, po, format!("0.{id}"), delivery, sequence],
            )
            .unwrap();
        key
    }

    /// [`document`], handed over and queued for erp.
    fn ordered(r: &mut Registry, id: i64, po: &str, sequence: i64) -> String {
        let key = document(r, id, po, sequence, "delivered");
        queue(r, id, &key);
        key
    }

    fn keys(claimed: &[Claimed]) -> Vec<&str> {
        claimed.iter().map(|c| c.key.as_str()).collect()
    }

    fn ok() -> Attempted {
        Attempted::Delivered {
            status: "200".into(),
            result_ref: None,
        }
    }

    fn record(r: &mut Registry, c: &Claimed, owner: &str, outcome: &Attempted) -> Recorded {
        r.record_attempt(c, owner, outcome, 5, POLICY, 0)
            .unwrap()
            .unwrap()
    }

    crate::registry::tests::on_both! {
        fn a_row_is_claimed_by_one_deliverer_and_recorded_only_under_its_lease() {
            let mut r = registry();
            queue(&mut r, 1, "K1");
            // Queued twice (a takeover of the interchange): one row.
            queue(&mut r, 1, "K1");
            let mine = claim(&mut r, "a");
            assert_eq!(mine.len(), 1);
            assert!(claim(&mut r, "b").is_empty(), "leased to a");
            // Another deliverer's outcome is refused: the fence.
            let ok = Attempted::Delivered {
                status: "200".into(),
                result_ref: Some("SO-1".into()),
            };
            assert_eq!(
                r.record_attempt(&mine[0], "b", &ok, 5, POLICY, 10).unwrap(),
                None
            );
            let done = r
                .record_attempt(&mine[0], "a", &ok, 5, POLICY, 10)
                .unwrap()
                .unwrap();
            assert_eq!(done.state, DeliveryState::Delivered);
            assert_eq!(state(&r, "K1"), (DeliveryState::Delivered, 1));
            assert!(
                claim(&mut r, "b").is_empty(),
                "delivered rows are never claimed"
            );
            // A dead owner's lease is taken over at once.
            queue(&mut r, 2, "K2");
            assert_eq!(claim(&mut r, "dead").len(), 1);
            let taken = r
                .claim_deliveries(wanted("erp", 10, i64::MAX, None), "b", 60_000, &|o| o == "dead")
                .unwrap();
            assert_eq!(taken.len(), 1);
            assert_eq!(taken[0].key, "K2");
        }
    }

    crate::registry::tests::on_both! {
        fn failures_are_retried_until_max_attempts_then_dead_and_a_retry_puts_them_back() {
            let mut r = registry();
            queue(&mut r, 1, "K1");
            for attempt in 1..=3u32 {
                let c = claim(&mut r, "a");
                assert_eq!(c.len(), 1, "attempt {attempt}");
                let rec = r
                    .record_attempt(&c[0], "a", &failed(), 5, POLICY, 0)
                    .unwrap()
                    .unwrap();
                let want = if attempt < 3 {
                    DeliveryState::Retrying
                } else {
                    DeliveryState::Dead
                };
                assert_eq!((rec.state, rec.attempts), (want, attempt));
            }
            assert!(
                claim(&mut r, "a").is_empty(),
                "dead rows wait for an operator"
            );
            assert_eq!(r.retry_deliveries(&Retry::Key("K1")).unwrap(), (1, 0));
            assert_eq!(state(&r, "K1"), (DeliveryState::Queued, 0));
            assert_eq!(r.retry_deliveries(&Retry::AllDead).unwrap(), (0, 0));
            // A refusal is dead at once.
            let c = claim(&mut r, "a");
            let refused = Attempted::Refused {
                status: "400".into(),
                error: "bad".into(),
            };
            let rec = r
                .record_attempt(&c[0], "a", &refused, 5, POLICY, 0)
                .unwrap()
                .unwrap();
            assert_eq!((rec.state, rec.attempts), (DeliveryState::Dead, 1));
        }
    }

    crate::registry::tests::on_both! {
        fn a_retry_waits_for_its_time_and_an_old_delivery_dies_on_its_next_failure() {
            let mut r = registry();
            queue(&mut r, 1, "K1");
            let c = claim(&mut r, "a");
            r.record_attempt(&c[0], "a", &failed(), 5, POLICY, 3_600_000)
                .unwrap();
            assert!(claim(&mut r, "a").is_empty(), "not due for an hour");
            // Past max_age: the next failure is its last.
            r.conn
                .execute("UPDATE deliveries SET next_at = 0, created = 0", [])
                .unwrap();
            let c = claim(&mut r, "a");
            let rec = r
                .record_attempt(&c[0], "a", &failed(), 5, POLICY, 0)
                .unwrap()
                .unwrap();
            assert_eq!(rec.state, DeliveryState::Dead);
        }
    }

    crate::registry::tests::on_both! {
        fn the_circuit_opens_after_failures_in_a_row_and_lets_one_probe_through() {
            let mut r = registry();
            for id in 1..=4 {
                queue(&mut r, id, &format!("K{id}"));
            }
            let gate = |r: &mut Registry, owner: &str| {
                r.circuit_gate("erp", owner, 60_000, &|_| false).unwrap()
            };
            assert_eq!(gate(&mut r, "a"), Gate::Closed);
            let c = claim(&mut r, "a");
            let first = r
                .record_attempt(&c[0], "a", &failed(), 5, POLICY, 0)
                .unwrap()
                .unwrap();
            assert_eq!(first.circuit, None, "one failure is not an outage");
            let second = r
                .record_attempt(&c[1], "a", &failed(), 5, POLICY, 0)
                .unwrap()
                .unwrap();
            assert_eq!(second.circuit, Some(CircuitState::Open));
            assert!(matches!(gate(&mut r, "a"), Gate::Wait { .. }));
            // Cooled down: exactly one process wins the probe.
            r.conn
                .execute("UPDATE circuits SET open_until = 0", [])
                .unwrap();
            assert_eq!(gate(&mut r, "a"), Gate::Probe);
            assert!(matches!(gate(&mut r, "b"), Gate::Wait { .. }));
            // The probe fails: open again for a cool-down.
            r.unclaim_deliveries("a", &[c[2].id, c[3].id]).unwrap();
            let probe = claim(&mut r, "a");
            let again = r
                .record_attempt(&probe[0], "a", &failed(), 5, POLICY, 0)
                .unwrap()
                .unwrap();
            assert_eq!(again.circuit, Some(CircuitState::Open));
            assert!(matches!(gate(&mut r, "b"), Gate::Wait { .. }));
            // A prober that died is replaced; a successful probe closes the circuit.
            r.conn
                .execute("UPDATE circuits SET open_until = 0", [])
                .unwrap();
            assert_eq!(gate(&mut r, "gone"), Gate::Probe);
            assert_eq!(
                r.circuit_gate("erp", "b", 60_000, &|o| o == "gone")
                    .unwrap(),
                Gate::Probe
            );
            let probe = r
                .claim_deliveries(wanted("erp", 1, i64::MAX, None), "b", 60_000, &|_| false)
                .unwrap();
            let ok = Attempted::Delivered {
                status: "200".into(),
                result_ref: None,
            };
            let closed = r
                .record_attempt(&probe[0], "b", &ok, 5, POLICY, 0)
                .unwrap()
                .unwrap();
            assert_eq!(closed.circuit, Some(CircuitState::Closed));
            assert_eq!(gate(&mut r, "a"), Gate::Closed);
        }
    }

    crate::registry::tests::on_both! {
        fn what_never_reached_the_destination_leaves_its_circuit_alone() {
            let mut r = registry();
            for id in 1..=3 {
                queue(&mut r, id, &format!("K{id}"));
            }
            let c = claim(&mut r, "a");
            r.record_attempt(&c[0], "a", &failed(), 5, POLICY, 0)
                .unwrap();
            let gone = Attempted::Unsent {
                status: "no file".into(),
                error: "gone".into(),
                permanent: true,
            };
            let rec = r
                .record_attempt(&c[1], "a", &gone, 5, POLICY, 0)
                .unwrap()
                .unwrap();
            assert_eq!(
                (rec.state, rec.circuit, rec.open),
                (DeliveryState::Dead, None, false)
            );
            // Still one failure in a row: the next opens it (circuit_failures = 2).
            let rec = r
                .record_attempt(&c[2], "a", &failed(), 5, POLICY, 0)
                .unwrap()
                .unwrap();
            assert_eq!(rec.circuit, Some(CircuitState::Open));
            // A probe whose row was never sent gives the probe back, and a transient local
            // failure is retried.
            r.conn
                .execute("UPDATE circuits SET open_until = 0", [])
                .unwrap();
            assert_eq!(
                r.circuit_gate("erp", "a", 60_000, &|_| false).unwrap(),
                Gate::Probe
            );
            r.conn
                .execute("UPDATE deliveries SET next_at = 0", [])
                .unwrap();
            let probe = r
                .claim_deliveries(wanted("erp", 1, i64::MAX, None), "a", 60_000, &|_| false)
                .unwrap();
            let unreadable = Attempted::Unsent {
                status: "unreadable".into(),
                error: "EMFILE".into(),
                permanent: false,
            };
            let rec = r
                .record_attempt(&probe[0], "a", &unreadable, 5, POLICY, 0)
                .unwrap()
                .unwrap();
            assert_eq!(rec.state, DeliveryState::Retrying);
            assert_eq!(
                r.circuit_gate("erp", "b", 60_000, &|_| false).unwrap(),
                Gate::Probe,
                "the unsent probe was given back"
            );
        }
    }

    crate::registry::tests::on_both! {
        fn a_lease_is_renewed_before_sending_only_while_it_is_still_held() {
            let mut r = registry();
            queue(&mut r, 1, "K1");
            queue(&mut r, 2, "K2");
            let c = claim(&mut r, "a");
            let ids: Vec<i64> = c.iter().map(|c| c.id).collect();
            assert_eq!(r.renew_deliveries("a", &ids, 60_000).unwrap(), ids);
            // a stalled past its lease, and b took K2 over.
            r.conn
                .execute("UPDATE deliveries SET lease_expires = 0", [])
                .unwrap();
            let taken = r
                .claim_deliveries(wanted("erp", 1, i64::MAX, None), "b", 60_000, &|_| false)
                .unwrap();
            assert_eq!(taken.len(), 1);
            assert!(r.renew_deliveries("a", &ids, 60_000).unwrap().is_empty());
            assert_eq!(
                r.renew_deliveries("b", &[taken[0].id], 60_000).unwrap(),
                [taken[0].id]
            );
        }
    }

    crate::registry::tests::on_both! {
        fn the_next_sendable_time_waits_for_leases_and_an_open_circuit() {
            let mut r = registry();
            assert_eq!(r.next_sendable(&["erp"], None, &|_| false).unwrap(), None);
            queue(&mut r, 1, "K1");
            let now = now_ms();
            let due = r
                .next_sendable(&["erp"], None, &|_| false)
                .unwrap()
                .unwrap();
            assert!(due <= now + 5, "queued now: due now");
            assert_eq!(
                r.next_sendable(&["other"], None, &|_| false).unwrap(),
                None,
                "not a destination we send to"
            );
            assert_eq!(
                r.next_sendable(&["erp"], Some("p2"), &|_| false).unwrap(),
                None,
                "not p2's"
            );
            let c = claim(&mut r, "a");
            let leased = r
                .next_sendable(&["erp"], None, &|_| false)
                .unwrap()
                .unwrap();
            assert!(
                leased >= now + 50_000,
                "leased for a minute: {}",
                leased - now
            );
            let adopted = r
                .next_sendable(&["erp"], None, &|o| o == "a")
                .unwrap()
                .unwrap();
            assert!(adopted <= now + 5, "a dead deliverer's row is due at once");
            r.unclaim_deliveries("a", &[c[0].id]).unwrap();
            r.conn
                .execute(
                    "INSERT INTO circuits (destination, state, failures, open_until, changed)
                     VALUES ('erp', 'open', 5, ?1, 0)",
                    [now + 30_000],
                )
                .unwrap();
            assert_eq!(
                r.next_sendable(&["erp"], None, &|_| false).unwrap(),
                Some(now + 30_000)
            );
        }
    }

    crate::registry::tests::on_both! {
        fn the_result_ref_is_kept_on_the_document_and_confirm_sets_it() {
            let mut r = registry();
            r.conn
                .execute(
                    "INSERT INTO documents (id, key, subject, partner, set_id, role, fingerprint,
                         interchange_key, position, st02, disposition, delivery, by, seen)
                     VALUES (7, 'K', 'S', 'ZZ:ACME', '850', 'original', 'f', 'ZZ:ACME:000000001',
                         '0.0', '0001', 'new', 'delivered', 'x', 0)",
                    [],
                )
                .unwrap();
            assert_eq!(r.result_refs(&["K", "other"]).unwrap(), [None, None]);
            assert_eq!(r.confirm("unknown", "X", false).unwrap(), Confirmed::Unknown);
            assert_eq!(r.confirm("K", "SO-1", false).unwrap(), Confirmed::Recorded(None));
            assert_eq!(
                r.result_refs(&["other", "K"]).unwrap(),
                [None, Some("SO-1".to_string())]
            );
            // The same reference again is no change; another one needs `force`.
            assert_eq!(
                r.confirm("K", "SO-1", false).unwrap(),
                Confirmed::Recorded(Some("SO-1".into()))
            );
            assert_eq!(
                r.confirm("K", "SO-2", false).unwrap(),
                Confirmed::Kept("SO-1".into())
            );
            assert_eq!(r.result_refs(&["K"]).unwrap()[0].as_deref(), Some("SO-1"));
            assert_eq!(
                r.confirm("K", "SO-2", true).unwrap(),
                Confirmed::Recorded(Some("SO-1".into()))
            );
            // A reference from a destination's answer never replaces a confirmed one.
            queue(&mut r, 7, "K");
            let c = claim(&mut r, "a");
            let ok = Attempted::Delivered {
                status: "200".into(),
                result_ref: Some("SO-9".into()),
            };
            r.record_attempt(&c[0], "a", &ok, 5, POLICY, 0).unwrap();
            assert_eq!(r.result_refs(&["K"]).unwrap()[0].as_deref(), Some("SO-2"));
            // A huge or hostile reference is kept short and printable.
            let long = format!("{}\u{1b}[31m", "x".repeat(10_000));
            r.confirm("K", &long, true).unwrap();
            let kept = r.result_refs(&["K"]).unwrap().remove(0).unwrap();
            assert!(kept.len() <= 340 && !kept.contains('\u{1b}'), "{kept}");
        }
    }

    crate::registry::tests::on_both! {
        fn a_pos_documents_go_out_one_at_a_time_in_order_and_other_pos_beside_them() {
            let mut r = registry();
            let a5 = ordered(&mut r, 1, "PO-A", 5);
            let a6 = ordered(&mut r, 2, "PO-A", 6);
            let b7 = ordered(&mut r, 3, "PO-B", 7);
            let c = claim(&mut r, "a");
            assert_eq!(keys(&c), [a5.as_str(), b7.as_str()], "one row of a PO at a time");
            assert!(claim(&mut r, "b").is_empty(), "the change waits for its original in flight");
            let now = now_ms();
            let due = r.next_sendable(&["erp"], None, &|_| false).unwrap().unwrap();
            assert!(due >= now + 50_000, "a waiting change does not make the destination due");
            // The original fails: it stays first in line; the other PO is not held up.
            assert_eq!(record(&mut r, &c[0], "a", &failed()).state, DeliveryState::Retrying);
            assert_eq!(record(&mut r, &c[1], "a", &ok()).state, DeliveryState::Delivered);
            let c = claim(&mut r, "b");
            assert_eq!(keys(&c), [a5.as_str()]);
            record(&mut r, &c[0], "b", &ok());
            let c = claim(&mut r, "a");
            assert_eq!(keys(&c), [a6.as_str()]);
            record(&mut r, &c[0], "a", &ok());
            // A document still being written (its row not queued yet) holds its PO's later ones.
            document(&mut r, 4, "PO-C", 8, "pending");
            let c9 = ordered(&mut r, 5, "PO-C", 9);
            assert!(claim(&mut r, "a").is_empty());
            r.batch(|b| b.documents_delivered(&[4])).unwrap();
            assert_eq!(keys(&claim(&mut r, "a")), [c9.as_str()]);
        }
    }

    crate::registry::tests::on_both! {
        fn a_dead_original_blocks_its_changes_until_its_retry_and_they_follow_in_order() {
            let mut r = registry();
            let a5 = ordered(&mut r, 1, "PO-A", 5);
            let a6 = ordered(&mut r, 2, "PO-A", 6);
            let c = claim(&mut r, "a");
            let refused = Attempted::Refused {
                status: "400".into(),
                error: "unknown item".into(),
            };
            let rec = record(&mut r, &c[0], "a", &refused);
            assert_eq!((rec.state, rec.blocked), (DeliveryState::Dead, 1));
            assert_eq!(state(&r, &a6), (DeliveryState::Blocked, 0));
            // A change queued later is blocked from the start.
            let a7 = ordered(&mut r, 3, "PO-A", 7);
            assert_eq!(state(&r, &a7), (DeliveryState::Blocked, 0));
            assert!(claim(&mut r, "a").is_empty());
            assert_eq!(r.next_sendable(&["erp"], None, &|_| false).unwrap(), None);
            assert_eq!(r.blocking(&a7).unwrap(), [(a5.clone(), "erp".to_string())]);
            assert_eq!(
                r.retry_deliveries(&Retry::Key(&a6)).unwrap(),
                (0, 0),
                "a blocked row is not dead: its original is retried"
            );
            let counts = r.delivery_counts().unwrap();
            assert!(counts.contains(&("erp".into(), DeliveryState::Blocked, 2)), "{counts:?}");
            assert_eq!(r.retry_deliveries(&Retry::Key(&a5)).unwrap(), (1, 2));
            for want in [&a5, &a6, &a7] {
                let c = claim(&mut r, "a");
                assert_eq!(keys(&c), [want.as_str()]);
                record(&mut r, &c[0], "a", &ok());
            }
            assert!(claim(&mut r, "a").is_empty());
        }
    }

    crate::registry::tests::on_both! {
        fn an_original_refused_for_good_is_discarded_and_its_changes_follow_in_order() {
            let mut r = registry();
            let a5 = ordered(&mut r, 1, "PO-A", 5);
            let a6 = ordered(&mut r, 2, "PO-A", 6);
            let a7 = ordered(&mut r, 3, "PO-A", 7);
            let c = claim(&mut r, "a");
            let refused = Attempted::Refused {
                status: "400".into(),
                error: "unknown customer".into(),
            };
            record(&mut r, &c[0], "a", &refused);
            assert_eq!(state(&r, &a6), (DeliveryState::Blocked, 0));
            // Only a dead delivery is discarded.
            assert_eq!(r.discard_deliveries(&a6, None).unwrap(), (0, 0));
            assert_eq!(
                r.discard_deliveries(&a5, Some("cancelled with the partner"))
                    .unwrap(),
                (1, 2)
            );
            assert_eq!(state(&r, &a5).0, DeliveryState::Discarded);
            for want in [&a6, &a7] {
                let c = claim(&mut r, "a");
                assert_eq!(keys(&c), [want.as_str()], "in order, one at a time");
                record(&mut r, &c[0], "a", &ok());
            }
            assert!(claim(&mut r, "a").is_empty(), "a discarded row is never sent");
            assert_eq!(r.retry_deliveries(&Retry::AllDead).unwrap(), (0, 0));
            let events = r.history(&crate::registry::EventFilter::default()).unwrap();
            assert!(
                events.iter().any(|e| e.event == EventKind::DeliveriesDiscarded
                    && e.detail.contains("cancelled with the partner")),
                "{events:?}"
            );
        }
    }

    crate::registry::tests::on_both! {
        fn a_failed_probe_costs_its_row_nothing_but_age_still_ends_it() {
            let mut r = registry();
            let k1 = ordered(&mut r, 1, "PO-1", 1);
            let k2 = ordered(&mut r, 2, "PO-2", 2);
            let c = claim(&mut r, "a");
            record(&mut r, &c[0], "a", &failed());
            let opened = record(&mut r, &c[1], "a", &failed());
            assert_eq!(opened.circuit, Some(CircuitState::Open));
            // Ten probes fail (max_attempts is 3): the row probed is still retrying, with the
            // one failure it had while the circuit was closed.
            for _ in 0..10 {
                r.conn
                    .execute("UPDATE circuits SET open_until = 0", [])
                    .unwrap();
                r.conn
                    .execute("UPDATE deliveries SET next_at = 0", [])
                    .unwrap();
                assert_eq!(r.circuit_gate("erp", "a", 60_000, &|_| false).unwrap(), Gate::Probe);
                let p = r
                    .claim_deliveries(wanted("erp", 1, i64::MAX, None), "a", 60_000, &|_| false)
                    .unwrap();
                let rec = record(&mut r, &p[0], "a", &failed());
                assert_eq!(rec.state, DeliveryState::Retrying);
                assert_eq!(rec.circuit, Some(CircuitState::Open), "open again");
            }
            let rows = r.deliveries(None, None, None).unwrap();
            assert_eq!(rows.iter().map(|d| d.failures).collect::<Vec<_>>(), [1, 1]);
            assert_eq!(rows.iter().map(|d| d.attempts).sum::<u32>(), 12);
            // Past max_age a probe's failure is the row's last.
            r.conn
                .execute("UPDATE deliveries SET created = 0, next_at = 0", [])
                .unwrap();
            r.conn
                .execute("UPDATE circuits SET open_until = 0", [])
                .unwrap();
            assert_eq!(r.circuit_gate("erp", "a", 60_000, &|_| false).unwrap(), Gate::Probe);
            let p = r
                .claim_deliveries(wanted("erp", 1, i64::MAX, None), "a", 60_000, &|_| false)
                .unwrap();
            assert_eq!(record(&mut r, &p[0], "a", &failed()).state, DeliveryState::Dead);
            // A failure while the circuit is closed counts again.
            r.conn
                .execute("DELETE FROM circuits", [])
                .unwrap();
            let left = if p[0].key == k1 { &k2 } else { &k1 };
            r.conn
                .execute("UPDATE deliveries SET created = ?1", [now_ms()])
                .unwrap();
            let c = claim(&mut r, "a");
            assert_eq!(keys(&c), [left.as_str()]);
            let rec = record(&mut r, &c[0], "a", &failed());
            assert_eq!(rec.state, DeliveryState::Retrying);
            let row = r.deliveries(None, None, Some(left)).unwrap().remove(0);
            assert_eq!(row.failures, 2);
        }
    }

    /// A step of [`any_interleaving_keeps_each_pos_order_at_each_destination`].
    #[derive(Debug, Clone)]
    enum Step {
        /// A document of PO `po` for destination `to`, handed over at once or still being
        /// written (`pending`, its row queued by a later `Hand`).
        Decide {
            po: u8,
            to: u8,
            pending: bool,
        },
        Hand(usize),
        /// Deliverer `by` claims up to `limit` rows of destination `to`.
        Claim {
            by: u8,
            to: u8,
            limit: usize,
        },
        /// Deliverer `by`'s oldest row in flight comes back: 0 delivered, 1 failed, 2 refused.
        Answer {
            by: u8,
            outcome: u8,
        },
        /// An operator retries the dead deliveries of the `n`th document.
        Retry(usize),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            3 => (0u8..3, 0u8..2, any::<bool>())
                .prop_map(|(po, to, pending)| Step::Decide { po, to, pending }),
            1 => (0usize..20).prop_map(Step::Hand),
            3 => (0u8..2, 0u8..2, 1usize..4).prop_map(|(by, to, limit)| Step::Claim { by, to, limit }),
            3 => (0u8..2, 0u8..3).prop_map(|(by, outcome)| Step::Answer { by, outcome }),
            1 => (0usize..20).prop_map(Step::Retry),
        ]
    }

    /// Claims for `by` and checks what it got: every earlier document of each row's PO is
    /// delivered at that destination, and no row of that PO is in flight anywhere else.
    fn claim_in_order(
        r: &mut Registry,
        by: u8,
        to: u8,
        limit: usize,
        flight: &mut [Vec<Claimed>; 2],
    ) {
        let destination = ["erp", "wms"][usize::from(to)];
        let owner = ["a", "b"][usize::from(by)];
        let got = r
            .claim_deliveries(
                wanted(destination, limit, i64::MAX, None),
                owner,
                60_000,
                &|_| false,
            )
            .unwrap();
        let rows = r.deliveries(None, None, None).unwrap();
        for c in &got {
            for d in &rows {
                if d.destination == c.destination
                    && d.subject == c.subject
                    && d.sequence < c.sequence
                {
                    assert_eq!(
                        d.state,
                        DeliveryState::Delivered,
                        "{} claimed before {}",
                        c.key,
                        d.key
                    );
                }
            }
            let twice = flight
                .iter()
                .flatten()
                .chain(got.iter().filter(|o| o.id != c.id))
                .any(|o| o.destination == c.destination && o.subject == c.subject);
            assert!(
                !twice,
                "two rows of {} in flight to {}",
                c.subject, c.destination
            );
        }
        flight[usize::from(by)].extend(got);
    }

    #[test]
    fn any_interleaving_keeps_each_pos_order_at_each_destination() {
        use proptest::prelude::*;
        let config = ProptestConfig {
            cases: 48,
            failure_persistence: None,
            ..ProptestConfig::default()
        };
        proptest!(config, |(steps in proptest::collection::vec(step(), 1..60))| {
            let mut r = registry();
            let policy = Policy { max_attempts: 1_000, circuit_failures: 1_000, ..POLICY };
            // (id, key, destination, handed over)
            let mut documents: Vec<(i64, String, &str, bool)> = Vec::new();
            let mut flight: [Vec<Claimed>; 2] = [Vec::new(), Vec::new()];
            let queue_to = |r: &mut Registry, id: i64, key: &str, destination: &str| {
                r.batch(|b| {
                    b.documents_delivered(&[id])?;
                    b.queue_delivery(&Queue {
                        document_id: id,
                        key,
                        idempotency_key: key,
                        destination,
                        partner: "ZZ:ACME",
                        interchange_key: "ZZ:ACME:000000001",
                        correlation_id: "ZZ:ACME:000000001",
                        file: "/nowhere",
                        queued_by: "p",
                    })
                })
                .unwrap();
            };
            for s in steps {
                match s {
                    Step::Decide { po, to, pending } => {
                        let id = documents.len() as i64 + 1;
                        let destination = ["erp", "wms"][usize::from(to)];
                        let key = document(&mut r, id, &format!("PO-{po}"), id, "pending");
                        if !pending {
                            queue_to(&mut r, id, &key, destination);
                        }
                        documents.push((id, key, destination, !pending));
                    }
                    Step::Hand(n) => {
                        if let Some(d) = documents.get_mut(n).filter(|d| !d.3) {
                            d.3 = true;
                            let (id, key, destination) = (d.0, d.1.clone(), d.2);
                            queue_to(&mut r, id, &key, destination);
                        }
                    }
                    Step::Claim { by, to, limit } => claim_in_order(&mut r, by, to, limit, &mut flight),
                    Step::Answer { by, outcome } => {
                        let mine = &mut flight[usize::from(by)];
                        if mine.is_empty() {
                            continue;
                        }
                        let c = mine.remove(0);
                        let outcome = match outcome {
                            0 => ok(),
                            1 => failed(),
                            _ => Attempted::Refused { status: "400".into(), error: "no".into() },
                        };
                        let owner = ["a", "b"][usize::from(by)];
                        r.record_attempt(&c, owner, &outcome, 1, policy, 0).unwrap();
                    }
                    Step::Retry(n) => {
                        if let Some(d) = documents.get(n) {
                            r.retry_deliveries(&Retry::Key(&d.1)).unwrap();
                        }
                    }
                }
            }
            // Everything settles once written, retried and answered: each row delivered.
            for d in documents.iter().filter(|d| !d.3) {
                queue_to(&mut r, d.0, &d.1, d.2);
            }
            for (by, mine) in flight.iter_mut().enumerate() {
                for c in mine.drain(..) {
                    r.record_attempt(&c, ["a", "b"][by], &ok(), 1, policy, 0).unwrap();
                }
            }
            r.retry_deliveries(&Retry::AllDead).unwrap();
            for _ in 0..documents.len() + 1 {
                for to in 0..2u8 {
                    claim_in_order(&mut r, 0, to, 4, &mut flight);
                    for c in flight[0].drain(..) {
                        r.record_attempt(&c, "a", &ok(), 1, policy, 0).unwrap();
                    }
                }
            }
            let rows = r.deliveries(None, None, None).unwrap();
            prop_assert_eq!(rows.len(), documents.len());
            prop_assert!(rows.iter().all(|d| d.state == DeliveryState::Delivered), "{:?}", rows);
        });
    }
}
