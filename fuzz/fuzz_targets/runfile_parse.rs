//! `RunFile::parse` on arbitrary text: no panic; an error is one line naming the file; an
//! accepted file round-trips through `to_json`.
#![no_main]

use diag::runfile::RunFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match RunFile::parse(text, "fuzz.json") {
        Ok(run) => {
            let again = RunFile::parse(&run.to_json(), "fuzz.json").expect("to_json re-parses");
            assert_eq!(again, run, "to_json does not round-trip");
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.chars().any(char::is_control), "{msg:?}");
            assert!(msg.starts_with("fuzz.json: "), "{msg}");
        }
    }
});
