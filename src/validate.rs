//! Envelope validation: the tree's facts turned into findings that carry X12 codes.
//!
//! Bad EDI is data, not an error: every problem becomes a [`Finding`] with the rule it
//! breaks, the place it breaks it and the code an acknowledgment must carry for it (TA105 for
//! the interchange, AK905 for a group, AK502 for a set). The acknowledgment builders read the
//! codes from here; nothing else decides them.

use std::collections::HashSet;
use std::fmt;

use chrono::{NaiveDate, NaiveTime};

use crate::x12::{
    Group, Interchange, InterchangeEnd, LimitKind, Position, ReadError, ReadErrorKind, Segment,
    TransactionSet,
};

/// Which acknowledgment element a code belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CodeList {
    /// TA105, interchange note code (I18).
    #[serde(rename = "TA105")]
    Ta105,
    /// AK905 / 999 AK905, functional group syntax error code (716).
    #[serde(rename = "AK905")]
    Ak905,
    /// AK502 / IK502, transaction set syntax error code (718).
    #[serde(rename = "AK502")]
    Ak502,
    /// AK304 / IK304, segment syntax error code (720; 620 in the 999 shares 1-8).
    #[serde(rename = "AK304")]
    Ak304,
    /// AK403 / IK403, data element syntax error code (723; 621 in the 999 shares 1-10).
    #[serde(rename = "AK403")]
    Ak403,
}

impl CodeList {
    fn name(self) -> &'static str {
        match self {
            CodeList::Ta105 => "TA105",
            CodeList::Ak905 => "AK905",
            CodeList::Ak502 => "AK502",
            CodeList::Ak304 => "AK304",
            CodeList::Ak403 => "AK403",
        }
    }
}

/// An X12 code: the list it comes from and its value (`TA105 025`, `AK502 23`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Code {
    pub list: CodeList,
    pub value: &'static str,
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.list.name(), self.value)
    }
}

/// The envelope rules. Names are stable: tests, `--json` output and operators rely on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Rule {
    // Whole file
    NotAnInterchange,
    IsaUnreadable,
    ElementSeparator,
    SegmentTerminator,
    EmptyFile,
    FileTooLarge,
    // Interchange
    IsaFieldWidth,
    IsaFieldValue,
    DelimitersNotDistinct,
    IeaMissing,
    IeaGroupCount,
    IeaControlNumber,
    SegmentOutsideEnvelope,
    LimitExceeded,
    UnknownSender,
    ReceiverQualifierNotOurs,
    ReceiverNotOurs,
    // Group
    GsControlNumberSyntax,
    GsVersionMissing,
    GsDuplicateControlNumber,
    GsSeenBefore,
    GeMissing,
    GeSetCount,
    GeControlNumber,
    // Transaction set
    StIdInvalid,
    StControlNumberInvalid,
    StDuplicateControlNumber,
    SeMissing,
    SeSegmentCount,
    SeControlNumber,
    SegmentIdInvalid,
    // Transaction set content, against its schema: segments (AK304)
    SegmentUnrecognized,
    SegmentUnexpected,
    SegmentMissing,
    LoopOverMaximum,
    SegmentOverMaximumUse,
    SegmentNotInSet,
    SegmentOutOfSequence,
    // ... and elements (AK403)
    ElementMissing,
    ElementConditionalMissing,
    ElementTooMany,
    ElementTooShort,
    ElementTooLong,
    ElementInvalidCharacter,
    ElementInvalidCode,
    ElementInvalidDate,
    ElementInvalidTime,
    ElementExclusionViolated,
}

impl Rule {
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
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
    pub segment_id: String,
    /// Index of the group in its interchange (0-based), for group and set findings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<usize>,
    /// Index of the set in its group (0-based), for set findings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<usize>,
    pub message: String,
    /// What a schema finding adds for AK3/AK4 (IK3/IK4/CTX).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<SchemaDetail>>,
}

/// The parts of a schema finding that only segment and element errors have.
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
    /// Whether the error rejects the set (AK501 R) or only notes it (E).
    pub rejects: bool,
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

/// A finding for a file that could not be read as an interchange.
pub fn read_error(e: &ReadError) -> Finding {
    let (rule, code) = match e.kind {
        ReadErrorKind::NotAnInterchange => (Rule::NotAnInterchange, None),
        ReadErrorKind::IsaUnreadable => (Rule::IsaUnreadable, Some("022")),
        ReadErrorKind::ElementSeparator => (Rule::ElementSeparator, Some("026")),
        ReadErrorKind::SegmentTerminator => (Rule::SegmentTerminator, Some("004")),
        _ => (Rule::EmptyFile, None),
    };
    Finding {
        rule,
        level: Level::File,
        code: code.map(|value| Code {
            list: CodeList::Ta105,
            value,
        }),
        position: Position {
            byte: e.offset,
            ..Position::default()
        },
        segment_id: String::new(),
        group: None,
        set: None,
        message: e.message.clone(),
        detail: None,
    }
}

/// The finding for a file refused for its size before it was read.
pub fn too_large(size: u64, limit: u64) -> Finding {
    Finding {
        rule: Rule::FileTooLarge,
        level: Level::File,
        code: None,
        position: Position::default(),
        segment_id: String::new(),
        group: None,
        set: None,
        message: format!(
            "the file is {size} bytes, more than the limit of {limit} (limits.max_file_bytes)"
        ),
        detail: None,
    }
}

/// Every finding of a whole file, one interchange at a time so memory stays bounded by the
/// largest interchange's tree, not by the file.
/// Sets with a built-in definition are checked against it too.
pub fn file(input: &[u8], limits: crate::x12::Limits) -> Vec<Finding> {
    file_with(input, limits, crate::schema::builtin().ok())
}

/// [`file`], with these definitions or (`None`) with envelope rules only.
pub fn file_with(
    input: &[u8],
    limits: crate::x12::Limits,
    schemas: Option<&crate::schema::Schemas>,
) -> Vec<Finding> {
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    file_on(input, limits, schemas, workers)
}

/// [`file_with`] on at most `threads` threads (1: all on this one).
pub fn file_on(
    input: &[u8],
    limits: crate::x12::Limits,
    schemas: Option<&crate::schema::Schemas>,
    threads: usize,
) -> Vec<Finding> {
    let workers = threads;
    match schemas {
        Some(schemas) if workers > 1 && input.len() >= PARALLEL_FROM => {
            file_in_parallel(input, limits, schemas, workers)
        }
        _ => {
            let mut findings = Vec::new();
            for result in crate::x12::Interchanges::new(input, limits) {
                match result {
                    Ok(ic) => {
                        findings.extend(interchange(&ic));
                        if let Some(schemas) = schemas {
                            findings.extend(crate::schema::findings(&ic, schemas));
                        }
                    }
                    Err(e) => findings.push(read_error(&e)),
                }
            }
            findings
        }
    }
}

/// Files from this size have their sets checked against definitions on every core.
const PARALLEL_FROM: usize = 1 << 20;

/// [`file_with`] for a large file: this thread reads interchanges and checks envelopes (the
/// cheap part) while `workers` threads walk their sets against the definitions; at most two
/// interchanges per worker wait in between, so memory stays bounded. Findings come out in the
/// same order as from one thread.
fn file_in_parallel(
    input: &[u8],
    limits: crate::x12::Limits,
    schemas: &crate::schema::Schemas,
    workers: usize,
) -> Vec<Finding> {
    use std::sync::{mpsc, Mutex};
    let mut envelope: Vec<Vec<Finding>> = Vec::new();
    let mut schema: Vec<Vec<Finding>> = Vec::new();
    let (jobs, queue) = mpsc::sync_channel::<(usize, Interchange<'_>)>(workers * 2);
    let queue = Mutex::new(queue);
    let (done, results) = mpsc::channel::<(usize, Vec<Finding>)>();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let (queue, done) = (&queue, done.clone());
            scope.spawn(move || loop {
                // A poisoned lock or a closed queue both mean there is nothing left to do.
                let job = match queue.lock() {
                    Ok(q) => q.recv(),
                    Err(_) => return,
                };
                let Ok((i, ic)) = job else { return };
                if done
                    .send((i, crate::schema::findings(&ic, schemas)))
                    .is_err()
                {
                    return;
                }
            });
        }
        drop(done);
        for (i, result) in crate::x12::Interchanges::new(input, limits).enumerate() {
            match result {
                Ok(ic) => {
                    envelope.push(interchange(&ic));
                    if jobs.send((i, ic)).is_err() {
                        break;
                    }
                }
                Err(e) => envelope.push(vec![read_error(&e)]),
            }
        }
        drop(jobs);
        schema.resize_with(envelope.len(), Vec::new);
        for (i, found) in results {
            if let Some(slot) = schema.get_mut(i) {
                *slot = found;
            }
        }
    });
    envelope
        .into_iter()
        .zip(schema)
        .flat_map(|(e, s)| e.into_iter().chain(s))
        .collect()
}

/// Findings about who sent an interchange and to whom, which need the configuration: a
/// receiver other than us, or a sender no `[[partner]]` declares (when unknown partners are
/// refused).
pub fn routing(
    ic: &Interchange<'_>,
    our_qualifier: &str,
    our_id: &str,
    sender_known: bool,
) -> Vec<Finding> {
    let mut v = Validator {
        findings: Vec::new(),
    };
    let isa = &ic.isa;
    let finding = |v: &mut Validator, n: usize, rule: Rule, code: &'static str, message: String| {
        let p = isa_position(isa, n);
        v.findings.push(Finding {
            rule,
            level: Level::Interchange,
            code: Some(Code {
                list: CodeList::Ta105,
                value: code,
            }),
            position: p,
            segment_id: "ISA".into(),
            group: None,
            set: None,
            message,
            detail: None,
        });
    };
    if isa.trimmed(8) != our_id {
        finding(&mut v, 8, Rule::ReceiverNotOurs, "009", format!(
            "ISA08 \"{}\" is not our id \"{our_id}\": this interchange is addressed to someone else", isa.trimmed(8)));
    } else if isa.trimmed(7) != our_qualifier {
        finding(
            &mut v,
            7,
            Rule::ReceiverQualifierNotOurs,
            "007",
            format!(
                "ISA07 \"{}\" is not our qualifier \"{our_qualifier}\"",
                isa.trimmed(7)
            ),
        );
    }
    if !sender_known {
        finding(
            &mut v,
            6,
            Rule::UnknownSender,
            "006",
            format!(
                "sender {}:{} is not a configured partner (unknown_partners = \"reject\")",
                isa.trimmed(5),
                isa.trimmed(6)
            ),
        );
    }
    v.findings
}

/// The finding for a group whose GS06 (with its GS02) an earlier interchange of the same
/// sender already used within the partner's window.
pub fn group_seen_before(ic: &Interchange<'_>, gi: usize) -> Option<Finding> {
    let gs = &ic.groups.get(gi)?.gs;
    let code = duplicate_group_code(gs);
    let message = format!(
        "GS06 \"{}\" from application sender \"{}\" was already used by an earlier interchange",
        shown(gs.element(6).unwrap_or_default()),
        shown(gs.element(2).unwrap_or_default())
    );
    let f = finding(
        Rule::GsSeenBefore,
        Level::Group,
        Code {
            list: CodeList::Ak905,
            value: code,
        },
        gs,
        6,
        message,
    );
    Some(Finding {
        group: Some(gi),
        ..f
    })
}

/// AK905 for a GS06 that is not unique: 004010's list has no such code and 6 is what other
/// translators send; from 004050 on the list has 19.
fn duplicate_group_code(gs: &Segment<'_>) -> &'static str {
    if release(gs.element(8).unwrap_or_default()).is_some_and(|r| r >= 4050) {
        "19"
    } else {
        "6"
    }
}

/// Every envelope finding of one interchange, in file order within each level.
pub fn interchange(ic: &Interchange<'_>) -> Vec<Finding> {
    let mut v = Validator {
        findings: Vec::new(),
    };
    v.isa(ic);
    v.structure(ic);
    let mut seen_gs06 = HashSet::new();
    for (gi, group) in ic.groups.iter().enumerate() {
        v.group(gi, group, &mut seen_gs06);
    }
    v.findings
}

struct Validator {
    findings: Vec<Finding>,
}

fn at(segment: &Segment<'_>, element: usize) -> Position {
    let mut p = segment.position();
    if element > 0 {
        p.byte = segment.element_offset(element);
        p.element = u16::try_from(element).ok();
    }
    p
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

fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).escape_debug().collect()
}

/// A count or control number element as a number; `None` unless it is all digits and fits.
pub(crate) fn number(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes)
        .ok()?
        .parse()
        .ok()
        .filter(|_| all_digits(bytes))
}

fn all_digits(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(u8::is_ascii_digit)
}

/// The numeric release of a GS08 or ISA12 (`004010` or `005010X222A1` -> 4010, `00401` -> 401).
fn release(version: &[u8]) -> Option<u32> {
    let digits: Vec<u8> = version
        .iter()
        .take(6)
        .copied()
        .take_while(u8::is_ascii_digit)
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

/// One ISA field's rule: its width, the note code for it, and what values it admits.
struct IsaField {
    width: usize,
    code: &'static str,
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
fn isa_time(v: &[u8]) -> bool {
    all_digits(v) && NaiveTime::parse_from_str(std::str::from_utf8(v).unwrap_or(""), "%H%M").is_ok()
}

/// ISA01..ISA16 (index 0 is ISA01). ISA11 and ISA12 get extra version-dependent checks.
const ISA_FIELDS: [IsaField; 16] = [
    IsaField {
        width: 2,
        code: "010",
        valid: |v| matches!(v, b"00" | b"01" | b"02" | b"03" | b"04" | b"05" | b"06"),
        expected: "an authorization qualifier 00-06",
    },
    IsaField {
        width: 10,
        code: "011",
        valid: any,
        expected: "10 characters",
    },
    IsaField {
        width: 2,
        code: "012",
        valid: |v| matches!(v, b"00" | b"01"),
        expected: "00 or 01",
    },
    IsaField {
        width: 10,
        code: "013",
        valid: any,
        expected: "10 characters",
    },
    IsaField {
        width: 2,
        code: "005",
        valid: id_qualifier,
        expected: "an interchange id qualifier (I05)",
    },
    IsaField {
        width: 15,
        code: "006",
        valid: not_blank,
        expected: "a sender id, space padded to 15",
    },
    IsaField {
        width: 2,
        code: "007",
        valid: id_qualifier,
        expected: "an interchange id qualifier (I05)",
    },
    IsaField {
        width: 15,
        code: "008",
        valid: not_blank,
        expected: "a receiver id, space padded to 15",
    },
    IsaField {
        width: 6,
        code: "014",
        valid: isa_date,
        expected: "a valid date YYMMDD",
    },
    IsaField {
        width: 4,
        code: "015",
        valid: isa_time,
        expected: "a valid time HHMM",
    },
    IsaField {
        width: 1,
        code: "016",
        valid: any,
        expected: "one character",
    },
    IsaField {
        width: 5,
        code: "017",
        valid: |v| all_digits(v) && release(v).is_some_and(|r| (200..=899).contains(&r)),
        expected: "a version such as 00401 or 00501",
    },
    IsaField {
        width: 9,
        code: "018",
        valid: all_digits,
        expected: "nine digits",
    },
    IsaField {
        width: 1,
        code: "019",
        valid: |v| matches!(v, b"0" | b"1"),
        expected: "0 or 1",
    },
    IsaField {
        width: 1,
        code: "020",
        valid: |v| matches!(v, b"P" | b"T" | b"I"),
        expected: "P, T or I",
    },
    IsaField {
        width: 1,
        code: "027",
        valid: |v| {
            v.first()
                .is_some_and(|b| !b.is_ascii_alphanumeric() && *b != b' ')
        },
        expected: "a delimiter: not a letter, digit or space",
    },
];

/// Where a set finding belongs: its group and set indexes, and the ST's ordinal for AK302.
#[derive(Clone, Copy)]
struct SetAt {
    group: usize,
    set: usize,
    st_ordinal: u32,
}

/// A finding at element `element` (0 for the whole segment) of `segment`.
fn finding(
    rule: Rule,
    level: Level,
    code: Code,
    segment: &Segment<'_>,
    element: usize,
    message: String,
) -> Finding {
    Finding {
        rule,
        level,
        code: Some(code),
        position: at(segment, element),
        segment_id: segment.id_str(),
        group: None,
        set: None,
        message,
        detail: None,
    }
}

impl Validator {
    fn interchange_finding(
        &mut self,
        rule: Rule,
        code: &'static str,
        segment: &Segment<'_>,
        element: usize,
        message: String,
    ) {
        let code = Code {
            list: CodeList::Ta105,
            value: code,
        };
        self.findings.push(finding(
            rule,
            Level::Interchange,
            code,
            segment,
            element,
            message,
        ));
    }

    fn group_finding(
        &mut self,
        gi: usize,
        rule: Rule,
        code: &'static str,
        segment: &Segment<'_>,
        element: usize,
        message: String,
    ) {
        let code = Code {
            list: CodeList::Ak905,
            value: code,
        };
        let f = finding(rule, Level::Group, code, segment, element, message);
        self.findings.push(Finding {
            group: Some(gi),
            ..f
        });
    }

    fn set_finding(
        &mut self,
        at: SetAt,
        rule: Rule,
        code: &'static str,
        segment: &Segment<'_>,
        element: usize,
        message: String,
    ) {
        let code = Code {
            list: CodeList::Ak502,
            value: code,
        };
        let mut f = finding(rule, Level::Set, code, segment, element, message);
        f.position.set_segment = segment.ordinal.checked_sub(at.st_ordinal).map(|d| d + 1);
        self.findings.push(Finding {
            group: Some(at.group),
            set: Some(at.set),
            ..f
        });
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
                        "ISA{n:02} is {} characters, must be exactly {} (the ISA is fixed width)",
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
            self.findings.push(Finding {
                rule: rule_hit,
                level: Level::Interchange,
                code: Some(Code {
                    list: CodeList::Ta105,
                    value: rule.code,
                }),
                position: p,
                segment_id: "ISA".into(),
                group: None,
                set: None,
                message,
                detail: None,
            });
        }
        let d = isa.delimiters;
        let isa11 = isa.field(11);
        let component_clash =
            d.component == d.element || version.is_some_and(|v| v >= 402) && isa11 == [d.component];
        if component_clash {
            self.interchange_finding(
                Rule::DelimitersNotDistinct,
                "027",
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
            self.interchange_finding(
                Rule::DelimitersNotDistinct,
                "016",
                &isa.segment,
                11,
                format!(
                    "ISA11 repetition separator \"{}\" equals another delimiter",
                    shown(isa11)
                ),
            );
        }
    }

    fn structure(&mut self, ic: &Interchange<'_>) {
        for segment in &ic.stray {
            self.interchange_finding(
                Rule::SegmentOutsideEnvelope,
                "024",
                segment,
                0,
                format!(
                    "{} segment outside any envelope (not between GS and GE, or ST and SE)",
                    segment.id_str()
                ),
            );
        }
        for breach in &ic.breaches {
            let what = match breach.kind {
                LimitKind::SegmentsPerSet => "segments in one transaction set",
                LimitKind::ElementLength => "bytes in one element",
            };
            self.findings.push(Finding {
                rule: Rule::LimitExceeded,
                level: Level::Interchange,
                code: Some(Code {
                    list: CodeList::Ta105,
                    value: "024",
                }),
                position: breach.position,
                segment_id: String::new(),
                group: None,
                set: None,
                message: format!(
                    "limit exceeded: more than {} {what} ({} found)",
                    breach.limit, breach.actual
                ),
                detail: None,
            });
        }
        let Some(iea) = &ic.iea else {
            let last = match ic.end {
                InterchangeEnd::NextIsa => "another ISA began",
                _ => "the file ended",
            };
            let p = Position {
                byte: ic.span.end,
                segment: ic.segment_count.saturating_add(1),
                ..Position::default()
            };
            self.findings.push(Finding {
                rule: Rule::IeaMissing,
                level: Level::Interchange,
                code: Some(Code {
                    list: CodeList::Ta105,
                    value: "023",
                }),
                position: p,
                segment_id: "IEA".into(),
                group: None,
                set: None,
                message: format!("IEA missing: {last} before the interchange was closed"),
                detail: None,
            });
            return;
        };
        let declared = iea.element(1).unwrap_or_default();
        let groups = ic.groups.len();
        if number(declared) != Some(groups as u64) {
            self.interchange_finding(
                Rule::IeaGroupCount,
                "021",
                iea,
                1,
                format!(
                    "IEA01 \"{}\" does not match the {groups} functional group(s) received",
                    shown(declared)
                ),
            );
        }
        let iea02 = iea.element(2).unwrap_or_default();
        if iea02 != ic.isa.field(13) {
            self.interchange_finding(
                Rule::IeaControlNumber,
                "001",
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

    fn group<'a>(&mut self, gi: usize, group: &Group<'a>, seen_gs06: &mut HashSet<&'a [u8]>) {
        let gs = &group.gs;
        let gs06 = gs.element(6).unwrap_or_default();
        if !(all_digits(gs06) && gs06.len() <= 9) {
            self.group_finding(
                gi,
                Rule::GsControlNumberSyntax,
                "6",
                gs,
                6,
                format!("GS06 \"{}\" must be 1 to 9 digits", shown(gs06)),
            );
        } else if !seen_gs06.insert(gs06) {
            let code = duplicate_group_code(gs);
            self.group_finding(
                gi,
                Rule::GsDuplicateControlNumber,
                code,
                gs,
                6,
                format!(
                    "GS06 \"{}\" is used by an earlier group of this interchange",
                    shown(gs06)
                ),
            );
        }
        if gs.element(8).is_none_or(<[u8]>::is_empty) {
            self.group_finding(
                gi,
                Rule::GsVersionMissing,
                "2",
                gs,
                8,
                "GS08 (version) is missing".into(),
            );
        }
        // Control numbers are borrowed from the input and the set is sized once: a group of
        // thousands of sets then costs no allocation per set.
        let mut seen_st02 = HashSet::with_capacity(group.sets.len());
        for (si, set) in group.sets.iter().enumerate() {
            self.set(gi, si, set, &mut seen_st02);
        }
        let Some(ge) = &group.ge else {
            self.group_finding(
                gi,
                Rule::GeMissing,
                "3",
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
        let sets = group.sets.len();
        if number(ge01) != Some(sets as u64) {
            self.group_finding(
                gi,
                Rule::GeSetCount,
                "5",
                ge,
                1,
                format!(
                    "GE01 \"{}\" does not match the {sets} transaction set(s) received",
                    shown(ge01)
                ),
            );
        }
        let ge02 = ge.element(2).unwrap_or_default();
        if ge02 != gs06 {
            self.group_finding(
                gi,
                Rule::GeControlNumber,
                "4",
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
        seen_st02: &mut HashSet<&'a [u8]>,
    ) {
        let st = &set.st;
        let at = SetAt {
            group: gi,
            set: si,
            st_ordinal: st.ordinal,
        };
        let st01 = st.element(1).unwrap_or_default();
        if !(st01.len() == 3 && st01.iter().all(u8::is_ascii_alphanumeric)) {
            self.set_finding(
                at,
                Rule::StIdInvalid,
                "6",
                st,
                1,
                format!(
                    "ST01 \"{}\" is not a transaction set identifier (3 characters)",
                    shown(st01)
                ),
            );
        }
        let st02 = st.element(2).unwrap_or_default();
        if !(4..=9).contains(&st02.len()) {
            self.set_finding(
                at,
                Rule::StControlNumberInvalid,
                "7",
                st,
                2,
                format!("ST02 \"{}\" must be 4 to 9 characters", shown(st02)),
            );
        } else if !seen_st02.insert(st02) {
            self.set_finding(
                at,
                Rule::StDuplicateControlNumber,
                "23",
                st,
                2,
                format!(
                    "ST02 \"{}\" is used by an earlier transaction set of this group",
                    shown(st02)
                ),
            );
        }
        if let Some(bad) = &set.bad_id {
            self.set_finding(
                at,
                Rule::SegmentIdInvalid,
                "5",
                bad,
                0,
                format!("segment id \"{}\" is not 2 or 3 capital letters or digits (AK304 1: unrecognized segment id)", shown(bad.id)),
            );
        }
        let Some(se) = &set.se else {
            self.set_finding(
                at,
                Rule::SeMissing,
                "2",
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
                "4",
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
                "3",
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
