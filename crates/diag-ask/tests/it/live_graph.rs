//! A whole diagnosis over real HTTP: the real nodes and agent runtime, the OpenAI-compatible
//! adapter talking to a real aimock server, and the real `search_logs` tool over the demo
//! environment's logs. Planner → Executor (two concurrent tool calls) → Gatekeeper →
//! Verified Input → Verifier → Composer, then checks on what each agent was sent.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use diag_ask::config::Config;
use diag_ask::setup::{builtin_registry, RegistryTools};
use diag_core::agent::runtime::{AgentModels, ModelAgents, NoHooks};
use diag_core::clock::{FixedClock, Timestamp};
use diag_core::graph::{InvokeOptions, NoopObserver, RunConfig};
use diag_core::limits::Limits;
use diag_core::protocol::{InvocationStatus, Verdict};
use diag_core::tools::{InvocationLog, MemoryInvocationLog};
use diag_diagnosis::nodes::{real_nodes, NodeDeps};
use diag_diagnosis::topology;
use diag_diagnosis::{DiagnosisState, STEP_LIMIT};
use diag_model_openai::{OpenAiConfig, OpenAiModel};
use serde_json::Value;

use diag_testkit::{demo, Aimock};

const KEY: &str = "sk-diag-live-graph-key-7f3a9c";
const KEY_VAR: &str = "DIAG_LIVE_GRAPH_KEY";

struct Run {
    state: DiagnosisState,
    log: Arc<MemoryInvocationLog>,
    requests: Vec<Value>,
}

async fn run_over(server: &Aimock, request_timeout: Duration) -> Run {
    let config = Config::parse(
        &format!(
            "[tools.search_logs]\npaths = [{:?}]\n[tools.search_runbooks]\npaths = [{:?}]\n",
            demo("logs"),
            demo("runbooks")
        ),
        "live.toml",
    )
    .unwrap();
    let clock = Arc::new(FixedClock(
        Timestamp::parse_rfc3339("2026-11-30T14:10:00Z").unwrap(),
    ));
    let mut openai = OpenAiConfig::new(server.base_url(), "diag-live-model");
    openai.api_key_env = Some(KEY_VAR.into());
    openai.request_timeout = request_timeout;
    openai.max_transport_retries = 0;
    let model =
        OpenAiModel::new_with_env(openai, |var| (var == KEY_VAR).then(|| OsString::from(KEY)))
            .unwrap();
    let log = Arc::new(MemoryInvocationLog::new());
    let tools = Arc::new(RegistryTools {
        registry: builtin_registry(&config).unwrap(),
        clock: clock.clone(),
    });
    let catalog = Arc::new(diag_core::agent::runtime::ToolRunner::catalog(
        tools.as_ref(),
    ));
    let agents = Arc::new(ModelAgents {
        models: AgentModels::single(Arc::new(model)),
        tools,
        log: log.clone(),
        hooks: Arc::new(NoHooks),
        clock: clock.clone(),
        limits: Limits::default(),
        // The Executor model's own two concurrent calls are the point here.
        run_plan_steps: false,
    });
    let graph = topology::compile(real_nodes(NodeDeps {
        invoker: agents,
        log: log.clone(),
        catalog,
        composer: diag_core::protocol::ComposerContract::CURRENT,
    }))
    .unwrap();
    let mut observer = NoopObserver;
    let state = graph
        .invoke(
            DiagnosisState::new(
                "why does checkout return 502 since 14:00?",
                diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0)),
            ),
            &RunConfig::new("s-live", "run-live"),
            InvokeOptions {
                step_limit: STEP_LIMIT,
                clock: clock.as_ref(),
                cancel: None,
                observer: &mut observer,
            },
        )
        .await
        .unwrap();
    let requests = server.chat_requests(6).await;
    Run {
        state,
        log,
        requests,
    }
}

fn body_of(requests: &[Value], marker: &str) -> Vec<String> {
    requests
        .iter()
        .map(|r| r["body"].to_string())
        .filter(|b| b.contains(marker))
        .collect()
}

#[tokio::test]
async fn a_whole_diagnosis_over_real_http_ends_with_the_composers_answer() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let run = run_over(&server, Duration::from_secs(10)).await;
    let s = &run.state;

    assert_eq!(
        s.path(),
        [
            "planner",
            "executor",
            "gatekeeper",
            "verified_input",
            "verifier",
            "composer"
        ]
    );
    assert_eq!(s.round.effective_verdict, Some(Verdict::Pass));
    assert!(!s.degraded);
    let answer = s.final_answer.as_deref().unwrap();
    assert!(answer.contains("no free database connection"), "{answer}");

    // The Executor's two tool calls ran against the real log files and were recorded with
    // run-local ids in the model's order.
    let invs = run.log.invocations("run-live");
    assert_eq!(invs.len(), 2);
    assert_eq!(
        (
            invs[0].invocation_id.as_str(),
            invs[1].invocation_id.as_str()
        ),
        ("inv-1", "inv-2")
    );
    assert!(invs.iter().all(|i| i.status == InvocationStatus::Ok));
    let line = invs[0].output["matches"][0]["line"].as_str().unwrap();
    assert!(line.contains("POST /v1/charges timed out"), "{line}");

    // Both bindings passed against the real tool output; matched_text came from the log.
    let raw = s.round.gatekeeper_raw.as_ref().unwrap();
    assert_eq!((raw.audit.passed, raw.audit.failed), (2, 0));
    assert_eq!(
        s.round.verified_evidence[0].matched_text,
        "upstream returned 502 from payment-service"
    );

    // Five model calls: planner, executor ×2, verifier, composer, and nothing else.
    assert_eq!(run.requests.len(), 5, "{:#?}", run.requests);
}

#[tokio::test]
async fn verifier_and_composer_requests_carry_no_raw_tool_output_and_no_request_carries_the_key() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let run = run_over(&server, Duration::from_secs(10)).await;
    let bodies: Vec<String> = run.requests.iter().map(|r| r["body"].to_string()).collect();
    assert_eq!(bodies.len(), 5);

    // Text that is in the tool output but in no quote: the Executor saw it, no one after it.
    let unquoted = ["POST /v1/charges timed out", "idle=0", "HikariPool-1"];
    let executor_followup = body_of(&run.requests, "\\\"invocation_id\\\"");
    assert!(
        executor_followup
            .iter()
            .any(|b| unquoted.iter().all(|u| b.contains(u))),
        "the Executor's second turn shows the full tool output"
    );
    // The declared inputs are compact JSON inside the user message; the prompts mention the
    // same field names with a space after the colon.
    for marker in ["\\\"gatekeeper_audit\\\":{", "\\\"allowed_claims\\\":["] {
        let later = body_of(&run.requests, marker);
        assert_eq!(later.len(), 1, "one request with {marker}");
        for u in unquoted {
            assert!(
                !later[0].contains(u),
                "{marker} request carries raw tool output {u:?}"
            );
        }
        assert!(!later[0].contains("EXECUTOR-HYPOTHESIS-MARKER"));
    }
    for b in &bodies {
        assert!(!b.contains(KEY), "a request body carries the API key");
    }
}

#[tokio::test]
async fn a_model_slower_than_the_timeout_fails_the_planner_and_falls_back() {
    // Same server, but every answer now takes longer than the client waits.
    let server = Aimock::start_with("graph_slow.json", Some(KEY));
    let run = run_over(&server, Duration::from_millis(300)).await;
    let s = &run.state;
    assert_eq!(s.path(), ["planner", "planner", "fallback"]);
    assert!(s.degraded);
    assert!(s
        .final_answer
        .as_deref()
        .unwrap()
        .contains("could not establish trusted material"));
}
