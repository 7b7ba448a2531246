//! What became of an interchange: the one word that `process` reports, the acknowledgment
//! decides and the registry stores. Its own module because the acknowledgments and the
//! registry both speak it and neither may depend on the other for it.

crate::words::words! {
    /// What became of an interchange.
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Disposition as as_str {
        /// Every transaction set accepted (possibly with errors noted).
        Accepted = "accepted",
        /// Some transaction sets rejected, some accepted.
        Partial = "partial",
        /// Nothing accepted.
        Rejected = "rejected",
        /// Seen before with the same content: the original acknowledgments were replayed.
        Duplicate = "duplicate",
        /// The control number was used before for different content: refused (TA1 025).
        Conflict = "conflict",
        /// Another process is working on it (`--no-wait`).
        InProgress = "in_progress",
    }
}

impl Disposition {
    /// Whether this outcome leaves nothing to fix (exit code 0).
    pub fn is_success(self) -> bool {
        matches!(self, Disposition::Accepted | Disposition::Duplicate)
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
