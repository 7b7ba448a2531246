//! Step (5) of a round, in one transaction: every owned claim completed with what was
//! written for it (its acknowledgments stored, its documents handed over), every other
//! decision (a replay, a refusal, a wait not taken) recorded as an event.

use crate::ack::Disposition;
use crate::pipeline::flight::{bounded_reason, span, Item, Kept, Round};
use crate::pipeline::{json, ProcessError, Report};
use crate::registry::{AckBytes, AckToStore, Completion, EventKind, Registry};

use super::claim::AfterClaim;
use super::decide::{released_groups, Prepared};

/// Step (5), in one transaction: every owned claim completed with what was written for it,
/// every other decision recorded.
pub(super) fn complete_all(
    r: &Round<'_>,
    prepared: &mut [Prepared],
    plans: &[(usize, AfterClaim)],
    stored: &std::collections::HashMap<usize, Vec<Kept>>,
    any_owned: bool,
    items: &mut [Item<'_>],
    registry: &mut Registry,
) -> Result<std::collections::HashSet<usize>, ProcessError> {
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
        .map(|(i, plan)| match plan {
            AfterClaim::Busy(_) | AfterClaim::Own(_) => None,
            _ => Some(recorded_detail(&mut items[*i].report)),
        })
        .collect();
    let completed: Vec<(usize, bool)> = registry.batch_again(|b| {
        let mut completed = Vec::new();
        // The claims still ours, each with the group keys its groups not wholly accepted
        // release.
        let mut ours = Vec::new();
        for (p, detail) in prepared.iter().zip(&details) {
            if p.lost {
                completed.push((p.item, false));
                continue;
            }
            let released = released_groups(&p.decision, &p.group_keys);
            ours.push((p, detail, released));
        }
        // What makes each acknowledgment not held (a large interchange's 997/999), then
        // every acknowledgment as the registry stores it.
        type Make<'m> = Box<dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()> + 'm>;
        let kept_of = |p: &Prepared| stored.get(&p.item).map_or(&[][..], Vec::as_slice);
        let makers: Vec<Vec<Make<'_>>> = ours
            .iter()
            .map(|(p, ..)| {
                let ic = &items[p.item].ic;
                kept_of(p)
                    .iter()
                    .filter_map(|k| match k {
                        Kept::Made { made, .. } => {
                            Some(Box::new(move |out: &mut dyn std::io::Write| {
                                made.write(ic, &r.config.gateway, out)
                            }) as Make<'_>)
                        }
                        Kept::Held(_) => None,
                    })
                    .collect()
            })
            .collect();
        let to_store: Vec<Vec<AckToStore<'_>>> = ours
            .iter()
            .zip(&makers)
            .map(|((p, ..), makers)| {
                let mut makers = makers.iter();
                kept_of(p)
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
            .map(|((p, detail, released), acks)| {
                let it = &items[p.item];
                let response = &p.decision.response;
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
                        released_groups: released,
                        event: response.disposition.into(),
                        detail,
                    },
                )
            })
            .collect();
        let done = b.complete_many(&r.options.owner, &completions)?;
        // Only a later attempt can find sightings an earlier one recorded and this one did
        // not; a first attempt's (a key never seen, or pruned) are all its own, and reading
        // them back would cost a million ids for a large interchange.
        let again: Vec<bool> = ours
            .iter()
            .map(|(p, ..)| items[p.item].report.attempt.is_some_and(|a| a > 1))
            .collect();
        let keys: Vec<&str> = completions
            .iter()
            .zip(&again)
            .filter(|(_, again)| **again)
            .map(|((key, _), _)| *key)
            .collect();
        let mut recorded = b.recorded_documents(&keys)?.into_iter();
        for (((p, ..), done), again) in ours.iter().zip(done).zip(again) {
            let recorded = if again {
                recorded.next().unwrap_or_default()
            } else {
                Vec::new()
            };
            if done {
                let key = &items[p.item].key;
                crate::pipeline::documents::complete(
                    b,
                    r.config,
                    &r.options.owner,
                    key,
                    &recorded,
                    &p.documents,
                    &p.progress,
                )?;
            }
            completed.push((p.item, done));
        }
        for ((i, plan), detail) in plans.iter().zip(&noted) {
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
        Ok::<_, ProcessError>(completed)
    })?;
    let mut recorded = std::collections::HashSet::new();
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
    Ok(recorded)
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
