//! The API key never leaves the `Authorization` header (SPEC §5): end to end through the `diag`
//! binary, against aimock running with `AIMOCK_API_KEYS`, the key is nowhere in the database
//! files (read as raw bytes, WAL and shared memory included), the run file `--record` writes,
//! `diag export`, `diag ask --json`, `diag trace` (text and `--json`), `diag runs --json`, or the
//! stderr of any of them with `DIAG_LOG=debug`.
//!
//! Two runs make the check meaningful:
//! - a whole diagnosis whose Executor also calls an MCP server's `get-env` tool, which returns
//!   the server's environment: were the key handed to the server, it would be recorded;
//! - a run whose Composer endpoint answers HTTP 400 with an error message that quotes the key
//!   and its `Authorization` header, as some gateways do: that message is stored, shown on
//!   stderr and exported, so it must be redacted everywhere.

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;
use serde_json::{json, Value};

use crate::support;
use support::{demo, peer_bin, Aimock};

const KEY: &str = "sk-diag-hygiene-4f8b2a9c7e1d0356";
/// A fragment of the key long enough to be unmistakable: a partly redacted key is a leak.
const KEY_FRAGMENT: &str = "4f8b2a9c7e1d";
const KEY_VAR: &str = "DIAG_HYGIENE_API_KEY";

/// graph.json's good run, with the Executor's first turn also calling `everything__get-env`
/// (so the log searches become inv-2 and inv-3), and a model that answers 400 quoting the key.
fn fixtures() -> Value {
    let path = crate::support::repo().join("tests/fixtures/aimock/graph.json");
    let mut good: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for f in good["fixtures"].as_array_mut().unwrap() {
        if f["match"]["hasToolResult"] == true {
            let answer = f["response"]["content"].as_str().unwrap();
            let shifted = answer.replace("inv-2", "inv-3").replace("inv-1", "inv-2");
            f["response"]["content"] = Value::String(shifted);
        } else if let Some(calls) = f
            .get_mut("response")
            .and_then(|r| r.get_mut("toolCalls"))
            .and_then(Value::as_array_mut)
        {
            calls.insert(
                0,
                json!({"id": "call_env", "name": "everything__get-env", "arguments": {}}),
            );
        }
    }
    let mut fixtures = vec![json!({
        "match": {"model": "key-echo"},
        "response": {
            "error": {
                "message": format!("Invalid parameter 'messages' for key {KEY}; see Authorization: Bearer {KEY}"),
                "type": "invalid_request_error",
            },
            "status": 400,
        },
    })];
    fixtures.extend(good["fixtures"].as_array().unwrap().iter().cloned());
    json!({ "fixtures": fixtures })
}

fn config(server: &Aimock, composer_echoes_the_key: bool) -> String {
    let mut toml = format!(
        "[models.main]\nbase_url = \"{}\"\nmodel = \"diag-hygiene\"\napi_key_env = \"{KEY_VAR}\"\n\
         timeout_secs = 60\n\
         [models.echo]\nbase_url = \"{}\"\nmodel = \"key-echo\"\napi_key_env = \"{KEY_VAR}\"\n\
         [agents]\ndefault = \"main\"\n",
        server.base_url(),
        server.base_url(),
    );
    if composer_echoes_the_key {
        toml.push_str("composer = \"echo\"\n");
    }
    toml.push_str(&format!(
        "[tools.search_logs]\npaths = [{:?}]\n\
         [[mcp]]\nname = \"everything\"\ncommand = {:?}\nargs = [\"stdio\"]\n",
        demo("logs"),
        peer_bin("mcp-server-everything").display().to_string(),
    ));
    toml
}

/// `diag` with the key in its environment, debug logs on, and the store at `db`.
fn diag(db: &Path, args: &[&str]) -> Output {
    diag_logging("debug", db, args)
}

fn diag_logging(filter: &str, db: &Path, args: &[&str]) -> Output {
    Command::cargo_bin("diag")
        .unwrap()
        .env(KEY_VAR, KEY)
        .env("DIAG_LOG", filter)
        .env_remove("DIAG_CONFIG")
        .arg("--db")
        .arg(db)
        .args(args)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap()
}

/// Every place a leak would be reported, with the bytes found there.
struct Evidence(Vec<(String, Vec<u8>)>);

impl Evidence {
    fn add(&mut self, what: impl Into<String>, bytes: &[u8]) {
        self.0.push((what.into(), bytes.to_vec()));
    }

    fn output(&mut self, what: &str, out: &Output) {
        self.add(format!("{what}: stdout"), &out.stdout);
        self.add(format!("{what}: stderr"), &out.stderr);
    }

    fn leaks(&self) -> Vec<String> {
        let found =
            |hay: &[u8], needle: &str| hay.windows(needle.len()).any(|w| w == needle.as_bytes());
        self.0
            .iter()
            .filter(|(_, bytes)| found(bytes, KEY) || found(bytes, KEY_FRAGMENT))
            .map(|(what, _)| what.clone())
            .collect()
    }
}

fn run_id_of(out: &Output) -> String {
    assert!(
        out.status.success(),
        "diag ask exited {:?}:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("ask --json prints JSON");
    v["run_id"].as_str().expect("a run_id").to_string()
}

#[test]
fn the_api_key_is_nowhere_in_the_store_exports_outputs_or_logs() {
    let dir = tempfile::tempdir().unwrap();
    let fixture_file = dir.path().join("hygiene.json");
    std::fs::write(&fixture_file, fixtures().to_string()).unwrap();
    // An absolute path replaces the harness's fixture folder when joined onto it.
    let server = Aimock::start_with(fixture_file.to_str().unwrap(), Some(KEY));
    let db = dir.path().join("store").join("diag.db");
    let good_cfg = dir.path().join("good.toml");
    let echo_cfg = dir.path().join("echo.toml");
    std::fs::write(&good_cfg, config(&server, false)).unwrap();
    std::fs::write(&echo_cfg, config(&server, true)).unwrap();
    let record = dir.path().join("recorded.json");

    // The test holds the store open, so the WAL file outlives each `diag` process and its
    // raw bytes can be read too.
    let store = diag::store::Store::open(&db).unwrap();
    let mut evidence = Evidence(Vec::new());

    let question = "why does checkout return 502 since 14:00?";
    let good = diag(
        &db,
        &[
            "--config",
            good_cfg.to_str().unwrap(),
            "ask",
            question,
            "--json",
            "--record",
            record.to_str().unwrap(),
        ],
    );
    evidence.output("ask --json (good run)", &good);
    let good_run = run_id_of(&good);

    let echo = diag(
        &db,
        &[
            "--config",
            echo_cfg.to_str().unwrap(),
            "ask",
            question,
            "--json",
        ],
    );
    evidence.output("ask --json (key-echoing endpoint)", &echo);
    let echo_run = run_id_of(&echo);
    // Every dependency's most verbose logs too (HTTP client, TLS, MCP SDK).
    let traced = diag_logging(
        "trace",
        &db,
        &[
            "--config",
            echo_cfg.to_str().unwrap(),
            "ask",
            question,
            "--json",
        ],
    );
    evidence.output("ask --json with DIAG_LOG=trace", &traced);
    let traced_run = run_id_of(&traced);

    // The checks below must be able to fail: the MCP tool's output and the endpoint's error
    // are really stored, and the debug log really logs.
    let invocations = store.invocations(&good_run).unwrap();
    let env_call = invocations
        .iter()
        .find(|i| i.tool_name == "everything__get-env")
        .expect("the get-env call is recorded");
    assert!(
        env_call.output.to_string().contains("PATH"),
        "get-env returned the server's environment: {}",
        env_call.output
    );
    let good_row = store.get_run(&good_run).unwrap().unwrap();
    assert!(!good_row.degraded, "{good_row:?}");
    let echo_row = store.get_run(&echo_run).unwrap().unwrap();
    assert!(echo_row.degraded, "the composer's 400 led to the fallback");
    let echoed = store
        .exchanges(&echo_run)
        .unwrap()
        .into_iter()
        .find_map(|x| x.exchange.outcome.err())
        .expect("the 400 is stored");
    assert!(
        echoed.message.contains("HTTP 400") && echoed.message.contains("***"),
        "{}",
        echoed.message
    );
    assert!(
        String::from_utf8_lossy(&echo.stderr).contains("model call failed"),
        "the endpoint's error is reported on stderr"
    );
    let debug_log = String::from_utf8_lossy(&good.stderr);
    // diag's own events, not only its libraries': every node, every model call and tool
    // call, the MCP server's start.
    for needle in [
        "node finished",
        "node=planner",
        "node=composer",
        "model call",
        "model answered",
        "tool call",
        "tool=everything__get-env",
        "MCP server started",
        "run started",
    ] {
        assert!(
            debug_log.contains(needle),
            "DIAG_LOG=debug logs `{needle}` to stderr: {debug_log}"
        );
    }

    for run in [&good_run, &echo_run, &traced_run] {
        for (what, args) in [
            ("trace --json", vec!["trace", run.as_str(), "--json"]),
            ("trace", vec!["trace", run.as_str()]),
            ("export", vec!["export", run.as_str()]),
        ] {
            let out = diag(&db, &args);
            assert!(
                out.status.success(),
                "diag {what} {run}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!out.stdout.is_empty(), "diag {what} {run} printed nothing");
            evidence.output(&format!("{what} {run}"), &out);
        }
    }
    let runs = diag(&db, &["runs", "--json"]);
    assert!(runs.status.success());
    evidence.output("runs --json", &runs);
    evidence.add("the --record run file", &std::fs::read(&record).unwrap());

    // Raw bytes of every file the store keeps: the database (free pages included), the WAL
    // and the shared-memory index.
    store.checkpoint().unwrap();
    for entry in std::fs::read_dir(db.parent().unwrap()).unwrap() {
        let path = entry.unwrap().path();
        evidence.add(path.display().to_string(), &std::fs::read(&path).unwrap());
    }
    drop(store);
    let db_bytes = std::fs::read(&db).unwrap();
    assert!(
        db_bytes.windows(14).any(|w| w == b"everything__ge"),
        "the raw database holds the runs"
    );
    evidence.add("diag.db after the last connection closed", &db_bytes);

    let leaks = evidence.leaks();
    assert!(leaks.is_empty(), "the API key leaked into: {leaks:#?}");
    assert!(
        evidence.0.len() >= 20,
        "every output was checked ({})",
        evidence.0.len()
    );
}
