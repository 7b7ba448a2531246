//! Production or test: the one word that ISA15 gives every document of an interchange, and
//! that partners' `test_destinations`, the destinations, the document keys and the registry
//! all speak. Its own module, low in the layers, so that the configuration can name it
//! without depending on the documents.

use crate::x12::Interchange;

/// Whether a document came in a production interchange (ISA15 `P`) or not: a test (`T`) or
/// information (`I`) interchange's documents are test documents, known by keys of their own
/// and sent only to test destinations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Usage {
    #[default]
    #[serde(rename = "P")]
    Production,
    #[serde(rename = "T")]
    Test,
}

/// What ends the key (and subject) of a test document: one part more than any production
/// key has (its parts escape `:`), so the two namespaces never meet.
const TEST_MARK: &str = ":test";

impl Usage {
    /// The usage of the interchange `ic` (its ISA15).
    pub fn of(ic: &Interchange<'_>) -> Usage {
        if ic.isa.field(15).trim_ascii() == b"P" {
            Usage::Production
        } else {
            Usage::Test
        }
    }

    /// The usage of a document key: a test key is a production key's six parts and `test`.
    pub fn of_key(key: &str) -> Usage {
        if key.ends_with(TEST_MARK) && key.bytes().filter(|b| *b == b':').count() == 6 {
            Usage::Test
        } else {
            Usage::Production
        }
    }

    /// `P` or `T`, as the document's JSON (`envelope.usage`) and reports say it.
    pub fn letter(self) -> &'static str {
        match self {
            Usage::Production => "P",
            Usage::Test => "T",
        }
    }

    /// What ends a key of this usage: nothing, or `:test`.
    pub(crate) fn mark(self) -> &'static str {
        match self {
            Usage::Production => "",
            Usage::Test => TEST_MARK,
        }
    }
}
