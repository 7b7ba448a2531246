//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Output};
use std::time::{Duration, Instant};

/// How long a test waits while nothing it watches moves (files placed, requests the ERP
/// received, a process exiting) before it calls the run hung. A total deadline would fail a
/// slow but working run on a loaded machine; a stall limit fails only a run that stopped.
pub const STALL: Duration = Duration::from_secs(120);

/// Polls `done` until it holds; fails with `state()` only when `progress()` has not changed
/// for `stall` (however long the whole wait takes while it keeps changing).
pub fn wait_progressing<P: PartialEq + std::fmt::Debug>(
    stall: Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
    mut progress: impl FnMut() -> P,
    state: impl Fn() -> String,
) {
    let mut last = progress();
    let mut since = Instant::now();
    while !done() {
        let now = progress();
        if now != last {
            last = now;
            since = Instant::now();
        }
        assert!(
            since.elapsed() < stall,
            "nothing progressed for {stall:?} (still at {last:?}) waiting for {what}; {}",
            state()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for `child` to exit; kills it and fails only when `progress()` has not changed for
/// `stall`.
pub fn exit_progressing<P: PartialEq + std::fmt::Debug>(
    child: &mut Child,
    stall: Duration,
    what: &str,
    progress: impl FnMut() -> P,
) -> ExitStatus {
    let mut status = None;
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_progressing(
            stall,
            what,
            || {
                status = child.try_wait().expect("poll a child process");
                status.is_some()
            },
            progress,
            String::new,
        )
    }));
    if let Err(hung) = waited {
        let _ = child.kill();
        let _ = child.wait();
        std::panic::resume_unwind(hung);
    }
    status.expect("the child exited")
}

/// [`exit_progressing`] for a child whose stdout and stderr are piped: both are read while
/// it runs, so that a full pipe never stops it.
pub fn output_progressing<P: PartialEq + std::fmt::Debug>(
    mut child: Child,
    stall: Duration,
    what: &str,
    progress: impl FnMut() -> P,
) -> Output {
    fn drain(from: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut from) = from {
                let _ = from.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = exit_progressing(&mut child, stall, what, progress);
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// A clock for the processes a test starts (binaries built with `failpoints`): each process
/// given [`TestClock::env`] reads the file it names whenever it asks the time (see
/// `x12gate::time`), so the test moves their leases, retries and windows along by
/// [`TestClock::advance`] instead of sleeping through them.
pub struct TestClock {
    file: PathBuf,
    ahead_ms: std::cell::Cell<i64>,
}

impl TestClock {
    /// A clock in `dir`, at the wall's time until advanced.
    pub fn new(dir: &std::path::Path) -> TestClock {
        let clock = TestClock {
            file: dir.join("test-clock"),
            ahead_ms: std::cell::Cell::new(0),
        };
        clock.advance(0);
        clock
    }

    /// The variable and value that put a process on this clock.
    pub fn env(&self) -> (&'static str, &std::path::Path) {
        ("X12GATE_TEST_CLOCK", &self.file)
    }

    /// Moves the clock `ms` further ahead of the wall, for every process on it at once.
    pub fn advance(&self, ms: i64) {
        self.ahead_ms.set(self.ahead_ms.get() + ms);
        // Renamed over the old file, so that a process never reads half a number.
        let tmp = self.file.with_extension("new");
        std::fs::write(&tmp, self.ahead_ms.get().to_string()).expect("write the test clock");
        std::fs::rename(&tmp, &self.file).expect("move the test clock");
    }
}

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

/// A JSON file, read whole; `None` when it cannot be read or is not whole JSON.
pub fn read_json(path: &std::path::Path) -> Option<serde_json::Value> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The interchange whose set a business document's file in `out/` delivers (its
/// `delivery.interchange`); `None` for any other file (an interchange's translation) and for
/// one that is not whole JSON.
pub fn delivered_in(path: &std::path::Path) -> Option<String> {
    let doc = read_json(path)?;
    doc.get("document_key")?.as_str()?;
    Some(doc["delivery"]["interchange"].as_str()?.to_string())
}

/// The regular, not hidden, files directly in `dir` (an `out/` folder), by the interchange
/// their document delivers ([`delivered_in`]); every other file (an interchange's own
/// translation, a document file that is not whole) under `None`.
pub fn documents_by_interchange(
    dir: &std::path::Path,
) -> std::collections::BTreeMap<Option<String>, Vec<String>> {
    let mut found: std::collections::BTreeMap<Option<String>, Vec<String>> = Default::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    for name in names {
        found
            .entry(delivered_in(&dir.join(&name)))
            .or_default()
            .push(name);
    }
    found
}

/// The file name of the first delivery of an original 850 (BEG01 `00`) with PO number `po`
/// from `ZZ:<sender>`: its document key `ZZ:<sender>:850:<po>:00:` made safe.
pub fn order_file(sender: &str, po: &str) -> String {
    format!("ZZ_{sender}_850_{po}_00_.json")
}

/// Moves the clock of each of `keys` (interchange keys of gateway ZZ:X12GATE, with their
/// days) back in the SQLite registry `db`, as if they had been seen that long ago.
pub fn age(db: &std::path::Path, keys: &[(&str, i64)]) {
    let registry = x12gate::registry::Registry::open(
        &x12gate::registry::Database::from(db),
        x12gate::registry::Identity {
            qualifier: "ZZ",
            id: "X12GATE",
        },
    )
    .unwrap();
    for (key, days) in keys {
        registry.age_for_tests(key, *days).unwrap();
    }
}
