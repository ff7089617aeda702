//! `parse_chat_completion` on arbitrary bytes from a model server: no panic, and an error is
//! a classified, bounded message.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The checks live in `src/lib.rs`, shared with the corpus test of the main crate.
fuzz_target!(|data: &[u8]| {
    let _ = diag_fuzz::chat_completion(data);
});
