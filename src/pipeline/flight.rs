//! One interchange in flight through `process`, and what its steps make: the record each
//! step reads and updates ([`Item`]), the outputs it writes ([`Output`], by [`Folder`] and
//! [`Content`]), and what a round works by ([`Round`]).
//!
//! A room of its own below both `batch` (the steps) and `documents` (the business documents
//! a step decides), so that each of them imports it and neither imports the other.

use std::path::Path;

use crate::ack;
use crate::config::{Config, Partner};
use crate::registry::StoredAck;
use crate::schema::Schemas;
use crate::x12::Interchange;

use super::large::Large;
use super::{ProcessOptions, Report};

/// One interchange on its way through a batch.
pub(super) struct Item<'a> {
    pub utf8: bool,
    pub ic: Interchange<'a>,
    pub partner: Partner,
    pub key: String,
    pub fingerprint: String,
    /// Its sets' fingerprints, taken with its own (none for a large interchange).
    pub sets: crate::fingerprint::SetPrints,
    pub report: Report,
    /// For an interchange larger than a piece: what its first reading took (its `ic` is
    /// then the outline), and its second reading.
    pub large: Option<&'a Large>,
}

pub(super) fn span(item: &Item<'_>) -> tracing::Span {
    // At ERROR level so the span (and its correlation id) is on every line any filter lets through.
    let id = item.report.correlation_id.as_deref().unwrap_or("-");
    tracing::error_span!("interchange", correlation_id = %crate::text::printable(id))
}

/// The longest reason a report, a reason file, the history or the registry keeps: findings
/// quote values from input, and an input value must not grow every record of it.
pub(super) const MAX_REASON: usize = 512;

pub(super) fn bounded_reason(text: &str) -> String {
    crate::text::shortened(text, MAX_REASON).into_owned()
}

/// One output to write: where, what, and for which interchange (and whether it is an
/// acknowledgment, of which kind).
pub(super) struct Output {
    pub item: usize,
    pub dir: Folder,
    pub name: String,
    pub content: Content,
    pub ack: Option<String>,
    /// An acknowledgment's own ISA13, to name it apart from an earlier decision's.
    pub isa13: Option<u32>,
}

/// The folder of the gateway an output goes to (named, not held as a path: an interchange
/// of a million documents has a million outputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Folder {
    Out,
    /// `out/test/`, for the files of a test interchange.
    TestOut,
    Outbox,
}

impl Folder {
    pub fn path(self, gateway: &crate::config::Gateway) -> &Path {
        match self {
            Folder::Out => &gateway.out,
            Folder::TestOut => &gateway.test_out,
            Folder::Outbox => &gateway.outbox,
        }
    }

    /// Where the files of an interchange or document of `usage` go.
    pub fn out(usage: crate::document::Usage) -> Folder {
        match usage {
            crate::document::Usage::Production => Folder::Out,
            crate::document::Usage::Test => Folder::TestOut,
        }
    }
}

/// What an output holds: bytes made already (acknowledgments), or a translation written
/// straight into its file when the outputs are written, so that a large interchange's JSON
/// is never held in memory. (A business document is no file of the round's: its JSON is
/// kept in the registry, [`super::documents::Body`].)
pub(super) enum Content {
    Bytes(Vec<u8>),
    /// A large interchange's 997/999, made as it is written.
    Made(Box<MadeAck>),
    /// The interchange's translation in `form`, with the sets `keep[group][set]` accepts.
    Translation {
        form: crate::translate::Form,
        keep: Vec<Vec<bool>>,
    },
}

/// What makes a large interchange's 997/999 again, the same bytes each time: to its file,
/// then into the registry (a million sets' loops are 20 MB, never held).
#[derive(Clone)]
pub(super) struct MadeAck {
    pub response: std::sync::Arc<ack::InterchangeResponse>,
    pub partner: Partner,
    pub numbers: ack::Numbers,
    pub at: chrono::NaiveDateTime,
}

impl MadeAck {
    pub fn write(
        &self,
        ic: &Interchange<'_>,
        gateway: &crate::config::Gateway,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        let (response, partner) = (&self.response, &self.partner);
        ack::Plan::of(response, ic, partner, gateway, &self.numbers, self.at)
            .map_err(std::io::Error::other)?
            .write_group_acks(ic, out)
    }
}

/// An acknowledgment written, kept for its completion to store.
pub(super) enum Kept {
    Held(StoredAck),
    Made {
        kind: String,
        path: String,
        made: Box<MadeAck>,
    },
}

/// Writes one output's content to `out`.
pub(super) type Writer<'a> =
    Box<dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()> + Sync + 'a>;

/// What one round works by: the configuration, the definitions, how to process, and the
/// lease every claim of it takes.
pub(super) struct Round<'c> {
    pub config: &'c Config,
    pub schemas: &'c Schemas,
    pub options: &'c ProcessOptions,
    pub lease_ms: i64,
    /// Documents decided in one transaction and written in one round of fsyncs, at most.
    pub run_documents: usize,
}
