//! The one way X12 is written: segments with given delimiters, each ended by the terminator
//! and a line ending, counted so a set's SE01 comes from what was written.
//!
//! The writer decides nothing about content: it neither drops trailing empty elements nor
//! refuses a value that holds a delimiter. Those are policies of its callers (an
//! acknowledgment drops and filters, a rendering of JSON refuses), and each keeps its own.
//! It holds only the bytes it is given; a caller writing a large output takes them out as it
//! goes ([`SegmentWriter::bytes`], then [`SegmentWriter::clear`]), so the writer stays
//! bounded by one stretch of output.

use crate::Delimiters;

/// Writes segments into a buffer it owns, with the delimiters and line ending it was given.
///
/// A segment is [`start`](Self::start)ed with its id, given elements (and within them
/// components and repetitions), and [`end`](Self::end)ed; [`segment`](Self::segment) and
/// [`raw`](Self::raw) do all three at once.
///
/// ```
/// use x12::{Delimiters, SegmentWriter};
///
/// let mut w = SegmentWriter::new(Delimiters::COMMON, b"\n");
/// w.begin_set();
/// w.segment(b"ST", &[b"997", b"0001"]);
/// w.start(b"AK1");
/// w.element(b"PO");
/// w.element(b"7");
/// w.end();
/// w.start(b"AK4");
/// w.element(b"1");
/// w.component(b"2");
/// w.end();
/// let count = w.se01().to_string();
/// w.segment(b"SE", &[count.as_bytes(), b"0001"]);
/// assert_eq!(w.bytes(), b"ST*997*0001~\nAK1*PO*7~\nAK4*1:2~\nSE*4*0001~\n");
/// ```
#[derive(Debug, Clone)]
pub struct SegmentWriter<'l> {
    out: Vec<u8>,
    delimiters: Delimiters,
    line_ending: &'l [u8],
    /// Segments ended since [`SegmentWriter::begin_set`] (or since the writer was made).
    count: u32,
}

impl<'l> SegmentWriter<'l> {
    /// A writer with nothing written yet. `line_ending` follows every terminator: `b""`,
    /// `b"\n"` or `b"\r\n"` as the reader's partner expects.
    pub fn new(delimiters: Delimiters, line_ending: &'l [u8]) -> Self {
        SegmentWriter::appending(Vec::new(), delimiters, line_ending)
    }

    /// A writer that goes on after `out`'s bytes (or into its spare capacity).
    pub fn appending(out: Vec<u8>, delimiters: Delimiters, line_ending: &'l [u8]) -> Self {
        SegmentWriter {
            out,
            delimiters,
            line_ending,
            count: 0,
        }
    }

    /// The delimiters it writes with.
    pub fn delimiters(&self) -> Delimiters {
        self.delimiters
    }

    /// Begins a segment: its id, written as given.
    pub fn start(&mut self, id: &[u8]) {
        self.out.extend_from_slice(id);
    }

    /// The next element of the current segment: the element separator, then `value`
    /// (which may be empty, and may be followed by [`value`](Self::value) bytes).
    pub fn element(&mut self, value: &[u8]) {
        self.out.push(self.delimiters.element);
        self.out.extend_from_slice(value);
    }

    /// The next component of the current element: the component separator, then `value`.
    pub fn component(&mut self, value: &[u8]) {
        self.out.push(self.delimiters.component);
        self.out.extend_from_slice(value);
    }

    /// The next repetition of the current element: the repetition separator, then `value`.
    /// Without a repetition separator (before 00402) only `value` is written: a caller
    /// that repeats an element checks that the delimiters allow it.
    pub fn repetition(&mut self, value: &[u8]) {
        self.out.extend(self.delimiters.repetition);
        self.out.extend_from_slice(value);
    }

    /// More bytes of the current element (or component), with no separator before them.
    pub fn value(&mut self, bytes: impl IntoIterator<Item = u8>) {
        self.out.extend(bytes);
    }

    /// Ends the current segment: the terminator, then the line ending. Counts it.
    pub fn end(&mut self) {
        self.out.push(self.delimiters.segment);
        self.out.extend_from_slice(self.line_ending);
        self.count = self.count.saturating_add(1);
    }

    /// A whole segment: `id`, then every one of `elements` (empty ones included), ended.
    pub fn segment(&mut self, id: &[u8], elements: &[&[u8]]) {
        self.start(id);
        for e in elements {
            self.element(e);
        }
        self.end();
    }

    /// A segment as it was read ([`crate::Segment::raw`]: id and elements, in these
    /// delimiters), ended.
    pub fn raw(&mut self, raw: &[u8]) {
        self.out.extend_from_slice(raw);
        self.end();
    }

    /// Starts counting a transaction set: call it before writing the ST.
    pub fn begin_set(&mut self) {
        self.count = 0;
    }

    /// Segments ended since [`begin_set`](Self::begin_set).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The SE01 of the set being written: the segments ended since
    /// [`begin_set`](Self::begin_set), and the SE itself.
    pub fn se01(&self) -> u32 {
        self.count.saturating_add(1)
    }

    /// The bytes written and not yet cleared.
    pub fn bytes(&self) -> &[u8] {
        &self.out
    }

    /// How many bytes [`bytes`](Self::bytes) holds.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Forgets the bytes held (once the caller has written them out); the count stays.
    pub fn clear(&mut self) {
        self.out.clear();
    }

    /// The bytes held.
    pub fn into_bytes(self) -> Vec<u8> {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetitions_and_raw_segments_are_written_in_the_delimiters_given() {
        let d = Delimiters {
            element: b'|',
            component: b'>',
            repetition: Some(b'!'),
            segment: b'\'',
        };
        let mut w = SegmentWriter::appending(b"head".to_vec(), d, b"\r\n");
        w.start(b"N1");
        w.element(b"A");
        w.component(b"B");
        w.repetition(b"C");
        w.element(b"");
        w.value(*b"DE");
        w.end();
        w.raw(b"REF|X");
        assert_eq!(w.count(), 2);
        assert_eq!(w.bytes(), b"headN1|A>B!C|DE'\r\nREF|X'\r\n");
        w.clear();
        assert!(w.is_empty());
        assert_eq!(w.se01(), 3);
    }

    #[test]
    fn without_a_repetition_separator_a_repetition_is_its_value() {
        let d = Delimiters {
            repetition: None,
            ..Delimiters::COMMON
        };
        let mut w = SegmentWriter::new(d, b"");
        w.start(b"X");
        w.element(b"1");
        w.repetition(b"2");
        w.end();
        assert_eq!(w.into_bytes(), b"X*12~");
    }
}
