//! The typed state of one diagnosis run: the fields each node reads and writes (SPEC §1.1),
//! the per-stage retry counters, and the orchestration events.

use serde::{Deserialize, Serialize};

use super::status::{AgentStatus, ExecutorStatus, FallbackKind, Status};
use crate::graph::{Event, GraphState};
use crate::protocol::grounding::TokenKind;
use crate::protocol::{
    ExecutorOutput, GateStatus, GatekeeperRaw, Plan, PlannerMode, RetryContext, Verdict,
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
/// kind of the first such token (its kind only: the token is model text).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerGrounding {
    pub tokens_checked: u32,
    pub tokens_unbound: u32,
    pub first_unbound_kind: Option<TokenKind>,
}

/// Technical retries used in the current evidence round, per stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryCounters {
    pub planner: u32,
    pub verifier: u32,
    pub composer: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnosisState {
    pub context: DiagnosisContext,
    /// 1 for the first evidence round, 2 after Retry Prepare.
    pub round: u32,
    pub planner_mode: PlannerMode,

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

    pub retry_context: Option<RetryContext>,
    pub evidence_retry_count: u32,

    /// The Composer's input, serialized once so a technical retry sends the very same bytes.
    #[serde(default)]
    pub composer_input: Option<String>,
    pub final_answer: Option<String>,
    pub composer_status: Option<AgentStatus>,
    /// The token check of the Composer's last parsed answer (SPEC §2.9).
    #[serde(default)]
    pub answer_grounding: Option<AnswerGrounding>,
    /// Verifier free-text items (missing information, recommendations) left out of the
    /// material an answer is written from because they hold a salient token that is in
    /// neither the question nor the allowed claims and their evidence.
    #[serde(default)]
    pub dropped_items: u32,
    pub degraded: bool,
    pub fallback_kind: Option<FallbackKind>,

    pub retries: RetryCounters,
    pub events: Vec<Event<Status>>,
}

impl DiagnosisState {
    /// The initial state of a run: the question only, mode NORMAL, zero counters, no events.
    pub fn new(question: impl Into<String>) -> Self {
        let question = question.into();
        DiagnosisState {
            context: DiagnosisContext {
                original_question: question.clone(),
                question,
            },
            round: 1,
            planner_mode: PlannerMode::Normal,
            plan: None,
            planner_status: None,
            executor_output: None,
            executor_status: None,
            gatekeeper_raw: None,
            gatekeeper_status: None,
            ceiling: None,
            verified_executor_output: None,
            verified_evidence: Vec::new(),
            verifier_input: None,
            verifier_status: None,
            verifier_model_verdict: None,
            effective_verdict: None,
            verifier_result: None,
            retry_context: None,
            evidence_retry_count: 0,
            composer_input: None,
            final_answer: None,
            composer_status: None,
            answer_grounding: None,
            dropped_items: 0,
            degraded: false,
            fallback_kind: None,
            retries: RetryCounters::default(),
            events: Vec::new(),
        }
    }

    /// Enters the evidence-retry round: round 2, EVIDENCE_GAP_ONLY mode, technical counters
    /// back to zero, and every round-scoped output cleared so the rounds never mix. The retry
    /// context built by Retry Prepare is the only thing carried over.
    pub fn begin_evidence_round(&mut self) {
        self.round += 1;
        self.planner_mode = PlannerMode::EvidenceGapOnly;
        self.retries = RetryCounters::default();
        self.plan = None;
        self.planner_status = None;
        self.executor_output = None;
        self.executor_status = None;
        self.gatekeeper_raw = None;
        self.gatekeeper_status = None;
        self.ceiling = None;
        self.verified_executor_output = None;
        self.verified_evidence.clear();
        self.verifier_input = None;
        self.verifier_status = None;
        self.verifier_model_verdict = None;
        self.effective_verdict = None;
        self.verifier_result = None;
        self.composer_input = None;
        self.answer_grounding = None;
        self.dropped_items = 0;
    }

    /// The executed node sequence, from the events.
    pub fn path(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.node.as_str()).collect()
    }
}

impl GraphState<Status> for DiagnosisState {
    fn round(&self) -> u32 {
        self.round
    }

    fn push_event(&mut self, event: Event<Status>) {
        self.events.push(event);
    }
}
