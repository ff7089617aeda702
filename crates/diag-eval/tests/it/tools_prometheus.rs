//! `query_metrics` against a real Prometheus (PEERS.md): the OpenMetrics fixture is
//! backfilled with `promtool`, a server is started on a free 127.0.0.1 port for each test and
//! killed when the test ends, and queries at fixed times give exact values.
//!
//! Prometheus and promtool come from `scripts/install-peers`; without them these tests fail
//! and say so, they never skip.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use diag_core::clock::{FixedClock, Timestamp};
use diag_core::protocol::InvocationStatus;
use diag_core::tools::{Tool, ToolContext, ToolError, ToolLimits, ToolRegistry};
use diag_eval::env::Prometheus;
use diag_tools::{MetricsLimits, QueryMetrics};
use serde_json::{json, Value};

use diag_testkit::bounded;

fn fixture() -> PathBuf {
    diag_testkit::repo().join("tests/fixtures/prometheus/metrics.om")
}

fn require(program: &str) {
    let mut version = Command::new(program);
    version
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match version.spawn() {
        Ok(child) => {
            let what = format!("{program} --version");
            let o = bounded::wait_with_output(child, bounded::LIMIT, &what);
            assert!(
                o.status.success(),
                "`{what}` failed ({}); run scripts/install-peers",
                o.status
            );
        }
        Err(e) => panic!("{program} is not installed ({e}); run scripts/install-peers"),
    }
}

/// diag's own Prometheus starter (the one `diag eval` uses): the fixture backfilled with
/// promtool, served on a free 127.0.0.1 port, killed and its folder removed on drop.
async fn start_prometheus() -> Prometheus {
    require("promtool");
    require("prometheus");
    Prometheus::start("tools_prometheus", &fixture(), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn at(s: &str) -> FixedClock {
    FixedClock(Timestamp::parse_rfc3339(s).unwrap())
}

fn tool(base_url: &str) -> QueryMetrics {
    QueryMetrics::new(base_url, MetricsLimits::default()).unwrap()
}

async fn query(tool: &QueryMetrics, clock: &FixedClock, args: Value) -> Result<Value, ToolError> {
    let cx = ToolContext { clock };
    tool.call(&args, &cx).await
}

#[tokio::test]
async fn instant_queries_at_a_fixed_time_are_exact() {
    let prom = start_prometheus().await;
    let metrics = tool(prom.base_url());
    let clock = at("2026-11-30T15:00:00Z");
    let data = query(
        &metrics,
        &clock,
        json!({
            "query": "http_requests_total{service=\"checkout\",code=\"502\"}",
            "time": "2026-11-30T14:30:00Z"
        }),
    )
    .await
    .unwrap();
    assert_eq!(
        data,
        json!({
            "resultType": "vector",
            "result": [{
                "metric": {"__name__": "http_requests_total", "code": "502", "service": "checkout"},
                "value": [1796049000, "3600", "2026-11-30T14:30:00Z"]
            }]
        })
    );

    // Unix seconds work too, and aggregation over the fixture is exact.
    let data = query(
        &metrics,
        &clock,
        json!({
            "query": "sum by (code) (increase(http_requests_total{service=\"checkout\"}[10m]))",
            "time": 1796049000
        }),
    )
    .await
    .unwrap();
    let mut by_code: Vec<(String, String)> = data["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["metric"]["code"].as_str().unwrap().to_string(),
                s["value"][1].as_str().unwrap().to_string(),
            )
        })
        .collect();
    by_code.sort();
    assert_eq!(
        by_code,
        [("200".into(), "4800".into()), ("502".into(), "1200".into())]
    );

    // Without `time`, the run clock's "now" is used, not the server's.
    let clock = at("2026-11-30T14:00:00Z");
    let data = query(
        &metrics,
        &clock,
        json!({"query": "payment_pool_active_connections / payment_pool_max_connections"}),
    )
    .await
    .unwrap();
    assert_eq!(
        data["result"][0]["value"],
        json!([1796047200, "1", "2026-11-30T14:00:00Z"])
    );
}

#[tokio::test]
async fn range_queries_return_the_matrix() {
    let prom = start_prometheus().await;
    let metrics = tool(prom.base_url());
    let data = query(
        &metrics,
        &at("2026-11-30T15:00:00Z"),
        json!({
            "query": "payment_pool_active_connections{service=\"payment\"}",
            "start": "2026-11-30T13:56:00Z",
            "end": "2026-11-30T14:01:00Z",
            "step": "60s"
        }),
    )
    .await
    .unwrap();
    assert_eq!(data["resultType"], "matrix");
    let values: Vec<(i64, String, String)> = data["result"][0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            assert_eq!(p.as_array().unwrap().len(), 3, "{p}");
            (
                p[0].as_i64().unwrap(),
                p[1].as_str().unwrap().to_string(),
                p[2].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let t0 = 1796046960;
    let row = |dt: i64, v: &str, t: &str| (t0 + dt, v.to_string(), t.to_string());
    // Each sample carries its time as text, so a claim about 13:58 can quote it.
    assert_eq!(
        values,
        [
            row(0, "11", "2026-11-30T13:56:00Z"),
            row(60, "40", "2026-11-30T13:57:00Z"),
            row(120, "43", "2026-11-30T13:58:00Z"),
            row(180, "46", "2026-11-30T13:59:00Z"),
            row(240, "50", "2026-11-30T14:00:00Z"),
            row(300, "50", "2026-11-30T14:01:00Z"),
        ]
    );
}

#[tokio::test]
async fn bad_promql_is_an_error_with_prometheus_message() {
    let prom = start_prometheus().await;
    let metrics = tool(prom.base_url());
    let clock = at("2026-11-30T14:30:00Z");
    let err = query(
        &metrics,
        &clock,
        json!({"query": "sum(rate(http_requests_total[5m])", "time": "2026-11-30T14:30:00Z"}),
    )
    .await
    .unwrap_err();
    match &err {
        ToolError::InvalidArguments(m) => {
            assert!(m.starts_with("prometheus bad_data: "), "{m}");
            assert!(m.contains("parse error"), "{m}");
        }
        other => panic!("{other:?}"),
    }

    // A bad time is Prometheus's to judge, and reported the same way.
    let err = query(
        &metrics,
        &clock,
        json!({"query": "up", "time": "yesterday"}),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments(ref m) if m.contains("bad_data")));

    // Through the registry, the error is recorded as an error outcome.
    let mut registry = ToolRegistry::new(ToolLimits::default());
    registry.register(std::sync::Arc::new(metrics)).unwrap();
    let cx = ToolContext { clock: &clock };
    let outcome = registry
        .call("query_metrics", &json!({"query": "rate("}), &cx)
        .await;
    assert_eq!(outcome.status, InvocationStatus::Error);
    let text = outcome.output["error"].as_str().unwrap();
    assert!(text.contains("prometheus bad_data"), "{text}");
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable() {
    // Bound, then released: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("no free port on 127.0.0.1")
        .port();
    let metrics = tool(&format!("http://127.0.0.1:{port}"));
    let err = query(
        &metrics,
        &at("2026-11-30T14:30:00Z"),
        json!({"query": "up"}),
    )
    .await
    .unwrap_err();
    match err {
        ToolError::Unavailable(m) => {
            assert!(
                m.starts_with(&format!("cannot reach http://127.0.0.1:{port}: ")),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn range_and_instant_parameters_are_checked_before_any_request() {
    let metrics = tool("http://127.0.0.1:9");
    let clock = at("2026-11-30T14:30:00Z");
    for (args, want) in [
        (json!({}), "missing required parameter 'query'"),
        (json!({"query": "  "}), "parameter 'query' is empty"),
        (
            json!({"query": "up", "start": "2026-11-30T14:00:00Z", "step": "1m"}),
            "missing: end",
        ),
        (
            json!({"query": "up", "time": "2026-11-30T14:00:00Z", "start": "2026-11-30T14:00:00Z"}),
            "not both",
        ),
        (
            json!({"query": "up", "step": true}),
            "parameter 'step' must be a string or a number",
        ),
        (
            json!({"query": "up", "timeout": "5s"}),
            "unknown parameter 'timeout'",
        ),
    ] {
        match query(&metrics, &clock, args.clone()).await {
            Err(ToolError::InvalidArguments(m)) => assert!(m.contains(want), "{args}: {m}"),
            other => panic!("{args}: {other:?}"),
        }
    }
}
