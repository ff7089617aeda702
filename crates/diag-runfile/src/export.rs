//! A stored run as a run file (`diag export`, `ask --record` of a resumed run): the run's
//! model exchanges and tool invocations, which the store keeps in two tables, back in the
//! order they happened.

use diag_core::agent::content_calls::answer_tool_calls;
use diag_core::agent::runtime::PLAN_STEP_AGENT;
use diag_core::agent::AgentRole;
use diag_core::limits::Limits;
use diag_core::protocol::ToolInvocation;
use diag_core::store::{RunStatus, Store, StoreError};
use diag_diagnosis::run_id_as_placeholder;

use crate::{
    Exchange, Expected, ModelRecord, RecordedError, RecordedResponse, RunFile, ToolRecord, FORMAT,
};

/// Why a stored run cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No run has that id.
    #[error("unknown run `{0}`")]
    UnknownRun(String),
    #[error("run {0} is still RUNNING; export it when it has finished")]
    Running(String),
    #[error("run {run_id}: the stored limits are not valid: {reason}")]
    Limits { run_id: String, reason: String },
}

/// Builds the run file of a stored run. Model exchanges and tool invocations live in two
/// tables; each Executor turn that requested k tool calls (its own, or written in its content)
/// is followed by exactly k recorded invocations (blocked ones included), and the plan's
/// steps (agent `planner`) come before the Executor turn they were run for, which restores
/// the order they happened in.
pub fn from_store(store: &Store, run_id: &str) -> Result<RunFile, ExportError> {
    let run = store
        .get_run(run_id)?
        .ok_or_else(|| ExportError::UnknownRun(run_id.to_string()))?;
    if run.status == RunStatus::Running {
        return Err(ExportError::Running(run.run_id));
    }
    let exchanges = store.exchanges(run_id)?;
    let mut invocations = store.invocations(run_id)?.into_iter().peekable();
    let mut out = Vec::new();
    for x in exchanges {
        let m = x.exchange;
        // The plan's steps, run before the Executor's first turn of their round, come right
        // before that turn.
        if m.agent == AgentRole::Executor && m.turn == 1 {
            while let Some(inv) =
                invocations.next_if(|i| i.agent == PLAN_STEP_AGENT && i.round == m.round)
            {
                out.push(tool_record(inv));
            }
        }
        let (response, error, calls) = match &m.outcome {
            Ok(r) => (
                Some(RecordedResponse::from_response(r)),
                None,
                answer_tool_calls(&m.request.tools, r).len(),
            ),
            Err(e) => (None, Some(RecordedError::from_error(e)), 0),
        };
        out.push(Exchange::Model(ModelRecord {
            agent: m.agent,
            round: m.round,
            attempt: m.attempt,
            turn: m.turn,
            request_sha256: diag_core::hash::request_sha256(&m.request).ok(),
            prompt_version: crate::prompt_version_of(m.agent, &m.request),
            max_tokens: m.request.max_tokens,
            fit: m.request.fit,
            evidence_turn: m.request.evidence_turn,
            response,
            error,
        }));
        for inv in invocations.by_ref().take(calls) {
            out.push(tool_record(inv));
        }
    }
    // Plan steps whose Executor turn never came (their result could not be recorded).
    out.extend(
        invocations
            .filter(|i| i.agent == PLAN_STEP_AGENT)
            .map(tool_record),
    );
    Ok(RunFile {
        format: FORMAT.to_string(),
        question: run.question.clone(),
        session_id: run.session_id.clone(),
        run_id: run.run_id.clone(),
        started_at: run.started_at,
        // As the run was created with them; a run stored before the store kept limits, or a
        // replay of a file that records none, exports none and replays under the defaults.
        limits: run
            .limits
            .clone()
            .map(serde_json::from_value::<Limits>)
            .transpose()
            .map_err(|e| ExportError::Limits {
                run_id: run.run_id.clone(),
                reason: e.to_string(),
            })?,
        tools: run.tools.clone(),
        exchanges: out,
        expected: Some(Expected {
            status: run.status.as_str().to_string(),
            path: run.path.clone(),
            effective_verdict: run.effective_verdict,
            degraded: run.degraded,
            // What a replay must show: a replay is a new run, so the Fallback's step naming
            // this run's id expects the replay's own.
            answer: run
                .answer
                .as_deref()
                .map(|a| run_id_as_placeholder(a, &run.run_id)),
        }),
    })
}

/// A stored invocation as a run file's tool exchange.
fn tool_record(inv: ToolInvocation) -> Exchange {
    Exchange::Tool(ToolRecord {
        plan_step: inv.agent == PLAN_STEP_AGENT,
        invocation_id: inv.invocation_id,
        tool_name: inv.tool_name,
        arguments: inv.arguments,
        output: inv.output,
        status: inv.status,
    })
}
