//! The run store's conformance harness: one check, run on each backend. [`for_each_backend`]
//! hands a check a freshly made store of each backend in turn (a new SQLite file, a new
//! database on the suite's PostgreSQL 15 server); [`for_each_fresh`] hands it the fresh
//! location instead ([`Fresh`]), for checks that open and reopen the store, put it at a moment
//! of their choosing, or act on it as an operator would (raw SQL through rusqlite or psql, a
//! trigger that refuses a row). The writers [`write_partial`] and [`write_full`] record a run
//! through the port as a live run does, and [`EngineObserver`] is the engine's observer over a
//! recorder, wired as the ask service wires it.
//!
//! The tables both backends keep under the same names are [`SHARED_TABLES`]; what a check
//! reads there with SQL it reads with the same statement on both.
//!
//! The suite itself is the store port's (`crates/diag-store/tests/it/`), whose tests may name
//! neither backend nor the agent runtime (both depend on the port): what it needs of them is
//! here, [`Fresh`]'s constructors and the recorder wired as the runtime holds it
//! ([`runtime_hooks`], [`invocation_log`], [`endpoint_memory`]).

use crate::OrFail;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use diag_core::agent::runtime::{RunHooks, StepStatus};
use diag_core::agent::AgentRole;
use diag_core::graph::{Event, NodeKind, Observer, RunConfig};
use diag_core::store::{RecordError, Recorder, Store, StoreError, StoreErrorKind};
use diag_core::tools::InvocationLog;
use diag_store_postgres::{PgError, PgOptions, PgStore};
use diag_store_sqlite::{SqliteError, SqliteStore, StoreOptions};
use serde_json::json;

use super::postgres;
use super::records::{
    event, exchange_ok, invocation, new_run, raw, step, summary, ts, RecordOwn, Status, PASS_PATH,
};

/// The tables both backends keep, under the same names and with a `run_id` column.
pub const SHARED_TABLES: [&str; 6] = [
    "diagnosis_run",
    "orchestration_event",
    "agent_step",
    "tool_invocation",
    "model_exchange",
    "evaluation",
];

/// Each backend, freshly made, with its name for failure messages.
pub fn for_each_backend(check: impl Fn(&str, Store)) {
    for_each_fresh(|fresh| check(fresh.name, fresh.open()));
}

/// Each backend's fresh, empty location (nothing is created there until it is opened).
pub fn for_each_fresh(check: impl Fn(&Fresh)) {
    for fresh in [Fresh::sqlite(), Fresh::postgres()] {
        let _row = super::Row::named(fresh.name);
        check(&fresh);
    }
}

/// A store location of one backend: a path under a temporary directory of its own, or a new
/// database on the suite's PostgreSQL server.
pub struct Fresh {
    /// `sqlite` or `postgres`.
    pub name: &'static str,
    location: PathBuf,
    url: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl Fresh {
    /// A store file that does not exist yet, in a folder that does not exist yet either.
    pub fn sqlite() -> Fresh {
        let dir = tempfile::tempdir().or_fail("a temporary folder");
        let location = dir.path().join("nested").join("diag.db");
        Fresh {
            name: "sqlite",
            location,
            url: None,
            _dir: Some(dir),
        }
    }

    /// A new, empty database on the suite's PostgreSQL server.
    pub fn postgres() -> Fresh {
        let url = postgres::server().fresh_db();
        Fresh {
            name: "postgres",
            location: PathBuf::from(&url),
            url: Some(url),
            _dir: None,
        }
    }

    /// Where the store is, as `--db` takes it: the file's path or the database's URL.
    pub fn location(&self) -> &Path {
        &self.location
    }

    pub fn is_sqlite(&self) -> bool {
        self.url.is_none()
    }

    /// The file, for the SQLite-only parts of a check.
    pub fn sqlite_path(&self) -> Option<&Path> {
        self.is_sqlite().then_some(self.location.as_path())
    }

    /// How the store's errors name it: the file's path, or `user@host:port/database`.
    pub fn named_in_errors(&self) -> String {
        match &self.url {
            None => self.location.display().to_string(),
            Some(url) => url.trim_start_matches("postgres://").to_string(),
        }
    }

    /// The schema version this diag writes on this backend.
    pub fn schema_version(&self) -> u32 {
        if self.is_sqlite() {
            diag_store_sqlite::SCHEMA_VERSION
        } else {
            diag_store_postgres::SCHEMA_VERSION
        }
    }

    /// The schema version the store holds, as an operator would read it.
    pub fn stored_schema_version(&self) -> u32 {
        let sql = if self.is_sqlite() {
            "PRAGMA user_version"
        } else {
            "SELECT version FROM diag_schema"
        };
        self.query(sql).parse().or_fail("a schema version")
    }

    /// Sets the stored schema version behind diag's back.
    pub fn set_schema_version(&self, version: u32) {
        if self.is_sqlite() {
            raw(&self.location)
                .pragma_update(None, "user_version", version)
                .or_fail("set user_version");
        } else {
            self.execute(&format!("UPDATE diag_schema SET version = {version}"));
        }
    }

    /// The SQLite backend itself, opened anew (`None` on PostgreSQL): for what only it has
    /// (its file, its checkpoint, its integrity check).
    pub fn sqlite_store(&self) -> Option<SqliteStore> {
        self.is_sqlite()
            .then(|| SqliteStore::open(&self.location).or_fail("open the SQLite store"))
    }

    /// The store, opened with its backend's defaults, as a command opens it.
    pub fn try_open(&self) -> Result<Store, StoreError> {
        Ok(match &self.url {
            None => Store::new(SqliteStore::open(&self.location)?),
            Some(url) => Store::new(PgStore::open(url, PgOptions::default())?),
        })
    }

    #[track_caller]
    pub fn open(&self) -> Store {
        self.try_open()
            .unwrap_or_else(|e| panic!("open the {} store: {e}", self.name))
    }

    /// The store, its clock reading `now_offset_ms` after the test records' epoch
    /// ([`super::records::T0`]).
    #[track_caller]
    pub fn open_at(&self, now_offset_ms: i64) -> Store {
        let clock: Arc<dyn diag_core::clock::Clock> =
            Arc::new(diag_core::clock::FixedClock(ts(now_offset_ms)));
        self.open_tuned(Some(clock), None)
    }

    /// The store opened with a lease of `lease` on alert claims, on the system clock.
    #[track_caller]
    pub fn open_with_lease(&self, lease: Duration) -> Store {
        self.open_tuned(None, Some(lease))
    }

    /// The store with either backend's options but the clock or the lease given.
    #[track_caller]
    fn open_tuned(
        &self,
        clock: Option<Arc<dyn diag_core::clock::Clock>>,
        lease: Option<Duration>,
    ) -> Store {
        let opened: Result<Store, StoreError> = match &self.url {
            None => {
                let mut options = StoreOptions::default();
                options.clock = clock.unwrap_or(options.clock);
                options.lease = lease.unwrap_or(options.lease);
                SqliteStore::open_with(&self.location, options)
                    .map(Store::new)
                    .map_err(StoreError::from)
            }
            Some(url) => {
                let mut options = PgOptions::default();
                options.clock = clock.unwrap_or(options.clock);
                options.lease = lease.unwrap_or(options.lease);
                PgStore::open(url, options)
                    .map(Store::new)
                    .map_err(StoreError::from)
            }
        };
        opened.unwrap_or_else(|e| panic!("open the {} store: {e}", self.name))
    }

    /// Runs SQL statements on the store as an operator would (rusqlite on the file; psql as
    /// the superuser on the database).
    #[track_caller]
    pub fn execute(&self, sql: &str) {
        match &self.url {
            None => raw(&self.location)
                .execute_batch(sql)
                .or_fail("run SQL on the store file"),
            Some(url) => {
                postgres::server().psql(url, sql);
            }
        }
    }

    /// The first column of the first row `sql` selects, as text (empty for NULL).
    #[track_caller]
    pub fn query(&self, sql: &str) -> String {
        self.query_rows(sql).into_iter().next().unwrap_or_default()
    }

    /// The first column of every row `sql` selects, as text (empty for NULL).
    #[track_caller]
    pub fn query_rows(&self, sql: &str) -> Vec<String> {
        match &self.url {
            None => {
                use rusqlite::types::ValueRef;
                super::records::rows(&raw(&self.location), sql, [], |r| {
                    Ok(match r.get_ref(0)? {
                        ValueRef::Null => String::new(),
                        ValueRef::Integer(i) => i.to_string(),
                        ValueRef::Real(f) => f.to_string(),
                        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                        ValueRef::Blob(b) => String::from_utf8_lossy(b).into_owned(),
                    })
                })
            }
            Some(url) => postgres::server()
                .psql(url, sql)
                .lines()
                .map(str::to_string)
                .collect(),
        }
    }

    /// Row counts of [`SHARED_TABLES`], in that order.
    #[track_caller]
    pub fn counts(&self) -> Vec<i64> {
        SHARED_TABLES
            .iter()
            .map(|t| {
                self.query(&format!("SELECT count(*) FROM {t}"))
                    .parse()
                    .or_fail("a row count")
            })
            .collect()
    }

    /// Makes the store refuse every `op` (`INSERT`, `UPDATE`) on `table` for which
    /// `condition` (SQL over `NEW`) holds, or every one without a condition, with `message`,
    /// as a failing disk or a constraint would: a trigger named `name`.
    pub fn refuse(&self, name: &str, op: &str, table: &str, condition: Option<&str>, msg: &str) {
        if self.is_sqlite() {
            let when = condition.map(|c| format!("WHEN {c} ")).unwrap_or_default();
            self.execute(&format!(
                "CREATE TRIGGER {name} BEFORE {op} ON {table} {when}\
                 BEGIN SELECT RAISE(ABORT, '{msg}'); END;"
            ));
        } else {
            let when = condition
                .map(|c| format!("WHEN ({c}) "))
                .unwrap_or_default();
            self.execute(&format!(
                "CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION '{msg}'; END $$;\n\
                 CREATE TRIGGER {name} BEFORE {op} ON {table} FOR EACH ROW {when}\
                 EXECUTE FUNCTION {name}();"
            ));
        }
    }

    /// Removes a trigger [`Fresh::refuse`] made.
    pub fn allow(&self, name: &str, table: &str) {
        if self.is_sqlite() {
            self.execute(&format!("DROP TRIGGER {name};"));
        } else {
            self.execute(&format!(
                "DROP TRIGGER {name} ON {table};\nDROP FUNCTION {name}();"
            ));
        }
    }
}

/// What an error of either backend is, as the checks tell errors apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    UnknownRun(String),
    DuplicateRun(String),
    Duplicate(&'static str),
    NotRunning(String),
    NotEvaluable(String),
    /// A write that needs this process's claim on an alert notification, with where the
    /// notification stands.
    NotClaimed(String),
    Invalid,
    NewerSchema {
        found: u32,
        supported: u32,
    },
    ForeignDatabase,
    Other(String),
}

/// What a record's failure is, whichever layer refused it (a backend, or a rule both
/// backends share over the driver interface).
fn record_kind(e: &RecordError) -> Option<Kind> {
    Some(match e {
        RecordError::UnknownRun(id) => Kind::UnknownRun(id.clone()),
        RecordError::DuplicateRun(id) => Kind::DuplicateRun(id.clone()),
        RecordError::Duplicate { what, .. } => Kind::Duplicate(what),
        RecordError::NotRunning { status, .. } => Kind::NotRunning(status.clone()),
        RecordError::NotEvaluable { status, .. } => Kind::NotEvaluable(status.clone()),
        RecordError::NotClaimed { state, .. } => Kind::NotClaimed(state.clone()),
        _ => return None,
    })
}

pub fn kind(e: &StoreError) -> Kind {
    if e.kind() == StoreErrorKind::Invalid {
        return Kind::Invalid;
    }
    if let Some(kind) = e.downcast_ref::<RecordError>().and_then(record_kind) {
        return kind;
    }
    if let Some(e) = e.downcast_ref::<SqliteError>() {
        if let Some(kind) = match e {
            SqliteError::Record(r) => record_kind(r),
            _ => None,
        } {
            return kind;
        }
        return match e {
            SqliteError::NewerSchema {
                found, supported, ..
            } => Kind::NewerSchema {
                found: *found,
                supported: *supported,
            },
            SqliteError::ForeignDatabase { .. } => Kind::ForeignDatabase,
            other => Kind::Other(other.to_string()),
        };
    }
    if let Some(e) = e.downcast_ref::<PgError>() {
        if let Some(kind) = match e {
            PgError::Record(r) => record_kind(r),
            _ => None,
        } {
            return kind;
        }
        return match e {
            PgError::NewerSchema {
                found, supported, ..
            } => Kind::NewerSchema {
                found: *found,
                supported: *supported,
            },
            PgError::ForeignDatabase { .. } => Kind::ForeignDatabase,
            other => Kind::Other(other.to_string()),
        };
    }
    Kind::Other(e.to_string())
}

/// The engine's observer over a run's recorder, as the ask service wires it: a node start
/// and an event go to the recorder's port methods.
pub struct EngineObserver(pub Recorder);

impl<O: Display> Observer<O> for EngineObserver {
    fn node_started(&mut self, _node: &str, kind: NodeKind, _attempt: u32, _round: u32) {
        self.0.observe_node(kind);
    }
    fn event(&mut self, event: &Event<O>) {
        self.0.observe_event(event);
    }
}

/// A run's recorder as the agent runtime holds it: the hooks its model calls report to.
pub fn runtime_hooks(recorder: &Recorder) -> Arc<dyn RunHooks> {
    Arc::new(recorder.clone())
}

/// A run's recorder as the tools hold it: the log their invocations are kept in and looked
/// up from.
pub fn invocation_log(recorder: &Recorder) -> Arc<dyn InvocationLog> {
    Arc::new(recorder.clone())
}

/// What model endpoints taught, remembered from the store and kept in it, as a run wires it
/// (`diag_core::store::endpoint_memory`).
pub use diag_core::store::endpoint_memory;

/// Writes the first `upto` events of a run with its steps, exchanges and invocations, as a
/// live run reports them through its recorder.
pub fn write_partial(store: &Store, run_id: &str, upto: usize) -> Recorder {
    let session = "backends";
    let rec = store
        .create_run(new_run(run_id, session, 0))
        .unwrap_or_else(|e| panic!("create {run_id}: {e}"));
    let config = RunConfig::new(session, run_id);
    for (i, (node, status)) in PASS_PATH.iter().enumerate().take(upto) {
        let kind = if matches!(*node, "gatekeeper" | "verified_input") {
            NodeKind::Deterministic
        } else {
            NodeKind::Agent
        };
        rec.observe_node(kind);
        if *node == "executor" {
            for turn in 1..=2 {
                rec.model_call(
                    &config,
                    &step(AgentRole::Executor, turn, StepStatus::Ok),
                    &exchange_ok(AgentRole::Executor, turn),
                );
            }
            for n in 1..=3 {
                rec.record_own(invocation(
                    run_id,
                    session,
                    n,
                    json!({"matches": [{"line": "upstream returned 502"}]}),
                ));
            }
        }
        rec.observe_event(&event(i as u32 + 1, node, *status));
    }
    if let Some(e) = rec.take_error() {
        panic!("trace of {run_id}: {e}");
    }
    rec
}

pub fn write_full(store: &Store, run_id: &str) {
    let rec = write_partial(store, run_id, PASS_PATH.len());
    let report = store
        .finish_success_evaluated(
            run_id,
            summary("payment-service timed out"),
            &json!({"groundedness": 0.9}),
        )
        .unwrap_or_else(|e| panic!("finish {run_id}: {e}"));
    assert!(report.evaluation_error.is_none());
    drop(rec);
}

/// Records a complete pass run through the recorder's hooks, as a live run would: its
/// events through the engine's observer, a planner step and exchange, one invocation, the
/// finish and an evaluation.
pub fn record_pass_run(store: &Store, run_id: &str, session: &str, offset_ms: i64) -> Recorder {
    let recorder = store
        .create_run(new_run(run_id, session, offset_ms))
        .or_fail("create the run");
    let config = RunConfig::new(session, run_id);
    let mut observer = EngineObserver(recorder.clone());
    for (i, (node, status)) in PASS_PATH.iter().enumerate() {
        Observer::<Status>::event(&mut observer, &event(i as u32 + 1, node, *status));
    }
    recorder.agent_step(&config, &step(AgentRole::Planner, 1, StepStatus::Ok));
    recorder.model_exchange(&config, &exchange_ok(AgentRole::Planner, 1));
    recorder.record_own(invocation(run_id, session, 1, json!({"matches": []})));
    assert!(recorder.take_error().is_none());
    store
        .finish_success(run_id, summary("payment-service timed out"))
        .or_fail("finish the run");
    store
        .record_evaluation(run_id, &json!({"groundedness": 0.9}))
        .or_fail("evaluate the run");
    recorder
}

/// `n` finished runs `PREFIX-0`… of session `s`, each with a 2,000-character tool output:
/// what retention and compaction tests fill a store with.
pub fn fill_runs(store: &Store, prefix: &str, n: usize, offset_ms: i64) {
    for i in 0..n {
        let run_id = format!("{prefix}-{i}");
        let rec = store
            .create_run(new_run(&run_id, "s", offset_ms + i as i64))
            .or_fail("create a run");
        let config = RunConfig::new("s", &run_id);
        let mut observer = EngineObserver(rec.clone());
        for (k, (node, status)) in PASS_PATH.iter().enumerate() {
            Observer::<Status>::event(&mut observer, &event(k as u32 + 1, node, *status));
        }
        rec.agent_step(&config, &step(AgentRole::Executor, 1, StepStatus::Ok));
        rec.model_exchange(&config, &exchange_ok(AgentRole::Executor, 1));
        rec.record_own(invocation(
            &run_id,
            "s",
            1,
            json!({"matches": [{"line": "x".repeat(2_000)}]}),
        ));
        assert!(rec.take_error().is_none());
        store
            .finish_success(&run_id, summary("answer"))
            .or_fail("finish a run");
        store
            .record_evaluation(&run_id, &json!({"n": i}))
            .or_fail("evaluate a run");
    }
}
