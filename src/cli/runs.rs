//! `diag runs`: lists stored runs, newest first.

use std::fmt::Write as _;
use std::io::Write;

use clap::Args;
use serde_json::json;

use super::common::{open_store, store_error, write_json, write_text};
use super::{CommandError, GlobalArgs};
use crate::render::one_line;
use crate::store::{RunFilter, RunStatus};

/// The schema name of `diag runs --json` output.
pub const RUNS_JSON_SCHEMA: &str = "diag.runs.v1";

/// List stored runs, newest first.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs of this session
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Only runs with this status (running, success, failed)
    #[arg(long, value_name = "STATUS")]
    pub status: Option<String>,
    /// At most this many runs
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Print a JSON document (schema diag.runs.v1) instead of the table
    #[arg(long)]
    pub json: bool,
}

pub fn cmd_runs(g: &GlobalArgs, args: &RunsArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let status = match &args.status {
        Some(s) => Some(s.parse::<RunStatus>().map_err(|_| {
            CommandError::usage(format!(
                "unknown status `{}` (expected running, success or failed)",
                one_line(s, 40)
            ))
        })?),
        None => None,
    };
    let store = open_store(g)?;
    let runs = store
        .list_runs(&RunFilter {
            session_id: args.session.clone(),
            status,
            limit: Some(args.limit),
        })
        .map_err(store_error)?;
    if args.json {
        let rows: Vec<_> = runs
            .iter()
            .map(|r| {
                json!({
                    "run_id": r.run_id,
                    "session_id": r.session_id,
                    "status": r.status.as_str(),
                    "question": r.question,
                    "started_at": r.started_at,
                    "duration_ms": r.duration_ms,
                    "effective_verdict": r.effective_verdict.map(|v| v.as_str()),
                    "degraded": r.degraded,
                })
            })
            .collect();
        return write_json(out, &json!({"schema": RUNS_JSON_SCHEMA, "runs": rows}));
    }
    let mut text = format!(
        "{:<24}  {:<24}  {:<7}  {:<10}  {:<24}  question\n",
        "run", "session", "status", "verdict", "started"
    );
    for r in &runs {
        let verdict = match (r.effective_verdict, r.degraded) {
            (Some(v), false) => v.as_str().to_string(),
            (Some(v), true) => format!("{}*", v.as_str()),
            (None, true) => "fallback".to_string(),
            (None, false) => "-".to_string(),
        };
        let _ = writeln!(
            text,
            "{:<24}  {:<24}  {:<7}  {:<10}  {:<24}  {}",
            one_line(&r.run_id, 24),
            one_line(&r.session_id, 24),
            r.status.as_str(),
            verdict,
            r.started_at.to_string(),
            one_line(&r.question, 60)
        );
    }
    if runs.is_empty() {
        text.push_str("(no runs)\n");
    }
    write_text(out, &text)
}
