//! `diag-testkit`: what the integration tests of diag's crates share, one definition each (as
//! jj's `testutils`): the repository's paths, local ports, the harness for real peer servers
//! installed by `scripts/install-peers` (here: aimock and llama.cpp's llama-server; Alertmanager
//! and Prometheus in `alertmanager` and `prometheus`; a missing peer
//! fails the test with the command that installs it), and in modules the protocol builders
//! (`builders`), the store's records (`records`), bounded child processes (`bounded`), the
//! property-test configuration (`seeded`), document mutations (`mutate`), the suite's
//! PostgreSQL 15 server (`postgres`: started once per test process on 127.0.0.1, as an
//! unprivileged user, stopped when the process ends), and the run store's conformance harness
//! over both backends (`backends`).
//!
//! A dev-dependency of the crates whose `tests/it/` binaries use it, never a normal one
//! (`tests/it/layering.rs`): integration tests link the crates' normal libraries, the same
//! ones this crate links, so there is one copy of each. What is about the `diag` command line
//! (its hermetic environment, the browser, stored runs to report on) stays in the root's
//! `tests/it/support/`.
//!
//! This is test code: a helper that cannot do its job panics, and the panic is the calling
//! test's failure report. It says what the helper could not do ([`OrFail`]): `unwrap` and
//! `expect` are denied here as in every crate.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod alertmanager;
pub mod backends;
pub mod bounded;
pub mod builders;
pub mod mutate;
pub mod postgres;
pub mod prometheus;
pub mod records;
pub mod seeded;

use std::collections::BTreeSet;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How a helper fails the calling test when it cannot do its job: with what it could not do
/// and why, at the caller's line.
pub trait OrFail<T> {
    /// The value, or a panic naming `what` (and the error, for a `Result`).
    fn or_fail(self, what: &str) -> T;
}

impl<T, E: std::fmt::Debug> OrFail<T> for Result<T, E> {
    #[track_caller]
    fn or_fail(self, what: &str) -> T {
        match self {
            Ok(v) => v,
            Err(e) => panic!("{what}: {e:?}"),
        }
    }
}

impl<T> OrFail<T> for Option<T> {
    #[track_caller]
    fn or_fail(self, what: &str) -> T {
        match self {
            Some(v) => v,
            None => panic!("{what}: none"),
        }
    }
}

/// The repository root (for fixtures and schemas), whichever crate's tests ask.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .or_fail("the repository root, two folders above crates/diag-testkit")
}

/// A JSON file's document.
pub fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).or_fail("read JSON")).or_fail("JSON")
}

/// A table row's name, said on stderr (which the failing test's report shows) when the row's
/// scope unwinds from a failed assertion: rows replace test functions, and a failure must still
/// name the case. `let _row = Row::named("the_former_test_name");` at the top of the loop body.
pub struct Row(&'static str);

impl Row {
    pub fn named(name: &'static str) -> Row {
        Row(name)
    }
}

impl Drop for Row {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("failing row: {}", self.0);
        }
    }
}

/// A local port that was free a moment ago and that no other test of this process has been
/// given: the tests share one process, and a port released by one test (a refused-connection
/// endpoint, or a peer that has stopped) must not become another test's server, whose URL
/// would then also key the model adapter's per-endpoint memory. The set of given ports is the
/// one piece of state the tests share on purpose; it only ever grows.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .or_fail("a free local port")
            .port();
        if GIVEN
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(port)
        {
            return port;
        }
    }
}

/// One aimock process on a free port; killed when dropped, whatever the test did.
pub struct Aimock {
    child: Child,
    port: u16,
    api_key: Option<&'static str>,
    log: PathBuf,
}

impl Aimock {
    /// Starts aimock with the shared fixtures. With `api_key`, aimock answers 401 to any
    /// request without `Authorization: Bearer <api_key>` (journal reads included).
    pub fn start(api_key: Option<&'static str>) -> Aimock {
        Self::start_with("openai.json", api_key)
    }

    /// Starts aimock with `tests/fixtures/aimock/<fixtures>`.
    pub fn start_with(fixtures: &str, api_key: Option<&'static str>) -> Aimock {
        let cli = peers_dir().join("npm/node_modules/@copilotkit/aimock/dist/cli.js");
        assert!(
            cli.is_file(),
            "aimock is not installed at {}: run scripts/install-peers (or set DIAG_PEERS_DIR \
             to a directory where it was installed)",
            cli.display()
        );
        let fixtures = repo().join("tests/fixtures/aimock").join(fixtures);

        // The OS picks a free port; it is released just before aimock binds it.
        let port = free_port();
        let log =
            std::env::temp_dir().join(format!("diag-aimock-{}-{port}.log", std::process::id()));
        let log_file = std::fs::File::create(&log).or_fail("aimock log file");
        let mut command = Command::new("node");
        command
            .arg(&cli)
            .args(["--host", "127.0.0.1", "-p", &port.to_string(), "-f"])
            .arg(&fixtures)
            .arg("--validate-on-load")
            // Prometheus counters count even the requests refused for a wrong key, which the
            // journal leaves out.
            .arg("--metrics")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().or_fail("log file"))
            .stderr(log_file);
        match api_key {
            Some(key) => command.env("AIMOCK_API_KEYS", key),
            None => command.env_remove("AIMOCK_API_KEYS"),
        };
        let child = command.spawn().unwrap_or_else(|e| {
            panic!("cannot start aimock with `node` ({e}): install Node.js and run scripts/install-peers")
        });
        let mut server = Aimock {
            child,
            port,
            api_key,
            log,
        };
        server.wait_ready();
        server
    }

    /// Bounded poll: the port accepts connections (aimock listens once its fixtures loaded).
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = ([127, 0, 0, 1], self.port).into();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "aimock exited ({status}) before it was ready:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "aimock did not listen on port {} within 20 s:\n{}",
                self.port,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn root(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn base_url(&self) -> String {
        format!("{}/v1", self.root())
    }

    pub async fn journal(&self) -> Vec<Value> {
        let mut request = control_client().get(format!("{}/__aimock/journal", self.root()));
        if let Some(key) = self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.or_fail("journal request");
        assert!(
            response.status().is_success(),
            "journal: {}",
            response.status()
        );
        response.json().await.or_fail("journal JSON")
    }

    /// Replaces every fixture with `fixtures` (`{"fixtures": [...]}`, the file format), as a
    /// server that changes its answers: later requests are answered by the new ones.
    pub async fn replace_fixtures(&self, fixtures: &Value) {
        let url = format!("{}/__aimock/fixtures", self.root());
        let mut clear = control_client().delete(&url);
        let mut add = control_client().post(&url).json(fixtures);
        if let Some(key) = self.api_key {
            clear = clear.bearer_auth(key);
            add = add.bearer_auth(key);
        }
        let cleared = clear.send().await.or_fail("clear the fixtures");
        assert!(cleared.status().is_success(), "clear: {}", cleared.status());
        let added = add.send().await.or_fail("add the fixtures");
        let status = added.status();
        assert!(
            status.is_success(),
            "add: {status} {}",
            added.text().await.unwrap_or_default()
        );
    }

    /// Empties the journal (the fixtures stay).
    pub async fn clear_journal(&self) {
        let mut request = control_client().post(format!("{}/__aimock/reset/journal", self.root()));
        if let Some(key) = self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.or_fail("clear the journal");
        assert!(
            response.status().is_success(),
            "journal reset: {}",
            response.status()
        );
    }

    /// How many chat requests aimock answered with `status`, from its `/metrics` counters.
    pub async fn chat_requests_answered(&self, status: u16) -> u64 {
        let mut request = control_client().get(format!("{}/metrics", self.root()));
        if let Some(key) = self.api_key {
            request = request.bearer_auth(key);
        }
        let text = request
            .send()
            .await
            .or_fail("metrics request")
            .text()
            .await
            .or_fail("metrics text");
        let series = format!(
            "aimock_requests_total{{method=\"POST\",path=\"/v1/chat/completions\",status=\"{status}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map(|n| n.trim().parse().or_fail("a counter"))
            .unwrap_or(0)
    }

    /// The chat requests aimock received, waiting (bounded) until at least `expected` are
    /// journaled: aimock may journal a request just after it answered it.
    pub async fn chat_requests(&self, expected: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let chats: Vec<Value> = self
                .journal()
                .await
                .into_iter()
                .filter(|e| {
                    e["path"]
                        .as_str()
                        .is_some_and(|p| p.ends_with("/chat/completions"))
                })
                .collect();
            if chats.len() >= expected || Instant::now() > deadline {
                return chats;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Aimock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The peers folder: `DIAG_PEERS_DIR`, else `.peers/` in the repository.
pub fn peers_dir() -> PathBuf {
    std::env::var_os("DIAG_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".peers"))
}

/// An npm-installed peer's executable; a missing one fails with the command that installs it.
pub fn peer_bin(name: &str) -> PathBuf {
    let bin = peers_dir().join("npm/node_modules/.bin").join(name);
    assert!(
        bin.exists(),
        "{} is missing: run scripts/install-peers (or set DIAG_PEERS_DIR to where it installed)",
        bin.display()
    );
    bin
}

/// A path in the demo environment, `fixtures/demo/PATH`, as a string for configurations.
pub fn demo(path: &str) -> String {
    repo()
        .join("fixtures/demo")
        .join(path)
        .display()
        .to_string()
}

/// The client for aimock's control endpoints: bounded, so a wedged server fails the test
/// instead of hanging the suite.
fn control_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .or_fail("an HTTP client")
}

/// llama.cpp's own OpenAI-compatible server (`llama-server`, built by `scripts/install-peers`
/// under `$DIAG_PEERS_DIR/llama.cpp`) serving SmolLM2-135M-Instruct with the model's own chat
/// template (`--jinja`) on a free port of 127.0.0.1; killed when dropped. A missing install
/// fails the test.
pub struct LlamaServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

/// The model name the server answers to.
pub const SMOLLM2: &str = "smollm2";

impl LlamaServer {
    /// The `llama-server` binary and the GGUF weights of SmolLM2-135M-Instruct.
    pub fn installation() -> (PathBuf, PathBuf) {
        let dir = peers_dir().join("llama.cpp");
        let server = dir.join("bin/llama-server");
        let model = dir.join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
        let missing = |what: &str| {
            format!(
                "{what} is missing under {}: run scripts/install-peers (or set DIAG_PEERS_DIR to \
                 where it installed)",
                dir.display()
            )
        };
        assert!(
            dir.join(".installed").is_file() && server.is_file(),
            "{}",
            missing("llama-server")
        );
        assert!(
            model.is_file(),
            "{}",
            missing("SmolLM2-135M-Instruct.Q4_1.gguf")
        );
        (server, model)
    }

    /// Starts the server with a context of `n_ctx` tokens, two threads, a fixed seed and the
    /// model's own chat template, and waits (bounded, generously: loading takes seconds, more
    /// on a busy machine) until `/v1/models` answers.
    pub fn start(n_ctx: u32) -> LlamaServer {
        let (server, model) = Self::installation();
        let port = free_port();
        let log =
            std::env::temp_dir().join(format!("diag-llama-{}-{port}.log", std::process::id()));
        let log_file = std::fs::File::create(&log).or_fail("llama log file");
        let child = Command::new(&server)
            .arg("-m")
            .arg(&model)
            .args(["--alias", SMOLLM2, "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args([
                "-c",
                &n_ctx.to_string(),
                "-t",
                "2",
                "--seed",
                "42",
                "--jinja",
                "--no-webui",
                // One request at a time, with the whole context: diag sends its calls in turn.
                "--parallel",
                "1",
            ])
            // OpenMP's default spin-waiting makes two threads on a busy two-core machine some
            // eight times slower than one; passive waiting also leaves the cores to others.
            .env("OMP_WAIT_POLICY", "PASSIVE")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().or_fail("log file"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} ({e})", server.display()));
        let mut server = LlamaServer { child, port, log };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(180);
        let url = format!("{}/models", self.base_url());
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the llama.cpp server exited ({status}) before it was ready:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if http_get_ok(self.port, "/v1/models") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the llama.cpp server did not answer {url} within 180 s:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// What the server wrote so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Whether `GET path` on 127.0.0.1:`port` answers 200 (a plain HTTP/1.0 exchange, bounded).
fn http_get_ok(port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let addr = ([127, 0, 0, 1], port).into();
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    if stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

/// The SQLite run store at `path` (created if needed), as the port's handle.
pub fn open_sqlite(
    path: impl AsRef<Path>,
) -> Result<diag_core::store::Store, diag_store_sqlite::SqliteError> {
    diag_store_sqlite::SqliteStore::open(path).map(diag_core::store::Store::new)
}

/// [`open_sqlite`] with options (a busy timeout, a clock, a lease).
pub fn open_sqlite_with(
    path: impl AsRef<Path>,
    options: diag_store_sqlite::StoreOptions,
) -> Result<diag_core::store::Store, diag_store_sqlite::SqliteError> {
    diag_store_sqlite::SqliteStore::open_with(path, options).map(diag_core::store::Store::new)
}
