//! A whole run written at once, as another store recorded it (`diag store copy`): inserted
//! RUNNING, its trace rows through the recorder's own inserts, then closed by the finish
//! statement with the original's outcome, and its creation time and evaluation kept, all in
//! one transaction. The copy reads back, and exports, byte for byte as the original.

use tokio_postgres::types::ToSql;

use super::error::PgError;
use super::records::{RunStatus, StoredRun};
use super::write::{canonical, EventRow, ExchangeRow, FINISH};
use super::PgStore;
use crate::protocol::retry::canonical_json;

impl PgStore {
    /// Writes `stored`, a finished run, unless a run of its id is already here. Returns
    /// whether it was written.
    pub fn import_run(&self, stored: &StoredRun) -> Result<bool, PgError> {
        let run = &stored.run;
        if run.status == RunStatus::Running {
            return Err(PgError::Invalid(format!(
                "run {} is RUNNING; only a finished run is copied",
                run.run_id
            )));
        }
        let tools = canonical(&run.tools)?;
        let limits = run.limits.as_ref().map(canonical).transpose()?;
        let events = stored
            .events
            .iter()
            .map(EventRow::of)
            .collect::<Result<Vec<_>, _>>()?;
        let exchanges = stored
            .exchanges
            .iter()
            .map(|x| ExchangeRow::of(&x.exchange))
            .collect::<Result<Vec<_>, _>>()?;
        let self_evaluation = run.self_evaluation.as_ref().map(canonical).transpose()?;
        let reuse = run.reuse.as_ref().map(canonical).transpose()?;
        let pid = i64::from(run.owner_pid);
        let started_at = run.started_at.to_string();
        let created_at = run.created_at.to_string();
        let finished_at = run.finished_at.map(|t| t.to_string());
        let duration = run
            .duration_ms
            .map(|d| i64::try_from(d).unwrap_or(i64::MAX));
        let verdict = run.effective_verdict.map(|v| v.as_str());
        let fallback = run.fallback_kind.map(|k| k.as_str());
        let status = run.status.as_str();
        let copied = "copied";
        self.write("copy a run", |tx| {
            let params: [&(dyn ToSql + Sync); 11] = [
                &run.run_id,
                &run.session_id,
                &run.question,
                &started_at,
                &tools,
                &limits,
                &copied,
                &pid,
                &created_at,
                &created_at,
                &run.resumed_from,
            ];
            let inserted = tx
                .execute(
                    "INSERT INTO diagnosis_run (run_id, session_id, question, status, started_at, \
                 tools, limits, owner_host, owner_pid, lease_expires_at, created_at, resumed_from) \
                 VALUES ($1, $2, $3, 'RUNNING', $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (run_id) DO NOTHING",
                    &params,
                )
                .map_err(|e| self.err("copy a run", &e))?;
            if inserted == 0 {
                return Ok(false);
            }
            let rid = run.run_id.as_str();
            if let Some(e) = self.insert_events(tx, rid, &events).into_iter().next() {
                return Err(e);
            }
            for step in &stored.steps {
                self.insert_step(tx, rid, &step.step)?;
            }
            for row in &exchanges {
                self.insert_exchange(tx, rid, row)?;
            }
            for invocation in &stored.invocations {
                self.insert_invocation(tx, invocation)?;
            }
            tx.execute(
                FINISH,
                &[
                    &rid,
                    &status,
                    &run.failure,
                    &run.answer,
                    &finished_at,
                    &duration,
                    &run.degraded,
                    &verdict,
                    &fallback,
                    &self_evaluation,
                    &reuse,
                ],
            )
            .map_err(|e| self.err("copy a run", &e))?;
            if let Some(e) = &stored.evaluation {
                let metrics = canonical_json(&e.metrics);
                let at = e.created_at.to_string();
                tx.execute(
                    "INSERT INTO evaluation (run_id, metrics, created_at) VALUES ($1, $2, $3)",
                    &[&rid, &metrics, &at],
                )
                .map_err(|e| self.err("copy a run", &e))?;
            }
            Ok(true)
        })
    }
}
