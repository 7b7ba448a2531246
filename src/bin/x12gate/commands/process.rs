//! `process` and `watch`: files through the registry, once or as they arrive.

use std::io::Write;
use std::path::PathBuf;

use indicatif::ProgressBar;
use x12gate::config::Config;
use x12gate::disposition::Disposition;
use x12gate::pipeline::{Gateway, ProcessError, Report, Settled, Source};

use super::{definitions, preflight};
use crate::exit::{self, registry_failure, Failure};

/// What a `process` run has met so far, for its exit code.
#[derive(Default)]
struct Tally {
    /// `FINDINGS` once an interchange was not a success, else `OK`.
    code: u8,
    /// A file could not be read (exit 1).
    operational: bool,
    /// A file does not exist or is not a regular file (exit 2).
    usage: bool,
    /// Files through the pipeline, read or not.
    done: usize,
}

impl Tally {
    /// The worst of what was met: operational, then usage, then findings.
    fn code(&self) -> u8 {
        if self.operational {
            exit::OPERATIONAL
        } else if self.usage {
            exit::USAGE
        } else {
            self.code
        }
    }
}

/// What `process` is asked to do, from its command line.
pub struct ProcessArgs {
    pub files: Vec<PathBuf>,
    /// One JSON object a line instead of the text lines.
    pub json: bool,
    /// Report `in_progress` instead of waiting for another process's live lease.
    pub no_wait: bool,
    /// Leave what is due to the next `deliver` or `watch`.
    pub no_deliver: bool,
    /// Files larger than this are read in pieces of about this many bytes.
    pub window: Option<usize>,
}

/// `process`: every file through the registry; per-file problems are counted and the run
/// goes on, operational failures stop it with nothing of the failing interchange marked done.
pub fn process(args: &ProcessArgs, config: &Config, out: &mut impl Write) -> Result<u8, Failure> {
    let ProcessArgs {
        files,
        json,
        no_wait,
        no_deliver,
        window,
    } = args;
    let (json, no_wait, no_deliver, window) = (*json, *no_wait, *no_deliver, *window);
    preflight(config)?;
    let schemas = definitions(Some(config))?;
    let mut registry = x12gate::setup::open_registry(config).map_err(registry_failure)?;
    let mut options = x12gate::pipeline::ProcessOptions::new(no_wait);
    if let Some(window) = window {
        options.window = window;
    }
    stop_on_signals(&options.stop)?;
    let stop = options.stop.clone();
    x12gate::delivery::clean_stale_folders(config);
    let mut gateway = Gateway::new(config, schemas, &mut registry, options);
    let mut printer = Printer {
        json,
        progress: progress_bar(files.len()),
        tally: Tally::default(),
        accepted_again: Vec::new(),
        out,
    };
    for chunk in files.chunks(x12gate::pipeline::BATCH_FILES) {
        if stop.abandoned() {
            break;
        }
        if !printer.batch(&mut gateway, chunk)? {
            break;
        }
    }
    if let Some(bar) = printer.progress.take() {
        bar.finish_and_clear();
    }
    follow_rejected(&mut gateway, &printer.accepted_again);
    if !stop.abandoned() {
        release_due(&mut gateway)?;
    }
    if !stop.abandoned() && !no_deliver {
        deliver_due(&mut gateway)?;
    }
    if stop.abandoned() {
        printer.out.flush()?;
        say!("WARN", 
            "x12gate: stopped by a signal: {} of {} file(s) not processed; claims cut short were marked failed, so a rerun takes them over at once",
            files.len().saturating_sub(printer.tally.done),
            files.len()
        );
        return Ok(exit::INTERRUPTED);
    }
    Ok(printer.tally.code())
}

/// What `process` prints each settled file's reports with, and what it has counted.
struct Printer<'o, W: Write> {
    json: bool,
    progress: Option<ProgressBar>,
    tally: Tally,
    /// Interchanges accepted on a later attempt: their files may wait in `rejected/`.
    accepted_again: Vec<String>,
    out: &'o mut W,
}

impl<W: Write> Printer<'_, W> {
    /// One batch of files through the gateway, each file's reports printed as they are
    /// settled (a large file's a piece at a time), so a file of any size costs the memory of
    /// a piece's reports. `false` when a stop cut the run short.
    fn batch(&mut self, gateway: &mut Gateway<'_>, chunk: &[PathBuf]) -> Result<bool, Failure> {
        let sources: Vec<Source> = chunk.iter().map(|p| Source::from(p.as_path())).collect();
        let mut printed: Result<(), Failure> = Ok(());
        let mut last = None;
        let mut print = |settled: Settled| {
            // A file counts as done once its last reports (or its failure) are in: a stop
            // in the middle of a large file leaves it among those not processed.
            let (file, done) = match &settled {
                Settled::Reports { file, last, .. } => (*file, *last),
                Settled::Failed { file, .. } => (*file, true),
            };
            if done && last != Some(file) {
                last = Some(file);
                self.tally.done += 1;
            }
            if printed.is_ok() {
                printed = self.settled(settled, chunk);
            }
        };
        // An unusable database, or outputs that cannot be written, stop the run with nothing
        // of the failing batch marked done.
        match gateway.process(&sources, &mut print) {
            Ok(()) => printed?,
            Err(ProcessError::Interrupted) => {
                printed?;
                return Ok(false);
            }
            Err(e) => return Err(Failure::Operational(e.into())),
        }
        if let Some(bar) = &self.progress {
            bar.inc(chunk.len() as u64);
        }
        Ok(true)
    }

    /// What was settled of one file of `chunk`, printed.
    fn settled(&mut self, settled: Settled, chunk: &[PathBuf]) -> Result<(), Failure> {
        match settled {
            Settled::Reports { reports, .. } => {
                self.accepted_again.extend(
                    reports
                        .iter()
                        .filter(|r| {
                            r.disposition == Disposition::Accepted
                                && r.attempt.is_some_and(|a| a > 1)
                        })
                        .filter_map(|r| r.key.clone()),
                );
                report(
                    &reports,
                    self.json,
                    self.progress.as_ref(),
                    &mut self.tally,
                    self.out,
                )
            }
            Settled::Failed { file, error } => match chunk.get(file) {
                Some(path) => unreadable(path, &error, self.json, &mut self.tally, self.out),
                None => Ok(()),
            },
        }
    }
}

/// Files of these interchanges that a watcher left in `rejected/` follow the decision.
fn follow_rejected(gateway: &mut Gateway<'_>, accepted_again: &[String]) {
    match x12gate::rejected::follow(gateway.config, gateway.registry, accepted_again) {
        Ok(moved) => {
            for m in moved {
                say!(
                    "INFO",
                    "x12gate: {} accepted now: moved to {}",
                    m.from.display(),
                    m.to.display()
                );
            }
        }
        Err(e) => say!(
            "WARN",
            "x12gate: could not move files out of rejected/: {e}"
        ),
    }
}

/// Changes that waited longer than their partner's order_wait_hours for an original.
fn release_due(gateway: &mut Gateway<'_>) -> Result<(), Failure> {
    match gateway.release_due() {
        Ok(done) if !done.is_empty() => {
            say!(
                "WARN",
                "x12gate: delivered {} waiting document(s) whose original never came",
                done.len()
            );
            Ok(())
        }
        Ok(_) => Ok(()),
        // The lines above stand (each was printed after its decision committed): say so, or
        // an operator reads "accepted" and exit 1 as a contradiction.
        Err(e) => Err(Failure::Operational(anyhow::Error::from(e).context(
            "the interchanges above were decided and recorded; then releasing the documents that waited for their original failed",
        ))),
    }
}

/// What is due (this run's documents, and earlier runs' retries), attempted once; what
/// fails waits for the next run, `deliver` or `watch`.
fn deliver_due(gateway: &mut Gateway<'_>) -> Result<(), Failure> {
    let stop = gateway.options.stop.clone();
    let done = gateway
        .deliver_due(&|| stop.abandoned())
        .map_err(|e| match registry_failure(e) {
            Failure::Operational(e) => Failure::Operational(e.context(
                "the interchanges above were decided and recorded; then delivering their documents failed",
            )),
            other => other,
        })?;
    // Said only when something is left to do: a clean run stays quiet.
    if done.retrying > 0 || done.dead > 0 {
        let level = if done.dead > 0 { "ERROR" } else { "WARN" };
        say!(
            level,
            "x12gate: deliveries: {} delivered, {} to retry (x12gate deliver, or a running watch), {} dead (x12gate deliveries --state dead)",
            done.delivered,
            done.retrying,
            done.dead
        );
    }
    Ok(())
}

/// A progress bar on stderr, for a run long enough to want one and a terminal to show it.
fn progress_bar(files: usize) -> Option<ProgressBar> {
    use std::io::IsTerminal;
    (files > 20 && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(files as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} files {per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    })
}

/// A file that cannot be read is counted and the run goes on: a path that does not exist or
/// is not a regular file is a usage mistake (exit 2), an unreadable one an operational
/// failure (exit 1).
fn unreadable(
    path: &std::path::Path,
    e: &ProcessError,
    json: bool,
    tally: &mut Tally,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let mistake = matches!(e, ProcessError::Input(i) if i.is_not_found());
    tally.usage |= mistake;
    tally.operational |= !mistake;
    let message = x12gate::text::printable(&e.to_string()).into_owned();
    if json {
        let line = serde_json::json!({
            "file": path.display().to_string(),
            "disposition": null,
            "error": message,
        });
        writeln!(out, "{line}")?;
    }
    say!("ERROR", "x12gate: {message}");
    Ok(())
}

/// One line (or JSON object) per interchange of a file that was read.
fn report(
    reports: &[Report],
    json: bool,
    progress: Option<&ProgressBar>,
    tally: &mut Tally,
    out: &mut impl Write,
) -> Result<(), Failure> {
    for r in reports {
        if !r.disposition.is_success() {
            tally.code = exit::FINDINGS;
        }
        if json {
            writeln!(
                out,
                "{}",
                serde_json::to_string(r).map_err(|e| Failure::Operational(e.into()))?
            )?;
        } else {
            let reason = r.reason.as_ref().map(|x| {
                let code = r
                    .reason_code
                    .as_ref()
                    .map(|c| format!("{c} "))
                    .unwrap_or_default();
                format!(" ({code}{x})")
            });
            let test = r.usage == Some(x12gate::document::Usage::Test);
            let line = format!(
                "{}: {} {}{}{}{}",
                r.file,
                r.correlation_id.as_deref().unwrap_or("-"),
                if test { "test " } else { "" },
                r.disposition.as_str(),
                reason.unwrap_or_default(),
                documents(r)
            );
            let line = x12gate::text::printable(&line);
            // The report is stdout's, whatever stderr's progress bar is doing.
            match progress {
                Some(bar) => bar.suspend(|| writeln!(out, "{line}"))?,
                None => writeln!(out, "{line}")?,
            }
        }
    }
    // Each file's lines reach stdout as it is decided: a run killed later (or read through
    // a pipe while it works) has reported what it did.
    out.flush()?;
    Ok(())
}

/// An interchange's documents in a few words: how many are new, and each other one (at
/// most three named) with what became of it.
fn documents(report: &Report) -> String {
    use x12gate::document::DocumentDisposition;
    const NAMED: usize = 3;
    let docs = &report.documents;
    if docs.is_empty() {
        return String::new();
    }
    // A report that lists the first documents of many counts them all.
    let total = report.documents_total.unwrap_or(docs.len());
    let new = report.documents_new.unwrap_or_else(|| {
        docs.iter()
            .filter(|d| d.disposition == DocumentDisposition::New)
            .count()
    });
    let others: Vec<&x12gate::pipeline::DocumentReport> = docs
        .iter()
        .filter(|d| d.disposition != DocumentDisposition::New)
        .collect();
    let other_total = total.saturating_sub(new);
    let mut parts = Vec::new();
    if new > 0 || other_total == 0 {
        parts.push(format!("{new} new"));
    }
    parts.extend(others.iter().take(NAMED).map(|d| {
        let word = if d.disposition == DocumentDisposition::Conflict {
            "with"
        } else {
            "of"
        };
        let of = d
            .duplicate_of
            .as_deref()
            .map(|i| format!(" {word} {i}"))
            .unwrap_or_default();
        let reference = d
            .result_ref
            .as_deref()
            .map(|r| format!(" (ref {r})"))
            .unwrap_or_default();
        format!("{} {}{of}{reference}", d.key, d.disposition)
    }));
    let named = others.len().min(NAMED);
    if other_total > named {
        parts.push(format!("{} more", other_total - named));
    }
    if let Some(why) = docs.iter().find_map(|d| d.undelivered.as_deref()) {
        parts.push(format!("delivered nowhere ({why})"));
    }
    format!("; documents: {}", parts.join(", "))
}

/// SIGTERM and SIGINT ask `process` to stop at the next safe point (waits end at once, work
/// in progress is abandoned between steps with its claims marked failed); a second signal
/// exits at once, which is safe because claims are leased and owners are checked for life.
pub(super) fn stop_on_signals(stop: &x12gate::pipeline::Stop) -> Result<(), Failure> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let again = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [SIGTERM, SIGINT] {
        signal_hook::flag::register_conditional_shutdown(
            signal,
            i32::from(exit::INTERRUPTED),
            again.clone(),
        )?;
        signal_hook::flag::register(signal, again.clone())?;
        signal_hook::flag::register_usize(signal, stop.flag(), x12gate::pipeline::Stop::ABANDON)?;
    }
    Ok(())
}

/// `watch`: the tokio runtime, and the signals. The first SIGINT/SIGTERM stops taking files
/// and lets the ones in flight finish; a second one exits at once, which is safe because
/// claims are leased.
pub fn watch(config: Config, poll: bool, once: bool, allow_actions: bool) -> Result<u8, Failure> {
    preflight(&config)?;
    let schemas = definitions(Some(&config))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Operational(e.into()))?;
    let options = x12gate::watch::WatchOptions {
        poll,
        once,
        allow_actions,
    };
    let summary = runtime
        .block_on(async move {
            x12gate::watch::run(
                std::sync::Arc::new(config),
                schemas,
                options,
                first_signal(),
            )
            .await
        })
        .map_err(|e| match e {
            // The web page's settings are the operator's to fix, like the configuration.
            e @ x12gate::watch::WatchError::Web(_) => Failure::Usage(e.into()),
            e => Failure::Operational(e.into()),
        })?;
    say!("INFO", 
        "x12gate watch: {} file(s) taken, {} accepted, {} duplicate(s), {} conflict(s), {} file(s) rejected",
        summary.files_taken, summary.accepted, summary.duplicates, summary.conflicts, summary.rejected_files
    );
    // `--once` reports like `process`: files it could not finish are exit 1 (they wait in
    // the work folder for the next run), anything rejected or in conflict exit 3.
    if once && summary.left > 0 {
        say!(
            "ERROR",
            "x12gate: {} file(s) could not be finished; they wait in the work folder for the next run",
            summary.left
        );
        return Ok(exit::OPERATIONAL);
    }
    Ok(
        if once && (summary.rejected_files > 0 || summary.conflicts > 0) {
            exit::FINDINGS
        } else {
            exit::OK
        },
    )
}

/// Where `serve` listens when neither `--listen` nor `[gateway] metrics` says.
const SERVE_DEFAULT: &str = "127.0.0.1:9101";

/// `serve`: the web page, `/metrics` and `/healthz` until SIGTERM or SIGINT; nothing is
/// processed. Refused at start where the page would be reachable without a token.
pub fn serve(
    config: Config,
    listen: Option<std::net::SocketAddr>,
    allow_actions: bool,
) -> Result<u8, Failure> {
    let addr = listen
        .or(config.gateway.metrics)
        .or_else(|| SERVE_DEFAULT.parse().ok())
        .ok_or_else(|| Failure::Usage(anyhow::anyhow!("no address to listen on")))?;
    let tokens = x12gate::web::Tokens::from_env().map_err(|e| Failure::Usage(e.into()))?;
    let schemas = definitions(Some(&config))?;
    let config = std::sync::Arc::new(config);
    let site = x12gate::web::Site::new(config.clone(), addr, tokens, allow_actions)
        .map_err(|e| Failure::Usage(e.into()))?;
    site.put_in_force(config.clone(), Some(schemas));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Operational(e.into()))?;
    runtime.block_on(async move {
        ignore_hangups();
        let live = std::sync::Arc::new(x12gate::metrics::Live::default());
        let server = x12gate::metrics::bind(addr, config, live, Some(std::sync::Arc::new(site)))
            .await
            .map_err(|e| Failure::Operational(anyhow::anyhow!("{addr}: {e}")))?;
        say!(
            "INFO",
            "x12gate serve: http://{addr}/ ({})",
            if allow_actions {
                "actions allowed to operators with a token"
            } else {
                "read-only"
            }
        );
        tokio::select! {
            r = server => r.map_err(|e| Failure::Operational(e.into()))?,
            () = first_signal() => {}
        }
        Ok::<(), Failure>(())
    })?;
    Ok(exit::OK)
}

/// Resolves at the first SIGINT/SIGTERM, and makes a second one exit at once.
async fn first_signal() {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        say!("WARN", "x12gate: second signal, exiting now; unfinished claims are taken over at once by the next run on this host");
        std::process::exit(130);
    });
}

/// `serve` reads its configuration once, at start: SIGHUP (a closed terminal, a habit of
/// daemons) must not kill it. (`watch` reloads on SIGHUP.)
fn ignore_hangups() {
    if let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::warn!("SIGHUP ignored: serve reads the configuration at start; restart it to apply a change");
            }
        });
    }
}
