//! `diag-ask`: the ask service (openspec/specs/ask-service/spec.md): one question → one
//! stored run. It creates the run, invokes the compiled graph once with the run's
//! `RunConfig`, writes the trace as it happens, maps the final state to a truthful run record
//! (SUCCESS with an answer, or FAILED), and evaluates successful runs. It never talks to the
//! user; the CLI renders what it returns. Beside it: the configuration file ([`config`]), the
//! models and tools a configuration sets up ([`setup`]), and the replay of a run file through
//! the same service ([`replay`]).

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod config;
pub mod live;
pub mod replay;
pub mod setup;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use diag_core::agent::runtime::{
    AgentModels, AgentStepRecord, ModelAgents, ModelExchange, RunHooks, ToolRunner,
};
use diag_core::clock::Clock;
use diag_core::graph::{EngineError, Event, InvokeOptions, NodeKind, Observer, RunConfig};
use diag_core::ids::IdSource;
use diag_core::limits::Limits;
use diag_core::protocol::{RunClock, ToolInvocation};
use diag_core::store::alerts::RunAlerts;
use diag_core::store::{
    FinishError, NewRun, Recorder as StoreRecorder, RunStatus, RunSummary, Store, StoreError,
};
use diag_core::tools::InvocationLog;
use diag_diagnosis::evaluation::{evaluate, run_summary, verifier_evaluation, Evaluation};
use diag_diagnosis::nodes::{real_nodes, NodeDeps};
use diag_diagnosis::{topology, DiagnosisNodes, DiagnosisState, Status, STEP_LIMIT};
use diag_runfile::Recorder;

/// Builds the eight nodes of a run from its dependencies; [`real_nodes`] in production,
/// scripted nodes in tests of the run lifecycle.
pub type NodeFactory = Arc<dyn Fn(NodeDeps) -> DiagnosisNodes + Send + Sync>;

/// The production node factory.
pub fn production_nodes() -> NodeFactory {
    Arc::new(real_nodes)
}

/// Everything a run needs from outside the graph; the run store is the port's handle
/// ([`Store`]), of whichever backend.
pub struct AskDeps {
    pub nodes: NodeFactory,
    pub models: AgentModels,
    pub tools: Arc<dyn ToolRunner>,
    /// The limits the run runs under (a live run's configured ones, a replayed file's
    /// recorded ones or, for a file that records none, the defaults).
    pub limits: Limits,
    /// Whether the run stores its limits and exports them into its run file: `false` only
    /// for a replay of a file that records none, whose export records none either.
    pub record_limits: bool,
    /// Run the plan's steps as tool calls before the Executor's first turn (a live run's
    /// `[executor] run_plan_steps`; a replay: when its recording has them).
    pub run_plan_steps: bool,
    /// The whole run's time limit (a live run's `[limits] run_timeout_secs`; `None` for a
    /// replay, which waits on nothing): a run still going then is stopped and stored FAILED
    /// with a failure that names it ([`deadline_failure`]).
    pub deadline: Option<std::time::Duration>,
    /// The contract the Composer is asked for (a live run: the current one; a replay: the
    /// one its recording was made with).
    pub composer: diag_core::protocol::ComposerContract,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdSource>,
    pub store: Store,
    /// The endpoints the run's models use: a live run records with itself, as it starts, what
    /// the store remembered of them (`diag trace` shows it). Empty for a replay, which neither
    /// reads nor writes what endpoints taught.
    pub endpoints: Vec<diag_core::model::Endpoint>,
    /// The recorded run a replay replays (its run file's `run_id`), stored with the run so
    /// that `diag runs` tells replays from live runs; `None` for a live run.
    pub replay_of: Option<String>,
}

/// One question.
pub struct AskRequest {
    pub question: String,
    /// Continue a session; a new one is created when absent.
    pub session_id: Option<String>,
    /// Fixes the run id (replay of a run file uses a fresh one; tests may pin it).
    pub run_id: Option<String>,
}

/// How a run ended. One variant per end, so an outcome cannot say SUCCESS together with a
/// failure or an interruption, nor FAILED with an answer or an evaluation.
#[derive(Debug)]
pub enum RunEnd {
    /// SUCCESS: a non-blank answer and its evaluation.
    Success {
        answer: String,
        evaluation: Box<Evaluation>,
    },
    /// FAILED, with why (an engine error, a blank answer, a store that refused a write).
    Failed { failure: String },
    /// FAILED because the run was cancelled; its failure reads `interrupted`.
    Interrupted,
}

/// The failure text of an interrupted run, as stored and shown.
pub const INTERRUPTED: &str = "interrupted";

/// What a run came to.
#[derive(Debug)]
pub struct AskOutcome {
    pub run_id: String,
    pub session_id: String,
    /// How the run ended.
    pub end: RunEnd,
    /// The final (or, for an engine error, partial) graph state.
    pub state: DiagnosisState,
    /// The run's exchanges in order, when recording was asked for.
    pub recorded: Option<Vec<diag_runfile::Exchange>>,
    /// Problems that did not change the run's status (an evaluation that could not be
    /// stored), one line each, for the caller to show.
    pub warnings: Vec<String>,
}

impl AskOutcome {
    /// A FAILED run's outcome: no answer, no evaluation, no warnings.
    fn failed(
        run_id: String,
        session_id: String,
        end: RunEnd,
        state: DiagnosisState,
        recorded: Option<Vec<diag_runfile::Exchange>>,
    ) -> Self {
        AskOutcome {
            run_id,
            session_id,
            end,
            state,
            recorded,
            warnings: Vec::new(),
        }
    }

    /// The status the run was stored with.
    pub fn status(&self) -> RunStatus {
        match self.end {
            RunEnd::Success { .. } => RunStatus::Success,
            RunEnd::Failed { .. } | RunEnd::Interrupted => RunStatus::Failed,
        }
    }

    /// The answer of a SUCCESS run.
    pub fn answer(&self) -> Option<&str> {
        match &self.end {
            RunEnd::Success { answer, .. } => Some(answer),
            RunEnd::Failed { .. } | RunEnd::Interrupted => None,
        }
    }

    /// Why a FAILED run failed, as stored; `None` for SUCCESS.
    pub fn failure(&self) -> Option<&str> {
        match &self.end {
            RunEnd::Success { .. } => None,
            RunEnd::Failed { failure } => Some(failure),
            RunEnd::Interrupted => Some(INTERRUPTED),
        }
    }

    /// Whether the run was cancelled.
    pub fn interrupted(&self) -> bool {
        matches!(self.end, RunEnd::Interrupted)
    }

    /// The evaluation of a SUCCESS run.
    pub fn evaluation(&self) -> Option<&Evaluation> {
        match &self.end {
            RunEnd::Success { evaluation, .. } => Some(evaluation),
            RunEnd::Failed { .. } | RunEnd::Interrupted => None,
        }
    }
}

/// A run that resumes a FAILED one (`diag ask --resume`): the original run's id, stored as
/// `resumed_from` when the run is created, and what the run reused of it, asked for when the
/// run is finished.
pub struct Resume<'a> {
    pub from: String,
    pub reuse: &'a (dyn Fn() -> diag_core::store::Reuse + Send + Sync),
}

/// How to run one question, beyond the question itself.
pub struct AskOptions<'a> {
    /// Also collect every exchange, for a run file.
    pub record: bool,
    /// The run resumes another; see [`Resume`].
    pub resume: Option<Resume<'a>>,
    /// Cancels the run (it then ends [`RunEnd::Interrupted`]).
    pub cancel: Option<&'a CancellationToken>,
    /// Told of every node start and event, after the store.
    pub progress: &'a mut dyn Observer<Status>,
    /// The alert group the run investigates, recorded with it as it starts.
    pub alerts: Option<&'a RunAlerts>,
}

impl<'a> AskOptions<'a> {
    /// No recording, no cancellation, progress to `progress`.
    pub fn new(progress: &'a mut dyn Observer<Status>) -> Self {
        AskOptions {
            record: false,
            resume: None,
            cancel: None,
            progress,
            alerts: None,
        }
    }

    /// The run resumes another (see [`Resume`]).
    pub fn resuming(mut self, resume: Option<Resume<'a>>) -> Self {
        self.resume = resume;
        self
    }

    /// Also collect every exchange, for a run file.
    pub fn recording(mut self, record: bool) -> Self {
        self.record = record;
        self
    }

    /// Record the alert group the run investigates with it.
    pub fn alerts(mut self, alerts: Option<&'a RunAlerts>) -> Self {
        self.alerts = alerts;
        self
    }

    /// Cancel the run when `token` is cancelled.
    pub fn cancel(mut self, token: Option<&'a CancellationToken>) -> Self {
        self.cancel = token;
        self
    }
}

/// Why nothing could be stored.
#[derive(Debug, Error)]
pub enum AskError {
    #[error("the question is empty")]
    EmptyQuestion,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Hooks that report to several observers in order.
struct TeeHooks(Vec<Arc<dyn RunHooks>>);

impl RunHooks for TeeHooks {
    fn agent_step(&self, config: &RunConfig, step: &AgentStepRecord) {
        self.0.iter().for_each(|h| h.agent_step(config, step));
    }
    fn model_exchange(&self, config: &RunConfig, exchange: &ModelExchange) {
        self.0
            .iter()
            .for_each(|h| h.model_exchange(config, exchange));
    }
    fn model_call(&self, config: &RunConfig, step: &AgentStepRecord, exchange: &ModelExchange) {
        self.0
            .iter()
            .for_each(|h| h.model_call(config, step, exchange));
    }
}

/// The store's recorder first (so the trace is written as it happens), then the caller's
/// progress display.
struct TeeObserver<'a> {
    store: StoreRecorder,
    progress: &'a mut dyn Observer<Status>,
}

impl Observer<Status> for TeeObserver<'_> {
    fn node_started(&mut self, node: &str, kind: NodeKind, attempt: u32, round: u32) {
        self.store.observe_node(kind);
        self.progress.node_started(node, kind, attempt, round);
    }
    fn event(&mut self, event: &Event<Status>) {
        self.store.observe_event(event);
        self.progress.event(event);
    }
}

/// A run that ends FAILED before the graph could give a state (the topology did not compile,
/// a node panicked): stored with `summary`, answered with an empty state.
struct EarlyFailure<'a> {
    deps: &'a AskDeps,
    run_id: String,
    session_id: String,
    question: String,
    started_at: diag_core::clock::Timestamp,
}

impl EarlyFailure<'_> {
    fn finish(
        self,
        failure: String,
        summary: RunSummary,
        tape: Option<Arc<Recorder>>,
    ) -> Result<AskOutcome, AskError> {
        self.deps
            .store
            .finish_failed(&self.run_id, &failure, summary)?;
        Ok(AskOutcome::failed(
            self.run_id,
            self.session_id,
            RunEnd::Failed { failure },
            {
                let clock = RunClock::for_question(self.started_at, &self.question);
                DiagnosisState::new(self.question, clock)
            },
            tape.map(|t| t.exchanges()),
        ))
    }
}

/// A run that is stored RUNNING: its ids, question, trace recorder and optional tape.
struct Started<'a> {
    deps: &'a AskDeps,
    run_id: String,
    session_id: String,
    question: String,
    config: RunConfig,
    recorder: StoreRecorder,
    tape: Option<Arc<Recorder>>,
    /// The tool catalog, read once: stored with the run and handed to the nodes.
    catalog: Vec<diag_core::tools::ToolSpec>,
    /// The run's recorded start: every agent is shown it as the run's clock.
    started_at: diag_core::clock::Timestamp,
    /// The clock's elapsed time when the run began.
    began: std::time::Duration,
    /// Why what the store remembered of the run's endpoints was not recorded with it.
    endpoints_warning: Option<String>,
}

impl<'a> Started<'a> {
    fn early_failure(self) -> (EarlyFailure<'a>, Option<Arc<Recorder>>) {
        (
            EarlyFailure {
                deps: self.deps,
                run_id: self.run_id,
                session_id: self.session_id,
                question: self.question,
                started_at: self.started_at,
            },
            self.tape,
        )
    }

    fn duration_ms(&self) -> u64 {
        diag_core::clock::millis(self.deps.clock.elapsed().saturating_sub(self.began))
    }
}

/// How the graph's run came out, before anything is stored.
enum Ended {
    /// The graph ended with a non-blank answer and the trace written.
    Answered(String),
    /// The run failed (the end says how).
    Failed(RunEnd),
}

/// Runs one diagnosis, in phases: [`start_run`] (stored RUNNING), [`compile_graph`],
/// [`invoke_graph`], [`classify`] (how it ended), then [`finish_failed`] or
/// [`finish_success`]. `options.record` additionally collects every exchange for a run file.
///
/// The contract, as `tests/it/ask_integration.rs` checks it:
/// - `Ok` with SUCCESS: a non-blank answer from the Composer or a handled Fallback, the run
///   row finished SUCCESS and exactly one evaluation stored (an evaluation that cannot be
///   stored leaves the SUCCESS standing and adds a line to `warnings`).
/// - `Ok` with FAILED: an engine error, a cancellation ([`RunEnd::Interrupted`]), a blank
///   answer, a trace write that failed during the run, or a refused SUCCESS write; the row
///   is FAILED with the real partial trace, no answer and no evaluation.
/// - `Err`: nothing could be stored at all (a blank question, a read-only store, a taken
///   run id), or not even FAILED could be written at the end; the run then stays RUNNING
///   until the sweep of a later open marks it `interrupted`.
pub async fn ask(
    deps: &AskDeps,
    request: AskRequest,
    options: AskOptions<'_>,
) -> Result<AskOutcome, AskError> {
    let AskOptions {
        record,
        resume,
        cancel,
        progress,
        alerts,
    } = options;
    let resumed_from = resume.as_ref().map(|r| r.from.clone());
    let reuse = || resume.as_ref().map(|r| (r.reuse)());
    let started = start_run(deps, request, record, resumed_from)?;
    // The alert group is part of what the run is about: a run that cannot keep it ends
    // FAILED before any agent works, so no run investigates an alert it does not name.
    if let Some(alerts) = alerts {
        if let Err(e) = deps.store.record_run_alerts(&started.run_id, alerts) {
            let failure = format!("store: the run's alerts were not recorded: {e}");
            let (early, tape) = started.early_failure();
            let summary = RunSummary {
                reuse: reuse(),
                ..RunSummary::default()
            };
            return early.finish(failure, summary, tape);
        }
    }
    let graph = match compile_graph(&started) {
        Ok(g) => g,
        Err(e) => {
            let failure = format!("engine: topology does not compile: {e}");
            let (early, tape) = started.early_failure();
            let summary = RunSummary {
                reuse: reuse(),
                ..RunSummary::default()
            };
            return early.finish(failure, summary, tape);
        }
    };

    tracing::info!(run_id = %started.run_id, session_id = %started.session_id, "run started");
    // The deadline cancels the run as an interruption would, and says so: `deadline` is set
    // only when it fired. Ctrl-C still cancels through the caller's token.
    let deadline = deps.deadline.map(|limit| {
        let token = cancel.map_or_else(CancellationToken::new, CancellationToken::child_token);
        let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let timer = {
            let (token, fired) = (token.clone(), fired.clone());
            tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                fired.store(true, std::sync::atomic::Ordering::SeqCst);
                token.cancel();
            })
        };
        (token, fired, timer, limit)
    });
    let run_cancel = deadline.as_ref().map(|(token, ..)| token).or(cancel);
    let invoked = invoke_graph(&started, &graph, run_cancel, progress).await;
    let mut deadline_hit = None;
    if let Some((_, fired, timer, limit)) = deadline {
        timer.abort();
        if fired.load(std::sync::atomic::Ordering::SeqCst)
            && !cancel.is_some_and(CancellationToken::is_cancelled)
        {
            deadline_hit = Some(limit);
        }
    }
    let result = match invoked {
        Ok(result) => result,
        Err(what) => {
            let failure = format!(
                "engine: a node panicked ({}); this is a bug in diag",
                diag_core::text::one_line(&what, 200)
            );
            tracing::error!(run_id = %started.run_id, %failure, "run failed");
            started.recorder.flush();
            // The state went down with the panic: the summary keeps only the timing, and
            // no self-evaluation is made up.
            let summary = RunSummary {
                finished_at: Some(deps.clock.now()),
                duration_ms: Some(started.duration_ms()),
                reuse: reuse(),
                ..RunSummary::default()
            };
            let (early, tape) = started.early_failure();
            return early.finish(failure, summary, tape);
        }
    };
    let finished_at = deps.clock.now();
    let duration_ms = started.duration_ms();
    let recorded = started.tape.as_ref().map(|t| t.exchanges());
    let (state, mut ended) = classify(&started, result);
    if let (Some(limit), Ended::Failed(RunEnd::Interrupted)) = (deadline_hit, &ended) {
        ended = Ended::Failed(RunEnd::Failed {
            failure: deadline_failure(limit),
        });
    }

    // The prompt audit and the evaluation's counts are read back from the trace just
    // written; a read that fails leaves them empty, and the operator is told so.
    let mut warnings: Vec<String> = started.endpoints_warning.iter().cloned().collect();
    let steps = read_steps(deps, &started.run_id, &mut warnings);
    let mut summary = run_summary(&state, finished_at, duration_ms);
    summary.reuse = reuse();
    summary.self_evaluation = serde_json::to_value(serde_json::json!({
        "verifier_evaluation": verifier_evaluation(&state, &steps),
    }))
    .ok();

    let answer = match ended {
        Ended::Failed(end) => {
            return finish_failed(started, end, state, summary, recorded);
        }
        Ended::Answered(answer) => answer,
    };
    let evaluation = {
        let invocations = read_invocations(deps, &started.run_id, &mut warnings);
        evaluate(&state, &steps, &invocations, duration_ms)
    };
    finish_success(
        started,
        Success {
            answer,
            evaluation,
            state,
            summary,
            recorded,
            warnings,
        },
    )
}

/// Phase 1: checks the question, picks the ids and stores the run RUNNING.
fn start_run(
    deps: &AskDeps,
    request: AskRequest,
    record: bool,
    resumed_from: Option<String>,
) -> Result<Started<'_>, AskError> {
    let question = request.question.trim().to_string();
    if question.is_empty() {
        return Err(AskError::EmptyQuestion);
    }
    let run_id = request.run_id.unwrap_or_else(|| deps.ids.run_id());
    let session_id = request.session_id.unwrap_or_else(|| deps.ids.session_id());
    let catalog = deps.tools.catalog();
    let started_at = deps.clock.now();
    let began = deps.clock.elapsed();
    let recorder = deps.store.create_run(NewRun {
        run_id: run_id.clone(),
        session_id: session_id.clone(),
        question: question.clone(),
        started_at,
        tools: catalog.clone(),
        // A struct of numbers always serialises; were it ever not to, the run keeps no
        // limits and its export replays under the defaults, which `replay` reports.
        limits: deps
            .record_limits
            .then(|| serde_json::to_value(deps.limits).ok())
            .flatten(),
        resumed_from,
        replay_of: deps.replay_of.clone(),
    })?;
    // What the store remembered of the run's endpoints, recorded with it; a failure does not
    // fail the run (it is logged and shown as a warning).
    let endpoints_warning = if deps.endpoints.is_empty() {
        None
    } else {
        deps.store
            .record_started_endpoints(&run_id, &deps.endpoints)
            .err()
            .map(|e| {
                tracing::warn!(run_id = %run_id, error = %e, "the run's endpoints were not recorded");
                format!("what the store remembered of the model endpoints was not recorded with the run: {e}")
            })
    };
    let config = RunConfig::new(session_id.clone(), run_id.clone());
    let tape = record.then(|| Recorder::new(Arc::new(recorder.clone())));
    Ok(Started {
        deps,
        run_id,
        session_id,
        question,
        config,
        recorder,
        tape,
        catalog,
        started_at,
        began,
        endpoints_warning,
    })
}

/// Phase 2: wires the agents (trace first, then the tape) and compiles the graph.
fn compile_graph(
    started: &Started<'_>,
) -> Result<diag_diagnosis::topology::DiagnosisGraph, diag_core::graph::CompileError> {
    let deps = started.deps;
    let log: Arc<dyn InvocationLog> = match &started.tape {
        Some(t) => t.clone(),
        None => Arc::new(started.recorder.clone()),
    };
    let mut hooks: Vec<Arc<dyn RunHooks>> = vec![Arc::new(started.recorder.clone())];
    if let Some(t) = &started.tape {
        hooks.push(t.clone());
    }
    let agents = Arc::new(ModelAgents {
        models: deps.models.clone(),
        tools: deps.tools.clone(),
        log: log.clone(),
        hooks: Arc::new(TeeHooks(hooks)),
        clock: deps.clock.clone(),
        limits: deps.limits,
        run_plan_steps: deps.run_plan_steps,
    });
    topology::compile((deps.nodes)(NodeDeps {
        invoker: agents,
        log,
        catalog: Arc::new(started.catalog.clone()),
        composer: deps.composer,
    }))
}

/// What the graph returned: its final state, or the engine's failure with the partial one.
type GraphResult = Result<DiagnosisState, diag_core::graph::EngineFailure<DiagnosisState>>;

/// Phase 3: invokes the graph once. A panic inside a node or an adapter is a bug, but the
/// run must still end truthfully: FAILED with the events committed so far, never left
/// RUNNING until a later sweep blames an interruption. `Err` holds the panic's message.
async fn invoke_graph(
    started: &Started<'_>,
    graph: &diag_diagnosis::topology::DiagnosisGraph,
    cancel: Option<&CancellationToken>,
    progress: &mut dyn Observer<Status>,
) -> Result<GraphResult, String> {
    let mut observer = TeeObserver {
        store: started.recorder.clone(),
        progress,
    };
    let invoked = AssertUnwindSafe(graph.invoke(
        DiagnosisState::new(
            started.question.clone(),
            RunClock::for_question(started.started_at, &started.question),
        ),
        &started.config,
        InvokeOptions {
            step_limit: STEP_LIMIT,
            clock: started.deps.clock.as_ref(),
            cancel,
            observer: &mut observer,
        },
    ))
    .catch_unwind()
    .await;
    invoked.map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string())
    })
}

/// The failure of a run its deadline stopped: `deadline: the run was stopped after 600 s
/// ([limits] run_timeout_secs); diag trace shows how far it got`.
pub fn deadline_failure(limit: std::time::Duration) -> String {
    format!(
        "deadline: the run was stopped after {} s ([limits] run_timeout_secs); diag trace \
         shows how far it got",
        limit.as_secs()
    )
}

/// Phase 4: how the run ended. A state without a non-blank answer, a trace write that failed
/// during the run, an engine error and a cancellation all end FAILED.
fn classify(started: &Started<'_>, result: GraphResult) -> (DiagnosisState, Ended) {
    match result {
        Ok(state) => {
            let answer = state
                .final_answer
                .as_deref()
                .filter(|a| !a.trim().is_empty())
                .map(str::to_string);
            let ended = match answer {
                None => Ended::Failed(RunEnd::Failed {
                    failure: "blank answer: the graph ended without a safe answer".to_string(),
                }),
                Some(answer) => match started.recorder.take_error() {
                    Some(e) => Ended::Failed(RunEnd::Failed {
                        failure: format!("persistence: the trace could not be stored: {e}"),
                    }),
                    None => Ended::Answered(answer),
                },
            };
            (state, ended)
        }
        Err(f) => {
            let end = if matches!(f.error, EngineError::Cancelled { .. }) {
                RunEnd::Interrupted
            } else {
                RunEnd::Failed {
                    failure: format!("engine: {}", f.error),
                }
            };
            (f.state, Ended::Failed(end))
        }
    }
}

/// The run's model calls, read back from the trace; a read that fails adds a warning.
fn read_steps(deps: &AskDeps, run_id: &str, warnings: &mut Vec<String>) -> Vec<AgentStepRecord> {
    match deps.store.agent_steps(run_id) {
        Ok(s) => s.into_iter().map(|s| s.step).collect(),
        Err(e) => {
            warnings.push(format!(
                "the model calls of run {run_id} could not be read back; its prompt audit \
                 and evaluation leave them out: {e}"
            ));
            Vec::new()
        }
    }
}

/// The run's tool calls, read back from the trace; a read that fails adds a warning.
fn read_invocations(
    deps: &AskDeps,
    run_id: &str,
    warnings: &mut Vec<String>,
) -> Vec<ToolInvocation> {
    match deps.store.invocations(run_id) {
        Ok(v) => v,
        Err(e) => {
            warnings.push(format!(
                "the tool calls of run {run_id} could not be read back; its evaluation \
                 leaves them out: {e}"
            ));
            Vec::new()
        }
    }
}

/// Phase 5 (failed): a failed run keeps its real partial trace and gets no evaluation.
fn finish_failed(
    started: Started<'_>,
    end: RunEnd,
    state: DiagnosisState,
    mut summary: RunSummary,
    recorded: Option<Vec<diag_runfile::Exchange>>,
) -> Result<AskOutcome, AskError> {
    let failure = match &end {
        RunEnd::Failed { failure } => failure.as_str(),
        RunEnd::Interrupted | RunEnd::Success { .. } => INTERRUPTED,
    };
    summary.answer = None;
    started
        .deps
        .store
        .finish_failed(&started.run_id, failure, summary)?;
    Ok(AskOutcome::failed(
        started.run_id,
        started.session_id,
        end,
        state,
        recorded,
    ))
}

/// What a run that answered brings to its SUCCESS write.
struct Success {
    answer: String,
    evaluation: Evaluation,
    state: DiagnosisState,
    summary: RunSummary,
    recorded: Option<Vec<diag_runfile::Exchange>>,
    warnings: Vec<String>,
}

/// Phase 5 (answered): one transaction writes the events still held, SUCCESS with the
/// answer, and the evaluation under a savepoint (a refused evaluation leaves the SUCCESS
/// standing, with a warning). A refused SUCCESS ends the run FAILED.
fn finish_success(started: Started<'_>, success: Success) -> Result<AskOutcome, AskError> {
    let Success {
        answer,
        evaluation,
        state,
        summary,
        recorded,
        mut warnings,
    } = success;
    let deps = started.deps;
    let run_id = started.run_id;
    let mut partial = summary.clone();
    partial.answer = None;
    let finished = match serde_json::to_value(&evaluation) {
        Ok(metrics) => deps
            .store
            .finish_success_evaluated(&run_id, summary, &metrics)
            .map(|report| report.evaluation_error.map(|e| e.to_string())),
        Err(e) => deps
            .store
            .finish_success(&run_id, summary)
            .map(|()| Some(e.to_string()))
            .map_err(FinishError::Run),
    };
    match finished {
        Ok(None) => {}
        Ok(Some(e)) => warnings.push(format!(
            "the evaluation of run {run_id} could not be stored: {e}"
        )),
        Err(e) => {
            let failure = match e {
                FinishError::Trace(e) => {
                    format!("persistence: the trace could not be stored: {e}")
                }
                FinishError::Run(e) => format!("persistence: the result could not be stored: {e}"),
            };
            // Best effort: the run must not stay RUNNING, and must not claim success. It
            // keeps what any FAILED run keeps (duration, self-evaluation) unless even that
            // cannot be written, in which case the bare failure is tried.
            if deps
                .store
                .finish_failed(&run_id, &failure, partial)
                .is_err()
            {
                let _ = deps
                    .store
                    .finish_failed(&run_id, &failure, RunSummary::default());
            }
            return Ok(AskOutcome::failed(
                run_id,
                started.session_id,
                RunEnd::Failed { failure },
                state,
                recorded,
            ));
        }
    }
    Ok(AskOutcome {
        run_id,
        session_id: started.session_id,
        end: RunEnd::Success {
            answer,
            evaluation: Box::new(evaluation),
        },
        state,
        recorded,
        warnings,
    })
}
