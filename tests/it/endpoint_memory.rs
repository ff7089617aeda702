//! What a model endpoint taught outlives the process that learned it (openspec/specs/
//! model-endpoint/spec.md, "What an endpoint taught is remembered"): real `diag ask`
//! processes against aimock made to refuse a structured-output form as llama.cpp's server
//! does (HTTP 500). The first process pays the refused request and the run store keeps what
//! it learned; a second process sends the remembered form first, so aimock's journal shows no
//! refused request; a server that then refuses the remembered form is learned again, and the
//! store shows the new form. `diag trace` shows what each run started with; a replay reads and
//! writes none of it.

use serde_json::{json, Value};

use crate::support::cli_env;
use cli_env::{assert_schema, repo_file, TestEnv};
use diag_core::model::{Endpoint, StructuredOutput};
use diag_core::store::EndpointLearning;
use diag_testkit::{read_json, Aimock};

const KEY: &str = "sk-diag-endpoint-memory-key-7d21";
const KEY_VAR: &str = "DIAG_ENDPOINT_MEMORY_KEY";
const QUESTION: &str = "why does checkout return 502 since 14:00?";
const MODEL: &str = "diag-live-model";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The graph's fixtures behind one that refuses every request whose `response_format` is of
/// `form_type` with llama.cpp's answer: HTTP 500.
fn refusing(form_type: &str) -> Value {
    let mut fixtures = vec![json!({
        "match": {"responseFormat": form_type},
        "response": {
            "error": {
                "message": format!("response_format of type {form_type} is not supported"),
                "type": "server_error"
            },
            "status": 500
        }
    })];
    let graph = read_json(&repo_file("tests/fixtures/aimock/graph.json"));
    fixtures.extend(graph["fixtures"].as_array().unwrap().iter().cloned());
    json!({ "fixtures": fixtures })
}

fn live_env(server: &Aimock) -> TestEnv {
    cli_env::live_model_env(&server.base_url(), MODEL, KEY_VAR, KEY)
}

/// One `diag ask` process; its run id.
fn ask(env: &TestEnv) -> String {
    let out = env.run(&["--config", "diag.toml", "ask", QUESTION, "--json"]);
    out.expect(0).quiet_stderr();
    let doc = out.json();
    assert_eq!(doc["status"], "SUCCESS", "{doc}");
    doc["run_id"].as_str().unwrap().to_string()
}

/// The chat requests of the journal: the `response_format` type each was sent with (`None`
/// without one) and the status aimock answered.
fn sent(rt: &tokio::runtime::Runtime, server: &Aimock) -> Vec<(Option<String>, u64)> {
    rt.block_on(server.journal())
        .iter()
        .filter(|e| {
            e["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/chat/completions"))
        })
        .map(|e| {
            (
                e["body"]["response_format"]["type"]
                    .as_str()
                    .map(str::to_string),
                e["response"]["status"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// What the store of `env` remembers of the aimock endpoint.
fn remembered(env: &TestEnv, server: &Aimock) -> EndpointLearning {
    let store = diag_testkit::open_sqlite(env.db()).unwrap();
    store
        .endpoint_learning(&Endpoint::new(&server.base_url(), MODEL))
        .unwrap()
        .expect("the store remembers the endpoint")
}

fn trace_json(env: &TestEnv, run_id: &str) -> Value {
    let out = env.run(&["trace", run_id, "--json"]);
    out.expect(0).quiet_stderr();
    let doc = out.json();
    assert_schema("trace.v1.json", &doc);
    doc
}

#[test]
fn a_second_process_sends_the_remembered_form_first_and_a_changed_server_is_learned_again() {
    let rt = runtime();
    let server = Aimock::start_with("graph.json", Some(KEY));
    rt.block_on(server.replace_fixtures(&refusing("json_schema")));
    let env = live_env(&server);

    // The first process: json_schema refused once, then json_object with the schema.
    let first = ask(&env);
    let requests = sent(&rt, &server);
    assert_eq!(
        requests.first(),
        Some(&(Some("json_schema".to_string()), 500)),
        "{requests:?}"
    );
    assert_eq!(
        requests.iter().filter(|(_, s)| *s == 500).count(),
        1,
        "{requests:?}"
    );
    let learned = remembered(&env, &server);
    assert_eq!(
        learned.structured_output,
        Some(StructuredOutput::JsonObjectSchema)
    );
    assert_eq!(learned.endpoint.base_url, server.base_url());
    let first_learned_at = learned.learned_at.expect("a time");
    let doc = trace_json(&env, &first);
    assert_eq!(
        doc["endpoints"],
        json!([{"base_url": server.base_url(), "model": MODEL, "structured_output": null,
                "context_tokens": null, "refused_sampling": [], "learned_at": null}]),
        "the first run started knowing nothing"
    );

    // The second process sends the remembered form first: no refused request at all.
    rt.block_on(server.clear_journal());
    let second = ask(&env);
    let requests = sent(&rt, &server);
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|(form, status)| *status == 200 && form.as_deref() != Some("json_schema")),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|(form, _)| form.as_deref() == Some("json_object")),
        "the contracts go as json_object with the schema: {requests:?}"
    );
    let doc = trace_json(&env, &second);
    assert_eq!(
        doc["endpoints"],
        json!([{"base_url": server.base_url(), "model": MODEL,
                "structured_output": "json_object_schema", "context_tokens": null,
                "refused_sampling": [], "learned_at": first_learned_at}]),
    );
    let out = env.run(&["trace", &second]);
    out.expect(0).quiet_stderr();
    assert!(
        out.stdout.contains(&format!(
            "endpoints (remembered at run start)\n  {} {MODEL}: structured_output \
             json_object_schema, learned {first_learned_at}\n",
            server.base_url()
        )),
        "{}",
        out.stdout
    );
    assert_eq!(
        remembered(&env, &server).learned_at,
        Some(first_learned_at),
        "nothing new was learned"
    );

    // The server changes: it now refuses json_object (with or without a schema). The third
    // process steps down from the remembered form as before, and the store learns anew.
    rt.block_on(server.replace_fixtures(&refusing("json_object")));
    rt.block_on(server.clear_journal());
    let third = ask(&env);
    let requests = sent(&rt, &server);
    assert_eq!(
        requests[..2],
        [
            (Some("json_object".to_string()), 500),
            (Some("json_object".to_string()), 500)
        ],
        "the remembered form, then plain json_object, refused: {requests:?}"
    );
    assert!(
        requests[2..]
            .iter()
            .all(|(form, status)| form.is_none() && *status == 200),
        "{requests:?}"
    );
    let relearned = remembered(&env, &server);
    assert_eq!(relearned.structured_output, Some(StructuredOutput::Off));
    assert!(
        relearned.learned_at.expect("a time") > first_learned_at,
        "{relearned:?}"
    );
    // The run shows what it started with, not what it learned.
    assert_eq!(
        trace_json(&env, &third)["endpoints"][0]["structured_output"],
        "json_object_schema"
    );

    // A replay neither reads nor writes what endpoints taught.
    let pass = env.copy_fixture("tests/fixtures/runs/pass.json", "pass.json");
    let replayed = env.ask_fixture_json(&pass, &[]);
    let doc = trace_json(&env, replayed["run_id"].as_str().unwrap());
    assert_eq!(doc["endpoints"], json!([]));
    assert_eq!(remembered(&env, &server), relearned);
}

/// The graph's fixtures behind one that answers the first request as OpenAI's reasoning models
/// answer a temperature they do not take: HTTP 400 naming `temperature`.
fn refusing_temperature_once() -> Value {
    let mut fixtures = vec![json!({
        "match": {"sequenceIndex": 0},
        "response": {
            "error": {
                "message": "Unsupported value: 'temperature' does not support 0 with this model. \
                            Only the default (1) value is supported.",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": "unsupported_value"
            },
            "status": 400
        }
    })];
    let graph = read_json(&repo_file("tests/fixtures/aimock/graph.json"));
    fixtures.extend(graph["fixtures"].as_array().unwrap().iter().cloned());
    json!({ "fixtures": fixtures })
}

/// The chat requests of the journal: whether each carried `temperature`, and the status aimock
/// answered.
fn temperatures(rt: &tokio::runtime::Runtime, server: &Aimock) -> Vec<(bool, u64)> {
    rt.block_on(server.journal())
        .iter()
        .filter(|e| {
            e["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/chat/completions"))
        })
        .map(|e| {
            (
                e["body"].get("temperature").is_some(),
                e["response"]["status"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn an_endpoint_that_refuses_temperature_is_sent_none_again_in_the_run_or_the_next_process() {
    use diag_core::model::{RefusedSampling, SamplingParameter};
    let rt = runtime();
    let server = Aimock::start_with("graph.json", Some(KEY));
    rt.block_on(server.replace_fixtures(&refusing_temperature_once()));
    let env = live_env(&server);

    // The first request goes with the configured temperature (0 by default) and is refused;
    // the same request goes again at once without it, and no later request of the run sends
    // it.
    let first = ask(&env);
    let requests = temperatures(&rt, &server);
    assert_eq!(requests[..2], [(true, 400), (false, 200)], "{requests:?}");
    assert!(
        requests[2..].iter().all(|r| *r == (false, 200)),
        "{requests:?}"
    );
    let refused = RefusedSampling::default().with(SamplingParameter::Temperature);
    assert_eq!(remembered(&env, &server).refused_sampling, refused);
    assert_eq!(
        trace_json(&env, &first)["endpoints"][0]["refused_sampling"],
        json!([]),
        "the first run started knowing nothing"
    );

    // A second process against a server that would take anything sends no temperature at all.
    let graph = read_json(&repo_file("tests/fixtures/aimock/graph.json"));
    rt.block_on(server.replace_fixtures(&graph));
    rt.block_on(server.clear_journal());
    let second = ask(&env);
    let requests = temperatures(&rt, &server);
    assert!(!requests.is_empty());
    assert!(requests.iter().all(|r| *r == (false, 200)), "{requests:?}");
    assert_eq!(
        trace_json(&env, &second)["endpoints"][0]["refused_sampling"],
        json!(["temperature"])
    );
    let out = env.run(&["trace", &second]);
    out.expect(0).quiet_stderr();
    assert!(
        out.stdout.contains(&format!(
            "  {} {MODEL}: refuses temperature, learned ",
            server.base_url()
        )),
        "{}",
        out.stdout
    );
}
