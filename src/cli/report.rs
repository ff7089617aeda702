//! `diag report RUN_ID`: writes a report of a stored run, a self-contained HTML page or
//! GitHub-flavoured Markdown. Also used by `ask --report` and `replay --report-dir`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;

use super::common::{require_existing_store, write_text};
use super::{CommandError, Exit, GlobalArgs};
use diag_core::store::Store;
use diag_diagnosis::topology;
use diag_report::{Format, RunData};

/// Write a report of a stored run: one self-contained HTML file (no script, no request) or
/// GitHub-flavoured Markdown for a ticket or a CI comment.
///
/// The HTML page shows the header (question, status, verdict, degraded, duration), the
/// answer with every [cN] linked to its claim card, the claim cards with their evidence,
/// the grounding figures, a timeline and the diagnosis graph with this run's path, and the
/// tool calls. The same run always gives the same bytes.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The run to report (as shown by `diag ask` and `diag runs`)
    pub run_id: String,
    /// The format [default: from the extension of --output: .html or .md]
    #[arg(long, value_enum)]
    pub format: Option<ReportFormat>,
    /// Write the report to this file instead of stdout (stdout needs --format)
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

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

/// The format for an output path: the one asked for, else the path's extension.
pub fn format_for(
    asked: Option<ReportFormat>,
    path: Option<&Path>,
    flag: &str,
) -> Result<Format, CommandError> {
    if let Some(f) = asked {
        return Ok(f.into());
    }
    match path {
        Some(p) => Format::from_path(p).ok_or_else(|| {
            CommandError::usage(format!(
                "{}: cannot tell the report format from the name: use a .html or .md file, or \
                 --format html|md",
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

/// Everything the report of `run_id` shows, read from the store.
pub fn load(store: &Store, run_id: &str) -> Result<RunData, CommandError> {
    diag_report::from_store(store, run_id)
        .map_err(CommandError::from)?
        .ok_or_else(|| CommandError::unknown_run(run_id))
}

/// The report of a stored run as text.
pub fn render(store: &Store, run_id: &str, format: Format) -> Result<String, CommandError> {
    let data = load(store, run_id)?;
    let shape = topology::shape()
        .map_err(|e| CommandError::new(Exit::Internal, format!("topology does not compile: {e}")))?
        .shape();
    Ok(diag_report::render(format, &data, &shape))
}

/// Writes the report of a stored run to `path` ([`crate::output_file::write_output`]: a
/// regular file replaced atomically, a device or FIFO written in place, a link written
/// through).
pub fn write_file(
    store: &Store,
    run_id: &str,
    format: Format,
    path: &Path,
) -> Result<(), CommandError> {
    let text = render(store, run_id, format)?;
    let cannot = |e: std::io::Error| {
        CommandError::usage(format!("{}: cannot write the report: {e}", path.display()))
    };
    crate::output_file::write_output(path, text.as_bytes()).map_err(cannot)
}

pub fn cmd_report(
    g: &GlobalArgs,
    args: &ReportArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let format = format_for(args.format, args.output.as_deref(), "-o")?;
    if let Some(path) = &args.output {
        check_output_path(path, "report")?;
    }
    let store = require_existing_store(g)?;
    match &args.output {
        Some(path) => write_file(&store, &args.run_id, format, path),
        None => write_text(out, &render(&store, &args.run_id, format)?),
    }
}
