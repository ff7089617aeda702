//! What a report shows, computed once from the stored run for both formats: the header
//! facts, the answer's computed values (its checked derivations), the claim cards (verified
//! claims and refused ones, each binding resolved in the invocation's recorded output), the
//! grounding figures and the verifier's facts.
//!
//! The self-evaluation is read leniently: every field has a default, so a run stored by an
//! older or newer `diag` still renders, and fields this version does not know are shown as
//! they are (bounded) instead of being dropped.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::RunData;
use diag_core::protocol::derivation::{is_derivation_id, CheckedDerivation};
use diag_core::protocol::{json_pointer, match_quote, ToolInvocation};

/// Characters of a bound target string shown on each side of the quote.
pub const CONTEXT_CHARS: usize = 240;
/// The most characters of one free-text field (claim text, fact, rationale) shown.
pub const TEXT_MAX: usize = 2_000;
/// The most characters of a model-written identifier (claim id, path, tool name) shown.
pub const IDENT_MAX: usize = 120;
/// The most computed values of one answer shown; the rest are counted, not listed.
pub const DERIVATIONS_MAX: usize = 100;
/// The most operand claims a stored computed value is read with (a checked one has at most
/// six); a longer list is not linked and the value is shown by its arithmetic alone.
pub const OPERAND_CLAIMS_MAX: usize = 16;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct SelfEvaluation {
    verifier_evaluation: Option<VerifierEvaluation>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct VerifierEvaluation {
    round: Option<u64>,
    planner_status: Option<String>,
    executor_status: Option<String>,
    gatekeeper_status: Option<String>,
    gatekeeper_raw: Option<GatekeeperRaw>,
    ceiling: Option<String>,
    verifier_status: Option<String>,
    model_verdict: Option<String>,
    effective_verdict: Option<String>,
    groundedness: Option<f64>,
    claim_checks: Vec<ClaimCheck>,
    fact_checks: Vec<Fact>,
    rationale: Option<String>,
    verified_executor_output: Option<VerifiedOutput>,
    verified_evidence: Vec<VerifiedEvidence>,
    composer_audit: Option<Value>,
    /// The Verifier's free-text items the answer grounding rule dropped (openspec/specs/verified-evidence/spec.md).
    dropped_items: Option<Value>,
    fallback_kind: Option<String>,
    fallback_context: Option<FallbackContext>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct GatekeeperRaw {
    result: Option<String>,
    severity: Option<String>,
    checked_bindings: Vec<CheckedBinding>,
    audit: BTreeMap<String, Value>,
    /// Claims refused as a whole, with their code (content grounding, openspec/specs/verified-evidence/spec.md); empty in
    /// runs stored before it.
    refused_claims: Vec<RefusedClaim>,
    /// The grounding figures (claims bound and refused, salient tokens checked and unbound).
    grounding: BTreeMap<String, Value>,
    /// Anything else the Gatekeeper recorded.
    #[serde(flatten)]
    extra: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct RefusedClaim {
    claim_id: String,
    code: String,
    token: Option<Token>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct Token {
    kind: String,
    text: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct CheckedBinding {
    claim_id: String,
    source_invocation_id: String,
    tool_name: String,
    raw_path: String,
    passed: bool,
    matched_text: Option<String>,
    failure: Option<String>,
    #[serde(flatten)]
    extra: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct ClaimCheck {
    claim_id: String,
    supported: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct Fact {
    fact: String,
    is_critical: bool,
    verification: String,
    claim_ids: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct VerifiedOutput {
    claims: Vec<VerifiedClaim>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct VerifiedClaim {
    claim_id: String,
    text: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct VerifiedEvidence {
    claim_id: String,
    source_invocation_id: String,
    tool_name: String,
    raw_path: String,
    matched_text: String,
}

/// One entry of `composer_audit.derivations`; its `op` may be missing (it is not shown).
#[derive(Debug, Clone, Deserialize)]
struct StoredDerivation {
    id: String,
    #[serde(default)]
    op: String,
    result: String,
    arithmetic: String,
    /// Written since the reports link operands' claims; a run stored before has
    /// `arithmetic` alone, shown whole (as is one whose parts are mistyped).
    #[serde(default)]
    expression: Option<Value>,
    #[serde(default)]
    claims: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct FallbackContext {
    stage: String,
    status: String,
}

/// Whether a claim id may be used as a page anchor and a link target: the Executor's claim-id
/// format (a letter, then letters, digits, `_` or `-`, at most 32 characters).
pub fn is_claim_id(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && s.len() <= 32
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether an invocation id may be used as a page anchor (`inv-1`, …, as diag assigns them).
pub fn is_invocation_id(s: &str) -> bool {
    s.strip_prefix("inv-")
        .is_some_and(|n| !n.is_empty() && n.len() <= 10 && n.chars().all(|c| c.is_ascii_digit()))
}

/// The quote inside its target string, bounded around the quote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excerpt {
    pub before: String,
    pub quote: String,
    pub after: String,
    /// Characters of the target left out before and after the excerpt.
    pub cut_before: usize,
    pub cut_after: usize,
}

/// One binding of a claim as the Gatekeeper checked it.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingView {
    pub invocation_id: String,
    pub tool_name: String,
    pub raw_path: String,
    pub passed: bool,
    pub failure: Option<String>,
    pub matched_text: Option<String>,
    /// The matched text found in the string at `raw_path` of the recorded output.
    pub excerpt: Option<Excerpt>,
    /// Whether the invocation exists among this run's records (for a link to its card).
    pub invocation_known: bool,
    /// Fields of the checked binding this version does not know, as `key: value` text.
    pub extra: Vec<(String, String)>,
}

/// One claim: verified (its text and evidence reached the Verifier) or refused.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimView {
    pub claim_id: String,
    /// `Some(id)` when the id may be used as an anchor (`#c1`).
    pub anchor: Option<String>,
    pub verified: bool,
    /// The claim's text, for verified claims only (a refused claim's text is never shown).
    pub text: Option<String>,
    /// The Verifier's check of the claim: `Some(true)` supported, `Some(false)` not.
    pub supported: Option<bool>,
    /// Whether the answer cites it (`[c1]`).
    pub cited: bool,
    /// Refusal codes: the Gatekeeper's code for the claim (`failed_binding`, `no_binding`,
    /// or `unbound_token: TOKEN (kind)`), then the failures of its bindings, in order,
    /// without repeats; for a claim not verified that has neither, `unbound` (no bindings)
    /// or `not_verified`.
    pub refusals: Vec<String>,
    pub bindings: Vec<BindingView>,
    /// The Verifier's facts that name this claim: (fact, verification, critical).
    pub facts: Vec<(String, String, bool)>,
}

/// One fact the Verifier stated.
#[derive(Debug, Clone, PartialEq)]
pub struct FactView {
    pub fact: String,
    pub verification: String,
    pub is_critical: bool,
    pub claim_ids: Vec<String>,
}

/// One operand's claim in a computed value's arithmetic.
#[derive(Debug, Clone, PartialEq)]
pub struct OperandClaim {
    pub claim_id: String,
    /// `Some(id)` when the run has a card for that claim (`#claim-<id>`), so it is linked.
    pub anchor: Option<String>,
}

/// One computed value of the answer, with its checked arithmetic.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivationView {
    /// `d1`.
    pub id: String,
    /// `Some(id)` for the first value with an id in the derivation-id format
    /// (`#derivation-<id>`): anchors stay unique however the record was written.
    pub anchor: Option<String>,
    /// `96 %`.
    pub result: String,
    /// The arithmetic without its operands' claims: `48 / 50 × 100` (the whole stored
    /// arithmetic when the run stored no expression and claims).
    pub expression: String,
    /// The claims the operands are observed in, in operand order (an id may repeat).
    pub claims: Vec<OperandClaim>,
}

/// The computed values a self-evaluation kept, read leniently.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoredDerivations {
    /// At most [`DERIVATIONS_MAX`], every string bounded.
    pub shown: Vec<CheckedDerivation>,
    /// Entries not shown: past [`DERIVATIONS_MAX`], or not a computed value this version reads.
    pub left_out: usize,
}

impl StoredDerivations {
    pub fn is_empty(&self) -> bool {
        self.shown.is_empty() && self.left_out == 0
    }
}

/// A stored computed value's expression and operand claims, when both are there as a string
/// and a list of at most [`OPERAND_CLAIMS_MAX`] strings.
fn stored_parts(expression: Option<Value>, claims: Option<Value>) -> Option<(String, Vec<String>)> {
    let Some(Value::String(expression)) = expression else {
        return None;
    };
    let Some(Value::Array(claims)) = claims else {
        return None;
    };
    if claims.len() > OPERAND_CLAIMS_MAX {
        return None;
    }
    let claims = claims
        .into_iter()
        .map(|c| match c {
            Value::String(s) => Some(s),
            _ => None,
        })
        .collect::<Option<Vec<String>>>()?;
    Some((expression, claims))
}

/// The computed values of a run's answer from its `composer_audit` (`derivations`: objects
/// `{id, op, result, expression, claims, arithmetic}`), as a run stored by any diag version holds them: a missing
/// or mistyped list is none; an entry that is not an object with `id`, `result` and
/// `arithmetic` as strings (and `op`, when present) is counted in `left_out`, not shown; one
/// without a readable `expression` and `claims` (stored before they were) is shown by its
/// `arithmetic`, its claims not linked; members this version does not know are ignored;
/// every string is bounded.
pub fn stored_derivations(composer_audit: Option<&Value>) -> StoredDerivations {
    let Some(Value::Array(entries)) = composer_audit.and_then(|a| a.get("derivations")) else {
        return StoredDerivations::default();
    };
    let mut out = StoredDerivations::default();
    for entry in entries {
        let read = (out.shown.len() < DERIVATIONS_MAX)
            .then(|| StoredDerivation::deserialize(entry).ok())
            .flatten();
        match read {
            Some(d) => {
                let arithmetic = bounded(&d.arithmetic, TEXT_MAX);
                let (expression, claims) = match stored_parts(d.expression, d.claims) {
                    Some((e, c)) => (
                        bounded(&e, TEXT_MAX),
                        c.iter().map(|id| bounded(id, IDENT_MAX)).collect(),
                    ),
                    None => (arithmetic.clone(), Vec::new()),
                };
                out.shown.push(CheckedDerivation {
                    id: bounded(&d.id, IDENT_MAX),
                    op: bounded(&d.op, IDENT_MAX),
                    result: bounded(&d.result, IDENT_MAX),
                    expression,
                    claims,
                    arithmetic,
                })
            }
            None => out.left_out += 1,
        }
    }
    out
}

/// Everything a report shows besides the timeline, the graph and the tool calls.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// The answer's computed values, in the order the answer lists them.
    pub derivations: Vec<DerivationView>,
    /// Computed values stored but not shown ([`StoredDerivations::left_out`]).
    pub derivations_left_out: usize,
    pub claims: Vec<ClaimView>,
    /// Label/value pairs of the grounding figures, in a fixed order.
    pub grounding: Vec<(String, String)>,
    pub facts: Vec<FactView>,
    pub rationale: Option<String>,
    /// `stage STATUS` that routed the run to the Fallback.
    pub fallback_context: Option<String>,
}

/// Text of a JSON value for a figure: strings as they are, the rest as compact JSON,
/// bounded.
pub fn value_text(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Null => "none".to_string(),
        other => other.to_string(),
    };
    bounded(&s, 400)
}

/// At most `max` characters of `s`, with `…` when cut.
pub use diag_core::text::bounded;

/// Claim ids cited in a text as `[c1]` or `[c1, c2]`, in order, without repeats.
pub fn cited_ids(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, ids) in citations(text) {
        for id in ids {
            if !out.contains(&id) {
                out.push(id);
            }
        }
    }
    out
}

/// Every citation marker of a text: its byte range and the ids it names. A marker is `[`,
/// one or more claim ids separated by commas (spaces allowed), `]`.
pub fn citations(text: &str) -> Vec<(std::ops::Range<usize>, Vec<String>)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find('[').map(|i| i + from) {
        let Some(close) = text[open..].find(']').map(|i| i + open) else {
            break;
        };
        let inner = &text[open + 1..close];
        // A nested `[` starts the next candidate.
        if let Some(nested) = inner.rfind('[') {
            from = open + 1 + nested;
            continue;
        }
        let ids: Vec<String> = inner.split(',').map(|s| s.trim().to_string()).collect();
        if !ids.is_empty() && ids.iter().all(|id| is_claim_id(id)) {
            out.push((open..close + 1, ids));
        }
        from = close + 1;
    }
    out
}

/// Finds `matched` in the string at `raw_path` of the invocation's output and cuts an
/// excerpt around it.
fn excerpt(inv: &ToolInvocation, raw_path: &str, matched: &str) -> Option<Excerpt> {
    let Ok(Value::String(target)) = json_pointer::resolve(&inv.output, raw_path) else {
        return None;
    };
    let (start, end) = match target.find(matched) {
        Some(i) if !matched.is_empty() => (i, i + matched.len()),
        _ => {
            let m = match_quote(target, matched)?;
            let start = (m.as_ptr() as usize).checked_sub(target.as_ptr() as usize)?;
            (start, start + m.len())
        }
    };
    let before_all = target.get(..start)?;
    let quote = target.get(start..end)?;
    let after_all = target.get(end..)?;
    let before_chars = before_all.chars().count();
    let cut_before = before_chars.saturating_sub(CONTEXT_CHARS);
    let before: String = before_all.chars().skip(cut_before).collect();
    let after: String = after_all.chars().take(CONTEXT_CHARS).collect();
    let cut_after = after_all.chars().count().saturating_sub(CONTEXT_CHARS);
    Some(Excerpt {
        before,
        quote: bounded(quote, TEXT_MAX),
        after,
        cut_before,
        cut_after,
    })
}

/// The label of one of the Gatekeeper's grounding figures: its salient tokens are the claims'
/// tokens (the answer's are the Composer's figures); an unknown key is shown as it is.
fn claim_figure_label(key: &str) -> String {
    match key {
        "tokens_checked" => "claim tokens checked".to_string(),
        "tokens_unbound" => "claim tokens unbound".to_string(),
        other => bounded(other, IDENT_MAX).replace('_', " "),
    }
}

fn extras(map: &BTreeMap<String, Value>) -> Vec<(String, String)> {
    map.iter()
        .map(|(k, v)| (bounded(k, IDENT_MAX), value_text(v)))
        .collect()
}

fn opt(s: &Option<String>) -> String {
    s.clone().unwrap_or_else(|| "none".to_string())
}

/// Builds the view of a stored run.
pub fn build(data: &RunData) -> View {
    let se: SelfEvaluation = data
        .run
        .self_evaluation
        .clone()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let ve = se.verifier_evaluation.unwrap_or_default();
    let answer = data.run.answer.as_deref().unwrap_or("");
    let cited = cited_ids(answer);
    let invocation = |id: &str| data.invocations.iter().find(|i| i.invocation_id == id);

    let verified: Vec<VerifiedClaim> = ve
        .verified_executor_output
        .as_ref()
        .map(|v| v.claims.clone())
        .unwrap_or_default();
    let raw = ve.gatekeeper_raw.clone().unwrap_or_default();

    // Claim ids in order of first appearance: the Gatekeeper's bindings, then verified
    // claims and evidence it did not list (a run stored without the raw result).
    let mut order: Vec<String> = Vec::new();
    let mut push = |id: &str| {
        if !order.iter().any(|o| o == id) {
            order.push(id.to_string());
        }
    };
    for b in &raw.checked_bindings {
        push(&b.claim_id);
    }
    for r in &raw.refused_claims {
        push(&r.claim_id);
    }
    for c in &verified {
        push(&c.claim_id);
    }
    for e in &ve.verified_evidence {
        push(&e.claim_id);
    }

    let claims: Vec<ClaimView> = order
        .iter()
        .map(|id| {
            let text = verified
                .iter()
                .find(|c| &c.claim_id == id)
                .map(|c| bounded(&c.text, TEXT_MAX));
            let mut bindings: Vec<BindingView> = raw
                .checked_bindings
                .iter()
                .filter(|b| &b.claim_id == id)
                .map(|b| {
                    let inv = invocation(&b.source_invocation_id);
                    let excerpt = match (inv, &b.matched_text) {
                        (Some(inv), Some(m)) if b.passed => excerpt(inv, &b.raw_path, m),
                        _ => None,
                    };
                    BindingView {
                        invocation_id: bounded(&b.source_invocation_id, IDENT_MAX),
                        tool_name: bounded(&b.tool_name, IDENT_MAX),
                        // A pointer is shown only when it names a value of the recorded
                        // output: one that does not is model-written text no check vouched for.
                        raw_path: match inv {
                            Some(i) if json_pointer::resolve(&i.output, &b.raw_path).is_ok() => {
                                bounded(&b.raw_path, IDENT_MAX)
                            }
                            _ => crate::terminal::POINTER_NOT_FOUND.to_string(),
                        },
                        passed: b.passed,
                        failure: b.failure.as_deref().map(|f| bounded(f, IDENT_MAX)),
                        matched_text: b.matched_text.as_deref().map(|m| bounded(m, TEXT_MAX)),
                        excerpt,
                        invocation_known: inv.is_some(),
                        extra: extras(&b.extra),
                    }
                })
                .collect();
            if bindings.is_empty() {
                // No raw result: the verified evidence is what the Verifier saw.
                bindings = ve
                    .verified_evidence
                    .iter()
                    .filter(|e| &e.claim_id == id)
                    .map(|e| {
                        let inv = invocation(&e.source_invocation_id);
                        BindingView {
                            invocation_id: bounded(&e.source_invocation_id, IDENT_MAX),
                            tool_name: bounded(&e.tool_name, IDENT_MAX),
                            raw_path: bounded(&e.raw_path, IDENT_MAX),
                            passed: true,
                            failure: None,
                            matched_text: Some(bounded(&e.matched_text, TEXT_MAX)),
                            excerpt: inv.and_then(|i| excerpt(i, &e.raw_path, &e.matched_text)),
                            invocation_known: inv.is_some(),
                            extra: Vec::new(),
                        }
                    })
                    .collect();
            }
            // The claim's own refusal code first (with the token no evidence holds), then the
            // failures of its bindings.
            let mut refusals: Vec<String> = raw
                .refused_claims
                .iter()
                .filter(|r| &r.claim_id == id)
                .map(|r| match &r.token {
                    Some(t) => format!(
                        "{}: {} ({})",
                        bounded(&r.code, IDENT_MAX),
                        bounded(&t.text, IDENT_MAX),
                        bounded(&t.kind, IDENT_MAX)
                    ),
                    None => bounded(&r.code, IDENT_MAX),
                })
                .collect();
            for f in bindings.iter().filter_map(|b| b.failure.clone()) {
                if !refusals.contains(&f) {
                    refusals.push(f);
                }
            }
            let is_verified = text.is_some();
            if !is_verified && refusals.is_empty() {
                refusals.push(if bindings.is_empty() {
                    "unbound".to_string()
                } else {
                    "not_verified".to_string()
                });
            }
            ClaimView {
                claim_id: bounded(id, IDENT_MAX),
                anchor: is_claim_id(id).then(|| id.clone()),
                verified: is_verified,
                text,
                supported: ve
                    .claim_checks
                    .iter()
                    .find(|c| &c.claim_id == id)
                    .map(|c| c.supported),
                cited: cited.contains(id),
                refusals,
                bindings,
                facts: ve
                    .fact_checks
                    .iter()
                    .filter(|f| f.claim_ids.contains(id))
                    .map(|f| {
                        (
                            bounded(&f.fact, TEXT_MAX),
                            bounded(&f.verification, IDENT_MAX),
                            f.is_critical,
                        )
                    })
                    .collect(),
            }
        })
        .collect();

    let mut grounding: Vec<(String, String)> = vec![
        (
            "evidence round".into(),
            ve.round.map_or("none".into(), |r| r.to_string()),
        ),
        ("planner".into(), opt(&ve.planner_status)),
        ("executor".into(), opt(&ve.executor_status)),
        ("gatekeeper".into(), opt(&ve.gatekeeper_status)),
    ];
    if ve.gatekeeper_raw.is_some() {
        grounding.push((
            "gatekeeper result".into(),
            format!(
                "{}{}",
                opt(&raw.result),
                raw.severity
                    .as_deref()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default()
            ),
        ));
        for (k, v) in &raw.audit {
            grounding.push((format!("audit: {}", bounded(k, IDENT_MAX)), value_text(v)));
        }
        for (k, v) in &raw.grounding {
            grounding.push((
                format!("grounding: {}", claim_figure_label(k)),
                value_text(v),
            ));
        }
        for (k, v) in extras(&raw.extra) {
            grounding.push((format!("gatekeeper: {k}"), v));
        }
    }
    grounding.extend([
        ("verdict ceiling".into(), opt(&ve.ceiling)),
        ("verifier".into(), opt(&ve.verifier_status)),
        ("model verdict".into(), opt(&ve.model_verdict)),
        ("effective verdict".into(), opt(&ve.effective_verdict)),
        (
            "groundedness".into(),
            ve.groundedness.map_or("none".into(), |g| format!("{g:.2}")),
        ),
        ("verified claims".into(), verified.len().to_string()),
        (
            "claims cited in the answer".into(),
            cited
                .iter()
                .filter(|c| order.contains(c))
                .count()
                .to_string(),
        ),
    ]);
    if let Some(Value::Object(audit)) = &ve.composer_audit {
        if let Some(status) = audit.get("status") {
            grounding.push(("composer".into(), value_text(status)));
        }
        // The answer grounding check of the last answer the Composer wrote.
        for (key, label) in [
            ("answer_tokens_checked", "answer tokens checked"),
            ("answer_tokens_unbound", "answer tokens unbound"),
            ("unbound_token_kind", "first unbound answer token"),
            ("unbound_token", "first unbound answer token, as read"),
            ("unbound_token_line", "first unbound answer token, line"),
        ] {
            match audit.get(key) {
                None | Some(Value::Null) => {}
                Some(v) => grounding.push((format!("grounding: {label}"), value_text(v))),
            }
        }
    }
    if let Some(v) = &ve.dropped_items {
        grounding.push(("grounding: verifier items dropped".into(), value_text(v)));
    }
    if let Some(kind) = &ve.fallback_kind {
        grounding.push(("fallback".into(), bounded(kind, IDENT_MAX)));
    }

    let stored = stored_derivations(ve.composer_audit.as_ref());
    let derivations = derivation_views(&stored.shown, &claims);

    View {
        derivations,
        derivations_left_out: stored.left_out,
        claims,
        grounding,
        facts: ve
            .fact_checks
            .iter()
            .map(|f| FactView {
                fact: bounded(&f.fact, TEXT_MAX),
                verification: bounded(&f.verification, IDENT_MAX),
                is_critical: f.is_critical,
                claim_ids: f.claim_ids.iter().map(|c| bounded(c, IDENT_MAX)).collect(),
            })
            .collect(),
        rationale: ve.rationale.as_deref().map(|r| bounded(r, TEXT_MAX)),
        fallback_context: ve.fallback_context.map(|c| {
            format!(
                "{} {}",
                bounded(&c.stage, IDENT_MAX),
                bounded(&c.status, IDENT_MAX)
            )
        }),
    }
}

/// The computed values as a report shows them: each operand's claim linked when `claims` has
/// its card, each value anchored once.
fn derivation_views(stored: &[CheckedDerivation], claims: &[ClaimView]) -> Vec<DerivationView> {
    let mut anchored: Vec<&str> = Vec::new();
    stored
        .iter()
        .map(|d| {
            let anchor =
                (is_derivation_id(&d.id) && !anchored.contains(&d.id.as_str())).then(|| {
                    anchored.push(&d.id);
                    d.id.clone()
                });
            DerivationView {
                id: d.id.clone(),
                anchor,
                result: d.result.clone(),
                expression: d.expression.clone(),
                claims: d
                    .claims
                    .iter()
                    .map(|id| OperandClaim {
                        claim_id: id.clone(),
                        anchor: claims
                            .iter()
                            .any(|c| c.anchor.as_deref() == Some(id.as_str()))
                            .then(|| id.clone()),
                    })
                    .collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_derivations_are_read_leniently_and_bounded() {
        let audit = serde_json::json!({"derivations": [
            {"id": "d1", "op": "percentage", "result": "96 %",
             "arithmetic": "48 / 50 × 100 (c6, c4)", "new": 1},
            {"id": "d2", "op": "convert_unit", "result": "5 s"},
            {"id": "d6", "result": "5 s", "arithmetic": "5000 ms in s (c3)"},
            "d3",
            {"id": 4, "op": "sum", "result": "1", "arithmetic": "1 (c1)"},
            {"id": "d5", "op": "sum", "result": "x".repeat(500), "arithmetic": "y".repeat(5000)},
        ]});
        let read = stored_derivations(Some(&audit));
        assert_eq!(read.left_out, 3);
        assert_eq!(read.shown.len(), 3);
        assert_eq!(read.shown[0].shown(), "96 % = 48 / 50 × 100 (c6, c4)");
        assert_eq!(read.shown[1].shown(), "5 s = 5000 ms in s (c3)");
        assert_eq!(read.shown[1].op, "");
        assert_eq!(read.shown[2].result.chars().count(), IDENT_MAX + 1);
        assert_eq!(read.shown[2].arithmetic.chars().count(), TEXT_MAX + 1);
        for none in [
            None,
            Some(serde_json::json!({})),
            Some(serde_json::json!({"derivations": {"d1": "x"}})),
            Some(serde_json::json!("composer_audit")),
        ] {
            assert!(stored_derivations(none.as_ref()).is_empty(), "{none:?}");
        }
        let many: Vec<Value> = (1..=DERIVATIONS_MAX + 5)
            .map(|i| {
                serde_json::json!({"id": format!("d{i}"), "op": "sum", "result": "2",
                                   "arithmetic": "1 + 1 (c1, c1)"})
            })
            .collect();
        let read = stored_derivations(Some(&serde_json::json!({ "derivations": many })));
        assert_eq!((read.shown.len(), read.left_out), (DERIVATIONS_MAX, 5));
    }

    #[test]
    fn citations_are_bracketed_claim_id_lists() {
        let t = "a [c1] b [c2, c3] [not a claim!] [x](y) [[c4]] [";
        let ids: Vec<Vec<String>> = citations(t).into_iter().map(|(_, i)| i).collect();
        assert_eq!(
            ids,
            vec![
                vec!["c1".to_string()],
                vec!["c2".to_string(), "c3".to_string()],
                vec!["x".to_string()],
                vec!["c4".to_string()],
            ]
        );
        assert_eq!(cited_ids("[c2] [c1, c2]"), vec!["c2", "c1"]);
    }
}
