//! Business documents: every sighting of a keyed set, and what was decided for it.
//!
//! A sighting is recorded in the transaction that prepares its interchange (after the claim,
//! before any output is written), so an output never exists without its document row, and
//! the row without its interchange's claim. The decision is made under the write lock, so of
//! several processes that meet one PO at once exactly one sees it first. A takeover of the
//! interchange finds its rows by (interchange, position) and keeps their decisions, as it
//! keeps the reserved control numbers.
//!
//! `delivery` says where each sighting's delivery stands: `pending` (its output is being
//! written, by its interchange's round or, for `by` = `operator` or `timeout`, by whoever
//! finishes a release), `delivered`, `none` (a duplicate skipped, a stale change), `held` (a
//! conflict, for an operator), `parked` (a change waiting for its original) or `discarded`.

use crate::registry::db::{params, read, Columns, FromRow, OptionalExtension};
use serde::Serialize;

use super::claims::now_ms;
use super::{Batch, Packed, Registry, RegistryError};
use crate::document::{version_order, DocumentDisposition, Role, Usage};

/// Why a test document is delivered nowhere: its partner names no test destination (its
/// file is in `out/test/` only).
pub const NO_TEST_DESTINATION: &str = "test interchange; no test destination";

crate::words::words! {
    /// Where a sighting's delivery stands (the `delivery` column).
    pub enum Delivery as as_str {
        Pending = "pending",
        Delivered = "delivered",
        None = "none",
        Held = "held",
        Parked = "parked",
        Discarded = "discarded",
    }
}

/// One keyed set, as its interchange's round records it.
#[derive(Debug, Clone)]
pub struct Sighting<'a> {
    pub key: &'a str,
    pub subject: &'a str,
    pub partner: &'a str,
    pub set_id: &'a str,
    pub role: Role,
    pub version: Option<&'a str>,
    pub fingerprint: &'a str,
    pub interchange_key: &'a str,
    /// `group.set`, 0-based, in the interchange.
    pub position: &'a str,
    pub st02: &'a str,
    /// The partner's `duplicate_documents = "deliver"`.
    pub deliver_duplicates: bool,
}

/// What was decided for a sighting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decided {
    pub id: i64,
    pub disposition: DocumentDisposition,
    pub delivery: Delivery,
    /// The interchange of the sighting this one repeats or conflicts with.
    pub duplicate_of: Option<String>,
    /// Its place in the order of deliveries, once it is to be delivered.
    pub sequence: Option<i64>,
    /// Whether it is the first sighting of its key (its output takes the key's own name).
    pub first: bool,
    /// Whether it was delivered although its original never came.
    pub original_missing: bool,
    /// Whether the decision was made by an earlier attempt of the same interchange.
    pub again: bool,
    /// For a conflict: the content fingerprint of the sighting it conflicts with.
    pub earlier_fingerprint: Option<String>,
}

impl Decided {
    /// The decision `(id, disposition, delivery, sequence)` on a sighting, with what is
    /// read of the sighting `of` that it repeats or conflicts with; neither the key's first,
    /// nor delivered without its original, nor made before, unless the caller says so.
    fn on(
        tx: &crate::registry::db::Conn,
        (id, disposition, delivery, sequence): (i64, DocumentDisposition, Delivery, Option<i64>),
        of: Option<i64>,
    ) -> Result<Decided, crate::registry::db::Error> {
        let (duplicate_of, earlier_fingerprint) = earlier_of(tx, of, disposition)?;
        Ok(Decided {
            id,
            disposition,
            delivery,
            duplicate_of,
            sequence,
            first: false,
            original_missing: false,
            again: false,
            earlier_fingerprint,
        })
    }
}

/// A document's JSON as kept: `None` when the registry holds none (a row queued before
/// version 11 keeps its file; or pruned), an error naming it when the bytes kept cannot be
/// read back.
pub type KeptBody = Option<Result<Vec<u8>, String>>;

/// A parked or held sighting let go: its stored body is to be written now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub id: i64,
    pub key: String,
    pub partner: String,
    pub set_id: String,
    pub st02: String,
    pub interchange_key: String,
    pub disposition: DocumentDisposition,
    pub sequence: i64,
    pub first: bool,
    pub original_missing: bool,
    pub duplicate_of: Option<String>,
    pub body: Vec<u8>,
}

/// One sighting as `documents` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DocumentRow {
    pub id: i64,
    pub key: String,
    pub partner: String,
    pub set: String,
    pub st02: String,
    pub interchange: String,
    pub disposition: DocumentDisposition,
    /// `P`, or `T` for a test document (its key ends in `:test`).
    pub usage: Usage,
    /// `none` for a test document kept but queued for no destination,
    /// which `undelivered` says.
    pub delivery: Delivery,
    /// Why a document written went nowhere ([`NO_TEST_DESTINATION`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undelivered: Option<&'static str>,
    pub duplicate_of: Option<String>,
    pub sequence: Option<i64>,
    pub original_missing: bool,
    pub output: Option<String>,
    pub fingerprint: String,
    pub seen_ms: i64,
    pub delivered_ms: Option<i64>,
    /// The business system's reference for it (`confirm`, or a destination's answer).
    pub result_ref: Option<String>,
}

impl Batch<'_> {
    /// Records `s` and decides it (see [`DocumentDisposition`]); the changes parked for its
    /// document that an original lets go are in the second part, to be written by the same
    /// round. Called again by a takeover of the interchange, it returns the decisions made
    /// the first time.
    pub fn record_document(
        &self,
        s: &Sighting<'_>,
    ) -> Result<(Decided, Vec<Released>), RegistryError> {
        record(&self.tx, s, now_ms()).map_err(|e| self.sql(e))
    }

    /// Keeps the body of a held or parked sighting, to be delivered later.
    pub fn keep_document_body(&self, id: i64, body: &[u8]) -> Result<(), RegistryError> {
        self.tx
            .prepare_cached("UPDATE documents SET body = ?2 WHERE id = ?1")
            .and_then(|mut s| s.write(params![id, body]))
            .map_err(|e| self.sql(e))
    }

    /// Hands a sighting over: keeps its JSON, durable with this transaction's commit (its
    /// destinations read it from here; a folder destination writes it out as `output`), and
    /// marks it delivered if it was pending ([`Batch::documents_delivered`]), in two
    /// statements. A takeover that decides the interchange again keeps the same bytes again.
    pub fn hand_over(&self, id: i64, output: &str, body: &Packed) -> Result<(), RegistryError> {
        self.tx
            .prepare_cached(
                "INSERT INTO document_bodies (document_id, packed, packing) VALUES (?1, ?2, ?3)
                 ON CONFLICT (document_id) DO UPDATE
                 SET packed = excluded.packed, packing = excluded.packing",
            )
            .and_then(|mut s| s.write(params![id, body.bytes(), body.packing()]))
            .map_err(|e| self.sql(e))?;
        self.tx
            .prepare_cached(
                "UPDATE documents SET output = ?2,
                     delivered_at = CASE WHEN delivery = 'pending' THEN ?3 ELSE delivered_at END,
                     body = CASE WHEN delivery = 'pending' THEN NULL ELSE body END,
                     delivery = CASE WHEN delivery = 'pending' THEN 'delivered' ELSE delivery END
                 WHERE id = ?1",
            )
            .and_then(|mut s| s.write(params![id, output, now_ms()]))
            .map_err(|e| self.sql(e))
    }

    /// Marks these sightings delivered, once their files are in place (only these: another
    /// release's pending rows are its own to finish).
    pub fn documents_delivered(&self, ids: &[i64]) -> Result<(), RegistryError> {
        let now = now_ms();
        for id in ids {
            self.tx
                .prepare_cached(
                    "UPDATE documents SET delivery = 'delivered', delivered_at = ?2, body = NULL
                     WHERE id = ?1 AND delivery = 'pending'",
                )
                .and_then(|mut s| s.write(params![id, now]))
                .map_err(|e| self.sql(e))?;
        }
        Ok(())
    }

    /// Withdraws the sightings an earlier attempt of `interchange_key` recorded that this
    /// attempt did not decide again (it judged the interchange otherwise: a rejection, a set
    /// no longer accepted), and what they let go waits again. One an earlier attempt
    /// delivered already (a large interchange's earlier run) stays: it was handed over, and
    /// forgetting it would let a resend be booked again. `recorded` are the ones
    /// [`Batch::recorded_documents`] found; returns how many were withdrawn and how many
    /// stayed delivered.
    pub fn withdraw_documents(
        &self,
        recorded: &[(i64, Delivery)],
        kept: &[i64],
    ) -> Result<(usize, usize), RegistryError> {
        withdraw(&self.tx, recorded, kept).map_err(|e| self.sql(e))
    }

    /// The sightings recorded for each interchange since its claim was first taken (a key
    /// reused after it was pruned leaves its earlier holder's to it), with their delivery,
    /// read together (one round trip on PostgreSQL).
    pub fn recorded_documents(
        &self,
        interchange_keys: &[&str],
    ) -> Result<Vec<Vec<(i64, Delivery)>>, RegistryError> {
        let runs: Vec<_> = interchange_keys
            .iter()
            .map(|key| vec![crate::registry::db::Value::Text(key.to_string())])
            .collect();
        self.tx
            .query_each(
                "SELECT id, delivery FROM documents WHERE interchange_key = ?1
                 AND seen >= COALESCE((SELECT first_seen FROM interchanges WHERE key = ?1), 0)",
                &runs,
                read,
            )
            .map_err(|e| self.sql(e))
    }

    /// Lets go of the held or parked sightings of `key` (an operator's `release`), or of the
    /// parked ones of partners whose wait is over (`timeout`); returns them with their
    /// bodies and new places in the delivery order, to be written by `owner`. Rows that a
    /// dead process's release left pending are adopted. On a timeout a copy is held for an
    /// operator rather than delivered, and a change older than one delivered is stale.
    pub fn release_documents(
        &self,
        which: &Release<'_>,
        owner: &str,
        is_dead: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<Released>, RegistryError> {
        release(&self.tx, which, owner, is_dead).map_err(|e| self.sql(e))
    }

    /// Discards the held or parked sightings of `key`; returns how many.
    pub fn discard_documents(&self, key: &str) -> Result<usize, RegistryError> {
        self.tx
            .prepare_cached(
                "UPDATE documents SET delivery = 'discarded', body = NULL
                 WHERE key = ?1 AND delivery IN ('held', 'parked')",
            )
            .and_then(|mut s| s.execute([key]))
            .map_err(|e| self.sql(e))
    }

    /// Records a document read from an old archive as delivered before (`scan --backfill`),
    /// unless its key is known already; whether it was recorded.
    pub fn backfill_document(&self, s: &Sighting<'_>) -> Result<bool, RegistryError> {
        let known: Option<i64> = self
            .tx
            .prepare_cached(
                "SELECT id FROM documents WHERE key = ?1
                 OR (interchange_key = ?2 AND position = ?3 AND fingerprint = ?4) LIMIT 1",
            )
            .and_then(|mut st| {
                st.query_row(
                    params![s.key, s.interchange_key, s.position, s.fingerprint],
                    read,
                )
                .optional()
            })
            .map_err(|e| self.sql(e))?;
        if known.is_some() {
            return Ok(false);
        }
        insert(
            &self.tx,
            s,
            DocumentDisposition::New,
            Delivery::Delivered,
            None,
            "backfill",
            now_ms(),
        )
        .map(|_| true)
        .map_err(|e| self.sql(e))
    }
}

/// Which held or parked sightings [`Batch::release_documents`] lets go.
pub enum Release<'a> {
    /// An operator's: every held or parked sighting of this key.
    Key(&'a str),
    /// The parked sightings whose partner's wait is over: `waited(partner, seen_ms)`.
    Due(&'a dyn Fn(&str, i64) -> bool),
}

/// The columns of a [`DocumentRow`], in the order its [`FromRow`] reads them.
pub(super) const COLUMNS: &str = "id, key, partner, set_id, st02, interchange_key, disposition,
    delivery, (SELECT d.interchange_key FROM documents d WHERE d.id = documents.duplicate_of),
    sequence, original_missing, output, fingerprint, seen, delivered_at, result_ref,
    (SELECT COUNT(*) FROM deliveries q WHERE q.document_id = documents.id)";

impl FromRow for DocumentRow {
    fn read(c: &mut Columns<'_, '_>) -> crate::registry::db::Result<DocumentRow> {
        let (id, key, partner, set, st02, interchange, disposition): (_, String, _, _, _, _, _) =
            FromRow::read(c)?;
        let (mut delivery, duplicate_of, sequence, original_missing, output) = FromRow::read(c)?;
        let (fingerprint, seen_ms, mut delivered_ms, result_ref, queued): (_, _, _, _, i64) =
            FromRow::read(c)?;
        let usage = Usage::of_key(&key);
        // A test document's file in `out/test/` is no delivery: with no test destination it
        // went nowhere.
        let undelivered = (usage == Usage::Test && delivery == Delivery::Delivered && queued == 0)
            .then_some(NO_TEST_DESTINATION);
        if undelivered.is_some() {
            delivery = Delivery::None;
            delivered_ms = None;
        }
        Ok(DocumentRow {
            id,
            key,
            partner,
            set,
            st02,
            interchange,
            disposition,
            usage,
            delivery,
            undelivered,
            duplicate_of,
            sequence,
            original_missing,
            output,
            fingerprint,
            seen_ms,
            delivered_ms,
            result_ref,
        })
    }
}

impl Registry {
    /// Sightings, oldest first: all, or those whose delivery is one of `deliveries`, or
    /// those of one key. Selected by the database (by its indexes on the key and on the
    /// open deliveries), not read whole and filtered: a registry holds every sighting ever.
    pub fn documents(
        &self,
        deliveries: &[Delivery],
        key: Option<&str>,
    ) -> Result<Vec<DocumentRow>, RegistryError> {
        let mut conditions = Vec::new();
        if key.is_some() {
            conditions.push("key = ?1".to_string());
        }
        if !deliveries.is_empty() {
            // Words of our own vocabulary, never input.
            let words: Vec<String> = deliveries
                .iter()
                .map(|d| format!("'{}'", d.as_str()))
                .collect();
            conditions.push(format!("delivery IN ({})", words.join(", ")));
        }
        let filter = if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        };
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM documents{filter} ORDER BY id"
            ))
            .map_err(|e| self.sql(e))?;
        let rows = match key {
            Some(k) => stmt.query_map([k], read),
            None => stmt.query_map([], read),
        }
        .map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// The JSON kept for each of `ids`, in order; `None` for a document kept only as its
    /// file (recorded before the registry kept documents, version 11) or pruned since.
    pub fn document_bodies(&self, ids: &[i64]) -> Result<Vec<KeptBody>, RegistryError> {
        let runs: Vec<Vec<crate::registry::db::Value>> = ids
            .iter()
            .map(|id| vec![crate::registry::db::Value::Int(*id)])
            .collect();
        let found = self
            .conn
            .query_each(
                "SELECT packed, packing FROM document_bodies WHERE document_id = ?1",
                &runs,
                read::<(Vec<u8>, String)>,
            )
            .map_err(|e| self.sql(e))?;
        // A row that does not unpack fails its own delivery, never the others'.
        Ok(found
            .into_iter()
            .zip(ids)
            .map(|(rows, id)| {
                rows.into_iter()
                    .next()
                    .map(|(body, packing)| super::bodies::unpack(&self.path, *id, body, &packing))
            })
            .collect())
    }

    /// The file names (in `out/`) of every recorded document delivered.
    pub fn document_outputs(&self) -> Result<std::collections::HashSet<String>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare("SELECT output FROM documents WHERE output IS NOT NULL")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], read::<String>)
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// A page of sightings, newest first: of `partner`, of set `set_id`, in `delivery`, seen
    /// since `since_ms` (each `None`: any); at most `limit` from the `offset`th.
    pub fn documents_page(
        &self,
        partner: Option<&str>,
        set_id: Option<&str>,
        delivery: Option<&str>,
        since_ms: Option<i64>,
        (offset, limit): (usize, usize),
    ) -> Result<Vec<DocumentRow>, RegistryError> {
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.conn
            .query_map(
                &format!(
                    "SELECT {COLUMNS} FROM documents
                     WHERE (partner = ?1 OR ?1 IS NULL) AND (set_id = ?2 OR ?2 IS NULL)
                     AND (delivery = ?3 OR ?3 IS NULL) AND seen >= ?4
                     ORDER BY id DESC LIMIT ?5 OFFSET ?6"
                ),
                params![
                    partner,
                    set_id,
                    delivery,
                    since_ms.unwrap_or(0),
                    n(limit),
                    n(offset)
                ],
                read,
            )
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))
    }

    /// The document key an operator means: the key whole (`ZZ:ACME:850:PO-4471:00:`), the
    /// key without its sender (`850:PO-4471:00:`), or the document's id alone (`PO-4471`),
    /// each as recorded. The last two read the whole table: a desk's question, not a hot
    /// path.
    pub fn resolve_document(&self, given: &str) -> Result<super::Resolved, RegistryError> {
        let given = given.trim();
        let exact: Option<String> = self
            .conn
            .query_row(
                "SELECT key FROM documents WHERE key = ?1 LIMIT 1",
                [given],
                read,
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        if let Some(key) = exact {
            return Ok(super::Resolved::One(key));
        }
        // The id starts after `QUAL:ID:SET:` and ends at the next colon.
        let mut keys: Vec<String> = self
            .conn
            .query_map(
                "SELECT DISTINCT key FROM documents
                 WHERE key = partner || ':' || CAST(?1 AS TEXT)
                    OR substr(key, length(partner) + length(set_id) + 3,
                              length(CAST(?1 AS TEXT)) + 1) = CAST(?1 AS TEXT) || ':'
                 ORDER BY key LIMIT 50",
                [given],
                read,
            )
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))?;
        Ok(match keys.len() {
            0 => super::Resolved::Unknown,
            1 => super::Resolved::One(keys.remove(0)),
            _ => super::Resolved::Several(keys),
        })
    }

    /// The sightings of one interchange, in its order.
    pub fn documents_of(&self, interchange_key: &str) -> Result<Vec<DocumentRow>, RegistryError> {
        self.documents_limited(interchange_key, "")
    }

    fn documents_limited(
        &self,
        interchange_key: &str,
        limit: &str,
    ) -> Result<Vec<DocumentRow>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM documents WHERE interchange_key = ?1 ORDER BY id{limit}"
            ))
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([interchange_key], read)
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// The first `limit` sightings of one interchange, in its order, and how many it has.
    pub fn first_documents_of(
        &self,
        interchange_key: &str,
        limit: usize,
    ) -> Result<(Vec<DocumentRow>, usize), RegistryError> {
        let rows = self.documents_limited(interchange_key, &format!(" LIMIT {limit}"))?;
        let total: i64 = self
            .conn
            .query_row(
                "SELECT count(*) FROM documents WHERE interchange_key = ?1",
                [interchange_key],
                read,
            )
            .map_err(|e| self.sql(e))?;
        Ok((rows, usize::try_from(total).unwrap_or(usize::MAX)))
    }
}

/// A sighting already recorded at a place: (id, disposition, delivery, sequence,
/// original_missing, duplicate_of).
type AtPlace = (
    i64,
    DocumentDisposition,
    Delivery,
    Option<i64>,
    bool,
    Option<i64>,
);

/// What [`record`] asks of the sightings before deciding one (see there).
const ASKED: &str = "SELECT 0, id, disposition, delivery, sequence, original_missing, duplicate_of,
                 fingerprint, role, version
             FROM documents WHERE interchange_key = ?1 AND position = ?2 AND fingerprint = ?3
             UNION ALL
             SELECT * FROM (SELECT 1, id, disposition, delivery, sequence, original_missing,
                     duplicate_of, fingerprint, role, version
                 FROM documents WHERE key = ?4 AND fingerprint = ?3
                 ORDER BY id LIMIT 1) AS same
             UNION ALL
             SELECT * FROM (SELECT 3, id, disposition, delivery, sequence, original_missing,
                     duplicate_of, fingerprint, role, version
                 FROM documents WHERE key = ?4
                 ORDER BY id LIMIT 1) AS first
             UNION ALL
             SELECT 2, id, disposition, delivery, sequence, original_missing, duplicate_of,
                 fingerprint, role, version
             FROM documents WHERE subject = ?5 AND ?6 = 1 AND delivery = 'parked'
             UNION ALL
             SELECT 2, id, disposition, delivery, sequence, original_missing, duplicate_of,
                 fingerprint, role, version
             FROM documents WHERE subject = ?5 AND ?6 = 1 AND role = 'copy'
                 AND delivery IN ('pending', 'delivered')";

/// The decision on a sighting of content recorded at its place before (`earlier`): the
/// one taken then, and what that sighting let go, unless delivered already.
fn seen_again(
    tx: &crate::registry::db::Conn,
    s: &Sighting<'_>,
    earlier: AtPlace,
) -> Result<(Decided, Vec<Released>), crate::registry::db::Error> {
    let (id, disposition, delivery, sequence, original_missing, of) = earlier;
    let decided = Decided {
        first: is_first(tx, s.key, id)?,
        original_missing,
        again: true,
        ..Decided::on(tx, (id, disposition, delivery, sequence), of)?
    };
    Ok((decided, released_by(tx, id)?))
}

fn record(
    tx: &crate::registry::db::Conn,
    s: &Sighting<'_>,
    now: i64,
) -> Result<(Decided, Vec<Released>), crate::registry::db::Error> {
    // Three questions in one statement (one round trip on PostgreSQL): this content's
    // sighting at this place, if any (rows 0), the key's first sighting with this content
    // (row 1) and its first of all (row 3), and for an original, the delivered copies and
    // the parked sightings of its subject (rows 2). Each part is answered by an index
    // (migration 8), whatever number of sightings the key or the subject has. Another content at this place (`reprocess --file`
    // of other bytes) is a sighting of its own: the earlier one stays recorded, delivered
    // or not.
    let rows: Vec<AskedRow> = tx
        .prepare_cached(ASKED)?
        .query_map(
            params![
                s.interchange_key,
                s.position,
                s.fingerprint,
                s.key,
                s.subject,
                s.role == Role::Original
            ],
            read,
        )?
        .collect::<Result<_, _>>()?;
    let earlier = rows
        .iter()
        .find(|(row, ..)| *row == 0)
        .map(|(_, at, ..)| *at);
    // The key's first sighting with this content if there is one (row 1), else its first.
    let first = rows
        .iter()
        .find(|(row, ..)| *row == 1)
        .or_else(|| rows.iter().find(|(row, ..)| *row == 3))
        .map(|(_, (id, _, delivery, ..), fingerprint, ..)| (*id, *delivery, fingerprint.as_str()));
    if let Some(earlier) = earlier {
        return seen_again(tx, s, earlier);
    }
    let same = first
        .filter(|(_, _, fingerprint)| *fingerprint == s.fingerprint)
        .map(|(id, delivery, _)| (id, delivery));
    // A change without a sequence number may be followed by another of the same key: that
    // is the next change, not a conflict.
    let keyed_by_content = !(s.role == Role::Change && s.version.is_none());
    let any = first
        .filter(|_| keyed_by_content)
        .map(|(id, delivery, _)| (id, delivery));
    // What an original that is new lets go, read with the question it answers first.
    let mut parked = Vec::new();
    let (disposition, delivery, of) = if let Some((of, delivery)) = same {
        let delivered = matches!(delivery, Delivery::Pending | Delivery::Delivered);
        let again = if s.deliver_duplicates && delivered && s.role != Role::Copy {
            Delivery::Pending
        } else {
            Delivery::None
        };
        (DocumentDisposition::Duplicate, again, Some(of))
    } else if let Some((of, _)) = any {
        (DocumentDisposition::Conflict, Delivery::Held, Some(of))
    } else {
        match s.role {
            // An operator delivered a copy of this document before its original came.
            Role::Original => {
                let (copy, waiting) = copy_and_parked(&rows);
                parked = waiting;
                match copy {
                    Some(of) => (DocumentDisposition::Duplicate, Delivery::None, Some(of)),
                    None => (DocumentDisposition::New, Delivery::Pending, None),
                }
            }
            Role::Copy => match original_of(tx, s.subject, false)? {
                Some(of) => (DocumentDisposition::Duplicate, Delivery::None, Some(of)),
                None => (DocumentDisposition::Waiting, Delivery::Parked, None),
            },
            Role::Change => {
                if is_stale(tx, s.subject, s.version)? {
                    (DocumentDisposition::Stale, Delivery::None, None)
                } else if original_of(tx, s.subject, true)?.is_none() {
                    (DocumentDisposition::Waiting, Delivery::Parked, None)
                } else {
                    (DocumentDisposition::New, Delivery::Pending, None)
                }
            }
        }
    };
    let (id, sequence) = insert(tx, s, disposition, delivery, of, s.interchange_key, now)?;
    let decided = Decided {
        // Ids only grow: the new row is the key's first when the key had none.
        first: first.is_none(),
        ..Decided::on(tx, (id, disposition, delivery, sequence), of)?
    };
    let released = if s.role == Role::Original && disposition == DocumentDisposition::New {
        let_go_parked(tx, s.subject, parked, s.interchange_key, id)?
    } else {
        Vec::new()
    };
    Ok((decided, released))
}

fn insert(
    tx: &crate::registry::db::Conn,
    s: &Sighting<'_>,
    disposition: DocumentDisposition,
    delivery: Delivery,
    duplicate_of: Option<i64>,
    by: &str,
    now: i64,
) -> Result<(i64, Option<i64>), crate::registry::db::Error> {
    // A sighting to deliver takes the next place in the order of deliveries: the counter
    // moved by a write sent with the INSERT, which reads it (one round trip on PostgreSQL).
    let placed = matches!(delivery, Delivery::Pending | Delivery::Delivered);
    if placed {
        tx.prepare_cached(NEXT_SEQUENCE)?.write([])?;
    }
    tx.prepare_cached(
        "INSERT INTO documents (key, subject, partner, set_id, role, version, fingerprint,
             interchange_key, position, st02, disposition, duplicate_of, delivery, by, sequence,
             seen, delivered_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
             CASE WHEN ?15 = 1 THEN (SELECT value FROM document_sequence WHERE one = 1) END,
             ?16, CASE WHEN ?13 = 'delivered' THEN CAST(?16 AS BIGINT) END)
         RETURNING id, sequence",
    )?
    .query_row(
        params![
            s.key,
            s.subject,
            s.partner,
            s.set_id,
            s.role.as_str(),
            s.version,
            s.fingerprint,
            s.interchange_key,
            s.position,
            s.st02,
            disposition,
            duplicate_of,
            delivery,
            by,
            placed,
            now
        ],
        read,
    )
}

/// The next place in the order of deliveries: a counter of its own, so that numbers are
/// never handed out again when old documents are pruned.
const NEXT_SEQUENCE: &str = "INSERT INTO document_sequence (one, value) VALUES (1, 1)
     ON CONFLICT (one) DO UPDATE SET value = document_sequence.value + 1";

fn next_sequence(tx: &crate::registry::db::Conn) -> Result<i64, crate::registry::db::Error> {
    tx.prepare_cached(&format!("{NEXT_SEQUENCE} RETURNING value"))?
        .query_row([], read)
}

/// A parked sighting: its id, role and version.
type Parked = (i64, String, Option<String>);

/// A row of [`record`]'s one statement: which question it answers, the sighting, its
/// content, role and version.
type AskedRow = (i64, AtPlace, String, String, Option<String>);

/// For an original, from [`record`]'s rows 2: the first copy of its subject delivered (or
/// being delivered), and the sightings parked for it, oldest first.
fn copy_and_parked(rows: &[AskedRow]) -> (Option<i64>, Vec<Parked>) {
    let mut subject: Vec<&AskedRow> = rows.iter().filter(|(row, ..)| *row == 2).collect();
    subject.sort_by_key(|(_, (id, ..), ..)| *id);
    let copy = subject
        .iter()
        .find(|(_, (_, _, delivery, ..), _, role, _)| {
            role == Role::Copy.as_str()
                && matches!(delivery, Delivery::Pending | Delivery::Delivered)
        })
        .map(|(_, (id, ..), ..)| *id);
    let parked = subject
        .into_iter()
        .filter(|(_, (_, _, delivery, ..), ..)| *delivery == Delivery::Parked)
        .map(|(_, (id, ..), _, role, version)| (*id, role.clone(), version.clone()))
        .collect();
    (copy, parked)
}

/// Orders changes oldest first: numeric sequence numbers by value, then the others, each
/// in arrival order (a total order, whatever partners put in BCH05).
fn version_rank(version: Option<&str>, id: i64) -> (u8, usize, String, i64) {
    match version.filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())) {
        Some(v) => {
            let digits = v.trim_start_matches('0');
            (0, digits.len(), digits.to_string(), id)
        }
        None => (1, 0, String::new(), id),
    }
}

fn interchange_of(
    tx: &crate::registry::db::Conn,
    id: Option<i64>,
) -> Result<Option<String>, crate::registry::db::Error> {
    Ok(earlier_of(tx, id, DocumentDisposition::New)?.0)
}

/// The interchange of the sighting `id` (the one a duplicate or a conflict is of) and, for
/// a `disposition` of conflict, that sighting's content fingerprint, read together.
fn earlier_of(
    tx: &crate::registry::db::Conn,
    id: Option<i64>,
    disposition: DocumentDisposition,
) -> Result<(Option<String>, Option<String>), crate::registry::db::Error> {
    let Some(id) = id else {
        return Ok((None, None));
    };
    let found: Option<(Option<String>, Option<String>)> = tx
        .prepare_cached("SELECT interchange_key, fingerprint FROM documents WHERE id = ?1")?
        .query_row([id], read)
        .optional()?;
    let (interchange, fingerprint) = found.unwrap_or_default();
    let conflict = disposition == DocumentDisposition::Conflict;
    Ok((interchange, fingerprint.filter(|_| conflict)))
}

fn is_first(
    tx: &crate::registry::db::Conn,
    key: &str,
    id: i64,
) -> Result<bool, crate::registry::db::Error> {
    let first: Option<i64> = tx
        .prepare_cached("SELECT MIN(id) FROM documents WHERE key = ?1")?
        .query_row([key], read)?;
    Ok(first == Some(id))
}

/// The first original sighting of `subject` (only a delivered one, with `delivered`).
fn original_of(
    tx: &crate::registry::db::Conn,
    subject: &str,
    delivered: bool,
) -> Result<Option<i64>, crate::registry::db::Error> {
    tx.prepare_cached(
        "SELECT id FROM documents WHERE subject = ?1 AND role = 'original'
         AND (?2 = 0 OR delivery IN ('pending', 'delivered')) ORDER BY id LIMIT 1",
    )?
    .query_row(params![subject, delivered], read)
    .optional()
}

/// Whether a change of `version` is older than a change already delivered for `subject`.
fn is_stale(
    tx: &crate::registry::db::Conn,
    subject: &str,
    version: Option<&str>,
) -> Result<bool, crate::registry::db::Error> {
    let Some(version) = version else {
        return Ok(false);
    };
    let delivered: Vec<String> = tx
        .prepare_cached(
            "SELECT version FROM documents WHERE subject = ?1 AND role = 'change'
             AND version IS NOT NULL AND delivery IN ('pending', 'delivered')",
        )?
        .query_map([subject], read)?
        .collect::<Result<_, _>>()?;
    Ok(delivered
        .iter()
        .any(|d| version_order(version, d) == Some(std::cmp::Ordering::Less)))
}

/// An original arrived: its parked changes are delivered after it, oldest version first
/// (one that a delivered change makes stale is settled as stale), and its parked copies
/// are settled as duplicates of it.
fn let_go_parked(
    tx: &crate::registry::db::Conn,
    subject: &str,
    mut parked: Vec<Parked>,
    by: &str,
    original: i64,
) -> Result<Vec<Released>, crate::registry::db::Error> {
    parked.sort_by_cached_key(|(id, _, version)| version_rank(version.as_deref(), *id));
    let mut ids = Vec::new();
    for (id, role, version) in parked {
        if role == Role::Copy.as_str() {
            settle(tx, id, DocumentDisposition::Duplicate, Some(original))?;
        } else if is_stale(tx, subject, version.as_deref())? {
            settle(tx, id, DocumentDisposition::Stale, None)?;
        } else {
            let sequence = next_sequence(tx)?;
            tx.prepare_cached(
                "UPDATE documents SET delivery = 'pending', by = ?2, sequence = ?3, released_by = ?4
                 WHERE id = ?1",
            )?
            .execute(params![id, by, sequence, original])?;
            ids.push(id);
        }
    }
    ids.into_iter().map(|id| load_released(tx, id)).collect()
}

/// A parked sighting that will never be delivered, and why.
fn settle(
    tx: &crate::registry::db::Conn,
    id: i64,
    disposition: DocumentDisposition,
    duplicate_of: Option<i64>,
) -> Result<(), crate::registry::db::Error> {
    tx.prepare_cached(
        "UPDATE documents SET delivery = 'none', body = NULL, disposition = ?2,
             duplicate_of = COALESCE(?3, duplicate_of)
         WHERE id = ?1",
    )?
    .execute(params![id, disposition, duplicate_of])
    .map(drop)
}

fn withdraw(
    tx: &crate::registry::db::Conn,
    recorded: &[(i64, Delivery)],
    kept: &[i64],
) -> Result<(usize, usize), crate::registry::db::Error> {
    if recorded.is_empty() {
        return Ok((0, 0));
    }
    // A set, not a list: an interchange of a million documents completes in linear time.
    let kept: std::collections::HashSet<i64> = kept.iter().copied().collect();
    let (mut n, mut delivered) = (0, 0);
    for (id, delivery) in recorded.iter().filter(|(id, _)| !kept.contains(id)) {
        if *delivery == Delivery::Delivered {
            delivered += 1;
            continue;
        }
        tx.prepare_cached(
            "UPDATE documents SET delivery = 'parked', by = interchange_key, sequence = NULL,
                 released_by = NULL
             WHERE released_by = ?1 AND delivery = 'pending'",
        )?
        .write([id])?;
        tx.prepare_cached("DELETE FROM documents WHERE id = ?1")?
            .write([id])?;
        n += 1;
    }
    Ok((n, delivered))
}

/// The sightings that the original `original` let go and that are not delivered yet.
fn released_by(
    tx: &crate::registry::db::Conn,
    original: i64,
) -> Result<Vec<Released>, crate::registry::db::Error> {
    let ids: Vec<i64> = tx
        .prepare_cached(
            "SELECT id FROM documents WHERE released_by = ?1 AND delivery = 'pending'
             ORDER BY sequence",
        )?
        .query_map([original], read)?
        .collect::<Result<_, _>>()?;
    ids.into_iter().map(|id| load_released(tx, id)).collect()
}

fn load_released(
    tx: &crate::registry::db::Conn,
    id: i64,
) -> Result<Released, crate::registry::db::Error> {
    let (mut r, of) = tx
        .prepare_cached(
            "SELECT id, key, partner, set_id, st02, interchange_key, disposition, sequence,
                 original_missing, duplicate_of, body
             FROM documents WHERE id = ?1",
        )?
        .query_row([id], |r| {
            type Tail = (Option<i64>, bool, Option<i64>, Option<Vec<u8>>);
            let (head, (sequence, original_missing, of, body)): (_, Tail) = read(r)?;
            let (id, key, partner, set_id, st02, interchange_key, disposition) = head;
            let released = Released {
                id,
                key,
                partner,
                set_id,
                st02,
                interchange_key,
                disposition,
                sequence: sequence.unwrap_or(0),
                first: false,
                original_missing,
                duplicate_of: None,
                body: body.unwrap_or_default(),
            };
            Ok((released, of))
        })?;
    r.first = is_first(tx, &r.key, r.id)?;
    r.duplicate_of = interchange_of(tx, of)?;
    Ok(r)
}

/// A candidate for release: (id, partner, seen, delivery, by, role, subject, version).
type Candidate = (
    i64,
    String,
    i64,
    Delivery,
    String,
    String,
    String,
    Option<String>,
);

fn release(
    tx: &crate::registry::db::Conn,
    which: &Release<'_>,
    owner: &str,
    is_dead: &dyn Fn(&str) -> bool,
) -> Result<Vec<Released>, crate::registry::db::Error> {
    let (kind, sql, key) = match which {
        Release::Key(k) => (
            "operator",
            "SELECT id, partner, seen, delivery, by, role, subject, version FROM documents
             WHERE key = ?1 AND (delivery IN ('held', 'parked')
                 OR (delivery = 'pending' AND by LIKE 'operator:%'))",
            *k,
        ),
        Release::Due(_) => (
            "timeout",
            "SELECT id, partner, seen, delivery, by, role, subject, version FROM documents
             WHERE ?1 = ?1 AND (delivery = 'parked'
                 OR (delivery = 'pending' AND by LIKE 'timeout:%'))",
            "",
        ),
    };
    let by = format!("{kind}:{owner}");
    let mut candidates: Vec<Candidate> = tx
        .prepare_cached(sql)?
        .query_map([key], read)?
        .collect::<Result<_, _>>()?;
    // Per document, oldest change first, so that a later one never goes out before it.
    candidates.sort_by_cached_key(|c| (c.6.clone(), version_rank(c.7.as_deref(), c.0)));
    let mut ids = Vec::new();
    for (id, partner, seen, delivery, held_by, role, subject, version) in candidates {
        if delivery == Delivery::Pending {
            // Another release's, unfinished: adopted once its process is gone.
            let holder = held_by.split_once(':').map_or("", |(_, o)| o);
            if holder == owner || is_dead(holder) {
                ids.push(id);
            }
            continue;
        }
        if let Release::Due(waited) = which {
            if !waited(&partner, seen) {
                continue;
            }
            // A copy is never delivered as new: after the wait it is an operator's to decide.
            if role == Role::Copy.as_str() {
                tx.prepare_cached("UPDATE documents SET delivery = 'held' WHERE id = ?1")?
                    .execute([id])?;
                continue;
            }
        }
        if role == Role::Change.as_str() && is_stale(tx, &subject, version.as_deref())? {
            settle(tx, id, DocumentDisposition::Stale, None)?;
            continue;
        }
        let sequence = next_sequence(tx)?;
        tx.prepare_cached(
            "UPDATE documents SET delivery = 'pending', by = ?2, sequence = ?3,
                 original_missing = CASE WHEN delivery = 'parked' THEN 1 ELSE 0 END WHERE id = ?1",
        )?
        .execute(params![id, by, sequence])?;
        ids.push(id);
    }
    ids.into_iter().map(|id| load_released(tx, id)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Identity;

    /// One sighting of ACME's PO `po` (subject 850) in interchange `ic`.
    struct S {
        key: String,
        subject: String,
        role: Role,
        version: Option<&'static str>,
        fingerprint: &'static str,
        ic: String,
        deliver: bool,
    }

    fn s(
        set: &str,
        po: &str,
        role: Role,
        version: Option<&'static str>,
        fp: &'static str,
        ic: u32,
    ) -> S {
        S {
            key: format!(
                "ZZ:ACME:{set}:{po}:{}:{}",
                role.as_str(),
                version.unwrap_or("")
            ),
            subject: format!("ZZ:ACME:850:{po}"),
            role,
            version,
            fingerprint: fp,
            ic: format!("ZZ:ACME:{ic:09}"),
            deliver: false,
        }
    }

    fn record(r: &mut Registry, x: &S) -> (Decided, Vec<Released>) {
        r.batch(|b| {
            b.record_document(&Sighting {
                key: &x.key,
                subject: &x.subject,
                partner: "ZZ:ACME",
                set_id: "850",
                role: x.role,
                version: x.version,
                fingerprint: x.fingerprint,
                interchange_key: &x.ic,
                position: "0.0",
                st02: "0001",
                deliver_duplicates: x.deliver,
            })
        })
        .unwrap()
    }

    fn registry() -> Registry {
        Registry::in_memory(Identity {
            qualifier: "ZZ",
            id: "US",
        })
    }

    /// Deciding a sighting reads the sightings of its key and subject by index, never all
    /// of them (a file of 100,000 copies of one PO read each copy's 100,000 predecessors).
    #[test]
    fn what_a_decision_asks_is_answered_by_indexes_alone() {
        let mut r = registry();
        for n in 0..50 {
            record(&mut r, &s("850", "P", Role::Original, None, "o", n));
        }
        let plan: Vec<String> = r
            .conn
            .query_map(
                &format!("EXPLAIN QUERY PLAN {ASKED}"),
                params![
                    "ZZ:ACME:000000001",
                    "0.0",
                    "o",
                    "ZZ:ACME:850:P:original:",
                    "ZZ:ACME:850:P",
                    true
                ],
                |row| row.get(3),
            )
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let reads: Vec<&String> = plan.iter().filter(|l| l.contains("documents")).collect();
        assert_eq!(reads.len(), 5, "{plan:#?}");
        for line in &reads {
            assert!(line.starts_with("SEARCH documents USING"), "{plan:#?}");
        }
        assert!(!plan.iter().any(|l| l.contains("TEMP B-TREE")), "{plan:#?}");
    }

    crate::registry::tests::on_both! {
        fn the_same_place_again_keeps_its_decision_and_what_it_let_go() {
            let mut r = registry();
            let change = s("860", "P", Role::Change, Some("1"), "c", 1);
            let original = s("850", "P", Role::Original, None, "o", 2);
            assert_eq!(record(&mut r, &change).0.delivery, Delivery::Parked);
            let (first, let_go) = record(&mut r, &original);
            assert_eq!(
                (first.disposition, first.delivery),
                (DocumentDisposition::New, Delivery::Pending)
            );
            assert_eq!(let_go.len(), 1);
            // A takeover of the original's interchange: the same decision, the same change let go
            // (once), and no new delivery numbers.
            let (again, let_go_again) = record(&mut r, &original);
            assert!(again.again);
            assert_eq!((again.id, again.sequence), (first.id, first.sequence));
            assert_eq!(let_go_again, let_go);
            // Once delivered, a takeover lets nothing go again.
            r.batch(|b| b.documents_delivered(&[first.id, let_go[0].id]))
                .unwrap();
            assert!(record(&mut r, &original).1.is_empty());
        }
    }

    crate::registry::tests::on_both! {
        fn duplicates_of_what_was_never_delivered_are_not_delivered_even_with_deliver() {
            let mut r = registry();
            record(&mut r, &s("850", "P", Role::Original, None, "a", 1));
            let conflict = s("850", "P", Role::Original, None, "b", 2);
            assert_eq!(record(&mut r, &conflict).0.delivery, Delivery::Held);
            // The held content again, in a third interchange: a duplicate of the held one, and
            // not delivered while it is held, whatever the partner says.
            let mut again = s("850", "P", Role::Original, None, "b", 3);
            again.deliver = true;
            let (d, _) = record(&mut r, &again);
            assert_eq!(d.disposition, DocumentDisposition::Duplicate);
            assert_eq!(d.delivery, Delivery::None);
            assert_eq!(d.duplicate_of.as_deref(), Some("ZZ:ACME:000000002"));
            // The delivered content again with deliver: delivered, saying of what.
            let mut resend = s("850", "P", Role::Original, None, "a", 4);
            resend.deliver = true;
            let (d, _) = record(&mut r, &resend);
            assert_eq!(
                (d.disposition, d.delivery),
                (DocumentDisposition::Duplicate, Delivery::Pending)
            );
            assert!(!d.first);
        }
    }

    crate::registry::tests::on_both! {
        fn parked_copies_are_settled_and_parked_changes_follow_in_version_order() {
            let mut r = registry();
            let copy = s("850", "P", Role::Copy, None, "k", 1);
            let v3 = s("860", "P", Role::Change, Some("3"), "c3", 2);
            let v2 = s("860", "P", Role::Change, Some("2"), "c2", 3);
            for x in [&copy, &v3, &v2] {
                assert_eq!(
                    record(&mut r, x).0.disposition,
                    DocumentDisposition::Waiting
                );
            }
            let (_, let_go) = record(&mut r, &s("850", "P", Role::Original, None, "o", 4));
            let order: Vec<&str> = let_go.iter().map(|l| l.key.as_str()).collect();
            assert_eq!(order, ["ZZ:ACME:860:P:change:2", "ZZ:ACME:860:P:change:3"]);
            assert!(let_go[0].sequence < let_go[1].sequence);
            let rows = r.documents(&[], Some(&copy.key)).unwrap();
            assert_eq!(
                rows[0].delivery,
                Delivery::None,
                "the copy is settled by its original"
            );
            // A copy after its original: a duplicate of it (a copy's purpose code makes its
            // content differ from the original's).
            record(&mut r, &s("850", "R", Role::Original, None, "o", 5));
            let (d, _) = record(&mut r, &s("850", "R", Role::Copy, None, "k", 6));
            assert_eq!(d.disposition, DocumentDisposition::Duplicate);
            assert_eq!(d.delivery, Delivery::None);
            assert_eq!(d.duplicate_of.as_deref(), Some("ZZ:ACME:000000005"));
        }
    }

    crate::registry::tests::on_both! {
        fn any_mix_of_sequence_numbers_is_ordered_without_a_panic() {
            let mut r = registry();
            let versions = ["A1", "3", "", "10", "B", "2", "0003", "x", "1"];
            for (i, v) in versions.iter().cycle().take(64).enumerate() {
                let mut c = s("860", "M", Role::Change, None, "c", 100 + i as u32);
                c.version = (!v.is_empty()).then_some(*v);
                c.key = format!("ZZ:ACME:860:M:04:{v}.{i}");
                record(&mut r, &c);
            }
            let (_, let_go) = record(&mut r, &s("850", "M", Role::Original, None, "o", 1));
            // Numbers first, by value (stale ones settled), then the rest in arrival order.
            let delivered: Vec<&str> = let_go.iter().map(|l| l.key.as_str()).collect();
            assert!(
                delivered.first().is_some_and(|k| k.ends_with(":1.8")),
                "{delivered:?}"
            );
            let numeric = delivered
                .iter()
                .take_while(|k| {
                    let v = k.rsplit(':').next().unwrap_or("");
                    v.split('.')
                        .next()
                        .unwrap_or("")
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                        && !v.starts_with('.')
                })
                .count();
            assert!(numeric >= 4, "{delivered:?}");
        }
    }

    crate::registry::tests::on_both! {
        fn a_release_takes_only_what_it_wrote_and_adopts_a_dead_releases() {
            let mut r = registry();
            record(&mut r, &s("860", "A", Role::Change, Some("1"), "a", 1));
            record(&mut r, &s("860", "B", Role::Change, Some("1"), "b", 2));
            let key_a = "ZZ:ACME:860:A:change:1";
            let key_b = "ZZ:ACME:860:B:change:1";
            // A's release fails after its first step (its process dies before writing).
            let a = r
                .batch(|b| b.release_documents(&Release::Key(key_a), "p1", &|_| false))
                .unwrap();
            assert_eq!(a.len(), 1);
            // B's release, by another process, finishes: A stays pending, not delivered.
            let b = r
                .batch(|b| b.release_documents(&Release::Key(key_b), "p2", &|_| false))
                .unwrap();
            let ids: Vec<i64> = b.iter().map(|x| x.id).collect();
            r.batch(|t| t.documents_delivered(&ids)).unwrap();
            let rows = r.documents(&[], Some(key_a)).unwrap();
            assert_eq!(rows[0].delivery, Delivery::Pending);
            // While p1 lives its pending row is its own; once dead, a release adopts it.
            let alive = r
                .batch(|b| b.release_documents(&Release::Key(key_a), "p3", &|_| false))
                .unwrap();
            assert!(alive.is_empty());
            let adopted = r
                .batch(|b| b.release_documents(&Release::Key(key_a), "p3", &|o| o == "p1"))
                .unwrap();
            assert_eq!(adopted.len(), 1);
            assert_eq!(adopted[0].sequence, a[0].sequence, "the same file again");
        }
    }

    crate::registry::tests::on_both! {
        fn a_due_release_holds_copies_and_settles_older_changes() {
            let mut r = registry();
            record(&mut r, &s("850", "C", Role::Copy, None, "k", 1));
            record(&mut r, &s("860", "C", Role::Change, Some("3"), "c3", 2));
            record(&mut r, &s("860", "C", Role::Change, Some("2"), "c2", 3));
            let always = |_: &str, _: i64| true;
            let out = r
                .batch(|b| b.release_documents(&Release::Due(&always), "me", &|_| false))
                .unwrap();
            let keys: Vec<&str> = out.iter().map(|o| o.key.as_str()).collect();
            // Oldest change first; the copy is not delivered but held for an operator.
            assert_eq!(keys, ["ZZ:ACME:860:C:change:2", "ZZ:ACME:860:C:change:3"]);
            let copy = r.documents(&[Delivery::Held], None).unwrap();
            assert_eq!(copy.len(), 1);
            assert_eq!(copy[0].set, "850");
            // Its original then comes: new (the copy was never delivered).
            let ids: Vec<i64> = out.iter().map(|o| o.id).collect();
            r.batch(|b| b.documents_delivered(&ids)).unwrap();
            let (o, _) = record(&mut r, &s("850", "C", Role::Original, None, "o", 4));
            assert_eq!(o.disposition, DocumentDisposition::New);
            // A change older than one delivered by the sweep is stale, even before any original.
            let (old, _) = record(&mut r, &s("860", "D", Role::Change, Some("5"), "d5", 5));
            assert_eq!(old.disposition, DocumentDisposition::Waiting);
            let out = r
                .batch(|b| b.release_documents(&Release::Due(&always), "me", &|_| false))
                .unwrap();
            let ids: Vec<i64> = out.iter().map(|o| o.id).collect();
            r.batch(|b| b.documents_delivered(&ids)).unwrap();
            let (older, _) = record(&mut r, &s("860", "D", Role::Change, Some("4"), "d4", 6));
            assert_eq!(older.disposition, DocumentDisposition::Stale);
        }
    }

    crate::registry::tests::on_both! {
        fn changes_without_a_sequence_number_follow_each_other_and_a_withdrawn_original_parks_again() {
            let mut r = registry();
            record(&mut r, &s("850", "E", Role::Original, None, "o", 1));
            let (a, _) = record(&mut r, &s("860", "E", Role::Change, None, "a", 2));
            let (b, _) = record(&mut r, &s("860", "E", Role::Change, None, "b", 3));
            assert_eq!(a.disposition, DocumentDisposition::New);
            assert_eq!(b.disposition, DocumentDisposition::New, "not a conflict");
            // An original that lets a change go, then withdrawn by its interchange's next
            // attempt: the change waits again, the original's row is gone.
            let c = s("860", "F", Role::Change, Some("1"), "c", 4);
            record(&mut r, &c);
            let f = s("850", "F", Role::Original, None, "o", 5);
            let (_, let_go) = record(&mut r, &f);
            assert_eq!(let_go.len(), 1);
            let n = r
                .batch(|b| {
                    let recorded = b.recorded_documents(&[f.ic.as_str()])?;
                    b.withdraw_documents(recorded.first().map_or(&[][..], Vec::as_slice), &[])
                })
                .unwrap();
            assert_eq!(n, (1, 0));
            assert!(r.documents(&[], Some(&f.key)).unwrap().is_empty());
            let change = r.documents(&[], Some(&c.key)).unwrap();
            assert_eq!(change[0].delivery, Delivery::Parked);
            assert_eq!(change[0].sequence, None);
        }
    }

    crate::registry::tests::on_both! {
        fn a_release_lets_go_once_and_a_due_release_only_what_waited_long_enough() {
            let mut r = registry();
            record(&mut r, &s("860", "Q", Role::Change, Some("1"), "c", 1));
            let never = |_: &str, _: i64| false;
            assert!(r
                .batch(|b| b.release_documents(&Release::Due(&never), "me", &|_| false))
                .unwrap()
                .is_empty());
            let always = |_: &str, _: i64| true;
            let first = r
                .batch(|b| b.release_documents(&Release::Due(&always), "me", &|_| false))
                .unwrap();
            assert_eq!(first.len(), 1);
            assert!(first[0].original_missing);
            // Not yet marked delivered (a crash before it was): the next sweep returns the same.
            let again = r
                .batch(|b| b.release_documents(&Release::Due(&always), "me", &|_| false))
                .unwrap();
            assert_eq!(again, first);
            let ids: Vec<i64> = first.iter().map(|f| f.id).collect();
            r.batch(|b| b.documents_delivered(&ids)).unwrap();
            assert!(r
                .batch(|b| b.release_documents(&Release::Due(&always), "me", &|_| false))
                .unwrap()
                .is_empty());
        }
    }
}
