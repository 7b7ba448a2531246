//! Replays the fuzz corpus through the fuzz target's own checks, so CI exercises every seed
//! and every saved crash without the fuzzer (x509-parser's `run_all_fuzz_files.rs`).
//!
//! The seeds live in `fuzz/seeds/read/`; crashes the fuzzer saves land in
//! `fuzz/artifacts/read/` and are replayed too while they are there.

#[path = "../fuzz/check.rs"]
pub(crate) mod check;

use std::path::{Path, PathBuf};

use crate::util::root;

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Replays every file of `dir`, naming the one that fails.
fn replay(dir: &Path) -> usize {
    let files = files(dir);
    for path in &files {
        let bytes = std::fs::read(path).expect("readable corpus file");
        let result = std::panic::catch_unwind(|| check::check(&bytes));
        if let Err(panic) = result {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("{}: {message}", path.display());
        }
    }
    files.len()
}

#[test]
fn seeds_pass_the_fuzz_checks() {
    let n = replay(&root().join("fuzz/seeds/read"));
    assert!(
        n >= 5,
        "expected the seed corpus in fuzz/seeds/read, found {n} files"
    );
}

#[test]
fn saved_crashes_pass_the_fuzz_checks() {
    replay(&root().join("fuzz/artifacts/read"));
}

#[test]
fn seeds_are_clean_where_they_say_so() {
    // Seeds named `ok-*` are well formed: no findings, and they render back byte for byte
    // when they are in canonical form (`ok-canon-*`).
    for path in files(&root().join("fuzz/seeds/read")) {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !name.starts_with("ok-") {
            continue;
        }
        let bytes = std::fs::read(&path).expect("readable seed");
        let outcome = check::check_with(&bytes, x12gate::x12::Limits::default());
        // Well formed as to envelopes; their bodies are not real documents.
        let envelope: Vec<_> = outcome
            .findings
            .iter()
            .filter(|f| !crate::props::is_schema(f))
            .collect();
        assert!(
            envelope.is_empty(),
            "{name}: {:#?}",
            outcome
                .findings
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        );
        let rendered = outcome
            .rendered
            .unwrap_or_else(|| panic!("{name}: does not render back"));
        if name.starts_with("ok-canon-") {
            assert_eq!(
                check::show(&rendered),
                check::show(&bytes),
                "{name}: not rendered byte for byte"
            );
        }
    }
}

#[test]
fn clean_seeds_render() {
    let mut failures = Vec::new();
    for path in files(&root().join("fuzz/seeds/read")) {
        let bytes = std::fs::read(&path).expect("readable seed");
        let outcome = check::check_with(&bytes, x12gate::x12::Limits::default());
        if let Err(e) = check::clean_renders(&bytes, &outcome) {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
