//! The run store's conformance suite: every guarantee of the store port, run once per backend
//! from one definition (`diag_testkit::backends`: a fresh SQLite file, then a fresh database on
//! the suite's PostgreSQL 15 server). It lives here, beside the harness, because it belongs to
//! neither backend and needs no higher crate: a change to the reports, the services or the
//! command line rebuilds none of it. The store tests that run the `diag` binary (several
//! processes, blobs and migrations, TLS, resume) stay in the root's `tests/it/`.
//!
//! Every `.rs` file under `tests/it/` is a module of this binary, declared below in alphabetical
//! order; a file no `mod` reaches fails the root's `test_files::every_test_file_is_compiled`.
//! Its tests share one process: none sets an environment variable, changes the working
//! directory, installs a global subscriber or panic hook, or uses a fixed port or path
//! (openspec/specs/testing/spec.md).

mod store;
