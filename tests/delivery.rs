//! Delivery of business documents to the ERP, exactly once by key (issue 13), through the real
//! binary against a small ERP served by the test itself (axum, on 127.0.0.1:0): a flaky ERP
//! (503s, answers later than the client waits, some of them booked), a circuit breaker
//! against an ERP that is down, dead letters and their retry, SIGKILLs of `watch` in the
//! middle of deliveries, the ERP's reference for a resent PO, headers from the environment,
//! and a command as destination.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::{output_progressing, wait_progressing, STALL};

const BIN: &str = env!("CARGO_BIN_EXE_x12gate");

// ---------------------------------------------------------------------------------------
// The ERP: an HTTP server that books orders by Idempotency-Key.
// ---------------------------------------------------------------------------------------

/// How the ERP answers.
#[derive(Clone, Debug)]
enum Mode {
    /// Books (200 `{"order_id": "SO-n"}`), or 409 with the booked order for a key booked.
    Healthy,
    /// Healthy, but every answer comes this much later (the booking is made at once).
    Slow(Duration),
    /// 503 for everything.
    Down,
    /// 400 for these document keys (every request when `None`); healthy for others.
    Reject(Option<BTreeSet<String>>),
    /// Deterministically pseudo-random per (key, how many requests the key had before):
    /// 30% 503; 5% booked at once but answered only after `late` (past the client's
    /// timeout, so its retry must get a 409); 5% not booked and answered 503 after `late`;
    /// the rest healthy. From a key's seventh request on, healthy: no key ever runs out
    /// of attempts.
    Flaky { seed: u64, late: Duration },
    /// No answer for this long, then 503.
    Hang(Duration),
    /// This status and body for everything, nothing booked.
    Fixed(u16, &'static str),
    /// 503 for the first `n` requests of each key starting with `prefix`; healthy else.
    // Only the ordering test under kills uses it, and it needs the failpoints.
    #[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
    FailFirst { prefix: &'static str, n: usize },
}

/// One request the ERP received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    /// The Idempotency-Key header (None when missing or empty).
    key: Option<String>,
    /// The X-Correlation-Id header.
    correlation: Option<String>,
    /// Every header, by lower-case name.
    headers: BTreeMap<String, String>,
    /// The body, when it is JSON.
    body: Option<Value>,
    raw: Vec<u8>,
    at: Instant,
    /// The status the ERP answered (or is about to answer).
    status: u16,
    /// Answered without any delay the ERP put in.
    prompt: bool,
}

struct Books {
    mode: Mode,
    seen: Vec<Seen>,
    /// Idempotency-Key → order id.
    booked: BTreeMap<String, String>,
    /// Bookings made, by the `document_key` in the body: a client that sent one document
    /// under two idempotency keys would be booked twice here.
    bookings: BTreeMap<String, u32>,
    next: u64,
}

/// What the ERP does with one request.
enum Plan {
    Fail,
    Book,
    BookThenLate(Duration),
    LateFail(Duration),
    Reject,
    Fixed(u16, &'static str),
}

struct Erp {
    port: u16,
    books: Arc<Mutex<Books>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Erp {
    fn start(mode: Mode) -> Erp {
        Erp::start_at(0, mode)
    }

    /// On `port` (0: any free one).
    fn start_at(port: u16, mode: Mode) -> Erp {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind the test ERP");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let books = Arc::new(Mutex::new(Books {
            mode,
            seen: Vec::new(),
            booked: BTreeMap::new(),
            bookings: BTreeMap::new(),
            next: 0,
        }));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let shared = books.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("the test ERP's runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = axum::Router::new().fallback(answer).with_state(shared);
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = rx.await;
                    })
                    .await;
            });
        });
        Erp {
            port,
            books,
            stop: Some(tx),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/edi/inbound", self.port)
    }

    fn set_mode(&self, mode: Mode) {
        self.books.lock().unwrap().mode = mode;
    }

    fn seen(&self) -> Vec<Seen> {
        self.books.lock().unwrap().seen.clone()
    }

    /// How many requests this ERP has received: the progress a deliverer makes.
    fn received(&self) -> usize {
        self.books.lock().unwrap().seen.len()
    }

    /// `deliver --drain` at `gate` until nothing is left to send, with no deadline of its
    /// own: it fails only when this ERP receives nothing for [`STALL`] (a hang, not a slow
    /// machine). (status, stdout, stderr)
    fn drain(&self, gate: &Gate, what: &str) -> (ExitStatus, String, String) {
        let child = gate.command(&["deliver", "--drain"]).spawn().unwrap();
        let out = output_progressing(child, STALL, what, || self.received());
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn booked(&self) -> BTreeMap<String, String> {
        self.books.lock().unwrap().booked.clone()
    }

    fn bookings(&self) -> BTreeMap<String, u32> {
        self.books.lock().unwrap().bookings.clone()
    }

    /// Books `key` as `order` before anything is sent (booked by someone else earlier).
    fn prebook(&self, key: &str, order: &str) {
        let mut b = self.books.lock().unwrap();
        b.booked.insert(key.to_string(), order.to_string());
    }
}

impl Drop for Erp {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// A 64-bit mix (splitmix64's finaliser).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The answer: `body` as JSON, or a string body as it is (text, or nothing).
fn json_reply(status: u16, body: Value) -> axum::response::Response {
    use axum::response::IntoResponse;
    let text = match body {
        Value::String(raw) => raw,
        other => other.to_string(),
    };
    (
        axum::http::StatusCode::from_u16(status).unwrap(),
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        text,
    )
        .into_response()
}

/// Books `key` (or finds it booked): the status and body of the answer.
fn book(b: &mut Books, key: &Option<String>, doc_key: &Option<String>) -> (u16, Value) {
    if let Some(order) = key.as_ref().and_then(|k| b.booked.get(k)) {
        return (409, json!({"error": "already booked", "order_id": order}));
    }
    b.next += 1;
    let order = format!("SO-{}", b.next);
    if let Some(k) = key {
        b.booked.insert(k.clone(), order.clone());
    }
    *b.bookings
        .entry(
            doc_key
                .clone()
                .unwrap_or_else(|| "<no document_key>".into()),
        )
        .or_default() += 1;
    (200, json!({"status": "booked", "order_id": order}))
}

async fn answer(
    axum::extract::State(books): axum::extract::State<Arc<Mutex<Books>>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let at = Instant::now();
    let headers: BTreeMap<String, String> = headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let key = headers
        .get("idempotency-key")
        .filter(|k| !k.is_empty())
        .cloned();
    let correlation = headers.get("x-correlation-id").cloned();
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let doc_key = parsed
        .as_ref()
        .and_then(|b| b.get("document_key"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let (status, reply, delay) = {
        let mut b = books.lock().unwrap();
        let before = b.seen.iter().filter(|s| s.key == key).count() as u64;
        let plan = match &b.mode {
            Mode::Healthy => Plan::Book,
            Mode::Slow(d) => Plan::BookThenLate(*d),
            Mode::Down => Plan::Fail,
            Mode::Hang(d) => Plan::LateFail(*d),
            Mode::Fixed(status, body) => Plan::Fixed(*status, body),
            Mode::FailFirst { prefix, n } => {
                if key.as_deref().is_some_and(|k| k.starts_with(prefix)) && before < *n as u64 {
                    Plan::Fail
                } else {
                    Plan::Book
                }
            }
            Mode::Reject(None) => Plan::Reject,
            Mode::Reject(Some(keys)) => {
                if key.as_ref().is_some_and(|k| keys.contains(k)) {
                    Plan::Reject
                } else {
                    Plan::Book
                }
            }
            Mode::Flaky { seed, late } => {
                let r = mix(fnv(key.as_deref().unwrap_or("")) ^ mix(seed ^ before)) % 100;
                match r {
                    _ if before >= 6 => Plan::Book,
                    0..=29 => Plan::Fail,
                    30..=34 => Plan::BookThenLate(*late),
                    35..=39 => Plan::LateFail(*late),
                    _ => Plan::Book,
                }
            }
        };
        let (status, reply, delay) = match plan {
            Plan::Fail => (503, json!({"error": "unavailable"}), Duration::ZERO),
            Plan::LateFail(d) => (503, json!({"error": "unavailable"}), d),
            Plan::Reject => (400, json!({"error": "bad document"}), Duration::ZERO),
            Plan::Fixed(status, body) => (status, Value::String(body.into()), Duration::ZERO),
            Plan::Book => {
                let (s, v) = book(&mut b, &key, &doc_key);
                (s, v, Duration::ZERO)
            }
            Plan::BookThenLate(d) => {
                let (s, v) = book(&mut b, &key, &doc_key);
                (s, v, d)
            }
        };
        b.seen.push(Seen {
            method: method.to_string(),
            path: uri.path().to_string(),
            key: key.clone(),
            correlation,
            headers,
            body: parsed,
            raw: body.to_vec(),
            at,
            status,
            prompt: delay.is_zero(),
        });
        (status, reply, delay)
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    json_reply(status, reply)
}

// ---------------------------------------------------------------------------------------
// The gateway: a temporary folder with partners.toml, driven through the binary.
// ---------------------------------------------------------------------------------------

const CONTACT: &str = "edi-desk@acme.example";
const OWNER: &str = "erp-team@example.com";

/// A gateway in a temporary folder, accepting ACME; `partner` goes into ACME's partner
/// table, `tail` (destination tables) after it.
struct Gate {
    dir: tempfile::TempDir,
    runs: std::cell::Cell<u32>,
}

impl Gate {
    fn new(partner: &str, tail: &str) -> Gate {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("partners.toml"),
            format!(
                r#"[gateway]
id_qualifier = "ZZ"
id = "X12GATE"
inbox = "data/inbox"
outbox = "data/outbox"
out = "data/out"
archive = "data/archive"
rejected = "data/rejected"
database = "data/x12gate.db"
lease_seconds = 300

[[partner]]
name = "Acme Retail"
id_qualifier = "ZZ"
id = "ACME"
{partner}
{tail}
"#
            ),
        )
        .unwrap();
        fs::create_dir(dir.path().join("in")).unwrap();
        let gate = Gate {
            dir,
            runs: std::cell::Cell::new(0),
        };
        let init = gate.run(&["init"]);
        assert!(init.0.success(), "init: {}{}", init.1, init.2);
        gate
    }

    /// ACME with its contact, delivering to `destination` (a `[[destination]]` table).
    fn to(destination: &str) -> Gate {
        Gate::new(
            &format!("contact = \"{CONTACT}\"\ndestination = \"erp\""),
            destination,
        )
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.root().join("in").join(name);
        fs::write(&path, text).unwrap();
        path
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(self.root())
            .env_remove("FAILPOINTS")
            .env_remove("RUST_LOG")
            .env_remove("TEST_TOKEN")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn output(mut c: Command) -> (ExitStatus, String, String) {
        let out = c.output().expect("run x12gate");
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs x12gate: (status, stdout, stderr).
    fn run(&self, args: &[&str]) -> (ExitStatus, String, String) {
        Gate::output(self.command(args))
    }

    /// Runs x12gate and asserts it exits 0: its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let (status, stdout, stderr) = self.run(args);
        assert_eq!(
            status.code(),
            Some(0),
            "x12gate {}:\n{stdout}\n{stderr}",
            args.join(" ")
        );
        stdout
    }

    /// `process --json [flags] FILES`, asserting it exits 0: its reports.
    fn process(&self, flags: &[&str], files: &[PathBuf]) -> Vec<Value> {
        let mut args = vec!["process".to_string(), "--json".to_string()];
        args.extend(flags.iter().map(|f| f.to_string()));
        args.extend(files.iter().map(|f| f.display().to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        lines(&self.ok(&args))
    }

    /// `deliveries --json ARGS`: one object per delivery.
    fn deliveries(&self, args: &[&str]) -> Vec<Value> {
        let mut all = vec!["deliveries", "--json"];
        all.extend_from_slice(args);
        lines(&self.ok(&all))
    }

    /// The deliveries by document key (each key once).
    fn deliveries_by_key(&self) -> BTreeMap<String, Value> {
        let mut by_key = BTreeMap::new();
        for d in self.deliveries(&[]) {
            let key = d["key"].as_str().expect("a delivery's key").to_string();
            if let Some(first) = by_key.insert(key.clone(), d.clone()) {
                panic!("{key} has two deliveries: {first} and {d}");
            }
        }
        by_key
    }

    /// `watch` in the background, its stderr (RUST_LOG=warn) in a log file.
    fn watch(&self) -> Watcher {
        self.watch_on(None)
    }

    /// `watch`, on the test's `clock` when there is one.
    fn watch_on(&self, clock: Option<&crate::util::TestClock>) -> Watcher {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let log = self.root().join(format!("watch-{n}.log"));
        let err = fs::File::create(&log).unwrap();
        let mut command = Command::new(BIN);
        command
            .current_dir(self.root())
            .arg("watch")
            .env_remove("FAILPOINTS")
            .env(
                "RUST_LOG",
                std::env::var("DELIVERY_TEST_LOG").unwrap_or("warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err);
        if let Some((var, file)) = clock.map(crate::util::TestClock::env) {
            command.env(var, file);
        }
        let child = command.spawn().expect("start x12gate watch");
        Watcher { child, log }
    }
}

/// A watcher process; killed if a test ends while it still runs.
struct Watcher {
    child: Child,
    log: PathBuf,
}

impl Watcher {
    fn sigterm(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    fn wait(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("watch did not exit within {within:?}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
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
fn wait_for(
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
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// An http destination named `erp` at `url`, with the contract's example settings but for
/// `overrides` (`key`, TOML value) — keys not among the defaults are added.
fn http(url: &str, overrides: &[(&str, &str)]) -> String {
    let url = format!("\"{url}\"");
    let mut settings: Vec<(String, String)> = [
        ("kind", "\"http\""),
        ("url", url.as_str()),
        ("timeout_ms", "200"),
        ("max_attempts", "12"),
        ("max_age_hours", "72"),
        ("result_ref", "\"/order_id\""),
        ("backoff_ms", "20"),
        ("backoff_max_ms", "200"),
        ("circuit_failures", "5"),
        ("circuit_cooldown_ms", "2000"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in overrides {
        match settings.iter_mut().find(|(name, _)| name == k) {
            Some(s) => s.1 = v.to_string(),
            None => settings.push((k.to_string(), v.to_string())),
        }
    }
    let mut out = String::from("\n[[destination]]\nname = \"erp\"\n");
    for (k, v) in settings {
        out.push_str(&format!("{k} = {v}\n"));
    }
    out
}

/// One interchange from ACME: ISA13 and GS06 `n`, one 850 per PO (ST02 from `st02`),
/// with element separator `e` and terminator `t`.
fn interchange(n: u32, pos: &[&str], st02: u32, e: char, t: char) -> String {
    let mut out = format!(
        "ISA{e}00{e}          {e}00{e}          {e}ZZ{e}ACME           {e}ZZ{e}X12GATE        {e}2401{:02}{e}0930{e}U{e}00401{e}{n:09}{e}0{e}P{e}>{t}\nGS{e}PO{e}ACME{e}X12GATE{e}202401{:02}{e}0930{e}{n}{e}X{e}004010{t}\n",
        n % 28 + 1,
        n % 28 + 1
    );
    for (i, po) in pos.iter().enumerate() {
        let id = format!("{:04}", st02 + i as u32);
        let body = format!(
            "BEG*00*SA*{po}**20240115~PO1*1*120*EA*4.25*PE*UP*012345678905~PO1*2*48*CA*18.90*PE*UP*012345678912~CTT*2~"
        );
        let segments = body.matches('~').count() + 2;
        let body = body
            .replace('*', &e.to_string())
            .replace('~', &format!("{t}\n"));
        out.push_str(&format!(
            "ST{e}850{e}{id}{t}\n{body}SE{e}{segments}{e}{id}{t}\n"
        ));
    }
    out.push_str(&format!(
        "GE{e}{}{e}{n}{t}\nIEA{e}1{e}{n:09}{t}\n",
        pos.len()
    ));
    out
}

fn an_850(n: u32, pos: &[&str]) -> String {
    interchange(n, pos, 1, '*', '~')
}

/// One interchange from ACME (ISA13 and GS06 `n`) of 860s: a change with sequence 1 of
/// each of `pos`.
fn an_860(n: u32, pos: &[&str]) -> String {
    let mut out = format!(
        "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240115*0930*U*00401*{n:09}*0*P*>~\nGS*PC*ACME*X12GATE*20240115*0930*{n}*X*004010~\n"
    );
    for (i, po) in pos.iter().enumerate() {
        out.push_str(&format!(
            "ST*860*{:04}~\nBCH*04*SA*{po}**1*20240116~\nPOC*1*CA*10*5*EA*4.25*PE*UP*012345678905~\nSE*4*{:04}~\n",
            i + 1,
            i + 1
        ));
    }
    out.push_str(&format!("GE*{}*{n}~\nIEA*1*{n:09}~\n", pos.len()));
    out
}

/// The document key of the change with sequence 1 of PO `po`.
fn change_key(po: &str) -> String {
    format!("ZZ:ACME:860:{po}:04:1")
}

/// For each PO: the ERP took its original (a 2xx) before it received anything of its change.
fn originals_first(seen: &[Seen], pos: &[String]) {
    for po in pos {
        let booked = seen
            .iter()
            .position(|s| s.key.as_deref() == Some(key(po).as_str()) && s.status == 200);
        let change = seen
            .iter()
            .position(|s| s.key.as_deref() == Some(change_key(po).as_str()));
        let (Some(booked), Some(change)) = (booked, change) else {
            panic!("{po}: original booked at {booked:?}, change received at {change:?}");
        };
        assert!(
            booked < change,
            "{po}: the change came at request {change}, the original was booked at {booked}"
        );
    }
}

/// The document key of the original 850 with PO number `po`.
fn key(po: &str) -> String {
    format!("ZZ:ACME:850:{po}:00:")
}

/// The correlation id (and interchange key) of ACME's interchange `n`.
fn correlation(n: u32) -> String {
    format!("ZZ:ACME:{n:09}")
}

/// Writes `files` interchanges from `first_isa13` on, carrying `per_file(i)` POs each, PO
/// numbers `PO-<prefix><n>` counted from 1: the files and, per document key, the
/// correlation id of the interchange that carries it.
fn load(
    gate: &Gate,
    first_isa13: u32,
    files: u32,
    per_file: impl Fn(u32) -> u32,
) -> (Vec<PathBuf>, BTreeMap<String, String>) {
    let mut paths = Vec::new();
    let mut expected = BTreeMap::new();
    let mut next = 1;
    for i in 0..files {
        let n = first_isa13 + i;
        let pos: Vec<String> = (0..per_file(i))
            .map(|_| {
                next += 1;
                format!("PO-{}", next - 1)
            })
            .collect();
        for po in &pos {
            expected.insert(key(po), correlation(n));
        }
        let refs: Vec<&str> = pos.iter().map(String::as_str).collect();
        paths.push(gate.write(&format!("f{n}.x12"), &an_850(n, &refs)));
    }
    (paths, expected)
}

/// The documents of `reports` (of `process --json`), asserting each is new: key → report.
fn new_documents(reports: &[Value]) -> BTreeMap<String, Value> {
    let mut docs = BTreeMap::new();
    for r in reports {
        assert_eq!(r["disposition"], "accepted", "{r}");
        for d in r["documents"].as_array().expect("a documents array") {
            assert_eq!(d["disposition"], "new", "{r}");
            docs.insert(d["key"].as_str().unwrap().to_string(), d.clone());
        }
    }
    docs
}

/// Every request carried one of the documents' keys as Idempotency-Key, the correlation
/// id of the interchange that carried it, and the document itself as body: requests by key.
fn check_requests(
    seen: &[Seen],
    expected: &BTreeMap<String, String>,
) -> BTreeMap<String, Vec<Seen>> {
    let mut by_key: BTreeMap<String, Vec<Seen>> = BTreeMap::new();
    for s in seen {
        let k = s
            .key
            .clone()
            .unwrap_or_else(|| panic!("a request without Idempotency-Key: {:?}", s.headers));
        let want = expected
            .get(&k)
            .unwrap_or_else(|| panic!("Idempotency-Key {k:?} is no document's key"));
        assert_eq!(s.method, "POST", "{k}");
        assert_eq!(s.path, "/edi/inbound", "{k}");
        assert_eq!(
            s.correlation.as_deref(),
            Some(want.as_str()),
            "{k}: X-Correlation-Id"
        );
        let body = s.body.as_ref().unwrap_or_else(|| {
            panic!(
                "{k}: the body is not JSON: {}",
                String::from_utf8_lossy(&s.raw)
            )
        });
        assert_eq!(body["document_key"], k.as_str(), "{k}: the body's document");
        assert_eq!(body["delivery"]["interchange"], want.as_str(), "{k}");
        by_key.entry(k).or_default().push(s.clone());
    }
    by_key
}

/// Each expected key booked exactly once (and nothing else booked), and its delivery
/// `delivered` with the ERP's order id as result_ref.
fn check_booked_once(gate: &Gate, erp: &Erp, expected: &BTreeMap<String, String>) {
    let bookings = erp.bookings();
    let twice: Vec<_> = bookings.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "booked more than once: {twice:?}");
    let booked: BTreeSet<&String> = bookings.keys().collect();
    let want: BTreeSet<&String> = expected.keys().collect();
    let missing: Vec<_> = want.difference(&booked).collect();
    let extra: Vec<_> = booked.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "never booked: {missing:?}; booked though no document: {extra:?}"
    );
    let orders = erp.booked();
    let deliveries = gate.deliveries_by_key();
    assert_eq!(
        deliveries.len(),
        expected.len(),
        "one delivery per document"
    );
    for (k, corr) in expected {
        let d = deliveries
            .get(k)
            .unwrap_or_else(|| panic!("{k}: no delivery"));
        assert_eq!(d["state"], "delivered", "{d}");
        assert_eq!(
            d["result_ref"],
            orders[k].as_str(),
            "{k}: the ERP's order: {d}"
        );
        assert_eq!(d["correlation_id"], corr.as_str(), "{d}");
        assert_eq!(d["interchange"], corr.as_str(), "{d}");
        assert_eq!(d["destination"], "erp", "{d}");
        assert_eq!(d["partner"], "ZZ:ACME", "{d}");
    }
}

fn states(gate: &Gate) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for d in gate.deliveries(&[]) {
        *counts
            .entry(d["state"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    format!("deliveries by state: {counts:?}")
}

// ---------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------

/// 1,000 documents in 300 interchanges against a flaky ERP: each booked exactly once,
/// every delivery `delivered` with the ERP's order id (from the 200 or from the 409 that
/// answers a retry of what a timed-out request booked).
#[test]
fn a_flaky_erp_books_each_of_a_thousand_documents_exactly_once() {
    let started = Instant::now();
    let erp = Erp::start(Mode::Flaky {
        seed: 13,
        late: Duration::from_millis(900),
    });
    // A circuit that 40% failures will not open by chance (0.4^50): this test is about
    // retries, the circuit has its own. A prompt answer has 400 ms to arrive on a loaded
    // machine; a late one comes 500 ms after the client gave up.
    let gate = Gate::to(&http(
        &erp.url(),
        &[("circuit_failures", "50"), ("timeout_ms", "400")],
    ));
    let (files, expected) = load(&gate, 1000, 300, |i| if i < 100 { 4 } else { 3 });
    assert_eq!(expected.len(), 1000);
    let docs = new_documents(&gate.process(&["--no-deliver"], &files));
    assert_eq!(
        docs.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    assert!(erp.seen().is_empty(), "--no-deliver sent something");
    let queued = gate.deliveries(&["--state", "queued"]);
    assert_eq!(queued.len(), 1000, "all queued by process --no-deliver");
    assert!(queued.iter().all(|d| d["attempts"] == 0), "{:?}", queued[0]);

    let t = Instant::now();
    let (status, stdout, stderr) = gate.run(&["deliver", "--drain", "--timeout", "120", "--json"]);
    let took = t.elapsed();
    assert_eq!(status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        took < Duration::from_secs(118),
        "the drain ran into its timeout: {}",
        states(&gate)
    );

    let seen = erp.seen();
    let by_key = check_requests(&seen, &expected);
    check_booked_once(&gate, &erp, &expected);
    assert!(
        seen.len() > 1000,
        "no retries happened: {} requests",
        seen.len()
    );
    // A 409 answered some retry: what a timed-out request booked was recognised.
    let conflicts = seen.iter().filter(|s| s.status == 409).count();
    assert!(conflicts > 0, "no retry ever met a booking");
    // Attempts recorded are the requests sent; and once an answer of 2xx/409 came back at
    // once, nothing more was sent for that key.
    let deliveries = gate.deliveries_by_key();
    let mut after_success = Vec::new();
    for (k, requests) in &by_key {
        assert_eq!(
            deliveries[k]["attempts"].as_u64(),
            Some(requests.len() as u64),
            "{k}: attempts vs requests the ERP received: {}",
            deliveries[k]
        );
        if let Some(i) = requests
            .iter()
            .position(|s| s.prompt && (s.status == 200 || s.status == 409))
        {
            if i + 1 < requests.len() {
                after_success.push(k.clone());
            }
        }
    }
    assert!(
        after_success.is_empty(),
        "sent again after a prompt 2xx/409: {after_success:?}"
    );
    let again = gate.deliveries(&["--state", "queued"]).len()
        + gate.deliveries(&["--state", "retrying"]).len()
        + gate.deliveries(&["--state", "dead"]).len();
    assert_eq!(again, 0);
    assert_eq!(gate.deliveries(&["--partner", "ZZ:ACME"]).len(), 1000);
    // A second drain finds nothing to do.
    gate.ok(&["deliver", "--drain", "--timeout", "10"]);
    assert_eq!(
        erp.seen().len(),
        seen.len(),
        "a delivered document sent again"
    );
    eprintln!(
        "flaky: {} requests ({} answered 409) for 1000 documents; drain {:.1?}, test {:.1?}",
        seen.len(),
        conflicts,
        took,
        started.elapsed()
    );
}

/// An ERP that is down: after `circuit_failures` failures in a row the circuit opens and
/// only one probe goes per cooldown; nothing goes dead meanwhile; once the ERP is back,
/// everything is delivered. The cool-down is an hour of the watcher's clock, which the test
/// moves one cool-down at a time: no real time between two steps can pass for a cool-down,
/// so each step must bring exactly one probe, however slow the machine.
#[cfg(feature = "failpoints")]
#[test]
fn an_open_circuit_sends_one_probe_per_cooldown_until_the_erp_is_back() {
    const COOLDOWN_MS: i64 = 3_600_000;
    let erp = Erp::start(Mode::Down);
    let gate = Gate::to(&http(
        &erp.url(),
        &[
            ("circuit_failures", "3"),
            ("circuit_cooldown_ms", &COOLDOWN_MS.to_string()),
        ],
    ));
    let (files, expected) = load(&gate, 2000, 5, |_| 4);
    new_documents(&gate.process(&["--no-deliver"], &files));
    let clock = crate::util::TestClock::new(gate.root());
    let mut watch = gate.watch_on(Some(&clock));
    let opened = |log: &str| {
        log.lines().any(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("warn") && l.contains("circuit")
        })
    };
    // Every request the ERP received is an attempt recorded: none is still in flight.
    let recorded = || -> u64 {
        gate.deliveries(&[])
            .iter()
            .filter_map(|d| d["attempts"].as_u64())
            .sum()
    };
    wait_progressing(
        STALL,
        "the circuit opening",
        || erp.received() >= 3 && opened(&watch.log()) && recorded() == erp.received() as u64,
        || erp.received(),
        || watch.log(),
    );
    // The watcher's deliverer looks again at least once a second: a round of it with the
    // circuit open and the clock still, in which a wrong probe would show. Five such windows
    // in all, the six seconds the test watched when it ran on the wall's clock.
    let one_round = Duration::from_millis(1_200);
    std::thread::sleep(one_round);
    // After the third failure the circuit is open: a request sent with those three (in
    // flight together) aside, nothing goes until a cool-down has passed.
    let at_open = erp.received();
    assert!(
        at_open <= 3 + 1,
        "requests right after the circuit opened: {at_open}"
    );
    for step in 1..=4 {
        assert_eq!(
            erp.received(),
            at_open + step - 1,
            "step {step}: a request without a cool-down passing"
        );
        clock.advance(COOLDOWN_MS);
        wait_progressing(
            STALL,
            &format!("step {step}: the probe after a cool-down"),
            || erp.received() > at_open + step - 1,
            || erp.received(),
            || watch.log(),
        );
        std::thread::sleep(one_round);
        assert_eq!(
            erp.received(),
            at_open + step,
            "step {step}: more than one probe in one cool-down"
        );
    }
    let seen = erp.seen();
    assert!(seen.iter().all(|s| s.status == 503));
    let rows = gate.deliveries(&[]);
    assert_eq!(rows.len(), 20);
    for d in &rows {
        assert!(
            d["state"] == "queued" || d["state"] == "retrying",
            "nothing dies while the circuit is open: {d}"
        );
    }

    erp.set_mode(Mode::Healthy);
    clock.advance(COOLDOWN_MS);
    wait_progressing(
        STALL,
        "all 20 delivered after the ERP came back",
        || gate.deliveries(&["--state", "delivered"]).len() == 20,
        || erp.received(),
        || states(&gate),
    );
    check_requests(&erp.seen(), &expected);
    check_booked_once(&gate, &erp, &expected);
    watch.sigterm();
    let status = watch.wait(STALL);
    assert_eq!(
        status.code(),
        Some(0),
        "watch after SIGTERM; log:\n{}",
        watch.log()
    );
}

/// A 400 is a dead letter at once, owned by the partner's contact; retried by key it is
/// delivered once the ERP accepts it.
#[test]
fn a_400_is_dead_at_once_and_a_retry_by_key_delivers_it() {
    let erp = Erp::start(Mode::Reject(None));
    let gate = Gate::to(&http(&erp.url(), &[]));
    let file = gate.write("a.x12", &an_850(101, &["PO-1"]));
    let (status, stdout, stderr) = gate.run(&["process", "--json", &file.display().to_string()]);
    assert!(
        matches!(status.code(), Some(0) | Some(3)),
        "{status:?}\n{stdout}\n{stderr}"
    );
    let k = key("PO-1");
    assert_eq!(erp.seen().len(), 1, "process made one attempt");
    let dead = gate.deliveries(&["--state", "dead"]);
    assert_eq!(dead.len(), 1, "{}", states(&gate));
    let d = &dead[0];
    assert_eq!(d["key"], k.as_str());
    assert_eq!(d["state"], "dead");
    assert_eq!(d["attempts"], 1, "a 400 is not retried: {d}");
    assert_eq!(d["last_status"], "400", "{d}");
    assert!(d["last_error"].is_string(), "why it died: {d}");
    assert_eq!(d["owner"], CONTACT, "{d}");
    assert_eq!(d["correlation_id"], correlation(101).as_str(), "{d}");
    assert!(d["result_ref"].is_null(), "{d}");
    // Dead stays dead: a drain does not send it.
    gate.ok(&["deliver", "--drain", "--timeout", "5"]);
    assert_eq!(erp.seen().len(), 1, "a dead delivery was sent again");
    assert!(gate.deliveries(&["--state", "delivered"]).is_empty());

    erp.set_mode(Mode::Healthy);
    gate.ok(&["deliveries", "retry", &k]);
    let again = gate.deliveries(&[]);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0]["state"], "queued", "{}", again[0]);
    assert_eq!(again[0]["attempts"], 0, "attempts reset: {}", again[0]);
    gate.ok(&["deliver"]);
    let expected = BTreeMap::from([(k.clone(), correlation(101))]);
    check_requests(&erp.seen(), &expected);
    check_booked_once(&gate, &erp, &expected);
    assert_eq!(erp.seen().len(), 2);
}

/// `deliveries retry --all-dead` puts back every dead delivery (only those): the ERP
/// rejected two of three documents, then accepts them.
#[test]
fn retry_all_dead_puts_back_every_dead_delivery_and_only_those() {
    let rejected = BTreeSet::from([key("PO-1"), key("PO-3")]);
    let erp = Erp::start(Mode::Reject(Some(rejected.clone())));
    let gate = Gate::to(&http(&erp.url(), &[]));
    let file = gate.write("a.x12", &an_850(101, &["PO-1", "PO-2", "PO-3"]));
    let (status, stdout, stderr) = gate.run(&["process", "--json", &file.display().to_string()]);
    assert!(
        matches!(status.code(), Some(0) | Some(3)),
        "{status:?}\n{stdout}\n{stderr}"
    );
    let dead: BTreeSet<String> = gate
        .deliveries(&["--state", "dead"])
        .iter()
        .map(|d| d["key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(dead, rejected, "{}", states(&gate));
    let delivered = gate.deliveries(&["--state", "delivered"]);
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0]["key"], key("PO-2").as_str());

    erp.set_mode(Mode::Healthy);
    gate.ok(&["deliveries", "retry", "--all-dead"]);
    let queued: BTreeSet<String> = gate
        .deliveries(&["--state", "queued"])
        .iter()
        .map(|d| d["key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(queued, rejected, "only the dead are put back");
    gate.ok(&["deliver"]);
    let expected: BTreeMap<String, String> = ["PO-1", "PO-2", "PO-3"]
        .iter()
        .map(|p| (key(p), correlation(101)))
        .collect();
    let by_key = check_requests(&erp.seen(), &expected);
    check_booked_once(&gate, &erp, &expected);
    assert_eq!(
        by_key[&key("PO-2")].len(),
        1,
        "the delivered one was not sent again"
    );
    assert_eq!(by_key[&key("PO-1")].len(), 2);
}

/// SIGKILL of `watch` in the middle of deliveries, twenty times: every document is still
/// booked exactly once, under its own key and its interchange's correlation id.
#[test]
fn sigkills_of_watch_during_deliveries_book_each_document_once() {
    let erp = Erp::start(Mode::Slow(Duration::from_millis(30)));
    let gate = Gate::to(&http(&erp.url(), &[("timeout_ms", "2000")]));
    // Four requests in flight at once (the default concurrency): 800 documents outlast
    // the twenty lives.
    let (files, expected) = load(&gate, 3000, 200, |_| 4);
    assert_eq!(expected.len(), 800);
    new_documents(&gate.process(&["--no-deliver"], &files));
    // Each round waits for the watcher's first request (its start takes a few hundred ms),
    // then kills it 0 to 400 ms later: inside the ERP's 30 ms (booked, not yet answered) or
    // between attempts.
    let mut kills_in_flight = 0;
    for round in 0..20u64 {
        let before = erp.seen().len();
        let mut watch = gate.watch();
        wait_progressing(
            STALL,
            &format!("round {round}: the watcher's first request"),
            || erp.received() > before || gate.deliveries(&["--state", "delivered"]).len() == 800,
            || erp.received(),
            || watch.log(),
        );
        std::thread::sleep(Duration::from_millis((round * 149) % 401));
        watch.child.kill().expect("SIGKILL watch");
        let killed_at = Instant::now();
        let status = watch.child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "round {round}: watch exited before the kill ({status:?}); log:\n{}",
            watch.log()
        );
        if erp
            .seen()
            .iter()
            .any(|s| s.at <= killed_at && s.at + Duration::from_millis(30) > killed_at)
        {
            kills_in_flight += 1;
        }
    }
    let during = erp.seen().len();
    let left = gate
        .deliveries(&[])
        .iter()
        .filter(|d| d["state"] != "delivered")
        .count();
    assert!(during > 0, "no watch ever sent anything before its kill");
    eprintln!(
        "sigkill: {during} requests during 20 killed watches ({kills_in_flight} kills with a \
         request in flight), {left} deliveries left"
    );
    assert!(
        left > 0,
        "everything was delivered before the last kill: the kills prove little"
    );
    let (status, stdout, stderr) = erp.drain(&gate, "the last drain");
    assert_eq!(status.code(), Some(0), "{stdout}\n{stderr}");
    let seen = erp.seen();
    let by_key = check_requests(&seen, &expected);
    for (k, requests) in &by_key {
        let ids: BTreeSet<&Option<String>> = requests.iter().map(|s| &s.correlation).collect();
        assert_eq!(ids.len(), 1, "{k}: correlation ids {ids:?}");
    }
    check_booked_once(&gate, &erp, &expected);
    let resent = by_key.values().filter(|r| r.len() > 1).count();
    eprintln!(
        "sigkill: {} requests in all; {resent} key(s) sent more than once",
        seen.len()
    );
}

/// The default folder destination: `confirm` records the ERP's reference, and a resend of
/// the interchange, or of the PO in a new interchange, reports it.
#[test]
fn a_confirmed_reference_is_reported_for_a_resend_and_for_the_po_re_enveloped() {
    let gate = Gate::new("", "");
    let first = gate.write("a.x12", &an_850(101, &["PO-1042"]));
    let r = gate.process(&[], std::slice::from_ref(&first));
    let docs = new_documents(&r);
    let k = key("PO-1042");
    assert!(docs.contains_key(&k), "{r:?}");
    assert!(docs[&k]["result_ref"].is_null(), "{}", docs[&k]);
    gate.ok(&["confirm", &k, "--ref", "SO-1042"]);

    let r = gate.process(&[], std::slice::from_ref(&first));
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["disposition"], "duplicate", "{}", r[0]);
    let docs = r[0]["documents"]
        .as_array()
        .expect("the original's documents");
    assert_eq!(docs.len(), 1, "{}", r[0]);
    assert_eq!(docs[0]["key"], k.as_str());
    assert_eq!(docs[0]["result_ref"], "SO-1042", "{}", r[0]);

    let resend = gate.write("b.x12", &interchange(777, &["PO-1042"], 42, '|', '^'));
    let r = gate.process(&[], &[resend]);
    assert_eq!(r[0]["disposition"], "accepted", "{}", r[0]);
    let docs = r[0]["documents"].as_array().unwrap();
    assert_eq!(docs.len(), 1, "{}", r[0]);
    assert_eq!(docs[0]["disposition"], "duplicate");
    assert_eq!(docs[0]["st02"], "0042");
    assert_eq!(docs[0]["duplicate_of"], correlation(101).as_str());
    assert_eq!(docs[0]["result_ref"], "SO-1042", "{}", r[0]);
}

/// An http destination: the order id from the ERP's answer is the reference a resent PO
/// reports, and the resend is not delivered again.
#[test]
fn the_erps_order_id_is_reported_for_a_resent_po() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let first = gate.write("a.x12", &an_850(201, &["PO-2001"]));
    gate.process(&[], std::slice::from_ref(&first));
    let k = key("PO-2001");
    let expected = BTreeMap::from([(k.clone(), correlation(201))]);
    check_booked_once(&gate, &erp, &expected);
    let order = erp.booked()[&k].clone();

    let resend = gate.write("b.x12", &interchange(202, &["PO-2001"], 7, '*', '~'));
    let r = gate.process(&[], &[resend]);
    let docs = r[0]["documents"].as_array().unwrap();
    assert_eq!(docs.len(), 1, "{}", r[0]);
    assert_eq!(docs[0]["disposition"], "duplicate", "{}", r[0]);
    assert_eq!(docs[0]["result_ref"], order.as_str(), "{}", r[0]);

    let r = gate.process(&[], &[first]);
    assert_eq!(r[0]["disposition"], "duplicate", "{}", r[0]);
    assert_eq!(
        r[0]["documents"][0]["result_ref"],
        order.as_str(),
        "{}",
        r[0]
    );
    gate.ok(&["deliver", "--drain", "--timeout", "5"]);
    assert_eq!(erp.seen().len(), 1, "a resend was delivered again");
    assert_eq!(gate.deliveries(&[]).len(), 1);
}

/// `confirm` never silently replaces the order number the ERP answered: a different
/// reference is refused (exit 2, naming both and `--force`), the same one is accepted, and a
/// forced one is recorded with the ERP's kept on its delivery row and both in the history.
#[test]
fn confirm_keeps_the_erps_reference_unless_forced_and_records_both() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let first = gate.write("a.x12", &an_850(211, &["PO-2011"]));
    gate.process(&[], std::slice::from_ref(&first));
    let k = key("PO-2011");
    check_booked_once(
        &gate,
        &erp,
        &BTreeMap::from([(k.clone(), correlation(211))]),
    );
    let order = erp.booked()[&k].clone();

    let (status, stdout, stderr) = gate.run(&["confirm", &k, "--ref", "SO-TYPO"]);
    assert_eq!(status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&order) && stderr.contains("SO-TYPO") && stderr.contains("--force"),
        "{stderr}"
    );
    let r = gate.process(&[], std::slice::from_ref(&first));
    assert_eq!(
        r[0]["documents"][0]["result_ref"],
        order.as_str(),
        "{}",
        r[0]
    );
    // Confirming what the ERP answered changes nothing and is not refused.
    gate.ok(&["confirm", &k, "--ref", &order]);

    let said = gate.ok(&["confirm", &k, "--ref", "SO-MANUAL", "--force"]);
    assert!(said.contains(&format!("it was {order}")), "{said}");
    let r = gate.process(&[], &[first]);
    assert_eq!(r[0]["documents"][0]["result_ref"], "SO-MANUAL", "{}", r[0]);
    let rows = gate.deliveries(&[]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["result_ref"], order.as_str(), "{}", rows[0]);
    let forced: Vec<Value> = lines(&gate.ok(&["history", "--json"]))
        .into_iter()
        .filter(|e| e["event"] == "confirmed")
        .collect();
    let last = forced.last().expect("the confirmed events");
    let text = last.to_string();
    assert!(
        text.contains("SO-MANUAL") && text.contains(&order) && text.contains("forced"),
        "{forced:?}"
    );
}

/// A configured header `env:NAME` is sent with the value of NAME in x12gate's
/// environment; the contract's headers are there too, and the body is the document.
#[test]
fn a_header_from_the_environment_is_sent_with_the_documents_headers() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(
        &erp.url(),
        &[(
            "headers",
            r#"{ X-Test = "env:TEST_TOKEN", X-Static = "plain" }"#,
        )],
    ));
    let file = gate.write("a.x12", &an_850(301, &["PO-9"]));
    let token = format!("tok-{}-{}", std::process::id(), erp.port);
    let mut c = gate.command(&["process", "--json", &file.display().to_string()]);
    c.env("TEST_TOKEN", &token);
    let (status, stdout, stderr) = Gate::output(c);
    assert_eq!(status.code(), Some(0), "{stdout}\n{stderr}");
    let seen = erp.seen();
    assert_eq!(seen.len(), 1, "{}", states(&gate));
    let s = &seen[0];
    let k = key("PO-9");
    assert_eq!(s.headers.get("x-test"), Some(&token), "{:?}", s.headers);
    assert_eq!(s.headers.get("x-static").map(String::as_str), Some("plain"));
    assert_eq!(
        s.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert_eq!(s.headers.get("idempotency-key"), Some(&k));
    assert_eq!(s.headers.get("x-correlation-id"), Some(&correlation(301)));
    let body = s.body.as_ref().expect("a JSON body");
    assert_eq!(body["correlation_id"], correlation(301).as_str());
    assert_eq!(
        body["set"]["content"]["BEG"]["purchase_order_number_03"],
        "PO-9"
    );
    // The same bytes as the document's file, when one is written.
    let file = gate.root().join("data/out/ZZ_ACME_850_PO-9_00_.json");
    if let Ok(bytes) = fs::read(&file) {
        assert_eq!(bytes, s.raw, "the body is not the document file's bytes");
    }
    let logged = gate.deliveries(&[]);
    assert!(
        !logged.iter().any(|d| d.to_string().contains(&token)),
        "the secret is shown by deliveries: {logged:?}"
    );
    check_booked_once(&gate, &erp, &BTreeMap::from([(k, correlation(301))]));
}

/// A command as destination: the document on its stdin, exit 0 delivered with the first
/// line of its stdout as reference, exit 1 retried.
#[test]
fn a_command_destination_gets_the_document_on_stdin_and_is_retried_after_exit_1() {
    let got_dir = tempfile::tempdir().unwrap();
    let got = got_dir.path().to_path_buf();
    // $0 is the folder. Every run keeps its stdin; the first run fails (exit 1) after
    // reading it, the next ones succeed, naming their file in the reference.
    let script = r#"d="$0"; cat > "$d/in.$$" || exit 2
if [ ! -e "$d/failed-once" ]; then : > "$d/failed-once"; echo "ERP busy" >&2; exit 1; fi
echo "REF-$$"; echo "not the reference""#;
    let command = serde_json::to_string(&["sh", "-c", script, &got.display().to_string()]).unwrap();
    let gate = Gate::to(&format!(
        "\n[[destination]]\nname = \"erp\"\nkind = \"command\"\ncommand = {command}\ntimeout_ms = 10000\nmax_attempts = 5\nbackoff_ms = 10\nbackoff_max_ms = 50\n"
    ));
    gate.ok(&["check"]);

    let file = gate.write("a.x12", &an_850(401, &["PO-77"]));
    let k = key("PO-77");
    gate.process(&[], &[file]);
    let rows = gate.deliveries(&[]);
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0]["state"] == "retrying" || rows[0]["state"] == "queued",
        "exit 1 is retried: {}",
        rows[0]
    );
    assert_eq!(rows[0]["attempts"], 1, "{}", rows[0]);
    gate.ok(&["deliver", "--drain", "--timeout", "30"]);
    let rows = gate.deliveries(&[]);
    assert_eq!(rows[0]["state"], "delivered", "{}", rows[0]);
    assert_eq!(rows[0]["attempts"], 2, "{}", rows[0]);
    let reference = rows[0]["result_ref"]
        .as_str()
        .expect("a result_ref")
        .to_string();
    let pid = reference
        .strip_prefix("REF-")
        .unwrap_or_else(|| panic!("not the first line of stdout: {reference:?}"));
    let mut inputs: Vec<PathBuf> = fs::read_dir(&got)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("in."))
        .collect();
    inputs.sort();
    assert_eq!(inputs.len(), 2, "one stdin per run: {inputs:?}");
    for p in &inputs {
        let doc: Value = serde_json::from_slice(&fs::read(p).unwrap()).unwrap_or_else(|e| {
            panic!(
                "{}: stdin was not the whole JSON document: {e}",
                p.display()
            )
        });
        assert_eq!(doc["document_key"], k.as_str());
        assert_eq!(doc["correlation_id"], correlation(401).as_str());
        assert_eq!(
            doc["set"]["content"]["BEG"]["purchase_order_number_03"],
            "PO-77"
        );
    }
    assert!(
        got.join(format!("in.{pid}")).exists(),
        "the reference names the run that delivered"
    );
    // The reference is reported for the PO resent.
    let resend = gate.write("b.x12", &interchange(402, &["PO-77"], 5, '*', '~'));
    let r = gate.process(&[], &[resend]);
    assert_eq!(r[0]["documents"][0]["disposition"], "duplicate");
    assert_eq!(r[0]["documents"][0]["result_ref"], reference.as_str());
}

/// A 409 is the ERP saying it booked the document already: delivered, with the order id
/// from its body, and nothing booked again.
#[test]
fn a_409_is_delivered_with_the_booked_order() {
    let erp = Erp::start(Mode::Healthy);
    let k = key("PO-5");
    erp.prebook(&k, "SO-EARLIER");
    let gate = Gate::to(&http(&erp.url(), &[]));
    let file = gate.write("a.x12", &an_850(501, &["PO-5"]));
    gate.process(&[], &[file]);
    let rows = gate.deliveries(&[]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["state"], "delivered", "{}", rows[0]);
    assert_eq!(rows[0]["result_ref"], "SO-EARLIER", "{}", rows[0]);
    assert_eq!(rows[0]["attempts"], 1, "{}", rows[0]);
    assert!(erp.bookings().is_empty(), "booked again");
    assert_eq!(erp.seen().len(), 1);
}

/// 5xx until max_attempts: dead, owned by the destination's owner when the partner has no
/// contact; the drain ends when nothing is left to retry.
#[test]
fn retries_run_out_at_max_attempts_and_the_destinations_owner_gets_the_dead_letter() {
    let erp = Erp::start(Mode::Down);
    let gate = Gate::new(
        "destination = \"erp\"",
        &http(
            &erp.url(),
            &[
                ("max_attempts", "3"),
                ("circuit_failures", "100"),
                ("owner", &format!("\"{OWNER}\"")),
            ],
        ),
    );
    let file = gate.write("a.x12", &an_850(601, &["PO-6"]));
    gate.process(&["--no-deliver"], &[file]);
    let t = Instant::now();
    gate.ok(&["deliver", "--drain", "--timeout", "60"]);
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "the drain waited for its timeout though nothing was left: {:?}",
        t.elapsed()
    );
    let rows = gate.deliveries(&[]);
    assert_eq!(rows.len(), 1);
    let d = &rows[0];
    assert_eq!(d["state"], "dead", "{d}");
    assert_eq!(d["attempts"], 3, "{d}");
    assert_eq!(d["last_status"], "503", "{d}");
    assert_eq!(d["owner"], OWNER, "{d}");
    let seen = erp.seen();
    assert_eq!(seen.len(), 3);
    let expected = BTreeMap::from([(key("PO-6"), correlation(601))]);
    check_requests(&seen, &expected);
    // Full jitter under a cap of 200 ms: no wait between attempts comes near a second.
    for w in seen.windows(2) {
        assert!(
            w[1].at - w[0].at < Duration::from_millis(1000),
            "a retry waited {:?} with backoff_max_ms = 200",
            w[1].at - w[0].at
        );
    }
}

/// An ERP that does not answer within timeout_ms is a timeout, retried; the drain stops at
/// its --timeout with the delivery still retrying, and exits 0.
#[test]
fn a_timeout_is_retried_and_the_drain_stops_at_its_own_timeout() {
    let erp = Erp::start(Mode::Hang(Duration::from_millis(800)));
    let gate = Gate::to(&http(
        &erp.url(),
        &[("max_attempts", "1000"), ("circuit_failures", "1000")],
    ));
    let file = gate.write("a.x12", &an_850(701, &["PO-7"]));
    gate.process(&["--no-deliver"], &[file]);
    let t = Instant::now();
    gate.ok(&["deliver", "--drain", "--timeout", "3"]);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(15),
        "--timeout 3 took {took:?}"
    );
    let rows = gate.deliveries(&[]);
    let d = &rows[0];
    assert_eq!(d["state"], "retrying", "{d}");
    assert_eq!(d["last_status"], "timeout", "{d}");
    let attempts = d["attempts"].as_u64().unwrap();
    assert!(attempts >= 3, "retried with backoff ≤ 200 ms: {d}");
    assert!(erp.seen().len() as u64 >= attempts, "{d}");
}

/// `process` makes one attempt at each delivery that is due, its own and those queued
/// before (by a `--no-deliver`, or a failure of an earlier run): a cron job of `process`
/// alone retries too. A failure stays queued for a retry.
#[test]
fn process_makes_one_attempt_at_what_is_due_and_leaves_failures_queued() {
    let erp = Erp::start(Mode::Down);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let a = gate.write("a.x12", &an_850(801, &["PO-1"]));
    let b = gate.write("b.x12", &an_850(802, &["PO-2"]));
    gate.process(&["--no-deliver"], &[a]);
    let (status, stdout, stderr) = gate.run(&["process", "--json", &b.display().to_string()]);
    assert!(
        matches!(status.code(), Some(0) | Some(3)),
        "{status:?}\n{stdout}\n{stderr}"
    );
    let seen = erp.seen();
    let mut keys: Vec<&str> = seen.iter().filter_map(|s| s.key.as_deref()).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [key("PO-1"), key("PO-2")],
        "one attempt at each due delivery"
    );
    let rows = gate.deliveries_by_key();
    for po in ["PO-1", "PO-2"] {
        let d = &rows[&key(po)];
        assert_eq!(d["state"], "retrying", "{d}");
        assert_eq!(d["attempts"], 1, "{d}");
        assert_eq!(d["last_status"], "503", "{d}");
    }
    // The next run retries them (once each) when they are due, whatever it processes.
    std::thread::sleep(Duration::from_millis(600));
    let c = gate.write("c.x12", &an_850(803, &["PO-3"]));
    let (status, stdout, stderr) = gate.run(&["process", "--json", &c.display().to_string()]);
    assert!(
        matches!(status.code(), Some(0) | Some(3)),
        "{status:?}\n{stdout}\n{stderr}"
    );
    let rows = gate.deliveries_by_key();
    for po in ["PO-1", "PO-2"] {
        assert_eq!(rows[&key(po)]["attempts"], 2, "{}", rows[&key(po)]);
    }
    assert_eq!(rows[&key("PO-3")]["attempts"], 1);

    erp.set_mode(Mode::Healthy);
    gate.ok(&["deliver", "--drain", "--timeout", "30"]);
    let expected = BTreeMap::from([
        (key("PO-1"), correlation(801)),
        (key("PO-2"), correlation(802)),
        (key("PO-3"), correlation(803)),
    ]);
    check_requests(&erp.seen(), &expected);
    check_booked_once(&gate, &erp, &expected);
}

/// Three `deliver --drain` at once and a watcher: each document is sent exactly once (a
/// lease per delivery), none twice in parallel.
#[test]
fn four_deliverers_at_once_send_each_document_once() {
    let erp = Erp::start(Mode::Slow(Duration::from_millis(10)));
    let gate = Gate::to(&http(&erp.url(), &[("timeout_ms", "5000")]));
    let (files, expected) = load(&gate, 4000, 40, |_| 4);
    new_documents(&gate.process(&["--no-deliver"], &files));
    let mut watch = gate.watch();
    let drains: Vec<Child> = (0..3)
        .map(|_| gate.command(&["deliver", "--drain"]).spawn().unwrap())
        .collect();
    for d in drains {
        let out = output_progressing(d, STALL, "a drain", || erp.received());
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    wait_progressing(
        STALL,
        "all 160 delivered",
        || gate.deliveries(&["--state", "delivered"]).len() == 160,
        || erp.received(),
        || states(&gate),
    );
    watch.sigterm();
    assert_eq!(watch.wait(STALL).code(), Some(0));
    let by_key = check_requests(&erp.seen(), &expected);
    let twice: Vec<_> = by_key
        .iter()
        .filter(|(_, r)| r.len() > 1)
        .map(|(k, _)| k)
        .collect();
    assert!(
        twice.is_empty(),
        "sent more than once without any failure: {twice:?}"
    );
    check_booked_once(&gate, &erp, &expected);
}

/// The watcher delivers what it takes from the inbox, without a `deliver`.
#[test]
fn watch_delivers_what_it_takes_from_the_inbox() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let mut watch = gate.watch();
    let inbox = gate.root().join("data/inbox");
    let mut expected = BTreeMap::new();
    for (n, pos) in [(901, ["PO-91", "PO-92"]), (902, ["PO-93", "PO-94"])] {
        let tmp = gate.root().join(format!("{n}.tmp"));
        fs::write(&tmp, an_850(n, &pos)).unwrap();
        fs::rename(&tmp, inbox.join(format!("{n}.x12"))).unwrap();
        for po in pos {
            expected.insert(key(po), correlation(n));
        }
    }
    wait_for(
        Duration::from_secs(30),
        "the inbox's 4 documents delivered",
        || gate.deliveries(&["--state", "delivered"]).len() == 4,
        || format!("{}; log:\n{}", states(&gate), watch.log()),
    );
    check_requests(&erp.seen(), &expected);
    check_booked_once(&gate, &erp, &expected);
    watch.sigterm();
    assert_eq!(
        watch.wait(Duration::from_secs(20)).code(),
        Some(0),
        "{}",
        watch.log()
    );
}

/// A partner whose destination is not declared is a configuration error, not documents
/// quietly left in `out/`.
#[test]
fn a_partner_naming_an_unknown_destination_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("partners.toml"),
        r#"[gateway]
id_qualifier = "ZZ"
id = "X12GATE"
database = "data/x12gate.db"

[[partner]]
name = "Acme Retail"
id_qualifier = "ZZ"
id = "ACME"
destination = "nowhere"

[[destination]]
name = "erp"
kind = "http"
url = "http://127.0.0.1:9/edi/inbound"
"#,
    )
    .unwrap();
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .arg("check")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("nowhere"), "{stderr}");
}

/// A command destination whose first run is `hang` (then delivers `REF-OK`) with
/// timeout_ms = 500: the run is stopped at its timeout, `process` does not wait for it, and
/// the retry delivers.
fn command_timeout(hang: &str) {
    let got_dir = tempfile::tempdir().unwrap();
    let got = got_dir.path().to_path_buf();
    let script = format!(
        r#"d="$0"; cat > /dev/null
if [ ! -e "$d/hung-once" ]; then : > "$d/hung-once"; {hang}; fi
echo "REF-OK""#
    );
    let command =
        serde_json::to_string(&["sh", "-c", &script, &got.display().to_string()]).unwrap();
    let gate = Gate::to(&format!(
        "\n[[destination]]\nname = \"erp\"\nkind = \"command\"\ncommand = {command}\ntimeout_ms = 500\nmax_attempts = 5\nbackoff_ms = 10\nbackoff_max_ms = 50\n"
    ));
    let file = gate.write("a.x12", &an_850(411, &["PO-78"]));
    let t = Instant::now();
    gate.process(&[], &[file]);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "process waited {:?} for a command with timeout_ms = 500 ({hang})",
        t.elapsed()
    );
    let rows = gate.deliveries(&[]);
    assert_eq!(rows[0]["state"], "retrying", "{}", rows[0]);
    assert_eq!(rows[0]["attempts"], 1, "{}", rows[0]);
    assert_eq!(rows[0]["last_status"], "timeout", "{}", rows[0]);
    gate.ok(&["deliver", "--drain", "--timeout", "30"]);
    let rows = gate.deliveries(&[]);
    assert_eq!(rows[0]["state"], "delivered", "{}", rows[0]);
    assert_eq!(rows[0]["result_ref"], "REF-OK", "{}", rows[0]);
    assert_eq!(rows[0]["attempts"], 2, "{}", rows[0]);
}

/// The program itself hangs past timeout_ms.
#[test]
fn a_command_past_its_timeout_is_stopped_and_retried() {
    command_timeout("exec sleep 20");
}

/// The program (a shell script) waits on a child of its own past timeout_ms: the child
/// holds the program's stdout, and must not hold the attempt too.
#[test]
fn a_command_whose_child_outlives_its_timeout_is_stopped_too() {
    command_timeout("sleep 20");
}

/// SIGTERM while a request is in flight: the watcher waits for its answer, records it and
/// exits 0, so nothing is sent again.
#[test]
fn sigterm_lets_the_request_in_flight_finish_and_be_recorded() {
    let erp = Erp::start(Mode::Slow(Duration::from_millis(1500)));
    let gate = Gate::to(&http(&erp.url(), &[("timeout_ms", "5000")]));
    let (files, expected) = load(&gate, 5000, 1, |_| 3);
    new_documents(&gate.process(&["--no-deliver"], &files));
    let mut watch = gate.watch();
    wait_for(
        Duration::from_secs(20),
        "the first request",
        || !erp.seen().is_empty(),
        || watch.log(),
    );
    watch.sigterm();
    let status = watch.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{}", watch.log());
    let first = erp.seen()[0].key.clone().unwrap();
    let rows = gate.deliveries_by_key();
    assert_eq!(
        rows[&first]["state"], "delivered",
        "the answer that came after SIGTERM was recorded: {}",
        rows[&first]
    );
    assert!(
        rows.values()
            .all(|d| d["claimed_by"].is_null() || d.get("claimed_by").is_none()),
        "a claim left behind: {rows:?}"
    );
    erp.set_mode(Mode::Healthy);
    gate.ok(&["deliver", "--drain", "--timeout", "30"]);
    let by_key = check_requests(&erp.seen(), &expected);
    assert_eq!(by_key[&first].len(), 1, "sent again after SIGTERM");
    check_booked_once(&gate, &erp, &expected);
}

/// What each kind of answer comes to: any 2xx is delivered (with no reference when the body
/// has none), a 409 without a body too; a 4xx other than 409 is dead at once; a 5xx is
/// retried.
#[test]
fn each_kind_of_answer_comes_to_its_state() {
    for (status, body, state, attempts, result_ref) in [
        (
            201,
            r#"{"order_id": "SO-201"}"#,
            "delivered",
            1,
            Some("SO-201"),
        ),
        (202, "", "delivered", 1, None),
        (200, "booked, thanks", "delivered", 1, None),
        (200, r#"{"other": 1}"#, "delivered", 1, None),
        (409, "", "delivered", 1, None),
        (404, "no such endpoint", "dead", 1, None),
        (422, r#"{"error": "unknown item"}"#, "dead", 1, None),
        (500, "", "retrying", 1, None),
        (502, "bad gateway", "retrying", 1, None),
    ] {
        let what = format!("{status} {body:?}");
        let erp = Erp::start(Mode::Fixed(status, body));
        let gate = Gate::to(&http(&erp.url(), &[]));
        let file = gate.write("a.x12", &an_850(1101, &["PO-11"]));
        let (code, stdout, stderr) = gate.run(&["process", "--json", &file.display().to_string()]);
        assert!(
            matches!(code.code(), Some(0) | Some(3)),
            "{what}: {code:?}\n{stdout}\n{stderr}"
        );
        assert_eq!(erp.seen().len(), 1, "{what}");
        let rows = gate.deliveries(&[]);
        assert_eq!(rows.len(), 1, "{what}");
        let d = &rows[0];
        assert_eq!(d["state"], state, "{what}: {d}");
        assert_eq!(d["attempts"], attempts, "{what}: {d}");
        assert_eq!(d["last_status"], status.to_string().as_str(), "{what}: {d}");
        assert_eq!(d["result_ref"].as_str(), result_ref, "{what}: {d}");
        if state == "dead" {
            assert_eq!(d["owner"], CONTACT, "{what}: {d}");
        }
    }
}

/// Nobody listening: a connection error is retried, never dead at once.
#[test]
fn a_connection_refused_is_retried() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let gate = Gate::to(&http(
        &format!("http://127.0.0.1:{port}/edi/inbound"),
        &[("max_attempts", "3"), ("circuit_failures", "100")],
    ));
    let file = gate.write("a.x12", &an_850(1201, &["PO-12"]));
    gate.process(&[], &[file]);
    let rows = gate.deliveries(&[]);
    assert_eq!(rows[0]["state"], "retrying", "{}", rows[0]);
    assert_eq!(rows[0]["attempts"], 1, "{}", rows[0]);
    assert!(rows[0]["last_error"].is_string(), "{}", rows[0]);
    gate.ok(&["deliver", "--drain", "--timeout", "30"]);
    let rows = gate.deliveries(&[]);
    assert_eq!(rows[0]["state"], "dead", "out of attempts: {}", rows[0]);
    assert_eq!(rows[0]["attempts"], 3, "{}", rows[0]);
}

/// `deliveries retry` puts back dead deliveries only: a delivered document is never sent
/// again by it.
#[test]
fn retry_never_sends_a_delivered_document_again() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let file = gate.write("a.x12", &an_850(1301, &["PO-13"]));
    gate.process(&[], &[file]);
    let k = key("PO-13");
    assert_eq!(gate.deliveries(&[])[0]["state"], "delivered");
    let _ = gate.run(&["deliveries", "retry", &k]);
    let _ = gate.run(&["deliveries", "retry", "--all-dead"]);
    gate.ok(&["deliver", "--drain", "--timeout", "5"]);
    assert_eq!(erp.seen().len(), 1, "a delivered document was sent again");
    let rows = gate.deliveries(&[]);
    assert_eq!(rows[0]["state"], "delivered", "{}", rows[0]);
    assert_eq!(rows[0]["result_ref"], "SO-1", "{}", rows[0]);
}

/// `watch --once` ends when its inbox is done, not when the ERP is back.
#[test]
fn watch_once_ends_with_its_inbox_while_the_erp_is_down() {
    let erp = Erp::start(Mode::Down);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let inbox = gate.root().join("data/inbox");
    fs::write(inbox.join("a.x12"), an_850(1401, &["PO-14"])).unwrap();
    let t = Instant::now();
    let mut c = gate.command(&["watch", "--once"]);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "watch --once still runs after 30 s with the ERP down: {}",
                states(&gate)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{:?}", t.elapsed());
    let rows = gate.deliveries(&[]);
    assert_eq!(rows.len(), 1, "queued by the round");
    assert_ne!(rows[0]["state"], "dead", "{}", rows[0]);
    assert_ne!(rows[0]["state"], "delivered", "{}", rows[0]);
    erp.set_mode(Mode::Healthy);
    gate.ok(&["deliver", "--drain", "--timeout", "30"]);
    check_booked_once(
        &gate,
        &erp,
        &BTreeMap::from([(key("PO-14"), correlation(1401))]),
    );
}

/// A crash after the ERP booked the document and before its answer was recorded (the
/// `deliver.sent` crash point): the next attempt sends it again under the same key, the
/// ERP answers 409, and the booked order becomes the reference.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_between_sending_and_recording_is_resent_and_answered_409() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let file = gate.write("a.x12", &an_850(1501, &["PO-15"]));
    let mut c = gate.command(&["process", "--json", &file.display().to_string()]);
    c.env("FAILPOINTS", "deliver.sent=return");
    let (status, stdout, stderr) = Gate::output(c);
    assert!(
        !status.success(),
        "the crash point aborts: {stdout}{stderr}"
    );
    assert_eq!(erp.seen().len(), 1, "sent before the crash");
    let rows = gate.deliveries(&[]);
    assert_ne!(rows[0]["state"], "delivered", "{}", rows[0]);
    gate.ok(&["deliver", "--drain", "--timeout", "30"]);
    let seen = erp.seen();
    assert_eq!(seen.len(), 2, "sent once more");
    assert_eq!(seen[1].status, 409);
    let expected = BTreeMap::from([(key("PO-15"), correlation(1501))]);
    check_requests(&seen, &expected);
    check_booked_once(&gate, &erp, &expected);
}

/// `show --json` keeps the three layers apart, each with its time: received (claimed),
/// acknowledged (our 997 and its numbers), delivered (destination, attempts, the ERP's
/// reference); `history --json` gives each event as it was recorded: the acceptance with
/// its documents, the delivery as an event of its own.
#[test]
fn history_and_show_keep_received_acknowledged_and_delivered_apart() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let file = gate.write("a.x12", &an_850(301, &["PO-3001"]));
    gate.process(&[], &[file]);
    let order = erp.booked()[&key("PO-3001")].clone();
    let events = lines(&gate.ok(&["history", "--json"]));
    let accepted: Vec<&Value> = events.iter().filter(|e| e["event"] == "accepted").collect();
    assert_eq!(accepted.len(), 1, "{events:?}");
    assert!(accepted[0].get("layers").is_none(), "{}", accepted[0]);
    assert!(accepted[0].get("result_ref").is_none(), "{}", accepted[0]);
    assert_eq!(accepted[0]["documents"][0]["disposition"], "new");
    let delivered: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "delivered")
        .collect();
    assert_eq!(delivered.len(), 1, "{events:?}");
    assert_eq!(delivered[0]["key"], "ZZ:ACME:000000301");
    assert_eq!(delivered[0]["document"], key("PO-3001"));
    assert_eq!(delivered[0]["destination"], "erp");
    assert_eq!(delivered[0]["status"], "200");
    assert_eq!(delivered[0]["result_ref"], order.as_str());
    let shown: Value = serde_json::from_str(&gate.ok(&["show", "ZZ:ACME:301", "--json"])).unwrap();
    let layers = &shown["layers"];
    assert!(
        layers["received"].as_str().is_some_and(|t| t.len() > 10),
        "{layers}"
    );
    let ack = &layers["acknowledged"];
    assert!(ack["at"].as_str().is_some(), "{layers}");
    assert_eq!(ack["acks"][0]["kind"], "997", "{layers}");
    assert_eq!(
        ack["acks"][0]["isa13"], "000000001",
        "our first ISA13: {layers}"
    );
    let now = layers["delivered"].as_array().expect("delivered");
    assert_eq!(now.len(), 1, "{layers}");
    assert_eq!(now[0]["document"], key("PO-3001"));
    assert_eq!(now[0]["destination"], "erp");
    assert_eq!(now[0]["state"], "delivered");
    assert_eq!(now[0]["attempts"], 1);
    assert_eq!(now[0]["result_ref"], order.as_str());
    assert!(now[0]["at"].as_str().is_some(), "{layers}");
    let text = gate.ok(&["show", "ZZ:ACME:301"]);
    assert!(
        text.contains(&format!(
            "to erp: delivered after 1 attempt(s), last 200, ref {order}"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "delivered    document {} to erp: 200 (attempt 1, ",
            key("PO-3001")
        )) && text.contains(&format!("ref {order}")),
        "show's history prints the delivery as its own event: {text}"
    );
}

/// The history of a key rejected, then accepted by a corrected resend and delivered, then
/// met by a resend of other content (TA1 025): each line says what was true when it was
/// recorded. The rejection and the conflict carry no delivery; the delivery is its own line.
#[test]
fn history_says_what_was_true_at_each_event() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let good = an_850(1010, &["PO-1011"]);
    let bad = gate.write("bad.x12", &good.replacen("SE*6*0001~", "SE*5*0001~", 1));
    let (status, stdout, stderr) = gate.run(&["process", "--json", &bad.display().to_string()]);
    assert_eq!(status.code(), Some(3), "rejected: {stdout}{stderr}");
    assert!(erp.seen().is_empty());
    let good = gate.write("good.x12", &good);
    let r = gate.process(&[], &[good]);
    assert_eq!(r[0]["disposition"], "accepted", "{}", r[0]);
    let order = erp.booked()[&key("PO-1011")].clone();
    let other = an_850(1010, &["PO-1011"]).replace("PO1*1*120*EA", "PO1*1*999*EA");
    let other = gate.write("other.x12", &other);
    let (status, stdout, stderr) = gate.run(&["process", "--json", &other.display().to_string()]);
    assert_eq!(status.code(), Some(3), "a conflict: {stdout}{stderr}");

    let text = gate.ok(&["history", "--control-number", "1010"]);
    let of = |what: &str| -> Vec<&str> {
        text.lines()
            .filter(|l| l.split_whitespace().nth(2) == Some(what))
            .collect()
    };
    let (rejected, accepted, delivered, conflict) = (
        of("rejected"),
        of("accepted"),
        of("delivered"),
        of("conflict"),
    );
    assert_eq!(
        (
            rejected.len(),
            accepted.len(),
            delivered.len(),
            conflict.len()
        ),
        (1, 1, 1, 1),
        "{text}"
    );
    for line in [rejected[0], accepted[0], conflict[0]] {
        assert!(
            !line.contains("delivered") && !line.contains("ref "),
            "a decision says nothing of a later delivery: {line}\n{text}"
        );
    }
    assert!(conflict[0].contains(": 025 "), "{text}");
    assert!(
        accepted[0].contains(&format!("documents: {} new", key("PO-1011"))),
        "{text}"
    );
    assert!(
        delivered[0].contains(&format!(
            "document {} to erp: 200 (attempt 1, ",
            key("PO-1011")
        )) && delivered[0].ends_with(&format!("ref {order}")),
        "{text}"
    );
    let position = |l: &str| text.lines().position(|x| x == l);
    assert!(
        position(rejected[0]) < position(accepted[0])
            && position(accepted[0]) < position(delivered[0])
            && position(delivered[0]) < position(conflict[0]),
        "in the order they happened: {text}"
    );

    let events = lines(&gate.ok(&["history", "--json", "--control-number", "1010"]));
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["event"].as_str())
        .filter(|k| *k != "placed")
        .collect();
    assert_eq!(
        kinds,
        ["rejected", "accepted", "delivered", "conflict"],
        "{events:?}"
    );
    for e in &events {
        assert!(e.get("layers").is_none(), "{e}");
        let own = e["event"] == "delivered";
        assert_eq!(e.get("result_ref").is_some(), own, "{e}");
    }
    let d = events.iter().find(|e| e["event"] == "delivered").unwrap();
    assert_eq!(
        (&d["destination"], &d["status"], &d["result_ref"]),
        (
            &Value::from("erp"),
            &Value::from("200"),
            &Value::from(order.as_str())
        )
    );
    // `show` prints each event's own facts too.
    let shown = gate.ok(&["show", "ZZ:ACME:1010"]);
    let history = shown.split("  history:").nth(1).unwrap_or_default();
    let decided: Vec<&str> = history
        .lines()
        .filter(|l| l.contains(" rejected ") || l.contains(" conflict "))
        .collect();
    assert_eq!(decided.len(), 2, "{shown}");
    assert!(decided.iter().all(|l| !l.contains("delivered")), "{shown}");
    assert!(history.contains(&format!("ref {order}")), "{shown}");
}

/// Deliveries queued for a destination that partners.toml no longer declares are never
/// sent and never lost: `deliver` says so at error level, and they wait until it is back.
#[test]
fn deliveries_for_a_destination_no_longer_declared_wait_and_are_named() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let file = gate.write("a.x12", &an_850(311, &["PO-3101"]));
    gate.process(&["--no-deliver"], &[file]);
    let config = gate.root().join("partners.toml");
    let declared = fs::read_to_string(&config).unwrap();
    fs::write(&config, declared.replace("\"erp\"", "\"erp2\"")).unwrap();
    let (status, _, stderr) = gate.run(&["deliver"]);
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("no longer declares") && stderr.contains("destination=erp "),
        "{stderr}"
    );
    assert!(erp.seen().is_empty(), "sent to a destination that is gone");
    assert_eq!(gate.deliveries(&["--state", "queued"]).len(), 1);
    fs::write(&config, declared).unwrap();
    gate.ok(&["deliver"]);
    assert_eq!(gate.deliveries(&["--state", "delivered"]).len(), 1);
    assert_eq!(erp.booked().len(), 1);
}

/// A conflict an operator releases (the PO number reused for other lines, the buyer says
/// book it) is sent under a key of its own, so a deduping ERP books it instead of
/// answering 409 with the first order; the first delivery keeps its key and reference.
#[test]
fn a_released_conflict_is_booked_under_a_key_of_its_own() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let first = gate.write("a.x12", &an_850(501, &["PO-5"]));
    gate.process(&[], &[first]);
    let other = an_850(502, &["PO-5"]).replace("PO1*1*120*EA", "PO1*1*999*EA");
    let second = gate.write("b.x12", &other);
    let r = gate.process(&[], &[second]);
    assert_eq!(r[0]["documents"][0]["disposition"], "conflict", "{}", r[0]);
    assert_eq!(erp.seen().len(), 1, "a held conflict is not sent");
    let released = gate.ok(&["documents", "release", &key("PO-5")]);
    assert!(released.contains("released"), "{released}");
    let seen = erp.seen();
    assert_eq!(seen.len(), 2, "{released}");
    let sent_as = seen[1].key.clone().expect("an Idempotency-Key");
    assert!(
        sent_as.starts_with(&format!("{}.", key("PO-5"))),
        "released under {sent_as}"
    );
    assert_eq!(seen[1].status, 200, "booked, not a 409");
    let booked = erp.booked();
    assert_eq!(booked.len(), 2, "{booked:?}");
    let rows = gate.deliveries(&[]);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|d| d["state"] == "delivered"), "{rows:?}");
    assert_eq!(rows[1]["idempotency_key"], sent_as.as_str());
    assert_eq!(rows[1]["key"], key("PO-5"), "listed under its document key");
    assert_ne!(rows[0]["result_ref"], rows[1]["result_ref"]);
}

/// A program that leaves a process behind outside its group (`setsid`), holding its output
/// open, does not hold the attempt past `timeout_ms`.
#[test]
fn a_command_whose_daemon_keeps_its_output_open_ends_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("erp.sh");
    fs::write(
        &script,
        "#!/bin/sh\ncat > /dev/null\nsetsid sleep 30 &\necho REF-1\nexit 0\n",
    )
    .unwrap();
    let command = format!("[\"sh\", \"{}\"]", script.display());
    let gate = Gate::new(
        &format!("contact = \"{CONTACT}\"\ndestination = \"erp\""),
        &format!(
            "\n[[destination]]\nname = \"erp\"\nkind = \"command\"\ncommand = {command}\ntimeout_ms = 1000\nmax_attempts = 3\n"
        ),
    );
    let file = gate.write("a.x12", &an_850(511, &["PO-51"]));
    let t = Instant::now();
    gate.process(&[], &[file]);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(15), "process took {took:?}");
    let d = &gate.deliveries(&[])[0];
    assert_eq!(d["state"], "delivered", "{d}");
    assert_eq!(d["result_ref"], "REF-1", "{d}");
}

/// A drain ends when nothing it can send is left: rows waiting for a header variable that
/// is missing, or for a destination no longer declared, are said once and left queued.
#[test]
fn a_drain_ends_when_only_rows_it_cannot_send_are_left() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(
        &erp.url(),
        &[("headers", "{ X-Token = \"env:TEST_TOKEN\" }")],
    ));
    let file = gate.write("a.x12", &an_850(521, &["PO-52"]));
    let mut c = gate.command(&["process", "--no-deliver", &file.display().to_string()]);
    c.env("TEST_TOKEN", "t");
    let (status, _, stderr) = Gate::output(c);
    assert!(status.success(), "{stderr}");
    let t = Instant::now();
    let (status, _, stderr) = gate.run(&["deliver", "--drain"]);
    assert!(status.success(), "{stderr}");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "drained for {:?}",
        t.elapsed()
    );
    assert_eq!(
        stderr.matches("lacks variables").count(),
        1,
        "said once: {stderr}"
    );
    assert!(erp.seen().is_empty());
    assert_eq!(gate.deliveries(&["--state", "queued"]).len(), 1);
    let mut c = gate.command(&["deliver", "--drain"]);
    c.env("TEST_TOKEN", "t");
    let (status, _, stderr) = Gate::output(c);
    assert!(status.success(), "{stderr}");
    assert_eq!(erp.seen().len(), 1);
    assert_eq!(
        erp.seen()[0].headers.get("x-token").map(String::as_str),
        Some("t")
    );
}

/// The dead queue's depth: in `stats`, and logged at error level when a delivery dies.
#[test]
fn the_dead_queue_depth_is_in_stats_and_logged_when_it_grows() {
    let erp = Erp::start(Mode::Reject(None));
    let gate = Gate::to(&http(&erp.url(), &[]));
    let a = gate.write("a.x12", &an_850(531, &["PO-53", "PO-54"]));
    let (status, _, stderr) = gate.run(&["process", &a.display().to_string()]);
    assert!(matches!(status.code(), Some(0) | Some(3)), "{stderr}");
    assert!(
        stderr.contains("dead-lettered") && stderr.contains("depth=2"),
        "{stderr}"
    );
    let stats: Value = serde_json::from_str(&gate.ok(&["stats", "--json"])).unwrap();
    assert_eq!(stats["dead_deliveries"], 2, "{stats}");
    let text = gate.ok(&["stats"]);
    assert!(text.contains("dead-letter queue: 2"), "{text}");
    let metrics = gate.ok(&["metrics"]);
    assert!(
        metrics.contains("x12gate_deliveries{destination=\"erp\",state=\"dead\"} 2"),
        "{metrics}"
    );
}

/// A folder destination with a path of its own gets each document's file, made atomically
/// from the JSON the registry keeps (and none in `out/`, which the partner does not name); a
/// folder it cannot write to is retried, not lost.
#[test]
fn a_folder_destination_gets_each_document_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("erp-in");
    fs::write(&target, "a file where the folder should be").unwrap();
    let gate = Gate::new(
        &format!("contact = \"{CONTACT}\"\ndestination = \"share\""),
        &format!(
            "\n[[destination]]\nname = \"share\"\nkind = \"folder\"\npath = \"{}\"\nbackoff_ms = 10\nbackoff_max_ms = 20\n",
            target.display()
        ),
    );
    let file = gate.write("a.x12", &an_850(541, &["PO-541"]));
    // `check` names the folder that is a file; the outbox keeps the document meanwhile.
    let (status, _, stderr) = gate.run(&["process", "--no-deliver", &file.display().to_string()]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    fs::remove_file(&target).unwrap();
    gate.process(&["--no-deliver"], &[file]);
    gate.ok(&["deliver"]);
    let d = &gate.deliveries(&[])[0];
    assert_eq!(d["state"], "delivered", "{d}");
    let name = Path::new(d["file"].as_str().unwrap())
        .file_name()
        .unwrap()
        .to_owned();
    let kept = gate.ok(&["documents", "body", d["key"].as_str().unwrap()]);
    assert_eq!(fs::read(target.join(&name)).unwrap(), kept.as_bytes());
    assert!(!gate.root().join("data/out").join(&name).exists());
}

/// A partner whose documents go to an ERP gets no file in `out/`: each document is durable
/// in the registry with its decision, and the ERP receives exactly the JSON kept there.
#[test]
fn a_document_sent_to_an_erp_is_kept_in_the_registry_and_never_written_to_out() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let file = gate.write("a.x12", &an_850(561, &["PO-561", "PO-562"]));
    let r = gate.process(&[], &[file]);
    assert_eq!(r[0]["disposition"], "accepted", "{}", r[0]);
    assert_eq!(r[0]["outputs"], json!([]), "{}", r[0]);
    for doc in r[0]["documents"].as_array().unwrap() {
        assert!(doc.get("output").is_none(), "{doc}");
    }
    let out: Vec<_> = fs::read_dir(gate.root().join("data/out"))
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().file_name())
        .filter(|n| !n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(out.is_empty(), "{out:?}");
    let seen = erp.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for po in ["PO-561", "PO-562"] {
        let kept = gate.ok(&["documents", "body", &key(po)]);
        let sent = seen
            .iter()
            .find(|s| s.key.as_deref() == Some(key(po).as_str()))
            .unwrap();
        assert_eq!(sent.raw, kept.as_bytes(), "{po}: byte for byte");
        let kept: Value = serde_json::from_str(&kept).unwrap();
        assert_eq!(kept["document_key"], key(po).as_str());
    }
}

/// `prune` keeps an interchange while a destination has yet to take its documents, and
/// removes it with its deliveries once they are delivered.
#[test]
fn prune_keeps_what_a_destination_has_yet_to_take() {
    let erp = Erp::start(Mode::Down);
    let gate = Gate::new(
        &format!("contact = \"{CONTACT}\"\ndestination = \"erp\"\nduplicate_window_days = 1"),
        &http(&erp.url(), &[]),
    );
    let file = gate.write("a.x12", &an_850(551, &["PO-551"]));
    gate.process(&[], &[file]);
    let db = gate.root().join("data/x12gate.db");
    let age = || crate::util::age(&db, &[(&correlation(551), 5)]);
    age();
    gate.ok(&["prune"]);
    assert_eq!(
        gate.deliveries(&[]).len(),
        1,
        "an undelivered row was pruned"
    );
    assert_eq!(lines(&gate.ok(&["documents", "--all", "--json"])).len(), 1);
    erp.set_mode(Mode::Healthy);
    gate.ok(&["deliver", "--drain", "--timeout", "30"]);
    age();
    gate.ok(&["prune"]);
    assert!(
        gate.deliveries(&[]).is_empty(),
        "delivered rows go with their interchange"
    );
    assert!(lines(&gate.ok(&["documents", "--all", "--json"])).is_empty());
}

/// `history` tells the sender of a resend what the first execution produced: the ERP's
/// reference on the resent interchange's line and on the re-enveloped PO's.
#[test]
fn history_names_the_erps_reference_for_resends() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let first = gate.write("a.x12", &an_850(561, &["PO-561"]));
    gate.process(&[], std::slice::from_ref(&first));
    let order = erp.booked()[&key("PO-561")].clone();
    gate.process(&[], &[first]);
    let again = gate.write("b.x12", &interchange(562, &["PO-561"], 9, '*', '~'));
    gate.process(&[], &[again]);
    let text = gate.ok(&["history"]);
    let resends: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" duplicate ") || l.contains("000000562"))
        .filter(|l| !l.contains("delivery_attempt"))
        .collect();
    assert_eq!(resends.len(), 2, "{text}");
    for l in &resends {
        assert!(l.contains(&format!("ref {order}")), "{l}\n{text}");
    }
    let json = lines(&gate.ok(&["history", "--json"]));
    let dup = json
        .iter()
        .find(|e| e["event"] == "duplicate")
        .expect("the resend's event");
    assert_eq!(dup["documents"][0]["result_ref"], order.as_str(), "{dup}");
    assert_eq!(dup["result_ref"], order.as_str(), "{dup}");
}

/// A resend's report takes each document's reference from its own sighting, else from the
/// document's first delivery elsewhere (asked for all at once): in the interchange's order,
/// one with a reference of its own, one booked before in another interchange, one with none.
#[test]
fn a_resend_reports_each_document_s_reference_from_wherever_it_was_confirmed() {
    let gate = Gate::new("", "");
    let earlier = gate.write("a.x12", &an_850(301, &["PO-3001"]));
    gate.process(&[], &[earlier]);
    let both = gate.write("b.x12", &an_850(302, &["PO-3002", "PO-3001", "PO-3003"]));
    let r = gate.process(&[], std::slice::from_ref(&both));
    let docs = r[0]["documents"].as_array().unwrap();
    let dispositions: Vec<&str> = docs
        .iter()
        .map(|d| d["disposition"].as_str().unwrap())
        .collect();
    assert_eq!(dispositions, ["new", "duplicate", "new"], "{}", r[0]);
    // Confirmed once the second interchange's sightings are recorded: PO-3001's reference
    // is on its first sighting only, PO-3003's on its own.
    gate.ok(&["confirm", &key("PO-3001"), "--ref", "SO-1"]);
    gate.ok(&["confirm", &key("PO-3003"), "--ref", "SO-3"]);

    let r = gate.process(&[], &[both]);
    assert_eq!(r[0]["disposition"], "duplicate", "{}", r[0]);
    let refs: Vec<(&str, &serde_json::Value)> = r[0]["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["key"].as_str().unwrap(), &d["result_ref"]))
        .collect();
    let (k2, k1, k3) = (key("PO-3002"), key("PO-3001"), key("PO-3003"));
    assert_eq!(
        refs,
        [
            (k2.as_str(), &serde_json::Value::Null),
            (k1.as_str(), &serde_json::json!("SO-1")),
            (k3.as_str(), &serde_json::json!("SO-3")),
        ],
        "{}",
        r[0]
    );
}

// ---------------------------------------------------------------------------------------
// An ERP (or a proxy before it) that breaks HTTP: a raw TCP server on 127.0.0.1.
// ---------------------------------------------------------------------------------------

/// How the raw ERP answers a POST; every mode books a key at most once (an idempotent ERP),
/// and answers a key booked before with 409 and its order.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Breaks {
    /// The first POST gets two whole `200`s on its connection, every later one `500`.
    TwiceThen500,
    /// `200` with a Content-Length of 60, a few bytes of the body, then the connection closed.
    CutMidBody,
    /// A wait, then two whole answers on the connection.
    SlowThenTwice(Duration),
    /// One whole answer per request, connections kept alive.
    Behaves,
}

#[derive(Default)]
struct RawBooks {
    booked: BTreeMap<String, u32>,
    /// Whole 2xx answers written, by the key of the request they answered.
    whole_2xx: BTreeMap<String, u32>,
    requests: u32,
    cut: u32,
}

struct RawErp {
    port: u16,
    mode: Arc<Mutex<Breaks>>,
    books: Arc<Mutex<RawBooks>>,
}

/// The order a raw ERP gives a key: a stale answer read for another key carries the wrong one.
fn order_of(key: &str) -> String {
    format!("SO-{:016x}", fnv(key))
}

impl RawErp {
    fn start(mode: Breaks) -> RawErp {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the raw ERP");
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(mode));
        let books = Arc::new(Mutex::new(RawBooks::default()));
        let (m, b) = (mode.clone(), books.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (m, b) = (m.clone(), b.clone());
                std::thread::spawn(move || raw_connection(stream, &m, &b));
            }
        });
        RawErp { port, mode, books }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/edi/inbound", self.port)
    }

    fn set(&self, mode: Breaks) {
        *self.mode.lock().unwrap() = mode;
    }
}

/// One request's head and body from `reader`: its Idempotency-Key, or `None` at the end.
fn raw_request(reader: &mut impl std::io::BufRead) -> Option<String> {
    let (mut key, mut length) = (String::new(), 0usize);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            match name.to_ascii_lowercase().as_str() {
                "idempotency-key" => key = value.trim().to_string(),
                "content-length" => length = value.trim().parse().ok()?,
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(key)
}

fn raw_connection(stream: std::net::TcpStream, mode: &Mutex<Breaks>, books: &Mutex<RawBooks>) {
    use std::io::Write;
    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    let whole = |status: &str, key: &str| {
        let body = format!("{{\"order_id\":\"{}\"}}", order_of(key));
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    while let Some(key) = raw_request(&mut reader) {
        let now = *mode.lock().unwrap();
        let (first, booked_before) = {
            let mut b = books.lock().unwrap();
            b.requests += 1;
            (b.requests == 1, b.booked.contains_key(&key))
        };
        let book = |b: &mut RawBooks| {
            *b.booked.entry(key.clone()).or_default() += 1;
        };
        let status = if booked_before {
            "409 Conflict"
        } else {
            "200 OK"
        };
        let (text, repeat, close) = match now {
            Breaks::TwiceThen500 if first => (whole(status, &key), 2, false),
            Breaks::TwiceThen500 => (
                "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\ndown".to_string(),
                1,
                false,
            ),
            Breaks::CutMidBody => (
                format!("HTTP/1.1 {status}\r\nContent-Length: 60\r\n\r\n{{\"order_"),
                1,
                true,
            ),
            Breaks::SlowThenTwice(wait) => {
                std::thread::sleep(wait);
                (whole(status, &key), 2, false)
            }
            Breaks::Behaves => (whole(status, &key), 1, false),
        };
        {
            let mut b = books.lock().unwrap();
            if text.contains(" 200 OK") || text.contains(" 409 ") {
                if !booked_before {
                    book(&mut b);
                }
                if close {
                    b.cut += 1;
                } else {
                    *b.whole_2xx.entry(key.clone()).or_default() += 1;
                }
            }
        }
        for _ in 0..repeat {
            if out.write_all(text.as_bytes()).is_err() {
                return;
            }
        }
        if close {
            return;
        }
    }
}

/// Every delivery recorded delivered had a whole 2xx of its own, and its reference is its own
/// order (a stale answer to another key's request carries that key's order).
fn check_own_answers(gate: &Gate, erp: &RawErp) -> usize {
    let books = erp.books.lock().unwrap();
    let mut delivered = 0;
    for (key, d) in gate.deliveries_by_key() {
        if d["state"] != "delivered" {
            continue;
        }
        delivered += 1;
        assert!(
            books.whole_2xx.contains_key(&key),
            "{key} recorded delivered without a whole 2xx of its own: {d}"
        );
        assert_eq!(d["result_ref"], order_of(&key).as_str(), "{key}: {d}");
    }
    delivered
}

fn protocol_errors(gate: &Gate) -> u64 {
    let text = gate.ok(&["metrics"]);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("x12gate_destination_protocol_errors_total{destination=\"erp\"} ")
        })
        .unwrap_or_else(|| panic!("no protocol error count for erp:\n{text}"))
        .parse()
        .unwrap()
}

/// Issue 38: an ERP that answers one POST with two `200`s, closes mid-body, or answers
/// slowly then twice never gets a document recorded delivered without its own 2xx (the
/// stale `200` left on a connection used to be read as the next document's answer); a cut
/// answer is a protocol error (logged, counted, retried); once the ERP behaves, each
/// document is delivered and booked exactly once.
#[test]
fn an_erp_that_breaks_http_never_gets_a_document_recorded_delivered_without_its_own_2xx() {
    let erp = RawErp::start(Breaks::TwiceThen500);
    let gate = Gate::to(&http(
        &erp.url(),
        &[
            ("timeout_ms", "3000"),
            ("concurrency", "1"),
            ("circuit_failures", "1000"),
            ("max_attempts", "1000"),
        ],
    ));
    let pos = ["PO-R1", "PO-R2", "PO-R3"];
    let first = gate.write("a.x12", &an_850(401, &pos));
    gate.process(&[], &[first]);
    // One request had two 200s; the requests after it (one at a time) had 500s.
    assert_eq!(check_own_answers(&gate, &erp), 1, "{}", states(&gate));
    assert_eq!(erp.books.lock().unwrap().requests, 3);
    assert_eq!(protocol_errors(&gate), 0);

    // Each request has a connection of its own: every document's answer is its own, not
    // the second 200 the connection before it still holds.
    erp.set(Breaks::SlowThenTwice(Duration::from_millis(300)));
    let second = gate.write("b.x12", &an_850(402, &["PO-R4", "PO-R5"]));
    gate.process(&[], &[second]);
    gate.ok(&["deliver", "--drain", "--timeout", "10"]);
    assert_eq!(check_own_answers(&gate, &erp), 5, "{}", states(&gate));

    erp.set(Breaks::CutMidBody);
    let before = erp.books.lock().unwrap().requests;
    let third = gate.write("c.x12", &an_850(403, &["PO-R6", "PO-R7"]));
    gate.process(&[], &[third]);
    gate.run(&["deliver", "--drain", "--timeout", "1"]);
    let cut = erp.books.lock().unwrap().cut;
    assert!(cut >= 2, "both were tried: {cut} cut answers");
    assert_eq!(erp.books.lock().unwrap().requests - before, cut);
    assert_eq!(check_own_answers(&gate, &erp), 5, "{}", states(&gate));
    assert_eq!(protocol_errors(&gate), u64::from(cut));
    let rows = gate.deliveries(&["--state", "retrying"]);
    assert_eq!(rows.len(), 2, "{}", states(&gate));
    assert!(
        rows.iter().all(|r| r["last_status"] == "protocol"),
        "{rows:?}"
    );

    // The ERP behaves again: the two it booked (and cut the answers of) are answered 409
    // with their orders, and nothing is sent twice after that.
    erp.set(Breaks::Behaves);
    gate.ok(&["deliver", "--drain", "--timeout", "10"]);
    assert_eq!(check_own_answers(&gate, &erp), 7, "{}", states(&gate));
    let requests = erp.books.lock().unwrap().requests;
    gate.ok(&["deliver", "--drain", "--timeout", "10"]);
    assert_eq!(
        erp.books.lock().unwrap().requests,
        requests,
        "a delivered document sent again"
    );
    let books = erp.books.lock().unwrap();
    for po in pos.iter().chain(&["PO-R4", "PO-R5", "PO-R6", "PO-R7"]) {
        assert_eq!(
            books.booked.get(&key(po)),
            Some(&1),
            "{po}: {:?}",
            books.booked
        );
    }
}

// ---------------------------------------------------------------------------------------
// Test and production apart (issue 38, item 2).
// ---------------------------------------------------------------------------------------

/// ACME's interchange `n` with ISA15 `T`: a test interchange carrying the 850s of `pos`.
fn a_test_850(n: u32, pos: &[&str]) -> String {
    an_850(n, pos).replacen("*0*P*>~", "*0*T*>~", 1)
}

/// The document key of ACME's test 850 with PO number `po`.
fn test_key(po: &str) -> String {
    format!("{}:test", key(po))
}

/// A partner's onboarding PO in a test interchange is answered with a test 997, kept in the
/// registry (no file: its partner names no test destination, and its production documents
/// go to the ERP, not to `out/`) and sent to no production destination; the first
/// production PO of the same number is `new` and booked, with `"usage":"P"`.
#[test]
fn a_test_interchange_reaches_no_production_destination_and_its_po_number_stays_new() {
    let erp = Erp::start(Mode::Healthy);
    let gate = Gate::to(&http(&erp.url(), &[]));
    let test = gate.write("onboarding.x12", &a_test_850(301, &["PO-7001"]));
    let r = gate.process(&[], &[test]);
    assert_eq!(r[0]["disposition"], "accepted", "{}", r[0]);
    assert_eq!(r[0]["usage"], "T", "{}", r[0]);
    let doc = &r[0]["documents"][0];
    assert_eq!(doc["key"], test_key("PO-7001").as_str(), "{doc}");
    assert_eq!(doc["usage"], "T", "{doc}");
    assert_eq!(doc["disposition"], "new", "{doc}");
    assert_eq!(
        doc["undelivered"], "test interchange; no test destination",
        "{doc}"
    );
    // Answered in a test interchange, as the standard requires.
    let ack = fs::read_to_string(r[0]["acks"][0].as_str().unwrap()).unwrap();
    assert!(ack.lines().next().unwrap().contains("*0*T*"), "{ack}");
    // No file anywhere; the registry keeps its JSON, which says `T`.
    assert!(doc.get("output").is_none(), "{doc}");
    let kept = gate.ok(&["documents", "body", &test_key("PO-7001")]);
    let body: Value = serde_json::from_str(&kept).unwrap();
    assert_eq!(body["envelope"]["usage"], "T");
    assert_eq!(body["document_key"], test_key("PO-7001").as_str());
    let out = gate.root().join("data/out");
    let files: Vec<PathBuf> = [out.clone(), out.join("test")]
        .iter()
        .flat_map(|d| fs::read_dir(d).into_iter().flatten())
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    assert!(files.is_empty(), "a test document's file: {files:?}");
    gate.ok(&["deliver", "--drain", "--timeout", "5"]);
    assert!(erp.seen().is_empty(), "a test PO reached production");
    assert!(gate.deliveries(&[]).is_empty());
    // `documents`, `show` and the history say it went nowhere, and why.
    let listed = lines(&gate.ok(&["documents", "--json", "--key", &test_key("PO-7001")]));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["delivery"], "none", "{}", listed[0]);
    assert_eq!(listed[0]["usage"], "T", "{}", listed[0]);
    assert_eq!(
        listed[0]["undelivered"], "test interchange; no test destination",
        "{}",
        listed[0]
    );
    let shown = gate.ok(&["show", &correlation(301)]);
    assert!(
        shown.contains("none (delivered nowhere: test interchange; no test destination)"),
        "{shown}"
    );
    let history = gate.ok(&["history", "--control-number", "301"]);
    assert!(
        history.contains("test interchange")
            && history.contains("(delivered nowhere: test interchange; no test destination)"),
        "{history}"
    );
    let events = lines(&gate.ok(&["history", "--json", "--control-number", "301"]));
    assert!(events.iter().any(|e| e["usage"] == "T"), "{events:?}");
    let served = crate::web::Served::start(gate.root(), &[], None);
    let page = served.url("/interchange/ZZ%3AACME%3A000000301");
    let (status, _, body) = crate::web::request("GET", &page, &[], None);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("none (test interchange; no test destination)"),
        "{body}"
    );
    drop(served);

    // The first production PO of that number: new, delivered, and says `P`.
    let production = gate.write("first.x12", &an_850(302, &["PO-7001"]));
    let r = gate.process(&[], &[production]);
    assert_eq!(r[0]["usage"], "P", "{}", r[0]);
    let doc = &r[0]["documents"][0];
    assert_eq!(doc["key"], key("PO-7001").as_str(), "{doc}");
    assert_eq!(doc["disposition"], "new", "{doc}");
    assert!(doc.get("undelivered").is_none(), "{doc}");
    gate.ok(&["deliver", "--drain", "--timeout", "5"]);
    let seen = erp.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].key.as_deref(), Some(key("PO-7001").as_str()));
    let body = seen[0].body.as_ref().unwrap();
    assert_eq!(body["envelope"]["usage"], "P", "{body}");
    assert_eq!(erp.booked().len(), 1);
}

/// With a test destination declared, a test PO goes there (and only there) with
/// `"usage":"T"`; production's PO of the same number goes to production, and a resend of
/// the test PO is a duplicate of the test one only.
#[test]
fn a_test_po_goes_to_the_test_destination_and_production_to_production() {
    let erp = Erp::start(Mode::Healthy);
    let sandbox = Erp::start(Mode::Healthy);
    let test_destination = http(&sandbox.url(), &[("usage", "\"test\"")])
        .replace("name = \"erp\"", "name = \"erp-test\"");
    let gate = Gate::new(
        &format!(
            "contact = \"{CONTACT}\"\ndestination = \"erp\"\ntest_destinations = [\"erp-test\"]"
        ),
        &format!("{}{test_destination}", http(&erp.url(), &[])),
    );
    let test = gate.write("onboarding.x12", &a_test_850(401, &["PO-8001"]));
    let r = gate.process(&[], std::slice::from_ref(&test));
    let doc = &r[0]["documents"][0];
    assert_eq!(doc["key"], test_key("PO-8001").as_str(), "{doc}");
    assert!(doc.get("undelivered").is_none(), "{doc}");
    let production = gate.write("first.x12", &an_850(402, &["PO-8001"]));
    let r = gate.process(&[], &[production]);
    assert_eq!(r[0]["documents"][0]["disposition"], "new", "{}", r[0]);
    // The test PO again, in a new test interchange: a duplicate of the test one.
    let again = gate.write("again.x12", &a_test_850(403, &["PO-8001"]));
    let r = gate.process(&[], &[again]);
    let doc = &r[0]["documents"][0];
    assert_eq!(doc["disposition"], "duplicate", "{doc}");
    assert_eq!(doc["duplicate_of"], correlation(401).as_str(), "{doc}");
    gate.ok(&["deliver", "--drain", "--timeout", "5"]);

    let tested = sandbox.seen();
    assert_eq!(tested.len(), 1, "{tested:?}");
    assert_eq!(tested[0].key.as_deref(), Some(test_key("PO-8001").as_str()));
    let body = tested[0].body.as_ref().unwrap();
    assert_eq!(body["envelope"]["usage"], "T", "{body}");
    assert_eq!(body["document_key"], test_key("PO-8001").as_str());
    let booked = erp.seen();
    assert_eq!(booked.len(), 1, "{booked:?}");
    assert_eq!(booked[0].key.as_deref(), Some(key("PO-8001").as_str()));
    assert_eq!(booked[0].body.as_ref().unwrap()["envelope"]["usage"], "P");
    let by_key = gate.deliveries_by_key();
    assert_eq!(by_key[&test_key("PO-8001")]["destination"], "erp-test");
    assert_eq!(by_key[&key("PO-8001")]["destination"], "erp");
    let shown = gate.ok(&["show", &correlation(401)]);
    assert!(shown.contains("to erp-test: delivered"), "{shown}");
    assert!(!shown.contains("delivered nowhere"), "{shown}");
}

/// A test interchange's own translation (its sets that carry no document: here an 850
/// without a PO number, passed by `validation = "envelope"`) is written in `out/test/` too, never where production's are read.
#[test]
fn a_test_interchanges_translation_is_written_in_out_test() {
    let gate = Gate::new("validation = \"envelope\"", "");
    let test = gate.write("no-po.x12", &a_test_850(501, &[""]));
    let r = gate.process(&[], &[test]);
    assert_eq!(r[0]["disposition"], "accepted", "{}", r[0]);
    assert!(r[0]["documents"].as_array().unwrap().is_empty(), "{}", r[0]);
    let outputs = r[0]["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1, "{}", r[0]);
    let file = PathBuf::from(outputs[0].as_str().unwrap());
    assert_eq!(file.parent().unwrap(), gate.root().join("data/out/test"));
    let production = gate.write("no-po-p.x12", &an_850(502, &[""]));
    let r = gate.process(&[], &[production]);
    let file = PathBuf::from(r[0]["outputs"][0].as_str().unwrap());
    assert_eq!(file.parent().unwrap(), gate.root().join("data/out"));
}

/// Fifty POs, each an 850 whose first two requests get a 503 and its 860 (for half of them
/// the 860 came first and waited for its 850, so both were queued in one transaction): two
/// deliverers at once with four requests each in flight, one of them aborted now and then
/// between sending and recording, the other SIGKILLed once. The ERP receives each 850
/// before its 860, all fifty times, and books each document once.
#[cfg(feature = "failpoints")]
#[test]
fn each_pos_change_reaches_the_erp_after_its_original_across_deliverers_and_kills() {
    let erp = Erp::start(Mode::FailFirst {
        prefix: "ZZ:ACME:850:",
        n: 2,
    });
    let gate = Gate::to(&http(
        &erp.url(),
        &[
            ("concurrency", "4"),
            ("circuit_failures", "1000"),
            ("backoff_ms", "10"),
            ("backoff_max_ms", "40"),
            ("timeout_ms", "2000"),
        ],
    ));
    let pos: Vec<String> = (1..=50).map(|i| format!("PO-{i}")).collect();
    let odd: Vec<&str> = pos.iter().step_by(2).map(String::as_str).collect();
    let even: Vec<&str> = pos.iter().skip(1).step_by(2).map(String::as_str).collect();
    let all: Vec<&str> = pos.iter().map(String::as_str).collect();
    let early = gate.write("early.x12", &an_860(7001, &odd));
    let originals = gate.write("orders.x12", &an_850(7002, &all));
    let late = gate.write("late.x12", &an_860(7003, &even));
    for file in [&early, &originals, &late] {
        gate.process(&["--no-deliver"], std::slice::from_ref(file));
    }
    let mut expected = BTreeMap::new();
    for po in &pos {
        expected.insert(key(po), correlation(7002));
        let carried = if odd.contains(&po.as_str()) {
            7001
        } else {
            7003
        };
        expected.insert(change_key(po), correlation(carried));
    }
    assert_eq!(
        gate.deliveries(&["--state", "queued"]).len(),
        100,
        "{}",
        states(&gate)
    );

    let aborting = || {
        let mut c = gate.command(&["deliver", "--drain"]);
        c.env("FAILPOINTS", "deliver.sent=20%return");
        c.spawn().unwrap()
    };
    let plain = || gate.command(&["deliver", "--drain"]).spawn().unwrap();
    let mut other = plain();
    std::thread::sleep(Duration::from_millis(300));
    other.kill().expect("SIGKILL a deliverer");
    other.wait().unwrap();
    let other = plain();
    let (mut aborts, mut runs) = (0, 0);
    loop {
        runs += 1;
        let out = output_progressing(aborting(), STALL, "an aborting drain", || erp.received());
        if out.status.success() {
            break;
        }
        aborts += 1;
        assert!(
            runs < 40,
            "{runs} runs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = output_progressing(other, STALL, "the plain drain", || erp.received());
    assert_eq!(out.status.code(), Some(0));
    // What the last abort left leased to a dead process.
    let (status, stdout, stderr) = erp.drain(&gate, "the last drain");
    assert_eq!(status.code(), Some(0), "{stdout}\n{stderr}");
    eprintln!(
        "order: {aborts} deliverer(s) aborted between sending and recording, {} requests",
        erp.seen().len()
    );
    let seen = erp.seen();
    check_requests(&seen, &expected);
    check_booked_once(&gate, &erp, &expected);
    originals_first(&seen, &pos);
}

/// A dead 850 leaves its 860 `blocked` (listed so, never sent); a retry of the 860 names
/// the 850 to retry; retrying the 850 delivers both, in order.
/// An 850 the ERP refuses for good holds its 860 until an operator lets it go: `deliveries
/// discard` marks it discarded (never sent again, in the history with the note), and the
/// 860 follows; a second discard finds nothing dead.
#[test]
fn an_original_refused_for_good_is_discarded_and_its_change_is_delivered() {
    let erp = Erp::start(Mode::Reject(Some(BTreeSet::from([key("PO-1")]))));
    let gate = Gate::to(&http(&erp.url(), &[]));
    let original = gate.write("o.x12", &an_850(8101, &["PO-1"]));
    let change = gate.write("c.x12", &an_860(8102, &["PO-1"]));
    for file in [&original, &change] {
        let (status, stdout, stderr) = gate.run(&["process", &file.display().to_string()]);
        assert!(
            matches!(status.code(), Some(0) | Some(3)),
            "{status:?}\n{stdout}\n{stderr}"
        );
    }
    assert_eq!(
        gate.deliveries_by_key()[&change_key("PO-1")]["state"],
        "blocked"
    );
    let said = gate.ok(&[
        "deliveries",
        "discard",
        &key("PO-1"),
        "--note",
        "cancelled with the buyer",
    ]);
    assert!(said.contains("1 blocked behind it released"), "{said}");
    gate.ok(&["deliver", "--drain", "--timeout", "30"]);
    let rows = gate.deliveries_by_key();
    assert_eq!(
        rows[&key("PO-1")]["state"],
        "discarded",
        "{}",
        states(&gate)
    );
    assert_eq!(rows[&change_key("PO-1")]["state"], "delivered");
    let sent: Vec<Option<String>> = erp.seen().into_iter().map(|s| s.key).collect();
    assert_eq!(
        sent,
        [Some(key("PO-1")), Some(change_key("PO-1"))],
        "the refused 850 once, then its 860; nothing after the discard"
    );
    let history = gate.ok(&["history", "--json"]);
    assert!(
        history
            .lines()
            .any(|l| l.contains("deliveries_discarded") && l.contains("cancelled with the buyer")),
        "{history}"
    );
    let (status, _, stderr) = gate.run(&["deliveries", "discard", &key("PO-1")]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no dead delivery to discard"), "{stderr}");
}

#[test]
fn a_dead_original_blocks_its_change_and_its_retry_delivers_both_in_order() {
    let erp = Erp::start(Mode::Reject(Some(BTreeSet::from([key("PO-1")]))));
    let gate = Gate::to(&http(&erp.url(), &[]));
    let original = gate.write("o.x12", &an_850(8001, &["PO-1"]));
    let change = gate.write("c.x12", &an_860(8002, &["PO-1"]));
    for file in [&original, &change] {
        let (status, stdout, stderr) = gate.run(&["process", &file.display().to_string()]);
        assert!(
            matches!(status.code(), Some(0) | Some(3)),
            "{status:?}\n{stdout}\n{stderr}"
        );
    }
    let rows = gate.deliveries_by_key();
    assert_eq!(rows[&key("PO-1")]["state"], "dead", "{}", states(&gate));
    assert_eq!(rows[&change_key("PO-1")]["state"], "blocked");
    assert_eq!(gate.deliveries(&["--state", "blocked"]).len(), 1);
    let listed = gate.ok(&["deliveries"]);
    assert!(
        listed
            .lines()
            .any(|l| l.contains(&change_key("PO-1")) && l.contains("blocked")),
        "{listed}"
    );
    let drained = gate.ok(&["deliver", "--drain", "--timeout", "5"]);
    assert!(
        drained.contains("0 still queued or retrying; 1 blocked behind a dead delivery"),
        "{drained}"
    );
    assert_eq!(erp.seen().len(), 1, "only the 850 was sent");
    let (status, _, stderr) = gate.run(&["deliveries", "retry", &change_key("PO-1")]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("blocked behind") && stderr.contains(&key("PO-1")),
        "{stderr}"
    );

    erp.set_mode(Mode::Healthy);
    let said = gate.ok(&["deliveries", "retry", &key("PO-1")]);
    assert!(said.contains("1 blocked behind them released"), "{said}");
    gate.ok(&["deliver", "--drain", "--timeout", "30"]);
    let seen = erp.seen();
    let expected = BTreeMap::from([
        (key("PO-1"), correlation(8001)),
        (change_key("PO-1"), correlation(8002)),
    ]);
    check_requests(&seen, &expected);
    check_booked_once(&gate, &erp, &expected);
    originals_first(&seen, &["PO-1".to_string()]);
}

/// The default settings scaled down 200 times (backoff, its ceiling and the cool-down; the
/// attempts and age as they are): the ERP's port closed for "10 minutes" (3 s), three
/// documents. None dies (the failed probes cost their rows nothing); once the port opens,
/// each is delivered once.
#[test]
fn with_the_defaults_a_closed_port_kills_nothing_and_everything_is_delivered_once_it_opens() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/edi/inbound");
    let gate = Gate::to(&http(
        &url,
        &[
            ("timeout_ms", "2000"),
            ("max_attempts", "12"),
            ("max_age_hours", "72"),
            ("backoff_ms", "5"),
            ("backoff_max_ms", "1500"),
            ("circuit_failures", "5"),
            ("circuit_cooldown_ms", "150"),
        ],
    ));
    let (files, expected) = load(&gate, 9000, 1, |_| 3);
    new_documents(&gate.process(&["--no-deliver"], &files));
    let mut watch = gate.watch();
    // The outage lasts until one row has been tried more often than max_attempts allowed
    // before (probes that counted against their row killed it at 12), however loaded the
    // machine is.
    let most = |rows: &[serde_json::Value]| {
        rows.iter()
            .filter_map(|d| d["attempts"].as_u64())
            .max()
            .unwrap_or(0)
    };
    wait_for(
        Duration::from_secs(120),
        "a row tried more than 12 times while the port is closed",
        || most(&gate.deliveries(&[])) > 12,
        || states(&gate),
    );
    let rows = gate.deliveries(&[]);
    for d in &rows {
        assert!(
            d["state"] == "retrying",
            "nothing dies while the port is closed: {d}"
        );
        assert!(d["failures"].as_u64() < Some(12), "{d}");
    }
    assert!(
        rows.iter()
            .any(|d| d["attempts"].as_u64() > d["failures"].as_u64()),
        "a failed probe counted against its row: {rows:?}"
    );
    let erp = Erp::start_at(port, Mode::Healthy);
    wait_for(
        Duration::from_secs(20),
        "all 3 delivered once the port opened",
        || gate.deliveries(&["--state", "delivered"]).len() == 3,
        || states(&gate),
    );
    watch.sigterm();
    assert_eq!(watch.wait(Duration::from_secs(20)).code(), Some(0));
    check_requests(&erp.seen(), &expected);
    check_booked_once(&gate, &erp, &expected);
}
