//! The run store in one process, on both backends: schema creation and refusal, the full
//! lifecycle of every record type, per-run scoping, when held events are committed, the
//! interrupted-run sweep, retention and where secrets go. Every test here whose behaviour is a
//! guarantee of the run store port runs once per backend from one definition
//! (`diag_testkit::backends`: a fresh SQLite file, then a fresh database on the suite's
//! PostgreSQL 15 server), reading back through the port and, where a test looks at the stored
//! rows themselves, with the same SQL on both (the tables of `SHARED_TABLES`); a few checks of
//! a conformance test are of the SQLite file only (its pragmas, integrity check, tool catalog
//! table and blob-split requests) and sit beside the shared ones.
//!
//! SQLite-only tests, because what they test is the file:
//! - `a_write_protected_file_reads_but_refuses_writes`: file permissions and SQLite's
//!   read-only open. PostgreSQL counterpart (the root's `tests/it/`):
//!   `store_backends::a_read_only_postgres_database_reads_but_refuses_writes`.
//! - `an_uncreatable_location_is_a_clear_error`: folders and non-database files. PostgreSQL
//!   counterpart: `store_backends::bad_postgres_stores_are_refused_with_one_line_and_nothing_written`
//!   (an unreachable server, refused credentials).
//! - `a_writer_waits_for_a_short_lock_and_reports_a_long_one_as_busy`: SQLite's one write lock
//!   and its busy timeout (PostgreSQL locks rows and has no store-wide write lock).
//!   Concurrent writers on both backends:
//!   `store_concurrency::eight_writers_on_eight_hosts_lose_nothing_in_one_store`.
//! - `checkpoints_run_in_the_background_and_a_closed_store_leaves_no_wal`: the WAL file and
//!   its checkpoints.
//! - `repeated_fill_and_gc_does_not_grow_the_file`: the file's size after incremental vacuum
//!   (the PostgreSQL server reclaims space by autovacuum, not diag).
//!
//! The checks across processes (writers at once, a writer killed on this host or on another,
//! swept at once or once its lease has run out) are in the root's `tests/it/store_concurrency.rs`,
//! on both backends. The root's `tests/it/store_blobs.rs` is the SQLite file's compaction (request parts stored once by
//! sha256, compressed texts) and its migrations from earlier schemas, which have no
//! PostgreSQL counterpart: that backend stores a request whole and has had one schema.

use diag_testkit::backends::{for_each_backend, for_each_fresh, kind, EngineObserver, Fresh, Kind};
use diag_testkit::records;

use std::time::Duration;

use diag_core::agent::runtime::{RunHooks, StepStatus};
use diag_core::agent::AgentRole;
use diag_core::graph::{NodeKind, Observer, RunConfig};
use diag_core::hash::request_sha256;
use diag_core::protocol::Verdict;
use diag_core::store::{FinishError, RunReader};
use diag_core::store::{Recorder, Store, StoreErrorKind};
use diag_core::store::{RunFilter, RunStatus, RunSummary, INTERRUPTED};
use diag_core::tools::InvocationLog;
use diag_diagnosis::{FallbackKind, Status};
use diag_store_sqlite::{SqliteError as StoreError, SqliteStore};
use records::*;
use serde_json::json;

fn temp() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("diag.db");
    (dir, path)
}

/// Records a complete pass run through the recorder's hooks, as a live run would.
fn record_pass_run(store: &Store, run_id: &str, session: &str, offset_ms: i64) -> Recorder {
    let recorder = store
        .create_run(new_run(run_id, session, offset_ms))
        .unwrap();
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
        .unwrap();
    store
        .record_evaluation(run_id, &json!({"groundedness": 0.9}))
        .unwrap();
    recorder
}

/// The store's schema as an operator would list it: every statement SQLite keeps; every
/// column, index and trigger PostgreSQL keeps.
fn schema(fresh: &Fresh) -> Vec<String> {
    if fresh.is_sqlite() {
        fresh.query_rows("SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY name")
    } else {
        fresh.query_rows(
            "SELECT x FROM ( \
               SELECT format('%s.%s %s %s %s', table_name, column_name, data_type, is_nullable, \
                             column_default) AS x \
               FROM information_schema.columns WHERE table_schema = current_schema() \
               UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() \
               UNION ALL SELECT tgname::text FROM pg_trigger WHERE NOT tgisinternal \
             ) s ORDER BY x",
        )
    }
}

/// Whether the store holds a table of this name.
fn has_table(fresh: &Fresh, table: &str) -> bool {
    let sql = if fresh.is_sqlite() {
        format!("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = '{table}'")
    } else {
        format!(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() \
             AND tablename = '{table}'"
        )
    };
    fresh.query(&sql) == "1"
}

/// The SQLite store's tool catalogs (a table of its own; PostgreSQL keeps the catalog in the
/// run row): checked on SQLite only.
fn assert_tool_catalogs(fresh: &Fresh, n: i64) {
    if let Some(path) = fresh.sqlite_path() {
        assert_eq!(counts(path)[6], n, "tool catalogs");
    }
}

#[test]
fn migrates_an_empty_store_and_reopens_idempotently() {
    for_each_fresh(|fresh| {
        let store = fresh.open();
        if let Some(s) = fresh.sqlite_store() {
            assert!(s.path().exists(), "parent folders and file are created");
            assert!(!s.is_read_only());
        }
        drop(store);

        assert_eq!(fresh.stored_schema_version(), fresh.schema_version());
        if fresh.is_sqlite() {
            assert_eq!(fresh.query("PRAGMA journal_mode"), "wal");
            assert_eq!(
                fresh.query("PRAGMA auto_vacuum"),
                "2",
                "INCREMENTAL, chosen before the first table"
            );
        }
        let before = schema(fresh);
        for t in diag_testkit::backends::SHARED_TABLES {
            assert!(has_table(fresh, t), "{t}");
        }
        if fresh.is_sqlite() {
            for t in TABLES {
                assert!(
                    before.iter().any(|s| s.contains(&format!("TABLE {t} "))),
                    "{t}"
                );
            }
        }

        for _ in 0..3 {
            let store = fresh.open();
            record_pass_run(
                &store,
                &format!(
                    "run-{}",
                    store.list_runs(&RunFilter::default()).unwrap().len()
                ),
                "s",
                0,
            );
        }
        assert_eq!(schema(fresh), before, "reopening changes no schema");
        assert_eq!(fresh.stored_schema_version(), fresh.schema_version());
        assert_eq!(fresh.open().count_runs().unwrap(), 3);
        if let Some(path) = fresh.sqlite_path() {
            assert_eq!(integrity(path), "ok");
        }
    });
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    for_each_fresh(|fresh| {
        drop(fresh.open());
        let newer = fresh.schema_version() + 7;
        fresh.set_schema_version(newer);
        let err = fresh.try_open().expect_err("a newer schema is refused");
        assert_eq!(
            kind(&err),
            Kind::NewerSchema {
                found: newer,
                supported: fresh.schema_version()
            },
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("newer") && text.contains(&fresh.named_in_errors()),
            "{text}"
        );
        assert_eq!(fresh.stored_schema_version(), newer, "never downgraded");
    });
}

#[test]
fn a_foreign_database_is_refused() {
    for_each_fresh(|fresh| {
        if let Some(path) = fresh.sqlite_path() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        }
        fresh.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY);");
        let err = fresh.try_open().expect_err("refused");
        assert_eq!(kind(&err), Kind::ForeignDatabase, "{err}");
        assert!(err.to_string().contains("not a diag run store"), "{err}");
        assert!(!has_table(fresh, "diagnosis_run"), "nothing created");
        assert!(has_table(fresh, "customers"));
    });
}

#[test]
fn full_lifecycle_round_trips_every_record() {
    for_each_fresh(|fresh| {
        let store = fresh.open();
        let run = new_run("run-1", "session-1", 0);
        let recorder = store.create_run(run.clone()).unwrap();
        assert_eq!(recorder.run_id(), "run-1");
        assert_eq!(recorder.session_id(), "session-1");

        let running = store.get_run("run-1").unwrap().unwrap();
        assert_eq!(running.status, RunStatus::Running);
        assert_eq!(running.owner_pid, std::process::id());
        assert_eq!(running.tools, run.tools);
        assert!(running.path.is_empty());

        // The engine's observer, the runtime's hooks and the invocation log, each as a trait.
        let config = RunConfig::new("session-1", "run-1");
        let events: Vec<_> = PASS_PATH
            .iter()
            .enumerate()
            .map(|(i, (n, s))| event(i as u32 + 1, n, *s))
            .collect();
        let mut observer: Box<dyn Observer<Status>> = Box::new(EngineObserver(recorder.clone()));
        let hooks: std::sync::Arc<dyn RunHooks> = std::sync::Arc::new(recorder.clone());
        let log: std::sync::Arc<dyn InvocationLog> = std::sync::Arc::new(recorder.clone());
        let steps = vec![
            step(AgentRole::Planner, 1, StepStatus::Ok),
            step(AgentRole::Executor, 1, StepStatus::Ok),
            step(AgentRole::Executor, 2, StepStatus::Transient),
        ];
        let exchanges = vec![
            exchange_ok(AgentRole::Planner, 1),
            exchange_ok(AgentRole::Executor, 1),
            exchange_err(AgentRole::Executor, 2),
        ];
        let invocations: Vec<_> = (1..=3)
            .map(|n| invocation("run-1", "session-1", n, json!({"matches": [{"line": format!("upstream returned 502 #{n}")}], "truncated": false})))
            .collect();
        observer.node_started("planner", NodeKind::Agent, 1, 1);
        observer.event(&events[0]);
        hooks.agent_step(&config, &steps[0]);
        hooks.model_exchange(&config, &exchanges[0]);
        observer.event(&events[1]);
        for (s, x) in steps[1..].iter().zip(&exchanges[1..]) {
            hooks.agent_step(&config, s);
            hooks.model_exchange(&config, x);
        }
        for inv in &invocations {
            log.record_own(inv.clone());
        }
        for e in &events[2..] {
            observer.event(e);
        }
        // Events are held until the run next waits on the outside world; an explicit flush is
        // that moment here.
        recorder.flush();
        assert!(recorder.take_error().is_none());
        assert_eq!(recorder.failed_writes(), 0);

        // Everything is readable while the run is still RUNNING.
        assert_eq!(store.events("run-1").unwrap().len(), 6);
        assert_eq!(log.invocations("run-1"), invocations);

        let mut done = summary("payment-service timed out (c1)");
        done.degraded = true;
        done.fallback_kind = Some(FallbackKind::PostVerification);
        done.effective_verdict = Some(Verdict::LowConfid);
        store.finish_success("run-1", done.clone()).unwrap();
        store
            .record_evaluation("run-1", &json!({"groundedness": 0.92, "claims": 3}))
            .unwrap();

        let row = store.get_run("run-1").unwrap().unwrap();
        assert_eq!(row.status, RunStatus::Success);
        assert_eq!(
            row.answer.as_deref(),
            Some("payment-service timed out (c1)")
        );
        assert_eq!(row.failure, None);
        assert_eq!(row.question, run.question);
        assert_eq!(row.session_id, "session-1");
        assert_eq!(row.started_at, run.started_at);
        assert_eq!(row.finished_at, done.finished_at);
        assert_eq!(row.duration_ms, Some(5_000));
        assert!(row.degraded);
        assert_eq!(row.effective_verdict, Some(Verdict::LowConfid));
        assert_eq!(row.fallback_kind, Some(FallbackKind::PostVerification));
        assert_eq!(row.self_evaluation, done.self_evaluation);
        assert_eq!(
            row.path,
            PASS_PATH
                .iter()
                .map(|(n, _)| n.to_string())
                .collect::<Vec<_>>()
        );
        // Counts come from the stored rows.
        assert_eq!(row.step_count, 3);
        assert_eq!(row.tool_count, 3);
        assert_eq!(
            row.prompt_tokens,
            steps.iter().map(|s| s.prompt_tokens).sum::<u64>()
        );
        assert_eq!(
            row.completion_tokens,
            steps.iter().map(|s| s.completion_tokens).sum::<u64>()
        );

        let stored_events = store.events("run-1").unwrap();
        for (stored, original) in stored_events.iter().zip(&events) {
            assert_eq!(stored.seq, original.seq);
            assert_eq!(stored.node, original.node);
            assert_eq!(stored.attempt, original.attempt);
            assert_eq!(stored.round, original.round);
            assert_eq!(stored.status, original.status.to_string());
            assert_eq!(stored.started_at, original.started_at);
            assert_eq!(stored.duration_ms, original.duration_ms);
            assert_eq!(stored.detail, original.detail);
        }

        let stored_steps = store.agent_steps("run-1").unwrap();
        assert_eq!(
            stored_steps.iter().map(|s| s.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(
            stored_steps.into_iter().map(|s| s.step).collect::<Vec<_>>(),
            steps
        );

        let stored_exchanges = store.exchanges("run-1").unwrap();
        assert_eq!(stored_exchanges.len(), 3);
        for (stored, original) in stored_exchanges.iter().zip(&exchanges) {
            assert_eq!(stored.exchange, *original);
            assert_eq!(
                stored.request_sha256,
                request_sha256(&original.request).unwrap()
            );
            assert_eq!(stored.request_sha256.len(), 64);
        }
        let error_json =
            fresh.query("SELECT error FROM model_exchange WHERE run_id = 'run-1' AND seq = 3");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&error_json).unwrap(),
            json!({"class": "transient", "message": "HTTP 503 Service Unavailable", "retry_after_ms": 2000,
                   "status": 503}),
            "the run file's error shape"
        );

        assert_eq!(store.invocations("run-1").unwrap(), invocations);
        let evaluation = store.evaluation("run-1").unwrap().unwrap();
        assert_eq!(
            evaluation.metrics,
            json!({"groundedness": 0.92, "claims": 3})
        );
        assert_eq!(store.evaluation("nope").unwrap(), None);
        assert_eq!(store.get_run("nope").unwrap(), None);

        drop((store, recorder, hooks, log, observer));
        if let Some(path) = fresh.sqlite_path() {
            assert_eq!(integrity(path), "ok");
        }
        // Re-opened, the same rows come back.
        let store = fresh.open();
        assert_eq!(store.get_run("run-1").unwrap().unwrap(), row);
    });
}

#[test]
fn request_sha256_is_over_the_canonical_request() {
    let a = request(AgentRole::Verifier, "{\"b\":1,\"a\":2}");
    let same = a.clone();
    assert_eq!(request_sha256(&a).unwrap(), request_sha256(&same).unwrap());
    let other = request(AgentRole::Verifier, "{\"b\":1,\"a\":3}");
    assert_ne!(request_sha256(&a).unwrap(), request_sha256(&other).unwrap());

    for_each_fresh(|fresh| {
        let store = fresh.open();
        let rec = store.create_run(new_run("r", "s", 0)).unwrap();
        rec.model_exchange(
            &RunConfig::new("s", "r"),
            &exchange_ok(AgentRole::Planner, 1),
        );
        assert!(rec.take_error().is_none());
        let sha = fresh.query("SELECT request_sha256 FROM model_exchange");
        // The stored request: on SQLite the column holds its skeleton and the whole text is
        // rebuilt from its blobs; PostgreSQL keeps the whole text in the column.
        let text = match fresh.sqlite_path() {
            Some(path) => request_text(path, "r", 1),
            None => {
                fresh.query("SELECT request FROM model_exchange WHERE run_id = 'r' AND seq = 1")
            }
        };
        assert_eq!(sha, diag_core::hash::sha256_hex(text.as_bytes()));
        assert!(
            text.starts_with("{\"max_tokens\":1024,\"messages\":["),
            "keys sorted: {text}"
        );
        assert_eq!(
            store.exchanges("r").unwrap()[0].request_sha256,
            sha,
            "read back as stored"
        );
    });
}

#[test]
fn a_recorder_refuses_an_invocation_its_run_config_does_not_own() {
    for_each_backend(|_, store| {
        let a = store
            .create_run(new_run("run-a", "shared-session", 0))
            .unwrap();
        store
            .create_run(new_run("run-b", "shared-session", 1))
            .unwrap();
        // Run a's recorder, told by run a's config about an invocation that names run b.
        let config = diag_core::graph::RunConfig::new("shared-session", "run-a");
        let refused = a.record(
            &config,
            invocation("run-b", "shared-session", 1, json!({"matches": []})),
        );
        let err = a.take_error().expect("refused").to_string();
        assert_eq!(refused, Err(err.clone()), "the caller is told, too");
        assert!(
            err.contains("inv-1 of run run-b") && err.contains("reported by run run-a"),
            "{err}"
        );
        assert!(store.invocations("run-a").unwrap().is_empty());
        assert!(store.invocations("run-b").unwrap().is_empty());
        // The same with another session.
        assert!(a
            .record(
                &config,
                invocation("run-a", "other-session", 1, json!({"matches": []})),
            )
            .is_err());
        assert!(a.take_error().is_some());
        assert!(store.invocations("run-a").unwrap().is_empty());
        // Its own invocation goes in.
        a.record(
            &config,
            invocation("run-a", "shared-session", 1, json!({"matches": []})),
        )
        .expect("its own invocation is kept");
        assert!(a.take_error().is_none());
        assert_eq!(store.invocations("run-a").unwrap().len(), 1);
    });
}

#[test]
fn invocations_are_scoped_to_their_run() {
    for_each_backend(|_, store| {
        let a = store
            .create_run(new_run("run-a", "shared-session", 0))
            .unwrap();
        let b = store
            .create_run(new_run("run-b", "shared-session", 1))
            .unwrap();
        // Same run-local ids in both runs, recorded interleaved; eleven of them so that
        // `inv-10` would sort before `inv-2` as text.
        for n in 1..=11 {
            a.record_own(invocation(
                "run-a",
                "shared-session",
                n,
                json!({"run": "a", "n": n}),
            ));
            b.record_own(invocation(
                "run-b",
                "shared-session",
                n,
                json!({"run": "b", "n": n}),
            ));
        }
        assert!(a.take_error().is_none() && b.take_error().is_none());
        for (log, run) in [(&a, "a"), (&b, "b")] {
            let seen = log.invocations(&format!("run-{run}"));
            assert_eq!(seen.len(), 11);
            for (i, inv) in seen.iter().enumerate() {
                assert_eq!(
                    inv.invocation_id,
                    format!("inv-{}", i + 1),
                    "recording order"
                );
                assert_eq!(inv.output["run"], run, "only this run's rows");
                assert_eq!(inv.run_id, format!("run-{run}"));
            }
        }
        // Through either recorder, a lookup is scoped by the run id asked for.
        assert_eq!(a.invocations("run-b")[0].output["run"], "b");
        assert!(a.invocations("run-c").is_empty());
    });
}

#[test]
fn lifecycle_rules_are_enforced_as_errors() {
    for_each_backend(|_, store| {
        let rec = store.create_run(new_run("r1", "s", 0)).unwrap();

        let dup = store.create_run(new_run("r1", "s", 0)).err().unwrap();
        assert_eq!(kind(&dup), Kind::DuplicateRun("r1".into()), "{dup}");
        assert_eq!(dup.to_string(), "run r1 already exists");
        let empty = store.create_run(new_run(" ", "s", 0)).err().unwrap();
        assert_eq!(kind(&empty), Kind::Invalid, "{empty}");
        assert_eq!(
            empty.to_string(),
            "invalid record: a run needs a non-empty run_id"
        );

        store
            .record_invocation(&invocation("r1", "s", 1, json!({})))
            .unwrap();
        let again = store
            .record_invocation(&invocation("r1", "s", 1, json!({})))
            .unwrap_err();
        assert_eq!(kind(&again), Kind::Duplicate("tool invocation"), "{again}");
        assert_eq!(
            again.to_string(),
            "tool invocation inv-1 of run r1 is already recorded"
        );
        store
            .record_event("r1", &event(1, "planner", Status::Completed))
            .unwrap();
        let again = store
            .record_event("r1", &event(1, "planner", Status::Completed))
            .unwrap_err();
        assert_eq!(kind(&again), Kind::Duplicate("event"), "{again}");
        assert_eq!(again.to_string(), "event 1 of run r1 is already recorded");

        let unknown = store
            .record_event("ghost", &event(1, "planner", Status::Completed))
            .unwrap_err();
        assert_eq!(
            kind(&unknown),
            Kind::UnknownRun("ghost".into()),
            "{unknown}"
        );
        assert_eq!(
            kind(&store.finish_success("ghost", summary("x")).unwrap_err()),
            Kind::UnknownRun("ghost".into())
        );

        let blank = store.finish_success("r1", summary("  \n")).unwrap_err();
        assert_eq!(kind(&blank), Kind::Invalid, "{blank}");
        assert_eq!(
            blank.to_string(),
            "invalid record: run r1 cannot be SUCCESS without a non-blank answer"
        );
        let none = store
            .finish_success("r1", RunSummary::default())
            .unwrap_err();
        assert_eq!(kind(&none), Kind::Invalid, "{none}");
        let early = store.record_evaluation("r1", &json!({})).unwrap_err();
        assert_eq!(
            kind(&early),
            Kind::NotEvaluable("RUNNING".into()),
            "{early}"
        );

        store
            .finish_failed("r1", "engine error: step limit", RunSummary::default())
            .unwrap();
        let row = store.get_run("r1").unwrap().unwrap();
        assert_eq!(row.status, RunStatus::Failed);
        assert_eq!(row.failure.as_deref(), Some("engine error: step limit"));
        assert_eq!(row.path, ["planner"]);
        assert_eq!(row.tool_count, 1);
        assert!(
            row.finished_at.is_some(),
            "the store's clock fills a missing finish time"
        );

        let twice = store.finish_success("r1", summary("late")).unwrap_err();
        assert_eq!(kind(&twice), Kind::NotRunning("FAILED".into()), "{twice}");
        assert_eq!(
            twice.to_string(),
            "run r1 is FAILED, not RUNNING; it cannot be finished again"
        );
        let failed_eval = store.record_evaluation("r1", &json!({})).unwrap_err();
        assert_eq!(
            kind(&failed_eval),
            Kind::NotEvaluable("FAILED".into()),
            "{failed_eval}"
        );

        // A finished run's trace is final; through the recorder's hooks the error is kept.
        let mut observer = EngineObserver(rec.clone());
        Observer::<Status>::event(&mut observer, &event(2, "executor", Status::Completed));
        rec.record_own(invocation("r1", "s", 2, json!({})));
        assert_eq!(rec.failed_writes(), 2);
        let kept = rec.take_error().expect("the first error is kept");
        assert_eq!(kind(&kept), Kind::NotRunning("FAILED".into()), "{kept}");
        assert!(rec.take_error().is_none());
        assert_eq!(store.events("r1").unwrap().len(), 1);
    });
}

#[test]
fn evaluation_is_replaced_not_duplicated() {
    for_each_fresh(|fresh| {
        let store = fresh.open();
        record_pass_run(&store, "r", "s", 0);
        store.record_evaluation("r", &json!({"v": 2})).unwrap();
        assert_eq!(
            store.evaluation("r").unwrap().unwrap().metrics,
            json!({"v": 2})
        );
        assert_eq!(fresh.counts()[5], 1);
    });
}

#[test]
fn list_runs_filters_and_orders_newest_first() {
    for_each_backend(|_, store| {
        record_pass_run(&store, "a1", "alpha", 0);
        record_pass_run(&store, "b1", "beta", 1_000);
        store.create_run(new_run("a2", "alpha", 2_000)).unwrap();
        record_pass_run(&store, "a3", "alpha", -5_000); // started earliest, created last
        let ids = |f: RunFilter| -> Vec<String> {
            store
                .list_runs(&f)
                .unwrap()
                .into_iter()
                .map(|r| r.run_id)
                .collect()
        };
        assert_eq!(ids(RunFilter::default()), ["a3", "a2", "b1", "a1"]);
        assert_eq!(
            ids(RunFilter {
                session_id: Some("alpha".into()),
                ..Default::default()
            }),
            ["a3", "a2", "a1"]
        );
        assert_eq!(
            ids(RunFilter {
                status: Some(RunStatus::Running),
                ..Default::default()
            }),
            ["a2"]
        );
        assert_eq!(
            ids(RunFilter {
                session_id: Some("alpha".into()),
                status: Some(RunStatus::Success),
                limit: Some(1),
            }),
            ["a3"]
        );
        assert!(ids(RunFilter {
            limit: Some(0),
            ..Default::default()
        })
        .is_empty());
    });
    assert_eq!("failed".parse::<RunStatus>().unwrap(), RunStatus::Failed);
    assert!("DEGRADED".parse::<RunStatus>().is_err());
}

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn opening_sweeps_runs_of_dead_owners_only() {
    for_each_fresh(|fresh| {
        let store = fresh.open();
        let orphan = store.create_run(new_run("orphan", "s", 0)).unwrap();
        let mut observer = EngineObserver(orphan.clone());
        for (i, (node, status)) in PASS_PATH[..2].iter().enumerate() {
            Observer::<Status>::event(&mut observer, &event(i as u32 + 1, node, *status));
        }
        orphan.agent_step(
            &RunConfig::new("s", "orphan"),
            &step(AgentRole::Planner, 1, StepStatus::Ok),
        );
        orphan.record_own(invocation("orphan", "s", 1, json!({})));
        assert!(orphan.take_error().is_none());
        store.create_run(new_run("mine", "s", 1)).unwrap();
        store.create_run(new_run("reused-pid", "s", 2)).unwrap();
        drop((store, observer, orphan));

        fresh.execute(&format!(
            "UPDATE diagnosis_run SET owner_pid = {} WHERE run_id = 'orphan'",
            dead_pid()
        ));
        // This process's pid, but the start token of an earlier process that had the same pid.
        let token =
            fresh.query("SELECT owner_token FROM diagnosis_run WHERE run_id = 'reused-pid'");
        let (prefix, start) = token.rsplit_once(':').unwrap();
        let earlier = format!(
            "{prefix}:{}",
            start.parse::<u64>().unwrap().saturating_sub(1)
        );
        fresh.execute(&format!(
            "UPDATE diagnosis_run SET owner_token = '{earlier}' WHERE run_id = 'reused-pid'"
        ));

        let store = fresh.open();
        let orphan = store.get_run("orphan").unwrap().unwrap();
        assert_eq!(orphan.status, RunStatus::Failed);
        assert_eq!(orphan.failure.as_deref(), Some(INTERRUPTED));
        assert!(orphan.finished_at.is_some());
        assert_eq!(orphan.path, ["planner", "executor"], "partial trace kept");
        assert_eq!(orphan.step_count, 1);
        assert_eq!(orphan.tool_count, 1);
        assert_eq!(store.events("orphan").unwrap().len(), 2);
        assert_eq!(store.invocations("orphan").unwrap().len(), 1);

        let reused = store.get_run("reused-pid").unwrap().unwrap();
        assert_eq!(
            reused.status,
            RunStatus::Failed,
            "a reused pid does not keep a run alive"
        );

        let mine = store.get_run("mine").unwrap().unwrap();
        assert_eq!(
            mine.status,
            RunStatus::Running,
            "the live owner's run is left alone"
        );
        assert_eq!(store.sweep_interrupted().unwrap(), 0);
        // Its owner can still finish it.
        store.finish_success("mine", summary("ok")).unwrap();
    });
}

fn fill(store: &Store, prefix: &str, n: usize, offset_ms: i64) {
    for i in 0..n {
        let run_id = format!("{prefix}-{i}");
        let rec = store
            .create_run(new_run(&run_id, "s", offset_ms + i as i64))
            .unwrap();
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
        store.finish_success(&run_id, summary("answer")).unwrap();
        store.record_evaluation(&run_id, &json!({"n": i})).unwrap();
    }
}

#[test]
fn gc_by_age_and_by_count_removes_everything_a_run_owns() {
    for_each_fresh(|fresh| {
        let day = 86_400_000;
        fill(&fresh.open_at(0), "old", 5, 0); // stored ten days before the gc
        fill(&fresh.open_at(9 * day), "new", 5, 0); // stored one day before
        let store = fresh.open_at(10 * day);
        store.create_run(new_run("live", "s", 0)).unwrap(); // oldest start, but RUNNING here
        assert_eq!(fresh.counts(), [11, 60, 10, 10, 10, 10]);
        assert_tool_catalogs(fresh, 1);

        let report = store.gc(None, None).unwrap();
        assert_eq!(report.runs_deleted, 0, "no rule, no deletion");

        let report = store
            .gc(Some(Duration::from_millis(5 * day as u64)), None)
            .unwrap();
        assert_eq!(report.runs_deleted, 5);
        assert_eq!(fresh.counts(), [6, 30, 5, 5, 5, 5]);
        assert_tool_catalogs(fresh, 1);
        assert!(store.get_run("live").unwrap().is_some());
        assert!(store.get_run("old-0").unwrap().is_none());

        let report = store.gc(None, Some(3)).unwrap();
        assert_eq!(
            report.runs_deleted, 3,
            "keeps the 3 most recently created runs"
        );
        let left: Vec<String> = store
            .list_runs(&RunFilter::default())
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(left, ["live", "new-4", "new-3"]);
        assert_eq!(fresh.counts(), [3, 12, 2, 2, 2, 2]);
        assert_tool_catalogs(fresh, 1);

        let runs_deleted = match fresh.sqlite_store() {
            // The file is checkpointed and gives its space back.
            Some(s) => {
                let report = s.collect(None, Some(0)).unwrap();
                assert!(report.checkpoint_complete);
                assert!(report.bytes_after <= report.bytes_before);
                report.runs_deleted
            }
            None => store.gc(None, Some(0)).unwrap().runs_deleted,
        };
        assert_eq!(runs_deleted, 2);
        assert_eq!(fresh.counts(), [1, 0, 0, 0, 0, 0], "the RUNNING run stays");
        assert_tool_catalogs(fresh, 1);

        store
            .finish_failed("live", "cancelled", RunSummary::default())
            .unwrap();
        store.gc(None, Some(0)).unwrap();
        assert_eq!(fresh.counts(), [0, 0, 0, 0, 0, 0]);
        assert_tool_catalogs(fresh, 0); // an unused catalog goes too
        if let Some(s) = fresh.sqlite_store() {
            assert_eq!(s.integrity_check().unwrap(), "ok");
        }
    });
}

#[test]
fn gc_deletes_more_runs_than_one_batch_holds() {
    // More than two batches of either backend (SQLite deletes 256 runs per transaction,
    // PostgreSQL 500), so that the last batch is a partial one.
    const RUNS: usize = 1_101;
    for_each_backend(|_, store| {
        for i in 0..RUNS {
            let run_id = format!("r-{i}");
            let rec = store.create_run(new_run(&run_id, "s", 0)).unwrap();
            rec.record_own(invocation(&run_id, "s", 1, json!({"n": i})));
            assert!(rec.take_error().is_none());
            store
                .finish_failed(&run_id, "engine: stopped", RunSummary::default())
                .unwrap();
        }
        store.create_run(new_run("live", "s", 0)).unwrap();
        let report = store.gc(None, Some(1)).unwrap();
        assert_eq!(report.runs_deleted, RUNS as u64);
        assert_eq!(store.count_runs().unwrap(), 1);
        assert!(store.get_run("live").unwrap().is_some());
        assert!(store.invocations("r-0").unwrap().is_empty());
        assert!(store
            .invocations(&format!("r-{}", RUNS - 1))
            .unwrap()
            .is_empty());
    });
}
// ---------------------------------------------------------------------------------------------
// When orchestration events are committed, and finishing with them
// ---------------------------------------------------------------------------------------------

fn stored_nodes(store: &Store, run_id: &str) -> Vec<String> {
    store
        .events(run_id)
        .unwrap()
        .into_iter()
        .map(|e| e.node)
        .collect()
}

/// Reports `PASS_PATH[i]`'s event and the start of the node after it, as the engine does.
fn node_done(observer: &mut EngineObserver, i: usize) {
    let (node, status) = PASS_PATH[i];
    Observer::<Status>::event(observer, &event(i as u32 + 1, node, status));
    if let Some((next, _)) = PASS_PATH.get(i + 1) {
        let kind = if matches!(*next, "gatekeeper" | "verified_input") {
            NodeKind::Deterministic
        } else {
            NodeKind::Agent
        };
        Observer::<Status>::node_started(observer, next, kind, 1, 1);
    }
}

#[test]
fn events_are_committed_before_each_agent_node_and_with_the_finish() {
    for_each_backend(|_, store| {
        let rec = store.create_run(new_run("r", "s", 0)).unwrap();
        let mut observer = EngineObserver(rec.clone());
        Observer::<Status>::node_started(&mut observer, "planner", NodeKind::Agent, 1, 1);

        node_done(&mut observer, 0); // planner; the executor (an agent) starts
        assert_eq!(stored_nodes(&store, "r"), ["planner"]);
        node_done(&mut observer, 1); // executor; the gatekeeper (deterministic) starts
        assert_eq!(
            stored_nodes(&store, "r"),
            ["planner"],
            "held while code runs"
        );
        node_done(&mut observer, 2); // gatekeeper; verified_input starts
        assert_eq!(stored_nodes(&store, "r"), ["planner"]);
        node_done(&mut observer, 3); // verified_input; the verifier (an agent) starts
        assert_eq!(
            stored_nodes(&store, "r"),
            ["planner", "executor", "gatekeeper", "verified_input"],
            "committed before the model call"
        );
        node_done(&mut observer, 4); // verifier; the composer starts
        node_done(&mut observer, 5); // composer: the last event, held
        assert_eq!(stored_nodes(&store, "r").len(), 5);
        assert!(rec.take_error().is_none());

        let report = store
            .finish_success_evaluated("r", summary("payment-service timed out"), &json!({"g": 1}))
            .unwrap();
        assert!(report.evaluation_error.is_none());
        let run = store.get_run("r").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Success);
        assert_eq!(
            run.path,
            PASS_PATH.map(|(n, _)| n),
            "the finish carried the last event"
        );
        assert_eq!(
            store.evaluation("r").unwrap().unwrap().metrics,
            json!({"g": 1})
        );
    });
}

#[test]
fn any_other_trace_write_and_a_dropped_recorder_commit_held_events() {
    for_each_backend(|_, store| {
        let rec = store.create_run(new_run("r", "s", 0)).unwrap();
        let mut observer = EngineObserver(rec.clone());
        let config = RunConfig::new("s", "r");
        Observer::<Status>::event(&mut observer, &event(1, "planner", Status::Completed));
        assert!(stored_nodes(&store, "r").is_empty());
        rec.agent_step(&config, &step(AgentRole::Executor, 1, StepStatus::Ok));
        assert_eq!(
            stored_nodes(&store, "r"),
            ["planner"],
            "an agent step flushes first"
        );

        Observer::<Status>::event(&mut observer, &event(2, "executor", Status::Completed));
        rec.record_own(invocation("r", "s", 1, json!({"matches": []})));
        assert_eq!(stored_nodes(&store, "r"), ["planner", "executor"]);

        Observer::<Status>::event(&mut observer, &event(3, "gatekeeper", Status::Pass));
        drop((rec, observer));
        assert_eq!(
            stored_nodes(&store, "r"),
            ["planner", "executor", "gatekeeper"],
            "the last recorder commits what it held"
        );
    });
}

#[test]
fn a_refused_held_event_blocks_success_and_the_failed_finish_keeps_the_rest() {
    for_each_fresh(|fresh| {
        let store = fresh.open();
        fresh.refuse(
            "lose_verifier",
            "INSERT",
            "orchestration_event",
            Some("NEW.node = 'verifier'"),
            "simulated storage failure",
        );
        let rec = store.create_run(new_run("r", "s", 0)).unwrap();
        let mut observer = EngineObserver(rec.clone());
        for (i, (node, status)) in PASS_PATH.iter().enumerate() {
            Observer::<Status>::event(&mut observer, &event(i as u32 + 1, node, *status));
        }
        let err = store
            .finish_success_evaluated("r", summary("payment-service timed out"), &json!({}))
            .unwrap_err();
        assert!(matches!(err, FinishError::Trace(_)), "{err:?}");
        assert!(
            err.to_string().contains("simulated storage failure"),
            "{err}"
        );
        let run = store.get_run("r").unwrap().unwrap();
        assert_eq!(
            run.status,
            RunStatus::Running,
            "nothing of the finish was stored"
        );
        assert!(stored_nodes(&store, "r").is_empty());
        assert_eq!(store.evaluation("r").unwrap(), None);

        store
            .finish_failed(
                "r",
                "persistence: the trace could not be stored",
                RunSummary::default(),
            )
            .unwrap();
        let run = store.get_run("r").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Failed);
        assert_eq!(
            run.path,
            [
                "planner",
                "executor",
                "gatekeeper",
                "verified_input",
                "composer"
            ],
            "every event the store accepts is kept; the refused one is not invented"
        );
        drop((rec, observer));
        assert_eq!(
            stored_nodes(&store, "r").len(),
            5,
            "nothing is left to commit later"
        );
    });
}

/// A write of several rows stores each on its own: a model call whose step is refused keeps
/// its exchange, one whose exchange is refused keeps its step, and of the held events
/// committed together before an agent node, a refused one leaves the others stored. Each
/// refusal is reported once, naming its cause.
#[test]
fn a_refused_row_of_a_model_call_or_of_held_events_undoes_only_itself() {
    for_each_fresh(|fresh| {
        let store = fresh.open();
        let rec = store.create_run(new_run("r", "s", 0)).unwrap();
        let counts = |store: &Store| {
            (
                store.agent_steps("r").unwrap().len(),
                store.exchanges("r").unwrap().len(),
            )
        };

        // A model call of `turn` whose row in `table` is refused: one error, naming the
        // cause, and the call's other row stored.
        let refused_call = |turn: u32, table: &str, cause: &str, want: (usize, usize)| {
            fresh.refuse("refuse_row", "INSERT", table, None, cause);
            let errors = store.record_model_call(
                "r",
                &step(AgentRole::Executor, turn, StepStatus::Ok),
                &exchange_ok(AgentRole::Executor, turn),
            );
            fresh.allow("refuse_row", table);
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].to_string().contains(cause), "{}", errors[0]);
            assert_eq!(counts(&store), want, "the call's other row is kept");
        };
        refused_call(1, "agent_step", "no room for the step", (0, 1));
        refused_call(2, "model_exchange", "no room for the exchange", (1, 1));

        fresh.refuse(
            "refuse_gatekeeper",
            "INSERT",
            "orchestration_event",
            Some("NEW.node = 'gatekeeper'"),
            "no room for the event",
        );
        let mut observer = EngineObserver(rec.clone());
        for (i, (node, status)) in PASS_PATH.iter().enumerate().take(4) {
            Observer::<Status>::event(&mut observer, &event(i as u32 + 1, node, *status));
        }
        assert!(stored_nodes(&store, "r").is_empty(), "held so far");
        // The Verifier starts: the four held events are committed in one write.
        Observer::<Status>::node_started(&mut observer, "verifier", NodeKind::Agent, 1, 1);
        let e = rec.take_error().expect("the refused event is reported");
        assert!(e.to_string().contains("no room for the event"), "{e}");
        assert_eq!(
            rec.take_error().map(|e| e.to_string()),
            None,
            "reported once"
        );
        assert_eq!(
            stored_nodes(&store, "r"),
            ["planner", "executor", "verified_input"],
            "the other events are stored"
        );
    });
}

#[test]
fn a_refused_evaluation_in_the_finishing_transaction_leaves_the_success_standing() {
    for_each_fresh(|fresh| {
        let store = fresh.open();
        fresh.refuse(
            "refuse_evaluation",
            "INSERT",
            "evaluation",
            None,
            "simulated storage failure",
        );
        let rec = store.create_run(new_run("r", "s", 0)).unwrap();
        rec.observe_event(&event(1, "planner", Status::Completed));
        let report = store
            .finish_success_evaluated("r", summary("payment-service timed out"), &json!({}))
            .unwrap();
        let e = report.evaluation_error.expect("the refusal is reported");
        assert!(e.to_string().contains("simulated storage failure"), "{e}");
        let run = store.get_run("r").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Success);
        assert_eq!(run.path, ["planner"]);
        assert_eq!(store.evaluation("r").unwrap(), None);
    });
}

#[test]
fn a_run_finished_elsewhere_refuses_the_finish_and_its_held_events() {
    for_each_fresh(|fresh| {
        let store = fresh.open();
        let rec = store.create_run(new_run("r", "s", 0)).unwrap();
        rec.observe_event(&event(1, "planner", Status::Completed));
        // Another handle (as the sweep of another process would) finishes the run first;
        // this handle still holds its event.
        fresh
            .open()
            .finish_failed("r", INTERRUPTED, RunSummary::default())
            .unwrap();
        let err = store
            .finish_success_evaluated("r", summary("payment-service timed out"), &json!({}))
            .unwrap_err();
        assert!(
            matches!(&err, FinishError::Run(e) if kind(e) == Kind::NotRunning("FAILED".into())),
            "the run row is what could not be finished, held events or not: {err:?}"
        );
        let failed = store
            .finish_failed("r", "engine: stopped", RunSummary::default())
            .unwrap_err();
        assert_eq!(kind(&failed), Kind::NotRunning("FAILED".into()), "{failed}");
        let run = store.get_run("r").unwrap().unwrap();
        assert_eq!(
            run.failure.as_deref(),
            Some(INTERRUPTED),
            "the first finish stands"
        );
        assert!(run.path.is_empty());
        drop(rec);
        assert!(
            stored_nodes(&store, "r").is_empty(),
            "a finished trace is final"
        );
        assert_eq!(store.evaluation("r").unwrap(), None);
    });
}

#[test]
fn a_blank_answer_cannot_finish_success_even_with_an_evaluation() {
    for_each_backend(|_, store| {
        let _rec = store.create_run(new_run("r", "s", 0)).unwrap();
        let err = store
            .finish_success_evaluated("r", summary("  "), &json!({}))
            .unwrap_err();
        assert!(
            matches!(&err, FinishError::Run(e) if kind(e) == Kind::Invalid),
            "{err:?}"
        );
        assert_eq!(
            store.get_run("r").unwrap().unwrap().status,
            RunStatus::Running
        );
    });
}

#[test]
fn a_model_call_is_stored_as_its_step_and_its_exchange_together() {
    for_each_backend(|_, store| {
        store.create_run(new_run("r", "s", 0)).unwrap();
        let errors = store.record_model_call(
            "r",
            &step(AgentRole::Planner, 1, StepStatus::Ok),
            &exchange_ok(AgentRole::Planner, 1),
        );
        assert!(errors.is_empty(), "{errors:?}");
        let steps = store.agent_steps("r").unwrap();
        let exchanges = store.exchanges("r").unwrap();
        assert_eq!((steps.len(), exchanges.len()), (1, 1));
        assert_eq!(steps[0].step.agent, AgentRole::Planner);
        assert_eq!(exchanges[0].exchange.agent, AgentRole::Planner);
        // A finished run refuses both rows, each with its own error, and keeps what it had.
        store
            .finish_failed("r", "engine: stopped", RunSummary::default())
            .unwrap();
        let errors = store.record_model_call(
            "r",
            &step(AgentRole::Executor, 1, StepStatus::Ok),
            &exchange_ok(AgentRole::Executor, 1),
        );
        assert_eq!(errors.len(), 2, "{errors:?}");
        for e in &errors {
            assert_eq!(kind(e), Kind::NotRunning("FAILED".into()), "{e}");
        }
        assert_eq!(store.agent_steps("r").unwrap().len(), 1);
        assert_eq!(store.exchanges("r").unwrap().len(), 1);
    });
}

#[test]
fn a_sweep_that_cannot_write_leaves_the_store_open_and_the_run_for_later() {
    for_each_fresh(|fresh| {
        let store = fresh.open();
        store.create_run(new_run("orphan", "s", 0)).unwrap();
        drop(store);
        fresh.execute(&format!(
            "UPDATE diagnosis_run SET owner_pid = {} WHERE run_id = 'orphan'",
            dead_pid()
        ));
        // Any write to the runs fails, as on a full disk.
        fresh.refuse("refuse", "UPDATE", "diagnosis_run", None, "no room");

        // The store still opens and reads (so `trace` works and `gc` can free space); the run
        // waits, RUNNING, for a sweep that can write.
        let store = fresh
            .try_open()
            .expect("the store opens although the sweep failed");
        assert_eq!(
            store.get_run("orphan").unwrap().unwrap().status,
            RunStatus::Running
        );
        let refused = store.sweep_interrupted().unwrap_err();
        assert!(refused.to_string().contains("no room"), "{refused}");
        drop(store);
        fresh.allow("refuse", "diagnosis_run");
        let store = fresh.open();
        let run = store.get_run("orphan").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Failed);
        assert_eq!(run.failure.as_deref(), Some(INTERRUPTED));
    });
}

#[test]
fn secrets_are_stored_only_where_the_caller_put_them() {
    const SECRET: &str = "sk-test-SECRET";
    for_each_fresh(|fresh| {
        let store = fresh.open();
        let mut run = new_run("r", "s", 0);
        run.question = format!("why does auth fail with key {SECRET}?");
        let rec = store.create_run(run).unwrap();
        let config = RunConfig::new("s", "r");
        let mut observer = EngineObserver(rec.clone());
        for (i, (node, status)) in PASS_PATH.iter().enumerate() {
            Observer::<Status>::event(&mut observer, &event(i as u32 + 1, node, *status));
        }
        rec.agent_step(&config, &step(AgentRole::Executor, 1, StepStatus::Ok));
        rec.model_exchange(&config, &exchange_ok(AgentRole::Executor, 1));
        rec.record_own(invocation(
            "r",
            "s",
            1,
            json!({"matches": [{"line": format!("Authorization: Bearer {SECRET}")}]}),
        ));
        assert!(rec.take_error().is_none());
        store
            .finish_success("r", summary("rotate the key"))
            .unwrap();
        store.record_evaluation("r", &json!({"ok": true})).unwrap();

        // Every text column of every table, scanned for the secret.
        let found = match fresh.sqlite_path() {
            Some(path) => {
                let conn = raw(path);
                let mut found = Vec::new();
                for table in TABLES {
                    let columns: Vec<String> = conn
                        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                        .unwrap()
                        .query_map([], |r| r.get(0))
                        .unwrap()
                        .collect::<Result<_, _>>()
                        .unwrap();
                    for column in columns {
                        let hits: i64 = conn
                            .query_row(
                                &format!(
                                    "SELECT count(*) FROM {table} \
                                     WHERE instr(CAST({column} AS TEXT), ?1) > 0"
                                ),
                                [SECRET],
                                |r| r.get(0),
                            )
                            .unwrap();
                        if hits > 0 {
                            found.push(format!("{table}.{column}"));
                        }
                    }
                }
                found
            }
            // The columns are listed first (materialized, so that no other schema's table is
            // ever counted), then each is counted in a query of its own.
            None => fresh.query_rows(&format!(
                "WITH c AS MATERIALIZED (SELECT table_schema, table_name, column_name, \
                   ordinal_position FROM information_schema.columns \
                   WHERE table_schema = current_schema()) \
                 SELECT table_name || '.' || column_name FROM c \
                 WHERE (xpath('/row/n/text()', query_to_xml(format( \
                   'SELECT count(*) AS n FROM %I.%I WHERE strpos(CAST(%I AS text), %L) > 0', \
                   table_schema, table_name, column_name, '{SECRET}'), false, true, '')) \
                   )[1]::text::int > 0 \
                 ORDER BY table_name, ordinal_position"
            )),
        };
        // PostgreSQL keeps an invocation as the JSON of its record.
        let invocation_column = if fresh.is_sqlite() {
            "tool_invocation.output"
        } else {
            "tool_invocation.record"
        };
        assert_eq!(found, ["diagnosis_run.question", invocation_column]);
    });
}

// ---------------------------------------------------------------------------------------------
// SQLite-only: the file (see the module documentation)
// ---------------------------------------------------------------------------------------------

#[test]
fn repeated_fill_and_gc_does_not_grow_the_file() {
    let (_dir, path) = temp();
    let store = SqliteStore::open(&path).unwrap();
    let mut sizes = Vec::new();
    for cycle in 0..5 {
        fill(&Store::new(store.clone()), &format!("c{cycle}"), 150, 0);
        let report = store.collect(None, Some(0)).unwrap();
        assert_eq!(report.runs_deleted, 150);
        assert!(
            report.bytes_before > report.bytes_after,
            "gc gives space back: {report:?}"
        );
        sizes.push(store.file_bytes());
    }
    assert_eq!(counts(&path)[0], 0);
    let first = sizes[0];
    assert!(
        sizes.iter().all(|&s| s <= first + 64 * 1024),
        "file size stays bounded across cycles: {sizes:?}"
    );
    assert!(first < 256 * 1024, "an emptied store is small: {sizes:?}");
    assert_eq!(store.integrity_check().unwrap(), "ok");
}

#[test]
fn a_write_protected_file_reads_but_refuses_writes() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, path) = temp();
    let store = SqliteStore::open(&path).unwrap();
    record_pass_run(&Store::new(store.clone()), "r", "s", 0);
    drop(store);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();

    let store = SqliteStore::open(&path).expect("a read-only store still opens for reading");
    assert!(store.is_read_only());
    assert_eq!(
        store.get_run("r").unwrap().unwrap().status,
        RunStatus::Success
    );
    assert_eq!(store.events("r").unwrap().len(), 6);

    let handle = Store::new(store.clone());
    let err = handle.create_run(new_run("r2", "s", 0)).err().unwrap();
    assert_eq!(err.kind(), StoreErrorKind::ReadOnly, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("read-only") && text.contains("diag.db"),
        "{text}"
    );
    assert_eq!(
        handle
            .record_event("r", &event(7, "x", Status::Completed))
            .unwrap_err()
            .kind(),
        StoreErrorKind::ReadOnly
    );
    assert_eq!(
        handle.gc(None, Some(0)).unwrap_err().kind(),
        StoreErrorKind::ReadOnly
    );
    drop(handle);
    drop(store);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(integrity(&path), "ok");
}

#[test]
fn an_uncreatable_location_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-folder");
    std::fs::write(&file, "plain file").unwrap();
    let err = SqliteStore::open(file.join("sub").join("diag.db"))
        .err()
        .unwrap();
    assert!(matches!(err, StoreError::CreateDir { .. }), "{err}");
    assert!(err.to_string().contains("not-a-folder"), "{err}");

    // A folder where the file should be.
    let err = SqliteStore::open(dir.path()).err().unwrap();
    assert!(matches!(err, StoreError::Open { .. }), "{err}");
    assert!(!err.to_string().contains('\n'));

    // A file that is not a database at all.
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![0x42u8; 8192]).unwrap();
    let err = SqliteStore::open(&junk).err().unwrap();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
}

#[test]
fn a_writer_waits_for_a_short_lock_and_reports_a_long_one_as_busy() {
    let (_dir, path) = temp();
    let patient = SqliteStore::open_with(
        &path,
        diag_store_sqlite::StoreOptions {
            busy_timeout: Duration::from_secs(60),
            ..Default::default()
        },
    )
    .map(Store::new)
    .unwrap();
    // Another connection (as another process would) holds the write lock while a writer
    // tries to create a run: the writer cannot finish while the lock is held, and finishes
    // once it is released, however busy the machine is. The writer reads `released` (set just
    // before the lock is given up) when its write returns: had it finished while the lock
    // was held, it would have read `false`. Whenever the writer reaches the lock, the check
    // holds; nothing here waits for an amount of time.
    let holder = raw(&path);
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = std::sync::Arc::new(std::sync::Barrier::new(2));
    let writer = {
        let released = released.clone();
        let started = started.clone();
        std::thread::spawn(move || {
            started.wait();
            let result = patient.create_run(new_run("waited", "s", 0));
            let after_release = released.load(std::sync::atomic::Ordering::SeqCst);
            result.map(|_recorder| (patient, after_release))
        })
    };
    started.wait();
    // The write is still waiting on the lock here, or has not reached it yet: either way it
    // is not stored.
    let stored: i64 = raw(&path)
        .query_row(
            "SELECT count(*) FROM diagnosis_run WHERE run_id = 'waited'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        stored, 0,
        "a write cannot land while another connection holds the lock"
    );
    released.store(true, std::sync::atomic::Ordering::SeqCst);
    holder.execute_batch("COMMIT").unwrap();
    let (patient, after_release) = writer
        .join()
        .unwrap()
        .expect("a write queues behind a short lock");
    assert!(
        after_release,
        "the write returned while another connection held the lock"
    );
    assert!(
        patient.get_run("waited").unwrap().is_some(),
        "the queued write is stored"
    );

    // Held past the busy timeout: a clear error, and the store keeps working afterwards. The
    // lock is held until the error is back, so the timeout expires on any machine.
    let hasty = SqliteStore::open_with(
        &path,
        diag_store_sqlite::StoreOptions {
            busy_timeout: Duration::from_millis(300),
            ..Default::default()
        },
    )
    .map(Store::new)
    .unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = hasty
        .record_event("waited", &event(1, "planner", Status::Completed))
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Busy, "{err}");
    assert!(err.to_string().contains("busy timeout"), "{err}");
    holder.execute_batch("COMMIT").unwrap();
    hasty
        .record_event("waited", &event(1, "planner", Status::Completed))
        .unwrap();
    assert_eq!(hasty.events("waited").unwrap().len(), 1);
}

#[test]
fn checkpoints_run_in_the_background_and_a_closed_store_leaves_no_wal() {
    let (_dir, path) = temp();
    let store = SqliteStore::open(&path).unwrap();
    let db_only = || std::fs::metadata(&path).unwrap().len();
    let before = db_only();
    // 40 runs of 12 commits each: past the background threshold, far below SQLite's own
    // auto-checkpoint (4096 pages), so only the background thread copies pages back.
    fill(&Store::new(store.clone()), "c", 40, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while db_only() <= before && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        db_only() > before,
        "the database file grew while the store was open"
    );
    drop(store);
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    assert!(
        !std::path::Path::new(&wal).exists(),
        "the last close checkpoints and removes the WAL"
    );
    assert_eq!(integrity(&path), "ok");
}

// What model endpoints taught (openspec/specs/run-store/spec.md, "What endpoints taught").

mod endpoint_learnings {
    use super::*;
    use diag_core::clock::FixedClock;
    use diag_core::model::{
        Endpoint, Learned, RefusedSampling, SamplingParameter, StructuredOutput,
    };
    use diag_core::store::EndpointLearning;
    use std::sync::Arc;

    fn local() -> Endpoint {
        Endpoint::new("http://user:pw@127.0.0.1:8080/v1/?api-key=s3cret#frag", "m")
    }

    fn remote() -> Endpoint {
        Endpoint::new("https://h.example/v1", "m2")
    }

    fn learned(form: Option<StructuredOutput>, context_tokens: Option<u32>) -> Learned {
        Learned {
            form,
            context_tokens,
            ..Learned::default()
        }
    }

    fn row(
        endpoint: Endpoint,
        form: Option<StructuredOutput>,
        context_tokens: Option<u32>,
        at: Option<i64>,
    ) -> EndpointLearning {
        EndpointLearning {
            endpoint,
            structured_output: form,
            context_tokens,
            refused_sampling: RefusedSampling::default(),
            learned_at: at.map(ts),
        }
    }

    /// A learning that only says the endpoint refused `refused`.
    fn refusing(refused: &[SamplingParameter]) -> Learned {
        Learned {
            refused_sampling: refused
                .iter()
                .fold(RefusedSampling::default(), |r, p| r.with(*p)),
            ..Learned::default()
        }
    }

    #[test]
    fn a_refused_sampling_parameter_is_kept_never_forgotten_and_recorded_with_a_run() {
        use SamplingParameter::{Seed, Temperature};
        use StructuredOutput::*;
        for_each_fresh(|fresh| {
            let name = fresh.name;
            let store = fresh.open();
            store
                .learn_endpoint(&local(), learned(Some(JsonObjectSchema), None), ts(1_000))
                .unwrap();
            store
                .learn_endpoint(&local(), refusing(&[Temperature]), ts(2_000))
                .unwrap();
            let temperature = EndpointLearning {
                refused_sampling: refusing(&[Temperature]).refused_sampling,
                ..row(local(), Some(JsonObjectSchema), None, Some(2_000))
            };
            assert_eq!(
                store.endpoint_learning(&local()).unwrap(),
                Some(temperature),
                "the refusal joins the form ({name})"
            );
            // A later learning that says nothing of sampling keeps the refusal; another
            // refusal is added to it.
            store
                .learn_endpoint(&local(), learned(Some(Off), None), ts(3_000))
                .unwrap();
            store
                .learn_endpoint(&local(), refusing(&[Seed]), ts(4_000))
                .unwrap();
            let both = refusing(&[Temperature, Seed]).refused_sampling;
            assert_eq!(
                store.endpoint_learning(&local()).unwrap(),
                Some(EndpointLearning {
                    refused_sampling: both,
                    ..row(local(), Some(Off), None, Some(4_000))
                }),
                "{name}"
            );
            // A run records it as it starts, and a memory from the store starts from it.
            store.create_run(new_run("run-s1", "ses-1", 0)).unwrap();
            store
                .record_started_endpoints("run-s1", &[local(), remote()])
                .unwrap();
            let started = store.run_endpoints("run-s1").unwrap();
            assert_eq!(started[0].refused_sampling, both, "{name}");
            assert!(started[1].refused_sampling.is_empty(), "{name}");
            let (memory, _) =
                diag_core::store::endpoint_memory(&store, Arc::new(FixedClock(ts(9_000))));
            assert_eq!(memory.learned(&local()).refused_sampling, both, "{name}");
            assert!(memory.learned(&remote()).refused_sampling.is_empty());
        });
    }

    #[test]
    fn what_an_endpoint_taught_is_kept_by_key_merged_and_never_with_a_credential() {
        use StructuredOutput::*;
        for_each_fresh(|fresh| {
            let name = fresh.name;
            let store = fresh.open();
            assert!(store.endpoint_learnings().unwrap().is_empty(), "{name}");
            assert_eq!(local().base_url, "http://127.0.0.1:8080/v1");
            store
                .learn_endpoint(&local(), learned(Some(JsonObjectSchema), None), ts(1_000))
                .unwrap();
            // A key built by hand is stripped before it is stored, too.
            let hand_built = Endpoint {
                base_url: "https://k:secret@h.example/v1?token=s3cret".into(),
                model: "m2".into(),
            };
            store
                .learn_endpoint(&hand_built, learned(None, Some(4096)), ts(2_000))
                .unwrap();
            assert_eq!(
                store.endpoint_learnings().unwrap(),
                vec![
                    row(local(), Some(JsonObjectSchema), None, Some(1_000)),
                    row(remote(), None, Some(4096), Some(2_000)),
                ],
                "{name}"
            );
            // A context size learned later keeps the form; the time is the latest learning's.
            store
                .learn_endpoint(&local(), learned(None, Some(2048)), ts(3_000))
                .unwrap();
            assert_eq!(
                store.endpoint_learning(&local()).unwrap(),
                Some(row(
                    local(),
                    Some(JsonObjectSchema),
                    Some(2048),
                    Some(3_000)
                )),
                "{name}"
            );
            // Learned again: the new form replaces the old one.
            store
                .learn_endpoint(&local(), learned(Some(Off), None), ts(4_000))
                .unwrap();
            assert_eq!(
                store.endpoint_learning(&local()).unwrap(),
                Some(row(local(), Some(Off), Some(2048), Some(4_000))),
                "{name}"
            );
            assert_eq!(
                store
                    .endpoint_learning(&Endpoint::new("http://127.0.0.1:8080/v1", "other"))
                    .unwrap(),
                None,
                "another model on the same server is another endpoint ({name})"
            );
            let stored = fresh
                .query_rows("SELECT base_url FROM endpoint_learning ORDER BY base_url")
                .join(" ");
            assert_eq!(stored, "http://127.0.0.1:8080/v1 https://h.example/v1");
            for secret in ["s3cret", "secret", "pw", "user", "frag"] {
                assert!(!stored.contains(secret), "{name}: {stored}");
            }
            let blank = Endpoint::new("http://h/v1", " ");
            assert!(store
                .learn_endpoint(&blank, learned(Some(Off), None), ts(1))
                .is_err());
        });
    }

    #[test]
    fn a_run_records_what_the_store_remembered_of_its_endpoints_when_it_started() {
        use StructuredOutput::*;
        for_each_backend(|name, store| {
            store
                .learn_endpoint(&local(), learned(Some(JsonObjectSchema), None), ts(1_000))
                .unwrap();
            store.create_run(new_run("run-e1", "ses-1", 0)).unwrap();
            store
                .record_started_endpoints("run-e1", &[remote(), local(), local()])
                .unwrap();
            // What is learned during or after the run does not change what it started with.
            store
                .learn_endpoint(&local(), learned(Some(Off), None), ts(5_000))
                .unwrap();
            let started = vec![
                row(local(), Some(JsonObjectSchema), None, Some(1_000)),
                row(remote(), None, None, None),
            ];
            assert_eq!(store.run_endpoints("run-e1").unwrap(), started, "{name}");
            assert!(store.run_endpoints("run-other").unwrap().is_empty());

            // Written once, and only while the run is RUNNING.
            let again = store.record_started_endpoints("run-e1", &[local()]);
            assert!(again.is_err(), "{name}: {again:?}");
            store
                .finish_failed("run-e1", "stopped", RunSummary::default())
                .unwrap();
            let late = store.record_started_endpoints("run-e1", &[]);
            assert!(
                late.is_err(),
                "a finished run, even with nothing to write ({name})"
            );
            let err = store
                .record_started_endpoints("run-e1", &[remote()])
                .unwrap_err();
            assert!(err.to_string().contains("run-e1"), "{name}: {err}");
            assert!(store
                .record_started_endpoints("run-none", &[remote()])
                .is_err());
            assert_eq!(store.run_endpoints("run-e1").unwrap(), started, "{name}");

            // Collected with its run; what the endpoints taught stays.
            store.gc(None, Some(0)).unwrap();
            assert!(store.get_run("run-e1").unwrap().is_none(), "{name}");
            assert!(store.run_endpoints("run-e1").unwrap().is_empty(), "{name}");
            assert_eq!(store.endpoint_learnings().unwrap().len(), 1, "{name}");
        });
    }

    #[test]
    fn a_memory_from_the_store_starts_from_it_and_keeps_what_it_learns_or_says_why_not() {
        use StructuredOutput::*;
        for_each_fresh(|fresh| {
            let name = fresh.name;
            let store = fresh.open();
            store
                .learn_endpoint(&local(), learned(Some(JsonObjectSchema), None), ts(1_000))
                .unwrap();
            let (memory, sink) =
                diag_core::store::endpoint_memory(&store, Arc::new(FixedClock(ts(9_000))));
            assert_eq!(
                memory.learned(&local()),
                learned(Some(JsonObjectSchema), None)
            );
            assert_eq!(memory.learned(&remote()), Learned::default());
            memory.learn(&local(), |l| l.form = Some(JsonObject));
            memory.learn(&remote(), |l| l.context_tokens = Some(512));
            assert_eq!(
                store.endpoint_learnings().unwrap(),
                vec![
                    row(local(), Some(JsonObject), None, Some(9_000)),
                    row(remote(), None, Some(512), Some(9_000)),
                ],
                "stamped by the memory's clock ({name})"
            );
            assert!(sink.failures().is_empty(), "{name}: {:?}", sink.failures());

            // A store that refuses the write: the model still learns, and the failure is kept
            // for the command to show (and logged), not raised.
            fresh.execute("DROP TABLE endpoint_learning");
            memory.learn(&local(), |l| l.form = Some(Off));
            assert_eq!(memory.learned(&local()).form, Some(Off));
            let failures = sink.failures();
            assert_eq!(failures.len(), 1, "{name}: {failures:?}");
            assert!(
                failures[0].contains("cannot keep what http://127.0.0.1:8080/v1 m taught"),
                "{name}: {failures:?}"
            );
            // And one that cannot be read gives a memory that starts empty, saying why.
            let (memory, sink) =
                diag_core::store::endpoint_memory(&store, Arc::new(FixedClock(ts(9_000))));
            assert_eq!(memory.learned(&local()), Learned::default());
            assert_eq!(sink.failures().len(), 1, "{name}");
        });
    }

    #[test]
    fn a_store_of_the_previous_schema_upgrades_in_place_and_keeps_its_runs() {
        use StructuredOutput::*;
        for_each_fresh(|fresh| {
            let name = fresh.name;
            {
                let store = fresh.open();
                record_pass_run(&store, "run-old", "ses-1", 0);
            }
            // The store as the diag before endpoint learnings left it: none of their tables (nor
            // the alerts' that came after them), at its version (SQLite 6, PostgreSQL 1).
            fresh.execute(
                "DROP TABLE run_endpoint; DROP TABLE endpoint_learning; \
                 DROP TABLE run_alert; DROP TABLE alert_queue;",
            );
            fresh.set_schema_version(if fresh.is_sqlite() { 6 } else { 1 });

            let store = fresh.open();
            assert_eq!(
                fresh.stored_schema_version(),
                fresh.schema_version(),
                "{name}"
            );
            let old = store.get_run("run-old").unwrap().unwrap();
            assert_eq!(old.status, RunStatus::Success, "{name}");
            assert!(store.run_endpoints("run-old").unwrap().is_empty(), "{name}");
            store
                .learn_endpoint(&local(), learned(Some(JsonObjectSchema), None), ts(1_000))
                .unwrap();
            assert_eq!(
                store.endpoint_learnings().unwrap(),
                vec![row(local(), Some(JsonObjectSchema), None, Some(1_000))],
                "{name}"
            );
        });
    }

    /// A store file written by the diag before (schema version 6, with none of these tables)
    /// opens, upgrades in place and keeps what endpoints teach from then on.
    #[test]
    fn a_version_6_sqlite_file_upgrades_in_place() {
        let (_dir, path) = temp();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        SqliteStore::create_at_schema_version(&path, 6).unwrap();
        let store = Store::new(SqliteStore::open(&path).unwrap());
        assert!(store.endpoint_learnings().unwrap().is_empty());
        store
            .learn_endpoint(
                &local(),
                learned(Some(StructuredOutput::JsonObject), Some(8192)),
                ts(1),
            )
            .unwrap();
        assert_eq!(
            store.endpoint_learning(&local()).unwrap(),
            Some(row(
                local(),
                Some(StructuredOutput::JsonObject),
                Some(8192),
                Some(1)
            ))
        );
        drop(store);
        let version: u32 = raw(&path)
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, diag_store_sqlite::SCHEMA_VERSION);
        assert_eq!(diag_store_sqlite::SCHEMA_VERSION, 9);
    }
}

/// Alerts in the run store (openspec/specs/run-store/spec.md, "Alerts and the alert queue"):
/// the alert group a run investigated, and the durable queue of `diag serve`, on both
/// backends.
mod alert_store {
    use super::*;
    use diag_core::alert::{Alert, AlertGroup, AlertStatus};
    use diag_core::store::{
        AlertSource, ClaimEnd, Enqueued, NewNotification, QueueCounts, QueueState, RunAlerts,
        MAX_ATTEMPTS,
    };
    use diag_store_postgres::{PgOptions, PgStore};
    use diag_store_sqlite::StoreOptions;
    use std::collections::BTreeMap;
    use std::time::Instant;

    /// A group of one alert of `service`, started `starts_ms` after the records' epoch.
    fn group(service: &str, status: AlertStatus, starts_ms: i64) -> AlertGroup {
        let labels = BTreeMap::from([
            ("alertname".to_string(), "HighErrorRate".to_string()),
            ("service".to_string(), service.to_string()),
        ]);
        AlertGroup::new(
            format!("{{}}:{{alertname=\"HighErrorRate\", service=\"{service}\"}}"),
            vec![Alert {
                fingerprint: format!("fp-{service}"),
                status,
                labels,
                annotations: BTreeMap::from([("summary".to_string(), "5xx > 5%".to_string())]),
                starts_at: ts(starts_ms),
                ends_at: None,
                generator_url: Some("http://prom/graph?g0.expr=up".into()),
            }],
        )
    }

    fn firing(service: &str) -> NewNotification {
        NewNotification::new(
            "diag".into(),
            group(service, AlertStatus::Firing, 0),
            ts(1_000),
        )
    }

    fn resolved(service: &str) -> NewNotification {
        NewNotification::new(
            "diag".into(),
            group(service, AlertStatus::Resolved, 0),
            ts(2_000),
        )
    }

    fn queued(e: Enqueued) -> i64 {
        match e {
            Enqueued::Queued(id) => id,
            other => panic!("not queued: {other:?}"),
        }
    }

    fn state(store: &Store, id: i64) -> QueueState {
        store.queue_entry(id).unwrap().unwrap().state
    }

    fn refusal(r: Result<(), diag_core::store::StoreError>) -> Kind {
        kind(&r.unwrap_err())
    }

    #[test]
    fn a_run_keeps_the_alert_group_it_investigated_once_while_running() {
        for_each_backend(|name, store| {
            let alerts = RunAlerts::new(
                AlertSource::Webhook,
                group("checkout", AlertStatus::Firing, 0),
            );
            store.create_run(new_run("run-a", "s", 0)).unwrap();
            assert_eq!(store.run_alerts("run-a").unwrap(), None, "{name}");
            store.record_run_alerts("run-a", &alerts).unwrap();
            assert_eq!(
                store.run_alerts("run-a").unwrap(),
                Some(alerts.clone()),
                "{name}"
            );
            assert_eq!(
                refusal(store.record_run_alerts("run-a", &alerts)),
                Kind::Duplicate("alert group"),
                "{name}: one group per run"
            );
            assert_eq!(
                refusal(store.record_run_alerts("run-none", &alerts)),
                Kind::UnknownRun("run-none".into()),
                "{name}"
            );
            store.create_run(new_run("run-b", "s", 1)).unwrap();
            store
                .finish_failed("run-b", "stopped", RunSummary::default())
                .unwrap();
            assert_eq!(
                refusal(store.record_run_alerts("run-b", &alerts)),
                Kind::NotRunning("FAILED".into()),
                "{name}"
            );
            assert_eq!(store.run_alerts("run-b").unwrap(), None, "{name}");
            let mut forged = alerts.clone();
            forged.identity = "not-the-group".into();
            store.create_run(new_run("run-c", "s", 2)).unwrap();
            assert_eq!(
                refusal(store.record_run_alerts("run-c", &forged)),
                Kind::Invalid,
                "{name}"
            );
            let api = RunAlerts::new(AlertSource::Api, group("payments", AlertStatus::Firing, 5));
            store.record_run_alerts("run-c", &api).unwrap();
            assert_eq!(store.run_alerts("run-c").unwrap(), Some(api), "{name}");

            // Collected with its run.
            store.finish_success("run-a", summary("ok")).unwrap();
            store.finish_success("run-c", summary("ok")).unwrap();
            store.gc(None, Some(0)).unwrap();
            assert_eq!(store.run_alerts("run-a").unwrap(), None, "{name}");
            assert_eq!(
                store.investigated_run(&alerts.identity).unwrap(),
                None,
                "{name}"
            );
        });
    }

    #[test]
    fn a_group_is_investigated_by_its_newest_live_or_finished_run_not_an_interrupted_one() {
        for_each_backend(|name, store| {
            let g = group("checkout", AlertStatus::Firing, 0);
            let identity = g.identity();
            let alerts = RunAlerts::new(AlertSource::Api, g);
            let start = |run_id: &str, started_ms: i64| {
                store.create_run(new_run(run_id, "s", started_ms)).unwrap();
                store.record_run_alerts(run_id, &alerts).unwrap();
            };
            let investigated = || store.investigated_run(&identity).unwrap();
            start("run-1", 0);
            assert_eq!(
                investigated().as_deref(),
                Some("run-1"),
                "{name}: a RUNNING run is investigating it"
            );
            store.finish_success("run-1", summary("ok")).unwrap();
            assert_eq!(investigated().as_deref(), Some("run-1"), "{name}: SUCCESS");
            start("run-2", 10);
            store
                .finish_failed("run-2", "the model endpoint refused", RunSummary::default())
                .unwrap();
            assert_eq!(
                investigated().as_deref(),
                Some("run-2"),
                "{name}: FAILED, newer"
            );
            start("run-3", 20);
            store
                .finish_failed("run-3", INTERRUPTED, RunSummary::default())
                .unwrap();
            assert_eq!(
                investigated().as_deref(),
                Some("run-2"),
                "{name}: FAILED interrupted does not count"
            );
            start("run-0", 5);
            store.finish_success("run-0", summary("ok")).unwrap();
            assert_eq!(investigated().as_deref(), Some("run-2"), "{name}: older");
            start("run-4", 30);
            assert_eq!(
                investigated().as_deref(),
                Some("run-4"),
                "{name}: RUNNING, newest"
            );
            let other = group("payments", AlertStatus::Firing, 0).identity();
            assert_eq!(store.investigated_run(&other).unwrap(), None, "{name}");
        });
    }

    #[test]
    fn a_notification_is_queued_once_within_the_bound_and_a_resolved_one_only_recorded() {
        for_each_fresh(|fresh| {
            let name = fresh.name;
            let store = fresh.open();
            assert_eq!(
                store.queue_counts().unwrap(),
                QueueCounts::default(),
                "{name}"
            );
            let a = queued(store.enqueue(&firing("a"), 2).unwrap());
            assert_eq!(
                store.enqueue(&firing("a"), 2).unwrap(),
                Enqueued::Duplicate(a),
                "{name}: a repeated delivery"
            );
            let rows = || fresh.query("SELECT count(*) FROM alert_queue");
            assert_eq!(rows(), "1", "{name}: nothing written for a duplicate");
            let b = queued(store.enqueue(&firing("b"), 2).unwrap());
            assert!(b > a, "{name}");
            assert_eq!(
                store.enqueue(&firing("c"), 2).unwrap(),
                Enqueued::Full,
                "{name}"
            );
            assert_eq!(rows(), "2", "{name}: nothing written when full");
            assert_eq!(
                store.enqueue(&firing("b"), 2).unwrap(),
                Enqueued::Duplicate(b),
                "{name}: a duplicate is told as such when full"
            );
            // A resolved notification is recorded, past the bound, and never claimed.
            let r = queued(store.enqueue(&resolved("a"), 2).unwrap());
            assert_eq!(state(&store, r), QueueState::Resolved, "{name}");
            assert_eq!(
                store.enqueue(&resolved("a"), 2).unwrap(),
                Enqueued::Duplicate(r),
                "{name}"
            );
            let counts = store.queue_counts().unwrap();
            assert_eq!(
                counts,
                QueueCounts {
                    queued: 2,
                    resolved: 1,
                    ..QueueCounts::default()
                },
                "{name}"
            );
            assert_eq!(counts.pending(), 2, "{name}");

            let entry = store.queue_entry(a).unwrap().unwrap();
            assert_eq!(entry.identity, firing("a").identity, "{name}");
            assert_eq!(entry.state, QueueState::Queued, "{name}");
            assert_eq!(entry.status, AlertStatus::Firing, "{name}");
            assert_eq!(entry.group.group_key, firing("a").group.group_key, "{name}");
            assert_eq!(entry.received_at, ts(1_000), "{name}");
            assert_eq!((entry.attempts, entry.runs.len()), (0, 0), "{name}");
            assert_eq!(entry.failure, None, "{name}");
            assert_eq!(store.queue_entry(a + 1000).unwrap(), None, "{name}");
            let ids: Vec<i64> = store
                .queue_entries()
                .unwrap()
                .iter()
                .map(|e| e.id)
                .collect();
            assert_eq!(ids, [a, b, r], "{name}: oldest first");

            assert_eq!(store.claim().unwrap().map(|c| c.id), Some(a), "{name}");
            assert_eq!(store.claim().unwrap().map(|c| c.id), Some(b), "{name}");
            assert_eq!(
                store.claim().unwrap(),
                None,
                "{name}: never the resolved one"
            );
            // Claimed notifications still count against the bound.
            assert_eq!(
                store.enqueue(&firing("c"), 2).unwrap(),
                Enqueued::Full,
                "{name}"
            );
            assert_eq!(
                store.enqueue(&firing("c"), 0).unwrap(),
                Enqueued::Full,
                "{name}"
            );
            let mut forged = firing("d");
            forged.identity = "x".into();
            assert_eq!(
                kind(&store.enqueue(&forged, 9).unwrap_err()),
                Kind::Invalid,
                "{name}"
            );
        });
    }

    #[test]
    fn claims_go_oldest_first_once_each_and_end_only_by_their_owner() {
        for_each_fresh(|fresh| {
            let name = fresh.name;
            let store = fresh.open();
            let other = fresh.open();
            let ids: Vec<i64> = ["a", "b", "c"]
                .iter()
                .map(|s| queued(store.enqueue(&firing(s), 10).unwrap()))
                .collect();
            let (a, b, c) = (ids[0], ids[1], ids[2]);
            let first = store.claim().unwrap().unwrap();
            assert_eq!((first.id, first.attempt), (a, 1), "{name}");
            assert_eq!(first.identity, firing("a").identity, "{name}");
            assert_eq!(first.group, firing("a").group, "{name}");
            assert!(first.earlier_runs.is_empty(), "{name}");
            assert_eq!(
                other.claim().unwrap().map(|c| c.id),
                Some(b),
                "{name}: another handle"
            );
            assert_eq!(store.claim().unwrap().map(|c| c.id), Some(c), "{name}");
            assert_eq!(other.claim().unwrap(), None, "{name}: all claimed");
            assert_eq!(store.queue_counts().unwrap().claimed, 3, "{name}");

            store.claim_started_run(a, "run-a1").unwrap();
            store
                .end_claim(a, ClaimEnd::Investigated { run_id: "run-a1" })
                .unwrap();
            let done = store.queue_entry(a).unwrap().unwrap();
            assert_eq!(done.state, QueueState::Done, "{name}");
            assert_eq!(done.runs, ["run-a1"], "{name}");
            assert_eq!(
                refusal(store.end_claim(a, ClaimEnd::Released)),
                Kind::NotClaimed("done".into()),
                "{name}"
            );
            assert_eq!(
                refusal(store.claim_started_run(a, "run-a2")),
                Kind::NotClaimed("done".into()),
                "{name}"
            );

            // Given back: queued again, the attempt not counted.
            store.end_claim(b, ClaimEnd::Released).unwrap();
            let back = store.queue_entry(b).unwrap().unwrap();
            assert_eq!(
                (back.state, back.attempts),
                (QueueState::Queued, 0),
                "{name}"
            );
            let again = other.claim().unwrap().unwrap();
            assert_eq!((again.id, again.attempt), (b, 1), "{name}");

            // A claim held by a process elsewhere, whose lease has not run out.
            fresh.execute(&format!(
                "UPDATE alert_queue SET owner_host = 'host-elsewhere', \
                 lease_expires_at = '2999-01-01T00:00:00.000Z' WHERE id = {c}"
            ));
            assert_eq!(
                refusal(store.end_claim(c, ClaimEnd::Failed { failure: "no" })),
                Kind::NotClaimed("claimed by another process".into()),
                "{name}"
            );
            assert_eq!(
                refusal(store.claim_started_run(c, "run-c1")),
                Kind::NotClaimed("claimed by another process".into()),
                "{name}"
            );
            assert_eq!(
                store.claim().unwrap(),
                None,
                "{name}: a live claim is not taken"
            );
            assert_eq!(
                refusal(store.end_claim(c + 1000, ClaimEnd::Released)),
                Kind::NotClaimed("unknown".into()),
                "{name}"
            );

            store
                .end_claim(
                    b,
                    ClaimEnd::Failed {
                        failure: "no model endpoint\nis configured",
                    },
                )
                .unwrap();
            let failed = store.queue_entry(b).unwrap().unwrap();
            assert_eq!(failed.state, QueueState::Failed, "{name}");
            assert_eq!(
                failed.failure.as_deref(),
                Some("no model endpoint is configured"),
                "{name}"
            );
            assert_eq!(
                store.queue_counts().unwrap(),
                QueueCounts {
                    claimed: 1,
                    done: 1,
                    failed: 1,
                    ..QueueCounts::default()
                },
                "{name}"
            );
        });
    }

    #[test]
    fn a_claim_shows_its_holder_and_a_failed_one_keeps_only_runs_that_exist() {
        for_each_backend(|name, store| {
            let a = queued(store.enqueue(&firing("a"), 10).unwrap());
            let waiting = store.queue_entry(a).unwrap().unwrap();
            assert_eq!(waiting.claim, None, "{name}");
            assert_eq!(waiting.receiver, "diag", "{name}");
            assert_eq!(waiting.group, firing("a").group, "{name}");
            assert_eq!(waiting.received_at, ts(1_000), "{name}");
            store.claim().unwrap().unwrap();
            let claimed = store.queue_entry(a).unwrap().unwrap();
            let holder = claimed.claim.clone().expect("a claim shows its holder");
            assert_eq!(holder.pid, i64::from(std::process::id()), "{name}");
            assert!(holder.lease_expires_at.is_some(), "{name}");

            // One run started and was swept; the id drawn for the next never became a run.
            store.create_run(new_run("run-a1", "s", 0)).unwrap();
            store
                .finish_failed("run-a1", "interrupted", RunSummary::default())
                .unwrap();
            store.claim_started_run(a, "run-a1").unwrap();
            store.claim_started_run(a, "run-never-started").unwrap();
            store
                .end_claim(
                    a,
                    ClaimEnd::Failed {
                        failure: "no run could be started: the store refused it",
                    },
                )
                .unwrap();
            let failed = store.queue_entry(a).unwrap().unwrap();
            assert_eq!(failed.state, QueueState::Failed, "{name}");
            assert_eq!(failed.runs, ["run-a1"], "{name}: no run id without a run");
            assert_eq!(failed.claim, None, "{name}");
            assert_eq!(
                failed.failure.as_deref(),
                Some("no run could be started: the store refused it"),
                "{name}"
            );
        });
    }

    #[test]
    fn a_queue_and_its_runs_alerts_copy_into_another_store_once() {
        // The source: a SQLite store with a done, a failed, a resolved and a claimed
        // notification, and the alert group of the done one's run.
        let dir = tempfile::tempdir().unwrap();
        let source = diag_testkit::open_sqlite(dir.path().join("source.db")).unwrap();
        let alerts = RunAlerts::new(AlertSource::Webhook, group("done", AlertStatus::Firing, 0));
        source.create_run(new_run("run-done", "s", 0)).unwrap();
        source.record_run_alerts("run-done", &alerts).unwrap();
        source.finish_success("run-done", summary("ok")).unwrap();
        let done = queued(source.enqueue(&firing("done"), 10).unwrap());
        let failed = queued(source.enqueue(&firing("failed"), 10).unwrap());
        queued(source.enqueue(&resolved("gone"), 10).unwrap());
        let claimed = queued(source.enqueue(&firing("claimed"), 10).unwrap());
        for (id, run) in [(done, "run-done"), (failed, "run-elsewhere")] {
            assert_eq!(source.claim().unwrap().unwrap().id, id);
            source.claim_started_run(id, run).unwrap();
        }
        source
            .end_claim(done, ClaimEnd::Investigated { run_id: "run-done" })
            .unwrap();
        source
            .end_claim(failed, ClaimEnd::Failed { failure: "gave up" })
            .unwrap();
        assert_eq!(source.claim().unwrap().unwrap().id, claimed);
        let entries = source.queue_entries().unwrap();

        for_each_backend(|name, target| {
            // The run first, as `diag store copy` does; its alerts with it, once.
            assert_eq!(
                refusal(target.import_run_alerts("run-done", &alerts).map(|_| ())),
                Kind::Invalid,
                "{name}: alerts before their run"
            );
            let whole = source.read_whole("run-done").unwrap().unwrap();
            assert!(target.import_run(&whole).unwrap(), "{name}");
            assert!(
                target.import_run_alerts("run-done", &alerts).unwrap(),
                "{name}"
            );
            assert!(
                !target.import_run_alerts("run-done", &alerts).unwrap(),
                "{name}"
            );
            assert_eq!(
                target.run_alerts("run-done").unwrap(),
                Some(alerts.clone()),
                "{name}"
            );
            target.create_run(new_run("run-live", "s", 5)).unwrap();
            assert_eq!(
                refusal(target.import_run_alerts("run-live", &alerts).map(|_| ())),
                Kind::Invalid,
                "{name}: a RUNNING run's alerts wait until it is finished"
            );

            for e in &entries {
                let copied = target.import_notification(e);
                if e.state == QueueState::Claimed {
                    assert_eq!(
                        refusal(copied.map(|_| ())),
                        Kind::Invalid,
                        "{name}: a claim is not copied"
                    );
                } else {
                    assert!(copied.unwrap(), "{name}");
                    assert!(!target.import_notification(e).unwrap(), "{name}: once");
                }
            }
            let back = target.queue_entries().unwrap();
            assert_eq!(back.len(), 3, "{name}");
            for (copy, original) in back.iter().zip(entries.iter()) {
                assert_eq!(copy.identity, original.identity, "{name}");
                assert_eq!(copy.state, original.state, "{name}");
                assert_eq!(copy.group, original.group, "{name}");
                assert_eq!(copy.receiver, original.receiver, "{name}");
                assert_eq!(copy.received_at, original.received_at, "{name}");
                assert_eq!(copy.updated_at, original.updated_at, "{name}");
                assert_eq!(copy.attempts, original.attempts, "{name}");
                assert_eq!(copy.failure, original.failure, "{name}");
            }
            assert_eq!(back[0].runs, ["run-done"], "{name}");
            assert_eq!(
                back[1].runs,
                Vec::<String>::new(),
                "{name}: a run the copy does not hold is not named"
            );
            assert_eq!(
                target.queue_counts().unwrap(),
                QueueCounts {
                    done: 1,
                    failed: 1,
                    resolved: 1,
                    ..QueueCounts::default()
                },
                "{name}"
            );
            // Nothing copied is claimable but what waited.
            assert_eq!(target.claim().unwrap(), None, "{name}");
        });
    }

    #[test]
    fn a_claim_whose_owner_is_gone_is_taken_again_and_given_up_after_max_attempts() {
        for_each_fresh(|fresh| {
            let name = fresh.name;
            let store = fresh.open();
            let a = queued(store.enqueue(&firing("a"), 10).unwrap());
            let first = store.claim().unwrap().unwrap();
            assert_eq!((first.id, first.attempt), (a, 1), "{name}");
            store.claim_started_run(a, "run-1").unwrap();
            // Its investigator was killed on this host: taken again at once.
            fresh.execute(&format!(
                "UPDATE alert_queue SET owner_pid = {} WHERE id = {a}",
                dead_pid()
            ));
            let second = store.claim().unwrap().unwrap();
            assert_eq!((second.id, second.attempt), (a, 2), "{name}");
            assert_eq!(second.earlier_runs, ["run-1"], "{name}");
            store.claim_started_run(a, "run-2").unwrap();
            // Its investigator elsewhere stopped renewing: taken again once its lease ran out.
            fresh.execute(&format!(
                "UPDATE alert_queue SET owner_host = 'host-gone', \
                 lease_expires_at = '2001-01-01T00:00:00.000Z' WHERE id = {a}"
            ));
            let third = store.claim().unwrap().unwrap();
            assert_eq!((third.id, third.attempt), (a, MAX_ATTEMPTS), "{name}");
            assert_eq!(third.earlier_runs, ["run-1", "run-2"], "{name}");
            // Stopped a third time: given up, and the next notification is claimed instead.
            let b = queued(store.enqueue(&firing("b"), 10).unwrap());
            fresh.execute(&format!(
                "UPDATE alert_queue SET owner_pid = {} WHERE id = {a}",
                dead_pid()
            ));
            assert_eq!(store.claim().unwrap().map(|c| c.id), Some(b), "{name}");
            let given_up = store.queue_entry(a).unwrap().unwrap();
            assert_eq!(given_up.state, QueueState::Failed, "{name}");
            assert_eq!(given_up.attempts, MAX_ATTEMPTS, "{name}");
            assert_eq!(given_up.runs, ["run-1", "run-2"], "{name}");
            assert_eq!(
                given_up.failure.as_deref(),
                Some("claimed 3 times without an end (its investigator stopped each time)"),
                "{name}"
            );
            assert_eq!(store.claim().unwrap(), None, "{name}");
        });
    }

    /// The backend opened with a lease of `lease`, on the system clock.
    fn open_with_lease(fresh: &Fresh, lease: Duration) -> Store {
        let location = fresh.location().to_str().unwrap();
        if fresh.is_sqlite() {
            let options = StoreOptions {
                lease,
                ..StoreOptions::default()
            };
            Store::new(SqliteStore::open_with(location, options).unwrap())
        } else {
            let options = PgOptions {
                lease,
                ..PgOptions::default()
            };
            Store::new(PgStore::open(location, options).unwrap())
        }
    }

    #[test]
    fn the_heartbeat_renews_the_lease_of_a_claim_its_handle_holds() {
        for_each_fresh(|fresh| {
            let name = fresh.name;
            let store = open_with_lease(fresh, Duration::from_millis(300));
            let a = queued(store.enqueue(&firing("a"), 10).unwrap());
            // No run on this handle: the claim starts its heartbeat.
            assert_eq!(store.claim().unwrap().map(|c| c.id), Some(a), "{name}");
            let lease = || {
                fresh.query(&format!(
                    "SELECT lease_expires_at FROM alert_queue WHERE id = {a}"
                ))
            };
            let taken = lease();
            assert!(!taken.is_empty(), "{name}");
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut renewed = taken.clone();
            while renewed <= taken {
                assert!(Instant::now() < deadline, "{name}: never renewed ({taken})");
                std::thread::sleep(Duration::from_millis(20));
                renewed = lease();
            }
            // A claim that ended is not renewed.
            store.end_claim(a, ClaimEnd::Released).unwrap();
            assert_eq!(lease(), "", "{name}: a released claim holds no lease");
        });
    }

    #[test]
    fn claimants_on_three_connections_never_take_one_notification_twice() {
        for_each_fresh(|fresh| {
            let name = fresh.name;
            let stores: Vec<Store> = (0..3).map(|_| fresh.open()).collect();
            let mut all: Vec<i64> = (0..50)
                .map(|i| {
                    queued(
                        stores[0]
                            .enqueue(&firing(&format!("svc-{i}")), 100)
                            .unwrap(),
                    )
                })
                .collect();
            let mut claimed: Vec<i64> = std::thread::scope(|scope| {
                let workers: Vec<_> = stores
                    .iter()
                    .flat_map(|store| (0..3).map(move |_| store))
                    .map(|store| {
                        scope.spawn(move || {
                            let mut mine = Vec::new();
                            while let Some(c) = store.claim().unwrap() {
                                mine.push(c.id);
                            }
                            mine
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .flat_map(|w| w.join().unwrap())
                    .collect()
            });
            claimed.sort_unstable();
            all.sort_unstable();
            assert_eq!(
                claimed, all,
                "{name}: each notification claimed exactly once"
            );
            assert_eq!(stores[1].queue_counts().unwrap().claimed, 50, "{name}");
        });
    }

    #[test]
    fn a_store_of_the_schema_before_alerts_upgrades_in_place() {
        for_each_fresh(|fresh| {
            let name = fresh.name;
            {
                let store = fresh.open();
                record_pass_run(&store, "run-old", "ses-1", 0);
            }
            // The store as the diag before alerts left it (SQLite 7, PostgreSQL 2): neither the
            // alerts' tables nor what later migrations added.
            fresh.execute(
                "DROP TABLE run_alert; DROP TABLE alert_queue; \
                 ALTER TABLE endpoint_learning DROP COLUMN refuses_temperature; \
                 ALTER TABLE endpoint_learning DROP COLUMN refuses_seed; \
                 ALTER TABLE run_endpoint DROP COLUMN refuses_temperature; \
                 ALTER TABLE run_endpoint DROP COLUMN refuses_seed;",
            );
            fresh.set_schema_version(if fresh.is_sqlite() { 7 } else { 2 });

            let store = fresh.open();
            assert_eq!(
                fresh.stored_schema_version(),
                fresh.schema_version(),
                "{name}"
            );
            assert_eq!(
                store.get_run("run-old").unwrap().unwrap().status,
                RunStatus::Success,
                "{name}"
            );
            assert_eq!(store.run_alerts("run-old").unwrap(), None, "{name}");
            assert_eq!(store.queue_entries().unwrap(), [], "{name}");
            let a = queued(store.enqueue(&firing("a"), 1).unwrap());
            assert_eq!(store.claim().unwrap().map(|c| c.id), Some(a), "{name}");
            store.create_run(new_run("run-new", "s", 1)).unwrap();
            let alerts = RunAlerts::new(AlertSource::Webhook, firing("a").group);
            store.record_run_alerts("run-new", &alerts).unwrap();
            assert_eq!(store.run_alerts("run-new").unwrap(), Some(alerts), "{name}");
        });
    }

    /// A store file written by the diag before alerts (schema version 7) opens, upgrades in
    /// place and queues from then on.
    #[test]
    fn a_version_7_sqlite_file_upgrades_in_place() {
        let (_dir, path) = temp();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        SqliteStore::create_at_schema_version(&path, 7).unwrap();
        let store = Store::new(SqliteStore::open(&path).unwrap());
        let a = queued(store.enqueue(&firing("a"), 1).unwrap());
        assert_eq!(
            store.queue_entry(a).unwrap().unwrap().state,
            QueueState::Queued
        );
        drop(store);
        let version: u32 = raw(&path)
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, diag_store_sqlite::SCHEMA_VERSION);
    }
}
