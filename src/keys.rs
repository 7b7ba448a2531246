//! The keys that name an interchange: in the registry (sender and ISA13, with the receiver
//! when the partner's `interchange_scope` says so), as an operator types one, and in log
//! lines. Below both the registry (which finds a typed key) and the pipeline (which claims
//! by key), so neither has to ask the other.

use crate::config::InterchangeScope;
use crate::x12::Interchange;

/// `QUAL:ID:ISA13`, the id that ties every log line and record of an interchange together.
pub fn correlation_id(ic: &Interchange<'_>) -> String {
    format!(
        "{}:{}:{}",
        ic.isa.trimmed(5),
        ic.isa.trimmed(6),
        ic.isa.control_number()
    )
}

/// A key as an operator types it: `QUAL:ID:ISA13` with the control number perhaps not
/// padded (`ZZ:ACME:101` is `ZZ:ACME:000000101`).
pub fn typed_key(key: &str) -> String {
    match key.rsplit_once(':') {
        Some((head, n))
            if !n.is_empty() && n.len() < 9 && n.bytes().all(|b| b.is_ascii_digit()) =>
        {
            format!("{head}:{n:0>9}")
        }
        _ => key.to_string(),
    }
}

/// The registry key of an interchange: sender + ISA13, or sender + receiver + ISA13.
/// Each part is escaped ([`key_part`]), so that no two interchanges share a key unless their
/// parts are equal: ISA05 `ZZ:A` with ISA06 `B` is not ISA05 `ZZ` with ISA06 `A:B`.
pub fn interchange_key(ic: &Interchange<'_>, scope: InterchangeScope) -> String {
    let p = |n: usize| key_part(ic.isa.field(n));
    match scope {
        InterchangeScope::Sender => format!("{}:{}:{}", p(5), p(6), p(13)),
        InterchangeScope::SenderReceiver => {
            format!("{}:{}>{}:{}:{}", p(5), p(6), p(7), p(8), p(13))
        }
    }
}

/// One ISA field as a part of a key, its padding trimmed: the key's separators (`:`, `>`)
/// and the escape itself (`%`) written as `%3A`, `%3E`, `%25`, and the bytes of a field that
/// is not UTF-8 as `%XX` (two such fields used to read as the same empty text). Fields
/// without any of these, every real partner's, are left as they are, so keys already in a
/// registry stay the keys of their interchanges.
pub fn key_part(field: &[u8]) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    let special = |b: &u8| matches!(b, b':' | b'>' | b'%');
    // Trimmed as keys always were (any Unicode blank), so existing keys stay the same.
    match std::str::from_utf8(field).map(str::trim) {
        Ok(text) if !text.bytes().any(|b| special(&b)) => Cow::Borrowed(text),
        Ok(text) => {
            let mut out = String::with_capacity(text.len() + 6);
            for c in text.chars() {
                match c {
                    ':' => out.push_str("%3A"),
                    '>' => out.push_str("%3E"),
                    '%' => out.push_str("%25"),
                    c => out.push(c),
                }
            }
            Cow::Owned(out)
        }
        Err(_) => Cow::Owned(
            field
                .trim_ascii()
                .iter()
                .map(|b| {
                    if b.is_ascii_graphic() && !special(b) || *b == b' ' {
                        char::from(*b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_parts_cannot_run_into_each_other() {
        assert_eq!(key_part(b"ACME           "), "ACME");
        assert_eq!(key_part(b"ZZ:A"), "ZZ%3AA");
        assert_eq!(key_part(b"A:B"), "A%3AB");
        assert_eq!(key_part(b"50%>"), "50%25%3E");
        // Two different fields that are not UTF-8 no longer read as the same empty text.
        assert_eq!(key_part(b"\xff\xfeX "), "%FF%FEX");
        assert_ne!(key_part(b"\xff"), key_part(b"\xfe"));
        assert_eq!(key_part(b"\xc3\xa9T"), "\u{e9}T");
    }
}
