//! The four agent-output parsers on arbitrary model text: no panic, bounded one-line
//! rejections, and accepted documents inside their contract.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The checks live in `src/lib.rs`, shared with the corpus test of the main crate.
fuzz_target!(|data: &[u8]| {
    let _ = diag_fuzz::contract_parsers(data);
});
