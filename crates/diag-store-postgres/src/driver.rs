//! This store as the shared rules drive it (`diag_store::sql`): its statements in
//! PostgreSQL's dialect (rows locked where a concurrent writer could change them), its
//! transactions, and rows read through tokio-postgres.

use tokio_postgres::types::{ToSql, Type};

use super::error::PgError;
use super::tx::Tx as PgTx;
use super::PgStore;
use diag_graph::clock::Timestamp;
use diag_store::sql::{Cell, Driver, Param, Row, Statements, Tx};
use diag_store::{RecordError, StoreError};

/// The shared rules' statements in PostgreSQL's dialect.
pub(crate) static STATEMENTS: Statements = Statements {
    // Locked against a concurrent finish until the transaction ends.
    run_status: "SELECT status FROM diagnosis_run WHERE run_id = $1 FOR SHARE",
    run_exists: "SELECT 1 FROM diagnosis_run WHERE run_id = $1",
    held_claim: "SELECT state, CASE WHEN owner_host = $2 AND owner_pid = $3 \
                 AND owner_token IS NOT DISTINCT FROM $4 THEN 1::bigint ELSE 0::bigint END, \
                 runs FROM alert_queue WHERE id = $1 FOR UPDATE",
    set_claim_runs: "UPDATE alert_queue SET runs = $2, updated_at = $3 WHERE id = $1",
    claim_done: "UPDATE alert_queue SET state = 'done', updated_at = $2 WHERE id = $1",
    claim_failed: "UPDATE alert_queue SET state = 'failed', failure = $2, updated_at = $3 \
                   WHERE id = $1",
    claim_released: "UPDATE alert_queue SET state = 'queued', \
                     attempts = greatest(attempts - 1, 0), owner_host = NULL, owner_pid = NULL, \
                     owner_token = NULL, lease_expires_at = NULL, updated_at = $2 WHERE id = $1",
    copy_run_alerts: "INSERT INTO run_alert (run_id, identity, source, group_key, alerts, \
                      recorded_at) VALUES ($1, $2, $3, $4, $5, $6) \
                      ON CONFLICT (run_id) DO NOTHING",
    copy_notification: "INSERT INTO alert_queue (identity, state, status, receiver, group_key, \
                        alerts, received_at, attempts, runs, failure, updated_at) \
                        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                        ON CONFLICT (identity) DO NOTHING",
    record_run_endpoint: "INSERT INTO run_endpoint (run_id, base_url, model, form, \
                          context_tokens, learned_at, refuses_temperature, refuses_seed) \
                          VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    running_owners: "SELECT run_id, owner_host, owner_pid, owner_token, lease_expires_at \
                     FROM diagnosis_run WHERE status = 'RUNNING'",
    // The parameter not filtered on is still bound (typed, since NULL alone has no type).
    list_runs: [
        "session_id = $1 AND status = $2",
        "session_id = $1 AND $2::text IS NULL",
        "$1::text IS NULL AND status = $2",
        "$1::text IS NULL AND $2::text IS NULL",
    ],
};

static NULL_INT: Option<i64> = None;
static NULL_BOOL: Option<bool> = None;
static NULL_TEXT: Option<&str> = None;

/// The parameters as tokio-postgres binds them.
fn bound<'a>(params: &'a [Param<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    params
        .iter()
        .map(|p| -> &'a (dyn ToSql + Sync) {
            match p {
                Param::Int(n) => n,
                Param::Bool(b) => b,
                Param::Text(s) => s,
                Param::NullInt => &NULL_INT,
                Param::NullBool => &NULL_BOOL,
                Param::NullText => &NULL_TEXT,
            }
        })
        .collect()
}

/// One column of `row` as a [`Cell`], by its type.
fn cell(row: &tokio_postgres::Row, at: usize) -> Result<Cell, tokio_postgres::Error> {
    let ty = row.columns()[at].type_();
    Ok(if *ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(at)?
            .map_or(Cell::Null, Cell::Int)
    } else if *ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(at)?
            .map_or(Cell::Null, |n| Cell::Int(n.into()))
    } else if *ty == Type::BOOL {
        row.try_get::<_, Option<bool>>(at)?
            .map_or(Cell::Null, |b| Cell::Int(b.into()))
    } else {
        row.try_get::<_, Option<String>>(at)?
            .map_or(Cell::Null, Cell::Text)
    })
}

/// A transaction of this store.
struct Open<'s, 't, 'c> {
    store: &'s PgStore,
    tx: &'t mut PgTx<'c>,
    op: &'static str,
}

impl Open<'_, '_, '_> {
    fn err(&self, e: &tokio_postgres::Error) -> StoreError {
        self.store.err(self.op, e).into()
    }
}

impl Tx for Open<'_, '_, '_> {
    fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        let result = self.tx.execute(sql, &bound(params));
        result.map_err(|e| self.err(&e))
    }

    fn insert(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<bool, StoreError> {
        match self.tx.execute(sql, &bound(params)) {
            Ok(_) => Ok(true),
            Err(e) if PgError::is_unique_violation(&e) => Ok(false),
            Err(e) => Err(self.err(&e)),
        }
    }

    fn query(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        let rows = self
            .tx
            .query(sql, &bound(params))
            .map_err(|e| self.err(&e))?;
        rows.iter()
            .map(|r| {
                (0..r.len())
                    .map(|at| cell(r, at))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Row)
                    .map_err(|e| {
                        StoreError::from(PgError::from(RecordError::Decode {
                            what: "row",
                            detail: e.to_string(),
                        }))
                    })
            })
            .collect()
    }
}

impl Driver for PgStore {
    fn statements(&self) -> &'static Statements {
        &STATEMENTS
    }

    fn now(&self) -> Timestamp {
        PgStore::now(self)
    }

    fn write<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.write_as(op, |tx| {
            f(&mut Open {
                store: self,
                tx,
                op,
            })
        })
    }

    /// A read in a transaction of its own, committed (it wrote nothing).
    fn read<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.write_as(op, |tx| {
            f(&mut Open {
                store: self,
                tx,
                op,
            })
        })
    }
}
