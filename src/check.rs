//! The one place an interchange's findings are put together: routing, the envelope rules,
//! the sets' definitions and what the registry found (groups seen before), in that order
//! (it matters: the TA1 answers with the first finding that rejects).
//! `validate`, `ack` and `process` all take their findings from here, so a rule added once
//! is in every path.

use crate::finding::{Ak905, Code, Finding, Rule, Ta105};
use crate::input::{InputError, Piece, Reader};
use crate::schema::{Schemas, Unread};
use crate::validate::{self, Carried, Routing};
use crate::x12::{Interchange, Interchanges, Limits, Resume};

/// What an interchange is checked against.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checks<'a> {
    /// The definitions sets are walked against; `None`: envelope rules only.
    pub schemas: Option<&'a Schemas>,
    /// Who we are and whether the sender is known; `None` where no configuration is at hand
    /// (`validate` of a file on its own).
    pub routing: Option<Routing<'a>>,
    /// A layout the partner's tools tolerate (blanks before segments, no final terminator)
    /// rejects the interchange (TA105 024) rather than being a warning.
    pub strict_layout: bool,
    /// A GS08 that names no release rejects its group (AK905 2) rather than being a warning.
    pub unknown_version_rejects: bool,
    /// A set under another functional group than its own is a warning, not a rejection.
    pub group_mismatch_warns: bool,
}

impl<'a> Checks<'a> {
    /// Envelope rules and these definitions, no routing: what `validate` checks a file by.
    pub fn definitions(schemas: &'a Schemas) -> Checks<'a> {
        Checks {
            schemas: Some(schemas),
            routing: None,
            ..Checks::default()
        }
    }
}

/// Every finding of one interchange, with `extra` (the registry's) last.
pub fn interchange(
    ic: &Interchange<'_>,
    checks: &Checks<'_>,
    extra: impl IntoIterator<Item = Finding>,
) -> Vec<Finding> {
    let mut findings = Found::checked(ic, checks, &mut Carried::default()).finish();
    findings.extend(extra);
    findings
}

/// What one interchange, or one part of it, was found to break, by where each finding
/// stands in the interchange's report (see [`Found::finish`]): the parts of an interchange
/// read in parts are appended one to the other, and read as it would whole.
struct Found<'c> {
    /// Whether it holds its interchange's beginning, and its end (both when read whole).
    first: bool,
    last: bool,
    routing: Vec<Finding>,
    envelope: validate::Envelope,
    content: Vec<Finding>,
    unread: Unread,
    /// The definitions its sender's sets are read by.
    schemas: Option<&'c Schemas>,
}

impl<'c> Found<'c> {
    /// Every finding of `ic`, given what earlier parts of its interchange left in `carried`.
    fn checked(ic: &Interchange<'_>, checks: &Checks<'c>, carried: &mut Carried) -> Found<'c> {
        let mut found = Found::of(ic, checks, carried);
        found.walk(ic);
        found.renumber(ic);
        found
    }

    /// The cheap part of [`Found::checked`]: routing and envelopes; [`Found::walk`] and
    /// [`Found::renumber`] are left to the caller (another thread).
    fn of(ic: &Interchange<'_>, checks: &Checks<'c>, carried: &mut Carried) -> Found<'c> {
        if ic.is_first_part() {
            *carried = Carried::default();
        }
        let routing = match checks.routing {
            Some(us) if ic.is_first_part() => validate::routing(ic, &us),
            _ => Vec::new(),
        };
        // GS01 is checked against the release's 479 list only with the definitions: a
        // partner with `validation = "envelope"` has its groups read without the dictionaries.
        let mut envelope = validate::part(ic, checks.schemas, carried);
        if checks.strict_layout {
            for f in &mut envelope.layout {
                *f = f.clone().coded(Code::Ta105(Ta105::InvalidContent));
            }
        }
        if checks.unknown_version_rejects || checks.group_mismatch_warns {
            for section in envelope.sections_mut() {
                for f in section.iter_mut() {
                    match f.rule {
                        Rule::GsVersionUnknown if checks.unknown_version_rejects => {
                            *f = f.clone().coded(Code::Ak905(Ak905::VersionNotSupported));
                        }
                        Rule::StNotInFunctionalGroup if checks.group_mismatch_warns => {
                            *f = f.clone().tolerated("group_mismatch = \"warn\"");
                        }
                        _ => {}
                    }
                }
            }
        }
        // The sender's own guide when `partners.toml` gives it one (chosen here, by
        // ISA05/ISA06, so every command that checks an interchange reads it as `process` does).
        let schemas = checks
            .schemas
            .map(|s| s.for_sender(ic.isa.trimmed(5), ic.isa.trimmed(6)));
        Found {
            first: ic.is_first_part(),
            last: ic.is_last_part(),
            routing,
            envelope,
            content: Vec::new(),
            unread: Unread::default(),
            schemas,
        }
    }

    /// Walks `ic`'s sets against their definitions (the costly part, done where `of` was
    /// not: on another thread); indexes are the part's own until [`Found::renumber`].
    fn walk(&mut self, ic: &Interchange<'_>) {
        if let Some(schemas) = self.schemas {
            let threads = crate::schema::threads_for(ic);
            (self.content, self.unread) = crate::schema::walk(ic, schemas, threads);
        }
    }

    /// Group and set indexes as the interchange counts them, not the part `ic` (the one
    /// this was found of).
    fn renumber(&mut self, ic: &Interchange<'_>) {
        if ic.is_whole() {
            return;
        }
        let renumber = |f: &mut Finding| {
            if let Some(g) = f.group {
                f.set = f.set.map(|s| ic.set_index(g, s));
                f.group = Some(ic.group_index(g));
            }
        };
        for section in self.envelope.sections_mut() {
            section.iter_mut().for_each(renumber);
        }
        self.content.iter_mut().for_each(renumber);
        if let Some(f) = self.unread.at_mut() {
            renumber(f);
        }
    }

    /// Adds a later part's findings.
    fn append(&mut self, mut later: Found<'c>) {
        self.routing.append(&mut later.routing);
        self.envelope.append(later.envelope);
        self.content.append(&mut later.content);
        self.unread.absorb(later.unread);
        self.last = later.last;
    }

    /// In the order the interchange's answer reads them (it matters: the TA1 answers with
    /// the first that rejects): routing, the envelope rules, the sets' definitions.
    fn finish(self) -> Vec<Finding> {
        let mut findings = self.routing;
        findings.extend(self.envelope.into_findings());
        findings.extend(self.content);
        if let Some(schemas) = self.schemas {
            findings.extend(self.unread.warning(schemas));
        }
        findings
    }
}

/// The findings of one interchange given a part at a time, as [`interchange`] gives them
/// read whole: what `process` gathers of an interchange larger than a piece.
#[derive(Default)]
pub struct InParts<'c> {
    carried: Carried,
    found: Option<Found<'c>>,
}

impl<'c> InParts<'c> {
    /// Adds the interchange's next part (its first begins anew).
    pub fn add(&mut self, ic: &Interchange<'_>, checks: &Checks<'c>) {
        let found = Found::checked(ic, checks, &mut self.carried);
        self.found = Some(match self.found.take() {
            Some(mut earlier) if !ic.is_first_part() => {
                earlier.append(found);
                earlier
            }
            _ => found,
        });
    }

    pub fn finish(self) -> Vec<Finding> {
        self.found.map(Found::finish).unwrap_or_default()
    }
}

/// What reading gave: an interchange (or part) and what it was found to break, or what
/// could not be read as one.
enum Item<'c> {
    Found(Box<Found<'c>>),
    Unread(Finding),
}

/// Puts the findings of what is read together, interchange by interchange: those of an
/// interchange read in parts are kept until its last part.
#[derive(Default)]
struct Gather<'c> {
    carried: Carried,
    pending: Option<Found<'c>>,
}

impl<'c> Gather<'c> {
    /// The findings `item` completes, if any.
    fn take(&mut self, item: Item<'c>, into: &mut Vec<Finding>) {
        match item {
            Item::Found(found) => {
                debug_assert!(
                    found.first || self.pending.is_some(),
                    "a part that goes on an interchange not begun"
                );
                debug_assert!(
                    !found.first || self.pending.is_none(),
                    "an interchange begun before the last one ended"
                );
                let found = match self.pending.take() {
                    Some(mut earlier) if !found.first => {
                        earlier.append(*found);
                        earlier
                    }
                    _ => *found,
                };
                if found.last {
                    into.extend(found.finish());
                } else {
                    self.pending = Some(found);
                }
            }
            // What could not be read ends whatever was being read (an interchange found too
            // long partway is reported as one too long read whole is: by that alone).
            Item::Unread(finding) => {
                self.pending = None;
                into.push(finding);
            }
        }
    }
}

/// Every finding of a whole file in memory, one interchange at a time; on every core for a
/// large file.
pub fn file(input: &[u8], limits: Limits, checks: &Checks<'_>) -> Vec<Finding> {
    file_on(input, limits, checks, crate::cores::available())
}

/// [`file`] on at most `threads` threads (1: its interchanges on this one; an interchange of
/// [`crate::schema::PARALLEL_FROM`] or more still has its sets walked on every core).
pub fn file_on(input: &[u8], limits: Limits, checks: &Checks<'_>, threads: usize) -> Vec<Finding> {
    let threads = if input.len() >= PARALLEL_FROM {
        threads
    } else {
        1
    };
    let mut gather = Gather::default();
    let items = interchanges(
        &mut Interchanges::new(input, limits),
        checks,
        threads,
        &mut gather.carried,
    );
    let mut findings = Vec::new();
    for item in items {
        gather.take(item, &mut findings);
    }
    findings
}

/// Every finding of a file read in pieces ([`Reader`], best [`Reader::in_parts`]), handed to
/// `each` a piece at a time, in file order: memory is a piece, however large the file.
pub fn pieces(
    reader: &mut Reader,
    checks: &Checks<'_>,
    each: &mut dyn FnMut(Vec<Finding>),
) -> Result<(), InputError> {
    let threads = crate::cores::available();
    let mut gather = Gather::default();
    while let Some(piece) = reader.next_piece()? {
        let (items, resume) = if piece.bytes.len() < PARALLEL_FROM {
            let mut read = piece.interchanges();
            (
                interchanges(&mut read, checks, 1, &mut gather.carried),
                read.resume(),
            )
        } else {
            in_halves(&piece, checks, threads, &mut gather.carried)
        };
        let mut findings = Vec::new();
        for item in items {
            gather.take(item, &mut findings);
        }
        each(findings);
        reader.advance(resume);
    }
    Ok(())
}

/// A large piece read as two halves on two threads (reading the envelopes is what one
/// thread cannot keep up with), when a cut near its middle is confirmed by the first half;
/// else whole. The findings and the resume are those of reading it whole. (A piece that
/// begins inside an interchange read in parts is not cut: see [`Piece::halves`].)
fn in_halves<'c>(
    piece: &Piece<'_>,
    checks: &Checks<'c>,
    threads: usize,
    carried: &mut Carried,
) -> (Vec<Item<'c>>, Resume) {
    let whole = |carried: &mut Carried| {
        let mut read = piece.interchanges();
        (
            interchanges(&mut read, checks, threads, carried),
            read.resume(),
        )
    };
    let Some((mut first, mut second, cut)) = piece.halves().filter(|_| threads > 1) else {
        return whole(carried);
    };
    let each = (threads / 2).max(1);
    let (head, tail, confirmed) = std::thread::scope(|scope| {
        let tail = scope.spawn(move || {
            // The second half begins with an interchange: nothing is carried into it.
            let found = interchanges(&mut second, checks, each, &mut Carried::default());
            (found, second.resume())
        });
        let head = interchanges(&mut first, checks, each, carried);
        let confirmed = first.ended_on_an_iea();
        (head, tail.join(), confirmed)
    });
    match tail {
        Ok((tail, resume)) if confirmed => {
            let mut items = head;
            items.extend(tail);
            (items, resume.shifted(cut))
        }
        _ => whole(carried),
    }
}

/// What `read` gives, on `threads` threads when there are definitions; `carried` is what
/// the envelope rules carry from one part of an interchange to the next.
fn interchanges<'c>(
    read: &mut Interchanges<'_>,
    checks: &Checks<'c>,
    threads: usize,
    carried: &mut Carried,
) -> Vec<Item<'c>> {
    if checks.schemas.is_some() && threads > 1 {
        return in_parallel(read, checks, threads, carried);
    }
    read.map(|result| match result {
        Ok(ic) => Item::Found(Box::new(Found::checked(&ic, checks, carried))),
        Err(e) => Item::Unread(validate::read_error(&e)),
    })
    .collect()
}

/// Inputs from this size have their sets checked against definitions on every core.
const PARALLEL_FROM: usize = 1 << 20;

/// [`interchanges`] for a large input: this thread reads interchanges and checks envelopes
/// (the cheap part) while `workers` threads walk their sets against the definitions; at most
/// two interchanges per worker wait in between, so memory stays bounded. Items come out in
/// the same order as from one thread.
fn in_parallel<'c>(
    read: &mut Interchanges<'_>,
    checks: &Checks<'c>,
    workers: usize,
    carried: &mut Carried,
) -> Vec<Item<'c>> {
    use std::sync::{mpsc, Mutex};
    // In reading order: what could not be read at once, the rest once its sets are walked.
    let mut items: Vec<Option<Item<'c>>> = Vec::new();
    let (jobs, queue) = mpsc::sync_channel::<(usize, Interchange<'_>, Found<'c>)>(workers * 2);
    let queue = Mutex::new(queue);
    let (done, results) = mpsc::channel::<(usize, Found<'c>)>();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let (queue, done) = (&queue, done.clone());
            scope.spawn(move || loop {
                // A poisoned lock or a closed queue both mean there is nothing left to do.
                let job = match queue.lock() {
                    Ok(q) => q.recv(),
                    Err(_) => return,
                };
                let Ok((i, ic, mut found)) = job else { return };
                found.walk(&ic);
                found.renumber(&ic);
                if done.send((i, found)).is_err() {
                    return;
                }
            });
        }
        drop(done);
        for result in read {
            match result {
                Ok(ic) => {
                    let found = Found::of(&ic, checks, carried);
                    items.push(None);
                    // No worker left (one panicked): what was found of it stands, unwalked.
                    if let Err(mpsc::SendError((_, ic, mut found))) =
                        jobs.send((items.len() - 1, ic, found))
                    {
                        found.renumber(&ic);
                        items.pop();
                        items.push(Some(Item::Found(Box::new(found))));
                        break;
                    }
                }
                Err(e) => items.push(Some(Item::Unread(validate::read_error(&e)))),
            }
        }
        drop(jobs);
        for (i, found) in results {
            if let Some(slot) = items.get_mut(i) {
                *slot = Some(Item::Found(Box::new(found)));
            }
        }
    });
    items.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Rule;
    use std::collections::HashSet;

    const INDENTED: &str = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000001*0*P*:~\n  GS*PO*A*B*20240101*1200*1*X*005010~\n  GE*0*1~\n  IEA*1*000000001";

    fn findings(strict_layout: bool) -> Vec<Finding> {
        let ic = Interchanges::new(INDENTED.as_bytes(), Limits::default())
            .next()
            .unwrap()
            .unwrap();
        let checks = Checks {
            strict_layout,
            ..Checks::default()
        };
        interchange(&ic, &checks, [])
    }

    /// About 1.5 MB of fixtures with broken parts between them; with `trap`, the middle of
    /// the file falls inside a long set that holds an ISA word looking like an interchange's
    /// start (so a cut there is wrong).
    fn large_file(trap: bool) -> Vec<u8> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut parts = Vec::new();
        for name in [
            "850-004010.x12",
            "810-005010.x12",
            "856-004010.x12",
            "crlf.x12",
        ] {
            parts.push(std::fs::read(dir.join(name)).unwrap());
        }
        parts.push(b"ISA*broken~\n".to_vec());
        parts.push(INDENTED.as_bytes().to_vec());
        parts.push(b"~\nnot an interchange\n".to_vec());
        let fill = |out: &mut Vec<u8>, to: usize| {
            let mut i = 0;
            while out.len() < to {
                out.extend_from_slice(&parts[i % parts.len()]);
                i += 1;
            }
        };
        let mut out = Vec::new();
        if !trap {
            fill(&mut out, 1_500_000);
            return out;
        }
        fill(&mut out, 700_000);
        // Whatever part came last, the trap's ISA stands after a terminator.
        out.extend_from_slice(b"~\n");
        let start = out.len();
        let isa = &parts[0][..106];
        out.extend_from_slice(isa);
        out.extend_from_slice(b"\nGS*PO*ACME*X12GATE*20240115*0930*7*X*004010~\nST*850*0001~\n");
        while out.len() < start + 100_000 {
            out.extend_from_slice(b"N1*ST*ACME DC 7*92*0007~\n");
        }
        out.extend_from_slice(b"N1*ST*(ISA)~\nSE*9*0001~\nGE*1*7~\nIEA*1*000000101~\n");
        fill(&mut out, 2 * (start + 50_000));
        out
    }

    fn by_pieces(input: &[u8], window: usize, checks: &Checks<'_>) -> Vec<String> {
        in_pieces(input, window, checks, Limits::default(), false)
    }

    fn in_pieces(
        input: &[u8],
        window: usize,
        checks: &Checks<'_>,
        limits: Limits,
        parts: bool,
    ) -> Vec<String> {
        let from = Box::new(std::io::Cursor::new(input.to_vec()));
        let mut reader = Reader::new(from, "large", limits, window);
        if parts {
            reader = reader.in_parts();
        }
        let mut all = Vec::new();
        pieces(&mut reader, checks, &mut |f| {
            all.extend(f.iter().map(|f| format!("{f:?}")))
        })
        .unwrap();
        all
    }

    #[test]
    fn halves_of_a_large_piece_read_as_the_whole() {
        let schemas = crate::schema::builtin().unwrap();
        let trapped = large_file(true);
        // The cut guessed at the middle of the trapped file is the ISA word inside a set.
        let at = crate::x12::likely_interchange_start(&trapped, trapped.len() / 2).unwrap();
        assert_eq!(trapped.get(at - 1..at + 4), Some(&b"(ISA)"[..]));
        // The first half confirms a true cut and refuses the trap.
        for (input, confirmed) in [(large_file(false), true), (trapped.clone(), false)] {
            let from = Box::new(std::io::Cursor::new(input.clone()));
            let mut reader = Reader::new(from, "large", Limits::default(), input.len() + 1);
            let piece = reader.next_piece().unwrap().unwrap();
            let (mut first, _, _) = piece.halves().unwrap();
            first.by_ref().for_each(drop);
            assert_eq!(first.ended_on_an_iea(), confirmed);
        }
        for checks in [Checks::default(), Checks::definitions(schemas)] {
            for input in [large_file(false), trapped.clone()] {
                let whole: Vec<String> = file_on(&input, Limits::default(), &checks, 1)
                    .iter()
                    .map(|f| format!("{f:?}"))
                    .collect();
                assert!(whole.len() > 100, "{}", whole.len());
                for window in [input.len() + 1, 1_100_000] {
                    assert_eq!(by_pieces(&input, window, &checks), whole, "window {window}");
                }
                for window in [1_100_000, 300_000, 70_000] {
                    let parts = in_pieces(&input, window, &checks, Limits::default(), true);
                    assert_eq!(parts, whole, "in parts, window {window}");
                }
            }
        }
    }

    /// A large interchange with something for every envelope rule that spans its parts
    /// (set and group control numbers reused far apart, counts, strays, blanks, limits, sets
    /// read at envelope level only), then one cut short by the next ISA, then a small one.
    /// `seed` moves where each oddity falls.
    fn interchanges_in_parts(seed: usize, sets: usize) -> Vec<u8> {
        let isa = |n: u32| {
            format!("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240115*0930*U*00401*{n:09}*1*P*>~\r\n")
        };
        let every = |i: usize, n: usize| (i + seed) % n == n - 1;
        let group = |out: &mut String, gs01: &str, gs06: u32, sets: usize, ge: Option<usize>| {
            *out += &format!("GS*{gs01}*ACME*X12GATE*20240115*0930*{gs06}*X*004010~\r\n");
            for i in 0..sets {
                let st02 = if every(i, 7) { i / 2 + 1 } else { i + 1 };
                if every(i, 19) {
                    *out += "REF*XX*STRAY~\r\n";
                }
                let indent = if every(i, 29) { "  " } else { "" };
                let st01 = match (every(i, 23), gs01) {
                    (true, _) => "999",
                    (false, "IN") => "810",
                    _ => "850",
                };
                let mut body = vec![
                    format!("BEG*00*SA*PO-{i}**20240115"),
                    // Names a reader could take for an interchange's end.
                    "REF*DP*038*PAID BY VISA".to_string(),
                    "N1*BY*IEA TOOLS".to_string(),
                    "N1*ST*ACME DC 7*92*0007".to_string(),
                    format!("PO1*1*{}*EA*4.25*PE*UP*012345678905", i + 1),
                    "CTT*1".to_string(),
                ];
                if every(i, 17) {
                    body.insert(2, "b*1".into());
                }
                if every(i, 31) {
                    body.insert(3, format!("N3*{}", "X".repeat(300)));
                }
                *out += &format!("{indent}ST*{st01}*{st02:04}~\r\n");
                for segment in &body {
                    *out += &format!("{indent}{segment}~\r\n");
                }
                let counted = body.len() + 2 + usize::from(every(i, 11));
                if !every(i, 13) {
                    *out += &format!("{indent}SE*{counted}*{st02:04}~\r\n");
                }
            }
            if let Some(ge01) = ge {
                *out += &format!("GE*{ge01}*{gs06}~\r\n");
            }
        };
        let mut out = isa(101);
        out += "TA1*000000090*240115*0930*A*000~\r\n";
        group(&mut out, "PO", 1, sets, Some(sets + 1));
        group(&mut out, "IN", 1, sets, Some(sets));
        group(&mut out, "PO", 1, sets, Some(sets));
        out += "IEA*2*000000101~\r\n";
        out += &isa(102);
        group(&mut out, "PO", 5, sets / 2, None);
        out += &isa(103);
        group(&mut out, "PO", 9, 2, Some(2));
        out += "IEA*1*000000103~\r\n";
        out.into_bytes()
    }

    /// How many parts, not the last of their interchange, a reading in parts gives.
    fn cut_parts(input: &[u8], window: usize, limits: Limits) -> usize {
        let from = Box::new(std::io::Cursor::new(input.to_vec()));
        let mut reader = Reader::new(from, "parts", limits, window).in_parts();
        let mut cut = 0;
        while let Some(piece) = reader.next_piece().unwrap() {
            let mut read = piece.interchanges();
            cut += read
                .by_ref()
                .flatten()
                .filter(|ic| !ic.is_last_part())
                .count();
            let resume = read.resume();
            reader.advance(resume);
        }
        cut
    }

    #[test]
    fn an_interchange_read_in_parts_is_found_to_break_what_it_breaks_whole() {
        let schemas = crate::schema::builtin().unwrap();
        let limits = Limits {
            max_element_len: 200,
            ..Limits::default()
        };
        let input = interchanges_in_parts(0, 120);
        for checks in [Checks::default(), Checks::definitions(schemas)] {
            let whole: Vec<String> = file_on(&input, limits, &checks, 1)
                .iter()
                .map(|f| format!("{f:?}"))
                .collect();
            let rules: HashSet<String> = file_on(&input, limits, &checks, 1)
                .iter()
                .map(|f| format!("{:?}", f.rule))
                .collect();
            for rule in [
                "StDuplicateControlNumber",
                "GsDuplicateControlNumber",
                "GeSetCount",
                "IeaGroupCount",
                "IeaMissing",
                "GeMissing",
                "SeMissing",
                "SeSegmentCount",
                "SegmentOutsideEnvelope",
                "BlankBeforeSegment",
                "SegmentIdInvalid",
                "LimitExceeded",
            ] {
                assert!(rules.contains(rule), "{rule} not found in {rules:?}");
            }
            for window in [600, 1_000, 2_345, 5_000, 13_000, 40_000] {
                assert!(cut_parts(&input, window, limits) > 0, "window {window}");
                let parts = in_pieces(&input, window, &checks, limits, true);
                assert_eq!(parts, whole, "window {window}");
            }
        }
    }

    const PARTS_ISA: &str = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240115*0930*U*00401*000000101*1*P*>~\n";

    /// The ISA, a GS and `n` small sets, clean.
    fn sets_in_a_group(n: usize) -> String {
        let mut s = String::from(PARTS_ISA);
        s += "GS*PO*ACME*X12GATE*20240115*0930*1*X*004010~\n";
        for i in 1..=n {
            s += &format!("ST*850*{i:04}~\nBEG*00*SA*1**20240115~\nSE*3*{i:04}~\n");
        }
        s
    }

    fn whole_envelope(input: &[u8], limits: Limits) -> Vec<String> {
        file_on(input, limits, &Checks::default(), 1)
            .iter()
            .map(|f| format!("{f:?}"))
            .collect()
    }

    /// Cut once, then no set to cut at before the piece holds all it may: the interchange is
    /// too large, said once (it was said forever, the piece growing without end).
    #[test]
    fn a_part_with_no_set_to_cut_at_up_to_the_limit_is_too_large_once() {
        let limits = Limits {
            max_interchange_bytes: 3000,
            ..Limits::default()
        };
        let mut s = sets_in_a_group(20);
        s += "ST*850*0100~\n";
        while s.len() < 9000 {
            s += "REF*DP*038~\n";
        }
        s += "SE*2*0100~\nGE*21*1~\nIEA*1*000000101~\n";
        let from = Box::new(std::io::Cursor::new(s.clone().into_bytes()));
        let mut reader = Reader::new(from, "t", limits, 600).in_parts();
        let mut errors = Vec::new();
        'read: while let Some(piece) = reader.next_piece().unwrap() {
            let mut read = piece.interchanges();
            for item in read.by_ref() {
                if let Err(e) = item {
                    errors.push(e.offset);
                    if errors.len() > 10 {
                        break 'read;
                    }
                }
            }
            let resume = read.resume();
            reader.advance(resume);
        }
        assert_eq!(errors, vec![0]);
        let parts = in_pieces(s.as_bytes(), 600, &Checks::default(), limits, true);
        assert_eq!(parts, whole_envelope(s.as_bytes(), limits));
    }

    /// An ST whose element is over the limit, where a part is cut: its breach is in its own
    /// set (it was in the set before it, whose SE is missing, read whole).
    #[test]
    fn an_element_breach_in_the_st_a_part_is_cut_at_is_in_its_own_set() {
        let limits = Limits {
            max_element_len: 20,
            ..Limits::default()
        };
        let mut s = sets_in_a_group(20);
        s += "ST*850*0021~\nBEG*00*SA*1**20240115~\n";
        let at = s.len();
        s += &format!(
            "ST*850*0022*{}~\nSE*2*0022~\nGE*22*1~\nIEA*1*000000101~\n",
            "X".repeat(30)
        );
        let whole = file_on(s.as_bytes(), limits, &Checks::default(), 1);
        let breach = whole
            .iter()
            .find(|f| f.rule == Rule::LimitExceeded)
            .unwrap();
        assert_eq!(breach.position.set_segment, Some(1));
        let parts = in_pieces(s.as_bytes(), at + 20, &Checks::default(), limits, true);
        assert_eq!(parts, whole_envelope(s.as_bytes(), limits));
    }

    /// After an interchange too large, reading goes on at the same ISA whole and in parts
    /// (an `ISA` in a value before the limit, `PAID BY VISA~`, is not one).
    #[test]
    fn after_an_interchange_too_large_reading_goes_on_where_it_does_whole() {
        let limits = Limits {
            max_interchange_bytes: 3000,
            ..Limits::default()
        };
        let mut s = String::from(PARTS_ISA);
        s += "GS*PO*ACME*X12GATE*20240115*0930*1*X*004010~\n";
        s += "ST*850*0001~\nN1*PR*PAID BY VISA~\nSE*3*0001~\n";
        let mut i = 2;
        while s.len() < 4000 {
            s += &format!("ST*850*{i:04}~\nBEG*00*SA*1**20240115~\nSE*3*{i:04}~\n");
            i += 1;
        }
        s += &format!("GE*{}*1~\nIEA*1*000000101~\n", i - 1);
        s += PARTS_ISA;
        s += "IEA*0*000000101~\n";
        let whole = whole_envelope(s.as_bytes(), limits);
        assert!(whole[0].contains("InterchangeTooLarge"), "{whole:?}");
        assert_eq!(whole.len(), 1, "the next interchange is clean: {whole:?}");
        let parts = in_pieces(s.as_bytes(), 600, &Checks::default(), limits, true);
        assert_eq!(parts, whole);
    }

    /// An ISA field may hold the terminator and `ST`: a part is never cut inside the ISA.
    #[test]
    fn a_part_is_never_cut_inside_the_isa() {
        let mut s = PARTS_ISA.replacen("*00*          *", "*00*       ~ST*", 1);
        s += &"TA1*000000090*240115*0930*A*000~\n".repeat(40);
        s += "IEA*0*000000101~\n";
        let parts = in_pieces(
            s.as_bytes(),
            600,
            &Checks::default(),
            Limits::default(),
            true,
        );
        assert_eq!(parts, whole_envelope(s.as_bytes(), Limits::default()));
    }

    /// With a tab for element separator, a tab before `ST` is not a blank to skip: the
    /// segment is cut where the whole reading cuts it.
    #[test]
    fn a_tab_separator_before_st_is_not_a_blank_where_a_part_is_cut() {
        let mut s = sets_in_a_group(20).replace('*', "\t");
        s += "ST\t850\t0100~\nBEG\t00\tSA\t1\t\t20240115~\n";
        let at = s.len();
        s += "\tST\t850\t0101~\nSE\t3\t0100~\nGE\t21\t1~\nIEA\t1\t000000101~\n";
        let parts = in_pieces(
            s.as_bytes(),
            at + 20,
            &Checks::default(),
            Limits::default(),
            true,
        );
        assert_eq!(parts, whole_envelope(s.as_bytes(), Limits::default()));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Any window, down to a few segments, and any place of the oddities.
        #[test]
        fn in_parts_at_any_window_the_findings_are_those_of_the_whole(
            seed in 0usize..1000,
            window in 300usize..30_000,
            definitions: bool,
        ) {
            let limits = Limits { max_element_len: 200, ..Limits::default() };
            let input = interchanges_in_parts(seed, 60);
            let checks = if definitions {
                Checks::definitions(crate::schema::builtin().unwrap())
            } else {
                Checks::default()
            };
            let whole: Vec<String> = file_on(&input, limits, &checks, 1)
                .iter()
                .map(|f| format!("{f:?}"))
                .collect();
            proptest::prop_assert_eq!(in_pieces(&input, window, &checks, limits, true), whole);
        }
    }

    #[test]
    fn gs01_is_held_to_its_own_release_s_list_and_only_with_definitions() {
        let rules = |gs: &str, st01: &str, checks: &Checks<'_>| {
            let text = format!("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000001*0*P*:~{gs}~ST*{st01}*0001~SE*2*0001~GE*1*1~IEA*1*000000001~");
            let ic = Interchanges::new(text.as_bytes(), Limits::default())
                .next()
                .unwrap()
                .unwrap();
            let envelope: Vec<Rule> = interchange(&ic, checks, [])
                .iter()
                .filter(|f| f.detail.is_none() && f.rule != Rule::EnvelopeLevelOnly)
                .map(|f| f.rule)
                .collect();
            envelope
        };
        let with = Checks::definitions(crate::schema::builtin().unwrap());
        let without = Checks::default();
        let unknown = Rule::GsFunctionalIdUnknown;
        // TE (283) is a code of 005010, not of 004010; FH (218) the other way round.
        let te = |v: &str| format!("GS*TE*A*B*20240101*1200*1*X*{v}");
        assert_eq!(rules(&te("005010"), "283", &with), []);
        assert_eq!(rules(&te("004010VICS"), "283", &with), [unknown]);
        assert_eq!(rules(&te("004010"), "283", &without), []);
        let fh = "GS*FH*A*B*20240101*1200*1*X*004010";
        assert_eq!(rules(fh, "218", &with), []);
        // Releases without a dictionary here are not held to another release's list.
        assert_eq!(rules(&te("004030"), "283", &with), []);
        // ST01 against GS01: from 004010, with or without definitions; not before.
        let po = |v: &str| format!("GS*PO*A*B*20240101*1200*1*X*{v}");
        let mismatch = Rule::StNotInFunctionalGroup;
        assert_eq!(rules(&po("004010"), "864", &without), [mismatch]);
        assert_eq!(rules(&po("006020"), "864", &without), [mismatch]);
        assert_eq!(rules(&po("003040"), "864", &without), []);
        // A set the table does not have is not checked.
        assert_eq!(rules(&po("004010"), "306", &without), []);
    }

    #[test]
    fn a_tolerated_layout_is_a_warning_unless_the_partner_is_strict() {
        let rules = |f: &[Finding]| f.iter().map(|f| (f.rule, f.code)).collect::<Vec<_>>();
        assert_eq!(
            rules(&findings(false)),
            [
                (Rule::BlankBeforeSegment, None),
                (Rule::FinalTerminatorMissing, None)
            ]
        );
        let rejected = Some(Code::Ta105(Ta105::InvalidContent));
        assert_eq!(
            rules(&findings(true)),
            [
                (Rule::BlankBeforeSegment, rejected),
                (Rule::FinalTerminatorMissing, rejected)
            ]
        );
    }
}
