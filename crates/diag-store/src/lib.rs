//! The run store port (openspec/specs/run-store/spec.md): what the application (the ask
//! service, replay, reports, the commands) needs from a store of runs, as object-safe traits
//! over plain records, and [`Store`], the one handle every caller holds (`Arc<dyn RunStore>`
//! inside). The SQLite store (`diag-store-sqlite`) and the PostgreSQL store
//! (`diag-store-postgres`) implement the traits with their SQL and nothing else; the rules
//! that do not depend on the backend are written here once:
//!
//! - a SUCCESS needs a non-blank answer ([`Store::finish_success`]);
//! - how a run finishes: one backend call ([`RunWriter::finish_run`]) that writes the held
//!   events, the run row and, for a SUCCESS, the evaluation in one transaction;
//! - when a trace is committed ([`Recorder`]: events held until the run next waits on the
//!   outside world; steps, exchanges and invocations at once);
//! - when a lease runs out ([`lease_expiry`]);
//! - what a backend does around its SQL ([`backend`]): which runs take which writes, the
//!   events held per run, the order of a finish's statements and what a refused one means,
//!   the final row a finish, a copy and the sweep write, which runs `gc` deletes;
//! - how records are written as text and read back ([`codec`]), and the failures of a record
//!   rather than of a store ([`RecordError`]), with one message on every backend.
//!
//! Three traits, by concern, each implemented in one place per backend:
//! - [`RunReader`]: a stored run read back, each read scoped to one `run_id`;
//! - [`RunWriter`]: a run created, its trace recorded, the run finished, interrupted runs
//!   swept;
//! - [`RunMaintenance`]: runs imported from another store, old runs collected.
//!
//! Beside the runs, a store keeps what model endpoints taught ([`EndpointLearnings`], with its
//! rules in [`learnings`]): read when a live process sets up its models, written when a model
//! learns, and recorded with each live run as it starts. And it keeps what came of alerts
//! ([`AlertStore`], with its rules in [`alerts`]): the alert group a run investigated, and the
//! durable queue of `diag serve`.
//!
//! Errors are one type, [`StoreError`]: a [`StoreErrorKind`] the command line maps to an exit
//! code and a hint, and the backend's own one-line message (a [`RecordError`] inside it where
//! the record, not the store, failed).

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod alerts;
pub mod backend;
pub mod codec;
pub mod error;
pub mod learnings;
pub mod recorder;
pub mod records;
pub mod sql;

use std::fmt::{self, Display};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use diag_graph::clock::Timestamp;
use diag_graph::Event;
use diag_records::invocation::ToolInvocation;
use diag_records::step::{AgentStepRecord, ModelExchange};

pub use alerts::{
    AlertSource, AlertStore, ClaimEnd, ClaimHolder, Claimed, Enqueued, NewNotification,
    QueueCounts, QueueEntry, QueueState, RunAlerts, MAX_ATTEMPTS,
};
pub use error::{RecordError, StoreError, StoreErrorKind};
pub use learnings::{EndpointLearning, EndpointLearnings};
pub use recorder::Recorder;
pub use records::{
    EvaluationRow, NewRun, Reuse, RunFilter, RunRow, RunStatus, RunSummary, StoredExchange,
    StoredOwner, StoredRun, StoredStep, INTERRUPTED,
};

/// Stored runs, read back. Every trace read returns rows of the one run it names, in their
/// recorded order.
pub trait RunReader: Send + Sync {
    /// Where the store is, for messages: a file's path, or `postgres://user@host:port/db`
    /// (never a password).
    fn describe(&self) -> String;
    /// One run, or `None` when there is no such run.
    fn get_run(&self, run_id: &str) -> Result<Option<RunRow>, StoreError>;
    /// The runs `filter` selects, newest first.
    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError>;
    /// How many runs the store holds.
    fn count_runs(&self) -> Result<u64, StoreError>;
    /// The run's orchestration events (outcomes as text).
    fn events(&self, run_id: &str) -> Result<Vec<Event<String>>, StoreError>;
    /// The run's model calls (agent steps).
    fn agent_steps(&self, run_id: &str) -> Result<Vec<StoredStep>, StoreError>;
    /// The run's model exchanges, with the sha256 of each canonical request.
    fn exchanges(&self, run_id: &str) -> Result<Vec<StoredExchange>, StoreError>;
    /// The run's tool invocations.
    fn invocations(&self, run_id: &str) -> Result<Vec<ToolInvocation>, StoreError>;
    /// The run's evaluation, if it has one (only a SUCCESS run does).
    fn evaluation(&self, run_id: &str) -> Result<Option<EvaluationRow>, StoreError>;
}

/// How a run is finished ([`RunWriter::finish_run`]).
#[derive(Debug)]
pub struct Finish<'a> {
    /// SUCCESS or FAILED.
    pub status: RunStatus,
    /// The one-line failure of a FAILED run.
    pub failure: Option<&'a str>,
    pub summary: RunSummary,
    /// The evaluation stored with a SUCCESS, under a savepoint of the finishing transaction.
    pub evaluation: Option<&'a Value>,
}

/// A run's lifecycle and trace, written. Each write lands only in a RUNNING run.
pub trait RunWriter: Send + Sync {
    /// Inserts a RUNNING run owned by this process, with its lease. Fails for a blank or
    /// already used `run_id` and on a store that cannot be written.
    fn insert_run(&self, run: &NewRun) -> Result<(), StoreError>;
    /// Holds an orchestration event of `run_id` until its next commit point (its row is
    /// built now, so a detail that cannot be serialized is an error now).
    fn hold_event(&self, run_id: &str, event: &Event<String>) -> Result<(), StoreError>;
    /// Commits the held events of `run_id` in one transaction; the refused ones' errors.
    fn flush_events(&self, run_id: &str) -> Vec<StoreError>;
    /// Inserts one orchestration event at once.
    fn record_event(&self, run_id: &str, event: &Event<String>) -> Result<(), StoreError>;
    fn record_agent_step(&self, run_id: &str, step: &AgentStepRecord) -> Result<(), StoreError>;
    fn record_exchange(&self, run_id: &str, exchange: &ModelExchange) -> Result<(), StoreError>;
    /// A model call's step and exchange in one transaction, each row standing alone (a
    /// refused one does not undo the other); the errors, step first.
    fn record_model_call(
        &self,
        run_id: &str,
        step: &AgentStepRecord,
        exchange: &ModelExchange,
    ) -> Vec<StoreError>;
    /// Inserts one tool invocation into the RUNNING run it names.
    fn record_invocation(&self, invocation: &ToolInvocation) -> Result<(), StoreError>;
    /// Finishes a RUNNING run in one transaction with the events still held for it and, for a
    /// SUCCESS, its evaluation. A SUCCESS is all or nothing for the trace: a refused row
    /// leaves the run RUNNING ([`FinishError::Trace`]); a FAILED run stores the rows the store
    /// accepts. A refused evaluation is reported beside a SUCCESS that stands. A run that is
    /// unknown or no longer RUNNING is [`FinishError::Run`]. The rules on what may be finished
    /// how are [`Store`]'s; a backend only writes.
    fn finish_run(&self, run_id: &str, finish: Finish<'_>) -> Result<FinishReport, FinishError>;
    /// Stores (or replaces) the evaluation of a SUCCESS run; any other run is refused.
    fn record_evaluation(&self, run_id: &str, metrics: &Value) -> Result<(), StoreError>;
    /// Marks FAILED (`interrupted`) every RUNNING run whose owner is gone
    /// (`diag_owner::is_gone`: a dead process on this host, or an expired lease of an owner
    /// elsewhere), keeping its partial trace. Returns how many it marked.
    fn sweep_interrupted(&self) -> Result<usize, StoreError>;
}

/// Runs moved between stores and collected.
pub trait RunMaintenance: Send + Sync {
    /// Writes a finished run read from another store, unless its id is already here;
    /// returns whether it was written.
    fn import_run(&self, run: &StoredRun) -> Result<bool, StoreError>;
    /// Sweeps interrupted runs, then deletes finished runs older than `older_than` and all
    /// but the newest `keep`, and gives the space back.
    fn gc(&self, older_than: Option<Duration>, keep: Option<usize>)
        -> Result<GcReport, StoreError>;
    /// The finished runs `gc` with the same rules would delete now, oldest created first,
    /// changing nothing (no sweep: a RUNNING run whose process is gone is not listed until a
    /// sweep has marked it FAILED).
    fn gc_preview(
        &self,
        older_than: Option<Duration>,
        keep: Option<usize>,
    ) -> Result<Vec<String>, StoreError>;
}

/// A whole run store: what a backend implements.
pub trait RunStore:
    RunReader + RunWriter + RunMaintenance + EndpointLearnings + AlertStore
{
}

impl<T: RunReader + RunWriter + RunMaintenance + EndpointLearnings + AlertStore + ?Sized> RunStore
    for T
{
}

/// What `gc` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcReport {
    pub runs_deleted: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// The URL schemes of a PostgreSQL run store.
/// How a run id the store does not have is reported to a user (the id shown bounded: it came
/// from the user), by the command line and by `diag mcp` alike.
pub fn unknown_run_message(run_id: &str) -> String {
    format!("unknown run `{}`", diag_records::text::one_line(run_id, 80))
}

/// What to do about an unknown run id.
pub const UNKNOWN_RUN_HINT: &str = "diag runs lists the stored runs";

pub const POSTGRES_SCHEMES: &[&str] = &["postgres", "postgresql"];

/// True when a store location is a PostgreSQL URL (`postgres://…` or `postgresql://…`, any
/// case); anything else is a SQLite file's path.
pub fn is_postgres_url(location: &str) -> bool {
    POSTGRES_SCHEMES.iter().any(|s| {
        location
            .get(..s.len() + 3)
            .is_some_and(|p| p.eq_ignore_ascii_case(&format!("{s}://")))
    })
}

/// When a lease taken or renewed at `now` runs out.
pub fn lease_expiry(now: Timestamp, lease: Duration) -> Timestamp {
    now.saturating_add(lease)
}

/// An open run store of any backend, with the rules that do not depend on it. Cheap to
/// clone (an `Arc` inside); its reads and writes are the backend's ([`Deref`] to
/// [`RunStore`]).
#[derive(Clone)]
pub struct Store(Arc<dyn RunStore>);

impl Deref for Store {
    type Target = dyn RunStore;

    fn deref(&self) -> &(dyn RunStore + 'static) {
        &*self.0
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Store({})", self.0.describe())
    }
}

impl Store {
    pub fn new(backend: impl RunStore + 'static) -> Store {
        Store(Arc::new(backend))
    }

    /// Creates a RUNNING run owned by this process and returns the recorder of its trace.
    pub fn create_run(&self, run: NewRun) -> Result<Recorder, StoreError> {
        self.0.insert_run(&run)?;
        Ok(Recorder::for_run(self, run.run_id, run.session_id))
    }

    /// Inserts one orchestration event of a RUNNING run at once (a recorder holds events
    /// until its next commit point instead).
    pub fn record_event<O: Display>(
        &self,
        run_id: &str,
        event: &Event<O>,
    ) -> Result<(), StoreError> {
        self.0.record_event(run_id, &as_text(event))
    }

    /// Finishes a RUNNING run as SUCCESS. The answer must be non-blank: a blank answer is a
    /// failed run (openspec/specs/ask-service/spec.md), so no store calls it a success.
    pub fn finish_success(&self, run_id: &str, summary: RunSummary) -> Result<(), StoreError> {
        require_answer(run_id, &summary)?;
        let finish = Finish {
            status: RunStatus::Success,
            failure: None,
            summary,
            evaluation: None,
        };
        self.0
            .finish_run(run_id, finish)
            .map(|_| ())
            .map_err(FinishError::into_error)
    }

    /// Finishes a RUNNING run as SUCCESS and stores its evaluation, in one transaction (the
    /// ask service's last write). A refused trace row or run update leaves the run RUNNING
    /// and says which ([`FinishError`]); a refused evaluation is reported in the
    /// [`FinishReport`] beside a SUCCESS that stands.
    pub fn finish_success_evaluated(
        &self,
        run_id: &str,
        summary: RunSummary,
        metrics: &Value,
    ) -> Result<FinishReport, FinishError> {
        require_answer(run_id, &summary).map_err(FinishError::Run)?;
        let finish = Finish {
            status: RunStatus::Success,
            failure: None,
            summary,
            evaluation: Some(metrics),
        };
        self.0.finish_run(run_id, finish)
    }

    /// Finishes a RUNNING run as FAILED with a one-line `failure` and whatever partial
    /// summary the caller still has; its answer is not stored.
    pub fn finish_failed(
        &self,
        run_id: &str,
        failure: &str,
        summary: RunSummary,
    ) -> Result<(), StoreError> {
        let finish = Finish {
            status: RunStatus::Failed,
            failure: Some(failure),
            summary,
            evaluation: None,
        };
        self.0
            .finish_run(run_id, finish)
            .map(|_| ())
            .map_err(FinishError::into_error)
    }

    /// Everything stored of one run, read back whole (`None` for an unknown run).
    pub fn read_whole(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        let Some(run) = self.0.get_run(run_id)? else {
            return Ok(None);
        };
        Ok(Some(StoredRun {
            events: self.0.events(run_id)?,
            steps: self.0.agent_steps(run_id)?,
            exchanges: self.0.exchanges(run_id)?,
            invocations: self.0.invocations(run_id)?,
            evaluation: self.0.evaluation(run_id)?,
            run,
        }))
    }
}

/// An event with its outcome as text, as a store keeps it.
pub fn as_text<O: Display>(event: &Event<O>) -> Event<String> {
    Event {
        seq: event.seq,
        node: event.node.clone(),
        attempt: event.attempt,
        round: event.round,
        status: event.status.to_string(),
        started_at: event.started_at,
        duration_ms: event.duration_ms,
        detail: event.detail.clone(),
    }
}

/// A SUCCESS needs a non-blank answer.
fn require_answer(run_id: &str, summary: &RunSummary) -> Result<(), StoreError> {
    if summary
        .answer
        .as_deref()
        .is_none_or(|a| a.trim().is_empty())
    {
        return Err(StoreError::invalid(format!(
            "run {run_id} cannot be SUCCESS without a non-blank answer"
        )));
    }
    Ok(())
}

/// What finishing a run reported besides success.
#[derive(Debug, Default)]
pub struct FinishReport {
    /// The evaluation of a SUCCESS run, refused; the SUCCESS stands.
    pub evaluation_error: Option<StoreError>,
}

/// Why a run could not be finished with the rows it still had to write.
#[derive(Debug)]
pub enum FinishError {
    /// A trace row written with the finish was refused; nothing of the finish was stored.
    Trace(StoreError),
    /// The run row itself could not be finished.
    Run(StoreError),
}

impl FinishError {
    pub fn into_error(self) -> StoreError {
        match self {
            FinishError::Trace(e) | FinishError::Run(e) => e,
        }
    }
}

impl Display for FinishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FinishError::Trace(e) | FinishError::Run(e) => e.fmt(f),
        }
    }
}
