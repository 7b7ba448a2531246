//! Deliveries to destinations: `deliver` (send what is due), `deliveries` (list, `retry`)
//! and `confirm` (the business system's reference for a document).

use std::io::Write;

use x12gate::config::Config;
use x12gate::delivery::{Deliverer, Scope, Summary};
use x12gate::registry::{DeliveryRow, DeliveryState, Registry, Retry};

use super::{local_time, open_registry};
use crate::args::DeliveriesAction;
use crate::exit::{self, registry_failure, Failure};

/// `deliver`: one pass over the due deliveries, or with `drain` passes until none is queued
/// or retrying (or `timeout` seconds).
pub fn deliver(
    config: &Config,
    drain: bool,
    timeout: Option<u64>,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let mut registry = open_registry(config)?;
    x12gate::delivery::clean_stale_folders(config);
    let options = x12gate::pipeline::ProcessOptions::new(false);
    super::process::stop_on_signals(&options.stop)?;
    let stopped = || options.stop.abandoned();
    let owner = x12gate::owner::Owner::current().id();
    let deliverer = Deliverer::new(config, &owner);
    deliverer
        .warn_unconfigured(&registry)
        .map_err(registry_failure)?;
    let done = if drain {
        let deadline =
            timeout.map(|s| std::time::Instant::now() + std::time::Duration::from_secs(s));
        deliverer.drain(&mut registry, Scope::All, deadline, &stopped)
    } else {
        deliverer.pass(&mut registry, Scope::All, &stopped)
    }
    .map_err(registry_failure)?;
    let left = open_rows(&registry)?;
    summary(&done, Some(left), json, out)?;
    Ok(exit::OK)
}

/// Deliveries still to send: queued or retrying, and blocked behind a dead one.
fn open_rows(registry: &Registry) -> Result<Left, Failure> {
    let counts = registry.delivery_counts().map_err(registry_failure)?;
    let sum = |states: &[DeliveryState]| -> u64 {
        counts
            .iter()
            .filter(|(_, s, _)| states.contains(s))
            .map(|(_, _, n)| n)
            .sum()
    };
    Ok(Left {
        open: sum(&[DeliveryState::Queued, DeliveryState::Retrying]),
        blocked: sum(&[DeliveryState::Blocked]),
    })
}

/// What a drain leaves: rows that will be sent, and rows that wait for an operator's retry
/// of a dead delivery before them.
pub struct Left {
    open: u64,
    blocked: u64,
}

/// The counts of a pass, as one line (or one JSON object).
pub fn summary(
    done: &Summary,
    left: Option<Left>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), Failure> {
    if json {
        let mut v = serde_json::to_value(done).map_err(|e| Failure::Operational(e.into()))?;
        v["still_queued"] = left.as_ref().map(|l| l.open).into();
        v["blocked"] = left.as_ref().map(|l| l.blocked).into();
        writeln!(out, "{v}")?;
    } else {
        writeln!(
            out,
            "deliveries: {} delivered, {} to retry, {} dead{}{}",
            done.delivered,
            done.retrying,
            done.dead,
            if done.waiting > 0 {
                " (a destination's circuit is open: its deliveries wait)"
            } else {
                ""
            },
            left.map(|l| {
                let blocked = if l.blocked > 0 {
                    format!(
                        "; {} blocked behind a dead delivery (x12gate deliveries --state blocked)",
                        l.blocked
                    )
                } else {
                    String::new()
                };
                format!("; {} still queued or retrying{blocked}", l.open)
            })
            .unwrap_or_default()
        )?;
    }
    Ok(())
}

/// Who answers for a delivery: the partner's `contact`, else the destination's `owner`.
fn owner_of<'c>(config: &'c Config, row: &DeliveryRow) -> Option<&'c str> {
    config
        .partners
        .iter()
        .find(|p| p.key() == row.partner)
        .and_then(|p| p.contact.as_deref())
        .or_else(|| {
            config
                .destination(&row.destination)
                .and_then(|d| d.owner.as_deref())
        })
}

/// `deliveries`: list (every one, or in one state, or of one partner), or `retry`.
pub fn deliveries(
    config: &Config,
    action: Option<DeliveriesAction>,
    state: Option<&str>,
    partner: Option<&str>,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let mut registry = open_registry(config)?;
    match action {
        Some(DeliveriesAction::Discard { key, note }) => {
            let key = super::document_key(&registry, &key)?;
            return discard(&mut registry, &key, note.as_deref(), out);
        }
        Some(DeliveriesAction::Retry { key, all_dead }) => {
            let key = key
                .map(|k| super::document_key(&registry, &k))
                .transpose()?;
            return retry(&mut registry, key.as_deref(), all_dead, out);
        }
        None => {}
    }
    let state = state.and_then(DeliveryState::parse);
    let partner = partner
        .map(|p| super::partner_filter(config, p))
        .transpose()?;
    let rows = registry
        .deliveries(state, partner.as_deref(), None)
        .map_err(registry_failure)?;
    let circuits = registry.circuits().map_err(registry_failure)?;
    for r in &rows {
        let owner = owner_of(config, r);
        if json {
            let mut v = serde_json::to_value(r).map_err(|e| Failure::Operational(e.into()))?;
            v["owner"] = owner.into();
            // The destination's circuit now: `closed` unless it was ever moved.
            v["circuit"] = circuits
                .iter()
                .find(|c| c.0 == r.destination)
                .map_or("closed", |c| c.1.as_str())
                .into();
            writeln!(out, "{v}")?;
            continue;
        }
        writeln!(
            out,
            "{} {:<40} {:<9} {:<10} attempts {:<3} {}{}{}{}",
            local_time(r.created_ms),
            x12gate::text::printable(&r.key),
            r.destination,
            r.state,
            r.attempts,
            x12gate::text::printable(&r.interchange),
            r.last_status
                .as_deref()
                .map(|s| match (r.state, r.last_error.as_deref()) {
                    // Why it failed, in the destination's or the system's words.
                    (DeliveryState::Delivered, _) | (_, None) => format!(" last {s}"),
                    (_, Some(e)) => format!(
                        " last {s} ({})",
                        x12gate::text::printable(x12gate::text::bounded(e, 200))
                    ),
                })
                .unwrap_or_default(),
            r.result_ref
                .as_deref()
                .map(|s| format!(" ref {}", x12gate::text::printable(s)))
                .unwrap_or_default(),
            match (r.state, owner) {
                (DeliveryState::Dead, Some(o)) => format!(" owner {o}"),
                (DeliveryState::Dead, None) => " owner (none: set the partner's contact)".into(),
                _ => String::new(),
            }
        )?;
    }
    if rows.is_empty() {
        say!(
            "INFO",
            "x12gate: no delivery{}",
            match (state, &partner) {
                (Some(s), _) => format!(" {}", s.as_str()),
                (None, Some(p)) => format!(" of {p}"),
                (None, None) => String::new(),
            }
        );
    }
    if !json {
        for (destination, state, failures, until) in circuits {
            if state != x12gate::registry::CircuitState::Closed {
                // The count goes on while it is open (failed probes), past the threshold.
                let opens_at = config
                    .destination(&destination)
                    .map(|d| format!(" (it opens at {})", d.circuit_failures))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "circuit of {destination}: {state}, {failures} failure(s) in a row{opens_at}{}",
                    until
                        .map(|u| format!(", until {}", local_time(u)))
                        .unwrap_or_default()
                )?;
            }
        }
    }
    Ok(exit::OK)
}

/// `deliveries discard KEY`: the dead deliveries of `key` never to be sent, and those
/// blocked behind them released.
fn discard(
    registry: &mut Registry,
    key: &str,
    note: Option<&str>,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let (n, released) = registry
        .discard_deliveries(key, note)
        .map_err(registry_failure)?;
    if n == 0 {
        return Err(Failure::Usage(anyhow::anyhow!(
            "{}: no dead delivery to discard (x12gate deliveries --state dead lists them)",
            x12gate::text::printable(key)
        )));
    }
    let followers = match released {
        0 => String::new(),
        r => format!("; {r} blocked behind it released, to follow in order"),
    };
    writeln!(
        out,
        "{n} dead delivery(ies) of {} discarded, never to be sent{followers}",
        x12gate::text::printable(key)
    )?;
    Ok(exit::OK)
}

/// `deliveries retry`: the dead deliveries of `key` (or all of them) queued again.
fn retry(
    registry: &mut Registry,
    key: Option<&str>,
    all_dead: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let which = match (key, all_dead) {
        (Some(k), false) => Retry::Key(k),
        _ => Retry::AllDead,
    };
    let (n, released) = registry
        .retry_deliveries(&which)
        .map_err(registry_failure)?;
    if n == 0 {
        let behind = match key {
            Some(k) => registry.blocking(k).map_err(registry_failure)?,
            None => Vec::new(),
        };
        if !behind.is_empty() {
            let names: Vec<String> = behind
                .iter()
                .map(|(k, d)| format!("{} (to {d})", x12gate::text::printable(k)))
                .collect();
            return Err(Failure::Usage(anyhow::anyhow!(
                "{}: blocked behind the dead delivery of {}: retry that one, and this follows it",
                key.map(x12gate::text::printable).unwrap_or_default(),
                names.join(", ")
            )));
        }
        let Some(key) = key else {
            // A cron job's "nothing to do" is not a failure.
            say!("INFO", "x12gate: no dead delivery to retry");
            return Ok(exit::OK);
        };
        return Err(Failure::Usage(anyhow::anyhow!(
            "{}: no dead delivery (x12gate deliveries --state dead lists them)",
            x12gate::text::printable(key)
        )));
    }
    let followers = match released {
        0 => String::new(),
        r => format!(" and {r} blocked behind them released, to follow in order"),
    };
    writeln!(
        out,
        "{n} delivery(ies) queued again{followers}; `x12gate deliver` or a running watch sends them"
    )?;
    Ok(exit::OK)
}

/// `confirm KEY --ref REF [--force]`.
pub fn confirm(
    config: &Config,
    key: &str,
    reference: &str,
    force: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    use x12gate::registry::Confirmed;
    use x12gate::text::printable;
    let mut registry = open_registry(config)?;
    let key = &super::document_key(&registry, key)?;
    match registry
        .confirm(key, reference, force)
        .map_err(registry_failure)?
    {
        Confirmed::Unknown => Err(Failure::Usage(anyhow::anyhow!(
            "{}: no delivered document has this key (x12gate documents --all lists them)",
            printable(key)
        ))),
        Confirmed::Kept(existing) => Err(Failure::Usage(anyhow::anyhow!(
            "{}: already has reference {} (the destination's answer or an earlier confirm); \
             kept. `x12gate confirm {} --ref {} --force` replaces it, and the history keeps both",
            printable(key),
            printable(&existing),
            printable(key),
            printable(reference)
        ))),
        Confirmed::Recorded(before) => {
            match before.filter(|b| b != reference) {
                Some(b) => writeln!(
                    out,
                    "{}: reference {} recorded (it was {}; both are in the history)",
                    printable(key),
                    printable(reference),
                    printable(&b)
                )?,
                None => writeln!(
                    out,
                    "{}: reference {} recorded",
                    printable(key),
                    printable(reference)
                )?,
            }
            Ok(exit::OK)
        }
    }
}
