//! The typed state of one diagnosis run: the fields each node reads and writes (openspec/specs/diagnosis-graph/spec.md),
//! the per-stage retry counters, and the orchestration events.

use serde::{Deserialize, Serialize};

use super::status::{AgentStatus, ExecutorStatus, FallbackKind, Status};
use crate::agent::AgentFailure;
use crate::graph::{Event, GraphState};
use crate::protocol::derivation::CheckedDerivation;
use crate::protocol::grounding::{TokenKind, Unbound};
use crate::protocol::{
    ExecutorOutput, GateStatus, GatekeeperRaw, Plan, PlannerMode, RetryContext, RunClock, Verdict,
    VerifiedEvidence, VerifiedExecutorOutput, VerifierResult,
};

/// The question being diagnosed. Conversation history never enters graph state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnosisContext {
    pub question: String,
    pub original_question: String,
}

/// What the token check found in one Composer answer: how many salient tokens it checked,
/// how many were in neither the question nor the allowed claims and their evidence, and the
/// first such token with its kind and line (bounded, control characters dropped).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerGrounding {
    pub tokens_checked: u32,
    pub tokens_unbound: u32,
    pub first_unbound_kind: Option<TokenKind>,
    #[serde(default)]
    pub first_unbound: Option<Unbound>,
}

/// Technical retries used in the current evidence round, per stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryCounters {
    pub planner: u32,
    pub verifier: u32,
    pub composer: u32,
}

/// Everything that belongs to one evidence round: the outputs of Planner, Executor,
/// Gatekeeper, Verifier and the Composer's input, and the technical retry counters.
/// [`DiagnosisState::begin_evidence_round`] replaces it whole with `RoundState::default()`,
/// so a field added here can never leak from round 1 into round 2.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundState {
    pub plan: Option<Plan>,
    pub planner_status: Option<AgentStatus>,

    pub executor_output: Option<ExecutorOutput>,
    pub executor_status: Option<ExecutorStatus>,

    pub gatekeeper_raw: Option<GatekeeperRaw>,
    pub gatekeeper_status: Option<GateStatus>,
    pub ceiling: Option<Verdict>,

    pub verified_executor_output: Option<VerifiedExecutorOutput>,
    pub verified_evidence: Vec<VerifiedEvidence>,

    /// The Verifier's input, serialized once per round so a technical retry sends the very
    /// same bytes.
    #[serde(default)]
    pub verifier_input: Option<String>,
    pub verifier_status: Option<AgentStatus>,
    pub verifier_model_verdict: Option<Verdict>,
    pub effective_verdict: Option<Verdict>,
    pub verifier_result: Option<VerifierResult>,

    /// The Composer's input, serialized once so a technical retry sends the very same bytes.
    #[serde(default)]
    pub composer_input: Option<String>,
    /// The token check of the Composer's last parsed answer
    /// (openspec/specs/verified-evidence/spec.md).
    #[serde(default)]
    pub answer_grounding: Option<AnswerGrounding>,
    /// The derivations of the Composer's accepted answer, each checked: a computed value and
    /// its arithmetic on observed operands (openspec/specs/verified-evidence/spec.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answer_derivations: Vec<CheckedDerivation>,
    /// Verifier free-text items (missing information, recommendations) left out of the
    /// material an answer is written from because they hold a salient token that is in
    /// neither the question nor the allowed claims and their evidence.
    #[serde(default)]
    pub dropped_items: u32,

    /// Why the Composer's last answer of this round was refused, as its technical retry
    /// tells the model (the violation names the first unbound token and its line).
    #[serde(default)]
    pub composer_refusal: Option<String>,

    /// Technical retries used in this round, per stage.
    pub retries: RetryCounters,
}

/// The state of one run. Run-scoped fields live here; everything scoped to one evidence
/// round lives in [`RoundState`] (`round`), flattened so the serialized shape is one object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnosisState {
    pub context: DiagnosisContext,
    /// The run's clock, from its recorded start: every agent's declared input carries it as
    /// `run_clock`.
    pub run_clock: RunClock,
    /// 1 for the first evidence round, 2 after Retry Prepare.
    #[serde(rename = "round")]
    pub round_number: u32,
    pub planner_mode: PlannerMode,

    /// The current evidence round's outputs and counters.
    #[serde(flatten)]
    pub round: RoundState,

    pub retry_context: Option<RetryContext>,
    pub evidence_retry_count: u32,

    pub final_answer: Option<String>,
    pub composer_status: Option<AgentStatus>,
    pub degraded: bool,
    pub fallback_kind: Option<FallbackKind>,

    pub events: Vec<Event<Status>>,

    /// The last agent attempt's failure (the endpoint's message, or diag's), `None` after an
    /// attempt that got a reply; the Fallback explains a failed stage with it.
    #[serde(default)]
    pub last_failure: Option<AgentFailure>,
}

impl DiagnosisState {
    /// The initial state of a run: the question and the run's clock only, mode NORMAL, zero
    /// counters, no events.
    pub fn new(question: impl Into<String>, run_clock: RunClock) -> Self {
        let question = question.into();
        DiagnosisState {
            context: DiagnosisContext {
                original_question: question.clone(),
                question,
            },
            run_clock,
            round_number: 1,
            planner_mode: PlannerMode::Normal,
            round: RoundState::default(),
            retry_context: None,
            evidence_retry_count: 0,
            final_answer: None,
            composer_status: None,
            degraded: false,
            fallback_kind: None,
            events: Vec::new(),
            last_failure: None,
        }
    }

    /// Enters the evidence-retry round: round 2, EVIDENCE_GAP_ONLY mode, and a fresh
    /// [`RoundState`] (technical counters at zero, every round-scoped output gone) so the
    /// rounds never mix. The retry context built by Retry Prepare is the only thing carried
    /// over.
    pub fn begin_evidence_round(&mut self) {
        self.round_number += 1;
        self.planner_mode = PlannerMode::EvidenceGapOnly;
        self.round = RoundState::default();
    }

    /// The executed node sequence, from the events.
    pub fn path(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.node.as_str()).collect()
    }
}

impl GraphState<Status> for DiagnosisState {
    fn round(&self) -> u32 {
        self.round_number
    }

    fn push_event(&mut self, event: Event<Status>) {
        self.events.push(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::VerifiedExecutorOutput;

    /// A round with every field set to something other than its default. The literal names
    /// every field (no `..Default::default()`), so a field added to `RoundState` does not
    /// compile here until it is filled too.
    fn filled_round() -> RoundState {
        RoundState {
            plan: Some(Plan {
                mode: PlannerMode::Normal,
                hypotheses: Vec::new(),
                steps: Vec::new(),
            }),
            planner_status: Some(AgentStatus::Completed),
            executor_output: Some(ExecutorOutput::default()),
            executor_status: Some(ExecutorStatus::Completed),
            gatekeeper_raw: Some(GatekeeperRaw::default()),
            gatekeeper_status: Some(GateStatus::Pass),
            ceiling: Some(Verdict::Pass),
            verified_executor_output: Some(VerifiedExecutorOutput::default()),
            verified_evidence: vec![VerifiedEvidence {
                claim_id: "c1".into(),
                source_invocation_id: "inv-1".into(),
                tool_name: "query_metrics".into(),
                raw_path: "/result/0".into(),
                matched_text: "502".into(),
            }],
            verifier_input: Some("{}".into()),
            verifier_status: Some(AgentStatus::Completed),
            verifier_model_verdict: Some(Verdict::Pass),
            effective_verdict: Some(Verdict::Pass),
            verifier_result: Some(VerifierResult {
                verdict: Verdict::Pass,
                groundedness: 1.0,
                claim_checks: Vec::new(),
                facts: Vec::new(),
                allowed_claims: Vec::new(),
                missing_information: Vec::new(),
                recommendations: Vec::new(),
                rationale: String::new(),
            }),
            composer_input: Some("{}".into()),
            answer_grounding: Some(AnswerGrounding::default()),
            answer_derivations: vec![CheckedDerivation::new(
                "d1",
                "percentage",
                "96 %",
                "48 / 50 × 100",
                vec!["c6".into(), "c4".into()],
            )],
            composer_refusal: Some("the answer states 99th, which no evidence shows".into()),
            dropped_items: 1,
            retries: RetryCounters {
                planner: 1,
                verifier: 1,
                composer: 1,
            },
        }
    }

    #[test]
    fn the_filled_round_sets_every_field() {
        let filled = serde_json::to_value(filled_round()).unwrap();
        let fresh = serde_json::to_value(RoundState::default()).unwrap();
        let (filled, fresh) = (filled.as_object().unwrap(), fresh.as_object().unwrap());
        // A fresh round leaves out only what is skipped when empty (`answer_derivations`).
        let mut expected: Vec<&String> = fresh.keys().collect();
        let skipped = "answer_derivations".to_string();
        expected.push(&skipped);
        expected.sort();
        assert_eq!(filled.keys().collect::<Vec<_>>(), expected);
        for (key, value) in filled {
            assert_ne!(Some(value), fresh.get(key), "{key} is left at its default");
        }
    }

    #[test]
    fn no_round_field_survives_begin_evidence_round() {
        let mut state = DiagnosisState::new(
            "why does checkout return 502?",
            crate::protocol::RunClock::at(crate::clock::Timestamp::from_unix_ms(0)),
        );
        state.round = filled_round();
        state.begin_evidence_round();
        assert_eq!(state.round, RoundState::default());
        assert_eq!(state.round_number, 2);
        assert_eq!(state.planner_mode, PlannerMode::EvidenceGapOnly);
    }

    #[test]
    fn run_fields_survive_begin_evidence_round() {
        let mut state = DiagnosisState::new(
            "why does checkout return 502?",
            crate::protocol::RunClock::at(crate::clock::Timestamp::from_unix_ms(0)),
        );
        state.round = filled_round();
        state.evidence_retry_count = 1;
        state.degraded = true;
        let before = state.clone();
        state.begin_evidence_round();
        let mut expected = before;
        expected.round = RoundState::default();
        expected.round_number = 2;
        expected.planner_mode = PlannerMode::EvidenceGapOnly;
        assert_eq!(state, expected);
    }

    #[test]
    fn the_serialized_state_keeps_its_flat_shape() {
        let value = serde_json::to_value(DiagnosisState::new(
            "q",
            crate::protocol::RunClock::at(crate::clock::Timestamp::from_unix_ms(0)),
        ))
        .unwrap();
        assert_eq!(value["round"], 1);
        assert!(
            value.get("plan").is_some(),
            "round fields are flattened: {value}"
        );
        assert!(value.get("retries").is_some());
    }
}
