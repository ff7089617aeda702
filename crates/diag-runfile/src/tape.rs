//! Recording and replay. A [`Tape`] serves a run file's exchanges in order to per-agent
//! [`RecordedModel`]s and to [`RecordedTools`], and keeps the first divergence it sees; a
//! [`Recorder`] collects a live run's exchanges in order to write a run file.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::{Exchange, ModelRecord, RecordedError, RecordedResponse, ToolRecord};
use diag_core::agent::runtime::{
    ModelExchange, RunHooks, ToolResult, ToolResultFuture, ToolRunner, PLAN_STEP_AGENT,
};
use diag_core::agent::AgentRole;
use diag_core::graph::RunConfig;
use diag_core::hash::request_sha256;
use diag_core::model::{ChatFuture, ChatModel, ChatRequest, ModelError, RequestLimits};
use diag_core::protocol::{canonical_json, ComposerContract, InvocationStatus, ToolInvocation};
use diag_core::tools::registry::unknown_tool;
use diag_core::tools::{InvocationLog, ToolSpec};

/// The first point where a replayed run did something other than the recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// Index into `exchanges`; equal to their count when the recording ran out.
    pub exchange: usize,
    pub message: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exchange {}: {}", self.exchange, self.message)
    }
}

struct TapeState {
    next: usize,
    divergence: Option<Divergence>,
}

/// A run file's exchanges, served in recorded order.
pub struct Tape {
    exchanges: Vec<Exchange>,
    tools: Vec<ToolSpec>,
    state: Mutex<TapeState>,
}

impl Tape {
    pub fn new(exchanges: Vec<Exchange>, tools: Vec<ToolSpec>) -> Arc<Tape> {
        Arc::new(Tape {
            exchanges,
            tools,
            state: Mutex::new(TapeState {
                next: 0,
                divergence: None,
            }),
        })
    }

    /// Whether the next call can still be served: no divergence yet and exchanges left.
    pub(super) fn serving(&self) -> bool {
        self.state
            .lock()
            .is_ok_and(|st| st.divergence.is_none() && st.next < self.exchanges.len())
    }

    /// The divergence the tape met while serving, if any (unused exchanges are not one).
    pub(super) fn diverged(&self) -> Option<Divergence> {
        self.state.lock().ok()?.divergence.clone()
    }

    /// The index of the next exchange to serve.
    pub(super) fn position(&self) -> usize {
        self.state.lock().map_or(0, |st| st.next)
    }

    /// The first divergence, if any; also reported when exchanges were left unused.
    pub fn divergence(&self) -> Option<Divergence> {
        let st = self.state.lock().ok()?;
        if let Some(d) = &st.divergence {
            return Some(d.clone());
        }
        (st.next < self.exchanges.len()).then(|| Divergence {
            exchange: st.next,
            message: format!(
                "the run ended with {} recorded exchange(s) unused",
                self.exchanges.len() - st.next
            ),
        })
    }

    fn diverge(&self, st: &mut TapeState, message: String) -> String {
        let d = Divergence {
            exchange: st.next,
            message,
        };
        let text = d.to_string();
        if st.divergence.is_none() {
            st.divergence = Some(d);
        }
        text
    }

    pub(super) fn next_model(
        &self,
        role: AgentRole,
        request: &ChatRequest,
    ) -> Result<ModelRecord, String> {
        let mut st = self
            .state
            .lock()
            .map_err(|_| "replay tape poisoned".to_string())?;
        if let Some(d) = &st.divergence {
            return Err(format!("replay already diverged at {d}"));
        }
        let i = st.next;
        let record = match self.exchanges.get(i) {
            None => {
                let m =
                    format!("recording exhausted: a model call for {role} has no exchange left");
                return Err(self.diverge(&mut st, m));
            }
            Some(Exchange::Tool(t)) => {
                let m = format!(
                    "expected tool call {} ({}), got a model call for {role}",
                    t.invocation_id, t.tool_name
                );
                return Err(self.diverge(&mut st, m));
            }
            Some(Exchange::Model(m)) => m.clone(),
        };
        if record.agent != role {
            let m = format!(
                "expected a model call for {}, got one for {role}",
                record.agent
            );
            return Err(self.diverge(&mut st, m));
        }
        if let Some(want) = &record.request_sha256 {
            match request_sha256(request) {
                Ok(got) if &got == want => {}
                Ok(got) => {
                    let m = format!("request for {role} changed (sha256 {got}, recorded {want})");
                    return Err(self.diverge(&mut st, m));
                }
                Err(e) => {
                    let m = format!("request for {role} could not be hashed: {e}");
                    return Err(self.diverge(&mut st, m));
                }
            }
        }
        st.next += 1;
        Ok(record)
    }

    /// Whether the recorded run had an evidence turn: then the replay's Executor has one
    /// where the recorded run had it (the runtime decides where, the recording checks it).
    fn has_evidence_turn(&self) -> bool {
        self.exchanges
            .iter()
            .any(|x| matches!(x, Exchange::Model(m) if m.evidence_turn))
    }

    /// The contract the recorded run asked its Composer for: the one its Composer's recorded
    /// prompt version explains; `composer_answer_v1` for a file that records none (written
    /// before the version was recorded, or by hand).
    pub fn composer_contract(&self) -> ComposerContract {
        self.exchanges
            .iter()
            .find_map(|x| match x {
                Exchange::Model(m) if m.agent == AgentRole::Composer => m.prompt_version,
                _ => None,
            })
            .and_then(ComposerContract::from_prompt_version)
            .unwrap_or(ComposerContract::V1)
    }

    /// Whether the recorded run ran the plan's steps before the Executor's first turn: then
    /// the replay does too (the runtime decides which, the recording checks them).
    pub fn has_plan_steps(&self) -> bool {
        self.exchanges
            .iter()
            .any(|x| matches!(x, Exchange::Tool(t) if t.plan_step))
    }

    /// The recorded limits of the next exchange, when it is a model call for `role`.
    fn next_limits(&self, role: AgentRole) -> RequestLimits {
        let Ok(st) = self.state.lock() else {
            return RequestLimits::default();
        };
        match self.exchanges.get(st.next) {
            Some(Exchange::Model(m)) if m.agent == role => match m.fit {
                Some(fit) => RequestLimits {
                    context_tokens: Some(fit.context_tokens),
                    max_tokens: Some(fit.max_tokens),
                },
                None => RequestLimits {
                    context_tokens: None,
                    max_tokens: m.max_tokens,
                },
            },
            _ => RequestLimits::default(),
        }
    }

    /// Records a divergence found after the exchange was taken (the one before `next`).
    fn mark_divergence(&self, message: String) {
        if let Ok(mut st) = self.state.lock() {
            st.next = st.next.saturating_sub(1);
            self.diverge(&mut st, message);
        }
    }

    /// The next exchange as the tool call `name(arguments)`. `budget_blocked` says the
    /// runtime blocked the call itself (call budget spent), which matches only a recorded
    /// `blocked` call; a call the runner answers may match any recorded status. `plan_step`
    /// says the runtime ran it from the plan, which matches only a call recorded as one.
    pub(super) fn next_tool(
        &self,
        name: &str,
        arguments: &Value,
        budget_blocked: bool,
        plan_step: bool,
    ) -> Result<ToolRecord, String> {
        let mut st = self
            .state
            .lock()
            .map_err(|_| "replay tape poisoned".to_string())?;
        if let Some(d) = &st.divergence {
            return Err(format!("replay already diverged at {d}"));
        }
        let record = match self.exchanges.get(st.next) {
            None => {
                let m = format!("recording exhausted: tool call {name} has no exchange left");
                return Err(self.diverge(&mut st, m));
            }
            Some(Exchange::Model(m)) => {
                let m = format!(
                    "expected a model call for {}, got tool call {name}",
                    m.agent
                );
                return Err(self.diverge(&mut st, m));
            }
            Some(Exchange::Tool(t)) => t.clone(),
        };
        if record.tool_name != name {
            let m = format!("expected tool {}, got {name}", record.tool_name);
            return Err(self.diverge(&mut st, m));
        }
        if record.plan_step != plan_step {
            let (recorded, replayed) = if plan_step {
                ("a model's call", "a plan step")
            } else {
                ("a plan step", "a model's call")
            };
            let m = format!(
                "tool call {} ({name}) is recorded as {recorded}, replayed as {replayed}",
                record.invocation_id
            );
            return Err(self.diverge(&mut st, m));
        }
        if canonical_json(&record.arguments) != canonical_json(arguments) {
            let m = format!(
                "tool {name} called with other arguments: {} (recorded {})",
                bounded(&canonical_json(arguments)),
                bounded(&canonical_json(&record.arguments))
            );
            return Err(self.diverge(&mut st, m));
        }
        if !budget_blocked && !self.tools.iter().any(|t| t.name == name) {
            // A live run's registry blocks a call outside its catalog; so does the replay,
            // whatever the recording says it returned.
            let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
            let blocked = unknown_tool(name, &names);
            if record.status != InvocationStatus::Blocked || record.output != blocked.output {
                let m = format!(
                    "tool call {} ({name}) names a tool outside the run file's catalog, which a \
                     live run blocks, but the recording has status {} and output {}",
                    record.invocation_id,
                    record.status.as_str(),
                    bounded(&canonical_json(&record.output))
                );
                self.diverge(&mut st, m);
            }
            st.next += 1;
            return Ok(ToolRecord {
                status: blocked.status,
                output: blocked.output,
                ..record
            });
        }
        if budget_blocked && record.status != InvocationStatus::Blocked {
            let m = format!(
                "tool call {} ({name}) was blocked by the call budget, but the recording ran it \
                 (status {})",
                record.invocation_id,
                record.status.as_str()
            );
            return Err(self.diverge(&mut st, m));
        }
        st.next += 1;
        Ok(record)
    }
}

fn bounded(s: &str) -> String {
    diag_core::text::bounded(s, 120)
}

/// One agent's model during replay.
pub struct RecordedModel {
    pub role: AgentRole,
    pub tape: Arc<Tape>,
}

impl ChatModel for RecordedModel {
    fn name(&self) -> &str {
        "recorded"
    }

    /// What the recorded run fitted this agent's next request with, so the replay builds the
    /// same request.
    fn request_limits(&self) -> RequestLimits {
        self.tape.next_limits(self.role)
    }

    fn evidence_turn(&self) -> bool {
        self.tape.has_evidence_turn()
    }

    /// The recording holds the call the runtime did not send; it is taken off the tape like
    /// any other, and its recorded error is the outcome.
    fn not_sent(&self, request: &ChatRequest, error: ModelError) -> ModelError {
        match self.tape.next_model(self.role, request) {
            Ok(record) => match record.error {
                Some(e) => e.to_error(),
                None => {
                    let message = format!(
                        "replay divergence: the {} request did not fit the context ({}), but the \
                         recording sent it",
                        self.role, error.message
                    );
                    self.tape.mark_divergence(message.clone());
                    ModelError::permanent(message)
                }
            },
            Err(message) => ModelError::permanent(format!("replay divergence: {message}")),
        }
    }

    fn complete<'a>(&'a self, request: &'a ChatRequest) -> ChatFuture<'a> {
        let result = match self.tape.next_model(self.role, request) {
            Ok(record) => match (&record.response, &record.error) {
                (Some(r), _) => Ok(r.to_response()),
                (None, Some(e)) => Err(e.to_error()),
                (None, None) => Err(ModelError::permanent("recorded exchange has no response")),
            },
            // A divergence is permanent so the run ends promptly; the replay reports it.
            Err(message) => Err(ModelError::permanent(format!(
                "replay divergence: {message}"
            ))),
        };
        Box::pin(std::future::ready(result))
    }
}

/// The tools during replay: recorded outputs, checked against name and arguments.
pub struct RecordedTools {
    pub tape: Arc<Tape>,
}

impl ToolRunner for RecordedTools {
    fn catalog(&self) -> Vec<ToolSpec> {
        self.tape.tools.clone()
    }

    fn run<'a>(&'a self, name: &'a str, arguments: &'a Value) -> ToolResultFuture<'a> {
        Box::pin(std::future::ready(self.served(name, arguments, false)))
    }

    fn run_plan_step<'a>(&'a self, name: &'a str, arguments: &'a Value) -> ToolResultFuture<'a> {
        Box::pin(std::future::ready(self.served(name, arguments, true)))
    }

    /// A budget-blocked call was recorded too (the recorder logs every invocation), so it
    /// takes its exchange off the tape like any other call.
    fn blocked<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Value,
        result: ToolResult,
    ) -> ToolResultFuture<'a> {
        let result = match self.tape.next_tool(name, arguments, true, false) {
            Ok(_) => result,
            Err(message) => divergence_result(&message),
        };
        Box::pin(std::future::ready(result))
    }
}

impl RecordedTools {
    /// The recorded result of the next call, or the divergence as an error result.
    fn served(&self, name: &str, arguments: &Value, plan_step: bool) -> ToolResult {
        match self.tape.next_tool(name, arguments, false, plan_step) {
            Ok(record) => ToolResult {
                status: record.status,
                output: record.output,
            },
            Err(message) => divergence_result(&message),
        }
    }
}

fn divergence_result(message: &str) -> ToolResult {
    ToolResult {
        status: InvocationStatus::Error,
        output: serde_json::json!({"error": format!("replay divergence: {message}")}),
    }
}

/// Collects a live run's exchanges in order: model calls through [`RunHooks`], tool calls
/// through [`InvocationLog`] (forwarded to the inner log).
pub struct Recorder {
    inner: Arc<dyn InvocationLog>,
    exchanges: Mutex<Vec<Exchange>>,
}

impl Recorder {
    pub fn new(inner: Arc<dyn InvocationLog>) -> Arc<Recorder> {
        Arc::new(Recorder {
            inner,
            exchanges: Mutex::new(Vec::new()),
        })
    }

    pub fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges.lock().map(|e| e.clone()).unwrap_or_default()
    }

    fn push(&self, x: Exchange) {
        if let Ok(mut e) = self.exchanges.lock() {
            e.push(x);
        }
    }
}

impl RunHooks for Recorder {
    fn model_exchange(&self, _config: &RunConfig, x: &ModelExchange) {
        let (response, error) = match &x.outcome {
            Ok(r) => (Some(RecordedResponse::from_response(r)), None),
            Err(e) => (None, Some(RecordedError::from_error(e))),
        };
        self.push(Exchange::Model(ModelRecord {
            agent: x.agent,
            round: x.round,
            attempt: x.attempt,
            turn: x.turn,
            request_sha256: request_sha256(&x.request).ok(),
            prompt_version: crate::prompt_version_of(x.agent, &x.request),
            max_tokens: x.request.max_tokens,
            fit: x.request.fit,
            evidence_turn: x.request.evidence_turn,
            response,
            error,
        }));
    }
}

impl InvocationLog for Recorder {
    fn record(&self, config: &RunConfig, invocation: ToolInvocation) -> Result<(), String> {
        self.push(Exchange::Tool(ToolRecord {
            plan_step: invocation.agent == PLAN_STEP_AGENT,
            invocation_id: invocation.invocation_id.clone(),
            tool_name: invocation.tool_name.clone(),
            arguments: invocation.arguments.clone(),
            output: invocation.output.clone(),
            status: invocation.status,
        }));
        self.inner.record(config, invocation)
    }

    fn invocations(&self, run_id: &str) -> Vec<ToolInvocation> {
        self.inner.invocations(run_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(status: InvocationStatus) -> Exchange {
        Exchange::Tool(ToolRecord {
            invocation_id: "inv-13".into(),
            tool_name: "search_logs".into(),
            arguments: serde_json::json!({"query": "502"}),
            output: serde_json::json!({"error": "tool call budget of 12 exhausted"}),
            status,
            plan_step: false,
        })
    }

    fn block_one(tape: &Arc<Tape>) -> ToolResult {
        let tools = RecordedTools { tape: tape.clone() };
        let budget = ToolResult {
            status: InvocationStatus::Blocked,
            output: serde_json::json!({"error": "tool call budget of 12 exhausted"}),
        };
        let args = serde_json::json!({"query": "502"});
        futures::executor::block_on(tools.blocked("search_logs", &args, budget))
    }

    #[test]
    fn a_budget_blocked_call_takes_its_recorded_exchange() {
        let tape = Tape::new(vec![tool(InvocationStatus::Blocked)], Vec::new());
        let result = block_one(&tape);
        assert_eq!(result.status, InvocationStatus::Blocked);
        assert_eq!(tape.divergence(), None);
    }

    #[test]
    fn blocking_a_call_the_recording_ran_is_a_divergence() {
        let tape = Tape::new(vec![tool(InvocationStatus::Ok)], Vec::new());
        let result = block_one(&tape);
        assert_eq!(result.status, InvocationStatus::Error);
        let d = tape.divergence().unwrap();
        assert_eq!(d.exchange, 0);
        assert!(d.message.contains("blocked by the call budget"), "{d}");
    }
}
