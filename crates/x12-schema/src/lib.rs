//! Transaction-set definitions: the TOML files under `schemas/`, read into a form the
//! validator can walk quickly.
//!
//! Two kinds of file live in `schemas/<version>/`: `segments.toml`, the version's segment
//! dictionary (segments, composites, code lists), and one `<set>.toml` per transaction set (its
//! structure, and any segment the dictionary lacks). `schemas/README.md` documents the format.
//!
//! A crate of its own so that the gateway's build script compiles every definition with the
//! very code the binary reads them with (it is the script's build-dependency and the
//! gateway's dependency), and so that it is compiled once. It depends on serde, serde_json and
//! toml only. The gateway's `schema` module re-exports it as `schema::definition` and holds
//! the walker (`schema::check`), which speaks the gateway's findings; the shortcuts the
//! walker takes (`Shortcut`, `FastElement`, `QuickSyntax`, the tables on `SetDef`) are
//! public for it.
// Issue 39: no function over 100 lines (clippy.toml) or 7 parameters; tests are exempt.
#![cfg_attr(not(test), warn(clippy::too_many_lines, clippy::too_many_arguments))]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use serde::Deserialize;

/// Requirement designator: M, O, or X (relational; its syntax note says when); and N, an
/// implementation guide's "Not Used": a value there is a finding (999 IK403 `I10`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Req {
    M,
    O,
    X,
    N,
}

/// X12 data element types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    Id,
    An,
    /// Numeric with this many implied decimal places.
    N(u8),
    R,
    Dt,
    Tm,
    B,
}

impl DataType {
    fn parse(s: &str) -> Option<DataType> {
        Some(match s {
            "ID" => DataType::Id,
            "AN" => DataType::An,
            "R" => DataType::R,
            "DT" => DataType::Dt,
            "TM" => DataType::Tm,
            "B" => DataType::B,
            "N" => DataType::N(0),
            _ => {
                let digits = s.strip_prefix('N')?;
                let n: u8 = digits.parse().ok().filter(|n| *n <= 9)?;
                DataType::N(n)
            }
        })
    }
}

/// A relational condition between elements of one segment (or components of one composite).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyntaxKind {
    /// P: if any is present, all are.
    Paired,
    /// R: at least one is present.
    Required,
    /// E: at most one is present.
    Exclusion,
    /// C: if the first is present, all the others are.
    Conditional,
    /// L: if the first is present, at least one of the others is.
    ListConditional,
}

/// One syntax note such as `P0304` or `L030405`; positions are 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Syntax {
    pub kind: SyntaxKind,
    pub positions: Vec<u16>,
    /// Bit n-1 for each position n (positions past 64 are not checked).
    pub mask: u64,
    /// The first position's bit.
    pub first: u64,
}

impl Syntax {
    /// Whether the condition fails for the present elements (bit n-1 for position n).
    pub fn violated(&self, present: u64) -> bool {
        let hit = present & self.mask;
        match self.kind {
            SyntaxKind::Paired => hit != 0 && hit != self.mask,
            SyntaxKind::Required => hit == 0,
            SyntaxKind::Exclusion => hit.count_ones() > 1,
            SyntaxKind::Conditional => hit & self.first != 0 && hit != self.mask,
            SyntaxKind::ListConditional => hit & self.first != 0 && hit == self.first,
        }
    }

    fn parse(s: &str) -> Option<Syntax> {
        let mut chars = s.chars();
        let kind = match chars.next()? {
            'P' => SyntaxKind::Paired,
            'R' => SyntaxKind::Required,
            'E' => SyntaxKind::Exclusion,
            'C' => SyntaxKind::Conditional,
            'L' => SyntaxKind::ListConditional,
            _ => return None,
        };
        let digits = chars.as_str();
        if digits.len() < 4 || digits.len() % 2 != 0 || !digits.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let positions = digits
            .as_bytes()
            .chunks(2)
            .map(|p| u16::from(p[0] - b'0') * 10 + u16::from(p[1] - b'0'))
            .collect::<Vec<_>>();
        let bit = |p: u16| {
            if (1..=64).contains(&p) {
                1u64 << (p - 1)
            } else {
                0
            }
        };
        let mask = positions.iter().fold(0, |m, p| m | bit(*p));
        let first = positions.first().map_or(0, |p| bit(*p));
        positions.iter().all(|p| *p > 0).then_some(Syntax {
            kind,
            positions,
            mask,
            first,
        })
    }
}

/// A simple element's format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Simple {
    pub data_type: DataType,
    pub min: u16,
    pub max: u16,
    /// The valid values, when the definition lists them (key ID elements only).
    pub codes: Option<Arc<Codes>>,
    /// How the validator can clear a value without looking at its type again.
    pub plan: Shortcut,
}

/// The shortcut a valid value of a simple element can take through the validator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortcut {
    /// Text (AN, ID without a code list): no control character, length in range.
    Text,
    /// A number (N, R): digits only, digit count in range.
    Digits,
    /// Dates, times, binary, code lists, signs and decimal points: the full check.
    Full,
}

impl Simple {
    pub fn new(data_type: DataType, min: u16, max: u16, codes: Option<Arc<Codes>>) -> Simple {
        let plan = match (data_type, &codes) {
            (_, Some(_)) => Shortcut::Full,
            (DataType::An | DataType::Id, None) => Shortcut::Text,
            (DataType::N(_) | DataType::R, None) => Shortcut::Digits,
            _ => Shortcut::Full,
        };
        Simple {
            data_type,
            min,
            max,
            codes,
            plan,
        }
    }
}

/// A code list, kept for fast lookups: codes of up to seven bytes (nearly all) as sorted
/// integers, their length in the top bits, longer ones as bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Codes {
    short: Vec<u64>,
    long: Vec<Box<[u8]>>,
}

impl Codes {
    fn pack(code: &[u8]) -> Option<u64> {
        (code.len() <= 7).then(|| {
            code.iter()
                .fold(0u64, |n, b| (n << 8) | u64::from(*b))
                // the length keeps "0" and "00" apart
                | (code.len() as u64) << 60
        })
    }

    pub fn new<'c>(codes: impl Iterator<Item = &'c [u8]>) -> Codes {
        let mut c = Codes::default();
        for code in codes {
            match Codes::pack(code) {
                Some(n) => c.short.push(n),
                None => c.long.push(code.to_vec().into_boxed_slice()),
            }
        }
        c.short.sort_unstable();
        c.short.dedup();
        c
    }

    pub fn contains(&self, code: &[u8]) -> bool {
        match Codes::pack(code) {
            Some(n) => self.short.binary_search(&n).is_ok(),
            None => self.long.iter().any(|c| **c == *code),
        }
    }

    /// Every code, sorted (for generating documents).
    pub fn list(&self) -> Vec<Vec<u8>> {
        let mut all: Vec<Vec<u8>> = self
            .short
            .iter()
            .map(|n| {
                let len = usize::try_from(n >> 60).unwrap_or(0);
                let bytes = (n & ((1 << 60) - 1)).to_be_bytes();
                bytes[8 - len..].to_vec()
            })
            .chain(self.long.iter().map(|c| c.to_vec()))
            .collect();
        all.sort();
        all
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Simple(Simple),
    Composite {
        components: Vec<ElementDef>,
        syntax: Vec<Syntax>,
    },
}

/// One element of a segment, or one component of a composite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementDef {
    /// Data element reference number (`353`) or composite id (`C001`): AK402.
    pub reference: String,
    pub name: String,
    /// The structured-JSON key: snake_case name and 2-digit position, `purchase_order_number_03`.
    pub key: String,
    pub req: Req,
    /// Repetitions allowed (1 unless the element repeats).
    pub repeat: u32,
    pub kind: Kind,
}

impl ElementDef {
    /// AK402, when the reference is a number.
    pub fn reference_number(&self) -> Option<u32> {
        self.reference.parse().ok()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentDef {
    pub id: String,
    pub name: String,
    pub elements: Vec<ElementDef>,
    pub syntax: Vec<Syntax>,
    /// The same conditions grouped by kind, for a branch-light check that all hold.
    pub quick: QuickSyntax,
    /// The position of the last mandatory element (0 when none): a segment that reaches it
    /// cannot lack one at its end.
    pub last_mandatory: usize,
    /// Per element, what a valid value looks like in a few bytes, so the usual case is
    /// cleared without touching the (large) element definitions.
    pub fast: Vec<FastElement>,
}

/// An element's shortcut: its plan and length bounds, and whether it must be present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastElement {
    pub plan: Shortcut,
    pub min: u16,
    pub max: u16,
    pub mandatory: bool,
}

impl FastElement {
    /// An element's shortcut: a not-used element takes the full check whatever its value,
    /// which reports it.
    fn of(e: &ElementDef) -> FastElement {
        let (plan, min, max) = match &e.kind {
            Kind::Simple(s) if e.req != Req::N => (s.plan, s.min, s.max),
            Kind::Simple(s) => (Shortcut::Full, s.min, s.max),
            Kind::Composite { .. } => (Shortcut::Full, 0, 0),
        };
        FastElement {
            plan,
            min,
            max,
            mandatory: e.req == Req::M,
        }
    }
}

/// A segment's relational conditions as bit masks, grouped by kind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuickSyntax {
    pub paired: Vec<u64>,
    pub required: Vec<u64>,
    pub exclusion: Vec<u64>,
    /// (first position's bit, all positions' bits)
    pub conditional: Vec<(u64, u64)>,
    pub list: Vec<(u64, u64)>,
}

impl QuickSyntax {
    fn of(notes: &[Syntax]) -> QuickSyntax {
        let mut q = QuickSyntax::default();
        for n in notes {
            match n.kind {
                SyntaxKind::Paired => q.paired.push(n.mask),
                SyntaxKind::Required => q.required.push(n.mask),
                SyntaxKind::Exclusion => q.exclusion.push(n.mask),
                SyntaxKind::Conditional => q.conditional.push((n.first, n.mask)),
                SyntaxKind::ListConditional => q.list.push((n.first, n.mask)),
            }
        }
        q
    }

    /// [`Syntax::violated`] for any of the segment's conditions, grouped by kind so the
    /// usual all-hold case runs without a branch per condition.
    #[inline]
    pub fn violated(&self, present: u64) -> bool {
        let mut bad = false;
        for m in &self.paired {
            let hit = present & m;
            bad |= hit != 0 && hit != *m;
        }
        for m in &self.required {
            bad |= present & m == 0;
        }
        for m in &self.exclusion {
            bad |= (present & m).count_ones() > 1;
        }
        for (first, m) in &self.conditional {
            let hit = present & m;
            bad |= hit & first != 0 && hit != *m;
        }
        for (first, m) in &self.list {
            let hit = present & m;
            bad |= hit & first != 0 && hit == *first;
        }
        bad
    }
}

/// A node of a set's structure: a segment position or a loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Segment id, or loop id (the loop's first segment by default).
    pub id: String,
    pub req: Req,
    /// Maximum use (segment) or repeat (loop); `u32::MAX` for `>1`.
    pub max: u32,
    /// Index of the enclosing loop (the root is its own parent).
    pub parent: usize,
    /// For a segment: its definition in [`SetDef::segments`]. For a loop: its trigger's.
    pub segment: usize,
    /// Loops only: child nodes in order; the first is the trigger segment.
    pub children: Vec<usize>,
    /// Nesting depth; the root is 0.
    pub depth: u16,
    /// The structured-JSON key: the segment id, or `<id>_loop`; a second node with the same
    /// key in one loop gets `_2` (and so on).
    pub key: String,
    /// The id of the segment this node matches (a loop: its trigger), packed by [`tag`].
    pub tag: u32,
    /// Loops only: for each child index i, the first mandatory child at or after i
    /// (`children.len()` when none), so the walk finds passed-over mandatory children at once.
    pub next_mandatory: Vec<usize>,
    /// Loops only: the children's tags, side by side, so looking for a segment among them
    /// reads a few cache lines instead of every child node.
    pub child_tags: Vec<u32>,
    /// Loops only: a one-word filter of the tags a segment can match after the trigger
    /// (bit [`tag_bit`]), so a segment that is not in the loop is passed on at once.
    pub tag_filter: u64,
    /// An implementation guide's name for the position (`Billing Provider Name`); empty in
    /// the standard's tables, whose positions the segment or loop id names.
    pub name: String,
    /// The qualifier that tells this position from others of the same segment id (a guide's
    /// NM1 with NM101 `85` in 2010AA, `87` in 2010AB); a loop takes its trigger's.
    pub qualifier: Option<Qualifier>,
    /// Every code list the position narrows (its qualifier first): when a segment's
    /// qualifier fits more than one position of a run (the 2400's PWK01 `CT` fits both of
    /// its PWKs), the walk takes the first whose lists all hold the segment's values.
    pub narrowed: Vec<Qualifier>,
    /// Loops only: for each child index i, the first child of the run of adjacent children
    /// that share i's segment id and are told apart by qualifiers (i itself elsewhere). A
    /// guide splits one position of the standard's table into such runs (2300's DTPs), so
    /// their segments may come in any order among themselves, as the standard allows.
    pub group_start: Vec<usize>,
}

/// A value test on one element (or component) of a segment: `NM101=85,87`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qualifier {
    /// 1-based element position.
    pub element: usize,
    /// 1-based component position, for a qualifier inside a composite (`HI01-1`).
    pub component: Option<usize>,
    pub codes: Codes,
    /// As written, for messages: `NM101`.
    pub shown: String,
}

/// A tag's bit in a loop's [`Node::tag_filter`].
#[inline]
pub fn tag_bit(tag: u32) -> u64 {
    1 << (tag.wrapping_mul(0x9E37_79B1) >> 26)
}

/// A segment id packed into an integer, so the walk compares ids in one instruction; ids of
/// more than three bytes (none is defined) pack to a value no definition uses.
pub fn tag(id: &[u8]) -> u32 {
    match id {
        [a, b] => u32::from_be_bytes([2, 0, *a, *b]),
        [a, b, c] => u32::from_be_bytes([3, *a, *b, *c]),
        _ => u32::MAX,
    }
}

impl Node {
    pub fn is_loop(&self) -> bool {
        !self.children.is_empty()
    }
}

/// A transaction set's definition, compiled.
#[derive(Debug, Clone)]
pub struct SetDef {
    pub id: String,
    /// Six digits: `004010`, `005010`.
    pub version: String,
    pub name: String,
    /// `nodes[0]` is the root, a loop of the whole body (ST and SE excluded).
    pub nodes: Vec<Node>,
    pub segments: Vec<SegmentDef>,
    /// The loop whose iterations nest by HL01/HL02 (the 856's HL loop).
    pub hierarchy: Option<usize>,
    /// Nodes where each segment id may stand.
    pub by_id: HashMap<Box<[u8]>, Vec<usize>>,
    /// Every segment id of the version's dictionary (AK304 1 versus 6).
    pub known: Arc<HashSet<Box<[u8]>>>,
    /// The elements that name the business document a set carries (`[document]`); `None`
    /// for sets that carry none (the 997).
    pub document: Option<DocumentSpec>,
    /// The loop whose trigger's first element names the business unit a 999 CTX carries
    /// (`context = "2300"`: the claim, CLM01); `None`: the outermost open loop's.
    pub context: Option<usize>,
}

/// One element of a set by its segment's first occurrence and its position: `BEG03`, or a
/// component of it: `CLM05-3`; in a set cut by loop, the segment may be one of a named loop
/// around the part: `2010AA/NM109` (the claim's billing provider).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub segment: String,
    /// 1-based.
    pub position: usize,
    /// 1-based; `None`: the whole element.
    pub component: Option<usize>,
    /// The loop whose segment it is; `None`: the document's own first such segment.
    pub in_loop: Option<String>,
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(l) = &self.in_loop {
            write!(f, "{l}/")?;
        }
        write!(f, "{}{:02}", self.segment, self.position)?;
        match self.component {
            Some(c) => write!(f, "-{c}"),
            None => Ok(()),
        }
    }
}

/// What names a set's business document and the event it records, as `[document]` declares
/// it (docs/documents.md lists them per set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentSpec {
    /// The document's number: these elements' values, the empty ones left out.
    pub id: Vec<Field>,
    /// The event: the purpose code first (it decides the role), then any qualifier.
    pub event: Vec<Field>,
    /// A change's sequence number, compared to tell a stale change from a newer one.
    pub version: Option<Field>,
    /// A type recorded with the document (850 BEG02), not part of its key.
    pub kind: Option<Field>,
    /// The set whose document this one is about (860 changes an 850's PO); its own id
    /// otherwise.
    pub of: String,
    /// Purpose codes of a change to a document (`*`: every event is one, as in an 860).
    pub changes: Vec<String>,
    /// Purpose codes of a copy of a document sent before (07 duplicate).
    pub copies: Vec<String>,
    /// One document per iteration of this loop instead of one per set (an 837's claims).
    pub per: Option<PerLoop>,
}

impl DocumentSpec {
    /// Where its fields are read, each once, in a fixed order: a segment id, and the loop
    /// it stands in when a field names one (`2010AA/NM109`).
    pub fn places(&self) -> Vec<(&str, Option<&str>)> {
        let mut places: Vec<(&str, Option<&str>)> = self
            .id
            .iter()
            .chain(&self.event)
            .chain(&self.version)
            .chain(&self.kind)
            .map(|f| (f.segment.as_str(), f.in_loop.as_deref()))
            .collect();
        places.sort_unstable();
        places.dedup();
        places
    }
}

/// Loops each of whose iterations is a document of its own (`per = "2300"`, or several ids:
/// a 276's subscriber and dependent claims, 2200D and 2200E): the fields are read from the
/// iteration, and the document is the iteration with the loops around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerLoop {
    /// The loop ids, as the definition names them.
    pub ids: Vec<String>,
    /// By node: whether the node is such a loop or a loop that may hold one.
    pub holds: Vec<bool>,
}

impl PerLoop {
    /// Whether `node` is one of the loops each iteration of which is a document.
    pub fn is(&self, nodes: &[Node], node: usize) -> bool {
        nodes
            .get(node)
            .is_some_and(|n| n.is_loop() && self.ids.contains(&n.id))
    }

    /// Whether `node` is or may hold such a loop.
    pub fn holds(&self, node: usize) -> bool {
        self.holds.get(node).copied().unwrap_or(false)
    }

    /// Whether every part reads the loop `node`: it stands in a part, or holds none (then
    /// it is read where it stands around the parts, as 2010AA under 2000A, 1000A in the
    /// heading), or it encloses them all (a level around some parts only, as 2000C around
    /// the patients' claims, would leave the others without what it holds).
    fn read_by_every_part(&self, nodes: &[Node], node: usize) -> bool {
        enclosing(nodes, node).any(|a| self.is(nodes, a))
            || !self.holds(node)
            || (0..nodes.len())
                .filter(|p| self.is(nodes, *p))
                .all(|p| enclosing(nodes, p).any(|a| a == node))
    }
}

impl SetDef {
    pub fn root(&self) -> &Node {
        &self.nodes[0]
    }

    /// The definition a node's segment follows.
    pub fn segment_of(&self, node: usize) -> Option<&SegmentDef> {
        self.nodes
            .get(node)
            .and_then(|n| self.segments.get(n.segment))
    }

    /// The nodes a segment id may stand at, in definition order.
    pub fn places(&self, id: &[u8]) -> &[usize] {
        self.by_id.get(id).map_or(&[], Vec::as_slice)
    }

    /// Whether the version's dictionary knows this segment id at all.
    pub fn knows(&self, id: &[u8]) -> bool {
        self.known.contains(id)
    }

    /// Whether the definition is an implementation guide's (its version is a full GS08
    /// such as `005010X222A1`, not a six-digit release): its 999 names loops by the guide's ids.
    pub fn is_guide(&self) -> bool {
        self.version.len() > 6
    }

    /// `version/id`, as the structured JSON names the definition.
    pub fn name_key(&self) -> String {
        format!("{}/{}", self.version, self.id)
    }
}

// ---------------------------------------------------------------- raw TOML

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: String,
    id: Option<String>,
    name: Option<String>,
    hierarchy: Option<String>,
    /// A guide's business-unit loop for the 999's CTX (its loop id).
    context: Option<String>,
    structure: Option<String>,
    #[serde(default)]
    segments: HashMap<String, RawSegment>,
    #[serde(default)]
    composites: HashMap<String, RawComposite>,
    #[serde(default)]
    codes: HashMap<String, Vec<String>>,
    /// A dictionary's segment directory: every segment id of the release, defined here or
    /// not, so that a real segment no set here has is "not in the set" (AK304 6), and only
    /// an id no release has is "unrecognized" (AK304 1).
    #[serde(default)]
    directory: Vec<String>,
    document: Option<RawDocument>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDocument {
    id: Vec<String>,
    #[serde(default)]
    event: Vec<String>,
    version: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    of: Option<String>,
    #[serde(default)]
    changes: Vec<String>,
    #[serde(default)]
    copies: Vec<String>,
    per: Option<OneOrMany>,
}

/// A string, or a list of them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSegment {
    name: String,
    elements: Vec<RawElement>,
    #[serde(default)]
    syntax: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawComposite {
    name: String,
    components: Vec<RawElement>,
    #[serde(default)]
    syntax: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawElement {
    /// Element reference number; absent for a composite.
    #[serde(rename = "ref")]
    reference: Option<u32>,
    composite: Option<String>,
    name: Option<String>,
    req: Req,
    #[serde(rename = "type")]
    data_type: Option<String>,
    min: Option<u16>,
    max: Option<u16>,
    repeat: Option<u32>,
}

/// A version's dictionary: everything every file of the version declares.
#[derive(Default)]
struct Dictionary {
    segments: HashMap<String, RawSegment>,
    composites: HashMap<String, RawComposite>,
    codes: HashMap<String, Arc<Codes>>,
    /// Every segment id of the release (`directory`), the defined ones aside.
    directory: Vec<String>,
}

/// Every definition, by (six-digit version, set id), and each version's dictionary code
/// lists, by element reference number.
///
/// A set is compiled when it is first asked for: a run reads the few sets its files hold,
/// and compiling all of them was most of a short run's time. [`Schemas::load`] compiles every
/// one at once (its caller wants the errors); the built-in ones are all compiled by the tests.
#[derive(Default)]
pub struct Schemas {
    sets: HashMap<(String, String), LazySet>,
    dictionaries: HashMap<String, Dictionary>,
    codes: HashMap<(String, String), Arc<Codes>>,
    /// (release without a definition of the set, set id) -> the release it is read as
    /// (`schemas/releases.toml`).
    read_as: HashMap<(String, String), String>,
    /// Partners' own guides layered over these definitions, by the sender's `QUAL:ID`
    /// (`partners.toml` `definitions`): [`Schemas::for_sender`] picks one.
    guides: HashMap<String, Arc<Schemas>>,
}

/// A set's file, and its definition once compiled.
struct LazySet {
    path: String,
    first_line: usize,
    raw: RawFile,
    def: OnceLock<Result<Arc<SetDef>, String>>,
}

impl std::fmt::Debug for Schemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schemas")
            .field("sets", &self.sets.len())
            .field("read_as", &self.read_as.len())
            .finish_non_exhaustive()
    }
}

/// How a set of a given release and id is read.
#[derive(Debug, Clone, Copy)]
pub enum Reading<'a> {
    /// Against the definition of its own release.
    Own(&'a Arc<SetDef>),
    /// Against the definition of another release of the same set that agrees with its own.
    As(&'a Arc<SetDef>),
    /// No definition holds it: at envelope level only.
    EnvelopeOnly,
}

/// `schemas/releases.toml`: older release -> set id -> the release it is read as.
type RawReleases = HashMap<String, HashMap<String, RawReadAs>>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReadAs {
    #[serde(rename = "as")]
    read_as: String,
    /// `same` or `accepts` (the evidence is in schemas/RELEASES.md).
    verdict: String,
    #[allow(dead_code)]
    sources: String,
}

/// The file of older releases among the embedded ones.
const RELEASES: &str = "releases.toml";

/// The six-digit release a group's GS08 selects (`004010VICS` -> `004010`).
fn release_of(gs08: &[u8]) -> Option<&str> {
    std::str::from_utf8(gs08.get(..6)?).ok()
}

impl Schemas {
    /// The definition for a group's GS08 (`004010`, `004010VICS`, `005010X...`) and a set id.
    /// A release without a definition of the set is read as the release `schemas/releases.toml`
    /// names for it, if any ([`Schemas::reading`] tells which).
    pub fn find(&self, gs08: &[u8], set_id: &[u8]) -> Option<&Arc<SetDef>> {
        match self.reading(gs08, set_id) {
            Reading::Own(def) | Reading::As(def) => Some(def),
            Reading::EnvelopeOnly => None,
        }
    }

    /// How a set of a group's GS08 and ST01 is read: against its own release's definition,
    /// as another release's, or at envelope level only.
    pub fn reading(&self, gs08: &[u8], set_id: &[u8]) -> Reading<'_> {
        let (Some(version), Ok(id)) = (release_of(gs08), std::str::from_utf8(set_id)) else {
            return Reading::EnvelopeOnly;
        };
        // An implementation guide's definition is keyed by the whole GS08
        // (`005010X222A1/837`) and wins where one exists; other GS08s of the release
        // (`005010X231A1`, `004010VICS`) read the release's own, as before guides existed.
        if gs08.len() > 6 {
            if let Ok(full) = std::str::from_utf8(gs08) {
                if let Some(def) = self.compiled(&(full.to_string(), id.to_string())) {
                    return Reading::Own(def);
                }
            }
        }
        let key = (version.to_string(), id.to_string());
        if let Some(def) = self.compiled(&key) {
            return Reading::Own(def);
        }
        self.read_as
            .get(&key)
            .and_then(|release| self.compiled(&(release.clone(), key.1)))
            .map_or(Reading::EnvelopeOnly, Reading::As)
    }

    /// The definition of `key`, compiled on first use; none for a file that does not compile
    /// (which [`Schemas::check`] reports). Invariant: the built-in files never fail here,
    /// since `build.rs` compiled every one of them from the same JSON, so a set read at
    /// envelope level for this reason is not a case the warning needs to tell apart.
    fn compiled(&self, key: &(String, String)) -> Option<&Arc<SetDef>> {
        self.compile_set(key)?.as_ref().ok()
    }

    fn compile_set(&self, key: &(String, String)) -> Option<&Result<Arc<SetDef>, String>> {
        let set = self.sets.get(key)?;
        Some(set.def.get_or_init(|| {
            let empty = Dictionary::default();
            // A guide (`005010X222A1`) has no dictionary of its own: it uses its release's.
            let release = key.0.get(..6).unwrap_or(&key.0);
            let base = self
                .dictionaries
                .get(&key.0)
                .or_else(|| self.dictionaries.get(release))
                .unwrap_or(&empty);
            // The set's own declarations extend the dictionary for this set only.
            let mut local = Dictionary {
                codes: base.codes.clone(),
                ..Dictionary::default()
            };
            add_to_dictionary(&mut local, &set.path, &set.raw)?;
            compile(&set.path, set.first_line, &key.1, &set.raw, base, &local).map(Arc::new)
        }))
    }

    /// Compiles every definition not yet compiled: the first error, by (release, set id).
    pub fn check(&self) -> Result<(), String> {
        let mut keys: Vec<&(String, String)> = self.sets.keys().collect();
        keys.sort();
        for key in keys {
            if let Some(Err(e)) = self.compile_set(key) {
                return Err(e.clone());
            }
        }
        Ok(())
    }

    /// Whether any set has a definition of the six-digit `release`.
    pub fn defines_release(&self, release: &str) -> bool {
        self.sets.keys().any(|(v, _)| v == release)
    }

    /// The code list of element `reference` (`"479"`) in the dictionary of the release a
    /// group's GS08 names (its first six digits); `None` when that release has no dictionary
    /// here or its dictionary has no list for the element. Unlike [`Schemas::find`] it does
    /// not follow `releases.toml`: that table vouches for sets, not for every code list.
    pub fn code_list(&self, gs08: &[u8], reference: &str) -> Option<&Codes> {
        let version = release_of(gs08)?;
        self.codes
            .get(&(version.to_string(), reference.to_string()))
            .map(Arc::as_ref)
    }

    /// The definition a structured document names: `004010/850`.
    pub fn find_key(&self, key: &str) -> Option<&Arc<SetDef>> {
        let (version, id) = key.split_once('/')?;
        self.compiled(&(version.to_string(), id.to_string()))
    }

    /// Every definition that compiles, sorted by version then set id.
    pub fn all(&self) -> Vec<&Arc<SetDef>> {
        let mut keys: Vec<&(String, String)> = self.sets.keys().collect();
        keys.sort();
        keys.into_iter().filter_map(|k| self.compiled(k)).collect()
    }

    /// Reads definitions from `(path, TOML text)` pairs, as the files under `schemas/` are.
    pub fn load(files: &[(&str, &str)]) -> Result<Schemas, String> {
        let mut parsed = Vec::new();
        let mut releases = RawReleases::new();
        for (path, text) in files {
            if *path == RELEASES {
                releases = toml::from_str(text).map_err(|e| format!("schemas/{path}: {e}"))?;
                continue;
            }
            let raw: RawFile = toml::from_str(text).map_err(|e| format!("schemas/{path}: {e}"))?;
            parsed.push((*path, structure_line(text), raw));
        }
        let schemas = Schemas::compile(parsed, releases)?;
        schemas.check()?;
        Ok(schemas)
    }

    /// Reads the files as `build.rs` embeds them: `(path, the TOML's content as JSON, the
    /// line its structure text starts on)`.
    pub fn load_embedded(files: &[(&str, &str, usize)]) -> Result<Schemas, String> {
        let mut parsed = Vec::new();
        let mut releases = RawReleases::new();
        for (path, json, first_line) in files {
            let bad = |e: serde_json::Error| format!("schemas/{path}: {e}");
            if *path == RELEASES {
                releases = serde_json::from_str(json).map_err(bad)?;
                continue;
            }
            parsed.push((*path, *first_line, serde_json::from_str(json).map_err(bad)?));
        }
        Schemas::compile(parsed, releases)
    }

    fn compile(
        parsed: Vec<(&str, usize, RawFile)>,
        releases: RawReleases,
    ) -> Result<Schemas, String> {
        // Dictionaries first: every segment, composite and code list a version's files declare.
        let mut dictionaries: HashMap<String, Dictionary> = HashMap::new();
        for (path, _, raw) in &parsed {
            if raw.id.is_some() {
                continue;
            }
            let d = dictionaries.entry(raw.version.clone()).or_default();
            add_to_dictionary(d, path, raw)?;
        }
        let mut sets = HashMap::new();
        for (path, first_line, raw) in parsed {
            let Some(id) = raw.id.clone() else { continue };
            let key = (raw.version.clone(), id.clone());
            let version = raw.version.clone();
            let set = LazySet {
                path: path.to_string(),
                first_line,
                raw,
                def: OnceLock::new(),
            };
            if sets.insert(key, set).is_some() {
                return Err(format!(
                    "schemas/{path}: set {id} version {version} is defined twice"
                ));
            }
        }
        let codes = dictionaries
            .iter()
            .flat_map(|(version, d)| {
                d.codes.iter().map(move |(reference, list)| {
                    ((version.clone(), reference.clone()), list.clone())
                })
            })
            .collect();
        let read_as = read_as(releases, &sets)?;
        Ok(Schemas {
            sets,
            dictionaries,
            codes,
            read_as,
            guides: HashMap::new(),
        })
    }
}

/// What a guide's file paths are given as to [`Schemas::compile`], whose messages say
/// `schemas/<path>`: the prefix is replaced by the guide's folder in [`Schemas::layered`]
/// (so the compiler's many messages stay as they are).
const GUIDE: &str = "\u{1}guide/";

// Partner guides: run-time folders of set files layered over the embedded definitions.
impl Schemas {
    /// The embedded definitions (as [`Schemas::load_embedded`] reads them) with the set files
    /// of a guide folder `dir` (`(path in the folder, TOML text)`) in place of the embedded
    /// sets of the same release and id, every one of the guide's sets compiled. A guide holds
    /// set files only: its segments, composites and code lists are declared in each set's
    /// file, which the compiler reads as extending the release's dictionary for that set.
    pub fn layered(
        embedded: &[(&str, &str, usize)],
        dir: &str,
        files: &[(&str, &str)],
    ) -> Result<Schemas, String> {
        let shown = |e: String| e.replace(&format!("schemas/{GUIDE}"), &format!("{dir}/"));
        let mut paths = Vec::new();
        let mut guide = Vec::new();
        for (path, text) in files {
            let raw: RawFile = toml::from_str(text).map_err(|e| format!("{dir}/{path}: {e}"))?;
            if raw.id.is_none() {
                return Err(format!(
                    "{dir}/{path}: a guide holds set files only (with `id`); declare the segments, composites and code lists a set needs in its own file"
                ));
            }
            paths.push(format!("{GUIDE}{path}"));
            guide.push((structure_line(text), raw));
        }
        let defined: HashSet<(String, String)> = guide
            .iter()
            .filter_map(|(_, raw)| Some((raw.version.clone(), raw.id.clone()?)))
            .collect();
        let mut parsed = Vec::new();
        let mut releases = RawReleases::new();
        for (path, json, first_line) in embedded {
            let bad = |e: serde_json::Error| format!("schemas/{path}: {e}");
            if *path == RELEASES {
                releases = serde_json::from_str(json).map_err(bad)?;
                continue;
            }
            let raw: RawFile = serde_json::from_str(json).map_err(bad)?;
            let replaced = raw
                .id
                .as_ref()
                .is_some_and(|id| defined.contains(&(raw.version.clone(), id.clone())));
            if !replaced {
                parsed.push((*path, *first_line, raw));
            }
        }
        // A set the guide defines in a release the table reads as another is the guide's own.
        for (release, entries) in &mut releases {
            entries.retain(|id, _| !defined.contains(&(release.clone(), id.clone())));
        }
        for (path, (first_line, raw)) in paths.iter().zip(guide) {
            parsed.push((path.as_str(), first_line, raw));
        }
        let schemas = Schemas::compile(parsed, releases).map_err(shown)?;
        let mut keys: Vec<&(String, String)> = defined.iter().collect();
        keys.sort();
        for key in keys {
            if let Some(Err(e)) = schemas.compile_set(key) {
                return Err(shown(e.clone()));
            }
        }
        Ok(schemas)
    }

    /// These definitions with partners' guides, by the sender's `QUAL:ID`.
    pub fn with_guides(mut self, guides: HashMap<String, Arc<Schemas>>) -> Schemas {
        self.guides = guides;
        self
    }

    /// The definitions an interchange from ISA05 `qualifier` and ISA06 `id` (trimmed) is read
    /// against: its partner's guide, or these.
    pub fn for_sender(&self, qualifier: &str, id: &str) -> &Schemas {
        if self.guides.is_empty() {
            return self;
        }
        self.guides
            .get(&format!("{qualifier}:{id}"))
            .map_or(self, Arc::as_ref)
    }

    /// Every (release, set id) with a definition, sorted.
    pub fn set_keys(&self) -> Vec<(String, String)> {
        let mut keys: Vec<(String, String)> = self.sets.keys().cloned().collect();
        keys.sort();
        keys
    }
}

/// The line of a set file's TOML `text` its `structure` text starts on (the one after
/// `structure = """`): structure errors are reported as lines of the file.
pub fn structure_line(text: &str) -> usize {
    text.lines()
        .position(|l| l.starts_with("structure"))
        .map_or(0, |at| at + 1)
}

/// The older releases' table, each entry checked: a release of its own is not read as
/// another, and the release it is read as defines the set.
fn read_as(
    releases: RawReleases,
    sets: &HashMap<(String, String), LazySet>,
) -> Result<HashMap<(String, String), String>, String> {
    let mut out = HashMap::new();
    for (release, entries) in releases {
        for (id, entry) in entries {
            let at = format!("schemas/{RELEASES}: [\"{release}\"] \"{id}\"");
            if release.len() != 6 || !release.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{at}: a release is six digits"));
            }
            if sets.contains_key(&(release.clone(), id.clone())) {
                return Err(format!("{at}: {release} defines {id} itself"));
            }
            if !sets.contains_key(&(entry.read_as.clone(), id.clone())) {
                return Err(format!("{at}: {} does not define {id}", entry.read_as));
            }
            if !matches!(entry.verdict.as_str(), "same" | "accepts") {
                return Err(format!(
                    "{at}: verdict {:?} is not \"same\" or \"accepts\"",
                    entry.verdict
                ));
            }
            out.insert((release.clone(), id), entry.read_as);
        }
    }
    Ok(out)
}

fn add_to_dictionary(d: &mut Dictionary, path: &str, raw: &RawFile) -> Result<(), String> {
    for (id, seg) in &raw.segments {
        let seg = RawSegment {
            name: seg.name.clone(),
            elements: seg.elements.clone(),
            syntax: seg.syntax.clone(),
        };
        if d.segments.insert(id.clone(), seg).is_some() {
            return Err(format!("schemas/{path}: segment {id} is defined twice"));
        }
    }
    for (id, c) in &raw.composites {
        let c = RawComposite {
            name: c.name.clone(),
            components: c.components.clone(),
            syntax: c.syntax.clone(),
        };
        if d.composites.insert(id.clone(), c).is_some() {
            return Err(format!("schemas/{path}: composite {id} is defined twice"));
        }
    }
    for (reference, codes) in &raw.codes {
        let set = Codes::new(codes.iter().map(|c| c.as_bytes()));
        d.codes.insert(reference.clone(), Arc::new(set));
    }
    d.directory.extend(raw.directory.iter().cloned());
    Ok(())
}

/// `Transaction Set Purpose Code` -> `transaction_set_purpose_code`.
fn snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

struct Lookup<'a> {
    path: &'a str,
    base: &'a Dictionary,
    local: &'a Dictionary,
}

impl Lookup<'_> {
    fn segment(&self, id: &str) -> Option<&RawSegment> {
        self.local
            .segments
            .get(id)
            .or_else(|| self.base.segments.get(id))
    }

    fn composite(&self, id: &str) -> Option<&RawComposite> {
        self.local
            .composites
            .get(id)
            .or_else(|| self.base.composites.get(id))
    }

    fn syntax(&self, notes: &[String], count: usize, place: &str) -> Result<Vec<Syntax>, String> {
        notes
            .iter()
            .map(|n| {
                let s = Syntax::parse(n).ok_or_else(|| {
                    format!(
                        "schemas/{}: {place}: syntax note {n:?} is not P, R, E, C or L followed by two-digit positions",
                        self.path
                    )
                })?;
                if s.positions.iter().any(|p| usize::from(*p) > count) {
                    return Err(format!(
                        "schemas/{}: {place}: syntax note {n} names a position past the last ({count})",
                        self.path
                    ));
                }
                Ok(s)
            })
            .collect()
    }

    fn element(
        &self,
        raw: &RawElement,
        position: usize,
        place: &str,
        in_composite: bool,
    ) -> Result<ElementDef, String> {
        let at = |problem: String| {
            format!(
                "schemas/{}: {place} element {position:02}: {problem}",
                self.path
            )
        };
        let (reference, default_name, kind) = match (raw.reference, &raw.composite) {
            (Some(r), None) => {
                let t = raw
                    .data_type
                    .as_deref()
                    .ok_or_else(|| at("a simple element needs `type`".into()))?;
                let data_type = DataType::parse(t)
                    .ok_or_else(|| at(format!("unknown type {t:?} (ID, AN, Nn, R, DT, TM, B)")))?;
                let (min, max) = match (raw.min, raw.max) {
                    (Some(min), Some(max)) if min <= max && max > 0 => (min, max),
                    _ => return Err(at("needs `min` <= `max`, `max` > 0".into())),
                };
                let codes = self.local.codes.get(&r.to_string()).cloned();
                (
                    r.to_string(),
                    None,
                    Kind::Simple(Simple::new(data_type, min, max, codes)),
                )
            }
            (None, Some(c)) if !in_composite => {
                let comp = self
                    .composite(c)
                    .ok_or_else(|| at(format!("composite {c} is not defined")))?;
                let here = format!("{place} element {position:02} ({c})");
                let components = comp
                    .components
                    .iter()
                    .enumerate()
                    .map(|(i, e)| self.element(e, i + 1, &here, true))
                    .collect::<Result<Vec<_>, _>>()?;
                let syntax = self.syntax(&comp.syntax, components.len(), &here)?;
                (
                    c.clone(),
                    Some(comp.name.clone()),
                    Kind::Composite { components, syntax },
                )
            }
            _ => {
                return Err(at(if in_composite {
                    "a component needs `ref` (composites do not nest)".into()
                } else {
                    "needs exactly one of `ref` and `composite`".into()
                }))
            }
        };
        let name = raw
            .name
            .clone()
            .or(default_name)
            .ok_or_else(|| at("needs `name`".into()))?;
        // A composite a guide declares with no components is one it does not use at all:
        // a value there is "not used" (I10), not a component too many.
        let req = match &kind {
            Kind::Composite { components, .. } if components.is_empty() => Req::N,
            _ => raw.req,
        };
        Ok(ElementDef {
            key: format!("{}_{position:02}", snake(&name)),
            reference,
            name,
            req,
            repeat: raw.repeat.unwrap_or(1).max(1),
            kind,
        })
    }

    fn segment_def(&self, id: &str) -> Result<SegmentDef, String> {
        let raw = self.segment(id).ok_or_else(|| {
            format!(
                "schemas/{}: segment {id} is used but neither the version's segments.toml nor this file defines it",
                self.path
            )
        })?;
        let elements = raw
            .elements
            .iter()
            .enumerate()
            .map(|(i, e)| self.element(e, i + 1, &format!("segment {id}"), false))
            .collect::<Result<Vec<_>, _>>()?;
        let syntax = self.syntax(&raw.syntax, elements.len(), &format!("segment {id}"))?;
        let last_mandatory = elements
            .iter()
            .rposition(|e| e.req == Req::M)
            .map_or(0, |i| i + 1);
        let fast = elements.iter().map(FastElement::of).collect();
        Ok(SegmentDef {
            id: id.to_string(),
            name: raw.name.clone(),
            elements,
            quick: QuickSyntax::of(&syntax),
            last_mandatory,
            fast,
            syntax,
        })
    }
}

fn parse_max(s: &str) -> Option<u32> {
    if s == ">1" {
        return Some(u32::MAX);
    }
    s.parse().ok().filter(|n| *n > 0)
}

/// The nodes of a set's `structure` text (one line per segment or `loop`, nesting by
/// indentation) and the definitions of the segments it names, each once.
// One pass over the lines; each check names the line it fails on.
fn read_structure(
    lookup: &Lookup<'_>,
    first_line: usize,
    structure: &str,
) -> Result<(Vec<Node>, Vec<SegmentDef>), String> {
    let path = lookup.path;
    let mut nodes = vec![Node {
        tag: u32::MAX,
        ..node(String::new(), Req::M, 1, 0, 0)
    }];
    let mut placed = Placed::default();
    // (indent, node) of the loops open at this point of the text.
    let mut open: Vec<(usize, usize)> = vec![(0, 0)];
    let mut expect_deeper = false;
    for (n, line) in structure.lines().enumerate() {
        let at = |problem: &str| format!("schemas/{path}: line {}: {problem}", first_line + n + 1);
        let text = line.split('#').next().unwrap_or("");
        if text.trim().is_empty() {
            continue;
        }
        let indent = text.len() - text.trim_start().len();
        let words = line_words(text).map_err(|e| at(&e))?;
        if expect_deeper {
            let parent_indent = open.last().map_or(0, |o| o.0);
            if indent <= parent_indent {
                return Err(at(
                    "a loop needs at least one indented segment, its trigger",
                ));
            }
            if let Some(last) = open.last_mut() {
                last.0 = indent;
            }
            expect_deeper = false;
        } else {
            while open.len() > 1 && open.last().is_some_and(|o| indent < o.0) {
                open.pop();
            }
            if open.last().is_some_and(|o| indent != o.0) {
                return Err(at("indentation matches no open loop"));
            }
        }
        let parent = open.last().map_or(0, |o| o.1);
        let depth = nodes.get(parent).map_or(0, |p| p.depth) + 1;
        let (is_loop, rest) = match words.first() {
            Some(Word::Plain("loop")) => (true, words.get(1..).unwrap_or_default()),
            _ => (false, &words[..]),
        };
        let line = Line::read(rest).map_err(|e| at(&e))?;
        let (req, max) = line.bounds(is_loop).map_err(&at)?;
        let name = line.id;
        let index = nodes.len();
        let mut n = node(name.to_string(), req, max, parent, depth);
        n.name = line.name.unwrap_or_default().to_string();
        n.tag = tag(name.as_bytes());
        if !is_loop {
            (n.segment, n.qualifier, n.narrowed) = placed.segment(lookup, &line, &at)?;
        }
        nodes.push(n);
        if let Some(p) = nodes.get_mut(parent) {
            p.children.push(index);
        }
        if is_loop {
            open.push((indent, index));
            expect_deeper = true;
        }
    }
    if expect_deeper {
        return Err(format!(
            "schemas/{path}: structure ends with a loop that has no segments"
        ));
    }
    Ok((nodes, placed.segments))
}

/// A node of a structure before it is linked: no children, key, tags or groups yet.
fn node(id: String, req: Req, max: u32, parent: usize, depth: u16) -> Node {
    Node {
        id,
        req,
        max,
        parent,
        segment: 0,
        children: Vec::new(),
        depth,
        key: String::new(),
        tag: 0,
        next_mandatory: Vec::new(),
        child_tags: Vec::new(),
        tag_filter: 0,
        name: String::new(),
        qualifier: None,
        narrowed: Vec::new(),
        group_start: Vec::new(),
    }
}

/// The segment definitions a structure's positions use: one per segment id, and one of its
/// own for a position a guide narrows.
#[derive(Default)]
struct Placed {
    segments: Vec<SegmentDef>,
    index: HashMap<String, usize>,
}

impl Placed {
    /// The segment a structure line places (its index in `segments`), with the qualifier
    /// and the narrowed code lists of its position; `at` names the line in an error.
    fn segment(
        &mut self,
        lookup: &Lookup<'_>,
        line: &Line<'_>,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(usize, Option<Qualifier>, Vec<Qualifier>), String> {
        let name = line.id;
        if line.constraints.is_empty() && line.usages.is_empty() {
            if let Some(i) = self.index.get(name) {
                return Ok((*i, None, Vec::new()));
            }
            self.segments.push(lookup.segment_def(name)?);
            let i = self.segments.len() - 1;
            self.index.insert(name.to_string(), i);
            return Ok((i, None, Vec::new()));
        }
        // A guide's position narrows the segment's code lists: its own copy of the
        // definition, so the same segment elsewhere keeps the dictionary's lists.
        let mut def = lookup.segment_def(name)?;
        let mut qualifier = None;
        let mut narrowed = Vec::new();
        for (i, c) in line.constraints.iter().enumerate() {
            let is_qualifier = i == 0 && line.when;
            let q = narrow(&mut def, c, is_qualifier).map_err(|e| at(&e))?;
            if is_qualifier {
                qualifier = Some(q.clone());
            }
            narrowed.push(q);
        }
        // ... and its element usages: required or not used at this position only.
        let mut named = HashSet::new();
        for u in &line.usages {
            for place in usage(&mut def, u).map_err(|e| at(&e))? {
                if !named.insert(place) {
                    return Err(at(&format!("{u}: an element is given a usage twice")));
                }
            }
        }
        self.segments.push(def);
        Ok((self.segments.len() - 1, qualifier, narrowed))
    }
}

/// A word of a structure line: plain, or a quoted name (which may hold spaces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Word<'t> {
    Plain(&'t str),
    Quoted(&'t str),
}

/// The words of a structure line, a `"quoted name"` as one.
fn line_words(text: &str) -> Result<Vec<Word<'_>>, String> {
    let mut words = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('"') {
            let end = after
                .find('"')
                .ok_or_else(|| "a quoted name has no closing quote".to_string())?;
            words.push(Word::Quoted(after.get(..end).unwrap_or_default()));
            rest = after.get(end + 1..).unwrap_or_default();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            words.push(Word::Plain(rest.get(..end).unwrap_or_default()));
            rest = rest.get(end..).unwrap_or_default();
        }
        rest = rest.trim_start();
    }
    Ok(words)
}

/// One structure line after `loop`: `ID ["Name"] REQ MAX [when SPEC] [SPEC ...]`.
struct Line<'t> {
    id: &'t str,
    name: Option<&'t str>,
    req: &'t str,
    max: &'t str,
    /// Whether the first constraint is the position's qualifier (`when`).
    when: bool,
    /// `NM101=85`, `HI01-1=ABK,BK`: the qualifier first when `when`, then narrowed lists.
    constraints: Vec<&'t str>,
    /// `+NM109` (required here), `-NM104` (not used here), `+CLM05-3`: element usages.
    usages: Vec<&'t str>,
}

impl<'t> Line<'t> {
    /// The line's requirement and maximum, once a loop's line is known to carry neither
    /// qualifier nor usages (they belong on its trigger).
    fn bounds(&self, is_loop: bool) -> Result<(Req, u32), &'static str> {
        if is_loop && !self.constraints.is_empty() {
            return Err(
                "a loop takes its trigger's qualifier: write `when` on the trigger segment",
            );
        }
        if is_loop && !self.usages.is_empty() {
            return Err(
                "element usages (+SEGnn, -SEGnn) belong on the trigger segment, not the loop",
            );
        }
        let req = match self.req {
            "M" => Req::M,
            "O" => Req::O,
            "X" => Req::X,
            _ => return Err("requirement must be M, O or X"),
        };
        let max = parse_max(self.max).ok_or("maximum must be a positive number or >1")?;
        Ok((req, max))
    }

    fn read(words: &[Word<'t>]) -> Result<Line<'t>, String> {
        const SHAPE: &str =
            "expected `ID [\"Name\"] REQ MAX [when SEGnn=CODE,..] [SEGnn=CODE,..] [+SEGnn] [-SEGnn]` \
             or the same after `loop`";
        let mut it = words.iter().copied().peekable();
        let Some(Word::Plain(id)) = it.next() else {
            return Err(SHAPE.into());
        };
        let name = match it.peek().copied() {
            Some(Word::Quoted(n)) => {
                it.next();
                Some(n)
            }
            _ => None,
        };
        let (Some(Word::Plain(req)), Some(Word::Plain(max))) = (it.next(), it.next()) else {
            return Err(SHAPE.into());
        };
        let mut when = false;
        let mut constraints = Vec::new();
        let mut usages = Vec::new();
        for (i, w) in it.enumerate() {
            match w {
                Word::Plain("when") if i == 0 => when = true,
                Word::Plain(c) if when && i == 1 && !c.contains('=') => {
                    return Err(format!(
                        "`when` needs a qualifier such as NM101=85 next, not {c:?}"
                    ))
                }
                Word::Plain(c) if c.contains('=') => constraints.push(c),
                Word::Plain(u) if u.starts_with(['+', '-']) => usages.push(u),
                _ => return Err(SHAPE.into()),
            }
        }
        if when && constraints.is_empty() {
            return Err("`when` needs a qualifier such as NM101=85".into());
        }
        Ok(Line {
            id,
            name,
            req,
            max,
            when,
            constraints,
            usages,
        })
    }
}

/// Narrows the code list of the element (or component) a constraint names in `def`, a
/// position's own copy of its segment: `NM108=XX,XV`. The constraint, as a qualifier. A
/// position's qualifier is mandatory there (the guide requires it: it names the position),
/// whatever the dictionary says of the element.
fn narrow(def: &mut SegmentDef, constraint: &str, qualifier: bool) -> Result<Qualifier, String> {
    let bad = |why: &str| format!("{constraint}: {why}");
    let (place, codes) = constraint
        .split_once('=')
        .ok_or_else(|| bad("expected SEGnn=CODE,.."))?;
    let position = place
        .strip_prefix(def.id.as_str())
        .ok_or_else(|| bad(&format!("names another segment than {}", def.id)))?;
    let (element, component) = element_position(position).map_err(bad)?;
    let list: Vec<&str> = codes.split(',').filter(|c| !c.is_empty()).collect();
    if list.is_empty() {
        return Err(bad("no code listed"));
    }
    let codes = Codes::new(list.iter().map(|c| c.as_bytes()));
    let edef = def
        .elements
        .get_mut(element - 1)
        .ok_or_else(|| bad(&format!("{} has no element {element:02}", def.id)))?;
    if qualifier {
        edef.req = Req::M;
    }
    let simple = match (&mut edef.kind, component) {
        (Kind::Simple(s), None) => s,
        (Kind::Composite { components, .. }, Some(c)) => match components.get_mut(c - 1) {
            Some(ElementDef {
                kind: Kind::Simple(s),
                ..
            }) => s,
            _ => return Err(bad(&format!("the composite has no component {c}"))),
        },
        (Kind::Simple(_), Some(_)) => return Err(bad("a simple element has no components")),
        (Kind::Composite { .. }, None) => {
            return Err(bad(
                "a composite's codes are its components': write SEGnn-c",
            ))
        }
    };
    if simple.data_type != DataType::Id {
        return Err(bad("only a code (ID) element's list can be narrowed"));
    }
    *simple = Simple::new(
        simple.data_type,
        simple.min,
        simple.max,
        Some(Arc::new(codes.clone())),
    );
    if qualifier {
        if let Some(ElementDef {
            kind: Kind::Composite { components, .. },
            ..
        }) = def.elements.get_mut(element - 1)
        {
            if let Some(c) = component.and_then(|c| components.get_mut(c - 1)) {
                c.req = Req::M;
            }
        }
        def.last_mandatory = def.last_mandatory.max(element);
    }
    if let Some(fast) = def.fast.get_mut(element - 1) {
        if component.is_none() {
            fast.plan = Shortcut::Full;
        }
        fast.mandatory |= qualifier;
    }
    Ok(Qualifier {
        element,
        component,
        codes,
        shown: place.to_string(),
    })
}

/// What follows a segment id in a constraint or a usage: the element (two digits, 01 and
/// up) and, after `-`, the component (`09`, `01-1`).
fn element_position(position: &str) -> Result<(usize, Option<usize>), &'static str> {
    let (element, component) = match position.split_once('-') {
        Some((e, c)) => (e, Some(c)),
        None => (position, None),
    };
    let component = component
        .map(|c| {
            c.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or("the component position is a number, 1 and up")
        })
        .transpose()?;
    Ok((two_digits(element)?, component))
}

/// An element position: two digits, 01 and up.
fn two_digits(s: &str) -> Result<usize, &'static str> {
    s.parse::<usize>()
        .ok()
        .filter(|n| *n > 0 && s.len() == 2)
        .ok_or("an element position is two digits, 01 and up")
}

/// Applies one element usage of a guide's position to `def`, the position's own copy of its
/// segment: `+NM109` makes the element mandatory here (the guide's "R"), `-NM104` marks it
/// not used (the guide's "N"; a value there is a finding), `+CLM05-3` and `-SV101-7` do the
/// same for a component (required or not used whenever its composite is sent), and
/// `-CLM13..19` for a run of elements (guides leave whole tails unused). The places it
/// names (`(element, component)`), so that a place given two usages is an error.
fn usage(def: &mut SegmentDef, token: &str) -> Result<Vec<(usize, Option<usize>)>, String> {
    let bad = |why: &str| format!("{token}: {why}");
    let (required, place) = match token.split_at_checked(1) {
        Some(("+", rest)) => (true, rest),
        Some(("-", rest)) => (false, rest),
        _ => {
            return Err(bad(
                "expected +SEGnn (required here) or -SEGnn (not used here)",
            ))
        }
    };
    let position = place
        .strip_prefix(def.id.as_str())
        .ok_or_else(|| bad(&format!("names another segment than {}", def.id)))?;
    let places: Vec<(usize, Option<usize>)> = if let Some((from, to)) = position.split_once("..") {
        let (from, to) = (two_digits(from).map_err(bad)?, two_digits(to).map_err(bad)?);
        if to <= from {
            return Err(bad("a run of elements goes up: SEGnn..mm with mm after nn"));
        }
        (from..=to).map(|e| (e, None)).collect()
    } else {
        vec![element_position(position).map_err(bad)?]
    };
    let id = def.id.clone();
    for (element, component) in &places {
        let (element, component) = (*element, *component);
        let edef = def
            .elements
            .get_mut(element - 1)
            .ok_or_else(|| bad(&format!("{id} has no element {element:02}")))?;
        let target = match (&mut edef.kind, component) {
            (_, None) => edef,
            (Kind::Composite { components, .. }, Some(c)) => components
                .get_mut(c - 1)
                .ok_or_else(|| bad(&format!("the composite has no component {c}")))?,
            (Kind::Simple(_), Some(_)) => return Err(bad("a simple element has no components")),
        };
        let shown = match component {
            Some(c) => format!("{id}{element:02}-{c}"),
            None => format!("{id}{element:02}"),
        };
        target.req = match (required, target.req) {
            (false, Req::M) => {
                return Err(bad(&format!(
                    "{shown} is mandatory in its segment's definition (or the qualifier): a guide cannot mark it not used"
                )))
            }
            (true, Req::N) => {
                return Err(bad(&format!(
                    "{shown} is not used in its segment's definition: it cannot be required here"
                )))
            }
            (true, _) => Req::M,
            (false, _) => Req::N,
        };
        // A component's usage is checked by the composite's full check, which a composite
        // always takes; an element's shortcut follows its new requirement.
        if let (Some(e), Some(fast)) =
            (def.elements.get(element - 1), def.fast.get_mut(element - 1))
        {
            *fast = FastElement::of(e);
        }
    }
    def.last_mandatory = def
        .elements
        .iter()
        .rposition(|e| e.req == Req::M)
        .map_or(0, |i| i + 1);
    Ok(places)
}

/// What the walk needs precomputed on every node: loops take their trigger's segment, and
/// each node its children's next mandatory one, tags, tag filter and JSON keys.
fn link(nodes: &mut [Node], path: &str) -> Result<(), String> {
    // A loop's trigger is its first child, a segment; the loop takes its definition.
    for i in 1..nodes.len() {
        if !nodes[i].is_loop() {
            continue;
        }
        let first = nodes[i].children[0];
        if nodes[first].is_loop() {
            return Err(format!(
                "schemas/{path}: loop {} must begin with a segment, not a loop",
                nodes[i].id
            ));
        }
        nodes[i].segment = nodes[first].segment;
        nodes[i].tag = nodes[first].tag;
        nodes[i].qualifier = nodes[first].qualifier.clone();
        nodes[i].narrowed = nodes[first].narrowed.clone();
    }
    if nodes[0].children.is_empty() {
        return Err(format!("schemas/{path}: the structure is empty"));
    }
    for i in 0..nodes.len() {
        let children = &nodes[i].children;
        let mut next = vec![children.len(); children.len() + 1];
        for c in (0..children.len()).rev() {
            next[c] = if nodes[children[c]].req == Req::M {
                c
            } else {
                next[c + 1]
            };
        }
        nodes[i].next_mandatory = next;
        nodes[i].child_tags = nodes[i].children.iter().map(|c| nodes[*c].tag).collect();
        // Runs of adjacent positions with one segment id told apart by qualifiers (a
        // loop's trigger never joins one: seen again, it starts the next iteration).
        let mut group_start: Vec<usize> = Vec::with_capacity(nodes[i].children.len());
        for (c, child) in nodes[i].children.iter().enumerate() {
            let joins = c > usize::from(i != 0)
                && nodes[i].children.get(c - 1).is_some_and(|prev| {
                    nodes[*prev].tag == nodes[*child].tag
                        && nodes[*prev].qualifier.is_some()
                        && nodes[*child].qualifier.is_some()
                });
            let start = match group_start.last() {
                Some(s) if joins => *s,
                _ => c,
            };
            group_start.push(start);
        }
        nodes[i].group_start = group_start;
        // The root has no trigger; a loop's trigger seen again is the enclosing loop's business.
        let first = usize::from(i != 0);
        nodes[i].tag_filter = nodes[i]
            .child_tags
            .iter()
            .skip(first)
            .fold(0, |f, t| f | tag_bit(*t));
        let mut taken: HashMap<String, u32> = HashMap::new();
        for c in nodes[i].children.clone() {
            let base = if nodes[c].is_loop() {
                format!("{}_loop", nodes[c].id)
            } else {
                nodes[c].id.clone()
            };
            let n = taken.entry(base.clone()).or_insert(0);
            *n += 1;
            nodes[c].key = if *n == 1 { base } else { format!("{base}_{n}") };
        }
    }
    Ok(())
}

fn compile(
    path: &str,
    first_line: usize,
    id: &str,
    raw: &RawFile,
    base: &Dictionary,
    local: &Dictionary,
) -> Result<SetDef, String> {
    let lookup = Lookup { path, base, local };
    let structure = raw
        .structure
        .as_deref()
        .ok_or_else(|| format!("schemas/{path}: a set needs `structure`"))?;
    let (mut nodes, segments) = read_structure(&lookup, first_line, structure)?;
    link(&mut nodes, path)?;
    let hierarchy = match &raw.hierarchy {
        None => None,
        Some(h) => Some(
            nodes
                .iter()
                .position(|n| n.is_loop() && n.id == *h)
                .ok_or_else(|| {
                    format!("schemas/{path}: hierarchy names loop {h}, which the structure lacks")
                })?,
        ),
    };
    let context = match &raw.context {
        None => None,
        Some(c) => Some(
            nodes
                .iter()
                .position(|n| n.is_loop() && n.id == *c)
                .ok_or_else(|| {
                    format!("schemas/{path}: context names loop {c}, which the structure lacks")
                })?,
        ),
    };
    let mut by_id: HashMap<Box<[u8]>, Vec<usize>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate().skip(1) {
        if !n.is_loop() {
            by_id
                .entry(n.id.as_bytes().to_vec().into_boxed_slice())
                .or_default()
                .push(i);
        }
    }
    let mut known: HashSet<Box<[u8]>> = base
        .segments
        .keys()
        .chain(local.segments.keys())
        .chain(&base.directory)
        .map(|k| k.as_bytes().to_vec().into_boxed_slice())
        .collect();
    for envelope in ["ISA", "IEA", "GS", "GE", "ST", "SE", "TA1"] {
        known.insert(envelope.as_bytes().to_vec().into_boxed_slice());
    }
    let document = raw
        .document
        .as_ref()
        .map(|d| document_spec(path, id, d, &by_id, &nodes, &segments))
        .transpose()?;
    Ok(SetDef {
        id: id.to_string(),
        version: raw.version.clone(),
        name: raw.name.clone().unwrap_or_default(),
        nodes,
        segments,
        hierarchy,
        document,
        context,
        by_id,
        known: Arc::new(known),
    })
}

/// `[document]` compiled: every element it names must be one the structure holds.
fn document_spec(
    path: &str,
    id: &str,
    raw: &RawDocument,
    by_id: &HashMap<Box<[u8]>, Vec<usize>>,
    nodes: &[Node],
    segments: &[SegmentDef],
) -> Result<DocumentSpec, String> {
    let per = raw
        .per
        .as_ref()
        .map(|per| match per {
            OneOrMany::One(id) => per_loop(path, std::slice::from_ref(id), nodes),
            OneOrMany::Many(ids) => per_loop(path, ids, nodes),
        })
        .transpose()?;
    let field = |text: &str| -> Result<Field, String> {
        let bad = || {
            format!("schemas/{path}: [document] names {text:?}, expected a segment id and a two-digit position the structure holds (BEG03), or a component of it (CLM05-3), after the loop that holds it in a set cut by loop (2010AA/NM109)")
        };
        let (in_loop, text) = match text.split_once('/') {
            // Only a part has loops around it to read from.
            Some((l, rest)) if per.is_some() => (Some(l), rest),
            Some(_) => return Err(bad()),
            None => (None, text),
        };
        let cut = text
            .find('-')
            .unwrap_or(text.len())
            .checked_sub(2)
            .ok_or_else(bad)?;
        let segment = text.get(..cut).ok_or_else(bad)?;
        let (position, component) =
            element_position(text.get(cut..).ok_or_else(bad)?).map_err(|_| bad())?;
        let node = by_id
            .get(segment.as_bytes())
            .and_then(|places| places.first())
            .and_then(|n| nodes.get(*n))
            .ok_or_else(bad)?;
        let elements = segments.get(node.segment).map_or(0, |s| s.elements.len());
        if position > elements {
            return Err(bad());
        }
        // The loop must hold the segment itself (not only in a loop under it), and be read
        // by every part.
        let held = |l: &str| {
            nodes.iter().enumerate().skip(1).any(|(i, n)| {
                n.is_loop()
                    && n.id == l
                    && per.as_ref().is_some_and(|p| p.read_by_every_part(nodes, i))
                    && nodes
                        .iter()
                        .any(|c| !c.is_loop() && c.parent == i && c.id == segment)
            })
        };
        if in_loop.is_some_and(|l| !held(l)) {
            return Err(bad());
        }
        Ok(Field {
            segment: segment.to_string(),
            position,
            component,
            in_loop: in_loop.map(str::to_string),
        })
    };
    if raw.id.is_empty() {
        return Err(format!("schemas/{path}: [document] needs `id`"));
    }
    Ok(DocumentSpec {
        id: raw.id.iter().map(|f| field(f)).collect::<Result<_, _>>()?,
        event: raw
            .event
            .iter()
            .map(|f| field(f))
            .collect::<Result<_, _>>()?,
        version: raw.version.as_deref().map(field).transpose()?,
        kind: raw.kind.as_deref().map(field).transpose()?,
        of: raw.of.clone().unwrap_or_else(|| id.to_string()),
        changes: raw.changes.clone(),
        copies: raw.copies.clone(),
        per,
    })
}

/// `node` and the nodes that enclose it, up to the root (its own parent).
fn enclosing(nodes: &[Node], node: usize) -> impl Iterator<Item = usize> + '_ {
    let mut next = Some(node);
    std::iter::from_fn(move || {
        let at = next?;
        next = nodes.get(at).filter(|n| n.parent != at).map(|n| n.parent);
        Some(at)
    })
    .take(nodes.len().saturating_add(1))
}

/// `per = "2300"` compiled: which nodes are or may hold the loops.
fn per_loop(path: &str, ids: &[String], nodes: &[Node]) -> Result<PerLoop, String> {
    if ids.is_empty() {
        return Err(format!("schemas/{path}: [document] per names no loop"));
    }
    let mut holds = vec![false; nodes.len()];
    for id in ids {
        let mut any = false;
        for (i, n) in nodes.iter().enumerate().skip(1) {
            if !(n.is_loop() && n.id == *id) {
                continue;
            }
            any = true;
            for at in enclosing(nodes, i) {
                match holds.get_mut(at) {
                    // Marked already, and so is every node above.
                    Some(true) | None => break,
                    Some(slot) => *slot = true,
                }
            }
        }
        if !any {
            return Err(format!(
                "schemas/{path}: [document] per names loop {id}, which the structure lacks"
            ));
        }
    }
    Ok(PerLoop {
        ids: ids.to_vec(),
        holds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DICT: &str = r#"
version = "004010"
[segments.BEG]
name = "Beginning Segment for Purchase Order"
elements = [
  { ref = 353, name = "Transaction Set Purpose Code", req = "M", type = "ID", min = 2, max = 2 },
  { ref = 324, name = "Purchase Order Number", req = "M", type = "AN", min = 1, max = 22 },
]
[segments.N1]
name = "Name"
elements = [
  { ref = 98, name = "Entity Identifier Code", req = "M", type = "ID", min = 2, max = 3 },
  { ref = 93, name = "Name", req = "X", type = "AN", min = 1, max = 60 },
  { composite = "C001", req = "O" },
]
syntax = ["R0203"]
[composites.C001]
name = "Composite Unit of Measure"
components = [{ ref = 355, name = "Unit or Basis for Measurement Code", req = "M", type = "ID", min = 2, max = 2 }]
[codes]
353 = ["00", "05"]
"#;

    const SET: &str = r#"
version = "004010"
id = "850"
name = "Purchase Order"
structure = """
BEG M 1
loop N1 O 200
  N1 M 1
  ZZ1 O >1
"""
[segments.ZZ1]
name = "Local"
elements = [{ ref = 9999, name = "Local Thing", req = "O", type = "N2", min = 1, max = 5 }]
"#;

    #[test]
    fn loads_a_dictionary_and_a_set() {
        let s = Schemas::load(&[("004010/segments.toml", DICT), ("004010/850.toml", SET)]).unwrap();
        let def = s.find(b"004010VICS", b"850").unwrap();
        assert_eq!(def.root().children.len(), 2);
        let n1_loop = &def.nodes[def.root().children[1]];
        assert_eq!((n1_loop.id.as_str(), n1_loop.max), ("N1", 200));
        assert_eq!(def.nodes[n1_loop.children[1]].max, u32::MAX);
        let beg = def.segment_of(def.root().children[0]).unwrap();
        assert_eq!(beg.elements[0].key, "transaction_set_purpose_code_01");
        let Kind::Simple(s353) = &beg.elements[0].kind else {
            panic!()
        };
        assert!(s353.codes.as_ref().unwrap().contains(b"05"));
        assert!(!s353.codes.as_ref().unwrap().contains(b"5"));
        assert_eq!(
            s353.codes.as_ref().unwrap().list(),
            vec![b"00".to_vec(), b"05".to_vec()]
        );
        let n1 = def.segment_of(n1_loop.children[0]).unwrap();
        assert_eq!(n1.syntax[0].positions, vec![2, 3]);
        assert_eq!(n1.elements[2].key, "composite_unit_of_measure_03");
        assert!(def.knows(b"ZZ1") && def.knows(b"SE") && !def.knows(b"XYZ"));
        assert_eq!(def.places(b"ZZ1").len(), 1);
        assert!(s.find(b"005010", b"850").is_none());
        // The dictionary's code lists, by the release a GS08 selects.
        assert!(s.code_list(b"004010VICS", "353").unwrap().contains(b"05"));
        assert!(s.code_list(b"004010", "98").is_none());
        assert!(s.code_list(b"005010", "353").is_none());
        assert!(s.code_list(b"0040", "353").is_none());
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let bad = SET.replace("ZZ1 O >1", "ZZ1 O many");
        let e = Schemas::load(&[("004010/segments.toml", DICT), ("004010/850.toml", &bad)])
            .unwrap_err();
        assert!(e.contains("schemas/004010/850.toml: line 9:"), "{e}");
        let missing = SET.replace("ZZ1 O >1", "QQQ O 1");
        let e = Schemas::load(&[
            ("004010/segments.toml", DICT),
            ("004010/850.toml", &missing),
        ])
        .unwrap_err();
        assert!(e.contains("segment QQQ is used but"), "{e}");
    }

    #[test]
    fn a_document_per_loop_names_fields_its_loops_hold() {
        let load = |document: &str| {
            // L1 twice: under L3, and under L4 beside it, which is around the second only.
            let set = format!("{SET}\n[document]\n{document}\n").replace(
                "  ZZ1 O >1\n",
                "  ZZ1 O >1\nloop L3 O 9\n  ZZ1 M 1\n  loop L1 O 9\n    N1 M 1\n  loop L4 O 9\n    BEG M 1\n    ZZ1 O 1\n    loop L1 O 9\n      N1 M 1\n",
            );
            Schemas::load(&[("004010/segments.toml", DICT), ("004010/850.toml", &set)])
                .map(|s| s.find(b"004010", b"850").unwrap().document.clone().unwrap())
        };
        let d =
            load("id = [\"BEG02\", \"N1/N102\"]\nevent = [\"N1/N103-1\"]\nper = \"N1\"").unwrap();
        let per = d.per.unwrap();
        assert_eq!(per.ids, ["N1"]);
        assert_eq!(d.id[1].to_string(), "N1/N102");
        assert_eq!(d.event[0].to_string(), "N1/N103-1");
        assert_eq!(d.event[0].component, Some(1));
        // The root holds the loop; BEG does not.
        assert!(per.holds(0));
        assert!(!per.holds(1));
        for (bad, why) in [
            ("id = [\"N1/N102\"]", "a loop's field without per"),
            (
                "id = [\"N1/BEG02\"]\nper = \"N1\"",
                "a segment the loop does not hold",
            ),
            ("id = [\"XX/N102\"]\nper = \"N1\"", "no such loop"),
            ("id = [\"BEG02-0\"]", "component 0"),
            (
                "id = [\"BEG02\"]\nper = \"ZZ1\"",
                "per names a segment, not a loop",
            ),
            ("id = [\"BEG02\"]\nper = []", "per names nothing"),
            (
                "id = [\"L4/ZZ101\"]\nper = \"L1\"",
                "a level around some of the parts only",
            ),
        ] {
            let e = load(bad).unwrap_err();
            assert!(
                e.contains("schemas/004010/850.toml: [document]"),
                "{why}: {e}"
            );
        }
    }

    #[test]
    fn an_older_release_is_read_as_the_release_the_table_names() {
        let releases = r#"
["004030"]
"850" = { as = "004010", verdict = "same", sources = "two tables" }
"#;
        let files = |releases: &str| {
            Schemas::load(&[
                ("004010/segments.toml", DICT),
                ("004010/850.toml", SET),
                ("releases.toml", releases),
            ])
        };
        let s = files(releases).unwrap();
        let own = s.find(b"004010", b"850").unwrap();
        assert!(matches!(s.reading(b"004030", b"850"), Reading::As(d) if Arc::ptr_eq(d, own)));
        assert!(matches!(s.reading(b"004010VICS", b"850"), Reading::Own(_)));
        assert!(Arc::ptr_eq(s.find(b"004030X1", b"850").unwrap(), own));
        // Only the sets the table names, only in the releases it names.
        assert!(matches!(
            s.reading(b"004030", b"810"),
            Reading::EnvelopeOnly
        ));
        assert!(s.find(b"004040", b"850").is_none());
        assert!(s.defines_release("004010") && !s.defines_release("004030"));
        for (bad, says) in [
            (
                releases.replace("\"004010\"", "\"005010\""),
                "005010 does not define 850",
            ),
            (
                releases.replace("\"004030\"", "\"004010\""),
                "004010 defines 850 itself",
            ),
            (
                releases.replace("\"004030\"", "\"4030\""),
                "a release is six digits",
            ),
            (
                releases.replace("\"same\"", "\"close\""),
                "is not \"same\" or \"accepts\"",
            ),
            (releases.replace("sources", "source"), "unknown field"),
        ] {
            let e = files(&bad).unwrap_err();
            assert!(
                e.contains("schemas/releases.toml") && e.contains(says),
                "{e}"
            );
        }
    }
}
