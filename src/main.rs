// No `unwrap`/`expect` outside tests: a failure is a value (Cargo.toml's [lints] says why this is
// an attribute and not a table entry).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

fn main() -> std::process::ExitCode {
    diag::cli::main()
}
