//! The real diagnosis nodes. Agent nodes serialize only their declared input, hand it to the
//! [`AgentInvoker`] with the run's unchanged [`RunConfig`], and turn the reply into a status
//! through the one shared parser of their contract; deterministic nodes are plain functions
//! over state and the run's recorded tool invocations.

use std::sync::Arc;

use serde::Serialize;

use super::state::{DiagnosisContext, DiagnosisState};
use super::status::{AgentStatus, ExecutorStatus, Status};
use super::topology::DiagnosisNodes;
use crate::agent::{AgentInvoker, AgentRequest, AgentRole, InvokeError};
use crate::graph::{Node, NodeFuture, RunConfig, Step};
use crate::protocol::{
    parse_executor, parse_plan, Plan, PlannerMode, RetryContext,
};
use crate::tools::{InvocationLog, ToolSpec};

/// What the real nodes need from the outside world.
#[derive(Clone)]
pub struct NodeDeps {
    pub invoker: Arc<dyn AgentInvoker>,
    pub log: Arc<dyn InvocationLog>,
    /// The tool catalog shown to the Planner; the Executor is offered the same tools.
    pub catalog: Arc<Vec<ToolSpec>>,
}

/// The eight real nodes over the given dependencies.
pub fn real_nodes(deps: NodeDeps) -> DiagnosisNodes {
    DiagnosisNodes {
        planner: Arc::new(PlannerNode { deps: deps.clone() }),
        executor: Arc::new(ExecutorNode { deps: deps.clone() }),
        gatekeeper: Arc::new(GatekeeperNode { deps: deps.clone() }),
        verified_input: Arc::new(VerifiedInputNode),
        verifier: Arc::new(VerifierNode { deps: deps.clone() }),
        retry_prepare: Arc::new(RetryPrepareNode { deps: deps.clone() }),
        composer: Arc::new(ComposerNode { deps: deps.clone() }),
        fallback: Arc::new(FallbackNode { deps }),
    }
}

/// Serializes a declared input; the input types hold only plain data, so this cannot fail in
/// practice, and an empty object is the fail-safe if it ever did.
fn serialize<T: Serialize>(input: &T) -> String {
    serde_json::to_string(input).unwrap_or_else(|_| "{}".to_string())
}

/// The Planner's declared input.
#[derive(Serialize)]
pub struct PlannerInput<'a> {
    pub diagnosis_context: &'a DiagnosisContext,
    pub tool_catalog: &'a [ToolSpec],
    pub mode: PlannerMode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_context: Option<&'a RetryContext>,
}

/// The Executor's declared input.
#[derive(Serialize)]
pub struct ExecutorInput<'a> {
    pub diagnosis_context: &'a DiagnosisContext,
    pub plan: &'a Plan,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_context: Option<&'a RetryContext>,
}

fn agent_failure(e: &InvokeError) -> (AgentStatus, &'static str) {
    match e {
        InvokeError::Transient(_) => (AgentStatus::RetryableFailed, e.kind()),
        InvokeError::Permanent(_) | InvokeError::ToolBlocked(_) => {
            (AgentStatus::NonRetryableFailed, e.kind())
        }
    }
}

fn agent_step(status: &AgentStatus) -> Step<Status> {
    Step::new(Status::from(status))
}

struct PlannerNode {
    deps: NodeDeps,
}

impl Node<DiagnosisState, Status> for PlannerNode {
    fn run<'a>(&'a self, state: &'a mut DiagnosisState, config: &'a RunConfig) -> NodeFuture<'a, Status> {
        Box::pin(async move {
            let retry = match state.planner_mode {
                PlannerMode::EvidenceGapOnly => state.retry_context.as_ref(),
                PlannerMode::Normal => None,
            };
            let input = PlannerInput {
                diagnosis_context: &state.context,
                tool_catalog: &self.deps.catalog,
                mode: state.planner_mode,
                retry_context: retry,
            };
            let request = AgentRequest {
                role: AgentRole::Planner,
                round: state.round,
                attempt: state.retries.planner + 1,
                input: serialize(&input),
            };
            let names: Vec<&str> = self.deps.catalog.iter().map(|t| t.name.as_str()).collect();
            let (status, step) = match self.deps.invoker.invoke(&request, config).await {
                Ok(reply) => {
                    match parse_plan(&reply.content, &names, state.planner_mode, retry) {
                        Ok(plan) => {
                            let n = plan.steps.len();
                            state.plan = Some(plan);
                            let s = AgentStatus::Completed;
                            let step = agent_step(&s).with("steps", n);
                            (s, step)
                        }
                        Err(v) => {
                            let s = AgentStatus::InvalidOutput;
                            let step = agent_step(&s).with("reason", v.reason());
                            (s, step)
                        }
                    }
                }
                Err(e) => {
                    let (s, kind) = agent_failure(&e);
                    let step = agent_step(&s).with("failure", kind);
                    (s, step)
                }
            };
            state.planner_status = Some(status);
            step
        })
    }
}

struct ExecutorNode {
    deps: NodeDeps,
}

impl Node<DiagnosisState, Status> for ExecutorNode {
    fn run<'a>(&'a self, state: &'a mut DiagnosisState, config: &'a RunConfig) -> NodeFuture<'a, Status> {
        Box::pin(async move {
            let Some(plan) = state.plan.as_ref() else {
                // The topology only reaches the Executor after a COMPLETED plan; without one
                // there is nothing trustworthy to execute.
                state.executor_status = Some(ExecutorStatus::Failed);
                return Step::new(Status::Failed).with("failure", "no_plan");
            };
            let retry = match state.planner_mode {
                PlannerMode::EvidenceGapOnly => state.retry_context.as_ref(),
                PlannerMode::Normal => None,
            };
            let input = ExecutorInput {
                diagnosis_context: &state.context,
                plan,
                retry_context: retry,
            };
            let request = AgentRequest {
                role: AgentRole::Executor,
                round: state.round,
                attempt: 1,
                input: serialize(&input),
            };
            let before = self.deps.log.invocations(config.run_id()).len();
            let result = self.deps.invoker.invoke(&request, config).await;
            let calls = self
                .deps
                .log
                .invocations(config.run_id())
                .len()
                .saturating_sub(before);
            let (status, step) = match result {
                Ok(reply) => match parse_executor(&reply.content) {
                    Ok(output) => {
                        let claims = output.claims.len();
                        state.executor_output = Some(output);
                        (
                            ExecutorStatus::Completed,
                            Step::new(Status::Completed).with("claims", claims),
                        )
                    }
                    Err(v) => (
                        ExecutorStatus::InvalidOutput,
                        Step::new(Status::InvalidOutput).with("reason", v.reason()),
                    ),
                },
                Err(InvokeError::ToolBlocked(_)) => (
                    ExecutorStatus::ToolBlocked,
                    Step::new(Status::ToolBlocked).with("failure", "tool_blocked"),
                ),
                Err(e) => (
                    ExecutorStatus::Failed,
                    Step::new(Status::Failed).with("failure", e.kind()),
                ),
            };
            state.executor_status = Some(status);
            step.with("tool_calls", calls)
        })
    }
}
