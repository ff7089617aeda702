//! `query_metrics` against a real Prometheus (PEERS.md): the OpenMetrics fixture is
//! backfilled with `promtool`, a server is started on a free 127.0.0.1 port for each test and
//! killed when the test ends, and queries at fixed times give exact values.
//!
//! Prometheus and promtool come from `scripts/install-peers`; without them these tests fail
//! and say so, they never skip.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use diag::clock::{FixedClock, Timestamp};
use diag::protocol::InvocationStatus;
use diag::tools::{
    MetricsLimits, QueryMetrics, Tool, ToolContext, ToolError, ToolLimits, ToolRegistry,
};
use serde_json::{json, Value};
use tempfile::TempDir;

mod bounded;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/prometheus/metrics.om")
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

/// A Prometheus serving the fixture; killed on drop, even when the test panics.
struct Prometheus {
    // Declared first so it drops first: the server stops before its data directory goes.
    _server: KillOnDrop,
    base_url: String,
    _dir: TempDir,
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port on 127.0.0.1")
}

fn is_ready(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /-/ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut response = String::new();
    let _ = s.read_to_string(&mut response);
    response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200")
}

impl Prometheus {
    fn start() -> Prometheus {
        require("promtool");
        require("prometheus");
        let dir = TempDir::new().unwrap();
        let data = dir.path().join("data");
        let mut promtool = Command::new("promtool");
        promtool
            .args(["tsdb", "create-blocks-from", "openmetrics"])
            .arg(fixture())
            .arg(&data)
            .stdin(Stdio::null());
        let out = bounded::output(&mut promtool, bounded::LIMIT);
        assert!(
            out.status.success(),
            "promtool failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let config = dir.path().join("prometheus.yml");
        fs::write(&config, "global:\n  scrape_interval: 1h\n").unwrap();

        // A port picked free may be taken before Prometheus binds it; try a few.
        let mut last_log = String::new();
        for _ in 0..3 {
            let port = free_port();
            let log = dir.path().join(format!("prometheus-{port}.log"));
            let log_file = fs::File::create(&log).unwrap();
            let mut server = KillOnDrop(
                Command::new("prometheus")
                    .arg(format!("--config.file={}", config.display()))
                    .arg(format!("--storage.tsdb.path={}", data.display()))
                    .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                    // Without it the backfilled blocks could be deleted at compaction.
                    .arg("--storage.tsdb.retention.time=100y")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log_file)
                    .spawn()
                    .expect("starting prometheus"),
            );
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if is_ready(port) {
                    return Prometheus {
                        _server: server,
                        base_url: format!("http://127.0.0.1:{port}"),
                        _dir: dir,
                    };
                }
                if let Ok(Some(_)) = server.0.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            drop(server);
            last_log = fs::read_to_string(&log).unwrap_or_default();
        }
        panic!("prometheus did not become ready on 127.0.0.1:\n{last_log}");
    }
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
    let prom = Prometheus::start();
    let metrics = tool(&prom.base_url);
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
    let prom = Prometheus::start();
    let metrics = tool(&prom.base_url);
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
    let prom = Prometheus::start();
    let metrics = tool(&prom.base_url);
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
    let port = free_port();
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
