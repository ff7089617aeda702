//! Tools as the diagnosis graph sees them: the catalog shown to the Planner and Executor, and
//! the log of recorded invocations the Gatekeeper checks claims against.
//!
//! The built-in tools (`search_logs`, `query_metrics`, `search_runbooks`, `current_time`) and the
//! MCP client are adapters in the `diag-tools` crate; they implement [`Tool`]. [`registry`] holds
//! them and enforces openspec/specs/tools/spec.md's per-call limits (catalog, timeout, output
//! cap) for every tool alike.

use std::sync::Mutex;

use crate::graph::RunConfig;
use crate::protocol::ToolInvocation;

/// Argument reading and bounding shared by the registry and the built-in tools.
#[doc(hidden)]
pub mod args;
pub mod registry;

pub use registry::{AdmittedCall, RegistryError, ToolLimits, ToolOutcome, ToolRegistry};

pub use diag_records::tool::ToolSpec;

/// Where recorded tool invocations are kept and looked up. Lookups are always scoped to one
/// run: an invocation of another run, even of the same session, is never returned.
pub trait InvocationLog: Send + Sync {
    /// Records an invocation before the model sees its result. `config` is the RunConfig of
    /// the run that made the call, as the graph handed it to the agent (openspec/specs/ask-service/spec.md: it reaches
    /// the tool recorders unchanged); the invocation carries its run and session ids too.
    /// `Err` (with the reason) when it could not be kept: the caller must then not show the
    /// result to the model, whose evidence would otherwise rest on an unrecorded output.
    fn record(&self, config: &RunConfig, invocation: ToolInvocation) -> Result<(), String>;
    /// The invocations of `run_id`, in recording order.
    fn invocations(&self, run_id: &str) -> Vec<ToolInvocation>;
}

/// An in-memory log, for tests and for runs that are not stored.
#[derive(Default)]
pub struct MemoryInvocationLog {
    entries: Mutex<Vec<ToolInvocation>>,
    configs: Mutex<Vec<RunConfig>>,
    lookups: Mutex<Vec<String>>,
}

impl MemoryInvocationLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// The RunConfig each invocation was recorded with, in recording order.
    pub fn configs(&self) -> Vec<RunConfig> {
        self.configs.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// The run ids that were looked up, in order (lets tests see who asked for what).
    pub fn lookups(&self) -> Vec<String> {
        self.lookups.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl InvocationLog for MemoryInvocationLog {
    fn record(&self, config: &RunConfig, invocation: ToolInvocation) -> Result<(), String> {
        if let Ok(mut c) = self.configs.lock() {
            c.push(config.clone());
        }
        match self.entries.lock() {
            Ok(mut e) => {
                e.push(invocation);
                Ok(())
            }
            Err(_) => Err("the in-memory invocation log is poisoned".into()),
        }
    }

    fn invocations(&self, run_id: &str) -> Vec<ToolInvocation> {
        if let Ok(mut l) = self.lookups.lock() {
            l.push(run_id.to_string());
        }
        self.entries
            .lock()
            .map(|e| e.iter().filter(|i| i.run_id == run_id).cloned().collect())
            .unwrap_or_default()
    }
}

/// Why a tool call produced no output. The text is recorded as the invocation's error output,
/// so it must never contain a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("timed out after {0} ms")]
    Timeout(u64),
    #[error("source unavailable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Failed(String),
}

pub type ToolFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<serde_json::Value, ToolError>> + Send + 'a>,
>;

/// A read-only data source the Executor may call.
pub trait Tool: Send + Sync {
    fn spec(&self) -> ToolSpec;
    /// Runs the tool. `now` is the run clock's current time, for tools that need a window.
    fn call<'a>(&'a self, arguments: &'a serde_json::Value, cx: &'a ToolContext) -> ToolFuture<'a>;
}

/// What a tool may know about the run calling it.
pub struct ToolContext<'a> {
    pub clock: &'a dyn crate::clock::Clock,
}
