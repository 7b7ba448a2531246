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
//!
//! A second group, `claims_5MB`, reads one generated 837P (005010X222A1) of 20,000 claims in
//! ten sets: `schema_validate_one_thread` walks them against the guide; `documents` cuts each
//! set into its claims and names each (key, content fingerprint), what `process` does before
//! deciding them (`document::identify_all`).
//!
//! `cargo bench --bench parse`; criterion prints each case's throughput in MiB/s or GiB/s.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use x12gate::x12::{Interchanges, Limits, Segments};

/// 20 MB (10^6), the size docs/figures.md quotes; `testdata::file` overshoots by at most one set.
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
                n += x12gate::fingerprint::fingerprint(&ic, &[]).len();
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
        b.iter(|| on_one_thread(black_box(&input), schemas))
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

/// Findings of `input` against the definitions, its sets walked on this thread alone.
fn on_one_thread(input: &[u8], schemas: &x12gate::schema::Schemas) -> usize {
    x12gate::check::file_on(
        input,
        Limits::default(),
        &x12gate::check::Checks::definitions(schemas),
        1,
    )
    .len()
}

/// An 837P of `sets` sets of `claims` claims, each under its own subscriber.
fn claims_file(sets: usize, claims: usize) -> Vec<u8> {
    let mut out = String::from("ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240305*1130*^*00501*000000101*0*P*:~\nGS*HC*ACME*X12GATE*20240305*1130*101*X*005010X222A1~\n");
    let mut n = 0;
    for s in 1..=sets {
        let mut body = format!("BHT*0019*00*BATCH-{s}*20240305*1130*CH~\nNM1*41*2*ACME CLINIC*****46*ACME01~\nPER*IC*BILLING OFFICE*TE*5555550142~\nNM1*40*2*EXAMPLE HEALTH PLAN*****46*841234567~\nHL*1**20*1~\nPRV*BI*PXC*207Q00000X~\nNM1*85*2*ACME CLINIC*****XX*1234567893~\nN3*1200 MAPLE AVENUE~\nN4*SPRINGFIELD*IL*627040000~\nREF*EI*371234567~\n");
        for c in 0..claims {
            n += 1;
            body.push_str(&format!("HL*{}*1*22*0~\nSBR*P*18*GRP-55120******CI~\nNM1*IL*1*DOE*JANE****MI*S{n:07}~\nNM1*PR*2*EXAMPLE HEALTH PLAN*****PI*841234567~\nCLM*C-{n:07}*{}***11:B:1*Y*A*Y*Y~\nHI*ABK:J029~\nLX*1~\nSV1*HC:99212*95*UN*1***1~\nDTP*472*D8*20240229~\n", c + 2, 100 + n % 50));
        }
        let count = body.matches('~').count() + 2;
        out.push_str(&format!(
            "ST*837*{s:04}*005010X222A1~\n{body}SE*{count}*{s:04}~\n"
        ));
    }
    out.push_str(&format!("GE*{sets}*101~\nIEA*1*000000101~\n"));
    out.into_bytes()
}

fn claims(c: &mut Criterion) {
    let input = claims_file(10, 2_000);
    let schemas = x12gate::schema::builtin().expect("the built-in definitions load");
    let ic = Interchanges::new(&input, Limits::default())
        .next()
        .and_then(Result::ok)
        .expect("the generated 837 reads");
    let def = schemas
        .find(b"005010X222A1", b"837")
        .expect("the 837P guide");
    let documents = |ic: &x12gate::x12::Interchange<'_>| {
        ic.groups
            .iter()
            .flat_map(|g| g.sets.iter())
            .map(|set| x12gate::document::identify_all(ic, &set, def).len())
            .sum::<usize>()
    };
    assert_eq!(documents(&ic), 20_000, "one document per claim");
    let mut group = c.benchmark_group("claims_5MB");
    group
        .throughput(Throughput::Bytes(input.len() as u64))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    group.bench_function("schema_validate_one_thread", |b| {
        b.iter(|| on_one_thread(black_box(&input), schemas))
    });
    group.bench_function("documents", |b| b.iter(|| documents(black_box(&ic))));
    group.finish();
}

criterion_group!(benches, parse, claims);
criterion_main!(benches);
