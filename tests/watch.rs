//! `x12gate watch` end to end (SPEC sections 3, 6 and 7): the real binary runs in the
//! background while files arrive the ways partners deliver them (renamed from `.part`, `.tmp`
//! or a hidden name, written slowly in place, resent, a control number reused for other
//! content, broken, not X12 at all), and is stopped by SIGTERM or killed by SIGKILL.
//!
//! One checker, [`check_end_state`], holds every run to the same end state: each file exactly
//! once in `archive/` or `rejected/` (with its reason), each interchange accepted exactly once,
//! exactly the acknowledgments owed in the outbox, one complete document file (its order) in
//! `out/` per accepted key. So the interrupted runs are judged by the very rules of the uninterrupted one. Which of
//! several conflicting files of one key wins is a race by design; the checker reads the winner
//! from the archive and holds everything else to it.
//!
//! In the load corpus, copies of one key (resends, reused numbers) arrive far apart, as real
//! resends do; a restart takes the whole backlog at once, so there they do meet in batches of
//! two workers. Copies taken at the same moment also have tests of their own
//! (`copies_of_one_key_taken_together`, `corrected_resend_...`).
//!
//! Every wait is a bounded poll with a deadline and a message that shows the state, never a
//! bare sleep. `X12GATE_KEEP_FAILED=1` keeps a failed test's folder (logs, database) for a
//! look. The speed figure (`watch` against `process`) is an ignored test at the bottom.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::util::fixture;

/// The template's ISA13 (and IEA02), replaced to make new interchanges.
const TEMPLATE_ISA13: &str = "000000101";

// ---------------------------------------------------------------------------------------------
// A gateway in a temporary folder, and the watcher process.

/// The `[gateway]` settings a test cares about.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub settle_ms: u64,
    pub poll_ms: u64,
    pub lease_seconds: u64,
    pub workers: usize,
    pub summary_seconds: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            settle_ms: 300,
            poll_ms: 100,
            lease_seconds: 30,
            workers: 2,
            summary_seconds: 3600,
        }
    }
}

/// One test's gateway: a temporary folder with its own partners.toml and folders.
pub(crate) struct Gate {
    tmp: tempfile::TempDir,
    /// A PostgreSQL registry's URL; `None`: the SQLite file `x12gate.db`.
    postgres: Option<String>,
    /// Watcher runs so far, to name their logs.
    runs: std::sync::atomic::AtomicU32,
}

impl Gate {
    pub(crate) fn new(s: Settings) -> Gate {
        Gate::with_database(s, None)
    }

    /// A gateway whose registry is the PostgreSQL database `postgres` (when given).
    pub(crate) fn with_database(s: Settings, postgres: Option<String>) -> Gate {
        let tmp = tempfile::tempdir().expect("temporary folder");
        let database = postgres.clone().unwrap_or_else(|| "x12gate.db".into());
        let config = format!(
            r#"[gateway]
id_qualifier = "ZZ"
id = "X12GATE"
inbox = "inbox"
outbox = "outbox"
out = "out"
archive = "archive"
rejected = "rejected"
work = "work"
database = "{database}"
lease_seconds = {lease}
workers = {workers}
settle_ms = {settle}
poll_ms = {poll}
summary_seconds = {summary}

[[partner]]
name = "Acme Retail"
id_qualifier = "ZZ"
id = "ACME"
ack = "997"
ta1 = "on_error"
check_group_duplicates = true
contact = "edi-ops@example.com"
"#,
            lease = s.lease_seconds,
            workers = s.workers,
            settle = s.settle_ms,
            poll = s.poll_ms,
            summary = s.summary_seconds,
        );
        fs::write(tmp.path().join("partners.toml"), config).expect("write partners.toml");
        fs::create_dir_all(tmp.path().join("inbox")).expect("create inbox");
        Gate {
            tmp,
            postgres,
            runs: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The gateway's registry.
    pub(crate) fn database(&self) -> x12gate::registry::Database {
        match &self.postgres {
            Some(url) => x12gate::registry::Database::Postgres(x12gate::registry::Postgres {
                url: url.clone(),
                password_env: None,
                ca_file: None,
            }),
            None => x12gate::registry::Database::Sqlite(self.dir().join("x12gate.db")),
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        self.tmp.path()
    }
    pub(crate) fn inbox(&self) -> PathBuf {
        self.dir().join("inbox")
    }
    pub(crate) fn archive(&self) -> PathBuf {
        self.dir().join("archive")
    }
    pub(crate) fn rejected(&self) -> PathBuf {
        self.dir().join("rejected")
    }
    pub(crate) fn outbox(&self) -> PathBuf {
        self.dir().join("outbox")
    }
    pub(crate) fn out(&self) -> PathBuf {
        self.dir().join("out")
    }
    pub(crate) fn work(&self) -> PathBuf {
        self.dir().join("work")
    }

    /// Files left in work folders and temporary files left in the output folders.
    pub(crate) fn leftovers(&self) -> Vec<PathBuf> {
        let mut left = Vec::new();
        for dir in [self.out(), self.outbox(), self.rejected()] {
            if let Ok(d) = fs::read_dir(dir.join(".x12gate-tmp")) {
                left.extend(d.flatten().map(|e| e.path()));
            }
        }
        if let Ok(folders) = fs::read_dir(self.work()) {
            for f in folders.flatten() {
                if let Ok(d) = fs::read_dir(f.path()) {
                    left.extend(
                        d.flatten()
                            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                            .map(|e| e.path()),
                    );
                }
            }
        }
        left
    }

    /// Starts `x12gate watch ARGS...` in the background; its stderr goes to a log file.
    pub(crate) fn start(&self, args: &[&str]) -> Watcher {
        self.start_logging(args, "warn")
    }

    /// [`Gate::start`] with the log filter `filter`.
    pub(crate) fn start_logging(&self, args: &[&str], filter: &str) -> Watcher {
        self.spawn(args, Some(filter), None)
    }

    /// `x12gate watch ARGS...` with the log filter `filter` (`None`: the default level, as
    /// an operator runs it) and crash points `failpoints` armed.
    pub(crate) fn spawn(
        &self,
        args: &[&str],
        filter: Option<&str>,
        failpoints: Option<&str>,
    ) -> Watcher {
        let n = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let log = self.dir().join(format!("watch-{n}.log"));
        let err = fs::File::create(&log).expect("create the watcher's log");
        let mut command = Command::new(assert_cmd::cargo::cargo_bin("x12gate"));
        command
            .current_dir(self.dir())
            .arg("watch")
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("FAILPOINTS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err);
        if let Some(filter) = filter {
            command.env("RUST_LOG", filter);
        }
        if let Some(points) = failpoints {
            command.env("FAILPOINTS", points);
        }
        let child = command.spawn().expect("start x12gate watch");
        Watcher { child, log }
    }

    /// `x12gate watch --once`, to its end; returns the exit status and the log.
    pub(crate) fn once(&self) -> (ExitStatus, String) {
        let mut w = self.start(&["--once"]);
        let status = w.wait(Duration::from_secs(120));
        (status, w.log())
    }

    /// `x12gate history --json`, one object per decision.
    pub(crate) fn history(&self) -> Vec<Value> {
        let out = crate::util::x12gate(self.dir())
            .args(["history", "--json"])
            .output()
            .expect("run history");
        assert_eq!(
            out.status.code(),
            Some(0),
            "history: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("history is UTF-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("history --json lines are JSON"))
            .collect()
    }

    /// `x12gate stats --json`: interchange counts by disposition (or unfinished state).
    pub(crate) fn counts(&self) -> BTreeMap<String, u64> {
        let out = crate::util::x12gate(self.dir())
            .args(["stats", "--json"])
            .output()
            .expect("run stats");
        assert_eq!(out.status.code(), Some(0));
        let v: Value = serde_json::from_slice(&out.stdout).expect("stats --json is JSON");
        let mut counts = BTreeMap::new();
        for row in v["interchanges"].as_array().expect("interchanges") {
            *counts
                .entry(row["disposition"].as_str().unwrap_or("?").to_string())
                .or_insert(0) += row["count"].as_u64().unwrap_or(0);
        }
        counts
    }

    /// Names of the files in the inbox (temporary and hidden ones included).
    pub(crate) fn inbox_names(&self) -> BTreeSet<String> {
        fs::read_dir(self.inbox())
            .expect("read inbox")
            .flatten()
            .filter(|e| e.path().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// Files in the archive (any day) and in `rejected/` (not the reason files), by name.
    pub(crate) fn moved(&self) -> Moved {
        let mut m = Moved::default();
        for p in files_under(&self.archive()) {
            let name = file_name(&p);
            if let Some(stem) = name.strip_suffix(".reason.json") {
                m.archived_reasons.insert(stem.to_string(), p);
            } else if let Some(first) = m.archived.insert(name.clone(), p.clone()) {
                m.twice
                    .push(format!("{} and {}", first.display(), p.display()));
            }
        }
        for p in files_under(&self.rejected()) {
            let name = file_name(&p);
            if let Some(stem) = name.strip_suffix(".reason.json") {
                m.reasons.insert(stem.to_string(), p);
            } else if let Some(first) = m.rejected.insert(name.clone(), p.clone()) {
                m.twice
                    .push(format!("{} and {}", first.display(), p.display()));
            }
        }
        m
    }

    /// One line describing where things are, for failure messages.
    pub(crate) fn state(&self) -> String {
        let m = self.moved();
        format!(
            "inbox {} file(s), archive {}, rejected {} (+{} reasons), outbox {}, out {}",
            self.inbox_names().len(),
            m.archived.len(),
            m.rejected.len(),
            m.reasons.len(),
            top_files(&self.outbox()).len(),
            top_files(&self.out()).len()
        )
    }
}

impl Drop for Gate {
    /// With `X12GATE_KEEP_FAILED=1`, a failed test's folder is kept for a look.
    fn drop(&mut self) {
        if std::thread::panicking() && std::env::var_os("X12GATE_KEEP_FAILED").is_some() {
            self.tmp.disable_cleanup(true);
            eprintln!("kept the failed test's folder: {}", self.dir().display());
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Moved {
    pub archived: BTreeMap<String, PathBuf>,
    pub rejected: BTreeMap<String, PathBuf>,
    /// Reason files, by the name of the rejected file they explain.
    pub reasons: BTreeMap<String, PathBuf>,
    /// Reason files that followed their file from `rejected/` to the archive (its
    /// interchanges accepted later), by the name of that file.
    pub archived_reasons: BTreeMap<String, PathBuf>,
    /// Names found twice (in different archive days).
    pub twice: Vec<String>,
}

impl Moved {
    pub(crate) fn count(&self) -> usize {
        self.archived.len() + self.rejected.len()
    }
}

/// A watcher process; killed if a test ends while it still runs.
pub(crate) struct Watcher {
    pub child: Child,
    pub log: PathBuf,
}

impl Watcher {
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(
            status.success(),
            "kill -{signal} {} failed",
            self.child.id()
        );
    }

    /// Waits for the process to exit; fails (after killing it) if it is not done in time.
    pub(crate) fn wait(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the watcher") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the watcher did not exit within {within:?}; its log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `done` until it holds; fails after `within` with `state()` in the message.
pub(crate) fn wait_for(
    within: Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
    state: impl Fn() -> String,
) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}; {}",
            state()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

pub(crate) fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Regular files under `dir`, recursively, skipping hidden entries (`.x12gate-tmp`).
pub(crate) fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let p = e.path();
        if p.is_dir() {
            found.extend(files_under(&p));
        } else if p.is_file() {
            found.push(p);
        }
    }
    found
}

/// Names of the regular, not hidden, files directly in `dir`.
pub(crate) fn top_files(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// The files directly in `dir` (the outbox), grouped by the key number their name starts
/// with (`ZZ_ACME_000000123.`); `None` for names of no such key.
pub(crate) fn by_key_name(dir: &Path) -> BTreeMap<Option<u32>, Vec<String>> {
    let mut found: BTreeMap<Option<u32>, Vec<String>> = BTreeMap::new();
    for name in top_files(dir) {
        let n = name
            .strip_prefix("ZZ_ACME_")
            .and_then(|rest| rest.get(..10))
            .and_then(|head| head.strip_suffix('.'))
            .and_then(|digits| digits.parse().ok());
        found.entry(n).or_default().push(name);
    }
    found
}

/// The files directly in `out/` (business documents' files), grouped by the key number of
/// the interchange each delivers (its `delivery.interchange`, `ZZ:ACME:000000123`); `None`
/// for any other file: one that is not a whole document file, or of no such key.
pub(crate) fn out_by_key(dir: &Path) -> BTreeMap<Option<u32>, Vec<String>> {
    let mut found: BTreeMap<Option<u32>, Vec<String>> = BTreeMap::new();
    for (interchange, names) in crate::util::documents_by_interchange(dir) {
        let n = interchange
            .as_deref()
            .and_then(|k| k.strip_prefix("ZZ:ACME:"))
            .filter(|digits| digits.len() == 9)
            .and_then(|digits| digits.parse().ok());
        found.entry(n).or_default().extend(names);
    }
    found
}

/// The watcher's final line: files taken, accepted, duplicates, conflicts, files rejected.
pub(crate) fn final_counts(log: &str) -> Option<[u64; 5]> {
    let line = log
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("x12gate watch: "))?;
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect();
    numbers.try_into().ok()
}

// ---------------------------------------------------------------------------------------------
// Interchanges and planned files.

pub(crate) fn template() -> &'static str {
    static T: OnceLock<String> = OnceLock::new();
    T.get_or_init(|| fs::read_to_string(fixture("850-004010.x12")).expect("the 850 fixture"))
}

/// The fixture 850 as interchange `n` (ISA13, IEA02, GS06 and GE02), ordering `po`.
pub(crate) fn interchange(n: u32, po: &str) -> String {
    let t = template();
    let replace = |text: String, from: &str, to: &str, times: usize| {
        assert_eq!(text.matches(from).count(), times, "template: {from}");
        text.replace(from, to)
    };
    let text = replace(t.to_string(), TEMPLATE_ISA13, &format!("{n:09}"), 2);
    let text = replace(text, "*101*X*004010~", &format!("*{n}*X*004010~"), 1);
    let text = replace(text, "GE*1*101~", &format!("GE*1*{n}~"), 1);
    replace(text, "PO-4471", po, 1)
}

/// The same interchange as sent again later: other enveloping time and CRLF line endings,
/// which the fingerprint ignores (SPEC section 3).
pub(crate) fn re_enveloped(text: &str) -> String {
    assert!(text.contains("*240115*0930*U*"));
    text.replace("*240115*0930*U*", "*240116*1015*U*")
        .replace("~\n", "~\r\n")
}

/// SE01 one short: the set is rejected (997 AK5 R), so the interchange is.
pub(crate) fn broken_se01(text: &str) -> String {
    assert!(text.contains("SE*13*0001~"));
    text.replace("SE*13*0001~", "SE*12*0001~")
}

pub(crate) fn key(n: u32) -> String {
    format!("ZZ:ACME:{n:09}")
}

/// How a file reaches the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Written under its name in one go.
    Direct,
    /// Written as `NAME.part`, renamed once older than the settle time.
    Part,
    /// Written as `NAME.tmp`, renamed likewise.
    Tmp,
    /// Written as `.NAME`, renamed likewise.
    Hidden,
    /// Written in place in several chunks with pauses shorter than the settle time.
    Slow,
}

/// One interchange in a planned file.
#[derive(Debug, Clone)]
pub(crate) struct Ic {
    pub n: u32,
    pub po: String,
    /// SE01 wrong: the interchange is rejected.
    pub broken: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Planned {
    pub name: String,
    pub bytes: Vec<u8>,
    pub arrival: Arrival,
    /// Empty for a file that is not X12.
    pub ics: Vec<Ic>,
}

/// Files that are not X12 at all.
pub(crate) fn not_x12(i: usize) -> Vec<u8> {
    match i % 4 {
        0 => b"Hello, this is not EDI.\n".to_vec(),
        1 => b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nendobj\n".to_vec(),
        2 => br#"{"order": "PO-1", "lines": []}"#.to_vec(),
        _ => (0..=255u8).cycle().take(700).collect(),
    }
}

/// A mixed load of `count` files with keys above `base`. Per 20 files: 10 plain, an original
/// and its exact resend, three files reusing one control number for different content, one
/// with SE01 wrong, one not X12, one with two interchanges, and an original with a resend that
/// only changed the enveloping time and the line endings. Files of a key of their own arrive
/// by every way (with `slow`, one in ten is written slowly in place); the order of arrival is
/// shuffled and the names (`fNNNN.x12`) follow it.
pub(crate) fn corpus(count: usize, base: u32, slow: bool) -> Vec<Planned> {
    let mut n = base;
    let mut next = || {
        n += 1;
        n
    };
    let mut files = Vec::with_capacity(count);
    let (mut resend, mut conflict, mut resend_env) = (None, None, None);
    for i in 0..count {
        let name = format!("f{i:04}.x12");
        let good = |n: u32, v: usize| Ic {
            n,
            po: format!("PO-{n}-{v}"),
            broken: false,
        };
        let (bytes, ics): (String, Vec<Ic>) = match i % 20 {
            10 => {
                let ic = good(next(), 0);
                let text = interchange(ic.n, &ic.po);
                resend = Some((text.clone(), ic.clone()));
                (text, vec![ic])
            }
            11 => {
                let (text, ic) = resend.take().expect("slot 10 came first");
                (text, vec![ic])
            }
            12 => {
                let ic = good(next(), 0);
                conflict = Some(ic.n);
                (interchange(ic.n, &ic.po), vec![ic])
            }
            v @ (13 | 14) => {
                let ic = good(conflict.expect("slot 12 came first"), v - 12);
                (interchange(ic.n, &ic.po), vec![ic])
            }
            15 => {
                let mut ic = good(next(), 0);
                ic.broken = true;
                (broken_se01(&interchange(ic.n, &ic.po)), vec![ic])
            }
            16 => {
                files.push(Planned {
                    name,
                    bytes: not_x12(i),
                    arrival: Arrival::Direct,
                    ics: Vec::new(),
                });
                continue;
            }
            17 => {
                let (a, b) = (good(next(), 0), good(next(), 0));
                let text = interchange(a.n, &a.po) + &interchange(b.n, &b.po);
                (text, vec![a, b])
            }
            18 => {
                let ic = good(next(), 0);
                let text = interchange(ic.n, &ic.po);
                resend_env = Some((re_enveloped(&text), ic.clone()));
                (text, vec![ic])
            }
            19 => {
                let (text, ic) = resend_env.take().expect("slot 18 came first");
                (text, vec![ic])
            }
            _ => {
                let ic = good(next(), 0);
                (interchange(ic.n, &ic.po), vec![ic])
            }
        };
        files.push(Planned {
            name,
            bytes: bytes.into_bytes(),
            arrival: Arrival::Direct,
            ics,
        });
    }
    // Copies of one key (resends, conflicting contents) arrive in one go (no temporary name,
    // no slow write) and far apart in the order of arrival.
    let copies = |f: &Planned| {
        f.ics.first().map_or(0, |ic| {
            files
                .iter()
                .filter(|g| g.ics.iter().any(|o| o.n == ic.n))
                .count()
        })
    };
    let shared: Vec<bool> = files.iter().map(|f| copies(f) > 1).collect();
    for (i, f) in files.iter_mut().enumerate() {
        f.arrival = match i % 6 {
            _ if shared[i] => Arrival::Direct,
            _ if slow && i % 10 == 7 => Arrival::Slow,
            1 => Arrival::Part,
            3 => Arrival::Tmp,
            5 => Arrival::Hidden,
            _ => Arrival::Direct,
        };
    }
    // Shuffle (a fixed xorshift, so every run sees the same order), then deal the files out
    // keeping copies of one key at least SPREAD places apart.
    const SPREAD: usize = 30;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15 ^ u64::from(base);
    for i in (1..files.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        files.swap(i, (state % (i as u64 + 1)) as usize);
    }
    let mut pool: VecDeque<Planned> = files.into();
    let mut dealt: Vec<Planned> = Vec::with_capacity(count);
    let mut last: BTreeMap<u32, usize> = BTreeMap::new();
    while !pool.is_empty() {
        let pos = dealt.len();
        let free = |f: &Planned| {
            f.ics
                .iter()
                .all(|ic| last.get(&ic.n).is_none_or(|&at| pos - at >= SPREAD))
        };
        // Files of keys with copies go first when they may, so none is left for the end.
        let pick = pool
            .iter()
            .position(|f| free(f) && f.ics.len() == 1 && copies_in(&pool, f) > 1)
            .filter(|_| pos % 3 == 0)
            .or_else(|| pool.iter().position(free))
            .expect("the corpus is too small to keep copies of one key apart");
        let mut f = pool.remove(pick).expect("picked from the pool");
        for ic in &f.ics {
            last.insert(ic.n, pos);
        }
        f.name = format!("f{pos:04}.x12");
        dealt.push(f);
    }
    dealt
}

/// How many files in `pool` carry `f`'s first key (`f` included).
fn copies_in(pool: &VecDeque<Planned>, f: &Planned) -> usize {
    let n = f.ics[0].n;
    pool.iter()
        .filter(|g| g.ics.iter().any(|o| o.n == n))
        .count()
}

/// The name a file is first written under.
fn first_name(f: &Planned) -> String {
    match f.arrival {
        Arrival::Part => format!("{}.part", f.name),
        Arrival::Tmp => format!("{}.tmp", f.name),
        Arrival::Hidden => format!(".{}", f.name),
        Arrival::Direct | Arrival::Slow => f.name.clone(),
    }
}

/// Writes `bytes` to `path` in place in `chunks` parts, pausing `pause` between them.
pub(crate) fn write_slowly(path: &Path, bytes: &[u8], chunks: usize, pause: Duration) {
    use std::io::Write;
    let mut f = fs::File::create(path).expect("create a slowly written file");
    let size = bytes.len().div_ceil(chunks);
    for (i, part) in bytes.chunks(size).enumerate() {
        if i > 0 {
            std::thread::sleep(pause);
        }
        f.write_all(part).expect("write a chunk");
    }
}

/// Drops `files` into `inbox` while a watcher runs: one every `gap`, temporary names renamed
/// once they are older than `hold` (so a watcher that took them would have taken them), slow
/// files written by threads of their own. Returns when every file is under its final name.
pub(crate) fn drop_files(
    inbox: &Path,
    files: &[Planned],
    gap: Duration,
    hold: Duration,
    pause: Duration,
) {
    let mut pending: VecDeque<(PathBuf, PathBuf, Instant)> = VecDeque::new();
    let rename = |from: &Path, to: &Path| {
        fs::rename(from, to).unwrap_or_else(|e| {
            panic!(
                "renaming {} to its final name: {e} (did the watcher take a file under a temporary name?)",
                from.display()
            )
        })
    };
    std::thread::scope(|scope| {
        for f in files {
            let at = inbox.join(first_name(f));
            match f.arrival {
                Arrival::Slow => {
                    scope.spawn(move || write_slowly(&at, &f.bytes, 6, pause));
                }
                Arrival::Direct => fs::write(&at, &f.bytes).expect("drop a file"),
                _ => {
                    fs::write(&at, &f.bytes).expect("drop a temporary file");
                    pending.push_back((at, inbox.join(&f.name), Instant::now()));
                }
            }
            while pending.front().is_some_and(|(.., t)| t.elapsed() >= hold) {
                let (from, to, _) = pending.pop_front().expect("checked");
                rename(&from, &to);
            }
            std::thread::sleep(gap);
        }
        for (from, to, t) in pending {
            std::thread::sleep(hold.saturating_sub(t.elapsed()));
            rename(&from, &to);
        }
    });
}

/// Writes every file under its final name at once (for the interrupted runs).
pub(crate) fn drop_all(inbox: &Path, files: &[Planned]) {
    for f in files {
        fs::write(inbox.join(&f.name), &f.bytes).expect("drop a file");
    }
}

// ---------------------------------------------------------------------------------------------
// The end state.

pub(crate) fn reason_json(path: &Path) -> Value {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading the reason file {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

/// How strictly [`check_end_state`] counts events that a restart may legitimately repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    /// Nothing was cut short: exactly one decision per file and interchange.
    Clean,
    /// A process was killed: a file whose interchanges were decided but which was not yet
    /// placed is processed again (a duplicate, or a conflict replayed), so those events may
    /// repeat. Nothing else may differ: every file placed once, every reason present.
    Killed,
}

/// Checks the end state of a gateway that was given `files`; the inbox must be empty.
pub(crate) fn check_end_state(gate: &Gate, files: &[Planned], run: Run) {
    // A watcher stopped (or killed) leaves the documents it had no time to write into `out/`
    // queued in the registry: what is there once they are written is judged.
    let drained = crate::util::x12gate(gate.dir())
        .args(["deliver", "--drain", "--timeout", "120"])
        .output()
        .expect("run deliver");
    assert!(
        drained.status.success(),
        "deliver --drain: {}",
        String::from_utf8_lossy(&drained.stderr)
    );
    let inbox = gate.inbox_names();
    assert!(inbox.is_empty(), "files left in the inbox: {inbox:?}");
    let m = gate.moved();
    assert!(m.twice.is_empty(), "files archived twice: {:?}", m.twice);

    // Every file exactly once, in one place, intact.
    let planned: BTreeSet<&str> = files.iter().map(|f| f.name.as_str()).collect();
    let both: Vec<&String> = m
        .archived
        .keys()
        .filter(|n| m.rejected.contains_key(*n))
        .collect();
    assert!(both.is_empty(), "in archive and rejected: {both:?}");
    let got: BTreeSet<&str> = m
        .archived
        .keys()
        .chain(m.rejected.keys())
        .map(String::as_str)
        .collect();
    let missing: Vec<_> = planned.difference(&got).collect();
    let extra: Vec<_> = got.difference(&planned).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "lost: {missing:?}; unexpected (doubled or renamed): {extra:?}"
    );
    assert_eq!(m.count(), files.len());
    for f in files {
        let p = m.archived.get(&f.name).or(m.rejected.get(&f.name));
        let p = p.expect("checked above");
        assert!(
            fs::read(p).expect("read a moved file") == f.bytes,
            "{} was changed",
            p.display()
        );
    }

    // Reasons: one per rejected file, none for a file that is not there.
    for (name, path) in &m.reasons {
        assert!(
            m.rejected.contains_key(name),
            "reason without its file: {}",
            path.display()
        );
    }
    let without: Vec<&String> = m
        .rejected
        .keys()
        .filter(|n| !m.reasons.contains_key(*n))
        .collect();
    assert!(without.is_empty(), "rejected without a reason: {without:?}");
    let left = gate.leftovers();
    assert!(
        left.is_empty(),
        "temporary or unfinished files left: {left:?}"
    );
    let reason = |name: &str| m.reasons.get(name).map(|p| reason_json(p));

    let history = gate.history();
    let events = |event: &str, n: u32| -> Vec<&Value> {
        history
            .iter()
            .filter(|e| e["event"] == event && e["key"] == key(n).as_str())
            .collect()
    };
    let event_file = |e: &Value| {
        Path::new(e["file"].as_str().unwrap_or_default())
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let at_least = |got: usize, want: usize, what: &str| match run {
        Run::Clean => assert_eq!(got, want, "{what}"),
        Run::Killed => assert!(got >= want, "{what}: {got} < {want}"),
    };

    // Files that are not X12: rejected, with a reason naming no interchange.
    for f in files.iter().filter(|f| f.ics.is_empty()) {
        assert!(
            m.rejected.contains_key(&f.name),
            "{} is not X12 but was archived",
            f.name
        );
        if let Some(r) = reason(&f.name) {
            assert_eq!(r["disposition"], "rejected", "{}: {r}", f.name);
            assert!(r["correlation_id"].is_null(), "{}: {r}", f.name);
        }
        let n = history
            .iter()
            .filter(|e| e["event"] == "unreadable" && event_file(e) == f.name)
            .count();
        at_least(n, 1, &format!("unreadable events of {}", f.name));
    }

    // Every interchange of every X12 file was decided while the file was in the inbox: a
    // file taken before it was complete would lack the decision of its later interchanges.
    for f in files.iter().filter(|f| !f.ics.is_empty()) {
        for ic in &f.ics {
            let decided = history.iter().any(|e| {
                e["key"] == key(ic.n).as_str() && event_file(e) == f.name && e["event"] != "placed"
            });
            assert!(
                decided,
                "{}: no decision on {} read from this file; its decisions (of {} events): {:#?}",
                f.name,
                key(ic.n),
                history.len(),
                history
                    .iter()
                    .filter(|e| e["key"] == key(ic.n).as_str())
                    .collect::<Vec<_>>()
            );
        }
    }

    // Per key: one winner, everything else measured against it.
    let mut by_key: BTreeMap<u32, Vec<(&Planned, &Ic)>> = BTreeMap::new();
    for f in files {
        for ic in &f.ics {
            by_key.entry(ic.n).or_default().push((f, ic));
        }
    }
    // Acknowledgments by key: names start with the key's safe name and a dot; what stands
    // between that and the extension (a content tag, `conflict-<fp>`) is the gateway's
    // business. Documents by the interchange their file says delivered them.
    let outbox = by_key_name(&gate.outbox());
    let out = out_by_key(&gate.out());
    let planned_keys: BTreeSet<u32> = by_key.keys().copied().collect();
    let stray: Vec<&String> = outbox
        .iter()
        .chain(&out)
        .filter(|(n, _)| n.is_none_or(|n| !planned_keys.contains(&n)))
        .flat_map(|(_, names)| names)
        .collect();
    assert!(stray.is_empty(), "outputs of no planned key: {stray:?}");
    let none = Vec::new();
    let (mut accepted_keys, mut rejected_keys) = (0u64, 0u64);
    for (&n, copies) in &by_key {
        let acks = outbox.get(&Some(n)).unwrap_or(&none);
        let docs = out.get(&Some(n)).unwrap_or(&none);
        let (fa, rest): (Vec<&String>, Vec<&String>) =
            acks.iter().partition(|a| a.ends_with(".997.x12"));
        let (ta1, rest): (Vec<&String>, Vec<&String>) = rest
            .into_iter()
            .partition(|a| a.ends_with(".ta1.x12") && a.contains("conflict"));
        assert!(
            rest.is_empty(),
            "{}: unexpected acknowledgments {rest:?}",
            key(n)
        );
        assert_eq!(fa.len(), 1, "{}: one 997, found {fa:?}", key(n));
        let ack = fs::read_to_string(gate.outbox().join(fa[0])).expect("read the 997");
        assert!(ack.contains(&format!("AK1*PO*{n}~")), "{}:\n{ack}", fa[0]);
        for name in &ta1 {
            let t = fs::read_to_string(gate.outbox().join(name)).expect("read a TA1");
            assert!(
                t.contains(&format!("TA1*{n:09}*")) && t.contains("*R*025~"),
                "{name}:\n{t}"
            );
        }
        if copies.iter().all(|(_, ic)| ic.broken) {
            rejected_keys += 1;
            for (f, _) in copies {
                assert!(m.rejected.contains_key(&f.name), "{} was archived", f.name);
                if let Some(r) = reason(&f.name) {
                    assert_eq!(r["disposition"], "rejected", "{}: {r}", f.name);
                    assert_eq!(r["correlation_id"], key(n).as_str(), "{}: {r}", f.name);
                }
            }
            assert!(ack.contains("AK5*R"), "{}:\n{ack}", fa[0]);
            assert!(ta1.is_empty(), "{}: {ta1:?}", key(n));
            assert!(docs.is_empty(), "{}: translated {docs:?}", key(n));
            assert_eq!(events("rejected", n).len(), 1, "rejections of {}", key(n));
            assert!(events("accepted", n).is_empty(), "{}", key(n));
            continue;
        }
        accepted_keys += 1;
        assert!(ack.contains("AK9*A*1*1*1~"), "{}:\n{ack}", fa[0]);
        let winners: BTreeSet<&str> = copies
            .iter()
            .filter(|(f, _)| m.archived.contains_key(&f.name))
            .map(|(_, ic)| ic.po.as_str())
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "{}: archived copies must all be one content, the accepted one: {winners:?}",
            key(n)
        );
        let winner = *winners.iter().next().expect("one winner");
        let (mut resends, mut losers) = (0, 0);
        for (f, ic) in copies {
            if ic.po == winner {
                resends += 1;
                assert!(m.archived.contains_key(&f.name), "{} not archived", f.name);
            } else {
                losers += 1;
                assert!(m.rejected.contains_key(&f.name), "{} archived", f.name);
                if let Some(r) = reason(&f.name) {
                    assert_eq!(r["disposition"], "conflict", "{}: {r}", f.name);
                    assert_eq!(r["reason_code"], "025", "{}: {r}", f.name);
                }
            }
        }
        // One TA1 025 per conflicting content (here every losing file has its own content).
        assert_eq!(ta1.len(), losers, "{}: conflict TA1s {ta1:?}", key(n));
        let accepted = events("accepted", n);
        assert_eq!(accepted.len(), 1, "acceptances of {}", key(n));
        let from = event_file(accepted[0]);
        assert!(
            copies
                .iter()
                .any(|(f, ic)| f.name == from && ic.po == winner),
            "{} was accepted from {from}, which is not a copy of the archived content",
            key(n)
        );
        at_least(
            events("duplicate", n).len(),
            resends - 1,
            &format!("duplicates of {}", key(n)),
        );
        at_least(
            events("conflict", n).len(),
            losers,
            &format!("conflicts of {}", key(n)),
        );
        // One document delivered, complete and of the accepted content: the order's first
        // delivery, under its document key's name.
        assert_eq!(docs.len(), 1, "{}: documents {docs:?}", key(n));
        assert_eq!(
            docs[0],
            crate::util::order_file("ACME", winner),
            "{}: {docs:?}",
            key(n)
        );
        let doc = fs::read_to_string(gate.out().join(&docs[0])).expect("read a document");
        assert!(
            doc.contains(&format!("\"{winner}\"")),
            "{} is not of {winner}",
            docs[0]
        );
        assert!(
            doc.contains("GASKET SET") && doc.contains("\"CTT\""),
            "{} is truncated",
            docs[0]
        );
        let doc: Value = serde_json::from_str(&doc).expect("checked whole by out_by_key");
        assert_eq!(
            doc["document_key"],
            format!("ZZ:ACME:850:{winner}:00:"),
            "{}",
            docs[0]
        );
        assert_eq!(doc["delivery"]["disposition"], "new", "{}", docs[0]);
        assert_eq!(
            doc["set"]["content"]["BEG"]["purchase_order_number_03"], winner,
            "{}",
            docs[0]
        );
    }

    // The registry: every key decided once, nothing left unfinished.
    let accepted_events = history.iter().filter(|e| e["event"] == "accepted").count();
    assert_eq!(accepted_events as u64, accepted_keys, "accepted events");
    assert!(
        !history.iter().any(|e| e["event"] == "in_progress"),
        "no one may give up waiting"
    );
    let counts = gate.counts();
    let want: BTreeMap<String, u64> = [
        ("accepted".to_string(), accepted_keys),
        ("rejected".to_string(), rejected_keys),
    ]
    .into_iter()
    .filter(|(_, c)| *c > 0)
    .collect();
    assert_eq!(counts, want, "interchanges by disposition");
}

/// How many moved files the final line should report as taken etc., for a clean run.
pub(crate) fn expected_summary(files: &[Planned]) -> [u64; 5] {
    let ics: u64 = files.iter().map(|f| f.ics.len() as u64).sum();
    let mut seen: BTreeSet<u32> = BTreeSet::new();
    let mut contents: BTreeMap<u32, BTreeSet<&str>> = BTreeMap::new();
    for ic in files.iter().flat_map(|f| &f.ics) {
        seen.insert(ic.n);
        contents.entry(ic.n).or_default().insert(&ic.po);
    }
    let conflicts: u64 = contents.values().map(|c| c.len() as u64 - 1).sum();
    let broken = files
        .iter()
        .flat_map(|f| &f.ics)
        .filter(|i| i.broken)
        .count() as u64;
    let accepted = seen.len() as u64 - broken;
    let duplicates = ics - accepted - conflicts - broken;
    let rejected_files = files
        .iter()
        .filter(|f| f.ics.is_empty() || f.ics.iter().any(|i| i.broken))
        .count() as u64
        + conflicts;
    [
        files.len() as u64,
        accepted,
        duplicates,
        conflicts,
        rejected_files,
    ]
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// 300 files arrive while the watcher runs: each ends once in archive or rejected, each
/// interchange is accepted once, the outbox holds exactly what is owed, and no file is taken
/// while it is still being written.
#[test]
fn load_of_300_files_each_decided_once() {
    let settings = Settings {
        settle_ms: 500,
        workers: 3,
        ..Settings::default()
    };
    let gate = Gate::new(settings);
    let files = corpus(300, 10_000, true);
    assert!(files
        .iter()
        .any(|f| f.arrival == Arrival::Slow && f.ics.len() == 2));
    let mut w = gate.start(&[]);
    // Slow files pause 120 ms between six chunks: each pause well under the settle time,
    // the whole write longer than it.
    drop_files(
        &gate.inbox(),
        &files,
        Duration::from_millis(10),
        Duration::from_millis(settings.settle_ms + 200),
        Duration::from_millis(120),
    );
    wait_for(
        Duration::from_secs(240),
        "every file to be archived or rejected",
        || gate.moved().count() >= files.len() && gate.inbox_names().is_empty(),
        || gate.state(),
    );
    w.signal("TERM");
    let status = w.wait(Duration::from_secs(60));
    let log = w.log();
    assert_eq!(status.code(), Some(0), "exit after SIGTERM; log:\n{log}");
    check_end_state(&gate, &files, Run::Clean);
    assert_eq!(
        final_counts(&log),
        Some(expected_summary(&files)),
        "final line (taken, accepted, duplicates, conflicts, rejected files); log:\n{log}"
    );
    // The slow files were read complete: archived, or rejected only as a losing conflict.
    let m = gate.moved();
    for f in files.iter().filter(|f| f.arrival == Arrival::Slow) {
        if let Some(r) = m.reasons.get(&f.name).map(|p| reason_json(p)) {
            assert_eq!(
                r["disposition"], "conflict",
                "{} (written slowly): {r}",
                f.name
            );
        }
    }
}

/// Copies of one key arriving together (a partner resending a batch at once, or reusing a
/// number) are taken by different workers at the same moment; the key must still be decided
/// once and every other copy against that decision: a duplicate or a conflict.
#[test]
fn copies_of_one_key_taken_together() {
    let gate = Gate::new(Settings {
        workers: 3,
        ..Settings::default()
    });
    let mut files = Vec::new();
    for k in 0..8u32 {
        let n = 40_000 + k;
        let ic = |v: u32| Ic {
            n,
            po: format!("PO-{n}-{v}"),
            broken: false,
        };
        // Even keys: the same content twice (a resend); odd keys: other content (a conflict).
        // Half the pairs have neighbouring names, half far apart ones: taken one by one or
        // in batches, copies meet in one batch or in two workers.
        let second = ic(k % 2);
        let names = if k < 4 {
            [format!("k{k}-a.x12"), format!("k{k}-b.x12")]
        } else {
            [format!("a-k{k}.x12"), format!("z-k{k}.x12")]
        };
        for (name, ic) in names.into_iter().zip([ic(0), second]) {
            files.push(Planned {
                name,
                bytes: interchange(n, &ic.po).into_bytes(),
                arrival: Arrival::Direct,
                ics: vec![ic],
            });
        }
    }
    drop_all(&gate.inbox(), &files);
    let (status, log) = gate.once();
    assert_eq!(
        status.code(),
        Some(3),
        "--once rejected files: exit 3; log:\n{log}"
    );
    check_end_state(&gate, &files, Run::Clean);
    assert_eq!(
        final_counts(&log),
        Some(expected_summary(&files)),
        "log:\n{log}"
    );
}

/// A rejected interchange and its corrected resend (same control number, other content)
/// arriving together. Whichever is claimed first, the corrected one must be accepted: after
/// the rejection it is processed as new (SPEC 3), and had it come first, the broken copy is
/// the conflict. A copy must wait for an unfinished claim of its key, not be judged
/// against it.
#[test]
fn corrected_resend_arriving_with_its_rejected_original() {
    let gate = Gate::new(Settings::default());
    let n = 45_000;
    let broken = broken_se01(&interchange(n, "PO-BAD"));
    let corrected = interchange(n, "PO-GOOD");
    fs::write(gate.inbox().join("a-broken.x12"), &broken).unwrap();
    fs::write(gate.inbox().join("b-corrected.x12"), &corrected).unwrap();
    let (status, log) = gate.once();
    assert_eq!(
        status.code(),
        Some(3),
        "--once rejected files: exit 3; log:\n{log}"
    );
    let m = gate.moved();
    let history = gate.history();
    let decisions: Vec<String> = history
        .iter()
        .map(|e| format!("{} {}", e["event"], e["file"]))
        .collect();
    if m.rejected.contains_key("a-broken.x12") {
        // The corrected one first: the broken copy is the conflict, and stays rejected.
        assert_eq!(
            m.archived.keys().collect::<Vec<_>>(),
            ["b-corrected.x12"],
            "the corrected interchange is accepted; decisions: {decisions:#?}; log:\n{log}"
        );
        let r = reason_json(&m.reasons["a-broken.x12"]);
        assert_eq!(r["disposition"], "conflict", "{r}");
    } else {
        // The broken one first: rejected, then out of rejected/ with its reason once the
        // corrected one was accepted.
        assert_eq!(
            m.archived.keys().collect::<Vec<_>>(),
            ["a-broken.x12", "b-corrected.x12"],
            "decisions: {decisions:#?}; log:\n{log}"
        );
        assert!(m.rejected.is_empty() && m.reasons.is_empty());
        assert!(m.archived_reasons.contains_key("a-broken.x12"));
        assert!(
            history
                .iter()
                .any(|e| e["event"] == "placed" && e["why"] == "accepted"),
            "{decisions:#?}"
        );
    }
    let accepted: Vec<&Value> = history
        .iter()
        .filter(|e| e["event"] == "accepted")
        .collect();
    assert_eq!(accepted.len(), 1, "{decisions:#?}");
    assert!(accepted[0]["file"]
        .as_str()
        .is_some_and(|f| f.ends_with("b-corrected.x12")));
    let docs = out_by_key(&gate.out());
    assert_eq!(
        docs,
        BTreeMap::from([(Some(n), vec![crate::util::order_file("ACME", "PO-GOOD")])]),
        "one document, of the corrected interchange"
    );
    let doc = fs::read_to_string(gate.out().join(&docs[&Some(n)][0])).unwrap();
    assert!(doc.contains("PO-GOOD") && !doc.contains("PO-BAD"), "{doc}");
}

/// Claims not yet completed (`in_flight` or `failed`), read from the registry.
pub(crate) fn unfinished_claims(gate: &Gate) -> u64 {
    let Ok(Some(registry)) = x12gate::registry::Registry::open_read_only(&gate.database()) else {
        return 0;
    };
    registry
        .stats()
        .unwrap_or_default()
        .iter()
        .filter(|(_, state, _)| state == "in_flight" || state == "failed")
        .map(|(.., n)| n)
        .sum()
}

/// Runs a watcher while 200 files stream in (one every 10 ms, by every way but slowly) and
/// sends it `signal` once at least 30 files are done and claims are in flight; returns the
/// exit status and the log. The stream goes on to its end after the signal.
fn interrupt_mid_load(gate: &Gate, files: &[Planned], signal: &str) -> (ExitStatus, String) {
    let mut w = gate.start(&[]);
    let hold = Duration::from_millis(Settings::default().settle_ms + 200);
    std::thread::scope(|scope| {
        let inbox = gate.inbox();
        let dropper = scope.spawn(move || {
            drop_files(
                &inbox,
                files,
                Duration::from_millis(10),
                hold,
                Duration::ZERO,
            )
        });
        wait_for(
            Duration::from_secs(120),
            "30 files done and claims in flight",
            || gate.moved().count() >= 30 && unfinished_claims(gate) > 0,
            || gate.state(),
        );
        w.signal(signal);
        dropper.join().expect("the dropper");
    });
    let status = w.wait(Duration::from_secs(60));
    (status, w.log())
}

/// SIGTERM in the middle of a load: the watcher finishes what it holds and exits 0; a
/// restart finishes the rest, and the end state is the one of an uninterrupted run.
#[test]
fn sigterm_mid_load_then_restart_reaches_the_same_end_state() {
    let gate = Gate::new(Settings::default());
    let files = corpus(200, 20_000, false);
    let (status, log) = interrupt_mid_load(&gate, &files, "TERM");
    assert_eq!(status.code(), Some(0), "exit after SIGTERM; log:\n{log}");

    // It stopped taking files and finished every one it had taken.
    let done = gate.moved().count();
    let left = gate.inbox_names();
    assert!(
        !left.is_empty(),
        "all {done} files were done before the signal; the test proves nothing"
    );
    assert_eq!(done + left.len(), files.len(), "{}", gate.state());
    let taken = final_counts(&log).expect("final line")[0];
    assert_eq!(
        taken as usize, done,
        "taken files are the moved ones; log:\n{log}"
    );
    assert_eq!(
        unfinished_claims(&gate),
        0,
        "claims left unfinished by a graceful stop: {:?}",
        gate.counts()
    );
    let history = gate.history();
    let decided: Vec<&String> = left
        .iter()
        .filter(|name| {
            history.iter().any(|e| {
                e["file"]
                    .as_str()
                    .is_some_and(|f| Path::new(f).file_name() == Some(name.as_ref()))
            })
        })
        .collect();
    assert!(
        decided.is_empty(),
        "decided but left in the inbox: {decided:?}"
    );

    let (status, log) = gate.once();
    let counts = final_counts(&log).expect("final line");
    let want = if counts[3] + counts[4] > 0 { 3 } else { 0 };
    assert_eq!(
        status.code(),
        Some(want),
        "the restart: exit 3 when it rejected files; log:\n{log}"
    );
    check_end_state(&gate, &files, Run::Clean);
}

/// SIGKILL in the middle of a load, restart once the leases have run out: nothing lost,
/// nothing doubled.
#[test]
fn sigkill_mid_load_then_restart_loses_and_doubles_nothing() {
    use std::os::unix::process::ExitStatusExt;
    // Two seconds: long enough for a batch of a debug build on a busy machine to finish
    // under its lease, short enough for the restart to take the dead claims over soon.
    let gate = Gate::new(Settings {
        lease_seconds: 2,
        ..Settings::default()
    });
    let files = corpus(200, 30_000, false);
    let (status, _) = interrupt_mid_load(&gate, &files, "KILL");
    assert_eq!(status.signal(), Some(9), "killed: {status:?}");
    assert!(
        !gate.inbox_names().is_empty(),
        "all files were done before the kill; the test proves nothing"
    );
    eprintln!(
        "after the kill: {}; {} unfinished claim(s)",
        gate.state(),
        unfinished_claims(&gate)
    );

    let mut w = gate.start(&[]);
    wait_for(
        Duration::from_secs(180),
        "the restarted watcher to finish the inbox",
        || gate.inbox_names().is_empty() && gate.moved().count() >= files.len(),
        || gate.state(),
    );
    w.signal("TERM");
    let status = w.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "log:\n{}", w.log());
    check_end_state(&gate, &files, Run::Killed);
}

/// An exact resend of an interchange that was rejected is answered with the original 997
/// (a duplicate), but the file is still a rejected interchange: it belongs in rejected/ with
/// a reason, like the first copy, not in the archive where nobody looks. The same happens to
/// a rejected file that a crash caught before it was moved.
#[test]
fn resent_rejected_interchange_goes_to_rejected() {
    let gate = Gate::new(Settings::default());
    let broken = broken_se01(&interchange(46_000, "PO-BAD"));
    let mut w = gate.start(&[]);
    fs::write(gate.inbox().join("first.x12"), &broken).unwrap();
    wait_for(
        Duration::from_secs(60),
        "the first copy rejected",
        || gate.moved().rejected.contains_key("first.x12"),
        || gate.state(),
    );
    fs::write(gate.inbox().join("again.x12"), &broken).unwrap();
    wait_for(
        Duration::from_secs(60),
        "the resend done",
        || gate.moved().count() == 2,
        || gate.state(),
    );
    w.signal("TERM");
    assert_eq!(w.wait(Duration::from_secs(30)).code(), Some(0));
    let m = gate.moved();
    assert_eq!(
        m.rejected.keys().collect::<Vec<_>>(),
        ["again.x12", "first.x12"],
        "a resent rejected interchange was archived; history:\n{:#?}",
        gate.history()
    );
    assert!(m.reasons.contains_key("again.x12"), "{m:?}");
}

/// A file that is not X12 lands in rejected/ with a reason, and the files after it go on.
#[test]
fn not_x12_is_rejected_with_a_reason_and_the_rest_goes_on() {
    let gate = Gate::new(Settings {
        workers: 1,
        ..Settings::default()
    });
    let mut w = gate.start(&[]);
    let before = chrono::Utc::now();
    fs::write(gate.inbox().join("a-junk.x12"), not_x12(1)).unwrap();
    fs::write(gate.inbox().join("b.x12"), interchange(501, "PO-B")).unwrap();
    fs::write(gate.inbox().join("c.x12"), interchange(502, "PO-C")).unwrap();
    wait_for(
        Duration::from_secs(60),
        "three files done",
        || gate.moved().count() == 3,
        || gate.state(),
    );
    let after = chrono::Utc::now();
    let m = gate.moved();
    assert_eq!(
        m.rejected.keys().collect::<Vec<_>>(),
        ["a-junk.x12"],
        "{m:?}"
    );
    assert_eq!(
        m.archived.keys().collect::<Vec<_>>(),
        ["b.x12", "c.x12"],
        "{m:?}"
    );
    let r = reason_json(&m.reasons["a-junk.x12"]);
    assert_eq!(r["disposition"], "rejected", "{r}");
    assert!(
        r["reason"]
            .as_str()
            .is_some_and(|s| s.contains("ISA") && s.contains("byte 0")),
        "the reason says what was expected where: {r}"
    );
    assert!(
        r["reason_code"].is_null() && r["correlation_id"].is_null(),
        "{r}"
    );
    let file = r["file"].as_str().expect("file");
    assert!(
        Path::new(file).ends_with("inbox/a-junk.x12"),
        "file names where it came from: {r}"
    );
    let time = chrono::DateTime::parse_from_rfc3339(r["time"].as_str().expect("time"))
        .unwrap_or_else(|e| panic!("time is RFC 3339: {e}: {r}"));
    assert!(
        time >= before - chrono::Duration::seconds(1)
            && time <= after + chrono::Duration::seconds(1),
        "time {time} outside the run {before}..{after}"
    );
    assert_eq!(r["interchanges"].as_array().map(Vec::len), Some(1), "{r}");
    w.signal("TERM");
    assert_eq!(w.wait(Duration::from_secs(30)).code(), Some(0));
    assert_eq!(final_counts(&w.log()), Some([3, 2, 0, 0, 1]), "{}", w.log());
}

/// `--once` takes what is in the inbox (not temporary or hidden names); it exits 3 because a
/// file was rejected, like `process`, and 0 when there was nothing to reject.
#[test]
fn once_processes_the_inbox_and_exits_3_on_a_rejection() {
    let gate = Gate::new(Settings::default());
    let inbox = gate.inbox();
    let files = [
        ("a.x12", interchange(601, "PO-A").into_bytes()),
        ("b.x12", interchange(602, "PO-B").into_bytes()),
        ("c.x12", interchange(601, "PO-A").into_bytes()),
        ("d.bin", not_x12(0)),
        ("e.x12.part", interchange(603, "PO-E").into_bytes()),
        (".f.x12", interchange(604, "PO-F").into_bytes()),
    ];
    let old = SystemTime::now() - Duration::from_secs(3600);
    for (name, bytes) in &files {
        fs::write(inbox.join(name), bytes).unwrap();
        // Settled under any policy: --once must not have to wait.
        fs::File::options()
            .write(true)
            .open(inbox.join(name))
            .and_then(|f| f.set_modified(old))
            .unwrap();
    }
    let started = Instant::now();
    let (status, log) = gate.once();
    assert_eq!(
        status.code(),
        Some(3),
        "--once rejected files: exit 3; log:\n{log}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "--once took {:?}",
        started.elapsed()
    );
    assert_eq!(final_counts(&log), Some([4, 2, 1, 0, 1]), "log:\n{log}");
    let m = gate.moved();
    assert_eq!(
        m.archived.keys().collect::<Vec<_>>(),
        ["a.x12", "b.x12", "c.x12"]
    );
    assert_eq!(m.rejected.keys().collect::<Vec<_>>(), ["d.bin"]);
    assert_eq!(
        gate.inbox_names().into_iter().collect::<Vec<_>>(),
        [".f.x12", "e.x12.part"],
        "temporary and hidden names stay"
    );
    let (status, log) = gate.once();
    assert_eq!(status.code(), Some(0), "log:\n{log}");
    assert_eq!(final_counts(&log), Some([0, 0, 0, 0, 0]), "log:\n{log}");
}

/// A watcher started while another process holds the registry's write lock (a node frozen
/// in the middle of a transaction) starts at once, and its file waits for the lock as a
/// running watcher's does; once the lock is let go, the file is decided. (It used to wait
/// the lock timeout at start-up, then exit.)
#[test]
fn a_watcher_started_while_another_holds_the_write_lock_starts_and_waits_for_it() {
    let gate = Gate::new(Settings::default());
    let (status, log) = gate.once();
    assert_eq!(status.code(), Some(0), "the registry made: {log}");
    let holder = rusqlite::Connection::open(gate.dir().join("x12gate.db")).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let old = SystemTime::now() - Duration::from_secs(3600);
    let file = gate.inbox().join("a.x12");
    fs::write(&file, interchange(701, "PO-A")).unwrap();
    fs::File::options()
        .write(true)
        .open(&file)
        .and_then(|f| f.set_modified(old))
        .unwrap();
    let mut w = gate.start_logging(&["--once"], "info");
    // Well inside the lock timeout (30 s): the start no longer waits for the lock.
    wait_for(
        Duration::from_secs(20),
        "the watcher started",
        || w.log().contains("x12gate watch started"),
        || w.log(),
    );
    assert!(
        w.child.try_wait().unwrap().is_none(),
        "it waits for the lock: {}",
        w.log()
    );
    assert_eq!(gate.moved().count(), 0, "nothing decided under the lock");
    holder.execute_batch("ROLLBACK").unwrap();
    let status = w.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "log:\n{}", w.log());
    assert_eq!(
        gate.moved().archived.keys().collect::<Vec<_>>(),
        ["a.x12"],
        "{}",
        gate.state()
    );
}

/// `--once` run by cron while a partner is still writing a file in place: the file must not
/// be taken half written (SPEC 7: files are taken when complete). Whether `--once` waits for
/// it or leaves it for the next run is its choice; rejecting the half is not.
#[test]
fn once_does_not_take_a_file_still_being_written() {
    let gate = Gate::new(Settings {
        settle_ms: 1000,
        ..Settings::default()
    });
    let path = gate.inbox().join("slow.x12");
    let bytes = interchange(701, "PO-SLOW").into_bytes();
    let once_log = std::thread::scope(|scope| {
        let writer = scope.spawn(|| write_slowly(&path, &bytes, 5, Duration::from_millis(250)));
        // The first chunk is there: the partner is mid-upload when cron fires.
        wait_for(
            Duration::from_secs(10),
            "the first chunk",
            || fs::metadata(&path).is_ok_and(|m| m.len() > 0),
            || gate.state(),
        );
        let (status, log) = gate.once();
        writer.join().expect("the writer");
        assert_eq!(status.code(), Some(0), "log:\n{log}");
        log
    });
    let m = gate.moved();
    assert!(
        m.rejected.is_empty(),
        "a file still being written was taken by --once and rejected as broken: {:?}\nreason: {}\nlog:\n{}",
        m.rejected.keys().collect::<Vec<_>>(),
        m.reasons
            .values()
            .next()
            .map(|p| reason_json(p).to_string())
            .unwrap_or_default(),
        once_log
    );
    if m.archived.is_empty() {
        // Left for the next run: it is complete now, and the next run takes it.
        wait_for(
            Duration::from_secs(10),
            "the file to settle",
            || {
                fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_millis(1100))
            },
            || gate.state(),
        );
        let (status, log) = gate.once();
        assert_eq!(status.code(), Some(0), "log:\n{log}");
    }
    let m = gate.moved();
    assert_eq!(m.archived.keys().collect::<Vec<_>>(), ["slow.x12"]);
    let docs = out_by_key(&gate.out());
    assert_eq!(
        docs,
        BTreeMap::from([(Some(701), vec![crate::util::order_file("ACME", "PO-SLOW")])]),
        "one document, of the slowly written interchange"
    );
    let doc = fs::read_to_string(gate.out().join(&docs[&Some(701)][0])).unwrap();
    assert!(doc.contains("PO-SLOW") && doc.contains("GASKET SET"));
}

/// `--poll`: no file events, the periodic rescan alone finds files, renamed ones included.
#[test]
fn poll_mode_finds_files_without_events() {
    let gate = Gate::new(Settings::default());
    let mut w = gate.start(&["--poll"]);
    let inbox = gate.inbox();
    fs::write(inbox.join("a.x12"), interchange(801, "PO-A")).unwrap();
    fs::write(inbox.join("b.x12.part"), interchange(802, "PO-B")).unwrap();
    fs::rename(inbox.join("b.x12.part"), inbox.join("b.x12")).unwrap();
    wait_for(
        Duration::from_secs(60),
        "both files archived with --poll",
        || gate.moved().archived.len() == 2,
        || gate.state(),
    );
    // And a file arriving later, after several empty rescans.
    std::thread::sleep(Duration::from_millis(300));
    fs::write(inbox.join("c.x12"), interchange(803, "PO-C")).unwrap();
    wait_for(
        Duration::from_secs(60),
        "a later file archived with --poll",
        || gate.moved().archived.len() == 3,
        || gate.state(),
    );
    w.signal("TERM");
    assert_eq!(w.wait(Duration::from_secs(30)).code(), Some(0));
    assert_eq!(final_counts(&w.log()), Some([3, 3, 0, 0, 0]), "{}", w.log());
    assert!(gate.inbox_names().is_empty());
}

/// A name already in rejected/ (or in the archive) gets a suffix; nothing is overwritten.
#[test]
fn names_already_taken_get_a_suffix() {
    let gate = Gate::new(Settings::default());
    let rejected = gate.rejected();
    fs::create_dir_all(&rejected).unwrap();
    fs::write(rejected.join("junk.x12"), b"the earlier junk").unwrap();
    fs::write(
        rejected.join("junk.x12.reason.json"),
        b"{\"earlier\": true}",
    )
    .unwrap();
    let mut w = gate.start(&[]);
    fs::write(gate.inbox().join("junk.x12"), not_x12(0)).unwrap();
    fs::write(gate.inbox().join("order.x12"), interchange(901, "PO-1")).unwrap();
    wait_for(
        Duration::from_secs(60),
        "junk rejected and the order archived",
        || {
            let m = gate.moved();
            m.rejected.len() == 2 && m.archived.len() == 1
        },
        || gate.state(),
    );
    // The same name again: the resend is archived beside the first.
    fs::write(gate.inbox().join("order.x12"), interchange(901, "PO-1")).unwrap();
    wait_for(
        Duration::from_secs(60),
        "the resend archived",
        || gate.moved().archived.len() == 2,
        || gate.state(),
    );
    w.signal("TERM");
    assert_eq!(w.wait(Duration::from_secs(30)).code(), Some(0));

    assert_eq!(
        fs::read(rejected.join("junk.x12")).unwrap(),
        b"the earlier junk"
    );
    assert_eq!(
        fs::read(rejected.join("junk.x12.reason.json")).unwrap(),
        b"{\"earlier\": true}"
    );
    assert_eq!(fs::read(rejected.join("junk-1.x12")).unwrap(), not_x12(0));
    let r = reason_json(&rejected.join("junk-1.x12.reason.json"));
    assert_eq!(r["disposition"], "rejected", "{r}");
    let m = gate.moved();
    assert_eq!(
        m.archived.keys().collect::<Vec<_>>(),
        ["order-1.x12", "order.x12"]
    );
}

/// The reason must never be missing for a file in rejected/. Here the reason cannot be
/// written (standing in for a full disk or a crash between the two steps): the file must then
/// stay in the inbox and be retried, as the watcher's own log line promises, not sit in
/// rejected/ with no reason and no retry.
#[test]
fn reason_is_written_before_the_file_is_moved() {
    let gate = Gate::new(Settings::default());
    let rejected = gate.rejected();
    fs::create_dir_all(&rejected).unwrap();
    // A file where the atomic writer wants its temporary folder: writing the reason fails.
    fs::write(rejected.join(".x12gate-tmp"), b"in the way").unwrap();
    let mut w = gate.start(&[]);
    fs::write(gate.inbox().join("junk.x12"), not_x12(0)).unwrap();
    wait_for(
        Duration::from_secs(60),
        "the watcher to fail writing the reason",
        || w.log().contains("operational failure"),
        || format!("{}; log:\n{}", gate.state(), w.log()),
    );
    // Unblock the reason and give the retry time (the first backoff is 0.5 s to 1.5 s).
    fs::remove_file(rejected.join(".x12gate-tmp")).unwrap();
    let healed = Instant::now() + Duration::from_secs(15);
    while Instant::now() < healed && !gate.moved().reasons.contains_key("junk.x12") {
        std::thread::sleep(Duration::from_millis(50));
    }
    w.signal("TERM");
    assert_eq!(w.wait(Duration::from_secs(30)).code(), Some(0));
    let after = gate.moved();
    assert!(
        after.reasons.contains_key("junk.x12"),
        "the reason could not be written, yet the file left the inbox at once: inbox {:?}, \
         rejected/ {:?}, reasons for {:?}; once the reason could be written nothing retried \
         it; log:\n{}",
        gate.inbox_names(),
        after.rejected.keys().collect::<Vec<_>>(),
        after.reasons.keys().collect::<Vec<_>>(),
        w.log()
    );
    assert_eq!(after.rejected.keys().collect::<Vec<_>>(), ["junk.x12"]);
    assert!(after.reasons.contains_key("junk.x12"));
}

/// Two files moved to `rejected/` at the same moment, where the first one's free name is
/// the second one's own name (`x.x12` is taken, so `x.x12` becomes `x-1.x12`; meanwhile
/// `x-1.x12` arrives too): both must survive. Each round is a fresh folder; a round loses
/// a file in about one time in three while the name is chosen and then renamed onto.
#[test]
fn concurrent_moves_never_overwrite_each_other() {
    use x12gate::ack::Disposition;
    use x12gate::pipeline::Report;
    let report = |file: &Path| Report {
        file: file.display().to_string(),
        correlation_id: None,
        sender: None,
        receiver: None,
        control_number: None,
        disposition: Disposition::Rejected,
        reason_code: None,
        reason: Some("not X12".into()),
        acks: Vec::new(),
        outputs: Vec::new(),
        attempt: None,
        took_over: None,
        replayed: None,
        usage: None,
        documents: Vec::new(),
        documents_total: None,
        documents_new: None,
        key: None,
    };
    for round in 0..100 {
        let gate = Gate::new(Settings::default());
        let config = x12gate::config::Config::load(&gate.dir().join("partners.toml"))
            .expect("the test's configuration");
        fs::create_dir_all(gate.rejected()).unwrap();
        fs::write(gate.rejected().join("x.x12"), b"earlier").unwrap();
        let names = ["x.x12", "x-1.x12"];
        let mut intake = x12gate::intake::Intake::open(&config.gateway).expect("a work folder");
        let taken: Vec<_> = names
            .iter()
            .map(|name| {
                let path = gate.inbox().join(name);
                fs::write(&path, name).unwrap();
                intake.take(&path).unwrap().expect("taken")
            })
            .collect();
        let start = std::sync::Barrier::new(names.len());
        let failures: Vec<String> = std::thread::scope(|scope| {
            let moves: Vec<_> = taken
                .iter()
                .map(|taken| {
                    let (config, start) = (&config, &start);
                    let path = gate.inbox().join(&taken.name);
                    scope.spawn(move || {
                        let reports = [report(&path)];
                        start.wait();
                        x12gate::inbound::dispose(taken, &reports, config)
                            .map_err(|e| format!("moving {}: {e}", taken.name.to_string_lossy()))
                    })
                })
                .collect();
            moves
                .into_iter()
                .filter_map(|m| m.join().expect("a mover").err())
                .collect()
        });
        let m = gate.moved();
        let mut contents: Vec<Vec<u8>> = m
            .rejected
            .values()
            .map(|p| fs::read(p).expect("read a rejected file"))
            .collect();
        contents.sort();
        assert!(
            failures.is_empty()
                && contents == [b"earlier".to_vec(), b"x-1.x12".to_vec(), b"x.x12".to_vec()],
            "round {round}: two moves chose the same free name: failures {failures:?}; \
             rejected/ holds {:?} with reasons for {:?}",
            m.rejected.keys().collect::<Vec<_>>(),
            m.reasons.keys().collect::<Vec<_>>()
        );
        assert_eq!(m.reasons.len(), 2, "round {round}: {m:?}");
    }
}

/// The first SIGTERM lets the file in flight finish (here a crash point holds it for half
/// a minute after its outputs are written); a second one exits at once with 130. The file
/// stays in the dead watcher's work folder, and the next watcher adopts it and finishes it at
/// once, without waiting for the minute-long lease of the claim it left.
#[cfg(feature = "failpoints")]
#[test]
fn second_signal_exits_at_once() {
    let gate = Gate::new(Settings {
        lease_seconds: 60,
        workers: 1,
        summary_seconds: 1,
        ..Settings::default()
    });
    fs::write(gate.inbox().join("held.x12"), interchange(1001, "PO-HELD")).unwrap();
    let mut w = gate.spawn(&[], None, Some("outputs.after=sleep(30000)"));
    wait_for(
        Duration::from_secs(30),
        "the watcher to hold the file (a summary with in_flight=1)",
        || w.log().contains("in_flight=1"),
        || w.log(),
    );
    w.signal("TERM");
    wait_for(
        Duration::from_secs(10),
        "the first signal to be heard",
        || w.log().contains("shutting down"),
        || w.log(),
    );
    // Still finishing: the file in flight has most of half a minute to go.
    let still = Instant::now() + Duration::from_millis(700);
    while Instant::now() < still {
        assert!(
            w.child.try_wait().expect("poll").is_none(),
            "exited after one signal with a file in flight; log:\n{}",
            w.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    w.signal("TERM");
    let status = w.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "log:\n{}", w.log());
    assert!(w.log().contains("second signal"), "{}", w.log());
    assert!(
        gate.inbox_names().is_empty(),
        "the file left the inbox when taken"
    );
    assert!(gate.moved().count() == 0, "{}", gate.state());

    let started = Instant::now();
    let (status, log) = gate.once();
    assert_eq!(status.code(), Some(0), "log:\n{log}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the restart waited {:?} for the dead watcher's lease",
        started.elapsed()
    );
    assert_eq!(
        gate.moved().archived.keys().collect::<Vec<_>>(),
        ["held.x12"]
    );
    let accepted: Vec<Value> = gate
        .history()
        .into_iter()
        .filter(|e| e["event"] == "accepted")
        .collect();
    assert_eq!(accepted.len(), 1, "{accepted:?}");
    assert_eq!(accepted[0]["attempt"], 2, "{accepted:?}");
}

/// The speed figure: `watch` against `process` on the same small files, each on a fresh
/// database, in release:
///
/// ```text
/// cargo test --release --test main watch::speed -- --ignored --nocapture
/// ```
///
/// `X12GATE_SPEED_FILES` sets the number of files (default 1000), `X12GATE_SPEED_WORKERS`
/// the watcher's workers (default: the number of cores). The watcher's time runs from the
/// moment every file is renamed into the inbox at once until the inbox is empty and every
/// file is archived; `process` gets all the files in one call.
#[test]
#[ignore = "timing harness: run in release with --ignored --nocapture"]
fn speed_watch_against_process() {
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
    };
    let count = env("X12GATE_SPEED_FILES").unwrap_or(1000);
    let workers = env("X12GATE_SPEED_WORKERS")
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let settings = Settings {
        settle_ms: 1000,
        poll_ms: 1000,
        lease_seconds: 300,
        workers,
        summary_seconds: 3600,
    };
    // The files are flushed to disk before any clock starts: otherwise the first fsync of
    // whichever run comes first pays for writing thousands of fresh input files.
    let write_files = |dir: &Path| -> Vec<PathBuf> {
        fs::create_dir_all(dir).unwrap();
        let files = (0..count as u32)
            .map(|i| {
                let n = 100_000 + i;
                let path = dir.join(format!("f{i:05}.x12"));
                fs::write(&path, interchange(n, &format!("PO-{n}"))).unwrap();
                path
            })
            .collect();
        let synced = Command::new("sync").status().expect("run sync");
        assert!(synced.success());
        files
    };

    let p = Gate::new(settings);
    let files = write_files(&p.dir().join("files"));
    let started = Instant::now();
    let out = Command::new(assert_cmd::cargo::cargo_bin("x12gate"))
        .current_dir(p.dir())
        .arg("process")
        .args(&files)
        .env_remove("FAILPOINTS")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run process");
    let process_time = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(top_files(&p.out()).len(), count);

    let w = Gate::new(settings);
    let staged = write_files(&w.dir().join("staging"));
    let mut watcher = w.start(&[]);
    // The watcher is up once it has archived a probe file.
    fs::write(w.inbox().join("probe.x12"), interchange(99_999, "PO-PROBE")).unwrap();
    wait_for(
        Duration::from_secs(60),
        "the probe file to be archived",
        || w.inbox_names().is_empty() && w.moved().archived.len() == 1,
        || w.state(),
    );
    // Counting by directory listing only: stat-ing thousands of files each poll would slow
    // the machine being measured.
    let listed = |dir: &Path| fs::read_dir(dir).map_or(0, |d| d.count());
    let day_dir = |root: &Path| -> Option<PathBuf> {
        let mut p = root.to_path_buf();
        for _ in 0..3 {
            p = fs::read_dir(&p).ok()?.flatten().map(|e| e.path()).max()?;
        }
        Some(p)
    };
    let started = Instant::now();
    for f in &staged {
        fs::rename(f, w.inbox().join(file_name(f))).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let archived = day_dir(&w.archive()).map_or(0, |d| listed(&d));
        // `count` files and the probe.
        if listed(&w.inbox()) == 0 && archived > count {
            break;
        }
        assert!(Instant::now() < deadline, "{}", w.state());
        std::thread::sleep(Duration::from_millis(50));
    }
    let watch_time = started.elapsed();
    watcher.signal("TERM");
    assert_eq!(watcher.wait(Duration::from_secs(60)).code(), Some(0));
    let m = w.moved();
    assert_eq!((m.archived.len(), m.rejected.len()), (count + 1, 0));
    assert_eq!(top_files(&w.out()).len(), count + 1);

    let rate = |t: Duration| count as f64 / t.as_secs_f64();
    eprintln!(
        "{count} files, {workers} watcher worker(s):\n  process (one call): {:>8.2} s {:>8.1} files/s\n  watch:              {:>8.2} s {:>8.1} files/s\n  watch / process time: {:.2}",
        process_time.as_secs_f64(),
        rate(process_time),
        watch_time.as_secs_f64(),
        rate(watch_time),
        watch_time.as_secs_f64() / process_time.as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------------
// The rejected folder follows the decisions.

/// The files (not reason files) in `dir`, by name.
fn rejected_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `x12gate_rejected_backlog_files` as `x12gate metrics` prints it.
fn backlog(gate: &Gate) -> String {
    let out = crate::util::x12gate(gate.dir())
        .arg("metrics")
        .output()
        .expect("run metrics");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("x12gate_rejected_backlog_files "))
        .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// The `placed` events of `key`, their details.
fn placements(gate: &Gate, key: &str) -> Vec<Value> {
    gate.history()
        .into_iter()
        .filter(|e| e["event"] == "placed" && e["key"] == key)
        .collect()
}

#[test]
fn a_corrected_resend_takes_its_rejected_original_to_the_archive() {
    let gate = Gate::new(Settings::default());
    let good = interchange(501, "PO-501");
    fs::write(gate.inbox().join("po501.x12"), broken_se01(&good)).unwrap();
    let (status, log) = gate.once();
    assert_eq!(status.code(), Some(3), "{log}");
    assert_eq!(
        rejected_names(&gate.rejected()),
        ["po501.x12", "po501.x12.reason.json"]
    );
    assert_eq!(backlog(&gate), "1");
    // The corrected content under the same ISA13: accepted as attempt 2, and the broken
    // file with its reason leaves rejected/ for the archive, recorded.
    fs::write(gate.inbox().join("po501-fixed.x12"), &good).unwrap();
    let (status, log) = gate.once();
    assert_eq!(status.code(), Some(0), "{log}");
    assert_eq!(rejected_names(&gate.rejected()), Vec::<String>::new());
    assert_eq!(backlog(&gate), "0");
    let placed = placements(&gate, "ZZ:ACME:000000501");
    let moved = placed
        .iter()
        .find(|e| e["why"] == "accepted")
        .unwrap_or_else(|| panic!("no move recorded: {placed:?}"));
    let to = PathBuf::from(moved["placed"].as_str().unwrap());
    assert!(to.starts_with(gate.archive()), "{to:?}");
    assert_eq!(fs::read_to_string(&to).unwrap(), broken_se01(&good));
    assert!(PathBuf::from(format!("{}.reason.json", to.display())).is_file());
}

#[test]
fn a_reprocess_to_acceptance_empties_the_backlog_and_a_rejected_one_keeps_both_acks() {
    let gate = Gate::new(Settings::default());
    // From a sender not configured yet: rejected, its file kept in rejected/.
    let text = interchange(601, "PO-601").replace("*ZZ*ACME           *", "*ZZ*NEWCO          *");
    let text = text.replace("GS*PO*ACME*", "GS*PO*NEWCO*");
    fs::write(gate.inbox().join("newco.x12"), &text).unwrap();
    // And a broken one from ACME, whose fault is in the file itself.
    fs::write(
        gate.inbox().join("broken.x12"),
        broken_se01(&interchange(602, "PO-602")),
    )
    .unwrap();
    let (_, log) = gate.once();
    assert_eq!(
        rejected_names(&gate.rejected()),
        [
            "broken.x12",
            "broken.x12.reason.json",
            "newco.x12",
            "newco.x12.reason.json"
        ],
        "{log}"
    );
    assert_eq!(backlog(&gate), "2");
    // The partner is added; its interchange is reprocessed and accepted.
    let config = gate.dir().join("partners.toml");
    let mut toml = fs::read_to_string(&config).unwrap();
    toml.push_str(
        "\n[[partner]]\nname = \"Newco\"\nid_qualifier = \"ZZ\"\nid = \"NEWCO\"\nack = \"997\"\n",
    );
    fs::write(&config, toml).unwrap();
    let out = crate::util::x12gate(gate.dir())
        .args(["reprocess", "ZZ:NEWCO:601"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        rejected_names(&gate.rejected()),
        ["broken.x12", "broken.x12.reason.json"]
    );
    assert_eq!(backlog(&gate), "1");
    // Reprocessing the broken one rejects it again: a second 997, beside the first.
    let first: Vec<String> = rejected_names(&gate.outbox())
        .into_iter()
        .filter(|n| n.starts_with("ZZ_ACME_000000602"))
        .collect();
    assert_eq!(first, ["ZZ_ACME_000000602.997.x12"]);
    let before = fs::read(gate.outbox().join(&first[0])).unwrap();
    let out = crate::util::x12gate(gate.dir())
        .args(["reprocess", "ZZ:ACME:602"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let both: Vec<String> = rejected_names(&gate.outbox())
        .into_iter()
        .filter(|n| n.starts_with("ZZ_ACME_000000602"))
        .collect();
    assert_eq!(both.len(), 2, "{both:?}");
    assert_eq!(fs::read(gate.outbox().join(&first[0])).unwrap(), before);
    let second = both.iter().find(|n| **n != first[0]).unwrap();
    let isa13 = second.split('.').nth(1).unwrap();
    let bytes = fs::read_to_string(gate.outbox().join(second)).unwrap();
    assert!(
        bytes.contains(&format!("*{isa13}*0*P*")),
        "our ISA13 {isa13} names it: {bytes}"
    );
    // Handled otherwise: resolved by key, with a note; then nothing is left.
    let out = crate::util::x12gate(gate.dir())
        .args([
            "rejected",
            "resolve",
            "ZZ:ACME:602",
            "--note",
            "partner resent by email",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("moved to"));
    assert_eq!(rejected_names(&gate.rejected()), Vec::<String>::new());
    assert_eq!(backlog(&gate), "0");
    let placed = placements(&gate, "ZZ:ACME:000000602");
    assert!(
        placed
            .iter()
            .any(|e| e["why"] == "resolved" && e["note"] == "partner resent by email"),
        "{placed:?}"
    );
    // Nothing left to resolve: a clear refusal.
    let out = crate::util::x12gate(gate.dir())
        .args(["rejected", "resolve", "broken.x12"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
}

/// SIGHUP reads `partners.toml` again: a broken file is refused (the error logged with its
/// line, the running configuration kept, the refusal in the history), a good one that adds a
/// partner is in force for the next file, without a restart; one that changes `[gateway]` is
/// refused (its folders are read at start).
#[test]
fn sighup_reloads_a_good_configuration_and_refuses_a_broken_one() {
    let gate = Gate::new(Settings::default());
    let w = gate.start_logging(&[], "warn,x12gate::watch=info");
    let started = || w.log().contains("x12gate watch started");
    wait_for(
        Duration::from_secs(30),
        "the watcher to start",
        started,
        || w.log(),
    );
    let path = gate.dir().join("partners.toml");
    let good = fs::read_to_string(&path).unwrap();
    // Counted in the log: `history` itself cannot read a broken partners.toml.
    let refusals = || w.log().matches("configuration not reloaded").count();

    fs::write(&path, format!("{good}\n[[partner]]\nname = broken\n")).unwrap();
    w.signal("HUP");
    wait_for(
        Duration::from_secs(30),
        "the refusal",
        || refusals() == 1,
        || w.log(),
    );
    assert!(
        w.log().contains("line "),
        "the error names its line: {}",
        w.log()
    );

    fs::write(&path, good.replace("poll_ms = 100", "poll_ms = 200")).unwrap();
    w.signal("HUP");
    wait_for(
        Duration::from_secs(30),
        "the second refusal",
        || refusals() == 2,
        || w.log(),
    );
    assert!(w.log().contains("restart the watcher"), "{}", w.log());

    let globex =
        "\n[[partner]]\nname = \"Globex\"\nid_qualifier = \"ZZ\"\nid = \"GLOBEX\"\nack = \"997\"\n";
    fs::write(&path, format!("{good}{globex}")).unwrap();
    w.signal("HUP");
    let reloaded = || w.log().contains("configuration reloaded");
    wait_for(Duration::from_secs(30), "the reload", reloaded, || w.log());
    assert!(w.log().contains("added: ZZ:GLOBEX"), "{}", w.log());
    let file = interchange(7001, "PO-G1")
        .replace("*ZZ*ACME           *", "*ZZ*GLOBEX         *")
        .replace("GS*PO*ACME*", "GS*PO*GLOBEX*");
    fs::write(gate.inbox().join("globex.x12"), file).unwrap();
    let accepted = || {
        gate.history()
            .iter()
            .any(|e| e["event"] == "accepted" && e["sender"] == "ZZ:GLOBEX")
    };
    wait_for(
        Duration::from_secs(30),
        "GLOBEX's file accepted",
        accepted,
        || w.log(),
    );
    w.signal("TERM");
}
