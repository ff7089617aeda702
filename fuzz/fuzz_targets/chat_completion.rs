//! `parse_chat_completion` on arbitrary bytes from a model server: no panic, and an error is
//! a classified, bounded message.
#![no_main]

use diag::model::openai::parse_chat_completion;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_chat_completion(data) {
        Ok(r) => {
            assert!(r.content.as_deref() != Some(""));
            assert!(r.tool_calls.iter().all(|c| !c.name.trim().is_empty()));
        }
        Err(e) => assert!(e.message.chars().count() < 600, "{} chars", e.message.len()),
    }
});
