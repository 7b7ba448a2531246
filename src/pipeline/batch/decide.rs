//! Step (3) of a round, in one transaction: the owned interchanges decided (their fences
//! renewed, their group keys registered, their control numbers reserved), the first run of
//! their documents decided, their acknowledgments made; the stored answers of duplicates and
//! the TA1s of conflicts numbered.

use std::path::Path;

use crate::ack::{self, Disposition};
use crate::finding::Finding;
use crate::pipeline::documents::{Planned, Progress};
use crate::pipeline::flight::{Content, Folder, Item, MadeAck, Output, Round};
use crate::pipeline::{
    acknowledgments, decide_found, decide_with, numbers_needed, outbound_name, output_stem,
    Decision, ProcessError,
};
use crate::registry::{Batch, GroupKey, Registry, Renewed, Reservation};
use crate::x12::Interchange;
use crate::{outputs, validate};

use super::claim::{AfterClaim, InFlight};
use super::Prepared;

/// Step (3), in one transaction: the owned interchanges decided (from `found`, their own
/// findings, in plan order), their control numbers reserved and their leases renewed; the
/// stored answers of duplicates, and the TA1s of conflicts numbered.
pub(super) fn prepare_all(
    r: &Round<'_>,
    plans: &mut [InFlight],
    items: &[Item<'_>],
    found: Vec<Vec<Finding>>,
    registry: &mut Registry,
) -> Result<(Vec<Prepared>, Vec<Output>), ProcessError> {
    registry.batch(|b| {
        let (fenced, mut shared) = fence(b, r, plans, items, found)?;
        let mut outputs = replayed(plans);
        let plans: &[InFlight] = plans;
        let stages = decide_each(b, r, plans, items, fenced, &mut shared)?;
        let numbered = number(b, r, plans, items, stages)?;
        let prepared = prepare_each(b, r, items, numbered, &mut outputs)?;
        Ok::<_, ProcessError>((prepared, outputs))
    })
}

/// What the fence found for one owned interchange: its lease renewed (`None`: lost), its
/// groups' keys, whether they are checked for duplicates and which of them were seen before,
/// and its own findings.
struct Fenced {
    renewed: Option<Renewed>,
    groups: Vec<GroupKey>,
    checked: bool,
    seen: Vec<bool>,
    found: Vec<Finding>,
}

/// The fences of the owned interchanges, all at once (a fence touches only its own key);
/// then the group keys of those still ours, all at once too, in order (a key two of them
/// carry is the second one's duplicate, as one after the other). In plan order.
fn fence(
    b: &Batch<'_>,
    r: &Round<'_>,
    plans: &[InFlight],
    items: &[Item<'_>],
    found: Vec<Vec<Finding>>,
) -> Result<(Vec<Fenced>, Shared), ProcessError> {
    let owned: Vec<&Item<'_>> = plans
        .iter()
        .filter(|InFlight { plan, .. }| matches!(plan, AfterClaim::Own(_)))
        .filter_map(|InFlight { item: i, .. }| items.get(*i))
        .collect();
    let keys: Vec<&str> = owned.iter().map(|it| it.key.as_str()).collect();
    let renewed = b.renew_many(&keys, &r.options.owner, r.lease_ms)?;
    let groups: Vec<Vec<GroupKey>> = owned.iter().map(|it| group_keys(&it.ic)).collect();
    let partners: Vec<String> = owned.iter().map(|it| it.partner.key()).collect();
    let checked: Vec<bool> = owned
        .iter()
        .zip(&renewed)
        .zip(&groups)
        .map(|((it, renewed), groups)| {
            renewed.is_some() && it.partner.duplicates.check_groups && !groups.is_empty()
        })
        .collect();
    let claims: Vec<(&str, &str, &[GroupKey], u32)> = owned
        .iter()
        .zip(&keys)
        .zip(&partners)
        .zip(&groups)
        .zip(&checked)
        .filter(|(_, checked)| **checked)
        .map(|((((it, key), partner), groups), _)| {
            (
                *key,
                partner.as_str(),
                groups.as_slice(),
                it.partner.duplicates.window_days,
            )
        })
        .collect();
    let mut seen = b.claim_groups_many(&claims)?.into_iter();
    let shared = Shared::of(&claims);
    drop(claims);
    let fenced = renewed
        .into_iter()
        .zip(groups)
        .zip(checked)
        .zip(found)
        .map(|(((renewed, groups), checked), found)| Fenced {
            renewed,
            groups,
            checked,
            seen: if checked {
                seen.next().unwrap_or_default()
            } else {
                Vec::new()
            },
            found,
        })
        .collect();
    Ok((fenced, shared))
}

/// The stored answers of the duplicates, to place again. Into the outbox of the
/// configuration in force, whatever folder the first answer went to (a restored or moved
/// gateway): rows store the name, older rows an absolute path of which only the name counts.
/// The bytes are moved, not copied: a replayed 997 of a million sets is 22 MB.
fn replayed(plans: &mut [InFlight]) -> Vec<Output> {
    let mut outputs = Vec::new();
    for InFlight { item: i, plan } in plans.iter_mut() {
        let AfterClaim::Replay(acks) = plan else {
            continue;
        };
        outputs.extend(acks.iter_mut().map(|a| {
            Output {
                item: *i,
                dir: Folder::Outbox,
                name: Path::new(&a.path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                content: Content::Bytes(std::mem::take(&mut a.bytes)),
                ack: Some(a.kind.clone()),
                isa13: None,
            }
        }));
    }
    outputs
}

/// Each plan's stage: the owned interchanges whose fence held decided, in plan order (the
/// group keys an earlier one of the round freed claimed again first).
fn decide_each<'p>(
    b: &Batch<'_>,
    r: &Round<'_>,
    plans: &'p [InFlight],
    items: &[Item<'_>],
    fenced: Vec<Fenced>,
    shared: &mut Shared,
) -> Result<Vec<Stage<'p>>, ProcessError> {
    let mut fenced = fenced.into_iter();
    let mut stages = Vec::with_capacity(plans.len());
    for InFlight { item: i, plan } in plans {
        let it = &items[*i];
        let first = match plan {
            AfterClaim::Own(first) => first,
            AfterClaim::Refuse(decision) => {
                stages.push(Stage::Refuse(decision));
                continue;
            }
            AfterClaim::Replay(_) | AfterClaim::Busy(_) | AfterClaim::Event(_) => {
                stages.push(Stage::Done);
                continue;
            }
        };
        let Fenced {
            renewed,
            groups,
            checked,
            mut seen,
            found,
        } = fenced.next().unwrap_or(Fenced {
            renewed: None,
            groups: Vec::new(),
            checked: false,
            seen: Vec::new(),
            found: Vec::new(),
        });
        let partner = it.partner.key();
        if checked {
            shared.claim_freed(b, it, &partner, &groups, &mut seen)?;
        }
        stages.push(match renewed {
            Some(renewed) => {
                let owned = decide_owned(r, it, renewed, found, groups, &seen);
                if checked {
                    shared.release(b, it, &partner, &owned)?;
                }
                Stage::Own(first, Box::new(owned))
            }
            None => Stage::Lost,
        });
    }
    Ok(stages)
}

/// One plan's stage with what numbers its acknowledgments: the TA1 of a content refused
/// before that is still in the outbox, or the control numbers taken for it.
struct Numbered<'p> {
    item: usize,
    stage: Stage<'p>,
    earlier: Option<Vec<u8>>,
    taken: (Vec<u32>, Vec<u32>),
}

/// The control numbers all the stages need, taken together in their order (as one after
/// the other would take them). A content refused before whose TA1 is still in the outbox (a
/// redo after a crash cut the placing of its file short) takes none: that TA1 again.
fn number<'p>(
    b: &Batch<'_>,
    r: &Round<'_>,
    plans: &[InFlight],
    items: &[Item<'_>],
    stages: Vec<Stage<'p>>,
) -> Result<Vec<Numbered<'p>>, ProcessError> {
    let partners: Vec<String> = stages
        .iter()
        .map(|stage| match stage {
            Stage::Own(_, owned) => owned.decision.partner.key(),
            Stage::Refuse(decision) => decision.partner.key(),
            Stage::Lost | Stage::Done => String::new(),
        })
        .collect();
    let earlier: Vec<Option<Vec<u8>>> = plans
        .iter()
        .zip(&stages)
        .map(|(InFlight { item: i, .. }, stage)| match stage {
            Stage::Refuse(_) => std::fs::read(
                r.config
                    .gateway
                    .outbox
                    .join(refusal_name(&items[*i], ack::OutboundKind::Ta1)),
            )
            .ok(),
            _ => None,
        })
        .collect();
    let wants: Vec<(&str, usize, usize)> = stages
        .iter()
        .zip(&partners)
        .zip(&earlier)
        .map(|((stage, partner), earlier)| {
            let needed = match stage {
                Stage::Own(_, owned) if owned.reserved.is_none() => numbers_needed(&owned.decision),
                Stage::Refuse(decision) if earlier.is_none() => numbers_needed(decision),
                _ => ack::NumbersNeeded { isa13: 0, gs06: 0 },
            };
            (partner.as_str(), needed.isa13, needed.gs06)
        })
        .collect();
    let mut taken = b.take_control_numbers(&wants)?.into_iter();
    Ok(plans
        .iter()
        .zip(stages)
        .zip(earlier)
        .map(|((InFlight { item, .. }, stage), earlier)| Numbered {
            item: *item,
            stage,
            earlier,
            taken: taken.next().unwrap_or_default(),
        })
        .collect())
}

/// Each stage prepared: the owned interchanges' numbers reserved, their acknowledgments made
/// and their first run of documents decided; the refusals' TA1s into `outputs`. Documents
/// are decided in file order, a run's worth in this transaction (across the batch's
/// interchanges): once the run is full, the rest wait for `more_runs`, which decides them in
/// order, a run at a time.
fn prepare_each(
    b: &Batch<'_>,
    r: &Round<'_>,
    items: &[Item<'_>],
    numbered: Vec<Numbered<'_>>,
    outputs: &mut Vec<Output>,
) -> Result<Vec<Prepared>, ProcessError> {
    let mut prepared = Vec::new();
    let mut budget = r.run_documents;
    for Numbered {
        item: i,
        stage,
        earlier,
        taken: (isa13, gs06),
    } in numbered
    {
        let it = &items[i];
        match stage {
            Stage::Own(first, mut owned) => {
                let reservation = match owned.reserved.take() {
                    Some(earlier) => earlier,
                    None => {
                        // Reserved with the claim, so a takeover of this claim writes the
                        // very same bytes.
                        let reservation = Reservation {
                            at_ms: crate::registry::now_ms(),
                            isa13,
                            gs06,
                        };
                        b.keep_reservation(&it.key, &reservation)?;
                        reservation
                    }
                };
                let mut p = prepare(r, i, it, first, *owned, reservation)?;
                if budget > 0 {
                    budget = next_run(b, r, &mut p, it, budget)?;
                }
                // An interchange with nothing to decide (a rejected one) is answered now,
                // whether it waits or not.
                p.files = run_files(&mut p, &it.ic);
                prepared.push(p);
            }
            Stage::Lost => prepared.push(Prepared {
                item: i,
                decision: decide_with(&it.ic, r.config, r.schemas, Vec::new()),
                files: Vec::new(),
                group_keys: Vec::new(),
                documents: Planned::default(),
                progress: Progress::new(&it.ic, false),
                acks: Vec::new(),
                stem: String::new(),
                lost: true,
            }),
            Stage::Refuse(_) if earlier.is_some() => outputs.push(Output {
                item: i,
                dir: Folder::Outbox,
                name: refusal_name(it, ack::OutboundKind::Ta1),
                content: Content::Bytes(earlier.unwrap_or_default()),
                ack: Some(ack::OutboundKind::Ta1.extension().to_string()),
                isa13: None,
            }),
            Stage::Refuse(decision) => {
                let now = chrono::Local::now().naive_local();
                // Not reserved: nothing is claimed, and a resend once the first answer has
                // left the outbox is refused afresh.
                let numbers = ack::Numbers { isa13, gs06 };
                for o in acknowledgments(&it.ic, decision, r.config, &numbers, now)? {
                    outputs.push(Output {
                        item: i,
                        dir: Folder::Outbox,
                        name: refusal_name(it, o.kind),
                        content: Content::Bytes(o.bytes),
                        ack: Some(o.kind.extension().to_string()),
                        isa13: Some(o.control_number),
                    });
                }
            }
            Stage::Done => {}
        }
    }
    Ok(prepared)
}

/// The file name of the TA1 refusing `it`'s content (a conflict).
pub(super) fn refusal_name(it: &Item<'_>, kind: ack::OutboundKind) -> String {
    let fp = it.fingerprint.get(..12).unwrap_or(&it.fingerprint);
    format!(
        "{}.conflict-{fp}.{}.x12",
        outputs::safe_name(&it.key),
        kind.extension()
    )
}

/// An owned interchange whose fence held, decided.
pub(super) struct Owned {
    decision: Decision,
    group_keys: Vec<GroupKey>,
    /// The control numbers an earlier attempt reserved for its acknowledgments, when there
    /// are enough; else this attempt takes them.
    reserved: Option<Reservation>,
}

/// Where each plan of a round stands between deciding and preparing.
pub(super) enum Stage<'p> {
    Own(&'p str, Box<Owned>),
    /// Our lease was lost: another process took the claim over; nothing is recorded.
    Lost,
    Refuse(&'p Decision),
    Done,
}

/// Decides an interchange whose fence held, from its own findings (`found`): the groups seen
/// in earlier interchanges of this sender (`seen_before`, registered by `prepare_all`) are
/// findings of this one too.
pub(super) fn decide_owned(
    r: &Round<'_>,
    it: &Item<'_>,
    renewed: Renewed,
    found: Vec<Finding>,
    group_keys: Vec<GroupKey>,
    seen_before: &[bool],
) -> Owned {
    let extra = seen_before
        .iter()
        .enumerate()
        .filter(|(_, seen)| **seen)
        .filter_map(|(gi, _)| match it.large {
            Some(large) => large
                .gs_in_file(&it.ic, gi)
                .map(|gs| validate::group_seen_before_at(gi, &gs)),
            None => validate::group_seen_before(&it.ic, gi),
        })
        .collect();
    let decision = decide_found(&it.ic, r.config, found, extra);
    let needed = numbers_needed(&decision);
    let reserved = renewed
        .reserved
        .filter(|r| r.isa13.len() >= needed.isa13 && r.gs06.len() >= needed.gs06);
    Owned {
        decision,
        group_keys,
        reserved,
    }
}

/// The keys of `decision`'s groups that are not wholly accepted: released by its
/// completion, so a corrected resend may use them again.
pub(super) fn released_groups(decision: &Decision, keys: &[GroupKey]) -> Vec<GroupKey> {
    let accepted = &decision.response.accepted_sets;
    keys.iter()
        .enumerate()
        .filter(|(gi, _)| {
            !accepted
                .get(*gi)
                .is_some_and(|s| !s.is_empty() && s.iter().all(|a| *a))
        })
        .map(|(_, k)| k.clone())
        .collect()
}

/// The group keys that several interchanges of a round carry, and those of them an earlier
/// one has released since the round registered them all at once. Registered together, a key
/// two interchanges carry is found taken by the second; but when the first is rejected, one
/// after the other the second would find it free again (the first's completion releases it):
/// so the first releases it as soon as it is decided, and the second claims it again before
/// it is decided. A crash before the round completes leaves the key with the second, whose
/// rerun keeps it; the first, rejected already, is rejected again.
pub(super) struct Shared {
    carried: std::collections::HashSet<(String, GroupKey)>,
    freed: std::collections::HashSet<(String, GroupKey)>,
}

impl Shared {
    fn of(claims: &[(&str, &str, &[GroupKey], u32)]) -> Self {
        let mut once = std::collections::HashSet::new();
        let mut carried = std::collections::HashSet::new();
        for (_, partner, groups, _) in claims {
            for g in groups.iter() {
                let k = (partner.to_string(), g.clone());
                if !once.insert(k.clone()) {
                    carried.insert(k);
                }
            }
        }
        Shared {
            carried,
            freed: Default::default(),
        }
    }

    /// Claims again the groups of `it` found taken that an earlier interchange of the round
    /// has freed, updating `seen` with what the claim finds now.
    fn claim_freed(
        &mut self,
        b: &Batch<'_>,
        it: &Item<'_>,
        partner: &str,
        groups: &[GroupKey],
        seen: &mut [bool],
    ) -> Result<(), ProcessError> {
        if self.freed.is_empty() {
            return Ok(());
        }
        let again: Vec<usize> = groups
            .iter()
            .enumerate()
            .filter(|(gi, g)| {
                seen.get(*gi).copied().unwrap_or(false)
                    && self.freed.contains(&(partner.to_string(), (*g).clone()))
            })
            .map(|(gi, _)| gi)
            .collect();
        if again.is_empty() {
            return Ok(());
        }
        let these: Vec<GroupKey> = again
            .iter()
            .filter_map(|gi| groups.get(*gi).cloned())
            .collect();
        let found = b.claim_groups(&it.key, partner, &these, it.partner.duplicates.window_days)?;
        for ((gi, g), taken) in again.iter().zip(these).zip(found) {
            if let Some(s) = seen.get_mut(*gi) {
                *s = taken;
            }
            if !taken {
                self.freed.remove(&(partner.to_string(), g));
            }
        }
        Ok(())
    }

    /// Releases at once the keys `owned` will not keep that a later interchange carries.
    fn release(
        &mut self,
        b: &Batch<'_>,
        it: &Item<'_>,
        partner: &str,
        owned: &Owned,
    ) -> Result<(), ProcessError> {
        if self.carried.is_empty() {
            return Ok(());
        }
        let released: Vec<GroupKey> = released_groups(&owned.decision, &owned.group_keys)
            .into_iter()
            .filter(|g| self.carried.contains(&(partner.to_string(), g.clone())))
            .collect();
        if released.is_empty() {
            return Ok(());
        }
        b.release_groups(&it.key, partner, &released)?;
        self.freed
            .extend(released.into_iter().map(|g| (partner.to_string(), g)));
        Ok(())
    }
}

/// The keys of an interchange's groups (GS01, GS02, GS03, GS06).
pub(super) fn group_keys(ic: &Interchange<'_>) -> Vec<GroupKey> {
    ic.groups
        .iter()
        .map(|g| GroupKey::of(g.gs.text(1), g.gs.text(2), g.gs.text(3), g.gs.text(6)))
        .collect()
}

/// Step (3) for one owned interchange, inside the batch's transaction: its acknowledgments
/// made; its documents are decided by [`next_run`].
pub(super) fn prepare(
    r: &Round<'_>,
    i: usize,
    it: &Item<'_>,
    first_fingerprint: &str,
    owned: Owned,
    reservation: Reservation,
) -> Result<Prepared, ProcessError> {
    let ic = &it.ic;
    let Owned {
        decision,
        group_keys,
        ..
    } = owned;
    let now = chrono::Local::now().naive_local();
    let at = chrono::DateTime::from_timestamp_millis(reservation.at_ms)
        .map(|t| t.with_timezone(&chrono::Local).naive_local())
        .unwrap_or(now);
    let numbers = ack::Numbers {
        isa13: reservation.isa13,
        gs06: reservation.gs06,
    };
    let stem = output_stem(&it.key, &it.fingerprint, first_fingerprint);
    let ack_file = |kind: ack::OutboundKind, control: u32, content| Output {
        item: i,
        dir: Folder::Outbox,
        name: outbound_name(&stem, kind),
        ack: Some(kind.extension().to_string()),
        isa13: Some(control),
        content,
    };
    let acks = if it.large.is_some() {
        // A large interchange's 997/999 is made when it is written, never held.
        let plan = ack::Plan::of(
            &decision.response,
            ic,
            &decision.partner,
            &r.config.gateway,
            &numbers,
            at,
        )?;
        let made = plan.group_ack().map(|(kind, control)| {
            let made = MadeAck {
                response: std::sync::Arc::clone(&decision.response),
                partner: decision.partner.clone(),
                numbers,
                at,
            };
            ack_file(kind, control, Content::Made(Box::new(made)))
        });
        plan.ta1()
            .map(|o| ack_file(o.kind, o.control_number, Content::Bytes(o.bytes)))
            .into_iter()
            .chain(made)
            .collect()
    } else {
        acknowledgments(ic, &decision, r.config, &numbers, at)?
            .into_iter()
            .map(|o| ack_file(o.kind, o.control_number, Content::Bytes(o.bytes)))
            .collect()
    };
    let rejected = decision.response.disposition == Disposition::Rejected;
    let progress = Progress::new(ic, !rejected);
    Ok(Prepared {
        item: i,
        decision,
        files: Vec::new(),
        group_keys,
        documents: Planned::default(),
        progress,
        acks,
        stem,
        lost: false,
    })
}

/// Records and decides the next of `p`'s documents, about `budget` of them (inside a
/// transaction); returns the budget left for the interchanges after it: none when `p` has
/// documents left.
pub(super) fn next_run(
    b: &Batch<'_>,
    r: &Round<'_>,
    p: &mut Prepared,
    it: &Item<'_>,
    budget: usize,
) -> Result<usize, ProcessError> {
    let accepted = accepted_by(&p.decision);
    p.documents = crate::pipeline::documents::plan(b, r, it, &accepted, &mut p.progress, budget)?;
    Ok(if p.progress.next.is_some() {
        0
    } else {
        budget.saturating_sub(p.documents.decided)
    })
}

/// Whether set `si` of group `gi` is accepted, by `decision`.
pub(super) fn accepted_by(decision: &Decision) -> impl Fn(usize, usize) -> bool + '_ {
    |gi: usize, si: usize| {
        decision
            .response
            .accepted_sets
            .get(gi)
            .and_then(|s| s.get(si))
            .copied()
            .unwrap_or(false)
    }
}

/// The files of the run of documents just planned; with the last run, the interchange's
/// translation (its accepted sets that carry no document, known once every run is planned)
/// and its acknowledgments first.
pub(super) fn run_files(p: &mut Prepared, ic: &Interchange<'_>) -> Vec<Output> {
    let mut files = Vec::new();
    if p.progress.next.is_none() {
        let accepted = accepted_by(&p.decision);
        let keyed = &p.progress.keyed;
        // Sets that carry a business document are delivered in its own file.
        let keep = |gi: usize, si: usize| {
            accepted(gi, si)
                && !keyed
                    .get(gi)
                    .and_then(|g| g.get(si))
                    .copied()
                    .unwrap_or(false)
        };
        if p.decision.response.disposition != Disposition::Rejected
            && p.progress.interchange_file(&accepted)
        {
            // Written straight into its file with the others; only whether its sets are
            // kept is decided here.
            files.push(Output {
                item: p.item,
                dir: Folder::out(crate::document::Usage::of(ic)),
                name: format!("{}.json", p.stem),
                content: Content::Translation {
                    form: p.decision.partner.output.translation,
                    keep: ic
                        .groups
                        .iter()
                        .enumerate()
                        .map(|(gi, group)| (0..group.sets.len()).map(|si| keep(gi, si)).collect())
                        .collect(),
                },
                ack: None,
                isa13: None,
            });
        }
        files.append(&mut p.acks);
    }
    files
}
