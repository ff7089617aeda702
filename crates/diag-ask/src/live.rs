//! A live run's pieces that `diag ask`, `diag eval` and `diag mcp` share: the dependencies
//! over the configured models and tools, the session id rule, the verdict an answer may show
//! and the first failed model call of a stored run.

use std::sync::Arc;

use diag_core::clock::Clock;
use diag_core::protocol::Verdict;
use diag_core::store::Store;
use diag_core::text::one_line;

use crate::setup::{LiveEnvironment, RandomIds};
use crate::{production_nodes, AskDeps, AskOutcome};

/// A session id names runs to group them and to filter `diag runs --session`: a blank one, or
/// one with control characters, would group nothing a user could type again. The error
/// starts with the quoted id.
pub fn check_session(session: &str) -> Result<(), String> {
    if session.trim().is_empty() || session.chars().any(char::is_control) {
        return Err(format!(
            "{:?}: a session id must be non-blank printable text",
            one_line(session, 80)
        ));
    }
    Ok(())
}

/// The dependencies of a live run: the production nodes over the configured models and
/// tools, with the system's ids. `diag ask`, `diag eval` and `diag mcp` build their runs with
/// this one function.
pub fn live_deps(env: &LiveEnvironment, clock: Arc<dyn Clock>, store: &Store) -> AskDeps {
    AskDeps {
        nodes: production_nodes(),
        models: env.models.clone(),
        tools: env.tools.clone(),
        limits: env.limits,
        record_limits: true,
        run_plan_steps: env.run_plan_steps,
        composer: diag_core::protocol::ComposerContract::CURRENT,
        deadline: Some(env.limits.run_timeout()),
        clock,
        ids: Arc::new(RandomIds),
        store: store.clone(),
        endpoints: env.endpoints_used.clone(),
        replay_of: None,
    }
}

/// The effective verdict an answer may show: only one the Verifier completed in the final
/// round (a Fallback before it invents none).
pub fn shown_verdict(outcome: &AskOutcome) -> Option<Verdict> {
    outcome.state.round.effective_verdict.filter(|_| {
        outcome.state.round.verifier_status == Some(diag_diagnosis::AgentStatus::Completed)
    })
}

/// The one stderr line `--quiet` prints beside an answer that is degraded or whose effective
/// verdict is not PASS; `None` for a verified PASS.
pub fn quiet_verdict_line(outcome: &AskOutcome, verdict: Option<Verdict>) -> Option<String> {
    let degraded = outcome.state.degraded;
    if !degraded && verdict == Some(Verdict::Pass) {
        return None;
    }
    let mut line = format!(
        "diag: verdict {}",
        verdict.map_or("none (not verified)", |v| v.as_str())
    );
    if degraded {
        let kind = outcome
            .state
            .fallback_kind
            .map_or("fallback", |k| k.as_str());
        line.push_str(&format!(", degraded ({kind} fallback answered)"));
    }
    line.push_str(&format!("; diag trace {} shows why", outcome.run_id));
    Some(line)
}

/// How a run's model calls went, from the store: how many were made, how many answered, and
/// the first that failed, on one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCalls {
    pub made: usize,
    pub answered: usize,
    /// `agent (class) at URL, model M: message` (the endpoint as the run recorded it: its URL
    /// without credentials, query or fragment), or `agent (class), model M: message` when the
    /// run's endpoints do not tell which URL serves that model.
    pub first_error: Option<String>,
}

impl ModelCalls {
    /// Whether the run asked its models and none of them ever answered: an endpoint that was
    /// never reached, or refused every request. Whatever answered the run did not diagnose.
    pub fn none_answered(&self) -> bool {
        self.made > 0 && self.answered == 0
    }
}

/// The model calls of a stored run ([`ModelCalls`]); nothing made when the store cannot say.
pub fn model_calls(store: &Store, run_id: &str) -> ModelCalls {
    let exchanges = store.exchanges(run_id).unwrap_or_default();
    let answered = exchanges
        .iter()
        .filter(|x| x.exchange.outcome.is_ok())
        .count();
    let first_error = exchanges.iter().find_map(|x| {
        let Err(e) = &x.exchange.outcome else {
            return None;
        };
        let model = store
            .agent_steps(run_id)
            .ok()
            .and_then(|steps| steps.into_iter().find(|s| s.seq == x.seq))
            .map(|s| s.step.model);
        let at = model.map_or_else(String::new, |m| {
            let endpoints = store.run_endpoints(run_id).unwrap_or_default();
            let urls: Vec<&str> = endpoints
                .iter()
                .filter(|l| l.endpoint.model == m)
                .map(|l| l.endpoint.base_url.as_str())
                .collect();
            match urls.as_slice() {
                [url] => format!(" at {}, model {}", one_line(url, 200), one_line(&m, 80)),
                _ => format!(", model {}", one_line(&m, 80)),
            }
        });
        Some(format!(
            "{} ({}){at}: {}",
            x.exchange.agent,
            e.class,
            one_line(&e.message, 160)
        ))
    });
    ModelCalls {
        made: exchanges.len(),
        answered,
        first_error,
    }
}

/// The first failed model call of a run, on one line ([`ModelCalls::first_error`]).
pub fn first_model_error(store: &Store, run_id: &str) -> Option<String> {
    model_calls(store, run_id).first_error
}
