//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The repository root (where Cargo.toml is).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fixture's path.
pub fn fixture(name: &str) -> PathBuf {
    root().join("fixtures").join(name)
}

/// The `x12gate` binary, run in `dir` with no inherited config.
pub fn x12gate(dir: &std::path::Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("x12gate").expect("binary built by cargo");
    cmd.current_dir(dir);
    cmd
}
