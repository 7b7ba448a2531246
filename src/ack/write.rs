//! Writing acknowledgments as X12: the outbound envelope, the TA1, the 997 and the 999.
//!
//! An acknowledgment interchange is built in memory, to be written atomically by the caller
//! and replayed byte for byte later; the 997/999 of a large interchange (a loop a set) can
//! instead be written out as it is made ([`Plan::write_group_acks`]), as often as needed:
//! the same response, numbers and time give the same bytes.

use std::borrow::Cow;

use chrono::NaiveDateTime;

use crate::config::{AckKind, Gateway, Partner};
use crate::finding::{release, Ak403, Release};
use crate::text::bounded;
use crate::x12::{Delimiters, Interchange, SegmentWriter, Sets, MAX_CONTROL_NUMBER};

use super::{GroupResponse, InterchangeResponse, SegmentError, SetResponse, Ta1};

/// What an outbound interchange carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum OutboundKind {
    #[serde(rename = "TA1")]
    Ta1,
    #[serde(rename = "997")]
    FunctionalAck,
    #[serde(rename = "999")]
    ImplementationAck,
}

impl OutboundKind {
    pub fn extension(self) -> &'static str {
        match self {
            OutboundKind::Ta1 => "ta1",
            OutboundKind::FunctionalAck => "997",
            OutboundKind::ImplementationAck => "999",
        }
    }
}

/// One outbound interchange, ready to be written to the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound {
    pub kind: OutboundKind,
    /// Our ISA13.
    pub control_number: u32,
    pub bytes: Vec<u8>,
}

/// Our GS02, GS03 and GS08: acknowledgments that share them share one FA group.
type FaGroupKey = (String, String, String);

/// The 999's implementation guide (GS08 and ST03).
const IMPLEMENTATION_ACK_GUIDE: &str = "005010X231A1";

/// The longest element our acknowledgments carry (AK404/IK404: 1 to 99).
const MAX_ELEMENT: usize = 99;

/// The envelope every outbound interchange to this partner shares.
#[derive(Clone)]
struct Envelope {
    sender: (String, String),
    receiver: (String, String),
    /// ISA12.
    version: String,
    usage: String,
    delimiters: Delimiters,
    line_ending: &'static [u8],
    now: NaiveDateTime,
}

/// Writes segments with the envelope's delimiters (through [`SegmentWriter`], which also
/// counts them for SE01), applying an acknowledgment's policies to what it copies.
struct Writer<'e, 's> {
    env: &'e Envelope,
    w: SegmentWriter<'static>,
    /// Where `out` goes once it holds [`SPILL`] bytes (none: it holds everything).
    sink: Option<&'s mut dyn std::io::Write>,
    failed: Option<std::io::Error>,
}

/// The bytes an acknowledgment written out as it is made holds at a time.
const SPILL: usize = 64 << 10;

impl<'e, 's> Writer<'e, 's> {
    fn new(env: &'e Envelope, sink: Option<&'s mut dyn std::io::Write>) -> Self {
        Writer {
            env,
            w: SegmentWriter::new(env.delimiters, env.line_ending),
            sink,
            failed: None,
        }
    }

    /// Hands what is made to the sink, if any; the first error stops every later write.
    fn spill(&mut self, at_least: usize) {
        if self.w.len() < at_least {
            return;
        }
        if let Some(sink) = self.sink.as_mut() {
            if self.failed.is_none() {
                if let Err(e) = sink.write_all(self.w.bytes()) {
                    self.failed = Some(e);
                }
            }
            self.w.clear();
        }
    }

    /// What is left to the sink: the bytes made (all of them without a sink).
    fn finish(mut self) -> std::io::Result<Vec<u8>> {
        self.spill(0);
        match self.failed {
            Some(e) => Err(e),
            None => Ok(self.w.into_bytes()),
        }
    }

    /// Writes one segment, dropping trailing empty elements as X12 requires. Values that hold
    /// one of our delimiters (possible only when the partner's differ) lose those bytes rather
    /// than break the acknowledgment.
    fn segment(&mut self, id: &str, elements: &[&str]) {
        let d = self.env.delimiters;
        let used = elements
            .iter()
            .rposition(|e| !e.is_empty())
            .map_or(0, |i| i + 1);
        self.w.start(id.as_bytes());
        for e in elements.iter().take(used) {
            self.w.element(b"");
            // Nothing copied from input grows an acknowledgment: no element of TA1, 997 or
            // 999 is longer than AK404's 99 bytes.
            self.w.value(
                bounded(e, MAX_ELEMENT)
                    .bytes()
                    .filter(|b| *b != d.element && *b != d.segment && Some(*b) != d.repetition),
            );
        }
        self.w.end();
        self.spill(SPILL);
    }

    /// A segment id as AK301/IK301 carries it: at most 3 characters (a longer one is
    /// reported as such, and its first bytes point at it).
    fn segment_id(id: &str) -> &str {
        bounded(id, 3)
    }

    /// A copied value (AK404, CTX01-2) without our component separator, which `segment`
    /// keeps (composites need it) and which would otherwise split the value.
    fn value(&self, v: &str) -> String {
        let c = char::from(self.env.delimiters.component);
        v.chars().filter(|x| *x != c).collect()
    }

    /// A composite (AK401, CTX01): components joined by the component separator, trailing empties dropped.
    fn composite(&self, parts: &[&str]) -> String {
        let used = parts
            .iter()
            .rposition(|e| !e.is_empty())
            .map_or(0, |i| i + 1);
        let sep = char::from(self.env.delimiters.component);
        parts
            .iter()
            .take(used)
            .copied()
            .collect::<Vec<_>>()
            .join(&sep.to_string())
    }

    fn isa(&mut self, control: u32) {
        let e = self.env;
        let pad = |s: &str, n: usize| format!("{s:<n$}");
        let repetition = if e.version.as_str() >= "00402" {
            e.delimiters
                .repetition
                .map_or("U".to_string(), |r| char::from(r).to_string())
        } else {
            "U".to_string()
        };
        let fields = [
            "00".to_string(),
            pad("", 10),
            "00".to_string(),
            pad("", 10),
            pad(&e.sender.0, 2),
            pad(&e.sender.1, 15),
            pad(&e.receiver.0, 2),
            pad(&e.receiver.1, 15),
            e.now.format("%y%m%d").to_string(),
            e.now.format("%H%M").to_string(),
            repetition,
            e.version.clone(),
            format!("{control:09}"),
            "0".to_string(),
            e.usage.clone(),
            char::from(e.delimiters.component).to_string(),
        ];
        // ISA11 and ISA16 are delimiters themselves, so this segment is written unfiltered.
        self.w.start(b"ISA");
        for f in &fields {
            self.w.element(f.as_bytes());
        }
        self.w.end();
    }

    fn iea(&mut self, groups: usize, control: u32) {
        self.segment("IEA", &[&groups.to_string(), &format!("{control:09}")]);
    }
}

/// Our ISA12: the partner's `ack_version`, else the partner's own ISA12 (a 999 too: a 4010
/// translator expects a 999 inside the 00401 envelope it speaks), unless it is one we rejected
/// (TA105 017): then 00401.
fn isa_version(partner: &Partner, inbound: &str) -> String {
    match partner.ack.version.as_deref() {
        Some("004010") => "00401".into(),
        Some(_) => "00501".into(),
        None if crate::x12::is_control_version(inbound.as_bytes()) => inbound.into(),
        None => "00401".into(),
    }
}

/// The 997's version (GS08): the partner's choice, else the release of the group answered.
fn functional_ack_version(partner: &Partner, group_version: &str) -> String {
    if let Some(v) = &partner.ack.version {
        return v.clone();
    }
    let release: String = group_version.chars().take(6).collect();
    if release.len() == 6 && release.bytes().all(|b| b.is_ascii_digit()) {
        release
    } else {
        "004010".into()
    }
}

/// The delimiters to answer with: the partner's choice, else the ones it sent; a repetition
/// separator is invented when it sent none, taken from bytes it did not use.
fn outbound_delimiters(partner: &Partner, ic: &Interchange<'_>) -> (Delimiters, &'static [u8]) {
    if let Some(d) = &partner.ack.delimiters {
        return (d.delimiters, d.line_ending.as_bytes());
    }
    let mut d = ic.delimiters();
    if !d.are_distinct() {
        // The sender's own delimiters clash: answering in them would make our answer unreadable.
        return (Delimiters::COMMON, ic.line_ending());
    }
    if d.repetition.is_none() {
        d.repetition = [b'^', b'{', b'}', b'|', b'!', b'`']
            .into_iter()
            .find(|c| ![d.element, d.component, d.segment].contains(c));
    }
    (d, ic.line_ending())
}

/// How many control numbers a response's acknowledgments carry: our ISA13s (one per TA1
/// and one for the 997/999 interchange) and GS06s (one per FA group).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NumbersNeeded {
    pub isa13: usize,
    pub gs06: usize,
}

/// The control numbers one response's acknowledgments carry, in the order they are used;
/// reserved by the caller (from the registry, or previewed) before anything is written, so
/// that writing again with the same numbers gives the same bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Numbers {
    pub isa13: Vec<u32>,
    pub gs06: Vec<u32>,
}

impl Numbers {
    /// The numbers that follow `last_isa13` and `last_gs06` (none: from 1), wrapping after
    /// 999999999 as the registry's counters do: a preview that takes nothing.
    pub fn following(
        needed: NumbersNeeded,
        last_isa13: Option<u32>,
        last_gs06: Option<u32>,
    ) -> Numbers {
        let run = |last: Option<u32>, n: usize| {
            let mut v = Vec::with_capacity(n);
            let mut at = last.unwrap_or(0);
            for _ in 0..n {
                at = if at >= MAX_CONTROL_NUMBER { 1 } else { at + 1 };
                v.push(at);
            }
            v
        };
        Numbers {
            isa13: run(last_isa13, needed.isa13),
            gs06: run(last_gs06, needed.gs06),
        }
    }
}

/// Fewer control numbers given than the acknowledgments need (see [`numbers_needed`]).
#[derive(Debug, thiserror::Error)]
#[error("the acknowledgments need more control numbers than were reserved ({0})")]
pub struct ShortOfNumbers(&'static str);

/// How many control numbers [`write_acknowledgments`] will use for `response`.
pub fn numbers_needed(response: &InterchangeResponse, partner: &Partner) -> NumbersNeeded {
    let groups = if response.groups.is_empty() {
        0
    } else {
        fa_groups(response, partner).len()
    };
    NumbersNeeded {
        isa13: usize::from(response.ta1.is_some()) + usize::from(groups > 0),
        gs06: groups,
    }
}

/// The acknowledgment kind of a response's 997/999 interchange.
fn group_ack_kind(response: &InterchangeResponse) -> OutboundKind {
    match response.kind {
        AckKind::ImplementationAck => OutboundKind::ImplementationAck,
        _ => OutboundKind::FunctionalAck,
    }
}

/// The groups answered, gathered into our FA groups: one per (application codes, version),
/// usually exactly one.
fn fa_groups<'r>(
    response: &'r InterchangeResponse,
    partner: &Partner,
) -> Vec<(FaGroupKey, Vec<&'r GroupResponse>)> {
    let mut batches: Vec<(FaGroupKey, Vec<&GroupResponse>)> = Vec::new();
    // Where each key's batch is: an interchange may hold a million groups, each its own key.
    let mut at: std::collections::HashMap<FaGroupKey, usize> = std::collections::HashMap::new();
    for g in &response.groups {
        let version = match group_ack_kind(response) {
            OutboundKind::ImplementationAck => IMPLEMENTATION_ACK_GUIDE.to_string(),
            _ => functional_ack_version(partner, &g.version),
        };
        let key = (
            g.application_receiver.clone(),
            g.application_sender.clone(),
            version,
        );
        match at.get(&key).and_then(|i| batches.get_mut(*i)) {
            Some((_, v)) => v.push(g),
            None => {
                at.insert(key.clone(), batches.len());
                batches.push((key, vec![g]));
            }
        }
    }
    batches
}

/// Builds the outbound interchanges for a response: a TA1 interchange when one is due, and one
/// interchange with the 997s or 999s (one per functional group answered), numbered by
/// `numbers` in order.
pub fn write_acknowledgments(
    response: &InterchangeResponse,
    ic: &Interchange<'_>,
    partner: &Partner,
    gateway: &Gateway,
    numbers: &Numbers,
    now: NaiveDateTime,
) -> Result<Vec<Outbound>, ShortOfNumbers> {
    let plan = Plan::of(response, ic, partner, gateway, numbers, now)?;
    let mut outbound: Vec<Outbound> = plan.ta1().into_iter().collect();
    if let Some((kind, control)) = plan.group_ack() {
        // Held until the interchange completes, and stored for replays: without the
        // growth's spare room.
        let mut bytes = plan.write(ic, None).unwrap_or_default();
        bytes.shrink_to_fit();
        outbound.push(Outbound {
            kind,
            control_number: control,
            bytes,
        });
    }
    Ok(outbound)
}

/// The kind and ISA13 of a 997/999 interchange.
pub type GroupAck = (OutboundKind, u32);

/// One FA group of a 997/999 interchange: its key, the groups it answers and its GS06.
type FaGroup<'r> = (FaGroupKey, Vec<&'r GroupResponse>, u32);

/// The acknowledgments of a response, numbered: every number checked to be there before a
/// byte is written. What [`write_acknowledgments`] makes, with the 997/999 interchange
/// written as it is made ([`Plan::write_group_acks`]), as often as needed, never held.
pub struct Plan<'r> {
    response: &'r InterchangeResponse,
    env: Envelope,
    /// The TA1 interchange's ISA13.
    ta1: Option<u32>,
    /// The 997/999 interchange: its kind and ISA13, and its FA groups with their GS06.
    groups: Option<(OutboundKind, u32, Vec<FaGroup<'r>>)>,
}

impl<'r> Plan<'r> {
    pub fn of(
        response: &'r InterchangeResponse,
        ic: &Interchange<'_>,
        partner: &Partner,
        gateway: &Gateway,
        numbers: &Numbers,
        now: NaiveDateTime,
    ) -> Result<Self, ShortOfNumbers> {
        let mut isa13 = numbers.isa13.iter().copied();
        let mut gs06s = numbers.gs06.iter().copied();
        let version = isa_version(partner, ic.isa.version());
        let (mut delimiters, line_ending) = outbound_delimiters(partner, ic);
        if version.as_str() < "00402" {
            // Before 00402 ISA11 is the standards identifier `U`: there is no repetition
            // separator, so none is kept out of the values we copy.
            delimiters.repetition = None;
        }
        let usage = match ic.isa.field(15) {
            b"T" => "T",
            b"I" => "I",
            _ => "P",
        };
        let env = Envelope {
            // Answered as the identity of ours it was addressed to (`[[gateway.identity]]`).
            sender: gateway
                .addressed(ic.isa.trimmed(7), ic.isa.trimmed(8))
                .map_or_else(
                    || (gateway.id_qualifier.clone(), gateway.id.clone()),
                    |i| (i.id_qualifier.clone(), i.id.clone()),
                ),
            receiver: (ic.isa.trimmed(5).to_string(), ic.isa.trimmed(6).to_string()),
            version,
            usage: usage.into(),
            delimiters,
            line_ending,
            now,
        };
        let ta1 = match &response.ta1 {
            Some(_) => Some(isa13.next().ok_or(ShortOfNumbers("ISA13"))?),
            None => None,
        };
        let groups = if response.groups.is_empty() {
            None
        } else {
            let control = isa13.next().ok_or(ShortOfNumbers("ISA13"))?;
            let batches = fa_groups(response, partner)
                .into_iter()
                .map(|(key, groups)| Ok((key, groups, gs06s.next().ok_or(ShortOfNumbers("GS06"))?)))
                .collect::<Result<Vec<_>, ShortOfNumbers>>()?;
            Some((group_ack_kind(response), control, batches))
        };
        Ok(Plan {
            response,
            env,
            ta1,
            groups,
        })
    }

    /// The TA1 interchange, if one is due.
    pub fn ta1(&self) -> Option<Outbound> {
        let (ta1, control) = (self.response.ta1.as_ref()?, self.ta1?);
        Some(Outbound {
            kind: OutboundKind::Ta1,
            control_number: control,
            bytes: ta1_interchange(&self.env, ta1, control),
        })
    }

    /// The 997/999 interchange's kind and ISA13, if there is one.
    pub fn group_ack(&self) -> Option<GroupAck> {
        self.groups
            .as_ref()
            .map(|(kind, control, _)| (*kind, *control))
    }

    /// Writes the 997/999 interchange (if any) of the interchange `ic` the plan was made
    /// for to `out` as it is made: for a large interchange, to its file and to the registry.
    pub fn write_group_acks(
        &self,
        ic: &Interchange<'_>,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        self.write(ic, Some(out)).map(drop)
    }

    /// The 997/999 interchange, to `sink` as it is made (then the bytes returned are none)
    /// or in memory.
    fn write(
        &self,
        ic: &Interchange<'_>,
        sink: Option<&mut dyn std::io::Write>,
    ) -> std::io::Result<Vec<u8>> {
        let mut w = Writer::new(&self.env, sink);
        let Some((kind, control, batches)) = &self.groups else {
            return w.finish();
        };
        let now = self.env.now;
        w.isa(*control);
        for ((app_sender, app_receiver, version), groups, gs06) in batches {
            let gs06 = gs06.to_string();
            w.segment(
                "GS",
                &[
                    "FA",
                    app_sender,
                    app_receiver,
                    &now.format("%Y%m%d").to_string(),
                    &now.format("%H%M").to_string(),
                    &gs06,
                    "X",
                    version,
                ],
            );
            for (i, g) in groups.iter().enumerate() {
                let st02 = format!("{:04}", i + 1);
                match kind {
                    OutboundKind::ImplementationAck => implementation_ack(&mut w, g, ic, &st02),
                    _ => functional_ack(&mut w, g, ic, &st02, release(version.as_bytes())),
                }
            }
            w.segment("GE", &[&groups.len().to_string(), &gs06]);
        }
        w.iea(batches.len(), *control);
        w.finish()
    }
}

fn ta1_interchange(env: &Envelope, ta1: &Ta1, control: u32) -> Vec<u8> {
    let mut w = Writer::new(env, None);
    w.isa(control);
    w.segment(
        "TA1",
        &[
            &ta1.control_number,
            &ta1.date,
            &ta1.time,
            ta1.status.code(),
            ta1.note.value(),
        ],
    );
    w.iea(0, control);
    w.finish().unwrap_or_default()
}

fn start_set(w: &mut Writer<'_, '_>, id: &str, st02: &str, convention: Option<&str>) {
    w.w.begin_set();
    w.segment("ST", &[id, st02, convention.unwrap_or("")]);
}

fn end_set(w: &mut Writer<'_, '_>, st02: &str) {
    let count = w.w.se01().to_string();
    w.segment("SE", &[&count, st02]);
}

/// AK9, its codes as the acknowledgment's own release (`ack`) has them.
fn ak9(w: &mut Writer<'_, '_>, g: &GroupResponse, ack: Release) {
    let mut e = vec![
        g.status.code().to_string(),
        g.declared.to_string(),
        g.received.to_string(),
        g.accepted.to_string(),
    ];
    e.extend(g.codes.iter().map(|c| c.in_release(ack).to_string()));
    let refs: Vec<&str> = e.iter().map(String::as_str).collect();
    w.segment("AK9", &refs);
}

/// AK5/IK5, its codes as the acknowledgment's own release (`ack`) has them.
fn set_status(w: &mut Writer<'_, '_>, id: &str, s: &SetResponse, ack: Release) {
    let mut e = vec![s.status.code()];
    e.extend(s.codes.iter().map(|c| c.in_release(ack).value()));
    w.segment(id, &e);
}

fn element_errors(w: &mut Writer<'_, '_>, id: &str, seg: &SegmentError) {
    for el in &seg.elements {
        let position = w.composite(&[
            &el.position.to_string(),
            &el.component.map(|c| c.to_string()).unwrap_or_default(),
            &el.repetition.map(|r| r.to_string()).unwrap_or_default(),
        ]);
        let reference = el.reference.map(|r| r.to_string()).unwrap_or_default();
        // AK404 is not sent for invalid-character errors (the copy would carry the bad byte).
        let bad = if el.code == Ak403::InvalidCharacter {
            String::new()
        } else {
            w.value(el.bad_value.as_deref().unwrap_or(""))
        };
        // The 999's 621 list has codes the 997's 723 lacks (I10 "Not Used" element present).
        let code = if id == "AK4" {
            el.code.in_functional_ack()
        } else {
            el.code
        };
        w.segment(id, &[&position, &reference, code.value(), &bad]);
    }
}

/// A group's AK2 loops in set order: the answers kept, and, when the partner wants them
/// listed, the plainly accepted sets' made one at a time from the interchange.
struct Answers<'r, 'a> {
    kept: std::iter::Peekable<std::slice::Iter<'r, SetResponse>>,
    sets: Option<&'r Sets<'a>>,
    next: usize,
    lists_accepted: bool,
}

impl<'r, 'a> Answers<'r, 'a> {
    fn of(g: &'r GroupResponse, ic: &'r Interchange<'a>) -> Self {
        Answers {
            kept: g.sets.iter().peekable(),
            sets: ic.groups.get(g.index).map(|group| &group.sets),
            next: 0,
            lists_accepted: g.lists_accepted,
        }
    }
}

impl<'r> Iterator for Answers<'r, '_> {
    type Item = Cow<'r, SetResponse>;

    fn next(&mut self) -> Option<Self::Item> {
        let count = self.sets.map_or(0, Sets::len);
        while self.next < count {
            let i = self.next;
            self.next += 1;
            if self.kept.peek().is_some_and(|s| s.index <= i) {
                return self.kept.next().map(Cow::Borrowed);
            }
            if self.lists_accepted {
                if let Some(set) = self.sets.and_then(|sets| sets.get(i)) {
                    return Some(Cow::Owned(SetResponse::accepted(i, &set)));
                }
            }
        }
        self.kept.next().map(Cow::Borrowed)
    }
}

/// How long element 447 (AK303, IK303, CTX04) may be in an acknowledgment of `release`:
/// AN 1/4 to 003060, 1/6 from 003070 to 004040, 1/4 again from 004050 to 006040 (005010
/// included), 1/6 from 006050 (EdiFabric's templates; Stedi's, kasoftware's, pyx12's and
/// stupidedi's 005010 dictionaries).
fn loop_id_max(release: Release) -> usize {
    match release {
        Some(r) if (3070..4050).contains(&r) || r >= 6050 => 6,
        _ => 4,
    }
}

/// A loop id as element 447 can hold it: a guide's `2010AA` becomes `2010`, the loop's
/// number, as clearinghouses send it (a 999 carrying `2010AA` is refused by readers that
/// check 447's length: ours, pyx12's, stupidedi's). An LS01 longer than the release allows
/// (the partner's own error, already reported) is cut the same way.
fn loop_id(id: Option<&str>, max: usize) -> &str {
    let id = id.unwrap_or("");
    id.char_indices()
        .nth(max)
        .and_then(|(end, _)| id.get(..end))
        .unwrap_or(id)
}

fn functional_ack(
    w: &mut Writer<'_, '_>,
    g: &GroupResponse,
    ic: &Interchange<'_>,
    st02: &str,
    ack: Release,
) {
    let era_5010 = ack >= Some(5010);
    start_set(w, "997", st02, None);
    let version = if era_5010 { g.version.as_str() } else { "" };
    w.segment("AK1", &[&g.functional_id, &g.control_number, version]);
    for s in Answers::of(g, ic) {
        let convention = if era_5010 {
            s.convention.as_deref().unwrap_or("")
        } else {
            ""
        };
        w.segment("AK2", &[&s.id, &s.control_number, convention]);
        for seg in &s.segment_errors {
            let max = loop_id_max(ack);
            w.segment(
                "AK3",
                &[
                    Writer::segment_id(&seg.id),
                    &seg.position.to_string(),
                    loop_id(seg.loop_id.as_deref(), max),
                    seg.code.value(),
                ],
            );
            element_errors(w, "AK4", seg);
        }
        set_status(w, "AK5", &s, ack);
    }
    ak9(w, g, ack);
    end_set(w, st02);
}

/// The 999 exists in 005010 only (its guide is 005010X231A1).
const IMPLEMENTATION_ACK_RELEASE: Release = Some(5010);

fn implementation_ack(w: &mut Writer<'_, '_>, g: &GroupResponse, ic: &Interchange<'_>, st02: &str) {
    start_set(w, "999", st02, Some(IMPLEMENTATION_ACK_GUIDE));
    w.segment("AK1", &[&g.functional_id, &g.control_number, &g.version]);
    for s in Answers::of(g, ic) {
        w.segment(
            "AK2",
            &[
                &s.id,
                &s.control_number,
                s.convention.as_deref().unwrap_or(""),
            ],
        );
        for seg in &s.segment_errors {
            w.segment(
                "IK3",
                &[
                    Writer::segment_id(&seg.id),
                    &seg.position.to_string(),
                    loop_id(
                        seg.loop_id.as_deref(),
                        loop_id_max(IMPLEMENTATION_ACK_RELEASE),
                    ),
                    seg.code.value(),
                ],
            );
            for c in &seg.contexts {
                let (name, reference) = (
                    w.value(&c.name),
                    w.value(c.reference.as_deref().unwrap_or("")),
                );
                let ctx01 = w.composite(&[&name, &reference]);
                let position = c.position.map(|p| p.to_string()).unwrap_or_default();
                let element = c.element.map(|e| e.to_string()).unwrap_or_default();
                w.segment(
                    "CTX",
                    &[
                        &ctx01,
                        c.segment.as_deref().unwrap_or(""),
                        &position,
                        loop_id(
                            c.loop_id.as_deref(),
                            loop_id_max(IMPLEMENTATION_ACK_RELEASE),
                        ),
                        &element,
                    ],
                );
            }
            element_errors(w, "IK4", seg);
        }
        set_status(w, "IK5", &s, IMPLEMENTATION_ACK_RELEASE);
    }
    ak9(w, g, IMPLEMENTATION_ACK_RELEASE);
    end_set(w, st02);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ack::{Context, Disposition, ElementError, Status};
    use crate::x12::{Interchanges, Limits};

    const INBOUND: &str = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000007*0*T*:~GS*HC*ACME*X12GATE*20240101*1200*9*X*005010X222A1~ST*837*0001*005010X222A1~BHT*0019~SE*3*0001~GE*1*9~IEA*1*000000007~";

    fn gateway() -> Gateway {
        let config = crate::config::Config::from_str(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\n",
            std::path::Path::new("/x/p.toml"),
        )
        .unwrap();
        config.gateway
    }

    /// A response with one segment error and two element errors, as the schema validator
    /// will produce them.
    fn response(kind: AckKind) -> InterchangeResponse {
        let seg = SegmentError {
            id: "NM1".into(),
            position: 5,
            loop_id: Some("2010AA".into()),
            code: crate::finding::Ak304::ElementErrors,
            contexts: vec![Context {
                name: "CLM01".into(),
                reference: Some("A37YH556".into()),
                ..Context::default()
            }],
            elements: vec![
                ElementError {
                    position: 9,
                    component: None,
                    repetition: None,
                    reference: Some(67),
                    code: Ak403::InvalidCode,
                    bad_value: Some("XX".into()),
                },
                ElementError {
                    position: 3,
                    component: Some(2),
                    repetition: Some(1),
                    reference: None,
                    code: Ak403::InvalidCharacter,
                    bad_value: Some("bad\u{1}".into()),
                },
            ],
        };
        InterchangeResponse {
            disposition: Disposition::Rejected,
            reason: None,
            ta1: None,
            groups: vec![GroupResponse {
                functional_id: "HC".into(),
                control_number: "9".into(),
                version: "005010X222A1".into(),
                application_sender: "ACME".into(),
                application_receiver: "X12GATE".into(),
                status: Status::Rejected,
                declared: 1,
                received: 1,
                accepted: 0,
                codes: vec![],
                index: 0,
                lists_accepted: true,
                sets: vec![SetResponse {
                    index: 0,
                    id: "837".into(),
                    control_number: "0001".into(),
                    convention: Some("005010X222A1".into()),
                    status: Status::Rejected,
                    codes: vec![crate::finding::Ak502::SegmentsInError],
                    segment_errors: vec![seg],
                }],
            }],
            kind,
            accepted_sets: vec![vec![false]],
        }
    }

    fn read(text: &[u8]) -> Interchange<'_> {
        Interchanges::new(text, Limits::default())
            .next()
            .unwrap()
            .unwrap()
    }

    /// When the acknowledgments of these tests are written.
    fn when() -> NaiveDateTime {
        chrono::NaiveDate::from_ymd_opt(2026, 1, 2)
            .unwrap()
            .and_hms_opt(3, 4, 0)
            .unwrap()
    }

    fn write(kind: AckKind) -> Vec<String> {
        let ic = read(INBOUND.as_bytes());
        let mut partner = crate::config::Partner::unknown("ZZ", "ACME");
        partner.ack.kind = kind;
        let now = when();
        let out = write_acknowledgments(
            &response(kind),
            &ic,
            &partner,
            &gateway(),
            &Numbers::following(numbers_needed(&response(kind), &partner), None, None),
            now,
        )
        .unwrap();
        assert_eq!(out.len(), 1);
        String::from_utf8(out[0].bytes.clone())
            .unwrap()
            .split('~')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    }

    #[test]
    fn we_never_answer_in_a_version_we_rejected() {
        let partner = crate::config::Partner::unknown("ZZ", "ACME");
        let v = |inbound: &str| isa_version(&partner, inbound);
        assert_eq!(v("00401"), "00401");
        assert_eq!(v("00305"), "00305");
        assert_eq!(v("00999"), "00401");
        assert_eq!(v("00000"), "00401");
        assert_eq!(v("0040A"), "00401");
    }

    #[test]
    fn previewed_numbers_follow_the_last_ones_and_wrap() {
        let needed = NumbersNeeded { isa13: 2, gs06: 1 };
        let n = Numbers::following(needed, Some(41), None);
        assert_eq!((n.isa13, n.gs06), (vec![42, 43], vec![1]));
        let n = Numbers::following(needed, Some(MAX_CONTROL_NUMBER), Some(7));
        assert_eq!((n.isa13, n.gs06), (vec![1, 2], vec![8]));
    }

    /// A sink that keeps what it is handed, and the size of each handing.
    #[derive(Default)]
    struct Handed {
        bytes: Vec<u8>,
        sizes: Vec<usize>,
    }

    impl std::io::Write for Handed {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.bytes.extend_from_slice(buf);
            self.sizes.push(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The 997 of thousands of sets written out as it is made is the one made in memory,
    /// handed over a few KiB at a time, whatever its size; a sink that fails is the error.
    #[test]
    fn a_large_997_written_as_it_is_made_is_the_one_made_whole() {
        let mut text = String::from("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00401*000000007*0*T*:~");
        for (g, version) in [(1, "004010"), (2, "005010")] {
            text += &format!("GS*PO*ACME*X12GATE*20240101*1200*{g}*X*{version}~");
            for n in 1..=8000 {
                text += &format!("ST*850*{n:04}~BEG*00*SA*{n}**20240101~SE*3*{n:04}~");
            }
            text += &format!("GE*8000*{g}~");
        }
        text += "IEA*2*000000007~";
        let ic = read(text.as_bytes());
        let mut partner = crate::config::Partner::unknown("ZZ", "ACME");
        partner.ack.accepted_sets = true;
        let now = when();
        let response = crate::ack::respond(&ic, &[], &partner);
        let numbers = Numbers::following(numbers_needed(&response, &partner), Some(40), None);
        let whole = write_acknowledgments(&response, &ic, &partner, &gateway(), &numbers, now)
            .unwrap()
            .pop()
            .unwrap();
        assert!(whole.bytes.len() > 4 * SPILL, "{}", whole.bytes.len());
        assert_eq!(
            String::from_utf8_lossy(&whole.bytes)
                .matches("AK2*850*")
                .count(),
            16000
        );
        let mut handed = Handed::default();
        let plan = Plan::of(&response, &ic, &partner, &gateway(), &numbers, now).unwrap();
        assert_eq!(plan.group_ack(), Some((whole.kind, whole.control_number)));
        plan.write_group_acks(&ic, &mut handed).unwrap();
        assert!(handed.bytes == whole.bytes, "not the same 997");
        assert!(handed.sizes.len() > 4, "{:?}", handed.sizes);
        assert!(
            handed.sizes.iter().all(|n| *n < SPILL + 1024),
            "{:?}",
            handed.sizes
        );

        struct Full;
        impl std::io::Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk full"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let failed = plan.write_group_acks(&ic, &mut Full);
        assert_eq!(failed.unwrap_err().to_string(), "disk full");
    }

    #[test]
    fn the_numbers_needed_are_the_numbers_used() {
        for kind in [AckKind::FunctionalAck, AckKind::ImplementationAck] {
            let mut r = response(kind);
            let partner = crate::config::Partner::unknown("ZZ", "ACME");
            let needed = numbers_needed(&r, &partner);
            assert_eq!(needed, NumbersNeeded { isa13: 1, gs06: 1 });
            r.ta1 = Some(Ta1 {
                control_number: "000000001".into(),
                date: "260102".into(),
                time: "0304".into(),
                status: super::super::Status::Accepted,
                note: crate::finding::Ta105::NoError,
            });
            let mut second = r.groups[0].clone();
            second.application_sender = "OTHER".into();
            r.groups.push(second);
            let needed = numbers_needed(&r, &partner);
            assert_eq!(needed, NumbersNeeded { isa13: 2, gs06: 2 });
            let ic = read(INBOUND.as_bytes());
            let now = when();
            let exact = Numbers::following(needed, None, None);
            let out = write_acknowledgments(&r, &ic, &partner, &gateway(), &exact, now).unwrap();
            assert_eq!(
                out.iter().map(|o| o.control_number).collect::<Vec<_>>(),
                [1, 2]
            );
            let mut short = exact.clone();
            short.gs06.pop();
            assert!(write_acknowledgments(&r, &ic, &partner, &gateway(), &short, now).is_err());
        }
    }

    #[test]
    fn a_997_carries_ak3_and_ak4_and_answers_a_test_interchange_in_test() {
        let segs = write(AckKind::FunctionalAck);
        assert!(segs[0].ends_with("*0*T*:"), "{segs:?}");
        let body: Vec<&str> = segs.iter().skip(3).take(7).map(String::as_str).collect();
        assert_eq!(
            body,
            [
                "AK1*HC*9*005010X222A1",
                "AK2*837*0001*005010X222A1",
                "AK3*NM1*5*2010*8",
                "AK4*9*67*7*XX",
                "AK4*3:2:1**6",
                "AK5*R*5",
                "AK9*R*1*1*0",
            ]
        );
        assert_eq!(segs[10], "SE*9*0001");
    }

    #[test]
    fn a_loop_id_is_cut_to_what_element_447_holds_in_the_acks_release() {
        let (r4010, r5010) = (loop_id_max(Some(4010)), loop_id_max(Some(5010)));
        assert_eq!((r4010, r5010), (6, 4));
        assert_eq!(
            [3060, 3070, 4040, 4050, 6040, 6050].map(|r| loop_id_max(Some(r))),
            [4, 6, 6, 4, 4, 6]
        );
        assert_eq!(loop_id(Some("2010AA"), r5010), "2010");
        assert_eq!(loop_id(Some("2300"), r5010), "2300");
        assert_eq!(loop_id(Some("1000A"), r4010), "1000A");
        assert_eq!(loop_id(Some("2010AAXYZ"), r4010), "2010AA");
        assert_eq!(loop_id(Some("ÉÉÉÉÉÉ"), r5010), "ÉÉÉÉ");
        assert_eq!(loop_id(None, r5010), "");
    }

    #[test]
    fn a_999_carries_ik3_ctx_ik4_and_ik5() {
        let segs = write(AckKind::ImplementationAck);
        let body: Vec<&str> = segs.iter().skip(2).take(9).map(String::as_str).collect();
        assert_eq!(
            body,
            [
                "ST*999*0001*005010X231A1",
                "AK1*HC*9*005010X222A1",
                "AK2*837*0001*005010X222A1",
                "IK3*NM1*5*2010*8",
                "CTX*CLM01:A37YH556",
                "IK4*9*67*7*XX",
                "IK4*3:2:1**6",
                "IK5*R*5",
                "AK9*R*1*1*0",
            ]
        );
        assert_eq!(segs[11], "SE*10*0001");
        assert!(segs[1].ends_with("*X*005010X231A1"), "{segs:?}");
    }

    /// A 999 to a partner that sends 00401 interchanges goes in an 00401 envelope (ISA11 `U`,
    /// no repetition separator), as 4010 translators expect; `ack_version` still decides.
    #[test]
    fn a_999_to_a_4010_partner_is_in_its_00401_envelope() {
        let inbound = INBOUND.replace("*^*00501*", "*U*00401*");
        let ic = read(inbound.as_bytes());
        let kind = AckKind::ImplementationAck;
        let isa = |ack_version: Option<&str>| {
            let mut partner = crate::config::Partner::unknown("ZZ", "ACME");
            partner.ack.kind = kind;
            partner.ack.version = ack_version.map(String::from);
            let needed = numbers_needed(&response(kind), &partner);
            let out = write_acknowledgments(
                &response(kind),
                &ic,
                &partner,
                &gateway(),
                &Numbers::following(needed, None, None),
                when(),
            )
            .unwrap();
            let text = String::from_utf8(out[0].bytes.clone()).unwrap();
            let isa: Vec<String> = text[..106].split('*').map(String::from).collect();
            assert!(text.contains("ST*999*0001*005010X231A1~"), "{text}");
            (isa[11].clone(), isa[12].clone())
        };
        assert_eq!(isa(None), ("U".to_string(), "00401".to_string()));
        assert_eq!(isa(Some("004010")), ("U".to_string(), "00401".to_string()));
        assert_eq!(isa(Some("005010")), ("^".to_string(), "00501".to_string()));
    }
}
