//! The `diag` binary against a real OpenAI-compatible server (aimock, installed by
//! `scripts/install-peers`) and the real log tools over the demo environment: a recorded live
//! run replays green and repeatably, Ctrl-C during a live run exits 130 with the run
//! stored FAILED (`interrupted`) with its partial trace, and a run killed outright (SIGKILL)
//! leaves a store that passes `integrity_check`, which the next open sweeps to FAILED.

use diag_testkit::read_json;
use std::process::{Child, Stdio};

use serde_json::Value;

use crate::support::cli_env;
use cli_env::{apply_filters, assert_schema, TestEnv};
use diag_testkit::bounded;
use diag_testkit::Aimock;

const KEY: &str = "sk-diag-cli-live-key-51f0c2";
const KEY_VAR: &str = "DIAG_CLI_LIVE_KEY";
const QUESTION: &str = "why does checkout return 502 since 14:00?";

/// A configuration for `server` with the demo logs and runbooks; the key comes from
/// `KEY_VAR`, which the environment sets.
fn live_env(server: &Aimock) -> TestEnv {
    cli_env::live_model_env(&server.base_url(), "diag-live-model", KEY_VAR, KEY)
}

#[test]
fn a_recorded_live_run_replays_green_and_byte_identical_apart_from_run_ids() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let env = live_env(&server);

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
    assert_schema("ask.v2.json", &asked);
    assert_eq!(asked["status"], "SUCCESS");
    assert_eq!(asked["effective_verdict"], "PASS");
    assert_eq!(asked["evaluation"]["tool_calls"], 2);
    // The plan's two steps ran before the Executor's first turn (`[executor] run_plan_steps`
    // is on by default), so the model, shown their results, answered with its evidence at
    // once: four model calls, the two tool calls before the Executor's.

    let text = std::fs::read_to_string(env.path("rec.json")).unwrap();
    assert!(!text.contains(KEY), "the run file carries the API key");
    let rec = read_json(&env.path("rec.json"));
    assert_schema("diag_run_v2.json", &rec);
    assert_eq!(rec["format"], "diag_run_v2");
    assert_eq!(rec["limits"]["max_tool_calls"], 12);
    assert_eq!(rec["run_id"], asked["run_id"]);
    let exchanges = rec["exchanges"].as_array().unwrap();
    let kinds: Vec<&str> = exchanges
        .iter()
        .map(|x| x["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["model", "tool", "tool", "model", "model", "model"]);
    assert!(exchanges
        .iter()
        .filter(|x| x["kind"] == "model")
        .all(|x| x["request_sha256"].is_string()));
    let marked: Vec<(&str, bool)> = exchanges
        .iter()
        .filter(|x| x["kind"] == "tool")
        .map(|x| (x["invocation_id"].as_str().unwrap(), x["plan_step"] == true))
        .collect();
    assert_eq!(marked, [("inv-1", true), ("inv-2", true)]);
    // The tool outputs are the real log lines.
    assert!(exchanges[1]["output"]["matches"][0]["line"]
        .as_str()
        .unwrap()
        .contains("upstream returned 502 from payment-service"));
    // The trace says where the calls came from.
    let trace = env.run(&["trace", asked["run_id"].as_str().unwrap()]);
    trace.expect(0);
    let plan_lines = trace
        .stdout
        .lines()
        .filter(|l| l.contains("search_logs") && l.contains("plan step"))
        .count();
    assert_eq!(plan_lines, 2, "{}", trace.stdout);
    // The report's timeline shows them between the Planner's call and the Executor's turn.
    let md = env.run(&[
        "report",
        asked["run_id"].as_str().unwrap(),
        "--format",
        "md",
    ]);
    md.expect(0);
    let at = |what: &str| {
        md.stdout
            .find(what)
            .unwrap_or_else(|| panic!("{what} in\n{}", md.stdout))
    };
    let planner = at("planner · model call, turn 1");
    let steps = [
        at("inv-1 search\\_logs · plan step"),
        at("inv-2 search\\_logs · plan step"),
    ];
    let executor = at("executor · model call, turn 1");
    assert!(
        steps.iter().all(|&s| planner < s && s < executor),
        "{}",
        md.stdout
    );
    // The store's export places the plan's calls where they ran, marked, and replays green.
    env.run(&[
        "export",
        asked["run_id"].as_str().unwrap(),
        "-o",
        "exported.json",
    ])
    .expect(0);
    let exported = read_json(&env.path("exported.json"));
    assert_eq!(exported["exchanges"], rec["exchanges"]);
    env.run(&["replay", "exported.json"])
        .expect(0)
        .quiet_stderr();
    drop(server);

    // Offline from here: the server is gone.
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

    let runs: Vec<String> = (0..2)
        .map(|_| {
            let out = env.run(&["replay", "rec.json", "--json"]);
            out.expect(0);
            let doc = out.json();
            assert_schema("replay.v1.json", &doc);
            assert_eq!(doc["files"][0]["result"], "ok");
            doc["files"][0]["run_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_ne!(runs[0], runs[1]);
    // Both replays stored the same trace, byte for byte apart from the run id.
    let traces: Vec<String> = runs
        .iter()
        .map(|r| {
            let out = env.run(&["trace", r]);
            out.expect(0);
            out.stdout.replace(r.as_str(), "[RUN]")
        })
        .collect();
    assert_eq!(traces[0], traces[1]);
    let json_traces: Vec<String> = runs
        .iter()
        .map(|r| {
            let out = env.run(&["trace", r, "--json"]);
            out.expect(0);
            assert_schema("trace.v1.json", &out.json());
            out.stdout.replace(r.as_str(), "[RUN]")
        })
        .collect();
    assert_eq!(json_traces[0], json_traces[1]);

    // `diag ask --fixture` of the recording takes the same path and answer.
    let again = env.run(&["ask", "--fixture", "rec.json", "--json"]);
    again.expect(0).quiet_stderr();
    let again = again.json();
    assert_eq!(again["answer"], asked["answer"]);
    // Same nodes, statuses and details; only times differ (the replay clock is pinned).
    let shape = |doc: &Value| -> Vec<Value> {
        doc["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let mut e = e.clone();
                let o = e.as_object_mut().unwrap();
                o.remove("started_at");
                o.remove("duration_ms");
                e
            })
            .collect()
    };
    assert_eq!(shape(&again), shape(&asked));
    let filters = cli_env::id_filters();
    assert_eq!(
        apply_filters(&filters, again["session_id"].as_str().unwrap()),
        "[SESSION]"
    );
}

/// `diag trace --json` of a run cut while its Verifier waited on the model: FAILED
/// (`interrupted`), no answer, no evaluation, and the trace of what had finished: four
/// nodes, the plan's two tool calls and the two model calls before the Verifier's (the
/// Planner's, and the Executor's one turn, which starts from the plan's results).
fn interrupted_trace(env: &TestEnv, run_id: &str) -> Value {
    let out = env.run(&["trace", run_id, "--json"]);
    out.expect(0);
    let doc = out.json();
    assert_schema("trace.v1.json", &doc);
    assert_eq!(doc["run"]["status"], "FAILED");
    assert_eq!(doc["run"]["failure"], "interrupted");
    assert_eq!(doc["run"]["answer"], Value::Null);
    assert_eq!(doc["evaluation"], Value::Null);
    let nodes: Vec<&str> = doc["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].as_str().unwrap())
        .collect();
    assert_eq!(
        nodes,
        ["planner", "executor", "gatekeeper", "verified_input"]
    );
    let invocations = doc["tool_invocations"].as_array().unwrap();
    assert_eq!(invocations.len(), 2);
    assert!(
        invocations.iter().all(|i| i["agent"] == "planner"),
        "{doc:#}"
    );
    assert_eq!(doc["agent_steps"].as_array().unwrap().len(), 2);
    doc
}

/// Starts `diag ask QUESTION` live in the background, its output going to `output()`.
fn spawn_ask(env: &TestEnv, output: fn() -> Stdio) -> Child {
    let mut cmd = env.command();
    cmd.args(["--config", "diag.toml", "ask", QUESTION])
        .stdin(Stdio::null())
        .stdout(output())
        .stderr(output());
    cmd.spawn().expect("diag ask starts")
}

#[test]
fn ctrl_c_during_a_live_run_exits_130_and_keeps_the_partial_trace() {
    // The Verifier's answer takes 5 s: the run is blocked there when Ctrl-C arrives.
    let server = Aimock::start_with("graph_slow_verifier.json", Some(KEY));
    let env = live_env(&server);
    let mut child = spawn_ask(&env, Stdio::piped);

    let run_id = bounded::poll_child("the run to be stored", &mut child, || {
        let out = env.run(&["runs", "--status", "running", "--json"]);
        (out.code == Some(0))
            .then(|| out.json()["runs"][0]["run_id"].as_str().map(String::from))
            .flatten()
    });
    // Planner, Executor, Gatekeeper and Verified Input are done: the Verifier is waiting.
    bounded::poll_child("the Verifier to be called", &mut child, || {
        let out = env.run(&["trace", &run_id, "--json"]);
        let doc = out.json();
        (doc["events"].as_array().map_or(0, Vec::len) == 4).then_some(())
    });
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let output = bounded::wait_with_output(child, bounded::LIMIT, "diag ask (after SIGINT)");
    let stderr = String::from_utf8(output.stderr).unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(130), "{stdout}\n{stderr}");
    assert_eq!(
        stderr,
        format!("diag: interrupted; run {run_id} is stored as FAILED with its partial trace\n")
    );
    assert!(stdout.contains("status   FAILED (interrupted)"), "{stdout}");

    let out = env.run(&["trace", &run_id]);
    out.expect(0).quiet_stderr();
    assert!(
        out.stdout.contains("status   FAILED (interrupted)"),
        "{}",
        out.stdout
    );
    interrupted_trace(&env, &run_id);
    let runs = env.run(&["runs", "--status", "failed", "--json"]);
    runs.expect(0);
    assert_eq!(runs.json()["runs"][0]["run_id"], run_id.as_str());
}

#[test]
fn a_live_run_killed_outright_leaves_a_sound_store_and_is_swept_to_failed() {
    // SIGKILL gives diag no chance to clean up: what survives is what it had committed.
    let server = Aimock::start_with("graph_slow_verifier.json", Some(KEY));
    let env = live_env(&server);
    let mut child = spawn_ask(&env, Stdio::null);
    let db = env.db();
    let open = || {
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()
    };
    // Read straight from the file (no diag process opens it, so nothing sweeps early).
    let run_id = bounded::poll_child("the run to be stored", &mut child, || {
        open()?
            .query_row(
                "SELECT run_id FROM diagnosis_run WHERE status = 'RUNNING'",
                [],
                |r| r.get::<_, String>(0),
            )
            .ok()
    });
    bounded::poll_child("the Verifier to be called", &mut child, || {
        let events: i64 = open()?
            .query_row(
                "SELECT count(*) FROM orchestration_event WHERE run_id = ?1",
                [&run_id],
                |r| r.get(0),
            )
            .ok()?;
        (events == 4).then_some(())
    });
    child.kill().expect("SIGKILL");
    child.wait().unwrap();

    // Still RUNNING on disk: nobody has opened the store since.
    let conn = open().unwrap();
    let status: String = conn
        .query_row(
            "SELECT status FROM diagnosis_run WHERE run_id = ?1",
            [&run_id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(status, "RUNNING");
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    drop(conn);

    // The next diag that opens the store marks it FAILED (interrupted), partial trace kept.
    let doc = interrupted_trace(&env, &run_id);
    assert_eq!(doc["run"]["duration_ms"], Value::Null, "its process died");

    // Its export keeps every exchange that happened and says its replay will stop short.
    let out = env.run(&["-q", "export", &run_id, "-o", "killed.json"]);
    out.expect(0);
    assert_eq!(
        out.stderr,
        format!(
            "diag: warning: run {run_id} was interrupted; its recording ends where it \
             stopped, so diag replay reports a divergence there (exit 5)\n"
        )
    );
    let out = env.run(&["replay", "killed.json"]);
    out.expect(5);
}

/// A run recorded under limits other than the defaults replays green under them: the file
/// records them, and the replay runs with them. The same file with its limits taken out (so
/// the defaults apply) leaves its recording.
#[test]
fn a_run_recorded_with_other_limits_replays_green_under_them() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let env = live_env(&server);
    let mut config = std::fs::read_to_string(env.path("diag.toml")).unwrap();
    // The Executor model's own calls meet the turn limit, so the plan's steps are not run.
    config.push_str(
        "[limits]\nmax_turns = 1\nmax_tool_calls = 20\n[executor]\nrun_plan_steps = false\n",
    );
    std::fs::write(env.path("diag.toml"), config).unwrap();

    let out = env.run(&[
        "--config",
        "diag.toml",
        "ask",
        QUESTION,
        "--record",
        "rec.json",
    ]);
    assert!(matches!(out.code, Some(0 | 1)), "{}", out.stderr);
    drop(server);
    let rec = read_json(&env.path("rec.json"));
    assert_schema("diag_run_v2.json", &rec);
    assert_eq!(rec["limits"]["max_turns"], 1);
    assert_eq!(rec["limits"]["max_tool_calls"], 20);

    let replayed = env.run(&["replay", "rec.json"]);
    replayed.expect(0).quiet_stderr();
    assert!(
        replayed.stdout.ends_with("1 passed, 0 failed\n"),
        "{}",
        replayed.stdout
    );

    // The store keeps the limits: the export of the live run records them and replays green.
    let run_id = rec["run_id"].as_str().unwrap();
    let exported = env.run(&["export", run_id, "-o", "exported.json"]);
    exported.expect(0);
    let exported = read_json(&env.path("exported.json"));
    assert_schema("diag_run_v2.json", &exported);
    assert_eq!(exported["limits"], rec["limits"]);
    env.run(&["replay", "exported.json"])
        .expect(0)
        .quiet_stderr();

    let mut defaults = rec.clone();
    defaults.as_object_mut().unwrap().remove("limits");
    std::fs::write(env.path("defaults.json"), defaults.to_string()).unwrap();
    let diverged = env.run(&["replay", "defaults.json", "--json"]);
    diverged.expect(5);
    assert_eq!(diverged.json()["files"][0]["result"], "diverged");
}
