//! X12 to JSON and back, losslessly.
//!
//! The generic form mirrors the envelope tree: interchanges hold groups, groups hold sets,
//! sets hold segments. Control segments (ISA, GS, ST, SE, GE, IEA, TA1) are arrays of their
//! elements; body segments are `{"id": ..., "elements": [...]}`. An element is a string, or
//! `{"components": [...]}` when it holds the component separator, or `{"repeats": [...]}` when
//! it holds the repetition separator, so composites and repetitions are explicit and a
//! consumer never has to know the sender's delimiters.
//!
//! With a definition (`schemas/`), a set takes the structured form instead: `"schema":
//! "004010/850"` and `"content"`, its segments grouped into the definition's loops with named
//! elements (see `structured`). `render` accepts both forms.
//!
//! Text is UTF-8 when the whole input is; otherwise every byte maps to the character with the
//! same number (`"encoding": "latin1"`; otherwise `"utf8"`), which keeps any byte sequence representable and
//! reversible.

mod json;
mod structured;

pub use json::{
    interchange_document, one_set_document, parse_document, parse_document_as, render,
    render_document, set_body, text_of, write_document, write_interchange_document,
    write_interchange_document_with, write_set, write_set_with, Document, DocumentWriter, Encoding,
    Form, JsonDelimiters, JsonElement, JsonGroup, JsonInterchange, JsonSegment, JsonSet,
    OneSetEnvelope, ParseError, RenderError, ONE_SET_DELIMITERS,
};
