//! Valid transaction sets generated from a definition, for property tests: every loop and
//! segment used between its requirement and a small bound, every element filled by its type,
//! length and code list, the relational conditions satisfied, HL levels numbered and parented.

use x12gate::schema::{DataType, ElementDef, Kind, Req, SetDef, Simple, Syntax, SyntaxKind};
use x12gate::x12::Delimiters;

use crate::rng::Rng;
use crate::segments::SegmentWriter;

/// Body segments (ST and SE excluded) of a valid set, as `(id, elements)` where an element
/// is a list of repetitions, each a list of components: render them with any delimiters.
pub fn body(def: &SetDef, seed: u64) -> Vec<(String, Vec<Vec<Vec<String>>>)> {
    let mut g = Generator {
        def,
        rng: Rng::new(seed),
        out: Vec::new(),
        hl: Vec::new(),
        next_hl: 1,
        must_nest: false,
    };
    g.children(0);
    child_codes(&mut g.out);
    g.out
}

/// HL04 (when sent) made true to what follows: `1` when a later level names the level as its
/// parent, else `0`.
fn child_codes(out: &mut [(String, Vec<Vec<Vec<String>>>)]) {
    let first = |elements: &[Vec<Vec<String>>], n: usize| -> Option<String> {
        elements.get(n)?.first()?.first().cloned()
    };
    let parents: std::collections::HashSet<String> = out
        .iter()
        .filter(|(id, _)| id == "HL")
        .filter_map(|(_, elements)| first(elements, 1))
        .collect();
    for (id, elements) in out.iter_mut() {
        if id != "HL" {
            continue;
        }
        let has_children = first(elements, 0).is_some_and(|hl01| parents.contains(&hl01));
        if let Some(hl04) = elements.get_mut(3).filter(|e| !e.is_empty()) {
            *hl04 = vec![vec![if has_children { "1" } else { "0" }.to_string()]];
        }
    }
}

/// Segments from [`body`] as X12 text with `*`, `:`, `^` and `~`, each segment followed by
/// `line_ending` (trailing empty elements dropped, as X12 requires; `body` makes none).
pub fn to_x12(segments: &[(String, Vec<Vec<Vec<String>>>)], line_ending: &str) -> String {
    let mut w = SegmentWriter::new(Delimiters::COMMON, line_ending.as_bytes(), 0);
    for (id, elements) in segments {
        w.composed(id, elements);
    }
    // Text in, ASCII delimiters between: always UTF-8.
    String::from_utf8(w.into_bytes())
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

struct Generator<'d> {
    def: &'d SetDef,
    rng: Rng,
    out: Vec<(String, Vec<Vec<Vec<String>>>)>,
    /// HL01s on the path from the top level to the current level.
    hl: Vec<u64>,
    next_hl: u64,
    /// The level just written said it has children (HL04 `1`, the only code some guides
    /// allow there): its first level loop is used at least once.
    must_nest: bool,
}

impl Generator<'_> {
    fn uses(&mut self, req: Req, max: u32) -> u32 {
        let cap = max.min(3);
        let lo = u32::from(req == Req::M);
        u32::try_from(self.rng.range(u64::from(lo), u64::from(cap))).unwrap_or(lo)
    }

    fn children(&mut self, node: usize) {
        let children = self.def.nodes[node].children.clone();
        for (i, child) in children.into_iter().enumerate() {
            let n = &self.def.nodes[child];
            // A loop's trigger was written by the loop itself.
            if node != 0 && i == 0 {
                continue;
            }
            let mut times = self.uses(n.req, n.max);
            let level = n.is_loop()
                && n.children
                    .first()
                    .is_some_and(|t| self.def.nodes[*t].id == "HL");
            if level && std::mem::take(&mut self.must_nest) {
                times = times.max(1);
            }
            for _ in 0..times {
                if n.is_loop() {
                    self.iteration(child);
                } else {
                    self.segment(child);
                }
            }
        }
    }

    fn iteration(&mut self, node: usize) {
        if Some(node) == self.def.hierarchy {
            self.levels(node, 0);
            return;
        }
        let trigger = self.def.nodes[node].children[0];
        if self.def.nodes[trigger].id == "HL" {
            // A guide's HL levels nest as loops of their own (2000A > 2000B): each level
            // numbered, its HL02 naming the enclosing level, as `levels` does.
            let id = self.next_hl;
            self.next_hl += 1;
            self.segment(trigger);
            self.must_nest = self.out.last().is_some_and(|(_, elements)| {
                elements.get(3).and_then(|e| e.first()?.first()) == Some(&"1".to_string())
            });
            self.hl.push(id);
            self.children(node);
            self.must_nest = false;
            self.hl.pop();
            return;
        }
        self.segment(trigger);
        self.children(node);
    }

    /// An HL level and, in pre-order, some levels under it (at most three deep).
    fn levels(&mut self, node: usize, depth: u32) {
        let id = self.next_hl;
        self.next_hl += 1;
        let trigger = self.def.nodes[node].children[0];
        self.segment(trigger);
        self.hl.push(id);
        self.children(node);
        if depth < 2 {
            for _ in 0..self.rng.range(0, 2) {
                self.levels(node, depth + 1);
            }
        }
        self.hl.pop();
    }

    fn segment(&mut self, node: usize) {
        let Some(def) = self.def.segment_of(node) else {
            return;
        };
        let id = def.id.clone();
        let count = def.elements.len();
        let present = presence(&mut self.rng, &def.elements, &def.syntax, count);
        let mut elements: Vec<Vec<Vec<String>>> = Vec::new();
        for (i, e) in def.elements.iter().enumerate() {
            if i >= 64 || present & (1 << i) == 0 {
                elements.push(Vec::new());
                continue;
            }
            let reps = if e.repeat > 1 {
                self.rng.range(1, 2)
            } else {
                1
            };
            let mut value: Vec<Vec<String>> = (0..reps).map(|_| self.value(e)).collect();
            if id == "HL" {
                // HL01 numbers the level, HL02 names its parent.
                match e.reference.as_str() {
                    "628" => value = vec![vec![self.next_hl.saturating_sub(1).to_string()]],
                    "734" => match self.hl.last() {
                        Some(parent) => value = vec![vec![parent.to_string()]],
                        None => value = Vec::new(),
                    },
                    _ => {}
                }
            }
            elements.push(value);
        }
        while elements.last().is_some_and(Vec::is_empty) {
            elements.pop();
        }
        self.out.push((id, elements));
    }

    fn value(&mut self, e: &ElementDef) -> Vec<String> {
        match &e.kind {
            Kind::Simple(s) => vec![simple(&mut self.rng, s)],
            Kind::Composite { components, syntax } => {
                let present = presence(&mut self.rng, components, syntax, components.len());
                let mut parts: Vec<String> = components
                    .iter()
                    .enumerate()
                    .map(|(i, c)| match (&c.kind, present & (1 << i) != 0) {
                        (Kind::Simple(s), true) => simple(&mut self.rng, s),
                        _ => String::new(),
                    })
                    .collect();
                while parts.last().is_some_and(String::is_empty) {
                    parts.pop();
                }
                if parts.is_empty() {
                    // A composite needs something in it to be present at all.
                    if let Some(Kind::Simple(s)) = components.first().map(|c| &c.kind) {
                        if components.first().is_some_and(|c| c.req != Req::N) {
                            parts.push(simple(&mut self.rng, s));
                        }
                    }
                }
                parts
            }
        }
    }
}

/// Which positions to fill (bit n-1 for position n): the mandatory ones, some optional ones,
/// and whatever the relational conditions then require (tried until they hold); never one a
/// guide marks not used.
fn presence(rng: &mut Rng, elements: &[ElementDef], syntax: &[Syntax], count: usize) -> u64 {
    let count = count.min(64);
    let with = |req: Req| -> u64 {
        elements
            .iter()
            .take(count)
            .enumerate()
            .filter(|(_, e)| e.req == req)
            .fold(0, |m, (i, _)| m | 1 << i)
    };
    let (mandatory, not_used) = (with(Req::M), with(Req::N));
    for attempt in 0..64 {
        let mut p = mandatory;
        for i in 0..count {
            if attempt < 48 && rng.percent(40) {
                p |= 1 << i;
            }
        }
        p &= !not_used;
        // Repair toward the conditions, then check them all.
        for s in syntax {
            let bits: Vec<u64> = s.positions.iter().map(|q| 1u64 << (q - 1)).collect();
            let any = bits.iter().any(|b| p & b != 0);
            let first = bits.first().copied().unwrap_or(0);
            match s.kind {
                SyntaxKind::Paired if any => bits.iter().for_each(|b| p |= b),
                SyntaxKind::Required if !any => p |= first,
                SyntaxKind::Exclusion => {
                    let mut kept = false;
                    for b in &bits {
                        if p & b != 0 {
                            if kept && mandatory & b == 0 {
                                p &= !b;
                            }
                            kept = true;
                        }
                    }
                }
                SyntaxKind::Conditional if p & first != 0 => bits.iter().for_each(|b| p |= b),
                SyntaxKind::ListConditional
                    if p & first != 0 && !bits.iter().skip(1).any(|b| p & b != 0) =>
                {
                    p |= bits.get(1).copied().unwrap_or(0);
                }
                _ => {}
            }
        }
        if p & not_used == 0 && !syntax.iter().any(|s| s.violated(p)) {
            return p;
        }
    }
    mandatory
}

fn simple(rng: &mut Rng, s: &Simple) -> String {
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let min = u64::from(s.min.max(1));
    let len = usize::try_from(rng.range(min, u64::from(s.max).min(min + 8))).unwrap_or(1);
    let digits = |rng: &mut Rng, n: usize| -> String {
        (0..n)
            .map(|i| {
                // No leading zero, so the length is what it looks like.
                let d = if i == 0 {
                    rng.range(1, 9)
                } else {
                    rng.range(0, 9)
                };
                char::from(b'0' + u8::try_from(d).unwrap_or(0))
            })
            .collect()
    };
    match s.data_type {
        DataType::Id => {
            if let Some(codes) = &s.codes {
                let list = codes.list();
                let pick = usize::try_from(rng.below(list.len() as u64)).unwrap_or(0);
                if let Some(code) = list.get(pick) {
                    return String::from_utf8_lossy(code).into_owned();
                }
            }
            (0..len)
                .map(|_| char::from(ALNUM[usize::try_from(rng.range(0, 35)).unwrap_or(0)]))
                .collect()
        }
        DataType::An | DataType::B => (0..len)
            .map(|_| char::from(ALNUM[usize::try_from(rng.range(0, 35)).unwrap_or(0)]))
            .collect(),
        DataType::N(_) => digits(rng, len),
        DataType::R => {
            let v = digits(rng, len);
            if len > 1 && rng.percent(50) {
                let at = usize::try_from(rng.range(1, len as u64 - 1)).unwrap_or(1);
                format!("{}.{}", &v[..at], &v[at..])
            } else {
                v
            }
        }
        DataType::Dt => {
            let (y, m, d) = (rng.range(2000, 2030), rng.range(1, 12), rng.range(1, 28));
            if s.max >= 8 && s.min <= 8 {
                format!("{y:04}{m:02}{d:02}")
            } else {
                format!("{:02}{m:02}{d:02}", y % 100)
            }
        }
        DataType::Tm => {
            let (h, m, sec) = (rng.range(0, 23), rng.range(0, 59), rng.range(0, 59));
            if s.min > 4 {
                format!("{h:02}{m:02}{sec:02}")
            } else {
                format!("{h:02}{m:02}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use x12gate::schema::builtin;
    use x12gate::schema::check::walk;
    use x12gate::x12::{Interchanges, Limits};

    #[test]
    fn generated_bodies_validate_clean() {
        // The property tests (tests/schemas.rs) take every definition; these two are a set of
        // plain loops and one with the HL hierarchy.
        for id in [&b"850"[..], b"856"] {
            let def = builtin().unwrap().find(b"004010", id).unwrap();
            for seed in 0..200 {
                let segments = body(def, seed);
                let text = to_x12(&segments, "");
                let x = format!(
                    "ISA*00*          *00*          *ZZ*A              *ZZ*B              *240101*1200*^*00501*000000001*0*P*:~GS*PO*A*B*20240101*1200*1*X*{}~ST*{}*0001~{text}SE*{}*0001~GE*1*1~IEA*1*000000001~",
                    def.version,
                    def.id,
                    segments.len() + 2
                );
                let ic = Interchanges::new(x.as_bytes(), Limits::default())
                    .next()
                    .unwrap()
                    .unwrap();
                let w = walk(def, &ic.groups[0].sets.get(0).unwrap(), 0, 0, false);
                let found: Vec<String> = w.findings.iter().map(ToString::to_string).collect();
                let key = def.name_key();
                assert!(found.is_empty(), "{key} seed {seed}: {text}\n{found:#?}");
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_body() {
        let def = builtin().unwrap().find(b"004010", b"856").unwrap();
        assert_eq!(body(def, 11), body(def, 11));
        assert_ne!(body(def, 11), body(def, 12));
    }
}
