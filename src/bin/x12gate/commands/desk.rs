//! The EDI desk's commands: `show`, `reprocess`, and `claims` (list, and `release`).

use std::io::Write;
use std::path::Path;

use x12gate::config::Config;
use x12gate::desk::Shown;
use x12gate::registry::Registry;

use super::{definitions, local_time, open_registry, preflight};
use crate::args::ClaimsAction;
use crate::exit::{self, desk_failure, registry_failure, Failure};

/// `show`: one interchange whole.
pub fn show(config: &Config, key: &str, json: bool, out: &mut impl Write) -> Result<u8, Failure> {
    let registry = open_registry(config)?;
    // One of our own documents (`send`): its key names us, the partner and the document.
    if let Some((row, _)) = registry.outbound(key).map_err(registry_failure)? {
        return super::outbound::show(config, &row, json, out);
    }
    let key = x12gate::desk::resolve(&registry, key).map_err(desk_failure)?;
    let s = x12gate::desk::show(config, definitions(Some(config))?, &registry, &key)
        .map_err(desk_failure)?;
    if json {
        show_json(&s, out)?;
        return Ok(exit::OK);
    }
    show_record(&s, out)?;
    show_acks(&s, out)?;
    for o in &s.record.outputs {
        writeln!(out, "  output: {o}")?;
    }
    // Deliveries by document key, once (an interchange of many documents has as many).
    let mut sent: std::collections::HashMap<&str, Vec<&x12gate::registry::DeliveryRow>> =
        std::collections::HashMap::new();
    for r in &s.deliveries {
        sent.entry(r.key.as_str()).or_default().push(r);
    }
    for d in &s.documents {
        writeln!(
            out,
            "  document {} ST02 {}: {}, {}{}{}",
            x12gate::text::printable(&d.key),
            x12gate::text::printable(&d.st02),
            d.disposition,
            d.delivery,
            d.duplicate_of
                .as_deref()
                .map(|i| format!(" (first in {})", x12gate::text::printable(i)))
                .unwrap_or_default(),
            d.undelivered
                .map(|why| format!(" (delivered nowhere: {why})"))
                .unwrap_or_default()
        )?;
        for r in sent.get(d.key.as_str()).into_iter().flatten() {
            writeln!(
                out,
                "    to {}: {} after {} attempt(s){}{}",
                r.destination,
                r.state,
                r.attempts,
                r.last_status
                    .as_deref()
                    .map(|st| format!(", last {}", x12gate::text::printable(st)))
                    .unwrap_or_default(),
                r.result_ref
                    .as_deref()
                    .map(|x| format!(", ref {}", x12gate::text::printable(x)))
                    .unwrap_or_default()
            )?;
        }
    }
    if s.documents_more > 0 {
        writeln!(
            out,
            "  and {} more documents (x12gate documents --interchange {})",
            s.documents_more,
            x12gate::text::printable(&s.record.key)
        )?;
    }
    let l = &s.layers;
    let acknowledged = l
        .acknowledged
        .as_ref()
        .map_or("-".to_string(), ToString::to_string);
    let of_first = if l.documents_more > 0 {
        format!(" (of the first {})", s.documents.len())
    } else {
        String::new()
    };
    writeln!(
        out,
        "  layers: received {}; acknowledged {acknowledged}; delivered {}/{}{of_first}",
        l.received.as_deref().unwrap_or("-"),
        l.delivered
            .iter()
            .filter(|d| d.state == "delivered")
            .count(),
        l.delivered
            .iter()
            .filter(|d| d.destination.is_some())
            .count()
    )?;
    writeln!(out, "  history:")?;
    // Each event with the facts it recorded then (the layers above are the state now).
    for e in &s.events {
        writeln!(
            out,
            "    {} {}",
            local_time(e.at_ms),
            x12gate::audit::line(e).trim_end()
        )?;
    }
    Ok(exit::OK)
}

/// `show --json`: the interchange as one object, each event's detail spread into its event.
fn show_json(s: &Shown, out: &mut impl Write) -> Result<(), Failure> {
    let mut v = serde_json::to_value(s).map_err(|e| Failure::Operational(e.into()))?;
    let events: Vec<serde_json::Value> = s
        .events
        .iter()
        .map(|e| {
            let mut d: serde_json::Value =
                serde_json::from_str(&e.detail).unwrap_or_else(|_| serde_json::json!({}));
            if let Some(o) = d.as_object_mut() {
                o.insert("time".into(), local_time(e.at_ms).into());
                o.insert("event".into(), e.event.as_str().into());
            }
            d
        })
        .collect();
    if let Some(o) = v.as_object_mut() {
        o.insert("events".into(), events.into());
    }
    writeln!(out, "{v}")?;
    Ok(())
}

/// `show`'s first lines: the claim and its outcome, who holds it, every content seen, where
/// its file is and what it finds in it now.
fn show_record(s: &Shown, out: &mut impl Write) -> Result<(), Failure> {
    let r = &s.record;
    let outcome = match (&r.disposition, &r.reason) {
        (Some(d), Some(why)) => format!(
            "{d} ({}{why})",
            r.reason_code
                .as_deref()
                .map(|c| format!("{c} "))
                .unwrap_or_default()
        ),
        (Some(d), None) => d.to_string(),
        (None, _) => "-".into(),
    };
    let outcome = x12gate::text::printable(&outcome);
    writeln!(
        out,
        "{}  {}  {outcome}",
        x12gate::text::printable(&r.key),
        r.state
    )?;
    writeln!(
        out,
        "  partner {}, attempts {}, first seen {}, last seen {}",
        r.partner,
        r.attempts,
        local_time(r.first_seen_ms),
        local_time(r.last_seen_ms)
    )?;
    if let Some(h) = &s.holder {
        writeln!(
            out,
            "  held by {h}{}",
            r.lease_expires_ms
                .map(|t| format!(", lease until {}", local_time(t)))
                .unwrap_or_default()
        )?;
    }
    for (attempt, fp, at) in &r.fingerprints {
        writeln!(
            out,
            "  content of attempt {attempt}: {fp} ({})",
            local_time(*at)
        )?;
    }
    match &s.file_now {
        Some(f) => writeln!(out, "  file: {}", f.display())?,
        None => writeln!(
            out,
            "  file: not found (recorded as {})",
            r.file.as_deref().unwrap_or("-")
        )?,
    }
    if !s.findings.is_empty() {
        writeln!(out, "  findings:")?;
        for f in &s.findings {
            writeln!(out, "    {f}")?;
        }
    }
    Ok(())
}

/// `show`'s acknowledgments, as sent: for the interchange, and for other content under its
/// key (conflicts).
fn show_acks(s: &Shown, out: &mut impl Write) -> Result<(), Failure> {
    for a in &s.acks {
        writeln!(
            out,
            "  sent {} {}: our ISA13 {}, GS06 {}",
            a.kind.to_uppercase(),
            a.name,
            a.isa13.as_deref().unwrap_or("-"),
            if a.gs06.is_empty() {
                "-".to_string()
            } else {
                a.gs06.join(", ")
            }
        )?;
        for line in a.text.lines() {
            writeln!(out, "    {}", x12gate::text::printable(line))?;
        }
    }
    for a in &s.conflict_acks {
        writeln!(
            out,
            "  sent TA1 {} for other content (a conflict): our ISA13 {}",
            a.name,
            a.isa13.as_deref().unwrap_or("-")
        )?;
        for line in a.text.lines() {
            writeln!(out, "    {}", x12gate::text::printable(line))?;
        }
    }
    Ok(())
}

/// `reprocess`: rejected interchanges again, each as a new attempt.
pub fn reprocess(
    config: &Config,
    keys: &[String],
    file: Option<&Path>,
    force: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    preflight(config)?;
    let schemas = definitions(Some(config))?;
    let mut registry = open_registry(config)?;
    let options = x12gate::pipeline::ProcessOptions::new(false);
    let mut code = exit::OK;
    for given in keys {
        let key = x12gate::desk::resolve(&registry, given).map_err(desk_failure)?;
        if force {
            say!("WARN", "x12gate: {key}: reprocessing with --force: if it was accepted, the ERP may receive it twice");
        }
        let r =
            x12gate::desk::reprocess(config, schemas, &mut registry, &key, file, force, &options)
                .map_err(desk_failure)?;
        if !r.disposition.is_success() {
            code = exit::FINDINGS;
        }
        if json {
            writeln!(
                out,
                "{}",
                serde_json::to_string(&r).map_err(|e| Failure::Operational(e.into()))?
            )?;
        } else {
            writeln!(
                out,
                "{key}: attempt {} {}{}",
                r.attempt.unwrap_or(0),
                r.disposition.as_str(),
                r.reason
                    .as_ref()
                    .map(|x| format!(" ({x})"))
                    .unwrap_or_default()
            )?;
        }
    }
    Ok(code)
}

/// `rejected resolve FILE|KEY [--note TEXT]`: the file moved to the archive, said on stdout.
pub fn resolve_rejected(
    config: &Config,
    target: &str,
    note: Option<&str>,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let mut registry = open_registry(config)?;
    match x12gate::rejected::resolve(config, &mut registry, target, note) {
        Ok(m) => {
            writeln!(
                out,
                "{} moved to {}{}",
                m.from.display(),
                m.to.display(),
                if m.keys.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", m.keys.join(", "))
                }
            )?;
            Ok(exit::OK)
        }
        Err(e @ x12gate::rejected::RejectedError::Io { .. }) => Err(Failure::Operational(e.into())),
        Err(x12gate::rejected::RejectedError::Registry(e)) => Err(Failure::Operational(e.into())),
        Err(e) => Err(Failure::Usage(e.into())),
    }
}

/// `claims`: the unfinished claims, or `claims release KEY`.
pub fn claims(
    config: &Config,
    action: Option<ClaimsAction>,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let mut registry = open_registry(config)?;
    match action {
        None => list_claims(&registry, json, out),
        Some(ClaimsAction::Release { key, force }) => release(&mut registry, &key, force, out),
    }
}

/// One line (or JSON object) per unfinished claim: its state, holder, lease and age.
fn list_claims(registry: &Registry, json: bool, out: &mut impl Write) -> Result<u8, Failure> {
    use x12gate::owner::describe;
    let op = |e: x12gate::registry::RegistryError| Failure::Operational(e.into());
    let unfinished = registry.unfinished().map_err(op)?;
    if unfinished.is_empty() {
        say!(
            "INFO",
            "x12gate: no unfinished claim: every interchange seen was decided"
        );
    }
    for c in unfinished {
        let holder = c.owner.as_deref().map(describe);
        if json {
            let mut v = serde_json::to_value(&c).map_err(|e| Failure::Operational(e.into()))?;
            if let Some(o) = v.as_object_mut() {
                let age = (x12gate::registry::now_ms() - c.first_seen_ms).max(0) / 1000;
                o.insert("age_seconds".into(), age.into());
                o.insert("holder".into(), holder.into());
                o.insert(
                    "lease_expires".into(),
                    c.lease_expires_ms.map(local_time).into(),
                );
            }
            writeln!(out, "{v}")?;
        } else {
            let age = (x12gate::registry::now_ms() - c.first_seen_ms).max(0) / 1000;
            writeln!(
                out,
                "{:<30} {:<9} attempt {} {} {} since {} (age {}s) {}",
                x12gate::text::printable(&c.key),
                c.state,
                c.attempts,
                holder.unwrap_or_else(|| "no owner".into()),
                c.lease_expires_ms
                    .map(|t| format!("lease until {}", local_time(t)))
                    .unwrap_or_default(),
                local_time(c.first_seen_ms),
                age,
                c.file.as_deref().unwrap_or("-")
            )?;
        }
    }
    Ok(exit::OK)
}

/// `claims release KEY`: the library decides whether the claim may go; this says what it did.
fn release(
    registry: &mut Registry,
    key: &str,
    force: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    use x12gate::desk::Released;
    let key = x12gate::pipeline::typed_key(key);
    match x12gate::desk::release(registry, &key, force).map_err(desk_failure)? {
        Released::AlreadyFailed => {
            writeln!(out, "{key}: already failed; the next attempt takes it over")?;
        }
        Released::From(owner) => writeln!(out, "{key}: released from {owner}")?,
    }
    Ok(exit::OK)
}
