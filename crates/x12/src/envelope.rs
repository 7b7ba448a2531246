//! The envelope tree ISA > GS > ST..SE > GE > IEA, built in one pass over the segments.
//!
//! A transaction set keeps its body as a byte range plus a count, not as a list of segments:
//! the tree of a 200 MB file then costs a few bytes per set instead of a few dozen per
//! segment, and [`Body::segments`] cuts the same range again, still zero-copy, when a
//! translator or schema validator needs it.
//!
//! A file is read a piece at a time ([`Interchanges::piece`]); an interchange larger than a
//! piece is given out in parts, and what is particular to parts lives in [`parts`].

use std::ops::Range;

use memchr::memmem;

use super::isa::{parse_isa, Delimiter, IsaError, ISA_SCAN_LIMIT};

mod parts;

use super::{skip_leading, Delimiters, Isa, Position, Segment, Segments};
pub use parts::Inside;
use parts::Opening;
pub(crate) use parts::Part;

/// Bounds on untrusted input. A breach is recorded in the tree and becomes a rejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields, default))]
pub struct Limits {
    /// Files larger than this are rejected before being read.
    pub max_file_bytes: u64,
    /// Segments in one transaction set, ST and SE included.
    pub max_segments_per_set: u32,
    /// Bytes in one element (a composite counts as one element).
    pub max_element_len: usize,
    /// Bytes in one transaction set, ST to SE: a set is checked and translated whole, so
    /// this bounds what one set may take.
    pub max_set_bytes: u64,
    /// Bytes in one interchange, ISA to IEA: what a piece grows to when an interchange is
    /// read whole (from standard input), and what bounds its outline read in parts.
    pub max_interchange_bytes: u64,
}

impl Limits {
    /// The most a piece of a file ever needs to hold: the largest interchange allowed, and
    /// what the reader looks at past it (see [`PIECE_MARGIN`]).
    pub fn piece_cap(&self) -> usize {
        usize::try_from(self.max_interchange_bytes)
            .unwrap_or(usize::MAX)
            .saturating_add(PIECE_MARGIN)
    }
}

impl Default for Limits {
    fn default() -> Self {
        // Real sets run to thousands of segments and real elements to a few hundred bytes
        // (BIN segments excepted); these bounds are far above both and far below harm.
        Limits {
            max_file_bytes: 2 << 30,
            max_segments_per_set: 1_000_000,
            max_element_len: 65_536,
            max_set_bytes: 64 << 20,
            max_interchange_bytes: 256 << 20,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// Which of the [`Limits`] an interchange broke.
pub enum LimitKind {
    /// More segments in one set than `max_segments_per_set`.
    SegmentsPerSet,
    /// An element longer than `max_element_len`.
    ElementLength,
    /// A set of more bytes than `max_set_bytes`.
    SetBytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// One limit broken, where, and by how much: recorded in the tree, rejected by the caller.
pub struct LimitBreach {
    /// Which limit.
    pub kind: LimitKind,
    /// Where it was broken (the set's ST, or the element).
    pub position: Position,
    /// The limit in force.
    pub limit: u64,
    /// What the input held.
    pub actual: u64,
}

/// How an interchange ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterchangeEnd {
    /// Its IEA was read.
    Iea,
    /// The input ended before an IEA.
    EndOfInput,
    /// Another ISA began before an IEA.
    NextIsa,
}

/// Segments between an ST and its SE, kept as a range of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Body<'a> {
    input: &'a [u8],
    range: (usize, usize),
    first_ordinal: u32,
    /// Segments in the body (ST and SE excluded).
    pub count: u32,
    delimiters: Delimiters,
    base: usize,
}

impl<'a> Body<'a> {
    /// The body's segments, cut again from the input (zero-copy).
    pub fn segments(&self) -> Segments<'a> {
        Segments::new(
            self.input,
            self.range.0,
            self.range.1,
            self.first_ordinal,
            self.delimiters,
        )
        .in_file_at(self.base)
    }

    /// The body's bytes, from its first segment to the end of the last one's terminator,
    /// with where they begin in the file and the first segment's ordinal: for a reader
    /// that cuts them itself, as [`Body::segments`] does (the schema walker cuts each
    /// segment in the same pass that classifies its bytes).
    pub fn bytes(&self) -> (&'a [u8], usize, u32) {
        let bytes = self
            .input
            .get(self.range.0..self.range.1)
            .unwrap_or_default();
        (bytes, self.base + self.range.0, self.first_ordinal)
    }

    /// Bytes from the first body segment to the end of the last one's terminator.
    pub fn len(&self) -> usize {
        self.range.1.saturating_sub(self.range.0)
    }

    /// Whether the body holds no segment.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// One transaction set, ST to SE.
pub struct TransactionSet<'a> {
    /// Its ST.
    pub st: Segment<'a>,
    /// The segments between ST and SE.
    pub body: Body<'a>,
    /// Its SE; `None` when the set ended without one.
    pub se: Option<Segment<'a>>,
    /// The body segments whose id is not 2 or 3 capital letters or digits, the first
    /// [`MAX_BAD_IDS`] of them (past that the set is rejected anyway).
    pub bad_ids: Vec<Segment<'a>>,
}

/// Invalid segment ids kept per set.
pub const MAX_BAD_IDS: usize = 100;

impl<'a> TransactionSet<'a> {
    /// A set read from bytes that hold exactly its segments, ST first and SE last (a part of
    /// a set put together: a claim with the loops around it); `None` without an ST.
    pub fn from_segments(bytes: &'a [u8], delimiters: Delimiters) -> Option<TransactionSet<'a>> {
        let mut segments = Segments::new(bytes, 0, bytes.len(), 1, delimiters);
        let st = segments.next().filter(|s| s.is(b"ST"))?;
        let start = segments.skip_line_endings();
        let (mut end, mut count, mut se) = (start, 0u32, None);
        while let Some(s) = segments.next() {
            if s.is(b"SE") {
                se = Some(s);
                break;
            }
            count = count.saturating_add(1);
            end = segments.offset();
        }
        Some(TransactionSet {
            st,
            body: Body {
                input: bytes,
                range: (start, end),
                first_ordinal: 2,
                count,
                delimiters,
                base: 0,
            },
            se,
            bad_ids: Vec::new(),
        })
    }

    /// Segments counted the way SE01 counts them: ST and SE included (SE even when missing,
    /// since SE01 counts itself).
    pub fn counted_segments(&self) -> u32 {
        self.body.count.saturating_add(2)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// One functional group, GS to GE.
pub struct Group<'a> {
    /// Its GS.
    pub gs: Segment<'a>,
    /// Its transaction sets.
    pub sets: Sets<'a>,
    /// Its GE; `None` when the group ended without one.
    pub ge: Option<Segment<'a>>,
}

/// The transaction sets of a group, kept as a few offsets each and cut again from the
/// input when asked for: an interchange of a million small sets then holds 24 MB of them,
/// not 200.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sets<'a> {
    input: &'a [u8],
    base: usize,
    delimiters: Delimiters,
    entries: Entries,
    /// The invalid body segment ids of every set, by set index (rare: only broken sets).
    bad_ids: Vec<(usize, Segment<'a>)>,
}

/// The sets' entries, each in 32-bit numbers (24 bytes) while every offset fits, as it does
/// in any input of less than 4 GiB; in 64-bit ones (40 bytes) from the first that does not.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entries {
    Narrow(Vec<[u32; 6]>),
    Wide(Vec<SetEntry>),
}

impl Entries {
    fn len(&self) -> usize {
        match self {
            Entries::Narrow(v) => v.len(),
            Entries::Wide(v) => v.len(),
        }
    }

    fn get(&self, i: usize) -> Option<SetEntry> {
        match self {
            Entries::Narrow(v) => v.get(i).map(|&[st, from, to, se, st_ordinal, count]| {
                let at = |n: u32| n as usize;
                SetEntry {
                    st: at(st),
                    body: (at(from), at(to)),
                    se: if se == u32::MAX { usize::MAX } else { at(se) },
                    st_ordinal,
                    count,
                }
            }),
            Entries::Wide(v) => v.get(i).copied(),
        }
    }

    fn push(&mut self, e: SetEntry) {
        let narrow = |n: usize| u32::try_from(n).ok().filter(|n| *n != u32::MAX);
        let se = if e.se == usize::MAX {
            Some(u32::MAX)
        } else {
            narrow(e.se)
        };
        match (
            &mut *self,
            narrow(e.st),
            narrow(e.body.0),
            narrow(e.body.1),
            se,
        ) {
            (Entries::Narrow(v), Some(st), Some(from), Some(to), Some(se)) => {
                v.push([st, from, to, se, e.st_ordinal, e.count]);
            }
            (Entries::Narrow(_), ..) => {
                let wide: Vec<SetEntry> = (0..self.len()).filter_map(|i| self.get(i)).collect();
                *self = Entries::Wide(wide);
                self.push(e);
            }
            (Entries::Wide(v), ..) => v.push(e),
        }
    }

    /// Without the growth's spare room, once the group is closed.
    fn shrink(&mut self) {
        match self {
            Entries::Narrow(v) => v.shrink_to_fit(),
            Entries::Wide(v) => v.shrink_to_fit(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SetEntry {
    /// Indexes in the input of the ST, the body and the SE (`usize::MAX`: no SE).
    st: usize,
    body: (usize, usize),
    se: usize,
    st_ordinal: u32,
    count: u32,
}

impl<'s, 'a> IntoIterator for &'s Sets<'a> {
    type Item = TransactionSet<'a>;
    type IntoIter = Box<dyn Iterator<Item = TransactionSet<'a>> + 's>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<'a> Sets<'a> {
    fn new(input: &'a [u8], base: usize, delimiters: Delimiters) -> Self {
        Sets {
            input,
            base,
            delimiters,
            entries: Entries::Narrow(Vec::new()),
            bad_ids: Vec::new(),
        }
    }

    /// How many sets.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no set.
    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }

    /// Set `i` (0-based), cut again from the input.
    pub fn get(&self, i: usize) -> Option<TransactionSet<'a>> {
        let e = self.entries.get(i)?;
        let cut = |at: usize, ordinal: u32| {
            Segments::new(self.input, at, self.input.len(), ordinal, self.delimiters)
                .in_file_at(self.base)
                .next()
        };
        let st = cut(e.st, e.st_ordinal)?;
        let se = (e.se != usize::MAX)
            .then(|| cut(e.se, e.st_ordinal.saturating_add(e.count).saturating_add(1)))
            .flatten();
        let from = self.bad_ids.partition_point(|(set, _)| *set < i);
        let bad_ids = self
            .bad_ids
            .get(from..)
            .unwrap_or_default()
            .iter()
            .take_while(|(set, _)| *set == i)
            .map(|(_, s)| *s)
            .collect();
        Some(TransactionSet {
            st,
            body: Body {
                input: self.input,
                range: e.body,
                first_ordinal: e.st_ordinal.saturating_add(1),
                count: e.count,
                delimiters: self.delimiters,
                base: self.base,
            },
            se,
            bad_ids,
        })
    }

    /// Every set, in order.
    pub fn iter(&self) -> impl Iterator<Item = TransactionSet<'a>> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    fn push(&mut self, set: TransactionSet<'a>) {
        let index = self.entries.len();
        self.bad_ids.extend(set.bad_ids.iter().map(|s| (index, *s)));
        self.entries.push(SetEntry {
            st: set.st.offset - self.base,
            body: set.body.range,
            se: set.se.map_or(usize::MAX, |s| s.offset - self.base),
            st_ordinal: set.st.ordinal,
            count: set.body.count,
        });
    }
}

/// One interchange, borrowed from the file it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interchange<'a> {
    /// Its ISA, with the delimiters it declares.
    pub isa: Isa<'a>,
    /// Its functional groups, in order.
    pub groups: Vec<Group<'a>>,
    /// ISB (grade of service request) and ISE (deferred delivery request): the optional
    /// interchange control segments of X12.5 (from 00305), right after the ISA.
    pub isb: Option<Segment<'a>>,
    /// Its ISE, if any (see `isb`).
    pub ise: Option<Segment<'a>>,
    /// TA1 segments at interchange level (an interchange may hold only these).
    pub ta1: Vec<Segment<'a>>,
    /// Where the first space or tab before a segment was skipped (an indented file).
    pub first_blank: Option<usize>,
    /// Segments outside any envelope, at most `STRAY_KEPT` (100) of them.
    pub stray: Vec<Segment<'a>>,
    /// Segments outside any envelope, all of them (`stray` keeps the first 100).
    pub stray_count: u32,
    /// Its IEA; `None` when it ended without one (see `end`).
    pub iea: Option<Segment<'a>>,
    /// How it ended.
    pub end: InterchangeEnd,
    /// Bytes of the interchange in the input it was read from, from `I` to the end of the
    /// IEA's line ending; `base + span.start` is where it begins in the file.
    pub span: Range<usize>,
    /// Where the input it was read from begins in the file (0 unless the file was read in
    /// pieces). Every offset in the tree is already the file's; only `span` indexes the input.
    pub base: usize,
    input: &'a [u8],
    /// The line ending after the ISA's terminator (empty, CR, LF or CRLF), kept for rendering.
    pub suffix: &'a [u8],
    /// The [`Limits`] it broke.
    pub breaches: Vec<LimitBreach>,
    /// Segments read, ISA and IEA included (in a part: up to its end, from the ISA).
    pub segment_count: u32,
    /// Which part of its interchange this is ([`Part::WHOLE`] unless read in parts); asked
    /// through the `*_part`, `*_index` and `*_group` methods below.
    pub(crate) part: Part,
}

impl<'a> Interchange<'a> {
    /// Whether it was read whole: not one of several parts ([`Interchanges::in_parts`]).
    pub fn is_whole(&self) -> bool {
        self.part == Part::WHOLE
    }

    /// Whether it is its interchange's first part (it holds the ISA, and the ISB and ISE if
    /// any); an interchange read whole is its own first and last part.
    pub fn is_first_part(&self) -> bool {
        self.part.first
    }

    /// Whether its interchange ends in it (it holds the IEA, if any).
    pub fn is_last_part(&self) -> bool {
        self.part.last
    }

    /// The interchange's index of this part's group `gi` (the part's indexes are its own);
    /// `gi` may be `groups.len()`, giving the groups the interchange opened up to its end.
    pub fn group_index(&self, gi: usize) -> usize {
        self.part.group(gi)
    }

    /// The interchange's index, in its group, of set `si` of this part's group `gi`.
    pub fn set_index(&self, gi: usize, si: usize) -> usize {
        self.part.set(gi, si)
    }

    /// Whether this part's group `gi` was opened in it: its GS is this part's to judge.
    pub fn opens_group(&self, gi: usize) -> bool {
        self.part.opens(gi)
    }

    /// Whether this part's group `gi` is closed in it: its GE, or its missing GE, is this
    /// part's to judge.
    pub fn closes_group(&self, gi: usize) -> bool {
        self.part.closes(gi, self.groups.len())
    }

    /// The input it was read from (`span` indexes it).
    pub fn input(&self) -> &'a [u8] {
        self.input
    }

    /// Its own bytes, from `I` to the end of the IEA's line ending.
    pub fn bytes(&self) -> &'a [u8] {
        self.input.get(self.span.clone()).unwrap_or_default()
    }

    /// The delimiters its ISA declares.
    pub fn delimiters(&self) -> Delimiters {
        self.isa.delimiters
    }

    /// The line ending the sender put after its segments (what followed the ISA, blank lines
    /// aside): "", "\n", "\r\n" or "\r". Empty when the terminator is itself a line break.
    pub fn line_ending(&self) -> &'static [u8] {
        let s = self.suffix;
        if matches!(self.isa.delimiters.segment, b'\n' | b'\r') {
            b""
        } else if s.starts_with(b"\r\n") {
            b"\r\n"
        } else if s.starts_with(b"\n") {
            b"\n"
        } else if s.starts_with(b"\r") {
            b"\r"
        } else {
            b""
        }
    }
}

/// How many stray segments are kept for reporting; the rest are only counted.
pub const STRAY_KEPT: usize = 100;

/// Why part of a file could not be read as an interchange at all.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadError {
    /// What went wrong.
    pub kind: ReadErrorKind,
    /// Byte offset in the file.
    pub offset: usize,
    /// What went wrong, in words.
    pub message: String,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for ReadError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
/// What kind of [`ReadError`].
pub enum ReadErrorKind {
    /// Something other than an ISA where an interchange should start.
    NotAnInterchange,
    /// An ISA whose sixteen elements cannot be found.
    IsaUnreadable,
    /// The element separator is a letter, digit or space.
    ElementSeparator,
    /// The segment terminator is a letter, digit, space or another delimiter.
    SegmentTerminator,
    /// The file holds no interchange at all.
    Empty,
    /// An interchange longer than `limits.max_interchange_bytes`: not read.
    TooLarge,
}

/// Reads a file's interchanges one by one. After a [`ReadError`] it resumes at the next `ISA`.
#[derive(Debug, Clone)]
pub struct Interchanges<'a> {
    input: &'a [u8],
    pos: usize,
    limits: Limits,
    /// Where `input` begins in the file.
    base: usize,
    /// Whether `input` runs to the end of the file. When it does not, nothing is given out
    /// that more bytes could change: the reading stops before it (see [`Interchanges::resume`]).
    last: bool,
    seen_any: bool,
    /// Inside bytes that are not an interchange, already reported: look for the next ISA.
    skipping: bool,
    /// This piece's reading is over (`pos` is where the next piece starts).
    stopped: bool,
    /// Just past where the piece's last `IEA` or `ISA` begins (0: none), once looked for.
    last_end: Option<usize>,
    /// The last thing given out was an interchange closed by a terminated IEA.
    last_closed: bool,
    /// An interchange that does not end in the piece is given out in parts
    /// ([`Interchanges::in_parts`]) rather than waiting for a piece that holds it whole.
    split: bool,
    /// The bytes the reader kept of the interchange the piece begins inside (see [`Inside`]).
    head: &'a [u8],
    /// The reading is inside an interchange read in parts, at `pos`.
    inside: Option<Inside>,
    /// Something was given out from this piece.
    given: bool,
}

/// How far back from a piece's end [`Interchanges::may_end`] looks for its last marker.
const MARKER_LOOK: usize = 1 << 20;

/// How many bytes past `limits.max_interchange_bytes` a piece must hold before an
/// interchange that does not end in it is too large: past its last byte, the reader looks at
/// most at the next ISA's scan window, so with this much more an interchange within the
/// limit always ends in the piece.
pub const PIECE_MARGIN: usize = 2 * ISA_SCAN_LIMIT;

/// Where a reading of one piece of a file stopped, and what the reading of the next piece,
/// which begins `consumed` bytes into this one, needs to know of what came before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resume {
    /// Bytes of the piece read; the next piece begins here.
    pub consumed: usize,
    seen_any: bool,
    skipping: bool,
    /// The next piece begins inside an interchange read in parts.
    pub inside: Option<Inside>,
}

impl Resume {
    /// Reading resumes right after an interchange closed by its IEA.
    pub fn after_an_interchange() -> Resume {
        Resume {
            consumed: 0,
            seen_any: true,
            skipping: false,
            inside: None,
        }
    }

    /// Whether the reading resumes at an interchange's start (not inside skipped bytes, nor
    /// inside an interchange read in parts).
    pub fn is_plain(&self) -> bool {
        !self.skipping && self.inside.is_none()
    }

    /// The same, `by` bytes further into the piece.
    pub fn shifted(self, by: usize) -> Resume {
        Resume {
            consumed: self.consumed + by,
            ..self
        }
    }
}

/// Where an interchange likely begins at or after `from`: an `ISA` followed by a byte that
/// can be an element separator, after a byte that can end a segment (blanks aside). A guess,
/// for reading the two halves of a piece on two threads; the reading of the first half
/// confirms it ([`Interchanges::ended_on_an_iea`]).
pub fn likely_interchange_start(input: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    loop {
        let p = at + memmem::find(input.get(at..)?, b"ISA")?;
        let separator = input.get(p + 3).copied().unwrap_or(b'A');
        let before = input.get(..p).and_then(|b| {
            b.iter()
                .rev()
                .find(|c| !matches!(c, b'\r' | b'\n' | b' ' | b'\t'))
        });
        let ends_a_segment = before.is_some_and(|c| !c.is_ascii_alphanumeric() && *c != separator);
        if !separator.is_ascii_alphanumeric() && separator != b' ' && ends_a_segment {
            return Some(p);
        }
        at = p + 1;
    }
}

impl<'a> Interchanges<'a> {
    /// A whole file.
    pub fn new(input: &'a [u8], limits: Limits) -> Self {
        Self::piece(input, 0, true, Resume::default(), limits)
    }

    /// One piece of a file: `input` holds its bytes from `base`, up to its end when `last`.
    /// `resume` is what the reading of the piece before returned (the default for the first).
    /// Read piece by piece, a file gives the very interchanges and errors, offsets included,
    /// that it gives read whole.
    pub fn piece(input: &'a [u8], base: usize, last: bool, resume: Resume, limits: Limits) -> Self {
        Interchanges {
            input,
            pos: 0,
            limits,
            base,
            last,
            seen_any: resume.seen_any,
            skipping: resume.skipping,
            stopped: false,
            last_end: None,
            last_closed: false,
            split: false,
            head: &[],
            inside: resume.inside,
            given: false,
        }
    }

    /// Gives an interchange that does not end in this piece as a part (see [`Interchange::is_whole`]) rather
    /// than stopping for a larger piece; `head` is what the reader kept of the interchange
    /// this piece begins inside (see [`Inside`]), empty if none.
    pub fn in_parts(mut self, head: &'a [u8]) -> Self {
        self.split = true;
        self.head = head;
        self
    }

    /// Where this piece's reading stopped, once the iterator is done: the next piece starts
    /// `consumed` bytes in. 0 before the end of the file means that the first interchange
    /// does not fit in this piece: read a larger one.
    pub fn resume(&self) -> Resume {
        Resume {
            consumed: self.pos.min(self.input.len()),
            seen_any: self.seen_any,
            skipping: self.skipping,
            inside: self.inside,
        }
    }

    /// Whether this reading, of input that ends where an interchange was guessed to begin
    /// (read as `last`), ran to that end on an interchange closed by its IEA: then the rest
    /// of the file, read from there on its own, reads as it would have after this.
    pub fn ended_on_an_iea(&self) -> bool {
        self.pos >= self.input.len() && self.last_closed
    }

    /// Stops this piece's reading at `at` (the next piece starts there).
    fn stop_at(&mut self, at: usize) -> Option<Result<Interchange<'a>, ReadError>> {
        self.pos = at;
        self.stopped = true;
        None
    }

    /// After an error whose resynchronisation ran to the end of a piece that is not the
    /// last: the error is given out (what comes after can no longer change it), and the next
    /// piece goes on looking for an ISA, from a few bytes before this one's end so that an
    /// `ISA` cut in two is found.
    fn skip_on(&mut self, error_at: usize) {
        if !self.last && self.pos >= self.input.len() {
            self.skipping = true;
            self.pos = self.input.len().saturating_sub(3).max(error_at + 1);
        }
    }

    /// Moves to the next `ISA` after `from` that can open an interchange: one followed by a
    /// byte that can be an element separator (so `ADVISABLE` in stray text is skipped).
    fn resync(&mut self, from: usize) {
        self.resync_from(from + 1);
    }

    fn resync_from(&mut self, mut at: usize) {
        while let Some(i) = self
            .input
            .get(at..)
            .and_then(|rest| memmem::find(rest, b"ISA"))
        {
            let start = at + i;
            if self
                .input
                .get(start + 3)
                .is_some_and(|b| !b.is_ascii_alphanumeric())
            {
                self.pos = start;
                return;
            }
            at = start + 1;
        }
        self.pos = self.input.len();
    }
}

impl<'a> Iterator for Interchanges<'a> {
    type Item = Result<Interchange<'a>, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = if self.inside.is_some() {
            self.next_part()
        } else {
            self.next_item()
        };
        self.given |= item.is_some();
        match &item {
            Some(Ok(ic)) => self.last_closed = ic.iea.is_some_and(|s| s.terminated),
            Some(Err(_)) => self.last_closed = false,
            None => {}
        }
        item
    }
}

impl<'a> Interchanges<'a> {
    fn next_item(&mut self) -> Option<Result<Interchange<'a>, ReadError>> {
        if self.stopped {
            return None;
        }
        if self.skipping {
            let from = self.pos;
            self.resync_from(from);
            if self.pos >= self.input.len() {
                if self.last {
                    return None;
                }
                let keep = self.input.len().saturating_sub(3).max(from);
                return self.stop_at(keep);
            }
            self.skipping = false;
        }
        let start = skip_leading(self.input, self.pos, self.base == 0);
        // An ISA is judged by at most its scan window, an error's shown bytes fewer: with
        // that much after `start`, nothing later in the file changes what is read here.
        if !self.last && self.input.len() - start.min(self.input.len()) <= ISA_SCAN_LIMIT {
            return self.stop_at(start.min(self.input.len()));
        }
        if start >= self.input.len() {
            self.pos = start;
            if self.seen_any {
                return None;
            }
            self.seen_any = true;
            return Some(Err(ReadError {
                kind: ReadErrorKind::Empty,
                offset: self.base + start,
                message: "no interchange: the input is empty or only whitespace".into(),
            }));
        }
        self.seen_any = true;
        if !self
            .input
            .get(start..)
            .unwrap_or_default()
            .starts_with(b"ISA")
        {
            return Some(Err(self.not_an_isa(start)));
        }
        let isa = match parse_isa(self.input, start) {
            Ok(mut isa) => {
                isa.segment.offset += self.base;
                isa
            }
            Err(e) => return Some(Err(self.unreadable_isa(start, e))),
        };
        let opening = Opening::Isa(isa);
        if !self.last && !self.may_end(start + isa.len) {
            return self.part_or_more(start, opening);
        }
        let built = build(
            self.input,
            start,
            self.input.len(),
            opening,
            self.limits,
            self.base,
        );
        if !self.last && !self.complete(&built.ic, built.next) {
            return self.part_or_more(start, opening);
        }
        if self.too_long(self.base + start, built.next) {
            return Some(Err(self.too_large(start)));
        }
        self.pos = built.next;
        Some(Ok(built.ic))
    }

    /// The error for what stands at `start` where an ISA should; the reading goes on at the
    /// next ISA.
    fn not_an_isa(&mut self, start: usize) -> ReadError {
        let tail = self.input.get(start..).unwrap_or_default();
        // Bytes as ASCII, the rest as \xNN: a binary file's bytes never reach a reason
        // or a terminal as they are.
        let shown: String = tail
            .get(..12)
            .unwrap_or(tail)
            .iter()
            .flat_map(|b| std::ascii::escape_default(*b))
            .map(char::from)
            .collect();
        let what = recognised(tail).map_or_else(String::new, |w| format!(": {w}"));
        self.resync(start);
        self.skip_on(start);
        ReadError {
            kind: ReadErrorKind::NotAnInterchange,
            offset: self.base + start,
            message: format!(
                "expected ISA to open an interchange, found \"{shown}\"{what} \
                 (only whitespace may stand between interchanges)"
            ),
        }
    }

    /// The error for an ISA at `start` that cannot be read; the reading goes on at the next
    /// ISA.
    fn unreadable_isa(&mut self, start: usize, e: IsaError) -> ReadError {
        self.resync(start);
        self.skip_on(start);
        let (kind, message) = match e {
            IsaError::NotAscii { delimiter, at } => {
                let (kind, name) = match delimiter {
                    Delimiter::Element => (
                        ReadErrorKind::ElementSeparator,
                        "the element separator (4th byte)",
                    ),
                    Delimiter::Component => (
                        ReadErrorKind::SegmentTerminator,
                        "the component separator (ISA16)",
                    ),
                    Delimiter::Segment => (
                        ReadErrorKind::SegmentTerminator,
                        "the segment terminator (after ISA16)",
                    ),
                };
                let bytes = self.input.get(start + at..).unwrap_or_default();
                let message = format!("ISA: {name} is {}", not_ascii(bytes));
                return ReadError {
                    kind,
                    offset: self.base + start + at,
                    message,
                };
            }
            IsaError::Unreadable => (
                ReadErrorKind::IsaUnreadable,
                "ISA: cannot find its 16 elements, the component separator and the \
                 segment terminator",
            ),
            IsaError::ElementSeparator => (
                ReadErrorKind::ElementSeparator,
                "ISA: the element separator (4th byte) is a letter, digit or space",
            ),
            IsaError::SegmentTerminator => (
                ReadErrorKind::SegmentTerminator,
                "ISA: the segment terminator (after ISA16) is a letter, digit, space, \
                 or the element or component separator",
            ),
        };
        ReadError {
            kind,
            offset: self.base + start,
            message: message.into(),
        }
    }

    /// Whether an interchange whose ISA is at `isa_at` in the file, read up to `end` in this
    /// piece, is longer than an interchange may be.
    fn too_long(&self, isa_at: usize, end: usize) -> bool {
        (self.base + end).saturating_sub(isa_at) as u64 > self.limits.max_interchange_bytes
    }
}

/// What a file that does not begin with an ISA is, when its first bytes say: the formats
/// that land in EDI inboxes by mistake, and X12 in an encoding read as two bytes a character.
fn recognised(head: &[u8]) -> Option<&'static str> {
    let utf16 = "X12 written as UTF-16 (two bytes a character): X12 is single bytes; \
                 convert it to ASCII or UTF-8";
    let formats: [(&[u8], &str); 9] = [
        (b"\xff\xfe", utf16),
        (b"\xfe\xff", utf16),
        (b"I\0S\0A\0", utf16),
        (b"\0I\0S\0A", utf16),
        (b"%PDF", "a PDF document"),
        (
            b"PK\x03\x04",
            "a ZIP archive (or an Office document); unpack it first",
        ),
        (b"\x1f\x8b", "a gzip file; unpack it first"),
        (b"UNA", "an EDIFACT interchange, not X12"),
        (b"UNB", "an EDIFACT interchange, not X12"),
    ];
    formats
        .iter()
        .find(|(magic, _)| head.starts_with(magic))
        .map(|(_, what)| *what)
        .or_else(|| {
            let text = head.get(..64).unwrap_or(head);
            let first = text.iter().find(|b| !b.is_ascii_whitespace())?;
            match first {
                b'<' => Some("XML or HTML, not X12"),
                b'{' | b'[' => Some("JSON, not X12 (`render` turns our JSON back into X12)"),
                _ => None,
            }
        })
}

/// What the bytes at a non-ASCII delimiter are, for an error: the character they begin, if
/// they begin one in UTF-8, else the byte alone.
fn not_ascii(bytes: &[u8]) -> String {
    let first = bytes.first().copied().unwrap_or_default();
    let utf8 = (2..=4).find_map(|n| {
        let c = std::str::from_utf8(bytes.get(..n)?).ok()?.chars().next()?;
        Some((c, bytes.get(..n)?))
    });
    match utf8 {
        Some(('\u{fffd}', _)) => "EF BF BD, U+FFFD, the replacement character: the file was \
             re-encoded as UTF-8 and its delimiter lost; X12 delimiters are single ASCII bytes \
             (ask for the file as sent)"
            .into(),
        Some((c, raw)) => {
            let hex: Vec<String> = raw.iter().map(|b| format!("{b:02X}")).collect();
            // U+0080..U+00FF is what a Latin-1 byte becomes when a file is re-encoded.
            let latin1 = u8::try_from(u32::from(c))
                .map(|b| {
                    format!(" (a file re-encoded from Latin-1, where it was the byte {b:02X}?)")
                })
                .unwrap_or_default();
            format!(
                "{}, the UTF-8 character {:?} (U+{:04X}){latin1}: X12 delimiters are single ASCII bytes",
                hex.join(" "),
                c,
                u32::from(c)
            )
        }
        None => format!(
            "byte {first:02X}, outside ASCII (another character set's?): X12 delimiters are \
             single ASCII bytes"
        ),
    }
}

impl<'a> Interchanges<'a> {
    /// An interchange from `start` does not end in this piece: the next, larger, piece is
    /// needed, unless this one already holds more than an interchange may (then it is too
    /// large, whatever its end: see [`PIECE_MARGIN`]).
    fn more_or_too_large(&mut self, start: usize) -> Option<Result<Interchange<'a>, ReadError>> {
        self.more_or_too_large_at(start, self.base + start)
    }

    /// [`Interchanges::more_or_too_large`] for the interchange whose ISA is at `isa_at` in
    /// the file (before this piece when it is read in parts: then it is read no more).
    fn more_or_too_large_at(
        &mut self,
        start: usize,
        isa_at: usize,
    ) -> Option<Result<Interchange<'a>, ReadError>> {
        if self.input.len() - start < self.limits.piece_cap() {
            return self.stop_at(start);
        }
        self.inside = None;
        Some(Err(self.too_large_at(isa_at)))
    }

    /// The interchange at `start` is longer than the limit: reported, and skipped to the
    /// next ISA as after any unreadable part (read whole or in pieces alike).
    fn too_large(&mut self, start: usize) -> ReadError {
        self.too_large_at(self.base + start)
    }

    /// [`Interchanges::too_large`] for the interchange whose ISA is at `offset` in the file.
    /// The next ISA is looked for from where the interchange passed the limit, not from its
    /// ISA: a reading in parts has let go of what came before, and whole or in parts, what
    /// is read after it is the same. (That point is always in this piece: the interchange,
    /// or the part before, ended within the limit.)
    fn too_large_at(&mut self, offset: usize) -> ReadError {
        let limit = usize::try_from(self.limits.max_interchange_bytes).unwrap_or(usize::MAX);
        let past = offset.saturating_add(limit).max(offset + 1);
        let from = past.saturating_sub(self.base).min(self.input.len());
        self.resync_from(from);
        self.skip_on(from.saturating_sub(1));
        ReadError {
            kind: ReadErrorKind::TooLarge,
            offset,
            message: format!(
                "the interchange is longer than the limit of {} bytes \
                 (limits.max_interchange_bytes); it was not read",
                self.limits.max_interchange_bytes
            ),
        }
    }

    /// Whether an interchange whose ISA ends at `from` may end in this piece: an `IEA` or an
    /// `ISA` stands somewhere after it. A cheap look before building the tree of an
    /// interchange too large for the piece, only to throw it away.
    fn may_end(&mut self, from: usize) -> bool {
        let input = self.input;
        // Once per piece, the last marker in its last MiB (a piece of many interchanges has
        // one there); a piece without one (inside one large interchange) is searched forward
        // from the interchange instead, which scans it once rather than backwards twice.
        let last = *self.last_end.get_or_insert_with(|| {
            let tail_start = input.len().saturating_sub(MARKER_LOOK);
            let tail = input.get(tail_start..).unwrap_or_default();
            let iea = memmem::rfind(tail, b"IEA");
            let isa = memmem::rfind(tail, b"ISA");
            iea.max(isa).map_or(0, |at| tail_start + at + 1)
        });
        if last > from {
            return true;
        }
        let rest = input.get(from..).unwrap_or_default();
        memmem::find(rest, b"IEA").is_some() || memmem::find(rest, b"ISA").is_some()
    }

    /// Whether an interchange read from a piece that is not the file's last would read the
    /// same with the rest of the file: it ended before the piece did, on a segment that was
    /// whole (the IEA, or a terminated ISA after it).
    fn complete(&self, ic: &Interchange<'_>, next: usize) -> bool {
        match ic.end {
            InterchangeEnd::EndOfInput => false,
            InterchangeEnd::Iea => next < self.input.len(),
            // The ISA that ended it is read with this interchange's delimiters: its id is
            // settled once a separator or terminator follows it (a few bytes suffice).
            InterchangeEnd::NextIsa => {
                let end = (next + 8).min(self.input.len());
                Segments::new(self.input, next, end, 1, ic.delimiters())
                    .next()
                    .is_some_and(|s| s.id == b"ISA" && (s.terminated || s.raw.len() > s.id.len()))
            }
        }
    }
}

/// Whether a segment that ends an interchange (an `IEA`, or the next `ISA`) may begin in
/// `input` after its start, cut by `delimiters`: the exact test for a piece that goes on
/// inside an interchange, whose delimiters are known. ([`Interchanges::may_end`] takes any
/// `IEA` or `ISA` for one, so a name such as `VISA` had such a piece built twice: whole, then
/// again up to its cut.) Never false where the segment is there: it errs the other way.
fn ends_in(input: &[u8], d: Delimiters) -> bool {
    let ends_an_id = |at: usize| {
        input
            .get(at)
            .is_none_or(|c| *c == d.element || *c == d.segment || *c == b'\r')
    };
    [&b"IEA"[..], &b"ISA"[..]].iter().any(|marker| {
        memmem::find_iter(input, marker)
            .any(|at| at > 0 && ends_an_id(at + 3) && starts_a_segment(input, at, d))
    })
}

/// Whether a segment begins at `at`: right after a segment terminator, the line endings and
/// blanks that [`Segments`] skips aside (not the element separator, which a tab may be).
fn starts_a_segment(input: &[u8], at: usize, d: Delimiters) -> bool {
    let before = input.get(..at).and_then(|b| {
        b.iter().rev().find(|c| {
            **c == d.segment || **c == d.element || !matches!(c, b'\r' | b'\n' | b' ' | b'\t')
        })
    });
    before == Some(&d.segment)
}

/// The set being read: its ST, where its body starts and ends, and how many segments it holds.
struct OpenSet<'a> {
    st: Segment<'a>,
    body: (usize, usize),
    count: u32,
    over_limit: bool,
    over_bytes: bool,
    bad_ids: Vec<Segment<'a>>,
}

struct Builder<'a> {
    input: &'a [u8],
    base: usize,
    delimiters: Delimiters,
    limits: Limits,
    groups: Vec<Group<'a>>,
    open_group: Option<Group<'a>>,
    open_set: Option<OpenSet<'a>>,
    ta1: Vec<Segment<'a>>,
    stray: Vec<Segment<'a>>,
    stray_count: u32,
    /// Strays kept by earlier parts (an interchange keeps `STRAY_KEPT` in all).
    kept_before: usize,
    breaches: Vec<LimitBreach>,
    iea: Option<Segment<'a>>,
    isb: Option<Segment<'a>>,
    ise: Option<Segment<'a>>,
    /// Segments read, ISA included (in a part: from the ISA, as the interchange counts).
    count: u32,
}

impl<'a> Builder<'a> {
    fn new(
        input: &'a [u8],
        base: usize,
        delimiters: Delimiters,
        limits: Limits,
        before: Option<(Inside, Option<Segment<'a>>)>,
    ) -> Self {
        Builder {
            input,
            base,
            delimiters,
            limits,
            groups: Vec::new(),
            open_group: before.and_then(|(_, gs)| gs).map(|gs| Group {
                gs,
                sets: Sets::new(input, base, delimiters),
                ge: None,
            }),
            open_set: None,
            ta1: Vec::new(),
            stray: Vec::new(),
            stray_count: 0,
            kept_before: before.map_or(0, |(i, _)| i.stray_kept),
            breaches: Vec::new(),
            iea: None,
            isb: None,
            ise: None,
            count: before.map_or(1, |(i, _)| i.ordinal.saturating_sub(1)),
        }
    }

    /// Reads `segments` into the tree up to the IEA, the next ISA (left unread) or the end.
    fn read(&mut self, segments: &mut Segments<'a>) -> InterchangeEnd {
        loop {
            let before = segments.clone();
            let Some(segment) = segments.next() else {
                return InterchangeEnd::EndOfInput;
            };
            if segment.id == b"ISA" {
                *segments = before;
                return InterchangeEnd::NextIsa;
            }
            self.count = self.count.saturating_add(1);
            // An ST, GS or GE is looked at once the set or group it opens or closes is (its
            // element's breach is then in its own set, or none, not in the set before it).
            let after = matches!(segment.id, b"ST" | b"GS" | b"GE");
            if !after {
                self.check_element_length(&segment);
            }
            if segment.id == b"IEA" {
                self.iea = Some(segment);
                return InterchangeEnd::Iea;
            }
            self.place(segment, segments.offset());
            if after {
                self.check_element_length(&segment);
            }
        }
    }

    /// Puts a segment other than ISA and IEA where it belongs; `next` is where the segment
    /// after it begins.
    fn place(&mut self, segment: Segment<'a>, next: usize) {
        match segment.id {
            b"GS" => {
                self.close_group(None);
                self.open_group = Some(Group {
                    gs: segment,
                    sets: Sets::new(self.input, self.base, self.delimiters),
                    ge: None,
                });
            }
            b"GE" if self.open_group.is_some() => self.close_group(Some(segment)),
            b"ST" if self.open_group.is_some() => {
                self.close_set(None);
                self.open_set = Some(OpenSet {
                    st: segment,
                    body: (next, next),
                    count: 0,
                    over_limit: false,
                    over_bytes: false,
                    bad_ids: Vec::new(),
                });
            }
            b"SE" if self.open_set.is_some() => self.close_set(Some(segment)),
            // Only where X12.5 puts them: after the ISA, before any TA1 or group, once each.
            b"ISB" if self.isb.is_none() && self.ise.is_none() && self.nothing_yet() => {
                self.isb = Some(segment);
            }
            b"ISE" if self.ise.is_none() && self.nothing_yet() => self.ise = Some(segment),
            b"TA1" if self.open_group.is_none() => self.ta1.push(segment),
            b"GE" | b"ST" | b"SE" => self.stray(segment),
            _ => self.body_segment(segment, next),
        }
    }

    fn close_set(&mut self, se: Option<Segment<'a>>) {
        let Some(open) = self.open_set.take() else {
            return;
        };
        let set = TransactionSet {
            st: open.st,
            body: Body {
                input: self.input,
                range: open.body,
                first_ordinal: open.st.ordinal.saturating_add(1),
                count: open.count,
                delimiters: self.delimiters,
                base: self.base,
            },
            se,
            bad_ids: open.bad_ids,
        };
        // invariant: a set is only opened while a group is open.
        if let Some(group) = self.open_group.as_mut() {
            group.sets.push(set);
        }
    }

    fn close_group(&mut self, ge: Option<Segment<'a>>) {
        self.close_set(None);
        if let Some(mut group) = self.open_group.take() {
            group.ge = ge;
            group.sets.entries.shrink();
            self.groups.push(group);
        }
    }

    /// Whether nothing but the ISA (and ISB/ISE) has been read: no TA1, group or stray.
    fn nothing_yet(&self) -> bool {
        self.groups.is_empty()
            && self.open_group.is_none()
            && self.ta1.is_empty()
            && self.stray_count == 0
    }

    fn stray(&mut self, segment: Segment<'a>) {
        self.stray_count = self.stray_count.saturating_add(1);
        if self.kept_before + self.stray.len() < STRAY_KEPT {
            self.stray.push(segment);
        }
    }

    // Inlined: every segment comes here, nearly none goes further.
    #[inline]
    fn check_element_length(&mut self, segment: &Segment<'a>) {
        // A segment no longer than the limit cannot hold a longer element: skip the split.
        if segment.raw.len() > self.limits.max_element_len {
            self.long_segment(segment);
        }
    }

    /// [`Builder::check_element_length`] for a segment longer than an element may be.
    #[cold]
    fn long_segment(&mut self, segment: &Segment<'a>) {
        if let Some((i, e)) = segment
            .elements()
            .enumerate()
            .find(|(_, e)| e.value.len() > self.limits.max_element_len)
        {
            let mut position = segment
                .position()
                .with_element(u16::try_from(i + 1).unwrap_or(u16::MAX));
            position.byte = segment.element_offset(i + 1);
            position.set_segment = self
                .open_set
                .as_ref()
                .and_then(|open| segment.ordinal.checked_sub(open.st.ordinal))
                .map(|d| d + 1);
            self.breaches.push(LimitBreach {
                kind: LimitKind::ElementLength,
                position,
                limit: self.limits.max_element_len as u64,
                actual: e.value.len() as u64,
            });
        }
    }

    fn body_segment(&mut self, segment: Segment<'a>, end: usize) {
        let max = self.limits.max_segments_per_set;
        let Some(open) = self.open_set.as_mut() else {
            self.stray(segment);
            return;
        };
        if open.count == 0 {
            open.body.0 = segment.offset - self.base;
        }
        let id = segment.id;
        if open.bad_ids.len() < MAX_BAD_IDS
            && !((2..=3).contains(&id.len())
                && id
                    .iter()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()))
        {
            open.bad_ids.push(segment);
        }
        open.body.1 = end;
        open.count = open.count.saturating_add(1);
        let bytes = (self.base + end).saturating_sub(open.st.offset) as u64;
        if !open.over_bytes && bytes > self.limits.max_set_bytes {
            open.over_bytes = true;
            let mut position = segment.position();
            position.set_segment = Some(open.count.saturating_add(1));
            self.breaches.push(LimitBreach {
                kind: LimitKind::SetBytes,
                position,
                limit: self.limits.max_set_bytes,
                actual: bytes,
            });
        }
        if !open.over_limit && open.count.saturating_add(2) > max {
            open.over_limit = true;
            let mut position = segment.position();
            position.set_segment = Some(open.count.saturating_add(1));
            self.breaches.push(LimitBreach {
                kind: LimitKind::SegmentsPerSet,
                position,
                limit: u64::from(max),
                actual: u64::from(open.count.saturating_add(2)),
            });
        }
    }
}

/// An interchange (or part) built, where what follows it may begin, and how it would go on
/// in a next part if it was cut where its input ended.
struct Built<'a> {
    ic: Interchange<'a>,
    next: usize,
    after: Inside,
}

/// Builds the interchange whose ISA starts at `start` (or the part of one that goes on at
/// `start`) from `input[..end]`.
fn build<'a>(
    input: &'a [u8],
    start: usize,
    end: usize,
    opening: Opening<'a>,
    limits: Limits,
    base: usize,
) -> Built<'a> {
    let isa = opening.isa();
    let delimiters = isa.delimiters;
    let (mut segments, suffix, before) = match opening {
        Opening::Isa(isa) => {
            let after_isa = start + isa.len;
            let mut segments = Segments::new(input, after_isa, end, 2, delimiters).in_file_at(base);
            let suffix_end = segments.skip_line_endings();
            let suffix = input.get(after_isa..suffix_end).unwrap_or_default();
            (segments, suffix, None)
        }
        Opening::Inside {
            suffix, gs, inside, ..
        } => {
            let segments =
                Segments::new(input, start, end, inside.ordinal, delimiters).in_file_at(base);
            (segments, suffix, Some((inside, gs)))
        }
    };
    let mut b = Builder::new(input, base, delimiters, limits, before);
    let end = b.read(&mut segments);
    b.close_set(None);
    let (groups_before, sets_before, continued) = match before {
        Some((inside, gs)) => (inside.groups, inside.sets, gs.is_some()),
        None => (0, 0, false),
    };
    let after = b.inside_after(&isa, suffix, before.map(|(i, _)| (i, continued)));
    b.close_group(None);
    // Blanks after the IEA, between interchanges, are not this interchange's layout.
    let first_blank = segments.first_blank();
    let next = segments.skip_line_endings();
    let ic = Interchange {
        isa,
        groups: b.groups,
        isb: b.isb,
        ise: b.ise,
        first_blank,
        ta1: b.ta1,
        stray: b.stray,
        stray_count: b.stray_count,
        iea: b.iea,
        end,
        span: start..next,
        base,
        input,
        suffix,
        breaches: b.breaches,
        segment_count: b.count,
        part: Part {
            first: before.is_none(),
            last: true,
            groups_before,
            continued,
            sets_before,
            continues: false,
        },
    };
    Built { ic, next, after }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_x12_says_what_it_is_when_its_first_bytes_tell() {
        let first = |input: &[u8]| -> String {
            match Interchanges::new(input, Limits::default()).next() {
                Some(Err(e)) => e.message,
                other => panic!("{other:?}"),
            }
        };
        let utf16: Vec<u8> = "ISA*00*".bytes().flat_map(|b| [b, 0]).collect();
        assert!(first(&utf16).contains("UTF-16"), "{}", first(&utf16));
        assert!(first(b"\xff\xfeI\0S\0A\0").contains("UTF-16"));
        assert!(first(b"%PDF-1.7 ...").contains("a PDF document"));
        assert!(first(b"PK\x03\x04 ...").contains("ZIP"));
        assert!(first(b"\x1f\x8b\x08 ...").contains("gzip"));
        assert!(first(b"UNB+UNOA:2+...").contains("EDIFACT"));
        assert!(first(b"  {\"interchanges\": []}").contains("JSON"));
        assert!(first(b"<?xml version=\"1.0\"?>").contains("XML"));
        // Text that is none of these is only shown.
        let plain = first(b"hello, this is not EDI");
        assert!(
            plain.ends_with(
                "found \"hello, this \" (only whitespace may stand between interchanges)"
            ),
            "{plain}"
        );
    }

    /// A set's entry comes back as it went in, in 32-bit numbers and, from the first offset
    /// past them, in 64-bit ones.
    #[test]
    fn set_entries_are_kept_narrow_until_an_offset_needs_more() {
        let entry = |st: usize, se: usize| SetEntry {
            st,
            body: (st + 12, st + 40),
            se,
            st_ordinal: 7,
            count: 3,
        };
        let mut entries = Entries::Narrow(Vec::new());
        let mut want = Vec::new();
        for e in [
            entry(10, 52),
            entry(60, usize::MAX),
            entry(4_000_000_000, 4_000_000_040),
        ] {
            entries.push(e);
            want.push(e);
        }
        assert!(matches!(entries, Entries::Narrow(_)));
        for e in [entry(1 << 33, (1 << 33) + 40), entry(90, usize::MAX)] {
            entries.push(e);
            want.push(e);
        }
        assert!(matches!(entries, Entries::Wide(_)));
        entries.shrink();
        let got: Vec<SetEntry> = (0..entries.len()).filter_map(|i| entries.get(i)).collect();
        assert_eq!(got, want);
        assert_eq!(entries.get(want.len()), None);
    }

    const ISA: &str = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000001*0*P*:~";

    fn read(s: &str) -> Vec<Result<Interchange<'_>, ReadError>> {
        Interchanges::new(s.as_bytes(), Limits::default()).collect()
    }

    #[test]
    fn builds_the_tree() {
        let s = format!(
            "{ISA}\nGS*PO*ACME*X12GATE*20240101*1200*1*X*005010~\nST*850*0001~BEG*00*SA*1**20240101~\
             N1*ST*ISAAC~SE*4*0001~GE*1*1~IEA*1*000000001~\n"
        );
        let all = read(&s);
        assert_eq!(all.len(), 1);
        let ic = all[0].as_ref().unwrap();
        assert_eq!(ic.end, InterchangeEnd::Iea);
        assert_eq!(ic.suffix, b"\n");
        assert_eq!(ic.groups.len(), 1);
        let set = &ic.groups[0].sets.get(0).unwrap();
        assert_eq!(set.body.count, 2);
        let ids: Vec<_> = set
            .body
            .segments()
            .map(|s| (s.id_str(), s.ordinal))
            .collect();
        assert_eq!(ids, vec![("BEG".to_string(), 4), ("N1".to_string(), 5)]);
        assert_eq!(set.se.unwrap().ordinal, 6);
        assert_eq!(ic.segment_count, 8);
        assert_eq!(ic.span, 0..s.len());
        assert!(ic.stray.is_empty());
    }

    #[test]
    fn missing_trailers_and_strays_are_recorded() {
        let s = format!("{ISA}REF*XX~GS*PO*A*B*20240101*1200*1*X*004010~ST*850*1~BEG*00~GS*PO*A*B*1*1*2*X*004010~");
        let all = read(&s);
        let ic = all[0].as_ref().unwrap();
        assert_eq!(ic.end, InterchangeEnd::EndOfInput);
        assert_eq!(ic.stray_count, 1);
        assert_eq!(ic.groups.len(), 2);
        assert!(ic.groups[0].ge.is_none());
        assert!(ic.groups[0].sets.get(0).unwrap().se.is_none());
        assert_eq!(ic.groups[0].sets.get(0).unwrap().body.count, 1);
    }

    #[test]
    fn isb_and_ise_belong_after_the_isa_only() {
        let s = format!("{ISA}ISB*01~ISE*240101*1200~GS*PO*A*B*20240101*1200*1*X*004010~GE*0*1~ISB*01~IEA*1*000000001~");
        let all = read(&s);
        let ic = all[0].as_ref().unwrap();
        assert_eq!(ic.isb.map(|s| s.raw), Some(&b"ISB*01"[..]));
        assert_eq!(ic.ise.map(|s| s.ordinal), Some(3));
        // A second ISB, after a group, is outside any envelope as before.
        assert_eq!(ic.stray.iter().map(|s| s.id).collect::<Vec<_>>(), [b"ISB"]);
    }

    #[test]
    fn blanks_before_segments_are_skipped_and_the_first_remembered() {
        let s =
            format!("{ISA}\n  GS*PO*A*B*20240101*1200*1*X*004010~\n\tGE*0*1~ IEA*1*000000001~   ");
        let all = read(&s);
        let ic = all[0].as_ref().unwrap();
        assert_eq!(ic.groups.len(), 1);
        assert!(ic.groups[0].ge.is_some() && ic.iea.is_some() && ic.stray.is_empty());
        assert_eq!(ic.first_blank, Some(ISA.len() + 1));
        assert_eq!(ic.groups[0].gs.offset, ISA.len() + 3);
        // Blanks after the IEA are between interchanges, not this one's layout.
        let tidy = format!("{ISA}IEA*0*000000001~   ");
        let tidy = read(&tidy);
        assert_eq!(tidy[0].as_ref().unwrap().first_blank, None);
    }

    #[test]
    fn garbage_between_interchanges_then_resync() {
        let s = format!("{ISA}IEA*0*000000001~\nhello\n{ISA}IEA*0*000000001~");
        let all = read(&s);
        assert_eq!(all.len(), 3);
        assert!(all[0].is_ok());
        let err = all[1].as_ref().unwrap_err();
        assert_eq!(err.kind, ReadErrorKind::NotAnInterchange);
        assert_eq!(err.offset, ISA.len() + 17);
        assert!(all[2].is_ok());
    }

    #[test]
    fn next_isa_ends_an_interchange_without_iea() {
        let s = format!("{ISA}GS*FA*A*B*1*1*1*X*004010~{ISA}IEA*0*000000001~");
        let all = read(&s);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].as_ref().unwrap().end, InterchangeEnd::NextIsa);
        assert_eq!(all[1].as_ref().unwrap().span.start, ISA.len() + 25);
    }

    #[test]
    fn empty_input_is_an_error_once() {
        let all = read(" \r\n");
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].as_ref().unwrap_err().kind, ReadErrorKind::Empty);
    }

    #[test]
    fn limits_are_recorded() {
        let s = format!("{ISA}GS*PO*A*B*1*1*1*X*004010~ST*850*1~BEG*00*SA*1234567890123~REF*1~REF*2~SE*5*1~GE*1*1~IEA*1*000000001~");
        let limits = Limits {
            max_segments_per_set: 4,
            max_element_len: 10,
            ..Limits::default()
        };
        let ic = Interchanges::new(s.as_bytes(), limits)
            .next()
            .unwrap()
            .unwrap();
        let kinds: Vec<_> = ic
            .breaches
            .iter()
            .map(|b| (b.kind, b.position.segment))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (LimitKind::ElementLength, 4),
                (LimitKind::SegmentsPerSet, 6)
            ]
        );
    }
}
