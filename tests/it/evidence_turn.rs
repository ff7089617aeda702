//! The Executor's evidence turn through the `diag` binary against aimock
//! (`tests/fixtures/aimock/evidence_turn.json`), over the demo logs: a tool loop that ends by a
//! plain answer, by the turn budget or by the tool budget is followed by exactly one request
//! with no tools offered and the schema built from the run's evidence; the run file records
//! it, a replay of the recording (and of the store's export) reproduces it byte for byte, and
//! a model set to `structured_output = "off"` behaves as it always did.
//!
//! aimock matches a request by its last user message: the evidence turn's is the instruction
//! `prompts/executor-evidence-turn.v1.md` opens with, and the Executor's loop turns are told
//! apart by the Executor's model name (`ev-prose`, `ev-turns`, `ev-budget`).

use diag_testkit::read_json;
use serde_json::Value;

use crate::support::cli_env;
use cli_env::{assert_schema, repo_file, TestEnv};
use diag_testkit::Aimock;

const KEY: &str = "sk-diag-evidence-turn-key-7d31a9";
const KEY_VAR: &str = "DIAG_EVIDENCE_TURN_KEY";
const QUESTION: &str = "why does checkout return 502 since 14:00?";
const INSTRUCTION: &str = "Your tool calls are over";

/// A configuration whose Executor uses `executor_model` with `structured_output`, every other
/// agent the good model, under the extra `limits` lines. The loop's ends under test come from
/// the Executor model's own calls, so the plan's steps are not run first.
fn env_for(
    server: &Aimock,
    executor_model: &str,
    structured_output: &str,
    limits: &str,
) -> TestEnv {
    let mut env = TestEnv::new();
    env.set_env(KEY_VAR, KEY);
    std::fs::write(
        env.path("diag.toml"),
        format!(
            "[models.good]\nbase_url = {url:?}\nmodel = \"ev-good\"\napi_key_env = {KEY_VAR:?}\n\
             timeout_secs = 30\n\
             [models.exec]\nbase_url = {url:?}\nmodel = {executor_model:?}\n\
             api_key_env = {KEY_VAR:?}\ntimeout_secs = 30\n\
             structured_output = {structured_output:?}\n\
             [agents]\ndefault = \"good\"\nexecutor = \"exec\"\n\
             [executor]\nrun_plan_steps = false\n\
             [tools.search_logs]\npaths = [{logs:?}]\n\
             [limits]\n{limits}",
            url = server.base_url(),
            logs = repo_file("fixtures/demo/logs").display().to_string(),
        ),
    )
    .unwrap();
    env
}

/// The chat requests aimock received, once at least `expected` are journaled.
fn chat_requests(server: &Aimock, expected: usize) -> Vec<Value> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let requests = rt.block_on(server.chat_requests(expected));
    assert_eq!(requests.len(), expected, "chat requests: {requests:#?}");
    requests
}

/// The request bodies that are the Executor's evidence turn.
fn evidence_requests(requests: &[Value]) -> Vec<&Value> {
    requests
        .iter()
        .map(|r| &r["body"])
        .filter(|b| {
            b["messages"]
                .as_array()
                .and_then(|m| m.last())
                .and_then(|m| m["content"].as_str())
                .is_some_and(|c| c.starts_with(INSTRUCTION))
        })
        .collect()
}

/// The schema an evidence request was sent with (`json_schema`, as aimock takes it).
fn sent_schema(body: &Value) -> &Value {
    assert_eq!(body["response_format"]["type"], "json_schema", "{body:#}");
    &body["response_format"]["json_schema"]["schema"]
}

/// The bindings a sent schema allows: `(invocation id, tool, pointers)` per alternative.
fn allowed_bindings(schema: &Value) -> Vec<(String, String, Vec<String>)> {
    let binding = &schema["properties"]["claims"]["items"]["properties"]["bindings"]["items"];
    let alternatives: Vec<&Value> = match binding["anyOf"].as_array() {
        Some(a) => a.iter().collect(),
        None => vec![binding],
    };
    let strings = |v: &Value| -> Vec<String> {
        v["enum"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    alternatives
        .into_iter()
        .map(|a| {
            let p = &a["properties"];
            (
                strings(&p["source_invocation_id"])[0].clone(),
                strings(&p["tool_name"])[0].clone(),
                strings(&p["raw_path"]),
            )
        })
        .collect()
}

/// Runs the question, checks the one evidence turn (in the journal, the run file and the
/// answer), and that the recording and the store's export replay green twice alike.
/// Returns the evidence request's body.
fn ask_with_one_evidence_turn(env: &TestEnv, server: &Aimock, requests: usize, turn: u64) -> Value {
    let out = env.run(&[
        "--config",
        "diag.toml",
        "ask",
        QUESTION,
        "--record",
        "rec.json",
        "--json",
    ]);
    out.expect(0).quiet_stderr();
    let asked = out.json();
    assert_eq!(asked["status"], "SUCCESS", "{asked:#}");
    assert_eq!(asked["degraded"], false, "{asked:#}");
    assert_eq!(asked["effective_verdict"], "PASS");
    assert!(asked["answer"]
        .as_str()
        .unwrap()
        .contains("upstream returned 502 from payment-service"));

    let sent = chat_requests(server, requests);
    let evidence = evidence_requests(&sent);
    assert_eq!(evidence.len(), 1, "one evidence request: {sent:#?}");
    let body = evidence[0].clone();
    assert!(body.get("tools").is_none(), "no tool is offered: {body:#}");
    assert!(body.get("tool_choice").is_none(), "{body:#}");
    assert!(body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("You are the Executor"));

    let rec = read_json(&env.path("rec.json"));
    assert_schema("diag_run_v2.json", &rec);
    // The turn continues the Executor's conversation: its declared input, with the run's
    // clock, is still the first user message.
    let input: Value =
        serde_json::from_str(body["messages"][1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(input["run_clock"]["now"], rec["started_at"], "{input:#}");
    let marked: Vec<&Value> = rec["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["evidence_turn"] == true)
        .collect();
    assert_eq!(marked.len(), 1, "{rec:#}");
    assert_eq!(marked[0]["agent"], "executor");
    assert_eq!(marked[0]["turn"], turn);
    assert_eq!(marked[0]["response"]["structured_output"], "json_schema");

    // Offline from here.
    let first = env.run(&["replay", "rec.json"]);
    first.expect(0).quiet_stderr();
    let second = env.run(&["replay", "rec.json"]);
    second.expect(0).quiet_stderr();
    assert_eq!(first.stdout, second.stdout);
    assert!(
        first.stdout.ends_with("1 passed, 0 failed\n"),
        "{}",
        first.stdout
    );
    let run_id = rec["run_id"].as_str().unwrap();
    env.run(&["export", run_id, "-o", "exported.json"])
        .expect(0);
    let exported = read_json(&env.path("exported.json"));
    assert_eq!(
        exported["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["evidence_turn"] == true)
            .count(),
        1,
        "the store keeps the mark"
    );
    env.run(&["replay", "exported.json"])
        .expect(0)
        .quiet_stderr();

    // A recording whose mark is taken away no longer reproduces: the replay would not make
    // the turn the recording holds.
    let mut unmarked = rec.clone();
    for x in unmarked["exchanges"].as_array_mut().unwrap() {
        x.as_object_mut().unwrap().remove("evidence_turn");
    }
    std::fs::write(env.path("unmarked.json"), unmarked.to_string()).unwrap();
    let diverged = env.run(&["replay", "unmarked.json", "--json"]);
    diverged.expect(5);
    assert_eq!(diverged.json()["files"][0]["result"], "diverged");
    body
}

#[test]
fn a_loop_that_ends_with_a_plain_answer_gets_one_evidence_turn() {
    let server = Aimock::start_with("evidence_turn.json", Some(KEY));
    let env = env_for(&server, "ev-prose", "auto", "");
    // Planner, Executor (tool calls, prose, evidence turn), Verifier, Composer.
    let body = ask_with_one_evidence_turn(&env, &server, 6, 3);
    // The loop's prose answer is part of what the evidence turn sees.
    let messages = body["messages"].as_array().unwrap();
    assert!(messages[messages.len() - 2]["content"]
        .as_str()
        .unwrap()
        .starts_with("The checkout errors come from payment-service"));
    let schema = sent_schema(&body);
    let bindings = allowed_bindings(schema);
    assert_eq!(bindings.len(), 1, "{schema:#}");
    let (id, tool, pointers) = &bindings[0];
    assert_eq!((id.as_str(), tool.as_str()), ("inv-1", "search_logs"));
    assert!(
        pointers.contains(&"/matches/0/line".to_string()),
        "{pointers:?}"
    );
    assert_eq!(
        schema["properties"]["no_evidence"]["items"]["properties"]["query_ref"]["enum"],
        serde_json::json!(["inv-1"])
    );
}

#[test]
fn a_loop_that_ends_by_the_turn_budget_gets_one_evidence_turn() {
    let server = Aimock::start_with("evidence_turn.json", Some(KEY));
    let env = env_for(&server, "ev-turns", "auto", "max_turns = 1\n");
    // Planner, Executor (tool calls, evidence turn), Verifier, Composer.
    let body = ask_with_one_evidence_turn(&env, &server, 5, 2);
    let last_tool = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .expect("the tool results are in the evidence turn");
    assert!(last_tool["content"].as_str().unwrap().contains("inv-1"));
}

#[test]
fn a_loop_that_ends_by_the_tool_budget_gets_one_evidence_turn() {
    let server = Aimock::start_with("evidence_turn.json", Some(KEY));
    let env = env_for(&server, "ev-budget", "auto", "max_tool_calls = 1\n");
    // The first turn asks for two calls: one runs, one is blocked, and the loop ends there.
    let body = ask_with_one_evidence_turn(&env, &server, 5, 2);
    let schema = sent_schema(&body);
    let ids: Vec<String> = allowed_bindings(schema)
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(ids, ["inv-1"], "a blocked call offers nothing to cite");
    assert_eq!(
        schema["properties"]["no_evidence"]["items"]["properties"]["query_ref"]["enum"],
        serde_json::json!(["inv-1", "inv-2"])
    );
}

#[test]
fn a_model_set_to_off_gets_no_evidence_turn() {
    let server = Aimock::start_with("evidence_turn.json", Some(KEY));
    let env = env_for(&server, "ev-prose", "off", "");
    let out = env.run(&["--config", "diag.toml", "ask", QUESTION, "--json"]);
    out.expect(0).quiet_stderr();
    let asked = out.json();
    assert_eq!(asked["degraded"], true, "{asked:#}");
    assert_eq!(asked["fallback_kind"], "pre_verification", "{asked:#}");
    let executor: Vec<&Value> = asked["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node"] == "executor")
        .collect();
    assert_eq!(executor.len(), 1);
    assert_eq!(executor[0]["status"], "INVALID_OUTPUT", "{asked:#}");
    // Planner, Executor (tool calls, prose); nothing more.
    let sent = chat_requests(&server, 3);
    assert!(evidence_requests(&sent).is_empty(), "{sent:#?}");
    let executor_bodies: Vec<&Value> = sent
        .iter()
        .map(|r| &r["body"])
        .filter(|b| {
            b["messages"][0]["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("You are the Executor"))
        })
        .collect();
    assert_eq!(executor_bodies.len(), 2, "{sent:#?}");
    assert!(executor_bodies
        .iter()
        .all(|b| b.get("response_format").is_none() && b.get("tools").is_some()));
}
