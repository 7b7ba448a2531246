//! The command line as clap reads it: every command, its arguments and their help.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "x12gate",
    version,
    about = "Inbound ANSI X12 gateway",
    after_help = "Dispositions: accepted, partial, rejected, duplicate, conflict, in_progress.\n\
Exit codes: 0 everything accepted or replayed (validate: no findings or warnings only; \
check: no findings); 3 anything rejected, partial, in conflict or in progress (validate: \
findings other than warnings); 1 operational failure \
(I/O, database), nothing marked done; 2 usage or configuration error (a file that does not \
exist or is not a regular file included); 130 stopped by SIGINT/SIGTERM. `watch --once`: 1 \
when files could not be finished, else 3 when it rejected any, else 0."
)]
pub struct Cli {
    /// Configuration file [default: ./partners.toml, used when present]
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Log lines on stderr as text or as JSON objects (filter with RUST_LOG, default warn)
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// X12 to JSON on stdout: sets with a definition in the structured form (loops, named
    /// elements), others in the lossless generic form; no registry
    Parse {
        /// An X12 file (`-`: standard input)
        file: PathBuf,
        /// The generic form for every set (segments in order, elements by position)
        #[arg(long)]
        raw: bool,
    },
    /// Partners' implementation guides: `import` an SEF file, `list` what is loaded, `check`
    /// a folder
    Definitions {
        #[command(subcommand)]
        action: DefinitionsAction,
    },
    /// The JSON of `parse` (either form) back to X12 on stdout
    Render {
        /// The JSON document (`-`: standard input)
        file: PathBuf,
    },
    /// Process files once through the registry: claim, validate, translate, acknowledge
    Process {
        /// X12 files (`-`: standard input)
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// One JSON object per interchange per line
        #[arg(long)]
        json: bool,
        /// Report `in_progress` instead of waiting when another process holds an interchange
        #[arg(long)]
        no_wait: bool,
        /// Leave the documents queued for their destinations (`deliver` or `watch` sends
        /// them) instead of attempting each once before exiting
        #[arg(long)]
        no_deliver: bool,
        /// Bytes read at a time (an interchange larger than this is read in parts): for
        /// tests of large files with small ones
        #[arg(long, hide = true)]
        window: Option<usize>,
        /// Move counters the outbox is ahead of (a registry restored from a backup) past
        /// the numbers found there, recorded in the history, instead of refusing to start
        #[arg(long)]
        repair_counters: bool,
    },
    /// Watch the inbox until SIGINT/SIGTERM; finish in-flight files, then exit 0
    Watch {
        /// Rescan the inbox every poll_ms instead of relying on file events (network file systems)
        #[arg(long)]
        poll: bool,
        /// Process what is in the inbox now, then exit (for cron)
        #[arg(long)]
        once: bool,
        /// Let operators with a token (X12GATE_UI_TOKEN) reprocess, release, discard and
        /// retry from the web page served on [gateway] metrics
        #[arg(long)]
        allow_actions: bool,
        /// Move counters the outbox is ahead of (a registry restored from a backup) past
        /// the numbers found there, recorded in the history, instead of refusing to start
        #[arg(long)]
        repair_counters: bool,
    },
    /// The web page for the EDI desk (and /metrics, /healthz), without processing anything:
    /// on --listen, else [gateway] metrics, else 127.0.0.1:9101
    Serve {
        /// Address and port to listen on; other than loopback, X12GATE_UI_TOKEN must be set
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Let operators with a token reprocess, release, discard and retry
        #[arg(long)]
        allow_actions: bool,
    },
    /// The audit trail: one line per decision taken (and notes: init, placed, released)
    History {
        /// Only this sender: QUAL:ID, or ID when one configured partner has it
        #[arg(long)]
        partner: Option<String>,
        /// Only this ISA13 (the number may be unpadded: 101 is 000000101)
        #[arg(long)]
        control_number: Option<String>,
        /// Only this disposition: accepted, partial, rejected, duplicate, conflict, in_progress
        #[arg(long)]
        disposition: Option<String>,
        /// Only events at or after this time: RFC 3339, a UTC time (2026-12-01T08:00:00) or a UTC date (YYYY-MM-DD)
        #[arg(long)]
        since: Option<String>,
        /// Only events at or before this time: RFC 3339, a UTC time or a UTC date (its end)
        #[arg(long)]
        until: Option<String>,
        /// One JSON object per event per line, with every field of `process --json` and the time
        #[arg(long)]
        json: bool,
    },
    /// Counts by partner: interchanges by disposition, decisions by kind (duplicates and
    /// conflicts included), and the rejected-file backlog
    Stats {
        /// One JSON object
        #[arg(long)]
        json: bool,
    },
    /// Remove keys older than each partner's duplicate_window_days; with --files, list the
    /// files past their partner's retention_days instead (deleted with --apply)
    Prune {
        /// Files in archive/, out/ and outbox/ past retention (never one a key in the
        /// registry still refers to), instead of keys
        #[arg(long)]
        files: bool,
        /// With --files: delete them (without it, only list them)
        #[arg(long, requires = "files")]
        apply: bool,
    },
    /// Create the folders and the registry of a new gateway (or rebuild a lost registry:
    /// the counters start above the highest control numbers found in the outbox)
    Init {
        /// The first ISA13 to send to every partner (at least; the outbox may say higher)
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=999_999_999))]
        isa13_from: Option<u32>,
        /// The first GS06 to send to every partner (at least)
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=999_999_999))]
        gs06_from: Option<u32>,
    },
    /// Check the configuration, folders and registry without changing anything (process
    /// and watch run the same checks first)
    Check,
    /// The metrics `watch` serves at /metrics, printed once (for cron and node-exporter's
    /// textfile collector)
    Metrics,
    /// A consistent copy of the registry, safe while `watch` runs (copying the file is not:
    /// the registry is in WAL mode)
    Backup {
        /// Where to write the copy (must not exist)
        dest: PathBuf,
    },
    /// Everything about one interchange: claim, contents seen, findings, acknowledgments
    /// sent (with our ISA13/GS06), outputs, where its file is, history
    Show {
        /// QUAL:ID:ISA13, or ID:ISA13 when the id is unique; the number may be unpadded
        key: String,
        /// The same as one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Process rejected interchanges again from their stored file (after adding a partner,
    /// fixing a limit or a definition), as a new attempt with fresh acknowledgments
    Reprocess {
        /// Interchange keys: QUAL:ID:ISA13, or ID:ISA13 when one sender has that id
        #[arg(required = true)]
        keys: Vec<String>,
        /// Read this copy of the interchange instead of the stored one
        #[arg(long)]
        file: Option<PathBuf>,
        /// Also reprocess an accepted interchange: the ERP may receive it twice
        #[arg(long)]
        force: bool,
        /// One JSON object per interchange per line
        #[arg(long)]
        json: bool,
    },
    /// Send our own documents (the ERP's JSON: an 810, 855, 856...) to their partners, each
    /// exactly once: a retry of a document sent before gets the first sending's numbers and
    /// file, the same key with other content is refused (exit 3)
    Send {
        /// JSON documents (`-`: standard input)
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The partner (QUAL:ID) of documents that name none
        #[arg(long)]
        partner: Option<String>,
        /// The ERP's own idempotency key, recorded beside the document's key
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Check and name each document as `send` would, and stop there: nothing is taken,
        /// recorded or written (exit 3 when one would be refused)
        #[arg(long)]
        check: bool,
        /// Print on stderr, at the end, where the time went: rendering, validation, the
        /// registry, the files
        #[arg(long)]
        timings: bool,
        /// One JSON object per document per line
        #[arg(long)]
        json: bool,
    },
    /// Our documents sent and where the partner's acknowledgment of each stands: waiting,
    /// overdue, accepted, accepted_with_errors, partially_accepted, rejected, not_expected
    Sent {
        /// Only those in this state
        #[arg(long, value_parser = ["waiting", "overdue", "accepted", "accepted_with_errors", "partially_accepted", "rejected", "not_expected", "writing"])]
        state: Option<String>,
        /// Only this partner's: QUAL:ID
        #[arg(long)]
        partner: Option<String>,
        /// Only those sent at or after this time: RFC 3339, a UTC time or a UTC date
        #[arg(long)]
        since: Option<String>,
        /// Acknowledgments of the partners that matched nothing we sent, instead
        #[arg(long)]
        unmatched: bool,
        /// One JSON object per document per line
        #[arg(long)]
        json: bool,
    },
    /// Write one of our documents again for a partner that lost it: the same bytes, the
    /// same numbers, recorded in the history
    Resend {
        /// The document's key, as `send` and `sent` print it
        key: String,
        /// Re-envelope it with the partner's next ISA13 and GS06 (when the partner asks for
        /// that rather than the same interchange again)
        #[arg(long)]
        new_numbers: bool,
        #[arg(long)]
        json: bool,
    },
    /// Send the documents queued for destinations (HTTP, a program, a folder) that are due:
    /// each at most once, or with --drain until none is queued or retrying
    Deliver {
        /// Keep going, waiting for retries to fall due, until nothing is queued or retrying
        #[arg(long)]
        drain: bool,
        /// With --drain: stop after this many seconds
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
        /// The counts as one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Deliveries to destinations and where each stands (queued, retrying, dead, delivered),
    /// with the owner of the dead ones; `deliveries retry KEY|--all-dead` puts dead ones back,
    /// `deliveries discard KEY` lets them go
    Deliveries {
        #[command(subcommand)]
        action: Option<DeliveriesAction>,
        /// Only those in this state
        #[arg(long, value_parser = ["queued", "retrying", "blocked", "dead", "delivered", "discarded"])]
        state: Option<String>,
        /// Only this sender's: QUAL:ID
        #[arg(long)]
        partner: Option<String>,
        /// One JSON object per delivery per line
        #[arg(long)]
        json: bool,
    },
    /// Record the business system's reference for a delivered document (an order number);
    /// a resend of the document or of its interchange reports it
    Confirm {
        /// The document key, QUAL:ID:SET:DOCUMENT:EVENT:VERSION
        key: String,
        /// The reference
        #[arg(long = "ref", value_name = "REF")]
        reference: String,
        /// Replace a different reference already recorded (the ERP's answer or an earlier
        /// confirm); the history keeps both
        #[arg(long)]
        force: bool,
    },
    /// Business documents held (conflicts) and waiting (changes without their original);
    /// `documents release KEY` delivers them, `documents discard KEY` drops them
    Documents {
        #[command(subcommand)]
        action: Option<DocumentsAction>,
        /// Only conflicts held for an operator
        #[arg(long)]
        held: bool,
        /// Only changes (and copies) waiting for their original
        #[arg(long)]
        waiting: bool,
        /// Every document sighting, delivered or not
        #[arg(long)]
        all: bool,
        /// Only the sightings of this document key
        #[arg(long)]
        key: Option<String>,
        /// Only the sightings of this interchange (its registry key, as `history` and the
        /// report's duplicate_of give it), in its order: all of them, where `process`
        /// lists an interchange's first 1,000
        #[arg(long, value_name = "KEY", conflicts_with_all = ["held", "waiting", "all"])]
        interchange: Option<String>,
        /// One JSON object per document per line
        #[arg(long)]
        json: bool,
    },
    /// Old archives (files and folders, recursively) read for document keys seen in more
    /// than one interchange: duplicates probably booked twice, and conflicts; nothing is
    /// claimed, translated or acknowledged (exit 3 when any is found)
    Scan {
        /// Files or folders
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// One JSON object per repeated key, then per partner and set, then the totals
        #[arg(long)]
        json: bool,
        /// Record what was read as processed before (interchange keys, document keys), so a
        /// later resend is caught; never replaces what the registry knows
        #[arg(long)]
        backfill: bool,
    },
    /// Unfinished claims (in flight or failed); `claims release KEY` frees one
    Claims {
        #[command(subcommand)]
        action: Option<ClaimsAction>,
        /// One JSON object per claim per line
        #[arg(long)]
        json: bool,
    },
    /// Files waiting in the rejected folder; `rejected resolve FILE|KEY` moves one that was
    /// handled otherwise to the archive
    Rejected {
        #[command(subcommand)]
        action: RejectedAction,
    },
    /// Print the TA1/997/999 that `process` would send for FILE; writes nothing
    Ack {
        /// An X12 file (`-`: standard input)
        file: PathBuf,
    },
    /// Outbound control-number counters (our ISA13 and GS06) per partner
    Counter {
        #[command(subcommand)]
        action: CounterAction,
    },
    /// Diagnostics with byte offset, segment position and X12 code: envelope rules, and
    /// every set with a definition checked against it; no registry
    Validate {
        /// X12 files (`-`: standard input)
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// One JSON object per finding per line
        #[arg(long)]
        json: bool,
        /// Envelope rules only: skip the transaction-set definitions (a partner's
        /// `validation = "envelope"`)
        #[arg(long)]
        envelope: bool,
    },
}

#[derive(Subcommand)]
pub enum DefinitionsAction {
    /// Read an SEF 1.x implementation guide into a folder of set definitions (for a
    /// partner's `definitions`); what it cannot apply is listed as warnings
    Import {
        /// The SEF file
        file: PathBuf,
        /// The guide's name: its folder is guides/NAME
        #[arg(long = "as", value_name = "NAME")]
        name: String,
        /// The folder to write instead of guides/NAME (relative to the current folder)
        #[arg(long, value_name = "DIR")]
        into: Option<PathBuf>,
    },
    /// The definitions built in, and what each partner's `definitions` folder loads, by
    /// release and set
    List,
    /// Check that a folder of definitions loads; each fault names its file and line
    Check {
        /// The folder (e.g. guides/NAME)
        dir: PathBuf,
    },
}

#[derive(Subcommand)]
pub enum ClaimsAction {
    /// Mark KEY's claim failed so the next attempt takes it over at once; refused while its
    /// owner is a live process on this host, and for another host's owner without --force
    Release {
        /// QUAL:ID:ISA13 (the control number may be unpadded)
        key: String,
        /// Release a claim whose owner is on another host (make sure it is dead)
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
pub enum RejectedAction {
    /// Move a file of the rejected folder (and its reason) to the archive, the note in the
    /// history of each interchange it holds
    Resolve {
        /// The file (a path, or its name in the rejected folder), or an interchange key
        /// (QUAL:ID:ISA13) whose file is there
        target: String,
        /// What was done about it (recorded in the history)
        #[arg(long)]
        note: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum DeliveriesAction {
    /// Put dead deliveries back in the queue, attempts and age reset
    Retry {
        /// The document key whose dead deliveries are retried
        #[arg(required_unless_present = "all_dead", conflicts_with = "all_dead")]
        key: Option<String>,
        /// Every dead delivery
        #[arg(long)]
        all_dead: bool,
    },
    /// Let KEY's dead deliveries go unsent (a document the destination refuses for good):
    /// the PO's later documents blocked behind them are released, in order
    Discard {
        /// The document key whose dead deliveries are let go
        key: String,
        /// Why (recorded in the history)
        #[arg(long)]
        note: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum DocumentsAction {
    /// Deliver KEY's held (or waiting) documents now, each in its own file
    Release {
        /// The document key, QUAL:ID:SET:DOCUMENT:EVENT:VERSION
        key: String,
    },
    /// Drop KEY's held (or waiting) documents: recorded, never delivered
    Discard {
        /// The document key
        key: String,
    },
    /// Print the JSON of KEY's latest sighting, byte for byte as its destinations are
    /// given it (the registry keeps every document's JSON)
    Body {
        /// The document key
        key: String,
        /// Another sighting of it: its `id`, as `documents --json` gives it
        #[arg(long)]
        id: Option<i64>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum CounterAction {
    /// Print the last numbers handed out to PARTNER (QUAL:ID)
    Show {
        /// A configured partner, QUAL:ID
        partner: String,
    },
    /// Take the next COUNT numbers and print them, one per line (9 digits, as sent)
    Next {
        /// A configured partner, QUAL:ID
        partner: String,
        /// Which counter: our ISA13 or our GS06
        #[arg(long, value_enum, default_value = "isa13")]
        kind: CounterKind,
        /// How many numbers to take
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Set a counter, so that the next number handed out is VALUE + 1
    Set {
        /// A configured partner, QUAL:ID
        partner: String,
        /// isa13 or gs06
        #[arg(value_enum)]
        kind: CounterKind,
        /// The number just sent: the next one handed out is VALUE + 1 (1 to 999999999)
        #[arg(value_parser = clap::value_parser!(u32).range(1..=999_999_999))]
        value: u32,
        /// Set it below the number last sent (those numbers would be sent again)
        #[arg(long)]
        force: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum CounterKind {
    Isa13,
    Gs06,
}

impl From<CounterKind> for x12gate::registry::Counter {
    fn from(k: CounterKind) -> Self {
        match k {
            CounterKind::Isa13 => x12gate::registry::Counter::Interchange,
            CounterKind::Gs06 => x12gate::registry::Counter::Group,
        }
    }
}

/// Whether the arguments ask for JSON logs, read before clap could parse them (to report
/// clap's own errors in that form).
pub fn wants_json_logs() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .any(|w| w[0] == "--log-format" && w[1] == "json")
        || args.iter().any(|a| a == "--log-format=json")
}
