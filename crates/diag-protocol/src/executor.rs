//! `executor_evidence_v2`: the Executor's claims, each bound to recorded tool output.

use serde::{Deserialize, Serialize};

/// The schema name the Executor must return.
pub const SCHEMA: &str = "executor_evidence_v2";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ExecutorOutput {
    pub claims: Vec<Claim>,
    pub hypotheses: Vec<ExecutorHypothesis>,
    pub no_evidence: Vec<NoEvidence>,
    pub limitations: Vec<String>,
}

impl ExecutorOutput {
    /// Zero claims with at least one stated gap or limitation: legal, and still checked.
    pub fn is_no_evidence(&self) -> bool {
        self.claims.is_empty() && (!self.no_evidence.is_empty() || !self.limitations.is_empty())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub claim_id: String,
    pub text: String,
    pub bindings: Vec<Binding>,
}

/// Where a claim says its support is: an invocation of this run, a JSON Pointer into its
/// output, and a quote that must occur in the string found there.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Binding {
    pub source_invocation_id: String,
    pub tool_name: String,
    pub raw_path: String,
    pub quote: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutorHypothesis {
    pub id: String,
    pub text: String,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoEvidence {
    pub query_ref: String,
    pub reason: String,
}
