//! diag-store-sqlite's integration-test binary: what only the SQLite store has, its file
//! (`file`: permissions, the write lock, the WAL, the file's size) and the files earlier
//! diags wrote (`schema_upgrades`). Every guarantee of the store port is the conformance
//! suite's, which lives with the port (`crates/diag-store/tests/it/`) and runs on this
//! backend from `diag_testkit::backends`.
//!
//! Every `.rs` file under `tests/it/` is a module of this binary, declared below in alphabetical
//! order; a file no `mod` reaches fails the root's `test_files::every_test_file_is_compiled`.
//! Its tests share one process: none sets an environment variable, changes the working
//! directory, installs a global subscriber or panic hook, or uses a fixed port or path
//! (openspec/specs/testing/spec.md).

mod file;
mod schema_upgrades;
