//! `diag serve` as Alertmanager's webhook receiver: a real Alertmanager 0.25 (started per
//! test, `diag_testkit::alertmanager`) delivering to the real binary, the models on aimock,
//! the store SQLite or the suite's PostgreSQL server. One run per alert group, whatever is
//! delivered again; refused requests (token, size, rate, bad documents) store nothing; a
//! burst queued and investigated with the configured concurrency; a process killed mid-run
//! and started again finishes its queue; SIGTERM drains; three instances on one PostgreSQL
//! store investigate each group once, and take over the group of one that dies.
//!
//! No fixed ports (`--listen 127.0.0.1:0`, the port read from the line `diag serve` prints),
//! and no waiting for an amount of time: every wait polls the store or the server with a
//! deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::cli_env::{self, TestEnv};
use diag_testkit::alertmanager::{alert, Alertmanager, AmConfig, Webhook};
use diag_testkit::{bounded, postgres, Aimock};

pub(crate) const KEY: &str = "sk-diag-serve-key-93d1e7";
pub(crate) const KEY_VAR: &str = "DIAG_SERVE_TEST_KEY";
pub(crate) const TOKEN: &str = "serve-token-5f0a9c27e4b1-a8d3c6e19f70";
/// The read token, where a test sets one.
const READ: &str = "serve-read-token-2e8d41b7-6f0c9a35d2e8";

/// A test environment whose models are `server`'s, with the serve token set and `serve`
/// (a `[serve]` table's lines) appended to the configuration.
pub(crate) fn env(server: &Aimock, serve: &str) -> TestEnv {
    let mut env = cli_env::live_model_env(&server.base_url(), "diag-live-model", KEY_VAR, KEY);
    env.set_env("DIAG_SERVE_TOKEN", TOKEN);
    let mut config = std::fs::read_to_string(env.path("diag.toml")).unwrap();
    config.push_str(&format!("[serve]\n{serve}"));
    std::fs::write(env.path("diag.toml"), config).unwrap();
    env
}

/// One `diag serve` process; killed (SIGKILL) when dropped if it still runs.
pub(crate) struct Serve {
    child: Child,
    pub(crate) addr: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Serve {
    /// Starts `diag serve --listen 127.0.0.1:0` with `extra` variables, and waits for the
    /// line that says where it listens.
    pub(crate) fn start(env: &TestEnv, extra: &[(&str, &str)]) -> Serve {
        let mut cmd = env.command();
        cmd.args(["--config", "diag.toml", "serve", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("diag serve starts");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let kept = lines.clone();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if let Some(addr) = line.strip_prefix("diag serve: listening on http://") {
                    let _ = tx.send(addr.to_string());
                }
                kept.lock().unwrap().push(line);
            }
        });
        let addr = rx.recv_timeout(bounded::LIMIT).unwrap_or_else(|_| {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "diag serve did not say where it listens:\n{}",
                lines.lock().unwrap().join("\n")
            )
        });
        Serve { child, addr, lines }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn stderr(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    pub(crate) fn signal(&self, signal: libc::c_int) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// SIGKILL: no chance to clean up.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits (bounded) for the process to end.
    pub(crate) fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + bounded::LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "diag serve did not stop:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Polls `ready` until it returns a value, failing (with the server's stderr) if the
    /// process ends first or nothing comes within the limit.
    pub(crate) fn poll<T>(&mut self, what: &str, mut ready: impl FnMut(&Serve) -> Option<T>) -> T {
        let deadline = Instant::now() + bounded::LIMIT;
        loop {
            if let Some(v) = ready(self) {
                return v;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "diag serve ended ({status}) while waiting for {what}:\n{}",
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "gave up waiting for {what}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn healthz(&self) -> Value {
        let (code, _, body) = request(&self.addr, "GET", "/healthz", None, b"");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    pub(crate) fn done(&self) -> u64 {
        self.healthz()["queue"]["done"].as_u64().unwrap()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `ready` for up to the limit (several processes: none of them is the one to watch).
pub(crate) fn poll<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + bounded::LIMIT;
    loop {
        if let Some(v) = ready() {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One HTTP/1.1 request on a new connection: (status, head in lower case, body).
pub(crate) fn request(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer to {method} {path}: {text:?}"));
    (code, head.to_ascii_lowercase(), body.to_string())
}

pub(crate) fn post(serve: &Serve, token: Option<&str>, body: &[u8]) -> (u16, String, String) {
    request(&serve.addr, "POST", "/alertmanager", token, body)
}

/// A webhook body (payload version `version`) of `alerts`, grouped under `name`.
pub(crate) fn payload(version: &str, name: &str, alerts: Value) -> Vec<u8> {
    json!({
        "version": version,
        "groupKey": format!("{{}}:{{alertname=\"{name}\"}}"),
        "status": "firing",
        "receiver": "diag",
        "groupLabels": {"alertname": name},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example",
        "truncatedAlerts": 0,
        "alerts": alerts,
    })
    .to_string()
    .into_bytes()
}

pub(crate) fn webhook_alert(labels: Value, fingerprint: &str) -> Value {
    json!({
        "status": "firing",
        "labels": labels,
        "annotations": {},
        "startsAt": "2026-12-03T19:58:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "",
        "fingerprint": fingerprint,
    })
}

/// One firing alert named `name`, as a webhook body.
pub(crate) fn one_alert(name: &str) -> Vec<u8> {
    payload(
        "4",
        name,
        json!([webhook_alert(json!({ "alertname": name }), name)]),
    )
}

/// The stored runs (`diag runs --json`).
pub(crate) fn runs(env: &TestEnv) -> Vec<Value> {
    let out = env.run(&["runs", "--json", "--limit", "1000"]);
    out.expect(0);
    out.json()["runs"].as_array().unwrap().clone()
}

/// `diag trace RUN --json`.
pub(crate) fn trace(env: &TestEnv, run_id: &str) -> Value {
    let out = env.run(&["trace", run_id, "--json"]);
    out.expect(0);
    out.json()
}

/// The queue as `(state, attempts, runs)` per notification, oldest first, read from the
/// SQLite file (read-only: nothing here sweeps or claims).
pub(crate) fn sqlite_queue(env: &TestEnv) -> Vec<(String, i64, Vec<String>)> {
    let conn =
        rusqlite::Connection::open_with_flags(env.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn
        .prepare("SELECT state, attempts, runs FROM alert_queue ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| {
        let runs: String = r.get(2)?;
        Ok((r.get(0)?, r.get(1)?, serde_json::from_str(&runs).unwrap()))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// Alertmanager sending every group to `serves` with the token.
pub(crate) fn am_to(serves: &[&Serve], group_wait_s: u32) -> Alertmanager {
    Alertmanager::start(&AmConfig {
        webhooks: serves
            .iter()
            .map(|s| Webhook {
                url: s.url("/alertmanager"),
                token: Some(TOKEN.to_string()),
            })
            .collect(),
        group_wait_s,
        ..AmConfig::default()
    })
}

/// Now, as Alertmanager takes a `startsAt`. Alertmanager sends a group at once, without its
/// `group_wait`, when its first alert started longer ago than that: alerts meant to arrive as
/// one group start now.
pub(crate) fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// The largest number of runs that overlapped in time (from their start and duration).
fn most_at_once(runs: &[Value]) -> usize {
    let mut edges: Vec<(i128, i32)> = Vec::new();
    for r in runs {
        let start = time::OffsetDateTime::parse(
            r["started_at"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
        .unix_timestamp_nanos()
            / 1_000_000;
        let end = start + i128::from(r["duration_ms"].as_i64().unwrap());
        edges.push((start, 1));
        edges.push((end, -1));
    }
    // An end at the same instant as a start comes first.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    usize::try_from(most).unwrap()
}

#[test]
fn alertmanager_deliveries_make_one_run_per_group_and_resolved_ones_are_recorded_only() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let mut env = env(
        &server,
        "concurrency = 2\nread_token_env = \"DIAG_SERVE_READ_TEST\"\n",
    );
    env.set_env("DIAG_SERVE_READ_TEST", READ);
    let mut serve = Serve::start(&env, &[]);
    let am = am_to(&[&serve], 1);
    let now = now();
    let checkout = [
        alert(
            "CheckoutHigh502Rate",
            "checkout-service",
            &now,
            &[("pod", "a")],
        ),
        alert(
            "CheckoutHigh502Rate",
            "checkout-service",
            &now,
            &[("pod", "b")],
        ),
    ];
    let payment = alert(
        "PaymentPoolExhausted",
        "payment-service",
        "2026-12-03T19:57:00Z",
        &[],
    );
    am.post_alerts(&json!([checkout[0], checkout[1], payment]));

    serve.poll("both groups investigated", |s| {
        (s.done() == 2).then_some(())
    });
    let stored = runs(&env);
    assert_eq!(stored.len(), 2, "{stored:?}");
    let mut keys = BTreeSet::new();
    for r in &stored {
        assert_eq!(r["status"], "SUCCESS", "{r}");
        let kept = trace(&env, r["run_id"].as_str().unwrap())["alert"].clone();
        assert_eq!(kept["source"], "webhook");
        let key = kept["group"]["group_key"].as_str().unwrap().to_string();
        let alerts = kept["group"]["alerts"].as_array().unwrap().len();
        assert_eq!(alerts, if key.contains("Checkout") { 2 } else { 1 });
        keys.insert(key);
    }
    assert_eq!(
        keys.into_iter().collect::<Vec<_>>(),
        [
            r#"{}:{alertname="CheckoutHigh502Rate", service="checkout-service"}"#,
            r#"{}:{alertname="PaymentPoolExhausted", service="payment-service"}"#,
        ]
    );
    let run_id = stored[0]["run_id"].as_str().unwrap();

    // The report of a run, HTML or Markdown, with the read token; an unknown run is 404; the
    // webhook token opens no report.
    let path = format!("/runs/{run_id}/report");
    let (code, head, html) = request(&serve.addr, "GET", &path, Some(READ), b"");
    assert_eq!(code, 200, "{html}");
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(html.contains("<h2>Alert</h2>"), "{html}");
    let md_path = format!("{path}?format=md");
    let (code, head, md) = request(&serve.addr, "GET", &md_path, Some(READ), b"");
    assert_eq!(code, 200, "{md}");
    assert!(head.contains("content-type: text/markdown"), "{head}");
    assert!(md.contains(run_id), "{md}");
    let unknown = "/runs/run-nonexistent/report";
    let (code, _, body) = request(&serve.addr, "GET", unknown, Some(READ), b"");
    assert_eq!(code, 404, "{body}");
    assert_eq!(request(&serve.addr, "GET", &path, None, b"").0, 401);
    assert_eq!(request(&serve.addr, "GET", &path, Some(TOKEN), b"").0, 403);

    // The alerts resolve: Alertmanager sends resolved notifications, recorded, not run.
    let ended = self::now();
    let resolved: Vec<Value> = [&checkout[0], &checkout[1], &payment]
        .iter()
        .map(|a| {
            let mut a = (*a).clone();
            a["endsAt"] = json!(ended);
            a
        })
        .collect();
    am.post_alerts(&Value::Array(resolved));
    serve.poll("the resolved notifications recorded", |s| {
        (s.healthz()["queue"]["resolved"] == 2).then_some(())
    });
    let h = serve.healthz();
    assert_eq!(h["status"], "ok");
    assert_eq!(
        h["queue"],
        json!({"queued": 0, "claimed": 0, "done": 2, "resolved": 2, "failed": 0})
    );
    assert_eq!(runs(&env).len(), 2);

    // SIGTERM with nothing in flight: it stops at once, exit 0.
    serve.signal(libc::SIGTERM);
    let status = serve.wait();
    assert_eq!(status.code(), Some(0), "{}", serve.stderr());
    assert!(
        serve.stderr().contains("diag serve: stopped"),
        "{}",
        serve.stderr()
    );
}

#[test]
fn refused_requests_get_one_clear_http_error_and_store_nothing() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let env = env(&server, "max_body_bytes = 4096\nmax_requests_per_sec = 1\n");

    // No token in the environment: it does not start.
    let out = env.run_with(&["--config", "diag.toml", "serve"], |cmd| {
        cmd.env_remove("DIAG_SERVE_TOKEN");
    });
    out.expect(2);
    assert!(
        out.one_error_line().contains("no bearer token"),
        "{}",
        out.stderr
    );
    // A token that could be guessed: it does not start either (its value is not printed).
    let out = env.run_with(&["--config", "diag.toml", "serve"], |cmd| {
        cmd.env("DIAG_SERVE_TOKEN", "hunter2hunter2");
    });
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: the bearer token in DIAG_SERVE_TOKEN ([serve] token_env) has 14 bytes, fewer \
         than 32: a short token can be guessed (set it to a long random string (openssl rand \
         -hex 32), or set [serve] allow_short_token = true)"
    );

    // With every log on: the token must still appear nowhere.
    let mut serve = Serve::start(&env, &[("DIAG_LOG", "trace")]);
    let good = one_alert("DirectPost");
    // A missing or wrong token: 401, nothing stored.
    for token in [None, Some("not-the-token"), Some("")] {
        let (code, head, body) = post(&serve, token, &good);
        assert_eq!(code, 401, "{token:?}: {body}");
        assert!(head.contains("www-authenticate: bearer"), "{head}");
        let doc: Value = serde_json::from_str(&body).unwrap();
        assert!(doc["error"].as_str().unwrap().contains("bearer token"));
    }
    // Larger than max_body_bytes: 413.
    let big = payload(
        "4",
        "DirectPost",
        json!([webhook_alert(
            json!({"alertname": "DirectPost", "x": "y".repeat(5000)}),
            "f1"
        )]),
    );
    let (code, _, body) = post(&serve, Some(TOKEN), &big);
    assert_eq!(code, 413, "{body}");
    assert!(body.contains("max_body_bytes"), "{body}");

    // Bad documents: 400 with one line of JSON naming the problem. Past one request a
    // second: 429 with Retry-After, and each is sent again until it is let through.
    let version_3 = payload(
        "3",
        "X",
        json!([webhook_alert(json!({"alertname": "X"}), "f1")]),
    );
    let unlabelled = payload("4", "X", json!([webhook_alert(json!({}), "f1")]));
    let bad: [(&[u8], &str); 3] = [
        (b"{not json", "not JSON"),
        (&version_3, r#"unknown webhook payload version \"3\""#),
        (&unlabelled, "alert 0 has no labels"),
    ];
    let mut limited = 0;
    for (body, expected) in bad {
        let (code, body) = serve.poll("a request under the rate", |s| {
            let (code, head, body) = post(s, Some(TOKEN), body);
            if code == 429 {
                assert!(head.contains("retry-after: 1"), "{head}");
                limited += 1;
                return None;
            }
            Some((code, body))
        });
        assert_eq!(code, 400, "{body}");
        assert_eq!(body.lines().count(), 1, "{body}");
        assert!(body.contains(expected), "{expected}: {body}");
        let doc: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(doc.as_object().unwrap().len(), 1, "{doc}");
    }
    assert!(limited > 0, "no request was refused 429 at one a second");

    assert_eq!(
        serve.healthz()["queue"],
        json!({"queued": 0, "claimed": 0, "done": 0, "resolved": 0, "failed": 0})
    );
    assert!(sqlite_queue(&env).is_empty());
    assert!(runs(&env).is_empty());
    serve.signal(libc::SIGTERM);
    assert_eq!(serve.wait().code(), Some(0), "{}", serve.stderr());
    let stderr = serve.stderr();
    assert!(!stderr.contains(TOKEN), "the token was printed");
    assert!(
        !stderr.contains("not-the-token"),
        "a sent token was printed"
    );

    // Each refusal was logged with its status, reason and peer (the rate's are only counted).
    let refusals: Vec<String> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("diag serve: refused POST /alertmanager from 127.0.0.1:"))
        .map(|rest| {
            // The peer's port differs per connection.
            let (port, said) = rest.split_once(": ").unwrap_or_else(|| panic!("{rest}"));
            assert!(port.parse::<u16>().is_ok(), "{rest}");
            said.to_string()
        })
        .collect();
    let unauthorized =
        "401 unauthorized: a bearer token is required (Authorization: Bearer …)".to_string();
    assert_eq!(
        refusals,
        [
            unauthorized.clone(),
            unauthorized.clone(),
            unauthorized,
            "413 too_large: the body is larger than 4096 bytes ([serve] max_body_bytes)".into(),
            "400 bad_document: not JSON: key must be a string at line 1 column 2".into(),
            "400 bad_document: unknown webhook payload version \"3\" (diag takes version \"4\")"
                .into(),
            "400 bad_document: alert 0 has no labels".into(),
        ],
        "{stderr}"
    );
}

#[test]
fn a_burst_of_200_alerts_is_queued_and_each_group_investigated_once_with_the_concurrency() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let env = env(&server, "concurrency = 3\n");
    let mut serve = Serve::start(&env, &[]);
    // Each group's alerts start now and reach Alertmanager in one request, well within its
    // group_wait: one notification each.
    let am = am_to(&[&serve], 3);
    let now = now();
    let started = Instant::now();
    for s in 0..10 {
        let service = format!("svc-{s:02}");
        let batch: Vec<Value> = (0..20)
            .map(|p| {
                let pod = format!("pod-{p:02}");
                alert("BurstAlert", &service, &now, &[("pod", &pod)])
            })
            .collect();
        am.post_alerts(&Value::Array(batch));
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    am.wait_for_alerts(200);

    serve.poll("ten groups investigated", |s| {
        (s.done() == 10).then_some(())
    });
    let queue = sqlite_queue(&env);
    assert_eq!(queue.len(), 10, "{queue:?}");
    for (state, attempts, runs) in &queue {
        assert_eq!((state.as_str(), *attempts, runs.len()), ("done", 1, 1));
    }
    let stored = runs(&env);
    assert_eq!(stored.len(), 10);
    let mut services = BTreeMap::new();
    for r in &stored {
        assert_eq!(r["status"], "SUCCESS", "{r}");
        let kept = trace(&env, r["run_id"].as_str().unwrap())["alert"].clone();
        let alerts = kept["group"]["alerts"].as_array().unwrap();
        assert_eq!(alerts.len(), 20, "{kept}");
        let service = alerts[0]["labels"]["service"].as_str().unwrap().to_string();
        *services.entry(service).or_insert(0) += 1;
    }
    assert_eq!(services.len(), 10, "{services:?}");
    assert!(services.values().all(|n| *n == 1), "{services:?}");
    let most = most_at_once(&stored);
    assert!((1..=3).contains(&most), "{most} runs at once");
    assert_eq!(
        serve.healthz()["queue"],
        json!({"queued": 0, "claimed": 0, "done": 10, "resolved": 0, "failed": 0})
    );
}

/// Waits until a run is RUNNING with its Verifier waiting on the slow model; returns its id.
pub(crate) fn verifier_waiting(env: &TestEnv, serve: &mut Serve) -> String {
    let db = env.db();
    serve.poll("a run waiting on its Verifier", |_| {
        let conn =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .ok()?;
        conn.query_row(
            "SELECT r.run_id FROM diagnosis_run r WHERE r.status = 'RUNNING' AND \
             (SELECT count(*) FROM orchestration_event e WHERE e.run_id = r.run_id) = 4",
            [],
            |r| r.get::<_, String>(0),
        )
        .ok()
    })
}

#[test]
fn a_serve_killed_mid_run_finishes_its_queue_when_started_again() {
    // The Verifier's answer takes 5 s: the first run is there when diag is killed.
    let server = Aimock::start_with("graph_slow_verifier.json", Some(KEY));
    let env = env(&server, "concurrency = 1\n");
    let mut serve = Serve::start(&env, &[]);
    let am = am_to(&[&serve], 1);
    am.post_alerts(&json!([
        alert(
            "CheckoutHigh502Rate",
            "checkout-service",
            "2026-12-03T19:58:00Z",
            &[]
        ),
        alert(
            "PaymentPoolExhausted",
            "payment-service",
            "2026-12-03T19:57:00Z",
            &[]
        ),
    ]));
    let killed = verifier_waiting(&env, &mut serve);
    serve.kill();

    // Started again on the same store: the orphan run is swept FAILED (interrupted), its
    // notification claimed again and investigated in a new run; the other one too. The
    // Alertmanager may deliver again meanwhile: nothing is queued twice.
    let mut again = Serve::start(&env, &[]);
    again.poll("the queue finished", |s| (s.done() == 2).then_some(()));
    let queue = sqlite_queue(&env);
    assert_eq!(queue.len(), 2, "{queue:?}");
    let (state, attempts, taken) = queue
        .iter()
        .find(|(_, _, runs)| runs.contains(&killed))
        .expect("the killed run's notification");
    assert_eq!((state.as_str(), *attempts), ("done", 2));
    assert_eq!(taken.len(), 2);
    assert_eq!(taken[0], killed);
    let stored = runs(&env);
    assert_eq!(stored.len(), 3, "{stored:?}");
    for r in &stored {
        let expected = if r["run_id"] == killed.as_str() {
            "FAILED"
        } else {
            "SUCCESS"
        };
        assert_eq!(r["status"], expected, "{r}");
    }
    let first = trace(&env, &killed);
    assert_eq!(first["run"]["failure"], "interrupted");
    assert_eq!(
        trace(&env, &taken[1])["alert"],
        first["alert"],
        "the same group, investigated again"
    );
    // Each group has exactly one finished run that counts.
    let mut identities = BTreeSet::new();
    for r in stored.iter().filter(|r| r["status"] == "SUCCESS") {
        let kept = trace(&env, r["run_id"].as_str().unwrap())["alert"].clone();
        assert!(identities.insert(kept["identity"].as_str().unwrap().to_string()));
    }
    assert_eq!(identities.len(), 2);
}

#[test]
fn sigterm_drains_the_run_in_flight_and_past_the_drain_time_requeues_it_and_a_full_queue_is_503() {
    let server = Aimock::start_with("graph_slow_verifier.json", Some(KEY));
    let env = env(&server, "concurrency = 1\n");

    let config = std::fs::read_to_string(env.path("diag.toml")).unwrap();

    // SIGTERM while a run waits on its Verifier: the run finishes, then diag exits 0. While
    // it runs, the queue (at most one pending) is full: 503 with Retry-After.
    std::fs::write(env.path("diag.toml"), format!("{config}max_queue = 1\n")).unwrap();
    let mut serve = Serve::start(&env, &[]);
    let (code, _, answer) = post(&serve, Some(TOKEN), &one_alert("DrainedAlert"));
    assert_eq!(code, 202, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["duplicate"], false);
    assert_eq!(answer["status"], "firing");
    let drained = verifier_waiting(&env, &mut serve);
    let (code, head, full) = post(&serve, Some(TOKEN), &one_alert("OneTooMany"));
    assert_eq!(code, 503, "{full}");
    assert!(head.contains("retry-after: "), "{head}");
    assert!(full.contains("max_queue"), "{full}");
    serve.signal(libc::SIGTERM);
    assert_eq!(serve.wait().code(), Some(0), "{}", serve.stderr());
    assert_eq!(trace(&env, &drained)["run"]["status"], "SUCCESS");
    assert_eq!(sqlite_queue(&env)[0].0, "done");

    // With no drain time, the run in flight is interrupted (FAILED) and its notification
    // queued again, its attempt given back; the next start investigates it.
    std::fs::write(env.path("diag.toml"), format!("{config}drain_secs = 0\n")).unwrap();
    let mut serve = Serve::start(&env, &[]);
    let (code, _, _) = post(&serve, Some(TOKEN), &one_alert("CutAlert"));
    assert_eq!(code, 202);
    // The same notification again is a duplicate: nothing more is queued.
    let (code, _, dup) = post(&serve, Some(TOKEN), &one_alert("DrainedAlert"));
    assert_eq!(code, 202);
    assert_eq!(
        serde_json::from_str::<Value>(&dup).unwrap()["duplicate"],
        true
    );
    let cut = verifier_waiting(&env, &mut serve);
    serve.signal(libc::SIGTERM);
    assert_eq!(serve.wait().code(), Some(0), "{}", serve.stderr());
    assert_eq!(trace(&env, &cut)["run"]["failure"], "interrupted");
    let queue = sqlite_queue(&env);
    assert_eq!(queue.len(), 2);
    assert_eq!((queue[1].0.as_str(), queue[1].1), ("queued", 0));
    assert_eq!(queue[1].2, [cut.as_str()]);

    std::fs::write(env.path("diag.toml"), config).unwrap();
    let mut serve = Serve::start(&env, &[]);
    serve.poll("the requeued notification investigated", |s| {
        (s.done() == 2).then_some(())
    });
    let queue = sqlite_queue(&env);
    assert_eq!(queue[1].2.len(), 2, "{queue:?}");
    assert_eq!(runs(&env).len(), 3);
}

#[test]
fn three_instances_on_one_postgres_store_investigate_each_group_once_and_take_over_a_dead_ones() {
    let server = Aimock::start_with("graph_slow_verifier.json", Some(KEY));
    let mut env = env(&server, "concurrency = 1\n");
    let pg = postgres::server();
    let url = pg.fresh_db();
    env.set_env("DIAG_DB", &url);
    // A short lease, and a host id per instance: as on three hosts, only the lease tells
    // that one has died.
    env.set_env("DIAG_STORE_LEASE_MS", "2500");
    let hosts = ["serve-host-a", "serve-host-b", "serve-host-c"];
    let mut serves: Vec<Serve> = hosts
        .iter()
        .map(|h| Serve::start(&env, &[("DIAG_HOST_ID", h)]))
        .collect();
    let am = am_to(&serves.iter().collect::<Vec<_>>(), 1);
    am.post_alerts(&json!([
        alert(
            "CheckoutHigh502Rate",
            "checkout-service",
            "2026-12-03T19:58:00Z",
            &[]
        ),
        alert(
            "PaymentPoolExhausted",
            "payment-service",
            "2026-12-03T19:57:00Z",
            &[]
        ),
        alert("InventoryLag", "inventory-api", "2026-12-03T19:56:00Z", &[]),
        alert("SearchSlow", "search-api", "2026-12-03T19:55:00Z", &[]),
    ]));

    // Each group is delivered to all three, and queued once.
    let sql = |q: &str| pg.psql(&url, q).trim().to_string();
    poll("four notifications queued", || {
        (sql("SELECT count(*) FROM alert_queue") == "4").then_some(())
    });
    // Each instance investigates one group: kill one of them mid-run.
    let (victim_host, victim_run) = poll("three claims with a run each", || {
        let rows = sql(
            "SELECT owner_host || ' ' || (runs::jsonb ->> 0) FROM alert_queue \
             WHERE state = 'claimed' AND runs <> '[]' ORDER BY id",
        );
        let rows: Vec<&str> = rows.lines().collect();
        (rows.len() == 3).then(|| {
            let (h, r) = rows[0].split_once(' ').unwrap();
            (h.to_string(), r.to_string())
        })
    });
    let victim = hosts.iter().position(|h| *h == victim_host).unwrap();
    serves[victim].kill();

    // The others finish their groups and, after the lease, one of them takes the dead one's.
    poll("every group investigated", || {
        (sql("SELECT count(*) FROM alert_queue WHERE state = 'done'") == "4").then_some(())
    });
    let taken = sql(&format!(
        "SELECT attempts || ' ' || runs FROM alert_queue WHERE runs LIKE '%{victim_run}%'"
    ));
    let (attempts, taken_runs) = taken.split_once(' ').unwrap();
    assert_eq!(attempts, "2", "{taken}");
    let taken_runs: Vec<String> = serde_json::from_str(taken_runs).unwrap();
    assert_eq!(taken_runs.len(), 2);
    assert_eq!(taken_runs[0], victim_run);
    let owner = sql(&format!(
        "SELECT owner_host FROM diagnosis_run WHERE run_id = '{}'",
        taken_runs[1]
    ));
    assert_ne!(
        owner, victim_host,
        "the dead host's group was taken by another"
    );

    let stored = runs(&env);
    assert_eq!(stored.len(), 5, "{stored:?}");
    let mut identities = BTreeMap::new();
    for r in &stored {
        let id = r["run_id"].as_str().unwrap();
        if id == victim_run {
            assert_eq!(trace(&env, id)["run"]["failure"], "interrupted");
            continue;
        }
        assert_eq!(r["status"], "SUCCESS", "{r}");
        let kept = trace(&env, id)["alert"].clone();
        *identities
            .entry(kept["identity"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    assert_eq!(identities.len(), 4, "{identities:?}");
    assert!(identities.values().all(|n| *n == 1), "{identities:?}");
    for (i, s) in serves.iter_mut().enumerate() {
        if i != victim {
            s.signal(libc::SIGTERM);
            assert_eq!(s.wait().code(), Some(0), "{}", s.stderr());
        }
    }
}
