//! `composer_answer_v1`: the Composer's answer over Verifier-allowed claims.

use serde::{Deserialize, Serialize};

/// The schema name the Composer must return.
pub const SCHEMA: &str = "composer_answer_v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComposerAnswer {
    pub answer_markdown: String,
    pub cited_claims: Vec<String>,
}
