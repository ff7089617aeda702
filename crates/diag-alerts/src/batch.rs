//! `diag investigate alertmanager`'s work once the alerts are read: which groups an earlier
//! run investigated already, the runs of the others (at most `jobs` at once, each result
//! posted as it finishes), the table or `--json` document, and what the runs call for at the
//! end (openspec/specs/alerts/spec.md). The command line parses, reads the alerts, opens the
//! store and prints.

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::investigate::{answer_line, investigate, GroupOutcome, GroupRun};
use crate::notify::{self, NotifyTarget};
use diag_ask::{AskDeps, AskError};
use diag_core::alert::{question_for, AlertGroup, DEFAULT_GROUP_BY};
use diag_core::clock::Timestamp;
use diag_core::graph::NoopObserver;
use diag_core::protocol::Verdict;
use diag_core::store::alerts::AlertSource;
use diag_core::store::{RunStatus, Store, StoreError};
use diag_core::text::one_line;

/// The schema name of `diag investigate alertmanager --json` output.
pub const INVESTIGATE_JSON_SCHEMA: &str = "diag.investigate.v1";

/// One group in the output.
#[derive(Debug, Serialize)]
pub struct GroupRow {
    pub title: String,
    pub group_key: String,
    pub identity: String,
    pub alerts: Vec<AlertRow>,
    pub starts_at: Option<Timestamp>,
    pub question: String,
    /// `investigated`, or `skipped` (a finished run investigated it already).
    pub action: &'static str,
    pub run_id: Option<String>,
    pub status: Option<RunStatus>,
    pub verdict: Option<Verdict>,
    pub degraded: bool,
    pub answer: Option<String>,
    pub failure: Option<String>,
    pub report: Option<PathBuf>,
    pub warnings: Vec<String>,
}

impl GroupRow {
    /// True for a group this command ran (not one an earlier run investigated).
    pub fn investigated(&self) -> bool {
        self.action == "investigated"
    }
}

#[derive(Debug, Serialize)]
pub struct AlertRow {
    pub fingerprint: String,
    pub name: String,
    pub service: Option<String>,
    pub starts_at: Timestamp,
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct InvestigateDoc<'a> {
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

impl<'a> InvestigateDoc<'a> {
    pub fn new(
        alertmanager: String,
        alerts: usize,
        rows: &'a [GroupRow],
        interrupted: bool,
    ) -> Self {
        let ran = || rows.iter().filter(|r| r.investigated());
        let investigated = ran().count();
        let success = ran()
            .filter(|r| r.status == Some(RunStatus::Success))
            .count();
        InvestigateDoc {
            schema: INVESTIGATE_JSON_SCHEMA,
            alertmanager,
            alerts,
            groups: rows,
            investigated,
            skipped: rows.len() - investigated,
            success,
            failed: investigated - success,
            interrupted,
        }
    }
}

/// `--group-by`'s labels: the default set when none is given; each a label name.
pub fn group_labels(given: &[String]) -> Result<Vec<String>, String> {
    if given.is_empty() {
        return Ok(DEFAULT_GROUP_BY.iter().map(|s| s.to_string()).collect());
    }
    let labels: Vec<String> = given
        .iter()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    if let Some(bad) = labels
        .iter()
        .find(|l| !l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(format!(
            "--group-by {}: a label name is letters, digits and _",
            one_line(bad, 80)
        ));
    }
    if labels.is_empty() {
        return Err("--group-by names no label".to_string());
    }
    Ok(labels)
}

/// A group to run, with the index of its row.
pub type Planned = (usize, AlertGroup);

/// A row per group, and the groups to run (by row): those no earlier run investigated, or
/// every one with `again`.
pub fn plan(
    store: &Store,
    groups: Vec<AlertGroup>,
    lookback: Duration,
    again: bool,
) -> Result<(Vec<GroupRow>, Vec<Planned>), StoreError> {
    let mut rows = Vec::with_capacity(groups.len());
    let mut to_run = Vec::new();
    for group in groups {
        let question = question_for(&group, lookback).text;
        let earlier = if again {
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
    Ok((rows, to_run))
}

/// How the runs go: at most `jobs` at once, each result posted to `notify` as it finishes.
pub struct Runs<'a> {
    pub deps: &'a AskDeps,
    pub lookback: Duration,
    pub jobs: usize,
    pub notify: Option<&'a NotifyTarget>,
    pub cancel: &'a CancellationToken,
}

/// Runs the planned groups and fills their rows; `on_done` hears of each run as it ends.
/// When no group's run could be stored, the first error is the command's.
pub async fn run(
    runs: Runs<'_>,
    rows: &mut [GroupRow],
    to_run: Vec<Planned>,
    mut on_done: impl FnMut(&AlertGroup, &Result<GroupOutcome, AskError>),
) -> Result<(), AskError> {
    let Runs {
        deps,
        lookback,
        jobs,
        notify,
        cancel,
    } = runs;
    let results: Vec<_> =
        futures::stream::iter(to_run.into_iter().map(|(row, group)| async move {
            // Several runs at once have no one timeline to show.
            let mut quiet = NoopObserver;
            let run = GroupRun {
                deps,
                lookback,
                source: AlertSource::Api,
                cancel: Some(cancel),
                run_id: None,
            };
            let outcome = investigate(run, &group, &mut quiet).await;
            // Posted as each run finishes, not when the last one does.
            let unposted = match (&outcome, notify) {
                (Ok(o), Some(target)) => {
                    let message = notify::message(target, &group, o, deps.clock.now());
                    notify::post(target, &message).await.err()
                }
                _ => None,
            };
            (row, group, outcome, unposted)
        }))
        .buffer_unordered(jobs.max(1))
        .inspect(|(_, group, outcome, _)| on_done(group, outcome))
        .collect()
        .await;
    let mut first_error = None;
    for (row, _, outcome, unposted) in results {
        let r = &mut rows[row];
        r.warnings.extend(unposted);
        match outcome {
            Ok(o) => {
                r.run_id = Some(o.run_id.clone());
                r.status = Some(o.status);
                r.verdict = o.verdict;
                r.degraded = o.degraded;
                r.answer = o.answer;
                r.failure = o.failure;
                r.warnings.extend(o.warnings);
            }
            Err(e) => {
                r.failure = Some(e.to_string());
                first_error.get_or_insert(e);
            }
        }
    }
    // Nothing could be stored for any group: the store's error is the command's.
    match first_error {
        Some(e)
            if rows
                .iter()
                .filter(|r| r.investigated())
                .all(|r| r.run_id.is_none()) =>
        {
            Err(e)
        }
        _ => Ok(()),
    }
}

/// The table: one row per group.
pub fn table(rows: &[GroupRow], alerts: usize, url: &str) -> String {
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
            text.push_str(cell);
            if i < 4 {
                text.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        let trimmed = text.trim_end().len();
        text.truncate(trimmed);
        text.push('\n');
    }
    text
}

/// How the runs end the command when they do not all succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchEnd {
    /// Interrupted: the runs in flight are stored FAILED.
    Interrupted(String),
    /// A run ended FAILED (or could not be stored).
    Failed(String),
    /// `--strict`: a run was degraded or its verdict not PASS.
    NotStrict(String),
}

/// What the runs call for, most specific first: interruption, a FAILED run, then `strict`;
/// `None` when every run succeeded.
pub fn end(rows: &[GroupRow], interrupted: bool, strict: bool) -> Option<BatchEnd> {
    let ran: Vec<&GroupRow> = rows.iter().filter(|r| r.investigated()).collect();
    if interrupted {
        return Some(BatchEnd::Interrupted(
            "interrupted: the runs in flight are stored FAILED (interrupted)".to_string(),
        ));
    }
    let failed: Vec<&str> = ran
        .iter()
        .filter(|r| r.status != Some(RunStatus::Success))
        .filter_map(|r| r.run_id.as_deref())
        .collect();
    if !failed.is_empty() || ran.iter().any(|r| r.run_id.is_none()) {
        let succeeded = ran
            .iter()
            .filter(|r| r.status == Some(RunStatus::Success))
            .count();
        return Some(BatchEnd::Failed(format!(
            "{} of {} runs ended FAILED ({})",
            ran.len() - succeeded,
            ran.len(),
            failed.join(", ")
        )));
    }
    if !strict {
        return None;
    }
    let r = ran
        .iter()
        .find(|r| r.degraded || r.verdict != Some(Verdict::Pass))?;
    Some(BatchEnd::NotStrict(format!(
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
    )))
}
