//! Business documents as the unit of exactly-once, through the real binary: a PO resent in a
//! new interchange, a conflicting PO, a change before its original, a stale change, many
//! processes on one PO, crashes between claim and completion, and `scan` of an archive.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_x12gate");

/// A gateway in a temporary folder, accepting ACME; `extra` goes into ACME's partner table.
struct Gate {
    dir: tempfile::TempDir,
}

impl Gate {
    fn new(extra: &str) -> Gate {
        Gate::with_gateway("", extra)
    }

    /// A gateway with `gateway` among its `[gateway]` settings, and `extra` after the
    /// partner's.
    fn with_gateway(gateway: &str, extra: &str) -> Gate {
        Gate::on("data/x12gate.db", gateway, extra)
    }

    /// [`Gate::with_gateway`] with its registry in `database` (a file, or a PostgreSQL URL).
    fn on(database: &str, gateway: &str, extra: &str) -> Gate {
        let dir = tempfile::tempdir().unwrap();
        let gateway = if gateway.contains("lease_seconds") {
            gateway.to_string()
        } else {
            format!("lease_seconds = 300\n{gateway}")
        };
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
database = "{database}"
{gateway}

[[partner]]
name = "Acme Retail"
id_qualifier = "ZZ"
id = "ACME"
{extra}
"#
            ),
        )
        .unwrap();
        fs::create_dir(dir.path().join("in")).unwrap();
        let gate = Gate { dir };
        let init = gate.run(&["init"], None);
        assert!(init.0.success(), "{}", init.2);
        gate
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn out(&self) -> PathBuf {
        self.root().join("data/out")
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.root().join("in").join(name);
        fs::write(&path, text).unwrap();
        path
    }

    fn command(&self, args: &[&str], failpoints: Option<&str>) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(self.root())
            .env_remove("FAILPOINTS")
            .env_remove("RUST_LOG")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(f) = failpoints {
            c.env("FAILPOINTS", f);
        }
        c
    }

    /// Runs x12gate: (status, stdout, stderr).
    fn run(
        &self,
        args: &[&str],
        failpoints: Option<&str>,
    ) -> (std::process::ExitStatus, String, String) {
        let out = self.command(args, failpoints).output().unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `process --json --no-wait` of `file` again (with `extra` options), as a rerun after a
    /// kill takes its claims over: (status, stdout, stderr).
    #[cfg(feature = "failpoints")]
    fn take_over(&self, file: &Path, extra: &[&str]) -> (std::process::ExitStatus, String, String) {
        let file = file.display().to_string();
        let mut args = vec!["process", "--json", "--no-wait"];
        args.extend_from_slice(extra);
        args.push(&file);
        self.run(&args, None)
    }

    /// `process --json FILES`: the reports, asserting the exit code.
    fn process(&self, files: &[&Path], code: i32) -> Vec<Value> {
        let mut args = vec!["process".to_string(), "--json".to_string()];
        args.extend(files.iter().map(|f| f.display().to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, stdout, stderr) = self.run(&args, None);
        assert_eq!(status.code(), Some(code), "{stdout}\n{stderr}");
        lines(&stdout)
    }

    /// Every document file in `out/`, by name.
    /// The documents handed over (kept in the registry and queued for their destinations),
    /// by file name, each read back as its destinations get it; and every file in `out/`,
    /// which must be one of them.
    fn delivered(&self) -> BTreeMap<String, Value> {
        let mut found = BTreeMap::new();
        for row in self.documents(&["--all"]) {
            // Handed over by us (a backfilled sighting, recorded by `scan`, names no file).
            if row["delivery"] != "delivered" || row["output"].is_null() {
                continue;
            }
            let (key, id) = (row["key"].as_str().unwrap(), row["id"].to_string());
            let (status, body, stderr) = self.run(&["documents", "body", key, "--id", &id], None);
            assert!(status.success(), "{key}: no JSON kept: {stderr}");
            let doc: Value = serde_json::from_str(&body)
                .unwrap_or_else(|err| panic!("{key}: not whole JSON: {err}"));
            found.insert(row["output"].as_str().unwrap().to_string(), doc);
        }
        for e in fs::read_dir(self.out()).into_iter().flatten() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || e.path().is_dir() {
                continue;
            }
            let doc: Value = serde_json::from_slice(&fs::read(e.path()).unwrap())
                .unwrap_or_else(|err| panic!("{name}: not whole JSON: {err}"));
            assert_eq!(
                found.get(&name),
                Some(&doc),
                "{name}: a file of no document handed over"
            );
        }
        found
    }

    fn documents(&self, args: &[&str]) -> Vec<Value> {
        let mut all = vec!["documents", "--json"];
        all.extend_from_slice(args);
        let (status, stdout, stderr) = self.run(&all, None);
        assert!(status.success(), "{stdout}\n{stderr}");
        lines(&stdout)
    }
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// One interchange from ACME: ISA13 and GS06 `n`, one set per body (ST02 from `st02`),
/// in a group of `gs01`, with element separator `e` and terminator `t`.
fn interchange(
    n: u32,
    gs01: &str,
    set: &str,
    bodies: &[String],
    st02: u32,
    e: char,
    t: char,
) -> String {
    let mut out = format!(
        "ISA{e}00{e}          {e}00{e}          {e}ZZ{e}ACME           {e}ZZ{e}X12GATE        {e}2401{:02}{e}0930{e}U{e}00401{e}{n:09}{e}0{e}P{e}>{t}\nGS{e}{gs01}{e}ACME{e}X12GATE{e}202401{:02}{e}0930{e}{n}{e}X{e}004010{t}\n",
        n % 28 + 1,
        n % 28 + 1
    );
    for (i, body) in bodies.iter().enumerate() {
        let id = format!("{:04}", st02 + i as u32);
        let segments = body.matches('~').count() + 2;
        let body = body
            .replace('*', &e.to_string())
            .replace('~', &format!("{t}\n"));
        out.push_str(&format!(
            "ST{e}{set}{e}{id}{t}\n{body}SE{e}{segments}{e}{id}{t}\n"
        ));
    }
    out.push_str(&format!(
        "GE{e}{}{e}{n}{t}\nIEA{e}1{e}{n:09}{t}\n",
        bodies.len()
    ));
    out
}

/// An 850 body: PO `po`, purpose `purpose`, first line quantity `qty`.
fn po(po: &str, purpose: &str, qty: u32) -> String {
    format!(
        "BEG*{purpose}*SA*{po}**20240115~PO1*1*{qty}*EA*4.25*PE*UP*012345678905~PO1*2*48*CA*18.90*PE*UP*012345678912~CTT*2~"
    )
}

/// An 860 body: a change of PO `po` with change sequence `version`.
fn change(po: &str, version: u32) -> String {
    format!("BCH*04*SA*{po}**{version}*20240116~POC*1*CA*10*5*EA*4.25*PE*UP*012345678905~")
}

fn an_850(n: u32, body: String) -> String {
    interchange(n, "PO", "850", &[body], 1, '*', '~')
}

fn an_860(n: u32, body: String) -> String {
    interchange(n, "PC", "860", &[body], 1, '*', '~')
}

/// The billing provider of the claims in these tests.
const NPI: &str = "1234567893";

/// Claims of one subscriber: (CLM01, amount, CLM05-3).
type Claims<'a> = &'a [(&'a str, u32, u32)];

/// An 837P (005010X222A1) from ACME, interchange and group `n`, batch `batch` (BHT03), for
/// the billing provider `npi`: one subscriber level (2000B) per entry, with its claims
/// `(CLM01, amount, CLM05-3)`.
fn an_837(n: u32, batch: &str, npi: &str, subscribers: &[(&str, Claims<'_>)]) -> String {
    let mut body = format!(
        "BHT*0019*00*{batch}*20240305*1130*CH~NM1*41*2*ACME CLINIC*****46*ACME01~PER*IC*BILLING OFFICE*TE*5555550142~NM1*40*2*EXAMPLE HEALTH PLAN*****46*841234567~HL*1**20*1~PRV*BI*PXC*207Q00000X~NM1*85*2*ACME CLINIC*****XX*{npi}~N3*1200 MAPLE AVENUE~N4*SPRINGFIELD*IL*627040000~REF*EI*371234567~"
    );
    for (i, (subscriber, claims)) in subscribers.iter().enumerate() {
        body.push_str(&format!(
            "HL*{}*1*22*0~SBR*P*18*GRP-55120******CI~NM1*IL*1*DOE*{subscriber}****MI*{subscriber}~NM1*PR*2*EXAMPLE HEALTH PLAN*****PI*841234567~",
            i + 2
        ));
        for (claim, amount, frequency) in *claims {
            body.push_str(&format!(
                "CLM*{claim}*{amount}***11:B:{frequency}*Y*A*Y*Y~HI*ABK:J029~LX*1~SV1*HC:99212*{amount}*UN*1***1~DTP*472*D8*20240229~"
            ));
        }
    }
    let segments = body.matches('~').count() + 2;
    format!(
        "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240305*1130*^*00501*{n:09}*0*P*:~\nGS*HC*ACME*X12GATE*20240305*1130*{n}*X*005010X222A1~\nST*837*0001*005010X222A1~\n{}SE*{segments}*0001~\nGE*1*{n}~\nIEA*1*{n:09}~\n",
        body.replace('~', "~\n")
    )
}

/// The claims (CLM01) a delivered 837 document holds, by subscriber (NM109 of 2010BA).
fn claims_in(doc: &Value) -> Vec<(String, Vec<String>)> {
    let content = &doc["set"]["content"];
    let mut found = Vec::new();
    for provider in content["2000A_loop"].as_array().expect("2000A_loop") {
        for subscriber in provider["2000B_loop"].as_array().expect("2000B_loop") {
            let id = subscriber["2010BA_loop"]["NM1"]["identification_code_09"]
                .as_str()
                .unwrap()
                .to_string();
            let claims = subscriber["2300_loop"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    c["CLM"]["claim_submitter_s_identifier_01"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect();
            found.push((id, claims));
        }
    }
    found
}

fn only_document(report: &Value) -> &Value {
    let docs = report["documents"].as_array().expect("a documents array");
    assert_eq!(docs.len(), 1, "{report}");
    &docs[0]
}

#[test]
fn a_po_resent_in_a_new_interchange_is_a_duplicate_document_and_not_delivered_again() {
    let gate = Gate::new("");
    let first = gate.write("a.x12", &an_850(101, po("PO-1", "00", 120)));
    // New ISA13, GS06, ST02, envelope dates and delimiters: the partner's translator
    // re-enveloped it.
    let resend = gate.write(
        "b.x12",
        &interchange(777, "PO", "850", &[po("PO-1", "00", 120)], 42, '|', '^'),
    );
    let r = gate.process(&[&first], 0);
    assert_eq!(only_document(&r[0])["disposition"], "new");
    let r = gate.process(&[&resend], 0);
    assert_eq!(
        r[0]["disposition"], "accepted",
        "acknowledged as its syntax deserves"
    );
    assert_eq!(r[0]["acks"].as_array().unwrap().len(), 1, "{}", r[0]);
    let doc = only_document(&r[0]);
    assert_eq!(doc["disposition"], "duplicate");
    assert_eq!(doc["st02"], "0042");
    assert_eq!(doc["duplicate_of"], "ZZ:ACME:000000101");
    assert_eq!(doc["key"], "ZZ:ACME:850:PO-1:00:");
    let delivered = gate.delivered();
    assert_eq!(delivered.len(), 1, "{:?}", delivered.keys());
    let (name, file) = delivered.iter().next().unwrap();
    assert_eq!(name, "ZZ_ACME_850_PO-1_00_.json");
    assert_eq!(file["document_key"], "ZZ:ACME:850:PO-1:00:");
    assert_eq!(file["delivery"]["interchange"], "ZZ:ACME:000000101");
    assert_eq!(file["envelope"]["isa13"], "000000101");
    assert_eq!(
        file["set"]["content"]["BEG"]["purchase_order_number_03"],
        "PO-1"
    );
}

#[test]
fn with_deliver_a_duplicate_document_is_delivered_again_saying_of_what() {
    let gate = Gate::new("duplicate_documents = \"deliver\"");
    let first = gate.write("a.x12", &an_850(101, po("PO-1", "00", 120)));
    let resend = gate.write("b.x12", &an_850(102, po("PO-1", "00", 120)));
    gate.process(&[&first, &resend], 0);
    let delivered = gate.delivered();
    assert_eq!(delivered.len(), 2, "{:?}", delivered.keys());
    let again: Vec<&Value> = delivered
        .values()
        .filter(|d| d["delivery"]["disposition"] == "duplicate")
        .collect();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0]["delivery"]["duplicate_of"], "ZZ:ACME:000000101");
    assert_eq!(again[0]["delivery"]["interchange"], "ZZ:ACME:000000102");
}

#[test]
fn a_copy_purpose_is_never_delivered_as_new() {
    let gate = Gate::new("");
    let original = gate.write("a.x12", &an_850(101, po("PO-1", "00", 120)));
    let copy = gate.write("b.x12", &an_850(102, po("PO-1", "07", 120)));
    let r = gate.process(&[&original, &copy], 0);
    assert_eq!(only_document(&r[1])["disposition"], "duplicate", "{}", r[1]);
    assert_eq!(gate.delivered().len(), 1);
}

#[test]
fn the_same_po_number_with_other_lines_is_held_then_released_once_or_discarded() {
    let gate = Gate::new("");
    let a = gate.write("a.x12", &an_850(101, po("PO-1", "00", 120)));
    let b = gate.write("b.x12", &an_850(102, po("PO-1", "00", 121)));
    let c = gate.write("c.x12", &an_850(103, po("PO-2", "00", 120)));
    let d = gate.write("d.x12", &an_850(104, po("PO-2", "00", 999)));
    let (status, stdout, stderr) = gate.run(
        &[
            "process",
            "--json",
            &a.display().to_string(),
            &b.display().to_string(),
        ],
        None,
    );
    assert_eq!(status.code(), Some(0), "{stdout}{stderr}");
    let r = lines(&stdout);
    assert_eq!(only_document(&r[1])["disposition"], "conflict");
    assert!(
        stderr.contains("CONFLICT") && stderr.contains("earlier_fingerprint"),
        "{stderr}"
    );
    assert_eq!(gate.delivered().len(), 1, "the conflict is not delivered");
    let held = gate.documents(&["--held"]);
    assert_eq!(held.len(), 1, "{held:?}");
    let (_, metrics, _) = gate.run(&["metrics"], None);
    assert!(
        metrics.contains("x12gate_documents_open{partner=\"ZZ:ACME\",delivery=\"held\"} 1"),
        "{metrics}"
    );
    assert_eq!(held[0]["interchange"], "ZZ:ACME:000000102");
    assert_eq!(held[0]["delivery"], "held");

    let (status, stdout, _) = gate.run(&["documents", "release", "ZZ:ACME:850:PO-1:00:"], None);
    assert!(status.success(), "{stdout}");
    let delivered = gate.delivered();
    assert_eq!(delivered.len(), 2, "{:?}", delivered.keys());
    let released: Vec<&Value> = delivered
        .values()
        .filter(|d| d["delivery"]["interchange"] == "ZZ:ACME:000000102")
        .collect();
    assert_eq!(released.len(), 1);
    assert_eq!(
        released[0]["set"]["content"]["PO1_loop"][0]["PO1"]["quantity_ordered_02"],
        "121"
    );
    // Once: nothing is held any more, and a second release finds nothing.
    assert!(gate.documents(&["--held"]).is_empty());
    let (_, metrics, _) = gate.run(&["metrics"], None);
    assert!(!metrics.contains("delivery=\"held\""), "{metrics}");
    let (status, _, _) = gate.run(&["documents", "release", "ZZ:ACME:850:PO-1:00:"], None);
    assert_eq!(status.code(), Some(2));
    assert_eq!(gate.delivered().len(), 2);

    gate.process(&[&c, &d], 0);
    assert_eq!(gate.delivered().len(), 3);
    let (status, stdout, _) = gate.run(&["documents", "discard", "ZZ:ACME:850:PO-2:00:"], None);
    assert!(status.success(), "{stdout}");
    let rows = gate.documents(&["--key", "ZZ:ACME:850:PO-2:00:"]);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["delivery"], "discarded");
    assert_eq!(
        gate.delivered().len(),
        3,
        "a discarded document is never delivered"
    );
    let (_, history, _) = gate.run(&["history", "--json"], None);
    assert!(history.contains("documents_discarded") && history.contains("documents_released"));
}

#[test]
fn a_change_before_its_original_waits_then_follows_it_and_an_older_change_is_stale() {
    let gate = Gate::new("");
    let change2 = gate.write("c2.x12", &an_860(201, change("PO-7", 2)));
    let r = gate.process(&[&change2], 0);
    assert_eq!(only_document(&r[0])["disposition"], "waiting");
    assert!(
        gate.delivered().is_empty(),
        "a change is not delivered before its original"
    );
    assert_eq!(gate.documents(&["--waiting"]).len(), 1);

    let original = gate.write("o.x12", &an_850(202, po("PO-7", "00", 120)));
    let r = gate.process(&[&original], 0);
    assert_eq!(only_document(&r[0])["disposition"], "new");
    let delivered = gate.delivered();
    assert_eq!(delivered.len(), 2, "{:?}", delivered.keys());
    let seq = |set: &str| {
        delivered
            .values()
            .find(|d| d["identity"]["set"] == set)
            .map(|d| d["delivery"]["sequence"].as_i64().unwrap())
            .unwrap()
    };
    assert!(seq("850") < seq("860"), "the original is delivered first");
    assert!(gate.documents(&["--waiting"]).is_empty());

    let change3 = gate.write("c3.x12", &an_860(203, change("PO-7", 3)));
    let r = gate.process(&[&change3], 0);
    assert_eq!(only_document(&r[0])["disposition"], "new");
    let change2_late = gate.write("c2b.x12", &an_860(204, change("PO-7", 2)));
    let r = gate.process(&[&change2_late], 0);
    // Sequence 2 was delivered already with this content: a duplicate; other content with a
    // lower sequence than one delivered is stale.
    assert_eq!(only_document(&r[0])["disposition"], "duplicate");
    let other = change("PO-7", 1).replace("POC*1*CA*10", "POC*1*CA*11");
    let older = gate.write("c1.x12", &an_860(205, other));
    let r = gate.process(&[&older], 0);
    assert_eq!(only_document(&r[0])["disposition"], "stale", "{}", r[0]);
    assert_eq!(gate.delivered().len(), 3);
}

#[test]
fn a_change_whose_original_never_comes_is_delivered_after_the_wait_saying_so() {
    let gate = Gate::new("order_wait_hours = 0");
    let change = gate.write("c.x12", &an_860(301, change("PO-9", 1)));
    let (status, stdout, stderr) =
        gate.run(&["process", "--json", &change.display().to_string()], None);
    assert!(status.success(), "{stdout}{stderr}");
    assert_eq!(only_document(&lines(&stdout)[0])["disposition"], "waiting");
    // The same run's end delivers what waited past the partner's order_wait_hours (0 here).
    let delivered = gate.delivered();
    assert_eq!(delivered.len(), 1, "{stderr}");
    let d = delivered.values().next().unwrap();
    assert_eq!(d["delivery"]["original_missing"], true);
    assert!(stderr.contains("whose original never came"), "{stderr}");
}

#[test]
fn eight_processes_on_eight_interchanges_of_one_po_deliver_it_once() {
    for round in 0..20 {
        let gate = Gate::new("");
        let files: Vec<PathBuf> = (0..8)
            .map(|i| gate.write(&format!("{i}.x12"), &an_850(500 + i, po("PO-R", "00", 120))))
            .collect();
        let children: Vec<_> = files
            .iter()
            .map(|f| {
                gate.command(&["process", "--json", &f.display().to_string()], None)
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut dispositions = Vec::new();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            for r in lines(&String::from_utf8_lossy(&out.stdout)) {
                dispositions.push(
                    only_document(&r)["disposition"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                );
            }
        }
        dispositions.sort();
        let mut want = vec!["duplicate".to_string(); 7];
        want.push("new".into());
        want.sort();
        assert_eq!(dispositions, want, "round {round}");
        assert_eq!(gate.delivered().len(), 1, "round {round}");
    }
}

#[cfg(feature = "failpoints")]
#[test]
fn a_crash_between_claim_and_completion_records_no_document_without_its_interchange_and_no_output_without_its_document(
) {
    for point in [
        "claim.after",
        "prepare.after",
        "outputs.after",
        "complete.before",
    ] {
        let gate = Gate::new("");
        // One file: a change of PO-X waiting, another PO, then PO-X's original, which lets
        // the change go; and an 837 set of two claims, the first sent twice in it.
        let text = an_860(401, change("PO-X", 1))
            + &an_850(402, po("PO-Y", "00", 1))
            + &an_850(403, po("PO-X", "00", 2))
            + &an_837(
                404,
                "B-1",
                NPI,
                &[
                    ("S1", &[("C-1", 100, 1), ("C-2", 200, 1)]),
                    ("S1", &[("C-1", 100, 1)]),
                ],
            );
        let file = gate.write("mixed.x12", &text);
        let (status, ..) = gate.run(
            &["process", "--json", &file.display().to_string()],
            Some(&format!("{point}=return")),
        );
        assert!(!status.success(), "{point}: the failpoint aborts");
        let db = rusqlite::Connection::open(gate.root().join("data/x12gate.db")).unwrap();
        let orphans: i64 = db
            .query_row(
                "SELECT count(*) FROM documents WHERE interchange_key NOT IN (SELECT key FROM interchanges)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(orphans, 0, "{point}: a document without its interchange");
        for (name, doc) in gate.delivered() {
            // The sighting the file delivers: the first of its key in its interchange (a
            // claim sent twice in one batch has a second, a duplicate, delivering nothing).
            let known: i64 = db
                .query_row(
                    "SELECT count(*) FROM documents WHERE key = ?1 AND interchange_key = ?2
                     AND disposition <> 'duplicate'",
                    [
                        doc["document_key"].as_str().unwrap(),
                        doc["delivery"]["interchange"].as_str().unwrap(),
                    ],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(
                known, 1,
                "{point}: {name} is an output without its document"
            );
        }
        drop(db);
        let (status, stdout, stderr) = gate.take_over(&file, &[]);
        assert!(status.success(), "{point}: {stdout}{stderr}");
        let delivered = gate.delivered();
        let keys: Vec<&str> = delivered
            .values()
            .map(|d| d["document_key"].as_str().unwrap())
            .collect();
        assert_eq!(
            keys.len(),
            5,
            "{point}: each document delivered once: {:?}",
            delivered.keys()
        );
        let seq = |key: &str| {
            delivered
                .values()
                .find(|d| d["document_key"] == key)
                .map(|d| d["delivery"]["sequence"].as_i64().unwrap())
                .unwrap_or_else(|| panic!("{point}: {key} not delivered: {keys:?}"))
        };
        assert!(
            seq("ZZ:ACME:850:PO-X:00:") < seq("ZZ:ACME:860:PO-X:04:1"),
            "{point}"
        );
        seq("ZZ:ACME:850:PO-Y:00:");
        seq("ZZ:ACME:837:C-1+1234567893+841234567:1:");
        seq("ZZ:ACME:837:C-2+1234567893+841234567:1:");
        let open = gate.documents(&[]);
        assert!(open.is_empty(), "{point}: left open {open:?}");
        let rows = gate.documents(&["--all"]);
        // Every first sighting delivered with its file; C-1 sent twice in its batch is
        // recorded twice, its second sighting a duplicate of the first, not delivered.
        let duplicates: Vec<&Value> = rows
            .iter()
            .filter(|r| r["disposition"] == "duplicate")
            .collect();
        assert_eq!(duplicates.len(), 1, "{point}: {rows:?}");
        assert_eq!(
            duplicates[0]["key"], "ZZ:ACME:837:C-1+1234567893+841234567:1:",
            "{point}"
        );
        assert!(
            rows.iter()
                .filter(|r| r["disposition"] != "duplicate")
                .all(|r| r["delivery"] == "delivered" && r["output"].is_string()),
            "{point}: {rows:?}"
        );
    }
}

#[test]
fn scan_finds_exactly_the_planted_duplicates_and_conflicts_and_backfill_catches_a_resend() {
    let gate = Gate::new("");
    let archive = gate.root().join("archive");
    // 500 files in nested folders, each an interchange of its own PO; planted: 5 POs resent
    // in new interchanges (one of them three times) and 3 POs reused for other lines.
    let mut planted_dups = Vec::new();
    let mut planted_conflicts = Vec::new();
    for i in 0..500u32 {
        let (po_no, qty) = match i {
            100..=104 => (format!("PO-{}", i - 100), 120),
            105 => ("PO-0".to_string(), 120),
            200..=202 => (format!("PO-{}", i - 190), 999),
            _ => (format!("PO-{i}"), 120),
        };
        if (100..=104).contains(&i) {
            planted_dups.push(format!("ZZ:ACME:850:{po_no}:00:"));
        }
        if (200..=202).contains(&i) {
            planted_conflicts.push(format!("ZZ:ACME:850:{po_no}:00:"));
        }
        let folder = archive.join(format!("{:02}", i % 7));
        fs::create_dir_all(&folder).unwrap();
        fs::write(
            folder.join(format!("f{i}.x12")),
            an_850(1000 + i, po(&po_no, "00", qty)),
        )
        .unwrap();
    }
    // Not planted: a file copied into another folder (the same interchange read twice), and
    // a PO sent twice whose set is rejected both times (never booked). Planted: one
    // interchange carrying the same PO twice.
    fs::create_dir_all(archive.join("copies")).unwrap();
    fs::copy(archive.join("06/f300.x12"), archive.join("copies/f300.x12")).unwrap();
    for n in [7001, 7002] {
        let good = an_850(n, po("PO-950", "00", 120));
        let broken = good.replace("SE*6*0001", "SE*9*0001");
        assert_ne!(broken, good);
        fs::write(archive.join(format!("copies/broken{n}.x12")), broken).unwrap();
    }
    let twice = [po("PO-900", "00", 1), po("PO-900", "00", 1)];
    fs::write(
        archive.join("copies/twice.x12"),
        interchange(7003, "PO", "850", &twice, 1, '*', '~'),
    )
    .unwrap();
    planted_dups.push("ZZ:ACME:850:PO-900:00:".into());
    let (status, stdout, stderr) =
        gate.run(&["scan", "--json", &archive.display().to_string()], None);
    assert_eq!(status.code(), Some(3), "{stderr}");
    let found = lines(&stdout);
    let repeated: BTreeMap<String, (String, usize)> = found
        .iter()
        .filter_map(|l| l.get("repeated"))
        .map(|r| {
            (
                r["key"].as_str().unwrap().to_string(),
                (
                    r["kind"].as_str().unwrap().to_string(),
                    r["sightings"].as_array().unwrap().len(),
                ),
            )
        })
        .collect();
    let mut want: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for k in &planted_dups {
        want.insert(k.clone(), ("duplicate".into(), 2));
    }
    want.insert("ZZ:ACME:850:PO-0:00:".into(), ("duplicate".into(), 3));
    for k in &planted_conflicts {
        want.insert(k.clone(), ("conflict".into(), 2));
    }
    assert_eq!(repeated, want);
    let totals = found.last().unwrap();
    assert_eq!(totals["files"], 504);
    assert_eq!(
        totals["documents"], 503,
        "the rejected sets are no documents"
    );
    let summary = found.iter().find_map(|l| l.get("summary")).unwrap();
    assert_eq!(summary["duplicates"], 6);
    assert_eq!(summary["conflicts"], 3);
    // Each sighting names its file and the byte offset of its ST.
    let one = found.iter().find_map(|l| l.get("repeated")).unwrap();
    for s in one["sightings"].as_array().unwrap() {
        let bytes = fs::read(s["file"].as_str().unwrap()).unwrap();
        let at = s["offset"].as_u64().unwrap() as usize;
        assert!(bytes[at..].starts_with(b"ST*850*"), "{s}");
    }
    // Nothing was recorded without --backfill.
    assert!(gate.documents(&["--all"]).is_empty());

    let (status, stdout, stderr) = gate.run(
        &["scan", "--backfill", &archive.display().to_string()],
        None,
    );
    assert_eq!(status.code(), Some(3), "{stdout}{stderr}");
    assert!(
        // The copied file is one interchange; the broken ones are recorded as the rejected
        // interchanges they are, with no documents.
        stdout.contains("backfilled 503 interchange(s) and 492 document(s)"),
        "{stdout}"
    );
    // A partner resends an old PO in a new interchange: caught.
    let resend = gate.write("resend.x12", &an_850(9000, po("PO-300", "00", 120)));
    let r = gate.process(&[&resend], 0);
    assert_eq!(only_document(&r[0])["disposition"], "duplicate", "{}", r[0]);
    // A corrected resend of a rejected one is processed (a takeover of a rejection).
    let corrected = gate.write("corrected.x12", &an_850(7001, po("PO-950", "00", 120)));
    let r = gate.process(&[&corrected], 0);
    assert_eq!(r[0]["disposition"], "accepted", "{}", r[0]);
    assert_eq!(only_document(&r[0])["disposition"], "new");
    fs::remove_dir_all(gate.out()).unwrap();
    // And the very same old interchange again is a duplicate interchange.
    let old = archive.join(format!("{:02}/f300.x12", 300 % 7));
    let r = gate.process(&[&old], 0);
    assert_eq!(r[0]["disposition"], "duplicate", "{}", r[0]);
    let written: Vec<_> = fs::read_dir(gate.out())
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().file_name())
        .filter(|n| !n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(written.is_empty(), "{written:?}");
}

#[cfg(feature = "failpoints")]
#[test]
fn a_takeover_that_rejects_what_a_crashed_attempt_accepted_withdraws_its_documents() {
    let gate = Gate::new("validation = \"envelope\"");
    // Fine by the envelope, not by the 850's definition (a quantity that is no number).
    let file = gate.write(
        "q.x12",
        &an_850(601, po("PO-Q", "00", 120).replace("PO1*1*120", "PO1*1*ABC")),
    );
    let (status, ..) = gate.run(
        &["process", "--json", &file.display().to_string()],
        Some("prepare.after=return"),
    );
    assert!(!status.success());
    assert_eq!(
        gate.documents(&["--all"]).len(),
        1,
        "the crashed attempt recorded it"
    );
    // The takeover runs with definitions: the set is rejected, so is the interchange.
    let config = gate.root().join("partners.toml");
    let text = fs::read_to_string(&config).unwrap();
    fs::write(&config, text.replace("validation = \"envelope\"", "")).unwrap();
    let (status, stdout, stderr) = gate.take_over(&file, &[]);
    assert_eq!(status.code(), Some(3), "{stdout}{stderr}");
    assert_eq!(lines(&stdout)[0]["disposition"], "rejected");
    assert!(
        gate.documents(&["--all"]).is_empty(),
        "withdrawn, not delivered"
    );
    assert!(gate.delivered().is_empty());
    // The corrected PO is new, not a duplicate of what was never delivered.
    let fixed = gate.write("fixed.x12", &an_850(602, po("PO-Q", "00", 120)));
    let r = gate.process(&[&fixed], 0);
    assert_eq!(only_document(&r[0])["disposition"], "new");
    assert_eq!(gate.delivered().len(), 1);
}

#[test]
fn the_watcher_delivers_what_waited_past_the_wait() {
    let gate = Gate::new("");
    let change = gate.write("c.x12", &an_860(801, change("PO-W", 1)));
    gate.process(&[&change], 0);
    assert!(gate.delivered().is_empty(), "within the 24 hours it waits");
    let config = gate.root().join("partners.toml");
    let mut text = fs::read_to_string(&config).unwrap();
    text.push_str("order_wait_hours = 0\n");
    fs::write(&config, text).unwrap();
    let (status, _, stderr) = gate.run(&["watch", "--once"], None);
    assert!(status.success(), "{stderr}");
    let delivered = gate.delivered();
    assert_eq!(delivered.len(), 1, "{stderr}");
    assert_eq!(
        delivered.values().next().unwrap()["delivery"]["original_missing"],
        true
    );
    assert!(gate.documents(&[]).is_empty(), "nothing left waiting");
}

#[cfg(feature = "failpoints")]
#[test]
fn a_release_cut_short_is_finished_by_the_next_once() {
    let gate = Gate::new("");
    let a = gate.write("a.x12", &an_850(101, po("PO-1", "00", 120)));
    let b = gate.write("b.x12", &an_850(102, po("PO-1", "00", 121)));
    gate.process(&[&a, &b], 0);
    let (status, ..) = gate.run(
        &["documents", "release", "ZZ:ACME:850:PO-1:00:"],
        Some("release.marked=return"),
    );
    assert!(!status.success(), "the failpoint aborts");
    let rows = gate.documents(&["--key", "ZZ:ACME:850:PO-1:00:"]);
    assert_eq!(rows[1]["delivery"], "pending", "{rows:?}");
    assert_eq!(gate.delivered().len(), 1, "nothing written yet");
    // The next release (its process dead) adopts it and writes it, once.
    let (status, stdout, stderr) =
        gate.run(&["documents", "release", "ZZ:ACME:850:PO-1:00:"], None);
    assert!(status.success(), "{stdout}{stderr}");
    assert_eq!(gate.delivered().len(), 2);
    let rows = gate.documents(&["--key", "ZZ:ACME:850:PO-1:00:"]);
    assert!(
        rows.iter().all(|r| r["delivery"] == "delivered"),
        "{rows:?}"
    );
    let (status, ..) = gate.run(&["documents", "release", "ZZ:ACME:850:PO-1:00:"], None);
    assert_eq!(status.code(), Some(2), "nothing left to release");
}

#[test]
fn each_claim_of_an_837_is_a_document_and_a_claim_batched_again_is_a_duplicate() {
    let gate = Gate::new("");
    let first = gate.write(
        "a.x12",
        &an_837(
            101,
            "BATCH-1",
            NPI,
            &[
                ("S1", &[("C-1", 100, 1), ("C-2", 200, 1)]),
                ("S2", &[("C-3", 300, 1)]),
            ],
        ),
    );
    let r = gate.process(&[&first], 0);
    assert_eq!(r[0]["disposition"], "accepted", "{}", r[0]);
    let docs = r[0]["documents"].as_array().unwrap();
    let keys: Vec<&str> = docs.iter().map(|d| d["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "ZZ:ACME:837:C-1+1234567893+841234567:1:",
            "ZZ:ACME:837:C-2+1234567893+841234567:1:",
            "ZZ:ACME:837:C-3+1234567893+841234567:1:"
        ]
    );
    assert!(docs.iter().all(|d| d["disposition"] == "new"), "{docs:?}");
    // Every set carried documents: no translation of the interchange besides them.
    let delivered = gate.delivered();
    assert_eq!(delivered.len(), 3, "{:?}", delivered.keys());
    let by_document = |key: &str| {
        delivered
            .values()
            .find(|d| d["document_key"] == key)
            .unwrap_or_else(|| panic!("{key} not delivered: {:?}", delivered.keys()))
    };
    let file = by_document("ZZ:ACME:837:C-2+1234567893+841234567:1:");
    assert_eq!(file["identity"]["id"], "C-2+1234567893+841234567");
    assert_eq!(file["identity"]["event"], "1");
    // The claim with its subscriber and billing provider, without its sibling claim or the
    // other subscriber; the batch's heading travels with it.
    assert_eq!(
        claims_in(file),
        [("S1".to_string(), vec!["C-2".to_string()])]
    );
    assert_eq!(
        file["set"]["content"]["BHT"]["reference_identification_03"],
        "BATCH-1"
    );
    assert_eq!(
        file["set"]["content"]["2000A_loop"][0]["2010AA_loop"]["NM1"]["identification_code_09"],
        "1234567893"
    );
    assert_eq!(
        claims_in(by_document("ZZ:ACME:837:C-3+1234567893+841234567:1:")),
        [("S2".to_string(), vec!["C-3".to_string()])]
    );

    // A clearinghouse batches C-3 again with a new claim and a replacement of C-1: new
    // interchange, new batch id, new neighbours, its subscriber level numbered 2, not 3.
    let again = gate.write(
        "b.x12",
        &an_837(
            202,
            "BATCH-2",
            NPI,
            &[
                ("S2", &[("C-3", 300, 1)]),
                ("S3", &[("C-4", 400, 1)]),
                ("S1", &[("C-1", 100, 7)]),
            ],
        ),
    );
    let r = gate.process(&[&again], 0);
    let by_key: BTreeMap<&str, &Value> = r[0]["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["key"].as_str().unwrap(), d))
        .collect();
    assert_eq!(by_key.len(), 3, "{}", r[0]);
    assert_eq!(
        by_key["ZZ:ACME:837:C-4+1234567893+841234567:1:"]["disposition"],
        "new"
    );
    assert_eq!(
        by_key["ZZ:ACME:837:C-3+1234567893+841234567:1:"]["disposition"],
        "duplicate"
    );
    assert_eq!(
        by_key["ZZ:ACME:837:C-3+1234567893+841234567:1:"]["duplicate_of"],
        "ZZ:ACME:000000101"
    );
    assert_eq!(
        by_key["ZZ:ACME:837:C-1+1234567893+841234567:7:"]["disposition"],
        "new"
    );
    assert_eq!(gate.delivered().len(), 5, "{:?}", gate.delivered().keys());

    // The same claim number with another amount is not the claim booked: held.
    let changed = gate.write(
        "c.x12",
        &an_837(303, "BATCH-3", NPI, &[("S1", &[("C-2", 250, 1)])]),
    );
    let r = gate.process(&[&changed], 0);
    assert_eq!(only_document(&r[0])["disposition"], "conflict", "{}", r[0]);
    // So is the same claim under another subscriber.
    let moved = gate.write(
        "d.x12",
        &an_837(304, "BATCH-4", NPI, &[("S9", &[("C-4", 400, 1)])]),
    );
    let r = gate.process(&[&moved], 0);
    assert_eq!(only_document(&r[0])["disposition"], "conflict", "{}", r[0]);
    assert_eq!(gate.delivered().len(), 5);
    // Another provider's claim that happens to have the number C-2 is its own claim.
    let other = gate.write(
        "e.x12",
        &an_837(305, "BATCH-5", "1999999984", &[("S1", &[("C-2", 200, 1)])]),
    );
    let r = gate.process(&[&other], 0);
    let doc = only_document(&r[0]);
    assert_eq!(doc["disposition"], "new", "{}", r[0]);
    assert_eq!(doc["key"], "ZZ:ACME:837:C-2+1999999984+841234567:1:");
    assert_eq!(gate.delivered().len(), 6);
}

#[test]
fn a_claim_number_used_twice_in_one_batch_is_decided_as_a_resend_would_be() {
    let gate = Gate::new("");
    // As in a real sample: one claim number under several subscribers of one set, twice
    // with the very same content.
    let file = gate.write(
        "a.x12",
        &an_837(
            101,
            "BATCH-1",
            NPI,
            &[
                ("S1", &[("C-9", 100, 1)]),
                ("S2", &[("C-9", 174, 1)]),
                ("S1", &[("C-9", 100, 1)]),
            ],
        ),
    );
    let r = gate.process(&[&file], 0);
    let dispositions: Vec<&str> = r[0]["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["disposition"].as_str().unwrap())
        .collect();
    assert_eq!(dispositions, ["new", "conflict", "duplicate"], "{}", r[0]);
    assert_eq!(gate.delivered().len(), 1);
    let held = gate.documents(&[]);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["disposition"], "conflict");
    // Processed again (a takeover, or the same file resent): nothing new.
    let again = gate.process(&[&file], 0);
    assert_eq!(again[0]["disposition"], "duplicate", "{}", again[0]);
    assert_eq!(gate.delivered().len(), 1);
}

#[test]
fn a_level_without_a_claim_is_left_out_and_the_batch_s_claims_are_still_decided_each() {
    let gate = Gate::new("");
    let first = gate.write(
        "a.x12",
        &an_837(101, "BATCH-1", NPI, &[("S1", &[("C-1", 100, 1)])]),
    );
    gate.process(&[&first], 0);
    // The same claim again, beside a subscriber level without a claim (2300 and 2000C are
    // both optional under 2000B): still a duplicate, not booked twice in a set left whole.
    let again = gate.write(
        "b.x12",
        &an_837(
            102,
            "BATCH-2",
            NPI,
            &[
                ("S1", &[("C-1", 100, 1)]),
                ("S0", &[]),
                ("S2", &[("C-2", 50, 1)]),
            ],
        ),
    );
    let (status, stdout, stderr) =
        gate.run(&["process", "--json", &again.display().to_string()], None);
    assert_eq!(status.code(), Some(0), "{stdout}\n{stderr}");
    let r = lines(&stdout);
    let dispositions: Vec<(&str, &str)> = r[0]["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["key"].as_str().unwrap(),
                d["disposition"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        dispositions,
        [
            ("ZZ:ACME:837:C-1+1234567893+841234567:1:", "duplicate"),
            ("ZZ:ACME:837:C-2+1234567893+841234567:1:", "new")
        ],
        "{}",
        r[0]
    );
    assert!(stderr.contains("levels that hold no document"), "{stderr}");
    // Two claims delivered in all, each once; no translation of the set beside them.
    let delivered = gate.delivered();
    assert_eq!(delivered.len(), 2, "{:?}", delivered.keys());
    assert!(delivered.values().all(|d| d["document_key"].is_string()));
}

#[test]
fn an_encounter_is_not_the_claim_it_repeats() {
    let gate = Gate::new("");
    let claim = an_837(101, "BATCH-1", NPI, &[("S1", &[("C-1", 100, 1)])]);
    let first = gate.write("a.x12", &claim);
    // The same claim as an encounter report (BHT06 RP), not a chargeable claim (CH).
    let encounter = gate.write(
        "b.x12",
        &an_837(102, "BATCH-2", NPI, &[("S1", &[("C-1", 100, 1)])])
            .replace("*1130*CH~", "*1130*RP~"),
    );
    gate.process(&[&first], 0);
    let r = gate.process(&[&encounter], 0);
    assert_eq!(only_document(&r[0])["disposition"], "conflict", "{}", r[0]);
}

/// `[gateway]` settings that decide an interchange's documents two at a time.
const IN_RUNS_OF_TWO: &str = "documents_per_run = 2";

/// A partner setting and a folder destination (in `dir`) that queue every document.
fn queued_to(dir: &Path) -> String {
    format!(
        "destination = \"share\"\n\n[[destination]]\nname = \"share\"\nkind = \"folder\"\npath = \"{}\"\n",
        dir.display()
    )
}

/// Seven POs in one interchange: PO-2 twice with the same content (the second a
/// duplicate), PO-3 twice with another quantity (the second a conflict, held). Decided two
/// at a time: [PO-1, PO-2], [PO-3, PO-2], [PO-4, PO-5], [PO-3].
fn seven_pos(n: u32) -> String {
    let bodies = [
        po("PO-1", "00", 1),
        po("PO-2", "00", 2),
        po("PO-3", "00", 3),
        po("PO-2", "00", 2),
        po("PO-4", "00", 4),
        po("PO-5", "00", 5),
        po("PO-3", "00", 33),
    ];
    interchange(n, "PO", "850", &bodies, 1, '*', '~')
}

/// Asserts that the files in `out/` deliver PO-1 to PO-`n` once each; returns their keys.
fn assert_each_po_delivered_once(gate: &Gate, n: u32, what: &str) -> Vec<String> {
    let mut keys: Vec<String> = gate
        .delivered()
        .values()
        .map(|d| d["document_key"].as_str().unwrap().to_string())
        .collect();
    keys.sort();
    let mut want: Vec<String> = (1..=n).map(|i| format!("ZZ:ACME:850:PO-{i}:00:")).collect();
    want.sort();
    assert_eq!(keys, want, "{what}: each PO delivered once");
    keys
}

/// What became of the seven POs once processed to the end, however many attempts it took.
fn assert_seven_pos_settled(gate: &Gate, what: &str) {
    let keys = assert_each_po_delivered_once(gate, 5, what);
    let rows = gate.documents(&["--all"]);
    let dispositions: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap(),
                r["disposition"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 7, "{what}: {dispositions:?}");
    assert_eq!(
        dispositions
            .iter()
            .filter(|(k, d)| *k == "ZZ:ACME:850:PO-2:00:" && *d == "duplicate")
            .count(),
        1,
        "{what}: {dispositions:?}"
    );
    assert_eq!(
        dispositions
            .iter()
            .filter(|(k, d)| *k == "ZZ:ACME:850:PO-3:00:" && *d == "conflict")
            .count(),
        1,
        "{what}: {dispositions:?}"
    );
    // Each delivered document queued for its destination once.
    let (status, stdout, stderr) = gate.run(&["deliveries", "--json"], None);
    assert!(status.success(), "{stderr}");
    let mut queued: Vec<String> = lines(&stdout)
        .iter()
        .map(|d| d["key"].as_str().unwrap().to_string())
        .collect();
    queued.sort();
    assert_eq!(queued, keys, "{what}: queued once each");
    // One acknowledgment, of all seven sets.
    let acks = acks_in(gate);
    assert_eq!(acks.len(), 1, "{what}: {acks:?}");
    assert!(acks[0].contains("AK9*A*7*7*7"), "{what}: {}", acks[0]);
}

/// The acknowledgments in the outbox.
fn acks_in(gate: &Gate) -> Vec<String> {
    fs::read_dir(gate.root().join("data/outbox"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "x12"))
        .map(|p| fs::read_to_string(p).unwrap())
        .collect()
}

#[cfg(feature = "failpoints")]
#[test]
fn an_interchange_decided_a_run_of_documents_at_a_time_loses_and_doubles_nothing_when_killed_after_any_run(
) {
    // The first run is written with the interchange's step (4), each later one after a
    // transaction of its own; the acknowledgment only once the completion is recorded.
    let cases = [
        ("outputs.after", "return", false),
        ("run.after", "return", false),
        ("run.after", "1*off->return", false),
        ("run.after", "2*off->return", false),
        ("complete.before", "return", false),
    ];
    // On SQLite, and on PostgreSQL (a schema of its own each) when there is one; the
    // interchange read whole, and read in parts of 300 bytes (twice: see `pipeline::large`).
    let backends = [Some("data/x12gate.db".to_string()), None]
        .into_iter()
        .flat_map(|db| cases.iter().map(move |c| (db.clone(), *c)))
        .flat_map(|(db, c)| [("whole", db.clone(), c), ("in parts", db, c)]);
    for (reading, database, (point, action, acknowledged)) in backends {
        let Some(database) = database.or_else(crate::pg_server::schema) else {
            continue;
        };
        let what = format!("{point}={action} on {}, read {reading}", &database[..8]);
        let window: &[&str] = if reading == "whole" {
            &[]
        } else {
            &["--window", "300"]
        };
        let share = tempfile::tempdir().unwrap();
        let gate = Gate::on(&database, IN_RUNS_OF_TWO, &queued_to(share.path()));
        let file = gate.write("seven.x12", &seven_pos(601));
        let shown = file.display().to_string();
        let mut args = vec!["process", "--no-deliver"];
        args.extend_from_slice(window);
        args.push(&shown);
        let (status, stdout, stderr) = gate.run(&args, Some(&format!("{point}={action}")));
        assert!(
            !status.success(),
            "{what}: the failpoint aborts: {stdout}{stderr}"
        );
        let acks = acks_in(&gate).len();
        assert_eq!(
            acks > 0,
            acknowledged,
            "{what}: acknowledged before every run was"
        );
        // Every file written is a recorded sighting's, every queued delivery a file's.
        let rows = gate.documents(&["--all"]);
        for (name, doc) in gate.delivered() {
            let key = doc["document_key"].as_str().unwrap();
            assert!(
                rows.iter()
                    .any(|r| r["key"] == key && r["disposition"] != "duplicate"),
                "{what}: {name} is an output without its document"
            );
        }
        let (_, queued, _) = gate.run(&["deliveries", "--json"], None);
        for d in lines(&queued) {
            let key = d["key"].as_str().unwrap();
            assert!(
                gate.delivered()
                    .values()
                    .any(|doc| doc["document_key"] == key),
                "{what}: {key} queued without its file"
            );
        }
        let mut extra = vec!["--no-deliver"];
        extra.extend_from_slice(window);
        let (status, stdout, stderr) = gate.take_over(&file, &extra);
        assert!(status.code().is_some(), "{what}: {stderr}");
        let reports = lines(&stdout);
        assert_eq!(reports.len(), 1, "{what}: {stdout}{stderr}");
        assert_eq!(
            reports[0]["disposition"], "accepted",
            "{what}: {stdout}{stderr}"
        );
        assert_eq!(
            reports[0]["documents"].as_array().unwrap().len(),
            7,
            "{what}: {stdout}"
        );
        assert_seven_pos_settled(&gate, &what);
    }
}

/// A file rewritten between its two readings (after the claim was decided on the first)
/// fails alone: its claim is marked failed and nothing of it recorded, the next file is
/// processed, and the content first read goes through on a rerun.
#[cfg(feature = "failpoints")]
#[test]
fn a_file_that_changes_between_its_two_readings_fails_alone_and_the_run_goes_on() {
    let share = tempfile::tempdir().unwrap();
    let gate = Gate::with_gateway(IN_RUNS_OF_TWO, &queued_to(share.path()));
    let changing = gate.write("changing.x12", &seven_pos(611));
    let next = gate.write("next.x12", &seven_pos(612));
    let (a, b) = (changing.display().to_string(), next.display().to_string());
    let args = [
        "process",
        "--json",
        "--no-deliver",
        "--window",
        "300",
        &a,
        &b,
    ];
    let child = gate
        .command(&args, Some("large.read=1*sleep(2000)"))
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    fs::write(&changing, seven_pos(611).replace("PO-1*", "PO-10*")).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("the file changed after its interchange at byte 0"),
        "{stderr}"
    );
    let reports = lines(&stdout);
    assert_eq!(reports.len(), 2, "{stdout}");
    assert_eq!(reports[0]["file"], a.as_str(), "{stdout}");
    let error = reports[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("its claim was marked failed"), "{stdout}");
    assert_eq!(reports[1]["control_number"], "000000612", "{stdout}");
    assert_eq!(reports[1]["disposition"], "accepted", "{stdout}");
    // Nothing of the changed file was recorded: the seven sightings are the next file's.
    let rows = gate.documents(&["--all"]);
    assert_eq!(rows.len(), 7, "{rows:?}");
    assert!(
        rows.iter().all(|r| r["interchange"] == "ZZ:ACME:000000612"),
        "{rows:?}"
    );
    // Its claim, taken for the content first read, was marked failed. The content it now
    // has is other content under the same control number: a conflict, as any would be;
    // the content first read is taken over and processed.
    let again = gate.process(&[&changing], 3);
    assert_eq!(again[0]["disposition"], "conflict", "{again:?}");
    assert_eq!(again[0]["reason_code"], "025", "{again:?}");
    fs::write(&changing, seven_pos(611)).unwrap();
    let again = gate.process(&[&changing], 0);
    assert_eq!(again[0]["control_number"], "000000611", "{again:?}");
    assert_eq!(again[0]["disposition"], "accepted", "{again:?}");
    assert_eq!(again[0]["took_over"], "failed attempt", "{again:?}");
}

/// Read in parts of a few hundred bytes (the first time for the claim and the decision, the
/// second for the documents, a run at a time), an interchange is decided, written and
/// answered as read whole, and its resend replays it; a resend read whole is the same
/// interchange.
#[test]
fn an_interchange_read_in_parts_is_decided_as_read_whole_and_its_resend_replays_it() {
    let mut seen = Vec::new();
    for window in ["1000000", "300", "450"] {
        let share = tempfile::tempdir().unwrap();
        let gate = Gate::with_gateway(IN_RUNS_OF_TWO, &queued_to(share.path()));
        let file = gate.write("seven.x12", &seven_pos(602));
        let shown = file.display().to_string();
        let (status, stdout, stderr) = gate.run(
            &[
                "process",
                "--json",
                "--no-deliver",
                "--window",
                window,
                &shown,
            ],
            None,
        );
        assert_eq!(status.code(), Some(0), "{stdout}{stderr}");
        let first = lines(&stdout);
        assert_eq!(first[0]["disposition"], "accepted", "{first:?}");
        assert_seven_pos_settled(&gate, &format!("window {window}"));
        // A resend read whole meets the claim of the one read in parts, and gets the very
        // acknowledgment sent first, from the registry (where a large one is made again).
        let sent = acks_in(&gate);
        assert_eq!(sent.len(), 1, "window {window}");
        fs::remove_dir_all(gate.root().join("data/outbox")).unwrap();
        let again = gate.process(&[&file], 0);
        assert_eq!(again[0]["disposition"], "duplicate", "{again:?}");
        assert_eq!(
            acks_in(&gate),
            sent,
            "window {window}: the 997 replayed is not the one sent"
        );
        assert!(sent[0].contains("AK9*A*7*7*7"), "{}", sent[0]);
        let mut report = first[0].clone();
        let root = gate.root().display().to_string();
        let report = serde_json::to_string(&report.take())
            .unwrap()
            .replace(&root, "<gate>");
        let files: BTreeMap<String, Value> = gate.delivered();
        seen.push((window, report, files, acks_in(&gate).len()));
    }
    let (_, report, files, acks) = &seen[0];
    for (window, r, f, a) in &seen[1..] {
        assert_eq!(r, report, "window {window}");
        assert_eq!(f, files, "window {window}");
        assert_eq!(a, acks, "window {window}");
    }
}

#[test]
fn an_interchange_decided_in_runs_is_decided_as_in_one_and_its_resend_replays_it() {
    let share = tempfile::tempdir().unwrap();
    let gate = Gate::with_gateway(IN_RUNS_OF_TWO, &queued_to(share.path()));
    let file = gate.write("seven.x12", &seven_pos(602));
    let first = gate.process(&[&file], 0);
    assert_eq!(first[0]["disposition"], "accepted", "{first:?}");
    let dispositions: Vec<&str> = first[0]["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["disposition"].as_str().unwrap())
        .collect();
    assert_eq!(
        dispositions,
        ["new", "new", "new", "duplicate", "new", "new", "conflict"]
    );
    assert_seven_pos_settled(&gate, "in runs");
    let again = gate.process(&[&file], 0);
    assert_eq!(again[0]["disposition"], "duplicate", "{again:?}");
    assert_eq!(again[0]["documents"].as_array().unwrap().len(), 7);
    assert_seven_pos_settled(&gate, "resent");
}

#[test]
fn a_report_lists_the_first_thousand_documents_and_counts_them_all() {
    let gate = Gate::with_gateway("documents_per_run = 150", "");
    // 1,003 POs, the tenth sent again as the eleventh's place.
    let bodies: Vec<String> = (1..=1003)
        .map(|i| {
            let n = if i == 11 { 10 } else { i };
            po(&format!("PO-{n}"), "00", 5)
        })
        .collect();
    let file = gate.write(
        "many.x12",
        &interchange(603, "PO", "850", &bodies, 1, '*', '~'),
    );
    let reports = gate.process(&[&file], 0);
    let r = &reports[0];
    assert_eq!(r["documents"].as_array().unwrap().len(), 1000, "listed");
    assert_eq!(r["documents_total"], 1003);
    assert_eq!(r["documents_new"], 1002);
    assert_eq!(r["outputs"].as_array().unwrap().len(), 1000);
    assert_eq!(r["documents"][10]["disposition"], "duplicate");
    assert_eq!(gate.delivered().len(), 1002, "every new PO has its file");
    assert_eq!(gate.documents(&["--all"]).len(), 1003);
    // The registry lists them all, in the interchange's order.
    let listed = gate.documents(&["--interchange", "ZZ:ACME:000000603"]);
    assert_eq!(listed.len(), 1003);
    assert_eq!(listed[1002]["key"], "ZZ:ACME:850:PO-1003:00:");
    assert_eq!(listed[10]["disposition"], "duplicate");
    // An interchange the registry never saw is named as such (exit 2), not an empty list.
    let (status, _, stderr) = gate.run(&["documents", "--interchange", "ZZ:ACME:000000604"], None);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("ZZ:ACME:000000604"), "{stderr}");
    // `show` looks at the first 1,000 and says how many more there are; `history` names
    // what the decision recorded (its first hundred) and counts the rest.
    let (status, stdout, stderr) = gate.run(&["show", "--json", "ZZ:ACME:000000603"], None);
    assert!(status.success(), "{stderr}");
    let shown: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(shown["documents"].as_array().unwrap().len(), 1000);
    assert_eq!(shown["documents_more"], 3);
    assert_eq!(shown["layers"]["documents_more"], 3);
    assert_eq!(shown["layers"]["delivered"].as_array().unwrap().len(), 1000);
    let (_, text, _) = gate.run(&["show", "ZZ:ACME:000000603"], None);
    assert!(
        text.contains("and 3 more documents (x12gate documents --interchange ZZ:ACME:000000603)"),
        "{text}"
    );
    let (_, history, _) = gate.run(&["history"], None);
    assert!(
        history.contains("ZZ:ACME:850:PO-3:00: new, 1000 more"),
        "{history}"
    );
    // The text report counts what it does not list.
    let (status, stdout, stderr) = gate.run(&["process", &file.display().to_string()], None);
    assert!(status.success(), "{stderr}");
    assert!(
        stdout
            .contains("duplicate; documents: ZZ:ACME:850:PO-1:00: duplicate of ZZ:ACME:000000603"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with(", 1000 more"), "{stdout}");
    let again = gate.process(&[&file], 0);
    assert_eq!(again[0]["documents"].as_array().unwrap().len(), 1000);
    assert_eq!(again[0]["documents_total"], 1003);
}

#[cfg(feature = "failpoints")]
#[test]
fn a_process_whose_lease_ran_out_between_runs_stops_and_the_takeover_finishes_once() {
    let share = tempfile::tempdir().unwrap();
    let gate = Gate::on(
        "data/x12gate.db",
        &format!("{IN_RUNS_OF_TWO}\nlease_seconds = 1"),
        &queued_to(share.path()),
    );
    let file = gate.write("seven.x12", &seven_pos(604));
    let arg = file.display().to_string();
    // A sleeps after each run it makes after the first, past its lease: its second run's
    // transaction hands its first ([PO-1, PO-2]) over.
    let started = std::time::Instant::now();
    let slow = gate
        .command(
            &["process", "--json", "--no-deliver", &arg],
            Some("run.after=sleep(4000)"),
        )
        .spawn()
        .unwrap();
    while gate.delivered().len() < 2 {
        assert!(
            started.elapsed().as_secs() < 60,
            "the first run was never handed over"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // B waits for A's lease to run out (A lives), takes the interchange over, finishes it.
    let (status, stdout, stderr) = gate.run(&["process", "--json", "--no-deliver", &arg], None);
    assert!(status.success(), "{stdout}{stderr}");
    let b = lines(&stdout);
    assert_eq!(b[0]["disposition"], "accepted", "{stdout}");
    assert!(b[0]["took_over"].is_string(), "{stdout}");
    let a = slow.wait_with_output().unwrap();
    // A stopped at its next run (one sleep), not after making the two runs left (three).
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "A went on after its lease was lost: {:?}",
        started.elapsed()
    );
    let a_out = String::from_utf8_lossy(&a.stdout);
    let a_report = lines(&a_out);
    assert_eq!(
        a_report[0]["disposition"],
        "in_progress",
        "A lost its claim at its next run: {a_out}{}",
        String::from_utf8_lossy(&a.stderr)
    );
    assert_seven_pos_settled(&gate, "taken over between runs");
}

/// An interchange key pruned past its window and sent again is a first attempt: the
/// documents its earlier holder left for an operator (a held conflict) are not its to
/// withdraw.
#[test]
fn a_control_number_reused_after_its_window_leaves_the_held_documents_of_its_first_use() {
    let gate = Gate::new("duplicate_window_days = 1");
    let first = gate.write("a.x12", &an_850(701, po("PO-1", "00", 1)));
    let other = gate.write("b.x12", &an_850(702, po("PO-1", "00", 2)));
    gate.process(&[&first, &other], 0);
    let held = gate.documents(&["--held"]);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["interchange"], "ZZ:ACME:000000702");
    crate::util::age(
        &gate.root().join("data/x12gate.db"),
        &[("ZZ:ACME:000000702", 5)],
    );
    let (status, _, stderr) = gate.run(&["prune"], None);
    assert!(status.success(), "{stderr}");
    // ISA13 702 again, months later, with another PO; where failpoints are built in, its
    // first attempt dies after writing, so that the one that completes is a takeover.
    let reused = gate.write("c.x12", &an_850(702, po("PO-9", "00", 9)));
    if cfg!(feature = "failpoints") {
        let (status, ..) = gate.run(
            &["process", &reused.display().to_string()],
            Some("outputs.after=return"),
        );
        assert!(!status.success());
    }
    let reports = gate.process(&[&reused], 0);
    assert_eq!(reports[0]["disposition"], "accepted", "{reports:?}");
    assert_eq!(reports[0]["documents"][0]["disposition"], "new");
    let attempt = if cfg!(feature = "failpoints") { 2 } else { 1 };
    assert_eq!(reports[0]["attempt"], attempt, "{reports:?}");
    let held = gate.documents(&["--held"]);
    assert_eq!(held.len(), 1, "the held conflict was withdrawn: {held:?}");
    assert_eq!(held[0]["key"], "ZZ:ACME:850:PO-1:00:");
}

/// A takeover that judges an interchange otherwise (here its sender is no longer a partner,
/// so it is rejected) withdraws what the crashed attempt recorded, but not the documents an
/// earlier run already delivered: forgetting them would book a resend twice.
#[cfg(feature = "failpoints")]
#[test]
fn a_takeover_that_rejects_an_interchange_keeps_the_documents_its_earlier_runs_delivered() {
    let gate = Gate::with_gateway(IN_RUNS_OF_TWO, "");
    let file = gate.write("seven.x12", &seven_pos(605));
    // Killed after its third run is written: the first two are handed over.
    let (status, ..) = gate.run(
        &["process", &file.display().to_string()],
        Some("run.after=1*off->return"),
    );
    assert!(!status.success());
    let config = gate.root().join("partners.toml");
    let with_acme = fs::read_to_string(&config).unwrap();
    let (without, _) = with_acme.split_once("[[partner]]").unwrap();
    fs::write(&config, without).unwrap();
    let reports = gate.process(&[&file], 3);
    assert_eq!(reports[0]["disposition"], "rejected", "{reports:?}");
    let rows = gate.documents(&["--all"]);
    let kept: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(
        kept,
        [
            "ZZ:ACME:850:PO-1:00:",
            "ZZ:ACME:850:PO-2:00:",
            "ZZ:ACME:850:PO-3:00:"
        ],
        "what the first two runs delivered stays (PO-2's repeat, never delivered, and the \
         third run go): {rows:?}"
    );
    // With ACME back, PO-1 resent in a new interchange is the duplicate it is.
    fs::write(&config, &with_acme).unwrap();
    let again = gate.write("again.x12", &an_850(606, po("PO-1", "00", 1)));
    let reports = gate.process(&[&again], 0);
    assert_eq!(
        reports[0]["documents"][0]["disposition"], "duplicate",
        "{reports:?}"
    );
}

/// Documents are decided in file order across the interchanges of one batch, however many
/// runs the first one takes: the later interchange's reuse of a PO number is the conflict.
#[test]
fn an_interchange_decided_in_runs_is_decided_before_the_interchanges_after_it() {
    let gate = Gate::with_gateway(IN_RUNS_OF_TWO, "");
    let five: Vec<String> = (1..=5).map(|i| po(&format!("PO-{i}"), "00", i)).collect();
    let text =
        interchange(611, "PO", "850", &five, 1, '*', '~') + &an_850(612, po("PO-5", "00", 55));
    let file = gate.write("two.x12", &text);
    let reports = gate.process(&[&file], 0);
    let dispositions = |r: &Value| -> Vec<String> {
        r["documents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                format!(
                    "{} {}",
                    d["key"].as_str().unwrap(),
                    d["disposition"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(
        dispositions(&reports[0]),
        (1..=5)
            .map(|i| format!("ZZ:ACME:850:PO-{i}:00: new"))
            .collect::<Vec<_>>()
    );
    assert_eq!(dispositions(&reports[1]), ["ZZ:ACME:850:PO-5:00: conflict"]);
}

/// Runs span the interchanges of a batch, in file order, and a kill after any of them
/// leaves nothing lost or doubled: three interchanges, [PO-1..PO-5], [PO-5 again with another
/// quantity], [PO-6, PO-7], decided two at a time.
#[cfg(feature = "failpoints")]
#[test]
fn runs_that_span_interchanges_survive_a_kill_after_each() {
    let five: Vec<String> = (1..=5).map(|i| po(&format!("PO-{i}"), "00", i)).collect();
    let two: Vec<String> = (6..=7).map(|i| po(&format!("PO-{i}"), "00", i)).collect();
    let text = interchange(621, "PO", "850", &five, 1, '*', '~')
        + &an_850(622, po("PO-5", "00", 55))
        + &interchange(623, "PO", "850", &two, 1, '*', '~');
    for action in ["return", "1*off->return", "2*off->return"] {
        let gate = Gate::with_gateway(IN_RUNS_OF_TWO, "");
        let file = gate.write("three.x12", &text);
        let (status, ..) = gate.run(
            &["process", &file.display().to_string()],
            Some(&format!("run.after={action}")),
        );
        assert!(!status.success(), "{action}");
        let (status, stdout, stderr) = gate.take_over(&file, &[]);
        assert!(status.success(), "{action}: {stdout}{stderr}");
        assert_each_po_delivered_once(&gate, 7, action);
        let held = gate.documents(&["--held"]);
        assert_eq!(held.len(), 1, "{action}: {held:?}");
        assert_eq!(held[0]["interchange"], "ZZ:ACME:000000622", "{action}");
        assert_eq!(gate.documents(&["--all"]).len(), 8, "{action}");
        let acks = acks_in(&gate);
        assert_eq!(acks.len(), 3, "{action}: one acknowledgment each");
    }
}

/// An interchange that waits for an earlier one's runs is answered all the same, even one
/// that is rejected (it has no documents to decide, only its acknowledgment to write).
#[test]
fn an_interchange_after_one_decided_in_runs_gets_its_answer_whatever_it_is() {
    let gate = Gate::with_gateway(IN_RUNS_OF_TWO, "");
    let five: Vec<String> = (1..=5).map(|i| po(&format!("PO-{i}"), "00", i)).collect();
    let broken =
        an_850(632, po("PO-9", "00", 9)).replace("*ZZ*X12GATE        *", "*ZZ*SOMEONE        *");
    let text = interchange(631, "PO", "850", &five, 1, '*', '~')
        + &broken
        + &an_850(633, po("PO-8", "00", 8));
    let file = gate.write("three.x12", &text);
    let reports = gate.process(&[&file], 3);
    let dispositions: Vec<&str> = reports
        .iter()
        .map(|r| r["disposition"].as_str().unwrap())
        .collect();
    assert_eq!(dispositions, ["accepted", "rejected", "accepted"]);
    for r in &reports {
        assert_eq!(r["acks"].as_array().unwrap().len(), 1, "{r}");
    }
    assert_eq!(acks_in(&gate).len(), 3, "one answer each");
    assert!(acks_in(&gate).iter().any(|a| a.contains("TA1*000000632*")));
}
