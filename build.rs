//! Embeds every transaction-set definition under `schemas/` (and its table of older releases)
//! in the binary, so a fresh machine needs nothing beside it and adding a set is adding one
//! file.

use std::fmt::Write as _;
use std::path::Path;

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
            // `releases.toml`: which older releases are read as which defined one.
            if dir.extension().is_some_and(|e| e == "toml") {
                println!("cargo:rerun-if-changed={}", dir.display());
                files.push(dir);
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
    let mut out = String::from("/// Every file under `schemas/`: (path relative to it, text).\npub const FILES: &[(&str, &str)] = &[\n");
    for path in &files {
        let name = path
            .strip_prefix(&root)
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        );
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap_or_default()).join("schemas.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        panic!("cannot write {}: {e}", dest.display());
    }
}
