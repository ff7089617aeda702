//! The agent port: how a diagnosis node asks an agent (a model, possibly with tools) for its
//! output. Nodes serialize only their declared input and hand it over with the run's
//! [`RunConfig`]; what answers (an OpenAI-compatible model, a recording, a script) is behind
//! [`AgentInvoker`].

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::graph::RunConfig;

pub use diag_records::step::AgentRole;

impl crate::limits::MaxTokensConfig {
    /// The completion tokens `role` asks for.
    pub fn for_role(&self, role: AgentRole) -> u32 {
        match role {
            AgentRole::Planner => self.planner,
            AgentRole::Executor => self.executor,
            AgentRole::Verifier => self.verifier,
            AgentRole::Composer => self.composer,
        }
    }
}

/// One agent attempt: who, where in the run, and the serialized declared input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRequest {
    pub role: AgentRole,
    pub round: u32,
    pub attempt: u32,
    /// The node's declared input as canonical JSON; a technical retry sends the same bytes.
    pub input: String,
    /// Why the previous attempt's output was refused, for a technical retry of the
    /// Composer: sent as a second user message after the input (which stays byte for byte).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correction: Option<String>,
    /// Queries the previous round completed (tool and canonical arguments), for the round-2
    /// Executor: a call that repeats one is blocked (openspec/specs/diagnosis-graph/spec.md). Empty otherwise.
    pub completed_queries: Vec<crate::protocol::QueryRef>,
    /// The JSON Schema of the contract the node will parse the reply with, for servers that
    /// constrain decoding (`response_format`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<crate::model::OutputSchema>,
    /// For the Executor: what its evidence turn needs to judge the loop's final answer and to
    /// build the schema from the run's evidence. `None` for the other agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<EvidenceTurn>,
    /// For the Executor: the plan's steps, which the runtime runs as tool calls before the
    /// model's first turn when the run is set to (openspec/specs/agent-runtime/spec.md).
    /// Empty for the other agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan_calls: Vec<PlanCall>,
    /// The system prompt when it is not the agent's newest: the Composer's for the contract
    /// the run asks for ([`prompts::composer`]). `None`: the agent's newest prompt.
    #[serde(skip)]
    pub prompt: Option<&'static prompts::Prompt>,
}

impl AgentRequest {
    /// The system prompt the request is built with.
    pub fn system_prompt(&self) -> &'static prompts::Prompt {
        self.prompt.unwrap_or_else(|| prompts::prompt(self.role))
    }
}

/// One plan step as a tool call: the step's id, its tool and its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanCall {
    pub step_id: String,
    pub tool: String,
    pub arguments: serde_json::Value,
}

/// What the Executor's evidence turn needs from the node (openspec/specs/agent-runtime/spec.md):
/// the contract's references to check the loop's final answer against, and the words that
/// rank the recorded leaves its schema offers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EvidenceTurn {
    /// The claim ids an evidence retry must keep (the previous round's verified claims).
    pub kept_claim_ids: Vec<String>,
    /// The plan's hypotheses and step goals.
    pub relevance: Vec<String>,
    /// The operator's question, whose tokens a claim may repeat: the loop's own evidence
    /// document is checked as the Gatekeeper will check it.
    #[serde(default)]
    pub question: String,
}

/// The agent's final text; tool calls made on the way are recorded by the tool recorder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentReply {
    pub content: String,
}

/// Why an agent attempt produced no reply, classified as openspec/specs/model-endpoint/spec.md requires.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InvokeError {
    /// Timeouts, connection errors, HTTP 408/409/429/5xx, truncated responses.
    #[error("transient: {0}")]
    Transient(String),
    /// HTTP 400/401/403/404/422 and anything unrecognised.
    #[error("permanent: {0}")]
    Permanent(String),
    /// The Executor asked for a tool outside the catalog or past its budget and ended there.
    #[error("tool blocked: {0}")]
    ToolBlocked(String),
    /// The Executor used every turn it had, its tool calls all ran, and no final answer came.
    #[error("turn limit: {0}")]
    TurnLimit(String),
    /// The request does not fit the model's context: the server refused it as too long, or
    /// diag could not fit it and did not send it.
    #[error("context overflow: {message}")]
    ContextOverflow {
        message: String,
        /// The model's context size, when known.
        context_tokens: Option<u32>,
        /// The request's prompt size, as the server reported or diag estimated it.
        prompt_tokens: Option<u64>,
    },
    /// The endpoint refused the credentials (HTTP 401 or 403).
    #[error("authentication: {0}")]
    Authentication(String),
    /// The Executor asked for the same tool call (tool and canonical arguments) three times
    /// in a row after it had already been made.
    #[error("repeating: {0}")]
    Repeating(String),
}

impl InvokeError {
    /// A short code for event details; never the message, which may quote a server.
    pub fn kind(&self) -> &'static str {
        match self {
            InvokeError::Transient(_) => "transient",
            InvokeError::Permanent(_) => "permanent",
            InvokeError::ToolBlocked(_) => "tool_blocked",
            InvokeError::TurnLimit(_) => "turn_limit",
            InvokeError::ContextOverflow { .. } => "context_overflow",
            InvokeError::Authentication(_) => "authentication",
            InvokeError::Repeating(_) => "repeating",
        }
    }

    /// The message: what the endpoint said (bounded, redacted) or what diag found.
    pub fn message(&self) -> &str {
        match self {
            InvokeError::Transient(m)
            | InvokeError::Permanent(m)
            | InvokeError::ToolBlocked(m)
            | InvokeError::TurnLimit(m)
            | InvokeError::Authentication(m)
            | InvokeError::Repeating(m) => m,
            InvokeError::ContextOverflow { message, .. } => message,
        }
    }

    /// Whether the technical retry may help (openspec/specs/model-endpoint/spec.md): transient failures only.
    pub fn is_transient(&self) -> bool {
        matches!(self, InvokeError::Transient(_))
    }
}

/// Why an agent attempt failed, kept in graph state for the Fallback to explain: the agent,
/// the failure code, the endpoint's (or diag's) bounded message and, for a context overflow,
/// the numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentFailure {
    pub agent: AgentRole,
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
}

impl AgentFailure {
    /// The most characters of a message kept.
    pub const MESSAGE_MAX: usize = 300;

    pub fn new(agent: AgentRole, error: &InvokeError) -> Self {
        let (context_tokens, prompt_tokens) = match error {
            InvokeError::ContextOverflow {
                context_tokens,
                prompt_tokens,
                ..
            } => (*context_tokens, *prompt_tokens),
            _ => (None, None),
        };
        AgentFailure {
            agent,
            code: error.kind().to_string(),
            message: crate::text::one_line(error.message(), Self::MESSAGE_MAX),
            context_tokens,
            prompt_tokens,
        }
    }
}

pub type InvokeFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<AgentReply, InvokeError>> + Send + 'a>,
>;

/// Runs one agent attempt. Implementations receive the run's `RunConfig` unchanged and pass
/// it on to their hooks and tool recorders.
pub trait AgentInvoker: Send + Sync {
    fn invoke<'a>(&'a self, request: &'a AgentRequest, config: &'a RunConfig) -> InvokeFuture<'a>;
}

/// A deterministic invoker for tests: per role, a queue of replies played in order; every
/// request is recorded with the config it came with. An exhausted queue is a permanent error.
#[derive(Default)]
pub struct ScriptedInvoker {
    replies: Mutex<HashMap<AgentRole, VecDeque<Result<AgentReply, InvokeError>>>>,
    requests: Mutex<Vec<(AgentRequest, RunConfig)>>,
}

impl ScriptedInvoker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues a reply with this content for `role`.
    pub fn reply(&self, role: AgentRole, content: impl Into<String>) -> &Self {
        self.push(
            role,
            Ok(AgentReply {
                content: content.into(),
            }),
        )
    }

    /// Queues a failure for `role`.
    pub fn fail(&self, role: AgentRole, error: InvokeError) -> &Self {
        self.push(role, Err(error))
    }

    fn push(&self, role: AgentRole, r: Result<AgentReply, InvokeError>) -> &Self {
        if let Ok(mut map) = self.replies.lock() {
            map.entry(role).or_default().push_back(r);
        }
        self
    }

    /// Every request so far, in order, with its config.
    pub fn requests(&self) -> Vec<(AgentRequest, RunConfig)> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The requests made to one role.
    pub fn requests_for(&self, role: AgentRole) -> Vec<AgentRequest> {
        self.requests()
            .into_iter()
            .filter(|(r, _)| r.role == role)
            .map(|(r, _)| r)
            .collect()
    }
}

impl AgentInvoker for ScriptedInvoker {
    fn invoke<'a>(&'a self, request: &'a AgentRequest, config: &'a RunConfig) -> InvokeFuture<'a> {
        if let Ok(mut reqs) = self.requests.lock() {
            reqs.push((request.clone(), config.clone()));
        }
        let next = self
            .replies
            .lock()
            .ok()
            .and_then(|mut map| map.get_mut(&request.role).and_then(VecDeque::pop_front));
        let result = next.unwrap_or_else(|| {
            Err(InvokeError::Permanent(format!(
                "no scripted reply left for {}",
                request.role
            )))
        });
        Box::pin(std::future::ready(result))
    }
}
pub mod content_calls;
pub mod fit;
pub mod prompts;
pub mod runtime;
