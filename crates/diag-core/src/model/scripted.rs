//! A scripted chat model: plays queued answers in order and records every request. The
//! deterministic fake behind agent-runtime tests.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::{
    ChatFuture, ChatModel, ChatRequest, ChatResponse, FinishReason, ModelError, ToolCall, Usage,
};

#[derive(Default)]
pub struct ScriptedModel {
    answers: Mutex<VecDeque<Result<ChatResponse, ModelError>>>,
    requests: Mutex<Vec<ChatRequest>>,
    context_tokens: Mutex<Option<u32>>,
    evidence_turn: std::sync::atomic::AtomicBool,
}

impl ScriptedModel {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues a final text answer.
    pub fn text(&self, content: &str) -> &Self {
        self.push(Ok(ChatResponse {
            content: Some(content.to_string()),
            tool_calls: Vec::new(),
            finish_reason: FinishReason::Stop,
            usage: Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 5,
            }),
            structured_output: None,
        }))
    }

    /// Queues a turn that calls tools: `(call id, tool name, arguments)`.
    pub fn tool_calls(&self, calls: &[(&str, &str, serde_json::Value)]) -> &Self {
        self.push(Ok(ChatResponse {
            content: None,
            tool_calls: calls
                .iter()
                .map(|(id, name, args)| ToolCall {
                    id: id.to_string(),
                    name: name.to_string(),
                    arguments: args.clone(),
                })
                .collect(),
            finish_reason: FinishReason::ToolCalls,
            usage: Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 5,
            }),
            structured_output: None,
        }))
    }

    pub fn push(&self, answer: Result<ChatResponse, ModelError>) -> &Self {
        if let Ok(mut a) = self.answers.lock() {
            a.push_back(answer);
        }
        self
    }

    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Makes the model one that takes output contracts, so the Executor gets its evidence turn.
    pub fn with_evidence_turn(&self) -> &Self {
        self.evidence_turn
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// Gives the model a known context size, as a configured `context_tokens` does.
    pub fn with_context_tokens(&self, n: u32) -> &Self {
        if let Ok(mut c) = self.context_tokens.lock() {
            *c = Some(n);
        }
        self
    }
}

impl ChatModel for ScriptedModel {
    fn name(&self) -> &str {
        "scripted"
    }

    fn evidence_turn(&self) -> bool {
        self.evidence_turn
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn context_tokens(&self) -> Option<u32> {
        self.context_tokens.lock().ok().and_then(|c| *c)
    }

    fn complete<'a>(&'a self, request: &'a ChatRequest) -> ChatFuture<'a> {
        if let Ok(mut r) = self.requests.lock() {
            r.push(request.clone());
        }
        let answer = self
            .answers
            .lock()
            .ok()
            .and_then(|mut a| a.pop_front())
            .unwrap_or_else(|| Err(ModelError::permanent("no scripted answer left")));
        Box::pin(std::future::ready(answer))
    }
}
