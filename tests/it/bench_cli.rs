//! `diag-bench graph` prints one JSON object per invocation with the documented fields, and
//! each scenario executes the node count its definition says. With `--writers W` it starts W
//! writer processes, each with a host id of its own, into one store of either backend (a
//! SQLite file, a database on the suite's PostgreSQL server), and every run they report
//! stored is in the store.

use std::collections::BTreeSet;
use std::path::Path;

use assert_cmd::Command;
use diag::stores::OpenOptions;

use diag_testkit::postgres;

fn bench(scenario: &str, runs: u64) -> serde_json::Value {
    let out = Command::cargo_bin("diag-bench")
        .unwrap()
        .args(["graph", "--scenario", scenario, "--runs", &runs.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().count(),
        1,
        "one JSON object on one line: {text}"
    );
    serde_json::from_str(&text).unwrap()
}

#[test]
fn every_scenario_reports_its_figures() {
    for (scenario, per_run) in [("pass", 6), ("evidence_retry", 12), ("planner_fail", 3)] {
        let v = bench(scenario, 7);
        assert_eq!(v["scenario"], scenario);
        assert_eq!(v["runs"], 7);
        assert_eq!(v["node_executions"], 7 * per_run, "{scenario}");
        assert_eq!(v["nodes_per_run"], per_run);
        for key in ["seconds", "runs_per_sec", "us_per_node"] {
            assert!(v[key].as_f64().is_some_and(|x| x >= 0.0), "{key} in {v}");
        }
        assert!(v["peak_rss_kb"].as_u64().is_some_and(|kb| kb > 0), "{v}");
    }
}

#[test]
fn unknown_scenario_is_a_usage_error() {
    let out = Command::cargo_bin("diag-bench")
        .unwrap()
        .args(["graph", "--scenario", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn store_flag_persists_every_run_as_the_ask_service_does() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bench.db");
    for _ in 0..2 {
        let out = Command::cargo_bin("diag-bench")
            .unwrap()
            .args(["graph", "--scenario", "pass", "--runs", "5", "--store"])
            .arg(&db)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["runs"], 5);
        assert!(v["db_bytes_per_run"].as_u64().is_some_and(|b| b > 0), "{v}");
    }
    let store = diag_testkit::open_sqlite(&db).unwrap();
    let runs = store.list_runs(&Default::default()).unwrap();
    assert_eq!(
        runs.len(),
        10,
        "a second benchmark on one file adds distinct runs"
    );
    for run in runs {
        assert_eq!(run.status, diag_core::store::RunStatus::Success);
        assert_eq!(run.answer.as_deref(), Some("benchmark answer"));
        assert_eq!(run.path.len(), 6);
        assert_eq!(store.events(&run.run_id).unwrap().len(), 6);
        assert!(store.evaluation(&run.run_id).unwrap().is_some());
        assert!(run.self_evaluation.is_some());
    }
}

#[test]
fn store_flag_with_an_unusable_path_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let out = Command::cargo_bin("diag-bench")
        .unwrap()
        .args(["graph", "--runs", "1", "--store"])
        .arg(file.join("diag.db"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("diag-bench: cannot create the folder"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// `--writers 3 --runs 2` into `location`: the figures, checked against the store.
fn three_writers(location: &Path) -> (serde_json::Value, Vec<diag_core::store::RunRow>) {
    let out = Command::cargo_bin("diag-bench")
        .unwrap()
        .args([
            "graph",
            "--scenario",
            "pass",
            "--runs",
            "2",
            "--writers",
            "3",
        ])
        .arg("--store")
        .arg(location)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "one JSON object: {text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (key, want) in [
        ("writers", 3),
        ("runs_per_writer", 2),
        ("runs", 6),
        ("stored", 6),
        ("errors", 0),
        ("store_runs_before", 0),
        ("store_runs_after", 6),
    ] {
        assert_eq!(v[key], want, "{key} in {v}");
    }
    for key in [
        "seconds",
        "runs_per_sec",
        "write_seconds",
        "write_runs_per_sec",
    ] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {v}");
    }
    let writers = v["per_writer"].as_array().unwrap();
    assert_eq!(writers.len(), 3, "{v}");
    for (i, w) in writers.iter().enumerate() {
        assert_eq!(w["writer"], i + 1, "{w}");
        assert_eq!(w["stored"], 2, "{w}");
        assert_eq!(w["errors"], 0, "{w}");
        assert!(w["first_error"].is_null(), "{w}");
    }
    let hosts: BTreeSet<&str> = writers
        .iter()
        .map(|w| w["host_id"].as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 3, "a host id per writer: {v}");
    let pids: BTreeSet<u64> = writers.iter().map(|w| w["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids.len(), 3, "a process per writer: {v}");

    let store = diag::stores::open_existing(location, &OpenOptions::default()).unwrap();
    let runs = store.list_runs(&Default::default()).unwrap();
    assert_eq!(runs.len(), 6);
    for run in &runs {
        assert_eq!(run.status, diag_core::store::RunStatus::Success);
        assert_eq!(run.path.len(), 6);
        assert_eq!(store.events(&run.run_id).unwrap().len(), 6);
        assert!(store.evaluation(&run.run_id).unwrap().is_some());
    }
    (v, runs)
}

#[test]
fn writers_store_every_run_into_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("writers.db");
    let (v, _) = three_writers(&db);
    assert_eq!(v["backend"], "sqlite");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let hosts: i64 = conn
        .query_row(
            "SELECT count(DISTINCT owner_host) FROM diagnosis_run",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(hosts, 3, "each writer's runs carry its host id");
}

#[test]
fn writers_store_every_run_into_a_postgres_database() {
    let server = postgres::server();
    let url = server.fresh_db();
    let (v, _) = three_writers(Path::new(&url));
    assert_eq!(v["backend"], "postgres");
    assert_eq!(
        server
            .psql(&url, "SELECT count(DISTINCT owner_host) FROM diagnosis_run")
            .trim(),
        "3",
        "each writer's runs carry its host id"
    );
}

#[test]
fn writers_need_a_store_and_at_least_one_writer() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("never.db");
    for args in [
        vec!["graph", "--runs", "1", "--writers", "2"],
        vec![
            "graph",
            "--runs",
            "1",
            "--writers",
            "0",
            "--store",
            db.to_str().unwrap(),
        ],
    ] {
        let out = Command::cargo_bin("diag-bench")
            .unwrap()
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    assert!(!db.exists(), "a usage error writes nothing");
}
