//! `diag trace RUN_ID`: prints a stored run — header, event timeline with durations, what the
//! store remembered of its model endpoints when it started, tool invocations, verdicts,
//! answer and its computed values — or the same as JSON.

use std::io::Write;

use clap::Args;

use super::common::{write_json, write_text};
use super::{CommandContext, CommandError};
use diag_core::store::Store;
use diag_report::documents::{alert_text, endpoints_text, load, resumed_text, trace_json, Stored};
use diag_report::terminal as render;

/// Print a stored run: header, timeline, what the store remembered of its model endpoints
/// when it started, tool calls, verdict and answer.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The run to print (as shown by `diag ask` and `diag runs`)
    pub run_id: String,
    /// Print a JSON document (schema diag.trace.v1) instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn cmd_trace(
    g: &CommandContext,
    args: &TraceArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let store = g.required_store()?;
    trace(&store, args, out)
}

fn trace(store: &Store, args: &TraceArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    if args.json {
        let doc = trace_json(store, &args.run_id)?
            .ok_or_else(|| CommandError::unknown_run(&args.run_id))?;
        return write_json(out, &doc);
    }
    let Stored {
        run,
        events,
        invocations,
        evaluation: _,
        exchanges,
        grounding,
        derivations,
        endpoints,
        alerts,
    } = load(store, &args.run_id)?.ok_or_else(|| CommandError::unknown_run(&args.run_id))?;
    let text = [
        render::header(&render::Header {
            run_id: &run.run_id,
            session_id: &run.session_id,
            status: run.status.as_str(),
            question: &run.question,
            started_at: run.started_at.to_string(),
            duration_ms: run.duration_ms,
            effective_verdict: run.effective_verdict.map(|v| v.as_str()),
            degraded: run.degraded,
            failure: run.failure.as_deref(),
        }),
        alert_text(alerts.as_ref()),
        render::timeline(&events),
        resumed_text(&run, &exchanges),
        endpoints_text(&endpoints),
        render::invocations(&invocations),
        grounding
            .as_ref()
            .map(render::grounding::grounding_text)
            .unwrap_or_default(),
        render::model_failures(
            &exchanges
                .iter()
                .filter_map(|x| x.exchange.outcome.as_ref().err().map(|e| (&x.exchange, e)))
                .collect::<Vec<_>>(),
        ),
        format!(
            "tokens   prompt {} completion {}  model calls {}  tool calls {}\n",
            run.prompt_tokens, run.completion_tokens, run.step_count, run.tool_count
        ),
        render::answer(run.answer.as_deref()),
        render::derivations(&derivations.shown, derivations.left_out),
    ]
    .into_iter()
    .filter(|block| !block.is_empty())
    .collect::<Vec<_>>()
    .join("\n");
    write_text(out, &text)
}
