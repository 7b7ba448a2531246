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

/// The names to try for `name` in a folder: `name`, then `stem-1.ext`, `stem-2.ext`, ...
fn candidate_names(name: &str) -> impl Iterator<Item = String> + '_ {
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s, format!(".{e}")),
        _ => (name, String::new()),
    };
    std::iter::once(name.to_string()).chain((1u32..).map(move |n| format!("{stem}-{n}{ext}")))
}

const MAX_CANDIDATES: usize = 100_000;

fn no_free_name(name: &str, dir: &Path) -> std::io::Error {
    std::io::Error::other(format!("no free name for {name} in {}", dir.display()))
}

fn same_file(a: &std::fs::Metadata, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(b).is_ok_and(|m| m.dev() == a.dev() && m.ino() == a.ino())
}

/// Links `file` into `dir` under the first free name. A hard link fails when the name
/// exists, so two disposals racing for one name can never overwrite each other (a
/// check-then-rename could).
fn link_into(file: &Path, name: &str, dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    for candidate in candidate_names(name).take(MAX_CANDIDATES) {
        let target = dir.join(&candidate);
        match std::fs::hard_link(file, &target) {
            Ok(()) => return Ok(target),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(no_free_name(name, dir))
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
    let day = g.archive.join(taken.day());
    // Candidates are taken in order, so the search ends at the first name free in both.
    for candidate in candidate_names(&taken.name).take(MAX_CANDIDATES) {
        let (archived, rejected) = (day.join(&candidate), g.rejected.join(&candidate));
        if same_file(&meta, &archived) {
            return Some(Destination::Archived(archived));
        }
        if same_file(&meta, &rejected) {
            let reason = g.rejected.join(format!("{candidate}.reason.json"));
            return Some(Destination::Rejected {
                file: rejected,
                reason,
            });
        }
        let reason = g.rejected.join(format!("{candidate}.reason.json"));
        if !archived.exists() && !rejected.exists() && !reason.exists() {
            break;
        }
    }
    None
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
    for candidate in candidate_names(&taken.name).take(MAX_CANDIDATES) {
        let file = dir.join(&candidate);
        let reason_name = format!("{candidate}.reason.json");
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
}
