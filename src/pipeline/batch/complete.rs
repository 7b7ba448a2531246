//! Step (5) of a round, in one transaction: every owned claim completed with what was
//! written for it (its acknowledgments stored, its documents handed over), every other
//! decision (a replay, a refusal, a wait not taken) recorded as an event.

use crate::ack::Disposition;
use crate::pipeline::flight::{bounded_reason, span, Item, Kept, Round};
use crate::pipeline::{json, ProcessError, Report};
use std::collections::{HashMap, HashSet};

use crate::registry::{AckBytes, AckToStore, Batch, Completion, EventKind, GroupKey, Registry};

use super::claim::{AfterClaim, InFlight};
use super::decide::released_groups;
use super::Prepared;

/// Step (5), in one transaction: every owned claim completed with what was written for it,
/// every other decision recorded.
pub(super) fn complete_all(
    r: &Round<'_>,
    prepared: &mut [Prepared],
    plans: &[InFlight],
    stored: &HashMap<usize, Vec<Kept>>,
    any_owned: bool,
    items: &mut [Item<'_>],
    registry: &mut Registry,
) -> Result<HashSet<usize>, ProcessError> {
    for p in prepared.iter_mut() {
        let it = &mut items[p.item];
        let response = &p.decision.response;
        it.report.disposition = response.disposition;
        it.report.reason_code = response
            .reason
            .as_ref()
            .and_then(|r| r.code)
            .map(|c| c.to_string());
        it.report.reason = response.reason.as_ref().map(|r| bounded_reason(&r.text));
        p.progress.move_into(&mut it.report);
    }
    if any_owned {
        fail::fail_point!("complete.before", |_| std::process::abort());
    }
    let details: Vec<String> = prepared
        .iter()
        .map(|p| recorded_detail(&mut items[p.item].report))
        .collect();
    // The other decisions' events, as small (a replay lists its original's documents).
    let noted: Vec<Option<String>> = plans
        .iter()
        .map(|InFlight { item: i, plan }| match plan {
            AfterClaim::Busy(_) | AfterClaim::Own(_) => None,
            _ => Some(recorded_detail(&mut items[*i].report)),
        })
        .collect();
    let items_now: &[Item<'_>] = items;
    let completed: Vec<(usize, bool)> = registry.batch_again(|b| {
        let mut completed: Vec<(usize, bool)> = prepared
            .iter()
            .filter(|p| p.lost)
            .map(|p| (p.item, false))
            .collect();
        // The claims still ours, each with the group keys its groups not wholly accepted
        // release.
        let ours: Vec<Ours<'_>> = prepared
            .iter()
            .zip(&details)
            .filter(|(p, _)| !p.lost)
            .map(|(p, detail)| Ours {
                p,
                detail,
                released: released_groups(&p.decision, &p.group_keys),
            })
            .collect();
        completed.extend(complete_ours(b, r, &ours, stored, items_now)?);
        record_others(b, plans, &noted, items_now)?;
        Ok::<_, ProcessError>(completed)
    })?;
    Ok(told(completed, items))
}

/// A claim still ours at the completion: what was prepared for it, the detail its event
/// records, and the group keys it releases.
struct Ours<'p> {
    p: &'p Prepared,
    detail: &'p str,
    released: Vec<GroupKey>,
}

/// Writes an acknowledgment that is not held (a large interchange's 997/999).
type Make<'m> = Box<dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()> + 'm>;

/// The claims still ours completed (inside the completion's transaction), with their
/// acknowledgments stored and their documents handed over; whether each was still ours.
fn complete_ours(
    b: &Batch<'_>,
    r: &Round<'_>,
    ours: &[Ours<'_>],
    stored: &HashMap<usize, Vec<Kept>>,
    items: &[Item<'_>],
) -> Result<Vec<(usize, bool)>, ProcessError> {
    let kept_of = |p: &Prepared| stored.get(&p.item).map_or(&[][..], Vec::as_slice);
    let makers: Vec<Vec<Make<'_>>> = ours
        .iter()
        .map(|o| {
            let ic = &items[o.p.item].ic;
            kept_of(o.p)
                .iter()
                .filter_map(|k| match k {
                    Kept::Made { made, .. } => Some(Box::new(move |out: &mut dyn std::io::Write| {
                        made.write(ic, &r.config.gateway, out)
                    }) as Make<'_>),
                    Kept::Held(_) => None,
                })
                .collect()
        })
        .collect();
    let to_store: Vec<Vec<AckToStore<'_>>> = ours
        .iter()
        .zip(&makers)
        .map(|(o, makers)| {
            let mut makers = makers.iter();
            kept_of(o.p)
                .iter()
                .filter_map(|k| match k {
                    Kept::Held(a) => Some(a.to_store()),
                    // One maker each, in order (made just above).
                    Kept::Made { kind, path, .. } => makers.next().map(|make| AckToStore {
                        kind,
                        path,
                        bytes: AckBytes::Made(make.as_ref()),
                    }),
                })
                .collect()
        })
        .collect();
    let completions: Vec<(&str, Completion<'_>)> = ours
        .iter()
        .zip(&to_store)
        .map(|(o, acks)| completion(o, acks, items))
        .collect();
    let done = b.complete_many(&r.options.owner, &completions)?;
    hand_over(b, r, ours, done, items)
}

/// What the registry records of a claim still ours.
fn completion<'a>(
    o: &'a Ours<'_>,
    acks: &'a [AckToStore<'a>],
    items: &'a [Item<'_>],
) -> (&'a str, Completion<'a>) {
    let it = &items[o.p.item];
    let response = &o.p.decision.response;
    (
        it.key.as_str(),
        Completion {
            disposition: response.disposition,
            reason_code: it.report.reason_code.as_deref(),
            reason: it.report.reason.as_deref(),
            acks,
            outputs: it
                .report
                .outputs
                .get(..it.report.outputs.len().min(RECORDED))
                .unwrap_or_default(),
            released_groups: &o.released,
            event: response.disposition.into(),
            detail: o.detail,
        },
    )
}

/// The documents of the claims completed (`done`) handed over; whether each was.
fn hand_over(
    b: &Batch<'_>,
    r: &Round<'_>,
    ours: &[Ours<'_>],
    done: Vec<bool>,
    items: &[Item<'_>],
) -> Result<Vec<(usize, bool)>, ProcessError> {
    // Only a later attempt can find sightings an earlier one recorded and this one did not;
    // a first attempt's (a key never seen, or pruned) are all its own, and reading them back
    // would cost a million ids for a large interchange.
    let again: Vec<bool> = ours
        .iter()
        .map(|o| items[o.p.item].report.attempt.is_some_and(|a| a > 1))
        .collect();
    let keys: Vec<&str> = ours
        .iter()
        .zip(&again)
        .filter(|(_, again)| **again)
        .map(|(o, _)| items[o.p.item].key.as_str())
        .collect();
    let mut recorded = b.recorded_documents(&keys)?.into_iter();
    let mut completed = Vec::with_capacity(ours.len());
    for ((o, done), again) in ours.iter().zip(done).zip(again) {
        let recorded = if again {
            recorded.next().unwrap_or_default()
        } else {
            Vec::new()
        };
        if done {
            let key = &items[o.p.item].key;
            crate::pipeline::documents::complete(
                b,
                r.config,
                &r.options.owner,
                key,
                &recorded,
                &o.p.documents,
                &o.p.progress,
            )?;
            settle_acks(b, &items[o.p.item], o.p.decision.response.disposition)?;
        }
        completed.push((o.p.item, done));
    }
    Ok(completed)
}

/// What an accepted interchange from a partner acknowledges of the documents we sent it
/// (its TA1s, 997s and 999s), settled in the transaction that completes it: applied once,
/// however often the partner resends it.
fn settle_acks(b: &Batch<'_>, it: &Item<'_>, disposition: Disposition) -> Result<(), ProcessError> {
    if !matches!(disposition, Disposition::Accepted | Disposition::Partial) || it.large.is_some() {
        return Ok(());
    }
    let said = crate::outbound::acknowledged(&it.ic);
    if said.is_empty() {
        return Ok(());
    }
    let settled = b.settle_outbound(&it.partner.key(), &it.key, &said)?;
    tracing::info!(
        settled = settled.settled,
        duplicates = settled.duplicates,
        unmatched = settled.unmatched,
        "the partner's acknowledgments of our documents"
    );
    Ok(())
}

/// The events of the decisions that complete no claim of ours (replays, refusals, waits
/// not taken), with their details (`noted`, by plan).
fn record_others(
    b: &Batch<'_>,
    plans: &[InFlight],
    noted: &[Option<String>],
    items: &[Item<'_>],
) -> Result<(), ProcessError> {
    for (InFlight { item: i, plan }, detail) in plans.iter().zip(noted) {
        let event = match plan {
            AfterClaim::Replay(_) => EventKind::Duplicate,
            AfterClaim::Refuse(_) => EventKind::Conflict,
            AfterClaim::Event(event) => *event,
            AfterClaim::Busy(_) | AfterClaim::Own(_) => continue,
        };
        let Some(detail) = detail else {
            continue;
        };
        let it = &items[*i];
        b.record_event(
            event,
            Some(&it.key),
            Some(&it.partner.key()),
            it.report.control_number.as_deref(),
            it.report.disposition,
            detail,
        )?;
    }
    Ok(())
}

/// Each completion logged, and each claim lost reported so; the items whose decisions were
/// recorded.
fn told(completed: Vec<(usize, bool)>, items: &mut [Item<'_>]) -> HashSet<usize> {
    let mut recorded = HashSet::new();
    for (i, done) in completed {
        let it = &mut items[i];
        let _enter = span(it).entered();
        if done {
            recorded.insert(i);
            tracing::info!(
                disposition = it.report.disposition.as_str(),
                acks = it.report.acks.len(),
                outputs = it.report.outputs.len(),
                "completed"
            );
        } else {
            lost_claim(&mut it.report);
        }
    }
    recorded
}

/// The documents and outputs an audit event (and the claim's row) lists: the first ones of
/// an interchange that carries many (the registry's documents table has them all), so one
/// record stays small.
pub const RECORDED: usize = 100;

/// The report as the completion's audit event records it.
pub(super) fn recorded_detail(report: &mut Report) -> String {
    if report.documents.len() <= RECORDED && report.outputs.len() <= RECORDED {
        return json(report);
    }
    let counted = (report.documents_total, report.documents_new);
    report.count_documents();
    let documents = report
        .documents
        .split_off(report.documents.len().min(RECORDED));
    let outputs = report.outputs.split_off(report.outputs.len().min(RECORDED));
    let detail = json(report);
    report.documents.extend(documents);
    report.outputs.extend(outputs);
    (report.documents_total, report.documents_new) = counted;
    detail
}

/// Reports an interchange whose claim another process took over from us: not ours to report
/// as decided.
pub(super) fn lost_claim(report: &mut Report) {
    tracing::warn!("lease lost: another process took this interchange over; its result stands");
    report.disposition = Disposition::InProgress;
    report.reason_code = None;
    report.reason = Some(
        "our lease expired and another process took this interchange over; see history".into(),
    );
    report.acks.clear();
    report.outputs.clear();
    report.documents.clear();
    report.documents_total = None;
    report.documents_new = None;
}
