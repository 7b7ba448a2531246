//! The content fingerprint of an interchange: what makes a resend "the same interchange".
//!
//! The hash runs over a canonical form, not over the bytes: every segment of the interchange
//! in file order, each element split into its repetitions and components, each piece written
//! with its length, so delimiters, line endings and ISA padding never reach the hash. The
//! delimiter fields themselves (ISA11 when it is the repetition separator, ISA16) are left
//! out, and so are the fields the partner lists in `fingerprint_ignore` (by default the
//! enveloping date and time: ISA09, ISA10, GS04, GS05), which are not business content.

use crate::x12::{Interchange, Segment, Segments};

/// Hex blake3 of the canonical form.
pub fn fingerprint(ic: &Interchange<'_>, ignore: &[String]) -> String {
    let mut f = Fingerprint::default();
    f.part(ic, ignore);
    f.finish()
}

/// The fingerprint taken a part at a time ([`crate::x12::Interchanges::in_parts`]): fed an
/// interchange's parts in order, it is the fingerprint of the interchange read whole (a part is cut where
/// a segment begins, so the segments are the same).
#[derive(Default)]
pub struct Fingerprint {
    h: Canonical,
}

impl Fingerprint {
    /// Adds an interchange, or its next part, leaving out the fields `ignore` lists.
    pub fn part(&mut self, ic: &Interchange<'_>, ignore: &[String]) {
        self.part_and_sets(ic, ignore, None);
    }

    /// [`Fingerprint::part`], and each set's own fingerprint ([`set_fingerprint`]) into
    /// `sets`, from the same pass: a body segment's canonical form in a set is a prefix of its
    /// form in the interchange (up to its last element that is not empty), so each segment is
    /// cut once and its set's bytes copied, not cut again. A set cut by the end of the part
    /// or lacking its SE gets no entry (its documents are fingerprinted from the set).
    pub fn part_and_sets(
        &mut self,
        ic: &Interchange<'_>,
        ignore: &[String],
        mut sets: Option<&mut SetPrints>,
    ) {
        let mut start = ic.span.start;
        if ic.is_first_part() {
            self.h.piece(b'S', b"ISA");
            let isa11_is_delimiter = ic.delimiters().repetition.is_some();
            for n in 1..=16 {
                let skip = n == 16 || (n == 11 && isa11_is_delimiter) || ignored(ignore, "ISA", n);
                let value = if skip {
                    &b""[..]
                } else {
                    ic.isa.field(n).trim_ascii()
                };
                self.h.piece(b'E', value);
            }
            start += ic.isa.len;
        }
        let mut open: Option<OpenSet> = None;
        let segments = Segments::new(ic.input(), start, ic.span.end, 2, ic.delimiters());
        for segment in segments.in_file_at(ic.base) {
            let gs = segment.id == b"GS";
            let from = self.h.buf.len();
            let used = hash_segment(
                &mut self.h,
                &segment,
                &|n| gs && ignored(ignore, "GS", n),
                usize::MAX,
            );
            if let Some(sets) = sets.as_deref_mut() {
                match segment.id {
                    b"ST" => {
                        open = Some(OpenSet {
                            st: segment.offset,
                            count: 0,
                            h: Canonical::default(),
                        });
                    }
                    b"SE" => {
                        if let Some(set) = open.take() {
                            sets.0.push(SetPrint {
                                st: set.st,
                                se: segment.offset,
                                count: set.count,
                                hash: set.h.hash(),
                            });
                        }
                    }
                    b"GS" | b"GE" | b"IEA" | b"ISA" => open = None,
                    _ => {
                        if let Some(set) = open.as_mut() {
                            let own = self.h.buf.get(from..used).unwrap_or_default();
                            set.h.bytes(own);
                            set.count = set.count.saturating_add(1);
                        }
                    }
                }
            }
            self.h.flush_if_full();
        }
    }

    pub fn finish(self) -> String {
        self.h.finish()
    }
}

/// Whether `ignore` lists element `n` of segment `id` (`GS04`).
fn ignored(ignore: &[String], id: &str, n: usize) -> bool {
    ignore
        .iter()
        .any(|f| f.len() == id.len() + 2 && f.starts_with(id) && f[id.len()..].parse() == Ok(n))
}

/// Hex blake3 of one set's own content: the segments between its ST and SE in the same
/// canonical form, so control numbers (ST02, SE02), the envelope and the delimiters never
/// reach it; a segment's trailing empty elements are left out too (one translator writes
/// them, another does not), so a re-enveloped resend of a document has the fingerprint of
/// its first sending.
pub fn set_fingerprint(set: &crate::x12::TransactionSet<'_>) -> String {
    content_fingerprint(set.body.segments(), &|_, _| false)
}

/// Each set's own fingerprint ([`set_fingerprint`]), by where its ST and SE are, taken with
/// its interchange's ([`Fingerprint::part_and_sets`]).
#[derive(Debug, Default)]
pub struct SetPrints(Vec<SetPrint>);

#[derive(Debug)]
struct SetPrint {
    st: usize,
    se: usize,
    count: u32,
    hash: blake3::Hash,
}

/// A set being hashed: where its ST is, how many body segments so far.
struct OpenSet {
    st: usize,
    count: u32,
    h: Canonical,
}

impl SetPrints {
    /// The fingerprint of `set` when it was taken: `set_fingerprint(set)`. `None` for a set
    /// it has no entry for, or whose ST, SE or count differ from the entry's (a set read
    /// otherwise than the pass cut it).
    pub fn of(&self, set: &crate::x12::TransactionSet<'_>) -> Option<String> {
        let se = set.se.as_ref()?;
        let i = self.0.binary_search_by_key(&set.st.offset, |p| p.st).ok()?;
        let p = self.0.get(i)?;
        (p.se == se.offset && p.count == set.body.count).then(|| p.hash.to_hex().to_string())
    }
}

/// The fingerprint of an interchange read whole ([`fingerprint`]) and each of its sets'.
pub fn with_sets(ic: &Interchange<'_>, ignore: &[String]) -> (String, SetPrints) {
    let mut f = Fingerprint::default();
    let mut sets = SetPrints::default();
    f.part_and_sets(ic, ignore, Some(&mut sets));
    (f.finish(), sets)
}

/// Hex blake3 of these segments in the canonical form of [`set_fingerprint`] (a document
/// that is a part of a set: its own segments and those of the loops around it), the
/// elements `ignored` (segment id, position) left empty.
pub fn content_fingerprint<'a>(
    segments: impl Iterator<Item = Segment<'a>>,
    ignored: &dyn Fn(&[u8], usize) -> bool,
) -> String {
    let mut h = Canonical::default();
    for segment in segments {
        let id = segment.id;
        let used = segment
            .elements()
            .enumerate()
            .filter(|(i, e)| !e.value.is_empty() && !ignored(id, i + 1))
            .map(|(i, _)| i + 1)
            .last()
            .unwrap_or(0);
        hash_segment(&mut h, &segment, &|n| ignored(id, n), used);
        h.flush_if_full();
    }
    h.finish()
}

/// The canonical form on its way into the hash, gathered in a buffer: blake3 takes a few
/// large updates far faster than one per tag and length (those were most of its time).
#[derive(Default)]
struct Canonical {
    hasher: blake3::Hasher,
    buf: Vec<u8>,
}

impl Canonical {
    const FLUSH: usize = 1 << 16;

    fn tag(&mut self, tag: u8) {
        self.buf.push(tag);
    }

    /// A tagged piece: its tag, its length (u32, little-endian) and its bytes.
    fn piece(&mut self, tag: u8, bytes: &[u8]) {
        self.buf.push(tag);
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(bytes);
    }

    /// Canonical bytes already made (a set's segment, copied from its interchange's form).
    fn bytes(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        self.flush_if_full();
    }

    /// Hashes what is gathered once it is large; only between segments, so that a segment's
    /// form stays in the buffer while it is copied (the hash does not depend on where the
    /// updates are cut).
    fn flush_if_full(&mut self) {
        if self.buf.len() >= Self::FLUSH {
            self.hasher.update(&self.buf);
            self.buf.clear();
        }
    }

    fn hash(mut self) -> blake3::Hash {
        self.hasher.update(&self.buf);
        self.hasher.finalize()
    }

    fn finish(self) -> String {
        self.hash().to_hex().to_string()
    }
}

/// One segment, its first `elements` elements (all of them for an interchange's fingerprint);
/// returns where in the buffer its last element that is not empty ends (its id's piece when
/// none is): the end of the segment's form in a set's fingerprint.
fn hash_segment(
    h: &mut Canonical,
    segment: &Segment<'_>,
    ignored: &dyn Fn(usize) -> bool,
    elements: usize,
) -> usize {
    h.piece(b'S', segment.id);
    let mut used = h.buf.len();
    for (i, element) in segment.elements().take(elements).enumerate() {
        if ignored(i + 1) {
            h.piece(b'E', b"");
            continue;
        }
        h.tag(b'E');
        for repetition in element.repetitions() {
            h.tag(b'R');
            for component in repetition.components() {
                h.piece(b'C', component);
            }
        }
        if !element.value.is_empty() {
            used = h.buf.len();
        }
    }
    used
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x12::{Interchanges, Limits};

    const A: &str = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000001*0*P*:~GS*PO*ACME*X12GATE*20240101*1200*1*X*005010~ST*850*0001~PO1*1*10*EA*A:B^C~SE*3*0001~GE*1*1~IEA*1*000000001~";

    fn fp(s: &str, ignore: &[&str]) -> String {
        let ignore: Vec<String> = ignore.iter().map(|s| s.to_string()).collect();
        let ic = Interchanges::new(s.as_bytes(), Limits::default())
            .next()
            .unwrap()
            .unwrap();
        fingerprint(&ic, &ignore)
    }

    const DEFAULT: &[&str] = &["ISA09", "ISA10", "GS04", "GS05"];

    const KNOWN_A: &str = "9cc64dcb9aa4e8aade6f956b5b2dc0f1c652b91c9ff52525fb9efff33c175d96";

    #[test]
    fn delimiters_line_endings_and_enveloping_time_do_not_count() {
        let base = fp(A, DEFAULT);
        let other = A
            .replace('*', "|")
            .replace('~', "\r\n")
            .replace(':', ">")
            .replace('^', "{");
        assert_eq!(fp(&other, DEFAULT), base);
        let later = A
            .replace("240101*1200", "240102*1300")
            .replace("20240101*1200", "20240102*1300");
        assert_eq!(fp(&later, DEFAULT), base);
        assert_ne!(fp(&later, &[]), fp(A, &[]));
    }

    /// The canonical form is what the registry has stored for years: its hash must not move.
    #[test]
    fn known_answer() {
        assert_eq!(fp(A, DEFAULT), KNOWN_A);
    }

    /// Folded a part at a time, the fingerprint is that of the interchange read whole,
    /// whatever the parts (cut where sets begin, inside groups or between them).
    #[test]
    fn in_parts_the_fingerprint_is_that_of_the_whole() {
        let mut text = A.replace("~GE*1*1~IEA*1*000000001~", "~");
        for n in 2..40 {
            text += &format!("ST*850*{n:04}~PO1*{n}*10*EA*A:B^C~SE*3*{n:04}~\n");
            if n % 13 == 0 {
                text += &format!("GE*1*{n}~GS*PO*ACME*X12GATE*20240101*1200*{n}*X*005010~");
            }
        }
        text += "GE*1*99~IEA*1*000000001~";
        let ignore: Vec<String> = DEFAULT.iter().map(|s| s.to_string()).collect();
        let whole = fp(&text, DEFAULT);
        for window in [150, 300, 777, 5_000] {
            let from = Box::new(std::io::Cursor::new(text.clone().into_bytes()));
            let mut reader =
                crate::input::Reader::new(from, "t", Limits::default(), window).in_parts();
            let (mut f, mut parts) = (Fingerprint::default(), 0);
            while let Some(piece) = reader.next_piece().unwrap() {
                let mut read = piece.interchanges();
                for ic in read.by_ref() {
                    let ic = ic.unwrap();
                    f.part(&ic, &ignore);
                    parts += 1;
                }
                let resume = read.resume();
                reader.advance(resume);
            }
            assert!(
                window >= text.len() || parts > 2,
                "window {window}: {parts} parts"
            );
            assert_eq!(f.finish(), whole, "window {window}");
        }
    }

    /// Taken in the interchange's pass, each set's fingerprint is the one taken of the set
    /// alone: trailing empty elements, repetitions and components, several groups; a set
    /// without its SE has none.
    #[test]
    fn sets_taken_with_their_interchange_are_those_taken_alone() {
        let text = A.replace(
            "~GE*1*1~",
            "~ST*850*0002~BEG*00*SA*PO-2***~PO1*1*10*EA*A:B^C:~REF*ZZ**~SE*5*0002~GE*2*1~GS*PO*ACME*X12GATE*20240101*1200*2*X*005010~ST*850*0003~PO1*2~SE*3*0003~GE*1*2~",
        );
        let ignore: Vec<String> = DEFAULT.iter().map(|s| s.to_string()).collect();
        let ic = Interchanges::new(text.as_bytes(), Limits::default())
            .next()
            .unwrap()
            .unwrap();
        let (whole, sets) = with_sets(&ic, &ignore);
        assert_eq!(whole, fingerprint(&ic, &ignore));
        let mut n = 0;
        for group in &ic.groups {
            for set in group.sets.iter() {
                assert_eq!(sets.of(&set), Some(set_fingerprint(&set)));
                n += 1;
            }
        }
        assert_eq!(n, 3);
        let broken = A.replace("~SE*3*0001~", "~");
        let ic = Interchanges::new(broken.as_bytes(), Limits::default())
            .next()
            .unwrap()
            .unwrap();
        let (_, sets) = with_sets(&ic, &ignore);
        let set = ic.groups[0].sets.get(0).unwrap();
        assert!(set.se.is_none());
        assert_eq!(sets.of(&set), None);
    }

    #[test]
    fn content_counts() {
        let base = fp(A, DEFAULT);
        assert_ne!(fp(&A.replace("PO1*1*10", "PO1*1*11"), DEFAULT), base);
        // Moving a component into the next element is different content, not the same bytes.
        assert_ne!(fp(&A.replace("A:B^C", "A*B^C"), DEFAULT), base);
        assert_ne!(fp(&A.replace("A:B^C", "A:B:C"), DEFAULT), base);
    }
}
