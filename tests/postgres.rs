//! Several gateway nodes on one PostgreSQL registry (the process-level claims, crashes and
//! concurrency on PostgreSQL are in `process`, beside their SQLite twins).

use std::time::{Duration, Instant};

use crate::watch::{check_end_state, corpus, drop_files, wait_for, Gate, Run, Settings};

/// Three watcher nodes (each its own process and work folder) share one inbox and one
/// PostgreSQL registry; 1,500 files with resends and reused numbers arrive while they run,
/// and one node is SIGKILLed mid-run. The other two finish its work once its lease has run
/// out (nodes on other hosts cannot see whether a process lives: the lease decides): every
/// file placed once, every interchange accepted once, no acknowledgment doubled.
#[test]
fn three_nodes_share_one_inbox_and_one_registry_and_survive_a_kill() {
    let _heavy = crate::util::heavy();
    let Some(url) = crate::pg_server::database() else {
        return;
    };
    let settings = Settings {
        lease_seconds: 5,
        ..Settings::default()
    };
    let gate = Gate::with_database(settings, Some(url));
    let files = corpus(1500, 400_000, false);
    let mut nodes: Vec<_> = (0..3).map(|_| gate.start(&[])).collect();
    let started = Instant::now();
    let (first, rest) = files.split_at(600);
    let drop = |some: &[crate::watch::Planned]| {
        drop_files(
            &gate.inbox(),
            some,
            Duration::from_millis(1),
            Duration::from_millis(settings.settle_ms + 200),
            Duration::ZERO,
        )
    };
    drop(first);
    wait_for(
        Duration::from_secs(300),
        "200 files placed before the kill",
        || gate.moved().count() >= 200,
        || gate.state(),
    );
    nodes[0].signal("KILL");
    nodes[0].wait(Duration::from_secs(60));
    let at_kill = gate.moved().count();
    drop(rest);
    wait_for(
        Duration::from_secs(400),
        "every file archived or rejected",
        || {
            gate.moved().count() >= files.len()
                && gate.inbox_names().is_empty()
                && gate.leftovers().is_empty()
        },
        || gate.state(),
    );
    eprintln!(
        "three nodes, one killed after {at_kill} files: {:?}; {}",
        started.elapsed(),
        gate.state()
    );
    for n in nodes.iter_mut().skip(1) {
        n.signal("TERM");
        let status = n.wait(Duration::from_secs(60));
        assert_eq!(status.code(), Some(0), "{}", n.log());
    }
    check_end_state(&gate, &files, Run::Killed);
}
