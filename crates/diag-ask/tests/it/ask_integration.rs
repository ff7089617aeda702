//! Integration suite: the ask service (SPEC §3) end to end over the real run store in a
//! temporary file, the real diagnosis nodes and agent runtime over a scripted chat model and
//! fixed tool outputs. It checks what a caller and an operator reading the store can see —
//! the outcome, the run row, its trace, its self-evaluation and its evaluation — never the
//! internal call order of the agents beyond what the stored trace itself records.
//!
//! Scenarios (seed "Chat integration tests SHALL verify Run-owned public behavior"):
//! a safe answer completes (Composer and handled Fallback), an unsafe completion fails
//! (engine error, cancellation, blank answer, persistence failure), and several runs share
//! one session without sharing anything else.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use diag_ask::{
    ask, production_nodes, AskDeps, AskError, AskOptions, AskOutcome, AskRequest, NodeFactory,
};
use diag_core::agent::runtime::{AgentModels, ToolResult, ToolResultFuture, ToolRunner};
use diag_core::agent::AgentRole;
use diag_core::clock::{FixedClock, Timestamp};
use diag_core::graph::{
    Event, Node, NodeFuture, NodeKind, NoopObserver, Observer, RunConfig, Step,
};
use diag_core::ids::SequentialIds;
use diag_core::limits::Limits;
use diag_core::model::scripted::ScriptedModel;
use diag_core::model::{ChatResponse, FinishReason, ToolCall, Usage};
use diag_core::protocol::{InvocationStatus, PlannerMode, Verdict};
use diag_core::store::{RecordError, RunFilter, RunRow, RunStatus, Store, StoreErrorKind};
use diag_core::tools::ToolSpec;
use diag_diagnosis::nodes::real_nodes;
use diag_diagnosis::scripted::FnNode;
use diag_diagnosis::{
    AgentStatus, DiagnosisNodes, DiagnosisState, ExecutorStatus, FallbackKind, Status,
};
use diag_runfile::{Exchange, RecordedResponse};
use diag_store_sqlite::{SqliteError, SqliteStore, StoreOptions};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

const QUESTION: &str = "why does checkout-service return 502 since 14:00?";
const T0: Timestamp = Timestamp::from_unix_ms(1_790_000_000_000);

/// The log line the Executor's claim is bound to.
const LOG_LINE: &str = "2026-11-30T14:02:11Z ERROR checkout-service: upstream returned 502 \
                        from payment-service (timeout after 3000 ms)";
const QUOTE: &str = "upstream returned 502";
const ANSWER: &str = "Checkout 502s since 14:02 come from payment-service timeouts [c1].";

// Marker strings that must never reach the stored self-evaluation: raw Executor text that
// the Gatekeeper did not verify, the Planner's private output, and tool output no verified
// binding points at.
const UNREFERENCED_LOG_MARKER: &str = "UNREFERENCED-LOG-LINE-7f3a";
const METRICS_ERROR_MARKER: &str = "METRICS-ERROR-OUTPUT-91c2";
const HYPOTHESIS_MARKER: &str = "EXECUTOR-HYPOTHESIS-4be0";
const LIMITATION_MARKER: &str = "EXECUTOR-LIMITATION-d17e";
const NO_EVIDENCE_MARKER: &str = "EXECUTOR-NO-EVIDENCE-5a88";
const PLANNER_MARKER: &str = "PLANNER-HYPOTHESIS-0c3d";
const FAILED_CLAIM_MARKER: &str = "EXECUTOR-FAILED-CLAIM-e6f1";
const FORGED_CLAIM_MARKER: &str = "EXECUTOR-FORGED-CLAIM-22b9";

const ALL_MARKERS: [&str; 8] = [
    UNREFERENCED_LOG_MARKER,
    METRICS_ERROR_MARKER,
    HYPOTHESIS_MARKER,
    LIMITATION_MARKER,
    NO_EVIDENCE_MARKER,
    PLANNER_MARKER,
    FAILED_CLAIM_MARKER,
    FORGED_CLAIM_MARKER,
];

/// The node sequence of a straight Composer run.
const COMPOSER_PATH: [&str; 6] = [
    "planner",
    "executor",
    "gatekeeper",
    "verified_input",
    "verifier",
    "composer",
];

// ---------------------------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------------------------

fn search_logs_output() -> Value {
    json!({
        "matches": [
            {"file": "/var/log/checkout.log", "line_no": 412,
             "timestamp": "2026-11-30T14:02:11Z", "line": LOG_LINE},
            {"file": "/var/log/checkout.log", "line_no": 413,
             "timestamp": "2026-11-30T14:02:12Z",
             "line": format!("WARN pool stats {UNREFERENCED_LOG_MARKER}")}
        ],
        "truncated": false
    })
}

fn metrics_error_output() -> Value {
    json!({"error": format!("connection refused {METRICS_ERROR_MARKER}")})
}

#[derive(Clone)]
enum ToolMode {
    /// `search_logs` answers the fixed log matches; `query_metrics` fails with an error.
    Fixed,
    /// The first tool call cancels the token and then never finishes.
    CancelAndHang(CancellationToken),
}

/// Fixed tool outputs; no real data source is touched.
struct FixedTools {
    mode: ToolMode,
}

impl ToolRunner for FixedTools {
    fn catalog(&self) -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "search_logs".into(),
                description: "Search log files".into(),
                parameters: json!({"type": "object",
                                   "properties": {"query": {"type": "string"}}}),
            },
            ToolSpec {
                name: "query_metrics".into(),
                description: "Query Prometheus".into(),
                parameters: json!({"type": "object",
                                   "properties": {"query": {"type": "string"}}}),
            },
        ]
    }

    fn run<'a>(&'a self, name: &'a str, _arguments: &'a Value) -> ToolResultFuture<'a> {
        Box::pin(async move {
            if let ToolMode::CancelAndHang(token) = &self.mode {
                token.cancel();
                std::future::pending::<()>().await;
            }
            match name {
                "search_logs" => ToolResult {
                    status: InvocationStatus::Ok,
                    output: search_logs_output(),
                },
                "query_metrics" => ToolResult {
                    status: InvocationStatus::Error,
                    output: metrics_error_output(),
                },
                _ => ToolResult {
                    status: InvocationStatus::Blocked,
                    output: json!({"error": "unknown tool"}),
                },
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Scripted model replies (the four agents' JSON, in call order)
// ---------------------------------------------------------------------------------------------

fn usage(prompt_tokens: u64, completion_tokens: u64) -> Option<Usage> {
    Some(Usage {
        prompt_tokens,
        completion_tokens,
    })
}

fn text(model: &ScriptedModel, content: &str, tokens: (u64, u64)) {
    model.push(Ok(ChatResponse {
        content: Some(content.to_string()),
        tool_calls: Vec::new(),
        finish_reason: FinishReason::Stop,
        usage: usage(tokens.0, tokens.1),
        structured_output: None,
    }));
}

fn tool_turn(model: &ScriptedModel, calls: &[(&str, &str, Value)], tokens: (u64, u64)) {
    model.push(Ok(ChatResponse {
        content: None,
        tool_calls: calls
            .iter()
            .map(|(id, name, args)| ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: args.clone(),
            })
            .collect(),
        finish_reason: FinishReason::ToolCalls,
        usage: usage(tokens.0, tokens.1),
        structured_output: None,
    }));
}

fn plan_json() -> String {
    json!({
        "schema": "planner_plan_v1",
        "mode": "NORMAL",
        "hypotheses": [{"id": "h1", "statement": format!("pool exhausted {PLANNER_MARKER}")}],
        "steps": [
            {"id": "s1", "goal": "find 502s in checkout logs", "tool": "search_logs",
             "arguments": {"query": "502", "service": "checkout"}},
            {"id": "s2", "goal": "payment-service error rate", "tool": "query_metrics",
             "arguments": {"query": "rate(http_requests_total{code=\"502\"}[5m])"}}
        ]
    })
    .to_string()
}

/// A binding as the model writes it (hand-written JSON, not the product's serializer: this is
/// the contract's wire form), to `/matches/0/line` of a `search_logs` invocation.
fn binding_json(invocation: &str, quote: &str) -> Value {
    json!({"source_invocation_id": invocation, "tool_name": "search_logs",
           "raw_path": "/matches/0/line", "quote": quote})
}

/// An `executor_evidence_v2` snapshot with the given claims and every kind of unverified
/// material (hypothesis, no-evidence entry, limitation), each carrying a marker.
fn evidence_json(claims: Value) -> String {
    evidence_json_citing(claims, "inv-2")
}

/// An evidence document whose `no_evidence` entry names `query_ref`, a call of this run.
fn evidence_json_citing(claims: Value, query_ref: &str) -> String {
    json!({
        "schema": "executor_evidence_v2",
        "claims": claims,
        "hypotheses": [{"id": "h1", "text": format!("pool exhausted {HYPOTHESIS_MARKER}"),
                        "status": "unverified"}],
        "no_evidence": [{"query_ref": query_ref, "reason": format!("no data {NO_EVIDENCE_MARKER}")}],
        "limitations": [format!("metrics endpoint refused {LIMITATION_MARKER}")]
    })
    .to_string()
}

/// One claim bound to the 502 log line of `invocation`.
fn bound_claim(invocation: &str) -> Value {
    json!([{
        "claim_id": "c1",
        "text": "checkout-service logged upstream 502 from payment-service at 14:02",
        "bindings": [binding_json(invocation, QUOTE)]
    }])
}

fn verdict_json(verdict: &str, allowed: &[&str]) -> String {
    json!({
        "schema": "verifier_verdict_v1",
        "verdict": verdict,
        "groundedness": 0.92,
        "claim_checks": [{"claim_id": "c1", "supported": true}],
        "facts": [{"fact": "payment-service timeouts caused the 502s", "is_critical": true,
                   "verification": "supported", "claim_ids": ["c1"]}],
        "allowed_claims": allowed,
        "missing_information": ["payment-service connection-pool metrics"],
        "recommendations": ["raise payment-service pool size"],
        "rationale": "the checkout log shows the upstream 502 from payment-service"
    })
    .to_string()
}

fn composer_json(answer: &str) -> String {
    json!({"schema": "composer_answer_v1", "answer_markdown": answer, "cited_claims": ["c1"]})
        .to_string()
}

/// Token usage of the straight Composer path, call by call.
const PLANNER_TOKENS: (u64, u64) = (101, 11);
const EXECUTOR_TURN1_TOKENS: (u64, u64) = (202, 22);
const EXECUTOR_TURN2_TOKENS: (u64, u64) = (303, 33);
const VERIFIER_TOKENS: (u64, u64) = (404, 44);
const COMPOSER_TOKENS: (u64, u64) = (505, 55);

/// The tool calls of the straight path: `inv-1` search_logs (ok), `inv-2` query_metrics
/// (error).
fn default_calls() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "call_1",
            "search_logs",
            json!({"query": "502", "service": "checkout"}),
        ),
        (
            "call_2",
            "query_metrics",
            json!({"query": "rate(http_5xx[5m])"}),
        ),
    ]
}

/// Planner, Executor (tool turn, then evidence), as every real-node run starts.
fn script_until_evidence(model: &ScriptedModel, calls: &[(&str, &str, Value)], evidence: &str) {
    text(model, &plan_json(), PLANNER_TOKENS);
    tool_turn(model, calls, EXECUTOR_TURN1_TOKENS);
    text(model, evidence, EXECUTOR_TURN2_TOKENS);
}

/// The whole straight PASS path through the Composer.
fn script_composer_path(model: &ScriptedModel) {
    script_until_evidence(
        model,
        &default_calls(),
        &evidence_json(bound_claim("inv-1")),
    );
    text(model, &verdict_json("PASS", &["c1"]), VERIFIER_TOKENS);
    text(model, &composer_json(ANSWER), COMPOSER_TOKENS);
}

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

struct Rig {
    _dir: TempDir,
    path: PathBuf,
    store: Store,
    model: Arc<ScriptedModel>,
    deps: AskDeps,
}

fn store_options(busy_timeout: Duration) -> StoreOptions {
    StoreOptions {
        busy_timeout,
        clock: Arc::new(FixedClock(T0)),
        ..StoreOptions::default()
    }
}

fn rig() -> Rig {
    rig_with(Duration::from_secs(5))
}

fn rig_with(busy_timeout: Duration) -> Rig {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("runs.db");
    let store =
        diag_testkit::open_sqlite_with(&path, store_options(busy_timeout)).expect("open store");
    let model = Arc::new(ScriptedModel::new());
    let deps = AskDeps {
        nodes: production_nodes(),
        models: AgentModels::single(model.clone()),
        tools: Arc::new(FixedTools {
            mode: ToolMode::Fixed,
        }),
        limits: Limits::default(),
        record_limits: false,
        // These runs script the Executor model's own tool calls; plan steps have tests of
        // their own (`plan_steps`).
        run_plan_steps: false,
        composer: diag_core::protocol::ComposerContract::CURRENT,
        deadline: None,
        clock: Arc::new(FixedClock(T0)),
        ids: Arc::new(SequentialIds::default()),
        store: store.clone(),
        endpoints: Vec::new(),
        replay_of: None,
    };
    Rig {
        _dir: dir,
        path,
        store,
        model,
        deps,
    }
}

fn request(session_id: Option<&str>) -> AskRequest {
    AskRequest {
        question: QUESTION.into(),
        session_id: session_id.map(str::to_string),
        run_id: None,
    }
}

async fn ask_once(r: &Rig) -> AskOutcome {
    ask(&r.deps, request(None), AskOptions::new(&mut NoopObserver))
        .await
        .expect("ask returns an outcome")
}

/// The real nodes with some replaced by test doubles.
fn nodes_with(replace: impl Fn(&mut DiagnosisNodes) + Send + Sync + 'static) -> NodeFactory {
    Arc::new(move |deps| {
        let mut nodes = real_nodes(deps);
        replace(&mut nodes);
        nodes
    })
}

fn fn_node(
    step: impl Fn(&mut DiagnosisState, &RunConfig) -> Step<Status> + Send + Sync + 'static,
) -> Arc<FnNode> {
    FnNode::new(Box::new(step))
}

fn run_row(r: &Rig, run_id: &str) -> RunRow {
    r.store
        .get_run(run_id)
        .expect("read the run")
        .expect("the run is stored")
}

fn stored_nodes(r: &Rig, run_id: &str) -> Vec<String> {
    r.store
        .events(run_id)
        .expect("read events")
        .into_iter()
        .map(|e| e.node)
        .collect()
}

fn verifier_evaluation(row: &RunRow) -> &Value {
    let v = &row
        .self_evaluation
        .as_ref()
        .expect("the run has a self-evaluation")["verifier_evaluation"];
    assert!(v.is_object(), "verifier_evaluation is an object: {v}");
    v
}

fn sql(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).expect("a second connection to the store file")
}

fn count_evaluations(path: &Path) -> i64 {
    sql(path)
        .query_row("SELECT count(*) FROM evaluation", [], |r| r.get(0))
        .expect("count evaluations")
}

/// Whatever the run's trace, no marker of unverified material is in its self-evaluation.
fn assert_no_markers(row: &RunRow) {
    let text = serde_json::to_string(row.self_evaluation.as_ref().expect("self-evaluation"))
        .expect("serialize");
    for marker in ALL_MARKERS {
        assert!(
            !text.contains(marker),
            "self_evaluation leaks `{marker}`: {text}"
        );
    }
}

/// The common facts of a FAILED run: no answer, no evaluation, and a stored trace that is
/// exactly the nodes that really ran.
fn assert_failed_with_partial_trace(r: &Rig, outcome: &AskOutcome, ran: &[&str]) -> RunRow {
    assert_eq!(outcome.status(), RunStatus::Failed);
    assert_eq!(outcome.answer(), None);
    assert!(outcome.evaluation().is_none());
    let row = run_row(r, &outcome.run_id);
    assert_eq!(row.status, RunStatus::Failed);
    assert_eq!(row.failure.as_deref(), outcome.failure());
    assert_eq!(row.answer, None, "a FAILED run shows no answer");
    assert_eq!(stored_nodes(r, &outcome.run_id), ran);
    assert_eq!(row.path, ran, "the stored path is the real partial trace");
    assert_eq!(outcome.state.path(), ran);
    assert!(
        r.store.evaluation(&outcome.run_id).unwrap().is_none(),
        "a FAILED run is not evaluated"
    );
    assert_eq!(count_evaluations(&r.path), 0);
    row
}

/// An observer that cancels the run when a given node is about to start.
struct CancelAt {
    node: &'static str,
    token: CancellationToken,
}

impl Observer<Status> for CancelAt {
    fn node_started(&mut self, node: &str, _kind: NodeKind, _attempt: u32, _round: u32) {
        if node == self.node {
            self.token.cancel();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Safe answer completes: the Composer path
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn composer_answer_completes_as_success_with_counts_and_path() {
    let r = rig();
    script_composer_path(&r.model);
    let out = ask_once(&r).await;

    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    assert_eq!(out.failure(), None);
    assert!(!out.interrupted());
    assert_eq!(out.answer(), Some(ANSWER));
    assert_eq!(out.run_id, "run-0001");
    assert_eq!(out.session_id, "ses-0001");

    let row = run_row(&r, &out.run_id);
    assert_eq!(row.status, RunStatus::Success);
    assert_eq!(row.failure, None);
    assert_eq!(row.session_id, out.session_id);
    assert_eq!(row.question, QUESTION);
    assert_eq!(row.answer.as_deref(), Some(ANSWER));
    assert_eq!(row.started_at, T0);
    assert_eq!(row.finished_at, Some(T0));
    assert_eq!(row.duration_ms, Some(0), "a fixed clock measures zero");
    let all = [
        PLANNER_TOKENS,
        EXECUTOR_TURN1_TOKENS,
        EXECUTOR_TURN2_TOKENS,
        VERIFIER_TOKENS,
        COMPOSER_TOKENS,
    ];
    assert_eq!(row.prompt_tokens, all.iter().map(|t| t.0).sum::<u64>());
    assert_eq!(row.completion_tokens, all.iter().map(|t| t.1).sum::<u64>());
    assert_eq!(
        row.step_count, 5,
        "planner, executor ×2, verifier, composer"
    );
    assert_eq!(row.step_count, r.model.requests().len() as u64);
    assert_eq!(row.tool_count, 2);
    assert!(!row.degraded);
    assert_eq!(row.effective_verdict, Some(Verdict::Pass));
    assert_eq!(row.fallback_kind, None);
    assert_eq!(row.path, COMPOSER_PATH);
    let catalog = FixedTools {
        mode: ToolMode::Fixed,
    }
    .catalog();
    assert_eq!(row.tools, catalog, "the offered tool catalog is stored");

    // The orchestration trace: one event per executed node, in order.
    let events = r.store.events(&out.run_id).unwrap();
    assert!(!events.is_empty());
    let nodes: Vec<&str> = events.iter().map(|e| e.node.as_str()).collect();
    assert_eq!(nodes, COMPOSER_PATH);
    let seqs: Vec<u32> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
    let statuses: Vec<&str> = events.iter().map(|e| e.status.as_str()).collect();
    assert_eq!(
        statuses,
        [
            "COMPLETED",
            "COMPLETED",
            "PASS",
            "BUILT",
            "COMPLETED",
            "COMPLETED"
        ]
    );
    assert_eq!(out.state.path(), COMPOSER_PATH);

    // Steps and invocations, owned by this run.
    let steps = r.store.agent_steps(&out.run_id).unwrap();
    let agents: Vec<AgentRole> = steps.iter().map(|s| s.step.agent).collect();
    assert_eq!(
        agents,
        [
            AgentRole::Planner,
            AgentRole::Executor,
            AgentRole::Executor,
            AgentRole::Verifier,
            AgentRole::Composer
        ]
    );
    let invocations = r.store.invocations(&out.run_id).unwrap();
    let ids: Vec<&str> = invocations
        .iter()
        .map(|i| i.invocation_id.as_str())
        .collect();
    assert_eq!(ids, ["inv-1", "inv-2"]);
    assert!(invocations
        .iter()
        .all(|i| i.run_id == out.run_id && i.session_id == out.session_id));
    assert_eq!(invocations[0].output, search_logs_output());
    assert_eq!(invocations[1].status, InvocationStatus::Error);
}

#[tokio::test]
async fn composer_run_self_evaluation_has_every_verifier_field() {
    let r = rig();
    script_composer_path(&r.model);
    let out = ask_once(&r).await;
    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    let row = run_row(&r, &out.run_id);
    let v = verifier_evaluation(&row);

    assert_eq!(v["round"], 1);
    assert_eq!(v["planner_status"], "COMPLETED");
    assert_eq!(v["executor_status"], "COMPLETED");
    assert_eq!(v["gatekeeper_status"], "PASS");
    assert_eq!(v["ceiling"], "PASS");
    assert_eq!(v["verifier_status"], "COMPLETED");
    assert_eq!(v["model_verdict"], "PASS");
    assert_eq!(v["effective_verdict"], "PASS");
    assert_eq!(v["verdict"], v["effective_verdict"], "compatibility field");
    assert_eq!(v["groundedness"], 0.92);
    assert_eq!(
        v["claim_checks"],
        json!([{"claim_id": "c1", "supported": true}])
    );
    assert_eq!(
        v["fact_checks"][0]["fact"],
        "payment-service timeouts caused the 502s"
    );
    assert_eq!(v["fact_checks"][0]["is_critical"], true);
    assert_eq!(v["fact_checks"][0]["verification"], "supported");
    assert_eq!(
        v["rationale"],
        "the checkout log shows the upstream 502 from payment-service"
    );
    assert_eq!(
        v["gatekeeper_audit"],
        json!({"claims": 1, "bindings": 1, "passed": 1, "failed": 0, "unbound_claims": 0})
    );
    assert_eq!(
        v["verified_executor_output"]["claims"][0]["claim_id"], "c1",
        "the verified projection is kept"
    );
    let evidence = &v["verified_evidence"];
    assert_eq!(evidence.as_array().map(Vec::len), Some(1));
    assert_eq!(evidence[0]["source_invocation_id"], "inv-1");
    assert_eq!(evidence[0]["tool_name"], "search_logs");
    assert_eq!(evidence[0]["raw_path"], "/matches/0/line");
    assert!(
        evidence[0]["matched_text"]
            .as_str()
            .is_some_and(|t| t.contains(QUOTE)),
        "{evidence}"
    );
    assert_eq!(v["composer_audit"]["status"], "COMPLETED");
    assert_eq!(v["composer_audit"]["answer_chars"], ANSWER.chars().count());
    assert_eq!(v["degraded"], false);
    assert_eq!(v["fallback_kind"], Value::Null);
    assert_eq!(v["fallback_context"], Value::Null);

    // One prompt audit entry per model call, identical to the stored agent steps.
    let steps = r.store.agent_steps(&out.run_id).unwrap();
    let audit = v["prompt_audit"].as_array().expect("prompt_audit");
    assert_eq!(audit.len(), steps.len());
    for (entry, stored) in audit.iter().zip(&steps) {
        let s = &stored.step;
        assert_eq!(entry["agent"], s.agent.as_str());
        assert_eq!(entry["round"], s.round);
        assert_eq!(entry["attempt"], s.attempt);
        assert_eq!(entry["turn"], s.turn);
        assert_eq!(entry["prompt_id"], s.prompt.prompt_id.as_str());
        assert!(!s.prompt.prompt_id.is_empty());
        assert_eq!(entry["version"], s.prompt.version);
        let sha = entry["sha256"].as_str().expect("sha256");
        assert_eq!(sha, s.prompt.sha256);
        assert!(sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(entry["size"], s.prompt.size);
        assert!(s.prompt.size > 0);
    }
    let turns: Vec<(&str, u64)> = audit
        .iter()
        .map(|e| (e["agent"].as_str().unwrap(), e["turn"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        turns,
        [
            ("planner", 1),
            ("executor", 1),
            ("executor", 2),
            ("verifier", 1),
            ("composer", 1)
        ]
    );
}

#[tokio::test]
async fn self_evaluation_holds_no_raw_executor_text_or_unreferenced_tool_output() {
    let r = rig();
    script_composer_path(&r.model);
    let out = ask_once(&r).await;
    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());

    // The markers did reach the run: they are in the raw trace an operator may inspect...
    let invocations = serde_json::to_string(
        &r.store
            .invocations(&out.run_id)
            .unwrap()
            .iter()
            .map(|i| i.output.clone())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert!(invocations.contains(UNREFERENCED_LOG_MARKER));
    assert!(invocations.contains(METRICS_ERROR_MARKER));
    let executor = out
        .state
        .round
        .executor_output
        .as_ref()
        .expect("parsed executor output");
    assert!(executor.hypotheses[0].text.contains(HYPOTHESIS_MARKER));

    // ...but never in the self-evaluation, nor in the evaluation metrics.
    let row = run_row(&r, &out.run_id);
    assert_no_markers(&row);
    let v = verifier_evaluation(&row);
    for absent in [
        "executor_output",
        "hypotheses",
        "limitations",
        "no_evidence",
        "plan",
    ] {
        assert!(
            v.get(absent).is_none(),
            "verifier_evaluation has `{absent}`"
        );
    }
    let metrics = r
        .store
        .evaluation(&out.run_id)
        .unwrap()
        .expect("evaluation")
        .metrics;
    let metrics = metrics.to_string();
    for marker in ALL_MARKERS {
        assert!(!metrics.contains(marker), "metrics leak `{marker}`");
    }
    // The orchestration events hold only bounded control data.
    for e in r.store.events(&out.run_id).unwrap() {
        let detail = serde_json::to_string(&e.detail).unwrap();
        for marker in ALL_MARKERS {
            assert!(!detail.contains(marker), "event detail leaks `{marker}`");
        }
        assert!(
            !detail.contains(QUOTE),
            "event detail holds claim text: {detail}"
        );
    }
}

#[tokio::test]
async fn success_is_evaluated_once_with_metrics_that_match_the_run() {
    let r = rig();
    script_composer_path(&r.model);
    let out = ask_once(&r).await;
    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    let row = run_row(&r, &out.run_id);

    assert_eq!(count_evaluations(&r.path), 1, "exactly one evaluation row");
    let stored = r
        .store
        .evaluation(&out.run_id)
        .unwrap()
        .expect("evaluation row");
    assert_eq!(stored.run_id, out.run_id);
    let m = stored.metrics;
    assert_eq!(
        m,
        serde_json::to_value(out.evaluation().expect("returned evaluation")).unwrap(),
        "the stored metrics are the returned evaluation"
    );
    assert_eq!(m["terminal_path"], "composer");
    assert_eq!(m["degraded"], false);
    assert_eq!(m["effective_verdict"], "PASS");
    assert_eq!(m["groundedness"], 0.92);
    assert_eq!(m["claims_verified"], 1);
    assert_eq!(m["claims_allowed"], 1);
    assert_eq!(m["allowed_share"], 1.0);
    assert_eq!(m["tool_calls"], row.tool_count);
    assert_eq!(
        m["tool_success_rate"], 0.5,
        "search_logs ok, query_metrics error"
    );
    assert_eq!(m["model_calls"], row.step_count);
    assert_eq!(m["prompt_tokens"], row.prompt_tokens);
    assert_eq!(m["completion_tokens"], row.completion_tokens);
    assert_eq!(m["node_executions"], row.path.len());
    assert_eq!(Some(m["latency_ms"].as_u64().unwrap()), row.duration_ms);
}

/// A run clock that moves 10 ms every time it is read for a duration.
struct TickingClock {
    ms: std::sync::atomic::AtomicU64,
}

impl diag_core::clock::Clock for TickingClock {
    fn now(&self) -> Timestamp {
        let ms = self.ms.load(std::sync::atomic::Ordering::SeqCst);
        Timestamp::from_unix_ms(1_790_000_000_000 + i64::try_from(ms).unwrap())
    }

    fn elapsed(&self) -> Duration {
        let ms = self.ms.fetch_add(10, std::sync::atomic::Ordering::SeqCst) + 10;
        Duration::from_millis(ms)
    }
}

#[tokio::test]
async fn durations_come_from_the_run_clock_and_agree_everywhere() {
    let mut r = rig();
    r.deps.clock = Arc::new(TickingClock {
        ms: std::sync::atomic::AtomicU64::new(0),
    });
    script_composer_path(&r.model);
    let out = ask_once(&r).await;
    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    let row = run_row(&r, &out.run_id);
    let duration = row.duration_ms.expect("a finished run has a duration");
    assert!(duration > 0 && duration.is_multiple_of(10), "{duration}");
    let metrics = r.store.evaluation(&out.run_id).unwrap().unwrap().metrics;
    assert_eq!(metrics["latency_ms"].as_u64(), Some(duration));
    // Every node ran inside the run, so their durations add up to no more than it.
    let events = r.store.events(&out.run_id).unwrap();
    let nodes: u64 = events.iter().map(|e| e.duration_ms).sum();
    assert!(nodes > 0 && nodes <= duration, "{nodes} of {duration}");
    let steps: u64 = r
        .store
        .agent_steps(&out.run_id)
        .unwrap()
        .iter()
        .map(|s| s.step.duration_ms)
        .sum();
    assert!(steps > 0 && steps <= nodes, "{steps} of {nodes}");
    let finished = row.finished_at.expect("finished_at");
    assert!(
        finished > row.started_at,
        "{finished} after {}",
        row.started_at
    );
}

#[tokio::test]
async fn gatekeeper_ceiling_caps_the_model_verdict_and_both_are_stored() {
    let r = rig();
    // c1 is bound to the log line; c2's quote is nowhere in the output: LOW_CONFID with one
    // passed binding, so the Verifier sees c1 only and its PASS is capped.
    let claims = json!([
        {"claim_id": "c1", "text": "checkout-service logged upstream 502",
         "bindings": [binding_json("inv-1", QUOTE)]},
        {"claim_id": "c2", "text": format!("payment-service database is down {FAILED_CLAIM_MARKER}"),
         "bindings": [binding_json("inv-1", "database is down")]}
    ]);
    script_until_evidence(&r.model, &default_calls(), &evidence_json(claims));
    text(&r.model, &verdict_json("PASS", &["c1"]), VERIFIER_TOKENS);
    text(&r.model, &composer_json(ANSWER), COMPOSER_TOKENS);
    let out = ask_once(&r).await;

    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    let row = run_row(&r, &out.run_id);
    assert_eq!(
        row.path, COMPOSER_PATH,
        "a ceiling-driven LOW_CONFID is not retried"
    );
    assert_eq!(row.effective_verdict, Some(Verdict::LowConfid));
    assert!(!row.degraded);
    let v = verifier_evaluation(&row);
    assert_eq!(v["gatekeeper_status"], "LOW_CONFID");
    assert_eq!(v["ceiling"], "LOW_CONFID");
    assert_eq!(v["verifier_status"], "COMPLETED");
    assert_eq!(v["model_verdict"], "PASS");
    assert_eq!(v["effective_verdict"], "LOW_CONFID");
    assert_eq!(v["verdict"], "LOW_CONFID");
    assert_eq!(v["gatekeeper_audit"]["passed"], 1);
    assert_eq!(v["gatekeeper_audit"]["failed"], 1);
    let verified: Vec<&str> = v["verified_executor_output"]["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["claim_id"].as_str().unwrap())
        .collect();
    assert_eq!(verified, ["c1"], "the failed claim is not projected");
    assert_no_markers(&row);
    let m = r.store.evaluation(&out.run_id).unwrap().unwrap().metrics;
    assert_eq!(m["effective_verdict"], "LOW_CONFID");
}

// ---------------------------------------------------------------------------------------------
// Safe answer completes: handled Fallback
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn forged_binding_rejected_by_gatekeeper_is_a_handled_fallback_success() {
    let r = rig();
    // The quote is nowhere in the recorded output: the Gatekeeper rejects the only claim.
    let claims = json!([{
        "claim_id": "c1",
        "text": format!("payment-service database is down {FORGED_CLAIM_MARKER}"),
        "bindings": [binding_json("inv-1", "database is down")]
    }]);
    script_until_evidence(&r.model, &default_calls(), &evidence_json(claims));
    let out = ask_once(&r).await;

    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    let answer = out.answer().map(str::to_string).expect("a fallback answer");
    assert!(!answer.trim().is_empty());
    for marker in ALL_MARKERS {
        assert!(
            !answer.contains(marker),
            "the fallback answer shows `{marker}`"
        );
    }
    assert!(
        !answer.contains("database is down"),
        "no Executor claim is shown"
    );
    assert!(
        answer.contains("search_logs"),
        "the consulted tools are named: {answer}"
    );

    let row = run_row(&r, &out.run_id);
    assert_eq!(row.status, RunStatus::Success);
    assert_eq!(row.answer.as_deref(), Some(answer.as_str()));
    assert!(row.degraded);
    assert_eq!(row.fallback_kind, Some(FallbackKind::PreVerification));
    assert_eq!(row.effective_verdict, None, "no verdict is invented");
    assert_eq!(row.path, ["planner", "executor", "gatekeeper", "fallback"]);
    assert_eq!(stored_nodes(&r, &out.run_id), row.path);
    assert_eq!(row.step_count, 3);
    assert_eq!(row.tool_count, 2);

    let v = verifier_evaluation(&row);
    assert_eq!(v["planner_status"], "COMPLETED");
    assert_eq!(v["executor_status"], "COMPLETED");
    assert_eq!(v["gatekeeper_status"], "REJECT");
    assert_eq!(
        v["gatekeeper_audit"],
        json!({"claims": 1, "bindings": 1, "passed": 0, "failed": 1, "unbound_claims": 0})
    );
    for field in [
        "verifier_status",
        "model_verdict",
        "effective_verdict",
        "verdict",
        "groundedness",
        "rationale",
        "verified_executor_output",
    ] {
        assert_eq!(v[field], Value::Null, "`{field}` is not invented");
    }
    assert_eq!(v["claim_checks"], json!([]));
    assert_eq!(v["fact_checks"], json!([]));
    assert_eq!(v["verified_evidence"], json!([]));
    assert_eq!(v["prompt_audit"].as_array().map(Vec::len), Some(3));
    assert_eq!(v["degraded"], true);
    assert_eq!(v["fallback_kind"], "pre_verification");
    assert_eq!(
        v["fallback_context"],
        json!({"stage": "gatekeeper", "status": "REJECT"})
    );
    assert_no_markers(&row);

    assert_eq!(count_evaluations(&r.path), 1);
    let m = r.store.evaluation(&out.run_id).unwrap().unwrap().metrics;
    assert_eq!(m["terminal_path"], "fallback_pre_verification");
    assert_eq!(m["degraded"], true);
    assert_eq!(m["effective_verdict"], Value::Null);
    assert_eq!(m["groundedness"], Value::Null);
    assert_eq!(m["model_calls"], 3);

    // Quality lives in `degraded` and the verdicts: there is no DEGRADED run status.
    let statuses: Vec<String> = {
        let conn = sql(&r.path);
        let mut stmt = conn
            .prepare("SELECT DISTINCT status FROM diagnosis_run")
            .unwrap();
        let rows = stmt.query_map([], |r| r.get(0)).unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert_eq!(statuses, ["SUCCESS"]);
    assert!("DEGRADED".parse::<RunStatus>().is_err());
}

#[tokio::test]
async fn legal_no_evidence_result_reaches_the_gatekeeper_and_falls_back() {
    let r = rig();
    // Zero claims with no-evidence entries and limitations: a legal, COMPLETED result.
    script_until_evidence(&r.model, &default_calls(), &evidence_json(json!([])));
    let out = ask_once(&r).await;

    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    let row = run_row(&r, &out.run_id);
    assert_eq!(row.path, ["planner", "executor", "gatekeeper", "fallback"]);
    assert!(row.degraded);
    assert_eq!(row.fallback_kind, Some(FallbackKind::PreVerification));
    assert_eq!(row.effective_verdict, None);
    let v = verifier_evaluation(&row);
    assert_eq!(v["executor_status"], "COMPLETED");
    assert_eq!(v["gatekeeper_status"], "LOW_CONFID");
    assert_eq!(
        v["gatekeeper_audit"],
        json!({"claims": 0, "bindings": 0, "passed": 0, "failed": 0, "unbound_claims": 0})
    );
    assert_eq!(
        v["fallback_context"],
        json!({"stage": "gatekeeper", "status": "LOW_CONFID"})
    );
    assert_eq!(v["verdict"], Value::Null);
    assert_no_markers(&row);
    let answer = row.answer.unwrap();
    for marker in ALL_MARKERS {
        assert!(
            !answer.contains(marker),
            "the fallback answer shows `{marker}`"
        );
    }
    assert_eq!(count_evaluations(&r.path), 1);
}

#[tokio::test]
async fn verifier_reject_ends_in_a_post_verification_fallback_success() {
    let r = rig();
    script_until_evidence(
        &r.model,
        &default_calls(),
        &evidence_json(bound_claim("inv-1")),
    );
    text(&r.model, &verdict_json("REJECT", &["c1"]), VERIFIER_TOKENS);
    let out = ask_once(&r).await;

    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    let row = run_row(&r, &out.run_id);
    assert_eq!(
        row.path,
        [
            "planner",
            "executor",
            "gatekeeper",
            "verified_input",
            "verifier",
            "fallback"
        ]
    );
    assert!(row.degraded);
    assert_eq!(row.fallback_kind, Some(FallbackKind::PostVerification));
    assert_eq!(row.effective_verdict, Some(Verdict::Reject));
    assert!(row
        .answer
        .as_deref()
        .is_some_and(|a| a.contains("REJECTED")));
    let v = verifier_evaluation(&row);
    assert_eq!(v["verifier_status"], "COMPLETED");
    assert_eq!(v["model_verdict"], "REJECT");
    assert_eq!(v["effective_verdict"], "REJECT");
    assert_eq!(v["verdict"], "REJECT");
    assert_eq!(v["groundedness"], 0.92);
    assert_eq!(v["composer_audit"]["status"], Value::Null);
    assert_eq!(
        v["fallback_context"],
        json!({"stage": "verifier", "status": "COMPLETED"})
    );
    assert_no_markers(&row);
    let m = r.store.evaluation(&out.run_id).unwrap().unwrap().metrics;
    assert_eq!(m["terminal_path"], "fallback_post_verification");
    assert_eq!(m["effective_verdict"], "REJECT");
}

#[tokio::test]
async fn verifier_invalid_output_twice_falls_back_without_a_verdict() {
    let r = rig();
    script_until_evidence(
        &r.model,
        &default_calls(),
        &evidence_json(bound_claim("inv-1")),
    );
    text(&r.model, "Sure! The verdict is PASS.", VERIFIER_TOKENS);
    text(&r.model, "Sure! The verdict is PASS.", VERIFIER_TOKENS);
    let out = ask_once(&r).await;

    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    let row = run_row(&r, &out.run_id);
    assert_eq!(
        row.path,
        [
            "planner",
            "executor",
            "gatekeeper",
            "verified_input",
            "verifier",
            "verifier",
            "fallback"
        ]
    );
    assert!(row.degraded);
    assert_eq!(row.fallback_kind, Some(FallbackKind::PreVerification));
    assert_eq!(row.effective_verdict, None);
    let v = verifier_evaluation(&row);
    assert_eq!(v["verifier_status"], "INVALID_OUTPUT");
    assert_eq!(v["model_verdict"], Value::Null);
    assert_eq!(v["effective_verdict"], Value::Null);
    assert_eq!(v["verdict"], Value::Null);
    assert_eq!(v["groundedness"], Value::Null);
    assert_eq!(v["gatekeeper_status"], "PASS");
    assert_eq!(
        v["fallback_context"],
        json!({"stage": "verifier", "status": "INVALID_OUTPUT"})
    );
    let attempts: Vec<(&str, u64)> = v["prompt_audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["agent"].as_str().unwrap(), e["attempt"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        attempts,
        [
            ("planner", 1),
            ("executor", 1),
            ("executor", 1),
            ("verifier", 1),
            ("verifier", 2)
        ]
    );
    // The pre-verification answer shows no Executor claim.
    let answer = row.answer.unwrap();
    assert!(!answer.contains("logged upstream 502"), "{answer}");
    assert_eq!(count_evaluations(&r.path), 1);
}

#[tokio::test]
async fn composer_answer_of_control_sequences_only_falls_back_after_verification() {
    let r = rig();
    script_until_evidence(
        &r.model,
        &default_calls(),
        &evidence_json(bound_claim("inv-1")),
    );
    text(&r.model, &verdict_json("PASS", &["c1"]), VERIFIER_TOKENS);
    // Non-blank to the parser, empty once rendered for a terminal.
    text(
        &r.model,
        &composer_json("\u{1b}[2J\u{1b}[H\u{7}"),
        COMPOSER_TOKENS,
    );
    let out = ask_once(&r).await;

    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    let answer = out.answer().map(str::to_string).unwrap();
    assert!(!answer.contains('\u{1b}'));
    assert!(
        answer.contains(QUOTE),
        "the verified material is shown: {answer}"
    );
    let row = run_row(&r, &out.run_id);
    assert_eq!(
        row.path,
        [
            "planner",
            "executor",
            "gatekeeper",
            "verified_input",
            "verifier",
            "composer",
            "fallback"
        ]
    );
    assert!(row.degraded);
    assert_eq!(row.fallback_kind, Some(FallbackKind::PostVerification));
    assert_eq!(row.effective_verdict, Some(Verdict::Pass));
    let v = verifier_evaluation(&row);
    assert_eq!(v["composer_audit"]["status"], "COMPLETED");
    assert_eq!(
        v["composer_audit"]["answer_chars"], 0,
        "the Composer wrote nothing displayable; the Fallback's answer is not its own"
    );
    assert_eq!(
        v["fallback_context"],
        json!({"stage": "composer", "status": "COMPLETED"})
    );
}

// ---------------------------------------------------------------------------------------------
// Unsafe completion fails
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn undeclared_node_outcome_fails_the_run_with_its_partial_trace() {
    let mut r = rig();
    r.deps.nodes = nodes_with(|n| {
        // The Verifier never declares PASS: an engine error, not a route.
        n.verifier = fn_node(|_, _| Step::new(Status::Pass));
    });
    script_until_evidence(
        &r.model,
        &default_calls(),
        &evidence_json(bound_claim("inv-1")),
    );
    let out = ask_once(&r).await;

    let ran = [
        "planner",
        "executor",
        "gatekeeper",
        "verified_input",
        "verifier",
    ];
    let row = assert_failed_with_partial_trace(&r, &out, &ran);
    let failure = out.failure().unwrap();
    assert!(failure.starts_with("engine: "), "{failure}");
    assert!(
        failure.contains("verifier") && failure.contains("PASS"),
        "{failure}"
    );
    assert!(!out.interrupted());
    assert_eq!(row.step_count, 3);
    assert_eq!(row.tool_count, 2);
    assert_eq!(row.duration_ms, Some(0));
    let events = r.store.events(&out.run_id).unwrap();
    assert_eq!(events.last().unwrap().status, "PASS");
    assert_no_markers(&row);
}

#[tokio::test]
async fn a_node_that_panics_fails_the_run_with_its_partial_trace() {
    let mut r = rig();
    r.deps.nodes = nodes_with(|n| {
        n.verifier = fn_node(|_, _| panic!("verifier fell over"));
    });
    script_until_evidence(
        &r.model,
        &default_calls(),
        &evidence_json(bound_claim("inv-1")),
    );
    let out = ask_once(&r).await;

    assert_eq!(out.status(), RunStatus::Failed);
    assert_eq!(out.answer(), None);
    let failure = out.failure().unwrap();
    assert_eq!(
        failure,
        "engine: a node panicked (verifier fell over); this is a bug in diag"
    );
    let row = run_row(&r, &out.run_id);
    assert_eq!(row.status, RunStatus::Failed, "never left RUNNING");
    assert_eq!(row.failure.as_deref(), Some(failure));
    assert_eq!(row.answer, None);
    // Everything before the panicking node is stored; nothing is invented after it.
    let ran = ["planner", "executor", "gatekeeper", "verified_input"];
    assert_eq!(stored_nodes(&r, &out.run_id), ran);
    assert_eq!(row.path, ran);
    assert!(r.store.evaluation(&out.run_id).unwrap().is_none());
    assert_eq!(row.step_count, 3);
    assert_eq!(row.tool_count, 2);
    assert_eq!(row.duration_ms, Some(0), "timed on the run clock");
    assert_eq!(
        row.self_evaluation, None,
        "the state went down with the panic: nothing is made up"
    );
}

#[tokio::test]
async fn endless_technical_retry_hits_the_step_limit_and_fails() {
    let mut r = rig();
    r.deps.nodes = nodes_with(|n| {
        // A Planner that keeps resetting its own retry counter would loop forever.
        n.planner = fn_node(|s, _| {
            s.round.retries.planner = 0;
            s.round.planner_status = Some(AgentStatus::RetryableFailed);
            Step::new(Status::RetryableFailed)
        });
    });
    let out = ask_once(&r).await;

    let ran = vec!["planner"; diag_diagnosis::STEP_LIMIT as usize];
    let row = assert_failed_with_partial_trace(&r, &out, &ran);
    let failure = out.failure().unwrap();
    assert!(failure.starts_with("engine: step limit of 18"), "{failure}");
    let attempts: Vec<u32> = r
        .store
        .events(&out.run_id)
        .unwrap()
        .iter()
        .map(|e| e.attempt)
        .collect();
    assert_eq!(attempts, (1..=18).collect::<Vec<u32>>());
    assert_eq!(row.step_count, 0, "no model was called");
    assert!(r.model.requests().is_empty());
}

#[tokio::test]
async fn blank_final_answer_fails_the_run_and_is_not_evaluated() {
    let mut r = rig();
    r.deps.nodes = nodes_with(|n| {
        // The Composer completes with whitespace (routed to the post-verification Fallback),
        // and a broken Fallback writes whitespace too, so the graph ends without an answer.
        n.composer = fn_node(|s, _| {
            s.final_answer = Some("   \n\t ".into());
            s.composer_status = Some(AgentStatus::Completed);
            Step::new(Status::Completed)
        });
        n.fallback = fn_node(|s, _| {
            s.final_answer = Some(" \n ".into());
            s.degraded = true;
            Step::new(Status::Answered)
        });
    });
    script_until_evidence(
        &r.model,
        &default_calls(),
        &evidence_json(bound_claim("inv-1")),
    );
    text(&r.model, &verdict_json("PASS", &["c1"]), VERIFIER_TOKENS);
    let out = ask_once(&r).await;

    let ran = [
        "planner",
        "executor",
        "gatekeeper",
        "verified_input",
        "verifier",
        "composer",
        "fallback",
    ];
    let row = assert_failed_with_partial_trace(&r, &out, &ran);
    assert!(
        out.failure().unwrap().starts_with("blank answer"),
        "{:?}",
        out.failure()
    );
    assert!(!out.interrupted());
    assert_eq!(row.step_count, 4);
}

#[tokio::test]
async fn cancellation_between_nodes_marks_the_run_interrupted() {
    let r = rig();
    script_composer_path(&r.model);
    let token = CancellationToken::new();
    let mut observer = CancelAt {
        node: "verifier",
        token: token.clone(),
    };
    let out = ask(
        &r.deps,
        request(None),
        AskOptions::new(&mut observer).cancel(Some(&token)),
    )
    .await
    .expect("ask returns an outcome");

    let ran = ["planner", "executor", "gatekeeper", "verified_input"];
    let row = assert_failed_with_partial_trace(&r, &out, &ran);
    assert_eq!(out.failure(), Some("interrupted"));
    assert!(out.interrupted());
    assert_eq!(row.failure.as_deref(), Some(diag_core::store::INTERRUPTED));
    assert_eq!(row.step_count, 3, "the Verifier was never called");
    assert_eq!(r.model.requests().len(), 3);
}

#[tokio::test]
async fn cancellation_during_a_tool_call_keeps_only_what_was_recorded() {
    let mut r = rig();
    let token = CancellationToken::new();
    r.deps.tools = Arc::new(FixedTools {
        mode: ToolMode::CancelAndHang(token.clone()),
    });
    script_composer_path(&r.model);
    let out = ask(
        &r.deps,
        request(None),
        AskOptions::new(&mut NoopObserver).cancel(Some(&token)),
    )
    .await
    .expect("ask returns an outcome");

    // The Executor never finished, so it has no terminal event; its first model call and
    // nothing after it was recorded.
    let row = assert_failed_with_partial_trace(&r, &out, &["planner"]);
    assert_eq!(out.failure(), Some("interrupted"));
    assert!(out.interrupted());
    assert_eq!(row.step_count, 2);
    assert_eq!(row.tool_count, 0);
    assert_eq!(r.store.exchanges(&out.run_id).unwrap().len(), 2);
    let v = verifier_evaluation(&row);
    assert_eq!(v["planner_status"], "COMPLETED");
    assert_eq!(v["executor_status"], Value::Null);
    assert_eq!(v["verdict"], Value::Null);
}

// ---------------------------------------------------------------------------------------------
// Multiple runs share one session
// ---------------------------------------------------------------------------------------------

/// Run 1 of a session: two search_logs calls (`inv-1`, `inv-2`) and a claim bound to `inv-2`,
/// which passes there.
fn script_session_run1(model: &ScriptedModel) {
    let calls = [
        ("call_1", "search_logs", json!({"query": "502"})),
        ("call_2", "search_logs", json!({"query": "upstream"})),
    ];
    script_until_evidence(model, &calls, &evidence_json(bound_claim("inv-2")));
    text(model, &verdict_json("PASS", &["c1"]), VERIFIER_TOKENS);
    text(model, &composer_json(ANSWER), COMPOSER_TOKENS);
}

/// Run 2: one search_logs call (`inv-1`) and the very same claim bound to `inv-2`, an id that
/// exists only in run 1 (its `no_evidence` entry names run 2's own `inv-1`).
fn script_session_run2(model: &ScriptedModel) {
    let calls = [("call_1", "search_logs", json!({"query": "502"}))];
    script_until_evidence(
        model,
        &calls,
        &evidence_json_citing(bound_claim("inv-2"), "inv-1"),
    );
}

#[tokio::test]
async fn two_runs_of_one_session_get_distinct_ids_and_own_their_traces() {
    let r = rig();
    script_session_run1(&r.model);
    let first = ask_once(&r).await;
    script_session_run2(&r.model);
    let second = ask(
        &r.deps,
        request(Some(&first.session_id)),
        AskOptions::new(&mut NoopObserver),
    )
    .await
    .expect("ask");

    assert_eq!(first.status(), RunStatus::Success, "{:?}", first.failure());
    assert_eq!(
        second.status(),
        RunStatus::Success,
        "{:?}",
        second.failure()
    );
    assert_eq!(second.session_id, first.session_id);
    assert_ne!(second.run_id, first.run_id);

    let listed = r
        .store
        .list_runs(&RunFilter {
            session_id: Some(first.session_id.clone()),
            ..RunFilter::default()
        })
        .unwrap();
    let ids: Vec<&str> = listed.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, [second.run_id.as_str(), first.run_id.as_str()]);

    let (one, two) = (run_row(&r, &first.run_id), run_row(&r, &second.run_id));
    assert_eq!(one.path, COMPOSER_PATH);
    assert_eq!(two.path, ["planner", "executor", "gatekeeper", "fallback"]);
    assert_eq!((one.step_count, two.step_count), (5, 3));
    assert_eq!((one.tool_count, two.tool_count), (2, 1));
    assert!(!one.degraded && two.degraded);

    for (run, row) in [(&first, &one), (&second, &two)] {
        assert_eq!(stored_nodes(&r, &run.run_id), row.path);
        let steps = r.store.agent_steps(&run.run_id).unwrap();
        assert_eq!(steps.len() as u64, row.step_count);
        assert_eq!(
            steps.iter().map(|s| s.step.prompt_tokens).sum::<u64>(),
            row.prompt_tokens
        );
        assert_eq!(
            r.store.exchanges(&run.run_id).unwrap().len() as u64,
            row.step_count
        );
        let invocations = r.store.invocations(&run.run_id).unwrap();
        assert_eq!(invocations.len() as u64, row.tool_count);
        assert!(invocations
            .iter()
            .all(|i| i.run_id == run.run_id && i.session_id == run.session_id));
        let evaluation = r
            .store
            .evaluation(&run.run_id)
            .unwrap()
            .expect("evaluation");
        assert_eq!(evaluation.run_id, run.run_id);
        assert_eq!(evaluation.metrics["model_calls"], row.step_count);
        assert_eq!(evaluation.metrics["tool_calls"], row.tool_count);
        assert_eq!(evaluation.metrics["node_executions"], row.path.len());
    }
    assert_eq!(count_evaluations(&r.path), 2, "one evaluation per run");
    let run2_ids: Vec<String> = r
        .store
        .invocations(&second.run_id)
        .unwrap()
        .into_iter()
        .map(|i| i.invocation_id)
        .collect();
    assert_eq!(run2_ids, ["inv-1"], "invocation ids are run-local");
}

#[tokio::test]
async fn gatekeeper_never_sees_another_runs_invocations() {
    let r = rig();
    script_session_run1(&r.model);
    let first = ask_once(&r).await;
    // In run 1 the binding to inv-2 passed.
    assert_eq!(
        first
            .state
            .round
            .gatekeeper_raw
            .as_ref()
            .unwrap()
            .audit
            .passed,
        1
    );
    assert!(r
        .store
        .invocations(&first.run_id)
        .unwrap()
        .iter()
        .any(|i| i.invocation_id == "inv-2"));

    script_session_run2(&r.model);
    let second = ask(
        &r.deps,
        request(Some(&first.session_id)),
        AskOptions::new(&mut NoopObserver),
    )
    .await
    .expect("ask");

    let raw = second
        .state
        .round
        .gatekeeper_raw
        .as_ref()
        .expect("gatekeeper ran");
    assert_eq!(raw.checked_bindings.len(), 1);
    let checked = &raw.checked_bindings[0];
    assert_eq!(checked.source_invocation_id, "inv-2");
    assert!(!checked.passed);
    assert_eq!(checked.failure.as_deref(), Some("unknown_invocation"));
    assert_eq!(checked.matched_text, None);
    assert_eq!(
        second.state.round.gatekeeper_status,
        Some(diag_core::protocol::GateStatus::Reject)
    );

    let row = run_row(&r, &second.run_id);
    assert_eq!(row.status, RunStatus::Success);
    assert!(row.degraded);
    assert_eq!(row.fallback_kind, Some(FallbackKind::PreVerification));
    let v = verifier_evaluation(&row);
    assert_eq!(v["gatekeeper_status"], "REJECT");
    assert_eq!(v["gatekeeper_audit"]["failed"], 1);
    assert_eq!(v["verdict"], Value::Null);
    // Run 1 is untouched by run 2.
    let one = run_row(&r, &first.run_id);
    assert_eq!(one.effective_verdict, Some(Verdict::Pass));
    assert_eq!(one.tool_count, 2);
}

// ---------------------------------------------------------------------------------------------
// Run identity and the initial state
// ---------------------------------------------------------------------------------------------

type Seen = Arc<Mutex<Vec<(String, RunConfig, DiagnosisState)>>>;

/// Wraps a node and records the config and state it receives.
struct Spy {
    name: &'static str,
    inner: Arc<dyn Node<DiagnosisState, Status>>,
    seen: Seen,
}

impl Node<DiagnosisState, Status> for Spy {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        self.seen
            .lock()
            .unwrap()
            .push((self.name.to_string(), config.clone(), state.clone()));
        self.inner.run(state, config)
    }
}

#[tokio::test]
async fn every_node_gets_the_runs_config_and_the_graph_starts_clean() {
    let mut r = rig();
    let seen: Seen = Arc::default();
    let spy_seen = seen.clone();
    r.deps.nodes = nodes_with(move |n| {
        let spy = |name, inner| -> Arc<dyn Node<DiagnosisState, Status>> {
            Arc::new(Spy {
                name,
                inner,
                seen: spy_seen.clone(),
            })
        };
        n.planner = spy("planner", n.planner.clone());
        n.executor = spy("executor", n.executor.clone());
        n.gatekeeper = spy("gatekeeper", n.gatekeeper.clone());
        n.verified_input = spy("verified_input", n.verified_input.clone());
        n.verifier = spy("verifier", n.verifier.clone());
        n.composer = spy("composer", n.composer.clone());
    });
    script_composer_path(&r.model);
    let out = ask(
        &r.deps,
        AskRequest {
            question: format!("  {QUESTION}\n"),
            session_id: Some("ses-operator".into()),
            run_id: Some("run-pinned".into()),
        },
        AskOptions::new(&mut NoopObserver),
    )
    .await
    .expect("ask");
    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    assert_eq!(out.run_id, "run-pinned");
    assert_eq!(out.session_id, "ses-operator");

    let seen = seen.lock().unwrap();
    let names: Vec<&str> = seen.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, COMPOSER_PATH);
    for (name, config, _) in seen.iter() {
        assert_eq!(config.thread_id, "run-pinned", "{name}");
        assert_eq!(config.run_id(), "run-pinned", "{name}");
        assert_eq!(config.session_id(), "ses-operator", "{name}");
    }
    // The Planner starts from the question only: NORMAL mode, zero counters, no events.
    let (_, _, initial) = &seen[0];
    assert_eq!(
        initial.context.question, QUESTION,
        "the question is trimmed"
    );
    assert_eq!(initial.context.original_question, QUESTION);
    assert_eq!(initial.planner_mode, PlannerMode::Normal);
    assert_eq!(initial.round_number, 1);
    assert_eq!(initial.evidence_retry_count, 0);
    assert_eq!(initial.round.retries, Default::default());
    assert!(initial.events.is_empty());
    assert!(initial.round.plan.is_none() && initial.round.executor_output.is_none());

    // Hooks and the tool recorder wrote under the same identity.
    let row = run_row(&r, "run-pinned");
    assert_eq!(row.session_id, "ses-operator");
    assert_eq!(row.question, QUESTION);
    assert_eq!(r.store.agent_steps("run-pinned").unwrap().len(), 5);
    assert!(r
        .store
        .invocations("run-pinned")
        .unwrap()
        .iter()
        .all(|i| i.session_id == "ses-operator" && i.agent == "executor"));
    assert_eq!(
        out.state.round.executor_status,
        Some(ExecutorStatus::Completed),
        "the real Executor ran"
    );
}

#[tokio::test]
async fn blank_question_is_refused_before_any_run_exists() {
    let r = rig();
    let err = ask(
        &r.deps,
        AskRequest {
            question: " \n\t ".into(),
            session_id: None,
            run_id: None,
        },
        AskOptions::new(&mut NoopObserver),
    )
    .await
    .expect_err("a blank question is refused");
    assert!(matches!(err, AskError::EmptyQuestion), "{err}");
    assert_eq!(r.store.count_runs().unwrap(), 0);
    assert!(r.model.requests().is_empty());
}

#[tokio::test]
async fn reused_run_id_is_refused_and_leaves_the_first_run_intact() {
    let r = rig();
    script_composer_path(&r.model);
    let pinned = || AskRequest {
        question: QUESTION.into(),
        session_id: None,
        run_id: Some("run-fixed".into()),
    };
    let first = ask(&r.deps, pinned(), AskOptions::new(&mut NoopObserver))
        .await
        .expect("ask");
    assert_eq!(first.status(), RunStatus::Success);
    script_composer_path(&r.model);
    let err = ask(&r.deps, pinned(), AskOptions::new(&mut NoopObserver))
        .await
        .expect_err("the run id is taken");
    assert!(
        matches!(err, AskError::Store(ref e) if matches!(e.downcast_ref::<SqliteError>(), Some(SqliteError::Record(RecordError::DuplicateRun(id))) if id == "run-fixed")),
        "{err}"
    );
    let row = run_row(&r, "run-fixed");
    assert_eq!(row.status, RunStatus::Success);
    assert_eq!(row.step_count, 5);
    assert_eq!(r.store.count_runs().unwrap(), 1);
    assert_eq!(count_evaluations(&r.path), 1);
}

// ---------------------------------------------------------------------------------------------
// Record
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn record_returns_every_exchange_in_order_matching_the_store() {
    let r = rig();
    script_composer_path(&r.model);
    let out = ask(
        &r.deps,
        request(None),
        AskOptions::new(&mut NoopObserver).recording(true),
    )
    .await
    .expect("ask");
    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    let recorded = out.recorded.as_ref().expect("exchanges were recorded");

    let kinds: Vec<String> = recorded
        .iter()
        .map(|x| match x {
            Exchange::Model(m) => format!("{}#{}", m.agent, m.turn),
            Exchange::Tool(t) => t.invocation_id.clone(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "planner#1",
            "executor#1",
            "inv-1",
            "inv-2",
            "executor#2",
            "verifier#1",
            "composer#1"
        ],
        "tool results are recorded before the model sees them"
    );

    let stored_models = r.store.exchanges(&out.run_id).unwrap();
    let models: Vec<_> = recorded
        .iter()
        .filter_map(|x| match x {
            Exchange::Model(m) => Some(m),
            Exchange::Tool(_) => None,
        })
        .collect();
    assert_eq!(models.len(), stored_models.len());
    for (m, s) in models.iter().zip(&stored_models) {
        let x = &s.exchange;
        assert_eq!(
            (m.agent, m.round, m.attempt, m.turn),
            (x.agent, x.round, x.attempt, x.turn)
        );
        assert_eq!(m.request_sha256.as_deref(), Some(s.request_sha256.as_str()));
        assert_eq!(
            m.request_sha256.as_deref(),
            Some(
                diag_core::hash::request_sha256(&x.request)
                    .unwrap()
                    .as_str()
            )
        );
        let response = x.outcome.as_ref().expect("every call answered");
        assert_eq!(
            m.response.as_ref(),
            Some(&RecordedResponse::from_response(response))
        );
        assert_eq!(m.error, None);
    }

    let stored_tools = r.store.invocations(&out.run_id).unwrap();
    let tools: Vec<_> = recorded
        .iter()
        .filter_map(|x| match x {
            Exchange::Tool(t) => Some(t),
            Exchange::Model(_) => None,
        })
        .collect();
    assert_eq!(tools.len(), stored_tools.len());
    for (t, s) in tools.iter().zip(&stored_tools) {
        assert_eq!(t.invocation_id, s.invocation_id);
        assert_eq!(t.tool_name, s.tool_name);
        assert_eq!(t.arguments, s.arguments);
        assert_eq!(t.output, s.output);
        assert_eq!(t.status, s.status);
    }
}

/// With the plan's steps on and a tool call the model wrote in its content, the recording, the
/// store's export and a replay all agree: the plan's calls come before the Executor's first
/// turn, marked, and the content call follows the turn that wrote it.
#[tokio::test]
async fn plan_steps_and_a_content_call_record_export_and_replay_alike() {
    let mut r = rig();
    r.deps.run_plan_steps = true;
    text(&r.model, &plan_json(), PLANNER_TOKENS);
    text(
        &r.model,
        "<tool_call>\n{\"name\": \"search_logs\", \"arguments\": {\"query\": \"pool\"}}\n</tool_call>",
        EXECUTOR_TURN1_TOKENS,
    );
    // `inv-1` is the plan's `search_logs` step.
    text(
        &r.model,
        &evidence_json(bound_claim("inv-1")),
        EXECUTOR_TURN2_TOKENS,
    );
    text(&r.model, &verdict_json("PASS", &["c1"]), VERIFIER_TOKENS);
    text(&r.model, &composer_json(ANSWER), COMPOSER_TOKENS);
    let out = ask(
        &r.deps,
        request(None),
        AskOptions::new(&mut NoopObserver).recording(true),
    )
    .await
    .expect("ask");
    assert_eq!(out.status(), RunStatus::Success, "{:?}", out.failure());
    let recorded = out.recorded.clone().expect("exchanges were recorded");
    let kinds: Vec<String> = recorded
        .iter()
        .map(|x| match x {
            Exchange::Model(m) => format!("{}#{}", m.agent, m.turn),
            Exchange::Tool(t) if t.plan_step => format!("{} plan", t.invocation_id),
            Exchange::Tool(t) => t.invocation_id.clone(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "planner#1",
            "inv-1 plan",
            "inv-2 plan",
            "executor#1",
            "inv-3",
            "executor#2",
            "verifier#1",
            "composer#1"
        ]
    );
    let stored = r.store.invocations(&out.run_id).unwrap();
    let agents: Vec<&str> = stored.iter().map(|i| i.agent.as_str()).collect();
    assert_eq!(agents, ["planner", "planner", "executor"]);
    assert_eq!(stored[2].arguments, json!({"query": "pool"}));

    // The store's export is the recording.
    let exported = diag_runfile::export::from_store(&r.store, &out.run_id).expect("export");
    assert_eq!(exported.exchanges, recorded);

    // A replay of the recording, into another store, reproduces the run.
    let file = diag_ask::replay::run_file_of(
        &out,
        QUESTION,
        T0,
        Limits::default(),
        r.deps.tools.catalog(),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let other = diag_testkit::open_sqlite_with(
        dir.path().join("replay.db"),
        store_options(Duration::from_secs(5)),
    )
    .expect("open store");
    let replayed = diag_ask::replay::replay(&file, &other, Arc::new(SequentialIds::default()))
        .await
        .expect("replay");
    assert_eq!(replayed.divergence, None);
    assert_eq!(Some(&replayed.actual), file.expected.as_ref());
    let again = diag_runfile::export::from_store(&other, &replayed.outcome.run_id).expect("export");
    assert_eq!(again.exchanges, recorded);
}

#[tokio::test]
async fn without_record_no_exchanges_are_returned_but_all_are_stored() {
    let r = rig();
    script_composer_path(&r.model);
    let out = ask_once(&r).await;
    assert!(out.recorded.is_none());
    assert_eq!(r.store.exchanges(&out.run_id).unwrap().len(), 5);
    assert_eq!(r.store.invocations(&out.run_id).unwrap().len(), 2);
}

#[tokio::test]
async fn record_of_a_failed_run_holds_only_what_happened() {
    let mut r = rig();
    let token = CancellationToken::new();
    r.deps.tools = Arc::new(FixedTools {
        mode: ToolMode::CancelAndHang(token.clone()),
    });
    script_composer_path(&r.model);
    let out = ask(
        &r.deps,
        request(None),
        AskOptions::new(&mut NoopObserver)
            .recording(true)
            .cancel(Some(&token)),
    )
    .await
    .expect("ask");
    assert_eq!(out.status(), RunStatus::Failed);
    let kinds: Vec<String> = out
        .recorded
        .as_ref()
        .expect("recorded")
        .iter()
        .map(|x| match x {
            Exchange::Model(m) => format!("{}#{}", m.agent, m.turn),
            Exchange::Tool(t) => t.invocation_id.clone(),
        })
        .collect();
    assert_eq!(kinds, ["planner#1", "executor#1"]);
}

// ---------------------------------------------------------------------------------------------
// Persistence failure
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn refused_success_write_marks_the_run_failed_not_success() {
    let r = rig();
    // The file refuses exactly the write that would make the run SUCCESS.
    sql(&r.path)
        .execute_batch(
            "CREATE TRIGGER refuse_success BEFORE UPDATE OF status ON diagnosis_run \
             WHEN NEW.status = 'SUCCESS' \
             BEGIN SELECT RAISE(ABORT, 'simulated storage failure'); END;",
        )
        .unwrap();
    script_composer_path(&r.model);
    let out = ask_once(&r).await;

    assert_eq!(out.status(), RunStatus::Failed);
    assert_eq!(out.answer(), None, "no successful result is reported");
    assert!(out.evaluation().is_none());
    let failure = out.failure().unwrap();
    assert!(
        failure.starts_with("persistence: the result could not be stored"),
        "{failure}"
    );
    let row = run_row(&r, &out.run_id);
    assert_eq!(
        row.status,
        RunStatus::Failed,
        "saved FAILED since it still could be"
    );
    assert_eq!(row.failure.as_deref(), Some(failure));
    assert_eq!(row.answer, None);
    assert_eq!(row.path, COMPOSER_PATH, "the trace that was recorded stays");
    // Like every other FAILED run, it keeps what the caller knew: its duration and the
    // self-evaluation built from the final state.
    assert_eq!(
        row.duration_ms,
        Some(0),
        "only an interrupted run has no duration"
    );
    assert_eq!(verifier_evaluation(&row)["effective_verdict"], "PASS");
    assert_no_markers(&row);
    assert_eq!(count_evaluations(&r.path), 0);
}

#[tokio::test]
async fn lost_trace_write_mid_run_fails_the_run() {
    let r = rig();
    // The Verifier's orchestration event cannot be stored.
    sql(&r.path)
        .execute_batch(
            "CREATE TRIGGER lose_event BEFORE INSERT ON orchestration_event \
             WHEN NEW.node = 'verifier' \
             BEGIN SELECT RAISE(ABORT, 'simulated storage failure'); END;",
        )
        .unwrap();
    script_composer_path(&r.model);
    let out = ask_once(&r).await;

    assert_eq!(out.status(), RunStatus::Failed);
    assert_eq!(out.answer(), None);
    let failure = out.failure().unwrap();
    assert!(
        failure.starts_with("persistence: the trace could not be stored"),
        "{failure}"
    );
    let row = run_row(&r, &out.run_id);
    assert_eq!(row.status, RunStatus::Failed);
    assert_eq!(row.answer, None);
    // Only what was really stored is the trace: the lost event is not invented.
    assert_eq!(
        row.path,
        [
            "planner",
            "executor",
            "gatekeeper",
            "verified_input",
            "composer"
        ]
    );
    assert_eq!(stored_nodes(&r, &out.run_id), row.path);
    assert_eq!(count_evaluations(&r.path), 0);
}

#[tokio::test]
async fn refused_evaluation_write_is_a_warning_beside_the_stored_answer() {
    let r = rig();
    sql(&r.path)
        .execute_batch(
            "CREATE TRIGGER refuse_evaluation BEFORE INSERT ON evaluation \
             BEGIN SELECT RAISE(ABORT, 'simulated storage failure'); END;",
        )
        .unwrap();
    script_composer_path(&r.model);
    let outcome = ask(&r.deps, request(None), AskOptions::new(&mut NoopObserver))
        .await
        .expect("the stored answer is not hidden by a failed evaluation write");
    assert_eq!(outcome.status(), RunStatus::Success);
    assert_eq!(outcome.answer(), Some(ANSWER));
    assert_eq!(outcome.warnings.len(), 1, "{:?}", outcome.warnings);
    assert!(
        outcome.warnings[0].contains("evaluation"),
        "{:?}",
        outcome.warnings
    );
    // The run itself was already stored SUCCESS with its answer before the evaluation step;
    // only the evaluation row is missing.
    let row = run_row(&r, "run-0001");
    assert_eq!(row.status, RunStatus::Success);
    assert_eq!(row.answer.as_deref(), Some(ANSWER));
    assert_eq!(count_evaluations(&r.path), 0);
}

/// Takes the store's write lock from another connection when a node is about to start, and
/// holds it until dropped.
struct LockAt {
    node: &'static str,
    path: PathBuf,
    held: Option<rusqlite::Connection>,
}

impl Observer<Status> for LockAt {
    fn node_started(&mut self, node: &str, _kind: NodeKind, _attempt: u32, _round: u32) {
        if node == self.node && self.held.is_none() {
            let conn = sql(&self.path);
            conn.execute_batch("BEGIN EXCLUSIVE")
                .expect("take the write lock");
            self.held = Some(conn);
        }
    }
    fn event(&mut self, _event: &Event<Status>) {}
}

#[tokio::test]
async fn store_that_cannot_be_written_before_finish_is_an_error_not_a_success() {
    // A short busy timeout: every write after the lock is taken fails as busy.
    let r = rig_with(Duration::from_millis(20));
    script_composer_path(&r.model);
    let mut lock = LockAt {
        node: "composer",
        path: r.path.clone(),
        held: None,
    };
    let result = ask(&r.deps, request(None), AskOptions::new(&mut lock)).await;
    assert!(lock.held.is_some(), "the lock was taken mid-run");

    // Neither SUCCESS nor FAILED can be written: the caller gets the store error.
    let err = result.expect_err("a run that cannot be finished is not reported");
    assert!(
        matches!(err, AskError::Store(ref e) if e.kind() == StoreErrorKind::Busy),
        "{err}"
    );
    drop(lock);
    let row = run_row(&r, "run-0001");
    assert_ne!(row.status, RunStatus::Success);
    assert_eq!(
        row.status,
        RunStatus::Running,
        "left for the sweep once this process is gone"
    );
    assert_eq!(row.answer, None);
    assert_eq!(count_evaluations(&r.path), 0);
    // The trace written before the lock is intact.
    assert_eq!(
        stored_nodes(&r, "run-0001"),
        [
            "planner",
            "executor",
            "gatekeeper",
            "verified_input",
            "verifier"
        ]
    );
}

#[tokio::test]
async fn write_protected_store_refuses_the_run_without_calling_a_model() {
    use std::os::unix::fs::PermissionsExt;

    let mut r = rig();
    // The file is write-protected before the run: a store opened on it is read-only.
    std::fs::set_permissions(&r.path, std::fs::Permissions::from_mode(0o444)).unwrap();
    let sqlite = SqliteStore::open_with(&r.path, store_options(Duration::from_secs(1))).unwrap();
    assert!(sqlite.is_read_only());
    let store = Store::new(sqlite);
    r.deps.store = store.clone();
    script_composer_path(&r.model);

    let err = ask(&r.deps, request(None), AskOptions::new(&mut NoopObserver))
        .await
        .expect_err("nothing can be stored");
    assert!(
        matches!(err, AskError::Store(ref e) if e.kind() == StoreErrorKind::ReadOnly),
        "{err}"
    );
    assert!(
        r.model.requests().is_empty(),
        "no model call for an unstorable run"
    );
    assert_eq!(store.count_runs().unwrap(), 0);
    std::fs::set_permissions(&r.path, std::fs::Permissions::from_mode(0o644)).unwrap();
}
