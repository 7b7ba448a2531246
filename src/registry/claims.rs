//! Interchange claims: the exactly-once heart of the gateway.
//!
//! A key is claimed in one `BEGIN IMMEDIATE` transaction (the write lock is taken first, so
//! two processes can never both see "absent"): the insert either lands, or the existing row
//! decides between duplicate, conflict, busy and takeover. The claim commits before any
//! work, so every other process sees it; the completion commits after the outputs are in
//! place, together with the acknowledgment bytes that a duplicate will replay.

use crate::registry::db::{from_row, params, read, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::counters::MAX_CONTROL_NUMBER;
use super::{ClaimState, EventKind, Registry, RegistryError};
use crate::disposition::Disposition;

/// The registry's clock: [`crate::time::now_ms`], which tests drive.
pub use crate::time::now_ms;

/// What a process asks for when it opens an interchange's envelope.
#[derive(Clone)]
pub struct ClaimRequest<'a> {
    pub key: &'a str,
    /// The partner's `QUAL:ID`.
    pub partner: &'a str,
    pub control_number: &'a str,
    pub fingerprint: &'a str,
    pub file: &'a str,
    /// Who we are ([`crate::owner::Owner::id`]), so a lease can be told apart from another's.
    pub owner: &'a str,
    pub lease_ms: i64,
    /// Whether the holder of a live lease is certainly dead (a crashed process on this host):
    /// its claim is taken over at once instead of after the lease.
    pub is_dead: &'a dyn Fn(&str) -> bool,
}

/// How we came to own a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Previous {
    /// The key was new.
    New,
    /// An earlier attempt's lease expired (it crashed or hung): we took over from it.
    Expired { owner: String },
    /// The earlier attempt's owner is dead (its lease had not run out yet).
    Dead { owner: String },
    /// An earlier attempt failed operationally.
    Failed,
    /// The earlier outcome was `rejected` and this is a corrected resend.
    Rejected { fingerprint: String },
}

/// An acknowledgment as it was written to the outbox, kept for replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredAck {
    pub kind: String,
    /// Its file name in the outbox (rows written before this was a name hold an absolute
    /// path; only its last component counts).
    pub path: String,
    pub bytes: Vec<u8>,
}

from_row!(
    StoredAck,
    STORED_ACK {
        kind: "kind",
        path: "path",
        bytes: "bytes",
    }
);

/// The outcome recorded for a completed interchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// `None` when no attempt has completed yet (a conflict with an unfinished one).
    pub disposition: Option<Disposition>,
    pub reason_code: Option<String>,
    pub reason: Option<String>,
    pub fingerprint: String,
    pub acks: Vec<StoredAck>,
    pub outputs: Vec<String>,
    pub attempts: u32,
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// We own the key: process it. `first_fingerprint` is the content the key was first
    /// claimed for (outputs of later, corrected contents are named apart from its outputs).
    Owned {
        attempt: u32,
        previous: Previous,
        first_fingerprint: String,
    },
    /// Completed before with the same content: replay its acknowledgments.
    Duplicate(Completed),
    /// Completed before with different content that delivered something: refuse.
    Conflict(Completed),
    /// Another process holds a live lease.
    Busy {
        owner: String,
        lease_expires_ms: i64,
    },
}

/// Control numbers set aside for one claim's acknowledgments, kept with the claim so that a
/// takeover writes the same bytes the crashed attempt would have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub at_ms: i64,
    pub isa13: Vec<u32>,
    pub gs06: Vec<u32>,
}

/// A claim still ours, its lease renewed ([`Batch::renew_many`]).
#[derive(Debug)]
pub struct Renewed {
    /// The control numbers an earlier attempt reserved, if any.
    pub reserved: Option<Reservation>,
}

/// What identifies a functional group among a sender's, as X12.6 says: GS01, GS02, GS03 and
/// GS06 together.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupKey {
    pub functional_id: String,
    pub app_sender: String,
    pub app_receiver: String,
    pub control_number: String,
}

impl GroupKey {
    /// The key of a group whose GS01, GS02, GS03 and GS06 are these. A value longer than
    /// any of them may be (15 characters) is kept as its digest: the key is a primary key of
    /// the registry (PostgreSQL refuses an index entry of more than 2,704 bytes, and a group
    /// refused there would fail its file on every retry), and such a group is rejected anyway.
    pub fn of(functional_id: &str, app_sender: &str, app_receiver: &str, control: &str) -> Self {
        fn bounded(value: &str) -> String {
            const LONGEST: usize = 35;
            if value.len() <= LONGEST {
                value.to_string()
            } else {
                format!("blake3:{}", blake3::hash(value.as_bytes()).to_hex())
            }
        }
        GroupKey {
            functional_id: bounded(functional_id),
            app_sender: bounded(app_sender),
            app_receiver: bounded(app_receiver),
            control_number: bounded(control),
        }
    }
}

/// An acknowledgment to store with a completion: its bytes held, or made again as they are
/// stored, a part at a time (a large interchange's 997, never held whole).
#[derive(Debug, Clone, Copy)]
pub struct AckToStore<'a> {
    pub kind: &'a str,
    /// Its file name in the outbox.
    pub path: &'a str,
    pub bytes: AckBytes<'a>,
}

/// The bytes of an [`AckToStore`].
#[derive(Clone, Copy)]
pub enum AckBytes<'a> {
    Held(&'a [u8]),
    /// Writes them to what it is given, the same each time.
    Made(&'a dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()>),
}

impl std::fmt::Debug for AckBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AckBytes::Held(b) => write!(f, "Held({} bytes)", b.len()),
            AckBytes::Made(_) => f.write_str("Made"),
        }
    }
}

impl StoredAck {
    /// This acknowledgment, to store as it is.
    pub fn to_store(&self) -> AckToStore<'_> {
        AckToStore {
            kind: &self.kind,
            path: &self.path,
            bytes: AckBytes::Held(&self.bytes),
        }
    }
}

/// What a completion records.
#[derive(Debug, Clone)]
pub struct Completion<'a> {
    pub disposition: Disposition,
    pub reason_code: Option<&'a str>,
    pub reason: Option<&'a str>,
    pub acks: &'a [AckToStore<'a>],
    pub outputs: &'a [String],
    /// Group keys of this interchange whose groups were not accepted: released, so a
    /// corrected resend may use them again.
    pub released_groups: &'a [GroupKey],
    /// The audit event to append (`accepted`, `rejected`, ...) and its detail (JSON).
    pub event: EventKind,
    pub detail: &'a str,
}

/// An audit event, as `history` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    pub at_ms: i64,
    pub event: EventKind,
    pub key: Option<String>,
    pub partner: Option<String>,
    pub control_number: Option<String>,
    /// The decision's disposition; `None` for a note.
    pub disposition: Option<Disposition>,
    /// The JSON detail recorded with the event.
    pub detail: String,
}

from_row!(
    Event,
    EVENT {
        at_ms: "at",
        event: "event",
        key: "key",
        partner: "partner",
        control_number: "control_number",
        // A development build (83737b4) recorded `released` with the disposition `failed`,
        // which is none; a release has been a note ever since, and such a row reads as one.
        disposition: "CASE WHEN event = 'released' THEN NULL ELSE disposition END",
        detail: "detail",
    }
);

/// A claim not completed: in flight (perhaps with a dead owner) or failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unfinished {
    pub key: String,
    pub partner: String,
    pub control_number: String,
    /// [`ClaimState::InFlight`] or [`ClaimState::Failed`].
    pub state: ClaimState,
    pub owner: Option<String>,
    pub lease_expires_ms: Option<i64>,
    pub attempts: u32,
    pub file: Option<String>,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    /// Why it failed, for a failed claim.
    pub reason: Option<String>,
}

from_row!(
    Unfinished,
    UNFINISHED {
        key: "key",
        partner: "partner",
        control_number: "control_number",
        state: "state",
        owner: "owner",
        lease_expires_ms: "lease_expires",
        attempts: "attempts",
        file: "file",
        first_seen_ms: "first_seen",
        last_seen_ms: "last_seen",
        reason: "reason",
    }
);

/// Everything the registry holds about one interchange key, for `show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Record {
    pub key: String,
    pub partner: String,
    pub control_number: String,
    pub state: ClaimState,
    pub disposition: Option<Disposition>,
    pub reason_code: Option<String>,
    pub reason: Option<String>,
    pub attempts: u32,
    pub owner: Option<String>,
    pub lease_expires_ms: Option<i64>,
    /// The file the last attempt read, as it was named then.
    pub file: Option<String>,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    /// Every content seen under this key: (attempt, fingerprint, when).
    pub fingerprints: Vec<(u32, String, i64)>,
    /// As stored (`show` prints them as text).
    #[serde(skip)]
    pub acks: Vec<StoredAck>,
    pub outputs: Vec<String>,
}

from_row!(Record, RECORD {
    key: "key",
    partner: "partner",
    control_number: "control_number",
    state: "state",
    disposition: "disposition",
    reason_code: "reason_code",
    reason: "reason",
    attempts: "attempts",
    owner: "owner",
    lease_expires_ms: "lease_expires",
    file: "file",
    first_seen_ms: "first_seen",
    last_seen_ms: "last_seen";
    fingerprints, acks, outputs
});

/// The registry's part of `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// (partner, decision, count), every decision ever recorded.
    pub decisions: Vec<(String, EventKind, u64)>,
    /// (partner, kind, count): acknowledgments written, replays included.
    pub acks_sent: Vec<(String, String, u64)>,
    /// (state, count) of claims not completed.
    pub unfinished: Vec<(ClaimState, u64)>,
    pub oldest_unfinished_ms: Option<i64>,
    /// (partner, time of its latest decision).
    pub last_received: Vec<(String, i64)>,
    /// (partner, where its delivery stands, count) of documents someone or something must
    /// still act on: held (an operator), parked (their original), pending (being written).
    pub documents_open: Vec<(String, super::Delivery, u64)>,
    /// (destination, state, count) of the outbox.
    pub deliveries: Vec<(String, super::DeliveryState, u64)>,
    /// (destination, state) of each circuit that was ever moved.
    pub circuits: Vec<(String, super::CircuitState)>,
}

/// Filters for `history`; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub key: Option<String>,
    pub partner: Option<String>,
    pub control_number: Option<String>,
    pub disposition: Option<Disposition>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Several registry steps in one durable transaction (`BEGIN IMMEDIATE` ... `COMMIT`, one
/// fsync). `process` claims, prepares and completes a whole batch of interchanges this way,
/// which is what makes it fast on disks where an fsync costs milliseconds. The steps of an
/// interchange's way through the gateway exist only here: one step alone is a batch of one.
pub struct Batch<'r> {
    pub(super) tx: crate::registry::db::Transaction<'r>,
    path: &'r str,
}

/// What a key an operator typed names ([`Registry::resolve`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    One(String),
    Unknown,
    /// Several senders with that id sent that number: the keys, in order.
    Several(Vec<String>),
}

impl Registry {
    /// Runs `f` in one immediate transaction and commits it; nothing is committed on `Err`.
    pub fn batch<T, E: From<RegistryError>>(
        &mut self,
        f: impl FnOnce(&Batch<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.batch_once(f).map_err(|(e, _)| e)
    }

    /// [`Registry::batch`] of work that only writes to the registry (so that it may run
    /// twice): when the server ended the session while `f` ran, before the COMMIT was sent,
    /// the server rolled the transaction back whole, and `f` runs once more in a new
    /// transaction on a new connection. A failed COMMIT is never run again: the server may
    /// have committed it before the session ended, and a second run would do the work twice.
    pub fn batch_again<T, E: From<RegistryError>>(
        &mut self,
        f: impl Fn(&Batch<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        match self.batch_once(&f) {
            Err((_, true)) => {
                tracing::warn!(registry = %self.path, "the registry's server ended the session in the middle of a transaction (rolled back); running it again on a new connection");
                self.batch(&f)
            }
            other => other.map_err(|(e, _)| e),
        }
    }

    /// [`Registry::batch`], its error with whether the session was lost before the COMMIT
    /// was sent (while `f` ran).
    fn batch_once<T, E: From<RegistryError>>(
        &mut self,
        f: impl FnOnce(&Batch<'_>) -> Result<T, E>,
    ) -> Result<T, (E, bool)> {
        let path = self.path.as_str();
        let sql = |source| {
            (
                E::from(RegistryError::Store {
                    path: path.to_string(),
                    cause: source,
                }),
                false,
            )
        };
        // BEGIN IMMEDIATE can answer "database is locked" without calling the busy handler
        // (opening a WAL read snapshot while many processes start on one file): nothing has
        // run yet, so it is simply tried again, up to the busy timeout.
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(1);
        let tx = loop {
            match self.conn.transaction() {
                Err(e) if e.is_busy() && started.elapsed() < super::BUSY_TIMEOUT => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_millis(50));
                }
                other => break other.map_err(sql)?,
            }
        };
        let batch = Batch { tx, path };
        let out = match f(&batch) {
            Ok(out) => out,
            Err(e) => {
                let lost = batch.tx.session_lost();
                return Err((e, lost));
            }
        };
        batch.tx.commit().map_err(sql)?;
        Ok(out)
    }
}

impl Batch<'_> {
    pub(super) fn sql(&self, source: crate::registry::db::Error) -> RegistryError {
        RegistryError::Store {
            path: self.path.to_string(),
            cause: source,
        }
    }

    /// Appends an audit event for a decision that completes nothing (duplicate, conflict,
    /// in_progress, a file that holds no interchange).
    pub fn record_event(
        &self,
        event: EventKind,
        key: Option<&str>,
        partner: Option<&str>,
        control_number: Option<&str>,
        disposition: Disposition,
        detail: &str,
    ) -> Result<(), RegistryError> {
        let about = About {
            key,
            partner,
            control_number,
        };
        insert_event(&self.tx, now_ms(), event, about, Some(disposition), detail)
            .map_err(|e| self.sql(e))
    }

    /// An event that records no decision (where a file was placed, a claim released): no
    /// disposition, so `history --disposition` lists decisions only.
    pub fn record_note(
        &self,
        event: EventKind,
        key: Option<&str>,
        partner: Option<&str>,
        control_number: Option<&str>,
        detail: &str,
    ) -> Result<(), RegistryError> {
        let about = About {
            key,
            partner,
            control_number,
        };
        insert_event(&self.tx, now_ms(), event, about, None, detail).map_err(|e| self.sql(e))
    }

    /// A control number taken inside the batch (it commits with it).
    pub fn next_control_number_in_batch(
        &self,
        partner: &str,
        counter: super::Counter,
    ) -> Result<u32, RegistryError> {
        super::counters::next_in(&self.tx, partner, counter).map_err(|e| self.sql(e))
    }

    /// Claims `req.key` atomically; see [`Claim`] for the outcomes.
    pub fn claim_interchange(&self, req: &ClaimRequest<'_>) -> Result<Claim, RegistryError> {
        claim(&self.tx, req, now_ms()).map_err(|e| self.sql(e))
    }

    /// Claims each key as [`Batch::claim_interchange`] would one after the other, their
    /// INSERTs sent together (one round trip on PostgreSQL).
    pub fn claim_interchanges(
        &self,
        reqs: &[ClaimRequest<'_>],
    ) -> Result<Vec<Claim>, RegistryError> {
        claim_many(&self.tx, reqs, now_ms()).map_err(|e| self.sql(e))
    }

    /// The next control numbers for each (partner, ISA13s, GS06s), in order, taken together
    /// (one round trip on PostgreSQL): what taking them one after the other gives.
    pub fn take_control_numbers(
        &self,
        wants: &[(&str, usize, usize)],
    ) -> Result<Vec<super::counters::Numbers>, RegistryError> {
        super::counters::take_many(&self.tx, wants).map_err(|e| self.sql(e))
    }

    /// Keeps the numbers taken for `key`'s acknowledgments with its claim, so a takeover
    /// writes the very same bytes.
    pub fn keep_reservation(
        &self,
        key: &str,
        reservation: &Reservation,
    ) -> Result<(), RegistryError> {
        keep_reservation(&self.tx, key, reservation).map_err(|e| self.sql(e))
    }

    /// Registers the group keys (GS02, GS06) of `key`'s groups for `partner`; returns, per
    /// group, whether another interchange seen within `window_days` already used it.
    pub fn claim_groups(
        &self,
        key: &str,
        partner: &str,
        groups: &[GroupKey],
        window_days: u32,
    ) -> Result<Vec<bool>, RegistryError> {
        Ok(self
            .claim_groups_many(&[(key, partner, groups, window_days)])?
            .pop()
            .unwrap_or_default())
    }

    /// [`Batch::claim_groups`] for several interchanges, in order, all sent together (one
    /// round trip on PostgreSQL).
    pub fn claim_groups_many(
        &self,
        claims: &GroupClaims<'_>,
    ) -> Result<Vec<Vec<bool>>, RegistryError> {
        claim_groups(&self.tx, claims).map_err(|e| self.sql(e))
    }

    /// Frees the group keys `key` holds among `groups` (its groups not accepted) before its
    /// completion does: a later interchange of the same batch may then use them, as it could
    /// had it come after the completion.
    pub fn release_groups(
        &self,
        key: &str,
        partner: &str,
        groups: &[GroupKey],
    ) -> Result<(), RegistryError> {
        release_groups(&self.tx, key, partner, groups).map_err(|e| self.sql(e))
    }

    /// Completes `key` if we still own it; `Ok(false)` when our lease was lost to a takeover.
    pub fn complete(
        &self,
        key: &str,
        owner: &str,
        c: &Completion<'_>,
    ) -> Result<bool, RegistryError> {
        complete(&self.tx, key, owner, c).map_err(|e| self.sql(e))
    }

    /// [`Batch::complete`] for each key, their fences sent together (one round trip on
    /// PostgreSQL), the rest of each completion written after them in order.
    pub fn complete_many(
        &self,
        owner: &str,
        completions: &[(&str, Completion<'_>)],
    ) -> Result<Vec<bool>, RegistryError> {
        complete_many(&self.tx, owner, completions).map_err(|e| self.sql(e))
    }

    /// Records an interchange read from an old archive as completed before with
    /// `disposition` (`scan --backfill`): a resend of it is then a duplicate (with nothing to
    /// replay), and a corrected resend of a rejected one is taken as such. A key the registry
    /// knows is left as it is; whether it was recorded.
    pub fn backfill_interchange(
        &self,
        key: &str,
        partner: &str,
        control_number: &str,
        fingerprint: &str,
        file: &str,
        disposition: Disposition,
    ) -> Result<bool, RegistryError> {
        let now = now_ms();
        let inserted = self
            .tx
            .prepare_cached(
                "INSERT INTO interchanges (key, partner, control_number, fingerprint, state,
                 attempts, disposition, reason, outputs, file, first_seen, last_seen)
                 VALUES (?1, ?2, ?3, ?4, 'completed', 1, ?7, 'backfilled by scan', '[]',
                 ?5, ?6, ?6)
                 ON CONFLICT (key) DO NOTHING",
            )
            .and_then(|mut s| {
                s.execute(params![
                    key,
                    partner,
                    control_number,
                    fingerprint,
                    file,
                    now,
                    disposition
                ])
            })
            .map_err(|e| self.sql(e))?;
        if inserted == 1 {
            record_fingerprint(&self.tx, key, fingerprint, 1, now).map_err(|e| self.sql(e))?;
        }
        Ok(inserted == 1)
    }

    /// Extends our lease on each key by `lease_ms` from now, all sent together (one round
    /// trip on PostgreSQL): `None` for a key we no longer own, else what an earlier attempt
    /// reserved for its acknowledgments (one statement each, the fence and the read).
    pub fn renew_many(
        &self,
        keys: &[&str],
        owner: &str,
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, RegistryError> {
        use crate::registry::db::Params;
        let until = now_ms().saturating_add(lease_ms);
        let runs: Vec<_> = keys
            .iter()
            .map(|key| params![key, owner, until].values())
            .collect();
        let rows = self
            .tx
            .query_each(
                "UPDATE interchanges SET lease_expires = ?3 WHERE key = ?1 AND owner = ?2 AND state = 'in_flight'
                 RETURNING reservation",
                &runs,
                read::<Option<String>>,
            )
            .map_err(|e| self.sql(e))?;
        Ok(rows
            .into_iter()
            .map(|row| {
                row.into_iter().next().map(|reservation| Renewed {
                    reserved: reservation
                        .and_then(|s| serde_json::from_str::<Reservation>(&s).ok()),
                })
            })
            .collect())
    }

    /// Marks our claim failed (an operational error or a stop cut the work short), so the
    /// next attempt takes it over at once instead of waiting for the lease.
    pub fn fail(&self, key: &str, owner: &str, reason: &str) -> Result<(), RegistryError> {
        fail(&self.tx, key, owner, reason)
            .map(drop)
            .map_err(|e| self.sql(e))
    }
}

/// The claim itself: a new key is ours in this one statement.
const CLAIM: &str = "INSERT INTO interchanges (key, partner, control_number, fingerprint, state,
         owner, lease_expires, attempts, file, first_seen, last_seen)
     VALUES (?1, ?2, ?3, ?4, 'in_flight', ?5, ?6, 1, ?7, ?8, ?8)
     ON CONFLICT (key) DO NOTHING";

fn claim_values(req: &ClaimRequest<'_>, now: i64) -> Vec<crate::registry::db::Value> {
    use crate::registry::db::Params;
    params![
        req.key,
        req.partner,
        req.control_number,
        req.fingerprint,
        req.owner,
        now.saturating_add(req.lease_ms),
        req.file,
        now
    ]
    .values()
}

fn claim(
    tx: &crate::registry::db::Conn,
    req: &ClaimRequest<'_>,
    now: i64,
) -> Result<Claim, crate::registry::db::Error> {
    let inserted = tx.execute(CLAIM, claim_values(req, now))?;
    after_insert(tx, req, inserted, now)
}

/// Several keys claimed at once: each key's INSERT sent together (one round trip on
/// PostgreSQL), then each decided in order as [`claim`] decides it. The same decisions as
/// one claim after the other: an INSERT touches only its own key, and a key twice in the
/// list finds its first INSERT's row, as it would one after the other.
fn claim_many(
    tx: &crate::registry::db::Conn,
    reqs: &[ClaimRequest<'_>],
    now: i64,
) -> Result<Vec<Claim>, crate::registry::db::Error> {
    let runs: Vec<_> = reqs.iter().map(|req| claim_values(req, now)).collect();
    let inserted = tx.execute_many(CLAIM, &runs)?;
    reqs.iter()
        .zip(inserted)
        .map(|(req, inserted)| after_insert(tx, req, inserted, now))
        .collect()
}

/// The claim's decision once its INSERT changed `inserted` rows.
fn after_insert(
    tx: &crate::registry::db::Conn,
    req: &ClaimRequest<'_>,
    inserted: usize,
    now: i64,
) -> Result<Claim, crate::registry::db::Error> {
    if inserted == 1 {
        record_fingerprint(tx, req.key, req.fingerprint, 1, now)?;
        return Ok(Claim::Owned {
            attempt: 1,
            previous: Previous::New,
            first_fingerprint: req.fingerprint.to_string(),
        });
    }
    let (state, fingerprint, owner, lease, attempts, disposition): (ClaimState, String, Option<String>, Option<i64>, u32, Option<Disposition>) = tx.prepare_cached("SELECT state, fingerprint, owner, lease_expires, attempts, disposition FROM interchanges WHERE key = ?1")?.query_row(
        [req.key],
        read,
    )?;
    tx.prepare_cached("UPDATE interchanges SET last_seen = ?2 WHERE key = ?1")?
        .write(params![req.key, now])?;
    let same = fingerprint == req.fingerprint;
    let take_over = |previous: Previous| -> Result<Claim, crate::registry::db::Error> {
        let attempt = attempts + 1;
        // A different content may not reuse the numbers reserved for the old one.
        tx.prepare_cached(
            "UPDATE interchanges SET state = 'in_flight', owner = ?2, lease_expires = ?3,
                 attempts = ?4, fingerprint = ?5, file = ?6,
                 reservation = CASE WHEN fingerprint = ?5 THEN reservation END,
                 disposition = NULL, reason_code = NULL, reason = NULL
             WHERE key = ?1",
        )?
        .execute(params![
            req.key,
            req.owner,
            now.saturating_add(req.lease_ms),
            attempt,
            req.fingerprint,
            req.file
        ])?;
        record_fingerprint(tx, req.key, req.fingerprint, attempt, now)?;
        let first_fingerprint = tx
            .prepare_cached(
                "SELECT fingerprint FROM fingerprints WHERE key = ?1 ORDER BY attempt LIMIT 1",
            )?
            .query_row([req.key], read)?;
        Ok(Claim::Owned {
            attempt,
            previous,
            first_fingerprint,
        })
    };
    Ok(match (state, disposition) {
        (ClaimState::Completed, _) if same => Claim::Duplicate(load_completed(tx, req.key)?),
        (ClaimState::Completed, Some(Disposition::Rejected)) => {
            take_over(Previous::Rejected { fingerprint })?
        }
        (ClaimState::Completed, _) => Claim::Conflict(load_completed(tx, req.key)?),
        (ClaimState::InFlight, _)
            if lease.unwrap_or(0) > now
                && owner.as_deref() != Some(req.owner)
                && !owner.as_deref().is_some_and(req.is_dead) =>
        {
            Claim::Busy {
                owner: owner.unwrap_or_default(),
                lease_expires_ms: lease.unwrap_or(0),
            }
        }
        // An unfinished attempt may have written its outputs before it died, and downstream
        // may have taken them: only the same content may finish its work.
        (ClaimState::InFlight | ClaimState::Failed, _) if !same => {
            Claim::Conflict(load_completed(tx, req.key)?)
        }
        (ClaimState::InFlight, _)
            if lease.unwrap_or(0) > now && owner.as_deref() != Some(req.owner) =>
        {
            take_over(Previous::Dead {
                owner: owner.unwrap_or_default(),
            })?
        }
        (ClaimState::InFlight, _) => take_over(Previous::Expired {
            owner: owner.unwrap_or_default(),
        })?,
        (ClaimState::Failed, _) => take_over(Previous::Failed)?,
    })
}

fn keep_reservation(
    tx: &crate::registry::db::Conn,
    key: &str,
    reservation: &Reservation,
) -> Result<(), crate::registry::db::Error> {
    tx.prepare_cached("UPDATE interchanges SET reservation = ?2 WHERE key = ?1")?
        .write(params![key, json(reservation)])
}

/// The groups of interchanges to register: each interchange's key, partner, groups and
/// window in days.
pub type GroupClaims<'a> = [(&'a str, &'a str, &'a [GroupKey], u32)];

fn claim_groups(
    tx: &crate::registry::db::Conn,
    claims: &GroupClaims<'_>,
) -> Result<Vec<Vec<bool>>, crate::registry::db::Error> {
    use crate::registry::db::Params;
    let now = now_ms();
    let runs: Vec<_> = claims
        .iter()
        .flat_map(|(key, partner, groups, window_days)| {
            let oldest = now - i64::from(*window_days) * 86_400_000;
            groups.iter().map(move |g| {
                params![
                    partner,
                    g.functional_id,
                    g.app_sender,
                    g.app_receiver,
                    g.control_number,
                    key,
                    now,
                    oldest
                ]
                .values()
            })
        })
        .collect();
    // Take the key when it is free, ours already, or older than the window. A row from
    // before migration 4 knows only GS02 and GS06: within the window it still holds its
    // number, whatever the GS01 and GS03 (never a miss on upgrade). Each statement is the
    // same whatever the ones before it found, so all are sent at once, in order: a key
    // twice among them is found taken the second time, as one after the other.
    let taken = tx.execute_many(
        "INSERT INTO groups (partner, functional_id, app_sender, app_receiver, control_number, interchange_key, seen)
         SELECT CAST(?1 AS TEXT), CAST(?2 AS TEXT), CAST(?3 AS TEXT), CAST(?4 AS TEXT),
             CAST(?5 AS TEXT), CAST(?6 AS TEXT), CAST(?7 AS BIGINT)
         WHERE NOT EXISTS (SELECT 1 FROM groups WHERE partner = ?1 AND functional_id = ''
             AND app_receiver = '' AND app_sender = ?3 AND control_number = ?5
             AND interchange_key <> ?6 AND seen >= ?8)
         ON CONFLICT (partner, functional_id, app_sender, app_receiver, control_number) DO UPDATE
         SET interchange_key = excluded.interchange_key, seen = excluded.seen
         WHERE groups.interchange_key = excluded.interchange_key OR groups.seen < ?8",
        &runs,
    )?;
    let mut taken = taken.into_iter();
    Ok(claims
        .iter()
        .map(|(_, _, groups, _)| {
            groups
                .iter()
                .map(|_| taken.next().is_some_and(|n| n == 0))
                .collect()
        })
        .collect())
}

fn complete(
    tx: &crate::registry::db::Conn,
    key: &str,
    owner: &str,
    c: &Completion<'_>,
) -> Result<bool, crate::registry::db::Error> {
    let completions = [(key, c.clone())];
    Ok(complete_many(tx, owner, &completions)?.first() == Some(&true))
}

fn complete_many(
    tx: &crate::registry::db::Conn,
    owner: &str,
    completions: &[(&str, Completion<'_>)],
) -> Result<Vec<bool>, crate::registry::db::Error> {
    use crate::registry::db::Params;
    let now = now_ms();
    // The fence and the row's partner and number in one statement: no row when another
    // owner took the claim over. A fence touches only its own key, so all are sent at once.
    let runs: Vec<_> = completions
        .iter()
        .map(|(key, c)| {
            params![
                key,
                owner,
                c.disposition,
                c.reason_code,
                c.reason,
                json(&c.outputs),
                now
            ]
            .values()
        })
        .collect();
    let fenced: Vec<Vec<(String, String)>> = tx.query_each(
        "UPDATE interchanges SET state = 'completed', owner = NULL, lease_expires = NULL,
             disposition = ?3, reason_code = ?4, reason = ?5, outputs = ?6, last_seen = ?7
         WHERE key = ?1 AND owner = ?2 AND state = 'in_flight'
         RETURNING partner, control_number",
        &runs,
        read,
    )?;
    completions
        .iter()
        .zip(fenced)
        .map(|((key, c), fenced)| match fenced.into_iter().next() {
            Some((partner, control)) => {
                completed(tx, key, &partner, &control, c, now)?;
                Ok(true)
            }
            None => Ok(false),
        })
        .collect()
}

/// What a completion records once its fence held: the acknowledgments, the group keys its
/// rejected groups release, and the audit event (writes only, sent with what follows).
fn completed(
    tx: &crate::registry::db::Conn,
    key: &str,
    partner: &str,
    control: &str,
    c: &Completion<'_>,
    now: i64,
) -> Result<(), crate::registry::db::Error> {
    tx.prepare_cached("DELETE FROM ack_parts WHERE key = ?1")?
        .write([key])?;
    tx.prepare_cached("DELETE FROM acks WHERE key = ?1")?
        .write([key])?;
    for (seq, a) in c.acks.iter().enumerate() {
        let mut parts = AckParts {
            tx,
            key,
            seq: seq as i64,
            ack: a,
            part: 0,
            buf: Vec::new(),
            failed: None,
        };
        let written = match a.bytes {
            AckBytes::Held(bytes) => std::io::Write::write_all(&mut parts, bytes),
            AckBytes::Made(make) => make(&mut parts),
        };
        match (written, parts.failed.take()) {
            (_, Some(e)) => return Err(e),
            (Err(e), None) => return Err(crate::registry::db::Error::Making(e)),
            (Ok(()), None) => parts.store(false)?,
        }
    }
    release_groups(tx, key, partner, c.released_groups)?;
    let about = About {
        key: Some(key),
        partner: Some(partner),
        control_number: Some(control),
    };
    insert_event(tx, now, c.event, about, Some(c.disposition), c.detail)
}

/// Deletes the rows of `groups` that `key` holds (another key's stay).
fn release_groups(
    tx: &crate::registry::db::Conn,
    key: &str,
    partner: &str,
    groups: &[GroupKey],
) -> Result<(), crate::registry::db::Error> {
    for g in groups {
        tx.prepare_cached("DELETE FROM groups WHERE partner = ?1 AND functional_id = ?2 AND app_sender = ?3 AND app_receiver = ?4 AND control_number = ?5 AND interchange_key = ?6")?.write(
            params![partner, g.functional_id, g.app_sender, g.app_receiver, g.control_number, key],
        )?;
    }
    Ok(())
}

/// Marks `key`'s in-flight claim failed if `owner` still holds it; whether it did.
fn fail(
    tx: &crate::registry::db::Conn,
    key: &str,
    owner: &str,
    reason: &str,
) -> Result<bool, crate::registry::db::Error> {
    tx.prepare_cached(
        "UPDATE interchanges SET state = 'failed', owner = NULL, lease_expires = NULL, reason = ?3
         WHERE key = ?1 AND owner = ?2 AND state = 'in_flight'",
    )?
    .execute(params![key, owner, reason])
    .map(|n| n == 1)
}

impl Registry {
    /// Claims not completed, oldest first.
    pub fn unfinished(&self) -> Result<Vec<Unfinished>, RegistryError> {
        self.unfinished_where("state != 'completed'", &[])
    }

    fn unfinished_where(
        &self,
        condition: &str,
        args: &[&dyn crate::registry::db::ToValue],
    ) -> Result<Vec<Unfinished>, RegistryError> {
        self.all(
            &format!(
                "SELECT {UNFINISHED} FROM interchanges WHERE {condition} ORDER BY first_seen, key"
            ),
            args,
            read,
        )
    }

    /// Everything about `key`, if the registry has it.
    pub fn record(&self, key: &str) -> Result<Option<Record>, RegistryError> {
        let sql = |e| self.sql(e);
        let row: Option<Record> = self
            .conn
            .query_row(
                &format!("SELECT {RECORD} FROM interchanges WHERE key = ?1"),
                [key],
                read,
            )
            .optional()
            .map_err(sql)?;
        let Some(mut record) = row else {
            return Ok(None);
        };
        let mut stmt = self
            .conn
            .prepare("SELECT attempt, fingerprint, seen FROM fingerprints WHERE key = ?1 ORDER BY attempt")
            .map_err(sql)?;
        record.fingerprints = stmt
            .query_map([key], read)
            .map_err(sql)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql)?;
        let done = load_completed(&self.conn, key).map_err(sql)?;
        record.acks = done.acks;
        record.outputs = done.outputs;
        Ok(Some(record))
    }

    /// Every key the registry holds (completed or not).
    pub fn keys(&self) -> Result<Vec<String>, RegistryError> {
        self.all("SELECT key FROM interchanges", [], read)
    }

    /// Every row `query` answers, each made by `row`: the one way lists are read.
    pub(super) fn all<T, P: crate::registry::db::Params>(
        &self,
        query: &str,
        params: P,
        row: impl FnMut(&crate::registry::db::Row<'_>) -> crate::registry::db::Result<T>,
    ) -> Result<Vec<T>, RegistryError> {
        let mut stmt = self.conn.prepare(query).map_err(|e| self.sql(e))?;
        let rows = stmt.query_map(params, row).map_err(|e| self.sql(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.sql(e))
    }

    /// Keys of interchange `control_number` from senders whose id (ISA06) is `id`, whatever
    /// their qualifier: `show ACME:101`.
    pub fn keys_of(&self, id: &str, control_number: &str) -> Result<Vec<String>, RegistryError> {
        self.all(
            "SELECT key FROM interchanges WHERE control_number = ?2
               AND substr(partner, instr(partner, ':') + 1) = ?1 ORDER BY key",
            params![id, control_number],
            read,
        )
    }

    /// The key an operator means: `QUAL:ID:ISA13`, or `ID:ISA13` when only one sender with
    /// that id sent that number; the number may be unpadded. Here, not in the desk, because
    /// the desk and the rejected folder's `resolve` both read keys this way.
    pub fn resolve(&self, given: &str) -> Result<Resolved, RegistryError> {
        let typed = crate::keys::typed_key(given);
        if self.record(&typed)?.is_some() {
            return Ok(Resolved::One(typed));
        }
        if let Some((id, number)) = typed.split_once(':').filter(|(_, n)| !n.contains(':')) {
            let mut keys = self.keys_of(id, number)?;
            return Ok(match keys.len() {
                0 => Resolved::Unknown,
                1 => Resolved::One(keys.remove(0)),
                _ => Resolved::Several(keys),
            });
        }
        Ok(Resolved::Unknown)
    }

    /// Opens a completed interchange for another attempt (`reprocess`): marked failed, with
    /// its reserved control numbers dropped, so that the next claim of the same content takes
    /// it over as attempt n+1 and answers with fresh acknowledgments. Only a rejected one
    /// unless `accepted_too`. Returns the disposition it had, or `None` when there was
    /// nothing to reopen.
    pub fn reopen(
        &mut self,
        key: &str,
        accepted_too: bool,
    ) -> Result<Option<Disposition>, RegistryError> {
        self.batch(|b| {
            let was: Option<(ClaimState, Option<Disposition>, String, String)> = b
                .tx
                .query_row(
                    "SELECT state, disposition, partner, control_number FROM interchanges WHERE key = ?1",
                    [key],
                    read,
                )
                .optional()
                .map_err(|e| b.sql(e))?;
            // Every completion records a disposition: a completed row without one was not
            // written by x12gate, and is not reopened.
            let Some((ClaimState::Completed, Some(disposition), partner, control)) = was else {
                return Ok(None);
            };
            if disposition != Disposition::Rejected && !accepted_too {
                return Ok(None);
            }
            b.tx.execute(
                "UPDATE interchanges SET state = 'failed', owner = NULL, lease_expires = NULL,
                        reservation = NULL
                 WHERE key = ?1 AND state = 'completed'",
                [key],
            )
            .map_err(|e| b.sql(e))?;
            // The answers sent for the earlier outcome stay in the history: their beginning,
            // and their size (a million sets' 997 is 22 MB; its file is in the outbox).
            let earlier = load_completed(&b.tx, key).map_err(|e| b.sql(e))?;
            let acks: Vec<serde_json::Value> = earlier
                .acks
                .iter()
                .map(|a| {
                    let kept = a.bytes.get(..KEPT_IN_HISTORY).unwrap_or(&a.bytes);
                    serde_json::json!({ "kind": a.kind, "path": a.path, "bytes": String::from_utf8_lossy(kept), "size": a.bytes.len() })
                })
                .collect();
            let detail = serde_json::json!({ "was": disposition, "acks": acks }).to_string();
            b.record_note(EventKind::Reopened, Some(key), Some(&partner), Some(&control), &detail)?;
            Ok(Some(disposition))
        })
    }

    /// Undoes [`Registry::reopen`] when the reprocessing decided nothing: completed again
    /// with the disposition it had, if nobody has claimed it since.
    pub fn restore(&mut self, key: &str, disposition: Disposition) -> Result<(), RegistryError> {
        self.batch(|b| {
            b.tx.execute(
                "UPDATE interchanges SET state = 'completed', disposition = ?2
                 WHERE key = ?1 AND state = 'failed' AND owner IS NULL",
                params![key, disposition],
            )
            .map(drop)
            .map_err(|e| b.sql(e))
        })
    }

    /// The unfinished claim of `key`, if there is one.
    pub fn unfinished_claim(&self, key: &str) -> Result<Option<Unfinished>, RegistryError> {
        Ok(self
            .unfinished_where("state != 'completed' AND key = ?1", &[&key])?
            .pop())
    }

    /// Marks `key`'s in-flight claim failed, if `owner` still holds it, so the next attempt
    /// takes it over at once; records who released it. `Ok(false)` when the claim changed
    /// meanwhile (completed, or taken by someone else).
    pub fn release(&mut self, key: &str, owner: &str, why: &str) -> Result<bool, RegistryError> {
        self.batch(|b| {
            let released = fail(&b.tx, key, owner, why).map_err(|e| b.sql(e))?;
            if released {
                let detail =
                    serde_json::json!({ "released_from": owner, "reason": why }).to_string();
                let (partner, control): (String, String) =
                    b.tx.query_row(
                        "SELECT partner, control_number FROM interchanges WHERE key = ?1",
                        [key],
                        read,
                    )
                    .map_err(|e| b.sql(e))?;
                b.record_note(
                    EventKind::Released,
                    Some(key),
                    Some(&partner),
                    Some(&control),
                    &detail,
                )?;
            }
            Ok(released)
        })
    }

    /// Audit events, oldest first.
    pub fn history(&self, f: &EventFilter) -> Result<Vec<Event>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare(
                // A development build (83737b4) recorded `released` with the disposition
                // `failed`, which is none; a release has been a note ever since, and such a
                // row reads as one.
                &format!(
                    "SELECT {EVENT} FROM events
                 WHERE (partner = ?1 OR ?1 IS NULL) AND (control_number = ?2 OR ?2 IS NULL)
                   AND (disposition = ?3 OR ?3 IS NULL) AND (at >= ?4 OR ?4 IS NULL)
                   AND (at <= ?5 OR ?5 IS NULL) AND (key = ?6 OR ?6 IS NULL)
                 ORDER BY id"
                ),
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(
                params![
                    f.partner,
                    f.control_number,
                    f.disposition,
                    f.since_ms,
                    f.until_ms,
                    f.key
                ],
                read,
            )
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.sql(e))
    }

    /// Interchange counts by partner and disposition (`in_flight` and `failed` for unfinished ones).
    /// The middle column is a label, a disposition or a claim state, for `stats` to print; a
    /// program that needs one of them reads [`Registry::snapshot`] or [`Registry::unfinished`].
    pub fn stats(&self) -> Result<Vec<(String, String, u64)>, RegistryError> {
        self.all(
            "SELECT partner, CASE WHEN state = 'completed' THEN disposition ELSE state END AS d, COUNT(*)
             FROM interchanges GROUP BY partner, d ORDER BY partner, d",
            [],
            read,
        )
    }

    /// Decisions by partner and kind (`accepted`, `duplicate`, `conflict`, ...), from the
    /// audit trail: every interchange of every file, resends included.
    pub fn decisions(&self) -> Result<Vec<(String, EventKind, u64)>, RegistryError> {
        // A file with no readable interchange has no partner: it counts under "".
        self.all(
            "SELECT COALESCE(partner, ''), event, COUNT(*) FROM events
             WHERE disposition IS NOT NULL
             GROUP BY 1, event ORDER BY 1, event",
            [],
            read,
        )
    }

    /// What `/metrics` reports from the registry, read in one go.
    pub fn snapshot(&self) -> Result<Snapshot, RegistryError> {
        let decisions = self.decisions()?;
        // The acknowledgments an event lists: SQLite's JSON functions, or the function the
        // PostgreSQL schema defines for the same (an unreadable detail lists none).
        let acks = if self.conn.is_postgres() {
            "acks_of(e.detail) j(value)"
        } else {
            "json_each(e.detail, '$.acks') j"
        };
        let readable = if self.conn.is_postgres() {
            ""
        } else {
            "AND json_valid(e.detail)"
        };
        let acks_sent: Vec<(String, String, u64)> = self.all(
            &format!(
                "SELECT e.partner,
                    CASE WHEN j.value LIKE '%.997.x12' THEN '997'
                         WHEN j.value LIKE '%.999.x12' THEN '999'
                         WHEN j.value LIKE '%.ta1.x12' THEN 'ta1' ELSE 'other' END,
                    COUNT(*)
             FROM events e, {acks}
             WHERE e.partner IS NOT NULL AND e.disposition IS NOT NULL {readable}
             GROUP BY 1, 2 ORDER BY 1, 2",
            ),
            [],
            read,
        )?;
        let unfinished: Vec<(ClaimState, u64, i64)> = self.all(
            // last_seen: when the claim was last taken (first_seen may be days older).
            "SELECT state, COUNT(*), MIN(last_seen) FROM interchanges
             WHERE state != 'completed' GROUP BY state",
            [],
            read,
        )?;
        let last_received: Vec<(String, i64)> = self.all(
            "SELECT partner, MAX(at) FROM events
             WHERE partner IS NOT NULL AND disposition IS NOT NULL GROUP BY partner ORDER BY partner",
            [],
            read,
        )?;
        let documents_open: Vec<(String, super::Delivery, u64)> = self.all(
            "SELECT partner, delivery, COUNT(*) FROM documents
             WHERE delivery IN ('pending', 'held', 'parked') GROUP BY 1, 2 ORDER BY 1, 2",
            [],
            read,
        )?;
        let deliveries = self.delivery_counts()?;
        let circuits = self
            .circuits()?
            .into_iter()
            .map(|(d, s, ..)| (d, s))
            .collect();
        Ok(Snapshot {
            decisions,
            acks_sent,
            documents_open,
            deliveries,
            circuits,
            oldest_unfinished_ms: unfinished.iter().map(|(_, _, t)| *t).min(),
            unfinished: unfinished.into_iter().map(|(s, n, _)| (s, n)).collect(),
            last_received,
        })
    }

    /// Removes completed keys (and their group keys) last seen before each partner's window.
    /// `window_days` gives a partner's window from its `QUAL:ID`. Returns the keys removed.
    pub fn prune(
        &mut self,
        window_days: &dyn Fn(&str) -> u32,
    ) -> Result<Vec<String>, RegistryError> {
        let path = self.path.clone();
        let sql = |source| RegistryError::Store {
            path: path.clone(),
            cause: source,
        };
        let now = now_ms();
        let tx = self.conn.transaction().map_err(sql)?;
        let candidates: Vec<(String, String, i64)> = {
            let mut stmt = tx
                .prepare(
                    "SELECT key, partner, last_seen FROM interchanges WHERE state != 'in_flight'",
                )
                .map_err(sql)?;
            let rows = stmt.query_map([], read).map_err(sql)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(sql)?
        };
        let mut removed = Vec::new();
        for (key, partner, last_seen) in candidates {
            // An interchange whose documents a destination has yet to take stays, so that
            // a later prune finds them once delivered.
            let open: i64 = tx
                .query_row(
                    "SELECT count(*) FROM deliveries WHERE interchange_key = ?1
                     AND state != 'delivered'",
                    [&key],
                    read,
                )
                .map_err(sql)?;
            if open > 0 {
                continue;
            }
            if last_seen < now - i64::from(window_days(&partner)) * 86_400_000 {
                for table in ["ack_parts", "acks", "fingerprints"] {
                    tx.execute(&format!("DELETE FROM {table} WHERE key = ?1"), [&key])
                        .map_err(sql)?;
                }
                tx.execute("DELETE FROM groups WHERE interchange_key = ?1", [&key])
                    .map_err(sql)?;
                // Its documents go with it, with their deliveries (all delivered), unless an
                // operator or an original still has to decide them.
                tx.execute(
                    "DELETE FROM deliveries WHERE interchange_key = ?1
                     AND document_id IN (SELECT id FROM documents WHERE interchange_key = ?1
                         AND delivery NOT IN ('held', 'parked', 'pending'))",
                    [&key],
                )
                .map_err(sql)?;
                tx.execute(
                    "DELETE FROM documents WHERE interchange_key = ?1
                     AND delivery NOT IN ('held', 'parked', 'pending')
                     AND id NOT IN (SELECT document_id FROM deliveries)",
                    [&key],
                )
                .map_err(sql)?;
                tx.execute("DELETE FROM interchanges WHERE key = ?1", [&key])
                    .map_err(sql)?;
                removed.push(key);
            }
        }
        let detail = json(&serde_json::json!({ "removed": removed }));
        insert_event(&tx, now, EventKind::Prune, About::default(), None, &detail).map_err(sql)?;
        tx.commit().map_err(sql)?;
        Ok(removed)
    }

    /// Moves `key`'s clock back by `days` (tests of retention only).
    #[doc(hidden)]
    pub fn age_for_tests(&self, key: &str, days: i64) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE interchanges SET last_seen = last_seen - ?2 WHERE key = ?1",
                params![key, days * 86_400_000],
            )
            .map(drop)
            .map_err(|e| self.sql(e))
    }
}

fn record_fingerprint(
    tx: &crate::registry::db::Conn,
    key: &str,
    fingerprint: &str,
    attempt: u32,
    now: i64,
) -> Result<(), crate::registry::db::Error> {
    tx.prepare_cached(
        "INSERT INTO fingerprints (key, fingerprint, attempt, seen) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (key, attempt) DO UPDATE SET fingerprint = excluded.fingerprint, seen = excluded.seen",
    )?.write(
        params![key, fingerprint, attempt, now],
    )
}

/// The interchange an audit event is about, as far as it is known.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct About<'a> {
    pub key: Option<&'a str>,
    pub partner: Option<&'a str>,
    pub control_number: Option<&'a str>,
}

pub(super) fn insert_event(
    conn: &crate::registry::db::Conn,
    at: i64,
    event: EventKind,
    about: About<'_>,
    disposition: Option<Disposition>,
    detail: &str,
) -> Result<(), crate::registry::db::Error> {
    let About {
        key,
        partner,
        control_number,
    } = about;
    conn.prepare_cached(
        "INSERT INTO events (at, event, key, partner, control_number, disposition, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .write(params![
        at,
        event,
        key,
        partner,
        control_number,
        disposition,
        detail
    ])
}

fn load_completed(
    tx: &crate::registry::db::Conn,
    key: &str,
) -> Result<Completed, crate::registry::db::Error> {
    type Outcome = (
        Option<Disposition>,
        Option<String>,
        Option<String>,
        String,
        Option<String>,
        u32,
    );
    let (disposition, reason_code, reason, fingerprint, outputs, attempts): Outcome = tx
        .prepare_cached(
            "SELECT disposition, reason_code, reason, fingerprint, outputs, attempts
             FROM interchanges WHERE key = ?1",
        )?
        .query_row([key], read)?;
    let mut stmt = tx.prepare(&format!(
        "SELECT seq, {STORED_ACK} FROM acks WHERE key = ?1 ORDER BY seq"
    ))?;
    let mut acks: Vec<(i64, StoredAck)> = stmt
        .query_map([key], read)?
        .collect::<Result<Vec<_>, _>>()?;
    // Room for the parts at once: grown part by part, a 25 MB 997 took 32.
    let mut sizes = tx.prepare_cached(
        "SELECT seq, sum(length(bytes)), count(*) FROM ack_parts WHERE key = ?1 GROUP BY seq",
    )?;
    let counts = sizes
        .query_map([key], |r| {
            let (seq, size, count): (i64, i64, i64) = read(r)?;
            if let Some((_, ack)) = acks.iter_mut().find(|(s, _)| *s == seq) {
                ack.bytes
                    .reserve_exact(usize::try_from(size).unwrap_or_default());
            }
            Ok((seq, count))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    // A part at a time, each onto its acknowledgment as it is read: PostgreSQL's client
    // holds every row of an answer, so one query for all of them held the 997 twice.
    let mut part =
        tx.prepare_cached("SELECT bytes FROM ack_parts WHERE key = ?1 AND seq = ?2 AND part = ?3")?;
    for (seq, count) in counts {
        let Some((_, ack)) = acks.iter_mut().find(|(s, _)| *s == seq) else {
            continue;
        };
        for n in 1..=count {
            let bytes: Vec<u8> = part.query_row(params![key, seq, n], read)?;
            ack.bytes.extend_from_slice(&bytes);
        }
    }
    let acks = acks.into_iter().map(|(_, a)| a).collect();
    Ok(Completed {
        disposition,
        reason_code,
        reason,
        fingerprint,
        acks,
        outputs: outputs
            .and_then(|o| serde_json::from_str(&o).ok())
            .unwrap_or_default(),
        attempts,
    })
}

/// An acknowledgment on its way into the registry: its first part in `acks`, the others in
/// `ack_parts`, each stored once it is full.
struct AckParts<'t> {
    tx: &'t crate::registry::db::Conn,
    key: &'t str,
    seq: i64,
    ack: &'t AckToStore<'t>,
    /// The part being filled.
    part: i64,
    buf: Vec<u8>,
    failed: Option<crate::registry::db::Error>,
}

impl AckParts<'_> {
    /// Stores the part being filled (the first even when empty: the row is the ack). A full
    /// part waits for the database: PostgreSQL's writes in a transaction are otherwise
    /// queued until its next answer, every part of a 22 MB 997 with them.
    fn store(&mut self, full: bool) -> Result<(), crate::registry::db::Error> {
        if self.part > 0 && self.buf.is_empty() {
            return Ok(());
        }
        let (key, seq, part, buf) = (self.key, self.seq, self.part, &self.buf);
        let (sql, values): (&str, &[&dyn crate::registry::db::ToValue]) = match part {
            0 => (
                "INSERT INTO acks (key, seq, kind, path, bytes) VALUES (?1, ?2, ?3, ?4, ?5)",
                &[&key, &seq, &self.ack.kind, &self.ack.path, buf],
            ),
            _ => (
                "INSERT INTO ack_parts (key, seq, part, bytes) VALUES (?1, ?2, ?3, ?4)",
                &[&key, &seq, &part, buf],
            ),
        };
        let mut insert = self.tx.prepare_cached(sql)?;
        if full {
            insert.execute(values)?;
        } else {
            insert.write(values)?;
        }
        self.part += 1;
        self.buf.clear();
        Ok(())
    }
}

impl std::io::Write for AckParts<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.failed.is_some() {
            return Err(std::io::Error::other("the registry refused a part"));
        }
        let n = bytes.len().min(ACK_PART - self.buf.len());
        self.buf
            .extend_from_slice(bytes.get(..n).unwrap_or_default());
        if self.buf.len() == ACK_PART {
            if let Err(e) = self.store(true) {
                self.failed = Some(e);
                return Err(std::io::Error::other("the registry refused a part"));
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The most bytes of an earlier acknowledgment a `reopened` event keeps.
const KEPT_IN_HISTORY: usize = 64 << 10;

/// The most bytes of an acknowledgment one row holds (see migration 9): the rest goes in
/// `ack_parts`, so that storing or replaying a large one copies a part at a time.
const ACK_PART: usize = 1 << 20;

/// Keeps the constant in one place for the CHECK constraint's readers.
const _: () = assert!(MAX_CONTROL_NUMBER == 999_999_999);

#[cfg(test)]
mod tests;
