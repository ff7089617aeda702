//! Builders of the protocol's records shared by the component tests (one definition each):
//! a recorded tool invocation and a claim's binding.

use diag_core::protocol::{Binding, InvocationStatus, ToolInvocation};
use serde_json::Value;

/// A successful round-1 Executor invocation of `tool` in session `sess-1`.
pub fn inv(run_id: &str, id: &str, tool: &str, args: Value, output: Value) -> ToolInvocation {
    ToolInvocation {
        run_id: run_id.into(),
        session_id: "sess-1".into(),
        invocation_id: id.into(),
        agent: "executor".into(),
        round: 1,
        tool_name: tool.into(),
        arguments: args,
        output,
        status: InvocationStatus::Ok,
        duration_ms: 3,
    }
}

/// A binding of a claim to `quote` at `path` of invocation `id`'s output.
pub fn binding(id: &str, tool: &str, path: &str, quote: &str) -> Binding {
    Binding {
        source_invocation_id: id.into(),
        tool_name: tool.into(),
        raw_path: path.into(),
        quote: quote.into(),
    }
}
