//! Running as a service: a backup of the registry taken while the watcher works.

use std::fs;
use std::time::Duration;

use crate::watch::{interchange, wait_for, Gate, Settings};

/// `backup` while `watch` processes 1,000 files: every copy opens as a registry and passes
/// `PRAGMA integrity_check`, and the copies grow with the work.
#[test]
fn backups_while_the_watcher_works_are_consistent() {
    let gate = Gate::new(Settings::default());
    let staging = gate.dir().join("staging");
    fs::create_dir_all(&staging).unwrap();
    for i in 0..1000u32 {
        fs::write(
            staging.join(format!("f{i:04}.x12")),
            interchange(700_000 + i, &format!("PO-{i}")),
        )
        .unwrap();
    }
    let mut w = gate.start(&[]);
    for i in 0..1000u32 {
        let name = format!("f{i:04}.x12");
        fs::rename(staging.join(&name), gate.inbox().join(&name)).unwrap();
    }
    let mut copies = Vec::new();
    let mut n = 0;
    while gate.moved().count() < 1000 && n < 200 {
        n += 1;
        let dest = gate.dir().join(format!("backup-{n}.db"));
        let out = crate::util::x12gate(gate.dir())
            .args(["backup"])
            .arg(&dest)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let copy = rusqlite::Connection::open(&dest).unwrap();
        let ok: String = copy
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok", "{}", dest.display());
        let accepted: u64 = copy
            .query_row(
                "SELECT count(*) FROM interchanges WHERE disposition = 'accepted'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        copies.push(accepted);
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_for(
        Duration::from_secs(120),
        "every file archived",
        || gate.moved().count() == 1000,
        || gate.state(),
    );
    w.signal("TERM");
    assert_eq!(w.wait(Duration::from_secs(30)).code(), Some(0));
    eprintln!("accepted interchanges in the copies: {copies:?}");
    assert!(copies.len() >= 2, "{copies:?}");
    assert!(copies.windows(2).all(|w| w[0] <= w[1]), "{copies:?}");
    assert!(
        copies.iter().any(|c| *c > 0 && *c < 1000),
        "no copy was taken mid-work: {copies:?}"
    );
    let again = crate::util::x12gate(gate.dir())
        .args(["backup"])
        .arg(gate.dir().join("backup-1.db"))
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(2),
        "an existing copy is never overwritten"
    );
}
