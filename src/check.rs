//! The one place an interchange's findings are put together: routing, the envelope rules,
//! the sets' definitions and what the registry found (groups seen before), in that order
//! (it matters: the TA1 answers with the first finding that rejects).
//! `validate`, `ack` and `process` all take their findings from here, so a rule added once
//! is in every path.

use crate::finding::{Code, Finding, Rule, Ta105};
use crate::input::{InputError, Piece, Reader};
use crate::schema::Schemas;
use crate::validate::{self, Routing};
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
}

impl<'a> Checks<'a> {
    /// Envelope rules and these definitions, no routing: what `validate` checks a file by.
    pub fn definitions(schemas: &'a Schemas) -> Checks<'a> {
        Checks {
            schemas: Some(schemas),
            routing: None,
            strict_layout: false,
        }
    }
}

/// Every finding of one interchange, with `extra` (the registry's) last.
pub fn interchange(
    ic: &Interchange<'_>,
    checks: &Checks<'_>,
    extra: impl IntoIterator<Item = Finding>,
) -> Vec<Finding> {
    let mut findings = envelope(ic, checks);
    findings.extend(content(ic, checks));
    findings.extend(extra);
    findings
}

/// The cheap part: routing and envelopes.
fn envelope(ic: &Interchange<'_>, checks: &Checks<'_>) -> Vec<Finding> {
    let mut findings = checks
        .routing
        .map(|us| validate::routing(ic, &us))
        .unwrap_or_default();
    // GS01 is checked against the release's 479 list only with the definitions: a partner
    // with `validation = "envelope"` has its groups read without the dictionaries.
    let rules = validate::interchange_with(ic, checks.schemas);
    findings.extend(rules.into_iter().map(|f| {
        let tolerated = matches!(
            f.rule,
            Rule::BlankBeforeSegment | Rule::FinalTerminatorMissing
        );
        if tolerated && checks.strict_layout {
            f.coded(Code::Ta105(Ta105::InvalidContent))
        } else {
            f
        }
    }));
    findings
}

/// The sets against their definitions: the sender's own guide when `partners.toml` gives
/// it one (chosen here, by ISA05/ISA06, so every command that checks an interchange reads it
/// as `process` does).
fn content(ic: &Interchange<'_>, checks: &Checks<'_>) -> Vec<Finding> {
    checks
        .schemas
        .map(|schemas| {
            let schemas = schemas.for_sender(ic.isa.trimmed(5), ic.isa.trimmed(6));
            crate::schema::findings(ic, schemas)
        })
        .unwrap_or_default()
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
    interchanges(&mut Interchanges::new(input, limits), checks, threads)
}

/// Every finding of a file read in pieces ([`Reader`]), handed to `each` a piece at a time,
/// in file order: memory is a piece, however large the file.
pub fn pieces(
    reader: &mut Reader,
    checks: &Checks<'_>,
    each: &mut dyn FnMut(Vec<Finding>),
) -> Result<(), InputError> {
    let threads = crate::cores::available();
    while let Some(piece) = reader.next_piece()? {
        let (findings, resume) = if piece.bytes.len() < PARALLEL_FROM {
            let mut read = piece.interchanges();
            (interchanges(&mut read, checks, 1), read.resume())
        } else {
            in_halves(&piece, checks, threads)
        };
        each(findings);
        reader.advance(resume);
    }
    Ok(())
}

/// A large piece read as two halves on two threads (reading the envelopes is what one
/// thread cannot keep up with), when a cut near its middle is confirmed by the first half;
/// else whole. The findings and the resume are those of reading it whole.
fn in_halves(piece: &Piece<'_>, checks: &Checks<'_>, threads: usize) -> (Vec<Finding>, Resume) {
    let whole = || {
        let mut read = piece.interchanges();
        (interchanges(&mut read, checks, threads), read.resume())
    };
    let Some((mut first, mut second, cut)) = piece.halves().filter(|_| threads > 1) else {
        return whole();
    };
    let each = (threads / 2).max(1);
    let (head, tail, confirmed) = std::thread::scope(|scope| {
        let tail = scope.spawn(move || {
            let found = interchanges(&mut second, checks, each);
            (found, second.resume())
        });
        let head = interchanges(&mut first, checks, each);
        let confirmed = first.ended_on_an_iea();
        (head, tail.join(), confirmed)
    });
    match tail {
        Ok((tail, resume)) if confirmed => {
            let mut findings = head;
            findings.extend(tail);
            (findings, resume.shifted(cut))
        }
        _ => whole(),
    }
}

/// The findings of what `read` gives, on `threads` threads when there are definitions.
fn interchanges(read: &mut Interchanges<'_>, checks: &Checks<'_>, threads: usize) -> Vec<Finding> {
    if checks.schemas.is_some() && threads > 1 {
        return in_parallel(read, checks, threads);
    }
    let mut findings = Vec::new();
    for result in read {
        match result {
            Ok(ic) => findings.extend(interchange(&ic, checks, [])),
            Err(e) => findings.push(validate::read_error(&e)),
        }
    }
    findings
}

/// Inputs from this size have their sets checked against definitions on every core.
const PARALLEL_FROM: usize = 1 << 20;

/// [`interchanges`] for a large input: this thread reads interchanges and checks envelopes
/// (the cheap part) while `workers` threads walk their sets against the definitions; at most
/// two interchanges per worker wait in between, so memory stays bounded. Findings come out in
/// the same order as from one thread.
fn in_parallel(read: &mut Interchanges<'_>, checks: &Checks<'_>, workers: usize) -> Vec<Finding> {
    use std::sync::{mpsc, Mutex};
    let mut envelopes: Vec<Vec<Finding>> = Vec::new();
    let mut contents: Vec<Vec<Finding>> = Vec::new();
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
                if done.send((i, content(&ic, checks))).is_err() {
                    return;
                }
            });
        }
        drop(done);
        for (i, result) in read.enumerate() {
            match result {
                Ok(ic) => {
                    envelopes.push(envelope(&ic, checks));
                    if jobs.send((i, ic)).is_err() {
                        break;
                    }
                }
                Err(e) => envelopes.push(vec![validate::read_error(&e)]),
            }
        }
        drop(jobs);
        contents.resize_with(envelopes.len(), Vec::new);
        for (i, found) in results {
            if let Some(slot) = contents.get_mut(i) {
                *slot = found;
            }
        }
    });
    envelopes
        .into_iter()
        .zip(contents)
        .flat_map(|(e, s)| e.into_iter().chain(s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let from = Box::new(std::io::Cursor::new(input.to_vec()));
        let mut reader = Reader::new(from, "large", Limits::default(), window);
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
            }
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
