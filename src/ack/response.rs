//! Deciding the answer to one interchange: its disposition, its TA1, and the content of one
//! 997/999 transaction set per functional group.

use crate::config::{AckKind, Partner, Ta1Policy};
use crate::finding::{Ak304, Ak403, Ak502, Ak905, Code, Finding, Level, Ta105};
use crate::x12::{Group, Interchange, TransactionSet};

use super::policy;

pub use crate::disposition::Disposition;

/// An acknowledgment code: TA104, AK501/IK501 and AK901 share these letters (P only in AK901).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Status {
    Accepted,
    AcceptedWithErrors,
    Partial,
    Rejected,
}

impl Status {
    pub fn code(self) -> &'static str {
        match self {
            Status::Accepted => "A",
            Status::AcceptedWithErrors => "E",
            Status::Partial => "P",
            Status::Rejected => "R",
        }
    }

    pub fn is_accepted(self) -> bool {
        matches!(self, Status::Accepted | Status::AcceptedWithErrors)
    }
}

/// The TA1 to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ta1 {
    /// TA101..TA103: ISA13, ISA09, ISA10 as received.
    pub control_number: String,
    pub date: String,
    pub time: String,
    pub status: Status,
    /// TA105.
    pub note: Ta105,
}

/// One bounded context (999 CTX): which business unit or trigger segment an error sits in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Context {
    /// CTX01-1: "SITUATIONAL TRIGGER", or a business unit name such as "CLM01".
    pub name: String,
    /// CTX01-2: the business unit's value.
    pub reference: Option<String>,
    /// CTX02..CTX05: the segment id, its position in the set, its loop, the element position.
    pub segment: Option<String>,
    pub position: Option<u32>,
    pub loop_id: Option<String>,
    pub element: Option<u16>,
}

/// An element error (AK4 / IK4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementError {
    /// AK401-1, -2, -3: element, component and repetition positions.
    pub position: u16,
    pub component: Option<u16>,
    pub repetition: Option<u16>,
    /// AK402: data element reference number.
    pub reference: Option<u32>,
    /// AK403 (723) / IK403 (621).
    pub code: Ak403,
    /// AK404: a copy of the bad element (never sent for invalid-character errors).
    pub bad_value: Option<String>,
}

/// A segment error (AK3 / IK3) and its element errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentError {
    pub id: String,
    /// AK302: position in the set, ST = 1.
    pub position: u32,
    /// AK303: loop identifier, for bounded loops.
    pub loop_id: Option<String>,
    /// AK304 (720) / IK304 (620).
    pub code: Ak304,
    pub contexts: Vec<Context>,
    pub elements: Vec<ElementError>,
}

/// The answer for one transaction set (AK2..AK5 / AK2..IK5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetResponse {
    /// The set's place in its group (0-based).
    pub index: usize,
    pub id: String,
    pub control_number: String,
    /// ST03, the implementation convention reference, when the set carried one.
    pub convention: Option<String>,
    pub status: Status,
    /// AK502..AK506, at most five.
    pub codes: Vec<Ak502>,
    pub segment_errors: Vec<SegmentError>,
}

/// The answer for one functional group: one 997 or 999 transaction set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupResponse {
    /// GS01, GS06 and GS08 of the group answered (AK101..AK103).
    pub functional_id: String,
    pub control_number: String,
    pub version: String,
    /// GS02 and GS03 of the group answered; our group swaps them.
    pub application_sender: String,
    pub application_receiver: String,
    pub status: Status,
    /// AK902: sets the GE declared (the count received when it cannot be read).
    pub declared: u32,
    /// AK903, AK904.
    pub received: u32,
    pub accepted: u32,
    /// AK905..AK909, at most five.
    pub codes: Vec<Ak905>,
    /// The group's place in the interchange (0-based).
    pub index: usize,
    /// The AK2 loops of the sets not plainly accepted, in set order.
    pub sets: Vec<SetResponse>,
    /// Whether plainly accepted sets get an AK2 loop too (the partner wants them). Theirs
    /// is written from the interchange itself ([`SetResponse::accepted`]), so that a group
    /// of a million accepted sets holds no answer per set.
    pub lists_accepted: bool,
}

/// Why an interchange was not plainly accepted: the code an operator and the TA1 see.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reason {
    /// The TA1 note code, when the reason is at interchange level.
    pub code: Option<Ta105>,
    pub text: String,
}

/// Everything decided about one interchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterchangeResponse {
    pub disposition: Disposition,
    pub reason: Option<Reason>,
    /// The TA1 to send, already filtered by the partner's `ta1` policy.
    pub ta1: Option<Ta1>,
    /// 997 or 999 (per `kind`); empty when there is nothing to acknowledge.
    pub groups: Vec<GroupResponse>,
    pub kind: AckKind,
    /// For every group and set received (FA groups included, decided like any), whether it
    /// was accepted: what the translation may pass on.
    pub accepted_sets: Vec<Vec<bool>>,
}

/// X12 allows five codes in AK502..AK506 and AK905..AK909.
const MAX_CODES: usize = 5;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Decides the answer to `ic`, given all its findings (see `check::interchange`).
pub fn respond(
    ic: &Interchange<'_>,
    findings: &[Finding],
    partner: &Partner,
) -> InterchangeResponse {
    let (ta1_status, ta1, reason) = interchange_answer(ic, findings, partner);
    if ta1_status == Status::Rejected {
        return InterchangeResponse {
            disposition: Disposition::Rejected,
            reason,
            ta1,
            groups: Vec::new(),
            kind: partner.ack.kind,
            accepted_sets: ic
                .groups
                .iter()
                .map(|g| vec![false; g.sets.len()])
                .collect(),
        };
    }
    let buckets = Buckets::of(findings);
    let mut tally = Tally::default();
    let mut groups = Vec::new();
    let mut accepted_sets = Vec::with_capacity(ic.groups.len());
    for (gi, group) in ic.groups.iter().enumerate() {
        let (response, sets) = answer_group(gi, group, &buckets, partner, &mut tally);
        // Acknowledgments (GS01 FA) are checked and decided like any group, but never
        // acknowledged back: a broken 997 is rejected and not passed on as accepted.
        if group.gs.element(1) != Some(b"FA") {
            groups.push(response);
        }
        accepted_sets.push(sets);
    }
    let Tally {
        accepted,
        rejected,
        first_set_problem,
    } = tally;
    let disposition = match (accepted, rejected) {
        (_, 0) => Disposition::Accepted,
        (0, _) => Disposition::Rejected,
        _ => Disposition::Partial,
    };
    let reason = reason.or_else(|| first_set_problem.map(|text| Reason { code: None, text }));
    if partner.ack.kind == AckKind::None {
        groups.clear();
    }
    InterchangeResponse {
        disposition,
        reason,
        ta1,
        groups,
        kind: partner.ack.kind,
        accepted_sets,
    }
}

/// The interchange's own answer: the TA1 status, the TA1 to send (by the partner's `ta1`
/// policy) and the reason, from the decisive interchange finding: the first that rejects,
/// else the first that notes.
fn interchange_answer(
    ic: &Interchange<'_>,
    findings: &[Finding],
    partner: &Partner,
) -> (Status, Option<Ta1>, Option<Reason>) {
    let interchange_findings = || {
        findings
            .iter()
            .filter(|f| matches!(f.level, Level::Interchange | Level::File))
            .filter_map(|f| match f.code {
                Some(Code::Ta105(c)) => Some((f, c, policy::ta104(c))),
                _ => None,
            })
    };
    let decisive = interchange_findings()
        .find(|(.., s)| *s == Status::Rejected)
        .or_else(|| interchange_findings().next());
    let ta1_status = decisive.map_or(Status::Accepted, |(.., s)| s);
    let note = decisive.map_or(Ta105::NoError, |(_, code, _)| code);

    // An interchange of acknowledgments only (TA1s, FA groups) is read, never answered.
    // (An interchange with nothing in it, or cut off before its first GS, is answered.)
    let only_acks = (!ic.groups.is_empty() || !ic.ta1.is_empty())
        && ic.groups.iter().all(|g| g.gs.element(1) == Some(b"FA"));
    let send_ta1 = !only_acks
        && match partner.ack.ta1 {
            Ta1Policy::Always => true,
            Ta1Policy::OnError => ta1_status != Status::Accepted,
            Ta1Policy::Requested => ic.isa.field(14) == b"1",
            Ta1Policy::Never => false,
        };
    let ta1 = send_ta1.then(|| Ta1 {
        control_number: text(ic.isa.field(13)),
        date: text(ic.isa.field(9)),
        time: text(ic.isa.field(10)),
        status: ta1_status,
        note,
    });
    let reason = decisive.map(|(f, code, _)| Reason {
        code: Some(code),
        text: f.message.clone(),
    });
    (ta1_status, ta1, reason)
}

/// Findings bucketed once by group and by set, in their order: looking them up per set
/// made answering n sets O(n x findings), minutes for a file of many broken sets.
struct Buckets<'f> {
    by_group: std::collections::HashMap<usize, Vec<&'f Finding>>,
    by_set: std::collections::HashMap<(usize, usize), Vec<&'f Finding>>,
}

impl<'f> Buckets<'f> {
    fn of(findings: &'f [Finding]) -> Buckets<'f> {
        let mut b = Buckets {
            by_group: Default::default(),
            by_set: Default::default(),
        };
        for f in findings {
            match (f.level, f.group, f.set) {
                (Level::Group, Some(g), _) => b.by_group.entry(g).or_default().push(f),
                (Level::Set, Some(g), Some(s)) => b.by_set.entry((g, s)).or_default().push(f),
                _ => {}
            }
        }
        b
    }

    fn group(&self, gi: usize) -> &[&'f Finding] {
        self.by_group.get(&gi).map_or(&[], Vec::as_slice)
    }

    fn set(&self, gi: usize, si: usize) -> &[&'f Finding] {
        self.by_set.get(&(gi, si)).map_or(&[], Vec::as_slice)
    }
}

/// Sets accepted and rejected across the interchange's groups, and the first problem met
/// (the reason when no interchange finding gives one).
#[derive(Default)]
struct Tally {
    accepted: u32,
    rejected: u32,
    first_set_problem: Option<String>,
}

/// One group's 997/999 and, for each of its sets, whether it was accepted.
fn answer_group(
    gi: usize,
    group: &Group<'_>,
    buckets: &Buckets<'_>,
    partner: &Partner,
    tally: &mut Tally,
) -> (GroupResponse, Vec<bool>) {
    let group_codes: Vec<Ak905> = buckets
        .group(gi)
        .iter()
        .filter_map(|f| match f.code {
            Some(Code::Ak905(c)) => Some(c),
            _ => None,
        })
        .collect();
    let group_rejected = group_codes.iter().any(|c| policy::group_rejects(*c));
    let mut sets = Vec::new();
    let mut group_sets = Vec::with_capacity(group.sets.len());
    let mut group_accepted = 0u32;
    let mut any_noted = !group_codes.is_empty();
    for (si, set) in group.sets.iter().enumerate() {
        let set_findings = buckets.set(gi, si);
        let (status, response) = answer_set(si, &set, set_findings, group_rejected, partner);
        group_sets.push(status.is_accepted());
        if status.is_accepted() {
            group_accepted += 1;
            tally.accepted += 1;
        } else {
            tally.rejected += 1;
            if tally.first_set_problem.is_none() {
                tally.first_set_problem = set_findings.first().map(|f| f.message.clone());
            }
        }
        any_noted |= status == Status::AcceptedWithErrors;
        sets.extend(response);
    }
    let received = u32::try_from(group.sets.len()).unwrap_or(u32::MAX);
    let status = if group_rejected || (received > 0 && group_accepted == 0) {
        Status::Rejected
    } else if group_accepted < received {
        Status::Partial
    } else if any_noted {
        Status::AcceptedWithErrors
    } else {
        Status::Accepted
    };
    if group_rejected && tally.first_set_problem.is_none() {
        // The reason is what rejected the group, never a warning noted beside it.
        tally.first_set_problem = buckets
            .group(gi)
            .iter()
            .find(|f| !f.is_warning())
            .map(|f| f.message.clone());
    }
    let declared = group
        .ge
        .as_ref()
        .and_then(|ge| crate::x12::number(ge.element(1).unwrap_or_default()))
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(received);
    let mut codes = group_codes;
    codes.dedup();
    codes.truncate(MAX_CODES);
    let response = GroupResponse {
        functional_id: text(group.gs.element(1).unwrap_or_default()),
        control_number: text(group.gs.element(6).unwrap_or_default()),
        version: text(group.gs.element(8).unwrap_or_default()),
        application_sender: text(group.gs.element(2).unwrap_or_default()),
        application_receiver: text(group.gs.element(3).unwrap_or_default()),
        status,
        declared,
        received,
        accepted: if group_rejected { 0 } else { group_accepted },
        codes,
        index: gi,
        sets,
        lists_accepted: partner.ack.accepted_sets,
    };
    (response, group_sets)
}

/// One set's status, and its AK2 loop unless it is plainly accepted (those are written from
/// the interchange when the partner wants them: [`GroupResponse::lists_accepted`]).
fn answer_set(
    index: usize,
    set: &TransactionSet<'_>,
    set_findings: &[&Finding],
    group_rejected: bool,
    partner: &Partner,
) -> (Status, Option<SetResponse>) {
    let mut codes: Vec<Ak502> = set_findings
        .iter()
        .filter_map(|f| match f.code {
            Some(Code::Ak502(c)) => Some(c),
            _ => None,
        })
        .collect();
    codes.dedup();
    // Envelope errors in a set (counts, control numbers, trailer, segment ids) all reject
    // it; schema errors reject it or only note it, by their severity.
    let envelope_rejects = !codes.is_empty();
    let segment_errors = segment_errors(set_findings, partner.ack.kind);
    let schema_rejects = set_findings
        .iter()
        .filter(|f| f.detail.is_some())
        .any(|f| policy::schema_finding_rejects(f));
    if !segment_errors.is_empty() && !codes.contains(&Ak502::SegmentsInError) {
        codes.push(Ak502::SegmentsInError);
    }
    let status = if group_rejected || envelope_rejects || schema_rejects {
        Status::Rejected
    } else if !segment_errors.is_empty() {
        Status::AcceptedWithErrors
    } else {
        Status::Accepted
    };
    codes.truncate(MAX_CODES);
    let response = (status != Status::Accepted).then(|| SetResponse {
        status,
        codes,
        segment_errors,
        ..SetResponse::accepted(index, set)
    });
    (status, response)
}

impl SetResponse {
    /// The answer of a set plainly accepted: its AK2 from its ST, and AK5 A.
    pub fn accepted(index: usize, set: &TransactionSet<'_>) -> SetResponse {
        SetResponse {
            index,
            id: text(set.st.element(1).unwrap_or_default()),
            control_number: text(set.st.element(2).unwrap_or_default()),
            convention: set.st.element(3).filter(|v| !v.is_empty()).map(text),
            status: Status::Accepted,
            codes: Vec::new(),
            segment_errors: Vec::new(),
        }
    }
}

/// The AK3/AK4 (IK3/CTX/IK4) content of one set's schema findings, in the order found: a
/// segment error carries its own code, element errors gather under their segment's code 8.
fn segment_errors(findings: &[&Finding], kind: AckKind) -> Vec<SegmentError> {
    let mut out: Vec<SegmentError> = Vec::new();
    for f in findings {
        let (Some(code), Some(detail)) = (f.code, f.detail.as_deref()) else {
            continue;
        };
        let position = f.position.set_segment.unwrap_or(0);
        let contexts = match (&detail.context, kind) {
            (Some((name, value)), AckKind::ImplementationAck) => vec![Context {
                name: name.clone(),
                reference: Some(value.clone()),
                ..Context::default()
            }],
            _ => Vec::new(),
        };
        let segment = |code| SegmentError {
            id: f.segment_id.clone(),
            position,
            // AK303 names bounded (LS/LE) loops only, by their LS01; a 999 for a set read
            // against an implementation guide names the guide's loop in IK303, cut by the
            // writer to the four characters 447 holds in 005010 (`2010AA` -> `2010`).
            loop_id: detail.bounded_loop.clone().or_else(|| {
                (detail.guide && kind == AckKind::ImplementationAck)
                    .then(|| detail.loop_id.clone())
                    .flatten()
            }),
            code,
            contexts: contexts.clone(),
            elements: Vec::new(),
        };
        match code {
            Code::Ak304(code) => out.push(segment(code)),
            Code::Ak403(code) => {
                let element = ElementError {
                    position: f.position.element.unwrap_or(0),
                    component: f.position.component,
                    repetition: detail.repetition,
                    reference: detail.reference,
                    code,
                    bad_value: detail.bad_value.clone(),
                };
                match out.last_mut() {
                    Some(last)
                        if last.code == Ak304::ElementErrors && last.position == position =>
                    {
                        last.elements.push(element);
                    }
                    _ => {
                        let mut s = segment(Ak304::ElementErrors);
                        s.elements.push(element);
                        out.push(s);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The answer to a control number reused for different content: TA1 `R` `025` (unless the
/// partner never gets TA1s), nothing else, and the earlier interchange left as it was.
pub fn conflict(
    ic: &Interchange<'_>,
    partner: &Partner,
    earlier_fingerprint: &str,
) -> InterchangeResponse {
    let ta1 = (partner.ack.ta1 != Ta1Policy::Never).then(|| Ta1 {
        control_number: text(ic.isa.field(13)),
        date: text(ic.isa.field(9)),
        time: text(ic.isa.field(10)),
        status: Status::Rejected,
        note: Ta105::DuplicateControlNumber,
    });
    let short: String = earlier_fingerprint.chars().take(12).collect();
    InterchangeResponse {
        disposition: Disposition::Conflict,
        reason: Some(Reason {
            code: Some(Ta105::DuplicateControlNumber),
            text: format!(
                "control number {} was already used by this sender for different content (fingerprint {short}); nothing processed",
                ic.isa.control_number()
            ),
        }),
        ta1,
        groups: Vec::new(),
        kind: partner.ack.kind,
        accepted_sets: ic.groups.iter().map(|g| vec![false; g.sets.len()]).collect(),
    }
}
