//! Retry Prepare (openspec/specs/diagnosis-graph/spec.md): the bounded context of the single evidence retry — the prior
//! verified material, the critical gaps only, the queries already completed, and the fixed
//! constraints. Planner mode, round and counters change on the graph edge, not here.

use std::collections::BTreeSet;

use super::state::DiagnosisState;
use crate::protocol::{
    CriticalGap, InvocationStatus, QueryRef, RetryContext, ToolInvocation, VerifiedEvidence,
    VerifiedExecutorOutput, VerifierResult,
};

/// Fixed constraints of the evidence retry, in the order they are shown. Written as
/// instructions because the Planner and the Executor read them verbatim.
pub const CONSTRAINTS: [&str; 3] = [
    "This is the one incremental evidence retry of the run; there will be no other. \
     Address only the listed critical gaps.",
    "Do not repeat any completed query: a tool call with the same tool and the same \
     arguments as a listed completed query is not allowed.",
    "Return a complete executor_evidence_v2 snapshot: keep every prior verified claim \
     (same claim_id, bound again to its recorded invocation) and add new claims for the gaps.",
];

/// The critical gaps of the Verifier's facts — `is_critical` with verification
/// `no_evidence` or `indirect_support` — numbered `g1`, `g2`, … in fact order. Non-critical
/// gaps are never retried, so they are not listed.
pub fn critical_gaps(result: &VerifierResult) -> Vec<CriticalGap> {
    result
        .critical_gaps()
        .enumerate()
        .map(|(i, f)| CriticalGap {
            id: format!("g{}", i + 1),
            fact: f.fact.clone(),
            verification: f.verification,
            claim_ids: f.claim_ids.clone(),
        })
        .collect()
}

/// The queries this run completed: its own invocations with status `ok`, as tool name plus
/// canonical arguments, de-duplicated and sorted. Failed and blocked calls are left out —
/// repeating them may well be what closes a gap.
pub fn completed_queries(run_id: &str, invocations: &[ToolInvocation]) -> Vec<QueryRef> {
    invocations
        .iter()
        .filter(|i| i.run_id == run_id && i.status == InvocationStatus::Ok)
        .map(|i| QueryRef::new(&i.tool_name, &i.arguments))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Builds the retry context from the round-1 verified material and verdict.
pub fn prepare_retry(
    result: &VerifierResult,
    verified_output: &VerifiedExecutorOutput,
    verified_evidence: &[VerifiedEvidence],
    run_id: &str,
    invocations: &[ToolInvocation],
) -> RetryContext {
    RetryContext {
        prior_verified_output: verified_output.clone(),
        prior_verified_evidence: verified_evidence.to_vec(),
        critical_gaps: critical_gaps(result),
        completed_queries: completed_queries(run_id, invocations),
        constraints: CONSTRAINTS.iter().map(|c| c.to_string()).collect(),
    }
}

/// Why Retry Prepare could not run from the given state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RetryPrepareError {
    #[error("no verifier result")]
    MissingVerifierResult,
    #[error("no verified executor output")]
    MissingVerifiedOutput,
    #[error("no critical gap to retry")]
    NoCriticalGap,
}

impl RetryPrepareError {
    pub fn as_str(self) -> &'static str {
        match self {
            RetryPrepareError::MissingVerifierResult => "missing_verifier_result",
            RetryPrepareError::MissingVerifiedOutput => "missing_verified_output",
            RetryPrepareError::NoCriticalGap => "no_critical_gap",
        }
    }
}

/// [`prepare_retry`] over the declared state fields. A retry without a critical gap has
/// nothing to ask for, so it is an error rather than an empty context.
pub fn prepare_retry_from_state(
    state: &DiagnosisState,
    run_id: &str,
    invocations: &[ToolInvocation],
) -> Result<RetryContext, RetryPrepareError> {
    let result = state
        .round
        .verifier_result
        .as_ref()
        .ok_or(RetryPrepareError::MissingVerifierResult)?;
    let verified = state
        .round
        .verified_executor_output
        .as_ref()
        .ok_or(RetryPrepareError::MissingVerifiedOutput)?;
    let context = prepare_retry(
        result,
        verified,
        &state.round.verified_evidence,
        run_id,
        invocations,
    );
    if context.critical_gaps.is_empty() {
        return Err(RetryPrepareError::NoCriticalGap);
    }
    Ok(context)
}
