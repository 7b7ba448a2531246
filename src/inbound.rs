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

/// `dir/name`, or `dir/stem-N.ext` for the first N that is free.
fn free_name(dir: &Path, name: &str) -> PathBuf {
    let first = dir.join(name);
    if !first.exists() {
        return first;
    }
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s, format!(".{e}")),
        _ => (name, String::new()),
    };
    (1u32..)
        .map(|n| dir.join(format!("{stem}-{n}{ext}")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

fn rename_into(file: &Path, dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unnamed".into());
    let target = free_name(dir, &name);
    // No fsync of the folder: a move lost to a power cut leaves the file in the inbox, where
    // the registry answers it as a duplicate and moves it again. Saving that fsync per file
    // is most of what keeps the watcher as fast as `process`.
    std::fs::rename(file, &target)?;
    Ok(target)
}

/// The worst outcome of a file's interchanges: the one that decides where the file goes.
pub fn verdict(reports: &[Report]) -> Option<&Report> {
    reports.iter().find(|r| !r.disposition.is_success())
}

/// Moves a processed file to the archive or to `rejected/` with its reason.
pub fn dispose(file: &Path, reports: &[Report], config: &Config) -> std::io::Result<Destination> {
    let g = &config.gateway;
    let Some(worst) = verdict(reports) else {
        let day = chrono::Local::now().format("%Y/%m/%d").to_string();
        return rename_into(file, &g.archive.join(day)).map(Destination::Archived);
    };
    let moved = rename_into(file, &g.rejected)?;
    let contact = worst
        .sender
        .as_deref()
        .and_then(|s| s.split_once(':'))
        .and_then(|(q, id)| config.partner(q, id))
        .and_then(|p| p.contact.as_deref());
    let reason = ReasonFile {
        file: file.display().to_string(),
        disposition: worst.disposition,
        reason_code: worst.reason_code.as_deref(),
        reason: worst.reason.as_deref(),
        correlation_id: worst.correlation_id.as_deref(),
        contact,
        time: chrono::Local::now().to_rfc3339(),
        interchanges: reports,
    };
    let name = format!(
        "{}.reason.json",
        moved
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let body = serde_json::to_vec_pretty(&reason).map_err(std::io::Error::other)?;
    let reason_path = crate::outputs::write_atomic(&g.rejected, &name, &body, "inbound")?;
    Ok(Destination::Rejected {
        file: moved,
        reason: reason_path,
    })
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
        std::fs::write(dir.path().join("a.x12"), b"1").unwrap();
        std::fs::write(dir.path().join("a-1.x12"), b"2").unwrap();
        assert_eq!(free_name(dir.path(), "a.x12"), dir.path().join("a-2.x12"));
        assert_eq!(free_name(dir.path(), "b"), dir.path().join("b"));
        std::fs::write(dir.path().join("b"), b"3").unwrap();
        assert_eq!(free_name(dir.path(), "b"), dir.path().join("b-1"));
    }
}
