//! Property tests.
//!
//! * Generated well-formed files (random delimiters, line endings, one to three interchanges
//!   of groups and sets of random segments) validate with no finding, read into the generic
//!   JSON form exactly as generated, and render back: to the same document always, and to the
//!   same bytes when the file was in canonical form.
//! * Arbitrary bytes, ISA-shaped noise, every truncation and single-byte mutations of
//!   generated files, and mutated JSON documents never panic or hang any reader; the checks
//!   are the fuzz target's own (`fuzz/check.rs`).
//!
//! Case counts are set per test so the module runs in seconds in debug builds;
//! `PROPTEST_CASES=N` runs every test with N cases instead.

use proptest::prelude::*;
use proptest::sample::{select, subsequence, Index};
use serde_json::{json, Map, Value};
use x12gate::translate::parse_document;
use x12gate::x12::Limits;

use crate::fuzz_corpus::check::{self, show};

fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        // Shrinking a whole generated file is slow; this many steps still find the gist.
        max_shrink_iters: 2048,
        ..ProptestConfig::with_cases(cases)
    }
}

// ---------------------------------------------------------------------------------------------
// The model: a file as the generator means it, before the delimiters clean its values.

/// Every ASCII punctuation byte: the delimiters are drawn from these.
const PUNCT: &[u8] = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
const ENVELOPE_IDS: [&str; 7] = ["ISA", "IEA", "GS", "GE", "ST", "SE", "TA1"];
const ID_QUALIFIERS: [&str; 6] = ["01", "08", "12", "14", "ZZ", "30"];
/// ISA12 values that allow a repetition separator, and ones that do not.
const VERSIONS_402: [&str; 5] = ["00402", "00403", "00501", "00601", "00801"];
const VERSIONS_OLD: [&str; 4] = ["00200", "00300", "00304", "00401"];

/// One piece of a value. Which pieces survive depends on the file's character set, and any
/// byte that is one of the interchange's delimiters is dropped.
#[derive(Debug, Clone)]
enum Piece {
    Ascii(u8),
    /// A multi-byte UTF-8 character; kept when the file is UTF-8 or latin1.
    Utf8(&'static str),
    /// A byte >= 0x80 on its own; kept only in latin1 files.
    High(u8),
    /// Envelope-looking words inside data (`N1*ST*ISAAC`).
    Word(&'static str),
}

type Text = Vec<Piece>;

#[derive(Debug, Clone)]
enum El {
    Simple(Text),
    /// Two or more components.
    Composite(Vec<Text>),
    /// Two or more repeats, each simple or composite; simple when there is no repetition
    /// separator.
    Repeated(Vec<El>),
}

#[derive(Debug, Clone)]
struct Seg {
    id: String,
    elements: Vec<El>,
}

#[derive(Debug, Clone)]
struct Set {
    st01: String,
    st03: Option<String>,
    body: Vec<Seg>,
}

#[derive(Debug, Clone)]
struct Grp {
    /// GS01..GS05, GS07, GS08.
    gs: [String; 7],
    gs06_base: u32,
    st02_base: u32,
    sets: Vec<Set>,
}

#[derive(Debug, Clone, Copy)]
enum Term {
    /// The fourth drawn punctuation byte.
    Punct,
    Lf,
    Cr,
}

#[derive(Debug, Clone, Copy)]
enum Rep {
    /// ISA11 is the third drawn punctuation byte, ISA12 >= 00402.
    Separator,
    /// ISA11 `U`, ISA12 < 00402.
    Old,
    /// A letter or digit in ISA11 with ISA12 >= 00402: no repetition separator.
    Letter(u8),
}

#[derive(Debug, Clone)]
struct Ic {
    /// Four distinct punctuation bytes: element, component, repetition, terminator.
    punct: Vec<u8>,
    term: Term,
    rep: Rep,
    version_402: &'static str,
    version_old: &'static str,
    /// ISA01..ISA10, ISA13 (as a base), ISA14, ISA15; ISA11, ISA12 and ISA16 come from above.
    isa: [String; 10],
    isa13_base: u32,
    isa14_15: (&'static str, &'static str),
    ending: &'static str,
    ta1: Vec<[String; 5]>,
    /// Drop the groups when there are TA1s: an interchange holding only a TA1.
    ta1_only: bool,
    groups: Vec<Grp>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Charset {
    Ascii,
    Utf8,
    Latin1,
}

#[derive(Debug, Clone)]
struct File {
    ics: Vec<Ic>,
    charset: Charset,
    /// BOM and/or whitespace before the first ISA.
    prefix: &'static str,
    /// Whitespace between interchanges (cycled; empty means none).
    between: Vec<&'static str>,
    /// Line endings used instead of the interchange's own, cycled per segment.
    noise: Option<Vec<&'static str>>,
    /// The last segment is followed by its line ending.
    trailing: bool,
}

#[derive(Debug, Clone, Copy)]
struct Sizes {
    ics: (usize, usize),
    groups: (usize, usize),
    sets: (usize, usize),
    segs: (usize, usize),
    elements: usize,
}

const FULL: Sizes = Sizes {
    ics: (1, 3),
    groups: (1, 3),
    sets: (1, 4),
    segs: (0, 6),
    elements: 6,
};

/// Small files, for tests that run each case many times (every truncation).
const SMALL: Sizes = Sizes {
    ics: (1, 2),
    groups: (1, 2),
    sets: (1, 2),
    segs: (0, 3),
    elements: 4,
};

// ---------------------------------------------------------------------------------------------
// Strategies.

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        24 => (0x20u8..0x7f).prop_map(Piece::Ascii),
        1 => Just(Piece::Ascii(b'\t')),
        2 => select(vec!["\u{e9}", "\u{df}", "\u{65e5}\u{672c}", "\u{20ac}", "\u{1f600}"])
            .prop_map(Piece::Utf8),
        2 => select(vec![0x80u8, 0xa0, 0xc3, 0xa9, 0xe9, 0xff]).prop_map(Piece::High),
        1 => select(vec!["ISA", "IEA", "ISAAC", "GS", "ST", "SE", "TA1"]).prop_map(Piece::Word),
    ]
}

fn text() -> impl Strategy<Value = Text> {
    prop::collection::vec(piece(), 0..6)
}

fn single() -> impl Strategy<Value = El> {
    prop_oneof![
        4 => text().prop_map(El::Simple),
        1 => prop::collection::vec(text(), 2..4).prop_map(El::Composite),
    ]
}

fn element() -> impl Strategy<Value = El> {
    prop_oneof![
        6 => single(),
        1 => prop::collection::vec(single(), 2..4).prop_map(El::Repeated),
    ]
}

fn segment(max_elements: usize) -> impl Strategy<Value = Seg> {
    (
        "[A-Z0-9]{2,3}".prop_filter("not an envelope id", |id| {
            !ENVELOPE_IDS.contains(&id.as_str())
        }),
        prop::collection::vec(element(), 0..=max_elements),
    )
        .prop_map(|(id, elements)| Seg { id, elements })
}

fn set(s: Sizes) -> impl Strategy<Value = Set> {
    (
        prop_oneof![
            select(vec!["850", "810", "856", "997", "999", "837", "270"]).prop_map(String::from),
            "[1-9][0-9]{2}",
        ],
        prop::option::weighted(0.3, "[A-Z0-9]{1,12}"),
        prop::collection::vec(segment(s.elements), s.segs.0..=s.segs.1),
    )
        .prop_map(|(st01, st03, body)| Set { st01, st03, body })
}

fn group(s: Sizes) -> impl Strategy<Value = Grp> {
    (
        (
            select(vec!["PO", "IN", "FA", "SH", "HC", "HP"]),
            "[A-Z0-9]{2,15}",
            "[A-Z0-9]{2,15}",
            // Real dates and times: GS04 and GS05 are checked as such.
            "(19|20)[0-9]{2}(0[1-9]|1[0-2])(0[1-9]|1[0-9]|2[0-8])",
            "([01][0-9]|2[0-3])[0-5][0-9]",
            select(vec!["X", "T"]),
            select(vec![
                "004010",
                "005010",
                "005010X222A1",
                "003040",
                "004010VICS",
            ]),
        ),
        1..99_999_000u32,
        0..99_990u32,
        prop::collection::vec(set(s), s.sets.0..=s.sets.1),
    )
        .prop_map(
            |((g1, g2, g3, g4, g5, g7, g8), gs06_base, st02_base, mut sets)| {
                // A well-formed group holds sets of its own functional group: a set whose
                // id belongs to another group becomes the group's own set.
                let own = match g1 {
                    "PO" => "850",
                    "IN" => "810",
                    "FA" => "997",
                    "SH" => "856",
                    "HC" => "837",
                    _ => "835",
                };
                for set in &mut sets {
                    let groups = x12gate::validate::functional_groups_of(set.st01.as_bytes());
                    if groups.is_some_and(|g| !g.contains(&g1)) {
                        set.st01 = own.into();
                    }
                }
                Grp {
                    gs: [g1.into(), g2, g3, g4, g5, g7.into(), g8.into()],
                    gs06_base,
                    st02_base,
                    sets,
                }
            },
        )
}

fn padded(width: usize, content: &'static str) -> impl Strategy<Value = String> {
    content.prop_map(move |s: String| format!("{s:<width$}"))
}

fn date6() -> impl Strategy<Value = String> {
    (0..100u32, 1..=12u32, 1..=28u32).prop_map(|(y, m, d)| format!("{y:02}{m:02}{d:02}"))
}

fn time4() -> impl Strategy<Value = String> {
    (0..24u32, 0..60u32).prop_map(|(h, m)| format!("{h:02}{m:02}"))
}

fn isa_fields() -> impl Strategy<Value = [String; 10]> {
    (
        select(vec!["00", "01", "02", "03", "04", "05", "06"]),
        prop_oneof![Just(" ".repeat(10)), padded(10, "[A-Z0-9]{1,10}")],
        select(vec!["00", "01"]),
        prop_oneof![Just(" ".repeat(10)), padded(10, "[A-Za-z0-9]{1,10}")],
        select(ID_QUALIFIERS.to_vec()),
        padded(15, "[A-Z0-9][A-Z0-9 ]{0,14}"),
        select(ID_QUALIFIERS.to_vec()),
        padded(15, "[A-Z0-9][A-Z0-9 ]{0,14}"),
        date6(),
        time4(),
    )
        .prop_map(|(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10)| {
            [
                a1.into(),
                a2,
                a3.into(),
                a4,
                a5.into(),
                a6,
                a7.into(),
                a8,
                a9,
                a10,
            ]
        })
}

fn ta1() -> impl Strategy<Value = [String; 5]> {
    (
        "[0-9]{9}",
        date6(),
        time4(),
        select(vec!["A", "E", "R"]),
        select(vec!["000", "022", "024"]),
    )
        .prop_map(|(a, b, c, d, e)| [a, b, c, d.into(), e.into()])
}

fn interchange(s: Sizes) -> impl Strategy<Value = Ic> {
    (
        (
            subsequence(PUNCT.to_vec(), 4).prop_shuffle(),
            prop_oneof![6 => Just(Term::Punct), 2 => Just(Term::Lf), 1 => Just(Term::Cr)],
            prop_oneof![
                4 => Just(Rep::Separator),
                2 => Just(Rep::Old),
                1 => select(b"UXZ09".to_vec()).prop_map(Rep::Letter),
            ],
            select(VERSIONS_402.to_vec()),
            select(VERSIONS_OLD.to_vec()),
        ),
        isa_fields(),
        0..999_999_000u32,
        (select(vec!["0", "1"]), select(vec!["P", "T", "I"])),
        select(vec!["", "\n", "\r\n"]),
        prop_oneof![4 => Just(Vec::new()), 1 => prop::collection::vec(ta1(), 1..=2)],
        prop::bool::weighted(0.3),
        prop::collection::vec(group(s), s.groups.0..=s.groups.1),
    )
        .prop_map(
            |(
                (punct, term, rep, version_402, version_old),
                isa,
                isa13_base,
                isa14_15,
                ending,
                ta1,
                ta1_only,
                groups,
            )| Ic {
                punct,
                term,
                rep,
                version_402,
                version_old,
                isa,
                isa13_base,
                isa14_15,
                ending,
                ta1,
                ta1_only,
                groups,
            },
        )
}

fn file(s: Sizes) -> impl Strategy<Value = File> {
    (
        prop::collection::vec(interchange(s), s.ics.0..=s.ics.1),
        prop_oneof![3 => Just(Charset::Ascii), 1 => Just(Charset::Utf8), 1 => Just(Charset::Latin1)],
        prop_oneof![
            8 => Just(""),
            1 => select(vec!["\u{feff}", " \n", "\r\n\t", "\u{feff}\n\n", "\x0c "]),
        ],
        prop_oneof![
            6 => Just(Vec::new()),
            1 => prop::collection::vec(select(vec!["", " ", "\n", "\t\r\n", "  \n\n"]), 1..3),
        ],
        prop_oneof![
            6 => Just(None),
            1 => prop::collection::vec(
                select(vec!["", "\n", "\r\n", "\r", "\n\n", "\r\n\r\n", "\r\n\n"]),
                1..8
            )
            .prop_map(Some),
        ],
        prop::bool::weighted(0.9),
    )
        .prop_map(|(ics, charset, prefix, between, noise, trailing)| File {
            ics,
            charset,
            prefix,
            between,
            noise,
            trailing,
        })
}

// ---------------------------------------------------------------------------------------------
// From the model to bytes, and to the JSON document the reader should make of them.

#[derive(Debug, Clone, Copy)]
struct Delims {
    element: u8,
    component: u8,
    repetition: Option<u8>,
    segment: u8,
}

impl Delims {
    fn has(&self, b: u8) -> bool {
        [self.element, self.component, self.segment].contains(&b) || self.repetition == Some(b)
    }
}

/// An element with its final bytes.
#[derive(Debug, Clone)]
enum NEl {
    S(Vec<u8>),
    C(Vec<Vec<u8>>),
    R(Vec<NEl>),
}

struct NSet {
    st: Vec<NEl>,
    body: Vec<(Vec<u8>, Vec<NEl>)>,
    se: Vec<NEl>,
}

struct NGroup {
    gs: Vec<NEl>,
    sets: Vec<NSet>,
    ge: Vec<NEl>,
}

struct NIc {
    d: Delims,
    isa: Vec<Vec<u8>>,
    ta1: Vec<Vec<NEl>>,
    groups: Vec<NGroup>,
    iea: Vec<NEl>,
    /// The line ending the reader should report (what follows the ISA, as it keeps it).
    line_ending: &'static str,
}

fn plain(s: impl Into<String>) -> NEl {
    NEl::S(s.into().into_bytes())
}

fn clean(t: &Text, d: &Delims, cs: Charset) -> Vec<u8> {
    let mut out = Vec::new();
    for p in t {
        match p {
            Piece::Ascii(b) => out.push(*b),
            Piece::Utf8(s) if cs != Charset::Ascii => out.extend_from_slice(s.as_bytes()),
            Piece::High(b) if cs == Charset::Latin1 => out.push(*b),
            Piece::Word(w) => out.extend_from_slice(w.as_bytes()),
            _ => {}
        }
    }
    out.retain(|b| !d.has(*b) && *b != b'\r' && *b != b'\n');
    out
}

fn clean_el(e: &El, d: &Delims, cs: Charset, top: bool) -> NEl {
    match e {
        El::Simple(t) => NEl::S(clean(t, d, cs)),
        El::Composite(ts) => NEl::C(ts.iter().map(|t| clean(t, d, cs)).collect()),
        El::Repeated(es) if top && d.repetition.is_some() => {
            NEl::R(es.iter().map(|e| clean_el(e, d, cs, false)).collect())
        }
        El::Repeated(es) => es
            .first()
            .map_or(NEl::S(Vec::new()), |e| clean_el(e, d, cs, false)),
    }
}

fn normalize(ic: &Ic, index: u32, cs: Charset) -> NIc {
    let d = Delims {
        element: ic.punct[0],
        component: ic.punct[1],
        repetition: matches!(ic.rep, Rep::Separator).then_some(ic.punct[2]),
        segment: match ic.term {
            Term::Punct => ic.punct[3],
            Term::Lf => b'\n',
            Term::Cr => b'\r',
        },
    };
    let (isa11, version) = match ic.rep {
        Rep::Separator => (ic.punct[2], ic.version_402),
        Rep::Old => (b'U', ic.version_old),
        Rep::Letter(l) => (l, ic.version_402),
    };
    let isa13 = format!("{:09}", ic.isa13_base + index);
    let mut isa: Vec<Vec<u8>> = ic.isa.iter().map(|f| f.clone().into_bytes()).collect();
    isa.extend([
        vec![isa11],
        version.as_bytes().to_vec(),
        isa13.clone().into_bytes(),
        ic.isa14_15.0.as_bytes().to_vec(),
        ic.isa14_15.1.as_bytes().to_vec(),
        vec![d.component],
    ]);
    let groups: Vec<NGroup> = if ic.ta1_only && !ic.ta1.is_empty() {
        Vec::new()
    } else {
        ic.groups
            .iter()
            .enumerate()
            .map(|(gi, g)| {
                let gs06 = (g.gs06_base + gi as u32).to_string();
                let mut gs: Vec<NEl> = g.gs[..5].iter().map(|v| plain(v.clone())).collect();
                gs.extend([
                    plain(gs06.clone()),
                    plain(g.gs[5].clone()),
                    plain(g.gs[6].clone()),
                ]);
                let sets: Vec<NSet> = g
                    .sets
                    .iter()
                    .enumerate()
                    .map(|(si, s)| {
                        let st02 = format!("{:04}", g.st02_base + si as u32);
                        let mut st = vec![plain(s.st01.clone()), plain(st02.clone())];
                        st.extend(s.st03.clone().map(plain));
                        let body: Vec<_> = s
                            .body
                            .iter()
                            .map(|seg| {
                                let els = seg
                                    .elements
                                    .iter()
                                    .map(|e| clean_el(e, &d, cs, true))
                                    .collect();
                                (seg.id.clone().into_bytes(), els)
                            })
                            .collect();
                        let se = vec![plain((body.len() + 2).to_string()), plain(st02)];
                        NSet { st, body, se }
                    })
                    .collect();
                let ge = vec![plain(sets.len().to_string()), plain(gs06)];
                NGroup { gs, sets, ge }
            })
            .collect()
    };
    let ta1 = ic
        .ta1
        .iter()
        .map(|t| t.iter().map(|v| plain(v.clone())).collect())
        .collect();
    let iea = vec![plain(groups.len().to_string()), plain(isa13)];
    NIc {
        d,
        isa,
        ta1,
        groups,
        iea,
        line_ending: "",
    }
}

fn put_el(out: &mut Vec<u8>, e: &NEl, d: &Delims) {
    match e {
        NEl::S(v) => out.extend_from_slice(v),
        NEl::C(cs) => out.extend(cs.join(&d.component)),
        NEl::R(rs) => {
            for (i, r) in rs.iter().enumerate() {
                if i > 0 {
                    out.extend(d.repetition);
                }
                put_el(out, r, d);
            }
        }
    }
}

fn put_segment(out: &mut Vec<u8>, id: &[u8], elements: &[NEl], d: &Delims) {
    out.extend_from_slice(id);
    for e in elements {
        out.push(d.element);
        put_el(out, e, d);
    }
    out.push(d.segment);
}

/// The line ending the reader keeps for an interchange whose ISA is followed by `after`.
fn kept_line_ending(after: &str, d: &Delims) -> &'static str {
    if d.segment == b'\n' || d.segment == b'\r' {
        ""
    } else if after.starts_with("\r\n") {
        "\r\n"
    } else if after.starts_with('\n') {
        "\n"
    } else if after.starts_with('\r') {
        "\r"
    } else {
        ""
    }
}

/// A generated file: its bytes, whether they are canonical, and the document they hold.
struct Built {
    bytes: Vec<u8>,
    canonical: bool,
    ics: Vec<NIc>,
}

fn build(f: &File) -> Built {
    let mut ics: Vec<NIc> = f
        .ics
        .iter()
        .enumerate()
        .map(|(i, ic)| normalize(ic, i as u32, f.charset))
        .collect();
    let mut out = f.prefix.as_bytes().to_vec();
    let mut canonical = f.prefix.is_empty();
    let mut k = 0usize;
    let last_ic = ics.len() - 1;
    for (i, (ic, spec)) in ics.iter_mut().zip(&f.ics).enumerate() {
        if i > 0 {
            let ws = f.between.get(i - 1).copied().unwrap_or("");
            canonical &= ws.is_empty();
            out.extend_from_slice(ws.as_bytes());
        }
        let d = ic.d;
        // The CR/LF run after each segment, in order; the ISA's decides the kept line ending.
        let mut segments: Vec<(Vec<u8>, Vec<NEl>)> = Vec::new();
        for t in &ic.ta1 {
            segments.push((b"TA1".to_vec(), t.clone()));
        }
        for g in &ic.groups {
            segments.push((b"GS".to_vec(), g.gs.clone()));
            for s in &g.sets {
                segments.push((b"ST".to_vec(), s.st.clone()));
                segments.extend(s.body.iter().cloned());
                segments.push((b"SE".to_vec(), s.se.clone()));
            }
            segments.push((b"GE".to_vec(), g.ge.clone()));
        }
        segments.push((b"IEA".to_vec(), ic.iea.clone()));
        let mut ending = |last: bool| -> &'static str {
            k += 1;
            if last && !f.trailing {
                return "";
            }
            match &f.noise {
                Some(n) => n[k % n.len()],
                None => spec.ending,
            }
        };
        out.extend_from_slice(b"ISA");
        for field in &ic.isa[..15] {
            out.push(d.element);
            out.extend_from_slice(field);
        }
        out.push(d.element);
        out.push(d.component);
        out.push(d.segment);
        let isa_ending = ending(false);
        out.extend_from_slice(isa_ending.as_bytes());
        ic.line_ending = kept_line_ending(isa_ending, &d);
        canonical &= isa_ending == ic.line_ending;
        let n = segments.len();
        for (j, (id, els)) in segments.iter().enumerate() {
            put_segment(&mut out, id, els, &d);
            let e = ending(i == last_ic && j + 1 == n);
            canonical &= e == ic.line_ending;
            out.extend_from_slice(e.as_bytes());
        }
    }
    Built {
        bytes: out,
        canonical,
        ics,
    }
}

fn decode(bytes: &[u8], utf8: bool) -> String {
    if utf8 {
        String::from_utf8(bytes.to_vec()).expect("a value of a UTF-8 file is UTF-8")
    } else {
        bytes.iter().map(|b| char::from(*b)).collect()
    }
}

fn el_json(e: &NEl, utf8: bool) -> Value {
    match e {
        NEl::S(v) => Value::String(decode(v, utf8)),
        NEl::C(cs) => {
            json!({ "components": cs.iter().map(|c| decode(c, utf8)).collect::<Vec<_>>() })
        }
        NEl::R(rs) => json!({ "repeats": rs.iter().map(|r| el_json(r, utf8)).collect::<Vec<_>>() }),
    }
}

fn els_json(els: &[NEl], utf8: bool) -> Value {
    Value::Array(els.iter().map(|e| el_json(e, utf8)).collect())
}

/// The document `parse_document` should make of a built file.
fn expected(b: &Built) -> Value {
    let utf8 = std::str::from_utf8(&b.bytes).is_ok();
    let ch = |c: u8| decode(&[c], utf8);
    let interchanges: Vec<Value> = b
        .ics
        .iter()
        .map(|ic| {
            let d = &ic.d;
            let mut o = Map::new();
            o.insert(
                "delimiters".into(),
                json!({
                    "element": ch(d.element),
                    "component": ch(d.component),
                    "repetition": d.repetition.map(ch),
                    "segment": ch(d.segment),
                    "line_ending": ic.line_ending,
                }),
            );
            o.insert(
                "isa".into(),
                ic.isa.iter().map(|f| decode(f, utf8)).collect(),
            );
            if !ic.ta1.is_empty() {
                o.insert(
                    "ta1".into(),
                    ic.ta1.iter().map(|t| els_json(t, utf8)).collect(),
                );
            }
            let groups: Vec<Value> = ic
                .groups
                .iter()
                .map(|g| {
                    let sets: Vec<Value> = g
                        .sets
                        .iter()
                        .map(|s| {
                            let segments: Vec<Value> = s
                                .body
                                .iter()
                                .map(|(id, els)| {
                                    json!({ "id": decode(id, utf8), "elements": els_json(els, utf8) })
                                })
                                .collect();
                            json!({
                                "st": els_json(&s.st, utf8),
                                "segments": segments,
                                "se": els_json(&s.se, utf8),
                            })
                        })
                        .collect();
                    json!({ "gs": els_json(&g.gs, utf8), "sets": sets, "ge": els_json(&g.ge, utf8) })
                })
                .collect();
            o.insert("groups".into(), Value::Array(groups));
            o.insert("iea".into(), els_json(&ic.iea, utf8));
            Value::Object(o)
        })
        .collect();
    json!({
        "encoding": if utf8 { "utf8" } else { "latin1" },
        "interchanges": interchanges,
    })
}

// ---------------------------------------------------------------------------------------------
// Noise for the robustness tests.

/// Pieces of an ISA-shaped input, written with the header's own delimiters.
#[derive(Debug, Clone)]
enum Tok {
    Element,
    Component,
    Repetition,
    Terminator,
    Cr,
    Lf,
    Word(&'static str),
    Byte(u8),
}

fn any_delimiter() -> impl Strategy<Value = u8> {
    prop_oneof![6 => select(PUNCT.to_vec()), 1 => Just(b'\n'), 1 => Just(b'\r'), 1 => any::<u8>()]
}

fn token() -> impl Strategy<Value = Tok> {
    prop_oneof![
        6 => Just(Tok::Element),
        2 => Just(Tok::Component),
        1 => Just(Tok::Repetition),
        4 => Just(Tok::Terminator),
        1 => Just(Tok::Cr),
        1 => Just(Tok::Lf),
        8 => select(vec![
            "GS", "GE", "ST", "SE", "IEA", "ISA", "TA1", "BEG", "N1", "850", "0001", "1", "2",
            "0", "000000001", "004010", "00501", "U", "ISAAC", " ", "",
        ])
        .prop_map(Tok::Word),
        1 => any::<u8>().prop_map(Tok::Byte),
    ]
}

/// `ISA` with random delimiters, a header that is right, short, long or garbled, then tokens.
fn isa_shaped() -> impl Strategy<Value = Vec<u8>> {
    (
        (
            any_delimiter(),
            any_delimiter(),
            any_delimiter(),
            any_delimiter(),
        ),
        prop_oneof![
            3 => isa_fields().prop_map(|f| f.to_vec()),
            1 => prop::collection::vec("[ A-Z0-9]{0,16}", 0..18),
        ],
        select(vec!["^", "U", "", "^^"]),
        select(vec!["00501", "00401", "00402", "5", ""]),
        prop::collection::vec(token(), 0..120),
    )
        .prop_map(|((e, c, r, t), fields, isa11, isa12, toks)| {
            let mut out = b"ISA".to_vec();
            let mut fields = fields;
            if fields.len() == 10 {
                let isa11 = if isa11 == "^" {
                    String::from(char::from(r))
                } else {
                    isa11.into()
                };
                fields.extend([
                    isa11,
                    isa12.into(),
                    "000000001".into(),
                    "0".into(),
                    "P".into(),
                ]);
            }
            for f in &fields {
                out.push(e);
                out.extend_from_slice(f.as_bytes());
            }
            out.push(e);
            out.push(c);
            out.push(t);
            for tok in toks {
                match tok {
                    Tok::Element => out.push(e),
                    Tok::Component => out.push(c),
                    Tok::Repetition => out.push(r),
                    Tok::Terminator => out.push(t),
                    Tok::Cr => out.push(b'\r'),
                    Tok::Lf => out.push(b'\n'),
                    Tok::Word(w) => out.extend_from_slice(w.as_bytes()),
                    Tok::Byte(b) => out.push(b),
                }
            }
            out
        })
}

fn limits() -> impl Strategy<Value = Limits> {
    prop_oneof![
        2 => Just(Limits::default()),
        1 => (0..6u32, 0..12usize, 0..300u64, 0..3000u64).prop_map(|(s, e, b, i)| Limits {
            max_segments_per_set: s,
            max_element_len: e,
            max_set_bytes: b,
            max_interchange_bytes: i,
            ..Limits::default()
        }),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    Replace(Index, u8),
    Insert(Index, u8),
    Delete(Index),
}

fn interesting_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => select(PUNCT.to_vec()),
        2 => select(b"\r\n \t0123456789AEGISTU".to_vec()),
        2 => any::<u8>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), interesting_byte()).prop_map(|(i, b)| Mutation::Replace(i, b)),
        1 => (any::<Index>(), interesting_byte()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => any::<Index>().prop_map(Mutation::Delete),
    ]
}

fn mutate(mut bytes: Vec<u8>, m: &Mutation) -> Vec<u8> {
    if bytes.is_empty() {
        return bytes;
    }
    match m {
        Mutation::Replace(i, b) => {
            let i = i.index(bytes.len());
            bytes[i] = *b;
        }
        Mutation::Insert(i, b) => bytes.insert(i.index(bytes.len() + 1), *b),
        Mutation::Delete(i) => {
            bytes.remove(i.index(bytes.len()));
        }
    }
    bytes
}

/// JSON values that fit, and do not fit, the generic form's shape.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        select(vec![
            "", "*", "~", ":", "^", "**", "\n", "\r\n", "\r", "\u{e9}", "ISA", "IEA", "GS", "ST",
            "SE", "GE", "TA1", "utf8", "latin1", "A*B", "00501",
        ])
        .prop_map(Value::from),
        "[ -~]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    select(vec![
                        "components",
                        "repeats",
                        "id",
                        "elements",
                        "st",
                        "se",
                        "segments",
                        "gs",
                        "ge",
                        "sets",
                        "x",
                    ]),
                    inner
                ),
                0..3
            )
            .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.into(), v)).collect())),
        ]
    })
}

/// Every node of a JSON value, as JSON pointers.
fn pointers(v: &Value, here: String, out: &mut Vec<String>) {
    match v {
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                pointers(x, format!("{here}/{i}"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                pointers(
                    x,
                    format!("{here}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        _ => {}
    }
    out.push(here);
}

// ---------------------------------------------------------------------------------------------
// The properties.

/// Checks a well-formed built file; shared by the full-size and the small test.
fn well_formed(f: &File) -> Result<(), TestCaseError> {
    let b = build(f);
    let bytes = &b.bytes;
    let outcome = check::check_with(bytes, Limits::default());
    // Well formed as to envelopes: the bodies are random segments, which the definitions of
    // the sets they claim to be reject (their own property test is in `schemas`).
    let envelope: Vec<_> = outcome.findings.iter().filter(|f| !is_schema(f)).collect();
    prop_assert!(
        envelope.is_empty(),
        "findings on a well-formed file:\n{}\ninput: {}",
        envelope
            .iter()
            .map(|f| format!("  {f}"))
            .collect::<Vec<_>>()
            .join("\n"),
        show(bytes)
    );
    let doc = match parse_document(bytes, Limits::default()) {
        Ok(doc) => doc,
        Err(e) => return Err(TestCaseError::fail(format!("{e}\ninput: {}", show(bytes)))),
    };
    let got = serde_json::to_value(&doc).expect("a document serializes");
    let want = expected(&b);
    prop_assert!(
        got == want,
        "the document is not the generated one\ninput: {}\ngot:  {got}\nwant: {want}",
        show(bytes)
    );
    let Some(rendered) = outcome.rendered else {
        let json = serde_json::to_vec(&doc).expect("a document serializes");
        let err = x12gate::translate::render_document(&json, &mut Vec::new())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        return Err(TestCaseError::fail(format!(
            "a well-formed document does not render: {err}\ninput: {}",
            show(bytes)
        )));
    };
    if b.canonical {
        prop_assert!(
            rendered == *bytes,
            "canonical input not rendered byte for byte\ninput:    {}\nrendered: {}",
            show(bytes),
            show(&rendered)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn generated_files_validate_and_round_trip(f in file(FULL)) {
        well_formed(&f)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), limits in limits()) {
        check::check_with(&bytes, limits);
    }

    #[test]
    fn isa_shaped_noise_never_panics(bytes in isa_shaped(), limits in limits()) {
        check::check_with(&bytes, limits);
    }

    #[test]
    fn single_byte_mutations_never_panic(f in file(FULL), m in mutation(), limits in limits()) {
        let bytes = mutate(build(&f).bytes, &m);
        check::check_with(&bytes, limits);
    }

    #[test]
    fn arbitrary_json_never_panics_the_renderer(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        check::check_render(&bytes);
    }

    #[test]
    fn mutated_documents_never_panic_the_renderer(
        f in file(SMALL),
        at in any::<Index>(),
        replacement in json_value(),
        delete in any::<bool>(),
    ) {
        let doc = parse_document(&build(&f).bytes, Limits::default()).expect("a well-formed file reads");
        let mut value = serde_json::to_value(&doc).expect("a document serializes");
        let mut all = Vec::new();
        pointers(&value, String::new(), &mut all);
        let target = all[at.index(all.len())].clone();
        if delete && !target.is_empty() {
            let (parent, key) = target.rsplit_once('/').expect("a non-root pointer has a parent");
            match value.pointer_mut(parent) {
                Some(Value::Object(o)) => { o.remove(key); }
                Some(Value::Array(a)) => {
                    if let Ok(i) = key.parse::<usize>() { a.remove(i); }
                }
                _ => {}
            }
        } else if let Some(slot) = value.pointer_mut(&target) {
            *slot = replacement;
        }
        check::check_render(&serde_json::to_vec(&value).expect("a value serializes"));
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// A mutated file that still validates clean renders back. Ignored until src settles the
    /// gaps listed at `check::clean_renders`.
    #[test]
    fn clean_mutations_render(f in file(FULL), m in mutation()) {
        let bytes = mutate(build(&f).bytes, &m);
        let outcome = check::check_with(&bytes, Limits::default());
        if let Err(e) = check::clean_renders(&bytes, &outcome) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// What reading `bytes` gives, interchange by interchange: each one's findings and its
/// translation (every set kept, structured form), or the read error; read whole, or in
/// pieces of `window` bytes as `validate` and `process` read large files.
fn read_as(bytes: &[u8], window: Option<usize>) -> Vec<String> {
    use x12gate::translate::{interchange_document, Form};
    let schemas = x12gate::schema::builtin().expect("the definitions load");
    let checks = x12gate::check::Checks::definitions(schemas);
    let one = |read: Result<x12gate::x12::Interchange<'_>, x12gate::x12::ReadError>| match read {
        Ok(ic) => {
            let findings: Vec<String> = x12gate::check::interchange(&ic, &checks, [])
                .iter()
                .map(|f| format!("{f:?}"))
                .collect();
            let utf8 = std::str::from_utf8(ic.bytes()).is_ok();
            let doc = interchange_document(&ic, utf8, Form::Structured, &|_, _| true)
                .map(|d| String::from_utf8_lossy(&d).into_owned())
                .map_err(|e| e.to_string());
            format!("{}: {findings:?} {doc:?}", ic.base + ic.span.start)
        }
        Err(e) => format!("{e:?}"),
    };
    let Some(window) = window else {
        return x12gate::x12::Interchanges::new(bytes, Limits::default())
            .map(one)
            .collect();
    };
    let from = Box::new(std::io::Cursor::new(bytes.to_vec()));
    let mut reader = x12gate::input::Reader::new(from, "generated", Limits::default(), window);
    let mut all = Vec::new();
    while let Some(piece) = reader.next_piece().expect("memory reads") {
        let mut read = piece.interchanges();
        all.extend(read.by_ref().map(one));
        let resume = read.resume();
        reader.advance(resume);
    }
    all
}

proptest! {
    #![proptest_config(config(64))]

    /// Cut at any window, from a few bytes up, a file gives the same findings and the same
    /// translations as read whole.
    #[test]
    fn any_window_reads_as_the_whole_file(
        f in file(FULL),
        m in prop::option::of(mutation()),
        window in prop_oneof![1..64usize, 64..4096usize],
    ) {
        let mut bytes = build(&f).bytes;
        if let Some(m) = &m {
            bytes = mutate(bytes, m);
        }
        let whole = read_as(&bytes, None);
        let pieces = read_as(&bytes, Some(window));
        prop_assert!(whole == pieces, "window {window}\nwhole:  {whole:#?}\npieces: {pieces:#?}\ninput: {}", show(&bytes));
    }
}

proptest! {
    // Every truncation of a file runs the readers hundreds of times: fewer, smaller files.
    #![proptest_config(config(32))]

    #[test]
    fn every_truncation_never_panics(f in file(SMALL)) {
        let bytes = build(&f).bytes;
        for end in 0..=bytes.len() {
            check::check_with(&bytes[..end], Limits::default());
        }
    }

    #[test]
    fn small_generated_files_validate_and_round_trip(f in file(SMALL)) {
        well_formed(&f)?;
    }
}

/// Whether a finding comes from the definitions layer: a set's definition (AK304/AK403), or
/// the note that no definition reads a set.
pub fn is_schema(f: &x12gate::finding::Finding) -> bool {
    f.rule == x12gate::finding::Rule::EnvelopeLevelOnly
        || f.code.is_some_and(|c| {
            matches!(
                c.list(),
                x12gate::finding::CodeList::Ak304 | x12gate::finding::CodeList::Ak403
            )
        })
}
