//! One trading partner: `[[partner]]` as the file writes it (flat, one table of keys), the
//! words its keys take, and [`Partner`], the same settings checked and grouped by what
//! reads them (the answer, duplicates, checks, the documents' way out, retention).

use std::path::PathBuf;

use serde::Deserialize;

use super::KeyProblem;

/// Which JSON form sets with a definition take (a partner's `translation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    /// Loops and named elements where a definition exists; the generic form elsewhere.
    #[default]
    Structured,
    /// The generic form everywhere.
    Raw,
}

/// How deeply a partner's transaction sets are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Validation {
    /// Envelopes only (ISA/GS/ST counts, numbers, trailers).
    Envelope,
    /// Envelopes, and each set against its definition when one exists (AK3/AK4).
    Schema,
}

/// Whether a finding of a kind is an error the acknowledgment sends back (`reject`) or a
/// warning it does not (`warn`): the partner's own choice where the standard and its habits
/// part (`unknown_version`, `group_mismatch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Reject,
    Warn,
}

/// How a partner's layout is read: blanks before segments and a missing final terminator
/// are skipped and reported as warnings (`tolerant`, the default), or reject the
/// interchange with TA105 024 (`strict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    #[default]
    Tolerant,
    Strict,
}

/// Which acknowledgment a partner gets for its functional groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum AckKind {
    #[serde(rename = "997")]
    FunctionalAck,
    #[serde(rename = "999")]
    ImplementationAck,
    #[serde(rename = "none")]
    None,
}

/// When a partner gets a TA1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ta1Policy {
    Always,
    OnError,
    /// When ISA14 is 1.
    Requested,
    Never,
}

/// What makes two interchanges the same interchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InterchangeScope {
    /// ISA05/ISA06 + ISA13.
    Sender,
    /// ISA05/ISA06 + ISA07/ISA08 + ISA13, the standard's own uniqueness tuple.
    SenderReceiver,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPartner {
    pub(super) name: String,
    id_qualifier: String,
    id: String,
    #[serde(default = "partner_defaults::duplicate_window_days")]
    duplicate_window_days: u32,
    #[serde(default = "partner_defaults::ack")]
    ack: AckKind,
    #[serde(default = "partner_defaults::ta1")]
    ta1: Ta1Policy,
    #[serde(default = "partner_defaults::yes")]
    check_group_duplicates: bool,
    #[serde(default = "partner_defaults::fingerprint_ignore")]
    fingerprint_ignore: Vec<String>,
    #[serde(default)]
    contact: Option<String>,
    #[serde(default)]
    retention_days: Option<u32>,
    #[serde(default = "partner_defaults::scope")]
    interchange_scope: InterchangeScope,
    #[serde(default = "partner_defaults::yes")]
    ack_accepted_sets: bool,
    #[serde(default)]
    ack_version: Option<String>,
    #[serde(default)]
    delimiters: Option<RawDelimiters>,
    #[serde(default = "partner_defaults::validation")]
    validation: Validation,
    #[serde(default)]
    layout: Layout,
    #[serde(default = "partner_defaults::warn")]
    unknown_version: Severity,
    #[serde(default = "partner_defaults::reject")]
    group_mismatch: Severity,
    #[serde(default)]
    translation: Form,
    #[serde(default)]
    duplicate_documents: DuplicateDocuments,
    #[serde(default = "partner_defaults::order_wait_hours")]
    order_wait_hours: u32,
    #[serde(default)]
    destination: Option<String>,
    #[serde(default)]
    destinations: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    test_destinations: Vec<String>,
    #[serde(default)]
    definitions: Option<PathBuf>,
    #[serde(default)]
    outbound: Option<PathBuf>,
    #[serde(default = "partner_defaults::ack_due_seconds")]
    ack_due_seconds: u64,
    #[serde(default = "partner_defaults::yes")]
    expect_ack: bool,
    #[serde(default)]
    outbound_version: Option<String>,
    #[serde(default)]
    outbound_batch_ms: u64,
    #[serde(default)]
    identity: Option<String>,
}

/// What to do with a business document seen before with the same content, in a new
/// interchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DuplicateDocuments {
    /// Not delivered again (it is recorded, and the interchange acknowledged as usual).
    #[default]
    Skip,
    /// Delivered again, its file saying which interchange first carried it.
    Deliver,
}

/// How long a change waits for its original before it is delivered without it.
pub const DEFAULT_ORDER_WAIT_HOURS: u32 = 24;

/// How long a document we sent waits for the partner's 997/999 before it is overdue: the
/// morning report's "no 997 after 24 hours".
pub const DEFAULT_ACK_DUE_SECONDS: u64 = 86_400;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDelimiters {
    element: char,
    component: char,
    repetition: char,
    segment: char,
    #[serde(default)]
    line_ending: String,
}

mod partner_defaults {
    use super::{AckKind, InterchangeScope, Severity, Ta1Policy, Validation};
    pub fn warn() -> Severity {
        Severity::Warn
    }
    pub fn reject() -> Severity {
        Severity::Reject
    }
    pub fn validation() -> Validation {
        Validation::Schema
    }
    pub fn duplicate_window_days() -> u32 {
        30
    }
    pub fn ack() -> AckKind {
        AckKind::FunctionalAck
    }
    pub fn ta1() -> Ta1Policy {
        Ta1Policy::OnError
    }
    pub fn yes() -> bool {
        true
    }
    pub fn fingerprint_ignore() -> Vec<String> {
        ["ISA09", "ISA10", "GS04", "GS05"]
            .map(String::from)
            .to_vec()
    }
    pub fn scope() -> InterchangeScope {
        InterchangeScope::Sender
    }
    pub fn order_wait_hours() -> u32 {
        super::DEFAULT_ORDER_WAIT_HOURS
    }
    pub fn ack_due_seconds() -> u64 {
        super::DEFAULT_ACK_DUE_SECONDS
    }
}

/// Delimiters we send a partner, when it asks for its own rather than the ones it sent us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboundDelimiters {
    pub delimiters: crate::x12::Delimiters,
    pub line_ending: &'static str,
}

/// One trading partner, as `[[partner]]` declares it, defaults filled in. The file is flat
/// (one table of keys); here the settings are grouped by what reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partner {
    pub name: String,
    pub id_qualifier: String,
    pub id: String,
    /// Who answers for its dead deliveries (before a destination's `owner`).
    pub contact: Option<String>,
    pub ack: PartnerAck,
    pub duplicates: PartnerDuplicates,
    pub checks: PartnerChecks,
    pub output: PartnerOutput,
    pub retention: PartnerRetention,
    pub outbound: PartnerOutbound,
}

/// What we send it of our own (invoices, ship notices, PO acknowledgments), and what we
/// expect back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartnerOutbound {
    /// `outbound`: the folder its interchanges are written to; `None`: the gateway's
    /// outbox. Absolute once the configuration is read.
    pub folder: Option<PathBuf>,
    /// `ack_due_seconds`: how long a sent document waits for its 997/999 before it is
    /// overdue.
    pub ack_due_seconds: u64,
    /// `expect_ack`: false for a partner that never acknowledges (nothing becomes overdue).
    pub expect_ack: bool,
    /// `outbound_version`: the GS08 of the groups we send it, when a document names only a
    /// release's set (`004010/810` gives `004010`); a guide (`005010X222A1`) here applies
    /// to every set it is sent.
    pub version: Option<String>,
    /// `outbound_batch_ms`: how long a document waits for others to the partner to share
    /// its interchange (one ISA13, a group per functional id); 0: an interchange each.
    pub batch_ms: u64,
    /// `identity`: the `[[gateway.identity]]` we are to it (our ISA05/ISA06 and GS02);
    /// `None`: `[gateway] id_qualifier`/`id`.
    pub identity: Option<String>,
}

/// What a partner is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartnerAck {
    /// `ack`: 997, 999 or none for its functional groups.
    pub kind: AckKind,
    /// `ta1`: when it gets a TA1.
    pub ta1: Ta1Policy,
    /// `ack_accepted_sets`: whether accepted sets get their own AK2/AK5 (IK5) loop.
    pub accepted_sets: bool,
    /// `ack_version`: `004010` or `005010`; default: the inbound group's.
    pub version: Option<String>,
    /// `delimiters`: ours to it; default: the inbound interchange's.
    pub delimiters: Option<OutboundDelimiters>,
}

/// What makes a resend the same, and how long it is remembered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartnerDuplicates {
    /// `duplicate_window_days`.
    pub window_days: u32,
    /// `check_group_duplicates`: whether a GS06 used before is a finding.
    pub check_groups: bool,
    /// `fingerprint_ignore`: fields blanked before fingerprinting (`ISA01`..`ISA16`,
    /// `GS01`..`GS08`).
    pub fingerprint_ignore: Vec<String>,
    /// `interchange_scope`: what makes two interchanges the same interchange.
    pub interchange_scope: InterchangeScope,
    /// `duplicate_documents`: a business document resent with the same content, skipped
    /// (the default) or delivered.
    pub documents: DuplicateDocuments,
}

/// How deeply its interchanges are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartnerChecks {
    /// `validation`: envelope only, or sets against their definitions too (the default).
    pub validation: Validation,
    /// `layout`: blanks before segments and a missing final terminator, warnings or
    /// rejections.
    pub layout: Layout,
    /// `unknown_version`: a GS08 that names no X12 release, a warning (the default) or a
    /// rejection of its group (AK905 2).
    pub unknown_version: Severity,
    /// `group_mismatch`: a set under another functional group than its own (an 810 under
    /// `GS*SC`), a rejection (the default) or a warning.
    pub group_mismatch: Severity,
    /// `definitions`: a folder of its own set definitions (its implementation guide),
    /// layered over the built-in ones for its interchanges; absolute. Read by `guides`.
    pub definitions: Option<PathBuf>,
}

/// What becomes of its documents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartnerOutput {
    /// `translation`: structured where a definition exists (the default), or raw.
    pub translation: Form,
    /// `destination`: the `[[destination]]` its documents go to (none: files in `out/`)...
    pub destination: Option<String>,
    /// `destinations`: ...or, for these sets (ST01), another one.
    pub destinations: std::collections::BTreeMap<String, String>,
    /// `test_destinations`: where its test documents (ISA15 `T` or `I`) go, destinations
    /// declared with `usage = "test"`; none: recorded, written in out/test/, sent nowhere.
    pub test_destinations: Vec<String>,
    /// `order_wait_hours`: how long a change (or copy) waits for its original before it
    /// is delivered without.
    pub order_wait_hours: u32,
}

/// How long its files are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartnerRetention {
    /// `retention_days`: how long its files stay in `archive/`, `out/` and `outbox/` once
    /// their key was pruned (`prune --files`); `None` keeps them.
    pub days: Option<u32>,
}

impl Partner {
    /// The settings an unconfigured sender gets when `unknown_partners = "accept"`.
    pub fn unknown(id_qualifier: &str, id: &str) -> Partner {
        Partner {
            name: format!("unknown partner {id_qualifier}:{id}"),
            id_qualifier: id_qualifier.to_string(),
            id: id.to_string(),
            contact: None,
            ack: PartnerAck {
                kind: partner_defaults::ack(),
                ta1: partner_defaults::ta1(),
                accepted_sets: true,
                version: None,
                delimiters: None,
            },
            duplicates: PartnerDuplicates {
                window_days: partner_defaults::duplicate_window_days(),
                check_groups: true,
                fingerprint_ignore: partner_defaults::fingerprint_ignore(),
                interchange_scope: partner_defaults::scope(),
                documents: DuplicateDocuments::default(),
            },
            checks: PartnerChecks {
                validation: partner_defaults::validation(),
                layout: Layout::default(),
                unknown_version: partner_defaults::warn(),
                group_mismatch: partner_defaults::reject(),
                definitions: None,
            },
            output: PartnerOutput {
                translation: Form::default(),
                destination: None,
                destinations: std::collections::BTreeMap::new(),
                test_destinations: Vec::new(),
                order_wait_hours: DEFAULT_ORDER_WAIT_HOURS,
            },
            retention: PartnerRetention { days: None },
            outbound: PartnerOutbound {
                folder: None,
                ack_due_seconds: DEFAULT_ACK_DUE_SECONDS,
                expect_ack: true,
                version: None,
                batch_ms: 0,
                identity: None,
            },
        }
    }

    /// `QUAL:ID`, the partner's name in keys, logs and file names.
    pub fn key(&self) -> String {
        format!("{}:{}", self.id_qualifier, self.id)
    }
}

const FINGERPRINT_FIELDS: &[&str] = &[
    "ISA01", "ISA02", "ISA03", "ISA04", "ISA09", "ISA10", "ISA11", "ISA12", "ISA14", "ISA15",
    "ISA16", "GS01", "GS02", "GS03", "GS04", "GS05", "GS07", "GS08",
];

/// Reads one `[[partner]]`, a paragraph per key, top to bottom like the table it reads.
pub(super) fn partner(raw: RawPartner) -> Result<Partner, KeyProblem> {
    if raw.id_qualifier.len() != 2 {
        return Err(KeyProblem::new(
            "id_qualifier",
            format!("{:?}: expected 2 characters (ISA05)", raw.id_qualifier),
        ));
    }
    if raw.id.trim().is_empty() || raw.id.len() > 15 || raw.id != raw.id.trim() {
        return Err(KeyProblem::new(
            "id",
            format!(
                "{:?}: expected 1 to 15 characters without padding (ISA06, trimmed)",
                raw.id
            ),
        ));
    }
    for f in &raw.fingerprint_ignore {
        if !FINGERPRINT_FIELDS.contains(&f.as_str()) {
            return Err(KeyProblem::new(
                "fingerprint_ignore",
                format!("{f:?}: expected one of {}", FINGERPRINT_FIELDS.join(", ")),
            ));
        }
    }
    if let Some(v) = &raw.ack_version {
        if !matches!(v.as_str(), "004010" | "005010") {
            return Err(KeyProblem::new(
                "ack_version",
                format!("{v:?}: expected \"004010\" or \"005010\""),
            ));
        }
    }
    if let Some(v) = &raw.outbound_version {
        if !crate::schema::names_a_release(v.as_bytes()) {
            return Err(KeyProblem::new(
                "outbound_version",
                format!("{v:?}: expected an X12 release such as \"004010\" or a guide such as \"005010X222A1\""),
            ));
        }
    }
    let delimiters = raw.delimiters.as_ref().map(outbound).transpose()?;
    Ok(Partner {
        name: raw.name,
        id_qualifier: raw.id_qualifier,
        id: raw.id,
        contact: raw.contact,
        ack: PartnerAck {
            kind: raw.ack,
            ta1: raw.ta1,
            accepted_sets: raw.ack_accepted_sets,
            version: raw.ack_version,
            delimiters,
        },
        duplicates: PartnerDuplicates {
            window_days: raw.duplicate_window_days,
            check_groups: raw.check_group_duplicates,
            fingerprint_ignore: raw.fingerprint_ignore,
            interchange_scope: raw.interchange_scope,
            documents: raw.duplicate_documents,
        },
        checks: PartnerChecks {
            validation: raw.validation,
            layout: raw.layout,
            unknown_version: raw.unknown_version,
            group_mismatch: raw.group_mismatch,
            definitions: raw.definitions,
        },
        output: PartnerOutput {
            translation: raw.translation,
            destination: raw.destination,
            destinations: raw.destinations,
            test_destinations: raw.test_destinations,
            order_wait_hours: raw.order_wait_hours,
        },
        retention: PartnerRetention {
            days: raw.retention_days,
        },
        outbound: PartnerOutbound {
            folder: raw.outbound,
            ack_due_seconds: raw.ack_due_seconds,
            expect_ack: raw.expect_ack,
            version: raw.outbound_version,
            batch_ms: raw.outbound_batch_ms,
            identity: raw.identity,
        },
    })
}

/// The delimiters a partner asks our acknowledgments to use.
fn outbound(d: &RawDelimiters) -> Result<OutboundDelimiters, KeyProblem> {
    let byte = |c: char, key: &str| {
        u8::try_from(c)
            .ok()
            .filter(|b| b.is_ascii() && !b.is_ascii_alphanumeric() && *b != b' ')
            .ok_or_else(|| {
                KeyProblem::new(
                    key,
                    format!("{c:?}: expected one ASCII punctuation character"),
                )
            })
    };
    let delimiters = crate::x12::Delimiters {
        element: byte(d.element, "delimiters.element")?,
        component: byte(d.component, "delimiters.component")?,
        repetition: Some(byte(d.repetition, "delimiters.repetition")?),
        segment: byte(d.segment, "delimiters.segment").or_else(|e| {
            if d.segment == '\n' {
                Ok(b'\n')
            } else {
                Err(e)
            }
        })?,
    };
    if !delimiters.are_distinct() {
        return Err(KeyProblem::new(
            "delimiters",
            "the four delimiters must all differ",
        ));
    }
    let line_ending = match d.line_ending.as_str() {
        "" => "",
        "\n" => "\n",
        "\r\n" => "\r\n",
        other => {
            return Err(KeyProblem::new(
                "delimiters.line_ending",
                format!("{other:?}: expected \"\", \"\\n\" or \"\\r\\n\""),
            ))
        }
    };
    Ok(OutboundDelimiters {
        delimiters,
        line_ending,
    })
}
