//! Counts the segment terminators of an X12 file: the floor of `benches/large.sh`, the least
//! work any reader of the file does (read every byte once, find every segment's end).
//!
//! `cargo run --release -p testdata --example count_terminators -- FILE`
//!
//! The terminator is the byte after the ISA's 16th element (offset 105 of a file that begins
//! with its ISA, as generated files do). The file is read in blocks of 1 MiB, so memory stays
//! flat whatever its size; prints the count and the byte counted.

use std::fs::File;
use std::io::Read;
use std::process::ExitCode;

const BLOCK: usize = 1 << 20;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path] = args.as_slice() else {
        eprintln!("usage: count_terminators FILE");
        return ExitCode::from(2);
    };
    match count(path) {
        Ok((terminator, n)) => {
            println!("{n} segments (terminator {:?})", char::from(terminator));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("count_terminators: {path}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn count(path: &str) -> std::io::Result<(u8, u64)> {
    let mut file = File::open(path)?;
    let mut block = vec![0u8; BLOCK];
    let mut filled = 0;
    // The first block must hold the whole ISA; a read can return less than asked.
    while filled < 106 {
        let n = file.read(&mut block[filled..])?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    if filled < 106 || !block.starts_with(b"ISA") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "does not begin with a whole ISA",
        ));
    }
    let terminator = block[105];
    let mut segments = memchr::memchr_iter(terminator, &block[..filled]).count() as u64;
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            return Ok((terminator, segments));
        }
        segments += memchr::memchr_iter(terminator, &block[..n]).count() as u64;
    }
}
