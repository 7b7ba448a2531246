//! `send`: one of our documents to its partner, exactly once however often the ERP retries.
//!
//! The document is checked and named first ([`crate::outbound::prepare`]: nothing is taken
//! for a document that is refused). Its key is then claimed in the transaction that takes
//! the partner's ISA13 and GS06 and records the interchange's bytes; the file is written
//! after the commit, and the row marked sent. A crash after the commit leaves a claim whose
//! bytes the next `send` of the same key (or any process, once the writer is dead or its
//! lease ran out) writes as they were: never new numbers for the same document, never a
//! number recorded without its file.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::config::Config;
use std::sync::Arc;

use crate::outbound::{render_together, Placed, Prepared, Refusal};
use crate::registry::{
    NewOutbound, OutboundClaim, OutboundRow, Placement, Registry, RegistryError,
};
use crate::schema::Schemas;

/// Why a document was not sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The document is the ERP's to fix; nothing was taken.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Its key was sent before with other content; nothing was sent.
    #[error("{key} was sent on {first_sent} (ISA13 {isa13:09}) with other content (fingerprint {first}, now {now}); a change is a new document (its own key: a corrected invoice's BIG08, a replacing ship notice's BSN01 05, a higher version)")]
    Conflict {
        key: String,
        first: String,
        now: String,
        first_sent: String,
        isa13: u32,
    },
    /// Another process is writing it and did not finish within its lease.
    #[error("{key} is being written by {owner} (ISA13 {isa13:09}); try again after the lease")]
    Busy {
        key: String,
        owner: String,
        isa13: u32,
    },
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("{path}: {cause}")]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
}

/// What a `send` did.
#[derive(Debug, Clone)]
pub struct Sent {
    pub row: OutboundRow,
    /// Sent before: this is the first sending's result, nothing was written now.
    pub replayed: bool,
    /// Where its file is.
    pub path: PathBuf,
    /// What the checks noted without refusing.
    pub warnings: Vec<crate::finding::Finding>,
}

/// The folder a partner's interchanges are written to.
pub fn folder_of(config: &Config, partner: &crate::config::Partner) -> PathBuf {
    partner
        .outbound
        .folder
        .clone()
        .unwrap_or_else(|| config.gateway.outbox.clone())
}

/// Sends one document (`json`, the ERP's form), its partner `partner` when it names none.
pub fn send(
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    json: &[u8],
    partner: Option<&str>,
    idempotency_key: Option<&str>,
) -> Result<Sent, SendError> {
    let mut prepared = crate::outbound::prepare(config, schemas, json, partner)?;
    prepared.idempotency_key = idempotency_key.map(str::to_string);
    send_prepared(config, registry, &prepared)
}

/// [`send`] of a document already checked and named.
pub fn send_prepared(
    config: &Config,
    registry: &mut Registry,
    prepared: &Prepared,
) -> Result<Sent, SendError> {
    let owner = crate::owner::Owner::current().id();
    let lease = Duration::from_secs(config.gateway.lease_seconds);
    let deadline = Instant::now() + lease + Duration::from_secs(1);
    let mut pause = Duration::from_millis(5);
    loop {
        let claim = claim_all(config, registry, &[prepared], &owner)?
            .pop()
            .unwrap_or_else(|| Err("nothing claimed".into()))
            .map_err(|why| SendError::Refused(Refusal::Set(why)))?;
        let warnings = prepared.warnings.clone();
        match claim {
            OutboundClaim::Write { row, bytes, .. } => {
                fail::fail_point!("send.before_file", |_| std::process::abort());
                match finish(config, registry, &row, &bytes, &owner) {
                    Ok((row, path)) => {
                        return Ok(Sent {
                            row,
                            replayed: false,
                            path,
                            warnings,
                        })
                    }
                    // Taken over while we wrote (our lease ran out): the other writer marks
                    // it, and the next claim finds it sent.
                    Err(SendError::Busy { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            OutboundClaim::Replay(row) => {
                let path = folder_of(config, &prepared.partner).join(&row.file);
                return Ok(Sent {
                    row,
                    replayed: true,
                    path,
                    warnings,
                });
            }
            OutboundClaim::Conflict(row) => return Err(conflict(&row, prepared)),
            OutboundClaim::Busy(row) => {
                if Instant::now() >= deadline {
                    return Err(SendError::Busy {
                        key: row.key,
                        owner: String::from("another process"),
                        isa13: row.isa13,
                    });
                }
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Where a run of `send` spent its time (`send --timings`, `benches/send.sh`): reading the
/// ERP's JSON and rendering, checking and naming, the registry (claims with the final
/// rendering, and marks), the files.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spent {
    pub rendering: Duration,
    pub validation: Duration,
    pub registry: Duration,
    pub files: Duration,
}

impl Spent {
    /// What preparing `p` took.
    pub fn prepared(&mut self, p: &Prepared) {
        self.rendering += p.rendering;
        self.validation += p.validation;
    }
}

/// The most documents one interchange of ours carries (a partner's `outbound_batch_ms`):
/// past it, the next interchange starts.
pub const MAX_SETS_PER_INTERCHANGE: usize = 256;

/// Sends several documents already checked and named, a batch at a time: their keys claimed
/// and numbered in one transaction, their files written in one round (made durable
/// together, then renamed into place), marked sent in a second transaction. Each keeps its
/// own key and result, as if sent alone. Documents to a partner with `outbound_batch_ms`
/// share an interchange (up to [`MAX_SETS_PER_INTERCHANGE`]); the others have one each. A
/// key another process is writing (or one twice in `prepared`) is sent alone afterwards,
/// waiting as [`send_prepared`] does.
pub fn send_all(
    config: &Config,
    registry: &mut Registry,
    prepared: &[&Prepared],
    spent: &mut Spent,
) -> Result<Vec<Result<Sent, SendError>>, RegistryError> {
    let owner = crate::owner::Owner::current().id();
    let started = Instant::now();
    let claims = claim_all(config, registry, prepared, &owner)?;
    spent.registry += started.elapsed();
    let mine = ours_to_write(&claims);
    fail::fail_point!("send.before_file", |_| std::process::abort());
    let mut finished = write_and_mark(config, registry, &mine, &owner, spent)?.into_iter();
    let mut results = Vec::with_capacity(prepared.len());
    for (claim, p) in claims.into_iter().zip(prepared) {
        let warnings = p.warnings.clone();
        let done = match claim {
            Err(why) => Some(Err(SendError::Refused(Refusal::Set(why)))),
            Ok(OutboundClaim::Write { .. }) => match finished.next() {
                Some(Ok((row, path))) => Some(Ok(Sent {
                    row,
                    replayed: false,
                    path,
                    warnings,
                })),
                // Taken over while we wrote: the other writer finishes it.
                Some(Err(SendError::Busy { .. })) | None => None,
                Some(Err(e)) => Some(Err(e)),
            },
            Ok(OutboundClaim::Replay(row)) => {
                let path = folder_of(config, &p.partner).join(&row.file);
                Some(Ok(Sent {
                    row,
                    replayed: true,
                    path,
                    warnings,
                }))
            }
            Ok(OutboundClaim::Conflict(row)) => Some(Err(conflict(&row, p))),
            Ok(OutboundClaim::Busy(_)) => None,
        };
        // What another process holds, or a key twice in the batch: alone, waiting its turn.
        results.push(done.unwrap_or_else(|| send_prepared(config, registry, p)));
    }
    Ok(results)
}

/// A claim ours finished: its row as marked and its file, or why not.
type Finished = Result<(OutboundRow, PathBuf), SendError>;

/// The claims of a batch that are ours to write: each row with its interchange's bytes.
fn ours_to_write(claims: &[Result<OutboundClaim, String>]) -> Vec<(&OutboundRow, &Arc<[u8]>)> {
    claims
        .iter()
        .filter_map(|c| match c {
            Ok(OutboundClaim::Write { row, bytes, .. }) => Some((row, bytes)),
            _ => None,
        })
        .collect()
}

/// Claims ours finished: each interchange's file written once, whatever number of its
/// documents are here (all made durable together, then renamed into place), then every
/// document marked sent in one commit. For each claim in order: its row and file, or why
/// not (a write that fails lets the claims go, for the next attempt to write the same bytes
/// at once; a claim taken over meanwhile is `Busy`, the other writer's to mark).
fn write_and_mark(
    config: &Config,
    registry: &mut Registry,
    mine: &[(&OutboundRow, &Arc<[u8]>)],
    owner: &str,
    spent: &mut Spent,
) -> Result<Vec<Finished>, RegistryError> {
    let partners: Vec<Result<&crate::config::Partner, Refusal>> = mine
        .iter()
        .map(|(row, _)| partner_of(config, row))
        .collect();
    let mut files: Vec<(PathBuf, &str, &[u8])> = Vec::new();
    for ((row, bytes), partner) in mine.iter().zip(&partners) {
        if let Ok(partner) = partner {
            let folder = folder_of(config, partner);
            if !files
                .iter()
                .any(|(f, name, _)| *f == folder && *name == row.file)
            {
                files.push((folder, &row.file, bytes));
            }
        }
    }
    let started = Instant::now();
    let written = write_files(&files, owner);
    spent.files += started.elapsed();
    if let Err(e) = written {
        // The numbers stay the documents': the next send writes these bytes.
        for (row, _) in mine {
            if let Err(r) = registry.outbound_release(&row.key, owner) {
                tracing::warn!(key = %row.key, error = %r, "the claim of a document whose file could not be written was not released: it is taken over when its lease runs out");
            }
        }
        return Ok(mine
            .iter()
            .map(|_| {
                Err(SendError::Write {
                    path: e.path.clone(),
                    cause: std::io::Error::new(e.cause.kind(), e.cause.to_string()),
                })
            })
            .collect());
    }
    fail::fail_point!("send.before_mark", |_| std::process::abort());
    let marks: Vec<(&str, Option<i64>)> = mine
        .iter()
        .zip(&partners)
        .filter_map(|((row, _), p)| Some((row.key.as_str(), due_of(p.as_ref().ok()?))))
        .collect();
    let started = Instant::now();
    let mut marked = registry.outbound_written_many(&marks, owner)?.into_iter();
    spent.registry += started.elapsed();
    let mut results = Vec::with_capacity(mine.len());
    for ((row, _), partner) in mine.iter().zip(partners) {
        let partner = match partner {
            Ok(p) => p,
            Err(r) => {
                results.push(Err(SendError::Refused(r)));
                continue;
            }
        };
        results.push(if let Some(Some(row)) = marked.next() {
            let path = folder_of(config, partner).join(&row.file);
            Ok((row, path))
        } else {
            Err(SendError::Busy {
                key: row.key.clone(),
                owner: "another process (it took the claim over)".into(),
                isa13: row.isa13,
            })
        });
    }
    Ok(results)
}

/// The partner a row of ours is to, as configured now.
fn partner_of<'c>(
    config: &'c Config,
    row: &OutboundRow,
) -> Result<&'c crate::config::Partner, Refusal> {
    config
        .partners
        .iter()
        .find(|p| p.key() == row.partner)
        .ok_or_else(|| {
            Refusal::Partner(format!(
                "partner {} of {} is no longer configured",
                row.partner, row.key
            ))
        })
}

/// Files written in one round, made durable together: (folder, name, bytes) each.
fn write_files(
    files: &[(PathBuf, &str, &[u8])],
    owner: &str,
) -> Result<Vec<PathBuf>, crate::outputs::WriteError> {
    let contents: Vec<Box<crate::outputs::Content<'_>>> = files
        .iter()
        .map(|(_, _, bytes)| {
            Box::new(move |out: &mut dyn std::io::Write| out.write_all(bytes))
                as Box<crate::outputs::Content<'_>>
        })
        .collect();
    let files: Vec<(&std::path::Path, &str, &crate::outputs::Content<'_>)> = files
        .iter()
        .zip(&contents)
        .map(|((dir, name, _), c)| (dir.as_path(), *name, c.as_ref()))
        .collect();
    crate::outputs::write_many(&files, owner)
}

/// Every document of a batch claimed and, where new, numbered and recorded: one commit.
/// Documents to a partner that batches share an interchange with those of the same
/// envelope before them, up to [`MAX_SETS_PER_INTERCHANGE`].
fn claim_all(
    config: &Config,
    registry: &mut Registry,
    prepared: &[&Prepared],
    owner: &str,
) -> Result<Vec<Result<OutboundClaim, String>>, RegistryError> {
    let lease_ms =
        i64::try_from(config.gateway.lease_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let partners: Vec<String> = prepared.iter().map(|p| p.partner.key()).collect();
    let together = interchanges_of(prepared);
    let news: Vec<NewOutbound<'_>> = prepared
        .iter()
        .zip(&partners)
        .zip(together)
        .map(|((p, partner), together)| NewOutbound {
            key: &p.key,
            partner,
            set_id: &p.set_id,
            document_id: &p.document_id,
            fingerprint: &p.fingerprint,
            idempotency_key: p.idempotency_key.as_deref(),
            owner,
            lease_ms,
            is_dead: &crate::owner::is_dead,
            ack_due_ms: due_of(&p.partner),
            together,
            group: &p.functional_id,
        })
        .collect();
    let render = |placed: &[Placement], isa13: u32, at_ms: i64| {
        let documents = placed
            .iter()
            .map(|p| {
                Some(Placed {
                    document: prepared.get(p.index)?,
                    gs06: p.gs06,
                    st02: p.st02,
                })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or("no such document")?;
        let first = documents.first().ok_or("no document to envelope")?;
        let when = DateTime::<Utc>::from_timestamp_millis(at_ms).unwrap_or_default();
        let bytes = render_together(&documents, isa13, when).map_err(|e| e.to_string())?;
        let mut sets: Vec<&str> = Vec::new();
        for d in &documents {
            if !sets.contains(&d.document.set_id.as_str()) {
                sets.push(&d.document.set_id);
            }
        }
        let name = file_name(&first.document.partner.key(), isa13, &sets.join("-"));
        Ok((name, bytes))
    };
    registry.claim_outbound_many(&news, &render)
}

/// Which interchange each document travels in: its own, or for a partner that batches,
/// the one of the documents before it with the same envelope, until it is full.
fn interchanges_of(prepared: &[&Prepared]) -> Vec<usize> {
    let mut open: Vec<(crate::outbound::EnvelopeKey, usize, usize)> = Vec::new();
    prepared
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if p.partner.outbound.batch_ms == 0 {
                return i;
            }
            let key = p.envelope_key();
            match open.iter_mut().find(|(k, ..)| *k == key) {
                Some((_, id, n)) if *n < MAX_SETS_PER_INTERCHANGE => {
                    *n += 1;
                    *id
                }
                Some(full) => {
                    *full = (key, i, 1);
                    i
                }
                None => {
                    open.push((key, i, 1));
                    i
                }
            }
        })
        .collect()
}

/// When a document's acknowledgment falls due, counted from its sending; `None` for a
/// partner that never acknowledges.
fn due_of(partner: &crate::config::Partner) -> Option<i64> {
    let o = &partner.outbound;
    o.expect_ack
        .then(|| i64::try_from(o.ack_due_seconds.saturating_mul(1000)).unwrap_or(i64::MAX))
}

/// The refusal of a key sent before with other content.
fn conflict(row: &OutboundRow, p: &Prepared) -> SendError {
    SendError::Conflict {
        key: row.key.clone(),
        first: row.fingerprint.clone(),
        now: p.fingerprint.clone(),
        first_sent: crate::time::rfc3339(row.sent_ms.unwrap_or(row.created_ms)),
        isa13: row.isa13,
    }
}

/// The file of our interchange `isa13` to `partner` (`QUAL:ID`) carrying a set `set_id`.
pub fn file_name(partner: &str, isa13: u32, set_id: &str) -> String {
    format!(
        "{}_{isa13:09}.{}.x12",
        crate::outputs::safe_name(partner),
        crate::outputs::safe_name(set_id)
    )
}

/// `resend --new-numbers`: the document re-enveloped with the partner's next ISA13 and GS06
/// (the same set, the same delimiters, the time now), written and recorded as sent; its
/// acknowledgment waits again. `None` when the key was never sent.
pub fn resend_new_numbers(
    config: &Config,
    registry: &mut Registry,
    key: &str,
) -> Result<Option<(OutboundRow, PathBuf)>, SendError> {
    let owner = crate::owner::Owner::current().id();
    let lease =
        i64::try_from(config.gateway.lease_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let render = |old: &[u8], set: (u32, &str), isa13: u32, gs06: u32, at_ms: i64| {
        renumbered(old, set, isa13, gs06, at_ms).map_err(|e| e.to_string())
    };
    let made = registry
        .outbound_renumbered(key, &owner, lease, &render)?
        .map_err(|why| SendError::Refused(Refusal::Set(why)))?;
    let Some((row, bytes)) = made else {
        return Ok(None);
    };
    finish(config, registry, &row, &bytes.into(), &owner).map(Some)
}

/// A claim ours (`row`, its `bytes`) finished: its file written to the partner's folder,
/// then marked sent. A write that fails lets the claim go, for the next attempt to write the
/// same bytes at once; a claim taken over meanwhile is the other writer's to mark.
fn finish(
    config: &Config,
    registry: &mut Registry,
    row: &OutboundRow,
    bytes: &Arc<[u8]>,
    owner: &str,
) -> Result<(OutboundRow, PathBuf), SendError> {
    write_and_mark(
        config,
        registry,
        &[(row, bytes)],
        owner,
        &mut Spent::default(),
    )?
    .pop()
    .unwrap_or_else(|| Err(SendError::Refused(Refusal::Set("nothing written".into()))))
}

/// Finishes the documents whose claim a writer now gone left `writing` (numbered and
/// recorded, the file perhaps not written, not marked sent): their recorded interchanges
/// written (once each, however many of its documents were left), then marked, as the next
/// `send` of each would. `watch` runs it with every pass over the outbound inbox, `send`
/// before its documents. How many it finished.
pub fn finish_unfinished(config: &Config, registry: &mut Registry) -> Result<usize, SendError> {
    let owner = crate::owner::Owner::current().id();
    let lease_ms =
        i64::try_from(config.gateway.lease_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let unfinished = registry.unfinished_outbound(&crate::owner::is_dead)?;
    // One claim per interchange: taking one of its documents over takes the others with it.
    let mut rows: Vec<&OutboundRow> = Vec::new();
    for row in &unfinished {
        if !rows
            .iter()
            .any(|r| r.partner == row.partner && r.isa13 == row.isa13)
        {
            rows.push(row);
        }
    }
    if rows.is_empty() {
        return Ok(0);
    }
    let news: Vec<NewOutbound<'_>> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| NewOutbound {
            key: &row.key,
            partner: &row.partner,
            set_id: &row.set_id,
            document_id: &row.document_id,
            fingerprint: &row.fingerprint,
            idempotency_key: row.idempotency_key.as_deref(),
            owner: &owner,
            lease_ms,
            is_dead: &crate::owner::is_dead,
            ack_due_ms: None,
            together: i,
            group: "",
        })
        .collect();
    // The rows exist: each is taken over (or found finished by someone else), never
    // numbered again.
    let never = |_: &[Placement], _: u32, _: i64| {
        Err("a recorded document is never numbered again".to_string())
    };
    let claims = registry.claim_outbound_many(&news, &never)?;
    let mine = ours_to_write(&claims);
    for (row, _) in &mine {
        tracing::warn!(key = %row.key, isa13 = row.isa13, "finishing a document whose writer is gone: its recorded interchange written");
    }
    let mut done = 0;
    for (result, (row, _)) in
        write_and_mark(config, registry, &mine, &owner, &mut Spent::default())?
            .into_iter()
            .zip(&mine)
    {
        match result {
            Ok(_) => {
                done += unfinished
                    .iter()
                    .filter(|r| r.partner == row.partner && r.isa13 == row.isa13)
                    .count();
            }
            Err(e) => {
                tracing::error!(key = %row.key, error = %e, "a document whose writer is gone could not be finished; the next pass tries again")
            }
        }
    }
    Ok(done)
}

/// The set (GS06, ST02) of our interchange `old`, alone in an interchange of its own with new
/// numbers and the time `at_ms`: (its file name, its bytes).
fn renumbered(
    old: &[u8],
    (old_gs06, old_st02): (u32, &str),
    isa13: u32,
    gs06: u32,
    at_ms: i64,
) -> Result<(String, Vec<u8>), crate::translate::RenderError> {
    let invalid = |problem: &str| crate::translate::RenderError::Invalid {
        place: "the interchange sent".into(),
        problem: problem.into(),
    };
    let mut doc = crate::translate::parse_document_as(
        old,
        crate::x12::Limits::default(),
        crate::translate::Form::Raw,
    )
    .map_err(|e| invalid(&e.to_string()))?;
    let when = DateTime::<Utc>::from_timestamp_millis(at_ms).unwrap_or_default();
    let ic = doc
        .interchanges
        .first_mut()
        .ok_or_else(|| invalid("no interchange"))?;
    let simple = |v: String| crate::translate::JsonElement::Simple(v);
    let is = |e: Option<&crate::translate::JsonElement>, v: &str| matches!(e, Some(crate::translate::JsonElement::Simple(s)) if s == v);
    // Of an interchange of several of our documents, only this one's set is sent again.
    ic.groups.retain(|g| is(g.gs.get(5), &old_gs06.to_string()));
    for group in &mut ic.groups {
        group.sets.retain(|set| is(set.st.get(1), old_st02));
        for set in &mut group.sets {
            for e in [
                set.st.get_mut(1),
                set.se.as_mut().and_then(|se| se.get_mut(1)),
            ]
            .into_iter()
            .flatten()
            {
                *e = simple(crate::outbound::ST02.into());
            }
        }
        if let Some(ge01) = group.ge.as_mut().and_then(|ge| ge.first_mut()) {
            *ge01 = simple(group.sets.len().to_string());
        }
    }
    if ic.groups.iter().map(|g| g.sets.len()).sum::<usize>() != 1 {
        return Err(invalid(&format!(
            "no set with GS06 {old_gs06} and ST02 {old_st02} in it"
        )));
    }
    if let Some(iea01) = ic.iea.as_mut().and_then(|iea| iea.first_mut()) {
        *iea01 = simple("1".into());
    }
    let control = format!("{isa13:09}");
    let (receiver, set_id) = {
        let field = |i: usize| ic.isa.get(i).map_or("", |s| s.trim());
        let set = ic
            .groups
            .first()
            .and_then(|g| g.sets.first())
            .and_then(|s| s.st.first())
            .map(|e| match e {
                crate::translate::JsonElement::Simple(s) => s.clone(),
                _ => String::new(),
            })
            .unwrap_or_default();
        (format!("{}:{}", field(6), field(7)), set)
    };
    for (i, v) in [
        (8, when.format("%y%m%d").to_string()),
        (9, when.format("%H%M").to_string()),
        (12, control.clone()),
    ] {
        if let Some(f) = ic.isa.get_mut(i) {
            *f = v;
        }
    }
    for group in &mut ic.groups {
        for (i, v) in [
            (3, when.format("%Y%m%d").to_string()),
            (4, when.format("%H%M").to_string()),
            (5, gs06.to_string()),
        ] {
            if let Some(e) = group.gs.get_mut(i) {
                *e = simple(v);
            }
        }
        if let Some(ge) = group.ge.as_mut().and_then(|ge| ge.get_mut(1)) {
            *ge = simple(gs06.to_string());
        }
    }
    if let Some(iea) = ic.iea.as_mut().and_then(|iea| iea.get_mut(1)) {
        *iea = simple(control);
    }
    let mut bytes = Vec::new();
    crate::translate::render(&doc, &mut bytes)?;
    Ok((file_name(&receiver, isa13, &set_id), bytes))
}

/// The interchange of `row` written (durably, atomically) to its partner's folder: where
/// the file is.
fn write_to_partner(
    config: &Config,
    row: &OutboundRow,
    bytes: &[u8],
    owner: &str,
) -> Result<PathBuf, SendError> {
    let folder = folder_of(config, partner_of(config, row)?);
    crate::outputs::write_atomic(&folder, &row.file, bytes, owner).map_err(|cause| {
        SendError::Write {
            path: folder.join(&row.file),
            cause,
        }
    })
}

/// `resend`: the bytes first sent written again to the partner's folder, recorded; `None`
/// when the key was never sent.
pub fn resend(
    config: &Config,
    registry: &mut Registry,
    key: &str,
) -> Result<Option<(OutboundRow, PathBuf)>, SendError> {
    let Some((row, bytes)) = registry.outbound(key)? else {
        return Ok(None);
    };
    if registry.outbound_moved(&row.partner, row.isa13)? > 0 {
        return Err(SendError::Refused(Refusal::Set(format!(
            "{key}: its interchange (ISA13 {:09}) also carried documents sent since with new \
             numbers; written again, it would give the partner those twice: `x12gate resend \
             --new-numbers {key}` sends this one alone",
            row.isa13
        ))));
    }
    let owner = crate::owner::Owner::current().id();
    let path = write_to_partner(config, &row, &bytes, &owner)?;
    let row = registry
        .outbound_resent(key, "same bytes")?
        .map(|(r, _)| r)
        .unwrap_or(row);
    Ok(Some((row, path)))
}

/// A result as the ERP reads it, on the command line (`send --json`) and over HTTP: the
/// HTTP status it maps to (201 sent, 200 replayed, 409 conflict, 422 refused, 503 busy, 500
/// otherwise) and the JSON body, with the key, our numbers and file (`result_ref`), and
/// the findings of a refused document in `validate --json`'s shape.
pub fn answer(result: &Result<Sent, SendError>, now_ms: i64) -> (u16, serde_json::Value) {
    use serde_json::json;
    match result {
        Ok(sent) => {
            let r = &sent.row;
            (
                if sent.replayed { 200 } else { 201 },
                json!({
                    "key": r.key,
                    "partner": r.partner,
                    "set": r.set_id,
                    "document": r.document_id,
                    "state": if sent.replayed { "replayed" } else { "sent" },
                    "replayed": sent.replayed,
                    "result_ref": result_ref(r, &sent.path),
                    "ack": r.ack_state(now_ms),
                    "idempotency_key": r.idempotency_key,
                    "warnings": sent.warnings,
                }),
            )
        }
        Err(e) => {
            let (status, state, key) = match e {
                SendError::Conflict { key, .. } => (409, "conflict", Some(key.as_str())),
                SendError::Refused(_) => (422, "refused", None),
                SendError::Busy { key, .. } => (503, "busy", Some(key.as_str())),
                _ => (500, "failed", None),
            };
            let findings = match e {
                SendError::Refused(r) => r.findings(),
                _ => &[],
            };
            (
                status,
                json!({
                    "key": key,
                    "state": state,
                    "error": e.to_string(),
                    "findings": findings,
                }),
            )
        }
    }
}

/// Our numbers and the file of a document sent: what the ERP stores as its reference.
pub fn result_ref(row: &OutboundRow, path: &std::path::Path) -> serde_json::Value {
    serde_json::json!({
        "isa13": format!("{:09}", row.isa13),
        "gs06": row.gs06.to_string(),
        "st02": row.st02,
        "file": path.display().to_string(),
        "sent": row.sent_ms.map(crate::time::rfc3339),
    })
}

/// Where one of our documents stands, as `sent --json` prints it and `GET /api/outbound/KEY`
/// answers: its key, state, the partner's acknowledgment (as of `now`) and `result_ref`.
pub fn status(config: &Config, row: &OutboundRow, now_ms: i64) -> serde_json::Value {
    let folder = config
        .partners
        .iter()
        .find(|p| p.key() == row.partner)
        .map_or_else(|| config.gateway.outbox.clone(), |p| folder_of(config, p));
    serde_json::json!({
        "key": row.key,
        "partner": row.partner,
        "set": row.set_id,
        "document": row.document_id,
        "state": row.state,
        "ack": row.ack_state(now_ms),
        "ack_kind": row.ack_kind,
        "ack_detail": row.ack_detail,
        "ack_received": row.ack_ms.map(crate::time::rfc3339),
        "ack_late": row.ack_late,
        "ack_due": row.ack_due_ms.map(crate::time::rfc3339),
        "acks_seen": row.acks_seen,
        "resends": row.resends,
        "idempotency_key": row.idempotency_key,
        "result_ref": result_ref(row, &folder.join(&row.file)),
    })
}

/// What one pass over the outbound inbox did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Drained {
    pub sent: usize,
    pub replayed: usize,
    pub refused: usize,
    /// Left for the next pass: still being written, or an operational failure (logged).
    pub left: usize,
}

/// Files taken from the outbound inbox in one pass, oldest name first: the rest wait for
/// the next pass, so one large drop never holds the watcher's other work.
const FILES_PER_PASS: usize = 200;

/// Where a file of the outbound inbox goes once decided: `sent/` (sent or replayed, with
/// `NAME.result.json`, the answer `send --json` prints) or `refused/` (with
/// `NAME.reason.json`).
pub const SENT_FOLDER: &str = "sent";
pub const REFUSED_FOLDER: &str = "refused";

/// One pass over `[gateway] outbound_inbox`: each JSON file settled for `settle` (the ERP
/// writes it in place) is sent as `x12gate send` sends it, then moved with its answer. A
/// file sent twice (a crash between the send and the move, two watchers on one folder) is
/// answered from the first sending: exactly once holds by the document's key, not the file.
/// The pass's documents are sent as one batch of `send`; those to a partner with
/// `outbound_batch_ms` wait, all of one envelope together, until the oldest of them settled
/// that long ago, then share an interchange.
pub fn drain_folder(
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    folder: &std::path::Path,
    settle: Duration,
) -> Drained {
    let mut done = Drained::default();
    let Ok(entries) = std::fs::read_dir(folder) else {
        return done;
    };
    let now = std::time::SystemTime::now();
    // Each settled file, with how long ago it was last written.
    let mut files: Vec<(PathBuf, Duration)> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && name.ends_with(".json")
        })
        .filter_map(|e| {
            let m = e.metadata().ok().filter(std::fs::Metadata::is_file)?;
            let age = now.duration_since(m.modified().ok()?).ok()?;
            (age >= settle).then(|| (e.path(), age))
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    done.left = files.len().saturating_sub(FILES_PER_PASS);
    let mut ready: Vec<(PathBuf, Prepared)> = Vec::new();
    // A partner's documents wait for others to share their interchange until the oldest
    // has waited its outbound_batch_ms.
    let mut waited: Vec<(crate::outbound::EnvelopeKey, Duration)> = Vec::new();
    for (file, age) in files.into_iter().take(FILES_PER_PASS) {
        let json = match read_bounded(&file) {
            Ok(json) => json,
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "an outbound document could not be read; trying again later");
                done.left += 1;
                continue;
            }
        };
        match crate::outbound::prepare(config, schemas, &json, None) {
            Ok(p) => {
                let key = p.envelope_key();
                match waited.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, oldest)) => *oldest = (*oldest).max(age),
                    None => waited.push((key, age)),
                }
                ready.push((file, p));
            }
            Err(r) => answer_file(&file, folder, &Err(SendError::Refused(r)), &mut done),
        }
    }
    ready.retain(|(_, p)| {
        let wait = Duration::from_millis(p.partner.outbound.batch_ms);
        let key = p.envelope_key();
        let due = waited
            .iter()
            .any(|(k, oldest)| *k == key && *oldest >= wait);
        done.left += usize::from(!due);
        due
    });
    // A batch of `send` per envelope: one partner's unwritable folder (or a document that
    // does not render) holds back only the files of that partner.
    let mut envelopes: Vec<(crate::outbound::EnvelopeKey, Vec<&(PathBuf, Prepared)>)> = Vec::new();
    for r in &ready {
        let key = r.1.envelope_key();
        match envelopes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, files)) => files.push(r),
            None => envelopes.push((key, vec![r])),
        }
    }
    for (_, files) in envelopes {
        let documents: Vec<&Prepared> = files.iter().map(|(_, p)| p).collect();
        match send_all(config, registry, &documents, &mut Spent::default()) {
            Ok(results) => {
                for ((file, _), result) in files.iter().zip(results) {
                    answer_file(file, folder, &result, &mut done);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "outbound documents were not sent; trying again later");
                done.left += files.len();
            }
        }
    }
    done
}

/// A file of the outbound inbox decided: moved with its answer, and counted.
fn answer_file(
    file: &std::path::Path,
    folder: &std::path::Path,
    result: &Result<Sent, SendError>,
    done: &mut Drained,
) {
    let (_, answer) = answer(result, crate::time::now_ms());
    let to = match result {
        Ok(s) if s.replayed => {
            done.replayed += 1;
            SENT_FOLDER
        }
        Ok(_) => {
            done.sent += 1;
            SENT_FOLDER
        }
        Err(SendError::Refused(_) | SendError::Conflict { .. }) => {
            done.refused += 1;
            tracing::warn!(file = %file.display(), answer = %answer, "an outbound document was refused");
            REFUSED_FOLDER
        }
        Err(e) => {
            tracing::error!(file = %file.display(), error = %e, "an outbound document was not sent; trying again later");
            done.left += 1;
            return;
        }
    };
    if let Err(e) = place(file, &folder.join(to), &answer, to == SENT_FOLDER) {
        tracing::warn!(file = %file.display(), error = %e, "an outbound document was decided but not moved; the next pass answers it again");
    }
}

/// The file moved into `to` with its answer beside it (written first, so a file found there
/// always has one).
fn place(
    file: &std::path::Path,
    to: &std::path::Path,
    answer: &serde_json::Value,
    sent: bool,
) -> std::io::Result<()> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let suffix = if sent { "result.json" } else { "reason.json" };
    let owner = crate::owner::Owner::current().id();
    crate::outputs::write_atomic(
        to,
        format!("{name}.{suffix}"),
        answer.to_string().as_bytes(),
        &owner,
    )?;
    std::fs::rename(file, to.join(&name))
}

/// A file of at most [`crate::outbound::MAX_REQUEST_BYTES`] and one byte (so that a larger
/// one is refused as too large, not cut).
fn read_bounded(file: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(file)?
        .take(crate::outbound::MAX_REQUEST_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}
