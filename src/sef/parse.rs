//! The SEF text read into its sections, one small parser per record kind, each fault an
//! [`SefError`] naming the line, the section and the column.
//!
//! Facts from Foresight's published "Standard Exchange Format" specification (1.x): a file is
//! sections opened by a line `.NAME`; `.INI` names the standard (`004 010` and agency `X` for
//! X12 4010); `.SETS` gives each set's segment references (`[ID*mask,req,max]`, an attribute
//! before the id: `!` must be used, `.` not used, `$` recommended, `-` not recommended, `&`
//! dependent), loops (`{id:repeat ...}`), tables (`^`) and position numbers (`+10`);
//! `.SEGS` and `.COMS` give element references (`[353,M]`, repeated groups `{2[373][337]}`),
//! syntax notes after `+`, and masks after `,` (one character per element, the attributes
//! above, `#` not used, `.` as the standard); `.ELMS` each element's type and lengths;
//! `.CODES` each element's code list (`A:C` a range), then after `%` narrowed lists
//! (`[A,B]`) and where each applies (`+850/2///2`: set 850, segment ordinal 2, element 2).

use std::collections::BTreeMap;

/// A malformed SEF file: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line} ({section}): {message}")]
#[non_exhaustive]
pub struct SefError {
    /// 1-based line of the file.
    pub line: usize,
    /// The section the line is in (`.SETS`), or `file` before the first.
    pub section: String,
    pub message: String,
}

/// A requirement or usage attribute on a reference.
pub type Attr = Option<char>;

/// The maximum use of a segment or repeat of a loop; `None` for `>1`.
pub type Max = Option<u32>;

/// One entry of a set's structure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Segment(SegRef),
    Loop(LoopRef),
}

/// `[!N1*2,M,>1]` in `.SETS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegRef {
    pub attr: Attr,
    pub id: String,
    /// The segment's ordinal in the set (1-based), as code-list locations count them.
    pub ordinal: usize,
    pub mask: Option<usize>,
    pub req: char,
    pub max: Max,
}

/// `{N1:200 ...}` in `.SETS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopRef {
    pub id: Option<String>,
    pub repeat: Max,
    pub items: Vec<Item>,
}

/// One element position of a segment or composite in `.SEGS`/`.COMS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElemRef {
    pub attr: Attr,
    pub id: String,
    pub req: char,
    /// Repetitions (`[234,,5]`), 1 unless given.
    pub repeat: Max,
}

/// One mask position: its attribute (`.` as the standard) and, for a composite, the mask of
/// the composite to use (`.*2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskEntry {
    pub attr: char,
    pub composite_mask: Option<usize>,
}

/// A segment or composite definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Structure {
    pub line: usize,
    pub elements: Vec<ElemRef>,
    pub syntax: Vec<String>,
    /// Masks 1, 2, ... in order.
    pub masks: Vec<Vec<MaskEntry>>,
}

/// `.ELMS`: `353=ID,2,2`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementDef {
    pub line: usize,
    pub data_type: String,
    pub min: u16,
    pub max: u16,
    /// Why the record cannot be read (lengths out of order): an error only when a used
    /// segment holds the element, since guides carry the whole dictionary of the standard.
    pub problem: Option<String>,
}

/// Where a narrowed code list applies: set, segment ordinal, element position, component.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
    pub set: String,
    pub ordinal: usize,
    pub position: usize,
    pub component: Option<usize>,
}

/// `.CODES`: an element's list and its narrowed lists with their locations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CodeList {
    pub line: usize,
    pub codes: Vec<String>,
    /// (codes, where they apply); a list with no location applies nowhere we can tell.
    pub subsets: Vec<(Vec<String>, Vec<Location>)>,
}

/// A set's structure and the line it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetStructure {
    pub line: usize,
    pub items: Vec<Item>,
}

/// A SEF file read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sef {
    pub sef_version: Option<String>,
    /// `.INI`: the implementation's name, release (`004010`), agency, title.
    pub name: String,
    pub release: String,
    pub agency: String,
    pub title: String,
    pub sets: BTreeMap<String, SetStructure>,
    pub segments: BTreeMap<String, Structure>,
    pub composites: BTreeMap<String, Structure>,
    pub elements: BTreeMap<String, ElementDef>,
    pub codes: BTreeMap<String, CodeList>,
    /// What was read but is not applied, one line each: `line N (.SECTION): ...`.
    pub warnings: Vec<String>,
}

/// Sections whose content narrows nothing we enforce; counted and reported, not applied.
const UNSUPPORTED: &[(&str, &str)] = &[
    (".VALREFS", "value lists bound to elements are not applied"),
    (".VALLISTS", "value lists are not applied"),
    (
        ".SEMREFS",
        "semantic rules (program exits, usage conditions) are not applied",
    ),
    (".OBJVARS", "object variables are not applied"),
];

/// Reads a SEF 1.x file.
pub fn parse(text: &str) -> Result<Sef, SefError> {
    let mut sef = Sef::default();
    let mut section = String::from("file");
    let mut private = false;
    let mut ignored: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut ini_seen = false;
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        let l = raw.trim_end_matches('\r');
        let err = |message: String| SefError {
            line,
            section: section.clone(),
            message,
        };
        if l.trim().is_empty() {
            continue;
        }
        if let Some((name, rest)) = section_header(l) {
            header(&mut sef, &name, &rest, line, &mut private).map_err(err)?;
            section = name;
            continue;
        }
        if private {
            // Vendor-specific records, of no interest to other parties by the format's own
            // definition.
            continue;
        }
        if section == ".INI" {
            if ini_seen {
                return Err(err(
                    "a second .INI record (a record is one line; is the first one wrapped?)".into(),
                ));
            }
            ini(&mut sef, l).map_err(err)?;
            ini_seen = true;
            continue;
        }
        if !read_record(&mut sef, &section, l, line).map_err(err)? {
            let e = ignored.entry(section.clone()).or_insert((line, 0));
            e.1 += 1;
        }
    }
    if !ini_seen {
        return Err(SefError {
            line: text.lines().count().max(1),
            section,
            message: "no .INI record: the file does not say which standard it narrows".into(),
        });
    }
    note_ignored(&mut sef, ignored);
    Ok(sef)
}

/// A section header's own effect: `.PRIVATE`/`.PUBLIC` switch what follows off and on,
/// `.VER` must be 1.x, `.STD`'s options are noted as not read.
fn header(
    sef: &mut Sef,
    name: &str,
    rest: &str,
    line: usize,
    private: &mut bool,
) -> Result<(), String> {
    match name {
        ".PRIVATE" => *private = true,
        ".PUBLIC" => *private = false,
        ".VER" => {
            let v = rest.trim();
            if !v.starts_with("1.") {
                return Err(format!("SEF version {v:?}: only SEF 1.x files are read"));
            }
            sef.sef_version = Some(v.to_string());
        }
        ".STD" if !*private => sef.warnings.push(format!(
            "line {line} (.STD): the standard's options {:?} are not read (repeating elements are read from each element's repeat count)",
            rest.trim()
        )),
        _ => {}
    }
    Ok(())
}

/// One record of a section other than `.INI` into `sef`: `false` when x12gate does not
/// read the section (counted by the caller, noted once).
fn read_record(sef: &mut Sef, section: &str, l: &str, line: usize) -> Result<bool, String> {
    match section {
        ".SETS" => {
            let (id, body) = record(l)?;
            let items = sets_body(body)
                .map_err(|(col, m)| format!("set {id}, column {}: {m}", col + id.len() + 2))?;
            if sef
                .sets
                .insert(id.to_string(), SetStructure { line, items })
                .is_some()
            {
                return Err(format!("set {id} is defined twice"));
            }
        }
        ".SEGS" | ".COMS" => {
            let (id, body) = record(l)?;
            let (mut s, warnings) = structure(body)
                .map_err(|(col, m)| format!("{id}, column {}: {m}", col + id.len() + 2))?;
            s.line = line;
            for w in warnings {
                sef.warnings
                    .push(format!("line {line} ({section}): {id}: {w}"));
            }
            let map = if section == ".SEGS" {
                &mut sef.segments
            } else {
                &mut sef.composites
            };
            if map.insert(id.to_string(), s).is_some() {
                return Err(format!("{id} is defined twice"));
            }
        }
        ".ELMS" => {
            let (id, body) = record(l)?;
            let e = element(body).map_err(|m| format!("element {id}: {m}"))?;
            if body.split(',').count() > 3 {
                sef.warnings.push(format!(
                    "line {line} (.ELMS): element {id}: fields after TYPE,MIN,MAX are not read"
                ));
            }
            sef.elements
                .insert(id.to_string(), ElementDef { line, ..e });
        }
        ".CODES" => {
            let (id, body) = record(l)?;
            let (mut list, warnings) = code_list(body).map_err(|m| format!("element {id}: {m}"))?;
            list.line = line;
            for w in warnings {
                sef.warnings
                    .push(format!("line {line} (.CODES): element {id}: {w}"));
            }
            sef.codes.insert(id.to_string(), list);
        }
        "file" => return Err("expected a section (.VER or .INI) before any record".into()),
        _ => return Ok(false),
    }
    Ok(true)
}

/// One warning per section x12gate does not read: where it starts, how many records, why.
fn note_ignored(sef: &mut Sef, ignored: BTreeMap<String, (usize, usize)>) {
    for (name, (first, count)) in ignored {
        let why = UNSUPPORTED
            .iter()
            .find(|(s, _)| *s == name)
            .map(|(_, w)| (*w).to_string())
            .unwrap_or_else(|| {
                if name.starts_with(".TEXT") {
                    "notes for people, not rules: not read".to_string()
                } else {
                    "a section x12gate does not read".to_string()
                }
            });
        sef.warnings.push(format!(
            "line {first} ({name}): {count} record(s) not supported: {why}"
        ));
    }
}

/// `.NAME rest` when the line opens a section (an upper-case name after the dot).
fn section_header(l: &str) -> Option<(String, String)> {
    let rest = l.strip_prefix('.')?;
    let end = rest
        .find(|c: char| !(c.is_ascii_uppercase() || c == ','))
        .unwrap_or(rest.len());
    let name = rest.get(..end)?;
    if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_uppercase()) {
        return None;
    }
    Some((
        format!(".{name}"),
        rest.get(end..).unwrap_or("").to_string(),
    ))
}

/// `ID=body`.
fn record(l: &str) -> Result<(&str, &str), String> {
    let (id, body) = l
        .split_once('=')
        .ok_or_else(|| format!("expected ID=..., found {:?}", shown(l)))?;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!("{:?} is not an identifier", shown(id)));
    }
    Ok((id, body))
}

/// At most 40 characters of input, for messages.
fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(40).collect();
    if s.chars().count() > 40 {
        out.push_str("...");
    }
    out
}

/// `.INI`: `NAME,,004 010,X,X12-4010,Title`.
fn ini(sef: &mut Sef, l: &str) -> Result<(), String> {
    let fields: Vec<&str> = l.splitn(6, ',').collect();
    let field = |i: usize| fields.get(i).map_or("", |f| f.trim());
    sef.name = field(0).to_string();
    sef.agency = field(3).to_string();
    sef.title = field(5).to_string();
    let words: Vec<&str> = field(2).split_whitespace().collect();
    let release = match words.as_slice() {
        [v, r, ..] if v.len() == 3 && r.len() == 3 => format!("{v}{r}"),
        [vr, ..] if vr.len() == 6 => (*vr).to_string(),
        _ => String::new(),
    };
    if release.len() != 6 || !release.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "the version {:?} is not an X12 version and release such as \"004 010\"",
            field(2)
        ));
    }
    if sef.agency != "X" {
        return Err(format!(
            "agency {:?}: only X12 guides (agency X) are read",
            sef.agency
        ));
    }
    sef.release = release;
    Ok(())
}

/// A cursor over one record's body; errors carry the 0-based column in the body.
struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

type Fault = (usize, String);

impl<'a> Cursor<'a> {
    fn new(s: &'a str) -> Self {
        Cursor {
            s: s.as_bytes(),
            at: 0,
        }
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }
    fn bump(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }
    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn fault(&self, m: impl Into<String>) -> Fault {
        (self.at, m.into())
    }
    fn expect(&mut self, b: u8) -> Result<(), Fault> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(self.fault(match self.peek() {
                Some(c) => format!("expected '{}', found '{}'", b as char, c as char),
                None => format!("expected '{}', found the end of the line", b as char),
            }))
        }
    }
    /// Bytes while `f` holds, as text.
    fn take(&mut self, f: impl Fn(u8) -> bool) -> &'a str {
        let start = self.at;
        while self.peek().is_some_and(&f) {
            self.at += 1;
        }
        std::str::from_utf8(self.s.get(start..self.at).unwrap_or_default()).unwrap_or("")
    }
    fn number(&mut self) -> Result<usize, Fault> {
        let digits = self.take(|b| b.is_ascii_digit());
        digits.parse().map_err(|_| self.fault("expected a number"))
    }
    /// `+10`, `-5`: position numbers, which order the standard's tables and narrow nothing.
    fn skip_position(&mut self) -> Result<(), Fault> {
        while matches!(self.peek(), Some(b'+' | b'-')) {
            self.at += 1;
            self.number()?;
        }
        Ok(())
    }
}

const ATTRS: &[u8] = b"!.$-&";

/// A maximum: a number or `>1`.
fn max(c: &mut Cursor<'_>) -> Result<Max, Fault> {
    if c.eat(b'>') {
        if c.number()? != 1 {
            return Err(c.fault("only >1 is a maximum without a number"));
        }
        return Ok(None);
    }
    let n = c.number()?;
    u32::try_from(n)
        .ok()
        .filter(|n| *n > 0)
        .map(Some)
        .ok_or_else(|| c.fault("a maximum is a number from 1, or >1"))
}

/// The body of a `.SETS` record.
fn sets_body(body: &str) -> Result<Vec<Item>, Fault> {
    let mut c = Cursor::new(body);
    let mut ordinal = 0;
    let items = items(&mut c, &mut ordinal, 0)?;
    if let Some(b) = c.peek() {
        return Err(c.fault(format!("unexpected '{}'", b as char)));
    }
    Ok(items)
}

/// How deep loops may nest (the standard's deepest are a few levels): a bound, so a file
/// cannot exhaust the stack.
const MAX_DEPTH: usize = 32;

/// Element positions a segment may have after its groups are expanded (X12's largest have
/// a few dozen): a bound, so nested repeat counts cannot exhaust memory.
const MAX_ELEMENTS: usize = 999;

fn items(c: &mut Cursor<'_>, ordinal: &mut usize, depth: usize) -> Result<Vec<Item>, Fault> {
    let in_loop = depth > 0;
    if depth > MAX_DEPTH {
        return Err(c.fault(format!("loops nest more than {MAX_DEPTH} deep")));
    }
    let mut out = Vec::new();
    loop {
        match c.peek() {
            None => {
                if in_loop {
                    return Err(c.fault("a loop is not closed with '}'"));
                }
                return Ok(out);
            }
            Some(b'}') if in_loop => return Ok(out),
            Some(b'^') => {
                c.bump();
            }
            Some(b'+' | b'-') => c.skip_position()?,
            Some(b'[') => {
                c.bump();
                out.push(Item::Segment(seg_ref(c, ordinal)?));
                c.expect(b']')?;
            }
            Some(b'{') => {
                c.bump();
                let id = c.take(|b| b.is_ascii_alphanumeric());
                c.expect(b':')?;
                let repeat = max(c)?;
                let inner = items(c, ordinal, depth + 1)?;
                c.expect(b'}')?;
                if inner.is_empty() {
                    return Err(c.fault("a loop holds no segment"));
                }
                out.push(Item::Loop(LoopRef {
                    id: (!id.is_empty()).then(|| id.to_string()),
                    repeat,
                    items: inner,
                }));
            }
            Some(b) => return Err(c.fault(format!("unexpected '{}'", b as char))),
        }
    }
}

/// `!ID@5*1,M,>1` inside `[...]` of `.SETS`.
fn seg_ref(c: &mut Cursor<'_>, ordinal: &mut usize) -> Result<SegRef, Fault> {
    let attr = c.peek().filter(|b| ATTRS.contains(b)).map(|b| {
        c.at += 1;
        b as char
    });
    let id = c.take(|b| b.is_ascii_alphanumeric()).to_string();
    if id.is_empty() || id.len() > 3 {
        return Err(c.fault("expected a segment id of two or three characters"));
    }
    *ordinal += 1;
    if c.eat(b'@') {
        *ordinal = c.number()?;
    }
    let mask = if c.eat(b'*') { Some(c.number()?) } else { None };
    let (req, most) = requirement_and_most(c)?;
    if c.peek() == Some(b',') {
        return Err(c.fault("more than three fields in a segment reference"));
    }
    Ok(SegRef {
        attr,
        id,
        ordinal: *ordinal,
        mask,
        req,
        max: most,
    })
}

/// The `,REQ,MAX` after a segment or element reference: its requirement (O when absent)
/// and its most uses (1 when absent).
fn requirement_and_most(c: &mut Cursor<'_>) -> Result<(char, Max), Fault> {
    let mut req = 'O';
    let mut most = Some(1);
    if c.eat(b',') {
        if let Some(r) = c.peek().filter(u8::is_ascii_alphabetic) {
            c.bump();
            req = requirement(r).ok_or_else(|| {
                (
                    c.at - 1,
                    format!("requirement '{}' is not M, O, C or X", r as char),
                )
            })?;
        }
        if c.eat(b',') {
            most = max(c)?;
        }
    }
    Ok((req, most))
}

fn requirement(b: u8) -> Option<char> {
    matches!(b, b'M' | b'O' | b'C' | b'X').then_some(b as char)
}

/// The body of a `.SEGS` or `.COMS` record: element references, syntax notes, masks.
fn structure(body: &str) -> Result<(Structure, Vec<String>), Fault> {
    let mut c = Cursor::new(body);
    let mut warnings = Vec::new();
    let elements = elem_refs(&mut c, 0)?;
    let mut syntax = Vec::new();
    if c.eat(b'+') {
        let notes = c.take(|b| b != b',');
        let mut note = String::new();
        for ch in notes.chars() {
            if ch.is_ascii_uppercase() && !note.is_empty() {
                syntax.push(std::mem::take(&mut note));
            }
            note.push(ch);
        }
        if !note.is_empty() {
            syntax.push(note);
        }
    }
    let mut masks = Vec::new();
    while c.eat(b',') {
        let text = c.take(|b| b != b',');
        let (mask, unknown) = mask_entries(text);
        if !unknown.is_empty() {
            warnings.push(format!(
                "mask {} holds {unknown:?}, which x12gate does not read: those positions are read as the standard has them",
                masks.len() + 1
            ));
        }
        masks.push(mask);
    }
    if let Some(b) = c.peek() {
        return Err(c.fault(format!("unexpected '{}'", b as char)));
    }
    Ok((
        Structure {
            line: 0,
            elements,
            syntax,
            masks,
        },
        warnings,
    ))
}

/// Element references up to the syntax notes, masks or a group's end.
fn elem_refs(c: &mut Cursor<'_>, depth: usize) -> Result<Vec<ElemRef>, Fault> {
    let in_group = depth > 0;
    if depth > MAX_DEPTH {
        return Err(c.fault(format!("groups nest more than {MAX_DEPTH} deep")));
    }
    let mut out = Vec::new();
    loop {
        match c.peek() {
            Some(b'[') => {
                c.bump();
                out.push(elem_ref(c)?);
                c.expect(b']')?;
            }
            Some(b'{') => {
                c.bump();
                let times = c.number()?;
                if times == 0 || times > 99 {
                    return Err(c.fault("a repeated group repeats 1 to 99 times"));
                }
                let group = elem_refs(c, depth + 1)?;
                c.expect(b'}')?;
                if out.len() + group.len().saturating_mul(times) > MAX_ELEMENTS {
                    return Err(c.fault(format!(
                        "more than {MAX_ELEMENTS} element positions once groups are repeated"
                    )));
                }
                for _ in 0..times {
                    out.extend(group.iter().cloned());
                }
            }
            Some(b'}') if in_group => return Ok(out),
            _ => return Ok(out),
        }
    }
}

/// `!353@2*1,M,5` inside `[...]` of `.SEGS`/`.COMS`.
fn elem_ref(c: &mut Cursor<'_>) -> Result<ElemRef, Fault> {
    let attr = c.peek().filter(|b| ATTRS.contains(b)).map(|b| {
        c.at += 1;
        b as char
    });
    let id = c.take(|b| b.is_ascii_alphanumeric()).to_string();
    if id.is_empty() {
        return Err(c.fault("expected an element or composite id"));
    }
    if c.eat(b'@') {
        c.number()?;
    }
    if c.eat(b'*') {
        return Err(c.fault(
            "a mask number on an element reference is not supported (use the segment's masks)",
        ));
    }
    let (req, repeat) = requirement_and_most(c)?;
    if c.peek() == Some(b',') {
        return Err(c.fault(
            "more than three fields in an element reference (length overrides are not supported)",
        ));
    }
    Ok(ElemRef {
        attr,
        id,
        req,
        repeat,
    })
}

/// A mask's entries, and any text in it that is not a mask entry.
fn mask_entries(text: &str) -> (Vec<MaskEntry>, String) {
    let mut c = Cursor::new(text);
    let mut out = Vec::new();
    let mut unknown = String::new();
    while let Some(b) = c.bump() {
        if b == b'*' {
            // A composite's mask, for the position before it.
            let n = c.number().ok();
            match out.last_mut() {
                Some(MaskEntry {
                    composite_mask: m @ None,
                    ..
                }) if n.is_some() => *m = n,
                _ => unknown.push('*'),
            }
            continue;
        }
        let attr = if b"#.!$-&".contains(&b) {
            b as char
        } else {
            unknown.push(b as char);
            '.'
        };
        out.push(MaskEntry {
            attr,
            composite_mask: None,
        });
    }
    (out, unknown)
}

/// `.ELMS`: `TYPE,MIN,MAX`.
fn element(body: &str) -> Result<ElementDef, String> {
    let fields: Vec<&str> = body.split(',').collect();
    let [t, min, max, ..] = fields.as_slice() else {
        return Err(format!("expected TYPE,MIN,MAX, found {:?}", shown(body)));
    };
    let len = |s: &str| {
        s.trim()
            .parse::<u16>()
            .map_err(|_| format!("length {:?} is not a number", shown(s)))
    };
    let (min, max) = (len(min)?, len(max)?);
    let problem = (min > max || max == 0)
        .then(|| format!("lengths {min} to {max}: expected MIN <= MAX, MAX > 0"));
    Ok(ElementDef {
        line: 0,
        data_type: t.trim().to_string(),
        min,
        max,
        problem,
    })
}

/// Codes at most this many from a range (`1:99999` would be a typo, not a list).
const RANGE_LIMIT: usize = 10_000;

/// `.CODES`: `A,B,C:F%[A,B]+850/2///2[C]+850/5///1`.
fn code_list(body: &str) -> Result<(CodeList, Vec<String>), String> {
    let mut warnings = Vec::new();
    let (base, narrowed) = match body.split_once('%') {
        Some((b, n)) => (b, Some(n)),
        None => (body, None),
    };
    let codes = codes(base)?;
    let mut subsets = Vec::new();
    if let Some(n) = narrowed {
        let mut rest = n;
        let mut index = 0;
        while let Some(after) = rest.strip_prefix('[') {
            index += 1;
            let (list, tail) = after
                .split_once(']')
                .ok_or_else(|| format!("narrowed list {index} is not closed with ']'"))?;
            let mut locations = Vec::new();
            let mut tail = tail;
            while let Some(loc) = tail.strip_prefix('+') {
                let end = loc.find(['+', '[']).unwrap_or(loc.len());
                let (text, more) = loc.split_at(end);
                locations.push(location(text)?);
                tail = more;
            }
            rest = tail;
            // `{...}` after a list's codes and `|` inside it are refinements this reader does
            // not know; the list is then not applied, and said so.
            let plain = list.replace("{}", "");
            if plain.contains(['{', '|', '}']) {
                warnings.push(format!(
                    "narrowed list {index} [{}] holds marks x12gate does not read ({{...}} or |): not applied",
                    shown(list)
                ));
                continue;
            }
            if locations.is_empty() {
                warnings.push(format!(
                    "narrowed list {index} [{}] names no place it applies: not applied",
                    shown(list)
                ));
                continue;
            }
            if plain.trim().is_empty() {
                warnings.push(format!(
                    "narrowed list {index} is empty: not applied (an element that takes no code is not expressible)"
                ));
                continue;
            }
            subsets.push((self::codes(&plain)?, locations));
        }
        if !rest.is_empty() {
            return Err(format!(
                "after '%', expected [codes] and +locations, found {:?}",
                shown(rest)
            ));
        }
    }
    Ok((
        CodeList {
            line: 0,
            codes,
            subsets,
        },
        warnings,
    ))
}

/// `850/2///2` or `850/12///1-4`.
fn location(text: &str) -> Result<Location, String> {
    let bad = || {
        format!(
            "location {:?}: expected SET/SEGMENT-ORDINAL///ELEMENT[-COMPONENT]",
            shown(text)
        )
    };
    let parts: Vec<&str> = text.split('/').collect();
    let [set, ordinal, "", "", position] = parts.as_slice() else {
        return Err(bad());
    };
    let (position, component) = match position.split_once('-') {
        Some((p, c)) => (p, Some(c.parse().map_err(|_| bad())?)),
        None => (*position, None),
    };
    Ok(Location {
        set: (*set).to_string(),
        ordinal: ordinal.parse().map_err(|_| bad())?,
        position: position.parse().map_err(|_| bad())?,
        component,
    })
}

/// A comma-separated code list with ranges (`D1:D6`, `1:12`).
fn codes(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.split_once(':') {
            None => out.push(entry.to_string()),
            Some((from, to)) => out.extend(range(from, to)?),
        }
        if out.len() > RANGE_LIMIT * 4 {
            return Err("more codes than any X12 list holds".into());
        }
    }
    Ok(out)
}

/// The codes from `from` to `to`: numbers when both are numbers, else counting in 0-9 then
/// A-Z from the right, the way the standard's lists are ordered.
fn range(from: &str, to: &str) -> Result<Vec<String>, String> {
    let bad = |why: &str| format!("range {from}:{to}: {why}");
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if numeric(from) && numeric(to) && from.len() != to.len() {
        let (a, b): (usize, usize) = (
            from.parse().map_err(|_| bad("not a number"))?,
            to.parse().map_err(|_| bad("not a number"))?,
        );
        if a > b || b - a > RANGE_LIMIT {
            return Err(bad("runs backwards or too far"));
        }
        return Ok((a..=b).map(|n| n.to_string()).collect());
    }
    if from.len() != to.len() || from.is_empty() || !from.is_ascii() || !to.is_ascii() {
        return Err(bad("both ends must have the same length"));
    }
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut cur: Vec<u8> = from.as_bytes().to_vec();
    let mut out = vec![from.to_string()];
    while cur.as_slice() != to.as_bytes() {
        // Increment from the right, carrying.
        let mut i = cur.len();
        loop {
            let Some(j) = i.checked_sub(1) else {
                return Err(bad("the end is not reached from the start"));
            };
            i = j;
            let Some(pos) = cur.get(i).and_then(|b| DIGITS.iter().position(|d| d == b)) else {
                return Err(bad("only digits and capital letters can be counted"));
            };
            match DIGITS.get(pos + 1) {
                Some(next) => {
                    if let Some(slot) = cur.get_mut(i) {
                        *slot = *next;
                    }
                    break;
                }
                None => {
                    if let Some(slot) = cur.get_mut(i) {
                        *slot = b'0';
                    }
                }
            }
        }
        out.push(String::from_utf8_lossy(&cur).into_owned());
        if out.len() > RANGE_LIMIT {
            return Err(bad("runs backwards or too far"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_read_references_loops_tables_and_positions() {
        let items =
            sets_body("^[ST,M]+20[!BEG*1,M][.CUR]{N1:200[N1*2][N2,,2]}^{:>1[PO1,M,>1]}[SE,M]")
                .unwrap();
        assert_eq!(items.len(), 6);
        let Item::Segment(beg) = &items[1] else {
            panic!()
        };
        assert_eq!(
            (beg.attr, beg.id.as_str(), beg.ordinal, beg.mask, beg.req),
            (Some('!'), "BEG", 2, Some(1), 'M')
        );
        let Item::Loop(n1) = &items[3] else { panic!() };
        assert_eq!((n1.id.as_deref(), n1.repeat), (Some("N1"), Some(200)));
        let Item::Segment(n2) = &n1.items[1] else {
            panic!()
        };
        assert_eq!((n2.ordinal, n2.max), (5, Some(2)));
        let Item::Loop(po1) = &items[4] else { panic!() };
        assert_eq!((po1.id.as_deref(), po1.repeat), (None, None));
        assert_eq!(sets_body("[ST,M][BEG,Q]").unwrap_err().0, 11);
        assert!(sets_body("{:2[N1]").unwrap_err().1.contains("not closed"));
        // Bounded: no nesting or repetition in a file exhausts the stack or memory.
        let deep = format!("{}[N1]{}", "{:2".repeat(100), "}".repeat(100));
        assert!(sets_body(&deep).unwrap_err().1.contains("nest more than"));
        let wide = format!("{}[1]{}", "{99".repeat(10), "}".repeat(10));
        assert!(structure(&wide)
            .unwrap_err()
            .1
            .contains("element positions"));
    }

    #[test]
    fn segments_read_groups_notes_and_masks() {
        let (s, w) = structure("[98,M][93,X]{2[66][67]}+R0203P0304,..#!,.*2#").unwrap();
        assert!(w.is_empty());
        assert_eq!(s.elements.len(), 6);
        assert_eq!(s.elements[1].req, 'X');
        assert_eq!(s.syntax, vec!["R0203", "P0304"]);
        assert_eq!(s.masks.len(), 2);
        assert_eq!(s.masks[0][2].attr, '#');
        assert_eq!(s.masks[0][3].attr, '!');
        assert_eq!(s.masks[1][0].composite_mask, Some(2));
        let (_, w) = structure("[98,M],.Q").unwrap();
        assert!(w[0].contains("\"Q\""), "{w:?}");
    }

    #[test]
    fn code_lists_expand_ranges_and_read_narrowed_lists() {
        let (l, w) = code_list("00,D1:D3,8:11%[00]+850/2///1[05{}]+850/7///2-1+810/3///4").unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(l.codes, vec!["00", "D1", "D2", "D3", "8", "9", "10", "11"]);
        assert_eq!(l.subsets.len(), 2);
        assert_eq!(l.subsets[1].1[0].component, Some(1));
        assert_eq!(l.subsets[1].1.len(), 2);
        assert_eq!(range("8Y", "91").unwrap(), vec!["8Y", "8Z", "90", "91"]);
        assert!(range("B", "A").is_err());
        let (l, w) = code_list("A,B%[A|9{|}]+850/2///1").unwrap();
        assert!(l.subsets.is_empty() && w.len() == 1);
    }

    #[test]
    fn no_single_byte_deletion_of_the_example_makes_the_reader_panic() {
        let text = include_str!("../../examples/acme-850.sef");
        for at in 0..text.len() {
            if !text.is_char_boundary(at) || !text.is_char_boundary(at + 1) {
                continue;
            }
            let cut = format!("{}{}", &text[..at], &text[at + 1..]);
            // Either way is fine; a panic is not.
            let _ = parse(&cut);
        }
    }

    #[test]
    fn malformed_files_name_the_line_and_section() {
        let e = parse(".VER 1.6\n.INI\nX,,004 010,X,X12-4010,T\n.SETS\n850=[ST,M][BEG,M\n")
            .unwrap_err();
        assert_eq!((e.line, e.section.as_str()), (5, ".SETS"));
        assert!(
            e.to_string().starts_with("line 5 (.SETS): set 850, column"),
            "{e}"
        );
        let e = parse(".INI\nX,,004 010,UN,D96A,T\n").unwrap_err();
        assert!(e.message.contains("agency \"UN\""), "{e}");
        let e = parse("850=[ST]\n").unwrap_err();
        assert_eq!(e.line, 1);
    }
}
