//! `diag investigate alertmanager`: reads the firing alerts from Alertmanager's API v2,
//! groups them as Alertmanager does, and runs one diagnosis per group that was not
//! investigated yet (openspec/specs/alerts/spec.md).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use futures::StreamExt;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::common::{interrupt_handler, runtime, write_json, write_text};
use super::context::LoadedConfig;
use super::live::{notify_target, remembered_endpoints, warn_unkept};
use super::report_file::ReportFormat;
use super::{CommandContext, CommandError, Exit};
use diag_alerts::alertmanager::{AlertQuery, Alertmanager};
use diag_alerts::investigate::{answer_line, investigate, GroupOutcome, GroupRun};
use diag_alerts::notify;
use diag_ask::live::live_deps;
use diag_ask::setup;
use diag_core::alert::{group_alerts, question_for, AlertGroup, ApiState, DEFAULT_GROUP_BY};
use diag_core::clock::{Clock, SystemClock, Timestamp};
use diag_core::graph::NoopObserver;
use diag_core::protocol::Verdict;
use diag_core::store::alerts::AlertSource;
use diag_core::store::RunStatus;
use diag_core::text::one_line;
use diag_report::Format;

/// The schema name of `diag investigate alertmanager --json` output.
pub const INVESTIGATE_JSON_SCHEMA: &str = "diag.investigate.v1";

/// Investigate alerts: one verified diagnosis per alert group.
#[derive(Debug, Args)]
pub struct InvestigateArgs {
    #[command(subcommand)]
    pub source: InvestigateSource,
}

#[derive(Debug, Subcommand)]
pub enum InvestigateSource {
    /// Read the firing alerts from Alertmanager's API v2 and investigate each group once.
    ///
    /// Exit codes for many runs: 0 when every run is SUCCESS (or there was nothing to
    /// investigate); 3 when any run ended FAILED; 4 under --strict when any run was degraded
    /// or not PASS; 130 when interrupted (the runs in flight are stored FAILED); 2 when the
    /// Alertmanager cannot be read (nothing is run or stored).
    Alertmanager(AlertmanagerArgs),
}

#[derive(Debug, Args)]
pub struct AlertmanagerArgs {
    /// Alertmanager's root URL, e.g. http://127.0.0.1:9093
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Only the alerts this matcher selects, as Alertmanager takes it (alertname="X",
    /// service=~"check.*", env!="dev"); repeat for several (all must match)
    #[arg(long = "filter", value_name = "MATCHER")]
    pub filters: Vec<String>,
    /// Also investigate silenced alerts
    #[arg(long)]
    pub silenced: bool,
    /// Also investigate inhibited alerts
    #[arg(long)]
    pub inhibited: bool,
    /// Group alerts by these labels (repeat, or comma-separate) [default: alertname, service,
    /// job]
    #[arg(long = "group-by", value_name = "LABEL", value_delimiter = ',')]
    pub group_by: Vec<String>,
    /// How far before the first alert of a group started its question looks (30m, 1h, 90s)
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = super::common::parse_duration)]
    pub lookback: Duration,
    /// Investigate a group again even when a finished run already investigated it
    #[arg(long)]
    pub again: bool,
    /// How many groups are investigated at once
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: u32,
    /// Also write each run's report into this folder, as RUN_ID.html (or .md with --format md)
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// The format of --report-dir's reports
    #[arg(long, value_enum, default_value = "html", requires = "report_dir")]
    pub format: ReportFormat,
    /// Print a JSON document (schema diag.investigate.v1) instead of a table
    #[arg(long)]
    pub json: bool,
    /// Exit 4 when a run succeeded but was degraded or its verdict was not PASS
    #[arg(long)]
    pub strict: bool,
}

/// One group in the output.
#[derive(Debug, Serialize)]
struct GroupRow {
    title: String,
    group_key: String,
    identity: String,
    alerts: Vec<AlertRow>,
    starts_at: Option<Timestamp>,
    question: String,
    /// `investigated`, or `skipped` (a finished run investigated it already).
    action: &'static str,
    run_id: Option<String>,
    status: Option<RunStatus>,
    verdict: Option<Verdict>,
    degraded: bool,
    answer: Option<String>,
    failure: Option<String>,
    report: Option<PathBuf>,
    warnings: Vec<String>,
}

#[derive(Debug, Serialize)]
struct AlertRow {
    fingerprint: String,
    name: String,
    service: Option<String>,
    starts_at: Timestamp,
}

#[derive(Debug, Serialize)]
struct InvestigateDoc<'a> {
    schema: &'static str,
    alertmanager: String,
    alerts: usize,
    groups: &'a [GroupRow],
    investigated: usize,
    skipped: usize,
    success: usize,
    failed: usize,
    interrupted: bool,
}

pub fn cmd_investigate(
    g: &CommandContext,
    args: &InvestigateArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    match &args.source {
        InvestigateSource::Alertmanager(a) => cmd_alertmanager(g, a, out),
    }
}

fn group_by(args: &AlertmanagerArgs) -> Result<Vec<String>, CommandError> {
    if args.group_by.is_empty() {
        return Ok(DEFAULT_GROUP_BY.iter().map(|s| s.to_string()).collect());
    }
    let labels: Vec<String> = args
        .group_by
        .iter()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    if let Some(bad) = labels
        .iter()
        .find(|l| !l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(CommandError::usage(format!(
            "--group-by {}: a label name is letters, digits and _",
            one_line(bad, 80)
        )));
    }
    if labels.is_empty() {
        return Err(CommandError::usage("--group-by names no label"));
    }
    Ok(labels)
}

fn cmd_alertmanager(
    g: &CommandContext,
    args: &AlertmanagerArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let by = group_by(args)?;
    let am = Alertmanager::new(&args.url).map_err(|e| CommandError::usage(e.to_string()))?;
    if let Some(dir) = &args.report_dir {
        if !dir.is_dir() {
            return Err(CommandError::usage(format!(
                "--report-dir {}: not a folder",
                dir.display()
            )));
        }
    }
    let LoadedConfig { config, path } = g.config()?;
    let notify = notify_target(&config, None)?;
    let rt = runtime()?;
    let query = AlertQuery {
        filters: args.filters.clone(),
        silenced: args.silenced,
        inhibited: args.inhibited,
    };
    // The alerts are read before anything is opened or stored: an Alertmanager that cannot
    // be read leaves no trace.
    let listed = rt
        .block_on(am.alerts(&query))
        .map_err(|e| CommandError::usage(e.to_string()))?;
    let alerts: Vec<_> = listed
        .into_iter()
        .filter(|l| match l.state {
            ApiState::Active | ApiState::Unprocessed => true,
            ApiState::Suppressed {
                silenced,
                inhibited,
            } => (silenced && args.silenced) || (inhibited && args.inhibited),
        })
        .map(|l| l.alert)
        .collect();
    let alert_count = alerts.len();
    let groups = group_alerts(alerts, &by);
    let store = g.store()?;
    let mut rows = Vec::with_capacity(groups.len());
    let mut to_run: Vec<(usize, AlertGroup)> = Vec::new();
    for group in groups {
        let question = question_for(&group, args.lookback).text;
        let earlier = if args.again {
            None
        } else {
            store.investigated_run(&group.identity())?
        };
        // The earlier run's status: finished, or RUNNING (another process investigates it).
        let earlier_status = match &earlier {
            Some(run_id) => store.get_run(run_id)?.map(|r| r.status),
            None => None,
        };
        rows.push(GroupRow {
            title: group.title(),
            group_key: group.group_key.clone(),
            identity: group.identity(),
            alerts: group
                .alerts
                .iter()
                .map(|a| AlertRow {
                    fingerprint: a.fingerprint.clone(),
                    name: a.name().to_string(),
                    service: a.service().map(str::to_string),
                    starts_at: a.starts_at,
                })
                .collect(),
            starts_at: group.starts_at(),
            question,
            action: if earlier.is_some() {
                "skipped"
            } else {
                "investigated"
            },
            run_id: earlier.clone(),
            status: earlier_status,
            verdict: None,
            degraded: false,
            answer: None,
            failure: None,
            report: None,
            warnings: Vec::new(),
        });
        if earlier.is_none() {
            to_run.push((rows.len() - 1, group));
        }
    }

    let show_progress = g.show_progress(args.json);
    let interrupted = rt.block_on(async {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let (memory, learnings) = remembered_endpoints(&store);
        let env = setup::live_with(&config, clock.clone(), &memory)
            .await
            .map_err(|e| CommandError::usage(format!("config {}: {e}", path.display())))?;
        let deps = live_deps(&env, clock, &store);
        let cancel = CancellationToken::new();
        let on_ctrl_c = interrupt_handler(cancel.clone())?;
        type Ran = (
            usize,
            AlertGroup,
            Result<GroupOutcome, diag_ask::AskError>,
            Option<String>,
        );
        let results: Vec<Ran> = futures::stream::iter(to_run.into_iter().map(|(row, group)| {
            let deps = &deps;
            let cancel = &cancel;
            let notify = &notify;
            let lookback = args.lookback;
            async move {
                // Several runs at once have no one timeline to show.
                let mut quiet = NoopObserver;
                let outcome = investigate(
                    GroupRun {
                        deps,
                        lookback,
                        source: AlertSource::Api,
                        cancel: Some(cancel),
                        run_id: None,
                    },
                    &group,
                    &mut quiet,
                )
                .await;
                // Posted as each run finishes, not when the last one does.
                let unposted = match (&outcome, notify) {
                    (Ok(o), Some(target)) => notify::post(
                        target,
                        &notify::message(target, &group, o, deps.clock.now()),
                    )
                    .await
                    .err(),
                    _ => None,
                };
                (row, group, outcome, unposted)
            }
        }))
        .buffer_unordered(args.jobs as usize)
        .inspect(|(_, group, outcome, _)| {
            if show_progress {
                let line = match outcome {
                    Ok(o) => format!(
                        "diag: {} → run {} {}",
                        group.title(),
                        o.run_id,
                        o.status.as_str()
                    ),
                    Err(e) => format!("diag: {} → {e}", group.title()),
                };
                let _ = writeln!(std::io::stderr(), "{}", one_line(&line, 300));
            }
        })
        .collect()
        .await;
        on_ctrl_c.abort();
        env.shutdown().await;
        warn_unkept(&learnings);
        let mut first_error = None;
        for (row, _, outcome, unposted) in results {
            rows[row].warnings.extend(unposted);
            match outcome {
                Ok(o) => {
                    let r = &mut rows[row];
                    r.run_id = Some(o.run_id.clone());
                    r.status = Some(o.status);
                    r.verdict = o.verdict;
                    r.degraded = o.degraded;
                    r.answer = o.answer;
                    r.failure = o.failure;
                    r.warnings.extend(o.warnings);
                }
                Err(e) => {
                    rows[row].failure = Some(e.to_string());
                    first_error.get_or_insert(e);
                }
            }
        }
        // Nothing could be stored for any group: the store's error is the command's.
        if let Some(e) = first_error {
            if rows
                .iter()
                .filter(|r| r.action == "investigated")
                .all(|r| r.run_id.is_none())
            {
                return Err(CommandError::from(e));
            }
        }
        Ok::<bool, CommandError>(cancel.is_cancelled())
    })?;

    if let Some(dir) = &args.report_dir {
        let format: Format = args.format.into();
        for r in rows.iter_mut().filter(|r| r.action == "investigated") {
            let Some(run_id) = &r.run_id else { continue };
            let file = dir.join(format!("{run_id}.{}", format.extension()));
            match super::report_file::write_file(&store, run_id, format, &file) {
                Ok(()) => r.report = Some(file),
                Err(e) => r.warnings.push(e.to_string()),
            }
        }
    }
    for r in &rows {
        for w in &r.warnings {
            let _ = writeln!(std::io::stderr(), "diag: warning: {}", one_line(w, 300));
        }
    }
    let investigated = rows.iter().filter(|r| r.action == "investigated").count();
    let success = rows
        .iter()
        .filter(|r| r.action == "investigated" && r.status == Some(RunStatus::Success))
        .count();
    let failed = rows
        .iter()
        .filter(|r| r.action == "investigated" && r.status != Some(RunStatus::Success))
        .count();
    if args.json {
        write_json(
            out,
            &InvestigateDoc {
                schema: INVESTIGATE_JSON_SCHEMA,
                alertmanager: am.url(),
                alerts: alert_count,
                groups: &rows,
                investigated,
                skipped: rows.len() - investigated,
                success,
                failed,
                interrupted,
            },
        )?;
    } else {
        write_text(out, &table(&rows, alert_count, &am.url()))?;
    }
    outcome_exit(args, &rows, interrupted)
}

/// The table: one row per group.
fn table(rows: &[GroupRow], alerts: usize, url: &str) -> String {
    if rows.is_empty() {
        return format!("no firing alerts at {url} ({alerts} listed)\n");
    }
    let mut lines = vec![[
        "ALERT".to_string(),
        "RUN".to_string(),
        "STATUS".to_string(),
        "VERDICT".to_string(),
        "ANSWER".to_string(),
    ]];
    for r in rows {
        let status = match (r.action, r.status) {
            ("skipped", _) => "skipped".to_string(),
            (_, Some(s)) => s.as_str().to_string(),
            (_, None) => "not run".to_string(),
        };
        let answer = if r.action == "skipped" && r.status == Some(RunStatus::Running) {
            "being investigated by that run".to_string()
        } else if r.action == "skipped" {
            "investigated before (--again repeats)".to_string()
        } else {
            answer_line(r.answer.as_deref(), r.failure.as_deref(), 80)
        };
        lines.push([
            one_line(&r.title, 50),
            r.run_id.clone().unwrap_or_else(|| "-".into()),
            status,
            r.verdict
                .map_or("-".to_string(), |v| v.as_str().to_string()),
            answer,
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for l in &lines {
        for (i, cell) in l.iter().enumerate() {
            if i < 4 {
                text.push_str(cell);
                text.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            } else {
                text.push_str(cell);
            }
        }
        let trimmed = text.trim_end().len();
        text.truncate(trimmed);
        text.push('\n');
    }
    text
}

/// The exit the runs call for, most specific first: interruption, a FAILED run, then
/// `--strict`.
fn outcome_exit(
    args: &AlertmanagerArgs,
    rows: &[GroupRow],
    interrupted: bool,
) -> Result<(), CommandError> {
    let ran: Vec<&GroupRow> = rows.iter().filter(|r| r.action == "investigated").collect();
    if interrupted {
        return Err(CommandError::new(
            Exit::Interrupted,
            "interrupted: the runs in flight are stored FAILED (interrupted)",
        ));
    }
    let failed: Vec<&str> = ran
        .iter()
        .filter(|r| r.status != Some(RunStatus::Success))
        .filter_map(|r| r.run_id.as_deref())
        .collect();
    if !failed.is_empty() || ran.iter().any(|r| r.run_id.is_none()) {
        return Err(CommandError::new(
            Exit::RunFailed,
            format!(
                "{} of {} runs ended FAILED ({})",
                ran.len()
                    - ran
                        .iter()
                        .filter(|r| r.status == Some(RunStatus::Success))
                        .count(),
                ran.len(),
                failed.join(", ")
            ),
        ));
    }
    if args.strict {
        if let Some(r) = ran
            .iter()
            .find(|r| r.degraded || r.verdict != Some(Verdict::Pass))
        {
            return Err(CommandError::new(
                Exit::NotStrict,
                format!(
                    "--strict: run {} is {}",
                    r.run_id.as_deref().unwrap_or("-"),
                    if r.degraded {
                        "degraded (a Fallback answered)".to_string()
                    } else {
                        format!(
                            "{} rather than PASS",
                            r.verdict.map_or("without a verdict", |v| v.as_str())
                        )
                    }
                ),
            ));
        }
    }
    Ok(())
}
