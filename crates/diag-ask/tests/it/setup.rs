//! Building a run's environment from a configuration: built-in tools per configured source,
//! MCP servers' tools offered beside them, one model per agent, and clear errors.

use diag_testkit::peers_dir;
use std::sync::Arc;

use diag_ask::config::Config;
use diag_ask::setup::{builtin_registry, live, models, SetupError};
use diag_core::agent::runtime::ToolRunner;
use diag_core::clock::{FixedClock, Timestamp};
use diag_core::protocol::InvocationStatus;
use serde_json::json;

fn clock() -> Arc<FixedClock> {
    Arc::new(FixedClock(
        Timestamp::parse_rfc3339("2026-11-30T14:10:00Z").unwrap(),
    ))
}

#[test]
fn only_configured_builtin_tools_are_offered_and_current_time_always() {
    let names = |toml: &str| {
        let config = Config::parse(toml, "t.toml").unwrap();
        let mut n: Vec<String> = builtin_registry(&config)
            .unwrap()
            .specs()
            .into_iter()
            .map(|s| s.name)
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(""), ["current_time"]);
    assert_eq!(
        names("[tools.search_logs]\npaths = [\"/tmp\"]\n[tools.query_metrics]\nbase_url = \"http://127.0.0.1:9\"\n"),
        ["current_time", "query_metrics", "search_logs"]
    );
}

#[tokio::test]
async fn mcp_servers_tools_are_offered_and_callable_beside_the_builtins() {
    let bin = peers_dir().join("npm/node_modules/.bin/mcp-server-everything");
    assert!(
        bin.exists(),
        "run scripts/install-peers: {} is missing",
        bin.display()
    );
    let toml = format!(
        "[models.m]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\
         [[mcp]]\nname = \"everything\"\ncommand = {:?}\nargs = [\"stdio\"]\n",
        bin.display().to_string()
    );
    let config = Config::parse(&toml, "t.toml").unwrap();
    let env = live(&config, clock()).await.unwrap();
    let names: Vec<String> = env.tools.catalog().into_iter().map(|s| s.name).collect();
    assert!(names.contains(&"current_time".to_string()), "{names:?}");
    assert!(names.contains(&"everything__echo".to_string()), "{names:?}");
    let result = env
        .tools
        .run("everything__echo", &json!({"message": "hello from diag"}))
        .await;
    assert_eq!(result.status, InvocationStatus::Ok, "{:?}", result.output);
    assert!(result.output.to_string().contains("hello from diag"));
    let unknown = env.tools.run("nope", &json!({})).await;
    assert_eq!(unknown.status, InvocationStatus::Blocked);
    env.shutdown().await;
}

#[tokio::test]
async fn an_mcp_server_that_cannot_start_names_itself() {
    let config = Config::parse(
        "[models.m]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\
         [[mcp]]\nname = \"ghost\"\ncommand = \"/nonexistent/diag-mcp-server\"\n",
        "t.toml",
    )
    .unwrap();
    match live(&config, clock()).await {
        Err(e @ SetupError::Mcp { .. }) => {
            let SetupError::Mcp { name, key, .. } = &e else {
                unreachable!()
            };
            assert_eq!(name, "ghost");
            assert_eq!(key, "mcp[0].command");
            let text = e.to_string();
            assert!(
                text.starts_with(
                    "key `mcp[0].command`: MCP server `ghost`: cannot run \
                     `/nonexistent/diag-mcp-server`: "
                ),
                "{text}"
            );
        }
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a missing MCP server started"),
    }
}

#[test]
fn model_errors_name_the_model_and_the_missing_key_variable() {
    let none = Config::parse("", "t.toml").unwrap();
    assert!(matches!(models(&none), Err(SetupError::NoModel)));
    let var = "DIAG_TEST_SETUP_KEY_THAT_IS_NEVER_SET";
    let config = Config::parse(
        &format!("[models.gw]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"{var}\"\n"),
        "t.toml",
    )
    .unwrap();
    let e = models(&config)
        .err()
        .expect("missing key is an error")
        .to_string();
    assert!(e.contains("gw") && e.contains(var), "{e}");
    assert!(e.starts_with("key `models.gw.api_key_env`: "), "{e}");
}
