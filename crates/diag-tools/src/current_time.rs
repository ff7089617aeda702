//! `current_time`: the run clock's "now". Models have no reliable sense of the present, and a
//! diagnosis question ("since 14:00") needs one; taking it from [`ToolContext`]'s clock means a
//! replay pinned to `started_at` sees the same answer as the recorded run.

use serde_json::{json, Value};

use diag_core::tools::args::Args;
use diag_core::tools::{Tool, ToolContext, ToolFuture, ToolSpec};

/// The `current_time` tool. It takes no parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct CurrentTime;

impl CurrentTime {
    pub fn new() -> Self {
        CurrentTime
    }
}

impl Tool for CurrentTime {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "current_time".into(),
            description: "The current time of this diagnosis run, as RFC 3339 in UTC. Use it \
                          to turn relative times (\"since 14:00\", \"the last hour\") into \
                          absolute ones."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {},
                "additionalProperties": false
            }),
        }
    }

    fn call<'a>(&'a self, arguments: &'a Value, cx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            Args::new(arguments, &[])?;
            Ok(json!({ "now": cx.clock.now().to_string() }))
        })
    }
}
