//! How much of a value read from input a message quotes. It lives with the syntax because a
//! segment's id is quoted where it is read ([`crate::Segment::id_shown`]); the gateway's
//! `text` module re-exports it, so there is one definition.

use std::borrow::Cow;

/// How much of a value from input a message or a finding quotes: longer values are broken
/// anyway (no X12 id or code is this long), and an element may be 64 KiB.
pub const QUOTED: usize = 35;

/// At most the first `max` bytes of `s`, cut at a character boundary.
///
/// ```
/// assert_eq!(x12::bounded("héllo", 2), "h");
/// assert_eq!(x12::bounded("abc", 5), "abc");
/// ```
pub fn bounded(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default()
}

/// `s` as a message quotes it: its first [`QUOTED`] bytes, with `...` when there was more.
///
/// ```
/// assert_eq!(x12::quoted("ST"), "ST");
/// assert!(x12::quoted(&"A".repeat(40)).ends_with("..."));
/// ```
pub fn quoted(s: &str) -> Cow<'_, str> {
    if s.len() <= QUOTED {
        return Cow::Borrowed(s);
    }
    Cow::Owned(format!("{}...", bounded(s, QUOTED)))
}
