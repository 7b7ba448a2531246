//! Writes a deterministic, realistic X12 file of about SIZE_MB megabytes (10^6 bytes) to stdout.
//!
//! `cargo run --release --example generate -- SIZE_MB [SEED] [--one-interchange] > file.x12`
//!
//! The same arguments always give the same bytes (see `testdata::generate`); the output
//! validates with no findings, so `x12gate validate file.x12` measures the clean path.
//! `--one-interchange` puts everything in one interchange, the worst case for memory.

use std::io::Write;
use std::process::ExitCode;

use testdata::{Generator, Options};

const USAGE: &str = "usage: generate SIZE_MB [SEED] [--one-interchange] > file.x12";

fn main() -> ExitCode {
    let (flags, args): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| a.starts_with("--"));
    let one_interchange = match flags.as_slice() {
        [] => false,
        [f] if f == "--one-interchange" => true,
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (size_mb, seed) = match args.as_slice() {
        [size] => (size.parse::<f64>().ok(), Some(1)),
        [size, seed] => (size.parse::<f64>().ok(), seed.parse::<u64>().ok()),
        _ => (None, None),
    };
    let (Some(size_mb), Some(seed)) = (size_mb.filter(|s| *s >= 0.0), seed) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let target = (size_mb * 1_000_000.0) as u64;
    let options = Options {
        one_interchange,
        ..Options::default()
    };
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
