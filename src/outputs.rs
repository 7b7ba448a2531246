//! Writing outputs where downstream systems read them: safely named, atomically, durably.
//!
//! A file appears under its final name only when complete: it is written to a hidden
//! `.x12gate-tmp` folder beside its destination (same file system, so the rename is atomic),
//! fsynced, renamed, and the folder fsynced so the rename survives power loss. Nothing
//! downstream reads `.x12gate-tmp`, and leftovers of a crash are removed the next time a
//! process starts writing there.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const TMP_DIR: &str = ".x12gate-tmp";

/// A file name made from a registry key: letters, digits and `-` kept, the key's `:`
/// separators written as `_`. When anything else was replaced by `_` (a `.`, `/` or `..`
/// in an ISA06, spaces, control characters), or the name was cut at 120 characters, a
/// short hash of the original key is appended, so that two keys never share a name.
pub fn safe_name(key: &str) -> String {
    let cleaned: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let plain = key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':');
    let mut name: String = cleaned.chars().take(120).collect();
    if !plain || cleaned.len() > 120 {
        name.push('-');
        name.push_str(&blake3::hash(key.as_bytes()).to_hex()[..12]);
    }
    name
}

/// A temporary name for `name` in `tmp_dir`, unique within this process and ending in the
/// writer's id (after the last `.`), so that [`clean_stale`] can tell a dead writer's
/// leftovers from a live writer's work.
fn temporary(tmp_dir: &Path, name: impl AsRef<std::ffi::OsStr>, owner: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp = name.as_ref().to_os_string();
    tmp.push(format!(".{n}.{}", safe_name(owner)));
    tmp_dir.join(tmp)
}

/// `done`, the outcome of work on the temporary `tmp`; on failure the temporary is removed,
/// so a full disk does not leave one behind per attempt until the next start.
fn or_removed<T>(tmp: &Path, done: std::io::Result<T>) -> std::io::Result<T> {
    if done.is_err() {
        let _ = fs::remove_file(tmp);
    }
    done
}

/// Writes `bytes` to the new file `tmp` and fsyncs it.
fn write_synced(tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(tmp)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Writes `bytes` to `dir/name` atomically and durably; returns the absolute path.
pub fn write_atomic(
    dir: &Path,
    name: impl AsRef<std::ffi::OsStr>,
    bytes: &[u8],
    owner: &str,
) -> std::io::Result<PathBuf> {
    let name = name.as_ref();
    let tmp_dir = dir.join(TMP_DIR);
    fs::create_dir_all(&tmp_dir)?;
    let final_path = dir.join(name);
    let tmp_path = temporary(&tmp_dir, name, owner);
    or_removed(
        &tmp_path,
        write_synced(&tmp_path, bytes).and_then(|()| fs::rename(&tmp_path, &final_path)),
    )?;
    File::open(dir)?.sync_all()?;
    Ok(std::path::absolute(&final_path).unwrap_or(final_path))
}

/// Writes `bytes` to `dir/name` durably only if that name is free: `Ok(false)` when it is
/// taken. The file appears complete (written and fsynced under a temporary name, then
/// hard-linked, which fails on an existing name) and the folder is fsynced before returning.
pub fn write_new(
    dir: &Path,
    name: impl AsRef<std::ffi::OsStr>,
    bytes: &[u8],
    owner: &str,
) -> std::io::Result<bool> {
    let name = name.as_ref();
    let tmp_dir = dir.join(TMP_DIR);
    fs::create_dir_all(&tmp_dir)?;
    let tmp_path = temporary(&tmp_dir, name, owner);
    or_removed(&tmp_path, write_synced(&tmp_path, bytes))?;
    let linked = fs::hard_link(&tmp_path, dir.join(name));
    fs::remove_file(&tmp_path)?;
    match linked {
        Ok(()) => {
            File::open(dir)?.sync_all()?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// What writes one file's content (bytes made already, or a translation written as it is
/// made).
pub type Content<'a> = dyn Fn(&mut dyn Write) -> std::io::Result<()> + Sync + 'a;

/// A write of [`write_many`] that failed, naming the file (or folder) it failed on.
#[derive(Debug, thiserror::Error)]
#[error("{}: {cause}", path.display())]
pub struct WriteError {
    pub path: PathBuf,
    pub cause: std::io::Error,
}

/// Writes many files durably in one round: several threads each write their share to
/// temporary names, fsync them (the file system then serves the fsyncs together) and rename
/// them into place, each rename after its own file's fsync; then each folder is fsynced
/// once. Returns the absolute paths, in order. A temporary whose write fails is removed.
pub fn write_many(
    files: &[(&Path, &str, &Content<'_>)],
    owner: &str,
) -> Result<Vec<PathBuf>, WriteError> {
    let at = |path: &Path| {
        let path = path.to_path_buf();
        move |cause| WriteError { path, cause }
    };
    let mut dirs: Vec<&Path> = Vec::new();
    for (dir, ..) in files {
        if !dirs.contains(dir) {
            let tmp_dir = dir.join(TMP_DIR);
            fs::create_dir_all(&tmp_dir).map_err(at(&tmp_dir))?;
            dirs.push(dir);
        }
    }
    let threads = files.len().clamp(1, 32);
    let chunk = files.len().div_ceil(threads).max(1);
    let write_one =
        |(dir, name, content): &(&Path, &str, &Content<'_>)| -> Result<PathBuf, WriteError> {
            let tmp = temporary(&dir.join(TMP_DIR), name, owner);
            let final_path = dir.join(name);
            let written = File::create(&tmp).and_then(|f| {
                let mut f = std::io::BufWriter::with_capacity(1 << 16, f);
                content(&mut f)?;
                f.into_inner()
                    .map_err(std::io::IntoInnerError::into_error)?
                    .sync_all()?;
                fs::rename(&tmp, &final_path)
            });
            or_removed(&tmp, written).map_err(at(&final_path))?;
            Ok(std::path::absolute(&final_path).unwrap_or(final_path))
        };
    let done = std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|c| scope.spawn(move || c.iter().map(write_one).collect::<Result<Vec<_>, _>>()))
            .collect();
        let mut done = Vec::with_capacity(files.len());
        for h in handles {
            done.extend(h.join().unwrap_or_else(|_| {
                Err(WriteError {
                    path: files
                        .first()
                        .map_or_else(PathBuf::new, |f| f.0.to_path_buf()),
                    cause: std::io::Error::other("output writer thread panicked"),
                })
            })?);
        }
        Ok::<_, WriteError>(done)
    })?;
    for dir in dirs {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(at(dir))?;
    }
    Ok(done)
}

/// Removes temporary files left by a crash from `dir`'s temporary folder: those of an owner
/// that is dead (their names end in the owner's id, see [`crate::owner`]) at once, any other
/// once older than `age`.
pub fn clean_stale(dir: &Path, age: Duration) {
    let Ok(entries) = fs::read_dir(dir.join(TMP_DIR)) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let dead = name
            .rsplit_once('.')
            .is_some_and(|(_, owner)| crate::owner::is_dead(owner));
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|d| d >= age);
        if dead || old {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// [`clean_stale`] on every folder a run writes into (`out/`, `out/test/`, `outbox/`,
/// `rejected/`), before
/// it writes there: a temporary file is stale once older than a lease (`lease_seconds`), when
/// the claim it was written for may have been taken over already.
pub fn clean_stale_outputs(gateway: &crate::config::Gateway) {
    let lease = Duration::from_secs(gateway.lease_seconds);
    for dir in [
        &gateway.out,
        &gateway.test_out,
        &gateway.outbox,
        &gateway.rejected,
    ] {
        clean_stale(dir, lease);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_never_escape_and_never_collide() {
        assert_eq!(safe_name("ZZ:ACME:000000101"), "ZZ_ACME_000000101");
        let a = safe_name("ZZ:../etc/passwd:000000001");
        assert!(!a.contains('/') && !a.contains(".."), "{a}");
        assert_ne!(safe_name("ZZ:A/B:1"), safe_name("ZZ:A_B:1"));
        assert_ne!(safe_name("ZZ:A B:1"), safe_name("ZZ:A\u{7}B:1"));
        let long = safe_name(&"X".repeat(500));
        assert!(long.len() < 140);
    }

    /// What sits in `dir`'s temporary folder.
    fn temporaries(dir: &Path) -> Vec<std::ffi::OsString> {
        fs::read_dir(dir.join(TMP_DIR))
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default()
    }

    /// A write that fails (its content, or its rename onto a name a folder holds) removes
    /// its temporary and names the file; the other files of the round are written.
    #[test]
    fn a_failed_write_leaves_no_temporary_and_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let good = |w: &mut dyn Write| w.write_all(b"good");
        let half = |w: &mut dyn Write| {
            w.write_all(b"half")?;
            w.flush()?;
            Err(std::io::Error::other("the disk is full"))
        };
        let e = write_many(&[(d, "a.json", &good), (d, "b.json", &half)], "o").unwrap_err();
        assert_eq!(e.path, d.join("b.json"));
        assert_eq!(
            e.to_string(),
            format!("{}: the disk is full", d.join("b.json").display())
        );
        assert_eq!(fs::read(d.join("a.json")).unwrap(), b"good");
        assert!(!d.join("b.json").exists());
        assert_eq!(temporaries(d), Vec::<std::ffi::OsString>::new());

        fs::create_dir_all(d.join("c.json").join("taken")).unwrap();
        let e = write_many(&[(d, "c.json", &good)], "o").unwrap_err();
        assert_eq!(e.path, d.join("c.json"));
        assert!(write_atomic(d, "c.json", b"x", "o").is_err());
        assert_eq!(temporaries(d), Vec::<std::ffi::OsString>::new());
    }

    #[test]
    fn writes_atomically_and_cleans_crash_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_atomic(dir.path(), "a.x12", b"hello", "host:1:x").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"hello");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names.len(),
            2,
            "the file and the hidden temporary folder: {names:?}"
        );
        fs::write(dir.path().join(TMP_DIR).join("left.over"), b"x").unwrap();
        clean_stale(dir.path(), Duration::ZERO);
        assert_eq!(fs::read_dir(dir.path().join(TMP_DIR)).unwrap().count(), 0);
        // A live owner's temporary stays until it is old; a dead owner's goes at once.
        let me = crate::owner::Owner::current();
        let live = format!("a.x12.{}", safe_name(&me.id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead_owner = crate::owner::Owner {
            pid: child.id(),
            start: 1,
            ..me.clone()
        };
        child.wait().unwrap();
        let dead = format!("b.x12.{}", safe_name(&format!("{}:3", dead_owner.id())));
        for n in [&live, &dead] {
            fs::write(dir.path().join(TMP_DIR).join(n), b"x").unwrap();
        }
        clean_stale(dir.path(), Duration::from_secs(3600));
        let left: Vec<_> = fs::read_dir(dir.path().join(TMP_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, [live]);
        assert!(!write_new(dir.path(), "a.x12", b"other", "o").unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"hello");
        assert!(write_new(dir.path(), "n.x12", b"new", "o").unwrap());
        assert_eq!(fs::read(dir.path().join("n.x12")).unwrap(), b"new");
    }
}
