//! Verified Input (openspec/specs/verified-evidence/spec.md): the projection of the Executor output onto what the Gatekeeper
//! proved, and the Verifier's input built from that projection alone.
//!
//! The projection is the wall between the Executor and the Verifier: everything past it is
//! either a claim with a passed binding or text the Gatekeeper cut from a tool output.
//! Failed bindings, hypotheses, no-evidence entries, limitations and unreferenced tool output
//! never cross it.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::state::{DiagnosisContext, DiagnosisState};
use crate::protocol::gatekeeper::{binding_trusted, normalize};
use crate::protocol::{
    Audit, BindingFailure, CheckedBinding, ClaimRefusal, CriticalGap, ExecutorOutput, GateStatus,
    GatekeeperRaw, RunClock, TokenKind, Verdict, VerifiedClaim, VerifiedEvidence,
    VerifiedExecutorOutput,
};

/// Why no projection could be built; each routes to the pre-verification Fallback.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectionError {
    /// Only PASS and LOW_CONFID may be projected.
    #[error("gatekeeper status {} is not continuable", .0.as_str())]
    NotContinuable(GateStatus),
    /// The status handed in is not what the raw result normalizes to; one of them is not
    /// what the Gatekeeper decided, so neither is trusted.
    #[error("gatekeeper status does not match its raw result")]
    StatusMismatch,
    #[error("the gatekeeper passed no binding")]
    NoPassedBinding,
    /// Two claims share an id, so a passed binding cannot be attributed to one of them.
    #[error("the executor output repeats a claim id")]
    DuplicateClaimId,
    /// Passed bindings exist but none matches a claim of this output.
    #[error("no claim of the executor output matches a passed binding")]
    NoClaimSurvived,
}

impl ProjectionError {
    /// A bounded code for events and the Fallback.
    pub fn as_str(&self) -> &'static str {
        match self {
            ProjectionError::NotContinuable(_) => "not_continuable",
            ProjectionError::StatusMismatch => "status_mismatch",
            ProjectionError::NoPassedBinding => "no_passed_binding",
            ProjectionError::DuplicateClaimId => "duplicate_claim_id",
            ProjectionError::NoClaimSurvived => "no_claim_survived",
        }
    }
}

/// Projects `output` onto the claims `raw` accepted (openspec/specs/verified-evidence/spec.md). A claim
/// survives when the raw result accepts it (every checked binding of it passed, none refused
/// it) and at least one passed checked binding carries its `claim_id` and the
/// (source_invocation_id, tool_name, raw_path) of one of its own bindings; each such binding
/// becomes one evidence entry with the `matched_text` the Gatekeeper cut. A refused claim
/// never crosses, whatever its passed bindings. Claims keep the Executor's order; evidence
/// follows its claim, in the order the Gatekeeper checked it, without repeats.
pub fn build_verified_input(
    output: &ExecutorOutput,
    raw: &GatekeeperRaw,
    status: GateStatus,
) -> Result<(VerifiedExecutorOutput, Vec<VerifiedEvidence>), ProjectionError> {
    if !matches!(status, GateStatus::Pass | GateStatus::LowConfid) {
        return Err(ProjectionError::NotContinuable(status));
    }
    if normalize(Some(raw)) != status {
        return Err(ProjectionError::StatusMismatch);
    }
    if raw.passed_bindings() == 0 {
        return Err(ProjectionError::NoPassedBinding);
    }
    let mut ids = HashSet::new();
    if !output
        .claims
        .iter()
        .all(|c| ids.insert(c.claim_id.as_str()))
    {
        return Err(ProjectionError::DuplicateClaimId);
    }

    // Only a binding of an accepted claim that passed, says so consistently and carries
    // cut text is trusted.
    let accepted: HashSet<&str> = raw.accepted_claims().into_iter().collect();
    let mut passed: HashMap<&str, Vec<&CheckedBinding>> = HashMap::new();
    for cb in &raw.checked_bindings {
        if accepted.contains(cb.claim_id.as_str()) && binding_trusted(cb) {
            passed.entry(cb.claim_id.as_str()).or_default().push(cb);
        }
    }

    let mut claims = Vec::new();
    let mut evidence = Vec::new();
    for claim in &output.claims {
        let Some(checked) = passed.get(claim.claim_id.as_str()) else {
            continue;
        };
        let own: HashSet<(&str, &str, &str)> = claim
            .bindings
            .iter()
            .map(|b| {
                (
                    b.source_invocation_id.as_str(),
                    b.tool_name.as_str(),
                    b.raw_path.as_str(),
                )
            })
            .collect();
        let mut entries: Vec<VerifiedEvidence> = Vec::new();
        for cb in checked {
            let key = (
                cb.source_invocation_id.as_str(),
                cb.tool_name.as_str(),
                cb.raw_path.as_str(),
            );
            if !own.contains(&key) {
                continue;
            }
            let entry = VerifiedEvidence {
                claim_id: claim.claim_id.clone(),
                source_invocation_id: cb.source_invocation_id.clone(),
                tool_name: cb.tool_name.clone(),
                raw_path: cb.raw_path.clone(),
                matched_text: cb.matched_text.clone().unwrap_or_default(),
            };
            if !entries.contains(&entry) {
                entries.push(entry);
            }
        }
        if entries.is_empty() {
            continue;
        }
        claims.push(VerifiedClaim {
            claim_id: claim.claim_id.clone(),
            text: claim.text.clone(),
        });
        evidence.extend(entries);
    }
    if claims.is_empty() {
        return Err(ProjectionError::NoClaimSurvived);
    }
    Ok((VerifiedExecutorOutput { claims }, evidence))
}

/// The part of the retry context the Verifier may see in round 2: the gaps the retry was
/// meant to close. Prior-round claims and evidence are left out on purpose: everything the
/// Verifier judges must have passed this round's Gatekeeper, and the Executor's snapshot
/// already carries the prior claims that still hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifierRetryContext {
    pub round: u32,
    pub critical_gaps: Vec<CriticalGap>,
}

/// A claim the Gatekeeper refused, as the Verifier sees it: codes only, never model text
/// (openspec/specs/verified-evidence/spec.md). The claim id passed the Executor contract's strict format; the refusal is
/// its code, the failure codes of its failed bindings, and for an unbound token only the
/// token's kind: the token itself is model text that no evidence holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedClaimView {
    pub claim_id: String,
    pub code: ClaimRefusal,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_failures: Vec<BindingFailure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_kind: Option<TokenKind>,
}

/// The Verifier's view of the Gatekeeper's refusals: one entry per refused claim, in order.
/// A failure text the Gatekeeper does not know is left out rather than shown.
pub fn refused_claims_view(raw: &GatekeeperRaw) -> Vec<RefusedClaimView> {
    raw.refused_claims
        .iter()
        .map(|r| {
            let mut binding_failures: Vec<BindingFailure> = Vec::new();
            for f in raw
                .checked_bindings
                .iter()
                .filter(|b| b.claim_id == r.claim_id)
                .filter_map(|b| b.failure.as_deref().and_then(BindingFailure::parse))
            {
                if !binding_failures.contains(&f) {
                    binding_failures.push(f);
                }
            }
            RefusedClaimView {
                claim_id: r.claim_id.clone(),
                code: r.code,
                binding_failures,
                token_kind: r.token.as_ref().map(|t| t.kind),
            }
        })
        .collect()
}

/// Exactly what the Verifier is shown, and nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifierInput {
    pub run_clock: RunClock,
    pub diagnosis_context: DiagnosisContext,
    pub verified_executor_output: VerifiedExecutorOutput,
    pub verified_evidence: Vec<VerifiedEvidence>,
    pub gatekeeper_audit: Audit,
    /// The claims the Gatekeeper refused, by id and code (absent when none was refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_claims: Vec<RefusedClaimView>,
    pub ceiling: Verdict,
    /// Present in the evidence-retry round only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_context: Option<VerifierRetryContext>,
}

/// Why the Verifier input could not be built: state the Verifier must never run without.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifierInputError {
    #[error("no verified executor output")]
    MissingVerifiedOutput,
    #[error("no gatekeeper result")]
    MissingGatekeeperResult,
    #[error("no gatekeeper ceiling")]
    MissingCeiling,
    #[error("the verifier input could not be serialized")]
    Serialize,
}

impl VerifierInputError {
    pub fn as_str(self) -> &'static str {
        match self {
            VerifierInputError::MissingVerifiedOutput => "missing_verified_output",
            VerifierInputError::MissingGatekeeperResult => "missing_gatekeeper_result",
            VerifierInputError::MissingCeiling => "missing_ceiling",
            VerifierInputError::Serialize => "serialize",
        }
    }
}

/// Builds the Verifier input from the declared state fields only.
pub fn build_verifier_input(state: &DiagnosisState) -> Result<VerifierInput, VerifierInputError> {
    let verified = state
        .round
        .verified_executor_output
        .as_ref()
        .ok_or(VerifierInputError::MissingVerifiedOutput)?;
    let raw = state
        .round
        .gatekeeper_raw
        .as_ref()
        .ok_or(VerifierInputError::MissingGatekeeperResult)?;
    let ceiling = state
        .round
        .ceiling
        .ok_or(VerifierInputError::MissingCeiling)?;
    let retry_context = if state.round_number >= 2 {
        state.retry_context.as_ref().map(|r| VerifierRetryContext {
            round: state.round_number,
            critical_gaps: r.critical_gaps.clone(),
        })
    } else {
        None
    };
    Ok(VerifierInput {
        run_clock: state.run_clock.clone(),
        diagnosis_context: state.context.clone(),
        verified_executor_output: verified.clone(),
        verified_evidence: state.round.verified_evidence.clone(),
        gatekeeper_audit: raw.audit,
        refused_claims: refused_claims_view(raw),
        ceiling,
        retry_context,
    })
}

/// The serialized Verifier input of this round. The first call builds and stores it in
/// `state.verifier_input`; every later call in the round (a technical retry) returns the
/// stored text unchanged, so the retry sends byte-identical input even if other state moved.
/// `begin_evidence_round` clears it.
pub fn verifier_input_json(state: &mut DiagnosisState) -> Result<String, VerifierInputError> {
    if let Some(stored) = &state.round.verifier_input {
        return Ok(stored.clone());
    }
    let input = build_verifier_input(state)?;
    let text = serde_json::to_string(&input).map_err(|_| VerifierInputError::Serialize)?;
    state.round.verifier_input = Some(text.clone());
    Ok(text)
}
