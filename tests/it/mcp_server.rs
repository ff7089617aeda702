//! `diag mcp` driven by a real MCP client (rmcp's client side, the official Rust SDK) over
//! the child process's stdin and stdout, against aimock for the model endpoint and the real
//! log and runbook tools over the demo environment: the tool list, a diagnosis with its
//! progress notifications and structured result (which `diag trace` then shows), a cancelled
//! diagnosis stored FAILED (`interrupted`), bad requests answered with MCP errors and nothing
//! written, and two concurrent diagnoses stored as two complete runs.
//!
//! Nothing here waits for an amount of time: every wait is for a message, a notification or
//! a stored row, under a generous bound that fails the test naming what it waited for.

use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ErrorCode, JsonObject,
    ProgressNotificationParam, ProgressToken, Request, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestHandle, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::support::cli_env;
use cli_env::{assert_schema, repo_file, TestEnv};
use diag_testkit::Aimock;

const KEY: &str = "sk-diag-mcp-server-key-7d41a9";
const KEY_VAR: &str = "DIAG_MCP_SERVER_KEY";
const QUESTION: &str = "why does checkout return 502 since 14:00?";
/// The nodes of the PASS path, in order.
const PASS_PATH: [&str; 6] = [
    "planner",
    "executor",
    "gatekeeper",
    "verified_input",
    "verifier",
    "composer",
];
/// The bound of every single wait.
const WAIT: Duration = Duration::from_secs(60);

/// Fails the test, naming `what`, when `fut` does not finish within [`WAIT`].
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("gave up waiting for {what} after {WAIT:?}"))
}

/// A test environment whose configuration points at `base_url`, with the demo logs and
/// runbooks; the key comes from `KEY_VAR`, which the environment sets.
fn env_for(base_url: &str) -> TestEnv {
    cli_env::live_model_env(base_url, "diag-live-model", KEY_VAR, KEY)
}

/// The client side: every progress notification goes to the test.
struct Client {
    progress: mpsc::UnboundedSender<ProgressNotificationParam>,
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.progress.send(params);
    }
}

/// One `diag mcp` child process and the client session over its stdio.
struct Session {
    client: RunningService<RoleClient, Client>,
    child: tokio::process::Child,
    progress: mpsc::UnboundedReceiver<ProgressNotificationParam>,
    stderr: PathBuf,
}

impl Session {
    /// Starts `diag --config diag.toml mcp` in `env` and initializes the session.
    async fn start(env: &TestEnv) -> Session {
        Session::start_with(env, &["--config", "diag.toml", "mcp"]).await
    }

    /// Starts `diag ARGS` (an `mcp` command line) in `env` and initializes the session.
    async fn start_with(env: &TestEnv, args: &[&str]) -> Session {
        let stderr = env.root().join("mcp.stderr");
        let mut cmd = env.command();
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let mut child = cmd.spawn().expect("diag mcp starts");
        let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
        let (tx, progress) = mpsc::unbounded_channel();
        let client = within(
            "the MCP session to start",
            Client { progress: tx }.serve(transport),
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the MCP session did not start: {e}\n--- stderr\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            )
        });
        Session {
            client,
            child,
            progress,
            stderr,
        }
    }

    /// Sends `tools/call` with a progress token and returns the handle.
    async fn send_call(&self, tool: &str, args: Value) -> RequestHandle<RoleClient> {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        self.client
            .send_cancellable_request(
                ClientRequest::CallToolRequest(Request::new(
                    CallToolRequestParams::new(tool.to_string()).with_arguments(args),
                )),
                PeerRequestOptions::no_options(),
            )
            .await
            .expect("the request is sent")
    }

    /// `tools/call` with raw arguments; the MCP error or the result.
    async fn call(&self, tool: &str, args: JsonObject) -> Result<CallToolResult, ServiceError> {
        within(
            &format!("the answer to tools/call {tool}"),
            self.client
                .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args)),
        )
        .await
    }

    /// Waits for the progress notification of `token` whose message starts with `prefix`.
    async fn wait_progress(&mut self, token: &ProgressToken, prefix: &str) {
        within(&format!("a progress notification `{prefix} …`"), async {
            loop {
                let p = self
                    .progress
                    .recv()
                    .await
                    .expect("the client is still running");
                if &p.progress_token == token
                    && p.message.as_deref().is_some_and(|m| m.starts_with(prefix))
                {
                    return;
                }
            }
        })
        .await;
    }

    /// Closes stdin and waits for `diag mcp` to exit; returns its exit code and stderr.
    async fn close(self) -> (Option<i32>, String) {
        let Session {
            client,
            mut child,
            stderr,
            ..
        } = self;
        within("the client to close", client.cancel())
            .await
            .expect("the client closes");
        let status = within("diag mcp to exit after stdin closed", child.wait())
            .await
            .unwrap();
        (
            status.code(),
            std::fs::read_to_string(&stderr).unwrap_or_default(),
        )
    }
}

fn obj(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

/// The result of a `tools/call` that was sent with [`Session::send_call`].
async fn result_of(handle: RequestHandle<RoleClient>, what: &str) -> CallToolResult {
    match within(what, handle.await_response()).await {
        Ok(ServerResult::CallToolResult(r)) => r,
        other => panic!("{what}: not a tool result: {other:?}"),
    }
}

/// The run ids in the store, as `diag runs --json` lists them (newest first), with their
/// status.
fn stored_runs(env: &TestEnv) -> Vec<(String, String)> {
    let out = env.run(&["runs", "--json"]);
    out.expect(0);
    out.json()["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run_id"].as_str().unwrap().to_string(),
                r["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `diag trace RUN --json`, checked against its schema.
fn trace(env: &TestEnv, run_id: &str) -> Value {
    let out = env.run(&["trace", run_id, "--json"]);
    out.expect(0);
    let doc = out.json();
    assert_schema("trace.v1.json", &doc);
    doc
}

fn nodes(trace: &Value) -> Vec<String> {
    trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].as_str().unwrap().to_string())
        .collect()
}

/// A finished diagnosis's structured result, checked against its schema, and that the run
/// it names is stored SUCCESS with that answer, the PASS path, and claims whose evidence is
/// the recorded output of its own tool calls.
fn check_verified_result(env: &TestEnv, result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let doc = result
        .structured_content
        .clone()
        .expect("structured content");
    assert_schema("mcp-diagnose.v1.json", &doc);
    // The text content is the same document, for clients that read only text.
    let text = result.content[0]
        .as_text()
        .expect("a text block")
        .text
        .clone();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), doc);
    assert_eq!(doc["status"], "SUCCESS");
    assert_eq!(doc["verified"], true);
    assert_eq!(doc["effective_verdict"], "PASS");
    assert_eq!(doc["degraded"], false);
    assert_eq!(doc["fallback_kind"], Value::Null);
    assert_eq!(doc["failure"], Value::Null);
    assert_eq!(doc["model_error"], Value::Null);
    let run_id = doc["run_id"].as_str().unwrap().to_string();

    let stored = trace(env, &run_id);
    assert_eq!(stored["run"]["status"], "SUCCESS");
    assert_eq!(stored["run"]["question"], QUESTION);
    assert_eq!(stored["run"]["answer"], doc["answer"]);
    assert_eq!(stored["run"]["session_id"], doc["session_id"]);
    assert_eq!(stored["run"]["effective_verdict"], "PASS");
    assert_eq!(nodes(&stored), PASS_PATH);
    assert!(stored["evaluation"].is_object());

    // Every claim's evidence is a quote of one of this run's recorded tool outputs, at the
    // pointer it names.
    let claims = doc["claims"].as_array().unwrap();
    let ids: Vec<&str> = claims
        .iter()
        .map(|c| c["claim_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c1", "c2"]);
    let invocations = stored["tool_invocations"].as_array().unwrap();
    for claim in claims {
        for e in claim["evidence"].as_array().unwrap() {
            let inv = invocations
                .iter()
                .find(|i| i["invocation_id"] == e["invocation_id"])
                .unwrap_or_else(|| panic!("evidence of an unknown invocation: {e}"));
            assert_eq!(inv["tool_name"], e["tool_name"]);
            let at = inv["output"]
                .pointer(e["json_pointer"].as_str().unwrap())
                .unwrap_or_else(|| panic!("the pointer names nothing in the output: {e}"));
            let quote = e["quote"].as_str().unwrap();
            assert!(!quote.is_empty());
            assert!(
                at.as_str().is_some_and(|s| s.contains(quote)),
                "{quote:?} is not in {at}"
            );
        }
    }
    run_id
}

/// Without a configuration the server still starts (an MCP client would otherwise show its
/// user only "Connection closed"): the instructions say `diagnose` is unavailable and why,
/// `runs` works, and `diagnose` is a tool error naming the configuration to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_configuration_the_server_starts_and_diagnose_says_what_is_missing() {
    let env = TestEnv::new();
    let session = Session::start_with(&env, &["mcp"]).await;
    let info = session
        .client
        .peer_info()
        .expect("the server's initialize answer");
    let instructions = info.instructions.clone().unwrap_or_default();
    assert!(
        instructions.contains("`diagnose` is unavailable") && instructions.contains("--config"),
        "{instructions}"
    );
    let runs = session.call("runs", obj(json!({}))).await.expect("runs");
    assert_ne!(runs.is_error, Some(true));
    assert_eq!(runs.structured_content.unwrap()["runs"], json!([]));
    let diagnose = session
        .call(
            "diagnose",
            obj(json!({"question": "why does checkout fail?"})),
        )
        .await
        .expect("a tool result, not a protocol error");
    assert_eq!(diagnose.is_error, Some(true));
    let text = serde_json::to_string(&diagnose.content).unwrap();
    assert!(
        text.contains("no model endpoint is configured") && text.contains("--config FILE"),
        "{text}"
    );
    let (code, stderr) = session.close().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.starts_with("diag: warning: diagnose is unavailable"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stored_runs(&env).is_empty(),
        "nothing was diagnosed, nothing stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_the_four_tools_and_says_what_an_answer_holds() {
    // No model is called: the endpoint is never reached.
    let env = env_for("http://127.0.0.1:9/v1");
    let session = Session::start(&env).await;
    let tools = within("tools/list", session.client.list_all_tools())
        .await
        .expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["diagnose", "trace", "runs", "report"]);
    let diagnose = &tools[0];
    let description = diagnose.description.as_deref().unwrap();
    for phrase in [
        "only verified claims",
        "Fallback",
        "not a diagnosis",
        "run_id",
    ] {
        assert!(description.contains(phrase), "{phrase}: {description}");
    }
    assert_eq!(
        diagnose.input_schema.get("required"),
        Some(&json!(["question"]))
    );
    // The output schema offered is the documented one.
    let documented: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_file("docs/schema/mcp-diagnose.v1.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        Value::Object(diagnose.output_schema.as_deref().unwrap().clone()),
        documented
    );
    for t in &tools[1..] {
        assert_eq!(
            t.annotations.as_ref().and_then(|a| a.read_only_hint),
            Some(true),
            "{}",
            t.name
        );
    }
    let (code, stderr) = session.close().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr, "");
    // Listing tools stored nothing (the store is created, empty).
    assert!(stored_runs(&env).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diagnosis_sends_progress_node_by_node_and_returns_a_stored_verified_run() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let env = env_for(&server.base_url());
    let mut session = Session::start(&env).await;

    let handle = session
        .send_call("diagnose", json!({"question": QUESTION}))
        .await;
    let token = handle.progress_token.clone();
    let result = result_of(handle, "the diagnosis").await;
    let run_id = check_verified_result(&env, &result);

    // Two notifications per node (started, ended), all sent before the result; the client
    // may hand them over in any order, so they are put in the order of `progress`.
    let mut progress = Vec::new();
    within("12 progress notifications", async {
        while progress.len() < 12 {
            let p = session.progress.recv().await.unwrap();
            assert_eq!(p.progress_token, token);
            progress.push(p);
        }
    })
    .await;
    progress.sort_by(|a, b| a.progress.total_cmp(&b.progress));
    let values: Vec<f64> = progress.iter().map(|p| p.progress).collect();
    assert_eq!(values, (1..=12).map(f64::from).collect::<Vec<_>>());
    let messages: Vec<String> = progress
        .iter()
        .map(|p| p.message.clone().unwrap())
        .collect();
    for (i, node) in PASS_PATH.iter().enumerate() {
        assert_eq!(
            messages[2 * i],
            format!("{node} started (round 1, attempt 1)"),
            "{messages:#?}"
        );
        assert!(
            messages[2 * i + 1].starts_with(&format!("{node} ")),
            "{messages:#?}"
        );
    }
    assert!(
        messages[11].starts_with("composer COMPLETED in "),
        "{messages:#?}"
    );

    // The other tools read the same run as the command line does.
    let traced = session
        .call("trace", obj(json!({"run_id": run_id})))
        .await
        .expect("trace");
    assert_eq!(traced.structured_content, Some(trace(&env, &run_id)));
    let runs = session.call("runs", JsonObject::new()).await.expect("runs");
    let listed = env.run(&["runs", "--json"]);
    listed.expect(0);
    assert_eq!(runs.structured_content, Some(listed.json()));
    let report = session
        .call("report", obj(json!({"run_id": run_id})))
        .await
        .expect("report");
    let report_text = &report.content[0].as_text().unwrap().text;
    let md = env.run(&["report", &run_id, "--format", "md"]);
    md.expect(0);
    assert_eq!(report_text, &md.stdout);

    let (code, stderr) = session.close().await;
    assert_eq!(code, Some(0), "{stderr}");
    // stdout carried only the MCP session, and nothing was said on stderr.
    assert_eq!(stderr, "");
    assert_eq!(stored_runs(&env), [(run_id, "SUCCESS".to_string())]);
}

/// Polls `diag runs` until the only stored run has finished (bounded); returns its id and
/// status.
fn wait_finished(env: &TestEnv) -> (String, String) {
    let deadline = Instant::now() + WAIT;
    loop {
        let runs = stored_runs(env);
        if let [(id, status)] = runs.as_slice() {
            if status != "RUNNING" {
                return (id.clone(), status.clone());
            }
        }
        assert!(
            Instant::now() < deadline,
            "the run did not finish: {runs:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_diagnosis_is_stored_failed_interrupted_with_its_partial_trace() {
    // The Verifier's answer takes 30 s (aimock's longest latency): the run waits there when the
    // client cancels.
    let server = Aimock::start_with("graph_stalled_verifier.json", Some(KEY));
    let env = env_for(&server.base_url());
    let mut session = Session::start(&env).await;

    let handle = session
        .send_call("diagnose", json!({"question": QUESTION}))
        .await;
    let token = handle.progress_token.clone();
    session.wait_progress(&token, "verifier started").await;
    within(
        "the cancellation to be sent",
        handle.cancel(Some("test".into())),
    )
    .await
    .expect("notifications/cancelled is sent");

    let (run_id, status) = tokio::task::block_in_place(|| wait_finished(&env));
    assert_eq!(status, "FAILED");
    let doc = trace(&env, &run_id);
    assert_eq!(doc["run"]["failure"], "interrupted");
    assert_eq!(doc["run"]["answer"], Value::Null);
    assert_eq!(doc["evaluation"], Value::Null);
    // Planner, Executor, Gatekeeper and Verified Input finished; the Verifier was cut.
    assert_eq!(nodes(&doc), PASS_PATH[..4]);
    // The plan's two steps ran before the Executor's one turn, which started from them.
    assert_eq!(doc["tool_invocations"].as_array().unwrap().len(), 2);
    assert_eq!(doc["agent_steps"].as_array().unwrap().len(), 2);

    // The session goes on: the server lists the interrupted run.
    let runs = session.call("runs", JsonObject::new()).await.expect("runs");
    let runs = runs.structured_content.unwrap();
    assert_eq!(runs["runs"][0]["run_id"], run_id.as_str());
    assert_eq!(runs["runs"][0]["status"], "FAILED");
    let (code, stderr) = session.close().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr, "");
}

/// The MCP error a request got; fails the test on a result.
fn mcp_error(what: &str, r: Result<CallToolResult, ServiceError>) -> rmcp::ErrorData {
    match r {
        Err(ServiceError::McpError(e)) => e,
        other => panic!("{what}: expected an MCP error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_arguments_unknown_tools_and_unknown_runs_are_mcp_errors_and_write_nothing() {
    // A model endpoint nobody listens on: a request that reached a run would fail there.
    let env = env_for("http://127.0.0.1:9/v1");
    let session = Session::start(&env).await;
    let unknown_run = "run-00000000000000000000";
    let cases: Vec<(&str, Value, &str)> = vec![
        ("explode", json!({}), "unknown tool `explode`"),
        ("diagnose", json!({}), "missing field `question`"),
        ("diagnose", json!({"question": 42}), "invalid type"),
        (
            "diagnose",
            json!({"question": "  \n "}),
            "the question is empty",
        ),
        (
            "diagnose",
            json!({"question": QUESTION, "model": "gpt"}),
            "unknown field `model`",
        ),
        (
            "diagnose",
            json!({"question": QUESTION, "session": " "}),
            "session id must be non-blank printable text",
        ),
        ("trace", json!({"run_id": unknown_run}), "unknown run"),
        ("report", json!({"run_id": unknown_run}), "unknown run"),
        ("trace", json!({}), "missing field `run_id`"),
        ("runs", json!({"limit": 0}), "limit must be from 1"),
        ("runs", json!({"status": "DONE"}), "unknown status"),
    ];
    for (tool, args, expected) in cases {
        let what = format!("{tool} {args}");
        let e = mcp_error(&what, session.call(tool, obj(args)).await);
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{what}: {e:?}");
        assert!(e.message.contains(expected), "{what}: {}", e.message);
    }
    // What to do about an unknown run comes as data, next to the message.
    let e = mcp_error(
        "trace of an unknown run",
        session
            .call("trace", obj(json!({"run_id": unknown_run})))
            .await,
    );
    assert_eq!(
        e.data,
        Some(json!({"hints": ["diag runs lists the stored runs"]}))
    );
    assert!(!e.message.contains("diag runs"), "{}", e.message);
    // The session survived every one of them.
    let runs = session.call("runs", JsonObject::new()).await.expect("runs");
    assert_eq!(runs.structured_content.unwrap()["runs"], json!([]));
    let (code, stderr) = session.close().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr, "");
    // Nothing was written for them: no run, no trace row of any kind.
    let counts: Vec<i64> = {
        let conn = rusqlite::Connection::open(env.db()).unwrap();
        [
            "diagnosis_run",
            "orchestration_event",
            "agent_step",
            "tool_invocation",
            "model_exchange",
            "evaluation",
        ]
        .iter()
        .map(|t| {
            conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .unwrap()
        })
        .collect()
    };
    assert_eq!(counts, [0; 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_diagnoses_are_two_complete_runs_with_their_own_progress() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let env = env_for(&server.base_url());
    let mut session = Session::start(&env).await;

    // Both requests are out before either is answered.
    let first = session
        .send_call(
            "diagnose",
            json!({"question": QUESTION, "session": "ses-a"}),
        )
        .await;
    let second = session
        .send_call(
            "diagnose",
            json!({"question": QUESTION, "session": "ses-b"}),
        )
        .await;
    let tokens = [first.progress_token.clone(), second.progress_token.clone()];
    assert_ne!(tokens[0], tokens[1]);
    let (a, b) = tokio::join!(
        result_of(first, "the first diagnosis"),
        result_of(second, "the second diagnosis")
    );
    let (a, b) = tokio::task::block_in_place(|| {
        (
            check_verified_result(&env, &a),
            check_verified_result(&env, &b),
        )
    });
    assert_ne!(a, b);
    let sessions: Vec<String> = [&a, &b]
        .iter()
        .map(|r| {
            trace(&env, r)["run"]["session_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(sessions, ["ses-a", "ses-b"]);

    // Each request got its own twelve notifications.
    let mut counts = [0; 2];
    within("24 progress notifications", async {
        while counts.iter().sum::<usize>() < 24 {
            let p = session.progress.recv().await.unwrap();
            let i = tokens
                .iter()
                .position(|t| *t == p.progress_token)
                .expect("a known token");
            counts[i] += 1;
        }
    })
    .await;
    assert_eq!(counts, [12, 12]);

    let (code, stderr) = session.close().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr, "");
    let mut runs = stored_runs(&env);
    runs.sort();
    let mut expected = vec![(a, "SUCCESS".to_string()), (b, "SUCCESS".to_string())];
    expected.sort();
    assert_eq!(runs, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_answer_comes_back_as_a_fallback_never_as_a_verified_diagnosis() {
    // Nobody listens at the model endpoint: the Planner cannot be asked, a Fallback answers.
    let env = env_for("http://127.0.0.1:9/v1");
    let session = Session::start(&env).await;
    let result = session
        .call("diagnose", obj(json!({"question": QUESTION})))
        .await
        .expect("a tool result");
    // The run succeeded (a Fallback is a handled answer), but nothing in it says verified.
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let doc = result.structured_content.expect("structured content");
    assert_schema("mcp-diagnose.v1.json", &doc);
    assert_eq!(doc["status"], "SUCCESS");
    assert_eq!(doc["verified"], false);
    assert_eq!(doc["degraded"], true);
    assert_eq!(doc["fallback_kind"], "pre_verification");
    assert_eq!(doc["effective_verdict"], Value::Null);
    assert_eq!(doc["claims"], json!([]));
    assert!(
        doc["model_error"]
            .as_str()
            .is_some_and(|m| m.starts_with("planner (")),
        "{doc}"
    );
    let run_id = doc["run_id"].as_str().unwrap();
    let stored = tokio::task::block_in_place(|| trace(&env, run_id));
    assert_eq!(stored["run"]["answer"], doc["answer"]);
    assert_eq!(stored["run"]["degraded"], true);
    assert_eq!(nodes(&stored).last().map(String::as_str), Some("fallback"));
    let (code, stderr) = session.close().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_the_server_and_stores_the_running_diagnosis_failed_interrupted() {
    let server = Aimock::start_with("graph_stalled_verifier.json", Some(KEY));
    let env = env_for(&server.base_url());
    let mut session = Session::start(&env).await;
    let handle = session
        .send_call("diagnose", json!({"question": QUESTION}))
        .await;
    let token = handle.progress_token.clone();
    session.wait_progress(&token, "verifier started").await;

    let pid = i32::try_from(session.child.id().unwrap()).unwrap();
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = within("diag mcp to exit after SIGINT", session.child.wait())
        .await
        .unwrap();
    let stderr = std::fs::read_to_string(&session.stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert_eq!(
        stderr,
        "diag: interrupted; runs in progress are stored as FAILED with their partial trace\n"
    );
    let runs = tokio::task::block_in_place(|| stored_runs(&env));
    let [(run_id, status)] = runs.as_slice() else {
        panic!("{runs:?}")
    };
    assert_eq!(status, "FAILED");
    // The request ends with the interrupted run when the answer made it out during the
    // SDK's grace period, or with the closed session; never with anything else.
    match within("the request to end", handle.await_response()).await {
        Ok(ServerResult::CallToolResult(r)) => {
            assert_eq!(r.is_error, Some(true), "{r:?}");
            let doc = r.structured_content.unwrap();
            assert_eq!(doc["status"], "FAILED");
            assert_eq!(doc["failure"], "interrupted");
            assert_eq!(doc["run_id"], run_id.as_str());
        }
        Ok(other) => panic!("not a tool result: {other:?}"),
        Err(e) => assert!(
            matches!(
                e,
                ServiceError::TransportClosed | ServiceError::Cancelled { .. }
            ),
            "{e:?}"
        ),
    }
    let doc = tokio::task::block_in_place(|| trace(&env, run_id));
    assert_eq!(doc["run"]["failure"], "interrupted");
    assert_eq!(nodes(&doc), PASS_PATH[..4]);
}
