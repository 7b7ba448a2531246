//! Enums that are words: each variant one fixed spelling, the list of them all, the word
//! back to the variant, and the word as its `Display` and JSON form. Dispositions, claim
//! states, audit events, X12 code lists and rule names are all declared with [`words!`].

/// Declares `enum $name` whose variants are spelled by `$word`, read by `$name::$method`.
/// `Display` pads the word (so `{:<12}` lines tables up) and `Serialize` writes it.
macro_rules! words {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident as $method:ident {
            $($(#[$vmeta:meta])* $variant:ident = $word:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every variant, in the order declared.
            pub const ALL: [$name; [$($word),*].len()] = [$($name::$variant),*];

            /// The word, as it is written, stored and sent.
            pub fn $method(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)*
                }
            }

            /// The variant spelled `word`, if there is one.
            pub fn parse(word: &str) -> Option<$name> {
                Self::ALL.into_iter().find(|w| w.$method() == word)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.$method())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.$method())
            }
        }
    };
}

pub(crate) use words;
