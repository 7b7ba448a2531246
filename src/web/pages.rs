//! The pages and the actions: each handler checks who is asking, reads the registry on a
//! blocking thread (a connection per request: the pages only read, and SQLite readers do not
//! wait for the watcher's writes), and renders a template.

use std::collections::BTreeMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Form, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::TimeZone;

use super::auth::{self, Who};
use super::chart::{self, Chart};
use super::Site;
use crate::config::Config;
use crate::disposition::Disposition;
use crate::document::DocumentDisposition;
use crate::registry::{Delivery, EventKind, Reader, Registry, Retry, Search};

/// At most this many rows in a list or a search (the search says when there are more).
const LIMIT: usize = 500;
/// An acknowledgment shown on a page is cut after this many bytes.
const ACK_SHOWN: usize = 64 * 1024;
/// Reason files read for the rejected list and the overview's backlog (oldest first).
const REASON_FILES: usize = 500;
/// A reason file larger than this is listed without its contents.
const REASON_MAX: u64 = 1 << 20;

pub fn router(site: Arc<Site>) -> axum::Router {
    axum::Router::new()
        .route("/", get(overview))
        .route("/search", get(search))
        .route("/interchange/:key", get(interchange))
        .route("/interchange/:key/file", get(interchange_file))
        .route("/rejected", get(rejected))
        .route("/held", get(held))
        .route("/dead", get(dead))
        .route("/sent", get(sent))
        .route("/deliveries", get(deliveries))
        .route("/documents", get(documents))
        .route("/document/:key", get(document))
        .route("/document/:key/body", get(document_body))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/action/:action", post(action))
        .layer(axum::middleware::from_fn_with_state(
            site.clone(),
            local_only,
        ))
        .with_state(site)
}

/// Without tokens the page is open to this host only, and a browser on this host must not be
/// made to read it for another site: a page that rebinds its own name to 127.0.0.1 (DNS
/// rebinding) sends its own name as `Host`, which is refused here.
async fn local_only(
    State(site): State<Arc<Site>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !site.tokens.is_empty() {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if is_local_name(host) {
        next.run(request).await
    } else {
        (
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "this page answers to localhost, 127.0.0.1 or [::1] only (Host: {}); set {} to serve it under another name\n",
                p(crate::text::bounded(host, 256)),
                super::auth::TOKEN_VARIABLE
            ),
        )
            .into_response()
    }
}

/// `localhost`, a loopback address, with or without a port.
fn is_local_name(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or(rest, |(h, _)| h),
        None => host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        }),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Text from a partner's file, with its control characters escaped (the template escapes
/// the markup).
fn p(s: &str) -> String {
    crate::text::printable(s).into_owned()
}

/// A moment in local time, with its offset from UTC (a desk in two time zones reads the
/// same page).
fn time(ms: i64) -> String {
    chrono::Local
        .timestamp_millis_opt(ms)
        .single()
        .map(|t| t.format("%Y-%m-%d %H:%M:%S %:z").to_string())
        .unwrap_or_default()
}

fn ago(ms: i64, now: i64) -> String {
    let s = (now - ms).max(0) / 1000;
    match s {
        0..=59 => format!("{s} s ago"),
        60..=3599 => format!("{} min ago", s / 60),
        3600..=172_799 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

/// What every page shows around its content.
#[derive(Clone)]
pub struct Frame {
    pub who: Option<String>,
    /// The form value for actions, when the operator may act.
    pub form: Option<String>,
    pub actions: bool,
    pub now: String,
}

impl Frame {
    pub fn can_act(&self) -> bool {
        self.actions && self.form.is_some()
    }
}

fn frame(site: &Site, who: &Who) -> Frame {
    Frame {
        who: who.name().map(str::to_string),
        form: who.name().and_then(|n| site.tokens.form_value(n)),
        actions: site.actions,
        now: time(crate::registry::now_ms()),
    }
}

fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // Nothing of ours is framed, and nothing is loaded from elsewhere.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "same-origin"),
        ],
        body,
    )
        .into_response()
}

#[derive(Template)]
#[template(path = "message.html")]
struct MessagePage {
    frame: Frame,
    title: String,
    message: String,
    /// Where to look next: an interchange's page (its key), or a list (`held`, `dead`).
    back_interchange: Option<String>,
    back_list: Option<&'static str>,
}

fn message(site: &Site, who: &Who, status: StatusCode, title: &str, text: &str) -> Response {
    let page = MessagePage {
        frame: frame(site, who),
        title: title.to_string(),
        message: p(text),
        back_interchange: None,
        back_list: None,
    };
    shown(status, &page)
}

/// A template rendered as the response, or the renderer's error.
fn shown(status: StatusCode, t: &impl Template) -> Response {
    match t.render() {
        Ok(body) => html(status, body),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Why a page is not shown: its status and the sentence for the operator.
pub struct Refused(StatusCode, String);

impl From<String> for Refused {
    fn from(why: String) -> Refused {
        Refused(StatusCode::SERVICE_UNAVAILABLE, why)
    }
}

/// Renders a page on a blocking thread, once the asker is let in: with tokens configured,
/// only an operator is (the others go to the login form).
async fn page<F>(site: Arc<Site>, headers: HeaderMap, build: F) -> Response
where
    F: FnOnce(&Site, &Frame) -> Result<String, Refused> + Send + 'static,
{
    let who = site.who(&headers).await;
    if !site.tokens.is_empty() && who == Who::Anonymous {
        return Redirect::to("/login").into_response();
    }
    let s = site.clone();
    let w = who.clone();
    let built = tokio::task::spawn_blocking(move || {
        let f = frame(&s, &w);
        build(&s, &f)
    })
    .await;
    match built {
        Ok(Ok(body)) => html(StatusCode::OK, body),
        Ok(Err(Refused(status, why))) => {
            let title = if status == StatusCode::NOT_FOUND {
                "Not found"
            } else {
                "Not available"
            };
            message(&site, &who, status, title, &why)
        }
        Err(e) => message(
            &site,
            &who,
            StatusCode::INTERNAL_SERVER_ERROR,
            "Failed",
            &e.to_string(),
        ),
    }
}

/// A read-only connection of the site's shared ones.
fn reader(site: &Site) -> Result<Reader<'_>, String> {
    site.readers
        .get()
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "there is no registry at {} yet (x12gate init creates it)",
                site.config().gateway.database
            )
        })
}

fn rendered(t: impl Template) -> Result<String, Refused> {
    t.render()
        .map_err(|e| Refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// The configured partner whose `QUAL:ID` is `key`.
fn partner_of<'c>(config: &'c Config, key: &str) -> Option<&'c crate::config::Partner> {
    config.partners.iter().find(|x| x.key() == key)
}

// ---------------------------------------------------------------- overview

#[derive(Default, Clone, Copy)]
pub struct Counts {
    pub accepted: u64,
    pub partial: u64,
    pub rejected: u64,
    pub duplicate: u64,
    pub conflict: u64,
}

impl Counts {
    /// Counted in the chart's columns, so that the table and the chart agree.
    fn add(&mut self, kind: EventKind, n: u64) {
        let slot = match chart::column(kind) {
            Some(0) => &mut self.accepted,
            Some(1) => &mut self.partial,
            Some(2) => &mut self.rejected,
            Some(3) => &mut self.duplicate,
            Some(4) => &mut self.conflict,
            _ => return,
        };
        *slot += n;
    }
}

#[derive(Default, Clone, Copy)]
pub struct DocCounts {
    pub new: u64,
    pub duplicate: u64,
    pub conflict: u64,
}

impl DocCounts {
    fn add(&mut self, d: DocumentDisposition, n: u64) {
        match d {
            DocumentDisposition::New => self.new += n,
            DocumentDisposition::Duplicate => self.duplicate += n,
            DocumentDisposition::Conflict => self.conflict += n,
            // Waiting documents are counted where they stand now (the Waiting column).
            DocumentDisposition::Waiting | DocumentDisposition::Stale => {}
        }
    }
}

#[derive(Default)]
pub struct PartnerRow {
    pub key: String,
    pub name: String,
    pub configured: bool,
    pub today: Counts,
    pub week: Counts,
    pub docs_today: DocCounts,
    pub docs_week: DocCounts,
    pub held: u64,
    pub waiting: u64,
    pub dead: u64,
    pub rejected_files: u64,
    pub last: Option<String>,
    pub ago: Option<String>,
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    frame: Frame,
    rows: Vec<PartnerRow>,
    hourly: Chart,
    daily: Chart,
    kinds: Vec<(&'static str, &'static str)>,
    rejected_backlog: usize,
    unfinished: u64,
    /// Our documents whose partner's 997/999 is overdue, and those it rejected.
    outbound_overdue: u64,
    outbound_rejected: u64,
    /// Each destination's circuit, queue and last outcome: an ERP down shows here.
    destinations: Vec<DestinationView>,
}

/// A destination as the overview shows it.
struct DestinationView {
    name: String,
    circuit: String,
    down: bool,
    queued: u64,
    retrying: u64,
    blocked: u64,
    dead: u64,
    delivered: String,
    failed: String,
    error: String,
}

/// Every destination configured or with deliveries, with its counts by state, its circuit
/// and its last success and failure.
fn destination_views(
    config: &Config,
    r: &Registry,
) -> Result<Vec<DestinationView>, crate::registry::RegistryError> {
    use crate::registry::{CircuitState, DeliveryState};
    let counts = r.delivery_counts()?;
    let circuits = r.circuits()?;
    let lasts = r.destination_lasts()?;
    let mut names: Vec<String> = config.destinations.iter().map(|d| d.name.clone()).collect();
    for (d, ..) in &counts {
        if !names.contains(d) {
            names.push(d.clone());
        }
    }
    Ok(names
        .into_iter()
        .map(|name| {
            let n = |state: DeliveryState| {
                counts
                    .iter()
                    .filter(|(d, s, _)| *d == name && *s == state)
                    .map(|c| c.2)
                    .sum()
            };
            let circuit = circuits
                .iter()
                .find(|c| c.0 == name)
                .map_or(CircuitState::Closed, |c| c.1);
            let last = lasts.iter().find(|l| l.destination == name);
            let failed = last.and_then(|l| l.failed_ms);
            // A failure after the last success is the state the destination is in.
            let failing =
                failed.is_some_and(|f| last.and_then(|l| l.delivered_ms).is_none_or(|d| f > d));
            DestinationView {
                circuit: circuit.to_string(),
                down: circuit != CircuitState::Closed || n(DeliveryState::Dead) > 0 || failing,
                queued: n(DeliveryState::Queued),
                retrying: n(DeliveryState::Retrying),
                blocked: n(DeliveryState::Blocked),
                dead: n(DeliveryState::Dead),
                delivered: last
                    .and_then(|l| l.delivered_ms)
                    .map(time)
                    .unwrap_or_default(),
                failed: failed.map(time).unwrap_or_default(),
                error: last
                    .filter(|_| failing)
                    .map(|l| {
                        format!(
                            "{} {}",
                            l.status.as_deref().unwrap_or_default(),
                            l.error
                                .as_deref()
                                .map(|e| crate::text::bounded(e, 300))
                                .unwrap_or_default()
                        )
                    })
                    .map(|e| p(e.trim()))
                    .unwrap_or_default(),
                name: p(&name),
            }
        })
        .collect())
}

async fn overview(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    page(site, headers, |site, frame| {
        build_overview(site, frame.clone())
    })
    .await
}

/// The first moment of local `date` (its midnight, or the hour a clock change starts it).
fn day_start(date: chrono::NaiveDate) -> Option<i64> {
    (0..4).find_map(|h| {
        date.and_hms_opt(h, 0, 0)?
            .and_local_timezone(chrono::Local)
            .earliest()
            .map(|t| t.timestamp_millis())
    })
}

/// Each partner's decisions and documents today (since `midnight`) and this `week`.
fn counted(
    r: &Registry,
    rows: &mut BTreeMap<String, PartnerRow>,
    midnight: i64,
    week: i64,
) -> Result<(), crate::registry::RegistryError> {
    for (partner, kind, n) in r.decisions_since(midnight)? {
        row(rows, &partner).today.add(kind, n);
    }
    for (partner, kind, n) in r.decisions_since(week)? {
        row(rows, &partner).week.add(kind, n);
    }
    for (partner, d, n) in r.documents_since(midnight)? {
        row(rows, &partner).docs_today.add(d, n);
    }
    for (partner, d, n) in r.documents_since(week)? {
        row(rows, &partner).docs_week.add(d, n);
    }
    Ok(())
}

fn build_overview(site: &Site, frame: Frame) -> Result<String, Refused> {
    let config = &site.config();
    let r = reader(site)?;
    let e = |e: crate::registry::RegistryError| Refused::from(e.to_string());
    let now = crate::registry::now_ms();
    let today = chrono::Local::now().date_naive();
    let midnight = day_start(today).unwrap_or(now - 86_400_000);
    let week = now - 7 * 86_400_000;
    let mut rows: BTreeMap<String, PartnerRow> = BTreeMap::new();
    for partner in &config.partners {
        rows.insert(
            partner.key(),
            PartnerRow {
                key: partner.key(),
                name: partner.name.clone(),
                configured: true,
                ..PartnerRow::default()
            },
        );
    }
    counted(&r, &mut rows, midnight, week).map_err(e)?;
    for (partner, delivery, n) in r.open_documents().map_err(e)? {
        match delivery {
            Delivery::Held => row(&mut rows, &partner).held += n,
            Delivery::Parked => row(&mut rows, &partner).waiting += n,
            _ => {}
        }
    }
    for (partner, n) in r.dead_by_partner().map_err(e)? {
        row(&mut rows, &partner).dead += n;
    }
    let outbound = r.outbound_counts().map_err(e)?;
    let files = rejected_files(config);
    for f in &files.files {
        for partner in &f.partners {
            row(&mut rows, partner).rejected_files += 1;
        }
    }
    for (key, x) in rows.iter_mut() {
        if let Some(when) = r.last_received(key).map_err(e)? {
            x.last = Some(time(when));
            x.ago = Some(ago(when, now));
        }
    }
    // The last 24 hours by the hour; the last 14 local days, counted from the same hourly
    // buckets so that a day is a local day whatever the clock changes.
    let hour = 3_600_000;
    let hours_since = (now / hour - 23) * hour;
    let hourly = buckets(
        &r.traffic(hours_since, hour).map_err(e)?,
        hours_since,
        hour,
        24,
    );
    let days: Vec<i64> = (0..14u64)
        .rev()
        .filter_map(|back| day_start(today.checked_sub_days(chrono::Days::new(back))?))
        .collect();
    let first_day = days.first().copied().unwrap_or(midnight);
    let mut daily = vec![Vec::new(); days.len()];
    for (at, kind, n) in r.traffic(first_day, hour).map_err(e)? {
        let day = days.partition_point(|start| *start <= at).saturating_sub(1);
        if let Some(b) = daily.get_mut(day) {
            b.push((kind, n));
        }
    }
    let label = |at: Option<i64>, format: &str| {
        at.and_then(|at| chrono::Local.timestamp_millis_opt(at).single())
            .map(|t| t.format(format).to_string())
            .unwrap_or_default()
    };
    let hour_label = |i: usize| {
        let at = i64::try_from(i).ok().map(|i| hours_since + i * hour);
        label(at, "%H:%M")
    };
    let day_label = |i: usize| label(days.get(i).copied(), "%m-%d");
    rendered(OverviewPage {
        frame,
        // The configured partners first, by name; then the senders no partner configures.
        rows: {
            let mut rows: Vec<PartnerRow> = rows.into_values().collect();
            rows.sort_by(|a, b| {
                (!a.configured, &a.name, &a.key).cmp(&(!b.configured, &b.name, &b.key))
            });
            rows
        },
        hourly: chart::stacked(&hourly, &hour_label, 3),
        daily: chart::stacked(&daily, &day_label, 2),
        kinds: chart::KINDS.to_vec(),
        rejected_backlog: files.total,
        unfinished: r.unfinished_count().map_err(e)?,
        outbound_overdue: outbound
            .iter()
            .filter(|(_, s, _)| s == "overdue")
            .map(|x| x.2)
            .sum(),
        outbound_rejected: outbound
            .iter()
            .filter(|(_, s, _)| s == "rejected")
            .map(|x| x.2)
            .sum(),
        destinations: destination_views(config, &r).map_err(e)?,
    })
}

/// The row of partner `key`; one is made for a sender that no partner configures.
fn row<'a>(rows: &'a mut BTreeMap<String, PartnerRow>, key: &str) -> &'a mut PartnerRow {
    rows.entry(key.to_string()).or_insert_with(|| PartnerRow {
        key: p(key),
        name: if key.is_empty() {
            "(no readable sender)".into()
        } else {
            "(not configured)".into()
        },
        ..PartnerRow::default()
    })
}

/// `rows` of (bucket start, kind, count) spread over `n` buckets from `start`.
fn buckets(
    rows: &[(i64, EventKind, u64)],
    start: i64,
    size: i64,
    n: usize,
) -> Vec<Vec<(EventKind, u64)>> {
    let mut out = vec![Vec::new(); n];
    for (at, kind, count) in rows {
        let i = usize::try_from((at - start) / size).unwrap_or(usize::MAX);
        if let Some(b) = out.get_mut(i) {
            b.push((*kind, *count));
        }
    }
    out
}

// ---------------------------------------------------------------- rejected files

/// A file waiting in `rejected/`, as its reason file tells.
pub struct RejectedFile {
    pub name: String,
    pub time: String,
    pub disposition: String,
    pub reason: String,
    pub contact: String,
    /// The senders (`QUAL:ID`, as the registry writes them) of its interchanges.
    pub partners: Vec<String>,
    /// (sender, control number, disposition, reason) of each interchange.
    pub interchanges: Vec<(String, String, String, String)>,
}

/// The files waiting in `rejected/`: all counted, the oldest [`REASON_FILES`] read.
pub struct RejectedFiles {
    pub files: Vec<RejectedFile>,
    pub total: usize,
}

/// Entries of `rejected/` looked at, at most: past this the count says "at least".
const REJECTED_SCAN: usize = 200_000;

fn rejected_files(config: &Config) -> RejectedFiles {
    let Ok(entries) = std::fs::read_dir(&config.gateway.rejected) else {
        return RejectedFiles {
            files: Vec::new(),
            total: 0,
        };
    };
    let mut reasons: Vec<(i64, std::fs::DirEntry, u64)> = entries
        .flatten()
        .take(REJECTED_SCAN)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".reason.json"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            Some((modified, e, meta.len()))
        })
        .collect();
    let total = reasons.len();
    reasons.sort_by_key(|(modified, ..)| *modified);
    let files = reasons
        .into_iter()
        .take(REASON_FILES)
        .map(|(modified_ms, entry, len)| rejected_file(&entry, modified_ms, len))
        .collect();
    RejectedFiles { files, total }
}

/// One reason file read, its texts bounded.
fn rejected_file(entry: &std::fs::DirEntry, modified_ms: i64, len: u64) -> RejectedFile {
    let name = entry.file_name().to_string_lossy().into_owned();
    let file = name.strip_suffix(".reason.json").unwrap_or(&name);
    let reason: serde_json::Value = if len <= REASON_MAX {
        std::fs::read(entry.path())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    } else {
        serde_json::json!({ "reason": "(reason file too large to show here)" })
    };
    let s = |v: &serde_json::Value| {
        v.as_str()
            .map(|t| p(crate::text::bounded(t, 2048)))
            .unwrap_or_default()
    };
    let interchanges: Vec<(String, String, String, String)> = reason["interchanges"]
        .as_array()
        .map(|a| {
            a.iter()
                .take(50)
                .map(|i| {
                    (
                        s(&i["sender"]),
                        s(&i["control_number"]),
                        s(&i["disposition"]),
                        s(&i["reason"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut partners: Vec<String> = reason["interchanges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["sender"].as_str().map(str::to_string))
        .collect();
    partners.sort();
    partners.dedup();
    RejectedFile {
        name: p(file),
        time: time(modified_ms),
        disposition: s(&reason["disposition"]),
        reason: s(&reason["reason"]),
        contact: s(&reason["contact"]),
        partners,
        interchanges,
    }
}

// ---------------------------------------------------------------- search

#[derive(serde::Deserialize, Default)]
pub struct SearchQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    partner: String,
    #[serde(default)]
    disposition: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    #[serde(default)]
    set: String,
}

pub struct ListedView {
    pub key: String,
    pub shown_key: String,
    pub partner: String,
    pub control_number: String,
    pub state: String,
    pub disposition: String,
    pub reason: String,
    pub file: String,
    pub first_seen: String,
    pub last_seen: String,
    pub contact: String,
}

fn listed_view(config: &Config, l: &crate::registry::Listed) -> ListedView {
    ListedView {
        key: l.key.clone(),
        shown_key: p(&l.key),
        partner: p(&l.partner),
        control_number: p(&l.control_number),
        state: l.state.to_string(),
        disposition: l.disposition.map_or("-", Disposition::as_str).to_string(),
        reason: l.reason.as_deref().map(p).unwrap_or_default(),
        file: l.file.as_deref().map(p).unwrap_or_default(),
        first_seen: time(l.first_seen_ms),
        last_seen: time(l.last_seen_ms),
        contact: contact(config, &l.partner),
    }
}

fn contact(config: &Config, partner: &str) -> String {
    partner_of(config, partner)
        .and_then(|x| x.contact.as_deref())
        .map(p)
        .unwrap_or_default()
}

pub struct DocumentView {
    pub key: String,
    pub shown_key: String,
    pub partner: String,
    pub set: String,
    pub st02: String,
    pub interchange: String,
    pub shown_interchange: String,
    pub disposition: String,
    pub delivery: String,
    pub duplicate_of: String,
    pub seen: String,
    pub result_ref: String,
    pub contact: String,
}

fn document_view(config: &Config, d: &crate::registry::DocumentRow) -> DocumentView {
    DocumentView {
        key: d.key.clone(),
        shown_key: p(&d.key),
        partner: p(&d.partner),
        set: p(&d.set),
        st02: p(&d.st02),
        interchange: d.interchange.clone(),
        shown_interchange: p(&d.interchange),
        disposition: d.disposition.to_string(),
        delivery: match d.undelivered {
            Some(why) => format!("{} ({why})", d.delivery),
            None => d.delivery.to_string(),
        },
        duplicate_of: d.duplicate_of.as_deref().map(p).unwrap_or_default(),
        seen: time(d.seen_ms),
        result_ref: d.result_ref.as_deref().map(p).unwrap_or_default(),
        contact: contact(config, &d.partner),
    }
}

#[derive(Template)]
#[template(path = "search.html")]
struct SearchPage {
    frame: Frame,
    q: String,
    partner: String,
    disposition: String,
    since: String,
    until: String,
    set: String,
    dispositions: Vec<&'static str>,
    searched: bool,
    error: Option<String>,
    interchanges: Vec<ListedView>,
    documents: Vec<DocumentView>,
    more_interchanges: bool,
    more_documents: bool,
    limit: usize,
}

/// A time the operator typed, local: `YYYY-MM-DD`, `YYYY-MM-DD HH:MM[:SS]` (or with `T`).
/// As a range's end (`until`) it is the first moment after what was typed, so that the
/// whole day, minute or second typed is in the range.
fn typed_time(s: &str, end: bool) -> Result<Option<i64>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let t = s.replace('T', " ");
    let parsed = chrono::NaiveDateTime::parse_from_str(&t, "%Y-%m-%d %H:%M")
        .map(|d| (d, chrono::TimeDelta::minutes(1)))
        .or_else(|_| {
            chrono::NaiveDateTime::parse_from_str(&t, "%Y-%m-%d %H:%M:%S")
                .map(|d| (d, chrono::TimeDelta::seconds(1)))
        })
        .or_else(|_| {
            chrono::NaiveDate::parse_from_str(&t, "%Y-%m-%d").map(|d| {
                (
                    d.and_time(chrono::NaiveTime::MIN),
                    chrono::TimeDelta::days(1),
                )
            })
        });
    let Ok((start, span)) = parsed else {
        return Err(format!(
            "{}: not a time; expected YYYY-MM-DD or YYYY-MM-DD HH:MM",
            p(crate::text::bounded(s, 64))
        ));
    };
    let at = if end {
        start.checked_add_signed(span)
    } else {
        Some(start)
    };
    at.and_then(|t| t.and_local_timezone(chrono::Local).earliest())
        .map(|t| Some(t.timestamp_millis()))
        .ok_or_else(|| format!("{}: not a local time", p(crate::text::bounded(s, 64))))
}

async fn search(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Query(q): Query<SearchQuery>,
) -> Response {
    page(site, headers, move |site, frame| {
        let config = &site.config();
        let bounded = |s: &str| crate::text::bounded(s.trim(), 256).to_string();
        let mut pg = SearchPage {
            frame: frame.clone(),
            q: p(&bounded(&q.q)),
            partner: p(&bounded(&q.partner)),
            disposition: bounded(&q.disposition),
            since: p(&bounded(&q.since)),
            until: p(&bounded(&q.until)),
            set: p(&bounded(&q.set)),
            dispositions: [
                Disposition::Accepted,
                Disposition::Partial,
                Disposition::Rejected,
                Disposition::Duplicate,
                Disposition::Conflict,
            ]
            .iter()
            .map(|d| d.as_str())
            .collect(),
            searched: false,
            error: None,
            interchanges: Vec::new(),
            documents: Vec::new(),
            more_interchanges: false,
            more_documents: false,
            limit: LIMIT,
        };
        let asked = [&q.q, &q.partner, &q.disposition, &q.since, &q.until, &q.set]
            .iter()
            .any(|s| !s.trim().is_empty());
        if !asked {
            return rendered(pg);
        }
        let disposition = match q.disposition.trim() {
            "" => None,
            d => match Disposition::parse(d) {
                Some(d) => Some(d),
                None => {
                    pg.error = Some(format!(
                        "{}: not a disposition",
                        p(crate::text::bounded(d, 64))
                    ));
                    return rendered(pg);
                }
            },
        };
        let (since, until) = match (typed_time(&q.since, false), typed_time(&q.until, true)) {
            (Ok(s), Ok(u)) => (s, u),
            (Err(e), _) | (_, Err(e)) => {
                pg.error = Some(e);
                return rendered(pg);
            }
        };
        let r = reader(site)?;
        let found = r
            .search(&Search {
                text: Some(bounded(&q.q)).filter(|s| !s.is_empty()),
                // A partner as every command names one; otherwise as typed (a sender no
                // partner configures).
                partner: Some(bounded(&q.partner))
                    .filter(|s| !s.is_empty())
                    .map(|typed| {
                        config
                            .partner_named(&typed)
                            .map_or(typed, crate::config::Partner::key)
                    }),
                set: Some(bounded(&q.set)).filter(|s| !s.is_empty()),
                disposition,
                since_ms: since,
                until_ms: until,
                limit: LIMIT,
            })
            .map_err(|e| e.to_string())?;
        pg.searched = true;
        pg.more_interchanges = found.more_interchanges;
        pg.more_documents = found.more_documents;
        pg.interchanges = found
            .interchanges
            .iter()
            .map(|l| listed_view(config, l))
            .collect();
        pg.documents = found
            .documents
            .iter()
            .map(|d| document_view(config, d))
            .collect();
        rendered(pg)
    })
    .await
}

// ---------------------------------------------------------------- interchange

pub struct AckView {
    pub kind: String,
    pub name: String,
    pub isa13: String,
    pub gs06: String,
    pub text: String,
    pub bytes: usize,
    /// Where the text shown was cut (bytes), if it was.
    pub cut: Option<usize>,
}

fn ack_view(a: &crate::desk::SentAck) -> AckView {
    let shown = crate::text::bounded(&a.text, ACK_SHOWN);
    AckView {
        kind: p(&a.kind),
        name: p(&a.name),
        isa13: a.isa13.as_deref().map(p).unwrap_or_else(|| "-".into()),
        gs06: p(&a.gs06.join(", ")),
        // Segments one to a line, as an operator reads them; control characters escaped.
        text: p(shown).replace("\\u{a}", "\n"),
        bytes: a.text.len(),
        cut: (shown.len() < a.text.len()).then_some(shown.len()),
    }
}

pub struct DeliveryView {
    pub document: String,
    pub destination: String,
    pub state: String,
    pub attempts: u32,
    pub last_status: String,
    pub last_error: String,
    pub result_ref: String,
    pub key: String,
    pub owner: String,
    pub created: String,
    pub last: String,
}

fn delivery_view(config: &Config, d: &crate::registry::DeliveryRow) -> DeliveryView {
    let owner = partner_of(config, &d.partner)
        .and_then(|x| x.contact.as_deref())
        .or_else(|| {
            config
                .destination(&d.destination)
                .and_then(|x| x.owner.as_deref())
        })
        .map(p)
        .unwrap_or_default();
    DeliveryView {
        document: p(&d.key),
        key: d.key.clone(),
        destination: p(&d.destination),
        state: d.state.to_string(),
        attempts: d.attempts,
        last_status: d.last_status.as_deref().map(p).unwrap_or_default(),
        last_error: d
            .last_error
            .as_deref()
            .map(|x| p(crate::text::bounded(x, 2048)))
            .unwrap_or_default(),
        result_ref: d.result_ref.as_deref().map(p).unwrap_or_default(),
        owner,
        created: time(d.created_ms),
        last: d.last_ms.map(time).unwrap_or_default(),
    }
}

pub struct EventView {
    pub at: String,
    pub event: String,
    pub disposition: String,
    /// What the event recorded then, as `history` prints it (never the key's state now).
    pub facts: String,
    pub detail: String,
}

#[derive(Template)]
#[template(path = "interchange.html")]
struct InterchangePage {
    frame: Frame,
    key: String,
    shown_key: String,
    partner: String,
    partner_name: String,
    control_number: String,
    state: String,
    disposition: String,
    reason_code: String,
    reason: String,
    attempts: u32,
    holder: String,
    file: String,
    file_now: String,
    /// Whether the file is still there to be read (its findings, a reprocess).
    file_there: bool,
    reason_file: String,
    first_seen: String,
    last_seen: String,
    fingerprints: Vec<(u32, String, String)>,
    findings: Vec<String>,
    findings_more: usize,
    /// The partner's interchange, a segment a row, each with the findings at it.
    segments: Vec<crate::desk::PartnerSegment>,
    segments_more: usize,
    acks: Vec<AckView>,
    conflict_acks: Vec<AckView>,
    outputs: Vec<String>,
    documents: Vec<DocumentView>,
    documents_more: usize,
    deliveries: Vec<DeliveryView>,
    received: String,
    acknowledged: String,
    events: Vec<EventView>,
    events_more: usize,
    can_reprocess: bool,
}

fn event_view(e: &crate::registry::Event) -> EventView {
    EventView {
        at: time(e.at_ms),
        event: e.event.to_string(),
        disposition: e.disposition.map_or("", Disposition::as_str).to_string(),
        facts: crate::text::bounded(&crate::audit::line(e), 4096)
            .trim_end()
            .to_string(),
        detail: p(crate::text::bounded(&e.detail, 4096)),
    }
}

/// The largest file `/interchange/KEY/file` hands out (a larger one: `x12gate show` names
/// where it is).
const FILE_HANDED: u64 = 64 << 20;

/// The file an interchange came in, as it is stored now (archive, rejected or work folder),
/// byte for byte.
async fn interchange_file(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Path(given): Path<String>,
) -> Response {
    download(site, headers, "application/octet-stream", move |s| {
        let config = s.config();
        let r = reader(s).map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e))?;
        let not_found = |e: crate::desk::DeskError| (StatusCode::NOT_FOUND, e.to_string());
        let key = crate::desk::resolve(&r, &given).map_err(not_found)?;
        let schemas = s
            .schemas()
            .map_or_else(crate::schema::builtin, Ok)
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        let shown = crate::desk::show(&config, schemas, &r, &key).map_err(not_found)?;
        let path = shown.file_now.ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                format!("{key}: its file is no longer where it was recorded"),
            )
        })?;
        let unreadable =
            |e: std::io::Error| (StatusCode::NOT_FOUND, format!("{}: {e}", path.display()));
        let size = std::fs::metadata(&path).map_err(unreadable)?.len();
        if size > FILE_HANDED {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{}: {size} bytes, more than a page hands out; it is there",
                    path.display()
                ),
            ));
        }
        let bytes = std::fs::read(&path).map_err(unreadable)?;
        let name = path
            .file_name()
            .map(|n| crate::outputs::safe_name(&n.to_string_lossy()))
            .unwrap_or_default();
        Ok((name, bytes))
    })
    .await
}

/// A file handed out to an operator (anyone else goes to the login form when tokens are
/// configured): what `find` reads on a blocking thread, a name and its bytes, or why not.
async fn download<F>(site: Arc<Site>, headers: HeaderMap, kind: &'static str, find: F) -> Response
where
    F: FnOnce(&Site) -> Result<(String, Vec<u8>), (StatusCode, String)> + Send + 'static,
{
    let who = site.who(&headers).await;
    if !site.tokens.is_empty() && who == Who::Anonymous {
        return Redirect::to("/login").into_response();
    }
    let s = site.clone();
    match tokio::task::spawn_blocking(move || find(&s)).await {
        Ok(Ok((name, bytes))) => (
            [
                (header::CONTENT_TYPE, kind.to_string()),
                (
                    header::CONTENT_DISPOSITION,
                    format!("attachment; filename=\"{name}\""),
                ),
            ],
            bytes,
        )
            .into_response(),
        Ok(Err((status, why))) => message(&site, &who, status, "Not found", &p(&why)),
        Err(e) => message(
            &site,
            &who,
            StatusCode::INTERNAL_SERVER_ERROR,
            "Failed",
            &e.to_string(),
        ),
    }
}

/// The `.reason.json` beside a rejected file, shown; empty when there is none.
fn reason_file(config: &Config, file_now: Option<&std::path::Path>) -> String {
    file_now
        .filter(|f| f.starts_with(&config.gateway.rejected))
        .map(|f| format!("{}.reason.json", f.display()))
        .filter(|f| std::path::Path::new(f).exists())
        .map(|f| p(&f))
        .unwrap_or_default()
}

async fn interchange(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Path(given): Path<String>,
) -> Response {
    page(site, headers, move |site, frame| {
        let config = &site.config();
        let r = reader(site)?;
        let schemas = site
            .schemas()
            .map_or_else(|| crate::schema::builtin().map_err(str::to_string), Ok)?;
        let refused = |e: crate::desk::DeskError| match e {
            crate::desk::DeskError::Unknown(_) | crate::desk::DeskError::Ambiguous { .. } => {
                Refused(StatusCode::NOT_FOUND, e.to_string())
            }
            e => Refused::from(e.to_string()),
        };
        let key = crate::desk::resolve(&r, &given).map_err(refused)?;
        let s = crate::desk::show(config, schemas, &r, &key).map_err(refused)?;
        let rec = &s.record;
        let file_now = s.file_now.as_ref().map(|f| p(&f.display().to_string()));
        let reason_file = reason_file(config, s.file_now.as_deref());
        let acknowledged = s
            .layers
            .acknowledged
            .as_ref()
            .map_or("-".into(), |a| p(&a.to_string()));
        const SHOWN: usize = 1000;
        let events: Vec<EventView> = s
            .events
            .iter()
            .rev()
            .take(SHOWN)
            .rev()
            .map(event_view)
            .collect();
        let can_reprocess = frame.can_act()
            && rec.state == crate::registry::ClaimState::Completed
            && rec.disposition == Some(Disposition::Rejected)
            && s.file_now.is_some();
        rendered(InterchangePage {
            frame: frame.clone(),
            key: rec.key.clone(),
            shown_key: p(&rec.key),
            partner: p(&rec.partner),
            partner_name: partner_of(config, &rec.partner)
                .map(|x| p(&x.name))
                .unwrap_or_default(),
            control_number: p(&rec.control_number),
            state: rec.state.to_string(),
            disposition: rec.disposition.map_or("-", Disposition::as_str).to_string(),
            reason_code: rec.reason_code.as_deref().map(p).unwrap_or_default(),
            reason: rec
                .reason
                .as_deref()
                .map(|x| p(crate::text::bounded(x, 4096)))
                .unwrap_or_default(),
            attempts: rec.attempts,
            holder: s.holder.as_deref().map(p).unwrap_or_default(),
            file: rec.file.as_deref().map(p).unwrap_or_default(),
            file_there: file_now.is_some(),
            file_now: file_now.unwrap_or_else(|| "(no longer where it was recorded)".into()),
            reason_file,
            first_seen: time(rec.first_seen_ms),
            last_seen: time(rec.last_seen_ms),
            fingerprints: rec
                .fingerprints
                .iter()
                .map(|(a, f, at)| (*a, p(f), time(*at)))
                .collect(),
            findings: s
                .findings
                .iter()
                .take(SHOWN)
                .map(|f| p(crate::text::bounded(f, 2048)))
                .collect(),
            findings_more: s.findings.len().saturating_sub(SHOWN),
            segments: s.segments.clone(),
            segments_more: s.segments_more,
            acks: s.acks.iter().map(ack_view).collect(),
            conflict_acks: s.conflict_acks.iter().map(ack_view).collect(),
            outputs: rec.outputs.iter().map(|o| p(o)).collect(),
            documents: s
                .documents
                .iter()
                .map(|d| document_view(config, d))
                .collect(),
            documents_more: s.documents_more,
            deliveries: s
                .deliveries
                .iter()
                .map(|d| delivery_view(config, d))
                .collect(),
            received: s.layers.received.as_deref().map(p).unwrap_or_default(),
            acknowledged,
            events_more: s.events.len().saturating_sub(events.len()),
            events,
            can_reprocess,
        })
    })
    .await
}

// ---------------------------------------------------------------- lists

#[derive(Template)]
#[template(path = "rejected.html")]
struct RejectedPage {
    frame: Frame,
    files: RejectedFiles,
    interchanges: Vec<ListedView>,
}

async fn rejected(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    page(site, headers, |site, frame| {
        let config = &site.config();
        let r = reader(site)?;
        let interchanges = r
            .rejected_interchanges(LIMIT)
            .map_err(|e| e.to_string())?
            .iter()
            .map(|l| listed_view(config, l))
            .collect();
        rendered(RejectedPage {
            frame: frame.clone(),
            files: rejected_files(config),
            interchanges,
        })
    })
    .await
}

#[derive(Template)]
#[template(path = "held.html")]
struct HeldPage {
    frame: Frame,
    documents: Vec<DocumentView>,
}

async fn held(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    let rows = |r: &Registry| r.open_document_rows(LIMIT);
    list_page(site, headers, rows, document_view, |frame, documents| {
        HeldPage { frame, documents }
    })
    .await
}

/// A page that lists the rows `read` finds (at most [`LIMIT`]), each shown by `view`.
async fn list_page<T: 'static, V: 'static, P>(
    site: Arc<Site>,
    headers: HeaderMap,
    read: impl FnOnce(&Registry) -> Result<Vec<T>, crate::registry::RegistryError> + Send + 'static,
    view: fn(&Config, &T) -> V,
    page_of: impl FnOnce(Frame, Vec<V>) -> P + Send + 'static,
) -> Response
where
    P: Template,
{
    page(site, headers, move |site, frame| {
        let r = reader(site)?;
        let rows = read(&r).map_err(|e| e.to_string())?;
        let views = rows.iter().map(|row| view(&site.config(), row)).collect();
        rendered(page_of(frame.clone(), views))
    })
    .await
}

#[derive(Template)]
#[template(path = "dead.html")]
struct DeadPage {
    frame: Frame,
    deliveries: Vec<DeliveryView>,
}

async fn dead(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    let rows = |r: &Registry| r.dead_deliveries(LIMIT);
    list_page(site, headers, rows, delivery_view, |frame, deliveries| {
        DeadPage { frame, deliveries }
    })
    .await
}

// ---------------------------------------------------------------- sent

#[derive(Template)]
#[template(path = "sent.html")]
struct SentPage {
    frame: Frame,
    state: String,
    partner: String,
    states: [&'static str; 7],
    documents: Vec<SentView>,
}

/// One of our documents as the Sent list shows it.
struct SentView {
    key: String,
    partner: String,
    set: String,
    document: String,
    isa13: String,
    gs06: u32,
    st02: String,
    file: String,
    sent: String,
    ack: String,
    late: bool,
    detail: String,
}

#[derive(serde::Deserialize, Default)]
struct SentQuery {
    #[serde(default)]
    state: String,
    #[serde(default)]
    partner: String,
}

/// Our documents sent, newest first, by the partner's acknowledgment (`overdue` included)
/// and partner.
async fn sent(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Query(q): Query<SentQuery>,
) -> Response {
    page(site, headers, move |site, frame| {
        let r = reader(site)?;
        let states = [
            "waiting",
            "overdue",
            "accepted",
            "accepted_with_errors",
            "partially_accepted",
            "rejected",
            "not_expected",
        ];
        let state = states.iter().find(|s| **s == q.state.trim()).copied();
        let partner = crate::text::bounded(q.partner.trim(), 64).to_string();
        // As every command names a partner; a name that fits none matches nothing.
        let key = site
            .config()
            .partner_named(&partner)
            .map_or_else(|_| partner.clone(), |x| x.key());
        let rows = r
            .outbound_rows(
                (!partner.is_empty()).then_some(key.as_str()),
                state,
                None,
                LIMIT,
            )
            .map_err(|e| e.to_string())?;
        let now = crate::registry::now_ms();
        let documents = rows
            .iter()
            .map(|row| SentView {
                key: row.key.clone(),
                partner: p(&row.partner),
                set: p(&row.set_id),
                document: p(&row.document_id),
                isa13: format!("{:09}", row.isa13),
                gs06: row.gs06,
                st02: p(&row.st02),
                file: p(&row.file),
                sent: row.sent_ms.map(time).unwrap_or_default(),
                ack: row.ack_state(now).to_string(),
                late: row.ack_late,
                detail: row.ack_detail.as_deref().map(p).unwrap_or_default(),
            })
            .collect();
        rendered(SentPage {
            frame: frame.clone(),
            state: state.unwrap_or_default().to_string(),
            partner: p(&partner),
            states,
            documents,
        })
    })
    .await
}

// ---------------------------------------------------------------- deliveries

/// Deliveries on one page of `/deliveries`.
const PAGE: usize = 100;

const DELIVERY_STATES: [&str; 6] = [
    "queued",
    "retrying",
    "blocked",
    "dead",
    "delivered",
    "discarded",
];

#[derive(Template)]
#[template(path = "deliveries_list.html")]
struct DeliveriesPage {
    frame: Frame,
    deliveries: Vec<DeliveryView>,
    destinations: Vec<String>,
    destination: String,
    states: [&'static str; 6],
    state: String,
    partner: String,
    since: String,
    filtered: bool,
    problem: Option<String>,
    page: usize,
    previous: Option<String>,
    next: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct DeliveriesQuery {
    #[serde(default)]
    destination: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    partner: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    page: Option<usize>,
}

/// A list's partner (as every command names one) and first day (`YYYY-MM-DD`), as typed:
/// the partner's key, the day's first moment, and what is wrong with either.
fn picked(
    config: &Config,
    partner: &str,
    since: &str,
) -> (Option<String>, Option<i64>, Option<String>) {
    let mut problem = None;
    let partner = match partner {
        "" => None,
        t => match config.partner_named(t) {
            Ok(p) => Some(p.key()),
            // A sender no partner configures (or one removed since) still has its rows.
            Err(_) if t.contains(':') => Some(t.to_string()),
            Err(e) => {
                problem = Some(e.to_string());
                None
            }
        },
    };
    let since_ms = match since {
        "" => None,
        s => match chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .ok()
            .and_then(day_start)
        {
            Some(ms) => Some(ms),
            None => {
                problem = Some(format!("since {s:?}: a date is YYYY-MM-DD"));
                None
            }
        },
    };
    (partner, since_ms, problem)
}

/// `s` as a URL's query value.
fn query_value(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn deliveries(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Query(q): Query<DeliveriesQuery>,
) -> Response {
    page(site, headers, move |site, frame| {
        let config = &site.config();
        let r = reader(site)?;
        let bounded = |s: &str| crate::text::bounded(s.trim(), 64).to_string();
        let (destination, typed, since) = (
            bounded(&q.destination),
            bounded(&q.partner),
            bounded(&q.since),
        );
        let state = DELIVERY_STATES
            .iter()
            .find(|s| **s == q.state.trim())
            .copied();
        let (partner, since_ms, problem) = picked(config, &typed, &since);
        let page = q.page.unwrap_or(1).clamp(1, 100_000);
        let rows = if problem.is_some() {
            Vec::new()
        } else {
            let filter = crate::registry::DeliveryFilter {
                state: state.and_then(crate::registry::DeliveryState::parse),
                partner: partner.as_deref(),
                destination: (!destination.is_empty()).then_some(destination.as_str()),
                since_ms,
            };
            r.deliveries_page(&filter, (page - 1) * PAGE, PAGE + 1)
                .map_err(|e| e.to_string())?
        };
        let more = rows.len() > PAGE;
        let link = |n: usize| {
            format!(
                "/deliveries?destination={}&state={}&partner={}&since={}&page={n}",
                query_value(&destination),
                query_value(state.unwrap_or_default()),
                query_value(&typed),
                query_value(&since)
            )
        };
        let mut destinations: Vec<String> =
            config.destinations.iter().map(|d| p(&d.name)).collect();
        destinations.push(crate::config::OUT.to_string());
        rendered(DeliveriesPage {
            frame: frame.clone(),
            deliveries: rows
                .iter()
                .take(PAGE)
                .map(|d| delivery_view(config, d))
                .collect(),
            destinations,
            destination: p(&destination),
            states: DELIVERY_STATES,
            state: state.unwrap_or_default().to_string(),
            filtered: !(destination.is_empty()
                && state.is_none()
                && typed.is_empty()
                && since.is_empty()),
            partner: p(&typed),
            since: p(&since),
            problem,
            page,
            previous: (page > 1).then(|| link(page - 1)),
            next: more.then(|| link(page + 1)),
        })
    })
    .await
}

// ---------------------------------------------------------------- documents

const DOCUMENT_DELIVERIES: [&str; 6] = [
    "pending",
    "delivered",
    "none",
    "held",
    "parked",
    "discarded",
];

#[derive(Template)]
#[template(path = "documents_list.html")]
struct DocumentsPage {
    frame: Frame,
    documents: Vec<DocumentView>,
    actions_here: bool,
    partner: String,
    set: String,
    deliveries: [&'static str; 6],
    delivery: String,
    since: String,
    filtered: bool,
    problem: Option<String>,
    page: usize,
    previous: Option<String>,
    next: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct DocumentsQuery {
    #[serde(default)]
    partner: String,
    #[serde(default)]
    set: String,
    #[serde(default)]
    delivery: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    page: Option<usize>,
}

async fn documents(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Query(q): Query<DocumentsQuery>,
) -> Response {
    page(site, headers, move |site, frame| {
        let config = &site.config();
        let r = reader(site)?;
        let bounded = |s: &str| crate::text::bounded(s.trim(), 64).to_string();
        let (typed, set, since) = (bounded(&q.partner), bounded(&q.set), bounded(&q.since));
        let delivery = DOCUMENT_DELIVERIES
            .iter()
            .find(|d| **d == q.delivery.trim())
            .copied();
        let (partner, since_ms, problem) = picked(config, &typed, &since);
        let page = q.page.unwrap_or(1).clamp(1, 100_000);
        let rows = if problem.is_some() {
            Vec::new()
        } else {
            let set = (!set.is_empty()).then_some(set.as_str());
            r.documents_page(
                partner.as_deref(),
                set,
                delivery,
                since_ms,
                ((page - 1) * PAGE, PAGE + 1),
            )
            .map_err(|e| e.to_string())?
        };
        let link = |n: usize| {
            format!(
                "/documents?partner={}&set={}&delivery={}&since={}&page={n}",
                query_value(&typed),
                query_value(&set),
                query_value(delivery.unwrap_or_default()),
                query_value(&since)
            )
        };
        rendered(DocumentsPage {
            frame: frame.clone(),
            documents: rows
                .iter()
                .take(PAGE)
                .map(|d| document_view(config, d))
                .collect(),
            actions_here: false,
            filtered: !(typed.is_empty()
                && set.is_empty()
                && delivery.is_none()
                && since.is_empty()),
            partner: p(&typed),
            set: p(&set),
            deliveries: DOCUMENT_DELIVERIES,
            delivery: delivery.unwrap_or_default().to_string(),
            since: p(&since),
            problem,
            page,
            previous: (page > 1).then(|| link(page - 1)),
            next: (rows.len() > PAGE).then(|| link(page + 1)),
        })
    })
    .await
}

// ---------------------------------------------------------------- document

/// The first bytes of a document's JSON its page shows (the whole is a download).
const BODY_SHOWN: usize = 64 << 10;

#[derive(Template)]
#[template(path = "document.html")]
struct DocumentPage {
    frame: Frame,
    key: String,
    shown_key: String,
    several: Vec<String>,
    sightings: Vec<DocumentView>,
    deliveries: Vec<DeliveryView>,
    attempts: Vec<EventView>,
    body: String,
    body_cut: bool,
    body_shown: usize,
    body_bytes: usize,
}

/// The document key a page is asked for, as every command names one.
fn document_named(r: &Registry, given: &str) -> Result<crate::registry::Resolved, Refused> {
    let resolved = r.resolve_document(given).map_err(|e| e.to_string())?;
    if resolved == crate::registry::Resolved::Unknown {
        return Err(Refused(
            StatusCode::NOT_FOUND,
            format!("{}: no document has this key or id", p(given)),
        ));
    }
    Ok(resolved)
}

async fn document(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Path(given): Path<String>,
) -> Response {
    page(site, headers, move |site, frame| {
        let config = &site.config();
        let r = reader(site)?;
        let e = |e: crate::registry::RegistryError| Refused::from(e.to_string());
        let mut shown = DocumentPage {
            frame: frame.clone(),
            key: String::new(),
            shown_key: p(&given),
            several: Vec::new(),
            sightings: Vec::new(),
            deliveries: Vec::new(),
            attempts: Vec::new(),
            body: String::new(),
            body_cut: false,
            body_shown: 0,
            body_bytes: 0,
        };
        let key = match document_named(&r, &given)? {
            crate::registry::Resolved::One(key) => key,
            crate::registry::Resolved::Several(keys) => {
                shown.several = keys.iter().map(|k| p(k)).collect();
                return rendered(shown);
            }
            crate::registry::Resolved::Unknown => return Err(Refused::from(String::new())),
        };
        let rows = r.documents(&[], Some(&key)).map_err(e)?;
        shown.sightings = rows.iter().map(|d| document_view(config, d)).collect();
        shown.deliveries = r
            .deliveries(None, None, Some(&key))
            .map_err(e)?
            .iter()
            .map(|d| delivery_view(config, d))
            .collect();
        // Its attempts are recorded under its interchanges, naming it.
        let named = serde_json::json!({ "document": key }).to_string();
        let named = named.trim_start_matches('{').trim_end_matches('}');
        let mut interchanges: Vec<&str> = Vec::new();
        for d in &rows {
            if !interchanges.contains(&d.interchange.as_str()) {
                interchanges.push(&d.interchange);
            }
        }
        for ic in interchanges {
            let filter = crate::registry::EventFilter {
                key: Some(ic.to_string()),
                ..Default::default()
            };
            shown.attempts.extend(
                r.history(&filter)
                    .map_err(e)?
                    .iter()
                    .filter(|ev| {
                        matches!(ev.event, EventKind::DeliveryAttempt | EventKind::Delivered)
                            && ev.detail.contains(named)
                    })
                    .map(event_view),
            );
        }
        if let Some(body) = newest_body(&r, &rows).map_err(e)? {
            {
                let pretty = serde_json::from_slice::<serde_json::Value>(&body)
                    .and_then(|v| serde_json::to_string_pretty(&v))
                    .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
                let cut = crate::text::bounded(&pretty, BODY_SHOWN);
                shown.body_cut = cut.len() < pretty.len();
                shown.body_shown = cut.len();
                shown.body_bytes = pretty.len();
                shown.body = cut.to_string();
            }
        }
        shown.shown_key = p(&key);
        shown.key = key;
        rendered(shown)
    })
    .await
}

/// The JSON of the newest sighting that has one kept: a resend decided duplicate or a
/// conflict keeps none of its own.
fn newest_body(
    r: &Registry,
    rows: &[crate::registry::DocumentRow],
) -> Result<Option<Vec<u8>>, crate::registry::RegistryError> {
    let ids: Vec<i64> = rows.iter().map(|d| d.id).collect();
    Ok(r.document_bodies(&ids)?
        .into_iter()
        .rev()
        .find_map(|kept| kept.and_then(Result::ok)))
}

/// A document's JSON whole, as its destinations were given it.
async fn document_body(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Path(given): Path<String>,
) -> Response {
    download(site, headers, "application/json", move |s| {
        let r = reader(s).map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e))?;
        let key = match document_named(&r, &given).map_err(|Refused(c, w)| (c, w))? {
            crate::registry::Resolved::One(key) => key,
            _ => return Err((StatusCode::NOT_FOUND, format!("{}: names several documents", p(&given)))),
        };
        let unavailable = |e: crate::registry::RegistryError| (StatusCode::SERVICE_UNAVAILABLE, e.to_string());
        let rows = r.documents(&[], Some(&key)).map_err(unavailable)?;
        match newest_body(&r, &rows).map_err(unavailable)? {
            Some(body) => Ok((format!("{}.json", crate::outputs::safe_name(&key)), body)),
            None => Err((StatusCode::NOT_FOUND, format!("{}: no sighting of it has its JSON kept (recorded before the registry kept documents, pruned since, or one that unpacks wrong)", p(&key)))),
        }
    })
    .await
}

// ---------------------------------------------------------------- login

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    frame: Frame,
    message: Option<String>,
    needed: bool,
}

async fn login_form(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    let who = site.who(&headers).await;
    let page = LoginPage {
        frame: frame(&site, &who),
        message: None,
        needed: !site.tokens.is_empty(),
    };
    shown(StatusCode::OK, &page)
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: String,
}

/// The session cookie, set (`value`) or cleared (`None`).
fn session_cookie(value: Option<String>) -> String {
    use axum_extra::extract::cookie::{Cookie, SameSite};
    let clear = value.is_none();
    let mut c = Cookie::build((auth::COOKIE, value.unwrap_or_default()))
        .http_only(true)
        .same_site(SameSite::Strict)
        .path("/")
        .max_age(cookie::time::Duration::milliseconds(if clear {
            0
        } else {
            auth::SESSION_MS
        }))
        .build();
    if clear {
        c.make_removal();
    }
    c.to_string()
}

async fn login(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    // Another site must not sign a browser in (under the other site's own token, its
    // owner's actions would be recorded as someone else's).
    if !auth::same_origin(&headers) {
        return message(
            &site,
            &Who::Anonymous,
            StatusCode::FORBIDDEN,
            "Refused",
            "this form did not come from this page (cross-site request refused)",
        );
    }
    let Some(name) = site.tokens.by_token(f.token.trim()).map(str::to_string) else {
        // Slows a guesser: wrong tokens are answered one at a time, so parallel guesses
        // are no faster than one after another.
        site.penalty.serve().await;
        let page = LoginPage {
            frame: frame(&site, &Who::Anonymous),
            message: Some("That token is not accepted.".into()),
            needed: !site.tokens.is_empty(),
        };
        return shown(StatusCode::UNAUTHORIZED, &page);
    };
    let value = site.tokens.session_value(&name, crate::registry::now_ms());
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, session_cookie(value)),
            (header::LOCATION, "/".into()),
        ],
    )
        .into_response()
}

async fn logout(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    if !auth::same_origin(&headers) {
        return message(
            &site,
            &Who::Anonymous,
            StatusCode::FORBIDDEN,
            "Refused",
            "this form did not come from this page (cross-site request refused)",
        );
    }
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, session_cookie(None)),
            (header::LOCATION, "/login".into()),
        ],
    )
        .into_response()
}

// ---------------------------------------------------------------- actions

#[derive(serde::Deserialize)]
struct ActionForm {
    key: String,
    #[serde(default)]
    form: String,
}

async fn action(
    State(site): State<Arc<Site>>,
    Path(what): Path<String>,
    headers: HeaderMap,
    Form(f): Form<ActionForm>,
) -> Response {
    let who = site.who(&headers).await;
    let refuse = |status, why: &str| message(&site, &who, status, "Refused", why);
    if !site.actions {
        return refuse(
            StatusCode::FORBIDDEN,
            "actions are off: this page was started without --allow-actions",
        );
    }
    let Who::Operator { name, by_cookie } = who.clone() else {
        return refuse(StatusCode::UNAUTHORIZED, "sign in with a token to act");
    };
    if by_cookie && !(auth::same_origin(&headers) && site.tokens.form_matches(&name, &f.form)) {
        return refuse(
            StatusCode::FORBIDDEN,
            "this form did not come from this page (cross-site request refused)",
        );
    }
    if !["reprocess", "release", "discard", "retry", "resend"].contains(&what.as_str()) {
        return refuse(StatusCode::NOT_FOUND, "no such action");
    }
    let s = site.clone();
    let done =
        tokio::task::spawn_blocking(move || act(&s.config(), s.schemas(), &what, &f.key, &name))
            .await;
    match done {
        Ok(Ok((text, back))) => {
            let (back_interchange, back_list) = match back {
                Back::Interchange(k) => (Some(k), None),
                Back::List(l) => (None, Some(l)),
            };
            let page = MessagePage {
                frame: frame(&site, &who),
                title: "Done".into(),
                message: p(&text),
                back_interchange,
                back_list,
            };
            html(
                StatusCode::OK,
                page.render().unwrap_or_else(|e| e.to_string()),
            )
        }
        Ok(Err(e)) => refuse(StatusCode::CONFLICT, &e),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// Where an action's answer points.
enum Back {
    Interchange(String),
    List(&'static str),
}

/// The web's reprocess action on `key`, as `resolution` resolved it: the outcome in a line.
fn reprocess(
    config: &Config,
    schemas: Option<&crate::schema::Schemas>,
    registry: &mut Registry,
    key: &str,
    resolution: Option<&Result<String, crate::desk::DeskError>>,
) -> Result<(String, Back), String> {
    let schemas = schemas.map_or_else(|| crate::schema::builtin().map_err(str::to_string), Ok)?;
    if let Some(Err(e)) = resolution {
        return Err(e.to_string());
    }
    let options = crate::pipeline::ProcessOptions::new(false);
    let r = crate::desk::reprocess(config, schemas, registry, key, None, false, &options)
        .map_err(|e| e.to_string())?;
    Ok((
        format!(
            "{key}: attempt {} {}{}",
            r.attempt.unwrap_or(0),
            r.disposition.as_str(),
            r.reason.map(|x| format!(" ({x})")).unwrap_or_default()
        ),
        Back::Interchange(key.to_string()),
    ))
}

/// One action through the same library calls as the CLI's, recorded in the audit trail
/// with the operator's name, whatever its outcome. Returns what happened and where to look.
fn act(
    config: &Config,
    schemas: Option<&crate::schema::Schemas>,
    what: &str,
    key: &str,
    by: &str,
) -> Result<(String, Back), String> {
    let mut registry = Registry::open(
        &config.gateway.database,
        crate::setup::identity(&config.gateway),
    )
    .map_err(|e| e.to_string())?;
    let given = crate::text::bounded(key.trim(), 1024).to_string();
    // The audit event goes under the key acted on: an interchange's as resolved from what
    // was typed (`ACME:101`), so that it shows in that interchange's history.
    let resolution = (what == "reprocess").then(|| crate::desk::resolve(&registry, &given));
    let resolved = resolution.as_ref().and_then(|r| r.as_ref().ok()).cloned();
    let key = resolved.clone().unwrap_or(given);
    let outcome: Result<(String, Back), String> = match what {
        "reprocess" => reprocess(config, schemas, &mut registry, &key, resolution.as_ref()),
        "release" => crate::desk::release_documents(config, &mut registry, &key)
            .map_err(|e| e.to_string())
            .and_then(|(done, sent)| {
                if done.is_empty() {
                    return Err(format!("{key}: nothing held or waiting"));
                }
                let sent = sent.map_or(String::new(), |s| {
                    format!(
                        "; deliveries: {} delivered, {} to retry, {} dead",
                        s.delivered, s.retrying, s.dead
                    )
                });
                Ok((
                    format!("released {} document(s) of {key}{sent}", done.len()),
                    Back::List("held"),
                ))
            }),
        "discard" => crate::pipeline::discard_documents(&mut registry, &key)
            .map_err(|e| e.to_string())
            .and_then(|n| match n {
                0 => Err(format!("{key}: nothing held or waiting")),
                n => Ok((
                    format!("discarded {n} document(s) of {key}"),
                    Back::List("held"),
                )),
            }),
        "retry" => registry
            .retry_deliveries(&Retry::Key(&key))
            .map_err(|e| e.to_string())
            .and_then(|(n, released)| match n {
                0 => Err(format!("{key}: no dead delivery")),
                n => Ok((
                    format!(
                        "{n} delivery(ies) of {key} queued again{}",
                        match released {
                            0 => String::new(),
                            r => format!(", and {r} blocked behind it, to follow in order"),
                        }
                    ),
                    Back::List("dead"),
                )),
            }),
        "resend" => crate::send::resend(config, &mut registry, &key)
            .map_err(|e| e.to_string())
            .and_then(|r| match r {
                None => Err(format!("{key}: no document of ours has this key")),
                Some((row, path)) => Ok((
                    format!(
                        "{key} written again (ISA13 {:09}, resend {}) in {}",
                        row.isa13,
                        row.resends,
                        path.display()
                    ),
                    Back::List("sent"),
                )),
            }),
        _ => Err("no such action".into()),
    };
    let detail = serde_json::json!({
        "action": what,
        "by": by,
        "via": "web",
        "outcome": match &outcome { Ok((t, _)) => t, Err(e) => e },
        "ok": outcome.is_ok(),
    })
    .to_string();
    let partner = match resolved {
        Some(_) => registry.record(&key).ok().flatten().map(|r| r.partner),
        None if what == "resend" => registry
            .outbound(&key)
            .ok()
            .flatten()
            .map(|(r, _)| r.partner),
        None => registry.document_partner(&key).ok().flatten(),
    };
    registry
        .batch(|b| {
            b.record_note(
                EventKind::WebAction,
                Some(&key),
                partner.as_deref(),
                None,
                &detail,
            )
        })
        .map_err(|e: crate::registry::RegistryError| e.to_string())?;
    outcome
}
