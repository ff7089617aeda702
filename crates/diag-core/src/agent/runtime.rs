//! The agent runtime: [`ModelAgents`] answers every [`AgentRequest`] with a chat model. The
//! Planner, Verifier and Composer make one model call; the Executor runs a bounded ReAct loop
//! (model → tool calls → recorded results → model). Each model call is reported to the
//! [`RunHooks`] as an agent step and a model exchange; each tool call is recorded in the
//! [`InvocationLog`] before the model sees its result.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::join_all;
use serde_json::{json, Value};

use super::content_calls::answer_tool_calls;
use super::fit::{estimate, fit, Draft};
use super::prompts::{self};
use super::{AgentInvoker, AgentReply, AgentRequest, AgentRole, InvokeError, InvokeFuture};
use crate::clock::Clock;
use crate::graph::RunConfig;
use crate::limits::Limits;
use crate::model::{
    ChatModel, ChatRequest, ChatResponse, ErrorClass, FinishReason, Fit, Message, ModelError,
    OutputSchema, ToolCall, ToolChoice, Usage,
};
use crate::protocol::gatekeeper::{normalize, validate_run_with_question, GateStatus};
use crate::protocol::parse::check_executor_reference_ids;
use crate::protocol::{executor, parse_executor, schema};
use crate::protocol::{InvocationStatus, QueryRef, ToolInvocation};
use crate::tools::{InvocationLog, ToolSpec};

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

    /// A plan step run before the Executor's first turn: run like any call. A replay checks
    /// that the recording has the call as the plan's.
    fn run_plan_step<'a>(&'a self, name: &'a str, arguments: &'a Value) -> ToolResultFuture<'a> {
        self.run(name, arguments)
    }

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
pub use diag_records::step::{AgentStepRecord, ModelExchange, StepStatus};

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
    /// The run's limits; the runtime reads `max_turns`, `max_tool_calls` and `max_tokens`.
    pub limits: Limits,
    /// Run the plan's steps as tool calls before the Executor's first model turn
    /// (`[executor] run_plan_steps`; a replay: when its recording has them).
    pub run_plan_steps: bool,
}

/// The `agent` recorded for a tool call the runtime made from a plan step before the
/// Executor's first turn: the call is the Planner's step, not the Executor model's request.
pub const PLAN_STEP_AGENT: &str = "planner";

/// What the Executor's loop starts from: the calls already made for it (the plan's steps),
/// which spend its budget and which a model call repeating one is a duplicate of.
#[derive(Default)]
struct LoopStart {
    calls_made: u32,
    made: HashMap<QueryRef, String>,
}

struct CallSite<'a> {
    request: &'a AgentRequest,
    config: &'a RunConfig,
    turn: u32,
}

/// Why a tool call was not run.
enum Refusal {
    /// The same tool with the same canonical arguments was already called: in this Executor
    /// invocation, or (round 2) in the previous round. Names the first such call.
    Duplicate {
        of: Option<String>,
        previous_round: bool,
    },
    /// The call budget is spent.
    Budget,
}

impl Refusal {
    fn message(&self, budget: u32) -> String {
        match self {
            Refusal::Duplicate { of, previous_round } => {
                let of = of.as_deref().unwrap_or("an earlier call");
                let when = if *previous_round {
                    " in the previous round"
                } else {
                    ""
                };
                format!(
                    "duplicate of {of}: this exact call (same tool and arguments) was already \
                     made{when}; it is not run again. Use the recorded result of {of}, call \
                     something else, or give your final answer"
                )
            }
            Refusal::Budget => format!("tool call budget of {budget} exhausted"),
        }
    }
}

/// Why a reply cut off by the token limit without a tool call failed (a transient failure).
const TRUNCATED: &str = "response truncated at the token limit";

/// A reply cut off by the token limit without a tool call: recorded as `truncated`, and a
/// transient failure of the attempt unless the Executor's evidence turn follows.
fn is_truncated(r: &ChatResponse) -> bool {
    r.finish_reason == FinishReason::Length && r.tool_calls.is_empty()
}

/// Duplicate calls in a row after which the Executor is stopped (`repeating`).
pub const MAX_REPEATS_IN_A_ROW: u32 = 3;

impl ModelAgents {
    /// One model call for the agent, fitted to the model's context when it is known. A
    /// request that cannot fit is not sent (and is recorded as such); a request the server
    /// refuses as too long, stating its context size, is fitted to that size and sent once
    /// more (as the next turn, `turn < last_turn`) when fitting changes it. Returns the answer
    /// and the turn of the call that gave it.
    async fn call_model(
        &self,
        request: &AgentRequest,
        config: &RunConfig,
        turn: u32,
        last_turn: u32,
        draft: &Draft,
    ) -> Result<(ChatResponse, u32), InvokeError> {
        let model = self.models.for_role(request.role);
        let mut turn = turn;
        let mut scale_permille: u64 = 1000;
        let mut server_limit: Option<u32> = None;
        loop {
            let site = CallSite {
                request,
                config,
                turn,
            };
            let limits = model.request_limits();
            let asked = limits
                .max_tokens
                .unwrap_or_else(|| self.limits.max_tokens.for_role(request.role));
            let chat = match server_limit.or(limits.context_tokens) {
                None => {
                    let mut chat = draft.request.clone();
                    chat.max_tokens = Some(asked);
                    chat
                }
                Some(limit) => match fit(draft, limit, asked, scale_permille) {
                    Ok(fitted) => {
                        if fitted.shortened > 0 || fitted.lowered {
                            tracing::info!(
                                agent = request.role.as_str(),
                                context_tokens = limit,
                                shortened_tool_outputs = fitted.shortened,
                                max_tokens = fitted.request.max_tokens.unwrap_or(asked),
                                "request fitted to the model's context"
                            );
                        }
                        fitted.request
                    }
                    Err(overflow) => {
                        let mut chat = draft.request.clone();
                        chat.max_tokens = Some(asked);
                        chat.fit = Some(Fit {
                            context_tokens: limit,
                            max_tokens: asked,
                        });
                        let mut e = ModelError::context_overflow(overflow.message());
                        e.context_tokens = Some(limit);
                        e.usage = Some(Usage {
                            prompt_tokens: overflow.prompt_tokens,
                            completion_tokens: 0,
                        });
                        let e = model.not_sent(&chat, e);
                        self.record_exchange(&site, model.name(), &chat, Err(&e), None, 0);
                        return Err(invoke_error(&e));
                    }
                },
            };
            match self.send(&site, model.as_ref(), &chat).await {
                Err(e)
                    if e.class == ErrorClass::ContextOverflow
                        && server_limit.is_none()
                        && turn < last_turn =>
                {
                    // The server stated its context size: fit to it (scaled by the prompt size
                    // it reported) and send again if that changes the request.
                    let Some(limit) = e.context_tokens else {
                        return Err(invoke_error(&e));
                    };
                    let scale = match e.usage.map(|u| u.prompt_tokens) {
                        Some(reported) => {
                            let estimated = estimate(&chat, 1000).max(1);
                            (reported * 1000).div_ceil(estimated).max(1000)
                        }
                        None => 1000,
                    };
                    let refit = fit(draft, limit, asked, scale);
                    match refit {
                        Ok(f)
                            if f.request.messages != chat.messages
                                || f.request.max_tokens != chat.max_tokens =>
                        {
                            server_limit = Some(limit);
                            scale_permille = scale;
                            turn += 1;
                        }
                        _ => return Err(invoke_error(&e)),
                    }
                }
                Err(e) => return Err(invoke_error(&e)),
                Ok(response) => return Ok((response, turn)),
            }
        }
    }

    /// Sends one request and records it (step and exchange); a truncated reply
    /// ([`is_truncated`]) is recorded as such and returned for the caller to judge.
    async fn send(
        &self,
        site: &CallSite<'_>,
        model: &dyn ChatModel,
        chat: &ChatRequest,
    ) -> Result<ChatResponse, ModelError> {
        let role = site.request.role;
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
        let ms = crate::clock::millis(duration);
        match &outcome {
            Ok(r) => tracing::debug!(
                agent = role.as_str(),
                finish_reason = r.finish_reason.as_str(),
                tool_calls = r.tool_calls.len(),
                prompt_tokens = r.usage.map_or(0, |u| u.prompt_tokens),
                completion_tokens = r.usage.map_or(0, |u| u.completion_tokens),
                duration_ms = ms,
                "model answered"
            ),
            Err(e) => tracing::debug!(
                agent = role.as_str(),
                class = %e.class,
                error = %e.message,
                "model call failed"
            ),
        }
        match outcome {
            Ok(r) if is_truncated(&r) => {
                self.record_exchange(site, model.name(), chat, Ok(&r), Some(TRUNCATED), ms);
                Ok(r)
            }
            Ok(r) => {
                self.record_exchange(site, model.name(), chat, Ok(&r), None, ms);
                Ok(r)
            }
            Err(e) => {
                self.record_exchange(site, model.name(), chat, Err(&e), None, ms);
                Err(e)
            }
        }
    }

    fn record_exchange(
        &self,
        site: &CallSite<'_>,
        model: &str,
        chat: &ChatRequest,
        outcome: Result<&ChatResponse, &ModelError>,
        truncated: Option<&str>,
        duration_ms: u64,
    ) {
        let (status, usage, finish) = match outcome {
            Ok(r) if truncated.is_some() => (StepStatus::Truncated, r.usage, Some(r.finish_reason)),
            Ok(r) => (StepStatus::Ok, r.usage, Some(r.finish_reason)),
            Err(e) => (StepStatus::of(e.class), e.usage, None),
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
            duration_ms,
            prompt: site.request.system_prompt().audit(),
        };
        let exchange = ModelExchange {
            agent: site.request.role,
            round: site.request.round,
            attempt: site.request.attempt,
            turn: site.turn,
            request: chat.clone(),
            outcome: outcome.cloned().map_err(Clone::clone),
        };
        self.hooks.model_call(site.config, &step, &exchange);
    }

    fn first_request(&self, request: &AgentRequest, tools: Vec<ToolSpec>) -> ChatRequest {
        let mut messages = vec![
            Message::system(request.system_prompt().text),
            Message::user(request.input.clone()),
        ];
        if let Some(correction) = &request.correction {
            messages.push(Message::user(correction.clone()));
        }
        let mut chat = ChatRequest::new(messages);
        chat.tool_choice = Some(if tools.is_empty() {
            ToolChoice::None
        } else {
            ToolChoice::Auto
        });
        chat.tools = tools;
        chat.response_format = request.output_schema.clone();
        chat
    }

    async fn single_turn(
        &self,
        request: &AgentRequest,
        config: &RunConfig,
    ) -> Result<AgentReply, InvokeError> {
        let draft = Draft {
            request: self.first_request(request, Vec::new()),
            tool_results: Vec::new(),
        };
        // One call; a second only when the server states a context size to fit to.
        let (response, _) = self.call_model(request, config, 1, 2, &draft).await?;
        if is_truncated(&response) {
            return Err(InvokeError::Transient(TRUNCATED.to_string()));
        }
        Ok(AgentReply {
            content: response.content.unwrap_or_default(),
        })
    }

    /// The Executor: its tool loop, then, when the loop ended without an evidence document
    /// that meets the contract and the model takes output contracts, its evidence turn.
    async fn react(
        &self,
        request: &AgentRequest,
        config: &RunConfig,
    ) -> Result<AgentReply, InvokeError> {
        let mut draft = Draft {
            request: self.first_request(request, self.tools.catalog()),
            tool_results: Vec::new(),
        };
        let evidence = request
            .evidence
            .as_ref()
            .filter(|_| self.models.for_role(request.role).evidence_turn());
        let start = if self.run_plan_steps {
            self.run_plan(request, config, &mut draft).await?
        } else {
            LoopStart::default()
        };
        let (end, last_turn) = self
            .tool_loop(request, config, &mut draft, evidence.is_some(), start)
            .await?;
        let Some(evidence) = evidence else {
            return end.into_result(self.limits.max_tool_calls);
        };
        let invocations = self.log.invocations(config.run_id());
        let ids: Vec<&str> = invocations
            .iter()
            .map(|i| i.invocation_id.as_str())
            .collect();
        let kept: Vec<&str> = evidence.kept_claim_ids.iter().map(String::as_str).collect();
        let leaves = schema::evidence_leaves(
            &invocations,
            &evidence.relevance,
            schema::MAX_EVIDENCE_LEAVES,
        );
        if let LoopEnd::Answered(content) = &end {
            // The loop's document stands when it meets the contract and the Gatekeeper would
            // not refuse every claim of it (quotes a model made up are found at no pointer);
            // a document without claims stands only when the run has nothing to cite.
            let stands = parse_executor(content)
                .and_then(|output| {
                    check_executor_reference_ids(&output, &kept, &ids).map(|()| output)
                })
                .is_ok_and(|output| {
                    let raw = validate_run_with_question(
                        config.run_id(),
                        &evidence.question,
                        &output,
                        &invocations,
                    );
                    match normalize(Some(&raw)) {
                        GateStatus::Reject => false,
                        _ if output.claims.is_empty() => leaves.is_empty(),
                        GateStatus::Pass | GateStatus::LowConfid => true,
                    }
                });
            if stands {
                return Ok(AgentReply {
                    content: content.clone(),
                });
            }
            draft
                .request
                .messages
                .push(Message::assistant(Some(content.clone()), Vec::new()));
        }
        let (guidance, grammar) = schema::executor_evidence(&leaves, &ids, &kept);
        draft
            .request
            .messages
            .push(Message::user(prompts::EXECUTOR_EVIDENCE_TURN));
        draft.request.tools = Vec::new();
        draft.request.tool_choice = Some(ToolChoice::None);
        draft.request.response_format = Some(OutputSchema {
            name: executor::SCHEMA.to_string(),
            schema: guidance,
            grammar: Some(grammar),
        });
        draft.request.evidence_turn = true;
        tracing::debug!(
            loop_end = end.as_str(),
            leaves = leaves.len(),
            "executor evidence turn"
        );
        let turn = last_turn + 1;
        // One request; a second only when the server states a context size to fit to.
        let (response, _) = self
            .call_model(request, config, turn, turn + 1, &draft)
            .await?;
        if is_truncated(&response) {
            return Err(InvokeError::Transient(TRUNCATED.to_string()));
        }
        Ok(AgentReply {
            content: response.content.unwrap_or_default(),
        })
    }

    /// The plan's steps as tool calls, before the Executor's first model turn: each step not
    /// already made (the same tool and canonical arguments as an earlier step, or, in round 2,
    /// as a query the previous round completed) runs in plan order, as far as the tool-call
    /// budget goes. The calls are recorded with the agent [`PLAN_STEP_AGENT`] and invocation
    /// ids after the run's last, then shown to the model as one assistant turn of tool calls
    /// (each call's id is its invocation id) and their results, as if it had made them.
    async fn run_plan(
        &self,
        request: &AgentRequest,
        config: &RunConfig,
        draft: &mut Draft,
    ) -> Result<LoopStart, InvokeError> {
        let mut start = LoopStart::default();
        let base = self.log.invocations(config.run_id()).len();
        let mut calls: Vec<ToolCall> = Vec::new();
        for step in &request.plan_calls {
            if calls.len() >= usize::try_from(self.limits.max_tool_calls).unwrap_or(usize::MAX) {
                break;
            }
            let query = QueryRef::new(&step.tool, &step.arguments);
            if start.made.contains_key(&query) || request.completed_queries.contains(&query) {
                continue;
            }
            let id = format!("inv-{}", base + calls.len() + 1);
            tracing::debug!(
                invocation = %id,
                step = %crate::text::one_line(&step.step_id, 64),
                "plan step run before the executor's first turn"
            );
            start.made.insert(query, id.clone());
            calls.push(ToolCall {
                id,
                name: step.tool.clone(),
                arguments: step.arguments.clone(),
            });
        }
        if calls.is_empty() {
            return Ok(start);
        }
        start.calls_made = u32::try_from(calls.len()).unwrap_or(u32::MAX);
        let results = join_all(calls.iter().map(|call| async move {
            let began = self.clock.elapsed();
            let result = self.tools.run_plan_step(&call.name, &call.arguments).await;
            let ms = crate::clock::millis(self.clock.elapsed().saturating_sub(began));
            (result, ms)
        }))
        .await;
        draft
            .request
            .messages
            .push(Message::assistant(None, calls.clone()));
        for (call, (result, duration_ms)) in calls.iter().zip(results) {
            self.record_and_show(
                request,
                config,
                draft,
                RecordedCall {
                    id: &call.id,
                    call,
                    agent: PLAN_STEP_AGENT,
                    result,
                    duration_ms,
                },
            )?;
        }
        Ok(start)
    }

    /// Records one tool call's result and, once it is kept, shows it to the model as the
    /// tool result of `call`. A result that could not be kept is never shown: the Executor
    /// stops there and fails.
    fn record_and_show(
        &self,
        request: &AgentRequest,
        config: &RunConfig,
        draft: &mut Draft,
        c: RecordedCall<'_>,
    ) -> Result<(), InvokeError> {
        let RecordedCall {
            id,
            call,
            agent,
            result,
            duration_ms,
        } = c;
        tracing::debug!(
            invocation = %id,
            agent,
            tool = %crate::text::one_line(&call.name, 64),
            status = result.status.as_str(),
            duration_ms,
            "tool call"
        );
        let recorded = self.log.record(
            config,
            ToolInvocation {
                run_id: config.run_id().to_string(),
                session_id: config.session_id().to_string(),
                invocation_id: id.to_string(),
                agent: agent.to_string(),
                round: request.round,
                tool_name: call.name.clone(),
                arguments: call.arguments.clone(),
                output: result.output.clone(),
                status: result.status,
                duration_ms,
            },
        );
        // openspec/specs/tools/spec.md: each result is recorded before the model sees it.
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
        draft
            .tool_results
            .push((draft.request.messages.len(), shown.clone()));
        draft
            .request
            .messages
            .push(Message::tool_result(call.id.clone(), shown.to_string()));
        Ok(())
    }

    /// The Executor's bounded tool loop: model → tool calls → recorded results → model, until
    /// the model answers without a tool call, the turns run out, or it repeats itself; with
    /// `budget_ends`, also once the tool-call budget is spent. It starts from the calls made
    /// for it (`start`: the plan's steps). A tool call the model writes in its content
    /// ([`answer_tool_calls`]) is a tool call. Returns how it ended and the last turn it used.
    async fn tool_loop(
        &self,
        request: &AgentRequest,
        config: &RunConfig,
        draft: &mut Draft,
        budget_ends: bool,
        start: LoopStart,
    ) -> Result<(LoopEnd, u32), InvokeError> {
        let max_turns = self.limits.max_turns;
        let mut calls_made: u32 = start.calls_made;
        let mut last_blocked = false;
        let mut repeats_in_a_row: u32 = 0;
        // The calls made for this invocation, by tool and canonical arguments: the
        // invocation id of the first.
        let mut made: HashMap<QueryRef, String> = start.made;
        let mut turn: u32 = 1;
        while turn <= max_turns {
            let (response, used) = self
                .call_model(request, config, turn, max_turns, draft)
                .await?;
            if is_truncated(&response) {
                // A final answer cut off by the token limit does not meet the contract: with
                // an evidence turn to follow, the loop ends there; without one it failed.
                let cut = InvokeError::Transient(TRUNCATED.to_string());
                return if budget_ends {
                    Ok((LoopEnd::Truncated(cut), used))
                } else {
                    Err(cut)
                };
            }
            turn = used + 1;
            let tool_calls = answer_tool_calls(&draft.request.tools, &response);
            if tool_calls.is_empty() {
                return Ok((
                    LoopEnd::Answered(response.content.unwrap_or_default()),
                    used,
                ));
            }
            // Calls read from the content are shown to the model as the calls they are.
            let content = if response.tool_calls.is_empty() {
                None
            } else {
                response.content.clone()
            };
            // Invocation ids are run-local and follow the model's order, across rounds.
            let recorded_before = self.log.invocations(config.run_id());
            let base = recorded_before.len();
            // A call that repeats one already made (in this invocation, or a completed query
            // of the previous round, openspec/specs/diagnosis-graph/spec.md) is not run and spends no budget; neither is a
            // call past the budget.
            let planned: Vec<(String, Option<Refusal>)> = tool_calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let id = format!("inv-{}", base + i + 1);
                    let query = QueryRef::new(&call.name, &call.arguments);
                    let refusal = if let Some(first) = made.get(&query) {
                        Some(Refusal::Duplicate {
                            of: Some(first.clone()),
                            previous_round: false,
                        })
                    } else if request.completed_queries.contains(&query) {
                        let of = recorded_before
                            .iter()
                            .find(|inv| {
                                inv.round < request.round
                                    && QueryRef::new(&inv.tool_name, &inv.arguments) == query
                            })
                            .map(|inv| inv.invocation_id.clone());
                        Some(Refusal::Duplicate {
                            of,
                            previous_round: true,
                        })
                    } else if calls_made < self.limits.max_tool_calls {
                        calls_made += 1;
                        None
                    } else {
                        Some(Refusal::Budget)
                    };
                    made.entry(query).or_insert_with(|| id.clone());
                    (id, refusal)
                })
                .collect();
            let budget = self.limits.max_tool_calls;
            let results = join_all(tool_calls.iter().zip(&planned).map(
                |(call, (_, refusal))| async move {
                    let began = self.clock.elapsed();
                    let result = match refusal {
                        None => self.tools.run(&call.name, &call.arguments).await,
                        Some(refusal) => {
                            let mut output = json!({ "error": refusal.message(budget) });
                            if let Refusal::Duplicate { of: Some(of), .. } = refusal {
                                output["duplicate_of"] = json!(of);
                            }
                            let blocked = ToolResult {
                                status: InvocationStatus::Blocked,
                                output,
                            };
                            self.tools
                                .blocked(&call.name, &call.arguments, blocked)
                                .await
                        }
                    };
                    let ms = crate::clock::millis(self.clock.elapsed().saturating_sub(began));
                    (result, ms)
                },
            ))
            .await;
            draft
                .request
                .messages
                .push(Message::assistant(content, tool_calls.clone()));
            last_blocked = true;
            for ((call, (id, refusal)), (result, duration_ms)) in
                tool_calls.iter().zip(&planned).zip(results)
            {
                last_blocked &= result.status == InvocationStatus::Blocked;
                if matches!(refusal, Some(Refusal::Duplicate { .. })) {
                    repeats_in_a_row += 1;
                } else {
                    repeats_in_a_row = 0;
                }
                self.record_and_show(
                    request,
                    config,
                    draft,
                    RecordedCall {
                        id,
                        call,
                        agent: request.role.as_str(),
                        result,
                        duration_ms,
                    },
                )?;
            }
            if repeats_in_a_row >= MAX_REPEATS_IN_A_ROW {
                return Ok((
                    LoopEnd::Stopped(InvokeError::Repeating(format!(
                        "the model asked {repeats_in_a_row} times in a row for tool calls it \
                         had already made (same tool and arguments); they were not run again"
                    ))),
                    turn - 1,
                ));
            }
            if budget_ends && calls_made >= self.limits.max_tool_calls {
                return Ok((LoopEnd::BudgetSpent, turn - 1));
            }
        }
        // openspec/specs/tools/spec.md: an Executor that ends blocked is TOOL_BLOCKED; one whose last calls ran
        // but that never answered simply failed.
        let stopped = if last_blocked {
            InvokeError::ToolBlocked(format!(
                "the last tool calls were blocked and no final answer followed ({max_turns} turns)"
            ))
        } else {
            InvokeError::TurnLimit(format!(
                "turn limit reached without a final answer ({max_turns} turns)"
            ))
        };
        Ok((LoopEnd::Stopped(stopped), turn - 1))
    }
}

/// One tool call to record and show: its invocation id, the call, who made it, its result.
struct RecordedCall<'a> {
    id: &'a str,
    call: &'a ToolCall,
    agent: &'a str,
    result: ToolResult,
    duration_ms: u64,
}

/// How the Executor's tool loop ended, when no model call failed.
enum LoopEnd {
    /// The model answered without a tool call.
    Answered(String),
    /// The tool-call budget was spent (a loop that ends there has an evidence turn).
    BudgetSpent,
    /// The turns ran out, or the model kept repeating calls already made.
    Stopped(InvokeError),
    /// The model's answer was cut off by the token limit (with an evidence turn to follow).
    Truncated(InvokeError),
}

impl LoopEnd {
    fn as_str(&self) -> &'static str {
        match self {
            LoopEnd::Answered(_) => "answered",
            LoopEnd::BudgetSpent => "tool_budget",
            LoopEnd::Stopped(e) => e.kind(),
            LoopEnd::Truncated(_) => "truncated",
        }
    }

    /// The Executor's result when no evidence turn follows.
    fn into_result(self, budget: u32) -> Result<AgentReply, InvokeError> {
        match self {
            LoopEnd::Answered(content) => Ok(AgentReply { content }),
            LoopEnd::BudgetSpent => Err(InvokeError::ToolBlocked(format!(
                "tool call budget of {budget} spent and no final answer followed"
            ))),
            LoopEnd::Stopped(e) | LoopEnd::Truncated(e) => Err(e),
        }
    }
}

/// The agent-level failure for a failed model call.
fn invoke_error(e: &ModelError) -> InvokeError {
    match e.class {
        ErrorClass::ContextOverflow => InvokeError::ContextOverflow {
            message: e.message.clone(),
            context_tokens: e.context_tokens,
            prompt_tokens: e.usage.map(|u| u.prompt_tokens),
        },
        _ if e.is_authentication() => InvokeError::Authentication(e.message.clone()),
        ErrorClass::Transient => InvokeError::Transient(e.message.clone()),
        ErrorClass::Permanent => InvokeError::Permanent(e.message.clone()),
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
