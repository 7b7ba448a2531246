//! Reading an interchange in parts: an interchange larger than a piece of the file is given
//! out as several [`Part`]s, each cut where a transaction set begins, so that memory is a
//! piece and not the interchange. Everything the reader knows about parts is here: which
//! part an interchange is, what the next part needs of the ones before ([`Inside`]), how a
//! part opens ([`Opening`]), and where the reader cuts one. The rest of the reader sees a
//! part as an interchange whose input ended.

use memchr::memmem;

use super::{
    build, ends_in, starts_a_segment, Builder, Interchange, Interchanges, ReadError, ReadErrorKind,
};
use crate::isa::parse_isa;
use crate::{Delimiters, Isa, Segment, Segments};

/// Which part of its interchange an [`Interchange`] is (private to the reader: callers ask
/// the interchange, e.g. [`Interchange::is_first_part`], [`Interchange::group_index`]). A file read in parts
/// ([`Interchanges::in_parts`]) gives an interchange larger than a piece as several, each
/// cut where a transaction set begins, so that memory is a piece and not the interchange;
/// every other reading gives each interchange as its one part.
///
/// A part holds the ISA (copied, with the open group's GS, from where the interchange
/// began), and the groups, sets and segments of its own bytes; its indexes are its own, and
/// [`Part::group`] and [`Part::set`] say what the interchange counts them as. A part that is
/// not the last has no IEA and ends as if its input did (`InterchangeEnd::EndOfInput`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    /// It holds the ISA, and the ISB and ISE if any: it is the interchange's first.
    pub(crate) first: bool,
    /// The interchange ends in it.
    pub(crate) last: bool,
    /// Groups the interchange opened in earlier parts.
    pub(crate) groups_before: usize,
    /// Its first group was opened in an earlier part, which read `sets_before` of its sets.
    pub(crate) continued: bool,
    /// Sets of the continued group read in earlier parts.
    pub(crate) sets_before: usize,
    /// Its last group goes on in the next part (its GE, if any, is there).
    pub(crate) continues: bool,
}

impl Part {
    /// An interchange read whole.
    pub(crate) const WHOLE: Part = Part {
        first: true,
        last: true,
        groups_before: 0,
        continued: false,
        sets_before: 0,
        continues: false,
    };

    /// The interchange's index of this part's group `gi`.
    pub(crate) fn group(&self, gi: usize) -> usize {
        (self.groups_before + gi).saturating_sub(usize::from(self.continued))
    }

    /// The interchange's index of set `si` of this part's group `gi` (in its group).
    pub(crate) fn set(&self, gi: usize, si: usize) -> usize {
        if gi == 0 && self.continued {
            self.sets_before + si
        } else {
            si
        }
    }

    /// Whether this part's group `gi` (of `groups`) is closed in it: its GE, or its missing
    /// GE, is this part's to judge.
    pub(crate) fn closes(&self, gi: usize, groups: usize) -> bool {
        !(self.continues && gi + 1 == groups)
    }

    /// Whether this part's group `gi` was opened in it: its GS is this part's to judge.
    pub(crate) fn opens(&self, gi: usize) -> bool {
        !(self.continued && gi == 0)
    }
}

/// Where an interchange read in parts stands between two of them: what the next part needs
/// of what came before. The reader keeps the bytes of the ISA (with the line ending after
/// it) and of the open group's GS, in that order, as the next piece's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inside {
    /// Where the ISA begins in the file, and how many bytes the head keeps of it.
    pub isa: (usize, usize),
    /// The open group's GS: where it begins in the file, its length (terminator excluded)
    /// and its ordinal.
    pub gs: Option<(usize, usize, u32)>,
    /// The ordinal of the next part's first segment.
    pub(super) ordinal: u32,
    /// Groups opened so far, and sets read so far of the open one.
    pub(super) groups: usize,
    pub(super) sets: usize,
    /// Strays kept so far (an interchange keeps `STRAY_KEPT` in all). Nothing else is
    /// carried: a part that goes on begins with a set, so an ISB or ISE can no longer come.
    pub(super) stray_kept: usize,
}

/// What the segments a build reads come after: an ISA read at `start`, or an interchange
/// read in parts, whose ISA and open group's GS the reader kept (see [`Inside`]).
#[derive(Clone, Copy)]
pub(super) enum Opening<'a> {
    Isa(Isa<'a>),
    Inside {
        isa: Isa<'a>,
        suffix: &'a [u8],
        gs: Option<Segment<'a>>,
        inside: Inside,
    },
}

impl<'a> Opening<'a> {
    /// The opening of the part that goes on from `inside`, read from the reader's `head`;
    /// `None` if the head does not hold what `inside` says it keeps.
    pub(super) fn inside(head: &'a [u8], inside: Inside) -> Option<Opening<'a>> {
        let isa_bytes = head.get(..inside.isa.1)?;
        let mut isa = parse_isa(isa_bytes, 0).ok()?;
        isa.segment.offset = inside.isa.0;
        let suffix = isa_bytes.get(isa.len..)?;
        let gs = match inside.gs {
            Some((at, len, ordinal)) => {
                let raw = head.get(inside.isa.1..inside.isa.1 + len)?;
                let mut gs = Segments::new(raw, 0, raw.len(), ordinal, isa.delimiters).next()?;
                // It was read whole where it stood: the set the part was cut at follows it.
                gs.offset = at;
                gs.terminated = true;
                Some(gs)
            }
            None => None,
        };
        Some(Opening::Inside {
            isa,
            suffix,
            gs,
            inside,
        })
    }

    pub(super) fn isa(&self) -> Isa<'a> {
        match self {
            Opening::Isa(isa) | Opening::Inside { isa, .. } => *isa,
        }
    }
}

impl<'a> Interchanges<'a> {
    /// The next part of the interchange this piece begins inside.
    pub(super) fn next_part(&mut self) -> Option<Result<Interchange<'a>, ReadError>> {
        if self.stopped {
            return None;
        }
        let inside = self.inside?;
        let Some(opening) = Opening::inside(self.head, inside) else {
            // Only a reader that lost what it was to keep gets here: the rest of the
            // interchange is skipped as after an unreadable ISA, and said so.
            self.inside = None;
            self.resync_from(0);
            self.skip_on(0);
            return Some(Err(ReadError {
                kind: ReadErrorKind::IsaUnreadable,
                offset: inside.isa.0,
                message: "the interchange's ISA was not kept while it was read in parts; \
                          the rest of it was skipped"
                    .into(),
            }));
        };
        if !self.last && !ends_in(self.input, opening.isa().delimiters) {
            return self.part_or_more(0, opening);
        }
        let built = build(
            self.input,
            0,
            self.input.len(),
            opening,
            self.limits,
            self.base,
        );
        if !self.last && !self.complete(&built.ic, built.next) {
            return self.part_or_more(0, opening);
        }
        self.inside = None;
        if self.too_long(inside.isa.0, built.next) {
            return Some(Err(self.too_large_at(inside.isa.0)));
        }
        self.pos = built.next;
        Some(Ok(built.ic))
    }

    /// An interchange from `start` does not end in this piece: in parts, its part up to the
    /// last set that begins in the piece is given out, when it is the piece's first (else
    /// the next piece begins with it); otherwise, or without such a set, a larger piece.
    pub(super) fn part_or_more(
        &mut self,
        start: usize,
        opening: Opening<'a>,
    ) -> Option<Result<Interchange<'a>, ReadError>> {
        // Past the ISA, whose fields may hold the terminator; a part that goes on begins
        // with the set it was cut at.
        let from = match opening {
            Opening::Isa(isa) => start + isa.len,
            Opening::Inside { .. } => start + 1,
        };
        let cut = (self.split && !self.given)
            .then(|| self.last_set_start(from, opening.isa().delimiters))
            .flatten();
        let Some(cut) = cut else {
            return match opening {
                Opening::Inside { inside, .. } => self.more_or_too_large_at(start, inside.isa.0),
                Opening::Isa(_) => self.more_or_too_large(start),
            };
        };
        let built = build(self.input, start, cut, opening, self.limits, self.base);
        let (mut ic, after) = (built.ic, built.after);
        if self.too_long(after.isa.0, cut) {
            self.inside = None;
            return Some(Err(self.too_large_at(after.isa.0)));
        }
        ic.part.last = false;
        ic.part.continues = after.gs.is_some();
        self.inside = Some(after);
        self.pos = cut;
        self.stopped = true;
        Some(Ok(ic))
    }

    /// Where the last `ST` segment at or after `from` begins: right after a segment
    /// terminator (line endings and blanks aside), followed by the element separator.
    fn last_set_start(&self, from: usize, delimiters: Delimiters) -> Option<usize> {
        let needle = [b'S', b'T', delimiters.element];
        let mut end = self.input.len();
        loop {
            let at = from + memmem::rfind(self.input.get(from..end)?, &needle)?;
            if starts_a_segment(self.input, at, delimiters) {
                return Some(at);
            }
            end = at + needle.len() - 1;
        }
    }
}

impl<'a> Builder<'a> {
    /// What the part after this one needs to know (see [`Inside`]), once the reading ended
    /// and its open set was closed, before its open group is.
    pub(super) fn inside_after(
        &self,
        isa: &Isa<'a>,
        suffix: &[u8],
        before: Option<(Inside, bool)>,
    ) -> Inside {
        let (groups_before, sets_before, continued) = match before {
            Some((inside, continued)) => (inside.groups, inside.sets, continued),
            None => (0, 0, false),
        };
        let open = self.open_group.as_ref().map(|g| (g.gs, g.sets.len()));
        let opened = (self.groups.len() + usize::from(open.is_some()))
            .saturating_sub(usize::from(continued));
        Inside {
            isa: (isa.segment.offset, isa.len + suffix.len()),
            gs: open.map(|(gs, _)| (gs.offset, gs.raw.len(), gs.ordinal)),
            ordinal: self.count.saturating_add(1),
            groups: groups_before + opened,
            sets: match open {
                Some((_, sets)) if continued && self.groups.is_empty() => sets_before + sets,
                Some((_, sets)) => sets,
                None => 0,
            },
            stray_kept: self.kept_before + self.stray.len(),
        }
    }
}
