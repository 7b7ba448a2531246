//! Segments and elements: borrowing views on the input, cut with memchr.
//!
//! This is the hot loop of the whole product, so it does the least it can: one memchr for the
//! segment terminator and a plain scan of the two or three bytes of the segment id. Elements
//! are only split when someone asks for them. `benches/parse.rs` measures it against memchr
//! alone.

use memchr::memchr;

use super::Position;

/// The four delimiters an ISA declares. X12 assumes none of them; every interchange brings its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Delimiters {
    /// Separates elements (the byte after `ISA`).
    pub element: u8,
    /// Separates components within an element (ISA16).
    pub component: u8,
    /// `None` before 00402 and when ISA11 is a letter or digit (real 00501 files still send `U`).
    pub repetition: Option<u8>,
    /// Ends a segment (the byte after ISA16).
    pub segment: u8,
}

impl Delimiters {
    /// The delimiters most partners use; the canonical form of the fingerprint uses them too.
    pub const COMMON: Delimiters = Delimiters {
        element: b'*',
        component: b':',
        repetition: Some(b'^'),
        segment: b'~',
    };

    /// True when no two delimiters are the same byte. (Whether one is a letter, digit or
    /// space is the ISA rules' concern, which report it with its own code.)
    pub fn are_distinct(&self) -> bool {
        let mut all = vec![self.element, self.component, self.segment];
        all.extend(self.repetition);
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        all.len() == n
    }
}

/// One segment, without its terminator, borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    /// The segment id (`ST`, `PO1`, ...): the bytes before the first element separator.
    pub id: &'a [u8],
    /// The whole segment, id included, terminator excluded.
    pub raw: &'a [u8],
    /// Byte offset of the segment's first byte in the file.
    pub offset: usize,
    /// Ordinal in the interchange; the ISA is 1.
    pub ordinal: u32,
    /// False only for a segment cut short by the end of the input.
    pub terminated: bool,
    /// The delimiters of its interchange.
    pub delimiters: Delimiters,
}

impl<'a> Segment<'a> {
    /// The id as text; ids are short ASCII, anything else shows lossily.
    pub fn id_str(&self) -> String {
        String::from_utf8_lossy(self.id).into_owned()
    }

    /// The id as a message or a finding quotes it ([`crate::quoted`]): a segment
    /// without separators is all id.
    pub fn id_shown(&self) -> String {
        crate::quoted(&String::from_utf8_lossy(self.id)).into_owned()
    }

    /// Whether its id is `id`.
    pub fn is(&self, id: &[u8]) -> bool {
        self.id == id
    }

    /// Elements after the id, 1-based as X12 counts (`elements().nth(0)` is element 01).
    pub fn elements(&self) -> impl Iterator<Item = Element<'a>> + 'a {
        let delimiters = self.delimiters;
        let rest = self.raw.get(self.id.len()..).unwrap_or_default();
        // The first byte of `rest` (when present) is the separator after the id.
        let body = rest.get(1..);
        body.into_iter()
            .flat_map(move |b| b.split(move |c| *c == delimiters.element))
            .map(move |value| Element { value, delimiters })
    }

    /// Element `n` (1-based) as raw bytes; `None` when the segment has fewer elements.
    pub fn element(&self, n: usize) -> Option<&'a [u8]> {
        n.checked_sub(1)
            .and_then(|i| self.elements().nth(i))
            .map(|e| e.value)
    }

    /// Element `n` (1-based) as text, empty when absent. Control values are ASCII.
    pub fn text(&self, n: usize) -> &'a str {
        self.element(n)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or("")
    }

    /// Byte offset in the file of element `n`'s value (1-based); the segment's offset when
    /// the segment has no such element.
    pub fn element_offset(&self, n: usize) -> usize {
        let mut offset = self.offset + self.id.len() + 1;
        for (i, e) in self.elements().enumerate() {
            if i + 1 == n {
                return offset;
            }
            offset += e.value.len() + 1;
        }
        self.offset
    }

    /// How many elements follow the id.
    pub fn element_count(&self) -> usize {
        self.elements().count()
    }

    /// Where it is in the file.
    pub fn position(&self) -> Position {
        Position {
            byte: self.offset,
            segment: self.ordinal,
            ..Position::default()
        }
    }
}

/// One element's bytes, with the delimiters needed to look inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Element<'a> {
    /// The element's bytes, components and repetitions included.
    pub value: &'a [u8],
    /// The delimiters of its interchange.
    pub delimiters: Delimiters,
}

impl<'a> Element<'a> {
    /// The repetitions of the element; a single one when the interchange has no repetition separator.
    pub fn repetitions(&self) -> impl Iterator<Item = Element<'a>> + 'a {
        let delimiters = self.delimiters;
        // With no repetition separator nothing matches and the element is its only repetition.
        let sep = delimiters.repetition;
        self.value
            .split(move |c| Some(*c) == sep)
            .map(move |value| Element { value, delimiters })
    }

    /// The components of the element; a single one when it holds no component separator.
    pub fn components(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let c = self.delimiters.component;
        self.value.split(move |b| *b == c)
    }

    /// Whether it holds a component separator.
    pub fn is_composite(&self) -> bool {
        memchr(self.delimiters.component, self.value).is_some()
    }

    /// Whether it holds a repetition separator.
    pub fn is_repeated(&self) -> bool {
        self.delimiters
            .repetition
            .is_some_and(|r| memchr(r, self.value).is_some())
    }
}

/// Cuts `input[start..end]` into segments.
///
/// CR and LF after a terminator are a suffix, not data, and blank lines are skipped; when the
/// terminator is LF itself, a CR before it belongs to the line ending too.
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    input: &'a [u8],
    pos: usize,
    end: usize,
    ordinal: u32,
    delimiters: Delimiters,
    /// The first space or tab skipped before a segment (indented or padded layout).
    first_blank: Option<usize>,
    /// Where `input` begins in the file: offsets given out are the file's, not the slice's.
    base: usize,
}

impl<'a> Segments<'a> {
    /// `first_ordinal` is the ordinal the first segment returned will carry.
    pub fn new(
        input: &'a [u8],
        start: usize,
        end: usize,
        first_ordinal: u32,
        delimiters: Delimiters,
    ) -> Self {
        let end = end.min(input.len());
        Segments {
            input,
            pos: start.min(end),
            end,
            ordinal: first_ordinal,
            delimiters,
            first_blank: None,
            base: 0,
        }
    }

    /// The same cut, for an `input` that begins at byte `base` of its file (a part of a file
    /// read in pieces): every segment's offset, and [`Segments::first_blank`], are the file's.
    pub fn in_file_at(mut self, base: usize) -> Self {
        self.base = base;
        self
    }

    /// Index in `input` of the next byte not yet consumed.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Skips CR/LF suffixes, blank lines, and the spaces and tabs partners' tools put
    /// before a segment (an indented file; a blank after a terminator), as every other
    /// reader does; returns the offset of the next segment's first byte. A segment id never
    /// begins with a blank, so nothing is lost; [`Segments::first_blank`] says where the
    /// first one was.
    pub fn skip_line_endings(&mut self) -> usize {
        while self.pos < self.end {
            match self.input.get(self.pos) {
                Some(b'\r' | b'\n') => {}
                Some(b) if (*b == b' ' || *b == b'\t') && *b != self.delimiters.element => {
                    self.first_blank.get_or_insert(self.base + self.pos);
                }
                _ => break,
            }
            self.pos += 1;
        }
        self.pos
    }

    /// Where in the file the first space or tab before a segment was skipped, if any was.
    pub fn first_blank(&self) -> Option<usize> {
        self.first_blank
    }

    /// The next segment without consuming it.
    pub fn peek(&self) -> Option<Segment<'a>> {
        self.clone().next()
    }
}

impl<'a> Iterator for Segments<'a> {
    type Item = Segment<'a>;

    // Inlined into the envelope builder's loop: left to itself, LLVM stops inlining it once the
    // id scan makes it longer, and the call then costs a fifth of validation's instructions.
    #[inline]
    fn next(&mut self) -> Option<Segment<'a>> {
        let start = self.skip_line_endings();
        let window = self.input.get(start..self.end)?;
        if window.is_empty() {
            return None;
        }
        let (mut raw, terminated) = match memchr(self.delimiters.segment, window) {
            Some(i) => (window.get(..i).unwrap_or_default(), true),
            None => (window, false),
        };
        self.pos = start + raw.len() + usize::from(terminated);
        if self.delimiters.segment == b'\n' {
            // All of them: data never ends in CR, and CR CR LF line endings occur.
            while let Some(rest) = raw.strip_suffix(b"\r") {
                raw = rest;
            }
        }
        // Ids are two or three bytes: a plain scan reaches the separator before a memchr call
        // has finished its setup (measured: this alone took a third of the tokeniser's time).
        let element = self.delimiters.element;
        let id_len = raw.iter().position(|b| *b == element).unwrap_or(raw.len());
        let segment = Segment {
            id: raw.get(..id_len).unwrap_or_default(),
            raw,
            offset: self.base + start,
            ordinal: self.ordinal,
            terminated,
            delimiters: self.delimiters,
        };
        self.ordinal = self.ordinal.saturating_add(1);
        Some(segment)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(input: &[u8], d: Delimiters) -> Vec<(String, usize, u32)> {
        Segments::new(input, 0, input.len(), 1, d)
            .map(|s| {
                (
                    String::from_utf8_lossy(s.raw).into_owned(),
                    s.offset,
                    s.ordinal,
                )
            })
            .collect()
    }

    #[test]
    fn cuts_at_terminator_and_skips_line_endings() {
        let got = segs(b"ST*850*1~\r\n\r\nBEG*00~SE*2*1~", Delimiters::COMMON);
        assert_eq!(
            got,
            vec![
                ("ST*850*1".into(), 0, 1),
                ("BEG*00".into(), 13, 2),
                ("SE*2*1".into(), 20, 3)
            ]
        );
    }

    #[test]
    fn newline_terminator_strips_carriage_return() {
        let d = Delimiters {
            segment: b'\n',
            element: b'|',
            component: b'^',
            repetition: None,
        };
        let got = segs(b"ST|850|1\r\nSE|2|1\n", d);
        assert_eq!(
            got,
            vec![("ST|850|1".into(), 0, 1), ("SE|2|1".into(), 10, 2)]
        );
    }

    #[test]
    fn elements_components_and_repetitions() {
        let input = b"N1*ST*ISAAC*92*A:B^C:D~";
        let s = Segments::new(input, 0, input.len(), 1, Delimiters::COMMON)
            .next()
            .unwrap();
        assert_eq!(s.id, b"N1");
        assert_eq!(s.element(2), Some(&b"ISAAC"[..]));
        assert_eq!(s.element_count(), 4);
        let e = s.elements().nth(3).unwrap();
        let reps: Vec<Vec<&[u8]>> = e.repetitions().map(|r| r.components().collect()).collect();
        assert_eq!(reps, vec![vec![&b"A"[..], b"B"], vec![&b"C"[..], b"D"]]);
        assert_eq!(s.element(9), None);
        assert_eq!(s.element(0), None);
    }

    #[test]
    fn segment_without_elements_and_unterminated_tail() {
        let input = b"LS~LE";
        let got: Vec<_> = Segments::new(input, 0, 5, 1, Delimiters::COMMON).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].element_count(), 0);
        assert!(!got[1].terminated);
    }
}
