//! What ties the agent runtime to the run store (`diag-store`): the store's [`Recorder`] as the
//! runtime's [`RunHooks`] and the tools' [`InvocationLog`], and the [`StoreSink`] through
//! which an [`EndpointMemory`] keeps what model endpoints taught in the store
//! (openspec/specs/run-store/spec.md, "What endpoints taught").

use std::sync::{Arc, Mutex};

use diag_store::{Recorder, Store};

use crate::agent::runtime::{AgentStepRecord, ModelExchange, RunHooks};
use crate::clock::Clock;
use crate::graph::RunConfig;
use crate::model::{Endpoint, EndpointMemory, Learned, LearnedSink};
use crate::protocol::ToolInvocation;
use crate::tools::InvocationLog;

impl RunHooks for Recorder {
    fn agent_step(&self, config: &RunConfig, step: &AgentStepRecord) {
        Recorder::agent_step(self, config, step);
    }

    fn model_exchange(&self, config: &RunConfig, exchange: &ModelExchange) {
        Recorder::model_exchange(self, config, exchange);
    }

    fn model_call(&self, config: &RunConfig, step: &AgentStepRecord, exchange: &ModelExchange) {
        Recorder::model_call(self, config, step, exchange);
    }
}

impl InvocationLog for Recorder {
    fn record(&self, config: &RunConfig, invocation: ToolInvocation) -> Result<(), String> {
        self.record_invocation(config, invocation)
    }

    fn invocations(&self, run_id: &str) -> Vec<ToolInvocation> {
        Recorder::invocations(self, run_id)
    }
}

/// An [`EndpointMemory`] that starts from what this store remembers and keeps in it what
/// is learned from now on (stamped by `clock`), with the sink that writes it. A store that
/// cannot be read gives a memory that starts empty (logged, and kept as the sink's first
/// failure): a diagnosis does not depend on it.
pub fn endpoint_memory(store: &Store, clock: Arc<dyn Clock>) -> (EndpointMemory, Arc<StoreSink>) {
    let sink = Arc::new(StoreSink {
        store: store.clone(),
        clock,
        failures: Mutex::new(Vec::new()),
    });
    let known = match store.endpoint_learnings() {
        Ok(rows) => rows,
        Err(e) => {
            sink.failed(format!(
                "cannot read what model endpoints taught from the run store: {e}"
            ));
            Vec::new()
        }
    };
    let memory = EndpointMemory::remembering(
        known.iter().map(|l| (l.endpoint.clone(), l.learned())),
        Some(sink.clone() as Arc<dyn LearnedSink>),
    );
    (memory, sink)
}

/// Writes what an [`EndpointMemory`] learns into the run store, stamped by its clock. A write
/// that fails is logged with `tracing` and kept in [`StoreSink::failures`]; the model call
/// that taught it goes on.
pub struct StoreSink {
    store: Store,
    clock: Arc<dyn Clock>,
    failures: Mutex<Vec<String>>,
}

impl StoreSink {
    /// The failures so far, one line each.
    pub fn failures(&self) -> Vec<String> {
        self.failures.lock().map(|f| f.clone()).unwrap_or_default()
    }

    fn failed(&self, message: String) {
        tracing::warn!(error = %message, "endpoint learning not kept");
        if let Ok(mut f) = self.failures.lock() {
            f.push(message);
        }
    }
}

impl LearnedSink for StoreSink {
    fn learned(&self, endpoint: &Endpoint, learned: Learned) {
        if let Err(e) = self
            .store
            .learn_endpoint(endpoint, learned, self.clock.now())
        {
            self.failed(format!(
                "cannot keep what {endpoint} taught in the run store: {e}"
            ));
        }
    }
}
