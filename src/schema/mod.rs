//! Transaction-set schemas: what each set may contain, segment by segment and element by
//! element, read from the definition files under `schemas/`.
//!
//! [`definition`] loads and compiles the files; [`check`] walks a set against its definition
//! and reports AK3/AK4 errors, and tells the structured JSON where each segment stands.

pub mod definition;

pub use definition::{builtin, DataType, ElementDef, Kind, Node, Req, Schemas, SegmentDef, SetDef, Simple, Syntax, SyntaxKind};
