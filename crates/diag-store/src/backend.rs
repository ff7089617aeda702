//! The rules a backend applies around its SQL, written once for every backend as plain
//! functions over plain data: a backend crate binds these to its statements and does nothing
//! else but its SQL and its connection handling.
//!
//! - which runs take which writes: a new run needs a run id, trace rows and a finish need a
//!   RUNNING run ([`require_running`]), an evaluation a SUCCESS run ([`require_evaluable`]),
//!   and only a finished run is copied ([`check_importable`]);
//! - the events a run's recorder holds until its next commit point ([`Held`]);
//! - how a run is finished: the order of the finishing transaction's statements and what a
//!   refused one means ([`FinishPlan`], [`FinishStatements`]), and the final row it writes,
//!   by the owner, by a copy or by the sweep ([`FinishRow`]);
//! - what a run copied from another store writes ([`CopiedRun`]);
//! - which runs `gc` deletes ([`Retention`]).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::codec::{canonical, EvaluationText};
use super::sql::Driver;
use super::{
    Finish, FinishError, FinishReport, NewRun, RecordError, Reuse, RunRow, RunStatus, StoreError,
    StoredOwner, StoredRun, INTERRUPTED,
};
use diag_graph::clock::Timestamp;
use diag_graph::Event;
use diag_records::json::canonical_json;
use diag_records::step::ModelExchange;

/// A new run needs a non-blank run id.
pub fn check_new_run(run: &NewRun) -> Result<(), RecordError> {
    if run.run_id.trim().is_empty() {
        return Err(RecordError::Invalid(
            "a run needs a non-empty run_id".into(),
        ));
    }
    Ok(())
}

/// Only a finished run is copied into another store: a RUNNING one is not final.
pub fn check_importable(run: &RunRow) -> Result<(), RecordError> {
    if run.status == RunStatus::Running {
        return Err(RecordError::Invalid(format!(
            "run {} is RUNNING; only a finished run is copied",
            run.run_id
        )));
    }
    Ok(())
}

/// Why a write that needs `run_id` RUNNING (a trace row, a finish) was refused, by the run's
/// stored status (`None`: no such run).
pub fn not_running(run_id: &str, status: Option<String>) -> RecordError {
    refusal(run_id, status, RunStatus::Running)
}

/// A trace row or a finish lands only in a RUNNING run: `Ok` for that stored status, the
/// refusal ([`not_running`]) for any other or for no run.
pub fn require_running(run_id: &str, status: Option<String>) -> Result<(), RecordError> {
    require(run_id, status, RunStatus::Running)
}

/// Why an evaluation of `run_id` was refused, by the run's stored status (`None`: no such
/// run).
pub fn not_evaluable(run_id: &str, status: Option<String>) -> RecordError {
    refusal(run_id, status, RunStatus::Success)
}

/// Only a SUCCESS run is evaluated: `Ok` for that stored status, the refusal
/// ([`not_evaluable`]) for any other or for no run.
pub fn require_evaluable(run_id: &str, status: Option<String>) -> Result<(), RecordError> {
    require(run_id, status, RunStatus::Success)
}

/// `Ok` when the stored `status` of `run_id` is `needed`, its refusal otherwise.
fn require(run_id: &str, status: Option<String>, needed: RunStatus) -> Result<(), RecordError> {
    match status {
        Some(s) if s == needed.as_str() => Ok(()),
        other => Err(refusal(run_id, other, needed)),
    }
}

/// The refusal of a write that needs `run_id` in state `needed` (RUNNING, or SUCCESS for an
/// evaluation), by its stored `status`.
fn refusal(run_id: &str, status: Option<String>, needed: RunStatus) -> RecordError {
    let run_id = run_id.to_string();
    match status {
        None => RecordError::UnknownRun(run_id),
        Some(status) if needed == RunStatus::Success => {
            RecordError::NotEvaluable { run_id, status }
        }
        Some(status) => RecordError::NotRunning { run_id, status },
    }
}

/// The orchestration events reported through the recorders of a store handle and not yet
/// committed, per run, as the rows the backend built for them when they were reported (so a
/// detail that cannot be stored is an error then). When they are committed is the
/// recorder's rule (`recorder.rs`): a flush commits them ([`Held::flush`]), a finish writes
/// them in its own transaction ([`Held::finish`]).
pub struct Held<R> {
    runs: Mutex<HashMap<String, Vec<R>>>,
}

impl<R> Default for Held<R> {
    fn default() -> Self {
        Held {
            runs: Mutex::new(HashMap::new()),
        }
    }
}

impl<R: Clone> Held<R> {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<R>>> {
        // A panic while the lock was held leaves a map of whole rows: still sound.
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds the row built for an event of `run_id` until the run's next commit point; a row
    /// that could not be built is the event's error, now.
    pub fn hold<E: Into<StoreError>>(
        &self,
        run_id: &str,
        row: Result<R, E>,
    ) -> Result<(), StoreError> {
        let row = row.map_err(Into::into)?;
        self.lock().entry(run_id.to_string()).or_default().push(row);
        Ok(())
    }

    /// Commits the rows held for `run_id`, in the order they were reported, through `commit`
    /// (one transaction, each row standing alone): they are no longer held, and the refused
    /// ones' errors are returned.
    pub fn flush<E: Into<StoreError>>(
        &self,
        run_id: &str,
        commit: impl FnOnce(&[R]) -> Vec<E>,
    ) -> Vec<StoreError> {
        let rows = self.lock().remove(run_id).unwrap_or_default();
        if rows.is_empty() {
            return Vec::new();
        }
        commit(&rows).into_iter().map(Into::into).collect()
    }

    /// Finishes `run_id` with the rows held for it: `write` runs the finishing transaction
    /// over them (through [`FinishPlan::run`]). The rows stay held until the finish
    /// commits: a refused SUCCESS leaves them for the FAILED finish that follows. Once it
    /// commits, the rows it wrote are no longer held (any reported meanwhile still are).
    pub fn finish(
        &self,
        run_id: &str,
        write: impl FnOnce(&[R]) -> Result<FinishReport, FinishError>,
    ) -> Result<FinishReport, FinishError> {
        let rows = self.lock().get(run_id).cloned().unwrap_or_default();
        let report = write(&rows)?;
        let mut held = self.lock();
        if let Some(now) = held.get_mut(run_id) {
            now.drain(..rows.len().min(now.len()));
            if now.is_empty() {
                held.remove(run_id);
            }
        }
        Ok(report)
    }
}

/// The statements of a run's finish, in a backend's one finishing transaction:
/// [`FinishPlan::run`] runs them in order and decides what a refusal means. `Err` from any
/// of them rolls the transaction back.
pub trait FinishStatements {
    /// A held event as the backend built its row.
    type Row;
    type Error: Into<StoreError>;
    /// Checks that the run is RUNNING (locking its row, on a backend that locks rows):
    /// [`require_running`].
    fn require_running(&mut self, run_id: &str) -> Result<(), Self::Error>;
    /// Inserts the held events, each standing alone (a refused one undoes only itself):
    /// `Ok` with the refused ones' errors in row order, `Err` when the transaction itself is
    /// lost.
    fn insert_events(
        &mut self,
        run_id: &str,
        rows: &[Self::Row],
    ) -> Result<Vec<Self::Error>, Self::Error>;
    /// Writes the run's final row ([`FinishRow`]), its counts and path taken from its stored
    /// trace.
    fn update_run(&mut self, run_id: &str) -> Result<(), Self::Error>;
    /// Stores the evaluation given with a SUCCESS under a savepoint: `Ok(Some)` when it alone
    /// was refused, `Err` when the transaction itself is lost.
    fn insert_evaluation(
        &mut self,
        run_id: &str,
        evaluation: &EvaluationText,
    ) -> Result<Option<Self::Error>, Self::Error>;
}

/// A run's finish (`RunWriter::finish_run`), ready before its transaction opens: the final
/// row and the evaluation as the store writes them.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishPlan {
    pub status: RunStatus,
    pub row: FinishRow,
    /// Given with a SUCCESS only.
    pub evaluation: Option<EvaluationText>,
}

impl FinishPlan {
    /// The finish `finish` asks for, made at `now` (the evaluation's time, and the run's
    /// finish time unless the summary says when).
    pub fn new(finish: &Finish<'_>, now: Timestamp) -> FinishPlan {
        FinishPlan {
            status: finish.status,
            row: FinishRow::finished(finish, now),
            evaluation: finish.evaluation.map(|m| EvaluationText::new(m, now)),
        }
    }

    /// The finish of `run_id` with its held `rows`, inside the backend's transaction: a run
    /// that is unknown or no longer RUNNING is refused as the run's error, held rows or not
    /// (each would be refused for that same reason); a SUCCESS is all or nothing for its
    /// trace, so a refused held event refuses it ([`FinishError::Trace`], the first one)
    /// before the run row is touched, while a FAILED run keeps the rows the store accepts; a
    /// refused evaluation is reported beside a SUCCESS that stands. On `Err` the backend
    /// rolls the transaction back.
    pub fn run<S: FinishStatements>(
        &self,
        run_id: &str,
        rows: &[S::Row],
        statements: &mut S,
    ) -> Result<FinishReport, FinishError> {
        let run = |e: S::Error| FinishError::Run(e.into());
        statements.require_running(run_id).map_err(run)?;
        let refused = statements.insert_events(run_id, rows).map_err(run)?;
        if self.status == RunStatus::Success {
            if let Some(first) = refused.into_iter().next() {
                return Err(FinishError::Trace(first.into()));
            }
        }
        statements.update_run(run_id).map_err(run)?;
        let evaluation_error = match &self.evaluation {
            Some(evaluation) => statements
                .insert_evaluation(run_id, evaluation)
                .map_err(run)?,
            None => None,
        };
        Ok(FinishReport {
            evaluation_error: evaluation_error.map(Into::into),
        })
    }
}

/// What the finish statement writes on a run's row besides the counts and the path, which
/// it takes from the stored trace. Plain text and numbers, ready to bind.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishRow {
    pub status: RunStatus,
    pub failure: Option<String>,
    pub answer: Option<String>,
    pub finished_at: Option<String>,
    pub duration_ms: Option<i64>,
    pub degraded: bool,
    pub effective_verdict: Option<&'static str>,
    pub fallback_kind: Option<&'static str>,
    /// Canonical JSON.
    pub self_evaluation: Option<String>,
    pub reuse: Option<Reuse>,
}

impl FinishRow {
    /// A run finished by its owner: what the caller knows, finished at `now` unless the
    /// summary says when.
    pub fn finished(finish: &Finish<'_>, now: Timestamp) -> FinishRow {
        let summary = &finish.summary;
        FinishRow {
            status: finish.status,
            failure: finish.failure.map(str::to_string),
            answer: summary.answer.clone(),
            finished_at: Some(summary.finished_at.unwrap_or(now).to_string()),
            duration_ms: summary.duration_ms.map(super::codec::stored_int),
            degraded: summary.degraded,
            effective_verdict: summary.effective_verdict.map(|v| v.as_str()),
            fallback_kind: summary.fallback_kind.map(|k| k.as_str()),
            self_evaluation: summary.self_evaluation.as_ref().map(canonical_json),
            reuse: summary.reuse.clone(),
        }
    }

    /// A run copied from another store: its outcome as the original has it.
    pub fn copied(run: &RunRow) -> FinishRow {
        FinishRow {
            status: run.status,
            failure: run.failure.clone(),
            answer: run.answer.clone(),
            finished_at: run.finished_at.map(|t| t.to_string()),
            duration_ms: run.duration_ms.map(super::codec::stored_int),
            degraded: run.degraded,
            effective_verdict: run.effective_verdict.map(|v| v.as_str()),
            fallback_kind: run.fallback_kind.map(|k| k.as_str()),
            self_evaluation: run.self_evaluation.as_ref().map(canonical_json),
            reuse: run.reuse.clone(),
        }
    }

    /// A run whose owner is gone, swept at `now`: FAILED (`interrupted`), with nothing of its
    /// outcome known (its reuse counts included: the owner died before it could say).
    pub fn interrupted(now: Timestamp) -> FinishRow {
        FinishRow {
            status: RunStatus::Failed,
            failure: Some(INTERRUPTED.to_string()),
            answer: None,
            finished_at: Some(now.to_string()),
            duration_ms: None,
            degraded: false,
            effective_verdict: None,
            fallback_kind: None,
            self_evaluation: None,
            reuse: None,
        }
    }
}

/// A finished run copied from another store (`RunMaintenance::import_run`), ready before the
/// copy's transaction opens: what its rows and its finish write, its outcome, creation time
/// and evaluation as the original has them, so the copy reads back (and exports) exactly as
/// the original. `E` and `X` are the backend's rows of an event and of a model exchange.
pub struct CopiedRun<E, X> {
    /// The tool catalog, canonical JSON.
    pub tools: String,
    /// The limits, canonical JSON.
    pub limits: Option<String>,
    pub events: Vec<E>,
    pub exchanges: Vec<X>,
    pub finish: FinishRow,
    pub evaluation: Option<EvaluationText>,
}

impl<E, X> CopiedRun<E, X> {
    /// The copy of `stored`, a finished run ([`check_importable`]), its event and exchange
    /// rows built by `event` and `exchange`.
    pub fn of<Err: From<RecordError>>(
        stored: &StoredRun,
        event: impl Fn(&Event<String>) -> Result<E, Err>,
        exchange: impl Fn(&ModelExchange) -> Result<X, Err>,
    ) -> Result<Self, Err> {
        let run = &stored.run;
        Ok(CopiedRun {
            tools: canonical(&run.tools)?,
            limits: run.limits.as_ref().map(canonical).transpose()?,
            events: stored.events.iter().map(event).collect::<Result<_, _>>()?,
            exchanges: (stored.exchanges.iter())
                .map(|x| exchange(&x.exchange))
                .collect::<Result<_, _>>()?,
            finish: FinishRow::copied(run),
            evaluation: (stored.evaluation.as_ref())
                .map(|e| EvaluationText::new(&e.metrics, e.created_at)),
        })
    }
}

/// Which finished runs `gc` deletes: those created before `cutoff` (by the store's own
/// `created_at`, so a replay of an old recording is as young as the replay), and those not
/// among the `keep` most recently created. RUNNING runs are never deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// RFC 3339, compared with `created_at`.
    pub cutoff: Option<String>,
    pub keep: Option<i64>,
}

impl Retention {
    /// The rules of a `gc` at `now`; `None` when neither is given: nothing is deleted.
    pub fn new(now: Timestamp, older_than: Option<Duration>, keep: Option<usize>) -> Option<Self> {
        let cutoff = older_than.map(|age| {
            let age = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
            Timestamp::from_unix_ms(now.unix_ms().saturating_sub(age)).to_string()
        });
        let keep = keep.map(|k| i64::try_from(k).unwrap_or(i64::MAX));
        (cutoff.is_some() || keep.is_some()).then_some(Retention { cutoff, keep })
    }
}

/// The owners of every RUNNING run: what [`super::RunWriter::sweep_interrupted`] reads first
/// on any backend, before `diag_owner::gone_runs` judges which are gone.
pub fn running_owners<D: Driver>(d: &D) -> Result<Vec<StoredOwner>, StoreError> {
    d.read("find interrupted runs", |tx| {
        tx.query(d.statements().running_owners, &[])?
            .iter()
            .map(|r| {
                Ok(StoredOwner {
                    run_id: r.text(0, "run id")?,
                    host: r.opt_text(1, "run owner host")?,
                    pid: r.int(2, "run owner pid")?,
                    token: r.opt_text(3, "run owner token")?,
                    lease_expires_at: r.opt_text(4, "run lease")?,
                })
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunSummary;

    const NOW: Timestamp = Timestamp::from_unix_ms(1_000_000);

    /// A RUNNING run as a store reads it back.
    fn row(run_id: &str, created_at: Timestamp) -> RunRow {
        RunRow {
            run_id: run_id.into(),
            session_id: "s".into(),
            question: "q".into(),
            status: RunStatus::Running,
            failure: None,
            answer: None,
            started_at: created_at,
            finished_at: None,
            duration_ms: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            step_count: 0,
            tool_count: 0,
            degraded: false,
            effective_verdict: None,
            fallback_kind: None,
            path: Vec::new(),
            self_evaluation: None,
            tools: Vec::new(),
            limits: None,
            owner_pid: 1,
            created_at,
            resumed_from: None,
            replay_of: None,
            reuse: None,
        }
    }

    fn event(seq: u32) -> Event<String> {
        Event {
            seq,
            node: "planner".into(),
            attempt: 1,
            round: 1,
            status: "COMPLETED".into(),
            started_at: NOW,
            duration_ms: 1,
            detail: Default::default(),
        }
    }

    #[test]
    fn a_write_is_refused_by_its_runs_state_with_one_message() {
        let status = |s: &str| Some(s.to_string());
        assert!(require_running("r", status("RUNNING")).is_ok());
        assert_eq!(
            require_running("r", None).unwrap_err().to_string(),
            "unknown run r"
        );
        assert_eq!(
            require_running("r", status("SUCCESS"))
                .unwrap_err()
                .to_string(),
            "run r is SUCCESS, not RUNNING; it cannot be finished again"
        );
        assert!(require_evaluable("r", status("SUCCESS")).is_ok());
        assert_eq!(
            require_evaluable("r", None).unwrap_err(),
            RecordError::UnknownRun("r".into())
        );
        for s in ["RUNNING", "FAILED"] {
            assert_eq!(
                require_evaluable("r", status(s)).unwrap_err().to_string(),
                format!("run r is {s}; only a SUCCESS run is evaluated")
            );
        }
    }

    #[test]
    fn a_new_run_needs_an_id_and_only_a_finished_run_is_copied() {
        let mut run = NewRun {
            run_id: " ".into(),
            session_id: "s".into(),
            question: "q".into(),
            started_at: NOW,
            tools: Vec::new(),
            limits: None,
            resumed_from: None,
            replay_of: None,
        };
        assert_eq!(
            check_new_run(&run).unwrap_err().to_string(),
            "invalid record: a run needs a non-empty run_id"
        );
        run.run_id = "r".into();
        assert!(check_new_run(&run).is_ok());

        let mut stored = row("r", NOW);
        assert_eq!(
            check_importable(&stored).unwrap_err().to_string(),
            "invalid record: run r is RUNNING; only a finished run is copied"
        );
        for status in [RunStatus::Success, RunStatus::Failed] {
            stored.status = status;
            assert!(check_importable(&stored).is_ok());
        }
    }

    /// A backend's finish statements, scripted: the run's stored status, which held rows it
    /// refuses, whether the events lose the transaction, whether the evaluation is refused.
    #[derive(Default)]
    struct Script {
        status: Option<&'static str>,
        refused: Vec<u32>,
        lost: bool,
        evaluation_refused: bool,
        done: Vec<&'static str>,
    }

    impl FinishStatements for Script {
        type Row = u32;
        type Error = RecordError;

        fn require_running(&mut self, run_id: &str) -> Result<(), RecordError> {
            self.done.push("check");
            require_running(run_id, self.status.map(str::to_string))
        }

        fn insert_events(
            &mut self,
            run_id: &str,
            rows: &[u32],
        ) -> Result<Vec<RecordError>, RecordError> {
            self.done.push("events");
            let refused: Vec<RecordError> = rows
                .iter()
                .filter(|seq| self.refused.contains(seq))
                .map(|seq| RecordError::Duplicate {
                    what: "event",
                    run_id: run_id.into(),
                    key: seq.to_string(),
                })
                .collect();
            match (self.lost, refused.first()) {
                (true, Some(e)) => Err(e.clone()),
                _ => Ok(refused),
            }
        }

        fn update_run(&mut self, _run_id: &str) -> Result<(), RecordError> {
            self.done.push("run");
            Ok(())
        }

        fn insert_evaluation(
            &mut self,
            run_id: &str,
            _evaluation: &EvaluationText,
        ) -> Result<Option<RecordError>, RecordError> {
            self.done.push("evaluation");
            Ok(self
                .evaluation_refused
                .then(|| RecordError::UnknownRun(run_id.into())))
        }
    }

    fn running(refused: &[u32]) -> Script {
        Script {
            status: Some("RUNNING"),
            refused: refused.to_vec(),
            ..Script::default()
        }
    }

    fn plan(status: RunStatus) -> FinishPlan {
        let finish = Finish {
            status,
            failure: None,
            summary: RunSummary::default(),
            evaluation: Some(&serde_json::Value::Null),
        };
        FinishPlan::new(&finish, NOW)
    }

    #[test]
    fn a_run_not_running_is_refused_as_the_runs_error_before_any_held_row() {
        for status in [None, Some("FAILED")] {
            let mut script = Script {
                status,
                ..Script::default()
            };
            let refused = plan(RunStatus::Success).run("r", &[1, 2], &mut script);
            assert!(matches!(refused, Err(FinishError::Run(_))), "{status:?}");
            assert_eq!(script.done, ["check"]);
        }
    }

    #[test]
    fn a_refused_held_row_refuses_a_success_and_not_a_failed_run() {
        let mut script = running(&[2, 3]);
        match plan(RunStatus::Success).run("r", &[1, 2, 3], &mut script) {
            Err(FinishError::Trace(e)) => {
                assert_eq!(e.to_string(), "event 2 of run r is already recorded")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            script.done,
            ["check", "events"],
            "the run row is not touched"
        );

        let mut script = running(&[2, 3]);
        let report = plan(RunStatus::Failed)
            .run("r", &[1, 2, 3], &mut script)
            .unwrap();
        assert!(report.evaluation_error.is_none());
        assert_eq!(script.done, ["check", "events", "run", "evaluation"]);

        let mut script = running(&[]);
        assert!(plan(RunStatus::Success)
            .run("r", &[1, 2, 3], &mut script)
            .is_ok());
        assert_eq!(script.done, ["check", "events", "run", "evaluation"]);
    }

    #[test]
    fn a_lost_transaction_is_the_runs_error_and_a_refused_evaluation_stands_beside() {
        let mut script = Script {
            lost: true,
            ..running(&[1])
        };
        let lost = plan(RunStatus::Failed).run("r", &[1, 2], &mut script);
        assert!(matches!(lost, Err(FinishError::Run(_))));
        assert_eq!(script.done, ["check", "events"]);

        let mut script = Script {
            evaluation_refused: true,
            ..running(&[])
        };
        let report = plan(RunStatus::Success)
            .run("r", &[1], &mut script)
            .unwrap();
        assert_eq!(
            report.evaluation_error.unwrap().to_string(),
            "unknown run r"
        );

        let mut finish = plan(RunStatus::Success);
        finish.evaluation = None;
        let mut script = running(&[]);
        assert!(finish.run("r", &[1], &mut script).is_ok());
        assert_eq!(
            script.done,
            ["check", "events", "run"],
            "no evaluation, none stored"
        );
    }

    #[test]
    fn held_rows_leave_on_a_flush_or_a_committed_finish_only() {
        let held = Held::default();
        let ok = |row: u32| Ok::<_, RecordError>(row);
        held.hold("a", ok(1)).unwrap();
        held.hold("b", ok(10)).unwrap();
        held.hold("a", ok(2)).unwrap();
        let refused = held.hold("a", Err(RecordError::Invalid("no".into())));
        assert_eq!(refused.unwrap_err().to_string(), "invalid record: no");
        let mut flushed = Vec::new();
        let errors = held.flush("a", |rows| {
            flushed = rows.to_vec();
            vec![RecordError::UnknownRun("a".into())]
        });
        assert_eq!(flushed, [1, 2]);
        assert_eq!(errors.len(), 1);
        let nothing = held.flush("a", |_| -> Vec<RecordError> { panic!("nothing is held") });
        assert!(nothing.is_empty());

        held.hold("a", ok(3)).unwrap();
        let refused = held.finish("a", |rows| {
            assert_eq!(rows, [3]);
            Err(FinishError::Trace(StoreError::invalid("refused")))
        });
        assert!(refused.is_err());
        // A row reported while the finish runs is kept for the next commit point.
        let finished = held.finish("a", |rows| {
            assert_eq!(rows, [3], "a refused finish left its rows held");
            held.hold("a", ok(4)).unwrap();
            Ok(FinishReport::default())
        });
        assert!(finished.is_ok());
        let rest = |run: &str| {
            let mut rest = Vec::new();
            held.flush(run, |rows| -> Vec<RecordError> {
                rest = rows.to_vec();
                Vec::new()
            });
            rest
        };
        assert_eq!(rest("a"), [4]);
        assert_eq!(rest("b"), [10]);
    }

    #[test]
    fn the_final_row_of_a_finish_a_copy_and_a_sweep() {
        let summary = RunSummary {
            answer: Some("because".into()),
            duration_ms: Some(u64::MAX),
            self_evaluation: Some(serde_json::json!({"b": 1, "a": 2})),
            ..RunSummary::default()
        };
        let finish = Finish {
            status: RunStatus::Success,
            failure: None,
            summary,
            evaluation: None,
        };
        let row = FinishRow::finished(&finish, NOW);
        assert_eq!(row.finished_at.as_deref(), Some("1970-01-01T00:16:40.000Z"));
        assert_eq!(row.duration_ms, Some(i64::MAX));
        assert_eq!(row.self_evaluation.as_deref(), Some(r#"{"a":2,"b":1}"#));
        assert_eq!(row.answer.as_deref(), Some("because"));

        let later = Timestamp::from_unix_ms(2_000_000);
        let finish = Finish {
            summary: RunSummary {
                finished_at: Some(later),
                ..RunSummary::default()
            },
            status: RunStatus::Failed,
            failure: Some("boom"),
            evaluation: None,
        };
        let row = FinishRow::finished(&finish, NOW);
        assert_eq!(row.finished_at, Some(later.to_string()));
        assert_eq!(row.failure.as_deref(), Some("boom"));

        let swept = FinishRow::interrupted(NOW);
        assert_eq!(swept.status, RunStatus::Failed);
        assert_eq!(swept.failure.as_deref(), Some(INTERRUPTED));
        assert_eq!(swept.finished_at, Some(NOW.to_string()));
        assert_eq!((swept.answer, swept.reuse), (None, None));
    }

    #[test]
    fn a_copy_keeps_the_originals_outcome_creation_and_evaluation() {
        let created = Timestamp::from_unix_ms(5_000);
        let run = RunRow {
            status: RunStatus::Failed,
            failure: Some("boom".into()),
            finished_at: Some(NOW),
            limits: Some(serde_json::json!({"b": 1, "a": 2})),
            ..row("r", created)
        };
        let stored = StoredRun {
            run,
            events: vec![event(1), event(2)],
            steps: Vec::new(),
            exchanges: Vec::new(),
            invocations: Vec::new(),
            evaluation: Some(crate::EvaluationRow {
                run_id: "r".into(),
                metrics: serde_json::json!({"z": 1, "y": 0}),
                created_at: created,
            }),
        };
        let copy = CopiedRun::of(
            &stored,
            |e| Ok::<_, RecordError>(e.seq),
            |_| -> Result<(), RecordError> { unreachable!("no exchange") },
        )
        .unwrap();
        assert_eq!(copy.tools, "[]");
        assert_eq!(copy.limits.as_deref(), Some(r#"{"a":2,"b":1}"#));
        assert_eq!(copy.events, [1, 2]);
        assert_eq!(copy.finish, FinishRow::copied(&stored.run));
        assert_eq!(copy.finish.finished_at, Some(NOW.to_string()));
        assert_eq!(copy.finish.failure.as_deref(), Some("boom"));
        assert_eq!(
            copy.evaluation,
            Some(EvaluationText {
                metrics: r#"{"y":0,"z":1}"#.into(),
                created_at: created.to_string(),
            })
        );
        let refused = CopiedRun::of(
            &stored,
            |_| Err(RecordError::Invalid("e".into())),
            |_| Ok(()),
        );
        let refused: Result<CopiedRun<(), ()>, _> = refused;
        assert_eq!(refused.err(), Some(RecordError::Invalid("e".into())));
    }

    #[test]
    fn gc_deletes_by_age_or_rank_and_nothing_without_a_rule() {
        assert_eq!(Retention::new(NOW, None, None), None);
        assert_eq!(
            Retention::new(NOW, Some(Duration::from_secs(1000)), None),
            Some(Retention {
                cutoff: Some("1970-01-01T00:00:00.000Z".into()),
                keep: None
            })
        );
        assert_eq!(
            Retention::new(NOW, None, Some(usize::MAX)),
            Some(Retention {
                cutoff: None,
                keep: Some(i64::MAX)
            })
        );
        let forever = Retention::new(NOW, Some(Duration::MAX), Some(0)).unwrap();
        assert_eq!(
            forever.cutoff,
            Some(Timestamp::from_unix_ms(1_000_000 - i64::MAX).to_string())
        );
        assert_eq!(forever.keep, Some(0));
    }
}
