//! Several gateway nodes on one PostgreSQL registry (the process-level claims, crashes and
//! concurrency on PostgreSQL are in `process`, beside their SQLite twins).

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::util::{wait_progressing, STALL};
use crate::watch::{check_end_state, corpus, drop_files, Gate, Run, Settings};

/// Three watcher nodes (each its own process and work folder) share one inbox and one
/// PostgreSQL registry; 1,500 files with resends and reused numbers arrive while they run,
/// and one node is SIGKILLed mid-run. The other two finish its work once its lease has run
/// out (nodes on other hosts cannot see whether a process lives: the lease decides): every
/// file placed once, every interchange accepted once, no acknowledgment doubled.
#[test]
fn three_nodes_share_one_inbox_and_one_registry_and_survive_a_kill() {
    let Some(url) = crate::pg_server::database() else {
        return;
    };
    let settings = Settings {
        lease_seconds: 5,
        ..Settings::default()
    };
    let gate = Gate::with_database(settings, Some(url));
    let files = corpus(1500, 400_000, false);
    let mut nodes: Vec<_> = (0..3).map(|_| gate.start(&[])).collect();
    let started = Instant::now();
    let (first, rest) = files.split_at(600);
    let drop = |some: &[crate::watch::Planned]| {
        drop_files(
            &gate.inbox(),
            some,
            Duration::from_millis(1),
            Duration::from_millis(settings.settle_ms + 200),
            Duration::ZERO,
        )
    };
    drop(first);
    wait_progressing(
        STALL,
        "200 files placed before the kill",
        || gate.moved().count() >= 200,
        || gate.moved().count(),
        || gate.state(),
    );
    nodes[0].signal("KILL");
    nodes[0].wait(STALL);
    let at_kill = gate.moved().count();
    drop(rest);
    // After the kill nothing moves until the dead node's 5 s leases run out, well within
    // the stall limit.
    wait_progressing(
        STALL,
        "every file archived or rejected",
        || {
            gate.moved().count() >= files.len()
                && gate.inbox_names().is_empty()
                && gate.leftovers().is_empty()
        },
        || (gate.moved().count(), gate.inbox_names().len()),
        || gate.state(),
    );
    eprintln!(
        "three nodes, one killed after {at_kill} files: {:?}; {}",
        started.elapsed(),
        gate.state()
    );
    for n in nodes.iter_mut().skip(1) {
        n.signal("TERM");
        let status = n.wait(STALL);
        assert_eq!(status.code(), Some(0), "{}", n.log());
    }
    check_end_state(&gate, &files, Run::Killed);
}

/// What the operator reads, through every command and page that reads the registry, after
/// the same work on each backend: the example configuration's fixtures processed twice (the
/// second time all resends). Times, the installation id and the gateway's folder differ
/// between the two runs and are masked; nothing else may.
#[test]
fn every_command_and_page_reads_the_same_on_both_backends() {
    let Some(url) = crate::pg_server::database() else {
        return;
    };
    let example = fs::read_to_string(crate::util::root().join("partners.toml")).unwrap();
    assert!(example.contains("database = \"data/x12gate.db\""));
    let mut fixtures: Vec<PathBuf> = fs::read_dir(crate::util::root().join("fixtures"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "x12"))
        .collect();
    fixtures.sort();
    let read = |database: &str| -> (tempfile::TempDir, BTreeMap<String, String>) {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("partners.toml"),
            example.replace(
                "database = \"data/x12gate.db\"",
                &format!("database = \"{database}\""),
            ),
        )
        .unwrap();
        let root = dir.path().display().to_string();
        let masked = |text: &[u8]| mask(&String::from_utf8_lossy(text), &root);
        let mut seen = BTreeMap::new();
        for round in ["first", "again"] {
            let out = crate::util::x12gate(dir.path())
                .args(["process", "--json"])
                .args(&fixtures)
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(if round == "first" { 3 } else { 0 }),
                "{database}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            seen.insert(format!("process ({round})"), masked(&out.stdout));
        }
        let commands: &[&[&str]] = &[
            &["history", "--json"],
            &["stats", "--json"],
            &["claims"],
            &["counter", "show", "ZZ:ACME"],
            &["documents"],
            &["deliveries"],
            &["show", "ZZ:ACME:000000101"],
            &["show", "ZZ:GLOBEX:000000501"],
            &["metrics"],
            &["prune"],
        ];
        for args in commands {
            let out = crate::util::x12gate(dir.path())
                .args(*args)
                .output()
                .unwrap();
            let mut text = format!("exit {:?}\n{}", out.status.code(), masked(&out.stdout));
            if args[0] == "metrics" {
                // The encoder's order of label sets is a hash map's.
                let mut lines: Vec<&str> = text.lines().collect();
                lines.sort_unstable();
                text = lines.join("\n");
            }
            seen.insert(args.join(" "), text);
        }
        let served = crate::web::Served::start(dir.path(), &[], None);
        for path in [
            "/",
            "/search?q=PO-4471",
            "/search?q=ACME",
            "/search?q=101&partner=ZZ%3AACME",
            "/interchange/ZZ%3AACME%3A000000101",
            "/rejected",
            "/held",
            "/dead",
            "/search?q=101&set=850",
            "/search?q=so-1002",
            "/deliveries?partner=ACME",
            "/documents?set=850&since=2000-01-01",
            "/document/PO-4471",
        ] {
            let (status, _, body) = crate::web::request("GET", &served.url(path), &[], None);
            // Rows of equal times may come in either order: compared as a set of lines.
            let mut lines: Vec<String> = mask(&body, &root).lines().map(str::to_string).collect();
            lines.sort_unstable();
            seen.insert(
                format!("GET {path}"),
                format!("{status}\n{}", lines.join("\n")),
            );
        }
        (dir, seen)
    };
    let (_s, on_sqlite) = read("data/x12gate.db");
    let (_p, on_postgres) = read(&url);
    assert_eq!(on_sqlite.len(), on_postgres.len());
    // The comparison is of something: every decision, twice, and the pages found it.
    assert!(on_sqlite["history --json"].lines().count() > 150);
    assert!(on_sqlite["GET /search?q=PO-4471"].contains("ZZ:ACME:000000101"));
    assert!(on_sqlite["show ZZ:ACME:000000101"].contains("000000101"));
    for (what, sqlite) in &on_sqlite {
        let postgres = on_postgres.get(what).map_or("", String::as_str);
        let only = |a: &str, b: &str| -> Vec<String> {
            let b: std::collections::BTreeSet<&str> = b.lines().collect();
            a.lines()
                .filter(|l| !b.contains(l))
                .map(str::to_string)
                .collect()
        };
        assert!(
            sqlite == postgres,
            "{what} differs: only on SQLite {:#?}, only on PostgreSQL {:#?}",
            only(sqlite, postgres),
            only(postgres, sqlite)
        );
    }
}

/// `text` with the gateway's folder and what differs from run to run masked: timestamps
/// (10+ digits), years, the parts of dates and times, ages ("3 s ago") and hex ids.
fn mask(text: &str, root: &str) -> String {
    let text = text.replace(root, "ROOT");
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let start = i;
        while i < chars.len() && chars[i].is_ascii_alphanumeric() {
            i += 1;
        }
        if start == i {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let word: String = chars[start..i].iter().collect();
        let before = start.checked_sub(1).and_then(|b| chars.get(b)).copied();
        let after = chars.get(i).copied();
        let rest: String = chars[i..chars.len().min(i + 9)].iter().collect();
        let digits = word.chars().all(|c| c.is_ascii_digit());
        let clock = digits
            && word.len() <= 3
            && [before, after]
                .iter()
                .any(|c| matches!(c, Some(':' | '-' | '.')));
        // 2026-12-02T01:47:10: the day and the hour are one word.
        let day_hour = word.split_once('T').is_some_and(|(d, h)| {
            [d, h]
                .iter()
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        });
        let age = digits
            && [" s ago", " min ago", " h ago", " days ago"]
                .iter()
                .any(|a| rest.starts_with(a));
        let hex_id = word.len() == 16 && word.chars().all(|c| c.is_ascii_hexdigit());
        if hex_id || clock || day_hour || age || (digits && (word.len() >= 10 || word.len() == 4)) {
            out.push('#');
        } else {
            out.push_str(&word);
        }
    }
    out
}

/// A server that takes TLS connections only, with a certificate of a CA of the test's own:
/// `sslmode=require` and `database_ca` naming that CA connect (over TLS, since the server
/// refuses anything else); without `database_ca` the certificate is refused; with
/// `sslmode=disable` the server refuses the plain connection. Each is `x12gate init` on a
/// configuration of its own.
#[test]
fn tls_connects_with_the_configured_ca_and_verifies_the_certificate() {
    if crate::pg_server::server().is_none() {
        return;
    }
    let openssl = |dir: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .map_err(|e| format!("openssl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let certs = tempfile::tempdir().unwrap();
    let c = certs.path();
    // A CA, and the server's certificate for 127.0.0.1 signed by it.
    openssl(
        c,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=x12gate test CA",
        ],
    )
    .unwrap();
    openssl(
        c,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    )
    .unwrap();
    fs::write(c.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        c,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    )
    .unwrap();
    let server = crate::pg_server::start_with(
        false,
        "-c ssl=on -c ssl_cert_file=server.pem -c ssl_key_file=server.key -c hba_file={data}/tls_only.conf",
        |dir| {
            let data = dir.join("data");
            for f in ["server.pem", "server.key"] {
                fs::copy(c.join(f), data.join(f)).map_err(|e| e.to_string())?;
            }
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(data.join("server.key"), fs::Permissions::from_mode(0o600))
                .map_err(|e| e.to_string())?;
            fs::write(
                data.join("tls_only.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
            )
            .map_err(|e| e.to_string())
        },
    )
    .expect("a TLS-only test server");
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let init = |name: &str, query: &str, ca: Option<&std::path::Path>| {
        let ca_line = ca.map_or(String::new(), |p| {
            format!("database_ca = \"{}\"\n", p.display())
        });
        let dir = gateway_on(
            &format!("postgres://x12gate@127.0.0.1:{port}/postgres?{query}"),
            &ca_line,
        );
        let out = crate::util::x12gate(dir.path())
            .arg("init")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("{name}: {:?} {text}", out.status.code());
        (out.status.code(), text)
    };
    let (code, text) = init("with the CA", "sslmode=require", Some(&c.join("ca.pem")));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("created registry"), "{text}");
    let (code, text) = init("without the CA", "sslmode=require", None);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.to_lowercase().contains("certificate"), "{text}");
    let (code, text) = init("plain", "sslmode=disable", None);
    assert_ne!(code, Some(0), "{text}");
    assert!(
        text.contains("pg_hba.conf") || text.contains("no encryption"),
        "{text}"
    );
}

fn postgres_at(url: &str) -> x12gate::registry::Database {
    x12gate::registry::Database::Postgres(x12gate::registry::Postgres {
        url: url.to_string(),
        password_env: None,
        ca_file: None,
    })
}

const WHO: x12gate::registry::Identity<'static> = x12gate::registry::Identity {
    qualifier: "ZZ",
    id: "X12GATE",
};

/// Ends every session on the database of `url` but the caller's, as a server restart or
/// a failover does.
fn end_sessions(url: &str) {
    let server = crate::pg_server::server().expect("the test server");
    let db = url.rsplit('/').next().unwrap_or_default().to_string();
    let mut admin = crate::pg_server::admin(server);
    let ended: Vec<i32> = admin
        .query(
            // In the list, not the filter: evaluated only for the rows the filter keeps.
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&db],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!ended.is_empty(), "no session to end");
    // The server ends them asynchronously: wait until none of them is left (each has sent
    // its last words to its client by then), not for a guessed time.
    let started = Instant::now();
    loop {
        let left: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)",
                &[&ended],
            )
            .unwrap()
            .get(0);
        if left == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{left} session(s) still there"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A connection the server dropped is opened again at the next statement: the registry
/// goes on after a restart or failover, and a read-only one stays read-only.
#[test]
fn a_dropped_connection_is_opened_again_and_a_read_only_one_stays_read_only() {
    use x12gate::registry::{Counter, Registry};
    let Some(url) = crate::pg_server::database() else {
        return;
    };
    let db = postgres_at(&url);
    let registry = Registry::create(&db, WHO).unwrap();
    assert_eq!(
        registry
            .next_control_number("ZZ:ACME", Counter::Interchange)
            .unwrap(),
        1
    );
    let read_only = Registry::open_read_only(&db).unwrap().expect("a registry");
    let refused = read_only.set_control_number("ZZ:ACME", Counter::Interchange, 5);
    assert!(format!("{refused:?}").contains("read-only"), "{refused:?}");
    end_sessions(&url);
    // Once the server has ended them, the statement after is sent on a new connection: a
    // write (taken once, not twice), a read, and a transaction.
    assert_eq!(
        registry
            .next_control_number("ZZ:ACME", Counter::Interchange)
            .unwrap(),
        2
    );
    assert_eq!(
        read_only
            .current_control_number("ZZ:ACME", Counter::Interchange)
            .unwrap(),
        Some(2)
    );
    end_sessions(&url);
    let mut registry = registry;
    assert_eq!(
        registry
            .batch(|b| b.next_control_number_in_batch("ZZ:ACME", Counter::Interchange))
            .unwrap(),
        3
    );
    assert_eq!(
        read_only.history(&Default::default()).unwrap().len(),
        1,
        "the init event, read on a new connection"
    );
    let refused = read_only.set_control_number("ZZ:ACME", Counter::Interchange, 9);
    assert!(
        format!("{refused:?}").contains("read-only"),
        "after reconnecting: {refused:?}"
    );
}

/// A transaction whose session the server ends in its middle (before its COMMIT was sent) is
/// rolled back by the server whole, and `batch_again` runs it once more on a new connection:
/// its work is done once (the counter moved by one), not lost and not doubled.
#[test]
fn a_transaction_cut_before_its_commit_runs_again_on_a_new_connection() {
    use x12gate::registry::{Counter, Registry};
    let Some(url) = crate::pg_server::database() else {
        return;
    };
    let mut registry = Registry::create(&postgres_at(&url), WHO).unwrap();
    let runs = std::cell::Cell::new(0);
    let n = registry
        .batch_again(|b| {
            runs.set(runs.get() + 1);
            let n = b.next_control_number_in_batch("ZZ:ACME", Counter::Interchange)?;
            if runs.get() == 1 {
                end_sessions(&url);
                // Sent on the ended session: it fails, and the transaction with it.
                b.next_control_number_in_batch("ZZ:ACME", Counter::Group)?;
            }
            Ok::<_, x12gate::registry::RegistryError>(n)
        })
        .unwrap();
    assert_eq!((runs.get(), n), (2, 1));
    assert_eq!(
        registry
            .current_control_number("ZZ:ACME", Counter::Interchange)
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        registry
            .current_control_number("ZZ:ACME", Counter::Group)
            .unwrap(),
        None,
        "the cut transaction left nothing"
    );
}

/// A session that holds the writers' lock and stops (a node that lost its network in the
/// middle of a transaction) stops the other writers only for the lock timeout: they fail
/// as SQLite's writers fail after the busy timeout, and work again once it is gone; a node
/// started meanwhile starts. (The URL's `options` shorten the timeout for the test.)
#[test]
fn a_writer_waits_for_a_stuck_lock_holder_only_for_the_lock_timeout() {
    use x12gate::registry::{Counter, Registry};
    let Some(url) = crate::pg_server::database() else {
        return;
    };
    let mut registry = Registry::create(
        &postgres_at(&format!("{url}?options=-c%20lock_timeout%3D500")),
        WHO,
    )
    .unwrap();
    let mut holder = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({})",
            x12gate::registry::WRITER_LOCK
        ))
        .unwrap();
    let started = Instant::now();
    let stuck = registry.batch(|b| b.next_control_number_in_batch("ZZ:ACME", Counter::Group));
    let waited = started.elapsed();
    assert!(format!("{stuck:?}").contains("lock"), "{stuck:?}");
    assert!(waited < Duration::from_secs(20), "waited {waited:?}");
    // A node started meanwhile opens the registry (it only reads it), and its work waits
    // for the lock as a running node's does.
    let started = Registry::open(
        &postgres_at(&format!("{url}?options=-c%20lock_timeout%3D500")),
        WHO,
    );
    assert!(started.is_ok(), "{:?}", started.err());
    holder.batch_execute("ROLLBACK").unwrap();
    assert_eq!(
        registry
            .batch(|b| b.next_control_number_in_batch("ZZ:ACME", Counter::Group))
            .unwrap(),
        1
    );
}

/// A PostgreSQL server that is down is an operational failure (exit 1, for a supervisor to
/// retry), named with its address and without the password; not a mistake in the file
/// (exit 2).
#[test]
fn an_unreachable_server_is_exit_1_and_names_the_server_not_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let dir = gateway_on(
        &format!("postgres://x12gate:s3cret@127.0.0.1:{port}/x12gate?connect_timeout=5"),
        "",
    );
    let out = crate::util::x12gate(dir.path())
        .arg("process")
        .arg(crate::util::fixture("850-004010.x12"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(err.contains("cannot be reached"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    let check = crate::util::x12gate(dir.path())
        .arg("check")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{said}");
    assert!(
        said.contains("Connection refused") && !said.contains("s3cret"),
        "{said}"
    );
}

/// A wrong database, a URL without a host or an unsupported `sslmode` is a mistake in the
/// configuration (exit 2), not an outage to retry.
#[test]
fn a_wrong_database_or_url_is_exit_2() {
    let Some(server) = crate::pg_server::server() else {
        return;
    };
    for (database, says) in [
        (
            format!("{}/no_such_database", server.base),
            "does not exist",
        ),
        ("postgres://".to_string(), "names no host"),
        (
            format!("{}/postgres?sslmode=verify-full", server.base),
            "sslmode=require verifies",
        ),
    ] {
        let dir = gateway_on(&database, "");
        let fixture = crate::util::fixture("850-004010.x12");
        for args in [vec!["process", fixture.to_str().unwrap()], vec!["check"]] {
            let command = args[0];
            let out = crate::util::x12gate(dir.path())
                .args(&args)
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command} on {database}: {text}"
            );
            assert!(text.contains(says), "{command} on {database}: {text}");
        }
    }
}

/// A gateway folder whose partners.toml has one partner and the registry `database`, with
/// `extra` lines in `[gateway]`.
fn gateway_on(database: &str, extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("partners.toml"),
        format!(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\ndatabase = \"{database}\"\n{extra}\n[[partner]]\nname = \"Acme\"\nid_qualifier = \"ZZ\"\nid = \"ACME\"\n"
        ),
    )
    .unwrap();
    dir
}

/// The sessions on the database of `url` but the caller's: their process ids.
fn sessions(url: &str) -> std::collections::BTreeSet<i32> {
    let server = crate::pg_server::server().expect("the test server");
    let db = url.rsplit('/').next().unwrap_or_default().to_string();
    crate::pg_server::admin(server)
        .query(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&db],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// `serve` opens its read-only connections once and its pages and `/metrics` share them:
/// scrape after scrape and page after page run on the same server sessions, instead of a
/// connection (a runtime, a TCP connection, a TLS handshake) each.
#[test]
fn the_pages_and_the_metrics_share_the_connections_opened_once() {
    use x12gate::registry::Registry;
    let Some(url) = crate::pg_server::database() else {
        return;
    };
    let gate =
        crate::watch::Gate::with_database(crate::watch::Settings::default(), Some(url.clone()));
    drop(Registry::create(&gate.database(), WHO).unwrap());
    let served = crate::web::Served::start(gate.dir(), &[], None);
    let get = |path: &str| {
        let (status, _, body) = crate::web::request("GET", &served.url(path), &[], None);
        assert_eq!(status, 200, "{path}: {body}");
    };
    get("/metrics");
    let first = sessions(&url);
    assert!(!first.is_empty(), "the scrape left no session open");
    for _ in 0..5 {
        for path in [
            "/metrics",
            "/",
            "/rejected",
            "/held",
            "/dead",
            "/search?q=1",
        ] {
            get(path);
        }
    }
    assert_eq!(
        sessions(&url),
        first,
        "a scrape or page view opened a connection of its own"
    );
}
