//! Writes: a run is created RUNNING with its owner's lease, its trace rows are inserted one
//! transaction each as they are reported, and it is finished exactly once (SUCCESS or
//! FAILED), by its owner or by the sweep when its owner is gone.
//!
//! Every trace write first locks its run row (`FOR SHARE`) and checks that the run is
//! RUNNING, so a trace row can never land in a finished run, and a finish (which updates the
//! row, waiting on those locks) sees every row written before it.

use serde_json::Value;
use tokio_postgres::types::ToSql;

use super::error::PgError;
use super::records::NewRun;
use super::tx::Tx;
use super::PgStore;
use diag_graph::Event;
use diag_owner::Owner;
use diag_records::invocation::ToolInvocation;
use diag_records::step::{AgentStepRecord, ModelExchange};
use diag_store::backend::{self, FinishPlan, FinishRow, FinishStatements};
use diag_store::codec::{self, stored_int, EvaluationText, ExchangeText};
use diag_store::{Finish, FinishError, FinishReport, RecordError, RunWriter, StoreError};

/// A value as its canonical JSON text ([`codec::canonical`]).
pub(crate) fn canonical<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, PgError> {
    Ok(codec::canonical(value)?)
}

/// One orchestration event as the row it becomes: built when the event is reported (a detail
/// that cannot be serialized is an error then), inserted now or later.
#[derive(Debug, Clone)]
pub struct EventRow {
    seq: i64,
    node: String,
    record: String,
}

impl EventRow {
    pub(crate) fn of(event: &Event<String>) -> Result<EventRow, PgError> {
        Ok(EventRow {
            seq: i64::from(event.seq),
            node: event.node.clone(),
            record: canonical(event)?,
        })
    }
}

/// A model exchange serialized for its row, before any transaction opens.
pub(crate) struct ExchangeRow {
    agent: String,
    position: [i64; 3],
    text: ExchangeText,
}

impl ExchangeRow {
    pub(crate) fn of(exchange: &ModelExchange) -> Result<ExchangeRow, PgError> {
        Ok(ExchangeRow {
            text: codec::exchange_text(exchange)?,
            agent: exchange.agent.as_str().to_string(),
            position: [
                i64::from(exchange.round),
                i64::from(exchange.attempt),
                i64::from(exchange.turn),
            ],
        })
    }
}

/// A run's final row ([`FinishRow`]) as PostgreSQL binds it: its reuse as canonical JSON.
pub(crate) struct FinishParams {
    row: FinishRow,
    reuse: Option<String>,
}

impl FinishParams {
    pub(crate) fn of(row: FinishRow) -> Result<FinishParams, PgError> {
        Ok(FinishParams {
            reuse: row.reuse.as_ref().map(canonical).transpose()?,
            row,
        })
    }
}

/// The statements of a finish on PostgreSQL, in its one transaction (its rows apart only
/// when one is refused, `tx.rs`); their order and what a refused one means are
/// `backend::FinishPlan::run`'s.
struct Finishing<'a, 't, 'c> {
    store: &'a PgStore,
    tx: &'t mut Tx<'c>,
    params: &'a FinishParams,
}

impl FinishStatements for Finishing<'_, '_, '_> {
    type Row = EventRow;
    type Error = PgError;

    /// Locks the run row for the finish (`FOR UPDATE`) and checks it is RUNNING.
    fn require_running(&mut self, run_id: &str) -> Result<(), PgError> {
        let found = self
            .tx
            .query_opt(
                "SELECT status FROM diagnosis_run WHERE run_id = $1 FOR UPDATE",
                &[&run_id],
            )
            .map_err(|e| self.store.err("finish a run", &e))?;
        Ok(backend::require_running(run_id, found.map(|r| r.get(0)))?)
    }

    fn insert_events(&mut self, run_id: &str, rows: &[EventRow]) -> Result<Vec<PgError>, PgError> {
        Ok(self.store.insert_events(self.tx, run_id, rows))
    }

    fn update_run(&mut self, run_id: &str) -> Result<(), PgError> {
        self.store
            .update_finished(self.tx, &[run_id], self.params, "finish a run")
            .map(|_| ())
    }

    fn insert_evaluation(
        &mut self,
        run_id: &str,
        evaluation: &EvaluationText,
    ) -> Result<Option<PgError>, PgError> {
        let store = self.store;
        Ok(self
            .tx
            .row(
                |tx| store.insert_evaluation(tx, run_id, evaluation),
                |e| store.err("record an evaluation", e),
            )
            .err())
    }
}

/// The finish of a run: every column the owner (or the sweep) sets, counts and path taken
/// from the stored trace in the same statement.
pub(crate) const FINISH: &str = "
UPDATE diagnosis_run SET
    status = $2, failure = $3, answer = $4, finished_at = $5, duration_ms = $6,
    degraded = $7, effective_verdict = $8, fallback_kind = $9, self_evaluation = $10,
    reuse = $11,
    prompt_tokens = (SELECT coalesce(sum(prompt_tokens), 0)::bigint FROM agent_step WHERE run_id = $1),
    completion_tokens =
        (SELECT coalesce(sum(completion_tokens), 0)::bigint FROM agent_step WHERE run_id = $1),
    step_count = (SELECT count(*) FROM agent_step WHERE run_id = $1),
    tool_count = (SELECT count(*) FROM tool_invocation WHERE run_id = $1),
    path = (SELECT coalesce(json_agg(node ORDER BY seq)::text, '[]') FROM orchestration_event
            WHERE run_id = $1)
WHERE run_id = $1 AND status = 'RUNNING'";

impl PgStore {
    /// Another copy of a run's refusal of a trace row (the run is unknown, or not RUNNING),
    /// so that each row of a write is refused with its own error, as if written by itself
    /// (as in the SQLite store); `None` for any other error, after which nothing more is
    /// attempted.
    fn refusal_again(e: &PgError) -> Option<PgError> {
        match e {
            PgError::Record(r @ (RecordError::NotRunning { .. } | RecordError::UnknownRun(_))) => {
                Some(r.clone().into())
            }
            _ => None,
        }
    }

    /// Locks the run row for this transaction and checks it is RUNNING.
    pub(crate) fn running(&self, tx: &mut Tx<'_>, run_id: &str) -> Result<(), PgError> {
        let status = tx
            .query_opt(
                "SELECT status FROM diagnosis_run WHERE run_id = $1 FOR SHARE",
                &[&run_id],
            )
            .map_err(|e| self.err("record the run's trace", &e))?
            .map(|r| r.get(0));
        Ok(backend::require_running(run_id, status)?)
    }

    /// Runs [`FINISH`] with `params` on each of `run_ids`: how many rows it changed (a run
    /// no longer RUNNING is left as it is).
    pub(crate) fn update_finished(
        &self,
        tx: &mut Tx<'_>,
        run_ids: &[impl AsRef<str>],
        params: &FinishParams,
        op: &'static str,
    ) -> Result<usize, PgError> {
        let FinishParams { row, reuse } = params;
        let status = row.status.as_str();
        let mut changed = 0;
        for run_id in run_ids {
            let run_id = run_id.as_ref();
            changed += tx
                .execute(
                    FINISH,
                    &[
                        &run_id,
                        &status,
                        &row.failure,
                        &row.answer,
                        &row.finished_at,
                        &row.duration_ms,
                        &row.degraded,
                        &row.effective_verdict,
                        &row.fallback_kind,
                        &row.self_evaluation,
                        reuse,
                    ],
                )
                .map_err(|e| self.err(op, &e))?;
        }
        Ok(usize::try_from(changed).unwrap_or(usize::MAX))
    }

    /// Inserts one trace row as a row of its write ([`Tx::row`]): where the write's rows go
    /// apart, a refused row undoes only itself.
    fn insert(
        &self,
        tx: &mut Tx<'_>,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
        what: &'static str,
        run_id: &str,
        key: impl FnOnce() -> String,
    ) -> Result<(), PgError> {
        let err = |e: &tokio_postgres::Error| self.err("record the run's trace", e);
        tx.row(
            |tx| match tx.execute(sql, params) {
                Ok(_) => Ok(()),
                Err(e) if PgError::is_unique_violation(&e) => Err(RecordError::Duplicate {
                    what,
                    run_id: run_id.to_string(),
                    key: key(),
                }
                .into()),
                Err(e) => Err(err(&e)),
            },
            err,
        )
    }

    pub(crate) fn insert_events(
        &self,
        tx: &mut Tx<'_>,
        run_id: &str,
        rows: &[EventRow],
    ) -> Vec<PgError> {
        let mut errors = Vec::new();
        for row in rows {
            if let Err(e) = self.insert(
                tx,
                "INSERT INTO orchestration_event (run_id, seq, node, record) VALUES ($1, $2, $3, $4)",
                &[&run_id, &row.seq, &row.node, &row.record],
                "event",
                run_id,
                || row.seq.to_string(),
            ) {
                errors.push(e);
            }
        }
        errors
    }

    /// Inserts several orchestration events of a RUNNING run in one transaction; each row
    /// stands alone (a refused one is reported, the others are stored).
    pub(crate) fn record_events(&self, run_id: &str, rows: &[EventRow]) -> Vec<PgError> {
        match self.write_rows("record orchestration events", |tx| -> Result<_, PgError> {
            self.running(tx, run_id)?;
            Ok(self.insert_events(tx, run_id, rows))
        }) {
            Ok(errors) => errors,
            Err(e) => match Self::refusal_again(&e) {
                Some(_) => {
                    let mut errors: Vec<PgError> = rows[1..]
                        .iter()
                        .filter_map(|_| Self::refusal_again(&e))
                        .collect();
                    errors.insert(0, e);
                    errors
                }
                None => vec![e],
            },
        }
    }

    pub(crate) fn insert_step(
        &self,
        tx: &mut Tx<'_>,
        run_id: &str,
        step: &AgentStepRecord,
    ) -> Result<(), PgError> {
        let record = canonical(step)?;
        let (prompt, completion) = (
            stored_int(step.prompt_tokens),
            stored_int(step.completion_tokens),
        );
        self.insert(
            tx,
            "INSERT INTO agent_step (run_id, seq, prompt_tokens, completion_tokens, record) \
             SELECT $1, coalesce(max(seq), 0) + 1, $2, $3, $4 FROM agent_step WHERE run_id = $1",
            &[&run_id, &prompt, &completion, &record],
            "agent step",
            run_id,
            String::new,
        )
    }

    pub(crate) fn insert_exchange(
        &self,
        tx: &mut Tx<'_>,
        run_id: &str,
        row: &ExchangeRow,
    ) -> Result<(), PgError> {
        self.insert(
            tx,
            "INSERT INTO model_exchange (run_id, seq, agent, round, attempt, turn, request, \
             request_sha256, response, error) \
             SELECT $1, coalesce(max(seq), 0) + 1, $2, $3, $4, $5, $6, $7, $8, $9 \
             FROM model_exchange WHERE run_id = $1",
            &[
                &run_id,
                &row.agent,
                &row.position[0],
                &row.position[1],
                &row.position[2],
                &row.text.request,
                &row.text.request_sha256,
                &row.text.response,
                &row.text.error,
            ],
            "model exchange",
            run_id,
            String::new,
        )
    }

    pub(crate) fn insert_invocation(
        &self,
        tx: &mut Tx<'_>,
        invocation: &ToolInvocation,
    ) -> Result<(), PgError> {
        let record = canonical(invocation)?;
        let run_id = invocation.run_id.as_str();
        {
            self.insert(
                tx,
                "INSERT INTO tool_invocation (run_id, invocation_id, seq, record) \
                 SELECT $1, $2, coalesce(max(seq), 0) + 1, $3 FROM tool_invocation \
                 WHERE run_id = $1",
                &[&run_id, &invocation.invocation_id, &record],
                "tool invocation",
                run_id,
                || invocation.invocation_id.clone(),
            )
        }
    }

    fn insert_evaluation(
        &self,
        tx: &mut Tx<'_>,
        run_id: &str,
        evaluation: &EvaluationText,
    ) -> Result<(), PgError> {
        let status = tx
            .query_opt(
                "SELECT status FROM diagnosis_run WHERE run_id = $1 FOR SHARE",
                &[&run_id],
            )
            .map_err(|e| self.err("record an evaluation", &e))?
            .map(|r| r.get(0));
        backend::require_evaluable(run_id, status)?;
        tx.execute(
            "INSERT INTO evaluation (run_id, metrics, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (run_id) DO UPDATE SET metrics = excluded.metrics, \
             created_at = excluded.created_at",
            &[&run_id, &evaluation.metrics, &evaluation.created_at],
        )
        .map_err(|e| self.err("record an evaluation", &e))?;
        Ok(())
    }
}

impl RunWriter for PgStore {
    /// Creates a RUNNING run owned by this process, with its lease, and starts the heartbeat
    /// that renews it.
    fn insert_run(&self, run: &NewRun) -> Result<(), StoreError> {
        backend::check_new_run(run).map_err(PgError::from)?;
        let tools = canonical(&run.tools)?;
        let limits = run.limits.as_ref().map(canonical).transpose()?;
        let me = Owner::current();
        let now = self.now();
        let created_at = now.to_string();
        let lease = self.shared.leases.expiry(now);
        let started_at = run.started_at.to_string();
        let pid = i64::from(me.pid);
        let inserted = self.write("create a run", |tx| {
            let params: [&(dyn ToSql + Sync); 13] = [
                &run.run_id,
                &run.session_id,
                &run.question,
                &started_at,
                &tools,
                &limits,
                &me.host,
                &pid,
                &me.token,
                &lease,
                &created_at,
                &run.resumed_from,
                &run.replay_of,
            ];
            match tx.execute(
                "INSERT INTO diagnosis_run (run_id, session_id, question, status, started_at, \
                 tools, limits, owner_host, owner_pid, owner_token, lease_expires_at, \
                 created_at, resumed_from, replay_of) \
                 VALUES ($1, $2, $3, 'RUNNING', $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                &params,
            ) {
                Ok(_) => Ok(()),
                Err(e) if PgError::is_unique_violation(&e) => {
                    Err(RecordError::DuplicateRun(run.run_id.clone()).into())
                }
                Err(e) => Err(self.err("create a run", &e)),
            }
        });
        inserted?;
        self.start_heartbeat();
        Ok(())
    }

    /// Holds an event until the next flush or finish of its run (its row is built now).
    fn hold_event(&self, run_id: &str, event: &Event<String>) -> Result<(), StoreError> {
        self.shared.held.hold(run_id, EventRow::of(event))
    }

    /// Commits the held events of `run_id`; returns the refused ones' errors.
    fn flush_events(&self, run_id: &str) -> Vec<StoreError> {
        self.shared
            .held
            .flush(run_id, |rows| self.record_events(run_id, rows))
    }

    /// Inserts one orchestration event of a RUNNING run.
    fn record_event(&self, run_id: &str, event: &Event<String>) -> Result<(), StoreError> {
        let row = EventRow::of(event)?;
        self.record_events(run_id, std::slice::from_ref(&row))
            .into_iter()
            .next()
            .map_or(Ok(()), |e| Err(e.into()))
    }

    /// Inserts one agent step (a model call) of a RUNNING run.
    fn record_agent_step(&self, run_id: &str, step: &AgentStepRecord) -> Result<(), StoreError> {
        Ok(self.write("record an agent step", |tx| {
            self.running(tx, run_id)?;
            self.insert_step(tx, run_id, step)
        })?)
    }

    /// Inserts one model exchange of a RUNNING run.
    fn record_exchange(&self, run_id: &str, exchange: &ModelExchange) -> Result<(), StoreError> {
        let row = ExchangeRow::of(exchange)?;
        Ok(self.write("record a model exchange", |tx| {
            self.running(tx, run_id)?;
            self.insert_exchange(tx, run_id, &row)
        })?)
    }

    /// One model call's step and exchange in one transaction. Each row stands alone, as if
    /// written by itself (a refused one does not undo the other; a run that is not RUNNING
    /// refuses each with its own error); returns the errors, step first.
    fn record_model_call(
        &self,
        run_id: &str,
        step: &AgentStepRecord,
        exchange: &ModelExchange,
    ) -> Vec<StoreError> {
        // An exchange that cannot be serialized is refused alone; the step is still written.
        let (row, row_error) = match ExchangeRow::of(exchange) {
            Ok(row) => (Some(row), None),
            Err(e) => (None, Some(e)),
        };
        let written = self.write_rows("record a model call", |tx| {
            if let Err(refusal) = self.running(tx, run_id) {
                let Some(again) = Self::refusal_again(&refusal) else {
                    return Err(refusal);
                };
                return Ok((Some(refusal), Some(again)));
            }
            let step_error = self.insert_step(tx, run_id, step).err();
            let exchange_error = match &row {
                Some(row) => self.insert_exchange(tx, run_id, row).err(),
                None => None,
            };
            Ok((step_error, exchange_error))
        });
        match written {
            Ok((step_error, exchange_error)) => step_error
                .into_iter()
                .chain(row_error.or(exchange_error))
                .map(StoreError::from)
                .collect(),
            Err(e) => vec![e.into()],
        }
    }

    /// Inserts one tool invocation into the RUNNING run it names.
    fn record_invocation(&self, invocation: &ToolInvocation) -> Result<(), StoreError> {
        let run_id = invocation.run_id.as_str();
        Ok(self.write("record a tool invocation", |tx| {
            self.running(tx, run_id)?;
            self.insert_invocation(tx, invocation)
        })?)
    }

    /// The run's finish in one transaction with its held events and, for a SUCCESS, its
    /// evaluation (`backend::FinishPlan::run` says in what order and what a refusal means,
    /// as for the SQLite store).
    fn finish_run(&self, run_id: &str, finish: Finish<'_>) -> Result<FinishReport, FinishError> {
        let plan = FinishPlan::new(&finish, self.now());
        let params = FinishParams::of(plan.row.clone())?;
        self.shared.held.finish(run_id, |rows| {
            self.write_rows("finish a run", |tx| {
                let mut statements = Finishing {
                    store: self,
                    tx,
                    params: &params,
                };
                plan.run(run_id, rows, &mut statements)
            })
        })
    }

    /// Stores (or replaces) the evaluation of a SUCCESS run; any other run is refused.
    fn record_evaluation(&self, run_id: &str, metrics: &Value) -> Result<(), StoreError> {
        let evaluation = EvaluationText::new(metrics, self.now());
        Ok(self.write("record an evaluation", |tx| {
            self.insert_evaluation(tx, run_id, &evaluation)
        })?)
    }

    /// Marks FAILED (`interrupted`) every RUNNING run whose owner is gone
    /// (`diag_owner::is_gone`), keeping its partial trace. Returns how many it marked.
    fn sweep_interrupted(&self) -> Result<usize, StoreError> {
        let owners = backend::running_owners(self)?;
        let now = self.now();
        let dead = diag_owner::gone_runs(owners, now);
        if dead.is_empty() {
            return Ok(0);
        }
        let params = FinishParams::of(FinishRow::interrupted(now))?;
        // The status guard makes a concurrent sweep or a late finish harmless.
        Ok(self.write("mark interrupted runs FAILED", |tx| {
            self.update_finished(tx, &dead, &params, "mark interrupted runs FAILED")
        })?)
    }
}
