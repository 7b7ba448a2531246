//! What becomes of an inbound file once its interchanges are decided: `archive/YYYY/MM/DD/`
//! when everything in it was accepted (or replayed as a duplicate), `rejected/` with a
//! `NAME.reason.json` beside it otherwise, so nothing is lost and someone is told why.
//!
//! Names are never overwritten: a name already taken gets `-1`, `-2`, ... before its extension.

use std::path::{Path, PathBuf};

use crate::ack::Disposition;
use crate::config::Config;
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

/// Links `file` into `dir` under the first free name. A hard link fails when the name
/// exists, so two disposals racing for one name can never overwrite each other (a
/// check-then-rename could).
fn link_into(file: &Path, dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unnamed".into());
    for candidate in candidate_names(&name).take(100_000) {
        let target = dir.join(&candidate);
        match std::fs::hard_link(file, &target) {
            Ok(()) => return Ok(target),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "no free name for {name} in {}",
        dir.display()
    )))
}

/// The worst outcome of a file's interchanges: the one that decides where the file goes. An
/// exact resend of a rejected interchange is still a rejected file.
pub fn verdict(reports: &[Report]) -> Option<&Report> {
    reports
        .iter()
        .find(|r| !r.disposition.is_success() || r.replayed.is_some_and(|d| !d.is_success()))
}

/// Moves a processed file to the archive, or to `rejected/` with its reason written first:
/// the file leaves the inbox only once its new place (and reason) exist, so a failure or a
/// crash at any point leaves it in the inbox to be retried, never in `rejected/` unexplained.
/// No folder is fsynced: a move lost to a power cut leaves the file in the inbox, where the
/// registry answers it as a duplicate and it is moved again.
pub fn dispose(file: &Path, reports: &[Report], config: &Config) -> std::io::Result<Destination> {
    let g = &config.gateway;
    let destination = match verdict(reports) {
        None => {
            let day = chrono::Local::now().format("%Y/%m/%d").to_string();
            Destination::Archived(link_into(file, &g.archive.join(day))?)
        }
        Some(worst) => {
            let linked = link_into(file, &g.rejected)?;
            match write_reason(file, &linked, worst, reports, config) {
                Ok(reason) => Destination::Rejected {
                    file: linked,
                    reason,
                },
                Err(e) => {
                    let _ = std::fs::remove_file(&linked);
                    return Err(e);
                }
            }
        }
    };
    std::fs::remove_file(file)?;
    Ok(destination)
}

fn write_reason(
    file: &Path,
    linked: &Path,
    worst: &Report,
    reports: &[Report],
    config: &Config,
) -> std::io::Result<PathBuf> {
    let contact = worst
        .sender
        .as_deref()
        .and_then(|s| s.split_once(':'))
        .and_then(|(q, id)| config.partner(q, id))
        .and_then(|p| p.contact.as_deref());
    let reason = ReasonFile {
        file: file.display().to_string(),
        disposition: worst.replayed.unwrap_or(worst.disposition),
        reason_code: worst.reason_code.as_deref(),
        reason: worst.reason.as_deref(),
        correlation_id: worst.correlation_id.as_deref(),
        contact,
        time: chrono::Local::now().to_rfc3339(),
        interchanges: reports,
    };
    let linked_name = linked
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = format!("{linked_name}.reason.json");
    let body = serde_json::to_vec_pretty(&reason).map_err(std::io::Error::other)?;
    // The temporary name is this file's own, so concurrent disposals never share one.
    crate::outputs::write_atomic(&config.gateway.rejected, &name, &body, &linked_name)
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
            link_into(&inbox.join("a.x12"), &out).unwrap(),
            out.join("a-2.x12")
        );
        assert_eq!(std::fs::read(out.join("a.x12")).unwrap(), b"1");
        std::fs::write(inbox.join("b"), b"4").unwrap();
        assert_eq!(link_into(&inbox.join("b"), &out).unwrap(), out.join("b"));
        assert_eq!(link_into(&inbox.join("b"), &out).unwrap(), out.join("b-1"));
    }
}
