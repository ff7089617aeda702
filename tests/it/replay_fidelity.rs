//! Replay keeps to what a live run would do: a recorded call to a tool outside the run file's
//! catalog is blocked as the registry blocks it (whatever the recording says it returned), and
//! a recorded invocation id the replay does not reproduce is a divergence, named. A run file
//! exported before the Composer's contract v2 replays with the prompt and contract its
//! requests were built with, proven by their recorded sha256.

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

/// A run file `diag export` wrote before prompt versions were recorded (`40b7ebb`: the
/// library's `composer_cites_refused_inline.json` replayed and exported by that `diag`): every
/// model exchange carries its request's sha256 and none a `prompt_version`; the Composer's
/// retry carries the correction of that time.
const BEFORE_DERIVATIONS: &str = "tests/fixtures/compat/exported_before_derivations.json";

/// `replay --json` of one file: its exit code and its one result.
fn replay_one(env: &TestEnv, name: &str) -> (i32, Value) {
    let out = env.run(&["replay", name, "--json"]);
    (out.code.unwrap_or(-1), out.json()["files"][0].clone())
}

/// The model exchanges of a run file.
fn models(doc: &Value) -> Vec<Value> {
    doc["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["kind"] == "model")
        .cloned()
        .collect()
}

#[test]
fn a_run_file_exported_before_derivations_replays_its_requests_byte_for_byte() {
    let env = TestEnv::new();
    let original = read_json(&repo_file(BEFORE_DERIVATIONS));
    let recorded = models(&original);
    assert!(recorded
        .iter()
        .all(|x| x["request_sha256"].as_str().map(str::len) == Some(64)
            && x.get("prompt_version").is_none()));
    assert_eq!(
        recorded.iter().filter(|x| x["agent"] == "composer").count(),
        2,
        "a refused answer and its retry, whose correction is in its request"
    );
    env.copy_fixture(BEFORE_DERIVATIONS, "old.json");
    let (code, result) = replay_one(&env, "old.json");
    assert_eq!(
        (code, result["result"].as_str()),
        (0, Some("ok")),
        "{result}"
    );

    // Its export names the versions the requests were built with, and the same sha256s.
    let run_id = result["run_id"].as_str().unwrap();
    env.run(&["export", run_id, "-o", "again.json"]).expect(0);
    let again = models(&read_json(&env.path("again.json")));
    assert_eq!(again.len(), recorded.len());
    for (x, o) in again.iter().zip(&recorded) {
        assert_eq!(x["request_sha256"], o["request_sha256"], "{x}");
        if x["agent"] == "composer" {
            assert_eq!(x["prompt_version"], 2, "{x}");
        }
    }

    // Told its Composer's requests were built with version 3 (composer_answer_v2), the same
    // file diverges there: the replay builds another request, and its sha256 says so.
    let composers = |doc: &mut Value, version: Value| {
        for x in doc["exchanges"].as_array_mut().unwrap() {
            if x["kind"] == "model" && x["agent"] == "composer" {
                x["prompt_version"] = version.clone();
            }
        }
    };
    edited(&env, BEFORE_DERIVATIONS, "v3.json", |d| {
        composers(d, json!(3))
    });
    let (code, result) = replay_one(&env, "v3.json");
    assert_eq!(
        (code, result["result"].as_str()),
        (5, Some("diverged")),
        "{result}"
    );
    let divergence = result["divergence"].as_str().unwrap();
    assert!(
        divergence.contains("request for composer changed"),
        "{divergence}"
    );

    // A version this diag does not embed, or two for one agent, is refused as the file loads.
    edited(&env, BEFORE_DERIVATIONS, "v9.json", |d| {
        composers(d, json!(9))
    });
    let (code, result) = replay_one(&env, "v9.json");
    assert_eq!(
        (code, result["result"].as_str()),
        (2, Some("error")),
        "a file diag cannot read is bad input, exit 2: {result}"
    );
    let error = result["error"].as_str().unwrap();
    assert!(
        error.ends_with(
            ".prompt_version: this diag has no version 9 of the composer prompt (it has 3, 2)"
        ),
        "{error}"
    );
    edited(&env, BEFORE_DERIVATIONS, "mixed.json", |d| {
        let last = d["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .rposition(|x| x["kind"] == "model" && x["agent"] == "composer")
            .unwrap();
        composers(d, json!(2));
        d["exchanges"][last]["prompt_version"] = json!(3);
    });
    let (_, result) = replay_one(&env, "mixed.json");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("version 3 of the composer prompt, where an earlier exchange of the run names version 2"),
        "{error}"
    );
}
