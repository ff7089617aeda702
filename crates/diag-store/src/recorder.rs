//! [`Recorder`]: the store as the running graph sees it, one for every backend. One recorder
//! per run, handed to the engine as its `Observer`, to the agent runtime as its `RunHooks`
//! and to the tools as their `InvocationLog` (diag-core implements both with the methods here). A backend gives it its trace writes
//! ([`super::RunWriter`]), so the rule of when a trace is committed is written once and holds
//! alike on SQLite and PostgreSQL.
//!
//! Model calls (the agent step and the exchange, in one transaction) and tool invocations are
//! written the moment they arrive. Orchestration events are held until the run may next wait
//! on the outside world, then committed together: before an agent node starts (it calls a
//! model), before any other trace write, when the run is finished (in the finishing
//! transaction) and when the recorder is dropped. Deterministic nodes take microseconds, so a
//! run killed while it waits on a model or a tool (where a run spends its time) keeps every
//! event so far, and a run of six nodes commits five times instead of nine. A process killed
//! in the microseconds between two such points loses at most the events of the deterministic
//! nodes since the last one; what it keeps is still a real prefix of its trace.
//!
//! Those traits return nothing, because a progress display or an in-memory log cannot fail.
//! A store can, so the recorder keeps the first write error (and counts the rest) for the
//! caller, which asks [`Recorder::take_error`] before it finishes the run: a run whose trace
//! could not be stored completely must not be reported as a clean SUCCESS
//! (openspec/specs/ask-service/spec.md).

use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{as_text, Store, StoreError};
use diag_graph::{Event, NodeKind, Observer, RunConfig};
use diag_records::invocation::ToolInvocation;
use diag_records::step::{AgentStepRecord, ModelExchange};

/// Records the trace of one run. Cheap to clone (clones share one recorder); `Send + Sync`.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    run_id: String,
    session_id: String,
    first_error: Mutex<Option<StoreError>>,
    failed_writes: AtomicU64,
}

impl Drop for Inner {
    /// The last clone going away commits what it still holds (best effort: there is no one
    /// left to report an error to, and a run that is finished refuses the rows anyway).
    fn drop(&mut self) {
        let _ = self.store.flush_events(&self.run_id);
    }
}

impl Recorder {
    /// A recorder for a run created earlier (by [`Store::create_run`] in this process).
    pub fn for_run(
        store: &Store,
        run_id: impl Into<String>,
        session_id: impl Into<String>,
    ) -> Self {
        Recorder {
            inner: Arc::new(Inner {
                store: store.clone(),
                run_id: run_id.into(),
                session_id: session_id.into(),
                first_error: Mutex::new(None),
                failed_writes: AtomicU64::new(0),
            }),
        }
    }

    /// The run this recorder writes to.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// The session of the run this recorder writes to.
    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The first write error seen through a hook since the last call, if any.
    pub fn take_error(&self) -> Option<StoreError> {
        self.inner
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// How many hook writes failed in total (the first is kept by `take_error`).
    pub fn failed_writes(&self) -> u64 {
        self.inner.failed_writes.load(Ordering::Relaxed)
    }

    /// Commits the events held so far, in one transaction. Errors are kept like any write
    /// error. Cheap when nothing is held.
    pub fn flush(&self) {
        for e in self.inner.store.flush_events(&self.inner.run_id) {
            self.keep(Err(e));
        }
    }

    /// A node is about to run (the engine's `Observer::node_started`). Before an agent node,
    /// which waits on a model, everything held so far is committed.
    pub fn observe_node(&self, kind: NodeKind) {
        if kind == NodeKind::Agent {
            self.flush();
        }
    }

    /// An orchestration event (the engine's `Observer::event`): held until the next commit
    /// point (see the module documentation).
    pub fn observe_event<O: Display>(&self, event: &Event<O>) {
        let result = self
            .inner
            .store
            .hold_event(&self.inner.run_id, &as_text(event));
        self.keep(result);
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

impl<O: Display> Observer<O> for Recorder {
    fn node_started(&mut self, _node: &str, kind: NodeKind, _attempt: u32, _round: u32) {
        self.observe_node(kind);
    }

    fn event(&mut self, event: &Event<O>) {
        self.observe_event(event);
    }
}

/// Steps and exchanges go to the run named by the config every hook receives
/// (openspec/specs/ask-service/spec.md: the config is how run ownership travels). The agent
/// runtime's `RunHooks` and the tools' `InvocationLog` (diag-core) are these methods.
impl Recorder {
    /// Keeps one agent step.
    pub fn agent_step(&self, config: &RunConfig, step: &AgentStepRecord) {
        self.flush();
        let result = self.inner.store.record_agent_step(config.run_id(), step);
        self.keep(result);
    }

    /// Keeps one model exchange.
    pub fn model_exchange(&self, config: &RunConfig, exchange: &ModelExchange) {
        self.flush();
        let result = self.inner.store.record_exchange(config.run_id(), exchange);
        self.keep(result);
    }

    /// The step and the exchange of one model call in one transaction.
    pub fn model_call(&self, config: &RunConfig, step: &AgentStepRecord, exchange: &ModelExchange) {
        self.flush();
        for e in self
            .inner
            .store
            .record_model_call(config.run_id(), step, exchange)
        {
            self.keep(Err(e));
        }
    }

    /// Stores the invocation in the run the config names; one that claims another run or
    /// session is refused (kept as an error, so the run cannot end a clean SUCCESS).
    pub fn record_invocation(
        &self,
        config: &RunConfig,
        invocation: ToolInvocation,
    ) -> Result<(), String> {
        let result = if invocation.run_id != config.run_id()
            || invocation.session_id != config.session_id()
        {
            Err(StoreError::invalid(format!(
                "tool invocation {} of run {} (session {}) was reported by run {} (session {})",
                invocation.invocation_id,
                invocation.run_id,
                invocation.session_id,
                config.run_id(),
                config.session_id()
            )))
        } else {
            self.flush();
            self.inner.store.record_invocation(&invocation)
        };
        let reason = result.as_ref().err().map(ToString::to_string);
        self.keep(result);
        reason.map_or(Ok(()), Err)
    }

    /// Reads back only `run_id`'s invocations. A read error yields none (so the Gatekeeper
    /// fails closed: an unreadable invocation binds nothing) and is kept like a write error.
    pub fn invocations(&self, run_id: &str) -> Vec<ToolInvocation> {
        match self.inner.store.invocations(run_id) {
            Ok(v) => v,
            Err(e) => {
                self.keep(Err(e));
                Vec::new()
            }
        }
    }
}
