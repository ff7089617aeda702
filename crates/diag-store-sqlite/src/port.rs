//! The run store port (`diag_core::store`) over this SQLite store: each method is the
//! inherent method of the same name, so the application and the command line see one
//! behaviour whichever way they call it.

use serde_json::Value;

use diag_core::store::{RunReader, RunStore};

use super::records::{
    EvaluationRow, NewRun, RunFilter, RunRow, RunSummary, StoredExchange, StoredStep,
};
use super::{FinishError, FinishReport, RunRecorder, Store, StoreError};
use crate::graph::Event;
use crate::protocol::ToolInvocation;

impl RunReader for Store {
    type Error = StoreError;

    fn get_run(&self, run_id: &str) -> Result<Option<RunRow>, StoreError> {
        Store::get_run(self, run_id)
    }

    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError> {
        Store::list_runs(self, filter)
    }

    fn events(&self, run_id: &str) -> Result<Vec<Event<String>>, StoreError> {
        Store::events(self, run_id)
    }

    fn agent_steps(&self, run_id: &str) -> Result<Vec<StoredStep>, StoreError> {
        Store::agent_steps(self, run_id)
    }

    fn exchanges(&self, run_id: &str) -> Result<Vec<StoredExchange>, StoreError> {
        Store::exchanges(self, run_id)
    }

    fn invocations(&self, run_id: &str) -> Result<Vec<ToolInvocation>, StoreError> {
        Store::invocations(self, run_id)
    }

    fn evaluation(&self, run_id: &str) -> Result<Option<EvaluationRow>, StoreError> {
        Store::evaluation(self, run_id)
    }
}

impl RunStore for Store {
    type Recorder = RunRecorder;

    fn create_run(&self, run: NewRun) -> Result<RunRecorder, StoreError> {
        Store::create_run(self, run)
    }

    fn finish_success(&self, run_id: &str, summary: RunSummary) -> Result<(), StoreError> {
        Store::finish_success(self, run_id, summary)
    }

    fn finish_success_evaluated(
        &self,
        run_id: &str,
        summary: RunSummary,
        metrics: &Value,
    ) -> Result<FinishReport, FinishError> {
        Store::finish_success_evaluated(self, run_id, summary, metrics)
    }

    fn finish_failed(
        &self,
        run_id: &str,
        failure: &str,
        summary: RunSummary,
    ) -> Result<(), StoreError> {
        Store::finish_failed(self, run_id, failure, summary)
    }

    fn record_evaluation(&self, run_id: &str, metrics: &Value) -> Result<(), StoreError> {
        Store::record_evaluation(self, run_id, metrics)
    }
}
