//! [`RunRecorder`]: the store as the running graph sees it. One recorder per run, handed to
//! the engine as its [`Observer`], to the agent runtime as its [`RunHooks`] and
//! [`InvocationLog`]; every report is written the moment it arrives.
//!
//! Those traits return nothing, because a progress display or an in-memory log cannot fail.
//! A store can, so the recorder keeps the first write error (and counts the rest) for the
//! caller, which asks [`RunRecorder::take_error`] before it finishes the run: a run whose
//! trace could not be stored completely must not be reported as a clean SUCCESS (SPEC §3).

use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{Store, StoreError};
use crate::agent::runtime::{AgentStepRecord, ModelExchange, RunHooks};
use crate::graph::{Event, Observer, RunConfig};
use crate::protocol::ToolInvocation;
use crate::tools::InvocationLog;

/// Records the trace of one run. Cheap to clone (an `Arc` inside); `Send + Sync`.
#[derive(Clone)]
pub struct RunRecorder {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    run_id: String,
    session_id: String,
    first_error: Mutex<Option<StoreError>>,
    failed_writes: AtomicU64,
}

impl RunRecorder {
    pub(crate) fn new(store: Store, run_id: String, session_id: String) -> Self {
        RunRecorder {
            inner: Arc::new(Inner {
                store,
                run_id,
                session_id,
                first_error: Mutex::new(None),
                failed_writes: AtomicU64::new(0),
            }),
        }
    }

    /// A recorder for a run created earlier (by [`Store::create_run`] in this process).
    pub fn for_run(
        store: &Store,
        run_id: impl Into<String>,
        session_id: impl Into<String>,
    ) -> Self {
        RunRecorder::new(store.clone(), run_id.into(), session_id.into())
    }

    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The first write error seen through a trait hook since the last call, if any.
    pub fn take_error(&self) -> Option<StoreError> {
        self.inner
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// How many trait-hook writes failed in total (the first is kept by `take_error`).
    pub fn failed_writes(&self) -> u64 {
        self.inner.failed_writes.load(Ordering::Relaxed)
    }

    fn keep(&self, result: Result<(), StoreError>) {
        if let Err(e) = result {
            self.inner.failed_writes.fetch_add(1, Ordering::Relaxed);
            let mut slot = self
                .inner
                .first_error
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(e);
            }
        }
    }
}

impl<O: Display> Observer<O> for RunRecorder {
    fn event(&mut self, event: &Event<O>) {
        let result = self.inner.store.record_event(&self.inner.run_id, event);
        self.keep(result);
    }
}

/// Steps and exchanges go to the run named by the config every hook receives (SPEC §3: the
/// config is how run ownership travels).
impl RunHooks for RunRecorder {
    fn agent_step(&self, config: &RunConfig, step: &AgentStepRecord) {
        let result = self.inner.store.record_agent_step(config.run_id(), step);
        self.keep(result);
    }

    fn model_exchange(&self, config: &RunConfig, exchange: &ModelExchange) {
        let result = self.inner.store.record_exchange(config.run_id(), exchange);
        self.keep(result);
    }
}

impl InvocationLog for RunRecorder {
    fn record(&self, invocation: ToolInvocation) {
        let result = self.inner.store.record_invocation(&invocation);
        self.keep(result);
    }

    /// Reads back only `run_id`'s invocations. A read error yields none (so the Gatekeeper
    /// fails closed: an unreadable invocation binds nothing) and is kept like a write error.
    fn invocations(&self, run_id: &str) -> Vec<ToolInvocation> {
        match self.inner.store.invocations(run_id) {
            Ok(v) => v,
            Err(e) => {
                self.keep(Err(e));
                Vec::new()
            }
        }
    }
}
