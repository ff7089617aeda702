//! The model port: `diag`'s own normalized chat types and the [`ChatModel`] trait. Provider
//! wire formats stay behind adapters (the OpenAI-compatible one, the recorded one for replay),
//! so the agent runtime never sees a provider's quirks.

pub mod scripted;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::tools::ToolSpec;

pub mod openai;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One chat message in normalized form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    /// Text content; `None` for an assistant turn that only calls tools.
    pub content: Option<String>,
    /// Tool calls requested by an assistant turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn system(text: impl Into<String>) -> Self {
        Message {
            role: Role::System,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    pub fn user(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    pub fn assistant(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Message {
            role: Role::Assistant,
            content,
            tool_calls,
            tool_call_id: None,
        }
    }

    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        Message {
            role: Role::Tool,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }
}

/// A tool call as the model requested it; `arguments` is always a JSON value here, whether
/// the server sent a JSON string or an object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
}

/// A request to a chat model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    ToolCalls,
    Length,
    ContentFilter,
    Other,
}

impl FinishReason {
    /// Lenient mapping of the values servers send; absent or unknown is `Other`.
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("stop") | Some("eos") | Some("end_turn") => FinishReason::Stop,
            Some("tool_calls") | Some("function_call") | Some("tool_use") => {
                FinishReason::ToolCalls
            }
            Some("length") | Some("max_tokens") => FinishReason::Length,
            Some("content_filter") => FinishReason::ContentFilter,
            _ => FinishReason::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// A model's answer in normalized form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// `None` and `""` from a server both become `None`.
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: FinishReason,
    pub usage: Option<Usage>,
}

/// Whether a failed call may succeed if tried again (SPEC §1.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    Transient,
    Permanent,
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
        })
    }
}

/// A failed model call. The message never holds a secret: adapters build it from the status
/// line and a bounded, redacted excerpt of the body.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{class}: {message}")]
pub struct ModelError {
    pub class: ErrorClass,
    pub message: String,
    /// For a 429 or 503 with `Retry-After`: how long the server asked to wait.
    pub retry_after: Option<Duration>,
}

impl ModelError {
    pub fn transient(message: impl Into<String>) -> Self {
        ModelError {
            class: ErrorClass::Transient,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn permanent(message: impl Into<String>) -> Self {
        ModelError {
            class: ErrorClass::Permanent,
            message: message.into(),
            retry_after: None,
        }
    }

    /// SPEC §1.4: 408, 409, 429 and 5xx are transient; 400, 401, 403, 404, 422 and anything
    /// unrecognised are permanent.
    pub fn from_status(status: u16, message: impl Into<String>) -> Self {
        let class = match status {
            408 | 409 | 429 | 500..=599 => ErrorClass::Transient,
            _ => ErrorClass::Permanent,
        };
        ModelError {
            class,
            message: message.into(),
            retry_after: None,
        }
    }
}

pub type ChatFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<ChatResponse, ModelError>> + Send + 'a>,
>;

/// A chat model endpoint.
pub trait ChatModel: Send + Sync {
    /// The model name used in records (never a key or a URL with credentials).
    fn name(&self) -> &str;
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> ChatFuture<'a>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classification_follows_the_spec() {
        for s in [408, 409, 429, 500, 502, 503, 504, 599] {
            assert_eq!(
                ModelError::from_status(s, "x").class,
                ErrorClass::Transient,
                "{s}"
            );
        }
        for s in [400, 401, 403, 404, 422, 418, 302] {
            assert_eq!(
                ModelError::from_status(s, "x").class,
                ErrorClass::Permanent,
                "{s}"
            );
        }
    }

    #[test]
    fn finish_reasons_are_lenient() {
        assert_eq!(FinishReason::parse(Some("stop")), FinishReason::Stop);
        assert_eq!(
            FinishReason::parse(Some("tool_calls")),
            FinishReason::ToolCalls
        );
        assert_eq!(FinishReason::parse(None), FinishReason::Other);
        assert_eq!(FinishReason::parse(Some("weird")), FinishReason::Other);
    }
}
