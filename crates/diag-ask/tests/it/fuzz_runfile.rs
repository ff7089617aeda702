//! Fuzzing at scale (CI runs every property with `PROPTEST_CASES=10000`, see `scripts/test`):
//!
//! - the run-file loader, `RunFile::parse`, on arbitrary text, on arbitrary JSON, and on valid
//!   run files mutated byte by byte and node by node: it never panics, its errors are one
//!   bounded line naming the file, and whatever it accepts round-trips through `to_json`;
//! - replay of structurally mutated run files through the real runtime and nodes: never a
//!   panic, and the stored run always ends SUCCESS or FAILED with its events equal to its path;
//! - the RFC 6901 resolver, `json_pointer::resolve`, against a reference model written here
//!   independently (and against serde_json's `Value::pointer` where the two must agree), on
//!   every path of generated documents, on arbitrary pointers and on mutated valid ones.

use diag_testkit::seeded;

use std::sync::Arc;

use diag_ask::replay::replay;
use diag_core::ids::SequentialIds;
use diag_core::protocol::json_pointer::{self, PointerError};
use diag_core::store::{RunStatus, Store};
use diag_runfile::RunFile;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use serde_json::{json, Value};

use diag_testkit::mutate;
use mutate::{all_pointers, arb_edit, arb_mutated, edit_text};

// ---------------------------------------------------------------------------------------------
// A valid run file: the whole checkout-502 diagnosis, PASS in six nodes.

const PLAN: &str = r#"{"schema": "planner_plan_v1", "mode": "NORMAL", "hypotheses": [{"id": "h1", "statement": "payment-service is failing checkout's upstream calls"}], "steps": [{"id": "s1", "goal": "find 502s in checkout logs", "tool": "search_logs", "arguments": {"query": "upstream returned 502", "service": "checkout"}}, {"id": "s2", "goal": "look for pool exhaustion", "tool": "search_logs", "arguments": {"query": "Connection is not available", "service": "payment"}}]}"#;
const EVIDENCE: &str = r#"{"schema": "executor_evidence_v2", "claims": [{"claim_id": "c1", "text": "checkout logged upstream 502s from payment-service", "bindings": [{"source_invocation_id": "inv-1", "tool_name": "search_logs", "raw_path": "/matches/0/line", "quote": "upstream returned 502 from payment-service"}]}, {"claim_id": "c2", "text": "payment's HikariPool-1 had no free connection", "bindings": [{"source_invocation_id": "inv-2", "tool_name": "search_logs", "raw_path": "/matches/0/line", "quote": "Connection is not available"}]}], "hypotheses": [], "no_evidence": [], "limitations": []}"#;
const VERDICT: &str = r#"{"schema": "verifier_verdict_v1", "verdict": "PASS", "groundedness": 0.9, "claim_checks": [{"claim_id": "c1", "supported": true}, {"claim_id": "c2", "supported": true}], "facts": [{"fact": "502s come from payment-service", "is_critical": true, "verification": "supported", "claim_ids": ["c1"]}], "allowed_claims": ["c1", "c2"], "missing_information": ["what holds the pool"], "recommendations": ["check the batch job"], "rationale": "quoted from the logs"}"#;
const ANSWER: &str = r#"{"schema": "composer_answer_v1", "answer_markdown": "checkout answers 502 because payment-service has no free database connection [c1] [c2].", "cited_claims": ["c1", "c2"]}"#;

fn model(agent: &str, turn: u32, response: Value) -> Value {
    json!({"kind": "model", "agent": agent, "round": 1, "attempt": 1, "turn": turn,
           "response": response})
}

fn text(content: &str) -> Value {
    json!({"content": content, "finish_reason": "stop",
           "usage": {"prompt_tokens": 100, "completion_tokens": 20}})
}

fn log_output(line: &str) -> Value {
    json!({"matches": [{"file": "app.log", "line_no": 7, "timestamp": "2026-11-30T14:02:11Z",
                        "line": line}], "truncated": false})
}

/// The seed every mutation starts from; `expected` is what a replay of it reproduces.
fn seed() -> Value {
    let a1 = json!({"query": "upstream returned 502", "service": "checkout"});
    let a2 = json!({"query": "Connection is not available", "service": "payment"});
    json!({
        "format": "diag_run_v1",
        "question": "why does checkout return 502 since 14:00?",
        "session_id": "ses-fuzz",
        "run_id": "run-fuzz",
        "started_at": "2026-11-30T14:10:00Z",
        "tools": [{"name": "search_logs", "description": "Search the logs.",
                   "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                  "required": ["query"]}}],
        "exchanges": [
            model("planner", 1, text(PLAN)),
            model("executor", 1, json!({"content": null, "finish_reason": "tool_calls",
                "tool_calls": [{"id": "call_1", "name": "search_logs", "arguments": a1},
                               {"id": "call_2", "name": "search_logs", "arguments": a2}]})),
            {"kind": "tool", "invocation_id": "inv-1", "tool_name": "search_logs",
             "arguments": a1, "status": "ok",
             "output": log_output("ERROR upstream returned 502 from payment-service (POST /pay)")},
            {"kind": "tool", "invocation_id": "inv-2", "tool_name": "search_logs",
             "arguments": a2, "status": "ok",
             "output": log_output("WARN HikariPool-1 - Connection is not available, request timed out")},
            model("executor", 2, text(EVIDENCE)),
            model("verifier", 1, text(VERDICT)),
            model("composer", 1, text(ANSWER)),
        ],
        "expected": {"status": "SUCCESS",
                     "path": ["planner", "executor", "gatekeeper", "verified_input", "verifier",
                              "composer"],
                     "effective_verdict": "PASS", "degraded": false,
                     "answer": "checkout answers 502 because payment-service has no free database connection [c1] [c2]."},
    })
}

fn seed_text() -> String {
    serde_json::to_string_pretty(&seed()).unwrap()
}

// ---------------------------------------------------------------------------------------------
// The loader's contract

const FILE: &str = "fuzz.json";

/// Never a panic; an error is one bounded line naming the file; an accepted file round-trips.
fn loader_holds(text: &str) -> Result<Option<RunFile>, TestCaseError> {
    match RunFile::parse(text, FILE) {
        Ok(run) => {
            let again = RunFile::parse(&run.to_json(), FILE);
            prop_assert_eq!(again.as_ref(), Ok(&run), "to_json does not round-trip");
            prop_assert!(!run.question.trim().is_empty());
            Ok(Some(run))
        }
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(
                !msg.contains(['\n', '\r']),
                "error is not one line: {:?}",
                msg
            );
            prop_assert!(msg.starts_with("fuzz.json: "), "{}", msg);
            prop_assert!(msg.chars().count() <= 400, "unbounded error: {}", msg.len());
            prop_assert!(!msg.chars().any(|c| c.is_control()), "{:?}", msg);
            Ok(None)
        }
    }
}

/// Keys of run files, to make generated JSON land on the loader's fields.
const KEYS: &[&str] = &[
    "format",
    "question",
    "session_id",
    "run_id",
    "started_at",
    "tools",
    "exchanges",
    "expected",
    "kind",
    "agent",
    "round",
    "attempt",
    "turn",
    "request_sha256",
    "response",
    "error",
    "class",
    "message",
    "content",
    "tool_calls",
    "finish_reason",
    "usage",
    "invocation_id",
    "tool_name",
    "arguments",
    "output",
    "status",
    "path",
    "degraded",
    "answer",
    "name",
];

const WORDS: &[&str] = &[
    "diag_run_v1",
    "diag_run_v2",
    "model",
    "tool",
    "planner",
    "executor",
    "verifier",
    "composer",
    "transient",
    "permanent",
    "ok",
    "error",
    "blocked",
    "SUCCESS",
    "PASS",
    "2026-11-30T14:10:00Z",
    "9999-12-31T23:59:59Z",
    "0000-01-01T00:00:00Z",
    "2026-13-40T25:61:61Z",
    "",
    " ",
    "\n",
    "a\u{0}b\u{1b}[2J",
];

fn arb_scalar() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        select(WORDS).prop_map(Value::from),
        ".{0,24}".prop_map(Value::from),
    ]
    .boxed()
}

fn arb_json() -> BoxedStrategy<Value> {
    let key = prop_oneof![3 => select(KEYS).prop_map(str::to_string), 1 => ".{0,8}"];
    arb_scalar()
        .prop_recursive(4, 64, 8, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..8)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
        .boxed()
}

/// A seed mutated at 1 to 3 nodes.
fn arb_mutated_seed() -> impl Strategy<Value = Value> {
    arb_mutated(seed(), arb_json(), 3)
}

/// A cheaper case count for properties that replay a whole run into SQLite.
fn replay_cases() -> u32 {
    (ProptestConfig::default().cases / 10).max(32)
}

// ---------------------------------------------------------------------------------------------
// Reference model of RFC 6901, written apart from the one under test.

#[derive(Debug, PartialEq)]
enum Reference<'a> {
    Found(&'a Value),
    Malformed,
    BadEscape(usize),
    NoMember(usize),
    BadIndex(usize),
    Dash(usize),
    OutOfRange(usize),
    Scalar(usize),
}

fn reference<'a>(doc: &'a Value, pointer: &str) -> Reference<'a> {
    if pointer.is_empty() {
        return Reference::Found(doc);
    }
    if !pointer.starts_with('/') {
        return Reference::Malformed;
    }
    // The whole pointer is checked before anything is looked up.
    let raw: Vec<&str> = pointer[1..].split('/').collect();
    for (i, token) in raw.iter().enumerate() {
        let bytes = token.as_bytes();
        for (j, b) in bytes.iter().enumerate() {
            if *b == b'~' && !matches!(bytes.get(j + 1), Some(b'0' | b'1')) {
                return Reference::BadEscape(i);
            }
        }
    }
    let mut here = doc;
    for (i, token) in raw.iter().enumerate() {
        // RFC 6901 §4: first `~1` to `/`, then `~0` to `~`.
        let name = token.replace("~1", "/").replace("~0", "~");
        here = match here {
            Value::Object(m) => match m.get(&name) {
                Some(v) => v,
                None => return Reference::NoMember(i),
            },
            Value::Array(a) => {
                if name == "-" {
                    return Reference::Dash(i);
                }
                let digits = !name.is_empty() && name.chars().all(|c| c.is_ascii_digit());
                if !digits || (name.len() > 1 && name.starts_with('0')) {
                    return Reference::BadIndex(i);
                }
                match name.parse::<usize>().ok().and_then(|n| a.get(n)) {
                    Some(v) => v,
                    None => return Reference::OutOfRange(i),
                }
            }
            _ => return Reference::Scalar(i),
        };
    }
    Reference::Found(here)
}

fn as_reference<'a>(r: Result<&'a Value, PointerError>) -> Reference<'a> {
    match r {
        Ok(v) => Reference::Found(v),
        Err(PointerError::MissingLeadingSlash) => Reference::Malformed,
        Err(PointerError::InvalidEscape { token }) => Reference::BadEscape(token),
        Err(PointerError::NoSuchMember { token }) => Reference::NoMember(token),
        Err(PointerError::InvalidIndex { token }) => Reference::BadIndex(token),
        Err(PointerError::PastTheEnd { token }) => Reference::Dash(token),
        Err(PointerError::IndexOutOfBounds { token }) => Reference::OutOfRange(token),
        Err(PointerError::NotAContainer { token }) => Reference::Scalar(token),
    }
}

/// Member names that exercise escaping and index syntax.
const NAMES: &[&str] = &[
    "", "a", "b", "a/b", "m~n", "~", "~1", "~0", "/", "0", "1", "01", "-", " ", "é", "10",
];

fn arb_doc() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        "[a-z ]{0,6}".prop_map(Value::from),
    ];
    let key = prop_oneof![3 => select(NAMES).prop_map(str::to_string), 1 => ".{0,4}"];
    leaf.prop_recursive(5, 64, 12, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..12).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
    .boxed()
}

/// Pointers built from tokens that hit every branch of the grammar.
fn arb_pointer() -> BoxedStrategy<String> {
    let token = prop_oneof![
        select(
            &[
                "",
                "a",
                "b",
                "a~1b",
                "m~0n",
                "~",
                "~2",
                "~01",
                "~10",
                "0",
                "1",
                "2",
                "01",
                "00",
                "-",
                "+1",
                " 1",
                "1e2",
                "10",
                "18446744073709551616",
                "é",
                "~1",
                "~0",
            ][..]
        )
        .prop_map(str::to_string),
        "[a-z0-9~/-]{0,4}",
    ];
    prop_oneof![
        4 => prop::collection::vec(token, 0..5).prop_map(|t| t.iter().map(|t| format!("/{t}")).collect()),
        1 => ".{0,12}",
    ]
    .boxed()
}

proptest! {
    // The case count comes from PROPTEST_CASES (10,000 in CI), 256 by default.
    #![proptest_config(seeded::config(0xD1A6_0301))]

    #[test]
    fn the_loader_holds_on_arbitrary_text(text in ".{0,400}") {
        loader_holds(&text)?;
    }

    #[test]
    fn the_loader_holds_on_json_shaped_text(text in r#"[\[\]{}":,0-9a-z_ \\\n.-]{0,200}"#) {
        loader_holds(&text)?;
    }

    #[test]
    fn the_loader_holds_on_arbitrary_json(doc in arb_json()) {
        loader_holds(&doc.to_string())?;
    }

    #[test]
    fn the_loader_holds_on_run_files_with_arbitrary_fields(
        doc in arb_json(),
        format in prop_oneof![4 => Just("diag_run_v1".to_string()), 1 => ".{0,60}"],
    ) {
        // Mostly the right format, so the rest of the file is read.
        let mut run = seed();
        if let Value::Object(fields) = doc {
            for (k, v) in fields {
                run[k] = v;
            }
        }
        run["format"] = Value::String(format);
        loader_holds(&run.to_string())?;
    }

    #[test]
    fn the_loader_holds_on_byte_mutated_run_files(edits in prop::collection::vec(arb_edit(), 1..6)) {
        loader_holds(&edit_text(&seed_text(), &edits))?;
    }

    #[test]
    fn the_loader_holds_on_node_mutated_run_files(doc in arb_mutated_seed(), pretty in any::<bool>()) {
        let text = if pretty { serde_json::to_string_pretty(&doc).unwrap() } else { doc.to_string() };
        loader_holds(&text)?;
    }

    #[test]
    fn every_path_of_a_document_resolves_to_its_value(doc in arb_doc()) {
        fn walk(doc: &Value, here: &Value, pointer: String) -> Result<(), TestCaseError> {
            let got = json_pointer::resolve(doc, &pointer);
            prop_assert!(matches!(got, Ok(v) if std::ptr::eq(v, here)), "{:?} -> {:?}", pointer, got);
            prop_assert_eq!(doc.pointer(&pointer).map(|v| v as *const Value), Some(here as *const Value));
            match here {
                Value::Object(m) => {
                    for (k, v) in m {
                        walk(doc, v, format!("{pointer}/{}", json_pointer::escape_token(k)))?;
                    }
                }
                Value::Array(a) => {
                    for (i, v) in a.iter().enumerate() {
                        walk(doc, v, format!("{pointer}/{i}"))?;
                    }
                }
                _ => {}
            }
            Ok(())
        }
        walk(&doc, &doc, String::new())?;
    }

    #[test]
    fn resolve_agrees_with_the_reference_model(doc in arb_doc(), pointer in arb_pointer()) {
        let got = as_reference(json_pointer::resolve(&doc, &pointer));
        let want = reference(&doc, &pointer);
        prop_assert_eq!(&got, &want, "pointer {:?}", pointer);
        prop_assert_eq!(json_pointer::validate(&pointer).is_ok(),
                        !matches!(want, Reference::Malformed | Reference::BadEscape(_)));
        // serde_json's resolver differs only on malformed escapes, which it takes literally.
        if !matches!(want, Reference::BadEscape(_)) {
            let theirs = doc.pointer(&pointer).map(|v| v as *const Value);
            let ours = match got { Reference::Found(v) => Some(v as *const Value), _ => None };
            prop_assert_eq!(ours, theirs, "pointer {:?}", pointer);
        }
    }

    #[test]
    fn mutated_valid_pointers_agree_with_the_reference_model(
        doc in arb_doc(),
        which in any::<Index>(),
        edits in prop::collection::vec(arb_edit(), 1..3),
    ) {
        let mut pointers = Vec::new();
        all_pointers(&doc, String::new(), &mut pointers);
        let pointer = edit_text(which.get::<String>(&pointers), &edits);
        let got = as_reference(json_pointer::resolve(&doc, &pointer));
        prop_assert_eq!(got, reference(&doc, &pointer), "pointer {:?}", pointer);
    }
}

proptest! {
    #![proptest_config(seeded::config_with_cases(0xD1A6_0302, replay_cases()))]

    /// Whatever a mutated run file says, replaying it never panics and leaves a finished,
    /// consistent run behind.
    #[test]
    fn replaying_mutated_run_files_never_panics_and_stores_a_finished_run(doc in arb_mutated_seed()) {
        let Ok(run) = RunFile::parse(&doc.to_string(), FILE) else { return Ok(()) };
        REPLAY.with(|(rt, store, ids)| {
            let replayed = rt
                .block_on(replay(&run, store, ids.clone()))
                .map_err(|e| TestCaseError::fail(format!("replay failed: {e}")))?;
            let outcome = &replayed.outcome;
            let row = store.get_run(&outcome.run_id).unwrap().unwrap();
            prop_assert!(matches!(row.status, RunStatus::Success | RunStatus::Failed));
            prop_assert_eq!(row.status, outcome.status());
            let events = store.events(&outcome.run_id).unwrap();
            let stored: Vec<&str> = events.iter().map(|e| e.node.as_str()).collect();
            prop_assert_eq!(stored, outcome.state.path());
            prop_assert!(events.len() <= diag_diagnosis::STEP_LIMIT as usize);
            if outcome.status() == RunStatus::Success {
                prop_assert!(outcome.answer().is_some_and(|a| !a.trim().is_empty()));
            }
            Ok(())
        })?;
    }
}

type ReplayEnv = (tokio::runtime::Runtime, Store, Arc<SequentialIds>);

thread_local! {
    static REPLAY: ReplayEnv = {
        let dir = tempfile::tempdir().unwrap().keep();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        (rt, diag_testkit::open_sqlite(dir.join("fuzz.db")).unwrap(), Arc::new(SequentialIds::default()))
    };
}

#[test]
fn the_seed_replays_to_its_expected_result() {
    let run = RunFile::parse(&seed_text(), FILE).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = diag_testkit::open_sqlite(dir.path().join("seed.db")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let replayed = rt
        .block_on(replay(&run, &store, Arc::new(SequentialIds::default())))
        .unwrap();
    assert_eq!(replayed.divergence, None);
    let mismatches = diag_ask::replay::compare(run.expected.as_ref().unwrap(), &replayed.actual);
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    let file = diag_store_sqlite::SqliteStore::open(dir.path().join("seed.db")).unwrap();
    assert_eq!(file.integrity_check().unwrap(), "ok");
}

/// Found by the replay property: a server may report any token count, and two huge ones made
/// the store's total overflow, so the run could not be finished and stayed RUNNING.
#[test]
fn huge_token_counts_still_finish_the_run() {
    let mut doc = seed();
    for x in doc["exchanges"].as_array_mut().unwrap() {
        if x["kind"] == "model" {
            x["response"]["usage"] =
                json!({"prompt_tokens": u64::MAX, "completion_tokens": i64::MAX - 60});
        }
    }
    let run = RunFile::parse(&doc.to_string(), FILE).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = diag_testkit::open_sqlite(dir.path().join("tokens.db")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let replayed = rt
        .block_on(replay(&run, &store, Arc::new(SequentialIds::default())))
        .unwrap();
    let row = store.get_run(&replayed.outcome.run_id).unwrap().unwrap();
    assert_eq!(row.status, RunStatus::Success, "{:?}", row.failure);
    assert_eq!(row.prompt_tokens, i64::MAX as u64);
    assert_eq!(row.completion_tokens, i64::MAX as u64);
}

/// Found by the loader properties: serde quotes the file's own text in its errors.
#[test]
fn loader_errors_quoting_the_file_stay_one_bounded_line() {
    let mut doc = seed();
    doc["exchanges"][0]["kind"] = json!(format!("mo\ndel\u{1b}[2J{}", "x".repeat(5000)));
    let unknown_format = seed_text().replace("diag_run_v1", "diag\nrun");
    for text in [doc.to_string(), unknown_format] {
        let e = RunFile::parse(&text, FILE).unwrap_err().to_string();
        assert!(!e.chars().any(char::is_control), "{e:?}");
        assert!(e.chars().count() < 400, "{}", e.len());
    }
}

/// The mutation strategies must reach both outcomes, or the properties check little.
#[test]
fn mutations_reach_accepted_and_rejected_files() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut accepted, mut rejected) = (0, 0);
    for _ in 0..500 {
        let doc = arb_mutated_seed().new_tree(&mut runner).unwrap().current();
        match RunFile::parse(&doc.to_string(), FILE) {
            Ok(_) => accepted += 1,
            Err(_) => rejected += 1,
        }
    }
    assert!(
        accepted > 50 && rejected > 50,
        "{accepted} accepted, {rejected} rejected"
    );
}
