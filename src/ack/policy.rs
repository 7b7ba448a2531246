//! Our policy where X12 leaves the choice to the implementation.
//!
//! Vendors differ on which TA1 note codes reject an interchange (`R`) and which only note an
//! error (`E`): Microsoft takes 001 and 021 as E and 014/015 as R, Stedi the other way round.
//! We reject what makes the content unsafe to process (unreadable structure, wrong addressee,
//! bad qualifiers, duplicate) and note what leaves it intact (trailer counts, a malformed date).
//! The README prints this table; change it here and only here.

use super::Status;

/// TA104 for each TA105 note code, and why.
pub const TA1_POLICY: &[(&str, Status, &str)] = &[
    ("000", Status::Accepted, "no error"),
    (
        "001",
        Status::AcceptedWithErrors,
        "IEA02 differs from ISA13; the header is used, content is intact",
    ),
    ("002", Status::Rejected, "control standard not supported"),
    ("003", Status::Rejected, "control version not supported"),
    (
        "004",
        Status::Rejected,
        "segment terminator invalid: content cannot be cut safely",
    ),
    (
        "005",
        Status::Rejected,
        "sender qualifier invalid: the sender cannot be identified",
    ),
    (
        "006",
        Status::Rejected,
        "sender id invalid or not a configured partner",
    ),
    (
        "007",
        Status::Rejected,
        "receiver qualifier invalid or not ours",
    ),
    ("008", Status::Rejected, "receiver id invalid"),
    (
        "009",
        Status::Rejected,
        "receiver is not us: addressed to someone else",
    ),
    ("010", Status::Rejected, "authorization qualifier invalid"),
    ("011", Status::Rejected, "authorization information invalid"),
    ("012", Status::Rejected, "security qualifier invalid"),
    ("013", Status::Rejected, "security information invalid"),
    (
        "014",
        Status::AcceptedWithErrors,
        "interchange date invalid; enveloping time is not business content",
    ),
    (
        "015",
        Status::AcceptedWithErrors,
        "interchange time invalid; enveloping time is not business content",
    ),
    ("016", Status::Rejected, "standards identifier invalid"),
    (
        "017",
        Status::Rejected,
        "version invalid: the rules to read it by are unknown",
    ),
    (
        "018",
        Status::Rejected,
        "control number invalid: the interchange cannot be identified",
    ),
    (
        "019",
        Status::AcceptedWithErrors,
        "acknowledgment-requested flag invalid",
    ),
    (
        "020",
        Status::Rejected,
        "usage indicator invalid: test and production cannot be told apart",
    ),
    (
        "021",
        Status::AcceptedWithErrors,
        "IEA01 group count wrong; each group is acknowledged on its own",
    ),
    ("022", Status::Rejected, "control structure invalid"),
    (
        "023",
        Status::Rejected,
        "premature end of file: content may be missing",
    ),
    (
        "024",
        Status::Rejected,
        "invalid content (segments outside envelopes, limits exceeded)",
    ),
    (
        "025",
        Status::Rejected,
        "duplicate control number with different content",
    ),
    ("026", Status::Rejected, "element separator invalid"),
    ("027", Status::Rejected, "component separator invalid"),
];

/// TA104 for a note code; codes not in the table reject.
pub fn ta104(note: &str) -> Status {
    TA1_POLICY
        .iter()
        .find(|(code, ..)| *code == note)
        .map_or(Status::Rejected, |(_, s, _)| *s)
}

/// Group-level codes (AK905) that reject the whole group; the others are noted (E) and the
/// sets are decided one by one.
pub const GROUP_REJECTING: &[(&str, &str)] = &[
    (
        "2",
        "version missing: the group cannot be read by any rules",
    ),
    ("3", "GE missing: the group may be truncated"),
    ("6", "GS06 invalid or not unique (before 004050)"),
    ("19", "GS06 not unique within the interchange (004050 on)"),
];

pub fn group_rejects(code: &str) -> bool {
    GROUP_REJECTING.iter().any(|(c, _)| *c == code)
}

/// Element errors (AK403) that only note a set (AK5 E) when the element is optional: the
/// value is present but malformed, and the document means the same without it. Any other
/// element error, any error in a mandatory or relational element, and every segment error
/// (AK304) reject the set.
pub const NOTED_IN_OPTIONAL_ELEMENTS: &[(&str, &str)] = &[
    ("4", "too short"),
    ("5", "too long"),
    ("6", "invalid character"),
    ("7", "invalid code value"),
    ("8", "invalid date"),
    ("9", "invalid time"),
];

/// Whether an element error with AK403 `code` rejects its set.
pub fn element_error_rejects(code: &str, element_optional: bool) -> bool {
    !(element_optional && NOTED_IN_OPTIONAL_ELEMENTS.iter().any(|(c, _)| *c == code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_each_code_once_and_in_order() {
        let codes: Vec<&str> = TA1_POLICY.iter().map(|(c, ..)| *c).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(codes, sorted);
        assert_eq!(ta104("025"), Status::Rejected);
        assert_eq!(ta104("021"), Status::AcceptedWithErrors);
        assert_eq!(ta104("999"), Status::Rejected);
    }
}
