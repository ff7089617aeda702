//! `diag-bench graph` prints one JSON object per invocation with the documented fields, and
//! each scenario executes the node count its definition says.

use assert_cmd::Command;

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
    let store = diag::store::Store::open(&db).unwrap();
    let runs = store.list_runs(&Default::default()).unwrap();
    assert_eq!(
        runs.len(),
        10,
        "a second benchmark on one file adds distinct runs"
    );
    for run in runs {
        assert_eq!(run.status, diag::store::RunStatus::Success);
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
