//! The run store port (openspec/specs/run-store/spec.md): what the application (the ask
//! service, replay, reports) needs from a store of runs, as traits over plain records. The
//! SQLite store (`diag-store-sqlite`) implements them; another backend implements the same
//! traits and the application does not change.
//!
//! Three traits, by who holds them:
//! - [`RunReader`]: a stored run read back (the run row, its events, model calls, exchanges,
//!   tool invocations and evaluation), each read scoped to one `run_id`.
//! - [`RunStore`]: creates a run (RUNNING), finishes it (SUCCESS with its evaluation, or
//!   FAILED), and reads it back.
//! - [`TraceRecorder`]: one run's trace as it happens. It is the agent runtime's
//!   [`RunHooks`] and the tools' [`InvocationLog`], and takes the engine's node starts and
//!   events. Its hooks cannot return errors, so it keeps the first one for the caller to
//!   collect ([`TraceRecorder::take_error`]) before the run is finished: a run whose trace
//!   could not be stored completely is never reported as a clean SUCCESS.
//!
//! The records are plain data ([`records`]); a store never sees the diagnosis graph's state
//! (the `diag-diagnosis` crate computes the [`RunSummary`] a run is finished with). Errors are
//! each backend's own type ([`RunReader::Error`]), so the command line keeps the detail it maps
//! to an exit code and a hint.
//!
//! The traits are used generically (the application is monomorphised over its store): a
//! recorder takes events of any outcome type, which keeps them from being `dyn`-compatible.

pub mod codec;
pub mod recorder;
pub mod records;

use std::fmt::{self, Display};

use serde_json::Value;

use crate::agent::runtime::RunHooks;
use crate::graph::{Event, NodeKind};
use crate::protocol::ToolInvocation;
use crate::tools::InvocationLog;

pub use recorder::{Recorder, TraceWriter};
pub use records::{
    EvaluationRow, NewRun, Reuse, RunFilter, RunRow, RunStatus, RunSummary, StoredExchange,
    StoredRun, StoredStep, INTERRUPTED,
};

/// Stored runs, read back. Every trace read returns rows of the one run it names, in their
/// recorded order.
pub trait RunReader {
    /// The backend's error: one line that names the store and what went wrong.
    type Error: std::error::Error + Send + Sync + 'static;

    /// One run, or `None` when there is no such run.
    fn get_run(&self, run_id: &str) -> Result<Option<RunRow>, Self::Error>;
    /// The runs `filter` selects, newest first.
    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, Self::Error>;
    /// The run's orchestration events (outcomes as text).
    fn events(&self, run_id: &str) -> Result<Vec<Event<String>>, Self::Error>;
    /// The run's model calls (agent steps).
    fn agent_steps(&self, run_id: &str) -> Result<Vec<StoredStep>, Self::Error>;
    /// The run's model exchanges, with the sha256 of each canonical request.
    fn exchanges(&self, run_id: &str) -> Result<Vec<StoredExchange>, Self::Error>;
    /// The run's tool invocations.
    fn invocations(&self, run_id: &str) -> Result<Vec<ToolInvocation>, Self::Error>;
    /// The run's evaluation, if it has one (only a SUCCESS run does).
    fn evaluation(&self, run_id: &str) -> Result<Option<EvaluationRow>, Self::Error>;
}

/// A store of runs: their lifecycle and, through a [`TraceRecorder`] per run, their traces.
pub trait RunStore: RunReader + Clone + Send + Sync + 'static {
    /// The recorder of one run's trace.
    type Recorder: TraceRecorder<Error = Self::Error>;

    /// Creates a RUNNING run owned by this process and returns the recorder for its trace.
    /// Fails for a blank or already used `run_id` and on a store that cannot be written.
    fn create_run(&self, run: NewRun) -> Result<Self::Recorder, Self::Error>;

    /// Finishes a RUNNING run as SUCCESS (`summary.answer` is required and non-blank).
    fn finish_success(&self, run_id: &str, summary: RunSummary) -> Result<(), Self::Error>;

    /// Finishes a RUNNING run as SUCCESS and stores its evaluation, atomically with the trace
    /// rows still held. A refused trace row or run update leaves the run RUNNING and says
    /// which ([`FinishError`]); a refused evaluation is reported in the [`FinishReport`]
    /// beside a SUCCESS that stands.
    fn finish_success_evaluated(
        &self,
        run_id: &str,
        summary: RunSummary,
        metrics: &Value,
    ) -> Result<FinishReport<Self::Error>, FinishError<Self::Error>>;

    /// Finishes a RUNNING run as FAILED with `failure` (one line); its answer is not stored.
    fn finish_failed(
        &self,
        run_id: &str,
        failure: &str,
        summary: RunSummary,
    ) -> Result<(), Self::Error>;

    /// Stores (or replaces) the evaluation of a SUCCESS run; any other run is refused.
    fn record_evaluation(&self, run_id: &str, metrics: &Value) -> Result<(), Self::Error>;
}

/// One run's trace, recorded as it happens. Cheap to clone (clones share one recorder).
pub trait TraceRecorder: RunHooks + InvocationLog + Clone + Send + Sync + 'static {
    /// The backend's error, as [`RunReader::Error`].
    type Error: std::error::Error + Send + Sync + 'static;

    /// The run this recorder writes to.
    fn run_id(&self) -> &str;

    /// A node is about to run (the engine's `Observer::node_started`). Before an agent node,
    /// which waits on a model, everything held so far is committed.
    fn observe_node(&self, kind: NodeKind);

    /// An orchestration event (the engine's `Observer::event`); it may be held and committed
    /// with the next write.
    fn observe_event<O: Display>(&self, event: &Event<O>);

    /// Commits what is held now; an error is kept like any hook's.
    fn flush(&self);

    /// The first write error seen through a hook since the last call, if any.
    fn take_error(&self) -> Option<Self::Error>;
}

/// What finishing a run reported besides success.
#[derive(Debug)]
pub struct FinishReport<E> {
    /// The evaluation of a SUCCESS run, refused; the SUCCESS stands.
    pub evaluation_error: Option<E>,
}

impl<E> Default for FinishReport<E> {
    fn default() -> Self {
        FinishReport {
            evaluation_error: None,
        }
    }
}

/// Why a run could not be finished with the rows it still had to write.
#[derive(Debug)]
pub enum FinishError<E> {
    /// A trace row written with the finish was refused; nothing of the finish was stored.
    Trace(E),
    /// The run row itself could not be finished.
    Run(E),
}

impl<E: Display> Display for FinishError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FinishError::Trace(e) | FinishError::Run(e) => e.fmt(f),
        }
    }
}
