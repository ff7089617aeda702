//! The registry's limits with scripted tools: catalog, budget, timeout, output cap, argument
//! checks, tool errors and panics — each must end in a recorded outcome, never a panic.

use std::sync::Arc;
use std::time::Duration;

use diag_core::clock::{FixedClock, SystemClock, Timestamp};
use diag_core::protocol::InvocationStatus;
use diag_core::tools::{
    RegistryError, Tool, ToolContext, ToolError, ToolFuture, ToolLimits, ToolOutcome, ToolRegistry,
    ToolSpec,
};
use diag_tools::{CurrentTime, LogSearchLimits, SearchLogs};
use serde_json::{json, Value};

/// A scripted tool: what it does is chosen by its name.
struct Scripted {
    name: &'static str,
    behaviour: fn(&Value) -> Behaviour,
}

enum Behaviour {
    Return(Value),
    Fail(ToolError),
    Sleep(Duration),
    Panic,
}

impl Tool for Scripted {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.into(),
            description: format!("scripted {}", self.name),
            parameters: json!({
                "type": "object",
                "properties": {"q": {"type": "string"}},
                "required": ["q"]
            }),
        }
    }

    fn call<'a>(&'a self, arguments: &'a Value, _cx: &'a ToolContext) -> ToolFuture<'a> {
        let behaviour = (self.behaviour)(arguments);
        Box::pin(async move {
            match behaviour {
                Behaviour::Return(v) => Ok(v),
                Behaviour::Fail(e) => Err(e),
                Behaviour::Sleep(d) => {
                    tokio::time::sleep(d).await;
                    Ok(json!({"slept": true}))
                }
                Behaviour::Panic => panic!("scripted panic"),
            }
        })
    }
}

fn tool(name: &'static str, behaviour: fn(&Value) -> Behaviour) -> Arc<dyn Tool> {
    Arc::new(Scripted { name, behaviour })
}

fn registry(limits: ToolLimits) -> ToolRegistry {
    let mut r = ToolRegistry::new(limits);
    r.register(tool("echo", |a| Behaviour::Return(json!({"echo": a}))))
        .unwrap();
    r.register(tool("fail", |_| {
        Behaviour::Fail(ToolError::Unavailable("connection refused".into()))
    }))
    .unwrap();
    r.register(tool("sleep", |_| Behaviour::Sleep(Duration::from_secs(30))))
        .unwrap();
    r.register(tool("boom", |_| Behaviour::Panic)).unwrap();
    r.register(tool("logs", |_| {
        let matches: Vec<Value> = (0..200)
            .map(|i| json!({"file": "a.log", "line_no": i, "timestamp": null, "line": "x".repeat(100)}))
            .collect();
        Behaviour::Return(json!({"matches": matches, "more_matches": false}))
    }))
    .unwrap();
    r.register(tool("blob", |_| {
        Behaviour::Return(json!({"data": "y".repeat(10_000)}))
    }))
    .unwrap();
    r.register(Arc::new(CurrentTime)).unwrap();
    r
}

fn fixed() -> FixedClock {
    FixedClock(Timestamp::parse_rfc3339("2026-11-30T14:02:03.456Z").unwrap())
}

fn error_text(o: &ToolOutcome) -> &str {
    o.output["error"].as_str().unwrap_or("")
}

#[tokio::test]
async fn catalog_lists_tools_in_registration_order() {
    let r = registry(ToolLimits::default());
    let names: Vec<String> = r.specs().into_iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "echo",
            "fail",
            "sleep",
            "boom",
            "logs",
            "blob",
            "current_time"
        ]
    );
    let mut r = r;
    assert_eq!(
        r.register(tool("echo", |_| Behaviour::Panic)),
        Err(RegistryError::Duplicate("echo".into()))
    );
    assert!(matches!(
        r.register(tool("bad name", |_| Behaviour::Panic)),
        Err(RegistryError::InvalidName(_))
    ));
}

#[tokio::test]
async fn ok_calls_return_the_output() {
    let r = registry(ToolLimits::default());
    let clock = fixed();
    let cx = ToolContext { clock: &clock };
    let s = &r;
    let o = s.call("echo", &json!({"q": "hi"}), &cx).await;
    assert_eq!(o.status, InvocationStatus::Ok);
    assert_eq!(o.output, json!({"echo": {"q": "hi"}}));
    assert_eq!(o.duration_ms, 0, "durations come from the run clock");
    let o = s.call("current_time", &Value::Null, &cx).await;
    assert_eq!(o.output, json!({"now": "2026-11-30T14:02:03.456Z"}));
    let o = s.call("current_time", &json!({"zone": "CET"}), &cx).await;
    assert_eq!(o.status, InvocationStatus::Error);
}

#[tokio::test]
async fn unknown_tools_are_blocked() {
    let r = registry(ToolLimits::default());
    let clock = fixed();
    let cx = ToolContext { clock: &clock };
    let s = &r;
    let o = s.call("rm_rf", &json!({}), &cx).await;
    assert_eq!(o.status, InvocationStatus::Blocked);
    assert!(
        error_text(&o).starts_with("tool 'rm_rf' is not available; available tools: echo, fail")
    );
    assert_eq!(
        s.call("echo", &json!({"q": "x"}), &cx).await.status,
        InvocationStatus::Ok
    );
}

// The Executor's call budget is the agent runtime's, not the registry's: see
// `calls_past_the_budget_are_recorded_blocked_and_unknown_tools_blocked` in
// tests/agent_runtime.rs.

#[tokio::test]
async fn slow_tools_time_out_as_errors() {
    let r = registry(ToolLimits {
        timeout: Duration::from_millis(50),
        ..ToolLimits::default()
    });
    let clock = SystemClock::new();
    let cx = ToolContext { clock: &clock };
    let o = r.call("sleep", &json!({"q": "x"}), &cx).await;
    assert_eq!(o.status, InvocationStatus::Error);
    assert_eq!(error_text(&o), "timed out after 50 ms");
    assert!(
        o.duration_ms >= 50 && o.duration_ms < 5_000,
        "{}",
        o.duration_ms
    );
}

#[tokio::test]
async fn large_outputs_are_capped_and_marked() {
    let r = registry(ToolLimits {
        max_output_bytes: 2_000,
        ..ToolLimits::default()
    });
    let clock = fixed();
    let cx = ToolContext { clock: &clock };
    let s = &r;

    let o = s.call("logs", &json!({"q": "x"}), &cx).await;
    assert_eq!(o.status, InvocationStatus::Ok);
    assert_eq!(o.output["output_truncated"], true);
    let kept = o.output["matches"].as_array().unwrap();
    assert!(!kept.is_empty() && kept.len() < 200);
    assert_eq!(o.output["matches_shown"], kept.len());
    // The first items are kept, in order.
    assert!(kept.iter().enumerate().all(|(i, m)| m["line_no"] == i));
    assert!(serde_json::to_vec(&o.output).unwrap().len() <= 2_000);

    let o = s.call("blob", &json!({"q": "x"}), &cx).await;
    assert_eq!(o.status, InvocationStatus::Ok);
    assert_eq!(o.output["output_truncated"], true);
    assert_eq!(o.output["original_bytes"], 10_011);
    assert!(o.output["preview"]
        .as_str()
        .unwrap()
        .starts_with("{\"data\":\"yyy"));
    assert!(serde_json::to_vec(&o.output).unwrap().len() <= 2_000);

    // Deterministic: the same output is cut the same way.
    let again = s.call("blob", &json!({"q": "x"}), &cx).await;
    assert_eq!(again.output, o.output);
}

#[tokio::test]
async fn invalid_arguments_are_errors() {
    let r = registry(ToolLimits::default());
    let clock = fixed();
    let cx = ToolContext { clock: &clock };
    let s = &r;
    for (args, want) in [
        (
            json!({}),
            "invalid arguments: missing required parameter 'q'",
        ),
        (
            json!({"q": null}),
            "invalid arguments: missing required parameter 'q'",
        ),
        (
            json!("q=1"),
            "invalid arguments: arguments must be a JSON object, got a string",
        ),
        (
            json!([1]),
            "invalid arguments: arguments must be a JSON object, got an array",
        ),
    ] {
        let o = s.call("echo", &args, &cx).await;
        assert_eq!(o.status, InvocationStatus::Error, "{args}");
        assert_eq!(error_text(&o), want, "{args}");
    }

    // A built-in tool's own checks come through the same way.
    let mut r = ToolRegistry::new(ToolLimits::default());
    r.register(Arc::new(SearchLogs::new(
        Vec::new(),
        LogSearchLimits::default(),
    )))
    .unwrap();
    let o = r
        .call("search_logs", &json!({"query": "x", "limit": "ten"}), &cx)
        .await;
    assert_eq!(o.status, InvocationStatus::Error);
    assert!(error_text(&o).contains("parameter 'limit' must be a positive integer"));
}

#[tokio::test]
async fn tool_errors_and_panics_become_error_outcomes() {
    let r = registry(ToolLimits::default());
    let clock = fixed();
    let cx = ToolContext { clock: &clock };
    let s = &r;
    let o = s.call("fail", &json!({"q": "x"}), &cx).await;
    assert_eq!(o.status, InvocationStatus::Error);
    assert_eq!(
        o.output,
        json!({"error": "source unavailable: connection refused"})
    );
    let o = s.call("boom", &json!({"q": "x"}), &cx).await;
    assert_eq!(o.status, InvocationStatus::Error);
    assert_eq!(error_text(&o), "tool 'boom' failed unexpectedly");
}
