//! The configuration file: model endpoints (one default, optionally one per agent), the tool
//! sources, MCP servers, limits and the store path. Every error names the file, the key and
//! what is wrong, in one line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use crate::agent::AgentRole;

/// The environment variable naming a configuration file.
pub const ENV_CONFIG: &str = "DIAG_CONFIG";

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Named model endpoints.
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
    /// Which named model each agent uses.
    #[serde(default)]
    pub agents: AgentsConfig,
    #[serde(default)]
    pub tools: ToolsConfig,
    /// MCP servers started over stdio.
    #[serde(default)]
    pub mcp: Vec<McpConfig>,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub store: StoreConfig,
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
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
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
    pub paths: Vec<String>,
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
    20
}
fn default_tool_timeout() -> u64 {
    30
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    #[serde(default = "default_max_tool_calls")]
    pub max_tool_calls: u32,
    #[serde(default = "default_tool_timeout")]
    pub tool_timeout_secs: u64,
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: usize,
}

fn default_max_turns() -> u32 {
    8
}
fn default_max_tool_calls() -> u32 {
    12
}
fn default_max_output_bytes() -> usize {
    64 * 1024
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_turns: default_max_turns(),
            max_tool_calls: default_max_tool_calls(),
            tool_timeout_secs: default_tool_timeout(),
            max_output_bytes: default_max_output_bytes(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    pub path: Option<PathBuf>,
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
    /// Reads and validates a configuration file. Relative tool paths are resolved against the
    /// file's folder.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Unreadable {
            file: file.clone(),
            reason: e.to_string(),
        })?;
        let mut config = Config::parse(&text, &file)?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.resolve_paths(base);
        Ok(config)
    }

    /// Parses and validates configuration text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
                .unwrap_or(0);
            ConfigError::Syntax {
                file: file.to_string(),
                line,
                reason: e.message().replace('\n', " ").trim().to_string(),
            }
        })?;
        config.validate(file)?;
        Ok(config)
    }

    fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: &str| ConfigError::Invalid {
            file: file.to_string(),
            key,
            reason: reason.to_string(),
        };
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
        if let Some(m) = &self.tools.query_metrics {
            if !(m.base_url.starts_with("http://") || m.base_url.starts_with("https://")) {
                return Err(invalid(
                    "tools.query_metrics.base_url".into(),
                    "must start with http:// or https://",
                ));
            }
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
        let l = &self.limits;
        if l.max_turns == 0 {
            return Err(invalid("limits.max_turns".into(), "must be at least 1"));
        }
        if l.tool_timeout_secs == 0 {
            return Err(invalid(
                "limits.tool_timeout_secs".into(),
                "must be at least 1",
            ));
        }
        if l.max_output_bytes < 1024 {
            return Err(invalid(
                "limits.max_output_bytes".into(),
                "must be at least 1024",
            ));
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
        }
        if let Some(r) = &mut self.tools.search_runbooks {
            r.paths.iter_mut().for_each(resolve);
        }
        if let Some(p) = &mut self.store.path {
            if p.is_relative() {
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
        let dir = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        let p = dir.join("diag").join("config.toml");
        p.is_file().then_some(p)
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
    fn syntax_errors_and_unknown_keys_give_the_line() {
        let e = Config::parse(
            "[models.a]\nbase_url = \"http://x\"\nmodle = \"m\"\n",
            "c.toml",
        )
        .unwrap_err();
        match &e {
            ConfigError::Syntax { line, reason, .. } => {
                assert_eq!(*line, 3, "{e}");
                assert!(reason.contains("modle"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!e.to_string().contains('\n'));
        let e = Config::parse("[models\n", "c.toml").unwrap_err();
        assert!(matches!(e, ConfigError::Syntax { line: 1, .. }), "{e}");
    }

    #[test]
    fn relative_paths_resolve_against_the_config_folder() {
        let dir = std::env::temp_dir().join(format!("diag-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("diag.toml");
        std::fs::write(&file, "[tools.search_logs]\npaths = [\"logs\", \"/abs\"]\n").unwrap();
        let c = Config::load(&file).unwrap();
        let paths = &c.tools.search_logs.unwrap().paths;
        assert_eq!(paths[0], dir.join("logs").display().to_string());
        assert_eq!(paths[1], "/abs");
        let missing = Config::load(&dir.join("nope.toml")).unwrap_err();
        assert!(matches!(missing, ConfigError::Unreadable { .. }));
        std::fs::remove_dir_all(&dir).ok();
    }
}
