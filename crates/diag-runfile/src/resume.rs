//! Resuming a FAILED run (`diag ask --resume`): the original run's stored exchanges are served
//! in order through the same [`Tape`] that replay uses, with the same checks (the agent of each
//! model call, the sha256 of its request, the tool name and arguments of each tool call), until
//! they run out or a call diverges; from then on every call goes to the live model and tools.
//!
//! Reuse is a prefix: once a call is made live, no later stored exchange is served, so a stale
//! answer is never reused after a divergence. A stored call that failed (an endpoint outage, a
//! refused request) is not reused either: reuse stops there and the call is made again live,
//! which is what resuming after an outage is for.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::tape::Tape;
use super::{Divergence, Exchange, ToolRecord};
use diag_core::agent::runtime::{AgentModels, ToolResult, ToolResultFuture, ToolRunner};
use diag_core::agent::AgentRole;
use diag_core::model::{
    ChatFuture, ChatModel, ChatRequest, ChatResponse, ModelError, RequestLimits,
};
use diag_core::store::Reuse;
use diag_core::tools::ToolSpec;

/// Why reuse stopped before the stored exchanges ran out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// Where, as a [`Divergence`] (exchange index into the original run's exchanges).
    pub at: Divergence,
    /// True for a divergence (the graph asked something else than the original run did);
    /// false for a stored failed call that is made again live.
    pub divergence: bool,
}

#[derive(Default)]
struct ReuseState {
    /// Every call from now on is live.
    live: bool,
    model_calls: u32,
    tool_calls: u32,
    stop: Option<Stop>,
}

/// The original run's exchanges, served until they run out or diverge.
pub struct Reusing {
    tape: Arc<Tape>,
    state: Mutex<ReuseState>,
}

impl Reusing {
    /// Serves `exchanges` (the original run's, in order; `tools` is its catalog).
    pub fn new(exchanges: Vec<Exchange>, tools: Vec<ToolSpec>) -> Arc<Reusing> {
        Arc::new(Reusing {
            tape: Tape::new(exchanges, tools),
            state: Mutex::new(ReuseState::default()),
        })
    }

    /// What was reused so far.
    pub fn reuse(&self) -> Reuse {
        match self.state.lock() {
            Ok(st) => Reuse {
                model_calls: st.model_calls,
                tool_calls: st.tool_calls,
                stopped: st.stop.as_ref().map(|s| s.at.to_string()),
            },
            Err(_) => Reuse {
                stopped: Some("the resume state was lost".to_string()),
                ..Reuse::default()
            },
        }
    }

    /// Why reuse stopped early, if it did.
    pub fn stop(&self) -> Option<Stop> {
        self.state.lock().ok()?.stop.clone()
    }

    fn stop_at(st: &mut ReuseState, exchange: usize, message: String, divergence: bool) {
        st.live = true;
        if st.stop.is_none() {
            st.stop = Some(Stop {
                at: Divergence { exchange, message },
                divergence,
            });
        }
    }

    /// The state, or `None` when the call is to be made live.
    fn serving(&self) -> Option<std::sync::MutexGuard<'_, ReuseState>> {
        let mut st = self.state.lock().ok()?;
        if st.live {
            return None;
        }
        if !self.tape.serving() {
            // The stored exchanges ran out: live from here, which is no divergence.
            st.live = true;
            return None;
        }
        Some(st)
    }

    /// The stored response to this model call, or `None` when it is to be made live.
    fn model(&self, role: AgentRole, request: &ChatRequest) -> Option<ChatResponse> {
        let mut st = self.serving()?;
        let at = self.tape.position();
        match self.tape.next_model(role, request) {
            Err(message) => {
                let d = self.tape.diverged().unwrap_or(Divergence {
                    exchange: at,
                    message,
                });
                Self::stop_at(&mut st, d.exchange, d.message, true);
                None
            }
            Ok(record) if record.request_sha256.is_none() => {
                let m = format!(
                    "the stored call for {role} has no request hash to check it against; it is \
                     made live"
                );
                Self::stop_at(&mut st, at, m, true);
                None
            }
            Ok(record) => match (record.response, record.error) {
                (Some(response), _) => {
                    st.model_calls += 1;
                    Some(response.to_response())
                }
                (None, Some(e)) => {
                    let e = e.to_error();
                    let m = format!(
                        "the original run's call for {role} failed ({}: {}); it is made again \
                         live",
                        e.class.as_str(),
                        diag_core::text::bounded(&e.message, 120)
                    );
                    Self::stop_at(&mut st, at, m, false);
                    None
                }
                (None, None) => {
                    let m = format!("the stored call for {role} has no response; it is made live");
                    Self::stop_at(&mut st, at, m, false);
                    None
                }
            },
        }
    }

    /// A model call the runtime did not send (it cannot fit the context). The original run
    /// recorded it too, as its error: taken off the tape when it matches, since it cost
    /// nothing; a stored call that was sent is a divergence.
    fn not_sent(&self, role: AgentRole, request: &ChatRequest) {
        let Some(mut st) = self.serving() else {
            return;
        };
        let at = self.tape.position();
        match self.tape.next_model(role, request) {
            Ok(record) if record.response.is_none() && record.request_sha256.is_some() => {
                st.model_calls += 1;
            }
            Ok(_) => {
                let m = format!(
                    "the {role} request does not fit the context now, but the original run sent \
                     it"
                );
                Self::stop_at(&mut st, at, m, true);
            }
            Err(message) => {
                let d = self.tape.diverged().unwrap_or(Divergence {
                    exchange: at,
                    message,
                });
                Self::stop_at(&mut st, d.exchange, d.message, true);
            }
        }
    }

    /// The stored result of this tool call, or `None` when it is to be made live.
    fn tool(
        &self,
        name: &str,
        arguments: &Value,
        budget_blocked: bool,
        plan_step: bool,
    ) -> Option<ToolRecord> {
        let mut st = self.serving()?;
        let at = self.tape.position();
        let taken = self
            .tape
            .next_tool(name, arguments, budget_blocked, plan_step);
        // A call outside the original catalog is served blocked, but may still diverge.
        match (taken, self.tape.diverged()) {
            (Ok(record), None) => {
                st.tool_calls += 1;
                Some(record)
            }
            (_, Some(d)) => {
                Self::stop_at(&mut st, d.exchange, d.message, true);
                None
            }
            (Err(message), None) => {
                Self::stop_at(&mut st, at, message, true);
                None
            }
        }
    }
}

/// One agent's model in a resumed run: the stored response while reuse lasts, then `live`.
/// Requests are built as the live run builds them (its context size and limits), so a
/// configuration that changed since the original run shows as a changed request hash.
pub struct ResumedModel {
    pub role: AgentRole,
    pub reusing: Arc<Reusing>,
    pub live: Arc<dyn ChatModel>,
}

impl ChatModel for ResumedModel {
    fn name(&self) -> &str {
        self.live.name()
    }

    fn context_tokens(&self) -> Option<u32> {
        self.live.context_tokens()
    }

    fn request_limits(&self) -> RequestLimits {
        self.live.request_limits()
    }

    fn evidence_turn(&self) -> bool {
        self.live.evidence_turn()
    }

    fn not_sent(&self, request: &ChatRequest, error: ModelError) -> ModelError {
        self.reusing.not_sent(self.role, request);
        self.live.not_sent(request, error)
    }

    fn complete<'a>(&'a self, request: &'a ChatRequest) -> ChatFuture<'a> {
        match self.reusing.model(self.role, request) {
            Some(response) => Box::pin(std::future::ready(Ok(response))),
            None => self.live.complete(request),
        }
    }
}

/// The tools of a resumed run: the stored results while reuse lasts, then `live`.
pub struct ResumedTools {
    pub reusing: Arc<Reusing>,
    pub live: Arc<dyn ToolRunner>,
}

impl ToolRunner for ResumedTools {
    fn catalog(&self) -> Vec<ToolSpec> {
        self.live.catalog()
    }

    fn run<'a>(&'a self, name: &'a str, arguments: &'a Value) -> ToolResultFuture<'a> {
        match self.reusing.tool(name, arguments, false, false) {
            Some(record) => Box::pin(std::future::ready(ToolResult {
                status: record.status,
                output: record.output,
            })),
            None => self.live.run(name, arguments),
        }
    }

    fn run_plan_step<'a>(&'a self, name: &'a str, arguments: &'a Value) -> ToolResultFuture<'a> {
        match self.reusing.tool(name, arguments, false, true) {
            Some(record) => Box::pin(std::future::ready(ToolResult {
                status: record.status,
                output: record.output,
            })),
            None => self.live.run_plan_step(name, arguments),
        }
    }

    fn blocked<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Value,
        result: ToolResult,
    ) -> ToolResultFuture<'a> {
        match self.reusing.tool(name, arguments, true, false) {
            Some(_) => Box::pin(std::future::ready(result)),
            None => self.live.blocked(name, arguments, result),
        }
    }
}

/// The live models of the four agents, each behind a [`ResumedModel`] over `reusing`.
pub fn resumed_models(live: &AgentModels, reusing: &Arc<Reusing>) -> AgentModels {
    let wrap = |role: AgentRole| -> Arc<dyn ChatModel> {
        Arc::new(ResumedModel {
            role,
            reusing: reusing.clone(),
            live: live.for_role(role).clone(),
        })
    };
    let overrides = [
        AgentRole::Planner,
        AgentRole::Executor,
        AgentRole::Verifier,
        AgentRole::Composer,
    ]
    .into_iter()
    .map(|role| (role, wrap(role)))
    .collect();
    AgentModels {
        default: wrap(AgentRole::Planner),
        overrides,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ModelRecord, RecordedResponse};
    use diag_core::model::{FinishReason, Message};

    fn request(text: &str) -> ChatRequest {
        ChatRequest::new(vec![Message::user(text)])
    }

    fn stored(role: AgentRole, text: &str, answer: &str) -> Exchange {
        Exchange::Model(ModelRecord {
            agent: role,
            round: 1,
            attempt: 1,
            turn: 1,
            request_sha256: diag_core::hash::request_sha256(&request(text)).ok(),
            prompt_version: None,
            max_tokens: None,
            fit: None,
            evidence_turn: false,
            response: Some(RecordedResponse::from_response(&ChatResponse {
                content: Some(answer.to_string()),
                tool_calls: Vec::new(),
                finish_reason: FinishReason::Stop,
                usage: None,
                structured_output: None,
            })),
            error: None,
        })
    }

    #[test]
    fn stored_calls_are_served_until_they_run_out_then_live() {
        let reusing = Reusing::new(
            vec![stored(AgentRole::Planner, "plan", "the plan")],
            Vec::new(),
        );
        let served = reusing.model(AgentRole::Planner, &request("plan"));
        assert_eq!(served.and_then(|r| r.content), Some("the plan".to_string()));
        assert_eq!(reusing.model(AgentRole::Executor, &request("act")), None);
        assert_eq!(
            reusing.reuse(),
            Reuse {
                model_calls: 1,
                tool_calls: 0,
                stopped: None
            }
        );
    }

    #[test]
    fn a_changed_request_stops_reuse_there_for_good() {
        let reusing = Reusing::new(
            vec![
                stored(AgentRole::Planner, "plan", "the plan"),
                stored(AgentRole::Executor, "act", "evidence"),
                stored(AgentRole::Verifier, "verify", "verdict"),
            ],
            Vec::new(),
        );
        assert!(reusing
            .model(AgentRole::Planner, &request("plan"))
            .is_some());
        assert_eq!(
            reusing.model(AgentRole::Executor, &request("act differently")),
            None
        );
        // The next stored call would match, but reuse never comes back after a divergence.
        assert_eq!(reusing.model(AgentRole::Verifier, &request("verify")), None);
        let stop = reusing.stop().unwrap();
        assert!(stop.divergence);
        assert_eq!(stop.at.exchange, 1);
        assert!(
            stop.at.message.contains("request for executor changed"),
            "{}",
            stop.at
        );
        assert_eq!(reusing.reuse().model_calls, 1);
    }
}
