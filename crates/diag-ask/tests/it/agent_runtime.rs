//! The agent runtime over a scripted model and scripted tools: single-turn agents, the
//! Executor's bounded ReAct loop, invocation ids, recording before the model sees results,
//! concurrency of one turn's tool calls, budgets, and failure classification.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use diag_core::agent::fit::estimate;
use diag_core::agent::runtime::{
    AgentModels, AgentStepRecord, ModelAgents, ModelExchange, RunHooks, StepStatus, ToolResult,
    ToolResultFuture, ToolRunner, PLAN_STEP_AGENT,
};
use diag_core::agent::{
    AgentInvoker, AgentRequest, AgentRole, EvidenceTurn, InvokeError, PlanCall,
};
use diag_core::clock::{FixedClock, Timestamp};
use diag_core::graph::RunConfig;
use diag_core::limits::Limits;
use diag_core::limits::MaxTokensConfig;
use diag_core::model::scripted::ScriptedModel;
use diag_core::model::{
    ChatResponse, ErrorClass, FinishReason, Fit, ModelError, OutputSchema, Role, ToolChoice, Usage,
};
use diag_core::protocol::InvocationStatus;
use diag_core::tools::{InvocationLog, MemoryInvocationLog, ToolSpec};
use serde_json::{json, Value};

/// Echoes its arguments; `wait` makes calls meet at a barrier, which only concurrent calls pass.
struct EchoTools {
    barrier: Option<tokio::sync::Barrier>,
}

impl ToolRunner for EchoTools {
    fn catalog(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "search_logs".into(),
            description: "search".into(),
            parameters: json!({"type": "object"}),
        }]
    }

    fn run<'a>(&'a self, name: &'a str, arguments: &'a Value) -> ToolResultFuture<'a> {
        Box::pin(async move {
            if let Some(b) = &self.barrier {
                b.wait().await;
            }
            if name != "search_logs" {
                return ToolResult {
                    status: InvocationStatus::Blocked,
                    output: json!({"error": "unknown tool"}),
                };
            }
            // `lines: n` asks for a large output: n matches.
            if let Some(n) = arguments.get("lines").and_then(Value::as_u64) {
                let matches: Vec<Value> = (0..n)
                    .map(|i| json!({"line": format!("14:02:{:02} upstream returned 502 {}", i % 60, "x".repeat(80))}))
                    .collect();
                return ToolResult {
                    status: InvocationStatus::Ok,
                    output: json!({"matches": matches, "truncated": false}),
                };
            }
            ToolResult {
                status: InvocationStatus::Ok,
                output: json!({"matches": [{"line": format!("echo {arguments}")}], "truncated": false}),
            }
        })
    }
}

#[derive(Default)]
struct Recorder {
    steps: Mutex<Vec<(RunConfig, AgentStepRecord)>>,
    exchanges: Mutex<Vec<ModelExchange>>,
}

impl RunHooks for Recorder {
    fn agent_step(&self, config: &RunConfig, step: &AgentStepRecord) {
        self.steps
            .lock()
            .unwrap()
            .push((config.clone(), step.clone()));
    }
    fn model_exchange(&self, _config: &RunConfig, exchange: &ModelExchange) {
        self.exchanges.lock().unwrap().push(exchange.clone());
    }
}

struct Rig {
    model: Arc<ScriptedModel>,
    log: Arc<MemoryInvocationLog>,
    hooks: Arc<Recorder>,
    agents: ModelAgents,
}

fn rig(limits: Limits, barrier: Option<usize>) -> Rig {
    let model = Arc::new(ScriptedModel::new());
    let log = Arc::new(MemoryInvocationLog::new());
    let hooks = Arc::new(Recorder::default());
    let agents = ModelAgents {
        models: AgentModels::single(model.clone()),
        tools: Arc::new(EchoTools {
            barrier: barrier.map(tokio::sync::Barrier::new),
        }),
        log: log.clone(),
        hooks: hooks.clone(),
        clock: Arc::new(FixedClock(Timestamp::from_unix_ms(0))),
        limits,
        run_plan_steps: true,
    };
    Rig {
        model,
        log,
        hooks,
        agents,
    }
}

fn request(role: AgentRole) -> AgentRequest {
    AgentRequest {
        role,
        round: 1,
        attempt: 1,
        input: r#"{"diagnosis_context":{"question":"why 502?"}}"#.into(),
        correction: None,
        completed_queries: Vec::new(),
        output_schema: None,
        evidence: None,
        plan_calls: Vec::new(),
        prompt: None,
    }
}

fn config() -> RunConfig {
    RunConfig::new("s-1", "run-1")
}

#[tokio::test]
async fn single_turn_agent_sends_prompt_and_input_without_tools() {
    let r = rig(Limits::default(), None);
    r.model.text("{\"schema\":\"planner_plan_v1\"}");
    let reply = r
        .agents
        .invoke(&request(AgentRole::Planner), &config())
        .await
        .unwrap();
    assert_eq!(reply.content, "{\"schema\":\"planner_plan_v1\"}");
    let reqs = r.model.requests();
    assert_eq!(reqs.len(), 1);
    assert!(reqs[0].tools.is_empty());
    assert_eq!(reqs[0].messages[0].role, Role::System);
    assert!(reqs[0].messages[0]
        .content
        .as_deref()
        .unwrap()
        .contains("planner_plan_v1"));
    assert_eq!(
        reqs[0].messages[1].content.as_deref(),
        Some(request(AgentRole::Planner).input.as_str())
    );
    let steps = r.hooks.steps.lock().unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(
        steps[0].0,
        config(),
        "hooks receive the run's config unchanged"
    );
    assert_eq!(steps[0].1.status, StepStatus::Ok);
    assert_eq!(steps[0].1.prompt_tokens, 10);
    assert_eq!(steps[0].1.prompt.prompt_id, "planner");
}

/// Delegates to a scripted model and notes, at each request, which invocation ids the log
/// already holds and which ones the request shows the model.
struct LogWatchingModel {
    inner: Arc<ScriptedModel>,
    log: Arc<MemoryInvocationLog>,
    seen: Mutex<Vec<(Vec<String>, Vec<String>)>>,
}

impl diag_core::model::ChatModel for LogWatchingModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn complete<'a>(
        &'a self,
        request: &'a diag_core::model::ChatRequest,
    ) -> diag_core::model::ChatFuture<'a> {
        let logged: Vec<String> = self
            .log
            .invocations("run-1")
            .into_iter()
            .map(|i| i.invocation_id)
            .collect();
        let shown: Vec<String> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .map(|m| {
                let v: Value = serde_json::from_str(m.content.as_deref().unwrap()).unwrap();
                v["invocation_id"].as_str().unwrap().to_string()
            })
            .collect();
        self.seen.lock().unwrap().push((logged, shown));
        self.inner.complete(request)
    }
}

#[tokio::test]
async fn every_tool_result_is_in_the_log_when_the_model_is_shown_it() {
    let r = rig(Limits::default(), None);
    r.model
        .tool_calls(&[
            ("call_a", "search_logs", json!({"query": "502"})),
            ("call_b", "search_logs", json!({"query": "timeout"})),
        ])
        .tool_calls(&[("call_c", "search_logs", json!({"query": "pool"}))])
        .text("{\"schema\":\"executor_evidence_v2\"}");
    let watcher = Arc::new(LogWatchingModel {
        inner: r.model.clone(),
        log: r.log.clone(),
        seen: Mutex::new(Vec::new()),
    });
    let mut agents = r.agents;
    agents.models = AgentModels::single(watcher.clone());
    agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap();
    let seen = watcher.seen.lock().unwrap().clone();
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        seen,
        [
            (ids(&[]), ids(&[])),
            (ids(&["inv-1", "inv-2"]), ids(&["inv-1", "inv-2"])),
            (
                ids(&["inv-1", "inv-2", "inv-3"]),
                ids(&["inv-1", "inv-2", "inv-3"])
            ),
        ],
        "(logged, shown) at each model call"
    );
}

/// An invocation log that cannot keep anything, like a store on a full disk.
struct RefusingLog;

impl InvocationLog for RefusingLog {
    fn record(
        &self,
        _config: &RunConfig,
        _invocation: diag_core::protocol::ToolInvocation,
    ) -> Result<(), String> {
        Err("database or disk is full".into())
    }

    fn invocations(&self, _run_id: &str) -> Vec<diag_core::protocol::ToolInvocation> {
        Vec::new()
    }
}

#[tokio::test]
async fn a_tool_result_that_cannot_be_recorded_is_never_shown_to_the_model() {
    let r = rig(Limits::default(), None);
    r.model
        .tool_calls(&[("call_a", "search_logs", json!({"query": "502"}))])
        .text("{\"schema\":\"executor_evidence_v2\"}");
    let mut agents = r.agents;
    agents.log = Arc::new(RefusingLog);
    let err = agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        InvokeError::Permanent(
            "tool result inv-1 could not be recorded, so it is not shown to the model: \
             database or disk is full"
                .into()
        )
    );
    assert_eq!(
        r.model.requests().len(),
        1,
        "no model call after the unrecorded result"
    );
}

#[tokio::test]
async fn a_round_two_call_repeating_a_completed_query_is_blocked_without_spending_the_budget() {
    let r = rig(
        Limits {
            max_turns: 4,
            max_tool_calls: 1,
            ..Limits::DEFAULT
        },
        None,
    );
    r.model
        .tool_calls(&[
            // The same query as round 1, arguments in another key order.
            (
                "a",
                "search_logs",
                json!({"since": "14:00", "query": "502"}),
            ),
            ("b", "search_logs", json!({"query": "pool"})),
        ])
        .text("{}");
    let mut req = request(AgentRole::Executor);
    req.round = 2;
    req.completed_queries = vec![diag_core::protocol::QueryRef::new(
        "search_logs",
        &json!({"query": "502", "since": "14:00"}),
    )];
    r.agents.invoke(&req, &config()).await.unwrap();
    let invs = r.log.invocations("run-1");
    let st: Vec<_> = invs.iter().map(|i| i.status).collect();
    assert_eq!(
        st,
        [InvocationStatus::Blocked, InvocationStatus::Ok],
        "the repeat is blocked and the one-call budget still serves the new query"
    );
    let said = invs[0].output["error"].as_str().unwrap();
    assert!(said.starts_with("duplicate of "), "{said}");
    assert!(
        said.contains("was already made in the previous round"),
        "{said}"
    );
}

#[tokio::test]
async fn executor_records_tool_results_with_run_local_ids_before_the_model_sees_them() {
    let r = rig(Limits::default(), None);
    r.model
        .tool_calls(&[
            ("call_a", "search_logs", json!({"query": "502"})),
            ("call_b", "search_logs", json!({"query": "timeout"})),
        ])
        .tool_calls(&[("call_c", "search_logs", json!({"query": "pool"}))])
        .text("{\"schema\":\"executor_evidence_v2\"}");
    let reply = r
        .agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap();
    assert_eq!(reply.content, "{\"schema\":\"executor_evidence_v2\"}");

    let invs = r.log.invocations("run-1");
    let ids: Vec<_> = invs.iter().map(|i| i.invocation_id.as_str()).collect();
    assert_eq!(ids, ["inv-1", "inv-2", "inv-3"]);
    assert_eq!(
        r.log.configs(),
        vec![config(); 3],
        "the tool recorder receives the run's config unchanged"
    );
    assert_eq!(invs[0].arguments, json!({"query": "502"}));
    assert_eq!(invs[1].arguments, json!({"query": "timeout"}));
    assert!(invs
        .iter()
        .all(|i| i.session_id == "s-1" && i.agent == "executor" && i.round == 1));

    // The second model call shows both results with their invocation ids, in the model's order.
    let reqs = r.model.requests();
    assert_eq!(reqs.len(), 3);
    assert!(
        !reqs[0].tools.is_empty(),
        "the Executor is offered the catalog"
    );
    let tool_msgs: Vec<Value> = reqs[1]
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| serde_json::from_str(m.content.as_deref().unwrap()).unwrap())
        .collect();
    assert_eq!(tool_msgs.len(), 2);
    assert_eq!(tool_msgs[0]["invocation_id"], "inv-1");
    assert_eq!(tool_msgs[1]["invocation_id"], "inv-2");
    assert_eq!(tool_msgs[0]["output"], invs[0].output);
    assert_eq!(
        reqs[1]
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .nth(1)
            .unwrap()
            .tool_call_id
            .as_deref(),
        Some("call_b")
    );
    assert_eq!(
        r.hooks
            .steps
            .lock()
            .unwrap()
            .iter()
            .map(|(_, s)| s.turn)
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

#[tokio::test]
async fn invocation_ids_continue_across_rounds_of_one_run_and_restart_in_another_run() {
    let r = rig(Limits::default(), None);
    r.model
        .tool_calls(&[("a", "search_logs", json!({"q": 1}))])
        .text("{}")
        .tool_calls(&[("b", "search_logs", json!({"q": 2}))])
        .text("{}")
        .tool_calls(&[("c", "search_logs", json!({"q": 3}))])
        .text("{}");
    r.agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap();
    let mut round2 = request(AgentRole::Executor);
    round2.round = 2;
    r.agents.invoke(&round2, &config()).await.unwrap();
    let other = RunConfig::new("s-1", "run-2");
    r.agents
        .invoke(&request(AgentRole::Executor), &other)
        .await
        .unwrap();
    let ids = |run: &str| {
        r.log
            .invocations(run)
            .into_iter()
            .map(|i| (i.invocation_id, i.round))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids("run-1"),
        [("inv-1".to_string(), 1), ("inv-2".to_string(), 2)]
    );
    assert_eq!(ids("run-2"), [("inv-1".to_string(), 1)]);
}

#[tokio::test]
async fn tool_calls_of_one_turn_run_concurrently() {
    // Three calls meet at a barrier of three: sequential execution would never get past it.
    let r = rig(Limits::default(), Some(3));
    r.model
        .tool_calls(&[
            ("a", "search_logs", json!({"q": 1})),
            ("b", "search_logs", json!({"q": 2})),
            ("c", "search_logs", json!({"q": 3})),
        ])
        .text("{}");
    let (req, cfg) = (request(AgentRole::Executor), config());
    let run = r.agents.invoke(&req, &cfg);
    let reply = tokio::time::timeout(Duration::from_secs(10), run).await;
    assert!(reply.is_ok(), "calls of one turn did not run concurrently");
    assert_eq!(r.log.invocations("run-1").len(), 3);
}

#[tokio::test]
async fn calls_past_the_budget_are_recorded_blocked_and_unknown_tools_blocked() {
    let r = rig(
        Limits {
            max_turns: 4,
            max_tool_calls: 2,
            ..Limits::DEFAULT
        },
        None,
    );
    r.model
        .tool_calls(&[
            ("a", "search_logs", json!({"q": 1})),
            ("b", "delete_everything", json!({})),
            ("c", "search_logs", json!({"q": 3})),
        ])
        .text("{}");
    r.agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap();
    let st: Vec<_> = r
        .log
        .invocations("run-1")
        .into_iter()
        .map(|i| (i.tool_name, i.status))
        .collect();
    assert_eq!(
        st,
        [
            ("search_logs".to_string(), InvocationStatus::Ok),
            ("delete_everything".to_string(), InvocationStatus::Blocked),
            ("search_logs".to_string(), InvocationStatus::Blocked),
        ]
    );
}

#[tokio::test]
async fn an_executor_whose_calls_all_ran_but_never_answered_hit_its_turn_limit() {
    // SPEC §4: only an Executor that ends blocked is TOOL_BLOCKED. Every call here runs, so
    // running out of turns is a plain failure, reported as such.
    let r = rig(
        Limits {
            max_turns: 3,
            max_tool_calls: 10,
            ..Limits::DEFAULT
        },
        None,
    );
    for i in 0..3 {
        r.model
            .tool_calls(&[(&format!("c{i}"), "search_logs", json!({"q": i}))]);
    }
    let err = r
        .agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, InvokeError::TurnLimit(m) if m == "turn limit reached without a final answer (3 turns)"),
        "{err:?}"
    );
    assert_eq!(err.kind(), "turn_limit");
    assert_eq!(r.model.requests().len(), 3, "bounded by max_turns");
    assert!(r
        .log
        .invocations("run-1")
        .iter()
        .all(|i| i.status == InvocationStatus::Ok));
}

#[tokio::test]
async fn an_executor_that_never_stops_calling_tools_ends_tool_blocked() {
    let r = rig(
        Limits {
            max_turns: 3,
            max_tool_calls: 1,
            ..Limits::DEFAULT
        },
        None,
    );
    for i in 0..3 {
        r.model
            .tool_calls(&[(&format!("c{i}"), "search_logs", json!({"q": i}))]);
    }
    let err = r
        .agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::ToolBlocked(_)), "{err:?}");
    assert_eq!(r.model.requests().len(), 3, "bounded by max_turns");
    let st: Vec<_> = r
        .log
        .invocations("run-1")
        .into_iter()
        .map(|i| i.status)
        .collect();
    assert_eq!(
        st,
        [
            InvocationStatus::Ok,
            InvocationStatus::Blocked,
            InvocationStatus::Blocked
        ]
    );
}

#[tokio::test]
async fn model_failures_are_classified_and_recorded() {
    let cases = [
        (
            ModelError::from_status(503, "HTTP 503"),
            "transient",
            StepStatus::Transient,
        ),
        (
            ModelError::from_status(429, "HTTP 429"),
            "transient",
            StepStatus::Transient,
        ),
        (
            ModelError::from_status(401, "HTTP 401"),
            "authentication",
            StepStatus::Permanent,
        ),
        (
            ModelError::from_status(404, "HTTP 404"),
            "permanent",
            StepStatus::Permanent,
        ),
        (
            {
                let mut e = ModelError::from_status(400, "HTTP 400: maximum context length");
                e.class = diag_core::model::ErrorClass::ContextOverflow;
                e
            },
            "context_overflow",
            StepStatus::ContextOverflow,
        ),
        (
            ModelError::transient("connection reset"),
            "transient",
            StepStatus::Transient,
        ),
    ];
    for (error, kind, step_status) in cases {
        let r = rig(Limits::default(), None);
        r.model.push(Err(error.clone()));
        let err = r
            .agents
            .invoke(&request(AgentRole::Verifier), &config())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), kind, "{error:?}");
        let steps = r.hooks.steps.lock().unwrap();
        assert_eq!(steps[0].1.status, step_status);
        assert_eq!(r.hooks.exchanges.lock().unwrap()[0].outcome, Err(error));
    }
}

#[tokio::test]
async fn a_reply_cut_at_the_token_limit_is_transient() {
    let r = rig(Limits::default(), None);
    r.model.push(Ok(ChatResponse {
        content: Some("{\"schema\": \"composer_ans".into()),
        tool_calls: vec![],
        finish_reason: FinishReason::Length,
        usage: None,
        structured_output: None,
    }));
    let err = r
        .agents
        .invoke(&request(AgentRole::Composer), &config())
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::Transient(_)));
    assert_eq!(
        r.hooks.steps.lock().unwrap()[0].1.status,
        StepStatus::Truncated
    );
}

/// An Executor request that asks for the evidence turn.
fn evidence_request() -> AgentRequest {
    let mut executor = request(AgentRole::Executor);
    executor.evidence = Some(EvidenceTurn {
        kept_claim_ids: Vec::new(),
        relevance: vec!["checkout 502".into()],
        question: "why 502?".into(),
    });
    executor
}

const EVIDENCE_DOC: &str =
    r#"{"schema": "executor_evidence_v2", "claims": [], "limitations": ["x"]}"#;

#[tokio::test]
async fn a_loop_answer_cut_at_the_token_limit_gets_the_evidence_turn() {
    let r = rig(Limits::default(), None);
    r.model.with_evidence_turn();
    r.model
        .tool_calls(&[("call_1", "search_logs", json!({"query": "502"}))])
        .push(Ok(ChatResponse {
            content: Some("The checkout errors come from".into()),
            tool_calls: vec![],
            finish_reason: FinishReason::Length,
            usage: None,
            structured_output: None,
        }))
        .text(EVIDENCE_DOC);
    let reply = r
        .agents
        .invoke(&evidence_request(), &config())
        .await
        .unwrap();
    assert_eq!(reply.content, EVIDENCE_DOC);
    let requests = r.model.requests();
    assert_eq!(requests.len(), 3);
    let turn = &requests[2];
    assert!(turn.evidence_turn && turn.tools.is_empty());
    assert_eq!(turn.tool_choice, Some(ToolChoice::None));
    let schema = turn.response_format.as_ref().unwrap();
    assert!(schema.grammar.is_some());
    assert!(schema.schema.to_string().contains("inv-1"));
    let steps: Vec<(u32, StepStatus)> = r
        .hooks
        .steps
        .lock()
        .unwrap()
        .iter()
        .map(|(_, s)| (s.turn, s.status))
        .collect();
    assert_eq!(
        steps,
        [
            (1, StepStatus::Ok),
            (2, StepStatus::Truncated),
            (3, StepStatus::Ok)
        ]
    );

    // Without the turn (a model set to `off`), the same cut answer fails the attempt.
    let r = rig(Limits::default(), None);
    r.model
        .tool_calls(&[("call_1", "search_logs", json!({"query": "502"}))])
        .push(Ok(ChatResponse {
            content: Some("The checkout errors come from".into()),
            tool_calls: vec![],
            finish_reason: FinishReason::Length,
            usage: None,
            structured_output: None,
        }));
    let err = r
        .agents
        .invoke(&evidence_request(), &config())
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::Transient(_)), "{err:?}");
    assert_eq!(r.model.requests().len(), 2);
}

/// An evidence document with one claim on `inv-1` of [`EchoTools`] called with
/// `{"query": "502"}`, quoting `quote` at `/matches/0/line`.
fn claim_doc(quote: &str) -> String {
    json!({
        "schema": "executor_evidence_v2",
        "claims": [{
            "claim_id": "c1",
            "text": "The log line repeats the query 502",
            "bindings": [{
                "source_invocation_id": "inv-1",
                "tool_name": "search_logs",
                "raw_path": "/matches/0/line",
                "quote": quote
            }]
        }]
    })
    .to_string()
}

#[tokio::test]
async fn a_loop_answer_that_meets_the_contract_needs_no_evidence_turn() {
    let r = rig(Limits::default(), None);
    r.model.with_evidence_turn();
    // The quote is in the recorded output at its pointer: the Gatekeeper would take it.
    let doc = claim_doc(r#"echo {"query":"502"}"#);
    r.model
        .tool_calls(&[("call_1", "search_logs", json!({"query": "502"}))])
        .text(&doc);
    let reply = r
        .agents
        .invoke(&evidence_request(), &config())
        .await
        .unwrap();
    assert_eq!(reply.content, doc);
    assert_eq!(r.model.requests().len(), 2);
    assert!(r.model.requests().iter().all(|q| !q.evidence_turn));
}

#[tokio::test]
async fn a_loop_document_with_made_up_quotes_gets_the_evidence_turn() {
    let r = rig(Limits::default(), None);
    r.model.with_evidence_turn();
    // Contract-valid and citing a known invocation, but its quote is nowhere in that output:
    // the Gatekeeper would refuse every claim.
    let made_up = claim_doc("upstream returned 502 from payment-service");
    r.model
        .tool_calls(&[("call_1", "search_logs", json!({"query": "502"}))])
        .text(&made_up)
        .text(EVIDENCE_DOC);
    let reply = r
        .agents
        .invoke(&evidence_request(), &config())
        .await
        .unwrap();
    assert_eq!(reply.content, EVIDENCE_DOC, "the evidence turn's answer");
    let requests = r.model.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[2].evidence_turn);
    // The turn sees the loop's document, as it sees a prose answer.
    let shown = &requests[2].messages[requests[2].messages.len() - 2];
    assert_eq!(shown.role, Role::Assistant);
    assert_eq!(shown.content.as_deref(), Some(made_up.as_str()));

    // A document without claims, while the run recorded something to cite, gets it too.
    let r = rig(Limits::default(), None);
    r.model.with_evidence_turn();
    r.model
        .tool_calls(&[("call_1", "search_logs", json!({"query": "502"}))])
        .text(EVIDENCE_DOC)
        .text(EVIDENCE_DOC);
    r.agents
        .invoke(&evidence_request(), &config())
        .await
        .unwrap();
    assert_eq!(r.model.requests().len(), 3);
    assert!(r.model.requests()[2].evidence_turn);

    // With nothing recorded to cite, a document without claims stands.
    let r = rig(Limits::default(), None);
    r.model.with_evidence_turn();
    r.model.text(EVIDENCE_DOC);
    let reply = r
        .agents
        .invoke(&evidence_request(), &config())
        .await
        .unwrap();
    assert_eq!(reply.content, EVIDENCE_DOC);
    assert_eq!(r.model.requests().len(), 1);

    // A model without the evidence turn keeps today's behaviour: the document is its reply.
    let r = rig(Limits::default(), None);
    r.model
        .tool_calls(&[("call_1", "search_logs", json!({"query": "502"}))])
        .text(&made_up);
    let reply = r
        .agents
        .invoke(&evidence_request(), &config())
        .await
        .unwrap();
    assert_eq!(reply.content, made_up);
    assert_eq!(r.model.requests().len(), 2);
}

#[tokio::test]
async fn a_repeating_loop_gets_the_evidence_turn() {
    let r = rig(Limits::default(), None);
    r.model.with_evidence_turn();
    for _ in 0..4 {
        r.model
            .tool_calls(&[("call_1", "search_logs", json!({"query": "502"}))]);
    }
    r.model.text(EVIDENCE_DOC);
    let reply = r
        .agents
        .invoke(&evidence_request(), &config())
        .await
        .unwrap();
    assert_eq!(reply.content, EVIDENCE_DOC);
    let requests = r.model.requests();
    assert_eq!(requests.len(), 5, "four loop turns, then the evidence turn");
    assert!(requests[4].evidence_turn);
    // The three duplicates were recorded blocked, not run; the turn offers only `inv-1`.
    let invocations = r.log.invocations("run-1");
    assert_eq!(invocations.len(), 4);
    assert!(invocations[1..]
        .iter()
        .all(|i| i.status == InvocationStatus::Blocked));
    let schema = &requests[4].response_format.as_ref().unwrap().schema;
    let binding = &schema["properties"]["claims"]["items"]["properties"]["bindings"]["items"];
    assert_eq!(
        binding["properties"]["source_invocation_id"]["enum"],
        json!(["inv-1"]),
        "{schema:#}"
    );
}

#[tokio::test]
async fn each_agent_uses_its_own_model_when_configured() {
    let default = Arc::new(ScriptedModel::new());
    let strong = Arc::new(ScriptedModel::new());
    default.text("planner answer");
    strong.text("verifier answer");
    let mut models = AgentModels::single(default.clone());
    models.overrides.insert(AgentRole::Verifier, strong.clone());
    let agents = ModelAgents {
        models,
        tools: Arc::new(EchoTools { barrier: None }),
        log: Arc::new(MemoryInvocationLog::new()),
        hooks: Arc::new(Recorder::default()),
        clock: Arc::new(FixedClock(Timestamp::from_unix_ms(0))),
        limits: Limits::default(),
        run_plan_steps: true,
    };
    assert_eq!(
        agents
            .invoke(&request(AgentRole::Verifier), &config())
            .await
            .unwrap()
            .content,
        "verifier answer"
    );
    assert_eq!(
        agents
            .invoke(&request(AgentRole::Planner), &config())
            .await
            .unwrap()
            .content,
        "planner answer"
    );
    assert_eq!((default.requests().len(), strong.requests().len()), (1, 1));
}

fn limits(max_turns: u32, max_tool_calls: u32) -> Limits {
    Limits {
        max_turns,
        max_tool_calls,
        ..Limits::default()
    }
}

#[tokio::test]
async fn agents_ask_for_their_contract_with_tool_choice_and_their_max_tokens() {
    let r = rig(Limits::default(), None);
    r.model.text("{}").text("{}");
    let schema = OutputSchema {
        name: "planner_plan_v1".into(),
        schema: json!({"type": "object"}),
        grammar: None,
    };
    let mut planner = request(AgentRole::Planner);
    planner.output_schema = Some(schema.clone());
    r.agents.invoke(&planner, &config()).await.unwrap();
    let mut executor = request(AgentRole::Executor);
    executor.output_schema = Some(schema.clone());
    r.agents.invoke(&executor, &config()).await.unwrap();
    let sent = r.model.requests();
    assert_eq!(sent[0].response_format.as_ref(), Some(&schema));
    assert_eq!(sent[0].tool_choice, Some(ToolChoice::None));
    assert!(sent[0].tools.is_empty());
    assert_eq!(sent[0].max_tokens, Some(MaxTokensConfig::DEFAULT.planner));
    assert_eq!(
        sent[0].fit, None,
        "no context size is known: nothing to fit to"
    );
    assert_eq!(sent[1].response_format.as_ref(), Some(&schema));
    assert_eq!(sent[1].tool_choice, Some(ToolChoice::Auto));
    assert_eq!(sent[1].tools.len(), 1);
    assert_eq!(sent[1].max_tokens, Some(MaxTokensConfig::DEFAULT.executor));
}

/// The tool results the model was shown in its last request, as JSON.
fn shown_results(request: &diag_core::model::ChatRequest) -> Vec<Value> {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| serde_json::from_str(m.content.as_deref().unwrap()).unwrap())
        .collect()
}

#[tokio::test]
async fn a_repeated_tool_call_is_not_run_again_spends_no_budget_and_names_the_first() {
    let r = rig(limits(8, 2), None);
    r.model
        .tool_calls(&[("a", "search_logs", json!({"query": "502", "limit": 5}))])
        // The same call (keys in another order), and a new one.
        .tool_calls(&[
            ("b", "search_logs", json!({"limit": 5, "query": "502"})),
            ("c", "search_logs", json!({"query": "pool"})),
        ])
        .text("{}");
    r.agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap();
    let invs = r.log.invocations("run-1");
    let st: Vec<_> = invs.iter().map(|i| i.status).collect();
    assert_eq!(
        st,
        [
            InvocationStatus::Ok,
            InvocationStatus::Blocked,
            InvocationStatus::Ok
        ],
        "the repeat is not run, and the budget of two still serves the new call"
    );
    assert_eq!(invs[1].invocation_id, "inv-2");
    assert_eq!(invs[1].output["duplicate_of"], "inv-1");
    let seen = shown_results(&r.model.requests()[2]);
    let said = seen[1]["output"]["error"].as_str().unwrap();
    assert!(said.starts_with("duplicate of inv-1: "), "{said}");
    assert_eq!(seen[1]["status"], "blocked");
}

#[tokio::test]
async fn three_repeats_in_a_row_stop_the_executor_as_repeating() {
    let r = rig(limits(8, 12), None);
    let same = || vec![("x", "search_logs", json!({"query": "502"}))];
    for _ in 0..4 {
        r.model.tool_calls(&same());
    }
    r.model.text("never asked for");
    let err = r
        .agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::Repeating(_)), "{err:?}");
    assert_eq!(err.kind(), "repeating");
    assert_eq!(
        r.model.requests().len(),
        4,
        "stopped after the third repeat"
    );
    let st: Vec<_> = r
        .log
        .invocations("run-1")
        .iter()
        .map(|i| i.status)
        .collect();
    assert_eq!(
        st,
        [
            InvocationStatus::Ok,
            InvocationStatus::Blocked,
            InvocationStatus::Blocked,
            InvocationStatus::Blocked
        ]
    );

    // A new call in between starts the count again.
    let r = rig(limits(8, 12), None);
    let a = json!({"query": "502"});
    for call in [&a, &a, &json!({"query": "pool"}), &a, &a] {
        r.model.tool_calls(&[("x", "search_logs", call.clone())]);
    }
    r.model.text("done");
    let reply = r
        .agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap();
    assert_eq!(reply.content, "done");
}

#[tokio::test]
async fn tool_outputs_are_shortened_to_fit_the_context_and_recorded_in_full() {
    let r = rig(Limits::default(), None);
    r.model
        .with_context_tokens(4000)
        .tool_calls(&[("a", "search_logs", json!({"lines": 300}))])
        .text("{}");
    r.agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap();
    let sent = r.model.requests();
    assert_eq!(
        sent[1].fit,
        Some(Fit {
            context_tokens: 4000,
            max_tokens: MaxTokensConfig::DEFAULT.executor
        })
    );
    let shown = &shown_results(&sent[1])[0];
    let marker = shown["shortened"]
        .as_str()
        .expect("a marker the model can read");
    assert!(marker.contains("the full output is recorded"), "{marker}");
    let kept = shown["output"]["matches"].as_array().unwrap();
    assert!(!kept.is_empty() && kept.len() < 300, "{}", kept.len());
    let full = &r.log.invocations("run-1")[0].output;
    assert_eq!(
        full["matches"].as_array().unwrap().len(),
        300,
        "recorded in full"
    );
    assert_eq!(
        kept[0], full["matches"][0],
        "a prefix: /matches/0 is the same line"
    );
    assert!(
        estimate(&sent[1], 1000) + u64::from(sent[1].max_tokens.unwrap()) <= 4000,
        "the fitted request fits"
    );
}

#[tokio::test]
async fn a_request_that_cannot_fit_is_not_sent_and_fails_as_context_overflow() {
    let r = rig(Limits::default(), None);
    r.model.with_context_tokens(300).text("never asked for");
    let err = r
        .agents
        .invoke(&request(AgentRole::Planner), &config())
        .await
        .unwrap_err();
    let InvokeError::ContextOverflow {
        message,
        context_tokens,
        prompt_tokens,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(
        message.starts_with("not sent: the request needs about "),
        "{message}"
    );
    assert_eq!(*context_tokens, Some(300));
    assert!(prompt_tokens.unwrap() > 300);
    assert!(r.model.requests().is_empty(), "nothing was sent");
    let exchanges = r.hooks.exchanges.lock().unwrap();
    let e = exchanges[0].outcome.as_ref().unwrap_err();
    assert_eq!(e.class, ErrorClass::ContextOverflow);
    assert_eq!(
        r.hooks.steps.lock().unwrap()[0].1.status,
        StepStatus::ContextOverflow
    );
}

fn overflow(limit: u32, prompt: u64) -> ModelError {
    let mut e = ModelError::from_status(
        400,
        format!("HTTP 400 Bad Request: This model's maximum context length is {limit} tokens. However, you requested {prompt} tokens"),
    );
    e.class = ErrorClass::ContextOverflow;
    e.context_tokens = Some(limit);
    e.usage = Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: 0,
    });
    e
}

#[tokio::test]
async fn a_context_length_error_is_fitted_to_and_sent_once_more() {
    let r = rig(Limits::default(), None);
    r.model
        .tool_calls(&[("a", "search_logs", json!({"lines": 300}))])
        .push(Err(overflow(5000, 12_000)))
        .text("answer");
    let reply = r
        .agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap();
    assert_eq!(reply.content, "answer");
    let sent = r.model.requests();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[1].fit, None);
    assert_eq!(sent[2].fit.map(|f| f.context_tokens), Some(5000));
    assert!(shown_results(&sent[2])[0]["shortened"].is_string());
    let turns: Vec<u32> = r
        .hooks
        .steps
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.1.turn)
        .collect();
    assert_eq!(turns, [1, 2, 3], "the refitted call is a turn of its own");
    let statuses: Vec<StepStatus> = r
        .hooks
        .steps
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.1.status)
        .collect();
    assert_eq!(statuses[1], StepStatus::ContextOverflow);
    assert_eq!(
        r.hooks.steps.lock().unwrap()[1].1.prompt_tokens,
        12_000,
        "reported tokens kept"
    );

    // A Planner's request has nothing to shorten: the server's error stands, sent once.
    let r = rig(Limits::default(), None);
    r.model
        .push(Err(overflow(600, 1500)))
        .text("never asked for");
    let err = r
        .agents
        .invoke(&request(AgentRole::Planner), &config())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "context_overflow");
    assert!(
        err.message().contains("maximum context length is 600"),
        "{err}"
    );
    assert_eq!(r.model.requests().len(), 1);
}

#[tokio::test]
async fn a_fitted_and_refitted_run_replays_request_for_request() {
    use diag_runfile::{RecordedModel, RecordedTools, Recorder as RunRecorder, Tape};
    // Live: a known context size, a large tool output, a context-length error, a refit.
    let model = Arc::new(ScriptedModel::new());
    model
        .with_context_tokens(6000)
        .tool_calls(&[("a", "search_logs", json!({"lines": 300}))])
        .push(Err(overflow(5000, 9000)))
        .text("answer");
    let log = Arc::new(MemoryInvocationLog::new());
    let recorder = RunRecorder::new(log.clone());
    let tools = Arc::new(EchoTools { barrier: None });
    let live = ModelAgents {
        models: AgentModels::single(model.clone()),
        tools: tools.clone(),
        log: recorder.clone(),
        hooks: recorder.clone(),
        clock: Arc::new(FixedClock(Timestamp::from_unix_ms(0))),
        limits: Limits::default(),
        run_plan_steps: true,
    };
    let mut executor = request(AgentRole::Executor);
    executor.output_schema = Some(OutputSchema {
        name: "executor_evidence_v2".into(),
        schema: json!({"type": "object"}),
        grammar: None,
    });
    live.invoke(&executor, &config()).await.unwrap();
    let exchanges = recorder.exchanges();
    assert!(exchanges.iter().all(|x| match x {
        diag_runfile::Exchange::Model(m) => m.request_sha256.is_some(),
        _ => true,
    }));

    // Replay: the runtime learns the recorded fits from the tape and every request hashes
    // the same, with no configured context size.
    let tape = Tape::new(exchanges, tools.catalog());
    let replay = ModelAgents {
        models: AgentModels::single(Arc::new(RecordedModel {
            role: AgentRole::Executor,
            tape: tape.clone(),
        })),
        tools: Arc::new(RecordedTools { tape: tape.clone() }),
        log: Arc::new(MemoryInvocationLog::new()),
        hooks: Arc::new(Recorder::default()),
        clock: Arc::new(FixedClock(Timestamp::from_unix_ms(0))),
        limits: Limits::default(),
        run_plan_steps: true,
    };
    let reply = replay.invoke(&executor, &config()).await.unwrap();
    assert_eq!(reply.content, "answer");
    assert_eq!(tape.divergence(), None);
}

// ---------------------------------------------------------------------------------------------
// The plan's steps, run before the Executor's first turn, and tool calls written in content.

/// An Executor request whose plan has these steps: `(step id, tool, arguments)`.
fn planned(steps: &[(&str, &str, Value)]) -> AgentRequest {
    let mut executor = request(AgentRole::Executor);
    executor.plan_calls = steps
        .iter()
        .map(|(id, tool, arguments)| PlanCall {
            step_id: (*id).into(),
            tool: (*tool).into(),
            arguments: arguments.clone(),
        })
        .collect();
    executor
}

#[tokio::test]
async fn the_plans_steps_run_and_are_recorded_before_the_first_executor_turn() {
    let r = rig(Limits::default(), None);
    r.model
        // The model repeats a plan step, then adds a call of its own.
        .tool_calls(&[("m1", "search_logs", json!({"query": "502"}))])
        .tool_calls(&[("m2", "search_logs", json!({"query": "pool"}))])
        .text("{}");
    let req = planned(&[
        ("s1", "search_logs", json!({"query": "502"})),
        ("s2", "search_logs", json!({"query": "timeout"})),
        // The same call again (keys in another order) runs once.
        ("s3", "search_logs", json!({"query": "502"})),
    ]);
    r.agents.invoke(&req, &config()).await.unwrap();

    let invs = r.log.invocations("run-1");
    let seen: Vec<(&str, &str, InvocationStatus)> = invs
        .iter()
        .map(|i| (i.invocation_id.as_str(), i.agent.as_str(), i.status))
        .collect();
    assert_eq!(
        seen,
        [
            ("inv-1", PLAN_STEP_AGENT, InvocationStatus::Ok),
            ("inv-2", PLAN_STEP_AGENT, InvocationStatus::Ok),
            ("inv-3", "executor", InvocationStatus::Blocked),
            ("inv-4", "executor", InvocationStatus::Ok),
        ]
    );
    assert_eq!(PLAN_STEP_AGENT, "planner");
    assert_eq!(invs[1].arguments, json!({"query": "timeout"}));
    assert_eq!(invs[2].output["duplicate_of"], "inv-1");

    // The first request already holds the plan's calls and their results, citable by id.
    let reqs = r.model.requests();
    let first = &reqs[0].messages;
    assert_eq!(
        first.len(),
        5,
        "system, input, the plan's calls, two results"
    );
    assert_eq!(first[2].role, Role::Assistant);
    assert_eq!(first[2].content, None);
    let calls: Vec<(&str, &str)> = first[2]
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(calls, [("inv-1", "search_logs"), ("inv-2", "search_logs")]);
    for (m, inv) in first[3..].iter().zip(&invs) {
        assert_eq!(m.role, Role::Tool);
        assert_eq!(m.tool_call_id.as_deref(), Some(inv.invocation_id.as_str()));
        let shown: Value = serde_json::from_str(m.content.as_deref().unwrap()).unwrap();
        assert_eq!(shown["invocation_id"], inv.invocation_id);
        assert_eq!(shown["output"], inv.output);
    }
    // Model turns are numbered from 1: the plan's calls are no turn of the model.
    let turns: Vec<u32> = r
        .hooks
        .steps
        .lock()
        .unwrap()
        .iter()
        .map(|(_, s)| s.turn)
        .collect();
    assert_eq!(turns, [1, 2, 3]);
}

#[tokio::test]
async fn the_plans_steps_spend_the_call_budget_and_skip_completed_queries() {
    // Budget 2: the plan's first two distinct steps run, the third does not, and the model's
    // own call is blocked by the budget.
    let r = rig(
        Limits {
            max_tool_calls: 2,
            ..Limits::default()
        },
        None,
    );
    r.model
        .tool_calls(&[("m1", "search_logs", json!({"query": "new"}))])
        .text("{}");
    let req = planned(&[
        ("s1", "search_logs", json!({"query": "a"})),
        ("s2", "search_logs", json!({"query": "b"})),
        ("s3", "search_logs", json!({"query": "c"})),
    ]);
    r.agents.invoke(&req, &config()).await.unwrap();
    let invs = r.log.invocations("run-1");
    let seen: Vec<(&Value, InvocationStatus)> = invs
        .iter()
        .map(|i| (&i.arguments["query"], i.status))
        .collect();
    assert_eq!(
        seen,
        [
            (&json!("a"), InvocationStatus::Ok),
            (&json!("b"), InvocationStatus::Ok),
            (&json!("new"), InvocationStatus::Blocked),
        ]
    );
    assert!(invs[2].output["error"]
        .as_str()
        .unwrap()
        .contains("budget of 2"));

    // Round 2: a step that repeats a query the previous round completed is not run again.
    let r = rig(Limits::default(), None);
    r.model.text("{}");
    let mut req = planned(&[
        (
            "s1",
            "search_logs",
            json!({"since": "14:00", "query": "502"}),
        ),
        ("s2", "search_logs", json!({"query": "pool"})),
    ]);
    req.round = 2;
    req.completed_queries = vec![diag_core::protocol::QueryRef::new(
        "search_logs",
        &json!({"query": "502", "since": "14:00"}),
    )];
    r.agents.invoke(&req, &config()).await.unwrap();
    let invs = r.log.invocations("run-1");
    assert_eq!(invs.len(), 1);
    assert_eq!(invs[0].arguments, json!({"query": "pool"}));
    assert_eq!(
        (invs[0].round, invs[0].invocation_id.as_str()),
        (2, "inv-1")
    );
}

#[tokio::test]
async fn with_plan_steps_off_the_executor_starts_from_its_input_alone() {
    let mut r = rig(Limits::default(), None);
    r.agents.run_plan_steps = false;
    r.model
        .tool_calls(&[("m1", "search_logs", json!({"query": "502"}))])
        .text("{}");
    let req = planned(&[("s1", "search_logs", json!({"query": "502"}))]);
    r.agents.invoke(&req, &config()).await.unwrap();
    let invs = r.log.invocations("run-1");
    let seen: Vec<(&str, &str, InvocationStatus)> = invs
        .iter()
        .map(|i| (i.invocation_id.as_str(), i.agent.as_str(), i.status))
        .collect();
    assert_eq!(seen, [("inv-1", "executor", InvocationStatus::Ok)]);
    let first = &r.model.requests()[0].messages;
    assert_eq!(
        first.iter().map(|m| m.role).collect::<Vec<_>>(),
        [Role::System, Role::User]
    );
}

#[tokio::test]
async fn a_fenced_json_tool_call_in_the_content_is_run_and_recorded() {
    let r = rig(Limits::default(), None);
    let written = "```json\n{\"name\": \"search_logs\", \"arguments\": {\"query\": \"502\"}}\n```";
    r.model
        .text(written)
        // Prose mentioning a call is an answer.
        .text("I would call {\"name\": \"search_logs\", \"arguments\": {}} next.");
    let reply = r
        .agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap();
    assert!(
        reply.content.starts_with("I would call"),
        "{}",
        reply.content
    );
    let invs = r.log.invocations("run-1");
    assert_eq!(invs.len(), 1);
    assert_eq!(
        (invs[0].invocation_id.as_str(), invs[0].agent.as_str()),
        ("inv-1", "executor")
    );
    assert_eq!(invs[0].arguments, json!({"query": "502"}));
    assert_eq!(invs[0].status, InvocationStatus::Ok);
    // The next request shows the call as the tool call it is, then its result.
    let reqs = r.model.requests();
    assert_eq!(reqs.len(), 2);
    let messages = &reqs[1].messages;
    let call = &messages[2];
    assert_eq!(
        (call.role, call.content.as_deref()),
        (Role::Assistant, None)
    );
    assert_eq!(call.tool_calls.len(), 1);
    assert_eq!(
        (
            call.tool_calls[0].id.as_str(),
            call.tool_calls[0].name.as_str()
        ),
        ("call_0", "search_logs")
    );
    assert_eq!(messages[3].role, Role::Tool);
    assert_eq!(messages[3].tool_call_id.as_deref(), Some("call_0"));

    // A call to a tool that is not offered stays content: the answer.
    let r = rig(Limits::default(), None);
    let unknown = "{\"name\": \"delete_logs\", \"arguments\": {}}";
    r.model.text(unknown);
    let reply = r
        .agents
        .invoke(&request(AgentRole::Executor), &config())
        .await
        .unwrap();
    assert_eq!(reply.content, unknown);
    assert!(r.log.invocations("run-1").is_empty());
}

#[tokio::test]
async fn a_run_with_plan_steps_and_a_content_call_replays_request_for_request() {
    use diag_runfile::{Exchange, RecordedModel, RecordedTools, Recorder as RunRecorder, Tape};
    let model = Arc::new(ScriptedModel::new());
    model.with_evidence_turn();
    model
        .text("<tool_call>\n{\"name\": \"search_logs\", \"arguments\": {\"query\": \"pool\"}}\n</tool_call>")
        .text(&claim_doc("upstream returned 502 from payment-service"))
        .text(EVIDENCE_DOC);
    let log = Arc::new(MemoryInvocationLog::new());
    let recorder = RunRecorder::new(log.clone());
    let tools = Arc::new(EchoTools { barrier: None });
    let live = ModelAgents {
        models: AgentModels::single(model.clone()),
        tools: tools.clone(),
        log: recorder.clone(),
        hooks: recorder.clone(),
        clock: Arc::new(FixedClock(Timestamp::from_unix_ms(0))),
        limits: Limits::default(),
        run_plan_steps: true,
    };
    let executor = {
        let mut e = planned(&[("s1", "search_logs", json!({"query": "502"}))]);
        e.evidence = evidence_request().evidence;
        e
    };
    let reply = live.invoke(&executor, &config()).await.unwrap();
    assert_eq!(reply.content, EVIDENCE_DOC);
    let exchanges = recorder.exchanges();
    let kinds: Vec<String> = exchanges
        .iter()
        .map(|x| match x {
            Exchange::Model(m) => format!(
                "model {}{}",
                m.turn,
                if m.evidence_turn { " evidence" } else { "" }
            ),
            Exchange::Tool(t) => format!(
                "{} {}",
                t.invocation_id,
                if t.plan_step { "plan" } else { "model" }
            ),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "inv-1 plan",
            "model 1",
            "inv-2 model",
            "model 2",
            "model 3 evidence"
        ]
    );

    // Replay: the tape says the plan's steps ran, the content call is read again from the
    // recorded content, and every request hashes the same.
    let tape = Tape::new(exchanges.clone(), tools.catalog());
    assert!(tape.has_plan_steps());
    let replay_log = Arc::new(MemoryInvocationLog::new());
    let replay = ModelAgents {
        models: AgentModels::single(Arc::new(RecordedModel {
            role: AgentRole::Executor,
            tape: tape.clone(),
        })),
        tools: Arc::new(RecordedTools { tape: tape.clone() }),
        log: replay_log.clone(),
        hooks: Arc::new(Recorder::default()),
        clock: Arc::new(FixedClock(Timestamp::from_unix_ms(0))),
        limits: Limits::default(),
        run_plan_steps: tape.has_plan_steps(),
    };
    let replayed = replay.invoke(&executor, &config()).await.unwrap();
    assert_eq!(replayed.content, EVIDENCE_DOC);
    assert_eq!(tape.divergence(), None);
    assert_eq!(replay_log.invocations("run-1"), log.invocations("run-1"));

    // A recording whose plan mark is taken away no longer reproduces.
    let unmarked: Vec<Exchange> = exchanges
        .into_iter()
        .map(|x| match x {
            Exchange::Tool(mut t) => {
                t.plan_step = false;
                Exchange::Tool(t)
            }
            m => m,
        })
        .collect();
    let tape = Tape::new(unmarked, tools.catalog());
    let replay = ModelAgents {
        models: AgentModels::single(Arc::new(RecordedModel {
            role: AgentRole::Executor,
            tape: tape.clone(),
        })),
        tools: Arc::new(RecordedTools { tape: tape.clone() }),
        log: Arc::new(MemoryInvocationLog::new()),
        hooks: Arc::new(Recorder::default()),
        clock: Arc::new(FixedClock(Timestamp::from_unix_ms(0))),
        limits: Limits::default(),
        // As the unmarked file would say, or as the marked one: either way it diverges.
        run_plan_steps: true,
    };
    let _ = replay.invoke(&executor, &config()).await;
    let d = tape.divergence().expect("diverged");
    assert!(
        d.message
            .contains("recorded as a model's call, replayed as a plan step"),
        "{d}"
    );
}
