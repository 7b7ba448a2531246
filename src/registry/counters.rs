//! Outbound control numbers (ISA13 and GS06 of our acknowledgments), per partner.
//!
//! Numbers run from 1 to 999999999 and wrap to 1, as X12 allows once a trading partner
//! agreement's window has passed.

use crate::registry::db::{params, read, OptionalExtension};

use super::{Registry, RegistryError};

pub use crate::x12::MAX_CONTROL_NUMBER;

/// How many of a partner's latest interchanges the start-up check reads the stored
/// acknowledgments of (a resend moves an old one up, so a margin over the last few).
pub const RECENT_ACKS: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Counter {
    /// ISA13 of our interchanges.
    Interchange,
    /// GS06 of our functional groups.
    Group,
}

impl Counter {
    /// `ISA13` or `GS06`, as the registry stores it.
    pub fn name(self) -> &'static str {
        match self {
            Counter::Interchange => "ISA13",
            Counter::Group => "GS06",
        }
    }
}

/// Takes the next number on `conn` (a connection or an open transaction). One statement: the
/// increment and the read are atomic across processes.
pub(super) fn next_in(
    conn: &crate::registry::db::Conn,
    partner: &str,
    counter: Counter,
) -> Result<u32, crate::registry::db::Error> {
    let (isa13, gs06) = match counter {
        Counter::Interchange => (1, 0),
        Counter::Group => (0, 1),
    };
    let (a, b) = take_in(conn, partner, isa13, gs06)?;
    a.into_iter()
        .chain(b)
        .next()
        .ok_or(crate::registry::db::Error::NoRows)
}

/// The numbers taken for one acknowledgment: ISA13s, then GS06s.
pub type Numbers = (Vec<u32>, Vec<u32>);

/// Numbers taken by one statement at most: far below the wrap, so one block wraps once.
const BLOCK: usize = 1000;

/// The next `isa13` numbers of the interchange counter and `gs06` of the group counter,
/// each counter moved once by the whole block (one statement for both: one round trip on
/// PostgreSQL), wrapping after 999999999 as one number at a time would.
pub(super) fn take_in(
    conn: &crate::registry::db::Conn,
    partner: &str,
    isa13: usize,
    gs06: usize,
) -> Result<(Vec<u32>, Vec<u32>), crate::registry::db::Error> {
    take_many(conn, &[(partner, isa13, gs06)])?
        .pop()
        .ok_or(crate::registry::db::Error::NoRows)
}

/// [`take_in`] for each (partner, ISA13s, GS06s), in order, all sent together (one round
/// trip on PostgreSQL): the numbers one after the other would have given.
pub(super) fn take_many(
    conn: &crate::registry::db::Conn,
    wants: &[(&str, usize, usize)],
) -> Result<Vec<Numbers>, crate::registry::db::Error> {
    use crate::registry::db::Params;
    const ONE: &str = "INSERT INTO counters (partner, kind, value) VALUES (?1, ?3, ?4)
         ON CONFLICT (partner, kind) DO UPDATE SET value = CASE
             WHEN counters.value + excluded.value > ?2 THEN counters.value + excluded.value - ?2
             ELSE counters.value + excluded.value END
         RETURNING kind, value";
    const BOTH: &str =
        "INSERT INTO counters (partner, kind, value) VALUES (?1, ?3, ?4), (?1, ?5, ?6)
         ON CONFLICT (partner, kind) DO UPDATE SET value = CASE
             WHEN counters.value + excluded.value > ?2 THEN counters.value + excluded.value - ?2
             ELSE counters.value + excluded.value END
         RETURNING kind, value";
    let (interchange, group) = (Counter::Interchange.name(), Counter::Group.name());
    // Each statement, and for which want it takes how many of each.
    let mut statements = Vec::new();
    for (w, &(partner, isa13, gs06)) in wants.iter().enumerate() {
        let (mut want_a, mut want_b) = (isa13, gs06);
        while want_a > 0 || want_b > 0 {
            let (na, nb) = (want_a.min(BLOCK), want_b.min(BLOCK));
            let (sql, values) = match (na, nb) {
                (_, 0) => (
                    ONE,
                    params![partner, MAX_CONTROL_NUMBER, interchange, na].values(),
                ),
                (0, _) => (
                    ONE,
                    params![partner, MAX_CONTROL_NUMBER, group, nb].values(),
                ),
                _ => (
                    BOTH,
                    params![partner, MAX_CONTROL_NUMBER, interchange, na, group, nb].values(),
                ),
            };
            statements.push((sql, values, w, na, nb));
            want_a -= na;
            want_b -= nb;
        }
    }
    let runs: Vec<(&str, &[crate::registry::db::Value])> = statements
        .iter()
        .map(|(sql, values, ..)| (*sql, values.as_slice()))
        .collect();
    let rows: Vec<Vec<(String, i64)>> = conn.query_batch(&runs, read)?;
    let mut out: Vec<Numbers> = wants
        .iter()
        .map(|(_, a, b)| (Vec::with_capacity(*a), Vec::with_capacity(*b)))
        .collect();
    for ((.., w, na, nb), rows) in statements.iter().zip(rows) {
        let Some((a, b)) = out.get_mut(*w) else {
            continue;
        };
        for (kind, last) in rows {
            if kind == interchange {
                a.extend(block_ending(last, *na));
            } else if kind == group {
                b.extend(block_ending(last, *nb));
            }
        }
    }
    let complete = out
        .iter()
        .zip(wants)
        .all(|((a, b), (_, isa13, gs06))| a.len() == *isa13 && b.len() == *gs06);
    if !complete {
        return Err(crate::registry::db::Error::NoRows);
    }
    Ok(out)
}

/// The `n` numbers a counter handed out when it moved to `last`, oldest first.
fn block_ending(last: i64, n: usize) -> impl Iterator<Item = u32> {
    let max = i64::from(MAX_CONTROL_NUMBER);
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    (0..n).map(move |i| {
        let number = (last - n + i).rem_euclid(max) + 1;
        u32::try_from(number).unwrap_or(MAX_CONTROL_NUMBER)
    })
}

impl Registry {
    /// Takes the next number (`counter`), committed at once: `x12gate counter next`.
    pub fn next_control_number(
        &self,
        partner: &str,
        counter: Counter,
    ) -> Result<u32, RegistryError> {
        next_in(&self.conn, partner, counter).map_err(|e| self.sql(e))
    }

    /// The last number handed out, without taking one.
    pub fn current_control_number(
        &self,
        partner: &str,
        counter: Counter,
    ) -> Result<Option<u32>, RegistryError> {
        self.conn
            .query_row(
                "SELECT value FROM counters WHERE partner = ?1 AND kind = ?2",
                params![partner, counter.name()],
                read,
            )
            .optional()
            .map_err(|e| self.sql(e))
    }

    /// Every counter: partner, counter, last number handed out.
    pub fn control_numbers(&self) -> Result<Vec<(String, Counter, u32)>, RegistryError> {
        let rows: Vec<(String, String, u32)> = self.all(
            "SELECT partner, kind, value FROM counters ORDER BY partner, kind",
            [],
            read,
        )?;
        Ok(rows
            .into_iter()
            .filter_map(|(p, kind, n)| {
                [Counter::Interchange, Counter::Group]
                    .into_iter()
                    .find(|c| c.name() == kind)
                    .map(|c| (p, c, n))
            })
            .collect())
    }

    /// The first `head` bytes of the registry's own copies of the acknowledgments it recorded
    /// last for each partner ([`crate::sent`] reads their numbers). The last [`RECENT_ACKS`]
    /// interchanges seen of each partner hold its highest numbers: the older ones are not
    /// read, so that every start does not read every acknowledgment ever stored (gigabytes in
    /// a registry of millions).
    pub fn recorded_ack_heads(&self, head: usize) -> Result<Vec<Vec<u8>>, RegistryError> {
        let partners: Vec<String> =
            self.all("SELECT DISTINCT partner FROM interchanges", [], read)?;
        let mut heads = Vec::new();
        for partner in partners {
            heads.extend(self.all(
                &format!(
                    "SELECT substr(a.bytes, 1, {head}) FROM acks a
                     JOIN (SELECT key FROM interchanges WHERE partner = ?1
                           ORDER BY last_seen DESC LIMIT {RECENT_ACKS}) i ON i.key = a.key"
                ),
                params![partner],
                read::<Vec<u8>>,
            )?);
        }
        Ok(heads)
    }

    /// Moves each of `moves` (partner, counter, the number sent that it must pass) forward
    /// to that number, and records it in the history (`counters_repaired`), in one
    /// transaction: `--repair-counters`.
    pub fn repair_counters(
        &mut self,
        moves: &[(String, Counter, u32)],
    ) -> Result<(), RegistryError> {
        self.batch(|b| {
            for (partner, counter, to) in moves {
                let before =
                    b.tx.query_row(
                        "SELECT value FROM counters WHERE partner = ?1 AND kind = ?2",
                        params![partner, counter.name()],
                        read::<u32>,
                    )
                    .optional()
                    .map_err(|e| b.sql(e))?;
                // Only ever forward, around the wrap as `sent::ahead_of` counts: a node that
                // took numbers since the outbox was read may be past `to` already, and a
                // counter moved back would hand out numbers the partner has.
                let moved =
                    b.tx.execute(
                        "INSERT INTO counters (partner, kind, value) VALUES (?1, ?2, ?3)
                         ON CONFLICT (partner, kind) DO UPDATE SET value = excluded.value
                         WHERE ((excluded.value - counters.value) % ?4 + ?4) % ?4
                             BETWEEN 1 AND ?4 / 2 - 1",
                        params![
                            partner,
                            counter.name(),
                            *to,
                            i64::from(super::MAX_CONTROL_NUMBER)
                        ],
                    )
                    .map_err(|e| b.sql(e))?;
                if moved == 0 {
                    continue;
                }
                let reason = format!(
                    "our {} moved from {} to {to:09}, the highest found sent (--repair-counters)",
                    counter.name(),
                    before.map_or("nothing".to_string(), |n| format!("{n:09}"))
                );
                let detail = serde_json::json!({
                    "counter": counter.name(),
                    "from": before,
                    "to": to,
                    "reason": reason,
                })
                .to_string();
                b.record_note(
                    super::EventKind::CountersRepaired,
                    None,
                    Some(partner),
                    None,
                    &detail,
                )?;
            }
            Ok(())
        })
    }

    /// Sets a counter (for operators re-aligning with a partner, and for tests of the wrap).
    pub fn set_control_number(
        &self,
        partner: &str,
        counter: Counter,
        value: u32,
    ) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "INSERT INTO counters (partner, kind, value) VALUES (?1, ?2, ?3)
                 ON CONFLICT (partner, kind) DO UPDATE SET value = excluded.value",
                params![partner, counter.name(), value],
            )
            .map(drop)
            .map_err(|e| self.sql(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_partner_and_kind_and_wraps() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::create(
            &crate::registry::Database::from(&dir.path().join("r.db")),
            crate::registry::Identity {
                qualifier: "ZZ",
                id: "US",
            },
        )
        .unwrap();
        assert_eq!(
            r.next_control_number("ZZ:ACME", Counter::Interchange)
                .unwrap(),
            1
        );
        assert_eq!(
            r.next_control_number("ZZ:ACME", Counter::Interchange)
                .unwrap(),
            2
        );
        assert_eq!(r.next_control_number("ZZ:ACME", Counter::Group).unwrap(), 1);
        assert_eq!(
            r.next_control_number("ZZ:OTHER", Counter::Interchange)
                .unwrap(),
            1
        );
        r.set_control_number("ZZ:ACME", Counter::Interchange, MAX_CONTROL_NUMBER - 1)
            .unwrap();
        assert_eq!(
            r.next_control_number("ZZ:ACME", Counter::Interchange)
                .unwrap(),
            MAX_CONTROL_NUMBER
        );
        assert_eq!(
            r.next_control_number("ZZ:ACME", Counter::Interchange)
                .unwrap(),
            1
        );
        // Reopening keeps the values.
        drop(r);
        let r = Registry::create(
            &crate::registry::Database::from(&dir.path().join("r.db")),
            crate::registry::Identity {
                qualifier: "ZZ",
                id: "US",
            },
        )
        .unwrap();
        assert_eq!(
            r.current_control_number("ZZ:ACME", Counter::Interchange)
                .unwrap(),
            Some(1)
        );
    }

    crate::registry::tests::on_both! {
        fn repairing_moves_counters_forward_and_records_it() {
            let mut r = Registry::in_memory(crate::registry::Identity {
                qualifier: "ZZ",
                id: "US",
            });
            r.set_control_number("ZZ:ACME", Counter::Interchange, 2).unwrap();
            assert!(r.recorded_ack_heads(4096).unwrap().is_empty());
            r.repair_counters(&[
                ("ZZ:ACME".into(), Counter::Interchange, 12),
                ("ZZ:ACME".into(), Counter::Group, 12),
            ])
            .unwrap();
            assert_eq!(
                r.control_numbers().unwrap(),
                [
                    ("ZZ:ACME".to_string(), Counter::Group, 12),
                    ("ZZ:ACME".to_string(), Counter::Interchange, 12),
                ]
            );
            assert_eq!(r.next_control_number("ZZ:ACME", Counter::Interchange).unwrap(), 13);
            let events = r
                .history(&crate::registry::EventFilter {
                    partner: Some("ZZ:ACME".into()),
                    ..Default::default()
                })
                .unwrap();
            let repaired: Vec<_> = events
                .iter()
                .filter(|e| e.event == crate::registry::EventKind::CountersRepaired)
                .collect();
            assert_eq!(repaired.len(), 2, "{events:?}");
            assert!(repaired[0].detail.contains("from 000000002 to 000000012"), "{repaired:?}");
            // A node took numbers past what the repair read: never moved back, nothing
            // recorded; past the wrap, forward is forward.
            r.set_control_number("ZZ:ACME", Counter::Interchange, 20).unwrap();
            r.set_control_number("ZZ:ACME", Counter::Group, 999_999_990).unwrap();
            r.repair_counters(&[
                ("ZZ:ACME".into(), Counter::Interchange, 15),
                ("ZZ:ACME".into(), Counter::Group, 3),
            ])
            .unwrap();
            assert_eq!(
                r.control_numbers().unwrap(),
                [
                    ("ZZ:ACME".to_string(), Counter::Group, 3),
                    ("ZZ:ACME".to_string(), Counter::Interchange, 20),
                ]
            );
            let events = r.history(&crate::registry::EventFilter::default()).unwrap();
            let repaired = events
                .iter()
                .filter(|e| e.event == crate::registry::EventKind::CountersRepaired)
                .count();
            assert_eq!(repaired, 3, "{events:?}");
        }
    }
}
