//! Fallback templates (openspec/specs/diagnosis-graph/spec.md): deterministic answers written without a model.
//!
//! The pre-verification template is built from bounded codes and tool names only, so it has
//! no way to carry an Executor claim, a hypothesis or tool output even if a caller hands it
//! the wrong string: anything that is not a short code is replaced, not shown. The
//! post-verification template renders Verifier-allowed material and nothing else. Both go
//! through [`render_answer`].

use std::collections::HashSet;

use super::composer_input::AllowedClaim;
use super::render::render_answer;
use super::state::DiagnosisState;
use crate::agent::AgentFailure;
use crate::protocol::{InvocationStatus, ToolInvocation, Verdict};

/// The longest code or tool name shown; longer text is not a code.
const CODE_MAX: usize = 64;
/// Matched text is shown on one line, cut to this many chars.
const QUOTE_MAX_CHARS: usize = 300;
/// Failure codes of a failed model call, whose message is worth quoting.
const MODEL_CALL_FAILURES: [&str; 4] = [
    "transient",
    "permanent",
    "authentication",
    "context_overflow",
];
/// An endpoint's message is quoted on one line, cut to this many chars.
const MESSAGE_MAX_CHARS: usize = 300;

/// The tools this run actually consulted, for the pre-verification template: names of its
/// own invocations that ran (status `ok` or `error`), de-duplicated in first-use order.
/// Blocked calls are left out: they consulted nothing, and their name is whatever the model
/// asked for.
pub fn consulted_tools(run_id: &str, invocations: &[ToolInvocation]) -> Vec<String> {
    let mut seen = HashSet::new();
    invocations
        .iter()
        .filter(|i| i.run_id == run_id && i.status != InvocationStatus::Blocked)
        .filter(|i| seen.insert(i.tool_name.as_str()))
        .map(|i| i.tool_name.clone())
        .collect()
}

/// The stage that stopped the run and its outcome, read from the last orchestration event
/// (the node that routed to the Fallback), as bounded codes for [`fallback_pre`].
/// A `failure` or `reason` code in the event's detail that says more than its status (a
/// turn limit, which projection check failed) is given instead of the status.
pub fn pre_verification_failure(state: &DiagnosisState) -> (String, String) {
    match state.events.last() {
        Some(e) => {
            let specific = ["failure", "reason"]
                .iter()
                .find_map(|key| match e.detail.get(key) {
                    Some(crate::graph::DetailValue::Text(code))
                        if SPECIFIC_REASONS.contains(&code.as_str()) =>
                    {
                        Some(code.clone())
                    }
                    _ => None,
                });
            let reason = specific.unwrap_or_else(|| e.status.as_str().to_ascii_lowercase());
            (e.node.clone(), reason)
        }
        None => ("unknown".to_string(), "unknown".to_string()),
    }
}

/// Detail codes more telling than the status of the event that carries them.
const SPECIFIC_REASONS: [&str; 9] = [
    "turn_limit",
    "context_overflow",
    "authentication",
    "repeating",
    "no_claim_survived",
    "no_passed_binding",
    "not_continuable",
    "status_mismatch",
    "duplicate_claim_id",
];

/// The answer when no trusted material could be established: which stage stopped, why, the
/// tools consulted and what to do next. `failed_stage` and `reason` must be codes
/// (`verifier`, `invalid_output`, …) and `consulted_tools` tool names; anything else is
/// replaced by a placeholder.
/// `run_id` is the run's own id, named in the step that inspects it (`diag trace ID`).
pub fn fallback_pre(
    failed_stage: &str,
    reason: &str,
    consulted_tools: &[String],
    run_id: &str,
) -> String {
    fallback_pre_explained(failed_stage, reason, consulted_tools, None, run_id)
}

/// [`fallback_pre`], with the failed agent attempt's failure when there was one: the
/// endpoint's own message (bounded, one line, already redacted by the adapter) is quoted in
/// the reason when it belongs to the stage that stopped, and its numbers feed the next steps.
pub fn fallback_pre_explained(
    failed_stage: &str,
    reason: &str,
    consulted_tools: &[String],
    failure: Option<&AgentFailure>,
    run_id: &str,
) -> String {
    let stage = code(failed_stage);
    let reason = code(reason);
    let (stage_title, stage_failed, stage_step) = describe_stage(stage.unwrap_or(""));
    let failure =
        failure.filter(|f| Some(f.agent.as_str()) == stage.map(str::to_ascii_lowercase).as_deref());

    let mut out = String::new();
    out.push_str("**diag could not establish trusted material for this diagnosis.**\n\n");
    out.push_str(&format!("The {stage_title} {stage_failed}"));
    match reason {
        Some(r) => out.push_str(&format!(": {} (`{r}`).", describe_reason(r))),
        None => out.push_str(" (reason not recorded)."),
    }
    // A failed model call's message: the endpoint's status and words (or diag's, for a
    // request it did not send). The runtime's own stops (tool_blocked, turn_limit,
    // repeating) are said by the reason already.
    if let Some(f) = failure.filter(|f| MODEL_CALL_FAILURES.contains(&f.code.as_str())) {
        let said = quoted_message(&f.message);
        if !said.is_empty() {
            out.push_str(&format!(" Details: `{said}`."));
        }
    }
    out.push_str(
        " No finding is shown: nothing could be tied to a recorded tool output and verified, \
         and diag does not show unverified claims.\n\n",
    );

    let mut seen = HashSet::new();
    let mut names = Vec::new();
    let mut unnamed = 0usize;
    for tool in consulted_tools {
        match tool_name(tool) {
            Some(name) => {
                if seen.insert(name) {
                    names.push(format!("`{name}`"));
                }
            }
            None => unnamed += 1,
        }
    }
    out.push_str("**Tools consulted:** ");
    if names.is_empty() && unnamed == 0 {
        out.push_str("none.\n\n");
    } else {
        out.push_str(&names.join(", "));
        if unnamed > 0 {
            if !names.is_empty() {
                out.push_str(", ");
            }
            out.push_str(&format!("{unnamed} with an unprintable name"));
        }
        out.push_str(".\n\n");
    }

    out.push_str("**Next steps:**\n");
    // The failure's own code is the more precise class (an Executor's `failed` may be a
    // transient error or a refused key).
    let class = failure.map_or(reason.unwrap_or(""), |f| f.code.as_str());
    if let Some(step) = class_step(class, failure) {
        out.push_str(&format!("- {step}\n"));
    }
    out.push_str(&format!("- {stage_step}\n"));
    out.push_str(&format!(
        "- Inspect this run with {} to see each stage, its status and the tool calls it \
         made.\n",
        trace_command(run_id)
    ));
    render_answer(&out)
}

/// What the pre-verification Fallback's answer shows in place of the run's id when comparing
/// runs: a replay is a new run with a new id, so its answer names another run
/// ([`run_id_as_placeholder`]). Answers stored before the id was shown hold it literally.
pub const RUN_ID_PLACEHOLDER: &str = "<run_id>";

/// `` `diag trace RUN_ID` ``: the run's id when it is one diag writes (a code), the
/// placeholder otherwise.
fn trace_command(run_id: &str) -> String {
    format!(
        "`diag trace {}`",
        code(run_id)
            .filter(|id| !id.starts_with('-'))
            .unwrap_or(RUN_ID_PLACEHOLDER)
    )
}

/// `answer` with the run's own id in the Fallback's `diag trace` step replaced by
/// [`RUN_ID_PLACEHOLDER`], as replay compares answers: the same run replayed under another id
/// compares equal, and so does one stored before the answer named its id. Nothing else in
/// the answer changes.
pub fn run_id_as_placeholder(answer: &str, run_id: &str) -> String {
    let own = trace_command(run_id);
    if own.contains(RUN_ID_PLACEHOLDER) {
        return answer.to_string();
    }
    answer.replace(&own, &trace_command(RUN_ID_PLACEHOLDER))
}

/// The answer after the Verifier when the Composer could not write one: the effective
/// verdict and only the Verifier-allowed claims with their evidence, the missing information
/// and the recommendations.
pub fn fallback_post(
    effective_verdict: Option<Verdict>,
    allowed_claims: &[AllowedClaim],
    missing_information: &[String],
    recommendations: &[String],
) -> String {
    let mut out = String::new();
    let findings_heading = match effective_verdict {
        Some(Verdict::Pass) => {
            out.push_str(
                "**Diagnosis (verified).** The composed answer could not be written; this is \
                 the verified material as the Verifier allowed it.\n\n",
            );
            "Verified findings"
        }
        Some(Verdict::LowConfid) => {
            out.push_str(
                "**Diagnosis (LOW CONFIDENCE).** The evidence is incomplete, and the composed \
                 answer could not be written; this is the verified material as the Verifier \
                 allowed it. Treat it as partial.\n\n",
            );
            "Verified findings (low confidence)"
        }
        Some(Verdict::Reject) => {
            out.push_str(
                "**Diagnosis REJECTED.** The Verifier rejected the diagnosis: the evidence does \
                 not establish a cause, and none is asserted here. Observations listed below \
                 were each verified against a tool output but do not support a conclusion.\n\n",
            );
            "Verified observations (diagnosis rejected)"
        }
        None => {
            out.push_str(
                "**Diagnosis (verdict unavailable, treat as LOW CONFIDENCE).** The composed \
                 answer could not be written; this is the verified material as the Verifier \
                 allowed it.\n\n",
            );
            "Verified findings (low confidence)"
        }
    };

    out.push_str(&format!("## {findings_heading}\n\n"));
    if allowed_claims.is_empty() {
        out.push_str("- none\n");
    }
    for claim in allowed_claims {
        out.push_str(&format!(
            "- {} (`{}`)\n",
            one_line(&claim.text, usize::MAX),
            one_line(&claim.claim_id, CODE_MAX)
        ));
        for e in &claim.evidence {
            out.push_str(&format!(
                "  - `{}` `{}` `{}`: \"{}\"\n",
                one_line(&e.tool_name, CODE_MAX),
                one_line(&e.source_invocation_id, CODE_MAX),
                one_line(&e.raw_path, 200),
                one_line(&e.matched_text, QUOTE_MAX_CHARS)
            ));
        }
    }
    push_list(&mut out, "Missing information", missing_information);
    push_list(&mut out, "Recommendations", recommendations);
    render_answer(&out)
}

fn push_list(out: &mut String, heading: &str, items: &[String]) {
    out.push_str(&format!("\n## {heading}\n\n"));
    if items.is_empty() {
        out.push_str("- none\n");
    }
    for item in items {
        out.push_str(&format!("- {}\n", one_line(item, usize::MAX)));
    }
}

/// Whitespace collapsed to single spaces so model text cannot open Markdown structure
/// (headings, fences) of its own; cut to `max` chars with an ellipsis.
fn one_line(s: &str, max: usize) -> String {
    crate::text::bounded(&crate::text::collapse_whitespace(s), max)
}

/// The next step the kind of failure calls for, first in the list: a model that broke its
/// contract, a request larger than the context, a refused key, a transient failure.
fn class_step(reason: &str, failure: Option<&AgentFailure>) -> Option<String> {
    let reason = reason.to_ascii_lowercase().replace('-', "_");
    let step = match reason.as_str() {
        "invalid_output" => "The model did not follow the output contract: try a stronger model, \
             or set `structured_output` for it in the config (`\"json_schema\"`, or \
             `\"json_object\"` for llama.cpp) so its server constrains the output to the \
             contract's schema."
            .to_string(),
        "context_overflow" => {
            let limit = failure.and_then(|f| f.context_tokens);
            let prompt = failure.and_then(|f| f.prompt_tokens);
            let numbers = match (prompt, limit) {
                (Some(p), Some(l)) => format!(
                    "The request's prompt is about {p} tokens and the model's context is {l} \
                     tokens: "
                ),
                (None, Some(l)) => format!("The model's context is {l} tokens: "),
                (Some(p), None) => format!("The request's prompt is about {p} tokens: "),
                (None, None) => "The request does not fit the model's context: ".to_string(),
            };
            format!(
                "{numbers}raise the server's context size (llama.cpp `--n_ctx`, vLLM \
                 `--max-model-len`, Ollama `num_ctx`) and set `context_tokens` for the model to \
                 it, or lower `[limits.max_tokens]` and `limits.max_output_bytes`."
            )
        }
        "authentication" => "Check the API key: the endpoint refused it. Set the environment \
             variable named by the model's `api_key_env` (see the reason above) to a key this \
             endpoint accepts."
            .to_string(),
        "retryable_failed" | "transient" => "Ask again; transient failures (timeouts, rate \
             limits, unavailable endpoints) often clear on a second run."
            .to_string(),
        "repeating" => "The model kept asking for tool calls it had already made: try a \
             stronger model for the executor, or a more specific question."
            .to_string(),
        _ => return None,
    };
    Some(step)
}

/// An endpoint's message as one line inside a code span: control characters and backticks
/// removed, at most [`MESSAGE_MAX_CHARS`] characters.
fn quoted_message(message: &str) -> String {
    let cleaned: String = message
        .chars()
        .map(|c| if c.is_control() || c == '`' { ' ' } else { c })
        .collect();
    one_line(cleaned.trim(), MESSAGE_MAX_CHARS)
}

/// `s` if it is a short code (ASCII letters, digits, `_ - . :`), else nothing.
fn code(s: &str) -> Option<&str> {
    let s = s.trim();
    let ok = !s.is_empty()
        && s.len() <= CODE_MAX
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    ok.then_some(s)
}

/// `s` if it looks like a tool name (a code, `/` allowed for namespaced MCP tools).
fn tool_name(s: &str) -> Option<&str> {
    let s = s.trim();
    let ok = !s.is_empty()
        && s.len() <= CODE_MAX
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':' | b'/'));
    ok.then_some(s)
}

/// (title, what failed, the stage-specific next step).
fn describe_stage(stage: &str) -> (&'static str, &'static str, &'static str) {
    match stage.to_ascii_lowercase().as_str() {
        "planner" => (
            "Planner",
            "could not produce a usable plan",
            "Check the model endpoint configured for the planner, and that at least one tool \
             is configured.",
        ),
        "executor" => (
            "Executor",
            "could not gather usable evidence",
            "Check that the configured tool sources (log paths, metrics endpoint, runbook \
             folders, MCP servers) are reachable, and the tool-call budget.",
        ),
        "gatekeeper" => (
            "Gatekeeper",
            "could not bind any claim to a recorded tool output",
            "Narrow the question (service, time window) so the tools return matching \
             records; a finding is only shown when its quote is found in a tool output.",
        ),
        "verified_input" => (
            "Verified Input stage",
            "could not build a verified projection of the evidence",
            "Narrow the question (service, time window) so the tools return matching \
             records; a finding is only shown when its quote is found in a tool output.",
        ),
        "verifier" => (
            "Verifier",
            "could not verify the evidence",
            "Check the model endpoint configured for the verifier.",
        ),
        _ => (
            "internal stage",
            "stopped the run",
            "Report the run id and the `diag trace` output; this path is not expected.",
        ),
    }
}

fn describe_reason(reason: &str) -> &'static str {
    match reason.to_ascii_lowercase().replace('-', "_").as_str() {
        "invalid_output" => "the model's output broke its contract",
        "retryable_failed" => "a transient failure persisted after the technical retry",
        "non_retryable_failed" => "a permanent failure (for example an HTTP 4xx)",
        "failed" => "the stage failed",
        "tool_blocked" => "a tool call was blocked (unknown tool or budget exhausted)",
        "turn_limit" => "it used every turn it had without giving a final answer",
        "context_overflow" => "the request does not fit the model's context window",
        "authentication" => "the endpoint refused the API key (HTTP 401 or 403)",
        "repeating" => {
            "it asked again and again for tool calls it had already made, which were not run"
        }
        "transient" => "a transient failure (timeout, rate limit, unavailable endpoint)",
        "reject" => "no claim could be bound to a recorded tool output",
        "low_confid" => "no claim was bound to a recorded tool output",
        "projection_failed" | "no_claim_survived" | "no_passed_binding" => {
            "no claim survived the verified projection"
        }
        "not_continuable" => "the gatekeeper result does not allow verification",
        "status_mismatch" => "the gatekeeper status disagreed with its raw result",
        "duplicate_claim_id" => "the evidence repeated a claim id",
        "unknown" => "an unrecognised status",
        _ => "see the code",
    }
}
