//! `diag completions SHELL` and `diag man`: generated from the clap definitions, so they
//! never drift from the real flags.

use std::io::Write;

use clap::Args;
use clap_complete::Shell;

use super::{io_error, CommandError, Exit};

/// Print a shell completion script (bash, zsh, fish, elvish, powershell)
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: Shell,
}

/// Print a man page (roff), generated from the command line's own definitions: diag(1), or
/// a subcommand's (`diag man ask` is diag-ask(1), with every flag it takes)
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The subcommand whose page to print: `ask`, `investigate alertmanager`, …
    #[arg(value_name = "SUBCOMMAND")]
    pub command: Vec<String>,
    /// Write every page (diag.1, diag-ask.1, …) into this folder instead, e.g. for
    /// /usr/local/share/man/man1
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub out_dir: Option<std::path::PathBuf>,
}

pub fn cmd_completions(args: &CompletionsArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let mut cmd = super::usage::command();
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "diag", &mut buf);
    out.write_all(&buf).map_err(io_error)
}

/// The command line as the pages describe it: built, so each subcommand is named as its
/// page is (`diag-ask`) and shows the global flags that apply to it, and without clap's
/// `help` subcommands (every page has `--help`).
fn man_command() -> clap::Command {
    let mut cmd = super::usage::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Whether `cmd` has a page: not hidden.
fn has_page(cmd: &clap::Command) -> bool {
    !cmd.is_hide_set()
}

fn render(cmd: &clap::Command) -> Result<Vec<u8>, CommandError> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .source(concat!("diag ", env!("CARGO_PKG_VERSION")))
        .render(&mut buf)
        .map_err(|e| {
            CommandError::new(Exit::Internal, format!("cannot render the man page: {e}"))
        })?;
    Ok(buf)
}

/// Every page, depth first: diag's, then each subcommand's (hidden ones left out).
fn pages(cmd: &clap::Command, out: &mut Vec<clap::Command>) {
    out.push(cmd.clone());
    for sub in cmd.get_subcommands().filter(|s| has_page(s)) {
        pages(sub, out);
    }
}

pub fn cmd_man(args: &ManArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let root = man_command();
    if let Some(dir) = &args.out_dir {
        if !dir.is_dir() {
            return Err(CommandError::usage(format!(
                "--out-dir {}: not a folder",
                dir.display()
            )));
        }
        let mut all = Vec::new();
        pages(&root, &mut all);
        for cmd in &all {
            let name = clap_mangen::Man::new(cmd.clone()).get_filename();
            let path = dir.join(&name);
            crate::output_file::write_output(&path, &render(cmd)?).map_err(|e| {
                CommandError::usage(format!("{}: cannot write: {e}", path.display()))
            })?;
        }
        let _ = writeln!(
            std::io::stderr(),
            "diag: wrote {} man pages into {}",
            all.len(),
            dir.display()
        );
        return Ok(());
    }
    let mut cmd = &root;
    for (i, word) in args.command.iter().enumerate() {
        cmd = cmd
            .get_subcommands()
            .find(|s| s.get_name() == word && has_page(s))
            .ok_or_else(|| {
                let parent = std::iter::once("diag")
                    .chain(args.command[..i].iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" ");
                CommandError::usage(format!(
                    "{parent} has no subcommand `{}` ({parent} --help lists them)",
                    diag_core::text::one_line(word, 40)
                ))
            })?;
    }
    out.write_all(&render(cmd)?).map_err(io_error)
}
