//! Which Fallback template answered a run (openspec/specs/diagnosis-graph/spec.md): a plain
//! value the diagnosis graph sets and a run store persists, so it lives here, below both.

use serde::{Deserialize, Serialize};

/// Which Fallback template answers: before trusted material existed, or after the Verifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackKind {
    PreVerification,
    PostVerification,
}

impl FallbackKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackKind::PreVerification => "pre_verification",
            FallbackKind::PostVerification => "post_verification",
        }
    }
}
