//! `[limits.max_tokens]` of the configuration, as the agent runtime reads it: a plain value the
//! configuration deserializes into, so the runtime does not depend on the configuration reader.

use serde::{Deserialize, Serialize};

use super::AgentRole;

/// `[limits.max_tokens]`: the completion tokens each agent asks for. The defaults leave room
/// for every contract's document at its schema's list bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MaxTokensConfig {
    #[serde(default = "default_planner_tokens")]
    pub planner: u32,
    #[serde(default = "default_executor_tokens")]
    pub executor: u32,
    #[serde(default = "default_verifier_tokens")]
    pub verifier: u32,
    #[serde(default = "default_composer_tokens")]
    pub composer: u32,
}

fn default_planner_tokens() -> u32 {
    MaxTokensConfig::DEFAULT.planner
}
fn default_executor_tokens() -> u32 {
    MaxTokensConfig::DEFAULT.executor
}
fn default_verifier_tokens() -> u32 {
    MaxTokensConfig::DEFAULT.verifier
}
fn default_composer_tokens() -> u32 {
    MaxTokensConfig::DEFAULT.composer
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

    pub fn for_role(&self, role: AgentRole) -> u32 {
        match role {
            AgentRole::Planner => self.planner,
            AgentRole::Executor => self.executor,
            AgentRole::Verifier => self.verifier,
            AgentRole::Composer => self.composer,
        }
    }
}
