//! `diag`: a diagnosis runner that answers an operator's question by running one fixed graph
//! of agents over read-only tools, and shows no claim it could not bind to a recorded tool
//! output.
//!
//! The command line: argument parsing, printing and the store a location names; what it runs
//! lives in the crates under `crates/` (ARCHITECTURE.md). The `diag` binary only hands its
//! arguments to [`cli::main`].

// No `unwrap`/`expect` outside tests: a failure is a value (Cargo.toml's [lints] says why this is
// an attribute and not a table entry).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
pub mod cli;
pub mod output_file;
/// The run store a location names: SQLite by path or PostgreSQL by URL, as the port's handle.
pub mod stores;
