//! The driver interface the store rules run over, so that what both backends do alike is
//! written once (openspec/specs/run-store/spec.md, the port's requirement and its decisions): a backend is a
//! [`Driver`] (its transactions, its clock and its [`Statements`], the SQL text in its
//! dialect) and an open transaction is a [`Tx`] (statements run with [`Param`]s, rows read
//! back as [`Row`]s of [`Cell`]s). The rules written over it live beside the rest of their
//! concern (`alerts.rs`: the end of an alert claim, a run's alerts and a notification copied
//! in; `learnings.rs`: the endpoints a run started with; `backend.rs`: the sweep of
//! interrupted runs and which runs a filter lists). What only one backend does (SQLite's
//! content-addressed blobs and packing, PostgreSQL's TLS, advisory locks and
//! `FOR UPDATE SKIP LOCKED` claims) stays in its crate.

use diag_graph::clock::Timestamp;

use crate::{RecordError, StoreError};

/// A value bound to one parameter of a statement. A NULL names its column's type, which
/// PostgreSQL checks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Param<'a> {
    Int(i64),
    Bool(bool),
    Text(&'a str),
    NullInt,
    NullBool,
    NullText,
}

impl<'a> Param<'a> {
    /// `Text`, or a text NULL.
    pub fn opt_text(v: Option<&'a str>) -> Param<'a> {
        v.map_or(Param::NullText, Param::Text)
    }

    /// `Bool`, or a boolean NULL.
    pub fn opt_bool(v: Option<bool>) -> Param<'a> {
        v.map_or(Param::NullBool, Param::Bool)
    }

    /// `Int`, or an integer NULL.
    pub fn opt_int(v: Option<i64>) -> Param<'a> {
        v.map_or(Param::NullInt, Param::Int)
    }
}

/// One column of a row read back.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Text(String),
}

/// One row read back, its columns in the statement's order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Row(pub Vec<Cell>);

impl Row {
    fn cell(&self, at: usize, what: &'static str) -> Result<&Cell, RecordError> {
        self.0.get(at).ok_or_else(|| RecordError::Decode {
            what,
            detail: format!("no column {at}"),
        })
    }

    /// Column `at` as text; `what` names the value in the error.
    pub fn text(&self, at: usize, what: &'static str) -> Result<String, RecordError> {
        match self.cell(at, what)? {
            Cell::Text(s) => Ok(s.clone()),
            other => Err(decode(what, other)),
        }
    }

    /// Column `at` as text, or `None` for NULL.
    pub fn opt_text(&self, at: usize, what: &'static str) -> Result<Option<String>, RecordError> {
        match self.cell(at, what)? {
            Cell::Null => Ok(None),
            Cell::Text(s) => Ok(Some(s.clone())),
            other => Err(decode(what, other)),
        }
    }

    /// Column `at` as an integer.
    pub fn int(&self, at: usize, what: &'static str) -> Result<i64, RecordError> {
        match self.cell(at, what)? {
            Cell::Int(n) => Ok(*n),
            other => Err(decode(what, other)),
        }
    }

    /// Column `at` as an integer, or `None` for NULL.
    pub fn opt_int(&self, at: usize, what: &'static str) -> Result<Option<i64>, RecordError> {
        match self.cell(at, what)? {
            Cell::Null => Ok(None),
            Cell::Int(n) => Ok(Some(*n)),
            other => Err(decode(what, other)),
        }
    }
}

fn decode(what: &'static str, found: &Cell) -> RecordError {
    let found = match found {
        Cell::Null => "NULL",
        Cell::Int(_) => "an integer",
        Cell::Text(_) => "text",
    };
    RecordError::Decode {
        what,
        detail: format!("the column holds {found}"),
    }
}

/// One open transaction of a backend. Errors are the backend's, as [`StoreError`]s (a busy
/// or unreachable store keeps its kind).
pub trait Tx {
    /// Runs `sql`; how many rows it changed.
    fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, StoreError>;
    /// Runs an `INSERT`: `false` when a unique key refused the row, which the caller turns
    /// into its own duplicate error.
    fn insert(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<bool, StoreError>;
    /// Runs a query; its rows.
    fn query(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError>;
}

/// A backend as the shared rules drive it.
pub trait Driver {
    /// Its SQL text.
    fn statements(&self) -> &'static Statements;
    /// Its clock (what rows are stamped with).
    fn now(&self) -> Timestamp;
    /// Runs `f` in one write transaction and commits it; `op` names the write in errors.
    fn write<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError>;
    /// Runs `f` over a read (no writes; on SQLite outside a transaction).
    fn read<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError>;
}

/// The statements the shared rules run, in one backend's dialect. Placeholders are numbered
/// (`?1` on SQLite, `$1` on PostgreSQL); each statement's doc says its parameters and
/// columns, which both backends' texts keep.
#[derive(Debug)]
pub struct Statements {
    /// `(run_id)` → `status` of the run, locked against a concurrent finish where the
    /// backend locks rows.
    pub run_status: &'static str,
    /// `(run_id)` → one row when the run exists.
    pub run_exists: &'static str,
    /// `(id, owner_host, owner_pid, owner_token)` → `state`, whether the owner is this
    /// process (1 or 0), `runs`; the row locked for the transaction where the backend locks.
    pub held_claim: &'static str,
    /// `(id, runs, updated_at)`.
    pub set_claim_runs: &'static str,
    /// `(id, updated_at)`: an investigated notification is done.
    pub claim_done: &'static str,
    /// `(id, failure, updated_at)`.
    pub claim_failed: &'static str,
    /// `(id, updated_at)`: given back to the queue, the attempt not counted, no owner.
    pub claim_released: &'static str,
    /// `(run_id, identity, source, group_key, alerts, recorded_at)`, doing nothing when the
    /// run already has its alerts.
    pub copy_run_alerts: &'static str,
    /// `(identity, state, status, receiver, group_key, alerts, received_at, attempts, runs,
    /// failure, updated_at)`, doing nothing when the identity is queued already.
    pub copy_notification: &'static str,
    /// `(run_id, base_url, model, form, context_tokens, learned_at, refuses_temperature,
    /// refuses_seed)`.
    pub record_run_endpoint: &'static str,
    /// `()` → `run_id, owner_host, owner_pid, owner_token, lease_expires_at` of every RUNNING
    /// run.
    pub running_owners: &'static str,
    /// The `WHERE` clause of a run listing for each filter, in the order of [`RunListing`]:
    /// session and status, session only, status only, neither. Parameters `(session_id,
    /// status, limit)` are bound to every one (the one not filtered on as NULL).
    pub list_runs: [&'static str; 4],
}

/// Which runs a listing selects: the one statement per combination of filters, so that a
/// database plans a plain `session_id = ?` or `status = ?` on its index rather than a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunListing {
    SessionAndStatus,
    Session,
    Status,
    All,
}

impl RunListing {
    /// The listing of `filter`.
    pub fn of(filter: &crate::RunFilter) -> RunListing {
        match (filter.session_id.is_some(), filter.status.is_some()) {
            (true, true) => RunListing::SessionAndStatus,
            (true, false) => RunListing::Session,
            (false, true) => RunListing::Status,
            (false, false) => RunListing::All,
        }
    }

    /// Its clause among `statements.list_runs`.
    pub fn clause(self, statements: &Statements) -> &'static str {
        statements.list_runs[self as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_typed_columns_and_name_what_is_wrong() {
        let row = Row(vec![Cell::Text("a".into()), Cell::Int(3), Cell::Null]);
        assert_eq!(row.text(0, "x").unwrap(), "a");
        assert_eq!(row.int(1, "x").unwrap(), 3);
        assert_eq!(row.opt_text(2, "x").unwrap(), None);
        assert_eq!(row.opt_int(2, "x").unwrap(), None);
        let wrong = row.int(0, "queue id").unwrap_err().to_string();
        assert!(
            wrong.contains("queue id") && wrong.contains("text"),
            "{wrong}"
        );
        assert!(row
            .text(7, "x")
            .unwrap_err()
            .to_string()
            .contains("no column 7"));
    }

    #[test]
    fn each_filter_takes_its_own_clause() {
        let s = Statements {
            run_status: "",
            run_exists: "",
            held_claim: "",
            set_claim_runs: "",
            claim_done: "",
            claim_failed: "",
            claim_released: "",
            copy_run_alerts: "",
            copy_notification: "",
            record_run_endpoint: "",
            running_owners: "",
            list_runs: ["both", "session", "status", "all"],
        };
        let mut f = crate::RunFilter::default();
        assert_eq!(RunListing::of(&f).clause(&s), "all");
        f.session_id = Some("s".into());
        assert_eq!(RunListing::of(&f).clause(&s), "session");
        f.status = Some(crate::RunStatus::Failed);
        assert_eq!(RunListing::of(&f).clause(&s), "both");
        f.session_id = None;
        assert_eq!(RunListing::of(&f).clause(&s), "status");
    }
}
