//! A model call as data: `diag`'s own normalized chat request, response and error. The port
//! that makes a call (`ChatModel`) is the agent runtime's (`diag-core`); provider wire formats
//! stay behind adapters, so neither the runtime nor the store sees a provider's quirks.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::tool::ToolSpec;

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
///
/// The fields added after the first release are left out of the serialized form when unset,
/// so a request that does not use them hashes as it always did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// The output contract the answer must follow, for servers that can constrain decoding.
    /// How it goes on the wire (`json_schema`, `json_object`, nothing) is the adapter's
    /// choice, per its `structured_output` setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<OutputSchema>,
    /// Whether the model may call the offered tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// What this request was fitted to, when the model's context size was known. Not sent:
    /// it records what the fit assumed, so a replay fits the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<Fit>,
    /// The Executor's evidence turn: its evidence document asked for after the tool loop,
    /// with no tools offered (openspec/specs/agent-runtime/spec.md). Not sent: it marks the
    /// request in the record, so a replay knows the recorded run had the turn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub evidence_turn: bool,
}

/// The inputs of fitting a request to a context window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fit {
    /// The model's context size in tokens.
    pub context_tokens: u32,
    /// The completion tokens the agent asked for (`max_tokens` may be lower after the fit).
    pub max_tokens: u32,
}

/// What the runtime needs to know before it builds a request to a model: the context size
/// to fit it to and, when a recording says so, the completion tokens the agent asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestLimits {
    pub context_tokens: Option<u32>,
    pub max_tokens: Option<u32>,
}

impl ChatRequest {
    /// A request with these messages and nothing else set.
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest {
            messages,
            tools: Vec::new(),
            temperature: None,
            max_tokens: None,
            response_format: None,
            tool_choice: None,
            fit: None,
            evidence_turn: false,
        }
    }
}

/// An output contract as a JSON Schema, with the contract's name (`planner_plan_v1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputSchema {
    pub name: String,
    pub schema: serde_json::Value,
    /// A tighter form for servers that compile the schema to a grammar (`json_object` with
    /// `schema`), where offering a quote as its whole target string costs nothing in the
    /// prompt; the adapter sends [`OutputSchema::schema`] in every other form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<serde_json::Value>,
}

/// `tool_choice`: `auto` when tools are offered, `none` for an agent without tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    Auto,
    None,
}

impl ToolChoice {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::None => "none",
        }
    }
}

/// How an output contract went on the wire (`response_format`), as recorded per model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}` (OpenAI, vLLM,
    /// Ollama).
    JsonSchema,
    /// `{"type": "json_object", "schema": …}` (llama.cpp's server).
    JsonObjectSchema,
    /// `{"type": "json_object"}`: any JSON object.
    JsonObject,
    /// No `response_format`.
    Off,
}

impl StructuredOutput {
    pub fn as_str(self) -> &'static str {
        match self {
            StructuredOutput::JsonSchema => "json_schema",
            StructuredOutput::JsonObjectSchema => "json_object_schema",
            StructuredOutput::JsonObject => "json_object",
            StructuredOutput::Off => "off",
        }
    }
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
    /// How the request's output contract was sent, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<StructuredOutput>,
}

/// Whether a failed call may succeed if tried again (openspec/specs/model-endpoint/spec.md), and the one permanent
/// failure with its own remedy: a request larger than the model's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    Transient,
    Permanent,
    /// The request does not fit the model's context window (the server said so, or diag
    /// could not fit it and did not send it). Never retried as it is.
    ContextOverflow,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
            ErrorClass::ContextOverflow => "context_overflow",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
    /// The HTTP status of the answer, when there was one.
    pub status: Option<u16>,
    /// For a context overflow: the model's context size in tokens, as the server stated it
    /// (or as configured, when diag did not send the request).
    pub context_tokens: Option<u32>,
    /// Token counts the server reported for the failed request (the prompt's size in a
    /// context-length error, or a `usage` object), when it reported any.
    pub usage: Option<Usage>,
    /// How the request's output contract was sent.
    pub structured_output: Option<StructuredOutput>,
}

impl ModelError {
    fn of_class(class: ErrorClass, message: String) -> Self {
        ModelError {
            class,
            message,
            retry_after: None,
            status: None,
            context_tokens: None,
            usage: None,
            structured_output: None,
        }
    }

    pub fn transient(message: impl Into<String>) -> Self {
        Self::of_class(ErrorClass::Transient, message.into())
    }

    pub fn permanent(message: impl Into<String>) -> Self {
        Self::of_class(ErrorClass::Permanent, message.into())
    }

    pub fn context_overflow(message: impl Into<String>) -> Self {
        Self::of_class(ErrorClass::ContextOverflow, message.into())
    }

    /// openspec/specs/model-endpoint/spec.md: 408, 409, 429 and 5xx are transient; 400, 401, 403, 404, 422 and anything
    /// unrecognised are permanent.
    pub fn from_status(status: u16, message: impl Into<String>) -> Self {
        let class = match status {
            408 | 409 | 429 | 500..=599 => ErrorClass::Transient,
            _ => ErrorClass::Permanent,
        };
        let mut e = Self::of_class(class, message.into());
        e.status = Some(status);
        e
    }

    /// The endpoint refused the credentials (HTTP 401 or 403).
    pub fn is_authentication(&self) -> bool {
        matches!(self.status, Some(401 | 403))
    }
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
