//! The bounds of one run, `[limits]` of the configuration: one type with one set of defaults
//! and one set of rules, read from the configuration file, recorded in the run file and the
//! store row, and handed to the agent runtime (turns, tool calls, completion tokens) and the
//! tool registry (timeout, output size).

use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

/// `[limits]`: a member left out takes its default; a value below its minimum, or a member
/// this build does not know, is refused where it is read (the configuration file or the run
/// file), naming the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Model calls in one Executor invocation.
    #[serde(deserialize_with = "at_least_1_u32")]
    pub max_turns: u32,
    /// Tool calls in one Executor invocation; further calls are recorded as blocked.
    #[serde(deserialize_with = "at_least_1_u32")]
    pub max_tool_calls: u32,
    /// Completion tokens each agent asks for (`max_tokens`).
    #[serde(deserialize_with = "crate::de::object")]
    pub max_tokens: MaxTokensConfig,
    /// One tool call's time limit.
    #[serde(deserialize_with = "at_least_1_u64")]
    pub tool_timeout_secs: u64,
    /// One tool output's serialized size (compact JSON).
    #[serde(deserialize_with = "at_least_1024")]
    pub max_output_bytes: u64,
    /// The whole live run's time limit, every model call, tool call and retry included: a
    /// run still going then is stopped and stored FAILED (`deadline: …`). A replay, which
    /// waits on nothing, runs without it.
    #[serde(deserialize_with = "at_least_1_u64")]
    pub run_timeout_secs: u64,
}

impl Limits {
    /// The defaults: the limits of a configuration or a run file that sets none.
    pub const DEFAULT: Limits = Limits {
        max_turns: 8,
        max_tool_calls: 12,
        max_tokens: MaxTokensConfig::DEFAULT,
        tool_timeout_secs: 30,
        max_output_bytes: 64 * 1024,
        run_timeout_secs: 600,
    };

    /// The smallest `max_output_bytes`: room for a refusal's message and one match.
    pub const MIN_OUTPUT_BYTES: u64 = 1024;

    /// The smallest completion-token limit of an agent.
    pub const MIN_MAX_TOKENS: u32 = 64;

    /// The whole run's time limit ([`Limits::run_timeout_secs`]).
    pub fn run_timeout(&self) -> Duration {
        Duration::from_secs(self.run_timeout_secs)
    }

    /// The tool registry's share: one call's time limit and output size.
    pub fn tools(&self) -> ToolLimits {
        ToolLimits {
            timeout: Duration::from_secs(self.tool_timeout_secs),
            max_output_bytes: usize::try_from(self.max_output_bytes).unwrap_or(usize::MAX),
        }
    }
}

/// The limits of openspec/specs/tools/spec.md, as the tool registry applies them: the tool
/// share of [`Limits`] (`Limits::tools`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolLimits {
    /// Per call.
    pub timeout: Duration,
    /// Serialized (compact JSON) size of one output.
    pub max_output_bytes: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Limits::DEFAULT.tools()
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// `[limits.max_tokens]`: the completion tokens each agent asks for. The defaults leave room
/// for every contract's document at its schema's list bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MaxTokensConfig {
    #[serde(deserialize_with = "at_least_64")]
    pub planner: u32,
    #[serde(deserialize_with = "at_least_64")]
    pub executor: u32,
    #[serde(deserialize_with = "at_least_64")]
    pub verifier: u32,
    #[serde(deserialize_with = "at_least_64")]
    pub composer: u32,
}

impl Default for MaxTokensConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl MaxTokensConfig {
    pub const DEFAULT: MaxTokensConfig = MaxTokensConfig {
        planner: 1024,
        executor: 2048,
        verifier: 1536,
        composer: 1536,
    };
}

fn at_least<'de, D, N>(d: D, minimum: N) -> Result<N, D::Error>
where
    D: Deserializer<'de>,
    N: Deserialize<'de> + PartialOrd + std::fmt::Display,
{
    let n = N::deserialize(d)?;
    if n < minimum {
        return Err(D::Error::custom(format!("must be at least {minimum}")));
    }
    Ok(n)
}

fn at_least_1_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    at_least(d, 1)
}

fn at_least_1_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    at_least(d, 1)
}

fn at_least_1024<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    at_least(d, Limits::MIN_OUTPUT_BYTES)
}

fn at_least_64<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    at_least(d, Limits::MIN_MAX_TOKENS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_left_out_take_the_defaults_and_minimums_are_enforced() {
        let l: Limits = serde_json::from_str(r#"{"max_turns": 3}"#).unwrap();
        assert_eq!(
            l,
            Limits {
                max_turns: 3,
                ..Limits::DEFAULT
            }
        );
        let l: Limits = serde_json::from_str(r#"{"max_tokens": {"planner": 64}}"#).unwrap();
        assert_eq!(l.max_tokens.planner, 64);
        assert_eq!(l.max_tokens.executor, MaxTokensConfig::DEFAULT.executor);
        for (doc, said) in [
            (r#"{"max_turns": 0}"#, "must be at least 1"),
            (r#"{"max_tool_calls": 0}"#, "must be at least 1"),
            (r#"{"tool_timeout_secs": 0}"#, "must be at least 1"),
            (r#"{"run_timeout_secs": 0}"#, "must be at least 1"),
            (r#"{"max_output_bytes": 1023}"#, "must be at least 1024"),
            (r#"{"max_tokens": {"composer": 63}}"#, "must be at least 64"),
            (r#"{"max_turnz": 3}"#, "unknown field `max_turnz`"),
            (
                r#"{"max_tokens": [1024]}"#,
                "invalid type: sequence, expected",
            ),
        ] {
            let e = serde_json::from_str::<Limits>(doc).unwrap_err().to_string();
            assert!(e.starts_with(said), "{doc}: {e}");
        }
        let tools = Limits::DEFAULT.tools();
        assert_eq!(tools.timeout, Duration::from_secs(30));
        assert_eq!(tools.max_output_bytes, 65536);
        assert_eq!(Limits::DEFAULT.run_timeout(), Duration::from_secs(600));
        let l: Limits = serde_json::from_str(r#"{"run_timeout_secs": 90}"#).unwrap();
        assert_eq!(l.run_timeout(), Duration::from_secs(90));
    }
}
