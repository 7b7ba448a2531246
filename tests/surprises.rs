//! The command line without surprises: each case an operator tripped over, reproduced with the
//! real binary and now answered as expected.

use std::fs;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::util::{fixture, x12gate};

fn gateway(dir: &Path) {
    fs::write(
        dir.join("partners.toml"),
        r#"[gateway]
id_qualifier = "ZZ"
id = "X12GATE"
unknown_partners = "accept"

[[partner]]
name = "Acme Retail"
id_qualifier = "ZZ"
id = "ACME"
"#,
    )
    .unwrap();
}

fn po(n: u32) -> String {
    fs::read_to_string(fixture("850-004010.x12"))
        .unwrap()
        .replace("000000101", &format!("{n:09}"))
        .replace("*101*X*004010~", &format!("*{n}*X*004010~"))
        .replace("GE*1*101~", &format!("GE*1*{n}~"))
        .replace("PO-4471", &format!("PO-{n}"))
}

fn run(dir: &Path, args: &[&str]) -> Output {
    x12gate(dir)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run x12gate")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// More than 20 files with stderr at a terminal (the progress bar shows): the report still
/// goes to stdout, so `process *.x12 > report.txt` keeps it.
#[test]
fn the_report_goes_to_stdout_under_the_progress_bar() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d);
    for i in 0..25 {
        fs::write(d.join(format!("f{i:02}.x12")), po(100 + i)).unwrap();
    }
    let bin = assert_cmd::cargo::cargo_bin("x12gate");
    // `script` gives the command a terminal; stdout is sent to a file inside it.
    let status = std::process::Command::new("script")
        .current_dir(d)
        .args(["-qec"])
        .arg(format!("{} process f*.x12 > report.txt", bin.display()))
        .arg("/dev/null")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run script");
    assert!(status.success(), "{status:?}");
    let report = fs::read_to_string(d.join("report.txt")).unwrap();
    assert_eq!(report.lines().count(), 25, "{report}");
    assert!(
        report
            .lines()
            .all(|l| l.ends_with(" accepted; documents: 1 new")),
        "{report}"
    );
}

/// `--log-format json`: every stderr line is one JSON object, errors included.
#[test]
fn json_logs_stay_json_for_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d);
    for args in [
        vec!["--log-format", "json", "process", "missing.x12"],
        vec!["--log-format", "json", "--config", "nothere.toml", "stats"],
        vec!["--log-format", "json", "history", "--disposition", "bogus"],
        vec!["--log-format", "json", "process"],
    ] {
        let o = run(d, &args);
        assert_ne!(o.status.code(), Some(0), "{args:?}");
        let err = stderr(&o);
        assert!(!err.trim().is_empty(), "{args:?}");
        for line in err.lines() {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {line}"));
            assert!(v["fields"]["message"].is_string(), "{line}");
        }
    }
}

/// `process --json` prints a line for every file argument, a missing one or a folder
/// included; such a mistake exits 2, like `validate`; `-` reads standard input.
#[test]
fn every_file_argument_gets_a_json_line_and_stdin_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d);
    fs::create_dir_all(d.join("folder.x12")).unwrap();
    fs::write(d.join("good.x12"), po(101)).unwrap();
    let o = run(
        d,
        &["process", "--json", "missing.x12", "folder.x12", "good.x12"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["file"], "missing.x12");
    assert!(lines[0]["error"].as_str().unwrap().contains("No such file"));
    assert!(lines[1]["error"]
        .as_str()
        .unwrap()
        .contains("not a regular file"));
    assert_eq!(lines[2]["disposition"], "accepted");
    let v = run(d, &["validate", "missing.x12"]);
    assert_eq!(v.status.code(), Some(2));
    let o = x12gate(d)
        .args(["process", "--json", "-"])
        .write_stdin(po(102))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (r["file"].as_str(), r["disposition"].as_str()),
        (Some("-"), Some("accepted"))
    );
}

/// `history`: an unpadded control number, a bare partner id, a time without a zone (UTC);
/// an unknown disposition is refused; the text form names the file and the reason.
#[test]
fn history_takes_what_operators_type() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d);
    fs::write(d.join("a.x12"), po(101)).unwrap();
    fs::write(
        d.join("bad.x12"),
        po(102).replace("SE*13*0001~", "SE*12*0001~"),
    )
    .unwrap();
    run(d, &["process", "a.x12", "bad.x12"]);
    run(d, &["process", "a.x12"]);
    let keys = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["history", "--json"];
        all.extend_from_slice(args);
        let o = run(d, &all);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        stdout(&o)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|e| {
                format!(
                    "{} {}",
                    e["event"].as_str().unwrap_or(""),
                    e["key"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    assert_eq!(
        keys(&["--control-number", "101"]),
        ["accepted ZZ:ACME:000000101", "duplicate ZZ:ACME:000000101"]
    );
    assert_eq!(
        keys(&["--partner", "ACME", "--disposition", "rejected"]),
        ["rejected ZZ:ACME:000000102"]
    );
    assert_eq!(
        keys(&["--since", "2999-01-01T00:00:00"]),
        Vec::<String>::new()
    );
    assert_eq!(
        keys(&["--until", "2000-01-01T00:00:00"]),
        Vec::<String>::new()
    );
    assert_eq!(
        keys(&["--since", "2000-01-01T00:00:00", "--control-number", "102"]).len(),
        1
    );
    let bogus = run(d, &["history", "--disposition", "bogus"]);
    assert_eq!(bogus.status.code(), Some(2));
    assert!(
        stderr(&bogus).contains("expected one of accepted"),
        "{}",
        stderr(&bogus)
    );
    let nobody = run(d, &["history", "--partner", "NOBODY"]);
    assert_eq!(nobody.status.code(), Some(2));
    let text = stdout(&run(d, &["history", "--control-number", "102"]));
    assert!(
        text.contains("ZZ:ACME:000000102")
            && text.contains("rejected")
            && text.contains("bad.x12")
            && text.contains("SE01"),
        "{text}"
    );
    assert_eq!(
        text.matches("rejected").count(),
        1,
        "disposition said once: {text}"
    );
}

/// `stats` after an acceptance, a duplicate and a conflict shows all three.
#[test]
fn stats_counts_every_decision() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d);
    fs::write(d.join("a.x12"), po(101)).unwrap();
    fs::write(d.join("b.x12"), po(101).replace("PO1*1*120", "PO1*1*125")).unwrap();
    run(d, &["process", "a.x12"]);
    run(d, &["process", "a.x12"]);
    run(d, &["process", "b.x12"]);
    let o = run(d, &["stats", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let count = |what: &str| -> u64 {
        v["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["decision"] == what)
            .map(|r| r["count"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(
        (count("accepted"), count("duplicate"), count("conflict")),
        (1, 1, 1),
        "{v}"
    );
    let text = stdout(&run(d, &["stats"]));
    assert!(
        text.contains("duplicate") && text.contains("conflict"),
        "{text}"
    );
}

/// `counter`: an unknown partner is refused, `set` says what it changed, `next` prints
/// nine digits like `show`.
#[test]
fn counter_refuses_strangers_and_says_what_it_did() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d);
    let o = run(d, &["counter", "show", "ZZ:ACME"]);
    assert_eq!(o.status.code(), Some(2), "no registry yet: `init` first");
    assert_eq!(run(d, &["init"]).status.code(), Some(0));
    let o = run(d, &["counter", "set", "ZZ:NOBODY", "isa13", "5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("\"ZZ:NOBODY\" names no configured partner"),
        "{}",
        stderr(&o)
    );
    let o = run(d, &["counter", "set", "ZZ:ACME", "isa13", "5"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "ZZ:ACME ISA13 000000005 (was none); the next one sent is 000000006\n"
    );
    assert_eq!(
        stdout(&run(d, &["counter", "next", "ZZ:ACME"])),
        "000000006\n"
    );
    assert!(stdout(&run(d, &["counter", "show", "ZZ:ACME"])).contains("ZZ:ACME ISA13 000000006"));
}

/// `parse` of a file that is not X12 and `render` of a document with a misspelled key
/// write nothing to stdout.
#[test]
fn parse_and_render_write_nothing_when_they_fail() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("junk.x12"), po(101) + "this is not X12").unwrap();
    let o = run(d, &["parse", "junk.x12"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
    fs::write(d.join("po.x12"), po(101)).unwrap();
    // A key misspelled deep inside the structured content, after the envelope: the old
    // renderer had written ISA, GS and ST before it met it.
    let json = stdout(&run(d, &["parse", "po.x12"]));
    let broken = json.replacen("\"quantity_ordered_02\"", "\"quantity_orderd_02\"", 1);
    assert_ne!(broken, json, "{json}");
    fs::write(d.join("doc.json"), broken).unwrap();
    let o = run(d, &["render", "doc.json"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
}

/// An ISA06 holding a terminal escape sequence is printed escaped by `process`, `history`
/// and `stats`; a binary file's bytes never reach a reason as they are.
#[test]
fn control_characters_from_input_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d);
    let hostile = po(101).replace("*ZZ*ACME           *", "*ZZ*AC\u{1b}[2JME     *");
    assert_ne!(hostile, po(101));
    fs::write(d.join("h.x12"), &hostile).unwrap();
    let mut binary = vec![0x89, b'P', b'N', b'G', 0x0d, 0x1b, 0x15, 0xff];
    binary.extend_from_slice(&[0u8; 20]);
    fs::write(d.join("b.bin"), &binary).unwrap();
    for args in [
        vec!["process", "h.x12", "b.bin"],
        vec!["history"],
        vec!["stats"],
    ] {
        let o = run(d, &args);
        let all = stdout(&o) + &stderr(&o);
        assert!(
            !all.contains('\u{1b}'),
            "{args:?} printed an escape: {all:?}"
        );
        assert!(!all.contains('\u{fffd}'), "{args:?}: {all:?}");
    }
    let history = stdout(&run(d, &["history", "--json"]));
    assert!(history.contains("\\\\x89PNG"), "{history}");
    // Log lines too, at every level.
    let logged = x12gate(d)
        .args(["process", "h.x12", "b.bin"])
        .env("RUST_LOG", "debug")
        .output()
        .unwrap();
    let err = stderr(&logged);
    assert!(err.contains("AC\\u{1b}[2JME"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "a log line printed an escape: {err:?}"
    );
}

/// `--help` gives the dispositions and the exit codes, and every flag says what it does.
#[test]
fn help_explains_every_flag() {
    let dir = tempfile::tempdir().unwrap();
    let top = stdout(&run(dir.path(), &["--help"]));
    assert!(
        top.contains("Dispositions: accepted") && top.contains("Exit codes: 0"),
        "{top}"
    );
    for command in [
        "process",
        "watch",
        "parse",
        "render",
        "validate",
        "ack",
        "history",
        "stats",
        "prune",
        "init",
        "check",
        "show",
        "reprocess",
        "claims",
        "claims release",
        "metrics",
        "backup",
        "counter show",
        "counter next",
        "counter set",
    ] {
        let mut args: Vec<&str> = command.split(' ').collect();
        args.push("--help");
        let help = stdout(&run(dir.path(), &args));
        let lines: Vec<&str> = help.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            if t.starts_with("--")
                || (t.starts_with('-') && t.chars().nth(1).is_some_and(|c| c.is_ascii_alphabetic()))
            {
                let described = t.split("  ").filter(|p| !p.trim().is_empty()).count() > 1
                    || lines
                        .get(i + 1)
                        .is_some_and(|n| n.starts_with("          "));
                assert!(described, "{command}: {line} has no description:\n{help}");
            }
        }
    }
}

/// `process` killed after its first batch, stdout redirected to a file: every line of the
/// batch it finished is in the file (each file's lines are flushed as it is decided, not
/// kept in a buffer the kill throws away).
#[cfg(feature = "failpoints")]
#[test]
fn a_killed_process_has_reported_every_file_it_decided() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d);
    // One batch holds 256 interchanges: the second batch is killed before it completes.
    let files: Vec<String> = (1..=300)
        .map(|n| {
            let name = format!("po-{n:03}.x12");
            fs::write(d.join(&name), po(1000 + n)).unwrap();
            name
        })
        .collect();
    let report = fs::File::create(d.join("report.txt")).unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_x12gate"))
        .current_dir(d)
        .arg("process")
        .args(&files)
        .env("FAILPOINTS", "complete.before=1*off->return")
        .stdout(report)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the second batch was not killed");
    let reported = fs::read_to_string(d.join("report.txt")).unwrap();
    assert_eq!(reported.lines().count(), 256, "{reported}");
    assert!(
        reported.lines().all(|l| l.contains(" accepted")),
        "{reported}"
    );
}

/// `x12gate parse BIG | head -c 10`: the reader went away. No "Broken pipe" message; the
/// exit code of a program SIGPIPE stopped.
#[test]
fn a_reader_that_stops_reading_gets_no_error_message() {
    let dir = tempfile::tempdir().unwrap();
    let big: String = (1..=300).map(po).collect();
    let file = dir.path().join("big.x12");
    fs::write(&file, big).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_x12gate"))
        .current_dir(dir.path())
        .args(["parse", file.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its output is larger than a pipe holds: it waits on the pipe until the reader goes.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(141));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
}
