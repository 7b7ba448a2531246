//! The vocabulary of problems: which rule a finding breaks, where, and the code an
//! acknowledgment reports it with.
//!
//! Bad EDI is data, not an error: every problem is a [`Finding`]. The rules that find them
//! live in `validate` (envelopes, routing) and `schema::check` (definitions); `check` puts an
//! interchange's findings together; `ack` decides what they mean for the answer. Only
//! `x12::Position` is needed here, so every one of them can depend on this module.

mod code;

use std::fmt;

pub use code::{release, Ak304, Ak403, Ak502, Ak905, Code, CodeList, Release, Ta105};

use crate::x12::{Position, Segment};

crate::words::words! {
    /// The rules a file can break. Names are stable: tests, `--json` output and operators
    /// rely on them.
    #[non_exhaustive]
    pub enum Rule as name {
        // Whole file
        NotAnInterchange = "not-an-interchange",
        IsaUnreadable = "isa-unreadable",
        ElementSeparator = "element-separator",
        SegmentTerminator = "segment-terminator",
        EmptyFile = "empty-file",
        FileTooLarge = "file-too-large",
        InterchangeTooLarge = "interchange-too-large",
        // Interchange
        IsaFieldWidth = "isa-field-width",
        IsaFieldValue = "isa-field-value",
        DelimitersNotDistinct = "delimiters-not-distinct",
        IeaMissing = "iea-missing",
        IeaGroupCount = "iea-group-count",
        IeaControlNumber = "iea-control-number",
        SegmentOutsideEnvelope = "segment-outside-envelope",
        LimitExceeded = "limit-exceeded",
        UnknownSender = "unknown-sender",
        ReceiverQualifierNotOurs = "receiver-qualifier-not-ours",
        ReceiverNotOurs = "receiver-not-ours",
        // Interchange control segments besides ISA/IEA (X12.5): ISB, ISE, a received TA1
        /// ISB01 (I34) missing, not one character, or not 0, 1 or 2.
        IsbGradeOfServiceInvalid = "isb-grade-of-service-invalid",
        /// ISE01 (I35) missing, not 6 digits, or not a real YYMMDD date.
        IseDeliveryDateInvalid = "ise-delivery-date-invalid",
        /// ISE02 (I36) missing, not 4 digits, or not a real HHMM time.
        IseDeliveryTimeInvalid = "ise-delivery-time-invalid",
        /// ISE03 (I37), when sent, not a delivery time code.
        IseDeliveryTimeCodeInvalid = "ise-delivery-time-code-invalid",
        /// An ISB, ISE or TA1 with more elements than X12.5 defines for it.
        ControlSegmentElementTooMany = "control-segment-element-too-many",
        /// A received TA1's TA101 (I12) missing or not 9 digits.
        Ta1ControlNumberInvalid = "ta1-control-number-invalid",
        /// TA102 (I08) missing, not 6 digits, or not a real YYMMDD date.
        Ta1DateInvalid = "ta1-date-invalid",
        /// TA103 (I09) missing, not 4 digits, or not a real HHMM time.
        Ta1TimeInvalid = "ta1-time-invalid",
        /// TA104 (I17) missing or not A, E or R.
        Ta1AckCodeInvalid = "ta1-ack-code-invalid",
        /// TA105 (I18) missing or not a note code 000 to 031.
        Ta1NoteCodeInvalid = "ta1-note-code-invalid",
        // Interchange layout, tolerated (warnings: no code, not sent back)
        BlankBeforeSegment = "blank-before-segment",
        FinalTerminatorMissing = "final-terminator-missing",
        // Group
        /// GS01 is not a functional identifier code (479) of the group's release.
        GsFunctionalIdUnknown = "gs-functional-id-unknown",
        GsControlNumberSyntax = "gs-control-number-syntax",
        GsVersionMissing = "gs-version-missing",
        /// GS08 longer than its 12 characters (480 is AN 1/12).
        GsVersionTooLong = "gs-version-too-long",
        /// A warning unless the partner's `unknown_version = "reject"`: GS08 names no X12
        /// release (`00501`, ISA12's form; `ABCDEF`), so no definition reads its sets.
        GsVersionUnknown = "gs-version-unknown",
        /// A warning: GS07 neither X nor T; AK905 9 arrives only after 005010.
        GsAgencyInvalid = "gs-agency-invalid",
        GsDuplicateControlNumber = "gs-duplicate-control-number",
        GsSeenBefore = "gs-seen-before",
        /// A warning: no AK905 code for it exists before 006050 (30, 31).
        GsDateTimeInvalid = "gs-date-time-invalid",
        /// A warning: a group's sets of a release (or an id) no definition reads; they are
        /// checked at envelope level only. Ours, not the partner's fault: never sent back.
        EnvelopeLevelOnly = "envelope-level-only",
        GeMissing = "ge-missing",
        GeSetCount = "ge-set-count",
        GeControlNumber = "ge-control-number",
        // Transaction set
        StIdInvalid = "st-id-invalid",
        /// ST01 names a set of another functional group than the group's GS01.
        StNotInFunctionalGroup = "st-not-in-functional-group",
        StControlNumberInvalid = "st-control-number-invalid",
        StDuplicateControlNumber = "st-duplicate-control-number",
        SeMissing = "se-missing",
        SeSegmentCount = "se-segment-count",
        SeControlNumber = "se-control-number",
        SegmentIdInvalid = "segment-id-invalid",
        // Transaction set content, against its definition: segments (AK304)
        SegmentUnrecognized = "segment-unrecognized",
        SegmentUnexpected = "segment-unexpected",
        SegmentMissing = "segment-missing",
        LoopOverMaximum = "loop-over-maximum",
        SegmentOverMaximumUse = "segment-over-maximum-use",
        SegmentNotInSet = "segment-not-in-set",
        SegmentOutOfSequence = "segment-out-of-sequence",
        // ... and elements (AK403)
        ElementMissing = "element-missing",
        ElementConditionalMissing = "element-conditional-missing",
        ElementTooMany = "element-too-many",
        ElementTooShort = "element-too-short",
        ElementTooLong = "element-too-long",
        ElementInvalidCharacter = "element-invalid-character",
        ElementInvalidCode = "element-invalid-code",
        ElementInvalidDate = "element-invalid-date",
        ElementInvalidTime = "element-invalid-time",
        ElementExclusionViolated = "element-exclusion-violated",
        // ... and the HL tree (AK403 7 on the element)
        /// HL01 repeats an earlier level's id, or, in an implementation guide, a numeric HL01
        /// is not greater than the one before it.
        HlIdInvalid = "hl-id-invalid",
        /// A warning: a numeric HL01 not greater than the one before it, in a set read
        /// against the standard's table (X12 asks ids to be unique; the guides number them 1,
        /// 2, 3 ..., and there it is `hl-id-invalid`).
        HlIdOrder = "hl-id-order",
        /// HL02 names no level read before it (none of the set, the level itself, a later one).
        HlParentUnknown = "hl-parent-unknown",
        /// HL02 is not the id of the level a guide nests this one in (2000C in 2000B).
        HlParentMismatch = "hl-parent-mismatch",
        /// HL04 `0` says the level has no children, and a later level names it as parent.
        HlChildCode = "hl-child-code",
        /// A warning: HL04 `1` says the level has children, and none names it (common and
        /// harmless; where a guide allows only `1` at the level, not reported at all).
        HlChildrenNone = "hl-children-none",
        /// An element or component an implementation guide marks "Not Used" at this position
        /// is present (999 IK403 I10; 997 AK403 10).
        ElementNotUsed = "element-not-used",
    }
}

/// Which envelope a finding belongs to; the acknowledgment answers at that level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    File,
    Interchange,
    Group,
    Set,
}

/// One problem, where it is, and the code that reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub rule: Rule,
    pub level: Level,
    /// `None` only for file-level problems no interchange can report.
    pub code: Option<Code>,
    pub position: Position,
    /// The segment's id as read, its first 35 bytes at most (a segment without separators
    /// is all "id").
    pub segment_id: String,
    /// Index of the group in its interchange (0-based), for group and set findings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<usize>,
    /// Index of the set in its group (0-based), for set findings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<usize>,
    pub message: String,
    /// What a definition's finding adds for AK3/AK4 (IK3/IK4/CTX).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<SchemaDetail>>,
    /// The partner's setting that made an error of this rule a warning (`group_mismatch`):
    /// still reported, never sent back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerated_by: Option<&'static str>,
}

/// The parts of a definition's finding that only segment and element errors have.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SchemaDetail {
    /// The innermost loop the segment stands in (its id in the definition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<String>,
    /// AK303: LS01 of the bounded (LS/LE) loop the segment stands in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bounded_loop: Option<String>,
    /// AK402: the data element reference number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<u32>,
    /// AK401-3: repetition position, for repeating elements.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetition: Option<u16>,
    /// AK404: a copy of the bad value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bad_value: Option<String>,
    /// The loop's business unit (999 CTX01): its trigger's first element and that value,
    /// such as `PO101` and `3`: which line of the document the error is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<(String, String)>,
    /// Whether the element in error is optional (O) in its segment: the fact the severity
    /// policy (`ack::policy`) decides by. False for segment errors.
    pub element_optional: bool,
    /// Whether the set was read against an implementation guide: its 999 names the loop
    /// (`loop_id`, such as `2010AA`) in IK303.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub guide: bool,
}

impl Finding {
    /// A warning: reported, never a rejection nor sent back.
    pub fn is_warning(&self) -> bool {
        (self.rule.is_warning() || self.tolerated_by.is_some()) && self.code.is_none()
    }

    /// This finding made a warning by the partner's `setting` (such as
    /// `group_mismatch = "warn"`): no code, and the message says why.
    pub fn tolerated(self, setting: &'static str) -> Finding {
        Finding {
            code: None,
            message: format!("{} (accepted: the partner's {setting})", self.message),
            tolerated_by: Some(setting),
            ..self
        }
    }

    /// A finding of `rule` at `position`, with the rule's level and code (see
    /// [`Rule::code`]); a group or set finding is then placed with [`Finding::in_group`] or
    /// [`Finding::in_set`].
    pub fn new(
        rule: Rule,
        position: Position,
        segment_id: impl Into<String>,
        message: String,
    ) -> Finding {
        // Copied again only when it is cut (an id is a few bytes: nearly never).
        let id: String = segment_id.into();
        let segment_id = match crate::text::quoted(&id) {
            std::borrow::Cow::Borrowed(_) => id,
            std::borrow::Cow::Owned(cut) => cut,
        };
        Finding {
            rule,
            level: rule.level(),
            code: rule.code(None),
            position,
            segment_id,
            group: None,
            set: None,
            message,
            detail: None,
            tolerated_by: None,
        }
    }

    /// The code for the release the finding's group declares, where the rule's code
    /// depends on it.
    pub fn in_release(self, release: Release) -> Finding {
        Finding {
            code: self.rule.code(release).or(self.code),
            ..self
        }
    }

    /// A code other than the rule's own: an ISA field rule names the field's TA105.
    pub fn coded(self, code: Code) -> Finding {
        Finding {
            code: Some(code),
            ..self
        }
    }

    pub fn in_group(self, group: usize) -> Finding {
        Finding {
            group: Some(group),
            ..self
        }
    }

    pub fn in_set(self, group: usize, set: usize) -> Finding {
        Finding {
            group: Some(group),
            set: Some(set),
            ..self
        }
    }

    pub fn with_detail(self, detail: SchemaDetail) -> Finding {
        Finding {
            detail: Some(Box::new(detail)),
            ..self
        }
    }
}

impl fmt::Display for Finding {
    /// `byte 453: segment 15 (SE, set segment 13), element SE01: <message> [rule; code]`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.position;
        write!(f, "byte {}", p.byte)?;
        if p.segment > 0 {
            write!(f, ": segment {}", p.segment)?;
            let in_loop = self.detail.as_ref().and_then(|d| d.loop_id.as_deref());
            match (self.segment_id.is_empty(), p.set_segment) {
                (false, Some(n)) => match in_loop {
                    Some(l) => write!(f, " ({}, set segment {n}, loop {l})", self.segment_id)?,
                    None => write!(f, " ({}, set segment {n})", self.segment_id)?,
                },
                (false, None) => write!(f, " ({})", self.segment_id)?,
                (true, Some(n)) => write!(f, " (set segment {n})")?,
                (true, None) => {}
            }
        }
        if let Some(e) = p.element {
            write!(f, ", element {}{e:02}", self.segment_id)?;
            if let Some(c) = p.component {
                write!(f, "-{c}")?;
            }
        }
        write!(f, ": {} [{}", self.message, self.rule.name())?;
        if let Some(code) = self.code {
            write!(f, "; {code}")?;
        }
        write!(f, "]")
    }
}

/// Where element `element` (1-based; 0 for the segment itself) of `segment` starts.
pub(crate) fn at_element(segment: &Segment<'_>, element: usize) -> Position {
    let mut p = segment.position();
    if element > 0 {
        p.byte = segment.element_offset(element);
        p.element = u16::try_from(element).ok();
    }
    p
}

/// A finding of a group rule at element `element` of `segment` (its GS or GE), with the
/// code for the release its GS08 declares. Here, not in `validate`, because the envelope
/// rules and the definitions' "read at envelope level only" both place findings this way.
pub(crate) fn group_finding(
    gi: usize,
    gs: &Segment<'_>,
    rule: Rule,
    segment: &Segment<'_>,
    element: usize,
    message: String,
) -> Finding {
    Finding::new(
        rule,
        at_element(segment, element),
        segment.id_str(),
        message,
    )
    .in_group(gi)
    .in_release(release(gs.element(8).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_names_are_distinct_kebab_case_and_serialized_as_such() {
        let mut names: Vec<&str> = Rule::ALL.iter().map(|r| r.name()).collect();
        // Words of lowercase letters and digits (the segment ids TA1, ...), each starting
        // with a letter, joined by single hyphens.
        assert!(
            names.iter().all(|n| n.split('-').all(|w| {
                w.starts_with(|c: char| c.is_ascii_lowercase())
                    && w.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            })),
            "{names:?}"
        );
        let json = serde_json::to_string(&Rule::GsSeenBefore).unwrap();
        assert_eq!(json, "\"gs-seen-before\"");
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Rule::ALL.len());
    }

    #[test]
    fn a_finding_takes_level_and_code_from_its_rule() {
        let f = Finding::new(Rule::GeSetCount, Position::default(), "GE", "m".into()).in_group(2);
        assert_eq!((f.level, f.group, f.set), (Level::Group, Some(2), None));
        assert_eq!(f.code.map(|c| c.to_string()).as_deref(), Some("AK905 5"));
        let dup = Finding::new(Rule::GsSeenBefore, Position::default(), "GS", "m".into());
        assert_eq!(dup.code.map(Code::value), Some("6"));
        assert_eq!(dup.in_release(Some(5010)).code.map(Code::value), Some("19"));
    }
}
