//! Step (4) of a round: every output written to a temporary file, fsynced, renamed into
//! place and its folder fsynced (`outputs::write_many`), each report told where; the later
//! runs of a large interchange's documents (decided and written a run at a time); and step
//! (6), the acknowledgments placed once their decisions are recorded.

use std::path::Path;

use crate::pipeline::documents::Body;
use crate::pipeline::flight::{Content, Item, Kept, Output, Round, Writer};
use crate::pipeline::ProcessError;
use crate::registry::{Registry, StoredAck};
use crate::{input, outputs};

use super::decide::{next_run, run_files};
use super::Prepared;

/// The acknowledgments in `acks` listed in their interchanges' reports (the completions
/// record where they go), and those after the first `replays` (already stored) kept for
/// their completions to store, by item.
pub(super) fn to_store(
    r: &Round<'_>,
    acks: &mut [Output],
    replays: usize,
    items: &mut [Item<'_>],
) -> std::collections::HashMap<usize, Vec<Kept>> {
    let mut stored: std::collections::HashMap<usize, Vec<Kept>> = std::collections::HashMap::new();
    for (n, a) in acks.iter_mut().enumerate() {
        if let (true, Some(isa13)) = (n >= replays, a.isa13) {
            a.name = apart(&r.config.gateway.outbox, &a.name, isa13);
        }
        let path = a.dir.path(&r.config.gateway).join(&a.name);
        let path = std::path::absolute(&path).unwrap_or(path);
        items[a.item].report.acks.push(path.display().to_string());
        let (true, Some(kind)) = (n >= replays, a.ack.clone()) else {
            continue;
        };
        let kept = match &a.content {
            Content::Made(made) => Kept::Made {
                kind,
                path: a.name.clone(),
                made: made.clone(),
            },
            Content::Bytes(bytes) => Kept::Held(StoredAck {
                kind,
                path: a.name.clone(),
                bytes: bytes.clone(),
            }),
            // invariant: an acknowledgment's content is made or held, never a translation.
            Content::Translation { .. } => continue,
        };
        stored.entry(a.item).or_default().push(kept);
    }
    stored
}

/// `name` in the outbox, or when an earlier decision's acknowledgment is there under it (a
/// reprocess, a conflicting content refused again) the same name with our ISA13 before its
/// kind, so that a second acknowledgment never replaces the first before it was sent. An
/// attempt's own acknowledgment is never there before its completion, so a redo keeps the
/// name it was recorded with.
pub(super) fn apart(outbox: &Path, name: &str, isa13: u32) -> String {
    if std::fs::symlink_metadata(outbox.join(name)).is_err() {
        return name.to_string();
    }
    match name.strip_suffix(".x12").and_then(|n| n.rsplit_once('.')) {
        Some((stem, kind)) => format!("{stem}.{isa13:09}.{kind}.x12"),
        None => format!("{name}.{isa13:09}"),
    }
}

/// Step (6): the acknowledgments of decisions recorded placed in the outbox, durably. A
/// failure here leaves the decisions recorded: the rerun finds them duplicates and places
/// their stored acknowledgments, under the same names.
pub(super) fn place_acks(
    r: &Round<'_>,
    acks: Vec<Output>,
    items: &[Item<'_>],
) -> Result<(), ProcessError> {
    if acks.is_empty() {
        return Ok(());
    }
    let writers: Vec<Writer<'_>> = acks
        .iter()
        .map(|a| -> Writer<'_> {
            match &a.content {
                Content::Made(made) => {
                    let it = &items[a.item];
                    Box::new(move |out| made.write(&it.ic, &r.config.gateway, out))
                }
                Content::Bytes(bytes) => Box::new(move |out| out.write_all(bytes)),
                Content::Translation { .. } => Box::new(|_| Ok(())),
            }
        })
        .collect();
    write_each(r, &acks, &writers).map_err(|e| ProcessError::Io {
        path: e.path.display().to_string(),
        cause: e.cause,
    })?;
    Ok(())
}

/// Each output written by its writer, durably, into its folder of the gateway.
fn write_each(
    r: &Round<'_>,
    these: &[Output],
    writers: &[Writer<'_>],
) -> Result<Vec<std::path::PathBuf>, outputs::WriteError> {
    let files: Vec<(&Path, &str, &outputs::Content<'_>)> = these
        .iter()
        .zip(writers)
        .map(|(o, write)| {
            (
                o.dir.path(&r.config.gateway),
                o.name.as_str(),
                write.as_ref(),
            )
        })
        .collect();
    outputs::write_many(&files, &r.options.owner)
}

/// Step (4), first: the JSON of every document of the run just decided made, on every
/// core, for the transaction that keeps it (the next run's, or the completion's); each
/// report told where the files of those bound for `out/` will be.
pub(super) fn make_documents(
    r: &Round<'_>,
    prepared: &mut [Prepared],
    items: &mut [Item<'_>],
) -> Result<(), ProcessError> {
    {
        let items: &[Item<'_>] = items;
        let mut to_make: Vec<(&Item<'_>, &mut Body)> = prepared
            .iter_mut()
            .filter(|p| !p.lost)
            .flat_map(|p| {
                let it = &items[p.item];
                p.documents.named.iter_mut().map(move |n| (it, &mut n.body))
            })
            .filter(|(_, body)| matches!(body, Body::ToMake { .. }))
            .collect();
        let threads = crate::cores::available().clamp(1, to_make.len().max(1));
        let chunk = to_make.len().div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            let handles: Vec<_> = to_make
                .chunks_mut(chunk)
                .map(|run| {
                    scope.spawn(move || run.iter_mut().try_for_each(|(it, body)| make(r, it, body)))
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(ProcessError::Translate("a document maker panicked".into()))
                })
            })
        })?;
    }
    for p in prepared.iter().filter(|p| !p.lost) {
        let report = &mut items[p.item].report;
        for d in &p.documents.named {
            if report.outputs.len() >= crate::pipeline::documents::REPORTED {
                break;
            }
            if let Some(path) =
                crate::pipeline::documents::out_file(r.config, &p.decision.partner, d)
            {
                report.outputs.push(path);
            }
        }
    }
    Ok(())
}

/// One document's JSON, made from its set.
fn make(r: &Round<'_>, it: &Item<'_>, body: &mut Body) -> Result<(), ProcessError> {
    let Body::ToMake {
        group,
        set,
        part,
        decided,
    } = body
    else {
        return Ok(());
    };
    let mut bytes = Vec::new();
    crate::pipeline::documents::write_document(
        r.schemas,
        it,
        (*group, *set, part.as_ref()),
        decided,
        &mut bytes,
    )
    .map_err(|cause| ProcessError::Io {
        path: it.report.file.clone(),
        cause,
    })?;
    // Held until its transaction, packed as it will be kept.
    *body = Body::Made(crate::registry::Packed::pack(&bytes));
    Ok(())
}

/// Step (4): every translation written durably, each report told where.
pub(super) fn write_all(
    r: &Round<'_>,
    writes: Vec<Output>,
    items: &mut [Item<'_>],
) -> Result<(), ProcessError> {
    // A file changed since it was first read fails alone (an output that cannot be written
    // stops the run): it is looked at before its translation reads it again.
    for w in &writes {
        if let (Content::Translation { .. }, Some(large)) = (&w.content, items[w.item].large) {
            large.unchanged()?;
        }
    }
    let written = {
        let items: &[Item<'_>] = items;
        let writers: Vec<Writer<'_>> = writes
            .iter()
            .map(|w| -> Writer<'_> {
                match &w.content {
                    Content::Bytes(bytes) => Box::new(move |out| out.write_all(bytes)),
                    Content::Made(made) => {
                        let it = &items[w.item];
                        Box::new(move |out| made.write(&it.ic, &r.config.gateway, out))
                    }
                    Content::Translation { form, keep } => {
                        let it = &items[w.item];
                        Box::new(move |out| {
                            let keep = |g: usize, s: usize| {
                                keep.get(g).and_then(|k| k.get(s)).copied().unwrap_or(false)
                            };
                            if let Some(large) = it.large {
                                return large.write_translation(*form, r.schemas, &keep, out);
                            }
                            crate::translate::write_interchange_document_with(
                                &it.ic,
                                it.utf8,
                                *form,
                                Some(r.schemas),
                                &keep,
                                out,
                            )
                            .map_err(|e| match e {
                                crate::translate::ParseError::Io(e) => e,
                                e => std::io::Error::other(format!("translating: {e}")),
                            })
                        })
                    }
                }
            })
            .collect();
        write_each(r, &writes, &writers)
    };
    let written = written.map_err(|outputs::WriteError { path, cause }| {
        // The file read again for a translation is not the one read first: it fails alone.
        if cause.get_ref().is_some_and(|e| e.is::<input::InputError>()) {
            if let Some(Ok(e)) = cause
                .into_inner()
                .map(|e| e.downcast::<input::InputError>())
            {
                return ProcessError::Input(*e);
            }
            return ProcessError::Translate("a file read again failed".into());
        }
        // The file it failed on names its folder (`out/` full, not the outbox).
        ProcessError::Io {
            path: path.display().to_string(),
            cause,
        }
    })?;
    for (w, path) in writes.into_iter().zip(written) {
        let path = path.display().to_string();
        let report = &mut items[w.item].report;
        match w.content {
            // The interchange's translation first (with a large interchange's last run, after
            // thousands of documents), then the first documents' files.
            Content::Translation { .. } => report.outputs.insert(0, path),
            _ if report.outputs.len() < crate::pipeline::documents::REPORTED => {
                report.outputs.push(path)
            }
            _ => {}
        }
    }
    Ok(())
}

/// Steps (3) and (4) again while owned interchanges have documents left to decide, a run at
/// a time, in file order (a run may span interchanges): in one transaction the leases of
/// every claim of the round still ours are renewed (the fence; they all wait for the last
/// run), the runs written before are handed over, and the next run's documents are
/// decided; then its files are written. An interchange whose lease was lost stops there (its
/// takeover decides the rest again, finding what was recorded). The acknowledgments written
/// go into `acks`, to place once the completion is recorded.
pub(super) fn more_runs(
    r: &Round<'_>,
    prepared: &mut [Prepared],
    items: &mut [Item<'_>],
    registry: &mut Registry,
    acks: &mut Vec<Output>,
) -> Result<(), ProcessError> {
    while prepared
        .iter()
        .any(|p| !p.lost && p.progress.next.is_some())
    {
        if r.options.stop.abandoned() {
            return Err(ProcessError::Interrupted);
        }
        registry.batch(|b| {
            let held: Vec<&str> = prepared
                .iter()
                .filter(|p| !p.lost)
                .map(|p| items[p.item].key.as_str())
                .collect();
            let mut renewed = b
                .renew_many(&held, &r.options.owner, r.lease_ms)?
                .into_iter()
                .map(|r| r.is_some());
            let mut budget = r.run_documents;
            for p in prepared.iter_mut().filter(|p| !p.lost) {
                if !renewed.next().unwrap_or(false) {
                    p.lost = true;
                    continue;
                }
                let it = &items[p.item];
                // Handed over once: what the completion hands over is what is left.
                let written = std::mem::take(&mut p.documents);
                crate::pipeline::documents::hand_over_run(
                    b,
                    r.config,
                    &r.options.owner,
                    &it.key,
                    &written,
                )?;
                if budget > 0 && p.progress.next.is_some() {
                    budget = next_run(b, r, p, it, budget)?;
                    p.files = run_files(p, &it.ic);
                }
            }
            Ok::<_, ProcessError>(())
        })?;
        let (files, last_acks): (Vec<Output>, Vec<Output>) = prepared
            .iter_mut()
            .filter(|p| !p.lost)
            .flat_map(|p| std::mem::take(&mut p.files))
            .partition(|o| o.ack.is_none());
        make_documents(r, prepared, items)?;
        write_all(r, files, items)?;
        acks.extend(last_acks);
        fail::fail_point!("run.after", |_| std::process::abort());
    }
    Ok(())
}
