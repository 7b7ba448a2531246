//! Where the registry is: an SQLite file (the default) or a PostgreSQL database that several
//! nodes share, as `gateway.database` names it. Only the location and its settings live
//! here; connecting is the registry's.

use std::path::{Path, PathBuf};

use super::Problem;

/// Where the registry is: an SQLite file (the default), or a PostgreSQL database that
/// several gateway nodes share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    Sqlite(PathBuf),
    Postgres(Postgres),
}

impl Database {
    /// The SQLite file, if the registry is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Database::Sqlite(p) => Some(p),
            Database::Postgres(_) => None,
        }
    }
}

impl From<&PathBuf> for Database {
    fn from(path: &PathBuf) -> Self {
        Database::Sqlite(path.clone())
    }
}

impl From<&Path> for Database {
    fn from(path: &Path) -> Self {
        Database::Sqlite(path.to_path_buf())
    }
}

impl std::fmt::Display for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Sqlite(p) => write!(f, "{}", p.display()),
            Database::Postgres(pg) => f.write_str(&pg.shown()),
        }
    }
}

/// Where a PostgreSQL registry is: `database = "postgres://user@host/db"`, with the password
/// in the URL, in the environment variable `database_password_env` names, or in `PGPASSWORD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Postgres {
    pub url: String,
    pub password_env: Option<String>,
    /// A PEM file of the certificate authorities to trust besides the system's (a managed
    /// service's own CA).
    pub ca_file: Option<PathBuf>,
}

impl Postgres {
    /// The URL with any password replaced (in the user part and in the query), for
    /// messages and logs.
    pub fn shown(&self) -> String {
        let (head, query) = match self.url.split_once('?') {
            Some((h, q)) => (h, Some(q)),
            None => (self.url.as_str(), None),
        };
        let mut out = match (head.find("://"), head.rfind('@')) {
            (Some(s), Some(at)) if at > s && head[s + 3..at].contains(':') => {
                let user = head[s + 3..at].split(':').next().unwrap_or("");
                format!("{}{user}:***{}", &head[..s + 3], &head[at..])
            }
            _ => head.to_string(),
        };
        if let Some(query) = query {
            let parts: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            out.push('?');
            out.push_str(&parts.join("&"));
        }
        out
    }
}

/// `database` as written: a PostgreSQL URL, or an SQLite file resolved like the folders.
pub(super) fn database(
    written: PathBuf,
    password_env: Option<String>,
    ca: Option<PathBuf>,
    abs: &dyn Fn(PathBuf) -> PathBuf,
) -> Result<Database, Problem> {
    let refused = |key: &'static str, why: String| Problem::Gateway {
        key,
        value: None,
        why,
    };
    let text = written.to_string_lossy();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        let url = text.into_owned();
        if url.contains("sslmode=verify") {
            return Err(refused(
                "database",
                "sslmode=verify-ca and verify-full are not supported; sslmode=require verifies the server's certificate and host name".into(),
            ));
        }
        match url.parse::<postgres::Config>() {
            Err(e) => {
                return Err(refused(
                    "database",
                    format!("the PostgreSQL URL does not parse: {e}; expected postgres://USER@HOST[:PORT]/DATABASE"),
                ))
            }
            Ok(c) if c.get_hosts().is_empty() => {
                return Err(refused(
                    "database",
                    "the PostgreSQL URL names no host; expected postgres://USER@HOST[:PORT]/DATABASE".into(),
                ))
            }
            Ok(_) => {}
        }
        return Ok(Database::Postgres(Postgres {
            url,
            password_env,
            ca_file: ca.map(abs),
        }));
    }
    for (key, set) in [
        ("database_password_env", password_env.is_some()),
        ("database_ca", ca.is_some()),
    ] {
        if set {
            return Err(refused(
                key,
                "only a PostgreSQL database (database = \"postgres://...\") takes it".into(),
            ));
        }
    }
    Ok(Database::Sqlite(abs(written)))
}
