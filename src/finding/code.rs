//! The X12 code lists an acknowledgment reports problems with, as types, and the one table
//! that says which code each rule is reported with.
//!
//! A code is a variant, never a string: a typo does not compile, and a rule cannot drift
//! into another rule's code. The 999's lists share their values with the 997's (IK304 620
//! with AK304 720 for 1-8, IK403 621 with AK403 723 for 1-10, IK502 618 with AK502 718 for
//! the codes used here), so one type serves both.

use std::fmt;

use super::{Level, Rule};

crate::words::words! {
    /// TA105, interchange note code (I18).
    pub enum Ta105 as value {
        NoError = "000",
        ControlNumbersDiffer = "001",
        StandardNotSupported = "002",
        VersionNotSupported = "003",
        SegmentTerminator = "004",
        SenderQualifier = "005",
        SenderId = "006",
        ReceiverQualifier = "007",
        ReceiverId = "008",
        UnknownReceiver = "009",
        AuthorizationQualifier = "010",
        AuthorizationValue = "011",
        SecurityQualifier = "012",
        SecurityValue = "013",
        Date = "014",
        Time = "015",
        StandardsIdentifier = "016",
        Version = "017",
        ControlNumber = "018",
        AcknowledgmentRequested = "019",
        TestIndicator = "020",
        GroupCount = "021",
        ControlStructure = "022",
        PrematureEnd = "023",
        InvalidContent = "024",
        DuplicateControlNumber = "025",
        ElementSeparator = "026",
        ComponentSeparator = "027",
        /// 028-031 answer the ISE and ISB (X12.5 from 00305; the 004010 and 005010 lists).
        DeliveryDate = "028",
        DeliveryTime = "029",
        DeliveryTimeCode = "030",
        GradeOfService = "031",
    }
}

crate::words::words! {
    /// AK905 / 999 AK905, functional group syntax error code (716).
    pub enum Ak905 as value {
        NotSupported = "1",
        VersionNotSupported = "2",
        TrailerMissing = "3",
        ControlNumbersDiffer = "4",
        SetCount = "5",
        ControlNumberInvalid = "6",
        /// From 004050 on; 004010's list has no "not unique" code.
        ControlNumberNotUnique = "19",
    }
}

crate::words::words! {
    /// AK502 / IK502, transaction set syntax error code (718).
    pub enum Ak502 as value {
        NotSupported = "1",
        TrailerMissing = "2",
        ControlNumbersDiffer = "3",
        SegmentCount = "4",
        SegmentsInError = "5",
        IdInvalid = "6",
        ControlNumberInvalid = "7",
        /// From 004040 on; 004010's list has no such code.
        NotInFunctionalGroup = "18",
        DuplicateControlNumber = "23",
    }
}

crate::words::words! {
    /// AK304 / IK304, segment syntax error code (720; 620 in the 999 shares 1-8).
    pub enum Ak304 as value {
        Unrecognized = "1",
        Unexpected = "2",
        MandatoryMissing = "3",
        LoopOverMaximum = "4",
        OverMaximumUse = "5",
        NotInSet = "6",
        OutOfSequence = "7",
        ElementErrors = "8",
    }
}

crate::words::words! {
    /// AK403 / IK403, data element syntax error code (723; 621 in the 999 shares 1-10).
    pub enum Ak403 as value {
        MandatoryMissing = "1",
        ConditionalMissing = "2",
        TooMany = "3",
        TooShort = "4",
        TooLong = "5",
        InvalidCharacter = "6",
        InvalidCode = "7",
        InvalidDate = "8",
        InvalidTime = "9",
        ExclusionViolated = "10",
        /// 621 only (the 999's IK403): "Not Used" data element present. A 997 sends
        /// [`Ak403::in_functional_ack`]'s code in its place.
        NotUsed = "I10",
    }
}

/// Which acknowledgment element a code belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CodeList {
    #[serde(rename = "TA105")]
    Ta105,
    #[serde(rename = "AK905")]
    Ak905,
    #[serde(rename = "AK502")]
    Ak502,
    #[serde(rename = "AK304")]
    Ak304,
    #[serde(rename = "AK403")]
    Ak403,
}

impl CodeList {
    pub fn name(self) -> &'static str {
        match self {
            CodeList::Ta105 => "TA105",
            CodeList::Ak905 => "AK905",
            CodeList::Ak502 => "AK502",
            CodeList::Ak304 => "AK304",
            CodeList::Ak403 => "AK403",
        }
    }
}

/// An X12 code from one of the lists: `TA105 025`, `AK502 23`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    Ta105(Ta105),
    Ak905(Ak905),
    Ak502(Ak502),
    Ak304(Ak304),
    Ak403(Ak403),
}

impl Code {
    pub fn list(self) -> CodeList {
        match self {
            Code::Ta105(_) => CodeList::Ta105,
            Code::Ak905(_) => CodeList::Ak905,
            Code::Ak502(_) => CodeList::Ak502,
            Code::Ak304(_) => CodeList::Ak304,
            Code::Ak403(_) => CodeList::Ak403,
        }
    }

    pub fn value(self) -> &'static str {
        match self {
            Code::Ta105(c) => c.value(),
            Code::Ak905(c) => c.value(),
            Code::Ak502(c) => c.value(),
            Code::Ak304(c) => c.value(),
            Code::Ak403(c) => c.value(),
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.list().name(), self.value())
    }
}

/// `{"list": "TA105", "value": "025"}`, the form `validate --json` and the audit log carry.
impl serde::Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Code", 2)?;
        st.serialize_field("list", &self.list())?;
        st.serialize_field("value", self.value())?;
        st.end()
    }
}

/// The release a group declares (GS08 `004010`, `005010X222A1` -> 4010, 5010): the one
/// thing a code can depend on besides the rule.
pub type Release = Option<u32>;

/// The numeric release of a GS08 or ISA12 (`004010` or `005010X222A1` -> 4010, `00401` -> 401).
pub fn release(version: &[u8]) -> Release {
    let digits = version
        .iter()
        .take(6)
        .take_while(|b| b.is_ascii_digit())
        .count();
    std::str::from_utf8(version.get(..digits)?)
        .ok()?
        .parse()
        .ok()
}

impl Ak905 {
    /// This code as an acknowledgment of `release` can send it: "not unique" (19) exists
    /// from 004050 on, and 19 before is a security code; there, 6 "Invalid Group Control
    /// Number", as the group's own release gives it (a partner's `ack_version` may answer a
    /// 005010 group in a 004010 997).
    pub fn in_release(self, release: Release) -> Ak905 {
        match self {
            Ak905::ControlNumberNotUnique if release < Some(4050) => Ak905::ControlNumberInvalid,
            code => code,
        }
    }
}

impl Ak502 {
    /// This code as an acknowledgment of `release` can send it: 18 "Transaction Set not in
    /// Functional Group" exists from 004040 on; before, 6, as [`Rule::code`] gives it.
    pub fn in_release(self, release: Release) -> Ak502 {
        match self {
            Ak502::NotInFunctionalGroup if release < Some(4040) => Ak502::IdInvalid,
            code => code,
        }
    }
}

impl Rule {
    /// The code this rule is reported with in `release`, the table every finding takes its
    /// code from. `None` for file-level rules no interchange can answer, and for the ISA
    /// field rules, whose TA105 names the field (the ISA table in `validate` holds those).
    pub fn code(self, release: Release) -> Option<Code> {
        use Rule::*;
        let code = match self {
            NotAnInterchange | EmptyFile | FileTooLarge | InterchangeTooLarge => return None,
            // Warnings: read as partners' tools read them, reported, never sent back (a
            // partner with `layout = "strict"` gets TA105 024, see `check`).
            BlankBeforeSegment | FinalTerminatorMissing => return None,
            // Warnings: 716 has Invalid Group Date/Time (30, 31) and Invalid Responsible
            // Agency Code (9) only after 005010 (from 005020 in the EdiFabric templates'
            // 716 lists; Stedi's 004050 list lacks them, its 006050 list has them), and our
            // acknowledgments are 004010 and 005010.
            GsDateTimeInvalid | GsAgencyInvalid => return None,
            EnvelopeLevelOnly => return None,
            // A warning: the group may still be read as its sender means it (at envelope
            // level); `unknown_version = "reject"` gives it AK905 2 (see `check`).
            GsVersionUnknown => return None,
            // A warning: nothing is missing for the receiver (no level was promised by id),
            // and guides fix HL04 at 1 on levels that may stand alone (X279A1's 2000B).
            HlChildrenNone | HlIdOrder => return None,
            IsaFieldWidth | IsaFieldValue => return None,
            IsaUnreadable => Code::Ta105(Ta105::ControlStructure),
            ElementSeparator => Code::Ta105(Ta105::ElementSeparator),
            SegmentTerminator => Code::Ta105(Ta105::SegmentTerminator),
            DelimitersNotDistinct => Code::Ta105(Ta105::ComponentSeparator),
            IeaMissing => Code::Ta105(Ta105::PrematureEnd),
            IeaGroupCount => Code::Ta105(Ta105::GroupCount),
            IeaControlNumber => Code::Ta105(Ta105::ControlNumbersDiffer),
            SegmentOutsideEnvelope | LimitExceeded => Code::Ta105(Ta105::InvalidContent),
            // The ISB and ISE have note codes of their own (I18 028-031, in 004010 and
            // 005010: X12-REFERENCE 5.2, stupidedi's 00501 element_defs.rb).
            IsbGradeOfServiceInvalid => Code::Ta105(Ta105::GradeOfService),
            IseDeliveryDateInvalid => Code::Ta105(Ta105::DeliveryDate),
            IseDeliveryTimeInvalid => Code::Ta105(Ta105::DeliveryTime),
            IseDeliveryTimeCodeInvalid => Code::Ta105(Ta105::DeliveryTimeCode),
            // No note code names an extra element or a received TA1: I18's codes speak of
            // our partner's ISA (014 is "Invalid Interchange Date Value", ISA09), so a bad
            // TA102 given 014 would send the partner looking at the wrong segment. 024,
            // "Invalid Interchange Content", is the list's code for content that is not
            // right, as for segments outside an envelope.
            ControlSegmentElementTooMany
            | Ta1ControlNumberInvalid
            | Ta1DateInvalid
            | Ta1TimeInvalid
            | Ta1AckCodeInvalid
            | Ta1NoteCodeInvalid => Code::Ta105(Ta105::InvalidContent),
            UnknownSender => Code::Ta105(Ta105::SenderId),
            ReceiverQualifierNotOurs => Code::Ta105(Ta105::ReceiverQualifier),
            ReceiverNotOurs => Code::Ta105(Ta105::UnknownReceiver),
            // 716 code 1 "Functional Group Not Supported", in every release's list (Stedi's
            // 002040 to 006050 pages, the EdiFabric templates' 004010 and 005010 lists).
            GsFunctionalIdUnknown => Code::Ak905(Ak905::NotSupported),
            GsControlNumberSyntax => Code::Ak905(Ak905::ControlNumberInvalid),
            // A version we cannot read by (none, or longer than any GS08 can be) is 716
            // code 2, "Functional Group Version Not Supported".
            GsVersionMissing | GsVersionTooLong => Code::Ak905(Ak905::VersionNotSupported),
            // 004010's list has no "not unique" code and 6 is what other translators send.
            GsDuplicateControlNumber | GsSeenBefore => match release {
                Some(r) if r >= 4050 => Code::Ak905(Ak905::ControlNumberNotUnique),
                _ => Code::Ak905(Ak905::ControlNumberInvalid),
            },
            GeMissing => Code::Ak905(Ak905::TrailerMissing),
            GeSetCount => Code::Ak905(Ak905::SetCount),
            GeControlNumber => Code::Ak905(Ak905::ControlNumbersDiffer),
            StIdInvalid => Code::Ak502(Ak502::IdInvalid),
            // 718 code 18 "Transaction Set not in Functional Group" says exactly this; it is
            // in the lists from 004040 on (EdiFabric templates: absent from 004010-004030,
            // present from 004040; Stedi's 005040 list; the 999's IK502 list of
            // 005010X231A1). Before, 6 "Missing or Invalid Transaction Set Identifier": the
            // identifier is invalid for this group; 1 "Transaction Set Not Supported" would
            // tell the partner we cannot take the set at all.
            StNotInFunctionalGroup => match release {
                Some(r) if r >= 4040 => Code::Ak502(Ak502::NotInFunctionalGroup),
                _ => Code::Ak502(Ak502::IdInvalid),
            },
            StControlNumberInvalid => Code::Ak502(Ak502::ControlNumberInvalid),
            StDuplicateControlNumber => Code::Ak502(Ak502::DuplicateControlNumber),
            SeMissing => Code::Ak502(Ak502::TrailerMissing),
            SeSegmentCount => Code::Ak502(Ak502::SegmentCount),
            SeControlNumber => Code::Ak502(Ak502::ControlNumbersDiffer),
            SegmentIdInvalid => Code::Ak502(Ak502::SegmentsInError),
            SegmentUnrecognized => Code::Ak304(Ak304::Unrecognized),
            SegmentUnexpected => Code::Ak304(Ak304::Unexpected),
            SegmentMissing => Code::Ak304(Ak304::MandatoryMissing),
            LoopOverMaximum => Code::Ak304(Ak304::LoopOverMaximum),
            SegmentOverMaximumUse => Code::Ak304(Ak304::OverMaximumUse),
            SegmentNotInSet => Code::Ak304(Ak304::NotInSet),
            SegmentOutOfSequence => Code::Ak304(Ak304::OutOfSequence),
            ElementMissing => Code::Ak403(Ak403::MandatoryMissing),
            ElementConditionalMissing => Code::Ak403(Ak403::ConditionalMissing),
            ElementTooMany => Code::Ak403(Ak403::TooMany),
            ElementTooShort => Code::Ak403(Ak403::TooShort),
            ElementTooLong => Code::Ak403(Ak403::TooLong),
            ElementInvalidCharacter => Code::Ak403(Ak403::InvalidCharacter),
            ElementInvalidCode => Code::Ak403(Ak403::InvalidCode),
            ElementInvalidDate => Code::Ak403(Ak403::InvalidDate),
            ElementInvalidTime => Code::Ak403(Ak403::InvalidTime),
            ElementExclusionViolated => Code::Ak403(Ak403::ExclusionViolated),
            // The value is well formed and wrong for where it stands: 723 has no closer code
            // than 7, "Invalid Code Value" (an HL02 a guide requires and the level lacks is
            // the element check's, 1).
            HlIdInvalid | HlParentUnknown | HlParentMismatch | HlChildCode => {
                Code::Ak403(Ak403::InvalidCode)
            }
            // 621's I10 exists in the 999 alone, and there is no 999 before 005010: a group
            // of an earlier release is answered by a 997, whose code stands here (see
            // `Ak403::in_functional_ack`).
            ElementNotUsed => match release {
                Some(r) if r < 5010 => Code::Ak403(Ak403::ExclusionViolated),
                _ => Code::Ak403(Ak403::NotUsed),
            },
        };
        Some(code)
    }

    /// Whether this rule reports what is read as partners' tools read it and never rejects
    /// (unless a partner's `layout = "strict"` gives it a code).
    pub fn is_warning(self) -> bool {
        use Rule::*;
        matches!(
            self,
            BlankBeforeSegment
                | FinalTerminatorMissing
                | GsDateTimeInvalid
                | GsAgencyInvalid
                | GsVersionUnknown
                | HlChildrenNone
                | HlIdOrder
                | EnvelopeLevelOnly
        )
    }

    /// The envelope a finding of this rule belongs to; the acknowledgment answers there.
    pub fn level(self) -> Level {
        use Rule::*;
        match self {
            NotAnInterchange | IsaUnreadable | ElementSeparator | SegmentTerminator | EmptyFile
            | FileTooLarge | InterchangeTooLarge => Level::File,
            IsaFieldWidth
            | IsaFieldValue
            | DelimitersNotDistinct
            | IeaMissing
            | IeaGroupCount
            | IeaControlNumber
            | SegmentOutsideEnvelope
            | LimitExceeded
            | UnknownSender
            | ReceiverQualifierNotOurs
            | ReceiverNotOurs
            | BlankBeforeSegment
            | FinalTerminatorMissing
            | IsbGradeOfServiceInvalid
            | IseDeliveryDateInvalid
            | IseDeliveryTimeInvalid
            | IseDeliveryTimeCodeInvalid
            | ControlSegmentElementTooMany
            | Ta1ControlNumberInvalid
            | Ta1DateInvalid
            | Ta1TimeInvalid
            | Ta1AckCodeInvalid
            | Ta1NoteCodeInvalid => Level::Interchange,
            GsDateTimeInvalid
            | GsAgencyInvalid
            | EnvelopeLevelOnly
            | GsFunctionalIdUnknown
            | GsControlNumberSyntax
            | GsVersionMissing
            | GsVersionTooLong
            | GsVersionUnknown
            | GsDuplicateControlNumber
            | GsSeenBefore
            | GeMissing
            | GeSetCount
            | GeControlNumber => Level::Group,
            StIdInvalid
            | StNotInFunctionalGroup
            | StControlNumberInvalid
            | StDuplicateControlNumber
            | SeMissing
            | SeSegmentCount
            | SeControlNumber
            | SegmentIdInvalid
            | SegmentUnrecognized
            | SegmentUnexpected
            | SegmentMissing
            | LoopOverMaximum
            | SegmentOverMaximumUse
            | SegmentNotInSet
            | SegmentOutOfSequence
            | HlIdInvalid
            | HlParentUnknown
            | HlParentMismatch
            | HlChildCode
            | HlChildrenNone
            | HlIdOrder
            | ElementMissing
            | ElementConditionalMissing
            | ElementTooMany
            | ElementTooShort
            | ElementTooLong
            | ElementInvalidCharacter
            | ElementInvalidCode
            | ElementInvalidDate
            | ElementInvalidTime
            | ElementExclusionViolated
            | ElementNotUsed => Level::Set,
        }
    }
}

impl Ak403 {
    /// The rule an element error of this code breaks.
    pub fn rule(self) -> Rule {
        match self {
            Ak403::MandatoryMissing => Rule::ElementMissing,
            Ak403::ConditionalMissing => Rule::ElementConditionalMissing,
            Ak403::TooMany => Rule::ElementTooMany,
            Ak403::TooShort => Rule::ElementTooShort,
            Ak403::TooLong => Rule::ElementTooLong,
            Ak403::InvalidCharacter => Rule::ElementInvalidCharacter,
            Ak403::InvalidCode => Rule::ElementInvalidCode,
            Ak403::InvalidDate => Rule::ElementInvalidDate,
            Ak403::InvalidTime => Rule::ElementInvalidTime,
            Ak403::ExclusionViolated => Rule::ElementExclusionViolated,
            Ak403::NotUsed => Rule::ElementNotUsed,
        }
    }

    /// The code a 997 (AK403, list 723) sends for this one. 723 has no "not used" code: an
    /// element the guide excludes is reported as 10, "Exclusion Condition Violated", the
    /// list's code for an element that is present where it must not be (an E note's second
    /// element is just that); 3 "Too Many Data Elements" would say the segment is longer
    /// than its definition, and 7 would blame the value, not its presence.
    pub fn in_functional_ack(self) -> Ak403 {
        match self {
            Ak403::NotUsed => Ak403::ExclusionViolated,
            other => other,
        }
    }

    /// The code list's own words for the code, which messages begin with.
    pub fn description(self) -> &'static str {
        match self {
            Ak403::MandatoryMissing => "mandatory data element missing",
            Ak403::ConditionalMissing => "conditional required data element missing",
            Ak403::TooMany => "too many data elements",
            Ak403::TooShort => "data element too short",
            Ak403::TooLong => "data element too long",
            Ak403::InvalidCharacter => "invalid character in data element",
            Ak403::InvalidCode => "invalid code value",
            Ak403::InvalidDate => "invalid date",
            Ak403::InvalidTime => "invalid time",
            Ak403::ExclusionViolated => "exclusion condition violated",
            Ak403::NotUsed => "\"Not Used\" data element present",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_list_has_distinct_values() {
        fn distinct(values: Vec<&str>) {
            let mut sorted = values.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), values.len(), "{values:?}");
        }
        distinct(Ta105::ALL.iter().map(|c| c.value()).collect());
        distinct(Ak905::ALL.iter().map(|c| c.value()).collect());
        distinct(Ak502::ALL.iter().map(|c| c.value()).collect());
        distinct(Ak304::ALL.iter().map(|c| c.value()).collect());
        distinct(Ak403::ALL.iter().map(|c| c.value()).collect());
    }

    #[test]
    fn element_codes_and_rules_correspond_both_ways() {
        for code in Ak403::ALL {
            assert_eq!(code.rule().code(None), Some(Code::Ak403(code)));
        }
    }

    #[test]
    fn a_rules_code_list_matches_its_level() {
        for rule in Rule::ALL {
            let Some(code) = rule.code(None) else {
                continue;
            };
            let expected = match rule.level() {
                Level::File | Level::Interchange => vec![CodeList::Ta105],
                Level::Group => vec![CodeList::Ak905],
                Level::Set => vec![CodeList::Ak502, CodeList::Ak304, CodeList::Ak403],
            };
            assert!(expected.contains(&code.list()), "{rule:?} -> {code}");
        }
    }

    #[test]
    fn a_duplicate_group_gets_19_from_004050_and_6_before() {
        let code = |v: &[u8]| {
            Rule::GsDuplicateControlNumber
                .code(release(v))
                .map(Code::value)
        };
        assert_eq!(code(b"004010"), Some("6"));
        assert_eq!(code(b"004050"), Some("19"));
        assert_eq!(code(b"005010X222A1"), Some("19"));
        assert_eq!(code(b""), Some("6"));
        assert_eq!(release(b"00401"), Some(401));
        assert_eq!(release(b"X12"), None);
    }

    #[test]
    fn a_set_outside_its_group_gets_18_from_004040_and_6_before() {
        let code = |v: &[u8]| {
            Rule::StNotInFunctionalGroup
                .code(release(v))
                .map(Code::value)
        };
        assert_eq!(code(b"004010"), Some("6"));
        assert_eq!(code(b"004030"), Some("6"));
        assert_eq!(code(b"004040"), Some("18"));
        assert_eq!(code(b"005010X222A1"), Some("18"));
        assert_eq!(code(b""), Some("6"));
        assert_eq!(Rule::GsAgencyInvalid.code(Some(5010)), None);
        assert!(Rule::GsAgencyInvalid.is_warning());
    }

    #[test]
    fn a_not_used_element_is_i10_in_a_999_and_10_in_a_997() {
        let code = |r: Release| Rule::ElementNotUsed.code(r).map(Code::value);
        assert_eq!(code(None), Some("I10"));
        assert_eq!(code(Some(5010)), Some("I10"));
        assert_eq!(code(Some(4010)), Some("10"));
        // A 997 of a 005010 group: the 723 list has no I10.
        assert_eq!(Ak403::NotUsed.in_functional_ack(), Ak403::ExclusionViolated);
        assert_eq!(Ak403::TooMany.in_functional_ack(), Ak403::TooMany);
        assert_eq!(Ak403::NotUsed.rule(), Rule::ElementNotUsed);
    }

    #[test]
    fn codes_serialize_as_list_and_value() {
        let json = serde_json::to_string(&Code::Ta105(Ta105::DuplicateControlNumber)).unwrap();
        assert_eq!(json, r#"{"list":"TA105","value":"025"}"#);
        assert_eq!(
            Code::Ak502(Ak502::DuplicateControlNumber).to_string(),
            "AK502 23"
        );
    }
}
