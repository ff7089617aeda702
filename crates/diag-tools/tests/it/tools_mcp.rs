//! The MCP client against the real reference servers (`@modelcontextprotocol/server-everything`
//! and `server-filesystem`), installed by `scripts/install-peers` under `$DIAG_PEERS_DIR`
//! (default `<repo>/.peers`). A missing server fails the test with the command to run: these
//! tests are never skipped silently.

use diag_testkit::peer_bin;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use diag_core::clock::{FixedClock, Timestamp};
use diag_core::tools::{Tool, ToolContext, ToolError};
use diag_tools::mcp::{McpServer, McpServerConfig, McpStartError, PASSED_ENV};
use serde_json::{json, Value};

/// Every wait in these tests is bounded by this, so a regression hangs no CI run.
const BOUND: Duration = Duration::from_secs(20);

fn everything_config() -> McpServerConfig {
    let mut config = McpServerConfig::new("everything", peer_bin("mcp-server-everything"));
    config.args = vec!["stdio".into()];
    config.startup_timeout = BOUND;
    config.call_timeout = BOUND;
    config
}

async fn everything() -> McpServer {
    McpServer::start(everything_config())
        .await
        .expect("server-everything starts")
}

/// A fresh directory of this test's own (its canonical path, and the directory, removed on
/// drop).
struct TempDir {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("diag-mcp-{tag}-"))
            .tempdir()
            .unwrap();
        // The filesystem server resolves symlinks in its allowed roots; so must we.
        Self {
            path: dir.path().canonicalize().unwrap(),
            _dir: dir,
        }
    }
}

fn tool(server: &McpServer, name: &str) -> Arc<dyn Tool> {
    server
        .tools()
        .into_iter()
        .find(|t| t.spec().name == name)
        .unwrap_or_else(|| panic!("no tool {name} in {:?}", server.tool_names()))
}

async fn call(tool: &dyn Tool, arguments: Value) -> Result<Value, ToolError> {
    let clock = FixedClock(Timestamp::from_unix_ms(0));
    let cx = ToolContext { clock: &clock };
    tokio::time::timeout(BOUND, tool.call(&arguments, &cx))
        .await
        .expect("every call ends within the bound")
}

/// Whether `pid` names a live process (a zombie awaiting its reaper counts as gone).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

async fn wait_gone(pid: u32) -> bool {
    let start = Instant::now();
    while start.elapsed() < BOUND {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// SIGKILL to the process group `pid` leads (an MCP server is started as a group leader).
fn kill_group_9(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", "--", &format!("-{pid}")])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn everything_lists_its_tools_under_prefixed_names() {
    let server = everything().await;
    assert!(
        ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
            .contains(&server.protocol_version()),
        "{}",
        server.protocol_version()
    );
    let names = server.tool_names();
    for remote in ["echo", "get-sum", "trigger-long-running-operation"] {
        let exposed = format!("everything__{remote}");
        assert!(
            names.contains(&(exposed.clone(), remote.to_string())),
            "{exposed} in {names:?}"
        );
    }
    for (exposed, _) in &names {
        assert!(exposed.len() <= 64, "{exposed}");
        assert!(
            exposed
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{exposed}"
        );
    }
    let echo = tool(&server, "everything__echo").spec();
    assert_eq!(echo.parameters["type"], "object");
    assert!(echo.parameters["properties"]["message"].is_object());
    assert!(!echo.description.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn everything_echo_sum_and_structured_content() {
    let server = everything().await;

    let out = call(
        &*tool(&server, "everything__echo"),
        json!({"message": "hi there"}),
    )
    .await;
    assert_eq!(
        out.unwrap(),
        json!({"content": [{"type": "text", "text": "Echo: hi there"}]})
    );

    let out = call(
        &*tool(&server, "everything__get-sum"),
        json!({"a": 2, "b": 40}),
    )
    .await
    .unwrap();
    let text = out["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("42"), "{out}");

    // A result with structuredContent is recorded as that object.
    let out = call(
        &*tool(&server, "everything__get-structured-content"),
        json!({"location": "New York"}),
    )
    .await
    .unwrap();
    assert!(out["temperature"].is_number(), "{out}");
    assert!(out.get("content").is_none(), "{out}");

    // Concurrent calls are matched to their own answers.
    let sum = tool(&server, "everything__get-sum");
    let echo = tool(&server, "everything__echo");
    let (a, b) = tokio::join!(
        call(&*sum, json!({"a": 1, "b": 1})),
        call(&*echo, json!({"message": "together"}))
    );
    assert!(a.unwrap()["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains('2'));
    assert_eq!(b.unwrap()["content"][0]["text"], "Echo: together");

    server.shutdown().await;
}

#[tokio::test]
async fn bad_arguments_and_failing_calls_are_errors() {
    let server = everything().await;
    let echo = tool(&server, "everything__echo");

    match call(&*echo, json!(["not", "an", "object"])).await {
        Err(ToolError::InvalidArguments(msg)) => assert!(msg.contains("object"), "{msg}"),
        other => panic!("{other:?}"),
    }
    // A missing required argument: the server answers isError or invalid params.
    match call(&*echo, json!({})).await {
        Err(ToolError::Failed(_) | ToolError::InvalidArguments(_)) => {}
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn an_unknown_tool_is_a_failed_call() {
    // The server answers a normal result with isError: true, not a JSON-RPC error.
    let server = everything().await;
    let unknown = tokio::time::timeout(BOUND, server.call("no-such-tool", &json!({})))
        .await
        .unwrap();
    match unknown {
        Err(ToolError::Failed(msg)) => assert!(msg.contains("no-such-tool"), "{msg}"),
        other => panic!("{other:?}"),
    }
    // The session is still usable afterwards.
    let out = call(
        &*tool(&server, "everything__echo"),
        json!({"message": "still"}),
    )
    .await;
    assert_eq!(out.unwrap()["content"][0]["text"], "Echo: still");
    server.shutdown().await;
}

#[tokio::test]
async fn filesystem_reads_a_file_and_lists_a_directory() {
    let dir = TempDir::new("fs");
    std::fs::write(
        dir.path.join("notes.txt"),
        "disk full on db-1\nsecond line\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path.join("sub")).unwrap();

    let mut config = McpServerConfig::new("fs", peer_bin("mcp-server-filesystem"));
    config.args = vec![dir.path.display().to_string()];
    config.startup_timeout = BOUND;
    config.call_timeout = BOUND;
    let server = McpServer::start(config)
        .await
        .expect("server-filesystem starts");
    let names = server.tool_names();
    assert!(names.contains(&("fs__read_text_file".into(), "read_text_file".into())));
    assert!(names.contains(&("fs__list_directory".into(), "list_directory".into())));

    let path = dir.path.join("notes.txt").display().to_string();
    let out = call(&*tool(&server, "fs__read_text_file"), json!({"path": path}))
        .await
        .unwrap();
    // The server sends structuredContent {"content": <text>} beside its text block.
    assert_eq!(out, json!({"content": "disk full on db-1\nsecond line\n"}));

    let dir_path = dir.path.display().to_string();
    let out = call(
        &*tool(&server, "fs__list_directory"),
        json!({"path": dir_path}),
    )
    .await
    .unwrap();
    let listing = out["content"].as_str().unwrap();
    assert!(listing.contains("[FILE] notes.txt"), "{listing}");
    assert!(listing.contains("[DIR] sub"), "{listing}");

    // Outside the allowed directory: the server's isError result, with its reason.
    match call(
        &*tool(&server, "fs__read_text_file"),
        json!({"path": "/etc/hostname"}),
    )
    .await
    {
        Err(ToolError::Failed(msg)) => assert!(msg.contains("denied"), "{msg}"),
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_server_killed_mid_call_is_unavailable_quickly() {
    // The server runs behind `tee`, which copies everything diag sends it into `sent` after
    // passing it on: the call is in flight once its request is in that file. The test waits
    // for that, not for an amount of time, then kills the whole process group (the shell,
    // `tee` and the server), as diag itself stops a server started through a wrapper.
    let dir = TempDir::new("killed");
    let sent = dir.path.join("sent.jsonl");
    let mut config = everything_config();
    config.command = "/bin/sh".into();
    config.args = vec![
        "-c".into(),
        r#"tee "$0" | exec "$1" stdio"#.into(),
        sent.display().to_string(),
        peer_bin("mcp-server-everything").display().to_string(),
    ];
    // Far longer than the kill takes: only the server's death may end the call.
    config.call_timeout = Duration::from_secs(120);
    let server = McpServer::start(config).await.unwrap();
    let pid = server.pid().unwrap();
    let slow = tool(&server, "everything__trigger-long-running-operation");

    let clock = FixedClock(Timestamp::from_unix_ms(0));
    let cx = ToolContext { clock: &clock };
    let arguments = json!({"duration": 60, "steps": 2});
    let pending = slow.call(&arguments, &cx);
    let killer = async {
        let deadline = Instant::now() + BOUND;
        while !std::fs::read_to_string(&sent)
            .unwrap_or_default()
            .contains("\"tools/call\"")
        {
            assert!(
                Instant::now() < deadline,
                "the call's request did not reach the server within {BOUND:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        kill_group_9(pid);
        Instant::now()
    };
    let (result, killed_at) = tokio::time::timeout(BOUND, async { tokio::join!(pending, killer) })
        .await
        .expect("the call ends once the server dies");
    let after_kill = killed_at.elapsed();
    match result {
        Err(ToolError::Unavailable(msg)) => assert!(msg.contains("everything"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert!(after_kill < Duration::from_secs(5), "{after_kill:?}");

    // Later calls fail the same way, at once.
    let echo = tool(&server, "everything__echo");
    assert!(matches!(
        call(&*echo, json!({"message": "anyone?"})).await,
        Err(ToolError::Unavailable(_))
    ));
    assert!(wait_gone(pid).await);
    drop(server);
}

#[tokio::test]
async fn a_server_that_does_not_answer_in_time_is_a_timeout() {
    let mut config = everything_config();
    config.call_timeout = Duration::from_millis(500);
    let server = McpServer::start(config).await.unwrap();
    let slow = tool(&server, "everything__trigger-long-running-operation");
    match call(&*slow, json!({"duration": 30, "steps": 3})).await {
        Err(ToolError::Timeout(ms)) => assert_eq!(ms, 500),
        other => panic!("{other:?}"),
    }
    // The session survives a timed-out call.
    let out = call(
        &*tool(&server, "everything__echo"),
        json!({"message": "after"}),
    )
    .await;
    assert_eq!(out.unwrap()["content"][0]["text"], "Echo: after");
    server.shutdown().await;
}

#[tokio::test]
async fn a_missing_command_is_a_start_error() {
    let config = McpServerConfig::new("ghost", "/nonexistent/diag-mcp-server");
    match McpServer::start(config).await {
        Err(e @ McpStartError::Spawn { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("ghost") && msg.contains("/nonexistent/diag-mcp-server"),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_invalid_server_name_is_a_start_error() {
    let config = McpServerConfig::new("bad name", "cat");
    assert!(matches!(
        McpServer::start(config).await,
        Err(McpStartError::InvalidConfig { .. })
    ));
}

#[tokio::test]
async fn a_server_that_never_answers_initialize_times_out_and_is_killed() {
    let dir = TempDir::new("mute");
    // `cat` reads the request and answers nothing a client accepts; `sleep` reads nothing.
    for (name, program) in [("cat", "cat"), ("sleep", "sleep 100")] {
        let pid_file = dir.path.join(name);
        let mut config = McpServerConfig::new("mute", "sh");
        config.args = vec![
            "-c".into(),
            format!("echo $$ > '{}'; exec {program}", pid_file.display()),
        ];
        config.startup_timeout = Duration::from_millis(700);
        let started = Instant::now();
        let result = tokio::time::timeout(BOUND, McpServer::start(config))
            .await
            .expect("start gives up on its own");
        match result {
            Err(McpStartError::Timeout {
                stage, timeout_ms, ..
            }) => {
                assert_eq!(stage, "initialize");
                assert_eq!(timeout_ms, 700);
            }
            other => panic!("{name}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(10));
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            wait_gone(pid).await,
            "{name}: pid {pid} outlived the failed start"
        );
    }
}

#[tokio::test]
async fn stray_lines_on_stdout_are_ignored() {
    // Servers that print a banner or a log line to stdout by mistake still work.
    let bin = peer_bin("mcp-server-everything");
    let mut config = McpServerConfig::new("noisy", "sh");
    config.args = vec![
        "-c".into(),
        format!(
            "echo 'starting up...'; echo '{{\"half\": '; exec '{}' stdio",
            bin.display()
        ),
    ];
    config.startup_timeout = BOUND;
    config.call_timeout = BOUND;
    let server = McpServer::start(config)
        .await
        .expect("starts despite the noise");
    let out = call(&*tool(&server, "noisy__echo"), json!({"message": "ok"})).await;
    assert_eq!(out.unwrap()["content"][0]["text"], "Echo: ok");
    server.shutdown().await;
}

/// A server written as a shell script, for what the reference servers never do. `reply LINE
/// RESULT` answers the request on LINE with RESULT.
fn scripted(name: &str, body: &str) -> McpServerConfig {
    let script = format!(
        r#"reply() {{ id=$(printf '%s' "$1" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p'); printf '{{"jsonrpc":"2.0","id":%s,"result":%s}}\n' "$id" "$2"; }}
read -r l; reply "$l" '{{"protocolVersion":"2025-11-25","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"s","version":"1"}}}}'
read -r l
{body}"#
    );
    let mut config = McpServerConfig::new(name, "sh");
    config.args = vec!["-c".into(), script];
    config.startup_timeout = BOUND;
    config.call_timeout = BOUND;
    config
}

#[tokio::test]
async fn tool_pages_are_followed_and_a_last_answer_before_exit_is_delivered() {
    let config = scripted(
        "paged",
        r#"read -r l; reply "$l" '{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"p2"}'
read -r l; case "$l" in *'"cursor":"p2"'*) ;; *) exit 9;; esac
reply "$l" '{"tools":[{"name":"b","description":"second page","inputSchema":{"type":"object"}}]}'
read -r l; reply "$l" '{"content":[{"type":"text","text":"last words"}]}'
exit 0"#,
    );
    let server = McpServer::start(config).await.expect("starts");
    assert_eq!(
        server.tool_names(),
        vec![
            ("paged__a".to_string(), "a".to_string()),
            ("paged__b".to_string(), "b".to_string())
        ]
    );
    assert_eq!(tool(&server, "paged__b").spec().description, "second page");
    let out = call(&*tool(&server, "paged__b"), json!({})).await;
    assert_eq!(out.unwrap()["content"][0]["text"], "last words");
    // It has exited since.
    assert!(matches!(
        call(&*tool(&server, "paged__a"), json!({})).await,
        Err(ToolError::Unavailable(_))
    ));
}

#[tokio::test]
async fn an_oversized_answer_is_an_error_not_a_hang() {
    // One JSON-RPC line longer than the SDK's 16 MiB bound.
    let mut config = scripted(
        "huge",
        r#"read -r l; reply "$l" '{"tools":[{"name":"big","inputSchema":{"type":"object"}}]}'
read -r l; id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"' "$id"
head -c 17000000 /dev/zero | tr '\0' a
printf '"}]}}\n'
cat >/dev/null"#,
    );
    config.call_timeout = Duration::from_secs(5);
    let server = McpServer::start(config).await.expect("starts");
    let out = call(&*tool(&server, "huge__big"), json!({})).await;
    assert!(
        matches!(out, Err(ToolError::Unavailable(_) | ToolError::Timeout(_))),
        "{:?}",
        out.map(|v| v.to_string().len())
    );
}

#[tokio::test]
async fn a_tool_listing_that_loops_is_a_start_error() {
    let config = scripted(
        "loop",
        r#"while read -r l; do reply "$l" '{"tools":[],"nextCursor":"again"}'; done"#,
    );
    match McpServer::start(config).await {
        Err(
            e @ McpStartError::Protocol {
                stage: "tools/list",
                ..
            },
        ) => {
            assert!(e.to_string().contains("again"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_server_that_exits_at_once_is_a_start_error() {
    let mut config = McpServerConfig::new("quitter", "sh");
    config.args = vec!["-c".into(), "echo 'cannot open config' >&2; exit 3".into()];
    config.startup_timeout = BOUND;
    match tokio::time::timeout(BOUND, McpServer::start(config))
        .await
        .unwrap()
    {
        Err(e @ McpStartError::Protocol { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("cannot open config"), "{msg}");
            assert!(msg.contains("exited"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_server_sees_only_the_configured_environment() {
    // Whatever else this test process has in its environment (an API key, in real use) must
    // not reach the server.
    let private: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| !PASSED_ENV.contains(&k.as_str()))
        .collect();
    assert!(
        !private.is_empty(),
        "the test process has only passed variables"
    );
    let mut config = everything_config();
    config
        .env
        .insert("DIAG_TEST_VISIBLE".into(), "shown".into());
    let server = McpServer::start(config).await.unwrap();
    let get_env = tool(&server, "everything__get-env");
    let out = call(&*get_env, json!({})).await.unwrap();
    let text = out["content"][0]["text"].as_str().unwrap();
    let seen: serde_json::Map<String, Value> = serde_json::from_str(text).unwrap();
    assert_eq!(seen["DIAG_TEST_VISIBLE"], "shown");
    assert!(seen.contains_key("PATH"), "{text}");
    for name in &private {
        assert!(!seen.contains_key(name), "{name} leaked to the server");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn dropping_the_server_and_its_tools_kills_the_process() {
    let server = everything().await;
    let pid = server.pid().unwrap();
    let tools = server.tools();
    assert!(alive(pid));

    drop(server);
    // The tools keep the session alive.
    let out = call(&*tools[0], json!({"message": "x"})).await;
    assert!(out.is_ok(), "{out:?}");
    assert!(alive(pid));

    drop(tools);
    assert!(wait_gone(pid).await, "pid {pid} outlived its client");
}

#[test]
fn dropping_after_the_runtime_is_gone_still_kills_the_process() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(everything());
    let pid = server.pid().unwrap();
    drop(runtime);
    drop(server);
    let start = Instant::now();
    while alive(pid) && start.elapsed() < BOUND {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(pid), "pid {pid} outlived its client");
}

/// The children of `pid` whose command name is `comm`.
fn children_named(pid: u32, comm: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let name = head.split_once('(').map(|(_, n)| n).unwrap_or_default();
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if name == comm && ppid == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// A server started through a wrapper script that also leaves a helper running (as `npx` and
/// friends do): stopping the server stops the helper too, whether the client is dropped or
/// the server is shut down.
#[tokio::test]
async fn a_wrapper_and_everything_it_started_are_stopped_with_the_server() {
    for shutdown in [false, true] {
        let mut config = everything_config();
        config.command = PathBuf::from("sh");
        config.args = vec![
            "-c".into(),
            r#"sleep 300 & "$0" stdio; exit $?"#.into(),
            peer_bin("mcp-server-everything").display().to_string(),
        ];
        let server = McpServer::start(config)
            .await
            .expect("the wrapped server starts");
        let wrapper = server.pid().unwrap();
        let helpers = children_named(wrapper, "sleep");
        assert_eq!(helpers.len(), 1, "the wrapper's helper: {helpers:?}");
        let helper = helpers[0];
        let out = call(
            &*tool(&server, "everything__echo"),
            json!({"message": "hi"}),
        )
        .await;
        assert!(out.is_ok(), "{out:?}");

        if shutdown {
            let _ = tokio::time::timeout(BOUND, server.shutdown())
                .await
                .expect("shutdown is bounded");
        } else {
            drop(server);
        }
        assert!(
            wait_gone(wrapper).await,
            "the wrapper {wrapper} outlived its client"
        );
        assert!(
            wait_gone(helper).await,
            "the wrapper's helper {helper} outlived the server (shutdown: {shutdown})"
        );
    }
}

#[tokio::test]
async fn shutdown_lets_the_server_exit_cleanly() {
    let server = everything().await;
    let pid = server.pid().unwrap();
    let tools = server.tools();
    let status = tokio::time::timeout(BOUND, server.shutdown())
        .await
        .expect("shutdown is bounded");
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(!alive(pid));
    // Tools held past the shutdown answer Unavailable instead of hanging.
    assert!(matches!(
        call(&*tools[0], json!({"message": "late"})).await,
        Err(ToolError::Unavailable(_))
    ));
}
