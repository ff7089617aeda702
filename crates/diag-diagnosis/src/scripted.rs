//! Scripted diagnosis nodes: deterministic stand-ins that play back a list of steps, record
//! every call they receive, and write state the way the real nodes do. The Workflow suite and
//! `diag-bench` run the real compiled topology over them, with no model and no tool.

use std::sync::{Arc, Mutex};

use super::state::DiagnosisState;
use super::status::{AgentStatus, ExecutorStatus, Status};
use super::topology::DiagnosisNodes;
use crate::graph::{Node, NodeFuture, RunConfig, Step};
use crate::protocol::{
    effective_verdict, Audit, Binding, CheckedBinding, Claim, ClaimRefusal, ComposerAnswer,
    ExecutorOutput, Fact, GateStatus, GatekeeperRaw, Grounding, NoEvidence, Plan, PlanStep,
    RefusedClaim, RetryContext, Verdict, Verification, VerifiedClaim, VerifiedEvidence,
    VerifiedExecutorOutput, VerifierResult,
};

/// One scripted attempt: mutate the state, return the outcome.
pub type ScriptStep = Box<dyn Fn(&mut DiagnosisState, &RunConfig) -> Step<Status> + Send + Sync>;

/// What a scripted node saw when it was called.
#[derive(Debug, Clone)]
pub struct Call {
    pub config: RunConfig,
    /// The whole state as the node received it.
    pub state: DiagnosisState,
}

/// A node that plays its steps in order. Past the end of its script it answers UNKNOWN, which
/// the topology routes to the Fallback, so an unexpected extra call shows in the path.
pub struct ScriptedNode {
    steps: Vec<ScriptStep>,
    calls: Mutex<Vec<Call>>,
}

impl ScriptedNode {
    pub fn new(steps: Vec<ScriptStep>) -> Arc<Self> {
        Arc::new(ScriptedNode {
            steps,
            calls: Mutex::new(Vec::new()),
        })
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    pub fn call_count(&self) -> usize {
        self.calls.lock().map(|c| c.len()).unwrap_or(0)
    }
}

impl Node<DiagnosisState, Status> for ScriptedNode {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        let index = match self.calls.lock() {
            Ok(mut calls) => {
                calls.push(Call {
                    config: config.clone(),
                    state: state.clone(),
                });
                calls.len() - 1
            }
            Err(_) => usize::MAX,
        };
        let step = match self.steps.get(index) {
            Some(step) => step(state, config),
            None => Step::new(Status::Unknown).with("script_exhausted", true),
        };
        Box::pin(std::future::ready(step))
    }
}

/// A node that runs the same step on every call and records nothing; it decides from the
/// state alone, so one instance serves any number of runs (benchmarks).
pub struct FnNode(pub ScriptStep);

impl FnNode {
    pub fn new(step: ScriptStep) -> Arc<Self> {
        Arc::new(FnNode(step))
    }
}

impl Node<DiagnosisState, Status> for FnNode {
    fn run<'a>(
        &'a self,
        state: &'a mut DiagnosisState,
        config: &'a RunConfig,
    ) -> NodeFuture<'a, Status> {
        Box::pin(std::future::ready((self.0)(state, config)))
    }
}

/// The eight scripted nodes of one test, kept so their calls can be inspected.
pub struct ScriptedGraph {
    pub planner: Arc<ScriptedNode>,
    pub executor: Arc<ScriptedNode>,
    pub gatekeeper: Arc<ScriptedNode>,
    pub verified_input: Arc<ScriptedNode>,
    pub verifier: Arc<ScriptedNode>,
    pub retry_prepare: Arc<ScriptedNode>,
    pub composer: Arc<ScriptedNode>,
    pub fallback: Arc<ScriptedNode>,
}

/// Scripts for each node; [`Scripts::default`] is the straight PASS path.
pub struct Scripts {
    pub planner: Vec<ScriptStep>,
    pub executor: Vec<ScriptStep>,
    pub gatekeeper: Vec<ScriptStep>,
    pub verified_input: Vec<ScriptStep>,
    pub verifier: Vec<ScriptStep>,
    pub retry_prepare: Vec<ScriptStep>,
    pub composer: Vec<ScriptStep>,
    pub fallback: Vec<ScriptStep>,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            planner: vec![steps::planner(AgentStatus::Completed)],
            executor: vec![steps::executor(ExecutorStatus::Completed)],
            gatekeeper: vec![steps::gate_pass()],
            verified_input: vec![steps::verified_input_built()],
            verifier: vec![steps::verifier_verdict(Verdict::Pass, vec![])],
            retry_prepare: vec![steps::retry_prepared()],
            composer: vec![steps::composer_answer(
                "checkout 502s come from payment-service timeouts",
            )],
            fallback: vec![steps::fallback(), steps::fallback()],
        }
    }
}

impl ScriptedGraph {
    pub fn new(s: Scripts) -> Self {
        ScriptedGraph {
            planner: ScriptedNode::new(s.planner),
            executor: ScriptedNode::new(s.executor),
            gatekeeper: ScriptedNode::new(s.gatekeeper),
            verified_input: ScriptedNode::new(s.verified_input),
            verifier: ScriptedNode::new(s.verifier),
            retry_prepare: ScriptedNode::new(s.retry_prepare),
            composer: ScriptedNode::new(s.composer),
            fallback: ScriptedNode::new(s.fallback),
        }
    }

    pub fn nodes(&self) -> DiagnosisNodes {
        DiagnosisNodes {
            planner: self.planner.clone(),
            executor: self.executor.clone(),
            gatekeeper: self.gatekeeper.clone(),
            verified_input: self.verified_input.clone(),
            verifier: self.verifier.clone(),
            retry_prepare: self.retry_prepare.clone(),
            composer: self.composer.clone(),
            fallback: self.fallback.clone(),
        }
    }
}

/// Step builders that write state as the real node would for that outcome.
pub mod steps {
    use super::*;

    fn agent_step(status: &AgentStatus) -> Step<Status> {
        let step = Step::new(Status::from(status));
        match status {
            AgentStatus::Unknown(raw) => step.with("status", raw.as_str()),
            _ => step,
        }
    }

    /// The Planner ends with `status`; on COMPLETED it leaves a one-step plan.
    pub fn planner(status: AgentStatus) -> ScriptStep {
        Box::new(move |s, _| {
            if status == AgentStatus::Completed {
                s.round.plan = Some(Plan {
                    mode: s.planner_mode,
                    hypotheses: vec![],
                    steps: vec![PlanStep {
                        id: "s1".into(),
                        goal: "find 502s in checkout logs".into(),
                        tool: "search_logs".into(),
                        arguments: serde_json::Map::new(),
                        gap_id: None,
                    }],
                });
            }
            s.round.planner_status = Some(status.clone());
            agent_step(&status)
        })
    }

    /// The Executor ends with `status`; on COMPLETED it leaves one bound claim.
    pub fn executor(status: ExecutorStatus) -> ScriptStep {
        Box::new(move |s, _| {
            if status == ExecutorStatus::Completed {
                s.round.executor_output = Some(ExecutorOutput {
                    claims: vec![Claim {
                        claim_id: "c1".into(),
                        text: "checkout-service logged upstream 502 from payment-service".into(),
                        bindings: vec![Binding {
                            source_invocation_id: "inv-1".into(),
                            tool_name: "search_logs".into(),
                            raw_path: "/matches/0/line".into(),
                            quote: "upstream returned 502".into(),
                        }],
                    }],
                    ..ExecutorOutput::default()
                });
            }
            s.round.executor_status = Some(status.clone());
            let step = Step::new(Status::from(&status));
            match &status {
                ExecutorStatus::Unknown(raw) => step.with("status", raw.as_str()),
                _ => step,
            }
        })
    }

    /// A legal no-evidence result: zero claims, one no_evidence entry, COMPLETED.
    pub fn executor_no_evidence() -> ScriptStep {
        Box::new(|s, _| {
            s.round.executor_output = Some(ExecutorOutput {
                no_evidence: vec![NoEvidence {
                    query_ref: "inv-1".into(),
                    reason: "no matching lines".into(),
                }],
                ..ExecutorOutput::default()
            });
            s.round.executor_status = Some(ExecutorStatus::Completed);
            Step::new(Status::Completed).with("claims", 0u32)
        })
    }

    fn checked_binding(claim: usize, passed: bool) -> CheckedBinding {
        CheckedBinding {
            claim_id: format!("c{claim}"),
            source_invocation_id: "inv-1".into(),
            tool_name: "search_logs".into(),
            raw_path: "/matches/0/line".into(),
            passed,
            matched_text: passed.then(|| "upstream returned 502".to_string()),
            failure: (!passed).then(|| "quote_not_found".to_string()),
        }
    }

    /// A raw Gatekeeper result with `passed` and `failed` checked bindings.
    pub fn raw(
        result: Option<&str>,
        severity: Option<&str>,
        passed: usize,
        failed: usize,
    ) -> GatekeeperRaw {
        let mut checked: Vec<CheckedBinding> =
            (0..passed).map(|i| checked_binding(i + 1, true)).collect();
        checked.extend((0..failed).map(|i| checked_binding(passed + i + 1, false)));
        GatekeeperRaw {
            result: result.map(str::to_string),
            severity: severity.map(str::to_string),
            audit: Audit {
                claims: (passed + failed) as u32,
                bindings: (passed + failed) as u32,
                passed: passed as u32,
                failed: failed as u32,
                unbound_claims: 0,
            },
            // Each binding is its own claim: the failed ones are refused whole.
            refused_claims: (0..failed)
                .map(|i| RefusedClaim {
                    claim_id: format!("c{}", passed + i + 1),
                    code: ClaimRefusal::FailedBinding,
                    token: None,
                })
                .collect(),
            grounding: Grounding {
                claims_bound: passed as u32,
                claims_refused: failed as u32,
                tokens_checked: 0,
                tokens_unbound: 0,
            },
            checked_bindings: checked,
        }
    }

    /// The Gatekeeper records `raw` and routes on its normalization, as the real node does.
    pub fn gatekeeper(raw: GatekeeperRaw) -> ScriptStep {
        Box::new(move |s, _| {
            let status = crate::protocol::gatekeeper::normalize(Some(&raw));
            s.round.gatekeeper_raw = Some(raw.clone());
            s.round.gatekeeper_status = Some(status);
            s.round.ceiling = Some(match status {
                GateStatus::Pass => Verdict::Pass,
                GateStatus::LowConfid => Verdict::LowConfid,
                GateStatus::Reject => Verdict::Reject,
            });
            Step::new(Status::from(status))
                .with("passed", raw.audit.passed)
                .with("failed", raw.audit.failed)
        })
    }

    pub fn gate_pass() -> ScriptStep {
        gatekeeper(raw(Some("pass"), None, 1, 0))
    }

    pub fn gate_low_confid(passed: usize, failed: usize) -> ScriptStep {
        gatekeeper(raw(Some("fail"), Some("low-confid"), passed, failed))
    }

    pub fn gate_reject(passed: usize, failed: usize) -> ScriptStep {
        gatekeeper(raw(Some("fail"), Some("reject"), passed, failed))
    }

    /// A raw result whose `result` the Gatekeeper does not recognise.
    pub fn gate_unknown() -> ScriptStep {
        gatekeeper(raw(Some("inconclusive"), None, 1, 0))
    }

    pub fn verified_input_built() -> ScriptStep {
        Box::new(|s, _| {
            let evidence: Vec<VerifiedEvidence> = s
                .round
                .gatekeeper_raw
                .iter()
                .flat_map(|r| r.checked_bindings.iter())
                .filter(|b| b.passed)
                .map(|b| VerifiedEvidence {
                    claim_id: b.claim_id.clone(),
                    source_invocation_id: b.source_invocation_id.clone(),
                    tool_name: b.tool_name.clone(),
                    raw_path: b.raw_path.clone(),
                    matched_text: b.matched_text.clone().unwrap_or_default(),
                })
                .collect();
            s.round.verified_executor_output = Some(VerifiedExecutorOutput {
                claims: evidence
                    .iter()
                    .map(|e| VerifiedClaim {
                        claim_id: e.claim_id.clone(),
                        text: format!("verified claim {}", e.claim_id),
                    })
                    .collect(),
            });
            let n = evidence.len();
            s.round.verified_evidence = evidence;
            Step::new(Status::Built).with("claims", n)
        })
    }

    pub fn verified_input_failed() -> ScriptStep {
        Box::new(|_, _| Step::new(Status::ProjectionFailed).with("reason", "no_matching_claim"))
    }

    /// The Verifier fails with `status` and writes nothing but its status.
    pub fn verifier(status: AgentStatus) -> ScriptStep {
        Box::new(move |s, _| {
            s.round.verifier_status = Some(status.clone());
            agent_step(&status)
        })
    }

    /// The Verifier completes with a model verdict; effective = min(model, ceiling).
    pub fn verifier_verdict(model: Verdict, facts: Vec<Fact>) -> ScriptStep {
        Box::new(move |s, _| {
            let ceiling = s.round.ceiling.unwrap_or(Verdict::Reject);
            let effective = effective_verdict(model, ceiling);
            let allowed: Vec<String> = s
                .round
                .verified_executor_output
                .iter()
                .flat_map(|v| v.claims.iter().map(|c| c.claim_id.clone()))
                .collect();
            s.round.verifier_result = Some(VerifierResult {
                verdict: model,
                groundedness: 0.9,
                claim_checks: vec![],
                facts: facts.clone(),
                allowed_claims: allowed,
                missing_information: vec![],
                recommendations: vec![],
                rationale: "scripted".into(),
            });
            s.round.verifier_status = Some(AgentStatus::Completed);
            s.round.verifier_model_verdict = Some(model);
            s.round.effective_verdict = Some(effective);
            Step::new(Status::Completed)
                .with("model_verdict", model.as_str())
                .with("effective_verdict", effective.as_str())
        })
    }

    pub fn fact(is_critical: bool, verification: Verification) -> Fact {
        Fact {
            fact: "payment-service pool exhausted".into(),
            is_critical,
            verification,
            claim_ids: vec!["c1".into()],
        }
    }

    pub fn retry_prepared() -> ScriptStep {
        Box::new(|s, _| {
            let gaps = s
                .round
                .verifier_result
                .iter()
                .flat_map(|r| r.critical_gaps())
                .enumerate()
                .map(|(i, f)| crate::protocol::CriticalGap {
                    id: format!("g{}", i + 1),
                    fact: f.fact.clone(),
                    verification: f.verification,
                    claim_ids: f.claim_ids.clone(),
                })
                .collect::<Vec<_>>();
            let n = gaps.len();
            s.retry_context = Some(RetryContext {
                prior_verified_output: s.round.verified_executor_output.clone().unwrap_or_default(),
                prior_verified_evidence: s.round.verified_evidence.clone(),
                critical_gaps: gaps,
                completed_queries: vec![],
                constraints: vec![],
            });
            Step::new(Status::Prepared).with("critical_gaps", n)
        })
    }

    pub fn composer(status: AgentStatus) -> ScriptStep {
        Box::new(move |s, _| {
            s.composer_status = Some(status.clone());
            agent_step(&status)
        })
    }

    pub fn composer_answer(text: &'static str) -> ScriptStep {
        Box::new(move |s, _| {
            let answer = ComposerAnswer {
                answer_markdown: text.to_string(),
                cited_claims: vec![],
                derivations: Vec::new(),
            };
            s.final_answer = Some(answer.answer_markdown);
            s.composer_status = Some(AgentStatus::Completed);
            Step::new(Status::Completed)
        })
    }

    pub fn fallback() -> ScriptStep {
        Box::new(|s, _| {
            let kind = s.fallback_kind.map_or("unknown", |k| k.as_str());
            s.final_answer = Some(format!("diag could not complete the diagnosis ({kind})."));
            s.degraded = true;
            Step::new(Status::Answered).with("kind", kind)
        })
    }
}
