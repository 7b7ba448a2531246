//! The watcher's work folder: how a file leaves the inbox before it is read, and who owns it
//! until it is placed in `archive/` or `rejected/`.
//!
//! A ready inbox file is claimed by one `rename` into `work/<owner>/` (same file system, so
//! the rename is atomic): of several watchers, on one host or several sharing the folders,
//! exactly one wins, and what it reads, archives or rejects is exactly the file it renamed. A
//! file that later arrives under the same name is a new file in the inbox.
//!
//! In the work folder a file is named `<ticket>~<name>`. The ticket (`YYYYMMDD-<tag>-<seq>`)
//! is unique to this intake of the file and stays with it if another watcher adopts it; its
//! date is the archive day, so a placement can always be found again (see
//! [`crate::inbound::placed`]).
//!
//! Each watcher owns one folder, named by its [`Owner::file_id`], and touches `.alive` in it
//! while it runs. A folder whose owner is dead (same host, see [`crate::owner`]) is adopted at
//! once: its files are renamed into the adopter's folder, one by one, so each goes to exactly
//! one adopter. A folder of another host is adopted once its `.alive` is older than the lease.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::config::Gateway;
use crate::owner::{self, Liveness, Owner};

const ALIVE: &str = ".alive";

/// A file taken from the inbox, now in a work folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// Where it is now.
    pub path: PathBuf,
    /// The name it arrived under in the inbox, its bytes as they were (UTF-8 or not).
    pub name: std::ffi::OsString,
    /// Its modification time: the order of arrival.
    pub arrived: SystemTime,
}

impl Taken {
    fn from_path(path: PathBuf) -> Option<Taken> {
        use std::os::unix::ffi::OsStrExt;
        let file = path.file_name()?.as_bytes();
        let at = file.iter().position(|b| *b == b'~')?;
        std::str::from_utf8(file.get(..at)?).ok()?;
        let name = std::ffi::OsStr::from_bytes(file.get(at + 1..)?).to_os_string();
        let arrived = fs::symlink_metadata(&path)
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        Some(Taken {
            name,
            path,
            arrived,
        })
    }

    /// Arrival order: modification time, then name, then the order of taking (the file
    /// system's clock is coarse, so two files often share a modification time).
    pub fn arrival_order(&self, other: &Taken) -> std::cmp::Ordering {
        (self.arrived, &self.name, self.ticket()).cmp(&(other.arrived, &other.name, other.ticket()))
    }

    /// This intake's ticket: `YYYYMMDD-<tag>-<seq>`.
    pub fn ticket(&self) -> &str {
        use std::os::unix::ffi::OsStrExt;
        let file = self
            .path
            .file_name()
            .map(OsStrExt::as_bytes)
            .unwrap_or_default();
        file.iter()
            .position(|b| *b == b'~')
            .and_then(|at| std::str::from_utf8(file.get(..at)?).ok())
            .unwrap_or("")
    }

    /// The day the file was taken (`YYYY/MM/DD`), where the archive keeps it.
    pub fn day(&self) -> String {
        let t = self.ticket();
        match (t.get(0..4), t.get(4..6), t.get(6..8)) {
            (Some(y), Some(m), Some(d)) => format!("{y}/{m}/{d}"),
            _ => chrono::Local::now().format("%Y/%m/%d").to_string(),
        }
    }
}

/// This process's work folder.
#[derive(Debug)]
pub struct Intake {
    root: PathBuf,
    mine: PathBuf,
    tag: String,
    seq: u64,
    lease: Duration,
}

/// Why the gateway's folders cannot serve an intake.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntakeError {
    #[error("{path}: {cause}")]
    Io { path: String, cause: io::Error },
    #[error(
        "{a} and {b} are on different file systems: the inbox, the work folder, archive/ and \
         rejected/ must share one, so that a file moves between them by rename and link"
    )]
    FileSystems { a: String, b: String },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> IntakeError + '_ {
    move |cause| IntakeError::Io {
        path: path.display().to_string(),
        cause,
    }
}

impl Intake {
    /// Creates this process's work folder, after checking that the folders files move
    /// between are on one file system.
    pub fn open(g: &Gateway) -> Result<Intake, IntakeError> {
        use std::os::unix::fs::MetadataExt;
        let me = Owner::current();
        let mine = g.work.join(me.file_id());
        let mut device = None;
        for dir in [&g.inbox, &mine, &g.archive, &g.rejected] {
            fs::create_dir_all(dir).map_err(io_at(dir))?;
            let dev = fs::metadata(dir).map_err(io_at(dir))?.dev();
            match device {
                None => device = Some((dev, dir)),
                Some((d, first)) if d != dev => {
                    return Err(IntakeError::FileSystems {
                        a: first.display().to_string(),
                        b: dir.display().to_string(),
                    })
                }
                Some(_) => {}
            }
        }
        let intake = Intake {
            root: g.work.clone(),
            tag: blake3::hash(me.id().as_bytes()).to_hex()[..8].to_string(),
            mine,
            seq: 0,
            lease: Duration::from_secs(g.lease_seconds),
        };
        intake.heartbeat();
        Ok(intake)
    }

    /// This process's folder.
    pub fn folder(&self) -> &Path {
        &self.mine
    }

    /// Tells other watchers that this one is alive.
    pub fn heartbeat(&self) {
        let _ = fs::write(self.mine.join(ALIVE), chrono::Utc::now().to_rfc3339());
    }

    /// Claims `file` (a file directly in the inbox) by renaming it into our folder; `None`
    /// when it is gone (another watcher took it, or it was removed).
    pub fn take(&mut self, file: &Path) -> io::Result<Option<Taken>> {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let name = file.file_name().map(OsStrExt::as_bytes).unwrap_or_default();
        self.seq += 1;
        let ticket = format!(
            "{}-{}-{:010}",
            chrono::Local::now().format("%Y%m%d"),
            self.tag,
            self.seq
        );
        // A name at the file system's limit (255 bytes) leaves room for the ticket by losing
        // its middle: at most 90 bytes from each end, cut at character boundaries (of a
        // UTF-8 name; any other name's bytes are kept as they are, cut at bytes).
        let kept: Vec<u8> = if name.len() > 200 {
            let boundary =
                |at: usize| std::str::from_utf8(name).map_or(true, |s| s.is_char_boundary(at));
            let mut head = 90;
            while !boundary(head) {
                head -= 1;
            }
            let mut tail = name.len() - 90;
            while !boundary(tail) {
                tail += 1;
            }
            [&name[..head], b"...", &name[tail..]].concat()
        } else {
            name.to_vec()
        };
        let target = self.mine.join(std::ffi::OsString::from_vec(
            [ticket.as_bytes(), b"~", &kept].concat(),
        ));
        match fs::rename(file, &target) {
            Ok(()) => Ok(Taken::from_path(target)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Our files, in arrival order.
    fn listed(&self) -> Vec<Taken> {
        let mut found: Vec<Taken> = fs::read_dir(&self.mine)
            .map(|d| {
                d.flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .filter_map(|e| Taken::from_path(e.path()))
                    .collect()
            })
            .unwrap_or_default();
        found.sort_by(Taken::arrival_order);
        found
    }

    /// Adopts the files of dead owners' folders into ours; returns them in arrival order.
    pub fn adopt(&self) -> Vec<Taken> {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut adopted = Vec::new();
        for entry in entries.flatten() {
            let dir = entry.path();
            if dir == self.mine || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let id = entry.file_name().to_string_lossy().into_owned();
            let gone = match owner::liveness(&id) {
                Liveness::Dead => true,
                Liveness::Alive => false,
                Liveness::Unknown => {
                    let beat = fs::metadata(dir.join(ALIVE))
                        .or_else(|_| fs::metadata(&dir))
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| SystemTime::now().duration_since(t).ok());
                    beat.is_some_and(|age| age > self.lease)
                }
            };
            if !gone {
                continue;
            }
            let Ok(files) = fs::read_dir(&dir) else {
                continue;
            };
            let before = adopted.len();
            for f in files.flatten() {
                let name = f.file_name();
                if name.to_string_lossy().starts_with('.') {
                    continue;
                }
                // Each file goes to exactly one adopter; the losers see it gone.
                let target = self.mine.join(&name);
                if fs::rename(f.path(), &target).is_ok() {
                    adopted.extend(Taken::from_path(target));
                }
            }
            if adopted.len() > before {
                tracing::warn!(
                    from = %owner::describe(&id),
                    files = adopted.len() - before,
                    "adopted the unfinished files of a watcher that is gone"
                );
            }
            let _ = fs::remove_file(dir.join(ALIVE));
            let _ = fs::remove_dir(&dir);
        }
        adopted.sort_by(Taken::arrival_order);
        adopted
    }

    /// How many files are still in our folder.
    pub fn left(&self) -> usize {
        self.listed().len()
    }

    /// Removes our folder when nothing is left in it (a watcher stopping cleanly).
    pub fn close(self) {
        if self.left() == 0 {
            let _ = fs::remove_file(self.mine.join(ALIVE));
            let _ = fs::remove_dir(&self.mine);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway(root: &Path) -> Gateway {
        let text = format!(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X\"\ninbox = \"{0}/in\"\nwork = \"{0}/work\"\narchive = \"{0}/archive\"\nrejected = \"{0}/rejected\"\n",
            root.display()
        );
        crate::config::Config::from_str(&text, &root.join("p.toml"))
            .unwrap()
            .gateway
    }

    #[test]
    fn a_file_is_taken_once_and_a_new_one_under_its_name_is_new() {
        let dir = tempfile::tempdir().unwrap();
        let g = gateway(dir.path());
        let mut intake = Intake::open(&g).unwrap();
        let file = g.inbox.join("orders.x12");
        fs::write(&file, b"A").unwrap();
        let a = intake.take(&file).unwrap().unwrap();
        assert_eq!(a.name, "orders.x12");
        assert_eq!(intake.take(&file).unwrap(), None, "gone: taken already");
        fs::write(&file, b"B").unwrap();
        let b = intake.take(&file).unwrap().unwrap();
        assert_ne!(a.ticket(), b.ticket());
        assert_eq!(fs::read(&a.path).unwrap(), b"A");
        assert_eq!(fs::read(&b.path).unwrap(), b"B");
        assert_eq!(a.day(), chrono::Local::now().format("%Y/%m/%d").to_string());
        assert_eq!(intake.listed(), vec![a, b]);
    }

    #[test]
    fn a_name_that_is_not_utf8_keeps_its_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let g = gateway(dir.path());
        let mut intake = Intake::open(&g).unwrap();
        for name in [
            b"po-\xff\xfe.x12".to_vec(),
            [&[0xe9u8; 230][..], b".x12"].concat(),
        ] {
            let name = std::ffi::OsStr::from_bytes(&name);
            fs::write(g.inbox.join(name), b"A").unwrap();
            let t = intake.take(&g.inbox.join(name)).unwrap().unwrap();
            assert!(t.path.file_name().unwrap().len() <= 255);
            let kept = t.name.as_bytes();
            if name.len() <= 200 {
                assert_eq!(t.name, name);
            } else {
                assert_eq!(kept.len(), 183, "{kept:?}");
                assert!(kept.starts_with(&[0xe9; 90]) && kept.ends_with(b"\xe9.x12"));
            }
            assert_eq!(
                intake.listed().last().map(|l| l.name.clone()),
                Some(t.name.clone())
            );
            assert!(t.ticket().len() > 8, "{}", t.ticket());
        }
    }

    #[test]
    fn a_long_name_keeps_its_ends_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let g = gateway(dir.path());
        let mut intake = Intake::open(&g).unwrap();
        let long = format!("{}.x12", "é".repeat(120));
        assert!(long.len() > 200 && long.len() < 255);
        let file = g.inbox.join(&long);
        fs::write(&file, b"A").unwrap();
        let t = intake.take(&file).unwrap().unwrap();
        assert!(t.path.file_name().unwrap().len() <= 255);
        assert!(
            t.name
                .to_str()
                .is_some_and(|n| n.starts_with("éé") && n.ends_with("é.x12")),
            "{:?}",
            t.name
        );
    }

    #[test]
    fn a_dead_owners_files_are_adopted_and_a_live_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let g = gateway(dir.path());
        let intake = Intake::open(&g).unwrap();
        let me = Owner::current();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let dead = Owner {
            pid,
            start: 1,
            ..me.clone()
        };
        let other_host = Owner {
            host: "elsewhere".into(),
            ..me.clone()
        };
        for (who, file) in [
            (&dead, "20260101-aa-0000000001~a.x12"),
            (&other_host, "20260101-bb-0000000001~b.x12"),
        ] {
            let folder = g.work.join(who.file_id());
            fs::create_dir_all(&folder).unwrap();
            fs::write(folder.join(file), file).unwrap();
            fs::write(folder.join(ALIVE), b"now").unwrap();
        }
        let got: Vec<std::ffi::OsString> = intake.adopt().into_iter().map(|t| t.name).collect();
        assert_eq!(got, ["a.x12"], "the other host's heartbeat is fresh");
        assert!(
            !g.work.join(dead.file_id()).exists(),
            "the dead folder is removed"
        );
        assert!(g.work.join(other_host.file_id()).exists());
        // Once the other host's heartbeat is older than the lease, its files are adopted.
        let old = SystemTime::now() - Duration::from_secs(g.lease_seconds + 60);
        fs::File::options()
            .write(true)
            .open(g.work.join(other_host.file_id()).join(ALIVE))
            .and_then(|f| f.set_modified(old))
            .unwrap();
        let got: Vec<std::ffi::OsString> = intake.adopt().into_iter().map(|t| t.name).collect();
        assert_eq!(got, ["b.x12"]);
        assert_eq!(intake.left(), 2);
    }
}
