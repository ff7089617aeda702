//! `diag report RUN_ID`: writes a report of a stored run, a self-contained HTML page or
//! GitHub-flavoured Markdown. Also used by `ask --report` and `replay --report-dir`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::common::write_text;
use super::report_file::{check_output_path, format_for, render, write_file, ReportFormat};
use super::{CommandContext, CommandError};

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

pub fn cmd_report(
    g: &CommandContext,
    args: &ReportArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let format = format_for(args.format, args.output.as_deref(), "-o")?;
    if let Some(path) = &args.output {
        check_output_path(path, "report")?;
    }
    let store = g.required_store()?;
    match &args.output {
        Some(path) => {
            let bytes = write_file(&store, &args.run_id, format, path)?;
            g.confirm(&format!(
                "wrote {} (the {} report of run {}, {bytes} bytes)",
                path.display(),
                match format {
                    diag_report::Format::Html => "HTML",
                    diag_report::Format::Md => "Markdown",
                },
                args.run_id
            ));
            Ok(())
        }
        None => write_text(out, &render(&store, &args.run_id, format)?),
    }
}
