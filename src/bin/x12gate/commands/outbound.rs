//! Our own documents to partners: `send`, `sent` and `resend`.

use std::io::Write;
use std::path::PathBuf;

use x12gate::config::Config;
use x12gate::send::SendError;

use super::{definitions, open_registry};
use crate::exit::{self, registry_failure, Failure};

/// `send`'s arguments.
pub struct SendArgs<'a> {
    pub files: &'a [PathBuf],
    pub partner: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    /// Check and name only: nothing taken.
    pub check: bool,
    /// Where the time went, on stderr.
    pub timings: bool,
    pub json: bool,
}

/// `send`: each document claimed, numbered and written (or its first sending replayed); a
/// refused or conflicting document is reported and the others go on (exit 3 at the end).
pub fn send(config: &Config, args: &SendArgs<'_>, out: &mut impl Write) -> Result<u8, Failure> {
    if args.check {
        return check(config, args, out);
    }
    if args.idempotency_key.is_some() && args.files.len() > 1 {
        return Err(Failure::Usage(anyhow::anyhow!(
            "--idempotency-key names one document: give one file with it"
        )));
    }
    // The checks `process` runs first: above all, that no counter is behind numbers already
    // sent (a registry restored from a backup), which would send a partner an ISA13 again.
    super::preflight(config)?;
    let schemas = definitions(Some(config))?;
    let mut registry = x12gate::setup::open_registry(config).map_err(registry_failure)?;
    // What a writer now gone left half done is finished before anything new is numbered.
    match x12gate::send::finish_unfinished(config, &mut registry) {
        Ok(0) => {}
        Ok(n) => say!(
            "WARN",
            "x12gate: finished {n} document(s) of ours whose writer was gone"
        ),
        Err(SendError::Registry(e)) => return Err(registry_failure(e)),
        Err(e) => say!("WARN", "x12gate: unfinished documents of ours: {e}"),
    }
    let mut code = exit::OK;
    let mut spent = x12gate::send::Spent::default();
    // A batch at a time: one commit claims and numbers them, their files are made durable
    // together, one commit marks them sent.
    for chunk in args.files.chunks(BATCH) {
        let prepared = chunk
            .iter()
            .map(|file| {
                let json = read_json(file)?;
                Ok(
                    x12gate::outbound::prepare(config, schemas, &json, args.partner).map(
                        |mut p| {
                            p.idempotency_key = args.idempotency_key.map(str::to_string);
                            p
                        },
                    ),
                )
            })
            .collect::<Result<Vec<_>, Failure>>()?;
        let ready: Vec<&x12gate::outbound::Prepared> =
            prepared.iter().filter_map(|p| p.as_ref().ok()).collect();
        for p in &ready {
            spent.prepared(p);
        }
        let mut sent = x12gate::send::send_all(config, &mut registry, &ready, &mut spent)
            .map_err(registry_failure)?
            .into_iter();
        // Every answer of the batch is printed before an operational failure stops the run.
        let mut failed = None;
        for (file, p) in chunk.iter().zip(prepared) {
            let result = match p {
                Ok(_) => sent.next().unwrap_or_else(|| {
                    Err(SendError::Refused(x12gate::outbound::Refusal::Set(
                        "not sent".into(),
                    )))
                }),
                Err(r) => Err(SendError::Refused(r)),
            };
            match print_one(file, result, args.json, out) {
                Ok(c) => code = code.max(c),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
    }
    if args.timings {
        let ms = |d: std::time::Duration| d.as_millis();
        say!(
            "INFO",
            "x12gate: send: rendering {} ms, validation {} ms, registry {} ms, files {} ms",
            ms(spent.rendering),
            ms(spent.validation),
            ms(spent.registry),
            ms(spent.files)
        );
    }
    Ok(code)
}

/// Documents claimed, written and marked together by `send`.
const BATCH: usize = 256;

/// One document's answer printed; its exit code (an operational failure stops the run).
fn print_one(
    file: &std::path::Path,
    result: Result<x12gate::send::Sent, SendError>,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let mut code = exit::OK;
    {
        let (_, mut body) = x12gate::send::answer(&result, x12gate::time::now_ms());
        match &result {
            Err(SendError::Registry(e)) if e.is_unreachable() || e.is_setup() => {
                return Err(registry_failure_of(result))
            }
            Err(SendError::Registry(_) | SendError::Write { .. }) => {
                if let Err(e) = result {
                    return Err(Failure::Operational(anyhow::anyhow!(
                        "{}: {e}",
                        file.display()
                    )));
                }
            }
            Err(_) => code = exit::FINDINGS,
            Ok(_) => {}
        }
        if json {
            body["input"] = file.display().to_string().into();
            writeln!(out, "{body}")?;
            return Ok(code);
        }
        match &result {
            Ok(sent) => {
                let r = &sent.row;
                writeln!(
                    out,
                    "{}: {} {}: ISA13 {:09} GS06 {} ST02 {} in {}",
                    file.display(),
                    r.key,
                    if sent.replayed {
                        "replayed (sent before with this content)"
                    } else {
                        "sent"
                    },
                    r.isa13,
                    r.gs06,
                    r.st02,
                    sent.path.display()
                )?;
            }
            Err(e) => {
                writeln!(out, "{}: {e}", file.display())?;
                if let SendError::Refused(r) = e {
                    for f in r.findings() {
                        writeln!(out, "  {f}")?;
                    }
                }
            }
        }
    }
    Ok(code)
}

/// `send --check`: each document read, rendered, validated and named; nothing taken.
fn check(config: &Config, args: &SendArgs<'_>, out: &mut impl Write) -> Result<u8, Failure> {
    let schemas = definitions(Some(config))?;
    let mut code = exit::OK;
    for file in args.files {
        let json = read_json(file)?;
        match x12gate::outbound::prepare(config, schemas, &json, args.partner) {
            Ok(p) => {
                if args.json {
                    let v = serde_json::json!({"input": file.display().to_string(),
                        "key": p.key, "state": "checked", "fingerprint": p.fingerprint,
                        "warnings": p.warnings});
                    writeln!(out, "{v}")?;
                } else {
                    writeln!(out, "{}: {} would be sent", file.display(), p.key)?;
                }
            }
            Err(e) => {
                code = exit::FINDINGS;
                let result = Err(SendError::Refused(e));
                let (_, mut body) = x12gate::send::answer(&result, x12gate::time::now_ms());
                if args.json {
                    body["input"] = file.display().to_string().into();
                    writeln!(out, "{body}")?;
                } else if let Err(SendError::Refused(r)) = &result {
                    writeln!(out, "{}: {r}", file.display())?;
                    for f in r.findings() {
                        writeln!(out, "  {f}")?;
                    }
                }
            }
        }
    }
    Ok(code)
}

fn registry_failure_of(result: Result<x12gate::send::Sent, SendError>) -> Failure {
    match result {
        Err(SendError::Registry(e)) => registry_failure(e),
        Err(e) => Failure::Operational(e.into()),
        Ok(_) => Failure::Operational(anyhow::anyhow!("no failure")),
    }
}

/// A JSON document within [`x12gate::outbound::MAX_REQUEST_BYTES`]; `-` is standard input.
fn read_json(file: &std::path::Path) -> Result<Vec<u8>, Failure> {
    use std::io::Read;
    let limit = x12gate::outbound::MAX_REQUEST_BYTES as u64 + 1;
    let mut bytes = Vec::new();
    if file.as_os_str() == "-" {
        std::io::stdin().take(limit).read_to_end(&mut bytes)?;
    } else {
        let f = std::fs::File::open(file).map_err(|e| {
            let e = anyhow::anyhow!("{}: {e}", file.display());
            Failure::Usage(e)
        })?;
        f.take(limit).read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

/// `sent`: our documents and their acknowledgments, newest first (or the partners'
/// acknowledgments that matched nothing).
pub fn sent(
    config: &Config,
    state: Option<&str>,
    partner: Option<&str>,
    since: Option<&str>,
    unmatched: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let registry = open_registry(config)?;
    if unmatched {
        for (partner, kind, what, seen) in
            registry.unmatched_acks(1000).map_err(registry_failure)?
        {
            let when = x12gate::time::rfc3339(seen);
            if json {
                let v = serde_json::json!({"partner": partner, "kind": kind, "what": what, "received": when});
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{when}  {partner}  {kind}  {what}")?;
            }
        }
        return Ok(exit::OK);
    }
    let partner = partner
        .map(|p| super::partner_filter(config, p))
        .transpose()?;
    let since = since
        .map(|s| super::registry::parse_time(s, false))
        .transpose()?;
    let now = x12gate::time::now_ms();
    let rows = registry
        .outbound_rows(partner.as_deref(), state, since, 10_000)
        .map_err(registry_failure)?;
    if !json && rows.is_empty() {
        writeln!(
            out,
            "no documents sent{}",
            if state.is_some() || partner.is_some() {
                " match"
            } else {
                ""
            }
        )?;
    }
    for r in rows {
        if json {
            let v = x12gate::send::status(config, &r, now);
            writeln!(out, "{v}")?;
        } else {
            let late = if r.ack_late { " (late)" } else { "" };
            writeln!(
                out,
                "{}  {}  ISA13 {:09} GS06 {} ST02 {}  {}{late}  {}",
                x12gate::time::rfc3339(r.sent_ms.unwrap_or(r.created_ms)),
                r.key,
                r.isa13,
                r.gs06,
                r.st02,
                r.ack_state(now),
                r.file
            )?;
        }
    }
    Ok(exit::OK)
}

/// `resend`: the same bytes written again, recorded.
pub fn resend(
    config: &Config,
    key: &str,
    new_numbers: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let mut registry = open_registry(config)?;
    let done = if new_numbers {
        x12gate::send::resend_new_numbers(config, &mut registry, key)
    } else {
        x12gate::send::resend(config, &mut registry, key)
    };
    match done {
        Ok(Some((row, path))) => {
            if json {
                let v = serde_json::json!({"key": row.key, "resends": row.resends,
                    "result_ref": x12gate::send::result_ref(&row, &path)});
                writeln!(out, "{v}")?;
            } else {
                writeln!(
                    out,
                    "{}: written again (ISA13 {:09}, resend {}) in {}",
                    row.key,
                    row.isa13,
                    row.resends,
                    path.display()
                )?;
            }
            Ok(exit::OK)
        }
        Ok(None) => Err(Failure::Usage(anyhow::anyhow!(
            "{key}: no document of ours has this key (x12gate sent lists them)"
        ))),
        Err(SendError::Registry(e)) => Err(registry_failure(e)),
        Err(e @ SendError::Refused(_)) => Err(Failure::Usage(e.into())),
        Err(e) => Err(Failure::Operational(e.into())),
    }
}

/// `show KEY` of one of our documents: where it stands, its history.
pub fn show(
    config: &Config,
    row: &x12gate::registry::OutboundRow,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let status = x12gate::send::status(config, row, x12gate::time::now_ms());
    if json {
        writeln!(out, "{status}")?;
        return Ok(exit::OK);
    }
    writeln!(out, "{}", row.key)?;
    writeln!(
        out,
        "  our {} {} to {}",
        row.set_id, row.document_id, row.partner
    )?;
    let r = &status["result_ref"];
    writeln!(
        out,
        "  {} ISA13 {} GS06 {} ST02 {}, file {}",
        row.state,
        r["isa13"].as_str().unwrap_or(""),
        r["gs06"].as_str().unwrap_or(""),
        r["st02"].as_str().unwrap_or(""),
        r["file"].as_str().unwrap_or("")
    )?;
    writeln!(
        out,
        "  acknowledgment: {}{}{}",
        status["ack"].as_str().unwrap_or(""),
        if row.ack_late { " (late)" } else { "" },
        row.ack_detail
            .as_deref()
            .map(|d| format!(": {}", x12gate::text::printable(d)))
            .unwrap_or_default()
    )?;
    if let Some(k) = &row.idempotency_key {
        writeln!(
            out,
            "  the ERP's idempotency key: {}",
            x12gate::text::printable(k)
        )?;
    }
    if row.resends > 0 {
        writeln!(out, "  written again {} time(s) (resend)", row.resends)?;
    }
    Ok(exit::OK)
}
