//! Scenarios (`diag_scenario_v1`): an incident environment (logs, an optional OpenMetrics
//! history, runbooks), a question with the clock it is asked at, and its label (root-cause
//! component and fault, the time window, the evidence that proves it, red herrings) plus a
//! scripted plan of tool calls that checks the environment. `docs/EVAL.md` describes the
//! format; `docs/schema/diag_scenario_v1.json` is its JSON Schema.
//!
//! Loading is strict: unknown keys are refused, and every error is one line naming the file
//! and the dotted key (`scenario scenarios/x/scenario.toml: key `label.window.start`: …`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use diag_ask::config::ConfigError;
use diag_core::clock::Timestamp;
use diag_tools::search_logs::LogZone;

/// The format name of a scenario file.
pub const SCENARIO_FORMAT: &str = "diag_scenario_v1";
/// The file that makes a folder a scenario.
pub const SCENARIO_FILE: &str = "scenario.toml";

/// The tools a scenario's environment can offer: the built-ins.
pub const SCENARIO_TOOLS: [&str; 4] = [
    "search_logs",
    "query_metrics",
    "search_runbooks",
    "current_time",
];

/// `scenario.toml`, as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub format: String,
    pub id: String,
    pub title: String,
    pub question: String,
    /// The run clock's "now" (RFC 3339).
    pub now: String,
    pub environment: Environment,
    pub label: Label,
    pub checks: Vec<Check>,
}

/// `[environment]`: paths relative to the scenario folder.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    pub logs: Vec<String>,
    pub time_zone: Option<String>,
    #[serde(default)]
    pub runbooks: Vec<String>,
    pub metrics: Option<String>,
}

/// `[label]`: what a correct answer names, and what proves it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Label {
    pub component: String,
    #[serde(default)]
    pub component_aliases: Vec<String>,
    pub fault: String,
    pub fault_keywords: Vec<String>,
    pub window: Window,
    pub evidence: Vec<Evidence>,
    #[serde(default)]
    pub red_herrings: Vec<RedHerring>,
}

/// When the fault was active (RFC 3339 times).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    pub start: String,
    pub end: String,
}

/// A tool and a text that a verified claim's quote must contain for a grounded answer.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    pub tool: String,
    pub text: String,
}

/// A component that looks guilty but is not the cause.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RedHerring {
    pub component: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub why: Option<String>,
}

/// One scripted tool call of the environment check.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    pub tool: String,
    #[serde(default = "empty_object")]
    pub arguments: Value,
    pub expect: String,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// A loaded, validated scenario: the file's content, its folder and the parsed times.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub dir: PathBuf,
    pub file: ScenarioFile,
    pub now: Timestamp,
    pub window_start: Timestamp,
    pub window_end: Timestamp,
}

/// Why a scenario cannot be used: one line naming the file (or folder) and the key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScenarioError {
    #[error("{path}: no such scenario folder")]
    Missing { path: String },
    #[error("{path}: not a scenario folder (no {SCENARIO_FILE}) and no scenario folders in it")]
    NotScenario { path: String },
    #[error("scenario {file}: cannot read: {reason}")]
    Unreadable { file: String, reason: String },
    #[error("scenario {file}: line {line}: {reason}")]
    Syntax {
        file: String,
        line: usize,
        reason: String,
    },
    #[error("scenario {file}: key `{key}`: {reason}")]
    Invalid {
        file: String,
        key: String,
        reason: String,
    },
}

impl Scenario {
    /// The scenario id (the folder's name).
    pub fn id(&self) -> &str {
        &self.file.id
    }

    /// A path of the scenario, relative to its folder.
    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.join(relative)
    }

    /// Loads and validates `DIR/scenario.toml`.
    pub fn load(dir: &Path) -> Result<Scenario, ScenarioError> {
        let path = dir.join(SCENARIO_FILE);
        let file_name = path.display().to_string();
        if !dir.is_dir() {
            return Err(ScenarioError::Missing {
                path: dir.display().to_string(),
            });
        }
        let text = std::fs::read_to_string(&path).map_err(|e| ScenarioError::Unreadable {
            file: file_name.clone(),
            reason: e.to_string(),
        })?;
        let file: ScenarioFile =
            diag_ask::config::deserialize_keyed(&text, &file_name).map_err(|e| match e {
                ConfigError::Unreadable { file, reason } => {
                    ScenarioError::Unreadable { file, reason }
                }
                ConfigError::Syntax { file, line, reason } => {
                    ScenarioError::Syntax { file, line, reason }
                }
                ConfigError::Invalid { file, key, reason } => {
                    ScenarioError::Invalid { file, key, reason }
                }
            })?;
        validate(dir, file, &file_name)
    }
}

/// The scenario folders that `paths` name, and the linked folders passed over.
#[derive(Debug, Default)]
pub struct Discovered {
    pub dirs: Vec<PathBuf>,
    /// Links to folders inside a named folder: never followed (the one walk's link policy,
    /// `diag_tools::walk`), reported so the operator sees why a scenario did not run.
    pub skipped: Vec<(PathBuf, diag_tools::walk::Skip)>,
}

/// The scenario folders that `paths` name: a folder holding `scenario.toml` is one; any
/// other folder contributes the scenario folders directly inside it, in name order.
pub fn discover(paths: &[PathBuf]) -> Result<Discovered, ScenarioError> {
    let mut out = Discovered::default();
    for p in paths {
        if !p.is_dir() {
            return Err(ScenarioError::Missing {
                path: p.display().to_string(),
            });
        }
        if p.join(SCENARIO_FILE).exists() {
            out.dirs.push(p.clone());
            continue;
        }
        let listed = diag_tools::walk::folders_in(p).map_err(|e| ScenarioError::Unreadable {
            file: p.display().to_string(),
            reason: e.to_string(),
        })?;
        let inner: Vec<PathBuf> = listed
            .folders
            .into_iter()
            .filter(|d| d.join(SCENARIO_FILE).exists())
            .collect();
        if inner.is_empty() {
            return Err(ScenarioError::NotScenario {
                path: p.display().to_string(),
            });
        }
        out.dirs.extend(inner);
        out.skipped.extend(listed.skipped);
    }
    Ok(out)
}

/// Whether `id` is lowercase letters, digits and inner single `-`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('-')
        && !id.ends_with('-')
        && !id.contains("--")
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn validate(dir: &Path, file: ScenarioFile, name: &str) -> Result<Scenario, ScenarioError> {
    let bad = |key: &str, reason: String| ScenarioError::Invalid {
        file: name.to_string(),
        key: key.to_string(),
        reason,
    };
    if file.format != SCENARIO_FORMAT {
        return Err(bad(
            "format",
            format!("must be \"{SCENARIO_FORMAT}\", not \"{}\"", file.format),
        ));
    }
    if !valid_id(&file.id) {
        return Err(bad(
            "id",
            "must be lowercase letters, digits and single inner `-`".into(),
        ));
    }
    let folder = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    if folder != file.id {
        return Err(bad(
            "id",
            format!("is \"{}\" but the folder is named \"{folder}\"", file.id),
        ));
    }
    for (key, value) in [
        ("title", &file.title),
        ("question", &file.question),
        ("label.component", &file.label.component),
        ("label.fault", &file.label.fault),
    ] {
        if value.trim().is_empty() {
            return Err(bad(key, "must not be blank".into()));
        }
    }
    let time = |key: &str, text: &str| {
        Timestamp::parse_rfc3339(text)
            .map_err(|e| bad(key, format!("not an RFC 3339 time (`{text}`): {e}")))
    };
    let now = time("now", &file.now)?;
    let window_start = time("label.window.start", &file.label.window.start)?;
    let window_end = time("label.window.end", &file.label.window.end)?;
    if window_start >= window_end {
        return Err(bad("label.window", "start must be before end".to_string()));
    }
    if window_start > now {
        return Err(bad(
            "label.window.start",
            "is after `now`: the fault cannot start after the question is asked".into(),
        ));
    }

    // The environment: every path exists inside the folder's reach.
    let env = &file.environment;
    if env.logs.is_empty() {
        return Err(bad(
            "environment.logs",
            "must name at least one path".into(),
        ));
    }
    for (i, p) in env.logs.iter().enumerate() {
        if !dir.join(p).exists() {
            return Err(bad(
                &format!("environment.logs[{i}]"),
                format!("`{p}` does not exist in the scenario folder"),
            ));
        }
    }
    for (i, p) in env.runbooks.iter().enumerate() {
        if !dir.join(p).is_dir() {
            return Err(bad(
                &format!("environment.runbooks[{i}]"),
                format!("`{p}` is not a folder in the scenario folder"),
            ));
        }
    }
    if let Some(m) = &env.metrics {
        if !dir.join(m).is_file() {
            return Err(bad(
                "environment.metrics",
                format!("`{m}` is not a file in the scenario folder"),
            ));
        }
    }
    if let Some(z) = &env.time_zone {
        LogZone::parse(z).map_err(|e| bad("environment.time_zone", e))?;
    }

    // The label.
    let l = &file.label;
    if l.fault_keywords.is_empty() {
        return Err(bad(
            "label.fault_keywords",
            "must hold at least one keyword".into(),
        ));
    }
    let blank = |key: &str, items: &[String]| {
        items
            .iter()
            .position(|s| s.trim().is_empty())
            .map(|i| bad(&format!("{key}[{i}]"), "must not be blank".into()))
    };
    if let Some(e) = blank("label.fault_keywords", &l.fault_keywords) {
        return Err(e);
    }
    if let Some(e) = blank("label.component_aliases", &l.component_aliases) {
        return Err(e);
    }
    let offered = |tool: &str| match tool {
        "search_logs" | "current_time" => true,
        "query_metrics" => env.metrics.is_some(),
        "search_runbooks" => !env.runbooks.is_empty(),
        _ => false,
    };
    let why_not = |tool: &str| {
        if SCENARIO_TOOLS.contains(&tool) {
            format!("`{tool}` is not offered: the environment has no source for it")
        } else {
            format!(
                "unknown tool `{tool}` (scenario tools: {})",
                SCENARIO_TOOLS.join(", ")
            )
        }
    };
    if l.evidence.is_empty() {
        return Err(bad("label.evidence", "must hold at least one entry".into()));
    }
    for (i, e) in l.evidence.iter().enumerate() {
        if !offered(&e.tool) {
            return Err(bad(&format!("label.evidence[{i}].tool"), why_not(&e.tool)));
        }
        if e.text.trim().is_empty() {
            return Err(bad(
                &format!("label.evidence[{i}].text"),
                "must not be blank".into(),
            ));
        }
    }
    let own_names: Vec<String> = std::iter::once(&l.component)
        .chain(&l.component_aliases)
        .map(|s| s.trim().to_lowercase())
        .collect();
    for (i, r) in l.red_herrings.iter().enumerate() {
        if r.component.trim().is_empty() {
            return Err(bad(
                &format!("label.red_herrings[{i}].component"),
                "must not be blank".into(),
            ));
        }
        if let Some(e) = blank(&format!("label.red_herrings[{i}].aliases"), &r.aliases) {
            return Err(e);
        }
        let clash = std::iter::once(&r.component)
            .chain(&r.aliases)
            .find(|n| own_names.contains(&n.trim().to_lowercase()));
        if let Some(n) = clash {
            return Err(bad(
                &format!("label.red_herrings[{i}]"),
                format!("`{n}` is also a name of the root-cause component"),
            ));
        }
    }

    // The checks: offered tools, object arguments, and at least one per evidence tool.
    if file.checks.is_empty() {
        return Err(bad(
            "checks",
            "must hold at least one [[checks]] step".into(),
        ));
    }
    for (i, c) in file.checks.iter().enumerate() {
        if !offered(&c.tool) {
            return Err(bad(&format!("checks[{i}].tool"), why_not(&c.tool)));
        }
        if !c.arguments.is_object() {
            return Err(bad(
                &format!("checks[{i}].arguments"),
                "must be a table".into(),
            ));
        }
        if c.expect.trim().is_empty() {
            return Err(bad(
                &format!("checks[{i}].expect"),
                "must not be blank".into(),
            ));
        }
    }
    for (i, e) in l.evidence.iter().enumerate() {
        if !file.checks.iter().any(|c| c.tool == e.tool) {
            return Err(bad(
                &format!("label.evidence[{i}]"),
                format!(
                    "no [[checks]] step calls `{}`: the checks must show this evidence is findable",
                    e.tool
                ),
            ));
        }
    }
    Ok(Scenario {
        dir: dir.to_path_buf(),
        file,
        now,
        window_start,
        window_end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_lowercase_words_joined_by_dashes() {
        for ok in ["db-pool-batch-job", "a", "x2", "checkout-502-payment-pool"] {
            assert!(valid_id(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a--b", "Db", "a_b", "a b", "é"] {
            assert!(!valid_id(bad), "{bad}");
        }
    }
}
