//! What each fuzz target checks, one function per target. The targets in `fuzz_targets/` call
//! these on libFuzzer's input; the main crate's `tests/it/fuzz_corpus.rs` includes this file and
//! calls them on every file of `corpus/`, so CI runs the very same checks on stable.
//!
//! Each function panics when a property fails and otherwise returns what the entry point
//! under test returned (`None` when the input is not for it, such as text that is not UTF-8).

use diag_core::model::{ChatResponse, ModelError};
use diag_core::protocol::json_pointer::{self, PointerError};
use diag_core::protocol::{
    parse_composer, parse_executor, parse_plan, parse_verifier, ContractViolation, PlannerMode,
    Verdict, Verification,
};
use diag_model_openai::parse_chat_completion;
use diag_runfile::{RunFile, RunFileError};
use serde_json::Value;

/// `RunFile::parse` on arbitrary text: no panic; an error is one line naming the file; an
/// accepted file round-trips through `to_json`.
pub fn runfile_parse(data: &[u8]) -> Option<Result<RunFile, RunFileError>> {
    let text = std::str::from_utf8(data).ok()?;
    let parsed = RunFile::parse(text, "fuzz.json");
    match &parsed {
        Ok(run) => {
            let again = RunFile::parse(&run.to_json(), "fuzz.json").expect("to_json re-parses");
            assert_eq!(&again, run, "to_json does not round-trip");
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.chars().any(char::is_control), "{msg:?}");
            assert!(msg.starts_with("fuzz.json: "), "{msg}");
        }
    }
    Some(parsed)
}

/// `json_pointer::resolve`: input is `POINTER\nDOCUMENT`. No panic, and wherever the
/// pointer's escapes are valid the result is serde_json's `Value::pointer` result, the very
/// same node. Returns whether the pointer resolved.
pub fn json_pointer(data: &[u8]) -> Option<Result<(), PointerError>> {
    let text = std::str::from_utf8(data).ok()?;
    let (pointer, doc) = text.split_once('\n').unwrap_or((text, "null"));
    let doc = serde_json::from_str::<Value>(doc).ok()?;
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
        assert_eq!(
            ours.as_ref().ok().map(|v| *v as *const Value),
            theirs,
            "{pointer:?}"
        );
    }
    Some(ours.map(|_| ()))
}

fn bounded(e: &ContractViolation) {
    let msg = e.to_string();
    assert!(msg.chars().count() < 1200, "{} chars", msg.len());
    assert!(!msg.chars().any(char::is_control), "{msg:?}");
}

/// Which of the four contracts a text satisfied.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Contracts {
    pub plan: bool,
    pub evidence: bool,
    pub verdict: bool,
    pub answer: bool,
}

/// The four agent-output parsers on arbitrary model text: no panic, bounded one-line
/// rejections, and accepted documents inside their contract.
pub fn contract_parsers(data: &[u8]) -> Option<Contracts> {
    let text = std::str::from_utf8(data).ok()?;
    let mut ok = Contracts::default();
    let tools = ["search_logs", "query_metrics"];
    match parse_plan(text, &tools, PlannerMode::Normal, None) {
        Ok(p) => {
            assert!(!p.steps.is_empty());
            ok.plan = true;
        }
        Err(e) => bounded(&e),
    }
    match parse_executor(text) {
        Ok(out) => {
            assert!(!out.claims.is_empty() || out.is_no_evidence());
            ok.evidence = true;
        }
        Err(e) => bounded(&e),
    }
    let ids = vec!["c1".to_string(), "c2".to_string()];
    match parse_verifier(text, &ids) {
        Ok(v) => {
            assert!((0.0..=1.0).contains(&v.groundedness));
            assert!(v.allowed_claims.iter().all(|c| ids.contains(c)));
            for id in &v.allowed_claims {
                assert!(v
                    .claim_checks
                    .iter()
                    .any(|c| &c.claim_id == id && c.supported));
                assert!(!v.facts.iter().any(|f| {
                    f.verification == Verification::Contradicted && f.claim_ids.contains(id)
                }));
            }
            assert!(v.verdict != Verdict::Pass || !v.allowed_claims.is_empty());
            ok.verdict = true;
        }
        Err(e) => bounded(&e),
    }
    match parse_composer(text, &ids[..1]) {
        Ok(a) => {
            assert!(a.cited_claims.iter().all(|c| c == "c1"));
            ok.answer = true;
        }
        Err(e) => bounded(&e),
    }
    Some(ok)
}

/// `parse_chat_completion` on arbitrary bytes from a model server: no panic, and an error is
/// a classified, bounded message.
pub fn chat_completion(data: &[u8]) -> Result<ChatResponse, ModelError> {
    let parsed = parse_chat_completion(data);
    match &parsed {
        Ok(r) => {
            assert!(r.content.as_deref() != Some(""));
            assert!(r.tool_calls.iter().all(|c| !c.name.trim().is_empty()));
        }
        Err(e) => assert!(e.message.chars().count() < 600, "{} chars", e.message.len()),
    }
    parsed
}
