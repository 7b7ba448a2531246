//! The EDI desk's web page, in a real headless Chromium driven through ChromeDriver
//! (fantoccini), against real `watch` and `serve` processes on 127.0.0.1: the overview's
//! counts after a known mix of files, a search for `101` and the 997 on its page, the
//! rejected list's reasons, hostile values rendered as text, the actions refused without
//! `--allow-actions` or a token and audited with one, and the refusal to expose the page to
//! other hosts without a token.
//!
//! The browser tests need `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's
//! `chromium` and `chromium-driver`; `.ci/run` installs them). Without them they say so
//! loudly and pass, unless `X12GATE_REQUIRE_BROWSER=1` (CI sets it), where they fail.
//! Screenshots go to the test's temporary folder, and to `X12GATE_SCREENSHOTS` when set.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};

use crate::watch::{broken_se01, interchange, re_enveloped, wait_for, Gate, Settings};

const TOKEN: &str = "alice:correct-horse-battery-staple";
const SECRET: &str = "correct-horse-battery-staple";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn wait_port(addr: &str, what: &str, log: &dyn Fn() -> String) {
    wait_for(
        crate::util::STALL,
        what,
        || std::net::TcpStream::connect(addr).is_ok(),
        log,
    );
}

/// `[gateway] metrics = addr` in the gate's configuration.
fn listen_on(gate: &Gate, addr: &str) {
    let path = gate.dir().join("partners.toml");
    let config = fs::read_to_string(&path).unwrap();
    fs::write(
        &path,
        config.replacen(
            "[gateway]\n",
            &format!("[gateway]\nmetrics = \"{addr}\"\n"),
            1,
        ),
    )
    .unwrap();
}

/// A running `x12gate serve`, killed when dropped.
pub(crate) struct Served {
    child: Child,
    log: PathBuf,
    addr: String,
}

impl Served {
    pub(crate) fn start(dir: &Path, args: &[&str], token: Option<&str>) -> Served {
        let addr = format!("127.0.0.1:{}", free_port());
        let log = dir.join(format!("serve-{}.log", addr.replace([':', '.'], "-")));
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("x12gate"));
        cmd.current_dir(dir)
            .args(["serve", "--listen", &addr])
            .args(args)
            .env_remove("X12GATE_UI_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap());
        if let Some(t) = token {
            cmd.env("X12GATE_UI_TOKEN", t);
        }
        let child = cmd.spawn().expect("start x12gate serve");
        let s = Served { child, log, addr };
        wait_port(&s.addr, "x12gate serve's port", &|| s.log());
        s
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP request without a browser: (status, headers, body). Redirects are not followed.
pub(crate) fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    form: Option<&[(&str, &str)]>,
) -> (u16, Vec<(String, String)>, String) {
    let agent = ureq::AgentBuilder::new().redirects(0).build();
    let mut req = agent.request(method, url);
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let result = match form {
        Some(f) => req.send_form(f),
        None => req.call(),
    };
    let resp = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = resp.status();
    let names = resp.headers_names();
    let headers = names
        .iter()
        .flat_map(|n| {
            resp.all(n)
                .into_iter()
                .map(|v| (n.to_lowercase(), v.to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    let body = resp.into_string().unwrap_or_default();
    (status, headers, body)
}

// ---------------------------------------------------------------------------------------------
// The browser.

struct Browser {
    driver: Child,
    client: Option<Client>,
    shots: Vec<PathBuf>,
    _profile: tempfile::TempDir,
}

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A headless Chromium, or `None` (said loudly) when it is not installed and not required.
async fn browser(shots: &[&Path]) -> Option<Browser> {
    if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
        assert!(
            std::env::var_os("X12GATE_REQUIRE_BROWSER").is_none(),
            "X12GATE_REQUIRE_BROWSER is set but {CHROMIUM} or {CHROMEDRIVER} is missing \
             (apt-get install -y chromium chromium-driver)"
        );
        eprintln!(
            "\n*** SKIPPED: the browser tests need {CHROMIUM} and {CHROMEDRIVER} \
             (apt-get install -y chromium chromium-driver) ***\n"
        );
        return None;
    }
    let port = free_port();
    let driver = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let addr = format!("127.0.0.1:{port}");
    wait_port(&addr, "chromedriver's port", &String::new);
    let profile = tempfile::tempdir().unwrap();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": CHROMIUM,
            // The machine's network is closed: without the background-networking flags,
            // Chromium keeps trying to reach Google's hosts.
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                "--window-size=1500,1000",
                format!("--user-data-dir={}", profile.path().display()),
            ]
        }),
    );
    let http = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = fantoccini::ClientBuilder::new(http)
        .capabilities(caps)
        .connect(&format!("http://{addr}"))
        .await
        .expect("a WebDriver session with Chromium");
    Some(Browser {
        driver,
        client: Some(client),
        shots: shots.iter().map(|p| p.to_path_buf()).collect(),
        _profile: profile,
    })
}

impl Browser {
    fn c(&self) -> &Client {
        self.client.as_ref().expect("the session")
    }

    async fn goto(&self, url: &str) {
        self.c()
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
    }

    async fn text(&self, css: &str) -> String {
        self.c()
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .text()
            .await
            .unwrap()
    }

    async fn click(&self, css: &str) {
        let e = self.c().find(Locator::Css(css)).await;
        e.unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    async fn click_link(&self, text: &str) {
        let e = self.c().find(Locator::LinkText(text)).await;
        e.unwrap_or_else(|e| panic!("link {text}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {text}: {e}"));
    }

    async fn type_into(&self, css: &str, text: &str) {
        let e = self.c().find(Locator::Css(css)).await;
        e.unwrap_or_else(|e| panic!("{css}: {e}"))
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Waits for `css` to appear (a page loaded after a click or a submit): one event, so
    /// the wait fails only after the stall limit, not after a page's usual time. A look that
    /// the navigation itself cuts off (ChromeDriver answers "aborted by navigation" while the
    /// submitted page replaces the old one) is looked again, as a missing element is.
    async fn wait_for(&self, css: &str) {
        let until = Instant::now() + crate::util::STALL;
        loop {
            match self.c().find(Locator::Css(css)).await {
                Ok(_) => return,
                Err(e) if Instant::now() >= until => {
                    panic!("{css} within {:?}: {e}", crate::util::STALL)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    async fn count(&self, css: &str) -> usize {
        self.c().find_all(Locator::Css(css)).await.unwrap().len()
    }

    async fn body(&self) -> String {
        self.text("body").await
    }

    /// A screenshot of the page as it is, into each screenshot folder.
    async fn shot(&self, name: &str) {
        let png = self.c().screenshot().await.expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG image");
        for dir in &self.shots {
            fs::create_dir_all(dir).unwrap();
            fs::write(dir.join(name), &png).unwrap();
        }
    }

    async fn close(mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn shot_dirs(gate: &Gate) -> Vec<PathBuf> {
    let mut dirs = vec![gate.dir().join("screenshots")];
    if let Some(d) = std::env::var_os("X12GATE_SCREENSHOTS") {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// A stranger's ISA06 made to break out of an attribute and open an element (15 characters,
/// as the ISA's fixed width asks).
const HOSTILE_ISA06: &str = "\"><b id=pwn>'& ";
/// A file name with markup and an escape sequence.
const HOSTILE_NAME: &str = "<img src=x onerror=alert(1)>\u{1b}[31m.x12";

/// After a known mix of files taken by a running watcher, the overview counts each
/// partner's decisions; searching `101` in the page's search box finds ZZ:ACME:000000101,
/// whose page shows the 997 sent; the rejected list gives the reason; hostile values are
/// text, never markup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_desk_finds_an_interchange_its_997_and_the_rejected_reasons_in_a_browser() {
    let gate = Gate::new(Settings::default());
    let addr = format!("127.0.0.1:{}", free_port());
    listen_on(&gate, &addr);
    let mut w = gate.start(&[]);
    wait_port(&addr, "the watcher's web port", &|| w.log());
    // Its component separator is `^`, so that the `>` in its id is only a character.
    let stranger = interchange(777, "PO-S")
        .replace("*ZZ*ACME           *", &format!("*ZZ*{HOSTILE_ISA06}*"))
        .replacen("*P*>~", "*P*^~", 1);
    assert!(
        stranger.contains(HOSTILE_ISA06),
        "the hostile ISA06 is in place"
    );
    let files: Vec<(&str, String)> = vec![
        ("a.x12", interchange(101, "PO-A")),
        ("b.x12", interchange(102, "PO-B")),
        ("a-again.x12", re_enveloped(&interchange(101, "PO-A"))),
        ("a-reused.x12", interchange(101, "PO-OTHER")),
        ("d-broken.x12", broken_se01(&interchange(103, "PO-D"))),
        (HOSTILE_NAME, stranger),
    ];
    for (i, (name, body)) in files.iter().enumerate() {
        fs::write(gate.inbox().join(name), body).unwrap();
        let want = i + 1;
        wait_for(
            crate::util::STALL,
            "the file placed",
            || gate.moved().count() == want,
            || format!("{}\n{}", gate.state(), w.log()),
        );
    }
    // 102 was decided three days ago: in the week, not today.
    {
        let db = rusqlite::Connection::open(gate.dir().join("x12gate.db")).unwrap();
        db.busy_timeout(Duration::from_secs(30)).unwrap();
        let moved = db
            .execute(
                "UPDATE events SET at = at - 3 * 86400000 WHERE key = 'ZZ:ACME:000000102'",
                [],
            )
            .unwrap();
        assert!(moved >= 1);
        db.execute(
            "UPDATE documents SET seen = seen - 3 * 86400000 WHERE interchange_key = 'ZZ:ACME:000000102'",
            [],
        )
        .unwrap();
    }
    let base = format!("http://{addr}");

    // Over plain HTTP first (these checks run where no browser is installed too): the
    // counts, the escaping, and the guard against a page of another site rebinding its name.
    let (status, _, page) = request("GET", &format!("{base}/"), &[], None);
    assert_eq!(status, 200, "{page}");
    let value = |col: &str| -> String {
        let at = format!("data-partner=\"ZZ:ACME\" data-col=\"{col}\">");
        let i = page
            .find(&at)
            .unwrap_or_else(|| panic!("{col} in:\n{page}"))
            + at.len();
        page[i..].split('<').next().unwrap_or("").to_string()
    };
    assert_eq!(
        value("today-accepted"),
        "1",
        "101 today; 102 three days ago"
    );
    assert_eq!(value("week-accepted"), "2");
    assert_eq!(value("docs-today-new"), "1");
    assert_eq!(value("docs-week-new"), "2");
    assert!(!page.contains("<b id=pwn>"), "the stranger's id is escaped");
    assert!(
        page.contains("ZZ:&#34;&#62;&#60;b id=pwn&#62;&#39;&#38;"),
        "{page}"
    );
    let (status, _, body) = request(
        "GET",
        &format!("{base}/"),
        &[("Host", "evil.example:80")],
        None,
    );
    assert_eq!(status, 421, "another name for 127.0.0.1 is refused: {body}");
    let (status, _, _) = request("GET", &format!("{base}/"), &[("Host", "localhost")], None);
    assert_eq!(status, 200);
    let (status, _, _) = request("GET", &format!("{base}/interchange/ZZ:ACME:999"), &[], None);
    assert_eq!(status, 404, "an unknown interchange");
    // Its history gives each event's own facts: the conflict names its reason, not the
    // acceptance's documents or where they stand now.
    let (status, _, page) = request(
        "GET",
        &format!("{base}/interchange/ZZ:ACME:000000101"),
        &[],
        None,
    );
    assert_eq!(status, 200);
    let facts: Vec<&str> = page
        .split("<td class=\"facts\">")
        .skip(1)
        .filter_map(|c| c.split("</td>").next())
        .collect();
    let conflict = facts
        .iter()
        .find(|f| f.starts_with("conflict"))
        .unwrap_or_else(|| panic!("{facts:?}"));
    assert!(
        conflict.contains("025") && !conflict.contains("documents"),
        "{facts:?}"
    );
    assert!(
        facts
            .iter()
            .any(|f| f.starts_with("accepted") && f.contains("PO-A") && f.contains(" new")),
        "{facts:?}"
    );

    let shots = shot_dirs(&gate);
    let shot_refs: Vec<&Path> = shots.iter().map(PathBuf::as_path).collect();
    let Some(b) = browser(&shot_refs).await else {
        return;
    };

    // The overview: ACME's decisions today and this week.
    b.goto(&format!("{base}/")).await;
    let cell = |col: &str| format!("td[data-partner=\"ZZ:ACME\"][data-col=\"{col}\"]");
    assert_eq!(b.text(&cell("today-accepted")).await, "1");
    assert_eq!(b.text(&cell("week-accepted")).await, "2");
    for (col, want) in [
        ("duplicate", "1"),
        ("conflict", "1"),
        ("rejected", "1"),
        ("partial", "0"),
    ] {
        assert_eq!(
            b.text(&cell(&format!("today-{col}"))).await,
            want,
            "today {col}"
        );
        assert_eq!(
            b.text(&cell(&format!("week-{col}"))).await,
            want,
            "7 days {col}"
        );
    }
    // The broken file and the reused number's file wait in rejected/.
    assert_eq!(b.text(&cell("rejected-files")).await, "2");
    assert_eq!(
        b.text(&cell("docs-week-new")).await,
        "2",
        "PO-A and PO-B: a rejected set and a refused interchange make no document"
    );
    assert!(b.text(&cell("last")).await.contains("ago"));
    // The chart has bars, each with its count as a tooltip.
    assert!(b.count("#hourly svg rect").await >= 1);
    let overview = b.body().await;
    assert!(overview.contains("Acme Retail"), "{overview}");
    assert!(
        overview.contains(HOSTILE_ISA06.trim_end()),
        "the stranger's id as text:\n{overview}"
    );
    assert_eq!(
        b.count("#pwn").await,
        0,
        "no element made of a partner's id"
    );
    b.shot("overview.png").await;

    // "Did you get my 850 101, and where is my 997?": typed into the search box.
    // U+E007 is WebDriver's Enter key: the form is submitted as an operator submits it.
    b.type_into("nav input[name=q]", "101\u{E007}").await;
    b.wait_for("a.interchange").await;
    assert!(b
        .c()
        .current_url()
        .await
        .unwrap()
        .as_str()
        .contains("/search?q=101"));
    let found = b.text("table.interchanges").await;
    assert!(found.contains("ZZ:ACME:000000101"), "{found}");
    assert!(!found.contains("ZZ:ACME:000000102"), "only 101: {found}");
    b.shot("search.png").await;
    b.click_link("ZZ:ACME:000000101").await;
    b.wait_for("pre.ack-bytes").await;
    assert_eq!(b.text("#key").await, "ZZ:ACME:000000101");
    assert_eq!(b.text("#disposition").await, "accepted");
    // Its file is the archived resend of its content (the newest), not the reused number's
    // file placed in rejected/ after it.
    let now = b.text("#file-now").await;
    assert!(
        now.contains("/archive/") && now.ends_with("/a-again.x12"),
        "{now}"
    );
    let ack = b.text("div.ack[data-kind=\"997\"] pre.ack-bytes").await;
    assert!(ack.contains("ST*997*"), "{ack}");
    assert!(ack.contains("AK1*PO*101"), "{ack}");
    assert!(ack.contains("AK9*A*1*1*1"), "{ack}");
    // The 997 shown is the one in the outbox, byte for byte (segments a line each).
    let sent: Vec<PathBuf> = crate::watch::files_under(&gate.outbox())
        .into_iter()
        .filter(|p| fs::read_to_string(p).is_ok_and(|t| t.contains("AK1*PO*101~")))
        .collect();
    assert_eq!(sent.len(), 1, "one 997 for 101 in the outbox: {sent:?}");
    let outbox = fs::read_to_string(&sent[0]).unwrap();
    assert_eq!(
        ack.split_whitespace().collect::<String>(),
        outbox.split_whitespace().collect::<String>()
    );
    // The resend and the reused number are in its history.
    let history = b.text("#history").await;
    for event in ["accepted", "duplicate", "conflict", "placed"] {
        assert!(history.contains(event), "{event} in:\n{history}");
    }
    b.shot("interchange.png").await;

    // The rejected list: the broken file, its reason and the partner's contact.
    b.goto(&format!("{base}/rejected")).await;
    let row = b.text("tr[data-file=\"d-broken.x12\"]").await;
    assert!(row.contains("rejected"), "{row}");
    assert!(row.contains("edi-ops@example.com"), "{row}");
    let reason = b.text("tr[data-file=\"d-broken.x12\"] td.reason").await;
    let on_disk = crate::watch::reason_json(&gate.rejected().join("d-broken.x12.reason.json"));
    assert_eq!(
        reason,
        on_disk["reason"].as_str().unwrap(),
        "the reason file's reason"
    );
    assert!(!reason.is_empty());
    // The hostile file name: its markup as text, its escape sequence escaped.
    let page = b.body().await;
    assert!(
        page.contains("<img src=x onerror=alert(1)>\\u{1b}[31m.x12"),
        "{page}"
    );
    assert_eq!(b.count("img").await, 0, "no element made of a file name");
    assert_eq!(b.count("script").await, 0, "the page has no script at all");
    b.shot("rejected.png").await;

    // The held list: PO-A's reused number was a conflict of the interchange, not a document.
    b.goto(&format!("{base}/held")).await;
    assert_eq!(b.count("#none").await, 1, "nothing held");
    b.close().await;
    w.signal("TERM");
    w.wait(crate::util::STALL);
}

/// An 850 without its BEG: rejected by its definition (AK3/AK4) under the default validation.
fn without_beg(n: u32) -> String {
    let text = interchange(n, "PO-FIX");
    let text = text.replace("BEG*00*SA*PO-FIX**20240115~\n", "");
    text.replace("SE*13*0001~", "SE*12*0001~")
}

/// Actions are refused without `--allow-actions`, without a token, and across sites; with
/// both, an operator signs in through the form, reprocesses a rejected interchange (after its
/// partner's configuration was fixed) by its button, and the history names her.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_need_the_flag_and_a_token_and_are_audited_with_the_operator() {
    let gate = Gate::new(Settings::default());
    let file = gate.dir().join("po-fix.x12");
    fs::write(&file, without_beg(301)).unwrap();
    let out = crate::util::x12gate(gate.dir())
        .args(["process", "po-fix.x12"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ZZ:ACME:000000301 rejected"), "{text}");
    let key = "ZZ:ACME:000000301";
    let post = |s: &Served, headers: &[(&str, &str)], fields: &[(&str, &str)]| {
        request("POST", &s.url("/action/reprocess"), headers, Some(fields))
    };
    let bearer = format!("Bearer {SECRET}");

    // Read-only: even an operator with a token is refused.
    {
        let s = Served::start(gate.dir(), &[], Some(TOKEN));
        let (status, _, body) = post(&s, &[("Authorization", &bearer)], &[("key", key)]);
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("--allow-actions"), "{body}");
        let (status, _, body) = request(
            "GET",
            &s.url(&format!("/interchange/{key}")),
            &[("Authorization", &bearer)],
            None,
        );
        assert_eq!(status, 200);
        assert!(
            !body.contains("id=\"reprocess\""),
            "no action button when actions are off"
        );
    }
    // --allow-actions without a token: refused at start, saying why.
    let out = crate::util::x12gate(gate.dir())
        .args(["serve", "--listen", "127.0.0.1:1", "--allow-actions"])
        .env_remove("X12GATE_UI_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("X12GATE_UI_TOKEN"));
    // The watcher likewise; and without [gateway] metrics there is no page to act on.
    let refused = |says: &str| {
        let out = crate::util::x12gate(gate.dir())
            .args(["watch", "--once", "--allow-actions"])
            .env_remove("X12GATE_UI_TOKEN")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "{says} in: {err}");
    };
    refused("[gateway] metrics");
    listen_on(&gate, &format!("127.0.0.1:{}", free_port()));
    refused("X12GATE_UI_TOKEN");

    // The partner's definitions check was the cause: relaxed, the file is acceptable.
    let path = gate.dir().join("partners.toml");
    let config = fs::read_to_string(&path).unwrap();
    fs::write(
        &path,
        config.replacen(
            "ack = \"997\"\n",
            "ack = \"997\"\nvalidation = \"envelope\"\n",
            1,
        ),
    )
    .unwrap();
    let s = Served::start(gate.dir(), &["--allow-actions"], Some(TOKEN));
    let (status, _, body) = post(&s, &[], &[("key", key)]);
    assert_eq!(status, 401, "no token: {body}");
    let (status, _, _) = post(
        &s,
        &[("Authorization", "Bearer not-the-token-at-all")],
        &[("key", key)],
    );
    assert_eq!(status, 401, "a wrong token");
    // The pages themselves want the token, once tokens are configured.
    let (status, headers, _) = request("GET", &s.url("/"), &[], None);
    assert_eq!(status, 303);
    assert!(headers
        .iter()
        .any(|(k, v)| k == "location" && v == "/login"));
    // The login form's cookie: HttpOnly, SameSite=Strict, not the token.
    let (status, headers, _) = request("POST", &s.url("/login"), &[], Some(&[("token", SECRET)]));
    assert_eq!(status, 303);
    let cookie = headers
        .iter()
        .find(|(k, _)| k == "set-cookie")
        .map(|(_, v)| v.clone())
        .expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains(SECRET), "{cookie}");
    let session = cookie.split(';').next().unwrap().to_string();
    // A cross-site form riding on the cookie: refused (no form value, or another site's).
    let (status, _, body) = post(&s, &[("Cookie", &session)], &[("key", key)]);
    assert_eq!(status, 403, "{body}");
    let (status, _, _) = post(
        &s,
        &[
            ("Cookie", &session),
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
        &[("key", key), ("form", "0000")],
    );
    assert_eq!(status, 403);
    // The right form value is not enough from another site.
    let (_, _, page) = request(
        "GET",
        &s.url(&format!("/interchange/{key}")),
        &[("Cookie", &session)],
        None,
    );
    let marker = "name=\"form\" value=\"";
    let at = page.find(marker).expect("the form value on the page") + marker.len();
    let value = page[at..].split('"').next().unwrap().to_string();
    assert_eq!(value.len(), 64, "{value}");
    for headers in [
        vec![
            ("Cookie", session.as_str()),
            ("Origin", "http://evil.example"),
        ],
        vec![
            ("Cookie", session.as_str()),
            ("Sec-Fetch-Site", "cross-site"),
        ],
    ] {
        let (status, _, body) = post(&s, &headers, &[("key", key), ("form", &value)]);
        assert_eq!(status, 403, "{headers:?}: {body}");
    }
    // A GET never acts; a login or logout from another site is refused.
    let (status, _, _) = request(
        "GET",
        &s.url("/action/reprocess"),
        &[("Authorization", &bearer)],
        None,
    );
    assert_eq!(status, 405);
    let (status, _, _) = request(
        "POST",
        &s.url("/login"),
        &[("Origin", "http://evil.example")],
        Some(&[("token", SECRET)]),
    );
    assert_eq!(status, 403);
    // Nothing of that changed the interchange.
    let shown = crate::util::x12gate(gate.dir())
        .args(["show", key, "--json"])
        .output()
        .unwrap();
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["record"]["attempts"], 1, "{shown}");

    let shots = shot_dirs(&gate);
    let shot_refs: Vec<&Path> = shots.iter().map(PathBuf::as_path).collect();
    let Some(b) = browser(&shot_refs).await else {
        return;
    };
    // Signing in through the form, then the button on the interchange's page.
    b.goto(&s.url(&format!("/interchange/{key}"))).await;
    assert!(b
        .c()
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with("/login"));
    b.type_into("#token", SECRET).await;
    b.click("#signin").await;
    b.wait_for("#who").await;
    assert_eq!(b.text("#who").await, "alice");
    b.goto(&s.url(&format!("/interchange/{key}"))).await;
    assert_eq!(b.text("#disposition").await, "rejected");
    b.click("#reprocess button").await;
    b.wait_for("#message").await;
    let answer = b.text("#message").await;
    assert!(
        answer.contains("attempt 2 accepted"),
        "{answer}\n{}",
        s.log()
    );
    b.shot("reprocessed.png").await;
    b.click("#back").await;
    b.wait_for("#history").await;
    assert_eq!(b.text("#disposition").await, "accepted");
    assert_eq!(b.count("tr[data-event=\"web_action\"]").await, 1);
    assert!(b
        .text("tr[data-event=\"web_action\"]")
        .await
        .contains("alice"));
    b.close().await;

    // The audit trail, as `history` prints it: reopened, then the action by alice.
    let out = crate::util::x12gate(gate.dir())
        .args(["history", "--json"])
        .output()
        .unwrap();
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &serde_json::Value| e["key"] == key)
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(
        kinds,
        ["rejected", "reopened", "accepted", "web_action"],
        "{events:?}"
    );
    // `history --json` gives each event's detail as its fields.
    let action = &events[3];
    assert_eq!(action["by"], "alice", "{action}");
    assert_eq!(action["action"], "reprocess");
    assert_eq!(action["via"], "web");
    assert_eq!(action["ok"], true);
}

/// Reachable from other hosts only with a token: `serve` refuses to start without one, and
/// with one every page wants it; a watcher exporting metrics to the network keeps exporting
/// them but serves no page without a token.
/// Wrong tokens sent in parallel, to the login form and as bearer headers, are answered
/// one after another (they once waited side by side, and a bearer not at all: 50 guesses
/// in 0.7 s); the right token is let in meanwhile.
#[test]
fn wrong_tokens_in_parallel_are_answered_one_at_a_time() {
    let gate = Gate::new(Settings::default());
    crate::util::x12gate(gate.dir())
        .arg("init")
        .assert()
        .success();
    let s = Served::start(gate.dir(), &[], Some(TOKEN));
    const GUESSES: u32 = 6;
    let started = Instant::now();
    let answers: Vec<u16> = std::thread::scope(|scope| {
        let guesses: Vec<_> = (0..GUESSES)
            .map(|i| {
                let s = &s;
                scope.spawn(move || {
                    let guess = format!("guess-{i}-0123456789abcdef");
                    if i % 2 == 0 {
                        request("POST", &s.url("/login"), &[], Some(&[("token", &guess)])).0
                    } else {
                        let bearer = format!("Bearer {guess}");
                        request("GET", &s.url("/"), &[("Authorization", &bearer)], None).0
                    }
                })
            })
            .collect();
        let (status, _, body) = request(
            "GET",
            &s.url("/"),
            &[("Authorization", &format!("Bearer {SECRET}"))],
            None,
        );
        assert_eq!(status, 200, "{body}");
        guesses.into_iter().map(|g| g.join().unwrap()).collect()
    });
    let took = started.elapsed();
    assert_eq!(
        answers,
        [401, 303, 401, 303, 401, 303],
        "login refused, page redirected"
    );
    assert!(
        took >= Duration::from_millis(300) * GUESSES,
        "{GUESSES} wrong tokens answered in {took:?}"
    );
}

#[test]
fn a_page_reachable_from_other_hosts_needs_a_token() {
    let gate = Gate::new(Settings::default());
    let started = Instant::now();
    let out = crate::util::x12gate(gate.dir())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env_remove("X12GATE_UI_TOKEN")
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "refused at start");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("reachable from other hosts") && err.contains("X12GATE_UI_TOKEN"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    // A weak token is refused too.
    let out = crate::util::x12gate(gate.dir())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env("X12GATE_UI_TOKEN", "bob:short")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 16"));

    // With a token, on every address: the page wants it.
    crate::util::x12gate(gate.dir())
        .arg("init")
        .assert()
        .success();
    let port = free_port();
    let log = gate.dir().join("serve-any.log");
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("x12gate"))
        .current_dir(gate.dir())
        .args(["serve", "--listen", &format!("0.0.0.0:{port}")])
        .env("X12GATE_UI_TOKEN", TOKEN)
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    wait_port(&addr, "serve on 0.0.0.0", &|| {
        fs::read_to_string(&log).unwrap_or_default()
    });
    let (status, _, _) = request("GET", &format!("http://{addr}/search?q=101"), &[], None);
    assert_eq!(status, 303, "to the login form");
    let (status, _, body) = request(
        "GET",
        &format!("http://{addr}/search?q=101"),
        &[("Authorization", &format!("Bearer {SECRET}"))],
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("signed in as"), "{body}");
    let _ = child.kill();
    let _ = child.wait();

    // A watcher with metrics on every address and no token: /metrics, no page.
    let port = free_port();
    listen_on(&gate, &format!("0.0.0.0:{port}"));
    let mut w = gate.start(&[]);
    let addr = format!("127.0.0.1:{port}");
    wait_port(&addr, "the watcher's metrics port", &|| w.log());
    let (status, _, _) = request("GET", &format!("http://{addr}/metrics"), &[], None);
    assert_eq!(status, 200);
    let (status, _, _) = request("GET", &format!("http://{addr}/"), &[], None);
    assert_eq!(status, 404, "no page without a token");
    w.signal("TERM");
    w.wait(Duration::from_secs(60));
    assert!(
        w.log().contains("the web page is not served"),
        "{}",
        w.log()
    );
}

/// The held and dead lists act through the same calls as `documents release`, `documents
/// discard` and `deliveries retry`, each audited with the operator; the search finds by
/// padded or unpadded number, document key, file name, partner and time.
#[test]
fn held_and_dead_are_released_discarded_and_retried_from_the_page_and_the_search_finds_them() {
    let gate = Gate::new(Settings::default());
    let path = gate.dir().join("partners.toml");
    let config = fs::read_to_string(&path).unwrap();
    // The ERP refuses every document for good (exit 65): each delivery dies at once.
    let config = config.replacen(
        "contact = \"edi-ops@example.com\"\n",
        "contact = \"edi-ops@example.com\"\ndestination = \"erp\"\n",
        1,
    ) + "\n[[destination]]\nname = \"erp\"\nkind = \"command\"\ncommand = [\"sh\", \"-c\", \"cat > /dev/null; exit 65\"]\n";
    fs::write(&path, config).unwrap();
    let other = |text: String| text.replacen("PO1*1*120*", "PO1*1*121*", 1);
    let files = [
        ("a.x12", interchange(201, "PO-H")),
        ("b.x12", other(interchange(202, "PO-H"))),
        ("c.x12", interchange(203, "PO-J")),
        ("d-20201.x12", other(interchange(204, "PO-J"))),
    ];
    let mut args = vec!["process".to_string()];
    for (name, body) in &files {
        fs::write(gate.dir().join(name), body).unwrap();
        args.push((*name).to_string());
    }
    let out = crate::util::x12gate(gate.dir())
        .args(&args)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ZZ:ACME:000000204 accepted"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = Served::start(gate.dir(), &["--allow-actions"], Some(TOKEN));
    let bearer = format!("Bearer {SECRET}");
    let auth = [("Authorization", bearer.as_str())];
    let get = |path: &str| {
        let (status, _, body) = request("GET", &s.url(path), &auth, None);
        assert_eq!(status, 200, "{path}: {body}");
        body
    };
    let act = |action: &str, key: &str| {
        let (status, _, body) = request(
            "POST",
            &s.url(&format!("/action/{action}")),
            &auth,
            Some(&[("key", key)]),
        );
        (status, body)
    };
    let po_h = "ZZ:ACME:850:PO-H:00:";
    let po_j = "ZZ:ACME:850:PO-J:00:";

    // The lists, with their buttons.
    let held = get("/held");
    assert_eq!(
        held.matches("action=\"/action/release\"").count(),
        2,
        "{held}"
    );
    assert!(
        held.contains(&format!("data-document=\"{po_h}\"")),
        "{held}"
    );
    assert!(held.contains("edi-ops@example.com"), "the owner: {held}");
    let dead = get("/dead");
    assert_eq!(
        dead.matches("action=\"/action/retry\"").count(),
        2,
        "PO-H and PO-J's first: {dead}"
    );
    assert!(dead.contains("edi-ops@example.com"), "{dead}");

    // Release, discard, retry: through the same calls as the commands.
    let (status, body) = act("release", po_h);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("released 1 document(s) of ZZ:ACME:850:PO-H:00:"),
        "{body}"
    );
    // PO-H's first delivery is dead: the released one waits behind it, blocked.
    assert!(
        body.contains("0 delivered, 0 to retry, 0 dead"),
        "not sent before PO-H's first: {body}"
    );
    let dead = get("/dead");
    assert_eq!(dead.matches("<td>blocked</td>").count(), 1, "{dead}");
    let (status, body) = act("discard", po_j);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("discarded 1 document(s)"), "{body}");
    let (status, body) = act("discard", po_j);
    assert_eq!(status, 409, "nothing left to discard: {body}");
    let (status, body) = act("retry", po_h);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(
            "1 delivery(ies) of ZZ:ACME:850:PO-H:00: queued again, and 1 blocked behind it"
        ),
        "{body}"
    );
    let (status, _) = act("reboot", po_h);
    assert_eq!(status, 404, "no such action");

    let listed = |args: &[&str]| -> Vec<serde_json::Value> {
        let out = crate::util::x12gate(gate.dir())
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    assert!(listed(&["documents", "--held", "--json"]).is_empty());
    let rows = listed(&["deliveries", "--json"]);
    let states: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap_or(""),
                r["state"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        states
            .iter()
            .filter(|(k, st)| *k == po_h && *st == "queued")
            .count(),
        2,
        "{states:?}"
    );
    assert!(states.contains(&(po_j, "dead")), "{states:?}");
    let actions: Vec<(String, String, bool)> = listed(&["history", "--json"])
        .iter()
        .filter(|e| e["event"] == "web_action")
        .map(|e| {
            assert_eq!(e["by"], "alice", "{e}");
            (
                e["action"].as_str().unwrap_or("").to_string(),
                e["key"].as_str().unwrap_or("").to_string(),
                e["ok"] == true,
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("release".to_string(), po_h.to_string(), true),
            ("discard".to_string(), po_j.to_string(), true),
            ("discard".to_string(), po_j.to_string(), false),
            ("retry".to_string(), po_h.to_string(), true),
        ],
        "refusals are audited too"
    );

    // The search: a number padded or not, a document key's part, a file name, a partner, a time.
    let keys_found = |query: &str| -> Vec<String> {
        let body = get(&format!("/search?{query}"));
        body.match_indices("<tr data-key=\"")
            .map(|(i, m)| {
                let rest = &body[i + m.len()..];
                rest[..rest.find('"').unwrap_or(0)].to_string()
            })
            .collect()
    };
    assert_eq!(keys_found("q=000000201"), ["ZZ:ACME:000000201"]);
    assert_eq!(
        keys_found("q=201"),
        ["ZZ:ACME:000000201"],
        "not d-20201.x12"
    );
    assert_eq!(
        keys_found("q=d-20201"),
        ["ZZ:ACME:000000204"],
        "a file name in part"
    );
    let mut by_po = keys_found("q=po-h");
    by_po.sort();
    assert_eq!(by_po, ["ZZ:ACME:000000201", "ZZ:ACME:000000202"]);
    assert_eq!(keys_found("q=b.x12"), ["ZZ:ACME:000000202"]);
    assert_eq!(keys_found("q=ACME:203"), ["ZZ:ACME:000000203"]);
    assert_eq!(keys_found("partner=ACME").len(), 4);
    assert_eq!(keys_found("partner=ZZ%3AACME&q=204"), ["ZZ:ACME:000000204"]);
    assert_eq!(keys_found("partner=GLOBEX&q=204").len(), 0);
    assert_eq!(keys_found("q=204&disposition=rejected").len(), 0);
    assert_eq!(
        keys_found("q=204&since=2000-01-01&until=2000-01-02").len(),
        0
    );
    assert_eq!(keys_found("q=204&since=2000-01-01").len(), 1);
    let body = get("/search?q=204&since=yesterday");
    assert!(body.contains("yesterday: not a time"), "{body}");
    let body = get("/search?q=po-h");
    assert!(
        body.contains("data-document=\"ZZ:ACME:850:PO-H:00:\""),
        "{body}"
    );
    let body = get("/search?q=po-h&disposition=rejected");
    assert!(
        !body.contains("data-document="),
        "no rejected interchange carries it: {body}"
    );
    // A whole day typed as the end is in the range.
    let today = chrono::Local::now().format("%Y-%m-%d").to_string();
    assert_eq!(
        keys_found(&format!("q=204&since={today}&until={today}")).len(),
        1
    );
}

/// An ERP that fails every attempt (a command that exits 1: try again): the overview shows
/// the destination failing with why, `/deliveries` lists the retrying rows by state,
/// destination and partner (a partner that names nothing is said so), and a document's page,
/// reached by its id alone, shows its sighting, its delivery, each attempt and its JSON.
#[test]
fn a_failing_erp_shows_on_the_overview_the_deliveries_and_the_documents_page() {
    let gate = Gate::new(Settings::default());
    let path = gate.dir().join("partners.toml");
    let config = fs::read_to_string(&path).unwrap().replacen(
        "contact = \"edi-ops@example.com\"\n",
        "contact = \"edi-ops@example.com\"\ndestination = \"erp\"\n",
        1,
    ) + "\n[[destination]]\nname = \"erp\"\nkind = \"command\"\ncommand = [\"sh\", \"-c\", \"cat > /dev/null; echo 'ERP down for maintenance' >&2; exit 1\"]\n";
    fs::write(&path, config).unwrap();
    fs::write(gate.dir().join("a.x12"), interchange(301, "PO-A")).unwrap();
    fs::write(gate.dir().join("b.x12"), interchange(302, "PO-B")).unwrap();
    let out = crate::util::x12gate(gate.dir())
        .args(["process", "a.x12", "b.x12"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = Served::start(gate.dir(), &[], None);
    let get = |path: &str| {
        let (status, _, body) = request("GET", &s.url(path), &[], None);
        (status, body)
    };

    let (status, overview) = get("/");
    assert_eq!(status, 200);
    let row = overview
        .split("<tr data-destination=\"erp\"")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row for erp: {overview}"));
    assert!(row.starts_with(" class=\"warn\""), "down: {row}");
    assert!(row.contains("state=retrying\">2</a>"), "{row}");
    assert!(row.contains("ERP down for maintenance"), "why: {row}");

    for query in [
        "state=retrying",
        "destination=erp",
        "partner=ACME",
        "partner=Acme+Retail&state=retrying",
    ] {
        let (status, page) = get(&format!("/deliveries?{query}"));
        assert_eq!(status, 200, "{query}");
        for po in ["PO-A", "PO-B"] {
            let key = format!("data-document=\"ZZ:ACME:850:{po}:00:\"");
            assert!(page.contains(&key), "{query}: {po}: {page}");
        }
        assert!(!page.contains("id=\"next\""), "one page: {page}");
    }
    let (_, none) = get("/deliveries?state=dead");
    assert!(none.contains("id=\"none\""), "{none}");
    let (_, nope) = get("/deliveries?partner=ACNE");
    assert!(nope.contains("the closest is ZZ:ACME"), "{nope}");

    // The documents, by partner, set and day.
    for query in [
        "",
        "partner=ACME&set=850",
        "partner=Acme+Retail&since=2000-01-01",
    ] {
        let (status, page) = get(&format!("/documents?{query}"));
        assert_eq!(status, 200, "{query}");
        for po in ["PO-A", "PO-B"] {
            let link = format!("href=\"/document/ZZ%3AACME%3A850%3A{po}%3A00%3A\"");
            assert!(page.contains(&link), "{query}: {po}: {page}");
        }
    }
    let (_, none) = get("/documents?set=810"); // and held: none of them
    assert!(get("/documents?delivery=held").1.contains("id=\"none\""));
    assert!(none.contains("id=\"none\""), "{none}");
    let (_, bad) = get("/documents?since=yesterday");
    assert!(bad.contains("a date is YYYY-MM-DD"), "{bad}");

    // PO-A resent: its newest sighting is a duplicate, which keeps no JSON of its own.
    fs::write(gate.dir().join("c.x12"), interchange(303, "PO-A")).unwrap();
    let out = crate::util::x12gate(gate.dir())
        .args(["process", "--no-deliver", "c.x12"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("duplicate"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (status, doc) = get("/document/PO-A");
    assert_eq!(status, 200, "{doc}");
    assert!(
        doc.contains("<code id=\"key\">ZZ:ACME:850:PO-A:00:</code>"),
        "{doc}"
    );
    assert!(
        doc.contains("data-event=\"delivery_attempt\""),
        "its attempt: {doc}"
    );
    assert!(
        doc.contains("href=\"/interchange/ZZ%3AACME%3A000000301\""),
        "{doc}"
    );
    let body = doc.split("<pre id=\"body\">").nth(1).unwrap_or_default();
    assert!(body.contains("PO-A"), "its JSON: {doc}");
    let (status, _, json) = request(
        "GET",
        &s.url("/document/ZZ:ACME:850:PO-A:00:/body"),
        &[],
        None,
    );
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&json).expect("the JSON whole");
    assert!(json.to_string().contains("PO-A"));
    let (status, _) = get("/document/PO-NOPE");
    assert_eq!(status, 404);
}

/// The interchange page shows the partner's own segments, one a row, the finding marked at
/// the segment it is about, and hands out the file as it is stored.
#[test]
fn the_interchange_page_shows_the_partners_segments_with_the_finding_at_its_segment() {
    let gate = Gate::new(Settings::default());
    let bad = broken_se01(&interchange(401, "PO-S"));
    fs::write(gate.dir().join("bad.x12"), &bad).unwrap();
    let out = crate::util::x12gate(gate.dir())
        .args(["process", "bad.x12"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = Served::start(gate.dir(), &[], None);
    let (status, _, page) = request("GET", &s.url("/interchange/ACME:401"), &[], None);
    assert_eq!(status, 200, "{page}");
    let segments = page
        .split("<table id=\"segments\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no segments: {page}"));
    assert!(segments.contains("<code>ISA*00*"), "{segments}");
    let marked: Vec<&str> = segments
        .split("<tr class=\"segment warn\"")
        .skip(1)
        .collect();
    assert_eq!(
        marked.len(),
        1,
        "one finding, one segment marked: {segments}"
    );
    assert!(
        marked[0].contains("<code>SE*12*0001</code>"),
        "{}",
        marked[0]
    );
    assert!(marked[0].contains("class=\"finding\""), "{}", marked[0]);
    let (status, _, file) = request(
        "GET",
        &s.url("/interchange/ZZ:ACME:000000401/file"),
        &[],
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(file, bad, "the file as stored");
}

/// Search as a desk searches: by the ERP's reference for a document (any case), by a GS06,
/// by set id, and by the partner's name.
#[test]
fn the_search_finds_by_erp_reference_gs06_set_and_partner_name() {
    let gate = Gate::new(Settings::default());
    // ISA13 501, GS06 77.
    let file = interchange(501, "PO-R")
        .replace("*501*X*004010~", "*77*X*004010~")
        .replace("GE*1*501~", "GE*1*77~");
    fs::write(gate.dir().join("r.x12"), file).unwrap();
    let run = |args: &[&str]| {
        let out = crate::util::x12gate(gate.dir())
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["process", "r.x12"]);
    run(&["confirm", "PO-R", "--ref", "SO-1002"]);
    let s = Served::start(gate.dir(), &[], None);
    let search = |query: &str| {
        let (status, _, body) = request("GET", &s.url(&format!("/search?{query}")), &[], None);
        assert_eq!(status, 200, "{query}: {body}");
        body
    };
    let document = "data-document=\"ZZ:ACME:850:PO-R:00:\"";
    for query in [
        "q=SO-1002",
        "q=so-1002",
        "q=77",
        "q=PO-R&set=850",
        "partner=Acme+Retail&set=850",
    ] {
        let found = search(query);
        assert!(found.contains(document), "{query}: {found}");
        assert!(
            found.contains("ZZ:ACME:000000501"),
            "{query}: the interchange: {found}"
        );
    }
    let none = search("q=PO-R&set=810");
    assert!(!none.contains(document), "{none}");
}
