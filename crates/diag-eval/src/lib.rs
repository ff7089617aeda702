//! `diag-eval`, what `diag eval` runs on: incident scenarios run through the real ask path,
//! each run scored against the scenario's label, deterministically (`docs/EVAL.md`).
//!
//! - [`scenario`]: the `diag_scenario_v1` format, its loader and validation.
//! - [`env`]: a scenario's environment (run clock, tools, a backfilled Prometheus) and the
//!   environment checks.
//! - [`score`]: the score of a run and the aggregate of repeated runs, pure functions.
//! - [`render`]: the tables and the Markdown summary of an eval.
//!
//! The CLI (`src/cli/eval.rs`) drives runs and writes what [`render`] makes; this crate decides nothing about a
//! run's course, only how a finished run is read.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod env;
pub mod render;
pub mod scenario;
pub mod score;

use serde::Serialize;

use diag_ask::config::Config;
use diag_ask::AskOutcome;
use diag_core::agent::runtime::AgentStepRecord;
use diag_core::agent::AgentRole;
use diag_core::store::RunStatus;
use diag_diagnosis::AgentStatus;
use score::{Aggregate, RunFacts, RunScore, VerifiedQuote};

/// The schema name of `diag eval --json`.
pub const EVAL_JSON_SCHEMA: &str = "diag.eval.v1";

/// What the scorer reads of a finished run: its answer, whether a Fallback gave it, and the
/// verified quotes of the claims the Verifier allowed.
pub fn facts_of(outcome: &AskOutcome) -> RunFacts {
    let state = &outcome.state;
    let verifier_done = state.round.verifier_status == Some(AgentStatus::Completed);
    let allowed_claims = state
        .round
        .verifier_result
        .as_ref()
        .filter(|_| verifier_done)
        .map(|r| r.allowed_claims.clone())
        .unwrap_or_default();
    RunFacts {
        failed: outcome.status() == RunStatus::Failed,
        answer: outcome.answer().map(str::to_string),
        degraded: state.degraded,
        quotes: state
            .round
            .verified_evidence
            .iter()
            .map(|e| VerifiedQuote {
                claim_id: e.claim_id.clone(),
                tool: e.tool_name.clone(),
                quote: e.matched_text.clone(),
            })
            .collect(),
        allowed_claims,
    }
}

/// Tokens and model calls of a run from its stored model calls, and its cost at the prices
/// of the model each agent used (`None` unless every call's model has both prices).
pub fn usage_of(steps: &[AgentStepRecord], config: &Config) -> (u64, u64, u64, Option<f64>) {
    let mut prompt = 0u64;
    let mut completion = 0u64;
    let mut cost = Some(0.0f64);
    for s in steps {
        prompt = prompt.saturating_add(s.prompt_tokens);
        completion = completion.saturating_add(s.completion_tokens);
        let prices = config.model_for(s.agent).map(|(_, m)| m);
        let c = prices.and_then(|m| {
            score::cost(
                s.prompt_tokens,
                s.completion_tokens,
                m.price_per_1k_prompt,
                m.price_per_1k_completion,
            )
        });
        cost = match (cost, c) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
    let calls = u64::try_from(steps.len()).unwrap_or(u64::MAX);
    (prompt, completion, calls, cost)
}

/// The name a configuration's model assignment is reported under: the model every agent
/// uses, or `planner=a,executor=b,…` when they differ.
pub fn assignment_label(config: &Config) -> String {
    let roles = [
        AgentRole::Planner,
        AgentRole::Executor,
        AgentRole::Verifier,
        AgentRole::Composer,
    ];
    let names: Vec<&str> = roles
        .iter()
        .map(|r| config.model_for(*r).map_or("?", |(n, _)| n))
        .collect();
    if names.iter().all(|n| *n == names[0]) {
        return names[0].to_string();
    }
    roles
        .iter()
        .zip(&names)
        .map(|(r, n)| format!("{}={n}", r.as_str()))
        .collect::<Vec<_>>()
        .join(",")
}

/// One run of an eval, as `diag eval --json` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct EvalRun {
    /// 1-based repetition.
    pub repeat: u32,
    pub run_id: String,
    pub status: String,
    pub failure: Option<String>,
    pub effective_verdict: Option<String>,
    pub degraded: bool,
    pub fallback_kind: Option<String>,
    pub score: RunScore,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub model_calls: u64,
    pub tool_calls: u64,
    pub wall_ms: u64,
    pub cost: Option<f64>,
    /// The run file written with `--record`.
    pub record_file: Option<String>,
    /// The report written with `--report`.
    pub report_file: Option<String>,
}

/// One scenario's runs with one model and their aggregate.
#[derive(Debug, Clone, Serialize)]
pub struct EvalCell {
    pub scenario: String,
    pub aggregate: Aggregate,
    pub runs: Vec<EvalRun>,
}

/// One model's results.
#[derive(Debug, Clone, Serialize)]
pub struct EvalModel {
    pub model: String,
    pub scenarios: Vec<EvalCell>,
}

/// A scenario of the eval.
#[derive(Debug, Clone, Serialize)]
pub struct EvalScenario {
    pub id: String,
    pub title: String,
    pub dir: String,
    pub question: String,
    pub now: String,
}

/// The `diag eval --json` document.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub schema: &'static str,
    pub repeat: u32,
    pub scenarios: Vec<EvalScenario>,
    pub models: Vec<EvalModel>,
    /// Runs that did not score grounded (failed ones included), over all models.
    pub not_grounded: u32,
    /// The eval was cut short by Ctrl-C (it then prints no report).
    #[serde(skip)]
    pub interrupted: bool,
}
