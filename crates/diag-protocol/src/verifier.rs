//! `verifier_verdict_v1`: the Verifier's verdict over verified material only.

use serde::{Deserialize, Serialize};

/// The schema name the Verifier must return.
pub const SCHEMA: &str = "verifier_verdict_v1";

pub use diag_records::verdict::Verdict;

/// effective verdict = min(model verdict, gatekeeper ceiling).
pub fn effective_verdict(model: Verdict, ceiling: Verdict) -> Verdict {
    model.min(ceiling)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verification {
    Supported,
    IndirectSupport,
    NoEvidence,
    Contradicted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifierResult {
    pub verdict: Verdict,
    pub groundedness: f64,
    pub claim_checks: Vec<ClaimCheck>,
    pub facts: Vec<Fact>,
    pub allowed_claims: Vec<String>,
    pub missing_information: Vec<String>,
    pub recommendations: Vec<String>,
    pub rationale: String,
}

impl VerifierResult {
    /// Facts that may justify an evidence retry: critical, and without direct support.
    pub fn critical_gaps(&self) -> impl Iterator<Item = &Fact> {
        self.facts.iter().filter(|f| f.is_critical_gap())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimCheck {
    pub claim_id: String,
    pub supported: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    pub fact: String,
    pub is_critical: bool,
    pub verification: Verification,
    pub claim_ids: Vec<String>,
}

impl Fact {
    pub fn is_critical_gap(&self) -> bool {
        self.is_critical
            && matches!(
                self.verification,
                Verification::NoEvidence | Verification::IndirectSupport
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_ordered_and_effective_is_the_minimum() {
        assert!(Verdict::Reject < Verdict::LowConfid && Verdict::LowConfid < Verdict::Pass);
        assert_eq!(
            effective_verdict(Verdict::Pass, Verdict::LowConfid),
            Verdict::LowConfid
        );
        assert_eq!(
            effective_verdict(Verdict::Reject, Verdict::Pass),
            Verdict::Reject
        );
        assert_eq!(
            effective_verdict(Verdict::Pass, Verdict::Pass),
            Verdict::Pass
        );
    }
}
