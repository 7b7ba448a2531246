//! The ISA header: where an interchange declares its own delimiters.
//!
//! The ISA is fixed width (106 bytes with its terminator), but real files carry short or
//! unpadded fields, so the grammar reads it by its separators and leaves the width check to
//! validation: a reader that insists on column 105 would lose those files instead of
//! rejecting them with a reason.

use nom::bytes::complete::{tag, take, take_till};
use nom::combinator::map;
use nom::multi::count;
use nom::sequence::{preceded, terminated, tuple};
use nom::{Finish, IResult};

use super::{Delimiters, Segment};

/// Length of a correct ISA, terminator included.
pub const ISA_LEN: usize = 106;

/// How far the reader looks for the ISA's sixteen elements before giving up: generous enough
/// for padded oddities, small enough that a file of garbage costs nothing.
pub(crate) const ISA_SCAN_LIMIT: usize = 512;

/// A parsed ISA: its sixteen fields exactly as sent, and the delimiters they declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isa<'a> {
    /// ISA01..ISA16; `fields[0]` is ISA01. ISA16 is the one-byte component separator.
    pub fields: [&'a [u8]; 16],
    /// The delimiters it declares: the byte after `ISA`, ISA11, ISA16 and the byte after it.
    pub delimiters: Delimiters,
    /// The ISA as a segment (ordinal 1), terminator excluded.
    pub segment: Segment<'a>,
    /// Bytes from `I` up to and including the terminator; 106 when the ISA is correct.
    pub len: usize,
}

impl<'a> Isa<'a> {
    /// Field `n` (1-based) as sent, padding included.
    pub fn field(&self, n: usize) -> &'a [u8] {
        n.checked_sub(1)
            .and_then(|i| self.fields.get(i))
            .copied()
            .unwrap_or_default()
    }

    /// Field `n` as text with its padding trimmed; empty when not ASCII/UTF-8.
    pub fn trimmed(&self, n: usize) -> &'a str {
        std::str::from_utf8(self.field(n)).unwrap_or("").trim()
    }

    /// ISA13, the interchange control number, trimmed.
    pub fn control_number(&self) -> &'a str {
        self.trimmed(13)
    }

    /// ISA12, the interchange control version, trimmed.
    pub fn version(&self) -> &'a str {
        self.trimmed(12)
    }
}

/// Why an ISA could not be read at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsaError {
    /// Fewer than sixteen elements before the scan limit or the end of input.
    Unreadable,
    /// The element separator is a letter, digit or space.
    ElementSeparator,
    /// The segment terminator is a letter or digit, or equals another delimiter.
    SegmentTerminator,
    /// A delimiter is a byte outside ASCII: the first byte of a multi-byte character (a
    /// UTF-8 `¬`, or U+FFFD where a re-encoding lost the real one), or a byte of another
    /// character set. `at` is its offset from the ISA's first byte.
    NotAscii { delimiter: Delimiter, at: usize },
}

/// One of the ISA's delimiters, for an error that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delimiter {
    Element,
    Component,
    Segment,
}

/// ISA: `ISA` element-separator, fifteen fields each closed by the separator, then ISA16 (one
/// byte) and the segment terminator (one byte). The separator is whatever byte follows `ISA`.
/// The element separator, ISA01..ISA15, the component separator and the segment terminator.
type IsaParts<'a> = (u8, Vec<&'a [u8]>, u8, u8);

fn isa_fields(input: &[u8]) -> IResult<&[u8], IsaParts<'_>> {
    let (rest, sep) = preceded(tag("ISA"), map(take(1usize), first_byte))(input)?;
    let sep_tag = [sep];
    let field = terminated(take_till(move |c| c == sep), tag(&sep_tag[..]));
    let (rest, (fields, component, terminator)) = tuple((
        count(field, 15),
        map(take(1usize), first_byte),
        map(take(1usize), first_byte),
    ))(rest)?;
    Ok((rest, (sep, fields, component, terminator)))
}

/// Whether the bytes at `at` are one multi-byte UTF-8 character (`¬` as C2 AC, U+FFFD as EF
/// BF BD): a delimiter of one byte cannot be that, and what follows it is not the next
/// segment. A lone byte outside ASCII (a Latin-1 `¦`, A6, used as ISA16 throughout) is a
/// delimiter like any other.
fn starts_a_character(window: &[u8], at: usize) -> bool {
    let lead = window.get(at).is_some_and(|b| !b.is_ascii());
    lead && (2..=4).any(|n| {
        window
            .get(at..at + n)
            .and_then(|b| std::str::from_utf8(b).ok())
            .is_some_and(|c| c.chars().count() == 1)
    })
}

fn first_byte(b: &[u8]) -> u8 {
    b.first().copied().unwrap_or_default()
}

/// Reads the ISA that starts at `input[offset..]`.
pub(crate) fn parse_isa(input: &[u8], offset: usize) -> Result<Isa<'_>, IsaError> {
    let tail = input.get(offset..).unwrap_or_default();
    let window = tail.get(..ISA_SCAN_LIMIT).unwrap_or(tail);
    let (rest, (sep, fields, component, terminator)) = isa_fields(window)
        .finish()
        .map_err(|_| IsaError::Unreadable)?;
    if starts_a_character(window, 3) {
        return Err(IsaError::NotAscii {
            delimiter: Delimiter::Element,
            at: 3,
        });
    }
    if sep.is_ascii_alphanumeric() || matches!(sep, b' ' | b'\r' | b'\n') {
        return Err(IsaError::ElementSeparator);
    }
    let len = window.len() - rest.len();
    for (delimiter, at) in [
        (Delimiter::Component, len - 2),
        (Delimiter::Segment, len - 1),
    ] {
        if starts_a_character(window, at) {
            return Err(IsaError::NotAscii { delimiter, at });
        }
    }
    if terminator.is_ascii_alphanumeric() || [component, sep, b' '].contains(&terminator) {
        return Err(IsaError::SegmentTerminator);
    }
    let mut all: [&[u8]; 16] = [&[]; 16];
    for (slot, f) in all.iter_mut().zip(fields) {
        *slot = f;
    }
    let component_field = window.get(len - 2..len - 1).unwrap_or_default();
    all[15] = component_field;
    let version = std::str::from_utf8(all[11]).unwrap_or("").trim();
    let isa11 = all[10];
    let repetition = match isa11 {
        [r] if version >= "00402"
            && !r.is_ascii_alphanumeric()
            && *r != b' '
            && ![sep, component, terminator].contains(r) =>
        {
            Some(*r)
        }
        _ => None,
    };
    let delimiters = Delimiters {
        element: sep,
        component,
        repetition,
        segment: terminator,
    };
    let raw = window.get(..len - 1).unwrap_or_default();
    let segment = Segment {
        id: raw.get(..3).unwrap_or_default(),
        raw,
        offset,
        ordinal: 1,
        terminated: true,
        delimiters,
    };
    Ok(Isa {
        fields: all,
        delimiters,
        segment,
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISA: &[u8] = b"ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000001*0*P*:~";

    #[test]
    fn reads_standard_isa() {
        let isa = parse_isa(ISA, 0).unwrap();
        assert_eq!(isa.len, ISA_LEN);
        assert_eq!(isa.delimiters, Delimiters::COMMON);
        assert_eq!(isa.trimmed(6), "ACME");
        assert_eq!(isa.control_number(), "000000001");
        assert_eq!(isa.field(16), b":");
    }

    #[test]
    fn letter_in_isa11_means_no_repetition_separator() {
        let s = String::from_utf8(ISA.to_vec())
            .unwrap()
            .replace("*^*", "*U*");
        assert_eq!(
            parse_isa(s.as_bytes(), 0).unwrap().delimiters.repetition,
            None
        );
        let s = s.replace("00501", "00401").replace("*U*", "*^*");
        assert_eq!(
            parse_isa(s.as_bytes(), 0).unwrap().delimiters.repetition,
            None
        );
    }

    #[test]
    fn other_delimiters_and_short_fields() {
        let s = b"ISA|00|x|00|y|ZZ|ACME|ZZ|US|240101|1200|}|00501|1|0|T|^\n";
        let isa = parse_isa(s, 0).unwrap();
        assert_eq!(isa.delimiters.element, b'|');
        assert_eq!(isa.delimiters.component, b'^');
        assert_eq!(isa.delimiters.repetition, Some(b'}'));
        assert_eq!(isa.delimiters.segment, b'\n');
        assert_eq!(isa.len, s.len());
    }

    #[test]
    fn a_delimiter_outside_ascii_is_named_where_it_stands() {
        let text = String::from_utf8(ISA.to_vec()).unwrap();
        let utf8_terminator = text.replace(":~", ":\u{ac}");
        assert_eq!(
            parse_isa(utf8_terminator.as_bytes(), 0),
            Err(IsaError::NotAscii {
                delimiter: Delimiter::Segment,
                at: 105
            })
        );
        let replaced = text.replace(":~", ":\u{fffd}");
        assert_eq!(
            parse_isa(replaced.as_bytes(), 0),
            Err(IsaError::NotAscii {
                delimiter: Delimiter::Segment,
                at: 105
            })
        );
        let component = text.replace(":~", "\u{a7}~");
        assert_eq!(
            parse_isa(component.as_bytes(), 0),
            Err(IsaError::NotAscii {
                delimiter: Delimiter::Component,
                at: 104
            })
        );
        let element = text.replace('*', "\u{a6}");
        assert_eq!(
            parse_isa(element.as_bytes(), 0),
            Err(IsaError::NotAscii {
                delimiter: Delimiter::Element,
                at: 3
            })
        );
        // One byte outside ASCII, as a Latin-1 file has it: a delimiter like any other.
        let mut latin1 = ISA.to_vec();
        latin1[104] = 0xA6;
        latin1[105] = 0x85;
        let isa = parse_isa(&latin1, 0).unwrap();
        assert_eq!(
            (isa.delimiters.component, isa.delimiters.segment),
            (0xA6, 0x85)
        );
    }

    #[test]
    fn unreadable_and_bad_delimiters() {
        assert_eq!(parse_isa(b"ISA*00*short", 0), Err(IsaError::Unreadable));
        assert_eq!(parse_isa(b"", 0), Err(IsaError::Unreadable));
        let bad = String::from_utf8(ISA.to_vec()).unwrap().replace('*', "A");
        assert!(parse_isa(bad.as_bytes(), 0).is_err());
        let bad_term = String::from_utf8(ISA.to_vec()).unwrap().replace(":~", ":Z");
        assert_eq!(
            parse_isa(bad_term.as_bytes(), 0),
            Err(IsaError::SegmentTerminator)
        );
    }
}
