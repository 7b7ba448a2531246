//! Throughput of the syntax layer on 20 MB of generated, realistic X12 (see `testdata::generate`).
//!
//! Eight cases on the same bytes, in the same run, so their ratios mean something on any machine:
//! - `memchr_floor`: count the segment terminators with `memchr`. Every parser has to find
//!   them, so this is the floor no tokeniser can go under. (memchr counts with wide vector
//!   compares and never stops at a match, so this runs near memory bandwidth.)
//! - `memchr_each`: visit every terminator's offset, the least a cutter that hands out one
//!   segment at a time can pay.
//! - `tokenise`: cut the whole file into segments (`x12::Segments`), id included.
//! - `envelope_tree`: read every interchange into its envelope tree (`x12::Interchanges`),
//!   which cuts every segment once.
//! - `fingerprints`: the envelope tree, plus each interchange's content fingerprint and each
//!   set's (what `process` hashes to tell a resend from a conflict, for interchanges and for
//!   documents).
//! - `tokenise_and_validate`: envelope validation (`check::file` without definitions),
//!   what a partner with `validation = "envelope"` gets: plain parsing.
//! - `schema_validate_one_thread`: the same plus every set walked against its definition
//!   (`schemas/`), segment by segment and element by element, on this thread alone.
//! - `schema_validate`: the same on every core (sets are walked by worker threads while this
//!   one reads envelopes): what `x12gate validate` does by default on a large file.
//!
//! `cargo bench --bench parse`; criterion prints each case's throughput in MiB/s or GiB/s.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use x12gate::x12::{Interchanges, Limits, Segments};

/// 20 MB (10^6), the size the README quotes; `testdata::file` overshoots by at most one set.
const SIZE: usize = 20_000_000;
const SEED: u64 = 2024;

fn parse(c: &mut Criterion) {
    let input = testdata::file(SEED, SIZE);
    // Every interchange the generator writes declares the same delimiters.
    let delimiters = Interchanges::new(&input, Limits::default())
        .next()
        .and_then(Result::ok)
        .map(|ic| ic.delimiters())
        .expect("the generator writes a readable interchange");
    let terminator = delimiters.segment;
    let mut group = c.benchmark_group("parse_20MB");
    group
        .throughput(Throughput::Bytes(input.len() as u64))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));

    group.bench_function("memchr_floor", |b| {
        b.iter(|| memchr::memchr_iter(terminator, black_box(&input)).count())
    });

    group.bench_function("memchr_each", |b| {
        b.iter(|| memchr::memchr_iter(terminator, black_box(&input)).fold(0, |acc, i| acc ^ i))
    });

    group.bench_function("tokenise", |b| {
        b.iter(|| {
            Segments::new(black_box(&input), 0, input.len(), 1, delimiters)
                .map(|s| s.id.len())
                .sum::<usize>()
        })
    });

    group.bench_function("envelope_tree", |b| {
        b.iter(|| {
            Interchanges::new(black_box(&input), Limits::default())
                .flatten()
                .map(|ic| ic.groups.len())
                .sum::<usize>()
        })
    });

    // What `process` hashes: each interchange's fingerprint and each set's (its document's).
    group.bench_function("fingerprints", |b| {
        b.iter(|| {
            let mut n = 0;
            for ic in Interchanges::new(black_box(&input), Limits::default()).flatten() {
                n += x12gate::fingerprint::fingerprint(&input, &ic, &[]).len();
                for group in &ic.groups {
                    for set in &group.sets {
                        n += x12gate::fingerprint::set_fingerprint(&set).len();
                    }
                }
            }
            n
        })
    });

    group.bench_function("tokenise_and_validate", |b| {
        b.iter(|| {
            x12gate::check::file(black_box(&input), Limits::default(), &Default::default()).len()
        })
    });

    let schemas = x12gate::schema::builtin().expect("the built-in definitions load");
    assert!(
        x12gate::check::file(
            &input,
            Limits::default(),
            &x12gate::check::Checks::definitions(schemas)
        )
        .is_empty(),
        "the generated file validates clean against the definitions"
    );
    group.bench_function("schema_validate_one_thread", |b| {
        b.iter(|| {
            x12gate::check::file_on(
                black_box(&input),
                Limits::default(),
                &x12gate::check::Checks::definitions(schemas),
                1,
            )
            .len()
        })
    });
    group.bench_function("schema_validate", |b| {
        b.iter(|| {
            x12gate::check::file(
                black_box(&input),
                Limits::default(),
                &x12gate::check::Checks::definitions(schemas),
            )
            .len()
        })
    });

    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
