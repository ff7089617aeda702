//! Writes: a run is created RUNNING, its trace rows are inserted one transaction each as
//! they are reported, and it is finished exactly once (SUCCESS or FAILED), by its owner or
//! by the sweep when its owner died.
//!
//! Trace rows are accepted only while their run is RUNNING: the insert itself checks the
//! run's status, so a finished run's trace is final and a row for an unknown run is refused
//! with [`SqliteError::UnknownRun`].

use rusqlite::{ffi, params, Connection, OptionalExtension};
use serde_json::Value;

use super::packed::Packed;
use super::records::{NewRun, RunStatus, INTERRUPTED};
use super::{SqliteError, SqliteStore};
use crate::agent::runtime::{AgentStepRecord, ModelExchange};
use crate::graph::Event;
use crate::hash::sha256_hex;
use crate::model::ChatRequest;
use crate::protocol::retry::canonical_json;
use crate::protocol::ToolInvocation;
use diag_core::store::{Finish, FinishError, FinishReport, RunWriter, StoreError};
use diag_owner::{Owner, RunOwner};

/// The canonical form of a model request ([`crate::hash::canonical_request`]), stored beside
/// its hash.
fn canonical_request(request: &ChatRequest) -> Result<String, SqliteError> {
    crate::hash::canonical_request(request).map_err(|e| SqliteError::Invalid(e.to_string()))
}

/// SQLite integers are signed 64-bit; a count or duration past that (only a saturated
/// reading could be) is stored as the largest one instead of failing the write.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, SqliteError> {
    let value = serde_json::to_value(value).map_err(|e| SqliteError::Invalid(e.to_string()))?;
    Ok(canonical_json(&value))
}

pub(crate) use diag_core::store::codec::error_json;

/// The error for a trace write or finish that changed no row: the run is unknown, or it is
/// no longer RUNNING.
fn not_running(tx: &Connection, store: &SqliteStore, run_id: &str) -> SqliteError {
    let status: Result<Option<String>, _> = tx
        .prepare_cached("SELECT status FROM diagnosis_run WHERE run_id = ?1")
        .and_then(|mut s| s.query_row([run_id], |r| r.get(0)).optional());
    match status {
        Ok(Some(status)) => SqliteError::NotRunning {
            run_id: run_id.to_string(),
            status,
        },
        Ok(None) => SqliteError::UnknownRun(run_id.to_string()),
        Err(e) => store.err("look up a run", e),
    }
}

/// Checks inside the caller's transaction that the run exists and is RUNNING.
fn require_running(tx: &Connection, store: &SqliteStore, run_id: &str) -> Result<(), SqliteError> {
    match not_running(tx, store, run_id) {
        SqliteError::NotRunning { status, .. } if status == RunStatus::Running.as_str() => Ok(()),
        refused => Err(refused),
    }
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
            duration_ms: int(event.duration_ms),
            detail: to_json(&event.detail)?,
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
        let request = canonical_request(&exchange.request)?;
        let request_sha = sha256_hex(request.as_bytes());
        let (response, error) = match &exchange.outcome {
            Ok(r) => (
                Some(Packed::with_dictionary(to_json(r)?, request.as_bytes())),
                None,
            ),
            Err(e) => (None, Some(canonical_json(&error_json(e)))),
        };
        let request = crate::blobs::split(&request);
        Ok(ExchangeRow {
            request,
            request_sha,
            response,
            error,
        })
    }
}

impl SqliteStore {
    /// Inserts several orchestration events of a RUNNING run in one transaction. Each row
    /// stands alone, as if written by itself: a refused row is reported and the others are
    /// still stored. Returns the errors, in row order.
    pub(crate) fn record_events(&self, run_id: &str, rows: &[EventRow]) -> Vec<SqliteError> {
        if rows.is_empty() {
            return Vec::new();
        }
        match self.write("record orchestration events", |tx| {
            Ok(self.insert_events(tx, run_id, rows))
        }) {
            Ok(errors) => errors,
            Err(e) => vec![e],
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Vec<EventRow>>> {
        self.shared.held.lock().unwrap_or_else(|p| p.into_inner())
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
                    int(step.prompt_tokens),
                    int(step.completion_tokens),
                    step.finish_reason.map(|f| f.as_str()),
                    int(step.duration_ms),
                    step.prompt.prompt_id,
                    step.prompt.version,
                    step.prompt.sha256,
                    int(step.prompt.size as u64),
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
                    int(invocation.duration_ms),
                    output.zstd(),
                ])
            });
            self.inserted(tx, run_id, changed, "tool invocation", || {
                invocation.invocation_id.clone()
            })
        }
    }

    /// Checks the outcome of a guarded trace insert.
    fn inserted(
        &self,
        tx: &Connection,
        run_id: &str,
        changed: rusqlite::Result<usize>,
        what: &'static str,
        key: impl FnOnce() -> String,
    ) -> Result<(), SqliteError> {
        match changed {
            Ok(0) => Err(not_running(tx, self, run_id)),
            Ok(_) => Ok(()),
            Err(e) if SqliteError::is_constraint(&e, ffi::SQLITE_CONSTRAINT_PRIMARYKEY) => {
                Err(SqliteError::Duplicate {
                    what,
                    run_id: run_id.to_string(),
                    key: key(),
                })
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
        metrics: &str,
        created_at: &str,
    ) -> Result<Option<SqliteError>, SqliteError> {
        let run = |sql: &str| {
            tx.prepare_cached(sql)
                .and_then(|mut s| s.execute([]))
                .map(|_| ())
                .map_err(|e| self.err("record an evaluation", e))
        };
        run("SAVEPOINT evaluation")?;
        match self.insert_evaluation(tx, run_id, metrics, created_at) {
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
        metrics: &str,
        created_at: &str,
    ) -> Result<(), SqliteError> {
        let changed = tx
            .prepare_cached(
                "INSERT INTO evaluation (run_id, metrics, created_at) \
                 SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM diagnosis_run \
                 WHERE run_id = ?1 AND status = 'SUCCESS') \
                 ON CONFLICT (run_id) DO UPDATE SET metrics = excluded.metrics, \
                 created_at = excluded.created_at",
            )
            .and_then(|mut s| s.execute(params![run_id, metrics, created_at]));
        match changed {
            Ok(0) => Err(match not_running(tx, self, run_id) {
                SqliteError::NotRunning { run_id, status } => {
                    SqliteError::NotEvaluable { run_id, status }
                }
                SqliteError::UnknownRun(_) => SqliteError::UnknownRun(run_id.to_string()),
                other => other,
            }),
            Ok(_) => Ok(()),
            Err(e) => Err(self.err("record an evaluation", e)),
        }
    }
}

/// The port's writes, each written here once; the rules on what may be finished how are
/// diag-core's (`diag_core::store::Store`).
impl RunWriter for SqliteStore {
    fn insert_run(&self, run: &NewRun) -> Result<(), StoreError> {
        if run.run_id.trim().is_empty() {
            return Err(SqliteError::Invalid("a run needs a non-empty run_id".into()).into());
        }
        let catalog = to_json(&run.tools)?;
        let catalog_sha = sha256_hex(catalog.as_bytes());
        let limits = run.limits.as_ref().map(to_json).transpose()?;
        let me = Owner::current();
        let now = self.now();
        let created_at = now.to_string();
        let lease_expires_at = self.lease_expiry(now);
        self.write("create a run", |tx| {
            tx.prepare_cached(
                "INSERT INTO tool_catalog (sha256, catalog) VALUES (?1, ?2) \
                 ON CONFLICT (sha256) DO NOTHING",
            )
            .and_then(|mut s| s.execute(params![catalog_sha, catalog]))
            .map_err(|e| self.err("create a run", e))?;
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO diagnosis_run (run_id, session_id, question, status, \
                     started_at, tools_sha256, owner_pid, owner_token, created_at, limits, \
                     resumed_from, owner_host, lease_expires_at) \
                     VALUES (?1, ?2, ?3, 'RUNNING', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
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
                    ])
                });
            match inserted {
                Ok(_) => Ok(()),
                Err(e) if SqliteError::is_constraint(&e, ffi::SQLITE_CONSTRAINT_PRIMARYKEY) => {
                    Err(SqliteError::DuplicateRun(run.run_id.clone()))
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
        let row = EventRow::of(event)?;
        self.held().entry(run_id.to_string()).or_default().push(row);
        Ok(())
    }

    fn flush_events(&self, run_id: &str) -> Vec<StoreError> {
        let rows = self.held().remove(run_id).unwrap_or_default();
        self.record_events(run_id, &rows)
            .into_iter()
            .map(StoreError::from)
            .collect()
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
        let arguments = to_json(&invocation.arguments)?;
        let output = Packed::of(to_json(&invocation.output)?);
        Ok(self.write("record a tool invocation", |tx| {
            self.insert_invocation(tx, invocation, &arguments, &output)
        })?)
    }

    fn finish_run(&self, run_id: &str, finish: Finish<'_>) -> Result<FinishReport, FinishError> {
        let Finish {
            status,
            failure,
            summary,
            evaluation,
        } = finish;
        // The held rows stay held until the finish commits: a refused SUCCESS leaves them for
        // the FAILED finish that follows.
        let rows = self.held().get(run_id).cloned().unwrap_or_default();
        let self_evaluation = summary
            .self_evaluation
            .as_ref()
            .map(to_json)
            .transpose()
            .map_err(|e| FinishError::Run(e.into()))?
            .map(|e| {
                let answer = summary.answer.as_deref().unwrap_or_default();
                Packed::with_dictionary(e, answer.as_bytes())
            });
        let answer = summary.answer.clone().map(Packed::of);
        let finished_at = summary.finished_at.unwrap_or_else(|| self.now());
        let evaluation = evaluation.map(canonical_json);
        let created_at = self.now().to_string();
        let mut trace_error = None;
        let outcome = self.write("finish a run", |tx| {
            // A run that is unknown or no longer RUNNING is refused as the run's error, held
            // rows or not (its held rows would each be refused for the same reason).
            require_running(tx, self, run_id)?;
            let mut event_errors = self.insert_events(tx, run_id, &rows);
            if tx.is_autocommit() {
                // SQLite rolled the whole transaction back: nothing was written.
                return Err(event_errors.into_iter().next().unwrap_or_else(|| {
                    SqliteError::Invalid("the transaction was rolled back".into())
                }));
            }
            if status == RunStatus::Success && !event_errors.is_empty() {
                trace_error = Some(event_errors.remove(0));
                return Err(SqliteError::Invalid("a trace row was refused".into()));
            }
            let changed = tx.prepare_cached(FINISH).and_then(|mut s| {
                s.execute(params![
                    run_id,
                    status.as_str(),
                    failure,
                    answer.as_ref().map(Packed::text),
                    finished_at.to_string(),
                    summary.duration_ms.map(int),
                    summary.degraded,
                    summary.effective_verdict.map(|v| v.as_str()),
                    summary.fallback_kind.map(|k| k.as_str()),
                    self_evaluation.as_ref().map(Packed::text),
                    summary.reuse.as_ref().map(|r| r.model_calls),
                    summary.reuse.as_ref().map(|r| r.tool_calls),
                    summary.reuse.as_ref().and_then(|r| r.stopped.as_deref()),
                    answer.as_ref().and_then(Packed::zstd),
                    self_evaluation.as_ref().and_then(Packed::zstd),
                ])
            });
            match changed {
                Ok(0) => return Err(not_running(tx, self, run_id)),
                Ok(_) => {}
                Err(e) => return Err(self.err("finish a run", e)),
            }
            let evaluation_error = match &evaluation {
                Some(metrics) => {
                    self.insert_evaluation_savepoint(tx, run_id, metrics, &created_at)?
                }
                None => None,
            };
            Ok(evaluation_error)
        });
        match (outcome, trace_error) {
            (Ok(evaluation_error), _) => {
                let mut held = self.held();
                if let Some(now) = held.get_mut(run_id) {
                    now.drain(..rows.len().min(now.len()));
                    if now.is_empty() {
                        held.remove(run_id);
                    }
                }
                Ok(FinishReport {
                    evaluation_error: evaluation_error.map(StoreError::from),
                })
            }
            (Err(_), Some(trace)) => Err(FinishError::Trace(trace.into())),
            (Err(e), None) => Err(FinishError::Run(e.into())),
        }
    }

    /// Stores (or replaces) the evaluation of a SUCCESS run; a run that is RUNNING or
    /// FAILED is not evaluated (openspec/specs/ask-service/spec.md).
    fn record_evaluation(&self, run_id: &str, metrics: &Value) -> Result<(), StoreError> {
        let metrics = canonical_json(metrics);
        let created_at = self.now().to_string();
        Ok(self.write("record an evaluation", |tx| {
            self.insert_evaluation(tx, run_id, &metrics, &created_at)
        })?)
    }

    /// Marks FAILED (`interrupted`) every RUNNING run whose owner is gone (`diag_owner::is_gone`:
    /// a dead process on this host, or an expired lease of an owner elsewhere), keeping its
    /// partial trace. Returns how many runs it marked.
    fn sweep_interrupted(&self) -> Result<usize, StoreError> {
        type Running = (String, Option<String>, i64, Option<String>, Option<String>);
        let running: Vec<Running> = {
            let conn = self.lock();
            let mut stmt = conn
                .prepare_cached(
                    "SELECT run_id, owner_host, owner_pid, owner_token, lease_expires_at \
                     FROM diagnosis_run INDEXED BY diagnosis_run_running \
                     WHERE status = 'RUNNING'",
                )
                .map_err(|e| self.err("find interrupted runs", e))?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err("find interrupted runs", e))?;
            rows
        };
        let now = self.now();
        let dead: Vec<String> = running
            .into_iter()
            .filter(|(_, host, pid, token, lease)| {
                diag_owner::is_gone(
                    &RunOwner {
                        host: host.as_deref(),
                        pid: *pid,
                        token: token.as_deref(),
                        // An unreadable lease counts as none: the pid rule decides.
                        lease_expires_at: lease
                            .as_deref()
                            .and_then(|t| crate::clock::Timestamp::parse_rfc3339(t).ok()),
                    },
                    now,
                )
            })
            .map(|(run_id, ..)| run_id)
            .collect();
        if dead.is_empty() {
            return Ok(0);
        }
        let finished_at = self.now().to_string();
        Ok(self.write("mark interrupted runs FAILED", |tx| {
            let mut swept = 0;
            let mut stmt = tx
                .prepare_cached(FINISH)
                .map_err(|e| self.err("mark interrupted runs FAILED", e))?;
            for run_id in &dead {
                // The status guard in FINISH makes a concurrent sweep or a late finish by
                // the owner harmless: whoever comes second changes nothing.
                swept += stmt
                    .execute(params![
                        run_id,
                        RunStatus::Failed.as_str(),
                        INTERRUPTED,
                        None::<String>,
                        finished_at,
                        None::<u64>,
                        false,
                        None::<String>,
                        None::<String>,
                        None::<String>,
                        // Reuse counts stay unknown: the owner died before it could say.
                        None::<u32>,
                        None::<u32>,
                        None::<String>,
                        None::<Vec<u8>>,
                        None::<Vec<u8>>,
                    ])
                    .map_err(|e| self.err("mark interrupted runs FAILED", e))?;
            }
            Ok(swept)
        })?)
    }
}
