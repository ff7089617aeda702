//! The real diagnosis nodes. Agent nodes serialize only their declared input, hand it to the
//! [`AgentInvoker`] with the run's unchanged [`RunConfig`], and turn the reply into a status
//! through the one shared parser of their contract; deterministic nodes are plain functions
//! over state and the run's recorded tool invocations.

use std::sync::Arc;

use serde::Serialize;

use super::composer_input::{answer_material_from_state, composer_input_json, AnswerMaterial};
use super::fallback::{
    consulted_tools, fallback_post, fallback_pre_explained, pre_verification_failure,
};
use super::render::render_answer;
use super::retry_prepare::prepare_retry_from_state;
use super::state::{AnswerGrounding, DiagnosisContext, DiagnosisState};
use super::status::{AgentStatus, ExecutorStatus, FallbackKind, Status};
use super::topology::DiagnosisNodes;
use super::verified_input::{build_verified_input, verifier_input_json};
use crate::agent::prompts;
use crate::agent::{
    AgentFailure, AgentInvoker, AgentRequest, AgentRole, EvidenceTurn, InvokeError, PlanCall,
};
use crate::graph::{Node, NodeFuture, RunConfig, Step};
use crate::model::OutputSchema;
use crate::protocol::composer::place_citations;
use crate::protocol::derivation::context_with_derivations;
use crate::protocol::gatekeeper::{ceiling, normalize, validate_run_with_question};
use crate::protocol::grounding::answer_markers;
use crate::protocol::schema;
use crate::protocol::{
    bounded_token_text, check_answer_citations_with_derivations, check_answer_derivations,
    check_answer_tokens, check_executor_references, effective_verdict, parse_composer,
    parse_executor, parse_plan, parse_verifier, Plan, PlannerMode, RetryContext, RunClock, Verdict,
};
use crate::protocol::{ComposerAnswer, ComposerContract};
use crate::tools::{InvocationLog, ToolSpec};

/// What the real nodes need from the outside world.
#[derive(Clone)]
pub struct NodeDeps {
    pub invoker: Arc<dyn AgentInvoker>,
    pub log: Arc<dyn InvocationLog>,
    /// The tool catalog shown to the Planner; the Executor is offered the same tools.
    pub catalog: Arc<Vec<ToolSpec>>,
    /// The contract the Composer is asked for: [`ComposerContract::CURRENT`] in a live run,
    /// the recording's in a replay.
    pub composer: ComposerContract,
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
    pub run_clock: &'a RunClock,
    pub diagnosis_context: &'a DiagnosisContext,
    pub tool_catalog: &'a [ToolSpec],
    pub mode: PlannerMode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_context: Option<&'a RetryContext>,
}

/// The Executor's declared input.
#[derive(Serialize)]
pub struct ExecutorInput<'a> {
    pub run_clock: &'a RunClock,
    pub diagnosis_context: &'a DiagnosisContext,
    pub plan: &'a Plan,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_context: Option<&'a RetryContext>,
}

fn agent_failure(e: &InvokeError) -> (AgentStatus, &'static str) {
    if e.is_transient() {
        (AgentStatus::RetryableFailed, e.kind())
    } else {
        (AgentStatus::NonRetryableFailed, e.kind())
    }
}

/// The output contract sent with an agent request, for servers that constrain decoding.
fn contract(name: &str, schema: serde_json::Value) -> Option<OutputSchema> {
    Some(OutputSchema {
        name: name.to_string(),
        schema,
        grammar: None,
    })
}

/// An output contract with a grammar form of its own, for servers that compile the schema
/// to a grammar (openspec/specs/agent-runtime/spec.md, "contracts a small model can keep").
fn contract_with_grammar(
    name: &str,
    schema: serde_json::Value,
    grammar: serde_json::Value,
) -> Option<OutputSchema> {
    Some(OutputSchema {
        name: name.to_string(),
        schema,
        grammar: Some(grammar),
    })
}

/// What the Executor's evidence turn needs: the claims an evidence retry must keep, and the
/// question, hypotheses and step goals that rank the recorded leaves its schema offers.
fn evidence_turn(
    context: &DiagnosisContext,
    plan: &Plan,
    retry: Option<&RetryContext>,
) -> EvidenceTurn {
    let mut relevance = vec![context.question.clone()];
    relevance.extend(plan.hypotheses.iter().map(|h| h.statement.clone()));
    relevance.extend(plan.steps.iter().map(|s| s.goal.clone()));
    EvidenceTurn {
        kept_claim_ids: retry
            .map(|r| {
                r.prior_verified_output
                    .claims
                    .iter()
                    .map(|c| c.claim_id.clone())
                    .collect()
            })
            .unwrap_or_default(),
        relevance,
        question: context.question.clone(),
    }
}

/// The plan's steps as the tool calls the runtime may run before the Executor's first turn.
fn plan_calls(plan: &Plan) -> Vec<PlanCall> {
    plan.steps
        .iter()
        .map(|s| PlanCall {
            step_id: s.id.clone(),
            tool: s.tool.clone(),
            arguments: serde_json::Value::Object(s.arguments.clone()),
        })
        .collect()
}

/// What an agent attempt's result says for the Fallback: the failure, or none.
fn failure_of<T>(role: AgentRole, result: &Result<T, InvokeError>) -> Option<AgentFailure> {
    result.as_ref().err().map(|e| AgentFailure::new(role, e))
}

fn agent_step(status: &AgentStatus) -> Step<Status> {
    Step::new(Status::from(status))
}

struct PlannerNode {
    deps: NodeDeps,
}

impl Node<DiagnosisState, Status> for PlannerNode {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        Box::pin(async move {
            let retry = match state.planner_mode {
                PlannerMode::EvidenceGapOnly => state.retry_context.as_ref(),
                PlannerMode::Normal => None,
            };
            let input = PlannerInput {
                run_clock: &state.run_clock,
                diagnosis_context: &state.context,
                tool_catalog: &self.deps.catalog,
                mode: state.planner_mode,
                retry_context: retry,
            };
            let tools: Vec<(&str, &serde_json::Value)> = self
                .deps
                .catalog
                .iter()
                .map(|t| (t.name.as_str(), &t.parameters))
                .collect();
            let request = AgentRequest {
                role: AgentRole::Planner,
                round: state.round_number,
                attempt: state.round.retries.planner + 1,
                input: serialize(&input),
                correction: None,
                completed_queries: Vec::new(),
                output_schema: contract_with_grammar(
                    crate::protocol::planner::SCHEMA,
                    schema::planner(&tools, state.planner_mode, retry),
                    schema::planner_grammar(&tools, state.planner_mode, retry),
                ),
                evidence: None,
                plan_calls: Vec::new(),
                prompt: None,
            };
            let names: Vec<&str> = self.deps.catalog.iter().map(|t| t.name.as_str()).collect();
            let result = self.deps.invoker.invoke(&request, config).await;
            state.last_failure = failure_of(AgentRole::Planner, &result);
            let (status, step) = match result {
                Ok(reply) => match parse_plan(&reply.content, &names, state.planner_mode, retry) {
                    Ok(plan) => {
                        let n = plan.steps.len();
                        state.round.plan = Some(plan);
                        let s = AgentStatus::Completed;
                        let step = agent_step(&s).with("steps", n);
                        (s, step)
                    }
                    Err(v) => {
                        let s = AgentStatus::InvalidOutput;
                        let step = agent_step(&s).with("reason", v.reason());
                        (s, step)
                    }
                },
                Err(e) => {
                    let (s, kind) = agent_failure(&e);
                    let step = agent_step(&s).with("failure", kind);
                    (s, step)
                }
            };
            state.round.planner_status = Some(status);
            step
        })
    }
}

struct ExecutorNode {
    deps: NodeDeps,
}

impl Node<DiagnosisState, Status> for ExecutorNode {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        Box::pin(async move {
            let Some(plan) = state.round.plan.as_ref() else {
                // The topology only reaches the Executor after a COMPLETED plan; without one
                // there is nothing trustworthy to execute.
                state.round.executor_status = Some(ExecutorStatus::Failed);
                return Step::new(Status::Failed).with("failure", "no_plan");
            };
            let retry = match state.planner_mode {
                PlannerMode::EvidenceGapOnly => state.retry_context.as_ref(),
                PlannerMode::Normal => None,
            };
            let input = ExecutorInput {
                run_clock: &state.run_clock,
                diagnosis_context: &state.context,
                plan,
                retry_context: retry,
            };
            let names: Vec<&str> = self.deps.catalog.iter().map(|t| t.name.as_str()).collect();
            let request = AgentRequest {
                role: AgentRole::Executor,
                round: state.round_number,
                attempt: 1,
                input: serialize(&input),
                correction: None,
                completed_queries: retry
                    .map(|r| r.completed_queries.clone())
                    .unwrap_or_default(),
                output_schema: contract(
                    crate::protocol::executor::SCHEMA,
                    schema::executor(&names),
                ),
                evidence: Some(evidence_turn(&state.context, plan, retry)),
                plan_calls: plan_calls(plan),
                prompt: None,
            };
            let before = self.deps.log.invocations(config.run_id()).len();
            let result = self.deps.invoker.invoke(&request, config).await;
            state.last_failure = failure_of(AgentRole::Executor, &result);
            // One read after the call: how many calls it made, and the ids its result may
            // name in `no_evidence`.
            let invocations = self.deps.log.invocations(config.run_id());
            let calls = invocations.len().saturating_sub(before);
            let parsed = result.map(|reply| {
                parse_executor(&reply.content).and_then(|output| {
                    let ids: Vec<&str> = invocations
                        .iter()
                        .map(|i| i.invocation_id.as_str())
                        .collect();
                    let prior = retry.map(|r| &r.prior_verified_output);
                    check_executor_references(&output, prior, &ids).map(|()| output)
                })
            });
            let (status, step) = match parsed {
                Ok(parsed) => match parsed {
                    Ok(output) => {
                        let claims = output.claims.len();
                        state.round.executor_output = Some(output);
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
            state.round.executor_status = Some(status);
            step.with("tool_calls", calls)
        })
    }
}

struct GatekeeperNode {
    deps: NodeDeps,
}

impl Node<DiagnosisState, Status> for GatekeeperNode {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        // Only this run's invocations are looked up: the run id comes from the RunConfig.
        let invocations = self.deps.log.invocations(config.run_id());
        let raw = state.round.executor_output.as_ref().map(|output| {
            validate_run_with_question(
                config.run_id(),
                &state.context.question,
                output,
                &invocations,
            )
        });
        let status = normalize(raw.as_ref());
        let mut step = Step::new(Status::from(status));
        if let Some(r) = &raw {
            step = step
                .with("claims", r.audit.claims)
                .with("passed", r.audit.passed)
                .with("failed", r.audit.failed)
                .with("unbound_claims", r.audit.unbound_claims);
            // Why the first claim refused for its content was refused: its token, the
            // token's kind and the claim.
            if let Some((claim, token)) = r
                .refused_claims
                .iter()
                .find_map(|c| c.token.as_ref().map(|t| (c.claim_id.as_str(), t)))
            {
                step = step
                    .with("refused_claim", claim)
                    .with("token_kind", token.kind.as_str())
                    .with("token", token.text.as_str());
            }
        } else {
            step = step.with("reason", "no_executor_output");
        }
        state.round.gatekeeper_raw = raw;
        state.round.gatekeeper_status = Some(status);
        state.round.ceiling = Some(ceiling(status));
        Box::pin(std::future::ready(step))
    }
}

struct VerifiedInputNode;

impl Node<DiagnosisState, Status> for VerifiedInputNode {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        _config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        let built = match (
            &state.round.executor_output,
            &state.round.gatekeeper_raw,
            state.round.gatekeeper_status,
        ) {
            (Some(output), Some(raw), Some(status)) => {
                build_verified_input(output, raw, status).map_err(|e| e.as_str())
            }
            _ => Err("missing_gatekeeper_result"),
        };
        let step = match built {
            Ok((output, evidence)) => {
                let n = output.claims.len();
                state.round.verified_executor_output = Some(output);
                state.round.verified_evidence = evidence;
                Step::new(Status::Built).with("claims", n)
            }
            Err(reason) => Step::new(Status::ProjectionFailed).with("reason", reason),
        };
        Box::pin(std::future::ready(step))
    }
}

struct VerifierNode {
    deps: NodeDeps,
}

impl Node<DiagnosisState, Status> for VerifierNode {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        Box::pin(async move {
            // Serialized once per round; a technical retry sends the same bytes.
            let input = match verifier_input_json(state) {
                Ok(input) => input,
                Err(e) => {
                    state.round.verifier_status = Some(AgentStatus::NonRetryableFailed);
                    return Step::new(Status::NonRetryableFailed).with("reason", e.as_str());
                }
            };
            let verified_ids: Vec<String> = state
                .round
                .verified_executor_output
                .iter()
                .flat_map(|v| v.claims.iter().map(|c| c.claim_id.clone()))
                .collect();
            let request = AgentRequest {
                role: AgentRole::Verifier,
                round: state.round_number,
                attempt: state.round.retries.verifier + 1,
                input,
                correction: None,
                completed_queries: Vec::new(),
                output_schema: contract_with_grammar(
                    crate::protocol::verifier::SCHEMA,
                    schema::verifier(&verified_ids),
                    schema::verifier_grammar(&verified_ids),
                ),
                evidence: None,
                plan_calls: Vec::new(),
                prompt: None,
            };
            let result = self.deps.invoker.invoke(&request, config).await;
            state.last_failure = failure_of(AgentRole::Verifier, &result);
            let (status, step) = match result {
                Ok(reply) => match parse_verifier(&reply.content, &verified_ids) {
                    Ok(result) => {
                        // The Gatekeeper ceiling caps the model's verdict; a missing ceiling
                        // caps it at REJECT.
                        let ceiling = state.round.ceiling.unwrap_or(Verdict::Reject);
                        let effective = effective_verdict(result.verdict, ceiling);
                        let step = Step::new(Status::Completed)
                            .with("model_verdict", result.verdict.as_str())
                            .with("effective_verdict", effective.as_str())
                            .with("allowed_claims", result.allowed_claims.len())
                            .with("critical_gaps", result.critical_gaps().count());
                        state.round.verifier_model_verdict = Some(result.verdict);
                        state.round.effective_verdict = Some(effective);
                        state.round.verifier_result = Some(result);
                        (AgentStatus::Completed, step)
                    }
                    Err(v) => {
                        let s = AgentStatus::InvalidOutput;
                        (s.clone(), agent_step(&s).with("reason", v.reason()))
                    }
                },
                Err(e) => {
                    let (s, kind) = agent_failure(&e);
                    let step = agent_step(&s).with("failure", kind);
                    (s, step)
                }
            };
            // A failed attempt sets only the status; no verdict is invented.
            state.round.verifier_status = Some(status);
            step
        })
    }
}

struct RetryPrepareNode {
    deps: NodeDeps,
}

impl Node<DiagnosisState, Status> for RetryPrepareNode {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        let invocations = self.deps.log.invocations(config.run_id());
        let step = match prepare_retry_from_state(state, config.run_id(), &invocations) {
            Ok(context) => {
                let step = Step::new(Status::Prepared)
                    .with("critical_gaps", context.critical_gaps.len())
                    .with("completed_queries", context.completed_queries.len());
                state.retry_context = Some(context);
                step
            }
            Err(e) => Step::new(Status::Failed).with("reason", e.as_str()),
        };
        Box::pin(std::future::ready(step))
    }
}

struct ComposerNode {
    deps: NodeDeps,
}

impl Node<DiagnosisState, Status> for ComposerNode {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        Box::pin(async move {
            // The allowed material and the answer context, over this run's invocations only.
            let invocations = self.deps.log.invocations(config.run_id());
            let material = match answer_material_from_state(state, config.run_id(), &invocations) {
                Ok(material) => material,
                Err(e) => {
                    state.composer_status = Some(AgentStatus::NonRetryableFailed);
                    return Step::new(Status::NonRetryableFailed).with("reason", e.as_str());
                }
            };
            // Serialized once; a technical retry sends the same bytes.
            let input = match composer_input_json(state, &material) {
                Ok(input) => input,
                Err(e) => {
                    state.composer_status = Some(AgentStatus::NonRetryableFailed);
                    return Step::new(Status::NonRetryableFailed).with("reason", e.as_str());
                }
            };
            let allowed = material.allowed_ids();
            // A technical retry after a refused answer says why, so the model can correct it.
            let correction = (state.round.retries.composer > 0)
                .then(|| {
                    state
                        .round
                        .composer_refusal
                        .as_deref()
                        .map(|r| composer_correction(self.deps.composer, r))
                })
                .flatten();
            let request = AgentRequest {
                role: AgentRole::Composer,
                round: state.round_number,
                attempt: state.round.retries.composer + 1,
                input,
                correction,
                completed_queries: Vec::new(),
                output_schema: contract_with_grammar(
                    self.deps.composer.schema(),
                    schema::composer_contract(self.deps.composer, &allowed),
                    schema::composer_contract_grammar(self.deps.composer, &allowed),
                ),
                evidence: None,
                plan_calls: Vec::new(),
                prompt: Some(prompts::composer(self.deps.composer)),
            };
            let result = self.deps.invoker.invoke(&request, config).await;
            state.last_failure = failure_of(AgentRole::Composer, &result);
            let (status, step) = match result {
                Ok(reply) => match parse_composer(&reply.content, &allowed) {
                    Ok(answer) => {
                        let rendered = render_answer(&answer.answer_markdown);
                        if rendered.trim().is_empty() {
                            // Nothing displayable: the topology falls back after verification.
                            state.final_answer = Some(rendered);
                            let s = AgentStatus::Completed;
                            (
                                s.clone(),
                                agent_step(&s).with("cited_claims", answer.cited_claims.len()),
                            )
                        } else {
                            self.check_answer(state, rendered, &answer, &material)
                        }
                    }
                    Err(v) => {
                        let s = AgentStatus::InvalidOutput;
                        (s.clone(), agent_step(&s).with("reason", v.reason()))
                    }
                },
                Err(e) => {
                    let (s, kind) = agent_failure(&e);
                    let step = agent_step(&s).with("failure", kind);
                    (s, step)
                }
            };
            state.composer_status = Some(status);
            step
        })
    }
}

impl ComposerNode {
    /// The content rules of an answer as the operator would see it (openspec/specs/verified-evidence/spec.md): its citations,
    /// then its salient tokens against the question and the allowed claims with their
    /// evidence. A violation is INVALID_OUTPUT, and the answer is not kept.
    fn check_answer(
        &self,
        state: &mut DiagnosisState,
        rendered: String,
        answer: &ComposerAnswer,
        material: &AnswerMaterial,
    ) -> (AgentStatus, Step<Status>) {
        let cited_claims = answer.cited_claims.as_slice();
        let allowed = material.allowed_ids();
        // An answer without a single inline marker gets its citations placed from what its
        // facts bind to; markers a model wrote are checked as they are.
        let placed = if answer_markers(&rendered).is_empty() && !allowed.is_empty() {
            place_citations(
                &rendered,
                &material.question_context,
                &material.claim_contexts,
            )
        } else {
            None
        };
        let (rendered, cited_claims, placed_markers) = match placed {
            Some(p) => (p.markdown, p.cited_claims, Some(p.markers)),
            None => (rendered, cited_claims.to_vec(), None),
        };
        let cited_claims = cited_claims.as_slice();
        let derivation_ids = answer.derivation_ids();
        if let Err(v) = check_answer_citations_with_derivations(
            &rendered,
            cited_claims,
            &allowed,
            &derivation_ids,
        ) {
            let s = AgentStatus::InvalidOutput;
            state.round.composer_refusal = Some(v.to_string());
            return (s.clone(), agent_step(&s).with("reason", v.reason()));
        }
        // A computed value is checked before the tokens: its result binds the answer's
        // computed figures only when its arithmetic holds on observed operands.
        let evidence_of = |id: &str| {
            material
                .claim_contexts
                .iter()
                .find(|(claim, _)| claim == id)
                .map(|(_, context)| context)
        };
        let derivations =
            match check_answer_derivations(&rendered, &answer.derivations, &evidence_of) {
                Ok(checked) => checked,
                Err(v) => {
                    // The event names the derivation and its arithmetic, as the retry is told:
                    // `d1: 50 / 50 × 100 (c2, c2) = 100 %, stated 98 %`.
                    let s = AgentStatus::InvalidOutput;
                    let message = v.to_string();
                    let prefix = format!("{}: ", v.reason());
                    let step = agent_step(&s).with("reason", v.reason()).with(
                        "derivation",
                        message.strip_prefix(&prefix).unwrap_or(&message),
                    );
                    state.round.composer_refusal = Some(v.to_string());
                    return (s, step);
                }
            };
        let context = context_with_derivations(&material.context, &derivations);
        let (check, verdict) = check_answer_tokens(&rendered, &context);
        let first_unbound_kind = check.unbound.first().map(|t| t.kind);
        let first_unbound = check.first().map(|mut u| {
            u.token.text = bounded_token_text(&u.token.text);
            u
        });
        state.round.answer_grounding = Some(AnswerGrounding {
            tokens_checked: check.checked,
            tokens_unbound: u32::try_from(check.unbound.len()).unwrap_or(u32::MAX),
            first_unbound_kind,
            first_unbound: first_unbound.clone(),
        });
        match verdict {
            Ok(()) => {
                state.final_answer = Some(rendered);
                let s = AgentStatus::Completed;
                let mut step = agent_step(&s)
                    .with("cited_claims", cited_claims.len())
                    .with("answer_tokens", check.checked);
                if !derivations.is_empty() {
                    step = step.with("derivations", derivations.len());
                }
                // Each computed value with its arithmetic, as `diag trace` and the reports show
                // the Composer's event: `d1: 96 % = 48 / 50 × 100 (c6, c4)`.
                for d in &derivations {
                    step = step.with(&d.id, d.shown());
                }
                state.round.answer_derivations = derivations;
                if let Some(n) = placed_markers {
                    step = step.with("citations_placed", n);
                }
                (s, step)
            }
            Err(v) => {
                let s = AgentStatus::InvalidOutput;
                let mut step = agent_step(&s)
                    .with("reason", v.reason())
                    .with("answer_tokens", check.checked)
                    .with("unbound_tokens", check.unbound.len());
                if let Some(u) = &first_unbound {
                    step = step
                        .with("token_kind", u.token.kind.as_str())
                        .with("token", u.token.text.as_str())
                        .with("line", u.line);
                }
                state.round.composer_refusal = Some(v.to_string());
                (s, step)
            }
        }
    }
}

struct FallbackNode {
    deps: NodeDeps,
}

impl Node<DiagnosisState, Status> for FallbackNode {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        let kind = state.fallback_kind.unwrap_or(FallbackKind::PreVerification);
        let answer = match kind {
            FallbackKind::PreVerification => {
                let (stage, reason) = pre_verification_failure(state);
                let invocations = self.deps.log.invocations(config.run_id());
                fallback_pre_explained(
                    &stage,
                    &reason,
                    &consulted_tools(config.run_id(), &invocations),
                    state.last_failure.as_ref(),
                    config.run_id(),
                )
            }
            FallbackKind::PostVerification => {
                // Only verified material, and only the Verifier's free text that passes the
                // token rule; without a verifier result or projection there is none.
                let invocations = self.deps.log.invocations(config.run_id());
                match answer_material_from_state(state, config.run_id(), &invocations) {
                    Ok(material) => {
                        state.round.dropped_items = material.dropped_items;
                        fallback_post(
                            state.round.effective_verdict,
                            &material.allowed_claims,
                            &material.missing_information,
                            &material.recommendations,
                        )
                    }
                    Err(_) => fallback_post(state.round.effective_verdict, &[], &[], &[]),
                }
            }
        };
        state.final_answer = Some(answer);
        state.degraded = true;
        state.fallback_kind = Some(kind);
        Box::pin(std::future::ready(
            Step::new(Status::Answered).with("kind", kind.as_str()),
        ))
    }
}

/// What the Composer's technical retry tells the model about its refused answer, in the
/// words of the contract it was asked for.
fn composer_correction(contract: ComposerContract, refusal: &str) -> String {
    match contract {
        ComposerContract::V1 => format!(
            "Your previous answer was refused: {refusal}. Write it again: copy every number, \
             time, date and name exactly as an allowed claim's evidence or the question writes \
             it, do not compute new ones, and cite claims as [cN]."
        ),
        ComposerContract::V2 => format!(
            "Your previous answer was refused: {refusal}. Write it again: copy every number, \
             time, date and name exactly as an allowed claim's evidence or the question writes \
             it, state a computed value only with a derivation whose arithmetic holds on those \
             values and cite it as [dN], and cite claims as [cN]."
        ),
    }
}
