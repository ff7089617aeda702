//! Writes: a run is created RUNNING, its trace rows are inserted one transaction each as
//! they are reported, and it is finished exactly once (SUCCESS or FAILED), by its owner or
//! by the sweep when its owner died.
//!
//! Trace rows are accepted only while their run is RUNNING: the insert itself checks the
//! run's status, so a finished run's trace is final and a row for an unknown run is refused
//! with [`RecordError::UnknownRun`].

use rusqlite::{ffi, params, Connection, OptionalExtension};
use serde_json::Value;

use super::packed::Packed;
use super::records::NewRun;
use super::{SqliteError, SqliteStore};
use diag_graph::Event;
use diag_owner::Owner;
use diag_records::hash::sha256_hex;
use diag_records::invocation::ToolInvocation;
use diag_records::step::{AgentStepRecord, ModelExchange};
use diag_store::backend::{self, FinishPlan, FinishRow, FinishStatements};
use diag_store::codec::{self, stored_int, EvaluationText};
use diag_store::{Finish, FinishError, FinishReport, RecordError, RunWriter, StoreError};

/// A value as its canonical JSON text ([`codec::canonical`]).
pub(crate) fn canonical<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, SqliteError> {
    Ok(codec::canonical(value)?)
}

// Token totals saturate: `sum()` fails with "integer overflow" on counts a misbehaving server
// can report (each is stored clamped to i64::MAX), and a run that cannot be finished would stay
// RUNNING. `total()` never fails, and a CAST of a too-large REAL gives i64::MAX.
pub(crate) const FINISH: &str = "
UPDATE diagnosis_run SET
    status = ?2, failure = ?3, answer = ?4, finished_at = ?5, duration_ms = ?6,
    degraded = ?7, effective_verdict = ?8, fallback_kind = ?9, self_evaluation = ?10,
    reused_model_calls = ?11, reused_tool_calls = ?12, reuse_stopped = ?13,
    answer_zstd = ?14, self_evaluation_zstd = ?15,
    prompt_tokens =
        (SELECT CAST(total(prompt_tokens) AS INTEGER) FROM agent_step WHERE run_id = ?1),
    completion_tokens =
        (SELECT CAST(total(completion_tokens) AS INTEGER) FROM agent_step WHERE run_id = ?1),
    step_count = (SELECT count(*) FROM agent_step WHERE run_id = ?1),
    tool_count = (SELECT count(*) FROM tool_invocation WHERE run_id = ?1),
    path = (SELECT json_group_array(node ORDER BY seq) FROM orchestration_event
            WHERE run_id = ?1)
WHERE run_id = ?1 AND status = 'RUNNING'";

/// The guard of every trace insert: its run (`?1`) exists and is RUNNING.
macro_rules! while_running {
    () => {
        " WHERE EXISTS (SELECT 1 FROM diagnosis_run WHERE run_id = ?1 AND status = 'RUNNING')"
    };
}

/// One orchestration event as the row it becomes, built when the event is reported (so a
/// detail that cannot be serialized is an error then) and inserted now or later.
#[derive(Debug, Clone)]
pub struct EventRow {
    seq: u32,
    node: String,
    attempt: u32,
    round: u32,
    status: String,
    started_at: String,
    duration_ms: i64,
    detail: String,
}

impl EventRow {
    pub(crate) fn of<O: std::fmt::Display>(event: &Event<O>) -> Result<EventRow, SqliteError> {
        Ok(EventRow {
            seq: event.seq,
            node: event.node.clone(),
            attempt: event.attempt,
            round: event.round,
            status: event.status.to_string(),
            started_at: event.started_at.to_string(),
            duration_ms: stored_int(event.duration_ms),
            detail: canonical(&event.detail)?,
        })
    }
}

/// A model exchange serialized for its row, before any transaction opens.
pub(crate) struct ExchangeRow {
    /// The canonical request cut into its skeleton and blobs (`blobs.rs`).
    request: crate::blobs::Split,
    request_sha: String,
    /// Compressed here, before any transaction opens (`packed.rs`).
    response: Option<Packed>,
    error: Option<String>,
}

impl ExchangeRow {
    pub(crate) fn of(exchange: &ModelExchange) -> Result<ExchangeRow, SqliteError> {
        let text = codec::exchange_text(exchange)?;
        let response = text
            .response
            .map(|r| Packed::with_dictionary(r, text.request.as_bytes()));
        Ok(ExchangeRow {
            request: crate::blobs::split(&text.request),
            request_sha: text.request_sha256,
            response,
            error: text.error,
        })
    }
}

/// A run's final row ([`FinishRow`]) as SQLite binds it: the answer and the self-evaluation
/// compressed (the self-evaluation against the answer, `packed.rs`) before any transaction
/// opens.
pub(crate) struct FinishParams {
    row: FinishRow,
    answer: Option<Packed>,
    self_evaluation: Option<Packed>,
}

impl FinishParams {
    pub(crate) fn of(row: FinishRow) -> FinishParams {
        let dictionary = row.answer.as_deref().unwrap_or_default().as_bytes();
        let self_evaluation = row
            .self_evaluation
            .clone()
            .map(|e| Packed::with_dictionary(e, dictionary));
        FinishParams {
            answer: row.answer.clone().map(Packed::of),
            self_evaluation,
            row,
        }
    }
}

/// The statements of a finish on SQLite, in its one `BEGIN IMMEDIATE` transaction; their
/// order and what a refused one means are `backend::FinishPlan::run`'s.
struct Finishing<'a> {
    store: &'a SqliteStore,
    tx: &'a Connection,
    params: &'a FinishParams,
}

impl FinishStatements for Finishing<'_> {
    type Row = EventRow;
    type Error = SqliteError;

    fn require_running(&mut self, run_id: &str) -> Result<(), SqliteError> {
        let status = self.store.run_status(self.tx, run_id)?;
        Ok(backend::require_running(run_id, status)?)
    }

    fn insert_events(
        &mut self,
        run_id: &str,
        rows: &[EventRow],
    ) -> Result<Vec<SqliteError>, SqliteError> {
        let errors = self.store.insert_events(self.tx, run_id, rows);
        if self.tx.is_autocommit() {
            // SQLite rolled the whole transaction back: nothing was written.
            return Err(errors.into_iter().next().unwrap_or_else(|| {
                RecordError::Invalid("the transaction was rolled back".into()).into()
            }));
        }
        Ok(errors)
    }

    fn update_run(&mut self, run_id: &str) -> Result<(), SqliteError> {
        match self
            .store
            .update_finished(self.tx, &[run_id], self.params, "finish a run")?
        {
            0 => Err(self.store.not_running(self.tx, run_id)),
            _ => Ok(()),
        }
    }

    fn insert_evaluation(
        &mut self,
        run_id: &str,
        evaluation: &EvaluationText,
    ) -> Result<Option<SqliteError>, SqliteError> {
        self.store
            .insert_evaluation_savepoint(self.tx, run_id, evaluation)
    }
}

impl SqliteStore {
    /// The stored status of `run_id`, inside the caller's transaction (`None`: no such run).
    pub(crate) fn run_status(
        &self,
        tx: &Connection,
        run_id: &str,
    ) -> Result<Option<String>, SqliteError> {
        tx.prepare_cached("SELECT status FROM diagnosis_run WHERE run_id = ?1")
            .and_then(|mut s| s.query_row([run_id], |r| r.get(0)).optional())
            .map_err(|e| self.err("look up a run", e))
    }

    /// The error for a trace write or finish that changed no row: the run is unknown, or it
    /// is no longer RUNNING.
    fn not_running(&self, tx: &Connection, run_id: &str) -> SqliteError {
        match self.run_status(tx, run_id) {
            Ok(status) => backend::not_running(run_id, status).into(),
            Err(e) => e,
        }
    }

    /// Runs [`FINISH`] with `params` on each of `run_ids`: how many rows it changed (a run
    /// no longer RUNNING is left as it is).
    pub(crate) fn update_finished(
        &self,
        tx: &Connection,
        run_ids: &[impl AsRef<str>],
        params: &FinishParams,
        op: &'static str,
    ) -> Result<usize, SqliteError> {
        let FinishParams {
            row,
            answer,
            self_evaluation,
        } = params;
        let reuse = row.reuse.as_ref();
        let mut changed = 0;
        for run_id in run_ids {
            changed += tx
                .prepare_cached(FINISH)
                .and_then(|mut s| {
                    s.execute(params![
                        run_id.as_ref(),
                        row.status.as_str(),
                        row.failure,
                        answer.as_ref().map(Packed::text),
                        row.finished_at,
                        row.duration_ms,
                        row.degraded,
                        row.effective_verdict,
                        row.fallback_kind,
                        self_evaluation.as_ref().map(Packed::text),
                        reuse.map(|r| r.model_calls),
                        reuse.map(|r| r.tool_calls),
                        reuse.and_then(|r| r.stopped.as_deref()),
                        answer.as_ref().and_then(Packed::zstd),
                        self_evaluation.as_ref().and_then(Packed::zstd),
                    ])
                })
                .map_err(|e| self.err(op, e))?;
        }
        Ok(changed)
    }

    /// Stores a tool catalog once per distinct catalog, under its `sha256`, inside the caller's
    /// transaction.
    pub(crate) fn insert_catalog(
        &self,
        tx: &Connection,
        sha256: &str,
        catalog: &str,
        op: &'static str,
    ) -> Result<(), SqliteError> {
        tx.prepare_cached(
            "INSERT INTO tool_catalog (sha256, catalog) VALUES (?1, ?2) \
             ON CONFLICT (sha256) DO NOTHING",
        )
        .and_then(|mut s| s.execute(params![sha256, catalog]))
        .map(|_| ())
        .map_err(|e| self.err(op, e))
    }

    /// Inserts several orchestration events of a RUNNING run in one transaction. Each row
    /// stands alone, as if written by itself: a refused row is reported and the others are
    /// still stored. Returns the errors, in row order.
    pub(crate) fn record_events(&self, run_id: &str, rows: &[EventRow]) -> Vec<SqliteError> {
        match self.write("record orchestration events", |tx| {
            Ok(self.insert_events(tx, run_id, rows))
        }) {
            Ok(errors) => errors,
            Err(e) => vec![e],
        }
    }

    /// Inserts `rows` one statement each inside the caller's transaction. A statement that
    /// fails undoes only itself; should SQLite roll the whole transaction back instead (a
    /// full disk, an I/O error), nothing more is attempted and that is the error returned.
    pub(crate) fn insert_events(
        &self,
        tx: &Connection,
        run_id: &str,
        rows: &[EventRow],
    ) -> Vec<SqliteError> {
        let mut errors = Vec::new();
        for row in rows {
            if let Err(e) = self.insert_event(tx, run_id, row) {
                errors.push(e);
                if tx.is_autocommit() {
                    break;
                }
            }
        }
        errors
    }

    fn insert_event(
        &self,
        tx: &Connection,
        run_id: &str,
        row: &EventRow,
    ) -> Result<(), SqliteError> {
        let sql = concat!(
            "INSERT INTO orchestration_event (run_id, seq, node, attempt, round, status, \
             started_at, duration_ms, detail) \
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9",
            while_running!()
        );
        let changed = tx.prepare_cached(sql).and_then(|mut s| {
            s.execute(params![
                run_id,
                row.seq,
                row.node,
                row.attempt,
                row.round,
                row.status,
                row.started_at,
                row.duration_ms,
                row.detail,
            ])
        });
        self.inserted(tx, run_id, changed, "event", || row.seq.to_string())
    }

    pub(crate) fn insert_step(
        &self,
        tx: &Connection,
        run_id: &str,
        step: &AgentStepRecord,
    ) -> Result<(), SqliteError> {
        {
            let sql = concat!(
                "INSERT INTO agent_step (run_id, seq, agent, round, attempt, turn, status, model, \
                 prompt_tokens, completion_tokens, finish_reason, duration_ms, prompt_id, \
                 prompt_version, prompt_sha256, prompt_size) \
                 SELECT ?1, (SELECT coalesce(max(seq), 0) + 1 FROM agent_step WHERE run_id = ?1), \
                 ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15",
                while_running!()
            );
            let changed = tx.prepare_cached(sql).and_then(|mut s| {
                s.execute(params![
                    run_id,
                    step.agent.as_str(),
                    step.round,
                    step.attempt,
                    step.turn,
                    step.status.as_str(),
                    step.model,
                    stored_int(step.prompt_tokens),
                    stored_int(step.completion_tokens),
                    step.finish_reason.map(|f| f.as_str()),
                    stored_int(step.duration_ms),
                    step.prompt.prompt_id,
                    step.prompt.version,
                    step.prompt.sha256,
                    stored_int(step.prompt.size as u64),
                ])
            });
            self.inserted(tx, run_id, changed, "agent step", String::new)
        }
    }

    pub(crate) fn insert_exchange(
        &self,
        tx: &Connection,
        run_id: &str,
        exchange: &ModelExchange,
        row: &ExchangeRow,
    ) -> Result<(), SqliteError> {
        let ExchangeRow {
            request,
            request_sha,
            response,
            error,
        } = row;
        {
            // Blobs go in first, so that the exchange's insert trigger counts its references;
            // should the exchange be refused, they stay unreferenced until the next gc.
            let blobs = crate::blobs::store_parts(tx, request)
                .map_err(|e| self.err("record the run's trace", e))?;
            let sql = concat!(
                "INSERT INTO model_exchange (run_id, seq, agent, round, attempt, turn, request, \
                 request_sha256, response, error, request_blobs, response_zstd) \
                 SELECT ?1, (SELECT coalesce(max(seq), 0) + 1 FROM model_exchange \
                 WHERE run_id = ?1), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11",
                while_running!()
            );
            let changed = tx.prepare_cached(sql).and_then(|mut s| {
                s.execute(params![
                    run_id,
                    exchange.agent.as_str(),
                    exchange.round,
                    exchange.attempt,
                    exchange.turn,
                    request.skeleton,
                    request_sha,
                    response.as_ref().map(Packed::text),
                    error,
                    blobs,
                    response.as_ref().and_then(Packed::zstd),
                ])
            });
            self.inserted(tx, run_id, changed, "model exchange", String::new)
        }
    }

    pub(crate) fn insert_invocation(
        &self,
        tx: &Connection,
        invocation: &ToolInvocation,
        arguments: &str,
        output: &Packed,
    ) -> Result<(), SqliteError> {
        let run_id = invocation.run_id.as_str();
        {
            let sql = concat!(
                "INSERT INTO tool_invocation (run_id, invocation_id, seq, session_id, agent, \
                 round, tool_name, arguments, output, status, duration_ms, output_zstd) \
                 SELECT ?1, ?2, (SELECT coalesce(max(seq), 0) + 1 FROM tool_invocation \
                 WHERE run_id = ?1), ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11",
                while_running!()
            );
            let changed = tx.prepare_cached(sql).and_then(|mut s| {
                s.execute(params![
                    run_id,
                    invocation.invocation_id,
                    invocation.session_id,
                    invocation.agent,
                    invocation.round,
                    invocation.tool_name,
                    arguments,
                    output.text(),
                    invocation.status.as_str(),
                    stored_int(invocation.duration_ms),
                    output.zstd(),
                ])
            });
            self.inserted(tx, run_id, changed, "tool invocation", || {
                invocation.invocation_id.clone()
            })
        }
    }

    /// Checks the outcome of a guarded trace insert.
    pub(crate) fn inserted(
        &self,
        tx: &Connection,
        run_id: &str,
        changed: rusqlite::Result<usize>,
        what: &'static str,
        key: impl FnOnce() -> String,
    ) -> Result<(), SqliteError> {
        match changed {
            Ok(0) => Err(self.not_running(tx, run_id)),
            Ok(_) => Ok(()),
            Err(e) if SqliteError::is_constraint(&e, ffi::SQLITE_CONSTRAINT_PRIMARYKEY) => {
                Err(RecordError::Duplicate {
                    what,
                    run_id: run_id.to_string(),
                    key: key(),
                }
                .into())
            }
            Err(e) => Err(self.err("record the run's trace", e)),
        }
    }

    /// [`Self::insert_evaluation`] under a savepoint, so that its failure undoes only itself.
    /// `Err` only when the surrounding transaction itself is lost.
    fn insert_evaluation_savepoint(
        &self,
        tx: &Connection,
        run_id: &str,
        evaluation: &EvaluationText,
    ) -> Result<Option<SqliteError>, SqliteError> {
        let run = |sql: &str| {
            tx.prepare_cached(sql)
                .and_then(|mut s| s.execute([]))
                .map(|_| ())
                .map_err(|e| self.err("record an evaluation", e))
        };
        run("SAVEPOINT evaluation")?;
        match self.insert_evaluation(tx, run_id, evaluation) {
            Ok(()) => {
                run("RELEASE evaluation")?;
                Ok(None)
            }
            Err(e) => {
                if tx.is_autocommit() {
                    return Err(e);
                }
                run("ROLLBACK TO evaluation")?;
                run("RELEASE evaluation")?;
                Ok(Some(e))
            }
        }
    }

    pub(crate) fn insert_evaluation(
        &self,
        tx: &Connection,
        run_id: &str,
        evaluation: &EvaluationText,
    ) -> Result<(), SqliteError> {
        let changed = tx
            .prepare_cached(
                "INSERT INTO evaluation (run_id, metrics, created_at) \
                 SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM diagnosis_run \
                 WHERE run_id = ?1 AND status = 'SUCCESS') \
                 ON CONFLICT (run_id) DO UPDATE SET metrics = excluded.metrics, \
                 created_at = excluded.created_at",
            )
            .and_then(|mut s| {
                s.execute(params![run_id, evaluation.metrics, evaluation.created_at])
            });
        match changed {
            Ok(0) => Err(match self.run_status(tx, run_id) {
                Ok(status) => backend::not_evaluable(run_id, status).into(),
                Err(e) => e,
            }),
            Ok(_) => Ok(()),
            Err(e) => Err(self.err("record an evaluation", e)),
        }
    }
}

/// The port's writes, each written here once; the rules on what may be finished how are
/// diag-core's (`diag_store::Store`, `diag_store::backend`).
impl RunWriter for SqliteStore {
    fn insert_run(&self, run: &NewRun) -> Result<(), StoreError> {
        backend::check_new_run(run).map_err(SqliteError::from)?;
        let catalog = canonical(&run.tools)?;
        let catalog_sha = sha256_hex(catalog.as_bytes());
        let limits = run.limits.as_ref().map(canonical).transpose()?;
        let me = Owner::current();
        let now = self.now();
        let created_at = now.to_string();
        let lease_expires_at = self.shared.leases.expiry(now);
        self.write("create a run", |tx| {
            self.insert_catalog(tx, &catalog_sha, &catalog, "create a run")?;
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO diagnosis_run (run_id, session_id, question, status, \
                     started_at, tools_sha256, owner_pid, owner_token, created_at, limits, \
                     resumed_from, owner_host, lease_expires_at, replay_of) \
                     VALUES (?1, ?2, ?3, 'RUNNING', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        run.run_id,
                        run.session_id,
                        run.question,
                        run.started_at.to_string(),
                        catalog_sha,
                        me.pid,
                        me.token,
                        created_at,
                        limits,
                        run.resumed_from,
                        me.host,
                        lease_expires_at,
                        run.replay_of,
                    ])
                });
            match inserted {
                Ok(_) => Ok(()),
                Err(e) if SqliteError::is_constraint(&e, ffi::SQLITE_CONSTRAINT_PRIMARYKEY) => {
                    Err(RecordError::DuplicateRun(run.run_id.clone()).into())
                }
                Err(e) => Err(self.err("create a run", e)),
            }
        })?;
        self.start_heartbeat();
        Ok(())
    }

    fn record_event(&self, run_id: &str, event: &Event<String>) -> Result<(), StoreError> {
        let row = EventRow::of(event)?;
        Ok(self.write("record an orchestration event", |tx| {
            self.insert_event(tx, run_id, &row)
        })?)
    }

    fn hold_event(&self, run_id: &str, event: &Event<String>) -> Result<(), StoreError> {
        self.shared.held.hold(run_id, EventRow::of(event))
    }

    fn flush_events(&self, run_id: &str) -> Vec<StoreError> {
        self.shared
            .held
            .flush(run_id, |rows| self.record_events(run_id, rows))
    }

    fn record_agent_step(&self, run_id: &str, step: &AgentStepRecord) -> Result<(), StoreError> {
        Ok(self.write("record an agent step", |tx| {
            self.insert_step(tx, run_id, step)
        })?)
    }

    /// Inserts one model exchange of a RUNNING run: the canonical request JSON and its
    /// sha256, and the normalized response or the error.
    fn record_exchange(&self, run_id: &str, exchange: &ModelExchange) -> Result<(), StoreError> {
        let row = ExchangeRow::of(exchange)?;
        Ok(self.write("record a model exchange", |tx| {
            self.insert_exchange(tx, run_id, exchange, &row)
        })?)
    }

    /// Inserts one model call's step and exchange in one transaction. Each row stands alone,
    /// as if written by itself (a refused one does not undo the other); returns the errors.
    fn record_model_call(
        &self,
        run_id: &str,
        step: &AgentStepRecord,
        exchange: &ModelExchange,
    ) -> Vec<StoreError> {
        let row = ExchangeRow::of(exchange);
        let written = self.write("record a model call", move |tx| {
            let mut errors = Vec::new();
            if let Err(e) = self.insert_step(tx, run_id, step) {
                errors.push(e);
                if tx.is_autocommit() {
                    // SQLite rolled the whole transaction back: nothing more is attempted.
                    return Ok(errors);
                }
            }
            match row {
                Ok(row) => {
                    if let Err(e) = self.insert_exchange(tx, run_id, exchange, &row) {
                        errors.push(e);
                    }
                }
                Err(e) => errors.push(e),
            }
            Ok(errors)
        });
        match written {
            Ok(errors) => errors.into_iter().map(StoreError::from).collect(),
            Err(e) => vec![e.into()],
        }
    }

    /// Inserts one tool invocation into the run it names, which must be RUNNING; its `seq`
    /// keeps recording order.
    fn record_invocation(&self, invocation: &ToolInvocation) -> Result<(), StoreError> {
        let arguments = canonical(&invocation.arguments)?;
        let output = Packed::of(canonical(&invocation.output)?);
        Ok(self.write("record a tool invocation", |tx| {
            self.insert_invocation(tx, invocation, &arguments, &output)
        })?)
    }

    /// The finish in one `BEGIN IMMEDIATE` transaction with the held events and the
    /// evaluation (`backend::FinishPlan::run` says in what order and what a refusal means).
    fn finish_run(&self, run_id: &str, finish: Finish<'_>) -> Result<FinishReport, FinishError> {
        let plan = FinishPlan::new(&finish, self.now());
        let params = FinishParams::of(plan.row.clone());
        self.shared.held.finish(run_id, |rows| {
            self.write_as("finish a run", |tx| {
                let mut statements = Finishing {
                    store: self,
                    tx,
                    params: &params,
                };
                plan.run(run_id, rows, &mut statements)
            })
        })
    }

    /// Stores (or replaces) the evaluation of a SUCCESS run; a run that is RUNNING or
    /// FAILED is not evaluated (openspec/specs/ask-service/spec.md).
    fn record_evaluation(&self, run_id: &str, metrics: &Value) -> Result<(), StoreError> {
        let evaluation = EvaluationText::new(metrics, self.now());
        Ok(self.write("record an evaluation", |tx| {
            self.insert_evaluation(tx, run_id, &evaluation)
        })?)
    }

    /// Marks FAILED (`interrupted`) every RUNNING run whose owner is gone (`diag_owner::is_gone`:
    /// a dead process on this host, or an expired lease of an owner elsewhere), keeping its
    /// partial trace. Returns how many runs it marked.
    fn sweep_interrupted(&self) -> Result<usize, StoreError> {
        let running = backend::running_owners(self)?;
        let dead = diag_owner::gone_runs(running, self.now());
        if dead.is_empty() {
            return Ok(0);
        }
        let params = FinishParams::of(FinishRow::interrupted(self.now()));
        // The status guard in FINISH makes a concurrent sweep or a late finish by the owner
        // harmless: whoever comes second changes nothing.
        Ok(self.write("mark interrupted runs FAILED", |tx| {
            self.update_finished(tx, &dead, &params, "mark interrupted runs FAILED")
        })?)
    }
}
