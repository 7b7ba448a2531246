//! A document's JSON as the registry keeps it: compressed with LZ4 where the batch is made (on
//! every core), because JSON of X12 is several times its input and SQLite writes each byte kept
//! twice (its log, then the database) inside the commit every document waits for. The packing
//! is recorded beside the bytes, so the rows version 11 kept plain read as they are.

/// What a kept body's `packing` says of its bytes.
pub(super) const PLAIN: &str = "none";
pub(super) const LZ4: &str = "lz4";

/// A document's JSON, packed to be kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    bytes: Vec<u8>,
    lz4: bool,
}

impl Packed {
    /// LZ4's length prefix holds 32 bits: JSON longer than that is kept as it is.
    pub fn pack(json: &[u8]) -> Packed {
        match u32::try_from(json.len()) {
            Ok(_) => Packed {
                bytes: lz4_flex::compress_prepend_size(json),
                lz4: true,
            },
            Err(_) => Packed {
                bytes: json.to_vec(),
                lz4: false,
            },
        }
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// What the row's `packing` says.
    pub(super) fn packing(&self) -> &'static str {
        if self.lz4 {
            LZ4
        } else {
            PLAIN
        }
    }
}

/// The JSON of a row read back, as its `packing` says; a row that does not unpack is an error
/// that names the registry and the document, never a document delivered wrong.
pub(super) fn unpack(
    path: &str,
    document_id: i64,
    bytes: Vec<u8>,
    packing: &str,
) -> Result<Vec<u8>, String> {
    let bad = |what: String| {
        format!("registry {path}: the JSON kept for document {document_id} cannot be read: {what}")
    };
    match packing {
        PLAIN => Ok(bytes),
        LZ4 => unpack_lz4(&bytes).map_err(bad),
        other => Err(bad(format!("unknown packing {other:?}"))),
    }
}

/// LZ4 cannot expand a block more than 255-fold: a length prefix claiming more is damage, and
/// is refused before anything is allocated for it.
fn unpack_lz4(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let (said, _) = lz4_flex::block::uncompressed_size(bytes).map_err(|e| e.to_string())?;
    let most = bytes.len().saturating_mul(255).saturating_add(16);
    if said > most {
        return Err(format!(
            "its length prefix says {said} bytes, more than {most} can hold"
        ));
    }
    lz4_flex::decompress_size_prepended(bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_unpacks_to_the_same_bytes_and_damage_is_refused() {
        let json =
            br#"{"document":{"key":"ZZ:ACME:850:PO-1"},"set":{"st":["850","0001"]}}"#.repeat(40);
        let packed = Packed::pack(&json);
        assert!(
            packed.bytes().len() * 4 < json.len(),
            "{} of {}",
            packed.bytes().len(),
            json.len()
        );
        assert_eq!(unpack_lz4(packed.bytes()).as_deref(), Ok(&json[..]));
        let row = unpack("r.db", 7, packed.bytes().to_vec(), LZ4);
        assert_eq!(row.ok().as_deref(), Some(&json[..]));
        assert_eq!(
            unpack("r.db", 7, json.clone(), PLAIN).ok(),
            Some(json.clone())
        );
        // A prefix claiming 4 GB of a few bytes, and a cut stream.
        let mut claimed = vec![0xff, 0xff, 0xff, 0xff];
        claimed.extend_from_slice(&packed.bytes()[4..]);
        let e = unpack("r.db", 7, claimed, LZ4).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("document 7") && e.contains("length prefix")),
            "{e:?}"
        );
        let cut = packed.bytes()[..packed.bytes().len() / 2].to_vec();
        assert!(unpack("r.db", 7, cut, LZ4).is_err());
        let e = unpack("r.db", 7, vec![1], "zip")
            .err()
            .map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains("unknown packing")),
            "{e:?}"
        );
    }
}
