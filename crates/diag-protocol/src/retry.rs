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
    /// `g1`, `g2`, … in the order of the Verifier's facts; plan steps name it as `gap_id`.
    pub id: String,
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

impl QueryRef {
    pub fn new(tool_name: &str, arguments: &serde_json::Value) -> Self {
        QueryRef {
            tool_name: tool_name.to_string(),
            arguments: canonical_json(arguments),
        }
    }
}

pub use diag_records::json::canonical_json;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b":1,"a":{"y":2,"x":[3,{"d":4,"c":5}]}}"#).unwrap();
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"x":[3,{"c":5,"d":4}],"y":2},"b":1}"#
        );
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":{"x":[3,{"c":5,"d":4}],"y":2},"b":1}"#).unwrap();
        assert_eq!(QueryRef::new("t", &a), QueryRef::new("t", &b));
    }
}
