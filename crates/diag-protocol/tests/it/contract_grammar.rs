//! The grammar forms of the Planner's, Verifier's and Composer's contracts
//! (openspec/specs/agent-runtime/spec.md, "contracts a small model can keep"): what a server
//! that compiles them to a grammar lets a model write is what the parsers take, and what a
//! small model does when it runs on (repeating an item, an id, a verdict without claims, an
//! answer without end) is outside them.

use diag_protocol::derivation::Op;
use diag_protocol::schema::{
    composer_grammar, composer_v2, composer_v2_grammar, planner_grammar, verifier_grammar,
    GRAMMAR_ANSWER_CHARS, GRAMMAR_HYPOTHESES, GRAMMAR_STEPS, MAX_DERIVATIONS,
};
use diag_protocol::{parse_composer, parse_plan, parse_verifier, PlannerMode};
use serde_json::{json, Value};

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::validator_for(schema).expect("a valid schema")
}

fn tools() -> (Value, Value) {
    (
        json!({"type": "object", "properties": {"query": {"type": "string"},
            "service": {"type": "string"}}, "required": ["query"]}),
        json!({"type": "object", "properties": {}}),
    )
}

#[test]
fn the_planner_grammar_numbers_by_position_and_bounds_the_lists() {
    let (logs, time) = tools();
    let catalog = [("search_logs", &logs), ("current_time", &time)];
    let grammar = planner_grammar(&catalog, PlannerMode::Normal, None);
    let v = validator(&grammar);
    let step = json!({"goal": "find 502s", "tool": "search_logs", "arguments": {"query": "502"}});
    let doc = |hypotheses: usize, steps: usize| {
        json!({"schema": "planner_plan_v1", "mode": "NORMAL",
            "hypotheses": vec![json!({"statement": "the pool ran out"}); hypotheses],
            "steps": vec![step.clone(); steps]})
    };
    let ok = doc(GRAMMAR_HYPOTHESES, GRAMMAR_STEPS);
    assert!(v.is_valid(&ok));
    let plan = parse_plan(
        &ok.to_string(),
        &["search_logs", "current_time"],
        PlannerMode::Normal,
        None,
    )
    .expect("a document the grammar allows parses");
    assert_eq!(plan.steps.len(), GRAMMAR_STEPS);
    assert_eq!(
        plan.steps[GRAMMAR_STEPS - 1].id,
        format!("s{GRAMMAR_STEPS}")
    );
    assert!(!v.is_valid(&doc(1, GRAMMAR_STEPS + 1)), "one step too many");
    assert!(!v.is_valid(&doc(1, 0)), "no step");
    assert!(
        !v.is_valid(&doc(GRAMMAR_HYPOTHESES + 1, 1)),
        "one hypothesis too many"
    );
    let mut with_id = doc(0, 1);
    with_id["steps"][0]["id"] = json!("s1");
    assert!(!v.is_valid(&with_id), "no id to repeat");
    let mut unknown = doc(0, 1);
    unknown["steps"][0]["tool"] = json!("rm_rf");
    assert!(!v.is_valid(&unknown));
}

#[test]
fn the_verifier_grammar_ties_pass_to_an_allowed_claim_and_bounds_groundedness() {
    let ids = vec!["c1".to_string(), "c2".to_string()];
    let v = validator(&verifier_grammar(&ids));
    let doc = |verdict: &str, allowed: Value, groundedness: Value| {
        json!({"schema": "verifier_verdict_v1", "verdict": verdict,
            "groundedness": groundedness,
            "claim_checks": [{"claim_id": "c1", "supported": true}],
            "facts": [], "allowed_claims": allowed})
    };
    let pass = doc("PASS", json!(["c1"]), json!(0.9));
    assert!(v.is_valid(&pass));
    parse_verifier(&pass.to_string(), &ids).expect("a PASS the grammar allows parses");
    assert!(
        !v.is_valid(&doc("PASS", json!([]), json!(0.9))),
        "PASS allows a claim"
    );
    assert!(v.is_valid(&doc("LOW_CONFID", json!([]), json!(0.5))));
    assert!(v.is_valid(&doc("REJECT", json!([]), json!(0))));
    assert!(!v.is_valid(&doc("PASS", json!(["c1"]), json!(3.5))));
    assert!(
        !v.is_valid(&doc("PASS", json!(["c1"]), json!(0.95))),
        "tenths only"
    );
    assert!(!v.is_valid(&doc("PASS", json!(["c1", "c2", "c1"]), json!(1))));
    assert!(!v.is_valid(&doc("PASS", json!(["c3"]), json!(1))));
    let none = validator(&verifier_grammar(&[]));
    assert!(
        !none.is_valid(&doc("PASS", json!([]), json!(1))),
        "no PASS without claims"
    );
    assert!(none.is_valid(
        &json!({"schema": "verifier_verdict_v1", "verdict": "REJECT",
        "groundedness": 0.0, "claim_checks": [], "facts": [], "allowed_claims": []})
    ));
}

#[test]
fn the_composer_grammar_bounds_the_answer_and_the_citations() {
    let allowed = vec!["c1".to_string(), "c2".to_string()];
    let v = validator(&composer_grammar(&allowed));
    let doc = |answer: String, cited: Value| json!({"schema": "composer_answer_v1", "answer_markdown": answer, "cited_claims": cited});
    let ok = doc(
        "The pool of payment-db was exhausted [c1].".into(),
        json!(["c1"]),
    );
    assert!(v.is_valid(&ok));
    parse_composer(&ok.to_string(), &allowed).expect("an answer the grammar allows parses");
    assert!(!v.is_valid(&doc("x".repeat(GRAMMAR_ANSWER_CHARS + 1), json!(["c1"]))));
    assert!(
        !v.is_valid(&doc("a".into(), json!(["c1", "c2", "c1"]))),
        "a runaway list of citations"
    );
    assert!(!v.is_valid(&doc("a".into(), json!(["c9"]))));
}

#[test]
fn the_composer_v2_grammar_enumerates_operations_ids_and_operand_claims() {
    let allowed = vec!["c4".to_string(), "c6".to_string()];
    let v = validator(&composer_v2_grammar(&allowed));
    let percent = json!({"id": "d1", "value": "96", "unit": "%", "op": "percentage",
        "operands": [{"claim": "c6", "value": "48"}, {"claim": "c4", "value": "50"}]});
    let doc = |derivations: Value| {
        json!({"schema": "composer_answer_v2",
            "answer_markdown": "The batch held 96 % [d1] of the pool [c4, c6].",
            "cited_claims": ["c4", "c6"], "derivations": derivations})
    };
    let ok = doc(json!([percent]));
    assert!(v.is_valid(&ok), "{:?}", v.iter_errors(&ok).next());
    let answer = parse_composer(&ok.to_string(), &allowed).expect("the grammar's answer parses");
    assert_eq!(answer.derivations.len(), 1);
    assert!(v.is_valid(&doc(json!([]))), "no derivation at all");
    // Everything the checks would refuse by shape is outside the grammar.
    let with = |path: &str, value: Value| {
        let mut d = percent.clone();
        *d.pointer_mut(path).unwrap() = value;
        doc(json!([d]))
    };
    for (path, value, why) in [
        (
            "/op",
            json!("ratio_percent"),
            "an operation outside the set",
        ),
        ("/id", json!("c1"), "an id that is no derivation id"),
        (
            "/operands/0/claim",
            json!("c9"),
            "an operand naming no allowed claim",
        ),
        ("/operands", json!([]), "no operand"),
        ("/value", json!(""), "a blank result"),
    ] {
        assert!(!v.is_valid(&with(path, value)), "{why}");
    }
    let mut extra = percent.clone();
    extra["rounding"] = json!("up");
    assert!(
        !v.is_valid(&doc(json!([extra]))),
        "a member the checks do not read"
    );
    let many: Vec<Value> = (1..=MAX_DERIVATIONS + 1)
        .map(|n| {
            let mut d = percent.clone();
            d["id"] = json!(format!("d{n}"));
            d
        })
        .collect();
    assert!(
        !v.is_valid(&doc(json!(many))),
        "a runaway list of derivations"
    );
    assert!(
        !v.is_valid(&json!({"schema": "composer_answer_v2",
        "answer_markdown": "a [c4]", "cited_claims": ["c4"]})),
        "derivations is required"
    );
    // Every operation of the closed set is offered, and nothing else.
    let offered = composer_v2(&allowed)["properties"]["derivations"]["items"]["properties"]["op"]
        ["enum"]
        .clone();
    let names: Vec<&str> = Op::ALL.iter().map(|op| op.name()).collect();
    assert_eq!(offered, json!(names));
    // With no claim allowed, no operand can be named: the list is empty.
    let none = validator(&composer_v2_grammar(&[]));
    assert!(!none.is_valid(&json!({"schema": "composer_answer_v2",
        "answer_markdown": "a", "cited_claims": [], "derivations": [percent]})));
}
