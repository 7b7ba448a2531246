//! Our own documents sent to partners: one row per outbound document key, claimed, numbered
//! and recorded with its interchange's bytes in one transaction, so that a retry of the ERP
//! (however late) is answered with the interchange first sent, and a crash between the
//! commit and the file leaves bytes to write again, never new numbers. The partner's
//! TA1/997/999 settle each row's acknowledgment; what matches nothing is kept.

use crate::registry::db::{params, read, FromRow, OptionalExtension};

use super::claims::now_ms;
use super::{Batch, EventKind, Registry, RegistryError};

/// One document we send, as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OutboundRow {
    pub key: String,
    pub partner: String,
    pub set_id: String,
    pub document_id: String,
    pub fingerprint: String,
    pub idempotency_key: Option<String>,
    /// `writing` (numbered, its file not yet confirmed written) or `sent`.
    pub state: String,
    pub isa13: u32,
    pub gs06: u32,
    pub st02: String,
    pub file: String,
    pub created_ms: i64,
    pub sent_ms: Option<i64>,
    /// What the partner said: `waiting`, `accepted`, `accepted_with_errors`,
    /// `partially_accepted`, `rejected`, or `not_expected` (a partner that never answers);
    /// [`OutboundRow::ack_state`] adds `overdue`.
    pub ack: String,
    pub ack_kind: Option<String>,
    pub ack_detail: Option<String>,
    pub ack_ms: Option<i64>,
    pub ack_late: bool,
    pub ack_due_ms: Option<i64>,
    /// Acknowledgments received for it, duplicates included.
    pub acks_seen: i64,
    pub resends: i64,
}

impl OutboundRow {
    /// The acknowledgment's state as of `now`: `overdue` once a waiting document's due time
    /// has passed.
    pub fn ack_state(&self, now: i64) -> &str {
        match self.ack_due_ms {
            Some(due) if self.ack == "waiting" && now > due => "overdue",
            _ => &self.ack,
        }
    }
}

const COLUMNS: &str = "key, partner, set_id, document_id, fingerprint, idempotency_key, state,
    isa13, gs06, st02, file, created, sent_at, ack, ack_kind, ack_detail, ack_at, ack_late,
    ack_due, acks_seen, resends";

impl FromRow for OutboundRow {
    fn read(c: &mut crate::registry::db::Columns<'_, '_>) -> crate::registry::db::Result<Self> {
        let (key, partner, set_id, document_id, fingerprint, idempotency_key, state) =
            FromRow::read(c)?;
        let (isa13, gs06, st02, file, created_ms, sent_ms): (i64, i64, _, _, _, _) =
            FromRow::read(c)?;
        let (ack, ack_kind, ack_detail, ack_ms, ack_late, ack_due_ms, acks_seen, resends) =
            FromRow::read(c)?;
        Ok(OutboundRow {
            key,
            partner,
            set_id,
            document_id,
            fingerprint,
            idempotency_key,
            state,
            isa13: u32::try_from(isa13).unwrap_or(0),
            gs06: u32::try_from(gs06).unwrap_or(0),
            st02,
            file,
            created_ms,
            sent_ms,
            ack,
            ack_kind,
            ack_detail,
            ack_ms,
            ack_late,
            ack_due_ms,
            acks_seen,
            resends,
        })
    }
}

/// A document to claim: its key and content, and where its file goes.
#[derive(Clone)]
pub struct NewOutbound<'a> {
    pub key: &'a str,
    pub partner: &'a str,
    pub set_id: &'a str,
    pub document_id: &'a str,
    pub fingerprint: &'a str,
    pub idempotency_key: Option<&'a str>,
    /// Who writes it, and for how long the claim is its own.
    pub owner: &'a str,
    pub lease_ms: i64,
    /// Whether a claim's owner is known dead (its lease need not run out).
    pub is_dead: &'a dyn Fn(&str) -> bool,
    /// How long after its numbering the partner's acknowledgment is due; `None`: the partner
    /// never sends one.
    pub ack_due_ms: Option<i64>,
    /// Which interchange of its batch it travels in when new: documents of a batch with the
    /// same value share one (one ISA13).
    pub together: usize,
    /// Its functional group (GS01): a group, and a GS06, each within its interchange.
    pub group: &'a str,
}

/// Where a new document of a batch goes in its interchange: which of the batch it is, its
/// group's GS06 and its ST02.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub index: usize,
    pub gs06: u32,
    pub st02: u32,
}

/// What became of a claim on an outbound key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboundClaim {
    /// Ours to write: numbered now, or taken over from a writer whose lease ran out (its
    /// numbers and bytes, as they were recorded).
    Write {
        row: OutboundRow,
        /// The bytes of its interchange, shared by the documents numbered with it.
        bytes: std::sync::Arc<[u8]>,
        taken_over: bool,
    },
    /// Sent before with this content: nothing new is sent.
    Replay(OutboundRow),
    /// Sent (or being sent) with other content: refused.
    Conflict(OutboundRow),
    /// Another process is writing it now, its lease running.
    Busy(OutboundRow),
}

/// A row as a claim finds it: with its bytes, its writer and the writer's lease.
type Claimed = (OutboundRow, Option<String>, Option<i64>);

/// Why a transaction of ours was rolled back: the registry's error, or a refusal of the
/// work itself (nothing it took, not even a number, is kept).
enum Refused {
    Registry(RegistryError),
    Why(String),
}

impl From<RegistryError> for Refused {
    fn from(e: RegistryError) -> Self {
        Refused::Registry(e)
    }
}

/// A row with the bytes of its interchange.
pub type Stored = (OutboundRow, Vec<u8>);

/// The rows of one of our interchanges: the documents it carries are claimed, taken over,
/// released and marked together, so that it is written once.
const SAME_INTERCHANGE: &str =
    "(partner, isa13) IN (SELECT partner, isa13 FROM outbound WHERE key = ?1)";

/// The row of `key` and its bytes, on `conn` (a connection or an open transaction).
fn stored_in(
    conn: &crate::registry::db::Conn,
    key: &str,
) -> crate::registry::db::Result<Option<Stored>> {
    conn.query_row(
        &format!("SELECT {JOINED}, i.bytes {FROM_JOINED} WHERE o.key = ?1"),
        params![key],
        read,
    )
    .optional()
}

/// [`COLUMNS`] of `outbound o`, beside its interchange `i` (which holds the bytes).
const JOINED: &str = "o.key, o.partner, o.set_id, o.document_id, o.fingerprint,
    o.idempotency_key, o.state, o.isa13, o.gs06, o.st02, o.file, o.created, o.sent_at, o.ack,
    o.ack_kind, o.ack_detail, o.ack_at, o.ack_late, o.ack_due, o.acks_seen, o.resends";
const FROM_JOINED: &str = "FROM outbound o
    JOIN outbound_interchanges i ON i.partner = o.partner AND i.isa13 = o.isa13";

/// Our interchange sent before (its bytes) made again for one of its sets (GS06, ST02)
/// alone, with new numbers (ISA13, GS06) at a time (ms): its file name and bytes.
pub type Renumber<'a> =
    dyn Fn(&[u8], (u32, &str), u32, u32, i64) -> Result<(String, Vec<u8>), String> + 'a;

/// The interchange ISA13 carrying the new documents of a batch placed so, at a time (ms):
/// its file name and bytes.
pub type RenderMany<'a> = dyn Fn(&[Placement], u32, i64) -> Result<(String, Vec<u8>), String> + 'a;

/// What a partner's acknowledgment settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Settled {
    /// Documents whose acknowledgment changed.
    pub settled: usize,
    /// Acknowledgments of a document already settled the same way.
    pub duplicates: usize,
    /// Acknowledgments that name nothing we sent.
    pub unmatched: usize,
}

impl Registry {
    /// Claims `new` (one transaction): a key never seen is numbered from the partner's
    /// counters and recorded with the bytes `render` makes of them; a key seen before is a
    /// replay (same fingerprint, sent), a conflict (other fingerprint), busy (being written
    /// under a running lease) or taken over (its writer's lease ran out).
    pub fn claim_outbound(
        &mut self,
        new: &NewOutbound<'_>,
        render: &RenderMany<'_>,
    ) -> Result<Result<OutboundClaim, String>, RegistryError> {
        let mut claims = self.claim_outbound_many(std::slice::from_ref(new), render)?;
        Ok(claims
            .pop()
            .unwrap_or_else(|| Err("nothing claimed".into())))
    }

    /// [`Registry::claim_outbound`] of several documents in one transaction (one commit for
    /// a batch of `send`): the new ones enveloped by `together`, an interchange (one ISA13)
    /// each, a group (one GS06) per functional group within it. A key twice in `news` is
    /// claimed by its first; the second finds it being written by us (`Busy`).
    pub fn claim_outbound_many(
        &mut self,
        news: &[NewOutbound<'_>],
        render: &RenderMany<'_>,
    ) -> Result<Vec<Result<OutboundClaim, String>>, RegistryError> {
        let claimed = self.batch(|b| b.claim_outbound_many(news, render));
        // A document that does not render refuses the batch: rolled back, no number kept.
        match claimed {
            Ok(claims) => Ok(claims.into_iter().map(Ok).collect()),
            Err(Refused::Why(why)) => Ok(news.iter().map(|_| Err(why.clone())).collect()),
            Err(Refused::Registry(e)) => Err(e),
        }
    }

    /// The row of an outbound key.
    pub fn outbound(&self, key: &str) -> Result<Option<(OutboundRow, Vec<u8>)>, RegistryError> {
        stored_in(&self.conn, key).map_err(|e| self.sql(e))
    }

    /// Marks the files of claims ours written (`sent`), with the other documents of their
    /// interchanges, each with its acknowledgment's clock (`ack_due_ms` after now; `None`:
    /// the partner never answers), in one transaction: the row of each as marked, `None`
    /// where the claim was taken over meanwhile (the other writer marks it).
    pub fn outbound_written_many(
        &mut self,
        written: &[(&str, Option<i64>)],
        owner: &str,
    ) -> Result<Vec<Option<OutboundRow>>, RegistryError> {
        self.batch(|b| {
            let mut marked: std::collections::HashMap<String, OutboundRow> =
                std::collections::HashMap::new();
            let mut rows = Vec::with_capacity(written.len());
            for (key, due) in written {
                if !marked.contains_key(*key) {
                    for row in b.outbound_written(key, owner, *due)? {
                        marked.insert(row.key.clone(), row);
                    }
                }
                rows.push(marked.get(*key).cloned());
            }
            Ok(rows)
        })
    }
}

impl Batch<'_> {
    /// The rows of `key`'s interchange still ours to mark, marked sent.
    fn outbound_written(
        &self,
        key: &str,
        owner: &str,
        ack_due_ms: Option<i64>,
    ) -> Result<Vec<OutboundRow>, RegistryError> {
        let now = now_ms();
        let marked: Vec<OutboundRow> = self
            .tx
            .query_map(
                &format!(
                    "UPDATE outbound SET state = 'sent', sent_at = ?3, owner = NULL,
                         lease_expires = NULL, ack_due = ?4,
                         ack = CASE WHEN ack = 'waiting' THEN ?5 ELSE ack END
                     WHERE {SAME_INTERCHANGE} AND state = 'writing' AND owner = ?2
                     RETURNING {COLUMNS}"
                ),
                params![
                    key,
                    owner,
                    now,
                    ack_due_ms.map(|d| now.saturating_add(d)),
                    if ack_due_ms.is_some() {
                        "waiting"
                    } else {
                        "not_expected"
                    }
                ],
                read,
            )
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))?;
        for row in &marked {
            self.record_note(
                EventKind::Sent,
                Some(&row.key),
                Some(&row.partner),
                Some(&format!("{:09}", row.isa13)),
                &serde_json::json!({ "sent": row.key }).to_string(),
            )?;
        }
        Ok(marked)
    }
}

impl Registry {
    /// A sent document given new numbers (`resend --new-numbers`, when the partner asks for
    /// them): its interchange made again by `render` with the partner's next ISA13 and GS06,
    /// recorded as being written by `owner` (its file, then [`Registry::outbound_written`]),
    /// its acknowledgment waiting again; the old numbers kept in the history. `None` when
    /// the key was never sent.
    pub fn outbound_renumbered(
        &mut self,
        key: &str,
        owner: &str,
        lease_ms: i64,
        render: &Renumber<'_>,
    ) -> Result<Result<Option<Stored>, String>, RegistryError> {
        let made = self.batch(|b| {
            // Read in the transaction that changes it: two resends at once number it once.
            let Some((old, old_bytes)) = b.stored(key)? else {
                return Ok(None);
            };
            if old.state != "sent" {
                return Err(Refused::Why(format!(
                    "{key} is being written (ISA13 {:09}); resend it once it is sent",
                    old.isa13
                )));
            }
            let now = now_ms();
            let (isa13, gs06) = b.numbers(&old.partner, 1)?;
            let gs06 = gs06.first().copied().unwrap_or(0);
            let (file, bytes) = render(&old_bytes, (old.gs06, &old.st02), isa13, gs06, now)
                .map_err(Refused::Why)?;
            b.tx.execute(
                "INSERT INTO outbound_interchanges (partner, isa13, file, bytes, created)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![old.partner, i64::from(isa13), file, bytes.clone(), now],
            )
            .map_err(|e| b.sql(e))?;
            b.tx.execute(
                "UPDATE outbound_interchanges SET moved = moved + 1
                 WHERE partner = ?1 AND isa13 = ?2",
                params![old.partner, i64::from(old.isa13)],
            )
            .map_err(|e| b.sql(e))?;
            // Alone in its new interchange: the set is its group's first.
            b.tx.execute(
                "UPDATE outbound SET state = 'writing', owner = ?2, lease_expires = ?3,
                     isa13 = ?4, gs06 = ?5, st02 = ?6, file = ?7, ack = 'waiting',
                     ack_kind = NULL, ack_detail = NULL, ack_at = NULL, ack_late = 0,
                     acks_seen = 0, resends = resends + 1
                 WHERE key = ?1 AND state = 'sent'",
                params![
                    key,
                    owner,
                    now.saturating_add(lease_ms),
                    i64::from(isa13),
                    i64::from(gs06),
                    crate::outbound::ST02,
                    file,
                ],
            )
            .map_err(|e| b.sql(e))?;
            b.record_note(
                EventKind::Resent,
                Some(key),
                Some(&old.partner),
                Some(&format!("{isa13:09}")),
                &serde_json::json!({ "resent": key, "how": "new numbers",
                    "was": { "isa13": format!("{:09}", old.isa13), "gs06": old.gs06,
                        "st02": old.st02, "file": old.file },
                    "file": file })
                .to_string(),
            )?;
            Ok(Some(bytes))
        });
        match made {
            Ok(Some(bytes)) => Ok(Ok(self.outbound(key)?.map(|(row, _)| (row, bytes)))),
            Ok(None) => Ok(Ok(None)),
            Err(Refused::Why(why)) => Ok(Err(why)),
            Err(Refused::Registry(e)) => Err(e),
        }
    }

    /// Our documents whose claim was left `writing` by a writer now gone (its lease ran out,
    /// or a dead process on this host): what a sweep finishes, their recorded bytes written.
    pub fn unfinished_outbound(
        &self,
        is_dead: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<OutboundRow>, RegistryError> {
        let rows: Vec<(OutboundRow, Option<String>, Option<i64>)> = self
            .conn
            .query_map(
                &format!(
                    "SELECT {COLUMNS}, owner, lease_expires FROM outbound
                     WHERE state = 'writing' ORDER BY created LIMIT 1000"
                ),
                [],
                read,
            )
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))?;
        let now = now_ms();
        Ok(rows
            .into_iter()
            .filter(|(_, owner, lease)| {
                lease.is_none_or(|l| l <= now) || owner.as_deref().is_some_and(is_dead)
            })
            .map(|(row, ..)| row)
            .collect())
    }

    /// Lets go of a claim ours whose file could not be written (with the other documents of
    /// its interchange): the next `send` of the key writes it at once, rather than after the
    /// lease.
    pub fn outbound_release(&mut self, key: &str, owner: &str) -> Result<(), RegistryError> {
        self.batch(|b| {
            b.tx.execute(
                &format!(
                    "UPDATE outbound SET owner = NULL, lease_expires = NULL
                     WHERE {SAME_INTERCHANGE} AND state = 'writing' AND owner = ?2"
                ),
                params![key, owner],
            )
            .map(drop)
            .map_err(|e| b.sql(e))
        })
    }

    /// How many sets of our interchange (partner, ISA13) were sent since with new numbers.
    pub fn outbound_moved(&self, partner: &str, isa13: u32) -> Result<i64, RegistryError> {
        self.conn
            .query_row(
                "SELECT moved FROM outbound_interchanges WHERE partner = ?1 AND isa13 = ?2",
                params![partner, i64::from(isa13)],
                read,
            )
            .optional()
            .map(Option::unwrap_or_default)
            .map_err(|e| self.sql(e))
    }

    /// A resend of a sent document, recorded: its row and the bytes first sent.
    pub fn outbound_resent(
        &mut self,
        key: &str,
        how: &str,
    ) -> Result<Option<(OutboundRow, Vec<u8>)>, RegistryError> {
        let found = self.outbound(key)?;
        let Some((row, _)) = &found else {
            return Ok(None);
        };
        self.batch(|b| {
            b.tx.execute(
                "UPDATE outbound SET resends = resends + 1 WHERE key = ?1",
                params![key],
            )
            .map_err(|e| b.sql(e))?;
            b.record_note(
                EventKind::Resent,
                Some(key),
                Some(&row.partner),
                Some(&format!("{:09}", row.isa13)),
                &serde_json::json!({ "resent": key, "how": how, "file": row.file }).to_string(),
            )
        })?;
        self.outbound(key)
    }

    /// Outbound documents, newest first: of a partner, an acknowledgment state (as of
    /// `now`, `overdue` included), sent at or after `since`; at most `limit`.
    pub fn outbound_rows(
        &self,
        partner: Option<&str>,
        state: Option<&str>,
        since: Option<i64>,
        limit: usize,
    ) -> Result<Vec<OutboundRow>, RegistryError> {
        let now = now_ms();
        let sql = format!(
            "SELECT {COLUMNS} FROM outbound
             WHERE (partner = ?1 OR ?1 IS NULL) AND COALESCE(sent_at, created) >= ?2
               AND (state = ?3 OR ?3 IS NULL
                    OR (?3 = 'overdue' AND ack = 'waiting' AND ack_due < ?4)
                    OR (?3 = 'waiting' AND ack = 'waiting' AND (ack_due IS NULL OR ack_due >= ?4))
                    OR (?3 NOT IN ('overdue', 'waiting') AND ack = ?3))
             ORDER BY created DESC, key LIMIT ?5"
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.conn
            .query_map(
                &sql,
                params![partner, since.unwrap_or(0), state, now, limit],
                read,
            )
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))
    }

    /// Documents by partner and acknowledgment state (`overdue` included), for `/metrics`.
    pub fn outbound_counts(&self) -> Result<Vec<(String, String, u64)>, RegistryError> {
        let rows: Vec<(String, String, i64)> = self
            .conn
            .query_map(
                "SELECT partner, CASE WHEN ack = 'waiting' AND ack_due < ?1 THEN 'overdue'
                     ELSE ack END AS s, count(*)
                 FROM outbound GROUP BY partner, s ORDER BY partner, s",
                params![now_ms()],
                read,
            )
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))?;
        Ok(rows
            .into_iter()
            .map(|(p, s, n)| (p, s, u64::try_from(n).unwrap_or(0)))
            .collect())
    }

    /// Acknowledgments that named nothing we sent: (partner, kind, what, when), newest first.
    pub fn unmatched_acks(
        &self,
        limit: usize,
    ) -> Result<Vec<(String, String, String, i64)>, RegistryError> {
        self.conn
            .query_map(
                "SELECT partner, kind, what, seen FROM unmatched_acks ORDER BY seen DESC, id DESC
                 LIMIT ?1",
                params![i64::try_from(limit).unwrap_or(i64::MAX)],
                read,
            )
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))
    }
}

impl Batch<'_> {
    /// An outbound row and its bytes, read in this transaction.
    fn stored(&self, key: &str) -> Result<Option<Stored>, RegistryError> {
        stored_in(&self.tx, key).map_err(|e| self.sql(e))
    }

    /// The partner's next ISA13 and `groups` GS06s.
    fn numbers(&self, partner: &str, groups: usize) -> Result<(u32, Vec<u32>), RegistryError> {
        let (isa13, gs06) =
            super::counters::take_in(&self.tx, partner, 1, groups).map_err(|e| self.sql(e))?;
        match isa13.first() {
            Some(i) if gs06.len() == groups => Ok((*i, gs06)),
            _ => Err(self.sql(crate::registry::db::Error::NoRows)),
        }
    }

    fn claim_outbound_many(
        &self,
        news: &[NewOutbound<'_>],
        render: &RenderMany<'_>,
    ) -> Result<Vec<OutboundClaim>, Refused> {
        let now = now_ms();
        let mut claims: Vec<Option<OutboundClaim>> = Vec::with_capacity(news.len());
        // Keys never seen, by the interchange they share: (together, partner, documents).
        let mut fresh: Vec<(usize, &str, Vec<usize>)> = Vec::new();
        let mut again = Vec::new();
        let mut keys = std::collections::HashSet::new();
        for (i, new) in news.iter().enumerate() {
            if !keys.insert(new.key) {
                again.push(i);
                claims.push(None);
                continue;
            }
            let claim = self.claim_existing(new, now)?;
            if claim.is_none() {
                let same =
                    |f: &&mut (usize, &str, Vec<usize>)| f.0 == new.together && f.1 == new.partner;
                match fresh.iter_mut().find(same) {
                    Some(f) => f.2.push(i),
                    None => fresh.push((new.together, new.partner, vec![i])),
                }
            }
            claims.push(claim);
        }
        for (_, partner, members) in fresh {
            for (i, claim) in self.number_together(news, partner, &members, render, now)? {
                if let Some(c) = claims.get_mut(i) {
                    *c = Some(claim);
                }
            }
        }
        // A key a second time: its first is ours now, being written.
        for i in again {
            if let (Some(new), Some(c)) = (news.get(i), claims.get_mut(i)) {
                *c = self.claim_existing(new, now)?;
            }
        }
        claims
            .into_iter()
            .map(|c| {
                c.ok_or_else(|| Refused::Why("a document was neither found nor numbered".into()))
            })
            .collect()
    }

    /// The claim of a key seen before: `None` when it never was. Taking one over takes the
    /// other documents of its interchange with it (they share one file and were numbered
    /// together), so that the file is written once and every one of them marked.
    fn claim_existing(
        &self,
        new: &NewOutbound<'_>,
        now: i64,
    ) -> Result<Option<OutboundClaim>, Refused> {
        let found: Option<Claimed> = self
            .tx
            .query_row(
                &format!("SELECT {COLUMNS}, owner, lease_expires FROM outbound WHERE key = ?1"),
                params![new.key],
                read,
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        let Some((row, owner, expires)) = found else {
            return Ok(None);
        };
        if row.fingerprint != new.fingerprint {
            return Ok(Some(OutboundClaim::Conflict(row)));
        }
        if row.state == "sent" {
            return Ok(Some(OutboundClaim::Replay(row)));
        }
        if expires.is_some_and(|e| e > now) && !owner.as_deref().is_some_and(new.is_dead) {
            return Ok(Some(OutboundClaim::Busy(row)));
        }
        self.tx
            .execute(
                &format!(
                    "UPDATE outbound SET owner = ?2, lease_expires = ?3
                     WHERE {SAME_INTERCHANGE} AND state = 'writing'"
                ),
                params![new.key, new.owner, now.saturating_add(new.lease_ms)],
            )
            .map_err(|e| self.sql(e))?;
        let bytes: Vec<u8> = self
            .tx
            .query_row(
                "SELECT bytes FROM outbound_interchanges WHERE partner = ?1 AND isa13 = ?2",
                params![row.partner, i64::from(row.isa13)],
                read,
            )
            .map_err(|e| self.sql(e))?;
        Ok(Some(OutboundClaim::Write {
            row,
            bytes: bytes.into(),
            taken_over: true,
        }))
    }

    /// New documents (`members` of `news`, all to `partner`) numbered and enveloped in one
    /// interchange, recorded with its bytes: the claim of each.
    fn number_together(
        &self,
        news: &[NewOutbound<'_>],
        partner: &str,
        members: &[usize],
        render: &RenderMany<'_>,
        now: i64,
    ) -> Result<Vec<(usize, OutboundClaim)>, Refused> {
        let mut groups: Vec<&str> = Vec::new();
        for new in members.iter().filter_map(|i| news.get(*i)) {
            if !groups.contains(&new.group) {
                groups.push(new.group);
            }
        }
        let (isa13, gs06s) = self.numbers(partner, groups.len())?;
        let mut st02s = vec![0u32; groups.len()];
        let placements: Vec<Placement> = members
            .iter()
            .filter_map(|i| {
                let g = groups
                    .iter()
                    .position(|g| news.get(*i).is_some_and(|n| n.group == *g))?;
                let st02 = st02s.get_mut(g)?;
                *st02 += 1;
                Some(Placement {
                    index: *i,
                    gs06: *gs06s.get(g)?,
                    st02: *st02,
                })
            })
            .collect();
        let (file, bytes) = render(&placements, isa13, now).map_err(Refused::Why)?;
        fail::fail_point!("send.numbered", |_| std::process::abort());
        self.tx
            .execute(
                "INSERT INTO outbound_interchanges (partner, isa13, file, bytes, created)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![partner, i64::from(isa13), file, bytes.clone(), now],
            )
            .map_err(|e| self.sql(e))?;
        let bytes: std::sync::Arc<[u8]> = bytes.into();
        placements
            .iter()
            .filter_map(|p| Some((p, news.get(p.index)?)))
            .map(|(p, new)| {
                let row = self.insert_outbound(new, (isa13, p.gs06, p.st02), &file, now)?;
                Ok((
                    p.index,
                    OutboundClaim::Write {
                        row,
                        bytes: bytes.clone(),
                        taken_over: false,
                    },
                ))
            })
            .collect()
    }

    /// The row of a new document numbered (ISA13, GS06, ST02), being written by its owner.
    fn insert_outbound(
        &self,
        new: &NewOutbound<'_>,
        (isa13, gs06, st02): (u32, u32, u32),
        file: &str,
        now: i64,
    ) -> Result<OutboundRow, Refused> {
        // The acknowledgment's clock starts with the numbers: a document whose writer died
        // before marking it sent still becomes overdue, and its 997 still settles it.
        let ack_due = new.ack_due_ms.map(|d| now.saturating_add(d));
        let ack = if ack_due.is_some() {
            "waiting"
        } else {
            "not_expected"
        };
        let st02 = format!("{st02:04}");
        self.tx
            .execute(
                "INSERT INTO outbound (key, partner, set_id, document_id, fingerprint,
                     idempotency_key, state, owner, lease_expires, isa13, gs06, st02, file,
                     created, ack_due, ack)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'writing', ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
                     ?15)",
                params![
                    new.key,
                    new.partner,
                    new.set_id,
                    new.document_id,
                    new.fingerprint,
                    new.idempotency_key,
                    new.owner,
                    now.saturating_add(new.lease_ms),
                    i64::from(isa13),
                    i64::from(gs06),
                    st02,
                    file,
                    now,
                    ack_due,
                    ack
                ],
            )
            .map_err(|e| self.sql(e))?;
        Ok(OutboundRow {
            key: new.key.to_string(),
            partner: new.partner.to_string(),
            set_id: new.set_id.to_string(),
            document_id: new.document_id.to_string(),
            fingerprint: new.fingerprint.to_string(),
            idempotency_key: new.idempotency_key.map(str::to_string),
            state: "writing".into(),
            isa13,
            gs06,
            st02,
            file: file.to_string(),
            created_ms: now,
            sent_ms: None,
            ack: ack.into(),
            ack_kind: None,
            ack_detail: None,
            ack_ms: None,
            ack_late: false,
            ack_due_ms: ack_due,
            acks_seen: 0,
            resends: 0,
        })
    }

    /// What a partner's acknowledgments (`said`, from the interchange `from`) settle of what
    /// we sent it, inside the transaction that completes that interchange: an ack is applied
    /// once however often its interchange is resent.
    pub fn settle_outbound(
        &self,
        partner: &str,
        from: &str,
        said: &[crate::outbound::Said],
    ) -> Result<Settled, RegistryError> {
        let now = now_ms();
        let mut settled = Settled::default();
        for s in said {
            let (matched, changed) = self.settle_one(partner, s, now)?;
            if matched == 0 {
                settled.unmatched += 1;
                let what = match (s.isa13(), s.gs06(), s.st02()) {
                    (Some(i), _, _) => format!("ISA13 {i:09}"),
                    (_, Some(g), Some(st)) => format!("GS06 {g} ST02 {st}"),
                    (_, Some(g), None) => format!("GS06 {g}"),
                    _ => "nothing".into(),
                };
                let what = format!("{what}: {}", s.detail());
                self.tx
                    .execute(
                        "INSERT INTO unmatched_acks (partner, kind, what, interchange_key, seen)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                        params![partner, s.kind(), what, from, now],
                    )
                    .map_err(|e| self.sql(e))?;
            } else if changed == 0 {
                settled.duplicates += 1;
            } else {
                settled.settled += changed;
            }
        }
        Ok(settled)
    }

    /// One statement applied: (rows it names, rows it changed).
    fn settle_one(
        &self,
        partner: &str,
        s: &crate::outbound::Said,
        now: i64,
    ) -> Result<(usize, usize), RegistryError> {
        let (place, values): (&str, Vec<i64>) = match (s.isa13(), s.gs06()) {
            (Some(i), _) => ("isa13 = ?2", vec![i64::from(i)]),
            (None, Some(g)) => ("gs06 = ?2", vec![i64::from(g)]),
            (None, None) => return Ok((0, 0)),
        };
        let st02 = s.st02().unwrap_or("");
        let scope = format!(
            "partner = ?1 AND {place} AND (st02 = ?3 OR ?3 = '') AND state IN ('writing', 'sent')"
        );
        let value = values.first().copied().unwrap_or(0);
        let matched: i64 = self
            .tx
            .query_row(
                &format!("SELECT count(*) FROM outbound WHERE {scope}"),
                params![partner, value, st02],
                read,
            )
            .map_err(|e| self.sql(e))?;
        let Some(state) = s.state() else {
            // A TA1 that accepts our envelope: seen, the set's 997 still to come.
            self.tx
                .execute(
                    &format!("UPDATE outbound SET acks_seen = acks_seen + 1 WHERE {scope}"),
                    params![partner, value, st02],
                )
                .map_err(|e| self.sql(e))?;
            let matched = usize::try_from(matched).unwrap_or(0);
            return Ok((matched, matched));
        };
        // Rows already settled this way: a duplicate of an ack, or an ack resent.
        let already: i64 = self
            .tx
            .query_row(
                &format!("SELECT count(*) FROM outbound WHERE {scope} AND ack = ?4"),
                params![partner, value, st02, state],
                read,
            )
            .map_err(|e| self.sql(e))?;
        self.tx
            .execute(
                &format!(
                    "UPDATE outbound SET acks_seen = acks_seen + 1,
                         ack_late = CASE WHEN ack = ?4 THEN ack_late
                             WHEN ack_due IS NOT NULL AND ?7 > ack_due THEN 1 ELSE 0 END,
                         ack_at = CASE WHEN ack = ?4 THEN ack_at ELSE ?7 END,
                         ack_kind = CASE WHEN ack = ?4 THEN ack_kind ELSE ?5 END,
                         ack_detail = CASE WHEN ack = ?4 THEN ack_detail ELSE ?6 END,
                         ack = ?4
                     WHERE {scope}"
                ),
                params![partner, value, st02, state, s.kind(), s.detail(), now],
            )
            .map_err(|e| self.sql(e))?;
        let changed = matched.saturating_sub(already);
        let count = |n: i64| usize::try_from(n).unwrap_or(0);
        Ok((count(matched), count(changed)))
    }
}
