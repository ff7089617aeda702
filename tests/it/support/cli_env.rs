//! A hermetic environment for running the `diag` binary, after jj's `TestEnvironment`: every
//! test gets its own temporary HOME, XDG folders and database, and the child process sees a
//! cleared environment with only PATH, those folders and what the test adds. Output is
//! captured whole (exit code, stdout, stderr) and can be snapshotted with filters that
//! replace run ids, session ids, times, durations and temporary paths. Every run is bounded
//! (`bounded::LIMIT`): a hanging `diag` fails its test, naming the command.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use assert_cmd::cargo::cargo_bin;
use diag_testkit::{bounded, repo};
use serde_json::Value;

/// A file under the repository root.
pub fn repo_file(path: &str) -> PathBuf {
    repo().join(path)
}

pub struct TestEnv {
    dir: tempfile::TempDir,
    extra_env: Vec<(String, String)>,
}

/// What one `diag` invocation did.
#[derive(Debug, Clone)]
pub struct Out {
    /// `None` when the process died by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// Asserts the exit code, showing the whole output when it differs.
    #[track_caller]
    pub fn expect(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// Asserts an empty stderr.
    #[track_caller]
    pub fn quiet_stderr(&self) -> &Self {
        assert!(self.stderr.is_empty(), "stderr: {}", self.stderr);
        self
    }

    /// Asserts stderr is only the one line that confirms writing `file` (`diag: wrote FILE
    /// (…)`), as `report -o` and `export -o` print.
    pub fn wrote(&self, file: &str) -> &Self {
        let prefix = format!("diag: wrote {file} (");
        assert!(
            self.stderr.starts_with(&prefix) && self.stderr.ends_with(")\n"),
            "stderr: {}",
            self.stderr
        );
        assert_eq!(self.stderr.lines().count(), 1, "stderr: {}", self.stderr);
        self
    }

    /// The stderr lines.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }

    /// Asserts stderr is exactly one line, `diag: …`, with no panic or backtrace, and
    /// returns it.
    #[track_caller]
    pub fn one_error_line(&self) -> &str {
        let lines = self.stderr_lines();
        assert_eq!(
            lines.len(),
            1,
            "expected one stderr line, got:\n{}",
            self.stderr
        );
        let line = lines[0];
        assert!(line.starts_with("diag: "), "{line}");
        for bad in ["panicked", "RUST_BACKTRACE", "stack backtrace", "thread '"] {
            assert!(!line.contains(bad), "{line}");
        }
        line
    }

    /// stdout parsed as JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }

    /// Exit code, stdout and stderr in one text, as snapshots show them.
    pub fn snapshot_text(&self) -> String {
        format!(
            "exit: {}\n----- stdout -----\n{}----- stderr -----\n{}",
            self.code
                .map_or_else(|| "signal".to_string(), |c| c.to_string()),
            self.stdout,
            self.stderr
        )
    }
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let dir = tempfile::Builder::new()
            .prefix("diag-cli-")
            .tempdir()
            .expect("temp dir");
        for sub in ["home", "config", "data", "cache", "state", "work"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("temp folders");
        }
        TestEnv {
            dir,
            extra_env: Vec::new(),
        }
    }

    /// The temporary root (HOME, XDG folders and the database live under it).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The working directory of every command: relative paths in output stay short.
    pub fn work(&self) -> PathBuf {
        self.root().join("work")
    }

    /// A path in the working directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.work().join(name)
    }

    /// The database every command uses (through DIAG_DB).
    pub fn db(&self) -> PathBuf {
        self.root().join("db").join("diag.db")
    }

    /// An environment variable every later command gets.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.extra_env.push((key.to_string(), value.to_string()));
    }

    /// Copies a repository file into the working directory and returns its new path.
    pub fn copy_fixture(&self, repo_path: &str, name: &str) -> PathBuf {
        let to = self.path(name);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).expect("fixture folder");
        }
        std::fs::copy(repo_file(repo_path), &to).expect("copy fixture");
        to
    }

    /// A `diag` command with a cleared environment: PATH, HOME, the XDG folders, DIAG_DB
    /// and whatever [`TestEnv::set_env`] added.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(cargo_bin!("diag"));
        self.hermetic(&mut cmd);
        cmd
    }

    /// Applies the hermetic environment to any command (used for spawned processes too).
    pub fn hermetic(&self, cmd: &mut Command) {
        let r = self.root();
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", r.join("home"))
            .env("XDG_CONFIG_HOME", r.join("config"))
            .env("XDG_DATA_HOME", r.join("data"))
            .env("XDG_CACHE_HOME", r.join("cache"))
            .env("XDG_STATE_HOME", r.join("state"))
            .env("DIAG_DB", self.db())
            .current_dir(self.work());
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
    }

    /// Runs `diag ARGS` to completion.
    #[track_caller]
    pub fn run(&self, args: &[&str]) -> Out {
        self.run_with(args, |_| {})
    }

    /// Runs `diag ARGS` after `adjust` changed the command (an extra variable, a removed
    /// one, stdin), killing it and failing the test after [`bounded::LIMIT`].
    #[track_caller]
    pub fn run_with(&self, args: &[&str], adjust: impl FnOnce(&mut Command)) -> Out {
        let mut cmd = self.command();
        cmd.args(args).stdin(Stdio::null());
        adjust(&mut cmd);
        let output = bounded::output(&mut cmd, bounded::LIMIT);
        Out {
            code: output.status.code(),
            stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
            stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
        }
    }

    /// Runs `diag ask --fixture FILE --json` and returns the parsed document.
    pub fn ask_fixture_json(&self, file: &Path, extra: &[&str]) -> Value {
        let file = file.display().to_string();
        let mut args = vec!["ask", "--fixture", file.as_str(), "--json"];
        args.extend_from_slice(extra);
        let out = self.run(&args);
        out.expect(0);
        out.json()
    }

    /// insta filters for this environment: temporary paths, run ids, session ids, times
    /// and durations.
    pub fn filters(&self) -> Vec<(String, String)> {
        let mut f = Vec::new();
        // The temp root may be reached through a symlink (macOS /var → /private/var).
        let mut roots = vec![self.root().to_path_buf()];
        if let Ok(c) = self.root().canonicalize() {
            roots.push(c);
        }
        for r in roots {
            f.push((
                regex::escape(&r.display().to_string()),
                "[TEMP]".to_string(),
            ));
        }
        f.extend(id_filters());
        f
    }
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

/// A test environment whose `diag.toml` points one model, `model`, at an OpenAI-compatible
/// server's `base_url` with its key in `key_var` (set to `key`), over the demo logs and
/// runbooks.
pub fn live_model_env(base_url: &str, model: &str, key_var: &str, key: &str) -> TestEnv {
    let mut env = TestEnv::new();
    env.set_env(key_var, key);
    std::fs::write(
        env.path("diag.toml"),
        format!(
            "[models.default]\nbase_url = {base_url:?}\nmodel = {model:?}\n\
             api_key_env = {key_var:?}\ntimeout_secs = 30\n\
             [tools.search_logs]\npaths = [{:?}]\n\
             [tools.search_runbooks]\npaths = [{:?}]\n",
            repo_file("fixtures/demo/logs").display().to_string(),
            repo_file("fixtures/demo/runbooks").display().to_string(),
        ),
    )
    .unwrap();
    env
}

/// Filters that do not depend on a test environment: ids, times and durations.
pub fn id_filters() -> Vec<(String, String)> {
    [
        (r"run-[0-9a-f]{20}", "[RUN]"),
        (r"ses-[0-9a-f]{20}", "[SESSION]"),
        (
            r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})",
            "[TIME]",
        ),
        // The header's duration and the tool-call lines' durations.
        (r"\b\d+ ms\b", "[DURATION]"),
        // The timeline's ms column: `  seq  node  att rnd  status  ms  detail`.
        (
            r"(?m)^(\s+\d+\s+[a-z_]+\s+\d+\s+\d+\s+[A-Z_]+\s+)\d+(\s)",
            "${1}[MS]${2}",
        ),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect()
}

/// Applies filters to a text the way insta does (for comparisons outside snapshots).
pub fn apply_filters(filters: &[(String, String)], text: &str) -> String {
    filters.iter().fold(text.to_string(), |t, (re, to)| {
        regex::Regex::new(re)
            .expect("filter regex")
            .replace_all(&t, to.as_str())
            .into_owned()
    })
}

/// Validates a JSON document against a schema file under `docs/schema/`, listing every error.
#[track_caller]
pub fn assert_schema(schema_file: &str, doc: &Value) {
    let path = repo_file("docs/schema").join(schema_file);
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{schema_file} is not a valid JSON Schema: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "document does not match {schema_file}:\n{}\n{}",
        errors.join("\n"),
        serde_json::to_string_pretty(doc).unwrap_or_default()
    );
}
