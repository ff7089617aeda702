//! `diag investigate alertmanager` against a real Alertmanager 0.25 (installed by
//! `scripts/install-peers`, started per test on 127.0.0.1) with alerts posted to its API as
//! Prometheus posts them, and the models on aimock: groups found and grouped, matchers and
//! silences honoured, one run per group that keeps its alerts, a group investigated once and
//! `--again` repeating, and every way the Alertmanager can fail leaving nothing stored.

use std::io::{Read, Write};
use std::net::TcpListener;

use serde_json::{json, Value};

use crate::support::cli_env::{self, assert_schema, TestEnv};
use diag_testkit::alertmanager::{alert, Alertmanager, AmConfig};
use diag_testkit::Aimock;

const KEY: &str = "sk-diag-investigate-key-7c41";
const KEY_VAR: &str = "DIAG_INVESTIGATE_KEY";

fn env(server: &Aimock) -> TestEnv {
    cli_env::live_model_env(&server.base_url(), "diag-live-model", KEY_VAR, KEY)
}

/// Two alerts of one group (CheckoutHigh502Rate on checkout-service, two pods), one of
/// another (PaymentPoolExhausted), one that a silence covers (InventoryLag).
fn fire(am: &Alertmanager) {
    am.post_alerts(&json!([
        alert(
            "CheckoutHigh502Rate",
            "checkout-service",
            "2026-12-03T19:58:00Z",
            &[("pod", "a")]
        ),
        alert(
            "CheckoutHigh502Rate",
            "checkout-service",
            "2026-12-03T19:59:00Z",
            &[("pod", "b")]
        ),
        alert(
            "PaymentPoolExhausted",
            "payment-service",
            "2026-12-03T19:57:00Z",
            &[]
        ),
        alert("InventoryLag", "inventory-api", "2026-12-03T19:50:00Z", &[]),
    ]));
    am.wait_for_alerts(4);
    am.silence(
        json!([{"name": "alertname", "value": "InventoryLag", "isRegex": false, "isEqual": true}]),
    );
}

fn investigate(env: &TestEnv, am: &Alertmanager, extra: &[&str]) -> (Option<i32>, Value) {
    let url = am.url();
    let mut args = vec![
        "--config",
        "diag.toml",
        "investigate",
        "alertmanager",
        "--url",
        url.as_str(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = env.run(&args);
    let doc: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", out.stdout, out.stderr));
    assert_schema("investigate.v1.json", &doc);
    (out.code, doc)
}

fn stored_runs(env: &TestEnv) -> usize {
    let out = env.run(&["runs", "--json", "--limit", "1000"]);
    out.expect(0);
    out.json()["runs"].as_array().expect("runs").len()
}

fn titles(doc: &Value, action: &str) -> Vec<String> {
    let mut t: Vec<String> = doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["action"] == action)
        .map(|g| g["title"].as_str().unwrap().to_string())
        .collect();
    t.sort();
    t
}

#[test]
fn each_firing_group_is_investigated_once_with_its_alerts_kept_and_again_repeats() {
    let am = Alertmanager::start(&AmConfig::default());
    fire(&am);
    let server = Aimock::start_with("graph.json", Some(KEY));
    let mut env = env(&server);
    std::fs::create_dir_all(env.path("reports")).unwrap();
    let hook = capture();
    env.set_env("DIAG_NOTIFY_TEST_TOKEN", "notify-secret-1");
    let mut config = std::fs::read_to_string(env.path("diag.toml")).unwrap();
    config.push_str(&format!(
        "[notify]\nurl = {:?}\ntoken_env = \"DIAG_NOTIFY_TEST_TOKEN\"\nreport_base_url = \"http://diag.example\"\n",
        hook.url
    ));
    std::fs::write(env.path("diag.toml"), config).unwrap();

    let (code, doc) = investigate(&env, &am, &["--jobs", "2", "--report-dir", "reports"]);
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(doc["alerts"], 3, "the silenced alert is left out: {doc}");
    assert_eq!(
        titles(&doc, "investigated"),
        [
            "CheckoutHigh502Rate checkout-service (+1)",
            "PaymentPoolExhausted payment-service"
        ]
    );
    assert_eq!(doc["investigated"], 2);
    assert_eq!(doc["success"], 2);
    let groups = doc["groups"].as_array().unwrap();
    // Groups come in the order their first alert started.
    assert_eq!(groups[0]["alerts"][0]["name"], "PaymentPoolExhausted");
    let checkout = &groups[1];
    assert_eq!(
        checkout["group_key"],
        r#"{alertname="CheckoutHigh502Rate", service="checkout-service"}"#
    );
    assert_eq!(checkout["alerts"].as_array().unwrap().len(), 2);
    assert!(checkout["question"]
        .as_str()
        .unwrap()
        .starts_with("Why is the alert CheckoutHigh502Rate firing for checkout-service since 2026-12-03T19:58:00.000Z?"));
    assert!(checkout["question"]
        .as_str()
        .unwrap()
        .contains("Look at 2026-12-03T19:43:00.000Z and later"));
    assert!(checkout["question"]
        .as_str()
        .unwrap()
        .contains("Alert expression: up == 0."));
    let run_id = checkout["run_id"].as_str().unwrap().to_string();
    assert_eq!(checkout["status"], "SUCCESS");

    // The run keeps the alerts it investigated; trace and reports show them.
    let trace = env.run(&["trace", &run_id, "--json"]);
    trace.expect(0);
    let trace = trace.json();
    assert_schema("trace.v1.json", &trace);
    let kept = &trace["alert"];
    assert_eq!(kept["source"], "api");
    assert_eq!(kept["identity"], checkout["identity"]);
    let fingerprints: Vec<&str> = kept["group"]["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["fingerprint"].as_str().unwrap())
        .collect();
    let listed: Vec<&str> = checkout["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["fingerprint"].as_str().unwrap())
        .collect();
    assert_eq!(fingerprints, listed);
    assert_eq!(
        kept["group"]["alerts"][0]["labels"]["service"],
        "checkout-service"
    );
    let text = env.run(&["trace", &run_id]);
    text.expect(0);
    assert!(
        text.stdout.contains("alert    from Alertmanager's api"),
        "{}",
        text.stdout
    );
    let report = std::fs::read_to_string(env.path(&format!("reports/{run_id}.html"))).unwrap();
    assert!(report.contains("<h2>Alert</h2>") && report.contains("CheckoutHigh502Rate"));
    assert_eq!(checkout["report"], format!("reports/{run_id}.html"));
    assert_eq!(stored_runs(&env), 2);

    // Each finished run was posted to the result webhook, with its token.
    let posts = hook.got.lock().unwrap().clone();
    assert_eq!(posts.len(), 2, "{posts:?}");
    let (head, post) = posts
        .iter()
        .find(|(_, p)| p["run_id"] == run_id.as_str())
        .expect("the checkout run was posted");
    assert!(
        head.contains("authorization: Bearer notify-secret-1")
            || head.contains("Authorization: Bearer notify-secret-1"),
        "{head}"
    );
    assert_eq!(post["schema"], "diag.alert_result.v1");
    assert_eq!(post["status"], "SUCCESS");
    assert_eq!(post["alert"]["identity"], checkout["identity"]);
    assert_eq!(
        post["report_url"],
        format!("http://diag.example/runs/{run_id}/report")
    );
    assert!(post["markdown"].as_str().unwrap().contains(&run_id));

    // Investigated once: a second pass runs nothing.
    let (code, again) = investigate(&env, &am, &[]);
    assert_eq!(code, Some(0), "{again}");
    assert_eq!(again["investigated"], 0);
    assert_eq!(titles(&again, "skipped").len(), 2);
    let skipped = again["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["identity"] == checkout["identity"])
        .unwrap();
    assert_eq!(skipped["run_id"], run_id.as_str());
    assert_eq!(skipped["status"], "SUCCESS", "the earlier run's status");
    assert_eq!(stored_runs(&env), 2);
    let table = env.run(&[
        "--config",
        "diag.toml",
        "investigate",
        "alertmanager",
        "--url",
        &am.url(),
    ]);
    table.expect(0);
    assert!(table.stdout.starts_with("ALERT"), "{}", table.stdout);
    assert_eq!(
        table.stdout.matches("skipped").count(),
        2,
        "{}",
        table.stdout
    );

    // --again repeats every group.
    let (code, repeated) = investigate(&env, &am, &["--again"]);
    assert_eq!(code, Some(0), "{repeated}");
    assert_eq!(repeated["investigated"], 2);
    assert_eq!(stored_runs(&env), 4);
}

#[test]
fn matchers_select_alerts_and_silenced_ones_come_only_when_asked() {
    let am = Alertmanager::start(&AmConfig::default());
    fire(&am);
    let server = Aimock::start_with("graph.json", Some(KEY));
    let env = env(&server);

    let (code, doc) = investigate(&env, &am, &["--filter", r#"service=~"pay.*""#]);
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(
        titles(&doc, "investigated"),
        ["PaymentPoolExhausted payment-service"]
    );

    let (code, doc) = investigate(
        &env,
        &am,
        &["--silenced", "--filter", r#"alertname="InventoryLag""#],
    );
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(titles(&doc, "investigated"), ["InventoryLag inventory-api"]);

    // Grouped by alert name alone, the two checkout alerts and nothing else are one group.
    let (code, doc) = investigate(
        &env,
        &am,
        &[
            "--again",
            "--group-by",
            "alertname",
            "--filter",
            r#"alertname="CheckoutHigh502Rate""#,
        ],
    );
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(
        doc["groups"][0]["group_key"],
        r#"{alertname="CheckoutHigh502Rate"}"#
    );
    assert_eq!(doc["groups"][0]["alerts"].as_array().unwrap().len(), 2);
}

/// A result webhook on 127.0.0.1: keeps each request's head and body, answers 200.
pub(crate) struct Capture {
    pub(crate) url: String,
    pub(crate) got: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
}

/// One HTTP/1.1 request from `stream`: its head (up to the blank line) and its body (as long
/// as `Content-Length` says); empty when the peer sent nothing.
fn read_request(stream: &mut std::net::TcpStream) -> (String, Vec<u8>) {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = stream.read(&mut buf).unwrap_or(0);
        if n == 0 {
            return (String::new(), Vec::new());
        }
        data.extend_from_slice(&buf[..n]);
        let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&data[..end]).to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        while data.len() < end + 4 + length {
            let n = stream.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            data.extend_from_slice(&buf[..n]);
        }
        return (head, data[end + 4..].to_vec());
    }
}

pub(crate) fn capture() -> Capture {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (head, body) = read_request(&mut stream);
            if let Ok(body) = serde_json::from_slice::<Value>(&body) {
                kept.lock().unwrap().push((head, body));
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    Capture { url, got }
}

/// A server on 127.0.0.1 that answers every request with `status` and `body`, for the
/// Alertmanager that fails.
fn answering(status: &'static str, body: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
fn an_alertmanager_that_cannot_be_read_exits_2_with_one_line_and_stores_nothing() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let env = env(&server);
    let closed = format!("http://127.0.0.1:{}", diag_testkit::free_port());
    let failing = answering("500 Internal Server Error", r#"{"error":"boom"}"#);
    let not_alertmanager = answering("200 OK", r#"{"status":"success","data":[]}"#);
    let unlabelled = answering(
        "200 OK",
        r#"[{"labels":{},"fingerprint":"f1","startsAt":"2026-12-03T19:58:00Z","status":{"state":"active"}}]"#,
    );
    for (url, expected) in [
        (closed.as_str(), "did not answer"),
        (failing.as_str(), "answered HTTP 500"),
        (
            not_alertmanager.as_str(),
            "not an Alertmanager API v2 alert list",
        ),
        (unlabelled.as_str(), "alert 0 has no labels"),
        ("ftp://example.org", "not an http(s) URL"),
    ] {
        let out = env.run(&[
            "--config",
            "diag.toml",
            "investigate",
            "alertmanager",
            "--url",
            url,
        ]);
        out.expect(2);
        assert!(
            out.one_error_line().contains(expected),
            "{url}: {}",
            out.stderr
        );
        assert!(!env.db().exists(), "{url}: a store was created");
    }
}

/// An Alertmanager behind a proxy that takes only `authorization` (the whole header value):
/// `[]` for it, 401 for anything else. Each request's authorization header (or `-`) is kept.
fn guarded(authorization: String) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (head, _) = read_request(&mut stream);
            let sent = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("authorization")
                        .then(|| value.trim().to_string())
                })
                .unwrap_or_else(|| "-".to_string());
            let (status, body) = if sent == authorization {
                ("200 OK", "[]")
            } else {
                ("401 Unauthorized", "Unauthorized")
            };
            kept.lock().unwrap().push(sent);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, seen)
}

/// `investigate` authenticates to an Alertmanager behind a proxy with a bearer token or basic
/// auth from the environment, says in one line what to set when it is refused, and never
/// prints a credential.
#[test]
fn alertmanager_credentials_come_from_the_environment() {
    let env = TestEnv::new();
    std::fs::write(
        env.path("diag.toml"),
        format!(
            "[models.m]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\
             [tools.search_logs]\npaths = [{:?}]\n",
            crate::support::cli_env::repo_file("fixtures/demo/logs")
                .display()
                .to_string()
        ),
    )
    .unwrap();
    let investigate = |url: &str, vars: &[(&str, &str)]| {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.run_with(
            &[
                "--config",
                "diag.toml",
                "investigate",
                "alertmanager",
                "--url",
                url,
            ],
            move |cmd| {
                for var in [
                    "DIAG_ALERTMANAGER_TOKEN",
                    "DIAG_ALERTMANAGER_USER",
                    "DIAG_ALERTMANAGER_PASSWORD",
                ] {
                    cmd.env_remove(var);
                }
                for (k, v) in &vars {
                    cmd.env(k, v);
                }
            },
        )
    };

    // Bearer.
    let (url, seen) = guarded("Bearer am-t0ken-9c2e".into());
    let out = investigate(&url, &[("DIAG_ALERTMANAGER_TOKEN", "am-t0ken-9c2e")]);
    out.expect(0);
    assert!(!out.stderr.contains("am-t0ken") && !out.stdout.contains("am-t0ken"));
    // Without it: refused, and the line says what to set.
    let out = investigate(&url, &[]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        format!(
            "diag: Alertmanager at {url} answered HTTP 401: Unauthorized (it asks for \
             credentials: set DIAG_ALERTMANAGER_TOKEN for a bearer token, or \
             DIAG_ALERTMANAGER_USER and DIAG_ALERTMANAGER_PASSWORD for basic auth)"
        )
    );
    assert_eq!(*seen.lock().unwrap(), ["Bearer am-t0ken-9c2e", "-"]);

    // Basic: `ops:s3cret` is b3BzOnMzY3JldA==.
    let (url, seen) = guarded("Basic b3BzOnMzY3JldA==".into());
    let basic = [
        ("DIAG_ALERTMANAGER_USER", "ops"),
        ("DIAG_ALERTMANAGER_PASSWORD", "s3cret"),
    ];
    investigate(&url, &basic).expect(0);
    let out = investigate(
        &url,
        &[
            ("DIAG_ALERTMANAGER_USER", "ops"),
            ("DIAG_ALERTMANAGER_PASSWORD", "wrong-s3cret"),
        ],
    );
    out.expect(2);
    assert!(
        out.one_error_line()
            .contains("answered HTTP 401: Unauthorized (the credentials were refused: set"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("s3cret"), "{}", out.stderr);
    assert_eq!(seen.lock().unwrap().len(), 2);

    // Both kinds, or half a pair: refused before any request.
    let (url, seen) = guarded(String::new());
    let out = investigate(
        &url,
        &[
            ("DIAG_ALERTMANAGER_TOKEN", "t"),
            ("DIAG_ALERTMANAGER_USER", "ops"),
        ],
    );
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: DIAG_ALERTMANAGER_TOKEN and DIAG_ALERTMANAGER_USER/DIAG_ALERTMANAGER_PASSWORD are \
         both set: set the bearer token or the basic-auth pair, not both"
    );
    let out = investigate(&url, &[("DIAG_ALERTMANAGER_USER", "ops")]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: DIAG_ALERTMANAGER_USER is set without DIAG_ALERTMANAGER_PASSWORD"
    );
    assert!(seen.lock().unwrap().is_empty());
}
