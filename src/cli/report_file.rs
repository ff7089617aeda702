//! A report of a stored run, as every command that writes one writes it (`report`, `ask
//! --report`, `replay --report-dir`, `eval --report-dir`, `diag mcp`'s `report` tool): the format
//! argument, the format a file name asks for, and the file written.

use std::path::Path;

use diag_core::store::Store;
use diag_report::{Format, ReportError};

use super::{CommandError, Exit};

/// A report format as the command line takes it (`--format html|md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// One self-contained HTML file.
    Html,
    /// GitHub-flavoured Markdown.
    Md,
}

impl From<ReportFormat> for Format {
    fn from(f: ReportFormat) -> Format {
        match f {
            ReportFormat::Html => Format::Html,
            ReportFormat::Md => Format::Md,
        }
    }
}

/// The format for an output path: the one asked for, else the path's extension. `flag`
/// names the command's file option; the refusal offers `--format` only to a command that has
/// it (`asked` is `Some` or the command is `report`, whose file option is `-o`).
pub fn format_for(
    asked: Option<ReportFormat>,
    path: Option<&Path>,
    flag: &str,
) -> Result<Format, CommandError> {
    if let Some(f) = asked {
        return Ok(f.into());
    }
    let or_format = if flag == "-o" {
        ", or --format html|md"
    } else {
        ""
    };
    match path {
        Some(p) => Format::from_path(p).ok_or_else(|| {
            CommandError::usage(format!(
                "{}: cannot tell the report format from the name: use a .html or .md file{or_format}",
                p.display()
            ))
        }),
        None => Err(CommandError::usage(format!(
            "a report on stdout needs --format html or --format md (or {flag} FILE.html|FILE.md)"
        ))),
    }
}

/// Refuses an output path that can never be written (a folder, or a file in a missing
/// folder), before any work is done.
pub fn check_output_path(path: &Path, what: &str) -> Result<(), CommandError> {
    if path.is_dir() {
        return Err(CommandError::usage(format!(
            "{}: cannot write the {what}: it is a folder",
            path.display()
        )));
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(CommandError::usage(format!(
            "{}: cannot write the {what}: the folder {} does not exist",
            path.display(),
            parent.display()
        )));
    }
    Ok(())
}

/// The report of a stored run as text.
pub fn render(store: &Store, run_id: &str, format: Format) -> Result<String, CommandError> {
    diag_report::stored_report(store, run_id, format)
        .map_err(|e| match e {
            ReportError::Store(e) => CommandError::from(e),
            other => CommandError::new(Exit::Internal, other.to_string()),
        })?
        .ok_or_else(|| CommandError::unknown_run(run_id))
}

/// Writes the report of a stored run to `path` ([`crate::output_file::write_output`]: a
/// regular file replaced atomically, a device or FIFO written in place, a link written
/// through); returns how many bytes it wrote.
pub fn write_file(
    store: &Store,
    run_id: &str,
    format: Format,
    path: &Path,
) -> Result<usize, CommandError> {
    let text = render(store, run_id, format)?;
    let cannot = |e: std::io::Error| {
        CommandError::usage(format!("{}: cannot write the report: {e}", path.display()))
    };
    crate::output_file::write_output(path, text.as_bytes()).map_err(cannot)?;
    Ok(text.len())
}
