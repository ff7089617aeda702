//! The verified projection: only claims whose bindings passed, with the text the Gatekeeper
//! cut from the tool output.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct VerifiedExecutorOutput {
    pub claims: Vec<VerifiedClaim>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifiedClaim {
    pub claim_id: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifiedEvidence {
    pub claim_id: String,
    pub source_invocation_id: String,
    pub tool_name: String,
    pub raw_path: String,
    pub matched_text: String,
}
