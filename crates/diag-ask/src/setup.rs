//! Turns a validated [`Config`] into the live pieces a run needs: one chat model per agent,
//! the tool registry with the built-in tools and the MCP servers' tools, and the limits. The
//! MCP server processes live as long as the returned [`LiveEnvironment`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::config::{Config, ModelConfig};
use diag_core::agent::runtime::{
    AgentLimits, AgentModels, ToolResult, ToolResultFuture, ToolRunner,
};
use diag_core::agent::AgentRole;
use diag_core::clock::Clock;
use diag_core::model::ChatModel;
use diag_core::tools::registry::{ToolLimits, ToolRegistry};
use diag_core::tools::{ToolContext, ToolSpec};
use diag_model_openai::{ConfigError as OpenAiConfigError, OpenAiConfig, OpenAiModel};
use diag_tools::current_time::CurrentTime;
use diag_tools::mcp::{McpServer, McpServerConfig, McpStartError};
use diag_tools::query_metrics::{MetricsLimits, QueryMetrics};
use diag_tools::search_logs::{LogSearchLimits, SearchLogs};
use diag_tools::search_runbooks::{RunbookSearchLimits, SearchRunbooks};

/// Why the configured environment could not be set up: one line, `key `a.b.c`: problem`,
/// naming the configuration key to fix (the caller adds the file).
#[derive(Debug, Error)]
pub enum SetupError {
    #[error("key `models`: no model endpoint is configured: add a [models.NAME] table with base_url and model to the config file (see fixtures/demo/diag.toml), or run with --fixture FILE")]
    NoModel,
    #[error("key `{key}`: {reason}")]
    Model {
        name: String,
        key: String,
        reason: String,
    },
    #[error("key `{key}`: {reason}")]
    Tool {
        tool: String,
        key: String,
        reason: String,
    },
    #[error("key `{key}`: {reason}")]
    Mcp {
        name: String,
        key: String,
        reason: String,
    },
}

impl SetupError {
    /// The dotted configuration key the error is about.
    pub fn key(&self) -> &str {
        match self {
            SetupError::NoModel => "models",
            SetupError::Model { key, .. }
            | SetupError::Tool { key, .. }
            | SetupError::Mcp { key, .. } => key,
        }
    }
}

/// The key of `[models.NAME]` an endpoint error is about.
fn model_error(name: &str, e: OpenAiConfigError) -> SetupError {
    let field = match &e {
        OpenAiConfigError::MissingApiKey { .. }
        | OpenAiConfigError::EmptyApiKey { .. }
        | OpenAiConfigError::InvalidApiKey { .. }
        | OpenAiConfigError::InvalidApiKeyEnv { .. } => ".api_key_env",
        OpenAiConfigError::InvalidBaseUrl { .. } => ".base_url",
        OpenAiConfigError::EmptyModel => ".model",
        OpenAiConfigError::ZeroTimeout => ".timeout_secs",
        OpenAiConfigError::Client(_) => "",
    };
    SetupError::Model {
        name: name.to_string(),
        key: format!("models.{name}{field}"),
        reason: e.to_string(),
    }
}

/// The tools of a run, as the agent runtime calls them.
pub struct RegistryTools {
    pub registry: ToolRegistry,
    pub clock: Arc<dyn Clock>,
}

impl ToolRunner for RegistryTools {
    fn catalog(&self) -> Vec<ToolSpec> {
        self.registry.specs()
    }

    fn run<'a>(&'a self, name: &'a str, arguments: &'a serde_json::Value) -> ToolResultFuture<'a> {
        Box::pin(async move {
            // The agent runtime owns the Executor's call budget (it counts calls in the model's
            // order and blocks those past it); the registry adds the catalog check, the
            // per-call timeout, the output cap and error handling.
            let cx = ToolContext {
                clock: self.clock.as_ref(),
            };
            let outcome = self.registry.call(name, arguments, &cx).await;
            ToolResult {
                status: outcome.status,
                output: outcome.output,
            }
        })
    }
}

/// Models, tools and limits built from a configuration; keeps MCP servers alive.
pub struct LiveEnvironment {
    pub models: AgentModels,
    pub tools: Arc<RegistryTools>,
    pub limits: AgentLimits,
    /// The configured limits as a run records them.
    pub run_limits: diag_runfile::RunLimits,
    pub mcp_servers: Vec<McpServer>,
}

impl LiveEnvironment {
    /// Stops the MCP servers (closing stdin first, so they can exit cleanly).
    pub async fn shutdown(self) {
        for server in self.mcp_servers {
            let _ = server.shutdown().await;
        }
    }
}

fn openai_config(m: &ModelConfig) -> OpenAiConfig {
    let mut c = OpenAiConfig::new(m.base_url.clone(), m.model.clone());
    c.api_key_env = m.api_key_env.clone();
    c.request_timeout = m.request_timeout();
    c.connect_timeout = m.connect_timeout();
    c.temperature = m.temperature;
    c.max_tokens = m.max_tokens;
    c.structured_output = m.structured_output;
    c.context_tokens = m.context_tokens;
    c
}

/// The model of each agent, from the configuration.
pub fn models(config: &Config) -> Result<AgentModels, SetupError> {
    let mut built: HashMap<String, Arc<dyn ChatModel>> = HashMap::new();
    let mut by_role: HashMap<AgentRole, Arc<dyn ChatModel>> = HashMap::new();
    for role in [
        AgentRole::Planner,
        AgentRole::Executor,
        AgentRole::Verifier,
        AgentRole::Composer,
    ] {
        let (name, m) = config.model_for(role).ok_or_else(|| unassigned(config))?;
        let model = match built.get(name) {
            Some(model) => model.clone(),
            None => {
                let model: Arc<dyn ChatModel> =
                    Arc::new(OpenAiModel::new(openai_config(m)).map_err(|e| model_error(name, e))?);
                built.insert(name.to_string(), model.clone());
                model
            }
        };
        by_role.insert(role, model);
    }
    let default = by_role
        .get(&AgentRole::Planner)
        .cloned()
        .ok_or(SetupError::NoModel)?;
    Ok(AgentModels {
        default,
        overrides: by_role,
    })
}

/// Why an agent has no model: none is defined, or several are and it was not told which.
fn unassigned(config: &Config) -> SetupError {
    match config.unassigned_agents() {
        Some((key, reason)) => SetupError::Model {
            name: String::new(),
            key,
            reason,
        },
        None => SetupError::NoModel,
    }
}

/// The registry's limits from the configuration.
pub fn tool_limits(config: &Config) -> ToolLimits {
    ToolLimits {
        timeout: Duration::from_secs(config.limits.tool_timeout_secs),
        max_output_bytes: config.limits.max_output_bytes,
    }
}

/// The built-in tools the configuration names, plus `current_time`, always.
pub fn builtin_registry(config: &Config) -> Result<ToolRegistry, SetupError> {
    let mut registry = ToolRegistry::new(tool_limits(config));
    let mut add = |tool: Arc<dyn diag_core::tools::Tool>| {
        let name = tool.spec().name;
        registry.register(tool).map_err(|e| SetupError::Tool {
            key: format!("tools.{name}"),
            tool: name,
            reason: e.to_string(),
        })
    };
    if let Some(logs) = &config.tools.search_logs {
        let sources = logs
            .log_sources()
            .map_err(|(key, reason)| SetupError::Tool {
                tool: "search_logs".into(),
                key,
                reason,
            })?;
        let link_targets = logs.allow_link_targets.iter().map(PathBuf::from).collect();
        add(Arc::new(
            SearchLogs::with_sources(sources, LogSearchLimits::default())
                .with_link_targets(link_targets),
        ))?;
    }
    if let Some(metrics) = &config.tools.query_metrics {
        let limits = MetricsLimits {
            timeout: Duration::from_secs(config.limits.tool_timeout_secs),
            ..MetricsLimits::default()
        };
        let tool = QueryMetrics::new(&metrics.base_url, limits).map_err(|e| SetupError::Tool {
            tool: "query_metrics".into(),
            key: "tools.query_metrics.base_url".into(),
            reason: e.to_string(),
        })?;
        add(Arc::new(tool))?;
    }
    if let Some(runbooks) = &config.tools.search_runbooks {
        let folders = runbooks.paths.iter().map(PathBuf::from).collect();
        let link_targets = runbooks
            .allow_link_targets
            .iter()
            .map(PathBuf::from)
            .collect();
        add(Arc::new(
            SearchRunbooks::new(folders, RunbookSearchLimits::default())
                .with_link_targets(link_targets),
        ))?;
    }
    add(Arc::new(CurrentTime::new()))?;
    Ok(registry)
}

/// Everything a live run needs: models, built-in tools and started MCP servers.
pub async fn live(config: &Config, clock: Arc<dyn Clock>) -> Result<LiveEnvironment, SetupError> {
    let models = models(config)?;
    let mut registry = builtin_registry(config)?;
    let mut servers = Vec::new();
    for (i, s) in config.mcp.iter().enumerate() {
        let mut c = McpServerConfig::new(s.name.clone(), s.command.clone());
        c.args = s.args.clone();
        c.env = s.env.clone();
        c.startup_timeout = Duration::from_secs(s.startup_timeout_secs);
        c.call_timeout = Duration::from_secs(s.call_timeout_secs);
        let server = McpServer::start(c).await.map_err(|e| {
            // The error names the server itself; the key says where it is configured.
            let field = match &e {
                McpStartError::Spawn { .. } => ".command",
                McpStartError::InvalidConfig { .. } => ".name",
                McpStartError::Timeout { .. } | McpStartError::Protocol { .. } => "",
            };
            SetupError::Mcp {
                name: s.name.clone(),
                key: format!("mcp[{i}]{field}"),
                reason: e.to_string(),
            }
        })?;
        for tool in server.tools() {
            let name = tool.spec().name;
            registry.register(tool).map_err(|e| SetupError::Tool {
                tool: name,
                key: format!("mcp[{i}]"),
                reason: e.to_string(),
            })?;
        }
        servers.push(server);
    }
    Ok(LiveEnvironment {
        models,
        tools: Arc::new(RegistryTools { registry, clock }),
        limits: AgentLimits {
            max_turns: config.limits.max_turns,
            max_tool_calls: config.limits.max_tool_calls,
            max_tokens: config.limits.max_tokens,
        },
        run_limits: config.limits.run_limits(),
        mcp_servers: servers,
    })
}
