//! `diag runs`: lists stored runs, newest first.

use std::fmt::Write as _;
use std::io::Write;

use clap::Args;

use super::common::{write_json, write_text};
use super::{CommandContext, CommandError};
use diag_core::store::{RunFilter, RunStatus};
use diag_core::text::one_line;
use diag_report::documents::runs_json;

/// List stored runs, the most recently stored first.
///
/// The source column: `live` for a run diag ran against its endpoints and tools, `replay`
/// for one replayed from a run file (`diag replay`, `ask --fixture`); `stored` is when the run
/// was stored (a replay's own start time is its recording's). The verdict column: PASS, LOW_CONFID or REJECT as the Verifier's effective verdict; a
/// trailing `*` (`PASS*`) when a Fallback wrote the answer after that verdict; `fallback`
/// when a Fallback answered before any verdict; `-` when there is none (a FAILED or RUNNING
/// run). When more runs are stored than `--limit` shows, a last line says so.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs of this session
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Only runs with this status (running, success, failed)
    #[arg(long, value_name = "STATUS")]
    pub status: Option<String>,
    /// At most this many runs (at least 1)
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Print a JSON document (schema diag.runs.v2) instead of the table
    #[arg(long)]
    pub json: bool,
}

pub fn cmd_runs(
    g: &CommandContext,
    args: &RunsArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    // `--limit 0` would list nothing, which is never what was meant.
    if args.limit == 0 {
        return Err(CommandError::usage("--limit must be at least 1"));
    }
    let status = match &args.status {
        Some(s) => Some(s.parse::<RunStatus>().map_err(|_| {
            CommandError::usage(format!(
                "unknown status `{}` (expected running, success or failed)",
                one_line(s, 40)
            ))
        })?),
        None => None,
    };
    // No store at the default path: diag never stored a run on this machine. One run more
    // than asked tells whether more are stored.
    let mut runs = match g.existing_store()? {
        Some(store) => store
            .list_runs(&RunFilter {
                session_id: args.session.clone(),
                status,
                limit: Some(args.limit.saturating_add(1)),
            })
            .map_err(CommandError::from)?,
        None => Vec::new(),
    };
    let more = runs.len() > args.limit;
    runs.truncate(args.limit);
    if args.json {
        return write_json(out, &runs_json(&runs));
    }
    // Ids are printed whole, so they can be copied into `--session` or `diag trace`; the id
    // columns are as wide as the longest id shown.
    let rows: Vec<[String; 7]> = runs
        .iter()
        .map(|r| {
            let verdict = match (r.effective_verdict, r.degraded) {
                (Some(v), false) => v.as_str().to_string(),
                (Some(v), true) => format!("{}*", v.as_str()),
                (None, true) => "fallback".to_string(),
                (None, false) => "-".to_string(),
            };
            [
                one_line(&r.run_id, usize::MAX),
                one_line(&r.session_id, usize::MAX),
                r.status.as_str().to_string(),
                verdict,
                if r.replay_of.is_some() {
                    "replay"
                } else {
                    "live"
                }
                .to_string(),
                r.created_at.to_string(),
                one_line(&r.question, 60),
            ]
        })
        .collect();
    let header = [
        "run", "session", "status", "verdict", "source", "stored", "question",
    ];
    let minimum = [24, 24, 7, 10, 6, 24, 0];
    let widths: Vec<usize> = (0..6)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([minimum[i], header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: [&str; 7]| {
        let mut l = String::new();
        for (i, w) in widths.iter().enumerate() {
            let _ = write!(l, "{:<w$}  ", cells[i]);
        }
        l.push_str(cells[6]);
        l.push('\n');
        l
    };
    let mut text = line(header);
    for r in &rows {
        text.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6]]));
    }
    if runs.is_empty() {
        text.push_str("(no runs)\n");
    }
    if more {
        let _ = writeln!(
            text,
            "(more runs are stored: diag runs --limit {} lists more)",
            args.limit.saturating_mul(2)
        );
    }
    write_text(out, &text)
}
