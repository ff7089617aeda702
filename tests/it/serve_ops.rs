//! `diag serve` as a service a team runs, through the binary with real peers (Alertmanager 0.25,
//! Prometheus 2.42, the suite's PostgreSQL, the models on aimock):
//! - a report link from a `[notify]` post opens that one report in a browser, with no header,
//!   until it expires; another run id, a changed expiry, an expired link, the webhook token
//!   are refused 403, and a link never posts alerts;
//! - thousands of idle connections held against it neither keep Alertmanager's delivery out
//!   nor stay open past the header-read timeout; slow bodies get 408; past the connection cap a
//!   connection is closed before it is answered;
//! - Prometheus scrapes `/metrics` and PromQL reads what the store holds;
//! - `diag serve status` lists waiting, claimed and failed notifications on SQLite and
//!   PostgreSQL, and a notification whose run could not start keeps no run id.
//!
//! No fixed ports and no sleeping for an amount of time: every wait polls with a deadline, and
//! the timeouts under test are configured short (or long, where a connection must stay open)
//! so that nothing depends on how busy the machine is.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::investigate::{capture, Capture};
use crate::serve::{
    am_to, env, now, one_alert, poll, post, request, runs, trace, Serve, KEY, TOKEN,
};
use crate::support::cli_env::{assert_schema, TestEnv};
use diag_testkit::alertmanager::alert;
use diag_testkit::prometheus::Prometheus;
use diag_testkit::{bounded, postgres, Aimock};

const READ_TOKEN: &str = "serve-read-token-77c1e0a4-9b2f5d18e3c6";
const LINK_KEY: &str = "serve-link-key-3b9f0d62c1a84e57b2d9f6a0c3e1b7d4";
const REPORT_BASE: &str = "http://diag.example:9464";

/// `env` with a read token, a link key and a `[notify]` webhook to `hook` (the report base
/// is the operator's public name of the server; the tests open the links' paths directly).
fn linked_env(server: &Aimock, serve: &str, hook: &Capture) -> TestEnv {
    let mut env = env(
        server,
        &format!("{serve}read_token_env = \"DIAG_SERVE_READ_TEST\"\n"),
    );
    env.set_env("DIAG_SERVE_READ_TEST", READ_TOKEN);
    env.set_env("DIAG_SERVE_LINK_KEY", LINK_KEY);
    let mut config = std::fs::read_to_string(env.path("diag.toml")).unwrap();
    config.push_str(&format!(
        "[notify]\nurl = {:?}\nreport_base_url = {REPORT_BASE:?}\n",
        hook.url
    ));
    std::fs::write(env.path("diag.toml"), config).unwrap();
    env
}

/// The `(run_id, path and query)` of each result posted so far.
fn posted_links(hook: &Capture) -> Vec<(String, String)> {
    hook.got
        .lock()
        .unwrap()
        .iter()
        .map(|(_, post)| {
            let url = post["report_url"].as_str().expect("a report link");
            let path = url
                .strip_prefix(REPORT_BASE)
                .unwrap_or_else(|| panic!("{url} is under {REPORT_BASE}"));
            (
                post["run_id"].as_str().unwrap().to_string(),
                path.to_string(),
            )
        })
        .collect()
}

/// `(expires, sig)` of a link's query.
fn link_parts(path: &str) -> (String, String) {
    let query = path.split_once('?').expect("a query").1;
    let mut expires = None;
    let mut sig = None;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("expires", v)) => expires = Some(v.to_string()),
            Some(("sig", v)) => sig = Some(v.to_string()),
            _ => {}
        }
    }
    (expires.expect("expires"), sig.expect("sig"))
}

#[test]
fn a_report_link_opens_its_one_report_until_it_expires_and_never_writes() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let hook = capture();
    let env = linked_env(&server, "concurrency = 2\n", &hook);
    let mut serve = Serve::start(&env, &[]);
    let am = am_to(&[&serve], 1);
    am.post_alerts(&json!([
        alert("CheckoutHigh502Rate", "checkout-service", &now(), &[]),
        alert("PaymentPoolExhausted", "payment-service", &now(), &[]),
    ]));
    serve.poll("both results posted", |_| {
        (hook.got.lock().unwrap().len() == 2).then_some(())
    });
    let links = posted_links(&hook);
    let (run_a, link_a) = &links[0];
    let (run_b, _) = &links[1];
    assert_ne!(run_a, run_b);
    assert!(
        link_a.starts_with(&format!("/runs/{run_a}/report?expires=")),
        "{link_a}"
    );

    // The link opens the report with no header at all, kept private, with no referrer and
    // the file reports' Content-Security-Policy.
    let (code, head, html) = request(&serve.addr, "GET", link_a, None, b"");
    assert_eq!(code, 200, "{html}");
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(head.contains("cache-control: private"), "{head}");
    assert!(head.contains("referrer-policy: no-referrer"), "{head}");
    let csp = format!(
        "content-security-policy: {}",
        diag_report::html::CSP.to_ascii_lowercase()
    );
    assert!(head.contains(&csp), "{head}");
    assert!(
        html.contains("<h2>Alert</h2>") && html.contains(run_a.as_str()),
        "{html}"
    );
    let (code, head, md) = request(
        &serve.addr,
        "GET",
        &format!("{link_a}&format=md"),
        None,
        b"",
    );
    assert_eq!(code, 200, "{md}");
    assert!(head.contains("content-type: text/markdown"), "{head}");

    // The same capability for another run, a changed expiry (later or earlier), a cut
    // signature: 403, with the same headers.
    let (expires, sig) = link_parts(link_a);
    let later = expires.parse::<i64>().unwrap() + 1;
    let earlier = expires.parse::<i64>().unwrap() - 1;
    let forged = [
        format!("/runs/{run_b}/report?expires={expires}&sig={sig}"),
        format!("/runs/{run_a}/report?expires={later}&sig={sig}"),
        format!("/runs/{run_a}/report?expires={earlier}&sig={sig}"),
        format!("/runs/{run_a}/report?expires={expires}&sig={}", &sig[..40]),
        format!("/runs/{run_a}/report?sig={sig}"),
    ];
    for path in &forged {
        let (code, head, body) = request(&serve.addr, "GET", path, None, b"");
        assert_eq!(code, 403, "{path}: {body}");
        assert!(head.contains("referrer-policy: no-referrer"), "{head}");
        assert!(!body.contains("<h2>"), "{body}");
    }

    // Tokens: the read token opens any report; the webhook token opens none (403); nothing
    // at all asks for a link or the read token (401).
    let bare = format!("/runs/{run_b}/report");
    assert_eq!(
        request(&serve.addr, "GET", &bare, Some(READ_TOKEN), b"").0,
        200
    );
    let (code, _, body) = request(&serve.addr, "GET", &bare, Some(TOKEN), b"");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("webhook token does not open reports"),
        "{body}"
    );
    let (code, head, _) = request(&serve.addr, "GET", &bare, None, b"");
    assert_eq!(code, 401);
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    // A link's capability with another run's valid link does not become a token either.
    assert_eq!(request(&serve.addr, "GET", &bare, Some(&sig), b"").0, 403);

    // A link never writes: its query on the webhook, its signature as a bearer token, the
    // read token on the webhook, or a POST to the report's own address: nothing is queued.
    let before = serve.healthz()["queue"].clone();
    let body = one_alert("InjectedThroughALink");
    let query = link_a.split_once('?').unwrap().1;
    for (path, token) in [
        (format!("/alertmanager?{query}"), None),
        ("/alertmanager".to_string(), Some(sig.as_str())),
        ("/alertmanager".to_string(), Some(READ_TOKEN)),
    ] {
        let (code, _, answer) = request(&serve.addr, "POST", &path, token, &body);
        assert_eq!(code, 401, "{path}: {answer}");
    }
    let (code, _, _) = request(&serve.addr, "POST", link_a, None, &body);
    assert_eq!(code, 405);
    assert_eq!(serve.healthz()["queue"], before);

    // The key comes from the environment: started again, the server opens the links it made
    // before. With a one-second life, a new link ends up refused as expired.
    serve.signal(libc::SIGTERM);
    assert_eq!(serve.wait().code(), Some(0), "{}", serve.stderr());
    // Every refusal was logged with its route, peer, status and reason; no token, signature
    // or link query was.
    let stderr = serve.stderr();
    let logged = |route: &str, said: &str| {
        stderr.lines().any(|l| {
            l.strip_prefix(&format!("diag serve: refused {route} from 127.0.0.1:"))
                .and_then(|rest| rest.split_once(": "))
                .is_some_and(|(port, rest)| port.parse::<u16>().is_ok() && rest == said)
        })
    };
    let report_b = format!("GET /runs/{run_b}/report");
    let report_a = format!("GET /runs/{run_a}/report");
    for (route, said) in [
        (&report_b, "403 forbidden: this report link is not valid"),
        (
            &report_a,
            "403 forbidden: this report link is not valid (it needs both expires and sig)",
        ),
        (
            &report_b,
            "403 forbidden: the webhook token does not open reports (use a report link or the \
             read token)",
        ),
        (
            &report_b,
            "401 unauthorized: a report opens by its link (expires and sig) or with the read token",
        ),
    ] {
        assert!(logged(route, said), "{route}: {said}\n{stderr}");
    }
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("diag serve: refused POST /alertmanager from "))
            .count(),
        3,
        "{stderr}"
    );
    for secret in [sig.as_str(), READ_TOKEN, TOKEN, expires.as_str()] {
        assert!(!stderr.contains(secret), "{secret} was logged: {stderr}");
    }
    let config = std::fs::read_to_string(env.path("diag.toml")).unwrap();
    std::fs::write(
        env.path("diag.toml"),
        config.replace("[notify]", "report_link_ttl = \"1s\"\n[notify]"),
    )
    .unwrap();
    let mut again = Serve::start(&env, &[]);
    assert_eq!(request(&again.addr, "GET", link_a, None, b"").0, 200);
    let (code, _, answer) = post(&again, Some(TOKEN), &one_alert("ShortLivedLink"));
    assert_eq!(code, 202, "{answer}");
    again.poll("the third result posted", |_| {
        (hook.got.lock().unwrap().len() == 3).then_some(())
    });
    let (run_c, link_c) = posted_links(&hook).pop().unwrap();
    assert!(link_c.starts_with(&format!("/runs/{run_c}/")));
    let refused = again.poll("the one-second link to expire", |s| {
        let (code, _, body) = request(&s.addr, "GET", &link_c, None, b"");
        match code {
            200 => None,
            _ => Some((code, body)),
        }
    });
    assert_eq!(refused.0, 403, "{}", refused.1);
    assert!(refused.1.contains("expired"), "{}", refused.1);
    assert_eq!(runs(&env).len(), 3);
}

/// Raises this process's open-file limit to at least `n` (its children inherit it).
fn allow_open_files(n: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a plain struct out-parameter.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    if limit.rlim_cur >= n {
        return;
    }
    assert!(
        limit.rlim_max >= n,
        "this test holds thousands of connections and needs {n} open files; the hard limit is {}",
        limit.rlim_max
    );
    limit.rlim_cur = n;
    // SAFETY: as above; raising the soft limit up to the hard one is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
}

/// Opens `n` connections to `addr` that send `first` (nothing, for an idle one).
fn hold(addr: &str, n: usize, first: &[u8]) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
            if !first.is_empty() {
                s.write_all(first).unwrap();
            }
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect()
}

/// What a held connection shows now.
#[derive(Debug, PartialEq, Eq)]
enum Held {
    Open,
    /// The server closed it, after sending these bytes.
    Closed(Vec<u8>),
}

/// Reads what is there without waiting; `got` keeps what arrived before.
fn look(s: &mut TcpStream, got: &mut Vec<u8>) -> Held {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Held::Closed(std::mem::take(got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Held::Open,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // Reset: closed by the server.
            Err(_) => return Held::Closed(std::mem::take(got)),
        }
    }
}

/// Polls every connection until the server has closed each; what each had received.
fn all_closed(what: &str, conns: &mut [TcpStream]) -> Vec<Vec<u8>> {
    let mut received: Vec<Option<Vec<u8>>> = vec![None; conns.len()];
    let mut partial: Vec<Vec<u8>> = vec![Vec::new(); conns.len()];
    poll(what, || {
        for (i, c) in conns.iter_mut().enumerate() {
            if received[i].is_none() {
                if let Held::Closed(bytes) = look(c, &mut partial[i]) {
                    received[i] = Some(bytes);
                }
            }
        }
        received.iter().all(Option::is_some).then_some(())
    });
    received.into_iter().map(Option::unwrap).collect()
}

/// One `GET /healthz` on a new connection: `Some(status)` when answered, `None` when the
/// server closed the connection without an answer.
fn probe(addr: &str) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(bounded::LIMIT)).unwrap();
    let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace().nth(1).and_then(|c| c.parse().ok())
}

/// A sample's value in a `/metrics` text.
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{series} in:\n{metrics}"))
}

const IDLE: usize = 2000;

#[test]
fn thousands_of_held_connections_neither_keep_alertmanager_out_nor_stay_open() {
    allow_open_files(16_384);
    let server = Aimock::start_with("graph.json", Some(KEY));
    let cap = IDLE + 6;
    // The connections must stay open while the group is delivered: a header-read timeout
    // longer than any wait of the test.
    let env = env(
        &server,
        &format!("concurrency = 1\nheader_read_timeout_secs = 3600\nmax_connections = {cap}\n"),
    );
    let mut serve = Serve::start(&env, &[]);
    let mut idle = hold(&serve.addr, IDLE, b"");
    let am = am_to(&[&serve], 1);
    am.post_alerts(&json!([alert(
        "CheckoutHigh502Rate",
        "checkout-service",
        &now(),
        &[]
    )]));
    serve.poll("the group investigated", |s| (s.done() == 1).then_some(()));
    let stored = runs(&env);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["status"], "SUCCESS");
    let mut nothing = Vec::new();
    let mut still_open = 0;
    for c in idle.iter_mut() {
        if look(c, &mut nothing) == Held::Open {
            still_open += 1;
        }
    }
    assert_eq!(still_open, IDLE, "every idle connection was still held");

    // Up to the cap: once it is reached, a new connection is closed without an answer.
    let mut more = hold(&serve.addr, cap - IDLE, b"");
    poll("a connection past the cap closed unanswered", || {
        probe(&serve.addr).is_none().then_some(())
    });
    // Connections the clients close give their places back.
    more.clear();
    idle.truncate(IDLE - 10);
    poll("a place given back", || {
        (probe(&serve.addr) == Some(200)).then_some(())
    });
    let (code, head, metrics) = request(&serve.addr, "GET", "/metrics", None, b"");
    assert_eq!(code, 200, "{metrics}");
    assert!(
        head.contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(sample(&metrics, "diag_serve_connections_refused_total") >= 1.0);
    assert!(sample(&metrics, "diag_serve_connections_open") <= cap as f64);
    // Held connections do not hold up a shutdown.
    serve.signal(libc::SIGTERM);
    assert_eq!(serve.wait().code(), Some(0), "{}", serve.stderr());
    drop(idle);

    // Short timeouts: idle connections, heads that never end and bodies that never end are
    // all closed by the server; a slow body is answered 408 first.
    let config = std::fs::read_to_string(env.path("diag.toml")).unwrap();
    std::fs::write(
        env.path("diag.toml"),
        config
            .replace(
                "header_read_timeout_secs = 3600",
                "header_read_timeout_secs = 2",
            )
            .replace(
                &format!("max_connections = {cap}"),
                "max_connections = 4096",
            )
            + "body_read_timeout_secs = 2\n",
    )
    .unwrap();
    let serve = Serve::start(&env, &[]);
    let mut idle = hold(&serve.addr, IDLE, b"");
    let mut slow_heads = hold(
        &serve.addr,
        100,
        b"POST /alertmanager HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
    );
    let slow_body = format!(
        "POST /alertmanager HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"version\": "
    );
    let mut slow_bodies = hold(&serve.addr, 100, slow_body.as_bytes());
    let idle_seen = all_closed("the idle connections closed", &mut idle);
    assert!(
        idle_seen.iter().all(Vec::is_empty),
        "an idle connection got an answer"
    );
    all_closed("the unfinished heads closed", &mut slow_heads);
    for answer in all_closed("the unfinished bodies closed", &mut slow_bodies) {
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(text.contains("body_read_timeout_secs"), "{text}");
    }
    let (code, _, metrics) = request(&serve.addr, "GET", "/metrics", None, b"");
    assert_eq!(code, 200);
    assert_eq!(
        sample(
            &metrics,
            "diag_serve_webhook_refused_total{reason=\"body_timeout\"}"
        ),
        100.0
    );
    assert_eq!(
        runs(&env).len(),
        1,
        "nothing was queued by the slow requests"
    );
}

#[test]
fn prometheus_scrapes_metrics_that_agree_with_the_store() {
    let server = Aimock::start_with("graph.json", Some(KEY));
    let env = env(&server, "concurrency = 2\n");
    let mut serve = Serve::start(&env, &[]);
    let am = am_to(&[&serve], 1);
    am.post_alerts(&json!([
        alert("CheckoutHigh502Rate", "checkout-service", &now(), &[]),
        alert("PaymentPoolExhausted", "payment-service", &now(), &[]),
    ]));
    // One more notification, delivered twice, and one refused request.
    let direct = one_alert("DirectlyPosted");
    assert_eq!(post(&serve, Some(TOKEN), &direct).0, 202);
    assert_eq!(post(&serve, Some(TOKEN), &direct).0, 202);
    assert_eq!(post(&serve, Some("not-the-token"), &direct).0, 401);
    serve.poll("three groups investigated", |s| {
        (s.done() == 3).then_some(())
    });

    // What the store holds, read through the command line.
    let status = env.run(&["serve", "status", "--json"]);
    status.expect(0);
    let status = status.json();
    let stored = runs(&env);
    assert_eq!(stored.len(), 3);
    let succeeded = stored.iter().filter(|r| r["status"] == "SUCCESS").count();
    let (mut calls, mut prompt, mut completion) = (0u64, 0u64, 0u64);
    for r in &stored {
        for step in trace(&env, r["run_id"].as_str().unwrap())["agent_steps"]
            .as_array()
            .unwrap()
        {
            calls += 1;
            prompt += step["prompt_tokens"].as_u64().unwrap();
            completion += step["completion_tokens"].as_u64().unwrap();
        }
    }
    assert!(calls > 0 && prompt > 0);

    let prometheus = Prometheus::scraping(&serve.addr);
    let expected: Vec<(String, f64)> = vec![
        (
            "diag_serve_queue_notifications{state=\"done\"}".into(),
            status["counts"]["done"].as_f64().unwrap(),
        ),
        (
            "diag_serve_queue_notifications{state=\"queued\"}".into(),
            status["counts"]["queued"].as_f64().unwrap(),
        ),
        (
            "sum(diag_serve_investigations_total)".into(),
            stored.len() as f64,
        ),
        (
            "sum(diag_serve_investigations_total{status=\"SUCCESS\"})".into(),
            succeeded as f64,
        ),
        (
            "diag_serve_investigation_duration_seconds_count".into(),
            stored.len() as f64,
        ),
        ("sum(diag_serve_model_calls_total)".into(), calls as f64),
        (
            "sum(diag_serve_model_tokens_total{kind=\"prompt\"})".into(),
            prompt as f64,
        ),
        (
            "sum(diag_serve_model_tokens_total{kind=\"completion\"})".into(),
            completion as f64,
        ),
        (
            "diag_serve_webhook_refused_total{reason=\"unauthorized\"}".into(),
            1.0,
        ),
        ("diag_serve_store_up".into(), 1.0),
        ("count(diag_build_info == 1)".into(), 1.0),
    ];
    // A scrape may fall between two series of one finished run: read until all agree.
    let deadline = Instant::now() + bounded::LIMIT;
    loop {
        let read: Vec<(String, f64, Option<f64>)> = expected
            .iter()
            .map(|(q, want)| (q.clone(), *want, prometheus.value(q)))
            .collect();
        if read.iter().all(|(_, want, got)| *got == Some(*want)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "PromQL did not read the store's values: {read:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        prometheus.value("sum(diag_serve_notifications_total{result=\"queued\"})"),
        Some(3.0)
    );
    assert!(prometheus
        .value("sum(diag_serve_notifications_total{result=\"duplicate\"})")
        .is_some_and(|d| d >= 1.0));
    let build = prometheus.query("diag_build_info");
    assert_eq!(build[0].0["version"], env!("CARGO_PKG_VERSION"));
}

/// A trigger that refuses every new run, so that a claimed notification's run cannot start.
const REFUSE_RUNS_SQLITE: &str = "CREATE TRIGGER refuse_runs BEFORE INSERT ON diagnosis_run \
     BEGIN SELECT RAISE(ABORT, 'no new runs in this test'); END";
const REFUSE_RUNS_PG: &str = "CREATE FUNCTION refuse_runs() RETURNS trigger LANGUAGE plpgsql AS \
     $$ BEGIN RAISE EXCEPTION 'no new runs in this test'; END $$; \
     CREATE TRIGGER refuse_runs BEFORE INSERT ON diagnosis_run \
     FOR EACH ROW EXECUTE FUNCTION refuse_runs();";
const ALLOW_RUNS_SQLITE: &str = "DROP TRIGGER refuse_runs";
const ALLOW_RUNS_PG: &str = "DROP TRIGGER refuse_runs ON diagnosis_run";
/// The run that waits on its Verifier: RUNNING, with its first four events stored.
const WAITING_RUN: &str = "SELECT r.run_id FROM diagnosis_run r WHERE r.status = 'RUNNING' AND \
     (SELECT count(*) FROM orchestration_event e WHERE e.run_id = r.run_id) = 4";

/// The store under a test, as its operator reaches it: a statement, a one-value query.
struct Backend<'a> {
    refuse_runs: &'static str,
    allow_runs: &'static str,
    exec: &'a dyn Fn(&str),
    value: &'a dyn Fn(&str) -> Option<String>,
}

/// Lists the queue with failed, claimed and waiting notifications on the store `env` names;
/// the server is left running.
fn serve_status_lists_the_queue(env: &TestEnv, store: &Backend<'_>) -> Serve {
    let mut serve = Serve::start(env, &[]);
    (store.exec)(store.refuse_runs);
    // A run that cannot start: the notification fails, with why, and keeps no run id.
    let (code, _, answer) = post(&serve, Some(TOKEN), &one_alert("NoRunCanStart"));
    assert_eq!(code, 202, "{answer}");
    serve.poll("the notification failed", |s| {
        (s.healthz()["queue"]["failed"] == 1).then_some(())
    });
    (store.exec)(store.allow_runs);
    // One claimed (its run waits on the slow Verifier), one waiting behind it.
    assert_eq!(post(&serve, Some(TOKEN), &one_alert("SlowAlert")).0, 202);
    let running = serve.poll("a run waiting on its Verifier", |_| {
        (store.value)(WAITING_RUN)
    });
    assert_eq!(post(&serve, Some(TOKEN), &one_alert("WaitingAlert")).0, 202);

    let out = env.run(&["serve", "status", "--json"]);
    out.expect(0);
    let doc = out.json();
    assert_schema("serve_status.v1.json", &doc);
    assert_eq!(
        doc["counts"],
        json!({"queued": 1, "claimed": 1, "done": 0, "resolved": 0, "failed": 1})
    );
    let n = doc["notifications"].as_array().unwrap();
    assert_eq!(n.len(), 3, "{doc}");
    let failed = &n[0];
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["title"], "NoRunCanStart");
    assert_eq!(failed["runs"], json!([]), "no run id without a run");
    let why = failed["failure"].as_str().unwrap();
    assert!(
        why.starts_with("no run could be started: ") && why.contains("no new runs in this test"),
        "{why}"
    );
    assert_eq!(failed["claim"], Value::Null);
    let claimed = &n[1];
    assert_eq!(claimed["state"], "claimed");
    assert_eq!(claimed["attempts"], 1);
    assert_eq!(claimed["runs"], json!([running]));
    assert_eq!(claimed["claim"]["pid"], serve.pid());
    assert!(
        claimed["claim"]["lease_expires_at"].is_string(),
        "{claimed}"
    );
    assert!(claimed["claim"]["since"].is_string(), "{claimed}");
    let waiting = &n[2];
    assert_eq!(waiting["state"], "queued");
    assert_eq!(waiting["attempts"], 0);
    assert_eq!(waiting["claim"], Value::Null);
    assert_eq!(waiting["receiver"], "diag");
    assert_eq!(runs(env).len(), 1, "the failed notification started no run");

    let text = env.run(&["serve", "status"]);
    text.expect(0);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", text.stdout);
    assert!(lines[0].starts_with("id"), "{}", text.stdout);
    assert!(
        lines[1].contains("failed") && lines[1].contains("no run could be started"),
        "{}",
        text.stdout
    );
    assert!(
        lines[2].contains("claimed")
            && lines[2].contains(&format!("pid {}", serve.pid()))
            && lines[2].contains(&format!("run {running}")),
        "{}",
        text.stdout
    );
    assert!(lines[3].contains("queued"), "{}", text.stdout);
    assert_eq!(
        lines[4], "1 queued, 1 claimed, 0 done, 0 resolved, 1 failed",
        "{}",
        text.stdout
    );
    serve
}

#[test]
fn serve_status_lists_waiting_claimed_and_failed_notifications_on_sqlite() {
    let server = Aimock::start_with("graph_slow_verifier.json", Some(KEY));
    let env = env(&server, "concurrency = 1\n");
    let db = env.db();
    let open = || {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.busy_timeout(bounded::LIMIT).unwrap();
        conn
    };
    let exec = |statement: &str| open().execute_batch(statement).unwrap();
    let value = |query: &str| open().query_row(query, [], |r| r.get(0)).ok();
    let _serve = serve_status_lists_the_queue(
        &env,
        &Backend {
            refuse_runs: REFUSE_RUNS_SQLITE,
            allow_runs: ALLOW_RUNS_SQLITE,
            exec: &exec,
            value: &value,
        },
    );
}

#[test]
fn serve_status_lists_waiting_claimed_and_failed_notifications_on_postgres() {
    let server = Aimock::start_with("graph_slow_verifier.json", Some(KEY));
    let mut env = env(&server, "concurrency = 1\n");
    let pg = postgres::server();
    let url = pg.fresh_db();
    env.set_env("DIAG_DB", &url);
    let exec = |statement: &str| {
        pg.psql(&url, statement);
    };
    let value = |query: &str| {
        let out = pg.psql(&url, query).trim().to_string();
        (!out.is_empty()).then_some(out)
    };
    let mut serve = serve_status_lists_the_queue(
        &env,
        &Backend {
            refuse_runs: REFUSE_RUNS_PG,
            allow_runs: ALLOW_RUNS_PG,
            exec: &exec,
            value: &value,
        },
    );

    // `diag store copy` carries the queue and the runs' alert groups: a claimed notification
    // is not copied while its claim lasts; once every claim ended, the whole queue is.
    let copy = env.path("copy.db");
    let copy = copy.to_str().unwrap();
    let out = env.run(&["store", "copy", "--from", &url, "--to", copy]);
    out.expect(0);
    assert!(
        out.stdout.contains("1 RUNNING not copied")
            && out
                .stdout
                .contains("copied 2 alert notification(s); 0 already there; 1 claimed not copied"),
        "{}",
        out.stdout
    );
    serve.poll("both runs finished", |s| (s.done() == 2).then_some(()));
    let out = env.run(&["store", "copy", "--from", &url, "--to", copy]);
    out.expect(0);
    assert!(
        out.stdout
            .contains("copied 1 alert notification(s); 2 already there; 0 claimed not copied"),
        "{}",
        out.stdout
    );
    let status_of = |db: &str| {
        let out = env.run(&["--db", db, "serve", "status", "--json"]);
        out.expect(0);
        out.json()
    };
    let original = status_of(&url);
    let copied = status_of(copy);
    let by_title = |doc: &Value| -> std::collections::BTreeMap<String, Value> {
        doc["notifications"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                let mut n = n.clone();
                n.as_object_mut().unwrap().remove("id");
                (n["title"].as_str().unwrap().to_string(), n)
            })
            .collect()
    };
    let (original_queue, copied_queue) = (by_title(&original), by_title(&copied));
    // What the first copy found finished or waiting is copied as it stood; a notification
    // already in the copy is left as it is (a copy is a snapshot: run it with the servers
    // stopped to move a queue).
    assert_eq!(
        copied_queue["NoRunCanStart"],
        original_queue["NoRunCanStart"]
    );
    assert_eq!(copied_queue["SlowAlert"], original_queue["SlowAlert"]);
    assert_eq!(original_queue["WaitingAlert"]["state"], "done");
    assert_eq!(copied_queue["WaitingAlert"]["state"], "queued");
    assert_eq!(copied_queue["WaitingAlert"]["runs"], json!([]));
    let finished: Vec<&Value> = ["SlowAlert", "WaitingAlert"]
        .iter()
        .map(|t| &original_queue[*t])
        .collect();
    for n in finished {
        let id = n["runs"][0].as_str().unwrap();
        let alert = |db: &str| {
            let out = env.run(&["--db", db, "trace", id, "--json"]);
            out.expect(0);
            out.json()["alert"].clone()
        };
        assert!(alert(&url).is_object());
        assert_eq!(
            alert(copy),
            alert(&url),
            "the alert group of {id} was copied"
        );
    }
}
