//! Composer input (SPEC §2.7): the effective verdict and the Verifier-allowed claims with the
//! text the Gatekeeper cut for them, the missing information and the recommendations —
//! nothing else. The post-verification Fallback renders the same material.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::state::DiagnosisState;
use crate::protocol::{Verdict, VerifiedEvidence, VerifiedExecutorOutput, VerifierResult};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComposerInput {
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

pub fn build_composer_input(
    effective_verdict: Verdict,
    result: &VerifierResult,
    verified_output: &VerifiedExecutorOutput,
    verified_evidence: &[VerifiedEvidence],
) -> ComposerInput {
    ComposerInput {
        effective_verdict,
        allowed_claims: allowed_claims(result, verified_output, verified_evidence),
        missing_information: result.missing_information.clone(),
        recommendations: result.recommendations.clone(),
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

/// [`build_composer_input`] over the declared state fields.
pub fn composer_input_from_state(
    state: &DiagnosisState,
) -> Result<ComposerInput, ComposerInputError> {
    let verdict = state
        .effective_verdict
        .ok_or(ComposerInputError::MissingEffectiveVerdict)?;
    let result = state
        .verifier_result
        .as_ref()
        .ok_or(ComposerInputError::MissingVerifierResult)?;
    let verified = state
        .verified_executor_output
        .as_ref()
        .ok_or(ComposerInputError::MissingVerifiedOutput)?;
    Ok(build_composer_input(
        verdict,
        result,
        verified,
        &state.verified_evidence,
    ))
}

/// The serialized Composer input. The first call builds and stores it in
/// `state.composer_input`; a technical retry gets the stored text back unchanged, so it
/// sends byte-identical input. `begin_evidence_round` clears it.
pub fn composer_input_json(state: &mut DiagnosisState) -> Result<String, ComposerInputError> {
    if let Some(stored) = &state.composer_input {
        return Ok(stored.clone());
    }
    let input = composer_input_from_state(state)?;
    let text = serde_json::to_string(&input).map_err(|_| ComposerInputError::Serialize)?;
    state.composer_input = Some(text.clone());
    Ok(text)
}
