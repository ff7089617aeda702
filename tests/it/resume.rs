//! `diag ask --resume RUN_ID` against aimock: a live run cut by Ctrl-C while its Verifier
//! waits on the model is resumed against a working endpoint; the model calls it had already
//! made are not sent again (aimock's request journal says so), the new run records
//! `resumed_from` and `trace` marks what was reused. A resume whose stored calls diverge from
//! what the graph now asks stops reusing there, names the divergence and goes live. A SUCCESS,
//! RUNNING or unknown run, or a question given with --resume, is refused with one line and
//! nothing written. A store from before resumed runs opens with every run started afresh.

use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};

use crate::support::cli_env::{assert_schema, repo_file, TestEnv};
use diag_store_sqlite::{SqliteStore, SCHEMA_VERSION};
use diag_testkit::bounded;
use diag_testkit::Aimock;

const KEY: &str = "sk-diag-resume-key-7d21e9";
const KEY_VAR: &str = "DIAG_RESUME_KEY";
const QUESTION: &str = "why does checkout return 502 since 14:00?";

/// Writes `diag.toml` for `server` with the demo logs and runbooks, plus `extra`. The runs
/// below count the Executor model's own turns and calls, so the plan's steps are not run.
fn configure(env: &TestEnv, server: &Aimock, extra: &str) {
    std::fs::write(
        env.path("diag.toml"),
        format!(
            "[models.default]\nbase_url = {:?}\nmodel = \"diag-live-model\"\n\
             api_key_env = {KEY_VAR:?}\ntimeout_secs = 60\n\
             [executor]\nrun_plan_steps = false\n\
             [tools.search_logs]\npaths = [{:?}]\n\
             [tools.search_runbooks]\npaths = [{:?}]\n{extra}",
            server.base_url(),
            repo_file("fixtures/demo/logs").display().to_string(),
            repo_file("fixtures/demo/runbooks").display().to_string(),
        ),
    )
    .unwrap();
}

/// A live run whose Verifier never gets its answer (aimock stalls it), cut by Ctrl-C once
/// the Planner, the Executor (two turns, two tool calls), the Gatekeeper and Verified Input
/// are done: FAILED (`interrupted`) with three model calls and two tool calls stored.
/// Returns the environment (configured for the stalled server) and the run id.
fn interrupted_run(stalled: &Aimock) -> (TestEnv, String) {
    let mut env = TestEnv::new();
    env.set_env(KEY_VAR, KEY);
    configure(&env, stalled, "");
    let mut cmd = env.command();
    cmd.args(["--config", "diag.toml", "ask", QUESTION])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("diag ask starts");
    let run_id = bounded::poll_child("the run to be stored", &mut child, || {
        let out = env.run(&["runs", "--status", "running", "--json"]);
        (out.code == Some(0))
            .then(|| out.json()["runs"][0]["run_id"].as_str().map(String::from))
            .flatten()
    });
    bounded::poll_child("the Verifier to be called", &mut child, || {
        let doc = env.run(&["trace", &run_id, "--json"]).json();
        (doc["events"].as_array().map_or(0, Vec::len) == 4).then_some(())
    });
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let output = bounded::wait_with_output(child, bounded::LIMIT, "diag ask (after SIGINT)");
    assert_eq!(output.status.code(), Some(130));
    let doc = env.run(&["trace", &run_id, "--json"]).json();
    assert_eq!(doc["run"]["status"], "FAILED");
    assert_eq!(doc["run"]["failure"], "interrupted");
    assert_eq!(doc["agent_steps"].as_array().unwrap().len(), 3);
    assert_eq!(doc["tool_invocations"].as_array().unwrap().len(), 2);
    (env, run_id)
}

/// The agent each journaled chat request was for, told by what its user message carries
/// (the same markers the aimock fixtures match on).
fn agents_asked(journal: &[Value]) -> Vec<&'static str> {
    journal
        .iter()
        .map(|entry| {
            let text = entry.to_string();
            if text.contains("gatekeeper_audit") {
                "verifier"
            } else if text.contains("allowed_claims") {
                "composer"
            } else if text.contains("tool_catalog") {
                "planner"
            } else if text.contains("plan") {
                "executor"
            } else {
                "unknown"
            }
        })
        .collect()
}

fn reused_flags(doc: &Value, list: &str) -> Vec<bool> {
    doc[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reused"].as_bool().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_live_run_resumes_without_sending_its_model_calls_again() {
    let stalled = Aimock::start_with("graph_stalled_verifier.json", Some(KEY));
    let (env, original) = tokio::task::block_in_place(|| interrupted_run(&stalled));
    let first = stalled.chat_requests(3).await;
    assert_eq!(
        agents_asked(&first)[..3],
        ["planner", "executor", "executor"],
        "the original run paid for these"
    );
    let original_trace = env.run(&["trace", &original, "--json"]);
    drop(stalled);

    // The endpoint works again: resume against a fresh server whose journal is empty.
    let working = Aimock::start_with("graph.json", Some(KEY));
    configure(&env, &working, "");
    let out = tokio::task::block_in_place(|| {
        env.run(&[
            "--config",
            "diag.toml",
            "ask",
            "--resume",
            &original,
            "--json",
        ])
    });
    out.expect(0).quiet_stderr();
    let asked = out.json();
    assert_schema("ask.v2.json", &asked);
    assert_eq!(asked["status"], "SUCCESS");
    assert_eq!(asked["effective_verdict"], "PASS");
    let resumed = asked["run_id"].as_str().unwrap().to_string();
    assert_ne!(resumed, original, "a resumed run is a new run");

    // Only the calls after the interruption reached the endpoint.
    let second = working.chat_requests(2).await;
    assert_eq!(agents_asked(&second), ["verifier", "composer"]);

    let doc = env.run(&["trace", &resumed, "--json"]).json();
    assert_schema("trace.v1.json", &doc);
    assert_eq!(doc["run"]["resumed_from"], original.as_str());
    assert_eq!(
        doc["run"]["reuse"],
        json!({"model_calls": 3, "tool_calls": 2, "stopped": null})
    );
    assert_eq!(doc["run"]["question"], QUESTION);
    assert_eq!(
        doc["run"]["session_id"],
        original_trace.json()["run"]["session_id"],
        "the original session goes on"
    );
    assert_eq!(
        reused_flags(&doc, "agent_steps"),
        [true, true, true, false, false]
    );
    assert_eq!(reused_flags(&doc, "tool_invocations"), [true, true]);
    let text = env.run(&["trace", &resumed]);
    text.expect(0).quiet_stderr();
    assert!(
        text.stdout.contains(&format!(
            "resumed  from {original}: 3 model call(s) and 2 tool call(s) reused\n"
        )),
        "{}",
        text.stdout
    );
    let sources: Vec<&str> = text
        .stdout
        .lines()
        .filter_map(|l| {
            if l.ends_with("  reused") {
                Some("reused")
            } else if l.ends_with("  live") {
                Some("live")
            } else {
                None
            }
        })
        .collect();
    assert_eq!(sources, ["reused", "reused", "reused", "live", "live"]);

    // The original run is left as it was.
    assert_eq!(
        env.run(&["trace", &original, "--json"]).stdout,
        original_trace.stdout
    );
    let plain = env.run(&["trace", &original]);
    assert!(!plain.stdout.contains("resumed"), "{}", plain.stdout);
    assert_eq!(
        env.run(&["trace", &original, "--json"]).json()["run"]["resumed_from"],
        Value::Null
    );

    // The export describes the whole run, reused calls included, and replays green offline.
    drop(working);
    let exported = env.run(&["export", &resumed, "-o", "resumed.json"]);
    exported.expect(0).wrote("resumed.json");
    let file = diag_testkit::read_json(&env.path("resumed.json"));
    let kinds: Vec<&str> = file["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["model", "model", "tool", "tool", "model", "model", "model"]
    );
    let replayed = env.run(&["replay", "resumed.json"]);
    replayed.expect(0).quiet_stderr();
    assert!(
        replayed.stdout.ends_with("1 passed, 0 failed\n"),
        "{}",
        replayed.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_that_diverges_stops_reusing_there_names_it_and_goes_live() {
    let stalled = Aimock::start_with("graph_stalled_verifier.json", Some(KEY));
    let (env, original) = tokio::task::block_in_place(|| interrupted_run(&stalled));
    drop(stalled);

    // The Executor's completion budget changed since: its request is no longer the one the
    // original run sent, so its stored answer must not be served.
    let working = Aimock::start_with("graph.json", Some(KEY));
    configure(&env, &working, "[limits.max_tokens]\nexecutor = 3000\n");
    let out = tokio::task::block_in_place(|| {
        env.run(&[
            "--config",
            "diag.toml",
            "ask",
            "--resume",
            &original,
            "--json",
        ])
    });
    out.expect(0);
    let line = out.one_error_line();
    assert!(
        line.starts_with(&format!(
            "diag: resume of run {original} diverged at exchange 1: request for executor \
             changed (sha256 "
        )),
        "{line}"
    );
    assert!(
        line.ends_with("; reuse stopped there and the run went on live"),
        "{line}"
    );
    let asked = out.json();
    assert_eq!(asked["status"], "SUCCESS");
    let resumed = asked["run_id"].as_str().unwrap();

    // The Planner's call was reused; everything from the Executor on was sent live.
    let second = working.chat_requests(4).await;
    assert_eq!(
        agents_asked(&second),
        ["executor", "executor", "verifier", "composer"]
    );
    let doc = env.run(&["trace", resumed, "--json"]).json();
    assert_schema("trace.v1.json", &doc);
    assert_eq!(doc["run"]["resumed_from"], original.as_str());
    assert_eq!(doc["run"]["reuse"]["model_calls"], 1);
    assert_eq!(doc["run"]["reuse"]["tool_calls"], 0);
    let stopped = doc["run"]["reuse"]["stopped"].as_str().unwrap();
    assert!(
        stopped.starts_with("exchange 1: request for executor changed"),
        "{stopped}"
    );
    assert_eq!(
        reused_flags(&doc, "agent_steps"),
        [true, false, false, false, false]
    );
    assert_eq!(reused_flags(&doc, "tool_invocations"), [false, false]);
    let text = env.run(&["trace", resumed]);
    assert!(
        text.stdout
            .contains("         reuse stopped at exchange 1: request for executor changed"),
        "{}",
        text.stdout
    );
}

/// Every row of every table, as text: what "nothing written" compares.
fn dump(db: &Path) -> Vec<String> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut rows = Vec::new();
    for table in tables {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
            .unwrap();
        let n = stmt.column_count();
        let found: Vec<String> = stmt
            .query_map([], |r| {
                let cells: Vec<String> = (0..n)
                    .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                    .collect();
                Ok(format!("{table}: {}", cells.join(" | ")))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        rows.extend(found);
    }
    rows
}

#[test]
fn resuming_a_success_a_running_or_an_unknown_run_is_refused_with_nothing_written() {
    let mut env = TestEnv::new();
    env.set_env(KEY_VAR, KEY);
    // The endpoint is never reached: every refusal comes before a model call.
    std::fs::write(
        env.path("diag.toml"),
        format!(
            "[models.default]\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"m\"\n\
             api_key_env = {KEY_VAR:?}\n",
            diag_testkit::free_port()
        ),
    )
    .unwrap();

    // An unknown run in a store that does not exist yet: refused, and no store is created.
    let out = env.run(&["--config", "diag.toml", "ask", "--resume", "run-missing"]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: unknown run `run-missing` (diag runs lists the stored runs)"
    );
    assert!(!env.db().exists(), "the refusal created the store");

    let succeeded = env.ask_fixture_json(&repo_file("fixtures/incident-checkout-502.json"), &[]);
    assert_eq!(succeeded["status"], "SUCCESS");
    let success = succeeded["run_id"].as_str().unwrap().to_string();
    // A RUNNING run owned by this (live) process: another process may still be writing it.
    let store = diag_testkit::open_sqlite(env.db()).unwrap();
    store
        .create_run(diag_testkit::records::new_run("run-running", "ses-1", 0))
        .unwrap();
    drop(store);
    let before = dump(&env.db());

    let cases: [(&[&str], String); 5] = [
        (
            &["ask", "--resume", &success],
            format!("diag: run {success} ended SUCCESS: only a FAILED run can be resumed"),
        ),
        (
            &["ask", "--resume", "run-running"],
            "diag: run run-running is still RUNNING (its process may still be working on it): \
             only a FAILED run can be resumed"
                .to_string(),
        ),
        (
            &["ask", "--resume", "run-nope"],
            "diag: unknown run `run-nope` (diag runs lists the stored runs)".to_string(),
        ),
        (
            &["ask", "--resume", &success, QUESTION],
            format!(
                "diag: --resume {success} continues that run with its own question: omit the \
                 question"
            ),
        ),
        (
            &["ask", "--resume", &success, "--session", "s"],
            String::new(),
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["--config", "diag.toml"];
        all.extend_from_slice(args);
        let out = env.run(&all);
        out.expect(2);
        if want.is_empty() {
            // clap's own usage error for flags that cannot go together.
            assert!(out.stderr.contains("cannot be used with"), "{}", out.stderr);
        } else {
            assert_eq!(out.one_error_line(), want);
        }
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        assert_eq!(dump(&env.db()), before, "{args:?} wrote to the store");
    }
}

#[test]
fn a_store_from_before_resumed_runs_opens_with_every_run_started_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    {
        // Version 2: the schema just before the resume columns (version 3).
        SqliteStore::create_at_schema_version(&db, 2).unwrap();
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "INSERT INTO tool_catalog (sha256, catalog) VALUES ('c0', '[]');
             INSERT INTO diagnosis_run (run_id, session_id, question, status, failure,
                 started_at, tools_sha256, owner_pid, created_at)
             VALUES ('run-old', 'ses-old', 'why?', 'FAILED', 'interrupted',
                 '2026-01-01T00:00:00Z', 'c0', 1, '2026-01-01T00:00:00Z');",
        )
        .unwrap();
    }
    let store = diag_testkit::open_sqlite(&db).unwrap();
    let run = store.get_run("run-old").unwrap().unwrap();
    assert_eq!(run.resumed_from, None);
    assert_eq!(run.reuse, None);
    let version: u32 = rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}
