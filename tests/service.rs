//! Running as a service: a backup of the registry taken while the watcher works.

use std::fs;
use std::time::Duration;

use crate::watch::{interchange, wait_for, Gate, Settings};

/// `backup` while `watch` processes 1,000 files: every copy opens as a registry and passes
/// `PRAGMA integrity_check`, and the copies grow with the work.
#[test]
fn backups_while_the_watcher_works_are_consistent() {
    let gate = Gate::new(Settings::default());
    let staging = gate.dir().join("staging");
    fs::create_dir_all(&staging).unwrap();
    for i in 0..1000u32 {
        fs::write(
            staging.join(format!("f{i:04}.x12")),
            interchange(700_000 + i, &format!("PO-{i}")),
        )
        .unwrap();
    }
    let mut w = gate.start(&[]);
    for i in 0..1000u32 {
        let name = format!("f{i:04}.x12");
        fs::rename(staging.join(&name), gate.inbox().join(&name)).unwrap();
    }
    wait_for(
        Duration::from_secs(30),
        "the watcher to create the registry",
        || {
            matches!(
                x12gate::registry::Registry::open_read_only(&x12gate::registry::Database::from(
                    &gate.dir().join("x12gate.db")
                )),
                Ok(Some(_))
            )
        },
        || w.log(),
    );
    let mut copies = Vec::new();
    let mut n = 0;
    while gate.moved().count() < 1000 && n < 200 {
        n += 1;
        let dest = gate.dir().join(format!("backup-{n}.db"));
        let out = crate::util::x12gate(gate.dir())
            .args(["backup"])
            .arg(&dest)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let copy = rusqlite::Connection::open(&dest).unwrap();
        let ok: String = copy
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok", "{}", dest.display());
        let accepted: u64 = copy
            .query_row(
                "SELECT count(*) FROM interchanges WHERE disposition = 'accepted'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        copies.push(accepted);
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_for(
        Duration::from_secs(120),
        "every file archived",
        || gate.moved().count() == 1000,
        || gate.state(),
    );
    w.signal("TERM");
    assert_eq!(w.wait(Duration::from_secs(30)).code(), Some(0));
    eprintln!("accepted interchanges in the copies: {copies:?}");
    assert!(copies.len() >= 2, "{copies:?}");
    assert!(copies.windows(2).all(|w| w[0] <= w[1]), "{copies:?}");
    assert!(
        copies.iter().any(|c| *c > 0 && *c < 1000),
        "no copy was taken mid-work: {copies:?}"
    );
    let again = crate::util::x12gate(gate.dir())
        .args(["backup"])
        .arg(gate.dir().join("backup-1.db"))
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(2),
        "an existing copy is never overwritten"
    );
}

/// One HTTP GET on 127.0.0.1: the status and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the watcher");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let status = all
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = all
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// `/metrics` of a running watcher after a known mix of files, read with a Prometheus text
/// parser: each counter has its value, the backlog is what `rejected/` holds; `/healthz` is
/// 200, and 503 with the reason once the outbox is unusable.
#[test]
fn metrics_and_health_of_a_running_watcher() {
    let gate = Gate::new(Settings::default());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let config = fs::read_to_string(gate.dir().join("partners.toml")).unwrap();
    fs::write(
        gate.dir().join("partners.toml"),
        config.replacen(
            "[gateway]\n",
            &format!("[gateway]\nmetrics = \"{addr}\"\n"),
            1,
        ),
    )
    .unwrap();
    let mut w = gate.start(&[]);
    wait_for(
        Duration::from_secs(30),
        "the metrics port",
        || std::net::TcpStream::connect(&addr).is_ok(),
        || w.log(),
    );
    let files = [
        ("a.x12", interchange(750_001, "PO-A")),
        ("b.x12", interchange(750_002, "PO-B")),
        ("a-again.x12", interchange(750_001, "PO-A")),
        ("c-reused.x12", interchange(750_002, "PO-OTHER")),
        (
            "d-broken.x12",
            crate::watch::broken_se01(&interchange(750_003, "PO-D")),
        ),
        ("junk.bin", "not X12 at all".to_string()),
        // A stranger whose ISA06 holds a quote: a label of its own would break the format.
        (
            "stranger.x12",
            interchange(750_009, "PO-S").replace("*ZZ*ACME           *", "*ZZ*EV\"IL          *"),
        ),
    ];
    for (i, (name, body)) in files.iter().enumerate() {
        fs::write(gate.inbox().join(name), body).unwrap();
        let want = i + 1;
        wait_for(
            Duration::from_secs(60),
            "the file placed",
            || gate.moved().count() == want,
            || gate.state(),
        );
    }
    let (status, text) = get(&addr, "/metrics");
    assert_eq!(status, 200, "{text}");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("the exposition format parses");
    let value = |name: &str, labels: &[(&str, &str)]| -> f64 {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name)
            .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
            .unwrap_or_else(|| panic!("no {name} {labels:?} in:\n{text}"))
    };
    let acme = ("partner", "ZZ:ACME");
    for (decision, n) in [
        ("accepted", 2.0),
        ("duplicate", 1.0),
        ("conflict", 1.0),
        ("rejected", 1.0),
    ] {
        assert_eq!(
            value(
                "x12gate_interchanges_total",
                &[acme, ("decision", decision)]
            ),
            n,
            "{decision}"
        );
    }
    assert_eq!(value("x12gate_conflicts_total", &[acme]), 1.0);
    // Not X12 (unreadable), and a stranger (rejected): counted, under one label.
    for decision in ["unreadable", "rejected"] {
        assert_eq!(
            value(
                "x12gate_interchanges_total",
                &[("partner", "unknown"), ("decision", decision)]
            ),
            1.0,
            "{decision}"
        );
    }
    assert!(
        !text.contains("EV"),
        "a stranger's id became a label:\n{text}"
    );
    assert_eq!(
        value(
            "x12gate_acknowledgments_sent_total",
            &[acme, ("kind", "997")]
        ),
        4.0
    );
    assert_eq!(
        value(
            "x12gate_acknowledgments_sent_total",
            &[acme, ("kind", "ta1")]
        ),
        1.0
    );
    let m = gate.moved();
    assert_eq!(m.rejected.len(), 4, "{m:?}");
    assert_eq!(
        value("x12gate_rejected_backlog_files", &[]),
        m.rejected.len() as f64
    );
    assert_eq!(
        value("x12gate_unfinished_claims", &[("state", "in_flight")]),
        0.0
    );
    let last = value("x12gate_partner_last_received_timestamp_seconds", &[acme]);
    let now = chrono::Utc::now().timestamp() as f64;
    assert!((now - last).abs() < 120.0, "{last} vs {now}");
    assert!(text.contains("x12gate_batch_seconds_count"), "{text}");
    // `x12gate metrics` prints the registry's part the same.
    let once = crate::util::x12gate(gate.dir())
        .arg("metrics")
        .output()
        .unwrap();
    let once = String::from_utf8(once.stdout).unwrap();
    let line = "x12gate_interchanges_total{partner=\"ZZ:ACME\",decision=\"accepted\"} 2";
    assert!(once.contains(line) && text.contains(line), "{once}");

    let (status, body) = get(&addr, "/healthz");
    assert_eq!(status, 200, "{body}");
    fs::rename(gate.outbox(), gate.dir().join("outbox-moved")).unwrap();
    fs::write(gate.outbox(), b"not a folder").unwrap();
    let (status, body) = get(&addr, "/healthz");
    assert_eq!(status, 503, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v["problems"].to_string().contains("gateway.outbox"), "{v}");
    w.signal("TERM");
    assert_eq!(
        w.wait(Duration::from_secs(30)).code(),
        Some(0),
        "{}",
        w.log()
    );
}

/// `prune --files`: only files past their partner's `retention_days` whose key has left the
/// registry; a dry run lists them, `--apply` deletes them, everything else stays. An order's
/// document file in `out/` belongs to the interchange that delivered it (its
/// `delivery.interchange`): it goes with that interchange's 997 and archived file.
#[test]
fn prune_files_removes_only_what_is_past_retention_and_no_longer_referred_to() {
    let gate = Gate::new(Settings::default());
    let config = fs::read_to_string(gate.dir().join("partners.toml")).unwrap();
    fs::write(
        gate.dir().join("partners.toml"),
        format!("{config}retention_days = 1\n"),
    )
    .unwrap();
    fs::write(gate.inbox().join("a.x12"), interchange(760_001, "PO-A")).unwrap();
    fs::write(gate.inbox().join("b.x12"), interchange(760_002, "PO-B")).unwrap();
    let (status, log) = gate.once();
    assert_eq!(status.code(), Some(0), "{log}");
    let (doc_a, doc_b) = (
        gate.out().join(crate::util::order_file("ACME", "PO-A")),
        gate.out().join(crate::util::order_file("ACME", "PO-B")),
    );
    assert_eq!(
        crate::util::documents_by_interchange(&gate.out()),
        std::collections::BTreeMap::from([
            (
                Some("ZZ:ACME:000760001".to_string()),
                vec![crate::util::order_file("ACME", "PO-A")]
            ),
            (
                Some("ZZ:ACME:000760002".to_string()),
                vec![crate::util::order_file("ACME", "PO-B")]
            ),
        ]),
        "each order delivered once, by its interchange"
    );
    let every_file = || {
        let mut all = Vec::new();
        for dir in [gate.out(), gate.outbox(), gate.archive()] {
            all.extend(crate::watch::files_under(&dir));
        }
        all.sort();
        all
    };
    let old = std::time::SystemTime::now() - Duration::from_secs(3 * 86_400);
    for f in every_file() {
        fs::File::options()
            .write(true)
            .open(&f)
            .and_then(|h| h.set_modified(old))
            .unwrap();
    }
    let prune_files = |apply: bool| {
        let mut c = crate::util::x12gate(gate.dir());
        c.args(["prune", "--files"]);
        if apply {
            c.arg("--apply");
        }
        let out = c.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(prune_files(false), "", "every key is still in the registry");
    crate::util::age(&gate.dir().join("x12gate.db"), &[("ZZ:ACME:000760001", 40)]);
    // A resent 997 of the same key, written today: past the key's window, not its file's
    // retention, so it stays.
    let fresh = gate.outbox().join("ZZ_ACME_000760001.fresh.997.x12");
    fs::write(&fresh, b"ISA*...").unwrap();
    let pruned = crate::util::x12gate(gate.dir())
        .arg("prune")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&pruned.stdout),
        "ZZ:ACME:000760001\n"
    );
    let before: Vec<_> = every_file().into_iter().filter(|p| *p != fresh).collect();
    let listed = prune_files(false);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    assert!(
        lines.iter().all(|l| l.starts_with("would delete ")),
        "{listed}"
    );
    assert!(
        listed.contains(&doc_a.display().to_string())
            && listed.contains("ZZ_ACME_000760001.997.x12")
            && listed.contains("/a.x12"),
        "{listed}"
    );
    assert_eq!(
        every_file().len(),
        before.len() + 1,
        "a dry run deleted something"
    );
    let applied = prune_files(true);
    assert_eq!(applied.lines().count(), 3, "{applied}");
    let after: Vec<_> = every_file().into_iter().filter(|p| *p != fresh).collect();
    assert_eq!(after.len(), before.len() - 3);
    assert!(
        after
            .iter()
            .all(|p| !p.display().to_string().contains("760001")
                && !p.ends_with("a.x12")
                && *p != doc_a),
        "{after:?}"
    );
    assert!(after.iter().any(|p| p.ends_with("b.x12")), "{after:?}");
    assert!(after.contains(&doc_b), "{after:?}");
    assert!(
        fresh.exists(),
        "a file younger than its retention was deleted"
    );
}

/// The shipped systemd unit reads its secrets from an environment file, and `systemd-analyze
/// verify` accepts it (where systemd is installed: a container without it skips the check,
/// saying so), pointed at the binary under test.
#[test]
fn the_systemd_unit_takes_its_secrets_from_a_file_and_verifies() {
    let unit = fs::read_to_string(crate::util::root().join("contrib/x12gate.service")).unwrap();
    assert!(
        unit.contains("\nEnvironmentFile=-/etc/x12gate/env\n"),
        "{unit}"
    );
    let operations = fs::read_to_string(crate::util::root().join("docs/operations.md")).unwrap();
    for secret in [
        "ERP_TOKEN",
        "PGPASSWORD",
        "X12GATE_UI_TOKEN",
        "X12GATE_API_TOKEN",
    ] {
        assert!(unit.contains(secret), "the unit names {secret}");
        assert!(
            operations.contains(secret),
            "the install steps name {secret}"
        );
    }
    let Ok(analyze) = which("systemd-analyze") else {
        eprintln!("systemd-analyze is not installed: the unit is not verified here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x12gate.service");
    fs::write(
        &path,
        unit.replace("/usr/local/bin/x12gate", env!("CARGO_BIN_EXE_x12gate")),
    )
    .unwrap();
    let out = std::process::Command::new(analyze)
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn which(program: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .ok_or(())
}
