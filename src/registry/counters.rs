//! Outbound control numbers (ISA13 and GS06 of our acknowledgments), per partner.
//!
//! Numbers run from 1 to 999999999 and wrap to 1, as X12 allows once a trading partner
//! agreement's window has passed.

use crate::registry::db::{params, OptionalExtension};

use super::{Registry, RegistryError};

pub use crate::x12::MAX_CONTROL_NUMBER;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counter {
    /// ISA13 of our interchanges.
    Interchange,
    /// GS06 of our functional groups.
    Group,
}

impl Counter {
    fn name(self) -> &'static str {
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
    conn.prepare_cached(
        "INSERT INTO counters (partner, kind, value) VALUES (?1, ?2, 1)
         ON CONFLICT (partner, kind) DO UPDATE
         SET value = CASE WHEN counters.value >= ?3 THEN 1 ELSE counters.value + 1 END
         RETURNING value",
    )?
    .query_row(params![partner, counter.name(), MAX_CONTROL_NUMBER], |r| {
        r.get(0)
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
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))
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
            super::super::Identity {
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
            super::super::Identity {
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
}
