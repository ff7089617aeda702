//! Workflow suite: the real compiled diagnosis topology over scripted nodes (no model, no
//! tool). One test or table row per routing class of SPEC §1.2, each asserting the executed node sequence,
//! the orchestration events, the terminal path and the counters; then the engine's step limit,
//! cancellation and undeclared-outcome errors, and what `compile()` rejects.

use std::sync::Arc;

use diag_core::clock::{FixedClock, Timestamp};
use diag_core::graph::{
    Branch, CompileError, Counter, DetailValue, Effect, EngineError, EngineFailure, Event,
    GraphBuilder, GraphState, InvokeOptions, Node, NodeFuture, NodeKind, Observer, RunConfig, Step,
    Target,
};
use diag_core::protocol::{Fact, PlannerMode, Verdict, Verification};
use diag_diagnosis::scripted::{steps, ScriptStep, ScriptedGraph, ScriptedNode, Scripts};
use diag_diagnosis::state::{DiagnosisState, RetryCounters};
use diag_diagnosis::topology::{
    self, COMPOSER as C, EXECUTOR as E, FALLBACK as F, GATEKEEPER as G, PLANNER as P,
    RETRY_PREPARE as RP, STEP_LIMIT, VERIFIED_INPUT as VI, VERIFIER as V,
};
use diag_diagnosis::{AgentStatus, ExecutorStatus, FallbackKind, Status};
use tokio_util::sync::CancellationToken;

use diag_testkit::Row;

const QUESTION: &str = "why does checkout-service return 502 since 14:00?";
/// The answer the default scripted Composer writes.
const ANSWER: &str = "checkout 502s come from payment-service timeouts";
const T0: Timestamp = Timestamp::from_unix_ms(1_790_000_000_000);

fn config() -> RunConfig {
    RunConfig::new("s-1", "run-1")
}

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// One expected event: (node, attempt, round, status).
type Ev = (&'static str, u32, u32, Status);

/// Where a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The Composer left a safe non-empty answer.
    Composer,
    /// Fallback before trusted, verified material existed.
    PreFallback,
    /// Fallback after the Verifier completed.
    PostFallback,
}

/// What a finished run must look like.
struct Expect<'a> {
    events: &'a [Ev],
    end: End,
    /// Technical retries of the final round: (planner, verifier, composer).
    retries: (u32, u32, u32),
    evidence_retry_count: u32,
    round: u32,
    mode: PlannerMode,
}

/// A run that stayed in round 1; tests override `events`, `end` and anything else that differs.
const ROUND1: Expect<'static> = Expect {
    events: &[],
    end: End::Composer,
    retries: (0, 0, 0),
    evidence_retry_count: 0,
    round: 1,
    mode: PlannerMode::Normal,
};

/// A run that entered the evidence-retry round.
const ROUND2: Expect<'static> = Expect {
    events: &[],
    end: End::Composer,
    retries: (0, 0, 0),
    evidence_retry_count: 1,
    round: 2,
    mode: PlannerMode::EvidenceGapOnly,
};

/// Records what the engine reports as it runs, independently of the state's event list.
#[derive(Default)]
struct Recorder {
    started: Vec<(String, u32, u32)>,
    events: Vec<Event<Status>>,
}

impl Observer<Status> for Recorder {
    fn node_started(&mut self, node: &str, _kind: NodeKind, attempt: u32, round: u32) {
        self.started.push((node.to_string(), attempt, round));
    }

    fn event(&mut self, event: &Event<Status>) {
        self.events.push(event.clone());
    }
}

struct Run {
    g: ScriptedGraph,
    state: DiagnosisState,
    rec: Recorder,
}

impl Run {
    fn nodes(&self) -> [(&'static str, &ScriptedNode); 8] {
        let g = &self.g;
        [
            (P, &*g.planner),
            (E, &*g.executor),
            (G, &*g.gatekeeper),
            (VI, &*g.verified_input),
            (V, &*g.verifier),
            (RP, &*g.retry_prepare),
            (C, &*g.composer),
            (F, &*g.fallback),
        ]
    }
}

/// Runs the real compiled topology over `scripts` with the standard limit, clock and config.
async fn run(scripts: Scripts) -> Run {
    let g = ScriptedGraph::new(scripts);
    let graph = topology::compile(g.nodes()).expect("the diagnosis topology compiles");
    let mut rec = Recorder::default();
    let clock = FixedClock(T0);
    let state = graph
        .invoke(
            DiagnosisState::new(
                QUESTION,
                diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0)),
            ),
            &config(),
            InvokeOptions {
                step_limit: STEP_LIMIT,
                clock: &clock,
                cancel: None,
                observer: &mut rec,
            },
        )
        .await
        .unwrap_or_else(|f| panic!("engine error {:?} after {:?}", f.error, f.state.path()));
    Run { g, state, rec }
}

fn event_tuples(events: &[Event<Status>]) -> Vec<(String, u32, u32, Status)> {
    events
        .iter()
        .map(|e| (e.node.clone(), e.attempt, e.round, e.status))
        .collect()
}

fn owned(events: &[Ev]) -> Vec<(String, u32, u32, Status)> {
    events
        .iter()
        .map(|(n, a, r, s)| (n.to_string(), *a, *r, *s))
        .collect()
}

/// The invariants every run's trace must satisfy, whatever its path: seq is 1..=n, the event
/// nodes are exactly the executed nodes, every node saw the run's own config and exactly the
/// events before its own, and each call happened in the round its event records.
fn check_trace(run: &Run) {
    let events = &run.state.events;
    let seqs: Vec<u32> = events.iter().map(|e| e.seq).collect();
    let want: Vec<u32> = (1..=events.len() as u32).collect();
    assert_eq!(seqs, want, "event seq must be 1..=n");

    let executed: Vec<(String, u32, u32)> = run.rec.started.clone();
    let from_events: Vec<(String, u32, u32)> = events
        .iter()
        .map(|e| (e.node.clone(), e.attempt, e.round))
        .collect();
    assert_eq!(
        from_events, executed,
        "events must match the executed nodes"
    );
    assert_eq!(
        &run.rec.events, events,
        "observer and state saw other events"
    );

    for e in events {
        assert_eq!(
            e.started_at, T0,
            "event {} not stamped by the run clock",
            e.seq
        );
        assert_eq!(e.duration_ms, 0, "a fixed clock gives zero durations");
    }

    let mut total = 0;
    for (name, node) in run.nodes() {
        let calls = node.calls();
        let own: Vec<&Event<Status>> = events.iter().filter(|e| e.node == name).collect();
        assert_eq!(calls.len(), own.len(), "{name}: calls vs events");
        total += calls.len();
        for (call, event) in calls.iter().zip(own) {
            assert_eq!(call.config, config(), "{name} got another RunConfig");
            assert_eq!(
                call.state.round_number, event.round,
                "{name} event #{}",
                event.seq
            );
            assert_eq!(
                call.state.events.len() as u32,
                event.seq - 1,
                "{name} event #{} did not see exactly the earlier events",
                event.seq
            );
        }
    }
    assert_eq!(total, events.len(), "a node ran without an event");
}

/// Asserts a finished run against its expectation.
fn check(run: &Run, want: Expect<'_>) {
    let s = &run.state;
    assert_eq!(event_tuples(&s.events), owned(want.events), "events");
    let want_path: Vec<&str> = want.events.iter().map(|e| e.0).collect();
    let executed: Vec<&str> = run.rec.started.iter().map(|(n, ..)| n.as_str()).collect();
    assert_eq!(executed, want_path, "executed node sequence");
    assert_eq!(s.path(), want_path, "event node sequence");
    check_trace(run);

    match want.end {
        End::Composer => {
            assert_eq!(s.path().last(), Some(&C));
            assert_eq!(s.fallback_kind, None);
            assert!(!s.degraded);
            assert_eq!(s.final_answer.as_deref(), Some(ANSWER));
            assert_eq!(s.composer_status, Some(AgentStatus::Completed));
            assert_eq!(s.round.verifier_status, Some(AgentStatus::Completed));
            assert!(
                s.round
                    .effective_verdict
                    .is_some_and(|v| v == Verdict::Pass || v == Verdict::LowConfid),
                "composer reached with effective {:?}",
                s.round.effective_verdict
            );
            assert_eq!(run.g.fallback.call_count(), 0);
        }
        End::PreFallback => {
            assert_eq!(s.path().last(), Some(&F));
            assert_eq!(s.fallback_kind, Some(FallbackKind::PreVerification));
            assert!(s.degraded);
            assert_eq!(
                s.final_answer.as_deref(),
                Some("diag could not complete the diagnosis (pre_verification).")
            );
            // Nothing verified in this round: no verdict is invented, no composer ran.
            assert_ne!(s.round.verifier_status, Some(AgentStatus::Completed));
            assert_eq!(s.round.verifier_model_verdict, None);
            assert_eq!(s.round.effective_verdict, None);
            assert_eq!(run.g.composer.call_count(), 0);
        }
        End::PostFallback => {
            assert_eq!(s.path().last(), Some(&F));
            assert_eq!(s.fallback_kind, Some(FallbackKind::PostVerification));
            assert!(s.degraded);
            assert_eq!(
                s.final_answer.as_deref(),
                Some("diag could not complete the diagnosis (post_verification).")
            );
            assert_eq!(s.round.verifier_status, Some(AgentStatus::Completed));
            assert!(s.round.effective_verdict.is_some());
        }
    }

    let (planner, verifier, composer) = want.retries;
    assert_eq!(
        s.round.retries,
        RetryCounters {
            planner,
            verifier,
            composer
        },
        "technical retries"
    );
    assert_eq!(s.evidence_retry_count, want.evidence_retry_count);
    assert_eq!(s.round_number, want.round);
    assert_eq!(s.planner_mode, want.mode);
    assert_eq!(
        run.g.retry_prepare.call_count() as u32,
        want.evidence_retry_count,
        "retry_prepare runs once per evidence retry"
    );
}

fn planner(status: AgentStatus) -> ScriptStep {
    steps::planner(status)
}

fn critical_gap() -> Fact {
    steps::fact(true, Verification::NoEvidence)
}

/// Two of each round-scoped stage, so a second round can run.
fn two_rounds(verifier: Vec<ScriptStep>) -> Scripts {
    Scripts {
        planner: vec![
            planner(AgentStatus::Completed),
            planner(AgentStatus::Completed),
        ],
        executor: vec![
            steps::executor(ExecutorStatus::Completed),
            steps::executor(ExecutorStatus::Completed),
        ],
        gatekeeper: vec![steps::gate_pass(), steps::gate_pass()],
        verified_input: vec![steps::verified_input_built(), steps::verified_input_built()],
        verifier,
        ..Scripts::default()
    }
}

const PASS_PATH: &[Ev] = &[
    (P, 1, 1, Status::Completed),
    (E, 1, 1, Status::Completed),
    (G, 1, 1, Status::Pass),
    (VI, 1, 1, Status::Built),
    (V, 1, 1, Status::Completed),
    (C, 1, 1, Status::Completed),
];

/// Round 1 of an evidence retry: PASS ceiling, effective LOW_CONFID with a critical gap.
const ROUND1_TO_RETRY: [Ev; 6] = [
    (P, 1, 1, Status::Completed),
    (E, 1, 1, Status::Completed),
    (G, 1, 1, Status::Pass),
    (VI, 1, 1, Status::Built),
    (V, 1, 1, Status::Completed),
    (RP, 1, 1, Status::Prepared),
];

// ---------------------------------------------------------------------------------------------
// Planner
// ---------------------------------------------------------------------------------------------

/// One routing case of round 1, as a table row: the scripts, the run they must give, and
/// what else must hold of it (`then`). The row's name is the test it used to be, and a failing
/// row names itself.
struct Case {
    name: &'static str,
    scripts: Scripts,
    events: Vec<Ev>,
    end: End,
    retries: (u32, u32, u32),
    then: fn(&Run),
}

impl Case {
    /// A row whose run ends at the Composer with no retry; `then` checks nothing more.
    fn new(name: &'static str, scripts: Scripts, events: &[Ev]) -> Case {
        Case {
            name,
            scripts,
            events: events.to_vec(),
            end: End::Composer,
            retries: (0, 0, 0),
            then: |_| {},
        }
    }

    fn end(self, end: End) -> Case {
        Case { end, ..self }
    }

    fn retries(self, retries: (u32, u32, u32)) -> Case {
        Case { retries, ..self }
    }

    fn then(self, then: fn(&Run)) -> Case {
        Case { then, ..self }
    }
}

/// Runs every row, checking each against [`check`] and its own `then`.
async fn check_cases(cases: Vec<Case>) {
    for case in cases {
        let _row = Row::named(case.name);
        let r = run(case.scripts).await;
        check(
            &r,
            Expect {
                events: &case.events,
                end: case.end,
                retries: case.retries,
                ..ROUND1
            },
        );
        (case.then)(&r);
    }
}

fn planner_scripts(statuses: Vec<AgentStatus>) -> Scripts {
    Scripts {
        planner: statuses.into_iter().map(planner).collect(),
        ..Scripts::default()
    }
}

fn no_executor_call(r: &Run) {
    assert_eq!(r.g.executor.call_count(), 0);
}

#[tokio::test]
async fn planner_routes() {
    use AgentStatus::{Completed, InvalidOutput, NonRetryableFailed, RetryableFailed};
    check_cases(vec![
        Case::new(
            "planner_pass_straight_path_ends_at_composer",
            Scripts::default(),
            PASS_PATH,
        )
        .then(|r| {
            assert_eq!(r.state.round.effective_verdict, Some(Verdict::Pass));
            assert_eq!(r.state.round.verifier_model_verdict, Some(Verdict::Pass));
            assert_eq!(r.state.round.ceiling, Some(Verdict::Pass));
            assert_eq!(r.state.retry_context, None);
        }),
        Case::new(
            "planner_invalid_output_then_success",
            planner_scripts(vec![InvalidOutput, Completed]),
            &[
                (P, 1, 1, Status::InvalidOutput),
                (P, 2, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, Status::Pass),
                (VI, 1, 1, Status::Built),
                (V, 1, 1, Status::Completed),
                (C, 1, 1, Status::Completed),
            ],
        )
        .retries((1, 0, 0)),
        Case::new(
            "planner_retryable_failed_then_success",
            planner_scripts(vec![RetryableFailed, Completed]),
            &[
                (P, 1, 1, Status::RetryableFailed),
                (P, 2, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, Status::Pass),
                (VI, 1, 1, Status::Built),
                (V, 1, 1, Status::Completed),
                (C, 1, 1, Status::Completed),
            ],
        )
        .retries((1, 0, 0))
        .then(|r| {
            // The retry gets the same input: the only differences are the failed attempt's
            // own status, the retry counter and the event it produced.
            let calls = r.g.planner.calls();
            let (mut first, mut second) = (calls[0].state.clone(), calls[1].state.clone());
            for s in [&mut first, &mut second] {
                s.events.clear();
                s.round.retries = RetryCounters::default();
                s.round.planner_status = None;
            }
            assert_eq!(first, second);
        }),
        Case::new(
            "planner_second_technical_failure_falls_back",
            planner_scripts(vec![InvalidOutput, RetryableFailed, Completed]),
            &[
                (P, 1, 1, Status::InvalidOutput),
                (P, 2, 1, Status::RetryableFailed),
                (F, 1, 1, Status::Answered),
            ],
        )
        .end(End::PreFallback)
        .retries((1, 0, 0))
        .then(no_executor_call),
        Case::new(
            "planner_non_retryable_failed_falls_back_without_retry",
            planner_scripts(vec![NonRetryableFailed, Completed]),
            &[
                (P, 1, 1, Status::NonRetryableFailed),
                (F, 1, 1, Status::Answered),
            ],
        )
        .end(End::PreFallback)
        .then(no_executor_call),
        Case::new(
            "planner_unknown_status_fails_closed",
            planner_scripts(vec![AgentStatus::Unknown("MOSTLY_DONE".into()), Completed]),
            &[(P, 1, 1, Status::Unknown), (F, 1, 1, Status::Answered)],
        )
        .end(End::PreFallback)
        .then(|r| {
            assert_eq!(
                r.state.round.planner_status,
                Some(AgentStatus::Unknown("MOSTLY_DONE".into()))
            );
            assert_eq!(
                r.state.events[0].detail.get("status"),
                Some(&DetailValue::Text("MOSTLY_DONE".into()))
            );
            no_executor_call(r);
        }),
    ])
    .await;
}

#[tokio::test]
async fn planner_terminal_failures_never_reach_executor() {
    let cases: Vec<(&str, Vec<ScriptStep>, &'static [Ev], u32)> = vec![
        (
            "two technical failures",
            vec![
                planner(AgentStatus::RetryableFailed),
                planner(AgentStatus::InvalidOutput),
            ],
            &[
                (P, 1, 1, Status::RetryableFailed),
                (P, 2, 1, Status::InvalidOutput),
                (F, 1, 1, Status::Answered),
            ],
            1,
        ),
        (
            "non-retryable",
            vec![planner(AgentStatus::NonRetryableFailed)],
            &[
                (P, 1, 1, Status::NonRetryableFailed),
                (F, 1, 1, Status::Answered),
            ],
            0,
        ),
        (
            "unknown",
            vec![planner(AgentStatus::Unknown(String::new()))],
            &[(P, 1, 1, Status::Unknown), (F, 1, 1, Status::Answered)],
            0,
        ),
        (
            "technical failure then unknown",
            vec![
                planner(AgentStatus::InvalidOutput),
                planner(AgentStatus::Unknown("x".into())),
            ],
            &[
                (P, 1, 1, Status::InvalidOutput),
                (P, 2, 1, Status::Unknown),
                (F, 1, 1, Status::Answered),
            ],
            1,
        ),
    ];
    for (name, planner, events, planner_retries) in cases {
        let r = run(Scripts {
            planner,
            ..Scripts::default()
        })
        .await;
        check(
            &r,
            Expect {
                events,
                end: End::PreFallback,
                retries: (planner_retries, 0, 0),
                ..ROUND1
            },
        );
        assert_eq!(r.g.executor.call_count(), 0, "{name}");
        assert_eq!(r.state.round.plan, None, "{name}");
        assert_eq!(r.state.round.executor_status, None, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Executor
// ---------------------------------------------------------------------------------------------

async fn executor_fails_closed(status: ExecutorStatus, event_status: Status) -> Run {
    let r = run(Scripts {
        executor: vec![
            steps::executor(status.clone()),
            steps::executor(ExecutorStatus::Completed),
        ],
        ..Scripts::default()
    })
    .await;
    check(
        &r,
        Expect {
            events: &[
                (P, 1, 1, Status::Completed),
                (E, 1, 1, event_status),
                (F, 1, 1, Status::Answered),
            ],
            end: End::PreFallback,
            ..ROUND1
        },
    );
    assert_eq!(r.state.round.executor_status, Some(status));
    assert_eq!(
        r.g.executor.call_count(),
        1,
        "the executor is never retried"
    );
    assert_eq!(r.g.gatekeeper.call_count(), 0);
    assert_eq!(r.g.verifier.call_count(), 0);
    r
}

#[tokio::test]
async fn executor_failures_fall_back_without_retry() {
    // (former test, status, its event's status, the event's `status` detail)
    let cases = [
        (
            "executor_failed_falls_back",
            ExecutorStatus::Failed,
            Status::Failed,
            None,
        ),
        (
            "executor_tool_blocked_falls_back",
            ExecutorStatus::ToolBlocked,
            Status::ToolBlocked,
            None,
        ),
        (
            "executor_invalid_output_falls_back_without_retry",
            ExecutorStatus::InvalidOutput,
            Status::InvalidOutput,
            None,
        ),
        (
            "executor_unknown_status_fails_closed",
            ExecutorStatus::Unknown("PARTIAL".into()),
            Status::Unknown,
            Some("PARTIAL"),
        ),
    ];
    for (name, status, event_status, detail) in cases {
        let _row = Row::named(name);
        let r = executor_fails_closed(status, event_status).await;
        if let Some(detail) = detail {
            assert_eq!(
                r.state.events[1].detail.get("status"),
                Some(&DetailValue::Text(detail.into()))
            );
        }
    }
}

#[tokio::test]
async fn executor_legal_no_evidence_continues_to_gatekeeper() {
    let r = run(Scripts {
        executor: vec![steps::executor_no_evidence()],
        gatekeeper: vec![steps::gate_low_confid(0, 0)],
        ..Scripts::default()
    })
    .await;
    check(
        &r,
        Expect {
            events: &[
                (P, 1, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, Status::LowConfid),
                (F, 1, 1, Status::Answered),
            ],
            end: End::PreFallback,
            ..ROUND1
        },
    );
    assert_eq!(
        r.state.round.executor_status,
        Some(ExecutorStatus::Completed)
    );
    let gate_input = &r.g.gatekeeper.calls()[0].state;
    let output = gate_input
        .round
        .executor_output
        .as_ref()
        .expect("executor output");
    assert!(output.claims.is_empty() && !output.no_evidence.is_empty());
    assert_eq!(r.g.verified_input.call_count(), 0);
    assert_eq!(r.g.verifier.call_count(), 0);
}

// ---------------------------------------------------------------------------------------------
// Gatekeeper
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn gatekeeper_pass_continues_with_pass_ceiling() {
    let r = run(Scripts::default()).await;
    check(
        &r,
        Expect {
            events: PASS_PATH,
            ..ROUND1
        },
    );
    let vi_input = &r.g.verified_input.calls()[0].state;
    assert_eq!(vi_input.round.ceiling, Some(Verdict::Pass));
    assert_eq!(r.g.gatekeeper.call_count(), 1);
}

#[tokio::test]
async fn gatekeeper_low_confid_with_passed_binding_caps_verdict_without_retry() {
    let r = run(Scripts {
        gatekeeper: vec![steps::gate_low_confid(1, 1)],
        verifier: vec![steps::verifier_verdict(Verdict::Pass, vec![critical_gap()])],
        ..Scripts::default()
    })
    .await;
    check(
        &r,
        Expect {
            events: &[
                (P, 1, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, Status::LowConfid),
                (VI, 1, 1, Status::Built),
                (V, 1, 1, Status::Completed),
                (C, 1, 1, Status::Completed),
            ],
            ..ROUND1
        },
    );
    assert_eq!(r.state.round.ceiling, Some(Verdict::LowConfid));
    assert_eq!(r.state.round.verifier_model_verdict, Some(Verdict::Pass));
    assert_eq!(r.state.round.effective_verdict, Some(Verdict::LowConfid));
    assert_eq!(r.state.round.verifier_status, Some(AgentStatus::Completed));
    // Only the passed binding reached the Verifier.
    let v_input = &r.g.verifier.calls()[0].state;
    assert_eq!(v_input.round.verified_evidence.len(), 1);
    assert_eq!(v_input.round.verified_evidence[0].claim_id, "c1");
}

async fn gatekeeper_fails_closed(gate: ScriptStep, status: Status) -> Run {
    let r = run(Scripts {
        gatekeeper: vec![gate],
        ..Scripts::default()
    })
    .await;
    check(
        &r,
        Expect {
            events: &[
                (P, 1, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, status),
                (F, 1, 1, Status::Answered),
            ],
            end: End::PreFallback,
            ..ROUND1
        },
    );
    assert_eq!(r.g.verified_input.call_count(), 0);
    assert_eq!(r.g.verifier.call_count(), 0);
    assert!(r.state.round.verified_executor_output.is_none());
    assert!(r.state.round.verified_evidence.is_empty());
    r
}

/// A row: the former test's name, the Gatekeeper's step, its event's status, what else holds.
type GateCase = (&'static str, ScriptStep, Status, fn(&Run));

#[tokio::test]
async fn gatekeeper_failures_fall_back() {
    let cases: [GateCase; 4] = [
        (
            "gatekeeper_low_confid_with_zero_passed_falls_back",
            steps::gate_low_confid(0, 2),
            Status::LowConfid,
            |r| assert_eq!(r.state.round.ceiling, Some(Verdict::LowConfid)),
        ),
        (
            "gatekeeper_reject_falls_back",
            steps::gate_reject(0, 1),
            Status::Reject,
            |r| assert_eq!(r.state.round.ceiling, Some(Verdict::Reject)),
        ),
        (
            "gatekeeper_reject_with_some_passed_bindings_falls_back",
            steps::gate_reject(2, 1),
            Status::Reject,
            |r| {
                assert_eq!(
                    r.state
                        .round
                        .gatekeeper_raw
                        .as_ref()
                        .map(|raw| raw.passed_bindings()),
                    Some(2)
                )
            },
        ),
        (
            "gatekeeper_unknown_raw_result_is_reject",
            steps::gate_unknown(),
            Status::Reject,
            |r| {
                assert_eq!(
                    r.state.round.gatekeeper_status,
                    Some(diag_core::protocol::GateStatus::Reject)
                )
            },
        ),
    ];
    for (name, gate, status, then) in cases {
        let _row = Row::named(name);
        let r = gatekeeper_fails_closed(gate, status).await;
        then(&r);
    }
}

#[tokio::test]
async fn gatekeeper_unsafe_outcomes_never_reach_verifier() {
    let cases: Vec<(&str, ScriptStep, Status)> = vec![
        (
            "low-confid, none passed",
            steps::gate_low_confid(0, 1),
            Status::LowConfid,
        ),
        (
            "low-confid, no claims",
            steps::gate_low_confid(0, 0),
            Status::LowConfid,
        ),
        ("reject", steps::gate_reject(0, 3), Status::Reject),
        ("reject, partial", steps::gate_reject(1, 1), Status::Reject),
        ("unknown result", steps::gate_unknown(), Status::Reject),
        (
            "missing result",
            steps::gatekeeper(steps::raw(None, None, 1, 0)),
            Status::Reject,
        ),
        (
            "fail without severity",
            steps::gatekeeper(steps::raw(Some("fail"), None, 1, 0)),
            Status::Reject,
        ),
        (
            "pass listing a failed binding",
            steps::gatekeeper(steps::raw(Some("pass"), None, 1, 1)),
            Status::Reject,
        ),
    ];
    for (name, gate, status) in cases {
        let r = gatekeeper_fails_closed(gate, status).await;
        assert_eq!(r.g.verifier.call_count(), 0, "{name}");
        assert_eq!(r.g.composer.call_count(), 0, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Verified Input
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn verified_input_projection_failed_falls_back_pre_verification() {
    let r = run(Scripts {
        verified_input: vec![steps::verified_input_failed()],
        ..Scripts::default()
    })
    .await;
    check(
        &r,
        Expect {
            events: &[
                (P, 1, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, Status::Pass),
                (VI, 1, 1, Status::ProjectionFailed),
                (F, 1, 1, Status::Answered),
            ],
            end: End::PreFallback,
            ..ROUND1
        },
    );
    assert_eq!(r.g.verifier.call_count(), 0);
}

// ---------------------------------------------------------------------------------------------
// Verifier
// ---------------------------------------------------------------------------------------------

/// The Verifier's declared input (SPEC §2.4), serialized: diagnosis context, verified output
/// and evidence, gatekeeper audit and ceiling, and the permitted retry context.
fn verifier_input(s: &DiagnosisState) -> String {
    serde_json::to_string(&serde_json::json!({
        "context": s.context,
        "verified_executor_output": s.round.verified_executor_output,
        "verified_evidence": s.round.verified_evidence,
        "audit": s.round.gatekeeper_raw.as_ref().map(|r| r.audit),
        "ceiling": s.round.ceiling,
        "retry_context": s.retry_context,
    }))
    .expect("verifier input serializes")
}

#[tokio::test]
async fn verifier_technical_retry_reruns_nothing_before_it() {
    let r = run(Scripts {
        verifier: vec![
            steps::verifier(AgentStatus::InvalidOutput),
            steps::verifier_verdict(Verdict::Pass, vec![]),
        ],
        ..Scripts::default()
    })
    .await;
    check(
        &r,
        Expect {
            events: &[
                (P, 1, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, Status::Pass),
                (VI, 1, 1, Status::Built),
                (V, 1, 1, Status::InvalidOutput),
                (V, 2, 1, Status::Completed),
                (C, 1, 1, Status::Completed),
            ],
            retries: (0, 1, 0),
            ..ROUND1
        },
    );
    for node in [
        &r.g.planner,
        &r.g.executor,
        &r.g.gatekeeper,
        &r.g.verified_input,
    ] {
        assert_eq!(node.call_count(), 1);
    }
    let calls = r.g.verifier.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].state.round.retries.verifier, 0);
    assert_eq!(calls[1].state.round.retries.verifier, 1);
    // The failed attempt's own status is the one field the retry sees changed; it is the
    // Verifier's output, not part of its input.
    assert_eq!(calls[0].state.round.verifier_status, None);
    assert_eq!(
        calls[1].state.round.verifier_status,
        Some(AgentStatus::InvalidOutput)
    );
    let strip = |s: &DiagnosisState| {
        let mut s = s.clone();
        s.events.clear();
        s.round.retries = RetryCounters::default();
        s.round.verifier_status = None;
        s
    };
    assert_eq!(strip(&calls[0].state), strip(&calls[1].state));
    assert_eq!(
        verifier_input(&calls[0].state),
        verifier_input(&calls[1].state),
        "the retry must get a byte-identical serialized input"
    );
    assert_eq!(r.state.round.effective_verdict, Some(Verdict::Pass));
}

#[tokio::test]
async fn verifier_retry_exhausted_falls_back_pre_verification() {
    let r = run(Scripts {
        verifier: vec![
            steps::verifier(AgentStatus::RetryableFailed),
            steps::verifier(AgentStatus::InvalidOutput),
            steps::verifier_verdict(Verdict::Pass, vec![]),
        ],
        ..Scripts::default()
    })
    .await;
    check(
        &r,
        Expect {
            events: &[
                (P, 1, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, Status::Pass),
                (VI, 1, 1, Status::Built),
                (V, 1, 1, Status::RetryableFailed),
                (V, 2, 1, Status::InvalidOutput),
                (F, 1, 1, Status::Answered),
            ],
            end: End::PreFallback,
            retries: (0, 1, 0),
            ..ROUND1
        },
    );
    assert_eq!(
        r.state.round.verifier_status,
        Some(AgentStatus::InvalidOutput)
    );
}

#[tokio::test]
async fn verifier_non_retryable_failed_falls_back_pre_verification() {
    let r = run(Scripts {
        verifier: vec![
            steps::verifier(AgentStatus::NonRetryableFailed),
            steps::verifier_verdict(Verdict::Pass, vec![]),
        ],
        ..Scripts::default()
    })
    .await;
    check(
        &r,
        Expect {
            events: &[
                (P, 1, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, Status::Pass),
                (VI, 1, 1, Status::Built),
                (V, 1, 1, Status::NonRetryableFailed),
                (F, 1, 1, Status::Answered),
            ],
            end: End::PreFallback,
            ..ROUND1
        },
    );
}

#[tokio::test]
async fn verifier_unknown_status_fails_closed() {
    let r = run(Scripts {
        verifier: vec![
            steps::verifier(AgentStatus::Unknown("SORT_OF".into())),
            steps::verifier_verdict(Verdict::Pass, vec![]),
        ],
        ..Scripts::default()
    })
    .await;
    check(
        &r,
        Expect {
            events: &[
                (P, 1, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, Status::Pass),
                (VI, 1, 1, Status::Built),
                (V, 1, 1, Status::Unknown),
                (F, 1, 1, Status::Answered),
            ],
            end: End::PreFallback,
            ..ROUND1
        },
    );
    assert_eq!(
        r.state.round.verifier_status,
        Some(AgentStatus::Unknown("SORT_OF".into()))
    );
}

#[tokio::test]
async fn verifier_effective_reject_falls_back_post_verification() {
    let r = run(Scripts {
        verifier: vec![steps::verifier_verdict(
            Verdict::Reject,
            vec![critical_gap()],
        )],
        ..Scripts::default()
    })
    .await;
    check(
        &r,
        Expect {
            events: &[
                (P, 1, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, Status::Pass),
                (VI, 1, 1, Status::Built),
                (V, 1, 1, Status::Completed),
                (F, 1, 1, Status::Answered),
            ],
            end: End::PostFallback,
            ..ROUND1
        },
    );
    assert_eq!(r.state.round.effective_verdict, Some(Verdict::Reject));
    assert_eq!(r.g.composer.call_count(), 0);
}

#[tokio::test]
async fn verifier_critical_gap_triggers_one_evidence_retry() {
    let r = run(two_rounds(vec![
        steps::verifier_verdict(Verdict::LowConfid, vec![critical_gap()]),
        steps::verifier_verdict(Verdict::Pass, vec![]),
    ]))
    .await;
    check(
        &r,
        Expect {
            events: &[
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
            ],
            ..ROUND2
        },
    );
    assert_eq!(r.state.round.effective_verdict, Some(Verdict::Pass));

    // Round 2 plans only the gaps, with the retry context and fresh technical counters.
    let planner = r.g.planner.calls();
    assert_eq!(planner[0].state.planner_mode, PlannerMode::Normal);
    assert_eq!(planner[0].state.retry_context, None);
    let p2 = &planner[1].state;
    assert_eq!(p2.round_number, 2);
    assert_eq!(p2.planner_mode, PlannerMode::EvidenceGapOnly);
    assert_eq!(p2.round.retries, RetryCounters::default());
    assert_eq!(p2.evidence_retry_count, 1);
    assert_eq!(
        p2.round.plan, None,
        "round-1 plan must not leak into round 2"
    );
    let ctx = p2
        .retry_context
        .as_ref()
        .expect("round-2 planner sees a retry context");
    assert_eq!(ctx.critical_gaps.len(), 1);
    assert_eq!(ctx.critical_gaps[0].id, "g1");
    assert_eq!(ctx.prior_verified_evidence.len(), 1);

    // The second Executor snapshot goes through a second Gatekeeper run, with no first verdict.
    assert_eq!(r.g.gatekeeper.call_count(), 2);
    let g2 = &r.g.gatekeeper.calls()[1].state;
    assert_eq!(g2.round_number, 2);
    assert_eq!(g2.round.gatekeeper_raw, None);
    assert_eq!(g2.round.gatekeeper_status, None);
    assert_eq!(g2.round.ceiling, None);
    let e2 = &r.g.executor.calls()[1].state;
    assert_eq!(
        e2.round.plan.as_ref().map(|p| p.mode),
        Some(PlannerMode::EvidenceGapOnly)
    );
    assert!(e2.retry_context.is_some());
    let v2 = &r.g.verifier.calls()[1].state;
    assert!(v2.retry_context.is_some());
    assert_eq!(
        v2.round.verifier_result, None,
        "round-1 verdict must not leak"
    );
}

#[tokio::test]
async fn verifier_low_confid_without_a_critical_gap_goes_to_composer() {
    let low_confid = |facts: Vec<Fact>| Scripts {
        verifier: vec![steps::verifier_verdict(Verdict::LowConfid, facts)],
        ..Scripts::default()
    };
    let effective_low_confid: fn(&Run) =
        |r| assert_eq!(r.state.round.effective_verdict, Some(Verdict::LowConfid));
    check_cases(vec![
        Case::new(
            "verifier_low_confid_without_valid_gap_goes_to_composer",
            low_confid(vec![
                steps::fact(true, Verification::Supported),
                steps::fact(true, Verification::Contradicted),
            ]),
            PASS_PATH,
        )
        .then(effective_low_confid),
        Case::new(
            "verifier_non_critical_gap_only_goes_to_composer",
            low_confid(vec![
                steps::fact(false, Verification::NoEvidence),
                steps::fact(false, Verification::IndirectSupport),
                steps::fact(true, Verification::Supported),
            ]),
            PASS_PATH,
        )
        .then(effective_low_confid),
    ])
    .await;
}

#[tokio::test]
async fn ceiling_driven_low_confid_is_never_retried() {
    let low_ceiling_path: &'static [Ev] = &[
        (P, 1, 1, Status::Completed),
        (E, 1, 1, Status::Completed),
        (G, 1, 1, Status::LowConfid),
        (VI, 1, 1, Status::Built),
        (V, 1, 1, Status::Completed),
        (C, 1, 1, Status::Completed),
    ];
    for (model, facts) in [
        (Verdict::Pass, vec![]),
        (Verdict::Pass, vec![critical_gap()]),
        (Verdict::LowConfid, vec![critical_gap()]),
        (
            Verdict::LowConfid,
            vec![
                critical_gap(),
                steps::fact(true, Verification::IndirectSupport),
            ],
        ),
    ] {
        let r = run(Scripts {
            gatekeeper: vec![steps::gate_low_confid(1, 1)],
            verifier: vec![steps::verifier_verdict(model, facts)],
            ..Scripts::default()
        })
        .await;
        check(
            &r,
            Expect {
                events: low_ceiling_path,
                ..ROUND1
            },
        );
        assert_eq!(r.state.round.ceiling, Some(Verdict::LowConfid));
        assert_eq!(r.state.round.verifier_model_verdict, Some(model));
        assert_eq!(r.state.round.effective_verdict, Some(Verdict::LowConfid));
    }
}

#[tokio::test]
async fn second_low_confid_ends_at_composer() {
    let r = run(two_rounds(vec![
        steps::verifier_verdict(Verdict::LowConfid, vec![critical_gap()]),
        steps::verifier_verdict(Verdict::LowConfid, vec![critical_gap()]),
    ]))
    .await;
    check(
        &r,
        Expect {
            events: &[
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
            ],
            ..ROUND2
        },
    );
    assert_eq!(r.state.round.effective_verdict, Some(Verdict::LowConfid));
    assert_eq!(r.state.round.ceiling, Some(Verdict::Pass));
}

#[tokio::test]
async fn evidence_retry_never_happens_twice() {
    // Whatever the second round's Verifier says, and even with a Retry Prepare script that
    // could run again, there is exactly one evidence retry.
    let direct: &'static [Ev] = &[
        (P, 1, 2, Status::Completed),
        (E, 1, 2, Status::Completed),
        (G, 1, 2, Status::Pass),
        (VI, 1, 2, Status::Built),
        (V, 1, 2, Status::Completed),
        (C, 1, 2, Status::Completed),
    ];
    let retried: &'static [Ev] = &[
        (P, 1, 2, Status::Completed),
        (E, 1, 2, Status::Completed),
        (G, 1, 2, Status::Pass),
        (VI, 1, 2, Status::Built),
        (V, 1, 2, Status::RetryableFailed),
        (V, 2, 2, Status::Completed),
        (C, 1, 2, Status::Completed),
    ];
    let cases: Vec<(Vec<ScriptStep>, &'static [Ev], u32)> = vec![
        (
            vec![steps::verifier_verdict(
                Verdict::LowConfid,
                vec![
                    critical_gap(),
                    steps::fact(true, Verification::IndirectSupport),
                ],
            )],
            direct,
            0,
        ),
        (
            vec![
                steps::verifier(AgentStatus::RetryableFailed),
                steps::verifier_verdict(Verdict::LowConfid, vec![critical_gap()]),
            ],
            retried,
            1,
        ),
    ];
    for (round2, tail, verifier_retries) in cases {
        let mut verifier = vec![steps::verifier_verdict(
            Verdict::LowConfid,
            vec![critical_gap()],
        )];
        verifier.extend(round2);
        let mut scripts = two_rounds(verifier);
        scripts.retry_prepare = vec![steps::retry_prepared(), steps::retry_prepared()];
        let r = run(scripts).await;
        let events: Vec<Ev> = ROUND1_TO_RETRY.iter().chain(tail).copied().collect();
        check(
            &r,
            Expect {
                events: &events,
                retries: (0, verifier_retries, 0),
                ..ROUND2
            },
        );
        assert_eq!(r.state.evidence_retry_count, 1);
        assert_eq!(r.g.retry_prepare.call_count(), 1);
        assert_eq!(r.state.round.effective_verdict, Some(Verdict::LowConfid));
    }
}

#[tokio::test]
async fn technical_retries_are_allowed_in_both_rounds() {
    let r = run(Scripts {
        planner: vec![
            planner(AgentStatus::InvalidOutput),
            planner(AgentStatus::Completed),
            planner(AgentStatus::RetryableFailed),
            planner(AgentStatus::Completed),
        ],
        ..two_rounds(vec![
            steps::verifier(AgentStatus::RetryableFailed),
            steps::verifier_verdict(Verdict::LowConfid, vec![critical_gap()]),
            steps::verifier(AgentStatus::InvalidOutput),
            steps::verifier_verdict(Verdict::Pass, vec![]),
        ])
    })
    .await;
    check(
        &r,
        Expect {
            events: &[
                (P, 1, 1, Status::InvalidOutput),
                (P, 2, 1, Status::Completed),
                (E, 1, 1, Status::Completed),
                (G, 1, 1, Status::Pass),
                (VI, 1, 1, Status::Built),
                (V, 1, 1, Status::RetryableFailed),
                (V, 2, 1, Status::Completed),
                (RP, 1, 1, Status::Prepared),
                (P, 1, 2, Status::RetryableFailed),
                (P, 2, 2, Status::Completed),
                (E, 1, 2, Status::Completed),
                (G, 1, 2, Status::Pass),
                (VI, 1, 2, Status::Built),
                (V, 1, 2, Status::InvalidOutput),
                (V, 2, 2, Status::Completed),
                (C, 1, 2, Status::Completed),
            ],
            retries: (1, 1, 0),
            ..ROUND2
        },
    );
    // Round 1 used its retries; round 2 started from zero.
    let rp = &r.g.retry_prepare.calls()[0].state;
    assert_eq!(
        rp.round.retries,
        RetryCounters {
            planner: 1,
            verifier: 1,
            composer: 0
        }
    );
    assert_eq!(
        r.g.planner.calls()[2].state.round.retries,
        RetryCounters::default()
    );
}

#[tokio::test]
async fn round_two_failure_before_verifier_is_pre_verification_fallback() {
    let planner_fails: &'static [Ev] = &[
        (P, 1, 2, Status::NonRetryableFailed),
        (F, 1, 2, Status::Answered),
    ];
    let executor_fails: &'static [Ev] = &[
        (P, 1, 2, Status::Completed),
        (E, 1, 2, Status::Failed),
        (F, 1, 2, Status::Answered),
    ];
    let gate_rejects: &'static [Ev] = &[
        (P, 1, 2, Status::Completed),
        (E, 1, 2, Status::Completed),
        (G, 1, 2, Status::Reject),
        (F, 1, 2, Status::Answered),
    ];
    let verifier_exhausted: &'static [Ev] = &[
        (P, 1, 2, Status::Completed),
        (E, 1, 2, Status::Completed),
        (G, 1, 2, Status::Pass),
        (VI, 1, 2, Status::Built),
        (V, 1, 2, Status::InvalidOutput),
        (V, 2, 2, Status::RetryableFailed),
        (F, 1, 2, Status::Answered),
    ];
    let round1_low = || steps::verifier_verdict(Verdict::LowConfid, vec![critical_gap()]);
    let cases: Vec<(&str, Scripts, &'static [Ev], u32)> = vec![
        (
            "planner",
            Scripts {
                planner: vec![
                    planner(AgentStatus::Completed),
                    planner(AgentStatus::NonRetryableFailed),
                ],
                ..two_rounds(vec![round1_low()])
            },
            planner_fails,
            0,
        ),
        (
            "executor",
            Scripts {
                executor: vec![
                    steps::executor(ExecutorStatus::Completed),
                    steps::executor(ExecutorStatus::Failed),
                ],
                ..two_rounds(vec![round1_low()])
            },
            executor_fails,
            0,
        ),
        (
            "gatekeeper",
            Scripts {
                gatekeeper: vec![steps::gate_pass(), steps::gate_reject(1, 1)],
                ..two_rounds(vec![round1_low()])
            },
            gate_rejects,
            0,
        ),
        (
            "verifier",
            two_rounds(vec![
                round1_low(),
                steps::verifier(AgentStatus::InvalidOutput),
                steps::verifier(AgentStatus::RetryableFailed),
            ]),
            verifier_exhausted,
            1,
        ),
    ];
    for (name, scripts, tail, verifier_retries) in cases {
        let r = run(scripts).await;
        let events: Vec<Ev> = ROUND1_TO_RETRY.iter().chain(tail).copied().collect();
        check(
            &r,
            Expect {
                events: &events,
                end: End::PreFallback,
                retries: (0, verifier_retries, 0),
                ..ROUND2
            },
        );
        // Round 1's verified material is not mixed into the failed round: only a projection
        // built in round 2 itself may be present.
        let projected_in_round_2 = r.g.verified_input.call_count() == 2;
        assert_eq!(projected_in_round_2, name == "verifier", "{name}");
        assert_eq!(
            r.state.round.verified_executor_output.is_some(),
            projected_in_round_2,
            "{name}"
        );
        assert_eq!(
            r.state.round.verified_evidence.is_empty(),
            !projected_in_round_2,
            "{name}"
        );
        assert_eq!(r.state.round.verifier_result, None, "{name}");
        assert_eq!(r.g.composer.call_count(), 0, "{name}");
    }
}

#[tokio::test]
async fn round_two_effective_reject_is_post_verification_fallback() {
    let r = run(two_rounds(vec![
        steps::verifier_verdict(Verdict::LowConfid, vec![critical_gap()]),
        steps::verifier_verdict(Verdict::Reject, vec![]),
    ]))
    .await;
    let events: Vec<Ev> = ROUND1_TO_RETRY
        .iter()
        .chain(&[
            (P, 1, 2, Status::Completed),
            (E, 1, 2, Status::Completed),
            (G, 1, 2, Status::Pass),
            (VI, 1, 2, Status::Built),
            (V, 1, 2, Status::Completed),
            (F, 1, 2, Status::Answered),
        ])
        .copied()
        .collect();
    check(
        &r,
        Expect {
            events: &events,
            end: End::PostFallback,
            ..ROUND2
        },
    );
    assert_eq!(r.state.round.effective_verdict, Some(Verdict::Reject));
}

/// Every technical retry in both rounds, the evidence retry, and a Composer that fails twice.
fn longest_path_scripts() -> Scripts {
    Scripts {
        planner: vec![
            planner(AgentStatus::InvalidOutput),
            planner(AgentStatus::Completed),
            planner(AgentStatus::RetryableFailed),
            planner(AgentStatus::Completed),
        ],
        composer: vec![
            steps::composer(AgentStatus::InvalidOutput),
            steps::composer(AgentStatus::RetryableFailed),
        ],
        ..two_rounds(vec![
            steps::verifier(AgentStatus::InvalidOutput),
            steps::verifier_verdict(Verdict::LowConfid, vec![critical_gap()]),
            steps::verifier(AgentStatus::RetryableFailed),
            steps::verifier_verdict(Verdict::Pass, vec![]),
        ])
    }
}

const LONGEST_PATH: &[Ev] = &[
    (P, 1, 1, Status::InvalidOutput),
    (P, 2, 1, Status::Completed),
    (E, 1, 1, Status::Completed),
    (G, 1, 1, Status::Pass),
    (VI, 1, 1, Status::Built),
    (V, 1, 1, Status::InvalidOutput),
    (V, 2, 1, Status::Completed),
    (RP, 1, 1, Status::Prepared),
    (P, 1, 2, Status::RetryableFailed),
    (P, 2, 2, Status::Completed),
    (E, 1, 2, Status::Completed),
    (G, 1, 2, Status::Pass),
    (VI, 1, 2, Status::Built),
    (V, 1, 2, Status::RetryableFailed),
    (V, 2, 2, Status::Completed),
    (C, 1, 2, Status::InvalidOutput),
    (C, 2, 2, Status::RetryableFailed),
    (F, 1, 2, Status::Answered),
];

#[tokio::test]
async fn longest_legal_path_is_exactly_eighteen_steps_and_succeeds() {
    let r = run(longest_path_scripts()).await;
    check(
        &r,
        Expect {
            events: LONGEST_PATH,
            end: End::PostFallback,
            retries: (1, 1, 1),
            ..ROUND2
        },
    );
    assert_eq!(r.state.events.len(), 18);
    assert_eq!(STEP_LIMIT, 18);
    assert_eq!(r.state.round.effective_verdict, Some(Verdict::Pass));
}

// ---------------------------------------------------------------------------------------------
// Composer
// ---------------------------------------------------------------------------------------------

fn composer_path(tail: &[Ev]) -> Vec<Ev> {
    PASS_PATH[..5].iter().chain(tail).copied().collect()
}

#[tokio::test]
async fn composer_routes() {
    let composer = |steps: Vec<ScriptStep>| Scripts {
        composer: steps,
        ..Scripts::default()
    };
    check_cases(vec![
        Case::new(
            "composer_normal_completion",
            Scripts::default(),
            &composer_path(&[(C, 1, 1, Status::Completed)]),
        )
        .then(|r| assert_eq!(r.g.composer.call_count(), 1)),
        Case::new(
            "composer_technical_retry_then_success",
            composer(vec![
                steps::composer(AgentStatus::RetryableFailed),
                steps::composer_answer(ANSWER),
            ]),
            &composer_path(&[
                (C, 1, 1, Status::RetryableFailed),
                (C, 2, 1, Status::Completed),
            ]),
        )
        .retries((0, 0, 1))
        .then(|r| {
            for node in [&r.g.planner, &r.g.executor, &r.g.gatekeeper, &r.g.verifier] {
                assert_eq!(node.call_count(), 1);
            }
        }),
        Case::new(
            "composer_retry_exhausted_falls_back_post_verification",
            composer(vec![
                steps::composer(AgentStatus::InvalidOutput),
                steps::composer(AgentStatus::InvalidOutput),
                steps::composer_answer(ANSWER),
            ]),
            &composer_path(&[
                (C, 1, 1, Status::InvalidOutput),
                (C, 2, 1, Status::InvalidOutput),
                (F, 1, 1, Status::Answered),
            ]),
        )
        .end(End::PostFallback)
        .retries((0, 0, 1)),
        Case::new(
            "composer_non_retryable_failed_falls_back_post_verification",
            composer(vec![
                steps::composer(AgentStatus::NonRetryableFailed),
                steps::composer_answer(ANSWER),
            ]),
            &composer_path(&[
                (C, 1, 1, Status::NonRetryableFailed),
                (F, 1, 1, Status::Answered),
            ]),
        )
        .end(End::PostFallback),
        Case::new(
            "composer_unknown_status_falls_back_post_verification",
            composer(vec![
                steps::composer(AgentStatus::Unknown("DRAFT".into())),
                steps::composer_answer(ANSWER),
            ]),
            &composer_path(&[(C, 1, 1, Status::Unknown), (F, 1, 1, Status::Answered)]),
        )
        .end(End::PostFallback),
        Case::new(
            "composer_blank_answer_falls_back_post_verification",
            composer(vec![steps::composer_answer(" \n\t ")]),
            &composer_path(&[(C, 1, 1, Status::Completed), (F, 1, 1, Status::Answered)]),
        )
        .end(End::PostFallback)
        .then(|r| {
            assert_eq!(r.state.composer_status, Some(AgentStatus::Completed));
            // The Fallback saw the blank answer and replaced it.
            assert_eq!(
                r.g.fallback.calls()[0].state.final_answer.as_deref(),
                Some(" \n\t ")
            );
        }),
    ])
    .await;
}

// ---------------------------------------------------------------------------------------------
// Engine
// ---------------------------------------------------------------------------------------------

/// A minimal state for generic graphs.
#[derive(Debug, Default)]
struct Toy {
    spins: u32,
    bumps: u32,
    /// Evidence rounds entered after the first.
    later_rounds: u32,
    events: Vec<Event<Status>>,
}

impl GraphState<Status> for Toy {
    fn round(&self) -> u32 {
        1 + self.later_rounds
    }

    fn push_event(&mut self, event: Event<Status>) {
        self.events.push(event);
    }
}

/// Counts its runs and answers COMPLETED.
struct Spin;

impl Node<Toy, Status> for Spin {
    fn run<'a>(&'a self, state: &'a mut Toy, _config: &'a RunConfig) -> NodeFuture<'a, Status> {
        state.spins += 1;
        Box::pin(std::future::ready(Step::new(Status::Completed)))
    }
}

fn spin() -> Arc<dyn Node<Toy, Status>> {
    Arc::new(Spin)
}

async fn invoke_toy(
    builder: GraphBuilder<Toy, Status>,
    limit: u32,
) -> Result<Toy, EngineFailure<Toy>> {
    let graph = builder.compile().expect("toy graph compiles");
    let clock = FixedClock(T0);
    let mut rec = Recorder::default();
    graph
        .invoke(
            Toy::default(),
            &config(),
            InvokeOptions {
                step_limit: limit,
                clock: &clock,
                cancel: None,
                observer: &mut rec,
            },
        )
        .await
}

fn self_loop(counter: Counter<Toy>) -> GraphBuilder<Toy, Status> {
    let mut g = GraphBuilder::new("spin");
    g.node(
        "spin",
        NodeKind::Deterministic,
        &[Status::Completed],
        spin(),
    )
    .route(
        "spin",
        &[Status::Completed],
        vec![
            Branch::counted("again", counter, 3, Target::Node("spin")),
            Branch::otherwise(Target::End),
        ],
    );
    g
}

#[tokio::test]
async fn step_limit_stops_a_counted_loop_whose_counter_never_moves() {
    // Broken: the counter reads 0 forever, so the counted self-loop never closes.
    const STUCK: Counter<Toy> = Counter {
        name: "stuck",
        get: |_| 0,
        bump: |s| s.bumps += 1,
    };
    let failure = invoke_toy(self_loop(STUCK), 25)
        .await
        .expect_err("the step limit must stop the loop");
    assert_eq!(
        failure.error,
        EngineError::StepLimit {
            limit: 25,
            next: "spin".into()
        }
    );
    assert_eq!(failure.state.spins, 25);
    assert_eq!(failure.state.bumps, 25);
    let seqs: Vec<u32> = failure.state.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=25).collect::<Vec<_>>());
    let attempts: Vec<u32> = failure.state.events.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, (1..=25).collect::<Vec<_>>());

    // The same graph with a working counter ends after max + 1 runs.
    const WORKING: Counter<Toy> = Counter {
        name: "working",
        get: |s| s.bumps,
        bump: |s| s.bumps += 1,
    };
    let state = invoke_toy(self_loop(WORKING), 25)
        .await
        .expect("terminates");
    assert_eq!(state.spins, 4);
    assert_eq!(state.events.len(), 4);
}

#[tokio::test]
async fn attempts_count_per_node_and_restart_in_a_new_round() {
    const SAME_ROUND: Counter<Toy> = Counter {
        name: "bumps",
        get: |s| s.bumps,
        bump: |s| s.bumps += 1,
    };
    const NEXT_ROUND: Counter<Toy> = Counter {
        name: "later_rounds",
        get: |s| s.later_rounds,
        bump: |_| {},
    };
    let mut g = GraphBuilder::new("spin");
    g.node("spin", NodeKind::Agent, OK, spin()).route(
        "spin",
        OK,
        vec![
            Branch::counted("retry", SAME_ROUND, 1, Target::Node("spin")),
            Branch::counted("next round", NEXT_ROUND, 1, Target::Node("spin")).effect(Effect {
                name: "round + 1",
                apply: |s: &mut Toy| s.later_rounds += 1,
            }),
            Branch::otherwise(Target::End),
        ],
    );
    let state = invoke_toy(g, STEP_LIMIT).await.expect("terminates");
    let got: Vec<(u32, u32)> = state.events.iter().map(|e| (e.attempt, e.round)).collect();
    assert_eq!(got, vec![(1, 1), (2, 1), (1, 2)]);
}

async fn invoke_diagnosis(
    g: &ScriptedGraph,
    limit: u32,
    cancel: Option<&CancellationToken>,
    rec: &mut dyn Observer<Status>,
) -> Result<DiagnosisState, EngineFailure<DiagnosisState>> {
    let graph = topology::compile(g.nodes()).expect("compiles");
    let clock = FixedClock(T0);
    graph
        .invoke(
            DiagnosisState::new(
                QUESTION,
                diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0)),
            ),
            &config(),
            InvokeOptions {
                step_limit: limit,
                clock: &clock,
                cancel,
                observer: rec,
            },
        )
        .await
}

#[tokio::test]
async fn step_limit_below_the_path_is_an_engine_error_with_partial_state() {
    let g = ScriptedGraph::new(Scripts::default());
    let failure = invoke_diagnosis(&g, 5, None, &mut Recorder::default())
        .await
        .expect_err("six steps do not fit in five");
    assert_eq!(
        failure.error,
        EngineError::StepLimit {
            limit: 5,
            next: C.into()
        }
    );
    assert_eq!(failure.state.path(), vec![P, E, G, VI, V]);
    assert_eq!(g.composer.call_count(), 0);
    assert_eq!(failure.state.final_answer, None);
    assert_eq!(failure.state.round.effective_verdict, Some(Verdict::Pass));

    let g = ScriptedGraph::new(longest_path_scripts());
    let failure = invoke_diagnosis(&g, STEP_LIMIT - 1, None, &mut Recorder::default())
        .await
        .expect_err("the longest path does not fit in 17");
    assert_eq!(
        failure.error,
        EngineError::StepLimit {
            limit: 17,
            next: F.into()
        }
    );
    assert_eq!(
        event_tuples(&failure.state.events),
        owned(&LONGEST_PATH[..17])
    );
    assert_eq!(g.fallback.call_count(), 0);
}

#[tokio::test]
async fn cancellation_before_start_runs_nothing() {
    let g = ScriptedGraph::new(Scripts::default());
    let token = CancellationToken::new();
    token.cancel();
    let mut rec = Recorder::default();
    let failure = invoke_diagnosis(&g, STEP_LIMIT, Some(&token), &mut rec)
        .await
        .expect_err("cancelled");
    assert_eq!(failure.error, EngineError::Cancelled { node: P.into() });
    assert_eq!(
        failure.state,
        DiagnosisState::new(
            QUESTION,
            diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0))
        )
    );
    assert!(rec.started.is_empty());
    assert_eq!(g.planner.call_count(), 0);
}

#[tokio::test]
async fn cancellation_observed_during_a_node_discards_that_attempt() {
    // The Executor is cancelled while it runs; even though its step then finishes, the
    // attempt gets no terminal event and nothing after it starts.
    let token = CancellationToken::new();
    let cancel = token.clone();
    let g = ScriptedGraph::new(Scripts {
        executor: vec![Box::new(move |s, c| {
            cancel.cancel();
            steps::executor(ExecutorStatus::Completed)(s, c)
        })],
        ..Scripts::default()
    });
    let mut rec = Recorder::default();
    let failure = invoke_diagnosis(&g, STEP_LIMIT, Some(&token), &mut rec)
        .await
        .expect_err("cancelled");
    assert_eq!(failure.error, EngineError::Cancelled { node: E.into() });
    assert_eq!(
        event_tuples(&failure.state.events),
        owned(&[(P, 1, 1, Status::Completed)])
    );
    assert_eq!(rec.started.len(), 2);
    assert_eq!(rec.events, failure.state.events);
    assert_eq!(g.gatekeeper.call_count(), 0);
}

/// Cancels the run as soon as a given node's terminal event is reported.
struct CancelAfter {
    node: &'static str,
    token: CancellationToken,
    events: Vec<Event<Status>>,
}

impl Observer<Status> for CancelAfter {
    fn event(&mut self, event: &Event<Status>) {
        self.events.push(event.clone());
        if event.node == self.node {
            self.token.cancel();
        }
    }
}

#[tokio::test]
async fn cancellation_between_nodes_keeps_the_events_so_far() {
    let token = CancellationToken::new();
    let mut observer = CancelAfter {
        node: E,
        token: token.clone(),
        events: Vec::new(),
    };
    let g = ScriptedGraph::new(Scripts::default());
    let failure = invoke_diagnosis(&g, STEP_LIMIT, Some(&token), &mut observer)
        .await
        .expect_err("cancelled");
    assert_eq!(failure.error, EngineError::Cancelled { node: G.into() });
    assert_eq!(
        event_tuples(&failure.state.events),
        owned(&[(P, 1, 1, Status::Completed), (E, 1, 1, Status::Completed)])
    );
    assert_eq!(observer.events, failure.state.events);
    assert!(failure.state.round.executor_output.is_some());
    assert_eq!(g.gatekeeper.call_count(), 0);
}

/// A node whose future never completes; it says when it has started.
struct Hang(Arc<tokio::sync::Notify>);

impl Node<DiagnosisState, Status> for Hang {
    fn run<'a>(
        &'a self,
        _state: &'a mut DiagnosisState,
        _config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        let started = self.0.clone();
        Box::pin(async move {
            started.notify_one();
            std::future::pending::<Step<Status>>().await
        })
    }
}

#[tokio::test]
async fn cancellation_mid_node_keeps_the_events_so_far() {
    let g = ScriptedGraph::new(Scripts::default());
    let started = Arc::new(tokio::sync::Notify::new());
    let mut nodes = g.nodes();
    nodes.verifier = Arc::new(Hang(started.clone()));
    let graph = topology::compile(nodes).expect("compiles");
    let token = CancellationToken::new();
    let clock = FixedClock(T0);
    let mut rec = Recorder::default();
    let cfg = config();
    let (result, ()) = tokio::join!(
        graph.invoke(
            DiagnosisState::new(
                QUESTION,
                diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0))
            ),
            &cfg,
            InvokeOptions {
                step_limit: STEP_LIMIT,
                clock: &clock,
                cancel: Some(&token),
                observer: &mut rec,
            },
        ),
        async {
            started.notified().await;
            token.cancel();
        }
    );
    let failure = result.expect_err("cancelled mid-node");
    assert_eq!(failure.error, EngineError::Cancelled { node: V.into() });
    assert_eq!(
        event_tuples(&failure.state.events),
        owned(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::Pass),
            (VI, 1, 1, Status::Built),
        ])
    );
    // The verifier started but has no terminal event.
    assert_eq!(rec.started.last(), Some(&(V.to_string(), 1, 1)));
    assert_eq!(rec.events.len(), 4);
    assert_eq!(g.composer.call_count(), 0);
}

#[tokio::test]
async fn undeclared_outcome_is_an_engine_error() {
    let g = ScriptedGraph::new(Scripts {
        gatekeeper: vec![Box::new(|_, _| Step::new(Status::Completed))],
        ..Scripts::default()
    });
    let failure = invoke_diagnosis(&g, STEP_LIMIT, None, &mut Recorder::default())
        .await
        .expect_err("a gatekeeper cannot return COMPLETED");
    assert_eq!(
        failure.error,
        EngineError::UndeclaredOutcome {
            node: G.into(),
            outcome: "COMPLETED".into()
        }
    );
    assert_eq!(
        event_tuples(&failure.state.events),
        owned(&[
            (P, 1, 1, Status::Completed),
            (E, 1, 1, Status::Completed),
            (G, 1, 1, Status::Completed),
        ])
    );
    assert_eq!(g.verified_input.call_count(), 0);
    assert_eq!(g.fallback.call_count(), 0);
}

// ---------------------------------------------------------------------------------------------
// compile()
// ---------------------------------------------------------------------------------------------

fn toy(start: &'static str) -> GraphBuilder<Toy, Status> {
    GraphBuilder::new(start)
}

fn compile_err(g: GraphBuilder<Toy, Status>) -> CompileError {
    match g.compile() {
        Ok(_) => panic!("the graph must not compile"),
        Err(e) => e,
    }
}

const DONE: Status = Status::Completed;
const OK: &[Status] = &[Status::Completed];

fn never(_: &Toy) -> bool {
    false
}

#[test]
fn diagnosis_topology_compiles() {
    let graph = topology::shape().expect("the routing table compiles");
    assert_eq!(graph.start(), P);
    assert_eq!(graph.node_names(), topology::NODES.to_vec());
}

#[test]
fn compile_rejects_unreachable_node() {
    let mut g = toy("a");
    g.node("a", NodeKind::Deterministic, OK, spin())
        .node("island", NodeKind::Deterministic, OK, spin())
        .edge("a", OK, Target::End)
        .edge("island", OK, Target::End);
    assert_eq!(
        compile_err(g),
        CompileError::UnreachableNode("island".into())
    );
}

#[test]
fn compile_rejects_unrouted_status() {
    let mut g = toy("a");
    g.node(
        "a",
        NodeKind::Agent,
        &[Status::Completed, Status::Failed],
        spin(),
    )
    .edge("a", OK, Target::End);
    assert_eq!(
        compile_err(g),
        CompileError::UnroutedStatus {
            node: "a".into(),
            outcome: "FAILED".into()
        }
    );
}

#[test]
fn compile_rejects_uncounted_cycle() {
    let cycle = |counted: bool| {
        let mut g = toy("a");
        g.node("a", NodeKind::Deterministic, OK, spin())
            .node("b", NodeKind::Deterministic, OK, spin())
            .edge("a", OK, Target::Node("b"));
        let back = if counted {
            Branch::counted(
                "again",
                Counter {
                    name: "bumps",
                    get: |s: &Toy| s.bumps,
                    bump: |s: &mut Toy| s.bumps += 1,
                },
                1,
                Target::Node("a"),
            )
        } else {
            Branch::when("again", |s: &Toy| s.spins < 3, Target::Node("a"))
        };
        g.route("b", OK, vec![back, Branch::otherwise(Target::End)]);
        g
    };
    assert_eq!(
        compile_err(cycle(false)),
        CompileError::UncountedCycle(vec!["a".into(), "b".into(), "a".into()])
    );
    assert!(cycle(true).compile().is_ok(), "a counted cycle compiles");
}

#[test]
fn compile_rejects_route_without_unconditional_last_branch() {
    let mut g = toy("a");
    g.node(
        "a",
        NodeKind::Deterministic,
        &[Status::Completed, Status::Failed],
        spin(),
    )
    .route(
        "a",
        &[Status::Completed, Status::Failed],
        vec![Branch::when("never", never, Target::End)],
    );
    assert_eq!(
        compile_err(g),
        CompileError::NonTotalRoute {
            node: "a".into(),
            outcome: "COMPLETED/FAILED".into()
        }
    );
}

#[test]
fn compile_rejects_unknown_target() {
    let mut g = toy("a");
    g.node("a", NodeKind::Deterministic, OK, spin())
        .edge("a", OK, Target::Node("ghost"));
    assert_eq!(
        compile_err(g),
        CompileError::UnknownTarget {
            node: "a".into(),
            outcome: "COMPLETED".into(),
            target: "ghost".into()
        }
    );
}

#[test]
fn compile_rejects_duplicate_node() {
    let mut g = toy("a");
    g.node("a", NodeKind::Deterministic, OK, spin())
        .node("a", NodeKind::Agent, OK, spin())
        .edge("a", OK, Target::End);
    assert_eq!(compile_err(g), CompileError::DuplicateNode("a".into()));
}

#[test]
fn compile_rejects_node_without_path_to_end() {
    let mut g = toy("a");
    g.node("a", NodeKind::Deterministic, OK, spin())
        .node("b", NodeKind::Deterministic, OK, spin())
        .node("c", NodeKind::Deterministic, OK, spin())
        .route(
            "a",
            OK,
            vec![
                Branch::when("never", never, Target::End),
                Branch::otherwise(Target::Node("b")),
            ],
        )
        .edge("b", OK, Target::Node("c"))
        .edge("c", OK, Target::Node("b"));
    assert_eq!(compile_err(g), CompileError::NoPathToEnd("b".into()));
}

#[test]
fn compile_rejects_other_malformed_declarations() {
    // Unknown start.
    let mut g = toy("nowhere");
    g.node("a", NodeKind::Deterministic, OK, spin())
        .edge("a", OK, Target::End);
    assert_eq!(compile_err(g), CompileError::UnknownStart("nowhere".into()));

    // A node with no outcomes.
    let mut g = toy("a");
    g.node("a", NodeKind::Deterministic, &[], spin());
    assert_eq!(compile_err(g), CompileError::NoOutcomes("a".into()));

    // A route from an undeclared node.
    let mut g = toy("a");
    g.node("a", NodeKind::Deterministic, OK, spin())
        .edge("a", OK, Target::End)
        .edge("ghost", OK, Target::End);
    assert_eq!(
        compile_err(g),
        CompileError::RouteFromUnknownNode("ghost".into())
    );

    // Routing an outcome the node does not declare.
    let mut g = toy("a");
    g.node("a", NodeKind::Deterministic, OK, spin()).edge(
        "a",
        &[DONE, Status::Failed],
        Target::End,
    );
    assert_eq!(
        compile_err(g),
        CompileError::UndeclaredOutcome {
            node: "a".into(),
            outcome: "FAILED".into()
        }
    );

    // The same outcome routed twice.
    let mut g = toy("a");
    g.node("a", NodeKind::Deterministic, OK, spin())
        .edge("a", OK, Target::End)
        .edge("a", OK, Target::End);
    assert_eq!(
        compile_err(g),
        CompileError::DuplicateRoute {
            node: "a".into(),
            outcome: "COMPLETED".into()
        }
    );

    // A branch after the unconditional one.
    let mut g = toy("a");
    g.node("a", NodeKind::Deterministic, OK, spin()).route(
        "a",
        OK,
        vec![
            Branch::otherwise(Target::End),
            Branch::when("never", never, Target::End),
        ],
    );
    assert_eq!(
        compile_err(g),
        CompileError::DeadBranch {
            node: "a".into(),
            outcome: "COMPLETED".into()
        }
    );
}

#[test]
fn diagnosis_topology_rejects_a_second_route_for_a_routed_status() {
    let g = ScriptedGraph::new(Scripts::default());
    let mut builder = topology::builder(g.nodes());
    builder.edge(P, &[Status::Completed], Target::Node(F));
    match builder.compile() {
        Ok(_) => panic!("a duplicate route must not compile"),
        Err(e) => assert_eq!(
            e,
            CompileError::DuplicateRoute {
                node: P.into(),
                outcome: "COMPLETED".into()
            }
        ),
    }
}
