//! The ask service (SPEC §3): one question → one stored run. It creates the run, invokes the
//! compiled graph once with the run's `RunConfig`, writes the trace as it happens, maps the
//! final state to a truthful run record (SUCCESS with an answer, or FAILED), and evaluates
//! successful runs. It never talks to the user; the CLI renders what it returns.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::agent::runtime::{
    AgentLimits, AgentModels, AgentStepRecord, ModelAgents, ModelExchange, RunHooks, ToolRunner,
};
use crate::clock::Clock;
use crate::diagnosis::evaluation::{evaluate, verifier_evaluation, Evaluation};
use crate::diagnosis::nodes::{real_nodes, NodeDeps};
use crate::diagnosis::{topology, DiagnosisNodes, DiagnosisState, Status, STEP_LIMIT};
use crate::graph::{EngineError, Event, InvokeOptions, NodeKind, Observer, RunConfig};
use crate::ids::IdSource;
use crate::protocol::ToolInvocation;
use crate::runfile::Recorder;
use crate::store::{FinishError, NewRun, RunRecorder, RunStatus, RunSummary, Store, StoreError};
use crate::tools::InvocationLog;

/// Builds the eight nodes of a run from its dependencies; [`real_nodes`] in production,
/// scripted nodes in tests of the run lifecycle.
pub type NodeFactory = Arc<dyn Fn(NodeDeps) -> DiagnosisNodes + Send + Sync>;

/// The production node factory.
pub fn production_nodes() -> NodeFactory {
    Arc::new(real_nodes)
}

/// Everything a run needs from outside the graph.
pub struct AskDeps {
    pub nodes: NodeFactory,
    pub models: AgentModels,
    pub tools: Arc<dyn ToolRunner>,
    pub limits: AgentLimits,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdSource>,
    pub store: Store,
}

/// One question.
pub struct AskRequest {
    pub question: String,
    /// Continue a session; a new one is created when absent.
    pub session_id: Option<String>,
    /// Fixes the run id (replay of a run file uses a fresh one; tests may pin it).
    pub run_id: Option<String>,
}

/// What a run came to.
#[derive(Debug)]
pub struct AskOutcome {
    pub run_id: String,
    pub session_id: String,
    pub status: RunStatus,
    pub answer: Option<String>,
    /// Why the run is FAILED; `None` for SUCCESS.
    pub failure: Option<String>,
    /// The final (or, for an engine error, partial) graph state.
    pub state: DiagnosisState,
    pub evaluation: Option<Evaluation>,
    /// The run's exchanges in order, when recording was asked for.
    pub recorded: Option<Vec<crate::runfile::Exchange>>,
    pub interrupted: bool,
    /// Problems that did not change the run's status (an evaluation that could not be
    /// stored), one line each, for the caller to show.
    pub warnings: Vec<String>,
}

impl AskOutcome {
    /// A FAILED run's outcome: no answer, no evaluation, no warnings.
    fn failed(
        run_id: String,
        session_id: String,
        failure: String,
        state: DiagnosisState,
        recorded: Option<Vec<crate::runfile::Exchange>>,
        interrupted: bool,
    ) -> Self {
        AskOutcome {
            run_id,
            session_id,
            status: RunStatus::Failed,
            answer: None,
            failure: Some(failure),
            state,
            evaluation: None,
            recorded,
            interrupted,
            warnings: Vec::new(),
        }
    }
}

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
    store: RunRecorder,
    progress: &'a mut dyn Observer<Status>,
}

impl Observer<Status> for TeeObserver<'_> {
    fn node_started(&mut self, node: &str, kind: NodeKind, attempt: u32, round: u32) {
        Observer::<Status>::node_started(&mut self.store, node, kind, attempt, round);
        self.progress.node_started(node, kind, attempt, round);
    }
    fn event(&mut self, event: &Event<Status>) {
        Observer::<Status>::event(&mut self.store, event);
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
            failure,
            DiagnosisState::new(self.question),
            tape.map(|t| t.exchanges()),
            false,
        ))
    }
}

/// Runs one diagnosis. `record` additionally collects every exchange for a run file.
///
/// The contract, as `tests/ask_integration.rs` checks it:
/// - `Ok` with SUCCESS: a non-blank answer from the Composer or a handled Fallback, the run
///   row finished SUCCESS and exactly one evaluation stored (an evaluation that cannot be
///   stored leaves the SUCCESS standing and adds a line to `warnings`).
/// - `Ok` with FAILED: an engine error, a cancellation (`interrupted`), a blank answer, a
///   trace write that failed during the run, or a refused SUCCESS write; the row is FAILED
///   with the real partial trace, no answer and no evaluation.
/// - `Err`: nothing could be stored at all (a blank question, a read-only store, a taken
///   run id), or not even FAILED could be written at the end; the run then stays RUNNING
///   until the sweep of a later open marks it `interrupted`.
pub async fn ask(
    deps: &AskDeps,
    request: AskRequest,
    record: bool,
    cancel: Option<&CancellationToken>,
    progress: &mut dyn Observer<Status>,
) -> Result<AskOutcome, AskError> {
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
    })?;
    let config = RunConfig::new(session_id.clone(), run_id.clone());

    let tape = record.then(|| Recorder::new(Arc::new(recorder.clone())));
    let log: Arc<dyn InvocationLog> = match &tape {
        Some(t) => t.clone(),
        None => Arc::new(recorder.clone()),
    };
    let mut hooks: Vec<Arc<dyn RunHooks>> = vec![Arc::new(recorder.clone())];
    if let Some(t) = &tape {
        hooks.push(t.clone());
    }
    let agents = Arc::new(ModelAgents {
        models: deps.models.clone(),
        tools: deps.tools.clone(),
        log: log.clone(),
        hooks: Arc::new(TeeHooks(hooks)),
        clock: deps.clock.clone(),
        limits: deps.limits,
    });
    let graph = topology::compile((deps.nodes)(NodeDeps {
        invoker: agents,
        log,
        catalog: Arc::new(catalog),
    }));
    let graph = match graph {
        Ok(g) => g,
        Err(e) => {
            let failure = format!("engine: topology does not compile: {e}");
            let early = EarlyFailure {
                deps,
                run_id,
                session_id,
                question,
            };
            return early.finish(failure, RunSummary::default(), tape);
        }
    };

    tracing::info!(run_id = %run_id, session_id = %session_id, "run started");
    let mut observer = TeeObserver {
        store: recorder.clone(),
        progress,
    };
    // A panic inside a node or an adapter is a bug, but the run must still end truthfully:
    // FAILED with the events committed so far, never left RUNNING until a later sweep
    // blames an interruption.
    let invoked = AssertUnwindSafe(graph.invoke(
        DiagnosisState::new(question.clone()),
        &config,
        InvokeOptions {
            step_limit: STEP_LIMIT,
            clock: deps.clock.as_ref(),
            cancel,
            observer: &mut observer,
        },
    ))
    .catch_unwind()
    .await;
    let result = match invoked {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_string());
            let failure = format!(
                "engine: a node panicked ({}); this is a bug in diag",
                crate::render::one_line(&what, 200)
            );
            tracing::error!(run_id = %run_id, %failure, "run failed");
            recorder.flush();
            // The state went down with the panic: the summary keeps only the timing, and
            // no self-evaluation is made up.
            let summary = RunSummary {
                finished_at: Some(deps.clock.now()),
                duration_ms: Some(
                    u64::try_from(deps.clock.elapsed().saturating_sub(began).as_millis())
                        .unwrap_or(u64::MAX),
                ),
                ..RunSummary::default()
            };
            let early = EarlyFailure {
                deps,
                run_id,
                session_id,
                question,
            };
            return early.finish(failure, summary, tape);
        }
    };
    let finished_at = deps.clock.now();
    let duration_ms =
        u64::try_from(deps.clock.elapsed().saturating_sub(began).as_millis()).unwrap_or(u64::MAX);
    let recorded = tape.map(|t| t.exchanges());

    let (state, failure, interrupted) = match result {
        Ok(state) => {
            let blank = state
                .final_answer
                .as_deref()
                .is_none_or(|a| a.trim().is_empty());
            let failure = if blank {
                Some("blank answer: the graph ended without a safe answer".to_string())
            } else {
                recorder
                    .take_error()
                    .map(|e| format!("persistence: the trace could not be stored: {e}"))
            };
            (state, failure, false)
        }
        Err(f) => {
            let interrupted = matches!(f.error, EngineError::Cancelled { .. });
            let failure = if interrupted {
                "interrupted".to_string()
            } else {
                format!("engine: {}", f.error)
            };
            (f.state, Some(failure), interrupted)
        }
    };

    // The prompt audit and the evaluation's counts are read back from the trace just
    // written; a read that fails leaves them empty, and the operator is told so.
    let mut warnings = Vec::new();
    let steps: Vec<AgentStepRecord> = match deps.store.agent_steps(&run_id) {
        Ok(s) => s.into_iter().map(|s| s.step).collect(),
        Err(e) => {
            warnings.push(format!(
                "the model calls of run {run_id} could not be read back; its prompt audit \
                 and evaluation leave them out: {e}"
            ));
            Vec::new()
        }
    };
    let mut summary = RunSummary::from_state(&state, finished_at, duration_ms);
    summary.self_evaluation = serde_json::to_value(serde_json::json!({
        "verifier_evaluation": verifier_evaluation(&state, &steps),
    }))
    .ok();

    if let Some(failure) = failure {
        // A failed run keeps its real partial trace and gets no evaluation.
        summary.answer = None;
        deps.store.finish_failed(&run_id, &failure, summary)?;
        return Ok(AskOutcome::failed(
            run_id,
            session_id,
            failure,
            state,
            recorded,
            interrupted,
        ));
    }

    let invocations: Vec<ToolInvocation> = match deps.store.invocations(&run_id) {
        Ok(v) => v,
        Err(e) => {
            warnings.push(format!(
                "the tool calls of run {run_id} could not be read back; its evaluation \
                 leaves them out: {e}"
            ));
            Vec::new()
        }
    };
    let evaluation = evaluate(&state, &steps, &invocations, duration_ms);
    let mut partial = summary.clone();
    partial.answer = None;
    // One transaction: the events still held, SUCCESS with the answer, and the evaluation
    // under a savepoint (a refused evaluation leaves the SUCCESS standing).
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
                session_id,
                failure,
                state,
                recorded,
                interrupted,
            ));
        }
    }
    Ok(AskOutcome {
        run_id,
        session_id,
        status: RunStatus::Success,
        answer: state.final_answer.clone(),
        failure: None,
        state,
        evaluation: Some(evaluation),
        recorded,
        interrupted,
        warnings,
    })
}
