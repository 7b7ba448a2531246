//! The ERP's door for our own documents: `POST /api/outbound` sends one exactly as `x12gate
//! send` does (201 sent, 200 replayed, 409 another content under its key, 422 refused with
//! its findings, 400 not JSON), `GET /api/outbound/{key}` says where it stands, the
//! partner's acknowledgment included. Every request carries a bearer token of
//! X12GATE_API_TOKEN, on every address, loopback too: a POST here invoices a customer.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::Site;
use crate::outbound::{Refusal, MAX_REQUEST_BYTES};
use crate::registry::Registry;
use crate::send::SendError;

/// The environment variable that holds the ERP's tokens (`NAME:TOKEN`, comma-separated).
pub const TOKEN_VARIABLE: &str = "X12GATE_API_TOKEN";

/// The longest `Idempotency-Key` kept: the ERP's own id, recorded beside ours.
const MAX_IDEMPOTENCY_KEY: usize = 200;

/// Requests served at once: each may hold a document of up to 16 MiB while it is read.
const AT_ONCE: usize = 8;

/// The variable naming a file that holds the tokens, for a service manager's credentials.
pub const TOKEN_FILE_VARIABLE: &str = "X12GATE_API_TOKEN_FILE";

/// The ERP's tokens: X12GATE_API_TOKEN, else the file X12GATE_API_TOKEN_FILE names; none
/// when neither is set (the API is off).
pub fn tokens() -> Result<super::Tokens, super::TokenError> {
    let from_env = super::Tokens::from_var(TOKEN_VARIABLE)?;
    match std::env::var_os(TOKEN_FILE_VARIABLE) {
        Some(path) if from_env.is_empty() => {
            let text = std::fs::read_to_string(&path).map_err(|e| super::TokenError::Bad {
                entry: 0,
                why: format!(
                    "{TOKEN_FILE_VARIABLE} {}: {e}",
                    std::path::Path::new(&path).display()
                ),
            })?;
            super::Tokens::parse(text.trim())
        }
        _ => Ok(from_env),
    }
}

pub fn router(site: Arc<Site>) -> axum::Router {
    axum::Router::new()
        .route("/api/outbound", post(create))
        .route("/api/outbound/:key", get(status))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        // Before any body is read: who asks, and whether there is room for them.
        .layer(axum::middleware::from_fn_with_state(site.clone(), admit))
        .with_state(site)
}

/// The name of the token a request came with.
#[derive(Clone)]
struct Caller(String);

/// A request with a right token, once one of [`AT_ONCE`] places is free; any other is
/// answered before its body is read.
async fn admit(
    State(site): State<Arc<Site>>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    static PLACES: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    let who = match caller(&site, req.headers()).await {
        Ok(who) => who,
        Err(refused) => return refused,
    };
    let Ok(_place) = PLACES
        .get_or_init(|| tokio::sync::Semaphore::new(AT_ONCE))
        .acquire()
        .await
    else {
        return problem(503, "the outbound API is shutting down");
    };
    req.extensions_mut().insert(Caller(who));
    next.run(req).await
}

fn json(status: u16, body: &serde_json::Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn problem(status: u16, error: &str) -> Response {
    json(status, &serde_json::json!({ "error": error }))
}

/// The caller's token's name, or the answer that refuses it (a wrong token after the
/// penalty's wait).
async fn caller(site: &Site, headers: &HeaderMap) -> Result<String, Response> {
    if site.api_tokens.is_empty() {
        return Err(problem(
            503,
            &format!("the outbound API is off: set {TOKEN_VARIABLE} (NAME:TOKEN) for the ERP"),
        ));
    }
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented.and_then(|t| site.api_tokens.by_token(t.trim())) {
        Some(name) => Ok(name.to_string()),
        None => {
            if presented.is_some() {
                site.penalty.serve().await;
            }
            Err(problem(
                401,
                "a bearer token of X12GATE_API_TOKEN is required",
            ))
        }
    }
}

fn open(site: &Site) -> Result<Registry, crate::registry::RegistryError> {
    Registry::open(
        &site.config.gateway.database,
        crate::setup::identity(&site.config.gateway),
    )
}

async fn create(
    State(site): State<Arc<Site>>,
    axum::Extension(Caller(who)): axum::Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let idempotency = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(|v| crate::text::bounded(v.trim(), MAX_IDEMPOTENCY_KEY).to_string());
    let worker = site.clone();
    let done = tokio::task::spawn_blocking(move || {
        let schemas = match worker.schemas {
            Some(s) => s,
            None => crate::schema::builtin().map_err(|e| e.to_string())?,
        };
        let mut registry = open(&worker).map_err(|e| e.to_string())?;
        let result = crate::send::send(
            &worker.config,
            schemas,
            &mut registry,
            &body,
            None,
            idempotency.as_deref(),
        );
        Ok::<_, String>(result)
    })
    .await;
    let result = match done {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => return problem(500, &e),
        Err(e) => return problem(500, &e.to_string()),
    };
    let (mut status, body) = crate::send::answer(&result, crate::time::now_ms());
    if let Err(SendError::Refused(Refusal::Json { .. } | Refusal::TooLarge { .. })) = &result {
        status = 400;
    }
    match &result {
        Ok(sent) => {
            tracing::info!(key = %sent.row.key, replayed = sent.replayed, by = %who, "outbound document over the API")
        }
        Err(e) => tracing::warn!(error = %e, by = %who, "outbound document over the API not sent"),
    }
    json(status, &body)
}

async fn status(State(site): State<Arc<Site>>, Path(key): Path<String>) -> Response {
    let worker = site.clone();
    let found = tokio::task::spawn_blocking(move || open(&worker)?.outbound(&key)).await;
    let now = crate::time::now_ms();
    match found {
        Ok(Ok(Some((row, _)))) => json(200, &crate::send::status(&site.config, &row, now)),
        Ok(Ok(None)) => problem(404, "no document of ours has this key"),
        Ok(Err(e)) => problem(500, &e.to_string()),
        Err(e) => problem(500, &e.to_string()),
    }
}
