//! `diag-tools`: the built-in read-only tools and the MCP client, adapters behind diag-core's
//! [`Tool`](diag_core::tools::Tool) port. [`search_logs`] (files, gzip, time windows),
//! [`search_runbooks`] (Markdown files), [`query_metrics`] (the Prometheus HTTP API),
//! [`current_time`] and [`mcp`] (tools of MCP servers over a child process `diag` owns). The
//! registry that holds them and enforces per-call limits is diag-core's
//! [`ToolRegistry`](diag_core::tools::ToolRegistry).

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod confine;
pub mod current_time;
pub mod mcp;
pub mod query_metrics;
pub mod search_logs;
pub mod search_runbooks;
pub mod walk;

pub use current_time::CurrentTime;
pub use query_metrics::{MetricsLimits, MetricsSetupError, QueryMetrics};
pub use search_logs::{LogQuery, LogSearchLimits, LogSearchOutput, SearchLogs};
pub use search_runbooks::{RunbookSearchLimits, RunbookSearchOutput, SearchRunbooks};
