//! MCP tools: a client for Model Context Protocol servers started over stdio, exposing each
//! tool a server lists as a [`Tool`] the Executor may call.
//!
//! # Why the official SDK, and which part of it
//!
//! The wire protocol is handled by `rmcp`, the official Rust SDK, with only its `client` and
//! `transport-async-rw` features. It builds with nothing but the Rust toolchain, negotiates the
//! protocol version with `initialize` + `notifications/initialized`, matches responses to
//! requests by id (the real servers answer out of order and interleave notifications, even
//! before the `initialize` result), bounds the length of one message (16 MiB: a longer answer
//! is dropped, and its call ends as a timeout), sends `notifications/cancelled` when a call is
//! abandoned, and fails every pending request with "transport closed" as soon as the server's
//! stdout ends. Writing that by hand would repeat
//! the SDK, and would have to follow each new protocol revision alone.
//!
//! The child process is **not** handed to the SDK (its `transport-child-process` feature):
//! this module spawns it itself and owns it, because
//! - the SDK's own child wrapper kills from its `Drop` by spawning a task, which needs a live
//!   runtime; ours sets `kill_on_drop`, so the child dies even when the runtime is already gone;
//! - a watcher task sees the process exit and closes the session shortly after, so a call never
//!   waits for an end-of-file that a grandchild still holding stdout would delay (`npx`
//!   wrappers);
//! - the server runs in a process group of its own, killed whenever the server is stopped or
//!   ends, so a wrapper's helpers never outlive it and a terminal's Ctrl-C reaches `diag` alone;
//! - the environment is cleared before the spawn (see below), and stderr is drained into a
//!   small buffer instead of being inherited, so a chatty server never writes over `diag`'s
//!   own output and never blocks on a full pipe.
//!
//! The price is `rust-version = 1.88` (the SDK's minimum) and the SDK's dependencies.
//!
//! # Names, outputs and errors
//!
//! - A tool `read_text_file` of the server `fs` is offered to the model as `fs__read_text_file`:
//!   model APIs only allow `^[a-zA-Z0-9_-]{1,64}$`, so the server name is joined with `__`,
//!   other characters become `_`, the result is cut to 64 characters, and a name already taken
//!   gets a `_2`, `_3`, ... suffix. The call uses the tool's original name.
//! - The output of a successful call is the result's `structuredContent` when the server sent
//!   one (it is the tool's declared, machine-readable result), else `{"content": [...]}` with the
//!   content blocks as the server sent them (`text`, `image`, `resource`, ...).
//! - A result with `isError: true` (an unknown tool, a failing tool) is [`ToolError::Failed`]
//!   with the text of its content, cut to [`MAX_ERROR_TEXT`] bytes. A JSON-RPC error answer is
//!   `Failed` too, or [`ToolError::InvalidArguments`] for "invalid params".
//! - A server that exits or closes its connection, before or during a call, is
//!   [`ToolError::Unavailable`]; one that does not answer within `call_timeout` is
//!   [`ToolError::Timeout`] (and is sent `notifications/cancelled`). Every wait is bounded.
//! - Error texts are recorded as tool outputs, so they never include the server's stderr (which
//!   may print anything, secrets included); only a failed start, reported to the operator, does.
//!
//! # Environment
//!
//! The server gets a cleared environment plus [`PASSED_ENV`] (what a program needs to run) and
//! the variables its configuration names: `diag`'s own secrets, such as the model API key, are
//! never handed to a third-party server by accident.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ErrorCode,
    Implementation, PaginatedRequestParams, ProtocolVersion,
};
use rmcp::service::{Peer, RoleClient, RunningService, RunningServiceCancellationToken};
use rmcp::{ServiceError, ServiceExt};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use diag_core::tools::{Tool, ToolContext, ToolError, ToolFuture, ToolSpec};

/// Environment variables passed from `diag` to every server; everything else must be named in
/// the server's configuration.
pub const PASSED_ENV: &[&str] = diag_core::env_vars::EnvVars::MCP_PASSED;

/// The longest error text taken from a tool result, in bytes.
pub const MAX_ERROR_TEXT: usize = 2048;

/// The longest tool name model APIs accept.
const MAX_TOOL_NAME: usize = 64;
/// Joins the server name and the tool name in the name offered to the model.
const NAME_SEPARATOR: &str = "__";
/// How much of the server's stderr is kept for a start error.
const STDERR_TAIL: usize = 2048;
/// How long a failed start waits for the process to exit and for its last stderr.
const STDERR_WAIT: Duration = Duration::from_millis(500);
/// A server that pages its tool list further than this is looping.
const MAX_TOOL_PAGES: usize = 100;
/// How long pending calls may still be answered from the pipe after the server exited.
const READ_AFTER_EXIT: Duration = Duration::from_millis(300);
/// How long [`McpServer::shutdown`] waits for the server to exit after its stdin is closed,
/// and again after it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// How to start one MCP server and how long to wait for it. Its `Debug` shows the names of
/// the `env` variables, never their values (they are often tokens).
#[derive(Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The server's name: the prefix of its tools' names, `[a-zA-Z0-9_-]`, at most 32 characters.
    pub name: String,
    /// The program; a bare name is looked up in `PATH`.
    pub command: PathBuf,
    pub args: Vec<String>,
    /// Variables set for the server, on top of [`PASSED_ENV`].
    pub env: BTreeMap<String, String>,
    /// The working directory; `diag`'s own when absent.
    pub cwd: Option<PathBuf>,
    /// Bounds the spawn, `initialize` and the whole tool listing together.
    pub startup_timeout: Duration,
    /// Bounds one `tools/call`.
    pub call_timeout: Duration,
}

impl McpServerConfig {
    /// `startup_timeout_secs` of `[[mcp]]` left out.
    pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
    /// `call_timeout_secs` of `[[mcp]]` left out: a tool call's default time limit.
    pub const DEFAULT_CALL_TIMEOUT: Duration =
        Duration::from_secs(diag_core::limits::Limits::DEFAULT.tool_timeout_secs);

    /// A configuration with no arguments, no extra environment and the default timeouts.
    pub fn new(name: impl Into<String>, command: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            command: command.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            startup_timeout: Self::DEFAULT_STARTUP_TIMEOUT,
            call_timeout: Self::DEFAULT_CALL_TIMEOUT,
        }
    }
}

impl std::fmt::Debug for McpServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerConfig")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("startup_timeout", &self.startup_timeout)
            .field("call_timeout", &self.call_timeout)
            .finish()
    }
}

/// Why an MCP server could not be started. Shown to the operator, once.
#[derive(Debug, thiserror::Error)]
pub enum McpStartError {
    #[error("MCP server `{server}`: invalid configuration: {reason}")]
    InvalidConfig { server: String, reason: String },
    #[error("MCP server `{server}`: cannot run `{command}`: {source}")]
    Spawn {
        server: String,
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("MCP server `{server}`: no answer to {stage} within {timeout_ms} ms{stderr}")]
    Timeout {
        server: String,
        stage: &'static str,
        timeout_ms: u64,
        /// The end of the server's stderr, as `" (stderr: ...)"`, or empty.
        stderr: String,
    },
    #[error("MCP server `{server}`: {stage} failed: {reason}{stderr}")]
    Protocol {
        server: String,
        stage: &'static str,
        reason: String,
        /// The end of the server's stderr, as `" (stderr: ...)"`, or empty.
        stderr: String,
    },
}

/// A running MCP server and the tools it offers.
///
/// The server process lives as long as this value or any of its tools, whichever is dropped
/// last; dropping the last one kills it. [`McpServer::shutdown`] stops it politely instead.
pub struct McpServer {
    connection: Arc<Connection>,
    tools: Vec<Arc<McpTool>>,
    protocol_version: String,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.connection.server)
            .field("pid", &self.connection.pid)
            .field("protocol_version", &self.protocol_version)
            .field("tools", &self.tools.len())
            .finish()
    }
}

impl McpServer {
    /// Spawns the server, initializes the session and lists its tools, all within
    /// `config.startup_timeout`. On any failure the process is killed before returning.
    pub async fn start(config: McpServerConfig) -> Result<Self, McpStartError> {
        check_server_name(&config.name)?;
        let server = config.name.clone();

        let mut command = tokio::process::Command::new(&config.command);
        command
            .args(&config.args)
            .env_clear()
            .envs(
                PASSED_ENV
                    .iter()
                    .filter_map(|k| Some((*k, std::env::var_os(k)?))),
            )
            .envs(&config.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // The last line of defence: dropping the `Child` (even in a task dropped by a
            // runtime that is shutting down) kills the process.
            .kill_on_drop(true);
        // Its own process group, so that a server started through a wrapper (`npx`, a shell
        // script, `uvx`) is stopped with everything the wrapper started, and a Ctrl-C at the
        // terminal reaches `diag` alone, which then stops its servers itself.
        #[cfg(unix)]
        command.process_group(0);
        if let Some(cwd) = &config.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn().map_err(|source| McpStartError::Spawn {
            server: server.clone(),
            command: config.command.display().to_string(),
            source,
        })?;
        let pid = child.id();
        // Dropped on every early return below, and by the process watcher after the server
        // ended: either way the server's whole group is killed.
        let group = ProcessGroup::of(pid);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            // Unreachable with piped stdio; the child is killed as it is dropped.
            return Err(McpStartError::Protocol {
                server,
                stage: "spawn",
                reason: "the process has no stdio pipes".into(),
                stderr: String::new(),
            });
        };
        let mut stderr = StderrTail::drain(stderr);

        let deadline = tokio::time::Instant::now() + config.startup_timeout;
        let timeout_ms = diag_core::clock::millis(config.startup_timeout);

        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("diag", env!("CARGO_PKG_VERSION")),
        )
        // Pinned rather than the SDK's default, so that an SDK update cannot move every
        // server to a revision they do not speak yet.
        .with_protocol_version(ProtocolVersion::V_2025_11_25);
        // On a timeout or an error the child is still owned here and is killed on return.
        let running = match tokio::time::timeout_at(deadline, client.serve((stdout, stdin))).await {
            Ok(Ok(running)) => running,
            Ok(Err(e)) => {
                // Most often the process died (a bad argument, a missing file): say so rather
                // than the transport's "broken pipe".
                let reason = match tokio::time::timeout(STDERR_WAIT, child.wait()).await {
                    Ok(Ok(status)) => format!("the server exited ({status}) before answering"),
                    _ => bounded(&e.to_string(), 500),
                };
                let _ = child.start_kill();
                return Err(McpStartError::Protocol {
                    server,
                    stage: "initialize",
                    reason,
                    stderr: stderr.finish().await,
                });
            }
            Err(_) => {
                let _ = child.start_kill();
                let _ = tokio::time::timeout(STDERR_WAIT, child.wait()).await;
                return Err(McpStartError::Timeout {
                    server,
                    stage: "initialize",
                    timeout_ms,
                    stderr: stderr.finish().await,
                });
            }
        };
        let peer = running.peer().clone();
        let (protocol_version, has_tools) = match peer.peer_info() {
            Some(info) => (
                info.protocol_version.to_string(),
                info.capabilities.tools.is_some(),
            ),
            None => (String::new(), true),
        };

        let kill = CancellationToken::new();
        let (process_tx, process_rx) = watch::channel(Process::Running);
        tokio::spawn(watch_process(
            child,
            group,
            kill.clone(),
            running.cancellation_token(),
            process_tx,
        ));
        let connection = Arc::new(Connection {
            server: server.clone(),
            pid,
            call_timeout: config.call_timeout,
            peer,
            service: Mutex::new(Some(running)),
            kill,
            process: process_rx,
        });

        // From here on, dropping `connection` on an early return kills the process.
        let listed = if has_tools {
            match tokio::time::timeout_at(deadline, list_all_tools(&connection.peer)).await {
                Ok(Ok(tools)) => tools,
                Ok(Err(reason)) => {
                    return Err(McpStartError::Protocol {
                        server,
                        stage: "tools/list",
                        reason,
                        stderr: stderr.so_far(),
                    });
                }
                Err(_) => {
                    return Err(McpStartError::Timeout {
                        server,
                        stage: "tools/list",
                        timeout_ms,
                        stderr: stderr.so_far(),
                    });
                }
            }
        } else {
            Vec::new()
        };

        tracing::info!(
            server = %server,
            pid = pid.unwrap_or(0),
            protocol = %protocol_version,
            tools = listed.len(),
            "MCP server started"
        );
        let mut taken = HashSet::new();
        let tools = listed
            .into_iter()
            .map(|tool| {
                let name = exposed_tool_name(&server, &tool.name, &taken);
                taken.insert(name.clone());
                let description = tool
                    .description
                    .as_deref()
                    .or(tool.title.as_deref())
                    .unwrap_or_default()
                    .to_string();
                Arc::new(McpTool {
                    spec: ToolSpec {
                        name,
                        description,
                        parameters: Value::Object((*tool.input_schema).clone()),
                    },
                    remote_name: tool.name.to_string(),
                    connection: Arc::clone(&connection),
                })
            })
            .collect();

        Ok(Self {
            connection,
            tools,
            protocol_version,
        })
    }

    /// The server's name from its configuration.
    pub fn name(&self) -> &str {
        &self.connection.server
    }

    /// The server process's id, as spawned (it may have exited since).
    pub fn pid(&self) -> Option<u32> {
        self.connection.pid
    }

    /// The protocol version the server agreed to, such as `2025-11-25`.
    pub fn protocol_version(&self) -> &str {
        &self.protocol_version
    }

    /// The server's tools, named for the model (`<server>__<tool>`), in the server's order.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools
            .iter()
            .map(|t| Arc::clone(t) as Arc<dyn Tool>)
            .collect()
    }

    /// Each tool's name as offered to the model, with its name on the server.
    pub fn tool_names(&self) -> Vec<(String, String)> {
        self.tools
            .iter()
            .map(|t| (t.spec.name.clone(), t.remote_name.clone()))
            .collect()
    }

    /// Calls a tool by its name on the server, listed or not (a server may add tools after
    /// the listing). Same outputs and errors as the [`Tool`]s from [`McpServer::tools`].
    pub async fn call(&self, tool: &str, arguments: &Value) -> Result<Value, ToolError> {
        self.connection.call_tool(tool, arguments).await
    }

    /// Stops the server: closes its stdin, waits briefly for it to exit, kills it if it does
    /// not. Returns how it ended, if that could be seen. Tools still held elsewhere answer
    /// `Unavailable` afterwards.
    pub async fn shutdown(self) -> Option<ExitStatus> {
        self.connection.shutdown().await
    }
}

/// One session with a server, shared by its tools.
struct Connection {
    server: String,
    pid: Option<u32>,
    call_timeout: Duration,
    peer: Peer<RoleClient>,
    /// The session; taken by `shutdown`. Dropping it closes the session, and so the server's
    /// stdin, in the background.
    service: Mutex<Option<RunningService<RoleClient, ClientConfig>>>,
    /// Tells the process watcher to kill the server.
    kill: CancellationToken,
    /// Whether the server process still runs.
    process: watch::Receiver<Process>,
}

/// The server process as its watcher last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Process {
    Running,
    /// Ended; the status is missing when waiting for it failed.
    Ended(Option<ExitStatus>),
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Synchronous and runtime-free; the watcher kills, or `kill_on_drop` does if the
        // watcher itself is gone.
        self.kill.cancel();
    }
}

impl Connection {
    async fn call_tool(&self, tool: &str, arguments: &Value) -> Result<Value, ToolError> {
        let arguments = match arguments {
            Value::Object(map) => map.clone(),
            Value::Null => serde_json::Map::new(),
            other => {
                return Err(ToolError::InvalidArguments(format!(
                    "expected a JSON object, got {}",
                    json_kind(other)
                )))
            }
        };
        if *self.process.borrow() != Process::Running || self.kill.is_cancelled() {
            return Err(self.unavailable());
        }
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        // Dropping the call on timeout makes the SDK send `notifications/cancelled`.
        match tokio::time::timeout(self.call_timeout, self.peer.call_tool(params)).await {
            Err(_) => Err(ToolError::Timeout(diag_core::clock::millis(
                self.call_timeout,
            ))),
            Ok(Ok(result)) => tool_output(result),
            Ok(Err(e)) => Err(self.service_error(e)),
        }
    }

    fn service_error(&self, e: ServiceError) -> ToolError {
        match e {
            ServiceError::TransportClosed
            | ServiceError::TransportSend(_)
            | ServiceError::Cancelled { .. } => self.unavailable(),
            ServiceError::Timeout { .. } => {
                ToolError::Timeout(diag_core::clock::millis(self.call_timeout))
            }
            ServiceError::McpError(e) if e.code == ErrorCode::INVALID_PARAMS => {
                ToolError::InvalidArguments(bounded(&e.message, MAX_ERROR_TEXT))
            }
            ServiceError::McpError(e) => ToolError::Failed(format!(
                "MCP server `{}` answered error {}: {}",
                self.server,
                e.code.0,
                bounded(&e.message, MAX_ERROR_TEXT)
            )),
            other => ToolError::Failed(format!(
                "MCP server `{}`: {}",
                self.server,
                bounded(&other.to_string(), MAX_ERROR_TEXT)
            )),
        }
    }

    fn unavailable(&self) -> ToolError {
        let how = match *self.process.borrow() {
            Process::Ended(Some(status)) => format!("has exited ({status})"),
            Process::Ended(None) => "has exited".to_string(),
            Process::Running if self.kill.is_cancelled() => "was shut down".to_string(),
            Process::Running => "closed its connection".to_string(),
        };
        ToolError::Unavailable(format!("MCP server `{}` {how}", self.server))
    }

    async fn shutdown(&self) -> Option<ExitStatus> {
        let service = self.service.lock().ok().and_then(|mut s| s.take());
        if let Some(service) = service {
            // Ends the session task, which drops the server's stdin: a well-behaved server
            // answers what is pending and exits 0.
            let _ = tokio::time::timeout(EXIT_GRACE, service.cancel()).await;
        }
        if let Some(status) = self.wait_ended(EXIT_GRACE).await {
            return status;
        }
        self.kill.cancel();
        self.wait_ended(EXIT_GRACE).await.flatten()
    }

    /// Waits at most `limit` for the process to end; `None` if it still runs.
    async fn wait_ended(&self, limit: Duration) -> Option<Option<ExitStatus>> {
        let mut process = self.process.clone();
        let ended = tokio::time::timeout(limit, process.wait_for(|p| *p != Process::Running));
        let seen = match ended.await {
            Ok(Ok(p)) => *p,
            // The watcher is gone without a word: the process was dropped, so killed.
            Ok(Err(_)) => Process::Ended(None),
            Err(_) => Process::Running,
        };
        match seen {
            Process::Ended(status) => Some(status),
            Process::Running => None,
        }
    }
}

/// One tool of one server, as the Executor sees it.
struct McpTool {
    spec: ToolSpec,
    remote_name: String,
    connection: Arc<Connection>,
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call<'a>(&'a self, arguments: &'a Value, _cx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(self.connection.call_tool(&self.remote_name, arguments))
    }
}

/// Owns the server process until it exits or is told to kill it, and then closes the session
/// so that pending calls fail soon instead of waiting for an end-of-file that a grandchild
/// holding stdout may never give.
async fn watch_process(
    mut child: tokio::process::Child,
    group: ProcessGroup,
    kill: CancellationToken,
    session: RunningServiceCancellationToken,
    process: watch::Sender<Process>,
) {
    let status = tokio::select! {
        status = child.wait() => status.ok(),
        () = kill.cancelled() => {
            group.kill();
            let _ = child.start_kill();
            child.wait().await.ok()
        }
    };
    // Whatever the server left running in its group goes with it, at once (the group id is
    // only ours while a member of it lives).
    drop(group);
    match status {
        Some(status) => tracing::debug!(%status, "MCP server ended"),
        None => tracing::debug!("MCP server ended (its status could not be read)"),
    }
    let _ = process.send(Process::Ended(status));
    // Answers the server wrote just before exiting may still sit in the pipe: give the reader
    // a moment to deliver them (it ends the session itself at end-of-file).
    tokio::time::sleep(READ_AFTER_EXIT).await;
    session.cancel();
}

/// The process group of a server `diag` spawned (its id is the server's pid). Killing it
/// stops the server and every process it started that stayed in its group; dropping it kills
/// it.
struct ProcessGroup(Option<u32>);

impl ProcessGroup {
    fn of(pid: Option<u32>) -> Self {
        ProcessGroup(pid)
    }

    #[cfg(unix)]
    fn kill(&self) {
        let Some(pgid) = self.0.and_then(|p| libc::pid_t::try_from(p).ok()) else {
            return;
        };
        if pgid > 1 {
            // SAFETY: kill(2) with a negative pid signals that process group; it touches no
            // memory of ours. A group that is already gone gives ESRCH, which is fine.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }

    #[cfg(not(unix))]
    fn kill(&self) {}
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The end of the server's stderr, for start errors. Reading it all the time also keeps a
/// chatty server from blocking on a full pipe.
struct StderrTail {
    tail: Arc<Mutex<Vec<u8>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl StderrTail {
    fn drain(stderr: tokio::process::ChildStderr) -> Self {
        let tail = Arc::new(Mutex::new(Vec::new()));
        let reader = tokio::spawn(drain_stderr(stderr, Arc::clone(&tail)));
        Self { tail, reader }
    }

    /// What the server wrote until now, as `" (stderr: ...)"`, or empty.
    fn so_far(&self) -> String {
        stderr_suffix(&self.tail)
    }

    /// What the server wrote before it exited, waiting briefly for the pipe to be read to its
    /// end.
    async fn finish(&mut self) -> String {
        let _ = tokio::time::timeout(STDERR_WAIT, &mut self.reader).await;
        self.so_far()
    }
}

async fn drain_stderr(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if let Ok(mut tail) = tail.lock() {
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > STDERR_TAIL {
                let excess = tail.len() - STDERR_TAIL;
                tail.drain(..excess);
            }
        }
    }
}

fn stderr_suffix(tail: &Arc<Mutex<Vec<u8>>>) -> String {
    let text = tail
        .lock()
        .map(|t| String::from_utf8_lossy(&t).into_owned())
        .unwrap_or_default();
    let line = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    if line.is_empty() {
        String::new()
    } else {
        format!(" (stderr: {})", bounded_tail(&line, 500))
    }
}

/// Lists every page of `tools/list`, refusing a cursor that repeats.
async fn list_all_tools(peer: &Peer<RoleClient>) -> Result<Vec<rmcp::model::Tool>, String> {
    let mut tools = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor = None;
    for _ in 0..MAX_TOOL_PAGES {
        let page = peer
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .map_err(|e| bounded(&e.to_string(), 500))?;
        tools.extend(page.tools);
        match page.next_cursor {
            None => return Ok(tools),
            Some(next) if !seen.insert(next.clone()) => {
                return Err(format!(
                    "the cursor `{}` came back again",
                    bounded(&next, 80)
                ));
            }
            Some(next) => cursor = Some(next),
        }
    }
    Err(format!("more than {MAX_TOOL_PAGES} pages of tools"))
}

/// Turns a `tools/call` result into the recorded output (see the module doc for the shape).
fn tool_output(result: CallToolResult) -> Result<Value, ToolError> {
    if result.is_error == Some(true) {
        let text = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect::<Vec<_>>()
            .join("\n");
        let text = if text.trim().is_empty() {
            "the tool reported an error".to_string()
        } else {
            bounded(text.trim(), MAX_ERROR_TEXT)
        };
        return Err(ToolError::Failed(text));
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    let content = serde_json::to_value(&result.content)
        .map_err(|e| ToolError::Failed(format!("unreadable tool result: {e}")))?;
    Ok(serde_json::json!({ "content": content }))
}

fn check_server_name(name: &str) -> Result<(), McpStartError> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(McpStartError::InvalidConfig {
            server: bounded(name, 64),
            reason: "a server name is 1 to 32 characters of a-z, A-Z, 0-9, `_` and `-`".into(),
        })
    }
}

/// The name a tool is offered under: `<server>__<tool>`, restricted to what model APIs accept,
/// unique among `taken`.
fn exposed_tool_name(server: &str, tool: &str, taken: &HashSet<String>) -> String {
    let mut base: String = format!("{server}{NAME_SEPARATOR}{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    base.truncate(MAX_TOOL_NAME);
    if !taken.contains(&base) {
        return base;
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            let mut name = base.clone();
            name.truncate(MAX_TOOL_NAME - suffix.len());
            name + &suffix
        })
        .find(|name| !taken.contains(name))
        .unwrap_or(base)
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The start of `text`, at most `max` bytes on a character boundary, marked when cut.
fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    format!(
        "{}… (truncated)",
        diag_core::text::prefix_at_boundary(text, max)
    )
}

/// The end of `text`, at most `max` bytes on a character boundary, marked when cut.
fn bounded_tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_names_fit_model_apis_and_stay_unique() {
        let none = HashSet::new();
        let cases = [
            ("fs", "read_text_file", "fs__read_text_file"),
            ("everything", "get-sum", "everything__get-sum"),
            ("gh", "repo.list files", "gh__repo_list_files"),
            ("s", "ünïcode", "s___n_code"),
        ];
        for (server, tool, want) in cases {
            assert_eq!(
                exposed_tool_name(server, tool, &none),
                want,
                "{server} {tool}"
            );
        }

        let long = "x".repeat(100);
        let name = exposed_tool_name("srv", &long, &none);
        assert_eq!(name.len(), MAX_TOOL_NAME);

        let mut taken = HashSet::new();
        taken.insert(name.clone());
        let second = exposed_tool_name("srv", &long, &taken);
        assert_eq!(second.len(), MAX_TOOL_NAME);
        assert!(second.ends_with("_2"), "{second}");
        taken.insert(second);
        assert!(exposed_tool_name("srv", &long, &taken).ends_with("_3"));
    }

    #[test]
    fn server_names_are_checked() {
        for good in ["fs", "my-server_2", &"a".repeat(32)] {
            assert!(check_server_name(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a.b", "a__b\n", &"a".repeat(33)] {
            assert!(check_server_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn results_become_outputs_or_errors() {
        let parse = |v: Value| serde_json::from_value::<CallToolResult>(v).unwrap();

        let plain = parse(serde_json::json!({"content": [{"type": "text", "text": "Echo: hi"}]}));
        assert_eq!(
            tool_output(plain).unwrap(),
            serde_json::json!({"content": [{"type": "text", "text": "Echo: hi"}]})
        );

        let structured = parse(serde_json::json!({
            "content": [{"type": "text", "text": "{\"sum\":3}"}],
            "structuredContent": {"sum": 3}
        }));
        assert_eq!(
            tool_output(structured).unwrap(),
            serde_json::json!({"sum": 3})
        );

        let failed = parse(serde_json::json!({
            "content": [{"type": "text", "text": "Tool nope not found"}],
            "isError": true
        }));
        assert_eq!(
            tool_output(failed),
            Err(ToolError::Failed("Tool nope not found".into()))
        );

        let silent = parse(serde_json::json!({"content": [], "isError": true}));
        assert_eq!(
            tool_output(silent),
            Err(ToolError::Failed("the tool reported an error".into()))
        );

        let huge = parse(serde_json::json!({
            "content": [{"type": "text", "text": "é".repeat(5000)}],
            "isError": true
        }));
        match tool_output(huge) {
            Err(ToolError::Failed(text)) => {
                assert!(text.len() <= MAX_ERROR_TEXT + 20);
                assert!(text.ends_with("(truncated)"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn config_debug_hides_env_values() {
        let mut config = McpServerConfig::new("gh", "github-mcp");
        config
            .env
            .insert("GITHUB_TOKEN".into(), "ghp_secret".into());
        let shown = format!("{config:?}");
        assert!(shown.contains("GITHUB_TOKEN"), "{shown}");
        assert!(!shown.contains("ghp_secret"), "{shown}");
    }

    #[test]
    fn bounded_texts_cut_on_char_boundaries() {
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("aé", 2), "a… (truncated)");
        assert_eq!(bounded_tail("éa", 2), "…a");
        assert_eq!(bounded_tail("abc", 5), "abc");
    }
}
