//! This store as the shared rules drive it (`diag_store::sql`): its statements in SQLite's
//! dialect, its `BEGIN IMMEDIATE` write transaction, and rows read through rusqlite.

use rusqlite::ffi;
use rusqlite::types::{Null, ToSqlOutput, ValueRef};
use rusqlite::{params_from_iter, Connection, ToSql};

use super::{SqliteError, SqliteStore};
use diag_graph::clock::Timestamp;
use diag_store::sql::{Cell, Driver, Param, Row, Statements, Tx};
use diag_store::StoreError;

/// The shared rules' statements in SQLite's dialect.
pub(crate) static STATEMENTS: Statements = Statements {
    // Writes hold the database's one write lock (`BEGIN IMMEDIATE`): nothing to lock here.
    run_status: "SELECT status FROM diagnosis_run WHERE run_id = ?1",
    run_exists: "SELECT 1 FROM diagnosis_run WHERE run_id = ?1",
    held_claim: "SELECT state, coalesce(owner_host = ?2 AND owner_pid = ?3 \
                 AND owner_token IS ?4, 0), runs FROM alert_queue WHERE id = ?1",
    set_claim_runs: "UPDATE alert_queue SET runs = ?2, updated_at = ?3 WHERE id = ?1",
    claim_done: "UPDATE alert_queue SET state = 'done', updated_at = ?2 WHERE id = ?1",
    claim_failed: "UPDATE alert_queue SET state = 'failed', failure = ?2, updated_at = ?3 \
                   WHERE id = ?1",
    claim_released: "UPDATE alert_queue SET state = 'queued', \
                     attempts = max(attempts - 1, 0), owner_host = NULL, owner_pid = NULL, \
                     owner_token = NULL, lease_expires_at = NULL, updated_at = ?2 WHERE id = ?1",
    copy_run_alerts: "INSERT INTO run_alert (run_id, identity, source, group_key, alerts, \
                      recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                      ON CONFLICT (run_id) DO NOTHING",
    copy_notification: "INSERT INTO alert_queue (identity, state, status, receiver, group_key, \
                        alerts, received_at, attempts, runs, failure, updated_at) \
                        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
                        ON CONFLICT (identity) DO NOTHING",
    record_run_endpoint: "INSERT INTO run_endpoint (run_id, base_url, model, form, \
                          context_tokens, learned_at, refuses_temperature, refuses_seed) \
                          VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    running_owners: "SELECT run_id, owner_host, owner_pid, owner_token, lease_expires_at \
                     FROM diagnosis_run INDEXED BY diagnosis_run_running \
                     WHERE status = 'RUNNING'",
    // The parameter not filtered on is still bound, and tested for NULL.
    list_runs: [
        "r.session_id = ?1 AND r.status = ?2",
        "r.session_id = ?1 AND ?2 IS NULL",
        "?1 IS NULL AND r.status = ?2",
        "?1 IS NULL AND ?2 IS NULL",
    ],
};

/// One parameter as rusqlite binds it.
struct Bound<'a>(Param<'a>);

impl ToSql for Bound<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self.0 {
            Param::Int(n) => ToSqlOutput::from(n),
            Param::Bool(b) => ToSqlOutput::from(b),
            Param::Text(s) => ToSqlOutput::from(s),
            Param::NullInt | Param::NullBool | Param::NullText => ToSqlOutput::from(Null),
        })
    }
}

fn bound<'a>(params: &'a [Param<'a>]) -> impl Iterator<Item = Bound<'a>> + 'a {
    params.iter().map(|p| Bound(*p))
}

/// A connection in (or, for a read, outside) a transaction of this store.
struct SqliteTx<'a> {
    store: &'a SqliteStore,
    conn: &'a Connection,
    op: &'static str,
}

impl SqliteTx<'_> {
    fn err(&self, e: rusqlite::Error) -> StoreError {
        self.store.err(self.op, e).into()
    }
}

impl Tx for SqliteTx<'_> {
    fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        let changed = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(params_from_iter(bound(params))))
            .map_err(|e| self.err(e))?;
        Ok(u64::try_from(changed).unwrap_or(u64::MAX))
    }

    fn insert(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<bool, StoreError> {
        match self
            .conn
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(params_from_iter(bound(params))))
        {
            Ok(_) => Ok(true),
            Err(e)
                if SqliteError::is_constraint(&e, ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
                    || SqliteError::is_constraint(&e, ffi::SQLITE_CONSTRAINT_UNIQUE) =>
            {
                Ok(false)
            }
            Err(e) => Err(self.err(e)),
        }
    }

    fn query(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        let mut statement = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let columns = statement.column_count();
        let rows = statement
            .query_map(params_from_iter(bound(params)), |r| {
                (0..columns)
                    .map(|at| {
                        Ok(match r.get_ref(at)? {
                            ValueRef::Null => Cell::Null,
                            ValueRef::Integer(n) => Cell::Int(n),
                            ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into()),
                            other => {
                                let found = other.data_type();
                                return Err(rusqlite::Error::InvalidColumnType(
                                    at,
                                    String::new(),
                                    found,
                                ));
                            }
                        })
                    })
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map(Row)
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>());
        rows.map_err(|e| self.err(e))
    }
}

impl Driver for SqliteStore {
    fn statements(&self) -> &'static Statements {
        &STATEMENTS
    }

    fn now(&self) -> Timestamp {
        SqliteStore::now(self)
    }

    fn write<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.write_as(op, |conn| {
            f(&mut SqliteTx {
                store: self,
                conn,
                op,
            })
        })
    }

    fn read<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let conn = self.lock();
        f(&mut SqliteTx {
            store: self,
            conn: &conn,
            op,
        })
    }
}
