//! One inbound file end to end, synchronously: read, split into interchanges, validate, decide
//! the answer, write the acknowledgments.
//!
//! Today this serves `ack` (decide and print, writing nothing); the registry work adds the
//! claim before deciding and the completion after the outputs are in place.

use chrono::NaiveDateTime;

use crate::ack::{self, InterchangeResponse, Outbound};
use crate::config::{Config, Partner, UnknownPartners};
use crate::registry::{ControlNumbers, RegistryError};
use crate::validate::{self, Finding};
use crate::x12::Interchange;

/// Everything decided about one interchange before anything is written.
#[derive(Debug, Clone)]
pub struct Decision {
    pub partner: Partner,
    /// Whether the sender is a configured partner.
    pub known: bool,
    pub findings: Vec<Finding>,
    pub response: InterchangeResponse,
}

/// `QUAL:ID:ISA13`, the id that ties every log line and record of an interchange together.
pub fn correlation_id(ic: &Interchange<'_>) -> String {
    format!(
        "{}:{}:{}",
        ic.isa.trimmed(5),
        ic.isa.trimmed(6),
        ic.isa.control_number()
    )
}

/// Validates an interchange against the envelope rules and the configuration, and decides its
/// disposition and acknowledgments.
pub fn decide(ic: &Interchange<'_>, config: &Config) -> Decision {
    let (qualifier, id) = (ic.isa.trimmed(5), ic.isa.trimmed(6));
    let configured = config.partner(qualifier, id).cloned();
    let known = configured.is_some();
    let partner = configured.unwrap_or_else(|| Partner::unknown(qualifier, id));
    let accept_unknown = config.gateway.unknown_partners == UnknownPartners::Accept;
    let mut findings = validate::routing(
        ic,
        &config.gateway.id_qualifier,
        &config.gateway.id,
        known || accept_unknown,
    );
    findings.extend(validate::interchange(ic));
    let mut response = ack::respond(ic, &findings, &partner);
    if !(known || accept_unknown) {
        // Nobody we know to answer: the rejection is recorded with its reason, not sent.
        response.ta1 = None;
        response.groups.clear();
    }
    Decision {
        partner,
        known,
        findings,
        response,
    }
}

/// The acknowledgment interchanges for a decision, numbered by `counters`.
pub fn acknowledgments(
    ic: &Interchange<'_>,
    decision: &Decision,
    config: &Config,
    counters: &dyn ControlNumbers,
    now: NaiveDateTime,
) -> Result<Vec<Outbound>, RegistryError> {
    ack::write_acknowledgments(
        &decision.response,
        ic,
        &decision.partner,
        &config.gateway,
        counters,
        now,
    )
}
