//! Operator mistakes refused before anything is claimed (SPEC 5 and 6): a typo'd or lost
//! registry, another gateway's registry, folders that overlap or are files; replays into the
//! outbox of the configuration in force; `init`, `check` and `claims`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::util::{fixture, x12gate};

/// A gateway folder with `partners.toml`; `gateway_extra` lines replace the defaults.
fn gateway(dir: &Path, gateway_extra: &str) -> PathBuf {
    let text = format!(
        r#"[gateway]
id_qualifier = "ZZ"
id = "X12GATE"
{gateway_extra}

[[partner]]
name = "Acme Retail"
id_qualifier = "ZZ"
id = "ACME"
ack = "997"
"#
    );
    let config = dir.join("partners.toml");
    fs::write(&config, text).unwrap();
    config
}

fn run(dir: &Path, args: &[&str]) -> Output {
    x12gate(dir)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("FAILPOINTS")
        .output()
        .expect("run x12gate")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The fixture 850 as interchange `n` of Acme.
fn po(n: u32) -> String {
    let t = fs::read_to_string(fixture("850-004010.x12")).unwrap();
    t.replace("000000101", &format!("{n:09}"))
        .replace("*101*X*004010~", &format!("*{n}*X*004010~"))
        .replace("GE*1*101~", &format!("GE*1*{n}~"))
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    fs::write(&p, body).unwrap();
    p.display().to_string()
}

/// ISA13 of every acknowledgment in `outbox`.
fn sent_numbers(outbox: &Path) -> Vec<u32> {
    let mut n: Vec<u32> = fs::read_dir(outbox)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().is_file())
                .filter_map(|e| {
                    let t = fs::read_to_string(e.path()).ok()?;
                    t.split('*').nth(13)?.parse().ok()
                })
                .collect()
        })
        .unwrap_or_default();
    n.sort();
    n
}

/// A typo in `database` of a gateway with a history: refused (exit 2, the path named),
/// nothing claimed, no folder created; the same for `history`, `stats` and `claims`.
#[test]
fn a_typo_in_the_database_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "");
    let file = write(d, "po.x12", &po(101));
    assert_eq!(run(d, &["process", &file]).status.code(), Some(0));
    let typo = d.join("nonexistent/deep/x12gate.db");
    gateway(d, &format!("database = \"{}\"", typo.display()));
    for args in [
        vec!["process", file.as_str()],
        vec!["watch", "--once"],
        vec!["history"],
        vec!["stats"],
        vec!["claims"],
    ] {
        let o = run(d, &args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(&typo.display().to_string()), "{args:?}: {t}");
    }
    assert!(!d.join("nonexistent").exists(), "a folder was created");
    let o = run(d, &["check"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("line 4, `gateway.database`") && t.contains("history"),
        "{t}"
    );
}

/// A deleted, then an emptied registry in a gateway whose outbox holds acknowledgments:
/// refused. `init` rebuilds it with the counters above the numbers already sent, so the next
/// acknowledgment never reuses one.
#[test]
fn a_lost_registry_is_refused_and_init_never_reuses_a_number() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "");
    let files: Vec<String> = (0..3)
        .map(|i| write(d, &format!("po{i}.x12"), &po(201 + i)))
        .collect();
    let mut args = vec!["process"];
    args.extend(files.iter().map(String::as_str));
    assert_eq!(run(d, &args).status.code(), Some(0));
    let sent = sent_numbers(&d.join("data/outbox"));
    assert_eq!(sent, [1, 2, 3]);
    let db = d.join("data/x12gate.db");
    for lose in ["delete", "empty"] {
        for suffix in ["", "-wal", "-shm"] {
            let _ = fs::remove_file(format!("{}{suffix}", db.display()));
        }
        if lose == "empty" {
            fs::write(&db, b"").unwrap();
        }
        let o = run(d, &["process", &write(d, "new.x12", &po(300))]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{lose}: {t}");
        assert!(t.contains("outbox holds 3"), "{lose}: {t}");
        assert_eq!(sent_numbers(&d.join("data/outbox")), [1, 2, 3], "{lose}");
    }
    fs::remove_file(&db).unwrap();
    let o = run(d, &["init"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("ZZ:ACME: next ISA13 000000004"), "{t}");
    let again = run(d, &["init"]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    let o = run(d, &["process", &write(d, "new.x12", &po(300))]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(sent_numbers(&d.join("data/outbox")), [1, 2, 3, 4]);
}

/// `init --isa13-from` sets where our numbers start, above what the outbox shows.
#[test]
fn init_starts_the_counters_where_it_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "");
    let o = run(d, &["init", "--isa13-from", "500", "--gs06-from", "70"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for sub in ["inbox", "outbox", "out", "archive", "rejected", "work"] {
        assert!(d.join("data").join(sub).is_dir(), "{sub}");
    }
    let o = run(d, &["process", &write(d, "po.x12", &po(101))]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(sent_numbers(&d.join("data/outbox")), [500]);
    let ack = fs::read_to_string(d.join("data/outbox/ZZ_ACME_000000101.997.x12")).unwrap();
    assert!(
        ack.contains("GS*FA*X12GATE*ACME*") && ack.contains("*70*X*004010~"),
        "{ack}"
    );
}

/// Another gateway's registry (the configuration's `[gateway] id` changed): refused.
#[test]
fn another_gateways_registry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "");
    let file = write(d, "po.x12", &po(101));
    assert_eq!(run(d, &["process", &file]).status.code(), Some(0));
    let config = fs::read_to_string(d.join("partners.toml")).unwrap();
    fs::write(
        d.join("partners.toml"),
        config.replace("id = \"X12GATE\"", "id = \"OTHERGATE\""),
    )
    .unwrap();
    let o = run(d, &["process", &file]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("belongs to gateway ZZ:X12GATE") && t.contains("ZZ:OTHERGATE"),
        "{t}"
    );
}

/// A gateway copied elsewhere (a restore, a new host) and the old folder removed: a resend
/// is replayed into the outbox of the configuration in force, and the old one is not made
/// again.
#[test]
fn a_moved_gateway_replays_into_its_new_outbox() {
    let root = tempfile::tempdir().unwrap();
    let old = root.path().join("old");
    fs::create_dir_all(&old).unwrap();
    gateway(&old, "");
    let file = write(root.path(), "po.x12", &po(101));
    assert_eq!(run(&old, &["process", &file]).status.code(), Some(0));
    let new = root.path().join("new");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(&old)
        .arg(&new)
        .status()
        .unwrap();
    assert!(copied.success());
    fs::remove_dir_all(&old).unwrap();
    fs::remove_file(new.join("data/outbox/ZZ_ACME_000000101.997.x12")).unwrap();
    let o = run(&new, &["process", "--json", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["disposition"], "duplicate", "{r}");
    let ack = new.join("data/outbox/ZZ_ACME_000000101.997.x12");
    assert_eq!(r["acks"][0], ack.display().to_string(), "{r}");
    assert!(ack.is_file());
    assert!(!old.exists(), "the old gateway folder was made again");
}

/// Folders that overlap, or that are files: refused by `check`, `process` and `watch`
/// before anything is read or moved, naming the key and its line.
#[test]
fn overlapping_folders_are_refused_everywhere() {
    for (setting, key) in [
        ("workers = 0", "gateway.workers"),
        ("inbox = \"\"", "gateway.inbox"),
        ("rejected = \"data/inbox\"", "gateway.inbox"),
        ("outbox = \"data/inbox\"", "gateway.inbox"),
        ("out = \"afile\"", "gateway.out"),
        ("archive = \"data\"", "gateway.archive"),
        ("rejected = \"data/x/../inbox\"", "gateway.inbox"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        gateway(d, setting);
        fs::write(d.join("afile"), b"a regular file").unwrap();
        let file = write(d, "po.x12", &po(101));
        fs::create_dir_all(d.join("data/inbox")).unwrap();
        let waiting = d.join("data/inbox/waiting.x12");
        fs::write(&waiting, po(102)).unwrap();
        for args in [
            vec!["check"],
            vec!["process", file.as_str()],
            vec!["watch", "--once"],
        ] {
            let o = run(d, &args);
            let t = text(&o);
            assert_eq!(o.status.code(), Some(2), "{setting} {args:?}: {t}");
            assert!(t.contains(&format!("`{key}`")), "{setting} {args:?}: {t}");
        }
        assert!(waiting.is_file(), "{setting}: the inbox file was moved");
        assert!(d.join("partners.toml").is_file());
        assert!(
            !d.join("data/x12gate.db").exists(),
            "{setting}: a registry was made"
        );
    }
}

/// A lease too long to mean anything (it once wrapped negative, and a live claim was taken
/// over within a second) is refused by `check` and by `process`, naming the key and the limit.
#[test]
fn a_huge_lease_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "lease_seconds = 9223372036854775");
    let file = write(d, "po.x12", &po(101));
    for args in [vec!["check"], vec!["process", file.as_str()]] {
        let o = run(d, &args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(
            t.contains("line 4, `gateway.lease_seconds`") && t.contains("at most 86400 seconds"),
            "{args:?}: {t}"
        );
    }
    assert!(!d.join("data/outbox").exists(), "process went ahead");
    gateway(d, "lease_seconds = 86400");
    let o = run(d, &["check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// `check` on a sound configuration: exit 0, and nothing created.
#[test]
fn check_changes_nothing_on_a_sound_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "");
    let o = run(d, &["check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("no problems"));
    let left: Vec<_> = fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, ["partners.toml"], "check created something");
}

/// `claims` lists an unfinished claim with its holder; `claims release` frees a dead
/// owner's claim (recorded in the history) and refuses a live one's.
#[cfg(feature = "failpoints")]
#[test]
fn claims_lists_and_releases_unfinished_claims() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "lease_seconds = 300");
    let file = write(d, "po.x12", &po(101));
    let crashed = x12gate(d)
        .args(["process", &file])
        .env("FAILPOINTS", "claim.after=return")
        .output()
        .unwrap();
    assert!(!crashed.status.success());
    let o = run(d, &["claims", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let c: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["key"], "ZZ:ACME:000000101");
    assert_eq!(c["state"], "in_flight");
    assert!(
        c["holder"].as_str().is_some_and(|h| h.ends_with("(dead)")),
        "{c}"
    );
    let o = run(d, &["claims", "release", "ZZ:ACME:101"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(d, &["claims", "--json"]);
    let c: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["state"], "failed", "{c}");
    let history = run(d, &["history", "--json"]);
    assert!(String::from_utf8_lossy(&history.stdout).contains("\"event\":\"released\""));

    // A live holder: refused.
    let held = write(d, "held.x12", &po(102));
    let mut holder = std::process::Command::new(assert_cmd::cargo::cargo_bin("x12gate"))
        .current_dir(d)
        .args(["process", &held])
        .env("FAILPOINTS", "claim.after=sleep(30000)")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let o = run(d, &["claims"]);
        if String::from_utf8_lossy(&o.stdout).contains("ZZ:ACME:000000102") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no claim of the holder"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = run(d, &["claims", "release", "ZZ:ACME:000000102"]);
    let t = text(&o);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("(alive)") && t.contains("not released"), "{t}");
}

/// An interchange from a sender that was not configured is rejected; once the partner is
/// added, `reprocess` processes it again from its stored file as attempt 2: accepted, a 997
/// sent, and the history keeps the rejection. An accepted interchange is refused without
/// `--force`, and reprocessed with it, saying plainly what that may do.
#[test]
fn reprocess_after_adding_the_partner_and_force_on_an_accepted_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "");
    let newco = po(101).replace("*ZZ*ACME           *", "*ZZ*NEWCO          *");
    let file = write(d, "newco.x12", &newco);
    let o = run(d, &["process", &file]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let config = fs::read_to_string(d.join("partners.toml")).unwrap();
    fs::write(
        d.join("partners.toml"),
        format!("{config}\n[[partner]]\nname = \"Newco\"\nid_qualifier = \"ZZ\"\nid = \"NEWCO\"\n"),
    )
    .unwrap();
    // A plain resend is still the rejection replayed...
    let o = run(d, &["process", "--json", &file]);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["replayed"], "rejected", "{r}");
    // ... reprocess is the way out.
    let o = run(d, &["reprocess", "--json", "NEWCO:101"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["disposition"], "accepted", "{r}");
    assert_eq!(r["attempt"], 2, "{r}");
    let ack = d.join("data/outbox/ZZ_NEWCO_000000101.997.x12");
    assert!(fs::read_to_string(&ack).unwrap().contains("AK5*A~"));
    let history = run(d, &["history", "--json"]);
    let events: Vec<String> = String::from_utf8_lossy(&history.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["key"] == "ZZ:NEWCO:000000101")
        .map(|e| e["event"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(events, ["rejected", "duplicate", "reopened", "accepted"]);

    let o = run(d, &["reprocess", "ZZ:NEWCO:000000101"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("it was accepted") && t.contains("--force"),
        "{t}"
    );
    let o = run(d, &["reprocess", "--force", "--json", "ZZ:NEWCO:000000101"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("the ERP may receive it twice"), "{t}");
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (r["disposition"].as_str(), r["attempt"].as_u64()),
        (Some("accepted"), Some(3))
    );
    // Fresh numbers for the fresh answer, in a file of its own: the first answer's file
    // is what the partner got first, and stays as it was.
    let again = r["acks"][0].as_str().unwrap_or_default().to_string();
    assert!(
        again.ends_with("ZZ_NEWCO_000000101.000000002.997.x12"),
        "{r}"
    );
    let again = fs::read_to_string(&again).unwrap();
    assert!(again.contains("*000000002*0*P*"), "{again}");
    let first = fs::read_to_string(&ack).unwrap();
    assert!(first.contains("*000000001*0*P*"), "{first}");
}

/// `show` on an accepted, a rejected and a conflicting key: the state and outcome, the
/// acknowledgments with our numbers, where the file is, and the history.
#[test]
fn show_tells_an_interchange_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "");
    let good = write(d, "good.x12", &po(101));
    let bad = write(d, "bad.x12", &po(102).replace("SE*13*0001~", "SE*12*0001~"));
    let reused = write(d, "reused.x12", &po(101).replace("PO1*1*120", "PO1*1*125"));
    run(d, &["process", &good, &bad]);
    run(d, &["process", &reused]);
    let show = |key: &str| -> Value {
        let o = run(d, &["show", "--json", key]);
        assert_eq!(o.status.code(), Some(0), "{key}: {}", text(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let a = show("ZZ:ACME:101");
    assert_eq!(a["record"]["disposition"], "accepted", "{a}");
    assert_eq!(a["acks"][0]["isa13"], "000000001", "{a}");
    assert_eq!(a["acks"][0]["gs06"][0], "1", "{a}");
    assert!(a["acks"][0]["text"].as_str().unwrap().contains("AK5*A~"));
    assert_eq!(a["file_now"], good.as_str());
    let events: Vec<&str> = a["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert_eq!(events, ["accepted", "conflict"], "{a}");
    // The conflict's TA1 025, with our number.
    let ta1 = &a["conflict_acks"][0];
    assert!(ta1["text"].as_str().unwrap().contains("*R*025~"), "{a}");
    assert!(ta1["isa13"].is_string(), "{a}");
    let r = show("ACME:102");
    assert_eq!(r["record"]["disposition"], "rejected", "{r}");
    assert!(
        r["findings"][0]
            .as_str()
            .is_some_and(|f| f.contains("se-segment-count")),
        "{r}"
    );
    assert!(
        r["acks"][0]["text"].as_str().unwrap().contains("AK5*R*4~"),
        "{r}"
    );
    let missing = run(d, &["show", "ZZ:ACME:999"]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    let plain = run(d, &["show", "ZZ:ACME:101"]);
    let t = String::from_utf8_lossy(&plain.stdout);
    assert!(
        t.contains("ZZ:ACME:000000101  completed  accepted")
            && t.contains("sent 997 ZZ_ACME_000000101.997.x12: our ISA13 000000001, GS06 1"),
        "{t}"
    );
}

/// After the watcher placed a file, `show` says where it is: in the archive.
#[test]
fn show_finds_the_file_the_watcher_placed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "settle_ms = 0");
    fs::create_dir_all(d.join("data/inbox")).unwrap();
    fs::write(d.join("data/inbox/order.x12"), po(101)).unwrap();
    let o = run(d, &["watch", "--once"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(d, &["show", "--json", "ACME:101"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let now = v["file_now"].as_str().unwrap_or_default();
    assert!(
        now.starts_with(&d.join("data/archive").display().to_string())
            && now.ends_with("/order.x12"),
        "{v}"
    );
    assert!(v["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["event"] == "placed"));
}

/// `reprocess` with a copy holding other content under the number is refused before anything
/// changes: the key keeps its outcome and a plain resend still replays it.
#[test]
fn reprocess_of_other_content_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "");
    let bad = write(d, "bad.x12", &po(102).replace("SE*13*0001~", "SE*12*0001~"));
    assert_eq!(run(d, &["process", &bad]).status.code(), Some(3));
    let other = write(d, "other.x12", &po(102).replace("PO1*1*120", "PO1*1*999"));
    let o = run(d, &["reprocess", "ZZ:ACME:102", "--file", &other]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("other content"), "{t}");
    let o = run(d, &["claims"]);
    assert!(
        stdout_of(&o).is_empty(),
        "a claim was left open: {}",
        text(&o)
    );
    let o = run(d, &["process", "--json", &bad]);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (r["disposition"].as_str(), r["replayed"].as_str()),
        (Some("duplicate"), Some("rejected")),
        "{r}"
    );
}

fn stdout_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `init` in a gateway whose archive shows a history but whose outbox was emptied (the
/// transport took the acknowledgments): it cannot know our last numbers, so it asks for them.
#[test]
fn init_asks_for_the_numbers_when_the_outbox_cannot_tell() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "");
    fs::create_dir_all(d.join("data/archive/2026/11/30")).unwrap();
    fs::write(d.join("data/archive/2026/11/30/old.x12"), po(101)).unwrap();
    let o = run(d, &["init"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("--isa13-from"), "{t}");
    assert!(!d.join("data/x12gate.db").exists());
    let o = run(d, &["init", "--isa13-from", "900", "--gs06-from", "900"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// A registry with a damaged page (an index's cell pointers overwritten): `check` finds it
/// with SQLite's page check (exit 2, the finding and what to do); it used to say "no
/// problems". `process` on it prints `accepted` only for what it recorded.
#[test]
fn check_finds_a_damaged_registry_and_process_claims_nothing_it_could_not_record() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "");
    let first: Vec<String> = (300..310)
        .map(|n| write(d, &format!("f{n}.x12"), &po(n)))
        .collect();
    let mut args = vec!["process"];
    args.extend(first.iter().map(String::as_str));
    let o = run(d, &args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(d, &["check"]);
    assert_eq!(o.status.code(), Some(0), "sound: {}", text(&o));

    let db = d.join("data/x12gate.db");
    let (root, page_size): (u64, u64) = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let root = conn
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'events_partner_at'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let size = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        (root, size)
    };
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = fs::OpenOptions::new().write(true).open(&db).unwrap();
        // The leaf's first cell pointers, past the end of the page.
        f.seek(SeekFrom::Start((root - 1) * page_size + 8)).unwrap();
        f.write_all(&[0xff; 8]).unwrap();
    }
    let o = run(d, &["check"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("`gateway.database`")
            && said.contains("is damaged")
            && said.contains("PRAGMA quick_check")
            && said.contains("restore the last `x12gate backup`"),
        "{said}"
    );

    // Whatever `process` meets on it, each `accepted` it prints is recorded, and an exit 1
    // after such lines says that they stand.
    let next = write(d, "g.x12", &po(400));
    let o = run(d, &["process", &next]);
    let printed = String::from_utf8_lossy(&o.stdout).contains("000000400 accepted");
    let recorded: Option<String> = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT state FROM interchanges WHERE key = 'ZZ:ACME:000000400'",
            [],
            |r| r.get(0),
        )
        .ok();
    assert_eq!(
        printed,
        recorded.as_deref() == Some("completed"),
        "{recorded:?} {}",
        text(&o)
    );
    if printed && o.status.code() == Some(1) {
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("decided and recorded"),
            "{}",
            text(&o)
        );
    }
}

/// GS06 of every acknowledgment in `outbox`.
fn sent_groups(outbox: &Path) -> Vec<u32> {
    let mut n: Vec<u32> = fs::read_dir(outbox)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let t = fs::read_to_string(e.path()).ok()?;
            let gs = t.split('~').find(|s| s.trim_start().starts_with("GS*"))?;
            gs.split('*').nth(6)?.parse().ok()
        })
        .collect();
    n.sort();
    n
}

/// Issue 38: a registry restored from a backup beside a newer outbox. `check` exits 2 naming
/// the partner and both numbers; `process` and `watch` refuse to start; `--repair-counters`
/// moves the counters past the outbox (in the history) and goes on above it: no ISA13 or
/// GS06 is ever sent twice to the partner. `counter set` does not move a counter back
/// without `--force`.
#[test]
fn a_registry_restored_beside_a_newer_outbox_never_reuses_a_number() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, "");
    let process = |first: u32, n: u32| {
        let files: Vec<String> = (first..first + n)
            .map(|i| write(d, &format!("po{i}.x12"), &po(i)))
            .collect();
        let mut args = vec!["process"];
        args.extend(files.iter().map(String::as_str));
        let o = run(d, &args);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    };
    process(401, 2);
    let backup = d.join("backup.db");
    let o = run(d, &["backup", &backup.display().to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    process(403, 10);
    let outbox = d.join("data/outbox");
    assert_eq!(sent_numbers(&outbox), (1..=12).collect::<Vec<_>>());

    // The restore: the backup in place of the registry, the outbox as it is.
    let db = d.join("data/x12gate.db");
    for suffix in ["-wal", "-shm"] {
        let _ = fs::remove_file(format!("{}{suffix}", db.display()));
    }
    fs::copy(&backup, &db).unwrap();

    let o = run(d, &["check"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("ISA13 counter for ZZ:ACME is at 000000002")
            && t.contains("holds 000000012")
            && t.contains("GS06 counter for ZZ:ACME is at 000000002")
            && t.contains("--repair-counters"),
        "{t}"
    );
    let next = write(d, "next.x12", &po(501));
    for args in [vec!["process", next.as_str()], vec!["watch", "--once"]] {
        let o = run(d, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("000000012"), "{}", text(&o));
    }
    assert_eq!(sent_numbers(&outbox).len(), 12, "something was sent");

    let o = run(d, &["process", "--repair-counters", &next]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("moved from 000000002 to 000000012"), "{t}");
    assert_eq!(sent_numbers(&outbox), (1..=13).collect::<Vec<_>>());
    assert_eq!(sent_groups(&outbox), (1..=13).collect::<Vec<_>>());
    let o = run(d, &["check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let history = text(&run(d, &["history"]));
    assert!(
        history.contains("counters_repaired") && history.contains("to 000000012"),
        "{history}"
    );

    // Setting a counter back is refused, and allowed with --force.
    let o = run(d, &["counter", "set", "ZZ:ACME", "isa13", "10"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("000000013") && t.contains("--force"), "{t}");
    let o = run(d, &["counter", "set", "ZZ:ACME", "isa13", "20"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(d, &["counter", "set", "ZZ:ACME", "isa13", "10", "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // ...after which the outbox is ahead again, and check says so.
    assert_eq!(run(d, &["check"]).status.code(), Some(2));
    // With the outbox swept away, the registry's own copies of what it sent still say so.
    for f in fs::read_dir(d.join("data/outbox")).unwrap() {
        let f = f.unwrap().path();
        if f.is_file() {
            fs::remove_file(f).unwrap();
        }
    }
    let o = run(d, &["check"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("ISA13 counter for ZZ:ACME is at 000000010")
            && t.contains("the registry's own record of acknowledgments holds 000000013"),
        "{t}"
    );
}
