//! End-to-end throughput of `x12gate process` with durable settings, next to the floors of the
//! disk it runs on, all measured in the same run so the ratios mean something on any machine.
//!
//! ```text
//! cargo bench --bench process
//! X12GATE_BENCH_FILES=2000 cargo bench --bench process      # a shorter run
//! ```
//!
//! What it does:
//! 1. Generates `X12GATE_BENCH_FILES` (default 10,000) single-interchange files, one small
//!    850 each (one group, one set, 1-3 KB, from `testdata::generate`), re-addressed from a
//!    configured partner (`ZZ:ACME`) to the gateway (`ZZ:X12GATE`) and renumbered so every
//!    ISA13 and GS06 is distinct: every file takes the clean path, accepted with a 997 and a
//!    translation. The files are checked (no validation findings), written, and `sync`ed
//!    before anything is timed.
//! 2. Runs the release binary (`CARGO_BIN_EXE_x12gate`, built with the bench profile) as
//!    `x12gate --config ... process --json FILE...` over all of them, `X12GATE_BENCH_CHUNK`
//!    (default 2,000) files per call to stay under the argument-length limit, one call after
//!    the other against one fresh registry, and reports the total wall time. Every file must
//!    come back `accepted`, or the bench fails.
//! 3. Measures the floors in the same folder (so on the same disk), a sample right before each
//!    `process` call so that a disk whose flush latency drifts during the run (shared virtual
//!    disks do, by a factor of ten) is compared with itself:
//!    - SQLite: a fresh database, `journal_mode = WAL`, `synchronous = FULL` (the registry's
//!      settings), one `INSERT` per `BEGIN IMMEDIATE` ... `COMMIT`: durable commits per second
//!      (`X12GATE_BENCH_SQLITE_ROWS` in all, default 2,000). Also 64 rows per commit, the
//!      ceiling a group commit could reach.
//!    - fsync: write 1 KB to a new file and `fsync` it (`X12GATE_BENCH_FSYNCS` in all, default
//!      1,000), from one thread, and at the end from 8 threads at once (ext4 and XFS share one
//!      journal commit among concurrent fsyncs).
//!    - `outputs::write_atomic` (temp file + fsync + rename + fsync of the folder), the primitive
//!      `process` writes each output with, from one thread and from 8.
//!    - A model of group commit (no parsing, same primitives): per batch of
//!      `X12GATE_BENCH_BATCH` (default 128) interchanges, one durable transaction claims them
//!      all, their outputs are written and fsynced from 8 threads (and, for comparison, from
//!      one), renamed, each output folder fsynced once, and one durable transaction completes
//!      them all (`X12GATE_BENCH_MODEL_FILES` interchanges, default 4,000): the rate that
//!      design could reach on this disk.
//!
//! The work folder is `X12GATE_BENCH_DIR`, by default under cargo's target tmp folder, so on
//! the repository's disk and not on a tmpfs `/tmp` (the file system type is printed; a tmpfs
//! or overlay result is not a disk result). It is removed at the end unless
//! `X12GATE_BENCH_KEEP=1`.
//!
//! Run without `--bench` (`cargo test --benches`), it does a smoke run of 20 files.
//!
//! `X12GATE_BENCH_DIR=/dev/shm/x12gate-bench` runs everything on a tmpfs, where fsync costs
//! nothing: the `process` figure is then the CPU ceiling of the pipeline, not a durable result.
//!
//! Every phase prints its rate next to the floors sampled just before it and its ratio to the
//! SQLite floor; the summary gives the totals and the median per-call ratio.
//!
//! To see where the time of `process` goes, keep a run's folder (`X12GATE_BENCH_KEEP=1`) and
//! count its fsyncs per interchange by target with `scripts/profile-process.sh FOLDER 2000`.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, TransactionBehavior};

#[path = "../tests/pg_server.rs"]
mod pg_server;
use testdata::Generator;
use x12gate::pipeline::Report;
use x12gate::x12::Limits;

const SEED: u64 = 850;
const MAX_FILE_BYTES: usize = 3000;
const MIN_FILE_BYTES: usize = 1000;
const THREADS: usize = 8;

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: expected a whole number")),
        Err(_) => default,
    }
}

// The measurements in the order docs/figures.md's table lists them, each printed as it ends.
#[allow(clippy::too_many_lines)]
fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (files, sqlite_rows, fsyncs) = if full {
        (
            env_usize("X12GATE_BENCH_FILES", 10_000),
            env_usize("X12GATE_BENCH_SQLITE_ROWS", 2_000),
            env_usize("X12GATE_BENCH_FSYNCS", 1_000),
        )
    } else {
        (20, 20, 16)
    };
    let chunk = env_usize("X12GATE_BENCH_CHUNK", 2_000).max(1);
    let batch = env_usize("X12GATE_BENCH_BATCH", 128).max(1);
    let root = match std::env::var_os("X12GATE_BENCH_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-process"),
    }
    .join(format!("run-{}", std::process::id()));
    fs::create_dir_all(&root).expect("create the work folder");
    let root = root.canonicalize().expect("canonical work folder");
    println!("work folder: {}", root.display());
    println!(
        "file system: {} (the same disk as the repository: {}); {} cores",
        fs_type(&root),
        same_device(&root, Path::new(env!("CARGO_MANIFEST_DIR"))),
        cores()
    );

    let (config, paths) = prepare_inbox(&root, files);
    let chunks = files.div_ceil(chunk).max(1);
    // The floors are sampled right before each `process` call, so a disk whose flush latency
    // drifts during the run (a shared virtual disk does) is compared with itself.
    let (rows_each, fsyncs_each) = ((sqlite_rows / chunks).max(20), (fsyncs / chunks).max(16));
    let floors = root.join("floors");
    fs::create_dir_all(&floors).unwrap();
    let mut sample = 0;
    let mut sample_floors = || {
        sample += 1;
        let s = sqlite_floor(&floors.join(format!("floor-{sample}.db")), rows_each, 1);
        let f = fsync_floor(&floors.join(format!("fsync-{sample}")), fsyncs_each, 1);
        (s, f)
    };
    println!();
    println!(
        "{:<24} {:>7} {:>9} {:>12} {:>14} {:>10} {:>8}",
        "phase", "items", "seconds", "items/s", "sqlite commit/s", "fsync/s", "/sqlite"
    );
    let line = |what: &str, n: usize, d: Duration, floor: &((Duration, usize), Duration)| {
        let ((sd, sn), fd) = floor;
        let sqlite = rate(*sn, *sd);
        println!(
            "{what:<24} {n:>7} {:>9.2} {:>12.1} {sqlite:>14.1} {:>10.1} {:>8.3}",
            d.as_secs_f64(),
            rate(n, d),
            rate(fsyncs_each, *fd),
            rate(n, d) / sqlite
        );
    };
    let mut process = Duration::ZERO;
    let mut ratios = Vec::new();
    let (mut sqlite_total, mut fsync_total) = ((Duration::ZERO, 0), Duration::ZERO);
    for (c, files) in paths.chunks(chunk).enumerate() {
        let floor = sample_floors();
        sqlite_total = (sqlite_total.0 + floor.0 .0, sqlite_total.1 + floor.0 .1);
        fsync_total += floor.1;
        let took = process_call(&config, files);
        process += took;
        line(&format!("process call {c}"), files.len(), took, &floor);
        ratios.push(rate(files.len(), took) / rate(floor.0 .1, floor.0 .0));
    }
    let all_floors = (sqlite_total, fsync_total / chunks as u32);
    line("process, all calls", files, process, &all_floors);

    let floor = sample_floors();
    let sqlite64 = sqlite_floor(&root.join("floor64.db"), sqlite_rows.max(64) * 4, 64);
    line("sqlite 64 rows/commit", sqlite64.1, sqlite64.0, &floor);
    let fsync_n = fsync_floor(&root.join("fsyncn"), fsyncs * 2, THREADS);
    line(
        &format!("fsync, {THREADS} threads"),
        fsyncs * 2,
        fsync_n,
        &floor,
    );
    let atomic1 = atomic_floor(&root.join("atomic1"), fsyncs / 2, 1);
    line("write_atomic, 1 thread", fsyncs / 2, atomic1, &floor);
    let atomic_n = atomic_floor(&root.join("atomicn"), fsyncs, THREADS);
    let what = format!("write_atomic, {THREADS} threads");
    line(&what, fsyncs, atomic_n, &floor);
    let model_n = files.min(env_usize("X12GATE_BENCH_MODEL_FILES", 4_000));
    let floor = sample_floors();
    let model = group_commit_model(&root.join("model"), model_n, batch, THREADS);
    line(
        &format!("model B={batch} T={THREADS}"),
        model_n,
        model,
        &floor,
    );
    let model_ratio = rate(model_n, model) / rate(floor.0 .1, floor.0 .0);
    let floor = sample_floors();
    let model1 = group_commit_model(&root.join("model1"), model_n, batch, 1);
    line(&format!("model B={batch} T=1"), model_n, model1, &floor);

    let (p, s, f) = (
        rate(files, process),
        rate(sqlite_total.1, sqlite_total.0),
        rate(fsyncs_each * chunks, fsync_total),
    );
    println!();
    println!("process:               {p:.1} interchanges/s ({files} single-interchange files)");
    println!("SQLite durable floor:  {s:.1} commits/s (WAL, synchronous=FULL, one INSERT each)");
    println!("fsync floor:           {f:.1} fsyncs/s (1 KB new file, one thread)");
    println!(
        "process / SQLite floor: {:.3} (an interchange takes the time of {:.2} durable commits)",
        p / s,
        s / p
    );
    println!(
        "process / fsync floor:  {:.3} (an interchange takes the time of {:.2} fsyncs)",
        p / f,
        f / p
    );
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    println!(
        "median per-call process / SQLite floor: {median:.3}; group-commit model (I/O only, \
         no parsing): {model_ratio:.3}, {:.1}x process",
        model_ratio / median
    );

    postgres_phase(&root, &paths, chunk, p, sqlite_rows);

    if std::env::var_os("X12GATE_BENCH_KEEP").is_some_and(|v| v == "1") {
        println!("kept: {}", root.display());
    } else {
        let _ = fs::remove_dir_all(&root);
    }
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The type of the file system holding `path`, from the longest matching mount point; for
/// ext3/ext4, whether it has a journal (a jbd2 entry for its device). Without one, fsync does
/// not batch through a journal commit, and creating files where many were deleted in the last
/// minutes is slow (the allocator skips recently deleted inodes), so a run right after
/// another run's cleanup can be several times slower.
fn fs_type(path: &Path) -> String {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let Some((_, device, kind)) = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let (device, point, kind) = (f.next()?, f.next()?, f.next()?);
            let point = point.replace("\\040", " ");
            path.starts_with(&point)
                .then(|| (point.len(), device.to_string(), kind.to_string()))
        })
        .max()
    else {
        return "unknown".into();
    };
    if kind != "ext4" && kind != "ext3" {
        return kind;
    }
    let name = device.rsplit('/').next().unwrap_or_default().to_string();
    let journal = fs::read_dir("/proc/fs/jbd2")
        .map(|d| {
            d.flatten().any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{name}-"))
            })
        })
        .unwrap_or(false);
    if journal {
        format!("{kind} with a journal")
    } else {
        format!("{kind} WITHOUT a journal: wait some minutes after deleting many files")
    }
}

fn same_device(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev(),
        _ => false,
    }
}

/// `n` small 850 interchanges, one per file, each validating with no findings.
fn interchanges(n: usize) -> Vec<Vec<u8>> {
    let mut generator = Generator::new(SEED);
    let mut out = Vec::with_capacity(n);
    let mut buf = Vec::new();
    while out.len() < n {
        buf.clear();
        // A target of one byte: one interchange of one group of one set.
        generator
            .write_to(&mut buf, 1)
            .expect("writing to a Vec cannot fail");
        if buf.len() > MAX_FILE_BYTES || buf.len() < MIN_FILE_BYTES {
            continue;
        }
        let Some(ic) = readdress(&buf, out.len() as u32 + 1) else {
            continue;
        };
        out.push(ic);
    }
    out
}

/// The interchange in `input` sent by `ZZ:ACME` to `ZZ:X12GATE` with ISA13/IEA02 and
/// GS06/GE02 set to `number`; `None` unless it holds exactly one 850.
fn readdress(input: &[u8], number: u32) -> Option<Vec<u8>> {
    if input.len() < 106 || !input.starts_with(b"ISA") {
        return None;
    }
    let (element, terminator) = (input[3], input[105]);
    let mut out = Vec::with_capacity(input.len());
    let mut sets = 0;
    for segment in input.split(|b| *b == terminator) {
        // Line endings after the terminator stay with the next segment's start.
        let lead = segment
            .iter()
            .take_while(|b| **b == b'\r' || **b == b'\n')
            .count();
        let (eol, segment) = segment.split_at(lead);
        if segment.is_empty() {
            out.extend_from_slice(eol);
            continue;
        }
        let mut fields: Vec<Vec<u8>> = segment
            .split(|b| *b == element)
            .map(<[u8]>::to_vec)
            .collect();
        let number9 = format!("{number:09}").into_bytes();
        match fields[0].as_slice() {
            b"ISA" if fields.len() == 17 => {
                fields[6] = format!("{:<15}", "ACME").into_bytes();
                fields[8] = format!("{:<15}", "X12GATE").into_bytes();
                fields[13] = number9;
            }
            b"GS" if fields.len() > 6 => fields[6] = number.to_string().into_bytes(),
            b"GE" if fields.len() > 2 => fields[2] = number.to_string().into_bytes(),
            b"IEA" if fields.len() > 2 => fields[2] = number9,
            b"ST" => {
                if fields.get(1).map(Vec::as_slice) != Some(b"850") {
                    return None;
                }
                sets += 1;
            }
            _ => {}
        }
        out.extend_from_slice(eol);
        out.extend_from_slice(&fields.join(&element));
        out.push(terminator);
    }
    (sets == 1
        && x12gate::check::file(
            &out,
            Limits::default(),
            &x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap()),
        )
        .is_empty())
    .then_some(out)
}

const CONFIG: &str = r#"[gateway]
id_qualifier = "ZZ"
id = "X12GATE"
inbox = "inbox"
outbox = "outbox"
out = "out"
archive = "archive"
rejected = "rejected"
database = "x12gate.db"
lease_seconds = 300
unknown_partners = "reject"

[[partner]]
name = "Acme Retail"
id_qualifier = "ZZ"
id = "ACME"
duplicate_window_days = 30
ack = "997"
ta1 = "on_error"
check_group_duplicates = true
fingerprint_ignore = ["ISA09", "ISA10", "GS04", "GS05"]
"#;

/// A gateway folder `name` under `root` with the bench's configuration on `database`.
fn gateway_on(root: &Path, name: &str, database: &str) -> PathBuf {
    let dir = root.join(name);
    fs::create_dir_all(&dir).expect("create a gateway folder");
    let config = dir.join("partners.toml");
    let text = CONFIG.replace(
        "database = \"x12gate.db\"",
        &format!("database = \"{database}\""),
    );
    fs::write(&config, text).expect("write the config");
    config
}

/// `files` through `process` in calls of `chunk` files, by `nodes` processes at once (each
/// its half, third, ...): the wall time.
fn process_by(config: &Path, files: &[PathBuf], chunk: usize, nodes: usize) -> Duration {
    let share = files.len().div_ceil(nodes.max(1)).max(1);
    let t = Instant::now();
    std::thread::scope(|s| {
        for part in files.chunks(share) {
            s.spawn(move || {
                for c in part.chunks(chunk) {
                    process_call(config, c);
                }
            });
        }
    });
    t.elapsed()
}

/// The registry on PostgreSQL, on a durable server of our own (`fsync = on`,
/// `synchronous_commit = on`; or `X12GATE_BENCH_POSTGRES=postgres://USER@HOST:PORT`, a user
/// that may create databases): the bare commit rate of the server (one INSERT per
/// transaction, from one connection), `process` with one node, and two nodes (two processes,
/// half the files each) on one server; SQLite's two processes on one file beside them.
fn postgres_phase(root: &Path, paths: &[PathBuf], chunk: usize, sqlite_one: f64, rows: usize) {
    let server = match std::env::var("X12GATE_BENCH_POSTGRES") {
        Ok(url) if !url.is_empty() => pg_server::Server {
            base: url.trim_end_matches('/').to_string(),
            socket: None,
        },
        _ => match pg_server::start(true) {
            Ok(s) => s,
            Err(e) => {
                println!("\nPostgreSQL: skipped, no server could be started: {e}");
                return;
            }
        },
    };
    let n = paths.len();
    let floor = postgres_floor(&pg_server::database_on(&server), rows);
    let one = process_by(
        &gateway_on(root, "pg-one", &pg_server::database_on(&server)),
        paths,
        chunk,
        1,
    );
    // The same server through its Unix socket: what a node on the database's host saves in
    // round trips.
    let local = server.socket.as_ref().map(|socket| {
        let name = pg_server::database_on(&server);
        let db = name.rsplit('/').next().unwrap_or_default().to_string();
        let config = gateway_on(root, "pg-socket", &format!("{socket}/{db}"));
        rate(n, process_by(&config, paths, chunk, 1))
    });
    let two = process_by(
        &gateway_on(root, "pg-two", &pg_server::database_on(&server)),
        paths,
        chunk,
        2,
    );
    let sqlite_two = process_by(
        &gateway_on(root, "sqlite-two", "x12gate.db"),
        paths,
        chunk,
        2,
    );
    let (floor, one, two, sqlite_two) = (
        rate(rows, floor),
        rate(n, one),
        rate(n, two),
        rate(n, sqlite_two),
    );
    println!();
    println!("PostgreSQL durable floor: {floor:.1} commits/s (one INSERT per transaction)");
    println!(
        "process on PostgreSQL, 1 node:  {one:.1} interchanges/s ({:.2}x SQLite's {sqlite_one:.1})",
        one / sqlite_one
    );
    if let Some(local) = local {
        println!(
            "process on PostgreSQL, 1 node, Unix socket: {local:.1} interchanges/s ({:.2}x SQLite's)",
            local / sqlite_one
        );
    }
    println!(
        "process on PostgreSQL, 2 nodes: {two:.1} interchanges/s ({:.2}x one node)",
        two / one
    );
    println!(
        "process on SQLite, 2 processes: {sqlite_two:.1} interchanges/s ({:.2}x one process)",
        sqlite_two / sqlite_one
    );
}

/// `rows` INSERTs, each its own durable transaction, on a new table of `url`; the time.
fn postgres_floor(url: &str, rows: usize) -> Duration {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    client
        .batch_execute(
            "CREATE TABLE t (id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL UNIQUE, detail TEXT NOT NULL)",
        )
        .unwrap();
    let insert = client
        .prepare("INSERT INTO t (key, detail) VALUES ($1, $2)")
        .unwrap();
    let detail = "x".repeat(200);
    let t = Instant::now();
    for i in 0..rows {
        client
            .execute(&insert, &[&format!("ZZ:ACME:{i:09}"), &detail])
            .unwrap();
    }
    t.elapsed()
}

/// Generates and writes the inbox and the configuration; the configuration's path and the
/// inbound files.
fn prepare_inbox(root: &Path, n: usize) -> (PathBuf, Vec<PathBuf>) {
    let dir = root.join("gateway");
    let inbox = dir.join("inbox");
    fs::create_dir_all(&inbox).expect("create the inbox");
    let config = dir.join("partners.toml");
    fs::write(&config, CONFIG).expect("write the config");
    let started = Instant::now();
    let all = interchanges(n);
    let bytes: usize = all.iter().map(Vec::len).sum();
    let mut paths = Vec::with_capacity(n);
    for (i, ic) in all.iter().enumerate() {
        let p = inbox.join(format!("po-{i:06}.x12"));
        fs::write(&p, ic).expect("write an inbound file");
        paths.push(p);
    }
    // Settle the inbox on disk so its writeback does not land in the timed part.
    let _ = Command::new("sync").status();
    println!(
        "generated {n} files of one 850 each ({:.0} bytes on average) in {:.1} s",
        bytes as f64 / n.max(1) as f64,
        started.elapsed().as_secs_f64()
    );
    println!("config: {}", config.display());
    (config, paths)
}

/// One `x12gate process --json` call over `files`; its wall time. Every file must come back
/// accepted with one acknowledgment and one translation.
fn process_call(config: &Path, files: &[PathBuf]) -> Duration {
    let t = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_x12gate"))
        .arg("--config")
        .arg(config)
        .arg("process")
        .arg("--json")
        .args(files)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run x12gate");
    let took = t.elapsed();
    assert!(
        output.status.success(),
        "x12gate process failed ({})",
        output.status
    );
    let reports: Vec<Report> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report per line"))
        .collect();
    assert_eq!(reports.len(), files.len(), "one report per file");
    for r in &reports {
        assert_eq!(
            r.disposition.as_str(),
            "accepted",
            "the bench measures the clean path: {r:?}"
        );
        assert_eq!((r.acks.len(), r.outputs.len()), (1, 1), "{r:?}");
    }
    took
}

/// `rows` INSERTs, `per_commit` to a durable transaction; the time and the rows inserted.
fn sqlite_floor(path: &Path, rows: usize, per_commit: usize) -> (Duration, usize) {
    let mut conn = Connection::open(path).expect("open the floor database");
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, detail TEXT NOT NULL)",
    )
    .unwrap();
    let detail = "x".repeat(200);
    let t = Instant::now();
    let mut i = 0;
    while i < rows {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        for _ in 0..per_commit.min(rows - i) {
            tx.execute(
                "INSERT INTO t (key, detail) VALUES (?1, ?2)",
                params![format!("ZZ:ACME:{i:09}"), detail],
            )
            .unwrap();
            i += 1;
        }
        tx.commit().unwrap();
    }
    (t.elapsed(), rows)
}

/// `n` files of 1 KB, each written and fsynced, from `threads` threads; the wall time.
fn fsync_floor(dir: &Path, n: usize, threads: usize) -> Duration {
    fs::create_dir_all(dir).unwrap();
    let data = vec![b'x'; 1024];
    let t = Instant::now();
    std::thread::scope(|s| {
        for th in 0..threads {
            let data = &data;
            s.spawn(move || {
                for i in (th..n).step_by(threads) {
                    let mut f = File::create(dir.join(format!("f{i}"))).unwrap();
                    f.write_all(data).unwrap();
                    f.sync_all().unwrap();
                }
            });
        }
    });
    t.elapsed()
}

/// `n` files through `outputs::write_atomic`, from `threads` threads; the wall time.
fn atomic_floor(dir: &Path, n: usize, threads: usize) -> Duration {
    fs::create_dir_all(dir).unwrap();
    let data = vec![b'x'; 1500];
    let t = Instant::now();
    std::thread::scope(|s| {
        for th in 0..threads {
            let data = &data;
            s.spawn(move || {
                for i in (th..n).step_by(threads) {
                    x12gate::outputs::write_atomic(dir, format!("f{i}.json"), data, "bench:1:x")
                        .unwrap();
                }
            });
        }
    });
    t.elapsed()
}

/// The group commit proposed for `process`, built from the same primitives with no parsing:
/// per batch of `batch` interchanges, one durable transaction claims them all (claim row,
/// group key, control-number reservation), their two outputs each (a 2 KB translation and a
/// 400-byte acknowledgment) are written to temporary files and fsynced from `threads` threads,
/// renamed, the two output folders fsynced once, and one durable transaction completes them
/// all (state, stored acknowledgment, audit event). What the design could reach on this disk.
// The model's steps in the order the pipeline takes them, so the two can be read side by side.
#[allow(clippy::too_many_lines)]
fn group_commit_model(dir: &Path, n: usize, batch: usize, threads: usize) -> Duration {
    let (out, outbox) = (dir.join("out"), dir.join("outbox"));
    for d in [&out, &outbox] {
        fs::create_dir_all(d.join(".tmp")).unwrap();
    }
    let mut conn = Connection::open(dir.join("model.db")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch(
        "CREATE TABLE interchanges (key TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT,
             lease_expires INTEGER, fingerprint TEXT, reservation TEXT, disposition TEXT);
         CREATE TABLE groups (partner TEXT, gs02 TEXT, gs06 TEXT, interchange_key TEXT,
             PRIMARY KEY (partner, gs02, gs06));
         CREATE TABLE counters (partner TEXT, kind TEXT, value INTEGER, PRIMARY KEY (partner, kind));
         CREATE TABLE acks (key TEXT, seq INTEGER, kind TEXT, path TEXT, bytes BLOB);
         CREATE TABLE events (id INTEGER PRIMARY KEY, at INTEGER, event TEXT, key TEXT, detail TEXT);",
    )
    .unwrap();
    let translation = vec![b'j'; 2048];
    let ack = vec![b'a'; 400];
    let detail = "d".repeat(300);
    let t = Instant::now();
    let mut first = 0;
    while first < n {
        let keys: Vec<String> = (first..n.min(first + batch))
            .map(|i| format!("ZZ:ACME:{i:09}"))
            .collect();
        first += keys.len();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        for k in &keys {
            tx.execute(
                "INSERT INTO interchanges (key, state, owner, lease_expires, fingerprint)
                 VALUES (?1, 'in_flight', 'bench', 0, ?2)",
                params![k, "f".repeat(64)],
            )
            .unwrap();
            tx.execute(
                "INSERT INTO groups VALUES ('ZZ:ACME', 'ACMERET', ?1, ?1)",
                params![k],
            )
            .unwrap();
            let v: i64 = tx
                .query_row(
                    "INSERT INTO counters VALUES ('ZZ:ACME', 'ISA13', 1)
                     ON CONFLICT (partner, kind) DO UPDATE SET value = value + 1 RETURNING value",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            tx.execute(
                "UPDATE interchanges SET reservation = ?2 WHERE key = ?1",
                params![k, v.to_string()],
            )
            .unwrap();
        }
        tx.commit().unwrap();
        let jobs: Vec<(&Path, String, &[u8])> = keys
            .iter()
            .flat_map(|k| {
                let name = k.replace(':', "_");
                [
                    (
                        out.as_path(),
                        format!("{name}.json"),
                        translation.as_slice(),
                    ),
                    (outbox.as_path(), format!("{name}.997.x12"), ack.as_slice()),
                ]
            })
            .collect();
        std::thread::scope(|s| {
            for th in 0..threads {
                let jobs = &jobs;
                s.spawn(move || {
                    for (d, name, bytes) in jobs.iter().skip(th).step_by(threads) {
                        let tmp = d.join(".tmp").join(name);
                        let mut f = File::create(&tmp).unwrap();
                        f.write_all(bytes).unwrap();
                        f.sync_all().unwrap();
                        fs::rename(&tmp, d.join(name)).unwrap();
                    }
                });
            }
        });
        std::thread::scope(|s| {
            for d in [&out, &outbox] {
                s.spawn(move || File::open(d).unwrap().sync_all().unwrap());
            }
        });
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        for k in &keys {
            tx.execute(
                "UPDATE interchanges SET state = 'completed', owner = NULL, disposition = 'accepted'
                 WHERE key = ?1 AND owner = 'bench'",
                params![k],
            )
            .unwrap();
            tx.execute(
                "INSERT INTO acks VALUES (?1, 0, '997', ?1, ?2)",
                params![k, ack],
            )
            .unwrap();
            tx.execute(
                "INSERT INTO events (at, event, key, detail) VALUES (0, 'accepted', ?1, ?2)",
                params![k, detail],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    t.elapsed()
}
