//! Offline replay of run files: the recorded model responses and tool outputs are served in
//! order through the real agent runtime and the real nodes, with the clock pinned to the
//! file's `started_at`; the result is compared with the file's `expected`.

use std::collections::HashMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::{ask, production_nodes, AskDeps, AskError, AskOptions, AskOutcome, AskRequest};
use diag_core::agent::runtime::AgentModels;
use diag_core::agent::AgentRole;
use diag_core::clock::FixedClock;
use diag_core::graph::NoopObserver;
use diag_core::ids::IdSource;
use diag_core::limits::Limits;
use diag_core::model::ChatModel;
use diag_core::store::RunStatus;
use diag_core::store::Store;
/// What a replay compares, diag-runfile's: a run file's `expected` against the actual result.
pub use diag_runfile::{compare, Mismatch};
use diag_runfile::{Divergence, Exchange, Expected, RecordedModel, RecordedTools, RunFile, Tape};

/// The outcome of replaying one run file.
#[derive(Debug)]
pub struct Replayed {
    pub outcome: AskOutcome,
    pub actual: Expected,
    /// The first point where the run left the recording, if it did.
    pub divergence: Option<Divergence>,
}

/// What a finished run shows, in the shape of a run file's `expected`: its answer as replay
/// compares it, the run's own id in the Fallback's `diag trace` step as `<run_id>`
/// (diag_diagnosis::run_id_as_placeholder), since every replay is a run with a new id.
pub fn actual_of(outcome: &AskOutcome) -> Expected {
    Expected {
        status: outcome.status().as_str().to_string(),
        path: outcome
            .state
            .path()
            .into_iter()
            .map(str::to_string)
            .collect(),
        effective_verdict: outcome.state.round.effective_verdict.filter(|_| {
            outcome.state.round.verifier_status == Some(diag_diagnosis::AgentStatus::Completed)
        }),
        degraded: outcome.state.degraded,
        answer: outcome
            .answer()
            .map(|a| diag_diagnosis::run_id_as_placeholder(a, &outcome.run_id)),
    }
}

/// The dependencies that serve a run file: recorded models for the four agents, recorded
/// tools, the limits the file records (today's defaults when it records none), the plan's
/// steps run when the recording has them, and the clock pinned to `started_at`. The tape
/// reports any divergence.
pub fn replay_deps(run: &RunFile, store: &Store, ids: Arc<dyn IdSource>) -> (AskDeps, Arc<Tape>) {
    let tape = Tape::new(run.exchanges.clone(), run.tools.clone());
    let mut overrides: HashMap<AgentRole, Arc<dyn ChatModel>> = HashMap::new();
    for role in [
        AgentRole::Planner,
        AgentRole::Executor,
        AgentRole::Verifier,
        AgentRole::Composer,
    ] {
        overrides.insert(
            role,
            Arc::new(RecordedModel {
                role,
                tape: tape.clone(),
            }),
        );
    }
    let default = overrides[&AgentRole::Planner].clone();
    let deps = AskDeps {
        nodes: production_nodes(),
        models: AgentModels { default, overrides },
        tools: Arc::new(RecordedTools { tape: tape.clone() }),
        limits: run.limits(),
        record_limits: run.limits.is_some(),
        run_plan_steps: tape.has_plan_steps(),
        composer: tape.composer_contract(),
        deadline: None,
        clock: Arc::new(FixedClock(run.started_at)),
        ids,
        store: store.clone(),
        endpoints: Vec::new(),
        replay_of: Some(run.run_id.clone()),
    };
    (deps, tape)
}

/// Replays one run file into `store` (a new run id from `ids`, the file's session).
pub async fn replay(
    run: &RunFile,
    store: &Store,
    ids: Arc<dyn IdSource>,
) -> Result<Replayed, AskError> {
    replay_until(run, store, ids, None).await
}

/// [`replay`], ended as an interrupted run (stored FAILED `interrupted`) when `cancel` fires.
pub async fn replay_until(
    run: &RunFile,
    store: &Store,
    ids: Arc<dyn IdSource>,
    cancel: Option<&CancellationToken>,
) -> Result<Replayed, AskError> {
    let (deps, tape) = replay_deps(run, store, ids);
    let outcome = ask(
        &deps,
        AskRequest {
            question: run.question.clone(),
            session_id: Some(run.session_id.clone()),
            run_id: None,
        },
        AskOptions::new(&mut NoopObserver).cancel(cancel),
    )
    .await?;
    let actual = actual_of(&outcome);
    let divergence = divergence_of(run, &tape, store, &outcome.run_id);
    Ok(Replayed {
        outcome,
        actual,
        divergence,
    })
}

/// Where the replay of `run`, stored as `run_id`, left its recording: the tape's first
/// divergence, else the first model call made in another round, attempt or turn.
pub fn divergence_of(
    run: &RunFile,
    tape: &Tape,
    store: &Store,
    run_id: &str,
) -> Option<Divergence> {
    tape.divergence().or_else(|| {
        let model = metadata_divergence(run, store, run_id);
        let tool = invocation_divergence(run, store, run_id);
        match (model, tool) {
            (Some(m), Some(t)) => Some(if t.exchange < m.exchange { t } else { m }),
            (m, t) => m.or(t),
        }
    })
}

/// The first tool call the replay gave another invocation id than the recording, read back
/// from the stored run. Invocation ids are what claims bind to (`source_invocation_id`), so a
/// recording whose ids the replay does not reproduce is not the run it claims to be.
fn invocation_divergence(run: &RunFile, store: &Store, run_id: &str) -> Option<Divergence> {
    let stored = match store.invocations(run_id) {
        Ok(stored) => stored,
        Err(e) => {
            return Some(Divergence {
                exchange: 0,
                message: format!("the replayed tool calls cannot be read back: {e}"),
            })
        }
    };
    let recorded = run
        .exchanges
        .iter()
        .enumerate()
        .filter_map(|(i, x)| match x {
            Exchange::Tool(t) => Some((i, t)),
            Exchange::Model(_) => None,
        });
    for ((i, want), got) in recorded.zip(stored.iter()) {
        if want.invocation_id != got.invocation_id {
            return Some(Divergence {
                exchange: i,
                message: format!(
                    "tool call {} recorded as invocation {:?}, replayed as {:?}",
                    want.tool_name,
                    diag_core::text::bounded(&want.invocation_id, 80),
                    got.invocation_id
                ),
            });
        }
    }
    None
}

/// The first model call the replay made in another round, attempt or turn than the
/// recording, read back from the stored run. The tape already matched each call's agent and
/// (when recorded) request hash as it served it; a technical retry sends the same bytes as the
/// first attempt, so only this check tells the two apart.
fn metadata_divergence(run: &RunFile, store: &Store, run_id: &str) -> Option<Divergence> {
    let stored = match store.exchanges(run_id) {
        Ok(stored) => stored,
        Err(e) => {
            return Some(Divergence {
                exchange: 0,
                message: format!("the replayed model calls cannot be read back: {e}"),
            })
        }
    };
    let recorded = run
        .exchanges
        .iter()
        .enumerate()
        .filter_map(|(i, x)| match x {
            Exchange::Model(m) => Some((i, m)),
            Exchange::Tool(_) => None,
        });
    for ((i, want), got) in recorded.zip(stored.iter().map(|s| &s.exchange)) {
        let recorded_at = (want.agent, want.round, want.attempt, want.turn);
        let replayed_at = (got.agent, got.round, got.attempt, got.turn);
        if recorded_at != replayed_at {
            return Some(Divergence {
                exchange: i,
                message: format!(
                    "model call for {} recorded in round {} attempt {} turn {}, replayed for {} \
                     in round {} attempt {} turn {}",
                    want.agent,
                    want.round,
                    want.attempt,
                    want.turn,
                    got.agent,
                    got.round,
                    got.attempt,
                    got.turn
                ),
            });
        }
    }
    None
}

/// The run file a finished live run produces: its exchanges and its result as `expected`.
/// `limits` are the limits the run ran under, written into the file so a replay runs under
/// them too.
pub fn run_file_of(
    outcome: &AskOutcome,
    question: &str,
    started_at: diag_core::clock::Timestamp,
    limits: Limits,
    tools: Vec<diag_core::tools::ToolSpec>,
) -> RunFile {
    RunFile {
        format: diag_runfile::FORMAT.to_string(),
        question: question.to_string(),
        session_id: outcome.session_id.clone(),
        run_id: outcome.run_id.clone(),
        started_at,
        limits: Some(limits),
        tools,
        exchanges: outcome.recorded.clone().unwrap_or_default(),
        expected: Some(actual_of(outcome)),
    }
}

/// Whether a status string names a successful run.
pub fn is_success(status: &str) -> bool {
    status == RunStatus::Success.as_str()
}
