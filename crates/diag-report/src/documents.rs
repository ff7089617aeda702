//! The documents of stored runs that `diag trace`, `diag runs` and `diag mcp`'s tools show:
//! a run as `diag trace` reads it, its `diag.trace.v1` document, and the `diag.runs.v2` list.

use diag_core::agent::runtime::AgentStepRecord;
use diag_core::protocol::{GatekeeperRaw, VerifiedClaim};
use diag_core::store::RunRow;
use diag_core::store::StoredExchange;
use diag_core::store::{Store, StoreError};
use diag_diagnosis::evaluation::GroundingFigures;
use serde_json::json;

use crate::terminal as render;

/// The schema name of `diag trace --json` output.
pub const TRACE_JSON_SCHEMA: &str = "diag.trace.v1";

/// The schema name of `diag runs --json` output.
pub const RUNS_JSON_SCHEMA: &str = "diag.runs.v2";

/// What `diag trace` shows of a run, read from the store.
pub struct Stored {
    pub run: diag_core::store::RunRow,
    pub events: Vec<diag_core::graph::Event<String>>,
    pub invocations: Vec<diag_core::protocol::ToolInvocation>,
    pub evaluation: Option<diag_core::store::EvaluationRow>,
    pub exchanges: Vec<StoredExchange>,
    pub grounding: Option<render::grounding::GroundingView>,
    /// The answer's computed values, as the self-evaluation's Composer audit kept them.
    pub derivations: crate::view::StoredDerivations,
    /// What the store remembered of the run's model endpoints when it started (empty for a
    /// replay, and for a run stored before diag kept it).
    pub endpoints: Vec<diag_core::store::EndpointLearning>,
    /// The alert group the run investigated.
    pub alerts: Option<diag_core::store::alerts::RunAlerts>,
}

/// The run `run_id` as `diag trace` shows it; `None` when no run has that id.
pub fn load(store: &Store, run_id: &str) -> Result<Option<Stored>, StoreError> {
    let Some(run) = store.get_run(run_id)? else {
        return Ok(None);
    };
    let events = store.events(&run.run_id)?;
    let invocations = store.invocations(&run.run_id)?;
    let evaluation = store.evaluation(&run.run_id)?;
    // The Gatekeeper's raw result is kept in the self-evaluation (openspec/specs/verified-evidence/spec.md); a run stored
    // before it was, or without one, shows no claims.
    let self_eval = |pointer: &str| {
        run.self_evaluation
            .as_ref()
            .and_then(|v| v.pointer(pointer))
            .cloned()
    };
    let gatekeeper: Option<GatekeeperRaw> = self_eval("/verifier_evaluation/gatekeeper_raw")
        .and_then(|v| serde_json::from_value(v).ok());
    let verified: Vec<VerifiedClaim> =
        self_eval("/verifier_evaluation/verified_executor_output/claims")
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
    let figures = evaluation
        .as_ref()
        .and_then(|e| e.metrics.get("grounding"))
        .and_then(|g| serde_json::from_value::<GroundingFigures>(g.clone()).ok())
        .unwrap_or_else(|| stored_figures(gatekeeper.as_ref(), &self_eval));
    let grounding =
        render::grounding::grounding_view(gatekeeper.as_ref(), &verified, &invocations, figures);
    let derivations =
        crate::view::stored_derivations(self_eval("/verifier_evaluation/composer_audit").as_ref());
    let exchanges = store.exchanges(&run.run_id)?;
    let endpoints = store.run_endpoints(&run.run_id)?;
    let alerts = store.run_alerts(&run.run_id)?;
    Ok(Some(Stored {
        run,
        events,
        invocations,
        evaluation,
        exchanges,
        grounding,
        derivations,
        endpoints,
        alerts,
    }))
}

/// The `diag trace --json` document of a stored run (schema `diag.trace.v1`); `diag mcp`'s
/// `trace` tool returns the same document. `None` when no run has that id.
pub fn trace_json(store: &Store, run_id: &str) -> Result<Option<serde_json::Value>, StoreError> {
    let Some(Stored {
        run,
        events,
        invocations,
        evaluation,
        exchanges,
        grounding,
        derivations: _,
        endpoints,
        alerts,
    }) = load(store, run_id)?
    else {
        return Ok(None);
    };
    let steps = store.agent_steps(&run.run_id)?;
    let (reused_steps, reused_tools) = reused_counts(&run);
    let steps: Vec<serde_json::Value> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut v = step_json(&s.step, &exchanges);
            v["reused"] = json!(i < reused_steps);
            v
        })
        .collect();
    let invocations: Vec<serde_json::Value> = invocations
        .iter()
        .enumerate()
        .map(|(i, inv)| {
            let mut v = serde_json::to_value(inv).unwrap_or(serde_json::Value::Null);
            v["reused"] = json!(i < reused_tools);
            v
        })
        .collect();
    Ok(Some(json!({
        "schema": TRACE_JSON_SCHEMA,
        "run": {
            "run_id": run.run_id,
            "session_id": run.session_id,
            "question": run.question,
            "status": run.status.as_str(),
            "failure": run.failure,
            "answer": run.answer,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "duration_ms": run.duration_ms,
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "step_count": run.step_count,
            "tool_count": run.tool_count,
            "degraded": run.degraded,
            "effective_verdict": run.effective_verdict.map(|v| v.as_str()),
            "fallback_kind": run.fallback_kind.map(|k| k.as_str()),
            "path": run.path,
            "self_evaluation": run.self_evaluation,
            "resumed_from": run.resumed_from,
            "reuse": run.reuse,
        },
        "events": events,
        "agent_steps": steps,
        "tool_invocations": invocations,
        "grounding": grounding,
        "evaluation": evaluation.map(|e| e.metrics),
        "endpoints": endpoints,
        "alert": alerts,
    })))
}

/// The alert group a run investigated: `alert` then one line per alert (name, status, start,
/// fingerprint, labels). Empty for a run that investigated none.
pub fn alert_text(alerts: Option<&diag_core::store::alerts::RunAlerts>) -> String {
    use std::fmt::Write as _;
    let Some(a) = alerts else {
        return String::new();
    };
    let mut out = format!(
        "alert    from Alertmanager's {}, group {}\n",
        a.source.as_str(),
        render::one_line(&a.group.group_key, 200)
    );
    for x in a.group.alerts.iter().take(20) {
        let labels: Vec<String> = x.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "  {} {} since {} fingerprint {}  {}",
            render::one_line(x.name(), 120),
            x.status.as_str(),
            x.starts_at,
            render::one_line(&x.fingerprint, 40),
            render::one_line(&labels.join(", "), 300)
        );
    }
    if a.group.alerts.len() > 20 {
        let _ = writeln!(out, "  … and {} more", a.group.alerts.len() - 20);
    }
    out
}

/// What the store remembered of a run's model endpoints when it started, one line each:
/// `endpoints` then `BASE_URL MODEL: structured_output FORM, context N tokens, refuses
/// temperature, learned AT`
/// (or `nothing remembered`). Empty for a run that recorded none.
pub fn endpoints_text(endpoints: &[diag_core::store::EndpointLearning]) -> String {
    use std::fmt::Write as _;
    if endpoints.is_empty() {
        return String::new();
    }
    let mut out = String::from("endpoints (remembered at run start)\n");
    for e in endpoints {
        let mut said = Vec::new();
        if let Some(form) = e.structured_output {
            said.push(format!("structured_output {}", form.as_str()));
        }
        if let Some(n) = e.context_tokens {
            said.push(format!("context {n} tokens"));
        }
        for p in e.refused_sampling.parameters() {
            said.push(format!("refuses {}", p.as_str()));
        }
        let said = match (said.is_empty(), e.learned_at) {
            (true, _) | (_, None) => "nothing remembered".to_string(),
            (false, Some(at)) => format!("{}, learned {at}", said.join(", ")),
        };
        let _ = writeln!(
            out,
            "  {} {}: {said}",
            render::one_line(&e.endpoint.base_url, 200),
            render::one_line(&e.endpoint.model, 120)
        );
    }
    out
}

/// How many of a run's first model calls and tool calls were reused from the run it
/// resumed (reuse is always a prefix); zero for a run started afresh.
fn reused_counts(run: &diag_core::store::RunRow) -> (usize, usize) {
    run.reuse.as_ref().map_or((0, 0), |r| {
        (
            usize::try_from(r.model_calls).unwrap_or(usize::MAX),
            usize::try_from(r.tool_calls).unwrap_or(usize::MAX),
        )
    })
}

/// For a resumed run: where it came from, what it reused and why reuse stopped, and each
/// model call marked `reused` or `live`. Empty for a run started afresh.
pub fn resumed_text(run: &diag_core::store::RunRow, exchanges: &[StoredExchange]) -> String {
    use std::fmt::Write as _;
    let Some(from) = &run.resumed_from else {
        return String::new();
    };
    let (model_calls, tool_calls) = reused_counts(run);
    let mut out = String::new();
    match &run.reuse {
        Some(_) => {
            let _ = writeln!(
                out,
                "resumed  from {from}: {model_calls} model call(s) and {tool_calls} tool \
                 call(s) reused"
            );
        }
        None => {
            let _ = writeln!(out, "resumed  from {from}: reuse not recorded");
        }
    }
    if let Some(stopped) = run.reuse.as_ref().and_then(|r| r.stopped.as_deref()) {
        let _ = writeln!(
            out,
            "         reuse stopped at {}",
            render::one_line(stopped, 200)
        );
    }
    let _ = writeln!(out, "model calls");
    let _ = writeln!(
        out,
        "  {:>3}  {:<10} {:>3} {:>3} {:>4}  source",
        "#", "agent", "rnd", "att", "turn"
    );
    for (i, x) in exchanges.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {:>3}  {:<10} {:>3} {:>3} {:>4}  {}",
            x.seq,
            x.exchange.agent.to_string(),
            x.exchange.round,
            x.exchange.attempt,
            x.exchange.turn,
            if i < model_calls { "reused" } else { "live" }
        );
    }
    out
}

/// A model call's step as `diag trace --json` shows it: the stored step, with the error of a
/// failed call (class, the endpoint's bounded message, its HTTP status, the token counts and
/// context size it reported) and how the output contract was sent, from the call's exchange.
fn step_json(step: &AgentStepRecord, exchanges: &[StoredExchange]) -> serde_json::Value {
    let mut v = serde_json::to_value(step).unwrap_or(serde_json::Value::Null);
    let exchange = exchanges.iter().map(|x| &x.exchange).find(|x| {
        x.agent == step.agent
            && x.round == step.round
            && x.attempt == step.attempt
            && x.turn == step.turn
    });
    let Some(exchange) = exchange else {
        return v;
    };
    let form = match &exchange.outcome {
        Ok(r) => r.structured_output,
        Err(e) => {
            let mut error = json!({"class": e.class.as_str(), "message": e.message});
            if let Some(status) = e.status {
                error["status"] = json!(status);
            }
            if let Some(n) = e.context_tokens {
                error["context_tokens"] = json!(n);
            }
            v["error"] = error;
            e.structured_output
        }
    };
    if let Some(form) = form {
        v["structured_output"] = json!(form.as_str());
    }
    v
}

/// The grounding figures of a run without an evaluation (a FAILED run, or one stored before
/// evaluations held them): the Gatekeeper's, the Composer check's and the dropped items, as
/// the self-evaluation kept them.
fn stored_figures(
    raw: Option<&GatekeeperRaw>,
    self_eval: &dyn Fn(&str) -> Option<serde_json::Value>,
) -> GroundingFigures {
    let g = raw.map(|r| r.grounding).unwrap_or_default();
    let count = |pointer: &str| {
        self_eval(pointer)
            .and_then(|v| v.as_u64())
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0)
    };
    GroundingFigures {
        claims_bound: g.claims_bound,
        claims_refused: g.claims_refused,
        claim_tokens_checked: g.tokens_checked,
        claim_tokens_unbound: g.tokens_unbound,
        answer_tokens_checked: count("/verifier_evaluation/composer_audit/answer_tokens_checked"),
        answer_tokens_unbound: count("/verifier_evaluation/composer_audit/answer_tokens_unbound"),
        items_dropped: count("/verifier_evaluation/dropped_items"),
    }
}

/// The `diag runs --json` document (schema `diag.runs.v2`) of `runs`; `diag mcp`'s `runs` tool
/// returns the same document.
pub fn runs_json(runs: &[RunRow]) -> serde_json::Value {
    let rows: Vec<_> = runs
        .iter()
        .map(|r| {
            json!({
                "run_id": r.run_id,
                "session_id": r.session_id,
                "status": r.status.as_str(),
                "question": r.question,
                "started_at": r.started_at,
                "duration_ms": r.duration_ms,
                "effective_verdict": r.effective_verdict.map(|v| v.as_str()),
                "degraded": r.degraded,
                "stored_at": r.created_at,
                "replay_of": r.replay_of,
            })
        })
        .collect();
    json!({"schema": RUNS_JSON_SCHEMA, "runs": rows})
}
