//! Who a process is, and whether the process behind an owner id is still alive.
//!
//! Claims in the registry and folders in `work/` carry their owner's id, so that a crashed
//! owner's work is taken over at once instead of after its lease. The id names the host, the
//! process id, the process's start time (so a reused pid is not mistaken for the owner), the
//! boot (a hash of the boot id), the pid namespace (so a container with a pid space of its
//! own is never judged from outside it) and the machine (a hash of `/etc/machine-id`).
//!
//! An owner is declared dead only from `/proc` of the same machine and pid namespace: its
//! pid is gone or belongs to a newer process, or the host has booted since. Anything else
//! (another host, another container, an id of an older release, no `/proc`) is
//! [`Liveness::Unknown`] and waits for the lease, which is the safe answer. This relies on
//! node host names being unique among the nodes that share a registry.

use std::sync::OnceLock;

/// This process's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub host: String,
    pub pid: u32,
    /// Start time of the process, in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start: u64,
    /// First 12 hex digits of the hash of the boot id.
    pub boot: String,
    /// The pid namespace's inode (`/proc/self/ns/pid`): where `pid` means something.
    pub pidns: String,
    /// First 12 hex digits of the hash of `/etc/machine-id`: two machines (cloned VMs) with
    /// one host name are never judged from each other's `/proc`.
    pub machine: String,
    /// Random per process, so that two ids of one process never collide with a reused pid
    /// on a system without `/proc`.
    pub nonce: String,
}

/// What can be said about an owner id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Alive,
    /// Certainly dead: same host and pid namespace, and its pid is gone or belongs to a newer process
    /// (or the host has rebooted since).
    Dead,
    /// Another host, or not enough information: wait for the lease.
    Unknown,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn host() -> String {
    read("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
        .replace([':', '_', '/', '.'], "-")
}

fn boot() -> Option<String> {
    let boot = read("/proc/sys/kernel/random/boot_id")?;
    Some(blake3::hash(boot.trim().as_bytes()).to_hex()[..12].to_string())
}

fn machine() -> Option<String> {
    let id = read("/etc/machine-id").or_else(|| read("/var/lib/dbus/machine-id"))?;
    let id = id.trim();
    (!id.is_empty()).then(|| blake3::hash(id.as_bytes()).to_hex()[..12].to_string())
}

fn pidns() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let digits: String = link
        .to_string_lossy()
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    (!digits.is_empty()).then_some(digits)
}

/// The start time of process `pid`, or `None` when there is no such process.
fn start_time(pid: u32) -> Option<u64> {
    let stat = read(&format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl Owner {
    /// This process (computed once).
    pub fn current() -> &'static Owner {
        static ME: OnceLock<Owner> = OnceLock::new();
        ME.get_or_init(|| {
            let pid = std::process::id();
            let nonce = blake3::hash(format!("{:?}{pid}", std::time::SystemTime::now()).as_bytes())
                .to_hex()[..8]
                .to_string();
            Owner {
                host: host(),
                pid,
                start: start_time(pid).unwrap_or(0),
                boot: boot().unwrap_or_else(|| "unknown".into()),
                pidns: pidns().unwrap_or_else(|| "unknown".into()),
                machine: machine().unwrap_or_else(|| "unknown".into()),
                nonce,
            }
        })
    }

    /// `host:pid:start:boot:pidns:machine:nonce`, the owner of registry claims. Callers may
    /// append `:suffix` to tell several claimants of one process apart.
    pub fn id(&self) -> String {
        format!(
            "{}:{}:{}:{}:{}:{}:{}",
            self.host, self.pid, self.start, self.boot, self.pidns, self.machine, self.nonce
        )
    }

    /// The same id with `_` for `:`, usable as a file name.
    pub fn file_id(&self) -> String {
        self.id().replace(':', "_")
    }
}

/// Whether the process behind `id` (an [`Owner::id`], possibly with a suffix, or a
/// [`Owner::file_id`]) is alive.
pub fn liveness(id: &str) -> Liveness {
    let sep = if id.contains(':') { ':' } else { '_' };
    let fields: Vec<&str> = id.split(sep).collect();
    let [host, pid, start, boot, pidns, machine, _nonce, ..] = fields.as_slice() else {
        return Liveness::Unknown;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return Liveness::Unknown;
    };
    let me = Owner::current();
    if *host != me.host
        || *pidns != me.pidns
        || *machine != me.machine
        || me.machine == "unknown"
        || me.boot == "unknown"
        || start == 0
    {
        return Liveness::Unknown;
    }
    if *boot != me.boot {
        // The host has booted since: every process of the earlier boot is gone.
        return Liveness::Dead;
    }
    match start_time(pid) {
        Some(s) if s == start => Liveness::Alive,
        _ => Liveness::Dead,
    }
}

/// An owner id in words, for log lines and reasons: `process 4242 on host-a (alive)`.
pub fn describe(id: &str) -> String {
    let sep = if id.contains(':') { ':' } else { '_' };
    let mut fields = id.split(sep);
    let (Some(host), Some(pid)) = (fields.next(), fields.next()) else {
        return format!("owner {id:?}");
    };
    let state = match liveness(id) {
        Liveness::Alive => "alive",
        Liveness::Dead => "dead",
        Liveness::Unknown if host == Owner::current().host => "state unknown",
        Liveness::Unknown => "on another host",
    };
    format!("process {pid} on {host} ({state})")
}

/// Whether the owner is certainly dead.
pub fn is_dead(id: &str) -> bool {
    liveness(id) == Liveness::Dead
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_in_both_forms() {
        let me = Owner::current();
        assert_eq!(liveness(&me.id()), Liveness::Alive);
        assert_eq!(liveness(&format!("{}:7", me.id())), Liveness::Alive);
        assert_eq!(liveness(&me.file_id()), Liveness::Alive);
    }

    #[test]
    fn a_finished_process_is_dead_and_a_reused_pid_is_not_its_owner() {
        let me = Owner::current();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let gone = Owner {
            pid,
            start: 1,
            ..me.clone()
        };
        assert_eq!(liveness(&gone.id()), Liveness::Dead);
        // Our own pid with another start time: the pid was reused by us.
        let reused = Owner {
            start: me.start + 1,
            ..me.clone()
        };
        assert_eq!(liveness(&reused.id()), Liveness::Dead);
    }

    #[test]
    fn other_hosts_and_old_ids_are_unknown() {
        let me = Owner::current();
        let other = Owner {
            host: "elsewhere".into(),
            ..me.clone()
        };
        assert_eq!(liveness(&other.id()), Liveness::Unknown);
        let container = Owner {
            pidns: "1".into(),
            ..me.clone()
        };
        assert_eq!(liveness(&container.id()), Liveness::Unknown);
        // A cloned machine with our host name, rebooted or not: never judged from here.
        let clone = Owner {
            machine: "000000000000".into(),
            boot: "000000000000".into(),
            ..me.clone()
        };
        assert_eq!(liveness(&clone.id()), Liveness::Unknown);
        // The id of earlier releases: host:pid:nonce (and a batch suffix).
        assert_eq!(
            liveness(&format!("{}:123:abcdef12", me.host)),
            Liveness::Unknown
        );
        assert_eq!(
            liveness(&format!("{}:123:abcdef12:4", me.host)),
            Liveness::Unknown
        );
        assert_eq!(liveness(""), Liveness::Unknown);
        assert_eq!(liveness("a:b:c:d:e:f:g"), Liveness::Unknown);
    }

    #[test]
    fn an_earlier_boot_of_this_host_is_dead() {
        let me = Owner::current();
        let before = Owner {
            boot: "000000000000".into(),
            ..me.clone()
        };
        assert_eq!(liveness(&before.id()), Liveness::Dead);
    }
}
