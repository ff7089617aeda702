//! A real Prometheus (Debian's `prometheus`, 2.42, installed by `scripts/install-peers`)
//! scraping one target, for the tests of `diag serve`'s `/metrics`: one process per test on a
//! free 127.0.0.1 port, its data in a temporary folder, killed when dropped. The series are
//! read back with PromQL through the HTTP API, as a dashboard or an alert rule reads them.

use crate::OrFail;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::free_port;

/// The binary the Debian package installs.
pub const BINARY: &str = "prometheus";

/// One Prometheus process; killed when dropped.
pub struct Prometheus {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts a Prometheus that scrapes `http://TARGET/metrics` (`TARGET` is `HOST:PORT`)
    /// every second, and waits until it is ready.
    pub fn scraping(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().or_fail("a folder for Prometheus");
        let file = dir.path().join("prometheus.yml");
        std::fs::write(
            &file,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n\
                 - job_name: diag\n  static_configs:\n  - targets: [{target:?}]\n"
            ),
        )
        .or_fail("write prometheus.yml");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).or_fail("log");
        let child = Command::new(BINARY)
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().or_fail("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {BINARY} ({e}): run scripts/install-peers (apt package prometheus)")
            });
        let mut p = Prometheus { child, port, dir };
        p.wait_ready();
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = format!("{}/-/ready", self.url());
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "Prometheus exited ({status}) before it was ready:\n{}",
                    self.log()
                );
            }
            if get(&url).is_some_and(|(code, _)| code == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus was not ready on port {} within 60 s:\n{}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The samples of an instant PromQL query now: `(labels, value)` each.
    pub fn query(&self, promql: &str) -> Vec<(Value, f64)> {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query", self.url()),
            &[("query", promql)],
        )
        .or_fail("a query URL");
        let (code, body) = get(url.as_str()).or_fail("Prometheus answers");
        assert_eq!(code, 200, "{promql}: {body}");
        let doc: Value = serde_json::from_str(&body).or_fail("JSON");
        doc["data"]["result"]
            .as_array()
            .or_fail("a vector result")
            .iter()
            .map(|s| {
                let value = s["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok())
                    .or_fail("a sample value");
                (s["metric"].clone(), value)
            })
            .collect()
    }

    /// The one value `promql` gives now, if it gives exactly one.
    pub fn value(&self, promql: &str) -> Option<f64> {
        match self.query(promql).as_slice() {
            [(_, v)] => Some(*v),
            _ => None,
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get(url: &str) -> Option<(u16, String)> {
    let url = url.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .or_fail("a runtime");
        rt.block_on(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .no_proxy()
                .build()
                .or_fail("HTTP client");
            let r = client.get(&url).send().await.ok()?;
            let code = r.status().as_u16();
            Some((code, r.text().await.unwrap_or_default()))
        })
    })
    .join()
    .or_fail("the request's thread")
}
