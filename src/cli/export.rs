//! `diag export RUN_ID`: writes the run file of a stored run, which replays to the same
//! result: its question and identity, tool catalog, every model and tool exchange in the
//! order they happened, and its result as `expected`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::common::write_text;
use super::{CommandContext, CommandError};

/// Write the run file (diag_run_v2) of a stored run.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The run to export
    pub run_id: String,
    /// Write to this file instead of stdout
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn cmd_export(
    g: &CommandContext,
    args: &ExportArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let store = g.required_store()?;
    let file = diag_runfile::export::from_store(&store, &args.run_id)?;
    // An interrupted run's recording stops where it was cut: a replay runs out of it there.
    // The file is still worth having (it holds every exchange that happened), so it is
    // written, and the operator is told what its replay will say.
    let interrupted = store
        .get_run(&args.run_id)
        .map_err(CommandError::from)?
        .is_some_and(|r| r.failure.as_deref() == Some(diag_core::store::INTERRUPTED));
    if interrupted {
        let _ = writeln!(
            std::io::stderr(),
            "diag: warning: run {} was interrupted; its recording ends where it stopped, so \
             diag replay reports a divergence there (exit 5)",
            file.run_id
        );
    }
    match &args.output {
        Some(path) => {
            let json = file.to_json();
            crate::output_file::write_output(path, json.as_bytes()).map_err(|e| {
                CommandError::usage(format!("{}: cannot write: {e}", path.display()))
            })?;
            g.confirm(&format!(
                "wrote {} (the run file of run {}, {} bytes; diag replay {} replays it)",
                path.display(),
                file.run_id,
                json.len(),
                path.display()
            ));
            Ok(())
        }
        None => write_text(out, &file.to_json()),
    }
}
