//! This store's trace writes for the one recorder both backends share
//! (`diag_core::store::recorder`): when a trace is committed is decided there, how here.

use std::fmt::Display;

use super::write::EventRow;
use super::{PgError, PgStore};
use crate::agent::runtime::{AgentStepRecord, ModelExchange};
use crate::graph::Event;
use crate::protocol::ToolInvocation;
use diag_core::store::{Recorder, TraceWriter};

/// Records the trace of one run in this store. Cheap to clone; `Send + Sync`.
pub type PgRecorder = Recorder<PgStore>;

impl TraceWriter for PgStore {
    type Error = PgError;
    type EventRow = EventRow;

    fn event_row<O: Display>(event: &Event<O>) -> Result<EventRow, PgError> {
        EventRow::of(event)
    }

    fn hold_event(&self, run_id: &str, row: EventRow) {
        PgStore::hold_event(self, run_id, row);
    }

    fn flush_events(&self, run_id: &str) -> Vec<PgError> {
        PgStore::flush_events(self, run_id)
    }

    fn record_agent_step(&self, run_id: &str, step: &AgentStepRecord) -> Result<(), PgError> {
        PgStore::record_agent_step(self, run_id, step)
    }

    fn record_exchange(&self, run_id: &str, exchange: &ModelExchange) -> Result<(), PgError> {
        PgStore::record_exchange(self, run_id, exchange)
    }

    fn record_model_call(
        &self,
        run_id: &str,
        step: &AgentStepRecord,
        exchange: &ModelExchange,
    ) -> Vec<PgError> {
        PgStore::record_model_call(self, run_id, step, exchange)
    }

    fn record_invocation(&self, invocation: &ToolInvocation) -> Result<(), PgError> {
        PgStore::record_invocation(self, invocation)
    }

    fn invocations(&self, run_id: &str) -> Result<Vec<ToolInvocation>, PgError> {
        PgStore::invocations(self, run_id)
    }

    fn invalid(message: String) -> PgError {
        PgError::Invalid(message)
    }
}
