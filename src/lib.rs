//! `diag`: a diagnosis runner that answers an operator's question by running one fixed graph
//! of agents over read-only tools, and shows no claim it could not bind to a recorded tool
//! output.
//!
//! The library holds everything; the `diag` binary only hands its arguments to [`cli::main`].

// No `unwrap`/`expect` outside tests: a failure is a value (Cargo.toml's [lints] says why this is
// an attribute and not a table entry).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
pub mod agent;
pub mod ask;
pub mod cli;
pub mod clock;
pub mod config;
pub mod diagnosis;
pub mod env_vars;
pub mod eval;
pub mod graph;
pub mod hash;
pub mod ids;
pub mod model;
pub mod protocol;
pub mod render;
pub mod replay;
pub mod report;
pub mod runfile;
pub mod setup;
pub mod store;
pub mod text;
pub mod tools;
