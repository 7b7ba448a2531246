//! The two durable floors of `benches/throughput.sh`: what writing `process`'s documents costs
//! the disk alone, measured in the same run as `process` on the same disk.
//!
//! `cargo run --release -p testdata --example floors -- DIR BYTES DOCUMENTS INTERCHANGES`
//!
//! Writes DOCUMENTS documents of BYTES in all (split evenly; the sizes of `process`'s files
//! vary, but a floor depends on the bytes and the syncs, not on the contents) into a fresh
//! folder under DIR, two ways:
//! - the log floor: every document appended to one file, an `fdatasync` after every N
//!   documents and one at the end, N = DOCUMENTS / INTERCHANGES * 256 (at least 1): a batch of
//!   256 interchanges' worth, what one commit of `process` covers;
//! - the per-file floor: one file per document, serially, as a careful writer makes each one
//!   durable: written under a temporary name, fsynced, renamed (and the folder fsynced once at
//!   the end).
//!
//! Prints one line per floor: its name, seconds, MB/s (10^6 bytes) and documents/s, separated
//! by spaces, for the script to read. The folder is removed at the end.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: floors DIR BYTES DOCUMENTS INTERCHANGES";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, bytes, documents, interchanges] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let (Ok(bytes), Ok(documents), Ok(interchanges)) = (
        bytes.parse::<u64>(),
        documents.parse::<u64>(),
        interchanges.parse::<u64>(),
    ) else {
        eprintln!("floors: BYTES, DOCUMENTS and INTERCHANGES are whole numbers\n{USAGE}");
        return ExitCode::from(2);
    };
    if documents == 0 || interchanges == 0 {
        eprintln!("floors: no documents or no interchanges: nothing to measure");
        return ExitCode::from(2);
    }
    let per_sync = (documents / interchanges * 256).max(1);
    let sizes = sizes(bytes, documents);
    match run(Path::new(dir), &sizes, per_sync) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floors: {dir}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// BYTES split over DOCUMENTS, the remainder one byte each to the first ones.
fn sizes(bytes: u64, documents: u64) -> Vec<usize> {
    let each = bytes / documents;
    let extra = bytes % documents;
    (0..documents)
        .map(|i| (each + u64::from(i < extra)) as usize)
        .collect()
}

fn run(dir: &Path, sizes: &[usize], per_sync: u64) -> std::io::Result<()> {
    let work = dir.join(format!("floors-{}", std::process::id()));
    fs::create_dir_all(&work)?;
    // JSON-like bytes, not zeros, in case the file system treats zeros specially.
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let content: Vec<u8> = b"{\"document\":\"x12gate floor\"}\n"
        .iter()
        .copied()
        .cycle()
        .take(largest)
        .collect();
    let total: usize = sizes.iter().sum();

    let start = Instant::now();
    log_floor(&work.join("log"), sizes, &content, per_sync)?;
    report("log", start.elapsed().as_secs_f64(), total, sizes.len());

    let files = work.join("files");
    fs::create_dir(&files)?;
    let start = Instant::now();
    per_file_floor(&files, sizes, &content)?;
    report(
        "per-file",
        start.elapsed().as_secs_f64(),
        total,
        sizes.len(),
    );

    fs::remove_dir_all(&work)
}

fn log_floor(path: &Path, sizes: &[usize], content: &[u8], per_sync: u64) -> std::io::Result<()> {
    let mut log = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(path)?;
    let mut since_sync = 0;
    for &size in sizes {
        log.write_all(&content[..size])?;
        since_sync += 1;
        if since_sync == per_sync {
            log.sync_data()?;
            since_sync = 0;
        }
    }
    log.sync_data()
}

fn per_file_floor(dir: &Path, sizes: &[usize], content: &[u8]) -> std::io::Result<()> {
    for (i, &size) in sizes.iter().enumerate() {
        let temporary = dir.join(format!(".tmp-{i}"));
        let mut file = File::create_new(&temporary)?;
        file.write_all(&content[..size])?;
        file.sync_all()?;
        fs::rename(&temporary, dir.join(format!("{i}.json")))?;
    }
    File::open(dir)?.sync_all()
}

fn report(floor: &str, seconds: f64, bytes: usize, documents: usize) {
    let seconds = seconds.max(1e-9);
    println!(
        "{floor} {seconds:.3} {:.1} {:.0}",
        bytes as f64 / 1e6 / seconds,
        documents as f64 / seconds
    );
}
