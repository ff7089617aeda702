//! The diagnosis topology of openspec/specs/diagnosis-graph/spec.md, written once as data: which outcomes each node may
//! return, where each leads, which counter bounds each cycle, and which effect each edge has.
//! The routing table lives here and nowhere else; `diag graph` draws it from the compiled form.

use std::sync::Arc;

use super::state::DiagnosisState;
use super::status::{FallbackKind, Status};
use crate::graph::{
    Branch, CompileError, CompiledGraph, Counter, Effect, GraphBuilder, Node, NodeKind, Target,
};
use crate::protocol::Verdict;

pub const PLANNER: &str = "planner";
pub const EXECUTOR: &str = "executor";
pub const GATEKEEPER: &str = "gatekeeper";
pub const VERIFIED_INPUT: &str = "verified_input";
pub const VERIFIER: &str = "verifier";
pub const RETRY_PREPARE: &str = "retry_prepare";
pub const COMPOSER: &str = "composer";
pub const FALLBACK: &str = "fallback";

/// Every node, in execution order of the straight path.
pub const NODES: [&str; 8] = [
    PLANNER,
    EXECUTOR,
    GATEKEEPER,
    VERIFIED_INPUT,
    VERIFIER,
    RETRY_PREPARE,
    COMPOSER,
    FALLBACK,
];

/// The longest legal path: two rounds of planner ×2, executor, gatekeeper, verified_input,
/// verifier ×2, then retry_prepare between them and composer ×2 and fallback at the end.
pub const STEP_LIMIT: u32 = 18;

/// Technical retries each agent stage may use per evidence round.
pub const TECHNICAL_RETRIES: u32 = 1;
/// Evidence retries per run.
pub const EVIDENCE_RETRIES: u32 = 1;

pub type DiagnosisNode = Arc<dyn Node<DiagnosisState, Status>>;
pub type DiagnosisGraph = CompiledGraph<DiagnosisState, Status>;

/// The eight node implementations the topology is compiled over.
pub struct DiagnosisNodes {
    pub planner: DiagnosisNode,
    pub executor: DiagnosisNode,
    pub gatekeeper: DiagnosisNode,
    pub verified_input: DiagnosisNode,
    pub verifier: DiagnosisNode,
    pub retry_prepare: DiagnosisNode,
    pub composer: DiagnosisNode,
    pub fallback: DiagnosisNode,
}

const AGENT_OUTCOMES: [Status; 5] = [
    Status::Completed,
    Status::InvalidOutput,
    Status::RetryableFailed,
    Status::NonRetryableFailed,
    Status::Unknown,
];
const EXECUTOR_OUTCOMES: [Status; 5] = [
    Status::Completed,
    Status::Failed,
    Status::ToolBlocked,
    Status::InvalidOutput,
    Status::Unknown,
];
const GATEKEEPER_OUTCOMES: [Status; 3] = [Status::Pass, Status::LowConfid, Status::Reject];
const TECHNICAL_FAILURES: [Status; 2] = [Status::InvalidOutput, Status::RetryableFailed];
const TERMINAL_FAILURES: [Status; 2] = [Status::NonRetryableFailed, Status::Unknown];

const PLANNER_RETRIES: Counter<DiagnosisState> = Counter {
    name: "planner_retries",
    get: |s| s.round.retries.planner,
    bump: |s| s.round.retries.planner += 1,
};
const VERIFIER_RETRIES: Counter<DiagnosisState> = Counter {
    name: "verifier_retries",
    get: |s| s.round.retries.verifier,
    bump: |s| s.round.retries.verifier += 1,
};
const COMPOSER_RETRIES: Counter<DiagnosisState> = Counter {
    name: "composer_retries",
    get: |s| s.round.retries.composer,
    bump: |s| s.round.retries.composer += 1,
};
const EVIDENCE_RETRY_COUNT: Counter<DiagnosisState> = Counter {
    name: "evidence_retry_count",
    get: |s| s.evidence_retry_count,
    bump: |s| s.evidence_retry_count += 1,
};

const PRE_VERIFICATION: Effect<DiagnosisState> = Effect {
    name: "pre-verification",
    apply: |s| s.fallback_kind = Some(FallbackKind::PreVerification),
};
const POST_VERIFICATION: Effect<DiagnosisState> = Effect {
    name: "post-verification",
    apply: |s| s.fallback_kind = Some(FallbackKind::PostVerification),
};
const EVIDENCE_ROUND: Effect<DiagnosisState> = Effect {
    name: "mode EVIDENCE_GAP_ONLY, round + 1, technical retries reset",
    apply: DiagnosisState::begin_evidence_round,
};

fn pre_fallback() -> Branch<DiagnosisState> {
    Branch::otherwise(Target::Node(FALLBACK)).effect(PRE_VERIFICATION)
}

fn post_fallback() -> Branch<DiagnosisState> {
    Branch::otherwise(Target::Node(FALLBACK)).effect(POST_VERIFICATION)
}

fn technical_retry(node: &'static str, counter: Counter<DiagnosisState>) -> Branch<DiagnosisState> {
    Branch::counted(
        "technical retry",
        counter,
        TECHNICAL_RETRIES,
        Target::Node(node),
    )
}

/// LOW_CONFID continues only with at least one accepted claim (all its bindings passed and
/// its content bound, openspec/specs/verified-evidence/spec.md); a passed binding of a refused claim does not count.
pub fn has_accepted_claim(s: &DiagnosisState) -> bool {
    s.round
        .gatekeeper_raw
        .as_ref()
        .is_some_and(|raw| !raw.accepted_claims().is_empty())
}

/// A completed Verifier whose effective verdict is REJECT, or missing (fail closed).
pub fn effective_reject(s: &DiagnosisState) -> bool {
    s.round
        .effective_verdict
        .is_none_or(|v| v == Verdict::Reject)
}

/// Effective LOW_CONFID under a PASS ceiling with at least one critical gap: the only case
/// an evidence retry can fix. A ceiling-driven LOW_CONFID is not retried.
pub fn wants_evidence_retry(s: &DiagnosisState) -> bool {
    s.round.effective_verdict == Some(Verdict::LowConfid)
        && s.round.ceiling == Some(Verdict::Pass)
        && s.round
            .verifier_result
            .as_ref()
            .is_some_and(|r| r.critical_gaps().next().is_some())
}

/// The Composer left a non-blank answer.
pub fn has_answer(s: &DiagnosisState) -> bool {
    s.final_answer
        .as_deref()
        .is_some_and(|a| !a.trim().is_empty())
}

/// The routing table of openspec/specs/diagnosis-graph/spec.md over the given node implementations.
pub fn builder(nodes: DiagnosisNodes) -> GraphBuilder<DiagnosisState, Status> {
    use NodeKind::{Agent, Deterministic};
    let mut g = GraphBuilder::new(PLANNER);
    g.node(PLANNER, Agent, &AGENT_OUTCOMES, nodes.planner)
        .node(EXECUTOR, Agent, &EXECUTOR_OUTCOMES, nodes.executor)
        .node(
            GATEKEEPER,
            Deterministic,
            &GATEKEEPER_OUTCOMES,
            nodes.gatekeeper,
        )
        .node(
            VERIFIED_INPUT,
            Deterministic,
            &[Status::Built, Status::ProjectionFailed],
            nodes.verified_input,
        )
        .node(VERIFIER, Agent, &AGENT_OUTCOMES, nodes.verifier)
        .node(
            RETRY_PREPARE,
            Deterministic,
            &[Status::Prepared, Status::Failed],
            nodes.retry_prepare,
        )
        .node(COMPOSER, Agent, &AGENT_OUTCOMES, nodes.composer)
        .node(FALLBACK, Deterministic, &[Status::Answered], nodes.fallback);

    // Planner
    g.edge(PLANNER, &[Status::Completed], Target::Node(EXECUTOR))
        .route(
            PLANNER,
            &TECHNICAL_FAILURES,
            vec![
                technical_retry(PLANNER, PLANNER_RETRIES),
                pre_fallback().labelled("retry used"),
            ],
        )
        .route(PLANNER, &TERMINAL_FAILURES, vec![pre_fallback()]);

    // Executor: a legal no-evidence result is COMPLETED and still goes to the Gatekeeper.
    g.edge(EXECUTOR, &[Status::Completed], Target::Node(GATEKEEPER))
        .route(
            EXECUTOR,
            &[
                Status::Failed,
                Status::ToolBlocked,
                Status::InvalidOutput,
                Status::Unknown,
            ],
            vec![pre_fallback()],
        );

    // Gatekeeper
    g.edge(GATEKEEPER, &[Status::Pass], Target::Node(VERIFIED_INPUT))
        .route(
            GATEKEEPER,
            &[Status::LowConfid],
            vec![
                Branch::when(
                    "at least one accepted claim",
                    has_accepted_claim,
                    Target::Node(VERIFIED_INPUT),
                ),
                pre_fallback().labelled("zero accepted claims"),
            ],
        )
        .route(GATEKEEPER, &[Status::Reject], vec![pre_fallback()]);

    // Verified Input
    g.edge(VERIFIED_INPUT, &[Status::Built], Target::Node(VERIFIER))
        .route(
            VERIFIED_INPUT,
            &[Status::ProjectionFailed],
            vec![pre_fallback()],
        );

    // Verifier
    g.route(
        VERIFIER,
        &TECHNICAL_FAILURES,
        vec![
            technical_retry(VERIFIER, VERIFIER_RETRIES),
            pre_fallback().labelled("retry used"),
        ],
    )
    .route(VERIFIER, &TERMINAL_FAILURES, vec![pre_fallback()])
    .route(
        VERIFIER,
        &[Status::Completed],
        vec![
            Branch::when("effective REJECT", effective_reject, Target::Node(FALLBACK))
                .effect(POST_VERIFICATION),
            Branch::counted_when(
                "effective LOW_CONFID, ceiling PASS, critical gap",
                EVIDENCE_RETRY_COUNT,
                EVIDENCE_RETRIES,
                wants_evidence_retry,
                Target::Node(RETRY_PREPARE),
            ),
            Branch::otherwise(Target::Node(COMPOSER)).labelled("effective PASS or LOW_CONFID"),
        ],
    );

    // Retry Prepare
    g.route(
        RETRY_PREPARE,
        &[Status::Prepared],
        vec![Branch::otherwise(Target::Node(PLANNER)).effect(EVIDENCE_ROUND)],
    )
    // Retry Prepare cannot fail once the Verifier's guard held; if it ever does, the run
    // fails closed instead of entering a round without a retry context.
    .route(RETRY_PREPARE, &[Status::Failed], vec![pre_fallback()]);

    // Composer
    g.route(
        COMPOSER,
        &[Status::Completed],
        vec![
            Branch::when("safe non-empty answer", has_answer, Target::End),
            post_fallback().labelled("blank answer"),
        ],
    )
    .route(
        COMPOSER,
        &TECHNICAL_FAILURES,
        vec![
            technical_retry(COMPOSER, COMPOSER_RETRIES),
            post_fallback().labelled("retry used"),
        ],
    )
    .route(COMPOSER, &TERMINAL_FAILURES, vec![post_fallback()]);

    // Fallback
    g.edge(FALLBACK, &[Status::Answered], Target::End);
    g
}

/// Compiles the diagnosis topology over the given nodes.
pub fn compile(nodes: DiagnosisNodes) -> Result<DiagnosisGraph, CompileError> {
    builder(nodes).compile()
}

/// A node that only gives the topology its shape; it is never run.
struct ShapeOnly;

impl Node<DiagnosisState, Status> for ShapeOnly {
    fn run<'a>(
        &'a self,
        _state: &'a mut DiagnosisState,
        _config: &'a crate::graph::RunConfig,
    ) -> crate::graph::NodeFuture<'a, Status> {
        Box::pin(std::future::ready(
            crate::graph::Step::new(Status::Unknown).with("reason", "shape_only"),
        ))
    }
}

/// The compiled topology for drawing and inspection (`diag graph`), over nodes that answer
/// UNKNOWN if ever run.
pub fn shape() -> Result<DiagnosisGraph, CompileError> {
    let n: DiagnosisNode = Arc::new(ShapeOnly);
    compile(DiagnosisNodes {
        planner: n.clone(),
        executor: n.clone(),
        gatekeeper: n.clone(),
        verified_input: n.clone(),
        verifier: n.clone(),
        retry_prepare: n.clone(),
        composer: n.clone(),
        fallback: n,
    })
}
