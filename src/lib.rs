//! x12gate: an inbound ANSI X12 gateway.
#![forbid(unsafe_code)]

pub mod ack;
pub mod config;
pub mod fingerprint;
pub mod generate;
pub mod inbound;
pub mod input;
pub mod outputs;
pub mod pipeline;
pub mod registry;
pub mod translate;
pub mod validate;
pub mod watch;
pub mod x12;
