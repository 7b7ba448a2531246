//! The steps of a gateway run, each composed once: files processed through the registry,
//! the documents whose original never came released, and what is due delivered. `process`,
//! `watch` and the desk's reprocess each drive a [`Gateway`] and print or log what it hands
//! back; what each step needs is written here and nowhere else. When the steps run is the
//! caller's: `process` runs them once, in that order, with `rejected/` followed between the
//! first and the second (`rejected` sits above this layer); the watcher processes each batch
//! as it comes and releases and delivers on its own timers; the desk processes one file.
//!
//! A gateway borrows its registry: `process` holds one connection for the run, the watcher
//! lends one of its pool to each batch, and the desk works in the caller's.

use std::path::PathBuf;

use crate::config::Config;
use crate::delivery::{Deliverer, Scope, Summary};
use crate::registry::{Registry, RegistryError};
use crate::schema::Schemas;

use super::batch::{self, FileOutcome, Settled};
use super::documents::{self, ReleaseOutcome};
use super::{ProcessError, ProcessOptions, Source, Turn};

/// The configuration, the definitions, a registry connection and how to process: what every
/// step of a run works by.
pub struct Gateway<'g> {
    pub config: &'g Config,
    pub schemas: &'g Schemas,
    pub registry: &'g mut Registry,
    pub options: ProcessOptions,
    /// The first batch claims its keys in this turn (see [`super::ClaimOrder`]).
    turn: Option<Turn>,
}

impl<'g> Gateway<'g> {
    pub fn new(
        config: &'g Config,
        schemas: &'g Schemas,
        registry: &'g mut Registry,
        options: ProcessOptions,
    ) -> Self {
        Gateway {
            config,
            schemas,
            registry,
            options,
            turn: None,
        }
    }

    /// The next [`process`](Self::process) claims its first batch's keys in `turn`: callers
    /// that need the order for every file pass at most [`batch::BATCH_FILES`] files of at
    /// most [`batch::BATCH_BYTES`] together.
    #[must_use]
    pub fn in_turn(mut self, turn: Turn) -> Self {
        self.turn = Some(turn);
        self
    }

    /// Processes `sources` in batches, each file's reports handed to `on_settled` as soon as
    /// they are settled (a large file's a piece at a time), in file order; every file begun
    /// gets at least one hand-over. `Err` only for what stops the run (the registry, outputs
    /// that cannot be written, a stop mid-batch); a file that cannot be read is a
    /// [`Settled::Failed`]. After a stop request that abandons work, the files not yet begun
    /// are handed nothing.
    pub fn process(
        &mut self,
        sources: &[Source],
        on_settled: &mut dyn FnMut(Settled),
    ) -> Result<(), ProcessError> {
        let turn = self.turn.take();
        let mut run = batch::Run {
            config: self.config,
            schemas: self.schemas,
            registry: &mut *self.registry,
            options: &self.options,
        };
        batch::process(&mut run, sources, turn, on_settled)
    }

    /// The documents that waited longer than their partner's `order_wait_hours` for an
    /// original that never came, released (written to `out/` and queued for delivery).
    pub fn release_due(&mut self) -> Result<Vec<ReleaseOutcome>, ProcessError> {
        documents::release(self.config, self.registry, None, &self.options.owner)
    }

    /// One delivery pass over everything due (this run's documents and earlier runs'
    /// retries, `out/`'s files among them), each attempted once unless `stop` says to stop.
    pub fn deliver_due(&mut self, stop: &dyn Fn() -> bool) -> Result<Summary, RegistryError> {
        Deliverer::new(self.config, &self.options.owner).pass(self.registry, Scope::All, stop)
    }
}

/// What [`Gateway::process`] hands over, gathered into one outcome per file, each report
/// keeping at most `kept` of its documents and outputs ([`super::Report::keep_first`]) as soon as
/// it is settled: what a caller that needs every interchange's outcome but not every
/// document's (the watcher) holds of a large file.
pub struct Outcomes {
    kept: usize,
    outcomes: Vec<(usize, FileOutcome)>,
}

impl Outcomes {
    /// Every report whole.
    pub fn all() -> Self {
        Outcomes::keeping(usize::MAX)
    }

    pub fn keeping(kept: usize) -> Self {
        Outcomes {
            kept,
            outcomes: Vec::new(),
        }
    }

    /// Adds what was settled of one of `sources`.
    pub fn add(&mut self, sources: &[Source], settled: Settled) {
        let (file, result) = match settled {
            Settled::Reports {
                file, mut reports, ..
            } => {
                for report in &mut reports {
                    report.keep_first(self.kept);
                }
                (file, Ok(reports))
            }
            Settled::Failed { file, error } => (file, Err(error)),
        };
        match self.outcomes.last_mut() {
            // A large file's later pieces, or the failure that ended it.
            Some((last, outcome)) if *last == file => match (&mut outcome.result, result) {
                (Ok(had), Ok(more)) => had.extend(more),
                (had, result) => *had = result,
            },
            _ => self.outcomes.push((
                file,
                FileOutcome {
                    path: sources
                        .get(file)
                        .map(|s| s.read.clone())
                        .unwrap_or_else(PathBuf::new),
                    result,
                },
            )),
        }
    }

    /// One outcome per file begun, in file order.
    pub fn into_vec(self) -> Vec<FileOutcome> {
        self.outcomes.into_iter().map(|(_, o)| o).collect()
    }
}

/// [`Gateway::process`] gathered into one outcome per file ([`Outcomes::all`]), for callers
/// of the path this had before the gateway.
pub fn process_files(
    sources: &[Source],
    config: &Config,
    schemas: &Schemas,
    registry: &mut Registry,
    options: &ProcessOptions,
    turn: Option<Turn>,
) -> Result<Vec<FileOutcome>, ProcessError> {
    let mut gateway = Gateway::new(config, schemas, registry, options.clone());
    gateway.turn = turn;
    let mut outcomes = Outcomes::all();
    gateway.process(sources, &mut |settled| outcomes.add(sources, settled))?;
    Ok(outcomes.into_vec())
}
