//! Retention: `prune` removes the keys older than their partner's `duplicate_window_days`;
//! `prune --files` finds a partner's files in `archive/`, `out/` and `outbox/` that are older
//! than its `retention_days`, but never one that a key still in the registry refers to (a key
//! inside its `duplicate_window_days` may be resent, and `show` and `reprocess` read its
//! file): such files go only after `prune` removed their key.
//!
//! Which partner a file belongs to: outputs are named after their key (`ZZ_ACME_000000101.`);
//! an archived file by the watcher's `placed` note in the history. A file that cannot be
//! attributed is kept, and counted.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;
use crate::outputs::safe_name;
use crate::registry::{EventFilter, EventKind, Registry, RegistryError};

/// Removes the keys older than their partner's `duplicate_window_days`; returns them.
pub fn prune_keys(config: &Config, registry: &mut Registry) -> Result<Vec<String>, RegistryError> {
    // A sender that is not configured (accepted as unknown, or removed since) keeps the
    // window `Partner::unknown` gives: the default, 30 days.
    let windows = |partner: &str| {
        config
            .partners
            .iter()
            .find(|p| p.key() == partner)
            .map_or(30, |p| p.duplicates.window_days)
    };
    registry.prune(&windows)
}

/// What `prune --files` would do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Files past their partner's retention, with the partner and their age in days.
    pub delete: Vec<(PathBuf, String, u64)>,
    /// Files kept because a key in the registry refers to them.
    pub live: usize,
    /// Files kept because no partner could be told for them.
    pub unattributed: usize,
}

fn files_under(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        match e.file_type() {
            Ok(t) if t.is_dir() => files_under(&e.path(), found),
            Ok(t) if t.is_file() => found.push(e.path()),
            _ => {}
        }
    }
}

fn age_days(path: &Path) -> Option<u64> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    let age = crate::time::now()
        .duration_since(modified)
        .unwrap_or(Duration::ZERO);
    Some(age.as_secs() / 86_400)
}

/// Where the watcher placed each inbound file, with its keys and partner (a file may hold
/// several interchanges: it stays while any of them is live).
fn placed_files(
    registry: &Registry,
) -> Result<HashMap<PathBuf, (Vec<String>, String)>, RegistryError> {
    let mut placed: HashMap<PathBuf, (Vec<String>, String)> = HashMap::new();
    for e in registry.history(&EventFilter::default())? {
        if e.event != EventKind::Placed {
            continue;
        }
        let at = serde_json::from_str::<serde_json::Value>(&e.detail)
            .ok()
            .and_then(|v| v["placed"].as_str().map(PathBuf::from));
        if let (Some(at), Some(key), Some(partner)) = (at, e.key, e.partner) {
            let entry = placed.entry(at).or_insert_with(|| (Vec::new(), partner));
            entry.0.push(key);
        }
    }
    Ok(placed)
}

/// Partners by the prefix `prefix` gives their files' names or keys: (prefix, partner,
/// retention).
type Prefixes = Vec<(String, String, Option<u32>)>;

fn prefixes(config: &Config, prefix: impl Fn(&crate::config::Partner) -> String) -> Prefixes {
    config
        .partners
        .iter()
        .map(|p| (prefix(p), p.key(), p.retention.days))
        .collect()
}

/// What is live in the registry: the keys, their files' stems, and the document files.
struct Live {
    keys: HashSet<String>,
    stems: HashSet<String>,
    documents: HashSet<String>,
}

/// The partner (with its retention) of a file in `out/` or `outbox/`, and whether the
/// registry still refers to it. A document file is its sender's, by the key it holds, and
/// live while its document is recorded (it goes with its interchange's key); any other is
/// named after its interchange's key.
fn output_owner(
    path: &Path,
    partners: &Prefixes,
    senders: &Prefixes,
    live: &Live,
) -> (Option<(String, Option<u32>)>, bool) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(key) = crate::document::key_in_file(path) {
        let partner = senders
            .iter()
            .find(|(prefix, ..)| key.starts_with(prefix.as_str()))
            .map(|(_, key, days)| (key.clone(), *days));
        return (partner, live.documents.contains(&name));
    }
    let stem = name.split('.').next().unwrap_or_default().to_string();
    // Exactly `QUAL_ID_` and nine digits: `ZZ_ACME_EU_...` is not ACME's.
    let partner = partners
        .iter()
        .find(|(prefix, ..)| {
            stem.strip_prefix(prefix.as_str())
                .is_some_and(|n| n.len() == 9 && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|(_, key, days)| (key.clone(), *days));
    (partner, live.stems.contains(&stem))
}

impl Plan {
    /// Counts `path` kept, or lists it for deletion when it is past its partner's retention.
    fn consider(&mut self, path: PathBuf, partner: Option<(String, Option<u32>)>, is_live: bool) {
        if is_live {
            self.live += 1;
            return;
        }
        let Some((partner, days)) = partner else {
            self.unattributed += 1;
            return;
        };
        if let (Some(days), Some(age)) = (days, age_days(&path)) {
            if age >= u64::from(days) {
                self.delete.push((path, partner, age));
            }
        }
    }
}

/// What is past retention now.
pub fn plan(config: &Config, registry: &Registry) -> Result<Plan, RegistryError> {
    let g = &config.gateway;
    // Partners by the name their keys start with (`ZZ_ACME_`), and their retention.
    let partners = prefixes(config, |p| format!("{}_", safe_name(&p.key())));
    let keys: HashSet<String> = registry.keys()?.into_iter().collect();
    let documents: HashSet<String> = registry.document_outputs()?;
    // Document keys start with their sender's.
    let senders = prefixes(config, |p| {
        format!(
            "{}:{}:",
            crate::document::part(p.id_qualifier.as_bytes()),
            crate::document::part(p.id.as_bytes())
        )
    });
    let live = Live {
        stems: keys.iter().map(|k| safe_name(k)).collect(),
        keys,
        documents,
    };
    let placed = placed_files(registry)?;
    let retention = |partner: &str| {
        config
            .partners
            .iter()
            .find(|p| p.key() == partner)
            .and_then(|p| p.retention.days)
    };
    let mut plan = Plan::default();
    for dir in [&g.out, &g.outbox] {
        let mut found = Vec::new();
        files_under(dir, &mut found);
        for path in found {
            let (partner, is_live) = output_owner(&path, &partners, &senders, &live);
            plan.consider(path, partner, is_live);
        }
    }
    let mut archived = Vec::new();
    files_under(&g.archive, &mut archived);
    for path in archived {
        match placed.get(&path) {
            Some((keys, partner)) => {
                let days = retention(partner);
                let is_live = keys.iter().any(|k| live.keys.contains(k));
                plan.consider(path.clone(), Some((partner.clone(), days)), is_live);
            }
            None => plan.consider(path, None, false),
        }
    }
    plan.delete.sort();
    Ok(plan)
}

/// Deletes what `plan` lists, then the archive's day folders left empty; returns how many
/// files went.
pub fn apply(config: &Config, plan: &Plan) -> std::io::Result<usize> {
    let mut n = 0;
    for (path, ..) in &plan.delete {
        match std::fs::remove_file(path) {
            Ok(()) => n += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // Empty day folders (archive/YYYY/MM/DD) go with their last file; nothing at or
        // above the archive, and nothing in out/ or outbox/.
        let archive = &config.gateway.archive;
        let mut dir = path.parent().filter(|d| d.starts_with(archive));
        while let Some(d) = dir {
            if d == archive.as_path() || std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
    Ok(n)
}
