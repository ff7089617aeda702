//! `diag-protocol`: the agent output contracts of `diag` as typed data: what the Planner,
//! Executor, Verifier and Composer must return, what the Gatekeeper records, and what the
//! deterministic stages build from them. Parsing model text into these types lives in
//! [`parse`], one parser per contract shared by every caller; content grounding
//! ([`grounding`]) and the Gatekeeper ([`gatekeeper`]) are plain functions over plain data.
//!
//! **Architecture invariant:** pure: no I/O crate, no tokio, no process-wide state. diag-core
//! re-exports it as `diag_core::protocol`, so a grounding change compiles here and in what
//! depends on the contracts, and this crate compiles without the agent runtime or the store.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub use diag_graph::clock;
pub use diag_records::{fallback, invocation};

pub mod composer;
pub mod derivation;
pub mod executor;
pub mod gatekeeper;
pub mod grounding;
pub mod json_pointer;
pub mod parse;
pub mod planner;
pub mod retry;
pub mod run_clock;
pub mod schema;
pub mod verified;
pub mod verifier;
pub mod whitespace;

pub use composer::{ComposerAnswer, ComposerContract};
pub use executor::{Binding, Claim, ExecutorHypothesis, ExecutorOutput, NoEvidence};
pub use fallback::FallbackKind;
pub use gatekeeper::{
    ceiling, match_quote, validate_run, validate_run_with_question, Audit, BindingFailure,
    CheckedBinding, ClaimRefusal, GateStatus, GatekeeperRaw, Grounding, RefusedClaim,
};
pub use grounding::{
    answer_markers, claim_tokens, context_of_evidence, salient_tokens, EvidenceContext,
    SalientToken, TokenCheck, TokenKind, Unbound,
};
pub use invocation::{InvocationStatus, ToolInvocation};
pub use parse::{
    bounded_token_text, check_answer_citations, check_answer_citations_with_derivations,
    check_answer_derivations, check_answer_tokens, check_executor_references, cited_derivations,
    parse_composer, parse_executor, parse_plan, parse_verifier, ContractViolation,
};
pub use planner::{Plan, PlanHypothesis, PlanStep, PlannerMode};
pub use retry::{canonical_json, CriticalGap, QueryRef, RetryContext};
pub use run_clock::RunClock;
pub use verified::{VerifiedClaim, VerifiedEvidence, VerifiedExecutorOutput};
pub use verifier::{effective_verdict, ClaimCheck, Fact, Verdict, Verification, VerifierResult};
