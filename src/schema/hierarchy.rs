//! The HL tree of one transaction set: each level's id (HL01) unique and increasing, its
//! parent (HL02) a level already seen, and its child code (HL04) true to what follows.
//!
//! It knows levels and ids only; the walk (`check`) turns what it finds into findings with
//! their positions and codes, and adds what only the definition knows: in a guide that nests
//! its levels (2000C inside 2000B), which level a parent must be.

use std::collections::HashMap;

/// What a level's id is kept by: an id is 12 characters at most (element 628), and one
/// longer is already an error; the first bytes are enough to tell levels apart.
const ID_BYTES: usize = 35;

/// Where a level stands, as the walk needs it to report on the level later (HL04).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelAt {
    /// The HL segment's ordinal and byte offset in the interchange.
    pub ordinal: u32,
    pub offset: usize,
    /// The loop node the level opened, if it opened one.
    pub node: Option<usize>,
    /// Whether the walk placed it in the set's structure.
    pub placed: bool,
}

/// What is wrong with one HL, found when it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// HL01 repeats the id of the level at this segment ordinal.
    IdRepeated { earlier: u32 },
    /// A numeric HL01 not greater than the numeric HL01 before it (shown).
    IdNotIncreasing { before: String },
    /// HL02 names this level itself.
    ParentIsSelf,
    /// HL02 names no level read so far (none of the set, or a later one: a parent comes
    /// first, so a cycle is one of these).
    ParentUnknown,
}

/// What is wrong with a level's HL04, found at the end of its set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildCode {
    /// HL04 `1`, and no level names it as its parent.
    SaysChildrenHasNone,
    /// HL04 `0`, and the level at this ordinal names it as its parent.
    SaysNoneHasChild { child: u32 },
}

struct Level {
    at: LevelAt,
    /// HL04 as sent, when it is `0` or `1` (another value is the code list's business).
    child_code: Option<bool>,
    /// The first level that names this one as its parent.
    first_child: Option<u32>,
}

/// The levels of one set, read in order.
#[derive(Default)]
pub struct Hierarchy {
    ids: HashMap<Box<[u8]>, usize>,
    levels: Vec<Level>,
    last_number: Option<(u128, Box<[u8]>)>,
}

fn key(id: &[u8]) -> &[u8] {
    id.get(..ID_BYTES).unwrap_or(id)
}

impl Hierarchy {
    /// Reads one HL (its HL01, HL02 and HL04 as sent) and says what is wrong with it. A
    /// level the walk could not place (already a segment error) is known by its id, but
    /// does not prove its parent's HL04 wrong.
    pub fn level(&mut self, hl01: &[u8], hl02: &[u8], hl04: &[u8], at: LevelAt) -> Vec<Problem> {
        // HL02's problem comes after HL01's: findings go in element order.
        let mut parent = None;
        if !hl02.is_empty() {
            if key(hl02) == key(hl01) {
                parent = Some(Problem::ParentIsSelf);
            } else {
                match self
                    .ids
                    .get(key(hl02))
                    .and_then(|i| self.levels.get_mut(*i))
                {
                    Some(level) => {
                        if at.placed {
                            level.first_child.get_or_insert(at.ordinal);
                        }
                    }
                    None => parent = Some(Problem::ParentUnknown),
                }
            }
        }
        let mut problems = Vec::new();
        // A missing HL01 is the element check's finding; nothing can name this level.
        if hl01.is_empty() {
            problems.extend(parent);
            return problems;
        }
        if let Some(earlier) = self.ids.get(key(hl01)).and_then(|i| self.levels.get(*i)) {
            problems.push(Problem::IdRepeated {
                earlier: earlier.at.ordinal,
            });
            problems.extend(parent);
            return problems;
        }
        if let Some(n) = number(hl01) {
            if let Some((before, shown)) = &self.last_number {
                if n <= *before {
                    problems.push(Problem::IdNotIncreasing {
                        before: String::from_utf8_lossy(shown).into_owned(),
                    });
                }
            }
            self.last_number = Some((n, key(hl01).into()));
        }
        problems.extend(parent);
        self.ids.insert(key(hl01).into(), self.levels.len());
        self.levels.push(Level {
            at,
            child_code: match hl04 {
                b"1" => Some(true),
                b"0" => Some(false),
                _ => None,
            },
            first_child: None,
        });
        problems
    }

    /// The levels whose HL04 what followed proved wrong, in the order they were read.
    pub fn finish(self) -> Vec<(LevelAt, ChildCode)> {
        self.levels
            .into_iter()
            .filter_map(|l| match (l.child_code, l.first_child) {
                (Some(true), None) => Some((l.at, ChildCode::SaysChildrenHasNone)),
                (Some(false), Some(child)) => Some((l.at, ChildCode::SaysNoneHasChild { child })),
                _ => None,
            })
            .collect()
    }
}

/// HL01 as a number, when it is all digits (most are: 1, 2, 3 ...).
fn number(id: &[u8]) -> Option<u128> {
    if id.is_empty() || id.len() > 30 || !id.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(id).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ordinal: u32) -> LevelAt {
        LevelAt {
            ordinal,
            offset: 0,
            node: None,
            placed: true,
        }
    }

    fn read(levels: &[(&str, &str, &str)]) -> (Vec<Vec<Problem>>, Vec<(u32, ChildCode)>) {
        let mut h = Hierarchy::default();
        let found = levels
            .iter()
            .zip(1..)
            .map(|((a, b, d), n)| h.level(a.as_bytes(), b.as_bytes(), d.as_bytes(), at(n)))
            .collect();
        let end = h
            .finish()
            .into_iter()
            .map(|(a, c)| (a.ordinal, c))
            .collect();
        (found, end)
    }

    #[test]
    fn a_sound_tree_has_nothing_to_say() {
        let (found, end) = read(&[
            ("1", "", "1"),
            ("2", "1", "1"),
            ("3", "2", "0"),
            ("4", "1", ""),
        ]);
        assert!(found.iter().all(Vec::is_empty), "{found:?}");
        assert!(end.is_empty(), "{end:?}");
    }

    #[test]
    fn ids_repeated_or_going_back_parents_unknown_self_or_later_and_lying_child_codes() {
        let (found, end) = read(&[
            ("1", "", "1"),
            ("2", "1", "0"),
            ("2", "1", ""),
            ("3", "5", ""),
            ("4", "4", ""),
            ("5", "2", "1"),
            ("A1", "", ""),
            ("4x", "", ""),
            ("6", "", ""),
            ("5b", "", ""),
            ("0", "", ""),
        ]);
        assert_eq!(found[2], [Problem::IdRepeated { earlier: 2 }]);
        // A parent that comes later (a cycle, read in order) is unknown when named.
        assert_eq!(found[3], [Problem::ParentUnknown]);
        assert_eq!(found[4], [Problem::ParentIsSelf]);
        assert!(found[5..=9].iter().all(Vec::is_empty), "{found:?}");
        assert_eq!(found[10], [Problem::IdNotIncreasing { before: "6".into() }]);
        assert_eq!(
            end,
            [
                (2, ChildCode::SaysNoneHasChild { child: 6 }),
                (6, ChildCode::SaysChildrenHasNone)
            ]
        );
    }

    #[test]
    fn an_id_of_any_length_is_kept_by_its_first_bytes() {
        let long = "9".repeat(100_000);
        let mut h = Hierarchy::default();
        assert!(h.level(long.as_bytes(), b"", b"", at(1)).is_empty());
        assert!(h.level(b"2", long.as_bytes(), b"", at(2)).is_empty());
        assert_eq!(
            h.level(long.as_bytes(), b"", b"", at(3)),
            [Problem::IdRepeated { earlier: 1 }]
        );
    }
}
