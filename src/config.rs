//! partners.toml: a serde mirror of the file, then a validated [`Config`] with absolute paths.
//!
//! Unknown keys are errors (a typo in `duplicate_window_days` must not silently mean 30), and
//! every error names the file, the line and what was expected.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::x12::Limits;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownPartners {
    Reject,
    Accept,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateway {
    id_qualifier: String,
    id: String,
    #[serde(default = "defaults::inbox")]
    inbox: PathBuf,
    #[serde(default = "defaults::outbox")]
    outbox: PathBuf,
    #[serde(default = "defaults::out")]
    out: PathBuf,
    #[serde(default = "defaults::archive")]
    archive: PathBuf,
    #[serde(default = "defaults::rejected")]
    rejected: PathBuf,
    #[serde(default = "defaults::database")]
    database: PathBuf,
    #[serde(default = "defaults::lease_seconds")]
    lease_seconds: u64,
    #[serde(default = "defaults::unknown_partners")]
    unknown_partners: UnknownPartners,
}

mod defaults {
    use super::UnknownPartners;
    use std::path::PathBuf;
    pub fn inbox() -> PathBuf {
        "data/inbox".into()
    }
    pub fn outbox() -> PathBuf {
        "data/outbox".into()
    }
    pub fn out() -> PathBuf {
        "data/out".into()
    }
    pub fn archive() -> PathBuf {
        "data/archive".into()
    }
    pub fn rejected() -> PathBuf {
        "data/rejected".into()
    }
    pub fn database() -> PathBuf {
        "data/x12gate.db".into()
    }
    pub fn lease_seconds() -> u64 {
        300
    }
    pub fn unknown_partners() -> UnknownPartners {
        UnknownPartners::Reject
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    gateway: RawGateway,
    #[serde(default)]
    limits: Limits,
    #[serde(default, rename = "partner")]
    partners: Vec<toml::Value>,
}

/// The gateway's own identity and folders, all paths absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gateway {
    pub id_qualifier: String,
    pub id: String,
    pub inbox: PathBuf,
    pub outbox: PathBuf,
    pub out: PathBuf,
    pub archive: PathBuf,
    pub rejected: PathBuf,
    pub database: PathBuf,
    pub lease_seconds: u64,
    pub unknown_partners: UnknownPartners,
}

/// A loaded, checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub path: PathBuf,
    pub gateway: Gateway,
    pub limits: Limits,
    /// Partner tables, kept raw until the acknowledgment work gives them their own type.
    pub partners: Vec<toml::Value>,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_str(&text, path)
    }

    /// Parses `text` as if read from `path`; relative paths resolve against `path`'s folder.
    pub fn from_str(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let base = std::path::absolute(path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let abs = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let g = raw.gateway;
        if g.id.trim().is_empty() || g.id.len() > 15 {
            return Err(invalid(format!(
                "gateway.id {:?}: expected 1 to 15 characters (it becomes ISA06/ISA08)",
                g.id
            )));
        }
        if g.id_qualifier.len() != 2 {
            return Err(invalid(format!(
                "gateway.id_qualifier {:?}: expected 2 characters (ISA05/ISA07)",
                g.id_qualifier
            )));
        }
        Ok(Config {
            path: path.to_path_buf(),
            gateway: Gateway {
                id_qualifier: g.id_qualifier,
                id: g.id,
                inbox: abs(g.inbox),
                outbox: abs(g.outbox),
                out: abs(g.out),
                archive: abs(g.archive),
                rejected: abs(g.rejected),
                database: abs(g.database),
                lease_seconds: g.lease_seconds,
                unknown_partners: g.unknown_partners,
            },
            limits: raw.limits,
            partners: raw.partners,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_against_the_file() {
        let c = Config::from_str(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\n",
            Path::new("/etc/x12/partners.toml"),
        )
        .unwrap();
        assert_eq!(c.gateway.inbox, PathBuf::from("/etc/x12/data/inbox"));
        assert_eq!(c.limits, Limits::default());
    }

    #[test]
    fn unknown_key_names_the_line() {
        let err = Config::from_str(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X\"\ninbx = \"a\"\n",
            Path::new("p.toml"),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("line 4") && msg.contains("inbx"), "{msg}");
    }

    #[test]
    fn wrong_type_in_limits_names_the_line() {
        let err = Config::from_str(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X\"\n[limits]\nmax_element_len = \"big\"\n",
            Path::new("p.toml"),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("line 5") && msg.contains("max_element_len"),
            "{msg}"
        );
    }
}
