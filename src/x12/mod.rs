//! The pure syntax layer: bytes in, a borrowing envelope tree out.
//!
//! Nothing here does I/O, logging or SQL, and nothing here decides what is *wrong* with an
//! interchange: the tree records what it found (a missing trailer is `None`, a segment outside
//! any envelope lands in `stray`), and `crate::validate` and `crate::schema` turn those facts
//! into findings with X12 codes. That split keeps this module liftable into its own crate, the way csv-core sits
//! under csv.
//!
//! Reading happens in two steps, as the style guide asks: [`Interchanges`] walks a file,
//! discovering each interchange's delimiters from its ISA and cutting the file at IEA
//! boundaries, and builds one [`Interchange`] at a time so each can be decided on its own.

mod envelope;
mod isa;
mod position;
mod segment;

pub use envelope::{
    likely_interchange_start, Body, Group, Inside, Interchange, InterchangeEnd, Interchanges,
    LimitBreach, LimitKind, Limits, Part, ReadError, ReadErrorKind, Resume, Sets, TransactionSet,
    PIECE_MARGIN,
};
pub use isa::{Isa, ISA_LEN};
pub use position::Position;

/// A count or control number element (IEA01, GE01, SE01) as a number; `None` unless it is
/// all digits and fits.
pub fn number(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Whether an ISA12 names an interchange control version: five digits, 00200 to 00899.
/// What we reject with TA105 017 we never answer in.
pub fn is_control_version(v: &[u8]) -> bool {
    v.len() == 5 && number(v).is_some_and(|n| (200..=899).contains(&n))
}

/// The highest control number (ISA13, GS06) X12's nine digits can carry.
pub const MAX_CONTROL_NUMBER: u32 = 999_999_999;
pub use segment::{Delimiters, Element, Segment, Segments};

/// Skips what may stand before an interchange: a UTF-8 byte order mark (at the start of the
/// file only: `file_start` says whether `input` begins there), then ASCII whitespace.
pub(crate) fn skip_leading(input: &[u8], mut pos: usize, file_start: bool) -> usize {
    if pos == 0 && file_start && input.starts_with(b"\xEF\xBB\xBF") {
        pos = 3;
    }
    while input.get(pos).is_some_and(|b| b.is_ascii_whitespace()) {
        pos += 1;
    }
    pos
}
