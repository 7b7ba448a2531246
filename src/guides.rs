//! Partners' own implementation guides: folders of set definitions in the format of
//! `schemas/<version>/<set>.toml`, read at start-up and layered over the built-in definitions
//! (a set a guide defines replaces the built-in one of its release and id, for that partner).
//!
//! The compiler is `schema::definition`'s; this module owns the file system (finding the
//! files of a folder), the mapping from `partners.toml` to folders, and messages that name the
//! file and line of every fault, so a guide that does not load stops the gateway before it
//! reads anything against less than the partner asked for.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::Config;
use crate::schema::Schemas;

/// Why a guide folder could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuideError {
    /// The folder or one of its files could not be read.
    #[error("{}: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// A file is not a valid definition: the message names the file and line.
    #[error("{0}")]
    Invalid(String),
    /// A partner's folder did not load: `partners.toml`'s line, then the fault.
    #[error("{config}: line {line}: partner {partner:?}, key `definitions`: {cause}")]
    Partner {
        config: PathBuf,
        line: usize,
        partner: String,
        cause: Box<GuideError>,
    },
}

impl GuideError {
    /// What kind of fault: `io`, `invalid`, `partner`.
    pub fn kind(&self) -> &'static str {
        match self {
            GuideError::Io { .. } => "io",
            GuideError::Invalid(_) => "invalid",
            GuideError::Partner { .. } => "partner",
        }
    }
}

/// The `.toml` files under `dir` (its subfolders too, as `schemas/` has one per release),
/// as (path relative to `dir` with `/`, text), sorted by path.
pub fn read_folder(dir: &Path) -> Result<Vec<(String, String)>, GuideError> {
    let io = |path: &Path, cause| GuideError::Io {
        path: path.to_path_buf(),
        cause,
    };
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).map_err(|e| io(&folder, e))? {
            let path = entry.map_err(|e| io(&folder, e))?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
                let rel = path
                    .strip_prefix(dir)
                    .map(|p| p.to_string_lossy().replace('\\', "/"))
                    .unwrap_or_else(|_| path.display().to_string());
                files.push((rel, text));
            }
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(GuideError::Invalid(format!(
            "{}: no definition (.toml) files in the folder",
            dir.display()
        )));
    }
    Ok(files)
}

/// The built-in definitions with the guide in `dir` layered over them, every one of the
/// guide's sets compiled.
pub fn load(dir: &Path) -> Result<Schemas, GuideError> {
    let files = read_folder(dir)?;
    load_files(dir, &files)
}

/// [`load`] of files already read.
pub fn load_files(dir: &Path, files: &[(String, String)]) -> Result<Schemas, GuideError> {
    let shown = dir.display().to_string();
    let pairs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    Schemas::layered(crate::schema::embedded_files(), &shown, &pairs)
        .map_err(|e| GuideError::Invalid(with_line(&shown, files, &e)))
}

/// The sets (release, id) a guide's files define, as their files declare them.
pub fn sets_of(files: &[(String, String)]) -> Vec<(String, String, String)> {
    #[derive(serde::Deserialize)]
    struct Head {
        version: Option<String>,
        id: Option<String>,
    }
    let mut out = Vec::new();
    for (path, text) in files {
        // Only the two keys are wanted; a file that does not parse was reported by `load`.
        let Ok(table) = text.parse::<toml::Table>() else {
            continue;
        };
        let head = Head {
            version: table
                .get("version")
                .and_then(|v| v.as_str())
                .map(String::from),
            id: table.get("id").and_then(|v| v.as_str()).map(String::from),
        };
        if let (Some(version), Some(id)) = (head.version, head.id) {
            out.push((version, id, path.clone()));
        }
    }
    out.sort();
    out
}

/// Every partner's guide loaded once (a folder two partners name is read once), and the
/// built-in definitions carrying them; `None` when no partner names one.
pub fn for_config(config: &Config) -> Result<Option<Schemas>, GuideError> {
    let mut loaded: BTreeMap<PathBuf, Arc<Schemas>> = BTreeMap::new();
    let mut guides: HashMap<String, Arc<Schemas>> = HashMap::new();
    for partner in &config.partners {
        let Some(dir) = &partner.checks.definitions else {
            continue;
        };
        let schemas = match loaded.get(dir) {
            Some(s) => s.clone(),
            None => {
                let s = Arc::new(load(dir).map_err(|cause| {
                    GuideError::Partner {
                        config: config.path.clone(),
                        line: config
                            .line_of_partner(&partner.name, "definitions")
                            .unwrap_or(0),
                        partner: partner.name.clone(),
                        cause: Box::new(cause),
                    }
                })?);
                loaded.insert(dir.clone(), s.clone());
                s
            }
        };
        guides.insert(partner.key(), schemas);
    }
    if guides.is_empty() {
        return Ok(None);
    }
    let root =
        Schemas::load_embedded(crate::schema::embedded_files()).map_err(GuideError::Invalid)?;
    Ok(Some(root.with_guides(guides)))
}

/// `message` (which begins `<dir>/<file>: `) with the line of the file it is about, when the
/// compiler did not say one: the line that declares or uses what the message names.
fn with_line(dir: &str, files: &[(String, String)], message: &str) -> String {
    let Some((path, text, rest)) = files.iter().find_map(|(p, t)| {
        message
            .strip_prefix(&format!("{dir}/{p}: "))
            .map(|rest| (p, t, rest))
    }) else {
        return message.to_string();
    };
    if rest.starts_with("line ") || rest.starts_with("TOML parse error") {
        return message.to_string();
    }
    let line = locate(text, rest);
    format!("{dir}/{path}: line {line}: {rest}")
}

/// The 1-based line of `text` a compiler message `rest` is about: the first line naming the
/// segment, composite or loop it names, `[document]` for a document key, else the set's `id`.
fn locate(text: &str, rest: &str) -> usize {
    let named = ["segment ", "composite ", "loop ", "names loop "]
        .iter()
        .filter_map(|k| rest.find(k).map(|at| (at, k.len())))
        .min()
        .and_then(|(at, len)| rest.get(at + len..))
        .and_then(|after| after.split(|c: char| !c.is_ascii_alphanumeric()).next())
        .filter(|w| !w.is_empty());
    let line_where = |pred: &dyn Fn(&str) -> bool| text.lines().position(pred).map(|i| i + 1);
    let found = match named {
        Some(id) => line_where(&|l: &str| {
            let l = l.trim();
            l == format!("[segments.{id}]")
                || l == format!("[composites.{id}]")
                || l.split_whitespace()
                    .filter(|w| *w != "loop")
                    .take(1)
                    .any(|w| w == id)
        }),
        None if rest.contains("[document]") => line_where(&|l: &str| l.trim() == "[document]"),
        None => None,
    };
    found
        .or_else(|| line_where(&|l: &str| l.trim_start().starts_with("id")))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET: &str = r#"version = "004010"
id = "850"
name = "Purchase Order (guide)"
structure = """
BEG M 1
loop PO1 M 10
  PO1 M 1
CTT M 1
"""
"#;

    fn guide(files: &[(&str, &str)]) -> Result<Schemas, GuideError> {
        let files: Vec<(String, String)> = files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect();
        load_files(Path::new("guides/acme"), &files)
    }

    #[test]
    fn a_guide_set_replaces_the_builtin_one_and_leaves_the_others() {
        let s = guide(&[("004010/850.toml", SET)]).unwrap();
        let def = s.find(b"004010", b"850").unwrap();
        assert_eq!(def.name, "Purchase Order (guide)");
        assert_eq!(def.root().children.len(), 3);
        // The others are the built-in ones.
        let builtin = crate::schema::builtin().unwrap();
        assert_eq!(
            s.find(b"004010", b"810").unwrap().nodes.len(),
            builtin.find(b"004010", b"810").unwrap().nodes.len()
        );
        assert!(
            builtin
                .find(b"004010", b"850")
                .unwrap()
                .root()
                .children
                .len()
                > 3
        );
    }

    #[test]
    fn faults_name_the_file_and_line() {
        let bad = SET.replace("CTT M 1", "CTT M many");
        let e = guide(&[("850.toml", &bad)]).unwrap_err().to_string();
        assert!(e.starts_with("guides/acme/850.toml: line 8: "), "{e}");
        let unknown = SET.replace("CTT M 1", "QQQ M 1");
        let e = guide(&[("850.toml", &unknown)]).unwrap_err().to_string();
        assert!(
            e.starts_with("guides/acme/850.toml: line 8: segment QQQ"),
            "{e}"
        );
        let e = guide(&[("850.toml", "version = \"004010\"\nid = 850\n")])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("guides/acme/850.toml: TOML parse error at line 2"),
            "{e}"
        );
        let e = guide(&[("segments.toml", "version = \"004010\"\n")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("a guide holds set files only"), "{e}");
    }
}
