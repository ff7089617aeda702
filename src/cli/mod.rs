//! The `diag` command line: clap definitions, one function per subcommand, and the single
//! place where errors become one line on stderr and an exit code.

mod exit;
mod graph;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use exit::Exit;

/// diag: diagnosis runs whose every claim is bound to a recorded tool output.
///
/// Exit codes: 0 success; 1 internal error; 2 usage, configuration or input error; 3 run
/// FAILED; 4 under --strict, success but degraded or not PASS; 5 replay mismatch;
/// 130 interrupted.
#[derive(Debug, Parser)]
#[command(name = "diag", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Graph(graph::GraphArgs),
}

/// A failure the CLI reports: one line, and the exit code its kind decides.
#[derive(Debug)]
pub struct CommandError {
    pub exit: Exit,
    pub message: String,
}

impl CommandError {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        CommandError {
            exit,
            message: message.into(),
        }
    }
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Success
            };
            let _ = e.print();
            return code.into();
        }
    };
    let mut stdout = std::io::stdout().lock();
    let result = match cli.command {
        Command::Graph(args) => graph::cmd_graph(&args, &mut stdout),
    };
    let result = result.and_then(|()| stdout.flush().map_err(io_error));
    match result {
        Ok(()) => Exit::Success.into(),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "diag: {}", e.message);
            e.exit.into()
        }
    }
}

/// A broken pipe (`diag graph | head`) is not an error; anything else on stdout is.
pub(crate) fn io_error(e: std::io::Error) -> CommandError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CommandError::new(Exit::Success, "")
    } else {
        CommandError::new(Exit::Internal, format!("cannot write output: {e}"))
    }
}
