//! The diagnosis graph: its typed state, statuses, topology, and how one run is invoked.

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
pub use fallback::{consulted_tools, fallback_post, fallback_pre, fallback_pre_explained};
pub use render::render_answer;
pub use retry_prepare::prepare_retry;
pub use state::DiagnosisState;
pub use status::{AgentStatus, ExecutorStatus, FallbackKind, Status};
pub use topology::{DiagnosisGraph, DiagnosisNodes, STEP_LIMIT};
pub use verified_input::{
    build_verified_input, build_verifier_input, verifier_input_json, ProjectionError, VerifierInput,
};
