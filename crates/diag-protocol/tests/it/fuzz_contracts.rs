//! Mutation fuzzing of the four agent-output parsers (SPEC §2), beside the generative
//! properties of `protocol_parsers.rs`: each contract's legal document, rendered as a model
//! might (compact, pretty, fenced), then mutated character by character or node by node, and
//! fed to all four parsers. None may panic; every rejection is a bounded message with a reason
//! code and no control characters; every acceptance keeps its contract. CI runs each property
//! with `PROPTEST_CASES=10000`.

use diag_testkit::seeded;

use std::collections::HashSet;

use diag_protocol::{
    json_pointer, parse_composer, parse_executor, parse_plan, parse_verifier, ContractViolation,
    CriticalGap, PlannerMode, QueryRef, RetryContext, Verdict, Verification,
    VerifiedExecutorOutput,
};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Value};

use diag_testkit::mutate;
use mutate::{arb_edit, arb_mutated, edit_text};

const TOOLS: &[&str] = &["search_logs", "query_metrics"];

fn plan() -> Value {
    json!({"schema": "planner_plan_v1", "mode": "NORMAL",
           "hypotheses": [{"id": "h1", "statement": "payment-service is timing out"}],
           "steps": [{"id": "s1", "goal": "find 502s", "tool": "search_logs",
                      "arguments": {"query": "502", "service": "checkout"}},
                     {"id": "s2", "goal": "latency", "tool": "query_metrics",
                      "arguments": {"query": "p99"}}]})
}

fn gap_plan() -> Value {
    json!({"schema": "planner_plan_v1", "mode": "EVIDENCE_GAP_ONLY",
           "steps": [{"id": "s1", "goal": "pool metrics", "tool": "query_metrics",
                      "arguments": {"query": "pool_active"}, "gap_id": "g1"}]})
}

fn executor() -> Value {
    json!({"schema": "executor_evidence_v2",
           "claims": [{"claim_id": "c1", "text": "checkout logged upstream 502s",
                       "bindings": [{"source_invocation_id": "inv-1", "tool_name": "search_logs",
                                     "raw_path": "/matches/0/line", "quote": "upstream returned 502"}]},
                      {"claim_id": "c2", "text": "p99 was 9s",
                       "bindings": [{"source_invocation_id": "inv-2", "tool_name": "query_metrics",
                                     "raw_path": "/result/0/value/1", "quote": "9"}]}],
           "hypotheses": [{"id": "h1", "text": "pool exhausted", "status": "unverified"}],
           "no_evidence": [{"query_ref": "inv-3", "reason": "no matching lines"}],
           "limitations": ["no traces"]})
}

fn verifier() -> Value {
    json!({"schema": "verifier_verdict_v1", "verdict": "PASS", "groundedness": 0.92,
           "claim_checks": [{"claim_id": "c1", "supported": true},
                            {"claim_id": "c2", "supported": false}],
           "facts": [{"fact": "timeouts caused the 502s", "is_critical": true,
                      "verification": "supported", "claim_ids": ["c1"]},
                     {"fact": "pool exhausted", "is_critical": true,
                      "verification": "no_evidence", "claim_ids": []}],
           "allowed_claims": ["c1"], "missing_information": ["pool metrics"],
           "recommendations": ["raise the pool size"], "rationale": "c1 is quoted"})
}

fn composer() -> Value {
    json!({"schema": "composer_answer_v1",
           "answer_markdown": "**Likely cause:** payment-service timeouts (c1).",
           "cited_claims": ["c1"]})
}

fn retry_ctx() -> RetryContext {
    RetryContext {
        prior_verified_output: VerifiedExecutorOutput::default(),
        prior_verified_evidence: vec![],
        critical_gaps: vec![CriticalGap {
            id: "g1".into(),
            fact: "pool exhausted".into(),
            verification: Verification::NoEvidence,
            claim_ids: vec![],
        }],
        completed_queries: vec![QueryRef::new(
            "search_logs",
            &json!({"query": "502", "service": "checkout"}),
        )],
        constraints: vec!["one incremental retry only".into()],
    }
}

fn known() -> Vec<String> {
    vec!["c1".into(), "c2".into()]
}

fn bounded(e: &ContractViolation) -> Result<(), TestCaseError> {
    let msg = e.to_string();
    prop_assert!(msg.chars().count() < 1200, "{} chars", msg.len());
    prop_assert!(!e.reason().is_empty());
    prop_assert!(!msg.chars().any(char::is_control), "{:?}", msg);
    Ok(())
}

/// All four parsers on `text`: no panic, bounded rejections, contracts kept on acceptance.
/// Returns how many parsers accepted it.
fn all_hold(text: &str) -> Result<usize, TestCaseError> {
    let mut accepted = 0;
    let ctx = retry_ctx();
    for (mode, retry) in [
        (PlannerMode::Normal, None),
        (PlannerMode::EvidenceGapOnly, Some(&ctx)),
    ] {
        match parse_plan(text, TOOLS, mode, retry) {
            Ok(p) => {
                accepted += 1;
                prop_assert_eq!(p.mode, mode);
                prop_assert!(!p.steps.is_empty());
                let ids: HashSet<_> = p.steps.iter().map(|s| &s.id).collect();
                prop_assert_eq!(ids.len(), p.steps.len());
                for s in &p.steps {
                    prop_assert!(TOOLS.contains(&s.tool.as_str()));
                    prop_assert!(!s.id.trim().is_empty() && !s.goal.trim().is_empty());
                    if mode == PlannerMode::EvidenceGapOnly {
                        let gap = s.gap_id.as_deref().unwrap_or_default();
                        prop_assert!(ctx.critical_gaps.iter().any(|g| g.id == gap));
                        let q = QueryRef::new(&s.tool, &Value::Object(s.arguments.clone()));
                        prop_assert!(!ctx.completed_queries.contains(&q));
                    } else {
                        prop_assert!(s.gap_id.is_none());
                    }
                }
            }
            Err(e) => bounded(&e)?,
        }
    }
    match parse_executor(text) {
        Ok(out) => {
            accepted += 1;
            prop_assert!(!out.claims.is_empty() || out.is_no_evidence());
            let ids: HashSet<_> = out.claims.iter().map(|c| &c.claim_id).collect();
            prop_assert_eq!(ids.len(), out.claims.len());
            for c in &out.claims {
                prop_assert!(!c.claim_id.trim().is_empty() && !c.text.trim().is_empty());
                for b in &c.bindings {
                    prop_assert!(json_pointer::validate(&b.raw_path).is_ok());
                    prop_assert!(!b.source_invocation_id.trim().is_empty());
                    prop_assert!(!b.tool_name.trim().is_empty() && !b.quote.trim().is_empty());
                }
            }
        }
        Err(e) => bounded(&e)?,
    }
    let ids = known();
    match parse_verifier(text, &ids) {
        Ok(v) => {
            accepted += 1;
            prop_assert!((0.0..=1.0).contains(&v.groundedness));
            prop_assert!(v.allowed_claims.iter().all(|c| ids.contains(c)));
            prop_assert!(v.claim_checks.iter().all(|c| ids.contains(&c.claim_id)));
            prop_assert!(v
                .facts
                .iter()
                .flat_map(|f| &f.claim_ids)
                .all(|c| ids.contains(c)));
            let unique: HashSet<_> = v.allowed_claims.iter().collect();
            prop_assert_eq!(unique.len(), v.allowed_claims.len());
            // Self-consistency (SPEC §2.9).
            for id in &v.allowed_claims {
                prop_assert!(v
                    .claim_checks
                    .iter()
                    .any(|c| &c.claim_id == id && c.supported));
                let contradicted = v.facts.iter().any(|f| {
                    f.verification == Verification::Contradicted && f.claim_ids.contains(id)
                });
                prop_assert!(!contradicted);
            }
            prop_assert!(v.verdict != Verdict::Pass || !v.allowed_claims.is_empty());
        }
        Err(e) => bounded(&e)?,
    }
    let allowed = vec!["c1".to_string()];
    match parse_composer(text, &allowed) {
        Ok(a) => {
            accepted += 1;
            prop_assert!(!a.answer_markdown.trim().is_empty());
            prop_assert!(a.cited_claims.iter().all(|c| allowed.contains(c)));
        }
        Err(e) => bounded(&e)?,
    }
    Ok(accepted)
}

fn seeds() -> Vec<Value> {
    vec![plan(), gap_plan(), executor(), verifier(), composer()]
}

/// Replacement values: the contracts' own vocabulary, wrong types, hostile strings.
fn values() -> BoxedStrategy<Value> {
    let words = select(
        &[
            "planner_plan_v1",
            "executor_evidence_v2",
            "verifier_verdict_v1",
            "composer_answer_v1",
            "NORMAL",
            "EVIDENCE_GAP_ONLY",
            "PASS",
            "LOW_CONFID",
            "REJECT",
            "c1",
            "c2",
            "c9",
            "inv-1",
            "g1",
            "search_logs",
            "/matches/0/line",
            "/~2",
            "",
            " ",
            "\u{0}\u{1b}[2J\u{202e}",
        ][..],
    )
    .prop_map(Value::from);
    let leaf = prop_oneof![
        4 => words,
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => (-2.0f64..2.0).prop_map(Value::from),
        1 => ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,12}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
    .boxed()
}

/// A document as a model might write it.
fn render(doc: &Value, how: u8) -> String {
    match how % 4 {
        0 => doc.to_string(),
        1 => serde_json::to_string_pretty(doc).unwrap(),
        2 => format!(
            "```json\n{}\n```",
            serde_json::to_string_pretty(doc).unwrap()
        ),
        _ => format!("  {doc}\n"),
    }
}

fn arb_node_mutated() -> impl Strategy<Value = Value> {
    let strategies: Vec<BoxedStrategy<Value>> = seeds()
        .into_iter()
        .map(|s| arb_mutated(s, values(), 3).boxed())
        .collect();
    proptest::strategy::Union::new(strategies)
}

proptest! {
    // The case count comes from PROPTEST_CASES (10,000 in CI), 256 by default.
    #![proptest_config(seeded::config(0xD1A6_0401))]

    #[test]
    fn character_mutations_of_legal_documents_keep_every_contract(
        which in 0usize..5,
        how in any::<u8>(),
        edits in prop::collection::vec(arb_edit(), 1..6),
    ) {
        let text = render(&seeds()[which], how);
        all_hold(&edit_text(&text, &edits))?;
    }

    #[test]
    fn node_mutations_of_legal_documents_keep_every_contract(
        doc in arb_node_mutated(),
        how in any::<u8>(),
    ) {
        all_hold(&render(&doc, how))?;
    }
}

/// Each legal seed is accepted by its own parser, so mutations start from inside the contract;
/// and the node mutations reach both sides of it.
#[test]
fn seeds_are_legal_and_mutations_cross_the_contract() {
    for (i, seed) in seeds().iter().enumerate() {
        for how in 0..4 {
            assert_eq!(
                all_hold(&render(seed, how)).unwrap(),
                1,
                "seed {i} rendered {how}"
            );
        }
    }
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut accepted, mut rejected) = (0, 0);
    for _ in 0..1000 {
        let doc = arb_node_mutated().new_tree(&mut runner).unwrap().current();
        match all_hold(&doc.to_string()).unwrap() {
            0 => rejected += 1,
            _ => accepted += 1,
        }
    }
    assert!(
        accepted > 100 && rejected > 100,
        "{accepted} accepted, {rejected} rejected"
    );
}
