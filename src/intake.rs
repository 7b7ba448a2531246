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
//! A placement is recognised by the inode (a link in `archive/` or `rejected/`), so a work
//! file must share its inode with nothing but our own placement: an inbox file with other
//! links (hard-linked back from `rejected/` or the archive) is taken as `<ticket>=<name>` and
//! copied to `<ticket>~<name>`, a file of its own, before anything reads it; a copy cut short
//! is finished by the next [`Intake::adopt`].
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
/// What separates the ticket from the name of a file taken with other links, until it is
/// copied (see the module's comment).
const SHARED: u8 = b'=';
/// The beginning of a copy's temporary name in the work folder.
const COPY: &str = ".copy-";

/// The ticket and the name of a work file named `<ticket><separator><name>`: a ticket is
/// made of ASCII letters, digits and `-` (so a name holding `~` or `=` is not misread).
fn split_work_name(file: &[u8], separator: u8) -> Option<(&str, &[u8])> {
    let at = file
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'-'))?;
    if at == 0 || file.get(at) != Some(&separator) {
        return None;
    }
    Some((
        std::str::from_utf8(file.get(..at)?).ok()?,
        file.get(at + 1..)?,
    ))
}

/// Makes the work file `shared` (`<ticket>=<name>`, its inode linked elsewhere too) a file
/// of its own, `<ticket>~<name>`: copied under a temporary name, fsynced and renamed, then
/// `shared` removed. Where `<ticket>~<name>` exists already (a copy finished before a
/// crash), `shared` is only removed.
fn unshare(shared: &Path) -> io::Result<PathBuf> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let dir = shared.parent().unwrap_or(Path::new("."));
    let file = shared
        .file_name()
        .map(OsStrExt::as_bytes)
        .unwrap_or_default();
    let Some((ticket, name)) = split_work_name(file, SHARED) else {
        return Err(io::Error::other(format!(
            "{}: not a work file",
            shared.display()
        )));
    };
    let own = dir.join(std::ffi::OsString::from_vec(
        [ticket.as_bytes(), b"~", name].concat(),
    ));
    if fs::symlink_metadata(&own).is_err() {
        let tmp = dir.join(format!("{COPY}{ticket}"));
        let copied = fs::copy(shared, &tmp).and_then(|_| {
            let f = fs::File::options().write(true).open(&tmp)?;
            // The arrival order is the modification time.
            f.set_modified(fs::symlink_metadata(shared)?.modified()?)?;
            f.sync_all()?;
            fs::rename(&tmp, &own)
        });
        if copied.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        copied?;
    }
    fs::remove_file(shared)?;
    Ok(own)
}

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
        let (_, name) = split_work_name(path.file_name()?.as_bytes(), b'~')?;
        let name = std::ffi::OsStr::from_bytes(name).to_os_string();
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
        split_work_name(file, b'~').map_or("", |(ticket, _)| ticket)
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
        use std::os::unix::fs::MetadataExt;
        let shared = fs::symlink_metadata(file).is_ok_and(|m| m.nlink() > 1);
        let separator = if shared { SHARED } else { b'~' };
        let target = self.mine.join(std::ffi::OsString::from_vec(
            [ticket.as_bytes(), &[separator], &kept].concat(),
        ));
        match fs::rename(file, &target) {
            // A copy that fails here is finished by `adopt`.
            Ok(()) if shared => unshare(&target).map(Taken::from_path),
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
                        .and_then(|t| crate::time::now().duration_since(t).ok());
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
                if name.to_string_lossy().starts_with(COPY) {
                    let _ = fs::remove_file(f.path());
                }
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
        // Files taken with other links whose copy was cut short (here or by a dead owner).
        for path in self.shared() {
            match unshare(&path) {
                Ok(own) => adopted.extend(Taken::from_path(own)),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "could not copy a file taken with other links; retried")
                }
            }
        }
        adopted.sort_by(Taken::arrival_order);
        adopted.dedup_by(|a, b| a.path == b.path);
        adopted
    }

    /// Our files taken with other links and not copied yet.
    fn shared(&self) -> Vec<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let Ok(entries) = fs::read_dir(&self.mine) else {
            return Vec::new();
        };
        entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| split_work_name(n.as_bytes(), SHARED).is_some())
            })
            .collect()
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

    /// A file with other links is taken as a file of its own (a copy), and a copy cut short
    /// (by a crash, before or after its rename) is finished by the next adoption, once.
    #[test]
    fn a_file_with_other_links_is_taken_as_a_copy_of_its_own() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let g = gateway(dir.path());
        let mut intake = Intake::open(&g).unwrap();
        let elsewhere = dir.path().join("archived.x12");
        fs::write(&elsewhere, b"A").unwrap();
        fs::hard_link(&elsewhere, g.inbox.join("a.x12")).unwrap();
        let t = intake.take(&g.inbox.join("a.x12")).unwrap().unwrap();
        assert_eq!(t.name, "a.x12");
        assert_eq!(fs::read(&t.path).unwrap(), b"A");
        assert_eq!(fs::metadata(&t.path).unwrap().nlink(), 1);
        assert_eq!(fs::metadata(&elsewhere).unwrap().nlink(), 1);
        assert_eq!(intake.listed(), vec![t.clone()]);
        fs::remove_file(&t.path).unwrap();

        // Cut short before the copy, and after it (both names there).
        let shared = intake.folder().join("20260101-aa-0000000001=b~1.x12");
        fs::hard_link(&elsewhere, &shared).unwrap();
        let both = intake.folder().join("20260101-aa-0000000002=c.x12");
        fs::hard_link(&elsewhere, &both).unwrap();
        fs::write(intake.folder().join("20260101-aa-0000000002~c.x12"), b"A").unwrap();
        let got: Vec<(String, String)> = intake
            .adopt()
            .into_iter()
            .map(|t| {
                (
                    t.ticket().to_string(),
                    t.name.to_string_lossy().into_owned(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("20260101-aa-0000000001".to_string(), "b~1.x12".to_string()),
                ("20260101-aa-0000000002".to_string(), "c.x12".to_string())
            ]
        );
        assert!(!shared.exists() && !both.exists());
        assert_eq!(fs::metadata(&elsewhere).unwrap().nlink(), 1);
        assert_eq!(intake.left(), 2);
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
