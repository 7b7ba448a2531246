//! A stand-in for an ERP's inbound endpoint, for the session in docs/delivery.md and the
//! delivery benchmark: it books each document once by its `Idempotency-Key`, answers
//! `{"order_id": "SO-n"}`, and answers 409 with the same body for a key it booked before.
//! `--fail-rate` answers that share of requests 503 (to watch retries and the circuit).
//!
//! `cargo run --release --example erp -- --listen 127.0.0.1:8080`

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: std::net::SocketAddr,
    /// Share of requests answered 503, 0 to 1
    #[arg(long, default_value_t = 0.0)]
    fail_rate: f64,
    /// Print one line per request
    #[arg(long)]
    verbose: bool,
}

#[derive(Default)]
struct Books {
    orders: HashMap<String, String>,
    requests: u64,
}

type Shared = Arc<(Mutex<Books>, f64, bool)>;

async fn inbound(
    State(shared): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> impl IntoResponse {
    let (books, fail_rate, verbose) = &*shared;
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let correlation = headers
        .get("x-correlation-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let (status, order) = {
        let Ok(mut b) = books.lock() else {
            return (StatusCode::INTERNAL_SERVER_ERROR, String::new());
        };
        b.requests += 1;
        if key.is_empty() || serde_json::from_slice::<serde_json::Value>(&body).is_err() {
            (StatusCode::BAD_REQUEST, String::new())
        } else if fastrand::f64() < *fail_rate {
            (StatusCode::SERVICE_UNAVAILABLE, String::new())
        } else if let Some(order) = b.orders.get(&key) {
            (StatusCode::CONFLICT, order.clone())
        } else {
            let order = format!("SO-{}", 1000 + b.orders.len() + 1);
            b.orders.insert(key.clone(), order.clone());
            (StatusCode::OK, order)
        }
    };
    if *verbose {
        println!("{} {key} {correlation} {order}", status.as_u16());
    }
    let body = if order.is_empty() {
        String::new()
    } else {
        serde_json::json!({ "order_id": order }).to_string()
    };
    (status, body)
}

async fn booked(State(shared): State<Shared>) -> impl IntoResponse {
    let (books, ..) = &*shared;
    let (orders, requests) = books
        .lock()
        .map(|b| (b.orders.len(), b.requests))
        .unwrap_or_default();
    serde_json::json!({ "booked": orders, "requests": requests }).to_string()
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let shared: Shared = Arc::new((Mutex::new(Books::default()), args.fail_rate, args.verbose));
    let app = axum::Router::new()
        .route("/booked", axum::routing::get(booked))
        .fallback(axum::routing::post(inbound))
        .with_state(shared);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(args.listen).await?;
            eprintln!("erp stand-in listening on http://{}", args.listen);
            axum::serve(listener, app).await
        })
}
