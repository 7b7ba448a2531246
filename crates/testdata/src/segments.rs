//! The one segment writer of every generator in this crate.

use std::fmt::Display;
use std::io::{self, Write};

use x12gate::x12::Delimiters;

/// Appends segments to a buffer and counts them, so SE01 comes out right by construction.
/// Counts and trailers only ever need what was already written, so output can stream: the
/// caller hands the buffer on whenever it likes ([`SegmentWriter::flush_to`]).
pub(crate) struct SegmentWriter<'e> {
    buf: Vec<u8>,
    /// Bytes already handed on.
    flushed: u64,
    d: Delimiters,
    /// What follows each segment terminator.
    eol: &'e [u8],
    /// Segments written since the count was last reset (at each ST).
    count: u32,
}

impl<'e> SegmentWriter<'e> {
    pub(crate) fn new(d: Delimiters, eol: &'e [u8], capacity: usize) -> Self {
        SegmentWriter {
            buf: Vec::with_capacity(capacity),
            flushed: 0,
            d,
            eol,
            count: 0,
        }
    }

    pub(crate) fn delimiters(&self) -> Delimiters {
        self.d
    }

    /// Bytes written so far, handed on or not.
    pub(crate) fn written(&self) -> u64 {
        self.flushed + self.buf.len() as u64
    }

    pub(crate) fn flushed(&self) -> u64 {
        self.flushed
    }

    /// Bytes written and not yet handed on.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn flush_to(&mut self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(&self.buf)?;
        self.flushed += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Everything not yet handed on.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    pub(crate) fn reset_count(&mut self) {
        self.count = 0;
    }

    /// One segment of text elements. Trailing empty elements are dropped, as X12 requires, so
    /// a caller can name every position up to the last one it fills.
    pub(crate) fn segment(&mut self, id: &str, elements: &[&dyn Display]) {
        self.elements(id, elements, |buf, _, e| {
            // invariant: writing to a Vec cannot fail.
            let _ = write!(buf, "{e}");
        });
    }

    /// One segment whose elements are lists of repetitions, each a list of components, joined
    /// with the writer's separators (a repetition needs one). Trailing empty elements are
    /// dropped, as in [`SegmentWriter::segment`].
    pub(crate) fn composed(&mut self, id: &str, elements: &[Vec<Vec<String>>]) {
        self.elements(id, elements, |buf, d, reps| {
            for (i, parts) in reps.iter().enumerate() {
                if i > 0 {
                    buf.extend(d.repetition);
                }
                for (j, part) in parts.iter().enumerate() {
                    if j > 0 {
                        buf.push(d.component);
                    }
                    buf.extend_from_slice(part.as_bytes());
                }
            }
        });
    }

    /// One segment of fields as they are, none dropped: for the fixed-width ISA, whose ISA11
    /// and ISA16 are delimiters themselves (any byte, not necessarily text).
    pub(crate) fn raw<F: AsRef<[u8]>>(&mut self, id: &str, fields: &[F]) {
        self.buf.extend_from_slice(id.as_bytes());
        for f in fields {
            self.buf.push(self.d.element);
            self.buf.extend_from_slice(f.as_ref());
        }
        self.terminate();
    }

    fn elements<E>(
        &mut self,
        id: &str,
        elements: &[E],
        write: impl Fn(&mut Vec<u8>, Delimiters, &E),
    ) {
        self.buf.extend_from_slice(id.as_bytes());
        let mut end = self.buf.len();
        for e in elements {
            self.buf.push(self.d.element);
            write(&mut self.buf, self.d, e);
            // An element that wrote nothing leaves its separator last.
            if self.buf.last() != Some(&self.d.element) {
                end = self.buf.len();
            }
        }
        self.buf.truncate(end);
        self.terminate();
    }

    fn terminate(&mut self) {
        self.buf.push(self.d.segment);
        self.buf.extend_from_slice(self.eol);
        self.count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_empty_elements_are_dropped_and_inner_ones_kept() {
        let mut w = SegmentWriter::new(Delimiters::COMMON, b"\n", 0);
        w.segment("N1", &[&"ST", &"", &"92", &"", &""]);
        let composite = vec![vec!["EA".to_string(), "2".to_string()]];
        let repeated = vec![vec!["A".to_string()], vec!["B".to_string()]];
        w.composed(
            "PO1",
            &[
                vec![vec!["1".to_string()]],
                Vec::new(),
                composite,
                repeated,
                Vec::new(),
            ],
        );
        w.raw("ISA", &[&b"00"[..], b"          "]);
        assert_eq!(w.count(), 3);
        assert_eq!(
            w.into_bytes(),
            b"N1*ST**92~\nPO1*1**EA:2*A^B~\nISA*00*          ~\n"
        );
    }
}
