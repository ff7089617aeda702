//! `planner_plan_v1`: the Planner's hypotheses and tool steps.

use serde::{Deserialize, Serialize};

/// The schema name the Planner must return.
pub const SCHEMA: &str = "planner_plan_v1";

/// Whether the Planner plans a fresh diagnosis or only the gaps of an evidence retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PlannerMode {
    #[default]
    Normal,
    EvidenceGapOnly,
}

impl PlannerMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PlannerMode::Normal => "NORMAL",
            PlannerMode::EvidenceGapOnly => "EVIDENCE_GAP_ONLY",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub mode: PlannerMode,
    pub hypotheses: Vec<PlanHypothesis>,
    pub steps: Vec<PlanStep>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanHypothesis {
    pub id: String,
    pub statement: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanStep {
    pub id: String,
    pub goal: String,
    pub tool: String,
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// In EVIDENCE_GAP_ONLY mode: the id of the listed critical gap this step addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_id: Option<String>,
}
