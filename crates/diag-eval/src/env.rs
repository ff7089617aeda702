//! A scenario's environment: the run clock at the scenario's `now`, the tool configuration
//! over its logs and runbooks, and a Prometheus that diag backfills from `metrics.om` with
//! `promtool` into a temporary folder and serves on a free 127.0.0.1 port until it is
//! stopped (or dropped: the server is killed and the folder removed whatever happened).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use super::scenario::Scenario;
use diag_ask::config::{
    AgentsConfig, Config, LogsConfig, MetricsConfig, RunbooksConfig, ToolsConfig,
};
use diag_core::clock::{Clock, Timestamp};
use diag_core::protocol::InvocationStatus;
use diag_core::tools::{ToolContext, ToolRegistry};

/// The run clock of a scenario: its `now` when the clock is made, advancing with real time.
pub struct ScenarioClock {
    anchor: Timestamp,
    started: Instant,
}

impl ScenarioClock {
    pub fn new(now: Timestamp) -> Self {
        ScenarioClock {
            anchor: now,
            started: Instant::now(),
        }
    }
}

impl Clock for ScenarioClock {
    fn now(&self) -> Timestamp {
        self.anchor.saturating_add(self.started.elapsed())
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Why an environment could not be set up.
#[derive(Debug, Error)]
pub enum EnvError {
    #[error("scenario {scenario}: {what}")]
    Prometheus { scenario: String, what: String },
    #[error("interrupted while the environment of scenario {scenario} was starting")]
    Interrupted { scenario: String },
}

/// How long promtool may take to backfill, and Prometheus to become ready.
const PROMTOOL_LIMIT: Duration = Duration::from_secs(180);
const READY_LIMIT: Duration = Duration::from_secs(90);

/// A Prometheus serving a backfilled history; killed and its folder removed on drop.
pub struct Prometheus {
    // Declared first so it is dropped (killed) before the folder goes.
    child: tokio::process::Child,
    base_url: String,
    dir: TempFolder,
}

/// A folder under the system's temporary directory, removed on drop.
struct TempFolder(PathBuf);

impl TempFolder {
    /// A new folder `diag-eval-PID-N`; a name left behind by an earlier process is skipped.
    fn new() -> std::io::Result<TempFolder> {
        static N: AtomicU64 = AtomicU64::new(0);
        loop {
            let n = N.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("diag-eval-{}-{n}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(TempFolder(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 10_000 => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for TempFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> Option<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .ok()
}

impl Prometheus {
    /// Backfills `metrics` (OpenMetrics) and starts Prometheus on it, waiting (polling
    /// `/-/ready`, bounded) until it answers. `cancel` stops the wait.
    pub async fn start(
        scenario: &str,
        metrics: &Path,
        cancel: Option<&CancellationToken>,
    ) -> Result<Prometheus, EnvError> {
        let err = |what: String| EnvError::Prometheus {
            scenario: scenario.to_string(),
            what,
        };
        let dir =
            TempFolder::new().map_err(|e| err(format!("cannot create a temporary folder: {e}")))?;
        let data = dir.0.join("data");
        let mut promtool = tokio::process::Command::new("promtool");
        promtool
            .args(["tsdb", "create-blocks-from", "openmetrics"])
            .arg(metrics)
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = promtool.spawn().map_err(|e| {
            err(format!(
                "cannot run promtool ({e}); install Prometheus with promtool (scripts/install-peers)"
            ))
        })?;
        let backfill = tokio::time::timeout(PROMTOOL_LIMIT, child.wait_with_output());
        let out = match cancel {
            Some(c) => tokio::select! {
                r = backfill => r,
                () = c.cancelled() => return Err(EnvError::Interrupted { scenario: scenario.to_string() }),
            },
            None => backfill.await,
        };
        let out = out
            .map_err(|_| {
                err(format!(
                    "promtool did not finish within {} s",
                    PROMTOOL_LIMIT.as_secs()
                ))
            })?
            .map_err(|e| err(format!("promtool failed: {e}")))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(err(format!(
                "{}: promtool could not backfill it ({}): {}",
                metrics.display(),
                out.status,
                diag_core::text::one_line(stderr.trim(), 300)
            )));
        }
        let config = dir.0.join("prometheus.yml");
        std::fs::write(&config, "global:\n  scrape_interval: 1h\n")
            .map_err(|e| err(format!("cannot write {}: {e}", config.display())))?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| err(format!("cannot build an HTTP client: {e}")))?;

        // A port found free may be taken before Prometheus binds it: try a few.
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port().ok_or_else(|| err("no free port on 127.0.0.1".into()))?;
            let log = dir.0.join(format!("prometheus-{port}.log"));
            let log_file = std::fs::File::create(&log)
                .map_err(|e| err(format!("cannot create {}: {e}", log.display())))?;
            let mut child = tokio::process::Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", data.display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                // Without it the backfilled blocks, years old, could be deleted at compaction.
                .arg("--storage.tsdb.retention.time=100y")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file)
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| {
                    err(format!(
                        "cannot run prometheus ({e}); install it (scripts/install-peers)"
                    ))
                })?;
            let base_url = format!("http://127.0.0.1:{port}");
            let deadline = Instant::now() + READY_LIMIT;
            loop {
                if cancel.is_some_and(CancellationToken::is_cancelled) {
                    let _ = child.kill().await;
                    return Err(EnvError::Interrupted {
                        scenario: scenario.to_string(),
                    });
                }
                let ready = client
                    .get(format!("{base_url}/-/ready"))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if ready {
                    return Ok(Prometheus {
                        child,
                        base_url,
                        dir,
                    });
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill().await;
                    return Err(err(format!(
                        "prometheus did not become ready within {} s",
                        READY_LIMIT.as_secs()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let _ = child.kill().await;
            last = std::fs::read_to_string(&log).unwrap_or_default();
        }
        Err(err(format!(
            "prometheus exited before it was ready: {}",
            diag_core::text::one_line(last.trim(), 300)
        )))
    }

    /// The base URL of the server's HTTP API.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Stops the server and removes its data.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        drop(self.dir);
    }
}

/// A scenario's running environment: the tool configuration over its folder and, when it
/// has a history, its Prometheus.
pub struct ScenarioEnv {
    pub tools: ToolsConfig,
    pub prometheus: Option<Prometheus>,
}

/// The tool configuration of a scenario: `search_logs` over its logs in its zone,
/// `search_runbooks` over its runbooks, `query_metrics` at `metrics_url`.
pub fn tools_config(scenario: &Scenario, metrics_url: Option<&str>) -> ToolsConfig {
    let path = |p: &String| scenario.path(p).display().to_string();
    let env = &scenario.file.environment;
    ToolsConfig {
        search_logs: Some(LogsConfig {
            paths: env.logs.iter().map(path).collect(),
            time_zone: env.time_zone.clone(),
            sources: Vec::new(),
            allow_link_targets: Vec::new(),
        }),
        query_metrics: metrics_url.map(|u| MetricsConfig {
            base_url: u.to_string(),
        }),
        search_runbooks: (!env.runbooks.is_empty()).then(|| RunbooksConfig {
            paths: env.runbooks.iter().map(path).collect(),
            allow_link_targets: Vec::new(),
        }),
    }
}

impl ScenarioEnv {
    /// Starts the environment (Prometheus only when the scenario has metrics).
    pub async fn start(
        scenario: &Scenario,
        cancel: Option<&CancellationToken>,
    ) -> Result<ScenarioEnv, EnvError> {
        let prometheus = match &scenario.file.environment.metrics {
            Some(m) => Some(Prometheus::start(scenario.id(), &scenario.path(m), cancel).await?),
            None => None,
        };
        let tools = tools_config(scenario, prometheus.as_ref().map(Prometheus::base_url));
        Ok(ScenarioEnv { tools, prometheus })
    }

    /// The configuration of a run in this environment: the user's models, agents (or
    /// `model` for every agent), limits and store, with the scenario's tools and no MCP
    /// servers.
    pub fn config_for(&self, user: &Config, model: Option<&str>) -> Config {
        let mut c = user.clone();
        c.tools = self.tools.clone();
        c.mcp = Vec::new();
        if let Some(name) = model {
            c.agents = AgentsConfig {
                default: Some(name.to_string()),
                ..AgentsConfig::default()
            };
        }
        c
    }

    /// Stops the environment's servers.
    pub async fn stop(self) {
        if let Some(p) = self.prometheus {
            p.stop().await;
        }
    }
}

/// The result of one `[[checks]]` step run through the tool registry.
#[derive(Debug, Clone)]
pub struct CheckRun {
    pub index: usize,
    pub tool: String,
    pub status: InvocationStatus,
    pub output: Value,
    /// `expect` occurs in the serialised output (case-insensitive).
    pub found: bool,
}

/// Runs every check of a scenario through `registry`, as a model's call would reach it,
/// at the scenario's clock.
pub async fn run_checks(scenario: &Scenario, registry: &ToolRegistry) -> Vec<CheckRun> {
    let clock = ScenarioClock::new(scenario.now);
    let cx = ToolContext { clock: &clock };
    let mut out = Vec::new();
    for (index, c) in scenario.file.checks.iter().enumerate() {
        let outcome = registry.call(&c.tool, &c.arguments, &cx).await;
        let text = outcome.output.to_string().to_lowercase();
        out.push(CheckRun {
            index,
            tool: c.tool.clone(),
            status: outcome.status,
            found: text.contains(&c.expect.to_lowercase()),
            output: outcome.output,
        });
    }
    out
}

/// What is wrong with a scenario's checks: a step that failed or did not show its
/// `expect`, and evidence that no successful step of its tool shows. Empty when all is well.
pub fn check_problems(scenario: &Scenario, runs: &[CheckRun]) -> Vec<String> {
    let mut problems = Vec::new();
    for r in runs {
        let expect = scenario
            .file
            .checks
            .get(r.index)
            .map_or("", |c| c.expect.as_str());
        if r.status != InvocationStatus::Ok {
            problems.push(format!(
                "checks[{}] ({}): status {:?}: {}",
                r.index,
                r.tool,
                r.status,
                diag_core::text::one_line(&r.output.to_string(), 300)
            ));
        } else if !r.found {
            problems.push(format!(
                "checks[{}] ({}): output does not contain `{expect}`: {}",
                r.index,
                r.tool,
                diag_core::text::one_line(&r.output.to_string(), 300)
            ));
        }
    }
    for (i, e) in scenario.file.label.evidence.iter().enumerate() {
        let text = e.text.to_lowercase();
        let shown = runs.iter().any(|r| {
            r.tool == e.tool
                && r.status == InvocationStatus::Ok
                && r.output.to_string().to_lowercase().contains(&text)
        });
        if !shown {
            problems.push(format!(
                "label.evidence[{i}]: no successful `{}` check shows `{}`",
                e.tool, e.text
            ));
        }
    }
    problems
}

/// The log lines of the scenario that `search_logs` cannot place in time, counted by the
/// tool itself: every line matched under a window from the epoch. `(matched, untimed,
/// skipped files)`.
pub async fn untimed_lines(scenario: &Scenario, registry: &ToolRegistry) -> (u64, u64, Vec<Value>) {
    let clock = ScenarioClock::new(scenario.now);
    let cx = ToolContext { clock: &clock };
    let args = json!({"query": ".", "regex": true, "since": "1970-01-01T00:00:00Z", "limit": 1});
    let out = registry.call("search_logs", &args, &cx).await.output;
    (
        out["matches_found"].as_u64().unwrap_or(0),
        out["untimed_lines"].as_u64().unwrap_or(u64::MAX),
        out["skipped"].as_array().cloned().unwrap_or_default(),
    )
}
