//! A whole run written at once, as another store recorded it (`diag store copy`): the run is
//! inserted RUNNING, its trace rows go through the same inserts the recorder uses, and the
//! finish statement closes it with the original's outcome, all in one transaction. Counts and
//! the node path are recomputed from the rows exactly as when the run was first finished, so
//! the copy reads back, and exports, byte for byte as the original.

use rusqlite::params;

use super::packed::Packed;
use super::records::StoredRun;
use super::write::{canonical, EventRow, ExchangeRow, FinishParams};
use super::{SqliteError, SqliteStore};
use diag_records::hash::sha256_hex;
use diag_store::backend::{self, CopiedRun};
use diag_store::{RunReader, StoreError};

impl SqliteStore {
    /// Writes `stored`, a finished run, unless a run of its id is already here. Returns
    /// whether it was written. A RUNNING run is refused: only a finished run is final. (The
    /// port's `import_run`.)
    pub(crate) fn import(&self, stored: &StoredRun) -> Result<bool, StoreError> {
        let run = &stored.run;
        backend::check_importable(run).map_err(SqliteError::from)?;
        if self.get_run(&run.run_id)?.is_some() {
            return Ok(false);
        }
        let copy = CopiedRun::of(stored, EventRow::of, ExchangeRow::of)?;
        let catalog_sha = sha256_hex(copy.tools.as_bytes());
        let invocations = stored
            .invocations
            .iter()
            .map(|i| Ok((canonical(&i.arguments)?, Packed::of(canonical(&i.output)?))))
            .collect::<Result<Vec<_>, SqliteError>>()?;
        let finish = FinishParams::of(copy.finish);
        let fail = |e| self.err("copy a run", e);
        Ok(self.write("copy a run", |tx| {
            self.insert_catalog(tx, &catalog_sha, &copy.tools, "copy a run")?;
            tx.prepare_cached(
                "INSERT INTO diagnosis_run (run_id, session_id, question, status, started_at, \
                 tools_sha256, owner_pid, created_at, limits, resumed_from, replay_of) \
                 VALUES (?1, ?2, ?3, 'RUNNING', ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
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
                    copy.limits,
                    run.resumed_from,
                    run.replay_of,
                ])
            })
            .map_err(fail)?;
            let rid = run.run_id.as_str();
            if let Some(e) = self.insert_events(tx, rid, &copy.events).into_iter().next() {
                return Err(e);
            }
            for step in &stored.steps {
                self.insert_step(tx, rid, &step.step)?;
            }
            for (stored, row) in stored.exchanges.iter().zip(&copy.exchanges) {
                self.insert_exchange(tx, rid, &stored.exchange, row)?;
            }
            for (invocation, (arguments, output)) in stored.invocations.iter().zip(&invocations) {
                self.insert_invocation(tx, invocation, arguments, output)?;
            }
            self.update_finished(tx, &[rid], &finish, "copy a run")?;
            if let Some(evaluation) = &copy.evaluation {
                self.insert_evaluation(tx, rid, evaluation)?;
            }
            Ok(true)
        })?)
    }
}
