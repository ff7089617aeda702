//! `diag-records`: the plain data a run records, below every diag crate but `diag-graph`: a
//! model call (request, response, error: [`model`]), an agent's step and exchange ([`step`]),
//! a tool's catalog entry ([`tool`]) and recorded invocation ([`invocation`]), the verdict and
//! the Fallback's kind, and the canonical JSON, hashes, one-line text and environment
//! variable names every layer shares. The agent contracts and their checks (`diag-protocol`),
//! the agent runtime (`diag-core`) and the run store (`diag-store`) all speak these types, so a
//! change to a grounding rule or to the runtime rebuilds no store.
//!
//! Pure: serde and plain functions, no I/O and no async runtime.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod endpoint;
pub mod env_vars;
pub mod fallback;
pub mod hash;
pub mod invocation;
pub mod json;
pub mod model;
pub mod step;
pub mod text;
pub mod tool;
pub mod verdict;
