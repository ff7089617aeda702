//! `diag`: a diagnosis runner that answers an operator's question by running one fixed graph
//! of agents over read-only tools, and shows no claim it could not bind to a recorded tool
//! output.
//!
//! The library holds everything; the `diag` binary only hands its arguments to [`cli::main`].

// No `unwrap`/`expect` outside tests: a failure is a value (Cargo.toml's [lints] says why this is
// an attribute and not a table entry).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
pub use diag_core::agent;
pub mod cli;
pub use diag_core::env_vars;
pub use diag_core::hash;
pub use diag_core::ids;
pub use diag_diagnosis as diagnosis;
pub use diag_graph as graph;
pub use diag_graph::clock;
/// The model port (diag-core) and the OpenAI-compatible adapter (diag-model-openai), under the
/// paths they had before the workspace.
pub mod model {
    pub use diag_core::model::*;
    pub use diag_model_openai as openai;
}
pub use diag_core::protocol;
pub mod output_file;
/// The run store port, its handle and its records (diag-core).
pub use diag_core::store;
pub use diag_core::text;
/// The run store a location names: SQLite by path or PostgreSQL by URL, as the port's handle.
pub mod stores;
/// The tool ports and registry (diag-core) and the built-in tools and MCP client (diag-tools),
/// under the paths they had before the workspace.
pub mod tools {
    pub use diag_core::tools::*;
    pub use diag_tools::*;
}
