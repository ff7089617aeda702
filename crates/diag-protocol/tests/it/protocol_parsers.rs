//! Component tests for the shared agent-output parsers (SPEC §2): legal documents, the fenced
//! form, every violation kind by its reason code, hostile input, and a property test that no
//! input panics and every accepted document keeps its contract's invariants.

use diag_testkit::mutate::all_pointers;

use diag_protocol::parse::{json_document, MAX_OUTPUT_BYTES, SNIPPET_CHARS};
use diag_protocol::{
    check_answer_citations, check_answer_tokens, json_pointer, parse_composer, parse_executor,
    parse_plan, parse_verifier, ContractViolation, CriticalGap, EvidenceContext, PlannerMode,
    QueryRef, RetryContext, Verdict, Verification, VerifiedExecutorOutput,
};
use serde_json::{json, Value};
use std::fmt::Debug;

// ---------------------------------------------------------------------------------------------
// Fixtures and the one assertion helper.

const TOOLS: &[&str] = &["search_logs", "query_metrics", "read_config"];

fn plan_doc() -> Value {
    json!({"schema": "planner_plan_v1",
           "mode": "NORMAL",
           "hypotheses": [{"id": "h1", "statement": "upstream payment-service is timing out"}],
           "steps": [{"id": "s1", "goal": "find 502s in checkout logs", "tool": "search_logs",
                      "arguments": {"query": "502", "service": "checkout"}},
                     {"id": "s2", "goal": "payment latency", "tool": "query_metrics",
                      "arguments": {"metric": "p99", "service": "payment"}}]})
}

fn gap_plan_doc() -> Value {
    json!({"schema": "planner_plan_v1",
           "mode": "EVIDENCE_GAP_ONLY",
           "steps": [{"id": "s1", "goal": "pool metrics", "tool": "query_metrics",
                      "arguments": {"metric": "pool_active", "service": "payment"},
                      "gap_id": "g1"}]})
}

fn retry_ctx() -> RetryContext {
    RetryContext {
        prior_verified_output: VerifiedExecutorOutput::default(),
        prior_verified_evidence: vec![],
        critical_gaps: vec![
            CriticalGap {
                id: "g1".into(),
                fact: "payment-service pool exhausted".into(),
                verification: Verification::NoEvidence,
                claim_ids: vec![],
            },
            CriticalGap {
                id: "g2".into(),
                fact: "timeouts caused the 502s".into(),
                verification: Verification::IndirectSupport,
                claim_ids: vec!["c1".into()],
            },
        ],
        completed_queries: vec![QueryRef::new(
            "search_logs",
            &json!({"query": "502", "service": "checkout"}),
        )],
        constraints: vec!["one incremental retry only".into()],
    }
}

fn executor_doc() -> Value {
    json!({"schema": "executor_evidence_v2",
           "claims": [{"claim_id": "c1",
                       "text": "checkout-service logged upstream 502 from payment-service at 14:02",
                       "bindings": [{"source_invocation_id": "inv-2", "tool_name": "search_logs",
                                     "raw_path": "/matches/0/line",
                                     "quote": "upstream returned 502"}]},
                      {"claim_id": "c2", "text": "payment p99 was 9s",
                       "bindings": [{"source_invocation_id": "inv-3", "tool_name": "query_metrics",
                                     "raw_path": "/series/0/points/3/value", "quote": "9.0"}]}],
           "hypotheses": [{"id": "h1", "text": "payment-service pool exhausted", "status": "unverified"}],
           "no_evidence": [{"query_ref": "inv-3", "reason": "no matching lines"}],
           "limitations": ["metrics endpoint not configured"]})
}

fn verifier_doc() -> Value {
    json!({"schema": "verifier_verdict_v1", "verdict": "PASS", "groundedness": 0.92,
           "claim_checks": [{"claim_id": "c1", "supported": true},
                            {"claim_id": "c2", "supported": false}],
           "facts": [{"fact": "payment-service timeouts caused the 502s", "is_critical": true,
                      "verification": "supported", "claim_ids": ["c1"]},
                     {"fact": "pool exhausted", "is_critical": true,
                      "verification": "no_evidence", "claim_ids": []}],
           "allowed_claims": ["c1"],
           "missing_information": ["payment-service connection-pool metrics"],
           "recommendations": ["raise payment-service pool size"],
           "rationale": "c1 is quoted from the logs"})
}

fn composer_doc() -> Value {
    json!({"schema": "composer_answer_v1",
           "answer_markdown": "**Likely cause:** payment-service timeouts (c1).",
           "cited_claims": ["c1"]})
}

fn verified_ids() -> Vec<String> {
    vec!["c1".into(), "c2".into()]
}

fn allowed() -> Vec<String> {
    vec!["c1".into()]
}

fn plan_normal(text: &str) -> Result<diag_protocol::Plan, ContractViolation> {
    parse_plan(text, TOOLS, PlannerMode::Normal, None)
}

fn plan_gap(text: &str) -> Result<diag_protocol::Plan, ContractViolation> {
    let ctx = retry_ctx();
    parse_plan(text, TOOLS, PlannerMode::EvidenceGapOnly, Some(&ctx))
}

fn verifier(text: &str) -> Result<diag_protocol::VerifierResult, ContractViolation> {
    parse_verifier(text, &verified_ids())
}

fn composer(text: &str) -> Result<diag_protocol::ComposerAnswer, ContractViolation> {
    parse_composer(text, &allowed())
}

/// The one assertion: `want` is "ok" or a violation's reason code; `mentions` must appear in
/// the violation's message (typically a field path). Every message is checked for length.
fn check<T: Debug>(case: &str, got: Result<T, ContractViolation>, want: &str, mentions: &str) {
    match (&got, want) {
        (Ok(_), "ok") => {}
        (Ok(v), _) => panic!("{case}: expected {want}, parsed {v:?}"),
        (Err(e), _) => {
            let msg = e.to_string();
            assert_eq!(e.reason(), want, "{case}: got {e:?} ({msg})");
            assert!(
                msg.contains(mentions),
                "{case}: message {msg:?} does not mention {mentions:?}"
            );
            assert!(msg.chars().count() < 400, "{case}: message too long");
        }
    }
}

/// A table edit of a legal document: set or remove the value at a JSON Pointer.
enum Op {
    Set(&'static str, Value),
    Remove(&'static str),
}

fn edited(mut doc: Value, ops: &[Op]) -> String {
    for op in ops {
        match op {
            Op::Set(ptr, v) => {
                let (parent, key) = ptr.rsplit_once('/').unwrap();
                match doc.pointer_mut(parent).unwrap() {
                    Value::Object(m) => {
                        m.insert(key.to_string(), v.clone());
                    }
                    Value::Array(a) => a[key.parse::<usize>().unwrap()] = v.clone(),
                    _ => panic!("bad fixture pointer {ptr}"),
                }
            }
            Op::Remove(ptr) => {
                let (parent, key) = ptr.rsplit_once('/').unwrap();
                match doc.pointer_mut(parent).unwrap() {
                    Value::Object(m) => {
                        m.remove(key);
                    }
                    Value::Array(a) => {
                        a.remove(key.parse::<usize>().unwrap());
                    }
                    _ => panic!("bad fixture pointer {ptr}"),
                }
            }
        }
    }
    doc.to_string()
}

fn set(pointer: &'static str, value: Value) -> Op {
    Op::Set(pointer, value)
}

fn rm(pointer: &'static str) -> Op {
    Op::Remove(pointer)
}

/// One table row: a case name, the edits to the legal document, the expected reason code
/// ("ok" for success) and a fragment the violation message must contain.
type Case = (&'static str, Vec<Op>, &'static str, &'static str);

/// Table rows one per line: `"name" => [edits], "reason", "mention";`.
macro_rules! table {
    ($($name:literal => [$($op:expr),* $(,)?], $want:literal, $mention:literal;)*) => {
        vec![$(($name, vec![$($op),*], $want, $mention)),*]
    };
}

fn run_table<T: Debug>(
    base: fn() -> Value,
    parse: impl Fn(&str) -> Result<T, ContractViolation>,
    cases: Vec<Case>,
) {
    for (name, ops, want, mentions) in cases {
        check(name, parse(&edited(base(), &ops)), want, mentions);
    }
}

// ---------------------------------------------------------------------------------------------
// Front end.

#[test]
fn legal_documents_parse_plain_fenced_and_bare_fenced() {
    let wrap = |doc: Value| {
        let s = serde_json::to_string_pretty(&doc).unwrap();
        vec![
            s.clone(),
            format!("```json\n{s}\n```"),
            format!("```JSON\n{s}\n```\n"),
            format!("```\n{s}\n```"),
            format!("\n\n  ```json  \r\n{s}\r\n```  \n\n"),
            format!("  \n{s}\n\t"),
        ]
    };
    for t in wrap(plan_doc()) {
        check("plan", plan_normal(&t), "ok", "");
    }
    for t in wrap(gap_plan_doc()) {
        check("gap plan", plan_gap(&t), "ok", "");
    }
    for t in wrap(executor_doc()) {
        check("executor", parse_executor(&t), "ok", "");
    }
    for t in wrap(verifier_doc()) {
        check("verifier", verifier(&t), "ok", "");
    }
    for t in wrap(composer_doc()) {
        check("composer", composer(&t), "ok", "");
    }
}

#[test]
fn front_end_rejects_everything_but_one_json_object() {
    let doc = composer_doc().to_string();
    let cases: Vec<(&str, String, &str)> = vec![
        ("empty", String::new(), "empty_output"),
        ("whitespace", " \n\t ".into(), "empty_output"),
        (
            "plain prose",
            "I could not find anything.".into(),
            "not_json",
        ),
        (
            "prose before",
            format!("Here is the answer: {doc}"),
            "prose_around_json",
        ),
        (
            "prose after",
            format!("{doc}\nHope this helps!"),
            "prose_around_json",
        ),
        (
            "prose both",
            format!("Sure!\n{doc}\nDone."),
            "prose_around_json",
        ),
        (
            "prose before fence",
            format!("Answer:\n```json\n{doc}\n```"),
            "prose_around_json",
        ),
        (
            "prose after fence",
            format!("```json\n{doc}\n```\nThanks"),
            "prose_around_json",
        ),
        ("two documents", format!("{doc}{doc}"), "multiple_documents"),
        (
            "two documents spaced",
            format!("{doc}\n\n{doc}"),
            "multiple_documents",
        ),
        (
            "array after object",
            format!("{doc} []"),
            "multiple_documents",
        ),
        (
            "two documents in fence",
            format!("```json\n{doc}\n{doc}\n```"),
            "multiple_documents",
        ),
        (
            "two fences",
            format!("```json\n{doc}\n```\n```json\n{doc}\n```"),
            "multiple_documents",
        ),
        ("unclosed fence", format!("```json\n{doc}\n"), "bad_fence"),
        (
            "fence on one line",
            format!("```json {doc}```"),
            "bad_fence",
        ),
        (
            "closing fence glued",
            format!("```json\n{doc}```"),
            "bad_fence",
        ),
        ("yaml fence", format!("```yaml\n{doc}\n```"), "bad_fence"),
        ("fence only", "```".into(), "bad_fence"),
        ("empty fence", "```json\n```".into(), "empty_output"),
        (
            "prose in fence",
            "```json\nnothing here\n```".into(),
            "not_json",
        ),
        ("truncated", doc[..doc.len() - 5].to_string(), "not_json"),
        (
            "trailing comma",
            r#"{"schema": "composer_answer_v1",}"#.into(),
            "not_json",
        ),
        (
            "single quotes",
            "{'schema': 'composer_answer_v1'}".into(),
            "not_json",
        ),
        ("top-level array", format!("[{doc}]"), "not_an_object"),
        (
            "top-level string",
            r#""composer_answer_v1""#.into(),
            "not_an_object",
        ),
        ("top-level number", "42".into(), "not_an_object"),
        ("top-level null", "null".into(), "not_an_object"),
        ("top-level bool", "true".into(), "not_an_object"),
    ];
    for (name, text, want) in cases {
        check(name, composer(&text), want, "");
        check(name, parse_executor(&text), want, "");
        check(name, verifier(&text), want, "");
        check(name, plan_normal(&text), want, "");
    }
}

#[test]
fn json_document_returns_the_object_and_ignores_nothing_of_it() {
    let map = json_document("```json\n{\"a\": 1, \"b\": [true]}\n```").unwrap();
    assert_eq!(Value::Object(map), json!({"a": 1, "b": [true]}));
}

#[test]
fn deeply_nested_input_is_an_error_not_a_stack_overflow() {
    let arrays = "[".repeat(100_000);
    check("arrays", parse_executor(&arrays), "not_json", "recursion");
    let closed = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    check("closed arrays", verifier(&closed), "not_json", "recursion");
    let objects = r#"{"a":"#.repeat(100_000);
    check("objects", composer(&objects), "not_json", "");
    // Deep nesting inside an otherwise ignored field is still refused: the document is parsed
    // as a whole before any field is read.
    let mut doc = composer_doc();
    doc["extra"] = json!(null);
    let deep = doc.to_string().replace(
        "\"extra\":null",
        &format!("\"extra\":{}1{}", "[".repeat(5_000), "]".repeat(5_000)),
    );
    check(
        "deep unknown field",
        composer(&deep),
        "not_json",
        "recursion",
    );
    // Nesting within the limit in an unknown field is fine.
    let shallow = doc.to_string().replace(
        "\"extra\":null",
        &format!("\"extra\":{}1{}", "[".repeat(100), "]".repeat(100)),
    );
    check("shallow unknown field", composer(&shallow), "ok", "");
}

#[test]
fn lone_surrogate_escapes_are_not_json() {
    for esc in [r"\ud800", r"\udc00", r"\ud800\u0041", r"x\udfff"] {
        let text = format!(
            r#"{{"schema": "composer_answer_v1", "answer_markdown": "{esc}", "cited_claims": []}}"#
        );
        check(esc, composer(&text), "not_json", "escape");
        let text = format!(r#"{{"schema": "executor_evidence_v2", "{esc}": 1, "claims": []}}"#);
        check(esc, parse_executor(&text), "not_json", "");
    }
    // A correctly paired surrogate is an ordinary character.
    let text = r#"{"schema": "composer_answer_v1", "answer_markdown": "\ud83d\ude00", "cited_claims": []}"#;
    assert_eq!(composer(text).unwrap().answer_markdown, "\u{1F600}");
}

#[test]
fn numbers_beyond_f64_are_not_json() {
    let text = verifier_doc().to_string().replace("0.92", "1e400");
    check(
        "groundedness 1e400",
        verifier(&text),
        "not_json",
        "out of range",
    );
    let text = verifier_doc().to_string().replace("0.92", "-1e400");
    check("groundedness -1e400", verifier(&text), "not_json", "");
    let text = composer_doc()
        .to_string()
        .replace("{", r#"{"ignored": 1e400, "#);
    check("ignored 1e400", composer(&text), "not_json", "");
    // Tiny numbers underflow to zero, which is in range.
    let text = verifier_doc().to_string().replace("0.92", "1e-400");
    assert_eq!(verifier(&text).unwrap().groundedness, 0.0);
}

#[test]
fn megabyte_strings_parse_and_never_reach_messages() {
    let big = "x".repeat(1 << 20);
    let mut doc = executor_doc();
    doc["claims"][0]["text"] = json!(big);
    doc["claims"][0]["bindings"][0]["quote"] = json!(big);
    let out = parse_executor(&doc.to_string()).unwrap();
    assert_eq!(out.claims[0].text.len(), 1 << 20);

    let mut doc = composer_doc();
    doc["schema"] = json!(big);
    check(
        "1 MB schema",
        composer(&doc.to_string()),
        "wrong_schema",
        "…",
    );
    let mut doc = plan_doc();
    doc["steps"][0]["tool"] = json!(big);
    check(
        "1 MB tool",
        plan_normal(&doc.to_string()),
        "unknown_tool",
        "steps[0].tool",
    );
    let mut doc = verifier_doc();
    doc["allowed_claims"] = json!([big]);
    check(
        "1 MB id",
        verifier(&doc.to_string()),
        "unknown_reference",
        "allowed_claims[0]",
    );

    check("1 MB prose", composer(&big), "not_json", "");
    let prose = format!("{big} {}", composer_doc());
    check(
        "1 MB prose before",
        composer(&prose),
        "prose_around_json",
        "",
    );
}

#[test]
fn output_over_the_size_limit_is_refused_before_parsing() {
    let mut doc = composer_doc();
    doc["answer_markdown"] = json!("y".repeat(MAX_OUTPUT_BYTES));
    check(
        "too large",
        composer(&doc.to_string()),
        "too_large",
        "bytes",
    );
    let padded = format!("{}{}", composer_doc(), " ".repeat(MAX_OUTPUT_BYTES));
    check("padding counts", composer(&padded), "too_large", "");
}

#[test]
fn messages_quote_at_most_a_snippet_and_escape_control_characters() {
    let hostile = format!("\u{1b}[2J\u{7}{}", "Z".repeat(500));
    let mut doc = composer_doc();
    doc["schema"] = json!(hostile);
    let err = composer(&doc.to_string()).unwrap_err();
    let msg = err.to_string();
    assert!(!msg.contains('\u{1b}') && !msg.contains('\u{7}'), "{msg:?}");
    let zs = msg.chars().filter(|&c| c == 'Z').count();
    assert!(
        zs <= SNIPPET_CHARS,
        "{zs} characters of model text in {msg:?}"
    );
    match err {
        ContractViolation::WrongSchema { found, expected } => {
            assert_eq!(expected, "composer_answer_v1");
            assert_eq!(found.chars().count(), SNIPPET_CHARS + 1); // plus the ellipsis
        }
        other => panic!("{other:?}"),
    }
    // Snippets are cut on character boundaries.
    let mut doc = composer_doc();
    doc["schema"] = json!("é".repeat(200));
    let msg = composer(&doc.to_string()).unwrap_err().to_string();
    assert_eq!(msg.chars().filter(|&c| c == 'é').count(), SNIPPET_CHARS);
}

#[test]
fn reason_codes_are_distinct_snake_case() {
    use diag_protocol::json_pointer::PointerError;
    let f = || "f".to_string();
    let all = vec![
        ContractViolation::EmptyOutput,
        ContractViolation::TooLarge { bytes: 1 },
        ContractViolation::NotJson { detail: f() },
        ContractViolation::ProseAroundJson,
        ContractViolation::MultipleDocuments,
        ContractViolation::BadFence,
        ContractViolation::NotAnObject { found: "null" },
        ContractViolation::WrongSchema {
            expected: "x",
            found: f(),
        },
        ContractViolation::MissingField { field: f() },
        ContractViolation::WrongType {
            field: f(),
            expected: "a string",
            found: "null",
        },
        ContractViolation::Blank { field: f() },
        ContractViolation::EmptyList { field: f() },
        ContractViolation::InvalidValue {
            field: f(),
            expected: "x",
            found: f(),
        },
        ContractViolation::OutOfRange {
            field: f(),
            value: 2.0,
        },
        ContractViolation::DuplicateId {
            field: f(),
            id: f(),
        },
        ContractViolation::UnknownTool {
            field: f(),
            tool: f(),
        },
        ContractViolation::UnknownReference {
            field: f(),
            id: f(),
        },
        ContractViolation::InvalidPointer {
            field: f(),
            error: PointerError::MissingLeadingSlash,
        },
        ContractViolation::EmptyResult,
        ContractViolation::ModeMismatch {
            expected: PlannerMode::Normal,
            found: PlannerMode::EvidenceGapOnly,
        },
        ContractViolation::MissingRetryContext,
        ContractViolation::GapNotListed {
            field: f(),
            gap_id: f(),
        },
        ContractViolation::RepeatsCompletedQuery {
            field: f(),
            tool: f(),
        },
    ];
    let mut seen = std::collections::HashSet::new();
    for v in &all {
        let r = v.reason();
        assert!(
            !r.is_empty() && r.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{r}"
        );
        assert!(seen.insert(r), "duplicate reason {r}");
        assert!(!v.to_string().is_empty());
    }
}

#[test]
fn each_parser_rejects_the_other_contracts() {
    let docs = [plan_doc(), executor_doc(), verifier_doc(), composer_doc()];
    for (i, doc) in docs.iter().enumerate() {
        let t = doc.to_string();
        if i != 0 {
            check("plan", plan_normal(&t), "wrong_schema", "planner_plan_v1");
        }
        if i != 1 {
            check(
                "executor",
                parse_executor(&t),
                "wrong_schema",
                "executor_evidence_v2",
            );
        }
        if i != 2 {
            check(
                "verifier",
                verifier(&t),
                "wrong_schema",
                "verifier_verdict_v1",
            );
        }
        if i != 3 {
            check(
                "composer",
                composer(&t),
                "wrong_schema",
                "composer_answer_v1",
            );
        }
    }
}

#[test]
fn schema_is_required_exact_and_a_string() {
    let cases: Vec<Case> = table![
        "missing" => [rm("/schema")], "missing_field", "`schema`";
        "null" => [set("/schema", json!(null))], "wrong_type", "schema";
        "number" => [set("/schema", json!(1))], "wrong_type", "schema";
        "older version" => [set("/schema", json!("composer_answer_v0"))],
            "wrong_schema", "composer_answer_v0";
        "case" => [set("/schema", json!("COMPOSER_ANSWER_V1"))], "wrong_schema", "";
        "padded" => [set("/schema", json!(" composer_answer_v1"))], "wrong_schema", "";
    ];
    run_table(composer_doc, composer, cases);
}

#[test]
fn unknown_fields_are_ignored_at_every_level() {
    let mut d = plan_doc();
    d["x"] = json!({"y": [1, 2]});
    d["hypotheses"][0]["confidence"] = json!(0.3);
    d["steps"][0]["rationale"] = json!("because");
    check("plan", plan_normal(&d.to_string()), "ok", "");

    let mut d = executor_doc();
    d["model"] = json!("m");
    d["claims"][0]["confidence"] = json!("high");
    d["claims"][0]["bindings"][0]["note"] = json!(null);
    d["hypotheses"][0]["extra"] = json!([]);
    d["no_evidence"][0]["extra"] = json!({});
    check("executor", parse_executor(&d.to_string()), "ok", "");

    let mut d = verifier_doc();
    d["notes"] = json!("n");
    d["claim_checks"][0]["why"] = json!("w");
    d["facts"][0]["weight"] = json!(3);
    check("verifier", verifier(&d.to_string()), "ok", "");

    let mut d = composer_doc();
    d["title"] = json!("t");
    check("composer", composer(&d.to_string()), "ok", "");
}

// ---------------------------------------------------------------------------------------------
// Planner.

#[test]
fn planner_legal_plan_keeps_every_field() {
    let plan = plan_normal(&plan_doc().to_string()).unwrap();
    assert_eq!(plan.mode, PlannerMode::Normal);
    assert_eq!(plan.hypotheses.len(), 1);
    assert_eq!(
        plan.hypotheses[0].statement,
        "upstream payment-service is timing out"
    );
    assert_eq!(plan.steps.len(), 2);
    assert_eq!(plan.steps[0].id, "s1");
    assert_eq!(plan.steps[0].goal, "find 502s in checkout logs");
    assert_eq!(plan.steps[0].tool, "search_logs");
    assert_eq!(
        Value::Object(plan.steps[0].arguments.clone()),
        json!({"query": "502", "service": "checkout"})
    );
    assert_eq!(plan.steps[0].gap_id, None);
}

#[test]
fn planner_hypotheses_are_optional_but_typed() {
    let cases: Vec<Case> = table![
        "absent" => [rm("/hypotheses")], "ok", "";
        "null" => [set("/hypotheses", json!(null))], "ok", "";
        "empty" => [set("/hypotheses", json!([]))], "ok", "";
        "object" => [set("/hypotheses", json!({}))], "wrong_type", "`hypotheses` is an object";
        "string entry" => [set("/hypotheses/0", json!("h"))], "wrong_type", "hypotheses[0]";
        "no statement" => [rm("/hypotheses/0/statement")],
            "missing_field", "hypotheses[0].statement";
        "blank statement" => [set("/hypotheses/0/statement", json!(" "))],
            "blank_field", "hypotheses[0].statement";
        "no id" => [rm("/hypotheses/0/id")], "ok", "";
        "null id" => [set("/hypotheses/0/id", json!(null))], "ok", "";
        "numeric id" => [set("/hypotheses/0/id", json!(1))], "wrong_type", "hypotheses[0].id";
        "positional id taken" => [set("/hypotheses", json!([{"statement": "a"},
                                                            {"id": "h1", "statement": "b"}]))],
            "duplicate_id", "hypotheses[1].id";
        "duplicate id" => [set("/hypotheses", json!([{"id": "h1", "statement": "a"},
                                                     {"id": "h1", "statement": "b"}]))],
            "duplicate_id", "hypotheses[1].id";
    ];
    run_table(plan_doc, plan_normal, cases);
    let plan = plan_normal(&edited(plan_doc(), &[Op::Remove("/hypotheses")])).unwrap();
    assert!(plan.hypotheses.is_empty());
}

#[test]
fn planner_mode_must_be_known_and_expected() {
    let cases: Vec<Case> = table![
        "missing" => [rm("/mode")], "missing_field", "`mode`";
        "lowercase" => [set("/mode", json!("normal"))], "invalid_value", "mode";
        "unknown" => [set("/mode", json!("FAST"))], "invalid_value", "\"FAST\"";
        "number" => [set("/mode", json!(0))], "wrong_type", "mode";
        "other mode" => [set("/mode", json!("EVIDENCE_GAP_ONLY"))],
            "mode_mismatch", "expected NORMAL";
    ];
    run_table(plan_doc, plan_normal, cases);
    check(
        "normal plan in a gap round",
        plan_gap(&plan_doc().to_string()),
        "mode_mismatch",
        "expected EVIDENCE_GAP_ONLY",
    );
}

#[test]
fn ids_left_out_are_numbered_by_position() {
    let doc = json!({"schema": "planner_plan_v1", "mode": "NORMAL",
        "hypotheses": [{"statement": "a"}, {"statement": "b"}],
        "steps": [{"goal": "g", "tool": "search_logs", "arguments": {"query": "502"}},
                  {"id": "x", "goal": "g", "tool": "search_logs", "arguments": {"query": "503"}},
                  {"goal": "g", "tool": "query_metrics", "arguments": {}}]});
    let plan = plan_normal(&doc.to_string()).unwrap();
    let ids: Vec<&str> = plan.hypotheses.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["h1", "h2"]);
    let ids: Vec<&str> = plan.steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["s1", "x", "s3"]);
}

#[test]
fn a_claim_cited_twice_is_cited_once() {
    let t = edited(
        composer_doc(),
        &[set("/cited_claims", json!(["c1", "c1", "c1"]))],
    );
    assert_eq!(composer(&t).unwrap().cited_claims, ["c1"]);
}

#[test]
fn planner_steps_violations() {
    let cases: Vec<Case> = table![
        "no steps" => [rm("/steps")], "missing_field", "`steps`";
        "steps null" => [set("/steps", json!(null))], "wrong_type", "`steps` is null";
        "steps object" => [set("/steps", json!({}))], "wrong_type", "steps";
        "empty steps" => [set("/steps", json!([]))], "empty_list", "`steps`";
        "step not object" => [set("/steps/1", json!("search"))], "wrong_type", "steps[1]";
        "no id" => [rm("/steps/1/id")], "ok", "";
        "positional id taken" => [rm("/steps/0/id"), set("/steps/1/id", json!("s1"))],
            "duplicate_id", "steps[1].id";
        "blank id" => [set("/steps/0/id", json!(""))], "blank_field", "steps[0].id";
        "duplicate id" => [set("/steps/1/id", json!("s1"))], "duplicate_id", "steps[1].id";
        "no goal" => [rm("/steps/0/goal")], "missing_field", "steps[0].goal";
        "blank goal" => [set("/steps/0/goal", json!("\n"))], "blank_field", "steps[0].goal";
        "no tool" => [rm("/steps/0/tool")], "missing_field", "steps[0].tool";
        "unknown tool" => [set("/steps/1/tool", json!("rm_rf"))], "unknown_tool", "steps[1].tool";
        "tool case" => [set("/steps/0/tool", json!("Search_Logs"))],
            "unknown_tool", "\"Search_Logs\"";
        "tool list" => [set("/steps/0/tool", json!(["search_logs"]))],
            "wrong_type", "steps[0].tool";
        "no arguments" => [rm("/steps/0/arguments")], "missing_field", "steps[0].arguments";
        "null arguments" => [set("/steps/0/arguments", json!(null))],
            "wrong_type", "steps[0].arguments";
        "array arguments" => [set("/steps/0/arguments", json!(["502"]))],
            "wrong_type", "an array, expected an object";
        "string arguments" => [set("/steps/0/arguments", json!("{}"))],
            "wrong_type", "steps[0].arguments";
        "empty arguments" => [set("/steps/0/arguments", json!({}))], "ok", "";
    ];
    run_table(plan_doc, plan_normal, cases);
}

#[test]
fn planner_with_no_known_tools_accepts_no_step() {
    let t = plan_doc().to_string();
    check(
        "no tools",
        parse_plan(&t, &[], PlannerMode::Normal, None),
        "unknown_tool",
        "steps[0].tool",
    );
}

#[test]
fn planner_normal_mode_type_checks_then_drops_gap_ids() {
    let t = edited(plan_doc(), &[Op::Set("/steps/0/gap_id", json!("g1"))]);
    assert_eq!(plan_normal(&t).unwrap().steps[0].gap_id, None);
    let t = edited(plan_doc(), &[Op::Set("/steps/0/gap_id", json!(null))]);
    check("null gap", plan_normal(&t), "ok", "");
    let t = edited(plan_doc(), &[Op::Set("/steps/0/gap_id", json!(1))]);
    check(
        "numeric gap",
        plan_normal(&t),
        "wrong_type",
        "steps[0].gap_id",
    );
}

#[test]
fn planner_gap_round_accepts_listed_gaps_and_new_queries() {
    let plan = plan_gap(&gap_plan_doc().to_string()).unwrap();
    assert_eq!(plan.mode, PlannerMode::EvidenceGapOnly);
    assert_eq!(plan.steps[0].gap_id.as_deref(), Some("g1"));
    // The same tool with different arguments is a new query.
    let t = edited(
        gap_plan_doc(),
        &[
            Op::Set("/steps/0/tool", json!("search_logs")),
            Op::Set(
                "/steps/0/arguments",
                json!({"query": "pool exhausted", "service": "payment"}),
            ),
            Op::Set("/steps/0/gap_id", json!("g2")),
        ],
    );
    check("new search", plan_gap(&t), "ok", "");
}

#[test]
fn planner_gap_round_violations() {
    let cases: Vec<Case> = table![
        "no gap id" => [rm("/steps/0/gap_id")], "missing_field", "steps[0].gap_id";
        "null gap id" => [set("/steps/0/gap_id", json!(null))], "wrong_type", "steps[0].gap_id";
        "blank gap id" => [set("/steps/0/gap_id", json!(" "))], "blank_field", "steps[0].gap_id";
        "unlisted gap" => [set("/steps/0/gap_id", json!("g9"))], "gap_not_listed", "\"g9\"";
        "repeated query" => [set("/steps/0/tool", json!("search_logs")),
                             set("/steps/0/arguments", json!({"query": "502", "service": "checkout"}))],
            "repeats_completed_query", "steps[0]";
        // Canonical arguments: key order does not disguise a repeat.
        "repeated query reordered" => [set("/steps/0/tool", json!("search_logs")),
                                       set("/steps/0/arguments", json!({"service": "checkout", "query": "502"}))],
            "repeats_completed_query", "search_logs";
        "unknown tool first" => [set("/steps/0/tool", json!("nope"))],
            "unknown_tool", "steps[0].tool";
    ];
    run_table(gap_plan_doc, plan_gap, cases);
    // A later step that breaks the rule fails the whole plan.
    let mut d = gap_plan_doc();
    let mut second = d["steps"][0].clone();
    second["id"] = json!("s2");
    second["gap_id"] = json!("g3");
    d["steps"].as_array_mut().unwrap().push(second);
    check(
        "second step",
        plan_gap(&d.to_string()),
        "gap_not_listed",
        "steps[1].gap_id",
    );
}

#[test]
fn planner_gap_round_without_context_fails_closed() {
    let t = gap_plan_doc().to_string();
    check(
        "no context",
        parse_plan(&t, TOOLS, PlannerMode::EvidenceGapOnly, None),
        "missing_retry_context",
        "",
    );
    let mut empty = retry_ctx();
    empty.critical_gaps.clear();
    check(
        "no gaps",
        parse_plan(&t, TOOLS, PlannerMode::EvidenceGapOnly, Some(&empty)),
        "gap_not_listed",
        "steps[0].gap_id",
    );
}

// ---------------------------------------------------------------------------------------------
// Executor.

#[test]
fn executor_legal_document_keeps_every_field() {
    let out = parse_executor(&executor_doc().to_string()).unwrap();
    assert_eq!(out.claims.len(), 2);
    let b = &out.claims[0].bindings[0];
    assert_eq!(b.source_invocation_id, "inv-2");
    assert_eq!(b.tool_name, "search_logs");
    assert_eq!(b.raw_path, "/matches/0/line");
    assert_eq!(b.quote, "upstream returned 502");
    assert_eq!(out.hypotheses[0].status, "unverified");
    assert_eq!(out.no_evidence[0].query_ref, "inv-3");
    assert_eq!(out.limitations, vec!["metrics endpoint not configured"]);
    assert!(!out.is_no_evidence());
}

#[test]
fn executor_legal_no_evidence_results_parse() {
    let only_gap = json!({"schema": "executor_evidence_v2", "claims": [],
                          "no_evidence": [{"query_ref": "inv-1", "reason": "no matching lines"}]});
    let out = parse_executor(&only_gap.to_string()).unwrap();
    assert!(out.is_no_evidence());
    assert!(out.hypotheses.is_empty() && out.limitations.is_empty());

    let only_limit = json!({"schema": "executor_evidence_v2", "claims": [],
                            "limitations": ["log source unreachable"], "no_evidence": null});
    assert!(parse_executor(&only_limit.to_string())
        .unwrap()
        .is_no_evidence());
}

#[test]
fn executor_empty_result_is_a_violation() {
    let cases: Vec<(&str, Value)> = vec![
        (
            "bare",
            json!({"schema": "executor_evidence_v2", "claims": []}),
        ),
        (
            "empty lists",
            json!({"schema": "executor_evidence_v2", "claims": [], "hypotheses": [],
                               "no_evidence": [], "limitations": []}),
        ),
        (
            "nulls",
            json!({"schema": "executor_evidence_v2", "claims": [], "no_evidence": null,
                         "limitations": null}),
        ),
        (
            "hypotheses only",
            json!({"schema": "executor_evidence_v2", "claims": [],
                                   "hypotheses": [{"id": "h1", "text": "t", "status": "unverified"}]}),
        ),
    ];
    for (name, doc) in cases {
        check(name, parse_executor(&doc.to_string()), "empty_result", "");
    }
}

#[test]
fn executor_optional_lists_default_to_empty() {
    let t = edited(
        executor_doc(),
        &[
            Op::Remove("/hypotheses"),
            Op::Remove("/no_evidence"),
            Op::Remove("/limitations"),
        ],
    );
    let out = parse_executor(&t).unwrap();
    assert!(out.hypotheses.is_empty() && out.no_evidence.is_empty() && out.limitations.is_empty());
    assert_eq!(out.claims.len(), 2);
}

#[test]
fn executor_claim_with_no_bindings_is_left_to_the_gatekeeper() {
    let t = edited(executor_doc(), &[Op::Set("/claims/1/bindings", json!([]))]);
    let out = parse_executor(&t).unwrap();
    assert!(out.claims[1].bindings.is_empty());
}

#[test]
fn executor_claim_violations() {
    let cases: Vec<Case> = table![
        "no claims" => [rm("/claims")], "missing_field", "`claims`";
        "claims null" => [set("/claims", json!(null))], "wrong_type", "`claims` is null";
        "claims object" => [set("/claims", json!({"c1": {}}))], "wrong_type", "claims";
        "claim string" => [set("/claims/1", json!("c2"))], "wrong_type", "claims[1]";
        "no claim id" => [rm("/claims/0/claim_id")], "missing_field", "claims[0].claim_id";
        "blank claim id" => [set("/claims/1/claim_id", json!("  "))],
            "blank_field", "claims[1].claim_id";
        "numeric claim id" => [set("/claims/1/claim_id", json!(2))],
            "wrong_type", "claims[1].claim_id";
        "duplicate claim id" => [set("/claims/1/claim_id", json!("c1"))],
            "duplicate_id", "claims[1].claim_id";
        "no text" => [rm("/claims/0/text")], "missing_field", "claims[0].text";
        "blank text" => [set("/claims/0/text", json!(""))], "blank_field", "claims[0].text";
        "no bindings" => [rm("/claims/0/bindings")], "missing_field", "claims[0].bindings";
        "bindings object" => [set("/claims/0/bindings", json!({}))],
            "wrong_type", "claims[0].bindings";
        "binding string" => [set("/claims/0/bindings/0", json!("inv-2"))],
            "wrong_type", "claims[0].bindings[0]";
    ];
    run_table(executor_doc, parse_executor, cases);
}

#[test]
fn executor_binding_violations_name_the_field_path() {
    let cases: Vec<Case> = table![
        "no invocation" => [rm("/claims/1/bindings/0/source_invocation_id")],
            "missing_field", "claims[1].bindings[0].source_invocation_id";
        "blank invocation" => [set("/claims/1/bindings/0/source_invocation_id", json!(""))],
            "blank_field", "claims[1].bindings[0].source_invocation_id";
        "numeric invocation" => [set("/claims/1/bindings/0/source_invocation_id", json!(2))],
            "wrong_type", "claims[1].bindings[0].source_invocation_id";
        "no tool" => [rm("/claims/0/bindings/0/tool_name")],
            "missing_field", "claims[0].bindings[0].tool_name";
        "blank tool" => [set("/claims/0/bindings/0/tool_name", json!(" "))],
            "blank_field", "claims[0].bindings[0].tool_name";
        "no path" => [rm("/claims/0/bindings/0/raw_path")],
            "missing_field", "claims[0].bindings[0].raw_path";
        "array path" => [set("/claims/0/bindings/0/raw_path", json!(["matches", 0]))],
            "wrong_type", "claims[0].bindings[0].raw_path";
        "no quote" => [rm("/claims/0/bindings/0/quote")],
            "missing_field", "claims[0].bindings[0].quote";
        "blank quote" => [set("/claims/0/bindings/0/quote", json!("\t"))],
            "blank_field", "claims[0].bindings[0].quote";
        "null quote" => [set("/claims/0/bindings/0/quote", json!(null))],
            "wrong_type", "claims[0].bindings[0].quote";
    ];
    run_table(executor_doc, parse_executor, cases);
}

#[test]
fn executor_raw_path_must_be_an_rfc6901_pointer() {
    let ok = [
        "",
        "/",
        "/matches/0/line",
        "/a~1b",
        "/m~0n",
        "/~01",
        "/-",
        "//",
    ];
    for p in ok {
        let t = edited(
            executor_doc(),
            &[Op::Set("/claims/0/bindings/0/raw_path", json!(p))],
        );
        check(p, parse_executor(&t), "ok", "");
    }
    let bad = [
        "matches/0/line",
        "#/matches/0",
        "$.matches[0]",
        "/a~2b",
        "/a~",
        "/~/x",
        " /a",
    ];
    for p in bad {
        let t = edited(
            executor_doc(),
            &[Op::Set("/claims/1/bindings/0/raw_path", json!(p))],
        );
        check(
            p,
            parse_executor(&t),
            "invalid_pointer",
            "claims[1].bindings[0].raw_path",
        );
    }
}

#[test]
fn executor_side_list_violations() {
    let cases: Vec<Case> = table![
        "hypotheses object" => [set("/hypotheses", json!({}))], "wrong_type", "hypotheses";
        "hypothesis no status" => [rm("/hypotheses/0/status")],
            "missing_field", "hypotheses[0].status";
        "hypothesis blank text" => [set("/hypotheses/0/text", json!(""))],
            "blank_field", "hypotheses[0].text";
        "hypothesis no id" => [rm("/hypotheses/0/id")], "missing_field", "hypotheses[0].id";
        "hypothesis duplicate" => [set("/hypotheses", json!([{"id": "h", "text": "a", "status": "s"},
                                                             {"id": "h", "text": "b", "status": "s"}]))],
            "duplicate_id", "hypotheses[1].id";
        "no_evidence string" => [set("/no_evidence", json!("none"))], "wrong_type", "no_evidence";
        "no_evidence no reason" => [rm("/no_evidence/0/reason")],
            "missing_field", "no_evidence[0].reason";
        "no_evidence blank ref" => [set("/no_evidence/0/query_ref", json!(""))],
            "blank_field", "no_evidence[0].query_ref";
        "limitation number" => [set("/limitations/0", json!(3))], "wrong_type", "limitations[0]";
        "limitation blank" => [set("/limitations/0", json!(" "))], "blank_field", "limitations[0]";
        "limitations string" => [set("/limitations", json!("none"))], "wrong_type", "limitations";
    ];
    run_table(executor_doc, parse_executor, cases);
}

// ---------------------------------------------------------------------------------------------
// Verifier.

#[test]
fn verifier_legal_document_keeps_every_field() {
    let v = verifier(&verifier_doc().to_string()).unwrap();
    assert_eq!(v.verdict, Verdict::Pass);
    assert_eq!(v.groundedness, 0.92);
    assert_eq!(v.claim_checks.len(), 2);
    assert!(!v.claim_checks[1].supported);
    assert_eq!(v.facts[1].verification, Verification::NoEvidence);
    assert_eq!(v.critical_gaps().count(), 1);
    assert_eq!(v.allowed_claims, vec!["c1"]);
    assert_eq!(v.missing_information.len(), 1);
    assert_eq!(v.recommendations.len(), 1);
    assert_eq!(v.rationale, "c1 is quoted from the logs");
}

#[test]
fn verifier_optional_fields_default() {
    let t = edited(
        verifier_doc(),
        &[
            Op::Remove("/missing_information"),
            Op::Set("/recommendations", json!(null)),
            Op::Remove("/rationale"),
            Op::Remove("/facts/1/claim_ids"),
        ],
    );
    let v = verifier(&t).unwrap();
    assert!(v.missing_information.is_empty() && v.recommendations.is_empty());
    assert_eq!(v.rationale, "");
    assert!(v.facts[1].claim_ids.is_empty());
}

#[test]
fn verifier_verdict_is_never_guessed() {
    for (s, want) in [
        ("PASS", Verdict::Pass),
        ("LOW_CONFID", Verdict::LowConfid),
        ("REJECT", Verdict::Reject),
    ] {
        let t = edited(verifier_doc(), &[Op::Set("/verdict", json!(s))]);
        assert_eq!(verifier(&t).unwrap().verdict, want);
    }
    for s in [
        "pass",
        "Pass",
        "LOW_CONFIDENCE",
        "LOW-CONFID",
        "FAIL",
        "",
        " PASS",
    ] {
        let t = edited(verifier_doc(), &[Op::Set("/verdict", json!(s))]);
        check(s, verifier(&t), "invalid_value", "verdict");
    }
    for v in [json!(null), json!(true), json!(1), json!(["PASS"])] {
        let t = edited(verifier_doc(), &[Op::Set("/verdict", v)]);
        check("typed", verifier(&t), "wrong_type", "verdict");
    }
    check(
        "missing",
        verifier(&edited(verifier_doc(), &[Op::Remove("/verdict")])),
        "missing_field",
        "verdict",
    );
}

#[test]
fn verifier_groundedness_is_a_number_in_the_unit_interval() {
    for (v, want) in [
        (json!(0), "ok"),
        (json!(1), "ok"),
        (json!(0.0), "ok"),
        (json!(1.0), "ok"),
        (json!(-0.0), "ok"),
        (json!(-0.01), "out_of_range"),
        (json!(1.0000001), "out_of_range"),
        (json!(2), "out_of_range"),
        (json!(-1), "out_of_range"),
        (json!(u64::MAX), "out_of_range"),
        (json!(1e300), "out_of_range"),
        (json!("0.9"), "wrong_type"),
        (json!(null), "wrong_type"),
        (json!([0.9]), "wrong_type"),
    ] {
        let t = edited(verifier_doc(), &[Op::Set("/groundedness", v.clone())]);
        check(&v.to_string(), verifier(&t), want, "groundedness");
    }
    check(
        "missing",
        verifier(&edited(verifier_doc(), &[Op::Remove("/groundedness")])),
        "missing_field",
        "groundedness",
    );
}

#[test]
fn verifier_verification_values_are_exact() {
    for s in [
        "supported",
        "indirect_support",
        "no_evidence",
        "contradicted",
    ] {
        // facts[1] names no claim, so any verification keeps the verdict consistent.
        let t = edited(
            verifier_doc(),
            &[Op::Set("/facts/1/verification", json!(s))],
        );
        check(s, verifier(&t), "ok", "");
    }
    for s in ["Supported", "indirect", "unknown", ""] {
        let t = edited(
            verifier_doc(),
            &[Op::Set("/facts/1/verification", json!(s))],
        );
        check(s, verifier(&t), "invalid_value", "facts[1].verification");
    }
}

#[test]
fn verifier_references_must_name_verified_claims() {
    let cases: Vec<Case> = table![
        "allowed unverified" => [set("/allowed_claims", json!(["c1", "c9"]))],
            "unknown_reference", "allowed_claims[1]";
        "allowed duplicate" => [set("/allowed_claims", json!(["c1", "c1"]))],
            "duplicate_id", "allowed_claims[1]";
        "allowed number" => [set("/allowed_claims", json!([1]))], "wrong_type", "allowed_claims[0]";
        "allowed empty, LOW_CONFID" => [set("/allowed_claims", json!([])),
                                         set("/verdict", json!("LOW_CONFID"))], "ok", "";
        "allowed all supported" => [set("/allowed_claims", json!(["c2", "c1"])),
                                    set("/claim_checks/1/supported", json!(true))], "ok", "";
        "allowed missing" => [rm("/allowed_claims")], "missing_field", "allowed_claims";
        "allowed null" => [set("/allowed_claims", json!(null))], "wrong_type", "allowed_claims";
        "check unverified" => [set("/claim_checks/1/claim_id", json!("c3"))],
            "unknown_reference", "claim_checks[1].claim_id";
        "check duplicate" => [set("/claim_checks/1/claim_id", json!("c1"))],
            "duplicate_id", "claim_checks[1].claim_id";
        "fact unverified" => [set("/facts/0/claim_ids", json!(["c1", "x"]))],
            "unknown_reference", "facts[0].claim_ids[1]";
        "fact duplicate" => [set("/facts/0/claim_ids", json!(["c1", "c1"]))],
            "duplicate_id", "facts[0].claim_ids[1]";
        "fact ids string" => [set("/facts/0/claim_ids", json!("c1"))],
            "wrong_type", "facts[0].claim_ids";
    ];
    run_table(verifier_doc, verifier, cases);
    // With nothing verified, any reference is unknown.
    check(
        "nothing verified",
        parse_verifier(&verifier_doc().to_string(), &[]),
        "unknown_reference",
        "claim_checks[0].claim_id",
    );
}

#[test]
fn verifier_structure_violations() {
    let cases: Vec<Case> = table![
        "no checks" => [rm("/claim_checks")], "missing_field", "claim_checks";
        "no facts" => [rm("/facts")], "missing_field", "`facts`";
        "facts object" => [set("/facts", json!({}))], "wrong_type", "facts";
        "check no supported" => [rm("/claim_checks/0/supported")],
            "missing_field", "claim_checks[0].supported";
        "check supported string" => [set("/claim_checks/0/supported", json!("yes"))],
            "wrong_type", "claim_checks[0].supported";
        "check no id" => [rm("/claim_checks/0/claim_id")],
            "missing_field", "claim_checks[0].claim_id";
        "fact no critical" => [rm("/facts/1/is_critical")], "missing_field", "facts[1].is_critical";
        "fact critical string" => [set("/facts/1/is_critical", json!("true"))],
            "wrong_type", "facts[1].is_critical";
        "fact blank" => [set("/facts/0/fact", json!(""))], "blank_field", "facts[0].fact";
        "fact no verification" => [rm("/facts/0/verification")],
            "missing_field", "facts[0].verification";
        "missing info number" => [set("/missing_information/0", json!(1))],
            "wrong_type", "missing_information[0]";
        "recommendation blank" => [set("/recommendations/0", json!(""))],
            "blank_field", "recommendations[0]";
        "rationale number" => [set("/rationale", json!(5))], "wrong_type", "rationale";
        "rationale blank" => [set("/rationale", json!(""))], "ok", "";
    ];
    run_table(verifier_doc, verifier, cases);
}

#[test]
fn verifier_allowed_claims_are_ones_its_own_checks_support() {
    let cases: Vec<Case> = table![
        "c1 supported, c2 unsupported and not allowed" => [], "ok", "";
        "c2 allowed though unsupported" => [set("/allowed_claims", json!(["c1", "c2"]))],
            "allows_unsupported_claim", "allowed_claims[1]";
        "c1 allowed without a check" => [rm("/claim_checks/0")],
            "allows_unsupported_claim", "allowed_claims[0]";
        "c1 allowed, checked unsupported" => [set("/claim_checks/0/supported", json!(false))],
            "allows_unsupported_claim", "\"c1\"";
    ];
    run_table(verifier_doc, verifier, cases);
}

#[test]
fn verifier_allowed_claims_are_not_contradicted_by_its_own_facts() {
    let cases: Vec<Case> = table![
        "a contradicted fact names only a claim not allowed" => [
            set("/facts/1/verification", json!("contradicted")),
            set("/facts/1/claim_ids", json!(["c2"]))], "ok", "";
        "a contradicted fact names the allowed claim" => [
            set("/facts/1/verification", json!("contradicted")),
            set("/facts/1/claim_ids", json!(["c2", "c1"]))],
            "allows_contradicted_claim", "facts[1]";
        // The shape seen from real models: unsupported, contradicted, and allowed anyway.
        "unsupported, contradicted and allowed" => [
            set("/claim_checks/0/supported", json!(false)),
            set("/facts/0/verification", json!("contradicted"))],
            "allows_unsupported_claim", "allowed_claims[0]";
        "supported but contradicted and allowed" => [
            set("/facts/0/verification", json!("contradicted"))],
            "allows_contradicted_claim", "allowed_claims[0]";
    ];
    run_table(verifier_doc, verifier, cases);
}

#[test]
fn verifier_pass_needs_an_allowed_claim() {
    let cases: Vec<Case> = table![
        "PASS allowing c1" => [], "ok", "";
        "PASS allowing nothing" => [set("/allowed_claims", json!([]))],
            "pass_without_allowed_claims", "PASS";
        "LOW_CONFID allowing nothing" => [set("/allowed_claims", json!([])),
                                          set("/verdict", json!("LOW_CONFID"))], "ok", "";
        "REJECT allowing nothing" => [set("/allowed_claims", json!([])),
                                      set("/verdict", json!("REJECT"))], "ok", "";
    ];
    run_table(verifier_doc, verifier, cases);
}

// ---------------------------------------------------------------------------------------------
// Composer.

#[test]
fn composer_legal_answers() {
    let a = composer(&composer_doc().to_string()).unwrap();
    assert_eq!(a.cited_claims, vec!["c1"]);
    assert!(a.answer_markdown.starts_with("**Likely cause:**"));
    let t = edited(composer_doc(), &[Op::Set("/cited_claims", json!([]))]);
    check("no citations", composer(&t), "ok", "");
    check(
        "nothing allowed, nothing cited",
        parse_composer(&t, &[]),
        "ok",
        "",
    );
}

#[test]
fn composer_violations() {
    let cases: Vec<Case> = table![
        "no answer" => [rm("/answer_markdown")], "missing_field", "answer_markdown";
        "blank answer" => [set("/answer_markdown", json!(" \n "))],
            "blank_field", "answer_markdown";
        "answer object" => [set("/answer_markdown", json!({"md": "x"}))],
            "wrong_type", "answer_markdown";
        "no citations" => [rm("/cited_claims")], "missing_field", "cited_claims";
        "citations string" => [set("/cited_claims", json!("c1"))], "wrong_type", "cited_claims";
        "cites disallowed" => [set("/cited_claims", json!(["c1", "c2"]))],
            "unknown_reference", "cited_claims[1]";
        "cites twice, then disallowed" => [set("/cited_claims", json!(["c1", "c1", "c2"]))],
            "unknown_reference", "cited_claims[1]";
        "cites null" => [set("/cited_claims", json!([null]))], "wrong_type", "cited_claims[0]";
    ];
    run_table(composer_doc, composer, cases);
}

// ---------------------------------------------------------------------------------------------
// The answer as rendered: citations and salient tokens (SPEC §2.9).

fn citations(answer: &str, cited: &[&str], allowed: &[&str]) -> Result<(), ContractViolation> {
    let own = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    check_answer_citations(answer, &own(cited), &own(allowed))
}

#[test]
fn answer_inline_citations_name_allowed_claims() {
    check(
        "allowed",
        citations("pool full [c1]", &["c1"], &["c1", "c2"]),
        "ok",
        "",
    );
    check(
        "a refused claim inline",
        citations("pool full [c1] and disk full [c3]", &["c1"], &["c1", "c2"]),
        "inline_citation_not_allowed",
        "\"c3\"",
    );
    check(
        "in a list marker",
        citations("pool full [c1; c9]", &["c1"], &["c1"]),
        "inline_citation_not_allowed",
        "\"c9\"",
    );
    // Brackets that are not markers are text: a number, prose, a link target.
    check(
        "not markers",
        citations("[14] [see logs] [c1](#x)", &["c1"], &["c1"]),
        "ok",
        "",
    );
}

#[test]
fn answer_inline_citations_agree_with_cited_claims() {
    check(
        "same set, other order",
        citations("a [c2] b [c1, c2]", &["c1", "c2"], &["c1", "c2"]),
        "ok",
        "",
    );
    check(
        "cited but not inline",
        citations("a [c1]", &["c1", "c2"], &["c1", "c2"]),
        "citations_disagree",
        "\"c2\"",
    );
    check(
        "inline but not cited",
        citations("a [c1] [c2]", &["c1"], &["c1", "c2"]),
        "citations_disagree",
        "\"c2\"",
    );
}

#[test]
fn answer_cites_a_claim_when_claims_are_allowed() {
    check("cites", citations("a [c1]", &["c1"], &["c1"]), "ok", "");
    check(
        "nothing allowed",
        citations("no finding", &[], &[]),
        "ok",
        "",
    );
    check(
        "cites nothing",
        citations("pool full", &[], &["c1"]),
        "cites_no_claim",
        "1 are allowed",
    );
}

#[test]
fn answer_tokens_occur_in_the_question_or_the_evidence() {
    let mut context = EvidenceContext::new();
    context.push_text("why does checkout-service return 502 since 14:00?");
    context
        .push_text("payment-service: HikariPool-1 active=50 waiting=154 at 2026-11-30T14:02:07Z");
    let (check_ok, ok) = check_answer_tokens(
        "checkout-service's 502s since 14:00: HikariPool-1 had 50 of 50 active, 154 waiting \
         at 14:02:07 [c1]",
        &context,
    );
    assert_eq!(ok, Ok(()));
    assert_eq!(check_ok.checked, 7);
    assert!(check_ok.unbound.is_empty());

    let (bad, refused) = check_answer_tokens(
        "Root cause: a bad deploy of payment-service v2.3.1 at 13:58. Roll back now.",
        &context,
    );
    check(
        "invented",
        refused.clone(),
        "unbound_answer_token",
        "identifier",
    );
    assert_eq!(bad.checked, 3);
    assert_eq!(
        bad.unbound
            .iter()
            .map(|t| t.text.as_str())
            .collect::<Vec<_>>(),
        ["v2.3.1", "13:58"]
    );
    // The message names the first unbound token, its kind and its line: the Composer's
    // technical retry is asked to correct exactly that.
    assert_eq!(
        refused.unwrap_err().to_string(),
        "`answer_markdown` line 1 holds the identifier \"v2.3.1\", which neither the \
         question nor the allowed claims' evidence shows"
    );
}

// ---------------------------------------------------------------------------------------------
// null in every field.

/// Sets every field in turn to null: optional fields are accepted as absent, everything else
/// is a `wrong_type` that names the field, and nothing panics. An `optional` entry ending in
/// `/` covers everything below it (tool arguments are opaque to the plan contract).
fn null_everywhere<T: Debug>(
    name: &str,
    doc: Value,
    parse: impl Fn(&str) -> Result<T, ContractViolation>,
    optional: &[&str],
) {
    let mut pointers = Vec::new();
    all_pointers(&doc, String::new(), &mut pointers);
    pointers.retain(|p| !p.is_empty()); // every member, not the document itself
    assert!(pointers.len() >= 3);
    for p in pointers {
        let mut d = doc.clone();
        *d.pointer_mut(&p).unwrap() = Value::Null;
        let got = parse(&d.to_string());
        let case = format!("{name} {p} = null");
        let is_optional = optional
            .iter()
            .any(|o| p == *o || (o.ends_with('/') && p.starts_with(o)));
        if is_optional {
            check(&case, got, "ok", "");
        } else {
            check(&case, got, "wrong_type", "is null");
        }
    }
}

#[test]
fn null_in_every_field_of_every_contract() {
    null_everywhere(
        "plan",
        plan_doc(),
        plan_normal,
        &[
            "/hypotheses",
            "/hypotheses/0/id",
            "/steps/0/id",
            "/steps/1/id",
            "/steps/0/arguments/",
            "/steps/1/arguments/",
        ],
    );
    null_everywhere(
        "gap plan",
        gap_plan_doc(),
        plan_gap,
        &["/steps/0/id", "/steps/0/arguments/"],
    );
    null_everywhere(
        "executor",
        executor_doc(),
        parse_executor,
        &["/hypotheses", "/no_evidence", "/limitations"],
    );
    null_everywhere(
        "verifier",
        verifier_doc(),
        verifier,
        &[
            "/missing_information",
            "/recommendations",
            "/rationale",
            "/facts/0/claim_ids",
            "/facts/1/claim_ids",
        ],
    );
    null_everywhere("composer", composer_doc(), composer, &[]);
}

// ---------------------------------------------------------------------------------------------
// Properties: no input panics; every accepted document keeps its contract.

mod properties {
    use super::*;
    use proptest::prelude::*;
    use proptest::sample::select;
    use std::collections::HashSet;

    const KEYS: &[&str] = &[
        "schema",
        "mode",
        "steps",
        "hypotheses",
        "id",
        "goal",
        "tool",
        "arguments",
        "gap_id",
        "claims",
        "claim_id",
        "text",
        "bindings",
        "source_invocation_id",
        "tool_name",
        "raw_path",
        "quote",
        "no_evidence",
        "limitations",
        "verdict",
        "groundedness",
        "allowed_claims",
        "answer_markdown",
        "cited_claims",
    ];

    fn arb_json() -> BoxedStrategy<Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
                .map(Value::Number)),
            ".{0,16}".prop_map(Value::from),
        ];
        let key = prop_oneof![select(KEYS).prop_map(str::to_string), "[a-z_]{0,8}"];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
        .boxed()
    }

    /// Mostly a value from the vocabulary, sometimes anything at all.
    fn fuzzy(vocab: &'static [&'static str]) -> BoxedStrategy<Value> {
        prop_oneof![8 => select(vocab).prop_map(Value::from), 1 => arb_json()].boxed()
    }

    fn list(item: BoxedStrategy<Value>, max: usize) -> BoxedStrategy<Value> {
        prop_oneof![
            9 => prop::collection::vec(item, 0..max).prop_map(Value::Array),
            1 => arb_json(),
        ]
        .boxed()
    }

    /// An object whose listed fields are each present nine times in ten.
    fn obj(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
        let (names, values): (Vec<_>, Vec<_>) = fields
            .into_iter()
            .map(|(n, s)| (n, prop::option::weighted(0.9, s)))
            .unzip();
        values
            .prop_map(move |vals| {
                let mut m = serde_json::Map::new();
                for (n, v) in names.iter().zip(vals) {
                    if let Some(v) = v {
                        m.insert((*n).to_string(), v);
                    }
                }
                Value::Object(m)
            })
            .boxed()
    }

    fn arb_args() -> BoxedStrategy<Value> {
        prop_oneof![
            Just(json!({"query": "502", "service": "checkout"})),
            Just(json!({"service": "checkout", "query": "502"})),
            Just(json!({"metric": "p99"})),
            Just(json!({})),
            arb_json(),
        ]
        .boxed()
    }

    fn arb_plan() -> BoxedStrategy<Value> {
        let step = obj(vec![
            ("id", fuzzy(&["s1", "s2", ""])),
            ("goal", fuzzy(&["g", " "])),
            ("tool", fuzzy(&["search_logs", "query_metrics", "nope"])),
            ("arguments", arb_args()),
            ("gap_id", fuzzy(&["g1", "g2", "g9"])),
        ]);
        let hyp = obj(vec![
            ("id", fuzzy(&["h1", "h2"])),
            ("statement", fuzzy(&["s", ""])),
        ]);
        obj(vec![
            ("schema", fuzzy(&["planner_plan_v1"])),
            ("mode", fuzzy(&["NORMAL", "EVIDENCE_GAP_ONLY"])),
            ("hypotheses", list(hyp, 3)),
            ("steps", list(step, 4)),
        ])
    }

    fn arb_executor() -> BoxedStrategy<Value> {
        let binding = obj(vec![
            ("source_invocation_id", fuzzy(&["inv-1", "inv-2", ""])),
            ("tool_name", fuzzy(&["search_logs", " "])),
            (
                "raw_path",
                fuzzy(&["", "/a", "/a/0", "a", "/~2", "/m~0n", "/~"]),
            ),
            ("quote", fuzzy(&["502", ""])),
        ]);
        let claim = obj(vec![
            ("claim_id", fuzzy(&["c1", "c2", ""])),
            ("text", fuzzy(&["t", " "])),
            ("bindings", list(binding, 3)),
        ]);
        let hyp = obj(vec![
            ("id", fuzzy(&["h1", "h2"])),
            ("text", fuzzy(&["t", ""])),
            ("status", fuzzy(&["unverified"])),
        ]);
        let ne = obj(vec![
            ("query_ref", fuzzy(&["inv-3", ""])),
            ("reason", fuzzy(&["none", ""])),
        ]);
        obj(vec![
            ("schema", fuzzy(&["executor_evidence_v2"])),
            ("claims", list(claim, 3)),
            ("hypotheses", list(hyp, 2)),
            ("no_evidence", list(ne, 2)),
            ("limitations", list(fuzzy(&["l", ""]), 2)),
        ])
    }

    fn arb_verifier() -> BoxedStrategy<Value> {
        let ids = || list(fuzzy(&["c1", "c2", "c3"]), 3);
        let check = obj(vec![
            ("claim_id", fuzzy(&["c1", "c2", "c9"])),
            ("supported", arb_bool()),
        ]);
        let fact = obj(vec![
            ("fact", fuzzy(&["f", ""])),
            ("is_critical", arb_bool()),
            (
                "verification",
                fuzzy(&[
                    "supported",
                    "indirect_support",
                    "no_evidence",
                    "contradicted",
                    "x",
                ]),
            ),
            ("claim_ids", ids()),
        ]);
        obj(vec![
            ("schema", fuzzy(&["verifier_verdict_v1"])),
            ("verdict", fuzzy(&["PASS", "LOW_CONFID", "REJECT", "pass"])),
            (
                "groundedness",
                prop_oneof![(-0.5f64..1.5).prop_map(Value::from), arb_json()].boxed(),
            ),
            ("claim_checks", list(check, 3)),
            ("facts", list(fact, 3)),
            ("allowed_claims", ids()),
            ("missing_information", list(fuzzy(&["m", ""]), 2)),
            ("recommendations", list(fuzzy(&["r"]), 2)),
            ("rationale", fuzzy(&["why", ""])),
        ])
    }

    fn arb_composer() -> BoxedStrategy<Value> {
        obj(vec![
            ("schema", fuzzy(&["composer_answer_v1"])),
            ("answer_markdown", fuzzy(&["# answer", " "])),
            ("cited_claims", list(fuzzy(&["c1", "c2"]), 3)),
        ])
    }

    fn arb_bool() -> BoxedStrategy<Value> {
        prop_oneof![4 => any::<bool>().prop_map(Value::from), 1 => arb_json()].boxed()
    }

    /// A document rendered as a model might: compact, pretty, fenced, padded.
    fn render(doc: Value) -> BoxedStrategy<String> {
        let compact = doc.to_string();
        let pretty = serde_json::to_string_pretty(&doc).unwrap();
        prop_oneof![
            Just(compact.clone()),
            Just(format!("```json\n{pretty}\n```")),
            Just(format!("```\n{compact}\n```\n")),
            Just(format!("  {pretty}  ")),
            Just(format!("Here you go: {compact}")),
        ]
        .boxed()
    }

    fn known() -> Vec<String> {
        vec!["c1".into(), "c2".into()]
    }

    /// Runs all four parsers on `text` and checks each accepted result against its contract.
    fn all_parsers_hold(text: &str) {
        let tools = ["search_logs", "query_metrics"];
        let ctx = retry_ctx();
        for (mode, retry) in [
            (PlannerMode::Normal, None),
            (PlannerMode::EvidenceGapOnly, Some(&ctx)),
        ] {
            match parse_plan(text, &tools, mode, retry) {
                Ok(plan) => {
                    assert_eq!(plan.mode, mode);
                    assert!(!plan.steps.is_empty());
                    let ids: HashSet<_> = plan.steps.iter().map(|s| &s.id).collect();
                    assert_eq!(ids.len(), plan.steps.len());
                    for s in &plan.steps {
                        assert!(tools.contains(&s.tool.as_str()));
                        assert!(!s.id.trim().is_empty() && !s.goal.trim().is_empty());
                        match mode {
                            PlannerMode::Normal => assert!(s.gap_id.is_none()),
                            PlannerMode::EvidenceGapOnly => {
                                let g = s.gap_id.as_deref().unwrap();
                                assert!(ctx.critical_gaps.iter().any(|c| c.id == g));
                                let q = QueryRef::new(&s.tool, &Value::Object(s.arguments.clone()));
                                assert!(!ctx.completed_queries.contains(&q));
                            }
                        }
                    }
                }
                Err(e) => assert_bounded(&e),
            }
        }
        match parse_executor(text) {
            Ok(out) => {
                assert!(!out.claims.is_empty() || out.is_no_evidence());
                let ids: HashSet<_> = out.claims.iter().map(|c| &c.claim_id).collect();
                assert_eq!(ids.len(), out.claims.len());
                for c in &out.claims {
                    assert!(!c.claim_id.trim().is_empty() && !c.text.trim().is_empty());
                    for b in &c.bindings {
                        assert!(json_pointer::validate(&b.raw_path).is_ok());
                        assert!(!b.source_invocation_id.trim().is_empty());
                        assert!(!b.tool_name.trim().is_empty() && !b.quote.trim().is_empty());
                    }
                }
            }
            Err(e) => assert_bounded(&e),
        }
        let ids = known();
        match parse_verifier(text, &ids) {
            Ok(v) => {
                assert!((0.0..=1.0).contains(&v.groundedness));
                assert!(v.allowed_claims.iter().all(|c| ids.contains(c)));
                assert!(v.claim_checks.iter().all(|c| ids.contains(&c.claim_id)));
                assert!(v
                    .facts
                    .iter()
                    .flat_map(|f| &f.claim_ids)
                    .all(|c| ids.contains(c)));
                let unique: HashSet<_> = v.allowed_claims.iter().collect();
                assert_eq!(unique.len(), v.allowed_claims.len());
                // The Verifier agrees with itself: every allowed claim is checked supported,
                // no contradicted fact names one, and PASS allows at least one.
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
            }
            Err(e) => assert_bounded(&e),
        }
        let allowed = vec!["c1".to_string()];
        match parse_composer(text, &allowed) {
            Ok(a) => {
                assert!(!a.answer_markdown.trim().is_empty());
                assert!(a.cited_claims.iter().all(|c| allowed.contains(c)));
            }
            Err(e) => assert_bounded(&e),
        }
    }

    fn assert_bounded(e: &ContractViolation) {
        let msg = e.to_string();
        assert!(msg.chars().count() < 1200, "{msg}");
        assert!(!e.reason().is_empty());
    }

    proptest! {
        // At least 512 cases, more when PROPTEST_CASES asks (10,000 in CI).
        #![proptest_config(diag_testkit::seeded::config_with_min_cases(0xD1A6_0101, 512))]

        #[test]
        fn arbitrary_strings_never_panic(text in ".{0,200}") {
            all_parsers_hold(&text);
        }

        #[test]
        fn json_shaped_strings_never_panic(text in r#"[\[\]{}":,0-9a-z ` \\\n-]{0,120}"#) {
            all_parsers_hold(&text);
        }

        #[test]
        fn arbitrary_json_values_never_panic(doc in arb_json()) {
            all_parsers_hold(&doc.to_string());
            all_parsers_hold(&format!("```json\n{doc}\n```"));
        }

        #[test]
        fn near_valid_plans_keep_the_contract(text in arb_plan().prop_flat_map(render)) {
            all_parsers_hold(&text);
        }

        #[test]
        fn near_valid_executor_outputs_keep_the_contract(text in arb_executor().prop_flat_map(render)) {
            all_parsers_hold(&text);
        }

        #[test]
        fn near_valid_verdicts_keep_the_contract(text in arb_verifier().prop_flat_map(render)) {
            all_parsers_hold(&text);
        }

        #[test]
        fn near_valid_answers_keep_the_contract(text in arb_composer().prop_flat_map(render)) {
            all_parsers_hold(&text);
        }

        #[test]
        fn long_model_text_never_reaches_a_message(s in ".{100,400}") {
            let mut doc = composer_doc();
            doc["schema"] = json!(s);
            let err = composer(&doc.to_string()).unwrap_err();
            match &err {
                ContractViolation::WrongSchema { found, .. } => {
                    prop_assert!(found.chars().count() <= SNIPPET_CHARS + 1);
                }
                other => prop_assert!(false, "{other:?}"),
            }
        }
    }

    /// The generators must actually reach accepted documents, or the invariants go unchecked.
    #[test]
    fn near_valid_generators_reach_legal_documents() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let ids = known();
        let mut accepted = [0usize; 4];
        for _ in 0..2000 {
            let p = arb_plan()
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .to_string();
            accepted[0] += usize::from(parse_plan(&p, TOOLS, PlannerMode::Normal, None).is_ok());
            let e = arb_executor()
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .to_string();
            accepted[1] += usize::from(parse_executor(&e).is_ok());
            let v = arb_verifier()
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .to_string();
            accepted[2] += usize::from(parse_verifier(&v, &ids).is_ok());
            let c = arb_composer()
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .to_string();
            accepted[3] += usize::from(parse_composer(&c, &ids).is_ok());
        }
        assert!(
            accepted.iter().all(|&n| n > 0),
            "accepted per contract: {accepted:?}"
        );
    }
}
