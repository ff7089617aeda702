//! Maintenance ([`RunMaintenance`]): runs copied in from another store, and retention.
//!
//! A whole run written at once, as another store recorded it (`diag store copy`): inserted
//! RUNNING, its trace rows through the recorder's own inserts, then closed by the finish
//! statement with the original's outcome, and its creation time and evaluation kept, all in
//! one transaction. The copy reads back, and exports, byte for byte as the original.
//!
//! Retention: `diag gc` on a PostgreSQL store deletes finished runs older than a cutoff or
//! beyond the newest N, with everything they own (foreign keys `ON DELETE CASCADE`), in
//! batches; RUNNING runs are never deleted. The server reclaims the space (autovacuum), so
//! the database's size (`pg_database_size`) reported before and after may not fall at once.

use std::time::Duration;

use tokio_postgres::types::ToSql;

use super::error::PgError;
use super::records::StoredRun;
use super::write::{EventRow, ExchangeRow, FinishParams};
use super::{wait, PgStore};
use diag_store::backend::{self, CopiedRun, Retention};
use diag_store::{GcReport, RunMaintenance, RunWriter, StoreError};

const BATCH: i64 = 500;

/// The finished runs the retention rules name (`$1`: the cutoff, `$2`: how many of the most
/// recently created to keep): what `gc` deletes and `gc_preview` lists, written once so the
/// two cannot differ (a macro, so that each statement stays one `&'static str`).
macro_rules! doomed {
    () => {
        "status <> 'RUNNING' AND ( \
         ($1::text IS NOT NULL AND created_at < $1) \
         OR ($2::bigint IS NOT NULL AND created_seq NOT IN ( \
             SELECT created_seq FROM diagnosis_run ORDER BY created_seq DESC LIMIT $2)))"
    };
}

impl PgStore {
    fn database_bytes(&self) -> Result<u64, PgError> {
        let mut client = self.lock();
        let row = wait(client.query_one("SELECT pg_database_size(current_database())", &[]));
        let row = client
            .note(row)
            .map_err(|e| self.err("read the database size", &e))?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }
}

impl RunMaintenance for PgStore {
    /// Writes `stored`, a finished run, unless a run of its id is already here. Returns
    /// whether it was written.
    fn import_run(&self, stored: &StoredRun) -> Result<bool, StoreError> {
        let run = &stored.run;
        backend::check_importable(run).map_err(PgError::from)?;
        let copy = CopiedRun::of(stored, EventRow::of, ExchangeRow::of)?;
        let finish = FinishParams::of(copy.finish)?;
        let pid = i64::from(run.owner_pid);
        let started_at = run.started_at.to_string();
        let created_at = run.created_at.to_string();
        let copied = "copied";
        Ok(self.write("copy a run", |tx| {
            let params: [&(dyn ToSql + Sync); 12] = [
                &run.run_id,
                &run.session_id,
                &run.question,
                &started_at,
                &copy.tools,
                &copy.limits,
                &copied,
                &pid,
                &created_at,
                &created_at,
                &run.resumed_from,
                &run.replay_of,
            ];
            let inserted = tx
                .execute(
                    "INSERT INTO diagnosis_run (run_id, session_id, question, status, started_at, \
                 tools, limits, owner_host, owner_pid, lease_expires_at, created_at, resumed_from, \
                 replay_of) \
                 VALUES ($1, $2, $3, 'RUNNING', $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                 ON CONFLICT (run_id) DO NOTHING",
                    &params,
                )
                .map_err(|e| self.err("copy a run", &e))?;
            if inserted == 0 {
                return Ok(false);
            }
            let rid = run.run_id.as_str();
            if let Some(e) = self.insert_events(tx, rid, &copy.events).into_iter().next() {
                return Err(e);
            }
            for step in &stored.steps {
                self.insert_step(tx, rid, &step.step)?;
            }
            for row in &copy.exchanges {
                self.insert_exchange(tx, rid, row)?;
            }
            for invocation in &stored.invocations {
                self.insert_invocation(tx, invocation)?;
            }
            self.update_finished(tx, &[rid], &finish, "copy a run")?;
            if let Some(e) = &copy.evaluation {
                tx.execute(
                    "INSERT INTO evaluation (run_id, metrics, created_at) VALUES ($1, $2, $3)",
                    &[&rid, &e.metrics, &e.created_at],
                )
                .map_err(|e| self.err("copy a run", &e))?;
            }
            Ok(true)
        })?)
    }

    /// Deletes the finished runs the retention rules name (`backend::Retention`: created
    /// before `now - older_than`, or beyond the newest `keep`).
    fn gc(
        &self,
        older_than: Option<Duration>,
        keep: Option<usize>,
    ) -> Result<GcReport, StoreError> {
        let bytes_before = self.database_bytes()?;
        self.sweep_interrupted()?;
        let mut runs_deleted = 0u64;
        if let Some(Retention { cutoff, keep }) = Retention::new(self.now(), older_than, keep) {
            let delete = concat!(
                "DELETE FROM diagnosis_run WHERE run_id IN (SELECT run_id FROM diagnosis_run \
                 WHERE ",
                doomed!(),
                " LIMIT $3)"
            );
            loop {
                let n = self.write("delete old runs", |tx| {
                    tx.execute(delete, &[&cutoff, &keep, &BATCH])
                        .map_err(|e| self.err("delete old runs", &e))
                })?;
                runs_deleted += n;
                if n < BATCH as u64 {
                    break;
                }
            }
        }
        Ok(GcReport {
            runs_deleted,
            bytes_before,
            bytes_after: self.database_bytes()?,
        })
    }

    /// The runs [`Self::gc`]'s statement would delete, oldest created first, read only.
    fn gc_preview(
        &self,
        older_than: Option<Duration>,
        keep: Option<usize>,
    ) -> Result<Vec<String>, StoreError> {
        let Some(Retention { cutoff, keep }) = Retention::new(self.now(), older_than, keep) else {
            return Ok(Vec::new());
        };
        let rows = self.rows(
            "select runs to delete",
            concat!(
                "SELECT run_id FROM diagnosis_run WHERE ",
                doomed!(),
                " ORDER BY created_seq"
            ),
            &[&cutoff, &keep],
        )?;
        Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
    }
}
