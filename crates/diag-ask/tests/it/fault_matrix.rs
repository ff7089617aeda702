//! The fault matrix: every model fault at every agent, and every tool fault, through the real
//! ask service — real nodes, the real agent runtime, the OpenAI-compatible adapter talking HTTP
//! to one real aimock server, real tools (`search_logs` over the demo logs, `query_metrics`,
//! MCP servers over stdio) — over one temporary SQLite store.
//!
//! Each case gives the faulted agent its own model name (`fault-<kind>`), and aimock's fixtures
//! match on the model name first, so only that agent misbehaves; the other agents use the good
//! model and the good fixtures of `tests/fixtures/aimock/graph.json`. A 401 is aimock's own key
//! check (the server runs with `AIMOCK_API_KEYS`) answering a model configured with a wrong key.
//! Transport retries are off (`max_transport_retries = 0`) so that each fault reaches the graph
//! at once, and the faulted timeout is short.
//!
//! aimock refuses a fixture whose `content` is `""`, so "empty content" is served as an answer
//! whose `content` is `null` with no tool call (a `toolCalls: []` fixture); the adapter maps
//! `""` and `null` to the same empty content, so both reach the agent identically. Every other
//! fault is aimock's own, none is scripted.
//!
//! For every case the test checks the path and status SPEC §1.2/§1.4 define, the faulted
//! agent's recorded statuses and model calls, and that the store stays consistent (integrity
//! check ok, no run left RUNNING, stored events = executed path). The matrix is printed as a
//! table (`cargo test --test fault_matrix -- --nocapture`); docs/FAULT_MATRIX.md holds a copy.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::TcpListener;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use diag_ask::config::Config;
use diag_ask::setup::{builtin_registry, RegistryTools};
use diag_ask::{ask, production_nodes, AskDeps, AskOptions, AskOutcome, AskRequest};
use diag_core::agent::runtime::{AgentModels, StepStatus};
use diag_core::agent::AgentRole;
use diag_core::clock::SystemClock;
use diag_core::graph::NoopObserver;
use diag_core::ids::SequentialIds;
use diag_core::limits::Limits;
use diag_core::model::{ChatModel, Role};
use diag_core::protocol::{InvocationStatus, Verdict};
use diag_core::store::{RunFilter, RunStatus, Store};
use diag_diagnosis::FallbackKind;
use diag_model_openai::{OpenAiConfig, OpenAiModel};
use diag_tools::mcp::{McpServer, McpServerConfig};
use futures::FutureExt;
use serde_json::{json, Value};

use diag_testkit::{demo, peer_bin, Aimock};

const KEY: &str = "sk-fault-matrix-key-5c2e91d04b";
const KEY_VAR: &str = "DIAG_FAULT_MATRIX_KEY";
const GOOD_MODEL: &str = "diag-good";
/// How long the faulted model waits before a timeout; aimock answers it far later.
const FAULT_TIMEOUT: Duration = Duration::from_millis(400);
/// Every other wait is generous: the machine may be busy compiling.
const GENEROUS: Duration = Duration::from_secs(60);

const AGENTS: [AgentRole; 4] = [
    AgentRole::Planner,
    AgentRole::Executor,
    AgentRole::Verifier,
    AgentRole::Composer,
];

// ---------------------------------------------------------------------------------------------
// Model faults

#[derive(Debug, Clone, Copy, PartialEq)]
enum ModelFault {
    Timeout,
    RateLimited,
    ServerError,
    Dropped,
    Malformed,
    Prose,
    Empty,
    Unauthorized,
}

/// How SPEC §1.4 classifies a fault.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Class {
    Transient,
    Invalid,
    Permanent,
}

impl ModelFault {
    const ALL: [ModelFault; 8] = [
        ModelFault::Timeout,
        ModelFault::RateLimited,
        ModelFault::ServerError,
        ModelFault::Dropped,
        ModelFault::Malformed,
        ModelFault::Prose,
        ModelFault::Empty,
        ModelFault::Unauthorized,
    ];

    fn label(self) -> &'static str {
        match self {
            ModelFault::Timeout => "timeout",
            ModelFault::RateLimited => "429 + Retry-After",
            ModelFault::ServerError => "500",
            ModelFault::Dropped => "connection dropped",
            ModelFault::Malformed => "malformed JSON body",
            ModelFault::Prose => "prose instead of JSON",
            ModelFault::Empty => "empty content",
            ModelFault::Unauthorized => "401",
        }
    }

    /// The model name that selects this fault's fixture. No name is another's prefix
    /// followed by `-<digit>` (aimock would match it as a dated version of the other).
    fn model(self) -> &'static str {
        match self {
            ModelFault::Timeout => "fault-timeout",
            ModelFault::RateLimited => "fault-ratelimit",
            ModelFault::ServerError => "fault-servererror",
            ModelFault::Dropped => "fault-dropped",
            ModelFault::Malformed => "fault-malformed",
            ModelFault::Prose => "fault-prose",
            ModelFault::Empty => "fault-empty",
            ModelFault::Unauthorized => "fault-badkey",
        }
    }

    fn class(self) -> Class {
        match self {
            ModelFault::Prose | ModelFault::Empty => Class::Invalid,
            ModelFault::Unauthorized => Class::Permanent,
            _ => Class::Transient,
        }
    }

    /// How the model call itself is recorded in its agent step.
    fn step_status(self) -> StepStatus {
        match self.class() {
            Class::Transient => StepStatus::Transient,
            Class::Invalid => StepStatus::Ok,
            Class::Permanent => StepStatus::Permanent,
        }
    }

    /// The aimock fixture; `None` for the 401, which aimock's key check answers by itself.
    fn fixture(self) -> Option<Value> {
        let matching = json!({ "model": self.model() });
        let fixture = match self {
            ModelFault::Timeout => json!({
                "match": matching,
                "response": {"content": "too late"},
                "chaos": {"latencyMs": 10_000},
            }),
            ModelFault::RateLimited => json!({
                "match": matching,
                "response": {
                    "error": {"message": "Rate limit reached", "type": "rate_limit_error"},
                    "status": 429,
                    "retryAfter": 1,
                },
            }),
            ModelFault::ServerError => json!({
                "match": matching,
                "response": {
                    "error": {"message": "The server had an error", "type": "server_error"},
                    "status": 500,
                },
            }),
            ModelFault::Dropped => json!({
                "match": matching,
                "response": {"content": "never delivered"},
                "chaos": {"disconnectRate": 1},
            }),
            ModelFault::Malformed => json!({
                "match": matching,
                "response": {"content": "never delivered"},
                "chaos": {"malformedRate": 1},
            }),
            ModelFault::Prose => json!({
                "match": matching,
                "response": {"content": "Checkout is most likely failing because \
                    payment-service is slow. I would look at its logs next."},
            }),
            ModelFault::Empty => json!({
                "match": matching,
                "response": {"toolCalls": []},
            }),
            ModelFault::Unauthorized => return None,
        };
        Some(fixture)
    }
}

/// The path SPEC §1.2 defines when `agent` meets a fault of `class`, and the Fallback kind.
fn expected_path(agent: AgentRole, class: Class) -> (Vec<&'static str>, FallbackKind) {
    const UP_TO_VERIFIER: [&str; 4] = ["planner", "executor", "gatekeeper", "verified_input"];
    let retried = class != Class::Permanent;
    let mut path: Vec<&str> = Vec::new();
    let kind = match agent {
        AgentRole::Planner => {
            path.push("planner");
            if retried {
                path.push("planner");
            }
            FallbackKind::PreVerification
        }
        // An Executor failure of any kind is never retried.
        AgentRole::Executor => {
            path.extend(["planner", "executor"]);
            FallbackKind::PreVerification
        }
        AgentRole::Verifier => {
            path.extend(UP_TO_VERIFIER);
            path.push("verifier");
            if retried {
                path.push("verifier");
            }
            FallbackKind::PreVerification
        }
        AgentRole::Composer => {
            path.extend(UP_TO_VERIFIER);
            path.extend(["verifier", "composer"]);
            if retried {
                path.push("composer");
            }
            FallbackKind::PostVerification
        }
    };
    path.push("fallback");
    (path, kind)
}

/// The status the faulted agent's node records on each of its attempts.
fn expected_status(agent: AgentRole, class: Class) -> &'static str {
    match (agent, class) {
        (_, Class::Invalid) => "INVALID_OUTPUT",
        (AgentRole::Executor, _) => "FAILED",
        (_, Class::Transient) => "RETRYABLE_FAILED",
        (_, Class::Permanent) => "NON_RETRYABLE_FAILED",
    }
}

// ---------------------------------------------------------------------------------------------
// Tool faults

#[derive(Debug, Clone, Copy, PartialEq)]
enum ToolFault {
    Error,
    Timeout,
    Huge,
    BinaryLog,
    BinaryMcp,
    McpDies,
}

impl ToolFault {
    const ALL: [ToolFault; 6] = [
        ToolFault::Error,
        ToolFault::Timeout,
        ToolFault::Huge,
        ToolFault::BinaryLog,
        ToolFault::BinaryMcp,
        ToolFault::McpDies,
    ];

    fn label(self) -> &'static str {
        match self {
            ToolFault::Error => "tool error (metrics API refuses connections)",
            ToolFault::Timeout => "tool timeout (metrics API never answers)",
            ToolFault::Huge => "huge output (1.6 MB of log matches)",
            ToolFault::BinaryLog => "binary output (NUL, invalid UTF-8, escapes in a log)",
            ToolFault::BinaryMcp => "binary output (MCP image block)",
            ToolFault::McpDies => "MCP server dies mid-call",
        }
    }

    fn model(self) -> &'static str {
        match self {
            ToolFault::Error => "tools-error",
            ToolFault::Timeout => "tools-timeout",
            ToolFault::Huge => "tools-huge",
            ToolFault::BinaryLog => "tools-binarylog",
            ToolFault::BinaryMcp => "tools-binarymcp",
            ToolFault::McpDies => "tools-mcpdies",
        }
    }

    /// The faulted call the Executor makes first, before the two good log searches.
    fn call(self) -> Value {
        let (name, arguments) = match self {
            ToolFault::Error | ToolFault::Timeout => ("query_metrics", json!({"query": "up"})),
            ToolFault::Huge => ("search_logs", json!({"query": "HUGE-MARKER", "limit": 500})),
            ToolFault::BinaryLog => ("search_logs", json!({"query": "BINARY-MARKER"})),
            ToolFault::BinaryMcp => ("everything__get-tiny-image", json!({})),
            ToolFault::McpDies => ("dying__lookup", json!({"q": "payment-service"})),
        };
        json!({"id": "call_0", "name": name, "arguments": arguments})
    }

    /// The recorded status of the faulted call.
    fn invocation_status(self) -> InvocationStatus {
        match self {
            ToolFault::Error | ToolFault::Timeout | ToolFault::McpDies => InvocationStatus::Error,
            ToolFault::Huge | ToolFault::BinaryLog | ToolFault::BinaryMcp => InvocationStatus::Ok,
        }
    }
}

/// Limits of the tool-fault runs: a short tool timeout and a small output cap.
const TOOL_TIMEOUT_SECS: u64 = 2;
const MAX_OUTPUT_BYTES: usize = 16 * 1024;

// ---------------------------------------------------------------------------------------------
// Fixtures

fn graph_fixtures() -> Vec<Value> {
    let path = diag_testkit::repo().join("tests/fixtures/aimock/graph.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["fixtures"].as_array().unwrap().clone()
}

/// The good run's Executor fixtures: (second turn with the evidence, first turn with the calls).
fn good_executor(fixtures: &[Value]) -> (String, Vec<Value>) {
    let answer = fixtures
        .iter()
        .find(|f| f["match"]["hasToolResult"] == true)
        .and_then(|f| f["response"]["content"].as_str())
        .unwrap()
        .to_string();
    let calls = fixtures
        .iter()
        .find_map(|f| f["response"]["toolCalls"].as_array())
        .unwrap()
        .clone();
    (answer, calls)
}

/// Fault fixtures first (they match on the model name), then the good run's.
fn all_fixtures() -> Value {
    let good = graph_fixtures();
    let mut fixtures: Vec<Value> = ModelFault::ALL.iter().filter_map(|f| f.fixture()).collect();
    let (answer, good_calls) = good_executor(&good);
    // With the faulted call first, the two good searches become inv-2 and inv-3.
    let shifted = answer.replace("inv-2", "inv-3").replace("inv-1", "inv-2");
    for fault in ToolFault::ALL {
        fixtures.push(json!({
            "match": {"model": fault.model(), "userMessage": "\"plan\":", "hasToolResult": true},
            "response": {"content": shifted},
        }));
        let mut calls = vec![fault.call()];
        calls.extend(good_calls.iter().cloned());
        fixtures.push(json!({
            "match": {"model": fault.model(), "userMessage": "\"plan\":"},
            "response": {"toolCalls": calls},
        }));
    }
    fixtures.extend(good);
    json!({ "fixtures": fixtures })
}

// ---------------------------------------------------------------------------------------------
// Environment

fn model(server: &Aimock, name: &str, key: &str, timeout: Duration) -> Arc<dyn ChatModel> {
    let mut config = OpenAiConfig::new(server.base_url(), name);
    config.api_key_env = Some(KEY_VAR.into());
    config.request_timeout = timeout;
    config.max_transport_retries = 0;
    let key = key.to_string();
    Arc::new(
        OpenAiModel::new_with_env(config, move |var| {
            (var == KEY_VAR).then(|| OsString::from(&key))
        })
        .unwrap(),
    )
}

/// Log files for the huge and binary cases.
fn write_fault_logs(dir: &Path) {
    let filler = "x".repeat(800);
    let mut huge = String::new();
    for i in 0..2000 {
        huge.push_str(&format!(
            "2026-11-30T14:{:02}:00Z HUGE-MARKER line {i} {filler}\n",
            i % 60
        ));
    }
    std::fs::write(dir.join("huge.log"), huge).unwrap();

    // Ordinary lines first: a NUL in the first 8 KiB would make the tool skip the file.
    let mut binary = Vec::new();
    for i in 0..400 {
        binary
            .extend_from_slice(format!("2026-11-30T14:00:{:02}Z ok line {i}\n", i % 60).as_bytes());
    }
    binary.extend_from_slice(b"2026-11-30T14:05:00Z BINARY-MARKER \x00\x01\x02\xff\xfe\xc3\x28 ");
    binary.extend_from_slice(b"\x1b[2J\x1b]0;owned\x07\x1b[31mred\x1b[0m \x7f\x80\x81 end\n");
    binary.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0x00, b'\n']);
    std::fs::write(dir.join("binary.log"), binary).unwrap();
}

/// An MCP server (a shell script) that lists one tool and exits when it is called.
fn dying_server() -> McpServerConfig {
    let script = r#"reply() { id=$(printf '%s' "$1" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p'); printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$id" "$2"; }
read -r l; reply "$l" '{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"dying","version":"1"}}'
read -r l
read -r l; reply "$l" '{"tools":[{"name":"lookup","description":"Looks a service up.","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}}}]}'
read -r l; exit 1"#;
    let mut config = McpServerConfig::new("dying", "sh");
    config.args = vec!["-c".into(), script.into()];
    config.startup_timeout = GENEROUS;
    config.call_timeout = GENEROUS;
    config
}

struct Env {
    server: Aimock,
    store: Store,
    ids: Arc<SequentialIds>,
    good: Arc<dyn ChatModel>,
    logs_dir: PathBuf,
    /// A port nothing listens on: connections are refused.
    closed_port: u16,
    /// Listens but never accepts: connections hang until the client gives up.
    black_hole: TcpListener,
}

impl Env {
    fn tools_toml(&self, metrics_port: u16) -> String {
        format!(
            "[tools.search_logs]\npaths = [{:?}, {:?}]\n\
             [tools.query_metrics]\nbase_url = \"http://127.0.0.1:{metrics_port}\"\n\
             [limits]\ntool_timeout_secs = {TOOL_TIMEOUT_SECS}\nmax_output_bytes = {MAX_OUTPUT_BYTES}\n",
            demo("logs"),
            self.logs_dir.display().to_string(),
        )
    }

    fn deps(&self, models: AgentModels, registry: diag_core::tools::ToolRegistry) -> AskDeps {
        let clock = Arc::new(SystemClock::new());
        AskDeps {
            nodes: production_nodes(),
            models,
            tools: Arc::new(RegistryTools {
                registry,
                clock: clock.clone(),
            }),
            limits: Limits::default(),
            record_limits: false,
            // The faults are injected into the calls the Executor model makes itself.
            run_plan_steps: false,
            composer: diag_core::protocol::ComposerContract::CURRENT,
            deadline: None,
            clock,
            ids: self.ids.clone(),
            store: self.store.clone(),
            endpoints: Vec::new(),
            replay_of: None,
        }
    }
}

async fn run_case(deps: &AskDeps, run_id: &str) -> Result<AskOutcome, String> {
    let request = AskRequest {
        question: "why does checkout return 502 since 14:00?".into(),
        session_id: None,
        run_id: Some(run_id.to_string()),
    };
    let mut progress = NoopObserver;
    let run = AssertUnwindSafe(ask(deps, request, AskOptions::new(&mut progress))).catch_unwind();
    match run.await {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(e)) => Err(format!("ask failed: {e}")),
        Err(_) => Err(format!("{run_id}: PANIC")),
    }
}

// ---------------------------------------------------------------------------------------------
// Checks shared by every case

/// What every run must satisfy whatever its fault: a finished status, a stored trace that is
/// exactly the executed path, and the store's own record agreeing with the outcome.
fn check_consistent(env: &Env, outcome: &AskOutcome, problems: &mut Vec<String>) {
    let id = &outcome.run_id;
    let mut fail = |p: String| problems.push(format!("{id}: {p}"));
    let Ok(Some(row)) = env.store.get_run(id) else {
        fail("not stored".into());
        return;
    };
    if row.status == RunStatus::Running {
        fail("left RUNNING".into());
    }
    if row.status != outcome.status() {
        fail(format!(
            "stored {} but ask said {}",
            row.status,
            outcome.status()
        ));
    }
    let events = env.store.events(id).unwrap_or_default();
    let stored: Vec<&str> = events.iter().map(|e| e.node.as_str()).collect();
    if stored != outcome.state.path() {
        fail(format!(
            "stored events {stored:?} != path {:?}",
            outcome.state.path()
        ));
    }
    if row.path.iter().map(String::as_str).collect::<Vec<_>>() != outcome.state.path() {
        fail(format!("stored path {:?}", row.path));
    }
    let seqs: Vec<u32> = events.iter().map(|e| e.seq).collect();
    if seqs != (1..=events.len() as u32).collect::<Vec<_>>() {
        fail(format!("event seqs {seqs:?}"));
    }
    if outcome.status() == RunStatus::Success
        && outcome.answer().is_none_or(|a| a.trim().is_empty())
    {
        fail("SUCCESS without an answer".into());
    }
}

fn abbreviate(path: &[&str]) -> String {
    path.iter()
        .map(|n| match *n {
            "planner" => "P",
            "executor" => "E",
            "gatekeeper" => "G",
            "verified_input" => "VI",
            "verifier" => "V",
            "retry_prepare" => "RP",
            "composer" => "C",
            "fallback" => "F",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn fallback_label(kind: Option<FallbackKind>) -> &'static str {
    match kind {
        Some(FallbackKind::PreVerification) => "(pre)",
        Some(FallbackKind::PostVerification) => "(post)",
        None => "",
    }
}

// ---------------------------------------------------------------------------------------------
// The cases

struct Row {
    fault: String,
    cells: Vec<String>,
}

async fn model_fault_case(
    env: &Env,
    agent: AgentRole,
    fault: ModelFault,
    problems: &mut Vec<String>,
) -> String {
    let key = if fault == ModelFault::Unauthorized {
        "sk-not-the-right-key-000"
    } else {
        KEY
    };
    let timeout = if fault == ModelFault::Timeout {
        FAULT_TIMEOUT
    } else {
        GENEROUS
    };
    let mut models = AgentModels::single(env.good.clone());
    models
        .overrides
        .insert(agent, model(&env.server, fault.model(), key, timeout));
    let config = Config::parse(&env.tools_toml(env.closed_port), "fault.toml").unwrap();
    let deps = env.deps(models, builtin_registry(&config).unwrap());
    let run_id = format!("run-{}-{}", agent.as_str(), fault.model());
    let outcome = match run_case(&deps, &run_id).await {
        Ok(o) => o,
        Err(e) => {
            problems.push(e);
            return "PANIC/ERROR".into();
        }
    };
    check_consistent(env, &outcome, problems);

    let s = &outcome.state;
    let path = s.path();
    let (want_path, want_kind) = expected_path(agent, fault.class());
    let mut fail = |p: String| problems.push(format!("{run_id}: {p}"));
    if path != want_path {
        fail(format!("path {path:?}, expected {want_path:?}"));
    }
    if outcome.status() != RunStatus::Success || !s.degraded || s.fallback_kind != Some(want_kind) {
        fail(format!(
            "status {} degraded {} fallback {:?}, expected SUCCESS, degraded, {want_kind:?}",
            outcome.status(),
            s.degraded,
            s.fallback_kind
        ));
    }
    // Each attempt of the faulted agent is recorded with the status the spec gives it.
    let want_status = expected_status(agent, fault.class());
    let events = env.store.events(&run_id).unwrap_or_default();
    let faulted: Vec<&str> = events
        .iter()
        .filter(|e| e.node == agent.as_str())
        .map(|e| e.status.as_str())
        .collect();
    if faulted.is_empty() || faulted.iter().any(|st| *st != want_status) {
        fail(format!(
            "{} statuses {faulted:?}, expected {want_status}",
            agent
        ));
    }
    // One model call per attempt, each recorded with how the call itself ended; an Executor
    // whose loop ended with an answer that is not its evidence document also makes its
    // evidence turn (no tools offered, the run-built schema), which the faulted model
    // answers the same way.
    let evidence_turn =
        agent == AgentRole::Executor && matches!(fault, ModelFault::Prose | ModelFault::Empty);
    let calls_per_attempt = if evidence_turn { 2 } else { 1 };
    let exchanges: Vec<_> = env
        .store
        .exchanges(&run_id)
        .unwrap_or_default()
        .into_iter()
        .filter(|x| x.exchange.agent == agent)
        .collect();
    let evidence_requests: Vec<bool> = exchanges
        .iter()
        .map(|x| x.exchange.request.evidence_turn && x.exchange.request.tools.is_empty())
        .collect();
    let per_attempt: &[bool] = if evidence_turn {
        &[false, true]
    } else {
        &[false]
    };
    let want_evidence: Vec<bool> = (0..faulted.len())
        .flat_map(|_| per_attempt.iter().copied())
        .collect();
    if evidence_requests != want_evidence {
        fail(format!(
            "{agent} requests marked as evidence turns {evidence_requests:?}, expected {want_evidence:?}"
        ));
    }
    let steps: Vec<StepStatus> = env
        .store
        .agent_steps(&run_id)
        .unwrap_or_default()
        .into_iter()
        .filter(|st| st.step.agent == agent)
        .map(|st| st.step.status)
        .collect();
    if steps.len() != faulted.len() * calls_per_attempt
        || steps.iter().any(|st| *st != fault.step_status())
    {
        fail(format!(
            "{} model calls {steps:?}, expected {} × {:?}",
            agent,
            faulted.len() * calls_per_attempt,
            fault.step_status()
        ));
    }
    if fault == ModelFault::RateLimited {
        let said_429 = env
            .store
            .exchanges(&run_id)
            .unwrap_or_default()
            .iter()
            .any(|x| matches!(&x.exchange.outcome, Err(e) if e.message.contains("429")));
        if !said_429 {
            fail("no exchange records the 429".into());
        }
    }
    format!(
        "{}{} · {}",
        abbreviate(&path),
        fallback_label(s.fallback_kind),
        outcome.status()
    )
}

async fn tool_fault_case(
    env: &Env,
    fault: ToolFault,
    problems: &mut Vec<String>,
) -> (String, String, String) {
    let metrics_port = match fault {
        ToolFault::Timeout => env.black_hole.local_addr().unwrap().port(),
        _ => env.closed_port,
    };
    let config = Config::parse(&env.tools_toml(metrics_port), "fault.toml").unwrap();
    let mut registry = builtin_registry(&config).unwrap();
    let server = match fault {
        ToolFault::BinaryMcp => {
            let mut c = McpServerConfig::new("everything", peer_bin("mcp-server-everything"));
            c.args = vec!["stdio".into()];
            c.startup_timeout = GENEROUS;
            c.call_timeout = GENEROUS;
            Some(McpServer::start(c).await.unwrap())
        }
        ToolFault::McpDies => Some(McpServer::start(dying_server()).await.unwrap()),
        _ => None,
    };
    if let Some(server) = &server {
        for tool in server.tools() {
            registry.register(tool).unwrap();
        }
    }
    let mut models = AgentModels::single(env.good.clone());
    models.overrides.insert(
        AgentRole::Executor,
        model(&env.server, fault.model(), KEY, GENEROUS),
    );
    let deps = env.deps(models, registry);
    let run_id = format!("run-{}", fault.model());
    let outcome = run_case(&deps, &run_id).await;
    if let Some(server) = server {
        server.shutdown().await;
    }
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            problems.push(e);
            return ("PANIC/ERROR".into(), String::new(), String::new());
        }
    };
    check_consistent(env, &outcome, problems);
    let s = &outcome.state;
    let path = s.path();
    let mut fail = |p: String| problems.push(format!("{run_id}: {p}"));

    // The Executor saw the fault as a tool result and still answered from the good calls.
    let want = [
        "planner",
        "executor",
        "gatekeeper",
        "verified_input",
        "verifier",
        "composer",
    ];
    if path != want {
        fail(format!("path {path:?}, expected {want:?}"));
    }
    if outcome.status() != RunStatus::Success
        || s.degraded
        || s.round.effective_verdict != Some(Verdict::Pass)
    {
        fail(format!(
            "status {} degraded {} verdict {:?}",
            outcome.status(),
            s.degraded,
            s.round.effective_verdict
        ));
    }
    let invocations = env.store.invocations(&run_id).unwrap_or_default();
    let ids: Vec<&str> = invocations
        .iter()
        .map(|i| i.invocation_id.as_str())
        .collect();
    if ids != ["inv-1", "inv-2", "inv-3"] {
        fail(format!("invocations {ids:?}"));
    }
    let Some(first) = invocations.first() else {
        return (
            abbreviate(&path),
            outcome.status().to_string(),
            "none".into(),
        );
    };
    if first.status != fault.invocation_status() {
        fail(format!(
            "faulted call recorded {:?}: {}",
            first.status, first.output
        ));
    }
    let size = serde_json::to_vec(&first.output).map_or(0, |b| b.len());
    if size > MAX_OUTPUT_BYTES {
        fail(format!("faulted output of {size} bytes passed the cap"));
    }
    let output = first.output.to_string();
    let expectation = match fault {
        ToolFault::Error | ToolFault::Timeout | ToolFault::McpDies => {
            first.output["error"].is_string()
        }
        ToolFault::Huge => {
            first.output["output_truncated"] == true
                && first.output["matches_shown"]
                    == first.output["matches"].as_array().map_or(0, Vec::len)
        }
        ToolFault::BinaryLog => output.contains("BINARY-MARKER") && output.contains('\u{fffd}'),
        ToolFault::BinaryMcp => output.contains("image/png"),
    };
    if !expectation {
        fail(format!(
            "faulted output {}",
            &output[..output.len().min(300)]
        ));
    }
    // What the model was shown: the faulted call's result, under its invocation id.
    let exchanges = env.store.exchanges(&run_id).unwrap_or_default();
    let shown = exchanges
        .iter()
        .filter(|x| x.exchange.agent == AgentRole::Executor && x.exchange.turn == 2)
        .flat_map(|x| x.exchange.request.messages.iter())
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| serde_json::from_str::<Value>(m.content.as_deref()?).ok())
        .find(|v| v["invocation_id"] == "inv-1");
    match shown {
        Some(v) if v["status"] == first.status.as_str() => {}
        other => fail(format!("the Executor was shown {other:?}")),
    }
    let summary = match fault {
        ToolFault::Huge => format!("ok, truncated to {size} B"),
        _ => format!("{}, {size} B", first.status.as_str()),
    };
    (
        abbreviate(&path),
        format!(
            "{} · {}",
            outcome.status(),
            s.round
                .effective_verdict
                .map_or("no verdict", Verdict::as_str)
        ),
        summary,
    )
}

fn print_tables(model_rows: &[Row], tool_rows: &[(String, String, String, String)]) {
    println!();
    println!("Model faults (the faulted agent only; every other agent answers well):");
    println!();
    println!("| fault | planner | executor | verifier | composer |");
    println!("| --- | --- | --- | --- | --- |");
    for row in model_rows {
        println!("| {} | {} |", row.fault, row.cells.join(" | "));
    }
    println!();
    println!("Tool faults (the Executor calls the faulted tool and two good log searches):");
    println!();
    println!("| fault | path | run · verdict | faulted call recorded |");
    println!("| --- | --- | --- | --- |");
    for (fault, path, status, call) in tool_rows {
        println!("| {fault} | {path} | {status} | {call} |");
    }
    println!();
    println!(
        "P planner, E executor, G gatekeeper, VI verified_input, V verifier, C composer, \
         F fallback (pre- or post-verification); every run is stored, integrity_check ok."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_ends_in_the_specified_path_and_a_consistent_store() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fault_matrix.json");
    std::fs::write(
        &fixtures,
        serde_json::to_string_pretty(&all_fixtures()).unwrap(),
    )
    .unwrap();
    // An absolute path replaces the harness's fixture folder when joined onto it.
    let server = Aimock::start_with(fixtures.to_str().unwrap(), Some(KEY));
    let logs_dir = tmp.path().join("logs");
    std::fs::create_dir_all(&logs_dir).unwrap();
    write_fault_logs(&logs_dir);
    let closed_port = diag_testkit::free_port();
    let black_hole = TcpListener::bind("127.0.0.1:0").unwrap();
    let good = model(&server, GOOD_MODEL, KEY, GENEROUS);
    let env = Env {
        server,
        store: diag_testkit::open_sqlite(tmp.path().join("runs.db")).unwrap(),
        ids: Arc::new(SequentialIds::default()),
        good,
        logs_dir,
        closed_port,
        black_hole,
    };

    // Every case at once: they share the server and the store, as concurrent `diag ask`
    // processes would.
    let model_cases = ModelFault::ALL.iter().flat_map(|&fault| {
        let env = &env;
        AGENTS.iter().map(move |&agent| async move {
            let mut problems = Vec::new();
            let cell = model_fault_case(env, agent, fault, &mut problems).await;
            (fault, agent, cell, problems)
        })
    });
    let tool_cases = ToolFault::ALL.iter().map(|&fault| {
        let env = &env;
        async move {
            let mut problems = Vec::new();
            let cells = tool_fault_case(env, fault, &mut problems).await;
            (fault, cells, problems)
        }
    });
    let (model_results, tool_results) = tokio::join!(
        futures::future::join_all(model_cases),
        futures::future::join_all(tool_cases)
    );

    let mut problems: Vec<String> = Vec::new();
    let mut cells: BTreeMap<(usize, usize), String> = BTreeMap::new();
    for (fault, agent, cell, p) in model_results {
        let fi = ModelFault::ALL.iter().position(|f| *f == fault).unwrap();
        let ai = AGENTS.iter().position(|a| *a == agent).unwrap();
        cells.insert((fi, ai), cell);
        problems.extend(p);
    }
    let model_rows: Vec<Row> = ModelFault::ALL
        .iter()
        .enumerate()
        .map(|(fi, fault)| Row {
            fault: fault.label().to_string(),
            cells: (0..AGENTS.len())
                .map(|ai| cells[&(fi, ai)].clone())
                .collect(),
        })
        .collect();
    let mut tool_rows = Vec::new();
    for (fault, (path, status, call), p) in tool_results {
        tool_rows.push((fault.label().to_string(), path, status, call));
        problems.extend(p);
    }
    print_tables(&model_rows, &tool_rows);

    // The store as a whole: healthy, every run finished, one run per case.
    let integrity = diag_store_sqlite::SqliteStore::open(tmp.path().join("runs.db"))
        .unwrap()
        .integrity_check()
        .unwrap();
    if integrity != "ok" {
        problems.push(format!("integrity_check: {integrity}"));
    }
    let runs = env.store.list_runs(&RunFilter::default()).unwrap();
    let expected_runs = ModelFault::ALL.len() * AGENTS.len() + ToolFault::ALL.len();
    if runs.len() != expected_runs {
        problems.push(format!(
            "{} runs stored, expected {expected_runs}",
            runs.len()
        ));
    }
    for run in &runs {
        if !matches!(run.status, RunStatus::Success | RunStatus::Failed) {
            problems.push(format!("{} is {}", run.run_id, run.status));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
