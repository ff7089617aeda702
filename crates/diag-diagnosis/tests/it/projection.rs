//! Component tests of everything downstream of the Gatekeeper: the verified projection, the
//! Verifier and Composer inputs (and their byte-identical reuse), Retry Prepare, safe
//! rendering and both Fallback templates. Leak tests plant distinctive marker strings in
//! material that must not pass and assert they never appear.

use diag_testkit::builders::{binding, inv};
use diag_testkit::seeded;

use diag_core::clock::Timestamp;
use diag_core::graph::{Detail, Event};
use diag_core::protocol::gatekeeper::normalize;
use diag_core::protocol::{
    ceiling, validate_run, Claim, CriticalGap, ExecutorHypothesis, ExecutorOutput, Fact,
    GateStatus, GatekeeperRaw, InvocationStatus, NoEvidence, QueryRef, RetryContext,
    ToolInvocation, Verdict, Verification, VerifiedClaim, VerifiedEvidence, VerifiedExecutorOutput,
    VerifierResult,
};
use diag_diagnosis::composer_input::{
    allowed_claims, answer_material_from_state, composer_input_from_state, AnswerMaterial,
    ComposerInputError,
};
use diag_diagnosis::fallback::pre_verification_failure;
use diag_diagnosis::render::{MAX_ANSWER_BYTES, TRUNCATION_MARKER};
use diag_diagnosis::retry_prepare::{
    completed_queries, critical_gaps, prepare_retry_from_state, RetryPrepareError, CONSTRAINTS,
};
use diag_diagnosis::verified_input::VerifierInputError;
use diag_diagnosis::{
    build_composer_input, build_verified_input, build_verifier_input, composer_input_json,
    consulted_tools, fallback_post, fallback_pre, prepare_retry, render_answer,
    run_id_as_placeholder, verifier_input_json, AllowedClaim, DiagnosisState, ProjectionError,
    Status, RUN_ID_PLACEHOLDER,
};
use proptest::prelude::*;
use serde_json::{json, Value};

const RUN: &str = "run-A";

// Markers for material that must never get past the stage under test.
const FAILED_CLAIM_MARKER: &str = "ZZFAILEDCLAIMZZ";
const HYPOTHESIS_MARKER: &str = "ZZHYPOTHESISZZ";
const NO_EVIDENCE_MARKER: &str = "ZZNOEVIDENCEZZ";
const LIMITATION_MARKER: &str = "ZZLIMITATIONZZ";
const OTHER_FIELD_MARKER: &str = "ZZUNREFERENCEDTOOLZZ";
const UNREFERENCED_INV_MARKER: &str = "ZZUNUSEDINVOCATIONZZ";
const NOT_ALLOWED_MARKER: &str = "ZZNOTALLOWEDZZ";
const HALF_BOUND_MARKER: &str = "ZZHALFBOUNDZZ";

/// A recorded run: two log lines in one invocation (one of them also has a marked field the
/// claims never reference), one metrics invocation, and one invocation nobody cites.
fn invocations() -> Vec<ToolInvocation> {
    vec![
        inv(
            RUN,
            "inv-1",
            "search_logs",
            json!({"query": "502"}),
            json!({"matches": [
                {"line": "checkout:  upstream returned\n502", "file": OTHER_FIELD_MARKER},
                {"line": "payment-service pool exhausted (42 waiters)"}]}),
        ),
        inv(
            RUN,
            "inv-2",
            "query_metrics",
            json!({"q": "p99"}),
            json!({"result": [{"value": "p99 latency 30s"}]}),
        ),
        inv(
            RUN,
            "inv-3",
            "search_runbooks",
            json!({"q": "pool"}),
            json!({"hits": [{"text": UNREFERENCED_INV_MARKER}]}),
        ),
    ]
}

/// c1, c3 and c4 are bound correctly, c2 only by a wrong quote, c5 by both a good and a bad
/// binding (refused whole); plus hypotheses, no-evidence entries and limitations that must
/// never be projected.
fn mixed_output() -> ExecutorOutput {
    ExecutorOutput {
        claims: vec![
            Claim {
                claim_id: "c1".into(),
                text: "checkout saw upstream 502s".into(),
                bindings: vec![binding(
                    "inv-1",
                    "search_logs",
                    "/matches/0/line",
                    "upstream returned 502",
                )],
            },
            Claim {
                claim_id: "c2".into(),
                text: format!("{FAILED_CLAIM_MARKER} database down"),
                bindings: vec![binding(
                    "inv-1",
                    "search_logs",
                    "/matches/0/line",
                    "database down",
                )],
            },
            Claim {
                claim_id: "c3".into(),
                text: "p99 latency reached 30s".into(),
                bindings: vec![binding(
                    "inv-2",
                    "query_metrics",
                    "/result/0/value",
                    "p99 latency 30s",
                )],
            },
            Claim {
                claim_id: "c4".into(),
                text: "payment pool exhausted".into(),
                bindings: vec![binding(
                    "inv-1",
                    "search_logs",
                    "/matches/1/line",
                    "pool exhausted",
                )],
            },
            Claim {
                claim_id: "c5".into(),
                text: format!("{HALF_BOUND_MARKER} payment pool exhausted by a batch job"),
                bindings: vec![
                    binding("inv-1", "search_logs", "/matches/1/line", "pool exhausted"),
                    binding("inv-9", "search_logs", "/matches/1/line", "pool exhausted"),
                ],
            },
        ],
        hypotheses: vec![ExecutorHypothesis {
            id: "h1".into(),
            text: HYPOTHESIS_MARKER.into(),
            status: "unverified".into(),
        }],
        no_evidence: vec![NoEvidence {
            query_ref: "inv-3".into(),
            reason: NO_EVIDENCE_MARKER.into(),
        }],
        limitations: vec![LIMITATION_MARKER.into()],
    }
}

fn gate(output: &ExecutorOutput) -> (GatekeeperRaw, GateStatus) {
    let raw = validate_run(RUN, output, &invocations());
    let status = normalize(Some(&raw));
    (raw, status)
}

fn assert_absent(text: &str, markers: &[&str]) {
    for m in markers {
        assert!(!text.contains(m), "{m} leaked into: {text}");
    }
}

const PROJECTION_MARKERS: [&str; 7] = [
    FAILED_CLAIM_MARKER,
    HALF_BOUND_MARKER,
    HYPOTHESIS_MARKER,
    NO_EVIDENCE_MARKER,
    LIMITATION_MARKER,
    OTHER_FIELD_MARKER,
    UNREFERENCED_INV_MARKER,
];

// ---- verified projection --------------------------------------------------------------------

/// Only accepted claims cross: c5's passed binding does not carry it, since its other binding
/// failed (all bindings or nothing, SPEC §2.9).
#[test]
fn only_claims_with_passed_bindings_survive_the_projection() {
    let out = mixed_output();
    let (raw, status) = gate(&out);
    assert_eq!(status, GateStatus::LowConfid);
    let (verified, evidence) = build_verified_input(&out, &raw, status).unwrap();
    let ids: Vec<&str> = verified
        .claims
        .iter()
        .map(|c| c.claim_id.as_str())
        .collect();
    assert_eq!(ids, ["c1", "c3", "c4"]);
    assert_eq!(
        evidence,
        vec![
            VerifiedEvidence {
                claim_id: "c1".into(),
                source_invocation_id: "inv-1".into(),
                tool_name: "search_logs".into(),
                raw_path: "/matches/0/line".into(),
                matched_text: "upstream returned\n502".into(),
            },
            VerifiedEvidence {
                claim_id: "c3".into(),
                source_invocation_id: "inv-2".into(),
                tool_name: "query_metrics".into(),
                raw_path: "/result/0/value".into(),
                matched_text: "p99 latency 30s".into(),
            },
            VerifiedEvidence {
                claim_id: "c4".into(),
                source_invocation_id: "inv-1".into(),
                tool_name: "search_logs".into(),
                raw_path: "/matches/1/line".into(),
                matched_text: "pool exhausted".into(),
            },
        ]
    );
}

#[test]
fn hypotheses_failed_bindings_and_unreferenced_output_are_absent() {
    let out = mixed_output();
    let (raw, status) = gate(&out);
    let (verified, evidence) = build_verified_input(&out, &raw, status).unwrap();
    let text = serde_json::to_string(&(verified, evidence)).unwrap();
    assert_absent(&text, &PROJECTION_MARKERS);
    assert!(!text.contains("inv-9"), "a failed binding leaked");
}

#[test]
fn projection_requires_a_continuable_status() {
    let out = mixed_output();
    let (raw, _) = gate(&out);
    assert_eq!(
        build_verified_input(&out, &raw, GateStatus::Reject),
        Err(ProjectionError::NotContinuable(GateStatus::Reject))
    );
    // A PASS that the raw result does not back up is not trusted either.
    assert_eq!(
        build_verified_input(&out, &raw, GateStatus::Pass),
        Err(ProjectionError::StatusMismatch)
    );
}

#[test]
fn low_confid_with_zero_passed_bindings_cannot_be_projected() {
    let out = ExecutorOutput {
        limitations: vec!["metrics endpoint not configured".into()],
        ..ExecutorOutput::default()
    };
    let (raw, status) = gate(&out);
    assert_eq!(status, GateStatus::LowConfid);
    assert_eq!(
        build_verified_input(&out, &raw, status),
        Err(ProjectionError::NoPassedBinding)
    );
}

#[test]
fn passed_bindings_that_match_no_claim_leave_nothing_to_project() {
    let out = mixed_output();
    let (raw, status) = gate(&out);
    // The same raw result against another output: the tuple match finds nothing.
    let mut other = mixed_output();
    for c in &mut other.claims {
        for b in &mut c.bindings {
            b.raw_path.push_str("/x");
        }
    }
    assert_eq!(
        build_verified_input(&other, &raw, status),
        Err(ProjectionError::NoClaimSurvived)
    );
}

#[test]
fn a_passed_binding_is_matched_on_all_four_fields() {
    let out = mixed_output();
    let (mut raw, status) = gate(&out);
    // Move c3's passed binding to another tool name: c3 must not survive.
    for cb in &mut raw.checked_bindings {
        if cb.claim_id == "c3" {
            cb.tool_name = "search_logs".into();
        }
    }
    let (verified, evidence) = build_verified_input(&out, &raw, status).unwrap();
    assert!(verified.claims.iter().all(|c| c.claim_id != "c3"));
    assert!(evidence.iter().all(|e| e.claim_id != "c3"));
}

#[test]
fn a_repeated_claim_id_fails_the_projection() {
    let mut out = mixed_output();
    out.claims[2].claim_id = "c1".into();
    let raw = GatekeeperRaw {
        result: Some("fail".into()),
        severity: Some("low-confid".into()),
        ..gate(&mixed_output()).0
    };
    assert_eq!(
        build_verified_input(&out, &raw, GateStatus::LowConfid),
        Err(ProjectionError::DuplicateClaimId)
    );
}

#[test]
fn a_full_pass_projects_every_claim() {
    let mut out = mixed_output();
    out.claims.remove(4);
    out.claims.remove(1);
    let (raw, status) = gate(&out);
    assert_eq!(status, GateStatus::Pass);
    let (verified, evidence) = build_verified_input(&out, &raw, status).unwrap();
    assert_eq!(verified.claims.len(), 3);
    assert_eq!(evidence.len(), 3);
}

// ---- verifier input -------------------------------------------------------------------------

fn verified_state() -> DiagnosisState {
    let out = mixed_output();
    let (raw, status) = gate(&out);
    let (verified, evidence) = build_verified_input(&out, &raw, status).unwrap();
    let mut s = DiagnosisState::new(
        "why does checkout return 502?",
        diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0)),
    );
    s.round.executor_output = Some(out);
    s.round.gatekeeper_status = Some(status);
    s.round.ceiling = Some(ceiling(status));
    s.round.gatekeeper_raw = Some(raw);
    s.round.verified_executor_output = Some(verified);
    s.round.verified_evidence = evidence;
    s
}

#[test]
fn the_verifier_input_holds_only_its_declared_fields() {
    let s = verified_state();
    let text = verifier_input_json(&mut s.clone()).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "ceiling",
            "diagnosis_context",
            "gatekeeper_audit",
            "refused_claims",
            "run_clock",
            "verified_evidence",
            "verified_executor_output"
        ]
    );
    assert_eq!(v["ceiling"], "LOW_CONFID");
    assert_eq!(v["gatekeeper_audit"]["failed"], 2);
    // The refused claims, by id and codes only.
    assert_eq!(
        v["refused_claims"],
        json!([
            {"claim_id": "c2", "code": "failed_binding", "binding_failures": ["quote_not_found"]},
            {"claim_id": "c5", "code": "failed_binding",
             "binding_failures": ["unknown_invocation"]}])
    );
    assert_absent(&text, &PROJECTION_MARKERS);
    // The checked-binding list (with its paths, sources and cut text) is not part of it.
    assert!(!text.contains("checked_bindings") && !text.contains("inv-9"));
}

#[test]
fn a_verifier_retry_gets_byte_identical_input() {
    let mut s = verified_state();
    let first = verifier_input_json(&mut s).unwrap();
    assert_eq!(s.round.verifier_input.as_deref(), Some(first.as_str()));
    // Whatever moves in state between attempts, the retry sends the stored bytes.
    s.round.verified_evidence.clear();
    s.round.ceiling = Some(Verdict::Pass);
    let second = verifier_input_json(&mut s).unwrap();
    assert_eq!(first.as_bytes(), second.as_bytes());
}

#[test]
fn a_new_evidence_round_clears_the_stored_inputs() {
    let mut s = verified_state();
    verifier_input_json(&mut s).unwrap();
    s.round.composer_input = Some("{}".into());
    s.begin_evidence_round();
    assert_eq!(s.round.verifier_input, None);
    assert_eq!(s.round.composer_input, None);
}

#[test]
fn round_two_shows_the_verifier_only_the_critical_gaps_of_the_retry_context() {
    let mut s = verified_state();
    let prior = VerifiedEvidence {
        claim_id: "c1".into(),
        source_invocation_id: "inv-1".into(),
        tool_name: "search_logs".into(),
        raw_path: "/old".into(),
        matched_text: "ZZPRIORROUNDZZ".into(),
    };
    s.retry_context = Some(RetryContext {
        prior_verified_output: VerifiedExecutorOutput::default(),
        prior_verified_evidence: vec![prior],
        critical_gaps: vec![CriticalGap {
            id: "g1".into(),
            fact: "pool metrics".into(),
            verification: Verification::NoEvidence,
            claim_ids: vec![],
        }],
        completed_queries: vec![QueryRef::new("search_logs", &json!({"q": "ZZQUERYZZ"}))],
        constraints: CONSTRAINTS.iter().map(|c| c.to_string()).collect(),
    });
    // Round 1 never shows a retry context, even if one is lying in state.
    assert!(build_verifier_input(&s).unwrap().retry_context.is_none());
    s.round_number = 2;
    let input = build_verifier_input(&s).unwrap();
    let rc = input.retry_context.as_ref().unwrap();
    assert_eq!(rc.round, 2);
    assert_eq!(rc.critical_gaps[0].id, "g1");
    let text = serde_json::to_string(&input).unwrap();
    assert_absent(&text, &["ZZPRIORROUNDZZ", "ZZQUERYZZ"]);
}

#[test]
fn the_verifier_input_needs_verified_material() {
    let mut s = verified_state();
    s.round.verified_executor_output = None;
    assert_eq!(
        verifier_input_json(&mut s),
        Err(VerifierInputError::MissingVerifiedOutput)
    );
    assert_eq!(s.round.verifier_input, None);
    let mut s = verified_state();
    s.round.ceiling = None;
    assert_eq!(
        build_verifier_input(&s).map(|_| ()),
        Err(VerifierInputError::MissingCeiling)
    );
    let mut s = verified_state();
    s.round.gatekeeper_raw = None;
    assert_eq!(
        build_verifier_input(&s).map(|_| ()),
        Err(VerifierInputError::MissingGatekeeperResult)
    );
}

// ---- retry prepare --------------------------------------------------------------------------

fn fact(text: &str, is_critical: bool, verification: Verification) -> Fact {
    Fact {
        fact: text.into(),
        is_critical,
        verification,
        claim_ids: vec!["c1".into()],
    }
}

fn verifier_result(facts: Vec<Fact>, allowed: &[&str]) -> VerifierResult {
    VerifierResult {
        verdict: Verdict::LowConfid,
        groundedness: 0.5,
        claim_checks: vec![],
        facts,
        allowed_claims: allowed.iter().map(|s| s.to_string()).collect(),
        missing_information: vec!["payment-service pool metrics".into()],
        recommendations: vec!["raise the pool size".into()],
        rationale: "ZZRATIONALEZZ".into(),
    }
}

#[test]
fn only_critical_gaps_are_listed_numbered_in_fact_order() {
    let r = verifier_result(
        vec![
            fact("supported critical", true, Verification::Supported),
            fact("gap A", true, Verification::NoEvidence),
            fact("non-critical gap", false, Verification::NoEvidence),
            fact("contradicted", true, Verification::Contradicted),
            fact("gap B", true, Verification::IndirectSupport),
            fact(
                "non-critical indirect",
                false,
                Verification::IndirectSupport,
            ),
        ],
        &["c1"],
    );
    let gaps = critical_gaps(&r);
    let got: Vec<(&str, &str, Verification)> = gaps
        .iter()
        .map(|g| (g.id.as_str(), g.fact.as_str(), g.verification))
        .collect();
    assert_eq!(
        got,
        [
            ("g1", "gap A", Verification::NoEvidence),
            ("g2", "gap B", Verification::IndirectSupport)
        ]
    );
}

#[test]
fn completed_queries_are_this_runs_ok_calls_deduplicated_and_sorted() {
    let mut invs = invocations();
    // The same query again with keys in another order: one reference.
    invs.push(inv(
        RUN,
        "inv-4",
        "search_logs",
        serde_json::from_str(r#"{"query":"502"}"#).unwrap(),
        json!({}),
    ));
    invs.push(inv(
        RUN,
        "inv-5",
        "query_metrics",
        json!({"b": 1, "a": {"y": 2, "x": 1}}),
        json!({}),
    ));
    invs.push(inv(
        RUN,
        "inv-6",
        "query_metrics",
        serde_json::from_str(r#"{"a":{"x":1,"y":2},"b":1}"#).unwrap(),
        json!({}),
    ));
    let mut errored = inv(
        RUN,
        "inv-7",
        "search_logs",
        json!({"query": "timeout"}),
        json!({}),
    );
    errored.status = InvocationStatus::Error;
    let mut blocked = inv(RUN, "inv-8", "rm_rf", json!({}), json!({}));
    blocked.status = InvocationStatus::Blocked;
    invs.push(errored);
    invs.push(blocked);
    invs.push(inv(
        "run-B",
        "inv-1",
        "search_logs",
        json!({"query": "other run"}),
        json!({}),
    ));

    let got = completed_queries(RUN, &invs);
    let want = vec![
        QueryRef::new("query_metrics", &json!({"a": {"x": 1, "y": 2}, "b": 1})),
        QueryRef::new("query_metrics", &json!({"q": "p99"})),
        QueryRef::new("search_logs", &json!({"query": "502"})),
        QueryRef::new("search_runbooks", &json!({"q": "pool"})),
    ];
    assert_eq!(got, want);
    assert_eq!(got[0].arguments, r#"{"a":{"x":1,"y":2},"b":1}"#);
}

#[test]
fn the_retry_context_carries_prior_verified_material_and_the_fixed_constraints() {
    let s = verified_state();
    let r = verifier_result(
        vec![fact("pool metrics", true, Verification::NoEvidence)],
        &["c1"],
    );
    let ctx = prepare_retry(
        &r,
        s.round.verified_executor_output.as_ref().unwrap(),
        &s.round.verified_evidence,
        RUN,
        &invocations(),
    );
    assert_eq!(
        ctx.prior_verified_output,
        s.round.verified_executor_output.unwrap()
    );
    assert_eq!(ctx.prior_verified_evidence, s.round.verified_evidence);
    assert_eq!(ctx.critical_gaps.len(), 1);
    assert_eq!(ctx.constraints.len(), 3);
    let all = ctx.constraints.join(" ");
    assert!(all.contains("one incremental evidence retry"));
    assert!(all.contains("Do not repeat any completed query"));
    assert!(all.contains("complete executor_evidence_v2 snapshot"));
    assert!(all.contains("prior verified claim"));
    let text = serde_json::to_string(&ctx).unwrap();
    assert_absent(&text, &PROJECTION_MARKERS);
    assert_absent(&text, &["ZZRATIONALEZZ"]);
}

#[test]
fn retry_prepare_from_state_needs_a_verdict_and_a_critical_gap() {
    let mut s = verified_state();
    assert_eq!(
        prepare_retry_from_state(&s, RUN, &invocations()),
        Err(RetryPrepareError::MissingVerifierResult)
    );
    s.round.verifier_result = Some(verifier_result(
        vec![fact("x", false, Verification::NoEvidence)],
        &["c1"],
    ));
    assert_eq!(
        prepare_retry_from_state(&s, RUN, &invocations()),
        Err(RetryPrepareError::NoCriticalGap)
    );
    s.round.verifier_result = Some(verifier_result(
        vec![fact("x", true, Verification::IndirectSupport)],
        &["c1"],
    ));
    let ctx = prepare_retry_from_state(&s, RUN, &invocations()).unwrap();
    assert_eq!(ctx.critical_gaps[0].id, "g1");
    assert_eq!(ctx.completed_queries.len(), 3);
}

// ---- composer input -------------------------------------------------------------------------

/// The answer material of a state over this run's invocations.
fn material(s: &DiagnosisState) -> AnswerMaterial {
    answer_material_from_state(s, RUN, &invocations()).expect("a verifier result and projection")
}

/// The serialized Composer input of a state, from its material.
fn input_json(s: &mut DiagnosisState) -> Result<String, ComposerInputError> {
    let m = material(s);
    composer_input_json(s, &m)
}

fn allowed_state(allowed: &[&str]) -> DiagnosisState {
    let mut s = verified_state();
    // Plant a marker in a verified claim the Verifier will not allow.
    if let Some(v) = s.round.verified_executor_output.as_mut() {
        v.claims[1].text = format!("{NOT_ALLOWED_MARKER} latency");
    }
    if let Some(e) = s
        .round
        .verified_evidence
        .iter_mut()
        .find(|e| e.claim_id == "c3")
    {
        e.matched_text = format!("{NOT_ALLOWED_MARKER} text");
    }
    s.round.verifier_result = Some(verifier_result(vec![], allowed));
    s.round.verifier_model_verdict = Some(Verdict::Pass);
    s.round.effective_verdict = Some(Verdict::LowConfid);
    s
}

#[test]
fn the_composer_sees_only_verifier_allowed_claims_with_their_evidence() {
    let mut s = allowed_state(&["c4", "c1"]);
    let text = input_json(&mut s).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "allowed_claims",
            "effective_verdict",
            "missing_information",
            "recommendations",
            "run_clock"
        ]
    );
    assert_eq!(
        v["run_clock"],
        json!({"now": "1970-01-01T00:00:00.000Z", "today": "1970-01-01"}),
        "the state's clock"
    );
    assert_eq!(v["effective_verdict"], "LOW_CONFID");
    let ids: Vec<&str> = v["allowed_claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["claim_id"].as_str().unwrap())
        .collect();
    // Projection order, not the Verifier's listing order.
    assert_eq!(ids, ["c1", "c4"]);
    assert_eq!(
        v["allowed_claims"][0]["evidence"][0],
        json!({"source_invocation_id": "inv-1", "tool_name": "search_logs",
               "raw_path": "/matches/0/line", "matched_text": "upstream returned\n502"})
    );
    assert_absent(&text, &[NOT_ALLOWED_MARKER, "ZZRATIONALEZZ"]);
    assert_absent(&text, &PROJECTION_MARKERS);
}

#[test]
fn allowed_ids_outside_the_projection_are_dropped() {
    let s = allowed_state(&["c1", "c2", "c99", "c1"]);
    let input = composer_input_from_state(&s, RUN, &invocations()).unwrap();
    let ids: Vec<&str> = input
        .allowed_claims
        .iter()
        .map(|c| c.claim_id.as_str())
        .collect();
    assert_eq!(ids, ["c1"]);
}

#[test]
fn a_composer_retry_gets_byte_identical_input() {
    let mut s = allowed_state(&["c1"]);
    let first = input_json(&mut s).unwrap();
    s.round.effective_verdict = Some(Verdict::Pass);
    s.round.verifier_result = Some(verifier_result(vec![], &["c1", "c3", "c4"]));
    assert_eq!(input_json(&mut s).unwrap().as_bytes(), first.as_bytes());
}

#[test]
fn verifier_free_text_reaches_the_material_item_by_item_under_the_token_rule() {
    let mut s = allowed_state(&["c1", "c4"]);
    if let Some(r) = s.round.verifier_result.as_mut() {
        r.missing_information = vec![
            "payment-service pool metrics".into(),
            // `pg_stat_activity` is in no allowed claim's evidence, nor in the question.
            "the pg_stat_activity rows".into(),
        ];
        r.recommendations = vec![
            "raise the pool size above 42".into(),
            // 30s is the evidence of c3, which is verified but not allowed.
            "expect p99 under 30s".into(),
            "page the owner of checkout".into(),
        ];
    }
    let m = material(&s);
    assert_eq!(m.missing_information, ["payment-service pool metrics"]);
    assert_eq!(
        m.recommendations,
        ["raise the pool size above 42", "page the owner of checkout"]
    );
    assert_eq!(m.dropped_items, 2);
    let text = composer_input_json(&mut s, &m).unwrap();
    assert_absent(&text, &["pg_stat_activity", "30s"]);
    assert_eq!(s.round.dropped_items, 2);
    // The answer context is the question, the allowed claims and their evidence.
    for (token, bound) in [
        ("502", true),
        ("42", true),
        ("pool exhausted", true),
        ("30", false),
    ] {
        assert_eq!(m.context.first_unbound(token).is_none(), bound, "{token}");
    }
}

#[test]
fn the_composer_input_needs_an_effective_verdict() {
    let mut s = allowed_state(&["c1"]);
    s.round.effective_verdict = None;
    assert_eq!(
        input_json(&mut s),
        Err(ComposerInputError::MissingEffectiveVerdict)
    );
}

// ---- safe rendering -------------------------------------------------------------------------

fn assert_renders(cases: &[(&str, &str)]) {
    for (input, want) in cases {
        assert_eq!(render_answer(input), *want, "{input:?}");
    }
}

#[test]
fn render_strips_csi_sequences() {
    assert_renders(&[
        ("a\u{1b}[31mred\u{1b}[0m b", "ared b"),
        ("\u{1b}[2J\u{1b}[H\u{1b}[?25lclear", "clear"),
        ("x\u{1b}[1;2;3 qy", "xy"),
        ("8-bit \u{9b}31mcsi", "8-bit csi"),
        ("unterminated \u{1b}[12", "unterminated "),
    ]);
}

#[test]
fn render_strips_osc_sequences_with_either_terminator() {
    assert_renders(&[
        ("\u{1b}]0;evil title\u{7}text", "text"),
        (
            "\u{1b}]8;;https://evil.example\u{1b}\\click\u{1b}]8;;\u{1b}\\",
            "click",
        ),
        ("\u{9d}0;title\u{9c}after", "after"),
        ("before\u{1b}]52;c;ZGF0YQ== never terminated", "before"),
    ]);
}

#[test]
fn render_strips_dcs_apc_pm_sos_and_short_escapes() {
    assert_renders(&[
        ("a\u{1b}Pq#0;2;0;0;0\u{1b}\\b", "ab"),
        ("a\u{1b}_apc payload\u{1b}\\b", "ab"),
        ("a\u{1b}^pm\u{7}b", "ab"),
        ("a\u{1b}Xsos\u{9c}b", "ab"),
        ("a\u{1b}cb", "ab"),
        ("a\u{1b}(Bb", "ab"),
        ("a\u{1b}7\u{1b}8b", "ab"),
        ("trailing\u{1b}", "trailing"),
    ]);
}

#[test]
fn render_drops_c0_and_c1_controls_but_keeps_newline_and_tab() {
    assert_renders(&[
        ("a\u{0}b\u{7}c\u{8}d\u{b}e\u{c}f\u{7f}g", "abcdefg"),
        ("a\u{85}b\u{8d}c\u{9c}d", "abcd"),
        ("col1\tcol2\nrow2", "col1\tcol2\nrow2"),
    ]);
}

#[test]
fn render_normalizes_carriage_returns() {
    assert_renders(&[
        ("one\r\ntwo\r\n", "one\ntwo\n"),
        ("safe\rOVERWRITE", "safe\nOVERWRITE"),
        ("a\r\r\nb", "a\n\nb"),
    ]);
}

#[test]
fn render_drops_bidi_overrides_and_isolates() {
    let mut input = String::from("x");
    for c in ('\u{202a}'..='\u{202e}').chain('\u{2066}'..='\u{2069}') {
        input.push(c);
        input.push('y');
    }
    assert_eq!(render_answer(&input), format!("x{}", "y".repeat(9)));
    // Ordinary right-to-left text stays.
    assert_renders(&[("שלום", "שלום")]);
}

#[test]
fn render_keeps_ordinary_markdown_unchanged() {
    let md = "## Cause\n\n- **payment-service** pool exhausted (`c1`)\n  > quote\n\n| a | b |\n";
    assert_eq!(render_answer(md), md);
}

#[test]
fn render_truncates_long_answers_at_a_char_boundary_with_a_marker() {
    let long = "é".repeat(MAX_ANSWER_BYTES);
    let out = render_answer(&long);
    assert!(out.len() <= MAX_ANSWER_BYTES, "{}", out.len());
    assert!(out.ends_with(TRUNCATION_MARKER));
    assert!(out
        .trim_end_matches(TRUNCATION_MARKER)
        .trim_end()
        .chars()
        .all(|c| c == 'é'));

    let exact = "a".repeat(MAX_ANSWER_BYTES);
    assert_eq!(render_answer(&exact), exact);
    let one_more = "a".repeat(MAX_ANSWER_BYTES + 1);
    assert!(render_answer(&one_more).ends_with(TRUNCATION_MARKER));
    // Control sequences do not count toward the bound.
    let padded = "\u{1b}[0m".repeat(MAX_ANSWER_BYTES) + "end";
    assert_eq!(render_answer(&padded), "end");
}

#[test]
fn render_handles_a_huge_input_quickly() {
    let huge = "x\u{1b}[1m".repeat(5_000_000);
    let out = render_answer(&huge);
    assert!(out.len() <= MAX_ANSWER_BYTES);
    assert!(out.ends_with(TRUNCATION_MARKER));
}

proptest! {
    #![proptest_config(seeded::config(0xD1A6_0201))]

    #[test]
    fn rendered_text_is_bounded_and_free_of_controls(s in "\\PC{0,200}|[\u{0}-\u{a0}\u{202a}-\u{202e}\u{2066}-\u{2069}a]{0,200}") {
        let out = render_answer(&s);
        prop_assert!(out.len() <= MAX_ANSWER_BYTES);
        for c in out.chars() {
            prop_assert!(c == '\n' || c == '\t' || !c.is_control(), "{:?}", c);
            let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            prop_assert!(!bidi, "bidi control {:?}", c);
        }
    }
}

// ---- fallbacks ------------------------------------------------------------------------------

#[test]
fn fallback_pre_names_the_stage_the_reason_and_the_tools() {
    let tools = vec![
        "search_logs".to_string(),
        "query_metrics".to_string(),
        "search_logs".to_string(),
    ];
    let out = fallback_pre("verifier", "invalid_output", &tools, RUN);
    assert!(out.contains("Verifier"), "{out}");
    assert!(out.contains("`invalid_output`"));
    assert!(out.contains("`search_logs`, `query_metrics`."));
    assert_eq!(out.matches("`search_logs`").count(), 1);
    assert!(out.contains("Next steps"));
    assert!(out.contains("- Inspect this run with `diag trace run-A` to see each stage"));
    let none = fallback_pre("planner", "retryable_failed", &[], RUN);
    assert!(none.contains("Tools consulted:** none."));
}

#[test]
fn fallback_pre_names_its_run_and_replay_compares_it_as_a_placeholder() {
    let out = fallback_pre("planner", "retryable_failed", &[], "run-7f3a");
    assert!(out.contains("`diag trace run-7f3a`"), "{out}");
    assert!(!out.contains(RUN_ID_PLACEHOLDER));
    // The same answer under another run's id, or as stored before it named its id, compares
    // equal once each run's own id is the placeholder.
    let other = fallback_pre("planner", "retryable_failed", &[], "run-0001");
    let placeholder = run_id_as_placeholder(&out, "run-7f3a");
    assert_eq!(placeholder, run_id_as_placeholder(&other, "run-0001"));
    assert!(placeholder.contains("`diag trace <run_id>`"));
    assert_eq!(run_id_as_placeholder(&placeholder, "run-7f3a"), placeholder);
    // Only the run's own id in that step: another mention of the id stays.
    let mentioned = format!("{out}\nrun-7f3a");
    assert!(run_id_as_placeholder(&mentioned, "run-7f3a").ends_with("\nrun-7f3a"));
    // An id that is not a code (never one diag writes) is not shown.
    for hostile in ["run 1", "`x`", "-rf", "a\nb", ""] {
        let out = fallback_pre("planner", "retryable_failed", &[], hostile);
        assert!(out.contains("`diag trace <run_id>`"), "{hostile:?}: {out}");
        assert_eq!(run_id_as_placeholder(&out, hostile), out);
    }
}

#[test]
fn fallback_pre_never_shows_claim_text_hypotheses_or_tool_output() {
    // Callers that hand it prose instead of codes get placeholders, not the prose.
    let prose_reason = format!("{FAILED_CLAIM_MARKER} the payment pool is exhausted");
    let tools = vec![
        "search_logs".to_string(),
        format!("{OTHER_FIELD_MARKER} upstream returned 502"),
        format!("\u{1b}]0;{HYPOTHESIS_MARKER}\u{7}"),
    ];
    let out = fallback_pre(
        &format!("{HYPOTHESIS_MARKER} stage"),
        &prose_reason,
        &tools,
        RUN,
    );
    assert_absent(&out, &PROJECTION_MARKERS);
    assert!(!out.contains("upstream returned") && !out.contains("payment pool"));
    assert!(!out.contains('\u{1b}'));
    assert!(out.contains("reason not recorded"));
    assert!(out.contains("2 with an unprintable name"));
}

#[test]
fn consulted_tools_come_from_this_runs_calls_that_ran() {
    let mut invs = invocations();
    invs.push(inv(RUN, "inv-4", "search_logs", json!({}), json!({})));
    let mut blocked = inv(RUN, "inv-5", "ZZBLOCKEDZZ", json!({}), json!({}));
    blocked.status = InvocationStatus::Blocked;
    let mut errored = inv(RUN, "inv-6", "current_time", json!({}), json!({}));
    errored.status = InvocationStatus::Error;
    invs.push(blocked);
    invs.push(errored);
    invs.push(inv("run-B", "inv-1", "ZZOTHERRUNZZ", json!({}), json!({})));
    assert_eq!(
        consulted_tools(RUN, &invs),
        [
            "search_logs",
            "query_metrics",
            "search_runbooks",
            "current_time"
        ]
    );
    let out = fallback_pre("executor", "failed", &consulted_tools(RUN, &invs), RUN);
    assert_absent(
        &out,
        &["ZZBLOCKEDZZ", "ZZOTHERRUNZZ", UNREFERENCED_INV_MARKER],
    );
}

#[test]
fn the_pre_verification_failure_is_read_from_the_last_event() {
    let mut s = DiagnosisState::new(
        "q",
        diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0)),
    );
    assert_eq!(
        pre_verification_failure(&s),
        ("unknown".to_string(), "unknown".to_string())
    );
    s.events.push(Event {
        seq: 1,
        node: "gatekeeper".into(),
        attempt: 1,
        round: 1,
        status: Status::Reject,
        started_at: Timestamp::from_unix_ms(0),
        duration_ms: 0,
        detail: Detail::default(),
    });
    let (stage, reason) = pre_verification_failure(&s);
    assert_eq!((stage.as_str(), reason.as_str()), ("gatekeeper", "reject"));
    let out = fallback_pre(&stage, &reason, &[], RUN);
    assert!(out.contains("Gatekeeper could not bind any claim"), "{out}");

    // A detail code that says more than the status is given instead of it; any other
    // detail (a count, a generic failure kind) leaves the status.
    let event = |node: &str, status: Status, key: &str, code: &str| {
        let mut detail = Detail::default();
        detail.insert(key, code);
        Event {
            seq: 2,
            node: node.into(),
            attempt: 1,
            round: 1,
            status,
            started_at: Timestamp::from_unix_ms(0),
            duration_ms: 0,
            detail,
        }
    };
    for (node, status, key, code, want) in [
        (
            "verified_input",
            Status::ProjectionFailed,
            "reason",
            "no_passed_binding",
            "no_passed_binding",
        ),
        (
            "verified_input",
            Status::ProjectionFailed,
            "reason",
            "status_mismatch",
            "status_mismatch",
        ),
        (
            "executor",
            Status::Failed,
            "failure",
            "turn_limit",
            "turn_limit",
        ),
        ("executor", Status::Failed, "failure", "transient", "failed"),
        (
            "planner",
            Status::InvalidOutput,
            "reason",
            "prose_around_json",
            "invalid_output",
        ),
    ] {
        s.events.push(event(node, status, key, code));
        assert_eq!(
            pre_verification_failure(&s),
            (node.to_string(), want.to_string()),
            "{node} {code}"
        );
    }
    let out = fallback_pre("executor", "turn_limit", &[], RUN);
    assert!(
        out.contains("used every turn it had without giving a final answer (`turn_limit`)"),
        "{out}"
    );
    let out = fallback_pre("verified_input", "status_mismatch", &[], RUN);
    assert!(
        out.contains("the gatekeeper status disagreed with its raw result (`status_mismatch`)"),
        "{out}"
    );
}

fn post_material() -> (Vec<AllowedClaim>, Vec<String>, Vec<String>) {
    let out = mixed_output();
    let (raw, status) = gate(&out);
    let (verified, evidence) = build_verified_input(&out, &raw, status).unwrap();
    let mut verified = verified;
    verified.claims.push(VerifiedClaim {
        claim_id: "c5".into(),
        text: NOT_ALLOWED_MARKER.into(),
    });
    let r = verifier_result(vec![], &["c1", "c4"]);
    let material = AnswerMaterial::new(
        "why does checkout return 502?",
        &r,
        &verified,
        &evidence,
        RUN,
        &invocations(),
    );
    let input = build_composer_input(
        &diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0)),
        Verdict::LowConfid,
        &material,
    );
    (
        input.allowed_claims,
        input.missing_information,
        input.recommendations,
    )
}

#[test]
fn fallback_post_renders_only_allowed_material() {
    let (claims, missing, recs) = post_material();
    let out = fallback_post(Some(Verdict::LowConfid), &claims, &missing, &recs);
    assert!(out.contains("checkout saw upstream 502s (`c1`)"), "{out}");
    assert!(out.contains("payment pool exhausted (`c4`)"));
    // The matched text, on one line; the rest of the tool output never.
    assert!(out.contains("\"upstream returned 502\""));
    assert!(out.contains("`search_logs` `inv-1` `/matches/0/line`"));
    assert!(out.contains("payment-service pool metrics"));
    assert!(out.contains("raise the pool size"));
    assert_absent(&out, &PROJECTION_MARKERS);
    assert_absent(
        &out,
        &[
            NOT_ALLOWED_MARKER,
            "ZZRATIONALEZZ",
            "p99 latency",
            "42 waiters",
        ],
    );
}

#[test]
fn fallback_post_marks_low_confidence_and_rejection() {
    let (claims, missing, recs) = post_material();
    let low = fallback_post(Some(Verdict::LowConfid), &claims, &missing, &recs);
    assert!(low.contains("LOW CONFIDENCE"));
    let unknown = fallback_post(None, &claims, &missing, &recs);
    assert!(unknown.contains("LOW CONFIDENCE"));
    let pass = fallback_post(Some(Verdict::Pass), &claims, &missing, &recs);
    assert!(!pass.to_lowercase().contains("low confidence"));
    assert!(!pass.to_lowercase().contains("reject"));
    let reject = fallback_post(Some(Verdict::Reject), &claims, &missing, &recs);
    assert!(reject.contains("REJECTED"));
    assert!(reject.contains("none is asserted"));
    let empty = fallback_post(Some(Verdict::Reject), &[], &[], &[]);
    assert!(empty.contains("- none"));
}

#[test]
fn fallback_post_output_is_safely_rendered_and_flattened() {
    let claims = vec![AllowedClaim {
        claim_id: "c1".into(),
        text: "line one\n# injected heading\u{1b}[31m red".into(),
        evidence: vec![diag_diagnosis::composer_input::ClaimEvidence {
            source_invocation_id: "inv-1".into(),
            tool_name: "search_logs".into(),
            raw_path: "/matches/0/line".into(),
            matched_text: format!("{}\u{202e}tail", "q".repeat(1000)),
        }],
    }];
    let out = fallback_post(Some(Verdict::Pass), &claims, &[], &["a\u{7}b".into()]);
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}') && !out.contains('\u{202e}'));
    assert!(!out.contains("\n# injected"));
    assert!(out.contains("…"), "long matched text is cut");
    assert!(out.len() <= MAX_ANSWER_BYTES);
}

#[test]
fn allowed_claims_of_an_empty_allow_list_is_empty() {
    let s = verified_state();
    let r = verifier_result(vec![], &[]);
    assert!(allowed_claims(
        &r,
        s.round.verified_executor_output.as_ref().unwrap(),
        &s.round.verified_evidence
    )
    .is_empty());
}
