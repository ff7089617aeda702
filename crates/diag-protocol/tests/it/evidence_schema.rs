//! The evidence turn's schema, built from the run's own evidence
//! (openspec/specs/agent-runtime/spec.md), as properties over generated tool outputs: every
//! pointer it offers resolves in its recorded output, every whole quote it offers is found
//! there by the Gatekeeper, a document that uses only what it offers validates, a run with
//! nothing to cite allows no claim, and the cap holds however many leaves there are.

use diag_testkit::seeded;

use diag_protocol::json_pointer::resolve;
use diag_protocol::schema::{
    evidence_leaves, executor_evidence, EvidenceLeaf, MAX_EVIDENCE_LEAVES, MAX_WHOLE_QUOTE_CHARS,
};
use diag_protocol::{
    validate_run, Binding, Claim, ExecutorOutput, InvocationStatus, ToolInvocation,
};
use proptest::prelude::*;
use serde_json::{json, Value};

fn invocation(id: &str, tool: &str, status: InvocationStatus, output: Value) -> ToolInvocation {
    ToolInvocation {
        run_id: "run-1".into(),
        session_id: "ses-1".into(),
        invocation_id: id.into(),
        agent: "executor".into(),
        round: 1,
        tool_name: tool.into(),
        arguments: json!({}),
        output,
        status,
        duration_ms: 1,
    }
}

/// Tool outputs as tools write them: objects and arrays of log lines, counts, flags and
/// nulls, with member names that need escaping in a pointer.
fn output() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        "[a-z0-9 :./-]{0,40}",
        Just("upstream returned 502 from payment-service".to_string()),
        Just("HikariPool-1 - Connection is not available".to_string()),
        Just("   ".to_string()),
        "[^\u{0}]{0,300}",
    ];
    let leaf = prop_oneof![
        text.prop_map(Value::String),
        any::<u32>().prop_map(|n| json!(n)),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z~/_]{1,8}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn statuses() -> impl Strategy<Value = InvocationStatus> {
    prop_oneof![
        4 => Just(InvocationStatus::Ok),
        1 => Just(InvocationStatus::Error),
        1 => Just(InvocationStatus::Blocked),
    ]
}

fn run() -> impl Strategy<Value = Vec<ToolInvocation>> {
    prop::collection::vec((output(), statuses(), 0..3usize), 0..5).prop_map(|calls| {
        calls
            .into_iter()
            .enumerate()
            .map(|(i, (out, status, tool))| {
                let tool = ["search_logs", "query_metrics", "search_runbooks"][tool];
                invocation(&format!("inv-{}", i + 1), tool, status, out)
            })
            .collect()
    })
}

/// A claim binding `leaf` with its whole text as the quote.
fn whole_quote_claim(n: usize, leaf: &EvidenceLeaf) -> Claim {
    Claim {
        claim_id: format!("c{n}"),
        text: "the tool output shows this".into(),
        bindings: vec![Binding {
            source_invocation_id: leaf.invocation_id.clone(),
            tool_name: leaf.tool_name.clone(),
            raw_path: leaf.pointer.clone(),
            quote: leaf.text.clone(),
        }],
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The claim alternatives of a built grammar-form schema (one per leaf).
fn claim_alternatives(schema: &Value) -> Vec<Value> {
    let claim = &schema["properties"]["claims"]["items"];
    match claim["anyOf"].as_array() {
        Some(a) => a.clone(),
        None if claim.get("properties").is_some() => vec![claim.clone()],
        None => Vec::new(),
    }
}

/// The binding alternatives of a built guidance-form schema.
fn alternatives(schema: &Value) -> Vec<Value> {
    let binding = &schema["properties"]["claims"]["items"]["properties"]["bindings"]["items"];
    match binding["anyOf"].as_array() {
        Some(a) => a.clone(),
        None if binding.is_object() => vec![binding.clone()],
        None => Vec::new(),
    }
}

fn document(claims: Vec<Value>) -> Value {
    json!({"schema": "executor_evidence_v2", "claims": claims,
           "limitations": ["only the recorded outputs were read"]})
}

fn binding_doc(leaf: &EvidenceLeaf, quote: &str) -> Value {
    json!({"claim_id": "c1", "text": "the tool output shows this", "bindings": [{
        "source_invocation_id": leaf.invocation_id, "tool_name": leaf.tool_name,
        "raw_path": leaf.pointer, "quote": quote}]})
}

proptest! {
    #![proptest_config(seeded::config(0x5C4E_3A11))]

    /// Every leaf offered resolves at its pointer in a successful invocation's output to the
    /// text offered, the Gatekeeper accepts it quoted whole, and the schemas offer exactly
    /// those pointers and (in the grammar form) those quotes.
    #[test]
    fn every_offered_pointer_resolves_and_every_offered_quote_is_found(
        invocations in run(),
        relevance in prop::collection::vec("[a-z0-9 -]{0,30}", 0..4),
    ) {
        let leaves = evidence_leaves(&invocations, &relevance, MAX_EVIDENCE_LEAVES);
        prop_assert!(leaves.len() <= MAX_EVIDENCE_LEAVES);
        for leaf in &leaves {
            let inv = invocations
                .iter()
                .find(|i| i.invocation_id == leaf.invocation_id)
                .expect("an offered id is a recorded invocation");
            prop_assert_eq!(inv.status, InvocationStatus::Ok);
            prop_assert_eq!(&inv.tool_name, &leaf.tool_name);
            let target = resolve(&inv.output, &leaf.pointer).expect("the pointer resolves");
            let text = match target {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => panic!("{} names {other}", leaf.pointer),
            };
            prop_assert_eq!(&text, &leaf.text);
            prop_assert!(!text.trim().is_empty());
        }
        // The Gatekeeper accepts every offered leaf quoted whole.
        let output = ExecutorOutput {
            claims: leaves
                .iter()
                .enumerate()
                .map(|(i, l)| whole_quote_claim(i + 1, l))
                .collect(),
            ..ExecutorOutput::default()
        };
        let raw = validate_run("run-1", &output, &invocations);
        for b in &raw.checked_bindings {
            prop_assert!(b.passed, "{} {}: {:?}", b.source_invocation_id, b.raw_path, b.failure);
        }
        prop_assert_eq!(raw.checked_bindings.len(), leaves.len());

        let ids: Vec<&str> = invocations.iter().map(|i| i.invocation_id.as_str()).collect();
        let (guidance, grammar) = executor_evidence(&leaves, &ids, &[]);
        let mut offered: Vec<(String, String)> = Vec::new();
        for alt in alternatives(&guidance) {
            let p = &alt["properties"];
            let id = strings(&p["source_invocation_id"]["enum"]).remove(0);
            for pointer in strings(&p["raw_path"]["enum"]) {
                offered.push((id.clone(), pointer));
            }
        }
        let want: Vec<(String, String)> = leaves
            .iter()
            .map(|l| (l.invocation_id.clone(), l.pointer.clone()))
            .collect();
        prop_assert_eq!(&offered, &want);
        let grammar_alts = claim_alternatives(&grammar);
        prop_assert_eq!(grammar_alts.len(), leaves.len());
        for (alt, leaf) in grammar_alts.iter().zip(&leaves) {
            let bound = &alt["properties"]["bindings"]["items"]["properties"];
            prop_assert_eq!(strings(&bound["raw_path"]["enum"]), vec![leaf.pointer.clone()]);
            let quote = &bound["quote"];
            let said = &alt["properties"]["text"];
            if leaf.text.chars().count() <= MAX_WHOLE_QUOTE_CHARS {
                prop_assert_eq!(strings(&quote["enum"]), vec![leaf.text.clone()]);
                prop_assert_eq!(strings(&said["enum"]), vec![leaf.text.clone()]);
            } else {
                prop_assert!(quote.get("enum").is_none() && said.get("enum").is_none());
            }
        }
        if !leaves.is_empty() {
            prop_assert_eq!(&grammar["properties"]["claims"]["maxItems"], &json!(1));
            prop_assert_eq!(&grammar["properties"]["claims"]["minItems"], &json!(1));
        }

        // A document that uses what the schemas offer validates against both; one that
        // cites another pointer does not.
        let g = jsonschema::validator_for(&guidance).expect("a valid schema");
        let w = jsonschema::validator_for(&grammar).expect("a valid schema");
        for leaf in &leaves {
            let doc = document(vec![binding_doc(leaf, &leaf.text)]);
            prop_assert!(g.is_valid(&doc), "{}", doc);
            // The grammar form's claim restates its leaf.
            let mut restated = binding_doc(leaf, &leaf.text);
            restated["text"] = json!(leaf.text);
            let doc = document(vec![restated.clone()]);
            prop_assert!(w.is_valid(&doc), "{}", doc);
            prop_assert!(!w.is_valid(&document(vec![restated.clone(), restated])), "one claim");
            let elsewhere = EvidenceLeaf { pointer: format!("{}/elsewhere", leaf.pointer), ..leaf.clone() };
            let mut doc = document(vec![binding_doc(&elsewhere, &leaf.text)]);
            prop_assert!(!g.is_valid(&doc), "{}", doc);
            doc["claims"][0]["text"] = json!(leaf.text);
            prop_assert!(!w.is_valid(&doc), "{}", doc);
        }
        let doc = document(Vec::new());
        prop_assert!(g.is_valid(&doc));
        // Under a grammar, outputs with something to cite are restated by at least one claim.
        prop_assert_eq!(w.is_valid(&doc), leaves.is_empty(), "{}", doc);
        // Under a grammar, no document is an empty result: a limitation is asked for.
        let bare = json!({"schema": "executor_evidence_v2", "claims": []});
        prop_assert!(g.is_valid(&bare) && !w.is_valid(&bare));
    }
}

#[test]
fn a_run_with_nothing_to_cite_allows_only_a_document_without_claims() {
    let failed = [
        invocation(
            "inv-1",
            "search_logs",
            InvocationStatus::Error,
            json!({"error": "file not found: /var/log/x"}),
        ),
        invocation(
            "inv-2",
            "search_logs",
            InvocationStatus::Blocked,
            json!({"error": "blocked"}),
        ),
    ];
    for (invocations, ids) in [(&failed[..], vec!["inv-1", "inv-2"]), (&[][..], Vec::new())] {
        let leaves = evidence_leaves(invocations, &["file".into()], MAX_EVIDENCE_LEAVES);
        assert!(leaves.is_empty());
        let (guidance, grammar) = executor_evidence(&leaves, &ids, &[]);
        for schema in [guidance, grammar] {
            let v = jsonschema::validator_for(&schema).unwrap();
            assert!(
                v.is_valid(&json!({"schema": "executor_evidence_v2", "claims": [],
                "limitations": ["every search failed"]}))
            );
            let cited = json!({"schema": "executor_evidence_v2", "claims": [{
                "claim_id": "c1", "text": "file not found", "bindings": [{
                "source_invocation_id": "inv-1", "tool_name": "search_logs",
                "raw_path": "/error", "quote": "file not found"}]}]});
            assert!(!v.is_valid(&cited), "{schema:#}");
            match ids.as_slice() {
                [] => assert!(!v.is_valid(&json!({"schema": "executor_evidence_v2",
                    "claims": [], "no_evidence": [{"query_ref": "inv-1", "reason": "x"}],
                    "limitations": ["every search failed"]}))),
                _ => assert!(v.is_valid(&json!({"schema": "executor_evidence_v2",
                    "claims": [], "no_evidence": [{"query_ref": "inv-2", "reason": "blocked"}],
                    "limitations": ["every search failed"]}))),
            }
        }
    }
}

#[test]
fn the_cap_holds_with_a_thousand_matches_and_keeps_the_relevant_ones() {
    let matches: Vec<Value> = (0..1000)
        .map(|i| {
            let line = if i % 100 == 7 {
                format!(
                    "14:02:{:02} ERROR payment-service Connection is not available #{i}",
                    i % 60
                )
            } else {
                format!(
                    "14:01:{:02} INFO checkout-service request served #{i}",
                    i % 60
                )
            };
            json!({"line_no": i + 1, "line": line})
        })
        .collect();
    let output = json!({"matches": matches, "matches_found": 1000, "more_matches": false});
    let invocations = [invocation(
        "inv-1",
        "search_logs",
        InvocationStatus::Ok,
        output,
    )];
    let relevance = vec!["payment-service pool is exhausted: no connection available".to_string()];
    let leaves = evidence_leaves(&invocations, &relevance, MAX_EVIDENCE_LEAVES);
    assert_eq!(leaves.len(), MAX_EVIDENCE_LEAVES);
    // The ten lines that name what the plan looks for come first; the rest fill up the cap
    // in document order.
    let relevant: Vec<&EvidenceLeaf> = leaves
        .iter()
        .filter(|l| l.text.contains("Connection is not available"))
        .collect();
    assert_eq!(relevant.len(), 10);
    let pointers: Vec<&str> = leaves.iter().map(|l| l.pointer.as_str()).collect();
    let mut sorted = pointers.clone();
    sorted.sort_by_key(|p| {
        p.split('/')
            .filter_map(|t| t.parse::<usize>().ok())
            .next()
            .unwrap_or(usize::MAX)
    });
    assert_eq!(pointers, sorted, "offered in document order");
    let (guidance, grammar) = executor_evidence(&leaves, &["inv-1"], &[]);
    assert_eq!(claim_alternatives(&grammar).len(), MAX_EVIDENCE_LEAVES);
    let offered = strings(&alternatives(&guidance)[0]["properties"]["raw_path"]["enum"]);
    assert_eq!(offered.len(), MAX_EVIDENCE_LEAVES);
    // Bounded in bytes too: the grammar form stays a few kilobytes.
    assert!(
        grammar.to_string().len() < 24 * 1024,
        "{}",
        grammar.to_string().len()
    );
}

#[test]
fn an_id_recorded_twice_is_not_offered() {
    let invocations = [
        invocation(
            "inv-1",
            "search_logs",
            InvocationStatus::Ok,
            json!({"line": "a 502 line"}),
        ),
        invocation(
            "inv-1",
            "search_logs",
            InvocationStatus::Ok,
            json!({"line": "another line"}),
        ),
        invocation(
            "inv-2",
            "search_logs",
            InvocationStatus::Ok,
            json!({"line": "a third line"}),
        ),
    ];
    let leaves = evidence_leaves(&invocations, &[], MAX_EVIDENCE_LEAVES);
    let ids: Vec<&str> = leaves.iter().map(|l| l.invocation_id.as_str()).collect();
    assert_eq!(ids, ["inv-2"]);
}

#[test]
fn claim_ids_are_the_kept_ones_and_numbered_ones() {
    let invocations = [invocation(
        "inv-1",
        "search_logs",
        InvocationStatus::Ok,
        json!({"line": "upstream returned 502 from payment-service"}),
    )];
    let leaves = evidence_leaves(&invocations, &[], MAX_EVIDENCE_LEAVES);
    let (guidance, grammar) = executor_evidence(&leaves, &["inv-1"], &["pool-1", "c2"]);
    let claim = |id: &str| {
        json!({"schema": "executor_evidence_v2", "limitations": ["x"], "claims": [
            {"claim_id": id, "text": "upstream returned 502 from payment-service", "bindings": [{
                "source_invocation_id": "inv-1", "tool_name": "search_logs", "raw_path": "/line",
                "quote": "upstream returned 502 from payment-service"}]}]})
    };
    for schema in [guidance, grammar] {
        // One leaf: a single claim (or binding) alternative, not an `anyOf`.
        let claim_schema = &schema["properties"]["claims"]["items"];
        let ids = strings(&claim_schema["properties"]["claim_id"]["enum"]);
        assert_eq!(ids[..3], ["pool-1", "c2", "c1"]);
        assert_eq!(ids.len(), 13, "{ids:?}");
        let v = jsonschema::validator_for(&schema).unwrap();
        for ok in ["pool-1", "c1", "c12"] {
            assert!(v.is_valid(&claim(ok)), "{ok}");
        }
        for bad in ["c13", "claim one", "1c", ""] {
            assert!(!v.is_valid(&claim(bad)), "{bad}");
        }
    }
}
