//! The root crate's one integration-test binary (as jj's `tests/runner.rs`): every test file
//! under `tests/it/` is a module of it, so the test code links SQLite, reqwest and rmcp once.
//! It holds the tests of the `diag` command line, the repository-wide checks (`test_files`,
//! `invariants`, `layering`), and the library tests not yet beside their crate; a crate's
//! own tests live in its binary `crates/<crate>/tests/it/main.rs`.
//!
//! Adding a test: put it in a module here (or a new `tests/it/<name>.rs` declared below, in
//! alphabetical order); helpers about the command line live in `support/`, the others in
//! `diag_testkit`. A `.rs` file no `mod` reaches, or a new top-level `tests/*.rs` (a binary of
//! its own), fails `test_files::every_test_file_is_compiled` (see `test_files.rs`).
//!
//! The tests share one process: none may set environment variables, change the working
//! directory, install a global subscriber or panic hook, or share a fixed port or path; each
//! passes what it needs explicitly, in a temporary directory of its own
//! (openspec/specs/testing/spec.md).

mod support;

mod architecture_doc;
mod bench_cli;
mod cli;
mod cli_live;
mod confinement;
mod defaults_doc;
mod endpoint_memory;
mod eval_cli;
mod evidence_turn;
mod fuzz_corpus;
mod graph_cli;
mod invariants;
mod investigate;
mod layering;
mod live_model;
mod mcp_server;
mod output_files;
mod pg_server;
mod replay_ci;
mod replay_fidelity;
mod report;
mod report_browser;
mod resume;
mod run_clock;
mod secret_hygiene;
mod serve;
mod serve_ops;
mod store_backends;
mod store_blobs;
mod store_concurrency;
mod store_postgres_tls;
mod test_files;
