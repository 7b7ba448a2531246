//! Embeds every transaction-set definition under `schemas/` (and its table of older releases)
//! in the binary, so a fresh machine needs nothing beside it and adding a set is adding one
//! file.

use std::fmt::Write as _;
use std::path::Path;

// The gateway's own compiler of definitions (the x12-schema crate): every file is compiled
// here, so a definition that does not compile (an unknown segment, a bad syntax note, a
// document key the set does not hold) fails the build with its path and line, not a run.
use x12_schema as definition;

fn main() {
    // Read when the script runs, not when it was compiled: a script compiled for one
    // checkout and reused from a copied target folder embedded that checkout's files.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let root = Path::new(&manifest).join("schemas");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    if let Ok(versions) = std::fs::read_dir(&root) {
        for version in versions.flatten() {
            let dir = version.path();
            // `releases.toml`: which older releases are read as which defined one; the
            // folder's other files (README.md, RELEASES.md) are documentation.
            if !dir.is_dir() {
                if dir.extension().is_some_and(|e| e == "toml") {
                    println!("cargo:rerun-if-changed={}", dir.display());
                    files.push(dir);
                }
                continue;
            }
            println!("cargo:rerun-if-changed={}", dir.display());
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "toml") {
                    println!("cargo:rerun-if-changed={}", path.display());
                    files.push(path);
                }
            }
        }
    }
    files.sort();
    let texts: Vec<(String, String)> = files
        .iter()
        .map(|path| {
            let name = path
                .strip_prefix(&root)
                .map(|p| p.to_string_lossy().replace('\\', "/"))
                .unwrap_or_default();
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            (name, text)
        })
        .collect();
    // Each file is parsed here, once, and embedded as JSON: parsing TOML was nine tenths of
    // every start, and a file that is not TOML now fails the build with its path.
    let mut out = String::from(
        "/// Every file under `schemas/`: (path relative to it, its content as JSON, the line\n\
         /// of the TOML file a `structure` text starts on).\n\
         pub const FILES: &[(&str, &str, usize)] = &[\n",
    );
    let mut embedded = Vec::new();
    for (name, text) in &texts {
        let value: toml::Value =
            toml::from_str(text).unwrap_or_else(|e| panic!("schemas/{name}: {e}"));
        let json = serde_json::to_string(&value).unwrap_or_else(|e| panic!("schemas/{name}: {e}"));
        let first_line = definition::structure_line(text);
        let _ = writeln!(out, "    ({name:?}, {json:?}, {first_line}),");
        embedded.push((name.as_str(), json, first_line));
    }
    // Compiled exactly as the binary will read them, every one.
    let embedded: Vec<(&str, &str, usize)> = embedded
        .iter()
        .map(|(name, json, line)| (*name, json.as_str(), *line))
        .collect();
    if let Err(e) = definition::Schemas::load_embedded(&embedded).and_then(|s| s.check()) {
        panic!("{e}");
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap_or_default()).join("schemas.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        panic!("cannot write {}: {e}", dest.display());
    }
}
