//! Intake that never loses, doubles or hides a file (SPEC 7): files replaced under their name
//! while the first one is processed, watchers and processes killed at random or stopped, two
//! watchers on one inbox, arrival order, dead owners, files that are not regular files, and
//! many processes starting on a database that does not exist yet.
//!
//! The end state of every run is judged by the watch tests' one checker
//! ([`check_end_state`]): every file once in `archive/` or `rejected/` with its reason, every
//! interchange accepted once, no temporaries or unfinished work left.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::watch::{
    check_end_state, corpus, drop_all, drop_files, expected_summary, final_counts, interchange,
    wait_for, Gate, Run, Settings,
};

/// The registry's interchanges by disposition or unfinished state (`in_flight`, `failed`).
fn states(gate: &Gate) -> BTreeMap<String, u64> {
    let Ok(Some(registry)) = x12gate::registry::Registry::open_read_only(&gate.database()) else {
        return BTreeMap::new();
    };
    let mut by = BTreeMap::new();
    for (_, state, n) in registry.stats().unwrap_or_default() {
        *by.entry(state).or_insert(0) += n;
    }
    by
}

fn in_flight(gate: &Gate) -> u64 {
    states(gate).get("in_flight").copied().unwrap_or(0)
}

/// `x12gate ARGS...` in the gate's folder, in the background, stdout and stderr to files.
struct Proc {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Proc {
    fn start(gate: &Gate, name: &str, args: &[&str], failpoints: Option<&str>) -> Proc {
        let out = gate.dir().join(format!("{name}.out"));
        let err = gate.dir().join(format!("{name}.err"));
        let mut c = Command::new(assert_cmd::cargo::cargo_bin("x12gate"));
        c.current_dir(gate.dir())
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("FAILPOINTS")
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).expect("stdout file"))
            .stderr(fs::File::create(&err).expect("stderr file"));
        if let Some(p) = failpoints {
            c.env("FAILPOINTS", p);
        }
        Proc {
            child: c.spawn().expect("start x12gate"),
            out,
            err,
        }
    }

    fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{signal}");
    }

    fn wait(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().expect("poll") {
                return s;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("did not exit within {within:?}; stderr:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn stdout(&self) -> String {
        fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn reports(&self) -> Vec<Value> {
        self.stdout()
            .lines()
            .map(|l| serde_json::from_str(l).expect("process --json lines are JSON"))
            .collect()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One file of `count` interchanges numbered from `base`.
fn many(base: u32, count: u32) -> String {
    (0..count)
        .map(|i| interchange(base + i, &format!("PO-{}", base + i)))
        .collect()
}

/// A tiny xorshift, so random choices repeat from run to run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A partner's SFTP client reuses `orders.x12`: the second file arrives under the name while
/// the first (200 interchanges) is still being processed, by rename on even rounds and
/// written in place on odd ones. Both contents must be processed (claimed, acknowledged,
/// in the history) and archived, 30 rounds in a row.
#[test]
fn a_file_replaced_under_its_name_while_processed_is_processed_too() {
    let gate = Gate::new(Settings {
        settle_ms: 100,
        poll_ms: 50,
        ..Settings::default()
    });
    let inbox = gate.inbox();
    let name = inbox.join("orders.x12");
    let tmp = inbox.join(".orders.x12.tmp");
    let mut w = gate.start(&[]);
    let mut contents: Vec<String> = Vec::new();
    let mut overlapped = 0;
    const ROUNDS: u32 = 30;
    for round in 0..ROUNDS {
        let base = 100_000 + round * 1000;
        let a = many(base, 200);
        let b = interchange(base + 500, &format!("PO-B-{round}"));
        fs::write(&tmp, &a).unwrap();
        fs::rename(&tmp, &name).unwrap();
        wait_for(
            Duration::from_secs(30),
            "the first file to leave the inbox",
            || !name.exists(),
            || gate.state(),
        );
        if round % 2 == 0 {
            fs::write(&tmp, &b).unwrap();
            fs::rename(&tmp, &name).unwrap();
        } else {
            fs::write(&name, &b).unwrap();
        }
        // Still at work on the first file when the second one landed?
        if !gate.leftovers().is_empty() {
            overlapped += 1;
        }
        contents.push(a);
        contents.push(b);
        let want = contents.len();
        wait_for(
            Duration::from_secs(60),
            "both files archived",
            || gate.moved().archived.len() == want && gate.inbox_names().is_empty(),
            || gate.state(),
        );
    }
    w.signal("TERM");
    assert_eq!(
        w.wait(Duration::from_secs(30)).code(),
        Some(0),
        "{}",
        w.log()
    );
    eprintln!("{overlapped} of {ROUNDS} second files arrived while the first was in work");
    assert!(
        overlapped >= ROUNDS / 2,
        "only {overlapped} of {ROUNDS} rounds overlapped: the test proves little"
    );

    let m = gate.moved();
    assert!(m.rejected.is_empty(), "{m:?}");
    let mut archived: Vec<String> = m
        .archived
        .values()
        .map(|p| fs::read_to_string(p).expect("read an archived file"))
        .collect();
    archived.sort();
    contents.sort();
    assert!(
        archived == contents,
        "the archive is not exactly the files sent"
    );
    let history = gate.history();
    let accepted: Vec<&Value> = history
        .iter()
        .filter(|e| e["event"] == "accepted")
        .collect();
    assert_eq!(
        accepted.len() as u32,
        ROUNDS * 201,
        "one acceptance per interchange"
    );
    let keys: std::collections::BTreeSet<&str> =
        accepted.iter().filter_map(|e| e["key"].as_str()).collect();
    assert_eq!(keys.len(), accepted.len(), "an interchange accepted twice");
    for e in &accepted {
        assert!(
            e["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("inbox/orders.x12")),
            "the history names the file as it arrived: {e}"
        );
        assert_eq!(e["acks"].as_array().map(Vec::len), Some(1), "{e}");
    }
}

/// 2,000 files (valid, resent, conflicting, broken, not X12) drained by watchers that are
/// SIGKILLed at random moments, 50 times, each restarted at once; the lease is the default
/// five minutes, so only the dead-owner takeover can make progress. In the end every file is
/// once in `archive/` or `rejected/` with its reason, every interchange accepted once, and
/// no temporary or unfinished file is left.
#[test]
fn fifty_kills_while_draining_2000_files_lose_and_double_nothing() {
    let gate = Gate::new(Settings {
        settle_ms: 50,
        poll_ms: 50,
        lease_seconds: 300,
        ..Settings::default()
    });
    let files = corpus(2000, 200_000, false);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut placed_between = Vec::new();
    // The files arrive in portions, one before each life, so that batches stay small and
    // the kills, at random moments, fall in every step: taking, claiming, writing, placing,
    // cleaning up. A life that placed nothing (its batch outlasted it) makes the next one
    // longer, so that the backlog never outgrows the lives.
    let started = Instant::now();
    let mut extra = 0;
    for portion in files.chunks(40) {
        drop_all(&gate.inbox(), portion);
        let before = gate.moved().count();
        let mut w = gate.start(&[]);
        std::thread::sleep(Duration::from_millis(30 + rng.below(400) + extra));
        w.signal("KILL");
        // A killed process may still be finishing an fsync on a loaded disk.
        w.wait(Duration::from_secs(120));
        let placed = gate.moved().count() - before;
        placed_between.push(placed);
        // A loaded machine starts watchers slowly (each loads every definition first), and
        // the backlog a dead life leaves grows the next one's batch: what a life needed is
        // kept in part, so that the next lives do not all die before their first file again.
        extra = if placed == 0 {
            (extra + 500).min(10_000)
        } else {
            extra / 2
        };
    }
    let kills = placed_between.len();
    eprintln!(
        "{kills} kills in {:?}, files placed in each life: {placed_between:?}; then: {}",
        started.elapsed(),
        gate.state()
    );
    assert_eq!(kills, 50);
    assert!(
        placed_between.iter().filter(|n| **n > 0).count() >= 10,
        "too few lives placed anything: {placed_between:?}"
    );
    // How much the last kill left (on a fast machine the last life may have finished).
    eprintln!(
        "left after the last kill: {} in the inbox, {} in work folders",
        gate.inbox_names().len(),
        gate.leftovers().len()
    );
    // The last run drains what the lives left: it must keep placing files until it exits
    // (a stall is a hang), however slowly a loaded machine lets it go.
    let finish = Instant::now();
    let mut last = gate.start(&["--once"]);
    let status =
        crate::util::exit_progressing(&mut last.child, crate::util::STALL, "the last run", || {
            gate.moved().count()
        });
    let log = last.log();
    assert!(
        matches!(status.code(), Some(0 | 3)),
        "{status:?}; log:\n{log}"
    );
    eprintln!("the last run took {:?}", finish.elapsed());
    // Well within the five-minute lease: the dead lives' claims were taken over at once.
    assert!(
        finish.elapsed() < Duration::from_secs(120),
        "the last run took {:?}",
        finish.elapsed()
    );
    check_end_state(&gate, &files, Run::Killed);
}

/// Two watcher processes on one inbox and one registry, 1,000 files with resends and
/// reused numbers arriving while they run: each file is placed once, each interchange
/// decided once (no acknowledgment replayed that no partner resent), the two summaries add
/// up to one run's, and neither logs an error other than the conflicts themselves.
#[test]
fn two_watchers_on_one_inbox_take_each_file_once() {
    let settings = Settings::default();
    let gate = Gate::new(settings);
    let files = corpus(1000, 300_000, false);
    let mut a = gate.start(&[]);
    let mut b = gate.start(&[]);
    drop_files(
        &gate.inbox(),
        &files,
        Duration::from_millis(2),
        Duration::from_millis(settings.settle_ms + 200),
        Duration::ZERO,
    );
    wait_for(
        Duration::from_secs(300),
        "every file archived or rejected",
        || gate.moved().count() >= files.len() && gate.inbox_names().is_empty(),
        || gate.state(),
    );
    a.signal("TERM");
    b.signal("TERM");
    let (sa, sb) = (
        a.wait(Duration::from_secs(60)),
        b.wait(Duration::from_secs(60)),
    );
    let (la, lb) = (a.log(), b.log());
    assert_eq!((sa.code(), sb.code()), (Some(0), Some(0)), "{la}\n{lb}");
    check_end_state(&gate, &files, Run::Clean);
    let (ca, cb) = (
        final_counts(&la).expect("a's line"),
        final_counts(&lb).expect("b's line"),
    );
    assert!(
        ca[0] > 0 && cb[0] > 0,
        "one watcher did all the work: {ca:?} {cb:?}"
    );
    let sum: Vec<u64> = ca.iter().zip(cb).map(|(x, y)| x + y).collect();
    assert_eq!(sum, expected_summary(&files), "{la}\n{lb}");
    for log in [&la, &lb] {
        let errors: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("ERROR") && !l.contains("CONFLICT"))
            .collect();
        assert!(errors.is_empty(), "errors: {errors:#?}");
    }
}

/// First come, first served: a partner's file, then 10 ms later another file reusing its
/// control number for other content, with a name that sorts first. The original is accepted
/// and the later file refused (TA1 025), 20 rounds: ten one pair at a time, ten in a burst
/// where pairs land in different batches of different workers.
#[test]
fn the_earlier_arrival_wins_a_reused_control_number() {
    let gate = Gate::new(Settings {
        settle_ms: 200,
        poll_ms: 50,
        workers: 3,
        ..Settings::default()
    });
    let inbox = gate.inbox();
    let mut w = gate.start(&[]);
    // The arrival order is the modification time, which the kernel takes from a coarse
    // clock that a loaded machine lets lag: two writes 10 ms apart may get one time, and
    // the name that sorts first wins the tie. Each file gets its time from the test, 10 ms
    // after the one before, and is renamed into the inbox whole.
    let arrive = |name: String, text: String, at: std::time::SystemTime| {
        let tmp = gate.dir().join(&name);
        fs::write(&tmp, text).unwrap();
        fs::File::options()
            .write(true)
            .open(&tmp)
            .and_then(|f| f.set_modified(at))
            .unwrap();
        fs::rename(&tmp, inbox.join(name)).unwrap();
    };
    let pair = |round: u32| {
        let n = 400_000 + round;
        let at = std::time::SystemTime::now();
        arrive(
            format!("z-original-{round:02}.x12"),
            interchange(n, "PO-ORIGINAL"),
            at,
        );
        std::thread::sleep(Duration::from_millis(10));
        arrive(
            format!("a-reused-{round:02}.x12"),
            interchange(n, "PO-REUSED"),
            at + Duration::from_millis(10),
        );
    };
    for round in 0..10 {
        pair(round);
        let want = 2 * (round as usize + 1);
        wait_for(
            Duration::from_secs(60),
            "the pair placed",
            || gate.moved().count() == want,
            || gate.state(),
        );
    }
    for round in 10..20 {
        pair(round);
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_for(
        Duration::from_secs(60),
        "every pair placed",
        || gate.moved().count() == 40,
        || gate.state(),
    );
    w.signal("TERM");
    assert_eq!(w.wait(Duration::from_secs(30)).code(), Some(0));
    let m = gate.moved();
    let history = gate.history();
    let mut wrong = Vec::new();
    for round in 0..20u32 {
        let original = format!("z-original-{round:02}.x12");
        let reused = format!("a-reused-{round:02}.x12");
        let accepted_from = history
            .iter()
            .find(|e| {
                e["event"] == "accepted" && e["control_number"] == format!("{:09}", 400_000 + round)
            })
            .and_then(|e| e["file"].as_str())
            .unwrap_or_default()
            .to_string();
        if !m.archived.contains_key(&original)
            || !m.rejected.contains_key(&reused)
            || !accepted_from.ends_with(&original)
        {
            wrong.push(format!("round {round}: accepted from {accepted_from}"));
        }
    }
    assert!(wrong.is_empty(), "the later file won: {wrong:#?}");
}

/// `process` SIGKILLed in the middle of a 3,000-interchange file with a five-minute lease:
/// the rerun takes the dead process's claims over at once and finishes in seconds, each
/// interchange accepted once.
#[test]
fn a_process_killed_mid_batch_is_taken_over_at_once() {
    let gate = Gate::new(Settings {
        lease_seconds: 300,
        ..Settings::default()
    });
    let file = gate.dir().join("big.x12");
    fs::write(&file, many(500_000, 3000)).unwrap();
    let file_arg = file.display().to_string();
    let mut p = Proc::start(&gate, "killed", &["process", &file_arg], None);
    wait_for(
        Duration::from_secs(120),
        "claims in flight",
        || in_flight(&gate) > 0,
        || format!("{:?}", states(&gate)),
    );
    p.signal("KILL");
    p.wait(Duration::from_secs(120));
    let left = in_flight(&gate);
    assert!(left > 0, "the kill came too late to prove anything");
    let started = Instant::now();
    let mut rerun = Proc::start(&gate, "rerun", &["process", "--json", &file_arg], None);
    let status = rerun.wait(Duration::from_secs(120));
    let took = started.elapsed();
    assert_eq!(status.code(), Some(0), "{}", rerun.stderr());
    eprintln!("{left} claims of the killed process; the rerun took {took:?}");
    assert!(
        took < Duration::from_secs(60),
        "waited for the lease: {took:?}"
    );
    let reports = rerun.reports();
    assert_eq!(reports.len(), 3000);
    let taken_over = reports.iter().filter(|r| !r["took_over"].is_null()).count();
    assert_eq!(taken_over as u64, left, "every dead claim taken over");
    let history = gate.history();
    let accepted = history.iter().filter(|e| e["event"] == "accepted").count();
    assert_eq!(accepted, 3000, "{:?}", states(&gate));
    assert_eq!(states(&gate).get("accepted"), Some(&3000));
}

/// SIGTERM while `process` waits for an interchange that a live process holds: the wait
/// is announced at the default log level (who, until when), the signal ends it within
/// seconds (exit 130, the interchange reported in progress, nothing decided), and once the
/// holder is dead a rerun finishes at once.
#[cfg(feature = "failpoints")]
#[test]
fn sigterm_stops_a_process_waiting_for_a_live_holder() {
    let gate = Gate::new(Settings {
        lease_seconds: 300,
        ..Settings::default()
    });
    let file = gate.dir().join("held.x12");
    fs::write(&file, interchange(600_001, "PO-HELD")).unwrap();
    let file_arg = file.display().to_string();
    let holder = Proc::start(
        &gate,
        "holder",
        &["process", &file_arg],
        Some("claim.after=sleep(60000)"),
    );
    wait_for(
        Duration::from_secs(30),
        "the holder's claim",
        || in_flight(&gate) == 1,
        || format!("{:?}", states(&gate)),
    );
    let mut waiter = Proc::start(&gate, "waiter", &["process", "--json", &file_arg], None);
    let holder_pid = holder.child.id();
    wait_for(
        Duration::from_secs(30),
        "the waiter to say what it waits for",
        || {
            waiter
                .stderr()
                .contains(&format!("process {holder_pid} on"))
        },
        || waiter.stderr(),
    );
    let said = waiter.stderr();
    assert!(
        said.contains("WARN") && said.contains("waiting") && said.contains("lease_until"),
        "{said}"
    );
    let stopped = Instant::now();
    waiter.signal("TERM");
    let status = waiter.wait(Duration::from_secs(30));
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "{:?}",
        stopped.elapsed()
    );
    assert_eq!(status.code(), Some(130), "{}", waiter.stderr());
    let r = &waiter.reports()[0];
    assert_eq!(r["disposition"], "in_progress", "{r}");
    assert!(
        r["reason"]
            .as_str()
            .is_some_and(|s| s.contains(&format!("process {holder_pid}"))),
        "{r}"
    );
    assert!(gate.history().iter().all(|e| e["event"] != "accepted"));

    drop(holder); // killed
    let started = Instant::now();
    let mut rerun = Proc::start(&gate, "rerun", &["process", "--json", &file_arg], None);
    assert_eq!(
        rerun.wait(Duration::from_secs(60)).code(),
        Some(0),
        "{}",
        rerun.stderr()
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(rerun.reports()[0]["disposition"], "accepted");
}

/// SIGTERM to `process` in the middle of a large batch: it stops at the next step, marks
/// its unfinished claims failed (none is left in flight for anyone to wait for), exits 130,
/// and a rerun accepts everything once.
#[test]
fn sigterm_to_process_mid_batch_leaves_no_claim_in_flight() {
    let gate = Gate::new(Settings {
        lease_seconds: 300,
        ..Settings::default()
    });
    let file = gate.dir().join("big.x12");
    fs::write(&file, many(700_000, 3000)).unwrap();
    let file_arg = file.display().to_string();
    let mut p = Proc::start(&gate, "stopped", &["process", &file_arg], None);
    wait_for(
        Duration::from_secs(120),
        "claims in flight",
        || in_flight(&gate) > 0,
        || format!("{:?}", states(&gate)),
    );
    p.signal("TERM");
    let status = p.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(130), "{}", p.stderr());
    assert!(p.stderr().contains("stopped by a signal"), "{}", p.stderr());
    let after = states(&gate);
    assert_eq!(
        after.get("in_flight"),
        None,
        "claims left in flight: {after:?}"
    );
    let mut rerun = Proc::start(&gate, "rerun", &["process", "--json", &file_arg], None);
    assert_eq!(
        rerun.wait(Duration::from_secs(120)).code(),
        Some(0),
        "{}",
        rerun.stderr()
    );
    assert_eq!(
        states(&gate).get("accepted"),
        Some(&3000),
        "{:?}",
        states(&gate)
    );
    let accepted = gate
        .history()
        .iter()
        .filter(|e| e["event"] == "accepted")
        .count();
    assert_eq!(accepted, 3000);
}

/// A FIFO without a writer, `/dev/zero` and a folder given to `process` or `validate`: a
/// clear error naming the path, at once (not a hang, not 2 GiB read).
#[test]
fn fifos_devices_and_folders_are_refused_at_once() {
    let gate = Gate::new(Settings::default());
    let fifo = gate.dir().join("pipe.x12");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let folder = gate.dir().join("folder.x12");
    fs::create_dir_all(&folder).unwrap();
    for (path, kind) in [
        (fifo.as_path(), "FIFO"),
        (Path::new("/dev/zero"), "character device"),
        (folder.as_path(), "folder"),
    ] {
        for command in ["process", "validate"] {
            let started = Instant::now();
            let out = crate::util::x12gate(gate.dir())
                .arg(command)
                .arg(path)
                .timeout(Duration::from_secs(20))
                .output()
                .expect("run x12gate");
            let took = started.elapsed();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                took < Duration::from_secs(3),
                "{command} {}: {took:?}",
                path.display()
            );
            assert!(
                err.contains(&path.display().to_string())
                    && err.contains(kind)
                    && err.contains("only regular files"),
                "{command} {}: {err}",
                path.display()
            );
            assert!(
                matches!(out.status.code(), Some(1 | 2)),
                "{command}: {:?}",
                out.status
            );
        }
    }
}

/// A file hard-linked back into the inbox from the archive or from `rejected/` is decided
/// like any file sent again (a duplicate, rejected again), placed beside the first under a
/// new name, and the first is left as it was; it once vanished with an info line and no
/// decision, its inode taken for a placement cut short.
#[test]
fn a_file_linked_back_from_the_archive_or_rejected_is_decided_again() {
    use std::os::unix::fs::MetadataExt;
    let gate = Gate::new(Settings::default());
    fs::write(gate.inbox().join("a.x12"), interchange(660_001, "PO-BACK")).unwrap();
    fs::write(gate.inbox().join("d.bin"), crate::watch::not_x12(2)).unwrap();
    let (status, log) = gate.once();
    assert_eq!(status.code(), Some(3), "{log}");
    let first = gate.moved();
    let archived = first.archived["a.x12"].clone();
    let rejected = first.rejected["d.bin"].clone();
    let decisions = |gate: &Gate| {
        gate.history()
            .iter()
            .filter(|e| e["event"] != "placed")
            .map(|e| e["event"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    let before = decisions(&gate);
    fs::hard_link(&archived, gate.inbox().join("a.x12")).unwrap();
    fs::hard_link(&rejected, gate.inbox().join("d.bin")).unwrap();
    let (status, log) = gate.once();
    assert_eq!(status.code(), Some(3), "{log}");
    let after = decisions(&gate);
    assert_eq!(
        after.len(),
        before.len() + 2,
        "{before:?} then {after:?}\n{log}"
    );
    assert!(after.contains(&"duplicate".to_string()), "{after:?}");
    let m = gate.moved();
    let archived_names: Vec<&String> = m.archived.keys().collect();
    assert_eq!(archived_names, ["a-1.x12", "a.x12"], "{log}");
    let rejected_names: Vec<&String> = m.rejected.keys().collect();
    assert_eq!(rejected_names, ["d-1.bin", "d.bin"], "{log}");
    assert!(m.reasons.contains_key("d-1.bin") && m.reasons.contains_key("d.bin"));
    for p in m.archived.values().chain(m.rejected.values()) {
        assert_eq!(
            fs::metadata(p).unwrap().nlink(),
            1,
            "{} shares its inode",
            p.display()
        );
    }
    assert_eq!(
        fs::read(&archived).unwrap(),
        fs::read(&m.archived["a-1.x12"]).unwrap()
    );
    assert!(
        gate.inbox_names().is_empty() && gate.leftovers().is_empty(),
        "{}",
        gate.state()
    );
}

/// A file name that is not UTF-8 keeps its bytes in `archive/` and `rejected/` (and its
/// reason is named after those bytes); a lossy name (U+FFFD for each bad byte) once lost
/// them, so the placed file no longer matched what the partner sent.
#[test]
fn names_that_are_not_utf8_keep_their_bytes_when_placed() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let gate = Gate::new(Settings::default());
    let good = OsStr::from_bytes(b"po-\xe9t\xe9-\xff.x12");
    let bad = OsStr::from_bytes(b"junk-\xfe\x80.bin");
    fs::write(gate.inbox().join(good), interchange(650_001, "PO-LATIN1")).unwrap();
    fs::write(gate.inbox().join(bad), crate::watch::not_x12(1)).unwrap();
    let (status, log) = gate.once();
    assert_eq!(status.code(), Some(3), "{log}");
    let names = |dir: &Path| -> Vec<std::ffi::OsString> {
        crate::watch::files_under(dir)
            .iter()
            .filter_map(|p| p.file_name().map(OsStr::to_os_string))
            .collect()
    };
    assert_eq!(names(&gate.archive()), [good], "{log}");
    let mut reason = bad.to_os_string();
    reason.push(".reason.json");
    let mut rejected = names(&gate.rejected());
    rejected.sort();
    assert_eq!(rejected, [bad.to_os_string(), reason], "{log}");
    assert!(gate.inbox_names().is_empty() && gate.leftovers().is_empty());
}

/// `scan` of a FIFO without a writer or of a device: refused at once with exit 2, naming the
/// path and what it is (it once exited 0 having read nothing). A FIFO inside a folder
/// scanned is named as not read, and the folder's files are read.
#[test]
fn scan_refuses_fifos_and_devices() {
    let gate = Gate::new(Settings::default());
    let folder = gate.dir().join("archive");
    fs::create_dir_all(&folder).unwrap();
    let fifo = folder.join("pipe.x12");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for (path, kind) in [
        (fifo.as_path(), "a FIFO (named pipe)"),
        (Path::new("/dev/zero"), "a character device"),
    ] {
        let started = Instant::now();
        let out = crate::util::x12gate(gate.dir())
            .arg("scan")
            .arg(path)
            .timeout(Duration::from_secs(20))
            .output()
            .expect("run x12gate");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{}",
            path.display()
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", path.display());
        assert!(
            err.contains(&format!(
                "{}: not a regular file or a folder but {kind}",
                path.display()
            )),
            "{err}"
        );
    }
    fs::write(folder.join("po.x12"), interchange(101, "PO-1")).unwrap();
    let out = crate::util::x12gate(gate.dir())
        .arg("scan")
        .arg(&folder)
        .timeout(Duration::from_secs(20))
        .output()
        .expect("run x12gate");
    let err = String::from_utf8_lossy(&out.stderr);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(text.contains("1 interchange(s), 1 document(s)"), "{text}");
    assert!(
        err.contains(&format!("{}: not read", fifo.display())) && err.contains("FIFO"),
        "{err}"
    );
}

/// In the inbox, a FIFO, a symbolic link and a subfolder are left alone (not followed, not
/// read) and named once at warn level; the regular file beside them is processed and
/// `--once` ends promptly.
#[test]
fn the_inbox_takes_only_regular_files_and_says_so_once() {
    let gate = Gate::new(Settings::default());
    let inbox = gate.inbox();
    assert!(Command::new("mkfifo")
        .arg(inbox.join("pipe.x12"))
        .status()
        .unwrap()
        .success());
    let elsewhere = gate.dir().join("elsewhere.x12");
    fs::write(&elsewhere, interchange(610_001, "PO-LINK")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, inbox.join("link.x12")).unwrap();
    fs::create_dir_all(inbox.join("acme")).unwrap();
    fs::write(
        inbox.join("acme").join("inner.x12"),
        interchange(610_002, "PO-IN"),
    )
    .unwrap();
    fs::write(inbox.join("real.x12"), interchange(610_003, "PO-REAL")).unwrap();
    let started = Instant::now();
    let mut w = gate.spawn(&["--once"], None, None);
    let status = w.wait(Duration::from_secs(30));
    let log = w.log();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(
        gate.moved().archived.keys().collect::<Vec<_>>(),
        ["real.x12"]
    );
    for (name, kind) in [
        ("pipe.x12", "FIFO"),
        ("link.x12", "symbolic link"),
        ("acme", "folder"),
    ] {
        let lines = log
            .lines()
            .filter(|l| l.contains("WARN") && l.contains(name) && l.contains(kind))
            .count();
        assert_eq!(lines, 1, "{name}: {log}");
        assert!(
            fs::symlink_metadata(inbox.join(name)).is_ok(),
            "{name} left where it is"
        );
    }
    assert_eq!(
        fs::read_to_string(&elsewhere).unwrap(),
        interchange(610_001, "PO-LINK")
    );
}

/// Sixteen processes started at once on a database that does not exist yet, twenty times:
/// none fails with "database is locked", and each accepts its own interchange.
#[test]
fn sixteen_processes_start_at_once_on_a_new_database() {
    for round in 0..20u32 {
        let gate = Gate::new(Settings::default());
        let files: Vec<PathBuf> = (0..16u32)
            .map(|i| {
                let p = gate.dir().join(format!("f{i}.x12"));
                fs::write(&p, interchange(620_000 + i, "PO-NEW")).unwrap();
                p
            })
            .collect();
        let mut procs: Vec<Proc> = files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                Proc::start(
                    &gate,
                    &format!("p{i}"),
                    &["process", "--json", &f.display().to_string()],
                    None,
                )
            })
            .collect();
        for p in &mut procs {
            let status = p.wait(Duration::from_secs(60));
            assert_eq!(status.code(), Some(0), "round {round}: {}", p.stderr());
            assert_eq!(p.reports()[0]["disposition"], "accepted", "round {round}");
        }
        assert_eq!(states(&gate).get("accepted"), Some(&16), "round {round}");
    }
}

/// The watcher at the default log level, as an operator runs it: a start-up line naming the
/// configuration, inbox, registry and workers; the periodic summary; SIGHUP does not kill it.
#[test]
fn the_watcher_says_what_it_does_and_survives_sighup() {
    let gate = Gate::new(Settings {
        summary_seconds: 1,
        ..Settings::default()
    });
    let mut w = gate.spawn(&[], None, None);
    wait_for(
        Duration::from_secs(20),
        "the start-up line and a summary",
        || {
            let log = w.log();
            log.contains("x12gate watch started") && log.contains("summary")
        },
        || w.log(),
    );
    let log = w.log();
    let start = log
        .lines()
        .find(|l| l.contains("x12gate watch started"))
        .unwrap_or_default();
    for field in ["config=", "inbox=", "registry=", "work=", "workers="] {
        assert!(start.contains(field), "{field} in {start}");
    }
    let summary = log
        .lines()
        .find(|l| l.contains(" summary "))
        .unwrap_or_default();
    for field in ["files_taken=", "delivered=", "retrying=", "dead="] {
        assert!(summary.contains(field), "{field} in {summary}");
    }
    w.signal("HUP");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        w.child.try_wait().unwrap().is_none(),
        "SIGHUP killed the watcher"
    );
    fs::write(
        gate.inbox().join("after-hup.x12"),
        interchange(630_001, "PO-H"),
    )
    .unwrap();
    wait_for(
        Duration::from_secs(30),
        "a file after SIGHUP",
        || gate.moved().archived.contains_key("after-hup.x12"),
        || gate.state(),
    );
    assert!(w.log().contains("configuration reloaded"), "{}", w.log());
    w.signal("TERM");
    assert_eq!(w.wait(Duration::from_secs(30)).code(), Some(0));
    assert!(
        w.log().contains("x12gate watch: 1 file(s) taken"),
        "{}",
        w.log()
    );
}

/// Three new interchanges, a resend of the first, a broken one and a file that is not X12.
#[cfg(feature = "failpoints")]
fn placing_corpus() -> Vec<crate::watch::Planned> {
    use crate::watch::{broken_se01, not_x12, Arrival, Ic, Planned};
    let ic = |n: u32, broken: bool| Ic {
        n,
        po: format!("PO-{n}"),
        broken,
    };
    let file = |name: &str, bytes: Vec<u8>, ics: Vec<Ic>| Planned {
        name: name.to_string(),
        bytes,
        arrival: Arrival::Direct,
        ics,
    };
    let good = |n: u32| interchange(n, &format!("PO-{n}")).into_bytes();
    vec![
        file("a.x12", good(650_001), vec![ic(650_001, false)]),
        file("b.x12", good(650_002), vec![ic(650_002, false)]),
        file("c.x12", good(650_003), vec![ic(650_003, false)]),
        file("d-resend.x12", good(650_001), vec![ic(650_001, false)]),
        file(
            "e-broken.x12",
            broken_se01(&interchange(650_005, "PO-650005")).into_bytes(),
            vec![ic(650_005, true)],
        ),
        file("f-junk.x12", not_x12(1), Vec::new()),
    ]
}

/// A crash between the steps of placing a file: after its reason file was written but
/// before the file was linked beside it (`reason.after`), and after it was linked into
/// `archive/` or `rejected/` but before it left the work folder (`place.after`). The next
/// watcher places each file exactly once, with its one reason, and leaves nothing behind.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_while_placing_a_file_never_places_it_twice() {
    crash_while_placing(|| Some(Gate::new(Settings::default())));
}

/// The same on a PostgreSQL registry.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_while_placing_a_file_on_postgres_never_places_it_twice() {
    crash_while_placing(|| {
        crate::pg_server::database().map(|url| Gate::with_database(Settings::default(), Some(url)))
    });
}

#[cfg(feature = "failpoints")]
fn crash_while_placing(gate: impl Fn() -> Option<Gate>) {
    use std::os::unix::process::ExitStatusExt;
    for point in ["reason.after", "place.after"] {
        let Some(gate) = gate() else {
            return;
        };
        let files = placing_corpus();
        drop_all(&gate.inbox(), &files);
        let mut crashes = 0;
        // Each crashed run places at most one file; the last run, without the crash point,
        // finishes the rest.
        for _ in 0..files.len() {
            let mut w = gate.spawn(&["--once"], Some("warn"), Some(&format!("{point}=return")));
            let status = w.wait(Duration::from_secs(60));
            if status.signal() == Some(6) {
                crashes += 1;
            }
        }
        assert!(crashes >= 2, "{point}: crashed only {crashes} times");
        let (status, log) = gate.once();
        assert!(matches!(status.code(), Some(0 | 3)), "{point}: {log}");
        check_end_state(&gate, &files, Run::Killed);
    }
}

/// A file the gateway's user cannot read (another user's upload, mode 0600) stays in the
/// inbox, where it can be seen, named once in a warn line, instead of vanishing into the work
/// folder to fail there forever. (Root reads everything, so as root the file is simply read.)
#[test]
fn an_unreadable_inbox_file_stays_in_the_inbox() {
    use std::os::unix::fs::PermissionsExt;
    let gate = Gate::new(Settings::default());
    let locked = gate.inbox().join("locked.x12");
    fs::write(&locked, interchange(640_001, "PO-LOCKED")).unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
    let readable = fs::File::open(&locked).is_ok();
    fs::write(
        gate.inbox().join("open.x12"),
        interchange(640_002, "PO-OPEN"),
    )
    .unwrap();
    let mut w = gate.spawn(&["--once"], None, None);
    let status = w.wait(Duration::from_secs(60));
    let log = w.log();
    let m = gate.moved();
    assert!(m.archived.contains_key("open.x12"), "{log}");
    if readable {
        eprintln!("running as a user who reads mode 000 files (root): the file was read");
        assert!(m.archived.contains_key("locked.x12"), "{log}");
        assert_eq!(status.code(), Some(0), "{log}");
    } else {
        assert!(locked.exists(), "the unreadable file left the inbox");
        assert!(gate.leftovers().is_empty(), "{:?}", gate.leftovers());
        assert_eq!(
            log.matches("cannot read this inbox file").count(),
            1,
            "{log}"
        );
    }
}
