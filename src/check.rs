//! The one place an interchange's findings are put together: routing, the envelope rules,
//! the sets' definitions and what the registry found (groups seen before), in that order
//! (it matters: the TA1 answers with the first finding that rejects).
//! `validate`, `ack` and `process` all take their findings from here, so a rule added once
//! is in every path.

use crate::finding::{Code, Finding, Rule, Ta105};
use crate::input::{InputError, Reader};
use crate::schema::Schemas;
use crate::validate::{self, Routing};
use crate::x12::{Interchange, Interchanges, Limits};

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
    findings.extend(validate::interchange(ic).into_iter().map(|f| {
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

/// The sets against their definitions.
fn content(ic: &Interchange<'_>, checks: &Checks<'_>) -> Vec<Finding> {
    checks
        .schemas
        .map(|schemas| crate::schema::findings(ic, schemas))
        .unwrap_or_default()
}

/// Every finding of a whole file in memory, one interchange at a time; on every core for a
/// large file.
pub fn file(input: &[u8], limits: Limits, checks: &Checks<'_>) -> Vec<Finding> {
    file_on(input, limits, checks, workers())
}

/// [`file`] on at most `threads` threads (1: all on this one).
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
    let threads = workers();
    while let Some(piece) = reader.next_piece()? {
        let threads = if piece.bytes.len() >= PARALLEL_FROM {
            threads
        } else {
            1
        };
        let mut read = piece.interchanges();
        let findings = interchanges(&mut read, checks, threads);
        let resume = read.resume();
        each(findings);
        reader.advance(resume);
    }
    Ok(())
}

fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
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
