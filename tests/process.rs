//! `process` end to end through the real binary (SPEC sections 3, 6 and 8): duplicates and
//! their replayed acknowledgments, conflicts, corrected resends, many processes at once,
//! crashes at every failpoint, pruning, safe output names and the `--json` line contract.
//!
//! Every test owns a temporary folder with its own `partners.toml`, database and output
//! folders, so tests run in parallel. Processes are started with `std::process::Command`
//! rather than `assert_cmd` because the concurrency tests need `spawn`. The crash tests need
//! the `failpoints` feature (`cargo test --features failpoints`) and live in [`crash`].

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::util::{documents_by_interchange, fixture, order_file, read_json};

const BIN: &str = env!("CARGO_BIN_EXE_x12gate");

/// The hidden folder beside each output folder where files are written before their rename.
const TMP_DIR: &str = ".x12gate-tmp";

// ---------------------------------------------------------------------------------------------
// A gateway in a temporary folder.

fn config_text(lease_seconds: u64, unknown_partners: &str, database: &str) -> String {
    format!(
        r#"[gateway]
id_qualifier = "ZZ"
id = "X12GATE"
inbox = "data/inbox"
outbox = "data/outbox"
out = "data/out"
archive = "data/archive"
rejected = "data/rejected"
database = "{database}"
lease_seconds = {lease_seconds}
unknown_partners = "{unknown_partners}"

[[partner]]
name = "Acme Retail"
id_qualifier = "ZZ"
id = "ACME"
duplicate_window_days = 30
ack = "997"
ta1 = "on_error"
check_group_duplicates = true

[[partner]]
name = "Globex Distribution"
id_qualifier = "ZZ"
id = "GLOBEX"
duplicate_window_days = 45
ack = "999"
ta1 = "requested"
check_group_duplicates = true

[[partner]]
name = "Example Health Plan"
id_qualifier = "30"
id = "841234567"
ack = "999"
ta1 = "on_error"
"#
    )
}

struct Gate {
    dir: tempfile::TempDir,
    config: PathBuf,
    /// `database` in the configurations: the SQLite file, or a PostgreSQL URL.
    database: String,
}

/// What one `process` (or other command) run left behind.
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// The `--json` lines.
    /// Each report's disposition, in order.
    fn dispositions(&self) -> Vec<String> {
        self.reports()
            .iter()
            .map(|r| r["disposition"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    fn reports(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}\n{self}"))
            })
            .collect()
    }

    /// The only `--json` line.
    fn report(&self) -> Value {
        let reports = self.reports();
        assert_eq!(reports.len(), 1, "one line expected\n{self}");
        reports.into_iter().next().unwrap_or_default()
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status: {}\nstdout:\n{}\nstderr:\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

impl Gate {
    fn new(lease_seconds: u64, unknown_partners: &str) -> Gate {
        Gate::with_database(lease_seconds, unknown_partners, "data/x12gate.db".into())
    }

    /// A gateway whose registry is a new database of the test PostgreSQL server; `None`
    /// (said loudly) when there is no server.
    fn on_postgres(lease_seconds: u64, unknown_partners: &str) -> Option<Gate> {
        let url = crate::pg_server::database()?;
        Some(Gate::with_database(lease_seconds, unknown_partners, url))
    }

    fn with_database(lease_seconds: u64, unknown_partners: &str, database: String) -> Gate {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("partners.toml");
        fs::write(
            &config,
            config_text(lease_seconds, unknown_partners, &database),
        )
        .unwrap();
        fs::create_dir(dir.path().join("in")).unwrap();
        Gate {
            dir,
            config,
            database,
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Another configuration over the same data folder (another lease, for instance).
    #[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
    fn other_config(&self, name: &str, lease_seconds: u64, unknown_partners: &str) -> PathBuf {
        let path = self.root().join(name);
        fs::write(
            &path,
            config_text(lease_seconds, unknown_partners, &self.database),
        )
        .unwrap();
        path
    }

    fn out(&self) -> PathBuf {
        self.root().join("data/out")
    }

    fn outbox(&self) -> PathBuf {
        self.root().join("data/outbox")
    }

    fn database(&self) -> PathBuf {
        self.root().join("data/x12gate.db")
    }

    /// Writes an inbound file under `in/`.
    fn write(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let path = self.root().join("in").join(name);
        fs::write(&path, bytes).unwrap();
        path
    }

    /// The binary with `config`, no failpoint armed and the default log level.
    fn command(&self, config: &Path) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(self.root())
            .env_remove("FAILPOINTS")
            .env_remove("RUST_LOG")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// `process --json [extra] FILES` with `config`, with `failpoints` armed when given.
    fn process_command(
        &self,
        config: &Path,
        extra: &[&str],
        failpoints: Option<&str>,
        files: &[&Path],
    ) -> Command {
        let mut c = self.command(config);
        c.args(["process", "--json"]).args(extra).args(files);
        if let Some(f) = failpoints {
            c.env("FAILPOINTS", f);
        }
        c
    }

    fn process(&self, files: &[&Path]) -> Run {
        run(self.process_command(&self.config, &[], None, files))
    }

    /// Any other command, on this gateway's configuration.
    fn cli(&self, args: &[&str]) -> Run {
        let mut c = self.command(&self.config);
        c.args(args);
        run(c)
    }

    fn history(&self) -> Vec<Value> {
        let r = run({
            let mut c = self.command(&self.config);
            c.args(["history", "--json"]);
            c
        });
        assert_eq!(r.code(), Some(0), "{r}");
        r.reports()
    }

    /// `history --json` events of one key.
    fn events(&self, key: &str) -> Vec<Value> {
        self.history()
            .into_iter()
            .filter(|e| e["key"] == key)
            .collect()
    }
}

fn run(mut c: Command) -> Run {
    finish(c.spawn().expect("x12gate starts"))
}

fn finish(child: Child) -> Run {
    let out = child.wait_with_output().expect("x12gate runs");
    Run {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The names a downstream reader of `dir` would take (no hidden entries), sorted.
fn visible(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match fs::read_dir(dir) {
        Ok(d) => d
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// What sits in `dir`'s hidden temporary folder.
fn leftovers(dir: &Path) -> Vec<String> {
    match fs::read_dir(dir.join(TMP_DIR)) {
        Ok(d) => d
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn mtime(path: &Path) -> SystemTime {
    fs::metadata(path).unwrap().modified().unwrap()
}

/// Reports with `disposition`.
fn count(reports: &[Value], disposition: &str) -> usize {
    reports
        .iter()
        .filter(|r| r["disposition"] == disposition)
        .count()
}

// ---------------------------------------------------------------------------------------------
// Interchanges.

/// The 850 fixture from ACME (ISA13 000000101, GS06 101).
fn base_850() -> String {
    fs::read_to_string(fixture("850-004010.x12")).unwrap()
}

fn swap(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} not found in\n{text}");
    text.replacen(from, to, 1)
}

/// The fixture's PO number (BEG03).
const PO: &str = "PO-4471";

/// The 850 fixture as sent by `sender` (ISA06, kept 15 wide; GS02) with its own ISA13 and
/// GS06, ordering the fixture's [`PO`]: another interchange of the same order.
fn po(sender: &str, isa13: u32, gs06: u32) -> String {
    order(sender, isa13, gs06, PO)
}

/// [`po`] ordering `number` (BEG03) instead: another order, its own business document.
fn order(sender: &str, isa13: u32, gs06: u32, number: &str) -> String {
    let text = swap(
        &base_850(),
        &format!("*SA*{PO}*"),
        &format!("*SA*{number}*"),
    );
    let isa13 = format!("{isa13:09}");
    let isa06 = format!("{sender:<15}");
    assert_eq!(isa06.len(), 15, "ISA06 {sender:?} must fit 15 bytes");
    let text = swap(&text, "*ZZ*ACME           *", &format!("*ZZ*{isa06}*"));
    let text = swap(&text, "*00401*000000101*", &format!("*00401*{isa13}*"));
    let text = swap(&text, "IEA*1*000000101~", &format!("IEA*1*{isa13}~"));
    let text = swap(
        &text,
        "GS*PO*ACME*X12GATE*20240115*0930*101*",
        &format!("GS*PO*{sender}*X12GATE*20240115*0930*{gs06}*"),
    );
    swap(&text, "GE*1*101~", &format!("GE*1*{gs06}~"))
}

/// The same interchange with one element of the first PO1 changed (quantity 120 → 121).
fn changed_po1(text: &str) -> String {
    swap(text, "PO1*1*120*EA", "PO1*1*121*EA")
}

/// The registry key and the file-name stem of ACME's interchange `isa13`.
fn acme(isa13: u32) -> (String, String) {
    (format!("ZZ:ACME:{isa13:09}"), format!("ZZ_ACME_{isa13:09}"))
}

/// The document files in `dir` (`out/`) that interchange `key` delivered.
fn delivered_by(dir: &Path, key: &str) -> Vec<String> {
    documents_by_interchange(dir)
        .remove(&Some(key.to_string()))
        .unwrap_or_default()
}

/// A business document's file, read whole.
fn document(path: &Path) -> Value {
    read_json(path).unwrap_or_else(|| panic!("{} is not a whole JSON file", path.display()))
}

/// Checks that `doc` is the first delivery of ACME's order [`PO`] by interchange `key`.
fn assert_order_delivered(doc: &Value, key: &str) {
    assert_eq!(
        doc["document_key"],
        format!("ZZ:ACME:850:{PO}:00:"),
        "{doc}"
    );
    assert_eq!(doc["delivery"]["disposition"], "new", "{doc}");
    assert_eq!(doc["delivery"]["interchange"], key, "{doc}");
    assert_eq!(doc["correlation_id"], key, "{doc}");
    let set = &doc["set"];
    assert_eq!(set["st"][0], "850", "{doc}");
    assert_eq!(
        set["content"]["BEG"]["purchase_order_number_03"], PO,
        "{doc}"
    );
    assert_eq!(set["se"][0], "13", "a whole set: {doc}");
}

/// The segments of an X12 interchange, elements split, using its own delimiters.
fn segments(x12: &[u8]) -> Vec<Vec<String>> {
    assert!(
        x12.len() > 106 && x12.starts_with(b"ISA"),
        "not X12: {x12:?}"
    );
    let (element, terminator) = (x12[3], x12[105]);
    x12.split(|b| *b == terminator)
        .map(|s| s.trim_ascii())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.split(|b| *b == element)
                .map(|e| String::from_utf8_lossy(e).into_owned())
                .collect()
        })
        .collect()
}

fn segment<'a>(segments: &'a [Vec<String>], id: &str) -> &'a [String] {
    segments
        .iter()
        .find(|s| s[0] == id)
        .unwrap_or_else(|| panic!("no {id} in {segments:?}"))
}

// ---------------------------------------------------------------------------------------------
// Duplicates, conflicts, resends.

#[test]
fn the_same_file_twice_is_a_duplicate_that_replays_the_original_ack() {
    let gate = Gate::new(300, "reject");
    let file = gate.write("po.x12", po("ACME", 101, 101));
    let (key, stem) = acme(101);

    let first = gate.process(&[&file]);
    assert_eq!(first.code(), Some(0), "{first}");
    let f = first.report();
    assert_eq!(f["disposition"], "accepted", "{first}");
    let translation = gate.out().join(order_file("ACME", PO));
    let ack = gate.outbox().join(format!("{stem}.997.x12"));
    assert_eq!(visible(&gate.out()), [order_file("ACME", PO)]);
    assert_eq!(visible(&gate.outbox()), [format!("{stem}.997.x12")]);
    assert_order_delivered(&document(&translation), &key);
    let shown = translation.display().to_string();
    assert_eq!(f["outputs"], serde_json::json!([shown]), "{first}");
    let docs = f["documents"].as_array().expect("documents");
    assert_eq!(docs.len(), 1, "{first}");
    assert_eq!(docs[0]["key"], format!("ZZ:ACME:850:{PO}:00:"), "{first}");
    assert_eq!(docs[0]["disposition"], "new", "{first}");
    assert_eq!(docs[0]["output"], shown, "{first}");
    let (ack_bytes, doc_bytes, doc_time) = (
        fs::read(&ack).unwrap(),
        fs::read(&translation).unwrap(),
        mtime(&translation),
    );
    fs::remove_file(&ack).unwrap();

    let second = gate.process(&[&file]);
    assert_eq!(second.code(), Some(0), "{second}");
    let r = second.report();
    assert_eq!(r["disposition"], "duplicate", "{second}");
    assert_eq!(r["acks"], serde_json::json!([ack.display().to_string()]));
    assert_eq!(r["outputs"], serde_json::json!([]));
    // The interchange is not processed again: its documents are reported as the
    // original's, each a duplicate of it, with the business system's reference (none yet).
    let again = r["documents"].as_array().expect("documents");
    assert_eq!(again.len(), 1, "{second}");
    assert_eq!(again[0]["key"], docs[0]["key"], "{second}");
    assert_eq!(again[0]["disposition"], "duplicate", "{second}");
    assert_eq!(again[0]["duplicate_of"], "ZZ:ACME:000000101", "{second}");
    assert_eq!(again[0]["result_ref"], serde_json::Value::Null, "{second}");
    assert!(
        again[0].get("output").is_none(),
        "nothing is written again: {second}"
    );
    assert_eq!(
        fs::read(&ack).unwrap(),
        ack_bytes,
        "the replayed acknowledgment is the original, byte for byte"
    );
    assert_eq!(visible(&gate.out()), [order_file("ACME", PO)]);
    assert_eq!(fs::read(&translation).unwrap(), doc_bytes);
    assert_eq!(
        mtime(&translation),
        doc_time,
        "the translation is not rewritten"
    );
    assert_eq!(visible(&gate.outbox()), [format!("{stem}.997.x12")]);
}

#[test]
fn a_resend_with_other_envelope_times_delimiters_and_line_endings_is_a_duplicate() {
    let gate = Gate::new(300, "reject");
    // The 271 fixture uses repetitions (^) and composites (:), so every delimiter matters.
    let original = fs::read_to_string(fixture("repetitions-composites-005010.x12")).unwrap();
    for c in ['|', '{', '>', '\r'] {
        assert!(!original.contains(c), "the fixture must not hold {c:?}");
    }
    assert!(original.contains('^') && original.contains("HC:99213"));
    let later = swap(
        &swap(&original, "*240301*1016*^*", "*240302*2359*^*"),
        "*X12GATE*20240301*1016*",
        "*X12GATE*20240302*2359*",
    );
    let redelimited = later
        .replace('*', "|")
        .replace('^', "{")
        .replace(':', ">")
        .replace("~\n", "\n");
    let crlf = later.replace('\n', "\r\n");
    let one_line = original.replace("~\n", "~");
    let files = [
        gate.write("original.x12", &original),
        gate.write("redelimited.x12", &redelimited),
        gate.write("crlf.x12", &crlf),
        gate.write("one-line.x12", &one_line),
    ];

    let first = gate.process(&[&files[0]]);
    assert_eq!(first.report()["disposition"], "accepted", "{first}");
    let out = visible(&gate.out());
    assert_eq!(out.len(), 1, "{out:?}");
    let doc_time = mtime(&gate.out().join(&out[0]));
    for file in &files[1..] {
        let again = gate.process(&[file]);
        assert_eq!(again.code(), Some(0), "{again}");
        assert_eq!(
            again.report()["disposition"],
            "duplicate",
            "{}: {again}",
            file.display()
        );
    }
    assert_eq!(visible(&gate.out()), out);
    assert_eq!(mtime(&gate.out().join(&out[0])), doc_time);
}

#[test]
fn a_reused_control_number_with_changed_content_is_a_conflict() {
    let gate = Gate::new(300, "reject");
    let text = po("ACME", 101, 101);
    let original = gate.write("po.x12", &text);
    let changed = gate.write("po-changed.x12", changed_po1(&text));
    let (key, stem) = acme(101);

    let first = gate.process(&[&original]);
    assert_eq!(first.report()["disposition"], "accepted", "{first}");
    let translation = gate.out().join(order_file("ACME", PO));
    assert_order_delivered(&document(&translation), &key);
    let ack = gate.outbox().join(format!("{stem}.997.x12"));
    let before = (
        fs::read(&translation).unwrap(),
        mtime(&translation),
        fs::read(&ack).unwrap(),
        mtime(&ack),
    );

    let conflict = gate.process(&[&changed]);
    assert_eq!(conflict.code(), Some(3), "{conflict}");
    let r = conflict.report();
    assert_eq!(r["disposition"], "conflict", "{conflict}");
    assert_eq!(r["reason_code"], "025");
    assert_eq!(r["outputs"], serde_json::json!([]));
    assert_eq!(
        r["documents"],
        serde_json::json!([]),
        "nothing processed: {conflict}"
    );
    let acks = r["acks"].as_array().unwrap();
    assert_eq!(acks.len(), 1, "{conflict}");
    let ta1_path = PathBuf::from(acks[0].as_str().unwrap());
    let name = ta1_path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("{stem}.conflict-")) && name.ends_with(".ta1.x12"),
        "{name}"
    );
    let ta1 = segments(&fs::read(&ta1_path).unwrap());
    let ta1 = segment(&ta1, "TA1");
    assert_eq!(ta1[1], "000000101", "TA101 is the ISA13: {ta1:?}");
    assert_eq!(ta1[4], "R", "TA104: {ta1:?}");
    assert_eq!(ta1[5], "025", "TA105: {ta1:?}");

    // The first record is untouched: its files, its outcome, and a resend of it.
    let after = (
        fs::read(&translation).unwrap(),
        mtime(&translation),
        fs::read(&ack).unwrap(),
        mtime(&ack),
    );
    assert!(
        before == after,
        "the original translation and ack are untouched"
    );
    assert_eq!(visible(&gate.out()), [order_file("ACME", PO)]);
    let events: Vec<String> = gate
        .events(&key)
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(events, ["accepted", "conflict"]);
    let third = gate.process(&[&original]);
    assert_eq!(third.code(), Some(0), "{third}");
    assert_eq!(third.report()["disposition"], "duplicate", "{third}");
    assert_eq!(fs::read(&ack).unwrap(), before.2);
    assert_eq!(mtime(&translation), before.1);
}

#[test]
fn the_same_control_number_from_two_senders_is_two_interchanges() {
    let gate = Gate::new(300, "reject");
    let acme_file = gate.write("acme.x12", po("ACME", 101, 101));
    let globex_file = gate.write("globex.x12", po("GLOBEX", 101, 101));
    let r = gate.process(&[&acme_file, &globex_file]);
    assert_eq!(r.code(), Some(0), "{r}");
    let reports = r.reports();
    assert_eq!(count(&reports, "accepted"), 2, "{r}");
    assert_eq!(reports[0]["correlation_id"], "ZZ:ACME:000000101");
    assert_eq!(reports[1]["correlation_id"], "ZZ:GLOBEX:000000101");
    // One PO number from two senders is two documents: each delivered, by its interchange.
    assert_eq!(
        visible(&gate.out()),
        [order_file("ACME", PO), order_file("GLOBEX", PO)]
    );
    for (report, sender) in reports.iter().zip(["ACME", "GLOBEX"]) {
        let key = format!("ZZ:{sender}:000000101");
        assert_eq!(delivered_by(&gate.out(), &key), [order_file(sender, PO)]);
        let docs = report["documents"].as_array().expect("documents");
        assert_eq!(docs.len(), 1, "{r}");
        assert_eq!(docs[0]["key"], format!("ZZ:{sender}:850:{PO}:00:"), "{r}");
        assert_eq!(docs[0]["disposition"], "new", "{r}");
    }
    // GLOBEX answers with a 999 and, as ISA14 asks, a TA1.
    assert_eq!(
        visible(&gate.outbox()),
        [
            "ZZ_ACME_000000101.997.x12",
            "ZZ_GLOBEX_000000101.999.x12",
            "ZZ_GLOBEX_000000101.ta1.x12"
        ]
    );
}

#[test]
fn a_corrected_resend_after_a_rejection_is_accepted_as_attempt_2() {
    let gate = Gate::new(300, "reject");
    let good = po("ACME", 101, 101);
    let bad = swap(&good, "SE*13*0001~", "SE*12*0001~");
    let (bad, good) = (gate.write("bad.x12", bad), gate.write("good.x12", good));
    let (key, stem) = acme(101);

    let first = gate.process(&[&bad]);
    assert_eq!(first.code(), Some(3), "{first}");
    let r = first.report();
    assert_eq!(r["disposition"], "rejected", "{first}");
    assert_eq!(r["attempt"], 1);
    assert_eq!(r["outputs"], serde_json::json!([]));
    assert_eq!(visible(&gate.out()), Vec::<String>::new(), "no translation");
    let ack = segments(&fs::read(gate.outbox().join(format!("{stem}.997.x12"))).unwrap());
    assert_eq!(segment(&ack, "AK9")[1], "R");

    let second = gate.process(&[&good]);
    assert_eq!(second.code(), Some(0), "{second}");
    let r = second.report();
    assert_eq!(r["disposition"], "accepted", "{second}");
    assert_eq!(r["attempt"], 2);
    // The rejected attempt delivered no document, so the corrected one's order is its
    // first delivery, under its document key's name.
    assert_eq!(visible(&gate.out()), [order_file("ACME", PO)]);
    assert_order_delivered(&document(&gate.out().join(order_file("ACME", PO))), &key);
    let docs = r["documents"].as_array().expect("documents");
    assert_eq!(docs.len(), 1, "{second}");
    assert_eq!(docs[0]["disposition"], "new", "{second}");
    // The corrected content's acknowledgment is named apart, so it never replaces the
    // rejection's 997 before that one was sent.
    let acks = visible(&gate.outbox());
    assert_eq!(
        acks.len(),
        2,
        "the rejection's and the acceptance's 997: {acks:?}"
    );
    assert!(acks.contains(&format!("{stem}.997.x12")), "{acks:?}");

    let events = gate.events(&key);
    let seen: Vec<(&str, &str, u64)> = events
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap(),
                e["file"].as_str().unwrap(),
                e["attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("rejected", bad.to_str().unwrap(), 1),
            ("accepted", good.to_str().unwrap(), 2)
        ]
    );
    // Both contents are now known: the corrected one is a duplicate, the rejected one a conflict.
    assert_eq!(gate.process(&[&good]).report()["disposition"], "duplicate");
    assert_eq!(gate.process(&[&bad]).report()["disposition"], "conflict");
}

// ---------------------------------------------------------------------------------------------
// Many processes at once.

#[test]
fn concurrent_processes_accept_an_interchange_exactly_once() {
    concurrent_exactly_once(Gate::new(300, "reject"));
}

/// The same 8 processes at once, 20 rounds, on one PostgreSQL registry: the claim is the
/// server's decision, exactly one acceptance each round.
#[test]
fn concurrent_processes_on_postgres_accept_an_interchange_exactly_once() {
    if let Some(gate) = Gate::on_postgres(300, "reject") {
        concurrent_exactly_once(gate);
    }
}

fn concurrent_exactly_once(gate: Gate) {
    const PROCESSES: usize = 8;
    const ROUNDS: u32 = 20;
    // Each round is another order: its own interchange and its own PO number.
    let number = |isa13: u32| format!("PO-{isa13}");
    for round in 0..ROUNDS {
        let isa13 = 1000 + round;
        let text = order("ACME", isa13, isa13, &number(isa13));
        // Half the processes share one file, the others each read a copy under its own name.
        let shared = gate.write(&format!("r{round}.x12"), &text);
        let files: Vec<PathBuf> = (0..PROCESSES)
            .map(|i| {
                if i % 2 == 0 {
                    shared.clone()
                } else {
                    gate.write(&format!("r{round}-copy{i}.x12"), &text)
                }
            })
            .collect();
        let children: Vec<Child> = files
            .iter()
            .map(|f| {
                gate.process_command(&gate.config, &[], None, &[f])
                    .spawn()
                    .unwrap()
            })
            .collect();
        let runs: Vec<Run> = children.into_iter().map(finish).collect();
        let reports: Vec<Value> = runs
            .iter()
            .map(|r| {
                assert_eq!(r.code(), Some(0), "round {round}: {r}");
                r.report()
            })
            .collect();
        let shown = || {
            runs.iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            count(&reports, "accepted"),
            1,
            "round {round}:\n{}",
            shown()
        );
        assert_eq!(
            count(&reports, "duplicate"),
            PROCESSES - 1,
            "round {round}:\n{}",
            shown()
        );
        let (key, stem) = acme(isa13);
        let mine = |dir: &Path| -> Vec<String> {
            visible(dir)
                .into_iter()
                .filter(|n| n.starts_with(&format!("{stem}.")))
                .collect()
        };
        assert_eq!(
            delivered_by(&gate.out(), &key),
            [order_file("ACME", &number(isa13))],
            "round {round}"
        );
        let accepted = reports.iter().find(|r| r["disposition"] == "accepted");
        let docs = accepted.expect("counted")["documents"].clone();
        assert_eq!(
            docs.as_array().map(Vec::len),
            Some(1),
            "round {round}: {docs}"
        );
        assert_eq!(docs[0]["disposition"], "new", "round {round}: {docs}");
        assert_eq!(
            mine(&gate.outbox()),
            [format!("{stem}.997.x12")],
            "round {round}"
        );
    }
    // The registry agrees: one acceptance per key, the rest duplicates.
    let history = gate.history();
    for round in 0..ROUNDS {
        let (key, _) = acme(1000 + round);
        let events: Vec<&Value> = history.iter().filter(|e| e["key"] == key).collect();
        let accepted = events.iter().filter(|e| e["event"] == "accepted").count();
        let duplicates = events.iter().filter(|e| e["event"] == "duplicate").count();
        assert_eq!((accepted, duplicates), (1, PROCESSES - 1), "{key}");
    }
    assert_eq!(visible(&gate.out()).len(), ROUNDS as usize);
    assert_eq!(
        documents_by_interchange(&gate.out()).get(&None),
        None,
        "only whole document files in out/"
    );
    assert_eq!(visible(&gate.outbox()).len(), ROUNDS as usize);
}

// ---------------------------------------------------------------------------------------------
// Temporary files.

#[test]
fn stale_temporary_files_are_removed_once_older_than_the_lease() {
    let gate = Gate::new(300, "reject");
    let file = gate.write("po.x12", po("ACME", 101, 101));
    // What a crash in the middle of a write leaves: one file an hour old, one just written
    // (which may still belong to a live writer, so it must stay).
    for dir in [gate.out(), gate.outbox()] {
        fs::create_dir_all(dir.join(TMP_DIR)).unwrap();
        let old = dir.join(TMP_DIR).join("ZZ_ACME_000000099.json.host_1_dead");
        fs::write(&old, b"{\"partial\":").unwrap();
        fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(3600))
            .unwrap();
        fs::write(dir.join(TMP_DIR).join("young.host_2_live"), b"x").unwrap();
    }
    let r = gate.process(&[&file]);
    assert_eq!(r.report()["disposition"], "accepted", "{r}");
    for dir in [gate.out(), gate.outbox()] {
        assert_eq!(leftovers(&dir), ["young.host_2_live"], "{}", dir.display());
    }
    assert_eq!(visible(&gate.out()), [order_file("ACME", PO)]);
    assert_eq!(visible(&gate.outbox()), ["ZZ_ACME_000000101.997.x12"]);
}

/// A document file that cannot be placed in `out/` (here its name is taken by a folder; a
/// full disk fails the same way) leaves the decision recorded, the document kept in the
/// registry and its acknowledgment sent: its delivery to `out/` is retried, names the file in
/// `out/` as its error, and leaves no temporary behind; once the name is free the next pass
/// writes it.
#[test]
fn a_failed_write_names_its_own_folder_and_leaves_no_temporary() {
    let gate = Gate::new(300, "reject");
    let file = gate.write("po.x12", po("ACME", 101, 101));
    let blocker = gate.out().join(order_file("ACME", PO));
    fs::create_dir_all(blocker.join("taken")).unwrap();
    let r = gate.process(&[&file]);
    assert_eq!(r.code(), Some(0), "{r}");
    assert_eq!(r.report()["disposition"], "accepted", "{r}");
    assert!(r.stderr.contains("1 to retry"), "{r}");
    let retrying = gate.cli(&["deliveries", "--json"]).reports();
    assert_eq!(retrying.len(), 1, "{retrying:?}");
    assert_eq!(retrying[0]["state"], "retrying", "{retrying:?}");
    let error = retrying[0]["last_error"].as_str().unwrap();
    assert!(
        error.contains(&format!("{}: ", blocker.display())),
        "the error names another place: {error}"
    );
    assert!(
        !error.contains(&gate.outbox().display().to_string()),
        "{error}"
    );
    for dir in [gate.out(), gate.outbox()] {
        assert_eq!(leftovers(&dir), Vec::<String>::new(), "{}", dir.display());
    }
    assert_eq!(visible(&gate.outbox()), ["ZZ_ACME_000000101.997.x12"]);
    fs::remove_dir_all(&blocker).unwrap();
    let r = gate.cli(&["deliver", "--drain", "--timeout", "30"]);
    assert_eq!(r.code(), Some(0), "{r}");
    assert_eq!(visible(&gate.out()), [order_file("ACME", PO)]);
    let (key, _) = acme(101);
    assert_order_delivered(&document(&gate.out().join(order_file("ACME", PO))), &key);
}

// ---------------------------------------------------------------------------------------------
// Retention.

#[test]
fn prune_removes_exactly_the_keys_older_than_their_partners_window() {
    let gate = Gate::new(300, "reject");
    // ACME keeps keys 30 days, GLOBEX 45.
    let files = [
        gate.write("a201.x12", po("ACME", 201, 201)),
        gate.write("a202.x12", po("ACME", 202, 202)),
        gate.write("a203.x12", po("ACME", 203, 203)),
        gate.write("g201.x12", po("GLOBEX", 201, 201)),
    ];
    let refs: Vec<&Path> = files.iter().map(|f| f.as_path()).collect();
    let first = gate.process(&refs);
    assert_eq!(first.code(), Some(0), "{first}");
    assert_eq!(count(&first.reports(), "accepted"), 4, "{first}");
    crate::util::age(
        &gate.database(),
        &[
            ("ZZ:ACME:000000201", 31),   // beyond 30 days
            ("ZZ:ACME:000000202", 29),   // within
            ("ZZ:GLOBEX:000000201", 40), // within 45
        ],
    );
    let prune = run({
        let mut c = gate.command(&gate.config);
        c.arg("prune");
        c
    });
    assert_eq!(prune.code(), Some(0), "{prune}");
    assert_eq!(prune.stdout, "ZZ:ACME:000000201\n", "{prune}");
    let event = gate
        .history()
        .into_iter()
        .find(|e| e["event"] == "prune")
        .expect("a prune event");
    assert_eq!(event["removed"], serde_json::json!(["ZZ:ACME:000000201"]));

    let again = gate.process(&refs);
    assert_eq!(again.code(), Some(0), "{again}");
    let dispositions: Vec<String> = again
        .reports()
        .iter()
        .map(|r| r["disposition"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        dispositions,
        ["accepted", "duplicate", "duplicate", "duplicate"],
        "{again}"
    );
}

// ---------------------------------------------------------------------------------------------
// Names derived from keys.

#[test]
fn output_names_from_hostile_sender_ids_stay_inside_the_output_folders() {
    let gate = Gate::new(300, "accept");
    let senders = ["A/B", "A_B", "../../etc x", "A\u{7}B C", "..", "/", ". ."];
    let files: Vec<PathBuf> = senders
        .iter()
        .enumerate()
        .map(|(i, s)| gate.write(&format!("s{i}.x12"), po(s, 101, 101)))
        .collect();
    let refs: Vec<&Path> = files.iter().map(|f| f.as_path()).collect();
    let r = gate.process(&refs);
    assert_eq!(r.code(), Some(0), "{r}");
    let reports = r.reports();
    assert_eq!(count(&reports, "accepted"), senders.len(), "{r}");
    for report in &reports {
        let written = report["acks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (gate.outbox(), a))
            .chain(
                report["outputs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| (gate.out(), o)),
            );
        for (dir, path) in written {
            let path = Path::new(path.as_str().unwrap());
            assert_eq!(path.parent(), Some(dir.as_path()), "{}", path.display());
            let name = path.file_name().unwrap().to_str().unwrap();
            assert!(
                !name.starts_with('.') && !name.contains("..") && !name.contains(' '),
                "{name:?}"
            );
            assert!(name.chars().all(|c| !c.is_control()), "{name:?}");
            assert!(path.is_file(), "{}", path.display());
        }
    }
    // Nothing but files in the output folders (besides the hidden temporary one), one per
    // sender, and nothing created elsewhere.
    for dir in [gate.out(), gate.outbox()] {
        let names = visible(&dir);
        assert_eq!(names.len(), senders.len(), "{names:?}");
        for n in &names {
            assert!(dir.join(n).is_file(), "{n:?}");
        }
    }
    let mut top = visible(gate.root());
    top.sort();
    assert_eq!(top, ["data", "in", "partners.toml"]);
    let mut data = visible(&gate.root().join("data"));
    data.retain(|n| !n.starts_with("x12gate.db"));
    assert_eq!(data, ["out", "outbox"]);
    // A/B and A_B share ISA13 but not files.
    assert_ne!(reports[0]["outputs"], reports[1]["outputs"]);
    assert_ne!(reports[0]["acks"], reports[1]["acks"]);
}

// ---------------------------------------------------------------------------------------------
// The `--json` contract and exit codes.

fn assert_report_shape(r: &Value) {
    let o = r
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {r}"));
    for field in [
        "file",
        "correlation_id",
        "sender",
        "receiver",
        "control_number",
    ] {
        assert!(o[field].is_string(), "{field} in {r}");
    }
    assert!(o["disposition"].is_string(), "{r}");
    for field in ["reason_code", "reason"] {
        assert!(
            o.get(field).is_some_and(|v| v.is_null() || v.is_string()),
            "{field} in {r}"
        );
    }
    for field in ["acks", "outputs"] {
        for p in o[field]
            .as_array()
            .unwrap_or_else(|| panic!("{field} in {r}"))
        {
            let p = Path::new(p.as_str().unwrap());
            assert!(p.is_absolute() && p.is_file(), "{field} in {r}");
        }
    }
}

#[test]
fn json_lines_carry_every_field_with_its_type_and_exit_codes_follow() {
    let gate = Gate::new(300, "reject");
    let text = po("ACME", 101, 101);
    let original = gate.write("po.x12", &text);
    let changed = gate.write("changed.x12", changed_po1(&text));

    let accepted = gate.process(&[&original]);
    assert_eq!(accepted.code(), Some(0), "{accepted}");
    let a = accepted.report();
    assert_report_shape(&a);
    assert_eq!(a["file"], original.display().to_string());
    assert_eq!(a["correlation_id"], "ZZ:ACME:000000101");
    assert_eq!(a["sender"], "ZZ:ACME");
    assert_eq!(a["receiver"], "ZZ:X12GATE");
    assert_eq!(a["control_number"], "000000101");
    assert_eq!(a["disposition"], "accepted");
    assert_eq!(a["reason_code"], Value::Null);
    assert_eq!(a["attempt"], 1);
    assert!(a.get("took_over").is_none_or(Value::is_null), "{a}");
    assert_eq!(a["acks"].as_array().unwrap().len(), 1);
    assert_eq!(a["outputs"].as_array().unwrap().len(), 1);

    let duplicate = gate.process(&[&original]);
    assert_eq!(duplicate.code(), Some(0), "{duplicate}");
    let d = duplicate.report();
    assert_report_shape(&d);
    assert_eq!(d["disposition"], "duplicate");
    assert_eq!(d["acks"], a["acks"]);
    assert_eq!(d["outputs"], serde_json::json!([]));

    let conflict = gate.process(&[&changed]);
    assert_eq!(conflict.code(), Some(3), "{conflict}");
    let c = conflict.report();
    assert_report_shape(&c);
    assert_eq!(c["disposition"], "conflict");
    assert_eq!(c["reason_code"], "025");
    assert!(!c["reason"].as_str().unwrap().is_empty());
    assert_eq!(c["control_number"], "000000101");

    // history --json: at least the fields of process --json, and the time, for every
    // decision on an interchange (the registry's own `init` event names the gateway).
    let history = gate.history();
    assert_eq!(history[0]["event"], "init", "{history:?}");
    assert!(history[0]["installation"].is_string(), "{history:?}");
    for e in history.iter().skip(1) {
        assert_report_shape(e);
        assert!(e["time"].is_string() && e["event"].is_string(), "{e}");
    }
}

#[test]
fn a_non_x12_file_is_rejected_with_a_reason_and_the_other_files_are_processed() {
    let gate = Gate::new(300, "reject");
    let first = gate.write("first.x12", po("ACME", 101, 101));
    let junk = gate.write("junk.txt", "hello, this is not EDI\n");
    let last = gate.write("last.x12", order("ACME", 102, 102, "PO-4472"));
    let r = gate.process(&[&first, &junk, &last]);
    assert_eq!(r.code(), Some(3), "{r}");
    let reports = r.reports();
    assert_eq!(reports.len(), 3, "{r}");
    assert_eq!(reports[0]["disposition"], "accepted");
    assert_eq!(reports[2]["disposition"], "accepted");
    let j = &reports[1];
    assert_eq!(j["file"], junk.display().to_string());
    assert_eq!(j["disposition"], "rejected");
    assert!(!j["reason"].as_str().unwrap_or("").is_empty(), "{j}");
    assert_eq!(j["correlation_id"], Value::Null);
    assert_eq!(j["acks"], serde_json::json!([]));
    assert_eq!(j["outputs"], serde_json::json!([]));
    assert!(gate
        .history()
        .iter()
        .any(|e| e["event"] == "unreadable" && e["file"] == junk.display().to_string()));
    assert_eq!(
        visible(&gate.out()),
        [order_file("ACME", PO), order_file("ACME", "PO-4472")]
    );
    assert_eq!(
        delivered_by(&gate.out(), "ZZ:ACME:000000101"),
        [order_file("ACME", PO)]
    );
    assert_eq!(
        delivered_by(&gate.out(), "ZZ:ACME:000000102"),
        [order_file("ACME", "PO-4472")]
    );
}

#[test]
fn a_broken_received_ta1_is_rejected_with_its_reason_and_not_answered() {
    let gate = Gate::new(300, "reject");
    let broken = gate.write(
        "ta1.x12",
        fs::read(fixture("broken/ta1-note-code-invalid.x12")).unwrap(),
    );
    let good = gate.write("ta1-good.x12", fs::read(fixture("ta1-only.x12")).unwrap());
    let r = gate.process(&[&broken, &good]);
    let reports = r.reports();
    assert_eq!(reports.len(), 2, "{r}");
    let b = &reports[0];
    assert_eq!(b["disposition"], "rejected", "{b}");
    assert_eq!(b["reason_code"], "024", "{b}");
    assert!(b["reason"].as_str().unwrap_or("").contains("TA105"), "{b}");
    assert_eq!(b["acks"], serde_json::json!([]), "{b}");
    assert_eq!(reports[1]["disposition"], "accepted", "{}", reports[1]);
    assert_eq!(reports[1]["acks"], serde_json::json!([]));
}

// ---------------------------------------------------------------------------------------------
// Crashes (SPEC section 8).

#[cfg(feature = "failpoints")]
mod crash {
    use std::time::Instant;

    use super::*;

    /// History events that complete an interchange (the others record a decision that completes
    /// nothing: duplicate, conflict, in_progress, unreadable, prune).
    fn completions(events: &[Value]) -> Vec<&Value> {
        events
            .iter()
            .filter(|e| {
                ["accepted", "partial", "rejected"].contains(&e["event"].as_str().unwrap_or(""))
            })
            .collect()
    }

    /// A complete interchange: it ends with an IEA whose IEA02 is its ISA13.
    fn assert_complete_interchange(bytes: &[u8]) {
        let segs = segments(bytes);
        let last = segs.last().unwrap();
        assert_eq!(last[0], "IEA", "{segs:?}");
        assert_eq!(last[2], segment(&segs, "ISA")[13], "{segs:?}");
    }

    /// The quantity (PO102) of the first PO1 of a business document's file (structured form).
    fn first_po1_quantity(doc: &Value) -> String {
        let set = &doc["set"];
        set["content"]["PO1_loop"][0]["PO1"]["quantity_ordered_02"]
            .as_str()
            .unwrap_or_else(|| panic!("no PO1_loop[0].PO1.quantity_ordered_02 in {set}"))
            .to_string()
    }

    fn assert_crashed(r: &Run) {
        assert!(
            !r.status.success() && r.code() != Some(3),
            "the failpoint should abort the process\n{r}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(r.status.signal(), Some(6), "SIGABRT expected\n{r}");
        }
    }

    /// The files of `dir` that a reader would take, with their bytes.
    fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
        visible(dir)
            .into_iter()
            .map(|n| {
                let bytes = fs::read(dir.join(&n)).unwrap();
                (n, bytes)
            })
            .collect()
    }

    /// A crash at `point`, then at once a `--no-wait` rerun: the crashed process is dead
    /// (same host), so its claim is taken over without waiting out the lease, and the work is
    /// finished once, with the very bytes the crashed run wrote.
    fn crash_then_take_over(point: &str) {
        // A lease far longer than the test: nothing may wait for it.
        crash_then_take_over_on(Gate::new(300, "reject"), point);
    }

    fn crash_then_take_over_on(gate: Gate, point: &str) {
        let file = gate.write("po.x12", po("ACME", 101, 101));
        let (key, stem) = acme(101);

        let started = Instant::now();
        let crash = run(gate.process_command(
            &gate.config,
            &[],
            Some(&format!("{point}=return")),
            &[&file],
        ));
        assert_crashed(&crash);
        let after_crash = (contents(&gate.out()), contents(&gate.outbox()));
        // Documents reach `out/` only through their delivery, after their decision is
        // recorded: a crash before it leaves none there.
        assert!(
            after_crash.0.is_empty(),
            "{point}: {:?}",
            visible(&gate.out())
        );
        // No acknowledgment is placed before its decision is recorded.
        assert!(
            after_crash.1.is_empty(),
            "{point}: {:?}",
            visible(&gate.outbox())
        );

        let rerun = run(gate.process_command(&gate.config, &["--no-wait"], None, &[&file]));
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the rerun waited for the dead owner's lease: {:?}",
            started.elapsed()
        );
        assert_eq!(rerun.code(), Some(0), "{rerun}");
        let r = rerun.report();
        assert_eq!(r["disposition"], "accepted", "{rerun}");
        assert_eq!(r["attempt"], 2, "{rerun}");
        let from = r["took_over"].as_str().unwrap_or_default();
        assert_eq!(
            x12gate::owner::liveness(from),
            x12gate::owner::Liveness::Dead,
            "took over from the crashed process: {rerun}"
        );
        // One delivery of the order, whole, by this interchange.
        assert_eq!(visible(&gate.out()), [order_file("ACME", PO)]);
        assert_order_delivered(&document(&gate.out().join(order_file("ACME", PO))), &key);
        assert_eq!(visible(&gate.outbox()), [format!("{stem}.997.x12")]);
        for dir in [gate.out(), gate.outbox()] {
            assert_eq!(leftovers(&dir), Vec::<String>::new(), "{}", dir.display());
        }
        let docs = r["documents"].as_array().expect("documents");
        assert_eq!(docs.len(), 1, "{rerun}");
        assert_eq!(docs[0]["disposition"], "new", "{rerun}");
        // The rerun took no new control number for its acknowledgment, and the file in
        // `out/` is the document the registry keeps, byte for byte.
        let final_files = (contents(&gate.out()), contents(&gate.outbox()));
        let kept = gate.cli(&["documents", "body", &format!("ZZ:ACME:850:{PO}:00:")]);
        assert_eq!(final_files.0[0].1, kept.stdout.as_bytes(), "{point}");
        let ack = segments(&final_files.1[0].1);
        assert_eq!(segment(&ack, "ISA")[13], "000000001");

        // The audit trail shows the takeover, and one completion only.
        let events = gate.events(&key);
        let done = completions(&events);
        assert_eq!(done.len(), 1, "{events:?}");
        assert_eq!(done[0]["event"], "accepted");
        assert_eq!(done[0]["attempt"], 2);
        assert_eq!(done[0]["took_over"], r["took_over"]);
        assert!(
            !events.iter().any(|e| e["event"] == "in_progress"),
            "--no-wait named a dead process as the holder: {events:?}"
        );

        let again = gate.process(&[&file]);
        assert_eq!(again.report()["disposition"], "duplicate", "{again}");
        assert_eq!(visible(&gate.out()), [order_file("ACME", PO)]);
    }

    #[test]
    fn crash_after_the_claim_is_taken_over_at_once() {
        crash_then_take_over("claim.after");
    }

    #[test]
    fn crash_after_the_outputs_is_taken_over_at_once() {
        crash_then_take_over("outputs.after");
    }

    #[test]
    fn crash_before_the_completion_is_taken_over_at_once() {
        crash_then_take_over("complete.before");
    }

    /// A conflicting content refused again while its TA1 still waits in the outbox (the
    /// redo of a file whose placing a crash cut short, or a quick resend) gets that TA1
    /// again: no second TA1, no number taken.
    #[test]
    fn a_conflict_refused_again_sends_the_same_ta1_and_takes_no_number() {
        let gate = Gate::new(300, "reject");
        let first = gate.write("po101.x12", po("ACME", 101, 101));
        assert_eq!(gate.process(&[&first]).code(), Some(0));
        let other = gate.write("other.x12", changed_po1(&po("ACME", 101, 101)));
        let crash = run(gate.process_command(
            &gate.config,
            &[],
            Some("acks.before=return"),
            &[
                &other,
                &gate.write("po102.x12", order("ACME", 102, 102, "PO-102")),
            ],
        ));
        assert_crashed(&crash);
        let refused = gate.process(&[&other]);
        assert_eq!(refused.dispositions(), ["conflict"], "{refused}");
        let ta1s = |gate: &Gate| -> Vec<(String, Vec<u8>)> {
            contents(&gate.outbox())
                .into_iter()
                .filter(|(n, _)| n.ends_with(".ta1.x12"))
                .collect()
        };
        let once = ta1s(&gate);
        assert_eq!(once.len(), 1, "{once:?}");
        let again = gate.process(&[&other]);
        assert_eq!(again.dispositions(), ["conflict"], "{again}");
        assert_eq!(ta1s(&gate), once, "the same TA1, same name, same ISA13");
        // The next answer takes the number after the TA1's: none was taken by the redo.
        let ta1_isa13: u32 = segment(&segments(&once[0].1), "ISA")[13].parse().unwrap();
        let next = gate.write("po103.x12", order("ACME", 103, 103, "PO-103"));
        assert_eq!(gate.process(&[&next]).code(), Some(0));
        let ack = segments(&fs::read(gate.outbox().join("ZZ_ACME_000000103.997.x12")).unwrap());
        assert_eq!(segment(&ack, "ISA")[13], format!("{:09}", ta1_isa13 + 1));
    }

    /// A crash once the decision is recorded but before its acknowledgment is placed: the
    /// documents are kept in the registry (their files not written yet), the outbox is
    /// empty, and the rerun (a duplicate) places the stored acknowledgment, once, with the
    /// number it was recorded with, and writes the document's file.
    #[test]
    fn crash_before_the_acknowledgment_is_placed_is_answered_by_the_rerun() {
        let gate = Gate::new(300, "reject");
        let file = gate.write("po.x12", po("ACME", 101, 101));
        let (key, stem) = acme(101);
        let crash =
            run(gate.process_command(&gate.config, &[], Some("acks.before=return"), &[&file]));
        assert_crashed(&crash);
        assert_eq!(visible(&gate.out()), Vec::<String>::new());
        let kept = gate.cli(&["documents", "body", &format!("ZZ:ACME:850:{PO}:00:")]);
        assert_eq!(kept.code(), Some(0), "{kept}");
        assert_eq!(visible(&gate.outbox()), Vec::<String>::new());
        let rerun = gate.process(&[&file]);
        assert_eq!(rerun.code(), Some(0), "{rerun}");
        assert_eq!(rerun.report()["disposition"], "duplicate", "{rerun}");
        assert_eq!(rerun.report()["replayed"], "accepted", "{rerun}");
        let acks = visible(&gate.outbox());
        assert_eq!(acks, [format!("{stem}.997.x12")]);
        assert_eq!(visible(&gate.out()), [order_file("ACME", PO)]);
        let written = fs::read(gate.out().join(order_file("ACME", PO))).unwrap();
        assert_eq!(written, kept.stdout.as_bytes());
        assert_order_delivered(&document(&gate.out().join(order_file("ACME", PO))), &key);
        let bytes = fs::read(gate.outbox().join(&acks[0])).unwrap();
        assert_complete_interchange(&bytes);
        let ack = segments(&bytes);
        assert_eq!(segment(&ack, "ISA")[13], "000000001");
        assert_eq!(segment(&ack, "AK9")[1], "A");
        assert_eq!(completions(&gate.events(&key)).len(), 1);
    }

    /// Each crash point on a PostgreSQL registry: killed, then rerun, nothing lost or
    /// doubled, the work finished with the crashed run's bytes.
    #[test]
    fn on_postgres_each_crash_is_taken_over_at_once() {
        for point in ["claim.after", "outputs.after", "complete.before"] {
            let Some(gate) = Gate::on_postgres(300, "reject") else {
                return;
            };
            crash_then_take_over_on(gate, point);
        }
    }

    #[test]
    fn after_a_crash_concurrent_reruns_accept_exactly_once() {
        concurrent_reruns_after_crashes(Gate::new(1, "reject"));
    }

    #[test]
    fn on_postgres_after_a_crash_concurrent_reruns_accept_exactly_once() {
        if let Some(gate) = Gate::on_postgres(1, "reject") {
            concurrent_reruns_after_crashes(gate);
        }
    }

    fn concurrent_reruns_after_crashes(gate: Gate) {
        const PROCESSES: usize = 4;
        let rerun_config = gate.other_config("rerun.toml", 60, "reject");
        let points = ["claim.after", "outputs.after", "complete.before"];
        let mut files = Vec::new();
        // Three orders, each in its own interchange.
        let number = |isa13: u32| format!("PO-{isa13}");
        for (i, point) in points.iter().enumerate() {
            let isa13 = 301 + i as u32;
            let text = order("ACME", isa13, isa13, &number(isa13));
            let file = gate.write(&format!("po{isa13}.x12"), text);
            let crash = run(gate.process_command(
                &gate.config,
                &[],
                Some(&format!("{point}=return")),
                &[&file],
            ));
            assert_crashed(&crash);
            files.push((isa13, file));
        }
        // The reruns' clock is a minute ahead: past the crashed processes' one-second leases.
        let clock = crate::util::TestClock::new(gate.root());
        clock.advance(60_000);
        let children: Vec<(u32, Child)> = files
            .iter()
            .flat_map(|(isa13, file)| {
                (0..PROCESSES).map(|_| {
                    let (var, value) = clock.env();
                    let child = gate
                        .process_command(&rerun_config, &[], None, &[file])
                        .env(var, value)
                        .spawn()
                        .unwrap();
                    (*isa13, child)
                })
            })
            .collect();
        let runs: Vec<(u32, Run)> = children.into_iter().map(|(n, c)| (n, finish(c))).collect();
        for (isa13, _) in &files {
            let (key, stem) = acme(*isa13);
            let reports: Vec<Value> = runs
                .iter()
                .filter(|(n, _)| n == isa13)
                .map(|(_, r)| {
                    assert_eq!(r.code(), Some(0), "{r}");
                    r.report()
                })
                .collect();
            assert_eq!(count(&reports, "accepted"), 1, "{key}: {reports:?}");
            assert_eq!(
                count(&reports, "duplicate"),
                PROCESSES - 1,
                "{key}: {reports:?}"
            );
            let accepted = reports.iter().find(|r| r["disposition"] == "accepted");
            assert_eq!(accepted.unwrap()["attempt"], 2);
            let docs = accepted.unwrap()["documents"].clone();
            assert_eq!(docs.as_array().map(Vec::len), Some(1), "{key}: {docs}");
            assert_eq!(docs[0]["disposition"], "new", "{key}: {docs}");
            let mine = |dir: &Path| -> Vec<String> {
                visible(dir)
                    .into_iter()
                    .filter(|n| n.starts_with(&format!("{stem}.")))
                    .collect()
            };
            let delivered = delivered_by(&gate.out(), &key);
            assert_eq!(delivered, [order_file("ACME", &number(*isa13))], "{key}");
            let doc = document(&gate.out().join(&delivered[0]));
            assert_eq!(doc["delivery"]["disposition"], "new", "{doc}");
            assert_eq!(mine(&gate.outbox()), [format!("{stem}.997.x12")]);
            assert_eq!(completions(&gate.events(&key)).len(), 1);
        }
        // Nothing else in out/: one whole file per order.
        assert_eq!(visible(&gate.out()).len(), points.len());
        for dir in [gate.out(), gate.outbox()] {
            assert_eq!(leftovers(&dir), Vec::<String>::new(), "{}", dir.display());
        }
    }

    /// Downstream readers take every non-hidden file of out/ and outbox/: after a crash, what
    /// they find must be whole, final files (or nothing), never a partial or temporary one.
    /// A document's file comes only with its delivery, after its decision and acknowledgment.
    #[test]
    fn after_a_crash_the_output_folders_hold_only_whole_files() {
        for point in [
            "claim.after",
            "outputs.after",
            "complete.before",
            "acks.before",
            "deliver.sent",
        ] {
            let gate = Gate::new(300, "reject");
            let file = gate.write("po.x12", po("ACME", 101, 101));
            let crash = run(gate.process_command(
                &gate.config,
                &[],
                Some(&format!("{point}=return")),
                &[&file],
            ));
            assert_crashed(&crash);
            let (out, outbox) = (visible(&gate.out()), visible(&gate.outbox()));
            for dir in [gate.out(), gate.outbox()] {
                assert_eq!(leftovers(&dir), Vec::<String>::new(), "{point}");
            }
            if point != "deliver.sent" {
                // The acknowledgment only once the decision is recorded (then placed by the
                // rerun: see `crash_before_the_acknowledgment_is_placed_is_answered_by_the_rerun`).
                assert!(
                    out.is_empty() && outbox.is_empty(),
                    "{point}: {out:?} {outbox:?}"
                );
                continue;
            }
            // Written, its delivery not yet recorded: whole, and written again (the same
            // bytes) by the next pass, which records it.
            assert_eq!(out, [order_file("ACME", PO)], "{point}");
            assert_eq!(outbox, ["ZZ_ACME_000000101.997.x12"], "{point}");
            let doc = document(&gate.out().join(&out[0]));
            assert_order_delivered(&doc, "ZZ:ACME:000000101");
            assert_eq!(first_po1_quantity(&doc), "120");
            let before = fs::read(gate.out().join(&out[0])).unwrap();
            let rerun = gate.process(&[&file]);
            assert_eq!(rerun.code(), Some(0), "{rerun}");
            let delivered = gate.cli(&["deliveries", "--json"]).reports();
            assert_eq!(delivered.len(), 1, "{delivered:?}");
            assert_eq!(delivered[0]["state"], "delivered", "{delivered:?}");
            assert_eq!(visible(&gate.out()), out);
            assert_eq!(fs::read(gate.out().join(&out[0])).unwrap(), before);
        }
    }

    /// Starts `file` in a process that stalls (sleep failpoint) right after its claim, waits
    /// until the claim is in the registry, and stops the process there (SIGSTOP) until
    /// [`resume`]: however loaded the machine, it does nothing more until the test says so.
    fn stalled_owner(gate: &Gate, file: &Path) -> Stalled {
        let child = gate
            .process_command(&gate.config, &[], Some("claim.after=sleep(8000)"), &[file])
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(
                Instant::now() < deadline,
                "the stalled process never claimed"
            );
            // Read-only: the stalled process may still be creating the registry.
            if let Ok(Some(registry)) = x12gate::registry::Registry::open_read_only(
                &x12gate::registry::Database::from(&gate.database()),
            ) {
                if registry
                    .stats()
                    .unwrap_or_default()
                    .iter()
                    .any(|(_, d, _)| d == "in_flight")
                {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        signal(&child, "STOP");
        Stalled(Some(child))
    }

    /// A stopped process; killed if the test ends without [`resume`] (a failed assertion),
    /// so that it does not stay stopped after the tests.
    struct Stalled(Option<Child>);

    impl Drop for Stalled {
        fn drop(&mut self) {
            if let Some(child) = &mut self.0 {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Lets a stalled owner go on from where it stopped, and waits for its end.
    fn resume(mut stalled: Stalled) -> Run {
        let child = stalled.0.take().expect("stopped once, resumed once");
        signal(&child, "CONT");
        finish(child)
    }

    fn signal(child: &Child, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", child.id());
    }

    /// `file` processed with `config` by a process whose clock is a minute ahead: past the
    /// stalled owner's lease (`lease_seconds = 1`) without waiting for it.
    fn after_the_lease(gate: &Gate, config: &Path, file: &Path) -> Run {
        let clock = crate::util::TestClock::new(gate.root());
        clock.advance(60_000);
        let mut c = gate.process_command(config, &[], None, &[file]);
        let (var, value) = clock.env();
        c.env(var, value);
        run(c)
    }

    /// The clock of [`after_the_lease`] is the one the process decides by: what it records
    /// is dated a day ahead when the test clock says so.
    #[test]
    fn a_process_on_the_test_clock_records_its_time() {
        let gate = Gate::new(300, "reject");
        let file = gate.write("po.x12", po("ACME", 101, 101));
        let clock = crate::util::TestClock::new(gate.root());
        clock.advance(86_400_000);
        let before = chrono::Utc::now();
        let mut c = gate.process_command(&gate.config, &[], None, &[&file]);
        let (var, value) = clock.env();
        c.env(var, value);
        let r = run(c);
        assert_eq!(r.report()["disposition"], "accepted", "{r}");
        let events = gate.events("ZZ:ACME:000000101");
        let at = events[0]["time"].as_str().unwrap_or_default();
        let at = chrono::DateTime::parse_from_rfc3339(at).unwrap();
        assert!(at >= before + chrono::Duration::hours(24), "{events:?}");
    }

    /// A process that stalls past its lease while a resend with *different* content arrives:
    /// the unfinished claim may have written outputs that downstream took, so the different
    /// content is a conflict, not a takeover; the stalled owner, still the owner, finishes,
    /// and out/ holds the content the registry records.
    #[test]
    fn different_content_never_takes_over_an_unfinished_claim() {
        let gate = Gate::new(1, "reject");
        let rerun_config = gate.other_config("rerun.toml", 60, "reject");
        let text = po("ACME", 101, 101);
        let first = gate.write("first.x12", &text);
        let second = gate.write("second.x12", changed_po1(&text));

        let stalled = stalled_owner(&gate, &first);
        let other = after_the_lease(&gate, &rerun_config, &second);
        let stalled = resume(stalled);
        assert_eq!(other.report()["disposition"], "conflict", "{other}");
        assert_eq!(other.report()["reason_code"], "025", "{other}");
        assert_eq!(stalled.report()["disposition"], "accepted", "{stalled}");

        let events = gate.events("ZZ:ACME:000000101");
        let done = completions(&events);
        assert_eq!(done.len(), 1, "{events:?}");
        assert_eq!(done[0]["file"], first.display().to_string());
        assert_eq!(visible(&gate.out()), [order_file("ACME", PO)], "{stalled}");
        let doc = document(&gate.out().join(order_file("ACME", PO)));
        assert_order_delivered(&doc, "ZZ:ACME:000000101");
        assert_eq!(
            first_po1_quantity(&doc),
            "120",
            "out/ holds the recorded content
stalled: {stalled}"
        );
    }

    /// The same with identical content: the outputs are the same bytes, but only one process
    /// may report `accepted`; the stalled one's completion was never recorded.
    #[test]
    fn a_stalled_owner_and_the_process_that_took_over_do_not_both_report_accepted() {
        let gate = Gate::new(1, "reject");
        let rerun_config = gate.other_config("rerun.toml", 60, "reject");
        let file = gate.write("po.x12", po("ACME", 101, 101));

        let stalled = stalled_owner(&gate, &file);
        let taker = after_the_lease(&gate, &rerun_config, &file);
        let stalled = resume(stalled);
        let t = taker.report();
        assert_eq!(t["disposition"], "accepted", "{taker}");
        assert_eq!(t["attempt"], 2, "{taker}");
        assert_eq!(visible(&gate.out()), [order_file("ACME", PO)]);
        assert_order_delivered(
            &document(&gate.out().join(order_file("ACME", PO))),
            "ZZ:ACME:000000101",
        );
        assert_eq!(visible(&gate.outbox()), ["ZZ_ACME_000000101.997.x12"]);
        assert_eq!(completions(&gate.events("ZZ:ACME:000000101")).len(), 1);
        let s = stalled.report();
        assert_ne!(
            s["disposition"], "accepted",
            "two processes report accepted for one interchange\ntaker: {taker}\nstalled: {stalled}"
        );
    }
}

#[test]
fn a_group_control_number_reused_across_interchanges_is_rejected() {
    let gate = Gate::new(300, "reject");
    let first = gate.write("first.x12", po("ACME", 201, 777));
    let second = gate.write("second.x12", po("ACME", 202, 777));
    let third = gate.write("third.x12", po("ACME", 203, 778));
    let run = gate.process(&[&first, &second, &third]);
    assert_eq!(run.code(), Some(3), "{run}");
    let reports = run.reports();
    let dispositions: Vec<&str> = reports
        .iter()
        .map(|r| r["disposition"].as_str().unwrap())
        .collect();
    assert_eq!(dispositions, ["accepted", "rejected", "accepted"], "{run}");
    // The second interchange's 997 rejects its group with AK905 6 (004010 has no "not unique" code).
    let ack = segments(&fs::read(gate.outbox().join("ZZ_ACME_000000202.997.x12")).unwrap());
    let ak9 = segment(&ack, "AK9");
    assert_eq!(ak9, ["AK9", "R", "1", "1", "0", "6"], "{ack:?}");
    // A corrected resend of the second with a fresh GS06 goes through as attempt 2.
    let fixed = gate.write("fixed.x12", po("ACME", 202, 779));
    let again = gate.process(&[&fixed]);
    assert_eq!(again.report()["disposition"], "accepted", "{again}");
    assert_eq!(again.report()["attempt"], 2, "{again}");
}

#[test]
fn a_rejected_group_s_reason_is_what_rejected_it_not_a_warning_beside_it() {
    // A set no definition reads (an 850 of 003040) is noted as a warning on its group; when
    // the group is then rejected for its reused GS06, the reason says so, not the note.
    let gate = Gate::new(300, "reject");
    let old = |isa13, gs06| swap(&po("ACME", isa13, gs06), "*X*004010~", "*X*003040~");
    let first = gate.write("first.x12", old(221, 790));
    let second = gate.write("second.x12", old(222, 790));
    let run = gate.process(&[&first, &second]);
    assert_eq!(run.dispositions(), ["accepted", "rejected"], "{run}");
    let reason = run.reports()[1]["reason"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(reason.contains("790"), "{reason}");
    assert!(!reason.contains("envelope level only"), "{reason}");
}

#[test]
fn a_group_number_reused_for_another_application_receiver_is_another_group() {
    // X12.6 keys a group by GS01, GS02, GS03 and GS06 together: the same GS06 addressed to
    // another application (GS03) of ours is a new group, not a resend.
    let gate = Gate::new(300, "reject");
    let first = gate.write("first.x12", po("ACME", 211, 780));
    let other = swap(
        &po("ACME", 212, 780),
        "GS*PO*ACME*X12GATE*",
        "GS*PO*ACME*X12GATE-WMS*",
    );
    let second = gate.write("second.x12", other);
    let again = gate.write("again.x12", po("ACME", 213, 780));
    let run = gate.process(&[&first, &second, &again]);
    let dispositions = run.dispositions();
    // The third repeats the first group (same GS01/GS02/GS03/GS06) in a new interchange.
    assert_eq!(dispositions, ["accepted", "accepted", "rejected"], "{run}");
}

#[test]
fn senders_whose_fields_join_alike_do_not_share_a_key() {
    // ISA05 "ZZ:A" with ISA06 "B" and ISA05 "ZZ" with ISA06 "A:B" once made one key, so the
    // second sender's interchange was refused as a conflict (TA1 025) with the first's.
    let gate = Gate::new(300, "accept");
    let one = swap(
        &po("ACME", 401, 401),
        "*ZZ*ACME           *",
        "*ZZ:A*B              *",
    );
    let two = swap(
        &po("ACME", 401, 402),
        "*ZZ*ACME           *",
        "*ZZ*A:B            *",
    );
    let (a, b) = (gate.write("one.x12", one), gate.write("two.x12", two));
    let run = gate.process(&[&a, &b]);
    let reports = run.reports();
    let dispositions = run.dispositions();
    // The first is refused for its 4-byte ISA05 (TA105 005); the second is its own.
    assert_eq!(dispositions, ["rejected", "accepted"], "{run}");
    assert_eq!(reports[0]["reason_code"], "005", "{run}");
    for r in &reports {
        assert_ne!(r["disposition"], "conflict", "{run}");
        assert_ne!(r["reason_code"], "025", "{run}");
    }
}

#[test]
fn an_inbound_997_is_checked_like_any_set_and_never_answered() {
    let gate = Gate::new(300, "reject");
    let good = fs::read_to_string(fixture("997-004010.x12")).unwrap();
    let broken = swap(&good, "SE*6*0001~", "SE*5*0001~");
    let broken = swap(&broken, "*000000107*", "*000000108*");
    let broken = swap(&broken, "IEA*1*000000107~", "IEA*1*000000108~");
    let (a, b) = (
        gate.write("good.x12", good),
        gate.write("broken.x12", broken),
    );
    let run = gate.process(&[&a, &b]);
    let reports = run.reports();
    let dispositions = run.dispositions();
    // A 997 with a wrong SE01 was once "accepted" and translated.
    assert_eq!(dispositions, ["accepted", "rejected"], "{run}");
    assert_eq!(reports[1]["outputs"], serde_json::json!([]), "{run}");
    for r in &reports {
        assert_eq!(
            r["acks"],
            serde_json::json!([]),
            "never acknowledged back: {run}"
        );
    }
}

#[test]
fn history_filters_by_partner_control_number_disposition_and_time() {
    let gate = Gate::new(300, "reject");
    let a = gate.write("a.x12", po("ACME", 301, 301));
    let b = gate.write("b.x12", po("GLOBEX", 302, 302));
    let bad = gate.write(
        "bad.x12",
        swap(&po("ACME", 303, 303), "SE*13*0001~", "SE*12*0001~"),
    );
    assert_eq!(gate.process(&[&a, &b, &bad]).code(), Some(3));
    assert_eq!(gate.process(&[&a]).code(), Some(0)); // a duplicate event
    let filtered = |args: &[&str]| -> Vec<(String, String)> {
        let r = run({
            let mut c = gate.command(&gate.config);
            c.args(["history", "--json"]).args(args);
            c
        });
        assert_eq!(r.code(), Some(0), "{r}");
        r.reports()
            .iter()
            .map(|e| {
                (
                    e["event"].as_str().unwrap_or("").to_string(),
                    e["key"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    let acme = filtered(&["--partner", "ZZ:ACME"]);
    assert_eq!(
        acme,
        [
            ("accepted".to_string(), "ZZ:ACME:000000301".to_string()),
            ("rejected".to_string(), "ZZ:ACME:000000303".to_string()),
            ("duplicate".to_string(), "ZZ:ACME:000000301".to_string()),
        ]
    );
    assert_eq!(
        filtered(&["--control-number", "000000302"]),
        [("accepted".to_string(), "ZZ:GLOBEX:000000302".to_string())]
    );
    assert_eq!(
        filtered(&["--disposition", "rejected"]),
        [("rejected".to_string(), "ZZ:ACME:000000303".to_string())]
    );
    assert_eq!(
        filtered(&["--since", "2999-01-01"]),
        Vec::<(String, String)>::new()
    );
    assert_eq!(
        filtered(&["--until", "2000-01-01T00:00:00Z"]),
        Vec::<(String, String)>::new()
    );
    assert_eq!(
        filtered(&["--since", "2000-01-01", "--disposition", "duplicate"]).len(),
        1
    );
    let bad_time = run({
        let mut c = gate.command(&gate.config);
        c.args(["history", "--since", "yesterday"]);
        c
    });
    assert_eq!(bad_time.code(), Some(2), "{bad_time}");
}

// ---------------------------------------------------------------------------------------------
// A file larger than the read window.

/// Everything a run left in the output folders, with the hour of writing blanked (ISA09/10,
/// GS04/05 of our acknowledgments) so that two runs compare.
fn outputs_of(dir: &Path) -> Vec<(String, String)> {
    let mut all = Vec::new();
    for folder in ["data/out", "data/outbox"] {
        let Ok(entries) = fs::read_dir(dir.join(folder)) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if !path.is_file() {
                continue;
            }
            let text = String::from_utf8_lossy(&fs::read(&path).unwrap()).into_owned();
            let text = if text.starts_with("ISA") {
                let t = text.as_bytes()[105] as char;
                text.split(t)
                    .map(|segment| {
                        let mut el: Vec<&str> = segment.split('*').collect();
                        // Segments after the first start with the line break after the
                        // terminator: GS is `\nGS`.
                        let (a, b) = match el.first().map(|id| id.trim_start()) {
                            Some("ISA") => (9, 10),
                            Some("GS") => (4, 5),
                            _ => (0, 0),
                        };
                        for i in [a, b] {
                            if i > 0 && i < el.len() {
                                el[i] = "";
                            }
                        }
                        el.join("*")
                    })
                    .collect::<Vec<_>>()
                    .join(&t.to_string())
            } else {
                text
            };
            all.push((
                format!("{folder}/{}", e.file_name().to_string_lossy()),
                text,
            ));
        }
    }
    all.sort();
    all
}

/// An interchange of more than a megabyte (11,000 816s, no business document) between two
/// small ones, processed with pieces larger than a megabyte: its parts after the first are
/// cut from pieces of a megabyte, and the interchange after it from pieces of the window
/// again. Everything comes out as it does read whole.
#[test]
fn a_large_interchange_read_a_megabyte_at_a_time_is_processed_as_it_is_whole() {
    let mut text = String::from_utf8(fs::read(fixture("850-004010.x12")).unwrap()).unwrap();
    text += "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240301*1200*^*00501*000000778*0*P*:~\n";
    text += "GS*OR*ACME*X12GATE*20240301*1200*73*X*005010~\n";
    for i in 1..=11000 {
        text += &format!("ST*816*{i:04}~\nBHT*0001*00*REF{i}*20240301~\nN1*BY*ACME RETAIL*92*00{i}~\nHL*1**A~\nN1*ST*STORE {i}*92*S{i}~\nSE*6*{i:04}~\n");
    }
    text += "GE*11000*73~\nIEA*1*000000778~\n";
    text += &String::from_utf8(fs::read(fixture("810-005010.x12")).unwrap()).unwrap();
    assert!(text.len() > 1_200_000, "{}", text.len());
    let mut seen = Vec::new();
    for window in [None, Some("1100000")] {
        let gate = Gate::new(300, "accept");
        let file = gate.write("large.x12", &text);
        let extra: Vec<&str> = window.iter().flat_map(|w| ["--window", *w]).collect();
        let r = run(gate.process_command(&gate.config, &extra, None, &[&file]));
        assert_eq!(r.code(), Some(0), "{r}");
        assert_eq!(
            r.dispositions(),
            ["accepted", "accepted", "accepted"],
            "{r}"
        );
        let reports = serde_json::to_string(&r.reports())
            .unwrap()
            .replace(&gate.root().display().to_string(), "<gate>");
        seen.push((reports, outputs_of(gate.root())));
    }
    let ack = seen[0]
        .1
        .iter()
        .find(|(name, _)| name.contains("000000778") && name.ends_with(".997.x12"))
        .map(|(_, text)| text.clone())
        .expect("the large interchange's 997");
    assert!(ack.contains("AK9*A*11000*11000*11000"), "{ack}");
    assert_eq!(
        seen[1].0, seen[0].0,
        "read a megabyte at a time: the reports"
    );
    let names = |o: &[(String, String)]| o.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&seen[1].1), names(&seen[0].1));
    for ((name, got), (_, want)) in seen[1].1.iter().zip(&seen[0].1) {
        // Where they part, not megabytes of both.
        let at = got
            .bytes()
            .zip(want.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        assert!(
            got == want,
            "{name} read a megabyte at a time parts at byte {at}: {:?} where read whole: {:?}",
            got.get(at.saturating_sub(80)..(at + 80).min(got.len())),
            want.get(at.saturating_sub(80)..(at + 80).min(want.len())),
        );
    }
}

/// An interchange of 1,472 bytes: a group of eight 850s, the fifth with a wrong SE01, a TA1
/// after its GE, and a group of five 816s.
fn mixed_interchange() -> String {
    let mut out = String::from("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240301*1200*^*00501*000000777*0*P*:~\n");
    out += "GS*PO*ACME*X12GATE*20240301*1200*71*X*005010~\n";
    for i in 1..=8 {
        let se = if i == 5 { 99 } else { 5 };
        out += &format!("ST*850*{i:04}~\nBEG*00*SA*PO-77{i}**20240301~\nPO1*1*{i}*EA*1.00**VN*X{i}~\nCTT*1~\nSE*{se}*{i:04}~\n");
    }
    out += "GE*8*71~\nTA1*000000500*240301*1100*A*000~\n";
    out += "GS*OR*ACME*X12GATE*20240301*1200*72*X*005010~\n";
    for i in 1..=5 {
        out += &format!("ST*816*{i:04}~\nBHT*0001*00*REF{i}*20240301~\nN1*BY*ACME RETAIL*92*00{i}~\nHL*1**A~\nN1*ST*STORE {i}*92*S{i}~\nSE*6*{i:04}~\n");
    }
    out + "GE*5*72~\nIEA*2*000000777~\n"
}

#[test]
fn a_file_read_in_pieces_is_processed_as_it_is_whole() {
    use x12gate::pipeline::{Gateway, ProcessOptions, Settled, Source};
    // Every valid fixture, a resend, a conflicting copy, garbage and a broken ISA between.
    let mut file = Vec::new();
    for (i, name) in [
        "850-004010.x12",
        "810-005010.x12",
        "856-004010-sopi.x12",
        "850-005010-multi.x12",
        "two-interchanges.x12",
        "crlf.x12",
        "delims-pipe-newline.x12",
        "850-004010.x12",
        "997-004010.x12",
        "ta1-with-997.x12",
    ]
    .iter()
    .enumerate()
    {
        file.extend(fs::read(fixture(name)).unwrap());
        match i % 3 {
            0 => file.extend_from_slice(b"\n\n"),
            1 => file.extend_from_slice(b"not an interchange\n"),
            _ => file.extend_from_slice(b"ISA*broken~\n"),
        }
    }
    // Two groups in one interchange: 850s, one of them broken (a partial acceptance), then
    // a TA1 between the groups, then 816s (no business document: the interchange's
    // translation holds them). Larger than the small windows: read in parts, twice.
    file.extend_from_slice(mixed_interchange().as_bytes());
    let conflicting = String::from_utf8(fs::read(fixture("810-004010.x12")).unwrap())
        .unwrap()
        .replacen("~", "~\n", 3);
    file.extend_from_slice(fs::read(fixture("810-004010.x12")).unwrap().as_slice());
    file.extend_from_slice(conflicting.replace("*30*", "*31*").as_bytes());
    let mut seen = Vec::new();
    for window in [usize::MAX, 300, 700, 4096] {
        let gate = Gate::new(300, "accept");
        let path = gate.dir.path().join("big.x12");
        fs::write(&path, &file).unwrap();
        let config = x12gate::config::Config::load(&gate.config).unwrap();
        let mut registry = x12gate::setup::open_registry(&config).unwrap();
        let options = ProcessOptions {
            window,
            ..ProcessOptions::new(true)
        };
        let schemas = x12gate::schema::builtin().unwrap();
        // Handed over as they are settled: a piece's reports at a time.
        let mut handed = Vec::new();
        Gateway::new(&config, schemas, &mut registry, options.clone())
            .process(
                &[Source::from(path.as_path())],
                &mut |settled| match settled {
                    Settled::Reports {
                        file,
                        reports,
                        last,
                    } => handed.push((file, reports, last)),
                    Settled::Failed { error, .. } => panic!("{error}"),
                },
            )
            .unwrap();
        assert!(handed.iter().all(|(file, ..)| *file == 0));
        // Only the file's final hand-over says it is done.
        let lasts: Vec<bool> = handed.iter().map(|(.., last)| *last).collect();
        assert_eq!(lasts.iter().filter(|l| **l).count(), 1, "{lasts:?}");
        assert_eq!(lasts.last(), Some(&true));
        let nonempty = handed.iter().filter(|(_, r, _)| !r.is_empty()).count();
        if window < file.len() {
            assert!(nonempty > 2, "window {window}: {nonempty} hand-overs");
        } else {
            assert_eq!(nonempty, 1);
        }
        let reports: Vec<String> = handed
            .into_iter()
            .flat_map(|(_, reports, _)| reports)
            .map(|r| serde_json::to_string(&r).unwrap())
            .map(|r| r.replace(&gate.dir.path().display().to_string(), "<gate>"))
            .collect();
        seen.push((window, reports, outputs_of(gate.dir.path())));
    }
    let (_, reports, outputs) = &seen[0];
    assert!(reports.len() >= 14, "{reports:#?}");
    for kind in ["\"accepted\"", "\"duplicate\"", "\"rejected\""] {
        assert!(
            reports.iter().any(|r| r.contains(kind)),
            "no {kind} in {reports:#?}"
        );
    }
    assert!(outputs.len() >= 10, "{outputs:#?}");
    // The mixed interchange: partly accepted; its translation holds the TA1 and the 816s.
    assert!(
        reports.iter().any(|r| r.contains("\"partial\"")),
        "{reports:#?}"
    );
    let (_, translation) = outputs
        .iter()
        .find(|(name, _)| name == "data/out/ZZ_ACME_000000777.json")
        .expect("the mixed interchange's translation");
    assert!(
        translation.contains("\"ta1\":[[\"000000500\""),
        "{translation}"
    );
    assert_eq!(
        translation.matches("\"st\":[\"816\"").count(),
        5,
        "{translation}"
    );
    for (window, got_reports, got_outputs) in &seen[1..] {
        assert_eq!(got_reports, reports, "window {window}");
        assert_eq!(got_outputs, outputs, "window {window}");
    }
}

// ---------------------------------------------------------------------------------------------
// A full disk.

/// A tmpfs of `size` mounted on `dir` (made if missing), unmounted when dropped.
struct Mounted(PathBuf);

impl Mounted {
    /// `None`, with the reason printed, where mounting is not allowed (not root, no tmpfs).
    fn tmpfs(dir: &Path, size: &str) -> Option<Mounted> {
        fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Mounted(dir.to_path_buf())),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: cannot mount a tmpfs: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount: {e}");
                None
            }
        }
    }

    fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The interchanges (sender's ISA13) that the 997s in `dir` accept.
fn accepted_by_acks(dir: &Path) -> Vec<u32> {
    let mut accepted = Vec::new();
    for name in visible(dir) {
        let ack = segments(&fs::read(dir.join(&name)).unwrap());
        if segment(&ack, "AK9")[1] == "A" {
            let isa13 = name
                .strip_prefix("ZZ_ACME_")
                .and_then(|n| n.get(..9))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{name} names no ACME interchange"));
            accepted.push(isa13);
        }
    }
    accepted
}

#[test]
fn a_full_out_folder_never_lets_an_acceptance_out_before_its_documents() {
    // `out/` on a 2 MB file system that fills during the second batch of 256 files: the
    // documents are durable in the registry before their 997s go out, so every interchange
    // is answered once; what `out/` holds is whole, and once there is room again the next
    // pass writes the rest, each document once.
    let gate = Gate::new(300, "reject");
    let Some(mounted) = Mounted::tmpfs(&gate.out(), "2m") else {
        return;
    };
    const FILES: u32 = 700;
    let files: Vec<PathBuf> = (1..=FILES)
        .map(|n| {
            gate.write(
                &format!("po{n:04}.x12"),
                order("ACME", n, n, &format!("PO-{n}")),
            )
        })
        .collect();
    let all: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let full = gate.process(&all);
    assert_eq!(full.code(), Some(0), "the disk filled: {full}");
    assert!(full.stderr.contains("to retry"), "{full}");
    let retrying = gate
        .cli(&["deliveries", "--json", "--state", "retrying"])
        .reports();
    assert!(!retrying.is_empty(), "filled mid-run: {full}");
    assert!(
        retrying.iter().all(|d| d["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("data/out"))),
        "the full folder is named: {retrying:?}"
    );
    let written = visible(&gate.out());
    assert!(
        !written.is_empty() && written.len() < FILES as usize,
        "filled mid-run: {} written",
        written.len()
    );
    for name in &written {
        let doc =
            read_json(&gate.out().join(name)).unwrap_or_else(|| panic!("{name} is not whole"));
        assert_eq!(doc["set"]["se"][0], "13", "a whole set: {doc}");
    }
    assert_eq!(
        gate.cli(&["documents", "--all", "--json"]).reports().len(),
        FILES as usize
    );
    mounted.resize("64m");
    let rerun = gate.process(&all);
    assert_eq!(rerun.code(), Some(0), "{rerun}");
    let drained = gate.cli(&["deliver", "--drain", "--timeout", "120"]);
    assert_eq!(drained.code(), Some(0), "{drained}");
    for n in 1..=FILES {
        let doc = gate.out().join(order_file("ACME", &format!("PO-{n}")));
        let doc = read_json(&doc).unwrap_or_else(|| panic!("PO-{n} never written"));
        assert_eq!(doc["delivery"]["interchange"], format!("ZZ:ACME:{n:09}"));
    }
    let mut answered = accepted_by_acks(&gate.outbox());
    answered.sort_unstable();
    assert_eq!(
        answered,
        (1..=FILES).collect::<Vec<_>>(),
        "each answered once"
    );
    assert_eq!(visible(&gate.outbox()).len(), FILES as usize);
    assert_eq!(visible(&gate.out()).len(), FILES as usize);
}
