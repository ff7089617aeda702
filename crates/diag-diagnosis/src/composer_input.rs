//! Composer input (openspec/specs/verified-evidence/spec.md): the effective verdict and the Verifier-allowed claims with the
//! text the Gatekeeper cut for them, the missing information and the recommendations —
//! nothing else. The post-verification Fallback renders the same material.
//!
//! Content grounding (openspec/specs/verified-evidence/spec.md): an answer may hold a salient
//! token (number, time, date, identifier, `#` reference, verbatim line) only if the *answer
//! context* shows it: the operator's question and the evidence context of the allowed
//! claims' verified evidence among the run's own invocations. The claims' own text and the
//! quoted cut are not context: every token a claim may carry is in its evidence, and a quote
//! cut mid-word (`in 50` of `in 5002ms`) must not lend a number the evidence does not hold. The Verifier's free
//! text reaches an answer item by item under that rule: an item of `missing_information` or
//! `recommendations` with a token outside the context is dropped, and counted.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::state::DiagnosisState;
use crate::protocol::grounding::{context_of_evidence, EvidenceContext};
use crate::protocol::{
    RunClock, ToolInvocation, Verdict, VerifiedEvidence, VerifiedExecutorOutput, VerifierResult,
};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComposerInput {
    pub run_clock: RunClock,
    pub effective_verdict: Verdict,
    pub allowed_claims: Vec<AllowedClaim>,
    pub missing_information: Vec<String>,
    pub recommendations: Vec<String>,
}

/// A claim the Verifier allowed, with its verified evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllowedClaim {
    pub claim_id: String,
    pub text: String,
    pub evidence: Vec<ClaimEvidence>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimEvidence {
    pub source_invocation_id: String,
    pub tool_name: String,
    pub raw_path: String,
    pub matched_text: String,
}

/// The claims of the verified projection whose ids the Verifier allowed, in projection
/// order, each with its evidence. An allowed id that is not in the projection is dropped
/// (the Verifier cannot allow what was not verified), and so is a claim without evidence.
pub fn allowed_claims(
    result: &VerifierResult,
    verified_output: &VerifiedExecutorOutput,
    verified_evidence: &[VerifiedEvidence],
) -> Vec<AllowedClaim> {
    let allowed: HashSet<&str> = result.allowed_claims.iter().map(String::as_str).collect();
    let mut seen = HashSet::new();
    verified_output
        .claims
        .iter()
        .filter(|c| allowed.contains(c.claim_id.as_str()) && seen.insert(c.claim_id.as_str()))
        .filter_map(|c| {
            let evidence: Vec<ClaimEvidence> = verified_evidence
                .iter()
                .filter(|e| e.claim_id == c.claim_id)
                .map(|e| ClaimEvidence {
                    source_invocation_id: e.source_invocation_id.clone(),
                    tool_name: e.tool_name.clone(),
                    raw_path: e.raw_path.clone(),
                    matched_text: e.matched_text.clone(),
                })
                .collect();
            (!evidence.is_empty()).then(|| AllowedClaim {
                claim_id: c.claim_id.clone(),
                text: c.text.clone(),
                evidence,
            })
        })
        .collect()
}

/// The context an answer's salient tokens must occur in: the question and the evidence
/// context
/// ([`context_of_evidence`]) of their verified evidence, looked up among `invocations` of
/// `run_id` only.
pub fn answer_context(
    question: &str,
    allowed: &[AllowedClaim],
    verified_evidence: &[VerifiedEvidence],
    run_id: &str,
    invocations: &[ToolInvocation],
) -> EvidenceContext {
    let ids: HashSet<&str> = allowed.iter().map(|c| c.claim_id.as_str()).collect();
    let evidence: Vec<VerifiedEvidence> = verified_evidence
        .iter()
        .filter(|e| ids.contains(e.claim_id.as_str()))
        .cloned()
        .collect();
    let mut context = context_of_evidence(run_id, &evidence, invocations);
    context.push_text(question);
    context
}

/// The items whose salient tokens all occur in `context`, in order, and how many were
/// dropped.
pub fn grounded_items(items: &[String], context: &EvidenceContext) -> (Vec<String>, u32) {
    let mut dropped = 0u32;
    let kept = items
        .iter()
        .filter(|item| {
            let bound = context.first_unbound_claim(item).is_none();
            if !bound {
                dropped = dropped.saturating_add(1);
            }
            bound
        })
        .cloned()
        .collect();
    (kept, dropped)
}

/// What an answer after the Verifier is written from, by the Composer or the
/// post-verification Fallback: the allowed claims with their evidence, the Verifier's free
/// text that passed the token rule, how many items it dropped, and the answer context the
/// Composer's own answer is checked against.
#[derive(Debug, Clone)]
pub struct AnswerMaterial {
    pub allowed_claims: Vec<AllowedClaim>,
    pub missing_information: Vec<String>,
    pub recommendations: Vec<String>,
    pub dropped_items: u32,
    pub context: EvidenceContext,
    /// The question alone, and each allowed claim (in order) with the evidence context of
    /// its own verified evidence: what places the citations of an answer that has none.
    pub question_context: EvidenceContext,
    pub claim_contexts: Vec<(String, EvidenceContext)>,
}

impl AnswerMaterial {
    /// The material of a verifier result over the verified projection of this run.
    pub fn new(
        question: &str,
        result: &VerifierResult,
        verified_output: &VerifiedExecutorOutput,
        verified_evidence: &[VerifiedEvidence],
        run_id: &str,
        invocations: &[ToolInvocation],
    ) -> Self {
        let allowed = allowed_claims(result, verified_output, verified_evidence);
        let context = answer_context(question, &allowed, verified_evidence, run_id, invocations);
        let (missing_information, dropped_missing) =
            grounded_items(&result.missing_information, &context);
        let (recommendations, dropped_recs) = grounded_items(&result.recommendations, &context);
        let mut question_context = EvidenceContext::new();
        question_context.push_text(question);
        let claim_contexts = allowed
            .iter()
            .map(|claim| {
                let own: Vec<VerifiedEvidence> = verified_evidence
                    .iter()
                    .filter(|e| e.claim_id == claim.claim_id)
                    .cloned()
                    .collect();
                (
                    claim.claim_id.clone(),
                    context_of_evidence(run_id, &own, invocations),
                )
            })
            .collect();
        AnswerMaterial {
            allowed_claims: allowed,
            missing_information,
            recommendations,
            dropped_items: dropped_missing.saturating_add(dropped_recs),
            context,
            question_context,
            claim_contexts,
        }
    }

    /// The ids of the allowed claims, in projection order.
    pub fn allowed_ids(&self) -> Vec<String> {
        self.allowed_claims
            .iter()
            .map(|c| c.claim_id.clone())
            .collect()
    }
}

/// The Composer's declared input: the run's clock, the effective verdict and the material.
pub fn build_composer_input(
    run_clock: &RunClock,
    effective_verdict: Verdict,
    material: &AnswerMaterial,
) -> ComposerInput {
    ComposerInput {
        run_clock: run_clock.clone(),
        effective_verdict,
        allowed_claims: material.allowed_claims.clone(),
        missing_information: material.missing_information.clone(),
        recommendations: material.recommendations.clone(),
    }
}

/// Why the Composer input could not be built from the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ComposerInputError {
    #[error("no effective verdict")]
    MissingEffectiveVerdict,
    #[error("no verifier result")]
    MissingVerifierResult,
    #[error("no verified executor output")]
    MissingVerifiedOutput,
    #[error("the composer input could not be serialized")]
    Serialize,
}

impl ComposerInputError {
    pub fn as_str(self) -> &'static str {
        match self {
            ComposerInputError::MissingEffectiveVerdict => "missing_effective_verdict",
            ComposerInputError::MissingVerifierResult => "missing_verifier_result",
            ComposerInputError::MissingVerifiedOutput => "missing_verified_output",
            ComposerInputError::Serialize => "serialize",
        }
    }
}

/// The [`AnswerMaterial`] of the declared state fields (question, verifier result, verified
/// projection) over this run's invocations.
pub fn answer_material_from_state(
    state: &DiagnosisState,
    run_id: &str,
    invocations: &[ToolInvocation],
) -> Result<AnswerMaterial, ComposerInputError> {
    let result = state
        .round
        .verifier_result
        .as_ref()
        .ok_or(ComposerInputError::MissingVerifierResult)?;
    let verified = state
        .round
        .verified_executor_output
        .as_ref()
        .ok_or(ComposerInputError::MissingVerifiedOutput)?;
    Ok(AnswerMaterial::new(
        &state.context.question,
        result,
        verified,
        &state.round.verified_evidence,
        run_id,
        invocations,
    ))
}

/// [`build_composer_input`] over the declared state fields.
pub fn composer_input_from_state(
    state: &DiagnosisState,
    run_id: &str,
    invocations: &[ToolInvocation],
) -> Result<ComposerInput, ComposerInputError> {
    let verdict = state
        .round
        .effective_verdict
        .ok_or(ComposerInputError::MissingEffectiveVerdict)?;
    let material = answer_material_from_state(state, run_id, invocations)?;
    Ok(build_composer_input(&state.run_clock, verdict, &material))
}

/// The serialized Composer input built from `material`. The first call builds and stores
/// it in `state.composer_input` (and the material's dropped-item count in
/// `state.dropped_items`); a technical retry gets the stored text back unchanged, so it
/// sends byte-identical input. `begin_evidence_round` clears it.
pub fn composer_input_json(
    state: &mut DiagnosisState,
    material: &AnswerMaterial,
) -> Result<String, ComposerInputError> {
    if let Some(stored) = &state.round.composer_input {
        return Ok(stored.clone());
    }
    let verdict = state
        .round
        .effective_verdict
        .ok_or(ComposerInputError::MissingEffectiveVerdict)?;
    let input = build_composer_input(&state.run_clock, verdict, material);
    let text = serde_json::to_string(&input).map_err(|_| ComposerInputError::Serialize)?;
    state.round.composer_input = Some(text.clone());
    state.round.dropped_items = material.dropped_items;
    Ok(text)
}
