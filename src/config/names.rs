//! A partner as an operator names it, the same way in every command and page: `QUAL:ID`, the
//! ID alone when one configured partner has it, or the partner's name; an unknown one is
//! refused with the closest configured partner.

use super::{Config, Partner};

/// A partner name that names no configured partner, or several.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartnerName {
    #[error("{typed:?} names no configured partner (QUAL:ID, ID or name){}", closest.as_ref().map(|c| format!("; the closest is {c}")).unwrap_or_default())]
    Unknown {
        typed: String,
        closest: Option<String>,
    },
    #[error("{typed:?} names several partners ({}); give QUAL:ID", .keys.join(", "))]
    Several { typed: String, keys: Vec<String> },
}

impl Config {
    /// The configured partner `typed` names: `QUAL:ID` (the qualifier in any case, the id
    /// padded or not), the ID alone, or the partner's `name` (in any case) when only one
    /// partner answers to it.
    pub fn partner_named(&self, typed: &str) -> Result<&Partner, PartnerName> {
        let t = typed.trim();
        let by_key = |p: &&Partner| match t.split_once(':') {
            Some((q, id)) => q.trim().eq_ignore_ascii_case(&p.id_qualifier) && id.trim() == p.id,
            None => false,
        };
        // The most exact reading first: "Globex" is the partner of that name before it is
        // every partner whose id is GLOBEX.
        let tries: [&dyn Fn(&&Partner) -> bool; 5] = [
            &by_key,
            &|p| p.id == t,
            &|p| p.name.trim() == t,
            &|p| p.id.eq_ignore_ascii_case(t),
            &|p| p.name.trim().eq_ignore_ascii_case(t),
        ];
        for matches in tries {
            let found: Vec<&Partner> = self.partners.iter().filter(matches).collect();
            match found.as_slice() {
                [one] => return Ok(one),
                [] => {}
                several => {
                    return Err(PartnerName::Several {
                        typed: typed.to_string(),
                        keys: several.iter().map(|p| p.key()).collect(),
                    })
                }
            }
        }
        Err(PartnerName::Unknown {
            typed: typed.to_string(),
            closest: self.closest_partner(t),
        })
    }

    /// The configured partner whose key, id or name is nearest `typed` (a typing slip), as
    /// `QUAL:ID (name)`; none when nothing is near.
    fn closest_partner(&self, typed: &str) -> Option<String> {
        let typed = typed.to_ascii_uppercase();
        self.partners
            .iter()
            .filter_map(|p| {
                let score = [p.key(), p.id.clone(), p.name.clone()]
                    .iter()
                    .map(|s| strsim::normalized_levenshtein(&typed, &s.to_ascii_uppercase()))
                    .fold(0.0, f64::max);
                (score >= 0.5).then_some((score, p))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, p)| format!("{} ({})", p.key(), p.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("partners.toml");
        std::fs::write(
            &path,
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"GATEWAY\"\n\n\
             [[partner]]\nname = \"Acme Retail\"\nid_qualifier = \"ZZ\"\nid = \"ACME\"\n\n\
             [[partner]]\nname = \"Globex\"\nid_qualifier = \"01\"\nid = \"GLOBEX\"\n\n\
             [[partner]]\nname = \"Globex East\"\nid_qualifier = \"ZZ\"\nid = \"GLOBEX\"\n",
        )
        .unwrap();
        Config::load(&path).unwrap()
    }

    #[test]
    fn a_partner_is_found_by_its_key_its_id_or_its_name_and_otherwise_the_closest_is_named() {
        let c = config();
        for typed in [
            "ZZ:ACME",
            "zz:ACME",
            "ZZ:ACME  ",
            "ACME",
            "acme",
            "Acme Retail",
            "ACME RETAIL",
        ] {
            assert_eq!(
                c.partner_named(typed).map(Partner::key),
                Ok("ZZ:ACME".into()),
                "{typed}"
            );
        }
        assert_eq!(
            c.partner_named("Globex").map(Partner::key),
            Ok("01:GLOBEX".into())
        );
        assert_eq!(
            c.partner_named("01:GLOBEX").map(Partner::key),
            Ok("01:GLOBEX".into())
        );
        let several = c.partner_named("GLOBEX").unwrap_err();
        assert_eq!(
            several.to_string(),
            "\"GLOBEX\" names several partners (01:GLOBEX, ZZ:GLOBEX); give QUAL:ID"
        );
        let unknown = c.partner_named("ACNE").unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "\"ACNE\" names no configured partner (QUAL:ID, ID or name); the closest is ZZ:ACME (Acme Retail)"
        );
        let far = c.partner_named("NOPE").unwrap_err();
        assert!(
            matches!(far, PartnerName::Unknown { closest: None, .. }),
            "{far}"
        );
    }
}
