//! Transaction-set schemas: what each set may contain, segment by segment and element by
//! element, read from the definition files under `schemas/`.
//!
//! [`definition`] loads and compiles the files; [`check`] walks a set against its definition
//! and reports AK3/AK4 errors, and tells the structured JSON where each segment stands.

pub mod check;
mod hierarchy;
/// The definitions and their compiler: the `x12-schema` crate (crates/x12-schema), shared
/// with the build script.
pub use x12_schema as definition;

pub use definition::{
    Codes, DataType, DocumentSpec, ElementDef, Field, Kind, Node, PerLoop, Reading, Req, Schemas,
    SegmentDef, SetDef, Simple, Syntax, SyntaxKind,
};

use crate::finding::{Finding, Rule};
use crate::x12::Interchange;

/// The definitions built into the binary from `schemas/`: `build.rs` has compiled every one
/// (a broken file fails the build) and embedded them as JSON; each set is compiled again here
/// when a file first holds it.
pub fn builtin() -> Result<&'static Schemas, &'static str> {
    static SCHEMAS: std::sync::OnceLock<Result<Schemas, String>> = std::sync::OnceLock::new();
    SCHEMAS
        .get_or_init(|| Schemas::load_embedded(embedded::FILES))
        .as_ref()
        .map_err(String::as_str)
}

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/schemas.rs"));
}

/// The files [`builtin`] is read from, as `build.rs` embedded them, for layering a partner's
/// guide over them ([`Schemas::layered`]).
pub fn embedded_files() -> &'static [(&'static str, &'static str, usize)] {
    embedded::FILES
}

/// Every schema finding of an interchange: each set that has a definition (of its release, or
/// of a release `schemas/releases.toml` reads it as), walked against it. Sets without one pass
/// at envelope level, and the interchange says so once, as a warning on the first group that
/// has such a set.
pub fn findings(ic: &Interchange<'_>, schemas: &Schemas) -> Vec<Finding> {
    findings_on(ic, schemas, threads_for(ic))
}

/// The threads `ic`'s sets are walked on: every core from [`PARALLEL_FROM`], else one.
pub fn threads_for(ic: &Interchange<'_>) -> usize {
    if ic.span.len() >= PARALLEL_FROM {
        crate::cores::available()
    } else {
        1
    }
}

/// An interchange from this size has its sets walked on every core: a partner's batch of
/// thousands of sets in one interchange is otherwise read by one core.
pub const PARALLEL_FROM: usize = 1 << 20;

/// [`findings`] with the sets walked on `threads` threads, each a contiguous run of them; the
/// findings are the same, in the same order, as on one.
pub fn findings_on(ic: &Interchange<'_>, schemas: &Schemas, threads: usize) -> Vec<Finding> {
    let (mut out, unread) = walk(ic, schemas, threads);
    out.extend(unread.warning(schemas));
    out
}

/// The findings of walking `ic`'s sets against their definitions on `threads` threads, and
/// the sets that were read at envelope level only (one warning per interchange, which an
/// interchange read in parts gathers from all of them).
pub fn walk(ic: &Interchange<'_>, schemas: &Schemas, threads: usize) -> (Vec<Finding>, Unread) {
    // Where each group's sets begin in the interchange's run of sets.
    let mut starts = Vec::with_capacity(ic.groups.len());
    let mut total = 0;
    for group in &ic.groups {
        starts.push(total);
        total += group.sets.len();
    }
    let parts = crate::cores::in_ranges(total, threads, |run| {
        let mut found = Vec::new();
        let mut unread = Unread::default();
        for (gi, (group, start)) in ic.groups.iter().zip(&starts).enumerate() {
            let first = run.start.saturating_sub(*start);
            let last_set = run.end.saturating_sub(*start).min(group.sets.len());
            if first >= last_set {
                continue;
            }
            let version = group.gs.element(8).unwrap_or_default();
            // The reading of the set id before: a group's sets are mostly of one id, and
            // looking a definition up builds its key (a few allocations a set).
            let mut last: Option<(&[u8], Reading<'_>)> = None;
            for si in first..last_set {
                let Some(set) = group.sets.get(si) else { break };
                let id = set.st.element(1).unwrap_or_default();
                let reading = match last {
                    Some((seen, reading)) if seen == id => reading,
                    _ => schemas.reading(version, id),
                };
                last = Some((id, reading));
                match reading {
                    Reading::Own(def) | Reading::As(def) => {
                        found.extend(check::walk(def, &set, gi, si, false).findings);
                    }
                    // An ST01 that names no set, or no GS08, is an envelope error of its
                    // own; a GS08 that names no release is a warning of its own, and its
                    // sets are still said to be read at envelope level.
                    Reading::EnvelopeOnly if names_a_set(id) && !version.is_empty() => {
                        unread.unread(gi, &group.gs, version, id);
                    }
                    Reading::EnvelopeOnly => {}
                }
            }
        }
        vec![(found, unread)]
    });
    let mut out = Vec::new();
    let mut all = Unread::default();
    for (found, unread) in parts {
        out.extend(found);
        all.absorb(unread);
    }
    (out, all)
}

/// Whether ST01 has the shape of a transaction set identifier: three digits, 100 to 999, in
/// every release.
pub fn names_a_set(st01: &[u8]) -> bool {
    st01.len() == 3 && st01.iter().all(u8::is_ascii_digit) && st01.first() != Some(&b'0')
}

/// Whether GS08 begins with an X12 release: six digits, a version `001` to `009` and a
/// release `00` to `07` before the sub-release digit (`004010`, `003041`,
/// `005010X222A1`). ISA12's five-digit form (`00501`), a letter for a digit (`0O4010`)
/// or a release no version has had (`004100`) names none.
pub fn names_a_release(gs08: &[u8]) -> bool {
    let Some(six) = gs08.get(..6).filter(|v| v.iter().all(u8::is_ascii_digit)) else {
        return false;
    };
    matches!(six, [b'0', b'0', b'1'..=b'9', b'0', b'0'..=b'7', _])
}

/// How many distinct (release, set) pairs the warning names; an interchange may hold any.
const UNREAD_SHOWN: usize = 8;

/// The sets of an interchange read at envelope level only: the first few distinct
/// (release, set) pairs, whether there were more, and where the warning stands (the GS of
/// the first group that has one).
#[derive(Default)]
pub struct Unread {
    unread: Vec<(String, String)>,
    more: bool,
    first: Option<Finding>,
}

impl Unread {
    fn unread(&mut self, gi: usize, gs: &crate::x12::Segment<'_>, version: &[u8], id: &[u8]) {
        if self.first.is_none() {
            let at = crate::finding::group_finding(
                gi,
                gs,
                Rule::EnvelopeLevelOnly,
                gs,
                8,
                String::new(),
            );
            self.first = Some(at);
        }
        let release = if names_a_release(version) {
            version.get(..6).unwrap_or_default()
        } else {
            version
        };
        let at = (crate::text::shown(release), crate::text::shown(id));
        self.note(at);
    }

    fn note(&mut self, at: (String, String)) {
        if !self.unread.contains(&at) {
            if self.unread.len() < UNREAD_SHOWN {
                self.unread.push(at);
            } else {
                self.more = true;
            }
        }
    }

    /// Adds what a later run (or part) of the same interchange found.
    pub fn absorb(&mut self, later: Unread) {
        self.more |= later.more;
        if self.first.is_none() {
            self.first = later.first;
        }
        for at in later.unread {
            self.note(at);
        }
    }

    /// Where the warning stands, to be renumbered as its interchange counts groups.
    pub fn at_mut(&mut self) -> Option<&mut Finding> {
        self.first.as_mut()
    }

    /// The one warning of the interchange, if any set was read at envelope level only.
    pub fn warning(self, schemas: &Schemas) -> Option<Finding> {
        let mut warning = self.first?;
        let named: Vec<String> = self
            .unread
            .iter()
            .map(|(release, id)| {
                if schemas.defines_release(release) {
                    format!("{id} of {release} (no definition of the set)")
                } else if !names_a_release(release.as_bytes()) {
                    format!("{id} of \"{release}\" (GS08 names no release)")
                } else {
                    format!(
                        "{id} of {release} (no definition of the release, nor one it agrees with)"
                    )
                }
            })
            .collect();
        let more = if self.more { ", ..." } else { "" };
        warning.message = format!(
            "checked at envelope level only: {}{more} (noted; not sent back)",
            named.join(", ")
        );
        Some(warning)
    }
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

    /// An implementation guide of the 850 (selected by GS08 `004010X1`): positions told
    /// apart by qualifiers, loops named by guide ids, a narrowed code list, element usages
    /// (the vendor's REF03 not used, the bill-to's N104 required, PO103-2 not used).
    pub const GUIDE: &str = r#"
version = "004010X1"
id = "850"
context = "LINE"
structure = """
BEG M 1
REF "Department" O 1 when REF01=DP
REF "Vendor" M 1 when REF01=IA,VR -REF03
loop SHIPTO "Ship To" O 1
  N1 M 1 when N101=ST
  N3 O 1
loop BILLTO "Bill To" M 1
  N1 "Bill To Name" M 1 when N101=BT N103=92 +N104
loop LINE "Line Item" M 3
  PO1 M 1 -PO103-2
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

#[cfg(test)]
mod tests {
    use super::sample::{DICT, SET};
    use super::*;
    use crate::finding::Level;
    use crate::x12::{Interchanges, Limits};

    /// The findings of an interchange of groups, each `(GS08, [(ST01, body)])`.
    fn findings_of(groups: &[(&str, &[(&str, &str)])]) -> Vec<Finding> {
        let releases = r#"
["004030"]
"850" = { as = "004010", verdict = "same", sources = "the test" }
"#;
        let schemas = Schemas::load(&[
            ("004010/segments.toml", DICT),
            ("004010/850.toml", SET),
            ("releases.toml", releases),
        ])
        .unwrap();
        let mut x = String::from("ISA*00*          *00*          *ZZ*A              *ZZ*B              *240101*1200*U*00401*000000001*0*P*:~");
        for (g, (gs08, sets)) in groups.iter().enumerate() {
            x.push_str(&format!("GS*PO*A*B*20240101*1200*{}*X*{gs08}~", g + 1));
            for (s, (st01, body)) in sets.iter().enumerate() {
                let count = body.matches('~').count() + 2;
                x.push_str(&format!("ST*{st01}*{s:04}~{body}SE*{count}*{s:04}~"));
            }
            x.push_str(&format!("GE*{}*{}~", sets.len(), g + 1));
        }
        x.push_str(&format!("IEA*{}*000000001~", groups.len()));
        let ic = Interchanges::new(x.as_bytes(), Limits::default())
            .next()
            .unwrap()
            .unwrap();
        // However the sets are shared among threads, the findings are those of one.
        let one = findings_on(&ic, &schemas, 1);
        for threads in [2, 3, 7] {
            assert_eq!(
                findings_on(&ic, &schemas, threads),
                one,
                "{threads} threads"
            );
        }
        one
    }

    const PO: &str = "BEG*00*PO1~PO1*1*1*EA*1~CTT*1~";
    const BAD_PO: &str = "BEG*99*PO1~PO1*1*1*EA*1~CTT*1~";

    #[test]
    fn an_older_release_in_the_table_is_walked_as_the_one_it_agrees_with() {
        assert!(findings_of(&[("004030", &[("850", PO)])]).is_empty());
        let bad = findings_of(&[("004030", &[("850", BAD_PO)])]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].rule, Rule::ElementInvalidCode);
    }

    #[test]
    fn sets_no_definition_reads_are_noted_once_per_interchange_as_a_warning() {
        let found = findings_of(&[
            ("004010", &[("850", PO)]),
            ("003030", &[("857", ""), ("857", ""), ("850", PO)]),
            ("004010", &[("810", "")]),
        ]);
        assert_eq!(found.len(), 1, "{found:?}");
        let w = &found[0];
        assert_eq!(
            (w.rule, w.level, w.group),
            (Rule::EnvelopeLevelOnly, Level::Group, Some(1))
        );
        assert!(w.is_warning() && w.code.is_none());
        assert_eq!(w.position.element, Some(8));
        assert_eq!(
            w.message,
            "checked at envelope level only: 857 of 003030 (no definition of the release, nor one \
             it agrees with), 850 of 003030 (no definition of the release, nor one it agrees \
             with), 810 of 004010 (no definition of the set) (noted; not sent back)"
        );
        // Read sets and an ST01 that names no set are not noted ...
        assert!(findings_of(&[
            ("004030", &[("850", PO)]),
            ("004010", &[("85", ""), ("000", "")])
        ])
        .is_empty());
        // ... but the sets of a GS08 that names no release are: no definition read them.
        let unnamed = findings_of(&[("0040", &[("810", "")]), ("ABCDEF", &[("810", "")])]);
        assert_eq!(unnamed.len(), 1, "{unnamed:?}");
        assert_eq!(
            unnamed[0].message,
            "checked at envelope level only: 810 of \"0040\" (GS08 names no release), 810 of \
             \"ABCDEF\" (GS08 names no release) (noted; not sent back)"
        );
        for (gs08, named) in [
            ("004010", true),
            ("003041", true),
            ("005010X222A1", true),
            ("004010VICS", true),
            ("00501", false),
            ("0O4010", false),
            ("004100", false),
            ("010010", false),
            ("", false),
        ] {
            assert_eq!(names_a_release(gs08.as_bytes()), named, "{gs08}");
        }
        // However many, the note names a bounded number.
        let many: Vec<(String, String)> = (0..50)
            .map(|i| (format!("{}", 100 + i), String::new()))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let note = &findings_of(&[("004010", &many)])[0].message;
        assert!(
            note.ends_with(", ... (noted; not sent back)")
                && note.matches("(no definition").count() == 8
        );
        // Eight are named whole; a ninth is what the ellipsis stands for.
        let note = &findings_of(&[("004010", &many[..8])])[0].message;
        assert!(!note.contains("...") && note.matches("(no definition").count() == 8);
        let note = &findings_of(&[("004010", &many[..9])])[0].message;
        assert!(note.contains(", ... ") && note.matches("(no definition").count() == 8);
        // Spread over groups and threads, with walked sets and their errors in between.
        let bad: Vec<(&str, &str)> = many[..12]
            .iter()
            .flat_map(|s| [*s, ("850", BAD_PO)])
            .collect();
        let found = findings_of(&[("004010", &bad[..5]), ("004010", &bad[5..])]);
        assert_eq!(found.len(), 13, "{found:?}");
        assert_eq!(found.last().map(|f| f.group), Some(Some(0)));
        assert!(found.last().is_some_and(|f| f.message.contains(", ... ")));
    }

    // The built-in definitions are the gateway's (embedded by its build script), so these
    // tests of the definitions crate's compiler over all of them live here.
    #[test]
    fn grouped_conditions_answer_as_the_conditions_one_by_one() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for def in builtin().unwrap().all() {
            for seg in &def.segments {
                for _ in 0..64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let one_by_one = seg.syntax.iter().any(|n| n.violated(x));
                    assert_eq!(seg.quick.violated(x), one_by_one, "{} {x:#x}", seg.id);
                }
            }
        }
    }

    #[test]
    fn the_builtin_definitions_load() {
        let s = builtin().unwrap();
        // Compiled when first asked for at run time: here every one, so a broken file fails.
        s.check().unwrap();
        assert!(s.all().len() >= 70, "{}", s.all().len());
        for def in s.all() {
            assert!(!def.segments.is_empty(), "{}", def.name_key());
        }
    }
}
