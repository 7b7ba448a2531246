//! Reading an inbound file, bounded by the configured file-size limit.
//!
//! [`Reader`] reads a file in pieces of whole interchanges: a piece of about a window's bytes
//! is read, the interchanges it holds whole are read from it (borrowing it, zero-copy), and
//! the rest is carried into the next piece. Memory is the window or the largest interchange,
//! whichever is larger, however large the file. [`read`] reads a (small) file whole. The size
//! is checked before reading, so an oversized file costs nothing.
//!
//! Only regular files are read. The file is opened with `O_NONBLOCK` and checked on the open
//! descriptor (not the path, which may change in between), so a FIFO without a writer, a
//! device such as `/dev/zero` or a socket is refused at once instead of blocking or streaming
//! without end; symbolic links are followed for `process FILE`, as a shell user expects.

use std::io::Read;
use std::path::Path;

use crate::x12::{likely_interchange_start, Inside, Interchanges, Limits, Resume};

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
    /// A file read again (an interchange larger than a piece: see `pipeline::large`) is not
    /// the one read the first time.
    #[error("{path}: the file changed after its interchange at byte {offset} was first read (replaced, rewritten or removed); its claim was marked failed: process the file again")]
    Changed { path: String, offset: usize },
}

/// What identifies a file's content between two readings: its inode, length and time of
/// last change. A file replaced or rewritten in between has another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    inode: u64,
    device: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl FileStamp {
    fn of_meta(meta: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            inode: meta.ino(),
            device: meta.dev(),
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }

    /// The stamp of the file at `path` now.
    pub fn of(path: &Path) -> Option<FileStamp> {
        std::fs::metadata(path).ok().map(|m| FileStamp::of_meta(&m))
    }
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
            InputError::TooLarge { .. } | InputError::Changed { .. } => false,
        }
    }
}

/// Reads `path` (`-`: standard input) whole, refusing more than `max_bytes`.
pub fn read(path: &Path, max_bytes: u64) -> Result<Vec<u8>, InputError> {
    if path == Path::new("-") {
        return bounded(std::io::stdin().lock(), 0, max_bytes, path);
    }
    let (file, size) = open_regular(path, max_bytes)?;
    bounded(file, size, max_bytes, path)
}

/// Opens a regular file of at most `max_bytes`; returns it and its size.
fn open_regular(path: &Path, max_bytes: u64) -> Result<(std::fs::File, u64), InputError> {
    open_stamped(path, max_bytes).map(|(file, size, _)| (file, size))
}

/// [`open_regular`], with the stamp of the file opened.
fn open_stamped(
    path: &Path,
    max_bytes: u64,
) -> Result<(std::fs::File, u64, FileStamp), InputError> {
    let shown = || path.display().to_string();
    let io = |source| InputError::Io {
        path: shown(),
        cause: source,
    };
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
    Ok((file, size, FileStamp::of_meta(&meta)))
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

/// The bytes read per piece: large enough that a piece holds many interchanges (each durable
/// step of `process` serves a piece's at once), small enough to bound memory.
pub const WINDOW: usize = 16 << 20;

/// A file read a piece at a time; see the module documentation. Between two calls of
/// [`Reader::next_piece`], [`Reader::advance`] says how far the piece was read.
pub struct Reader {
    from: Box<dyn Read + Send>,
    path: String,
    /// The bytes not yet read as interchanges, from `base` in the file.
    buf: Vec<u8>,
    base: usize,
    window: usize,
    /// The bytes a piece is filled to: the window, or more while one interchange needs more.
    want: usize,
    /// The file has no more bytes: the piece in `buf` is the last.
    eof: bool,
    /// The last piece has been read.
    done: bool,
    resume: Resume,
    max_bytes: u64,
    /// The file's size when it was opened, if it is a file: how much a piece reads.
    size: Option<u64>,
    /// The stamp of the file opened, if it is a file.
    stamp: Option<FileStamp>,
    limits: Limits,
    /// The most a piece grows to (see [`crate::x12::PIECE_MARGIN`]).
    cap: usize,
    /// A large interchange is given in parts ([`Reader::in_parts`]).
    parts: bool,
    /// What is kept of the interchange the piece begins inside, when read in parts: the
    /// bytes of the ISA and of the open group's GS ([`Inside`]).
    head: Vec<u8>,
}

/// One piece of a file: its bytes from `base`, and whether they run to the file's end.
#[derive(Debug, Clone, Copy)]
pub struct Piece<'a> {
    pub bytes: &'a [u8],
    pub base: usize,
    pub last: bool,
    resume: Resume,
    limits: Limits,
    /// Read in parts, with what the reader kept of the interchange the piece begins inside.
    parts: Option<&'a [u8]>,
}

impl<'a> Piece<'a> {
    /// The interchanges of this piece, borrowing it; hand their `resume()` to
    /// [`Reader::advance`] once done with them.
    pub fn interchanges(&self) -> Interchanges<'a> {
        let read = Interchanges::piece(self.bytes, self.base, self.last, self.resume, self.limits);
        match self.parts {
            Some(head) => read.in_parts(head),
            None => read,
        }
    }

    /// The piece as two readings, for two threads, cut where an interchange likely begins
    /// near its middle: the first reads up to the cut, the second from it. The second's
    /// findings stand only if the first [`Interchanges::ended_on_an_iea`]; its `resume()`,
    /// [`Resume::shifted`] by the cut, is the piece's. `None` when the piece has no such cut.
    pub fn halves(&self) -> Option<(Interchanges<'a>, Interchanges<'a>, usize)> {
        if !self.resume.is_plain() {
            return None;
        }
        let cut = likely_interchange_start(self.bytes, self.bytes.len() / 2)?;
        let (head, tail) = self.bytes.split_at(cut);
        let first = Interchanges::piece(head, self.base, true, self.resume, self.limits);
        let second = Interchanges::piece(
            tail,
            self.base + cut,
            self.last,
            Resume::after_an_interchange(),
            self.limits,
        );
        Some((first, second, cut))
    }
}

impl Reader {
    /// Opens `path` (`-`: standard input) for reading in pieces of about `window` bytes,
    /// refusing a file of more than `max_bytes` (before reading any of it when its size is
    /// known).
    pub fn open(path: &Path, limits: Limits, window: usize) -> Result<Reader, InputError> {
        let (from, size, stamp): (Box<dyn Read + Send>, _, _) = if path == Path::new("-") {
            (Box::new(std::io::stdin()), None, None)
        } else {
            let (file, size, stamp) = open_stamped(path, limits.max_file_bytes)?;
            (Box::new(file), Some(size), Some(stamp))
        };
        let mut reader = Reader::new(from, &path.display().to_string(), limits, window);
        reader.size = size;
        reader.stamp = stamp;
        Ok(reader)
    }

    /// Reads `path` from byte `offset`, where an interchange begins, as [`Reader::open`]
    /// reads it from its start: offsets stay the file's.
    pub fn open_at(
        path: &Path,
        offset: usize,
        limits: Limits,
        window: usize,
    ) -> Result<Reader, InputError> {
        use std::io::Seek;
        let (mut file, size, stamp) = open_stamped(path, limits.max_file_bytes)?;
        file.seek(std::io::SeekFrom::Start(offset as u64))
            .map_err(|cause| InputError::Io {
                path: path.display().to_string(),
                cause,
            })?;
        let mut reader = Reader::new(Box::new(file), &path.display().to_string(), limits, window);
        reader.base = offset;
        reader.size = Some(size);
        reader.stamp = Some(stamp);
        Ok(reader)
    }

    /// Reads `from`, named `name` in errors, as [`Reader::open`] reads a file.
    pub fn new(from: Box<dyn Read + Send>, name: &str, limits: Limits, window: usize) -> Reader {
        let window = window.max(1);
        let cap = limits.piece_cap();
        Reader {
            limits,
            cap,
            from,
            path: name.to_string(),
            buf: Vec::new(),
            base: 0,
            window,
            want: window,
            eof: false,
            done: false,
            resume: Resume::default(),
            max_bytes: limits.max_file_bytes,
            size: None,
            stamp: None,
            parts: false,
            head: Vec::new(),
        }
    }

    /// The stamp of the file read, as it was when it was opened (`None`: not a file).
    pub fn stamp(&self) -> Option<FileStamp> {
        self.stamp
    }

    /// Gives an interchange larger than a piece in parts
    /// ([`crate::x12::Interchanges::in_parts`]) instead of growing the piece to hold it: memory is then the window (or the largest set), however
    /// large an interchange. Only for a reader that puts the parts together
    /// (`check::pieces`, `pipeline::large`).
    pub fn in_parts(mut self) -> Reader {
        self.parts = true;
        self
    }

    /// Reads the pieces after this one about `window` bytes each (see [`Reader::advance`]).
    pub fn set_window(&mut self, window: usize) {
        let window = window.max(1);
        if self.want == self.window {
            self.want = window;
        }
        self.window = window;
    }

    /// The next piece; `None` once the last one has been read.
    pub fn next_piece(&mut self) -> Result<Option<Piece<'_>>, InputError> {
        if self.done {
            return Ok(None);
        }
        while !self.eof && self.buf.len() < self.want {
            let room = (self.want - self.buf.len()) as u64;
            // Room for what is to come, exactly when the file's size is known: left to
            // double, a piece's buffer took twice the window.
            let coming = match self.size {
                Some(size) => size.saturating_sub((self.base + self.buf.len()) as u64) + 1,
                None => 1 << 20,
            };
            self.buf
                .reserve_exact(usize::try_from(room.min(coming)).unwrap_or(0));
            let read = (&mut self.from)
                .take(room)
                .read_to_end(&mut self.buf)
                .map_err(|cause| InputError::Io {
                    path: self.path.clone(),
                    cause,
                })?;
            self.eof = read == 0;
            let total = (self.base + self.buf.len()) as u64;
            if total > self.max_bytes {
                return Err(InputError::TooLarge {
                    path: self.path.clone(),
                    size: total,
                    limit: self.max_bytes,
                });
            }
        }
        Ok(Some(Piece {
            bytes: &self.buf,
            base: self.base,
            last: self.eof,
            resume: self.resume,
            limits: self.limits,
            parts: self.parts.then_some(&self.head[..]),
        }))
    }

    /// The whole file when it is no larger than a window (read now), `None` otherwise (the
    /// file is then read in pieces from its start, nothing lost).
    pub fn whole(&mut self) -> Result<Option<Vec<u8>>, InputError> {
        let last = self.next_piece()?.is_some_and(|piece| piece.last);
        if !last {
            return Ok(None);
        }
        self.done = true;
        Ok(Some(std::mem::take(&mut self.buf)))
    }

    /// After a piece: `resume` is what reading its interchanges returned. What was read is
    /// dropped and the rest begins the next piece, which is read larger when nothing of this
    /// one could be (one interchange is larger than the window).
    pub fn advance(&mut self, resume: Resume) {
        if self.eof {
            self.done = true;
            self.buf = Vec::new();
            return;
        }
        let consumed = resume.consumed.min(self.buf.len());
        if let Some(inside) = resume.inside {
            self.head = self.kept(inside);
        }
        self.want = if consumed == 0 {
            let len = self.buf.len().max(self.want);
            len.saturating_mul(2).min(self.cap).max(len + 1)
        } else {
            self.window
        };
        self.buf.drain(..consumed);
        // One large interchange grew the buffer: give the memory back once it is read.
        if self.buf.capacity() > self.window.saturating_mul(4) && self.buf.len() <= self.window {
            self.buf.shrink_to(self.window.saturating_mul(2));
        }
        self.base += consumed;
        self.resume = resume;
    }
}

impl Reader {
    /// The bytes `inside` says to keep of the interchange it is inside, from this piece or
    /// (when the ISA or GS stood in an earlier one) from what was kept before.
    fn kept(&self, inside: Inside) -> Vec<u8> {
        let old = self.resume.inside;
        let old_gs_start = old.map_or(0, |o| o.isa.1);
        let at = |at: usize, len: usize, kept_at: Option<(usize, usize)>| -> &[u8] {
            let in_piece = at
                .checked_sub(self.base)
                .and_then(|i| self.buf.get(i..i + len));
            let found = in_piece.or_else(|| {
                let (_, from) = kept_at.filter(|(old_at, _)| *old_at == at)?;
                self.head.get(from..from + len)
            });
            // A miss is the reader's own mistake (the interchange's next part then says its
            // ISA was not kept, rather than read on from bytes that are not its own).
            debug_assert!(
                found.is_some(),
                "bytes at {at} neither in the piece nor kept"
            );
            found.unwrap_or_default()
        };
        let mut head = at(inside.isa.0, inside.isa.1, old.map(|o| (o.isa.0, 0))).to_vec();
        if let Some((gs_at, len, _)) = inside.gs {
            let old_gs = old.and_then(|o| o.gs).map(|(a, _, _)| (a, old_gs_start));
            head.extend_from_slice(at(gs_at, len, old_gs));
        }
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::x12::{Interchange, ReadError, PIECE_MARGIN};

    /// Everything the reader says of an interchange or an error, in file offsets.
    fn summary(read: Result<Interchange<'_>, ReadError>) -> String {
        let ic = match read {
            Ok(ic) => ic,
            Err(e) => return format!("error {:?} at {}: {}", e.kind, e.offset, e.message),
        };
        let mut out = format!(
            "{}..{} {:?} isa@{} isb {:?} ise {:?} ta1 {:?} blank {:?} stray {} {:?} iea {:?} count {} breaches {:?} suffix {:?}\n",
            ic.base + ic.span.start,
            ic.base + ic.span.end,
            ic.end,
            ic.isa.segment.offset,
            ic.isb.map(|s| s.offset),
            ic.ise.map(|s| s.offset),
            ic.ta1.iter().map(|s| s.offset).collect::<Vec<_>>(),
            ic.first_blank,
            ic.stray_count,
            ic.stray.iter().map(|s| (s.offset, s.raw)).collect::<Vec<_>>(),
            ic.iea.map(|s| (s.offset, s.raw)),
            ic.segment_count,
            ic.breaches,
            ic.suffix,
        );
        for g in &ic.groups {
            out += &format!("  gs@{} ge {:?}\n", g.gs.offset, g.ge.map(|s| s.offset));
            for set in &g.sets {
                let body: Vec<_> = set
                    .body
                    .segments()
                    .map(|s| (s.offset, s.ordinal, s.raw))
                    .collect();
                out += &format!(
                    "    st@{} se {:?} bad {:?} body {body:?}\n",
                    set.st.offset,
                    set.se.map(|s| s.offset),
                    set.bad_ids.iter().map(|s| s.offset).collect::<Vec<_>>(),
                );
            }
        }
        out
    }

    fn unbounded(limits: Limits) -> Limits {
        Limits {
            max_file_bytes: u64::MAX,
            ..limits
        }
    }

    fn whole(input: &[u8], limits: Limits) -> Vec<String> {
        Interchanges::new(input, limits).map(summary).collect()
    }

    fn in_pieces(input: &[u8], limits: Limits, window: usize) -> Vec<String> {
        let from = Box::new(std::io::Cursor::new(input.to_vec()));
        let mut reader = Reader::new(from, "test", unbounded(limits), window);
        let mut all = Vec::new();
        while let Some(piece) = reader.next_piece().unwrap() {
            assert!(piece.bytes.len() <= (window.max(1) * 2).max(input.len()) + window);
            let mut read = piece.interchanges();
            all.extend(read.by_ref().map(summary));
            let resume = read.resume();
            reader.advance(resume);
        }
        all
    }

    /// Fixtures run together, with what sits between interchanges in real files and what
    /// a reader must resynchronise after.
    fn awkward_file() -> Vec<u8> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "x12"))
            .collect();
        names.sort();
        let mut out = b"\xEF\xBB\xBF\r\n".to_vec();
        for (i, name) in names.iter().take(12).enumerate() {
            let bytes = std::fs::read(name).unwrap();
            // The BOM of a fixture of its own is mid-file here: garbage, as it would be.
            out.extend_from_slice(&bytes);
            match i % 4 {
                0 => out.extend_from_slice(b"\n\n  "),
                1 => out.extend_from_slice(b"garbage between ADVISABLE ISA-less bytes\n"),
                2 => out.extend_from_slice(b"ISA*broken~\n"),
                _ => {}
            }
        }
        // An interchange that never ends, with a stray ISA word inside data.
        out.extend_from_slice(b"ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000009*0*P*:~GS*PO*A*B*20240101*1200*1*X*005010~ST*850*1~N1*ST*ISAAC~");
        out
    }

    #[test]
    fn read_in_pieces_a_file_reads_as_it_does_whole() {
        let input = awkward_file();
        let limits = Limits::default();
        let want = whole(&input, limits);
        assert!(want.len() > 15, "{}", want.len());
        assert!(want.iter().any(|s| s.starts_with("error NotAnInterchange")));
        assert!(want.iter().any(|s| s.starts_with("error IsaUnreadable")));
        // Every window from one byte (each interchange needs the piece to grow) to past
        // the whole file, in steps that land everywhere in the file.
        let mut window = 1;
        while window < input.len() + 100 {
            let got = in_pieces(&input, limits, window);
            assert_eq!(got, want, "window {window}");
            window += if window < 700 { 37 } else { 1009 };
        }
    }

    #[test]
    fn an_interchange_over_the_limit_is_reported_and_never_held_whole() {
        let input = awkward_file();
        let limits = Limits {
            max_interchange_bytes: 800,
            ..Limits::default()
        };
        let want = whole(&input, limits);
        let too_large = want
            .iter()
            .filter(|s| s.starts_with("error TooLarge"))
            .count();
        assert!(too_large >= 2, "{too_large}");
        assert!(want.iter().filter(|s| !s.starts_with("error")).count() >= 5);
        for window in [1, 100, 700, 3000] {
            let from = Box::new(std::io::Cursor::new(input.clone()));
            let mut reader = Reader::new(from, "test", unbounded(limits), window);
            let mut got = Vec::new();
            while let Some(piece) = reader.next_piece().unwrap() {
                assert!(
                    piece.bytes.len() <= 800 + PIECE_MARGIN + window,
                    "{}",
                    piece.bytes.len()
                );
                let mut read = piece.interchanges();
                got.extend(read.by_ref().map(summary));
                let resume = read.resume();
                reader.advance(resume);
            }
            assert_eq!(got, want, "window {window}");
        }
    }

    /// An interchange ended by the next ISA, where that one has other delimiters; and an
    /// IEA left unterminated before the next ISA.
    fn delimiters_change() -> Vec<u8> {
        let tilde = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000001*0*P*:~GS*PO*ACME*X12GATE*20240101*1200*1*X*005010~ST*850*0001~BEG*00*SA*1**20240101~SE*3*0001~GE*1*1~";
        let newline = "ISA|00|          |00|          |ZZ|ACME           |ZZ|X12GATE        |240101|1200|^|00501|000000002|0|P|:\nGS|PO|ACME|X12GATE|20240101|1200|2|X|005010\nGE|0|2\nIEA|1|000000002\n";
        let unterminated = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000003*0*P*:~GS*PO*ACME*X12GATE*20240101*1200*3*X*005010~GE*0*3~IEA*1*000000003:";
        format!("{tilde}{newline}{unterminated}{tilde}{newline}").into_bytes()
    }

    #[test]
    fn a_change_of_delimiters_and_an_unterminated_iea_read_as_whole() {
        // The next ISA has the same element separator but another terminator, and no `~`
        // follows: the ISA that ends the first interchange is never terminated by its `~`.
        let tilde = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000001*0*P*:~GS*PO*ACME*X12GATE*20240101*1200*1*X*005010~GE*0*1~";
        let newline = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000002*0*P*:\nGS*PO*ACME*X12GATE*20240101*1200*2*X*005010\nGE*0*2\nIEA*1*000000002\n";
        let other = format!("{tilde}{}", newline.repeat(30)).into_bytes();
        for input in [delimiters_change(), other] {
            a_change_reads_as_whole(&input);
        }
    }

    fn a_change_reads_as_whole(input: &[u8]) {
        let input = input.to_vec();
        for limits in [
            Limits::default(),
            Limits {
                max_interchange_bytes: 2000,
                ..Limits::default()
            },
        ] {
            let want = whole(&input, limits);
            assert!(
                !want.iter().any(|s| s.starts_with("error TooLarge")),
                "{want:?}"
            );
            for window in 1..input.len() + 2 {
                assert_eq!(in_pieces(&input, limits, window), want, "window {window}");
            }
        }
    }

    #[test]
    fn an_unterminated_iea_does_not_confirm_a_cut() {
        let input = delimiters_change();
        let s = String::from_utf8(input.clone()).unwrap();
        // The ISA after "IEA*1*000000003:" looks like an interchange's start.
        let cut = s.find("000000003:").unwrap() + "000000003:".len();
        assert_eq!(
            crate::x12::likely_interchange_start(&input, cut - 5),
            Some(cut)
        );
        let mut head =
            Interchanges::piece(&input[..cut], 0, true, Resume::default(), Limits::default());
        head.by_ref().for_each(drop);
        assert!(!head.ended_on_an_iea());
        // A terminated IEA before it does.
        let closed = s.find("GE*0*3~IEA*1*000000003").unwrap();
        let one = format!("{}IEA*1*000000003~\n", &s[s.find("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000003").unwrap()..closed + 7]);
        let mut head = Interchanges::piece(
            one.as_bytes(),
            0,
            true,
            Resume::default(),
            Limits::default(),
        );
        head.by_ref().for_each(drop);
        assert!(head.ended_on_an_iea(), "{one}");
    }

    #[test]
    fn pieces_of_empty_and_blank_inputs() {
        for input in [&b""[..], b"  \r\n ", b"\xEF\xBB\xBF", b"junk", b"ISA"] {
            let want = whole(input, Limits::default());
            for window in 1..8 {
                assert_eq!(
                    in_pieces(input, Limits::default(), window),
                    want,
                    "{input:?}"
                );
            }
        }
    }

    /// An 850 fixture, and a file of 2,000 of it.
    fn many_850s() -> (Vec<u8>, Vec<u8>) {
        let one = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/850-004010.x12"),
        )
        .unwrap();
        let input = one.repeat(2000);
        (one, input)
    }

    #[test]
    fn a_window_bounds_the_memory_of_a_file_of_many_interchanges() {
        let (_, input) = many_850s();
        let from = Box::new(std::io::Cursor::new(input.clone()));
        let window = 64 << 10;
        let mut reader = Reader::new(from, "test", Limits::default(), window);
        let (mut pieces, mut read) = (0, 0);
        while let Some(piece) = reader.next_piece().unwrap() {
            assert!(piece.bytes.len() <= window);
            pieces += 1;
            let mut ics = piece.interchanges();
            read += ics.by_ref().filter(Result::is_ok).count();
            let resume = ics.resume();
            reader.advance(resume);
        }
        assert_eq!(read, 2000);
        assert!(pieces >= input.len() / window, "{pieces}");
    }

    /// A window lowered between two pieces cuts the pieces after it smaller, gives back the
    /// memory of the larger ones, and loses or repeats no interchange; raised again, the
    /// pieces grow again.
    #[test]
    fn a_window_changed_between_pieces_changes_the_pieces_after_it() {
        let (one, input) = many_850s();
        let from = Box::new(std::io::Cursor::new(input.clone()));
        let (large, small) = (256 << 10, 16 << 10);
        let mut reader = Reader::new(from, "test", Limits::default(), large);
        let (mut sizes, mut read) = (Vec::new(), 0);
        while let Some(piece) = reader.next_piece().unwrap() {
            let len = piece.bytes.len();
            let mut ics = piece.interchanges();
            read += ics.by_ref().filter(Result::is_ok).count();
            let resume = ics.resume();
            match sizes.len() {
                0 => reader.set_window(small),
                4 => reader.set_window(large),
                _ => {}
            }
            reader.advance(resume);
            // The buffer as the next piece begins.
            sizes.push((len, reader.buf.capacity()));
        }
        assert_eq!(read, 2000);
        assert!(sizes[0].0 > large - one.len(), "{sizes:?}");
        assert!(
            sizes[1..5].iter().all(|(len, _)| *len <= small),
            "{sizes:?}"
        );
        assert!(
            sizes[..5]
                .iter()
                .all(|(_, capacity)| *capacity <= 2 * small),
            "{sizes:?}"
        );
        assert!(sizes[5].0 > large - one.len(), "{sizes:?}");
    }

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
