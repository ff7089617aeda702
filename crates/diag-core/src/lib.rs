//! `diag-core`: the contracts and the runtime a diagnosis runs on, as plain functions over plain
//! data, and the ports it runs behind. The typed agent contracts and the Gatekeeper are the
//! `diag-protocol` crate, re-exported as `protocol`; here are the agent runtime (`agent`), and the ports the edges implement:
//! [`model::ChatModel`], [`tools::Tool`] and the registry, the run store
//! ([`store::RunStore`] and [`store::Store`] over the plain records
//! of [`store::records`]), [`clock::Clock`] and [`ids::IdSource`]. The diagnosis graph itself
//! (state, nodes, topology, evaluation) is the `diag-diagnosis` crate, above this one: the run
//! store depends on this crate only, so it cannot name the diagnosis state.
//!
//! **Architecture invariant:** no HTTP, SQL, file or process crate is a dependency of this crate
//! (see its Cargo.toml): the OpenAI-compatible adapter is `diag-model-openai`, the built-in tools
//! and the MCP client are `diag-tools`, the run store is `diag-store-sqlite`. A module here that
//! imports one of them does not compile. Nor does this crate hold process-wide mutable state:
//! what model endpoints taught is a [`model::EndpointMemory`] value its owner hands to the
//! models, and the system id source (with the process's last id) is `diag-ask`'s.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub use diag_alertmanager as alert;
pub use diag_graph as graph;
pub use diag_graph::clock;
pub use diag_protocol as protocol;
pub use diag_records as records;
pub use diag_records::{env_vars, hash, text};

pub mod agent;
pub mod de;
pub mod ids;
pub mod limits;
pub mod model;
pub mod recording;

/// The run store (`diag-store`), with what ties it to the runtime ([`recording`]).
pub mod store {
    pub use crate::recording::{endpoint_memory, StoreSink};
    pub use diag_store::*;
}
pub mod tools;
