//! What became of an interchange: the one word that `process` reports, the acknowledgment
//! decides and the registry stores. Its own module because the acknowledgments and the
//! registry both speak it and neither may depend on the other for it.

/// What became of an interchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Every transaction set accepted (possibly with errors noted).
    Accepted,
    /// Some transaction sets rejected, some accepted.
    Partial,
    /// Nothing accepted.
    Rejected,
    /// Seen before with the same content: the original acknowledgments were replayed.
    Duplicate,
    /// The control number was used before for different content: refused (TA1 025).
    Conflict,
    /// Another process is working on it (`--no-wait`).
    InProgress,
}

impl Disposition {
    /// Every disposition, in the order the documentation lists them.
    pub const ALL: [Disposition; 6] = [
        Disposition::Accepted,
        Disposition::Partial,
        Disposition::Rejected,
        Disposition::Duplicate,
        Disposition::Conflict,
        Disposition::InProgress,
    ];

    /// The word reports, the history and the registry use (the same as its JSON form).
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Accepted => "accepted",
            Disposition::Partial => "partial",
            Disposition::Rejected => "rejected",
            Disposition::Duplicate => "duplicate",
            Disposition::Conflict => "conflict",
            Disposition::InProgress => "in_progress",
        }
    }

    /// The disposition spelled `word`, if there is one.
    pub fn parse(word: &str) -> Option<Disposition> {
        Self::ALL.into_iter().find(|d| d.as_str() == word)
    }

    /// Whether this outcome leaves nothing to fix (exit code 0).
    pub fn is_success(self) -> bool {
        matches!(self, Disposition::Accepted | Disposition::Duplicate)
    }
}

impl std::fmt::Display for Disposition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so that `{:<12}` lines tables up as it did for the word as a string.
        f.pad(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_is_the_json_form_and_parses_back() {
        for d in Disposition::ALL {
            assert_eq!(
                serde_json::to_value(d).unwrap(),
                serde_json::Value::String(d.as_str().into())
            );
            assert_eq!(Disposition::parse(d.as_str()), Some(d));
        }
        assert_eq!(Disposition::parse("failed"), None);
        assert_eq!(format!("[{:<10}]", Disposition::Partial), "[partial   ]");
    }
}
