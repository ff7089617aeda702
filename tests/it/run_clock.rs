//! The run's clock in every prompt, `diag ask --at`, and sampling as configured
//! (openspec/specs/agent-runtime/spec.md, "The run's clock in every prompt";
//! openspec/specs/command-line/spec.md, "`diag ask --at`"; openspec/specs/model-endpoint/
//! spec.md, "Sampling"): real `diag ask` processes against aimock with the demo configuration,
//! whose journal shows what every chat request carried.

use serde_json::{json, Value};

use crate::support::cli_env;
use cli_env::{assert_schema, repo_file, TestEnv};
use diag_testkit::Aimock;

const QUESTION: &str = "why does checkout return 502 since 14:00?";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `fixtures/demo/diag.toml` as an operator would use it, with its model at `base_url` (and
/// `extra` added to the model's table), its log and runbook folders where the demo keeps them.
fn demo_env(base_url: &str, extra: &str) -> TestEnv {
    let env = TestEnv::new();
    let demo = std::fs::read_to_string(repo_file("fixtures/demo/diag.toml")).unwrap();
    let line = "base_url = \"http://127.0.0.1:11434/v1\"   # e.g. a local Ollama";
    assert!(demo.contains(line), "the demo configuration changed");
    let config = demo
        .replace(line, &format!("base_url = {base_url:?}\n{extra}"))
        .replace(
            "paths = [\"logs\"]",
            &format!(
                "paths = [{:?}]",
                repo_file("fixtures/demo/logs").display().to_string()
            ),
        )
        .replace(
            "paths = [\"runbooks\"]",
            &format!(
                "paths = [{:?}]",
                repo_file("fixtures/demo/runbooks").display().to_string()
            ),
        );
    std::fs::write(env.path("diag.toml"), config).unwrap();
    env
}

/// The chat requests aimock received, in order.
fn chat_requests(rt: &tokio::runtime::Runtime, server: &Aimock) -> Vec<Value> {
    rt.block_on(server.journal())
        .into_iter()
        .filter(|e| {
            e["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/chat/completions"))
        })
        .map(|e| e["body"].clone())
        .collect()
}

/// The `run_clock` member of a request's declared input (its first user message, a JSON
/// document).
fn run_clock_of(body: &Value) -> Value {
    let input = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no user message: {body}"));
    let input: Value = serde_json::from_str(input).unwrap_or_else(|e| panic!("{e}: {input}"));
    input["run_clock"].clone()
}

/// The system prompt's first line: which agent the request is for.
fn agent_of(body: &Value) -> String {
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    ["Planner", "Executor", "Verifier", "Composer"]
        .into_iter()
        .find(|a| system.starts_with(&format!("You are the {a}")))
        .unwrap_or("unknown")
        .to_string()
}

fn ask_json(env: &TestEnv, extra: &[&str]) -> Value {
    let mut args = vec!["--config", "diag.toml", "ask", QUESTION, "--json"];
    args.extend_from_slice(extra);
    let out = env.run(&args);
    out.expect(0).quiet_stderr();
    let doc = out.json();
    assert_eq!(doc["status"], "SUCCESS", "{doc}");
    doc
}

#[test]
fn at_pins_the_clock_every_agent_sees_and_the_run_records_exports_and_replays() {
    let rt = runtime();
    let server = Aimock::start_with("graph.json", None);
    let env = demo_env(&server.base_url(), "seed = 7");
    // Any offset is taken, and kept in UTC.
    let doc = ask_json(
        &env,
        &["--at", "2026-11-30T16:11:00+02:00", "--record", "run.json"],
    );
    let run_id = doc["run_id"].as_str().unwrap();
    let pinned = "2026-11-30T14:11:00.000Z";

    let requests = chat_requests(&rt, &server);
    let agents: Vec<String> = requests.iter().map(agent_of).collect();
    for agent in ["Planner", "Executor", "Verifier", "Composer"] {
        assert!(agents.iter().any(|a| a == agent), "{agents:?}");
    }
    for (body, agent) in requests.iter().zip(&agents) {
        assert_eq!(
            run_clock_of(body),
            json!({"now": pinned, "today": "2026-11-30", "window": {
                "since": "2026-11-30T14:00:00.000Z", "until": pinned}}),
            "{agent}: the question's \"since 14:00\" on the pinned day, up to now"
        );
        // Sampling as configured: temperature 0 when not set, the seed when set.
        assert_eq!(body["temperature"].as_f64(), Some(0.0), "{agent}");
        assert_eq!(body["seed"], json!(7), "{agent}");
    }

    // Recorded as the run's start, shown by trace, exported.
    let out = env.run(&["trace", run_id, "--json"]);
    out.expect(0).quiet_stderr();
    let trace = out.json();
    assert_schema("trace.v1.json", &trace);
    assert_eq!(trace["run"]["started_at"], pinned);
    let out = env.run(&["trace", run_id]);
    out.expect(0).quiet_stderr();
    assert!(
        out.stdout.contains(&format!("started  {pinned}")),
        "{}",
        out.stdout
    );
    let out = env.run(&["export", run_id, "-o", "exported.json"]);
    out.expect(0).wrote("exported.json");
    for file in ["run.json", "exported.json"] {
        let run: Value =
            serde_json::from_str(&std::fs::read_to_string(env.path(file)).unwrap()).unwrap();
        assert_eq!(run["started_at"], pinned, "{file}");
        let hashed = run["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["kind"] == "model")
            .all(|x| x["request_sha256"].is_string());
        assert!(
            hashed,
            "{file}: every model call is recorded with its request's hash"
        );
        // The replay serves the recording with its clock pinned to the recorded start: every
        // request it builds hashes as recorded, so it passes.
        let out = env.run(&["replay", file]);
        out.expect(0);
    }
}

#[test]
fn without_at_every_agent_sees_the_run_s_own_start_and_temperature_0() {
    let rt = runtime();
    let server = Aimock::start_with("graph.json", None);
    let env = demo_env(&server.base_url(), "");
    let doc = ask_json(&env, &[]);
    let out = env.run(&["trace", doc["run_id"].as_str().unwrap(), "--json"]);
    out.expect(0).quiet_stderr();
    let started = out.json()["run"]["started_at"].clone();
    let day = started.as_str().unwrap()[..10].to_string();
    // "since 14:00": today's 14:00 when the run started after it, else yesterday's.
    let started_ms = diag_core::clock::Timestamp::parse_rfc3339(started.as_str().unwrap())
        .unwrap()
        .unix_ms();
    let day_ms = 86_400_000;
    let mut since_ms = started_ms.div_euclid(day_ms) * day_ms + 14 * 3_600_000;
    if since_ms > started_ms {
        since_ms -= day_ms;
    }
    let since = diag_core::clock::Timestamp::from_unix_ms(since_ms).to_string();
    let requests = chat_requests(&rt, &server);
    assert!(requests.len() >= 4, "{requests:?}");
    for body in &requests {
        assert_eq!(
            run_clock_of(body),
            json!({"now": started, "today": day, "window": {"since": since, "until": started}}),
            "{}",
            agent_of(body)
        );
        assert_eq!(body["temperature"].as_f64(), Some(0.0));
        assert!(body.get("seed").is_none(), "no seed unless one is set");
    }
}

#[test]
fn an_at_in_the_future_or_not_a_time_is_refused_with_one_line_and_nothing_stored() {
    // No model is reached: the endpoint need not exist.
    let env = demo_env("http://127.0.0.1:9/v1", "");
    for (at, says) in [
        ("2999-01-01T00:00:00Z", "lies in the future"),
        ("yesterday", "not an RFC 3339 time"),
        ("2026-11-30 14:11:00Z", "not an RFC 3339 time"),
    ] {
        let out = env.run(&["--config", "diag.toml", "ask", QUESTION, "--at", at]);
        out.expect(2);
        let line = out.one_error_line();
        assert!(line.contains("--at") && line.contains(says), "{at}: {line}");
        assert!(!env.db().exists(), "{at}: nothing is stored");
    }
    // A recording keeps its own clock, and a resumed run the clock of the run it continues.
    let pass = env.copy_fixture("tests/fixtures/runs/pass.json", "pass.json");
    let out = env.run(&[
        "ask",
        "--fixture",
        pass.to_str().unwrap(),
        "--at",
        "2026-11-30T14:11:00Z",
    ]);
    out.expect(2);
    assert!(out.stderr.contains("--at"), "{}", out.stderr);
}
