//! diag-diagnosis' integration-test binary: the compiled topology over scripted nodes
//! (`workflow`), the real nodes over a scripted invoker (`node_contract`, `failure_explained`),
//! the Gatekeeper's bindings and grounding (`gatekeeper`), what follows it up to the answer
//! and the Fallbacks (`projection`), and the evidence contract as properties over both
//! (`contract_properties`). Every `.rs` file under `tests/it/` is a module of it, declared
//! below in alphabetical order; shared helpers are `diag_testkit`'s, and a file no `mod`
//! reaches fails the root's `test_files::every_test_file_is_compiled`.
//!
//! Its tests share one process: none sets an environment variable, changes the working
//! directory, installs a global subscriber or panic hook, or uses a fixed port or path
//! (openspec/specs/testing/spec.md).

mod contract_properties;
mod failure_explained;
mod gatekeeper;
mod node_contract;
mod projection;
mod workflow;
