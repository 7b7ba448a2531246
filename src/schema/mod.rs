//! Transaction-set schemas: what each set may contain, segment by segment and element by
//! element, read from the definition files under `schemas/`.
//!
//! [`definition`] loads and compiles the files; [`check`] walks a set against its definition
//! and reports AK3/AK4 errors, and tells the structured JSON where each segment stands.

pub mod check;
pub mod definition;

pub use definition::{
    builtin, DataType, ElementDef, Kind, Node, Req, Schemas, SegmentDef, SetDef, Simple, Syntax,
    SyntaxKind,
};

use crate::validate::Finding;
use crate::x12::Interchange;

/// Every schema finding of an interchange: each set that has a definition, walked against it.
/// Sets without one (other ids, other versions) pass at envelope level.
pub fn findings(ic: &Interchange<'_>, schemas: &Schemas) -> Vec<Finding> {
    let mut out = Vec::new();
    for (gi, group) in ic.groups.iter().enumerate() {
        let version = group.gs.element(8).unwrap_or_default();
        for (si, set) in group.sets.iter().enumerate() {
            let id = set.st.element(1).unwrap_or_default();
            if let Some(def) = schemas.find(version, id) {
                out.extend(check::walk(def, set, gi, si, false).findings);
            }
        }
    }
    out
}
