//! Acknowledgments: golden TA1/997/999 for every fixture, and the rules every acknowledgment
//! keeps (parses back clean, never answers an acknowledgment, codes by version).
//!
//! Golden files sit beside the fixtures as `<case>.ack`: the exact outbound interchanges
//! `process` would send, made with a fixed clock and control numbers starting at 1 (the
//! normalisation), compared segment by segment. `X12GATE_BLESS=1 cargo test acks` rewrites them
//! after a deliberate change; review the diff before committing it.

use std::path::{Path, PathBuf};

use chrono::NaiveDate;
use x12gate::ack::{Disposition, Outbound, OutboundKind};
use x12gate::config::{AckKind, Config, Severity, Ta1Policy};
use x12gate::finding::Rule;
use x12gate::x12::{Interchanges, Limits};

use crate::util::{fixture, root, x12gate};

fn config() -> Config {
    Config::load(&root().join("partners.toml")).unwrap()
}

fn now() -> chrono::NaiveDateTime {
    NaiveDate::from_ymd_opt(2026, 1, 2)
        .unwrap()
        .and_hms_opt(3, 4, 0)
        .unwrap()
}

/// Every outbound interchange for every interchange of `input`, and the dispositions.
fn acks_with(input: &[u8], config: &Config) -> (Vec<Outbound>, Vec<Disposition>) {
    let mut all = Vec::new();
    let mut dispositions = Vec::new();
    for ic in Interchanges::new(input, config.limits).flatten() {
        let decision = x12gate::pipeline::decide(&ic, config, x12gate::schema::builtin().unwrap());
        let counters = x12gate::ack::Numbers::following(
            x12gate::pipeline::numbers_needed(&decision),
            None,
            None,
        );
        all.extend(
            x12gate::pipeline::acknowledgments(&ic, &decision, config, &counters, now()).unwrap(),
        );
        dispositions.push(decision.response.disposition);
    }
    (all, dispositions)
}

fn acks(input: &[u8]) -> Vec<Outbound> {
    acks_with(input, &config()).0
}

fn x12_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "x12"))
        .collect();
    v.sort();
    v
}

fn segments(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .split(['~', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn golden_acknowledgments_for_every_fixture() {
    let bless = std::env::var_os("X12GATE_BLESS").is_some();
    let mut failures = Vec::new();
    let default_config = config();
    let mut files = x12_files(&root().join("fixtures"));
    files.extend(x12_files(&root().join("fixtures/broken")));
    assert!(files.len() > 40, "fixtures missing: {}", files.len());
    // Schema errors are answered in the 999 too (IK3/CTX/IK4): those fixtures have a second
    // golden, `<case>.999`, made with every partner on `ack = "999"`.
    let mut config_999 = config();
    for p in &mut config_999.partners {
        p.ack.kind = AckKind::ImplementationAck;
    }
    let mut cases = Vec::new();
    for file in files {
        let findings = std::fs::read_to_string(file.with_extension("findings")).unwrap_or_default();
        if findings.contains(" AK304 ") || findings.contains(" AK403 ") {
            cases.push((file.clone(), "999", &config_999));
        }
        cases.push((file, "ack", &default_config));
    }
    for (file, extension, config) in cases {
        let got: Vec<u8> = acks_with(&std::fs::read(&file).unwrap(), config)
            .0
            .into_iter()
            .flat_map(|o| o.bytes)
            .collect();
        let golden = file.with_extension(extension);
        if bless {
            std::fs::write(&golden, &got).unwrap();
            continue;
        }
        let Ok(want) = std::fs::read(&golden) else {
            failures.push(format!(
                "{}: no golden file {}",
                file.display(),
                golden.display()
            ));
            continue;
        };
        let (got, want) = (segments(&got), segments(&want));
        if got != want {
            let at = got
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(want.len()));
            failures.push(format!(
                "{}: segment {} differs\n  want: {:?}\n  got:  {:?}",
                file.display(),
                at + 1,
                want.get(at),
                got.get(at)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_acknowledgment_parses_back_and_validates_clean() {
    // Every fixture, the broken ones covering every rule, answered by a 997 and by a 999:
    // each answer reads clean against the definitions we read partners' acknowledgments by
    // (the 999's 005010X231A1 guide included), not only its envelopes.
    let mut files = x12_files(&root().join("fixtures"));
    files.extend(x12_files(&root().join("fixtures/broken")));
    let checks = x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap());
    let mut seen = 0;
    let mut implementation_acks = 0;
    let mut failures = Vec::new();
    for (file, kind) in files
        .iter()
        .flat_map(|f| [AckKind::FunctionalAck, AckKind::ImplementationAck].map(|k| (f, k)))
    {
        let mut config = config();
        for p in &mut config.partners {
            p.ack.kind = kind;
        }
        let input = std::fs::read(file).unwrap();
        for o in acks_with(&input, &config).0 {
            seen += 1;
            let mut read = Interchanges::new(&o.bytes, Limits::default());
            let ic = read
                .next()
                .unwrap()
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            assert!(
                read.next().is_none(),
                "{}: one interchange per outbound",
                file.display()
            );
            // A 997 in a release no definition reads (our answer to a 004030 group) is
            // noted as read at envelope level: about our definitions, not the answer. And an
            // answer echoes what it answers: where a broken file's own GS01, GS06, GS08, ST01
            // or ST02 breaks its element's rules, AK1/AK2 carries it as sent (the partner
            // finds its group by it), and the reader sees the partner's value there.
            let broken = file.parent().is_some_and(|d| d.ends_with("broken"));
            let findings: Vec<_> = x12gate::check::interchange(&ic, &checks, [])
                .into_iter()
                .filter(|f| f.rule != Rule::EnvelopeLevelOnly)
                .filter(|f| !(broken && echoed(&input, f)))
                .collect();
            if !findings.is_empty() {
                failures.push(format!(
                    "{}: our {:?} has findings:\n{}",
                    file.display(),
                    o.kind,
                    findings
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
            implementation_acks += usize::from(ic.groups.iter().any(|g| {
                g.sets
                    .iter()
                    .any(|s| s.st.element(1) == Some(b"999".as_slice()))
            }));
            assert_eq!(ic.isa.len, 106, "ISA width");
            assert_eq!(ic.isa.trimmed(6), config.gateway.id);
            assert_eq!(ic.isa.control_number(), format!("{:09}", o.control_number));
            assert_eq!(ic.isa.field(14), b"0");
            match o.kind {
                OutboundKind::Ta1 => {
                    assert!(ic.groups.is_empty());
                    assert_eq!(ic.ta1.len(), 1);
                }
                _ => assert!(ic.groups.iter().all(|g| g.gs.element(1) == Some(b"FA"))),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(seen > 30, "too few acknowledgments were checked: {seen}");
    assert!(
        implementation_acks > 20,
        "too few 999s were checked: {implementation_acks}"
    );
}

/// Whether `f`, a finding on our answer to `input`, is an AK1/AK2 element that echoes an
/// envelope element `input` itself breaks a rule with (AK101-103: GS01, GS06, GS08;
/// AK201-202: ST01, ST02): the fault is the partner's, and already reported to it.
fn echoed(input: &[u8], f: &x12gate::finding::Finding) -> bool {
    let source = match (f.segment_id.as_str(), f.position.element) {
        ("AK1", Some(1)) => ("GS", 1),
        ("AK1", Some(2)) => ("GS", 6),
        ("AK1", Some(3)) => ("GS", 8),
        ("AK2", Some(1)) => ("ST", 1),
        ("AK2", Some(2)) => ("ST", 2),
        _ => return false,
    };
    let checks = x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap());
    x12gate::check::file(input, Limits::default(), &checks)
        .iter()
        .any(|g| g.segment_id == source.0 && g.position.element == Some(source.1))
}

#[test]
fn an_acknowledgment_is_never_acknowledged() {
    for name in ["997-004010.x12", "997-005010.x12", "ta1-only.x12"] {
        let mut config = config();
        for p in &mut config.partners {
            p.ack.ta1 = Ta1Policy::Always;
        }
        let (out, _) = acks_with(&std::fs::read(fixture(name)).unwrap(), &config);
        assert!(out.is_empty(), "{name} was answered: {out:?}");
    }
    // A file that mixes an FA group with a PO group gets a 997 for the PO group only.
    let po = std::fs::read_to_string(fixture("850-004010.x12")).unwrap();
    let fa = std::fs::read_to_string(fixture("997-004010.x12")).unwrap();
    let fa_group: String = fa
        .lines()
        .filter(|l| !l.starts_with("ISA") && !l.starts_with("IEA"))
        .map(|l| format!("{l}\n"))
        .collect();
    let mixed = po
        .replacen("GE*1*101~\n", &format!("GE*1*101~\n{fa_group}"), 1)
        .replace("IEA*1*", "IEA*2*");
    let ic_findings = x12gate::check::file(
        mixed.as_bytes(),
        Limits::default(),
        &x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap()),
    );
    assert!(ic_findings.is_empty(), "{ic_findings:#?}");
    let out = acks(mixed.as_bytes());
    assert_eq!(out.len(), 1);
    let text = String::from_utf8(out[0].bytes.clone()).unwrap();
    assert_eq!(text.matches("ST*997").count(), 1, "{text}");
    assert!(text.contains("AK1*PO*101~"), "{text}");
}

#[test]
fn a_broken_received_ta1_rejects_its_interchange_and_is_never_answered() {
    // TA1s alone: rejected (TA105 024 as the reason), yet nothing is sent back, whatever the
    // partner's `ta1`; a valid one (any ack code, any note code of the list) is accepted.
    let mut config = config();
    for p in &mut config.partners {
        p.ack.ta1 = Ta1Policy::Always;
    }
    for name in [
        "broken/ta1-control-number-invalid.x12",
        "broken/ta1-date-invalid.x12",
        "broken/ta1-time-invalid.x12",
        "broken/ta1-ack-code-invalid.x12",
        "broken/ta1-note-code-invalid.x12",
    ] {
        let input = std::fs::read(fixture(name)).unwrap();
        let (out, dispositions) = acks_with(&input, &config);
        assert!(out.is_empty(), "{name} was answered: {out:?}");
        assert_eq!(dispositions, [Disposition::Rejected], "{name}");
        let ic = Interchanges::new(&input, Limits::default())
            .next()
            .unwrap()
            .unwrap();
        let decision = x12gate::pipeline::decide(&ic, &config, x12gate::schema::builtin().unwrap());
        let reason = decision.response.reason.clone().expect("a reason");
        assert_eq!(reason.code.map(|c| c.value()), Some("024"), "{name}");
    }
    let (out, dispositions) = acks_with(
        &std::fs::read(fixture("ta1-note-codes.x12")).unwrap(),
        &config,
    );
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(dispositions, [Disposition::Accepted]);
    // Beside a PO group: the TA1 R the partner's policy sends, and no 997 at all.
    let (out, dispositions) = acks_with(
        &std::fs::read(fixture("broken/ta1-date-invalid-with-850.x12")).unwrap(),
        &config,
    );
    assert_eq!(dispositions, [Disposition::Rejected]);
    let sent: Vec<String> = out
        .iter()
        .map(|o| String::from_utf8_lossy(&o.bytes).into_owned())
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0].contains("*R*024~") && !sent[0].contains("ST*997"),
        "{sent:?}"
    );
}

#[test]
fn a_005010_group_gets_ak103_and_a_004010_group_does_not() {
    let five = String::from_utf8(
        acks(&std::fs::read(fixture("850-005010.x12")).unwrap())[0]
            .bytes
            .clone(),
    )
    .unwrap();
    let ak1 = five.lines().find(|l| l.starts_with("AK1")).unwrap();
    assert!(ak1.ends_with("*005010~"), "{ak1}");
    assert!(
        five.contains("*X*005010~"),
        "997 GS08 follows the group: {five}"
    );
    let four = String::from_utf8(
        acks(&std::fs::read(fixture("850-004010.x12")).unwrap())[0]
            .bytes
            .clone(),
    )
    .unwrap();
    let ak1 = four.lines().find(|l| l.starts_with("AK1")).unwrap();
    assert_eq!(ak1.matches('*').count(), 2, "{ak1}");
}

#[test]
fn a_999_carries_ik5_and_ak9_in_005010x231() {
    let mut config = config();
    for p in &mut config.partners {
        p.ack.kind = AckKind::ImplementationAck;
    }
    let (out, _) = acks_with(
        &std::fs::read(fixture("broken/se-segment-count.x12")).unwrap(),
        &config,
    );
    let text = String::from_utf8(out.last().unwrap().bytes.clone()).unwrap();
    assert!(text.contains("ST*999*0001*005010X231A1"), "{text}");
    assert!(text.contains("*X*005010X231A1"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("IK5*R*4")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("AK9*R*1*1*0")), "{text}");
    assert!(!text.contains("AK5"), "{text}");
}

#[test]
fn ta1_policy_and_test_usage() {
    let input = std::fs::read_to_string(fixture("850-004010.x12")).unwrap();
    let isa14 = |v: &str| input.replacen("*1*P*>~", &format!("*{v}*T*>~"), 1);
    assert_ne!(isa14("0"), input, "fixture has ISA14=1 and ISA15=P");
    for (policy, flag, want_ta1) in [
        (Ta1Policy::Always, "0", true),
        (Ta1Policy::OnError, "1", false),
        (Ta1Policy::Requested, "1", true),
        (Ta1Policy::Requested, "0", false),
        (Ta1Policy::Never, "1", false),
    ] {
        let mut config = config();
        for p in &mut config.partners {
            p.ack.ta1 = policy;
        }
        let (out, _) = acks_with(isa14(flag).as_bytes(), &config);
        let ta1: Vec<&Outbound> = out.iter().filter(|o| o.kind == OutboundKind::Ta1).collect();
        assert_eq!(ta1.len(), usize::from(want_ta1), "{policy:?} ISA14={flag}");
        for o in &out {
            let text = String::from_utf8_lossy(&o.bytes);
            assert!(
                text.starts_with("ISA") && text.lines().next().unwrap().ends_with("*0*T*>~"),
                "test answered in test: {text}"
            );
        }
        if let Some(t) = ta1.first() {
            assert!(String::from_utf8_lossy(&t.bytes).contains("TA1*000000101*240115*0930*A*000~"));
        }
    }
}

#[test]
fn routing_rejects_other_receivers_and_unknown_senders() {
    let input = std::fs::read_to_string(fixture("850-004010.x12")).unwrap();
    let elsewhere = input.replacen("X12GATE        ", "SOMEONEELSE    ", 1);
    let (out, d) = acks_with(elsewhere.as_bytes(), &config());
    assert_eq!(d, vec![Disposition::Rejected]);
    assert_eq!(out.len(), 1);
    assert!(String::from_utf8_lossy(&out[0].bytes).contains("*R*009~"));
    // Our id under another qualifier is not us either (TA105 007).
    let qualifier = input.replacen("*ZZ*X12GATE        *", "*01*X12GATE        *", 1);
    let (out, d) = acks_with(qualifier.as_bytes(), &config());
    assert_eq!(d, vec![Disposition::Rejected]);
    assert!(String::from_utf8_lossy(&out[0].bytes).contains("*R*007~"));
    let stranger = input.replacen("ACME           ", "STRANGER       ", 1);
    let (out, d) = acks_with(stranger.as_bytes(), &config());
    assert_eq!(d, vec![Disposition::Rejected]);
    assert!(
        out.is_empty(),
        "an unknown sender is not answered when unknown partners are refused"
    );
    let ic = Interchanges::new(stranger.as_bytes(), Limits::default())
        .next()
        .unwrap()
        .unwrap();
    let decision = x12gate::pipeline::decide(&ic, &config(), x12gate::schema::builtin().unwrap());
    assert_eq!(
        decision
            .response
            .reason
            .clone()
            .unwrap()
            .code
            .map(|c| c.value()),
        Some("006")
    );
    let mut accepting = config();
    accepting.gateway.unknown_partners = x12gate::config::UnknownPartners::Accept;
    let (out, d) = acks_with(stranger.as_bytes(), &accepting);
    assert_eq!(d, vec![Disposition::Accepted]);
    assert!(String::from_utf8_lossy(&out[0].bytes).contains("*ZZ*STRANGER       *"));
}

#[test]
fn ack_command_prints_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("partners.toml"),
        dir.path().join("partners.toml"),
    )
    .unwrap();
    let out = x12gate(dir.path())
        .arg("ack")
        .arg(fixture("broken/se-segment-count.x12"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("AK5*R*4~"), "{text}");
    assert!(
        !dir.path().join("data").exists(),
        "ack must not create the registry or folders"
    );
    let ok = x12gate(dir.path())
        .arg("ack")
        .arg(fixture("850-004010.x12"))
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0));
}

#[test]
fn counters_from_two_processes_never_collide() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("partners.toml"),
        dir.path().join("partners.toml"),
    )
    .unwrap();
    // Create the gateway first (counters need a registry) so both processes race on the
    // counter, not on the schema.
    x12gate(dir.path()).args(["init"]).assert().success();
    let bin = assert_cmd::cargo::cargo_bin("x12gate");
    let spawn = || {
        std::process::Command::new(&bin)
            .current_dir(dir.path())
            .args(["counter", "next", "ZZ:ACME", "--count", "1000"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let mut numbers = Vec::new();
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        numbers.extend(
            String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(|l| l.parse::<u32>().unwrap()),
        );
    }
    assert_eq!(numbers.len(), 2000);
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers, (1..=2000).collect::<Vec<u32>>());
}

#[test]
fn counter_wraps_from_999999999_to_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("partners.toml"),
        dir.path().join("partners.toml"),
    )
    .unwrap();
    x12gate(dir.path()).args(["init"]).assert().success();
    x12gate(dir.path())
        .args(["counter", "set", "ZZ:ACME", "isa13", "999999998"])
        .assert()
        .success();
    let out = x12gate(dir.path())
        .args(["counter", "next", "ZZ:ACME", "--count", "3"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "999999999\n000000001\n000000002\n"
    );
}

#[test]
fn partners_toml_errors_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(root().join("partners.toml")).unwrap();
    let line_of =
        |text: &str, needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let cases = [
        (
            "typo",
            base.replacen(
                "duplicate_window_days = 30",
                "duplicate_window_dayz = 30",
                1,
            ),
            "duplicate_window_dayz",
        ),
        (
            "type",
            base.replacen(
                "duplicate_window_days = 30",
                "duplicate_window_days = \"30\"",
                1,
            ),
            "duplicate_window_days",
        ),
        (
            "duplicate",
            base.replacen("id = \"GLOBEX\"", "id = \"ACME\"", 1),
            "already declared",
        ),
    ];
    for (what, text, needle) in cases {
        std::fs::write(dir.path().join("partners.toml"), &text).unwrap();
        let out = x12gate(dir.path())
            .arg("ack")
            .arg(fixture("850-004010.x12"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{what}");
        let err = String::from_utf8_lossy(&out.stderr);
        let line = if what == "duplicate" {
            // The second [[partner]] table is the duplicate.
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.starts_with("[[partner]]"))
                .nth(1)
                .unwrap()
                .0
                + 1
        } else {
            line_of(&text, needle)
        };
        assert!(
            err.contains(needle) && err.contains(&format!("line {line}")),
            "{what}: {err}"
        );
    }
}

#[test]
fn accepted_sets_get_ak2_loops_unless_the_partner_says_no() {
    let input = std::fs::read(fixture("broken/st-duplicate-control-number.x12")).unwrap();
    let text = |config: &Config| {
        let (out, _) = acks_with(&input, config);
        String::from_utf8(out.last().unwrap().bytes.clone()).unwrap()
    };
    let with = text(&config());
    assert_eq!(with.matches("AK2*").count(), 3, "{with}");
    let mut config = config();
    for p in &mut config.partners {
        p.ack.accepted_sets = false;
    }
    let without = text(&config);
    // Only the rejected set is reported; the counts in AK9 still cover all three.
    assert_eq!(without.matches("AK2*").count(), 1, "{without}");
    assert!(without.contains("AK5*R*23~"), "{without}");
    assert!(without.contains("AK9*P*3*3*2~"), "{without}");
}

#[test]
fn an_interchange_cut_off_before_its_first_group_is_answered() {
    let text = std::fs::read_to_string(fixture("850-004010.x12")).unwrap();
    let isa_only: String = text.lines().take(1).collect();
    let (out, d) = acks_with(isa_only.as_bytes(), &config());
    assert_eq!(d, vec![Disposition::Rejected]);
    assert_eq!(out.len(), 1, "a TA1 (ACME's policy is on_error)");
    assert!(String::from_utf8_lossy(&out[0].bytes).contains("TA1*000000101*240115*0930*R*023~"));
}

/// Answering many broken sets is linear: 50,000 sets with a wrong SE01 in one group are
/// decided and acknowledged in less than four times what validating them takes, measured in
/// the same test (a ratio, not a time: the machine may be busy).
#[test]
fn acknowledging_many_broken_sets_costs_about_what_validating_them_does() {
    use std::fmt::Write as _;
    const SETS: usize = 50_000;
    let mut x12 = String::from("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240115*0930*U*00401*000000101*0*P*>~GS*PO*ACME*X12GATE*20240115*0930*101*X*004010~");
    for i in 1..=SETS {
        // SE01 says 2 where ST..SE holds 3 segments: AK502 4 for every set.
        write!(x12, "ST*850*{i:09}~BEG*00*SA*PO{i}**20240115~SE*2*{i:09}~").unwrap();
    }
    write!(x12, "GE*{SETS}*101~IEA*1*000000101~").unwrap();
    let mut config = config();
    for p in &mut config.partners {
        p.checks.validation = x12gate::config::Validation::Envelope;
    }
    let limits = Limits::default();
    let time = |f: &mut dyn FnMut()| {
        let started = std::time::Instant::now();
        f();
        started.elapsed()
    };
    let mut findings = 0;
    let validating = time(&mut || {
        findings = x12gate::check::file(x12.as_bytes(), limits, &Default::default()).len();
    });
    assert!(findings >= SETS, "{findings}");
    let mut sent = 0;
    let answering = time(&mut || {
        for ic in Interchanges::new(x12.as_bytes(), limits) {
            let ic = ic.unwrap();
            let decision =
                x12gate::pipeline::decide(&ic, &config, x12gate::schema::builtin().unwrap());
            let counters = x12gate::ack::Numbers::following(
                x12gate::pipeline::numbers_needed(&decision),
                None,
                None,
            );
            let outbound =
                x12gate::pipeline::acknowledgments(&ic, &decision, &config, &counters, now())
                    .unwrap();
            sent += outbound.iter().map(|o| o.bytes.len()).sum::<usize>();
        }
    });
    eprintln!("{SETS} broken sets: validated in {validating:?}, decided and acknowledged in {answering:?}");
    assert!(
        sent > SETS * 10,
        "a 997 with an AK2 loop per set: {sent} bytes"
    );
    assert!(
        answering < validating * 4,
        "answering took {answering:?}, validating {validating:?}"
    );
}

/// A 1 MB segment id, a 1 MB element, a 1 MB stray segment: no acknowledgment, report,
/// reason, history event, registry row or `validate` line grows past a few KB.
#[test]
fn huge_values_from_input_never_grow_what_we_write() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(root().join("partners.toml"), d.join("partners.toml")).unwrap();
    let base = std::fs::read_to_string(fixture("850-004010.x12")).unwrap();
    let huge = "X".repeat(1 << 20);
    let cases = [
        ("id", base.replacen("BEG*", &format!("{huge}*1~BEG*"), 1)),
        (
            "element",
            base.replacen("BEG*00*SA*", &format!("BEG*00*SA*{huge}"), 1),
        ),
        (
            "stray",
            base.replace("000000101", "000000102")
                .replacen("GE*", &format!("{huge}*1~GE*"), 1),
        ),
        ("after", format!("{base}{huge}")),
    ];
    for (name, body) in &cases {
        std::fs::write(d.join(format!("{name}.x12")), body).unwrap();
        let out = x12gate(d)
            .args(["process", "--json", &format!("{name}.x12")])
            .output()
            .unwrap();
        assert!(
            out.stdout.len() < 8 << 10,
            "{name}: a report of {} bytes",
            out.stdout.len()
        );
        assert!(
            out.stderr.len() < 8 << 10,
            "{name}: {} bytes of stderr",
            out.stderr.len()
        );
        // `validate`'s findings quote at most a few bytes of a value.
        let out = x12gate(d)
            .args(["validate", &format!("{name}.x12")])
            .output()
            .unwrap();
        assert!(
            out.stdout.len() + out.stderr.len() < 8 << 10,
            "{name}: validate wrote {} bytes",
            out.stdout.len() + out.stderr.len()
        );
    }
    for entry in std::fs::read_dir(d.join("data/outbox")).unwrap().flatten() {
        let size = entry.metadata().unwrap().len();
        assert!(size < 8 << 10, "{}: {size} bytes", entry.path().display());
    }
    let db = rusqlite::Connection::open(d.join("data/x12gate.db")).unwrap();
    for query in [
        "SELECT COALESCE(MAX(LENGTH(detail)), 0) FROM events",
        "SELECT COALESCE(MAX(LENGTH(reason)), 0) FROM interchanges",
        "SELECT COALESCE(MAX(LENGTH(bytes)), 0) FROM acks",
    ] {
        let n: i64 = db.query_row(query, [], |r| r.get(0)).unwrap();
        assert!(n < 8 << 10, "{query}: {n}");
    }
}

#[test]
fn a_partner_chooses_whether_an_unknown_version_or_a_set_in_the_wrong_group_rejects() {
    let text = |out: &[Outbound]| -> String {
        assert_eq!(out.len(), 1, "{out:?}");
        String::from_utf8(out[0].bytes.clone()).unwrap()
    };
    let unknown = std::fs::read(fixture("broken/gs-version-unknown.x12")).unwrap();
    let misplaced = std::fs::read(fixture("broken/st-not-in-functional-group.x12")).unwrap();

    // By default a GS08 that names no release is a warning (the group accepted, read at
    // envelope level) and an 850 under GS*IN is rejected (AK502 6 in 004010).
    let (out, dispositions) = acks_with(&unknown, &config());
    assert_eq!(dispositions, [Disposition::Accepted]);
    assert!(text(&out).contains("AK9*A*1*1*1~"), "{}", text(&out));
    let (out, dispositions) = acks_with(&misplaced, &config());
    assert_eq!(dispositions, [Disposition::Rejected]);
    assert!(text(&out).contains("AK5*R*6~"), "{}", text(&out));

    // Each partner may choose the other way.
    let mut config = config();
    for p in &mut config.partners {
        p.checks.unknown_version = Severity::Reject;
        p.checks.group_mismatch = Severity::Warn;
    }
    let (out, dispositions) = acks_with(&unknown, &config);
    assert_eq!(dispositions, [Disposition::Rejected]);
    assert!(text(&out).contains("AK9*R*1*1*0*2~"), "{}", text(&out));
    let (out, dispositions) = acks_with(&misplaced, &config);
    assert_eq!(dispositions, [Disposition::Accepted]);
    assert!(text(&out).contains("AK5*A~"), "{}", text(&out));
    // The tolerated finding is still reported, and says which setting let it through.
    let ic = Interchanges::new(&misplaced, Limits::default())
        .next()
        .unwrap()
        .unwrap();
    let decision = x12gate::pipeline::decide(&ic, &config, x12gate::schema::builtin().unwrap());
    let tolerated: Vec<_> = decision
        .findings
        .iter()
        .filter(|f| f.tolerated_by.is_some())
        .collect();
    assert_eq!(tolerated.len(), 1, "{:#?}", decision.findings);
    assert!(tolerated[0].is_warning());
    assert!(tolerated[0].message.contains("group_mismatch = \"warn\""));
}

#[test]
fn a_997_in_an_older_release_than_the_group_sends_only_codes_its_release_has() {
    // A partner that wants 004010 997s for its 005010 groups: AK502 18 and AK905 19 do not
    // exist in 004010 (19 is a security code there), so the 004010 answers say 6.
    let answer = |name: &str, version: Option<&str>| {
        let mut config = config();
        for p in &mut config.partners {
            p.ack.version = version.map(String::from);
        }
        let (out, _) = acks_with(&std::fs::read(fixture(name)).unwrap(), &config);
        assert_eq!(out.len(), 1, "{out:?}");
        String::from_utf8(out[0].bytes.clone()).unwrap()
    };
    let misplaced = "broken/st-not-in-functional-group-005010.x12";
    let reused = "broken/gs-duplicate-control-number-005010.x12";
    assert!(answer(misplaced, None).contains("AK5*R*18~"));
    assert!(answer(reused, None).contains("AK9*R*1*1*0*19~"));
    let old = answer(misplaced, Some("004010"));
    assert!(
        old.contains("*X*004010~") && old.contains("AK5*R*6~"),
        "{old}"
    );
    let old = answer(reused, Some("004010"));
    assert!(old.contains("AK9*R*1*1*0*6~"), "{old}");
}
