//! diag-tools' integration-test binary: the built-in tools over real files (`tools_logs`,
//! `tools_runbooks`), the tool registry running them (`tools_registry`), and the MCP client
//! against the reference servers (`tools_mcp`). Every `.rs` file under `tests/it/` is a module
//! of it, declared below in alphabetical order; shared helpers are `diag_testkit`'s, and a file
//! no `mod` reaches fails the root's `test_files::every_test_file_is_compiled`.
//!
//! Its tests share one process: none sets an environment variable, changes the working
//! directory, installs a global subscriber or panic hook, or uses a fixed port or path
//! (openspec/specs/testing/spec.md).

mod tools_logs;
mod tools_mcp;
mod tools_registry;
mod tools_runbooks;
