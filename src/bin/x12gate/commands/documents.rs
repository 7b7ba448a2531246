//! Business documents: `documents` (list, `release`, `discard`) and `scan` (old archives).

use std::io::Write;
use std::path::PathBuf;

use x12gate::config::Config;
use x12gate::registry::{Delivery, DocumentRow};
use x12gate::scan::Scan;

use super::{definitions, local_time, open_registry};
use crate::args::DocumentsAction;
use crate::exit::{self, registry_failure, Failure};

/// Which documents `documents` lists.
pub struct Listing {
    pub held: bool,
    pub waiting: bool,
    pub all: bool,
    pub key: Option<String>,
    pub interchange: Option<String>,
    pub json: bool,
}

/// `documents`: list (held and waiting by default), or release or discard one key's.
pub fn documents(
    config: &Config,
    action: Option<DocumentsAction>,
    listing: &Listing,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let mut registry = open_registry(config)?;
    let op = |e: x12gate::pipeline::ProcessError| Failure::Operational(e.into());
    match action {
        Some(DocumentsAction::Release { key }) => {
            let key = super::document_key(&registry, &key)?;
            let (done, sent) = x12gate::desk::release_documents(config, &mut registry, &key)
                .map_err(exit::desk_failure)?;
            if done.is_empty() {
                return Err(nothing_held(&key));
            }
            if let Some(sent) = sent.filter(|s| s.attempts() > 0) {
                super::deliveries::summary(&sent, None, false, out)?;
            }
            for d in done {
                writeln!(
                    out,
                    "released {} (interchange {}, ST02 {}) as delivery {}: {}",
                    x12gate::text::printable(&d.key),
                    x12gate::text::printable(&d.interchange),
                    x12gate::text::printable(&d.st02),
                    d.sequence,
                    d.output
                )?;
            }
            Ok(exit::OK)
        }
        Some(DocumentsAction::Discard { key }) => {
            let key = super::document_key(&registry, &key)?;
            let n = x12gate::pipeline::discard_documents(&mut registry, &key).map_err(op)?;
            if n == 0 {
                return Err(nothing_held(&key));
            }
            writeln!(
                out,
                "discarded {n} document(s) of {}",
                x12gate::text::printable(&key)
            )?;
            Ok(exit::OK)
        }
        Some(DocumentsAction::Body { key, id }) => {
            let key = super::document_key(&registry, &key)?;
            print_body(config, &registry, &key, id, out)
        }
        None => list(&registry, listing, out),
    }
}

/// `documents` without an action: the documents of a key, of an interchange, or those
/// held, waiting or pending.
fn list(
    registry: &x12gate::registry::Registry,
    listing: &Listing,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let keys = listing
        .key
        .as_deref()
        .map(|k| super::document_keys(registry, k))
        .transpose()?;
    let wanted = |r: &DocumentRow| keys.as_ref().is_none_or(|k| k.contains(&r.key));
    if let Some(interchange) = &listing.interchange {
        let interchange = super::interchange_key(registry, interchange)?;
        let rows = registry
            .documents_of(&interchange)
            .map_err(registry_failure)?;
        let mut shown = 0;
        for r in rows.iter().filter(|r| wanted(r)) {
            print_row(r, listing.json, out)?;
            shown += 1;
        }
        if shown == 0 {
            say!(
                "INFO",
                "x12gate: interchange {interchange} carried no such document"
            );
        }
        return Ok(exit::OK);
    }
    let deliveries: Vec<Delivery> = if listing.all || listing.key.is_some() {
        Vec::new()
    } else {
        let mut d = Vec::new();
        if listing.held || !listing.waiting {
            d.push(Delivery::Held);
        }
        if listing.waiting || !listing.held {
            d.push(Delivery::Parked);
        }
        if !listing.held && !listing.waiting {
            d.push(Delivery::Pending);
        }
        d
    };
    let mut rows = Vec::new();
    match &keys {
        Some(keys) => {
            for k in keys {
                rows.extend(
                    registry
                        .documents(&deliveries, Some(k))
                        .map_err(registry_failure)?,
                );
            }
        }
        None => {
            rows = registry
                .documents(&deliveries, None)
                .map_err(registry_failure)?
        }
    }
    for r in &rows {
        print_row(r, listing.json, out)?;
    }
    if rows.is_empty() {
        say!(
            "INFO",
            "x12gate: no document {}",
            match (listing.all, listing.held, listing.waiting) {
                (true, ..) => "recorded",
                (_, true, _) => "held",
                (_, _, true) => "waiting for its original",
                _ => "held, waiting or pending",
            }
        );
    }
    Ok(exit::OK)
}

/// `documents body KEY [--id ID]`: the JSON kept of KEY's latest sighting (or of `id`).
fn print_body(
    config: &Config,
    registry: &x12gate::registry::Registry,
    key: &str,
    id: Option<i64>,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let rows = registry
        .documents(&[], Some(key))
        .map_err(registry_failure)?;
    let Some(row) = rows.iter().rev().find(|r| id.is_none_or(|id| r.id == id)) else {
        return Err(Failure::Usage(anyhow::anyhow!(
            "{}: no sighting of this document key{} (x12gate documents --all lists them)",
            x12gate::text::printable(key),
            id.map(|id| format!(" has id {id}")).unwrap_or_default()
        )));
    };
    let kept = registry
        .document_bodies(&[row.id])
        .map_err(registry_failure)?
        .into_iter()
        .next()
        .flatten();
    match kept {
        Some(Ok(body)) => out.write_all(&body)?,
        Some(Err(why)) => return Err(Failure::Operational(anyhow::anyhow!(why))),
        // Recorded before the registry kept documents: its file, if still there.
        None => match row.output.as_deref().map(|name| {
            let g = &config.gateway;
            let dir = match row.usage {
                x12gate::document::Usage::Test => &g.test_out,
                x12gate::document::Usage::Production => &g.out,
            };
            std::fs::read(dir.join(name))
        }) {
            Some(Ok(body)) => out.write_all(&body)?,
            _ => {
                return Err(Failure::Usage(anyhow::anyhow!(
                    "{}: sighting {} has no JSON kept (a duplicate keeps none; one recorded before version 11 of the registry only had its file)",
                    x12gate::text::printable(key),
                    row.id
                )))
            }
        },
    }
    Ok(exit::OK)
}

/// A release or discard of a key with nothing held or waiting: the operator's mistake.
fn nothing_held(key: &str) -> Failure {
    Failure::Usage(anyhow::anyhow!(
        "{}: no held or waiting document has this key (x12gate documents lists them)",
        x12gate::text::printable(key)
    ))
}

fn print_row(r: &DocumentRow, json: bool, out: &mut impl Write) -> Result<(), Failure> {
    if json {
        let v = serde_json::to_value(r).map_err(|e| Failure::Operational(e.into()))?;
        writeln!(out, "{v}")?;
        return Ok(());
    }
    writeln!(
        out,
        "{} {:<40} {:<9} {:<9} {} ST02 {}{}{}",
        local_time(r.seen_ms),
        x12gate::text::printable(&r.key),
        r.disposition,
        r.delivery,
        x12gate::text::printable(&r.interchange),
        x12gate::text::printable(&r.st02),
        r.duplicate_of
            .as_deref()
            .map(|d| format!(" (first in {})", x12gate::text::printable(d)))
            .unwrap_or_default(),
        r.output
            .as_deref()
            .map(|o| format!(" -> {}", x12gate::text::printable(o)))
            .unwrap_or_default(),
    )?;
    if let Some(why) = r.undelivered {
        writeln!(out, "  delivered nowhere: {why}")?;
    }
    Ok(())
}

/// `scan`: every document key seen in more than one interchange under `paths`.
pub fn scan(
    config: &Config,
    paths: &[PathBuf],
    json: bool,
    backfill: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let mut registry = if backfill {
        Some(x12gate::setup::open_registry(config).map_err(registry_failure)?)
    } else {
        None
    };
    let found = x12gate::scan::scan(paths, config, definitions(Some(config))?, registry.as_mut())
        .map_err(|e| match e {
        x12gate::scan::ScanError::Walk { .. } | x12gate::scan::ScanError::NotRegular { .. } => {
            Failure::Usage(e.into())
        }
        x12gate::scan::ScanError::Registry(e) => registry_failure(e),
    })?;
    if let Some(registry) = registry.as_mut() {
        note_backfill(registry, paths, &found)?;
    }
    if json {
        scan_json(&found, out)?;
    } else {
        scan_text(&found, backfill, out)?;
    }
    Ok(if found.repeated.is_empty() {
        exit::OK
    } else {
        exit::FINDINGS
    })
}

/// What a backfill added, in the history.
fn note_backfill(
    registry: &mut x12gate::registry::Registry,
    paths: &[PathBuf],
    found: &Scan,
) -> Result<(), Failure> {
    let detail = serde_json::json!({
        "paths": paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "interchanges": found.backfilled_interchanges,
        "documents": found.backfilled_documents,
    })
    .to_string();
    registry
        .batch(|b| {
            b.record_note(
                x12gate::registry::EventKind::Backfilled,
                None,
                None,
                None,
                &detail,
            )
        })
        .map_err(registry_failure)?;
    Ok(())
}

/// `scan --json`: each repeated key, each partner's summary, then the totals.
fn scan_json(found: &Scan, out: &mut impl Write) -> Result<(), Failure> {
    for r in &found.repeated {
        writeln!(out, "{}", serde_json::json!({ "repeated": r }))?;
    }
    for t in &found.summary {
        writeln!(out, "{}", serde_json::json!({ "summary": t }))?;
    }
    writeln!(
        out,
        "{}",
        serde_json::json!({ "files": found.files, "interchanges": found.interchanges,
            "documents": found.documents, "unreadable": found.unreadable,
            "backfilled_interchanges": found.backfilled_interchanges,
            "backfilled_documents": found.backfilled_documents })
    )?;
    Ok(())
}

/// `scan`: each repeated key with its sightings, the summary table, then the totals.
fn scan_text(found: &Scan, backfill: bool, out: &mut impl Write) -> Result<(), Failure> {
    for r in &found.repeated {
        writeln!(
            out,
            "{} {} ({} sightings)",
            r.kind.to_uppercase(),
            x12gate::text::printable(&r.key),
            r.sightings.len()
        )?;
        for s in &r.sightings {
            writeln!(
                out,
                "  {} byte {} interchange {} ST02 {} content {}",
                x12gate::text::printable(&s.file),
                s.offset,
                x12gate::text::printable(&s.interchange),
                x12gate::text::printable(&s.st02),
                s.fingerprint.get(..12).unwrap_or_default()
            )?;
        }
    }
    writeln!(
        out,
        "partner              set  documents  keys  duplicates  conflicts"
    )?;
    for t in &found.summary {
        writeln!(
            out,
            "{:<20} {:<4} {:>9}  {:>4}  {:>10}  {:>9}",
            x12gate::text::printable(&t.partner),
            t.set,
            t.documents,
            t.keys,
            t.duplicates,
            t.conflicts
        )?;
    }
    writeln!(
        out,
        "{} file(s), {} interchange(s), {} document(s){}",
        found.files,
        found.interchanges,
        found.documents,
        if backfill {
            format!(
                "; backfilled {} interchange(s) and {} document(s)",
                found.backfilled_interchanges, found.backfilled_documents
            )
        } else {
            String::new()
        }
    )?;
    for (file, why) in &found.unreadable {
        say!(
            "WARN",
            "x12gate: {}: not read: {why}",
            x12gate::text::printable(file)
        );
    }
    Ok(())
}
