//! The JSON shape of the generic form, and its two directions.

use std::borrow::Cow;
use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use crate::x12::{
    Delimiters, Element, Interchange, Interchanges, Limits, ReadError, Segment, SegmentWriter,
    TransactionSet,
};

use super::structured;
use crate::schema::Schemas;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Encoding {
    Utf8,
    Latin1,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    pub encoding: Encoding,
    pub interchanges: Vec<JsonInterchange>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonDelimiters {
    pub element: String,
    pub component: String,
    pub repetition: Option<String>,
    pub segment: String,
    /// What follows every segment terminator when rendered: "", "\n" or "\r\n".
    pub line_ending: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonInterchange {
    pub delimiters: JsonDelimiters,
    /// ISA01..ISA16 exactly as sent, padding included.
    pub isa: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isb: Option<Vec<JsonElement>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ise: Option<Vec<JsonElement>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ta1: Vec<Vec<JsonElement>>,
    pub groups: Vec<JsonGroup>,
    pub iea: Option<Vec<JsonElement>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonGroup {
    pub gs: Vec<JsonElement>,
    pub sets: Vec<JsonSet>,
    pub ge: Option<Vec<JsonElement>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonSet {
    pub st: Vec<JsonElement>,
    /// The generic form of the body: every segment in order (absent in the structured form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<Vec<JsonSegment>>,
    /// The structured form's definition, `004010/850`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The structured form of the body: loops and named elements (see `structured`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<serde_json::Value>,
    pub se: Option<Vec<JsonElement>>,
}

/// Which JSON form sets with a definition take: a partner's `translation`, so the
/// configuration owns the word.
pub use crate::config::Form;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonSegment {
    pub id: String,
    pub elements: Vec<JsonElement>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JsonElement {
    Simple(String),
    Composite { components: Vec<String> },
    Repeated { repeats: Vec<JsonElement> },
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("byte {offset}: segment {ordinal} ({id}) stands outside any envelope; the generic form has no place for it")]
    Stray {
        offset: usize,
        ordinal: u32,
        id: String,
    },
    #[error("byte {offset}: segment {ordinal} (TA1) follows a functional group of an interchange read in parts (larger than a piece); the JSON form lists an interchange's TA1s before its groups, which are already written")]
    LateTa1 { offset: usize, ordinal: u32 },
    #[error("byte {offset}: segment {ordinal}: its id {id:?} holds the {which} {delimiter:?}, so no X12 could be written back from the JSON (a segment id is 2 or 3 letters or digits)")]
    SegmentId {
        offset: usize,
        ordinal: u32,
        id: String,
        which: &'static str,
        delimiter: char,
    },
    #[error(transparent)]
    Io(#[from] io::Error),
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{place}: {problem}")]
    Invalid { place: String, problem: String },
    #[error(transparent)]
    Io(#[from] io::Error),
}

#[derive(Clone, Copy)]
struct Text<'s> {
    encoding: Encoding,
    form: Form,
    /// The definitions sets are read against; `None`: the built-in ones.
    schemas: Option<&'s Schemas>,
}

/// A set as [`write_interchange_document`] writes it: the [`JsonSet`] it serialises as, with
/// the structured content still the tree that borrows from the input. It is written by
/// [`SetOut::write_to`]; the derived form is what the tests hold that to.
#[cfg_attr(test, derive(Serialize))]
struct SetOut<'a> {
    st: Vec<JsonElement>,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    segments: Option<Vec<JsonSegment>>,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    schema: Option<String>,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    content: Option<structured::Tree<'a>>,
    se: Option<Vec<JsonElement>>,
}

impl SetOut<'_> {
    /// Appends the set as JSON, the bytes `serde_json` gives for it, the structured content
    /// written by [`structured::Tree::write_json`].
    fn write_to(&self, out: &mut Vec<u8>) -> io::Result<()> {
        out.extend_from_slice(b"{\"st\":");
        serde_json::to_writer(&mut *out, &self.st)?;
        if let Some(segments) = &self.segments {
            out.extend_from_slice(b",\"segments\":");
            serde_json::to_writer(&mut *out, segments)?;
        }
        if let Some(schema) = &self.schema {
            out.extend_from_slice(b",\"schema\":");
            structured::write_json_str(schema, out)?;
        }
        if let Some(content) = &self.content {
            out.extend_from_slice(b",\"content\":");
            content.write_json(out)?;
        }
        out.extend_from_slice(b",\"se\":");
        serde_json::to_writer(&mut *out, &self.se)?;
        out.push(b'}');
        Ok(())
    }
}

impl<'s> Text<'s> {
    /// This text reading `ic` against its sender's guide, when the definitions carry one.
    fn for_interchange(self, ic: &Interchange<'_>) -> Text<'s> {
        Text {
            schemas: self
                .schemas
                .map(|s| s.for_sender(ic.isa.trimmed(5), ic.isa.trimmed(6))),
            ..self
        }
    }

    fn decode(&self, bytes: &[u8]) -> String {
        self.text(bytes).into_owned()
    }

    /// `bytes` as text, borrowed when they are that text already (UTF-8, or ASCII).
    fn text<'b>(&self, bytes: &'b [u8]) -> Cow<'b, str> {
        match self.encoding {
            // invariant: the whole input was checked to be UTF-8, and delimiters are ASCII,
            // so every slice of it cut at a delimiter is UTF-8 too.
            // (`from_utf8` first: it is several times faster than `from_utf8_lossy` on the
            // valid text that is the rule.)
            Encoding::Utf8 => std::str::from_utf8(bytes)
                .map_or_else(|_| String::from_utf8_lossy(bytes), Cow::Borrowed),
            // ASCII is the same text in latin1 and UTF-8.
            Encoding::Latin1 if bytes.is_ascii() => std::str::from_utf8(bytes)
                .map_or_else(|_| String::from_utf8_lossy(bytes), Cow::Borrowed),
            Encoding::Latin1 => bytes.iter().map(|b| char::from(*b)).collect(),
        }
    }

    fn element(&self, e: Element<'_>) -> JsonElement {
        if e.is_repeated() {
            return JsonElement::Repeated {
                repeats: e.repetitions().map(|r| self.single(r)).collect(),
            };
        }
        self.single(e)
    }

    fn single(&self, e: Element<'_>) -> JsonElement {
        if e.is_composite() {
            JsonElement::Composite {
                components: e.components().map(|c| self.decode(c)).collect(),
            }
        } else {
            JsonElement::Simple(self.decode(e.value))
        }
    }

    fn elements(&self, s: &Segment<'_>) -> Vec<JsonElement> {
        s.elements().map(|e| self.element(e)).collect()
    }

    /// A set in the structured form when it has a definition that holds it, else generic.
    fn set<'a>(&self, version: &[u8], set: &TransactionSet<'a>) -> SetOut<'a>
    where
        's: 'a,
    {
        let id = set.st.element(1).unwrap_or_default();
        let schemas: Result<&Schemas, &str> = match self.schemas {
            Some(s) => Ok(s),
            None => crate::schema::builtin(),
        };
        let structured = match (self.form, schemas) {
            (Form::Structured, Ok(schemas)) => schemas.find(version, id).and_then(|def| {
                let decode: &structured::Decode<'_> = &|b| self.text(b);
                structured::content(def, set, decode).map(|c| (def.name_key(), c))
            }),
            _ => None,
        };
        let (schema, content, segments) = match structured {
            Some((schema, content)) => (Some(schema), Some(content), None),
            None => (
                None,
                None,
                Some(
                    set.body
                        .segments()
                        .map(|s| JsonSegment {
                            id: self.decode(s.id),
                            elements: self.elements(&s),
                        })
                        .collect(),
                ),
            ),
        };
        SetOut {
            st: self.elements(&set.st),
            segments,
            schema,
            content,
            se: set.se.as_ref().map(|s| self.elements(s)),
        }
    }
}

/// The whole-tree form the streaming writer is held to in the tests.
#[cfg(test)]
impl SetOut<'_> {
    fn into_set(self) -> JsonSet {
        JsonSet {
            st: self.st,
            segments: self.segments,
            schema: self.schema,
            content: self.content.as_ref().map(structured::Tree::to_value),
            se: self.se,
        }
    }
}

#[cfg(test)]
impl Text<'_> {
    fn interchange(&self, ic: &Interchange<'_>) -> Result<JsonInterchange, ParseError> {
        if let Some(s) = ic.stray.first() {
            return Err(ParseError::Stray {
                offset: s.offset,
                ordinal: s.ordinal,
                id: s.id_str(),
            });
        }
        let d = ic.delimiters();
        let ch = |b: u8| self.decode(&[b]);
        let groups = ic
            .groups
            .iter()
            .map(|g| JsonGroup {
                gs: self.elements(&g.gs),
                sets: g
                    .sets
                    .iter()
                    .map(|set| {
                        self.set(g.gs.element(8).unwrap_or_default(), &set)
                            .into_set()
                    })
                    .collect(),
                ge: g.ge.as_ref().map(|s| self.elements(s)),
            })
            .collect();
        Ok(JsonInterchange {
            delimiters: JsonDelimiters {
                element: ch(d.element),
                component: ch(d.component),
                repetition: d.repetition.map(ch),
                segment: ch(d.segment),
                line_ending: self.decode(ic.line_ending()),
            },
            isa: ic.isa.fields.iter().map(|f| self.decode(f)).collect(),
            isb: ic.isb.as_ref().map(|s| self.elements(s)),
            ise: ic.ise.as_ref().map(|s| self.elements(s)),
            ta1: ic.ta1.iter().map(|s| self.elements(s)).collect(),
            groups,
            iea: ic.iea.as_ref().map(|s| self.elements(s)),
        })
    }
}

/// The translation of one interchange for the systems behind the gateway: a document with
/// this interchange alone, holding only the sets `keep(group, set)` accepts (0-based), so a
/// rejected set never reaches them. `input_is_utf8` says whether the whole file is UTF-8.
pub fn interchange_document(
    ic: &Interchange<'_>,
    input_is_utf8: bool,
    form: Form,
    keep: &dyn Fn(usize, usize) -> bool,
) -> Result<Vec<u8>, ParseError> {
    let mut out = Vec::new();
    write_interchange_document(ic, input_is_utf8, form, keep, &mut out)?;
    Ok(out)
}

/// [`interchange_document`] written as it is made, one set at a time: the bytes are those
/// of the `Document` serialised whole (compact JSON: the systems behind us are machines;
/// pretty-printed it was about 12 times the X12, compact about 4), but no more than one
/// set's JSON tree is ever held, where the whole interchange's tree of a large interchange
/// took many times the file.
pub fn write_interchange_document(
    ic: &Interchange<'_>,
    input_is_utf8: bool,
    form: Form,
    keep: &dyn Fn(usize, usize) -> bool,
    out: &mut dyn Write,
) -> Result<(), ParseError> {
    write_interchange_document_with(ic, input_is_utf8, form, None, keep, out)
}

/// [`write_interchange_document`] against `schemas` (the sender's guide when they carry
/// one; `None`: the built-in definitions).
pub fn write_interchange_document_with(
    ic: &Interchange<'_>,
    input_is_utf8: bool,
    form: Form,
    schemas: Option<&Schemas>,
    keep: &dyn Fn(usize, usize) -> bool,
    out: &mut dyn Write,
) -> Result<(), ParseError> {
    let encoding = if input_is_utf8 {
        Encoding::Utf8
    } else {
        Encoding::Latin1
    };
    let text = Text {
        encoding,
        form,
        schemas,
    }
    .for_interchange(ic);
    out.write_all(b"{\"encoding\":")?;
    serde_json::to_writer(&mut *out, &encoding).map_err(io::Error::from)?;
    out.write_all(b",\"interchanges\":[")?;
    text.write_interchange(ic, keep, None, out, &mut Written::default())?;
    out.write_all(b"]}\n")?;
    Ok(())
}

/// How far the JSON of an interchange read in parts
/// ([`crate::x12::Interchanges::in_parts`]) was written.
#[derive(Debug, Default)]
struct Written {
    /// Groups opened so far, and sets written so far of the open one.
    groups: usize,
    sets: usize,
}

impl Text<'_> {
    /// The JSON object of `ic` (the [`JsonInterchange`] it serialises as), written a set at a
    /// time, holding only the sets `keep(group, set)` accepts; a part of an interchange
    /// writes its share of the object, `written` saying what earlier parts wrote.
    /// `ta1`, when given, is every TA1 of the interchange, wherever it stood (its parts'
    /// are then not looked at).
    fn write_interchange(
        &self,
        ic: &Interchange<'_>,
        keep: &dyn Fn(usize, usize) -> bool,
        ta1: Option<&[Segment<'_>]>,
        out: &mut dyn Write,
        written: &mut Written,
    ) -> Result<(), ParseError> {
        // The generic form has no place for a segment outside the envelopes, nor (read in
        // parts, once the groups have begun) for a TA1 after a group: TA1s come before them.
        if let Some(s) = ic.stray.first() {
            return Err(ParseError::Stray {
                offset: s.offset,
                ordinal: s.ordinal,
                id: s.id_str(),
            });
        }
        if let Some(s) = ic
            .ta1
            .first()
            .filter(|_| !ic.is_first_part() && ta1.is_none())
        {
            return Err(ParseError::LateTa1 {
                offset: s.offset,
                ordinal: s.ordinal,
            });
        }
        let json = |out: &mut dyn Write, v: &dyn erased::Value| v.write(out);
        if ic.is_first_part() {
            *written = Written::default();
            let d = ic.delimiters();
            let ch = |b: u8| self.decode(&[b]);
            let delimiters = JsonDelimiters {
                element: ch(d.element),
                component: ch(d.component),
                repetition: d.repetition.map(ch),
                segment: ch(d.segment),
                line_ending: self.decode(ic.line_ending()),
            };
            out.write_all(b"{\"delimiters\":")?;
            json(out, &delimiters)?;
            out.write_all(b",\"isa\":")?;
            let isa: Vec<String> = ic.isa.fields.iter().map(|f| self.decode(f)).collect();
            json(out, &isa)?;
            for (name, segment) in [("isb", &ic.isb), ("ise", &ic.ise)] {
                if let Some(s) = segment {
                    write!(out, ",\"{name}\":")?;
                    json(out, &self.elements(s))?;
                }
            }
            let ta1 = ta1.unwrap_or(&ic.ta1);
            if !ta1.is_empty() {
                out.write_all(b",\"ta1\":")?;
                let ta1: Vec<Vec<JsonElement>> = ta1.iter().map(|s| self.elements(s)).collect();
                json(out, &ta1)?;
            }
            out.write_all(b",\"groups\":[")?;
        }
        let mut buf = Vec::new();
        for (gi, g) in ic.groups.iter().enumerate() {
            if ic.opens_group(gi) {
                if written.groups > 0 {
                    out.write_all(b",")?;
                }
                written.groups += 1;
                written.sets = 0;
                out.write_all(b"{\"gs\":")?;
                json(out, &self.elements(&g.gs))?;
                out.write_all(b",\"sets\":[")?;
            }
            let version = g.gs.element(8).unwrap_or_default();
            for (si, set) in g.sets.iter().enumerate() {
                if !keep(ic.group_index(gi), ic.set_index(gi, si)) {
                    continue;
                }
                delimiter_in_id(&set)?;
                // One write per set: serde_json writes a token at a time.
                buf.clear();
                if written.sets > 0 {
                    buf.push(b',');
                }
                written.sets += 1;
                self.set(version, &set).write_to(&mut buf)?;
                out.write_all(&buf)?;
            }
            if ic.closes_group(gi) {
                out.write_all(b"],\"ge\":")?;
                json(out, &g.ge.as_ref().map(|s| self.elements(s)))?;
                out.write_all(b"}")?;
            }
        }
        if ic.is_last_part() {
            out.write_all(b"],\"iea\":")?;
            json(out, &ic.iea.as_ref().map(|s| self.elements(s)))?;
            out.write_all(b"}")?;
        }
        Ok(())
    }
}

/// A segment id holding the component or repetition separator (the reader keeps the ids
/// it cannot take, the first few of a set, and reports them as `segment-id-invalid`): the
/// JSON would hold an id no X12 can carry, so the set is not written.
fn delimiter_in_id(set: &TransactionSet<'_>) -> Result<(), ParseError> {
    let d = set.st.delimiters;
    for s in &set.bad_ids {
        let named = [
            ("component separator", Some(d.component)),
            ("repetition separator", d.repetition),
        ];
        for (which, delimiter) in named {
            if let Some(b) = delimiter.filter(|b| s.id.contains(b)) {
                return Err(ParseError::SegmentId {
                    offset: s.offset,
                    ordinal: s.ordinal,
                    id: s.id_str(),
                    which,
                    delimiter: char::from(b),
                });
            }
        }
    }
    Ok(())
}

/// One set as its JSON (the object [`write_interchange_document`] gives it), for a business
/// document's own file; `input_is_utf8` as there.
pub fn write_set(
    set: &TransactionSet<'_>,
    version: &[u8],
    input_is_utf8: bool,
    form: Form,
    out: &mut dyn Write,
) -> io::Result<()> {
    write_set_with(set, version, input_is_utf8, form, None, out)
}

/// [`write_set`] against `schemas` (already the sender's; `None`: the built-in definitions).
pub fn write_set_with(
    set: &TransactionSet<'_>,
    version: &[u8],
    input_is_utf8: bool,
    form: Form,
    schemas: Option<&Schemas>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let encoding = if input_is_utf8 {
        Encoding::Utf8
    } else {
        Encoding::Latin1
    };
    let text = Text {
        encoding,
        form,
        schemas,
    };
    let mut buf = Vec::new();
    text.set(version, set).write_to(&mut buf)?;
    out.write_all(&buf)
}

/// Input bytes as JSON text, in the encoding a document of such input declares.
pub fn text_of(bytes: &[u8], input_is_utf8: bool) -> String {
    let encoding = if input_is_utf8 {
        Encoding::Utf8
    } else {
        Encoding::Latin1
    };
    Text {
        encoding,
        form: Form::Raw,
        schemas: None,
    }
    .decode(bytes)
}

/// Serialising a piece of the document to a `dyn Write` (serde's `Serialize` is not object
/// safe, so each piece goes through this small trait).
mod erased {
    pub trait Value {
        fn write(&self, out: &mut dyn std::io::Write) -> std::io::Result<()>;
    }

    impl<T: serde::Serialize> Value for T {
        fn write(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
            serde_json::to_writer(out, self).map_err(std::io::Error::from)
        }
    }
}

/// Writes `input` as a JSON document, one interchange at a time so memory follows the
/// largest interchange, not the file.
pub fn write_document(
    input: &[u8],
    limits: Limits,
    form: Form,
    out: &mut impl Write,
) -> Result<(), ParseError> {
    let mut doc = DocumentWriter::start(std::str::from_utf8(input).is_ok(), form, out)?;
    for ic in Interchanges::new(input, limits) {
        doc.interchange(&ic?, out)?;
    }
    doc.finish(out)
}

/// A JSON document written an interchange at a time, for a file read in pieces: the
/// document says once whether its text is UTF-8, so the caller knows that of the whole file
/// before it starts (a file that reads as a document is interchanges and whitespace, so it
/// is UTF-8 when each interchange's bytes are).
pub struct DocumentWriter<'s> {
    text: Text<'s>,
    written: usize,
    /// What the parts of an interchange read in parts have written of it so far.
    part: Written,
}

impl<'s> DocumentWriter<'s> {
    pub fn start(utf8: bool, form: Form, out: &mut impl Write) -> Result<Self, ParseError> {
        Self::start_with(utf8, form, None, out)
    }

    /// [`DocumentWriter::start`] reading sets against `schemas` (each interchange against
    /// its sender's guide when they carry one; `None`: the built-in definitions).
    pub fn start_with(
        utf8: bool,
        form: Form,
        schemas: Option<&'s Schemas>,
        out: &mut impl Write,
    ) -> Result<Self, ParseError> {
        let encoding = if utf8 {
            Encoding::Utf8
        } else {
            Encoding::Latin1
        };
        write!(
            out,
            "{{\"encoding\":{},\"interchanges\":[",
            serde_json::to_string(&encoding).map_err(io::Error::from)?
        )?;
        Ok(DocumentWriter {
            text: Text {
                encoding,
                form,
                schemas,
            },
            written: 0,
            part: Written::default(),
        })
    }

    /// Writes `ic`, a set at a time (a large interchange's sets are never held as JSON
    /// together), or the share of it that a part of it holds.
    pub fn interchange(
        &mut self,
        ic: &Interchange<'_>,
        out: &mut impl Write,
    ) -> Result<(), ParseError> {
        self.interchange_keeping(ic, &|_, _| true, out)
    }

    /// [`DocumentWriter::interchange`] holding only the sets `keep(group, set)` accepts
    /// (0-based, as the interchange counts them).
    pub fn interchange_keeping(
        &mut self,
        ic: &Interchange<'_>,
        keep: &dyn Fn(usize, usize) -> bool,
        out: &mut impl Write,
    ) -> Result<(), ParseError> {
        self.interchange_with(ic, keep, None, out)
    }

    /// [`DocumentWriter::interchange_keeping`] of a part of an interchange whose TA1s,
    /// wherever they stood, are `ta1` (gathered beforehand: an interchange read in parts
    /// twice): they are written where a whole reading puts them, before the groups.
    pub fn interchange_part(
        &mut self,
        ic: &Interchange<'_>,
        keep: &dyn Fn(usize, usize) -> bool,
        ta1: &[Segment<'_>],
        out: &mut impl Write,
    ) -> Result<(), ParseError> {
        self.interchange_with(ic, keep, Some(ta1), out)
    }

    fn interchange_with(
        &mut self,
        ic: &Interchange<'_>,
        keep: &dyn Fn(usize, usize) -> bool,
        ta1: Option<&[Segment<'_>]>,
        out: &mut impl Write,
    ) -> Result<(), ParseError> {
        if ic.is_first_part() {
            if self.written > 0 {
                out.write_all(b",")?;
            }
            self.written += 1;
        }
        let mut out: &mut dyn Write = out;
        self.text
            .for_interchange(ic)
            .write_interchange(ic, keep, ta1, &mut out, &mut self.part)
    }

    pub fn finish(self, out: &mut impl Write) -> Result<(), ParseError> {
        out.write_all(b"]}\n")?;
        Ok(())
    }
}

/// The JSON document of `input` in the generic form, in memory.
pub fn parse_document(input: &[u8], limits: Limits) -> Result<Document, ParseError> {
    parse_document_as(input, limits, Form::Raw)
}

/// The JSON document of `input` in `form`, in memory.
pub fn parse_document_as(input: &[u8], limits: Limits, form: Form) -> Result<Document, ParseError> {
    let mut buf = Vec::new();
    write_document(input, limits, form, &mut buf)?;
    serde_json::from_slice(&buf).map_err(|e| ParseError::Io(e.into()))
}

/// Writes one interchange: each segment is made in `w` and handed to `out` once whole, so
/// a segment refused half-way is never written.
struct Renderer<'o, W: Write> {
    out: &'o mut W,
    encoding: Encoding,
    w: SegmentWriter<'static>,
}

fn invalid(place: impl Into<String>, problem: impl Into<String>) -> RenderError {
    RenderError::Invalid {
        place: place.into(),
        problem: problem.into(),
    }
}

impl<W: Write> Renderer<'_, W> {
    fn encode(&self, s: &str, place: &str) -> Result<Vec<u8>, RenderError> {
        match self.encoding {
            Encoding::Utf8 => Ok(s.as_bytes().to_vec()),
            Encoding::Latin1 => s
                .chars()
                .map(|c| {
                    u8::try_from(u32::from(c))
                        .map_err(|_| invalid(place, format!("character {c:?} is not latin1")))
                })
                .collect(),
        }
    }

    /// A value's bytes, refused when they hold one of the interchange's delimiters.
    fn value(&self, s: &str, place: &str) -> Result<Vec<u8>, RenderError> {
        let bytes = self.encode(s, place)?;
        let d = self.w.delimiters();
        let mut delims = vec![d.element, d.component, d.segment];
        delims.extend(d.repetition);
        if let Some(b) = bytes.iter().find(|b| delims.contains(b)) {
            return Err(invalid(
                place,
                format!("value {s:?} contains the delimiter {:?}", char::from(*b)),
            ));
        }
        Ok(bytes)
    }

    /// The element's value after its separator: components and repetitions joined by theirs.
    fn element(
        &mut self,
        e: &JsonElement,
        place: &str,
        allow_repeat: bool,
    ) -> Result<(), RenderError> {
        match e {
            JsonElement::Simple(s) => {
                let v = self.value(s, place)?;
                self.w.value(v);
            }
            JsonElement::Composite { components } => {
                for (i, c) in components.iter().enumerate() {
                    let v = self.value(c, place)?;
                    if i == 0 {
                        self.w.value(v);
                    } else {
                        self.w.component(&v);
                    }
                }
            }
            JsonElement::Repeated { repeats } => {
                if !allow_repeat || self.w.delimiters().repetition.is_none() {
                    return Err(invalid(
                        place,
                        "repeats need a repetition separator and cannot nest",
                    ));
                }
                for (i, x) in repeats.iter().enumerate() {
                    if i > 0 {
                        self.w.repetition(b"");
                    }
                    self.element(x, place, false)?;
                }
            }
        }
        Ok(())
    }

    /// Hands the segment made to the output.
    fn flush(&mut self) -> Result<(), RenderError> {
        self.out.write_all(self.w.bytes())?;
        self.w.clear();
        Ok(())
    }

    fn segment(
        &mut self,
        id: &str,
        elements: &[JsonElement],
        place: &str,
    ) -> Result<(), RenderError> {
        let id_bytes = self.value(id, place)?;
        // An empty id is written as read (`*A*B~`: a finding, not a reason to lose the
        // segment); one that begins with a line break or a blank would be skipped by the
        // reader as layout, so it could not come back the same.
        if id.starts_with(['\r', '\n', ' ', '\t']) {
            return Err(invalid(
                place,
                format!("segment id {id:?} must not start with a line break, space or tab"),
            ));
        }
        self.w.start(&id_bytes);
        for (i, e) in elements.iter().enumerate() {
            self.w.element(b"");
            self.element(e, &format!("{place} element {:02}", i + 1), true)?;
        }
        if self.w.delimiters().segment == b'\n' && self.w.bytes().last() == Some(&b'\r') {
            // It would read back as part of the line ending.
            return Err(invalid(
                place,
                "a segment cannot end in CR when segments end at LF",
            ));
        }
        self.w.end();
        self.flush()
    }
}

/// A set's body as generic segments: its `segments` (generic form) or its `content` read by
/// its `schema` (structured form), in the definition's order; `place` names it in errors.
pub fn set_body(set: &JsonSet, place: &str) -> Result<Vec<JsonSegment>, RenderError> {
    match (&set.schema, &set.content, &set.segments) {
        (Some(schema), Some(content), None) => structured_segments(schema, content, place),
        (None, None, Some(segments)) => Ok(segments.clone()),
        (None, None, None) => Ok(Vec::new()),
        (_, _, Some(_)) if set.content.is_some() => Err(invalid(
            place,
            "a set has either `segments` (generic) or `content` (structured), not both",
        )),
        _ => Err(invalid(
            place,
            "a structured set needs both `schema` and `content`",
        )),
    }
}

/// The body of a structured set as generic segments, in the definition's order.
fn structured_segments(
    schema: &str,
    content: &serde_json::Value,
    place: &str,
) -> Result<Vec<JsonSegment>, RenderError> {
    let def = crate::schema::builtin()
        .map_err(|e| invalid(place, e))?
        .find_key(schema)
        .ok_or_else(|| {
            invalid(
                place,
                format!("no definition {schema:?} (expected e.g. \"004010/850\")"),
            )
        })?;
    let segments = structured::segments(def, content, &format!("{place} content"))
        .map_err(|(p, problem)| invalid(p, problem))?;
    Ok(segments
        .into_iter()
        .map(|(id, elements)| JsonSegment {
            id,
            elements: elements
                .into_iter()
                .map(|reps| {
                    let mut reps: Vec<JsonElement> = reps
                        .into_iter()
                        .map(|mut parts| {
                            if parts.len() > 1 {
                                JsonElement::Composite { components: parts }
                            } else {
                                JsonElement::Simple(parts.pop().unwrap_or_default())
                            }
                        })
                        .collect();
                    if reps.len() > 1 {
                        JsonElement::Repeated { repeats: reps }
                    } else {
                        reps.pop().unwrap_or(JsonElement::Simple(String::new()))
                    }
                })
                .collect(),
        })
        .collect())
}

/// Segment ids the reader treats as envelope; a body segment with one of them would not read back.
const CONTROL_IDS: [&str; 6] = ["ISA", "IEA", "GS", "GE", "ST", "SE"];

/// A delimiter: one character, one byte in the document's encoding (latin1 allows 0x80-0xFF).
fn one_byte(s: &str, encoding: Encoding, what: &str, place: &str) -> Result<u8, RenderError> {
    let mut chars = s.chars();
    let byte = match (chars.next(), chars.next(), encoding) {
        (Some(c), None, Encoding::Utf8) if c.is_ascii() => u8::try_from(c).ok(),
        (Some(c), None, Encoding::Latin1) => u8::try_from(c).ok(),
        _ => None,
    };
    byte.ok_or_else(|| {
        invalid(
            place,
            format!("the {what} delimiter must be one character of one byte, not {s:?}"),
        )
    })
}

/// Delimiters a reader can tell apart, by the rules the ISA is read with: X12 written with
/// an element separator equal to the terminator (or any two the same) cannot be read back.
fn readable_delimiters(d: Delimiters, place: &str) -> Result<(), RenderError> {
    let shown = |b: u8| format!("{:?}", char::from(b));
    let mut named = vec![
        ("element", d.element),
        ("component", d.component),
        ("segment", d.segment),
    ];
    named.extend(d.repetition.map(|b| ("repetition", b)));
    for (what, b) in &named {
        if b.is_ascii_alphanumeric() || *b == b' ' {
            return Err(invalid(
                place,
                format!(
                    "the {what} delimiter {} is a letter, a digit or a space, which data holds",
                    shown(*b)
                ),
            ));
        }
    }
    for (i, (a, x)) in named.iter().enumerate() {
        if let Some((b, _)) = named.iter().skip(i + 1).find(|(_, y)| y == x) {
            return Err(invalid(
                place,
                format!(
                    "the {a} and {b} delimiters are both {}: the X12 written could not be read back",
                    shown(*x)
                ),
            ));
        }
    }
    if matches!(d.element, b'\r' | b'\n') {
        return Err(invalid(
            place,
            "the element delimiter may not be a line ending",
        ));
    }
    Ok(())
}

/// Renders a JSON document (the generic form) as canonical X12: the interchange's own
/// delimiters, its line ending after every segment.
// The envelope written in the order X12 puts it (ISA, each GS, each ST..SE, GE, IEA), each
// level checked where it is written so an error names its place.
pub fn render_document(json: &[u8], out: &mut impl Write) -> Result<(), RenderError> {
    let doc: Document = match serde_json::from_slice(json) {
        Ok(doc) => doc,
        // A business document's file in `out/` is written back as the interchange it came in.
        Err(e) => match serde_json::from_slice::<DocumentFile>(json) {
            Ok(file) => file.document()?,
            Err(_) => return Err(e.into()),
        },
    };
    render(&doc, out)
}

/// The envelope around one set standing alone: a business document's file in `out/`
/// (`envelope`), or one of our own documents to a partner.
#[derive(Debug, Clone, Deserialize)]
pub struct OneSetEnvelope {
    /// ISA05:ISA06 and ISA07:ISA08, `QUAL:ID`.
    pub sender: String,
    pub receiver: String,
    /// ISA09 (YYMMDD) and ISA10 (HHMM).
    pub isa_date: String,
    pub isa_time: String,
    /// ISA13, nine digits.
    pub isa13: String,
    /// ISA15.
    pub usage: String,
    pub gs01: String,
    pub gs02: String,
    pub gs03: String,
    pub gs04: String,
    pub gs05: String,
    pub gs06: String,
    pub gs08: String,
    pub st02: String,
}

/// The delimiters a set standing alone is enveloped in unless told otherwise: the ones
/// most translators expect.
pub const ONE_SET_DELIMITERS: Delimiters = Delimiters {
    element: b'*',
    component: b'>',
    repetition: Some(b'^'),
    segment: b'~',
};

/// One interchange of one group of one set, `body` its segments between ST and SE (ST03 on
/// in `st_rest`): ISA12 from GS08's release (00401 when it names none), ISA11 the
/// repetition separator from 00402 on, SE01 counted.
pub fn one_set_document(
    env: &OneSetEnvelope,
    (delimiters, line_ending): (Delimiters, &str),
    set_id: &str,
    st_rest: &[JsonElement],
    body: Vec<JsonSegment>,
) -> Document {
    let five = env.gs08.get(..5).unwrap_or_default();
    let isa12 = if crate::x12::is_control_version(five.as_bytes()) {
        five
    } else {
        "00401"
    };
    let repetition = (isa12 >= "00402")
        .then_some(delimiters.repetition)
        .flatten();
    let pad = |s: &str, n: usize| format!("{s:<n$}");
    let (sq, sid) = env.sender.split_once(':').unwrap_or(("ZZ", &env.sender));
    let (rq, rid) = env
        .receiver
        .split_once(':')
        .unwrap_or(("ZZ", &env.receiver));
    let char_of = |b: u8| char::from(b).to_string();
    let isa = vec![
        "00".into(),
        pad("", 10),
        "00".into(),
        pad("", 10),
        pad(sq, 2),
        pad(sid, 15),
        pad(rq, 2),
        pad(rid, 15),
        env.isa_date.clone(),
        env.isa_time.clone(),
        repetition.map_or("U".into(), char_of),
        isa12.to_string(),
        env.isa13.clone(),
        "0".into(),
        env.usage.clone(),
        char_of(delimiters.component),
    ];
    let simple = |v: &str| JsonElement::Simple(v.to_string());
    let gs = [
        &env.gs01, &env.gs02, &env.gs03, &env.gs04, &env.gs05, &env.gs06, "X", &env.gs08,
    ]
    .map(&simple)
    .to_vec();
    let count = (body.len() + 2).to_string();
    let set = JsonSet {
        st: [simple(set_id), simple(&env.st02)]
            .into_iter()
            .chain(st_rest.iter().cloned())
            .collect(),
        segments: Some(body),
        schema: None,
        content: None,
        se: Some(vec![simple(&count), simple(&env.st02)]),
    };
    Document {
        encoding: Encoding::Utf8,
        interchanges: vec![JsonInterchange {
            delimiters: JsonDelimiters {
                element: char_of(delimiters.element),
                component: char_of(delimiters.component),
                repetition: repetition.map(char_of),
                segment: char_of(delimiters.segment),
                line_ending: line_ending.to_string(),
            },
            isa,
            isb: None,
            ise: None,
            ta1: Vec::new(),
            groups: vec![JsonGroup {
                gs,
                sets: vec![set],
                ge: Some(vec![simple("1"), simple(&env.gs06)]),
            }],
            iea: Some(vec![simple("1"), simple(&env.isa13)]),
        }],
    }
}

/// A business document's file in `out/`: the set and the envelope it came in (its other
/// fields, the delivery's, are not needed to write it back).
#[derive(Deserialize)]
struct DocumentFile {
    envelope: OneSetEnvelope,
    set: JsonSet,
}

impl DocumentFile {
    /// The interchange it came in, as near as its file says (the delimiters are ours).
    fn document(self) -> Result<Document, RenderError> {
        let set_id = match self.set.st.first() {
            Some(JsonElement::Simple(id)) => id.clone(),
            _ => return Err(invalid("set", "ST01 must be the set's id")),
        };
        let body = set_body(&self.set, "set")?;
        let rest = self.set.st.get(2..).unwrap_or_default();
        Ok(one_set_document(
            &self.envelope,
            (ONE_SET_DELIMITERS, "\n"),
            &set_id,
            rest,
            body,
        ))
    }
}

/// [`render_document`] of a document already read.
pub fn render(doc: &Document, out: &mut impl Write) -> Result<(), RenderError> {
    for (n, ic) in doc.interchanges.iter().enumerate() {
        let place = format!("interchange {}", n + 1);
        let mut r = Renderer {
            out: &mut *out,
            encoding: doc.encoding,
            w: writer_for(&ic.delimiters, doc.encoding, &place)?,
        };
        r.isa(&ic.isa, &place)?;
        if let Some(isb) = &ic.isb {
            r.segment("ISB", isb, &format!("{place} ISB"))?;
        }
        if let Some(ise) = &ic.ise {
            r.segment("ISE", ise, &format!("{place} ISE"))?;
        }
        for (i, ta1) in ic.ta1.iter().enumerate() {
            r.segment("TA1", ta1, &format!("{place} TA1 {}", i + 1))?;
        }
        for (g, group) in ic.groups.iter().enumerate() {
            let gplace = format!("{place} group {}", g + 1);
            r.segment("GS", &group.gs, &gplace)?;
            for (s, set) in group.sets.iter().enumerate() {
                r.set(set, &format!("{gplace} set {}", s + 1))?;
            }
            if let Some(ge) = &group.ge {
                r.segment("GE", ge, &gplace)?;
            }
        }
        if let Some(iea) = &ic.iea {
            r.segment("IEA", iea, &place)?;
        }
    }
    Ok(())
}

/// A writer in the interchange's delimiters and line ending, once they are known to read back.
fn writer_for(
    d: &JsonDelimiters,
    encoding: Encoding,
    place: &str,
) -> Result<SegmentWriter<'static>, RenderError> {
    let delimiters = Delimiters {
        element: one_byte(&d.element, encoding, "element", place)?,
        component: one_byte(&d.component, encoding, "component", place)?,
        repetition: d
            .repetition
            .as_deref()
            .map(|s| one_byte(s, encoding, "repetition", place))
            .transpose()?,
        segment: one_byte(&d.segment, encoding, "segment", place)?,
    };
    readable_delimiters(delimiters, place)?;
    let line_ending: &'static [u8] = match d.line_ending.as_str() {
        "" => b"",
        "\n" => b"\n",
        "\r\n" => b"\r\n",
        "\r" => b"\r",
        _ => {
            return Err(invalid(
                place,
                "line_ending must be \"\", \"\\n\", \"\\r\\n\" or \"\\r\"",
            ))
        }
    };
    Ok(SegmentWriter::new(delimiters, line_ending))
}

impl<W: Write> Renderer<'_, W> {
    /// The ISA, read by its element separators alone (ISA11 and ISA16 *are* delimiters, and
    /// other fields may hold the others), so only the element separator is refused.
    fn isa(&mut self, isa: &[String], place: &str) -> Result<(), RenderError> {
        if isa.len() != 16 {
            return Err(invalid(
                place,
                format!("the ISA needs 16 elements, found {}", isa.len()),
            ));
        }
        let element = self.w.delimiters().element;
        self.w.start(b"ISA");
        for (i, s) in isa.iter().enumerate() {
            self.w.element(b"");
            let bytes = self.encode(s, place)?;
            if bytes.contains(&element) {
                return Err(invalid(
                    format!("{place} ISA{:02}", i + 1),
                    format!("value {s:?} contains the element separator"),
                ));
            }
            self.w.value(bytes);
        }
        self.w.end();
        self.flush()
    }

    /// One set, ST to SE: its body from `content` (structured) or `segments` (generic).
    fn set(&mut self, set: &JsonSet, splace: &str) -> Result<(), RenderError> {
        self.segment("ST", &set.st, splace)?;
        let from_content = match (&set.schema, &set.content) {
            (Some(schema), Some(content)) => structured_segments(schema, content, splace)?,
            (None, None) => Vec::new(),
            _ => {
                return Err(invalid(
                    splace,
                    "a structured set needs both `schema` and `content`",
                ))
            }
        };
        let generic = set.segments.as_deref().unwrap_or_default();
        if set.content.is_some() && set.segments.is_some() {
            return Err(invalid(
                splace,
                "a set has either `segments` (generic) or `content` (structured), not both",
            ));
        }
        for (k, seg) in from_content.iter().chain(generic).enumerate() {
            if CONTROL_IDS.contains(&seg.id.as_str()) {
                return Err(invalid(
                    format!("{splace} segment {}", k + 2),
                    format!(
                        "{} is an envelope segment and cannot stand in a set's body",
                        seg.id
                    ),
                ));
            }
            self.segment(
                &seg.id,
                &seg.elements,
                &format!("{splace} segment {} ({})", k + 2, seg.id),
            )?;
        }
        if let Some(se) = &set.se {
            self.segment("SE", se, splace)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document written set by set is byte for byte the document built whole and
    /// serialised at once, in both forms and with sets left out.
    #[test]
    fn streamed_translation_is_the_whole_document() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut compared = 0;
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "x12") {
                continue;
            }
            let input = std::fs::read(&path).unwrap();
            let utf8 = std::str::from_utf8(&input).is_ok();
            for ic in Interchanges::new(&input, Limits::default()).flatten() {
                for form in [Form::Raw, Form::Structured] {
                    for keep in [&(|_, _| true) as &dyn Fn(usize, usize) -> bool, &|_, s| {
                        s % 2 == 1
                    }] {
                        let streamed = interchange_document(&ic, utf8, form, keep);
                        let encoding = if utf8 {
                            Encoding::Utf8
                        } else {
                            Encoding::Latin1
                        };
                        let whole = Text {
                            encoding,
                            form,
                            schemas: None,
                        }
                        .interchange(&ic)
                        .map(|mut json| {
                            for (g, group) in json.groups.iter_mut().enumerate() {
                                let mut s = 0;
                                group.sets.retain(|_| {
                                    s += 1;
                                    keep(g, s - 1)
                                });
                            }
                            let mut v = serde_json::to_vec(&Document {
                                encoding,
                                interchanges: vec![json],
                            })
                            .unwrap();
                            v.push(b'\n');
                            v
                        });
                        match (streamed, whole) {
                            (Ok(a), Ok(b)) => {
                                assert!(a == b, "{}: {form:?}", path.display());
                                compared += 1;
                            }
                            (Err(_), Err(_)) => {}
                            (a, b) => panic!("{}: {a:?} vs {b:?}", path.display()),
                        }
                    }
                }
            }
        }
        assert!(compared > 40, "{compared}");
    }

    /// One interchange of many sets in three groups (one of sets without a definition,
    /// written in the generic form), then a small one.
    fn large_interchange(sets: usize) -> Vec<u8> {
        let mut out = String::from("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240115*0930*U*00401*000000101*1*P*>~\n");
        for (g, (gs01, st01)) in [("PO", "850"), ("IN", "810"), ("PO", "850")]
            .iter()
            .enumerate()
        {
            out += &format!("GS*{gs01}*ACME*X12GATE*20240115*0930*{g}*X*004010~\n");
            for i in 0..sets {
                out += &format!("ST*{st01}*{i:04}~\nBEG*00*SA*PO-{i}**20240115~\nN1*ST*ACME DC {i}*92*0007~\nPO1*1*{i}*EA*4.25*PE*UP*012345678905~\nCTT*1~\nSE*6*{i:04}~\n");
            }
            out += &format!("GE*{sets}*{g}~\n");
        }
        out += "IEA*3*000000101~\n";
        out += "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240115*0930*U*00401*000000102*1*P*>~GS*PO*ACME*X12GATE*20240115*0930*9*X*004010~ST*850*0001~BEG*00*SA*PO-1**20240115~SE*3*0001~GE*1*9~IEA*1*000000102~";
        out.into_bytes()
    }

    /// The document of `input` read in pieces of `window` bytes, a large interchange in
    /// parts; and how many parts there were that did not end their interchange.
    fn in_parts(input: &[u8], window: usize, form: Form) -> (Vec<u8>, usize) {
        let from = Box::new(std::io::Cursor::new(input.to_vec()));
        let mut reader =
            crate::input::Reader::new(from, "large", Limits::default(), window).in_parts();
        let mut out = Vec::new();
        let mut doc = DocumentWriter::start(true, form, &mut out).unwrap();
        let mut cut = 0;
        while let Some(piece) = reader.next_piece().unwrap() {
            let mut read = piece.interchanges();
            for ic in read.by_ref() {
                let ic = ic.unwrap();
                cut += usize::from(!ic.is_last_part());
                doc.interchange(&ic, &mut out).unwrap();
            }
            let resume = read.resume();
            reader.advance(resume);
        }
        doc.finish(&mut out).unwrap();
        (out, cut)
    }

    #[test]
    fn a_document_read_in_parts_is_the_document_read_whole() {
        let input = large_interchange(40);
        for form in [Form::Structured, Form::Raw] {
            let mut whole = Vec::new();
            write_document(&input, Limits::default(), form, &mut whole).unwrap();
            let document: Document = serde_json::from_slice(&whole).unwrap();
            assert_eq!(document.interchanges.len(), 2);
            assert_eq!(document.interchanges[0].groups[1].sets.len(), 40);
            for window in [600, 1_000, 2_500, 7_000, 100_000] {
                let (parts, cut) = in_parts(&input, window, form);
                assert!(cut > 0 || window >= input.len(), "window {window}");
                assert!(parts == whole, "{form:?}, window {window}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        #[test]
        fn in_parts_at_any_window_the_document_is_the_same(share in 1usize..100, sets in 1usize..30) {
            let input = large_interchange(sets);
            // A share of the input (at least what the ISA needs), so that most windows cut it.
            let window = (input.len() * share / 100).max(600);
            let mut whole = Vec::new();
            write_document(&input, Limits::default(), Form::Structured, &mut whole).unwrap();
            proptest::prop_assert!(in_parts(&input, window, Form::Structured).0 == whole);
        }
    }

    const X: &str = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000001*0*P*:~\r\n\
GS*PO*ACME*X12GATE*20240101*1200*1*X*005010~\r\nST*850*0001~\r\nBEG*00*SA*PO1**20240101~\r\n\
REF*ZZ*A:B^C~\r\nSE*4*0001~\r\nGE*1*1~\r\nIEA*1*000000001~\r\n";

    #[test]
    fn round_trip_is_byte_identical_for_canonical_input() {
        let doc = parse_document(X.as_bytes(), Limits::default()).unwrap();
        let seg = &doc.interchanges[0].groups[0].sets[0]
            .segments
            .as_ref()
            .unwrap()[1];
        assert_eq!(seg.id, "REF");
        assert_eq!(
            seg.elements[1],
            JsonElement::Repeated {
                repeats: vec![
                    JsonElement::Composite {
                        components: vec!["A".into(), "B".into()]
                    },
                    JsonElement::Simple("C".into())
                ]
            }
        );
        let json = serde_json::to_vec(&doc).unwrap();
        let mut out = Vec::new();
        render_document(&json, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), X);
    }

    #[test]
    fn a_segment_without_an_id_comes_back_as_it_was() {
        let x = X.replace("REF*", "*");
        let doc = parse_document(x.as_bytes(), Limits::default()).unwrap();
        let mut out = Vec::new();
        render_document(&serde_json::to_vec(&doc).unwrap(), &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), x);
        // An id the reader would skip as layout cannot be written.
        let mut doc = doc;
        if let Some(segments) = doc.interchanges[0].groups[0].sets[0].segments.as_mut() {
            segments[1].id = " REF".into();
        }
        let err = render_document(&serde_json::to_vec(&doc).unwrap(), &mut Vec::new());
        assert!(err.is_err());
    }

    #[test]
    fn latin1_bytes_survive() {
        let x = X.replace("PO1", "P\u{e9}").into_bytes();
        let mut latin = Vec::new();
        for c in String::from_utf8(x).unwrap().chars() {
            latin.push(u8::try_from(u32::from(c)).unwrap());
        }
        let doc = parse_document(&latin, Limits::default()).unwrap();
        assert_eq!(doc.encoding, Encoding::Latin1);
        let mut out = Vec::new();
        render_document(&serde_json::to_vec(&doc).unwrap(), &mut out).unwrap();
        assert_eq!(out, latin);
    }

    /// Delimiters the reader could not tell apart are refused, naming both; the X12 written
    /// with distinct ones reads back.
    #[test]
    fn render_refuses_delimiters_that_collide() {
        let doc = parse_document(X.as_bytes(), Limits::default()).unwrap();
        let with = |f: &dyn Fn(&mut JsonDelimiters)| {
            let mut doc = doc.clone();
            f(&mut doc.interchanges[0].delimiters);
            let mut out = Vec::new();
            render_document(&serde_json::to_vec(&doc).unwrap(), &mut out).map(|()| out)
        };
        for (change, expected) in [
            (
                &(|d: &mut JsonDelimiters| d.segment = "*".into()) as &dyn Fn(&mut JsonDelimiters),
                "interchange 1: the element and segment delimiters are both '*'",
            ),
            (
                &|d: &mut JsonDelimiters| d.component = "~".into(),
                "the component and segment delimiters are both '~'",
            ),
            (
                &|d: &mut JsonDelimiters| d.repetition = Some("*".into()),
                "the element and repetition delimiters are both '*'",
            ),
            (
                &|d: &mut JsonDelimiters| d.element = "E".into(),
                "the element delimiter 'E' is a letter",
            ),
            (
                &|d: &mut JsonDelimiters| d.segment = " ".into(),
                "the segment delimiter ' ' is a letter, a digit or a space",
            ),
            (
                &|d: &mut JsonDelimiters| d.element = "\n".into(),
                "the element delimiter may not be a line ending",
            ),
        ] {
            let err = with(change).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
        let out = with(&|d: &mut JsonDelimiters| {
            d.element = "|".into();
            d.segment = "\n".into();
            d.line_ending = String::new();
        })
        .unwrap();
        let again = parse_document(&out, Limits::default()).unwrap();
        assert_eq!(again.interchanges[0].delimiters.element, "|");
        assert_eq!(
            again.interchanges[0].groups[0].sets[0].segments,
            doc.interchanges[0].groups[0].sets[0].segments
        );
    }

    #[test]
    fn render_refuses_a_delimiter_inside_a_value() {
        let mut doc = parse_document(X.as_bytes(), Limits::default()).unwrap();
        doc.interchanges[0].groups[0].sets[0]
            .segments
            .as_mut()
            .unwrap()[0]
            .elements[0] = JsonElement::Simple("a*b".into());
        let err = render_document(&serde_json::to_vec(&doc).unwrap(), &mut Vec::new()).unwrap_err();
        assert!(
            err.to_string()
                .contains("interchange 1 group 1 set 1 segment 2 (BEG) element 01"),
            "{err}"
        );
    }

    /// A set written without serde's serializer is the bytes serde gives for it, in both
    /// forms, whatever its text holds: a quote, a backslash, a control character, non-ASCII.
    #[test]
    fn a_set_is_written_as_serde_serialises_it() {
        // The second set ends without its SE.
        let x = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000001*0*P*:~\
GS*PO*ACME*X12GATE*20240101*1200*1*X*005010~ST*850*0001~BEG*00*SA*P\"O1*R\\1*20240101~\
REF*ZZ*a\tb~N1*ST*Z\u{fc}rich \u{1}~PO1*1*2*EA*3.5~CTT*1~SE*7*0001~\
ST*850*0002~BEG*00*SA*PO2**20240101~GE*2*1~IEA*1*000000001~";
        let ic = Interchanges::new(x.as_bytes(), Limits::default())
            .next()
            .unwrap()
            .unwrap();
        for form in [Form::Raw, Form::Structured] {
            let text = Text {
                encoding: Encoding::Utf8,
                form,
                schemas: None,
            };
            let mut written = Vec::new();
            let mut ends = Vec::new();
            for si in 0..2 {
                let set = ic.groups[0].sets.get(si).unwrap();
                let out = text.set(b"005010", &set);
                ends.push(out.se.is_some());
                let mut one = Vec::new();
                out.write_to(&mut one).unwrap();
                let serialised = serde_json::to_vec(&out).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&one),
                    String::from_utf8_lossy(&serialised),
                    "{form:?}, set {si}"
                );
                written.extend(one);
            }
            assert_eq!(ends, [true, false], "{form:?}");
            let written = String::from_utf8_lossy(&written);
            assert_eq!(written.contains("\"content\""), form == Form::Structured);
            for odd in [
                "P\\\"O1",
                "R\\\\1",
                "a\\tb",
                "Z\u{fc}rich \\u0001",
                "\"se\":null",
            ] {
                assert!(written.contains(odd), "{form:?}: {odd}");
            }
        }
    }

    proptest::proptest! {
        /// Any text, escaped or copied, is the JSON string serde makes of it.
        #[test]
        fn any_text_is_written_as_serde_writes_it(text in ".*", bytes in proptest::collection::vec(0u8..0x80, 0..40)) {
            for s in [text, String::from_utf8(bytes).unwrap()] {
                let mut written = Vec::new();
                structured::write_json_str(&s, &mut written).unwrap();
                proptest::prop_assert_eq!(written, serde_json::to_vec(&s).unwrap());
            }
        }
    }
}
