//! One way to name things: every command that takes a partner, an interchange key or a
//! document key accepts the same forms, and refuses (exit 2, naming what it looked for) one
//! that names nothing.

use std::path::Path;
use std::process::Output;

use crate::util::{fixture, root};

fn run(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_x12gate"))
        .current_dir(dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("FAILPOINTS")
        .output()
        .expect("run x12gate")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The example configuration, with ACME's 850 (interchange 101, PO-4471) processed.
fn gateway() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("partners.toml"),
        dir.path().join("partners.toml"),
    )
    .unwrap();
    let file = fixture("850-004010.x12");
    let out = run(dir.path(), &["process", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    dir
}

#[test]
fn every_command_names_partners_and_keys_the_same_way_and_refuses_what_names_nothing() {
    let g = gateway();
    let dir = g.path();
    // (command with {} for the name, forms that must work, forms that must be refused)
    type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [&'a str]);
    let partners: &[&str] = &["ZZ:ACME", "zz:ACME", "ACME", "acme", "Acme Retail"];
    let interchanges: &[&str] = &[
        "ZZ:ACME:000000101",
        "ZZ:ACME:101",
        "ACME:101",
        "ACME:000000101",
    ];
    let documents: &[&str] = &["ZZ:ACME:850:PO-4471:00:", "850:PO-4471:00:", "PO-4471"];
    let cases: &[Case<'_>] = &[
        (&["history", "--partner", "{}"], partners, &["ACNE", "NOPE"]),
        (
            &["deliveries", "--partner", "{}"],
            partners,
            &["ACNE", "NOPE"],
        ),
        (&["sent", "--partner", "{}"], partners, &["ACNE", "NOPE"]),
        (&["counter", "show", "{}"], partners, &["ACNE", "ZZ:NOPE"]),
        (&["show", "{}"], interchanges, &["ZZ:ACME:999", "NOPE:101"]),
        (
            &["documents", "--interchange", "{}"],
            interchanges,
            &["ZZ:ACME:999"],
        ),
        (
            &["documents", "--key", "{}"],
            documents,
            &["PO-NOPE", "850:PO-NOPE:00:"],
        ),
        (&["documents", "body", "{}"], documents, &["PO-NOPE"]),
    ];
    for (command, good, bad) in cases {
        let with =
            |name: &str| -> Vec<String> { command.iter().map(|a| a.replace("{}", name)).collect() };
        let mut printed = None;
        for name in *good {
            let args = with(name);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run(dir, &args);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{args:?}: {}",
                text(&out.stderr)
            );
            // Every form names the same thing, so prints the same.
            let stdout = text(&out.stdout);
            match &printed {
                None => printed = Some(stdout),
                Some(first) => assert_eq!(&stdout, first, "{args:?}"),
            }
        }
        for name in *bad {
            let args = with(name);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run(dir, &args);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{args:?}: {}",
                text(&out.stdout)
            );
            assert!(
                text(&out.stderr).contains(name),
                "{args:?}: {}",
                text(&out.stderr)
            );
        }
    }
    // A sender no partner configures (or one removed since) still has its history, said so.
    let out = run(dir, &["history", "--partner", "ZZ:GONE"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("ZZ:GONE is not a configured partner"),
        "{}",
        text(&out.stderr)
    );
    // A slip is answered with the partner meant.
    let out = run(dir, &["history", "--partner", "ACNE"]);
    assert!(
        text(&out.stderr).contains("the closest is ZZ:ACME (Acme Retail)"),
        "{}",
        text(&out.stderr)
    );
    // The lists print something for these forms.
    let out = run(dir, &["documents", "--key", "PO-4471"]);
    assert!(
        text(&out.stdout).contains("ZZ:ACME:850:PO-4471:00:"),
        "{}",
        text(&out.stdout)
    );
    let out = run(dir, &["documents", "--interchange", "ACME:101"]);
    assert!(
        text(&out.stdout).contains("PO-4471"),
        "{}",
        text(&out.stdout)
    );
    // A valid question with no answer says so.
    let out = run(dir, &["deliveries", "--partner", "GLOBEX"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains("no delivery"),
        "{}",
        text(&out.stderr)
    );
    let out = run(dir, &["deliveries", "retry", "--all-dead"]);
    assert_eq!(out.status.code(), Some(0), "nothing dead is nothing to do");
}
