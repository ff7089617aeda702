//! Retention: `diag gc` on a PostgreSQL store deletes finished runs older than a cutoff or
//! beyond the newest N, with everything they own (foreign keys `ON DELETE CASCADE`), in
//! batches; RUNNING runs are never deleted. The server reclaims the space (autovacuum).

use std::time::Duration;

use super::error::PgError;
use super::{wait, PgStore};

/// What `gc` did: runs deleted, and the database's size before and after
/// (`pg_database_size`; space is returned to the server by vacuum, so the size may not fall
/// at once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgGcReport {
    pub runs_deleted: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

const BATCH: i64 = 500;

impl PgStore {
    fn database_bytes(&self) -> Result<u64, PgError> {
        let mut client = self.lock();
        let row = wait(client.query_one("SELECT pg_database_size(current_database())", &[]));
        let row = client
            .note(row)
            .map_err(|e| self.err("read the database size", &e))?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    /// Deletes finished runs created before `now - older_than` and/or beyond the newest `keep`.
    pub fn gc(
        &self,
        older_than: Option<Duration>,
        keep: Option<usize>,
    ) -> Result<PgGcReport, PgError> {
        let bytes_before = self.database_bytes()?;
        self.sweep_interrupted()?;
        let cutoff = older_than.map(|age| {
            let age = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
            crate::clock::Timestamp::from_unix_ms(self.now().unix_ms().saturating_sub(age))
                .to_string()
        });
        let keep = keep.map(|k| i64::try_from(k).unwrap_or(i64::MAX));
        let mut runs_deleted = 0u64;
        if cutoff.is_some() || keep.is_some() {
            loop {
                let n = self.write("delete old runs", |tx| {
                    tx.execute(
                        "DELETE FROM diagnosis_run WHERE run_id IN (
                             SELECT run_id FROM diagnosis_run WHERE status <> 'RUNNING' AND (
                                 ($1::text IS NOT NULL AND created_at < $1)
                                 OR ($2::bigint IS NOT NULL AND created_seq NOT IN (
                                     SELECT created_seq FROM diagnosis_run
                                     ORDER BY created_seq DESC LIMIT $2)))
                             LIMIT $3)",
                        &[&cutoff, &keep, &BATCH],
                    )
                    .map_err(|e| self.err("delete old runs", &e))
                })?;
                runs_deleted += n;
                if n < BATCH as u64 {
                    break;
                }
            }
        }
        Ok(PgGcReport {
            runs_deleted,
            bytes_before,
            bytes_after: self.database_bytes()?,
        })
    }
}
