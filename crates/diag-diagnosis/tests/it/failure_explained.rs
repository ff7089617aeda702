//! The real nodes and topology over a scripted invoker: each agent request carries the
//! contract's schema, and a failed stage ends in a Fallback whose reason quotes the failed
//! model call and whose first next step is the one its failure class calls for.

use std::sync::Arc;

use diag_core::agent::{AgentRole, InvokeError, ScriptedInvoker};
use diag_core::clock::{FixedClock, Timestamp};
use diag_core::graph::{DetailValue, InvokeOptions, NoopObserver, RunConfig};
use diag_core::tools::{MemoryInvocationLog, ToolSpec};
use diag_diagnosis::nodes::{real_nodes, NodeDeps};
use diag_diagnosis::{topology, DiagnosisState, STEP_LIMIT};
use serde_json::json;

fn catalog() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "search_logs".into(),
            description: "search the logs".into(),
            parameters: json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "text"},
                "limit": {"type": "integer", "minimum": 1}},
                "required": ["query"], "additionalProperties": false}),
        },
        ToolSpec {
            name: "current_time".into(),
            description: "now".into(),
            parameters: json!({"type": "object", "properties": {}}),
        },
    ]
}

async fn run(model: Arc<ScriptedInvoker>) -> DiagnosisState {
    let graph = topology::compile(real_nodes(NodeDeps {
        invoker: model,
        log: Arc::new(MemoryInvocationLog::new()),
        catalog: Arc::new(catalog()),
        composer: diag_core::protocol::ComposerContract::CURRENT,
    }))
    .unwrap();
    let clock = FixedClock(Timestamp::parse_rfc3339("2026-11-30T14:10:00Z").unwrap());
    let mut observer = NoopObserver;
    graph
        .invoke(
            DiagnosisState::new(
                "why does checkout return 502 since 14:00?",
                diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0)),
            ),
            &RunConfig::new("s-1", "run-1"),
            InvokeOptions {
                step_limit: STEP_LIMIT,
                clock: &clock,
                cancel: None,
                observer: &mut observer,
            },
        )
        .await
        .unwrap()
}

/// The answer's next steps, one per line.
fn next_steps(answer: &str) -> Vec<&str> {
    answer
        .split("**Next steps:**\n")
        .nth(1)
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .collect()
}

#[tokio::test]
async fn the_planner_is_asked_for_its_contract_with_the_tools_as_enums() {
    let model = Arc::new(ScriptedInvoker::new());
    model
        .reply(AgentRole::Planner, "prose")
        .reply(AgentRole::Planner, "prose");
    run(model.clone()).await;
    let request = &model.requests_for(AgentRole::Planner)[0];
    let contract = request.output_schema.as_ref().unwrap();
    assert_eq!(contract.name, "planner_plan_v1");
    let steps = &contract.schema["properties"]["steps"]["items"]["anyOf"];
    assert_eq!(
        steps[0]["properties"]["tool"]["enum"],
        json!(["search_logs"])
    );
    assert_eq!(
        steps[0]["properties"]["arguments"]["required"],
        json!(["query"])
    );
    assert_eq!(
        steps[1]["properties"]["tool"]["enum"],
        json!(["current_time"])
    );
    assert_eq!(
        contract.schema["properties"]["mode"]["enum"],
        json!(["NORMAL"])
    );
}

#[tokio::test]
async fn a_context_overflow_gives_its_numbers_and_what_to_raise() {
    let model = Arc::new(ScriptedInvoker::new());
    model.fail(
        AgentRole::Planner,
        InvokeError::ContextOverflow {
            message: "HTTP 400 Bad Request: This model's maximum context length is 512 tokens. \
                      However, you requested 1300 tokens (1300 in the messages, None in the \
                      completion)."
                .into(),
            context_tokens: Some(512),
            prompt_tokens: Some(1300),
        },
    );
    let s = run(model.clone()).await;
    assert_eq!(s.path(), ["planner", "fallback"], "not retried");
    assert_eq!(
        s.events[0].detail.get("failure"),
        Some(&DetailValue::Text("context_overflow".into()))
    );
    let answer = s.final_answer.unwrap();
    assert!(
        answer.contains(
            "the request does not fit the model's context window (`context_overflow`). \
             Details: `HTTP 400 Bad Request: This model's maximum context length is 512 tokens."
        ),
        "{answer}"
    );
    let steps = next_steps(&answer);
    assert!(
        steps[0].starts_with(
            "The request's prompt is about 1300 tokens and the model's context is 512 tokens: \
             raise the server's context size"
        ),
        "{steps:#?}"
    );
    assert!(steps[0].contains("`context_tokens`"), "{}", steps[0]);
    assert!(!answer.contains("Ask again"), "{answer}");
}

#[tokio::test]
async fn each_failure_class_opens_the_next_steps_with_its_own() {
    type Case = (
        Vec<Result<&'static str, InvokeError>>,
        &'static str,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            vec![Err(InvokeError::Authentication(
                "HTTP 401 Unauthorized: Invalid API key (the key is read from the environment \
                 variable OPENAI_API_KEY, named by api_key_env)"
                    .into(),
            ))],
            "Check the API key",
            "OPENAI_API_KEY",
        ),
        (
            vec![
                Err(InvokeError::Transient(
                    "HTTP 503 Service Unavailable".into(),
                )),
                Err(InvokeError::Transient("timed out after 120000 ms".into())),
            ],
            "Ask again",
            "Details: `timed out after 120000 ms`",
        ),
        (
            vec![
                Ok("Here is a plan: steps"),
                Ok("{\"schema\": \"planner_plan_v1\"}"),
            ],
            "The model did not follow the output contract",
            "`structured_output`",
        ),
    ];
    for (replies, first_step, also) in cases {
        let model = Arc::new(ScriptedInvoker::new());
        for r in replies {
            match r {
                Ok(text) => model.reply(AgentRole::Planner, text),
                Err(e) => model.fail(AgentRole::Planner, e),
            };
        }
        let answer = run(model).await.final_answer.unwrap();
        let steps = next_steps(&answer);
        assert!(steps[0].starts_with(first_step), "{first_step}: {steps:#?}");
        assert!(answer.contains(also), "{also}: {answer}");
        assert_eq!(
            steps.iter().filter(|s| s.starts_with("Ask again")).count(),
            usize::from(first_step == "Ask again"),
            "{answer}"
        );
    }
}

#[tokio::test]
async fn a_repeating_executor_is_explained_without_quoting_diag_as_the_endpoint() {
    let model = Arc::new(ScriptedInvoker::new());
    model
        .reply(
            AgentRole::Planner,
            json!({"schema": "planner_plan_v1", "mode": "NORMAL", "steps": [
                {"id": "s1", "goal": "find 502s", "tool": "search_logs",
                 "arguments": {"query": "502"}}]})
            .to_string(),
        )
        .fail(
            AgentRole::Executor,
            InvokeError::Repeating("the model asked 3 times in a row …".into()),
        );
    let s = run(model).await;
    assert_eq!(s.path(), ["planner", "executor", "fallback"]);
    let answer = s.final_answer.unwrap();
    assert!(answer.contains("(`repeating`)"), "{answer}");
    assert!(!answer.contains("Details:"), "{answer}");
    assert!(
        next_steps(&answer)[0].starts_with("The model kept asking for tool calls"),
        "{answer}"
    );
}
