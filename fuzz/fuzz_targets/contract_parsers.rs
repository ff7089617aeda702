//! The four agent-output parsers on arbitrary model text: no panic, bounded one-line
//! rejections, and accepted documents inside their contract.
#![no_main]

use diag::protocol::{
    parse_composer, parse_executor, parse_plan, parse_verifier, ContractViolation, PlannerMode,
};
use libfuzzer_sys::fuzz_target;

fn bounded(e: &ContractViolation) {
    let msg = e.to_string();
    assert!(msg.chars().count() < 1200, "{} chars", msg.len());
    assert!(!msg.chars().any(char::is_control), "{msg:?}");
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let tools = ["search_logs", "query_metrics"];
    match parse_plan(text, &tools, PlannerMode::Normal, None) {
        Ok(p) => assert!(!p.steps.is_empty()),
        Err(e) => bounded(&e),
    }
    match parse_executor(text) {
        Ok(out) => assert!(!out.claims.is_empty() || out.is_no_evidence()),
        Err(e) => bounded(&e),
    }
    let ids = vec!["c1".to_string(), "c2".to_string()];
    match parse_verifier(text, &ids) {
        Ok(v) => {
            assert!((0.0..=1.0).contains(&v.groundedness));
            assert!(v.allowed_claims.iter().all(|c| ids.contains(c)));
        }
        Err(e) => bounded(&e),
    }
    match parse_composer(text, &ids[..1]) {
        Ok(a) => assert!(a.cited_claims.iter().all(|c| c == "c1")),
        Err(e) => bounded(&e),
    }
});
