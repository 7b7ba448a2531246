//! The binary's contract: commands, output shapes and exit codes (SPEC section 6).

use crate::util::{fixture, root, x12gate};

const CLEAN: &str = "850-004010.x12";

fn broken_copy(dir: &std::path::Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(fixture(CLEAN)).unwrap();
    let bad = text.replace("GE*1*101~", "GE*2*102~");
    assert_ne!(bad, text, "the fixture must contain the GE being broken");
    let path = dir.join("bad.x12");
    std::fs::write(&path, bad).unwrap();
    path
}

#[test]
fn validate_clean_file_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let out = x12gate(dir.path())
        .arg("validate")
        .arg(fixture(CLEAN))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("clean"));
}

#[test]
fn validate_with_warnings_only_exits_0_and_shows_them() {
    let dir = tempfile::tempdir().unwrap();
    for (name, rule) in [
        ("broken/blank-before-segment.x12", "blank-before-segment"),
        ("broken/gs-date-time-invalid.x12", "gs-date-time-invalid"),
        ("broken/gs-agency-invalid.x12", "gs-agency-invalid"),
    ] {
        let out = x12gate(dir.path())
            .arg("validate")
            .arg(fixture(name))
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(0), "{name}: {stdout}{stderr}");
        assert!(stdout.contains(rule), "{name}: {stdout}");
        assert!(stderr.contains("only"), "{name}: {stderr}");
    }
    // A warning beside an error still fails.
    let text = std::fs::read_to_string(fixture("broken/blank-before-segment.x12")).unwrap();
    let both = dir.path().join("both.x12");
    std::fs::write(&both, text.replacen("GE*1*", "GE*7*", 1)).unwrap();
    let out = x12gate(dir.path())
        .arg("validate")
        .arg(&both)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("blank-before-segment") && stdout.contains("ge-set-count"),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn validate_findings_exit_3_and_name_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let bad = broken_copy(dir.path());
    let out = x12gate(dir.path())
        .arg("validate")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains("bad.x12: byte "), "{text}");
    assert!(lines[0].contains("segment 16 (GE), element GE01"), "{text}");
    assert!(lines[0].ends_with("[ge-set-count; AK905 5]"), "{text}");
    assert!(lines[1].ends_with("[ge-control-number; AK905 4]"), "{text}");
}

#[test]
fn validate_json_lines_carry_file_rule_code_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let bad = broken_copy(dir.path());
    let out = x12gate(dir.path())
        .args(["validate", "--json"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8(out.stdout).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["rule"], "ge-set-count");
    assert_eq!(first["code"]["list"], "AK905");
    assert_eq!(first["code"]["value"], "5");
    assert_eq!(first["position"]["segment"], 16);
    assert_eq!(first["position"]["element"], 1);
    assert_eq!(first["file"], bad.display().to_string());
    let offset = first["position"]["byte"].as_u64().unwrap() as usize;
    let bytes = std::fs::read(&bad).unwrap();
    assert_eq!(
        &bytes[offset..offset + 1],
        b"2",
        "byte offset points at GE01's value"
    );
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = x12gate(dir.path())
        .args(["validate", "no-such-file.x12"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no-such-file.x12"));
    let no_args = x12gate(dir.path()).arg("validate").output().unwrap();
    assert_eq!(no_args.status.code(), Some(2));
    let unknown = x12gate(dir.path()).arg("frobnicate").output().unwrap();
    assert_eq!(unknown.status.code(), Some(2));
}

/// `validate` of the clean fixture under a partners.toml of a [gateway] section plus `extra`.
fn validate_with_config(extra: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\n{extra}");
    std::fs::write(dir.path().join("partners.toml"), text).unwrap();
    x12gate(dir.path())
        .arg("validate")
        .arg(fixture(CLEAN))
        .output()
        .unwrap()
}

#[test]
fn a_bad_config_exits_2_naming_the_line_and_key() {
    let out = validate_with_config("outbx = \"x\"\n");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 4") && err.contains("outbx"), "{err}");
}

#[test]
fn limits_from_the_config_reject_an_oversized_file() {
    let out = validate_with_config("[limits]\nmax_file_bytes = 100\n");
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("more than the limit of 100") && text.contains("file-too-large"),
        "{text}"
    );
}

#[test]
fn parse_then_render_gives_the_file_back() {
    let dir = tempfile::tempdir().unwrap();
    let parsed = x12gate(dir.path())
        .arg("parse")
        .arg(fixture(CLEAN))
        .output()
        .unwrap();
    assert_eq!(parsed.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&parsed.stdout).unwrap();
    assert_eq!(
        json["interchanges"][0]["groups"][0]["sets"][0]["st"][0],
        "850"
    );
    let json_path = dir.path().join("doc.json");
    std::fs::write(&json_path, &parsed.stdout).unwrap();
    let rendered = x12gate(dir.path())
        .arg("render")
        .arg(&json_path)
        .output()
        .unwrap();
    assert_eq!(rendered.status.code(), Some(0));
    assert_eq!(rendered.stdout, std::fs::read(fixture(CLEAN)).unwrap());
}

#[test]
fn render_refuses_bad_json_with_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("doc.json");
    std::fs::write(&path, "{\"encoding\":\"utf8\",\"interchanges\":[{\"delimiters\":{\"element\":\"**\",\"component\":\":\",\"repetition\":null,\"segment\":\"~\",\"line_ending\":\"\"},\"isa\":[],\"groups\":[],\"iea\":null}]}").unwrap();
    let out = x12gate(dir.path())
        .arg("render")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("interchange 1") && err.contains("element delimiter"),
        "{err}"
    );
}

/// A document whose element separator is its terminator: refused with exit 2 and nothing on
/// stdout, instead of X12 no reader can split.
#[test]
fn render_refuses_colliding_delimiters() {
    let dir = tempfile::tempdir().unwrap();
    let parsed = x12gate(dir.path())
        .arg("parse")
        .arg(fixture(CLEAN))
        .output()
        .unwrap();
    let mut json: serde_json::Value = serde_json::from_slice(&parsed.stdout).unwrap();
    json["interchanges"][0]["delimiters"]["segment"] = "*".into();
    let path = dir.path().join("doc.json");
    std::fs::write(&path, json.to_string()).unwrap();
    let out = x12gate(dir.path())
        .arg("render")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("doc.json: interchange 1: the element and segment delimiters are both '*'"),
        "{err}"
    );
}

#[test]
fn parse_of_non_x12_exits_3_with_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "hello, this is not EDI\n").unwrap();
    let out = x12gate(dir.path())
        .arg("parse")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("byte 0: expected ISA"));
}

/// One interchange larger than `validate` and `parse` read at once (16 MiB): read in parts,
/// a set control number reused 140,000 sets later and the group's wrong count are still
/// found, with the interchange's own numbering; the JSON document holds every set once, in
/// order, and renders back to the file.
#[test]
fn an_interchange_larger_than_a_piece_is_read_in_parts_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let sets = 180_000;
    let mut text = String::from("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240115*0930*U*00401*000000101*1*P*>~\n");
    text += "GS*PO*ACME*X12GATE*20240115*0930*101*X*004010~\n";
    for i in 0..sets {
        // Set 150,001 reuses the control number of set 10,001.
        let st02 = if i == 150_000 { 10_001 } else { i + 1 };
        text += &format!("ST*850*{st02:06}~\nBEG*00*SA*PO-{i}**20240115~\nPO1*1*{}*EA*4.25*PE*UP*012345678905~\nCTT*1~\nSE*5*{st02:06}~\n", i % 90 + 1);
    }
    text += &format!("GE*{}*101~\nIEA*1*000000101~\n", sets + 1);
    assert!(text.len() > 17 << 20, "{}", text.len());
    let path = dir.path().join("large.x12");
    std::fs::write(&path, &text).unwrap();
    let reused = text.find("ST*850*010001~\nBEG*00*SA*PO-150000").unwrap() + 7;

    let out = x12gate(dir.path())
        .args(["validate", "--envelope"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_once(": ").unwrap().1.to_string())
        .collect();
    let ge = text.rfind("GE*").unwrap() + 3;
    assert_eq!(
        lines,
        [
            format!("byte {reused}: segment {} (ST, set segment 1), element ST02: ST02 \"010001\" is used by an earlier transaction set of this group [st-duplicate-control-number; AK502 23]", 2 + 150_000 * 5 + 1),
            format!("byte {ge}: segment {} (GE), element GE01: GE01 \"{}\" does not match the {sets} transaction set(s) received [ge-set-count; AK905 5]", 2 + sets * 5 + 1, sets + 1),
        ],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // `ack` decides it a part at a time: every set answered, the reused number rejected.
    std::fs::copy(
        root().join("partners.toml"),
        dir.path().join("partners.toml"),
    )
    .unwrap();
    let out = x12gate(dir.path()).arg("ack").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let ack = String::from_utf8(out.stdout).unwrap();
    assert_eq!(ack.matches("AK2*850*").count(), sets, "every set answered");
    assert_eq!(ack.matches("AK5*R*23~").count(), 1);
    assert!(
        ack.contains("AK2*850*010001~\nAK5*R*23~"),
        "the reused number rejected"
    );
    assert!(
        ack.contains(&format!("AK9*P*{}*{sets}*{}*5~", sets + 1, sets - 1)),
        "{}",
        &ack[ack.len().saturating_sub(300)..]
    );
    std::fs::remove_file(dir.path().join("partners.toml")).unwrap();

    let out = x12gate(dir.path())
        .args(["parse", "--raw"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let found = doc["interchanges"][0]["groups"][0]["sets"]
        .as_array()
        .unwrap();
    assert_eq!(found.len(), sets);
    let st02 = |i: usize| found[i]["st"][1].as_str().unwrap().to_string();
    assert_eq!(
        (st02(0), st02(sets - 1)),
        ("000001".into(), format!("{sets:06}"))
    );
    assert!((1..sets).all(|i| i == 150_000 || st02(i) == format!("{:06}", i + 1)));
    let json = dir.path().join("large.json");
    std::fs::write(&json, &out.stdout).unwrap();
    let back = x12gate(dir.path())
        .arg("render")
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(back.status.code(), Some(0));
    assert!(
        back.stdout == text.as_bytes(),
        "rendered back, the file differs"
    );
}

#[test]
fn parse_refuses_a_segment_id_holding_a_delimiter_and_names_it() {
    // `N>1`: the component separator inside a segment id. Written to JSON, the id could
    // never be rendered back, so parse says so and writes nothing of it.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture(CLEAN)).unwrap();
    let broken = text.replacen("\nN1*", "\nN>1*", 1);
    assert_ne!(broken, text, "the fixture has an N1 to break");
    let path = dir.path().join("id.x12");
    std::fs::write(&path, &broken).unwrap();
    let out = x12gate(dir.path())
        .arg("parse")
        .arg(&path)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"N>1\" holds the component separator '>'"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("N>1"));
    // validate reports the same segment as a bad id, where it stands.
    let out = x12gate(dir.path())
        .args(["validate", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("segment-id-invalid"));
}
