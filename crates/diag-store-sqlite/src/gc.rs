//! Retention: deleting old runs and giving their space back.
//!
//! A run is deleted with everything it owns through the `ON DELETE CASCADE` foreign keys; a
//! tool catalog and a request blob no run refers to any more go with it (blobs in the same
//! batch transaction as the runs that released them). Deletion runs in batches, each its
//! own short write transaction, so a large gc never holds the write lock long enough to make
//! a concurrent `diag ask` time out. Then `PRAGMA incremental_vacuum` moves the freed pages
//! to the end of the file and a `wal_checkpoint(TRUNCATE)` copies everything back and cuts
//! both the database and the WAL to size.
//!
//! RUNNING runs are never deleted: the sweep first marks the runs of dead processes FAILED,
//! and what is still RUNNING after that belongs to a live process.

use std::time::Duration;

use rusqlite::params;

use super::records::{SqliteGcReport, StoredRun};
use super::{SqliteError, SqliteStore};
use diag_store::backend::Retention;
use diag_store::{GcReport, RunMaintenance, RunWriter, StoreError};

/// Runs deleted per write transaction.
const BATCH: usize = 256;

/// Deletes the request blobs no exchange refers to any more (their reference count, kept by
/// the triggers of `model_exchange`, is zero; the partial index `blob_ref_unused` lists
/// them), inside the caller's transaction. `blob_ref` rows go with their blob (cascade).
fn delete_unused_blobs(tx: &rusqlite::Connection) -> rusqlite::Result<usize> {
    tx.prepare_cached(
        "DELETE FROM blob WHERE id IN \
         (SELECT id FROM blob_ref INDEXED BY blob_ref_unused WHERE refs <= 0)",
    )?
    .execute([])
}

impl SqliteStore {
    /// Deletes the finished runs the retention rules name (`backend::Retention`: stored more
    /// than `older_than` ago, or not among the `keep` most recently created; with neither,
    /// nothing), then reclaims the space. Returns what it did, with whether the final
    /// checkpoint completed (the port's `gc` is this).
    pub fn collect(
        &self,
        older_than: Option<Duration>,
        keep: Option<usize>,
    ) -> Result<SqliteGcReport, StoreError> {
        let bytes_before = self.file_bytes();
        self.sweep_interrupted()?;
        let doomed = self.doomed(older_than, keep)?;
        let mut runs_deleted = 0u64;
        for batch in doomed.chunks(BATCH) {
            runs_deleted += self.write("delete old runs", |tx| {
                let mut stmt = tx
                    .prepare_cached(
                        "DELETE FROM diagnosis_run WHERE run_id = ?1 AND status <> 'RUNNING'",
                    )
                    .map_err(|e| self.err("delete old runs", e))?;
                let mut n = 0u64;
                for run_id in batch {
                    n += stmt
                        .execute([run_id])
                        .map_err(|e| self.err("delete old runs", e))?
                        as u64;
                }
                delete_unused_blobs(tx).map_err(|e| self.err("delete old runs", e))?;
                Ok(n)
            })?;
        }
        self.write("delete unused tool catalogs and blobs", |tx| {
            let fail = |e| self.err("delete unused tool catalogs and blobs", e);
            tx.execute(
                "DELETE FROM tool_catalog WHERE NOT EXISTS \
                 (SELECT 1 FROM diagnosis_run WHERE tools_sha256 = tool_catalog.sha256)",
                [],
            )
            .map_err(fail)?;
            // Also the blobs of an exchange the store refused after storing them.
            delete_unused_blobs(tx).map_err(fail)
        })?;
        self.reclaim()?;
        let checkpoint_complete = self.checkpoint()?;
        Ok(SqliteGcReport {
            runs_deleted,
            bytes_before,
            bytes_after: self.file_bytes(),
            checkpoint_complete,
        })
    }

    /// The finished runs the retention rules name, oldest created first.
    fn doomed(
        &self,
        older_than: Option<Duration>,
        keep: Option<usize>,
    ) -> Result<Vec<String>, StoreError> {
        let Some(Retention { cutoff, keep }) = Retention::new(self.now(), older_than, keep) else {
            return Ok(Vec::new());
        };
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT run_id FROM diagnosis_run WHERE status <> 'RUNNING' AND (
                 (?1 IS NOT NULL AND created_at < ?1)
                 OR (?2 IS NOT NULL AND rowid NOT IN (
                     SELECT rowid FROM diagnosis_run ORDER BY rowid DESC LIMIT ?2)))
                 ORDER BY rowid",
            )
            .map_err(|e| self.err("select runs to delete", e))?;
        let ids = stmt
            .query_map(params![cutoff, keep], |r| r.get(0))
            .and_then(|rows| rows.collect::<Result<Vec<String>, _>>())
            .map_err(|e| self.err("select runs to delete", e))?;
        Ok(ids)
    }

    /// Returns every free page to the file system (incremental vacuum; a no-op on a file
    /// created without auto_vacuum) and refreshes the query planner's statistics.
    fn reclaim(&self) -> Result<(), SqliteError> {
        if self.is_read_only() {
            return Err(SqliteError::ReadOnly {
                path: self.path().to_path_buf(),
                op: "reclaim free space",
            });
        }
        let conn = self.lock();
        let fail = |e| self.err("reclaim free space", e);
        // incremental_vacuum frees one page per step, so it is stepped to the end.
        let mut stmt = conn.prepare("PRAGMA incremental_vacuum").map_err(fail)?;
        let mut rows = stmt.query([]).map_err(fail)?;
        while rows.next().map_err(fail)?.is_some() {}
        drop(rows);
        drop(stmt);
        conn.execute_batch("PRAGMA optimize").map_err(fail)
    }
}

impl RunMaintenance for SqliteStore {
    fn import_run(&self, run: &StoredRun) -> Result<bool, StoreError> {
        self.import(run)
    }

    fn gc(
        &self,
        older_than: Option<Duration>,
        keep: Option<usize>,
    ) -> Result<GcReport, StoreError> {
        let r = self.collect(older_than, keep)?;
        Ok(GcReport {
            runs_deleted: r.runs_deleted,
            bytes_before: r.bytes_before,
            bytes_after: r.bytes_after,
        })
    }

    fn gc_preview(
        &self,
        older_than: Option<Duration>,
        keep: Option<usize>,
    ) -> Result<Vec<String>, StoreError> {
        self.doomed(older_than, keep)
    }
}
