//! x12gate: an inbound ANSI X12 gateway.
//!
//! It reads interchanges with the delimiters each ISA declares, validates their envelopes,
//! answers them (TA1, 997, 999), translates them to JSON, and makes sure no interchange is
//! processed twice.
//!
//! # Layout
//!
//! - [`x12`]: the syntax layer on `&[u8]` (the `x12` crate, `crates/x12`): delimiters, segments,
//!   the borrowing envelope tree, the segment writer.
//! - [`finding`]: the vocabulary of problems: rules, levels, findings, and the X12 code
//!   lists (TA105, AK905, AK502, AK304, AK403) as types, with the one rule-to-code table.
//! - [`validate`]: the envelope (ISA/GS/ST) and routing rules, the ISB, ISE and received
//!   TA1s' elements, and X12's table of which functional group (GS01) each transaction set
//!   (ST01) belongs to.
//! - [`schema`]: transaction-set definitions and the segment/element rules (AK3/AK4).
//! - [`guides`]: partners' own definitions (`partners.toml` `definitions`), folders read at
//!   start-up and layered over the built-in ones; [`sef`]: SEF implementation guides read
//!   into that format (`definitions import`).
//! - [`check`]: the one place an interchange's findings are put together (routing,
//!   envelope, definitions, the registry's); `validate`, `ack` and `process` all use it.
//! - [`ack`]: what to answer (severity policy and decisions) and the TA1/997/999 writers,
//!   numbered by control numbers given to it.
//! - [`disposition`]: what became of an interchange, the word `ack` decides, `process`
//!   reports and the `registry` stores.
//! - [`document`]: the business document a set carries (its key from the elements its
//!   definition declares, its content fingerprint), the unit of exactly-once delivery.
//! - [`delivery`]: the outbox's deliverer: documents sent to their destinations (HTTP, a
//!   program, a folder) with their key, retried with jittered backoff behind a circuit
//!   breaker, dead-lettered for an operator.
//! - [`translate`]: the lossless JSON form, both ways.
//! - [`fingerprint`]: what makes a resend "the same interchange".
//! - [`registry`]: every SQL statement: claims, leases, control numbers, the audit trail.
//! - [`config`]: `partners.toml`, read into a checked [`config::Config`]; also the words
//!   the file speaks that lower layers cannot (the registry's location, the JSON form, the
//!   output model of destinations in `config/output.rs`).
//! - [`input`], [`outputs`]: bounded reads (a file in pieces of whole interchanges), atomic
//!   writes.
//! - [`keys`]: an interchange's registry key, a key as an operator types it, the correlation
//!   id of log lines.
//! - [`usage`]: production or test (ISA15), as documents, destinations and keys speak it.
//! - [`pipeline`]: files end to end: read → claim → validate/decide → write → complete; and
//!   `ack`'s preview (decided and written in memory, nothing taken).
//! - [`intake`], [`inbound`], [`watch`]: the watcher's work folders (a file is taken by
//!   rename before it is read), where a processed file goes (placed exactly once), and the
//!   directory watcher itself.
//! - [`owner`]: who a process is, and whether the owner of a claim or a work folder is dead.
//! - [`desk`]: the EDI desk's tools on one interchange: `show`, `reprocess` and
//!   `claims release`.
//! - [`audit`]: one history event as `history`, `show` and the page print it: the facts it
//!   recorded then, never the key's state now.
//! - [`metrics`]: `/metrics` (Prometheus) and `/healthz`, from the registry at each scrape.
//! - [`rejected`]: files leave `rejected/` for `archive/` once accepted or resolved.
//! - [`outbound`]: our own documents to partners (810, 855, 856...): the ERP's JSON
//!   checked, named by its business key and enveloped; what a partner's TA1/997/999 says
//!   of what we sent.
//! - [`send`]: one of our documents claimed by its key, numbered, recorded and written
//!   for its partner, a retry answered with the first sending.
//! - [`sent`]: the control numbers already sent (outbox files, stored acknowledgments) and
//!   the counters behind them: what `init`, `check` and every start compare.
//! - [`retention`]: which keys are past their duplicate window, and which files in
//!   `archive/`, `out/`, `outbox/` are past retention.
//! - [`scan`]: the retrofit: old archives read for document keys seen more than once, and
//!   optionally recorded as processed before.
//! - [`text`]: text from input made safe for terminals and logs.
//! - [`time`]: the one clock every time-based decision reads (tests drive it), and registry
//!   times as operators read them.
//! - [`setup`]: the checks before any work (`check`), `init`, and when a registry may be
//!   created.
//!
//! Test data (realistic files for benchmarks, documents generated from a definition for
//! property tests) lives in the workspace crate `crates/testdata`, outside this API.
//!
//! The binary, `src/bin/x12gate/`, holds no decisions: `args` (clap), `commands` (one
//! function per command: arguments in, the library called, lines out), `exit` (exit codes).
//!
//! Data flow: bytes → `x12::Interchanges` → (`registry` claim) → `check` (envelope and
//! routing rules, definitions, groups the registry saw before) → `ack::respond` →
//! (`registry` reserves control numbers) → `ack` writers + `translate` → `outputs` →
//! (`registry` completion).
//!
//! # Layers
//!
//! Lowest first. A module may use (`crate::...`) only modules on the rows above its own:
//! never one below, nor a peer on its own row. The `layers` test (`tests/layers.rs`) reads
//! this table and fails on any `crate::` path in `src/` (tests included) that points the
//! other way, and on a module the table does not name.
//!
//! | row | modules | why here |
//! |----:|---------|----------|
//! | 1 | `text` `words` `time` `cores` `owner` | leaves: text from input, word enums, times, the core count, process owners |
//! | 2 | `x12` | the syntax: what every later row reads |
//! | 3 | `finding` `usage` `disposition` | the words later rows speak: problems, production or test, what became of an interchange |
//! | 4 | `schema` | set definitions and their walker (places its findings with `finding`) |
//! | 5 | `validate` | the envelope and routing rules, over the definitions |
//! | 6 | `config` | `partners.toml`: a leaf over the syntax and the words (the registry's location, the JSON form and the output model are its own) |
//! | 7 | `input` `guides` | bounded reads; partners' own definitions (read where `config` says) |
//! | 8 | `fingerprint` `sef` `translate` | what makes a resend the same; SEF guides; the JSON form |
//! | 9 | `document` `keys` `check` | business documents, interchange keys, an interchange's findings put together |
//! | 10 | `ack` `outputs` `outbound` | what to answer and the writers; atomic writes; our own documents checked, named and enveloped, and what partners' acks say of them |
//! | 11 | `registry` | every SQL statement |
//! | 12 | `sent` `audit` `retention` | over the registry: numbers already sent, one event as printed, what is past retention |
//! | 13 | `delivery` `send` | the outbox's deliverer; our own documents sent exactly once |
//! | 14 | `setup` | the checks before any work, `init` |
//! | 15 | `pipeline` | files end to end |
//! | 16 | `intake` `scan` | the watcher's work folders; the retrofit of old archives |
//! | 17 | `inbound` | where a processed file goes (its work folder is `intake`'s) |
//! | 18 | `rejected` | files leave `rejected/` once accepted |
//! | 19 | `desk` | `show`, `reprocess`, `claims release` (a reprocessed file leaves `rejected/`) |
//! | 20 | `web` | the EDI desk's page (the desk's tools behind its buttons) |
//! | 21 | `metrics` | `/metrics` and `/healthz`, serving the page beside them |
//! | 22 | `watch` | the directory watcher: everything above, composed |
#![forbid(unsafe_code)]
// Issue 39: no function over 100 lines (clippy.toml) or 7 parameters; tests are exempt.
#![cfg_attr(not(test), warn(clippy::too_many_lines, clippy::too_many_arguments))]

pub mod ack;
pub mod audit;
pub mod check;
pub mod config;
pub mod cores;
pub mod delivery;
pub mod desk;
pub mod disposition;
pub mod document;
pub mod finding;
pub mod fingerprint;
pub mod guides;
pub mod inbound;
pub mod input;
pub mod intake;
pub mod keys;
pub mod metrics;
pub mod outbound;
pub mod outputs;
pub mod owner;
pub mod pipeline;
pub mod registry;
pub mod rejected;
pub mod retention;
pub mod scan;
pub mod schema;
pub mod sef;
pub mod send;
pub mod sent;
pub mod setup;
pub mod text;
pub mod time;
pub mod translate;
pub mod usage;
pub mod validate;
pub mod watch;
pub mod web;
mod words;
// The syntax layer is the `x12` crate (crates/x12); re-exported so `crate::x12::...` paths hold.
pub use x12;
