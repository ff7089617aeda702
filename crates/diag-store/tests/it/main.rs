//! diag-store's integration-test binary: the run store's conformance suite (`conformance`),
//! every guarantee of the store port run once per backend from one definition
//! (`diag_testkit::backends`: a fresh SQLite file, then a fresh database on the suite's
//! PostgreSQL 15 server). It lives with the port it tests, and names the port only: the
//! backends (and the agent runtime above them) depend on this crate, so its tests reach them
//! through `diag_testkit`, the one test-code crate any crate's tests may use
//! (tests/it/layering.rs). The tests of one backend alone live with that backend; the store
//! tests that run the `diag` binary (several processes, blobs and migrations, TLS, resume)
//! stay in the root's `tests/it/`.
//!
//! Every `.rs` file under `tests/it/` is a module of this binary, declared below in alphabetical
//! order (or in its parent module); a file no `mod` reaches fails the root's
//! `test_files::every_test_file_is_compiled`. Its tests share one process: none sets an
//! environment variable, changes the working directory, installs a global subscriber or panic
//! hook, or uses a fixed port or path (openspec/specs/testing/spec.md).

mod conformance;
