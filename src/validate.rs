//! Envelope and routing rules: the tree's facts turned into findings.
//!
//! Each rule here looks at the ISA/IEA, GS/GE and ST/SE envelopes of one interchange, or at
//! who sent it to whom; what a set's content breaks against its definition is
//! `schema::check`'s, and `check` puts both together. The one envelope rule that needs a
//! release's dictionary (GS01 against the 479 code list) takes it from `check`; which set
//! belongs to which functional group is a table of its own ([`functional_groups`]), and the
//! elements of the ISB, ISE and received TA1s are held to their X12.5 definitions in
//! [`control_segments`].

mod control_segments;
mod functional_groups;

use std::collections::HashSet;

use chrono::{NaiveDate, NaiveTime};

use crate::finding::{
    at_element as at, group_finding, release, Code, Finding, Release, Rule, Ta105,
};
pub use crate::schema::names_a_set;
use crate::schema::Schemas;
use crate::text::shown;
use crate::x12::{
    number, Group, Interchange, InterchangeEnd, LimitKind, Position, ReadError, ReadErrorKind,
    Segment, TransactionSet,
};

/// A finding for a file that could not be read as an interchange.
pub fn read_error(e: &ReadError) -> Finding {
    let rule = match e.kind {
        ReadErrorKind::NotAnInterchange => Rule::NotAnInterchange,
        ReadErrorKind::IsaUnreadable => Rule::IsaUnreadable,
        ReadErrorKind::ElementSeparator => Rule::ElementSeparator,
        ReadErrorKind::SegmentTerminator => Rule::SegmentTerminator,
        ReadErrorKind::TooLarge => Rule::InterchangeTooLarge,
        _ => Rule::EmptyFile,
    };
    let position = Position {
        byte: e.offset,
        ..Position::default()
    };
    Finding::new(rule, position, "", e.message.clone())
}

/// The finding for a file refused for its size before it was read.
pub fn too_large(size: u64, limit: u64) -> Finding {
    Finding::new(
        Rule::FileTooLarge,
        Position::default(),
        "",
        format!("the file is {size} bytes, more than the limit of {limit} (limits.max_file_bytes)"),
    )
}

/// Who we are, and whether this interchange's sender may be answered: what the routing
/// rules need from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Routing<'a> {
    /// ISA07/ISA08 an interchange must be addressed to: `[gateway]`'s, or any of `also`
    /// (`[[gateway.identity]]`).
    pub qualifier: &'a str,
    pub id: &'a str,
    pub also: &'a [OurIdentity],
    /// Whether the sender is a configured partner, or unknown partners are accepted.
    pub sender_known: bool,
}

/// One of our own interchange ids: the one `[gateway]` declares (named `default`), or one
/// of `[[gateway.identity]]` (a desk may be `ZZ:X12GATE` to some partners and `01:<DUNS>`
/// to others). Inbound addressed to any of them is ours; a partner's `identity` says which
/// one our acknowledgments and documents to it come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OurIdentity {
    pub name: String,
    pub id_qualifier: String,
    pub id: String,
}

/// Findings about who sent an interchange and to whom: a receiver other than us, or a
/// sender no `[[partner]]` declares (when unknown partners are refused).
pub fn routing(ic: &Interchange<'_>, us: &Routing<'_>) -> Vec<Finding> {
    let isa = &ic.isa;
    let at = |n: usize, rule: Rule, message: String| {
        Finding::new(rule, isa_position(isa, n), "ISA", message)
    };
    let mut findings = Vec::new();
    let our_id = us.id;
    let (to_qualifier, to_id) = (isa.trimmed(7), isa.trimmed(8));
    let ours: Vec<(&str, &str)> = std::iter::once((us.qualifier, us.id))
        .chain(
            us.also
                .iter()
                .map(|i| (i.id_qualifier.as_str(), i.id.as_str())),
        )
        .collect();
    let same_id: Vec<&str> = ours
        .iter()
        .filter(|(_, id)| *id == to_id)
        .map(|(q, _)| *q)
        .collect();
    if same_id.is_empty() {
        findings.push(at(8, Rule::ReceiverNotOurs, format!(
            "ISA08 \"{to_id}\" is not our id \"{our_id}\": this interchange is addressed to someone else")));
    } else if !same_id.contains(&to_qualifier) {
        findings.push(at(
            7,
            Rule::ReceiverQualifierNotOurs,
            format!(
                "ISA07 \"{to_qualifier}\" is not our qualifier \"{}\"",
                same_id.join("\" or \"")
            ),
        ));
    }
    if !us.sender_known {
        findings.push(at(
            6,
            Rule::UnknownSender,
            format!(
                "sender {}:{} is not a configured partner (unknown_partners = \"reject\")",
                isa.trimmed(5),
                isa.trimmed(6)
            ),
        ));
    }
    findings
}

/// The finding for a group whose GS06 (with its GS02) an earlier interchange of the same
/// sender already used within the partner's window.
pub fn group_seen_before(ic: &Interchange<'_>, gi: usize) -> Option<Finding> {
    Some(group_seen_before_at(gi, &ic.groups.get(gi)?.gs))
}

/// [`group_seen_before`] of group `gi`, whose GS is `gs`.
pub fn group_seen_before_at(gi: usize, gs: &Segment<'_>) -> Finding {
    let message = format!(
        "GS06 \"{}\" from application sender \"{}\" was already used by an earlier interchange",
        shown(gs.element(6).unwrap_or_default()),
        shown(gs.element(2).unwrap_or_default())
    );
    group_finding(gi, gs, Rule::GsSeenBefore, gs, 6, message)
}

/// The functional identifier codes (GS01) of the group a transaction set (ST01) belongs to,
/// by X12's assignment; `None` for a set the table does not have (it is then not checked).
pub fn functional_groups_of(st01: &[u8]) -> Option<&'static [&'static str]> {
    functional_groups::groups_of(st01)
}

/// Every envelope finding of one interchange, in file order within each level.
pub fn interchange(ic: &Interchange<'_>) -> Vec<Finding> {
    interchange_with(ic, None)
}

/// [`interchange`], and with `dictionaries` each group's GS01 checked against the
/// functional identifier codes (479) of the release its GS08 names (`Schemas::code_list`,
/// which does not follow `releases.toml`). A release without a dictionary there (any but 004010 and
/// 005010 today) is not checked: another release's list could refuse a code the group's own
/// release has (the lists gain and lose codes from release to release).
pub fn interchange_with(ic: &Interchange<'_>, dictionaries: Option<&Schemas>) -> Vec<Finding> {
    part(ic, dictionaries, &mut Carried::default()).into_findings()
}

/// The envelope findings of `ic`, one part of its interchange
/// ([`crate::x12::Interchanges::in_parts`]; a whole interchange is its one part), given
/// what the earlier parts left in `carried`.
/// Group and set indexes are the part's own.
pub fn part(
    ic: &Interchange<'_>,
    dictionaries: Option<&Schemas>,
    carried: &mut Carried,
) -> Envelope {
    let mut v = Validator {
        findings: Vec::new(),
        dictionaries,
    };
    let mut out = Envelope::default();
    if ic.is_first_part() {
        v.isa(ic);
    }
    v.findings.extend(control_segments::findings(ic));
    out.head = v.take();
    v.layout(ic, carried);
    out.layout = v.take();
    v.strays(ic);
    out.strays = v.take();
    v.breaches(ic);
    out.breaches = v.take();
    if ic.is_last_part() {
        v.trailer(ic);
    }
    out.trailer = v.take();
    for (gi, group) in ic.groups.iter().enumerate() {
        v.group(ic, gi, group, carried);
    }
    out.groups = v.take();
    out
}

/// An interchange's envelope findings by where they stand among them: an interchange read
/// in parts has each part's appended to the same place, and reads as it would whole.
#[derive(Debug, Default)]
pub struct Envelope {
    /// The ISA, ISB, ISE and TA1 segments'.
    pub head: Vec<Finding>,
    /// Blanks before segments, an IEA without its terminator.
    pub layout: Vec<Finding>,
    pub strays: Vec<Finding>,
    pub breaches: Vec<Finding>,
    /// The IEA's (or its absence).
    pub trailer: Vec<Finding>,
    /// The groups', with their sets' envelopes.
    pub groups: Vec<Finding>,
}

impl Envelope {
    /// Every section, each in turn.
    pub fn sections_mut(&mut self) -> [&mut Vec<Finding>; 6] {
        [
            &mut self.head,
            &mut self.layout,
            &mut self.strays,
            &mut self.breaches,
            &mut self.trailer,
            &mut self.groups,
        ]
    }

    /// Adds a later part's findings.
    pub fn append(&mut self, mut later: Envelope) {
        for (to, from) in self.sections_mut().into_iter().zip(later.sections_mut()) {
            to.append(from);
        }
    }

    pub fn into_findings(mut self) -> Vec<Finding> {
        self.sections_mut()
            .into_iter()
            .flat_map(std::mem::take)
            .collect()
    }
}

/// What the envelope rules of one part of an interchange leave for the next: the group
/// control numbers used, the set control numbers of the open group, and whether a blank
/// before a segment was reported.
#[derive(Debug, Default)]
pub struct Carried {
    /// Digests of [`group_key`]s: a few bytes each, however long the values.
    seen_gs06: HashSet<[u8; 32]>,
    /// The open group's ST02s, each packed whole into a number (see [`packed`]).
    seen_st02: ControlNumbers,
    blank_shown: bool,
}

/// What X12.6 requires to be unique among an interchange's groups: GS01, GS02, GS03 and
/// GS06 together (a `GS*PO*..*1` and a `GS*IN*..*1` may share a control number).
fn group_key(gs: &Segment<'_>) -> [u8; 32] {
    let mut key = blake3::Hasher::new();
    for n in [1, 2, 3, 6] {
        let value = gs.element(n).unwrap_or_default();
        key.update(&(value.len() as u64).to_le_bytes());
        key.update(value);
    }
    *key.finalize().as_bytes()
}

/// The control numbers seen in a group, as numbers ([`packed`]). Senders number their sets
/// in ascending order, so a number above every one before it is new without a look-up and
/// is appended to a sorted list; only the others are looked up there and kept in a hash
/// set (hashing every one of a million sets' numbers was a fifth of the envelope rules'
/// time on an interchange of small sets).
#[derive(Debug, Default)]
struct ControlNumbers {
    ascending: Vec<u128>,
    others: HashSet<u128>,
}

impl ControlNumbers {
    /// Adds `n`; false when it was there already.
    fn insert(&mut self, n: u128) -> bool {
        if self.ascending.last().is_none_or(|last| n > *last) {
            self.ascending.push(n);
            return true;
        }
        self.ascending.binary_search(&n).is_err() && self.others.insert(n)
    }

    fn clear(&mut self) {
        self.ascending.clear();
        self.others.clear();
    }

    fn reserve(&mut self, n: usize) {
        self.ascending.reserve(n);
    }
}

/// An ST02 of 4 to 9 bytes as one number, its length above its bytes: distinct ST02s are
/// distinct numbers.
fn packed(st02: &[u8]) -> u128 {
    st02.iter()
        .fold(st02.len() as u128, |v, b| (v << 8) | u128::from(*b))
}

struct Validator<'s> {
    findings: Vec<Finding>,
    dictionaries: Option<&'s Schemas>,
}

impl Validator<'_> {
    fn take(&mut self) -> Vec<Finding> {
        std::mem::take(&mut self.findings)
    }
}

/// Where ISA element `n` (1-based) starts.
fn isa_position(isa: &crate::x12::Isa<'_>, n: usize) -> Position {
    let mut p = isa.segment.position();
    p.element = u16::try_from(n).ok();
    p.byte = isa.segment.offset
        + 4
        + isa
            .fields
            .iter()
            .take(n.saturating_sub(1))
            .map(|f| f.len() + 1)
            .sum::<usize>();
    p
}

fn all_digits(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(u8::is_ascii_digit)
}

/// One ISA field's rule: its width, the note code for it, and what values it admits.
struct IsaField {
    width: usize,
    code: Ta105,
    valid: fn(&[u8]) -> bool,
    expected: &'static str,
}

const ID_QUALIFIERS: &[&str] = &[
    "01", "02", "03", "04", "07", "08", "09", "10", "11", "12", "13", "14", "15", "16", "17", "18",
    "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32", "33", "34",
    "35", "36", "37", "38", "AM", "NR", "SA", "SN", "ZZ",
];

fn any(_: &[u8]) -> bool {
    true
}
fn not_blank(v: &[u8]) -> bool {
    v.iter().any(|b| *b != b' ')
}
fn id_qualifier(v: &[u8]) -> bool {
    ID_QUALIFIERS.iter().any(|q| q.as_bytes() == v)
}
fn isa_date(v: &[u8]) -> bool {
    let s = std::str::from_utf8(v).unwrap_or("");
    all_digits(v) && NaiveDate::parse_from_str(&format!("20{s}"), "%Y%m%d").is_ok()
}
/// GS04: CCYYMMDD, or YYMMDD in releases before 004010.
fn gs_date(v: &[u8], release: Option<u32>) -> bool {
    let s = std::str::from_utf8(v).unwrap_or("");
    let old = release.is_some_and(|r| r < 4010);
    all_digits(v)
        && match v.len() {
            8 => NaiveDate::parse_from_str(s, "%Y%m%d").is_ok(),
            6 if old => NaiveDate::parse_from_str(&format!("20{s}"), "%Y%m%d").is_ok(),
            _ => false,
        }
}

/// GS05: HHMM, HHMMSS, HHMMSSD or HHMMSSDD.
fn gs_time(v: &[u8]) -> bool {
    let s = std::str::from_utf8(v).unwrap_or("");
    all_digits(v)
        && match v.len() {
            4 => NaiveTime::parse_from_str(s, "%H%M").is_ok(),
            6..=8 => NaiveTime::parse_from_str(s.get(..6).unwrap_or(""), "%H%M%S").is_ok(),
            _ => false,
        }
}

fn isa_time(v: &[u8]) -> bool {
    all_digits(v) && NaiveTime::parse_from_str(std::str::from_utf8(v).unwrap_or(""), "%H%M").is_ok()
}

/// ISA01..ISA16 (index 0 is ISA01). ISA11 and ISA12 get extra version-dependent checks.
const ISA_FIELDS: [IsaField; 16] = [
    IsaField {
        width: 2,
        code: Ta105::AuthorizationQualifier,
        valid: |v| matches!(v, b"00" | b"01" | b"02" | b"03" | b"04" | b"05" | b"06"),
        expected: "an authorization qualifier 00-06",
    },
    IsaField {
        width: 10,
        code: Ta105::AuthorizationValue,
        valid: any,
        expected: "10 characters",
    },
    IsaField {
        width: 2,
        code: Ta105::SecurityQualifier,
        valid: |v| matches!(v, b"00" | b"01"),
        expected: "00 or 01",
    },
    IsaField {
        width: 10,
        code: Ta105::SecurityValue,
        valid: any,
        expected: "10 characters",
    },
    IsaField {
        width: 2,
        code: Ta105::SenderQualifier,
        valid: id_qualifier,
        expected: "an interchange id qualifier (I05)",
    },
    IsaField {
        width: 15,
        code: Ta105::SenderId,
        valid: not_blank,
        expected: "a sender id, space padded to 15",
    },
    IsaField {
        width: 2,
        code: Ta105::ReceiverQualifier,
        valid: id_qualifier,
        expected: "an interchange id qualifier (I05)",
    },
    IsaField {
        width: 15,
        code: Ta105::ReceiverId,
        valid: not_blank,
        expected: "a receiver id, space padded to 15",
    },
    IsaField {
        width: 6,
        code: Ta105::Date,
        valid: isa_date,
        expected: "a valid date YYMMDD",
    },
    IsaField {
        width: 4,
        code: Ta105::Time,
        valid: isa_time,
        expected: "a valid time HHMM",
    },
    IsaField {
        width: 1,
        code: Ta105::StandardsIdentifier,
        valid: any,
        expected: "one character",
    },
    IsaField {
        width: 5,
        code: Ta105::Version,
        valid: crate::x12::is_control_version,
        expected: "a version such as 00401 or 00501",
    },
    IsaField {
        width: 9,
        code: Ta105::ControlNumber,
        valid: all_digits,
        expected: "nine digits",
    },
    IsaField {
        width: 1,
        code: Ta105::AcknowledgmentRequested,
        valid: |v| matches!(v, b"0" | b"1"),
        expected: "0 or 1",
    },
    IsaField {
        width: 1,
        code: Ta105::TestIndicator,
        valid: |v| matches!(v, b"P" | b"T" | b"I"),
        expected: "P, T or I",
    },
    IsaField {
        width: 1,
        code: Ta105::ComponentSeparator,
        valid: |v| {
            v.first()
                .is_some_and(|b| !b.is_ascii_alphanumeric() && *b != b' ')
        },
        expected: "a delimiter: not a letter, digit or space",
    },
];

/// Where a set finding belongs: its group and set indexes, the ST's ordinal for AK302, and
/// the release its group declares (a set code can depend on it).
#[derive(Clone, Copy)]
struct SetAt {
    group: usize,
    set: usize,
    st_ordinal: u32,
    release: Release,
}

impl Validator<'_> {
    fn interchange_finding(
        &mut self,
        rule: Rule,
        segment: &Segment<'_>,
        element: usize,
        message: String,
    ) {
        let f = Finding::new(rule, at(segment, element), segment.id_str(), message);
        self.findings.push(f);
    }

    fn group_finding(
        &mut self,
        gi: usize,
        gs: &Segment<'_>,
        rule: Rule,
        segment: &Segment<'_>,
        element: usize,
        message: String,
    ) {
        let f = group_finding(gi, gs, rule, segment, element, message);
        self.findings.push(f);
    }

    fn set_finding(
        &mut self,
        at: SetAt,
        rule: Rule,
        segment: &Segment<'_>,
        element: usize,
        message: String,
    ) {
        let mut f = Finding::new(rule, self::at(segment, element), segment.id_str(), message)
            .in_set(at.group, at.set)
            .in_release(at.release);
        f.position.set_segment = segment.ordinal.checked_sub(at.st_ordinal).map(|d| d + 1);
        self.findings.push(f);
    }

    fn isa(&mut self, ic: &Interchange<'_>) {
        let isa = &ic.isa;
        let version = release(isa.field(12));
        for (i, rule) in ISA_FIELDS.iter().enumerate() {
            let n = i + 1;
            let value = isa.field(n);
            let p = isa_position(isa, n);
            let (rule_hit, message) = if value.len() != rule.width {
                (
                    Rule::IsaFieldWidth,
                    format!(
                        "ISA{n:02} is {} bytes, must be exactly {} (the ISA is fixed width)",
                        value.len(),
                        rule.width
                    ),
                )
            } else if !(rule.valid)(value) {
                (
                    Rule::IsaFieldValue,
                    format!(
                        "ISA{n:02} \"{}\" is invalid: expected {}",
                        shown(value),
                        rule.expected
                    ),
                )
            } else if n == 11 && version.is_some_and(|v| v < 402) && value != b"U" {
                (Rule::IsaFieldValue, format!("ISA11 \"{}\" must be U (control standards identifier) before version 00402", shown(value)))
            } else {
                continue;
            };
            let f = Finding::new(rule_hit, p, "ISA", message).coded(Code::Ta105(rule.code));
            self.findings.push(f);
        }
        let d = isa.delimiters;
        let isa11 = isa.field(11);
        let component_clash =
            d.component == d.element || version.is_some_and(|v| v >= 402) && isa11 == [d.component];
        if component_clash {
            self.interchange_finding(
                Rule::DelimitersNotDistinct,
                &isa.segment,
                16,
                format!(
                    "ISA16 component separator \"{}\" equals another delimiter",
                    shown(&[d.component])
                ),
            );
        }
        let repetition_clash = version.is_some_and(|v| v >= 402)
            && matches!(isa11, [r] if !r.is_ascii_alphanumeric() && (*r == d.element || *r == d.segment));
        if repetition_clash {
            let message = format!(
                "ISA11 repetition separator \"{}\" equals another delimiter",
                shown(isa11)
            );
            let f = Finding::new(
                Rule::DelimitersNotDistinct,
                at(&isa.segment, 11),
                "ISA",
                message,
            )
            .coded(Code::Ta105(Ta105::StandardsIdentifier));
            self.findings.push(f);
        }
    }

    fn layout(&mut self, ic: &Interchange<'_>, carried: &mut Carried) {
        if let Some(byte) = ic.first_blank.filter(|_| !carried.blank_shown) {
            carried.blank_shown = true;
            let position = Position {
                byte,
                ..Position::default()
            };
            let message = format!(
                "a space or tab before a segment (the first at byte {byte}; an indented or padded layout): skipped, as partners' tools do"
            );
            self.findings.push(Finding::new(
                Rule::BlankBeforeSegment,
                position,
                "",
                message,
            ));
        }
        if let Some(iea) = ic.iea.as_ref().filter(|s| !s.terminated) {
            let message = "the IEA has no segment terminator: the file ends without one".into();
            let f = Finding::new(Rule::FinalTerminatorMissing, at(iea, 0), "IEA", message);
            self.findings.push(f);
        }
    }

    fn strays(&mut self, ic: &Interchange<'_>) {
        for segment in &ic.stray {
            self.interchange_finding(
                Rule::SegmentOutsideEnvelope,
                segment,
                0,
                format!(
                    "{} segment outside any envelope (not between GS and GE, or ST and SE)",
                    segment.id_shown()
                ),
            );
        }
    }

    fn breaches(&mut self, ic: &Interchange<'_>) {
        for breach in &ic.breaches {
            let what = match breach.kind {
                LimitKind::SegmentsPerSet => "segments in one transaction set",
                LimitKind::ElementLength => "bytes in one element",
                LimitKind::SetBytes => "bytes in one transaction set",
            };
            let at_least = if breach.kind == LimitKind::SetBytes {
                "at least "
            } else {
                ""
            };
            let message = format!(
                "limit exceeded: more than {} {what} ({at_least}{} found)",
                breach.limit, breach.actual
            );
            let f = Finding::new(Rule::LimitExceeded, breach.position, "", message);
            self.findings.push(f);
        }
    }

    /// The IEA's rules, in the interchange's last part.
    fn trailer(&mut self, ic: &Interchange<'_>) {
        let Some(iea) = &ic.iea else {
            let last = match ic.end {
                InterchangeEnd::NextIsa => "another ISA began",
                _ => "the file ended",
            };
            let p = Position {
                byte: ic.base + ic.span.end,
                segment: ic.segment_count.saturating_add(1),
                ..Position::default()
            };
            let message = format!("IEA missing: {last} before the interchange was closed");
            self.findings
                .push(Finding::new(Rule::IeaMissing, p, "IEA", message));
            return;
        };
        let declared = iea.element(1).unwrap_or_default();
        let groups = ic.group_index(ic.groups.len());
        if number(declared) != Some(groups as u64) {
            self.interchange_finding(
                Rule::IeaGroupCount,
                iea,
                1,
                format!(
                    "IEA01 \"{}\" does not match the {groups} functional group(s) received",
                    shown(declared)
                ),
            );
        } else if declared.len() > 5 {
            // IEA01 is N0 1/5: the right count with leading zeros past five digits is not.
            self.interchange_finding(
                Rule::IeaGroupCount,
                iea,
                1,
                format!("IEA01 \"{}\" is longer than 5 digits", shown(declared)),
            );
        }
        let iea02 = iea.element(2).unwrap_or_default();
        if iea02 != ic.isa.field(13) {
            self.interchange_finding(
                Rule::IeaControlNumber,
                iea,
                2,
                format!(
                    "IEA02 \"{}\" does not match ISA13 \"{}\"",
                    shown(iea02),
                    shown(ic.isa.field(13))
                ),
            );
        }
    }

    fn group(&mut self, ic: &Interchange<'_>, gi: usize, group: &Group<'_>, carried: &mut Carried) {
        let gs = &group.gs;
        let gs01 = gs.element(1).unwrap_or_default();
        let gs06 = gs.element(6).unwrap_or_default();
        let version = release(gs.element(8).unwrap_or_default());
        if ic.opens_group(gi) {
            self.gs(gi, gs, carried);
            carried.seen_st02.clear();
        }
        // Sized once: a group of thousands of sets then costs no allocation per set.
        carried.seen_st02.reserve(group.sets.len());
        for (si, set) in group.sets.iter().enumerate() {
            self.set(gi, si, &set, gs01, version, &mut carried.seen_st02);
        }
        if ic.closes_group(gi) {
            let sets = ic.set_index(gi, group.sets.len());
            self.ge(gi, gs, group.ge.as_ref(), gs06, sets);
        }
    }

    fn gs(&mut self, gi: usize, gs: &Segment<'_>, carried: &mut Carried) {
        let gs01 = gs.element(1).unwrap_or_default();
        let gs08 = gs.element(8).unwrap_or_default();
        let functional_ids = self.dictionaries.and_then(|d| d.code_list(gs08, "479"));
        if functional_ids.is_some_and(|list| !list.contains(gs01)) {
            let message = format!(
                "GS01 \"{}\" is not a functional identifier code of release {} (element 479)",
                shown(gs01),
                shown(gs08.get(..6).unwrap_or_default())
            );
            self.group_finding(gi, gs, Rule::GsFunctionalIdUnknown, gs, 1, message);
        }
        let gs06 = gs.element(6).unwrap_or_default();
        if !(all_digits(gs06) && gs06.len() <= 9) {
            self.group_finding(
                gi,
                gs,
                Rule::GsControlNumberSyntax,
                gs,
                6,
                format!("GS06 \"{}\" must be 1 to 9 digits", shown(gs06)),
            );
        } else if !carried.seen_gs06.insert(group_key(gs)) {
            self.group_finding(
                gi,
                gs,
                Rule::GsDuplicateControlNumber,
                gs,
                6,
                format!(
                    "GS06 \"{}\" is used by an earlier group of this interchange with the same GS01, GS02 and GS03",
                    shown(gs06)
                ),
            );
        }
        let version = release(gs.element(8).unwrap_or_default());
        for (n, valid, expected) in [
            (
                4,
                gs_date(gs.element(4).unwrap_or_default(), version),
                "a date CCYYMMDD",
            ),
            (
                5,
                gs_time(gs.element(5).unwrap_or_default()),
                "a time HHMM, HHMMSS or HHMMSSD[D]",
            ),
        ] {
            if !valid {
                let value = shown(gs.element(n).unwrap_or_default());
                self.group_finding(
                    gi,
                    gs,
                    Rule::GsDateTimeInvalid,
                    gs,
                    n,
                    format!("GS{n:02} \"{value}\" is not {expected} (noted; not sent back: no AK905 code exists for it before 006050)"),
                );
            }
        }
        let gs07 = gs.element(7).unwrap_or_default();
        if !matches!(gs07, b"X" | b"T") {
            self.group_finding(
                gi,
                gs,
                Rule::GsAgencyInvalid,
                gs,
                7,
                format!("GS07 \"{}\" is not a responsible agency code (X for X12, T for TDCC; element 455) (noted; not sent back: AK905 9 exists only after 005010)", shown(gs07)),
            );
        }
        self.gs08(gi, gs, gs08);
    }

    /// GS08: there, no longer than a version can be, and naming an X12 release.
    fn gs08(&mut self, gi: usize, gs: &Segment<'_>, gs08: &[u8]) {
        if gs08.is_empty() {
            self.group_finding(
                gi,
                gs,
                Rule::GsVersionMissing,
                gs,
                8,
                "GS08 (version) is missing".into(),
            );
        } else if gs08.len() > 12 {
            // GS08 (480) is AN 1/12 in every release: no version is longer.
            self.group_finding(
                gi,
                gs,
                Rule::GsVersionTooLong,
                gs,
                8,
                format!(
                    "GS08 \"{}\" is {} bytes, longer than a version can be (12)",
                    shown(gs08),
                    gs08.len()
                ),
            );
        } else if !crate::schema::names_a_release(gs08) {
            let hint = if gs08.len() == 5 && gs08.iter().all(u8::is_ascii_digit) {
                " (five digits is ISA12's form; GS08 carries six and any guide, as 005010X222A1)"
            } else {
                " (a release is six digits, as 004010 or 005010X222A1)"
            };
            self.group_finding(
                gi,
                gs,
                Rule::GsVersionUnknown,
                gs,
                8,
                format!(
                    "GS08 \"{}\" names no X12 release{hint}: no definition reads its sets",
                    shown(gs08)
                ),
            );
        }
    }

    fn ge(
        &mut self,
        gi: usize,
        gs: &Segment<'_>,
        ge: Option<&Segment<'_>>,
        gs06: &[u8],
        sets: usize,
    ) {
        let Some(ge) = ge else {
            self.group_finding(
                gi,
                gs,
                Rule::GeMissing,
                gs,
                0,
                format!(
                    "GE missing for the group opened by GS06 \"{}\"",
                    shown(gs06)
                ),
            );
            return;
        };
        let ge01 = ge.element(1).unwrap_or_default();
        if number(ge01) != Some(sets as u64) {
            self.group_finding(
                gi,
                gs,
                Rule::GeSetCount,
                ge,
                1,
                format!(
                    "GE01 \"{}\" does not match the {sets} transaction set(s) received",
                    shown(ge01)
                ),
            );
        } else if ge01.len() > 6 {
            // GE01 is N0 1/6.
            self.group_finding(
                gi,
                gs,
                Rule::GeSetCount,
                ge,
                1,
                format!("GE01 \"{}\" is longer than 6 digits", shown(ge01)),
            );
        }
        let ge02 = ge.element(2).unwrap_or_default();
        if ge02 != gs06 {
            self.group_finding(
                gi,
                gs,
                Rule::GeControlNumber,
                ge,
                2,
                format!(
                    "GE02 \"{}\" does not match GS06 \"{}\"",
                    shown(ge02),
                    shown(gs06)
                ),
            );
        }
    }

    fn set<'a>(
        &mut self,
        gi: usize,
        si: usize,
        set: &TransactionSet<'a>,
        gs01: &[u8],
        version: Release,
        seen_st02: &mut ControlNumbers,
    ) {
        let st = &set.st;
        let at = SetAt {
            group: gi,
            set: si,
            st_ordinal: st.ordinal,
            release: version,
        };
        let st01 = st.element(1).unwrap_or_default();
        if !names_a_set(st01) {
            self.set_finding(
                at,
                Rule::StIdInvalid,
                st,
                1,
                format!(
                    "ST01 \"{}\" is not a transaction set identifier (three digits, 100 to 999)",
                    shown(st01)
                ),
            );
        }
        // The sets' assignment to functional groups holds from 004010 on (see
        // `functional_groups`); a set the table does not have is not checked.
        let groups = functional_groups::groups_of(st01).filter(|_| version >= Some(4010));
        if let Some(groups) = groups.filter(|g| !g.iter().any(|g| g.as_bytes() == gs01)) {
            self.set_finding(
                at,
                Rule::StNotInFunctionalGroup,
                st,
                1,
                format!(
                    "ST01 \"{}\" is a set of functional group {}, not of this group's GS01 \"{}\"",
                    shown(st01),
                    groups.join(" or "),
                    shown(gs01)
                ),
            );
        }
        let st02 = st.element(2).unwrap_or_default();
        if !(4..=9).contains(&st02.len()) {
            self.set_finding(
                at,
                Rule::StControlNumberInvalid,
                st,
                2,
                format!("ST02 \"{}\" must be 4 to 9 characters", shown(st02)),
            );
        } else if !seen_st02.insert(packed(st02)) {
            self.set_finding(
                at,
                Rule::StDuplicateControlNumber,
                st,
                2,
                format!(
                    "ST02 \"{}\" is used by an earlier transaction set of this group",
                    shown(st02)
                ),
            );
        }
        for bad in &set.bad_ids {
            self.set_finding(
                at,
                Rule::SegmentIdInvalid,
                bad,
                0,
                format!("segment id \"{}\" is not 2 or 3 capital letters or digits (AK304 1: unrecognized segment id)", shown(bad.id)),
            );
        }
        self.set_trailer(at, set, st02);
    }

    /// The SE that closes `set`: present, counting the set's segments, and naming its ST02.
    fn set_trailer(&mut self, at: SetAt, set: &TransactionSet<'_>, st02: &[u8]) {
        let st = &set.st;
        let Some(se) = &set.se else {
            self.set_finding(
                at,
                Rule::SeMissing,
                st,
                0,
                format!(
                    "SE missing for the transaction set opened by ST02 \"{}\"",
                    shown(st02)
                ),
            );
            return;
        };
        let se01 = se.element(1).unwrap_or_default();
        let counted = set.counted_segments();
        if number(se01) != Some(counted as u64) {
            self.set_finding(
                at,
                Rule::SeSegmentCount,
                se,
                1,
                format!(
                    "SE01 \"{}\" does not match the {counted} segments counted from ST to SE",
                    shown(se01)
                ),
            );
        }
        let se02 = se.element(2).unwrap_or_default();
        if se02 != st02 {
            self.set_finding(
                at,
                Rule::SeControlNumber,
                se,
                2,
                format!(
                    "SE02 \"{}\" does not match ST02 \"{}\"",
                    shown(se02),
                    shown(st02)
                ),
            );
        }
    }
}
