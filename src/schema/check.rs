//! Walking a transaction set against its definition: where each segment stands (which loop,
//! which iteration), which segments are missing, misplaced or repeated too often (AK304), and
//! what is wrong with their elements (AK403).
//!
//! The walk keeps one frame per open loop: the child it last matched and how often. A segment
//! is looked for from there forward, innermost loop first, then in the enclosing loops (which
//! ends the inner iterations); a loop's trigger seen again starts its next iteration. This is
//! the usual reading of X12 tables and needs no backtracking: the standard's sets are
//! unambiguous read this way.

use chrono::NaiveDate;
use memchr::memchr;

use crate::finding::{Ak403, Finding, Rule, SchemaDetail};
use crate::x12::{Position, Segment, TransactionSet};

use super::definition::{
    DataType, ElementDef, Kind, Req, SegmentDef, SetDef, Shortcut, Simple, Syntax,
};
use super::hierarchy::{ChildCode, Hierarchy, LevelAt, Problem};
use super::SyntaxKind;

/// The tag of HL, whose segments the walk also reads into the set's tree.
fn hl_tag() -> u32 {
    super::definition::tag(b"HL")
}

/// Segment errors kept per set; past this the set is rejected anyway and the 997 stays small.
const MAX_SEGMENT_ERRORS: usize = 100;
/// AK4s per AK3, as X12 allows.
const MAX_ELEMENT_ERRORS: usize = 99;
/// AK404 carries at most 99 characters.
const MAX_BAD_VALUE: usize = 99;

/// Where a body segment was placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Its segment node in [`SetDef::nodes`].
    pub node: usize,
    /// How many loop frames (the root included) stay open from the previous segment.
    pub kept: usize,
    /// The loop node this segment opened a new iteration of, when it is a trigger.
    pub opened: Option<usize>,
}

/// The result of walking one set.
#[derive(Debug, Default)]
pub struct Walk {
    pub findings: Vec<Finding>,
    /// One entry per body segment: where it stands, or `None` when it could not be placed.
    pub places: Vec<Option<Place>>,
}

#[derive(Debug, Clone, Copy)]
struct Frame {
    /// The loop node.
    node: usize,
    /// The child last matched (index into the loop's children).
    at: Option<usize>,
    /// Uses of that child: segment repetitions or loop iterations.
    uses: u32,
    /// Children matched in this iteration (bit i for child i < 64): a guide's positions
    /// that share a place in the standard's table may come in any order, so one passed
    /// over may have been seen already.
    seen: u64,
}

/// A child index's bit in [`Frame::seen`] (none past 64: such children count as unseen).
fn seen_bit(child: usize) -> u64 {
    u32::try_from(child)
        .ok()
        .and_then(|c| 1u64.checked_shl(c))
        .unwrap_or(0)
}

/// Whether every value `segment` holds where `node` narrows a list is on that list (an
/// absent value is another check's business).
fn fits_lists(node: &super::definition::Node, segment: &Segment<'_>) -> bool {
    node.narrowed.iter().all(|q| {
        let value = segment
            .elements()
            .nth(q.element.saturating_sub(1))
            .map(|e| match q.component {
                None => e.value,
                Some(c) => e.components().nth(c.saturating_sub(1)).unwrap_or_default(),
            })
            .unwrap_or_default();
        value.is_empty() || q.codes.contains(value)
    })
}

/// Whether `segment` carries one of the qualifier's codes where the qualifier looks.
fn qualifies(q: &super::definition::Qualifier, segment: &Segment<'_>) -> bool {
    let Some(element) = segment.elements().nth(q.element.saturating_sub(1)) else {
        return false;
    };
    let value = match q.component {
        None => element.value,
        Some(c) => element
            .components()
            .nth(c.saturating_sub(1))
            .unwrap_or_default(),
    };
    q.codes.contains(value)
}

/// Where the walk reports: the set's indexes and its ST's ordinal.
#[derive(Clone, Copy)]
struct SetAt {
    group: usize,
    set: usize,
    st_ordinal: u32,
}

struct Walker<'d, 'a> {
    def: &'d SetDef,
    at: SetAt,
    frames: Vec<Frame>,
    findings: Vec<Finding>,
    /// Segment errors so far (the cap counts these, not element findings).
    segment_errors: usize,
    /// The open loops' first segments, for 999 CTX and AK303: (frame depth, loop node, segment).
    contexts: Vec<(usize, usize, Segment<'a>)>,
    /// Byte classes under this interchange's delimiters.
    table: [u8; 256],
    /// The current segment's id and elements, as the scan cut them.
    cells: Vec<Cell>,
    /// The set's HL levels so far.
    hierarchy: Hierarchy,
}

/// What a finding keeps of a context's value (CTX01-2 holds at most 35 characters): every
/// finding of a set carries it, so a long value would be copied thousands of times.
const CONTEXT_BYTES: usize = 35;

fn context_value(value: &[u8]) -> String {
    String::from_utf8_lossy(value.get(..CONTEXT_BYTES).unwrap_or(value)).into_owned()
}

/// Walks `set` (group `group`, set `set` of its interchange) against `def`. With `places`
/// false the placements are not kept (validation only).
pub fn walk(def: &SetDef, ts: &TransactionSet<'_>, group: usize, set: usize, places: bool) -> Walk {
    let mut w = Walker {
        def,
        at: SetAt {
            group,
            set,
            st_ordinal: ts.st.ordinal,
        },
        frames: vec![Frame {
            node: 0,
            at: None,
            uses: 0,
            seen: 0,
        }],
        findings: Vec::new(),
        segment_errors: 0,
        contexts: Vec::new(),
        table: byte_table(ts.st.delimiters),
        cells: Vec::with_capacity(32),
        hierarchy: Hierarchy::default(),
    };
    let mut placed = Vec::new();
    // Past the cap the walk goes on placing segments (for the structured form and for
    // honest "missing" answers at the end) but records nothing more.
    match Cutter::of(ts) {
        Some(mut cutter) => {
            while let Some(segment) = cutter.next(&w.table, &mut w.cells) {
                let place = w.segment(&segment);
                if places {
                    placed.push(place);
                }
            }
        }
        None => {
            for segment in ts.body.segments() {
                scan(&w.table, segment.raw, &mut w.cells);
                let place = w.segment(&segment);
                if places {
                    placed.push(place);
                }
            }
        }
    }
    // SE closes every open loop: what they still required is missing.
    let end = match &ts.se {
        Some(se) => (se.ordinal, se.offset),
        None => (
            ts.st
                .ordinal
                .saturating_add(ts.body.count)
                .saturating_add(1),
            ts.st.offset,
        ),
    };
    while !w.frames.is_empty() {
        w.close_frame(end);
    }
    w.child_codes(ts);
    Walk {
        findings: w.findings,
        places: placed,
    }
}

impl<'a> Walker<'_, 'a> {
    fn set_segment(&self, ordinal: u32) -> u32 {
        ordinal.saturating_sub(self.at.st_ordinal).saturating_add(1)
    }

    fn trigger_id(&self, node: usize) -> &[u8] {
        self.def
            .segment_of(node)
            .map_or(&[][..], |s| s.id.as_bytes())
    }

    /// The child of `frame`'s loop at or after its position that `segment` (of `tag`)
    /// starts: the first of its id whose qualifier, if it has one, the segment carries.
    fn find_in(&self, frame: &Frame, tag: u32, segment: &Segment<'_>) -> Option<usize> {
        let node = &self.def.nodes[frame.node];
        if node.tag_filter & super::definition::tag_bit(tag) == 0 {
            return None;
        }
        // A loop's trigger (child 0) seen again starts the loop's next iteration, which the
        // enclosing frame handles; the root has no trigger. Within a guide's run of
        // qualified positions sharing one id, the search starts at the run's first.
        let first = if frame.node == 0 { 0 } else { 1 };
        let at = frame.at.unwrap_or(0);
        let from = node.group_start.get(at).copied().unwrap_or(at).max(first);
        let tags = node.child_tags.get(from..)?;
        let mut candidates = tags.iter().enumerate().filter_map(|(i, t)| {
            if *t != tag {
                return None;
            }
            let ci = i + from;
            let child = node.children.get(ci).and_then(|c| self.def.nodes.get(*c))?;
            match &child.qualifier {
                Some(q) if !qualifies(q, segment) => None,
                _ => Some((ci, child)),
            }
        });
        let (first_ci, first_child) = candidates.next()?;
        // Without a qualifier (every standard table) the first is the place, as always.
        if first_child.qualifier.is_none() || fits_lists(first_child, segment) {
            return Some(first_ci);
        }
        // A qualifier that fits several positions: the first whose lists hold the segment's
        // values, else the first (whose lists then report the value).
        Some(
            candidates
                .find(|(_, child)| child.qualifier.is_some() && fits_lists(child, segment))
                .map_or(first_ci, |(ci, _)| ci),
        )
    }

    fn segment(&mut self, segment: &Segment<'a>) -> Option<Place> {
        let tag = super::definition::tag(segment.id);
        let found = self.place_of(tag, segment);
        let Some((depth, ci)) = found else {
            self.unplaced(segment);
            if tag == hl_tag() {
                self.level(segment, None, None, false);
            }
            return None;
        };
        let here = (segment.ordinal, segment.offset);
        // Leaving inner loops: what they still required is missing.
        while self.frames.len() > depth + 1 {
            self.close_frame(here);
        }
        self.keep_contexts(depth);
        let frame = self.frames[depth];
        let child = self.def.nodes[frame.node].children[ci];
        let repeat = frame.at == Some(ci);
        let node = &self.def.nodes[frame.node];
        let from = frame.at.map_or(0, |a| a + 1);
        if node.next_mandatory.get(from).is_some_and(|m| *m < ci) {
            self.missing_after(frame, Some(ci), here);
        }
        // A position of a guide's run met again after another of the run: at least its
        // second use (the exact count is not kept across the interleaving).
        let uses = if repeat {
            frame.uses.saturating_add(1)
        } else if frame.seen & seen_bit(ci) != 0 {
            2
        } else {
            1
        };
        self.frames[depth] = Frame {
            node: frame.node,
            at: Some(ci),
            uses,
            seen: frame.seen | seen_bit(ci),
        };
        let node = &self.def.nodes[child];
        let over = uses > node.max;
        let (segment_node, opened) = if node.is_loop() {
            let trigger = node.children[0];
            self.frames.push(Frame {
                node: child,
                at: Some(0),
                uses: 1,
                seen: 1,
            });
            (trigger, Some(child))
        } else {
            (child, None)
        };
        if over {
            let (rule, what) = if opened.is_some() {
                (Rule::LoopOverMaximum, "loop")
            } else {
                (Rule::SegmentOverMaximumUse, "segment")
            };
            let message = format!(
                "{} {what} occurs {uses} times, more than the {} the definition allows",
                segment.id_shown(),
                node.max
            );
            self.segment_finding(rule, segment, message);
        } else if let Some(seg_def) = self.def.segment_of(segment_node) {
            if let Some(loop_node) = opened {
                // Its first element is read only if an error needs the context.
                self.contexts
                    .push((self.frames.len() - 1, loop_node, *segment));
            }
            self.elements(segment, seg_def);
        }
        if tag == hl_tag() {
            self.placed_level(segment, opened);
        }
        Some(Place {
            node: segment_node,
            kept: depth + 1,
            opened,
        })
    }

    /// The frame and child `segment` (of `tag`) is placed at: the innermost open loop
    /// that has a place for it.
    fn place_of(&self, tag: u32, segment: &Segment<'a>) -> Option<(usize, usize)> {
        let mut candidates = (0..self.frames.len()).rev().filter_map(|depth| {
            self.find_in(&self.frames[depth], tag, segment)
                .map(|ci| (depth, ci))
        });
        let first = candidates.next();
        // A guide's level that may stand under more than one level (the 278's patient event
        // under the subscriber or the dependent) stands under the one its HL02 names, when
        // an open level further out is that one.
        let (Some((depth, _)), true) = (first, tag == hl_tag()) else {
            return first;
        };
        match segment.element(2) {
            Some(hl02)
                if !hl02.is_empty() && self.hl_parent_at(depth).is_some_and(|p| p != hl02) =>
            {
                candidates
                    .find(|(d, _)| self.hl_parent_at(*d) == Some(hl02))
                    .or(first)
            }
            _ => first,
        }
    }

    /// An HL the walk placed, read into the tree with the level a guide nests it in (the
    /// innermost open HL loop around the loop it opened).
    fn placed_level(&mut self, segment: &Segment<'a>, opened: Option<usize>) {
        // The loop it opened is the innermost frame; the level around it, further out.
        let enclosing = opened
            .and_then(|_| self.frames.len().checked_sub(2))
            .and_then(|around| self.hl_level_at(around));
        self.level(segment, opened, enclosing, true);
    }

    /// The innermost open HL level (its loop node and HL segment) at frame `depth` or
    /// further out: the parent of a level placed in that frame.
    fn hl_level_at(&self, depth: usize) -> Option<(usize, Segment<'a>)> {
        let hl = hl_tag();
        self.contexts
            .iter()
            .rev()
            .find(|(d, node, _)| *d <= depth && self.def.nodes[*node].tag == hl)
            .map(|(_, node, s)| (*node, *s))
    }

    /// HL01 of [`Walker::hl_level_at`].
    fn hl_parent_at(&self, depth: usize) -> Option<&'a [u8]> {
        self.hl_level_at(depth).and_then(|(_, s)| s.element(1))
    }

    /// Reads an HL into the set's tree: its id, its parent (and, in a guide that nests its
    /// levels, whether that parent is the level `enclosing` it), reported on HL01/HL02.
    fn level(
        &mut self,
        segment: &Segment<'a>,
        opened: Option<usize>,
        enclosing: Option<(usize, Segment<'a>)>,
        placed: bool,
    ) {
        let value = |n| segment.element(n).unwrap_or_default();
        let (hl01, hl02) = (value(1), value(2));
        let at = LevelAt {
            ordinal: segment.ordinal,
            offset: segment.offset,
            node: opened,
            placed,
        };
        let shown = |v: &[u8]| crate::text::shown(v);
        let mut parent_unknown = false;
        for problem in self.hierarchy.level(hl01, hl02, value(4), at) {
            parent_unknown |= matches!(problem, Problem::ParentIsSelf | Problem::ParentUnknown);
            let (rule, element, message) = match problem {
                Problem::IdRepeated { earlier } => (
                    Rule::HlIdInvalid,
                    1,
                    format!(
                        "HL01 \"{}\" repeats the id of the level at segment {earlier}: each level's id is unique in its set",
                        shown(hl01)
                    ),
                ),
                Problem::IdNotIncreasing { before } if self.def.is_guide() => (
                    Rule::HlIdInvalid,
                    1,
                    format!(
                        "HL01 \"{}\" is not greater than the HL01 before it (\"{before}\"): the guide numbers levels in the order they are sent",
                        shown(hl01)
                    ),
                ),
                Problem::IdNotIncreasing { before } => (
                    Rule::HlIdOrder,
                    1,
                    format!(
                        "HL01 \"{}\" is not greater than the HL01 before it (\"{before}\"): ids are usually numbered in the order sent (noted; not sent back: X12 asks them to be unique only)",
                        shown(hl01)
                    ),
                ),
                Problem::ParentIsSelf => (
                    Rule::HlParentUnknown,
                    2,
                    format!("HL02 \"{}\" names the level itself as its parent", shown(hl02)),
                ),
                Problem::ParentUnknown => (
                    Rule::HlParentUnknown,
                    2,
                    format!(
                        "HL02 \"{}\" names no level sent before it: a parent comes before its children",
                        shown(hl02)
                    ),
                ),
            };
            self.hl_finding(segment, rule, element, message);
        }
        // A parent already reported unknown is not reported again as the wrong one.
        let Some((node, parent)) = enclosing.filter(|_| !parent_unknown) else {
            return;
        };
        // An empty HL02 is the element check's (`+HL02` where the guide requires it).
        let expected = parent.element(1).unwrap_or_default();
        if expected.is_empty() || hl02.is_empty() || hl02 == expected {
            return;
        }
        let (this, outer) = (
            opened.map_or("", |n| self.def.nodes[n].id.as_str()),
            self.def.nodes[node].id.as_str(),
        );
        let message = format!(
            "HL02 \"{}\" is not \"{}\", the HL01 of the {outer} level this {this} level stands in",
            shown(hl02),
            shown(expected)
        );
        self.hl_finding(segment, Rule::HlParentMismatch, 2, message);
    }

    /// The levels whose HL04 the rest of the set proved wrong, reported on their HL04.
    fn child_codes(&mut self, ts: &TransactionSet<'_>) {
        let wrong = std::mem::take(&mut self.hierarchy).finish();
        if wrong.is_empty() {
            return;
        }
        // The HLs are read again, in one pass: the tree keeps a few numbers a level, and
        // they come in the order of the set.
        let mut wrong = wrong.into_iter().peekable();
        for segment in ts.body.segments() {
            let Some((at, code)) = wrong.next_if(|(at, _)| at.offset == segment.offset) else {
                if wrong.peek().is_none() {
                    break;
                }
                continue;
            };
            let hl01 = crate::text::shown(segment.element(1).unwrap_or_default());
            let (rule, message) = match code {
                ChildCode::SaysChildrenHasNone if self.guide_fixes_children(at.node) => continue,
                ChildCode::SaysChildrenHasNone => (
                    Rule::HlChildrenNone,
                    format!("HL04 \"1\" says level \"{hl01}\" has children, but no HL names it as its parent (noted; not sent back)"),
                ),
                ChildCode::SaysNoneHasChild { child } => (
                    Rule::HlChildCode,
                    format!("HL04 \"0\" says level \"{hl01}\" has no children, but the HL at segment {child} names it as its parent"),
                ),
            };
            let loop_id = at.node.map(|n| self.def.nodes[n].id.clone());
            // Found at SE, reported where its HL stands among the set's findings: an
            // acknowledgment lists segments in order, one AK3 each.
            if let Some(f) = self.hl_finding_in(&segment, rule, 4, message, loop_id) {
                let at = self
                    .findings
                    .iter()
                    .position(|g| g.position.segment > segment.ordinal)
                    .unwrap_or(self.findings.len());
                self.findings.insert(at, f);
            }
        }
    }

    /// Whether the guide allows HL04 `1` only at the level `node` opened: its own choice
    /// for a level that may stand alone (X279A1's 2000B in a 271 refusing the inquiry).
    fn guide_fixes_children(&self, node: Option<usize>) -> bool {
        let trigger = node
            .and_then(|n| self.def.nodes[n].children.first())
            .and_then(|t| self.def.nodes.get(*t));
        trigger.is_some_and(|t| {
            t.narrowed
                .iter()
                .any(|q| q.element == 4 && q.component.is_none() && !q.codes.contains(b"0"))
        })
    }

    fn hl_finding(&mut self, segment: &Segment<'_>, rule: Rule, element: usize, message: String) {
        let loop_id = self.loop_id();
        let f = self.hl_finding_in(segment, rule, element, message, loop_id);
        self.findings.extend(f);
    }

    /// One finding on element `element` of an HL, as an element error of its segment (AK3
    /// 8 with an AK4), counted towards the cap as a segment error (none past it).
    fn hl_finding_in(
        &mut self,
        segment: &Segment<'_>,
        rule: Rule,
        element: usize,
        message: String,
        loop_id: Option<String>,
    ) -> Option<Finding> {
        self.segment_errors += 1;
        if self.segment_errors > MAX_SEGMENT_ERRORS {
            return None;
        }
        const REFERENCES: [u32; 4] = [628, 734, 735, 736];
        let value = segment.element(element).unwrap_or_default();
        // An element not sent (HL04) stands at its segment: `element_offset` says so.
        let position = Position {
            byte: segment.element_offset(element),
            segment: segment.ordinal,
            set_segment: Some(self.set_segment(segment.ordinal)),
            element: u16::try_from(element).ok(),
            component: None,
        };
        let detail = SchemaDetail {
            loop_id,
            bounded_loop: self.bounded_loop(),
            reference: REFERENCES.get(element.saturating_sub(1)).copied(),
            repetition: None,
            bad_value: (!value.is_empty()).then(|| context_value(value)),
            context: self.context(),
            element_optional: element != 1,
            guide: self.def.is_guide(),
        };
        Some(
            Finding::new(rule, position, "HL", message)
                .in_set(self.at.group, self.at.set)
                .with_detail(detail),
        )
    }

    /// Ends the innermost open loop iteration (the root, at SE): its missing mandatory
    /// children are reported in its own context, which then closes with it.
    fn close_frame(&mut self, here: (u32, usize)) {
        let depth = self.frames.len().saturating_sub(1);
        self.keep_contexts(depth);
        if let Some(frame) = self.frames.pop() {
            self.missing_after(frame, None, here);
        }
        self.keep_contexts(depth.saturating_sub(1));
    }

    /// Drops the contexts of loops deeper than frame `depth`.
    fn keep_contexts(&mut self, depth: usize) {
        while self.contexts.last().is_some_and(|(d, ..)| *d > depth) {
            self.contexts.pop();
        }
    }

    /// Mandatory children of `frame`'s loop that were passed over: those after its position
    /// and before `until` (the end of the loop when `None`).
    fn missing_after(&mut self, frame: Frame, until: Option<usize>, here: (u32, usize)) {
        let node = &self.def.nodes[frame.node];
        let from = frame.at.map_or(0, |a| a + 1);
        let to = until.unwrap_or(node.children.len());
        if node.next_mandatory.get(from).is_none_or(|m| *m >= to) {
            return;
        }
        let nodes = &self.def.nodes;
        let skipped = node.children.get(from..to).unwrap_or_default();
        let missing: Vec<usize> = skipped
            .iter()
            .enumerate()
            .filter(|(i, c)| nodes[**c].req == Req::M && frame.seen & seen_bit(from + i) == 0)
            .map(|(_, c)| *c)
            .collect();
        for child in missing {
            let id = String::from_utf8_lossy(self.trigger_id(child)).into_owned();
            let what = if self.def.nodes[child].is_loop() {
                format!(
                    "mandatory loop {} (its {id} segment)",
                    self.def.nodes[child].id
                )
            } else {
                format!("mandatory segment {id}")
            };
            let position = Position {
                byte: here.1,
                segment: here.0,
                set_segment: Some(self.set_segment(here.0)),
                ..Position::default()
            };
            let loop_id = (frame.node != 0).then(|| node.id.clone());
            self.push_segment_error(
                Rule::SegmentMissing,
                id,
                position,
                loop_id,
                format!("{what} is missing before this point"),
            );
        }
    }

    /// A segment that fits nowhere from the current position: why (AK304 1, 6, 7 or 2).
    fn unplaced(&mut self, segment: &Segment<'_>) {
        let id = segment.id;
        let name = segment.id_shown();
        let nodes = &self.def.nodes;
        let fits = |p: &usize| {
            nodes
                .get(*p)
                .and_then(|n| n.qualifier.as_ref())
                .is_none_or(|q| qualifies(q, segment))
        };
        let open_here = |p: &usize| {
            let parent = nodes.get(*p).map_or(usize::MAX, |n| n.parent);
            self.frames.iter().any(|f| f.node == parent)
        };
        // The innermost open loop that has positions of this id: when they all have
        // qualifiers and the segment's fits none of them, the qualifier is what is wrong.
        let unqualified = self
            .frames
            .iter()
            .rev()
            .map(|f| {
                self.def
                    .places(id)
                    .iter()
                    .filter(|p| nodes.get(**p).is_some_and(|n| n.parent == f.node))
                    .collect::<Vec<_>>()
            })
            .find(|here| !here.is_empty())
            .filter(|here| !here.iter().any(|p| fits(p)))
            .and_then(|here| {
                here.iter()
                    .find_map(|p| nodes.get(**p).and_then(|n| n.qualifier.as_ref()))
            });
        let (rule, message) = if !self.def.knows(id) {
            (
                Rule::SegmentUnrecognized,
                format!("{name} is not a segment of X12 {}", self.def.version),
            )
        } else if self.def.places(id).is_empty() {
            (
                Rule::SegmentNotInSet,
                format!(
                    "{name} is not part of transaction set {} ({})",
                    self.def.id, self.def.version
                ),
            )
        } else if let Some(q) = unqualified {
            let value = segment
                .elements()
                .nth(q.element.saturating_sub(1))
                .map(|e| match q.component {
                    None => e.value,
                    Some(c) => e.components().nth(c.saturating_sub(1)).unwrap_or_default(),
                })
                .unwrap_or_default();
            (
                Rule::SegmentUnexpected,
                format!(
                    "{name} is unexpected here: its {} \"{}\" is the qualifier of none of its positions in the open loops",
                    q.shown,
                    crate::text::shown(value)
                ),
            )
        } else if self.def.places(id).iter().any(|p| fits(p) && open_here(p)) {
            (
                Rule::SegmentOutOfSequence,
                format!("{name} is out of sequence: the definition places it earlier"),
            )
        } else {
            (
                Rule::SegmentUnexpected,
                format!("{name} is unexpected here: it belongs to a loop not open at this point"),
            )
        };
        self.segment_finding(rule, segment, message);
    }

    /// The outermost open loop's business unit (the line item, the HL level): `PO101` and
    /// its value (its first [`CONTEXT_BYTES`]).
    /// A guide that declares its business unit (`context = "2300"`: the claim) names that
    /// loop's, and only inside it: inside any loop of that id (the 837's 2300 stands under
    /// the subscriber and under the patient).
    fn context(&self) -> Option<(String, String)> {
        self.contexts.iter().find_map(|(_, node, segment)| {
            if self
                .def
                .context
                .is_some_and(|c| self.def.nodes[c].id != self.def.nodes[*node].id)
            {
                return None;
            }
            let value = segment.element(1).filter(|v| !v.is_empty())?;
            // A guide's loop id (2300) is no segment: the unit is its trigger's element.
            let unit = if self.def.is_guide() {
                String::from_utf8_lossy(self.trigger_id(*node)).into_owned()
            } else {
                self.def.nodes[*node].id.clone()
            };
            Some((format!("{unit}01"), context_value(value)))
        })
    }

    /// LS01 of the innermost open bounded (LS/LE) loop: what AK303 names.
    fn bounded_loop(&self) -> Option<String> {
        let ls = super::definition::tag(b"LS");
        self.contexts
            .iter()
            .rev()
            .find(|(_, node, _)| self.def.nodes[*node].tag == ls)
            .and_then(|(_, _, segment)| segment.element(1))
            .map(context_value)
    }

    fn loop_id(&self) -> Option<String> {
        self.frames
            .last()
            .filter(|f| f.node != 0)
            .map(|f| self.def.nodes[f.node].id.clone())
    }

    fn segment_finding(&mut self, rule: Rule, s: &Segment<'_>, message: String) {
        let position = Position {
            byte: s.offset,
            segment: s.ordinal,
            set_segment: Some(self.set_segment(s.ordinal)),
            ..Position::default()
        };
        let loop_id = self.loop_id();
        self.push_segment_error(rule, s.id_str(), position, loop_id, message);
    }

    fn push_segment_error(
        &mut self,
        rule: Rule,
        segment_id: String,
        position: Position,
        loop_id: Option<String>,
        message: String,
    ) {
        self.segment_errors += 1;
        if self.segment_errors > MAX_SEGMENT_ERRORS {
            return;
        }
        let detail = SchemaDetail {
            loop_id,
            bounded_loop: self.bounded_loop(),
            reference: None,
            repetition: None,
            bad_value: None,
            context: self.context(),
            element_optional: false,
            guide: self.def.is_guide(),
        };
        let f = Finding::new(rule, position, segment_id, message)
            .in_set(self.at.group, self.at.set)
            .with_detail(detail);
        self.findings.push(f);
    }

    // The hot loop of schema validation, with the scan ([`Cutter::next`]) that cut the
    // segment into `cells`: each element is cleared by its few-byte shortcut when it can be,
    // else checked in full (what comes after the last element, once per segment, is
    // `segment_end`).
    fn elements<'s>(&mut self, segment: &Segment<'s>, def: &SegmentDef) {
        if self.segment_errors >= MAX_SEGMENT_ERRORS {
            return;
        }
        let mut errors = BadElements::default();
        let mut present: u64 = 0;
        let mut extra: Option<(usize, &'s [u8])> = None;
        let raw = segment.raw;
        // Cell 0 is the id; element n ends where cell n does.
        let mut start = self.cells.first().map_or(0, |c| c.end + 1);
        let elements = self.cells.get(1..).unwrap_or_default();
        for (i, cell) in elements.iter().enumerate() {
            let position = i + 1;
            let value = raw.get(start..cell.end).unwrap_or_default();
            start = cell.end + 1;
            let Some(fast) = def.fast.get(i) else {
                if extra.is_none() && !value.is_empty() {
                    extra = Some((position, value));
                }
                continue;
            };
            if value.is_empty() {
                if !fast.mandatory {
                    continue;
                }
            } else {
                if position <= 64 {
                    present |= 1 << i;
                }
                // A number's length is its digits: with nothing but digits, its length.
                let forbidden = match fast.plan {
                    Shortcut::Text => CONTROL | SEPARATOR,
                    Shortcut::Digits => !DIGIT,
                    Shortcut::Full => u8::MAX,
                };
                if cell.acc & forbidden == 0
                    && value.len() >= usize::from(fast.min)
                    && value.len() <= usize::from(fast.max)
                {
                    continue;
                }
            }
            if let Some(edef) = def.elements.get(i) {
                let class = Class {
                    acc: cell.acc,
                    digits: digits(&self.table, value),
                };
                element(&mut errors, segment, position, value, edef, class);
            }
        }
        segment_end(&mut errors, def, elements.len(), extra, present);
        if !errors.list.is_empty() {
            self.report_elements(segment, def, errors);
        }
    }

    /// The element errors of one segment as findings, each message naming its place; the
    /// segment counts as one segment error towards the cap.
    fn report_elements(
        &mut self,
        segment: &Segment<'_>,
        def: &SegmentDef,
        mut errors: BadElements,
    ) {
        errors.list.truncate(MAX_ELEMENT_ERRORS);
        let loop_id = self.loop_id();
        let bounded_loop = self.bounded_loop();
        let context = self.context();
        for e in errors.list {
            let edef = def.elements.get(usize::from(e.position).saturating_sub(1));
            let (rule, what) = (e.code.rule(), e.code.description());
            // The element (or component) the error is about, for its name and limits.
            let target = match (edef, e.component) {
                (Some(d), Some(c)) => match &d.kind {
                    Kind::Composite { components, .. } => {
                        components.get(usize::from(c).saturating_sub(1))
                    }
                    Kind::Simple(_) => Some(d),
                },
                (d, _) => d,
            };
            let name = target.map_or("", |d| d.name.as_str());
            // The message names its place too: it is also the reason a report carries.
            let mut place = format!("{}{:02}", def.id, e.position);
            if let Some(c) = e.component {
                place.push_str(&format!("-{c}"));
            }
            let mut message = if name.is_empty() {
                format!("{place}: {what}")
            } else {
                format!("{place} ({name}): {what}")
            };
            match (target.map(|d| &d.kind), &e.bad_value) {
                (Some(Kind::Simple(simple)), Some(value))
                    if matches!(e.code, Ak403::TooShort | Ak403::TooLong) =>
                {
                    let (n, unit) = match simple.data_type {
                        DataType::N(_) | DataType::R => {
                            (value.bytes().filter(u8::is_ascii_digit).count(), "digits")
                        }
                        _ => (value.chars().count(), "characters"),
                    };
                    let unit = if n == 1 {
                        unit.trim_end_matches('s')
                    } else {
                        unit
                    };
                    message.push_str(&format!(
                        " ({n} {unit}; {}-{} allowed)",
                        simple.min, simple.max
                    ));
                }
                (Some(_), Some(value)) if e.code == Ak403::InvalidCode => {
                    let list = target.map_or("", |d| d.reference.as_str());
                    message.push_str(&format!(
                        ": {value:?} is not in the code list of element {list}"
                    ));
                }
                _ if e.code != Ak403::MandatoryMissing => {
                    message.push_str(": ");
                    message.push_str(&e.why);
                }
                _ => {}
            }
            let element_no = usize::from(e.position);
            let mut position = Position {
                byte: segment.element_offset(element_no),
                segment: segment.ordinal,
                set_segment: Some(self.set_segment(segment.ordinal)),
                element: Some(e.position),
                component: e.component,
            };
            if element_no > segment.element_count() {
                position.byte = segment.offset;
            }
            let detail = SchemaDetail {
                loop_id: loop_id.clone(),
                bounded_loop: bounded_loop.clone(),
                reference: e.reference,
                repetition: e.repetition,
                bad_value: e.bad_value,
                context: context.clone(),
                element_optional: edef.is_some_and(|d| d.req == Req::O),
                guide: self.def.is_guide(),
            };
            // The code of the release read (a guide's GS08): "not used" has a code of its
            // own from 005010 on only.
            let f = Finding::new(rule, position, def.id.clone(), message)
                .in_set(self.at.group, self.at.set)
                .in_release(crate::finding::release(self.def.version.as_bytes()))
                .with_detail(detail);
            self.findings.push(f);
        }
        self.segment_errors += 1;
    }
}

/// Byte classes, for the one-pass element scan.
const DIGIT: u8 = 1;
const CONTROL: u8 = 2;
const DOT: u8 = 4;
const MINUS: u8 = 8;
/// The interchange's component or repetition separator.
const SEPARATOR: u8 = 16;
/// The interchange's element separator.
const ELEMENT: u8 = 32;
/// Any other byte: letters, spaces, punctuation.
const OTHER: u8 = 64;
/// The interchange's segment terminator.
const END: u8 = 128;

/// The class of every byte value, delimiters aside.
const CLASSES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = match b {
            0x30..=0x39 => DIGIT,
            0x00..=0x1f | 0x7f => CONTROL,
            0x2e => DOT,
            0x2d => MINUS,
            _ => OTHER,
        };
        b += 1;
    }
    t
};

/// The classes of every byte value, with this interchange's delimiters marked.
fn byte_table(d: crate::x12::Delimiters) -> [u8; 256] {
    let mut t = CLASSES;
    t[usize::from(d.component)] = SEPARATOR;
    if let Some(r) = d.repetition {
        t[usize::from(r)] = SEPARATOR;
    }
    t[usize::from(d.element)] = ELEMENT;
    t[usize::from(d.segment)] = END;
    t
}

/// How many of `value`'s bytes are digits (off the hot path: the scan does not count them).
fn digits(table: &[u8; 256], value: &[u8]) -> usize {
    value
        .iter()
        .filter(|b| table[usize::from(**b)] & DIGIT != 0)
        .count()
}

/// Where one piece of a segment (its id, or an element) ends in the segment's bytes, and
/// the union of its bytes' classes.
#[derive(Clone, Copy)]
struct Cell {
    end: usize,
    acc: u8,
}

/// Cuts `raw` (a segment without its terminator) into cells: the id, then each element.
fn scan(table: &[u8; 256], raw: &[u8], cells: &mut Vec<Cell>) {
    cells.clear();
    let mut acc = 0;
    for (i, b) in raw.iter().enumerate() {
        let t = table[usize::from(*b)];
        if t & ELEMENT == 0 {
            acc |= t;
            continue;
        }
        cells.push(Cell { end: i, acc });
        acc = 0;
    }
    cells.push(Cell {
        end: raw.len(),
        acc,
    });
}

/// A set's body cut into segments the way [`crate::x12::Body::segments`] cuts it, in the
/// same pass that classifies each byte and cuts the elements (a memchr per segment and a
/// second pass over its bytes cost more than the segment's walk). Not for a terminator
/// that is a line feed (a CR before it belongs to the line ending): those bodies are cut
/// by `Body::segments` and scanned after.
struct Cutter<'a> {
    bytes: &'a [u8],
    /// The next byte to read.
    pos: usize,
    /// Where `bytes` begin in the file.
    base: usize,
    ordinal: u32,
    delimiters: crate::x12::Delimiters,
}

impl<'a> Cutter<'a> {
    fn of(ts: &TransactionSet<'a>) -> Option<Cutter<'a>> {
        let delimiters = ts.st.delimiters;
        if delimiters.segment == b'\n' {
            return None;
        }
        let (bytes, base, ordinal) = ts.body.bytes();
        Some(Cutter {
            bytes,
            pos: 0,
            base,
            ordinal,
            delimiters,
        })
    }

    /// The next segment, its cells in `cells`.
    #[inline]
    fn next(&mut self, table: &[u8; 256], cells: &mut Vec<Cell>) -> Option<Segment<'a>> {
        // The line endings and blanks `Segments` skips before a segment.
        let element = self.delimiters.element;
        while let Some(b) = self.bytes.get(self.pos) {
            if !matches!(b, b'\r' | b'\n') && !((*b == b' ' || *b == b'\t') && *b != element) {
                break;
            }
            self.pos += 1;
        }
        let start = self.pos;
        let window = self.bytes.get(start..).filter(|w| !w.is_empty())?;
        cells.clear();
        let mut acc = 0;
        let mut length = window.len();
        for (i, b) in window.iter().enumerate() {
            let t = table[usize::from(*b)];
            if t & (ELEMENT | END) == 0 {
                acc |= t;
                continue;
            }
            cells.push(Cell { end: i, acc });
            acc = 0;
            if t & END != 0 {
                length = i;
                break;
            }
        }
        let terminated = length < window.len();
        if !terminated {
            cells.push(Cell { end: length, acc });
        }
        self.pos = start + length + usize::from(terminated);
        let raw = window.get(..length).unwrap_or_default();
        let id_len = cells.first().map_or(length, |c| c.end);
        let segment = Segment {
            id: raw.get(..id_len).unwrap_or_default(),
            raw,
            offset: self.base + start,
            ordinal: self.ordinal,
            terminated,
            delimiters: self.delimiters,
        };
        self.ordinal = self.ordinal.saturating_add(1);
        Some(segment)
    }
}

/// What the scan learned about one element's bytes: the union of their classes, and how
/// many were digits.
#[derive(Clone, Copy)]
struct Class {
    acc: u8,
    digits: usize,
}

/// What only the whole segment shows, after its last element: mandatory elements after the
/// last one sent, an element beyond the definition's (`extra`), the relational conditions.
// Out of the hot loop of `Walker::elements`: once per segment, not per byte.
#[inline]
fn segment_end(
    errors: &mut BadElements,
    def: &SegmentDef,
    seen: usize,
    extra: Option<(usize, &[u8])>,
    present: u64,
) {
    // Mandatory elements after the last one sent are missing too.
    let missing_at_end = def
        .elements
        .get(seen..def.last_mandatory)
        .unwrap_or_default();
    for (i, edef) in missing_at_end.iter().enumerate() {
        let i = seen + i;
        if edef.req == Req::M {
            errors.push(
                At::element(i + 1, edef.reference_number()),
                Ak403::MandatoryMissing,
                "mandatory element missing",
                b"",
            );
        }
    }
    if let Some((position, value)) = extra {
        errors.push(
            At::element(position, None),
            Ak403::TooMany,
            "more elements than the definition's",
            value,
        );
    }
    if def.quick.violated(present) {
        for s in &def.syntax {
            syntax_note(errors, s, present, None, &def.elements);
        }
    }
}

/// Checks element `position` of `segment` (its bytes `value`, classified as `class`): the
/// full check, for values the shortcut did not clear.
#[cold]
// One case per kind of value (missing, not used, one value, repeated or with components);
// the one-value case, the commonest, is [`one_value`].
fn element(
    errors: &mut BadElements,
    segment: &Segment<'_>,
    position: usize,
    value: &[u8],
    edef: &ElementDef,
    class: Class,
) {
    if value.is_empty() {
        if edef.req == Req::M {
            errors.push(
                At::element(position, edef.reference_number()),
                Ak403::MandatoryMissing,
                "mandatory element missing",
                b"",
            );
        }
        return;
    }
    if edef.req == Req::N {
        // The guide's "Not Used" element, sent: one finding for the whole element, however
        // many repetitions or components it carries.
        errors.push(
            At::element(position, edef.reference_number()),
            Ak403::NotUsed,
            "the implementation guide does not use this element here",
            value,
        );
        return;
    }
    if class.acc & SEPARATOR == 0 {
        // The common case: one value, no components, no repetitions.
        one_value(errors, position, value, edef, class);
        return;
    }
    let d = segment.delimiters;
    let element = crate::x12::Element {
        value,
        delimiters: d,
    };
    let repeats = match d.repetition {
        Some(r) if memchr(r, value).is_some() => {
            if edef.repeat <= 1 {
                errors.push(
                    At::element(position, edef.reference_number()),
                    Ak403::InvalidCharacter,
                    "the repetition separator in an element that does not repeat",
                    value,
                );
                return;
            }
            true
        }
        _ => false,
    };
    for (r, rep) in element.repetitions().enumerate() {
        let repetition = repeats.then(|| u16::try_from(r + 1).unwrap_or(u16::MAX));
        if r >= edef.repeat as usize {
            errors.push(
                At::element(position, edef.reference_number()).repeated(repetition),
                Ak403::InvalidCharacter,
                "more repetitions than the element allows",
                rep.value,
            );
            break;
        }
        match &edef.kind {
            Kind::Simple(simple) => {
                if memchr(d.component, rep.value).is_some() {
                    errors.push(
                        At::element(position, edef.reference_number()).repeated(repetition),
                        Ak403::InvalidCharacter,
                        "the component separator in a simple element",
                        rep.value,
                    );
                } else if let Some((code, why)) = check_value(simple, rep.value) {
                    errors.push(
                        At::element(position, edef.reference_number()).repeated(repetition),
                        code,
                        why,
                        rep.value,
                    );
                }
            }
            Kind::Composite { components, syntax } => {
                composite(
                    errors,
                    position,
                    repetition,
                    components,
                    syntax,
                    rep.components(),
                );
            }
        }
    }
}

/// [`element`]'s common case: a value with no separator in it (no components, no
/// repetitions), its bytes classified as `class` as they were scanned.
fn one_value(
    errors: &mut BadElements,
    position: usize,
    value: &[u8],
    edef: &ElementDef,
    class: Class,
) {
    match &edef.kind {
        Kind::Simple(simple) => {
            let length = if simple.plan == Shortcut::Digits {
                class.digits
            } else {
                value.len()
            };
            let clear = match simple.plan {
                Shortcut::Text => class.acc & CONTROL == 0,
                Shortcut::Digits => class.acc == DIGIT,
                Shortcut::Full => false,
            };
            if clear && (usize::from(simple.min)..=usize::from(simple.max)).contains(&length) {
                return;
            }
            if let Some((code, why)) = check_scanned(simple, value, class) {
                errors.push(
                    At::element(position, edef.reference_number()),
                    code,
                    why,
                    value,
                );
            }
        }
        Kind::Composite { components, syntax } => {
            composite(
                errors,
                position,
                None,
                components,
                syntax,
                std::iter::once(value),
            );
        }
    }
}

struct BadElement {
    position: u16,
    component: Option<u16>,
    repetition: Option<u16>,
    reference: Option<u32>,
    code: Ak403,
    why: String,
    bad_value: Option<String>,
}

#[derive(Default)]
struct BadElements {
    list: Vec<BadElement>,
}

/// Where an element error is, as AK4 (IK4) says it: the element's position, the component
/// and the repetition within it where it has them, and the dictionary's reference number.
#[derive(Clone, Copy)]
struct At {
    position: usize,
    component: Option<usize>,
    repetition: Option<u16>,
    reference: Option<u32>,
}

impl At {
    fn element(position: usize, reference: Option<u32>) -> At {
        At {
            position,
            component: None,
            repetition: None,
            reference,
        }
    }

    fn repeated(self, repetition: Option<u16>) -> At {
        At { repetition, ..self }
    }
}

impl BadElements {
    fn push(&mut self, at: At, code: Ak403, why: &str, value: &[u8]) {
        let At {
            position,
            component,
            repetition,
            reference,
        } = at;
        // AK404 is not a copy of a missing value, nor of an invalid character.
        let bad_value = (!value.is_empty() && code != Ak403::InvalidCharacter).then(|| {
            let text = String::from_utf8_lossy(value);
            text.chars().take(MAX_BAD_VALUE).collect()
        });
        self.list.push(BadElement {
            position: u16::try_from(position).unwrap_or(u16::MAX),
            component: component.map(|c| u16::try_from(c).unwrap_or(u16::MAX)),
            repetition,
            reference,
            code,
            why: why.to_string(),
            bad_value,
        });
    }
}

fn composite<'a>(
    errors: &mut BadElements,
    position: usize,
    repetition: Option<u16>,
    components: &[ElementDef],
    syntax: &[Syntax],
    values: impl Iterator<Item = &'a [u8]>,
) {
    let mut present: u64 = 0;
    let mut seen = 0;
    // Component `i + 1` of this element (and repetition).
    let at = |i: usize, reference: Option<u32>| At {
        position,
        component: Some(i + 1),
        repetition,
        reference,
    };
    for (i, value) in values.enumerate() {
        seen = i + 1;
        let Some(cdef) = components.get(i) else {
            errors.push(
                at(i, None),
                Ak403::TooMany,
                "more components than the composite's",
                value,
            );
            break;
        };
        if value.is_empty() {
            if cdef.req == Req::M {
                errors.push(
                    at(i, cdef.reference_number()),
                    Ak403::MandatoryMissing,
                    "mandatory component missing",
                    b"",
                );
            }
            continue;
        }
        if i < 64 {
            present |= 1 << i;
        }
        if cdef.req == Req::N {
            errors.push(
                at(i, cdef.reference_number()),
                Ak403::NotUsed,
                "the implementation guide does not use this component here",
                value,
            );
            continue;
        }
        if let Kind::Simple(simple) = &cdef.kind {
            if let Some((code, why)) = check_value(simple, value) {
                errors.push(at(i, cdef.reference_number()), code, why, value);
            }
        }
    }
    for (i, cdef) in components.iter().enumerate().skip(seen) {
        if cdef.req == Req::M {
            errors.push(
                at(i, cdef.reference_number()),
                Ak403::MandatoryMissing,
                "mandatory component missing",
                b"",
            );
        }
    }
    for s in syntax {
        syntax_note(errors, s, present, Some(position), components);
    }
}

/// Checks one relational condition over the present elements (bit n-1 for position n).
/// Within a composite, `composite` is the element's position and the positions are
/// components.
fn syntax_note(
    errors: &mut BadElements,
    note: &Syntax,
    present: u64,
    composite: Option<usize>,
    defs: &[ElementDef],
) {
    if !note.violated(present) {
        return;
    }
    let is = |p: u16| (1..=64).contains(&p) && present & (1 << (p - 1)) != 0;
    let reference = |p: u16| {
        defs.get(usize::from(p).saturating_sub(1))
            .and_then(ElementDef::reference_number)
    };
    let ps = &note.positions;
    let count = ps.iter().filter(|p| is(**p)).count();
    let mut report = |p: u16, code: Ak403, why: String| {
        let (position, component) = match composite {
            Some(e) => (e, Some(usize::from(p))),
            None => (usize::from(p), None),
        };
        errors.push(
            At {
                position,
                component,
                repetition: None,
                reference: reference(p),
            },
            code,
            &why,
            b"",
        );
    };
    let list = || {
        ps.iter()
            .map(|p| format!("{p:02}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let first = ps.first().copied().unwrap_or(0);
    match note.kind {
        SyntaxKind::Paired if count > 0 && count < ps.len() => {
            for p in ps.iter().filter(|p| !is(**p)) {
                report(
                    *p,
                    Ak403::ConditionalMissing,
                    format!("elements {} are used together or not at all", list()),
                );
            }
        }
        SyntaxKind::Required if count == 0 => {
            report(
                first,
                Ak403::ConditionalMissing,
                format!("at least one of elements {} is required", list()),
            );
        }
        SyntaxKind::Exclusion if count > 1 => {
            for p in ps.iter().filter(|p| is(**p)).skip(1) {
                report(
                    *p,
                    Ak403::ExclusionViolated,
                    format!("only one of elements {} may be used", list()),
                );
            }
        }
        SyntaxKind::Conditional if is(first) => {
            for p in ps.iter().skip(1).filter(|p| !is(**p)) {
                report(
                    *p,
                    Ak403::ConditionalMissing,
                    format!("element {first:02} is present, so {} are required", list()),
                );
            }
        }
        SyntaxKind::ListConditional if is(first) && count == 1 => {
            let second = ps.get(1).copied().unwrap_or(first);
            report(second, Ak403::ConditionalMissing, format!("element {first:02} is present, so at least one of the others of {} is required", list()));
        }
        _ => {}
    }
}

/// A present simple value against its type, length and code list: the AK403 code and why.
pub(crate) fn check_value(def: &Simple, v: &[u8]) -> Option<(Ak403, &'static str)> {
    // Here delimiters are plain characters: the caller has cut the value already.
    let class = v.iter().fold(Class { acc: 0, digits: 0 }, |c, b| {
        let t = CLASSES[usize::from(*b)];
        Class {
            acc: c.acc | t,
            digits: c.digits + usize::from(t & DIGIT),
        }
    });
    check_scanned(def, v, class)
}

/// [`check_value`] for a value already classified by the scan.
#[inline]
fn check_scanned(def: &Simple, v: &[u8], class: Class) -> Option<(Ak403, &'static str)> {
    let only_digits = class.acc == DIGIT;
    match def.data_type {
        DataType::Dt if !only_digits || !valid_date(v) => {
            return Some((Ak403::InvalidDate, "not a valid date (CCYYMMDD or YYMMDD)"));
        }
        DataType::Tm if !only_digits || !valid_time(v) => {
            return Some((
                Ak403::InvalidTime,
                "not a valid time (HHMM, HHMMSS or HHMMSSd..d)",
            ));
        }
        _ => {}
    }
    // A number's length counts its digits, so its form is checked first.
    let (chars_ok, length) = match def.data_type {
        DataType::N(_) => (
            class.digits > 0
                && class.acc & !(DIGIT | MINUS) == 0
                && (class.acc & MINUS == 0 || minus_first_only(v)),
            class.digits,
        ),
        DataType::R => (
            class.digits > 0
                && class.acc & !(DIGIT | MINUS | DOT) == 0
                && (class.acc & MINUS == 0 || minus_first_only(v))
                && (class.acc & DOT == 0 || v.iter().filter(|b| **b == b'.').count() == 1),
            class.digits,
        ),
        DataType::B => (true, v.len()),
        _ => (class.acc & CONTROL == 0, v.len()),
    };
    if !chars_ok {
        return Some((
            Ak403::InvalidCharacter,
            "holds a character its type does not allow",
        ));
    }
    if length < usize::from(def.min) {
        return Some((Ak403::TooShort, "shorter than the minimum length"));
    }
    if length > usize::from(def.max) {
        return Some((Ak403::TooLong, "longer than the maximum length"));
    }
    if let Some(codes) = &def.codes {
        if !codes.contains(v) {
            return Some((Ak403::InvalidCode, "not a code of this element's list"));
        }
    }
    None
}

fn minus_first_only(v: &[u8]) -> bool {
    v.iter().rposition(|b| *b == b'-') == Some(0)
}

/// The two digits at `at` as a number; 99 when they are not two digits.
fn two(v: &[u8], at: usize) -> u32 {
    match v.get(at..at + 2) {
        Some([a, b]) if a.is_ascii_digit() && b.is_ascii_digit() => {
            u32::from(a - b'0') * 10 + u32::from(b - b'0')
        }
        _ => 99,
    }
}

fn valid_date(v: &[u8]) -> bool {
    let (year, rest) = match v.len() {
        8 => (two(v, 0) * 100 + two(v, 2), 4),
        // YYMMDD: the century only matters for 29 February; 2000 and 1900 differ, take 20YY.
        6 => (2000 + two(v, 0), 2),
        _ => return false,
    };
    i32::try_from(year)
        .ok()
        .and_then(|y| NaiveDate::from_ymd_opt(y, two(v, rest), two(v, rest + 2)))
        .is_some()
}

fn valid_time(v: &[u8]) -> bool {
    matches!(v.len(), 4 | 6 | 7 | 8)
        && two(v, 0) < 24
        && two(v, 2) < 60
        && (v.len() < 6 || two(v, 4) < 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Schemas;
    use crate::x12::{Interchanges, Limits};

    use crate::schema::sample::{DICT, SET};

    fn walked(dict: &str, body: &str) -> Walk {
        walked_in(
            &[("004010/segments.toml", dict), ("004010/850.toml", SET)],
            "004010",
            body,
        )
    }

    /// `body` in an 850 under GS08 `gs08`, walked against the definition `files` give it.
    fn walked_in(files: &[(&str, &str)], gs08: &str, body: &str) -> Walk {
        let schemas = Schemas::load(files).unwrap();
        let count = body.matches('~').count() + 2;
        let x = format!(
            "ISA*00*          *00*          *ZZ*A              *ZZ*B              *240101*1200*U*00401*000000001*0*P*:~\
GS*PO*A*B*20240101*1200*1*X*{gs08}~ST*850*0001~{body}SE*{count}*0001~GE*1*1~IEA*1*000000001~"
        );
        let ic = Interchanges::new(x.as_bytes(), Limits::default())
            .next()
            .unwrap()
            .unwrap();
        let def = schemas.find(gs08.as_bytes(), b"850").unwrap();
        walk(def, &ic.groups[0].sets.get(0).unwrap(), 0, 0, true)
    }

    /// The findings of a body as `SEGMENT@set-position:code[/element[-component]]`.
    fn check_with(dict: &str, body: &str) -> Vec<String> {
        walked(dict, body)
            .findings
            .iter()
            .map(|f| {
                let mut s = format!(
                    "{}@{}:{}",
                    f.segment_id,
                    f.position.set_segment.unwrap(),
                    f.code.unwrap().value()
                );
                if let Some(e) = f.position.element {
                    s.push_str(&format!("/{e}"));
                }
                if let Some(c) = f.position.component {
                    s.push_str(&format!("-{c}"));
                }
                s
            })
            .collect()
    }

    fn check(body: &str) -> Vec<String> {
        check_with(DICT, body)
    }

    const GOOD: &str =
        "BEG*00*PO1*20240101~REF*DP*1~N1*ST*X~N3*A~N1*BT*Y~PO1*1*2*EA*3~PID*F~PO1*2~CTT*2~";

    #[test]
    fn a_valid_body_has_no_findings_and_every_segment_a_place() {
        assert_eq!(check(GOOD), Vec::<String>::new());
        let w = walked(DICT, GOOD);
        assert!(w.places.iter().all(Option::is_some));
        let opened: Vec<bool> = w
            .places
            .iter()
            .map(|p| p.unwrap().opened.is_some())
            .collect();
        assert_eq!(
            opened,
            [false, false, true, false, true, true, false, true, false]
        );
        // CTT closes the PO1 loop: only the root stays open.
        assert_eq!(w.places[8].unwrap().kept, 1);
        assert_eq!(w.places[3].unwrap().kept, 2);
    }

    #[test]
    fn segment_errors_carry_their_ak304_codes() {
        // 1: unknown to the version; 6: known but not in this set.
        assert_eq!(check(&GOOD.replace("REF*DP*1~", "ZZZ*1~")), ["ZZZ@3:1"]);
        assert_eq!(check(&GOOD.replace("REF*DP*1~", "TD5*1~")), ["TD5@3:6"]);
        // 2: PID belongs to the PO1 loop, not open in the heading.
        assert_eq!(check(&GOOD.replace("REF*DP*1~", "PID*F~")), ["PID@3:2"]);
        // 3: BEG missing, reported where the next segment stands; the PO1 loop missing.
        assert_eq!(
            check(&GOOD.replace("BEG*00*PO1*20240101~", "")),
            ["BEG@2:3"]
        );
        assert_eq!(check("BEG*00*1~CTT*0~"), ["PO1@3:3"]);
        // 4: a third N1 loop; 5: a third REF.
        assert_eq!(
            check(&GOOD.replace("N1*BT*Y~", "N1*BT*Y~N1*SF*Z~")),
            ["N1@7:4"]
        );
        assert_eq!(
            check(&GOOD.replace("REF*DP*1~", "REF*DP*1~REF*DP*2~REF*DP*3~")),
            ["REF@5:5"]
        );
        // 7: BEG again after the heading moved on.
        assert_eq!(check(&GOOD.replace("N3*A~", "N3*A~BEG*00*2~")), ["BEG@6:7"]);
        // CTT is mandatory at the end: reported at SE.
        assert_eq!(check(&GOOD.replace("CTT*2~", "")), ["CTT@10:3"]);
    }

    #[test]
    fn element_errors_carry_their_ak403_codes_and_positions() {
        let cases = [
            ("BEG*00*PO1", "BEG**PO1", "BEG@2:1/1"),
            ("BEG*00*PO1", "BEG*01*PO1", "BEG@2:7/1"),
            ("*20240101~", "*20240132~", "BEG@2:8/3"),
            ("*20240101~", "*20240101*2460~", "BEG@2:9/4"),
            ("BEG*00*PO1", "BEG*00*PO1234567890", "BEG@2:5/2"),
            ("N1*ST*X~", "N1*S*X~", "N1@4:4/1"),
            ("N3*A~", "N3*A*B~", "N3@5:3/2"),
            ("CTT*2~", "CTT*2X~", "CTT@10:6/1"),
            // R0203 (required): neither REF02 nor REF03.
            ("REF*DP*1~", "REF*DP~", "REF@3:2/2"),
            // P0304 (paired): N103 without N104.
            ("N1*ST*X~", "N1*ST*X*92~", "N1@4:2/4"),
            // C0402 (conditional): a price without a quantity.
            ("PO1*2~", "PO1*2***3~", "PO1@9:2/2"),
            // Composite: the mandatory unit code missing, a bad exponent.
            ("*EA*3~", "*:1*3~", "PO1@7:1/3-1"),
            ("*EA*3~", "*EA:X*3~", "PO1@7:6/3-2"),
        ];
        for (from, to, expected) in cases {
            assert_eq!(check(&GOOD.replace(from, to)), [expected], "{to}");
        }
    }

    #[test]
    fn mandatory_elements_after_the_last_one_sent_are_missing() {
        assert_eq!(
            check(&GOOD.replace("BEG*00*PO1*20240101~", "BEG*00~")),
            ["BEG@2:1/2"]
        );
        assert_eq!(check(&GOOD.replace("CTT*2~", "CTT~")), ["CTT@10:1/1"]);
        // An extra element is reported where the data is, not at the first empty one.
        assert_eq!(check(&GOOD.replace("N3*A~", "N3*A***X~")), ["N3@5:3/4"]);
    }

    #[test]
    fn past_the_cap_nothing_more_is_recorded_and_nothing_is_invented() {
        let body = format!("BEG*00*1~{}PO1*1~CTT*1~", "ZZZ*1~".repeat(150));
        let w = walked(DICT, &body);
        assert_eq!(w.findings.len(), MAX_SEGMENT_ERRORS);
        assert!(w.findings.iter().all(|f| f.segment_id == "ZZZ"));
        // The walk went on: PO1 and CTT found their places.
        assert!(w.places.last().unwrap().is_some());
    }

    #[test]
    fn a_context_is_the_outermost_open_loop_and_closes_with_it() {
        let context = |body: &str| {
            walked(DICT, body)
                .findings
                .iter()
                .map(|f| f.detail.as_ref().unwrap().context.clone())
                .collect::<Vec<_>>()
        };
        let in_line = GOOD.replace("PID*F~", "PID*FF~");
        assert_eq!(context(&in_line), [Some(("PO101".into(), "1".into()))]);
        // CTT is missing at SE, at the root: no line is to blame.
        assert_eq!(context(&GOOD.replace("CTT*2~", "")), [None]);
        // A long line number is kept to what CTX01-2 can hold, whatever each finding copies.
        let long = "9".repeat(100_000);
        let in_long_line = in_line.replace("PO1*1*2", &format!("PO1*{long}*2"));
        let found = context(&in_long_line);
        assert!(!found.is_empty());
        for (_, value) in found.into_iter().flatten() {
            assert_eq!(value, "9".repeat(35));
        }
    }

    #[test]
    fn exclusion_and_list_conditions() {
        let exclusion = DICT.replace("syntax = [\"C0402\"]", "syntax = [\"E0204\"]");
        assert_eq!(check_with(&exclusion, GOOD), ["PO1@7:10/4"]);
        let list = DICT.replace("syntax = [\"C0402\"]", "syntax = [\"L010204\"]");
        assert_eq!(
            check_with(&list, &GOOD.replace("PO1*1*2*EA*3~", "PO1*1**EA~")),
            ["PO1@7:2/2", "PO1@9:2/2"]
        );
        assert_eq!(
            check_with(&list, &GOOD.replace("PO1*2~", "PO1*2***4~")),
            Vec::<String>::new()
        );
    }

    /// The findings of a body walked against the sample guide (GS08 `004010X1`), as
    /// [`check_with`] shows them, with each finding's loop.
    fn guide(body: &str) -> Vec<String> {
        guide_with(crate::schema::sample::GUIDE, body)
    }

    /// Each case: a text of [`GUIDED`], what replaces it, and the findings expected.
    fn guided(cases: &[(&str, &str, &[&str])]) {
        for (from, to, want) in cases {
            assert_eq!(
                guide(&GUIDED.replace(from, to)),
                *want,
                "{from:?} -> {to:?}"
            );
        }
    }

    /// [`guide`] with another guide file.
    fn guide_with(guide: &str, body: &str) -> Vec<String> {
        let files = [
            ("004010/segments.toml", DICT),
            ("004010/850.toml", SET),
            ("004010X1/850.toml", guide),
        ];
        assert!(Schemas::load(&files)
            .unwrap()
            .find(b"004010X1", b"850")
            .unwrap()
            .is_guide());
        walked_in(&files, "004010X1", body)
            .findings
            .iter()
            .map(|f| {
                let d = f.detail.as_ref().unwrap();
                assert!(d.guide);
                let mut s = format!(
                    "{}@{}:{}",
                    f.segment_id,
                    f.position.set_segment.unwrap(),
                    f.code.unwrap().value()
                );
                if let Some(e) = f.position.element {
                    s.push_str(&format!("/{e}"));
                }
                if let Some(c) = f.position.component {
                    s.push_str(&format!("-{c}"));
                }
                s.push_str(&format!(" in {}", d.loop_id.as_deref().unwrap_or("-")));
                if let Some((unit, value)) = &d.context {
                    s.push_str(&format!(" ctx {unit}={value}"));
                }
                s
            })
            .collect()
    }

    const GUIDED: &str =
        "BEG*00*1~REF*IA*V1~REF*DP*D1~N1*ST*X~N3*A~N1*BT*Y*92*12~PO1*1~PID*F~CTT*1~";

    #[test]
    fn a_guide_places_segments_by_their_qualifiers_in_any_order_within_one_position() {
        // Vendor before department: the guide splits one position of the table, so either
        // order is the standard's; the mandatory vendor REF is not reported missing.
        assert_eq!(guide(GUIDED), Vec::<String>::new());
        guided(&[
            ("REF*IA*V1~REF*DP*D1~", "REF*DP*D1~REF*VR*V1~", &[]),
            // A qualifier no position takes: an unexpected segment (AK304 2).
            ("REF*DP*D1~", "REF*ZZ*D1~", &["REF@4:2 in -"]),
            // The mandatory one missing, reported where the walk noticed it.
            ("REF*IA*V1~", "", &["REF@4:3 in -"]),
            // The vendor met again after the department: its second use, over its maximum.
            ("REF*DP*D1~", "REF*DP*D1~REF*VR*V2~", &["REF@5:5 in -"]),
            // The loops are told apart by their triggers' qualifiers, and named by guide ids; a
            // missing one is named by its trigger, where the walk noticed it (at PO1).
            ("N1*ST*X~N3*A~", "", &[]),
            ("N1*BT*Y*92*12~", "", &["N1@7:3 in -"]),
            ("N3*A~", "N3*A~N3*B~", &["N3@7:5 in SHIPTO"]),
            // A narrowed list at one position only: N103 is 92 in the bill-to loop.
            ("N1*BT*Y*92*12~", "N1*BT*Y*91*12~", &["N1@7:7/3 in BILLTO"]),
            // The declared business unit (the LINE loop's PO101) is the context, only inside.
            ("PID*F~", "PID*FF~", &["PID@9:5/1 in LINE ctx PO101=1"]),
        ]);
    }

    #[test]
    fn a_guide_position_requires_or_excludes_its_elements() {
        use crate::finding::Rule;
        // Not used at the vendor's position: 10 in a 004010 guide (I10, the 999's code, exists
        // from 005010 on, below)...
        guided(&[
            ("REF*IA*V1~", "REF*IA*V1*NOTE~", &["REF@3:10/3 in -"]),
            // ... the same segment at the department's position keeps the dictionary's usage.
            ("REF*DP*D1~", "REF*DP*D1*NOTE~", &[]),
            // Required at the bill-to's position: missing is a missing mandatory element (1),
            // whether the segment stops before it or leaves it empty.
            ("N1*BT*Y*92*12~", "N1*BT*Y~", &["N1@7:1/4 in BILLTO"]),
            ("N1*BT*Y*92*12~", "N1*BT*Y**~", &["N1@7:1/4 in BILLTO"]),
            // ... and the ship-to's N1 (the same segment, another position) does not need it.
            ("N1*ST*X~", "N1*ST*X*92~", &["N1@5:2/4 in SHIPTO"]),
            // A component not used: the finding names the element and the component; a
            // repetition or a value however well-formed is still one finding.
            (
                "PO1*1~",
                "PO1*1**EA:2~",
                &["PO1@8:10/3-2 in LINE ctx PO101=1"],
            ),
            ("PO1*1~", "PO1*1**EA~", &[]),
        ]);
        // A whole composite not used, and a run of elements.
        let composite = GUIDE_USAGES.replace("-PO103-2", "-PO103");
        assert_eq!(
            guide_with(&composite, &GUIDED.replace("PO1*1~", "PO1*1**EA~")),
            ["PO1@8:10/3 in LINE ctx PO101=1"]
        );
        let run = GUIDE_USAGES.replace("-PO103-2", "-PO102..04");
        assert_eq!(
            guide_with(&run, &GUIDED.replace("PO1*1~", "PO1*1*2**3~")),
            [
                "PO1@8:10/2 in LINE ctx PO101=1",
                "PO1@8:10/4 in LINE ctx PO101=1"
            ]
        );
        // The rule, and its code: the 999's from 005010 on, 10 before.
        let w = walked_in(
            &[
                ("004010/segments.toml", DICT),
                ("004010/850.toml", SET),
                ("004010X1/850.toml", GUIDE_USAGES),
            ],
            "004010X1",
            &GUIDED.replace("REF*IA*V1~", "REF*IA*V1*NOTE~"),
        );
        let f = w.findings.first().unwrap();
        assert_eq!(f.rule, Rule::ElementNotUsed);
        assert_eq!(f.code.map(|c| c.value()), Some("10"));
        assert_eq!(
            f.clone().in_release(Some(5010)).code.map(|c| c.value()),
            Some("I10")
        );
        assert!(f.message.contains("REF03"), "{}", f.message);
    }

    const GUIDE_USAGES: &str = crate::schema::sample::GUIDE;

    #[test]
    fn a_guide_is_read_for_its_gs08_and_the_release_for_any_other() {
        use crate::schema::sample::GUIDE;
        use crate::schema::Reading;
        let schemas = Schemas::load(&[
            ("004010/segments.toml", DICT),
            ("004010/850.toml", SET),
            ("004010X1/850.toml", GUIDE),
        ])
        .unwrap();
        let key = |gs08: &[u8]| match schemas.reading(gs08, b"850") {
            Reading::Own(d) | Reading::As(d) => d.name_key(),
            Reading::EnvelopeOnly => String::new(),
        };
        assert_eq!(key(b"004010X1"), "004010X1/850");
        assert_eq!(key(b"004010"), "004010/850");
        assert_eq!(key(b"004010X2"), "004010/850");
        assert_eq!(key(b"004010VICS"), "004010/850");
        assert!(schemas
            .find_key("004010X1/850")
            .is_some_and(|d| d.is_guide()));
        let def = schemas.find(b"004010X1", b"850").unwrap();
        let keys: Vec<&str> = def
            .root()
            .children
            .iter()
            .map(|c| def.nodes[*c].key.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "BEG",
                "REF",
                "REF_2",
                "SHIPTO_loop",
                "BILLTO_loop",
                "LINE_loop",
                "CTT"
            ]
        );
        assert_eq!(def.nodes[def.root().children[4]].name, "Bill To");
    }

    #[test]
    fn a_guide_line_that_cannot_be_read_names_its_line() {
        use crate::schema::sample::GUIDE;
        for (from, to, says) in [
            (
                "loop SHIPTO \"Ship To\" O 1",
                "loop SHIPTO \"Ship To\" O 1 when N101=ST",
                "line 9: a loop takes its trigger",
            ),
            (
                "N103=92",
                "N102=92",
                "line 13: N102=92: only a code (ID) element",
            ),
            (
                "N103=92",
                "REF01=92",
                "line 13: REF01=92: names another segment than N1",
            ),
            (
                "N103=92",
                "N107=92",
                "line 13: N107=92: N1 has no element 07",
            ),
            (
                "\"Bill To Name\" M",
                "\"Bill To Name M",
                "line 13: a quoted name has no closing quote",
            ),
            (
                "when N101=BT N103=92",
                "when",
                "line 13: `when` needs a qualifier",
            ),
            (
                "when N101=BT N103=92 +N104",
                "when +N104 N101=BT",
                "line 13: `when` needs a qualifier such as NM101=85 next, not \"+N104\"",
            ),
            (
                "+N104",
                "+N1004",
                "line 13: +N1004: an element position is two digits",
            ),
            ("+N104", "+N105", "line 13: +N105: N1 has no element 05"),
            (
                "+N104",
                "+REF04",
                "line 13: +REF04: names another segment than N1",
            ),
            ("+N104", "*N104", "line 13: expected `ID"),
            (
                "+N104",
                "-N101",
                "line 13: -N101: N101 is mandatory in its segment's definition (or the qualifier)",
            ),
            (
                "+N104",
                "+N104 +N104",
                "line 13: +N104: an element is given a usage twice",
            ),
            (
                "+N104",
                "+N103-1",
                "line 13: +N103-1: a simple element has no components",
            ),
            (
                "-PO103-2",
                "-PO103-3",
                "line 15: -PO103-3: the composite has no component 3",
            ),
            (
                "-PO103-2",
                "-PO104..02",
                "line 15: -PO104..02: a run of elements goes up",
            ),
            (
                "loop LINE \"Line Item\" M 3",
                "loop LINE \"Line Item\" M 3 -PO104",
                "line 14: element usages (+SEGnn, -SEGnn) belong on the trigger segment",
            ),
        ] {
            let bad = GUIDE.replace(from, to);
            assert_ne!(bad, GUIDE, "{from}");
            let e = Schemas::load(&[("004010/segments.toml", DICT), ("004010X1/850.toml", &bad)])
                .unwrap_err();
            assert!(
                e.contains("schemas/004010X1/850.toml: ") && e.contains(says),
                "{e}"
            );
        }
    }

    fn simple(data_type: DataType, min: u16, max: u16) -> Simple {
        Simple::new(data_type, min, max, None)
    }

    #[test]
    fn values_by_type() {
        let dt = simple(DataType::Dt, 8, 8);
        assert_eq!(check_value(&dt, b"20240229"), None);
        assert_eq!(
            check_value(&dt, b"20230229").map(|c| c.0.value()),
            Some("8")
        );
        assert_eq!(check_value(&dt, b"2024013").map(|c| c.0.value()), Some("8"));
        let dt6 = simple(DataType::Dt, 6, 6);
        assert_eq!(check_value(&dt6, b"240131"), None);
        let tm = simple(DataType::Tm, 4, 8);
        assert_eq!(check_value(&tm, b"2359"), None);
        assert_eq!(check_value(&tm, b"235960").map(|c| c.0.value()), Some("9"));
        assert_eq!(check_value(&tm, b"2460").map(|c| c.0.value()), Some("9"));
        let n2 = simple(DataType::N(2), 1, 5);
        assert_eq!(check_value(&n2, b"-12345"), None);
        assert_eq!(check_value(&n2, b"123456").map(|c| c.0.value()), Some("5"));
        assert_eq!(check_value(&n2, b"1.5").map(|c| c.0.value()), Some("6"));
        let r = simple(DataType::R, 1, 4);
        assert_eq!(check_value(&r, b"-12.50"), None);
        assert_eq!(check_value(&r, b"1.2.3").map(|c| c.0.value()), Some("6"));
        assert_eq!(check_value(&r, b"12345.0").map(|c| c.0.value()), Some("5"));
        let an = simple(DataType::An, 2, 3);
        assert_eq!(check_value(&an, b"A").map(|c| c.0.value()), Some("4"));
        assert_eq!(check_value(&an, b"A\x01").map(|c| c.0.value()), Some("6"));
        assert_eq!(check_value(&r, b"X").map(|c| c.0.value()), Some("6"));
        let codes = crate::schema::definition::Codes::new([&b"00"[..]].into_iter());
        let id = Simple::new(DataType::Id, 2, 2, Some(std::sync::Arc::new(codes)));
        assert_eq!(check_value(&id, b"00"), None);
        assert_eq!(check_value(&id, b"01").map(|c| c.0.value()), Some("7"));
    }
}
