//! Where each key of partners.toml is written, from the parser's own spans
//! (`toml::Spanned`), so that a check made after loading (the start-up `check`, a partner's
//! guide folder) points at the line of the key it is about. The parser knows where a key
//! is however it was written (inline tables, comments, odd spacing); a scan of the lines
//! would have to guess.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// A place in the file: 1-based line, and 1-based column counted in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub line: usize,
    pub column: usize,
}

impl Place {
    /// The place of byte `offset` of `text`.
    pub(super) fn of(text: &str, offset: usize) -> Place {
        let before = text.get(..offset).unwrap_or(text);
        let start = before.rfind('\n').map_or(0, |n| n + 1);
        Place {
            line: before.matches('\n').count() + 1,
            column: before.get(start..).map_or(0, |l| l.chars().count()) + 1,
        }
    }
}

/// One table's keys: where each is written, and its value as written (before defaults).
type Keys = BTreeMap<String, (Place, toml::Value)>;

/// Every key of `[gateway]`, `[limits]` and each `[[partner]]`.
#[derive(Debug, Clone, Default)]
pub(super) struct Places {
    tables: BTreeMap<&'static str, Keys>,
    /// Each partner's table: where its header is, and its keys.
    partners: Vec<(Place, Keys)>,
}

type SpannedKeys = BTreeMap<Spanned<String>, toml::Value>;

/// The file again, as far as places are wanted; anything else is ignored.
#[derive(Deserialize)]
struct Mirror {
    #[serde(default)]
    gateway: SpannedKeys,
    #[serde(default)]
    limits: SpannedKeys,
    #[serde(default)]
    partner: Vec<Spanned<SpannedKeys>>,
}

impl Places {
    /// The places in `text`, which has already been read as a configuration (a text that
    /// does not read has no places).
    pub(super) fn read(text: &str) -> Places {
        let Ok(mirror) = toml::from_str::<Mirror>(text) else {
            return Places::default();
        };
        let keys = |table: SpannedKeys| -> Keys {
            table
                .into_iter()
                .map(|(key, value)| {
                    let place = Place::of(text, key.span().start);
                    (key.into_inner(), (place, value))
                })
                .collect()
        };
        Places {
            tables: BTreeMap::from([
                ("gateway", keys(mirror.gateway)),
                ("limits", keys(mirror.limits)),
            ]),
            partners: mirror
                .partner
                .into_iter()
                .map(|p| (Place::of(text, p.span().start), keys(p.into_inner())))
                .collect(),
        }
    }

    /// Where `key` is written in `table` (`gateway`, `limits`), and its value as written.
    pub(super) fn key(&self, table: &str, key: &str) -> Option<&(Place, toml::Value)> {
        self.tables.get(table)?.get(key)
    }

    /// Where `key` is written in the `[[partner]]` named `name`, or else where that table
    /// begins (the key takes its default).
    pub(super) fn partner_key(&self, name: &str, key: &str) -> Option<Place> {
        let (header, keys) = self.partners.iter().find(|(_, keys)| {
            keys.get("name")
                .is_some_and(|(_, v)| v.as_str() == Some(name))
        })?;
        Some(keys.get(key).map_or(*header, |(place, _)| *place))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_placed_by_line_and_column_however_they_are_written() {
        let text = "# partners\n[gateway]\nid = \"US\"\n  lease_seconds=5 # short\n\n\
                    [limits]\nmax_segments = 9\n\n[[partner]]\nname = \"a\"\nid = \"A\"\n\n\
                    [[partner]]\nid = \"B\"\nname = \"b\"\nretention_days = 7\n";
        let places = Places::read(text);
        let at = |line, column| Some(Place { line, column });
        assert_eq!(places.key("gateway", "id").map(|k| k.0), at(3, 1));
        assert_eq!(
            places.key("gateway", "lease_seconds").map(|k| k.0),
            at(4, 3)
        );
        assert_eq!(
            places.key("gateway", "lease_seconds").map(|k| k.1.clone()),
            Some(toml::Value::Integer(5))
        );
        assert_eq!(places.key("limits", "max_segments").map(|k| k.0), at(7, 1));
        assert_eq!(places.partner_key("b", "retention_days"), at(16, 1));
        // A key the partner leaves out: its table's header.
        assert_eq!(places.partner_key("a", "retention_days"), at(9, 1));
        assert_eq!(places.partner_key("c", "id"), None);
        // An inline table is placed too.
        let inline = Places::read("gateway = { id = \"US\", work = \"w\" }\n");
        assert_eq!(inline.key("gateway", "work").map(|k| k.0), at(1, 24));
    }
}
