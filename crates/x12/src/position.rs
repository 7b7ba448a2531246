//! Where something is in an input file, in the units an EDI engineer counts in.

use std::fmt;

/// A place in an input file.
///
/// `byte` is 0-based (an offset you can give to `dd` or a hex editor); the ordinals are
/// 1-based, as X12 counts them: `segment` is the segment's ordinal in its interchange (the ISA
/// is 1), `set_segment` its ordinal in its transaction set (the ST is 1, the number AK302 and
/// IK302 carry), `element` and `component` the positions AK401/IK401 carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Position {
    /// Byte offset in the file, 0-based.
    pub byte: usize,
    /// The segment's ordinal in its interchange (the ISA is 1).
    pub segment: u32,
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    /// The segment's ordinal in its transaction set (the ST is 1).
    pub set_segment: Option<u32>,
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    /// The element's position in its segment (1-based).
    pub element: Option<u16>,
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    /// The component's position in its element (1-based).
    pub component: Option<u16>,
}

impl Position {
    /// The same place, at element `element`.
    pub fn with_element(mut self, element: u16) -> Self {
        self.element = Some(element);
        self
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte {}, segment {}", self.byte, self.segment)?;
        if let Some(n) = self.set_segment {
            write!(f, " (set segment {n})")?;
        }
        if let Some(e) = self.element {
            write!(f, ", element {e:02}")?;
        }
        if let Some(c) = self.component {
            write!(f, "-{c}")?;
        }
        Ok(())
    }
}
