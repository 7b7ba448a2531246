//! The commands that read a file and print, writing nothing: `parse`, `render`, `validate`
//! and `ack` (which reads the registry's counters, and takes no number).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use x12gate::config::Config;
use x12gate::x12::Limits;

use super::{definitions, open, read};
use crate::exit::{self, Failure};

/// `parse`: the JSON of `file` on stdout, whole or not at all.
pub fn parse(
    file: &Path,
    raw: bool,
    config: Option<&Config>,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    use x12gate::translate::{DocumentWriter, Form, ParseError};
    let limits = config.map_or_else(Limits::default, |c| c.limits);
    let form = if raw { Form::Raw } else { Form::Structured };
    // Each interchange is read against its sender's guide when the configuration names one.
    let schemas = if raw {
        None
    } else {
        Some(definitions(config)?)
    };
    // Standard input cannot be read twice: it is held whole. A file is read in pieces, and
    // a file that cannot be opened says so now.
    let stdin = if file == Path::new("-") {
        Some(read(file, &limits)?)
    } else {
        open(file, &limits)?;
        None
    };
    // A dry run first, so that a file that cannot be translated leaves nothing half-written
    // on stdout; it also learns whether the file is UTF-8, which the document says first.
    let mut utf8 = true;
    let sink = &mut std::io::sink();
    let written = DocumentWriter::start_with(false, form, schemas, sink)
        .and_then(|mut dry| {
            each_interchange(file, stdin.as_deref(), limits, &mut |ic| {
                utf8 &= std::str::from_utf8(ic.bytes()).is_ok();
                dry.interchange(ic, sink)
            })
        })
        .and_then(|()| {
            let mut doc = DocumentWriter::start_with(utf8, form, schemas, out)?;
            each_interchange(file, stdin.as_deref(), limits, &mut |ic| {
                doc.interchange(ic, out)
            })?;
            doc.finish(out)
        });
    match written {
        Ok(()) => Ok(exit::OK),
        Err(ParseError::Io(e)) => Err(e.into()),
        Err(e) => {
            out.flush()?;
            say!("ERROR", "{}: {e}", file.display());
            Ok(exit::FINDINGS)
        }
    }
}

/// `f` on each interchange of `file`, read in pieces (a large one in parts, see
/// `x12gate::x12::Interchanges::in_parts`), or of `whole`, when it is held.
fn each_interchange(
    file: &Path,
    whole: Option<&[u8]>,
    limits: Limits,
    f: &mut dyn FnMut(&x12gate::x12::Interchange<'_>) -> Result<(), x12gate::translate::ParseError>,
) -> Result<(), x12gate::translate::ParseError> {
    if let Some(bytes) = whole {
        return x12gate::x12::Interchanges::new(bytes, limits).try_for_each(|ic| f(&ic?));
    }
    // An interchange larger than a piece is given in parts, each written as it comes.
    let mut reader = x12gate::input::Reader::open(file, limits, x12gate::input::WINDOW)
        .map_err(std::io::Error::other)?
        .in_parts();
    while let Some(piece) = reader.next_piece().map_err(std::io::Error::other)? {
        let mut read = piece.interchanges();
        read.by_ref().try_for_each(|ic| f(&ic?))?;
        let resume = read.resume();
        reader.advance(resume);
    }
    Ok(())
}

/// `render`: the X12 of a JSON document on stdout, whole or not at all.
pub fn render(file: &Path, limits: Limits, out: &mut impl Write) -> Result<u8, Failure> {
    // The JSON of a file within max_file_bytes is several times larger.
    let json = x12gate::input::read(file, limits.max_file_bytes.saturating_mul(16))
        .with_context(|| file.display().to_string())
        .map_err(Failure::Usage)?;
    // Rendered in memory first (the X12 is smaller than the JSON already read), so
    // that a document that fails halfway leaves nothing on stdout.
    let mut rendered = Vec::new();
    match x12gate::translate::render_document(&json, &mut rendered) {
        Ok(()) => {
            out.write_all(&rendered)?;
            Ok(exit::OK)
        }
        Err(x12gate::translate::RenderError::Io(e)) => Err(e.into()),
        Err(e) => {
            say!("ERROR", "{}: {e}", file.display());
            Ok(exit::USAGE)
        }
    }
}

/// `validate`: every file's findings, one per line; a file too large to read is a finding
/// of its own, and the run goes on.
pub fn validate(
    files: &[PathBuf],
    json: bool,
    envelope: bool,
    config: Option<&Config>,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let limits = config.map_or_else(Limits::default, |c| c.limits);
    let checks = x12gate::check::Checks {
        schemas: if envelope {
            None
        } else {
            Some(definitions(config)?)
        },
        routing: None,
        ..Default::default()
    };
    let mut any = false;
    for file in files {
        let (mut count, mut errors) = (0usize, 0usize);
        let mut failed = None;
        let mut print = |findings: Vec<x12gate::finding::Finding>| {
            count += findings.len();
            errors += findings.iter().filter(|f| !f.is_warning()).count();
            for f in &findings {
                let written = if json {
                    serde_json::to_value(f)
                        .map_err(|e| Failure::Operational(e.into()))
                        .and_then(|mut v| {
                            if let Some(o) = v.as_object_mut() {
                                o.insert("file".into(), file.display().to_string().into());
                            }
                            writeln!(out, "{v}").map_err(Failure::from)
                        })
                } else {
                    writeln!(out, "{}: {f}", file.display()).map_err(Failure::from)
                };
                if let Err(e) = written {
                    failed.get_or_insert(e);
                    return;
                }
            }
        };
        // A file too large to read is a finding of its own, and the run goes on. An
        // interchange larger than a piece is read in parts: memory is a piece, however large.
        let read = open(file, &limits).and_then(|reader| {
            let mut reader = reader.in_parts();
            x12gate::check::pieces(&mut reader, &checks, &mut print).map_err(super::input_failure)
        });
        match read {
            Ok(()) => {}
            Err(Failure::Operational(e)) => match e.downcast_ref::<x12gate::input::InputError>() {
                Some(x12gate::input::InputError::TooLarge { size, limit, .. }) => {
                    print(vec![x12gate::validate::too_large(*size, *limit)]);
                }
                _ => return Err(Failure::Operational(e)),
            },
            Err(e) => return Err(e),
        }
        if let Some(e) = failed {
            return Err(e);
        }
        // Warnings alone (layout partners' tools write) are not a failed validation.
        any |= errors > 0;
        if !json {
            let warnings = count - errors;
            if count == 0 {
                say!("INFO", "{}: clean", file.display());
            } else if errors == 0 {
                say!(
                    "INFO",
                    "{}: {warnings} warning{} only",
                    file.display(),
                    if warnings == 1 { "" } else { "s" }
                );
            } else {
                say!(
                    "INFO",
                    "{}: {count} finding{}",
                    file.display(),
                    if count == 1 { "" } else { "s" }
                );
            }
        }
    }
    Ok(if any { exit::FINDINGS } else { exit::OK })
}

/// `ack`: decides every interchange of `file` and prints the acknowledgments; control numbers
/// are previewed (the registry's next values), never taken.
pub fn ack(file: &Path, config: &Config, out: &mut impl Write) -> Result<u8, Failure> {
    use x12gate::pipeline::PartsPreview;
    // An interchange larger than a piece is decided a part at a time, never held.
    let mut reader = open(file, &config.limits)?.in_parts();
    let schemas = definitions(Some(config))?;
    let registry = x12gate::registry::Registry::open_read_only(&config.gateway.database)
        .map_err(|e| Failure::Operational(e.into()))?;
    let now = chrono::Local::now().naive_local();
    let mut code = exit::OK;
    let mut parts: Option<PartsPreview<'_>> = None;
    while let Some(piece) = reader.next_piece().map_err(super::input_failure)? {
        let mut read = piece.interchanges();
        for result in read.by_ref() {
            let worst = match result {
                Ok(ic) if !ic.is_whole() => {
                    if ic.is_first_part() {
                        parts = Some(PartsPreview::begin(&ic, config, schemas));
                    } else if let Some(p) = &mut parts {
                        p.add(&ic);
                    }
                    match parts.take_if(|_| ic.is_last_part()) {
                        Some(p) => {
                            let id = x12gate::pipeline::correlation_id(&ic);
                            // Written as it is made: the 997 of a million sets is 22 MB.
                            let preview = p.write(registry.as_ref(), now, &mut *out);
                            show(file, &id, preview, out)?
                        }
                        None => continue,
                    }
                }
                Ok(ic) => {
                    let preview =
                        x12gate::pipeline::preview(&ic, config, schemas, registry.as_ref(), now);
                    show(file, &x12gate::pipeline::correlation_id(&ic), preview, out)?
                }
                Err(e) => {
                    parts = None;
                    say!(
                        "ERROR",
                        "{}: {e}; nothing can be acknowledged for it",
                        file.display()
                    );
                    exit::FINDINGS
                }
            };
            code = code.max(worst);
        }
        let resume = read.resume();
        reader.advance(resume);
    }
    Ok(code)
}

/// Prints the acknowledgments of one interchange (`QUAL:ID:ISA13` `id`) and what was
/// decided; the exit code it calls for.
fn show(
    file: &Path,
    id: &str,
    preview: Result<x12gate::pipeline::Preview, x12gate::pipeline::PreviewError>,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    use x12gate::ack::Disposition;
    let x12gate::pipeline::Preview { decision, outbound } =
        preview.map_err(|e| Failure::Operational(e.into()))?;
    for o in &outbound {
        out.write_all(&o.bytes)?;
    }
    let r = &decision.response;
    let sends: Vec<String> = outbound
        .iter()
        .map(|o| {
            format!(
                "{} {:09}",
                o.kind.extension().to_uppercase(),
                o.control_number
            )
        })
        .collect();
    say!(
        "INFO",
        "{}: {} {}{}; sends {}",
        file.display(),
        id,
        r.disposition.as_str(),
        r.reason
            .as_ref()
            .map(|x| format!(
                " ({}{})",
                x.code.map(|c| format!("{c} ")).unwrap_or_default(),
                x.text
            ))
            .unwrap_or_default(),
        if sends.is_empty() {
            "nothing".to_string()
        } else {
            sends.join(", ")
        },
    );
    Ok(if r.disposition == Disposition::Accepted {
        exit::OK
    } else {
        exit::FINDINGS
    })
}
