//! `diag-store-postgres`: the SQL and the connection handling of the PostgreSQL run store;
//! the rules are in diag-core's store port ([`diag_store`]). The store is for a team
//! whose runs are written from many machines at once (CI runners, on-call laptops, alert
//! hooks) into one history. [`PgStore`] implements the port's traits
//! ([`diag_store::RunReader`] in `read.rs`, [`diag_store::RunWriter`] in
//! `write.rs`, [`diag_store::RunMaintenance`] in `gc.rs`) with the guarantees of the
//! SQLite store (openspec/specs/run-store/spec.md), and [`PgError`] becomes the port's
//! [`diag_store::StoreError`] with its kind (`error.rs`). The store is chosen by a URL
//! (`--db postgres://…`, `DIAG_DB`, `[store] url`).
//!
//! # Guarantees
//!
//! - **As it happens.** Each model call (step and exchange together) and each tool
//!   invocation is committed in its own transaction when it is reported; orchestration events
//!   are held while deterministic nodes run and committed before the next agent node waits on
//!   a model, by the one recorder every store shares (`diag_store::Recorder`).
//! - **Final.** Every trace write first locks its run row (`FOR SHARE`) and checks it is
//!   RUNNING; a finish updates the row only while it is RUNNING. A finished run's trace cannot
//!   change, and a finish and a concurrent sweep cannot both win.
//! - **One transaction to finish.** The held events, the run's final row and, for a SUCCESS,
//!   its evaluation, in the order `diag_store::backend::FinishPlan` runs them (a refused
//!   evaluation leaves the SUCCESS standing: `tx.rs`).
//! - **Interrupted runs across machines.** A run's owner (host id, pid, start token) holds a
//!   lease, renewed by a heartbeat while the handle lives (`diag_owner::Leases`, with the
//!   statement of `heartbeat.rs`); whoever opens the store next sweeps FAILED (`interrupted`)
//!   the RUNNING runs whose owner is gone by `diag_owner::is_gone`: a dead process on the
//!   sweeper's own host at once, any other owner once its lease has run out.
//! - **One claimant per alert notification.** The queue of `diag serve` (`alerts.rs`) is
//!   claimed with `FOR UPDATE SKIP LOCKED`, so processes on many machines never take the same
//!   notification; a claim holds a lease renewed by the same heartbeat as the runs'.
//! - **Versioned migrations** (`schema.rs`), applied under an advisory lock so that many
//!   processes opening a new database at once create it once; a database with tables of its
//!   own, or of a newer schema version, is refused untouched.
//! - **Reads scoped to one run.** Every trace read names its `run_id`.
//! - **No secrets.** The password comes from the URL's environment (`connect.rs`) and lives
//!   in the connection only; errors name `user@host:port/database`.
//!
//! # How it talks to the server
//!
//! The store's methods are synchronous, like the SQLite store's, and are called from inside
//! the application's async runtime. A handle owns a small runtime of its own that drives the
//! connection; each call waits on its query with `futures::executor::block_on` (the driver's
//! client futures only exchange messages with the connection task), so no runtime is ever
//! started inside another. One connection per handle; clones share it, so the writes of one
//! process are serialized here, as the SQLite store serializes them on its connection.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod alerts;
mod connect;
mod driver;
mod error;
mod gc;
mod heartbeat;
mod learnings;
mod read;
mod records {
    pub use diag_store::records::*;
}
mod schema;
mod tx;
mod write;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use connect::{is_postgres_url, SCHEMES};
pub use diag_store::records::{
    EvaluationRow, NewRun, Reuse, RunFilter, RunRow, RunStatus, RunSummary, StoredExchange,
    StoredRun, StoredStep, INTERRUPTED,
};
pub use error::PgError;
pub use schema::SCHEMA_VERSION;

use diag_graph::clock::{Clock, SystemClock};
use diag_store::backend::Held;
use diag_store::RunWriter;
use tokio_postgres::config::SslMode;

/// How a store is opened.
#[derive(Clone)]
pub struct PgOptions {
    /// Where the store's own timestamps come from (a sweep's `finished_at`, an evaluation's
    /// `created_at`, a lease's expiry).
    pub clock: Arc<dyn Clock>,
    /// How long the lease of a run this process creates lasts.
    pub lease: Duration,
    /// The environment variable that holds the password, when neither the URL nor
    /// `PGPASSWORD` gives one (`[store] password_env`).
    pub password_env: Option<String>,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            clock: Arc::new(SystemClock::new()),
            lease: diag_owner::lease_duration(),
            password_env: None,
        }
    }
}

/// A handle on one PostgreSQL run store. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct PgStore {
    shared: Arc<Shared>,
}

struct Shared {
    conn: Mutex<tx::Conn>,
    /// What a new connection is made with when the server has dropped this one.
    reconnect: Reconnect,
    /// `user@host:port/database`: what every error names.
    target: String,
    clock: Arc<dyn Clock>,
    /// Orchestration events held per run until the next commit point (`diag_store::recorder`).
    held: Held<write::EventRow>,
    /// The leases of this handle's runs and alert claims, and their heartbeat, started with its
    /// first run or claim.
    leases: diag_owner::Leases,
    /// Drives the connection; shut down without blocking when the last handle goes, which
    /// may happen inside the application's runtime.
    runtime: Option<tokio::runtime::Runtime>,
}

/// The parsed URL (its password included: it lives in memory only, as in the connection) and
/// the TLS connector the store was opened with.
struct Reconnect {
    target: connect::Target,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl PgStore {
    /// Connects, creates or migrates the schema, then sweeps interrupted runs: what a command
    /// that writes runs (`ask`, `replay`, `store copy --to`) does.
    pub fn open(url: &str, options: PgOptions) -> Result<PgStore, PgError> {
        PgStore::open_mode(url, options, true)
    }

    /// Connects to a store that is already there: a database without diag's schema is
    /// [`PgError::Missing`] and is left untouched. Read-only commands (`trace`, `runs`,
    /// `export`) open the store this way. A store of an older schema is migrated, as the
    /// SQLite store is.
    pub fn open_existing(url: &str, options: PgOptions) -> Result<PgStore, PgError> {
        PgStore::open_mode(url, options, false)
    }

    fn open_mode(url: &str, options: PgOptions, create: bool) -> Result<PgStore, PgError> {
        let target = connect::parse(url, &options)?;
        let mode = target.config.get_ssl_mode();
        let tls = connect::tls(mode)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("diag-store-postgres")
            .enable_all()
            .build()
            .map_err(|e| PgError::Unreachable {
                target: target.name.clone(),
                detail: format!("cannot start the connection's runtime: {e}"),
            })?;
        let connected = connect(&runtime, &target, &tls);
        let client = match connected {
            Ok(client) => client,
            Err(e) => {
                runtime.shutdown_background();
                return Err(e);
            }
        };
        let store = PgStore {
            shared: Arc::new(Shared {
                conn: Mutex::new(tx::Conn::new(client)),
                target: target.name.clone(),
                reconnect: Reconnect { target, tls },
                clock: options.clock,
                held: Held::default(),
                leases: diag_owner::Leases::new(options.lease),
                runtime: Some(runtime),
            }),
        };
        {
            let mut client = store.lock();
            schema::prepare(&mut client, &store.shared.target, create)?;
        }
        tracing::debug!(target = %store.shared.target, "run store opened");
        match store.sweep_interrupted() {
            Ok(0) => {}
            Ok(n) => tracing::info!(runs = n, "runs of gone owners marked FAILED (interrupted)"),
            Err(e) => tracing::warn!(error = %e, "interrupted runs not swept this time"),
        }
        Ok(store)
    }

    /// `user@host:port/database` (no password).
    pub fn target(&self) -> &str {
        &self.shared.target
    }

    /// The connection, made anew first if the server has dropped it (a restart, a failover,
    /// an administrator's `pg_terminate_backend`): a call that failed with the connection is
    /// reported as it failed (it may have committed, so it is not retried), and the next one
    /// runs on a new connection. A reconnection that fails leaves the dropped connection in
    /// place, so the call reports the connection's error, and the next call tries again.
    fn lock(&self) -> MutexGuard<'_, tx::Conn> {
        // A panic while the lock was held leaves at most an open transaction, which the
        // driver rolls back when the transaction object is dropped.
        let mut conn = self
            .shared
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if conn.is_broken() {
            if let Some(runtime) = &self.shared.runtime {
                let again = &self.shared.reconnect;
                match connect(runtime, &again.target, &again.tls) {
                    Ok(client) => {
                        tracing::info!(target = %self.shared.target, "run store connection made anew");
                        *conn = tx::Conn::new(client);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "run store connection cannot be made anew")
                    }
                }
            }
        }
        conn
    }

    fn err(&self, op: &'static str, e: &tokio_postgres::Error) -> PgError {
        PgError::postgres(&self.shared.target, op, e)
    }

    fn now(&self) -> diag_graph::clock::Timestamp {
        self.shared.clock.now()
    }

    /// Runs `f` in one transaction and commits it: a write of one row, or of rows that stand
    /// or fall together.
    fn write<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut tx::Tx<'_>) -> Result<T, PgError>,
    ) -> Result<T, PgError> {
        self.write_as(op, f)
    }

    /// [`Self::write`] for a write whose error is the port's (the shared rules,
    /// `driver.rs`).
    fn write_as<T, E: From<PgError>>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut tx::Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.lock();
        let mut tx = conn.begin(false).map_err(|e| self.err(op, &e))?;
        let value = f(&mut tx)?;
        tx.commit().map_err(|e| self.err(op, &e))?;
        Ok(value)
    }

    /// Runs `f`, a write of rows that each stand alone, in one transaction and commits it:
    /// first with the rows together; if a statement of that pass fails, it is rolled back
    /// and `f` runs again with each row under a savepoint of its own (`tx.rs`), so that what
    /// `f` returns reports each refused row beside the stored ones.
    /// The error of `f` may say more than this store's error (a finish's
    /// [`diag_store::FinishError`]).
    fn write_rows<T, E: From<PgError>>(
        &self,
        op: &'static str,
        mut f: impl FnMut(&mut tx::Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.lock();
        {
            let mut tx = conn.begin(false).map_err(|e| self.err(op, &e))?;
            let value = f(&mut tx);
            if !tx.failed() {
                let value = value?;
                tx.commit().map_err(|e| self.err(op, &e))?;
                return Ok(value);
            }
            // Dropping the failed pass rolls it back.
        }
        let mut tx = conn.begin(true).map_err(|e| self.err(op, &e))?;
        let value = f(&mut tx)?;
        tx.commit().map_err(|e| self.err(op, &e))?;
        Ok(value)
    }
}

/// Waits for one of the driver's futures on this thread.
pub(crate) fn wait<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// Connects to `target` on `runtime`, which then drives the connection. As libpq, `prefer`
/// tries once more without TLS when the handshake fails.
fn connect(
    runtime: &tokio::runtime::Runtime,
    target: &connect::Target,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
) -> Result<tokio_postgres::Client, PgError> {
    let mode = target.config.get_ssl_mode();
    match connect_on(runtime, target, target.config.clone(), tls.clone()) {
        Ok(client) => Ok(client),
        Err(Connect::Driver(e)) if mode == SslMode::Prefer => match connect::tls_failure(&e) {
            Some(tls_error) => {
                tracing::warn!(
                    target = %target.name,
                    problem = %connect::tls_problem(tls_error),
                    "TLS handshake failed; sslmode=prefer connects without TLS"
                );
                let mut plain = target.config.clone();
                plain.ssl_mode(SslMode::Disable);
                connect_on(runtime, target, plain, tls.clone()).map_err(|again| match again {
                    Connect::Driver(again) => connect::fallback_error(target, tls_error, &again),
                    Connect::Task(e) => e,
                })
            }
            None => Err(connect::connect_error(target, &e)),
        },
        Err(Connect::Driver(e)) => Err(connect::connect_error(target, &e)),
        Err(Connect::Task(e)) => Err(e),
    }
}

/// Why one connection attempt failed: the driver's error, still to be mapped (a `prefer`
/// connection looks at it before trying without TLS), or the connection task's, mapped.
enum Connect {
    Driver(tokio_postgres::Error),
    Task(PgError),
}

/// Connects once with `config` on `runtime`, which then drives the connection.
fn connect_on(
    runtime: &tokio::runtime::Runtime,
    target: &connect::Target,
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
) -> Result<tokio_postgres::Client, Connect> {
    let connecting = runtime.spawn(async move {
        let (client, connection) = config.connect(tls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %error::one_line(&e.to_string()), "run store connection closed");
            }
        });
        Ok::<_, tokio_postgres::Error>(client)
    });
    match futures::executor::block_on(connecting) {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(Connect::Driver(e)),
        Err(e) => Err(Connect::Task(PgError::Unreachable {
            target: target.name.clone(),
            detail: format!("the connection task failed: {e}"),
        })),
    }
}
