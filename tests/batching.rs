//! Batching never changes a decision: the same interchanges processed in one call, one call
//! per file, all in one file, and in arbitrary runs of files (what `watch`'s batches of 1 to
//! 256 are) are decided alike, each as if the ones before it had been processed one at a
//! time. Sequences mix broken interchanges, their corrections (a new ISA13, the same GS06),
//! exact resends, reused ISA13s and reused GS06s; the library is called directly, so a case
//! costs milliseconds.

use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use x12gate::config::Config;
use x12gate::pipeline::{process_files, ProcessOptions, Source};

/// One interchange of a sequence: ACME's 850 with these numbers, broken (a wrong SE01) or
/// not, ordering one of two POs.
#[derive(Debug, Clone)]
struct Ic {
    isa13: u32,
    gs06: u32,
    po: u8,
    broken: bool,
}

fn ic() -> impl Strategy<Value = Ic> {
    (1u32..5, 1u32..4, 0u8..2, prop::bool::weighted(0.35)).prop_map(|(isa13, gs06, po, broken)| {
        Ic {
            isa13,
            gs06,
            po,
            broken,
        }
    })
}

/// Sequences where what matters happens often: a broken interchange followed by its
/// correction, exact resends, and anything else on a handful of numbers.
fn sequence() -> impl Strategy<Value = Vec<Ic>> {
    prop::collection::vec(
        prop_oneof![
            3 => ic().prop_map(|i| vec![i]),
            // Broken, then corrected under a new ISA13 with the same GS06.
            2 => ic().prop_map(|i| {
                let broken = Ic { broken: true, ..i.clone() };
                let fixed = Ic { isa13: i.isa13 + 10, broken: false, ..i };
                vec![broken, fixed]
            }),
            // Sent twice.
            1 => ic().prop_map(|i| vec![i.clone(), i]),
        ],
        1..5,
    )
    .prop_map(|runs| runs.into_iter().flatten().collect())
}

fn text(i: &Ic) -> String {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/850-004010.x12");
    let base = fs::read_to_string(fixture).unwrap();
    let isa13 = format!("{:09}", i.isa13);
    let t = base
        .replacen("*00401*000000101*", &format!("*00401*{isa13}*"), 1)
        .replacen("IEA*1*000000101~", &format!("IEA*1*{isa13}~"), 1)
        .replacen("*0930*101*X*", &format!("*0930*{}*X*", i.gs06), 1)
        .replacen("GE*1*101~", &format!("GE*1*{}~", i.gs06), 1)
        .replacen(
            "*SA*PO-4471*",
            &format!("*SA*PO-{}*", 4471 + u32::from(i.po)),
            1,
        );
    if i.broken {
        t.replacen("SE*13*0001~", "SE*12*0001~", 1)
    } else {
        t
    }
}

/// A gateway of its own in `root` that knows ACME (group duplicates checked).
fn gateway(root: &Path) -> Config {
    let text = format!(
        "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\nunknown_partners = \"reject\"\n\
         outbox = \"{0}/outbox\"\nout = \"{0}/out\"\ndatabase = \"{0}/x12gate.db\"\n\
         [[partner]]\nname = \"Acme\"\nid_qualifier = \"ZZ\"\nid = \"ACME\"\nack = \"997\"\n\
         ta1 = \"on_error\"\ncheck_group_duplicates = true\nduplicate_window_days = 30\n",
        root.display()
    );
    Config::from_str(&text, &root.join("partners.toml")).unwrap()
}

/// What is decided of each interchange, in sequence order: the disposition, its reason code
/// and the documents' dispositions.
type Decided = Vec<(String, Option<String>, Vec<String>)>;

/// Processes `files` (each a list of interchanges) in calls of `calls` files each.
fn decide(files: &[Vec<&Ic>], calls: &[usize]) -> Decided {
    let dir = tempfile::tempdir().unwrap();
    let config = gateway(dir.path());
    let schemas = x12gate::schema::builtin().unwrap();
    let mut registry = x12gate::setup::open_registry(&config).unwrap();
    let options = ProcessOptions::new(true);
    let paths: Vec<PathBuf> = files
        .iter()
        .enumerate()
        .map(|(n, ics)| {
            let path = dir.path().join(format!("{n:03}.x12"));
            fs::write(&path, ics.iter().map(|i| text(i)).collect::<String>()).unwrap();
            path
        })
        .collect();
    let mut decided = Vec::new();
    let mut rest: &[PathBuf] = &paths;
    for &n in calls {
        let (these, after) = rest.split_at(n.min(rest.len()));
        rest = after;
        let sources: Vec<Source> = these.iter().map(|p| Source::from(p.as_path())).collect();
        for outcome in
            process_files(&sources, &config, schemas, &mut registry, &options, None).unwrap()
        {
            for r in outcome.result.unwrap() {
                let documents = r
                    .documents
                    .iter()
                    .map(|d| format!("{:?}", d.disposition))
                    .collect();
                decided.push((r.disposition.as_str().to_string(), r.reason_code, documents));
            }
        }
    }
    assert!(rest.is_empty());
    decided
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { max_shrink_iters: 256, ..ProptestConfig::with_cases(cases()) })]

    #[test]
    fn every_batching_decides_each_interchange_as_one_at_a_time(
        seq in sequence(),
        cuts in prop::collection::vec(1usize..4, 1..12),
    ) {
        let n = seq.len();
        let one_each: Vec<Vec<&Ic>> = seq.iter().map(|i| vec![i]).collect();
        let alone = decide(&one_each, &vec![1; n]);
        prop_assert_eq!(alone.len(), n);
        // One call with every file (a `watch` batch of 256).
        prop_assert_eq!(&decide(&one_each, &[n]), &alone, "one call");
        // One file holding them all.
        prop_assert_eq!(&decide(&[seq.iter().collect()], &[1]), &alone, "one file");
        // Calls of a few files each, however they fall.
        let mut calls: Vec<usize> = cuts.into_iter().collect();
        calls.push(n);
        prop_assert_eq!(&decide(&one_each, &calls), &alone, "calls of {:?}", calls);
    }
}

#[test]
fn a_correction_in_the_same_call_as_its_broken_original_is_accepted() {
    // The case: broken, then its correction under a new ISA13 with the same GS06.
    let broken = Ic {
        isa13: 1,
        gs06: 7,
        po: 0,
        broken: true,
    };
    let fixed = Ic {
        isa13: 2,
        broken: false,
        ..broken.clone()
    };
    let expected = ["rejected", "accepted"];
    for (files, calls) in [
        (vec![vec![&broken], vec![&fixed]], vec![1, 1]),
        (vec![vec![&broken], vec![&fixed]], vec![2]),
        (vec![vec![&broken, &fixed]], vec![1]),
    ] {
        let decided: Vec<String> = decide(&files, &calls).into_iter().map(|d| d.0).collect();
        assert_eq!(decided, expected, "{calls:?}");
    }
}

/// Two batches of one process in claim order, as `watch` dispatches them to two workers: the
/// first holds one interchange twice, which puts what follows it in a second round; the
/// batch dispatched after it must not claim those keys before that round has. So the
/// earlier arrival wins a reused control number whichever worker runs first.
#[test]
fn a_later_batch_claims_after_every_first_claim_of_the_batch_before_it() {
    use x12gate::pipeline::ClaimOrder;
    let dir = tempfile::tempdir().unwrap();
    let config = gateway(dir.path());
    let schemas = x12gate::schema::builtin().unwrap();
    let order = std::sync::Arc::new(ClaimOrder::default());
    let (first, second) = (ClaimOrder::turn(&order), ClaimOrder::turn(&order));
    let sent = |isa13, po| Ic {
        isa13,
        gs06: isa13,
        po,
        broken: false,
    };
    let write = |name: &str, i: &Ic| {
        let path = dir.path().join(name);
        fs::write(&path, text(i)).unwrap();
        path
    };
    let earlier = [
        write("a0.x12", &sent(1, 0)),
        write("a1.x12", &sent(1, 0)),
        write("a2.x12", &sent(2, 0)),
    ];
    // ISA13 2 again, for another PO: a reused control number.
    let later = write("b0.x12", &sent(2, 1));
    let mut registry = x12gate::setup::open_registry(&config).unwrap();
    let options = ProcessOptions::new(true);
    let decided = |outcomes: Vec<x12gate::pipeline::FileOutcome>| -> Vec<String> {
        outcomes
            .into_iter()
            .flat_map(|o| o.result.unwrap())
            .map(|r| r.disposition.as_str().to_string())
            .collect()
    };
    // The earlier batch pauses once between its rounds, long enough for the later one to
    // overtake it if its turn had ended with the first round. Whatever the timing, the
    // decisions below hold with the turn kept.
    #[cfg(feature = "failpoints")]
    fail::cfg("round.between", "1*sleep(300)").unwrap();
    std::thread::scope(|s| {
        // Started first, so it is waiting for its turn while the earlier batch works.
        let worker = s.spawn(|| {
            let mut registry = x12gate::setup::open_registry(&config).unwrap();
            let sources = [Source::from(later.as_path())];
            decided(
                process_files(
                    &sources,
                    &config,
                    schemas,
                    &mut registry,
                    &options,
                    Some(second),
                )
                .unwrap(),
            )
        });
        let sources: Vec<Source> = earlier.iter().map(|p| Source::from(p.as_path())).collect();
        let mine = decided(
            process_files(
                &sources,
                &config,
                schemas,
                &mut registry,
                &options,
                Some(first),
            )
            .unwrap(),
        );
        let theirs = worker.join().unwrap();
        assert_eq!(mine, ["accepted", "duplicate", "accepted"], "{theirs:?}");
        assert_eq!(theirs, ["conflict"], "{mine:?}");
    });
}
