//! `diag export RUN_ID`: writes the run file of a stored run, which replays to the same
//! result: its question and identity, tool catalog, every model and tool exchange in the
//! order they happened, and its result as `expected`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::common::{require_existing_store, write_text};
use super::{CommandError, GlobalArgs};
use diag_core::store::RunStatus;
use diag_core::store::Store;
use diag_runfile::{
    Exchange, Expected, ModelRecord, RecordedError, RecordedResponse, RunFile, RunLimits,
    ToolRecord, FORMAT,
};

/// Write the run file (diag_run_v2) of a stored run.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The run to export
    pub run_id: String,
    /// Write to this file instead of stdout
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Builds the run file of a stored run. Model exchanges and tool invocations live in two
/// tables; each Executor turn that requested k tool calls is followed by exactly k recorded
/// invocations (blocked ones included), which restores the order they happened in.
pub fn run_file(store: &Store, run_id: &str) -> Result<RunFile, CommandError> {
    let run = store
        .get_run(run_id)
        .map_err(CommandError::from)?
        .ok_or_else(|| CommandError::unknown_run(run_id))?;
    if run.status == RunStatus::Running {
        return Err(CommandError::usage(format!(
            "run {} is still RUNNING; export it when it has finished",
            run.run_id
        )));
    }
    let exchanges = store.exchanges(run_id).map_err(CommandError::from)?;
    let mut invocations = store
        .invocations(run_id)
        .map_err(CommandError::from)?
        .into_iter();
    let mut out = Vec::new();
    for x in exchanges {
        let m = x.exchange;
        let (response, error, calls) = match &m.outcome {
            Ok(r) => (
                Some(RecordedResponse::from_response(r)),
                None,
                r.tool_calls.len(),
            ),
            Err(e) => (None, Some(RecordedError::from_error(e)), 0),
        };
        out.push(Exchange::Model(ModelRecord {
            agent: m.agent,
            round: m.round,
            attempt: m.attempt,
            turn: m.turn,
            request_sha256: diag_core::hash::request_sha256(&m.request).ok(),
            max_tokens: m.request.max_tokens,
            fit: m.request.fit,
            response,
            error,
        }));
        for inv in invocations.by_ref().take(calls) {
            out.push(Exchange::Tool(ToolRecord {
                invocation_id: inv.invocation_id,
                tool_name: inv.tool_name,
                arguments: inv.arguments,
                output: inv.output,
                status: inv.status,
            }));
        }
    }
    Ok(RunFile {
        format: FORMAT.to_string(),
        question: run.question.clone(),
        session_id: run.session_id.clone(),
        run_id: run.run_id.clone(),
        started_at: run.started_at,
        // As the run was created with them; a run stored before the store kept limits, or a
        // replay of a file that records none, exports none and replays under the defaults.
        limits: run
            .limits
            .clone()
            .map(serde_json::from_value::<RunLimits>)
            .transpose()
            .map_err(|e| {
                CommandError::usage(format!(
                    "run {}: the stored limits are not valid: {e}",
                    run.run_id
                ))
            })?,
        tools: run.tools.clone(),
        exchanges: out,
        expected: Some(Expected {
            status: run.status.as_str().to_string(),
            path: run.path.clone(),
            effective_verdict: run.effective_verdict,
            degraded: run.degraded,
            answer: run.answer.clone(),
        }),
    })
}

pub fn cmd_export(
    g: &GlobalArgs,
    args: &ExportArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let store = require_existing_store(g)?;
    let file = run_file(&store, &args.run_id)?;
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
        Some(path) => crate::output_file::write_output(path, file.to_json().as_bytes())
            .map_err(|e| CommandError::usage(format!("{}: cannot write: {e}", path.display()))),
        None => write_text(out, &file.to_json()),
    }
}
