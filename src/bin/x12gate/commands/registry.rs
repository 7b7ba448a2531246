//! The commands on the registry's records: `history`, `stats`, `prune`, `counter`,
//! `metrics` and `backup`.

use std::io::Write;
use std::path::Path;

use x12gate::config::Config;

use super::open_registry;
use crate::args::{CounterAction, CounterKind};
use crate::exit::{self, registry_failure, Failure};

/// `counter show`, `next`, `set`: our outbound control numbers for a configured partner.
pub fn counter(
    action: CounterAction,
    config: &Config,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    use x12gate::registry::Counter;
    let op = registry_failure;
    let partner = match &action {
        CounterAction::Show { partner }
        | CounterAction::Next { partner, .. }
        | CounterAction::Set { partner, .. } => super::partner_arg(config, partner)?,
    };
    // Counters live in the registry of a gateway that exists: `init` first.
    let registry = open_registry(config)?;
    match action {
        CounterAction::Show { .. } => {
            for (name, c) in [("ISA13", Counter::Interchange), ("GS06", Counter::Group)] {
                let v = registry.current_control_number(&partner, c).map_err(op)?;
                writeln!(
                    out,
                    "{partner} {name} {}",
                    v.map_or("none".to_string(), |v| format!("{v:09}"))
                )?;
            }
        }
        CounterAction::Next { kind, count, .. } => {
            for _ in 0..count {
                writeln!(
                    out,
                    "{:09}",
                    registry
                        .next_control_number(&partner, kind.into())
                        .map_err(op)?
                )?;
            }
        }
        CounterAction::Set {
            kind, value, force, ..
        } => {
            let counter: Counter = kind.into();
            let before = registry
                .current_control_number(&partner, counter)
                .map_err(op)?;
            let backwards = before.filter(|b| x12gate::sent::ahead_of(Some(value), *b).is_some());
            if let (Some(b), false) = (backwards, force) {
                return Err(Failure::Usage(anyhow::anyhow!(
                    "{partner} {}: {b:09} was sent; setting it back to {value:09} would send {:09} to {b:09} again, which the partner already has; nothing changed (--force sets it anyway)",
                    counter.name(),
                    value % 999_999_999 + 1
                )));
            }
            registry
                .set_control_number(&partner, counter, value)
                .map_err(op)?;
            let name = match kind {
                CounterKind::Isa13 => "ISA13",
                CounterKind::Gs06 => "GS06",
            };
            writeln!(
                out,
                "{partner} {name} {value:09} (was {}); the next one sent is {:09}",
                before.map_or("none".to_string(), |v| format!("{v:09}")),
                value % 999_999_999 + 1
            )?;
        }
    }
    Ok(exit::OK)
}

/// Milliseconds since the epoch for `--since`/`--until`: RFC 3339; a date and time without a
/// zone (`2026-12-01T08:00:00`), taken as UTC; or a date (its start, or its end when
/// `end_of_day`), in UTC too.
pub(super) fn parse_time(s: &str, end_of_day: bool) -> Result<i64, Failure> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, format) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    let date = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| {
        Failure::Usage(anyhow::anyhow!(
            "{s:?}: expected RFC 3339 (2026-01-31T09:30:00Z), a UTC time (2026-01-31T09:30:00) or a date (2026-01-31)"
        ))
    })?;
    let time = if end_of_day {
        date.and_hms_milli_opt(23, 59, 59, 999)
    } else {
        date.and_hms_opt(0, 0, 0)
    };
    time.map(|t| t.and_utc().timestamp_millis())
        .ok_or_else(|| Failure::Usage(anyhow::anyhow!("{s:?}: not a valid time")))
}

/// The filters of `history` as the registry keeps them: the partner as every command names
/// it, resolved to `QUAL:ID`, the control number padded, the
/// disposition checked against the list.
pub fn history_filter(
    config: &Config,
    partner: Option<String>,
    control_number: Option<String>,
    disposition: Option<String>,
    since: Option<&str>,
    until: Option<&str>,
) -> Result<x12gate::registry::EventFilter, Failure> {
    use x12gate::ack::Disposition;
    let partner = partner
        .map(|p| super::partner_filter(config, &p))
        .transpose()?;
    let control_number = control_number.map(|n| {
        if !n.is_empty() && n.len() < 9 && n.bytes().all(|b| b.is_ascii_digit()) {
            format!("{n:0>9}")
        } else {
            n
        }
    });
    let disposition = disposition
        .map(|d| {
            Disposition::parse(&d).ok_or_else(|| {
                Failure::Usage(anyhow::anyhow!(
                    "--disposition {d}: expected one of {}",
                    Disposition::ALL.map(|k| k.as_str()).join(", ")
                ))
            })
        })
        .transpose()?;
    Ok(x12gate::registry::EventFilter {
        key: None,
        partner,
        control_number,
        disposition,
        since_ms: since.map(|s| parse_time(s, false)).transpose()?,
        until_ms: until.map(|s| parse_time(s, true)).transpose()?,
    })
}

/// `history`: the audit trail, one line (or JSON object) per event that passes `filter`.
pub fn history(
    config: &Config,
    filter: &x12gate::registry::EventFilter,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let registry = open_registry(config)?;
    for e in registry
        .history(filter)
        .map_err(|e| Failure::Operational(e.into()))?
    {
        let time = x12gate::time::rfc3339(e.at_ms);
        // Each event as it was recorded: a decision never carries a delivery made after it
        // (that is a `delivered` event of its own).
        if json {
            writeln!(out, "{}", x12gate::audit::json(&e, time))?;
        } else {
            writeln!(
                out,
                "{time} {:<30} {}",
                x12gate::text::printable(e.key.as_deref().unwrap_or("-")),
                x12gate::audit::line(&e)
            )?;
        }
    }
    Ok(exit::OK)
}

/// `stats`: counts by partner, and the rejected backlog.
pub fn stats(config: &Config, json: bool, out: &mut impl Write) -> Result<u8, Failure> {
    let registry = open_registry(config)?;
    let rows = registry
        .stats()
        .map_err(|e| Failure::Operational(e.into()))?;
    let backlog = x12gate::metrics::rejected_backlog(config);
    let decisions = registry
        .decisions()
        .map_err(|e| Failure::Operational(e.into()))?;
    let deliveries = registry.delivery_counts().map_err(registry_failure)?;
    let circuits = registry.circuits().map_err(registry_failure)?;
    let dead: u64 = deliveries
        .iter()
        .filter(|(_, s, _)| *s == x12gate::registry::DeliveryState::Dead)
        .map(|(_, _, n)| n)
        .sum();
    if json {
        let outbox: Vec<serde_json::Value> = deliveries
            .iter()
            .map(|(d, s, n)| serde_json::json!({ "destination": d, "state": s, "count": n }))
            .collect();
        let circuits: Vec<serde_json::Value> = circuits
            .iter()
            .map(|(d, s, f, _)| serde_json::json!({ "destination": d, "state": s, "failures": f }))
            .collect();
        let by: Vec<serde_json::Value> = rows
            .iter()
            .map(|(p, d, n)| serde_json::json!({ "partner": p, "disposition": d, "count": n }))
            .collect();
        let decided: Vec<serde_json::Value> = decisions
            .iter()
            .map(|(p, d, n)| serde_json::json!({ "partner": p, "decision": d, "count": n }))
            .collect();
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "interchanges": by,
                "decisions": decided,
                "rejected_backlog": backlog,
                "deliveries": outbox,
                "dead_deliveries": dead,
                "circuits": circuits,
            })
        )?;
    } else {
        writeln!(out, "interchanges (one per key), by disposition:")?;
        for (p, d, n) in &rows {
            writeln!(out, "  {:<24} {d:<12} {n}", x12gate::text::printable(p))?;
        }
        writeln!(
            out,
            "decisions (every file's interchanges, resends included):"
        )?;
        for (p, d, n) in &decisions {
            let p = if p.is_empty() { "(no partner)" } else { p };
            writeln!(out, "  {:<24} {d:<12} {n}", x12gate::text::printable(p))?;
        }
        writeln!(
            out,
            "rejected backlog: {backlog} file(s) in {}",
            config.gateway.rejected.display()
        )?;
        if !deliveries.is_empty() {
            writeln!(out, "deliveries, by destination and state:")?;
            for (d, s, n) in &deliveries {
                writeln!(out, "  {d:<24} {s:<12} {n}")?;
            }
            for (d, s, f, _) in &circuits {
                writeln!(out, "  circuit of {d}: {s} ({f} failure(s) in a row)")?;
            }
            writeln!(
                out,
                "dead-letter queue: {dead} (x12gate deliveries --state dead)"
            )?;
        }
    }
    Ok(exit::OK)
}

/// `prune --files`: the files past retention, listed, and deleted with `--apply`.
pub fn prune_files(config: &Config, apply: bool, out: &mut impl Write) -> Result<u8, Failure> {
    let registry = open_registry(config)?;
    let plan = x12gate::retention::plan(config, &registry).map_err(registry_failure)?;
    for (path, partner, age) in &plan.delete {
        writeln!(
            out,
            "{} {} ({partner}, {age} days old)",
            if apply { "deleted" } else { "would delete" },
            x12gate::text::printable(&path.display().to_string())
        )?;
    }
    let done = if apply {
        x12gate::retention::apply(config, &plan)?
    } else {
        0
    };
    say!(
        "INFO",
        "{} file(s) past retention{}; {} kept for keys still in the registry, {} kept as no partner could be told",
        plan.delete.len(),
        if apply { format!(", {done} deleted") } else { " (dry run: --apply deletes them)".into() },
        plan.live,
        plan.unattributed
    );
    Ok(exit::OK)
}

/// `prune`: the keys past their partner's duplicate window, removed and listed.
pub fn prune_keys(config: &Config, out: &mut impl Write) -> Result<u8, Failure> {
    let mut registry = open_registry(config)?;
    let removed = x12gate::retention::prune_keys(config, &mut registry)
        .map_err(|e| Failure::Operational(e.into()))?;
    for key in &removed {
        writeln!(out, "{}", x12gate::text::printable(key))?;
    }
    say!("INFO", "pruned {} key(s)", removed.len());
    Ok(exit::OK)
}

/// `metrics`: what `watch` serves at /metrics, once.
pub fn metrics(config: &Config, out: &mut impl Write) -> Result<u8, Failure> {
    let text = x12gate::metrics::render(config, None).map_err(registry_failure)?;
    out.write_all(text.as_bytes())?;
    Ok(exit::OK)
}

/// `backup DEST`: a consistent copy of the registry, never over an existing file.
pub fn backup(config: &Config, dest: &Path, out: &mut impl Write) -> Result<u8, Failure> {
    if dest.exists() {
        return Err(Failure::Usage(anyhow::anyhow!(
            "{}: exists already; a backup never overwrites, give a new name",
            dest.display()
        )));
    }
    // Read only: a backup taken by a newer binary must not migrate the live registry.
    let registry = x12gate::registry::Registry::open_read_only(&config.gateway.database)
        .map_err(registry_failure)?
        .ok_or_else(|| {
            Failure::Usage(anyhow::anyhow!(
                "{}: no registry to back up",
                config.gateway.database
            ))
        })?;
    let pages = registry.backup(dest).map_err(registry_failure)?;
    writeln!(
        out,
        "{}: a consistent copy of {} ({pages} pages), integrity checked",
        dest.display(),
        config.gateway.database
    )?;
    Ok(exit::OK)
}
