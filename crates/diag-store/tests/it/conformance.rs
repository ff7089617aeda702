//! The run store's conformance suite, in one process: schema creation and refusal, the full
//! lifecycle of every record type, per-run scoping, when held events are committed, the
//! interrupted-run sweep, retention and where secrets go; what model endpoints taught
//! (`endpoint_learnings`) and the alerts and the alert queue (`alert_store`). Every test here is
//! a guarantee of the run store port, run once per backend from one definition
//! (`diag_testkit::backends`: a fresh SQLite file, then a fresh database on the suite's
//! PostgreSQL 15 server), reading back through the port and, where a test looks at the stored
//! rows themselves, with the same SQL on both (the tables of `SHARED_TABLES`); a few checks of
//! a conformance test are of the SQLite file only (its pragmas, integrity check, tool catalog
//! table and blob-split requests) and sit beside the shared ones. The tests name the port
//! (`diag_store`) and the harness, never a backend: what they need of one is a
//! `diag_testkit::backends` helper.
//!
//! The tests of one backend alone are that backend's: the SQLite file's (permissions, the busy
//! lock, the WAL, its size, its upgrades from earlier schemas) in
//! `crates/diag-store-sqlite/tests/it/`. The checks across processes (writers at once, a
//! writer killed on this host or on another, swept at once or once its lease has run out) are
//! in the root's `tests/it/store_concurrency.rs`, on both backends. The root's
//! `tests/it/store_blobs.rs` is the SQLite file's compaction (request parts stored once by
//! sha256, compressed texts) and its migrations from earlier schemas through the `diag`
//! binary, which have no PostgreSQL counterpart: that backend stores a request whole and has
//! had one schema.

mod alert_store;
mod endpoint_learnings;

use diag_testkit::backends::{
    fill_runs, for_each_backend, for_each_fresh, invocation_log, kind, record_pass_run,
    runtime_hooks, EngineObserver, Fresh, Kind,
};
use diag_testkit::records;

use std::time::Duration;

use diag_graph::{NodeKind, Observer, RunConfig};
use diag_records::fallback::FallbackKind;
use diag_records::hash::request_sha256;
use diag_records::step::{AgentRole, StepStatus};
use diag_records::verdict::Verdict;
use diag_store::FinishError;
use diag_store::Store;
use diag_store::{RunFilter, RunStatus, RunSummary, INTERRUPTED};
use records::*;
use serde_json::json;
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
        let hooks = runtime_hooks(&recorder);
        let log = invocation_log(&recorder);
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
        assert_eq!(sha, diag_records::hash::sha256_hex(text.as_bytes()));
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
        // Run a's recorder (as the tools hold it: its invocation log), told by run a's config
        // about an invocation that names run b.
        let log = invocation_log(&a);
        let config = diag_graph::RunConfig::new("shared-session", "run-a");
        let refused = log.record(
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
        assert!(log
            .record(
                &config,
                invocation("run-a", "other-session", 1, json!({"matches": []})),
            )
            .is_err());
        assert!(a.take_error().is_some());
        assert!(store.invocations("run-a").unwrap().is_empty());
        // Its own invocation goes in.
        log.record(
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

#[test]
fn gc_by_age_and_by_count_removes_everything_a_run_owns() {
    for_each_fresh(|fresh| {
        let day = 86_400_000;
        fill_runs(&fresh.open_at(0), "old", 5, 0); // stored ten days before the gc
        fill_runs(&fresh.open_at(9 * day), "new", 5, 0); // stored one day before
        let store = fresh.open_at(10 * day);
        store.create_run(new_run("live", "s", 0)).unwrap(); // oldest start, but RUNNING here
        assert_eq!(fresh.counts(), [11, 60, 10, 10, 10, 10]);
        assert_tool_catalogs(fresh, 1);

        let report = store.gc(None, None).unwrap();
        assert_eq!(report.runs_deleted, 0, "no rule, no deletion");

        // The preview names exactly what the gc then deletes, oldest first, and changes
        // nothing.
        let five_days = Some(Duration::from_millis(5 * day as u64));
        assert!(store.gc_preview(None, None).unwrap().is_empty());
        let old: Vec<String> = (0..5).map(|i| format!("old-{i}")).collect();
        assert_eq!(store.gc_preview(five_days, None).unwrap(), old);
        assert_eq!(fresh.counts(), [11, 60, 10, 10, 10, 10]);
        let report = store.gc(five_days, None).unwrap();
        assert_eq!(report.runs_deleted, 5);
        assert_eq!(fresh.counts(), [6, 30, 5, 5, 5, 5]);
        assert_tool_catalogs(fresh, 1);
        assert!(store.get_run("live").unwrap().is_some());
        assert!(store.get_run("old-0").unwrap().is_none());

        assert_eq!(
            store.gc_preview(None, Some(3)).unwrap(),
            ["new-0", "new-1", "new-2"]
        );
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

#[test]
fn a_replay_is_stored_with_the_run_it_replays_and_copied_with_it() {
    for_each_backend(|_, store| {
        let mut replay = new_run("replayed", "s", 0);
        replay.replay_of = Some("run-recorded".into());
        store.create_run(replay).unwrap();
        store.finish_success("replayed", summary("ok")).unwrap();
        store.create_run(new_run("live", "s", 1)).unwrap();
        store.finish_success("live", summary("ok")).unwrap();
        let row = store.get_run("replayed").unwrap().unwrap();
        assert_eq!(row.replay_of.as_deref(), Some("run-recorded"));
        assert_eq!(store.get_run("live").unwrap().unwrap().replay_of, None);
        let listed: Vec<Option<String>> = store
            .list_runs(&RunFilter::default())
            .unwrap()
            .into_iter()
            .map(|r| r.replay_of)
            .collect();
        assert_eq!(listed, [None, Some("run-recorded".to_string())]);
        // A copy into another store keeps it.
        let whole = store.read_whole("replayed").unwrap().unwrap();
        for_each_backend(|_, other| {
            assert!(other.import_run(&whole).unwrap());
            let copied = other.get_run("replayed").unwrap().unwrap();
            assert_eq!(copied.replay_of.as_deref(), Some("run-recorded"));
        });
    });
}
