//! The statuses of the diagnosis graph. Each stage has its own enum so a stage can only
//! report what it can mean; anything unrecognised is an explicit `Unknown` that routes to the
//! Fallback. [`Status`] is the single outcome type the compiled graph routes on.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::protocol::GateStatus;

/// The outcome of any diagnosis node, as the graph routes on it and events record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Completed,
    InvalidOutput,
    RetryableFailed,
    NonRetryableFailed,
    Failed,
    ToolBlocked,
    Pass,
    LowConfid,
    Reject,
    /// Verified Input built its projection.
    Built,
    /// Verified Input could not build its projection.
    ProjectionFailed,
    /// Retry Prepare built the retry context.
    Prepared,
    /// Fallback wrote its deterministic answer.
    Answered,
    /// A status the stage does not recognise; always routed to the Fallback.
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Completed => "COMPLETED",
            Status::InvalidOutput => "INVALID_OUTPUT",
            Status::RetryableFailed => "RETRYABLE_FAILED",
            Status::NonRetryableFailed => "NON_RETRYABLE_FAILED",
            Status::Failed => "FAILED",
            Status::ToolBlocked => "TOOL_BLOCKED",
            Status::Pass => "PASS",
            Status::LowConfid => "LOW_CONFID",
            Status::Reject => "REJECT",
            Status::Built => "BUILT",
            Status::ProjectionFailed => "PROJECTION_FAILED",
            Status::Prepared => "PREPARED",
            Status::Answered => "ANSWERED",
            Status::Unknown => "UNKNOWN",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The execution status of the Planner, Verifier and Composer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum AgentStatus {
    Completed,
    InvalidOutput,
    RetryableFailed,
    NonRetryableFailed,
    Unknown(String),
}

impl From<String> for AgentStatus {
    fn from(s: String) -> Self {
        match s.as_str() {
            "COMPLETED" => AgentStatus::Completed,
            "INVALID_OUTPUT" => AgentStatus::InvalidOutput,
            "RETRYABLE_FAILED" => AgentStatus::RetryableFailed,
            "NON_RETRYABLE_FAILED" => AgentStatus::NonRetryableFailed,
            _ => AgentStatus::Unknown(s),
        }
    }
}

impl From<AgentStatus> for String {
    fn from(s: AgentStatus) -> String {
        match s {
            AgentStatus::Unknown(raw) => raw,
            known => Status::from(&known).as_str().to_string(),
        }
    }
}

impl From<&AgentStatus> for Status {
    fn from(s: &AgentStatus) -> Status {
        match s {
            AgentStatus::Completed => Status::Completed,
            AgentStatus::InvalidOutput => Status::InvalidOutput,
            AgentStatus::RetryableFailed => Status::RetryableFailed,
            AgentStatus::NonRetryableFailed => Status::NonRetryableFailed,
            AgentStatus::Unknown(_) => Status::Unknown,
        }
    }
}

/// The execution status of the Executor.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ExecutorStatus {
    Completed,
    Failed,
    ToolBlocked,
    InvalidOutput,
    Unknown(String),
}

impl From<String> for ExecutorStatus {
    fn from(s: String) -> Self {
        match s.as_str() {
            "COMPLETED" => ExecutorStatus::Completed,
            "FAILED" => ExecutorStatus::Failed,
            "TOOL_BLOCKED" => ExecutorStatus::ToolBlocked,
            "INVALID_OUTPUT" => ExecutorStatus::InvalidOutput,
            _ => ExecutorStatus::Unknown(s),
        }
    }
}

impl From<ExecutorStatus> for String {
    fn from(s: ExecutorStatus) -> String {
        match s {
            ExecutorStatus::Unknown(raw) => raw,
            known => Status::from(&known).as_str().to_string(),
        }
    }
}

impl From<&ExecutorStatus> for Status {
    fn from(s: &ExecutorStatus) -> Status {
        match s {
            ExecutorStatus::Completed => Status::Completed,
            ExecutorStatus::Failed => Status::Failed,
            ExecutorStatus::ToolBlocked => Status::ToolBlocked,
            ExecutorStatus::InvalidOutput => Status::InvalidOutput,
            ExecutorStatus::Unknown(_) => Status::Unknown,
        }
    }
}

impl From<GateStatus> for Status {
    fn from(s: GateStatus) -> Status {
        match s {
            GateStatus::Pass => Status::Pass,
            GateStatus::LowConfid => Status::LowConfid,
            GateStatus::Reject => Status::Reject,
        }
    }
}

/// Which Fallback template answers (a plain value a run store persists too, so it is defined
/// with the contracts and re-exported here).
pub use crate::protocol::FallbackKind;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_unknown_is_kept() {
        for s in [
            "COMPLETED",
            "INVALID_OUTPUT",
            "RETRYABLE_FAILED",
            "NON_RETRYABLE_FAILED",
        ] {
            assert_eq!(String::from(AgentStatus::from(s.to_string())), s);
        }
        let odd = AgentStatus::from("SOMETHING_NEW".to_string());
        assert_eq!(odd, AgentStatus::Unknown("SOMETHING_NEW".into()));
        assert_eq!(Status::from(&odd), Status::Unknown);
        let json = serde_json::to_string(&ExecutorStatus::ToolBlocked).unwrap();
        assert_eq!(json, "\"TOOL_BLOCKED\"");
        let back: ExecutorStatus = serde_json::from_str("\"weird\"").unwrap();
        assert_eq!(Status::from(&back), Status::Unknown);
    }
}
