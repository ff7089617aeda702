//! The Gatekeeper: `validate_run` checks every Executor binding against the tool output
//! recorded for the current run, and records a raw result kept beside its normalized status;
//! the normalization fails closed on anything it does not recognise.
//!
//! Everything here is pure and deterministic: plain data in, plain data out, no I/O. It is
//! the only place that decides whether a claim is tied to a recorded tool output, so it is
//! written to stay linear in the size of the tool output and never to panic.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::executor::{Binding, ExecutorOutput};
use super::grounding::{EvidenceContext, SalientToken};
use super::invocation::{InvocationStatus, ToolInvocation};
use super::verifier::Verdict;
use super::whitespace::original_span;
pub use super::whitespace::{match_quote, normalize_whitespace};

/// The normalized Gatekeeper status the graph routes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum GateStatus {
    Pass,
    LowConfid,
    Reject,
}

impl GateStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            GateStatus::Pass => "PASS",
            GateStatus::LowConfid => "LOW_CONFID",
            GateStatus::Reject => "REJECT",
        }
    }
}

/// The raw result as `validate_run` produced it. `result` and `severity` are kept as text so
/// that a missing or unknown value is representable and can be normalized to REJECT.
///
/// `refused_claims` and `grounding` were added with content grounding (openspec/specs/verified-evidence/spec.md); a raw
/// result stored before them reads with both empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GatekeeperRaw {
    pub result: Option<String>,
    pub severity: Option<String>,
    pub checked_bindings: Vec<CheckedBinding>,
    pub audit: Audit,
    /// Every claim that was not accepted, in the Executor's order, with why.
    #[serde(default)]
    pub refused_claims: Vec<RefusedClaim>,
    #[serde(default)]
    pub grounding: Grounding,
}

impl GatekeeperRaw {
    /// Number of bindings that passed.
    pub fn passed_bindings(&self) -> usize {
        self.checked_bindings.iter().filter(|b| b.passed).count()
    }

    /// The claims the record accepts, in the order of their first checked binding: a claim
    /// with at least one checked binding, every one of them passed with cut text, and no
    /// entry in `refused_claims`. Derived from the record itself, so a record whose figures
    /// say otherwise cannot smuggle a claim through.
    pub fn accepted_claims(&self) -> Vec<&str> {
        let refused: HashSet<&str> = self
            .refused_claims
            .iter()
            .map(|r| r.claim_id.as_str())
            .collect();
        let failed: HashSet<&str> = self
            .checked_bindings
            .iter()
            .filter(|b| !binding_trusted(b))
            .map(|b| b.claim_id.as_str())
            .collect();
        let mut seen = HashSet::new();
        self.checked_bindings
            .iter()
            .map(|b| b.claim_id.as_str())
            .filter(|id| !refused.contains(id) && !failed.contains(id) && seen.insert(*id))
            .collect()
    }
}

/// A binding is trusted only when it passed, says so consistently and carries cut text.
pub fn binding_trusted(b: &CheckedBinding) -> bool {
    b.passed && b.failure.is_none() && b.matched_text.as_deref().is_some_and(|t| !t.is_empty())
}

/// Why a claim was refused as a whole (openspec/specs/verified-evidence/spec.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimRefusal {
    /// The claim has no binding at all.
    NoBinding,
    /// At least one of its bindings failed: a claim passes only if all its bindings pass.
    FailedBinding,
    /// Its bindings passed, but a salient token of its text occurs nowhere in their
    /// evidence context.
    UnboundToken,
}

impl ClaimRefusal {
    pub const ALL: [ClaimRefusal; 3] = [
        ClaimRefusal::NoBinding,
        ClaimRefusal::FailedBinding,
        ClaimRefusal::UnboundToken,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ClaimRefusal::NoBinding => "no_binding",
            ClaimRefusal::FailedBinding => "failed_binding",
            ClaimRefusal::UnboundToken => "unbound_token",
        }
    }
}

impl std::fmt::Display for ClaimRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One refused claim. `token` (for `unbound_token`) is the first salient token of the claim
/// that no evidence holds: model text that was *not* observed, kept for the operator's trace
/// (bounded to [`MAX_TOKEN_CHARS`], control characters dropped) and never shown to an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedClaim {
    pub claim_id: String,
    pub code: ClaimRefusal,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<SalientToken>,
}

/// The longest token text a refusal records.
pub const MAX_TOKEN_CHARS: usize = 80;

/// The run's grounding figures: claims accepted and refused, and the salient tokens of the
/// claims whose bindings all passed (checked, and of those unbound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Grounding {
    pub claims_bound: u32,
    pub claims_refused: u32,
    pub tokens_checked: u32,
    pub tokens_unbound: u32,
}

/// One binding as checked against the run's recorded tool output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckedBinding {
    pub claim_id: String,
    pub source_invocation_id: String,
    pub tool_name: String,
    pub raw_path: String,
    pub passed: bool,
    /// Cut from the tool output (never copied from the model); present only when passed.
    pub matched_text: Option<String>,
    /// Why the binding failed; absent when passed.
    pub failure: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Audit {
    pub claims: u32,
    pub bindings: u32,
    pub passed: u32,
    pub failed: u32,
    pub unbound_claims: u32,
}

/// Normalizes a raw result: pass → PASS; fail + low-confid → LOW_CONFID; fail + reject →
/// REJECT; anything missing, unknown or inconsistent → REJECT.
pub fn normalize(raw: Option<&GatekeeperRaw>) -> GateStatus {
    let Some(raw) = raw else {
        return GateStatus::Reject;
    };
    match (raw.result.as_deref(), raw.severity.as_deref()) {
        (Some("pass"), None) if consistent_pass(raw) => GateStatus::Pass,
        (Some("fail"), Some("low-confid")) => GateStatus::LowConfid,
        (Some("fail"), Some("reject")) => GateStatus::Reject,
        _ => GateStatus::Reject,
    }
}

/// A `pass` is believed only when its own bindings and audit say the same (openspec/specs/verified-evidence/spec.md: every
/// claim has a passed binding and none failed): at least one binding, all passed, none
/// failed or unbound in the audit, and the audit's passed count is the bindings'.
///
/// With content grounding a `pass` must also accept every claim: no refused claim, the
/// accepted claims as many as the audit's claims, and grounding figures that agree.
fn consistent_pass(raw: &GatekeeperRaw) -> bool {
    let passed = raw.passed_bindings();
    let accepted = raw.accepted_claims().len();
    passed > 0
        && passed == raw.checked_bindings.len()
        && raw.audit.failed == 0
        && raw.audit.unbound_claims == 0
        && u32::try_from(passed).is_ok_and(|p| p == raw.audit.passed)
        && raw.refused_claims.is_empty()
        && u32::try_from(accepted).is_ok_and(|a| a == raw.audit.claims)
        && raw.grounding.claims_bound == raw.audit.claims
        && raw.grounding.claims_refused == 0
        && raw.grounding.tokens_unbound == 0
}

/// The verdict ceiling a normalized Gatekeeper status imposes on the Verifier:
/// PASS → PASS, LOW_CONFID → LOW_CONFID, REJECT → REJECT.
pub fn ceiling(status: GateStatus) -> Verdict {
    match status {
        GateStatus::Pass => Verdict::Pass,
        GateStatus::LowConfid => Verdict::LowConfid,
        GateStatus::Reject => Verdict::Reject,
    }
}

/// The raw `result` values.
pub const RESULT_PASS: &str = "pass";
pub const RESULT_FAIL: &str = "fail";
/// The raw `severity` values.
pub const SEVERITY_LOW_CONFID: &str = "low-confid";
pub const SEVERITY_REJECT: &str = "reject";

/// Why a binding failed. The checks run in the order of the variants, and the first failing
/// check is recorded, so each binding has exactly one failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BindingFailure {
    /// The claim's id occurs more than once in the output: a passed binding could not be
    /// attributed to one claim, so none of them is trusted.
    DuplicateClaimId,
    /// No invocation with this id was recorded for the current run (ids of other runs are
    /// invisible and fail the same way).
    UnknownInvocation,
    /// The current run recorded the id more than once; the records disagree on what the
    /// model saw, so neither is trusted.
    AmbiguousInvocation,
    /// The binding names another tool than the one that was invoked.
    ToolNameMismatch,
    /// The invocation ended `error` or `blocked`: its output is an error report, not data
    /// from the source, so it cannot support a diagnostic claim.
    InvocationNotOk,
    /// The quote is empty or whitespace only, which would match anything.
    EmptyQuote,
    /// `raw_path` is not a valid RFC 6901 pointer or names nothing in the output.
    PathNotFound,
    /// The value at `raw_path` is not a string, a number or a bool (null, array, object).
    /// The stored code keeps its name.
    NotAString,
    /// The quote is shorter than [`MIN_QUOTE_CHARS`] characters (after whitespace
    /// normalisation) and not the whole string at `raw_path`: a short quote such as `e`
    /// occurs almost anywhere and proves nothing.
    QuoteTooShort,
    /// The quote does not occur in the string at `raw_path`.
    QuoteNotFound,
}

/// The shortest quote accepted when it is not the whole target string (openspec/specs/verified-evidence/spec.md).
pub const MIN_QUOTE_CHARS: usize = 12;

impl BindingFailure {
    pub const ALL: [BindingFailure; 10] = [
        BindingFailure::DuplicateClaimId,
        BindingFailure::UnknownInvocation,
        BindingFailure::AmbiguousInvocation,
        BindingFailure::ToolNameMismatch,
        BindingFailure::InvocationNotOk,
        BindingFailure::EmptyQuote,
        BindingFailure::PathNotFound,
        BindingFailure::NotAString,
        BindingFailure::QuoteTooShort,
        BindingFailure::QuoteNotFound,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BindingFailure::DuplicateClaimId => "duplicate_claim_id",
            BindingFailure::UnknownInvocation => "unknown_invocation",
            BindingFailure::AmbiguousInvocation => "ambiguous_invocation",
            BindingFailure::ToolNameMismatch => "tool_name_mismatch",
            BindingFailure::InvocationNotOk => "invocation_not_ok",
            BindingFailure::EmptyQuote => "empty_quote",
            BindingFailure::PathNotFound => "path_not_found",
            BindingFailure::NotAString => "not_a_string",
            BindingFailure::QuoteTooShort => "quote_too_short",
            BindingFailure::QuoteNotFound => "quote_not_found",
        }
    }

    /// The failure a stored `CheckedBinding::failure` text names, if it is one of ours.
    pub fn parse(s: &str) -> Option<BindingFailure> {
        BindingFailure::ALL.into_iter().find(|f| f.as_str() == s)
    }
}

impl std::fmt::Display for BindingFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks every binding of `output` against the invocations recorded for `run_id`, then
/// every claim as a whole (openspec/specs/verified-evidence/spec.md), and applies the policy by
/// *accepted* claims:
///
/// - a claim is accepted when it has bindings, all of them pass, and every salient token of
///   its text occurs in the evidence context of its bindings; any other claim is refused
///   whole (`no_binding`, `failed_binding`, `unbound_token` naming the first such token);
/// - every claim accepted → `pass`, no severity;
/// - claims exist but none is accepted → `fail` / `reject`;
/// - zero claims (a legal no-evidence result) → `fail` / `low-confid` with nothing accepted;
/// - otherwise (some accepted, some refused) → `fail` / `low-confid`.
///
/// `invocations` may hold records of any run; only those whose `run_id` equals `run_id` are
/// visible, so an id recorded only by another run fails as `unknown_invocation`.
pub fn validate_run(
    run_id: &str,
    output: &ExecutorOutput,
    invocations: &[ToolInvocation],
) -> GatekeeperRaw {
    validate_run_with_question(run_id, "", output, invocations)
}

/// [`validate_run`] with the operator's question, whose tokens a claim may repeat (SPEC
/// §2.9: "unless a tool output, or the operator's question, shows it"). The graph calls
/// this one.
pub fn validate_run_with_question(
    run_id: &str,
    question: &str,
    output: &ExecutorOutput,
    invocations: &[ToolInvocation],
) -> GatekeeperRaw {
    let mut by_id: HashMap<&str, Vec<&ToolInvocation>> = HashMap::new();
    for inv in invocations.iter().filter(|i| i.run_id == run_id) {
        by_id
            .entry(inv.invocation_id.as_str())
            .or_default()
            .push(inv);
    }

    let mut seen = HashSet::new();
    let duplicated: HashSet<&str> = output
        .claims
        .iter()
        .filter(|c| !seen.insert(c.claim_id.as_str()))
        .map(|c| c.claim_id.as_str())
        .collect();

    // Several bindings often point at the same string; normalizing a large output once per
    // (invocation, path) keeps the whole run linear in the size of what was recorded.
    let mut haystacks: HashMap<(&str, &str), String> = HashMap::new();

    let mut checked = Vec::new();
    let mut audit = Audit::default();
    let mut refused = Vec::new();
    let mut grounding = Grounding::default();
    for claim in &output.claims {
        audit.claims = audit.claims.saturating_add(1);
        if claim.bindings.is_empty() {
            audit.unbound_claims = audit.unbound_claims.saturating_add(1);
            refused.push(RefusedClaim {
                claim_id: claim.claim_id.clone(),
                code: ClaimRefusal::NoBinding,
                token: None,
            });
            continue;
        }
        let mut context = EvidenceContext::new();
        context.push_text(question);
        let mut all_passed = true;
        for binding in &claim.bindings {
            audit.bindings = audit.bindings.saturating_add(1);
            let outcome = if duplicated.contains(claim.claim_id.as_str()) {
                Err(BindingFailure::DuplicateClaimId)
            } else {
                check_binding(binding, &by_id, &mut haystacks)
            };
            let (passed, matched_text, failure) = match outcome {
                Ok((text, inv)) => {
                    if all_passed {
                        context.push_binding(&inv.output, &binding.raw_path, &inv.arguments);
                    }
                    (true, Some(text), None)
                }
                Err(f) => (false, None, Some(f.as_str().to_string())),
            };
            if passed {
                audit.passed = audit.passed.saturating_add(1);
            } else {
                audit.failed = audit.failed.saturating_add(1);
                all_passed = false;
            }
            checked.push(CheckedBinding {
                claim_id: claim.claim_id.clone(),
                source_invocation_id: binding.source_invocation_id.clone(),
                tool_name: binding.tool_name.clone(),
                raw_path: binding.raw_path.clone(),
                passed,
                matched_text,
                failure,
            });
        }
        if !all_passed {
            refused.push(RefusedClaim {
                claim_id: claim.claim_id.clone(),
                code: ClaimRefusal::FailedBinding,
                token: None,
            });
            continue;
        }
        let check = context.check_claim(&claim.text);
        grounding.tokens_checked = grounding.tokens_checked.saturating_add(check.checked);
        let unbound = u32::try_from(check.unbound.len()).unwrap_or(u32::MAX);
        grounding.tokens_unbound = grounding.tokens_unbound.saturating_add(unbound);
        if let Some(first) = check.unbound.into_iter().next() {
            refused.push(RefusedClaim {
                claim_id: claim.claim_id.clone(),
                code: ClaimRefusal::UnboundToken,
                token: Some(bounded_token(first)),
            });
            continue;
        }
        grounding.claims_bound = grounding.claims_bound.saturating_add(1);
    }
    grounding.claims_refused = u32::try_from(refused.len()).unwrap_or(u32::MAX);

    let (result, severity) = if output.claims.is_empty() {
        (RESULT_FAIL, Some(SEVERITY_LOW_CONFID))
    } else if refused.is_empty() {
        (RESULT_PASS, None)
    } else if grounding.claims_bound == 0 {
        (RESULT_FAIL, Some(SEVERITY_REJECT))
    } else {
        (RESULT_FAIL, Some(SEVERITY_LOW_CONFID))
    };

    GatekeeperRaw {
        result: Some(result.to_string()),
        severity: severity.map(str::to_string),
        checked_bindings: checked,
        audit,
        refused_claims: refused,
        grounding,
    }
}

/// A refusal's token as it may be recorded: control characters dropped, at most
/// [`MAX_TOKEN_CHARS`] characters.
fn bounded_token(t: SalientToken) -> SalientToken {
    let text: String = t
        .text
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_TOKEN_CHARS)
        .collect();
    SalientToken { kind: t.kind, text }
}

/// Runs the checks of one binding in the order of [`BindingFailure`]; on success returns the
/// text cut from the tool output and the invocation it was cut from.
fn check_binding<'a>(
    binding: &'a Binding,
    by_id: &HashMap<&str, Vec<&'a ToolInvocation>>,
    haystacks: &mut HashMap<(&'a str, &'a str), String>,
) -> Result<(String, &'a ToolInvocation), BindingFailure> {
    let inv = match by_id
        .get(binding.source_invocation_id.as_str())
        .map(Vec::as_slice)
    {
        None | Some([]) => return Err(BindingFailure::UnknownInvocation),
        Some([one]) => *one,
        Some(_) => return Err(BindingFailure::AmbiguousInvocation),
    };
    if inv.tool_name != binding.tool_name {
        return Err(BindingFailure::ToolNameMismatch);
    }
    if inv.status != InvocationStatus::Ok {
        return Err(BindingFailure::InvocationNotOk);
    }
    let quote = normalize_whitespace(&binding.quote);
    if quote.is_empty() {
        return Err(BindingFailure::EmptyQuote);
    }
    let target =
        resolve_pointer(&inv.output, &binding.raw_path).ok_or(BindingFailure::PathNotFound)?;
    // A figure (`/matches_found`, a sample's Unix time) binds as its JSON text, whole.
    let figure;
    let text: &str = match target {
        Value::String(s) => s,
        Value::Number(n) => {
            figure = n.to_string();
            &figure
        }
        Value::Bool(b) => {
            if *b {
                "true"
            } else {
                "false"
            }
        }
        Value::Null | Value::Array(_) | Value::Object(_) => return Err(BindingFailure::NotAString),
    };
    let key = (inv.invocation_id.as_str(), binding.raw_path.as_str());
    let normalized = haystacks
        .entry(key)
        .or_insert_with(|| normalize_whitespace(text));
    if quote.chars().count() < MIN_QUOTE_CHARS && quote != *normalized {
        return Err(BindingFailure::QuoteTooShort);
    }
    let start = normalized
        .find(&quote)
        .ok_or(BindingFailure::QuoteNotFound)?;
    let (from, to) =
        original_span(text, start, start + quote.len()).ok_or(BindingFailure::QuoteNotFound)?;
    text.get(from..to)
        .map(|t| (t.to_string(), inv))
        .ok_or(BindingFailure::QuoteNotFound)
}

/// RFC 6901 resolution, shared with every other caller of JSON Pointers in `diag`.
fn resolve_pointer<'v>(doc: &'v Value, pointer: &str) -> Option<&'v Value> {
    super::json_pointer::resolve(doc, pointer).ok()
}

/// A token's text as it may be shown and stored: control characters dropped, at most
/// [`MAX_TOKEN_CHARS`] characters.
pub fn bounded_token_text(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(MAX_TOKEN_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(result: Option<&str>, severity: Option<&str>) -> GatekeeperRaw {
        GatekeeperRaw {
            result: result.map(str::to_string),
            severity: severity.map(str::to_string),
            ..GatekeeperRaw::default()
        }
    }

    #[test]
    fn normalization_table() {
        let cases = [
            (Some("pass"), None, GateStatus::Pass),
            (Some("fail"), Some("low-confid"), GateStatus::LowConfid),
            (Some("fail"), Some("reject"), GateStatus::Reject),
            (Some("fail"), None, GateStatus::Reject),
            (Some("pass"), Some("reject"), GateStatus::Reject),
            (Some("maybe"), None, GateStatus::Reject),
            (None, None, GateStatus::Reject),
            (Some("fail"), Some("mild"), GateStatus::Reject),
        ];
        for (r, s, want) in cases {
            // Each result comes with one passed binding, so only `result` and `severity`
            // decide here (a `pass` contradicted by its bindings is the next test's).
            let mut raw = raw(r, s);
            raw.checked_bindings.push(CheckedBinding {
                claim_id: "c1".into(),
                source_invocation_id: "inv-1".into(),
                tool_name: "t".into(),
                raw_path: "/x".into(),
                passed: true,
                matched_text: Some("x".into()),
                failure: None,
            });
            raw.audit.passed = 1;
            raw.audit.claims = 1;
            raw.grounding.claims_bound = 1;
            assert_eq!(normalize(Some(&raw)), want, "{r:?} {s:?}");
        }
        assert_eq!(normalize(None), GateStatus::Reject);
    }

    #[test]
    fn a_pass_its_own_bindings_or_audit_contradict_is_rejected() {
        let binding = |passed: bool| CheckedBinding {
            claim_id: "c1".into(),
            source_invocation_id: "inv-1".into(),
            tool_name: "search_logs".into(),
            raw_path: "/x".into(),
            passed,
            matched_text: passed.then(|| "x".into()),
            failure: (!passed).then(|| "quote_not_found".into()),
        };
        let consistent = || {
            let mut r = raw(Some("pass"), None);
            r.checked_bindings.push(binding(true));
            r.audit = Audit {
                claims: 1,
                bindings: 1,
                passed: 1,
                failed: 0,
                unbound_claims: 0,
            };
            r.grounding.claims_bound = 1;
            r
        };
        assert_eq!(normalize(Some(&consistent())), GateStatus::Pass);
        let no_bindings = {
            let mut r = consistent();
            r.checked_bindings.clear();
            r.audit.passed = 0;
            r.audit.bindings = 0;
            r
        };
        let unbound = {
            let mut r = consistent();
            r.audit.unbound_claims = 1;
            r
        };
        let audit_disagrees = {
            let mut r = consistent();
            r.audit.passed = 2;
            r
        };
        let audit_failed = {
            let mut r = consistent();
            r.audit.failed = 1;
            r
        };
        let refused = {
            let mut r = consistent();
            r.refused_claims.push(RefusedClaim {
                claim_id: "c1".into(),
                code: ClaimRefusal::UnboundToken,
                token: None,
            });
            r
        };
        let more_claims_than_accepted = {
            let mut r = consistent();
            r.audit.claims = 2;
            r.grounding.claims_bound = 2;
            r
        };
        let figures_disagree = {
            let mut r = consistent();
            r.grounding.claims_bound = 0;
            r
        };
        let tokens_unbound = {
            let mut r = consistent();
            r.grounding.tokens_unbound = 1;
            r
        };
        for (what, r) in [
            ("no binding at all", no_bindings),
            ("an unbound claim", unbound),
            ("audit counts another number passed", audit_disagrees),
            ("audit counts a failure", audit_failed),
            ("a refused claim", refused),
            (
                "fewer accepted claims than claims",
                more_claims_than_accepted,
            ),
            ("grounding counts no bound claim", figures_disagree),
            ("grounding counts an unbound token", tokens_unbound),
        ] {
            assert_eq!(normalize(Some(&r)), GateStatus::Reject, "{what}");
        }
    }

    #[test]
    fn pass_listing_a_failed_binding_is_inconsistent() {
        let mut r = raw(Some("pass"), None);
        r.checked_bindings.push(CheckedBinding {
            claim_id: "c1".into(),
            source_invocation_id: "inv-1".into(),
            tool_name: "search_logs".into(),
            raw_path: "/x".into(),
            passed: false,
            matched_text: None,
            failure: Some("quote_not_found".into()),
        });
        assert_eq!(normalize(Some(&r)), GateStatus::Reject);
    }

    #[test]
    fn pointer_table() {
        let doc: Value = serde_json::from_str(
            r#"{"foo":["bar","baz"],"":0,"a/b":1,"c%d":2,"e^f":3,"g|h":4,"i\\j":5,
                "k\"l":6," ":7,"m~n":8,"~1":9,"01":10}"#,
        )
        .unwrap();
        let cases: [(&str, Option<Value>); 22] = [
            ("", Some(doc.clone())),
            ("/foo", Some(serde_json::json!(["bar", "baz"]))),
            ("/foo/0", Some(serde_json::json!("bar"))),
            ("/foo/1", Some(serde_json::json!("baz"))),
            ("/", Some(serde_json::json!(0))),
            ("/a~1b", Some(serde_json::json!(1))),
            ("/c%d", Some(serde_json::json!(2))),
            ("/e^f", Some(serde_json::json!(3))),
            ("/g|h", Some(serde_json::json!(4))),
            ("/i\\j", Some(serde_json::json!(5))),
            ("/k\"l", Some(serde_json::json!(6))),
            ("/ ", Some(serde_json::json!(7))),
            ("/m~0n", Some(serde_json::json!(8))),
            ("/~01", Some(serde_json::json!(9))),
            ("/01", Some(serde_json::json!(10))),
            ("/foo/01", None),
            ("/foo/-", None),
            ("/foo/+1", None),
            ("/foo/2", None),
            ("/m~2n", None),
            ("foo", None),
            ("/foo/99999999999999999999999", None),
        ];
        for (pointer, want) in cases {
            assert_eq!(resolve_pointer(&doc, pointer).cloned(), want, "{pointer:?}");
        }
        assert_eq!(resolve_pointer(&doc, "/m~"), None);
        assert_eq!(resolve_pointer(&doc, "/foo/0/x"), None);
    }

    #[test]
    fn original_span_maps_back_through_collapsed_whitespace() {
        let text = "  a \t\n b  c ";
        assert_eq!(normalize_whitespace(text), "a b c");
        assert_eq!(match_quote(text, "a b"), Some("a \t\n b"));
        assert_eq!(match_quote(text, " b   c\n"), Some("b  c"));
        assert_eq!(match_quote(text, "A b"), None);
        assert_eq!(match_quote(text, " \n "), None);
    }

    #[test]
    fn failure_names_round_trip() {
        for f in BindingFailure::ALL {
            assert_eq!(BindingFailure::parse(f.as_str()), Some(f));
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        }
    }
}
