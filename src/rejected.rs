//! The `rejected/` folder follows the decisions: a file leaves it for `archive/` once every
//! interchange it holds is accepted (by a reprocess or a later resend), or when an operator
//! says it was handled otherwise (`rejected resolve`). Each move is a `placed` event of each
//! of its interchanges, so `show` and the page find the file where it is, and the backlog
//! (the metric, the page's list) counts only what still waits for someone.

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::disposition::Disposition;
use crate::registry::{ClaimState, EventFilter, EventKind, Registry, RegistryError};

/// A file moved out of `rejected/`, with its reason file, and the interchanges it holds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Moved {
    pub from: PathBuf,
    pub to: PathBuf,
    pub reason: Option<PathBuf>,
    pub keys: Vec<String>,
}

/// Why a file could not be resolved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RejectedError {
    #[error("{0}: not a file in the rejected folder {1}")]
    NotRejected(String, String),
    #[error("{0}: no file of this interchange is in the rejected folder")]
    NoFile(String),
    #[error("moving {}: {cause}", .path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// The files in `rejected/` of the interchanges `keys` (just accepted) whose interchanges
/// are now all accepted: moved to `archive/`, each move recorded. A file that holds an
/// interchange still rejected (or that cannot be read) stays.
pub fn follow(
    config: &Config,
    registry: &mut Registry,
    keys: &[String],
) -> Result<Vec<Moved>, RejectedError> {
    let mut moved: Vec<Moved> = Vec::new();
    for key in keys {
        for file in rejected_files_of(config, registry, key)? {
            // Only a rejection is superseded by a later acceptance: a file refused as a
            // conflict (other content under an accepted number) stays for someone.
            if moved.iter().any(|m| m.from == file) || !rejected_as_such(&file) {
                continue;
            }
            let Some(held) = keys_in(&file, config) else {
                continue;
            };
            let mut all_accepted = !held.is_empty();
            for k in &held {
                let accepted = registry.record(k)?.is_some_and(|r| {
                    r.state == ClaimState::Completed
                        && r.disposition.is_some_and(Disposition::is_success)
                });
                all_accepted &= accepted;
            }
            if all_accepted {
                moved.push(archive(config, registry, &file, held, "accepted", None)?);
            }
        }
    }
    Ok(moved)
}

/// `rejected resolve FILE|KEY`: the file (a path or a name in `rejected/`), or the file in
/// `rejected/` of interchange `key`, moved to `archive/` with `note`, whatever its
/// interchanges' state (an operator handled it otherwise).
pub fn resolve(
    config: &Config,
    registry: &mut Registry,
    given: &str,
    note: Option<&str>,
) -> Result<Moved, RejectedError> {
    let dir = &config.gateway.rejected;
    let as_path = Path::new(given);
    let named = if as_path.is_file() {
        Some(as_path.to_path_buf())
    } else if dir.join(given).is_file() {
        Some(dir.join(given))
    } else {
        None
    };
    let file = match named {
        Some(file) => {
            let inside = std::fs::canonicalize(&file)
                .ok()
                .and_then(|f| f.parent().map(Path::to_path_buf))
                .zip(std::fs::canonicalize(dir).ok())
                .is_some_and(|(parent, dir)| parent == dir);
            if !inside || is_reason(&file) {
                return Err(RejectedError::NotRejected(
                    given.to_string(),
                    dir.display().to_string(),
                ));
            }
            file
        }
        None => {
            let Ok(crate::registry::Resolved::One(key)) = registry.resolve(given) else {
                return Err(RejectedError::NoFile(given.to_string()));
            };
            rejected_files_of(config, registry, &key)?
                .into_iter()
                .next()
                .ok_or(RejectedError::NoFile(key))?
        }
    };
    let keys = keys_in(&file, config).unwrap_or_default();
    archive(config, registry, &file, keys, "resolved", note)
}

/// `file` with `suffix` after its name, the bytes of the name kept (not UTF-8 ones too).
fn beside(file: &Path, suffix: &str) -> PathBuf {
    let mut name = file.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// Whether `file`'s reason says it was rejected (not refused as a conflict).
fn rejected_as_such(file: &Path) -> bool {
    std::fs::read(beside(file, ".reason.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v["disposition"] == Disposition::Rejected.as_str())
}

fn is_reason(file: &Path) -> bool {
    file.file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with(".reason.json"))
}

/// The files in `rejected/` that the history places interchange `key` in, newest first.
fn rejected_files_of(
    config: &Config,
    registry: &Registry,
    key: &str,
) -> Result<Vec<PathBuf>, RejectedError> {
    let dir = &config.gateway.rejected;
    let events = registry.history(&EventFilter {
        key: Some(key.to_string()),
        ..EventFilter::default()
    })?;
    let mut files: Vec<PathBuf> = Vec::new();
    for e in events.iter().rev().filter(|e| e.event == EventKind::Placed) {
        let Some(placed) = serde_json::from_str::<serde_json::Value>(&e.detail)
            .ok()
            .and_then(|v| v["placed"].as_str().map(PathBuf::from))
        else {
            continue;
        };
        if placed.parent() == Some(dir.as_path()) && placed.is_file() && !files.contains(&placed) {
            files.push(placed);
        }
    }
    Ok(files)
}

/// The registry keys of the interchanges `file` holds; `None` when a part of it is not a
/// readable interchange (such a file stays for someone to look at) or it is too large to
/// read whole here.
fn keys_in(file: &Path, config: &Config) -> Option<Vec<String>> {
    let size = std::fs::metadata(file).ok()?.len();
    if size > crate::input::WINDOW as u64 {
        return None;
    }
    let bytes = std::fs::read(file).ok()?;
    let mut keys = Vec::new();
    for ic in crate::x12::Interchanges::new(&bytes, config.limits) {
        let ic = ic.ok()?;
        let scope = crate::pipeline::partner_of(&ic, config)
            .0
            .duplicates
            .interchange_scope;
        keys.push(crate::keys::interchange_key(&ic, scope));
    }
    Some(keys)
}

/// Moves `file` and its reason to today's folder of `archive/` (names never overwritten) and
/// records the placement for each of `keys` (`why`: accepted or resolved, with `note`).
fn archive(
    config: &Config,
    registry: &mut Registry,
    file: &Path,
    keys: Vec<String>,
    why: &str,
    note: Option<&str>,
) -> Result<Moved, RejectedError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |cause| RejectedError::Io { path, cause }
    };
    let day = config
        .gateway
        .archive
        .join(chrono::Local::now().format("%Y/%m/%d").to_string());
    let name = file.file_name().unwrap_or_default();
    let to = crate::inbound::link_into(file, name, &day).map_err(io(file))?;
    let reason_was = beside(file, ".reason.json");
    let reason = if reason_was.is_file() {
        let reason = beside(&to, ".reason.json");
        std::fs::hard_link(&reason_was, &reason).map_err(io(&reason_was))?;
        std::fs::remove_file(&reason_was).map_err(io(&reason_was))?;
        Some(reason)
    } else {
        None
    };
    std::fs::remove_file(file).map_err(io(file))?;
    let detail = serde_json::json!({
        "file": file.display().to_string(),
        "placed": to.display().to_string(),
        "why": why,
        "note": note,
    })
    .to_string();
    let mut known = Vec::new();
    for key in &keys {
        if let Some(r) = registry.record(key)? {
            known.push((r.key, r.partner, r.control_number));
        }
    }
    registry.batch(|b| {
        if known.is_empty() {
            b.record_note(EventKind::Placed, None, None, None, &detail)?;
        }
        for (key, partner, number) in &known {
            b.record_note(
                EventKind::Placed,
                Some(key),
                Some(partner),
                Some(number),
                &detail,
            )?;
        }
        Ok::<_, RegistryError>(())
    })?;
    tracing::info!(from = %file.display(), to = %to.display(), why, "moved out of rejected/");
    Ok(Moved {
        from: file.to_path_buf(),
        to,
        reason,
        keys,
    })
}
