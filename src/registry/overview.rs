//! What the EDI desk's web page reads that no command does: decisions and documents since a
//! time, traffic in time buckets, a search across interchanges and documents, and the
//! rejected interchanges oldest first. Reads only.

use crate::registry::db::{from_row, params, read};
use serde::Serialize;

use super::{ClaimState, Delivery, DeliveryRow, DocumentRow, EventKind, Registry, RegistryError};
use crate::disposition::Disposition;
use crate::document::DocumentDisposition;

/// One interchange as a list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    pub key: String,
    pub partner: String,
    pub control_number: String,
    pub state: ClaimState,
    pub disposition: Option<Disposition>,
    pub reason: Option<String>,
    pub file: Option<String>,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
}

/// What to look for; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct Search {
    /// A control number (padded or not: an ISA13 or a GS06), a partner (`QUAL:ID` or `ID`),
    /// a key, a document key or a part of one (a PO number), an ST02, the ERP's reference
    /// for a document (`SO-1002`), or a part of a file name.
    pub text: Option<String>,
    pub partner: Option<String>,
    /// Only interchanges carrying a set of this id (`810`), and documents of it.
    pub set: Option<String>,
    pub disposition: Option<Disposition>,
    pub since_ms: Option<i64>,
    /// Until this time, not included.
    pub until_ms: Option<i64>,
    /// At most this many of each kind; one more is read to tell that there are more.
    pub limit: usize,
}

/// What a search found, newest first.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Found {
    pub interchanges: Vec<Listed>,
    pub documents: Vec<DocumentRow>,
    /// Whether either list was cut at the limit.
    pub more_interchanges: bool,
    pub more_documents: bool,
}

from_row!(
    Listed,
    LISTED {
        key: "key",
        partner: "partner",
        control_number: "control_number",
        state: "state",
        disposition: "disposition",
        reason: "reason",
        file: "file",
        first_seen_ms: "first_seen",
        last_seen_ms: "last_seen",
    }
);

/// `000000101`, `101` and `0101` are one control number; `None` for text that is not one.
fn control_number(text: &str) -> Option<String> {
    (!text.is_empty() && text.len() <= 9 && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.trim_start_matches('0').to_string())
}

impl Registry {
    /// Decisions (every interchange of every file, resends included) by partner and kind
    /// since `since_ms`.
    pub fn decisions_since(
        &self,
        since_ms: i64,
    ) -> Result<Vec<(String, EventKind, u64)>, RegistryError> {
        self.all(
            "SELECT COALESCE(partner, ''), event, COUNT(*) FROM events
             WHERE disposition IS NOT NULL AND at >= ?1
             GROUP BY 1, event ORDER BY 1, event",
            [since_ms],
            read,
        )
    }

    /// Document sightings by partner and decision since `since_ms`.
    pub fn documents_since(
        &self,
        since_ms: i64,
    ) -> Result<Vec<(String, DocumentDisposition, u64)>, RegistryError> {
        self.all(
            // Documents recorded from an old archive (`scan --backfill`) are not traffic.
            "SELECT partner, disposition, COUNT(*) FROM documents
             WHERE seen >= ?1 AND by != 'backfill'
             GROUP BY 1, 2 ORDER BY 1, 2",
            [since_ms],
            read,
        )
    }

    /// Decisions since `since_ms` in buckets of `bucket_ms`: (bucket start, kind, count).
    pub fn traffic(
        &self,
        since_ms: i64,
        bucket_ms: i64,
    ) -> Result<Vec<(i64, EventKind, u64)>, RegistryError> {
        self.all(
            "SELECT ?1 + ((at - ?1) / ?2) * ?2 AS b, event, COUNT(*) FROM events
             WHERE disposition IS NOT NULL AND at >= ?1
             GROUP BY b, event ORDER BY b, event",
            [since_ms, bucket_ms.max(1)],
            read,
        )
    }

    /// Held and parked documents by partner.
    pub fn open_documents(&self) -> Result<Vec<(String, Delivery, u64)>, RegistryError> {
        self.all(
            "SELECT partner, delivery, COUNT(*) FROM documents
             WHERE delivery IN ('held', 'parked') GROUP BY 1, 2 ORDER BY 1, 2",
            [],
            read,
        )
    }

    /// When `partner`'s latest interchange was decided.
    pub fn last_received(&self, partner: &str) -> Result<Option<i64>, RegistryError> {
        Ok(self
            .all(
                "SELECT at FROM events WHERE partner = ?1 AND disposition IS NOT NULL
                 ORDER BY at DESC LIMIT 1",
                [partner],
                read,
            )?
            .into_iter()
            .next())
    }

    /// Claims not completed (in flight or failed).
    pub fn unfinished_count(&self) -> Result<u64, RegistryError> {
        Ok(self
            .all(
                "SELECT COUNT(*) FROM interchanges WHERE state != 'completed'",
                [],
                read,
            )?
            .into_iter()
            .next()
            .unwrap_or(0))
    }

    /// Held and parked documents, oldest first, at most `limit`.
    pub fn open_document_rows(&self, limit: usize) -> Result<Vec<DocumentRow>, RegistryError> {
        self.all(
            &format!(
                "SELECT {} FROM documents WHERE delivery IN ('held', 'parked')
                 ORDER BY id LIMIT ?1",
                super::documents::COLUMNS
            ),
            [i64::try_from(limit).unwrap_or(i64::MAX)],
            read,
        )
    }

    /// Dead deliveries and those they block, oldest first, at most `limit`.
    pub fn dead_deliveries(&self, limit: usize) -> Result<Vec<DeliveryRow>, RegistryError> {
        self.all(
            &format!(
                "SELECT {} FROM deliveries WHERE state IN ('dead', 'blocked') ORDER BY id LIMIT ?1",
                super::deliveries::ROW
            ),
            [i64::try_from(limit).unwrap_or(i64::MAX)],
            read,
        )
    }

    /// The partner of the document key `key`, if any sighting has it.
    pub fn document_partner(&self, key: &str) -> Result<Option<String>, RegistryError> {
        Ok(self
            .all(
                "SELECT partner FROM documents WHERE key = ?1 LIMIT 1",
                [key],
                read,
            )?
            .into_iter()
            .next())
    }

    /// Dead deliveries by partner.
    pub fn dead_by_partner(&self) -> Result<Vec<(String, u64)>, RegistryError> {
        self.all(
            "SELECT partner, COUNT(*) FROM deliveries WHERE state = 'dead'
             GROUP BY 1 ORDER BY 1",
            [],
            read,
        )
    }

    /// Completed interchanges decided `rejected`, oldest first.
    pub fn rejected_interchanges(&self, limit: usize) -> Result<Vec<Listed>, RegistryError> {
        self.all(
            &format!(
                "SELECT {LISTED} FROM interchanges
                 WHERE state = 'completed' AND disposition = 'rejected'
                 ORDER BY last_seen, key LIMIT ?1"
            ),
            [i64::try_from(limit).unwrap_or(i64::MAX)],
            read,
        )
    }

    /// Interchanges and documents matching `s`, newest first. A control number (digits)
    /// matches control numbers, keys and whole parts of document keys only: as a part of
    /// a file name or inside a longer number (`20240101-b.x12`, `PO-1010`) it would match
    /// most of the registry. Other text matches partners and keys whole, and document keys
    /// and file names in part (ASCII case ignored).
    pub fn search(&self, s: &Search) -> Result<Found, RegistryError> {
        let text = s.text.as_deref().map(str::trim).filter(|t| !t.is_empty());
        let number = text.and_then(control_number);
        let key = text.map(crate::keys::typed_key);
        // A part of a document key or file name; for a number, a whole part of a key.
        let part = match (text, &number) {
            (Some(t), Some(_)) => Some(format!(":{t}:")),
            (Some(t), None) => Some(t.to_ascii_lowercase()),
            _ => None,
        };
        let files = part.as_ref().filter(|_| number.is_none());
        let limit = i64::try_from(s.limit.saturating_add(1)).unwrap_or(i64::MAX);
        let mut interchanges = self.all(
            &format!(
                "SELECT {LISTED} FROM interchanges
                 WHERE (CAST(?1 AS TEXT) IS NULL
                        OR key = ?2 OR substr(key, instr(key, ':') + 1) = ?2
                        OR partner = ?1 OR substr(partner, instr(partner, ':') + 1) = ?1
                        OR (CAST(?3 AS TEXT) IS NOT NULL AND ltrim(control_number, '0') = ?3)
                        OR (CAST(?10 AS TEXT) IS NOT NULL AND instr(lower(COALESCE(file, '')), ?10) > 0)
                        OR (CAST(?3 AS TEXT) IS NOT NULL AND key IN (SELECT interchange_key
                            FROM groups WHERE ltrim(control_number, '0') = ?3))
                        OR key IN (SELECT interchange_key FROM documents
                                   WHERE instr(lower(key), ?4) > 0
                                      OR lower(COALESCE(result_ref, '')) = lower(CAST(?1 AS TEXT))))
                   AND (CAST(?5 AS TEXT) IS NULL OR partner = ?5 OR substr(partner, instr(partner, ':') + 1) = ?5)
                   AND (CAST(?11 AS TEXT) IS NULL OR key IN (SELECT interchange_key FROM documents
                        WHERE set_id = ?11))
                   AND (disposition = ?6 OR ?6 IS NULL)
                   AND (last_seen >= ?7 OR ?7 IS NULL) AND (first_seen < ?8 OR ?8 IS NULL)
                 ORDER BY last_seen DESC, key LIMIT ?9"
            ),
            params![
                text,
                key,
                number,
                part,
                s.partner,
                s.disposition,
                s.since_ms,
                s.until_ms,
                limit,
                files,
                s.set
            ],
            read,
        )?;
        // A disposition is an interchange's: the documents shown are those of such
        // interchanges.
        let mut documents = self.all(
            &format!(
                "SELECT {} FROM documents
                 WHERE (CAST(?1 AS TEXT) IS NULL OR instr(lower(key), ?2) > 0 OR st02 = ?1
                        OR lower(COALESCE(result_ref, '')) = lower(CAST(?1 AS TEXT))
                        OR (CAST(?9 AS TEXT) IS NOT NULL AND interchange_key IN
                            (SELECT interchange_key FROM groups
                             WHERE ltrim(control_number, '0') = ?9)))
                   AND (CAST(?8 AS TEXT) IS NULL OR set_id = ?8)
                   AND (CAST(?3 AS TEXT) IS NULL OR partner = ?3 OR substr(partner, instr(partner, ':') + 1) = ?3)
                   AND (seen >= ?4 OR ?4 IS NULL) AND (seen < ?5 OR ?5 IS NULL)
                   AND (CAST(?7 AS TEXT) IS NULL OR interchange_key IN
                        (SELECT key FROM interchanges WHERE disposition = ?7))
                 ORDER BY id DESC LIMIT ?6",
                super::documents::COLUMNS
            ),
            params![
                text,
                part,
                s.partner,
                s.since_ms,
                s.until_ms,
                limit,
                s.disposition,
                s.set,
                number
            ],
            read,
        )?;
        let more_interchanges = interchanges.len() > s.limit;
        let more_documents = documents.len() > s.limit;
        interchanges.truncate(s.limit);
        documents.truncate(s.limit);
        Ok(Found {
            interchanges,
            documents,
            more_interchanges,
            more_documents,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_number_matches_padded_or_not() {
        assert_eq!(control_number("000000101").as_deref(), Some("101"));
        assert_eq!(control_number("101").as_deref(), Some("101"));
        assert_eq!(control_number("0").as_deref(), Some(""));
        assert_eq!(control_number("1234567890"), None);
        assert_eq!(control_number("PO101"), None);
        assert_eq!(control_number(""), None);
    }
}
