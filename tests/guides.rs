//! Partners' own guides: `definitions import` of an SEF file, `definitions list` and `check`,
//! and a partner whose `definitions` folder narrows the built-in 850 (issue 20, part 3).

use std::path::Path;

use crate::util::{fixture, root, x12gate};

/// The example guide: 850 of 004010, BEG02 narrowed to NE and RL, PER made mandatory.
fn example_sef() -> std::path::PathBuf {
    root().join("examples").join("acme-850.sef")
}

/// A gateway in `dir` whose partner ZZ:ACME reads `definitions` (none: the built-in ones).
fn gateway(dir: &Path, definitions: Option<&str>) {
    let line = definitions.map_or(String::new(), |d| format!("definitions = \"{d}\"\n"));
    let text = format!(
        "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\n\n[[partner]]\nname = \"acme\"\nid_qualifier = \"ZZ\"\nid = \"ACME\"\n{line}"
    );
    std::fs::write(dir.join("partners.toml"), text).unwrap();
}

fn import(dir: &Path) {
    let out = x12gate(dir)
        .args(["definitions", "import"])
        .arg(example_sef())
        .args(["--as", "acme"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("wrote guides/acme/004010/850.toml"),
        "{stdout}"
    );
    // What the guide says that our definitions cannot hold is named, with its line; a
    // position marked not used (#) before a used one is held now, so no warning names it.
    assert!(!stderr.contains("marked not used"), "{stderr}");
    assert!(stderr.contains("(.TEXT,SETS)"), "{stderr}");
}

/// An import whose file cannot be put in place (its name taken by a folder; a full disk
/// fails the same way) fails naming it and leaves no `.toml.tmp` in the partner's folder.
#[test]
fn a_failed_import_leaves_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    gateway(d, None);
    let target = d.join("guides/acme/004010/850.toml");
    std::fs::create_dir_all(target.join("taken")).unwrap();
    let out = x12gate(d)
        .args(["definitions", "import"])
        .arg(example_sef())
        .args(["--as", "acme"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("guides/acme/004010/850.toml"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(d.join("guides/acme/004010"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["850.toml"], "only the folder in the way");
}

/// The acknowledgments `process` wrote to the outbox, concatenated, without line ends.
fn outbox(dir: &Path) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(dir.join("data").join("outbox"))
        .unwrap()
        .flatten()
    {
        all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
    }
    // Segments as one line, whatever line ending the partner gets.
    all.replace(['\r', '\n'], "")
}

fn process(dir: &Path, file: &Path) -> (Option<i32>, serde_json::Value) {
    x12gate(dir).arg("init").assert().success();
    let out = x12gate(dir)
        .args(["process", "--json"])
        .arg(file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = stdout
        .lines()
        .next()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{stdout}{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), report)
}

#[test]
fn a_sef_guide_rejects_what_the_built_in_850_accepts_with_its_ak3_and_ak4() {
    // The built-in definition accepts the fixture.
    let base = tempfile::tempdir().unwrap();
    gateway(base.path(), None);
    let (code, report) = process(base.path(), &fixture("850-004010.x12"));
    assert_eq!(
        (code, &report["disposition"]),
        (Some(0), &"accepted".into())
    );
    assert!(outbox(base.path()).contains("AK5*A~"));

    // The partner's guide: BEG02 SA is not among its codes, and its PER is missing.
    let dir = tempfile::tempdir().unwrap();
    import(dir.path());
    gateway(dir.path(), Some("guides/acme"));
    let (code, report) = process(dir.path(), &fixture("850-004010.x12"));
    assert_eq!(code, Some(3), "{report}");
    assert_eq!(report["disposition"], "rejected", "{report}");
    let ack = outbox(dir.path());
    assert!(
        ack.contains("AK2*850*0001~AK3*BEG*2**8~AK4*2*92*7*SA~AK3*PER*4**3~AK5*R*5~"),
        "{ack}"
    );
}

/// The 850 fixture made to ACME's guide: a new order (BEG02 `NE`) with a buyer (PER).
fn acme_850() -> String {
    std::fs::read_to_string(fixture("850-004010.x12"))
        .unwrap()
        .replace("BEG*00*SA*", "BEG*00*NE*")
        .replace("REF*DP*038~", "REF*DP*038~PER*BD*JANE ROE~")
        .replace("SE*13*0001", "SE*14*0001")
}

#[test]
fn an_element_the_guide_marks_not_used_before_a_used_one_rejects_the_set() {
    // ACME's PID mask `.###!`: PID02-04 not used, PID05 must be used. Before, only trailing
    // not-used positions could be held; PID02 was accepted when sent.
    let dir = tempfile::tempdir().unwrap();
    import(dir.path());
    gateway(dir.path(), Some("guides/acme"));
    let good = acme_850();
    let bad = good.replacen("PID*F****WIDGET, BLUE", "PID*F*08***WIDGET, BLUE", 1);
    assert_ne!(bad, good);
    let file = dir.path().join("bad.x12");
    std::fs::write(&file, bad).unwrap();
    let (code, report) = process(dir.path(), &file);
    assert_eq!(code, Some(3), "{report}");
    assert_eq!(report["disposition"], "rejected", "{report}");
    // A 997 has no "not used" code: 10, exclusion condition violated (see docs/schemas.md).
    let ack = outbox(dir.path());
    assert!(ack.contains("**8~AK4*2*750*10*08~AK5*R*5~"), "{ack}");
}

#[test]
fn a_document_the_guide_accepts_is_translated_and_keyed_against_it() {
    let dir = tempfile::tempdir().unwrap();
    import(dir.path());
    gateway(dir.path(), Some("guides/acme"));
    let text = std::fs::read_to_string(fixture("850-004010.x12")).unwrap();
    let good = acme_850();
    assert_ne!(good, text);
    let file = dir.path().join("good.x12");
    std::fs::write(&file, good).unwrap();
    let (code, report) = process(dir.path(), &file);
    assert_eq!(
        (code, &report["disposition"]),
        (Some(0), &"accepted".into()),
        "{report}"
    );
    // The document is keyed by the guide's definition (BEG03 from the built-in [document]),
    // and translated in the structured form with the guide's PER.
    let order = dir
        .path()
        .join("data")
        .join("out")
        .join(crate::util::order_file("ACME", "PO-4471"));
    let doc = crate::util::read_json(&order).unwrap_or_else(|| panic!("{}", order.display()));
    let content = &doc["set"]["content"];
    assert_eq!(doc["set"]["schema"], "004010/850", "{doc}");
    assert_eq!(
        content["PER"][0]["contact_function_code_01"], "BD",
        "{content}"
    );
    assert!(content.get("PO1_loop").is_some(), "{content}");
}

#[test]
fn a_malformed_sef_file_is_an_error_naming_its_line_and_section() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(example_sef()).unwrap();
    // Line 8 is the 850's structure: a segment reference left open.
    let bad = text.replacen("[BEG*1,M]", "[BEG*1,M", 1);
    assert_ne!(bad, text);
    let file = dir.path().join("bad.sef");
    std::fs::write(&file, bad).unwrap();
    let out = x12gate(dir.path())
        .args(["definitions", "import"])
        .arg(&file)
        .args(["--as", "bad"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.sef: line 8 (.SETS): set 850, column"),
        "{stderr}"
    );
    assert!(!dir.path().join("guides").exists());
}

#[test]
fn definitions_check_of_a_broken_folder_names_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    import(dir.path());
    let good = x12gate(dir.path())
        .args(["definitions", "check", "guides/acme"])
        .output()
        .unwrap();
    assert_eq!(good.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&good.stdout).contains("1 set(s) load: 004010/850"));
    let file = dir.path().join("guides/acme/004010/850.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    let line = 1 + text.lines().position(|l| l == "PER M 3").unwrap();
    std::fs::write(&file, text.replace("PER M 3", "PER M three")).unwrap();
    let out = x12gate(dir.path())
        .args(["definitions", "check", "guides/acme"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("guides/acme/004010/850.toml: line {line}: ")),
        "{stderr}"
    );
    // A gateway whose partner names the folder refuses to start, naming both places;
    // `check` says so too.
    gateway(dir.path(), Some("guides/acme"));
    let out = x12gate(dir.path()).arg("check").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("partners.toml: line 9: partner \"acme\", key `definitions`: "),
        "{stdout}"
    );
    let out = x12gate(dir.path())
        .args(["process"])
        .arg(fixture("850-004010.x12"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("partners.toml: line 9: partner \"acme\", key `definitions`")
            && stderr.contains(&format!("004010/850.toml: line {line}: ")),
        "{stderr}"
    );
}

#[test]
fn definitions_list_shows_the_built_in_sets_and_the_loaded_guide() {
    let dir = tempfile::tempdir().unwrap();
    import(dir.path());
    gateway(dir.path(), Some("guides/acme"));
    let out = x12gate(dir.path())
        .args(["definitions", "list"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.starts_with("built in:\n  003010: 820 850 860\n")
            && stdout.contains("\n  004010: 110 180 204 "),
        "{stdout}"
    );
    assert!(
        stdout.contains("partner acme (ZZ:ACME): ")
            && stdout
                .contains("guides/acme\n  004010: 850 (replaces the built-in; 004010/850.toml)"),
        "{stdout}"
    );
}
