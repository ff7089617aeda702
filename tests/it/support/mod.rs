//! What the tests of the `diag` command line share, one definition each: the hermetic `diag`
//! environment (`cli_env`), stored runs to report on (`report_fixtures`) and headless Chromium
//! for the HTML reports (`browser`). Everything that is not about the command line (paths,
//! ports, peer servers, records, the PostgreSQL server, the store's conformance harness) is
//! `diag_testkit`'s, shared with the other crates' tests.

pub mod browser;
pub mod cli_env;
pub mod report_fixtures;
