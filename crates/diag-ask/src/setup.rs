//! Turns a validated [`Config`] into the live pieces a run needs: one chat model per agent,
//! the tool registry with the built-in tools and the MCP servers' tools, and the limits. The
//! MCP server processes live as long as the returned [`LiveEnvironment`].
//!
//! The models of one setup share one [`EndpointMemory`]: what an endpoint taught one of them
//! (`auto` stepping down from `json_schema`, a context size) holds for all of them. A process
//! that sets up several times and should keep what it learned passes its memory to
//! [`live_with`] or [`models_with`]; the commands pass one loaded from the run store
//! (`Store::endpoint_memory`), which keeps what is learned for the next process.
//!
//! The run and session ids of live runs come from [`RandomIds`], the system implementation of
//! diag-core's [`IdSource`] port (time-ordered, unique within the process).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::config::{Config, ModelConfig};
use diag_core::agent::runtime::{AgentModels, ToolResult, ToolResultFuture, ToolRunner};
use diag_core::agent::AgentRole;
use diag_core::clock::Clock;
use diag_core::ids::IdSource;
use diag_core::limits::Limits;
use diag_core::model::{ChatModel, Endpoint, EndpointMemory};
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
    #[error("key `models`: no model endpoint is configured: add a [models.NAME] table with base_url and model to the config file, as in fixtures/demo/diag.toml")]
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
    /// The configured limits.
    pub limits: Limits,
    /// `[executor] run_plan_steps`.
    pub run_plan_steps: bool,
    pub mcp_servers: Vec<McpServer>,
    /// What the model endpoints taught, shared by `models` (pass it to [`live_with`] to keep
    /// it for another setup).
    pub endpoints: EndpointMemory,
    /// The endpoints of `models`, each once, in key order.
    pub endpoints_used: Vec<Endpoint>,
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
    c.temperature = Some(m.temperature);
    c.seed = m.seed;
    c.max_tokens = m.max_tokens;
    c.structured_output = m.structured_output;
    c.context_tokens = m.context_tokens;
    c
}

/// The model of each agent, from the configuration, sharing a new [`EndpointMemory`].
pub fn models(config: &Config) -> Result<AgentModels, SetupError> {
    models_with(config, &EndpointMemory::default())
}

/// The model of each agent, from the configuration, recording what their endpoints teach in
/// `endpoints` (and starting from what it already holds).
pub fn models_with(config: &Config, endpoints: &EndpointMemory) -> Result<AgentModels, SetupError> {
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
                let model = OpenAiModel::new(openai_config(m))
                    .map_err(|e| model_error(name, e))?
                    .with_endpoint_memory(endpoints.clone());
                let model: Arc<dyn ChatModel> = Arc::new(model);
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

/// The endpoints (base URL and model name) the agents' models use, each once, in key order.
pub fn endpoints_used(config: &Config) -> Vec<Endpoint> {
    let mut used: Vec<Endpoint> = [
        AgentRole::Planner,
        AgentRole::Executor,
        AgentRole::Verifier,
        AgentRole::Composer,
    ]
    .into_iter()
    .filter_map(|role| config.model_for(role))
    .filter_map(|(_, m)| diag_model_openai::learned_key(&m.base_url, &m.model).ok())
    .collect();
    used.sort();
    used.dedup();
    used
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
    config.limits.tools()
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

/// Everything a live run needs: models (sharing a new [`EndpointMemory`]), built-in tools
/// and started MCP servers.
pub async fn live(config: &Config, clock: Arc<dyn Clock>) -> Result<LiveEnvironment, SetupError> {
    live_with(config, clock, &EndpointMemory::default()).await
}

/// [`live`], with models that record what their endpoints teach in `endpoints` (and start
/// from what it already holds).
pub async fn live_with(
    config: &Config,
    clock: Arc<dyn Clock>,
    endpoints: &EndpointMemory,
) -> Result<LiveEnvironment, SetupError> {
    let models = models_with(config, endpoints)?;
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
        limits: config.limits,
        run_plan_steps: config.executor.run_plan_steps,
        mcp_servers: servers,
        endpoints: endpoints.clone(),
        endpoints_used: endpoints_used(config),
    })
}

/// Time-ordered random ids: `run-` or `ses-` followed by 20 hex digits, the creation time in
/// milliseconds since the Unix epoch (12 digits) and 32 random bits (8 digits).
///
/// Every table of the run store is keyed by run id first (a run's trace is stored
/// contiguously). Ids that sort by creation time make each new run's rows land at the end of
/// those B-trees, where SQLite appends to one page, instead of at a random place, where an
/// insert into a full page rebalances it with its siblings and writes three or four pages:
/// with time-ordered ids the stored-run benchmark runs about a third faster than with
/// uniformly random ones. They also list in creation order.
///
/// Within one process ids are strictly increasing, so never equal: an id made in the same
/// millisecond as the previous one (or after the wall clock stepped back) continues from it,
/// its 32 low bits counted up by one, as monotonic ULIDs do. Ids of different processes
/// collide only when both are made in the same millisecond and draw the same 32 bits.
///
/// This is the system edge of the [`IdSource`] port (the wall clock, the operating system's
/// random generator and the process's last id); diag-core holds only the port and the
/// deterministic [`diag_core::ids::SequentialIds`].
pub struct RandomIds;

/// The last id this process made, as `(ms << 32) | random` (80 bits).
static LAST: std::sync::Mutex<u128> = std::sync::Mutex::new(0);

/// 32 bits from the operating system's random generator: a hash under a fresh
/// [`RandomState`](std::hash::RandomState), whose keys the standard library draws from that
/// generator (once per thread, then a different key for every `RandomState`).
fn random_bits() -> u32 {
    use std::hash::BuildHasher as _;
    let h = std::hash::RandomState::new().hash_one(0u8);
    // Both halves of the 64-bit hash folded into the 32 bits an id keeps.
    ((h >> 32) ^ h) as u32
}

fn time_ordered_hex() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let ms = diag_core::clock::millis(now) & 0xffff_ffff_ffff;
    let drawn = (u128::from(ms) << 32) | u128::from(random_bits());
    // A poisoned lock only means another thread panicked while holding a plain integer.
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let value = next_id(*last, drawn);
    *last = value;
    // 48 bits of milliseconds and 32 random bits: 20 hex digits (a saturated value stays 20).
    format!("{:020x}", value & ((1u128 << 80) - 1))
}

/// The id after `last` given a freshly drawn `(ms << 32) | random`: the drawn one when it is
/// later, otherwise `last + 1` (the same millisecond, or a clock that stepped back).
fn next_id(last: u128, drawn: u128) -> u128 {
    if drawn > last {
        drawn
    } else {
        last.saturating_add(1)
    }
}

impl IdSource for RandomIds {
    fn run_id(&self) -> String {
        format!("run-{}", time_ordered_hex())
    }

    fn session_id(&self) -> String {
        format!("ses-{}", time_ordered_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_are_distinct_well_formed_and_time_ordered() {
        let hex = |id: &str, prefix: &str| {
            let rest = id.strip_prefix(prefix).unwrap_or_else(|| panic!("{id}"));
            assert_eq!(rest.len(), 20, "{id}");
            assert!(rest
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            u64::from_str_radix(&rest[..12], 16).unwrap()
        };
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let a = RandomIds.run_id();
        let a_ms = hex(&a, "run-");
        assert!(a_ms >= before && a_ms < before + 60_000, "{a} at {before}");
        hex(&RandomIds.session_id(), "ses-");
        let ids: Vec<String> = (0..10_000).map(|_| RandomIds.run_id()).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids made one after another strictly increase, so no two are the same"
        );
        assert!(ids[0] > a, "{} sorts after {a}", ids[0]);
    }

    #[test]
    fn the_models_of_a_setup_share_what_an_endpoint_taught_and_another_setup_does_not() {
        let config = Config::parse(
            "[models.a]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\
             [models.b]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\
             [agents]\nplanner = \"a\"\nexecutor = \"b\"\nverifier = \"a\"\ncomposer = \"b\"\n",
            "t.toml",
        )
        .unwrap();
        let memory = EndpointMemory::default();
        let shared = models_with(&config, &memory).unwrap();
        let own = models(&config).unwrap();
        // The adapter keys an endpoint by its base URL and model name.
        memory.learn(&Endpoint::new("http://127.0.0.1:9/v1", "m"), |l| {
            l.context_tokens = Some(1234);
        });
        assert_eq!(
            endpoints_used(&config),
            vec![Endpoint::new("http://127.0.0.1:9/v1", "m")],
            "two models on one endpoint are one endpoint"
        );
        for role in [AgentRole::Planner, AgentRole::Executor] {
            assert_eq!(
                shared.overrides[&role].context_tokens(),
                Some(1234),
                "{role:?}"
            );
            assert_eq!(own.overrides[&role].context_tokens(), None, "{role:?}");
        }
    }

    #[test]
    fn the_random_bits_differ_from_draw_to_draw() {
        let draws: std::collections::HashSet<u32> = (0..1_000).map(|_| random_bits()).collect();
        assert!(draws.len() > 990, "{} distinct of 1000", draws.len());
    }

    #[test]
    fn an_id_in_the_same_millisecond_or_after_the_clock_stepped_back_counts_up() {
        let ms = 0x0190_0000_0000u128 << 32;
        assert_eq!(
            next_id(ms | 7, ms | 3),
            ms | 8,
            "same millisecond, smaller draw"
        );
        assert_eq!(
            next_id(ms | 7, ms | 7),
            ms | 8,
            "same millisecond, same draw"
        );
        assert_eq!(
            next_id(ms | 7, ms | 9),
            ms | 9,
            "same millisecond, larger draw"
        );
        let earlier = (0x018f_ffff_ffffu128 << 32) | 0xffff_ffff;
        assert_eq!(next_id(ms | 7, earlier), ms | 8, "the clock stepped back");
        assert_eq!(
            next_id(ms | 0xffff_ffff, ms),
            (ms + (1 << 32)),
            "carries into the ms"
        );
        let later = (0x0190_0000_0001u128 << 32) | 2;
        assert_eq!(next_id(ms | 7, later), later);
    }
}
