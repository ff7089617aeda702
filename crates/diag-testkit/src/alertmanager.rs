//! A real Prometheus Alertmanager (Debian's `prometheus-alertmanager`, 0.25, installed by
//! `scripts/install-peers`) for the tests of `diag investigate alertmanager` and `diag serve`:
//! one process per test on a free 127.0.0.1 port, gossip clustering off, its data in a
//! temporary folder, killed when dropped. Alerts are posted to its API v2 as Prometheus posts
//! them; a webhook receiver can point it at a `diag serve`.

use crate::OrFail;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::free_port;

/// The binary the Debian package installs.
pub const BINARY: &str = "prometheus-alertmanager";

/// A webhook receiver Alertmanager sends every group to.
#[derive(Debug, Clone)]
pub struct Webhook {
    /// e.g. `http://127.0.0.1:PORT/alertmanager`
    pub url: String,
    /// Sent as `Authorization: Bearer <token>` (`http_config.authorization.credentials`).
    pub token: Option<String>,
}

/// How the test's Alertmanager routes alerts.
#[derive(Debug, Clone)]
pub struct AmConfig {
    /// Where every group goes; `None`: a receiver that sends nowhere.
    pub webhooks: Vec<Webhook>,
    pub group_by: Vec<String>,
    /// Seconds: how soon a new group is sent, and how often a changed one.
    pub group_wait_s: u32,
    pub group_interval_s: u32,
    pub repeat_interval_s: u32,
}

impl Default for AmConfig {
    fn default() -> Self {
        AmConfig {
            webhooks: Vec::new(),
            group_by: vec!["alertname".into(), "service".into()],
            group_wait_s: 1,
            group_interval_s: 2,
            repeat_interval_s: 3600,
        }
    }
}

impl AmConfig {
    fn yaml(&self) -> String {
        let group_by = self
            .group_by
            .iter()
            .map(|l| format!("{l:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut yaml = format!(
            "route:\n  receiver: diag\n  group_by: [{group_by}]\n  group_wait: {}s\n  \
             group_interval: {}s\n  repeat_interval: {}s\nreceivers:\n- name: diag\n",
            self.group_wait_s, self.group_interval_s, self.repeat_interval_s
        );
        if !self.webhooks.is_empty() {
            yaml.push_str("  webhook_configs:\n");
            for w in &self.webhooks {
                yaml.push_str(&format!(
                    "  - url: {:?}\n    send_resolved: true\n    max_alerts: 0\n",
                    w.url
                ));
                if let Some(token) = &w.token {
                    yaml.push_str(&format!(
                        "    http_config:\n      authorization:\n        credentials: {token:?}\n"
                    ));
                }
            }
        }
        yaml
    }
}

/// One Alertmanager process; killed when dropped.
pub struct Alertmanager {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

/// Where the binary is, or a panic that says how to install it.
pub fn binary() -> PathBuf {
    let candidates = [
        PathBuf::from("/usr/bin").join(BINARY),
        PathBuf::from("/usr/local/bin").join(BINARY),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{BINARY} is not installed: run scripts/install-peers (apt package \
                 prometheus-alertmanager)"
            )
        })
}

impl Alertmanager {
    /// Starts an Alertmanager routing as `config` says, and waits until it is ready.
    pub fn start(config: &AmConfig) -> Alertmanager {
        let dir = tempfile::tempdir().or_fail("a folder for Alertmanager");
        let file = dir.path().join("am.yml");
        std::fs::write(&file, config.yaml()).or_fail("write am.yml");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("am.log")).or_fail("am.log");
        let child = Command::new(binary())
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().or_fail("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {BINARY}: {e}"));
        let mut am = Alertmanager { child, port, dir };
        am.wait_ready();
        am
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("am.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = format!("{}/-/ready", self.url());
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "Alertmanager exited ({status}) before it was ready:\n{}",
                    self.log()
                );
            }
            if blocking_get(&url).is_some_and(|(code, _)| code == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Alertmanager was not ready on port {} within 60 s:\n{}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Posts alerts to `POST /api/v2/alerts`, as Prometheus does.
    pub fn post_alerts(&self, alerts: &Value) {
        let (code, body) = blocking_post(&format!("{}/api/v2/alerts", self.url()), alerts)
            .or_fail("Alertmanager answers");
        assert_eq!(code, 200, "post alerts: {body}");
    }

    /// The alerts `GET /api/v2/alerts` lists (silenced and inhibited ones included).
    pub fn alerts(&self) -> Vec<Value> {
        let (code, body) =
            blocking_get(&format!("{}/api/v2/alerts", self.url())).or_fail("Alertmanager answers");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).or_fail("JSON")
    }

    /// Waits (bounded) until Alertmanager lists `n` alerts.
    pub fn wait_for_alerts(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.alerts().len() < n {
            assert!(
                Instant::now() < deadline,
                "Alertmanager did not list {n} alerts"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Creates a silence of the alerts `matchers` (`[{name, value, isRegex, isEqual}]`) match,
    /// for an hour; returns its id.
    pub fn silence(&self, matchers: Value) -> String {
        let silence = json!({
            "matchers": matchers,
            "startsAt": "2000-01-01T00:00:00Z",
            "endsAt": "2999-01-01T00:00:00Z",
            "createdBy": "diag tests",
            "comment": "silenced by a test",
        });
        let (code, body) = blocking_post(&format!("{}/api/v2/silences", self.url()), &silence)
            .or_fail("Alertmanager answers");
        assert_eq!(code, 200, "silence: {body}");
        serde_json::from_str::<Value>(&body).or_fail("JSON")["silenceID"]
            .as_str()
            .or_fail("silenceID")
            .to_string()
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An alert as Prometheus posts it.
pub fn alert(name: &str, service: &str, starts_at: &str, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels = json!({"alertname": name, "service": service});
    for (k, v) in extra_labels {
        labels[*k] = json!(v);
    }
    json!({
        "labels": labels,
        "annotations": {"summary": format!("{name} fires for {service}")},
        "startsAt": starts_at,
        "endsAt": "2999-01-01T00:00:00Z",
        "generatorURL": "http://127.0.0.1:9090/graph?g0.expr=up+%3D%3D+0&g0.tab=1",
    })
}

/// One request from a thread of its own with its own runtime, so a test may call these from
/// synchronous and asynchronous code alike.
fn request(method: reqwest::Method, url: &str, body: Option<&Value>) -> Option<(u16, String)> {
    let url = url.to_string();
    let body = body.cloned();
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
            let mut r = client.request(method, &url);
            if let Some(body) = &body {
                r = r.json(body);
            }
            let r = r.send().await.ok()?;
            let code = r.status().as_u16();
            Some((code, r.text().await.unwrap_or_default()))
        })
    })
    .join()
    .or_fail("the request's thread")
}

fn blocking_get(url: &str) -> Option<(u16, String)> {
    request(reqwest::Method::GET, url, None)
}

fn blocking_post(url: &str, body: &Value) -> Option<(u16, String)> {
    request(reqwest::Method::POST, url, Some(body))
}
