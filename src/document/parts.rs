//! Documents that are parts of a set: one per iteration of a loop the definition names
//! (`per = "2300"`: each claim of an 837 is a document, not the batch that carries it).
//!
//! A part is its iteration and the loops around it: the iterations that enclose it (an 837
//! claim's patient, subscriber and billing provider levels) with their own segments and
//! the loops under them that cannot hold such an iteration (the names, 2010AA, 2010BA),
//! and what stands in the set itself (its heading: BHT, 1000A, 1000B; and any segment after
//! the loops). Its siblings and their levels are left out, and so is a level that holds no
//! iteration at all (a subscriber level without a claim), which no document carries.

use crate::schema::check::walk;
use crate::schema::{PerLoop, SetDef};
use crate::x12::{Delimiters, Interchange, Segment, SegmentWriter, Segments, TransactionSet};

/// What a run of a part's segments is to the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// What stands in the set itself (its heading): delivered, and fingerprinted but for
    /// what numbers the batch (BHT03 to BHT05).
    Heading,
    /// The enclosing levels: delivered, and fingerprinted but for their numbers (HL01,
    /// HL02, HL04).
    Context,
    /// The iteration itself: its fields name the document.
    Own,
}

/// Consecutive segments of the set, by their place in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// File offset of the first segment.
    pub start: usize,
    /// File offset just past the last segment's bytes (its terminator excluded).
    pub end: usize,
    pub segments: u32,
    pub role: Role,
}

/// One document of a set cut by loop: a few numbers, so that a large interchange's parts
/// cost little until their files are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Its place among the set's parts, from 0.
    pub index: usize,
    /// In file order.
    pub runs: Box<[Run]>,
    /// File offsets of the segments its document's fields are read from, one per place of
    /// [`crate::schema::DocumentSpec::places`] (`usize::MAX`: none in the part): found as
    /// the set is cut, where each segment's loop is known.
    pub named_by: Box<[usize]>,
}

/// An iteration met while walking: the iteration it is in, the part it belongs to and,
/// outside parts, the iteration its segments go with.
struct Iteration {
    parent: usize,
    part: Option<usize>,
    anchor: usize,
}

/// A set cut by loop: its parts, and the segments no part takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub parts: Vec<Part>,
    /// File offsets of the segments of levels that hold no part (an 837 subscriber level
    /// without a claim): no document carries them.
    pub left_out: Vec<usize>,
}

/// The parts of `set`, one per iteration of `per`'s loop, in file order. `None` when the
/// set holds no such iteration, has a segment the definition has no place for, or would
/// repeat too much of itself in its parts (a 276 whose many payer names every claim would
/// carry): cutting it would lose a segment or cost time and space quadratic in the set.
pub fn parts(set: &TransactionSet<'_>, def: &SetDef, per: &PerLoop) -> Option<Cut> {
    let walked = walk(def, set, 0, 0, true);
    // Iteration 0 is the set itself.
    let mut iterations = vec![Iteration {
        parent: 0,
        part: None,
        anchor: 0,
    }];
    let mut stack = vec![0usize];
    let mut tops: Vec<usize> = Vec::new();
    // By segment: (file offset, end, iteration, node).
    let mut segments: Vec<(usize, usize, usize, usize)> = Vec::with_capacity(walked.places.len());
    for (segment, place) in set.body.segments().zip(&walked.places) {
        let place = (*place)?;
        stack.truncate(place.kept.max(1));
        if let Some(node) = place.opened {
            let parent = *stack.last()?;
            let up = iterations.get(parent)?;
            let (part, anchor) = match up.part {
                Some(p) => (Some(p), parent),
                None if per.is(&def.nodes, node) => {
                    tops.push(iterations.len());
                    (Some(tops.len() - 1), iterations.len())
                }
                None if per.holds(node) => (None, iterations.len()),
                None => (None, up.anchor),
            };
            iterations.push(Iteration {
                parent,
                part,
                anchor,
            });
            stack.push(iterations.len() - 1);
        }
        let at = *stack.last()?;
        segments.push((
            segment.offset,
            segment.offset + segment.raw.len(),
            at,
            place.node,
        ));
    }
    if tops.is_empty() || segments.len() != walked.places.len() {
        return None;
    }
    // The segments that go with each iteration outside parts, and each part's own.
    let mut anchored: Vec<Vec<usize>> = vec![Vec::new(); iterations.len()];
    let mut own: Vec<Vec<usize>> = vec![Vec::new(); tops.len()];
    for (i, (_, _, at, _)) in segments.iter().enumerate() {
        let it = iterations.get(*at)?;
        match it.part {
            Some(p) => own.get_mut(p)?.push(i),
            None => anchored.get_mut(it.anchor)?.push(i),
        }
    }
    // Each part repeats its levels: bounded, so that no set costs more than a few times
    // itself (an 837's claims repeat two or three times their own size).
    let budget = segments.len().saturating_mul(8).max(100_000);
    let places = def
        .document
        .as_ref()
        .map(|d| d.places())
        .unwrap_or_default();
    let mut total = 0usize;
    let mut taken = vec![false; iterations.len()];
    let mut parts = Vec::with_capacity(tops.len());
    for (index, (top, own)) in tops.iter().zip(own).enumerate() {
        let mut picked: Vec<(usize, Role)> = own.into_iter().map(|i| (i, Role::Own)).collect();
        let mut up = iterations.get(*top)?.parent;
        loop {
            if let Some(t) = taken.get_mut(up) {
                *t = true;
            }
            let role = if up == 0 {
                Role::Heading
            } else {
                Role::Context
            };
            picked.extend(anchored.get(up)?.iter().map(|i| (*i, role)));
            if up == 0 {
                break;
            }
            up = iterations.get(up)?.parent;
        }
        total = total.saturating_add(picked.len());
        if total > budget {
            return None;
        }
        picked.sort_unstable_by_key(|(i, _)| *i);
        parts.push(Part {
            index,
            runs: runs(&picked, &segments).into_boxed_slice(),
            named_by: named_by(&places, &picked, &segments, def),
        });
    }
    let left_out = anchored
        .iter()
        .zip(&taken)
        .filter(|(_, taken)| !**taken)
        .flat_map(|(held, _)| held.iter().filter_map(|i| segments.get(*i).map(|s| s.0)))
        .collect();
    Some(Cut { parts, left_out })
}

/// For each place a field is read from, the first of the part's segments there: of its own
/// iteration for a place without a loop, else standing directly in that loop.
fn named_by(
    places: &[(&str, Option<&str>)],
    picked: &[(usize, Role)],
    segments: &[(usize, usize, usize, usize)],
    def: &SetDef,
) -> Box<[usize]> {
    places
        .iter()
        .map(|(id, in_loop)| {
            picked
                .iter()
                .filter_map(|(i, role)| Some((segments.get(*i)?, role)))
                .find(|((_, _, _, node), role)| {
                    let Some(n) = def.nodes.get(*node) else {
                        return false;
                    };
                    n.id == *id
                        && match in_loop {
                            None => **role == Role::Own,
                            Some(l) => def
                                .nodes
                                .get(n.parent)
                                .is_some_and(|p| p.is_loop() && p.id == *l),
                        }
                })
                .map_or(usize::MAX, |((offset, ..), _)| *offset)
        })
        .collect()
}

/// Consecutive segments of one role joined into runs.
fn runs(picked: &[(usize, Role)], segments: &[(usize, usize, usize, usize)]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let mut last: Option<usize> = None;
    for (i, role) in picked {
        let Some((start, end, ..)) = segments.get(*i) else {
            continue;
        };
        match runs.last_mut() {
            Some(run) if last.is_some_and(|l| l + 1 == *i) && run.role == *role => {
                run.end = *end;
                run.segments = run.segments.saturating_add(1);
            }
            _ => runs.push(Run {
                start: *start,
                end: *end,
                segments: 1,
                role: *role,
            }),
        }
        last = Some(*i);
    }
    runs
}

/// A part's segments with what each is to it (heading, levels, own), in file order, cut
/// from the interchange's input.
pub fn segments<'a>(
    ic: &Interchange<'a>,
    part: &'a Part,
) -> impl Iterator<Item = (Segment<'a>, Role)> + 'a {
    let input = ic.input();
    let (base, delimiters) = (ic.base, ic.delimiters());
    part.runs.iter().flat_map(move |r| {
        let (from, to) = (r.start.saturating_sub(base), r.end.saturating_sub(base));
        // The run's last segment ends at `to`; its terminator follows.
        Segments::new(input, from, to.saturating_add(1), 0, delimiters)
            .in_file_at(base)
            .take(r.segments as usize)
            .map(move |s| (s, r.role))
    })
}

/// The part as a set of its own: the set's ST, the part's segments and an SE counting them,
/// in the interchange's delimiters.
pub fn as_set_bytes(ic: &Interchange<'_>, set: &TransactionSet<'_>, part: &Part) -> Vec<u8> {
    let d: Delimiters = ic.delimiters();
    let size: usize = part
        .runs
        .iter()
        .map(|r| r.end.saturating_sub(r.start) + 1)
        .sum();
    let out = Vec::with_capacity(size + set.st.raw.len() + 32);
    let mut w = SegmentWriter::appending(out, d, b"");
    w.begin_set();
    w.raw(set.st.raw);
    for (s, _) in segments(ic, part) {
        w.raw(s.raw);
    }
    let count = w.se01().to_string();
    w.segment(
        b"SE",
        &[count.as_bytes(), set.st.element(2).unwrap_or_default()],
    );
    w.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::with_first_set;

    /// Each part's segments, as `ID*E1*E2` texts (the first two elements), with their role.
    fn cut(text: &str) -> Option<Vec<Vec<(Role, String)>>> {
        with_first_set(text, |ic, set, def| {
            let per = def.document.as_ref()?.per.as_ref()?;
            let cut = parts(set, def, per)?;
            Some(
                cut.parts
                    .iter()
                    .map(|p| {
                        segments(ic, p)
                            .map(|(s, role)| {
                                let e = |n| {
                                    String::from_utf8_lossy(s.element(n).unwrap_or_default())
                                        .into_owned()
                                };
                                (role, format!("{}*{}*{}", s.id_str(), e(1), e(2)))
                            })
                            .collect()
                    })
                    .collect(),
            )
        })
    }

    /// The cut of `text`'s first set: its parts and what is left out.
    fn cut_of(text: &str) -> Option<Cut> {
        with_first_set(text, |_, set, def| {
            parts(set, def, def.document.as_ref()?.per.as_ref()?)
        })
    }

    fn of(part: &[(Role, String)], role: Role) -> Vec<&str> {
        part.iter()
            .filter(|(r, _)| *r == role)
            .map(|(_, s)| s.as_str())
            .collect()
    }

    #[test]
    fn a_claim_is_cut_with_its_levels_and_without_its_neighbours() {
        let parts = cut(include_str!("../../fixtures/837-005010X222A1.x12")).unwrap();
        assert_eq!(parts.len(), 2);
        for part in &parts {
            assert_eq!(
                of(part, Role::Heading),
                [
                    "BHT*0019*00",
                    "NM1*41*2",
                    "PER*IC*BILLING OFFICE",
                    "NM1*40*2"
                ]
            );
        }
        // The first claim is the subscriber's (HL 2), the second its dependent's (HL 4,
        // under subscriber HL 3): neither holds the other's levels.
        let hl = |part: &[(Role, String)]| -> Vec<String> {
            of(part, Role::Context)
                .into_iter()
                .filter(|s| s.starts_with("HL*"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(hl(&parts[0]), ["HL*1*", "HL*2*1"]);
        assert_eq!(hl(&parts[1]), ["HL*1*", "HL*3*1", "HL*4*3"]);
        assert!(of(&parts[0], Role::Context).contains(&"NM1*85*2"));
        assert!(of(&parts[1], Role::Context).contains(&"PAT*19*"));
        let own = of(&parts[1], Role::Own);
        assert_eq!(own.first(), Some(&"CLM*NWFC-24-00872*95"));
        assert!(!own.iter().any(|s| s.starts_with("CLM*NWFC-24-00871")));
        assert_eq!(own.len(), 5);
    }

    #[test]
    fn claims_asked_about_at_both_levels_are_cut_each_with_its_subscriber() {
        let parts = cut(include_str!("../../fixtures/276-005010X212.x12")).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(of(&parts[0], Role::Own)[0], "TRN*1*NWFC-CS-0001");
        let dependent = of(&parts[1], Role::Context);
        // The dependent's claim (2200E) goes with its subscriber's name (2100D) and its own
        // level, not with the other subscriber's claim.
        assert!(dependent.contains(&"NM1*IL*1"), "{dependent:?}");
        assert!(dependent.contains(&"NM1*QC*1"), "{dependent:?}");
        assert!(!dependent.contains(&"HL*4*3"), "{dependent:?}");
        assert_eq!(of(&parts[1], Role::Own)[0], "TRN*1*NWFC-CS-0002");
    }

    #[test]
    fn a_level_no_part_takes_is_left_out_and_the_rest_is_cut() {
        let text = include_str!("../../fixtures/837-005010X222A1.x12");
        // A subscriber level without a claim (2300 and 2000C are both optional there).
        let at = text.find("HL*3*1*22*1").unwrap();
        let empty = "HL*9*1*22*0~\nSBR*P*18*GRP-1******CI~\nNM1*IL*1*DOE*JO****MI*X1~\nNM1*PR*2*EXAMPLE HEALTH PLAN*****PI*841234567~\n";
        let with = format!("{}{empty}{}", &text[..at], &text[at..]).replacen("SE*52", "SE*56", 1);
        let cut = cut_of(&with).unwrap();
        assert_eq!(cut.parts.len(), 2);
        assert_eq!(cut.left_out.len(), 4);
        assert_eq!(cut.left_out[0], at);
    }

    #[test]
    fn a_set_whose_parts_would_repeat_it_too_often_is_not_cut() {
        // A 276 whose claims each carry every payer name of its information source level.
        let names = 400;
        let mut body = String::from("BHT*0010*13*B1*20240318*0915~HL*1**20*1~");
        for i in 0..names {
            body.push_str(&format!("NM1*PR*2*PAYER {i}*****PI*{i}~"));
        }
        body.push_str("HL*2*1*21*1~NM1*41*2*CLINIC*****46*C1~HL*3*2*19*1~NM1*1P*2*CLINIC*****XX*1234567893~HL*4*3*22*0~NM1*IL*1*DOE*JO****MI*X1~");
        for i in 0..names {
            body.push_str(&format!("TRN*1*T{i}~AMT*T3*10~DTP*472*D8*20240228~"));
        }
        let count = body.matches('~').count() + 2;
        let text = format!("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240318*0915*^*00501*000000001*0*P*:~GS*HR*ACME*X12GATE*20240318*0915*1*X*005010X212~ST*276*0001*005010X212~{body}SE*{count}*0001~GE*1*1~IEA*1*000000001~");
        assert!(cut_of(&text).is_none());
        // With one name the same set is cut, a claim each.
        let small = text
            .split('~')
            .filter(|s| !s.starts_with("NM1*PR*2*PAYER ") || s.ends_with("PI*0"))
            .collect::<Vec<_>>()
            .join("~")
            .replace(
                &format!("SE*{count}*"),
                &format!("SE*{}*", count - names + 1),
            );
        assert_eq!(cut_of(&small).unwrap().parts.len(), names);
    }
}

#[cfg(test)]
mod props {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    /// A subscriber: its own claims' amounts, and its dependents' (each a patient level).
    type Subscriber = (Vec<u32>, Vec<Vec<u32>>);

    /// An 837P of these subscribers in this order, numbering the levels as it goes; a
    /// claim's number says whose it is (subscriber, dependent, place).
    fn batch(batch: &str, subscribers: &[(usize, Subscriber)]) -> String {
        let mut body = format!("BHT*0019*00*{batch}*20240305*1130*CH~NM1*41*2*CLINIC*****46*C1~NM1*40*2*PLAN*****46*841234567~HL*1**20*1~NM1*85*2*CLINIC*****XX*1234567893~N3*1 MAIN~N4*SPRINGFIELD*IL*62704~REF*EI*371234567~");
        let mut hl = 1;
        for (s, (own, dependents)) in subscribers {
            hl += 1;
            let parent = hl;
            let child = u8::from(!dependents.is_empty());
            body.push_str(&format!("HL*{hl}*1*22*{child}~SBR*P*18*G1******CI~NM1*IL*1*DOE*S{s}****MI*M{s}~NM1*PR*2*PLAN*****PI*841234567~"));
            for (c, amount) in own.iter().enumerate() {
                body.push_str(&format!("CLM*S{s}C{c}*{amount}***11:B:1*Y*A*Y*Y~HI*ABK:J029~LX*1~SV1*HC:99212*{amount}*UN*1***1~"));
            }
            for (d, claims) in dependents.iter().enumerate() {
                hl += 1;
                body.push_str(&format!("HL*{hl}*{parent}*23*0~PAT*19~NM1*QC*1*DOE*D{s}{d}~N3*2 ELM~N4*SPRINGFIELD*IL*62704~DMG*D8*20150101*M~"));
                for (c, amount) in claims.iter().enumerate() {
                    body.push_str(&format!("CLM*S{s}D{d}C{c}*{amount}***11:B:1*Y*A*Y*Y~HI*ABK:J029~LX*1~SV1*HC:99212*{amount}*UN*1***1~"));
                }
            }
        }
        let count = body.matches('~').count() + 2;
        format!("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240305*1130*^*00501*000000001*0*P*:~GS*HC*ACME*X12GATE*20240305*1130*1*X*005010X222A1~ST*837*0001*005010X222A1~{body}SE*{count}*0001~GE*1*1~IEA*1*000000001~")
    }

    /// Each document's key and fingerprint, and how many CLM segments its own part holds.
    fn documents(text: &str) -> (BTreeMap<String, String>, Vec<usize>) {
        crate::document::with_first_set(text, |ic, set, def| {
            let found = crate::document::identify_all(ic, set, def);
            let clms = found
                .iter()
                .filter_map(|d| d.part.as_ref())
                .map(|part| {
                    super::segments(ic, part)
                        .filter(|(s, role)| *role == super::Role::Own && s.is(b"CLM"))
                        .count()
                })
                .collect();
            let keys = found.into_iter().map(|d| (d.key, d.fingerprint)).collect();
            (keys, clms)
        })
    }

    fn subscriber() -> impl Strategy<Value = Subscriber> {
        (
            proptest::collection::vec(1u32..999, 0..3),
            proptest::collection::vec(proptest::collection::vec(1u32..999, 1..3), 0..3),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Every claim is a document of its own, and a clearinghouse that batches the same
        /// claims again in another order (other level numbers, another batch id) sends the
        /// same documents: same keys, same content.
        #[test]
        fn claims_batched_again_in_any_order_are_the_same_documents(
            subscribers in proptest::collection::vec(subscriber(), 1..6),
            seed in any::<u64>(),
        ) {
            let numbered: Vec<(usize, Subscriber)> = subscribers.into_iter().enumerate().collect();
            // A subscriber without any claim is left out of the documents; it must not
            // make the others change.
            let claims: usize = numbered
                .iter()
                .map(|(_, (own, deps))| own.len() + deps.iter().map(Vec::len).sum::<usize>())
                .sum();
            let (first, clms) = documents(&batch("B1", &numbered));
            prop_assert_eq!(first.len(), claims);
            prop_assert!(clms.iter().all(|n| *n == 1), "{:?}", clms);
            let mut shuffled = numbered.clone();
            let mut x = seed | 1;
            for i in (1..shuffled.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let (again, _) = documents(&batch("B2", &shuffled));
            prop_assert_eq!(first, again);
        }
    }
}
