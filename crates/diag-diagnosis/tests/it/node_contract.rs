//! Node Contract suite: the REAL compiled topology over the REAL nodes (`real_nodes`), with a
//! `ScriptedInvoker` answering as the four agents (JSON documents of their contracts) and a
//! `MemoryInvocationLog` holding the run's recorded tool invocations and some of another run
//! of the same session.
//!
//! What is checked, per SPEC §1–§3 and the "Node Contract tests" requirement:
//! - every agent call and the tool recorder get the run's exact `RunConfig`; the invocation
//!   log is only ever read for the current run, and the Gatekeeper validates once per
//!   Executor round;
//! - each agent serializes only its declared input (exact top-level keys per role);
//! - legal limited Executor results are COMPLETED and go on to the Gatekeeper;
//! - unsafe Gatekeeper results fail closed to the pre-verification Fallback with no Executor
//!   claim in the answer;
//! - the Verifier sees only matched claims and their `matched_text`;
//! - a failed Verifier sets only its status, and technical retries resend the same bytes;
//! - the Gatekeeper ceiling caps the model verdict;
//! - contract violations are INVALID_OUTPUT with the reason in the event detail;
//! - the evidence retry carries its context, revalidates the whole second snapshot and never
//!   reuses the first verdict;
//! - answers are rendered safely, and the post-verification Fallback shows only allowed claims.
//!
//! Leak checks plant distinctive `ZZ…ZZ` markers in material that must not pass (claim text of
//! failed bindings, hypotheses, unreferenced tool output, another run's output) and assert
//! they are absent.

use diag_testkit::builders::inv;
use diag_testkit::Row;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use diag_core::agent::{
    AgentInvoker, AgentRequest, AgentRole, InvokeError, InvokeFuture, ScriptedInvoker,
};
use diag_core::clock::{FixedClock, Timestamp};
use diag_core::graph::{
    DetailValue, Event, InvokeOptions, Node, NodeFuture, NodeKind, Observer, RunConfig,
};
use diag_core::protocol::gatekeeper::normalize;
use diag_core::protocol::{
    ceiling, ComposerContract, GateStatus, GatekeeperRaw, InvocationStatus, PlannerMode,
    ToolInvocation, Verdict,
};
use diag_core::tools::{InvocationLog, MemoryInvocationLog, ToolSpec};
use diag_diagnosis::nodes::{real_nodes, NodeDeps};
use diag_diagnosis::retry_prepare::CONSTRAINTS;
use diag_diagnosis::topology::{
    self, DiagnosisNode, COMPOSER as C, EXECUTOR as E, FALLBACK as F, GATEKEEPER as G,
    PLANNER as P, RETRY_PREPARE as RP, STEP_LIMIT, VERIFIED_INPUT as VI, VERIFIER as V,
};
use diag_diagnosis::{
    render_answer, AgentStatus, DiagnosisNodes, DiagnosisState, ExecutorStatus, FallbackKind,
    Status,
};
use serde_json::{json, Value};

const QUESTION: &str = "why does checkout-service return 502 since 14:00?";
const SESSION: &str = "sess-1";
const RUN: &str = "run-A";
/// Another run of the same session; its invocations share the log.
const OTHER_RUN: &str = "run-B";
const T0: Timestamp = Timestamp::from_unix_ms(1_790_000_000_000);

fn config() -> RunConfig {
    RunConfig::new(SESSION, RUN)
}

// ---------------------------------------------------------------------------------------------
// Markers
// ---------------------------------------------------------------------------------------------

// Claims whose bindings pass.
const M_PASSED1: &str = "ZZPASSEDCLAIMONEZZ";
const M_PASSED2: &str = "ZZPASSEDCLAIMTWOZZ";
/// The new claim of a round-2 snapshot.
const M_NEW: &str = "ZZNEWCLAIMZZ";
// Claims whose bindings fail, one per way of failing.
const M_QUOTE_ABSENT: &str = "ZZFORGEDQUOTEZZ";
const M_OTHER_RUN_ID: &str = "ZZFORGEDOTHERRUNZZ";
const M_OTHER_FIELD: &str = "ZZFORGEDOTHERFIELDZZ";
const M_WRONG_TOOL: &str = "ZZFORGEDTOOLZZ";
const M_BAD_POINTER: &str = "ZZFORGEDPOINTERZZ";
const M_NOT_STRING: &str = "ZZFORGEDNOTSTRINGZZ";
const M_UNBOUND: &str = "ZZUNBOUNDCLAIMZZ";
const M_ROUND2_FORGED: &str = "ZZROUNDTWOFORGEDZZ";
// Executor material that is never a claim.
const M_HYPOTHESIS: &str = "ZZEXECHYPOTHESISZZ";
const M_NO_EVIDENCE: &str = "ZZNOEVIDENCEZZ";
const M_LIMITATION: &str = "ZZLIMITATIONZZ";
// Tool output nobody binds to.
const M_UNREF_FIELD: &str = "ZZUNREFFIELDZZ";
const M_UNREF_LINE: &str = "ZZUNREFLINEZZ";
const M_METRIC_LABEL: &str = "ZZMETRICLABELZZ";
const M_UNUSED_INV: &str = "ZZUNUSEDINVOCATIONZZ";
const M_ROUND2_LABEL: &str = "ZZROUNDTWOLABELZZ";
/// In a tool's arguments (part of the tool trace, never Verifier or Composer input).
const M_TOOL_ARG: &str = "ZZTOOLARGZZ";
/// In every output of the other run.
const M_OTHER_OUTPUT: &str = "ZZOTHERRUNOUTPUTZZ";
/// A tool only the other run called.
const OTHER_RUN_TOOL: &str = "other_run_only_tool";

/// Matched texts the Gatekeeper cuts from this run's outputs (original whitespace kept).
const MATCHED1: &str = "upstream returned\n502";
const MATCHED2: &str = "latency 30s at the edge";
const MATCHED_NEW: &str = "pool waiters 42";

/// Text of claims whose bindings fail in the standard fixtures.
const FORGED: [&str; 7] = [
    M_QUOTE_ABSENT,
    M_OTHER_RUN_ID,
    M_OTHER_FIELD,
    M_WRONG_TOOL,
    M_BAD_POINTER,
    M_NOT_STRING,
    M_UNBOUND,
];

/// Executor material and tool output that no answer, Verifier or Composer input may hold.
const NEVER: [&str; 10] = [
    M_HYPOTHESIS,
    M_NO_EVIDENCE,
    M_LIMITATION,
    M_UNREF_FIELD,
    M_UNREF_LINE,
    M_METRIC_LABEL,
    M_UNUSED_INV,
    M_ROUND2_LABEL,
    M_OTHER_OUTPUT,
    M_ROUND2_FORGED,
];

fn assert_absent(text: &str, markers: &[&str], what: &str) {
    for m in markers {
        assert!(!text.contains(m), "{m} leaked into {what}: {text}");
    }
}

/// Everything a pre-verification Fallback must not show: every claim (passed or failed),
/// every quote and matched text, every other marker, the other run's tool.
fn assert_no_executor_material(answer: &str) {
    assert_absent(answer, &FORGED, "the answer");
    assert_absent(answer, &NEVER, "the answer");
    assert_absent(
        answer,
        &[
            M_PASSED1,
            M_PASSED2,
            M_NEW,
            M_TOOL_ARG,
            OTHER_RUN_TOOL,
            "upstream returned",
            "latency 30s",
            "pool waiters",
            "disk full",
            "database down",
        ],
        "the answer",
    );
}

// ---------------------------------------------------------------------------------------------
// Recorded tool invocations
// ---------------------------------------------------------------------------------------------

/// Round 1 of this run: two log lines (one never cited, one with an uncited `file` field),
/// a metrics sample with an uncited label, and a runbook hit nobody cites.
fn round1_invocations() -> Vec<ToolInvocation> {
    vec![
        inv(
            RUN,
            "inv-1",
            "search_logs",
            json!({"query": "502", "service": "checkout"}),
            json!({"matches": [
                {"file": format!("/var/log/{M_UNREF_FIELD}.log"), "line_no": 17,
                 "timestamp": "2026-11-30T14:02:03Z",
                 "line": "checkout:  upstream returned\n502 (payment-service)"},
                {"file": "/var/log/checkout.log", "line_no": 18,
                 "timestamp": "2026-11-30T14:02:04Z",
                 "line": format!("{M_UNREF_LINE} retry budget exceeded")}],
             "truncated": false}),
        ),
        inv(
            RUN,
            "inv-2",
            "query_metrics",
            json!({"query": "p99"}),
            json!({"resultType": "vector",
                   "result": [{"metric": {"job": M_METRIC_LABEL},
                               "value": "p99 latency 30s at the edge"}]}),
        ),
        inv(
            RUN,
            "inv-3",
            "search_runbooks",
            json!({"q": M_TOOL_ARG}),
            json!({"hits": [{"path": "runbooks/pool.md", "heading": "Pool",
                             "text": format!("{M_UNUSED_INV} raise the pool size"),
                             "score": 0.9}]}),
        ),
    ]
}

/// The other run of the same session: it reuses the id `inv-1` with text this run never saw,
/// has an id (`inv-7`) this run does not have, and a tool this run never called.
fn other_run_invocations() -> Vec<ToolInvocation> {
    vec![
        inv(
            OTHER_RUN,
            "inv-1",
            "search_logs",
            json!({"query": "db"}),
            json!({"matches": [{"line": format!("{M_OTHER_OUTPUT} database down")}]}),
        ),
        inv(
            OTHER_RUN,
            "inv-7",
            "search_logs",
            json!({"query": "disk"}),
            json!({"matches": [{"line": format!("{M_OTHER_OUTPUT} disk full")}]}),
        ),
        inv(
            OTHER_RUN,
            "inv-8",
            OTHER_RUN_TOOL,
            json!({}),
            json!({"x": M_OTHER_OUTPUT}),
        ),
    ]
}

/// The tool call of the evidence-retry round, recorded while the round-2 Executor runs.
fn round2_invocation() -> ToolInvocation {
    inv(
        "stamped-by-the-recorder",
        "inv-4",
        "query_metrics",
        json!({"query": "pool_waiters"}),
        json!({"result": [{"metric": {"job": M_ROUND2_LABEL},
                           "value": "payment pool waiters 42"}]}),
    )
}

fn catalog() -> Vec<ToolSpec> {
    ["search_logs", "query_metrics", "search_runbooks"]
        .iter()
        .map(|name| ToolSpec {
            name: name.to_string(),
            description: format!("{name} over the configured sources"),
            parameters: json!({"type": "object"}),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Agent replies
// ---------------------------------------------------------------------------------------------

fn plan_normal() -> String {
    json!({"schema": "planner_plan_v1", "mode": "NORMAL",
           "hypotheses": [{"id": "h1", "statement": "payment-service is timing out"}],
           "steps": [
               {"id": "s1", "goal": "find 502s in checkout logs", "tool": "search_logs",
                "arguments": {"query": "502", "service": "checkout"}},
               {"id": "s2", "goal": "p99 latency", "tool": "query_metrics",
                "arguments": {"query": "p99"}}]})
    .to_string()
}

fn plan_gap() -> String {
    json!({"schema": "planner_plan_v1", "mode": "EVIDENCE_GAP_ONLY",
           "steps": [{"id": "s1", "goal": "payment pool waiters", "tool": "query_metrics",
                      "arguments": {"query": "pool_waiters"}, "gap_id": "g1"}]})
    .to_string()
}

fn bind(id: &str, tool: &str, path: &str, quote: &str) -> Value {
    json!({"source_invocation_id": id, "tool_name": tool, "raw_path": path, "quote": quote})
}

fn claim(id: &str, text: String, bindings: Vec<Value>) -> Value {
    json!({"claim_id": id, "text": text, "bindings": bindings})
}

fn c1() -> Value {
    claim(
        "c1",
        format!("{M_PASSED1} checkout saw upstream 502s from payment-service"),
        vec![bind(
            "inv-1",
            "search_logs",
            "/matches/0/line",
            "upstream returned 502",
        )],
    )
}

fn c2() -> Value {
    claim(
        "c2",
        format!("{M_PASSED2} the 99th percentile latency reached 30s"),
        vec![bind(
            "inv-2",
            "query_metrics",
            "/result/0/value",
            "latency 30s at the edge",
        )],
    )
}

/// Claims c3…c9, each failing in its own way.
fn forged_claims() -> Vec<Value> {
    vec![
        // The quote occurs only in the other run's `inv-1`, never in this run's.
        claim(
            "c3",
            format!("{M_QUOTE_ABSENT} the database is down"),
            vec![bind(
                "inv-1",
                "search_logs",
                "/matches/0/line",
                "database down",
            )],
        ),
        // The invocation exists only in the other run.
        claim(
            "c4",
            format!("{M_OTHER_RUN_ID} checkout's disk is full"),
            vec![bind("inv-7", "search_logs", "/matches/0/line", "disk full")],
        ),
        // The quote exists in the same invocation, but in another field.
        claim(
            "c5",
            format!("{M_OTHER_FIELD} the log file rotated"),
            vec![bind(
                "inv-1",
                "search_logs",
                "/matches/0/line",
                M_UNREF_FIELD,
            )],
        ),
        // The right output and quote under another tool's name.
        claim(
            "c6",
            format!("{M_WRONG_TOOL} latency in the logs"),
            vec![bind(
                "inv-2",
                "search_logs",
                "/result/0/value",
                "latency 30s",
            )],
        ),
        // A pointer that names nothing.
        claim(
            "c7",
            format!("{M_BAD_POINTER} a fourth sample"),
            vec![bind(
                "inv-2",
                "query_metrics",
                "/result/3/value",
                "latency 30s",
            )],
        ),
        // A pointer to a record, not a string (a number or a boolean binds as its JSON
        // text).
        claim(
            "c8",
            format!("{M_NOT_STRING} line seventeen"),
            vec![bind("inv-1", "search_logs", "/matches/0", "17")],
        ),
        claim("c9", format!("{M_UNBOUND} no binding at all"), vec![]),
    ]
}

/// An `executor_evidence_v2` document with the given claims and marked non-claim material.
fn executor_doc(claims: Vec<Value>) -> String {
    executor_doc_citing(claims, "inv-3")
}

/// The same, its `no_evidence` entry naming `query_ref` (a call of the run it is used in).
fn executor_doc_citing(claims: Vec<Value>, query_ref: &str) -> String {
    json!({"schema": "executor_evidence_v2", "claims": claims,
           "hypotheses": [{"id": "h1", "text": M_HYPOTHESIS, "status": "unverified"}],
           "no_evidence": [{"query_ref": query_ref, "reason": M_NO_EVIDENCE}],
           "limitations": [M_LIMITATION]})
    .to_string()
}

fn exec_pass() -> String {
    executor_doc(vec![c1(), c2()])
}

/// Two passed claims and seven that fail or are unbound: LOW_CONFID with passed bindings.
fn exec_mixed() -> String {
    let mut claims = vec![c1(), c2()];
    claims.extend(forged_claims());
    executor_doc(claims)
}

/// Only claims that fail: REJECT.
fn exec_forged() -> String {
    executor_doc(forged_claims())
}

/// The complete round-2 snapshot: both prior claims bound again, plus the new one.
fn exec_round2(new_claim: Value) -> String {
    executor_doc(vec![c1(), c2(), new_claim])
}

fn c_new() -> Value {
    claim(
        "c10",
        format!("{M_NEW} the payment pool had 42 waiters"),
        vec![bind(
            "inv-4",
            "query_metrics",
            "/result/0/value",
            "pool waiters 42",
        )],
    )
}

/// The new round-2 claim, bound to an invocation only the other run has.
fn c_new_forged() -> Value {
    claim(
        "c10",
        format!("{M_ROUND2_FORGED} the disk filled up"),
        vec![bind("inv-7", "search_logs", "/matches/0/line", "disk full")],
    )
}

/// Verifier free text whose salient tokens (`payment-service`) are all in the allowed claims'
/// evidence: it reaches the answer's material.
const MISSING: &str = "payment-service connection pool metrics";
const RECOMMENDATION: &str = "raise the payment-service pool size";

fn critical_gap() -> Value {
    json!([{"fact": "pool exhaustion is not shown", "is_critical": true,
            "verification": "no_evidence", "claim_ids": []}])
}

fn verifier(verdict: &str, allowed: &[&str], facts: Value) -> String {
    let checks: Vec<Value> = allowed
        .iter()
        .map(|id| json!({"claim_id": id, "supported": true}))
        .collect();
    json!({"schema": "verifier_verdict_v1", "verdict": verdict, "groundedness": 0.8,
           "claim_checks": checks, "facts": facts, "allowed_claims": allowed,
           "missing_information": [MISSING], "recommendations": [RECOMMENDATION],
           "rationale": "checked against the verified evidence"})
    .to_string()
}

const ANSWER: &str = "checkout 502s come from payment-service timeouts";

/// `answer` followed by one inline citation marker per cited claim, as a Composer must write
/// it (the markers and `cited_claims` agree).
fn cited(answer: &str, ids: &[&str]) -> String {
    let markers: Vec<String> = ids.iter().map(|id| format!("[{id}]")).collect();
    format!("{answer} {}", markers.join(" "))
}

/// A `composer_answer_v1` document whose answer cites `cited` inline (see [`cited`]).
fn composer(answer: &str, cited_ids: &[&str]) -> String {
    composer_raw(&cited(answer, cited_ids), cited_ids)
}

/// A `composer_answer_v1` document with exactly this answer text.
fn composer_raw(answer: &str, cited: &[&str]) -> String {
    json!({"schema": "composer_answer_v1", "answer_markdown": answer, "cited_claims": cited})
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// Stands in for the agent runtime's tool recorder: when the Executor is invoked, it records
/// that round's tool calls under the run and session of the `RunConfig` it was handed (as the
/// real recorder does), then lets the scripted model answer. Round-1 calls are pre-filled in
/// the log instead, so only round-2 calls go through here.
struct ToolRecorder {
    model: Arc<ScriptedInvoker>,
    log: Arc<MemoryInvocationLog>,
    per_round: Mutex<HashMap<u32, Vec<ToolInvocation>>>,
}

impl AgentInvoker for ToolRecorder {
    fn invoke<'a>(&'a self, request: &'a AgentRequest, config: &'a RunConfig) -> InvokeFuture<'a> {
        if request.role == AgentRole::Executor {
            let calls = self
                .per_round
                .lock()
                .unwrap()
                .remove(&request.round)
                .unwrap_or_default();
            for mut call in calls {
                call.run_id = config.run_id().to_string();
                call.session_id = config.session_id().to_string();
                call.round = request.round;
                self.log
                    .record(config, call)
                    .expect("the memory log keeps it");
            }
        }
        self.model.invoke(request, config)
    }
}

struct Harness {
    model: Arc<ScriptedInvoker>,
    log: Arc<MemoryInvocationLog>,
    recorder: Arc<ToolRecorder>,
    /// The contract the Composer is asked for (a live run's, unless a test asks otherwise).
    composer: ComposerContract,
}

impl Harness {
    /// A log pre-filled with this run's round-1 calls and the other run's calls.
    fn new() -> Self {
        let mut all = round1_invocations();
        all.extend(other_run_invocations());
        Self::with_invocations(all)
    }

    fn with_invocations(invocations: Vec<ToolInvocation>) -> Self {
        let model = Arc::new(ScriptedInvoker::new());
        let log = Arc::new(MemoryInvocationLog::new());
        for i in invocations {
            log.record(&RunConfig::new(i.session_id.clone(), i.run_id.clone()), i)
                .expect("the memory log keeps it");
        }
        let recorder = Arc::new(ToolRecorder {
            model: model.clone(),
            log: log.clone(),
            per_round: Mutex::new(HashMap::new()),
        });
        Harness {
            model,
            log,
            recorder,
            composer: ComposerContract::CURRENT,
        }
    }

    /// A harness whose Planner answers the normal plan and whose Executor answers `executor`.
    fn planned(executor: impl Into<String>) -> Self {
        let h = Self::new();
        h.reply(AgentRole::Planner, plan_normal())
            .reply(AgentRole::Executor, executor);
        h
    }

    fn reply(&self, role: AgentRole, content: impl Into<String>) -> &Self {
        self.model.reply(role, content);
        self
    }

    fn fail(&self, role: AgentRole, error: InvokeError) -> &Self {
        self.model.fail(role, error);
        self
    }

    /// Tool calls the round's Executor makes (recorded when it is invoked).
    fn tool_calls(&self, round: u32, calls: Vec<ToolInvocation>) -> &Self {
        self.recorder.per_round.lock().unwrap().insert(round, calls);
        self
    }

    fn nodes(&self) -> DiagnosisNodes {
        real_nodes(NodeDeps {
            invoker: self.recorder.clone(),
            log: self.log.clone(),
            catalog: Arc::new(catalog()),
            composer: self.composer,
        })
    }

    /// The same harness, asking the Composer for `contract` (as a replay of a recording made
    /// with it does).
    fn asking(mut self, contract: ComposerContract) -> Self {
        self.composer = contract;
        self
    }

    /// The serialized inputs the given role received, in order.
    fn inputs(&self, role: AgentRole) -> Vec<String> {
        self.model
            .requests_for(role)
            .into_iter()
            .map(|r| r.input)
            .collect()
    }

    /// The inputs of the given role, parsed.
    fn json_inputs(&self, role: AgentRole) -> Vec<Value> {
        self.inputs(role)
            .iter()
            .map(|i| serde_json::from_str(i).expect("agent input is JSON"))
            .collect()
    }
}

/// Attributes every invocation-log lookup to the node attempt that made it.
struct Watch {
    log: Arc<MemoryInvocationLog>,
    start: usize,
    /// (node, round, run ids looked up during that attempt), one entry per event.
    lookups: Vec<(String, u32, Vec<String>)>,
}

impl Observer<Status> for Watch {
    fn node_started(&mut self, _node: &str, _kind: NodeKind, _attempt: u32, _round: u32) {
        self.start = self.log.lookups().len();
    }

    fn event(&mut self, event: &Event<Status>) {
        let all = self.log.lookups();
        self.lookups
            .push((event.node.clone(), event.round, all[self.start..].to_vec()));
    }
}

struct Done {
    state: DiagnosisState,
    lookups: Vec<(String, u32, Vec<String>)>,
}

impl Done {
    fn answer(&self) -> &str {
        self.state
            .final_answer
            .as_deref()
            .expect("a finished run has an answer")
    }

    /// (node, attempt, round, status) of every event.
    fn trail(&self) -> Vec<(String, u32, u32, Status)> {
        self.state
            .events
            .iter()
            .map(|e| (e.node.clone(), e.attempt, e.round, e.status))
            .collect()
    }

    fn events_of(&self, node: &str) -> Vec<&Event<Status>> {
        self.state
            .events
            .iter()
            .filter(|e| e.node == node)
            .collect()
    }
}

type Ev = (&'static str, u32, u32, Status);

fn trail(events: &[Ev]) -> Vec<(String, u32, u32, Status)> {
    events
        .iter()
        .map(|(n, a, r, s)| (n.to_string(), *a, *r, *s))
        .collect()
}

async fn run(h: &Harness) -> Done {
    run_with(h, config(), |_| {}).await
}

/// Runs the real compiled topology over the real nodes (some optionally replaced by `tweak`).
async fn run_with(h: &Harness, config: RunConfig, tweak: impl FnOnce(&mut DiagnosisNodes)) -> Done {
    let mut nodes = h.nodes();
    tweak(&mut nodes);
    let graph = topology::compile(nodes).expect("the diagnosis topology compiles");
    let mut watch = Watch {
        log: h.log.clone(),
        start: 0,
        lookups: Vec::new(),
    };
    let clock = FixedClock(T0);
    let state = graph
        .invoke(
            DiagnosisState::new(QUESTION, diag_core::protocol::RunClock::at(T0)),
            &config,
            InvokeOptions {
                step_limit: STEP_LIMIT,
                clock: &clock,
                cancel: None,
                observer: &mut watch,
            },
        )
        .await
        .unwrap_or_else(|f| panic!("engine error {:?} after {:?}", f.error, f.state.path()));
    // Every node attempt left exactly one event, and the events are the executed sequence.
    assert_eq!(watch.lookups.len(), state.events.len());
    let seqs: Vec<u32> = state.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=state.events.len() as u32).collect::<Vec<_>>());
    Done {
        state,
        lookups: watch.lookups,
    }
}

/// A node that runs a real node and then changes what it wrote: a stand-in for a stage that
/// misbehaves in a way the real one cannot be made to.
/// The patch a [`Patched`] node applies to its state and outcome.
type Patch = Box<dyn Fn(&mut DiagnosisState, Status) -> Status + Send + Sync>;

struct Patched {
    inner: DiagnosisNode,
    patch: Patch,
}

impl Node<DiagnosisState, Status> for Patched {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        Box::pin(async move {
            let mut step = self.inner.run(&mut *state, config).await;
            step.outcome = (self.patch)(state, step.outcome);
            step
        })
    }
}

fn patched(
    inner: &DiagnosisNode,
    patch: impl Fn(&mut DiagnosisState, Status) -> Status + Send + Sync + 'static,
) -> DiagnosisNode {
    Arc::new(Patched {
        inner: inner.clone(),
        patch: Box::new(patch),
    })
}

/// Runs with the Gatekeeper's raw result changed by `edit` after the Gatekeeper ran, and its
/// status and ceiling normalized again from the changed result.
async fn run_with_edited_gate(h: &Harness, edit: fn(&mut GatekeeperRaw)) -> Done {
    run_with(h, config(), |n| {
        n.gatekeeper = patched(&n.gatekeeper, move |s, _| {
            let raw = s.round.gatekeeper_raw.as_mut().unwrap();
            edit(raw);
            let status = normalize(Some(raw));
            s.round.gatekeeper_status = Some(status);
            s.round.ceiling = Some(ceiling(status));
            Status::from(status)
        });
    })
    .await
}

fn detail<'e>(event: &'e Event<Status>, key: &str) -> Option<&'e DetailValue> {
    event.detail.get(key)
}

fn detail_text(event: &Event<Status>, key: &str) -> String {
    match detail(event, key) {
        Some(DetailValue::Text(t)) => t.clone(),
        other => panic!("event {} detail {key} is {other:?}", event.node),
    }
}

fn detail_int(event: &Event<Status>, key: &str) -> i64 {
    match detail(event, key) {
        Some(DetailValue::Int(n)) => *n,
        other => panic!("event {} detail {key} is {other:?}", event.node),
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .expect("agent input is a JSON object")
        .keys()
        .cloned()
        .collect()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

/// Every object key anywhere in `v`.
fn all_keys(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                out.insert(k.clone());
                all_keys(v, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| all_keys(v, out)),
        _ => {}
    }
}

/// State field names that no agent input may carry, at any depth.
const UNDECLARED_KEYS: [&str; 21] = [
    "events",
    "seq",
    "started_at",
    "duration_ms",
    "executor_output",
    "executor_status",
    "planner_status",
    "gatekeeper_raw",
    "checked_bindings",
    "gatekeeper_status",
    "verifier_status",
    "verifier_model_verdict",
    "verifier_result",
    "verifier_input",
    "composer_input",
    "composer_status",
    "final_answer",
    "retries",
    "degraded",
    "fallback_kind",
    "evidence_retry_count",
];

fn assert_pre_fallback(done: &Done) {
    let s = &done.state;
    assert_eq!(s.path().last(), Some(&F));
    assert_eq!(s.fallback_kind, Some(FallbackKind::PreVerification));
    assert!(s.degraded);
    // Nothing verified: no verdict is invented and no Composer ran.
    assert_ne!(s.round.verifier_status, Some(AgentStatus::Completed));
    assert_eq!(s.round.verifier_model_verdict, None);
    assert_eq!(s.round.effective_verdict, None);
    assert_eq!(s.round.verifier_result, None);
    assert_eq!(s.composer_status, None);
    let answer = done.answer();
    assert!(
        answer.contains("could not establish trusted material"),
        "{answer}"
    );
    assert_no_executor_material(answer);
}

// ---------------------------------------------------------------------------------------------
// RunConfig identity and invocation-log lookups
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn every_agent_call_receives_the_exact_run_config() {
    let h = Harness::planned(exec_pass());
    h.reply(
        AgentRole::Verifier,
        verifier("PASS", &["c1", "c2"], json!([])),
    )
    .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;

    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::Pass),
            (VI, 1, 1, Status::Built),
            (V, 1, 1, Status::Completed),
            (C, 1, 1, Status::Completed),
        ])
    );
    assert_eq!(done.answer(), cited(ANSWER, &["c1"]));
    let requests = h.model.requests();
    let roles: Vec<AgentRole> = requests.iter().map(|(r, _)| r.role).collect();
    assert_eq!(
        roles,
        [
            AgentRole::Planner,
            AgentRole::Executor,
            AgentRole::Verifier,
            AgentRole::Composer
        ]
    );
    for (request, cfg) in &requests {
        assert_eq!(cfg, &config(), "{} got another RunConfig", request.role);
        assert_eq!(cfg.thread_id, RUN);
        assert_eq!(cfg.metadata.run_id, RUN);
        assert_eq!(cfg.metadata.session_id, SESSION);
        assert_eq!((request.round, request.attempt), (1, 1));
    }
    // Only this run was ever looked up.
    assert!(h.log.lookups().iter().all(|r| r == RUN));
}

#[tokio::test]
async fn the_gatekeeper_validates_the_current_run_once_per_executor_round() {
    let h = Harness::new();
    h.tool_calls(2, vec![round2_invocation()])
        .reply(AgentRole::Planner, plan_normal())
        .reply(AgentRole::Planner, plan_gap())
        .reply(AgentRole::Executor, exec_pass())
        .reply(AgentRole::Executor, exec_round2(c_new()))
        .reply(
            AgentRole::Verifier,
            verifier("LOW_CONFID", &["c1", "c2"], critical_gap()),
        )
        .reply(
            AgentRole::Verifier,
            verifier("PASS", &["c1", "c2", "c10"], json!([])),
        )
        .reply(AgentRole::Composer, composer(ANSWER, &["c10"]));
    let done = run(&h).await;

    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::Pass),
            (VI, 1, 1, Status::Built),
            (V, 1, 1, Status::Completed),
            (RP, 1, 1, Status::Prepared),
            (P, 1, 2, Status::Completed),
            (E, 1, 2, Status::Completed),
            (G, 1, 2, Status::Pass),
            (VI, 1, 2, Status::Built),
            (V, 1, 2, Status::Completed),
            (C, 1, 2, Status::Completed),
        ])
    );

    // One Gatekeeper event per Executor event, each in the Executor's round.
    let executor_rounds: Vec<u32> = done.events_of(E).iter().map(|e| e.round).collect();
    let gate_rounds: Vec<u32> = done.events_of(G).iter().map(|e| e.round).collect();
    assert_eq!(executor_rounds, [1, 2]);
    assert_eq!(gate_rounds, [1, 2]);

    // Who read the invocation log, and for which run, attempt by attempt:
    // - Executor: twice per attempt (before and after the model call), to count the tool
    //   calls it made for its event detail;
    // - Gatekeeper: once per round, the lookup `validate_run` checks against;
    // - Retry Prepare: once, for the completed queries;
    // - Composer: once, for the evidence context of the allowed claims (the answer's tokens
    //   and the Verifier's free text are checked against it);
    // - Planner, Verified Input, Verifier: never.
    let per_node: Vec<(&str, u32, Vec<&str>)> = done
        .lookups
        .iter()
        .map(|(n, r, l)| (n.as_str(), *r, l.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(
        per_node,
        vec![
            (P, 1, vec![]),
            (E, 1, vec![RUN, RUN]),
            (G, 1, vec![RUN]),
            (VI, 1, vec![]),
            (V, 1, vec![]),
            (RP, 1, vec![RUN]),
            (P, 2, vec![]),
            (E, 2, vec![RUN, RUN]),
            (G, 2, vec![RUN]),
            (VI, 2, vec![]),
            (V, 2, vec![]),
            (C, 2, vec![RUN]),
        ]
    );
    assert_eq!(h.log.lookups(), vec![RUN; 8]);

    // Round 1's calls were pre-recorded; round 2's one call was recorded during the Executor
    // attempt, under the run's own identity.
    let tool_calls: Vec<i64> = done
        .events_of(E)
        .iter()
        .map(|e| detail_int(e, "tool_calls"))
        .collect();
    assert_eq!(tool_calls, [0, 1]);
    let recorded = h.log.invocations(RUN);
    let round2 = recorded
        .iter()
        .find(|i| i.invocation_id == "inv-4")
        .unwrap();
    assert_eq!(
        (
            round2.run_id.as_str(),
            round2.session_id.as_str(),
            round2.round
        ),
        (RUN, SESSION, 2)
    );

    // Every call kept the run's config.
    assert!(h.model.requests().iter().all(|(_, c)| c == &config()));
}

#[tokio::test]
async fn a_pre_verification_fallback_reads_the_log_only_for_the_current_run() {
    let h = Harness::planned(exec_forged());
    let done = run(&h).await;

    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::Reject),
            (F, 1, 1, Status::Answered),
        ])
    );
    // The Fallback looks the run up once, to name the tools this run consulted.
    let per_node: Vec<(&str, usize)> = done
        .lookups
        .iter()
        .map(|(n, _, l)| (n.as_str(), l.len()))
        .collect();
    assert_eq!(per_node, [(P, 0), (E, 2), (G, 1), (F, 1)]);
    assert_eq!(h.log.lookups(), vec![RUN; 4]);

    let answer = done.answer();
    for tool in ["search_logs", "query_metrics", "search_runbooks"] {
        assert!(answer.contains(&format!("`{tool}`")), "{answer}");
    }
    assert_pre_fallback(&done);
}

#[tokio::test]
async fn another_run_of_the_session_is_checked_against_its_own_invocations_only() {
    // The claim that the other run's output supports ("database down" in its `inv-1`); its
    // `no_evidence` names `inv-1` too, which both runs have.
    let doc = executor_doc_citing(
        vec![claim(
            "c1",
            format!("{M_QUOTE_ABSENT} the database is down"),
            vec![bind(
                "inv-1",
                "search_logs",
                "/matches/0/line",
                "database down",
            )],
        )],
        "inv-1",
    );

    // As run-A (which has its own, different `inv-1`): the binding fails.
    let a = Harness::new();
    a.reply(AgentRole::Planner, plan_normal())
        .reply(AgentRole::Executor, doc.clone());
    let done_a = run(&a).await;
    let raw = done_a.state.round.gatekeeper_raw.as_ref().unwrap();
    assert_eq!(
        raw.checked_bindings[0].failure.as_deref(),
        Some("quote_not_found")
    );
    assert_eq!(
        done_a.state.round.gatekeeper_status,
        Some(GateStatus::Reject)
    );
    assert_pre_fallback(&done_a);

    // As run-B, over the very same log: the binding passes against run-B's record.
    let b = Harness::new();
    b.reply(AgentRole::Planner, plan_normal())
        .reply(AgentRole::Executor, doc)
        .reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done_b = run_with(&b, RunConfig::new(SESSION, OTHER_RUN), |_| {}).await;
    assert_eq!(done_b.state.round.gatekeeper_status, Some(GateStatus::Pass));
    let raw = done_b.state.round.gatekeeper_raw.as_ref().unwrap();
    assert_eq!(
        raw.checked_bindings[0].matched_text.as_deref(),
        Some("database down")
    );
    assert!(b.log.lookups().iter().all(|r| r == OTHER_RUN));
    assert!(b
        .model
        .requests()
        .iter()
        .all(|(_, c)| c == &RunConfig::new(SESSION, OTHER_RUN)));
}

// ---------------------------------------------------------------------------------------------
// Declared inputs
// ---------------------------------------------------------------------------------------------

/// A two-round run with every kind of marker in play: round 1 is a PASS whose Verifier asks
/// for evidence on a critical gap, round 2 adds one claim.
async fn two_round_run() -> (Harness, Done) {
    let h = Harness::new();
    h.tool_calls(2, vec![round2_invocation()])
        .reply(AgentRole::Planner, plan_normal())
        .reply(AgentRole::Planner, plan_gap())
        .reply(AgentRole::Executor, exec_pass())
        .reply(AgentRole::Executor, exec_round2(c_new()))
        .reply(
            AgentRole::Verifier,
            verifier("LOW_CONFID", &["c1", "c2"], critical_gap()),
        )
        .reply(
            AgentRole::Verifier,
            verifier("PASS", &["c1", "c10"], json!([])),
        )
        .reply(AgentRole::Composer, composer(ANSWER, &["c1", "c10"]));
    let done = run(&h).await;
    assert_eq!(done.state.path().last(), Some(&C));
    (h, done)
}

/// The run's clock every agent input carries: the run's start (`T0`, the start the harness
/// gives the state) and its UTC date.
fn run_clock() -> Value {
    let at = T0.to_string();
    json!({"now": at, "today": at[..10]})
}

#[tokio::test]
async fn the_planner_serializes_only_its_declared_input() {
    let (h, _) = two_round_run().await;
    let inputs = h.json_inputs(AgentRole::Planner);
    assert_eq!(inputs.len(), 2);

    assert_eq!(
        keys(&inputs[0]),
        set(&["run_clock", "diagnosis_context", "tool_catalog", "mode"])
    );
    assert_eq!(
        inputs[0]["diagnosis_context"],
        json!({"question": QUESTION, "original_question": QUESTION})
    );
    assert_eq!(
        inputs[0]["tool_catalog"],
        serde_json::to_value(catalog()).unwrap()
    );
    assert_eq!(inputs[0]["mode"], "NORMAL");

    assert_eq!(
        keys(&inputs[1]),
        set(&[
            "run_clock",
            "diagnosis_context",
            "tool_catalog",
            "mode",
            "retry_context"
        ])
    );
    assert_eq!(inputs[1]["mode"], "EVIDENCE_GAP_ONLY");
    for input in &inputs {
        assert_eq!(input["run_clock"], run_clock());
    }

    for text in h.inputs(AgentRole::Planner) {
        assert_absent(&text, &NEVER, "the planner input");
        assert_absent(&text, &FORGED, "the planner input");
    }
    // Round 1 has seen nothing of any claim yet.
    assert_absent(
        &h.inputs(AgentRole::Planner)[0],
        &[M_PASSED1, M_PASSED2],
        "round 1",
    );
}

#[tokio::test]
async fn the_executor_serializes_only_its_declared_input() {
    let (h, _) = two_round_run().await;
    let inputs = h.json_inputs(AgentRole::Executor);
    assert_eq!(inputs.len(), 2);

    assert_eq!(
        keys(&inputs[0]),
        set(&["run_clock", "diagnosis_context", "plan"])
    );
    // The plan as parsed: the Planner's steps and hypotheses, nothing else.
    assert_eq!(
        keys(&inputs[0]["plan"]),
        set(&["mode", "hypotheses", "steps"])
    );
    assert_eq!(inputs[0]["plan"]["steps"][0]["tool"], "search_logs");
    assert_eq!(
        keys(&inputs[1]),
        set(&["run_clock", "diagnosis_context", "plan", "retry_context"])
    );
    assert_eq!(inputs[1]["plan"]["mode"], "EVIDENCE_GAP_ONLY");
    for input in &inputs {
        assert_eq!(input["run_clock"], run_clock());
    }

    for text in h.inputs(AgentRole::Executor) {
        // No tool output reaches the Executor through its input (only through its tools),
        // and nothing of the Executor's own earlier output except verified claims.
        assert_absent(&text, &NEVER, "the executor input");
        assert_absent(&text, &FORGED, "the executor input");
    }
}

#[tokio::test]
async fn the_verifier_serializes_only_its_declared_input() {
    let (h, _) = two_round_run().await;
    let inputs = h.json_inputs(AgentRole::Verifier);
    assert_eq!(inputs.len(), 2);
    let declared = [
        "run_clock",
        "diagnosis_context",
        "verified_executor_output",
        "verified_evidence",
        "gatekeeper_audit",
        "ceiling",
    ];
    assert_eq!(keys(&inputs[0]), set(&declared));
    let mut round2 = declared.to_vec();
    round2.push("retry_context");
    assert_eq!(keys(&inputs[1]), set(&round2));
    // The permitted retry context: the round and the gaps, not the prior material.
    assert_eq!(
        keys(&inputs[1]["retry_context"]),
        set(&["round", "critical_gaps"])
    );
    assert_eq!(inputs[1]["retry_context"]["round"], 2);
    assert_eq!(inputs[1]["retry_context"]["critical_gaps"][0]["id"], "g1");
    for input in &inputs {
        assert_eq!(input["run_clock"], run_clock());
    }
    assert_eq!(
        keys(&inputs[0]["gatekeeper_audit"]),
        set(&["claims", "bindings", "passed", "failed", "unbound_claims"])
    );
    for v in &inputs {
        for claim in v["verified_executor_output"]["claims"].as_array().unwrap() {
            assert_eq!(keys(claim), set(&["claim_id", "text"]));
        }
        for e in v["verified_evidence"].as_array().unwrap() {
            assert_eq!(
                keys(e),
                set(&[
                    "claim_id",
                    "source_invocation_id",
                    "tool_name",
                    "raw_path",
                    "matched_text"
                ])
            );
        }
    }
}

#[tokio::test]
async fn the_composer_serializes_only_its_declared_input() {
    let (h, _) = two_round_run().await;
    let inputs = h.json_inputs(AgentRole::Composer);
    assert_eq!(inputs.len(), 1);
    let input = &inputs[0];
    assert_eq!(
        keys(input),
        set(&[
            "run_clock",
            "effective_verdict",
            "allowed_claims",
            "missing_information",
            "recommendations"
        ])
    );
    assert_eq!(input["run_clock"], run_clock());
    assert_eq!(input["effective_verdict"], "PASS");
    let ids: Vec<&str> = input["allowed_claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["claim_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c1", "c10"]);
    for c in input["allowed_claims"].as_array().unwrap() {
        assert_eq!(keys(c), set(&["claim_id", "text", "evidence"]));
    }
    assert_eq!(input["missing_information"], json!([MISSING]));
    assert_eq!(input["recommendations"], json!([RECOMMENDATION]));
    // c2 was verified but not allowed.
    assert_absent(
        &h.inputs(AgentRole::Composer)[0],
        &[M_PASSED2, MATCHED2],
        "the composer input",
    );
}

#[tokio::test]
async fn no_agent_input_carries_undeclared_state() {
    let (h, done) = two_round_run().await;
    assert_eq!(done.state.events.len(), 12);
    for (request, _) in h.model.requests() {
        let v: Value = serde_json::from_str(&request.input).unwrap();
        let mut found = BTreeSet::new();
        all_keys(&v, &mut found);
        for k in UNDECLARED_KEYS {
            assert!(
                !found.contains(k),
                "{} input (round {}) carries `{k}`",
                request.role,
                request.round
            );
        }
        // No executor hypothesis, no_evidence entry, limitation, raw quote or tool output.
        assert_absent(&request.input, &NEVER, request.role.as_str());
        assert_absent(
            &request.input,
            &[M_UNREF_FIELD, "\"quote\""],
            request.role.as_str(),
        );
        // No orchestration event statuses of deterministic nodes as data.
        assert!(!request.input.contains("\"ANSWERED\""));
        assert!(!request.input.contains("\"PREPARED\""));
    }
}

// ---------------------------------------------------------------------------------------------
// Legal limited Executor results
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn empty_tool_data_with_a_no_evidence_result_is_completed_and_reaches_the_gatekeeper() {
    let empty = vec![
        inv(
            RUN,
            "inv-1",
            "search_logs",
            json!({"query": "502"}),
            json!({"matches": [], "truncated": false}),
        ),
        inv(
            RUN,
            "inv-2",
            "query_metrics",
            json!({"query": "p99"}),
            json!({"resultType": "vector", "result": []}),
        ),
    ];
    let mut all = empty;
    all.extend(other_run_invocations());
    let h = Harness::with_invocations(all);
    let doc = json!({"schema": "executor_evidence_v2", "claims": [],
                     "hypotheses": [{"id": "h1", "text": M_HYPOTHESIS, "status": "unverified"}],
                     "no_evidence": [{"query_ref": "inv-1", "reason": M_NO_EVIDENCE}]});
    h.reply(AgentRole::Planner, plan_normal())
        .reply(AgentRole::Executor, doc.to_string());
    let done = run(&h).await;

    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::LowConfid),
            (F, 1, 1, Status::Answered),
        ])
    );
    let s = &done.state;
    assert_eq!(s.round.executor_status, Some(ExecutorStatus::Completed));
    assert_eq!(detail_int(done.events_of(E)[0], "claims"), 0);
    // Zero claims: fail / low-confid with zero passed, which cannot continue.
    let raw = s.round.gatekeeper_raw.as_ref().unwrap();
    assert_eq!(
        (raw.result.as_deref(), raw.severity.as_deref()),
        (Some("fail"), Some("low-confid"))
    );
    assert_eq!(raw.passed_bindings(), 0);
    assert_eq!(detail_int(done.events_of(G)[0], "passed"), 0);
    assert_eq!(s.round.ceiling, Some(Verdict::LowConfid));
    assert_pre_fallback(&done);
    assert!(h.model.requests_for(AgentRole::Verifier).is_empty());
    assert!(done
        .answer()
        .contains("The Gatekeeper could not bind any claim"));
}

#[tokio::test]
async fn a_failed_tool_with_limitations_is_completed_and_reaches_the_gatekeeper() {
    let mut failed = inv(
        RUN,
        "inv-1",
        "query_metrics",
        json!({"query": "p99"}),
        json!({"error": format!("{M_UNREF_LINE} connection refused")}),
    );
    failed.status = InvocationStatus::Error;
    let mut all = vec![failed];
    all.extend(other_run_invocations());
    let h = Harness::with_invocations(all);
    let doc = json!({"schema": "executor_evidence_v2", "claims": [],
                     "limitations": [format!("{M_LIMITATION} metrics endpoint unreachable")]});
    h.reply(AgentRole::Planner, plan_normal())
        .reply(AgentRole::Executor, doc.to_string());
    let done = run(&h).await;

    assert_eq!(done.state.path(), [P, E, G, F]);
    assert_eq!(
        done.state.round.executor_status,
        Some(ExecutorStatus::Completed)
    );
    assert_eq!(done.events_of(E)[0].status, Status::Completed);
    assert_eq!(
        done.state.round.gatekeeper_status,
        Some(GateStatus::LowConfid)
    );
    assert_pre_fallback(&done);
    // The errored tool still counts as consulted; the other run's tool does not.
    assert!(done.answer().contains("`query_metrics`"));
    assert!(!done.answer().contains("`search_logs`"));
}

// ---------------------------------------------------------------------------------------------
// Unsafe Gatekeeper results fail closed
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn every_forged_binding_fails_and_the_reject_fails_closed() {
    let h = Harness::planned(exec_forged());
    let done = run(&h).await;

    let raw = done.state.round.gatekeeper_raw.as_ref().unwrap();
    let failures: Vec<(&str, Option<&str>)> = raw
        .checked_bindings
        .iter()
        .map(|b| (b.claim_id.as_str(), b.failure.as_deref()))
        .collect();
    assert_eq!(
        failures,
        [
            ("c3", Some("quote_not_found")),
            ("c4", Some("unknown_invocation")),
            ("c5", Some("quote_not_found")),
            ("c6", Some("tool_name_mismatch")),
            ("c7", Some("path_not_found")),
            ("c8", Some("not_a_string")),
        ]
    );
    assert!(raw
        .checked_bindings
        .iter()
        .all(|b| b.matched_text.is_none()));
    assert_eq!(raw.audit.unbound_claims, 1);
    assert_eq!(done.state.round.gatekeeper_status, Some(GateStatus::Reject));
    let gate = done.events_of(G)[0];
    assert_eq!(
        (
            detail_int(gate, "claims"),
            detail_int(gate, "passed"),
            detail_int(gate, "failed")
        ),
        (7, 0, 6)
    );
    assert_eq!(done.state.path(), [P, E, G, F]);
    assert_pre_fallback(&done);
}

#[tokio::test]
async fn a_reject_with_some_passed_bindings_fails_closed() {
    // `validate_run` never rejects when a binding passed; a Gatekeeper result that does is
    // still a REJECT, and the passed claims must not leak through it.
    let h = Harness::planned(exec_mixed());
    let done = run_with_edited_gate(&h, |raw| raw.severity = Some("reject".into())).await;

    let raw = done.state.round.gatekeeper_raw.as_ref().unwrap();
    assert_eq!(raw.passed_bindings(), 2, "c1 and c2 passed");
    assert_eq!(done.state.round.gatekeeper_status, Some(GateStatus::Reject));
    assert_eq!(done.state.path(), [P, E, G, F]);
    assert_eq!(done.state.round.verified_executor_output, None);
    assert!(h.model.requests_for(AgentRole::Verifier).is_empty());
    assert_pre_fallback(&done);
}

#[tokio::test]
async fn low_confid_with_zero_passed_bindings_fails_closed() {
    // Claims exist, and the Gatekeeper's result says LOW_CONFID, but no binding passed.
    let h = Harness::planned(exec_forged());
    let done = run_with_edited_gate(&h, |raw| raw.severity = Some("low-confid".into())).await;

    assert_eq!(
        done.state.round.gatekeeper_status,
        Some(GateStatus::LowConfid)
    );
    assert_eq!(
        done.state
            .round
            .gatekeeper_raw
            .as_ref()
            .unwrap()
            .passed_bindings(),
        0
    );
    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::LowConfid),
            (F, 1, 1, Status::Answered),
        ])
    );
    assert_pre_fallback(&done);
}

#[tokio::test]
async fn missing_executor_output_fails_closed_at_the_gatekeeper() {
    let h = Harness::planned(exec_mixed());
    // An Executor that reports COMPLETED but leaves no output behind.
    let done = run_with(&h, config(), |n| {
        n.executor = patched(&n.executor, |s, outcome| {
            s.round.executor_output = None;
            outcome
        });
    })
    .await;

    assert_eq!(done.state.path(), [P, E, G, F]);
    assert_eq!(done.state.round.gatekeeper_raw, None);
    assert_eq!(done.state.round.gatekeeper_status, Some(GateStatus::Reject));
    assert_eq!(done.state.round.ceiling, Some(Verdict::Reject));
    assert_eq!(
        detail_text(done.events_of(G)[0], "reason"),
        "no_executor_output"
    );
    assert_pre_fallback(&done);
}

#[tokio::test]
async fn an_unknown_or_inconsistent_gatekeeper_result_fails_closed() {
    // An unknown `result` value normalizes to REJECT.
    let h = Harness::planned(exec_pass());
    let done = run_with_edited_gate(&h, |raw| raw.result = Some("maybe".into())).await;
    assert_eq!(done.state.round.gatekeeper_status, Some(GateStatus::Reject));
    assert_eq!(done.state.path(), [P, E, G, F]);
    assert_pre_fallback(&done);

    // A Gatekeeper that routes PASS while its raw result is a pass listing a failed binding:
    // Verified Input re-normalizes the raw result, refuses to project, and the run fails
    // closed there.
    let h = Harness::planned(exec_mixed());
    let done = run_with(&h, config(), |n| {
        n.gatekeeper = patched(&n.gatekeeper, |s, _| {
            let raw = s.round.gatekeeper_raw.as_mut().unwrap();
            raw.result = Some("pass".into());
            raw.severity = None;
            s.round.gatekeeper_status = Some(GateStatus::Pass);
            s.round.ceiling = Some(Verdict::Pass);
            Status::Pass
        });
    })
    .await;
    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::Pass),
            (VI, 1, 1, Status::ProjectionFailed),
            (F, 1, 1, Status::Answered),
        ])
    );
    assert_eq!(
        detail_text(done.events_of(VI)[0], "reason"),
        "status_mismatch"
    );
    assert_eq!(done.state.round.verified_executor_output, None);
    assert!(h.model.requests_for(AgentRole::Verifier).is_empty());
    assert_pre_fallback(&done);
}

#[tokio::test]
async fn a_missing_gatekeeper_result_fails_closed_at_verified_input() {
    // A Gatekeeper that routes PASS but leaves no raw result behind: Verified Input has
    // nothing to project from, and the Verifier never sees the Executor's claims.
    let h = Harness::planned(exec_pass());
    let done = run_with(&h, config(), |n| {
        n.gatekeeper = patched(&n.gatekeeper, |s, _| {
            s.round.gatekeeper_raw = None;
            s.round.gatekeeper_status = Some(GateStatus::Pass);
            s.round.ceiling = Some(Verdict::Pass);
            Status::Pass
        });
    })
    .await;

    assert_eq!(done.state.path(), [P, E, G, VI, F]);
    let vi = done.events_of(VI)[0];
    assert_eq!(vi.status, Status::ProjectionFailed);
    assert_eq!(detail_text(vi, "reason"), "missing_gatekeeper_result");
    assert!(h.model.requests_for(AgentRole::Verifier).is_empty());
    assert_pre_fallback(&done);
}

// ---------------------------------------------------------------------------------------------
// Verified-only Verifier input
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_verifier_receives_only_matched_claims_and_their_matched_text() {
    let h = Harness::planned(exec_mixed());
    h.reply(
        AgentRole::Verifier,
        verifier("LOW_CONFID", &["c1"], json!([])),
    )
    .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;

    assert_eq!(
        done.state.round.gatekeeper_status,
        Some(GateStatus::LowConfid)
    );
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    let text = &h.inputs(AgentRole::Verifier)[0];
    let input: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        input["verified_executor_output"],
        json!({"claims": [
            {"claim_id": "c1",
             "text": format!("{M_PASSED1} checkout saw upstream 502s from payment-service")},
            {"claim_id": "c2", "text": format!("{M_PASSED2} the 99th percentile latency reached 30s")}]})
    );
    assert_eq!(
        input["verified_evidence"],
        json!([
            {"claim_id": "c1", "source_invocation_id": "inv-1", "tool_name": "search_logs",
             "raw_path": "/matches/0/line", "matched_text": MATCHED1},
            {"claim_id": "c2", "source_invocation_id": "inv-2", "tool_name": "query_metrics",
             "raw_path": "/result/0/value", "matched_text": MATCHED2}])
    );
    assert_eq!(
        input["gatekeeper_audit"],
        json!({"claims": 9, "bindings": 8, "passed": 2, "failed": 6, "unbound_claims": 1})
    );
    assert_eq!(input["ceiling"], "LOW_CONFID");

    // No failed claim, hypothesis, unreferenced tool output, other run's output, raw quote
    // or tool arguments.
    assert_absent(text, &FORGED, "the verifier input");
    assert_absent(text, &NEVER, "the verifier input");
    assert_absent(
        text,
        &[
            M_TOOL_ARG,
            "\"quote\"",
            "retry budget",
            "(payment-service)",
            "p99 latency",
        ],
        "the verifier input",
    );

    // The Composer sees only what the Verifier allowed (c1), never c2.
    let composer_input = &h.inputs(AgentRole::Composer)[0];
    assert!(composer_input.contains(M_PASSED1));
    assert_absent(composer_input, &[M_PASSED2, MATCHED2], "the composer input");
    assert_absent(composer_input, &FORGED, "the composer input");
    assert_absent(composer_input, &NEVER, "the composer input");
    assert_absent(composer_input, &[M_TOOL_ARG], "the composer input");
}

// ---------------------------------------------------------------------------------------------
// Verifier execution failures
// ---------------------------------------------------------------------------------------------

/// A round-1 run (Gatekeeper PASS) whose Verifier attempts are answered by `replies`.
async fn verifier_failure_run(replies: Vec<Result<String, InvokeError>>) -> (Harness, Done) {
    let h = Harness::planned(exec_pass());
    for r in replies {
        match r {
            Ok(text) => h.reply(AgentRole::Verifier, text),
            Err(e) => h.fail(AgentRole::Verifier, e),
        };
    }
    let done = run(&h).await;
    (h, done)
}

fn assert_no_verdict(done: &Done) {
    let s = &done.state;
    assert_eq!(s.round.verifier_model_verdict, None);
    assert_eq!(s.round.effective_verdict, None);
    assert_eq!(s.round.verifier_result, None);
    // The failed attempts of the final round record no verdict either.
    for e in done
        .events_of(V)
        .into_iter()
        .filter(|e| e.round == s.round_number)
    {
        assert!(detail(e, "model_verdict").is_none());
        assert!(detail(e, "effective_verdict").is_none());
    }
}

/// A row: the former test's name, the Verifier's replies, and what else holds of the run.
type VerifierCase = (
    &'static str,
    Vec<Result<String, InvokeError>>,
    fn(&Harness, &Done),
);

/// A Verifier that fails sets only its status: no verdict, a pre-verification Fallback.
#[tokio::test]
async fn verifier_failures_set_only_the_status() {
    // A verdict outside the contract.
    let bad = verifier("PASS", &["c1"], json!([])).replace("\"PASS\"", "\"PROBABLY\"");
    let cases: [VerifierCase; 3] = [
        (
            "an_invalid_verifier_output_sets_only_the_status",
            vec![Ok(bad.clone()), Ok(bad)],
            |h, done| {
                assert_eq!(
                    done.trail(),
                    trail(&[
                        (P, 1, 1, Status::Completed),
                        (E, 1, 1, Status::Completed),
                        (G, 1, 1, Status::Pass),
                        (VI, 1, 1, Status::Built),
                        (V, 1, 1, Status::InvalidOutput),
                        (V, 2, 1, Status::InvalidOutput),
                        (F, 1, 1, Status::Answered),
                    ])
                );
                assert_eq!(
                    done.state.round.verifier_status,
                    Some(AgentStatus::InvalidOutput)
                );
                for e in done.events_of(V) {
                    assert_eq!(detail_text(e, "reason"), "invalid_value");
                }
                assert!(done.answer().contains("The Verifier could not verify"));
                assert!(h.model.requests_for(AgentRole::Composer).is_empty());
            },
        ),
        (
            "a_transient_verifier_failure_sets_only_the_status",
            vec![
                Err(InvokeError::Transient("HTTP 503".into())),
                Err(InvokeError::Transient("timeout".into())),
            ],
            |_, done| {
                assert_eq!(done.state.path(), [P, E, G, VI, V, V, F]);
                assert_eq!(
                    done.state.round.verifier_status,
                    Some(AgentStatus::RetryableFailed)
                );
                assert_eq!(done.state.round.retries.verifier, 1);
                for e in done.events_of(V) {
                    assert_eq!(e.status, Status::RetryableFailed);
                    assert_eq!(detail_text(e, "failure"), "transient");
                }
            },
        ),
        (
            "a_permanent_verifier_failure_sets_only_the_status_without_a_retry",
            vec![Err(InvokeError::Permanent("HTTP 401".into()))],
            |h, done| {
                assert_eq!(done.state.path(), [P, E, G, VI, V, F]);
                assert_eq!(
                    done.state.round.verifier_status,
                    Some(AgentStatus::NonRetryableFailed)
                );
                assert_eq!(detail_text(done.events_of(V)[0], "failure"), "permanent");
                assert_eq!(h.model.requests_for(AgentRole::Verifier).len(), 1);
            },
        ),
    ];
    for (name, replies, then) in cases {
        let _row = Row::named(name);
        let (h, done) = verifier_failure_run(replies).await;
        then(&h, &done);
        assert_no_verdict(&done);
        assert_pre_fallback(&done);
    }
}

// ---------------------------------------------------------------------------------------------
// Byte-identical technical retries
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_verifier_retry_sends_byte_identical_input_and_reruns_nothing_before_it() {
    let h = Harness::planned(exec_mixed());
    h.fail(
        AgentRole::Verifier,
        InvokeError::Transient("HTTP 429".into()),
    )
    .reply(
        AgentRole::Verifier,
        verifier("PASS", &["c1", "c2"], json!([])),
    )
    .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;

    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::LowConfid),
            (VI, 1, 1, Status::Built),
            (V, 1, 1, Status::RetryableFailed),
            (V, 2, 1, Status::Completed),
            (C, 1, 1, Status::Completed),
        ])
    );
    let requests = h.model.requests_for(AgentRole::Verifier);
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].input, requests[1].input, "byte-identical");
    assert_eq!((requests[0].attempt, requests[1].attempt), (1, 2));
    // Nothing before the Verifier ran again, and the log was not read again.
    assert_eq!(h.model.requests_for(AgentRole::Executor).len(), 1);
    let verifier_lookups: usize = done
        .lookups
        .iter()
        .filter(|(n, ..)| n == V)
        .map(|(_, _, l)| l.len())
        .sum();
    assert_eq!(verifier_lookups, 0);
    // Executor twice, Gatekeeper once, Composer once (its evidence context).
    assert_eq!(h.log.lookups().len(), 4);
    // Ceiling LOW_CONFID caps the model PASS.
    assert_eq!(done.state.round.effective_verdict, Some(Verdict::LowConfid));
}

#[tokio::test]
async fn the_composer_retry_sends_byte_identical_input() {
    let h = Harness::planned(exec_pass());
    h.reply(
        AgentRole::Verifier,
        verifier("PASS", &["c1", "c2"], json!([])),
    )
    .reply(
        AgentRole::Composer,
        format!("Here you go: {}", composer(ANSWER, &["c1"])),
    )
    .reply(AgentRole::Composer, composer(ANSWER, &["c1", "c2"]));
    let done = run(&h).await;

    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::Pass),
            (VI, 1, 1, Status::Built),
            (V, 1, 1, Status::Completed),
            (C, 1, 1, Status::InvalidOutput),
            (C, 2, 1, Status::Completed),
        ])
    );
    let requests = h.model.requests_for(AgentRole::Composer);
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].input, requests[1].input, "byte-identical");
    assert_eq!(h.model.requests_for(AgentRole::Verifier).len(), 1);
    assert_eq!(done.answer(), cited(ANSWER, &["c1", "c2"]));
    assert!(!done.state.degraded);
}

// ---------------------------------------------------------------------------------------------
// The Gatekeeper ceiling
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_low_confid_ceiling_caps_a_model_pass() {
    let h = Harness::planned(exec_mixed());
    h
        // PASS with a critical gap: under a LOW_CONFID ceiling this is not retried.
        .reply(
            AgentRole::Verifier,
            verifier("PASS", &["c1", "c2"], critical_gap()),
        )
        .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;

    let s = &done.state;
    assert_eq!(s.path(), [P, E, G, VI, V, C]);
    assert_eq!(s.round.ceiling, Some(Verdict::LowConfid));
    assert_eq!(s.round.verifier_status, Some(AgentStatus::Completed));
    assert_eq!(s.round.verifier_model_verdict, Some(Verdict::Pass));
    assert_eq!(s.round.effective_verdict, Some(Verdict::LowConfid));
    assert_eq!(s.evidence_retry_count, 0);
    let event = done.events_of(V)[0];
    assert_eq!(event.status, Status::Completed);
    assert_eq!(detail_text(event, "model_verdict"), "PASS");
    assert_eq!(detail_text(event, "effective_verdict"), "LOW_CONFID");
    let composer_input: Value = serde_json::from_str(&h.inputs(AgentRole::Composer)[0]).unwrap();
    assert_eq!(composer_input["effective_verdict"], "LOW_CONFID");
}

// ---------------------------------------------------------------------------------------------
// Contract violations are INVALID_OUTPUT
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn allowed_claims_outside_the_verified_claims_are_invalid_output() {
    // c3 failed its binding; the Verifier was never shown it and cannot allow it.
    let h = Harness::planned(exec_mixed());
    h.reply(
        AgentRole::Verifier,
        verifier("PASS", &["c1", "c3"], json!([])),
    )
    .reply(AgentRole::Verifier, verifier("PASS", &["c3"], json!([])));
    let done = run(&h).await;

    assert_eq!(done.state.path(), [P, E, G, VI, V, V, F]);
    for e in done.events_of(V) {
        assert_eq!(e.status, Status::InvalidOutput);
        assert_eq!(detail_text(e, "reason"), "unknown_reference");
    }
    assert_eq!(
        done.state.round.verifier_status,
        Some(AgentStatus::InvalidOutput)
    );
    assert_no_verdict(&done);
    assert_pre_fallback(&done);
}

#[tokio::test]
async fn cited_claims_outside_the_allowed_claims_are_invalid_output() {
    // c2 is verified but not allowed; the Composer cites it twice.
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer(ANSWER, &["c1", "c2"]))
        .reply(AgentRole::Composer, composer(ANSWER, &["c2"]));
    let done = run(&h).await;

    assert_eq!(done.state.path(), [P, E, G, VI, V, C, C, F]);
    for e in done.events_of(C) {
        assert_eq!(e.status, Status::InvalidOutput);
        assert_eq!(detail_text(e, "reason"), "unknown_reference");
    }
    assert_eq!(done.state.composer_status, Some(AgentStatus::InvalidOutput));
    assert_eq!(
        done.state.fallback_kind,
        Some(FallbackKind::PostVerification)
    );
    // The Composer's answer was never taken.
    assert!(!done.answer().contains(ANSWER));
    assert!(done.answer().contains(M_PASSED1));
    assert_absent(
        done.answer(),
        &[M_PASSED2, MATCHED2],
        "the post-verification answer",
    );
}

#[tokio::test]
async fn each_contract_violation_reaches_the_event_detail_as_its_code() {
    // Through the real Executor node: its output breaks the contract in one way each time,
    // and the event names how, with no technical retry and the pre-verification Fallback.
    let no_claims = json!({"schema": "executor_evidence_v2", "hypotheses": [],
                           "no_evidence": [], "limitations": []});
    let mut claims_as_text = no_claims.clone();
    claims_as_text["claims"] = json!("c1 is true");
    for (output, reason) in [
        ("the pool is exhausted, trust me".to_string(), "not_json"),
        (
            "{\"schema\": \"executor_evidence_v2\", \"claims\": [".to_string(),
            "not_json",
        ),
        (no_claims.to_string(), "missing_field"),
        (claims_as_text.to_string(), "wrong_type"),
        ("[1, 2, 3]".to_string(), "not_an_object"),
        ("   ".to_string(), "empty_output"),
    ] {
        let h = Harness::planned(output.clone());
        let done = run(&h).await;
        assert_eq!(done.state.path(), [P, E, F], "{output}");
        let e = done.events_of(E)[0];
        assert_eq!(e.status, Status::InvalidOutput, "{output}");
        assert_eq!(detail_text(e, "reason"), reason, "{output}");
        assert_eq!(done.state.round.executor_output, None);
        assert_pre_fallback(&done);
    }
}

#[tokio::test]
async fn prose_around_json_is_invalid_output_for_every_agent() {
    let wrap = |doc: String| format!("Sure! Here is the result:\n{doc}\nHope this helps.");

    // Planner: invalid, then its one retry succeeds.
    let h = Harness::new();
    h.reply(AgentRole::Planner, wrap(plan_normal()))
        .reply(AgentRole::Planner, plan_normal())
        .reply(AgentRole::Executor, wrap(exec_pass()));
    let done = run(&h).await;
    // Executor: no technical retry; INVALID_OUTPUT goes straight to the Fallback.
    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::InvalidOutput),
            (P, 2, 1, Status::Completed),
            (E, 1, 1, Status::InvalidOutput),
            (F, 1, 1, Status::Answered),
        ])
    );
    assert_eq!(
        detail_text(done.events_of(P)[0], "reason"),
        "prose_around_json"
    );
    assert_eq!(
        detail_text(done.events_of(E)[0], "reason"),
        "prose_around_json"
    );
    assert_eq!(
        done.state.round.executor_status,
        Some(ExecutorStatus::InvalidOutput)
    );
    assert_eq!(done.state.round.executor_output, None);
    assert_pre_fallback(&done);

    // Verifier: twice, then the pre-verification Fallback.
    let (_, done) = verifier_failure_run(vec![
        Ok(wrap(verifier("PASS", &["c1"], json!([])))),
        Ok(wrap(verifier("PASS", &["c1"], json!([])))),
    ])
    .await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, V, F]);
    for e in done.events_of(V) {
        assert_eq!(detail_text(e, "reason"), "prose_around_json");
    }
    assert_pre_fallback(&done);

    // Composer: twice, then the post-verification Fallback.
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, wrap(composer(ANSWER, &["c1"])))
        .reply(AgentRole::Composer, wrap(composer(ANSWER, &["c1"])));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C, C, F]);
    for e in done.events_of(C) {
        assert_eq!(detail_text(e, "reason"), "prose_around_json");
    }
    assert_eq!(
        done.state.fallback_kind,
        Some(FallbackKind::PostVerification)
    );
    assert!(!done.answer().contains(ANSWER));
}

#[tokio::test]
async fn a_plan_step_naming_an_unknown_tool_is_invalid_output() {
    let unknown = plan_normal().replace("\"query_metrics\"", "\"shell_exec\"");
    let h = Harness::new();
    h.reply(AgentRole::Planner, unknown.clone())
        .reply(AgentRole::Planner, unknown);
    let done = run(&h).await;

    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::InvalidOutput),
            (P, 2, 1, Status::InvalidOutput),
            (F, 1, 1, Status::Answered),
        ])
    );
    for e in done.events_of(P) {
        assert_eq!(detail_text(e, "reason"), "unknown_tool");
    }
    assert_eq!(done.state.round.plan, None);
    assert!(h.model.requests_for(AgentRole::Executor).is_empty());
    assert_pre_fallback(&done);
    assert!(done
        .answer()
        .contains("The Planner could not produce a usable plan"));
    assert!(!done.answer().contains("shell_exec"));
}

// ---------------------------------------------------------------------------------------------
// Evidence retry
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_second_planner_request_plans_only_the_gaps_with_the_retry_context() {
    let (h, done) = two_round_run().await;
    let planner = h.json_inputs(AgentRole::Planner);
    let retry = &planner[1]["retry_context"];
    assert_eq!(planner[1]["mode"], "EVIDENCE_GAP_ONLY");
    assert_eq!(
        keys(retry),
        set(&[
            "prior_verified_output",
            "prior_verified_evidence",
            "critical_gaps",
            "completed_queries",
            "constraints"
        ])
    );
    assert_eq!(
        retry["critical_gaps"],
        json!([{"id": "g1", "fact": "pool exhaustion is not shown",
                "verification": "no_evidence", "claim_ids": []}])
    );
    // This run's round-1 queries, canonical and sorted; never the other run's.
    assert_eq!(
        retry["completed_queries"],
        json!([
            {"tool_name": "query_metrics", "arguments": "{\"query\":\"p99\"}"},
            {"tool_name": "search_logs", "arguments": "{\"query\":\"502\",\"service\":\"checkout\"}"},
            {"tool_name": "search_runbooks", "arguments": format!("{{\"q\":\"{M_TOOL_ARG}\"}}")}
        ])
    );
    assert_eq!(retry["constraints"], json!(CONSTRAINTS));
    assert_eq!(done.state.planner_mode, PlannerMode::EvidenceGapOnly);
    assert_eq!(done.state.evidence_retry_count, 1);
    let r2 = &h.model.requests_for(AgentRole::Planner)[1];
    assert_eq!((r2.round, r2.attempt), (2, 1));
}

#[tokio::test]
async fn the_second_executor_input_carries_prior_verified_material_and_constraints() {
    let (h, _) = two_round_run().await;
    let executor = h.json_inputs(AgentRole::Executor);
    let retry = &executor[1]["retry_context"];
    assert_eq!(
        retry["prior_verified_output"],
        json!({"claims": [
            {"claim_id": "c1",
             "text": format!("{M_PASSED1} checkout saw upstream 502s from payment-service")},
            {"claim_id": "c2", "text": format!("{M_PASSED2} the 99th percentile latency reached 30s")}]})
    );
    let matched: Vec<&str> = retry["prior_verified_evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["matched_text"].as_str().unwrap())
        .collect();
    assert_eq!(matched, [MATCHED1, MATCHED2]);
    let constraints: Vec<&str> = retry["constraints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(constraints, CONSTRAINTS);
    assert!(constraints
        .iter()
        .any(|c| c.contains("Do not repeat any completed query")));
    assert!(constraints
        .iter()
        .any(|c| c.contains("complete executor_evidence_v2 snapshot")));
    // The incremental plan: only the gap's step, tied to the gap.
    assert_eq!(
        executor[1]["plan"]["steps"],
        json!([{"id": "s1", "goal": "payment pool waiters", "tool": "query_metrics",
                "arguments": {"query": "pool_waiters"}, "gap_id": "g1"}])
    );
    assert_eq!(h.model.requests_for(AgentRole::Executor)[1].round, 2);
}

#[tokio::test]
async fn the_second_snapshot_is_revalidated_and_a_forged_binding_is_caught() {
    let h = Harness::new();
    h.tool_calls(2, vec![round2_invocation()])
        .reply(AgentRole::Planner, plan_normal())
        .reply(AgentRole::Planner, plan_gap())
        .reply(AgentRole::Executor, exec_pass())
        .reply(AgentRole::Executor, exec_round2(c_new_forged()))
        .reply(
            AgentRole::Verifier,
            verifier("LOW_CONFID", &["c1", "c2"], critical_gap()),
        )
        .reply(
            AgentRole::Verifier,
            verifier("PASS", &["c1", "c2"], json!([])),
        )
        .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;

    let gates: Vec<Status> = done.events_of(G).iter().map(|e| e.status).collect();
    assert_eq!(
        gates,
        [Status::Pass, Status::LowConfid],
        "round 1 passed, round 2 did not"
    );
    let raw = done.state.round.gatekeeper_raw.as_ref().unwrap();
    let c10 = raw
        .checked_bindings
        .iter()
        .find(|b| b.claim_id == "c10")
        .unwrap();
    assert_eq!(c10.failure.as_deref(), Some("unknown_invocation"));
    assert_eq!(done.state.round.ceiling, Some(Verdict::LowConfid));

    // The round-2 Verifier sees the round-2 projection, without the forged claim.
    let verifier_inputs = h.inputs(AgentRole::Verifier);
    assert_ne!(verifier_inputs[0], verifier_inputs[1]);
    let v2: Value = serde_json::from_str(&verifier_inputs[1]).unwrap();
    assert_eq!(v2["ceiling"], "LOW_CONFID");
    assert_eq!(v2["gatekeeper_audit"]["failed"], 1);
    assert_absent(
        &verifier_inputs[1],
        &[M_ROUND2_FORGED, "disk full"],
        "round-2 verifier input",
    );
    assert_absent(
        &h.inputs(AgentRole::Composer)[0],
        &[M_ROUND2_FORGED],
        "the composer input",
    );
    assert_absent(done.answer(), &[M_ROUND2_FORGED], "the answer");
    // The ceiling of round 2 caps the round-2 PASS.
    assert_eq!(done.state.round.effective_verdict, Some(Verdict::LowConfid));
}

#[tokio::test]
async fn a_fully_forged_second_snapshot_fails_closed_without_mixing_rounds() {
    // The snapshot keeps the prior claims' ids, as it must, but binds them to an invocation
    // only the other run has: nothing in it passes.
    let forged = |id: &str| {
        claim(
            id,
            format!("{M_ROUND2_FORGED} {id} again"),
            vec![bind("inv-7", "search_logs", "/matches/0/line", "disk full")],
        )
    };
    let h = Harness::new();
    h.tool_calls(2, vec![round2_invocation()])
        .reply(AgentRole::Planner, plan_normal())
        .reply(AgentRole::Planner, plan_gap())
        .reply(AgentRole::Executor, exec_pass())
        .reply(
            AgentRole::Executor,
            executor_doc(vec![forged("c1"), forged("c2"), c_new_forged()]),
        )
        .reply(
            AgentRole::Verifier,
            verifier("LOW_CONFID", &["c1", "c2"], critical_gap()),
        );
    let done = run(&h).await;

    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::Pass),
            (VI, 1, 1, Status::Built),
            (V, 1, 1, Status::Completed),
            (RP, 1, 1, Status::Prepared),
            (P, 1, 2, Status::Completed),
            (E, 1, 2, Status::Completed),
            (G, 1, 2, Status::Reject),
            (F, 1, 2, Status::Answered),
        ])
    );
    // Round 1's verified material and verdict are gone, not reused.
    let s = &done.state;
    assert_eq!(s.round.verified_executor_output, None);
    assert!(s.round.verified_evidence.is_empty());
    assert_eq!(h.model.requests_for(AgentRole::Verifier).len(), 1);
    assert_pre_fallback(&done);
}

#[tokio::test]
async fn a_second_snapshot_that_drops_a_verified_claim_is_invalid_output() {
    // SPEC §2.2: the round-2 snapshot is complete, keeping the prior verified claims.
    let h = Harness::new();
    h.tool_calls(2, vec![round2_invocation()])
        .reply(AgentRole::Planner, plan_normal())
        .reply(AgentRole::Planner, plan_gap())
        .reply(AgentRole::Executor, exec_pass())
        .reply(AgentRole::Executor, executor_doc(vec![c2(), c_new()]))
        .reply(
            AgentRole::Verifier,
            verifier("LOW_CONFID", &["c1", "c2"], critical_gap()),
        );
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, RP, P, E, F]);
    let e = done.events_of(E)[1];
    assert_eq!(e.status, Status::InvalidOutput);
    assert_eq!(detail_text(e, "reason"), "missing_prior_claim");
    // Round 1's Executor has nothing to avoid; round 2's gets the completed queries, which
    // its runtime blocks (SPEC §2.6).
    let requests = h.model.requests_for(AgentRole::Executor);
    assert!(requests[0].completed_queries.is_empty());
    let completed = &done.state.retry_context.as_ref().unwrap().completed_queries;
    assert!(!completed.is_empty());
    assert_eq!(&requests[1].completed_queries, completed);
    assert_eq!(done.state.round.executor_output, None);
    assert_eq!(h.model.requests_for(AgentRole::Verifier).len(), 1);
    assert_pre_fallback(&done);
}

#[tokio::test]
async fn a_no_evidence_entry_naming_a_call_never_made_is_invalid_output() {
    let h = Harness::new();
    h.reply(AgentRole::Planner, plan_normal()).reply(
        AgentRole::Executor,
        executor_doc_citing(vec![c1()], "inv-99"),
    );
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, F]);
    let e = done.events_of(E)[0];
    assert_eq!(e.status, Status::InvalidOutput);
    assert_eq!(detail_text(e, "reason"), "unknown_reference");
    assert_pre_fallback(&done);
}

#[tokio::test]
async fn the_first_verdict_is_never_reused() {
    // Round 2's Verifier fails: round 1's LOW_CONFID must not stand in for it.
    let h = Harness::new();
    h.tool_calls(2, vec![round2_invocation()])
        .reply(AgentRole::Planner, plan_normal())
        .reply(AgentRole::Planner, plan_gap())
        .reply(AgentRole::Executor, exec_pass())
        .reply(AgentRole::Executor, exec_round2(c_new()))
        .reply(
            AgentRole::Verifier,
            verifier("LOW_CONFID", &["c1", "c2"], critical_gap()),
        )
        .fail(
            AgentRole::Verifier,
            InvokeError::Permanent("HTTP 400".into()),
        );
    let done = run(&h).await;

    assert_eq!(done.state.path(), [P, E, G, VI, V, RP, P, E, G, VI, V, F]);
    let s = &done.state;
    assert_eq!(
        s.round.verifier_status,
        Some(AgentStatus::NonRetryableFailed)
    );
    assert_no_verdict(&done);
    assert_pre_fallback(&done);

    // And when round 2 completes, its verdict (not round 1's) is the one that counts.
    let (h, done) = two_round_run().await;
    assert_eq!(done.state.round.verifier_model_verdict, Some(Verdict::Pass));
    assert_eq!(done.state.round.effective_verdict, Some(Verdict::Pass));
    let verdicts: Vec<String> = done
        .events_of(V)
        .iter()
        .map(|e| detail_text(e, "model_verdict"))
        .collect();
    assert_eq!(verdicts, ["LOW_CONFID", "PASS"]);
    // Round 2's Verifier judged the round-2 projection, which has the new claim.
    let v2: Value = serde_json::from_str(&h.inputs(AgentRole::Verifier)[1]).unwrap();
    let ids: Vec<&str> = v2["verified_executor_output"]["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["claim_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c1", "c2", "c10"]);
    assert_eq!(v2["verified_evidence"][2]["matched_text"], MATCHED_NEW);
}

// ---------------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_composer_answer_is_rendered_without_terminal_escapes() {
    let hostile = "\u{1b}]0;pwned\u{7}Root cause: \u{1b}[31mpayment-service\u{1b}[0m \
                   timeouts\u{1b}[2J\r\nsee\u{202e} [c1]\u{9b}1m";
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer_raw(hostile, &["c1"]));
    let done = run(&h).await;

    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    let answer = done.answer();
    assert_eq!(answer, "Root cause: payment-service timeouts\nsee [c1]");
    assert_eq!(answer, render_answer(hostile));
    assert!(!answer.chars().any(|c| c.is_control() && c != '\n'));
    assert!(!answer.contains('\u{202e}'));
}

#[tokio::test]
async fn an_answer_that_renders_blank_falls_back_after_verification() {
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(
            AgentRole::Composer,
            composer_raw("\u{1b}[2J\u{1b}[H \u{7}", &["c1"]),
        );
    let done = run(&h).await;

    assert_eq!(done.state.path(), [P, E, G, VI, V, C, F]);
    assert_eq!(done.state.composer_status, Some(AgentStatus::Completed));
    assert_eq!(
        done.state.fallback_kind,
        Some(FallbackKind::PostVerification)
    );
    assert!(done.answer().contains(M_PASSED1));
    assert!(!done.answer().contains('\u{1b}'));
}

#[tokio::test]
async fn an_exhausted_composer_retry_falls_back_to_allowed_claims_only() {
    let h = Harness::planned(exec_mixed());
    h.reply(
        AgentRole::Verifier,
        verifier("LOW_CONFID", &["c1"], json!([])),
    )
    .fail(
        AgentRole::Composer,
        InvokeError::Transient("HTTP 502".into()),
    )
    .fail(
        AgentRole::Composer,
        InvokeError::Transient("HTTP 502".into()),
    );
    let done = run(&h).await;

    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::LowConfid),
            (VI, 1, 1, Status::Built),
            (V, 1, 1, Status::Completed),
            (C, 1, 1, Status::RetryableFailed),
            (C, 2, 1, Status::RetryableFailed),
            (F, 1, 1, Status::Answered),
        ])
    );
    let s = &done.state;
    assert_eq!(s.fallback_kind, Some(FallbackKind::PostVerification));
    assert!(s.degraded);
    assert_eq!(s.round.effective_verdict, Some(Verdict::LowConfid));
    let answer = done.answer();
    assert!(answer.contains("LOW CONFIDENCE"), "{answer}");
    // The allowed claim with its evidence (on one line), the missing information and the
    // recommendations.
    assert!(answer.contains(M_PASSED1));
    assert!(answer.contains("upstream returned 502"));
    assert!(answer.contains(MISSING));
    assert!(answer.contains(RECOMMENDATION));
    // Verified but not allowed, failed, and never-claim material are all absent.
    assert_absent(
        answer,
        &[M_PASSED2, MATCHED2],
        "the post-verification answer",
    );
    assert_absent(answer, &FORGED, "the post-verification answer");
    assert_absent(answer, &NEVER, "the post-verification answer");
    assert_absent(
        answer,
        &[M_TOOL_ARG, OTHER_RUN_TOOL],
        "the post-verification answer",
    );
}

#[tokio::test]
async fn an_effective_reject_falls_back_after_verification_with_allowed_claims_only() {
    let h = Harness::planned(exec_mixed());
    h.reply(AgentRole::Verifier, verifier("REJECT", &["c2"], json!([])));
    let done = run(&h).await;

    assert_eq!(done.state.path(), [P, E, G, VI, V, F]);
    assert_eq!(
        done.state.round.verifier_status,
        Some(AgentStatus::Completed)
    );
    assert_eq!(done.state.round.effective_verdict, Some(Verdict::Reject));
    assert_eq!(
        done.state.fallback_kind,
        Some(FallbackKind::PostVerification)
    );
    assert!(h.model.requests_for(AgentRole::Composer).is_empty());
    let answer = done.answer();
    assert!(answer.contains("REJECTED"));
    assert!(answer.contains(M_PASSED2));
    assert_absent(answer, &[M_PASSED1, "upstream returned"], "the answer");
    assert_absent(answer, &FORGED, "the answer");
    assert_absent(answer, &NEVER, "the answer");
}

#[tokio::test]
async fn events_carry_no_claim_text_quotes_or_tool_output() {
    let (_, done) = two_round_run().await;
    let h = Harness::planned(exec_mixed());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .fail(
            AgentRole::Composer,
            InvokeError::Permanent("HTTP 403".into()),
        );
    let mixed = run(&h).await;

    for d in [&done, &mixed] {
        let events = serde_json::to_string(&d.state.events).unwrap();
        assert_absent(&events, &FORGED, "the events");
        assert_absent(&events, &NEVER, "the events");
        assert_absent(
            &events,
            &[
                M_PASSED1, M_PASSED2, M_NEW, M_TOOL_ARG, "upstream", "latency", QUESTION, ANSWER,
            ],
            "the events",
        );
        // Details are bounded control data: counts, codes and verdicts only.
        for e in &d.state.events {
            for (key, value) in e.detail.iter() {
                if let DetailValue::Text(t) = value {
                    assert!(
                        t.len() <= 32 && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                        "event {} detail {key} is not a code: {t}",
                        e.node
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Content grounding (SPEC §2.9) through the real graph
// ---------------------------------------------------------------------------------------------

const M_SHORT_QUOTE: &str = "ZZSHORTQUOTECLAIMZZ";
const M_HALF_BOUND: &str = "ZZHALFBOUNDCLAIMZZ";
const M_UNBOUND_TOKEN: &str = "ZZUNBOUNDTOKENCLAIMZZ";

/// Shape 1: an invented claim bound by a one-character quote.
fn c_short_quote() -> Value {
    claim(
        "c3",
        format!("{M_SHORT_QUOTE} the primary database disk failed at 13:55"),
        vec![bind("inv-1", "search_logs", "/matches/0/line", "e")],
    )
}

/// Shape 2: one real binding and one invented.
fn c_half_bound() -> Value {
    claim(
        "c4",
        format!(
            "{M_HALF_BOUND} 502s are caused by settlement-batch holding 50 DB connections \
             (confirmed by DBA ticket #4411)"
        ),
        vec![
            bind(
                "inv-1",
                "search_logs",
                "/matches/0/line",
                "upstream returned 502",
            ),
            bind(
                "inv-1",
                "search_logs",
                "/matches/0/line",
                "DBA ticket #4411 confirms",
            ),
        ],
    )
}

/// Every binding passes, but the text names a ticket no evidence holds.
fn c_unbound_token() -> Value {
    claim(
        "c5",
        format!("{M_UNBOUND_TOKEN} upstream 502s from payment-service, see ticket #4411"),
        vec![bind(
            "inv-1",
            "search_logs",
            "/matches/0/line",
            "upstream returned 502",
        )],
    )
}

#[tokio::test]
async fn a_claim_bound_only_by_a_short_quote_never_reaches_an_answer() {
    // Failing: alone, the invented claim leaves nothing to verify.
    let h = Harness::planned(executor_doc(vec![c_short_quote()]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, F]);
    assert_eq!(done.state.round.gatekeeper_status, Some(GateStatus::Reject));
    let raw = done.state.round.gatekeeper_raw.as_ref().unwrap();
    assert_eq!(
        raw.checked_bindings[0].failure.as_deref(),
        Some("quote_too_short")
    );
    assert_pre_fallback(&done);
    assert_absent(
        done.answer(),
        &[M_SHORT_QUOTE, "13:55", "disk"],
        "the answer",
    );
    assert!(h.model.requests_for(AgentRole::Verifier).is_empty());

    // Passing: beside a bound claim, only the bound claim is verified and answered.
    let h = Harness::new();
    h.reply(AgentRole::Planner, plan_normal())
        .reply(
            AgentRole::Executor,
            executor_doc(vec![c1(), c_short_quote()]),
        )
        .reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    assert_eq!(
        done.state.round.gatekeeper_status,
        Some(GateStatus::LowConfid)
    );
    assert_eq!(done.state.round.effective_verdict, Some(Verdict::LowConfid));
    let input = &h.inputs(AgentRole::Verifier)[0];
    assert_absent(input, &[M_SHORT_QUOTE, "13:55"], "the verifier input");
}

#[tokio::test]
async fn refused_claims_reach_the_verifier_as_ids_and_codes_only() {
    let h = Harness::new();
    h.reply(AgentRole::Planner, plan_normal())
        .reply(
            AgentRole::Executor,
            executor_doc(vec![c1(), c2(), c_half_bound(), c_unbound_token()]),
        )
        .reply(
            AgentRole::Verifier,
            verifier("LOW_CONFID", &["c1"], json!([])),
        )
        .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    assert_eq!(
        done.state.round.gatekeeper_status,
        Some(GateStatus::LowConfid)
    );

    let text = &h.inputs(AgentRole::Verifier)[0];
    let input: Value = serde_json::from_str(text).unwrap();
    let verified: Vec<&str> = input["verified_executor_output"]["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["claim_id"].as_str().unwrap())
        .collect();
    assert_eq!(verified, ["c1", "c2"]);
    assert_eq!(
        input["refused_claims"],
        json!([
            {"claim_id": "c4", "code": "failed_binding", "binding_failures": ["quote_not_found"]},
            {"claim_id": "c5", "code": "unbound_token", "token_kind": "number"}])
    );
    // Codes, not model text: neither claim's text nor the unbound token is shown, and the
    // half-bound claim's passed binding brings it no evidence entry.
    assert_absent(
        text,
        &[
            M_HALF_BOUND,
            M_UNBOUND_TOKEN,
            "#4411",
            "settlement-batch",
            "DBA",
        ],
        "the verifier input",
    );
    assert!(input["verified_evidence"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| ["c1", "c2"].contains(&e["claim_id"].as_str().unwrap())));
    assert_absent(done.answer(), &[M_HALF_BOUND, "#4411"], "the answer");

    // Passing: with nothing refused, the Verifier input has no `refused_claims` at all.
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;
    assert_eq!(done.state.round.gatekeeper_status, Some(GateStatus::Pass));
    let input: Value = serde_json::from_str(&h.inputs(AgentRole::Verifier)[0]).unwrap();
    assert!(input.get("refused_claims").is_none(), "{input}");
}

#[tokio::test]
async fn the_verifier_may_not_allow_a_refused_claim() {
    // The Verifier allows c4, which the Gatekeeper refused although one of its bindings
    // passed: the output references an id outside the verified claims.
    let h = Harness::new();
    h.reply(AgentRole::Planner, plan_normal())
        .reply(
            AgentRole::Executor,
            executor_doc(vec![c1(), c_half_bound()]),
        )
        .reply(
            AgentRole::Verifier,
            verifier("PASS", &["c1", "c4"], json!([])),
        )
        .reply(
            AgentRole::Verifier,
            verifier("PASS", &["c1", "c4"], json!([])),
        );
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, V, F]);
    for e in done.events_of(V) {
        assert_eq!(e.status, Status::InvalidOutput);
    }
    assert_absent(done.answer(), &[M_HALF_BOUND, "#4411"], "the answer");
}

/// (claim, binding field, value) that breaks the strict formats, and the reason code.
fn malformed_identifiers() -> Vec<(Value, &'static str)> {
    let with_binding = |field: &str, value: Value| {
        let mut b = bind(
            "inv-1",
            "search_logs",
            "/matches/0/line",
            "upstream returned 502",
        );
        b[field] = value;
        claim("c9", "checkout saw upstream 502s".into(), vec![b])
    };
    vec![
        (claim("c 1", "x".into(), vec![]), "invalid_claim_id"),
        (claim("1c", "x".into(), vec![]), "invalid_claim_id"),
        (claim("c1\u{1b}[2J", "x".into(), vec![]), "invalid_claim_id"),
        (
            claim(&format!("c{}", "1".repeat(32)), "x".into(), vec![]),
            "invalid_claim_id",
        ),
        (claim("../c1", "x".into(), vec![]), "invalid_claim_id"),
        (
            with_binding("raw_path", json!(format!("/{}", "a".repeat(512)))),
            "unbounded_pointer",
        ),
        (
            with_binding("raw_path", json!("/matches/0/line\u{7}")),
            "unbounded_pointer",
        ),
        (
            with_binding("raw_path", json!("matches/0/line")),
            "invalid_pointer",
        ),
        (
            with_binding("source_invocation_id", json!("run-B/inv-1")),
            "invalid_name",
        ),
        (
            with_binding("source_invocation_id", json!("inv 1")),
            "invalid_name",
        ),
        (
            with_binding("tool_name", json!("search logs")),
            "invalid_name",
        ),
        (
            with_binding("tool_name", json!("x".repeat(65))),
            "invalid_name",
        ),
    ]
}

#[tokio::test]
async fn model_written_identifiers_must_have_their_strict_formats() {
    for (bad, reason) in malformed_identifiers() {
        let h = Harness::planned(executor_doc(vec![c1(), bad.clone()]));
        let done = run(&h).await;
        assert_eq!(done.state.path(), [P, E, F], "{bad}");
        let e = done.events_of(E)[0];
        assert_eq!(e.status, Status::InvalidOutput, "{bad}");
        assert_eq!(detail_text(e, "reason"), reason, "{bad}");
        assert_pre_fallback(&done);
        assert!(!done.answer().contains("\u{1b}"));
    }
    // Passing: the longest legal forms go through to the Gatekeeper.
    let longest_id = format!("c{}", "_".repeat(31));
    let ok = claim(
        &longest_id,
        "checkout saw upstream 502s".into(),
        vec![bind(
            "inv-1",
            "search_logs",
            "/matches/0/line",
            "upstream returned 502",
        )],
    );
    let h = Harness::planned(executor_doc(vec![ok]));
    h.reply(
        AgentRole::Verifier,
        verifier("PASS", &[longest_id.as_str()], json!([])),
    )
    .reply(
        AgentRole::Composer,
        composer(ANSWER, &[longest_id.as_str()]),
    );
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
}

#[test]
fn low_confid_continues_only_with_an_accepted_claim() {
    use diag_diagnosis::scripted;
    let mut s = DiagnosisState::new(
        QUESTION,
        diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0)),
    );
    // A passed binding of a refused claim is not enough.
    let mut raw = scripted::steps::raw(Some("fail"), Some("low-confid"), 1, 0);
    raw.refused_claims.push(diag_core::protocol::RefusedClaim {
        claim_id: "c1".into(),
        code: diag_core::protocol::ClaimRefusal::UnboundToken,
        token: None,
    });
    s.round.gatekeeper_raw = Some(raw);
    assert!(!topology::has_accepted_claim(&s));
    s.round.gatekeeper_raw = Some(scripted::steps::raw(Some("fail"), Some("low-confid"), 1, 1));
    assert!(topology::has_accepted_claim(&s));
}

// ---------------------------------------------------------------------------------------------
// Content grounding (SPEC §2.9): the Verifier agrees with itself, and an answer says only what
// the question and the allowed claims' evidence say. One test per rule, each with a passing
// and a failing case.
// ---------------------------------------------------------------------------------------------

/// A `verifier_verdict_v1` document with explicit checks and facts.
fn verifier_doc(verdict: &str, checks: Value, facts: Value, allowed: &[&str]) -> String {
    json!({"schema": "verifier_verdict_v1", "verdict": verdict, "groundedness": 0.8,
           "claim_checks": checks, "facts": facts, "allowed_claims": allowed,
           "missing_information": [MISSING], "recommendations": [RECOMMENDATION],
           "rationale": "checked"})
    .to_string()
}

fn reasons(done: &Done, node: &str) -> Vec<String> {
    done.events_of(node)
        .iter()
        .map(|e| detail_text(e, "reason"))
        .collect()
}

/// The run ended at the post-verification Fallback after the Composer's retry.
fn assert_composer_refused_twice(done: &Done, reason: &str) {
    assert_eq!(done.state.path(), [P, E, G, VI, V, C, C, F]);
    assert_eq!(reasons(done, C), [reason, reason]);
    assert_eq!(done.state.composer_status, Some(AgentStatus::InvalidOutput));
    assert_eq!(
        done.state.fallback_kind,
        Some(FallbackKind::PostVerification)
    );
    assert!(done.state.degraded);
    // Only verified material: the allowed claim, never a refused or unallowed one.
    let answer = done.answer();
    assert!(answer.contains(M_PASSED1), "{answer}");
    assert_absent(answer, &FORGED, "the post-verification answer");
    assert_absent(
        answer,
        &[M_PASSED2, MATCHED2],
        "the post-verification answer",
    );
}

#[tokio::test]
async fn rule_verifier_allows_only_claims_its_own_checks_support() {
    // Passing: c2 is checked unsupported and not allowed; c1 is supported and allowed.
    let checks = json!([{"claim_id": "c1", "supported": true},
                        {"claim_id": "c2", "supported": false}]);
    let h = Harness::planned(exec_pass());
    h.reply(
        AgentRole::Verifier,
        verifier_doc("PASS", checks.clone(), json!([]), &["c1"]),
    )
    .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    assert_eq!(done.answer(), cited(ANSWER, &["c1"]));

    // Failing: c2 allowed although checked unsupported, then c1 allowed without any check.
    let unchecked = json!([{"claim_id": "c2", "supported": false}]);
    let (h, done) = verifier_failure_run(vec![
        Ok(verifier_doc("PASS", checks, json!([]), &["c1", "c2"])),
        Ok(verifier_doc("PASS", unchecked, json!([]), &["c1"])),
    ])
    .await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, V, F]);
    assert_eq!(
        reasons(&done, V),
        ["allows_unsupported_claim", "allows_unsupported_claim"]
    );
    assert_no_verdict(&done);
    assert_pre_fallback(&done);
    assert!(h.model.requests_for(AgentRole::Composer).is_empty());
}

#[tokio::test]
async fn rule_verifier_allows_no_claim_its_own_facts_contradict() {
    // Passing: the contradicted fact names c2, which is not allowed.
    let checks = json!([{"claim_id": "c1", "supported": true},
                        {"claim_id": "c2", "supported": true}]);
    let contradicts_c2 = json!([{"fact": "latency explains the 502s", "is_critical": true,
                                 "verification": "contradicted", "claim_ids": ["c2"]}]);
    let h = Harness::planned(exec_pass());
    h.reply(
        AgentRole::Verifier,
        verifier_doc("PASS", checks.clone(), contradicts_c2.clone(), &["c1"]),
    )
    .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);

    // Failing, the shape seen from real models: c2 marked unsupported AND named by a
    // contradicted fact, yet allowed; then marked supported but still contradicted.
    let shape3 = verifier_doc(
        "PASS",
        json!([{"claim_id": "c1", "supported": true},
               {"claim_id": "c2", "supported": false}]),
        contradicts_c2.clone(),
        &["c1", "c2"],
    );
    let (h, done) = verifier_failure_run(vec![
        Ok(shape3),
        Ok(verifier_doc("PASS", checks, contradicts_c2, &["c1", "c2"])),
    ])
    .await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, V, F]);
    assert_eq!(
        reasons(&done, V),
        ["allows_unsupported_claim", "allows_contradicted_claim"]
    );
    assert_no_verdict(&done);
    assert_pre_fallback(&done);
    // The contradicted claim reaches no answer.
    assert!(h.model.requests_for(AgentRole::Composer).is_empty());
    assert_absent(done.answer(), &[M_PASSED2, MATCHED2], "the answer");
}

#[tokio::test]
async fn rule_a_pass_verdict_needs_an_allowed_claim() {
    // Passing: LOW_CONFID may allow nothing; the Composer then cites nothing and says only
    // what the question says.
    let nothing = "No verified finding explains the 502s since 14:00.";
    let h = Harness::planned(exec_pass());
    h.reply(
        AgentRole::Verifier,
        verifier_doc("LOW_CONFID", json!([]), json!([]), &[]),
    )
    .reply(AgentRole::Composer, composer_raw(nothing, &[]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    assert_eq!(done.answer(), nothing);

    // Failing: PASS with nothing allowed, twice. The invented answer a Composer would have
    // written over it is never asked for.
    let (h, done) = verifier_failure_run(vec![
        Ok(verifier_doc("PASS", json!([]), json!([]), &[])),
        Ok(verifier_doc("PASS", json!([]), json!([]), &[])),
    ])
    .await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, V, F]);
    assert_eq!(
        reasons(&done, V),
        ["pass_without_allowed_claims", "pass_without_allowed_claims"]
    );
    assert_pre_fallback(&done);
    assert!(h.model.requests_for(AgentRole::Composer).is_empty());
}

#[tokio::test]
async fn rule_inline_citations_name_only_allowed_claims() {
    // Passing: the one allowed claim, cited inline and in `cited_claims`.
    let h = Harness::planned(exec_mixed());
    h.reply(
        AgentRole::Verifier,
        verifier("LOW_CONFID", &["c1"], json!([])),
    )
    .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);

    // Failing: an inline `[c3]` naming a claim the Gatekeeper refused, then `[c2]` naming a
    // claim that was verified but not allowed; `cited_claims` lists only c1 both times.
    let h = Harness::planned(exec_mixed());
    h.reply(
        AgentRole::Verifier,
        verifier("LOW_CONFID", &["c1"], json!([])),
    )
    .reply(
        AgentRole::Composer,
        composer_raw(&format!("{} [c3]", cited(ANSWER, &["c1"])), &["c1"]),
    )
    .reply(
        AgentRole::Composer,
        composer_raw(&format!("{} [c1, c2]", ANSWER), &["c1"]),
    );
    let done = run(&h).await;
    assert_composer_refused_twice(&done, "inline_citation_not_allowed");
    assert_absent(done.answer(), &["[c3]", "[c2]", ANSWER], "the answer");
}

#[tokio::test]
async fn rule_inline_citations_and_cited_claims_agree() {
    // Passing: the same set, in another order.
    let h = Harness::planned(exec_pass());
    h.reply(
        AgentRole::Verifier,
        verifier("PASS", &["c1", "c2"], json!([])),
    )
    .reply(
        AgentRole::Composer,
        composer_raw(&cited(ANSWER, &["c1", "c2"]), &["c2", "c1"]),
    );
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);

    // Failing: `cited_claims` lists a claim no marker cites, then a marker cites a claim
    // `cited_claims` leaves out.
    let h = Harness::planned(exec_pass());
    h.reply(
        AgentRole::Verifier,
        verifier("PASS", &["c1", "c2"], json!([])),
    )
    .reply(
        AgentRole::Composer,
        composer_raw(&cited(ANSWER, &["c1"]), &["c1", "c2"]),
    )
    .reply(
        AgentRole::Composer,
        composer_raw(&cited(ANSWER, &["c1", "c2"]), &["c1"]),
    );
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C, C, F]);
    assert_eq!(
        reasons(&done, C),
        ["citations_disagree", "citations_disagree"]
    );
    assert!(!done.answer().contains(ANSWER));
}

#[tokio::test]
async fn rule_an_answer_over_allowed_claims_cites_at_least_one() {
    // Failing, then passing on the technical retry: no citation at all although c1 is
    // allowed, and no fact of the answer that c1's evidence shows (so diag has no citation
    // to place), then the answer citing c1.
    const FACTLESS: &str = "the cause is not clear from here";
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer_raw(FACTLESS, &[]))
        .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;
    assert_eq!(
        done.trail(),
        trail(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::Pass),
            (VI, 1, 1, Status::Built),
            (V, 1, 1, Status::Completed),
            (C, 1, 1, Status::InvalidOutput),
            (C, 2, 1, Status::Completed),
        ])
    );
    assert_eq!(
        detail_text(done.events_of(C)[0], "reason"),
        "cites_no_claim"
    );
    assert_eq!(done.answer(), cited(ANSWER, &["c1"]));
    assert!(!done.state.degraded);

    // An answer without a marker whose facts c1's evidence shows gets its citation placed
    // (verified-evidence spec, "Citations diag places"): completed at once.
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer_raw(ANSWER, &[]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    assert_eq!(done.answer(), cited(ANSWER, &["c1"]));
    assert_eq!(detail_int(done.events_of(C)[0], "citations_placed"), 1);
}

/// An answer stating c1's log time (14:02:03 UTC) in EST, bound through derivation `d1`.
const ANSWER_IN_EST: &str =
    "checkout logged `upstream returned 502` from payment-service at 09:02:03 EST [d1] [c1]";

/// A `composer_answer_v2` document: `answer` as written, its cited claims and one derivation
/// converting c1's log time (14:02:03 UTC) to `stated` in EST.
fn composer_converting(answer: &str, stated: &str) -> String {
    json!({"schema": "composer_answer_v2", "answer_markdown": answer, "cited_claims": ["c1"],
           "derivations": [{"id": "d1", "value": stated, "unit": "EST", "op": "convert_zone",
                            "operands": [{"claim": "c1", "value": "14:02:03", "unit": "UTC"}]}]})
    .to_string()
}

#[tokio::test]
async fn rule_a_computed_value_binds_only_through_a_checked_cited_derivation() {
    // 14:02:03 UTC (c1's log timestamp) is 09:02:03 EST: the computed time is bound by the
    // derivation that holds, and the reader's state keeps its arithmetic.
    let answer = ANSWER_IN_EST;
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer_converting(answer, "09:02:03"));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    assert_eq!(done.answer(), answer);
    assert_eq!(detail_int(done.events_of(C)[0], "derivations"), 1);
    assert_eq!(
        detail_text(done.events_of(C)[0], "d1"),
        "09:02:03 EST = 14:02:03 UTC in EST (c1)"
    );
    let shown: Vec<String> = done
        .state
        .round
        .answer_derivations
        .iter()
        .map(|d| d.shown())
        .collect();
    assert_eq!(shown, ["09:02:03 EST = 14:02:03 UTC in EST (c1)"]);

    // A wrong result is refused with its arithmetic.
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer_converting(answer, "10:02:03"))
        .reply(AgentRole::Composer, composer_converting(answer, "10:02:03"));
    let done = run(&h).await;
    assert_composer_refused_twice(&done, "derivation_wrong");
    assert!(done.state.round.answer_derivations.is_empty());

    // c2's `30s` in minutes: 0.5 holds through its derivation, and without one it is an
    // unbound number, as every computed value was before.
    let halved = "the 99th percentile latency reached 0.5 min [d1] [c2]";
    let converted = json!({"schema": "composer_answer_v2", "answer_markdown": halved,
        "cited_claims": ["c2"],
        "derivations": [{"id": "d1", "value": "0.5", "unit": "min", "op": "convert_unit",
                         "operands": [{"claim": "c2", "value": "30", "unit": "s"}]}]})
    .to_string();
    let h = Harness::planned(exec_pass());
    h.reply(
        AgentRole::Verifier,
        verifier("PASS", &["c1", "c2"], json!([])),
    )
    .reply(AgentRole::Composer, converted);
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    assert_eq!(done.answer(), halved);
    let uncomputed = "the 99th percentile latency reached 0.5 min [c2]";
    let h = Harness::planned(exec_pass());
    h.reply(
        AgentRole::Verifier,
        verifier("PASS", &["c1", "c2"], json!([])),
    )
    .reply(AgentRole::Composer, composer_raw(uncomputed, &["c2"]))
    .reply(AgentRole::Composer, composer_raw(uncomputed, &["c2"]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C, C, F]);
    assert_eq!(
        reasons(&done, C),
        ["unbound_answer_token", "unbound_answer_token"]
    );
    assert_eq!(detail_text(done.events_of(C)[0], "token"), "0.5");
}

#[tokio::test]
async fn the_composer_is_asked_for_the_runs_contract_with_its_prompt_schema_and_retry_words() {
    let answer = ANSWER_IN_EST;
    // A live run's contract: composer_answer_v2 with prompt version 3. A wrong derivation is
    // refused with its arithmetic in the event and in the retry's correction.
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer_converting(answer, "10:02:03"))
        .reply(AgentRole::Composer, composer_converting(answer, "09:02:03"));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C, C]);
    assert_eq!(
        detail_text(done.events_of(C)[0], "reason"),
        "derivation_wrong"
    );
    let arithmetic = "d1: 14:02:03 UTC in EST (c1) = 09:02:03 EST, stated 10:02:03 EST";
    assert_eq!(detail_text(done.events_of(C)[0], "derivation"), arithmetic);
    let asked = h.model.requests_for(AgentRole::Composer);
    assert_eq!(asked.len(), 2);
    for r in &asked {
        let contract = r.output_schema.as_ref().expect("a contract is sent");
        assert_eq!(contract.name, "composer_answer_v2");
        assert_eq!(
            contract.schema["properties"]["schema"]["enum"],
            json!(["composer_answer_v2"])
        );
        assert_eq!(
            contract.schema["properties"]["derivations"]["items"]["properties"]["operands"]
                ["items"]["properties"]["claim"]["enum"],
            json!(["c1"]),
            "operands name the allowed claims"
        );
        assert_eq!(r.system_prompt().version, 3);
    }
    let correction = asked[1].correction.as_deref().expect("the retry says why");
    assert!(
        correction.contains(&format!("derivation_wrong: {arithmetic}")),
        "{correction}"
    );
    assert!(correction.contains("[dN]"), "{correction}");

    // A replay of a recording made before derivations: composer_answer_v1 with prompt version
    // 2 and its own retry words, so the request is the recorded one byte for byte.
    let h = Harness::planned(exec_pass()).asking(ComposerContract::V1);
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(
            AgentRole::Composer,
            composer_raw("the cause is not clear from here", &[]),
        )
        .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C, C]);
    let asked = h.model.requests_for(AgentRole::Composer);
    for r in &asked {
        let contract = r.output_schema.as_ref().expect("a contract is sent");
        assert_eq!(contract.name, "composer_answer_v1");
        assert!(contract.schema["properties"].get("derivations").is_none());
        assert_eq!(r.system_prompt().version, 2);
        assert!(!r.system_prompt().text.contains("derivation"));
    }
    let correction = asked[1].correction.as_deref().expect("the retry says why");
    assert!(
        correction.contains("do not compute new ones"),
        "{correction}"
    );

    // What an answer may state is the checks' to decide, not the contract asked for: a v2
    // document read in a run that asked for v1 is checked the same way.
    let h = Harness::planned(exec_pass()).asking(ComposerContract::V1);
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer_converting(answer, "09:02:03"));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    assert_eq!(done.answer(), answer);
}

#[tokio::test]
async fn rule_every_answer_token_occurs_in_the_question_or_the_allowed_evidence() {
    // Passing: `14:00` from the question, `14:02:03` from the log match's timestamp (the
    // enclosing record, not the matched text), the matched text as a quoted span,
    // `payment-service` from the claim, and a single-digit number that is not salient.
    let grounded = "Since 14:00 checkout logged `upstream returned 502` from payment-service \
                    at 14:02:03, 1 line [c1]";
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer_raw(grounded, &["c1"]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    assert_eq!(done.answer(), grounded);
    let c = done.events_of(C)[0];
    assert_eq!(detail_int(c, "answer_tokens"), 4);
    let g = done
        .state
        .round
        .answer_grounding
        .expect("the answer was checked");
    assert_eq!((g.tokens_checked, g.tokens_unbound), (4, 0));

    // Failing, the fabricated answer seen from real models: an invented version and time,
    // then a number taken from a claim that was verified but not allowed (c2's 99th
    // percentile).
    let invented =
        "Root cause: a bad deploy of payment-service v2.3.1 at 13:58. Roll back now. [c1]";
    let borrowed = "checkout 502s come from payment-service; the 99th percentile is slow [c1]";
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer_raw(invented, &["c1"]))
        .reply(AgentRole::Composer, composer_raw(borrowed, &["c1"]));
    let done = run(&h).await;
    assert_composer_refused_twice(&done, "unbound_answer_token");
    let kinds: Vec<String> = done
        .events_of(C)
        .iter()
        .map(|e| detail_text(e, "token_kind"))
        .collect();
    assert_eq!(kinds, ["identifier", "number"]);
    let unbound: Vec<i64> = done
        .events_of(C)
        .iter()
        .map(|e| detail_int(e, "unbound_tokens"))
        .collect();
    assert_eq!(unbound, [2, 1]);
    // Each refusal names its first unbound token and the line it is on.
    let named: Vec<(String, i64)> = done
        .events_of(C)
        .iter()
        .map(|e| (detail_text(e, "token"), detail_int(e, "line")))
        .collect();
    assert_eq!(named, [("v2.3.1".to_string(), 1), ("99th".to_string(), 1)]);
    // The technical retry tells the model which token was refused; the first attempt
    // carries no correction.
    let requests = h.model.requests_for(AgentRole::Composer);
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].correction, None);
    let correction = requests[1].correction.as_deref().expect("a correction");
    assert!(
        correction.contains("\"v2.3.1\"") && correction.contains("line 1"),
        "{correction}"
    );
    assert_eq!(
        requests[0].input, requests[1].input,
        "the input stays byte for byte"
    );
    // The invented material is not in the answer.
    assert_absent(
        done.answer(),
        &["v2.3.1", "13:58", "Roll back", "99th", "bad deploy"],
        "output",
    );
    // The evaluation keeps the figures of the last checked answer and names its token.
    let eval = diag_diagnosis::evaluation::verifier_evaluation(&done.state, &[]);
    assert_eq!(eval.composer_audit.answer_tokens_unbound, 1);
    assert_eq!(
        eval.composer_audit.unbound_token_kind,
        Some(diag_core::protocol::TokenKind::Number)
    );
    assert_eq!(eval.composer_audit.unbound_token.as_deref(), Some("99th"));
    assert_eq!(eval.composer_audit.unbound_token_line, Some(1));
    assert_eq!(eval.composer_audit.answer_chars, 0);
}

#[tokio::test]
async fn rule_verifier_free_text_with_an_unbound_token_is_dropped_and_counted() {
    let unbound_missing = "the pg_stat_activity rows of the ledger database";
    let unbound_rec = "roll payment-service back to v2.3.0";
    let doc = json!({"schema": "verifier_verdict_v1", "verdict": "PASS", "groundedness": 0.9,
                     "claim_checks": [{"claim_id": "c1", "supported": true}], "facts": [],
                     "allowed_claims": ["c1"],
                     "missing_information": [MISSING, unbound_missing],
                     "recommendations": [unbound_rec, RECOMMENDATION]})
    .to_string();

    // Through the Composer: only the bound items are in its input, and two are counted.
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, doc.clone())
        .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C]);
    let input = &h.json_inputs(AgentRole::Composer)[0];
    assert_eq!(input["missing_information"], json!([MISSING]));
    assert_eq!(input["recommendations"], json!([RECOMMENDATION]));
    assert_absent(
        &h.inputs(AgentRole::Composer)[0],
        &["pg_stat_activity", "v2.3.0"],
        "the composer input",
    );
    assert_eq!(done.state.round.dropped_items, 2);
    let eval = diag_diagnosis::evaluation::verifier_evaluation(&done.state, &[]);
    assert_eq!(eval.dropped_items, 2);
    assert!(eval.composer_audit.answer_tokens_checked > 0);

    // Through the post-verification Fallback: the same items, the same count.
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, doc).fail(
        AgentRole::Composer,
        InvokeError::Permanent("HTTP 422".into()),
    );
    let done = run(&h).await;
    assert_eq!(done.state.path(), [P, E, G, VI, V, C, F]);
    let answer = done.answer();
    assert!(
        answer.contains(MISSING) && answer.contains(RECOMMENDATION),
        "{answer}"
    );
    assert_absent(
        answer,
        &["pg_stat_activity", "v2.3.0"],
        "the fallback answer",
    );
    assert_eq!(done.state.round.dropped_items, 2);

    // Passing: items whose tokens are all bound are kept, and nothing is counted.
    let h = Harness::planned(exec_pass());
    h.reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
        .reply(AgentRole::Composer, composer(ANSWER, &["c1"]));
    let done = run(&h).await;
    let input = &h.json_inputs(AgentRole::Composer)[0];
    assert_eq!(input["missing_information"], json!([MISSING]));
    assert_eq!(input["recommendations"], json!([RECOMMENDATION]));
    assert_eq!(done.state.round.dropped_items, 0);
}

// ---------------------------------------------------------------------------------------------
// Property: an invented salient token never reaches a Composer answer
// ---------------------------------------------------------------------------------------------

mod invented_tokens {
    use super::*;
    use diag_core::protocol::{salient_tokens, SalientToken, TokenKind, VerifiedEvidence};
    use diag_diagnosis::composer_input::{answer_context, AllowedClaim, ClaimEvidence};
    use proptest::prelude::*;

    fn word() -> impl Strategy<Value = String> {
        "[a-z]{3,8}"
    }

    /// A salient token as an answer would write it, and the token the scanner reads from it.
    fn invented() -> impl Strategy<Value = (String, SalientToken)> {
        let tok = |kind, text: String| SalientToken { kind, text };
        prop_oneof![
            (
                "[1-9][0-9]{1,5}",
                prop::sample::select(vec!["", "ms", "s", "%", "GB"])
            )
                .prop_map(move |(n, unit)| (format!("{n}{unit}"), tok(TokenKind::Number, n))),
            (0u32..24, 0u32..60, prop::option::of(0u32..60)).prop_map(move |(h, m, s)| {
                let t = match s {
                    Some(s) => format!("{h:02}:{m:02}:{s:02}"),
                    None => format!("{h:02}:{m:02}"),
                };
                (t.clone(), tok(TokenKind::Time, t))
            }),
            (2000u32..2100, 1u32..13, 1u32..29).prop_map(move |(y, m, d)| {
                let t = format!("{y}-{m:02}-{d:02}");
                (t.clone(), tok(TokenKind::Date, t))
            }),
            (word(), word(), 0usize..5, 1u32..100).prop_map(move |(a, b, form, n)| {
                let t = match form {
                    0 => format!("{a}-{b}"),
                    1 => format!("{a}{n}"),
                    2 => format!("/{a}/{b}"),
                    3 => format!("v{n}.{}.{}", n % 7, n % 3),
                    _ => format!("{a}_{b}"),
                };
                (t.clone(), tok(TokenKind::Identifier, t))
            }),
            // `#4411` is the number 4411; `#INC-12` a reference.
            (10u32..100_000).prop_map(move |n| {
                let t = format!("#{n}");
                (t.clone(), tok(TokenKind::Number, t))
            }),
            (word(), 1u32..1000).prop_map(move |(a, n)| {
                let t = format!("#{}-{n}", a.to_uppercase());
                (t.clone(), tok(TokenKind::Reference, t))
            }),
            (word(), word()).prop_map(move |(a, b)| {
                let inner = format!("{a} {b}");
                (format!("`{inner}`"), tok(TokenKind::Quoted, inner))
            }),
        ]
    }

    /// The context the Composer check uses for an answer over c1 alone, built the same way.
    fn c1_context() -> diag_core::protocol::EvidenceContext {
        let claim = AllowedClaim {
            claim_id: "c1".into(),
            text: c1()["text"].as_str().unwrap().to_string(),
            evidence: vec![ClaimEvidence {
                source_invocation_id: "inv-1".into(),
                tool_name: "search_logs".into(),
                raw_path: "/matches/0/line".into(),
                matched_text: MATCHED1.into(),
            }],
        };
        let evidence = VerifiedEvidence {
            claim_id: "c1".into(),
            source_invocation_id: "inv-1".into(),
            tool_name: "search_logs".into(),
            raw_path: "/matches/0/line".into(),
            matched_text: MATCHED1.into(),
        };
        answer_context(QUESTION, &[claim], &[evidence], RUN, &round1_invocations())
    }

    proptest! {
        // At least 10,000 cases, whatever PROPTEST_CASES says.
        #![proptest_config(diag_testkit::seeded::config_with_min_cases(0xD1A6_0C01, 10_000))]

        /// A grounded answer with one invented token inserted between two of its words is
        /// refused by the Composer check on both attempts, and the run's answer (the
        /// post-verification Fallback) never holds the token.
        #[test]
        fn an_invented_token_never_reaches_a_composer_answer(
            (text, token) in invented(),
            at in any::<prop::sample::Index>(),
        ) {
            // The text is read as one token of the kind written (a hyphenated pair of
            // random words may be read as prose, a word with a unit as its number), and it
            // is not in the question or c1's evidence.
            let read = salient_tokens(&text);
            prop_assume!(read.len() == 1 && read[0].kind == token.kind);
            let token = read[0].clone();
            prop_assume!(c1_context().first_unbound(&text).is_some());

            let mut words: Vec<&str> = ANSWER.split(' ').collect();
            words.insert(at.index(words.len() + 1), &text);
            let answer = format!("{} [c1]", words.join(" "));

            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let h = Harness::planned(exec_pass());
            h
                .reply(AgentRole::Verifier, verifier("PASS", &["c1"], json!([])))
                .reply(AgentRole::Composer, composer_raw(&answer, &["c1"]))
                .reply(AgentRole::Composer, composer_raw(&answer, &["c1"]));
            let done = rt.block_on(run(&h));

            prop_assert_eq!(done.state.path(), [P, E, G, VI, V, C, C, F]);
            prop_assert_eq!(reasons(&done, C), ["unbound_answer_token", "unbound_answer_token"]);
            prop_assert_eq!(done.state.composer_status.clone(), Some(AgentStatus::InvalidOutput));
            prop_assert!(done.state.degraded);
            let final_answer = done.answer();
            prop_assert!(!salient_tokens(final_answer).contains(&token), "{}", final_answer);
        }
    }
}
