//! Writes a deterministic, realistic X12 file of about SIZE_MB megabytes (10^6 bytes) to stdout.
//!
//! `cargo run --release -p testdata --example generate -- SIZE_MB [SEED] [--one-interchange]
//! [--small-sets] [--to ID] > file.x12`
//!
//! The same arguments always give the same bytes (see `testdata::generate`); the output
//! validates with no findings, so `x12gate validate file.x12` measures the clean path.
//! - `--one-interchange` puts everything in one interchange, the worst case for memory.
//! - `--small-sets` writes one 004010 interchange of tiny purchase orders (about 180 bytes
//!   each, at most 100,000 to a group), the worst case for per-set overhead: 1,000,000 sets
//!   are about 186 MB.
//! - `--to ID` addresses every interchange to ID (ISA08; GS03 is the partner's application
//!   code, or ID itself), so a gateway whose id is ID takes the file; say `--to 6123456789`.
//!   The rest of the output is what it would be without it.

use std::io::Write;
use std::process::ExitCode;

use testdata::{Generator, Options};

const USAGE: &str =
    "usage: generate SIZE_MB [SEED] [--one-interchange] [--small-sets] [--to ID] > file.x12";

fn usage(why: &str) -> ExitCode {
    eprintln!("generate: {why}\n{USAGE}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut options = Options::default();
    let mut args = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--one-interchange" => options.one_interchange = true,
            "--small-sets" => options.small_sets = true,
            "--to" => match it.next() {
                Some(id) => options.to = Some(id),
                None => return usage("--to needs an id"),
            },
            _ if a.starts_with("--to=") => options.to = Some(a["--to=".len()..].to_string()),
            _ if a.starts_with("--") => return usage(&format!("unknown option {a}")),
            _ => args.push(a),
        }
    }
    if let Err(e) = options.check() {
        return usage(&e);
    }
    let (size_mb, seed) = match args.as_slice() {
        [size] => (size.parse::<f64>().ok(), Some(1)),
        [size, seed] => (size.parse::<f64>().ok(), seed.parse::<u64>().ok()),
        _ => (None, None),
    };
    let (Some(size_mb), Some(seed)) = (size_mb.filter(|s| *s >= 0.0), seed) else {
        return usage("expected SIZE_MB (a number of at least 0) and an optional SEED");
    };
    let target = (size_mb * 1_000_000.0) as u64;
    let mut out = std::io::stdout().lock();
    let result = Generator::with_options(seed, options)
        .write_to(&mut out, target)
        .and_then(|written| out.flush().map(|()| written));
    match result {
        Ok(written) => {
            eprintln!("{written} bytes, seed {seed}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("generate: {e}");
            ExitCode::FAILURE
        }
    }
}
