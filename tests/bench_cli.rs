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
