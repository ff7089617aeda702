//! This store's trace writes for the one recorder both backends share
//! (`diag_core::store::recorder`): when a trace is committed is decided there, how here.

use std::fmt::Display;

use super::write::EventRow;
use super::{Store, StoreError};
use crate::agent::runtime::{AgentStepRecord, ModelExchange};
use crate::graph::Event;
use crate::protocol::ToolInvocation;
use diag_core::store::{Recorder, TraceWriter};

/// Records the trace of one run in this store. Cheap to clone; `Send + Sync`.
pub type RunRecorder = Recorder<Store>;

impl TraceWriter for Store {
    type Error = StoreError;
    type EventRow = EventRow;

    fn event_row<O: Display>(event: &Event<O>) -> Result<EventRow, StoreError> {
        EventRow::of(event)
    }

    fn hold_event(&self, run_id: &str, row: EventRow) {
        Store::hold_event(self, run_id, row);
    }

    fn flush_events(&self, run_id: &str) -> Vec<StoreError> {
        Store::flush_events(self, run_id)
    }

    fn record_agent_step(&self, run_id: &str, step: &AgentStepRecord) -> Result<(), StoreError> {
        Store::record_agent_step(self, run_id, step)
    }

    fn record_exchange(&self, run_id: &str, exchange: &ModelExchange) -> Result<(), StoreError> {
        Store::record_exchange(self, run_id, exchange)
    }

    fn record_model_call(
        &self,
        run_id: &str,
        step: &AgentStepRecord,
        exchange: &ModelExchange,
    ) -> Vec<StoreError> {
        Store::record_model_call(self, run_id, step, exchange)
    }

    fn record_invocation(&self, invocation: &ToolInvocation) -> Result<(), StoreError> {
        Store::record_invocation(self, invocation)
    }

    fn invocations(&self, run_id: &str) -> Result<Vec<ToolInvocation>, StoreError> {
        Store::invocations(self, run_id)
    }

    fn invalid(message: String) -> StoreError {
        StoreError::Invalid(message)
    }
}
