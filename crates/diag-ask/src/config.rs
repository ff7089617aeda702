//! The configuration file: model endpoints (one default, optionally one per agent), the tool
//! sources, MCP servers, limits and the store path. Every error names the file, the key and
//! what is wrong, in one line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use diag_core::agent::AgentRole;
use diag_core::model::StructuredOutputSetting;

/// The environment variable naming a configuration file.
pub const ENV_CONFIG: &str = diag_core::env_vars::EnvVars::DIAG_CONFIG;

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Named model endpoints.
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
    /// Which named model each agent uses.
    #[serde(default)]
    pub agents: AgentsConfig,
    /// How the Executor gathers its evidence.
    #[serde(default)]
    pub executor: ExecutorConfig,
    #[serde(default)]
    pub tools: ToolsConfig,
    /// MCP servers started over stdio.
    #[serde(default)]
    pub mcp: Vec<McpConfig>,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub store: StoreConfig,
    /// `[notify]`, where a diagnosis of an alert is posted besides the store, kept as
    /// written: diag-alerts owns and reads it ([`Config::section`]).
    #[serde(default)]
    pub notify: Option<toml::Value>,
    /// `[serve]`, `diag serve`'s settings, kept as written: diag-alerts owns and reads it.
    #[serde(default)]
    pub serve: Option<toml::Value>,
    /// The text this configuration was read from, for the sections other crates read.
    #[serde(skip)]
    pub source: ConfigSource,
}

/// The text of a configuration file and its name for errors.
#[derive(Clone, PartialEq, Default)]
pub struct ConfigSource {
    file: String,
    text: String,
}

impl std::fmt::Debug for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigSource")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// A table of the configuration file that another crate owns and reads (`[serve]` and
/// `[notify]`, diag-alerts'): this crate keeps it as written and knows nothing of its keys,
/// so the type lives with the code that uses it, and the crate below stays below.
pub trait Section: serde::de::DeserializeOwned {
    /// The table's name in the file.
    const KEY: &'static str;
}

/// The file's table `S::KEY` alone, every other key ignored.
struct Only<S>(Option<S>);

impl<'de, S: Section> Deserialize<'de> for Only<S> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Tables<S>(std::marker::PhantomData<S>);
        impl<'de, S: Section> serde::de::Visitor<'de> for Tables<S> {
            type Value = Only<S>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a configuration table")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Only<S>, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == S::KEY {
                        found = Some(map.next_value::<S>()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(Only(found))
            }
        }
        d.deserialize_map(Tables(std::marker::PhantomData))
    }
}

/// One OpenAI-compatible endpoint.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The base URL that ends before `/chat/completions`, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    pub model: String,
    /// The name of the environment variable holding the API key (never the key itself).
    pub api_key_env: Option<String>,
    #[serde(default = "default_request_timeout")]
    pub timeout_secs: u64,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    /// The sampling temperature sent with every request to this model (0 to 2): 0 when not
    /// set, so every agent decodes greedily unless told otherwise. An endpoint that refuses
    /// the parameter is sent none from then on (learned like the structured-output form).
    #[serde(default)]
    pub temperature: f32,
    /// The sampling seed sent with every request when set (llama.cpp, vLLM and OpenAI take
    /// `seed`); an endpoint that refuses it is sent none from then on.
    pub seed: Option<u64>,
    /// The most completion tokens any request to this model asks for (a cap on the agents'
    /// `[limits.max_tokens]`).
    pub max_tokens: Option<u32>,
    /// How output contracts are sent: `auto` (default: `json_schema`, stepping down to
    /// `json_object` and then to nothing as the server refuses), `json_schema`, `json_object`
    /// (with the schema, as llama.cpp takes it) or `off`.
    #[serde(default)]
    pub structured_output: StructuredOutputSetting,
    /// The model's context size in tokens; when absent, diag learns it from the server's
    /// first context-length error.
    pub context_tokens: Option<u32>,
    /// The price of 1,000 prompt tokens, in any currency (`diag eval` reports the cost of a
    /// run when both prices are set).
    pub price_per_1k_prompt: Option<f64>,
    /// The price of 1,000 completion tokens, in the same currency.
    pub price_per_1k_completion: Option<f64>,
}

fn default_request_timeout() -> u64 {
    120
}
fn default_connect_timeout() -> u64 {
    10
}

/// The model name per agent; `default` serves every agent without its own.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    pub default: Option<String>,
    pub planner: Option<String>,
    pub executor: Option<String>,
    pub verifier: Option<String>,
    pub composer: Option<String>,
}

/// `[executor]`: how the Executor gathers its evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorConfig {
    /// Run the plan's steps as tool calls before the Executor's first model turn, so it starts
    /// from their recorded outputs and only adds the calls it needs. On by default: a model
    /// that does not call tools has no evidence otherwise.
    pub run_plan_steps: bool,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            run_plan_steps: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    pub search_logs: Option<LogsConfig>,
    pub query_metrics: Option<MetricsConfig>,
    pub search_runbooks: Option<RunbooksConfig>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsConfig {
    /// Files, directories or glob patterns; relative paths are relative to the config file.
    #[serde(default)]
    pub paths: Vec<String>,
    /// The zone of times that the `paths` write without an offset (syslog, log4j, klog, ...):
    /// `UTC` (the default), an offset such as `+01:00`, or a tz database name such as
    /// `Europe/Berlin`. Also the default of `sources` without their own.
    pub time_zone: Option<String>,
    /// Sources with settings of their own (`[[tools.search_logs.sources]]`).
    #[serde(default)]
    pub sources: Vec<LogSourceConfig>,
    /// Folders the sources' links may lead to (Kubernetes' `/var/log/containers/*.log` links
    /// into `/var/log/pods`); a link that leaves the sources and these is skipped. Relative
    /// to the config file.
    #[serde(default)]
    pub allow_link_targets: Vec<String>,
}

/// One log source with its own time zone.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSourceConfig {
    /// A file, directory or glob pattern; relative to the config file.
    pub path: String,
    /// The zone of times this source writes without an offset.
    pub time_zone: Option<String>,
}

impl LogsConfig {
    /// Every source with the zone of its local times: `paths` first, then `sources`.
    pub fn log_sources(&self) -> Result<Vec<diag_tools::search_logs::LogSource>, (String, String)> {
        use diag_tools::search_logs::{LogSource, LogZone};
        let zone = |key: String, z: Option<&String>| match z {
            None => Ok(LogZone::UTC),
            Some(text) => LogZone::parse(text).map_err(|reason| (key, reason)),
        };
        let default = zone(
            "tools.search_logs.time_zone".into(),
            self.time_zone.as_ref(),
        )?;
        let mut out: Vec<LogSource> = self
            .paths
            .iter()
            .map(|p| LogSource {
                path: p.into(),
                zone: default.clone(),
            })
            .collect();
        for (i, s) in self.sources.iter().enumerate() {
            let zone = match &s.time_zone {
                None => default.clone(),
                some => zone(
                    format!("tools.search_logs.sources[{i}].time_zone"),
                    some.as_ref(),
                )?,
            };
            out.push(LogSource {
                path: s.path.as_str().into(),
                zone,
            });
        }
        Ok(out)
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// The Prometheus-compatible base URL, e.g. `http://127.0.0.1:9090`.
    pub base_url: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunbooksConfig {
    /// Folders of Markdown runbooks; relative paths are relative to the config file.
    pub paths: Vec<String>,
    /// Folders the runbook folders' links may lead to; relative to the config file.
    #[serde(default)]
    pub allow_link_targets: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    pub name: String,
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default = "default_mcp_startup")]
    pub startup_timeout_secs: u64,
    #[serde(default = "default_tool_timeout")]
    pub call_timeout_secs: u64,
}

fn default_mcp_startup() -> u64 {
    diag_tools::mcp::McpServerConfig::DEFAULT_STARTUP_TIMEOUT.as_secs()
}
fn default_tool_timeout() -> u64 {
    Limits::DEFAULT.tool_timeout_secs
}

/// `[limits]`: the one limits type, whose reader refuses a value below its minimum by key.
pub use diag_core::limits::{Limits, MaxTokensConfig};

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// A SQLite file, or a `postgres://` URL.
    pub path: Option<PathBuf>,
    /// A PostgreSQL store's URL (`postgres://user@host:port/database`); the same as `path`
    /// holding a URL. At most one of the two.
    pub url: Option<String>,
    /// The environment variable that holds a PostgreSQL store's password, when the URL and
    /// `PGPASSWORD` give none (the password itself never goes in the file).
    pub password_env: Option<String>,
}

impl StoreConfig {
    /// The store this section names: `url`, else `path`; `None` leaves it to the default.
    pub fn location(&self) -> Option<PathBuf> {
        self.url
            .clone()
            .map(PathBuf::from)
            .or_else(|| self.path.clone())
    }

    /// `url` must be a PostgreSQL URL, and names the store alone (not beside `path`).
    fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: &str| ConfigError::Invalid {
            file: file.to_string(),
            key: key.to_string(),
            reason: reason.to_string(),
        };
        if let Some(url) = &self.url {
            if self.path.is_some() {
                return Err(invalid(
                    "store.url",
                    "give the store as `url` or as `path`, not both",
                ));
            }
            if !diag_core::store::is_postgres_url(url) {
                return Err(invalid(
                    "store.url",
                    "must start with postgres:// or postgresql:// (a SQLite file is `path`)",
                ));
            }
        }
        Ok(())
    }
}

/// A configuration error, always naming the file.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("config {file}: cannot read: {reason}")]
    Unreadable { file: String, reason: String },
    #[error("config {file}: line {line}: {reason}")]
    Syntax {
        file: String,
        line: usize,
        reason: String,
    },
    #[error("config {file}: key `{key}`: {reason}")]
    Invalid {
        file: String,
        key: String,
        reason: String,
    },
}

impl Config {
    /// Reads and validates a configuration file. Relative paths (tool sources and the store
    /// path) are resolved against the file's folder, and every tool source must exist.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let (text, file) = read_text(path)?;
        let mut config = Config::parse(&text, &file)?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.resolve_paths(base);
        config.check_sources(&file)?;
        Ok(config)
    }

    /// Only the `[store] path` of a configuration file, resolved against its folder, for the
    /// commands that read the store and nothing else (`trace`, `runs`, `export`, `gc`): the
    /// rest of the file is not validated, so a log folder that is gone, or a model endpoint
    /// being edited, never keeps an operator from reading past runs. The file must still
    /// be TOML, and `[store]` well formed.
    pub fn store_path_of(path: &Path) -> Result<Option<PathBuf>, ConfigError> {
        Ok(Config::store_of(path)?.location())
    }

    /// The `[store]` table of the configuration file at `path`, alone, its relative path
    /// resolved against the file's folder as [`Config::load`] resolves it.
    pub fn store_of(path: &Path) -> Result<StoreConfig, ConfigError> {
        #[derive(Deserialize, Default)]
        struct OnlyStore {
            #[serde(default)]
            store: StoreConfig,
        }
        let (text, file) = read_text(path)?;
        let only: OnlyStore = deserialize_keyed(&text, &file)?;
        only.store.validate(&file)?;
        let mut store = only.store;
        if let Some(p) = &mut store.path {
            if is_relative_path(p) {
                *p = path.parent().unwrap_or(Path::new(".")).join(&*p);
            }
        }
        Ok(store)
    }

    /// Parses and validates configuration text; `file` names it in errors. A value of the
    /// wrong type, an unknown key or a missing one is reported with its dotted key (and its
    /// line); only text that is not TOML at all is reported by line alone.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let mut config: Config = deserialize_keyed(text, file)?;
        config.validate(file)?;
        config.source = ConfigSource {
            file: file.to_string(),
            text: text.to_string(),
        };
        Ok(config)
    }

    /// The table another crate owns (`S::KEY`), read from the file's text with the same
    /// errors as the rest (key, problem, line); `None` when the file has no such table.
    pub fn section<S: Section>(&self) -> Result<Option<S>, ConfigError> {
        if self.source.text.is_empty() {
            return Ok(None);
        }
        let only: Only<S> = deserialize_keyed(&self.source.text, &self.source.file)?;
        Ok(only.0)
    }

    /// An error about `key` of this configuration's file.
    pub fn invalid(&self, key: &str, reason: &str) -> ConfigError {
        ConfigError::Invalid {
            file: self.source.file.clone(),
            key: key.to_string(),
            reason: reason.to_string(),
        }
    }

    fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: &str| ConfigError::Invalid {
            file: file.to_string(),
            key,
            reason: reason.to_string(),
        };
        self.store.validate(file)?;
        for (name, m) in &self.models {
            let url = m.base_url.trim();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(
                    format!("models.{name}.base_url"),
                    "must start with http:// or https://",
                ));
            }
            if m.model.trim().is_empty() {
                return Err(invalid(format!("models.{name}.model"), "must not be empty"));
            }
            if m.timeout_secs == 0 {
                return Err(invalid(
                    format!("models.{name}.timeout_secs"),
                    "must be at least 1",
                ));
            }
            if m.connect_timeout_secs == 0 {
                return Err(invalid(
                    format!("models.{name}.connect_timeout_secs"),
                    "must be at least 1",
                ));
            }
            if m.max_tokens == Some(0) {
                return Err(invalid(
                    format!("models.{name}.max_tokens"),
                    "must be at least 1",
                ));
            }
            if !(m.temperature.is_finite() && (0.0..=2.0).contains(&m.temperature)) {
                return Err(invalid(
                    format!("models.{name}.temperature"),
                    "must be a number from 0 to 2",
                ));
            }
            if m.context_tokens.is_some_and(|n| n < 256) {
                return Err(invalid(
                    format!("models.{name}.context_tokens"),
                    "must be at least 256",
                ));
            }
            for (key, price) in [
                ("price_per_1k_prompt", m.price_per_1k_prompt),
                ("price_per_1k_completion", m.price_per_1k_completion),
            ] {
                if price.is_some_and(|p| !p.is_finite() || p < 0.0) {
                    return Err(invalid(
                        format!("models.{name}.{key}"),
                        "must be a number of at least 0",
                    ));
                }
            }
            if let Some(env) = &m.api_key_env {
                if env.trim().is_empty() || env.contains('=') {
                    return Err(invalid(
                        format!("models.{name}.api_key_env"),
                        "must name an environment variable",
                    ));
                }
            }
        }
        let a = &self.agents;
        for (key, value) in [
            ("default", &a.default),
            ("planner", &a.planner),
            ("executor", &a.executor),
            ("verifier", &a.verifier),
            ("composer", &a.composer),
        ] {
            if let Some(name) = value {
                if !self.models.contains_key(name) {
                    return Err(invalid(
                        format!("agents.{key}"),
                        &format!("names model `{name}`, which is not defined under [models]"),
                    ));
                }
            }
        }
        if let Some((key, reason)) = self.unassigned_agents() {
            return Err(invalid(key, &reason));
        }
        if let Some(m) = &self.tools.query_metrics {
            if !(m.base_url.starts_with("http://") || m.base_url.starts_with("https://")) {
                return Err(invalid(
                    "tools.query_metrics.base_url".into(),
                    "must start with http:// or https://",
                ));
            }
        }
        if let Some(logs) = &self.tools.search_logs {
            logs.log_sources()
                .map_err(|(key, reason)| invalid(key, &reason))?;
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, s) in self.mcp.iter().enumerate() {
            let ok = !s.name.is_empty()
                && s.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !ok {
                return Err(invalid(
                    format!("mcp[{i}].name"),
                    "must be non-empty ASCII letters, digits, `_` or `-`",
                ));
            }
            if !seen.insert(&s.name) {
                return Err(invalid(format!("mcp[{i}].name"), "is used twice"));
            }
            if s.command.trim().is_empty() {
                return Err(invalid(format!("mcp[{i}].command"), "must not be empty"));
            }
        }
        Ok(())
    }

    /// When several models are defined, every agent must be able to tell which one it uses:
    /// its own `agents.<role>` or `agents.default`. Returns the key to set and why.
    pub fn unassigned_agents(&self) -> Option<(String, String)> {
        if self.models.len() < 2 || self.agents.default.is_some() {
            return None;
        }
        let a = &self.agents;
        let unset: Vec<&str> = [
            ("agents.planner", &a.planner),
            ("agents.executor", &a.executor),
            ("agents.verifier", &a.verifier),
            ("agents.composer", &a.composer),
        ]
        .into_iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k)
        .collect();
        if unset.is_empty() {
            return None;
        }
        let names: Vec<&str> = self.models.keys().map(String::as_str).collect();
        let defined = format!("{} models are defined ({})", names.len(), names.join(", "));
        let reason = if unset.len() == 4 {
            format!("{defined}; name the one agents use by default")
        } else {
            format!(
                "{defined} and {} {} not set; name the one agents use by default",
                unset.join(", "),
                if unset.len() == 1 { "is" } else { "are" }
            )
        };
        Some(("agents.default".to_string(), reason))
    }

    /// Every log source and runbook folder must exist (a glob pattern: the folder it starts
    /// from), so a typo fails here instead of giving a run with nothing to search.
    fn check_sources(&self, file: &str) -> Result<(), ConfigError> {
        let lists = [
            (
                "tools.search_logs.paths",
                self.tools.search_logs.as_ref().map(|l| &l.paths),
            ),
            (
                "tools.search_runbooks.paths",
                self.tools.search_runbooks.as_ref().map(|r| &r.paths),
            ),
        ];
        for (key, paths) in lists {
            for (i, p) in paths.into_iter().flatten().enumerate() {
                if let Some(reason) = missing_source(p) {
                    return Err(ConfigError::Invalid {
                        file: file.to_string(),
                        key: format!("{key}[{i}]"),
                        reason,
                    });
                }
            }
        }
        let sources = self.tools.search_logs.iter().flat_map(|l| &l.sources);
        for (i, s) in sources.enumerate() {
            if let Some(reason) = missing_source(&s.path) {
                return Err(ConfigError::Invalid {
                    file: file.to_string(),
                    key: format!("tools.search_logs.sources[{i}].path"),
                    reason,
                });
            }
        }
        Ok(())
    }

    fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut String| {
            if Path::new(p.as_str()).is_relative() {
                *p = base.join(p.as_str()).display().to_string();
            }
        };
        if let Some(l) = &mut self.tools.search_logs {
            l.paths.iter_mut().for_each(resolve);
            l.sources.iter_mut().for_each(|s| resolve(&mut s.path));
            l.allow_link_targets.iter_mut().for_each(resolve);
        }
        if let Some(r) = &mut self.tools.search_runbooks {
            r.paths.iter_mut().for_each(resolve);
            r.allow_link_targets.iter_mut().for_each(resolve);
        }
        if let Some(p) = &mut self.store.path {
            if is_relative_path(p) {
                *p = base.join(&*p);
            }
        }
    }

    /// The model name configured for an agent, falling back to `agents.default`, then to the
    /// only model when exactly one is defined.
    pub fn model_for(&self, role: AgentRole) -> Option<(&str, &ModelConfig)> {
        let a = &self.agents;
        let own = match role {
            AgentRole::Planner => &a.planner,
            AgentRole::Executor => &a.executor,
            AgentRole::Verifier => &a.verifier,
            AgentRole::Composer => &a.composer,
        };
        let name = own
            .as_ref()
            .or(a.default.as_ref())
            .map(String::as_str)
            .or_else(|| {
                (self.models.len() == 1)
                    .then(|| self.models.keys().next().map(String::as_str))
                    .flatten()
            })?;
        self.models
            .get_key_value(name)
            .map(|(k, v)| (k.as_str(), v))
    }

    /// The configuration file to read: `--config`, then `DIAG_CONFIG`, then the user's config
    /// directory if a file is there.
    pub fn locate(flag: Option<&Path>) -> Option<PathBuf> {
        if let Some(p) = flag {
            return Some(p.to_path_buf());
        }
        if let Some(p) = std::env::var_os(ENV_CONFIG).filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(p));
        }
        let dir = std::env::var_os(diag_core::env_vars::EnvVars::XDG_CONFIG_HOME)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os(diag_core::env_vars::EnvVars::HOME)
                    .map(|h| PathBuf::from(h).join(".config"))
            })?;
        let p = dir.join("diag").join("config.toml");
        p.is_file().then_some(p)
    }
}

/// Why a configured source path is of no use, or `None` when it is there.
fn missing_source(path: &str) -> Option<String> {
    let p = Path::new(path);
    if std::fs::symlink_metadata(p).is_ok() {
        return None;
    }
    if !path.contains(['*', '?', '[']) {
        return Some(format!("`{path}` does not exist"));
    }
    if let Err(e) = glob::Pattern::new(path) {
        return Some(format!("`{path}` is not a valid glob pattern: {e}"));
    }
    let root: PathBuf = p
        .components()
        .take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?', '[']))
        .collect();
    (!root.as_os_str().is_empty() && !root.is_dir())
        .then(|| format!("`{path}`: the folder {} does not exist", root.display()))
}

fn one_line(text: &str) -> String {
    diag_core::text::collapse_whitespace(text)
}

/// A configuration file's text and its name for errors.
fn read_text(path: &Path) -> Result<(String, String), ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Unreadable {
        file: file.clone(),
        reason: e.to_string(),
    })?;
    Ok((text, file))
}

/// Deserializes configuration text: first the TOML itself (a syntax error by line), then the
/// typed value from the parsed table, whose errors carry the path of keys they happened under
/// (the same error through the text deserializer gives its line).
pub fn deserialize_keyed<T: serde::de::DeserializeOwned>(
    text: &str,
    file: &str,
) -> Result<T, ConfigError> {
    let line_of = |span: Option<std::ops::Range<usize>>| {
        span.map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
    };
    let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Syntax {
        file: file.to_string(),
        line: line_of(e.span()).unwrap_or(0),
        reason: one_line(e.message()),
    })?;
    T::deserialize(toml::Value::Table(table)).map_err(|e| {
        let line = toml::from_str::<T>(text)
            .err()
            .and_then(|e| line_of(e.span()));
        keyed_error(&e, text, line, file)
    })
}

/// A deserialization error as `key `a.b.c`: problem (line N)`. The error of the table
/// deserializer names its keys in its `Display` (`in `a.b``), which is the only place the toml
/// crate exposes them; an unknown or missing field is named after that path.
fn keyed_error(e: &toml::de::Error, text: &str, line: Option<usize>, file: &str) -> ConfigError {
    let shown = e.to_string();
    let mut keys: Vec<String> = shown
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("in `").and_then(|k| k.strip_suffix('`')))
        .map(|k| k.split('.').map(str::to_string).collect())
        .unwrap_or_default();
    let message = one_line(e.message());
    let field = |prefix: &str| {
        message
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('`').next())
            .map(str::to_string)
    };
    let reason = if let Some(name) = field("unknown field `") {
        keys.push(name);
        match message.split_once(", expected ") {
            Some((_, expected)) => format!("unknown key (expected {expected})"),
            None => "unknown key".to_string(),
        }
    } else if let Some(name) = field("missing field `") {
        keys.push(name);
        "is missing".to_string()
    } else {
        message
    };
    // Arrays of tables (`[[mcp]]`) are indexed by how many of their headers precede the error.
    if let (Some(first), Some(line)) = (keys.first_mut(), line) {
        let header = format!("[[{first}]]");
        let before = text
            .lines()
            .take(line)
            .filter(|l| l.trim_start().starts_with(&header))
            .count();
        if before > 0 {
            *first = format!("{first}[{}]", before - 1);
        }
    }
    if keys.is_empty() {
        return ConfigError::Syntax {
            file: file.to_string(),
            line: line.unwrap_or(0),
            reason,
        };
    }
    let reason = match line {
        Some(line) => format!("{reason} (line {line})"),
        None => reason,
    };
    ConfigError::Invalid {
        file: file.to_string(),
        key: keys.join("."),
        reason,
    }
}

impl ModelConfig {
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_secs)
    }
}

/// The URL scheme of a database location written as a URL (`scheme://…`, RFC 3986 scheme
/// characters), else `None`. `./postgres://x` or `/tmp/a://b` are paths: a scheme starts the
/// text and holds no `/`.
pub fn url_scheme(location: &Path) -> Option<&str> {
    let text = location.to_str()?;
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// A relative path, taken relative to the configuration file's folder; a URL is left as
/// written, so the command can refuse it by its scheme.
fn is_relative_path(p: &Path) -> bool {
    p.is_relative() && url_scheme(p).is_none()
}

/// A duration as the configuration (`[serve] report_link_ttl`) and the command line
/// (`diag gc --older-than`, `--lookback`) write it: one or more `<number><unit>` with unit w,
/// d, h, m or s, each unit once and from the largest down (`30d`, `90s`, `1h30m`, `2d12h`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    let refused = || format!("`{text}` is not a duration like 30d, 12h, 1h30m or 90s");
    const UNITS: [(char, u64); 5] = [
        ('w', 604_800),
        ('d', 86_400),
        ('h', 3600),
        ('m', 60),
        ('s', 1),
    ];
    let mut rest = text;
    let mut total: u64 = 0;
    // Units must come from the largest down: the index of the next one allowed.
    let mut next = 0;
    if rest.is_empty() {
        return Err(refused());
    }
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(refused)?;
        let (n, tail) = rest.split_at(split);
        let n: u64 = n.parse().map_err(|_| refused())?;
        let unit = tail.chars().next().ok_or_else(refused)?;
        let at = UNITS[next..]
            .iter()
            .position(|(u, _)| *u == unit)
            .ok_or_else(refused)?;
        let secs = UNITS[next + at].1;
        next += at + 1;
        total = n
            .checked_mul(secs)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| format!("`{text}` is too long"))?;
        rest = &tail[unit.len_utf8()..];
    }
    Ok(Duration::from_secs(total))
}

/// A duration as [`parse_duration`] reads it, in the largest unit that divides it (`15m`,
/// `30d`, `90s`).
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let unit = [(604_800, "w"), (86_400, "d"), (3600, "h"), (60, "m")]
        .into_iter()
        .find(|(n, _)| secs > 0 && secs.is_multiple_of(*n));
    match unit {
        Some((n, u)) => format!("{}{u}", secs / n),
        None => format!("{secs}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[models.fast]
base_url = "http://127.0.0.1:8080/v1"
model = "small"
api_key_env = "DIAG_TEST_KEY"

[models.strong]
base_url = "https://llm.internal/v1"
model = "large"

[agents]
default = "fast"
verifier = "strong"

[tools.search_logs]
paths = ["logs", "/var/log/checkout/*.log"]

[tools.query_metrics]
base_url = "http://127.0.0.1:9090"

[[mcp]]
name = "fs"
command = "mcp-server-filesystem"
args = ["/srv/runbooks"]

[limits]
max_tool_calls = 4
"#;

    #[test]
    fn a_full_configuration_parses_and_routes_agents_to_models() {
        let c = Config::parse(GOOD, "diag.toml").unwrap();
        assert_eq!(c.model_for(AgentRole::Verifier).unwrap().0, "strong");
        assert_eq!(c.model_for(AgentRole::Planner).unwrap().0, "fast");
        assert_eq!(c.limits.max_tool_calls, 4);
        assert_eq!(c.limits.max_turns, 8);
        assert_eq!(c.mcp[0].args, ["/srv/runbooks"]);
        assert!(c.executor.run_plan_steps, "on unless set off");
    }

    #[test]
    fn the_plan_steps_setting_is_read_and_checked_by_key() {
        let c = Config::parse("[executor]\nrun_plan_steps = false\n", "f.toml").unwrap();
        assert!(!c.executor.run_plan_steps);
        let c = Config::parse("[executor]\nrun_plan_steps = true\n", "f.toml").unwrap();
        assert!(c.executor.run_plan_steps);
        for (text, key) in [
            (
                "[executor]\nrun_plan_steps = \"yes\"\n",
                "executor.run_plan_steps",
            ),
            ("[executor]\nrun_plans = false\n", "executor.run_plans"),
        ] {
            let e = Config::parse(text, "f.toml").unwrap_err().to_string();
            assert!(e.contains(&format!("key `{key}`")), "{e}");
        }
    }

    #[test]
    fn a_single_model_serves_every_agent() {
        let c = Config::parse(
            "[models.only]\nbase_url = \"http://x\"\nmodel = \"m\"\n",
            "f.toml",
        )
        .unwrap();
        assert_eq!(c.model_for(AgentRole::Composer).unwrap().0, "only");
    }

    #[test]
    fn errors_name_the_file_the_key_and_the_problem_in_one_line() {
        let cases = [
            (
                "[models.a]\nbase_url = \"ftp://x\"\nmodel = \"m\"\n",
                "models.a.base_url",
            ),
            (
                "[models.a]\nbase_url = \"http://x\"\nmodel = \" \"\n",
                "models.a.model",
            ),
            ("[agents]\nverifier = \"ghost\"\n", "agents.verifier"),
            ("[limits]\nmax_turns = 0\n", "limits.max_turns"),
            ("[[mcp]]\nname = \"a b\"\ncommand = \"x\"\n", "mcp[0].name"),
        ];
        for (text, key) in cases {
            let e = Config::parse(text, "/etc/diag.toml")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("config /etc/diag.toml: key `"), "{e}");
            assert!(e.contains(key), "{e} names {key}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn syntax_errors_give_the_line_and_unknown_keys_are_named() {
        let e = Config::parse(
            "[models.a]\nbase_url = \"http://x\"\nmodle = \"m\"\n",
            "c.toml",
        )
        .unwrap_err();
        match &e {
            ConfigError::Invalid { key, reason, .. } => {
                assert_eq!(key, "models.a.modle", "{e}");
                assert!(reason.starts_with("unknown key (expected "), "{e}");
                assert!(reason.ends_with("(line 3)"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!e.to_string().contains('\n'));
        let e = Config::parse("[models\n", "c.toml").unwrap_err();
        assert!(matches!(e, ConfigError::Syntax { line: 1, .. }), "{e}");
    }

    #[test]
    fn values_of_the_wrong_type_and_missing_keys_are_named_by_key() {
        let cases = [
            (
                "[limits]\nmax_tool_calls = 4\n\n# turns\nmax_turns = \"x\"\n",
                "config bad.toml: key `limits.max_turns`: invalid type: string \"x\", \
                 expected u32 (line 5)",
            ),
            (
                "[models.a]\nbase_url = \"http://x\"\n",
                "config bad.toml: key `models.a.model`: is missing (line 1)",
            ),
            (
                "[[mcp]]\nname = \"a\"\ncommand = \"x\"\n[[mcp]]\nname = \"b\"\ncommand = 5\n",
                "config bad.toml: key `mcp[1].command`: invalid type: integer `5`, \
                 expected a string (line 6)",
            ),
            (
                "colour = true\n",
                "config bad.toml: key `colour`: unknown key (expected one of `models`, \
                 `agents`, `executor`, `tools`, `mcp`, `limits`, `store`, `notify`, `serve`) \
                 (line 1)",
            ),
        ];
        for (text, want) in cases {
            let e = Config::parse(text, "bad.toml").unwrap_err().to_string();
            assert_eq!(e, want);
        }
    }

    #[test]
    fn structured_output_context_and_max_tokens_are_read_and_checked_by_key() {
        let model = "[models.a]\nbase_url = \"http://x\"\nmodel = \"m\"\n";
        let c = Config::parse(model, "f.toml").unwrap();
        assert_eq!(
            c.models["a"].structured_output,
            StructuredOutputSetting::Auto
        );
        assert_eq!(c.models["a"].context_tokens, None);
        assert_eq!(
            c.models["a"].temperature, 0.0,
            "greedy unless told otherwise"
        );
        assert_eq!(c.models["a"].seed, None);
        assert_eq!(c.limits.max_tokens, MaxTokensConfig::DEFAULT);
        let c = Config::parse(
            &format!(
                "{model}structured_output = \"json_object\"\ncontext_tokens = 2048\n\
                 [limits.max_tokens]\nplanner = 300\n"
            ),
            "f.toml",
        )
        .unwrap();
        assert_eq!(
            c.models["a"].structured_output,
            StructuredOutputSetting::JsonObject
        );
        assert_eq!(c.models["a"].context_tokens, Some(2048));
        assert_eq!(c.limits.max_tokens.planner, 300);
        let c = Config::parse(
            &format!(
                "{model}temperature = 0.7
seed = 42
"
            ),
            "f.toml",
        )
        .unwrap();
        assert_eq!(
            (c.models["a"].temperature, c.models["a"].seed),
            (0.7, Some(42))
        );
        assert_eq!(
            c.limits.max_tokens.executor,
            MaxTokensConfig::DEFAULT.executor
        );
        for (text, key) in [
            (
                format!("{model}structured_output = \"grammar\"\n"),
                "models.a.structured_output",
            ),
            (
                format!("{model}context_tokens = 100\n"),
                "models.a.context_tokens",
            ),
            (format!("{model}max_tokens = 0\n"), "models.a.max_tokens"),
            (
                format!("{model}temperature = 2.5\n"),
                "models.a.temperature",
            ),
            (
                format!("{model}temperature = -0.1\n"),
                "models.a.temperature",
            ),
            (
                format!("{model}temperature = nan\n"),
                "models.a.temperature",
            ),
            (format!("{model}seed = -1\n"), "models.a.seed"),
            (
                "[limits.max_tokens]\nverifier = 10\n".to_string(),
                "limits.max_tokens.verifier",
            ),
            (
                "[limits.max_tokens]\nwriter = 100\n".to_string(),
                "limits.max_tokens.writer",
            ),
        ] {
            let e = Config::parse(&text, "f.toml").unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("config f.toml: key `{key}`: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn log_time_zones_are_checked_by_their_key_and_inherited() {
        let c = Config::parse(
            "[tools.search_logs]\npaths = [\"a\"]\ntime_zone = \"Europe/Berlin\"\n\
             [[tools.search_logs.sources]]\npath = \"b\"\ntime_zone = \"-05:00\"\n\
             [[tools.search_logs.sources]]\npath = \"c\"\n",
            "f.toml",
        )
        .unwrap();
        let zones: Vec<(String, String)> = c
            .tools
            .search_logs
            .unwrap()
            .log_sources()
            .unwrap()
            .into_iter()
            .map(|s| (s.path.display().to_string(), s.zone.to_string()))
            .collect();
        assert_eq!(
            zones,
            [
                ("a".to_string(), "Europe/Berlin".to_string()),
                ("b".to_string(), "-05:00".to_string()),
                ("c".to_string(), "Europe/Berlin".to_string())
            ]
        );
        for (text, key) in [
            (
                "[tools.search_logs]\npaths = [\"a\"]\ntime_zone = \"Mars/Base\"\n",
                "tools.search_logs.time_zone",
            ),
            (
                "[tools.search_logs]\n[[tools.search_logs.sources]]\npath = \"b\"\ntime_zone = \"+25:00\"\n",
                "tools.search_logs.sources[0].time_zone",
            ),
        ] {
            let e = Config::parse(text, "f.toml").unwrap_err().to_string();
            assert!(e.starts_with(&format!("config f.toml: key `{key}`: ")), "{e}");
        }
    }

    #[test]
    fn zero_limits_and_timeouts_are_refused_by_their_key() {
        let model = "[models.a]\nbase_url = \"http://x\"\nmodel = \"m\"\n";
        for (text, want) in [
            (
                format!("{model}connect_timeout_secs = 0\n"),
                "config f.toml: key `models.a.connect_timeout_secs`: must be at least 1",
            ),
            (
                format!("{model}timeout_secs = 0\n"),
                "config f.toml: key `models.a.timeout_secs`: must be at least 1",
            ),
            // The limits are refused where they are read, so the line is named too.
            (
                "[limits]\nmax_tool_calls = 0\n".to_string(),
                "config f.toml: key `limits.max_tool_calls`: must be at least 1 (line 2)",
            ),
            (
                "[limits]\nmax_turns = 0\n".to_string(),
                "config f.toml: key `limits.max_turns`: must be at least 1 (line 2)",
            ),
            (
                "[limits]\n\ntool_timeout_secs = 0\n".to_string(),
                "config f.toml: key `limits.tool_timeout_secs`: must be at least 1 (line 3)",
            ),
            (
                "[limits]\nmax_output_bytes = 1023\n".to_string(),
                "config f.toml: key `limits.max_output_bytes`: must be at least 1024 (line 2)",
            ),
            (
                "[limits.max_tokens]\ncomposer = 63\n".to_string(),
                "config f.toml: key `limits.max_tokens.composer`: must be at least 64 (line 2)",
            ),
        ] {
            assert_eq!(
                Config::parse(&text, "f.toml").unwrap_err().to_string(),
                want
            );
        }
    }

    #[test]
    fn several_models_need_a_default_for_the_agents_without_their_own() {
        let two = "[models.a]\nbase_url = \"http://x\"\nmodel = \"m\"\n\
                   [models.b]\nbase_url = \"http://y\"\nmodel = \"n\"\n";
        let e = Config::parse(two, "F").unwrap_err().to_string();
        assert_eq!(
            e,
            "config F: key `agents.default`: 2 models are defined (a, b); name the one agents \
             use by default"
        );
        let some = format!("{two}[agents]\nplanner = \"a\"\nverifier = \"b\"\n");
        let e = Config::parse(&some, "F").unwrap_err().to_string();
        assert_eq!(
            e,
            "config F: key `agents.default`: 2 models are defined (a, b) and agents.executor, \
             agents.composer are not set; name the one agents use by default"
        );
        let all = format!(
            "{two}[agents]\nplanner = \"a\"\nexecutor = \"a\"\nverifier = \"b\"\ncomposer = \"b\"\n"
        );
        let c = Config::parse(&all, "F").unwrap();
        assert_eq!(c.model_for(AgentRole::Composer).unwrap().0, "b");
        let with_default = format!("{two}[agents]\ndefault = \"b\"\n");
        let c = Config::parse(&with_default, "F").unwrap();
        assert_eq!(c.model_for(AgentRole::Planner).unwrap().0, "b");
    }

    #[test]
    fn tool_sources_that_do_not_exist_are_refused_naming_key_and_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        std::fs::create_dir_all(dir.path().join("runbooks")).unwrap();
        let file = dir.path().join("diag.toml");
        let name = file.display().to_string();
        let load = |text: &str| {
            std::fs::write(&file, text).unwrap();
            Config::load(&file)
        };
        load(
            "[tools.search_logs]\npaths = [\"logs\", \"logs/*.log\"]\n\
              [tools.search_runbooks]\npaths = [\"runbooks\"]\n",
        )
        .unwrap();
        let missing = dir.path().join("logz");
        assert_eq!(
            load("[tools.search_logs]\npaths = [\"logs\", \"logz\"]\n")
                .unwrap_err()
                .to_string(),
            format!(
                "config {name}: key `tools.search_logs.paths[1]`: `{}` does not exist",
                missing.display()
            )
        );
        assert_eq!(
            load("[tools.search_logs]\npaths = [\"logz/*.log\"]\n")
                .unwrap_err()
                .to_string(),
            format!(
                "config {name}: key `tools.search_logs.paths[0]`: `{}/*.log`: the folder {} \
                 does not exist",
                missing.display(),
                missing.display()
            )
        );
        assert_eq!(
            load("[tools.search_runbooks]\npaths = [\"/nonexistent/runbooks\"]\n")
                .unwrap_err()
                .to_string(),
            format!(
                "config {name}: key `tools.search_runbooks.paths[0]`: `/nonexistent/runbooks` \
                 does not exist"
            )
        );
    }

    #[test]
    fn read_only_commands_read_the_store_path_alone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("diag.toml");
        // The log folder is gone and the model table is half written: `diag trace` still
        // finds the store.
        std::fs::write(
            &file,
            "[models.main]\nmodel = \"m\"\n[tools.search_logs]\npaths = [\"/gone\"]\n\
             [store]\npath = \"data/runs.db\"\n",
        )
        .unwrap();
        assert!(Config::load(&file).is_err());
        assert_eq!(
            Config::store_path_of(&file).unwrap(),
            Some(dir.path().join("data/runs.db"))
        );
        std::fs::write(&file, "[limits]\nmax_turns = 4\n").unwrap();
        assert_eq!(Config::store_path_of(&file).unwrap(), None);
        std::fs::write(&file, "[store]\npath = 7\n").unwrap();
        let e = Config::store_path_of(&file).unwrap_err().to_string();
        assert!(e.contains("key `store.path`"), "{e}");
        // A PostgreSQL store is named by `url`, alone; its password never goes in the file.
        std::fs::write(
            &file,
            "[store]\nurl = \"postgres://diag@db.internal/runs\"\npassword_env = \"RUNS_PW\"\n",
        )
        .unwrap();
        assert_eq!(
            Config::store_path_of(&file).unwrap(),
            Some(PathBuf::from("postgres://diag@db.internal/runs"))
        );
        assert_eq!(
            Config::store_of(&file).unwrap().password_env.as_deref(),
            Some("RUNS_PW")
        );
        for (text, want) in [
            (
                "[store]\nurl = \"postgres://db/runs\"\npath = \"x.db\"\n",
                "key `store.url`: give the store as `url` or as `path`, not both",
            ),
            (
                "[store]\nurl = \"mysql://db/runs\"\n",
                "key `store.url`: must start with postgres:// or postgresql://",
            ),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = Config::store_path_of(&file).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        std::fs::write(&file, "[store\n").unwrap();
        assert!(Config::store_path_of(&file).is_err());
    }

    #[test]
    fn a_relative_store_path_resolves_against_the_config_folder() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("diag.toml");
        std::fs::write(&file, "[store]\npath = \"data/runs.db\"\n").unwrap();
        let c = Config::load(&file).unwrap();
        assert_eq!(c.store.path, Some(dir.path().join("data/runs.db")));
        std::fs::write(&file, "[store]\npath = \"/srv/diag.db\"\n").unwrap();
        let c = Config::load(&file).unwrap();
        assert_eq!(c.store.path, Some(PathBuf::from("/srv/diag.db")));
    }

    #[test]
    fn relative_paths_resolve_against_the_config_folder() {
        let dir = std::env::temp_dir().join(format!("diag-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("diag.toml");
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        std::fs::write(&file, "[tools.search_logs]\npaths = [\"logs\", \"/tmp\"]\n").unwrap();
        let c = Config::load(&file).unwrap();
        let paths = &c.tools.search_logs.unwrap().paths;
        assert_eq!(paths[0], dir.join("logs").display().to_string());
        assert_eq!(paths[1], "/tmp");
        let missing = Config::load(&dir.join("nope.toml")).unwrap_err();
        assert!(matches!(missing, ConfigError::Unreadable { .. }));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_formatted_duration_reads_back_as_itself() {
        for secs in [
            0,
            1,
            59,
            60,
            90,
            900,
            3600,
            5400,
            86_400,
            30 * 86_400,
            604_800,
        ] {
            let d = Duration::from_secs(secs);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{secs}");
        }
        assert_eq!(format_duration(Duration::from_secs(900)), "15m");
        assert_eq!(format_duration(Duration::from_secs(30 * 86_400)), "30d");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
    }
}
