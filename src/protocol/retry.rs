//! The evidence-retry context Retry Prepare hands to the second round.

use serde::{Deserialize, Serialize};

use super::{Verification, VerifiedEvidence, VerifiedExecutorOutput};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryContext {
    pub prior_verified_output: VerifiedExecutorOutput,
    pub prior_verified_evidence: Vec<VerifiedEvidence>,
    pub critical_gaps: Vec<CriticalGap>,
    pub completed_queries: Vec<QueryRef>,
    pub constraints: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriticalGap {
    pub fact: String,
    pub verification: Verification,
    pub claim_ids: Vec<String>,
}

/// A completed tool query: the tool and its canonical (key-sorted, compact) arguments.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QueryRef {
    pub tool_name: String,
    pub arguments: String,
}
