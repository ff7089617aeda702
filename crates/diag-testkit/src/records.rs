//! Builders shared by the store tests: realistic records of every kind, and a raw SQLite
//! connection for looking at the file the way an operator's sqlite3 shell would.

use crate::OrFail;
use std::collections::BTreeMap;
use std::path::Path;

use diag_core::agent::prompts;
use diag_core::agent::runtime::{AgentStepRecord, ModelExchange, StepStatus};
use diag_core::agent::AgentRole;
use diag_core::alert::{Alert, AlertGroup, AlertStatus};
use diag_core::clock::Timestamp;
use diag_core::graph::{Detail, Event, RunConfig};
use diag_core::model::{
    ChatRequest, ChatResponse, Endpoint, FinishReason, Learned, Message, ModelError,
    RefusedSampling, StructuredOutput, ToolCall, Usage,
};
use diag_core::protocol::{InvocationStatus, ToolInvocation};
use diag_core::store::{EndpointLearning, Enqueued, NewNotification, NewRun, RunSummary};
use diag_core::tools::{InvocationLog, ToolSpec};
/// The status of a node's event in the records here: the diagnosis graph's.
pub use diag_diagnosis::Status;
use serde_json::json;

pub const T0: i64 = 1_764_510_000_000; // 2025-11-30T13:40:00Z

pub fn ts(offset_ms: i64) -> Timestamp {
    Timestamp::from_unix_ms(T0 + offset_ms)
}

pub fn catalog() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "search_logs".into(),
            description: "Search log files".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
        },
        ToolSpec {
            name: "current_time".into(),
            description: "The run clock".into(),
            parameters: json!({"type": "object"}),
        },
    ]
}

pub fn new_run(run_id: &str, session_id: &str, offset_ms: i64) -> NewRun {
    NewRun {
        run_id: run_id.into(),
        session_id: session_id.into(),
        question: "why does checkout-service return 502 since 14:00?".into(),
        started_at: ts(offset_ms),
        tools: catalog(),
        limits: None,
        resumed_from: None,
        replay_of: None,
    }
}

pub const PASS_PATH: [(&str, Status); 6] = [
    ("planner", Status::Completed),
    ("executor", Status::Completed),
    ("gatekeeper", Status::Pass),
    ("verified_input", Status::Built),
    ("verifier", Status::Completed),
    ("composer", Status::Completed),
];

pub fn event(seq: u32, node: &str, status: Status) -> Event<Status> {
    let mut detail = Detail::default();
    detail.insert("claims", 2u32);
    detail.insert("verdict", "PASS");
    detail.insert("retry", false);
    Event {
        seq,
        node: node.into(),
        attempt: 1,
        round: 1,
        status,
        started_at: ts(i64::from(seq) * 100),
        duration_ms: u64::from(seq) * 7,
        detail,
    }
}

pub fn step(agent: AgentRole, turn: u32, status: StepStatus) -> AgentStepRecord {
    AgentStepRecord {
        agent,
        round: 1,
        attempt: 1,
        turn,
        status,
        model: "qwen2.5-7b-instruct".into(),
        prompt_tokens: 1200 + u64::from(turn),
        completion_tokens: 80 + u64::from(turn),
        finish_reason: (status == StepStatus::Ok).then_some(FinishReason::Stop),
        duration_ms: 900,
        prompt: prompts::prompt(agent).audit(),
    }
}

pub fn request(agent: AgentRole, input: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::system(prompts::prompt(agent).text),
            Message::user(input),
        ],
        tools: if agent == AgentRole::Executor {
            catalog()
        } else {
            Vec::new()
        },
        temperature: Some(0.2),
        max_tokens: Some(1024),
        response_format: None,
        tool_choice: None,
        fit: None,
        evidence_turn: false,
    }
}

pub fn exchange_ok(agent: AgentRole, turn: u32) -> ModelExchange {
    ModelExchange {
        agent,
        round: 1,
        attempt: 1,
        turn,
        request: request(agent, "{\"question\":\"why 502?\"}"),
        outcome: Ok(ChatResponse {
            content: Some("{\"schema\":\"planner_plan_v1\"}".into()),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "search_logs".into(),
                arguments: json!({"query": "502", "service": "checkout"}),
            }],
            finish_reason: FinishReason::ToolCalls,
            usage: Some(Usage {
                prompt_tokens: 1200,
                completion_tokens: 80,
            }),
            structured_output: None,
        }),
    }
}

pub fn exchange_err(agent: AgentRole, turn: u32) -> ModelExchange {
    let mut error = ModelError::from_status(503, "HTTP 503 Service Unavailable");
    error.retry_after = Some(std::time::Duration::from_secs(2));
    ModelExchange {
        agent,
        round: 1,
        attempt: 2,
        turn,
        request: request(agent, "{\"question\":\"why 502?\"}"),
        outcome: Err(error),
    }
}

pub fn invocation(
    run_id: &str,
    session_id: &str,
    n: u32,
    output: serde_json::Value,
) -> ToolInvocation {
    ToolInvocation {
        run_id: run_id.into(),
        session_id: session_id.into(),
        invocation_id: format!("inv-{n}"),
        agent: "executor".into(),
        round: 1,
        tool_name: "search_logs".into(),
        arguments: json!({"query": "502", "n": n}),
        output,
        status: InvocationStatus::Ok,
        duration_ms: 12,
    }
}

pub fn summary(answer: &str) -> RunSummary {
    RunSummary {
        answer: Some(answer.into()),
        finished_at: Some(ts(5_000)),
        duration_ms: Some(5_000),
        degraded: false,
        effective_verdict: Some(diag_core::protocol::Verdict::Pass),
        fallback_kind: None,
        self_evaluation: Some(json!({"verifier_evaluation": {"verdict": "PASS", "round": 1}})),
        reuse: None,
    }
}

/// A plain connection to the store file, as the sqlite3 shell would open it.
pub fn raw(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).or_fail("open the store file");
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .or_fail("set a busy timeout");
    conn
}

pub const TABLES: [&str; 7] = [
    "diagnosis_run",
    "orchestration_event",
    "agent_step",
    "tool_invocation",
    "model_exchange",
    "evaluation",
    "tool_catalog",
];

/// Row count of every table, in [`TABLES`] order.
pub fn counts(path: &Path) -> Vec<i64> {
    let conn = raw(path);
    TABLES
        .iter()
        .map(|t| {
            conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .or_fail("count a table")
        })
        .collect()
}

pub fn integrity(path: &Path) -> String {
    raw(path)
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .or_fail("PRAGMA integrity_check")
}

/// Records an invocation with the RunConfig of the run and session it names, as the agent
/// runtime does for its own run.
pub trait RecordOwn {
    fn record_own(&self, invocation: ToolInvocation);
}

impl<T: InvocationLog + ?Sized> RecordOwn for T {
    fn record_own(&self, invocation: ToolInvocation) {
        let config = RunConfig::new(invocation.session_id.clone(), invocation.run_id.clone());
        // A refused record is kept by the store's recorder; the tests read it there.
        let _ = self.record(&config, invocation);
    }
}

/// Every request blob with its reference count as the store keeps it (`blob_ref.refs`, NULL
/// without a row) and the number of exchange rows that actually name it, by blob id.
pub fn blob_refs(path: &Path) -> Vec<(i64, Option<i64>, i64)> {
    rows(
        &raw(path),
        "SELECT b.id, r.refs, (SELECT count(*) FROM model_exchange m WHERE EXISTS \
         (SELECT 1 FROM json_each(m.request_blobs) j WHERE j.value ->> 1 = b.id)) \
         FROM blob b LEFT JOIN blob_ref r ON r.id = b.id ORDER BY b.id",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}

/// Every row `sql` selects, each read by `row`.
pub fn rows<T>(
    conn: &rusqlite::Connection,
    sql: &str,
    params: impl rusqlite::Params,
    row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Vec<T> {
    let mut stmt = conn.prepare(sql).or_fail("prepare the query");
    let rows = stmt
        .query_map(params, row)
        .or_fail("run the query")
        .collect::<Result<Vec<_>, _>>()
        .or_fail("read the rows");
    rows
}

/// Asserts that every blob's kept reference count is the number of exchanges naming it, and
/// that every blob an exchange names exists.
#[track_caller]
pub fn assert_blob_refs_exact(path: &Path) {
    for (id, refs, named) in blob_refs(path) {
        assert_eq!(
            refs,
            Some(named),
            "blob {id}: kept count vs exchanges naming it"
        );
    }
    let dangling: i64 = raw(path)
        .query_row(
            "SELECT count(*) FROM model_exchange m, json_each(m.request_blobs) j \
             WHERE NOT EXISTS (SELECT 1 FROM blob b WHERE b.id = j.value ->> 1)",
            [],
            |r| r.get(0),
        )
        .or_fail("read the row");
    assert_eq!(dangling, 0, "references to missing blobs");
}

/// The whole request text of one stored exchange, rebuilt from its skeleton and blobs as a
/// reader of the file with SQL would (offsets are bytes).
pub fn request_text(path: &Path, run_id: &str, seq: i64) -> String {
    let conn = raw(path);
    let (skeleton, refs): (String, Option<String>) = conn
        .query_row(
            "SELECT request, request_blobs FROM model_exchange WHERE run_id = ?1 AND seq = ?2",
            rusqlite::params![run_id, seq],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .or_fail("read the packed request");
    let refs: Vec<(usize, i64)> = refs
        .map(|r| serde_json::from_str(&r).or_fail("a blob reference"))
        .unwrap_or_default();
    let mut out = String::new();
    let mut prev = 0;
    for (offset, id) in refs {
        out.push_str(&skeleton[prev..offset]);
        let body: String = conn
            .query_row("SELECT body FROM blob WHERE id = ?1", [id], |r| r.get(0))
            .or_fail("read a blob");
        out.push_str(&body);
        prev = offset;
    }
    out.push_str(&skeleton[prev..]);
    out
}

/// A model endpoint whose base URL holds what a store must never keep (userinfo, a query
/// key, a fragment).
pub fn local_endpoint() -> Endpoint {
    Endpoint::new("http://user:pw@127.0.0.1:8080/v1/?api-key=s3cret#frag", "m")
}

/// What an endpoint taught: a structured-output form and a context size, nothing refused.
pub fn learned(form: Option<StructuredOutput>, context_tokens: Option<u32>) -> Learned {
    Learned {
        form,
        context_tokens,
        ..Learned::default()
    }
}

/// An endpoint learning as a store keeps it, learned at `at` (ms after [`T0`]) when given.
pub fn learning(
    endpoint: Endpoint,
    form: Option<StructuredOutput>,
    context_tokens: Option<u32>,
    at: Option<i64>,
) -> EndpointLearning {
    EndpointLearning {
        endpoint,
        structured_output: form,
        context_tokens,
        refused_sampling: RefusedSampling::default(),
        learned_at: at.map(ts),
    }
}

/// A group of one alert of `service`, started `starts_ms` after the records' epoch.
pub fn alert_group(service: &str, status: AlertStatus, starts_ms: i64) -> AlertGroup {
    let labels = BTreeMap::from([
        ("alertname".to_string(), "HighErrorRate".to_string()),
        ("service".to_string(), service.to_string()),
    ]);
    AlertGroup::new(
        format!("{{}}:{{alertname=\"HighErrorRate\", service=\"{service}\"}}"),
        vec![Alert {
            fingerprint: format!("fp-{service}"),
            status,
            labels,
            annotations: BTreeMap::from([("summary".to_string(), "5xx > 5%".to_string())]),
            starts_at: ts(starts_ms),
            ends_at: None,
            generator_url: Some("http://prom/graph?g0.expr=up".into()),
        }],
    )
}

/// A firing notification of `service`'s group, received at 1 s.
pub fn firing(service: &str) -> NewNotification {
    NewNotification::new(
        "diag".into(),
        alert_group(service, AlertStatus::Firing, 0),
        ts(1_000),
    )
}

/// The id a notification was queued under; any other outcome fails the test.
pub fn queued(e: Enqueued) -> i64 {
    match e {
        Enqueued::Queued(id) => id,
        other => panic!("not queued: {other:?}"),
    }
}
