//! Integration tests, one binary: each module owns one area.

mod acks;
mod batching;
mod cli;
mod delivery;
mod documents;
mod fixtures;
mod fuzz_corpus;
mod guides;
mod intake;
mod layers;
mod names;
mod outbound;
mod pg_server;
mod postgres;
mod process;
mod props;
mod readme;
mod real;
mod schemas;
mod service;
mod setup;
mod surprises;
mod util;
mod watch;
mod web;
