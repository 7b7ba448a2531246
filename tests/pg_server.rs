//! A throwaway PostgreSQL server for the tests: started once per test binary, on a free port
//! of 127.0.0.1, in a temporary folder, and stopped (and removed) when the test binary exits.
//!
//! `X12GATE_TEST_POSTGRES=postgres://USER@HOST:PORT` uses a running server instead (the user
//! must be allowed to create databases and schemas). Without either, the tests that need a
//! server say loudly that they are skipped, unless `X12GATE_REQUIRE_POSTGRES=1` (CI), where
//! that is a failure. Included with `#[path]` by the library's tests and the integration
//! tests, so both start it the same way.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// A server the tests may create databases and schemas on.
#[derive(Debug)]
pub struct Server {
    /// `postgres://USER@127.0.0.1:PORT`, with no database.
    pub base: String,
    /// The same server through its Unix socket, when it is ours.
    pub socket: Option<String>,
}

static SERVER: OnceLock<Option<Server>> = OnceLock::new();
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The test server, started at the first call; `None` (said loudly) when none can be had.
pub fn server() -> Option<&'static Server> {
    SERVER
        .get_or_init(|| {
            let got = match std::env::var("X12GATE_TEST_POSTGRES") {
                Ok(url) if !url.is_empty() => Ok(Server {
                    base: url.trim_end_matches('/').to_string(),
                    socket: None,
                }),
                _ => start(false),
            };
            match got {
                Ok(s) => Some(s),
                Err(why) if std::env::var_os("X12GATE_REQUIRE_POSTGRES").is_some() => {
                    panic!("X12GATE_REQUIRE_POSTGRES is set but no PostgreSQL server could be started: {why}")
                }
                Err(why) => {
                    eprintln!(
                        "\n*** SKIPPED: the PostgreSQL tests need a server and none could be started: {why}\n*** (install PostgreSQL, e.g. `apt-get install -y postgresql`, or set X12GATE_TEST_POSTGRES)\n"
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// A name no other test of this run uses.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn admin(server: &Server) -> postgres::Client {
    postgres::Client::connect(&format!("{}/postgres", server.base), postgres::NoTls)
        .expect("a connection to the test server")
}

/// A new empty database: its URL.
pub fn database() -> Option<String> {
    Some(database_on(server()?))
}

/// A new empty database on `server`: its URL.
pub fn database_on(server: &Server) -> String {
    let name = unique("x12gate_test");
    admin(server)
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("CREATE DATABASE on the test server");
    format!("{}/{name}", server.base)
}

/// A new empty schema in the shared database `postgres`: a URL whose connections use it.
/// Cheaper than a database, for the many short registry tests.
pub fn schema() -> Option<String> {
    let server = server()?;
    let name = unique("t");
    admin(server)
        .batch_execute(&format!("CREATE SCHEMA {name}"))
        .expect("CREATE SCHEMA on the test server");
    Some(format!(
        "{}/postgres?options=-csearch_path%3D{name}",
        server.base
    ))
}

fn binaries() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|d| d.join("pg_ctl").is_file() && d.join("initdb").is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("pg_ctl").is_file())
        .collect();
    versions.sort();
    versions.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program args` as the user `postgres` when we are root (PostgreSQL refuses to run as
/// root), else as ourselves.
fn command(bin: &Path, program: &str, root: bool) -> Command {
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(program));
        c
    } else {
        Command::new(bin.join(program))
    }
}

/// Starts a server of our own. `durable`: PostgreSQL's defaults (`fsync`, a commit waits
/// for its WAL flush), for benchmarks; else without flushes, for tests.
pub fn start(durable: bool) -> Result<Server, String> {
    start_with(durable, "", |_| Ok(()))
}

/// [`start`] with more server options (`-c name=value ...`, where `{data}` is the data
/// folder), after `prepare` has put what they name into the server's folder (given; its
/// files become the server user's).
pub fn start_with(
    durable: bool,
    extra: &str,
    prepare: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<Server, String> {
    let bin = binaries().ok_or("no pg_ctl and initdb on PATH or in /usr/lib/postgresql")?;
    let root = is_root();
    let dir = std::env::temp_dir().join(unique("x12gate-pg"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if root {
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .map_err(|e| format!("chown: {e}"))?;
        if !chown.success() {
            return Err("chown to the postgres user failed (is there one?)".into());
        }
    }
    let data = dir.join("data");
    let out = command(&bin, "initdb", root)
        .arg("-D")
        .arg(&data)
        .args([
            "-U",
            "x12gate",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        ])
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    prepare(&dir)?;
    let extra = extra.replace("{data}", &data.display().to_string());
    if root {
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status();
    }
    let mut last = String::new();
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("a free port: {e}"))?
            .port();
        // Without flushes for tests: they kill gateway processes, never the server, and a
        // test server's durability across power loss is of no interest.
        let flushes = if durable {
            "-c fsync=on -c synchronous_commit=on"
        } else {
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        };
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300 {flushes} {extra}",
            dir.display()
        );
        let status = command(&bin, "pg_ctl", root)
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("log"))
            .args(["-o", &options, "-w", "-t", "60", "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("pg_ctl: {e}"))?;
        if status.success() {
            stop_when_we_exit(&bin, &data, &dir, root);
            let dir_in_url = dir.display().to_string().replace('/', "%2F");
            return Ok(Server {
                base: format!("postgres://x12gate@127.0.0.1:{port}"),
                socket: Some(format!("postgres://x12gate@{dir_in_url}:{port}")),
            });
        }
        last = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    }
    Err(format!("pg_ctl start failed: {last}"))
}

/// A watchdog that outlives nothing: it waits for this process to end, however it ends,
/// then stops the server and removes its folder.
fn stop_when_we_exit(bin: &Path, data: &Path, dir: &Path, root: bool) {
    let stop = format!(
        "{}{} -D {} stop -m immediate",
        if root { "runuser -u postgres -- " } else { "" },
        bin.join("pg_ctl").display(),
        data.display()
    );
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        dir = dir.display()
    );
    let _ = Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}
