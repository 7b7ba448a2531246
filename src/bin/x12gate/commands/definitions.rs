//! `definitions import|list|check`: partners' implementation guides, imported from SEF,
//! listed with the built-in definitions, and checked.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use x12gate::config::Config;

use crate::args::DefinitionsAction;
use crate::exit::{self, Failure};

pub fn run(
    action: DefinitionsAction,
    config: Option<&Config>,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    match action {
        DefinitionsAction::Import { file, name, into } => import(&file, &name, into, out),
        DefinitionsAction::List => list(config, out),
        DefinitionsAction::Check { dir } => check(&dir, out),
    }
}

/// A guide's name becomes a folder name: letters, digits, `-`, `_` and `.` only.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn import(
    file: &Path,
    name: &str,
    into: Option<PathBuf>,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    if !valid_name(name) {
        return Err(Failure::Usage(anyhow::anyhow!(
            "--as {name:?}: expected letters, digits, '-', '_' or '.' (it names the folder guides/NAME)"
        )));
    }
    let bytes = super::read(file, &x12gate::x12::Limits::default())?;
    // SEF is ASCII that may hold high (latin1) characters in its notes.
    let text: String = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => e.into_bytes().iter().map(|b| char::from(*b)).collect(),
    };
    let builtin =
        x12gate::schema::builtin().map_err(|e| Failure::Operational(anyhow::anyhow!("{e}")))?;
    let converted = x12gate::sef::import(&text, builtin)
        .map_err(|e| Failure::Usage(anyhow::anyhow!("{}: {e}", file.display())))?;
    let dir = into.unwrap_or_else(|| Path::new("guides").join(name));
    for (path, toml) in &converted.files {
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Failure::Operational(anyhow::anyhow!("{}: {e}", parent.display())))?;
        }
        // Written beside and renamed, so a partner's folder never holds half a file (nor
        // the temporary of a write that failed).
        let tmp = target.with_extension("toml.tmp");
        std::fs::write(&tmp, toml)
            .and_then(|()| std::fs::rename(&tmp, &target))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                Failure::Operational(anyhow::anyhow!("{}: {e}", target.display()))
            })?;
        writeln!(out, "wrote {}", target.display())?;
    }
    for w in &converted.warnings {
        say!("WARN", "x12gate: {}: {w}", file.display());
    }
    // A set file an earlier import wrote for a set this guide no longer defines still loads
    // with the folder: said, not deleted (it may be the operator's own).
    if let Ok(files) = x12gate::guides::read_folder(&dir) {
        for (path, _) in files {
            if !converted.files.iter().any(|(written, _)| *written == path) {
                say!(
                    "WARN",
                    "x12gate: {}: this import did not write it, and it loads with the folder",
                    dir.join(&path).display()
                );
            }
        }
    }
    writeln!(
        out,
        "guide {} ({}, release {}): {} set(s), {} warning(s); use it with definitions = {:?} in a [[partner]] of partners.toml",
        converted.name,
        converted.title,
        converted.release,
        converted.files.len(),
        converted.warnings.len(),
        dir.display().to_string()
    )?;
    Ok(exit::OK)
}

/// `list`: the built-in sets by release, then each partner's guide.
fn list(config: Option<&Config>, out: &mut impl Write) -> Result<u8, Failure> {
    let builtin =
        x12gate::schema::builtin().map_err(|e| Failure::Operational(anyhow::anyhow!("{e}")))?;
    let mut by_release: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (release, id) in builtin.set_keys() {
        by_release.entry(release).or_default().push(id);
    }
    writeln!(out, "built in:")?;
    for (release, ids) in &by_release {
        writeln!(out, "  {release}: {}", ids.join(" "))?;
    }
    let mut code = exit::OK;
    for partner in config.map_or(&[][..], |c| c.partners.as_slice()) {
        let Some(dir) = &partner.checks.definitions else {
            continue;
        };
        writeln!(
            out,
            "partner {} ({}): {}",
            partner.name,
            partner.key(),
            dir.display()
        )?;
        let loaded = x12gate::guides::read_folder(dir)
            .and_then(|files| x12gate::guides::load_files(dir, &files).map(|_| files));
        match loaded {
            Ok(files) => {
                for (release, id, path) in x12gate::guides::sets_of(&files) {
                    let replaces = if builtin.set_keys().contains(&(release.clone(), id.clone())) {
                        "replaces the built-in"
                    } else {
                        "added"
                    };
                    writeln!(out, "  {release}: {id} ({replaces}; {path})")?;
                }
            }
            Err(e) => {
                writeln!(out, "  does not load: {e}")?;
                code = exit::USAGE;
            }
        }
    }
    Ok(code)
}

/// `check DIR`: the folder loads, or its first fault with file and line (exit 2).
fn check(dir: &Path, out: &mut impl Write) -> Result<u8, Failure> {
    let files = x12gate::guides::read_folder(dir).map_err(|e| Failure::Usage(e.into()))?;
    x12gate::guides::load_files(dir, &files).map_err(|e| Failure::Usage(e.into()))?;
    let sets = x12gate::guides::sets_of(&files);
    let named: Vec<String> = sets
        .iter()
        .map(|(release, id, _)| format!("{release}/{id}"))
        .collect();
    writeln!(
        out,
        "{}: {} set(s) load: {}",
        dir.display(),
        sets.len(),
        named.join(", ")
    )?;
    Ok(exit::OK)
}
