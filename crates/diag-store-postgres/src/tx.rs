//! The connection and the transactions writes run in.
//!
//! Round trips are what a write costs on PostgreSQL (docs/BENCHMARKS.md), so two things keep
//! them few:
//!
//! - **Prepared once.** Every statement a write uses is prepared the first time this
//!   connection runs it and kept for the connection's life ([`Conn`]); after that, a
//!   statement is one round trip (bind and execute), not two (prepare, then execute).
//! - **Rows apart only when one is refused.** A write of several rows (held events, a model
//!   call's step and exchange, a finish with its evaluation) must store each row on its own:
//!   a refused row undoes only itself. [`crate::PgStore::write_rows`] first runs the write
//!   with its rows together, in one plain transaction; only if a statement of it fails is that
//!   transaction rolled back and the write run again with each row under a savepoint of its
//!   own ([`Tx::row`]), which then reports each refused row beside the stored ones. A write
//!   nothing refuses, the usual case, pays no savepoints.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement, Transaction};

use super::error::PgError;
use super::wait;

/// The store's one connection and the statements prepared on it.
pub(crate) struct Conn {
    pub(crate) client: Client,
    statements: HashMap<&'static str, Statement>,
    /// A statement failed because the connection is gone (see [`lost`]).
    lost: bool,
}

impl Conn {
    pub(crate) fn new(client: Client) -> Conn {
        Conn {
            client,
            statements: HashMap::new(),
            lost: false,
        }
    }

    /// True when this connection can serve no more calls: the driver has seen it close, or a
    /// statement failed because it was gone.
    pub(crate) fn is_broken(&self) -> bool {
        self.lost || self.client.is_closed()
    }

    /// Notes a failure of a call made directly on the client (a read).
    pub(crate) fn note<T>(
        &mut self,
        result: Result<T, tokio_postgres::Error>,
    ) -> Result<T, tokio_postgres::Error> {
        if result.as_ref().is_err_and(lost) {
            self.lost = true;
        }
        result
    }

    /// Begins a transaction; `apart` puts each [`Tx::row`] under a savepoint of its own.
    pub(crate) fn begin(&mut self, apart: bool) -> Result<Tx<'_>, tokio_postgres::Error> {
        let inner = match wait(self.client.transaction()) {
            Ok(inner) => inner,
            Err(e) => {
                self.lost |= lost(&e);
                return Err(e);
            }
        };
        Ok(Tx {
            inner,
            statements: &mut self.statements,
            lost: &mut self.lost,
            apart,
            failed: false,
        })
    }
}

impl Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// One transaction of a write, or a savepoint inside one.
pub(crate) struct Tx<'a> {
    inner: Transaction<'a>,
    statements: &'a mut HashMap<&'static str, Statement>,
    lost: &'a mut bool,
    apart: bool,
    /// A statement of this transaction failed: the server has aborted it.
    failed: bool,
}

type Params<'p> = [&'p (dyn ToSql + Sync)];

impl<'a> Tx<'a> {
    /// True when a statement failed in it (the transaction can only be rolled back).
    pub(crate) fn failed(&self) -> bool {
        self.failed
    }

    pub(crate) fn commit(self) -> Result<(), tokio_postgres::Error> {
        let committed = wait(self.inner.commit());
        if committed.as_ref().is_err_and(lost) {
            *self.lost = true;
        }
        committed
    }

    fn statement(&mut self, sql: &'static str) -> Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = wait(self.inner.prepare(sql))?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Notes a failed statement before handing its result back.
    fn note<T>(
        &mut self,
        result: Result<T, tokio_postgres::Error>,
    ) -> Result<T, tokio_postgres::Error> {
        if let Err(e) = &result {
            self.failed = true;
            *self.lost |= lost(e);
        }
        result
    }

    pub(crate) fn execute(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<u64, tokio_postgres::Error> {
        let result = match self.statement(sql) {
            Ok(statement) => wait(self.inner.execute(&statement, params)),
            Err(e) => Err(e),
        };
        self.note(result)
    }

    pub(crate) fn query(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let result = match self.statement(sql) {
            Ok(statement) => wait(self.inner.query(&statement, params)),
            Err(e) => Err(e),
        };
        self.note(result)
    }

    pub(crate) fn query_opt(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        let result = match self.statement(sql) {
            Ok(statement) => wait(self.inner.query_opt(&statement, params)),
            Err(e) => Err(e),
        };
        self.note(result)
    }

    /// Runs `f`, the writing of one row: inline when the rows of this write go together,
    /// under a savepoint of its own when they go apart (a refusal then undoes only this row,
    /// and the transaction goes on). `err` maps a failure of the savepoint itself.
    pub(crate) fn row<T>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, PgError>,
        err: impl Fn(&tokio_postgres::Error) -> PgError,
    ) -> Result<T, PgError> {
        if !self.apart {
            return f(self);
        }
        let savepoint = match wait(self.inner.savepoint("row")) {
            Ok(savepoint) => savepoint,
            Err(e) => {
                self.failed = true;
                *self.lost |= lost(&e);
                return Err(err(&e));
            }
        };
        let mut nested = Tx {
            inner: savepoint,
            statements: &mut *self.statements,
            lost: &mut *self.lost,
            apart: false,
            failed: false,
        };
        // A refused row: dropping the savepoint rolls back to it.
        let value = f(&mut nested)?;
        let released = nested.commit();
        self.note(released).map_err(|e| err(&e))?;
        Ok(value)
    }
}

/// True when `e` means the connection is gone: the driver saw it close, or the server ended
/// the session (a FATAL error, or a connection exception of class 08).
fn lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed()
        || e.as_db_error().is_some_and(|db| {
            db.severity() == "FATAL"
                || db.severity() == "PANIC"
                || db.code().code().starts_with("08")
        })
}
