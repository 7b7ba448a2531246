//! What can be wrong with partners.toml, typed: the file unreadable, or one thing in it
//! refused, with where it is (the table, the key, the line) apart from why. Each variant's
//! text is the message operators (and tests) read, so the types can change without the
//! words changing.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}: {problem}")]
    Invalid { path: PathBuf, problem: Problem },
}

/// One thing in the file refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    /// Not TOML, or not the file's shape (an unknown key, a value of the wrong type): the
    /// parser's message, in words.
    #[error("{0}")]
    Toml(String),
    /// A `[gateway]` key, with the value as written where the message quotes it.
    #[error("gateway.{key}{}: {why}", quoted(.value.as_deref()))]
    Gateway {
        key: &'static str,
        value: Option<String>,
        why: String,
    },
    /// A key of the `[[partner]]` whose table starts on `line`.
    #[error("line {line}: partner {partner:?}, key `{}`: {}", .problem.key, .problem.why)]
    Partner {
        line: usize,
        partner: String,
        problem: KeyProblem,
    },
    /// A key of the `[[destination]]` whose table starts on `line`.
    #[error("line {line}: destination {destination:?}, key `{}`: {}", .problem.key, .problem.why)]
    Destination {
        line: usize,
        destination: String,
        problem: KeyProblem,
    },
    #[error("line {line}: destination {destination:?} is declared twice")]
    DestinationTwice { line: usize, destination: String },
}

/// Why one key of a table is refused; the table and its line are the caller's to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyProblem {
    /// The key as the file writes it (`delimiters.element`, `destinations.850`).
    pub key: String,
    pub why: String,
}

impl KeyProblem {
    pub(super) fn new(key: &str, why: impl Into<String>) -> KeyProblem {
        KeyProblem {
            key: key.to_string(),
            why: why.into(),
        }
    }
}

fn quoted(value: Option<&str>) -> String {
    value.map(|v| format!(" {v:?}")).unwrap_or_default()
}
