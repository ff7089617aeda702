//! The run store a command uses, chosen by where it is: a path is a SQLite file (the embedded
//! default, `diag-store-sqlite`), a `postgres://` or `postgresql://` URL is a PostgreSQL
//! database (`diag-store-postgres`). [`Store`] is either, behind the one run store port of
//! diag-core; the commands see the same methods and the same guarantees whichever it is.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use thiserror::Error;

use crate::agent::runtime::{AgentStepRecord, ModelExchange, RunHooks};
use crate::clock::Clock;
use crate::graph::{Event, NodeKind, RunConfig};
use crate::protocol::ToolInvocation;
use crate::store::{
    EvaluationRow, NewRun, RunFilter, RunRow, RunSummary, StoreError, StoreOptions, StoredExchange,
    StoredRun, StoredStep,
};
use crate::tools::InvocationLog;
use diag_core::store::{FinishError, FinishReport, RunReader, RunStore, TraceRecorder};
use diag_store_postgres::{PgError, PgOptions, PgRecorder, PgStore};

/// An open run store of either backend. Cheap to clone.
#[derive(Clone)]
pub enum Store {
    Sqlite(crate::store::Store),
    Postgres(PgStore),
}

/// Either backend's error; each is one line naming its store.
#[derive(Debug, Error)]
pub enum AnyStoreError {
    #[error(transparent)]
    Sqlite(#[from] StoreError),
    #[error(transparent)]
    Postgres(#[from] PgError),
}

impl AnyStoreError {
    /// True when the store is not there (a missing file, a database without diag's schema).
    pub fn is_missing(&self) -> bool {
        matches!(
            self,
            AnyStoreError::Sqlite(StoreError::Missing { .. })
                | AnyStoreError::Postgres(PgError::Missing { .. })
        )
    }
}

/// What `gc` did, on either backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcReport {
    pub runs_deleted: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Options a command opens its store with; the rest is each backend's default.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// `[store] password_env`: the variable holding a PostgreSQL password.
    pub password_env: Option<String>,
}

/// True when `location` names a PostgreSQL database.
pub fn is_postgres(location: &Path) -> bool {
    location
        .to_str()
        .is_some_and(diag_store_postgres::is_postgres_url)
}

macro_rules! both {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Store::Sqlite($s) => $e.map_err(AnyStoreError::from),
            Store::Postgres($s) => $e.map_err(AnyStoreError::from),
        }
    };
}

impl Store {
    /// Opens (creating if needed) the store at `location`.
    pub fn open(location: &Path, options: &OpenOptions) -> Result<Store, AnyStoreError> {
        match location
            .to_str()
            .filter(|l| diag_store_postgres::is_postgres_url(l))
        {
            Some(url) => Ok(Store::Postgres(PgStore::open(url, pg_options(options))?)),
            None => Ok(Store::Sqlite(crate::store::Store::open(location)?)),
        }
    }

    /// [`Store::open`] with the store's own timestamps (a sweep's `finished_at`, an
    /// evaluation's `created_at`, the gc cutoff, a lease's expiry) taken from `clock`: how a
    /// test puts either backend at a moment of its choosing.
    pub fn open_with_clock(
        location: &Path,
        options: &OpenOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Store, AnyStoreError> {
        match location
            .to_str()
            .filter(|l| diag_store_postgres::is_postgres_url(l))
        {
            Some(url) => Ok(Store::Postgres(PgStore::open(
                url,
                PgOptions {
                    clock,
                    ..pg_options(options)
                },
            )?)),
            None => Ok(Store::Sqlite(crate::store::Store::open_with(
                location,
                StoreOptions {
                    clock,
                    ..StoreOptions::default()
                },
            )?)),
        }
    }

    /// Opens the store at `location` only if it is there: creates nothing.
    pub fn open_existing(location: &Path, options: &OpenOptions) -> Result<Store, AnyStoreError> {
        match location
            .to_str()
            .filter(|l| diag_store_postgres::is_postgres_url(l))
        {
            Some(url) => Ok(Store::Postgres(PgStore::open_existing(
                url,
                pg_options(options),
            )?)),
            None => Ok(Store::Sqlite(crate::store::Store::open_existing(
                location,
                StoreOptions::default(),
            )?)),
        }
    }

    /// Where the store is, for messages: the file's path, or `user@host:port/database`.
    pub fn describe(&self) -> String {
        match self {
            Store::Sqlite(s) => s.path().display().to_string(),
            Store::Postgres(s) => format!("postgres://{}", s.target()),
        }
    }

    pub fn count_runs(&self) -> Result<u64, AnyStoreError> {
        both!(self, s => s.count_runs())
    }

    /// Deletes old finished runs (see each backend's `gc`).
    pub fn gc(
        &self,
        older_than: Option<Duration>,
        keep: Option<usize>,
    ) -> Result<GcReport, AnyStoreError> {
        match self {
            Store::Sqlite(s) => {
                let r = s.gc(older_than, keep)?;
                Ok(GcReport {
                    runs_deleted: r.runs_deleted,
                    bytes_before: r.bytes_before,
                    bytes_after: r.bytes_after,
                })
            }
            Store::Postgres(s) => {
                let r = s.gc(older_than, keep)?;
                Ok(GcReport {
                    runs_deleted: r.runs_deleted,
                    bytes_before: r.bytes_before,
                    bytes_after: r.bytes_after,
                })
            }
        }
    }

    pub fn get_run(&self, run_id: &str) -> Result<Option<RunRow>, AnyStoreError> {
        both!(self, s => s.get_run(run_id))
    }

    /// Everything stored of one run, read back whole (`None` for an unknown run).
    pub fn read_whole(&self, run_id: &str) -> Result<Option<StoredRun>, AnyStoreError> {
        let Some(run) = self.get_run(run_id)? else {
            return Ok(None);
        };
        Ok(Some(StoredRun {
            events: self.events(run_id)?,
            steps: self.agent_steps(run_id)?,
            exchanges: self.exchanges(run_id)?,
            invocations: self.invocations(run_id)?,
            evaluation: self.evaluation(run_id)?,
            run,
        }))
    }

    /// Writes a finished run read from another store, unless its id is already here;
    /// returns whether it was written.
    pub fn import_run(&self, run: &StoredRun) -> Result<bool, AnyStoreError> {
        both!(self, s => s.import_run(run))
    }

    pub fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, AnyStoreError> {
        both!(self, s => s.list_runs(filter))
    }

    /// Inserts one orchestration event of a RUNNING run, at once (a recorder holds events
    /// until its next commit point instead).
    pub fn record_event<O: std::fmt::Display>(
        &self,
        run_id: &str,
        event: &Event<O>,
    ) -> Result<(), AnyStoreError> {
        both!(self, s => s.record_event(run_id, event))
    }

    /// Inserts one tool invocation into the RUNNING run it names.
    pub fn record_invocation(&self, invocation: &ToolInvocation) -> Result<(), AnyStoreError> {
        both!(self, s => s.record_invocation(invocation))
    }

    /// One model call's agent step and exchange in one transaction; each row stands alone
    /// (a refused one does not undo the other). Returns the errors, step first.
    pub fn record_model_call(
        &self,
        run_id: &str,
        step: &AgentStepRecord,
        exchange: &ModelExchange,
    ) -> Vec<AnyStoreError> {
        match self {
            Store::Sqlite(s) => s
                .record_model_call(run_id, step, exchange)
                .into_iter()
                .map(AnyStoreError::from)
                .collect(),
            Store::Postgres(s) => s
                .record_model_call(run_id, step, exchange)
                .into_iter()
                .map(AnyStoreError::from)
                .collect(),
        }
    }

    /// Marks FAILED (`interrupted`) every RUNNING run whose owner is gone; returns how many.
    pub fn sweep_interrupted(&self) -> Result<usize, AnyStoreError> {
        both!(self, s => s.sweep_interrupted())
    }

    pub fn events(&self, run_id: &str) -> Result<Vec<Event<String>>, AnyStoreError> {
        both!(self, s => s.events(run_id))
    }

    pub fn agent_steps(&self, run_id: &str) -> Result<Vec<StoredStep>, AnyStoreError> {
        both!(self, s => s.agent_steps(run_id))
    }

    pub fn exchanges(&self, run_id: &str) -> Result<Vec<StoredExchange>, AnyStoreError> {
        both!(self, s => s.exchanges(run_id))
    }

    pub fn invocations(&self, run_id: &str) -> Result<Vec<ToolInvocation>, AnyStoreError> {
        both!(self, s => s.invocations(run_id))
    }

    pub fn evaluation(&self, run_id: &str) -> Result<Option<EvaluationRow>, AnyStoreError> {
        both!(self, s => s.evaluation(run_id))
    }
}

fn pg_options(options: &OpenOptions) -> PgOptions {
    PgOptions {
        password_env: options.password_env.clone(),
        ..PgOptions::default()
    }
}

impl RunReader for Store {
    type Error = AnyStoreError;

    fn get_run(&self, run_id: &str) -> Result<Option<RunRow>, AnyStoreError> {
        Store::get_run(self, run_id)
    }
    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, AnyStoreError> {
        Store::list_runs(self, filter)
    }
    fn events(&self, run_id: &str) -> Result<Vec<Event<String>>, AnyStoreError> {
        Store::events(self, run_id)
    }
    fn agent_steps(&self, run_id: &str) -> Result<Vec<StoredStep>, AnyStoreError> {
        Store::agent_steps(self, run_id)
    }
    fn exchanges(&self, run_id: &str) -> Result<Vec<StoredExchange>, AnyStoreError> {
        Store::exchanges(self, run_id)
    }
    fn invocations(&self, run_id: &str) -> Result<Vec<ToolInvocation>, AnyStoreError> {
        Store::invocations(self, run_id)
    }
    fn evaluation(&self, run_id: &str) -> Result<Option<EvaluationRow>, AnyStoreError> {
        Store::evaluation(self, run_id)
    }
}

fn finish_error<E: Into<AnyStoreError>>(e: FinishError<E>) -> FinishError<AnyStoreError> {
    match e {
        FinishError::Trace(e) => FinishError::Trace(e.into()),
        FinishError::Run(e) => FinishError::Run(e.into()),
    }
}

fn finish_report<E: Into<AnyStoreError>>(r: FinishReport<E>) -> FinishReport<AnyStoreError> {
    FinishReport {
        evaluation_error: r.evaluation_error.map(Into::into),
    }
}

impl RunStore for Store {
    type Recorder = Recorder;

    fn create_run(&self, run: NewRun) -> Result<Recorder, AnyStoreError> {
        match self {
            Store::Sqlite(s) => Ok(Recorder::Sqlite(s.create_run(run)?)),
            Store::Postgres(s) => Ok(Recorder::Postgres(s.create_run(run)?)),
        }
    }

    fn finish_success(&self, run_id: &str, summary: RunSummary) -> Result<(), AnyStoreError> {
        both!(self, s => s.finish_success(run_id, summary))
    }

    fn finish_success_evaluated(
        &self,
        run_id: &str,
        summary: RunSummary,
        metrics: &Value,
    ) -> Result<FinishReport<AnyStoreError>, FinishError<AnyStoreError>> {
        match self {
            Store::Sqlite(s) => s
                .finish_success_evaluated(run_id, summary, metrics)
                .map(finish_report)
                .map_err(finish_error),
            Store::Postgres(s) => s
                .finish_success_evaluated(run_id, summary, metrics)
                .map(finish_report)
                .map_err(finish_error),
        }
    }

    fn finish_failed(
        &self,
        run_id: &str,
        failure: &str,
        summary: RunSummary,
    ) -> Result<(), AnyStoreError> {
        both!(self, s => s.finish_failed(run_id, failure, summary))
    }

    fn record_evaluation(&self, run_id: &str, metrics: &Value) -> Result<(), AnyStoreError> {
        both!(self, s => s.record_evaluation(run_id, metrics))
    }
}

/// One run's recorder, of either backend.
#[derive(Clone)]
pub enum Recorder {
    Sqlite(crate::store::RunRecorder),
    Postgres(PgRecorder),
}

impl Recorder {
    /// The session of the run this recorder writes to.
    pub fn session_id(&self) -> &str {
        match self {
            Recorder::Sqlite(r) => r.session_id(),
            Recorder::Postgres(r) => r.session_id(),
        }
    }

    /// How many hook writes failed in total (the first is kept by `take_error`).
    pub fn failed_writes(&self) -> u64 {
        match self {
            Recorder::Sqlite(r) => r.failed_writes(),
            Recorder::Postgres(r) => r.failed_writes(),
        }
    }
}

impl RunHooks for Recorder {
    fn agent_step(&self, config: &RunConfig, step: &AgentStepRecord) {
        match self {
            Recorder::Sqlite(r) => r.agent_step(config, step),
            Recorder::Postgres(r) => r.agent_step(config, step),
        }
    }
    fn model_exchange(&self, config: &RunConfig, exchange: &ModelExchange) {
        match self {
            Recorder::Sqlite(r) => r.model_exchange(config, exchange),
            Recorder::Postgres(r) => r.model_exchange(config, exchange),
        }
    }
    fn model_call(&self, config: &RunConfig, step: &AgentStepRecord, exchange: &ModelExchange) {
        match self {
            Recorder::Sqlite(r) => r.model_call(config, step, exchange),
            Recorder::Postgres(r) => r.model_call(config, step, exchange),
        }
    }
}

impl InvocationLog for Recorder {
    fn record(&self, config: &RunConfig, invocation: ToolInvocation) -> Result<(), String> {
        match self {
            Recorder::Sqlite(r) => r.record(config, invocation),
            Recorder::Postgres(r) => r.record(config, invocation),
        }
    }
    fn invocations(&self, run_id: &str) -> Vec<ToolInvocation> {
        match self {
            Recorder::Sqlite(r) => InvocationLog::invocations(r, run_id),
            Recorder::Postgres(r) => InvocationLog::invocations(r, run_id),
        }
    }
}

impl TraceRecorder for Recorder {
    type Error = AnyStoreError;

    fn run_id(&self) -> &str {
        match self {
            Recorder::Sqlite(r) => TraceRecorder::run_id(r),
            Recorder::Postgres(r) => TraceRecorder::run_id(r),
        }
    }
    fn observe_node(&self, kind: NodeKind) {
        match self {
            Recorder::Sqlite(r) => r.observe_node(kind),
            Recorder::Postgres(r) => r.observe_node(kind),
        }
    }
    fn observe_event<O: std::fmt::Display>(&self, event: &Event<O>) {
        match self {
            Recorder::Sqlite(r) => r.observe_event(event),
            Recorder::Postgres(r) => r.observe_event(event),
        }
    }
    fn flush(&self) {
        match self {
            Recorder::Sqlite(r) => TraceRecorder::flush(r),
            Recorder::Postgres(r) => TraceRecorder::flush(r),
        }
    }
    fn take_error(&self) -> Option<AnyStoreError> {
        match self {
            Recorder::Sqlite(r) => TraceRecorder::take_error(r).map(Into::into),
            Recorder::Postgres(r) => TraceRecorder::take_error(r).map(Into::into),
        }
    }
}
