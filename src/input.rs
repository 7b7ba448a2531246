//! Reading an inbound file into memory, bounded by the configured file-size limit.
//!
//! The file is read once into one buffer that the whole tree then borrows; nothing copies it
//! again, so peak memory is the file plus the tree. The size is checked before reading, so an
//! oversized file costs nothing.
//!
//! Only regular files are read. The file is opened with `O_NONBLOCK` and checked on the open
//! descriptor (not the path, which may change in between), so a FIFO without a writer, a
//! device such as `/dev/zero` or a socket is refused at once instead of blocking or streaming
//! without end; symbolic links are followed for `process FILE`, as a shell user expects.

use std::io::Read;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    #[error(
        "{path}: {size} bytes is more than the limit of {limit} bytes (limits.max_file_bytes)"
    )]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("{path}: not a regular file but {kind}; only regular files are read")]
    NotRegular { path: String, kind: &'static str },
    #[error("{path}: {cause}")]
    Io { path: String, cause: std::io::Error },
}

/// What a file that is not a regular file is, in words.
pub fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

impl InputError {
    /// A mistake in what was asked for (no such file, not a file), not an I/O failure.
    pub fn is_not_found(&self) -> bool {
        match self {
            InputError::Io { cause, .. } => cause.kind() == std::io::ErrorKind::NotFound,
            InputError::NotRegular { .. } => true,
            InputError::TooLarge { .. } => false,
        }
    }
}

/// Reads `path` (`-`: standard input) whole, refusing more than `max_bytes`.
pub fn read(path: &Path, max_bytes: u64) -> Result<Vec<u8>, InputError> {
    let shown = || path.display().to_string();
    let io = |source| InputError::Io {
        path: shown(),
        cause: source,
    };
    if path == Path::new("-") {
        return bounded(std::io::stdin().lock(), 0, max_bytes, path);
    }
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(InputError::NotRegular {
            path: shown(),
            kind: kind_of(&meta),
        });
    }
    let size = meta.len();
    if size > max_bytes {
        return Err(InputError::TooLarge {
            path: shown(),
            size,
            limit: max_bytes,
        });
    }
    bounded(file, size, max_bytes, path)
}

/// Reads `from` to its end, at most `max_bytes` (`take` guards against a file that grows
/// between a size check and the read, and bounds standard input).
fn bounded(
    from: impl Read,
    expected: u64,
    max_bytes: u64,
    path: &Path,
) -> Result<Vec<u8>, InputError> {
    let mut buf = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    from.take(max_bytes.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|cause| InputError::Io {
            path: path.display().to_string(),
            cause,
        })?;
    if buf.len() as u64 > max_bytes {
        return Err(InputError::TooLarge {
            path: path.display().to_string(),
            size: buf.len() as u64,
            limit: max_bytes,
        });
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_folders_and_fifos_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        for (path, kind) in [
            (Path::new("/dev/zero"), "character device"),
            (dir.path(), "folder"),
            (fifo.as_path(), "FIFO"),
        ] {
            let started = std::time::Instant::now();
            let e = read(path, 1 << 30).unwrap_err();
            assert!(started.elapsed() < std::time::Duration::from_secs(1));
            let msg = e.to_string();
            assert!(
                msg.contains(kind) && msg.contains(&path.display().to_string()),
                "{msg}"
            );
        }
        std::fs::write(dir.path().join("f"), b"ISA").unwrap();
        assert_eq!(read(&dir.path().join("f"), 10).unwrap(), b"ISA");
    }
}
