//! One alert group investigated: its question ([`diag_core::alert::question_for`]) asked
//! through the ask service, with the group kept beside the run (`run_alert`), so `diag
//! trace` and reports name the alert and a later `investigate` knows the group was
//! investigated. `diag investigate alertmanager` and `diag serve` both call [`investigate`].

use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use diag_ask::live::shown_verdict;
use diag_ask::{ask, AskDeps, AskError, AskOptions, AskRequest};
use diag_core::alert::{question_for, AlertGroup};
use diag_core::graph::Observer;
use diag_core::protocol::Verdict;
use diag_core::store::alerts::{AlertSource, RunAlerts};
use diag_core::store::RunStatus;
use diag_core::text::one_line;
use diag_diagnosis::Status;

/// How a group is investigated.
pub struct GroupRun<'a> {
    pub deps: &'a AskDeps,
    /// How far before the first alert started the question tells the Planner to look.
    pub lookback: Duration,
    pub source: AlertSource,
    /// Cancels the run (it ends FAILED `interrupted`).
    pub cancel: Option<&'a CancellationToken>,
    /// The run's id, when the caller must know it before the run exists (`diag serve` adds
    /// it to its queue's claim first); `None`: the ask service draws one.
    pub run_id: Option<String>,
}

/// What one group's run came to, for a table row, a JSON document and the result webhook.
#[derive(Debug, Clone, Serialize)]
pub struct GroupOutcome {
    pub run_id: String,
    pub status: RunStatus,
    /// The verdict the answer may show (a Verifier's, in the final round).
    pub verdict: Option<Verdict>,
    /// A Fallback answered.
    pub degraded: bool,
    /// The answer of a SUCCESS run.
    pub answer: Option<String>,
    /// Why a FAILED run failed.
    pub failure: Option<String>,
    pub interrupted: bool,
    /// Problems that did not change the run's status.
    pub warnings: Vec<String>,
}

impl GroupOutcome {
    /// The answer's first line, bounded, for a table.
    pub fn answer_line(&self, max: usize) -> String {
        answer_line(self.answer.as_deref(), self.failure.as_deref(), max)
    }
}

/// A run's answer as one table cell: its first non-blank line, else its failure, bounded.
pub fn answer_line(answer: Option<&str>, failure: Option<&str>, max: usize) -> String {
    match (answer, failure) {
        (Some(a), _) => one_line(a.lines().find(|l| !l.trim().is_empty()).unwrap_or(""), max),
        (None, Some(f)) => one_line(f, max),
        (None, None) => String::new(),
    }
}

/// Investigates `group`: one stored run whose question is the group's, with the group
/// recorded beside it. `Err` when nothing could be stored at all (as for `diag ask`).
pub async fn investigate(
    run: GroupRun<'_>,
    group: &AlertGroup,
    progress: &mut dyn Observer<Status>,
) -> Result<GroupOutcome, AskError> {
    let question = question_for(group, run.lookback);
    let alerts = RunAlerts::new(run.source, group.clone());
    let outcome = ask(
        run.deps,
        AskRequest {
            question: question.text,
            session_id: None,
            run_id: run.run_id,
        },
        AskOptions::new(progress)
            .alerts(Some(&alerts))
            .cancel(run.cancel),
    )
    .await?;
    Ok(GroupOutcome {
        run_id: outcome.run_id.clone(),
        status: outcome.status(),
        verdict: shown_verdict(&outcome),
        degraded: outcome.state.degraded,
        answer: outcome.answer().map(str::to_string),
        failure: outcome.failure().map(str::to_string),
        interrupted: outcome.interrupted(),
        warnings: outcome.warnings.clone(),
    })
}
