//! The four agent prompts, versioned files under `prompts/` embedded in the binary, and the
//! audit entry every model call records (prompt id, version, sha256, size).

use crate::hash::sha256_hex;

use super::AgentRole;

/// An embedded system prompt.
#[derive(Debug, Clone, Copy)]
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
    version: 2,
    text: include_str!("../../../../prompts/composer.v2.md"),
};

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
            (AgentRole::Composer, "composer_answer_v1"),
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
}
