//! An interchange larger than a piece, processed without ever being held whole: `process`
//! reads it twice from its file, a part at a time ([`crate::x12::Interchanges::in_parts`]).
//!
//! The first reading, before the claim, takes what the claim and the decision need: the
//! fingerprint (folded over the parts), the findings (put together as a whole reading gives
//! them), whether its text is UTF-8, and its outline: the ISA, each group's GS and GE and
//! each set's ST, written as a small interchange of their own. The decision and the
//! acknowledgments read the outline as they read any interchange, so they are the very
//! ones a whole reading gives. The second reading, once the claim is ours, goes through
//! the sets again from the file for the documents, a run at a time and in order, and once
//! more for the translation; memory is the outline (a few dozen bytes a set) and a piece.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::check::{Checks, InParts};
use crate::config::Partner;
use crate::finding::Finding;
use crate::fingerprint::Fingerprint;
use crate::input::{FileStamp, InputError, Reader};
use crate::x12::{Group, Interchange, Limits, Segment, SegmentWriter, Segments, TransactionSet};

use super::ProcessError;

/// The bytes a large interchange is read at a time, the first time from its second part on
/// and every time after (a set larger than this is read whole).
pub(super) const PART_WINDOW: usize = 1 << 20;

/// The longest ST the outline copies as it is; a longer one (an element past the limits) has
/// each element cut to as many bytes as 99 characters take at most (an acknowledgment
/// carries no element longer than 99), so that the outline stays small whatever the input.
const OUTLINE_ST: usize = 2048;
const OUTLINE_ST_ELEMENT: usize = 4 * 99;

/// The first reading of a large interchange, on its way.
pub(super) struct FirstReading<'c> {
    checks: Checks<'c>,
    ignore: Vec<String>,
    fingerprint: Fingerprint,
    found: InParts<'c>,
    utf8: bool,
    outline: Vec<u8>,
    /// The sets of each group, as read.
    sets: Vec<usize>,
    /// Where each group's GS stands in the file (offset, ordinal).
    gs_at: Vec<(usize, u32)>,
    /// Where the groups begin in the outline (after the ISA and the first TA1, if any).
    after_isa: usize,
    /// Every TA1, wherever it stood (its translation puts them before the groups).
    ta1: Vec<u8>,
    place: Place,
}

/// Where an interchange is to be read again: its file, as it was when first opened, and
/// its ISA's bytes and place in it.
struct Place {
    isa: Vec<u8>,
    start: usize,
    path: Option<PathBuf>,
    stamp: Option<FileStamp>,
    limits: Limits,
    window: usize,
}

impl Place {
    fn changed(&self) -> ProcessError {
        ProcessError::Input(InputError::Changed {
            path: self
                .path
                .as_ref()
                .map_or_else(String::new, |p| p.display().to_string()),
            offset: self.start,
        })
    }

    /// A reading of the interchange from its ISA, in parts.
    fn open(&self) -> Result<Reader, ProcessError> {
        let path = self.path.as_ref().ok_or_else(|| self.changed())?;
        let reader = Reader::open_at(path, self.start, self.limits, self.window).map_err(|e| {
            // Gone, no longer a file, or grown past the limit: not the file read first.
            if e.is_not_found() || matches!(e, InputError::TooLarge { .. }) {
                self.changed()
            } else {
                e.into()
            }
        })?;
        if self.stamp.is_none() || reader.stamp() != self.stamp {
            return Err(self.changed());
        }
        Ok(reader.in_parts())
    }

    /// Whether the file at the path is still the one first opened (a reading kept between
    /// runs reads the same inode, but the file may have been rewritten in place).
    fn check(&self) -> Result<(), ProcessError> {
        match &self.path {
            Some(path) if self.stamp.is_some() && FileStamp::of(path) == self.stamp => Ok(()),
            _ => Err(self.changed()),
        }
    }
}

impl<'c> FirstReading<'c> {
    /// Begins with the interchange's first part, read from the file `path` whose stamp
    /// was `stamp` when it was opened (to be read again; `None`: it is only decided), in
    /// pieces of `window` bytes (the second reading reads at most [`PART_WINDOW`] at a time).
    pub fn begin(
        first: &Interchange<'_>,
        path: Option<(&Path, Option<FileStamp>)>,
        partner: &Partner,
        checks: Checks<'c>,
        (limits, window): (Limits, usize),
    ) -> Self {
        let isa_bytes = first
            .input()
            .get(first.span.start..first.span.start + first.isa.len)
            .unwrap_or_default();
        let outline = [isa_bytes, first.suffix].concat();
        let mut reading = FirstReading {
            checks,
            ignore: partner.duplicates.fingerprint_ignore.clone(),
            fingerprint: Fingerprint::default(),
            found: InParts::default(),
            utf8: true,
            // With the line ending after it: the acknowledgments use the sender's.
            after_isa: outline.len(),
            outline,
            ta1: Vec::new(),
            sets: Vec::new(),
            gs_at: Vec::new(),
            place: Place {
                isa: first.isa.segment.raw.to_vec(),
                start: first.base + first.span.start,
                path: path.map(|(p, _)| p.to_path_buf()),
                stamp: path.and_then(|(_, stamp)| stamp),
                limits,
                window: window.min(PART_WINDOW),
            },
        };
        reading.add(first);
        reading
    }

    /// Adds the interchange's next part (the first included).
    pub fn add(&mut self, part: &Interchange<'_>) {
        self.fingerprint.part(part, &self.ignore);
        self.found.add(part, &self.checks);
        self.utf8 &= std::str::from_utf8(part.bytes()).is_ok();
        let d = part.delimiters();
        for ta1 in &part.ta1 {
            let mut one = SegmentWriter::new(d, b"");
            one.raw(ta1.raw);
            if self.ta1.is_empty() {
                // Before the groups, where a whole reading puts every TA1: it makes an
                // interchange of acknowledgments only one that is never answered.
                let at = self.after_isa;
                self.outline.splice(at..at, one.bytes().iter().copied());
                self.after_isa += one.len();
            }
            self.ta1.extend_from_slice(one.bytes());
        }
        // GS, GE and IEA as they are (one a group at most, and their values are group
        // keys); each ST cut when it is long, and an SE without elements.
        let mut outline = SegmentWriter::appending(std::mem::take(&mut self.outline), d, b"");
        for (gi, g) in part.groups.iter().enumerate() {
            if part.opens_group(gi) {
                outline.raw(g.gs.raw);
                self.gs_at.push((g.gs.offset, g.gs.ordinal));
                self.sets.push(0);
            }
            for set in g.sets.iter() {
                st_segment(&mut outline, &set.st);
                outline.segment(b"SE", &[]);
            }
            if let Some(n) = self.sets.last_mut() {
                *n += g.sets.len();
            }
            if part.closes_group(gi) {
                if let Some(ge) = &g.ge {
                    outline.raw(ge.raw);
                }
            }
        }
        if part.is_last_part() {
            if let Some(iea) = &part.iea {
                outline.raw(iea.raw);
            }
        }
        self.outline = outline.into_bytes();
    }

    /// Everything the first reading took, once it has read the last part.
    pub fn finish(self) -> Large {
        let mut outline = self.outline;
        outline.shrink_to_fit();
        Large {
            outline,
            fingerprint: self.fingerprint.finish(),
            utf8: self.utf8,
            found: self.found.finish(),
            sets: self.sets,
            gs_at: self.gs_at,
            ta1: self.ta1,
            place: self.place,
            again: Mutex::new(None),
        }
    }
}

/// A set's ST into the outline, each element cut when it is long (see [`OUTLINE_ST`]).
fn st_segment(out: &mut SegmentWriter<'_>, st: &Segment<'_>) {
    if st.raw.len() <= OUTLINE_ST {
        out.raw(st.raw);
    } else {
        out.start(b"ST");
        for e in st.elements().take(3) {
            out.element(e.value.get(..OUTLINE_ST_ELEMENT).unwrap_or(e.value));
        }
        out.end();
    }
}

/// Shows `visit` the sets of `part` from `from` on; whether it said to stop.
fn visit_part(
    part: &Interchange<'_>,
    from: (usize, usize),
    visit: &mut Visit<'_>,
) -> Result<bool, ProcessError> {
    for (lgi, g) in part.groups.iter().enumerate() {
        for (lsi, set) in g.sets.iter().enumerate() {
            let (gi, si) = (part.group_index(lgi), part.set_index(lgi, lsi));
            if (gi, si) >= from && !visit(gi, si, part, g, &set)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// A large interchange once read the first time.
pub(super) struct Large {
    /// Its envelope as an interchange of its own (see the module documentation).
    pub outline: Vec<u8>,
    pub fingerprint: String,
    pub utf8: bool,
    /// Its own findings, as `pipeline::findings` gives them read whole.
    pub found: Vec<Finding>,
    sets: Vec<usize>,
    gs_at: Vec<(usize, u32)>,
    ta1: Vec<u8>,
    place: Place,
    /// The second reading, where the last run of documents left it.
    again: Mutex<Option<Reader>>,
}

/// Set `si` of group `gi`, in the part `ic` and its group `group`: what the second reading
/// shows of each set; the answer says whether to go on.
pub(super) type Visit<'v> = dyn FnMut(
        usize,
        usize,
        &Interchange<'_>,
        &Group<'_>,
        &TransactionSet<'_>,
    ) -> Result<bool, ProcessError>
    + 'v;

impl Large {
    fn matches(&self, ic: &Interchange<'_>) -> bool {
        ic.groups.len() == self.sets.len()
            && ic
                .groups
                .iter()
                .zip(&self.sets)
                .all(|(g, n)| g.sets.len() == *n)
    }

    /// The outline read as an interchange, when it has the groups and sets the interchange
    /// has (it cannot but have them; a decision on any other would be wrong).
    pub fn read_outline(&self) -> Result<Interchange<'_>, String> {
        // Read without the limits: they were the interchange's to meet (the outline of
        // sets without SE may even be longer than it), and they change nothing of its shape.
        let unbounded = Limits {
            max_file_bytes: u64::MAX,
            max_segments_per_set: u32::MAX,
            max_element_len: usize::MAX,
            max_set_bytes: u64::MAX,
            max_interchange_bytes: u64::MAX,
        };
        match crate::x12::Interchanges::new(&self.outline, unbounded).next() {
            Some(Ok(outline)) if self.matches(&outline) => Ok(outline),
            _ => Err(format!(
                "the outline of the interchange at byte {} does not read as it",
                self.place.start
            )),
        }
    }

    /// The outline's GS of group `gi` where it stands in the file.
    pub fn gs_in_file<'o>(&self, outline: &Interchange<'o>, gi: usize) -> Option<Segment<'o>> {
        let mut gs = outline.groups.get(gi)?.gs;
        let (offset, ordinal) = *self.gs_at.get(gi)?;
        gs.offset = offset;
        gs.ordinal = ordinal;
        Some(gs)
    }

    fn changed(&self) -> ProcessError {
        self.place.changed()
    }

    /// Whether the file is still the one read the first time (looked at, not opened).
    pub fn unchanged(&self) -> Result<(), ProcessError> {
        self.place.check()
    }

    /// Shows `visit` the sets from `from` (group, set) on, in order, until it says to stop
    /// or the interchange ends; the next call goes on from where this one stopped.
    pub fn each_set(
        &self,
        from: (usize, usize),
        visit: &mut Visit<'_>,
    ) -> Result<(), ProcessError> {
        let mut again = self
            .again
            .lock()
            .map_err(|_| ProcessError::Translate("a run of documents failed midway".into()))?;
        let mut reader = match again.take() {
            Some(reader) => {
                self.place.check()?;
                reader
            }
            None => self.place.open()?,
        };
        loop {
            let (stopped, last, resume) = {
                let Some(piece) = reader.next_piece()? else {
                    return Err(self.changed());
                };
                let mut read = piece.interchanges();
                match read.next() {
                    Some(Ok(part)) => {
                        if part.is_first_part() && part.isa.segment.raw != self.place.isa.as_slice()
                        {
                            return Err(self.changed());
                        }
                        let stopped = visit_part(&part, from, visit)?;
                        (stopped, part.is_last_part(), read.resume())
                    }
                    // Nothing to cut at yet: the piece grows.
                    None if !piece.last => (false, false, read.resume()),
                    _ => return Err(self.changed()),
                }
            };
            if stopped {
                // This piece again next time: the run stopped inside it.
                *again = Some(reader);
                return Ok(());
            }
            if last {
                return Ok(());
            }
            reader.advance(resume);
        }
    }

    /// Writes the interchange's translation: its parts read once more from the file.
    pub fn write_translation(
        &self,
        form: crate::translate::Form,
        schemas: &crate::schema::Schemas,
        keep: &dyn Fn(usize, usize) -> bool,
        mut out: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        // A file that changed stays that error (see `batch::write_all`): the file fails alone.
        let failed = |e: ProcessError| match e {
            ProcessError::Input(e) => std::io::Error::other(e),
            e => std::io::Error::other(e.to_string()),
        };
        let translating = |e: crate::translate::ParseError| match e {
            crate::translate::ParseError::Io(e) => e,
            e => std::io::Error::other(format!("translating: {e}")),
        };
        let mut reader = self.place.open().map_err(failed)?;
        let mut doc =
            crate::translate::DocumentWriter::start_with(self.utf8, form, Some(schemas), &mut out)
                .map_err(translating)?;
        loop {
            let (last, resume) = {
                let piece = reader
                    .next_piece()
                    .map_err(|e| failed(e.into()))?
                    .ok_or_else(|| failed(self.changed()))?;
                let mut read = piece.interchanges();
                match read.next() {
                    Some(Ok(part)) => {
                        // Every TA1 goes with the first part, before the groups.
                        let d = part.delimiters();
                        let ta1: Vec<Segment<'_>> = match part.is_first_part() {
                            true => Segments::new(&self.ta1, 0, self.ta1.len(), 2, d).collect(),
                            false => Vec::new(),
                        };
                        doc.interchange_part(&part, keep, &ta1, &mut out)
                            .map_err(translating)?;
                        (part.is_last_part(), read.resume())
                    }
                    None if !piece.last => (false, read.resume()),
                    _ => return Err(failed(self.changed())),
                }
            };
            if last {
                break;
            }
            reader.advance(resume);
        }
        doc.finish(&mut out).map_err(translating)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x12::Interchanges;

    /// The decision on `input`'s interchange read whole, and on its outline read in parts
    /// of `window` bytes (with its findings put together from the parts).
    fn both(
        input: &str,
        window: usize,
        limits: Limits,
    ) -> (
        crate::ack::InterchangeResponse,
        crate::ack::InterchangeResponse,
        usize,
    ) {
        let schemas = crate::schema::builtin().unwrap();
        let checks = Checks::definitions(schemas);
        let partner = Partner::unknown("ZZ", "ACME");
        let whole = Interchanges::new(input.as_bytes(), limits)
            .next()
            .unwrap()
            .unwrap();
        let found = crate::check::interchange(&whole, &checks, []);
        let want = crate::ack::respond(&whole, &found, &partner);

        let from = Box::new(std::io::Cursor::new(input.as_bytes().to_vec()));
        let mut reader = Reader::new(from, "t", limits, window).in_parts();
        let (mut first, mut parts) = (None::<FirstReading<'_>>, 0);
        while let Some(piece) = reader.next_piece().unwrap() {
            let mut read = piece.interchanges();
            for ic in read.by_ref() {
                let ic = ic.unwrap();
                parts += 1;
                match &mut first {
                    Some(f) => f.add(&ic),
                    None => {
                        first = Some(FirstReading::begin(
                            &ic,
                            None,
                            &partner,
                            checks,
                            (limits, window),
                        ))
                    }
                }
            }
            let resume = read.resume();
            reader.advance(resume);
        }
        let large = first.unwrap().finish();
        let outline = large.read_outline().unwrap();
        assert!(outline.is_whole());
        let got = crate::ack::respond(&outline, &large.found, &partner);
        (as_written(want), as_written(got), parts)
    }

    /// A response with its sets' values as an acknowledgment writes them (99 bytes at most).
    fn as_written(mut r: crate::ack::InterchangeResponse) -> crate::ack::InterchangeResponse {
        let cut = |v: &mut String| *v = crate::text::bounded(v, 99).to_string();
        for s in r.groups.iter_mut().flat_map(|g| g.sets.iter_mut()) {
            cut(&mut s.id);
            cut(&mut s.control_number);
            if let Some(c) = &mut s.convention {
                cut(c);
            }
        }
        r
    }

    /// The second reading shows every set once, in order, run after run; and refuses a file
    /// rewritten or replaced since the first.
    #[test]
    fn the_second_reading_goes_on_run_after_run_and_refuses_another_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("large.x12");
        let mut text = isa(11) + "GS*PO*ACME*X12GATE*20240301*1200*71*X*005010~\n";
        for i in 1..=60 {
            text += &format!("ST*850*{i:04}~\nBEG*00*SA*PO-{i}**20240301~\nSE*3*{i:04}~\n");
            if i == 30 {
                text += "GE*30*71~\nGS*PO*ACME*X12GATE*20240301*1200*72*X*005010~\n";
            }
        }
        text += "GE*30*72~\nIEA*2*000000011~\n";
        std::fs::write(&path, &text).unwrap();
        let first_reading = || {
            let limits = Limits::default();
            let mut reader = Reader::open(&path, limits, 400).unwrap().in_parts();
            let stamp = reader.stamp();
            let partner = Partner::unknown("ZZ", "ACME");
            let mut first: Option<FirstReading<'_>> = None;
            while let Some(piece) = reader.next_piece().unwrap() {
                let mut read = piece.interchanges();
                for ic in read.by_ref() {
                    let ic = ic.unwrap();
                    match &mut first {
                        Some(f) => f.add(&ic),
                        None => {
                            let source = Some((path.as_path(), stamp));
                            first = Some(FirstReading::begin(
                                &ic,
                                source,
                                &partner,
                                Checks::default(),
                                (limits, 400),
                            ))
                        }
                    }
                }
                let resume = read.resume();
                reader.advance(resume);
            }
            first.unwrap().finish()
        };
        let large = first_reading();
        // Runs of seven sets: each goes on where the last one stopped.
        let mut seen = Vec::new();
        let mut next = Some((0, 0));
        while let Some(from) = next.take() {
            let mut in_run = 0;
            large
                .each_set(from, &mut |gi, si, _, _, set| {
                    if in_run == 7 {
                        next = Some((gi, si));
                        return Ok(false);
                    }
                    in_run += 1;
                    let st02 = String::from_utf8_lossy(set.st.element(2).unwrap()).into_owned();
                    seen.push((gi, si, st02));
                    Ok(true)
                })
                .unwrap();
        }
        let want: Vec<(usize, usize, String)> = (1..=60)
            .map(|i: usize| ((i - 1) / 30, (i - 1) % 30, format!("{i:04}")))
            .collect();
        assert_eq!(seen, want);

        let changed = |r: &Result<(), ProcessError>| {
            matches!(
                r,
                Err(ProcessError::Input(InputError::Changed { offset: 0, .. }))
            )
        };
        // Rewritten in place between two runs (the reading kept between them reads the same
        // inode): the next run is refused, by the file's error.
        let large = first_reading();
        let first_run = large.each_set((0, 0), &mut |_, si, _, _, _| Ok(si < 3));
        assert!(first_run.is_ok());
        std::fs::write(&path, text.replace("PO-7*", "PO-77*")).unwrap();
        let refused = large.each_set((0, 3), &mut |_, _, _, _, _| Ok(true));
        assert!(changed(&refused), "{refused:?}");
        let refused = large.each_set((0, 0), &mut |_, _, _, _, _| Ok(true));
        assert!(changed(&refused), "{refused:?}");
        // Replaced by another file: its translation is refused with the same error inside.
        let large = first_reading();
        let other = dir.path().join("other.x12");
        std::fs::write(&other, &text).unwrap();
        std::fs::rename(&other, &path).unwrap();
        let mut out = Vec::new();
        let refused = large.write_translation(
            crate::translate::Form::Raw,
            crate::schema::builtin().unwrap(),
            &|_, _| true,
            &mut out,
        );
        let inner = refused.unwrap_err().into_inner().unwrap();
        assert!(inner.is::<InputError>(), "{inner}");
        assert!(changed(&large.unchanged()));
        // Removed: the same.
        let large = first_reading();
        std::fs::remove_file(&path).unwrap();
        assert!(changed(&large.unchanged()));
    }

    fn isa(n: u32) -> String {
        format!("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240301*1200*^*00501*{n:09}*1*P*:~\n")
    }

    /// Whatever the interchange holds, the outline is decided as the interchange read whole:
    /// the same answer for every group and set, the same acknowledgment codes and values.
    #[test]
    fn an_outline_is_decided_as_its_interchange_read_whole() {
        let long = "L".repeat(1_100);
        let mut odd = isa(7);
        odd += &format!("GS*PO*{long}*X12GATE*20240301*1200*71*X*005010~\n");
        for i in 1..=12 {
            odd += &format!("ST*850*{i:04}~\nBEG*00*SA*PO-{i}**20240301~\nPO1*1*{i}*EA*1.00**VN*X{i}~\nCTT*1~\nSE*5*{i:04}~\n");
        }
        // A set without SE, a set with an ST02 past any limit, a GS without its GE.
        odd += "ST*850*0013~\nBEG*00*SA*PO-13**20240301~\n";
        let longer = "\u{e9}".repeat(1_100);
        odd += &format!("ST*850*{longer}~\nBEG*00*SA*PO-14**20240301~\nSE*3*{longer}~\n");
        odd += "GS*OR*ACME*X12GATE*20240301*1200*72*X*005010~\n";
        for i in 1..=4 {
            odd += &format!("ST*816*{i:04}~\nBHT*0001*00*R{i}*20240301~\nN1*BY*A*92*0{i}~\nHL*1**A~\nN1*ST*S*92*S{i}~\nSE*6*{i:04}~\n");
        }
        odd += "GE*4*72~\nTA1*000000500*240301*1100*A*000~\nIEA*2*000000007~\n";
        // Only acknowledgments (never answered): a group of 997s, then a TA1 after it; and
        // no group at all, strays then a TA1 (nothing to cut at: one part).
        let mut acks = isa(8) + "GS*FA*ACME*X12GATE*20240301*1200*74*X*005010~\n";
        for i in 1..=40 {
            acks += &format!("ST*997*{i:04}~\nAK1*PO*{i}~\nAK9*A*1*1*1~\nSE*4*{i:04}~\n");
        }
        acks += "GE*40*74~\nTA1*000000500*240301*1100*A*000~\nIEA*1*000000008~\n";
        let strays = isa(10)
            + &"ST*1~\n".repeat(100)
            + "TA1*000000500*240301*1100*A*000~\nIEA*0*000000010~\n";
        for (input, name, cut) in [
            (&odd, "odd", true),
            (&acks, "acknowledgments only", true),
            (&strays, "strays and a TA1", false),
        ] {
            for window in [200, 450, 1_000, 100_000] {
                let (want, got, parts) = both(input, window, Limits::default());
                let cut = cut && window < input.len();
                assert!(!cut || parts > 1, "{name}, window {window}: {parts}");
                assert_eq!(got, want, "{name}, window {window}");
            }
        }
        // Sets without SE make an outline longer than its interchange: the interchange's
        // limit is not the outline's.
        let mut tiny = isa(9) + "GS*PO*ACME*X12GATE*20240301*1200*73*X*005010~\n";
        tiny += &"ST*1~\n".repeat(600);
        tiny += "GE*600*73~\nIEA*1*000000009~\n";
        let limits = Limits {
            max_interchange_bytes: tiny.len() as u64 + 10,
            ..Limits::default()
        };
        let (want, got, _) = both(&tiny, 300, limits);
        assert_eq!(got, want);
        assert_eq!(got.accepted_sets[0].len(), 600);
    }
}
