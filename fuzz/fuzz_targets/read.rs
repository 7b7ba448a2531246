//! Every reader on arbitrary bytes: `Interchanges`, `check::file`, `parse_document`, and
//! the render / re-read round trip of whatever reads. The rules are in `../check.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../check.rs"]
mod check;

fuzz_target!(|data: &[u8]| {
    check::check(data);
});
