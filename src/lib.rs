//! x12gate: an inbound ANSI X12 gateway.
#![forbid(unsafe_code)]

pub mod x12;
