//! Replay keeps to what a live run would do: a recorded call to a tool outside the run file's
//! catalog is blocked as the registry blocks it (whatever the recording says it returned), and
//! a recorded invocation id the replay does not reproduce is a divergence, named.

use serde_json::{json, Value};

use crate::support::cli_env::{repo_file, TestEnv};
use diag_testkit::read_json;

/// `fixture`, changed by `edit`, written into `env` as `name`.
fn edited(env: &TestEnv, fixture: &str, name: &str, edit: impl FnOnce(&mut Value)) {
    let mut doc = read_json(&repo_file(fixture));
    edit(&mut doc);
    std::fs::write(env.path(name), serde_json::to_string_pretty(&doc).unwrap()).unwrap();
}

/// The index of the first tool exchange with `invocation_id`.
fn tool_exchange(doc: &Value, invocation_id: &str) -> usize {
    doc["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .position(|x| x["kind"] == "tool" && x["invocation_id"] == invocation_id)
        .unwrap()
}

/// The stored invocations of a replayed run, from `diag trace --json`.
fn invocations(env: &TestEnv, run_id: &str) -> Vec<Value> {
    let out = env.run(&["trace", run_id, "--json"]);
    out.expect(0);
    out.json()["tool_invocations"].as_array().unwrap().clone()
}

const BLOCKED: &str = "fixtures/runs/executor_tool_blocked.json";
const UNKNOWN: &str = "tool 'kubectl_logs' is not available; available tools: search_logs, \
                       query_metrics, search_runbooks, current_time";

#[test]
fn a_recorded_blocked_call_outside_the_catalog_replays_green() {
    let env = TestEnv::new();
    let out = env.run(&["replay", repo_file(BLOCKED).to_str().unwrap(), "--json"]);
    out.expect(0);
    let doc = out.json();
    assert_eq!(doc["files"][0]["result"], "ok", "{doc}");
    let run_id = doc["files"][0]["run_id"].as_str().unwrap();
    let inv = invocations(&env, run_id);
    let kubectl = inv.iter().find(|i| i["invocation_id"] == "inv-2").unwrap();
    assert_eq!(kubectl["status"], "blocked");
    assert_eq!(kubectl["output"], json!({"error": UNKNOWN}));
}

#[test]
fn a_recorded_ok_result_for_a_tool_outside_the_catalog_is_blocked_and_named() {
    let env = TestEnv::new();
    let mut at = 0;
    edited(&env, BLOCKED, "ok.json", |doc| {
        at = tool_exchange(doc, "inv-2");
        doc["exchanges"][at]["status"] = json!("ok");
        doc["exchanges"][at]["output"] = json!({"lines": ["payment-service pool exhausted"]});
    });
    let out = env.run(&["replay", "ok.json", "--json"]);
    out.expect(5);
    let doc = out.json();
    let file = &doc["files"][0];
    assert_eq!(file["result"], "diverged", "{doc}");
    let divergence = file["divergence"].as_str().unwrap();
    assert!(
        divergence.starts_with(&format!(
            "exchange {at}: tool call inv-2 (kubectl_logs) names a tool outside the run file's \
             catalog, which a live run blocks, but the recording has status ok"
        )),
        "{divergence}"
    );
    // The call was blocked as a live run blocks it, not served the recorded result.
    let run_id = file["run_id"].as_str().unwrap();
    let inv = invocations(&env, run_id);
    let kubectl = inv.iter().find(|i| i["invocation_id"] == "inv-2").unwrap();
    assert_eq!(kubectl["status"], "blocked");
    assert_eq!(kubectl["output"], json!({"error": UNKNOWN}));
}

#[test]
fn a_recorded_invocation_id_the_replay_does_not_reproduce_is_a_divergence() {
    let env = TestEnv::new();
    let mut at = 0;
    edited(&env, "fixtures/runs/pass.json", "ids.json", |doc| {
        at = tool_exchange(doc, "inv-2");
        doc["exchanges"][at]["invocation_id"] = json!("inv-7");
    });
    // Unchanged, the file replays green.
    env.run(&[
        "replay",
        repo_file("fixtures/runs/pass.json").to_str().unwrap(),
    ])
    .expect(0);
    let out = env.run(&["replay", "ids.json", "--json"]);
    out.expect(5);
    let doc = out.json();
    let file = &doc["files"][0];
    assert_eq!(file["result"], "diverged", "{doc}");
    let divergence = file["divergence"].as_str().unwrap();
    assert!(
        divergence.starts_with(&format!("exchange {at}: tool call ")),
        "{divergence}"
    );
    assert!(
        divergence.ends_with("recorded as invocation \"inv-7\", replayed as \"inv-2\""),
        "{divergence}"
    );
}
