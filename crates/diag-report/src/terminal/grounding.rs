//! What content grounding decided, as a reader checks it: each claim of the last evidence
//! round with its bindings, the tool output each points at with the quoted span marked, the
//! refusal code of a refused claim, and the run's grounding figures (openspec/specs/verified-evidence/spec.md). Built from
//! stored records only (the Gatekeeper's raw result, the verified claims, the invocations and
//! the evaluation's figures), so `diag trace` shows it for any stored run; a pure projection
//! shared by the text and the `--json` output.

use std::fmt::Write as _;

use serde::Serialize;

use super::one_line;
use diag_core::protocol::json_pointer;
use diag_core::protocol::{GatekeeperRaw, ToolInvocation, VerifiedClaim};
use diag_diagnosis::evaluation::GroundingFigures;

/// Characters of tool output shown on each side of a quote.
const CONTEXT_CHARS: usize = 60;
/// The longest quote shown whole; a longer one is cut in its middle.
const MAX_QUOTE_CHARS: usize = 200;

/// The grounding of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroundingView {
    pub figures: GroundingFigures,
    pub claims: Vec<ClaimView>,
}

/// One claim as the Gatekeeper judged it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClaimView {
    pub claim_id: String,
    /// `bound` (accepted) or `refused`.
    pub status: &'static str,
    /// The refusal code (`failed_binding`, `unbound_token`, `no_binding`) of a refused claim.
    pub code: Option<String>,
    /// For `unbound_token`: the first salient token no evidence holds, and its kind.
    pub token: Option<String>,
    pub token_kind: Option<String>,
    /// The claim's text, for a bound claim only (a refused claim's text is not stored).
    pub text: Option<String>,
    pub bindings: Vec<BindingView>,
}

/// One binding of a claim.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BindingView {
    pub source_invocation_id: String,
    pub tool_name: String,
    pub raw_path: String,
    pub passed: bool,
    pub failure: Option<String>,
    /// The text the Gatekeeper cut from the tool output (a passed binding only).
    pub matched_text: Option<String>,
    /// The bound string around the quote: `before`, the quoted span, `after`, each bounded;
    /// absent when the output no longer holds the span (or the binding failed).
    pub excerpt: Option<Excerpt>,
    /// Whether `raw_path` names a value of the recorded output: a pointer that does not is
    /// shown only quoted and marked as model-written.
    #[serde(skip)]
    pub resolved: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Excerpt {
    pub before: String,
    pub quote: String,
    pub after: String,
}

/// The grounding of a run from its records; `None` when the Gatekeeper never ran.
pub fn grounding_view(
    raw: Option<&GatekeeperRaw>,
    verified: &[VerifiedClaim],
    invocations: &[ToolInvocation],
    figures: GroundingFigures,
) -> Option<GroundingView> {
    let raw = raw?;
    let accepted = raw.accepted_claims();
    let mut order: Vec<&str> = Vec::new();
    for id in raw
        .checked_bindings
        .iter()
        .map(|b| b.claim_id.as_str())
        .chain(raw.refused_claims.iter().map(|r| r.claim_id.as_str()))
    {
        if !order.contains(&id) {
            order.push(id);
        }
    }
    let claims = order
        .into_iter()
        .map(|id| {
            let refusal = raw.refused_claims.iter().find(|r| r.claim_id == id);
            let bound = accepted.contains(&id);
            ClaimView {
                claim_id: id.to_string(),
                status: if bound { "bound" } else { "refused" },
                code: refusal
                    .map(|r| r.code.as_str().to_string())
                    .or_else(|| (!bound).then(|| "failed_binding".to_string())),
                token: refusal
                    .and_then(|r| r.token.as_ref())
                    .map(|t| t.text.clone()),
                token_kind: refusal
                    .and_then(|r| r.token.as_ref())
                    .map(|t| t.kind.as_str().to_string()),
                text: bound
                    .then(|| verified.iter().find(|c| c.claim_id == id))
                    .flatten()
                    .map(|c| c.text.clone()),
                bindings: raw
                    .checked_bindings
                    .iter()
                    .filter(|b| b.claim_id == id)
                    .map(|b| BindingView {
                        source_invocation_id: b.source_invocation_id.clone(),
                        tool_name: b.tool_name.clone(),
                        raw_path: b.raw_path.clone(),
                        passed: b.passed,
                        failure: b.failure.clone(),
                        matched_text: b.matched_text.clone(),
                        excerpt: b.matched_text.as_deref().and_then(|m| {
                            excerpt(invocations, &b.source_invocation_id, &b.raw_path, m)
                        }),
                        resolved: super::shown_pointer(b, invocations).is_some(),
                    })
                    .collect(),
            }
        })
        .collect();
    Some(GroundingView { figures, claims })
}

/// The bound string of `invocation_id` at `raw_path`, cut around `matched`.
fn excerpt(
    invocations: &[ToolInvocation],
    invocation_id: &str,
    raw_path: &str,
    matched: &str,
) -> Option<Excerpt> {
    let mut same = invocations
        .iter()
        .filter(|i| i.invocation_id == invocation_id);
    let inv = same.next()?;
    if same.next().is_some() {
        return None;
    }
    let target = json_pointer::resolve(&inv.output, raw_path)
        .ok()?
        .as_str()?;
    let at = target.find(matched)?;
    let before = &target[..at];
    let after = &target[at + matched.len()..];
    let before_chars = before.chars().count();
    let before = if before_chars > CONTEXT_CHARS {
        let cut: String = before.chars().skip(before_chars - CONTEXT_CHARS).collect();
        format!("…{cut}")
    } else {
        before.to_string()
    };
    let after = if after.chars().count() > CONTEXT_CHARS {
        let cut: String = after.chars().take(CONTEXT_CHARS).collect();
        format!("{cut}…")
    } else {
        after.to_string()
    };
    let quote = if matched.chars().count() > MAX_QUOTE_CHARS {
        let half = MAX_QUOTE_CHARS / 2;
        let head: String = matched.chars().take(half).collect();
        let tail: String = matched
            .chars()
            .skip(matched.chars().count() - half)
            .collect();
        format!("{head}…{tail}")
    } else {
        matched.to_string()
    };
    Some(Excerpt {
        before,
        quote,
        after,
    })
}

/// The text block of `diag trace`: the figures, then one entry per claim with its bindings;
/// the quoted span is marked `[[…]]` inside the tool output around it.
pub fn grounding_text(view: &GroundingView) -> String {
    let f = &view.figures;
    let mut out = format!(
        "grounding  claims {} bound, {} refused  ·  claim tokens {} checked, {} unbound  ·  \
         answer tokens {} checked, {} unbound  ·  verifier items dropped {}\n",
        f.claims_bound,
        f.claims_refused,
        f.claim_tokens_checked,
        f.claim_tokens_unbound,
        f.answer_tokens_checked,
        f.answer_tokens_unbound,
        f.items_dropped
    );
    for c in &view.claims {
        let verdict = match (&c.code, &c.token) {
            (None, _) => c.status.to_string(),
            (Some(code), None) => format!("{} ({code})", c.status),
            (Some(code), Some(token)) => format!(
                "{} ({code}: {} `{}`)",
                c.status,
                c.token_kind.as_deref().unwrap_or("token"),
                one_line(token, 80)
            ),
        };
        let _ = writeln!(out, "  {:<8} {verdict}", one_line(&c.claim_id, 32));
        if let Some(text) = &c.text {
            let _ = writeln!(out, "           {}", one_line(text, 160));
        }
        for b in &c.bindings {
            let _ = writeln!(
                out,
                "           {} {} {}  {}",
                one_line(&b.source_invocation_id, 32),
                one_line(&b.tool_name, 40),
                if b.resolved {
                    one_line(&b.raw_path, 80)
                } else {
                    format!(
                        "(pointer not found: model-written {:?})",
                        one_line(&b.raw_path, 80)
                    )
                },
                if b.passed {
                    "passed".to_string()
                } else {
                    one_line(b.failure.as_deref().unwrap_or("failed"), 40)
                }
            );
            match (&b.excerpt, &b.matched_text) {
                (Some(e), _) => {
                    let _ = writeln!(
                        out,
                        "             {}[[{}]]{}",
                        one_line(&e.before, 80),
                        one_line(&e.quote, 220),
                        one_line(&e.after, 80)
                    );
                }
                (None, Some(m)) => {
                    let _ = writeln!(out, "             [[{}]]", one_line(m, 220));
                }
                (None, None) => {}
            }
        }
    }
    out
}
