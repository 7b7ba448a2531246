//! The words the registry stores: a claim's state, an audit event's kind and a disposition,
//! as SQL text.
//!
//! Each word is spelled exactly as rows have always held it, so registries written by earlier
//! versions read back unchanged. A word no x12gate writes is a [`FromSqlError`] when read:
//! guessing at it would turn a damaged or foreign row into a decision.

use super::db::{FromValue, ToValue, Value};

use crate::disposition::Disposition;

crate::words::words! {
    /// Where a claim stands (the `state` column, whose CHECK constraint names the same three).
    pub enum ClaimState as as_str {
        /// Claimed, and its owner's lease decides whether another process may take it over.
        InFlight = "in_flight",
        /// Decided and answered; a resend meets its outcome.
        Completed = "completed",
        /// Cut short (an operational error, a stop, a release or a reprocess): the next
        /// attempt of the same content takes it over at once.
        Failed = "failed",
    }
}

crate::words::words! {
    /// What an audit event records (the `event` column). A decision's event is named after
    /// its disposition; the others are notes, recorded without one.
    pub enum EventKind as as_str {
        Accepted = "accepted",
        Partial = "partial",
        Rejected = "rejected",
        Duplicate = "duplicate",
        Conflict = "conflict",
        InProgress = "in_progress",
        /// A part of a file that held no readable interchange (decided `rejected`).
        Unreadable = "unreadable",
        /// The registry was created for a gateway.
        Init = "init",
        /// Keys past their window were removed.
        Prune = "prune",
        /// A completed interchange was opened for another attempt (`reprocess`).
        Reopened = "reopened",
        /// An operator released an unfinished claim.
        Released = "released",
        /// The watcher placed an interchange's file (archive or rejected).
        Placed = "placed",
        /// Held or parked documents were delivered (an operator's release, or a wait for an
        /// original that ran out).
        DocumentsReleased = "documents_released",
        /// An operator discarded held or parked documents.
        DocumentsDiscarded = "documents_discarded",
        /// `scan --backfill` recorded interchanges and documents of an old archive.
        Backfilled = "backfilled",
        /// One attempt to deliver a document, with its status and duration.
        DeliveryAttempt = "delivery_attempt",
        /// The attempt that delivered a document: its destination, status and the business
        /// system's reference, as they were then (before, a `delivery_attempt` whose state
        /// was `delivered`).
        Delivered = "delivered",
        /// An operator put dead deliveries back in the queue.
        DeliveriesRetried = "deliveries_retried",
        /// An operator let dead deliveries go unsent (`deliveries discard`), releasing what
        /// they held.
        DeliveriesDiscarded = "deliveries_discarded",
        /// The business system's reference for a document was recorded (`confirm`).
        Confirmed = "confirmed",
        /// Outbound counters moved past numbers found sent (`--repair-counters`).
        CountersRepaired = "counters_repaired",
        /// An action taken on the web page (reprocess, release, discard, retry): by whom,
        /// and what came of it.
        WebAction = "web_action",
        /// One of our documents was written for its partner (`send`).
        Sent = "sent",
        /// `watch` put a new configuration in force (SIGHUP), or refused one.
        Reloaded = "reloaded",
        /// One of our documents was written again for its partner (`resend`).
        Resent = "resent",
    }
}

impl EventKind {
    /// Whether the event records an interchange decided and answered (the acknowledged
    /// layer): accepted, partial or rejected.
    pub fn is_answer(self) -> bool {
        matches!(
            self,
            EventKind::Accepted | EventKind::Partial | EventKind::Rejected
        )
    }
}

impl From<Disposition> for EventKind {
    fn from(d: Disposition) -> Self {
        match d {
            Disposition::Accepted => EventKind::Accepted,
            Disposition::Partial => EventKind::Partial,
            Disposition::Rejected => EventKind::Rejected,
            Disposition::Duplicate => EventKind::Duplicate,
            Disposition::Conflict => EventKind::Conflict,
            Disposition::InProgress => EventKind::InProgress,
        }
    }
}

/// A word read from the registry that this x12gate never writes.
#[derive(Debug, thiserror::Error)]
#[error("{found:?} is not a {what} this x12gate knows")]
pub struct UnknownWord {
    pub what: &'static str,
    pub found: String,
}

/// SQL text for each word: written as `as_str` spells it, read back only if it is one of
/// `ALL`. (`Display` and `Serialize` give the same word: see `crate::words`.)
macro_rules! stored_as_text {
    ($($word:ty => $what:literal),* $(,)?) => {$(
        impl ToValue for $word {
            fn to_value(&self) -> Value {
                Value::Text(self.as_str().to_string())
            }
        }

        impl FromValue for $word {
            fn from_value(value: Value) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
                let text = String::from_value(value)?;
                <$word>::parse(&text).ok_or_else(|| {
                    UnknownWord {
                        what: $what,
                        found: crate::text::shortened(&text, 64).into_owned(),
                    }
                    .into()
                })
            }
        }
    )*};
}

stored_as_text!(
    Disposition => "disposition",
    ClaimState => "claim state",
    EventKind => "event kind",
    crate::document::DocumentDisposition => "document disposition",
    super::Delivery => "delivery",
    super::DeliveryState => "delivery state",
    super::CircuitState => "circuit state",
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::db::{Conn, Error};

    /// Writes `word` into a TEXT column and reads back the raw text and the word.
    fn round_trip<T: ToValue + FromValue>(conn: &Conn, word: T) -> (String, T) {
        conn.execute("DELETE FROM t", []).unwrap();
        conn.execute("INSERT INTO t (v) VALUES (?1)", [&word])
            .unwrap();
        conn.query_row("SELECT v, v FROM t", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
    }

    fn table() -> Conn {
        let conn = Conn::Sqlite(rusqlite::Connection::open_in_memory().unwrap());
        conn.execute_batch("CREATE TABLE t (v TEXT) STRICT")
            .unwrap();
        conn
    }

    #[test]
    fn words_are_stored_as_they_always_were() {
        let conn = table();
        let spelled: Vec<(String, Disposition)> = Disposition::ALL
            .into_iter()
            .map(|d| round_trip(&conn, d))
            .collect();
        assert_eq!(
            spelled,
            vec![
                ("accepted".to_string(), Disposition::Accepted),
                ("partial".to_string(), Disposition::Partial),
                ("rejected".to_string(), Disposition::Rejected),
                ("duplicate".to_string(), Disposition::Duplicate),
                ("conflict".to_string(), Disposition::Conflict),
                ("in_progress".to_string(), Disposition::InProgress),
            ]
        );
        let states: Vec<(String, ClaimState)> = ClaimState::ALL
            .into_iter()
            .map(|s| round_trip(&conn, s))
            .collect();
        assert_eq!(
            states,
            vec![
                ("in_flight".to_string(), ClaimState::InFlight),
                ("completed".to_string(), ClaimState::Completed),
                ("failed".to_string(), ClaimState::Failed),
            ]
        );
        let kinds: Vec<String> = EventKind::ALL
            .into_iter()
            .map(|k| {
                let (text, back) = round_trip(&conn, k);
                assert_eq!(back, k);
                text
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "accepted",
                "partial",
                "rejected",
                "duplicate",
                "conflict",
                "in_progress",
                "unreadable",
                "init",
                "prune",
                "reopened",
                "released",
                "placed",
                "documents_released",
                "documents_discarded",
                "backfilled",
                "delivery_attempt",
                "delivered",
                "deliveries_retried",
                "deliveries_discarded",
                "confirmed",
                "counters_repaired",
                "web_action",
                "sent",
                "reloaded",
                "resent"
            ]
        );
    }

    #[test]
    fn a_decision_is_named_after_its_disposition() {
        for d in Disposition::ALL {
            assert_eq!(EventKind::from(d).as_str(), d.as_str());
        }
    }

    #[test]
    fn an_unknown_word_is_an_error_not_a_guess() {
        let conn = table();
        for text in ["Accepted", "failed", "", "in-flight"] {
            conn.execute("DELETE FROM t", []).unwrap();
            conn.execute("INSERT INTO t (v) VALUES (?1)", [text])
                .unwrap();
            let read = conn.query_row("SELECT v FROM t", [], |r| r.get::<Disposition>(0));
            let Err(Error::Decode {
                column: 0,
                cause: e,
            }) = read
            else {
                panic!("{text:?} read as {read:?}");
            };
            assert_eq!(
                e.to_string(),
                format!("{text:?} is not a disposition this x12gate knows")
            );
        }
        conn.execute("UPDATE t SET v = 'paused'", []).unwrap();
        assert!(conn
            .query_row("SELECT v FROM t", [], |r| r.get::<ClaimState>(0))
            .is_err());
        assert!(conn
            .query_row("SELECT v FROM t", [], |r| r.get::<EventKind>(0))
            .is_err());
        // Not text at all.
        assert!(conn
            .query_row("SELECT 7", [], |r| r.get::<EventKind>(0))
            .is_err());
        // NULL is no word: only an `Option` reads it.
        assert_eq!(
            conn.query_row("SELECT NULL", [], |r| r.get::<Option<ClaimState>>(0))
                .unwrap(),
            None
        );
    }

    #[test]
    fn shown_as_the_word() {
        assert_eq!(format!("[{:<9}]", ClaimState::Failed), "[failed   ]");
        assert_eq!(
            serde_json::to_value(EventKind::InProgress).unwrap(),
            serde_json::json!("in_progress")
        );
        assert_eq!(
            serde_json::to_value(ClaimState::InFlight).unwrap(),
            serde_json::json!("in_flight")
        );
    }
}
