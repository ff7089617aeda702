//! `diag completions SHELL` and `diag man`: generated from the clap definitions, so they
//! never drift from the real flags.

use std::io::Write;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::{io_error, CommandError, Exit};

/// Print a shell completion script (bash, zsh, fish, elvish, powershell)
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: Shell,
}

/// Print the man page (roff)
#[derive(Debug, Args)]
pub struct ManArgs {}

pub fn cmd_completions(args: &CompletionsArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let mut cmd = super::Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "diag", &mut buf);
    out.write_all(&buf).map_err(io_error)
}

pub fn cmd_man(_args: &ManArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let cmd = super::Cli::command();
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut buf).map_err(|e| {
        CommandError::new(Exit::Internal, format!("cannot render the man page: {e}"))
    })?;
    out.write_all(&buf).map_err(io_error)
}
