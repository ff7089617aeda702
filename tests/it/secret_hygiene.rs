//! The API key never leaves the `Authorization` header (SPEC §5): end to end through the `diag`
//! binary, against aimock running with `AIMOCK_API_KEYS`, the key is nowhere in the database
//! files (read as raw bytes, WAL and shared memory included), the run file `--record` writes,
//! `diag export`, `diag ask --json`, `diag trace` (text and `--json`), `diag runs --json`, or the
//! stderr of any of them with `DIAG_LOG=debug`.
//!
//! The PostgreSQL run store's password is held to the same standard
//! ([`the_postgres_password_is_nowhere_in_the_store_outputs_or_logs`]): given in each place diag
//! takes it from (`PGPASSWORD`, the variable `[store] password_env` names, `~/.pgpass`,
//! `PGPASSFILE`, the URL itself), it is in no output or log of `ask`, `runs`, `trace` or
//! `export` and in no column of any table of the store; a wrong one is never echoed either.
//!
//! Two runs make the API key check meaningful:
//! - a whole diagnosis whose Executor also calls an MCP server's `get-env` tool, which returns
//!   the server's environment: were the key handed to the server, it would be recorded;
//! - a run whose Composer endpoint answers HTTP 400 with an error message that quotes the key
//!   and its `Authorization` header, as some gateways do: that message is stored, shown on
//!   stderr and exported, so it must be redacted everywhere.

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;
use serde_json::{json, Value};

use crate::support::cli_env::{Out, TestEnv};
use diag_testkit::postgres;
use diag_testkit::{demo, peer_bin, Aimock};

const KEY: &str = "sk-diag-hygiene-4f8b2a9c7e1d0356";
/// A fragment of the key long enough to be unmistakable: a partly redacted key is a leak.
const KEY_FRAGMENT: &str = "4f8b2a9c7e1d";
const KEY_VAR: &str = "DIAG_HYGIENE_API_KEY";

/// graph.json's good run, with the Executor's first turn also calling `everything__get-env`
/// (so the log searches become inv-2 and inv-3), and a model that answers 400 quoting the key.
fn fixtures() -> Value {
    let path = diag_testkit::repo().join("tests/fixtures/aimock/graph.json");
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
         [executor]\nrun_plan_steps = false\n\
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
        self.leaks_of(&[KEY, KEY_FRAGMENT])
    }

    /// Where any of `secrets` was found.
    fn leaks_of(&self, secrets: &[&str]) -> Vec<String> {
        let found =
            |hay: &[u8], needle: &str| hay.windows(needle.len()).any(|w| w == needle.as_bytes());
        self.0
            .iter()
            .filter(|(_, bytes)| secrets.iter().any(|s| found(bytes, s)))
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
    let store = diag_testkit::open_sqlite(&db).unwrap();
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
    diag_store_sqlite::SqliteStore::open(&db)
        .unwrap()
        .checkpoint()
        .unwrap();
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

/// Where a PostgreSQL password is given.
#[derive(Debug, Clone, Copy)]
enum PgSource {
    PgPassword,
    /// `[store] url` and `password_env` of the configuration file, the variable set.
    ConfigVariable,
    /// `~/.pgpass` (HOME is the test environment's).
    HomePassFile,
    PgPassFile,
    /// `postgres://diag_pw:PASSWORD@…`.
    Url,
}

/// The variable `[store] password_env` names.
const PG_PASSWORD_VAR: &str = "DIAG_HYGIENE_PG_PASSWORD";

/// `diag` on the store at `url` (the harness's `diag_pw` URL, no password in it) with
/// `password` given as `source` says.
struct PgDiag<'a> {
    env: &'a TestEnv,
    source: PgSource,
    url: String,
    password: String,
}

/// Writes the files `source` needs (the configuration, the password file).
fn pg_diag<'a>(env: &'a TestEnv, source: PgSource, url: &str, password: &str) -> PgDiag<'a> {
    let server = postgres::server();
    let (_, database) = url.rsplit_once('/').unwrap();
    match source {
        PgSource::ConfigVariable => {
            let config = format!("[store]\nurl = {url:?}\npassword_env = \"{PG_PASSWORD_VAR}\"\n");
            std::fs::write(env.path("diag.toml"), config).unwrap();
        }
        PgSource::HomePassFile | PgSource::PgPassFile => {
            let file = match source {
                PgSource::HomePassFile => env.root().join("home/.pgpass"),
                _ => env.path("secrets/pgpass"),
            };
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            let line = format!(
                "127.0.0.1:{}:{database}:diag_pw:{}\n",
                server.port(),
                password.replace('\\', "\\\\").replace(':', "\\:")
            );
            std::fs::write(&file, format!("# diag's store\n{line}")).unwrap();
            std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
        }
        PgSource::PgPassword | PgSource::Url => {}
    }
    PgDiag {
        env,
        source,
        url: url.to_string(),
        password: password.to_string(),
    }
}

impl PgDiag<'_> {
    fn run(&self, log: Option<&str>, args: &[&str]) -> Out {
        let url = match self.source {
            PgSource::Url => {
                self.url
                    .replacen("diag_pw@", &format!("diag_pw:{}@", self.password), 1)
            }
            _ => self.url.clone(),
        };
        let config = self.env.path("diag.toml");
        let mut all: Vec<&str> = match self.source {
            PgSource::ConfigVariable => vec!["--config", config.to_str().unwrap()],
            _ => vec!["--db", &url],
        };
        all.extend_from_slice(args);
        self.env.run_with(&all, |c| {
            if let Some(filter) = log {
                c.env("DIAG_LOG", filter);
            }
            match self.source {
                PgSource::PgPassword => {
                    c.env("PGPASSWORD", &self.password);
                }
                PgSource::ConfigVariable => {
                    c.env(PG_PASSWORD_VAR, &self.password).env_remove("DIAG_DB");
                }
                PgSource::PgPassFile => {
                    c.env("PGPASSFILE", self.env.path("secrets/pgpass"));
                }
                PgSource::HomePassFile | PgSource::Url => {}
            }
        })
    }
}

/// Every row of every table of the store at `url`, as text.
fn pg_dump(url: &str) -> String {
    let server = postgres::server();
    let tables = server.psql(
        url,
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
    );
    let tables: Vec<&str> = tables.lines().collect();
    assert!(tables.contains(&"diagnosis_run"), "{tables:?}");
    tables
        .iter()
        .map(|t| {
            let rows = server.psql(url, &format!("SELECT t::text FROM {t} t"));
            format!("-- {t}\n{rows}")
        })
        .collect()
}

#[test]
fn the_postgres_password_is_nowhere_in_the_store_outputs_or_logs() {
    const WRONG: &str = "wrong-pg-secret-5e1c9a7b3d";
    let server = postgres::server();
    let password = server.password();
    // A fragment too: a password cut short or partly masked is a leak.
    let fragment = &password[password.len() - 16..];
    let mut evidence = Evidence(Vec::new());
    for source in [
        PgSource::PgPassword,
        PgSource::ConfigVariable,
        PgSource::HomePassFile,
        PgSource::PgPassFile,
        PgSource::Url,
    ] {
        let env = TestEnv::new();
        env.copy_fixture("tests/fixtures/runs/pass.json", "pass.json");
        let url = server.fresh_db_password();
        let diag = pg_diag(&env, source, &url, password);
        let what = |cmd: &str| format!("{source:?}: {cmd}");
        let ok = |out: &Out, cmd: &str| {
            assert_eq!(out.code, Some(0), "{}: {}", what(cmd), out.stderr);
        };

        let ask = diag.run(Some("debug"), &["ask", "--fixture", "pass.json", "--json"]);
        ok(&ask, "ask --json");
        // The debug log really logs the store, and names it without the password.
        assert!(
            ask.stderr.contains("run store opened")
                && ask.stderr.contains(&format!(
                    "diag_pw@127.0.0.1:{}/{}",
                    server.port(),
                    url.rsplit('/').next().unwrap()
                )),
            "{}",
            ask.stderr
        );
        evidence.add(what("ask --json: stdout"), ask.stdout.as_bytes());
        evidence.add(what("ask --json: stderr"), ask.stderr.as_bytes());
        let run = ask.json()["run_id"].as_str().unwrap().to_string();
        let traced = diag.run(Some("trace"), &["ask", "--fixture", "pass.json"]);
        ok(&traced, "ask with DIAG_LOG=trace");
        evidence.add(what("ask (trace): stdout"), traced.stdout.as_bytes());
        evidence.add(what("ask (trace): stderr"), traced.stderr.as_bytes());
        for args in [
            vec!["runs", "--json"],
            vec!["trace", run.as_str(), "--json"],
            vec!["trace", run.as_str()],
            vec!["export", run.as_str()],
        ] {
            let cmd = args.join(" ");
            let out = diag.run(Some("debug"), &args);
            ok(&out, &cmd);
            assert!(!out.stdout.is_empty(), "{}", what(&cmd));
            evidence.add(what(&format!("{cmd}: stdout")), out.stdout.as_bytes());
            evidence.add(what(&format!("{cmd}: stderr")), out.stderr.as_bytes());
        }
        let dump = pg_dump(&url);
        assert!(dump.contains(&run), "the dump holds the run");
        evidence.add(what("every table"), dump.as_bytes());

        // A wrong password: refused in one line, and echoed nowhere (trace logs included).
        let wrong = pg_diag(&env, source, &url, WRONG);
        let out = wrong.run(None, &["ask", "--fixture", "pass.json"]);
        assert_eq!(out.code, Some(2), "{}", what("wrong password"));
        let line = out.one_error_line();
        assert!(
            line.contains("refused the credentials of user diag_pw"),
            "{}: {line}",
            what("wrong password")
        );
        evidence.add(what("wrong password: stderr"), out.stderr.as_bytes());
        evidence.add(what("wrong password: stdout"), out.stdout.as_bytes());
        let out = wrong.run(Some("trace"), &["runs", "--json"]);
        assert_eq!(out.code, Some(2), "{}", what("wrong password, runs"));
        evidence.add(
            what("wrong password, runs (trace): stderr"),
            out.stderr.as_bytes(),
        );
        evidence.add(
            what("wrong password, runs (trace): stdout"),
            out.stdout.as_bytes(),
        );
        evidence.add(
            what("every table after the wrong password"),
            pg_dump(&url).as_bytes(),
        );
    }
    let secrets = [password, fragment, WRONG, &WRONG[10..]];
    // The search finds a fragment alone.
    let probe = Evidence(vec![("probe".into(), format!("<{fragment}>").into_bytes())]);
    assert_eq!(probe.leaks_of(&secrets), ["probe"]);
    let leaks = evidence.leaks_of(&secrets);
    assert!(
        leaks.is_empty(),
        "the PostgreSQL password leaked into: {leaks:#?}"
    );
    assert!(evidence.0.len() >= 5 * 17, "{}", evidence.0.len());
}

/// `diag serve`'s secrets: the webhook token, the read token, the report link key and the
/// result webhook's token.
const SERVE_READ_TOKEN: &str = "hygiene-read-token-5d2c8e1f9a-3e7b0c4d";
const SERVE_LINK_KEY: &str = "hygiene-link-key-0f6b3e9d2a7c4815e0b9d3f6a2c7e4b1";
const SERVE_NOTIFY_TOKEN: &str = "hygiene-notify-token-8e4a1c7f3b";

#[test]
fn the_serve_tokens_and_link_key_are_nowhere_in_the_store_outputs_metrics_or_logs() {
    use crate::investigate::capture;
    use crate::serve::{am_to, env, now, one_alert, post, request, Serve, KEY as SERVE_KEY, TOKEN};
    use diag_testkit::alertmanager::alert;

    let server = Aimock::start_with("graph.json", Some(SERVE_KEY));
    let hook = capture();
    let mut env = env(
        &server,
        "concurrency = 1\nread_token_env = \"DIAG_HYGIENE_READ\"\n",
    );
    env.set_env("DIAG_HYGIENE_READ", SERVE_READ_TOKEN);
    env.set_env("DIAG_SERVE_LINK_KEY", SERVE_LINK_KEY);
    env.set_env("DIAG_HYGIENE_NOTIFY", SERVE_NOTIFY_TOKEN);
    let mut config = std::fs::read_to_string(env.path("diag.toml")).unwrap();
    config.push_str(&format!(
        "[notify]\nurl = {:?}\ntoken_env = \"DIAG_HYGIENE_NOTIFY\"\n\
         report_base_url = \"http://diag.example\"\n",
        hook.url
    ));
    std::fs::write(env.path("diag.toml"), config).unwrap();
    let secrets = [TOKEN, SERVE_READ_TOKEN, SERVE_LINK_KEY, SERVE_NOTIFY_TOKEN];
    let mut evidence = Evidence(Vec::new());

    // Every log of every dependency on.
    let mut serve = Serve::start(&env, &[("DIAG_LOG", "trace")]);
    let am = am_to(&[&serve], 1);
    am.post_alerts(&json!([alert(
        "CheckoutHigh502Rate",
        "checkout-service",
        &now(),
        &[]
    )]));
    serve.poll("the result posted", |_| {
        (hook.got.lock().unwrap().len() == 1).then_some(())
    });
    let (head, post_body) = hook.got.lock().unwrap()[0].clone();
    // The result webhook is where the notify token goes, in its header only.
    assert!(head.contains(SERVE_NOTIFY_TOKEN), "{head}");
    evidence.add(
        "the result webhook's body",
        post_body.to_string().as_bytes(),
    );
    let run = post_body["run_id"].as_str().unwrap().to_string();
    let link = post_body["report_url"]
        .as_str()
        .unwrap()
        .strip_prefix("http://diag.example")
        .unwrap()
        .to_string();
    let bare = format!("/runs/{run}/report");
    let mut answer = |what: &str, method: &str, path: &str, token: Option<&str>, body: &[u8]| {
        let (code, head, text) = request(&serve.addr, method, path, token, body);
        evidence.add(format!("{what}: {code} {head}"), text.as_bytes());
        code
    };
    assert_eq!(answer("report by link", "GET", &link, None, b""), 200);
    assert_eq!(
        answer(
            "md report by link",
            "GET",
            &format!("{link}&format=md"),
            None,
            b""
        ),
        200
    );
    assert_eq!(
        answer(
            "report, read token",
            "GET",
            &bare,
            Some(SERVE_READ_TOKEN),
            b""
        ),
        200
    );
    assert_eq!(
        answer("report, webhook token", "GET", &bare, Some(TOKEN), b""),
        403
    );
    let alert_body = one_alert("HygieneDirect");
    assert_eq!(
        answer(
            "webhook, read token",
            "POST",
            "/alertmanager",
            Some(SERVE_READ_TOKEN),
            &alert_body
        ),
        401
    );
    assert_eq!(
        answer(
            "webhook, link key as token",
            "POST",
            "/alertmanager",
            Some(SERVE_LINK_KEY),
            &alert_body
        ),
        401
    );
    assert_eq!(answer("metrics", "GET", "/metrics", None, b""), 200);
    assert_eq!(answer("healthz", "GET", "/healthz", None, b""), 200);
    assert_eq!(post(&serve, Some(TOKEN), &alert_body).0, 202);
    serve.poll("the direct alert investigated", |s| {
        (s.done() == 2).then_some(())
    });

    for (what, args) in [
        ("serve status --json", vec!["serve", "status", "--json"]),
        ("serve status", vec!["serve", "status"]),
        ("runs --json", vec!["runs", "--json"]),
        ("trace --json", vec!["trace", run.as_str(), "--json"]),
        ("trace", vec!["trace", run.as_str()]),
        ("export", vec!["export", run.as_str()]),
        ("report", vec!["report", run.as_str(), "--format", "html"]),
    ] {
        let out = env.run_with(&args, |cmd| {
            cmd.env("DIAG_LOG", "trace");
        });
        out.expect(0);
        evidence.add(format!("{what}: stdout"), out.stdout.as_bytes());
        evidence.add(format!("{what}: stderr"), out.stderr.as_bytes());
    }
    serve.signal(libc::SIGTERM);
    assert_eq!(serve.wait().code(), Some(0), "{}", serve.stderr());
    evidence.add(
        "diag serve's stderr (DIAG_LOG=trace)",
        serve.stderr().as_bytes(),
    );
    assert!(
        serve.stderr().contains("TRACE") || serve.stderr().contains("DEBUG"),
        "the logs were on: {}",
        serve.stderr()
    );

    // Raw bytes of every file of the store, after the last writer closed it.
    let db = env.db();
    diag_store_sqlite::SqliteStore::open(&db)
        .unwrap()
        .checkpoint()
        .unwrap();
    for entry in std::fs::read_dir(db.parent().unwrap()).unwrap() {
        let path = entry.unwrap().path();
        evidence.add(path.display().to_string(), &std::fs::read(&path).unwrap());
    }
    let db_bytes = std::fs::read(&db).unwrap();
    assert!(
        db_bytes.windows(19).any(|w| w == b"CheckoutHigh502Rate"),
        "the raw database holds the alerts"
    );

    let leaks = evidence.leaks_of(&secrets);
    assert!(leaks.is_empty(), "a serve secret leaked into: {leaks:#?}");
    assert!(
        evidence.0.len() >= 25,
        "every output was checked ({})",
        evidence.0.len()
    );
}
