//! What a finished run says about itself, built from graph state and the run's own records
//! only: the `self_evaluation.verifier_evaluation` of openspec/specs/ask-service/spec.md step 5, and the deterministic
//! metrics of the evaluation step. Neither ever holds raw Executor text or the tool trace.
//! Also the [`RunSummary`] a run store is finished with ([`run_summary`]): the store takes
//! that plain record and never reads the graph state itself (openspec/specs/run-store/spec.md).

use serde::{Deserialize, Serialize};

use super::state::DiagnosisState;
use super::status::{AgentStatus, ExecutorStatus, FallbackKind};
use crate::agent::prompts::PromptAudit;
use crate::agent::runtime::AgentStepRecord;
use crate::clock::Timestamp;
use crate::protocol::grounding::TokenKind;
use crate::protocol::{
    Audit, ClaimCheck, Fact, GateStatus, GatekeeperRaw, InvocationStatus, ToolInvocation, Verdict,
    VerifiedEvidence, VerifiedExecutorOutput,
};
use diag_core::store::RunSummary;

/// The summary fields a final graph state determines, as the plain record a run store
/// finishes a run with: the answer, the end time and duration, `degraded`, the effective
/// verdict and the Fallback kind. `self_evaluation` is left to the caller, which builds it from
/// the same state and the run's read-back steps ([`verifier_evaluation`]).
pub fn run_summary(state: &DiagnosisState, finished_at: Timestamp, duration_ms: u64) -> RunSummary {
    RunSummary {
        answer: state.final_answer.clone(),
        finished_at: Some(finished_at),
        duration_ms: Some(duration_ms),
        degraded: state.degraded,
        effective_verdict: state.round.effective_verdict,
        fallback_kind: state.fallback_kind,
        self_evaluation: None,
        reuse: None,
    }
}

/// How a run ended in the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminalPath {
    Composer,
    FallbackPreVerification,
    FallbackPostVerification,
    /// The graph did not reach an end (engine error, interruption).
    Unfinished,
}

impl TerminalPath {
    pub fn of(state: &DiagnosisState) -> TerminalPath {
        let last = state.events.last().map(|e| e.node.as_str());
        match (last, state.fallback_kind) {
            (Some("composer"), _) => TerminalPath::Composer,
            (Some("fallback"), Some(FallbackKind::PostVerification)) => {
                TerminalPath::FallbackPostVerification
            }
            (Some("fallback"), _) => TerminalPath::FallbackPreVerification,
            _ => TerminalPath::Unfinished,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TerminalPath::Composer => "composer",
            TerminalPath::FallbackPreVerification => "fallback_pre_verification",
            TerminalPath::FallbackPostVerification => "fallback_post_verification",
            TerminalPath::Unfinished => "unfinished",
        }
    }
}

/// One model call's prompt, for the prompt audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptAuditEntry {
    pub agent: String,
    pub round: u32,
    pub attempt: u32,
    pub turn: u32,
    #[serde(flatten)]
    pub prompt: PromptAudit,
}

/// What the Composer did, without its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComposerAudit {
    pub status: Option<AgentStatus>,
    /// Characters of the Composer's rendered answer when it is the run's answer; 0 when the
    /// Composer did not complete or a Fallback answered instead.
    pub answer_chars: usize,
    /// Salient tokens of the Composer's last checked answer (openspec/specs/verified-evidence/spec.md); 0 when no answer
    /// reached the token check.
    #[serde(default)]
    pub answer_tokens_checked: u32,
    /// Of those, the tokens in neither the question nor the allowed claims and their
    /// evidence: non-zero only for an answer that was refused.
    #[serde(default)]
    pub answer_tokens_unbound: u32,
    /// The kind of the first unbound token of the last checked answer.
    #[serde(default)]
    pub unbound_token_kind: Option<TokenKind>,
    /// That token as the reader sees it (bounded, control characters dropped) and its line
    /// in the answer, so an operator can see why the answer was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unbound_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unbound_token_line: Option<u32>,
    /// The computed values of the run's answer, each with its checked arithmetic
    /// (`96 % = 48 / 50 × 100 (c6, c4)`), as `diag trace` and the reports show them under the
    /// answer; empty (and left out) unless the Composer's answer is the run's answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub derivations: Vec<crate::protocol::derivation::CheckedDerivation>,
}

/// `self_evaluation.verifier_evaluation`. Verdict fields are `None` unless the Verifier
/// completed in the final round; nothing is invented for a run that fell back before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifierEvaluation {
    pub round: u32,
    pub planner_status: Option<AgentStatus>,
    pub executor_status: Option<ExecutorStatus>,
    pub gatekeeper_status: Option<GateStatus>,
    pub gatekeeper_audit: Option<Audit>,
    /// The Gatekeeper's raw result of the last round (openspec/specs/verified-evidence/spec.md: kept beside the normalized
    /// status): result, severity and every checked binding with its failure reason.
    pub gatekeeper_raw: Option<GatekeeperRaw>,
    pub ceiling: Option<Verdict>,
    pub verifier_status: Option<AgentStatus>,
    pub model_verdict: Option<Verdict>,
    pub effective_verdict: Option<Verdict>,
    /// Equal to `effective_verdict`, kept for readers of the older field.
    pub verdict: Option<Verdict>,
    pub groundedness: Option<f64>,
    pub claim_checks: Vec<ClaimCheck>,
    pub fact_checks: Vec<Fact>,
    pub rationale: Option<String>,
    /// The verified projection only: never the raw Executor output.
    pub verified_executor_output: Option<VerifiedExecutorOutput>,
    pub verified_evidence: Vec<VerifiedEvidence>,
    pub prompt_audit: Vec<PromptAuditEntry>,
    pub composer_audit: ComposerAudit,
    /// Verifier free-text items (missing information, recommendations) dropped from the
    /// answer's material because they hold an unbound salient token (openspec/specs/verified-evidence/spec.md).
    #[serde(default)]
    pub dropped_items: u32,
    pub degraded: bool,
    pub fallback_kind: Option<FallbackKind>,
    /// For a Fallback: the stage whose outcome led there and that outcome.
    pub fallback_context: Option<FallbackContext>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FallbackContext {
    pub stage: String,
    pub status: String,
}

/// Builds the verifier evaluation from graph state and the run's agent steps.
pub fn verifier_evaluation(
    state: &DiagnosisState,
    steps: &[AgentStepRecord],
) -> VerifierEvaluation {
    let verifier_completed = state.round.verifier_status == Some(AgentStatus::Completed);
    let result = state
        .round
        .verifier_result
        .as_ref()
        .filter(|_| verifier_completed);
    let fallback_context = state.fallback_kind.and_then(|_| {
        // The event before the Fallback's own names the stage that routed there.
        let n = state.events.len();
        let before = if state.events.last().is_some_and(|e| e.node == "fallback") {
            n.checked_sub(2)
        } else {
            n.checked_sub(1)
        };
        before
            .and_then(|i| state.events.get(i))
            .map(|e| FallbackContext {
                stage: e.node.clone(),
                status: e.status.as_str().to_string(),
            })
    });
    let effective = state.round.effective_verdict.filter(|_| verifier_completed);
    VerifierEvaluation {
        round: state.round_number,
        planner_status: state.round.planner_status.clone(),
        executor_status: state.round.executor_status.clone(),
        gatekeeper_status: state.round.gatekeeper_status,
        gatekeeper_audit: state.round.gatekeeper_raw.as_ref().map(|r| r.audit),
        gatekeeper_raw: state.round.gatekeeper_raw.clone(),
        ceiling: state.round.ceiling,
        verifier_status: state.round.verifier_status.clone(),
        model_verdict: state
            .round
            .verifier_model_verdict
            .filter(|_| verifier_completed),
        effective_verdict: effective,
        verdict: effective,
        groundedness: result.map(|r| r.groundedness),
        claim_checks: result.map(|r| r.claim_checks.clone()).unwrap_or_default(),
        fact_checks: result.map(|r| r.facts.clone()).unwrap_or_default(),
        rationale: result.map(|r| r.rationale.clone()),
        verified_executor_output: state.round.verified_executor_output.clone(),
        verified_evidence: state.round.verified_evidence.clone(),
        prompt_audit: steps
            .iter()
            .map(|s| PromptAuditEntry {
                agent: s.agent.as_str().to_string(),
                round: s.round,
                attempt: s.attempt,
                turn: s.turn,
                prompt: s.prompt.clone(),
            })
            .collect(),
        composer_audit: ComposerAudit {
            status: state.composer_status.clone(),
            // Once a Fallback has answered, `final_answer` is the Fallback's, not the
            // Composer's: a Composer that completed with nothing displayable wrote nothing.
            answer_chars: if state.composer_status == Some(AgentStatus::Completed)
                && !state.degraded
            {
                state
                    .final_answer
                    .as_deref()
                    .map_or(0, |a| a.chars().count())
            } else {
                0
            },
            answer_tokens_checked: state
                .round
                .answer_grounding
                .as_ref()
                .map_or(0, |g| g.tokens_checked),
            answer_tokens_unbound: state
                .round
                .answer_grounding
                .as_ref()
                .map_or(0, |g| g.tokens_unbound),
            unbound_token_kind: state
                .round
                .answer_grounding
                .as_ref()
                .and_then(|g| g.first_unbound_kind),
            unbound_token: state
                .round
                .answer_grounding
                .as_ref()
                .and_then(|g| g.first_unbound.as_ref())
                .map(|u| u.token.text.clone()),
            unbound_token_line: state
                .round
                .answer_grounding
                .as_ref()
                .and_then(|g| g.first_unbound.as_ref())
                .map(|u| u.line),
            derivations: if state.composer_status == Some(AgentStatus::Completed) && !state.degraded
            {
                state.round.answer_derivations.clone()
            } else {
                Vec::new()
            },
        },
        dropped_items: state.round.dropped_items,
        degraded: state.degraded,
        fallback_kind: state.fallback_kind,
        fallback_context,
    }
}

/// The deterministic metrics of the evaluation step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub terminal_path: TerminalPath,
    pub degraded: bool,
    pub effective_verdict: Option<Verdict>,
    pub groundedness: Option<f64>,
    pub claims_verified: usize,
    pub claims_allowed: usize,
    /// Allowed claims over verified claims; `None` when nothing was verified.
    pub allowed_share: Option<f64>,
    pub tool_calls: usize,
    /// Calls with status `ok` over all calls; `None` without calls.
    pub tool_success_rate: Option<f64>,
    pub model_calls: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub node_executions: usize,
    pub latency_ms: u64,
    /// What content grounding (openspec/specs/verified-evidence/spec.md) examined and refused in this run; zero for an
    /// evaluation stored before it existed.
    #[serde(default)]
    pub grounding: GroundingFigures,
}

/// The run's content-grounding figures: the last evidence round's claims as the Gatekeeper
/// judged them, the salient tokens of their text, the tokens of the last answer the Composer
/// check examined, and the Verifier's free-text items dropped from the answer material.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroundingFigures {
    pub claims_bound: u32,
    pub claims_refused: u32,
    pub claim_tokens_checked: u32,
    pub claim_tokens_unbound: u32,
    pub answer_tokens_checked: u32,
    pub answer_tokens_unbound: u32,
    pub items_dropped: u32,
}

impl GroundingFigures {
    pub fn of(state: &DiagnosisState) -> Self {
        let g = state
            .round
            .gatekeeper_raw
            .as_ref()
            .map(|r| r.grounding)
            .unwrap_or_default();
        let answer = state.round.answer_grounding.clone().unwrap_or_default();
        GroundingFigures {
            claims_bound: g.claims_bound,
            claims_refused: g.claims_refused,
            claim_tokens_checked: g.tokens_checked,
            claim_tokens_unbound: g.tokens_unbound,
            answer_tokens_checked: answer.tokens_checked,
            answer_tokens_unbound: answer.tokens_unbound,
            items_dropped: state.round.dropped_items,
        }
    }
}

pub fn evaluate(
    state: &DiagnosisState,
    steps: &[AgentStepRecord],
    invocations: &[ToolInvocation],
    latency_ms: u64,
) -> Evaluation {
    let verifier_completed = state.round.verifier_status == Some(AgentStatus::Completed);
    let result = state
        .round
        .verifier_result
        .as_ref()
        .filter(|_| verifier_completed);
    let verified = state
        .round
        .verified_executor_output
        .as_ref()
        .map_or(0, |v| v.claims.len());
    let allowed = result.map_or(0, |r| r.allowed_claims.len());
    let ok = invocations
        .iter()
        .filter(|i| i.status == InvocationStatus::Ok)
        .count();
    let ratio = |a: usize, b: usize| (b > 0).then(|| a as f64 / b as f64);
    Evaluation {
        terminal_path: TerminalPath::of(state),
        degraded: state.degraded,
        effective_verdict: state.round.effective_verdict.filter(|_| verifier_completed),
        groundedness: result.map(|r| r.groundedness),
        claims_verified: verified,
        claims_allowed: allowed,
        allowed_share: ratio(allowed, verified),
        tool_calls: invocations.len(),
        tool_success_rate: ratio(ok, invocations.len()),
        model_calls: steps.len(),
        // Saturating: the counts are whatever the server reported, and may be absurd.
        prompt_tokens: steps
            .iter()
            .fold(0u64, |n, s| n.saturating_add(s.prompt_tokens)),
        completion_tokens: steps
            .iter()
            .fold(0u64, |n, s| n.saturating_add(s.completion_tokens)),
        node_executions: state.events.len(),
        latency_ms,
        grounding: GroundingFigures::of(state),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_summary_carries_what_the_final_state_says() {
        let finished_at = Timestamp::from_unix_ms(1_700_000_000_000);
        let mut state = DiagnosisState::new(
            "why 502s?",
            crate::protocol::RunClock::at(crate::clock::Timestamp::from_unix_ms(0)),
        );
        let empty = run_summary(&state, finished_at, 12);
        assert_eq!(
            empty,
            RunSummary {
                answer: None,
                finished_at: Some(finished_at),
                duration_ms: Some(12),
                degraded: false,
                effective_verdict: None,
                fallback_kind: None,
                self_evaluation: None,
                reuse: None,
            }
        );

        state.final_answer = Some("the pool is exhausted [c1]".into());
        state.degraded = true;
        state.round.effective_verdict = Some(Verdict::LowConfid);
        state.fallback_kind = Some(FallbackKind::PostVerification);
        let summary = run_summary(&state, finished_at, 34);
        assert_eq!(
            summary.answer.as_deref(),
            Some("the pool is exhausted [c1]")
        );
        assert!(summary.degraded);
        assert_eq!(summary.effective_verdict, Some(Verdict::LowConfid));
        assert_eq!(summary.fallback_kind, Some(FallbackKind::PostVerification));
        assert_eq!(summary.duration_ms, Some(34));
        assert_eq!(summary.self_evaluation, None, "left to the caller");
    }
}
