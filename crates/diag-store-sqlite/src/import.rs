//! A whole run written at once, as another store recorded it (`diag store copy`): the run is
//! inserted RUNNING, its trace rows go through the same inserts the recorder uses, and the
//! finish statement closes it with the original's outcome, all in one transaction. Counts and
//! the node path are recomputed from the rows exactly as when the run was first finished, so
//! the copy reads back, and exports, byte for byte as the original.

use rusqlite::params;

use super::packed::Packed;
use super::records::{RunStatus, StoredRun};
use super::write::{EventRow, ExchangeRow, FINISH};
use super::{SqliteError, SqliteStore};
use crate::hash::sha256_hex;
use crate::protocol::retry::canonical_json;
use diag_core::store::{RunReader, StoreError};

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, SqliteError> {
    let value = serde_json::to_value(value).map_err(|e| SqliteError::Invalid(e.to_string()))?;
    Ok(canonical_json(&value))
}

impl SqliteStore {
    /// Writes `stored`, a finished run, unless a run of its id is already here. Returns
    /// whether it was written. A RUNNING run is refused: only a finished run is final. (The
    /// port's `import_run`.)
    pub(crate) fn import(&self, stored: &StoredRun) -> Result<bool, StoreError> {
        let run = &stored.run;
        if run.status == RunStatus::Running {
            return Err(SqliteError::Invalid(format!(
                "run {} is RUNNING; only a finished run is copied",
                run.run_id
            ))
            .into());
        }
        if self.get_run(&run.run_id)?.is_some() {
            return Ok(false);
        }
        let catalog = to_json(&run.tools)?;
        let catalog_sha = sha256_hex(catalog.as_bytes());
        let limits = run.limits.as_ref().map(to_json).transpose()?;
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
        let invocations = stored
            .invocations
            .iter()
            .map(|i| Ok((to_json(&i.arguments)?, Packed::of(to_json(&i.output)?))))
            .collect::<Result<Vec<_>, SqliteError>>()?;
        let self_evaluation = run
            .self_evaluation
            .as_ref()
            .map(to_json)
            .transpose()?
            .map(|e| {
                Packed::with_dictionary(e, run.answer.as_deref().unwrap_or_default().as_bytes())
            });
        let answer = run.answer.clone().map(Packed::of);
        let evaluation = stored
            .evaluation
            .as_ref()
            .map(|e| (canonical_json(&e.metrics), e.created_at.to_string()));
        let fail = |e| self.err("copy a run", e);
        Ok(self.write("copy a run", |tx| {
            tx.prepare_cached(
                "INSERT INTO tool_catalog (sha256, catalog) VALUES (?1, ?2) \
                 ON CONFLICT (sha256) DO NOTHING",
            )
            .and_then(|mut s| s.execute(params![catalog_sha, catalog]))
            .map_err(fail)?;
            tx.prepare_cached(
                "INSERT INTO diagnosis_run (run_id, session_id, question, status, started_at, \
                 tools_sha256, owner_pid, created_at, limits, resumed_from) \
                 VALUES (?1, ?2, ?3, 'RUNNING', ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run.run_id,
                    run.session_id,
                    run.question,
                    run.started_at.to_string(),
                    catalog_sha,
                    run.owner_pid,
                    run.created_at.to_string(),
                    limits,
                    run.resumed_from,
                ])
            })
            .map_err(fail)?;
            let rid = run.run_id.as_str();
            if let Some(e) = self.insert_events(tx, rid, &events).into_iter().next() {
                return Err(e);
            }
            for step in &stored.steps {
                self.insert_step(tx, rid, &step.step)?;
            }
            for (stored, row) in stored.exchanges.iter().zip(&exchanges) {
                self.insert_exchange(tx, rid, &stored.exchange, row)?;
            }
            for (invocation, (arguments, output)) in stored.invocations.iter().zip(&invocations) {
                self.insert_invocation(tx, invocation, arguments, output)?;
            }
            tx.prepare_cached(FINISH)
                .and_then(|mut s| {
                    s.execute(params![
                        rid,
                        run.status.as_str(),
                        run.failure,
                        answer.as_ref().map(Packed::text),
                        run.finished_at.map(|t| t.to_string()),
                        run.duration_ms
                            .map(|d| i64::try_from(d).unwrap_or(i64::MAX)),
                        run.degraded,
                        run.effective_verdict.map(|v| v.as_str()),
                        run.fallback_kind.map(|k| k.as_str()),
                        self_evaluation.as_ref().map(Packed::text),
                        run.reuse.as_ref().map(|r| r.model_calls),
                        run.reuse.as_ref().map(|r| r.tool_calls),
                        run.reuse.as_ref().and_then(|r| r.stopped.as_deref()),
                        answer.as_ref().and_then(Packed::zstd),
                        self_evaluation.as_ref().and_then(Packed::zstd),
                    ])
                })
                .map_err(fail)?;
            if let Some((metrics, created_at)) = &evaluation {
                self.insert_evaluation(tx, rid, metrics, created_at)?;
            }
            Ok(true)
        })?)
    }
}
