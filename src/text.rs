//! Text from input made safe for a terminal or a log line: an ISA06 or a file name may hold
//! escape sequences that would repaint an operator's screen, so control characters (C0,
//! DEL, C1) are shown escaped (`\u{1b}`), never sent raw. JSON output needs none of this:
//! serde escapes control characters itself.

use std::borrow::Cow;

/// `s` with every control character escaped; borrowed when there is none.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

// Quoting is the syntax crate's (a segment id is quoted where it is read); one definition.
pub use x12::{bounded, quoted, QUOTED};

/// Bytes from input as a message quotes them: escaped, and at most their first [`QUOTED`]
/// (an element may be 64 KiB, a segment without separators a whole set's "id"), with `...`
/// when there was more.
pub fn shown(bytes: &[u8]) -> String {
    let escaped = |b: &[u8]| -> String { String::from_utf8_lossy(b).escape_debug().collect() };
    match bytes.get(..QUOTED) {
        Some(head) if bytes.len() > QUOTED => format!("{}...", escaped(head)),
        _ => escaped(bytes),
    }
}

/// `s` cut to about `max` bytes for a reason or a log line, saying how much was left out.
pub fn shortened(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let kept = bounded(s, max);
    Cow::Owned(format!("{kept}... ({} more bytes)", s.len() - kept.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_control_characters_only() {
        assert_eq!(printable("ZZ:ACME"), "ZZ:ACME");
        assert!(matches!(printable("plain"), Cow::Borrowed(_)));
        assert_eq!(printable("A\u{1b}[2JB"), "A\\u{1b}[2JB");
        assert_eq!(printable("x\u{9b}y\u{7f}"), "x\\u{9b}y\\u{7f}");
        assert_eq!(printable("é ü"), "é ü");
    }

    #[test]
    fn bounds_cut_at_characters() {
        assert_eq!(bounded("abcdef", 3), "abc");
        assert_eq!(bounded("éé", 3), "é");
        assert_eq!(bounded("ab", 3), "ab");
        assert_eq!(shortened("abcdef", 4), "abcd... (2 more bytes)");
        assert_eq!(shortened("abc", 4), "abc");
    }
}
