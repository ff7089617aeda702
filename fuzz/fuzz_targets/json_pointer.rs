//! `json_pointer::resolve`: input is `POINTER\nDOCUMENT`. No panic, and wherever the pointer's
//! escapes are valid the result is serde_json's `Value::pointer` result, the very same node.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The checks live in `src/lib.rs`, shared with the corpus test of the main crate.
fuzz_target!(|data: &[u8]| {
    let _ = diag_fuzz::json_pointer(data);
});
