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
use crate::registry::{Delivery, DeliveryState, EventKind, Registry, Retry, Search};

/// At most this many rows in a list or a search (the search says when there are more).
const LIMIT: usize = 500;
/// An acknowledgment shown on a page is cut after this many bytes.
const ACK_SHOWN: usize = 64 * 1024;
/// Reason files read for the rejected list and the overview's backlog.
const REASON_FILES: usize = 2_000;
/// A reason file larger than this is listed without its contents.
const REASON_MAX: u64 = 1 << 20;

pub fn router(site: Arc<Site>) -> axum::Router {
    axum::Router::new()
        .route("/", get(overview))
        .route("/search", get(search))
        .route("/interchange/:key", get(interchange))
        .route("/rejected", get(rejected))
        .route("/held", get(held))
        .route("/dead", get(dead))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/action/:action", post(action))
        .with_state(site)
}

/// Text from a partner's file, with its control characters escaped (the template escapes
/// the markup).
fn p(s: &str) -> String {
    crate::text::printable(s).into_owned()
}

fn time(ms: i64) -> String {
    chrono::Local
        .timestamp_millis_opt(ms)
        .single()
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
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
    html(status, page.render().unwrap_or_else(|e| e.to_string()))
}

/// Renders a page on a blocking thread, once the asker is let in: with tokens configured,
/// only an operator is (the others go to the login form).
async fn page<F>(site: Arc<Site>, headers: HeaderMap, build: F) -> Response
where
    F: FnOnce(&Site, &Frame) -> Result<String, String> + Send + 'static,
{
    let who = site.tokens.who(&headers);
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
        Ok(Err(e)) => message(
            &site,
            &who,
            StatusCode::SERVICE_UNAVAILABLE,
            "Not available",
            &e,
        ),
        Err(e) => message(
            &site,
            &who,
            StatusCode::INTERNAL_SERVER_ERROR,
            "Failed",
            &e.to_string(),
        ),
    }
}

fn reader(config: &Config) -> Result<Registry, String> {
    Registry::open_read_only(&config.gateway.database)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "there is no registry at {} yet (x12gate init creates it)",
                config.gateway.database.display()
            )
        })
}

fn rendered(t: impl Template) -> Result<String, String> {
    t.render().map_err(|e| e.to_string())
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
    fn add(&mut self, kind: EventKind, n: u64) {
        match kind {
            EventKind::Accepted => self.accepted += n,
            EventKind::Partial => self.partial += n,
            EventKind::Rejected | EventKind::Unreadable => self.rejected += n,
            EventKind::Duplicate => self.duplicate += n,
            EventKind::Conflict => self.conflict += n,
            _ => {}
        }
    }
}

#[derive(Default, Clone, Copy)]
pub struct DocCounts {
    pub new: u64,
    pub duplicate: u64,
    pub conflict: u64,
    pub waiting: u64,
}

impl DocCounts {
    fn add(&mut self, d: DocumentDisposition, n: u64) {
        match d {
            DocumentDisposition::New => self.new += n,
            DocumentDisposition::Duplicate => self.duplicate += n,
            DocumentDisposition::Conflict => self.conflict += n,
            DocumentDisposition::Waiting | DocumentDisposition::Stale => self.waiting += n,
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
}

async fn overview(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    page(site, headers, |site, frame| {
        build_overview(&site.config, frame.clone())
    })
    .await
}

fn build_overview(config: &Config, frame: Frame) -> Result<String, String> {
    let r = reader(config)?;
    let e = |e: crate::registry::RegistryError| e.to_string();
    let now = crate::registry::now_ms();
    let midnight = chrono::Local::now()
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .and_then(|t| t.and_local_timezone(chrono::Local).earliest())
        .map_or(now - 86_400_000, |t| t.timestamp_millis());
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
    for (partner, kind, n) in r.decisions_since(midnight).map_err(e)? {
        row(&mut rows, &partner).today.add(kind, n);
    }
    for (partner, kind, n) in r.decisions_since(week).map_err(e)? {
        row(&mut rows, &partner).week.add(kind, n);
    }
    for (partner, d, n) in r.documents_since(midnight).map_err(e)? {
        row(&mut rows, &partner).docs_today.add(d, n);
    }
    for (partner, d, n) in r.documents_since(week).map_err(e)? {
        row(&mut rows, &partner).docs_week.add(d, n);
    }
    let snap = r.snapshot().map_err(e)?;
    for (partner, delivery, n) in &snap.documents_open {
        match delivery {
            Delivery::Held => row(&mut rows, partner).held += n,
            Delivery::Parked => row(&mut rows, partner).waiting += n,
            _ => {}
        }
    }
    for (partner, when) in &snap.last_received {
        let x = row(&mut rows, partner);
        x.last = Some(time(*when));
        x.ago = Some(ago(*when, now));
    }
    for (partner, n) in r.dead_by_partner().map_err(e)? {
        row(&mut rows, &partner).dead += n;
    }
    let files = rejected_files(config);
    for f in &files {
        for partner in &f.partners {
            row(&mut rows, partner).rejected_files += 1;
        }
    }
    let hour = 3_600_000;
    let hours_since = (now / hour - 23) * hour;
    let hourly = buckets(
        &r.traffic(hours_since, hour).map_err(e)?,
        hours_since,
        hour,
        24,
    );
    let day_start = midnight - 13 * 86_400_000;
    let daily = buckets(
        &r.traffic(day_start, 86_400_000).map_err(e)?,
        day_start,
        86_400_000,
        14,
    );
    let hour_label = |i: usize| {
        let at = hours_since + i64::try_from(i).unwrap_or(0) * hour;
        chrono::Local
            .timestamp_millis_opt(at)
            .single()
            .map(|t| t.format("%H:00").to_string())
            .unwrap_or_default()
    };
    let day_label = |i: usize| {
        let at = day_start + i64::try_from(i).unwrap_or(0) * 86_400_000;
        chrono::Local
            .timestamp_millis_opt(at)
            .single()
            .map(|t| t.format("%m-%d").to_string())
            .unwrap_or_default()
    };
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
        kinds: chart::KINDS.iter().map(|(k, c)| (k.as_str(), *c)).collect(),
        rejected_backlog: files.len(),
        unfinished: snap.unfinished.iter().map(|(_, n)| n).sum(),
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
    pub modified_ms: i64,
    pub disposition: String,
    pub reason: String,
    pub contact: String,
    /// The senders (`QUAL:ID`) of its interchanges.
    pub partners: Vec<String>,
    /// (sender, control number, disposition, reason) of each interchange.
    pub interchanges: Vec<(String, String, String, String)>,
}

fn rejected_files(config: &Config) -> Vec<RejectedFile> {
    let dir = &config.gateway.rejected;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten().take(REASON_FILES * 2) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(file) = name.strip_suffix(".reason.json") else {
            continue;
        };
        let meta = entry.metadata().ok();
        let modified_ms = meta
            .as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let reason: serde_json::Value = if meta.is_some_and(|m| m.len() <= REASON_MAX) {
            std::fs::read(entry.path())
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default()
        } else {
            serde_json::json!({ "reason": "(reason file too large to show here)" })
        };
        let s = |v: &serde_json::Value| v.as_str().map(p).unwrap_or_default();
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
        let mut partners: Vec<String> = interchanges
            .iter()
            .map(|i| i.0.clone())
            .filter(|s| !s.is_empty())
            .collect();
        partners.sort();
        partners.dedup();
        out.push(RejectedFile {
            name: p(file),
            time: time(modified_ms),
            modified_ms,
            disposition: s(&reason["disposition"]),
            reason: s(&reason["reason"]),
            contact: s(&reason["contact"]),
            partners,
            interchanges,
        });
        if out.len() >= REASON_FILES {
            break;
        }
    }
    out.sort_by_key(|f| f.modified_ms);
    out
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
    config
        .partners
        .iter()
        .find(|x| x.key() == partner)
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
        delivery: d.delivery.to_string(),
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
    dispositions: Vec<&'static str>,
    searched: bool,
    error: Option<String>,
    interchanges: Vec<ListedView>,
    documents: Vec<DocumentView>,
    more: bool,
}

/// A time the operator typed: `YYYY-MM-DD`, `YYYY-MM-DD HH:MM` (or with `T`), local time.
fn typed_time(s: &str, end_of_day: bool) -> Result<Option<i64>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let t = s.replace('T', " ");
    let naive = chrono::NaiveDateTime::parse_from_str(&t, "%Y-%m-%d %H:%M")
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(&t, "%Y-%m-%d %H:%M:%S"))
        .or_else(|_| {
            chrono::NaiveDate::parse_from_str(&t, "%Y-%m-%d").map(|d| {
                let (h, m, sec) = if end_of_day { (23, 59, 59) } else { (0, 0, 0) };
                d.and_hms_opt(h, m, sec).unwrap_or_default()
            })
        })
        .map_err(|_| {
            format!(
                "{}: not a time; expected YYYY-MM-DD or YYYY-MM-DD HH:MM",
                p(crate::text::bounded(s, 64))
            )
        })?;
    naive
        .and_local_timezone(chrono::Local)
        .earliest()
        .map(|t| Some(t.timestamp_millis()))
        .ok_or_else(|| format!("{}: not a local time", p(s)))
}

async fn search(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Query(q): Query<SearchQuery>,
) -> Response {
    page(site, headers, move |site, frame| {
        let config = &site.config;
        let bounded = |s: &str| crate::text::bounded(s.trim(), 256).to_string();
        let mut pg = SearchPage {
            frame: frame.clone(),
            q: p(&bounded(&q.q)),
            partner: p(&bounded(&q.partner)),
            disposition: bounded(&q.disposition),
            since: p(&bounded(&q.since)),
            until: p(&bounded(&q.until)),
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
            more: false,
        };
        let asked = [&q.q, &q.partner, &q.disposition, &q.since, &q.until]
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
        let r = reader(config)?;
        let found = r
            .search(&Search {
                text: Some(bounded(&q.q)).filter(|s| !s.is_empty()),
                partner: Some(bounded(&q.partner)).filter(|s| !s.is_empty()),
                disposition,
                since_ms: since,
                until_ms: until,
                limit: LIMIT,
            })
            .map_err(|e| e.to_string())?;
        pg.searched = true;
        pg.more = found.more;
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
    pub cut: bool,
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
        cut: shown.len() < a.text.len(),
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
    let owner = config
        .partners
        .iter()
        .find(|x| x.key() == d.partner)
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
    reason_file: String,
    first_seen: String,
    last_seen: String,
    fingerprints: Vec<(u32, String, String)>,
    findings: Vec<String>,
    findings_more: usize,
    acks: Vec<AckView>,
    conflict_acks: Vec<AckView>,
    outputs: Vec<String>,
    documents: Vec<DocumentView>,
    deliveries: Vec<DeliveryView>,
    received: String,
    acknowledged: String,
    events: Vec<EventView>,
    events_more: usize,
    can_reprocess: bool,
}

async fn interchange(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Path(given): Path<String>,
) -> Response {
    page(site, headers, move |site, frame| {
        let config = &site.config;
        let r = reader(config)?;
        let schemas = crate::schema::builtin().map_err(str::to_string)?;
        let key = crate::desk::resolve(&r, &given).map_err(|e| e.to_string())?;
        let s = crate::desk::show(config, schemas, &r, &key).map_err(|e| e.to_string())?;
        let rec = &s.record;
        let file_now = s.file_now.as_ref().map(|f| p(&f.display().to_string()));
        let reason_file = s
            .file_now
            .as_ref()
            .filter(|f| f.starts_with(&config.gateway.rejected))
            .map(|f| format!("{}.reason.json", f.display()))
            .filter(|f| std::path::Path::new(f).exists())
            .map(|f| p(&f))
            .unwrap_or_default();
        let acknowledged = s.layers.acknowledged.as_ref().map_or("-".into(), |a| {
            let acks: Vec<String> = a
                .acks
                .iter()
                .map(|k| {
                    format!(
                        "{} ISA13 {} GS06 {}",
                        k.kind,
                        k.isa13.as_deref().unwrap_or("-"),
                        k.gs06.join(",")
                    )
                })
                .collect();
            p(&format!("{} ({})", a.at, acks.join("; ")))
        });
        const SHOWN: usize = 1000;
        let events: Vec<EventView> = s
            .events
            .iter()
            .rev()
            .take(SHOWN)
            .rev()
            .map(|e| EventView {
                at: time(e.at_ms),
                event: e.event.to_string(),
                disposition: e.disposition.map_or("", Disposition::as_str).to_string(),
                detail: p(crate::text::bounded(&e.detail, 4096)),
            })
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
            partner_name: config
                .partners
                .iter()
                .find(|x| x.key() == rec.partner)
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
            acks: s.acks.iter().map(ack_view).collect(),
            conflict_acks: s.conflict_acks.iter().map(ack_view).collect(),
            outputs: rec.outputs.iter().map(|o| p(o)).collect(),
            documents: s
                .documents
                .iter()
                .map(|d| document_view(config, d))
                .collect(),
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
    files: Vec<RejectedFile>,
    interchanges: Vec<ListedView>,
}

async fn rejected(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    page(site, headers, |site, frame| {
        let config = &site.config;
        let r = reader(config)?;
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
    page(site, headers, |site, frame| {
        let config = &site.config;
        let r = reader(config)?;
        let documents = r
            .documents(&[Delivery::Held, Delivery::Parked], None)
            .map_err(|e| e.to_string())?
            .iter()
            .take(LIMIT)
            .map(|d| document_view(config, d))
            .collect();
        rendered(HeldPage {
            frame: frame.clone(),
            documents,
        })
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
    page(site, headers, |site, frame| {
        let config = &site.config;
        let r = reader(config)?;
        let deliveries = r
            .deliveries(Some(DeliveryState::Dead), None, None)
            .map_err(|e| e.to_string())?
            .iter()
            .take(LIMIT)
            .map(|d| delivery_view(config, d))
            .collect();
        rendered(DeadPage {
            frame: frame.clone(),
            deliveries,
        })
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
    let who = site.tokens.who(&headers);
    let page = LoginPage {
        frame: frame(&site, &who),
        message: None,
        needed: !site.tokens.is_empty(),
    };
    html(
        StatusCode::OK,
        page.render().unwrap_or_else(|e| e.to_string()),
    )
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(site): State<Arc<Site>>, Form(f): Form<LoginForm>) -> Response {
    let Some(name) = site.tokens.by_token(f.token.trim()).map(str::to_string) else {
        // A guess costs a little time.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let page = LoginPage {
            frame: frame(&site, &Who::Anonymous),
            message: Some("That token is not accepted.".into()),
            needed: !site.tokens.is_empty(),
        };
        return html(
            StatusCode::UNAUTHORIZED,
            page.render().unwrap_or_else(|e| e.to_string()),
        );
    };
    let value = site.tokens.session_value(&name).unwrap_or_default();
    let cookie = format!(
        "{}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age=43200",
        auth::COOKIE
    );
    (
        StatusCode::SEE_OTHER,
        [(header::SET_COOKIE, cookie), (header::LOCATION, "/".into())],
    )
        .into_response()
}

async fn logout() -> Response {
    let cookie = format!(
        "{}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0",
        auth::COOKIE
    );
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
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
    let who = site.tokens.who(&headers);
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
    if !["reprocess", "release", "discard", "retry"].contains(&what.as_str()) {
        return refuse(StatusCode::NOT_FOUND, "no such action");
    }
    let s = site.clone();
    let done = tokio::task::spawn_blocking(move || act(&s.config, &what, &f.key, &name)).await;
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

/// One action through the same library calls as the CLI's, recorded in the audit trail
/// with the operator's name, whatever its outcome. Returns what happened and where to look.
fn act(config: &Config, what: &str, key: &str, by: &str) -> Result<(String, Back), String> {
    let mut registry = Registry::open(
        &config.gateway.database,
        crate::setup::identity(&config.gateway),
    )
    .map_err(|e| e.to_string())?;
    let key = crate::text::bounded(key.trim(), 1024).to_string();
    let outcome: Result<(String, Back), String> = match what {
        "reprocess" => crate::schema::builtin()
            .map_err(str::to_string)
            .and_then(|schemas| {
                let key = crate::desk::resolve(&registry, &key).map_err(|e| e.to_string())?;
                let options = crate::pipeline::ProcessOptions::new(false);
                let r = crate::desk::reprocess(
                    config,
                    schemas,
                    &mut registry,
                    &key,
                    None,
                    false,
                    &options,
                )
                .map_err(|e| e.to_string())?;
                Ok((
                    format!(
                        "{key}: attempt {} {}{}",
                        r.attempt.unwrap_or(0),
                        r.disposition.as_str(),
                        r.reason.map(|x| format!(" ({x})")).unwrap_or_default()
                    ),
                    Back::Interchange(key.clone()),
                ))
            }),
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
            .and_then(|n| match n {
                0 => Err(format!("{key}: no dead delivery")),
                n => Ok((
                    format!("{n} delivery(ies) of {key} queued again"),
                    Back::List("dead"),
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
    let partner = registry.record(&key).ok().flatten().map(|r| r.partner);
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
