//! SEF implementation guides (Foresight's Standard Exchange Format, 1.x) read into x12gate's
//! definition format: one set file per transaction set, for a guide folder that
//! `partners.toml` names with `definitions` (see `crate::guides`).
//!
//! [`parse`] reads the text into its sections; this module turns each set into the TOML of
//! `schemas/<version>/<set>.toml`, self-contained (its segments, composites and code lists are
//! declared in the file, as the guide states them), so the guide narrows the standard as the
//! partner wrote it: segments marked not used leave the structure, segments marked must-use
//! become mandatory, masks make elements mandatory or not used (`req = "N"`), the guide's
//! element lengths and maximum uses apply, and narrowed code lists replace the standard's.
//! Names (which make the structured JSON's keys) come from the built-in definitions, so a
//! partner's translation reads like everyone else's.
//!
//! Our format holds one definition per segment id and one code list per element per set; where
//! a guide says more (two masks of one composite, a code list narrowed in one place only), the
//! less strict reading is kept and a warning says so. A segment used with two masks is defined
//! by the less strict, and each structure line adds its own mask's element usages (`+SEGnn`,
//! `-SEGnn`). Nothing is dropped without a warning.

pub mod parse;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

pub use parse::{parse, Sef, SefError};
use parse::{ElemRef, Item, LoopRef, MaskEntry, SegRef, Structure};

use crate::schema::{Kind, Schemas};

/// A guide converted: its files (path in the guide folder, TOML) and what could not be kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    pub name: String,
    pub release: String,
    pub title: String,
    pub files: Vec<(String, String)>,
    pub warnings: Vec<String>,
}

/// Why a guide could not be converted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The SEF text is malformed: line, section, what.
    #[error("{0}")]
    Sef(#[from] SefError),
    /// The guide is well-formed but says something our definitions cannot hold.
    #[error("{0}")]
    Unsupported(SefError),
}

impl ImportError {
    /// `sef` or `unsupported`.
    pub fn kind(&self) -> &'static str {
        match self {
            ImportError::Sef(_) => "sef",
            ImportError::Unsupported(_) => "unsupported",
        }
    }
}

/// Names of segments, composites and elements, from the built-in definitions.
#[derive(Default)]
struct Names {
    segments: HashMap<String, String>,
    elements: HashMap<String, String>,
}

impl Names {
    fn of(builtin: &Schemas) -> Names {
        let mut n = Names::default();
        for def in builtin.all() {
            for seg in &def.segments {
                n.segments
                    .entry(seg.id.clone())
                    .or_insert_with(|| seg.name.clone());
                for e in &seg.elements {
                    n.elements
                        .entry(e.reference.clone())
                        .or_insert_with(|| e.name.clone());
                    if let Kind::Composite { components, .. } = &e.kind {
                        for c in components {
                            n.elements
                                .entry(c.reference.clone())
                                .or_insert_with(|| c.name.clone());
                        }
                    }
                }
            }
        }
        n
    }
}

/// Reads SEF `text` and converts each of its sets; `builtin` gives names, document keys and
/// the HL hierarchy of sets it defines.
pub fn import(text: &str, builtin: &Schemas) -> Result<Converted, ImportError> {
    let sef = parse(text)?;
    let names = Names::of(builtin);
    let mut warnings = sef.warnings.clone();
    let mut files = Vec::new();
    for (id, set) in &sef.sets {
        let mut conv = SetConversion {
            sef: &sef,
            set_id: id,
            names: &names,
            warnings: Vec::new(),
            used: BTreeMap::new(),
            places: BTreeMap::new(),
            lines: Vec::new(),
            written: BTreeMap::new(),
        };
        let path = format!("{}/{id}.toml", sef.release);
        let toml = conv.convert(set, builtin, true)?;
        // Compiled here as `definitions check` would, so an import never writes a folder
        // that does not load; a document key the guide's structure cannot hold is dropped.
        let toml = match compiles(&path, &toml) {
            Ok(()) => toml,
            Err(e) if e.contains("[document]") => {
                // Converted again below, warning again about all else.
                conv.warnings.clear();
                conv.warn(
                    set.line,
                    ".SETS",
                    format!("the built-in document key does not fit the guide's structure, so its documents carry none ({e})"),
                );
                let toml = conv.convert(set, builtin, false)?;
                compiles(&path, &toml).map_err(|e| conv.unsupported(set.line, ".SETS", e))?;
                toml
            }
            Err(e) => return Err(conv.unsupported(set.line, ".SETS", e)),
        };
        warnings.extend(conv.warnings);
        files.push((path, toml));
    }
    if files.is_empty() {
        return Err(ImportError::Unsupported(SefError {
            line: 1,
            section: ".SETS".into(),
            message: "the guide defines no transaction set".into(),
        }));
    }
    Ok(Converted {
        name: sef.name.clone(),
        release: sef.release.clone(),
        title: sef.title.clone(),
        files,
        warnings,
    })
}

/// Whether a converted set file compiles over the built-in definitions.
fn compiles(path: &str, toml: &str) -> Result<(), String> {
    Schemas::layered(
        crate::schema::embedded_files(),
        "(imported)",
        &[(path, toml)],
    )
    .map(|_| ())
}

/// One set of a guide on its way to TOML.
struct SetConversion<'a> {
    sef: &'a Sef,
    set_id: &'a str,
    names: &'a Names,
    warnings: Vec<String>,
    /// Each used segment id and the masks its references name (`None`: unmasked).
    used: BTreeMap<String, BTreeSet<Option<usize>>>,
    /// Segment ordinal -> segment id, for code-list locations (used segments only).
    places: BTreeMap<usize, String>,
    /// Each structure line's segment id and mask, by the marker its line ends with until
    /// its element usages are known.
    lines: Vec<(String, Option<usize>)>,
    /// Each used segment's requirement per element as its `[segments.X]` states it.
    written: BTreeMap<String, Vec<char>>,
}

impl SetConversion<'_> {
    fn warn(&mut self, line: usize, section: &str, message: String) {
        self.warnings.push(format!(
            "line {line} ({section}): set {}: {message}",
            self.set_id
        ));
    }

    fn unsupported(&self, line: usize, section: &str, message: String) -> ImportError {
        ImportError::Unsupported(SefError {
            line,
            section: section.into(),
            message: format!("set {}: {message}", self.set_id),
        })
    }

    fn convert(
        &mut self,
        set: &parse::SetStructure,
        builtin: &Schemas,
        with_document: bool,
    ) -> Result<String, ImportError> {
        self.used.clear();
        self.places.clear();
        self.lines.clear();
        self.written.clear();
        let release = &self.sef.release;
        let base = builtin.find(release.as_bytes(), self.set_id.as_bytes());
        // ST and SE are the envelope's: our structures start after ST and end before SE.
        let mut body: Vec<&Item> = set.items.iter().collect();
        if matches!(body.first(), Some(Item::Segment(s)) if s.id == "ST") {
            body.remove(0);
        }
        if matches!(body.last(), Some(Item::Segment(s)) if s.id == "SE") {
            body.pop();
        }
        let mut structure = String::new();
        let mut loops = Vec::new();
        self.items(&body, 0, set.line, &mut structure, &mut loops)?;
        if structure.trim().is_empty() {
            return Err(self.unsupported(
                set.line,
                ".SETS",
                "every segment of the set is marked not used".into(),
            ));
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# Imported from the SEF guide {:?} ({}) by `x12gate definitions import`.\n# Edit the SEF file and import it again rather than this file.",
            self.sef.name, self.sef.title
        );
        let _ = writeln!(out, "version = {}", quoted(release));
        let _ = writeln!(out, "id = {}", quoted(self.set_id));
        let name = base.map_or_else(
            || format!("Transaction Set {}", self.set_id),
            |d| d.name.clone(),
        );
        let _ = writeln!(
            out,
            "name = {}",
            quoted(&format!("{name} ({})", self.sef.name))
        );
        // The 856's hierarchy: the guide's loop that the built-in definition nests by HL.
        if let Some(h) = base.and_then(|d| d.hierarchy.and_then(|i| d.nodes.get(i))) {
            if loops.contains(&h.id) {
                let _ = writeln!(out, "hierarchy = {}", quoted(&h.id));
            }
        }
        let (segments, composites, elements) = self.segments()?;
        let structure = self.usages(structure);
        let _ = writeln!(out, "structure = \"\"\"\n{structure}\"\"\"");
        out.push_str(&segments);
        out.push_str(&composites);
        out.push_str(&self.codes(&elements));
        if let Some(doc) = base
            .and_then(|d| d.document.as_ref())
            .filter(|_| with_document)
        {
            out.push_str(&document(doc));
        }
        Ok(out)
    }

    /// The structure lines of `items` at `depth`, and the ids of the loops kept.
    fn items(
        &mut self,
        items: &[&Item],
        depth: usize,
        line: usize,
        out: &mut String,
        loops: &mut Vec<String>,
    ) -> Result<(), ImportError> {
        let indent = "  ".repeat(depth);
        for item in items {
            match item {
                Item::Segment(s) => {
                    if let Some(req) = self.segment_req(s, line) {
                        self.use_segment(s);
                        let marker = self.marker(s);
                        let _ = writeln!(out, "{indent}{} {req} {}{marker}", s.id, max_text(s.max));
                    }
                }
                Item::Loop(l) => self.a_loop(l, depth, line, out, loops)?,
            }
        }
        Ok(())
    }

    fn a_loop(
        &mut self,
        l: &LoopRef,
        depth: usize,
        line: usize,
        out: &mut String,
        loops: &mut Vec<String>,
    ) -> Result<(), ImportError> {
        let Some(Item::Segment(trigger)) = l.items.first() else {
            return Err(self.unsupported(
                line,
                ".SETS",
                "a loop that begins with a loop (our loops begin with their trigger segment)"
                    .into(),
            ));
        };
        let Some(req) = self.segment_req(trigger, line) else {
            // The trigger is not used: nothing of the loop can occur.
            let inner_used = l.items.iter().skip(1).any(|i| match i {
                Item::Segment(s) => s.attr != Some('.'),
                Item::Loop(_) => true,
            });
            if inner_used {
                self.warn(
                    line,
                    ".SETS",
                    format!(
                        "loop {} is dropped: its first segment is marked not used, so its other segments cannot occur",
                        l.id.as_deref().unwrap_or(&trigger.id)
                    ),
                );
            }
            return Ok(());
        };
        let id = l.id.clone().unwrap_or_else(|| trigger.id.clone());
        let indent = "  ".repeat(depth);
        let _ = writeln!(out, "{indent}loop {id} {req} {}", max_text(l.repeat));
        loops.push(id);
        // The trigger's own use inside each iteration: once.
        self.use_segment(trigger);
        let marker = self.marker(trigger);
        let _ = writeln!(
            out,
            "{indent}  {} M {}{marker}",
            trigger.id,
            max_text(trigger.max)
        );
        let rest: Vec<&Item> = l.items.iter().skip(1).collect();
        self.items(&rest, depth + 1, line, out, loops)
    }

    /// The requirement a reference keeps (`None`: not used, so it leaves the structure).
    fn segment_req(&mut self, s: &SegRef, line: usize) -> Option<char> {
        match s.attr {
            Some('.') => None,
            Some('!') => Some('M'),
            Some(a) => {
                if s.req != 'M' {
                    self.warn(
                        line,
                        ".SETS",
                        format!(
                            "segment {} (ordinal {}) is marked '{a}' ({}): advice for people, kept optional",
                            s.id,
                            s.ordinal,
                            attr_words(a)
                        ),
                    );
                }
                Some(if s.req == 'M' { 'M' } else { 'O' })
            }
            None => Some(if s.req == 'M' { 'M' } else { 'O' }),
        }
    }

    /// A placeholder at the end of a segment's structure line, replaced by the element
    /// usages of its own mask ([`SetConversion::usages`]).
    fn marker(&mut self, s: &SegRef) -> String {
        self.lines.push((s.id.clone(), s.mask));
        format!("\u{1}{}\u{1}", self.lines.len() - 1)
    }

    /// `structure` with each line's marker replaced by the element usages its reference's
    /// mask states beyond the segment's definition: a segment used with several masks is
    /// defined by the least strict of them, and each position adds its own mask's must-use
    /// (`+SEGnn`) and not-used (`-SEGnn`) elements, so every reference is checked as its
    /// mask says.
    fn usages(&mut self, structure: String) -> String {
        let mut out = structure;
        for (n, (id, mask)) in self.lines.clone().into_iter().enumerate() {
            let mut tokens = String::new();
            let several = self.used.get(&id).is_some_and(|m| m.len() > 1);
            if let (true, Some(def)) = (several, self.sef.segments.get(&id)) {
                let own: Vec<Option<MaskEntry>> = mask
                    .and_then(|m| m.checked_sub(1))
                    .and_then(|i| def.masks.get(i))
                    .map(|m| m.iter().copied().map(Some).collect())
                    .unwrap_or_default();
                let written = self.written.get(&id).cloned().unwrap_or_default();
                for (i, e) in def.elements.iter().enumerate() {
                    let req = written.get(i).copied().unwrap_or('O');
                    match attr_at(&own, i, e) {
                        Some('!') if !matches!(req, 'M' | 'N') => {
                            let _ = write!(tokens, " +{id}{:02}", i + 1);
                        }
                        Some('#') if !matches!(req, 'M' | 'N') => {
                            let _ = write!(tokens, " -{id}{:02}", i + 1);
                        }
                        _ => {}
                    }
                }
            }
            out = out.replacen(&format!("\u{1}{n}\u{1}"), &tokens, 1);
        }
        out
    }

    fn use_segment(&mut self, s: &SegRef) {
        self.used.entry(s.id.clone()).or_default().insert(s.mask);
        self.places.insert(s.ordinal, s.id.clone());
    }

    /// `[segments.X]` and `[composites.C]` tables of every used segment, with its masks
    /// applied, and the element ids they hold (with the places of each).
    fn segments(&mut self) -> Result<(String, String, ElementPlaces), ImportError> {
        let mut seg_out = String::new();
        let mut composites: BTreeMap<String, Option<usize>> = BTreeMap::new();
        let mut places: ElementPlaces = BTreeMap::new();
        let used = self.used.clone();
        for (id, masks) in &used {
            let Some(def) = self.sef.segments.get(id) else {
                return Err(self.unsupported(
                    self.sef.sets.get(self.set_id).map_or(1, |s| s.line),
                    ".SETS",
                    format!("segment {id} is used but .SEGS does not define it"),
                ));
            };
            let entries = self.merged_mask(id, def, masks, ".SEGS");
            let mut elements = Vec::new();
            let last = def.elements.len();
            let mut reqs = Vec::with_capacity(last);
            for (i, e) in def.elements.iter().enumerate() {
                let entry = entries.get(i).copied().flatten();
                let req = self.requirement(id, i, attr_at(&entries, i, e), e, def.line, ".SEGS");
                reqs.push(req);
                if self.sef.composites.contains_key(&e.id) {
                    let mask = entry.and_then(|m| m.composite_mask);
                    let previous = composites.insert(e.id.clone(), mask);
                    if previous.is_some_and(|p| p != mask) {
                        self.warn(
                            def.line,
                            ".SEGS",
                            format!(
                                "composite {} is used with different masks: ours holds one definition per composite, so it is read unmasked",
                                e.id
                            ),
                        );
                        composites.insert(e.id.clone(), None);
                    }
                    for (ci, c) in self
                        .sef
                        .composites
                        .get(&e.id)
                        .map_or(&[][..], |c| c.elements.as_slice())
                        .iter()
                        .enumerate()
                    {
                        places.entry(c.id.clone()).or_default().push((
                            id.clone(),
                            i + 1,
                            Some(ci + 1),
                        ));
                    }
                    elements.push(format!(
                        "  {{ composite = {}, req = \"{req}\"{} }},",
                        quoted(&e.id),
                        repeat_text(e.repeat)
                    ));
                } else {
                    if let Some(n) = entry.and_then(|m| m.composite_mask) {
                        self.warn(
                            def.line,
                            ".SEGS",
                            format!(
                                "{id}{:02}: a mask gives it composite mask {n}, but it is a simple element: not read",
                                i + 1
                            ),
                        );
                    }
                    places
                        .entry(e.id.clone())
                        .or_default()
                        .push((id.clone(), i + 1, None));
                    elements.push(self.simple(id, i + 1, e, req, def.line)?);
                }
            }
            self.written.insert(id.clone(), reqs);
            let name = self
                .names
                .segments
                .get(id)
                .cloned()
                .unwrap_or_else(|| format!("Segment {id}"));
            let _ = writeln!(seg_out, "\n[segments.{id}]\nname = {}", quoted(&name));
            let _ = writeln!(seg_out, "elements = [\n{}\n]", elements.join("\n"));
            let syntax = self.syntax(id, def, last);
            if !syntax.is_empty() {
                let _ = writeln!(seg_out, "syntax = [{}]", syntax.join(", "));
            }
        }
        let com_out = self.composites(&composites)?;
        Ok((seg_out, com_out, places))
    }

    /// `[composites.C]` tables of the composites the segments use, each with the mask it is
    /// used with (`None`: unmasked).
    fn composites(
        &mut self,
        used: &BTreeMap<String, Option<usize>>,
    ) -> Result<String, ImportError> {
        let mut com_out = String::new();
        for (cid, mask) in used {
            let Some(def) = self.sef.composites.get(cid) else {
                continue;
            };
            let masks: BTreeSet<Option<usize>> = [*mask].into_iter().collect();
            let entries = self.merged_mask(cid, def, &masks, ".COMS");
            let mut components = Vec::new();
            let last = def.elements.len();
            for (i, e) in def.elements.iter().enumerate() {
                let req = self.requirement(cid, i, attr_at(&entries, i, e), e, def.line, ".COMS");
                components.push(self.simple(cid, i + 1, e, req, def.line)?);
            }
            let name = self
                .names
                .elements
                .get(cid)
                .cloned()
                .unwrap_or_else(|| format!("Composite {cid}"));
            let _ = writeln!(com_out, "\n[composites.{cid}]\nname = {}", quoted(&name));
            let _ = writeln!(com_out, "components = [\n{}\n]", components.join("\n"));
            let syntax = self.syntax(cid, def, last);
            if !syntax.is_empty() {
                let _ = writeln!(com_out, "syntax = [{}]", syntax.join(", "));
            }
        }
        Ok(com_out)
    }

    /// The requirement of position `i` of `owner` under the attribute that rules it, with a
    /// warning for what is not checked.
    fn requirement(
        &mut self,
        owner: &str,
        i: usize,
        attr: Option<char>,
        e: &ElemRef,
        line: usize,
        section: &str,
    ) -> char {
        let req = match attr {
            Some('!') => 'M',
            // Not used: the element stays in its place (the positions after it keep theirs),
            // and a value there is `element-not-used` (999 IK403 I10, 997 AK403 10).
            Some('#') => 'N',
            Some(a) => {
                if a != '.' {
                    self.warn(
                        line,
                        section,
                        format!(
                            "{owner}{:02} is marked '{a}' ({}): advice for people, not checked",
                            i + 1,
                            attr_words(a)
                        ),
                    );
                }
                e.req
            }
            None => e.req,
        };
        // SEF's C (conditional) is X12's relational requirement: a syntax note decides.
        if req == 'C' {
            'X'
        } else {
            req
        }
    }

    /// The mask entries of segment `id` under every mask its references name: one mask as
    /// it is; several, position by position the least strict (must-use only where all say
    /// so, not-used only where all say so), with a warning.
    fn merged_mask(
        &mut self,
        id: &str,
        def: &Structure,
        masks: &BTreeSet<Option<usize>>,
        section: &str,
    ) -> Vec<Option<MaskEntry>> {
        let mut chosen: Vec<Vec<Option<MaskEntry>>> = Vec::new();
        for m in masks {
            match m {
                None => chosen.push(Vec::new()),
                Some(n) => {
                    match n.checked_sub(1).and_then(|i| def.masks.get(i)) {
                        Some(mask) => chosen.push(mask.iter().copied().map(Some).collect()),
                        None => {
                            self.warn(
                            def.line,
                            section,
                            format!("{id} is used with mask {n}, which it does not have: read unmasked"),
                        );
                            chosen.push(Vec::new());
                        }
                    }
                }
            }
        }
        if chosen.len() == 1 {
            return chosen.pop().unwrap_or_default();
        }
        self.warn(
            def.line,
            section,
            format!(
                "{id} is used with {} different masks: its definition takes the least strict of them, and each position adds its own mask's must-use and not-used elements (+SEGnn, -SEGnn)",
                chosen.len()
            ),
        );
        let width = chosen.iter().map(Vec::len).max().unwrap_or(0);
        (0..width)
            .map(|i| {
                let at: Vec<char> = chosen
                    .iter()
                    .map(|m| m.get(i).copied().flatten().map_or('.', |e| e.attr))
                    .collect();
                let attr = if at.iter().all(|a| *a == '!') {
                    '!'
                } else if at.iter().all(|a| *a == '#') {
                    '#'
                } else {
                    '.'
                };
                Some(MaskEntry {
                    attr,
                    composite_mask: None,
                })
            })
            .collect()
    }

    /// One simple element (or component) as a TOML inline table.
    fn simple(
        &self,
        owner: &str,
        position: usize,
        e: &ElemRef,
        req: char,
        line: usize,
    ) -> Result<String, ImportError> {
        let number: u32 = e.id.parse().map_err(|_| {
            self.unsupported(
                line,
                ".SEGS",
                format!(
                    "{owner}{position:02} is element {:?}: our definitions number elements",
                    e.id
                ),
            )
        })?;
        let Some(d) = self.sef.elements.get(&e.id) else {
            return Err(self.unsupported(
                line,
                ".SEGS",
                format!(
                    "{owner}{position:02} is element {} which .ELMS does not define",
                    e.id
                ),
            ));
        };
        if let Some(problem) = &d.problem {
            return Err(self.unsupported(
                d.line,
                ".ELMS",
                format!("element {} (used in {owner}{position:02}): {problem}", e.id),
            ));
        }
        let numeric = d.data_type.starts_with('N')
            && d.data_type.len() <= 2
            && d.data_type.bytes().skip(1).all(|b| b.is_ascii_digit());
        let known = matches!(d.data_type.as_str(), "ID" | "AN" | "R" | "DT" | "TM" | "B");
        if !(known || numeric) {
            return Err(self.unsupported(
                d.line,
                ".ELMS",
                format!(
                    "element {} has type {:?} (ID, AN, Nn, R, DT, TM, B are read)",
                    e.id, d.data_type
                ),
            ));
        }
        let name = self
            .names
            .elements
            .get(&e.id)
            .cloned()
            .unwrap_or_else(|| format!("Element {}", e.id));
        Ok(format!(
            "  {{ ref = {number}, name = {}, req = \"{req}\", type = {}, min = {}, max = {}{} }},",
            quoted(&name),
            quoted(&d.data_type),
            d.min,
            d.max,
            repeat_text(e.repeat)
        ))
    }

    /// The syntax notes of `def` within its first `count` positions.
    fn syntax(&mut self, id: &str, def: &Structure, count: usize) -> Vec<String> {
        let mut out = Vec::new();
        for note in &def.syntax {
            let positions = note_positions(note);
            let known = note.chars().next().is_some_and(|k| "PRECL".contains(k));
            if !known || positions.is_empty() || positions.iter().any(|p| *p > count) {
                self.warn(
                    def.line,
                    ".SEGS",
                    format!("{id}: syntax note {note:?} is not read"),
                );
                continue;
            }
            out.push(quoted(note));
        }
        out
    }

    /// `[codes]`: per element of the set, the guide's list, narrowed where every place the
    /// element stands has the same narrowed list.
    fn codes(&mut self, elements: &ElementPlaces) -> String {
        let mut out = String::new();
        for (id, at) in elements {
            let Some(list) = self.sef.codes.get(id) else {
                continue;
            };
            // The narrowed list at each place the element stands in this set.
            let mut per_place: Vec<Option<&Vec<String>>> = Vec::new();
            for (seg, position, component) in at {
                let ordinals: Vec<usize> = self
                    .places
                    .iter()
                    .filter(|(_, s)| *s == seg)
                    .map(|(o, _)| *o)
                    .collect();
                for ordinal in ordinals {
                    let narrowed = list.subsets.iter().find(|(_, locs)| {
                        locs.iter().any(|l| {
                            l.set == self.set_id
                                && l.ordinal == ordinal
                                && l.position == *position
                                && l.component == *component
                        })
                    });
                    per_place.push(narrowed.map(|(codes, _)| codes));
                }
            }
            let narrowed: BTreeSet<&Vec<String>> = per_place.iter().flatten().copied().collect();
            let everywhere = per_place.iter().all(Option::is_some);
            let codes: Vec<String> = match (narrowed.len(), everywhere) {
                (0, _) => list.codes.clone(),
                (1, true) => narrowed.iter().flat_map(|c| c.iter().cloned()).collect(),
                _ => {
                    self.warn(
                        list.line,
                        ".CODES",
                        format!(
                            "element {id} is narrowed differently at its places in the set; ours holds one list per element and set, so the {} applies at all of them",
                            if everywhere { "union of its narrowed lists" } else { "guide's whole list" }
                        ),
                    );
                    if everywhere {
                        let all: BTreeSet<String> =
                            narrowed.iter().flat_map(|c| c.iter().cloned()).collect();
                        all.into_iter().collect()
                    } else {
                        list.codes.clone()
                    }
                }
            };
            if codes.is_empty() {
                continue;
            }
            let items: Vec<String> = codes.iter().map(|c| quoted(c)).collect();
            let _ = writeln!(out, "{id} = [{}]", items.join(", "));
        }
        if out.is_empty() {
            out
        } else {
            format!("\n[codes]\n{out}")
        }
    }
}

/// The attribute that rules position `i`: the mask's, unless it says "as the standard"
/// (`.`); then the reference's own, where `.` means not used as it does in `.SETS`.
fn attr_at(entries: &[Option<MaskEntry>], i: usize, e: &ElemRef) -> Option<char> {
    match entries.get(i).copied().flatten().map(|m| m.attr) {
        Some(a) if a != '.' => Some(a),
        _ => e.attr.map(|a| if a == '.' { '#' } else { a }),
    }
}

/// Element id -> (segment or composite id, position, component) where it stands.
type ElementPlaces = BTreeMap<String, Vec<(String, usize, Option<usize>)>>;

/// The positions a syntax note names (`P0304` -> 3, 4).
fn note_positions(note: &str) -> Vec<usize> {
    let digits = note.get(1..).unwrap_or("");
    if digits.len() % 2 != 0 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Vec::new();
    }
    digits
        .as_bytes()
        .chunks(2)
        .filter_map(|p| std::str::from_utf8(p).ok()?.parse().ok())
        .collect()
}

fn attr_words(a: char) -> &'static str {
    match a {
        '$' => "recommended",
        '-' => "not recommended",
        '&' => "dependent",
        '!' => "must be used",
        '.' => "not used",
        _ => "unknown",
    }
}

fn max_text(m: parse::Max) -> String {
    m.map_or_else(|| ">1".to_string(), |n| n.to_string())
}

fn repeat_text(r: parse::Max) -> String {
    match r {
        Some(1) => String::new(),
        Some(n) => format!(", repeat = {n}"),
        None => ", repeat = 99".to_string(),
    }
}

/// `s` as a TOML basic string.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The built-in definition's `[document]`, for the guide's set of the same id.
fn document(d: &crate::schema::DocumentSpec) -> String {
    let fields = |f: &[crate::schema::Field]| {
        f.iter()
            .map(|f| quoted(&f.to_string()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let strings = |s: &[String]| s.iter().map(|c| quoted(c)).collect::<Vec<_>>().join(", ");
    let mut out = String::from("\n[document]\n");
    let _ = writeln!(out, "id = [{}]", fields(&d.id));
    let _ = writeln!(out, "event = [{}]", fields(&d.event));
    if let Some(v) = &d.version {
        let _ = writeln!(out, "version = {}", quoted(&v.to_string()));
    }
    if let Some(k) = &d.kind {
        let _ = writeln!(out, "type = {}", quoted(&k.to_string()));
    }
    let _ = writeln!(out, "of = {}", quoted(&d.of));
    let _ = writeln!(out, "changes = [{}]", strings(&d.changes));
    let _ = writeln!(out, "copies = [{}]", strings(&d.copies));
    if let Some(per) = &d.per {
        let _ = writeln!(out, "per = [{}]", strings(&per.ids));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Req;

    const GUIDE: &str = "\
.VER 1.6
.INI
T850,,004 010,X,X12-4010,Test guide
.SETS
850=^[ST,M][BEG,M][REF*1,,>1]{:200[.N1][N3,,2]}{N9:10[N9*2][REF*2,,3]}^{:100[PO1,M]}^{:1[CTT,M]}[SE,M]
.SEGS
BEG=[353,M][92,M][324,M][373,M]
REF=[128,M][127,X][352,X]+R0203,..##,.!#
N9=[128,M][127,X]+R0203
N3=[166,M]
PO1=[350][330,X][355]+C0302
CTT=[354,M]
.ELMS
92=ID,2,2
127=AN,1,30
128=ID,2,3
166=AN,1,55
324=AN,1,22
330=R,1,15
350=AN,1,20
352=AN,1,80
353=ID,2,2
354=N0,1,6
355=ID,2,2
373=DT,8,8
.CODES
128=DP,PO,VN%[DP]+850/3///1[PO]+850/7///1
353=00,05:07%[00]+850/2///1
";

    fn converted() -> Converted {
        import(GUIDE, crate::schema::builtin().unwrap()).unwrap()
    }

    #[test]
    fn a_guide_becomes_one_set_file_that_narrows_the_standard() {
        let c = converted();
        assert_eq!((c.name.as_str(), c.release.as_str()), ("T850", "004010"));
        let (path, toml) = &c.files[0];
        assert_eq!(path, "004010/850.toml");
        // The N1 loop's trigger is not used: the loop is gone, and the N3 in it is said to be.
        assert!(!toml.contains("N1") && !toml.contains("N3"), "{toml}");
        assert!(
            c.warnings.iter().any(|w| w.contains("loop N1 is dropped")),
            "{:?}",
            c.warnings
        );
        let s =
            crate::guides::load_files(std::path::Path::new("g"), &[(path.clone(), toml.clone())])
                .unwrap();
        let def = s.find(b"004010", b"850").unwrap();
        // BEG01 narrowed everywhere it stands: 00 only; a named loop keeps its name.
        let beg = def.segment_of(def.places(b"BEG")[0]).unwrap();
        let Kind::Simple(s353) = &beg.elements[0].kind else {
            panic!()
        };
        assert!(s353.codes.as_ref().unwrap().contains(b"00"));
        assert!(!s353.codes.as_ref().unwrap().contains(b"05"));
        assert!(def.nodes.iter().any(|n| n.is_loop() && n.id == "N9"));
        // REF's two masks: REF02 must be used under one and not under the other, so the
        // definition keeps it as the standard has it, and the N9 loop's REF (mask 2) adds
        // its own must-use: each position is checked as its mask says.
        let places = def.places(b"REF");
        let r = def.segment_of(places[0]).unwrap();
        assert_eq!(r.elements[1].req, Req::X, "{toml}");
        let in_n9 = def.segment_of(places[1]).unwrap();
        assert_eq!(in_n9.elements[1].req, Req::M, "{toml}");
        assert!(toml.contains("  REF O 3 +REF02\n"), "{toml}");
        assert!(c
            .warnings
            .iter()
            .any(|w| w.contains("REF is used with 2 different masks")));
        // Element 128 is narrowed differently in REF and N9: the whole list, with a warning.
        assert!(toml.contains("128 = [\"DP\", \"PO\", \"VN\"]"), "{toml}");
        assert!(c
            .warnings
            .iter()
            .any(|w| w.contains("element 128 is narrowed differently")));
        // The built-in 850's document key carries over.
        assert!(def.document.is_some());
    }

    #[test]
    fn unused_elements_are_not_used_in_place_and_must_use_ones_become_mandatory() {
        let one_mask = GUIDE.replace("[REF*2,,3]", "[REF*1,,3]");
        let c = import(&one_mask, crate::schema::builtin().unwrap()).unwrap();
        let toml = &c.files[0].1;
        let s = crate::guides::load_files(
            std::path::Path::new("g"),
            &[(c.files[0].0.clone(), toml.clone())],
        )
        .unwrap();
        let def = s.find(b"004010", b"850").unwrap();
        let r = def.segment_of(def.places(b"REF")[0]).unwrap();
        // Mask 1 `..##`: REF03 is not used: it stays in its place, marked so (a value there
        // is `element-not-used`), whatever the positions after it.
        assert_eq!(r.elements.len(), 3, "{toml}");
        assert_eq!(r.elements[2].req, Req::N, "{toml}");
        assert!(
            !c.warnings.iter().any(|w| w.contains("marked not used (#)")),
            "{:?}",
            c.warnings
        );
        // Every REF under mask 2 `.!#`: REF02 must be used.
        let must = GUIDE.replace("[REF*1,,>1]", "[REF*2,,>1]");
        let c = import(&must, crate::schema::builtin().unwrap()).unwrap();
        assert!(
            c.files[0]
                .1
                .contains("{ ref = 127, name = \"Reference Identification\", req = \"M\""),
            "{}",
            c.files[0].1
        );
    }

    #[test]
    fn what_the_guide_says_that_cannot_be_held_is_an_error_naming_the_line() {
        let missing = GUIDE.replace("373=DT,8,8\n", "");
        let e = import(&missing, crate::schema::builtin().unwrap()).unwrap_err();
        assert_eq!(e.kind(), "unsupported");
        assert!(
            e.to_string().starts_with(
                "line 7 (.SEGS): set 850: BEG04 is element 373 which .ELMS does not define"
            ),
            "{e}"
        );
        let bad_type = GUIDE.replace("373=DT,8,8", "373=XX,8,8");
        let e = import(&bad_type, crate::schema::builtin().unwrap()).unwrap_err();
        assert!(e.to_string().starts_with("line 25 (.ELMS)"), "{e}");
    }
}
