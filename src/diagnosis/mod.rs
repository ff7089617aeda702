//! The diagnosis graph: its typed state, statuses, topology, and how one run is invoked.

pub mod scripted;
pub mod state;
pub mod status;
pub mod topology;

pub use state::DiagnosisState;
pub use status::{AgentStatus, ExecutorStatus, FallbackKind, Status};
pub use topology::{DiagnosisGraph, DiagnosisNodes, STEP_LIMIT};
