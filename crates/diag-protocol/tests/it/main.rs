//! diag-protocol's integration-test binary: the four agent-output parsers (`protocol_parsers`),
//! the evidence turn's schema built from a run's evidence (`evidence_schema`),
//! the same parsers under mutated documents (`fuzz_contracts`), and content grounding by facts
//! as properties (`grounding_properties`). Every `.rs` file under `tests/it/` is a module of
//! it, declared below in alphabetical order; shared helpers are `diag_testkit`'s, and a file no
//! `mod` reaches fails the root's `test_files::every_test_file_is_compiled`.
//!
//! Its tests share one process: none sets an environment variable, changes the working
//! directory, installs a global subscriber or panic hook, or uses a fixed port or path
//! (openspec/specs/testing/spec.md).

mod contract_grammar;
mod evidence_schema;
mod fuzz_contracts;
mod grounding_properties;
mod protocol_parsers;
