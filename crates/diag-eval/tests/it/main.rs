//! diag-eval's integration-test binary: every folder of `scenarios/` as a usable environment
//! (`scenarios`), and `query_metrics` against the Prometheus that eval starts (`tools_prometheus`:
//! diag-tools cannot use diag-eval, which depends on it). Every `.rs` file under `tests/it/` is
//! a module of it, declared below in alphabetical order; shared helpers are `diag_testkit`'s,
//! and a file no `mod` reaches fails the root's `test_files::every_test_file_is_compiled`.
//!
//! Its tests share one process: none sets an environment variable, changes the working
//! directory, installs a global subscriber or panic hook, or uses a fixed port or path
//! (openspec/specs/testing/spec.md).

mod scenarios;
mod tools_prometheus;
