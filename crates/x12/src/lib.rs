//! ANSI X12 syntax on byte slices: bytes in, a borrowing envelope tree out; segments out
//! through one [`SegmentWriter`].
//!
//! Nothing here does I/O, logging or SQL, and nothing here decides what is *wrong* with an
//! interchange: the tree records what it found (a missing trailer is `None`, a segment outside
//! any envelope lands in `stray`), and the gateway's `validate` and `schema` modules turn
//! those facts into findings with X12 codes. That split is what lets this crate stand alone,
//! the way csv-core sits under csv: it depends on memchr and nom only (serde behind the
//! `serde` feature).
//!
//! Reading happens in two steps: [`Interchanges`] walks a file, discovering each
//! interchange's delimiters from its ISA and cutting the file at IEA boundaries, and builds
//! one [`Interchange`] at a time so each can be decided on its own.
//!
//! ```
//! let file = b"ISA*00*          *00*          *ZZ*SENDER         *ZZ*RECEIVER       *240101*1200*^*00501*000000001*0*P*:~\
//! GS*PO*SENDER*RECEIVER*20240101*1200*1*X*005010~ST*850*0001~BEG*00*SA*PO1**20240101~SE*3*0001~GE*1*1~IEA*1*000000001~";
//! let mut interchanges = x12::Interchanges::new(file, x12::Limits::default());
//! let ic = interchanges.next().unwrap().unwrap();
//! assert_eq!(ic.isa.control_number(), "000000001");
//! let set = ic.groups[0].sets.get(0).unwrap();
//! assert_eq!(set.st.element(1), Some(&b"850"[..]));
//! assert_eq!(set.counted_segments(), 3);
//! ```
#![forbid(unsafe_code)]
// Issue 39: no function over 100 lines (clippy.toml) or 7 parameters; tests are exempt.
#![cfg_attr(not(test), warn(clippy::too_many_lines, clippy::too_many_arguments))]
#![deny(missing_docs)]

mod envelope;
mod isa;
mod position;
mod quote;
mod segment;
mod writer;

pub use envelope::{
    likely_interchange_start, Body, Group, Inside, Interchange, InterchangeEnd, Interchanges,
    LimitBreach, LimitKind, Limits, ReadError, ReadErrorKind, Resume, Sets, TransactionSet,
    MAX_BAD_IDS, PIECE_MARGIN, STRAY_KEPT,
};
pub use isa::{Isa, ISA_LEN};
pub use position::Position;
pub use quote::{bounded, quoted, QUOTED};
pub use writer::SegmentWriter;

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
