//! The run-file loader against its published JSON Schema, `docs/schema/diag_run_v2.json` (and
//! `diag_run_v1.json` for a file that says it is v1, which still loads):
//! every value the schema forbids is refused by `RunFile::parse` with one line naming the file
//! and the path of the value, and every run file the project ships loads.
//!
//! - every `enum` and `const` of the schema, found by walking the schema itself, is tried with
//!   each allowed value (loads) and with near misses (refused);
//! - a list of mutations for the schema's other rules (types, `null`, required members,
//!   patterns, formats, minimums, objects given as arrays);
//! - a property: a valid run file mutated node by node that the schema refuses, the loader
//!   refuses too (`PROPTEST_CASES`, 10,000 in CI).

use diag_testkit::repo;
use diag_testkit::seeded;

use std::path::{Path, PathBuf};

use diag_runfile::RunFile;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Value};

use diag_testkit::mutate;
use mutate::arb_mutated;

const FILE: &str = "schema.json";

fn schema_of(name: &str) -> Value {
    let path = repo().join("docs/schema").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn schema() -> Value {
    schema_of("diag_run_v2.json")
}

fn validator(name: &str) -> jsonschema::Validator {
    jsonschema::options()
        .should_validate_formats(true)
        .build(&schema_of(name))
        .unwrap_or_else(|e| panic!("{name} is a valid JSON Schema: {e}"))
}

thread_local! {
    static VALIDATOR: jsonschema::Validator = validator("diag_run_v2.json");
    static VALIDATOR_V1: jsonschema::Validator = validator("diag_run_v1.json");
}

/// Whether the schema of the file's format allows it: a file that says `diag_run_v1` is a v1
/// file (the loader reads it as one), anything else is held to v2.
fn schema_allows(doc: &Value) -> bool {
    if doc["format"] == "diag_run_v1" {
        VALIDATOR_V1.with(|v| v.is_valid(doc))
    } else {
        VALIDATOR.with(|v| v.is_valid(doc))
    }
}

/// A run file with every kind of member the schema describes: a model response with tool
/// calls and usage, a model error, a tool exchange, a tool catalog and `expected`.
fn seed() -> Value {
    json!({
        "format": "diag_run_v2",
        "question": "why does checkout return 502 since 14:00?",
        "session_id": "ses-1",
        "run_id": "run-1",
        "started_at": "2026-11-30T14:10:00Z",
        "limits": {"max_turns": 8, "max_tool_calls": 20,
                   "max_tokens": {"planner": 1024, "executor": 4096, "verifier": 1536,
                                  "composer": 1536},
                   "tool_timeout_secs": 30, "max_output_bytes": 65536},
        "tools": [{"name": "search_logs", "description": "Search the logs.",
                   "parameters": {"type": "object"}}],
        "exchanges": [
            {"kind": "model", "agent": "executor", "round": 1, "attempt": 1, "turn": 1,
             "request_sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
             "response": {"content": null, "finish_reason": "tool_calls",
                          "tool_calls": [{"id": "call_1", "name": "search_logs",
                                          "arguments": {"query": "502"}}],
                          "usage": {"prompt_tokens": 100, "completion_tokens": 20},
                          "structured_output": "json_schema"},
             "max_tokens": 2048, "fit": {"context_tokens": 8192, "max_tokens": 2048},
             "evidence_turn": true},
            {"kind": "tool", "invocation_id": "inv-1", "tool_name": "search_logs",
             "arguments": {"query": "502"}, "output": {"matches": []}, "status": "ok",
             "plan_step": true},
            {"kind": "model", "agent": "verifier", "round": 1, "attempt": 1, "turn": 1,
             "error": {"class": "transient", "message": "HTTP 503", "status": 503,
                       "context_tokens": 2048, "usage": {"prompt_tokens": 3000, "completion_tokens": 0},
                       "structured_output": "json_object"}},
        ],
        "expected": {"status": "FAILED", "path": ["planner", "executor", "fallback"],
                     "effective_verdict": "PASS", "degraded": true, "answer": null},
    })
}

/// `/exchanges/0/agent` → `exchanges[0].agent`, as loader errors name a value.
fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for token in pointer.split('/').skip(1) {
        if token.chars().all(|c| c.is_ascii_digit()) && !token.is_empty() {
            out.push_str(&format!("[{token}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(token);
        }
    }
    out
}

/// The loader refuses `doc` with one line naming the file and the path `at`.
#[track_caller]
fn assert_refused_at(doc: &Value, at: &str, what: &str) {
    assert!(
        !schema_allows(doc),
        "{what}: the schema allows it, test is wrong"
    );
    let e = match RunFile::parse(&doc.to_string(), FILE) {
        Ok(_) => panic!("{what}: the schema forbids it but the loader accepts it"),
        Err(e) => e.to_string(),
    };
    assert!(!e.contains(['\n', '\r']), "{what}: {e:?}");
    let want = if at == "/format" {
        format!("{FILE}: unknown run file format")
    } else {
        format!("{FILE}: {}", dotted(at))
    };
    assert!(
        e.starts_with(&want),
        "{what}: {e}\n  does not start with {want}"
    );
}

fn set(doc: &Value, at: &str, value: Value) -> Value {
    let mut doc = doc.clone();
    *doc.pointer_mut(at)
        .unwrap_or_else(|| panic!("{at} in the seed")) = value;
    doc
}

fn remove(doc: &Value, at: &str) -> Value {
    let mut doc = doc.clone();
    let (parent, last) = at.rsplit_once('/').unwrap();
    doc.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove(last))
        .unwrap_or_else(|| panic!("{at} in the seed"));
    doc
}

/// Every `enum`/`const` of the schema: (the schema location of the keyword, its values).
fn schema_enums(node: &Value, at: String, out: &mut Vec<(String, Vec<Value>)>) {
    match node {
        Value::Object(m) => {
            for (k, v) in m {
                match k.as_str() {
                    "enum" => out.push((at.clone(), v.as_array().unwrap().clone())),
                    "const" => out.push((at.clone(), vec![v.clone()])),
                    _ => schema_enums(v, format!("{at}/{k}"), out),
                }
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                schema_enums(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Where each enum of the schema applies in [`seed`].
const ENUM_SITES: &[(&str, &[&str])] = &[
    ("/properties/format", &["/format"]),
    (
        "/$defs/model_exchange/properties/kind",
        &["/exchanges/0/kind"],
    ),
    (
        "/$defs/tool_exchange/properties/kind",
        &["/exchanges/1/kind"],
    ),
    (
        "/$defs/model_exchange/properties/agent",
        &["/exchanges/0/agent", "/exchanges/2/agent"],
    ),
    (
        "/$defs/model_exchange/properties/error/properties/class",
        &["/exchanges/2/error/class"],
    ),
    (
        "/$defs/model_exchange/properties/response/properties/structured_output",
        &["/exchanges/0/response/structured_output"],
    ),
    (
        "/$defs/model_exchange/properties/error/properties/structured_output",
        &["/exchanges/2/error/structured_output"],
    ),
    (
        "/$defs/model_exchange/properties/evidence_turn",
        &["/exchanges/0/evidence_turn"],
    ),
    (
        "/$defs/tool_exchange/properties/status",
        &["/exchanges/1/status"],
    ),
    (
        "/$defs/tool_exchange/properties/plan_step",
        &["/exchanges/1/plan_step"],
    ),
    ("/$defs/expected/properties/status", &["/expected/status"]),
    (
        "/$defs/expected/properties/path/items",
        &["/expected/path/0", "/expected/path/2"],
    ),
    (
        "/$defs/expected/properties/effective_verdict",
        &["/expected/effective_verdict"],
    ),
];

/// Values near each allowed one: other case, padded, wrapped, other types.
fn near_misses(allowed: &[Value]) -> Vec<Value> {
    let mut out = vec![
        json!("DEGRADED"),
        json!("wizard"),
        json!(""),
        json!(1),
        json!(true),
        json!([]),
        Value::Null,
    ];
    for a in allowed {
        if let Some(s) = a.as_str() {
            out.push(json!(s.to_uppercase()));
            out.push(json!(s.to_lowercase()));
            out.push(json!(format!("{s} ")));
            out.push(json!([s]));
            // serde's other spelling of a unit variant.
            out.push(json!({ s: null }));
        }
    }
    out.retain(|v| !allowed.contains(v));
    out
}

#[test]
fn the_seed_loads_and_matches_the_schema() {
    let doc = seed();
    assert!(schema_allows(&doc));
    RunFile::parse(&doc.to_string(), FILE).unwrap();
}

#[test]
fn every_enum_of_the_schema_is_enforced_by_the_loader() {
    let mut enums = Vec::new();
    schema_enums(&schema(), String::new(), &mut enums);
    assert!(enums.len() >= 9, "{enums:?}");
    let base = seed();
    for (site, allowed) in &enums {
        let instances = ENUM_SITES
            .iter()
            .find(|(s, _)| s == site)
            .unwrap_or_else(|| panic!("schema enum at {site} has no site in this test: add it"))
            .1;
        for at in instances {
            for ok in allowed {
                let doc = set(&base, at, ok.clone());
                assert!(schema_allows(&doc), "{at} = {ok}");
                if let Err(e) = RunFile::parse(&doc.to_string(), FILE) {
                    panic!("{at} = {ok} is allowed by the schema, refused: {e}");
                }
            }
            for bad in near_misses(allowed) {
                let doc = set(&base, at, bad.clone());
                assert_refused_at(&doc, at, &format!("{at} = {bad}"));
            }
        }
    }
}

#[test]
fn every_other_rule_of_the_schema_is_enforced_by_the_loader() {
    let base = seed();
    let sha = "/exchanges/0/request_sha256";
    let response = "/exchanges/0/response";
    let cases: Vec<(&str, Value)> = vec![
        ("/question", json!("")),
        ("/question", json!(" \t\n ")),
        // ECMA-262's `\s` (the schema's) and Rust's white space differ in two characters.
        ("/question", json!("\u{feff}")),
        ("/question", json!("\u{85}")),
        ("/question", json!("\u{a0}\u{3000}")),
        ("/question", json!(7)),
        ("/question", Value::Null),
        ("/session_id", json!(1)),
        ("/run_id", Value::Null),
        ("/started_at", json!("yesterday")),
        ("/started_at", json!("2026-11-30")),
        ("/started_at", json!("2026-11-30 14:10:00")),
        // Found by `what_the_schema_forbids_the_loader_refuses`: any separator was taken.
        ("/started_at", json!("2026-11-30A14:10:00Z")),
        ("/started_at", json!("2026-11-30 14:10:00Z")),
        ("/started_at", json!("2026-11-30_14:10:00Z")),
        ("/started_at", json!("2026-11-30T14:10:00")),
        ("/started_at", json!("2026-11-30T14:10:00+02")),
        ("/started_at", json!("2026-11-30T14:10:00+24:00")),
        ("/started_at", json!("2026-11-30T14:10:00.Z")),
        ("/started_at", json!("2026-11-30T14:10:00Z ")),
        ("/started_at", json!("2026-13-40T25:61:61Z")),
        ("/started_at", json!(1_700_000_000)),
        ("/tools", Value::Null),
        ("/tools", json!({})),
        ("/tools/0", json!(["search_logs", "Search the logs.", {}])),
        ("/tools/0/name", json!(1)),
        ("/exchanges", Value::Null),
        ("/exchanges", json!({})),
        ("/exchanges/0", json!(["model", "executor", 1, 1, 1])),
        ("/exchanges/0", json!("model")),
        ("/exchanges/0/round", json!(-1)),
        ("/exchanges/0/round", json!(4_294_967_296u64)),
        ("/exchanges/0/attempt", json!(1.5)),
        ("/exchanges/0/turn", json!("1")),
        ("/exchanges/0/turn", Value::Null),
        (
            sha,
            json!("ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789"),
        ),
        (sha, json!("0123")),
        (sha, Value::Null),
        (response, Value::Null),
        (response, json!([null, [], "stop", null])),
        ("/exchanges/0/response/content", json!(5)),
        ("/exchanges/0/response/tool_calls", Value::Null),
        (
            "/exchanges/0/response/tool_calls/0",
            json!(["call_1", "search_logs", {}]),
        ),
        ("/exchanges/0/response/tool_calls/0/id", json!(1)),
        ("/exchanges/0/response/finish_reason", Value::Null),
        ("/exchanges/0/response/usage", Value::Null),
        ("/exchanges/0/response/usage", json!([1, 2])),
        ("/exchanges/0/response/usage/prompt_tokens", json!(-5)),
        ("/exchanges/0/response/usage/prompt_tokens", json!(1e20)),
        ("/exchanges/0/response/usage/completion_tokens", json!("20")),
        ("/exchanges/2/error", Value::Null),
        ("/exchanges/2/error", json!(["transient", "HTTP 503"])),
        ("/exchanges/2/error/message", Value::Null),
        // Optional numbers have one type: present as `null` is refused, not read as absent.
        ("/exchanges/2/error/status", Value::Null),
        ("/exchanges/2/error/status", json!(70_000)),
        ("/exchanges/2/error/context_tokens", Value::Null),
        ("/exchanges/2/error/context_tokens", json!(-1)),
        ("/exchanges/0/max_tokens", Value::Null),
        ("/exchanges/0/max_tokens", json!("2048")),
        ("/exchanges/0/fit", Value::Null),
        ("/exchanges/0/fit/context_tokens", Value::Null),
        ("/exchanges/1/invocation_id", json!(1)),
        ("/exchanges/1/tool_name", Value::Null),
        ("/expected", Value::Null),
        ("/expected", json!(["FAILED", [], null, true, null])),
        ("/expected/path", json!("planner")),
        ("/expected/path", Value::Null),
        ("/expected/degraded", json!("false")),
        ("/expected/degraded", Value::Null),
        ("/expected/answer", json!(42)),
        ("/limits", Value::Null),
        ("/limits", json!([8, 12])),
        ("/limits/max_turns", json!(0)),
        ("/limits/max_turns", Value::Null),
        ("/limits/max_turns", json!("8")),
        ("/limits/max_tool_calls", json!(0)),
        ("/limits/max_tool_calls", json!(-1)),
        ("/limits/max_tool_calls", json!(4_294_967_296u64)),
        ("/limits/max_tokens", Value::Null),
        ("/limits/max_tokens", json!([1024])),
        ("/limits/max_tokens/planner", json!(63)),
        ("/limits/max_tokens/executor", Value::Null),
        ("/limits/tool_timeout_secs", json!(0)),
        ("/limits/tool_timeout_secs", json!(1.5)),
        ("/limits/max_output_bytes", json!(0)),
        ("/limits/max_output_bytes", Value::Null),
        // The configuration's minimum: room for a refusal's message and one match.
        ("/limits/max_output_bytes", json!(1023)),
        // A limit this build does not know would replay under other bounds than recorded.
        ("/limits", json!({"max_turns": 8, "max_steps": 3})),
        (
            "/limits/max_tokens",
            json!({"planner": 1024, "writer": 512}),
        ),
    ];
    for (at, value) in cases {
        let doc = set(&base, at, value.clone());
        assert_refused_at(&doc, at, &format!("{at} = {value}"));
    }
    // Required members: the error names the object that lacks one.
    for at in [
        "/question",
        "/session_id",
        "/run_id",
        "/started_at",
        "/tools/0/name",
        "/tools/0/description",
        "/tools/0/parameters",
        "/exchanges/0/kind",
        "/exchanges/0/agent",
        "/exchanges/0/round",
        "/exchanges/0/attempt",
        "/exchanges/0/turn",
        "/exchanges/0/response/tool_calls/0/id",
        "/exchanges/0/response/tool_calls/0/name",
        "/exchanges/0/response/tool_calls/0/arguments",
        "/exchanges/0/response/usage/prompt_tokens",
        "/exchanges/0/response/usage/completion_tokens",
        "/exchanges/0/response",
        "/exchanges/2/error",
        "/exchanges/2/error/class",
        "/exchanges/2/error/message",
        "/exchanges/1/invocation_id",
        "/exchanges/1/tool_name",
        "/exchanges/1/output",
        "/exchanges/1/status",
        "/expected/status",
        "/expected/path",
        "/expected/degraded",
    ] {
        let doc = remove(&base, at);
        let parent = at.rsplit_once('/').unwrap().0;
        assert_refused_at(&doc, parent, &format!("without {at}"));
    }
    // A model exchange with both a response and an error.
    let mut both = base.clone();
    both["exchanges"][0]["error"] = json!({"class": "permanent", "message": "x"});
    assert_refused_at(&both, "/exchanges/0", "response and error");
}

/// Edge values the schema allows load too; the one known exception is an integer written with
/// a fraction (`1.0`), which JSON Schema counts as an integer and the loader refuses.
#[test]
fn edge_values_the_schema_allows_load() {
    let base = seed();
    for (at, value) in [
        ("/started_at", json!("2016-12-31T23:59:60Z")),
        ("/started_at", json!("2026-11-30t14:10:00z")),
        ("/started_at", json!("2026-11-30T14:10:00-00:00")),
        ("/started_at", json!("2026-11-30T14:10:00.123456789+05:30")),
        ("/question", json!("\u{200b}")),
        ("/question", json!(" ?")),
        ("/exchanges/0/round", json!(4_294_967_295u64)),
        ("/exchanges/0/response/usage/prompt_tokens", json!(u64::MAX)),
        ("/exchanges/0/response/content", json!("")),
        ("/exchanges/1/output", Value::Null),
        ("/expected/effective_verdict", Value::Null),
        ("/expected/path", json!([])),
        ("/tools", json!([])),
        ("/limits", json!({})),
        ("/limits/max_turns", json!(1)),
        ("/limits/max_tool_calls", json!(4_294_967_295u64)),
        ("/limits/max_tokens", json!({})),
        ("/limits/max_tokens/planner", json!(64)),
        ("/limits/max_output_bytes", json!(u64::MAX)),
        ("/limits/max_output_bytes", json!(1024)),
    ] {
        let doc = set(&base, at, value.clone());
        assert!(schema_allows(&doc), "{at} = {value}");
        if let Err(e) = RunFile::parse(&doc.to_string(), FILE) {
            panic!("{at} = {value}: {e}");
        }
    }
}

#[test]
fn a_leading_byte_order_mark_is_accepted() {
    let text = format!("\u{feff}{}", serde_json::to_string_pretty(&seed()).unwrap());
    let run = RunFile::parse(&text, FILE).unwrap();
    assert_eq!(run, RunFile::parse(&seed().to_string(), FILE).unwrap());
}

/// Run files under `dir`, as `diag replay` picks them from a folder.
fn run_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            run_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            let doc: Value = serde_json::from_str(&text).unwrap();
            if doc["format"]
                .as_str()
                .is_some_and(|f| f.starts_with("diag_run_"))
            {
                out.push(path);
            }
        }
    }
}

#[test]
fn every_shipped_run_file_loads_and_matches_the_schema() {
    let mut files = Vec::new();
    for dir in ["fixtures", "tests/fixtures/runs"] {
        run_files(&repo().join(dir), &mut files);
    }
    assert!(files.len() >= 40, "{} run files", files.len());
    let mut loaded = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        let name = path.display().to_string();
        assert_eq!(doc["format"], "diag_run_v2", "{name}");
        let errors: Vec<String> = VALIDATOR.with(|v| {
            v.iter_errors(&doc)
                .map(|e| format!("{e} at {}", e.instance_path()))
                .collect()
        });
        assert!(errors.is_empty(), "{name}: {errors:#?}");
        RunFile::parse(&text, &name).unwrap_or_else(|e| panic!("{e}"));
        loaded += 1;
    }
    assert!(loaded >= 40, "{loaded} loaded");
}

/// Values that land on the schema's rules: enum members and near misses, timestamps,
/// hashes, numbers at the edges, nulls, objects and arrays.
fn arb_value() -> BoxedStrategy<Value> {
    let words: &[&str] = &[
        "diag_run_v1",
        "diag_run_v2",
        "model",
        "tool",
        "planner",
        "executor",
        "verifier",
        "composer",
        "wizard",
        "transient",
        "permanent",
        "ok",
        "error",
        "blocked",
        "SUCCESS",
        "FAILED",
        "DEGRADED",
        "RUNNING",
        "PASS",
        "LOW_CONFID",
        "REJECT",
        "gatekeeper",
        "verified_input",
        "retry_prepare",
        "fallback",
        "2026-11-30T14:10:00Z",
        "2026-11-30T14:10:00.123+02:00",
        "2026-11-30t14:10:00z",
        "2016-12-31T23:59:60Z",
        "yesterday",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
        "",
        " ",
        "\u{feff}",
        "\u{a0}",
    ];
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-2i64..5).prop_map(Value::from),
        Just(json!(4_294_967_295u64)),
        Just(json!(1.5)),
        select(words).prop_map(Value::from),
    ];
    scalar
        .prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::vec((select(&["a", "kind", "status"][..]), inner), 0..3)
                    .prop_map(|kv| {
                        Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                    }),
            ]
        })
        .boxed()
}

proptest! {
    #![proptest_config(seeded::config(0xD1A6_0501))]

    /// Whatever the schema refuses, the loader refuses.
    #[test]
    fn what_the_schema_forbids_the_loader_refuses(doc in arb_mutated(seed(), arb_value(), 3)) {
        if !schema_allows(&doc) {
            let loaded = RunFile::parse(&doc.to_string(), FILE);
            prop_assert!(loaded.is_err(), "the schema forbids it, the loader accepts it: {}", doc);
        }
    }
}

/// A v1 file (the seed without `limits`, as every file was before they were recorded) loads
/// with today's defaults; a `limits` member in a v1 file is unknown there, so it is ignored.
#[test]
fn a_v1_file_loads_with_todays_limits() {
    use diag_core::limits::Limits;
    let mut v1 = remove(&seed(), "/limits");
    v1["format"] = json!("diag_run_v1");
    assert!(schema_allows(&v1));
    let run = RunFile::parse(&v1.to_string(), FILE).unwrap();
    assert_eq!(run.format, "diag_run_v1");
    assert_eq!(run.limits, None);
    assert_eq!(run.limits(), Limits::DEFAULT);
    assert_eq!(
        (Limits::DEFAULT.max_turns, Limits::DEFAULT.max_tool_calls),
        (8, 12)
    );
    // A limits member in a v1 file, even one v2 would refuse, is ignored.
    let mut with_limits = v1.clone();
    with_limits["limits"] = json!({"max_tool_calls": 0});
    assert!(schema_allows(&with_limits));
    assert_eq!(
        RunFile::parse(&with_limits.to_string(), FILE)
            .unwrap()
            .limits,
        None
    );
    // Written again, it keeps its version and loads back as the same value
    // (`diag-runfile-upgrade` is what turns it into v2).
    let again = RunFile::parse(&run.to_json(), FILE).unwrap();
    assert_eq!(again.format, "diag_run_v1");
    assert_eq!(again, run);
    // A v1 value that carries limits (only code builds one) is written as v2, keeping them.
    let limited = RunFile {
        limits: Some(Limits::DEFAULT),
        ..run.clone()
    };
    let written = RunFile::parse(&limited.to_json(), FILE).unwrap();
    assert_eq!(written.format, "diag_run_v2");
    assert_eq!(written.limits, Some(Limits::DEFAULT));
    // The seed's own limits load as recorded.
    let v2 = RunFile::parse(&seed().to_string(), FILE).unwrap();
    assert_eq!(v2.limits().max_tool_calls, 20);
    assert_eq!(v2.limits().max_tokens.executor, 4096);
}

/// The upgrade of the fixture library: a v1 file becomes v2 by a text edit that keeps every
/// other byte, and loads as the same run with the default limits.
#[test]
fn upgrading_a_v1_file_keeps_its_bytes_and_its_meaning() {
    use diag_core::limits::Limits;
    use diag_runfile::upgrade_v1;
    let mut v1 = remove(&seed(), "/limits");
    v1["format"] = json!("diag_run_v1");
    for text in [
        serde_json::to_string_pretty(&v1).unwrap(),
        v1.to_string(),
        format!("\u{feff}{}", serde_json::to_string_pretty(&v1).unwrap()),
    ] {
        let before = RunFile::parse(&text, FILE).unwrap();
        let after = upgrade_v1(&text, FILE)
            .unwrap()
            .expect("a v1 file is upgraded");
        let run = RunFile::parse(&after, FILE).unwrap();
        assert_eq!(run.format, "diag_run_v2");
        assert_eq!(run.limits, Some(Limits::DEFAULT));
        assert_eq!(run.exchanges, before.exchanges);
        assert_eq!(run.expected, before.expected);
        // Only the format value changed and one member was added.
        let removed: String = after.replacen("diag_run_v2", "diag_run_v1", 1);
        let limits_at = removed
            .find(",\n  \"limits\"")
            .or_else(|| removed.find(", \"limits\""));
        let limits_at = limits_at.expect("the limits member follows the format");
        let limits = serde_json::to_string(&Limits::DEFAULT).unwrap();
        let end = removed[limits_at..].find(&limits).unwrap() + limits_at + limits.len();
        assert_eq!(
            format!("{}{}", &removed[..limits_at], &removed[end..]),
            text
        );
        // Twice changes nothing.
        assert_eq!(upgrade_v1(&after, FILE).unwrap(), None);
        assert!(VALIDATOR.with(|v| v
            .is_valid(&serde_json::from_str::<Value>(diag_runfile::strip_bom(&after)).unwrap())));
    }
}
