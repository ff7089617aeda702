//! diag-ask's integration-test binary: the agent runtime over scripted models and tools
//! (`agent_runtime`), the ask service end to end over a real store (`ask_integration`), a run's
//! environment built from a configuration (`setup`), whole diagnoses over real HTTP
//! (`live_graph`) and under every model and tool fault (`fault_matrix`), and the run files
//! replayed through the same service: the fixture library (`fixture_library`), the grounding
//! corpora (`grounding_corpus`), the loader against its JSON Schema (`runfile_schema`), the
//! agents' response schemas against their parsers (`contract_schema`), and the loader, replay
//! and JSON Pointer resolver under mutated input (`fuzz_runfile`). Every `.rs` file under
//! `tests/it/` is a module of it, declared below in alphabetical order; shared helpers are
//! `diag_testkit`'s, and a file no `mod` reaches fails the root's
//! `test_files::every_test_file_is_compiled`.
//!
//! Its tests share one process: none sets an environment variable, changes the working
//! directory, installs a global subscriber or panic hook, or uses a fixed port or path
//! (openspec/specs/testing/spec.md).

mod agent_runtime;
mod ask_integration;
mod contract_schema;
mod fault_matrix;
mod fixture_library;
mod fuzz_runfile;
mod grounding_corpus;
mod live_graph;
mod runfile_schema;
mod setup;
