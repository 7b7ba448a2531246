//! Transaction-set schemas: what each set may contain, segment by segment and element by
//! element, read from the definition files under `schemas/`.
//!
//! [`definition`] loads and compiles the files; [`check`] walks a set against its definition
//! and reports AK3/AK4 errors, and tells the structured JSON where each segment stands.

pub mod check;
pub mod definition;

pub use definition::{
    builtin, Codes, DataType, DocumentSpec, ElementDef, Field, Kind, Node, Req, Schemas,
    SegmentDef, SetDef, Simple, Syntax, SyntaxKind,
};

use crate::finding::Finding;
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
                out.extend(check::walk(def, &set, gi, si, false).findings);
            }
        }
    }
    out
}

/// A small dictionary and two sets for the unit tests of the walker and the structured form.
#[cfg(test)]
pub(crate) mod sample {
    pub const DICT: &str = r#"
version = "004010"
[segments.BEG]
name = "Beginning"
elements = [
  { ref = 353, name = "Purpose", req = "M", type = "ID", min = 2, max = 2 },
  { ref = 324, name = "Number", req = "M", type = "AN", min = 1, max = 10 },
  { ref = 373, name = "Date", req = "O", type = "DT", min = 8, max = 8 },
  { ref = 337, name = "Time", req = "O", type = "TM", min = 4, max = 8 },
]
[segments.REF]
name = "Reference"
elements = [
  { ref = 128, name = "Qualifier", req = "M", type = "ID", min = 2, max = 3 },
  { ref = 127, name = "Reference", req = "X", type = "AN", min = 1, max = 30 },
  { ref = 352, name = "Description", req = "X", type = "AN", min = 1, max = 80 },
]
syntax = ["R0203"]
[segments.N1]
name = "Name"
elements = [
  { ref = 98, name = "Entity", req = "M", type = "ID", min = 2, max = 3 },
  { ref = 93, name = "Name", req = "X", type = "AN", min = 1, max = 60 },
  { ref = 66, name = "Id Qualifier", req = "X", type = "ID", min = 1, max = 2 },
  { ref = 67, name = "Id", req = "X", type = "AN", min = 2, max = 80 },
]
syntax = ["R0203", "P0304"]
[segments.N3]
name = "Address"
elements = [{ ref = 166, name = "Address", req = "M", type = "AN", min = 1, max = 55 }]
[segments.PO1]
name = "Line"
elements = [
  { ref = 350, name = "Line Number", req = "O", type = "AN", min = 1, max = 20 },
  { ref = 330, name = "Quantity", req = "X", type = "R", min = 1, max = 15 },
  { composite = "C001", req = "O" },
  { ref = 212, name = "Price", req = "X", type = "R", min = 1, max = 17 },
]
syntax = ["C0402"]
[composites.C001]
name = "Unit"
components = [
  { ref = 355, name = "Unit Code", req = "M", type = "ID", min = 2, max = 2 },
  { ref = 1018, name = "Exponent", req = "O", type = "R", min = 1, max = 15 },
]
[segments.PID]
name = "Description"
elements = [{ ref = 349, name = "Type", req = "M", type = "ID", min = 1, max = 1 }]
[segments.CTT]
name = "Totals"
elements = [{ ref = 354, name = "Lines", req = "M", type = "N0", min = 1, max = 6 }]
[segments.TD5]
name = "Carrier"
elements = [{ ref = 133, name = "Routing Sequence", req = "O", type = "ID", min = 1, max = 2 }]
[segments.BSN]
name = "Beginning Segment for Ship Notice"
elements = [{ ref = 396, name = "Shipment Identification", req = "M", type = "AN", min = 2, max = 30 }]
[segments.HL]
name = "Hierarchical Level"
elements = [
  { ref = 628, name = "Hierarchical ID Number", req = "M", type = "AN", min = 1, max = 12 },
  { ref = 734, name = "Hierarchical Parent ID Number", req = "O", type = "AN", min = 1, max = 12 },
  { ref = 735, name = "Hierarchical Level Code", req = "M", type = "ID", min = 1, max = 2 },
]
[codes]
353 = ["00", "05"]
"#;

    pub const SET: &str = r#"
version = "004010"
id = "850"
structure = """
BEG M 1
REF O 2
loop N1 O 2
  N1 M 1
  N3 O 1
loop PO1 M 3
  PO1 M 1
  PID O 1
CTT M 1
"""
"#;

    pub const SHIP: &str = r#"
version = "004010"
id = "856"
hierarchy = "HL"
structure = """
BSN M 1
loop HL M 200000
  HL M 1
  REF O >1
  loop N1 O 200
    N1 M 1
CTT O 1
"""
"#;
}
