//! `diag trace RUN_ID`: prints a stored run — header, event timeline with durations, tool
//! invocations, verdicts and answer — or the same as JSON.

use std::io::Write;

use clap::Args;
use serde_json::json;

use super::common::{require_existing_store, store_error, write_json, write_text};
use super::{CommandError, GlobalArgs};
use crate::agent::runtime::AgentStepRecord;
use crate::render;
use crate::store::{Store, StoredExchange};

/// The schema name of `diag trace --json` output.
pub const TRACE_JSON_SCHEMA: &str = "diag.trace.v1";

/// Print a stored run: header, timeline, tool calls, verdict and answer.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The run to print (as shown by `diag ask` and `diag runs`)
    pub run_id: String,
    /// Print a JSON document (schema diag.trace.v1) instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn cmd_trace(
    g: &GlobalArgs,
    args: &TraceArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let store = require_existing_store(g)?;
    trace(&store, args, out)
}

fn trace(store: &Store, args: &TraceArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let run = store
        .get_run(&args.run_id)
        .map_err(store_error)?
        .ok_or_else(|| {
            CommandError::usage(format!(
                "unknown run `{}` (diag runs lists the stored runs)",
                render::one_line(&args.run_id, 80)
            ))
        })?;
    let events = store.events(&run.run_id).map_err(store_error)?;
    let invocations = store.invocations(&run.run_id).map_err(store_error)?;
    let exchanges = store.exchanges(&run.run_id).map_err(store_error)?;
    if args.json {
        let steps = store.agent_steps(&run.run_id).map_err(store_error)?;
        let steps: Vec<serde_json::Value> = steps
            .iter()
            .map(|s| step_json(&s.step, &exchanges))
            .collect();
        let evaluation = store.evaluation(&run.run_id).map_err(store_error)?;
        return write_json(
            out,
            &json!({
                "schema": TRACE_JSON_SCHEMA,
                "run": {
                    "run_id": run.run_id,
                    "session_id": run.session_id,
                    "question": run.question,
                    "status": run.status.as_str(),
                    "failure": run.failure,
                    "answer": run.answer,
                    "started_at": run.started_at,
                    "finished_at": run.finished_at,
                    "duration_ms": run.duration_ms,
                    "prompt_tokens": run.prompt_tokens,
                    "completion_tokens": run.completion_tokens,
                    "step_count": run.step_count,
                    "tool_count": run.tool_count,
                    "degraded": run.degraded,
                    "effective_verdict": run.effective_verdict.map(|v| v.as_str()),
                    "fallback_kind": run.fallback_kind.map(|k| k.as_str()),
                    "path": run.path,
                    "self_evaluation": run.self_evaluation,
                },
                "events": events,
                "agent_steps": steps,
                "tool_invocations": invocations,
                "evaluation": evaluation.map(|e| e.metrics),
            }),
        );
    }
    // The Gatekeeper's raw result is kept in the self-evaluation (SPEC §2.3); a run stored
    // before it was, or without one, shows no refused bindings.
    let gatekeeper = run
        .self_evaluation
        .as_ref()
        .and_then(|v| v.pointer("/verifier_evaluation/gatekeeper_raw"))
        .and_then(|v| serde_json::from_value(v.clone()).ok());
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
        render::timeline(&events),
        render::invocations(&invocations),
        render::refused_bindings(gatekeeper.as_ref()),
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
    ]
    .into_iter()
    .filter(|block| !block.is_empty())
    .collect::<Vec<_>>()
    .join("\n");
    write_text(out, &text)
}

/// A model call's step as `diag trace --json` shows it: the stored step, with the error of a
/// failed call (class, the endpoint's bounded message, its HTTP status, the token counts and
/// context size it reported) and how the output contract was sent, from the call's exchange.
fn step_json(step: &AgentStepRecord, exchanges: &[StoredExchange]) -> serde_json::Value {
    let mut v = serde_json::to_value(step).unwrap_or(serde_json::Value::Null);
    let exchange = exchanges.iter().map(|x| &x.exchange).find(|x| {
        x.agent == step.agent
            && x.round == step.round
            && x.attempt == step.attempt
            && x.turn == step.turn
    });
    let Some(exchange) = exchange else {
        return v;
    };
    let form = match &exchange.outcome {
        Ok(r) => r.structured_output,
        Err(e) => {
            let mut error = json!({"class": e.class.as_str(), "message": e.message});
            if let Some(status) = e.status {
                error["status"] = json!(status);
            }
            if let Some(n) = e.context_tokens {
                error["context_tokens"] = json!(n);
            }
            v["error"] = error;
            e.structured_output
        }
    };
    if let Some(form) = form {
        v["structured_output"] = json!(form.as_str());
    }
    v
}
