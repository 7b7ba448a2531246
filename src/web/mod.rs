//! The EDI desk's web page: the overview of traffic per partner, a search that can be shared
//! as a link, everything known about one interchange, and the rejected, held and dead lists;
//! served beside `/metrics` by `watch` and by `x12gate serve`.
//!
//! Read-only unless started with `--allow-actions` and a token. Reachable from other hosts
//! only with a token (`X12GATE_UI_TOKEN`): partners' files name orders, invoices and
//! trading relationships, which are not for anyone on the network. Every value from a file
//! is rendered as text by the templates (askama escapes HTML) after its control characters
//! are escaped ([`crate::text::printable`]).

mod api;
pub mod auth;
mod chart;
mod pages;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::Config;
use crate::registry::Readers;
pub use auth::{TokenError, Tokens, Who};

/// Why the web page cannot be served as asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebError {
    #[error("the web page on {addr} would be reachable from other hosts without a token: set {} (NAME:TOKEN), or listen on 127.0.0.1", auth::TOKEN_VARIABLE)]
    Exposed { addr: SocketAddr },
    #[error(
        "--allow-actions needs {}: an action is recorded with the name of the operator's token",
        auth::TOKEN_VARIABLE
    )]
    ActionsWithoutToken,
    #[error("--allow-actions: the web page is served on [gateway] metrics, which is not set")]
    NoPage,
    #[error(transparent)]
    Token(#[from] TokenError),
}

/// What the pages need: the configuration, who may come in, and whether they may act.
pub struct Site {
    /// The configuration and definitions in force: a reload of `watch` (SIGHUP) puts new
    /// ones here for the next request.
    in_force: std::sync::RwLock<InForce>,
    pub tokens: Tokens,
    pub actions: bool,
    /// Wrong tokens wait here, one at a time.
    pub penalty: auth::Penalty,
    /// The ERP's tokens for `/api/` (X12GATE_API_TOKEN); none: the API is off.
    pub api_tokens: Tokens,
    /// The read-only registry connections the pages share with `/metrics`.
    pub readers: Arc<Readers>,
    /// Documents of the API waiting for others to share their interchange.
    pub outbound_batches: api::Batches,
}

/// What a [`Site`] serves with.
struct InForce {
    config: Arc<Config>,
    schemas: Option<&'static crate::schema::Schemas>,
}

impl Site {
    /// The site for a listener on `addr`, refused when it would expose the pages or the
    /// actions without a token.
    pub fn new(
        config: Arc<Config>,
        addr: SocketAddr,
        tokens: Tokens,
        actions: bool,
    ) -> Result<Site, WebError> {
        if tokens.is_empty() && !addr.ip().is_loopback() {
            return Err(WebError::Exposed { addr });
        }
        if actions && tokens.is_empty() {
            return Err(WebError::ActionsWithoutToken);
        }
        Ok(Site {
            tokens,
            actions,
            penalty: auth::Penalty::default(),
            api_tokens: api::tokens()?,
            readers: Arc::new(Readers::new(config.gateway.database.clone())),
            outbound_batches: api::Batches::default(),
            in_force: std::sync::RwLock::new(InForce {
                config,
                schemas: None,
            }),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        match self.in_force.read() {
            Ok(f) => f.config.clone(),
            Err(poisoned) => poisoned.into_inner().config.clone(),
        }
    }

    /// The definitions in force (partners' guides layered over the built-in ones); `None`:
    /// the built-in ones.
    pub fn schemas(&self) -> Option<&'static crate::schema::Schemas> {
        match self.in_force.read() {
            Ok(f) => f.schemas,
            Err(poisoned) => poisoned.into_inner().schemas,
        }
    }

    /// `config` and `schemas` in force from the next request on.
    pub fn put_in_force(
        &self,
        config: Arc<Config>,
        schemas: Option<&'static crate::schema::Schemas>,
    ) {
        let mut f = match self.in_force.write() {
            Ok(f) => f,
            Err(poisoned) => poisoned.into_inner(),
        };
        *f = InForce { config, schemas };
    }

    /// Who sent `headers`; a wrong bearer token is answered only after the [`auth::Penalty`].
    pub async fn who(&self, headers: &axum::http::HeaderMap) -> Who {
        let who = self.tokens.who(headers);
        if who == Who::Anonymous && !self.tokens.is_empty() && self.tokens.wrong_bearer(headers) {
            self.penalty.serve().await;
        }
        who
    }
}

/// The pages' routes, to be merged with `/metrics` and `/healthz`.
pub fn router(site: Arc<Site>) -> axum::Router {
    pages::router(site.clone()).merge(api::router(site))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Arc<Config> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("partners.toml");
        std::fs::write(
            &path,
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"GATEWAY\"\n",
        )
        .unwrap();
        Arc::new(Config::load(&path).unwrap())
    }

    #[test]
    fn only_loopback_goes_without_a_token_and_actions_never_do() {
        let local: SocketAddr = "127.0.0.1:9101".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:9101".parse().unwrap();
        let v6: SocketAddr = "[::1]:9101".parse().unwrap();
        assert!(Site::new(config(), local, Tokens::default(), false).is_ok());
        assert!(Site::new(config(), v6, Tokens::default(), false).is_ok());
        assert!(matches!(
            Site::new(config(), any, Tokens::default(), false),
            Err(WebError::Exposed { .. })
        ));
        assert!(matches!(
            Site::new(config(), local, Tokens::default(), true),
            Err(WebError::ActionsWithoutToken)
        ));
        let tokens = Tokens::parse("alice:0123456789abcdef").unwrap();
        assert!(Site::new(config(), any, tokens, true).is_ok());
    }
}
