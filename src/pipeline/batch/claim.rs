//! Step (2) of a round: every key claimed in one transaction, and what each answer means
//! for its interchange (ours to decide, a duplicate to replay, a conflict to refuse, or busy
//! elsewhere and retried); and what the batch tells the operator while it waits.

use std::time::Duration;

use crate::ack::{self, Disposition};
use crate::pipeline::flight::{bounded_reason, span, Item, Round};
use crate::pipeline::{Decision, ProcessError};
use crate::registry::{Claim, ClaimRequest, EventKind, Previous, Registry, StoredAck};

/// Whether a takeover was from an owner (worth a warn line per owner) or of a claim marked
/// failed (an operational failure, a stop, a release or a reprocess: said where it happened).
pub(super) enum PreviousKind {
    Owner,
    Failed,
}

/// Who holds a key we wait for, and until when.
#[derive(Debug, Clone)]
pub(super) struct Holder {
    pub owner: String,
    pub lease_expires_ms: i64,
}

/// Tells, at the default log level, what a batch waits for: once per holder, then every
/// half minute while the wait goes on.
#[derive(Default)]
pub(super) struct Waiting {
    told: std::collections::HashMap<String, std::time::Instant>,
}

impl Waiting {
    pub fn log(&mut self, busy: &[(usize, Holder)], items: &[Item<'_>]) {
        let mut by_owner: std::collections::BTreeMap<&str, (usize, i64, &str)> =
            std::collections::BTreeMap::new();
        for (i, h) in busy {
            let e = by_owner.entry(h.owner.as_str()).or_insert((
                0,
                h.lease_expires_ms,
                items[*i].key.as_str(),
            ));
            e.0 += 1;
            e.1 = e.1.max(h.lease_expires_ms);
        }
        let now = std::time::Instant::now();
        for (owner, (count, until, first)) in by_owner {
            let due = self
                .told
                .get(owner)
                .is_none_or(|t| now.duration_since(*t) >= Duration::from_secs(30));
            if !due {
                continue;
            }
            self.told.insert(owner.to_string(), now);
            let until = crate::time::local_rfc3339(until);
            // Another batch of this very process (a watcher's workers meeting one key) is a
            // short, normal wait; only another process is news for the operator.
            if owner.starts_with(&crate::owner::Owner::current().id()) {
                tracing::debug!(
                    interchanges = count,
                    first,
                    "waiting for another batch of this process"
                );
                continue;
            }
            tracing::warn!(
                holder = %crate::owner::describe(owner),
                interchanges = count,
                first = first,
                lease_until = %until,
                "waiting for another process that holds these interchanges, at most until its lease ends (SIGTERM or SIGINT stops the wait)"
            );
        }
    }
}

/// One interchange of a round in flight once its claim answered: its place in the window
/// (its [`Item`]), and what the round does with it. The steps after the claim take and hand
/// on these records, one an interchange, instead of lists joined by position.
pub(super) struct InFlight {
    pub item: usize,
    pub plan: AfterClaim,
}

/// What a round does with an interchange once its claim is answered.
pub(super) enum AfterClaim {
    /// Retry in a later round (another process holds it).
    Busy(Holder),
    /// Settled without writing (in progress elsewhere, with `--no-wait`).
    Event(EventKind),
    /// Replay these stored acknowledgments (a duplicate).
    Replay(Vec<StoredAck>),
    /// Refuse with a TA1 R 025 (a conflict); the decision is made when the claim answers.
    Refuse(Box<Decision>),
    /// Ours: the content the key was first claimed for.
    Own(String),
}

/// Step (2): every key of the round claimed in one transaction, and what to do with each.
pub(super) fn claim_all(
    r: &Round<'_>,
    round: &[usize],
    items: &mut [Item<'_>],
    registry: &mut Registry,
) -> Result<Vec<InFlight>, ProcessError> {
    // The registry keeps where the file was, whatever folder `process` was run from.
    let files: std::collections::HashMap<usize, String> = round
        .iter()
        .map(|&i| {
            let f = &items[i].report.file;
            // Standard input has no path to keep.
            let abs = if f == "-" {
                f.clone()
            } else {
                std::path::absolute(f).map_or_else(|_| f.clone(), |p| p.display().to_string())
            };
            (i, abs)
        })
        .collect();
    let partners: Vec<String> = round.iter().map(|&i| items[i].partner.key()).collect();
    let requests: Vec<ClaimRequest<'_>> = round
        .iter()
        .zip(&partners)
        .map(|(&i, partner)| {
            let it = &items[i];
            ClaimRequest {
                key: &it.key,
                partner,
                control_number: it.ic.isa.control_number(),
                fingerprint: &it.fingerprint,
                file: files
                    .get(&i)
                    .map_or(it.report.file.as_str(), String::as_str),
                owner: &r.options.owner,
                lease_ms: r.lease_ms,
                is_dead: &crate::owner::is_dead,
            }
        })
        .collect();
    let claims: Vec<Claim> = registry.batch_again(|b| b.claim_interchanges(&requests))?;
    let mut takeovers: std::collections::BTreeMap<String, usize> = Default::default();
    let plans = round
        .iter()
        .zip(claims)
        .map(|(&i, claim)| {
            let plan = after_claim(&mut items[i], claim, r.options.no_wait, &mut takeovers);
            InFlight { item: i, plan }
        })
        .collect();
    for (from, n) in &takeovers {
        tracing::warn!(interchanges = n, "taking over unfinished claims of {from}");
    }
    Ok(plans)
}

/// What to do with an interchange once its claim answered `claim`, its report updated to
/// say so; takeovers of other processes' claims are counted in `takeovers`, by process.
pub(super) fn after_claim(
    it: &mut Item<'_>,
    claim: Claim,
    no_wait: bool,
    takeovers: &mut std::collections::BTreeMap<String, usize>,
) -> AfterClaim {
    let _enter = span(it).entered();
    match claim {
        Claim::Busy { owner, .. } if no_wait => {
            let holder = crate::owner::describe(&owner);
            tracing::info!(%holder, "in progress elsewhere; not waiting");
            it.report.reason = Some(format!("{holder} holds the claim"));
            AfterClaim::Event(EventKind::InProgress)
        }
        Claim::Busy {
            owner,
            lease_expires_ms,
        } => AfterClaim::Busy(Holder {
            owner,
            lease_expires_ms,
        }),
        Claim::Duplicate(done) => {
            // The original's outcome travels with the replay: an exact resend of a rejected
            // interchange is answered the same way and is still a rejected file.
            it.report.replayed = done.disposition;
            if it.report.replayed.is_some_and(|d| !d.is_success()) {
                it.report.reason_code = done.reason_code.clone();
                it.report.reason = done.reason.clone();
            }
            it.report.disposition = Disposition::Duplicate;
            tracing::info!(
                acks = done.acks.len(),
                "duplicate: original acknowledgments replayed"
            );
            AfterClaim::Replay(done.acks)
        }
        Claim::Conflict(earlier) => {
            let response = ack::conflict(&it.ic, &it.partner, &earlier.fingerprint);
            it.report.disposition = Disposition::Conflict;
            it.report.reason_code = Some(crate::finding::Ta105::DuplicateControlNumber.to_string());
            it.report.reason = response.reason.as_ref().map(|r| bounded_reason(&r.text));
            tracing::error!(earlier = %earlier.fingerprint, now = %it.fingerprint, "CONFLICT: control number reused for different content; nothing processed");
            AfterClaim::Refuse(Box::new(Decision {
                partner: it.partner.clone(),
                known: true,
                findings: Vec::new(),
                response: std::sync::Arc::new(response),
            }))
        }
        Claim::Owned {
            attempt,
            previous,
            first_fingerprint,
        } => {
            it.report.attempt = Some(attempt);
            let (why, previous_kind) = match &previous {
                Previous::Expired { .. } => ("its lease expired", PreviousKind::Owner),
                Previous::Dead { .. } => ("its process is dead", PreviousKind::Owner),
                _ => ("it failed", PreviousKind::Failed),
            };
            it.report.took_over = match previous {
                Previous::Expired { owner } | Previous::Dead { owner } => Some(owner),
                Previous::Failed => Some("failed attempt".into()),
                _ => None,
            };
            if let Some(from) = &it.report.took_over {
                tracing::info!(attempt, took_over = %from, "taking over an unfinished claim: {why}");
                if !matches!(previous_kind, PreviousKind::Failed) {
                    *takeovers
                        .entry(format!("{} ({why})", crate::owner::describe(from)))
                        .or_default() += 1;
                }
            }
            AfterClaim::Own(first_fingerprint)
        }
    }
}
