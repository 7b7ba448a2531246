//! Reading an inbound file into memory, bounded by the configured file-size limit.
//!
//! The file is read once into one buffer that the whole tree then borrows; nothing copies it
//! again, so peak memory is the file plus the tree. The size is checked before reading, so an
//! oversized file costs nothing.

use std::io::Read;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    #[error(
        "{path}: {size} bytes is more than the limit of {limit} bytes (limits.max_file_bytes)"
    )]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("{path}: {cause}")]
    Io { path: String, cause: std::io::Error },
}

impl InputError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, InputError::Io { cause, .. } if cause.kind() == std::io::ErrorKind::NotFound)
    }
}

pub fn read(path: &Path, max_bytes: u64) -> Result<Vec<u8>, InputError> {
    let shown = || path.display().to_string();
    let io = |source| InputError::Io {
        path: shown(),
        cause: source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    if size > max_bytes {
        return Err(InputError::TooLarge {
            path: shown(),
            size,
            limit: max_bytes,
        });
    }
    let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // `take` guards against a file that grows between the size check and the read.
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(io)?;
    if buf.len() as u64 > max_bytes {
        return Err(InputError::TooLarge {
            path: shown(),
            size: buf.len() as u64,
            limit: max_bytes,
        });
    }
    Ok(buf)
}
