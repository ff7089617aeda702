//! An agent's model call as the run records it: who made it ([`AgentRole`]), how it ended
//! ([`StepStatus`]), what it cost and which prompt it used ([`AgentStepRecord`],
//! [`PromptAudit`]), and the call itself ([`ModelExchange`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::{ChatRequest, ChatResponse, ErrorClass, FinishReason, ModelError};

/// The four agents of the diagnosis graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentRole {
    Planner,
    Executor,
    Verifier,
    Composer,
}

impl AgentRole {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentRole::Planner => "planner",
            AgentRole::Executor => "executor",
            AgentRole::Verifier => "verifier",
            AgentRole::Composer => "composer",
        }
    }
}

impl fmt::Display for AgentRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which prompt a model call used, without the prompt itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptAudit {
    pub prompt_id: String,
    pub version: u32,
    pub sha256: String,
    pub size: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Ok,
    Transient,
    Permanent,
    Truncated,
    /// The request did not fit the model's context (refused by the server, or not sent).
    ContextOverflow,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Ok => "ok",
            StepStatus::Transient => "transient",
            StepStatus::Permanent => "permanent",
            StepStatus::Truncated => "truncated",
            StepStatus::ContextOverflow => "context_overflow",
        }
    }

    /// The status of a call that failed with `class`.
    pub fn of(class: ErrorClass) -> Self {
        match class {
            ErrorClass::Transient => StepStatus::Transient,
            ErrorClass::Permanent => StepStatus::Permanent,
            ErrorClass::ContextOverflow => StepStatus::ContextOverflow,
        }
    }
}

/// One model call: who made it, where in the run, how it ended and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentStepRecord {
    pub agent: AgentRole,
    pub round: u32,
    pub attempt: u32,
    pub turn: u32,
    pub status: StepStatus,
    pub model: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub finish_reason: Option<FinishReason>,
    pub duration_ms: u64,
    pub prompt: PromptAudit,
}

/// One model call with its normalized request and response, for export and replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelExchange {
    pub agent: AgentRole,
    pub round: u32,
    pub attempt: u32,
    pub turn: u32,
    pub request: ChatRequest,
    pub outcome: Result<ChatResponse, ModelError>,
}
