//! What the gateway tells a monitoring system: `/metrics` in the Prometheus text format and
//! `/healthz`, served by `watch` on `[gateway] metrics`, and `x12gate metrics` for cron and
//! node-exporter's textfile collector.
//!
//! Counts come from the registry at each scrape, not from process memory: the audit trail is
//! append-only, so its counts only grow (Prometheus counters), they survive restarts, and two
//! watchers on one registry report the same numbers. Only the batch durations live in the
//! process that measured them.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry as Exposition;

use crate::config::Config;
use crate::registry::{ClaimState, EventKind, Readers, Registry, RegistryError, Snapshot};

type Labels = Vec<(String, String)>;

/// Measurements of this process (the watcher's batches).
#[derive(Debug)]
pub struct Live {
    pub batch_seconds: Histogram,
    /// The configuration a reload (SIGHUP) put in force, for the partners' labels; `None`:
    /// the one the server started with.
    reloaded: std::sync::RwLock<Option<Arc<Config>>>,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            // 5 ms to about 80 s.
            batch_seconds: Histogram::new(exponential_buckets(0.005, 2.0, 15)),
            reloaded: std::sync::RwLock::new(None),
        }
    }
}

impl Live {
    /// `config` is in force from now on.
    pub fn reloaded(&self, config: Arc<Config>) {
        if let Ok(mut r) = self.reloaded.write() {
            *r = Some(config);
        }
    }

    fn config_or(&self, started: &Arc<Config>) -> Arc<Config> {
        self.reloaded
            .read()
            .ok()
            .and_then(|r| r.clone())
            .unwrap_or_else(|| started.clone())
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    // The encoder writes label values as they are: a quote, backslash or line break would
    // make the whole exposition unreadable.
    let escaped = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), escaped(v)))
        .collect()
}

/// The partner label: a configured partner's `QUAL:ID`, `unknown` for any other sender (or
/// none), so that a stranger's ISA06 neither makes labels without end nor alerts forever.
fn partner_label(config: &Config, partner: &str) -> String {
    if config.partners.iter().any(|p| p.key() == partner) {
        partner.to_string()
    } else {
        "unknown".to_string()
    }
}

/// Files waiting in `rejected/` for someone (not the reason files).
pub fn rejected_backlog(config: &Config) -> usize {
    std::fs::read_dir(&config.gateway.rejected)
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_type().is_ok_and(|t| t.is_file())
                        && !e.file_name().to_string_lossy().starts_with('.')
                        && !e.file_name().to_string_lossy().ends_with(".reason.json")
                })
                .count()
        })
        .unwrap_or(0)
}

/// The exposition text: the registry's counts, the folders' backlog, and `live` when given.
pub fn render(config: &Config, live: Option<&Live>) -> Result<String, RegistryError> {
    let registry = Registry::open_read_only(&config.gateway.database)?;
    exposition(config, registry.as_ref(), live)
}

/// [`render`] from `registry` (`None`: there is none yet), which the caller opened: `x12gate
/// metrics` its own, `/metrics` one of the connections it shares with the web page.
// The families are registered in the order `/metrics` prints them (the dashboard and the
// alert rules in `contrib/` follow it): interchanges, claims, documents and deliveries.
fn exposition(
    config: &Config,
    registry: Option<&Registry>,
    live: Option<&Live>,
) -> Result<String, RegistryError> {
    let (snap, protocol_errors, outbound) = match registry {
        Some(r) => (r.snapshot()?, r.protocol_errors()?, r.outbound_counts()?),
        None => Default::default(),
    };
    let mut reg = Exposition::with_prefix("x12gate");
    interchange_families(&mut reg, config, &snap);
    claim_families(&mut reg, config, &snap);
    delivery_families(&mut reg, config, &snap, &protocol_errors);
    outbound_families(&mut reg, &outbound);
    let info = Family::<Labels, Gauge>::default();
    info.get_or_create(&labels(&[("version", env!("CARGO_PKG_VERSION"))]))
        .set(1);
    reg.register("build_info", "The x12gate version running", info);
    if let Some(live) = live {
        reg.register(
            "batch_seconds",
            "Time to process one batch of files, from claim to completion",
            live.batch_seconds.clone(),
        );
    }
    let mut text = String::new();
    encode(&mut text, &reg).map_err(|e| RegistryError::Io {
        path: "metrics".into(),
        cause: std::io::Error::other(e.to_string()),
    })?;
    Ok(in_order(&text))
}

/// The exposition with each counter's and gauge's series sorted by their labels: a family
/// keeps its series in a hash map, so they came in another order at every scrape (a diff of
/// two scrapes, or a test, then shows nothing but noise). A histogram's lines keep their
/// order (its buckets go up).
fn in_order(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut samples: Vec<&str> = Vec::new();
    let mut sortable = false;
    let flush = |samples: &mut Vec<&str>, sortable: bool, out: &mut String| {
        if sortable {
            samples.sort_unstable();
        }
        for s in samples.drain(..) {
            out.push_str(s);
            out.push('\n');
        }
    };
    for line in text.lines() {
        if line.starts_with('#') {
            flush(&mut samples, sortable, &mut out);
            if let Some(kind) = line.strip_prefix("# TYPE ") {
                sortable = kind.ends_with(" counter") || kind.ends_with(" gauge");
            }
            out.push_str(line);
            out.push('\n');
        } else {
            samples.push(line);
        }
    }
    flush(&mut samples, sortable, &mut out);
    out
}

/// What was decided on interchanges and answered, and the files waiting in `rejected/`.
fn interchange_families(reg: &mut Exposition, config: &Config, snap: &Snapshot) {
    let decisions = Family::<Labels, Counter>::default();
    let conflicts = Family::<Labels, Counter>::default();
    for (partner, decision, n) in &snap.decisions {
        let partner = partner_label(config, partner);
        decisions
            .get_or_create(&labels(&[
                ("partner", &partner),
                ("decision", decision.as_str()),
            ]))
            .inc_by(*n);
        if *decision == EventKind::Conflict {
            conflicts
                .get_or_create(&labels(&[("partner", &partner)]))
                .inc_by(*n);
        }
    }
    reg.register(
        "interchanges",
        "Decisions on interchanges by partner (QUAL:ID) and decision: accepted, partial, rejected, duplicate, conflict, in_progress",
        decisions,
    );
    reg.register(
        "conflicts",
        "Control numbers reused for other content (TA1 025), by partner",
        conflicts,
    );
    let acks = Family::<Labels, Counter>::default();
    for (partner, kind, n) in &snap.acks_sent {
        let partner = partner_label(config, partner);
        acks.get_or_create(&labels(&[("partner", &partner), ("kind", kind)]))
            .inc_by(*n);
    }
    reg.register(
        "acknowledgments_sent",
        "Acknowledgments written to the outbox (replays included), by partner and kind: ta1, 997, 999",
        acks,
    );
    let backlog = Gauge::<i64>::default();
    backlog.set(i64::try_from(rejected_backlog(config)).unwrap_or(i64::MAX));
    reg.register(
        "rejected_backlog_files",
        "Files in rejected/ waiting for someone",
        backlog,
    );
}

/// Claims not completed, and when each partner last sent.
fn claim_families(reg: &mut Exposition, config: &Config, snap: &Snapshot) {
    let unfinished = Family::<Labels, Gauge>::default();
    for state in [ClaimState::InFlight, ClaimState::Failed] {
        let n = snap
            .unfinished
            .iter()
            .find(|(s, _)| *s == state)
            .map_or(0, |(_, n)| *n);
        unfinished
            .get_or_create(&labels(&[("state", state.as_str())]))
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    reg.register(
        "unfinished_claims",
        "Claims not completed, by state (in_flight, failed)",
        unfinished,
    );
    let oldest = Gauge::<i64>::default();
    oldest.set(
        snap.oldest_unfinished_ms
            .map_or(0, |t| (crate::registry::now_ms() - t).max(0) / 1000),
    );
    reg.register(
        "oldest_unfinished_claim_age_seconds",
        "Age of the oldest claim not completed (0 when there is none)",
        oldest,
    );
    let last = Family::<Labels, Gauge>::default();
    // Configured partners only: the alert on a partner gone silent is for partners we expect.
    for (partner, at) in &snap.last_received {
        if partner_label(config, partner) != "unknown" {
            last.get_or_create(&labels(&[("partner", partner)]))
                .set(at / 1000);
        }
    }
    reg.register(
        "partner_last_received_timestamp_seconds",
        "When each partner's latest interchange was decided (Unix time), for inactivity alerts",
        last,
    );
}

/// Business documents still open, the outbox by state, circuits and protocol errors.
fn delivery_families(
    reg: &mut Exposition,
    config: &Config,
    snap: &Snapshot,
    protocol_errors: &[(String, u64)],
) {
    let open = Family::<Labels, Gauge>::default();
    for (partner, delivery, n) in &snap.documents_open {
        let partner = partner_label(config, partner);
        open.get_or_create(&labels(&[
            ("partner", &partner),
            ("delivery", delivery.as_str()),
        ]))
        .inc_by(i64::try_from(*n).unwrap_or(i64::MAX));
    }
    reg.register(
        "documents_open",
        "Business documents not delivered yet that wait for someone, by partner and delivery: held (a conflict, for an operator), parked (a change waiting for its original), pending (being written)",
        open,
    );
    let deliveries = Family::<Labels, Gauge>::default();
    for (destination, state, n) in &snap.deliveries {
        deliveries
            .get_or_create(&labels(&[
                ("destination", destination),
                ("state", state.as_str()),
            ]))
            .set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
    reg.register(
        "deliveries",
        "Documents in the outbox by destination and state: queued, retrying, blocked (behind a dead earlier document of the same PO), dead (the dead-letter queue, for its owner), delivered",
        deliveries,
    );
    let circuits = Family::<Labels, Gauge>::default();
    for (destination, state) in &snap.circuits {
        circuits
            .get_or_create(&labels(&[("destination", destination)]))
            .set(i64::from(*state != crate::registry::CircuitState::Closed));
    }
    reg.register(
        "delivery_circuit_open",
        "1 while a destination's circuit is open (or probing): its deliveries wait",
        circuits,
    );
    let protocol = Family::<Labels, Counter>::default();
    let http = config
        .destinations
        .iter()
        .filter(|d| matches!(d.kind, crate::config::DestinationKind::Http { .. }));
    for d in http {
        let n = protocol_errors
            .iter()
            .find(|(name, _)| *name == d.name)
            .map_or(0, |(_, n)| *n);
        protocol
            .get_or_create(&labels(&[("destination", &d.name)]))
            .inc_by(n);
    }
    reg.register(
        "destination_protocol_errors",
        "Delivery attempts whose answer was not a whole HTTP answer to its request (cut off, malformed), by destination: not delivered, tried again on a new connection",
        protocol,
    );
}

/// Our own documents sent, by partner and where the partner's acknowledgment stands, and
/// the overdue ones alone (what the morning report and the alert read).
fn outbound_families(reg: &mut Exposition, counts: &[(String, String, u64)]) {
    let documents = Family::<Labels, Gauge>::default();
    let overdue = Family::<Labels, Gauge>::default();
    for (partner, state, n) in counts {
        let n = i64::try_from(*n).unwrap_or(i64::MAX);
        documents
            .get_or_create(&labels(&[("partner", partner), ("state", state)]))
            .set(n);
        if state == "overdue" {
            overdue
                .get_or_create(&labels(&[("partner", partner)]))
                .set(n);
        }
    }
    reg.register(
        "outbound_documents_total",
        "Our documents sent to partners (send), by partner and acknowledgment: waiting, overdue (no 997/999 within ack_due_seconds), accepted, accepted_with_errors, partially_accepted, rejected, not_expected",
        documents,
    );
    reg.register(
        "outbound_overdue",
        "Our documents sent whose partner's 997/999 is overdue, by partner",
        overdue,
    );
}

/// Whether the gateway can work: the checks of `x12gate check`. `Err` carries the problems.
pub fn health(config: &Config) -> Result<(), Vec<String>> {
    let problems = crate::setup::check(config);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.iter().map(ToString::to_string).collect())
    }
}

#[derive(Clone)]
struct State {
    config: Arc<Config>,
    live: Arc<Live>,
    /// Shared with the web page when it is served.
    readers: Arc<Readers>,
}

async fn metrics_page(
    axum::extract::State(s): axum::extract::State<State>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let rendered = tokio::task::spawn_blocking(move || {
        let reader = s.readers.get()?;
        exposition(
            &s.live.config_or(&s.config),
            reader.as_deref(),
            Some(&s.live),
        )
    })
    .await;
    match rendered {
        Ok(Ok(text)) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Ok(Err(e)) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("the registry cannot be read: {e}\n"),
        )
            .into_response(),
        Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn health_page(
    axum::extract::State(s): axum::extract::State<State>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    // A hung file system must not hang the probe: past five seconds the answer is 503.
    let checked = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tokio::task::spawn_blocking(move || health(&s.config)),
    )
    .await
    .unwrap_or_else(|_| {
        Ok(Err(vec![
            "the checks did not finish within 5 s (a hung file system?)".into(),
        ]))
    });
    let (status, body) = match checked {
        Ok(Ok(())) => (
            axum::http::StatusCode::OK,
            serde_json::json!({ "status": "ok" }),
        ),
        Ok(Err(problems)) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({ "status": "unavailable", "problems": problems }),
        ),
        Err(e) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({ "status": "unavailable", "problems": [e.to_string()] }),
        ),
    };
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Binds `addr` now (so a port in use stops the watcher at start), and returns the server
/// to run until `shutdown`: `/metrics`, `/healthz`, and the web page of `site` when given.
pub async fn bind(
    addr: std::net::SocketAddr,
    config: Arc<Config>,
    live: Arc<Live>,
    site: Option<Arc<crate::web::Site>>,
) -> std::io::Result<impl std::future::Future<Output = std::io::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let readers = site.as_ref().map_or_else(
        || Arc::new(Readers::new(config.gateway.database.clone())),
        |s| s.readers.clone(),
    );
    let mut app = axum::Router::new()
        .route("/metrics", axum::routing::get(metrics_page))
        .route("/healthz", axum::routing::get(health_page))
        .with_state(State {
            config,
            live,
            readers,
        });
    if let Some(site) = site {
        app = app.merge(crate::web::router(site));
    }
    Ok(async move { axum::serve(listener, app).await })
}

#[cfg(test)]
mod tests {
    #[test]
    fn counters_and_gauges_come_sorted_and_a_histogram_keeps_its_order() {
        let text = "# HELP x A.\n# TYPE x counter\nx{p=\"b\"} 1\nx{p=\"a\"} 2\n\
                    # HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1.0\"} 1\nh_bucket{le=\"+Inf\"} 1\n# EOF\n";
        assert_eq!(
            super::in_order(text),
            "# HELP x A.\n# TYPE x counter\nx{p=\"a\"} 2\nx{p=\"b\"} 1\n\
             # HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1.0\"} 1\nh_bucket{le=\"+Inf\"} 1\n# EOF\n"
        );
    }
}
