//! Running a compiled graph: one node at a time, one terminal event per attempt, a hard step
//! limit, and cancellation between and during nodes.

use thiserror::Error;
use tokio_util::sync::CancellationToken;

use super::{CompiledGraph, Event, GraphState, NodeKind, Outcome, RunConfig};
use crate::clock::Clock;

/// Why an invocation stopped without reaching the end.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EngineError {
    #[error("step limit of {limit} node executions exceeded before `{next}`")]
    StepLimit { limit: u32, next: String },
    #[error("cancelled during `{node}`")]
    Cancelled { node: String },
    #[error("node `{node}` returned outcome {outcome}, which it does not declare")]
    UndeclaredOutcome { node: String, outcome: String },
}

/// An engine error together with the state as it was when the run stopped, so the caller
/// can keep the real partial trace.
#[derive(Debug)]
pub struct EngineFailure<S> {
    pub error: EngineError,
    pub state: S,
}

/// Watches a run as it happens (progress display, incremental persistence).
pub trait Observer<O>: Send {
    /// A node attempt is about to start. `kind` tells an observer whether the attempt may
    /// wait on the outside world (an agent calls a model) or is plain code over state.
    fn node_started(&mut self, _node: &str, _kind: NodeKind, _attempt: u32, _round: u32) {}
    /// A node attempt has ended with this terminal event.
    fn event(&mut self, _event: &Event<O>) {}
}

/// An observer that watches nothing.
pub struct NoopObserver;
impl<O> Observer<O> for NoopObserver {}

/// How one invocation runs.
pub struct InvokeOptions<'a, O> {
    /// The most node executions a run may take; one more is an engine error.
    pub step_limit: u32,
    pub clock: &'a dyn Clock,
    pub cancel: Option<&'a CancellationToken>,
    pub observer: &'a mut dyn Observer<O>,
}

impl<S, O> CompiledGraph<S, O>
where
    S: GraphState<O>,
    O: Outcome,
{
    /// Runs the graph from its start node until a branch leads to the end.
    pub async fn invoke(
        &self,
        mut state: S,
        config: &RunConfig,
        opts: InvokeOptions<'_, O>,
    ) -> Result<S, EngineFailure<S>> {
        let mut current = self.start;
        let mut steps: u32 = 0;
        let mut previous: Option<(usize, u32)> = None;
        let mut attempt: u32 = 0;
        loop {
            let node = &self.nodes[current];
            if steps >= opts.step_limit {
                return Err(EngineFailure {
                    error: EngineError::StepLimit {
                        limit: opts.step_limit,
                        next: node.name.to_string(),
                    },
                    state,
                });
            }
            if opts.cancel.is_some_and(|c| c.is_cancelled()) {
                return Err(EngineFailure {
                    error: EngineError::Cancelled {
                        node: node.name.to_string(),
                    },
                    state,
                });
            }
            let round = state.round();
            attempt = match previous {
                Some((p, r)) if p == current && r == round => attempt + 1,
                _ => 1,
            };
            previous = Some((current, round));
            steps += 1;

            opts.observer
                .node_started(node.name, node.kind, attempt, round);
            let started_at = opts.clock.now();
            let began = opts.clock.elapsed();
            let step = {
                let fut = node.node.run(&mut state, config);
                match opts.cancel {
                    Some(token) => tokio::select! {
                        biased;
                        _ = token.cancelled() => None,
                        step = fut => Some(step),
                    },
                    None => Some(fut.await),
                }
            };
            let Some(step) = step else {
                return Err(EngineFailure {
                    error: EngineError::Cancelled {
                        node: node.name.to_string(),
                    },
                    state,
                });
            };
            let duration = opts.clock.elapsed().saturating_sub(began);
            let event = Event {
                seq: steps,
                node: node.name.to_string(),
                attempt,
                round,
                status: step.outcome,
                started_at,
                duration_ms: crate::clock::millis(duration),
                detail: step.detail,
            };
            tracing::debug!(
                node = %event.node,
                attempt,
                round,
                status = %event.status,
                duration_ms = event.duration_ms,
                "node finished"
            );
            opts.observer.event(&event);
            state.push_event(event);

            let Some(&(_, ri)) = node.outcomes.iter().find(|(o, _)| *o == step.outcome) else {
                return Err(EngineFailure {
                    error: EngineError::UndeclaredOutcome {
                        node: node.name.to_string(),
                        outcome: step.outcome.to_string(),
                    },
                    state,
                });
            };
            // compile() guarantees the last branch is unconditional, so one always matches.
            let route = &self.routes[ri];
            let chosen = route
                .branches
                .iter()
                .find(|b| b.branch.is_open(&state))
                .unwrap_or_else(|| &route.branches[route.branches.len() - 1]);
            if let super::Guard::Counted { counter, .. } = &chosen.branch.guard {
                (counter.bump)(&mut state);
            }
            if let Some(effect) = &chosen.branch.effect {
                (effect.apply)(&mut state);
            }
            match chosen.target {
                Some(next) => current = next,
                None => return Ok(state),
            }
        }
    }
}
