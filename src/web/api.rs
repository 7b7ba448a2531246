//! The ERP's door for our own documents: `POST /api/outbound` sends one exactly as `x12gate
//! send` does (201 sent, 200 replayed, 409 another content under its key, 422 refused with
//! its findings, 400 not JSON), `GET /api/outbound/{key}` says where it stands, the
//! partner's acknowledgment included. Every request carries a bearer token of
//! X12GATE_API_TOKEN, on every address, loopback too: a POST here invoices a customer.
//! A document to a partner with `outbound_batch_ms` waits (holding no place) for the others
//! posted within that time, and is answered when their shared interchange is written.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::Site;
use crate::outbound::{EnvelopeKey, Prepared, Refusal, MAX_REQUEST_BYTES};
use crate::registry::Registry;
use crate::send::{SendError, Sent};

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

/// The place a request holds while its body is read and checked; a document waiting for
/// others to share its interchange gives it up.
#[derive(Clone)]
struct Place(Arc<std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>);

impl Place {
    fn give_up(&self) {
        if let Ok(mut held) = self.0.lock() {
            held.take();
        }
    }
}

/// A request with a right token, once one of [`AT_ONCE`] places is free; any other is
/// answered before its body is read.
async fn admit(
    State(site): State<Arc<Site>>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    static PLACES: std::sync::OnceLock<Arc<tokio::sync::Semaphore>> = std::sync::OnceLock::new();
    let who = match caller(&site, req.headers()).await {
        Ok(who) => who,
        Err(refused) => return refused,
    };
    let places = PLACES.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(AT_ONCE)));
    let Ok(place) = places.clone().acquire_owned().await else {
        return problem(503, "the outbound API is shutting down");
    };
    req.extensions_mut().insert(Caller(who));
    req.extensions_mut()
        .insert(Place(Arc::new(std::sync::Mutex::new(Some(place)))));
    next.run(req).await
}

/// What the documents waiting for their batches may hold in all, as the bodies that made
/// them: a wait holds no place, so this bounds the API's memory instead.
const WAITING_BYTES: usize = 64 << 20;

/// A waiting document's share of [`WAITING_BYTES`] (in KiB, a body of up to 16 MiB fits),
/// waited for when the others hold it all.
async fn waiting_share(
    body: usize,
) -> Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::AcquireError> {
    static SHARES: std::sync::OnceLock<Arc<tokio::sync::Semaphore>> = std::sync::OnceLock::new();
    let shares = SHARES.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(WAITING_BYTES >> 10)));
    let kib = u32::try_from(body.div_ceil(1024).clamp(1, WAITING_BYTES >> 10)).unwrap_or(1);
    shares.clone().acquire_many_owned(kib).await
}

/// What a batch's documents wait for: each one's result, or the registry's failure.
type Answer = Result<Result<Sent, SendError>, String>;

/// Documents of partners with `outbound_batch_ms`, waiting by envelope until the first
/// has waited that long (or the batch is full), then sent together as one batch of `send`.
#[derive(Default)]
pub struct Batches {
    waiting: std::sync::Mutex<HashMap<EnvelopeKey, Waiting>>,
}

#[derive(Default)]
struct Waiting {
    /// Which batch of this envelope is waiting: a timer sends only its own.
    generation: u64,
    documents: Vec<(Prepared, tokio::sync::oneshot::Sender<Answer>)>,
}

impl Batches {
    /// `p` sent with the others of its envelope that arrive within its partner's
    /// `outbound_batch_ms`: its own result.
    async fn join(site: Arc<Site>, p: Prepared) -> Answer {
        let key = p.envelope_key();
        let wait = std::time::Duration::from_millis(p.partner.outbound.batch_ms);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (first, full, generation) = {
            let mut waiting = site
                .outbound_batches
                .waiting
                .lock()
                .map_err(|_| "the outbound batches are unusable".to_string())?;
            let w = waiting.entry(key.clone()).or_default();
            w.documents.push((p, tx));
            let n = w.documents.len();
            (
                n == 1,
                n >= crate::send::MAX_SETS_PER_INTERCHANGE,
                w.generation,
            )
        };
        if full {
            Batches::send(site.clone(), &key, generation);
        } else if first {
            let site = site.clone();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                Batches::send(site, &key, generation);
            });
        }
        rx.await
            .map_err(|_| "the batch of this document was not sent".to_string())?
    }

    /// The batch `generation` of `key`, if it still waits, sent on a blocking thread.
    fn send(site: Arc<Site>, key: &EnvelopeKey, generation: u64) {
        let documents = match site.outbound_batches.waiting.lock() {
            Ok(mut waiting) => match waiting.get_mut(key) {
                Some(w) if w.generation == generation => {
                    w.generation += 1;
                    std::mem::take(&mut w.documents)
                }
                _ => return,
            },
            Err(_) => return,
        };
        tokio::task::spawn_blocking(move || {
            let (prepared, answers): (Vec<Prepared>, Vec<_>) = documents.into_iter().unzip();
            let refs: Vec<&Prepared> = prepared.iter().collect();
            let results = open(&site).and_then(|mut registry| {
                crate::send::send_all(
                    &site.config(),
                    &mut registry,
                    &refs,
                    &mut crate::send::Spent::default(),
                )
            });
            match results {
                Ok(results) => {
                    for (answer, result) in answers.into_iter().zip(results) {
                        // A caller gone (its connection closed) asks again by key.
                        let _ = answer.send(Ok(result));
                    }
                }
                Err(e) => {
                    for answer in answers {
                        let _ = answer.send(Err(e.to_string()));
                    }
                }
            }
        });
    }
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
        &site.config().gateway.database,
        crate::setup::identity(&site.config().gateway),
    )
}

async fn create(
    State(site): State<Arc<Site>>,
    axum::Extension(Caller(who)): axum::Extension<Caller>,
    axum::Extension(place): axum::Extension<Place>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let idempotency = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(|v| crate::text::bounded(v.trim(), MAX_IDEMPOTENCY_KEY).to_string());
    let worker = site.clone();
    let size = body.len();
    // Checked and named, then sent at once, or handed back to wait for its batch.
    let done = tokio::task::spawn_blocking(move || {
        let schemas = match worker.schemas() {
            Some(s) => s,
            None => crate::schema::builtin().map_err(|e| e.to_string())?,
        };
        let mut prepared = match crate::outbound::prepare(&worker.config(), schemas, &body, None) {
            Ok(p) => p,
            Err(r) => return Ok(Err(Err(SendError::Refused(r)))),
        };
        prepared.idempotency_key = idempotency;
        let mut registry = open(&worker).map_err(|e| e.to_string())?;
        // A retry is answered at once; only a document never seen waits for its batch.
        let seen = registry
            .outbound(&prepared.key)
            .map_err(|e| e.to_string())?
            .is_some();
        if prepared.partner.outbound.batch_ms > 0 && !seen {
            return Ok(Ok(prepared));
        }
        let sent = crate::send::send_prepared(&worker.config(), &mut registry, &prepared);
        Ok::<_, String>(Err(sent))
    })
    .await;
    let result = match done {
        Ok(Ok(Err(result))) => result,
        Ok(Ok(Ok(prepared))) => {
            // Its body is read and checked: the wait for the batch holds no place, but its
            // share of what all waiting documents may hold.
            let Ok(_share) = waiting_share(size).await else {
                return problem(503, "the outbound API is shutting down");
            };
            place.give_up();
            match Batches::join(site.clone(), prepared).await {
                Ok(result) => result,
                Err(e) => return problem(500, &e),
            }
        }
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
        Ok(Ok(Some((row, _)))) => json(200, &crate::send::status(&site.config(), &row, now)),
        Ok(Ok(None)) => problem(404, "no document of ours has this key"),
        Ok(Err(e)) => problem(500, &e.to_string()),
        Err(e) => problem(500, &e.to_string()),
    }
}
