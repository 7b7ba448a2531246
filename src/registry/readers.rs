//! The read-only registry connections that the web page and `/metrics` share, made once when
//! the server starts: a page view or a scrape borrows one and gives it back, instead of
//! opening a registry of its own (on PostgreSQL a runtime, a TCP connection and a TLS
//! handshake each time).
//!
//! Each connection cannot write, as [`Registry::open_read_only`] opens it (SQLite read-only;
//! PostgreSQL with `default_transaction_read_only`). Reads outside a transaction see the
//! last committed state on both backends, so a kept connection reads what a new one would:
//! PostgreSQL's reopens itself after a lost session ([`super::db`]), and an SQLite file
//! replaced under the same name (a restore) is noticed by its identity and opened anew. A
//! registry that does not exist yet is looked for again at every borrow, as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use super::{Database, Registry, RegistryError};

/// Connections kept between borrows: the page views and scrapes that run at once (axum
/// serves them on blocking threads) beyond this open one of their own and close it after.
const KEPT: usize = 4;

/// The shared read-only connections to one registry.
pub struct Readers {
    db: Database,
    idle: Mutex<Vec<Kept>>,
    opened: AtomicUsize,
}

/// A connection between borrows, with the SQLite file it was opened on.
struct Kept {
    registry: Registry,
    file: Option<FileId>,
}

/// What tells one file from another put in its place: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId(u64, u64);

impl FileId {
    #[cfg(unix)]
    fn of(path: &std::path::Path) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path)
            .ok()
            .map(|m| FileId(m.dev(), m.ino()))
    }

    #[cfg(not(unix))]
    fn of(path: &std::path::Path) -> Option<FileId> {
        std::fs::metadata(path).ok().map(|_| FileId(0, 0))
    }
}

/// A borrowed connection, given back when dropped.
pub struct Reader<'a> {
    readers: &'a Readers,
    kept: Option<Kept>,
}

impl std::ops::Deref for Reader<'_> {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        // invariant: `kept` is taken only in `drop`.
        match &self.kept {
            Some(k) => &k.registry,
            None => unreachable!("a reader is used after it was given back"),
        }
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if let Some(kept) = self.kept.take() {
            let mut idle = self.readers.lock();
            if idle.len() < KEPT {
                idle.push(kept);
            }
        }
    }
}

impl Readers {
    /// No connection is opened yet: the first borrow opens one.
    pub fn new(db: Database) -> Readers {
        Readers {
            db,
            idle: Mutex::new(Vec::new()),
            opened: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        // A borrower that panicked left the list whole: it only pushes and pops.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A read-only connection to the registry, kept or new; `None` when there is no
    /// registry yet.
    pub fn get(&self) -> Result<Option<Reader<'_>>, RegistryError> {
        let file = self.db.file().map(FileId::of);
        loop {
            let Some(kept) = self.lock().pop() else { break };
            // An SQLite file gone or replaced since: its connection reads the old one.
            if file.is_none_or(|now| now.is_some() && now == kept.file) {
                return Ok(Some(self.reader(kept)));
            }
        }
        let Some(registry) = Registry::open_read_only(&self.db)? else {
            return Ok(None);
        };
        self.opened.fetch_add(1, Ordering::Relaxed);
        let file = self.db.file().and_then(FileId::of);
        Ok(Some(self.reader(Kept { registry, file })))
    }

    fn reader(&self, kept: Kept) -> Reader<'_> {
        Reader {
            readers: self,
            kept: Some(kept),
        }
    }

    /// How many connections were opened since the start.
    pub fn opened(&self) -> usize {
        self.opened.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Identity;

    const WHO: Identity<'static> = Identity {
        qualifier: "ZZ",
        id: "X12GATE",
    };

    fn installation(readers: &Readers) -> String {
        readers.get().unwrap().unwrap().installation().unwrap()
    }

    #[test]
    fn a_connection_is_kept_until_its_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x12gate.db");
        let readers = Readers::new(Database::Sqlite(path.clone()));
        // No registry yet: nothing is opened, and it is looked for again next time.
        assert!(readers.get().unwrap().is_none());
        let first = Registry::create(&Database::Sqlite(path.clone()), WHO)
            .unwrap()
            .installation()
            .unwrap();
        assert_eq!(installation(&readers), first);
        assert_eq!(installation(&readers), first);
        assert_eq!(readers.opened(), 1, "the second borrow reused the first's");
        // Two at once: a second connection, and both kept.
        {
            let a = readers.get().unwrap().unwrap();
            let b = readers.get().unwrap().unwrap();
            assert_eq!(a.installation().unwrap(), b.installation().unwrap());
        }
        assert_eq!(readers.opened(), 2);
        installation(&readers);
        installation(&readers);
        assert_eq!(readers.opened(), 2);
        // A restore puts another file in its place: read, not the old one.
        let other = dir.path().join("other.db");
        let second = Registry::create(&Database::Sqlite(other.clone()), WHO)
            .unwrap()
            .installation()
            .unwrap();
        assert_ne!(first, second);
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(installation(&readers), second);
        // Gone: none, as before there was one.
        std::fs::remove_file(&path).unwrap();
        assert!(readers.get().unwrap().is_none());
    }
}
