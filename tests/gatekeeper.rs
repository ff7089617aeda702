//! Gatekeeper component tests: every binding failure by name, the whitespace and case rules,
//! text cut from the tool output, the policy outcomes with their audit counts, and inputs
//! that must not make it panic or go quadratic.

mod seeded;

use diag::protocol::gatekeeper::{normalize, normalize_whitespace};
use diag::protocol::{
    ceiling, match_quote, validate_run, Audit, Binding, BindingFailure, Claim, ExecutorOutput,
    GateStatus, GatekeeperRaw, InvocationStatus, NoEvidence, ToolInvocation, Verdict,
};
use proptest::prelude::*;
use serde_json::{json, Value};

const RUN: &str = "run-A";

fn inv(run_id: &str, id: &str, tool: &str, output: Value) -> ToolInvocation {
    ToolInvocation {
        run_id: run_id.into(),
        session_id: "sess-1".into(),
        invocation_id: id.into(),
        agent: "executor".into(),
        round: 1,
        tool_name: tool.into(),
        arguments: json!({"query": "502"}),
        output,
        status: InvocationStatus::Ok,
        duration_ms: 3,
    }
}

fn logs(line: &str) -> Value {
    json!({"matches": [{"file": "app.log", "line_no": 7, "timestamp": "14:02", "line": line}],
           "truncated": false})
}

fn binding(id: &str, tool: &str, path: &str, quote: &str) -> Binding {
    Binding {
        source_invocation_id: id.into(),
        tool_name: tool.into(),
        raw_path: path.into(),
        quote: quote.into(),
    }
}

fn claim(id: &str, bindings: Vec<Binding>) -> Claim {
    Claim {
        claim_id: id.into(),
        text: format!("claim {id}"),
        bindings,
    }
}

fn output(claims: Vec<Claim>) -> ExecutorOutput {
    ExecutorOutput {
        claims,
        ..ExecutorOutput::default()
    }
}

/// Checks one binding of one claim against `invocations` of run `RUN`: the matched text when
/// it passed, the failure name when it did not.
fn check(invocations: &[ToolInvocation], b: Binding) -> Result<String, String> {
    let raw = validate_run(RUN, &output(vec![claim("c1", vec![b])]), invocations);
    assert_eq!(raw.checked_bindings.len(), 1);
    let cb = &raw.checked_bindings[0];
    if cb.passed {
        assert!(cb.failure.is_none(), "a passed binding carries no failure");
        Ok(cb
            .matched_text
            .clone()
            .expect("a passed binding carries matched_text"))
    } else {
        assert!(
            cb.matched_text.is_none(),
            "a failed binding carries no text"
        );
        Err(cb
            .failure
            .clone()
            .expect("a failed binding names its failure"))
    }
}

fn failed(kind: BindingFailure) -> Result<String, String> {
    Err(kind.as_str().to_string())
}

fn std_invs() -> Vec<ToolInvocation> {
    vec![inv(
        RUN,
        "inv-1",
        "search_logs",
        logs("checkout: upstream returned 502 from payment-service"),
    )]
}

// ---- failures by name ---------------------------------------------------------------------

#[test]
fn a_binding_to_recorded_text_passes_with_the_cut_text() {
    assert_eq!(
        check(
            &std_invs(),
            binding(
                "inv-1",
                "search_logs",
                "/matches/0/line",
                "upstream returned 502"
            )
        ),
        Ok("upstream returned 502".to_string())
    );
}

#[test]
fn unknown_invocation_fails() {
    assert_eq!(
        check(
            &std_invs(),
            binding(
                "inv-9",
                "search_logs",
                "/matches/0/line",
                "upstream returned 502"
            )
        ),
        failed(BindingFailure::UnknownInvocation)
    );
}

#[test]
fn an_invocation_of_another_run_fails_exactly_like_an_unknown_one() {
    // Same id, same tool, same text: only the run differs.
    let foreign = vec![inv(
        "run-B",
        "inv-1",
        "search_logs",
        logs("upstream returned 502"),
    )];
    let b = binding(
        "inv-1",
        "search_logs",
        "/matches/0/line",
        "upstream returned 502",
    );
    let foreign_result = check(&foreign, b.clone());
    assert_eq!(foreign_result, failed(BindingFailure::UnknownInvocation));
    assert_eq!(foreign_result, check(&[], b));
}

#[test]
fn only_the_current_runs_record_of_a_shared_id_is_consulted() {
    let invs = vec![
        inv("run-B", "inv-1", "search_logs", logs("foreign text only")),
        inv(RUN, "inv-1", "search_logs", logs("own text here")),
    ];
    let own = binding("inv-1", "search_logs", "/matches/0/line", "own text");
    let foreign = binding("inv-1", "search_logs", "/matches/0/line", "foreign text");
    assert_eq!(check(&invs, own), Ok("own text".to_string()));
    assert_eq!(check(&invs, foreign), failed(BindingFailure::QuoteNotFound));
}

#[test]
fn tool_name_mismatch_fails() {
    assert_eq!(
        check(
            &std_invs(),
            binding(
                "inv-1",
                "query_metrics",
                "/matches/0/line",
                "upstream returned 502"
            )
        ),
        failed(BindingFailure::ToolNameMismatch)
    );
}

#[test]
fn path_not_found_fails_for_every_kind_of_miss() {
    for path in [
        "/matches/0/message", // missing key
        "/matches/1/line",    // index out of range
        "/matches/00/line",   // leading zero
        "/matches/-/line",    // past-the-end marker names nothing
        "/matches/+0/line",   // sign
        "matches/0/line",     // no leading slash
        "/matches/0/line/x",  // through a string
        "/truncated/0",       // through a bool
    ] {
        assert_eq!(
            check(
                &std_invs(),
                binding("inv-1", "search_logs", path, "upstream returned 502")
            ),
            failed(BindingFailure::PathNotFound),
            "{path}"
        );
    }
}

#[test]
fn quote_not_in_the_text_fails() {
    assert_eq!(
        check(
            &std_invs(),
            binding(
                "inv-1",
                "search_logs",
                "/matches/0/line",
                "upstream returned 504"
            )
        ),
        failed(BindingFailure::QuoteNotFound)
    );
}

#[test]
fn a_quote_present_only_in_another_field_of_the_same_output_fails() {
    let invs = vec![inv(
        RUN,
        "inv-1",
        "search_logs",
        json!({"matches": [{"file": "payment-pool.log", "line": "all good"},
                           {"file": "x", "line": "pool exhausted at 14:02"}]}),
    )];
    assert_eq!(
        check(
            &invs,
            binding("inv-1", "search_logs", "/matches/0/line", "pool exhausted")
        ),
        failed(BindingFailure::QuoteNotFound)
    );
    assert_eq!(
        check(
            &invs,
            binding("inv-1", "search_logs", "/matches/0/line", "payment-pool")
        ),
        failed(BindingFailure::QuoteNotFound)
    );
    assert_eq!(
        check(
            &invs,
            binding("inv-1", "search_logs", "/matches/1/line", "pool exhausted")
        ),
        Ok("pool exhausted".to_string())
    );
}

#[test]
fn non_string_targets_fail_as_not_a_string() {
    let invs = vec![inv(
        RUN,
        "inv-1",
        "query_metrics",
        json!({"n": 502, "obj": {"line": "upstream returned 502"}, "nil": null,
               "flag": true, "list": ["upstream returned 502"], "f": 5.02}),
    )];
    for path in ["/n", "/obj", "/nil", "/flag", "/list", "/f", ""] {
        assert_eq!(
            check(&invs, binding("inv-1", "query_metrics", path, "502")),
            failed(BindingFailure::NotAString),
            "{path:?}"
        );
    }
}

#[test]
fn an_empty_or_blank_quote_fails() {
    for quote in ["", " ", "\n\t \u{3000}"] {
        assert_eq!(
            check(
                &std_invs(),
                binding("inv-1", "search_logs", "/matches/0/line", quote)
            ),
            failed(BindingFailure::EmptyQuote),
            "{quote:?}"
        );
    }
}

#[test]
fn an_errored_or_blocked_invocation_cannot_support_a_claim() {
    for status in [InvocationStatus::Error, InvocationStatus::Blocked] {
        let mut i = inv(
            RUN,
            "inv-1",
            "search_logs",
            json!({"error": "upstream returned 502"}),
        );
        i.status = status;
        assert_eq!(
            check(
                &[i],
                binding("inv-1", "search_logs", "/error", "returned 502")
            ),
            failed(BindingFailure::InvocationNotOk),
            "{status:?}"
        );
    }
}

#[test]
fn an_id_recorded_twice_in_the_run_is_ambiguous() {
    let invs = vec![
        inv(RUN, "inv-1", "search_logs", logs("upstream returned 502")),
        inv(RUN, "inv-1", "search_logs", logs("upstream returned 502")),
    ];
    assert_eq!(
        check(
            &invs,
            binding("inv-1", "search_logs", "/matches/0/line", "returned 502")
        ),
        failed(BindingFailure::AmbiguousInvocation)
    );
}

#[test]
fn a_repeated_claim_id_fails_all_its_bindings() {
    let b = binding("inv-1", "search_logs", "/matches/0/line", "returned 502");
    let out = output(vec![claim("c1", vec![b.clone()]), claim("c1", vec![b])]);
    let raw = validate_run(RUN, &out, &std_invs());
    assert!(raw
        .checked_bindings
        .iter()
        .all(|cb| !cb.passed && cb.failure.as_deref() == Some("duplicate_claim_id")));
    assert_eq!(normalize(Some(&raw)), GateStatus::Reject);
}

// ---- whitespace, case, Unicode -------------------------------------------------------------

#[test]
fn whitespace_is_normalised_on_both_sides() {
    let invs = vec![inv(
        RUN,
        "inv-1",
        "search_logs",
        logs("  upstream   returned\n\t502  from payment  "),
    )];
    let cases = [
        ("upstream returned 502", "upstream   returned\n\t502"),
        (
            "  upstream\n\nreturned    502 ",
            "upstream   returned\n\t502",
        ),
        ("returned\r\n502 from", "returned\n\t502  from"),
        ("payment", "payment"),
    ];
    for (quote, want) in cases {
        assert_eq!(
            check(
                &invs,
                binding("inv-1", "search_logs", "/matches/0/line", quote)
            ),
            Ok(want.to_string()),
            "{quote:?}"
        );
    }
}

#[test]
fn whitespace_cannot_be_invented_inside_a_word() {
    assert_eq!(
        check(
            &std_invs(),
            binding(
                "inv-1",
                "search_logs",
                "/matches/0/line",
                "up stream returned"
            )
        ),
        failed(BindingFailure::QuoteNotFound)
    );
}

#[test]
fn matched_text_is_cut_from_the_tool_output_not_copied_from_the_model() {
    let invs = vec![inv(
        RUN,
        "inv-1",
        "search_logs",
        logs("pool\u{00a0}exhausted:\n    42 waiters"),
    )];
    let got = check(
        &invs,
        binding(
            "inv-1",
            "search_logs",
            "/matches/0/line",
            "pool exhausted: 42   waiters",
        ),
    )
    .unwrap();
    assert_eq!(got, "pool\u{00a0}exhausted:\n    42 waiters");
    assert_ne!(got, "pool exhausted: 42   waiters");
}

#[test]
fn case_differences_fail() {
    for quote in [
        "Upstream returned 502",
        "UPSTREAM RETURNED 502",
        "upstream Returned 502",
    ] {
        assert_eq!(
            check(
                &std_invs(),
                binding("inv-1", "search_logs", "/matches/0/line", quote)
            ),
            failed(BindingFailure::QuoteNotFound),
            "{quote}"
        );
    }
}

#[test]
fn odd_unicode_is_matched_exactly_and_cut_on_char_boundaries() {
    let text = "Zürich\u{3000}\u{3000}节点 🚨 e\u{0301}rror \u{202e}reversed\u{202c} end";
    let invs = vec![inv(RUN, "inv-1", "search_logs", logs(text))];
    let cases = [
        (
            "Zürich 节点 🚨",
            Ok("Zürich\u{3000}\u{3000}节点 🚨".to_string()),
        ),
        ("🚨 e\u{0301}rror", Ok("🚨 e\u{0301}rror".to_string())),
        // Composed é is a different sequence than e + combining accent: no match.
        ("🚨 \u{00e9}rror", failed(BindingFailure::QuoteNotFound)),
        (
            "\u{202e}reversed\u{202c}",
            Ok("\u{202e}reversed\u{202c}".to_string()),
        ),
        ("ZÜRICH", failed(BindingFailure::QuoteNotFound)),
    ];
    for (quote, want) in cases {
        assert_eq!(
            check(
                &invs,
                binding("inv-1", "search_logs", "/matches/0/line", quote)
            ),
            want,
            "{quote:?}"
        );
    }
}

#[test]
fn match_quote_returns_a_slice_of_the_text() {
    let text = "a\u{2003}\u{2003}b\n\nc";
    let m = match_quote(text, "a b c").unwrap();
    assert_eq!(m, text);
    assert!(std::ptr::eq(m.as_ptr(), text.as_ptr()));
    assert_eq!(normalize_whitespace(" \u{85}x\u{2028}y "), "x y");
}

// ---- JSON pointers --------------------------------------------------------------------------

#[test]
fn pointer_escapes_tilde_one_and_tilde_zero_are_decoded() {
    let invs = vec![inv(
        RUN,
        "inv-1",
        "query_metrics",
        json!({"a/b": "slash key", "m~n": "tilde key", "~1": "literal tilde-one", "": "empty key",
               "x": {"/": {"~": "nested"}}}),
    )];
    let cases = [
        ("/a~1b", "slash key"),
        ("/m~0n", "tilde key"),
        ("/~01", "literal tilde-one"),
        ("/", "empty key"),
        ("/x/~1/~0", "nested"),
    ];
    for (path, text) in cases {
        assert_eq!(
            check(&invs, binding("inv-1", "query_metrics", path, text)),
            Ok(text.to_string()),
            "{path}"
        );
    }
}

#[test]
fn invalid_pointer_escapes_name_nothing() {
    let invs = vec![inv(
        RUN,
        "inv-1",
        "query_metrics",
        json!({"m~n": "tilde key", "a/b": "slash key", "m~2n": "decoy"}),
    )];
    for path in ["/m~2n", "/m~", "/a/b", "/m~n"] {
        assert_eq!(
            check(&invs, binding("inv-1", "query_metrics", path, "key")),
            failed(BindingFailure::PathNotFound),
            "{path}"
        );
    }
}

#[test]
fn the_empty_pointer_is_the_whole_document() {
    let invs = vec![inv(RUN, "inv-1", "current_time", json!("now is 14:02"))];
    assert_eq!(
        check(&invs, binding("inv-1", "current_time", "", "14:02")),
        Ok("14:02".to_string())
    );
}

#[test]
fn a_deep_document_and_pointer_resolve() {
    let depth = 100;
    let mut doc = json!("deep upstream 502");
    for _ in 0..depth {
        doc = json!({"k": [doc]});
    }
    let path = "/k/0".repeat(depth);
    let invs = vec![inv(RUN, "inv-1", "search_logs", doc)];
    assert_eq!(
        check(
            &invs,
            binding("inv-1", "search_logs", &path, "upstream 502")
        ),
        Ok("upstream 502".to_string())
    );
    // A very long pointer into a shallow document just misses.
    let long = "/k".repeat(100_000);
    assert_eq!(
        check(&invs, binding("inv-1", "search_logs", &long, "x")),
        failed(BindingFailure::PathNotFound)
    );
}

// ---- large outputs --------------------------------------------------------------------------

#[test]
fn a_ten_megabyte_string_is_checked_without_blowing_up() {
    let mut text = "lorem ipsum  dolor\n".repeat(10 * 1024 * 1024 / 19);
    text.push_str("FINAL upstream\treturned   502");
    let invs = vec![inv(RUN, "inv-1", "search_logs", logs(&text))];
    // Several bindings into the same string, found and not found.
    let out = output(vec![
        claim(
            "c1",
            vec![binding(
                "inv-1",
                "search_logs",
                "/matches/0/line",
                "FINAL upstream returned 502",
            )],
        ),
        claim(
            "c2",
            vec![binding(
                "inv-1",
                "search_logs",
                "/matches/0/line",
                "lorem ipsum dolor lorem ipsum dolor lorem ipsum dolor X",
            )],
        ),
        claim(
            "c3",
            vec![binding(
                "inv-1",
                "search_logs",
                "/matches/0/line",
                "dolor lorem",
            )],
        ),
    ]);
    let raw = validate_run(RUN, &out, &invs);
    let cb = &raw.checked_bindings;
    assert_eq!(
        cb[0].matched_text.as_deref(),
        Some("FINAL upstream\treturned   502")
    );
    assert_eq!(cb[1].failure.as_deref(), Some("quote_not_found"));
    assert_eq!(cb[2].matched_text.as_deref(), Some("dolor\nlorem"));
}

#[test]
fn a_huge_quote_against_a_short_text_simply_fails() {
    let quote = "x ".repeat(1_000_000);
    assert_eq!(
        check(
            &std_invs(),
            binding("inv-1", "search_logs", "/matches/0/line", &quote)
        ),
        failed(BindingFailure::QuoteNotFound)
    );
}

// ---- policy and audit -----------------------------------------------------------------------

fn two_line_invs() -> Vec<ToolInvocation> {
    vec![
        inv(RUN, "inv-1", "search_logs", logs("upstream returned 502")),
        inv(
            RUN,
            "inv-2",
            "query_metrics",
            json!({"result": [{"value": "p99 latency 30s"}]}),
        ),
    ]
}

fn good(n: u32) -> Binding {
    match n {
        1 => binding("inv-1", "search_logs", "/matches/0/line", "returned 502"),
        _ => binding("inv-2", "query_metrics", "/result/0/value", "latency 30s"),
    }
}

fn bad() -> Binding {
    binding("inv-1", "search_logs", "/matches/0/line", "returned 200")
}

fn outcome(raw: &GatekeeperRaw) -> (Option<&str>, Option<&str>) {
    (raw.result.as_deref(), raw.severity.as_deref())
}

#[test]
fn policy_every_claim_passed_and_none_failed_is_pass() {
    let out = output(vec![
        claim("c1", vec![good(1)]),
        claim("c2", vec![good(2), good(1)]),
    ]);
    let raw = validate_run(RUN, &out, &two_line_invs());
    assert_eq!(outcome(&raw), (Some("pass"), None));
    assert_eq!(
        raw.audit,
        Audit {
            claims: 2,
            bindings: 3,
            passed: 3,
            failed: 0,
            unbound_claims: 0
        }
    );
    assert_eq!(normalize(Some(&raw)), GateStatus::Pass);
    let as_json = serde_json::to_value(&raw).unwrap();
    assert_eq!(as_json["severity"], Value::Null);
}

#[test]
fn policy_some_passed_some_failed_is_low_confid() {
    let out = output(vec![claim("c1", vec![good(1)]), claim("c2", vec![bad()])]);
    let raw = validate_run(RUN, &out, &two_line_invs());
    assert_eq!(outcome(&raw), (Some("fail"), Some("low-confid")));
    assert_eq!(
        raw.audit,
        Audit {
            claims: 2,
            bindings: 2,
            passed: 1,
            failed: 1,
            unbound_claims: 0
        }
    );
    assert_eq!(normalize(Some(&raw)), GateStatus::LowConfid);
}

#[test]
fn policy_a_failed_binding_beside_a_passed_one_of_the_same_claim_is_low_confid() {
    let out = output(vec![claim("c1", vec![good(1), bad()])]);
    let raw = validate_run(RUN, &out, &two_line_invs());
    assert_eq!(outcome(&raw), (Some("fail"), Some("low-confid")));
    assert_eq!((raw.audit.passed, raw.audit.failed), (1, 1));
}

#[test]
fn policy_some_passed_some_unbound_is_low_confid() {
    let out = output(vec![claim("c1", vec![good(1)]), claim("c2", vec![])]);
    let raw = validate_run(RUN, &out, &two_line_invs());
    assert_eq!(outcome(&raw), (Some("fail"), Some("low-confid")));
    assert_eq!(
        raw.audit,
        Audit {
            claims: 2,
            bindings: 1,
            passed: 1,
            failed: 0,
            unbound_claims: 1
        }
    );
}

#[test]
fn policy_claims_without_any_passed_binding_is_reject() {
    let out = output(vec![claim("c1", vec![bad()]), claim("c2", vec![])]);
    let raw = validate_run(RUN, &out, &two_line_invs());
    assert_eq!(outcome(&raw), (Some("fail"), Some("reject")));
    assert_eq!(
        raw.audit,
        Audit {
            claims: 2,
            bindings: 1,
            passed: 0,
            failed: 1,
            unbound_claims: 1
        }
    );
    assert_eq!(normalize(Some(&raw)), GateStatus::Reject);
}

#[test]
fn policy_only_unbound_claims_is_reject() {
    let out = output(vec![claim("c1", vec![])]);
    let raw = validate_run(RUN, &out, &two_line_invs());
    assert_eq!(outcome(&raw), (Some("fail"), Some("reject")));
    assert_eq!(raw.audit.unbound_claims, 1);
}

#[test]
fn policy_zero_claims_is_low_confid_with_zero_passed() {
    let out = ExecutorOutput {
        no_evidence: vec![NoEvidence {
            query_ref: "inv-1".into(),
            reason: "no matching lines".into(),
        }],
        ..ExecutorOutput::default()
    };
    assert!(out.is_no_evidence());
    let raw = validate_run(RUN, &out, &two_line_invs());
    assert_eq!(outcome(&raw), (Some("fail"), Some("low-confid")));
    assert_eq!(raw.audit, Audit::default());
    assert_eq!(raw.passed_bindings(), 0);
    assert_eq!(normalize(Some(&raw)), GateStatus::LowConfid);
}

#[test]
fn checked_bindings_keep_claim_and_binding_order_and_fields() {
    let out = output(vec![
        claim("c1", vec![good(2), bad()]),
        claim("c2", vec![good(1)]),
    ]);
    let raw = validate_run(RUN, &out, &two_line_invs());
    let got: Vec<(&str, &str, &str, &str, bool)> = raw
        .checked_bindings
        .iter()
        .map(|c| {
            (
                c.claim_id.as_str(),
                c.source_invocation_id.as_str(),
                c.tool_name.as_str(),
                c.raw_path.as_str(),
                c.passed,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("c1", "inv-2", "query_metrics", "/result/0/value", true),
            ("c1", "inv-1", "search_logs", "/matches/0/line", false),
            ("c2", "inv-1", "search_logs", "/matches/0/line", true),
        ]
    );
}

#[test]
fn the_ceiling_follows_the_normalized_status() {
    assert_eq!(ceiling(GateStatus::Pass), Verdict::Pass);
    assert_eq!(ceiling(GateStatus::LowConfid), Verdict::LowConfid);
    assert_eq!(ceiling(GateStatus::Reject), Verdict::Reject);
}

#[test]
fn failure_names_are_snake_case_and_distinct() {
    let names: Vec<&str> = BindingFailure::ALL.iter().map(|f| f.as_str()).collect();
    for n in &names {
        assert!(
            n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{n}"
        );
        assert_eq!(BindingFailure::parse(n).map(|f| f.as_str()), Some(*n));
    }
    let mut dedup = names.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), names.len());
    assert_eq!(BindingFailure::parse("nonsense"), None);
}

// ---- properties -----------------------------------------------------------------------------

proptest! {
    // 256 cases by default; PROPTEST_CASES raises it (10,000 in CI).
    #![proptest_config(seeded::config(0xD1A6_0601))]

    /// Arbitrary text, quote and pointer never panic; whatever passes was cut from the tool's
    /// own string and says what the quote says.
    ///
    /// Half the quotes are cut from the text itself and two of three pointers name it, so
    /// bindings that pass are common and the match is checked both ways: a binding to the
    /// text passes exactly when the normalized quote occurs in it.
    #[test]
    fn validate_run_never_panics_and_passed_text_comes_from_the_tool(
        text in "\\PC{0,60}|[ a-c\\t\\n\u{3000}\u{a0}é]{0,40}",
        random_quote in "\\PC{0,12}|[ a-c\\t\\n\u{3000}]{0,8}",
        cut in (any::<usize>(), 0usize..16),
        from_text in any::<bool>(),
        path in prop_oneof![
            Just("/a".to_string()),
            Just("/b/0".to_string()),
            "(/[a-z~01]{0,3}){0,3}",
        ],
    ) {
        let quote = if from_text {
            let chars: Vec<char> = text.chars().collect();
            let start = cut.0 % (chars.len() + 1);
            chars[start..(start + cut.1).min(chars.len())].iter().collect()
        } else {
            random_quote
        };
        let invs = vec![inv(RUN, "inv-1", "t", json!({"a": text.clone(), "b": [text.clone()]}))];
        let out = output(vec![claim("c1", vec![binding("inv-1", "t", &path, &quote)])]);
        let raw = validate_run(RUN, &out, &invs);
        let _ = normalize(Some(&raw));
        let checked = &raw.checked_bindings[0];
        if path == "/a" || path == "/b/0" {
            prop_assert_eq!(checked.passed, match_quote(&text, &quote).is_some());
        }
        if let Some(m) = &checked.matched_text {
            prop_assert!(checked.passed);
            prop_assert!(text.contains(m.as_str()));
            prop_assert_eq!(normalize_whitespace(m), normalize_whitespace(&quote));
        }
    }

    #[test]
    fn match_quote_agrees_with_normalized_search(
        text in "[ ab\\t\\n\u{2003}]{0,40}",
        quote in "[ ab\\n]{0,6}",
    ) {
        let nq = normalize_whitespace(&quote);
        let expected = !nq.is_empty() && normalize_whitespace(&text).contains(&nq);
        let got = match_quote(&text, &quote);
        prop_assert_eq!(got.is_some(), expected);
        if let Some(m) = got {
            prop_assert_eq!(normalize_whitespace(m), nq);
        }
    }
}
