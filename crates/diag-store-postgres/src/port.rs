//! The run store port (`diag_core::store`) over this PostgreSQL store: each method is the
//! inherent method of the same name, so the application and the command line see one
//! behaviour whichever way they call it.

use serde_json::Value;

use diag_core::store::{RunReader, RunStore};

use super::records::{
    EvaluationRow, NewRun, RunFilter, RunRow, RunSummary, StoredExchange, StoredStep,
};
use super::{FinishError, FinishReport, PgError, PgRecorder, PgStore};
use crate::graph::Event;
use crate::protocol::ToolInvocation;

impl RunReader for PgStore {
    type Error = PgError;

    fn get_run(&self, run_id: &str) -> Result<Option<RunRow>, PgError> {
        PgStore::get_run(self, run_id)
    }

    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, PgError> {
        PgStore::list_runs(self, filter)
    }

    fn events(&self, run_id: &str) -> Result<Vec<Event<String>>, PgError> {
        PgStore::events(self, run_id)
    }

    fn agent_steps(&self, run_id: &str) -> Result<Vec<StoredStep>, PgError> {
        PgStore::agent_steps(self, run_id)
    }

    fn exchanges(&self, run_id: &str) -> Result<Vec<StoredExchange>, PgError> {
        PgStore::exchanges(self, run_id)
    }

    fn invocations(&self, run_id: &str) -> Result<Vec<ToolInvocation>, PgError> {
        PgStore::invocations(self, run_id)
    }

    fn evaluation(&self, run_id: &str) -> Result<Option<EvaluationRow>, PgError> {
        PgStore::evaluation(self, run_id)
    }
}

impl RunStore for PgStore {
    type Recorder = PgRecorder;

    fn create_run(&self, run: NewRun) -> Result<PgRecorder, PgError> {
        PgStore::create_run(self, run)
    }

    fn finish_success(&self, run_id: &str, summary: RunSummary) -> Result<(), PgError> {
        PgStore::finish_success(self, run_id, summary)
    }

    fn finish_success_evaluated(
        &self,
        run_id: &str,
        summary: RunSummary,
        metrics: &Value,
    ) -> Result<FinishReport, FinishError> {
        PgStore::finish_success_evaluated(self, run_id, summary, metrics)
    }

    fn finish_failed(
        &self,
        run_id: &str,
        failure: &str,
        summary: RunSummary,
    ) -> Result<(), PgError> {
        PgStore::finish_failed(self, run_id, failure, summary)
    }

    fn record_evaluation(&self, run_id: &str, metrics: &Value) -> Result<(), PgError> {
        PgStore::record_evaluation(self, run_id, metrics)
    }
}
