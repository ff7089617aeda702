//! The run store on both backends: the SQLite file and a real PostgreSQL 15 server (started
//! by `diag_testkit::postgres`). The port-level cases here and in diag-store's conformance suite
//! (`crates/diag-store/tests/it/conformance.rs`) run once per backend
//! from one definition ([`for_each_backend`], `diag_testkit::backends`); the process-level ones
//! (writers at once, writers killed) are in `store_concurrency.rs`. The cases here that drive
//! PostgreSQL through the `diag` binary: bad input (unreachable server, wrong password, a
//! database that is not a diag store, a newer schema), a database made read-only that still
//! reads, and `diag store copy` between the backends with byte-identical exports; and, through
//! the port, a connection the server drops, made anew by the next call.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use diag::stores::OpenOptions;
use diag_core::agent::runtime::StepStatus;
use diag_core::agent::AgentRole;
use diag_core::graph::RunConfig;
use diag_core::store::{RunFilter, RunStatus};
use diag_core::store::{Store, StoreError};
use serde_json::json;

use crate::support::cli_env::TestEnv;
use diag_testkit::backends::{for_each_backend, write_full, write_partial};
use diag_testkit::postgres;
use diag_testkit::records::{exchange_ok, new_run, step, summary, PASS_PATH};

#[test]
fn a_finished_run_reads_back_whole_and_its_trace_is_final() {
    for_each_backend(|backend, store| {
        write_full(&store, "run-a");
        let run = store.get_run("run-a").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Success, "{backend}");
        assert_eq!(run.answer.as_deref(), Some("payment-service timed out"));
        assert_eq!(run.step_count, 2, "{backend}");
        assert_eq!(run.tool_count, 3, "{backend}");
        assert_eq!(
            run.path,
            PASS_PATH
                .iter()
                .map(|(n, _)| n.to_string())
                .collect::<Vec<_>>(),
            "{backend}"
        );
        assert_eq!(store.events("run-a").unwrap().len(), PASS_PATH.len());
        assert_eq!(store.agent_steps("run-a").unwrap().len(), 2);
        let exchanges = store.exchanges("run-a").unwrap();
        assert_eq!(exchanges.len(), 2);
        assert_eq!(exchanges[0].exchange, exchange_ok(AgentRole::Executor, 1));
        assert_eq!(store.invocations("run-a").unwrap().len(), 3);
        assert_eq!(
            store.evaluation("run-a").unwrap().unwrap().metrics,
            json!({"groundedness": 0.9})
        );
        // Final: no trace row and no second finish is accepted.
        let config = RunConfig::new("backends", "run-a");
        let rec = diag_core::store::Recorder::clone(&write_partial(&store, "run-b", 0));
        rec.agent_step(&config, &step(AgentRole::Planner, 9, StepStatus::Ok));
        let refused = rec
            .take_error()
            .expect("a step for a finished run is refused");
        assert!(
            refused
                .to_string()
                .contains("run-a is SUCCESS, not RUNNING"),
            "{backend}: {refused}"
        );
        let again = store
            .finish_failed("run-a", "late", Default::default())
            .unwrap_err();
        assert!(
            again.to_string().contains("not RUNNING"),
            "{backend}: {again}"
        );
        assert_eq!(store.agent_steps("run-a").unwrap().len(), 2, "{backend}");
    });
}

#[test]
fn runs_are_refused_alike_on_both_backends() {
    for_each_backend(|backend, store| {
        drop(store.create_run(new_run("dup", "s", 0)).unwrap());
        let dup = store
            .create_run(new_run("dup", "s", 0))
            .err()
            .expect("a duplicate id");
        assert_eq!(dup.to_string(), "run dup already exists", "{backend}");
        let blank = store.finish_success("dup", summary("  ")).unwrap_err();
        assert!(
            blank.to_string().contains("non-blank answer"),
            "{backend}: {blank}"
        );
        let unknown = store
            .finish_failed("nope", "x", Default::default())
            .unwrap_err();
        assert_eq!(unknown.to_string(), "unknown run nope", "{backend}");
        store
            .finish_failed("dup", "model down", Default::default())
            .unwrap();
        let not_success = store.record_evaluation("dup", &json!({})).unwrap_err();
        assert_eq!(
            not_success.to_string(),
            "run dup is FAILED; only a SUCCESS run is evaluated",
            "{backend}"
        );
    });
}

#[test]
fn runs_are_listed_newest_first_by_session_and_status() {
    for_each_backend(|backend, store| {
        for (id, session) in [("r1", "s1"), ("r2", "s2"), ("r3", "s1")] {
            let rec = store.create_run(new_run(id, session, 0)).unwrap();
            drop(rec);
        }
        store.finish_success("r3", summary("ok")).unwrap();
        let ids = |f: RunFilter| -> Vec<String> {
            store
                .list_runs(&f)
                .unwrap()
                .into_iter()
                .map(|r| r.run_id)
                .collect()
        };
        assert_eq!(ids(RunFilter::default()), ["r3", "r2", "r1"], "{backend}");
        assert_eq!(
            ids(RunFilter {
                session_id: Some("s1".into()),
                ..Default::default()
            }),
            ["r3", "r1"],
            "{backend}"
        );
        assert_eq!(
            ids(RunFilter {
                status: Some(RunStatus::Running),
                ..Default::default()
            }),
            ["r2", "r1"],
            "{backend}"
        );
        assert_eq!(
            ids(RunFilter {
                limit: Some(1),
                ..Default::default()
            }),
            ["r3"],
            "{backend}"
        );
    });
}

const PASS: &str = "tests/fixtures/runs/pass.json";

/// A bad store location: one `diag:` line, the exit code of its kind (6: trying again may
/// work; 2: the user's store), and nothing written.
fn refused(env: &TestEnv, url: &str, extra_env: &[(&str, &str)], exit: i32, want: &str) {
    let out = env.run_with(&["--db", url, "ask", "--fixture", "pass.json"], |c| {
        for (k, v) in extra_env {
            c.env(k, v);
        }
    });
    out.expect(exit);
    let line = out.one_error_line();
    assert!(line.starts_with("diag: ") && line.contains(want), "{line}");
}

#[test]
fn bad_postgres_stores_are_refused_with_one_line_and_nothing_written() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let server = postgres::server();

    // Nothing listens on this port.
    let port = diag_testkit::free_port();
    let dead = format!("postgres://diag@127.0.0.1:{port}/runs");
    refused(
        &env,
        &dead,
        &[],
        6,
        &format!("cannot reach the PostgreSQL run store at diag@127.0.0.1:{port}/runs"),
    );

    // A wrong password: refused, and the password is never printed.
    let pw_url = server.fresh_db_password();
    let out = env.run_with(&["--db", &pw_url, "ask", "--fixture", "pass.json"], |c| {
        c.env("PGPASSWORD", "wrong-horse-battery");
    });
    out.expect(2);
    let line = out.one_error_line();
    assert!(
        line.contains("refused the credentials of user diag_pw"),
        "{line}"
    );
    assert!(
        !out.stderr.contains("wrong-horse-battery"),
        "{}",
        out.stderr
    );
    let tables = server.psql(
        &pw_url,
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
    );
    assert_eq!(tables.trim(), "0", "nothing written");
    // The right one, from the environment, works (and is not stored anywhere).
    env.run_with(&["--db", &pw_url, "ask", "--fixture", "pass.json"], |c| {
        c.env("PGPASSWORD", server.password());
    })
    .expect(0);
    let stored = server.psql(&pw_url, "SELECT count(*) FROM diagnosis_run");
    assert_eq!(stored.trim(), "1");
    let dump = server.psql(
        &pw_url,
        "SELECT string_agg(r::text, '') FROM diagnosis_run r",
    );
    assert!(
        !dump.contains(server.password()),
        "the password is not stored"
    );

    // A database with tables of its own.
    let foreign = server.fresh_db();
    server.psql(
        &foreign,
        "CREATE TABLE invoices (id int); INSERT INTO invoices VALUES (1)",
    );
    refused(
        &env,
        &foreign,
        &[],
        2,
        "is a PostgreSQL database but not a diag run store",
    );
    let tables = server.psql(
        &foreign,
        "SELECT string_agg(tablename, ',') FROM pg_tables WHERE schemaname = 'public'",
    );
    assert_eq!(tables.trim(), "invoices", "nothing created");

    // A store of a newer schema version.
    let newer = server.fresh_db();
    env.run(&["--db", &newer, "ask", "--fixture", "pass.json"])
        .expect(0);
    server.psql(&newer, "UPDATE diag_schema SET version = 99");
    refused(
        &env,
        &newer,
        &[],
        2,
        "has schema version 99, newer than the",
    );
    assert_eq!(
        server
            .psql(&newer, "SELECT count(*) FROM diagnosis_run")
            .trim(),
        "1"
    );
    assert_eq!(
        server
            .psql(&newer, "SELECT version FROM diag_schema")
            .trim(),
        "99"
    );
    // Read-only commands refuse it the same way.
    let out = env.run(&["--db", &newer, "runs"]);
    out.expect(2);
    assert!(out.one_error_line().contains("newer than the"));
}

/// The PostgreSQL counterpart of diag-store-sqlite's
/// `file::a_write_protected_file_reads_but_refuses_writes`: a
/// database its administrator has made read-only still opens and reads, and every write is
/// refused as read-only, naming the store.
#[test]
fn a_read_only_postgres_database_reads_but_refuses_writes() {
    let url = postgres::server().fresh_db();
    let store = diag::stores::open(Path::new(&url), &OpenOptions::default()).unwrap();
    write_full(&store, "r");
    drop(store);
    let database = url.rsplit('/').next().unwrap();
    postgres::server().psql(
        &url,
        &format!("ALTER DATABASE {database} SET default_transaction_read_only = on"),
    );

    let store = diag::stores::open(Path::new(&url), &OpenOptions::default())
        .expect("a read-only store still opens for reading");
    assert_eq!(
        store.get_run("r").unwrap().unwrap().status,
        RunStatus::Success
    );
    assert_eq!(store.events("r").unwrap().len(), PASS_PATH.len());
    let read_only = |e: StoreError| {
        let text = e.to_string();
        assert!(
            matches!(
                e.downcast_ref::<diag_store_postgres::PgError>(),
                Some(diag_store_postgres::PgError::ReadOnly { .. })
            ),
            "{text}"
        );
        assert!(
            text.contains("read-only") && text.contains(url.trim_start_matches("postgres://")),
            "{text}"
        );
    };
    read_only(store.create_run(new_run("r2", "s", 0)).err().unwrap());
    read_only(
        store
            .record_event(
                "r",
                &diag_testkit::records::event(7, "x", diag_diagnosis::Status::Completed),
            )
            .unwrap_err(),
    );
    read_only(store.gc(None, Some(0)).unwrap_err());
    assert_eq!(store.count_runs().unwrap(), 1, "nothing was deleted");
}

#[test]
fn store_copy_carries_runs_between_backends_with_byte_identical_exports() {
    let env = TestEnv::new();
    let sqlite = env.path("team.db");
    let sqlite = sqlite.to_str().unwrap();
    env.run(&[
        "--db",
        sqlite,
        "replay",
        diag_testkit::repo().join("fixtures/runs").to_str().unwrap(),
    ])
    .expect(0);
    let pg = postgres::server().fresh_db();
    let back = env.path("back.db");
    let back = back.to_str().unwrap();
    let copy = |from: &str, to: &str| {
        let out = env.run(&["store", "copy", "--from", from, "--to", to]);
        out.expect(0);
        out.stdout.clone()
    };
    let stored = env
        .run(&["--db", sqlite, "runs", "--json", "--limit", "1000"])
        .json()["runs"]
        .as_array()
        .unwrap()
        .len();
    assert!(
        stored > 40,
        "the fixture library was replayed ({stored} runs)"
    );
    let first = copy(sqlite, &pg);
    assert!(
        first.starts_with(&format!("copied {stored} run(s)")),
        "{first}"
    );
    // Idempotent: a second copy (or one resumed after an interruption) adds nothing.
    let again = copy(sqlite, &pg);
    assert!(
        again.starts_with("copied 0 run(s)") && again.contains(&format!("{stored} already there")),
        "{again}"
    );
    assert!(copy(&pg, back).starts_with(&format!("copied {stored} run(s)")));
    let ids: Vec<String> = env
        .run(&["--db", sqlite, "runs", "--json", "--limit", "100"])
        .json()["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), stored);
    for id in &ids {
        let export = |db: &str| env.run(&["--db", db, "export", id]).stdout.clone();
        let original = export(sqlite);
        assert!(!original.is_empty());
        assert_eq!(export(&pg), original, "{id} from PostgreSQL");
        assert_eq!(export(back), original, "{id} copied back to SQLite");
    }
    // The listing order is kept too.
    let listed = |db: &str| {
        env.run(&["--db", db, "runs", "--json", "--limit", "100"])
            .stdout
            .clone()
    };
    assert_eq!(listed(&pg), listed(sqlite));

    // Resumable: a copy cut short (here: five runs missing from the target) is finished by
    // running it again, which copies only what is missing.
    let server = postgres::server();
    server.psql(
        &pg,
        "DELETE FROM diagnosis_run WHERE run_id IN \
         (SELECT run_id FROM diagnosis_run ORDER BY created_seq DESC LIMIT 5)",
    );
    let resumed = copy(sqlite, &pg);
    assert!(
        resumed.starts_with("copied 5 run(s)")
            && resumed.contains(&format!("{} already there", stored - 5)),
        "{resumed}"
    );
    for id in &ids {
        let export = |db: &str| env.run(&["--db", db, "export", id]).stdout.clone();
        assert_eq!(export(&pg), export(sqlite), "{id} after the resumed copy");
    }
    // A RUNNING run is not final: it is counted, not copied.
    let live = diag_testkit::open_sqlite(Path::new(sqlite)).unwrap();
    let rec = live.create_run(new_run("run-still-going", "s", 0)).unwrap();
    let out = copy(sqlite, back);
    assert!(out.contains("1 RUNNING not copied\n"), "{out}");
    drop(rec);
    drop(live);
    assert!(
        diag::stores::open_existing(Path::new(back), &OpenOptions::default())
            .unwrap()
            .get_run("run-still-going")
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_live_owner_renews_the_leases_of_its_running_runs_only() {
    let t0 = diag_core::clock::Timestamp::from_unix_ms(1_800_000_000_000);
    let at = |ms: i64| {
        Arc::new(diag_core::clock::FixedClock(
            diag_core::clock::Timestamp::from_unix_ms(t0.unix_ms() + ms),
        ))
    };
    let lease = Duration::from_secs(60);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lease.db");
    let url = postgres::server().fresh_db();
    // The backend itself: the lease renewal is its heartbeat's, not the port's.
    enum Backend {
        Sqlite(diag_store_sqlite::SqliteStore),
        Postgres(diag_store_postgres::PgStore),
    }
    impl Backend {
        fn store(&self) -> Store {
            match self {
                Backend::Sqlite(s) => Store::new(s.clone()),
                Backend::Postgres(s) => Store::new(s.clone()),
            }
        }
        fn renew_leases(&self) -> usize {
            match self {
                Backend::Sqlite(s) => s.renew_leases().unwrap(),
                Backend::Postgres(s) => s.renew_leases().unwrap(),
            }
        }
    }
    let open = |location: &str, clock: Arc<diag_core::clock::FixedClock>| -> Backend {
        if diag::stores::is_postgres(Path::new(location)) {
            Backend::Postgres(
                diag_store_postgres::PgStore::open(
                    location,
                    diag_store_postgres::PgOptions {
                        clock,
                        lease,
                        ..Default::default()
                    },
                )
                .unwrap(),
            )
        } else {
            Backend::Sqlite(
                diag_store_sqlite::SqliteStore::open_with(
                    location,
                    diag_store_sqlite::StoreOptions {
                        clock,
                        lease,
                        ..Default::default()
                    },
                )
                .unwrap(),
            )
        }
    };
    let leases = |location: &str| -> Vec<(String, String)> {
        let sql = "SELECT run_id, lease_expires_at FROM diagnosis_run ORDER BY run_id";
        if diag::stores::is_postgres(Path::new(location)) {
            postgres::server()
                .psql(location, sql)
                .lines()
                .map(|l| {
                    let (a, b) = l.split_once('|').unwrap();
                    (a.to_string(), b.to_string())
                })
                .collect()
        } else {
            diag_testkit::records::rows(
                &diag_testkit::records::raw(Path::new(location)),
                sql,
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        }
    };
    for location in [file.to_str().unwrap(), url.as_str()] {
        let store = open(location, at(0)).store();
        drop(store.create_run(new_run("live", "s", 0)).unwrap());
        drop(store.create_run(new_run("done", "s", 0)).unwrap());
        store
            .finish_failed("done", "stopped", Default::default())
            .unwrap();
        let first = "2027-01-15T08:01:00.000Z".to_string();
        assert_eq!(
            leases(location),
            [
                ("done".to_string(), first.clone()),
                ("live".to_string(), first.clone())
            ],
            "{location}: created with a lease of a minute"
        );
        drop(store);
        let later = open(location, at(40_000));
        let renewed = later.renew_leases();
        assert_eq!(renewed, 1, "{location}: only the RUNNING run");
        assert_eq!(
            leases(location),
            [
                ("done".to_string(), first.clone()),
                ("live".to_string(), "2027-01-15T08:01:40.000Z".to_string())
            ],
            "{location}"
        );
    }
}

/// A server that drops the store's connection (a restart, a failover, an administrator's
/// `pg_terminate_backend`) costs at most the call that meets the dropped connection, reported
/// as one line naming the store: the next call makes a new connection, and the run goes on to
/// be finished and read back whole.
#[test]
fn a_connection_the_server_drops_is_made_anew_by_the_next_call() {
    use diag_diagnosis::Status;
    use diag_testkit::records::event;

    let url = postgres::server().fresh_db();
    let named = url.trim_start_matches("postgres://").to_string();
    let store = diag::stores::open(Path::new(&url), &OpenOptions::default()).unwrap();
    let rec = store.create_run(new_run("r", "s", 0)).unwrap();
    store
        .record_event("r", &event(1, "planner", Status::Completed))
        .unwrap();
    // Ends the store's session from the server's side and waits until it is gone.
    let drop_connection = || {
        let ended = postgres::server().psql(
            &url,
            "SELECT count(pg_terminate_backend(pid, 60000)) FROM pg_stat_activity \
             WHERE datname = current_database() AND backend_type = 'client backend' \
             AND pid <> pg_backend_pid()",
        );
        assert_eq!(ended.trim(), "1", "the store's one connection");
    };
    // The first call after the drop either meets the dropped connection (and fails) or, when
    // the driver has already seen it go, runs on a new one; the second always runs on a new one.
    let first_after = |result: Result<(), StoreError>| -> bool {
        match result {
            Ok(()) => true,
            Err(e) => {
                let line = e.to_string();
                assert!(line.contains(&named) && !line.contains('\n'), "{line}");
                false
            }
        }
    };

    drop_connection();
    let mut stored = vec!["planner"];
    if first_after(store.record_event("r", &event(2, "executor", Status::Completed))) {
        stored.push("executor");
    }
    store
        .record_event("r", &event(3, "gatekeeper", Status::Pass))
        .expect("the next call runs on a new connection");
    stored.push("gatekeeper");

    drop_connection();
    let read = store.get_run("r").map(|_| ());
    first_after(read);
    assert_eq!(
        store.get_run("r").unwrap().unwrap().status,
        RunStatus::Running,
        "a read after it runs on a new connection"
    );

    drop_connection();
    first_after(store.record_invocation(&diag_testkit::records::invocation(
        "r",
        "s",
        1,
        json!({}),
    )));
    store
        .finish_success_evaluated("r", summary("payment-service timed out"), &json!({}))
        .expect("the finish runs on a new connection");
    let run = store.get_run("r").unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Success);
    assert_eq!(
        run.path, stored,
        "every event that was reported stored is there"
    );
    assert!(store.evaluation("r").unwrap().is_some());
    drop(rec);
}
