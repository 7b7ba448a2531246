//! Deterministic X12 test data for x12gate's tests and benchmarks; not part of the product.
//!
//! - [`generate`]: large, realistic files (850, 810, 856 in 004010 and 005010) that validate
//!   with no findings, for benchmarks and load tests; `examples/generate.rs` writes one to
//!   stdout.
//! - [`example`]: valid transaction sets generated from a definition, for property tests.
//!
//! Both draw from one random source (`rng`, SplitMix64) and write through one segment writer
//! (`segments`), so a seed names the same bytes on every machine.
#![forbid(unsafe_code)]

pub mod example;
pub mod generate;
mod rng;
mod segments;

pub use generate::{file, Generator, LineEnding, Options};
