//! `RunFile::parse` on arbitrary text: no panic; an error is one line naming the file; an
//! accepted file round-trips through `to_json`.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The checks live in `src/lib.rs`, shared with the corpus test of the main crate.
fuzz_target!(|data: &[u8]| {
    let _ = diag_fuzz::runfile_parse(data);
});
