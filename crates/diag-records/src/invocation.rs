//! The record of one tool call, written before the model sees its result. The Gatekeeper
//! checks bindings against these records, scoped to one run.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvocationStatus {
    Ok,
    Error,
    Blocked,
}

impl InvocationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            InvocationStatus::Ok => "ok",
            InvocationStatus::Error => "error",
            InvocationStatus::Blocked => "blocked",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInvocation {
    pub run_id: String,
    pub session_id: String,
    /// Run-local: `inv-1`, `inv-2`, … in the order the model requested the calls.
    pub invocation_id: String,
    pub agent: String,
    pub round: u32,
    pub tool_name: String,
    pub arguments: serde_json::Value,
    pub output: serde_json::Value,
    pub status: InvocationStatus,
    pub duration_ms: u64,
}
