//! The agent runtime: [`ModelAgents`] answers every [`AgentRequest`] with a chat model. The
//! Planner, Verifier and Composer make one model call; the Executor runs a bounded ReAct loop
//! (model → tool calls → recorded results → model). Each model call is reported to the
//! [`RunHooks`] as an agent step and a model exchange; each tool call is recorded in the
//! [`InvocationLog`] before the model sees its result.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::prompts::{self, PromptAudit};
use super::{AgentInvoker, AgentReply, AgentRequest, AgentRole, InvokeError, InvokeFuture};
use crate::clock::Clock;
use crate::graph::RunConfig;
use crate::model::{
    ChatModel, ChatRequest, ChatResponse, ErrorClass, FinishReason, Message, ModelError,
};
use crate::protocol::{InvocationStatus, QueryRef, ToolInvocation};
use crate::tools::{InvocationLog, ToolSpec};

/// Bounds of one Executor invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentLimits {
    /// Model calls in one Executor invocation.
    pub max_turns: u32,
    /// Tool calls in one Executor invocation; further calls are recorded as blocked.
    pub max_tool_calls: u32,
}

impl Default for AgentLimits {
    fn default() -> Self {
        AgentLimits {
            max_turns: 8,
            max_tool_calls: 12,
        }
    }
}

/// The result of one tool call as the runtime records it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub status: InvocationStatus,
    pub output: Value,
}

pub type ToolResultFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = ToolResult> + Send + 'a>>;

/// The tools the Executor may call. Implementations enforce their own per-call timeout and
/// output cap, and answer an unknown name with `blocked`; they never fail the loop.
pub trait ToolRunner: Send + Sync {
    fn catalog(&self) -> Vec<ToolSpec>;
    fn run<'a>(&'a self, name: &'a str, arguments: &'a Value) -> ToolResultFuture<'a>;

    /// A call the runtime blocked without running it, because the Executor's call budget was
    /// spent; `result` is what will be recorded. A runner that only runs calls has nothing to
    /// do. A replay must consume the recorded exchange here: a recording holds every call the
    /// model asked for, budget-blocked ones included, in the model's order.
    fn blocked<'a>(
        &'a self,
        _name: &'a str,
        _arguments: &'a Value,
        result: ToolResult,
    ) -> ToolResultFuture<'a> {
        Box::pin(std::future::ready(result))
    }
}

/// How a model call ended, as recorded in its agent step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Ok,
    Transient,
    Permanent,
    Truncated,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Ok => "ok",
            StepStatus::Transient => "transient",
            StepStatus::Permanent => "permanent",
            StepStatus::Truncated => "truncated",
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

/// Observers of model calls (the run store implements these).
pub trait RunHooks: Send + Sync {
    fn agent_step(&self, _config: &RunConfig, _step: &AgentStepRecord) {}
    fn model_exchange(&self, _config: &RunConfig, _exchange: &ModelExchange) {}
    /// One model call: its step record, then its exchange. The runtime reports every call
    /// through this; an observer that can keep both at once (the store: one transaction)
    /// overrides it.
    fn model_call(&self, config: &RunConfig, step: &AgentStepRecord, exchange: &ModelExchange) {
        self.agent_step(config, step);
        self.model_exchange(config, exchange);
    }
}

/// Hooks that keep nothing.
pub struct NoHooks;
impl RunHooks for NoHooks {}

/// The model each agent uses: one default, optionally overridden per agent.
#[derive(Clone)]
pub struct AgentModels {
    pub default: Arc<dyn ChatModel>,
    pub overrides: HashMap<AgentRole, Arc<dyn ChatModel>>,
}

impl AgentModels {
    pub fn single(model: Arc<dyn ChatModel>) -> Self {
        AgentModels {
            default: model,
            overrides: HashMap::new(),
        }
    }

    pub fn for_role(&self, role: AgentRole) -> &Arc<dyn ChatModel> {
        self.overrides.get(&role).unwrap_or(&self.default)
    }
}

/// Answers agent requests with chat models and tools.
pub struct ModelAgents {
    pub models: AgentModels,
    pub tools: Arc<dyn ToolRunner>,
    pub log: Arc<dyn InvocationLog>,
    pub hooks: Arc<dyn RunHooks>,
    pub clock: Arc<dyn Clock>,
    pub limits: AgentLimits,
}

struct CallSite<'a> {
    request: &'a AgentRequest,
    config: &'a RunConfig,
    turn: u32,
}

impl ModelAgents {
    async fn call_model(
        &self,
        site: &CallSite<'_>,
        chat: &ChatRequest,
    ) -> Result<ChatResponse, InvokeError> {
        let role = site.request.role;
        let model = self.models.for_role(role);
        let began = self.clock.elapsed();
        tracing::debug!(
            agent = role.as_str(),
            round = site.request.round,
            attempt = site.request.attempt,
            turn = site.turn,
            model = %model.name(),
            messages = chat.messages.len(),
            "model call"
        );
        let outcome = model.complete(chat).await;
        let duration = self.clock.elapsed().saturating_sub(began);
        match &outcome {
            Ok(r) => tracing::debug!(
                agent = role.as_str(),
                finish_reason = r.finish_reason.as_str(),
                tool_calls = r.tool_calls.len(),
                prompt_tokens = r.usage.map_or(0, |u| u.prompt_tokens),
                completion_tokens = r.usage.map_or(0, |u| u.completion_tokens),
                duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
                "model answered"
            ),
            Err(e) => tracing::debug!(
                agent = role.as_str(),
                class = %e.class,
                error = %e.message,
                "model call failed"
            ),
        }
        // A reply cut off by the token limit with no tool call is a truncated response.
        let outcome = match outcome {
            Ok(r) if r.finish_reason == FinishReason::Length && r.tool_calls.is_empty() => {
                Err((r, "response truncated at the token limit"))
            }
            Ok(r) => Ok(r),
            Err(e) => {
                let exchange = ModelExchange {
                    agent: role,
                    round: site.request.round,
                    attempt: site.request.attempt,
                    turn: site.turn,
                    request: chat.clone(),
                    outcome: Err(e.clone()),
                };
                self.record_call(site, model.name(), &exchange, None, duration);
                return Err(match e.class {
                    ErrorClass::Transient => InvokeError::Transient(e.message),
                    ErrorClass::Permanent => InvokeError::Permanent(e.message),
                });
            }
        };
        let (response, truncated) = match outcome {
            Ok(r) => (r, None),
            Err((r, why)) => (r, Some(why)),
        };
        let exchange = ModelExchange {
            agent: role,
            round: site.request.round,
            attempt: site.request.attempt,
            turn: site.turn,
            request: chat.clone(),
            outcome: Ok(response.clone()),
        };
        self.record_call(site, model.name(), &exchange, truncated, duration);
        match truncated {
            Some(why) => Err(InvokeError::Transient(why.to_string())),
            None => Ok(response),
        }
    }

    fn record_call(
        &self,
        site: &CallSite<'_>,
        model: &str,
        exchange: &ModelExchange,
        truncated: Option<&str>,
        duration: std::time::Duration,
    ) {
        let (status, usage, finish) = match &exchange.outcome {
            Ok(r) if truncated.is_some() => (StepStatus::Truncated, r.usage, Some(r.finish_reason)),
            Ok(r) => (StepStatus::Ok, r.usage, Some(r.finish_reason)),
            Err(e) if e.class == ErrorClass::Transient => (StepStatus::Transient, None, None),
            Err(_) => (StepStatus::Permanent, None, None),
        };
        let usage = usage.unwrap_or_default();
        let step = AgentStepRecord {
            agent: site.request.role,
            round: site.request.round,
            attempt: site.request.attempt,
            turn: site.turn,
            status,
            model: model.to_string(),
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            finish_reason: finish,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            prompt: prompts::prompt(site.request.role).audit(),
        };
        self.hooks.model_call(site.config, &step, exchange);
    }

    async fn single_turn(
        &self,
        request: &AgentRequest,
        config: &RunConfig,
    ) -> Result<AgentReply, InvokeError> {
        let chat = ChatRequest {
            messages: vec![
                Message::system(prompts::prompt(request.role).text),
                Message::user(request.input.clone()),
            ],
            tools: Vec::new(),
            temperature: None,
            max_tokens: None,
        };
        let site = CallSite {
            request,
            config,
            turn: 1,
        };
        let response = self.call_model(&site, &chat).await?;
        Ok(AgentReply {
            content: response.content.unwrap_or_default(),
        })
    }

    async fn react(
        &self,
        request: &AgentRequest,
        config: &RunConfig,
    ) -> Result<AgentReply, InvokeError> {
        let mut chat = ChatRequest {
            messages: vec![
                Message::system(prompts::prompt(request.role).text),
                Message::user(request.input.clone()),
            ],
            tools: self.tools.catalog(),
            temperature: None,
            max_tokens: None,
        };
        let mut calls_made: u32 = 0;
        let mut last_blocked = false;
        for turn in 1..=self.limits.max_turns {
            let site = CallSite {
                request,
                config,
                turn,
            };
            let response = self.call_model(&site, &chat).await?;
            if response.tool_calls.is_empty() {
                return Ok(AgentReply {
                    content: response.content.unwrap_or_default(),
                });
            }
            // Invocation ids are run-local and follow the model's order, across rounds.
            let base = self.log.invocations(config.run_id()).len();
            // A round-2 call that repeats a completed query (SPEC §2.6) is blocked without
            // spending the budget; so is a call past the budget.
            let planned: Vec<(String, Option<String>)> = response
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let query = QueryRef::new(&call.name, &call.arguments);
                    let refused = if request.completed_queries.contains(&query) {
                        Some(
                            "this query already ran in the previous round (same tool and \
                             arguments): use its recorded result"
                                .to_string(),
                        )
                    } else if calls_made < self.limits.max_tool_calls {
                        calls_made += 1;
                        None
                    } else {
                        Some(format!(
                            "tool call budget of {} exhausted",
                            self.limits.max_tool_calls
                        ))
                    };
                    (format!("inv-{}", base + i + 1), refused)
                })
                .collect();
            let results = join_all(response.tool_calls.iter().zip(&planned).map(
                |(call, (_, refused))| async move {
                    let began = self.clock.elapsed();
                    let result = match refused {
                        None => self.tools.run(&call.name, &call.arguments).await,
                        Some(why) => {
                            let blocked = ToolResult {
                                status: InvocationStatus::Blocked,
                                output: json!({ "error": why }),
                            };
                            self.tools
                                .blocked(&call.name, &call.arguments, blocked)
                                .await
                        }
                    };
                    let ms = self.clock.elapsed().saturating_sub(began).as_millis();
                    (result, u64::try_from(ms).unwrap_or(u64::MAX))
                },
            ))
            .await;
            chat.messages.push(Message::assistant(
                response.content.clone(),
                response.tool_calls.clone(),
            ));
            last_blocked = true;
            for ((call, (id, _)), (result, duration_ms)) in
                response.tool_calls.iter().zip(&planned).zip(results)
            {
                last_blocked &= result.status == InvocationStatus::Blocked;
                tracing::debug!(
                    invocation = %id,
                    tool = %crate::render::one_line(&call.name, 64),
                    status = result.status.as_str(),
                    duration_ms,
                    "tool call"
                );
                let recorded = self.log.record(
                    config,
                    ToolInvocation {
                        run_id: config.run_id().to_string(),
                        session_id: config.session_id().to_string(),
                        invocation_id: id.clone(),
                        agent: request.role.as_str().to_string(),
                        round: request.round,
                        tool_name: call.name.clone(),
                        arguments: call.arguments.clone(),
                        output: result.output.clone(),
                        status: result.status,
                        duration_ms,
                    },
                );
                // SPEC §4: each result is recorded before the model sees it. One that could
                // not be kept is never shown: the Executor stops here and fails.
                if let Err(why) = recorded {
                    return Err(InvokeError::Permanent(format!(
                        "tool result {id} could not be recorded, so it is not shown to the model: {why}"
                    )));
                }
                let shown = json!({
                    "invocation_id": id,
                    "tool": call.name,
                    "status": result.status.as_str(),
                    "output": result.output,
                });
                chat.messages
                    .push(Message::tool_result(call.id.clone(), shown.to_string()));
            }
        }
        // SPEC §4: an Executor that ends blocked is TOOL_BLOCKED; one whose last calls ran
        // but that never answered simply failed.
        let turns = self.limits.max_turns;
        Err(if last_blocked {
            InvokeError::ToolBlocked(format!(
                "the last tool calls were blocked and no final answer followed ({turns} turns)"
            ))
        } else {
            InvokeError::TurnLimit(format!(
                "turn limit reached without a final answer ({turns} turns)"
            ))
        })
    }
}

impl AgentInvoker for ModelAgents {
    fn invoke<'a>(&'a self, request: &'a AgentRequest, config: &'a RunConfig) -> InvokeFuture<'a> {
        Box::pin(async move {
            match request.role {
                AgentRole::Executor => self.react(request, config).await,
                _ => self.single_turn(request, config).await,
            }
        })
    }
}
