//! The four agent prompts, versioned files under `prompts/` embedded in the binary, and the
//! audit entry every model call records (prompt id, version, sha256, size).
//!
//! A live run sends each agent its newest prompt. An earlier version stays embedded while a
//! run file can name it: a replay builds each request with the version its recording was
//! made with (openspec/specs/run-files/spec.md), so an older run file replays byte for byte.

use crate::hash::sha256_hex;
use crate::protocol::ComposerContract;

use super::AgentRole;

/// An embedded system prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prompt {
    pub id: &'static str,
    pub version: u32,
    pub text: &'static str,
}

const PLANNER: Prompt = Prompt {
    id: "planner",
    version: 3,
    text: include_str!("../../../../prompts/planner.v3.md"),
};
const EXECUTOR: Prompt = Prompt {
    id: "executor",
    version: 3,
    text: include_str!("../../../../prompts/executor.v3.md"),
};
const VERIFIER: Prompt = Prompt {
    id: "verifier",
    version: 2,
    text: include_str!("../../../../prompts/verifier.v2.md"),
};
const COMPOSER: Prompt = Prompt {
    id: "composer",
    version: 3,
    text: include_str!("../../../../prompts/composer.v3.md"),
};
/// The Composer's prompt for `composer_answer_v1`, kept for run files recorded with it.
const COMPOSER_V2: Prompt = Prompt {
    id: "composer",
    version: 2,
    text: include_str!("../../../../prompts/composer.v2.md"),
};

/// Every embedded prompt, the newest of each agent first.
const ALL: [&Prompt; 5] = [&PLANNER, &EXECUTOR, &VERIFIER, &COMPOSER, &COMPOSER_V2];

/// The user message that asks for the Executor's evidence document in its evidence turn,
/// after the tool loop (openspec/specs/agent-runtime/spec.md). The Executor's own prompt
/// stays the system prompt, so the turn's audit names that prompt.
pub const EXECUTOR_EVIDENCE_TURN: &str =
    include_str!("../../../../prompts/executor-evidence-turn.v1.md");

/// The prompt of an agent.
pub fn prompt(role: AgentRole) -> &'static Prompt {
    match role {
        AgentRole::Planner => &PLANNER,
        AgentRole::Executor => &EXECUTOR,
        AgentRole::Verifier => &VERIFIER,
        AgentRole::Composer => &COMPOSER,
    }
}

/// The prompt that explains the Composer's `contract`.
pub fn composer(contract: ComposerContract) -> &'static Prompt {
    match contract {
        ComposerContract::V1 => &COMPOSER_V2,
        ComposerContract::V2 => &COMPOSER,
    }
}

/// Version `version` of an agent's prompt, when this diag embeds it.
pub fn prompt_version(role: AgentRole, version: u32) -> Option<&'static Prompt> {
    ALL.into_iter()
        .find(|p| p.id == role.as_str() && p.version == version)
}

/// The versions of an agent's prompt this diag embeds, newest first.
pub fn versions(role: AgentRole) -> Vec<u32> {
    ALL.iter()
        .filter(|p| p.id == role.as_str())
        .map(|p| p.version)
        .collect()
}

/// Which embedded version of an agent's prompt `text` is (a recorded request's system
/// message); `None` when it is none of them.
pub fn version_of(role: AgentRole, text: &str) -> Option<u32> {
    ALL.iter()
        .find(|p| p.id == role.as_str() && p.text == text)
        .map(|p| p.version)
}

pub use diag_records::step::PromptAudit;

impl Prompt {
    pub fn audit(&self) -> PromptAudit {
        PromptAudit {
            prompt_id: self.id.to_string(),
            version: self.version,
            sha256: sha256_hex(self.text.as_bytes()),
            size: self.text.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prompt_names_its_contract_and_audits_itself() {
        for (role, schema) in [
            (AgentRole::Planner, "planner_plan_v1"),
            (AgentRole::Executor, "executor_evidence_v2"),
            (AgentRole::Verifier, "verifier_verdict_v1"),
            (AgentRole::Composer, "composer_answer_v2"),
        ] {
            let p = prompt(role);
            assert!(p.text.contains(schema), "{} prompt names {schema}", p.id);
            let a = p.audit();
            assert_eq!(a.size, p.text.len());
            assert_eq!(a.sha256.len(), 64);
            assert_eq!(a.prompt_id, role.as_str());
        }
        // The content-grounding rules the deterministic checks enforce are stated to the
        // agents that must follow them (openspec/specs/verified-evidence/spec.md).
        let composer = prompt(AgentRole::Composer).text;
        for rule in ["`[c1]`", "exactly", "is refused", "cite at least one"] {
            assert!(composer.contains(rule), "the composer prompt says {rule}");
        }
        // The derivation rules, with every operation of the closed set by name.
        for rule in [
            "`derivations`",
            "`[d1]`",
            "exactly",
            "rounded to the digits you write",
        ] {
            assert!(composer.contains(rule), "the composer prompt says {rule}");
        }
        for op in crate::protocol::derivation::Op::ALL {
            assert!(
                composer.contains(&format!("`{}`", op.name())),
                "the composer prompt names {}",
                op.name()
            );
        }
        let verifier = prompt(AgentRole::Verifier).text;
        for rule in [
            "`supported: true`",
            "`contradicted`",
            "A PASS allows at least one",
            "dropped",
        ] {
            assert!(verifier.contains(rule), "the verifier prompt says {rule}");
        }
    }

    #[test]
    fn each_composer_contract_has_its_embedded_prompt_and_every_version_is_found_by_its_text() {
        for contract in [ComposerContract::V1, ComposerContract::V2] {
            let p = composer(contract);
            assert_eq!(p.version, contract.prompt_version());
            assert!(
                p.text.contains(contract.schema()),
                "v{} names {}",
                p.version,
                contract.schema()
            );
            assert_eq!(
                ComposerContract::from_prompt_version(p.version),
                Some(contract)
            );
            assert_eq!(prompt_version(AgentRole::Composer, p.version), Some(p));
        }
        assert_eq!(
            composer(ComposerContract::CURRENT),
            prompt(AgentRole::Composer)
        );
        assert!(!composer(ComposerContract::V1).text.contains("derivations"));
        assert_eq!(versions(AgentRole::Composer), [3, 2]);
        for role in [AgentRole::Planner, AgentRole::Executor, AgentRole::Verifier] {
            assert_eq!(versions(role), [prompt(role).version], "{role}");
        }
        for p in ALL {
            let role = [
                AgentRole::Planner,
                AgentRole::Executor,
                AgentRole::Verifier,
                AgentRole::Composer,
            ]
            .into_iter()
            .find(|r| r.as_str() == p.id)
            .unwrap();
            assert_eq!(version_of(role, p.text), Some(p.version));
        }
        assert_eq!(
            version_of(AgentRole::Composer, "You are someone else."),
            None
        );
        assert_eq!(prompt_version(AgentRole::Planner, 2), None);
    }
}
