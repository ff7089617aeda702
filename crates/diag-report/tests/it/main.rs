//! diag-report's integration-test binary: what the reports do with untrusted Markdown and links
//! (`report_render`, with its committed proptest regressions beside it), and how the reports
//! and `diag trace` show an answer's computed values (`report_derivations`). Every `.rs` file
//! under `tests/it/` is a module of it, declared below in alphabetical order; shared helpers
//! are `diag_testkit`'s, and a file no `mod` reaches fails the root's
//! `test_files::every_test_file_is_compiled`.
//!
//! Its tests share one process: none sets an environment variable, changes the working
//! directory, installs a global subscriber or panic hook, or uses a fixed port or path
//! (openspec/specs/testing/spec.md).

mod report_derivations;
mod report_render;
