//! Acknowledgments: what to answer (TA1, 997, 999) and how it is written.
//!
//! Cut in three: `policy` holds what is ours to choose (which TA1 note codes reject an
//! interchange, which group codes reject a group, which element errors only note a set);
//! `response` decides, from an interchange's tree and findings, the disposition and the
//! content of every acknowledgment; `write` turns that content into X12 in an outbound
//! envelope with control numbers given to it (reserved in the registry by the pipeline, or
//! previewed). The decisions never see bytes and the writer never decides.

pub mod policy;
mod response;
mod write;

pub use response::{
    conflict, respond, Context, Disposition, ElementError, GroupResponse, InterchangeResponse,
    Reason, SegmentError, SetResponse, Status, Ta1,
};
pub use write::{
    numbers_needed, write_acknowledgments, GroupAck, Numbers, NumbersNeeded, Outbound,
    OutboundKind, Plan, ShortOfNumbers,
};
