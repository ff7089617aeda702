//! A real (tiny) model: llama.cpp's own OpenAI-compatible server (`llama-server --jinja`)
//! serving SmolLM2-135M-Instruct on 127.0.0.1, started by the test (`scripts/install-peers`
//! installs both; a missing install fails). The server is identified as llama.cpp and sent each
//! contract's grammar form, and the Planner's contract is met; a whole `diag ask` ends stored
//! with a defined status and no panic, its Planner request carrying the bounded plan grammar,
//! its Executor loop requests tools without `response_format`, and its evidence turn following;
//! the Executor's evidence turn returns a document that meets its contract; a request longer
//! than the server's context ends `context_overflow` with the server's own message in the
//! trace. Protocol assertions only: quality figures are `scripts/bench-model`'s.
//!
//! Answers are kept short (`max_tokens`) and runs few, so the suite stays quick on two cores.
//! Nothing here depends on timing: every wait is for a condition, with a generous bound.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use diag_ask::config::Config;
use diag_ask::setup::{builtin_registry, RegistryTools};
use diag_core::agent::runtime::{
    AgentModels, AgentStepRecord, ModelAgents, ModelExchange, RunHooks, ToolRunner,
};
use diag_core::clock::{FixedClock, Timestamp};
use diag_core::graph::RunConfig;
use diag_core::limits::Limits;
use diag_core::limits::MaxTokensConfig;
use diag_core::model::{StructuredOutput, StructuredOutputSetting};
use diag_core::protocol::{parse_executor, parse_plan, PlannerMode};
use diag_core::tools::MemoryInvocationLog;
use diag_diagnosis::nodes::{real_nodes, NodeDeps};
use diag_diagnosis::{AgentStatus, DiagnosisNodes, DiagnosisState, ExecutorStatus};
use diag_model_openai::{OpenAiConfig, OpenAiModel};
use serde_json::Value;

use crate::support::cli_env;
use cli_env::{assert_schema, repo_file, TestEnv};
use diag_testkit::bounded;
use diag_testkit::{demo, LlamaServer, SMOLLM2};

const QUESTION: &str = "why does checkout return 502 since 14:00?";

/// The run clock of the demo incident: the tools and the prompts read it.
const DEMO_NOW: &str = "2026-11-30T14:10:00Z";

/// Small answers: the Planner's default (a plan of 6 steps with every argument written, which
/// this model writes in about 800 tokens), the others short enough for two busy cores.
const MAX_TOKENS: MaxTokensConfig = MaxTokensConfig {
    planner: 1024,
    executor: 256,
    verifier: 256,
    composer: 256,
};

#[derive(Default)]
struct Exchanges(Mutex<Vec<ModelExchange>>);

impl RunHooks for Exchanges {
    fn agent_step(&self, _config: &RunConfig, _step: &AgentStepRecord) {}
    fn model_exchange(&self, _config: &RunConfig, exchange: &ModelExchange) {
        self.0.lock().unwrap().push(exchange.clone());
    }
}

/// Sampling for the Planner tests: greedy, as diag's default. Held to the plan's grammar form
/// the model may copy its first step until the list is full; the grammar leaves step ids out
/// and the parser numbers them by position, so such a plan still meets the contract.
const PLAN_TEMPERATURE: f32 = 0.0;

/// The real nodes over the demo logs (and runbooks, with `runbooks`), every agent on `server`
/// with `setting`, under `limits`: the nodes, the exchanges they record and the catalog's
/// tool names.
fn live_nodes(
    server: &LlamaServer,
    setting: StructuredOutputSetting,
    runbooks: bool,
    limits: Limits,
) -> (DiagnosisNodes, Arc<Exchanges>, Vec<String>) {
    let mut tools_toml = format!("[tools.search_logs]\npaths = [{:?}]\n", demo("logs"));
    if runbooks {
        tools_toml.push_str(&format!(
            "[tools.search_runbooks]\npaths = [{:?}]\n",
            demo("runbooks")
        ));
    }
    let config = Config::parse(&tools_toml, "live.toml").unwrap();
    let clock = Arc::new(FixedClock(Timestamp::parse_rfc3339(DEMO_NOW).unwrap()));
    let tools = Arc::new(RegistryTools {
        registry: builtin_registry(&config).unwrap(),
        clock: clock.clone(),
    });
    let catalog: Vec<String> = tools.catalog().into_iter().map(|t| t.name).collect();
    let mut openai = OpenAiConfig::new(server.base_url(), SMOLLM2);
    openai.temperature = Some(PLAN_TEMPERATURE);
    openai.request_timeout = Duration::from_secs(600);
    openai.structured_output = setting;
    let exchanges = Arc::new(Exchanges::default());
    let log = Arc::new(MemoryInvocationLog::new());
    let agents = Arc::new(ModelAgents {
        models: AgentModels::single(Arc::new(OpenAiModel::new(openai).unwrap())),
        tools: tools.clone(),
        log: log.clone(),
        hooks: exchanges.clone(),
        clock,
        limits,
        // As a configuration that does not set `[executor] run_plan_steps`.
        run_plan_steps: true,
    });
    let nodes = real_nodes(NodeDeps {
        invoker: agents,
        log,
        catalog: Arc::new(tools.catalog()),
        composer: diag_core::protocol::ComposerContract::CURRENT,
    });
    (nodes, exchanges, catalog)
}

/// One Planner run against `server` with `setting`: its recorded exchanges, the state it left
/// and the catalog's tool names.
async fn plan(
    server: &LlamaServer,
    setting: StructuredOutputSetting,
) -> (Vec<ModelExchange>, DiagnosisState, Vec<String>) {
    let limits = Limits {
        max_tokens: MAX_TOKENS,
        ..Limits::default()
    };
    let (nodes, exchanges, catalog) = live_nodes(server, setting, true, limits);
    let mut state = DiagnosisState::new(
        QUESTION,
        diag_core::protocol::RunClock::at(Timestamp::parse_rfc3339(DEMO_NOW).unwrap()),
    );
    nodes
        .planner
        .run(
            &mut state,
            &RunConfig::new("s-live-model", "run-live-model"),
        )
        .await;
    let recorded = exchanges.0.lock().unwrap().clone();
    (recorded, state, catalog)
}

#[tokio::test]
async fn with_structured_output_the_planner_meets_its_contract() {
    let server = LlamaServer::start(8192);

    let (exchanges, state, catalog) = plan(&server, StructuredOutputSetting::Auto).await;
    let answer = exchanges
        .last()
        .and_then(|x| x.outcome.as_ref().ok())
        .unwrap_or_else(|| panic!("no answer: {exchanges:#?}\n{}", server.log()));
    assert_eq!(
        state.round.planner_status,
        Some(AgentStatus::Completed),
        "the plan broke its contract: {:?}\nevents: {:?}",
        answer.content,
        state.events
    );
    let plan_doc = state.round.plan.as_ref().unwrap();
    assert!(!plan_doc.steps.is_empty());
    assert!(plan_doc.steps.iter().all(|s| catalog.contains(&s.tool)));
    // The server named itself llama.cpp (`GET /v1/models`): under `auto` the plan went as
    // `json_object` with its grammar form, at once, in one recorded call.
    assert_eq!(
        answer.structured_output,
        Some(StructuredOutput::JsonObjectSchema)
    );
    assert_eq!(exchanges.len(), 1, "one call, nothing refused");
    let contract = exchanges[0].request.response_format.as_ref().unwrap();
    let grammar = contract.grammar.as_ref().expect("the plan's grammar form");
    assert_eq!(grammar["properties"]["steps"]["maxItems"], 6);
    assert_eq!(grammar["properties"]["steps"]["minItems"], 1);

    // The same model, the same request, without the contract on the wire: no plan.
    let (exchanges, state, _) = plan(&server, StructuredOutputSetting::Off).await;
    let answer = exchanges
        .last()
        .and_then(|x| x.outcome.as_ref().ok())
        .unwrap_or_else(|| panic!("no answer: {exchanges:#?}\n{}", server.log()));
    assert_eq!(answer.structured_output, Some(StructuredOutput::Off));
    assert_ne!(
        state.round.planner_status,
        Some(AgentStatus::Completed),
        "without structured output this model met the contract: {:?}",
        answer.content
    );
    assert!(state.round.plan.is_none());
}

/// The demo plan, as the Planner's contract has it: the evidence turn's test starts at the
/// Executor, so it does not depend on what this model plans.
const DEMO_PLAN: &str = r#"{"schema": "planner_plan_v1", "mode": "NORMAL",
  "hypotheses": [{"id": "h1", "statement": "payment-service is failing checkout's upstream calls"}],
  "steps": [{"id": "s1", "goal": "find 502s in the checkout logs", "tool": "search_logs",
             "arguments": {"query": "upstream returned 502", "service": "checkout", "limit": 2}}]}"#;

/// Tries of the evidence turn's test; each is a fresh Executor with the server's fixed seed.
const EVIDENCE_TRIES: usize = 3;

/// One Executor attempt on the demo plan against `server` (`auto`), from a fresh state: the
/// exchanges it recorded and the state it left.
async fn execute(server: &LlamaServer) -> (Vec<ModelExchange>, DiagnosisState) {
    let limits = Limits {
        max_turns: 2,
        max_tokens: MaxTokensConfig {
            executor: 512,
            ..MAX_TOKENS
        },
        ..Limits::default()
    };
    let (nodes, exchanges, _) = live_nodes(server, StructuredOutputSetting::Auto, false, limits);
    let mut state = DiagnosisState::new(
        QUESTION,
        diag_core::protocol::RunClock::at(Timestamp::parse_rfc3339(DEMO_NOW).unwrap()),
    );
    let names = ["search_logs"];
    state.round.plan = Some(
        parse_plan(DEMO_PLAN, &names, PlannerMode::Normal, None).expect("the demo plan parses"),
    );
    state.round.planner_status = Some(AgentStatus::Completed);
    nodes
        .executor
        .run(
            &mut state,
            &RunConfig::new("s-live-model", "run-live-evidence"),
        )
        .await;
    let recorded = exchanges.0.lock().unwrap().clone();
    (recorded, state)
}

/// The evidence turn against the real tiny model: when its tool loop ends without an evidence
/// document, the document it asks for separately (no tools, the run-built schema as a
/// grammar) parses under the contract at least once in a few tries. How often it does, and
/// what the runs make of it, is `scripts/bench-model`'s figure, not an assertion here.
#[tokio::test]
async fn the_evidence_turn_returns_a_document_that_meets_the_contract() {
    let server = LlamaServer::start(8192);
    let mut seen = Vec::new();
    for _ in 0..EVIDENCE_TRIES {
        let (exchanges, state) = execute(&server).await;
        let Some(turn) = exchanges.iter().find(|x| x.request.evidence_turn) else {
            // The loop's own answer met the contract: no evidence turn was needed.
            seen.push(format!(
                "no evidence turn: {:?}",
                state.round.executor_status
            ));
            continue;
        };
        assert!(turn.request.tools.is_empty());
        let schema = turn
            .request
            .response_format
            .as_ref()
            .expect("the run-built schema");
        assert!(schema.grammar.is_some());
        let content = match &turn.outcome {
            Ok(r) => {
                assert_eq!(
                    r.structured_output,
                    Some(StructuredOutput::JsonObjectSchema)
                );
                r.content.clone().unwrap_or_default()
            }
            Err(e) => {
                seen.push(format!("evidence turn failed: {e}"));
                continue;
            }
        };
        match parse_executor(&content) {
            Ok(_) => {
                assert_eq!(
                    state.round.executor_status,
                    Some(ExecutorStatus::Completed),
                    "the node takes the document the turn returned"
                );
                return;
            }
            Err(v) => seen.push(format!("{}: {content}", v.reason())),
        }
    }
    panic!(
        "no evidence turn met the contract in {EVIDENCE_TRIES} tries:\n{}\n{}",
        seen.join("\n"),
        server.log()
    );
}

/// One diagnosis against llama-server, through the Planner and the Executor, as the protocol
/// has it: the Planner's request goes with the plan's bounded grammar form and is answered; the
/// Executor's loop requests offer tools and carry no `response_format` (recorded as `off`), and
/// the server answers them; and the Executor's document comes from its evidence turn (no tools,
/// the run-built grammar) unless the loop's own answer already met the contract. Quality is
/// `scripts/bench-model`'s; this asserts only what was sent and that it was taken.
#[tokio::test]
async fn a_diagnosis_keeps_tools_and_contracts_apart_and_the_server_takes_every_request() {
    let server = LlamaServer::start(8192);
    let limits = Limits {
        max_turns: 2,
        max_tokens: MaxTokensConfig {
            executor: 512,
            ..MAX_TOKENS
        },
        ..Limits::default()
    };
    let (nodes, exchanges, _) = live_nodes(&server, StructuredOutputSetting::Auto, true, limits);
    let mut state = DiagnosisState::new(
        QUESTION,
        diag_core::protocol::RunClock::at(Timestamp::parse_rfc3339(DEMO_NOW).unwrap()),
    );
    let config = RunConfig::new("s-live-model", "run-live-protocol");
    nodes.planner.run(&mut state, &config).await;
    if state.round.planner_status != Some(AgentStatus::Completed) {
        // The protocol of the Executor does not depend on this model's plan.
        state.round.plan = Some(
            parse_plan(DEMO_PLAN, &["search_logs"], PlannerMode::Normal, None)
                .expect("the demo plan parses"),
        );
        state.round.planner_status = Some(AgentStatus::Completed);
    }
    nodes.executor.run(&mut state, &config).await;
    let recorded = exchanges.0.lock().unwrap().clone();
    let log = server.log();
    for x in &recorded {
        assert!(
            x.outcome.is_ok(),
            "{} turn {} was not taken: {:?}
{log}",
            x.agent,
            x.turn,
            x.outcome
        );
    }
    let planner = &recorded[0];
    assert_eq!(planner.agent.as_str(), "planner");
    let grammar = planner
        .request
        .response_format
        .as_ref()
        .unwrap()
        .grammar
        .as_ref();
    assert_eq!(grammar.unwrap()["properties"]["steps"]["maxItems"], 6);
    assert_eq!(
        planner.outcome.as_ref().unwrap().structured_output,
        Some(StructuredOutput::JsonObjectSchema)
    );
    let executor: Vec<&ModelExchange> = recorded
        .iter()
        .filter(|x| x.agent.as_str() == "executor")
        .collect();
    let (turns, rest): (Vec<&ModelExchange>, Vec<&ModelExchange>) =
        executor.into_iter().partition(|x| !x.request.evidence_turn);
    assert!(!turns.is_empty(), "the Executor's loop asked the model");
    for x in &turns {
        assert!(!x.request.tools.is_empty(), "the loop offers tools");
        assert_eq!(
            x.outcome.as_ref().unwrap().structured_output,
            Some(StructuredOutput::Off),
            "no response_format beside tools"
        );
    }
    match rest.as_slice() {
        [turn] => {
            assert!(
                turn.request.tools.is_empty(),
                "the evidence turn offers no tool"
            );
            assert_eq!(
                turn.outcome.as_ref().unwrap().structured_output,
                Some(StructuredOutput::JsonObjectSchema)
            );
        }
        [] => assert_eq!(
            state.round.executor_status,
            Some(ExecutorStatus::Completed),
            "no evidence turn: the loop's own answer met the contract"
        ),
        more => panic!("{} evidence turns", more.len()),
    }
}

/// A conversation that holds a tool-call turn (an assistant message with tool calls and no
/// text, then the tool's result) goes through llama.cpp's server, which refuses the `null`
/// content OpenAI itself sends there, and whose chat template fails on a message without
/// `content`: diag sends `""`.
#[tokio::test]
async fn a_conversation_with_a_tool_call_turn_is_taken_by_llama_cpp() {
    use diag_core::model::{ChatModel, ChatRequest, Message, ToolCall, ToolChoice};
    let server = LlamaServer::start(8192);
    let mut openai = OpenAiConfig::new(server.base_url(), SMOLLM2);
    openai.request_timeout = Duration::from_secs(600);
    openai.max_transport_retries = 0;
    let model = OpenAiModel::new(openai).unwrap();
    let mut request = ChatRequest::new(vec![
        Message::system("You diagnose incidents."),
        Message::user("why does checkout return 502?"),
        Message::assistant(
            None,
            vec![ToolCall {
                id: "call_1".into(),
                name: "search_logs".into(),
                arguments: serde_json::json!({"query": "502"}),
            }],
        ),
        Message::tool_result(
            "call_1",
            r#"{"matches": [{"line": "upstream returned 502"}]}"#,
        ),
    ]);
    request.tool_choice = Some(ToolChoice::None);
    request.max_tokens = Some(16);
    let answer = model.complete(&request).await;
    assert!(answer.is_ok(), "{answer:?}\n{}", server.log());
}

/// A configuration for `server` over the demo logs and runbooks, with small answers.
fn live_env(server: &LlamaServer) -> TestEnv {
    let env = TestEnv::new();
    std::fs::write(
        env.path("diag.toml"),
        format!(
            "[models.smol]\nbase_url = {:?}\nmodel = {SMOLLM2:?}\ntemperature = 0.0\n\
             timeout_secs = 600\n\
             [tools.search_logs]\npaths = [{:?}]\n\
             [tools.search_runbooks]\npaths = [{:?}]\n\
             [limits]\nmax_turns = 3\n\
             [limits.max_tokens]\nplanner = {}\nexecutor = {}\nverifier = {}\ncomposer = {}\n",
            server.base_url(),
            repo_file("fixtures/demo/logs").display().to_string(),
            repo_file("fixtures/demo/runbooks").display().to_string(),
            MAX_TOKENS.planner,
            MAX_TOKENS.executor,
            MAX_TOKENS.verifier,
            MAX_TOKENS.composer,
        ),
    )
    .unwrap();
    env
}

/// `diag ARGS` in `env`, bounded generously (a hang guard, not a timing check).
fn run(env: &TestEnv, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = env.command();
    cmd.args(args);
    let out = bounded::output(&mut cmd, Duration::from_secs(900));
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn a_whole_ask_ends_stored_with_a_defined_status_and_no_panic() {
    let server = LlamaServer::start(8192);
    let env = live_env(&server);
    let (code, stdout, stderr) = run(&env, &["--config", "diag.toml", "ask", QUESTION, "--json"]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        matches!(code, Some(0 | 3)),
        "exit {code:?} (0: answered, 3: run FAILED)\n{stderr}\n{}",
        server.log()
    );
    let asked: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_schema("ask.v2.json", &asked);
    let status = asked["status"].as_str().unwrap();
    assert!(["SUCCESS", "FAILED"].contains(&status), "{asked}");
    let run_id = asked["run_id"].as_str().unwrap();

    let (code, stdout, stderr) = run(&env, &["trace", run_id, "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let trace: Value = serde_json::from_str(&stdout).unwrap();
    assert_schema("trace.v1.json", &trace);
    assert_eq!(trace["run"]["status"], status);
    let steps = trace["agent_steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    assert!(steps.iter().all(|s| s["model"] == SMOLLM2), "{steps:#?}");
    assert_eq!(steps[0]["agent"], "planner");
    assert_eq!(steps[0]["structured_output"], "json_object_schema");
    assert!(steps[0]["prompt_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn a_request_longer_than_the_context_ends_context_overflow_with_the_servers_message() {
    // The Planner's request is about a thousand tokens; this server has 512.
    let server = LlamaServer::start(512);
    let env = live_env(&server);
    let (code, stdout, stderr) = run(&env, &["--config", "diag.toml", "ask", QUESTION, "--json"]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The server refused every request: no model answered (exit 7), the Fallback answers, and
    // the one line names the agent, the class, the endpoint and the server's own words.
    assert_eq!(code, Some(7), "no model answered\n{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "diag: no model answered: planner (context_overflow) at {}, model {SMOLLM2}: HTTP 400",
            server.base_url()
        )),
        "{stderr}"
    );
    let asked: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(asked["degraded"], true);
    assert_eq!(asked["model_answered"], false);
    let run_id = asked["run_id"].as_str().unwrap();
    let answer = asked["answer"].as_str().unwrap();
    assert!(answer.contains("(`context_overflow`)"), "{answer}");
    assert!(
        answer.contains("exceeds the available context size (512 tokens)"),
        "{answer}"
    );
    assert!(
        answer.contains("the model's context is 512 tokens"),
        "{answer}"
    );

    let (code, text, _) = run(&env, &["trace", run_id]);
    assert_eq!(code, Some(0));
    assert!(text.contains("failed model calls"), "{text}");
    assert!(text.contains("context_overflow"), "{text}");
    assert!(
        text.contains("exceeds the available context size (512 tokens)"),
        "the server's message is in the trace:\n{text}"
    );

    let (_, stdout, _) = run(&env, &["trace", run_id, "--json"]);
    let trace: Value = serde_json::from_str(&stdout).unwrap();
    assert_schema("trace.v1.json", &trace);
    let step = &trace["agent_steps"][0];
    assert_eq!(step["status"], "context_overflow");
    assert_eq!(step["error"]["class"], "context_overflow");
    assert_eq!(step["error"]["status"], 400);
    assert_eq!(step["error"]["context_tokens"], 512);
    assert!(
        step["prompt_tokens"].as_u64().unwrap() >= 512,
        "the size the server reported is kept: {step}"
    );
    assert_eq!(
        trace["agent_steps"].as_array().unwrap().len(),
        1,
        "nothing to shorten in a plan request: not sent again"
    );
}
