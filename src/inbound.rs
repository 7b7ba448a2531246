//! What becomes of an inbound file once its interchanges are decided: `archive/YYYY/MM/DD/`
//! when everything in it was accepted (or replayed as a duplicate), `rejected/` with a
//! `NAME.reason.json` beside it otherwise, so nothing is lost and someone is told why.
//!
//! The file placed is the one the watcher took into its work folder ([`Taken`]), never
//! whatever is at the inbox path now. Names are never overwritten: a name already taken gets
//! `-1`, `-2`, ... before its extension. Placing is a hard link from the work folder, then
//! the work file is removed; a crash in between leaves a work file that is already placed,
//! which [`placed`] finds again (same inode under one of its candidate names), so a restart
//! never places a file twice. For `rejected/`, the reason file is created first, durably and
//! exclusively (it reserves the name), and carries the intake's ticket, so that a reason
//! left by a crash before its file was linked is recognised as ours and completed.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::ack::Disposition;
use crate::config::Config;
use crate::intake::Taken;
use crate::pipeline::Report;

/// Which inbox names are not (yet) files to take: hidden ones and ones still being written
/// under a temporary name.
pub fn is_ignored(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".tmp") || name.ends_with(".part")
}

/// Where a processed file went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    Archived(PathBuf),
    Rejected { file: PathBuf, reason: PathBuf },
}

/// The reason file written beside a rejected file.
#[derive(Debug, serde::Serialize)]
struct ReasonFile<'a> {
    file: String,
    disposition: Disposition,
    reason_code: Option<&'a str>,
    reason: Option<&'a str>,
    correlation_id: Option<&'a str>,
    contact: Option<&'a str>,
    time: String,
    /// The intake this file was taken in: the same for every attempt at placing it.
    ticket: &'a str,
    interchanges: &'a [Report],
}

/// Name `n` to try for `name` in a folder: `name` itself, then `stem-1.ext`, `stem-2.ext`, ...
/// The name's bytes are kept as they are, whether UTF-8 or not.
fn candidate(name: impl AsRef<OsStr>, n: u64) -> OsString {
    let name = name.as_ref().as_bytes();
    if n == 0 {
        return OsStr::from_bytes(name).to_os_string();
    }
    let dot = name.iter().rposition(|b| *b == b'.').filter(|at| *at > 0);
    let (stem, ext) = dot.map_or((name, &[][..]), |at| name.split_at(at));
    let mut out = stem.to_vec();
    out.extend_from_slice(format!("-{n}").as_bytes());
    out.extend_from_slice(ext);
    OsString::from_vec(out)
}

/// The reason file's name beside the rejected file `name`: `NAME.reason.json`.
fn reason_name(name: &OsStr) -> OsString {
    let mut reason = name.to_os_string();
    reason.push(".reason.json");
    reason
}

const MAX_CANDIDATES: usize = 100_000;

/// The first candidate of `name` that `taken` says is free, where names are taken in order:
/// the taken ones are a run from the first (but for names an operator removed), so the end
/// of the run is found by doubling, then halving, in a few dozen lookups however long it is
/// (a partner that always sends `orders.x12` fills a day's folder with thousands). With
/// gaps, it is a free name after a taken one, which is all placing needs.
fn first_free(name: &OsStr, taken: impl Fn(&OsStr) -> bool) -> u64 {
    if !taken(&candidate(name, 0)) {
        return 0;
    }
    let (mut used, mut free) = (0u64, 1u64);
    while taken(&candidate(name, free)) {
        used = free;
        free = free.saturating_mul(2);
        if free == u64::MAX {
            return free;
        }
    }
    while free - used > 1 {
        let mid = used + (free - used) / 2;
        if taken(&candidate(name, mid)) {
            used = mid;
        } else {
            free = mid;
        }
    }
    free
}

fn no_free_name(name: &OsStr, dir: &Path) -> std::io::Error {
    std::io::Error::other(format!(
        "no free name for {} in {}",
        name.to_string_lossy(),
        dir.display()
    ))
}

/// Links `file` into `dir` under the first free name. A hard link fails when the name
/// exists, so two disposals racing for one name can never overwrite each other (a
/// check-then-rename could); the loser tries the next name.
pub(crate) fn link_into(
    file: &Path,
    name: impl AsRef<OsStr>,
    dir: &Path,
) -> std::io::Result<PathBuf> {
    let name = name.as_ref();
    std::fs::create_dir_all(dir)?;
    let exists = |candidate: &OsStr| std::fs::symlink_metadata(dir.join(candidate)).is_ok();
    let from = first_free(name, exists);
    for n in (from..).take(MAX_CANDIDATES) {
        let target = dir.join(candidate(name, n));
        match std::fs::hard_link(file, &target) {
            Ok(()) => return Ok(target),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(no_free_name(name, dir))
}

fn same_file(a: &std::fs::Metadata, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(b).is_ok_and(|m| m.dev() == a.dev() && m.ino() == a.ino())
}

/// The name in `dir` of the file `meta` describes, if it is linked there: read from the
/// folder's entries (their inode numbers come with them), once, rather than guessed.
fn linked_in(dir: &Path, meta: &std::fs::Metadata) -> Option<OsString> {
    use std::os::unix::fs::{DirEntryExt, MetadataExt};
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.ino() == meta.ino())
        .find(|e| same_file(meta, &e.path()))
        .map(|e| e.file_name())
}

/// The worst outcome of a file's interchanges: the one that decides where the file goes. An
/// exact resend of a rejected interchange is still a rejected file.
pub fn verdict(reports: &[Report]) -> Option<&Report> {
    reports
        .iter()
        .find(|r| !r.disposition.is_success() || r.replayed.is_some_and(|d| !d.is_success()))
}

/// Where `taken` was already placed, if an earlier attempt placed it and was cut short
/// before removing it from the work folder.
pub fn placed(taken: &Taken, config: &Config) -> Option<Destination> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(&taken.path).ok()?;
    if meta.nlink() < 2 {
        return None;
    }
    let g = &config.gateway;
    // Only after a crash between linking and removing the work file: each folder's entries
    // are read once (the names were found by a search, not in order: see `first_free`).
    let day = g.archive.join(taken.day());
    if let Some(name) = linked_in(&day, &meta) {
        return Some(Destination::Archived(day.join(name)));
    }
    let name = linked_in(&g.rejected, &meta)?;
    let reason = g.rejected.join(reason_name(&name));
    Some(Destination::Rejected {
        file: g.rejected.join(name),
        reason,
    })
}

/// Places a processed file: in the archive, or in `rejected/` with its reason written first.
/// The file leaves the work folder only once its new place (and reason) exist, so a failure
/// or a crash at any point leaves it there to be retried (and [`placed`] to find it), never
/// in `rejected/` unexplained. The archive folder is not fsynced: a placement lost to a power
/// cut leaves the file in the work folder, where the registry answers it as a duplicate and
/// it is placed again.
pub fn dispose(taken: &Taken, reports: &[Report], config: &Config) -> std::io::Result<Destination> {
    let g = &config.gateway;
    if let Some(done) = placed(taken, config) {
        std::fs::remove_file(&taken.path)?;
        return Ok(done);
    }
    let destination = match verdict(reports) {
        None => Destination::Archived(link_into(
            &taken.path,
            &taken.name,
            &g.archive.join(taken.day()),
        )?),
        Some(worst) => reject(taken, worst, reports, config)?,
    };
    fail::fail_point!("place.after", |_| std::process::abort());
    std::fs::remove_file(&taken.path)?;
    Ok(destination)
}

/// Links `taken` into `rejected/` under the first name whose reason file we could create (or
/// which holds our own reason from an attempt cut short).
fn reject(
    taken: &Taken,
    worst: &Report,
    reports: &[Report],
    config: &Config,
) -> std::io::Result<Destination> {
    let dir = &config.gateway.rejected;
    std::fs::create_dir_all(dir)?;
    let shown = config.gateway.inbox.join(&taken.name);
    let contact = worst
        .sender
        .as_deref()
        .and_then(|s| s.split_once(':'))
        .and_then(|(q, id)| config.partner(q, id))
        .and_then(|p| p.contact.as_deref());
    let body = serde_json::to_vec_pretty(&ReasonFile {
        file: shown.display().to_string(),
        disposition: worst.replayed.unwrap_or(worst.disposition),
        reason_code: worst.reason_code.as_deref(),
        reason: worst.reason.as_deref(),
        correlation_id: worst.correlation_id.as_deref(),
        contact,
        time: chrono::Local::now().to_rfc3339(),
        ticket: taken.ticket(),
        interchanges: reports,
    })
    .map_err(std::io::Error::other)?;
    let owner = crate::owner::Owner::current().id();
    // A name is taken by its file or its reason (reserved by a disposal not yet linked).
    let taken_name = |candidate: &OsStr| {
        std::fs::symlink_metadata(dir.join(candidate)).is_ok()
            || std::fs::symlink_metadata(dir.join(reason_name(candidate))).is_ok()
    };
    // From the name before the first free one: where a reason of ours, left by an attempt
    // cut short before its link, stands (unless other files were placed after it since:
    // then it is left, and this attempt's reason is written at the next free name).
    let from = first_free(&taken.name, taken_name).saturating_sub(1);
    for n in (from..).take(MAX_CANDIDATES) {
        let candidate = candidate(&taken.name, n);
        let file = dir.join(&candidate);
        let reason_name = reason_name(&candidate);
        let reason = dir.join(&reason_name);
        if std::fs::symlink_metadata(&file).is_ok() {
            continue;
        }
        let ours = std::fs::read(&reason)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| v["ticket"] == taken.ticket());
        if ours {
            // Our own reason from an attempt cut short: bring it up to date, then link.
            crate::outputs::write_atomic(dir, &reason_name, &body, &owner)?;
        } else if !crate::outputs::write_new(dir, &reason_name, &body, &owner)? {
            continue;
        }
        fail::fail_point!("reason.after", |_| std::process::abort());
        match std::fs::hard_link(&taken.path, &file) {
            Ok(()) => return Ok(Destination::Rejected { file, reason }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&reason);
            }
            Err(e) => {
                let _ = std::fs::remove_file(&reason);
                return Err(e);
            }
        }
    }
    Err(no_free_name(&taken.name, dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_names() {
        assert!(is_ignored(".hidden.x12"));
        assert!(is_ignored("order.x12.part"));
        assert!(is_ignored("order.tmp"));
        assert!(!is_ignored("order.x12"));
    }

    #[test]
    fn never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = dir.path().join("in");
        std::fs::create_dir_all(&inbox).unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("a.x12"), b"1").unwrap();
        std::fs::write(out.join("a-1.x12"), b"2").unwrap();
        std::fs::write(inbox.join("a.x12"), b"3").unwrap();
        assert_eq!(
            link_into(&inbox.join("a.x12"), "a.x12", &out).unwrap(),
            out.join("a-2.x12")
        );
        assert_eq!(std::fs::read(out.join("a.x12")).unwrap(), b"1");
        std::fs::write(inbox.join("b"), b"4").unwrap();
        assert_eq!(
            link_into(&inbox.join("b"), "b", &out).unwrap(),
            out.join("b")
        );
        assert_eq!(
            link_into(&inbox.join("b"), "b", &out).unwrap(),
            out.join("b-1")
        );
    }

    #[test]
    fn the_first_free_name_is_found_in_a_few_lookups_however_many_are_taken() {
        for used in [0u64, 1, 2, 3, 7, 8, 100, 99_999, 100_000, 10_000_000] {
            let lookups = std::cell::Cell::new(0u32);
            let taken = |c: &OsStr| {
                let c = c.to_str().unwrap();
                lookups.set(lookups.get() + 1);
                let n = match c.strip_prefix("orders-") {
                    Some(rest) => rest.trim_end_matches(".x12").parse::<u64>().unwrap(),
                    None => 0,
                };
                n < used
            };
            assert_eq!(
                first_free(OsStr::new("orders.x12"), taken),
                used,
                "{used} taken"
            );
            let bound = 2 * (64 - used.leading_zeros()) + 2;
            assert!(lookups.get() <= bound, "{used}: {} lookups", lookups.get());
        }
        // With names removed in between, a free name after a taken one.
        let gaps = [0u64, 1, 2, 3, 5, 6, 9, 10, 11, 12, 13, 14, 15, 16, 17];
        let taken = |c: &OsStr| {
            let c = c.to_str().unwrap();
            let n = c.strip_prefix("o-").map_or(0, |n| n.parse().unwrap());
            gaps.contains(&n)
        };
        let free = first_free(OsStr::new("o"), taken);
        assert!(
            !taken(&candidate("o", free)) && taken(&candidate("o", free - 1)),
            "{free}"
        );
    }

    /// A partner that always sends `orders.x12`: the 100,001st of a day is placed (a linear
    /// probe of the names gave up there), and a placement interrupted before its work file
    /// was removed is found again wherever the search put it.
    #[test]
    fn a_name_sent_many_times_a_day_is_placed_and_found_again() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        for n in 0..=100_000 {
            // Links, for speed; a file system allows about 65,000 to one file.
            let earlier = dir.path().join(format!("earlier-{}", n / 50_000));
            if n % 50_000 == 0 {
                std::fs::write(&earlier, b"earlier").unwrap();
            }
            std::fs::hard_link(&earlier, out.join(candidate("orders.x12", n))).unwrap();
        }
        let work = dir.path().join("work");
        std::fs::write(&work, b"this one").unwrap();
        let placed = link_into(&work, "orders.x12", &out).unwrap();
        assert_eq!(placed, out.join("orders-100001.x12"));
        assert_eq!(std::fs::read(&placed).unwrap(), b"this one");
        let meta = std::fs::symlink_metadata(&work).unwrap();
        assert_eq!(
            linked_in(&out, &meta).as_deref(),
            Some(OsStr::new("orders-100001.x12"))
        );
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        assert_eq!(linked_in(&elsewhere, &meta), None);
    }
}
