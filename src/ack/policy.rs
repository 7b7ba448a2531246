//! Our policy where X12 leaves the choice to the implementation.
//!
//! Vendors differ on which TA1 note codes reject an interchange (`R`) and which only note an
//! error (`E`): Microsoft takes 001 and 021 as E and 014/015 as R, Stedi the other way round.
//! We reject what makes the content unsafe to process (unreadable structure, wrong addressee,
//! bad qualifiers, duplicate) and note what leaves it intact (trailer counts, a malformed date).
//! docs/standards.md prints this table; change it here and only here.

use super::Status;
use crate::finding::{Ak403, Ak905, Code, Finding, Rule, Ta105};

/// TA104 for each TA105 note code, and why.
pub const TA1_POLICY: &[(Ta105, Status, &str)] = &[
    (Ta105::NoError, Status::Accepted, "no error"),
    (
        Ta105::ControlNumbersDiffer,
        Status::AcceptedWithErrors,
        "IEA02 differs from ISA13; the header is used, content is intact",
    ),
    (
        Ta105::StandardNotSupported,
        Status::Rejected,
        "control standard not supported",
    ),
    (
        Ta105::VersionNotSupported,
        Status::Rejected,
        "control version not supported",
    ),
    (
        Ta105::SegmentTerminator,
        Status::Rejected,
        "segment terminator invalid: content cannot be cut safely",
    ),
    (
        Ta105::SenderQualifier,
        Status::Rejected,
        "sender qualifier invalid: the sender cannot be identified",
    ),
    (
        Ta105::SenderId,
        Status::Rejected,
        "sender id invalid or not a configured partner",
    ),
    (
        Ta105::ReceiverQualifier,
        Status::Rejected,
        "receiver qualifier invalid or not ours",
    ),
    (Ta105::ReceiverId, Status::Rejected, "receiver id invalid"),
    (
        Ta105::UnknownReceiver,
        Status::Rejected,
        "receiver is not us: addressed to someone else",
    ),
    (
        Ta105::AuthorizationQualifier,
        Status::Rejected,
        "authorization qualifier invalid",
    ),
    (
        Ta105::AuthorizationValue,
        Status::Rejected,
        "authorization information invalid",
    ),
    (
        Ta105::SecurityQualifier,
        Status::Rejected,
        "security qualifier invalid",
    ),
    (
        Ta105::SecurityValue,
        Status::Rejected,
        "security information invalid",
    ),
    (
        Ta105::Date,
        Status::AcceptedWithErrors,
        "interchange date invalid; enveloping time is not business content",
    ),
    (
        Ta105::Time,
        Status::AcceptedWithErrors,
        "interchange time invalid; enveloping time is not business content",
    ),
    (
        Ta105::StandardsIdentifier,
        Status::Rejected,
        "standards identifier invalid",
    ),
    (
        Ta105::Version,
        Status::Rejected,
        "version invalid: the rules to read it by are unknown",
    ),
    (
        Ta105::ControlNumber,
        Status::Rejected,
        "control number invalid: the interchange cannot be identified",
    ),
    (
        Ta105::AcknowledgmentRequested,
        Status::AcceptedWithErrors,
        "acknowledgment-requested flag invalid",
    ),
    (
        Ta105::TestIndicator,
        Status::Rejected,
        "usage indicator invalid: test and production cannot be told apart",
    ),
    (
        Ta105::GroupCount,
        Status::AcceptedWithErrors,
        "IEA01 group count wrong; each group is acknowledged on its own",
    ),
    (
        Ta105::ControlStructure,
        Status::Rejected,
        "control structure invalid",
    ),
    (
        Ta105::PrematureEnd,
        Status::Rejected,
        "premature end of file: content may be missing",
    ),
    (
        Ta105::InvalidContent,
        Status::Rejected,
        "invalid content (segments outside envelopes, limits exceeded)",
    ),
    (
        Ta105::DuplicateControlNumber,
        Status::Rejected,
        "duplicate control number with different content",
    ),
    (
        Ta105::ElementSeparator,
        Status::Rejected,
        "element separator invalid",
    ),
    (
        Ta105::ComponentSeparator,
        Status::Rejected,
        "component separator invalid",
    ),
    (
        Ta105::DeliveryDate,
        Status::AcceptedWithErrors,
        "deferred delivery date invalid; a request to the network, not business content",
    ),
    (
        Ta105::DeliveryTime,
        Status::AcceptedWithErrors,
        "deferred delivery time invalid; a request to the network, not business content",
    ),
    (
        Ta105::DeliveryTimeCode,
        Status::AcceptedWithErrors,
        "deferred delivery time code invalid; a request to the network, not business content",
    ),
    (
        Ta105::GradeOfService,
        Status::AcceptedWithErrors,
        "grade of service invalid; a request to the network, not business content",
    ),
];

/// TA104 for a note code; codes not in the table reject.
pub fn ta104(note: Ta105) -> Status {
    TA1_POLICY
        .iter()
        .find(|(code, ..)| *code == note)
        .map_or(Status::Rejected, |(_, s, _)| *s)
}

/// Group-level codes (AK905) that reject the whole group; the others are noted (E) and the
/// sets are decided one by one.
pub const GROUP_REJECTING: &[(Ak905, &str)] = &[
    (
        Ak905::NotSupported,
        "GS01 not a functional identifier of the release: no set can be read as of its group",
    ),
    (
        Ak905::VersionNotSupported,
        "version missing or too long: the group cannot be read by any rules",
    ),
    (
        Ak905::TrailerMissing,
        "GE missing: the group may be truncated",
    ),
    (
        Ak905::ControlNumberInvalid,
        "GS06 invalid or not unique (before 004050)",
    ),
    (
        Ak905::ControlNumberNotUnique,
        "GS06 not unique within the interchange (004050 on)",
    ),
];

pub fn group_rejects(code: Ak905) -> bool {
    GROUP_REJECTING.iter().any(|(c, _)| *c == code)
}

/// Element errors (AK403) that only note a set (AK5 E) when the element is optional: the
/// value is present but malformed, and the document means the same without it. Any other
/// element error, any error in a mandatory or relational element, and every segment error
/// (AK304) reject the set.
pub const NOTED_IN_OPTIONAL_ELEMENTS: &[(Ak403, &str)] = &[
    (Ak403::TooShort, "too short"),
    (Ak403::TooLong, "too long"),
    (Ak403::InvalidCharacter, "invalid character"),
    (Ak403::InvalidCode, "invalid code value"),
    (Ak403::InvalidDate, "invalid date"),
    (Ak403::InvalidTime, "invalid time"),
];

/// Whether a finding of a set's definition (an AK304 segment or AK403 element error)
/// rejects its set; envelope findings of a set always do.
pub fn schema_finding_rejects(f: &Finding) -> bool {
    if f.is_warning() {
        return false;
    }
    // A level whose id or parent is wrong hangs its data (a claim, an item) under the wrong
    // level or none: whatever the element's requirement, that is not safe to book. A wrong
    // HL04 alone leaves the tree as HL02 draws it, and is noted like any optional element.
    if matches!(
        f.rule,
        Rule::HlIdInvalid | Rule::HlParentUnknown | Rule::HlParentMismatch
    ) {
        return true;
    }
    let optional = f.detail.as_ref().is_some_and(|d| d.element_optional);
    match f.code {
        Some(Code::Ak403(code)) => {
            !(optional && NOTED_IN_OPTIONAL_ELEMENTS.iter().any(|(c, _)| *c == code))
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_each_code_once_and_in_order() {
        let codes: Vec<&str> = TA1_POLICY.iter().map(|(c, ..)| c.value()).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(codes, sorted);
        assert_eq!(
            codes.len(),
            Ta105::ALL.len(),
            "every TA105 code has a policy"
        );
        assert_eq!(ta104(Ta105::DuplicateControlNumber), Status::Rejected);
        assert_eq!(ta104(Ta105::GroupCount), Status::AcceptedWithErrors);
    }
}
