//! One inbound file end to end, synchronously: read, split into interchanges, validate, decide
//! the answer, write the acknowledgments.
//!
//! `ack` decides and prints, writing nothing. `process` claims each interchange's key in the
//! registry before anything else, decides, writes the translation and the acknowledgments
//! atomically under names derived from the key, and only then completes the claim.

use std::path::Path;

use chrono::NaiveDateTime;

use crate::ack::{self, Disposition, InterchangeResponse, Outbound};
use crate::config::{Config, InterchangeScope, Partner, UnknownPartners};
use crate::registry::{
    now_ms, Claim, ClaimRequest, Completion, ControlNumbers, Counter, Previous, Registry,
    RegistryError, StoredAck, MAX_CONTROL_NUMBER,
};
use crate::validate::{self, Finding};
use crate::x12::{Interchange, Interchanges};
use crate::{fingerprint, outputs};

/// Everything decided about one interchange before anything is written.
#[derive(Debug, Clone)]
pub struct Decision {
    pub partner: Partner,
    /// Whether the sender is a configured partner.
    pub known: bool,
    pub findings: Vec<Finding>,
    pub response: InterchangeResponse,
}

/// `QUAL:ID:ISA13`, the id that ties every log line and record of an interchange together.
pub fn correlation_id(ic: &Interchange<'_>) -> String {
    format!(
        "{}:{}:{}",
        ic.isa.trimmed(5),
        ic.isa.trimmed(6),
        ic.isa.control_number()
    )
}

/// Validates an interchange against the envelope rules and the configuration, and decides its
/// disposition and acknowledgments.
pub fn decide(ic: &Interchange<'_>, config: &Config) -> Decision {
    decide_with(ic, config, Vec::new())
}

/// [`decide`] with findings found elsewhere (the registry's group duplicates).
pub fn decide_with(ic: &Interchange<'_>, config: &Config, extra: Vec<Finding>) -> Decision {
    let (qualifier, id) = (ic.isa.trimmed(5), ic.isa.trimmed(6));
    let configured = config.partner(qualifier, id).cloned();
    let known = configured.is_some();
    let partner = configured.unwrap_or_else(|| Partner::unknown(qualifier, id));
    let accept_unknown = config.gateway.unknown_partners == UnknownPartners::Accept;
    let mut findings = validate::routing(
        ic,
        &config.gateway.id_qualifier,
        &config.gateway.id,
        known || accept_unknown,
    );
    findings.extend(validate::interchange(ic));
    findings.extend(extra);
    let mut response = ack::respond(ic, &findings, &partner);
    if !(known || accept_unknown) {
        // Nobody we know to answer: the rejection is recorded with its reason, not sent.
        response.ta1 = None;
        response.groups.clear();
    }
    Decision {
        partner,
        known,
        findings,
        response,
    }
}

/// The acknowledgment interchanges for a decision, numbered by `counters`.
pub fn acknowledgments(
    ic: &Interchange<'_>,
    decision: &Decision,
    config: &Config,
    counters: &dyn ControlNumbers,
    now: NaiveDateTime,
) -> Result<Vec<Outbound>, RegistryError> {
    ack::write_acknowledgments(
        &decision.response,
        ic,
        &decision.partner,
        &config.gateway,
        counters,
        now,
    )
}

/// A source of control numbers that only counts what is asked of it, to learn how many
/// numbers an acknowledgment needs before reserving them.
#[derive(Default)]
struct CountingCounters {
    asked: std::cell::RefCell<(usize, usize)>,
}

impl ControlNumbers for CountingCounters {
    fn next_control_number(&self, _: &str, counter: Counter) -> Result<u32, RegistryError> {
        let mut asked = self.asked.borrow_mut();
        match counter {
            Counter::Interchange => asked.0 += 1,
            Counter::Group => asked.1 += 1,
        }
        Ok(1)
    }
}

/// Hands out the numbers of a [`Reservation`], in order.
struct ReservedCounters {
    isa13: std::cell::RefCell<std::vec::IntoIter<u32>>,
    gs06: std::cell::RefCell<std::vec::IntoIter<u32>>,
}

impl ControlNumbers for ReservedCounters {
    fn next_control_number(&self, _: &str, counter: Counter) -> Result<u32, RegistryError> {
        let list = match counter {
            Counter::Interchange => &self.isa13,
            Counter::Group => &self.gs06,
        };
        // invariant: the reservation was sized by a counting run of the same writer.
        Ok(list.borrow_mut().next().unwrap_or(MAX_CONTROL_NUMBER))
    }
}

/// One line of `process --json`, and the detail of the audit event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub file: String,
    pub correlation_id: Option<String>,
    /// `QUAL:ID` of ISA05/ISA06 and ISA07/ISA08.
    pub sender: Option<String>,
    pub receiver: Option<String>,
    pub control_number: Option<String>,
    pub disposition: Disposition,
    pub reason_code: Option<String>,
    pub reason: Option<String>,
    pub acks: Vec<String>,
    pub outputs: Vec<String>,
    /// Which attempt at this key this was (1 for the first), when we owned the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Whose expired or failed claim this attempt took over, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_over: Option<String>,
}

/// An operational failure: nothing about the interchange was decided or marked done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Translate(String),
}

/// How `process` behaves.
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    /// Report `in_progress` instead of waiting for another process's live lease.
    pub no_wait: bool,
    /// This process's identity in leases.
    pub owner: String,
}

impl ProcessOptions {
    pub fn new(no_wait: bool) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into());
        let nonce = blake3::hash(
            format!("{:?}{}", std::time::SystemTime::now(), std::process::id()).as_bytes(),
        )
        .to_hex();
        ProcessOptions {
            no_wait,
            owner: format!("{host}:{}:{}", std::process::id(), &nonce[..8]),
        }
    }
}

/// The registry key of an interchange: sender + ISA13, or sender + receiver + ISA13.
pub fn interchange_key(ic: &Interchange<'_>, scope: InterchangeScope) -> String {
    let isa = &ic.isa;
    match scope {
        InterchangeScope::Sender => format!(
            "{}:{}:{}",
            isa.trimmed(5),
            isa.trimmed(6),
            isa.control_number()
        ),
        InterchangeScope::SenderReceiver => format!(
            "{}:{}>{}:{}:{}",
            isa.trimmed(5),
            isa.trimmed(6),
            isa.trimmed(7),
            isa.trimmed(8),
            isa.control_number()
        ),
    }
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> ProcessError + '_ {
    move |source| ProcessError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Outputs are named by key, and by content when the key was first claimed for other content:
/// a takeover of the same content rewrites the same names (nothing doubles), while a
/// corrected resend after a rejection gets names of its own (its 997 never replaces the
/// rejection's 997 before that one was sent).
fn output_stem(key: &str, fingerprint: &str, first_fingerprint: &str) -> String {
    if fingerprint == first_fingerprint {
        outputs::safe_name(key)
    } else {
        format!(
            "{}.{}",
            outputs::safe_name(key),
            fingerprint.get(..8).unwrap_or(fingerprint)
        )
    }
}

fn outbound_name(stem: &str, o: &Outbound) -> String {
    format!("{stem}.{}.x12", o.kind.extension())
}

/// Processes every interchange of one file through the registry; one report per interchange
/// (or one for a part of the file that holds no readable interchange).
pub fn process_file(
    path: &Path,
    config: &Config,
    registry: &mut Registry,
    options: &ProcessOptions,
) -> Result<Vec<Report>, ProcessError> {
    let shown = path.display().to_string();
    let input = match crate::input::read(path, config.limits.max_file_bytes) {
        Ok(input) => input,
        Err(crate::input::InputError::TooLarge { size, limit, .. }) => {
            let reason = format!(
                "{size} bytes is more than the limit of {limit} bytes (limits.max_file_bytes)"
            );
            return Ok(vec![file_rejection(registry, &shown, reason)?]);
        }
        Err(crate::input::InputError::Io { source, .. }) => {
            return Err(ProcessError::Io {
                path: shown,
                source,
            })
        }
    };
    let utf8 = std::str::from_utf8(&input).is_ok();
    let mut reports = Vec::new();
    for result in Interchanges::new(&input, config.limits) {
        match result {
            Ok(ic) => reports.push(process_interchange(
                &shown, &input, utf8, &ic, config, registry, options,
            )?),
            Err(e) => reports.push(file_rejection(registry, &shown, e.to_string())?),
        }
    }
    Ok(reports)
}

/// A part of a file that holds no readable interchange: nothing can be claimed or answered.
fn file_rejection(registry: &Registry, file: &str, reason: String) -> Result<Report, ProcessError> {
    tracing::warn!(file, %reason, "rejected: no readable interchange");
    let report = Report {
        file: file.to_string(),
        correlation_id: None,
        sender: None,
        receiver: None,
        control_number: None,
        disposition: Disposition::Rejected,
        reason_code: None,
        reason: Some(reason),
        acks: Vec::new(),
        outputs: Vec::new(),
        attempt: None,
        took_over: None,
    };
    registry.record_event(
        "unreadable",
        None,
        None,
        None,
        "rejected",
        &serde_json::to_string(&report).unwrap_or_default(),
    )?;
    Ok(report)
}

fn process_interchange(
    file: &str,
    input: &[u8],
    utf8: bool,
    ic: &Interchange<'_>,
    config: &Config,
    registry: &mut Registry,
    options: &ProcessOptions,
) -> Result<Report, ProcessError> {
    let correlation = correlation_id(ic);
    // At ERROR level so the span (and its correlation id) is on every line any filter lets through.
    let span = tracing::error_span!("interchange", correlation_id = %correlation);
    let _enter = span.enter();
    let (qualifier, id) = (ic.isa.trimmed(5), ic.isa.trimmed(6));
    let partner = config
        .partner(qualifier, id)
        .cloned()
        .unwrap_or_else(|| Partner::unknown(qualifier, id));
    let key = interchange_key(ic, partner.interchange_scope);
    let fingerprint = fingerprint::fingerprint(input, ic, &partner.fingerprint_ignore);
    let mut report = Report {
        file: file.to_string(),
        correlation_id: Some(correlation.clone()),
        sender: Some(format!("{qualifier}:{id}")),
        receiver: Some(format!("{}:{}", ic.isa.trimmed(7), ic.isa.trimmed(8))),
        control_number: Some(ic.isa.control_number().to_string()),
        disposition: Disposition::InProgress,
        reason_code: None,
        reason: None,
        acks: Vec::new(),
        outputs: Vec::new(),
        attempt: None,
        took_over: None,
    };
    let request = ClaimRequest {
        key: &key,
        partner: &partner.key(),
        control_number: ic.isa.control_number(),
        fingerprint: &fingerprint,
        file,
        owner: &options.owner,
        lease_ms: i64::try_from(config.gateway.lease_seconds.saturating_mul(1000))
            .unwrap_or(i64::MAX),
    };
    let mut backoff = std::time::Duration::from_millis(20);
    let claim = loop {
        match registry.claim_interchange(&request)? {
            Claim::Busy {
                owner,
                lease_expires_ms,
            } => {
                if options.no_wait {
                    tracing::info!(%owner, "in progress elsewhere; not waiting");
                    report.reason = Some(format!("another process ({owner}) holds the claim"));
                    registry.record_event(
                        "in_progress",
                        Some(&key),
                        Some(&partner.key()),
                        report.control_number.as_deref(),
                        "in_progress",
                        &json(&report),
                    )?;
                    return Ok(report);
                }
                let left = u64::try_from(lease_expires_ms - now_ms()).unwrap_or(0);
                std::thread::sleep(backoff.min(std::time::Duration::from_millis(left.max(1))));
                backoff = (backoff * 2).min(std::time::Duration::from_millis(500));
            }
            other => break other,
        }
    };
    match claim {
        Claim::Duplicate(done) => {
            for a in &done.acks {
                let p = Path::new(&a.path);
                let (dir, name) = (
                    p.parent().unwrap_or(Path::new(".")),
                    p.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                );
                outputs::write_atomic(dir, &name, &a.bytes, &options.owner).map_err(io_error(p))?;
                report.acks.push(a.path.clone());
            }
            report.disposition = Disposition::Duplicate;
            tracing::info!(
                acks = report.acks.len(),
                "duplicate: original acknowledgments replayed"
            );
            registry.record_event(
                "duplicate",
                Some(&key),
                Some(&partner.key()),
                report.control_number.as_deref(),
                "duplicate",
                &json(&report),
            )?;
            Ok(report)
        }
        Claim::Conflict(earlier) => {
            let response = ack::conflict(ic, &partner, &earlier.fingerprint);
            let decision = Decision {
                partner: partner.clone(),
                known: true,
                findings: Vec::new(),
                response,
            };
            let now = chrono::Local::now().naive_local();
            for o in acknowledgments(ic, &decision, config, registry, now)? {
                let name = format!(
                    "{}.conflict-{}.{}.x12",
                    outputs::safe_name(&key),
                    &fingerprint[..12],
                    o.kind.extension()
                );
                let path =
                    outputs::write_atomic(&config.gateway.outbox, &name, &o.bytes, &options.owner)
                        .map_err(io_error(&config.gateway.outbox))?;
                report.acks.push(path.display().to_string());
            }
            report.disposition = Disposition::Conflict;
            report.reason_code = Some("025".into());
            report.reason = decision.response.reason.map(|r| r.text);
            tracing::error!(earlier = %earlier.fingerprint, now = %fingerprint, "CONFLICT: control number reused for different content; nothing processed");
            registry.record_event(
                "conflict",
                Some(&key),
                Some(&partner.key()),
                report.control_number.as_deref(),
                "conflict",
                &json(&report),
            )?;
            Ok(report)
        }
        Claim::Owned {
            attempt,
            previous,
            first_fingerprint,
        } => {
            fail::fail_point!("claim.after", |_| std::process::abort());
            report.attempt = Some(attempt);
            report.took_over = match &previous {
                Previous::Expired { owner } => Some(owner.clone()),
                Previous::Failed => Some("failed attempt".into()),
                _ => None,
            };
            if report.took_over.is_some() {
                tracing::warn!(attempt, took_over = ?report.took_over, "taking over an unfinished claim");
            }
            let job = Job {
                key: &key,
                fingerprint: &fingerprint,
                first_fingerprint: &first_fingerprint,
                utf8,
                ic,
                partner: &partner,
            };
            match work(&job, config, registry, options, &mut report) {
                Ok(()) => Ok(report),
                Err(e) => {
                    let _ = registry.fail(&key, &options.owner, &e.to_string());
                    Err(e)
                }
            }
        }
        Claim::Busy { .. } => Ok(report),
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Reports an interchange whose claim another process took over from us: not ours to report
/// as decided.
fn lost_claim(report: &mut Report) {
    tracing::warn!("lease lost: another process took this interchange over; its result stands");
    report.disposition = Disposition::InProgress;
    report.reason_code = None;
    report.reason = Some(
        "our lease expired and another process took this interchange over; see history".into(),
    );
    report.acks.clear();
    report.outputs.clear();
}

/// One owned interchange, as `work` needs it.
#[derive(Clone, Copy)]
struct Job<'j, 'a> {
    key: &'j str,
    fingerprint: &'j str,
    first_fingerprint: &'j str,
    utf8: bool,
    ic: &'j Interchange<'a>,
    partner: &'j Partner,
}

/// The work of an owned claim: decide, reserve numbers, write outputs, complete.
#[allow(clippy::too_many_arguments)]
fn work(
    job: &Job<'_, '_>,
    config: &Config,
    registry: &mut Registry,
    options: &ProcessOptions,
    report: &mut Report,
) -> Result<(), ProcessError> {
    let Job {
        key,
        fingerprint,
        first_fingerprint,
        utf8,
        ic,
        partner,
    } = *job;
    let stem = output_stem(key, fingerprint, first_fingerprint);
    // Groups seen in earlier interchanges of this sender are findings of this one.
    let mut extra = Vec::new();
    let group_keys: Vec<(String, String)> = ic
        .groups
        .iter()
        .map(|g| (g.gs.text(2).to_string(), g.gs.text(6).to_string()))
        .collect();
    if partner.check_group_duplicates && !group_keys.is_empty() {
        let dups = registry.claim_groups(
            key,
            &partner.key(),
            &group_keys,
            partner.duplicate_window_days,
        )?;
        for (gi, dup) in dups.iter().enumerate() {
            if *dup {
                extra.extend(validate::group_seen_before(ic, gi));
            }
        }
    }
    let decision = decide_with(ic, config, extra);
    let response = &decision.response;

    // Size the reservation with a dry run, then write with the reserved numbers, so a
    // takeover of this claim writes the very same bytes.
    let counting = CountingCounters::default();
    let now = chrono::Local::now().naive_local();
    acknowledgments(ic, &decision, config, &counting, now)?;
    let (isa13, gs06) = *counting.asked.borrow();
    let reservation =
        registry.reserve_control_numbers(key, &decision.partner.key(), isa13, gs06)?;
    let at = chrono::DateTime::from_timestamp_millis(reservation.at_ms)
        .map(|t| t.with_timezone(&chrono::Local).naive_local())
        .unwrap_or(now);
    let reserved = ReservedCounters {
        isa13: std::cell::RefCell::new(reservation.isa13.clone().into_iter()),
        gs06: std::cell::RefCell::new(reservation.gs06.clone().into_iter()),
    };
    let outbound = acknowledgments(ic, &decision, config, &reserved, at)?;

    // Fence: renew the lease right before writing. If another process took the claim over
    // while we were slow, its result stands and we write nothing; if we still own it, the
    // fresh lease covers the writes and the completion.
    let lease_ms =
        i64::try_from(config.gateway.lease_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    if !registry.renew(key, &options.owner, lease_ms)? {
        lost_claim(report);
        return Ok(());
    }
    let g = &config.gateway;
    if !matches!(response.disposition, Disposition::Rejected) {
        let keep = |gi: usize, si: usize| {
            response
                .accepted_sets
                .get(gi)
                .and_then(|s| s.get(si))
                .copied()
                .unwrap_or(false)
        };
        let doc = crate::translate::interchange_document(ic, utf8, &keep)
            .map_err(|e| ProcessError::Translate(e.to_string()))?;
        let path = outputs::write_atomic(&g.out, &format!("{stem}.json"), &doc, &options.owner)
            .map_err(io_error(&g.out))?;
        report.outputs.push(path.display().to_string());
    }
    let mut stored = Vec::new();
    for o in &outbound {
        let path = outputs::write_atomic(
            &g.outbox,
            &outbound_name(&stem, o),
            &o.bytes,
            &options.owner,
        )
        .map_err(io_error(&g.outbox))?;
        report.acks.push(path.display().to_string());
        stored.push(StoredAck {
            kind: o.kind.extension().to_string(),
            path: path.display().to_string(),
            bytes: o.bytes.clone(),
        });
    }
    fail::fail_point!("outputs.after", |_| std::process::abort());

    report.disposition = response.disposition;
    report.reason_code = response
        .reason
        .as_ref()
        .and_then(|r| r.code)
        .map(String::from);
    report.reason = response.reason.as_ref().map(|r| r.text.clone());
    let released: Vec<(String, String)> = group_keys
        .iter()
        .enumerate()
        .filter(|(gi, _)| {
            !response
                .accepted_sets
                .get(*gi)
                .is_some_and(|s| !s.is_empty() && s.iter().all(|a| *a))
        })
        .map(|(_, k)| k.clone())
        .collect();
    let detail = json(&report);
    fail::fail_point!("complete.before", |_| std::process::abort());
    let completed = registry.complete(
        key,
        &options.owner,
        &Completion {
            disposition: response.disposition.as_str(),
            reason_code: report.reason_code.as_deref(),
            reason: report.reason.as_deref(),
            acks: &stored,
            outputs: &report.outputs,
            released_groups: &released,
            event: response.disposition.as_str(),
            detail: &detail,
        },
    )?;
    if !completed {
        // Our lease ran out and another process took the claim: its outputs have the same
        // names and bytes, so ours did no harm; its completion is the record.
        tracing::warn!(
            "lease lost before completion; the taking-over process completes this interchange"
        );
    }
    tracing::info!(
        disposition = response.disposition.as_str(),
        acks = report.acks.len(),
        outputs = report.outputs.len(),
        "completed"
    );
    Ok(())
}
