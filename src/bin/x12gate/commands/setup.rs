//! `init` and `check`: a gateway set up, and its set-up checked.

use std::io::Write;

use x12gate::config::Config;

use crate::exit::{self, registry_failure, Failure};

/// `init`: the folders and the registry of a new gateway, and what it found in the outbox.
pub fn init(
    config: &Config,
    isa13_from: Option<u32>,
    gs06_from: Option<u32>,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    use x12gate::setup::InitError;
    let done = x12gate::setup::init(config, isa13_from, gs06_from).map_err(|e| match e {
        InitError::Exists(..) | InitError::NumbersUnknown(_) => Failure::Usage(e.into()),
        InitError::Registry(e) => registry_failure(e),
        e => Failure::Operational(e.into()),
    })?;
    writeln!(
        out,
        "created registry {} (installation {})",
        done.database, done.installation
    )?;
    if done.outbox_files > 0 {
        writeln!(
            out,
            "read {} file(s) in the outbox for the control numbers already sent",
            done.outbox_files
        )?;
    }
    for (partner, (isa13, gs06)) in &done.counters {
        writeln!(
            out,
            "{partner}: next ISA13 {:09}, next GS06 {}",
            isa13 + 1,
            gs06 + 1
        )?;
    }
    Ok(exit::OK)
}

/// `check`: every problem of the configuration, folders and registry, on stdout.
/// `process|watch --repair-counters`: the counters the outbox is ahead of moved past it
/// (each said in a warn line, and recorded in the history) before the start-up check.
pub fn repair_counters(config: &Config) -> Result<(), Failure> {
    let moved = x12gate::setup::repair_counters(config).map_err(registry_failure)?;
    for b in &moved {
        say!(
            "WARN",
            "x12gate: our {} counter for {} moved from {} to {:09}, the highest found in {}: the next one sent is {:09}",
            b.counter.name(),
            b.partner,
            b.registry.map_or("nothing".to_string(), |n| format!("{n:09}")),
            b.sent,
            b.found_in,
            b.sent % 999_999_999 + 1
        );
    }
    Ok(())
}

pub fn check(config: &Config, out: &mut impl Write) -> Result<u8, Failure> {
    let mut problems = x12gate::setup::check(config);
    // The registry's pages, read whole: when it opens at all (else that is the problem).
    if !problems.iter().any(|p| p.key == "gateway.database") {
        problems.extend(x12gate::setup::registry_damage(config));
    }
    if !problems.iter().any(|p| p.key == "gateway.database") {
        problems.extend(x12gate::setup::counter_problems(config));
    }
    for p in &problems {
        writeln!(out, "{}: {p}", config.path.display())?;
    }
    // Partners' guides load as `process` and `watch` load them at start-up.
    let guide = x12gate::guides::for_config(config).err();
    if let Some(e) = &guide {
        writeln!(out, "{e}")?;
        return Ok(exit::USAGE);
    }
    if problems.is_empty() {
        writeln!(out, "{}: no problems", config.path.display())?;
        Ok(exit::OK)
    } else if problems.iter().all(|p| p.operational) {
        // Only a database server that cannot be reached: an outage, not a mistake.
        Ok(exit::OPERATIONAL)
    } else {
        Ok(exit::USAGE)
    }
}
