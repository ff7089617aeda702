//! `json_pointer::resolve`: input is `POINTER\nDOCUMENT`. No panic, and wherever the pointer's
//! escapes are valid the result is serde_json's `Value::pointer` result, the very same node.
#![no_main]

use diag::protocol::json_pointer::{self, PointerError};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (pointer, doc) = text.split_once('\n').unwrap_or((text, "null"));
    let Ok(doc) = serde_json::from_str::<Value>(doc) else {
        return;
    };
    let ours = json_pointer::resolve(&doc, pointer);
    assert_eq!(
        json_pointer::validate(pointer).is_ok(),
        !matches!(
            ours,
            Err(PointerError::MissingLeadingSlash | PointerError::InvalidEscape { .. })
        )
    );
    if !matches!(ours, Err(PointerError::InvalidEscape { .. })) {
        let theirs = doc.pointer(pointer).map(|v| v as *const Value);
        assert_eq!(ours.ok().map(|v| v as *const Value), theirs, "{pointer:?}");
    }
});
