//! `diag-diagnosis`: the diagnosis graph: its typed state, statuses, topology, nodes, the
//! deterministic projections (verified input, composer input, retry preparation, fallback) and
//! the evaluation and run summary computed from a final state.
//!
//! **Architecture invariant:** this crate sits on `diag-core` (contracts, agent runtime, ports)
//! and no adapter depends on it: the run store (`diag-store-sqlite`) depends on `diag-core`
//! only, so a store module that names the diagnosis state does not compile. What a store
//! persists of a run is the plain [`diag_core::store::RunSummary`] built here
//! ([`evaluation::run_summary`]).

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

// The core's modules under the paths this code had inside diag-core (`crate::protocol::…`).
use diag_core::{agent, clock, graph, model, protocol, text, tools};

pub mod composer_input;
pub mod evaluation;
pub mod fallback;
pub mod nodes;
pub mod render;
pub mod retry_prepare;
pub mod scripted;
pub mod state;
pub mod status;
pub mod topology;
pub mod verified_input;

pub use composer_input::{build_composer_input, composer_input_json, AllowedClaim, ComposerInput};
pub use fallback::{
    consulted_tools, fallback_post, fallback_pre, fallback_pre_explained, run_id_as_placeholder,
    RUN_ID_PLACEHOLDER,
};
pub use render::render_answer;
pub use retry_prepare::prepare_retry;
pub use state::DiagnosisState;
pub use status::{AgentStatus, ExecutorStatus, FallbackKind, Status};
pub use topology::{DiagnosisGraph, DiagnosisNodes, STEP_LIMIT};
pub use verified_input::{
    build_verified_input, build_verifier_input, verifier_input_json, ProjectionError, VerifierInput,
};
