//! Who is asking: the operators' tokens from `X12GATE_UI_TOKEN`, presented as a bearer header
//! or as the session cookie that the login form sets, and the per-token value that a form
//! must carry back (against cross-site requests).
//!
//! The cookie holds a value derived from the token, never the token: a cookie copied from a
//! browser's storage does not reveal the token, and changing the token ends every session.
//! Comparisons are of BLAKE3 hashes, whose equality is constant-time.

use axum::http::HeaderMap;

/// The environment variable that holds the tokens.
pub const TOKEN_VARIABLE: &str = "X12GATE_UI_TOKEN";
/// The session cookie's name.
pub const COOKIE: &str = "x12gate_session";
/// A token shorter than this is refused: it could be guessed.
const MIN_SECRET: usize = 16;

/// Why the tokens cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("{TOKEN_VARIABLE}: entry {entry}: {why}")]
    Bad { entry: usize, why: String },
}

/// How long a wrong token is answered after, by the login form and for a bearer header.
pub const WRONG_TOKEN_DELAY: std::time::Duration = std::time::Duration::from_millis(300);

/// The wait of wrong tokens, one at a time: guesses sent in parallel (or on many
/// connections) are answered no faster than one after another, one per
/// [`WRONG_TOKEN_DELAY`]. A right token never waits here.
#[derive(Debug, Default)]
pub struct Penalty(tokio::sync::Mutex<()>);

impl Penalty {
    /// Waits for this wrong token's turn, then for the delay.
    pub async fn serve(&self) {
        let _turn = self.0.lock().await;
        tokio::time::sleep(WRONG_TOKEN_DELAY).await;
    }
}

/// How long a session cookie is good for, counted by the server from its issue time.
pub const SESSION_MS: i64 = 12 * 3_600_000;

struct Token {
    name: String,
    secret: blake3::Hash,
    /// Derived from the secret: the key of the session cookies' MACs.
    key: [u8; 32],
    /// What the forms of this token's operator carry.
    csrf: blake3::Hash,
}

impl Token {
    fn session_mac(&self, issued_ms: i64) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(b"session");
        h.update(&issued_ms.to_be_bytes());
        h.finalize()
    }
}

/// The operators allowed in: none when the variable is unset (loopback only, read-only).
#[derive(Default)]
pub struct Tokens(Vec<Token>);

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    Anonymous,
    /// An operator, by the token's name; `by_cookie` when the session cookie said so (a form
    /// must then carry the token's form value).
    Operator {
        name: String,
        by_cookie: bool,
    },
}

impl Who {
    pub fn name(&self) -> Option<&str> {
        match self {
            Who::Anonymous => None,
            Who::Operator { name, .. } => Some(name),
        }
    }
}

impl Tokens {
    /// `NAME:SECRET` entries separated by commas; a bare `SECRET` is named `operator`.
    pub fn parse(value: &str) -> Result<Tokens, TokenError> {
        let mut tokens = Vec::new();
        for (i, entry) in value.split(',').map(str::trim).enumerate() {
            let bad = |why: &str| TokenError::Bad {
                entry: i + 1,
                why: why.to_string(),
            };
            if entry.is_empty() {
                return Err(bad("empty"));
            }
            // Presented tokens are trimmed too, so a blank here could never match.
            let (name, secret) = match entry.split_once(':') {
                Some((n, s)) => (n.trim(), s.trim()),
                None => ("operator", entry),
            };
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c))
            {
                return Err(bad("a name is letters, digits and . _ - @"));
            }
            if secret.chars().count() < MIN_SECRET {
                return Err(bad(&format!("a token is at least {MIN_SECRET} characters")));
            }
            if tokens.iter().any(|t: &Token| t.name == name) {
                return Err(bad(&format!("the name {name} is given twice")));
            }
            let key = blake3::derive_key("x12gate web session 2026-12", secret.as_bytes());
            tokens.push(Token {
                name: name.to_string(),
                secret: blake3::hash(secret.as_bytes()),
                key,
                csrf: blake3::keyed_hash(&key, b"csrf"),
            });
        }
        Ok(Tokens(tokens))
    }

    /// From the environment; none when the variable is unset or empty.
    pub fn from_env() -> Result<Tokens, TokenError> {
        Tokens::from_var(TOKEN_VARIABLE)
    }

    /// From the environment variable `name` (the ERP's tokens are not the operators').
    pub fn from_var(name: &str) -> Result<Tokens, TokenError> {
        match std::env::var(name) {
            Ok(v) if !v.trim().is_empty() => Tokens::parse(&v),
            _ => Ok(Tokens::default()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The operator whose token this is.
    pub fn by_token(&self, presented: &str) -> Option<&str> {
        let h = blake3::hash(presented.as_bytes());
        self.0
            .iter()
            .find(|t| t.secret == h)
            .map(|t| t.name.as_str())
    }

    /// The operator of a session cookie `ISSUED.MAC` issued less than [`SESSION_MS`] before
    /// `now_ms`: the browser's Max-Age is a wish, this is the rule.
    fn by_session(&self, cookie: &str, now_ms: i64) -> Option<&str> {
        let (issued, mac) = cookie.split_once('.')?;
        let issued: i64 = issued.parse().ok()?;
        // A minute of clock skew between issuing and checking is tolerated.
        if now_ms.saturating_sub(issued) > SESSION_MS || issued > now_ms.saturating_add(60_000) {
            return None;
        }
        let mac = blake3::Hash::from_hex(mac).ok()?;
        self.0
            .iter()
            .find(|t| t.session_mac(issued) == mac)
            .map(|t| t.name.as_str())
    }

    /// The session cookie's value for the operator `name`, issued at `now_ms`.
    pub fn session_value(&self, name: &str, now_ms: i64) -> Option<String> {
        self.find(name)
            .map(|t| format!("{now_ms}.{}", t.session_mac(now_ms).to_hex()))
    }

    /// The value a form of the operator `name` carries back.
    pub fn form_value(&self, name: &str) -> Option<String> {
        self.find(name).map(|t| t.csrf.to_hex().to_string())
    }

    /// Whether `given` is the form value of `name`.
    pub fn form_matches(&self, name: &str, given: &str) -> bool {
        let Ok(h) = blake3::Hash::from_hex(given) else {
            return false;
        };
        self.find(name).is_some_and(|t| t.csrf == h)
    }

    fn find(&self, name: &str) -> Option<&Token> {
        self.0.iter().find(|t| t.name == name)
    }

    /// Whether `headers` carry an `Authorization` header whose token is not one of ours (a
    /// guess, answered after the [`Penalty`] as a wrong login is).
    pub fn wrong_bearer(&self, headers: &HeaderMap) -> bool {
        headers
            .get(axum::http::header::AUTHORIZATION)
            .is_some_and(|v| {
                let bearer = v.to_str().ok().and_then(|v| v.strip_prefix("Bearer "));
                bearer.and_then(|b| self.by_token(b.trim())).is_none()
            })
    }

    /// Who sent `headers`: a bearer token first, then the session cookie.
    pub fn who(&self, headers: &HeaderMap) -> Who {
        let bearer = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if let Some(name) = bearer.and_then(|b| self.by_token(b.trim())) {
            return Who::Operator {
                name: name.to_string(),
                by_cookie: false,
            };
        }
        let jar = axum_extra::extract::CookieJar::from_headers(headers);
        let now = crate::registry::now_ms();
        match jar
            .get(COOKIE)
            .and_then(|c| self.by_session(c.value(), now))
        {
            Some(name) => Who::Operator {
                name: name.to_string(),
                by_cookie: true,
            },
            None => Who::Anonymous,
        }
    }
}

/// Whether a form post came from our own pages: the browser's own word where it gives one
/// (`Sec-Fetch-Site`, `Origin`), beside the form value that the handler checks.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = header("sec-fetch-site") {
        if site != "same-origin" && site != "none" {
            return false;
        }
    }
    match (header("origin"), header("host")) {
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, rest)| rest == host),
        (Some(_), None) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn tokens_are_named_and_long_enough() {
        let t = Tokens::parse("alice:0123456789abcdef, 0123456789ABCDEFG").unwrap();
        assert_eq!(t.by_token("0123456789abcdef"), Some("alice"));
        assert_eq!(t.by_token("0123456789ABCDEFG"), Some("operator"));
        assert_eq!(t.by_token("0123456789abcdeF"), None);
        assert!(matches!(
            Tokens::parse("bob:short"),
            Err(TokenError::Bad { entry: 1, .. })
        ));
        assert!(matches!(
            Tokens::parse("a:0123456789abcdef,a:0123456789abcdefg"),
            Err(TokenError::Bad { entry: 2, .. })
        ));
        assert!(Tokens::parse("x y:0123456789abcdef").is_err());
        assert!(Tokens::parse("a:0123456789abcdef,").is_err());
    }

    #[test]
    fn a_session_cookie_names_its_operator_and_hides_the_token() {
        let t = Tokens::parse("alice:0123456789abcdef,bob:fedcba9876543210").unwrap();
        let now = crate::registry::now_ms();
        let session = t.session_value("bob", now).unwrap();
        assert!(!session.contains("fedcba9876543210"));
        // Past its twelve hours, or forged in its issue time, a session is none.
        let old = t.session_value("bob", now - SESSION_MS - 1).unwrap();
        assert_eq!(t.by_session(&old, now), None);
        assert_eq!(t.by_session(&session, now), Some("bob"));
        let (_, mac) = session.split_once('.').unwrap();
        assert_eq!(t.by_session(&format!("{}.{mac}", now - 1), now), None);
        let early = t.session_value("bob", now + 3_600_000).unwrap();
        assert_eq!(t.by_session(&early, now), None, "issued in the future");
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {COOKIE}={session}")).unwrap(),
        );
        assert_eq!(
            t.who(&h),
            Who::Operator {
                name: "bob".into(),
                by_cookie: true
            }
        );
        let form = t.form_value("bob").unwrap();
        assert!(t.form_matches("bob", &form));
        assert!(!t.form_matches("alice", &form));
        assert!(!t.form_matches("bob", &session));
        // The token itself as a cookie is not a session.
        h.insert(
            axum::http::header::COOKIE,
            HeaderValue::from_static("x12gate_session=fedcba9876543210"),
        );
        assert_eq!(t.who(&h), Who::Anonymous);
        h.insert(
            axum::http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer 0123456789abcdef"),
        );
        assert_eq!(
            t.who(&h),
            Who::Operator {
                name: "alice".into(),
                by_cookie: false
            }
        );
    }

    #[test]
    fn a_cross_site_post_is_told_apart() {
        let mut h = HeaderMap::new();
        assert!(same_origin(&h));
        h.insert("host", HeaderValue::from_static("127.0.0.1:9101"));
        h.insert("origin", HeaderValue::from_static("http://127.0.0.1:9101"));
        assert!(same_origin(&h));
        h.insert("origin", HeaderValue::from_static("http://evil.example"));
        assert!(!same_origin(&h));
        h.remove("origin");
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&h));
    }
}
