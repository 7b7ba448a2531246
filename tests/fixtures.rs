//! The fixtures: every valid sample validates clean and survives the JSON round trip; every
//! broken sample yields exactly the findings of its golden file; the oddity samples build the
//! tree they are there to prove.
//!
//! # Layout
//! - `fixtures/*.x12`: valid interchanges, real-shaped (850, 810, 856, 855, 997, 204, 214, 990,
//!   210, 940, 945, 820, 824, 846, 864, 830, 832, 852, 862, 944, 943, 947, 180, 816, 875,
//!   880, 861, 865, 870, 869, 866, 812, 322, 867, 417, 811, 310 and 315 in 004010 and
//!   005010, 753, 754 and 999 in 005010, the healthcare guides (837P 005010X222A1 and X222, 837I
//!   X223A2, 837D X224A2, 835 X221A1, 270/271 X279A1 and X279, 276/277 X212, 277CA X214,
//!   834 X220A1, 820 X218; 270/271 004010X092A1, 270 004010X092, 276/277 004010X093A1, 837P
//!   004010X098A1, 837I 004010X096A1, 837D 004010X097A1, 835 004010X091A1, 278
//!   004010X094A1, 834 004010X095A1, 820 004010X061A1), a 271 with repetitions and
//!   composites) and the reading oddities of SPEC section 2.
//! - `fixtures/broken/<rule>[-<variant>].x12`: one fault each, beside its golden
//!   `fixtures/broken/<rule>[-<variant>].findings`; every defined set has a segment error and an
//!   element error among them (issue 17), in two fixtures or, for some sets written earlier
//!   (753, 754, 820, 824, 830, 832, 846, 852, 862, 864, 943, 944, 947), both in one.
//!
//! # The `.findings` format
//! One line per expected finding, in the order `check::file` reports them:
//!
//! ```text
//! <rule> [<LIST> <code>] byte=<n> [segment=<n>] [set_segment=<n>] [element=<n>] [component=<n>]
//! se-segment-count AK502 4 byte=453 segment=15 set_segment=13 element=1
//! not-an-interchange byte=489
//! ```
//!
//! `rule` is the rule's kebab-case name, the code is `TA105 004`, `AK905 6` or `AK502 23`
//! (absent for file-level findings, which no acknowledgment can carry), and the keys are the
//! finding's `Position`: `byte` always, the others only when the finding has them (a
//! file-level finding has no segment). Lines starting with `#` say what the fault is; blank lines
//! are ignored. A broken fixture without a golden, a golden without a fixture, or an empty golden
//! fails the test, so nothing is skipped silently. When a golden no longer matches, the failure
//! prints the actual findings in this format, ready to paste after checking them.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::json;
use x12gate::finding::Finding;
use x12gate::translate::{parse_document, render_document, Document};
use x12gate::x12::{Delimiters, Interchange, Interchanges, Limits, Segment};

use crate::util::{fixture, root};

/// Every rule of `finding::Rule` that a broken fixture must exercise.
const RULES: &[&str] = &[
    "segment-id-invalid",
    "not-an-interchange",
    "isa-unreadable",
    "element-separator",
    "segment-terminator",
    "empty-file",
    "isa-field-width",
    "isa-field-value",
    "delimiters-not-distinct",
    "iea-missing",
    "iea-group-count",
    "iea-control-number",
    "segment-outside-envelope",
    "limit-exceeded",
    "interchange-too-large",
    "blank-before-segment",
    "final-terminator-missing",
    "isb-grade-of-service-invalid",
    "ise-delivery-date-invalid",
    "ise-delivery-time-invalid",
    "ise-delivery-time-code-invalid",
    "control-segment-element-too-many",
    "ta1-control-number-invalid",
    "ta1-date-invalid",
    "ta1-time-invalid",
    "ta1-ack-code-invalid",
    "ta1-note-code-invalid",
    "gs-functional-id-unknown",
    "gs-control-number-syntax",
    "gs-version-missing",
    "gs-version-too-long",
    "gs-version-unknown",
    "gs-agency-invalid",
    "gs-duplicate-control-number",
    "gs-date-time-invalid",
    "envelope-level-only",
    "ge-missing",
    "ge-set-count",
    "ge-control-number",
    "st-id-invalid",
    "st-not-in-functional-group",
    "st-control-number-invalid",
    "st-duplicate-control-number",
    "se-missing",
    "se-segment-count",
    "se-control-number",
    // Against the set's definition (schemas/): AK304 1-7, AK403 1-10.
    "segment-unrecognized",
    "segment-unexpected",
    "segment-missing",
    "loop-over-maximum",
    "segment-over-maximum-use",
    "segment-not-in-set",
    "segment-out-of-sequence",
    "element-missing",
    "element-conditional-missing",
    "element-too-many",
    "element-too-short",
    "element-too-long",
    "element-invalid-character",
    "element-invalid-code",
    "element-invalid-date",
    "element-invalid-time",
    "element-exclusion-violated",
    "element-not-used",
    // The HL tree.
    "hl-id-invalid",
    "hl-id-order",
    "hl-parent-unknown",
    "hl-parent-mismatch",
    "hl-child-code",
    "hl-children-none",
];

/// Rules no fixture here can produce, and where they are tested instead.
const RULES_TESTED_ELSEWHERE: &[(&str, &str)] = &[
    (
        "file-too-large",
        "decided from the file's size before reading: tests/cli.rs \
         limits_from_the_config_reject_an_oversized_file",
    ),
    (
        "unknown-sender",
        "needs the configuration: tests/acks.rs routing_rejects_other_receivers_and_unknown_senders",
    ),
    (
        "receiver-qualifier-not-ours",
        "needs the configuration: tests/acks.rs routing_rejects_other_receivers_and_unknown_senders",
    ),
    (
        "receiver-not-ours",
        "needs the configuration: tests/acks.rs routing_rejects_other_receivers_and_unknown_senders",
    ),
    (
        "gs-seen-before",
        "needs the registry: tests/process.rs a_group_control_number_reused_across_interchanges_is_rejected",
    ),
];

/// The valid fixtures the product relies on; a missing one is a failure, not a smaller loop.
const VALID: &[&str] = &[
    "850-004010.x12",
    "850-005010.x12",
    "810-004010.x12",
    "810-005010.x12",
    "856-004010.x12",
    "856-005010.x12",
    "855-004010.x12",
    "855-005010.x12",
    "997-004010.x12",
    "997-005010.x12",
    "delims-pipe-newline.x12",
    "delims-bang-quote.x12",
    "crlf.x12",
    "one-line.x12",
    "two-interchanges.x12",
    "bom.x12",
    "isa-in-data.x12",
    "ta1-only.x12",
    "ta1-with-997.x12",
    "isa11-letter-00501.x12",
    "blank-lines.x12",
    "850-004010-multi.x12",
    "850-005010-multi.x12",
    "856-004010-sopi.x12",
    "856-005010-sopi.x12",
    "repetitions-composites-005010.x12",
    "gs06-per-functional-group.x12",
    "isb-00501.x12",
    "isb-ise-00501.x12",
    "ta1-note-codes.x12",
    "204-004010.x12",
    "204-005010.x12",
    "214-004010.x12",
    "214-005010.x12",
    "990-004010.x12",
    "990-005010.x12",
    "210-004010.x12",
    "210-005010.x12",
    "940-004010.x12",
    "940-005010.x12",
    "945-004010.x12",
    "945-005010.x12",
    "820-004010.x12",
    "820-005010.x12",
    "824-004010.x12",
    "824-005010.x12",
    "846-004010.x12",
    "846-005010.x12",
    "864-004010.x12",
    "864-005010.x12",
    "830-004010.x12",
    "830-005010.x12",
    "832-004010.x12",
    "832-005010.x12",
    "852-004010.x12",
    "852-005010.x12",
    "862-004010.x12",
    "862-005010.x12",
    "944-004010.x12",
    "944-005010.x12",
    "943-004010.x12",
    "943-005010.x12",
    "947-004010.x12",
    "947-005010.x12",
    "753-005010.x12",
    "754-005010.x12",
    "180-004010.x12",
    "180-005010.x12",
    "816-004010.x12",
    "816-005010.x12",
    "875-004010.x12",
    "875-005010.x12",
    "880-004010.x12",
    "880-005010.x12",
    "861-004010.x12",
    "861-005010.x12",
    "865-004010.x12",
    "865-005010.x12",
    "870-004010.x12",
    "870-005010.x12",
    "869-004010.x12",
    "869-005010.x12",
    "866-004010.x12",
    "866-005010.x12",
    "812-004010.x12",
    "812-005010.x12",
    "999-005010.x12",
    "322-004010.x12",
    "322-005010.x12",
    "867-004010.x12",
    "867-005010.x12",
    "417-004010.x12",
    "417-005010.x12",
    "811-004010.x12",
    "811-005010.x12",
    "310-004010.x12",
    "310-005010.x12",
    "315-004010.x12",
    "315-005010.x12",
    "860-004010.x12",
    "860-005010.x12",
    "837-005010X222A1.x12",
    "835-005010X221A1.x12",
    "270-005010X279A1.x12",
    "271-005010X279A1.x12",
    "276-005010X212.x12",
    "277-005010X212.x12",
    "834-005010X220A1.x12",
    "837-005010X223A2.x12",
    "270-005010X279.x12",
    "271-005010X279.x12",
    "277-005010X214.x12",
    "837-005010X222.x12",
    "270-004010X092A1.x12",
    "271-004010X092A1.x12",
    "276-004010X093A1.x12",
    "837-004010X098A1.x12",
    "837-004010X096A1.x12",
    "835-004010X091A1.x12",
    "278-004010X094A1.x12",
    "270-004010X092.x12",
    "837-005010X224A2.x12",
    "820-005010X218.x12",
    "277-004010X093A1.x12",
    "837-004010X097A1.x12",
    "834-004010X095A1.x12",
    "820-004010X061A1.x12",
];

/// Valid fixtures whose bytes are not what the renderer writes (a BOM and leading blank lines,
/// blank lines between segments); for them the rendered form must be a fixed point instead.
const NOT_CANONICAL: &[&str] = &["bom.x12", "blank-lines.x12"];

/// Broken fixtures read with tighter limits than the defaults, so a breach stays small.
fn limits_for(case: &str) -> Limits {
    match case {
        "limit-exceeded-segments" => Limits {
            max_segments_per_set: 9,
            ..Limits::default()
        },
        "interchange-too-large" => Limits {
            max_interchange_bytes: 400,
            ..Limits::default()
        },
        "limit-exceeded-set-bytes" => Limits {
            max_set_bytes: 150,
            ..Limits::default()
        },
        "limit-exceeded-element" => Limits {
            max_element_len: 60,
            ..Limits::default()
        },
        _ => Limits::default(),
    }
}

// ------------------------------------------------------------------------------------------
// helpers

/// Files in `dir` ending in `.ext`, sorted by name.
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn read(name: &str) -> Vec<u8> {
    let path = fixture(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn broken_dir() -> PathBuf {
    root().join("fixtures").join("broken")
}

/// A finding as one line of a `.findings` file.
fn golden_line(f: &Finding) -> String {
    let mut s = f.rule.name().to_string();
    if let Some(code) = f.code {
        write!(s, " {code}").ok();
    }
    let p = &f.position;
    write!(s, " byte={}", p.byte).ok();
    if p.segment > 0 {
        write!(s, " segment={}", p.segment).ok();
    }
    if let Some(n) = p.set_segment {
        write!(s, " set_segment={n}").ok();
    }
    if let Some(n) = p.element {
        write!(s, " element={n}").ok();
    }
    if let Some(n) = p.component {
        write!(s, " component={n}").ok();
    }
    s
}

/// The expected lines of a golden file: comments and blank lines dropped, spaces normalised.
fn golden(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// A readable account of two different lists of lines.
fn diff(want: &[String], got: &[String], messages: &[String]) -> String {
    let mut s = String::new();
    for w in want.iter().filter(|w| !got.contains(w)) {
        writeln!(s, "    - {w}").ok();
    }
    for g in got.iter().filter(|g| !want.contains(g)) {
        writeln!(s, "    + {g}").ok();
    }
    if s.is_empty() {
        s.push_str("    (same lines, different order)\n");
    }
    s.push_str("  actual findings (golden format):\n");
    for (g, m) in got.iter().zip(messages) {
        writeln!(s, "    {g}\n      # {m}").ok();
    }
    s
}

fn interchanges(input: &[u8]) -> Vec<Interchange<'_>> {
    Interchanges::new(input, Limits::default())
        .map(|r| r.unwrap_or_else(|e| panic!("read error: {e}")))
        .collect()
}

/// Every segment of an interchange in file order, envelopes included.
fn segments<'a>(ic: &Interchange<'a>) -> Vec<Segment<'a>> {
    let mut v = vec![ic.isa.segment];
    v.extend(ic.isb);
    v.extend(ic.ise);
    v.extend(ic.ta1.iter().copied());
    for g in &ic.groups {
        v.push(g.gs);
        for set in &g.sets {
            v.push(set.st);
            v.extend(set.body.segments());
            v.extend(set.se);
        }
        v.extend(g.ge);
    }
    v.extend(ic.iea);
    v
}

fn find<'a>(ic: &Interchange<'a>, id: &str, element: usize, value: &str) -> Option<Segment<'a>> {
    segments(ic)
        .into_iter()
        .find(|s| s.id == id.as_bytes() && s.text(element) == value)
}

fn render(doc: &Document) -> Vec<u8> {
    let json = serde_json::to_vec(doc).expect("a document serialises");
    let mut out = Vec::new();
    render_document(&json, &mut out).unwrap_or_else(|e| panic!("render: {e}"));
    out
}

// ------------------------------------------------------------------------------------------
// valid fixtures

#[test]
fn every_listed_valid_fixture_exists_and_none_is_unlisted() {
    let present: BTreeSet<String> = files(&root().join("fixtures"), "x12")
        .iter()
        .map(|p| file_name(p))
        .collect();
    let listed: BTreeSet<String> = VALID.iter().map(|s| s.to_string()).collect();
    let missing: Vec<_> = listed.difference(&present).collect();
    let unlisted: Vec<_> = present.difference(&listed).collect();
    assert!(
        missing.is_empty() && unlisted.is_empty(),
        "fixtures/ and VALID disagree: missing {missing:?}, not listed {unlisted:?}"
    );
}

#[test]
fn valid_fixtures_validate_clean() {
    let mut failures = String::new();
    for name in VALID {
        let input = read(name);
        let findings = x12gate::check::file(
            &input,
            Limits::default(),
            &x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap()),
        );
        // A set no definition reads (the 271 of the repetitions fixture) is noted; that is
        // about x12gate, not a finding of the file.
        let findings: Vec<_> = findings
            .into_iter()
            .filter(|f| f.rule != x12gate::finding::Rule::EnvelopeLevelOnly)
            .collect();
        if !findings.is_empty() {
            writeln!(failures, "{name}:").ok();
            for f in &findings {
                writeln!(failures, "    {f}").ok();
            }
        }
    }
    assert!(
        failures.is_empty(),
        "valid fixtures with findings:\n{failures}"
    );
}

#[test]
fn valid_fixtures_round_trip_through_json() {
    let mut failures = String::new();
    for name in VALID {
        let input = read(name);
        let doc = match parse_document(&input, Limits::default()) {
            Ok(doc) => doc,
            Err(e) => {
                writeln!(failures, "{name}: parse: {e}").ok();
                continue;
            }
        };
        let rendered = render(&doc);
        match parse_document(&rendered, Limits::default()) {
            Ok(again) if again == doc => {}
            Ok(_) => {
                writeln!(
                    failures,
                    "{name}: the rendered X12 parses to another document"
                )
                .ok();
            }
            Err(e) => {
                writeln!(failures, "{name}: the rendered X12 does not parse: {e}").ok();
            }
        }
        let canonical = !NOT_CANONICAL.contains(name);
        if canonical && rendered != input {
            let at = rendered
                .iter()
                .zip(&input)
                .position(|(a, b)| a != b)
                .unwrap_or(rendered.len().min(input.len()));
            writeln!(
                failures,
                "{name}: rendering is not byte-identical; first difference at byte {at}: \
                 rendered {:?}, file {:?}",
                String::from_utf8_lossy(&rendered[at..(at + 40).min(rendered.len())]),
                String::from_utf8_lossy(&input[at..(at + 40).min(input.len())]),
            )
            .ok();
        }
        if !canonical {
            if rendered == input {
                writeln!(
                    failures,
                    "{name}: is canonical after all; drop it from NOT_CANONICAL"
                )
                .ok();
            }
            let doc2 = parse_document(&rendered, Limits::default());
            if doc2.map(|d| render(&d)).ok().as_ref() != Some(&rendered) {
                writeln!(
                    failures,
                    "{name}: rendering the rendered form changes it again"
                )
                .ok();
            }
        }
    }
    assert!(failures.is_empty(), "round trip failures:\n{failures}");
}

// ------------------------------------------------------------------------------------------
// broken fixtures

#[test]
fn broken_fixtures_match_their_goldens() {
    let dir = broken_dir();
    let cases: BTreeSet<String> = files(&dir, "x12").iter().map(|p| stem(p)).collect();
    let goldens: BTreeSet<String> = files(&dir, "findings").iter().map(|p| stem(p)).collect();
    let mut failures = String::new();
    for c in cases.difference(&goldens) {
        writeln!(failures, "{c}.x12 has no {c}.findings").ok();
    }
    for c in goldens.difference(&cases) {
        writeln!(failures, "{c}.findings has no {c}.x12").ok();
    }
    for case in cases.intersection(&goldens) {
        let input = std::fs::read(dir.join(format!("{case}.x12"))).expect("fixture readable");
        let text =
            std::fs::read_to_string(dir.join(format!("{case}.findings"))).expect("golden readable");
        let want = golden(&text);
        let findings = x12gate::check::file(
            &input,
            limits_for(case),
            &x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap()),
        );
        let got: Vec<String> = findings.iter().map(golden_line).collect();
        let messages: Vec<String> = findings.iter().map(ToString::to_string).collect();
        if want.is_empty() {
            writeln!(
                failures,
                "{case}.findings expects nothing: a broken fixture must carry a fault"
            )
            .ok();
        } else if want != got {
            writeln!(failures, "{case}:\n{}", diff(&want, &got, &messages)).ok();
        }
    }
    assert!(
        cases.len() >= RULES.len(),
        "fewer broken fixtures than rules"
    );
    assert!(
        failures.is_empty(),
        "broken fixtures whose findings differ from the golden files \
         (- expected, + actual):\n{failures}"
    );
}

#[test]
fn every_rule_has_a_broken_fixture() {
    let dir = broken_dir();
    let mut used = BTreeSet::new();
    for path in files(&dir, "findings") {
        let text = std::fs::read_to_string(&path).expect("golden readable");
        for line in golden(&text) {
            let rule = line.split(' ').next().unwrap_or_default().to_string();
            used.insert(rule);
        }
    }
    let known: BTreeSet<&str> = RULES
        .iter()
        .copied()
        .chain(RULES_TESTED_ELSEWHERE.iter().map(|(r, _)| *r))
        .collect();
    let uncovered: Vec<_> = RULES.iter().filter(|r| !used.contains(**r)).collect();
    // Every rule the crate has is listed here or says where it is tested.
    let unlisted: Vec<_> = x12gate::finding::Rule::ALL
        .iter()
        .map(|r| r.name())
        .filter(|r| !known.contains(r))
        .collect();
    assert!(
        unlisted.is_empty(),
        "rules in neither RULES nor RULES_TESTED_ELSEWHERE: {unlisted:?}"
    );
    let unknown: Vec<_> = used
        .iter()
        .filter(|r| !known.contains(r.as_str()))
        .collect();
    assert!(
        uncovered.is_empty(),
        "rules without a broken fixture: {uncovered:?}"
    );
    assert!(
        unknown.is_empty(),
        "golden files name rules that are not in RULES: {unknown:?}"
    );
    // Each broken fixture's name starts with the rule it breaks.
    for path in files(&dir, "x12") {
        let case = stem(&path);
        assert!(
            known.iter().any(|r| case.starts_with(r)),
            "{case}.x12 is not named after a rule"
        );
    }
}

#[test]
fn findings_with_an_element_point_at_its_value() {
    // Cross-checks the goldens' byte offsets: an element's offset follows its separator.
    let dir = broken_dir();
    for path in files(&dir, "x12") {
        let case = stem(&path);
        let input = std::fs::read(&path).expect("fixture readable");
        let Some(Ok(ic)) = Interchanges::new(&input, limits_for(&case)).next() else {
            continue;
        };
        let sep = ic.delimiters().element;
        for f in x12gate::check::file(
            &input,
            limits_for(&case),
            &x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap()),
        ) {
            let Some(element) = f.position.element else {
                continue;
            };
            let Some(segment) = segments(&ic)
                .into_iter()
                .find(|s| s.ordinal == f.position.segment)
            else {
                continue;
            };
            if segment.element(usize::from(element)).is_some() {
                assert_eq!(
                    input.get(f.position.byte.wrapping_sub(1)),
                    Some(&sep),
                    "{case}: {f}"
                );
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// the oddities: the tree facts each fixture is there to prove

#[test]
fn ta1_only_holds_one_ta1_and_no_group() {
    let input = read("ta1-only.x12");
    let ics = interchanges(&input);
    assert_eq!(ics.len(), 1);
    let ic = &ics[0];
    assert!(ic.groups.is_empty());
    assert_eq!(ic.ta1.len(), 1);
    assert_eq!(ic.ta1[0].text(1), "000000112");
    assert_eq!(ic.ta1[0].text(4), "A");
    assert_eq!(ic.iea.map(|s| s.text(1)), Some("0"));
}

#[test]
fn ta1_with_997_holds_both() {
    let input = read("ta1-with-997.x12");
    let ics = interchanges(&input);
    assert_eq!(ics[0].ta1.len(), 1);
    assert_eq!(ics[0].groups.len(), 1);
    assert_eq!(ics[0].groups[0].gs.text(1), "FA");
}

#[test]
fn isb_and_ise_are_read_and_carried_by_the_json_form() {
    let input = read("isb-ise-00501.x12");
    let ic = &interchanges(&input)[0];
    assert_eq!(ic.isb.map(|s| s.text(1)), Some("2"));
    assert_eq!(
        ic.ise.map(|s| (s.text(1), s.text(3))),
        Some(("240213", "ET"))
    );
    let doc = parse_document(&input, Limits::default()).expect("parses");
    let json = serde_json::to_value(&doc).expect("serialises");
    assert_eq!(json["interchanges"][0]["isb"], json!(["2"]));
    assert_eq!(
        json["interchanges"][0]["ise"],
        json!(["240213", "0600", "ET"])
    );
    // Rendered back, they stand where they were (the round trip test checks every byte).
    let rendered = String::from_utf8(render(&doc)).expect("text");
    assert!(rendered.contains("~\nISB*2~\nISE*240213*0600*ET~\nGS*"));
}

#[test]
fn two_interchanges_each_with_its_own_delimiters() {
    let input = read("two-interchanges.x12");
    let ics = interchanges(&input);
    assert_eq!(ics.len(), 2);
    assert_eq!(ics[0].isa.control_number(), "000000112");
    assert_eq!(ics[1].isa.control_number(), "000000505");
    assert_eq!(ics[0].delimiters(), Delimiters::COMMON);
    assert_eq!(
        ics[1].delimiters(),
        Delimiters {
            element: b'|',
            component: b'\\',
            repetition: None,
            segment: b'~',
        }
    );
    assert_eq!(ics[0].span.end, ics[1].span.start);
    assert_eq!(ics[1].span.end, input.len());
    assert_eq!(ics[1].groups[0].sets.get(0).unwrap().st.text(1), "997");
}

#[test]
fn isa_and_iea_inside_data_are_data() {
    let input = read("isa-in-data.x12");
    let ics = interchanges(&input);
    assert_eq!(ics.len(), 1);
    let ic = &ics[0];
    assert!(ic.stray.is_empty());
    let n1 = find(ic, "N1", 1, "ST").expect("N1*ST");
    assert_eq!(n1.text(2), "ISAAC HARDWARE DC");
    assert!(find(ic, "REF", 2, "IEA").is_some());
    assert!(find(ic, "MSG", 1, "ISA AND IEA IN TEXT ARE DATA").is_some());
    assert_eq!(ic.groups[0].sets.len(), 1);
}

#[test]
fn pipe_newline_delimiters() {
    let input = read("delims-pipe-newline.x12");
    let ics = interchanges(&input);
    let ic = &ics[0];
    assert_eq!(
        ic.delimiters(),
        Delimiters {
            element: b'|',
            component: b'^',
            repetition: Some(b'{'),
            segment: b'\n',
        }
    );
    assert_eq!(ic.suffix, b"");
    let r = find(ic, "REF", 1, "ZZ").expect("REF*ZZ");
    let e = r.elements().nth(3).expect("REF04");
    assert!(e.is_composite());
    assert_eq!(
        e.components().collect::<Vec<_>>(),
        vec![&b"PD"[..], b"SP24"]
    );
    assert_eq!(ic.groups[0].sets.get(0).unwrap().body.count, 32);
}

#[test]
fn bang_quote_delimiters() {
    let input = read("delims-bang-quote.x12");
    let ic = &interchanges(&input)[0];
    assert_eq!(
        ic.delimiters(),
        Delimiters {
            element: b'!',
            component: b'>',
            repetition: None,
            segment: b'\'',
        }
    );
    assert!(find(ic, "ACK", 1, "IR").is_some());
}

#[test]
fn line_endings_crlf_one_line_and_blank_lines() {
    let crlf = read("crlf.x12");
    let ic = &interchanges(&crlf)[0];
    assert_eq!(ic.suffix, b"\r\n");
    let doc = parse_document(&crlf, Limits::default()).expect("parses");
    assert_eq!(doc.interchanges[0].delimiters.line_ending, "\r\n");

    let one = read("one-line.x12");
    assert!(!one.contains(&b'\n') && !one.contains(&b'\r'));
    let ic = &interchanges(&one)[0];
    assert_eq!(ic.suffix, b"");
    assert_eq!(ic.span, 0..one.len());

    let blank = read("blank-lines.x12");
    let ic = &interchanges(&blank)[0];
    let set = &ic.groups[0].sets.get(0).unwrap();
    assert!(set.body.segments().all(|s| !s.id.is_empty()));
    assert_eq!(set.se.map(|s| s.text(1)), Some("19"));
    assert_eq!(set.counted_segments(), 19);
}

#[test]
fn bom_and_leading_blank_lines_are_skipped() {
    let input = read("bom.x12");
    assert!(input.starts_with(b"\xEF\xBB\xBF"));
    let ics = interchanges(&input);
    assert_eq!(ics.len(), 1);
    let start = ics[0].span.start;
    assert_eq!(&input[start..start + 4], b"ISA*");
    assert_eq!(ics[0].isa.segment.offset, start);
    let rendered = render(&parse_document(&input, Limits::default()).expect("parses"));
    assert_eq!(&rendered[..], &input[start..]);
}

#[test]
fn letter_in_isa11_of_00501_is_no_repetition_separator() {
    let input = read("isa11-letter-00501.x12");
    let ic = &interchanges(&input)[0];
    assert_eq!(ic.isa.version(), "00501");
    assert_eq!(ic.isa.field(11), b"U");
    assert_eq!(ic.delimiters().repetition, None);
    assert_eq!(find(ic, "CUR", 1, "BY").map(|s| s.text(2)), Some("USD"));
    assert_eq!(
        find(ic, "N1", 1, "VN").map(|s| s.text(2)),
        Some("UNITED UTILITY SUPPLY")
    );
    let pid = find(ic, "PID", 5, "BOLT 1/4^20 UNC ZINC").expect("PID05 with ^ kept whole");
    assert!(!pid.elements().nth(4).expect("PID05").is_repeated());
}

#[test]
fn repetitions_and_composites_in_005010() {
    let input = read("repetitions-composites-005010.x12");
    let ic = &interchanges(&input)[0];
    assert_eq!(ic.delimiters(), Delimiters::COMMON);
    let eb = find(ic, "EB", 1, "1").expect("EB*1");
    let eb03 = eb.elements().nth(2).expect("EB03");
    let codes: Vec<&[u8]> = eb03.repetitions().map(|r| r.value).collect();
    assert_eq!(codes.len(), 11);
    assert_eq!(codes[0], b"30");
    // The generic JSON form makes both explicit.
    let doc = parse_document(&input, Limits::default()).expect("parses");
    let doc = serde_json::to_value(&doc).expect("serialises");
    let body = doc["interchanges"][0]["groups"][0]["sets"][0]["segments"]
        .as_array()
        .expect("segments");
    let ebs: Vec<_> = body.iter().filter(|s| s["id"] == "EB").collect();
    assert_eq!(
        ebs[0]["elements"][2]["repeats"].as_array().map(Vec::len),
        Some(11)
    );
    assert_eq!(
        ebs[3]["elements"][12],
        json!({"components": ["HC", "99213"]})
    );
    assert_eq!(ebs[5]["elements"][2], json!({"repeats": ["UC", "86"]}));
}

#[test]
fn ship_notice_hierarchy_is_real_shaped() {
    for (name, levels) in [
        ("856-004010.x12", "SOPIPII"),
        ("856-005010.x12", "SOTPIPII"),
    ] {
        let input = read(name);
        let ic = &interchanges(&input)[0];
        let hl: String = ic.groups[0]
            .sets
            .get(0)
            .unwrap()
            .body
            .segments()
            .filter(|s| s.is(b"HL"))
            .map(|s| s.text(3))
            .collect();
        assert_eq!(hl, levels, "{name}");
    }
}

#[test]
fn valid_fixtures_carry_distinct_control_numbers_per_sender() {
    let mut seen = BTreeSet::new();
    for name in VALID {
        let input = read(name);
        for ic in interchanges(&input) {
            let key = format!(
                "{}:{}:{}",
                ic.isa.trimmed(5),
                ic.isa.trimmed(6),
                ic.isa.control_number()
            );
            assert!(seen.insert(key.clone()), "{name}: {key} used twice");
        }
    }
}

#[test]
fn every_defined_set_has_a_broken_fixture_with_a_segment_and_an_element_error() {
    // Set id -> (an AK304 finding seen, an AK403 finding seen) in the broken fixtures'
    // goldens whose file holds that set.
    let mut seen: std::collections::BTreeMap<String, (bool, bool)> = Default::default();
    for path in files(&broken_dir(), "x12") {
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        let golden_path = path.with_extension("findings");
        let findings = golden(&std::fs::read_to_string(&golden_path).unwrap_or_default());
        let segment = findings.iter().any(|l| l.contains(" AK304 "));
        let element = findings.iter().any(|l| l.contains(" AK403 "));
        for def in x12gate::schema::builtin().unwrap().all() {
            if text.contains(&format!("ST*{}*", def.id)) {
                let e = seen.entry(def.id.clone()).or_default();
                e.0 |= segment;
                e.1 |= element;
            }
        }
    }
    let missing: Vec<String> = x12gate::schema::builtin()
        .unwrap()
        .all()
        .iter()
        .map(|d| d.id.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter_map(|id| match seen.get(&id) {
            Some((true, true)) => None,
            Some((s, e)) => Some(format!("{id}: segment error {s}, element error {e}")),
            None => Some(format!("{id}: no broken fixture")),
        })
        .collect();
    assert!(missing.is_empty(), "{missing:#?}");
}
