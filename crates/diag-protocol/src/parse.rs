//! The one parser per agent output contract (openspec/specs/verified-evidence/spec.md), shared by every caller: model text in,
//! a typed contract value or a typed [`ContractViolation`] out. A violation is INVALID_OUTPUT;
//! nothing is ever repaired, guessed or defaulted into a verdict.
//!
//! Rules common to every contract, including the decisions the spec leaves open:
//! - The text is exactly one JSON object, optionally inside one fenced block opened by
//!   ```` ```json ```` or a bare ```` ``` ```` line and closed by a ```` ``` ```` line of its own,
//!   with only whitespace outside the fence. Anything else around it is a violation.
//! - Texts over [`MAX_OUTPUT_BYTES`] are refused before parsing: a model answer that large is
//!   not a diagnosis, and the bound keeps memory use predictable.
//! - serde_json parses the document, so nesting deeper than its recursion limit (128) and
//!   numbers outside `f64` (e.g. `1e400`) or lone surrogate escapes (`"\ud800"`) are `NotJson`,
//!   wherever they occur in the document — even in a field that would otherwise be ignored.
//! - Unknown fields are ignored. A required field that is absent is `MissingField`; one that is
//!   `null` or of another type is `WrongType`. An *optional* field that is `null` is treated as
//!   absent, because `null` carries no claim.
//!   Two exceptions are read strictly (`UnknownMember`): a derivation and its operands
//!   (`composer_answer_v2`), whose every member is arithmetic, and `derivations` in a
//!   `composer_answer_v1` document, which would otherwise be dropped unchecked.
//! - Ids and free text that a later stage shows or matches on (ids, claim text, quotes, goals,
//!   list entries) must be non-blank; ids must be unique within their list.
//! - Messages quote at most [`SNIPPET_CHARS`] characters of model text, Debug-escaped so that no
//!   terminal control sequence survives into a log line.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::composer::{self, ComposerAnswer};
use super::derivation::{
    check_derivations, is_derivation_id, CheckedDerivation, Derivation, DerivationError, Operand,
};
use super::executor::{self, Binding, Claim, ExecutorHypothesis, ExecutorOutput, NoEvidence};
use super::grounding::{EvidenceContext, Marker, TokenCheck, TokenKind};
use super::json_pointer::{self, PointerError};
use super::planner::{self, Plan, PlanHypothesis, PlanStep, PlannerMode};
use super::retry::{QueryRef, RetryContext};
use super::verified::VerifiedExecutorOutput;
use super::verifier::{self, ClaimCheck, Fact, Verdict, Verification, VerifierResult};

/// The largest model text any parser accepts.
pub const MAX_OUTPUT_BYTES: usize = 4 * 1024 * 1024;

/// The most characters of model text a violation message quotes.
pub const SNIPPET_CHARS: usize = 80;

/// Why a model's text is not a legal instance of its contract.
///
/// Every variant maps to INVALID_OUTPUT; [`ContractViolation::reason`] gives the short code
/// recorded in orchestration event details. `field` values are paths such as
/// `claims[2].bindings[0].raw_path`, built from the contract's own key names and indices.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ContractViolation {
    #[error("the output is empty")]
    EmptyOutput,
    #[error("the output is {bytes} bytes, more than the {MAX_OUTPUT_BYTES} allowed")]
    TooLarge { bytes: usize },
    #[error("the output is not JSON: {detail}")]
    NotJson { detail: String },
    #[error("the JSON document is surrounded by other text")]
    ProseAroundJson,
    #[error("the output holds more than one JSON document")]
    MultipleDocuments,
    #[error("the fenced block is unclosed, not on lines of its own, or not marked json")]
    BadFence,
    #[error("the top-level JSON value is {found}, not an object")]
    NotAnObject { found: &'static str },
    #[error("schema is {found:?}, expected {expected:?}")]
    WrongSchema {
        expected: &'static str,
        found: String,
    },
    #[error("missing required field `{field}`")]
    MissingField { field: String },
    #[error("`{field}` is {found}, expected {expected}")]
    WrongType {
        field: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("`{field}` is blank")]
    Blank { field: String },
    #[error("`{field}` is empty")]
    EmptyList { field: String },
    #[error("`{field}` is {found:?}, expected {expected}")]
    InvalidValue {
        field: String,
        expected: &'static str,
        found: String,
    },
    #[error("`{field}` is {value}, outside [0, 1]")]
    OutOfRange { field: String, value: f64 },
    #[error("`{field}` repeats the id {id:?}")]
    DuplicateId { field: String, id: String },
    #[error("`{field}` names the unknown tool {tool:?}")]
    UnknownTool { field: String, tool: String },
    #[error("`{field}` references {id:?}, which is not among the ids it may reference")]
    UnknownReference { field: String, id: String },
    #[error("`{field}` is not a valid JSON Pointer: {error}")]
    InvalidPointer { field: String, error: PointerError },
    #[error("no claims, no no_evidence entries and no limitations: an empty result")]
    EmptyResult,
    #[error("mode is {}, expected {}", found.as_str(), expected.as_str())]
    ModeMismatch {
        expected: PlannerMode,
        found: PlannerMode,
    },
    #[error("an EVIDENCE_GAP_ONLY plan was parsed without its retry context")]
    MissingRetryContext,
    #[error("`{field}` is {gap_id:?}, which is not a listed critical gap")]
    GapNotListed { field: String, gap_id: String },
    #[error("`{field}` repeats a completed query of {tool:?}")]
    RepeatsCompletedQuery { field: String, tool: String },
    #[error("the evidence-retry snapshot drops the verified claim {claim_id:?}")]
    MissingPriorClaim { claim_id: String },
    #[error("`{field}` allows {claim_id:?}, which `claim_checks` does not mark supported")]
    AllowsUnsupportedClaim { field: String, claim_id: String },
    #[error("`{field}` allows {claim_id:?}, which the fact `{fact}` marks contradicted")]
    AllowsContradictedClaim {
        field: String,
        claim_id: String,
        fact: String,
    },
    #[error("the verdict is PASS but `allowed_claims` is empty")]
    PassWithoutAllowedClaims,
    #[error("`answer_markdown` cites {claim_id:?} inline, which is not an allowed claim")]
    InlineCitationNotAllowed { claim_id: String },
    #[error(
        "the inline citations of `answer_markdown` and `cited_claims` disagree on {claim_id:?}"
    )]
    CitationsDisagree { claim_id: String },
    #[error("`answer_markdown` cites no claim although {allowed} are allowed")]
    CitesNoClaim { allowed: usize },
    #[error(
        "`answer_markdown` line {line} holds the {kind} {token:?}, which neither the question \
         nor the allowed claims' evidence shows"
    )]
    UnboundAnswerToken {
        kind: TokenKind,
        /// As the reader sees it, bounded, control characters dropped.
        token: String,
        line: u32,
    },
    #[error(
        "`{field}` is {found:?}, not a claim id (a letter, then at most {} letters, digits, \
         '_' or '-')",
        MAX_CLAIM_ID_CHARS - 1
    )]
    InvalidClaimId { field: String, found: String },
    #[error("`{field}` is longer than {MAX_POINTER_BYTES} bytes or holds a control character")]
    UnboundedPointer { field: String },
    #[error(
        "`{field}` is {found:?}, not a plain name (1 to {MAX_NAME_CHARS} letters, digits, '_' \
         or '-')"
    )]
    InvalidName { field: String, found: String },
    /// A member the contract does not have where it is read strictly: `derivations` in a
    /// `composer_answer_v1` document, or an unknown member of a derivation or an operand.
    #[error("`{field}` is not a member of {of}")]
    UnknownMember { field: String, of: &'static str },
    #[error("`{field}` is {id:?}, which is also the id of an allowed claim")]
    DerivationIdIsClaim { field: String, id: String },
    /// A derivation that is malformed (its id) or does not hold; the reason is the
    /// derivation's own (`derivation_wrong`, `derivation_not_cited`, …).
    #[error("{0}")]
    Derivation(DerivationError),
}

/// The longest claim id (openspec/specs/verified-evidence/spec.md: model-written identifiers have strict formats).
pub const MAX_CLAIM_ID_CHARS: usize = 32;
/// The longest `raw_path`, in bytes.
pub const MAX_POINTER_BYTES: usize = 512;
/// The longest invocation id or tool name a binding may name (tool names are at most 64).
pub const MAX_NAME_CHARS: usize = 64;

/// `^[A-Za-z][A-Za-z0-9_-]{0,31}$`.
pub fn is_claim_id(s: &str) -> bool {
    super::grounding::is_claim_id(s)
}

/// `^[A-Za-z0-9_-]{1,64}$`: the shape of invocation ids (`inv-3`) and tool names.
pub fn is_plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_CHARS
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ContractViolation {
    /// A short snake_case code for event details: bounded control data, never model text.
    pub fn reason(&self) -> &'static str {
        match self {
            ContractViolation::EmptyOutput => "empty_output",
            ContractViolation::TooLarge { .. } => "too_large",
            ContractViolation::NotJson { .. } => "not_json",
            ContractViolation::ProseAroundJson => "prose_around_json",
            ContractViolation::MultipleDocuments => "multiple_documents",
            ContractViolation::BadFence => "bad_fence",
            ContractViolation::NotAnObject { .. } => "not_an_object",
            ContractViolation::WrongSchema { .. } => "wrong_schema",
            ContractViolation::MissingField { .. } => "missing_field",
            ContractViolation::WrongType { .. } => "wrong_type",
            ContractViolation::Blank { .. } => "blank_field",
            ContractViolation::EmptyList { .. } => "empty_list",
            ContractViolation::InvalidValue { .. } => "invalid_value",
            ContractViolation::OutOfRange { .. } => "out_of_range",
            ContractViolation::DuplicateId { .. } => "duplicate_id",
            ContractViolation::UnknownTool { .. } => "unknown_tool",
            ContractViolation::UnknownReference { .. } => "unknown_reference",
            ContractViolation::InvalidPointer { .. } => "invalid_pointer",
            ContractViolation::EmptyResult => "empty_result",
            ContractViolation::ModeMismatch { .. } => "mode_mismatch",
            ContractViolation::MissingRetryContext => "missing_retry_context",
            ContractViolation::GapNotListed { .. } => "gap_not_listed",
            ContractViolation::RepeatsCompletedQuery { .. } => "repeats_completed_query",
            ContractViolation::MissingPriorClaim { .. } => "missing_prior_claim",
            ContractViolation::InvalidClaimId { .. } => "invalid_claim_id",
            ContractViolation::UnboundedPointer { .. } => "unbounded_pointer",
            ContractViolation::InvalidName { .. } => "invalid_name",
            ContractViolation::AllowsUnsupportedClaim { .. } => "allows_unsupported_claim",
            ContractViolation::AllowsContradictedClaim { .. } => "allows_contradicted_claim",
            ContractViolation::PassWithoutAllowedClaims => "pass_without_allowed_claims",
            ContractViolation::InlineCitationNotAllowed { .. } => "inline_citation_not_allowed",
            ContractViolation::CitationsDisagree { .. } => "citations_disagree",
            ContractViolation::CitesNoClaim { .. } => "cites_no_claim",
            ContractViolation::UnboundAnswerToken { .. } => "unbound_answer_token",
            ContractViolation::UnknownMember { .. } => "unknown_member",
            ContractViolation::DerivationIdIsClaim { .. } => "derivation_id_is_claim",
            ContractViolation::Derivation(e) => e.reason(),
        }
    }
}

type Result<T> = std::result::Result<T, ContractViolation>;

// ---------------------------------------------------------------------------------------------
// Front end: text → exactly one JSON object.

/// The shared front end: the model text as exactly one JSON object (fence tolerated).
pub fn json_document(text: &str) -> Result<Map<String, Value>> {
    if text.len() > MAX_OUTPUT_BYTES {
        return Err(ContractViolation::TooLarge { bytes: text.len() });
    }
    let trimmed = text.trim();
    let body = if trimmed.starts_with("```") {
        unfence(trimmed)?
    } else {
        trimmed
    };
    match single_document(body)? {
        Value::Object(map) => Ok(map),
        other => Err(ContractViolation::NotAnObject {
            found: kind(&other),
        }),
    }
}

/// The body of a single fenced block that makes up the whole (trimmed) text.
fn unfence(text: &str) -> Result<&str> {
    let Some((info, content)) = text[3..].split_once('\n') else {
        return Err(ContractViolation::BadFence);
    };
    let info = info.trim();
    if !(info.is_empty() || info.eq_ignore_ascii_case("json")) {
        return Err(ContractViolation::BadFence);
    }
    // A line holding only ``` cannot occur inside a JSON document (strings cannot contain raw
    // newlines), so the first such line is the closing fence.
    let mut offset = 0;
    for line in content.split_inclusive('\n') {
        if line.trim() == "```" {
            let after = &content[offset + line.len()..];
            if !after.trim().is_empty() {
                return Err(classify_trailing(after));
            }
            return Ok(&content[..offset]);
        }
        offset += line.len();
    }
    Err(ContractViolation::BadFence)
}

fn single_document(body: &str) -> Result<Value> {
    let body = body.trim();
    if body.is_empty() {
        return Err(ContractViolation::EmptyOutput);
    }
    let mut stream = serde_json::Deserializer::from_str(body).into_iter::<Value>();
    match stream.next() {
        Some(Ok(value)) => {
            let rest = &body[stream.byte_offset()..];
            if rest.trim().is_empty() {
                Ok(value)
            } else {
                Err(classify_trailing(rest))
            }
        }
        Some(Err(e)) => {
            // Text that does not open with JSON but has an object further on is prose wrapped
            // around a document ("Here is the plan: {...}"); anything else is just not JSON.
            let opens_json = body.starts_with('{') || body.starts_with('[');
            if !opens_json && body.contains('{') {
                Err(ContractViolation::ProseAroundJson)
            } else {
                Err(ContractViolation::NotJson {
                    detail: snip(&e.to_string()),
                })
            }
        }
        None => Err(ContractViolation::EmptyOutput),
    }
}

/// Non-whitespace after the first document: a second document, or prose.
fn classify_trailing(rest: &str) -> ContractViolation {
    let rest = rest.trim_start();
    let second = match rest.strip_prefix("```") {
        Some(fenced) => fenced.split_once('\n').map_or("", |(_, body)| body),
        None => rest,
    };
    if opens_with_container(second) {
        ContractViolation::MultipleDocuments
    } else {
        ContractViolation::ProseAroundJson
    }
}

/// Whether `s` begins with a complete JSON object or array (trailing text allowed).
fn opens_with_container(s: &str) -> bool {
    let s = s.trim_start();
    (s.starts_with('{') || s.starts_with('['))
        && matches!(
            serde_json::Deserializer::from_str(s)
                .into_iter::<serde::de::IgnoredAny>()
                .next(),
            Some(Ok(_))
        )
}

// ---------------------------------------------------------------------------------------------
// Planner.

/// Parses a `planner_plan_v1` document.
///
/// `mode` is the mode the graph asked for; the document must state the same one. In
/// EVIDENCE_GAP_ONLY mode `retry` is required, every step must carry a `gap_id` listed in
/// `retry.critical_gaps`, and no step may repeat one of `retry.completed_queries` (compared as
/// [`QueryRef`]s, so argument key order does not disguise a repeat); without `retry` the plan
/// fails closed with [`ContractViolation::MissingRetryContext`]. In NORMAL mode `retry` is
/// ignored. Tool names match `known_tools` exactly (case-sensitive); tool arguments are opaque
/// here beyond being an object — each tool validates its own.
///
/// `hypotheses` is optional (absent or `null` → none); when present each needs a non-blank,
/// unique `id` and a non-blank `statement`. Step and hypothesis ids share no namespace. In
/// NORMAL mode a step's `gap_id` is type-checked and then dropped, since there are no gaps for
/// it to name; a parsed step therefore has a `gap_id` only in EVIDENCE_GAP_ONLY mode.
pub fn parse_plan(
    text: &str,
    known_tools: &[&str],
    mode: PlannerMode,
    retry: Option<&RetryContext>,
) -> Result<Plan> {
    let map = json_document(text)?;
    let doc = Obj::root(&map);
    check_schema(&doc, planner::SCHEMA)?;

    let found = doc.enumerated("mode", "NORMAL or EVIDENCE_GAP_ONLY", |s| match s {
        "NORMAL" => Some(PlannerMode::Normal),
        "EVIDENCE_GAP_ONLY" => Some(PlannerMode::EvidenceGapOnly),
        _ => None,
    })?;
    if found != mode {
        return Err(ContractViolation::ModeMismatch {
            expected: mode,
            found,
        });
    }
    let retry = match mode {
        PlannerMode::Normal => None,
        PlannerMode::EvidenceGapOnly => Some(retry.ok_or(ContractViolation::MissingRetryContext)?),
    };

    // An id left out is the item's position (`h1`, `s1`, …): the grammar form of the
    // contract asks for none, so a small model held to it cannot repeat one. An id that is
    // given must still be unique among the given and the positional ones.
    let positional = |prefix: &str, i: usize| format!("{prefix}{}", i + 1);
    let hypothesis_objects = doc.optional_objects("hypotheses")?;
    let hypothesis_ids = hypothesis_objects
        .iter()
        .enumerate()
        .map(|(i, h)| optional_id(h, || positional("h", i)))
        .collect::<Result<Vec<_>>>()?;
    let mut hypotheses = Vec::new();
    let mut seen = Seen::default();
    for (h, id) in hypothesis_objects.iter().zip(&hypothesis_ids) {
        seen.insert(id, || h.field("id"))?;
        hypotheses.push(PlanHypothesis {
            id: id.to_string(),
            statement: h.text("statement")?.to_string(),
        });
    }

    let steps_field = doc.array("steps")?;
    if steps_field.is_empty() {
        return Err(ContractViolation::EmptyList {
            field: doc.field("steps"),
        });
    }
    let mut steps = Vec::with_capacity(steps_field.len());
    let step_objects = objects(steps_field, &doc.field("steps"))?;
    let step_ids = step_objects
        .iter()
        .enumerate()
        .map(|(i, s)| optional_id(s, || positional("s", i)))
        .collect::<Result<Vec<_>>>()?;
    let mut seen = Seen::default();
    for (s, id) in step_objects.into_iter().zip(&step_ids) {
        let id = id.as_str();
        seen.insert(id, || s.field("id"))?;
        let goal = s.text("goal")?;
        let tool = s.text("tool")?;
        if !known_tools.contains(&tool) {
            return Err(ContractViolation::UnknownTool {
                field: s.field("tool"),
                tool: snip(tool),
            });
        }
        let arguments = s.object("arguments")?.clone();
        let gap_id = match retry {
            None => {
                s.optional_string("gap_id")?;
                None
            }
            Some(retry) => {
                let gap_id = s.text("gap_id")?;
                if !retry.critical_gaps.iter().any(|g| g.id == gap_id) {
                    return Err(ContractViolation::GapNotListed {
                        field: s.field("gap_id"),
                        gap_id: snip(gap_id),
                    });
                }
                let query = QueryRef::new(tool, &Value::Object(arguments.clone()));
                if retry.completed_queries.contains(&query) {
                    return Err(ContractViolation::RepeatsCompletedQuery {
                        field: s.path.clone(),
                        tool: snip(tool),
                    });
                }
                Some(gap_id.to_string())
            }
        };
        steps.push(PlanStep {
            id: id.to_string(),
            goal: goal.to_string(),
            tool: tool.to_string(),
            arguments,
            gap_id,
        });
    }

    Ok(Plan {
        mode,
        hypotheses,
        steps,
    })
}

/// An item's `id`: the given one (non-blank), or `fallback()` when it is absent or `null`.
fn optional_id(item: &Obj<'_>, fallback: impl FnOnce() -> String) -> Result<String> {
    match item.optional("id") {
        None => Ok(fallback()),
        Some(_) => Ok(item.text("id")?.to_string()),
    }
}

// ---------------------------------------------------------------------------------------------
// Executor.

/// Parses an `executor_evidence_v2` document.
///
/// `claims` is required (it may be empty); `hypotheses`, `no_evidence` and `limitations`
/// default to empty when absent or `null`. Each claim needs a unique non-blank `claim_id`,
/// non-blank `text` and a `bindings` array, which may be empty: an unbound claim is the
/// Gatekeeper's to count and grade, not a parse failure. Each binding needs non-blank
/// `source_invocation_id`, `tool_name` and `quote`, and a `raw_path` that is a syntactically
/// valid RFC 6901 pointer (resolving it is the Gatekeeper's job). Hypotheses need a unique
/// non-blank `id`, non-blank `text` and a string `status`; `no_evidence` entries need non-blank
/// `query_ref` and `reason`; limitations are non-blank strings. A document with no claims, no
/// no_evidence entries and no limitations is [`ContractViolation::EmptyResult`].
/// What a well-formed Executor result must also agree with (openspec/specs/verified-evidence/spec.md): in an evidence-retry
/// round its complete snapshot keeps every claim the prior round verified (`prior`), and a
/// `no_evidence` entry's `query_ref` names a tool call this run really made
/// (`invocation_ids`, the run's own). A broken reference is INVALID_OUTPUT like any other.
pub fn check_executor_references(
    output: &ExecutorOutput,
    prior: Option<&VerifiedExecutorOutput>,
    invocation_ids: &[&str],
) -> Result<()> {
    let kept: Vec<&str> = prior
        .map(|p| p.claims.iter().map(|c| c.claim_id.as_str()).collect())
        .unwrap_or_default();
    check_executor_reference_ids(output, &kept, invocation_ids)
}

/// [`check_executor_references`] with the prior verified claims given by id.
pub fn check_executor_reference_ids(
    output: &ExecutorOutput,
    kept_claim_ids: &[&str],
    invocation_ids: &[&str],
) -> Result<()> {
    for kept in kept_claim_ids {
        if !output.claims.iter().any(|c| c.claim_id == *kept) {
            return Err(ContractViolation::MissingPriorClaim {
                claim_id: snip(kept),
            });
        }
    }
    for (i, n) in output.no_evidence.iter().enumerate() {
        if !invocation_ids.contains(&n.query_ref.as_str()) {
            return Err(ContractViolation::UnknownReference {
                field: format!("no_evidence[{i}].query_ref"),
                id: snip(&n.query_ref),
            });
        }
    }
    Ok(())
}

pub fn parse_executor(text: &str) -> Result<ExecutorOutput> {
    let map = json_document(text)?;
    let doc = Obj::root(&map);
    check_schema(&doc, executor::SCHEMA)?;

    let mut claims = Vec::new();
    let mut seen = Seen::default();
    for c in objects(doc.array("claims")?, &doc.field("claims"))? {
        let claim_id = c.text("claim_id")?;
        if !is_claim_id(claim_id) {
            return Err(ContractViolation::InvalidClaimId {
                field: c.field("claim_id"),
                found: snip(claim_id),
            });
        }
        seen.insert(claim_id, || c.field("claim_id"))?;
        let text = c.text("text")?;
        let mut bindings = Vec::new();
        for b in objects(c.array("bindings")?, &c.field("bindings"))? {
            let source_invocation_id = b.text("source_invocation_id")?;
            let tool_name = b.text("tool_name")?;
            for (key, value) in [
                ("source_invocation_id", source_invocation_id),
                ("tool_name", tool_name),
            ] {
                if !is_plain_name(value) {
                    return Err(ContractViolation::InvalidName {
                        field: b.field(key),
                        found: snip(value),
                    });
                }
            }
            let raw_path = b.string("raw_path")?;
            if raw_path.len() > MAX_POINTER_BYTES || raw_path.chars().any(char::is_control) {
                return Err(ContractViolation::UnboundedPointer {
                    field: b.field("raw_path"),
                });
            }
            json_pointer::validate(raw_path).map_err(|error| {
                ContractViolation::InvalidPointer {
                    field: b.field("raw_path"),
                    error,
                }
            })?;
            let quote = b.text("quote")?;
            bindings.push(Binding {
                source_invocation_id: source_invocation_id.to_string(),
                tool_name: tool_name.to_string(),
                raw_path: raw_path.to_string(),
                quote: quote.to_string(),
            });
        }
        claims.push(Claim {
            claim_id: claim_id.to_string(),
            text: text.to_string(),
            bindings,
        });
    }

    let mut hypotheses = Vec::new();
    let mut seen = Seen::default();
    for h in doc.optional_objects("hypotheses")? {
        let id = h.text("id")?;
        seen.insert(id, || h.field("id"))?;
        hypotheses.push(ExecutorHypothesis {
            id: id.to_string(),
            text: h.text("text")?.to_string(),
            status: h.string("status")?.to_string(),
        });
    }

    let mut no_evidence = Vec::new();
    for n in doc.optional_objects("no_evidence")? {
        no_evidence.push(NoEvidence {
            query_ref: n.text("query_ref")?.to_string(),
            reason: n.text("reason")?.to_string(),
        });
    }

    let limitations = texts(
        doc.optional_array("limitations")?,
        &doc.field("limitations"),
    )?;

    let output = ExecutorOutput {
        claims,
        hypotheses,
        no_evidence,
        limitations,
    };
    if output.claims.is_empty() && !output.is_no_evidence() {
        return Err(ContractViolation::EmptyResult);
    }
    Ok(output)
}

// ---------------------------------------------------------------------------------------------
// Verifier.

/// Parses a `verifier_verdict_v1` document against the claim ids the Verifier was shown.
///
/// Required: `verdict` (exactly PASS, LOW_CONFID or REJECT), `groundedness` (a number in
/// [0, 1]), `claim_checks`, `facts` and `allowed_claims` (arrays, possibly empty). Every claim
/// id anywhere must be one of `verified_claim_ids`; ids in `claim_checks` and
/// `allowed_claims`, and within one fact's `claim_ids`, must be unique. A fact needs non-blank
/// `fact`, a boolean `is_critical` (it decides evidence retry, so it is never defaulted) and a
/// `verification`; its `claim_ids` defaults to empty, since a no-evidence fact has none.
/// `missing_information` and `recommendations` default to empty and hold non-blank strings;
/// `rationale` defaults to "".
pub fn parse_verifier(text: &str, verified_claim_ids: &[String]) -> Result<VerifierResult> {
    let map = json_document(text)?;
    let doc = Obj::root(&map);
    check_schema(&doc, verifier::SCHEMA)?;
    let known: HashSet<&str> = verified_claim_ids.iter().map(String::as_str).collect();

    let verdict = doc.enumerated("verdict", "PASS, LOW_CONFID or REJECT", |s| match s {
        "PASS" => Some(Verdict::Pass),
        "LOW_CONFID" => Some(Verdict::LowConfid),
        "REJECT" => Some(Verdict::Reject),
        _ => None,
    })?;

    let groundedness = doc.number("groundedness")?;
    if !(groundedness.is_finite() && (0.0..=1.0).contains(&groundedness)) {
        return Err(ContractViolation::OutOfRange {
            field: doc.field("groundedness"),
            value: groundedness,
        });
    }

    let mut claim_checks = Vec::new();
    let mut seen = Seen::default();
    for c in objects(doc.array("claim_checks")?, &doc.field("claim_checks"))? {
        let claim_id = c.string("claim_id")?;
        reference(claim_id, &known, || c.field("claim_id"))?;
        seen.insert(claim_id, || c.field("claim_id"))?;
        claim_checks.push(ClaimCheck {
            claim_id: claim_id.to_string(),
            supported: c.boolean("supported")?,
        });
    }

    let mut facts = Vec::new();
    for f in objects(doc.array("facts")?, &doc.field("facts"))? {
        let fact = f.text("fact")?.to_string();
        let is_critical = f.boolean("is_critical")?;
        let verification = f.enumerated(
            "verification",
            "supported, indirect_support, no_evidence or contradicted",
            |s| match s {
                "supported" => Some(Verification::Supported),
                "indirect_support" => Some(Verification::IndirectSupport),
                "no_evidence" => Some(Verification::NoEvidence),
                "contradicted" => Some(Verification::Contradicted),
                _ => None,
            },
        )?;
        let claim_ids = references(
            f.optional_array("claim_ids")?,
            &f.field("claim_ids"),
            &known,
        )?;
        facts.push(Fact {
            fact,
            is_critical,
            verification,
            claim_ids,
        });
    }

    let allowed_claims = references(
        doc.array("allowed_claims")?,
        &doc.field("allowed_claims"),
        &known,
    )?;
    let missing_information = texts(
        doc.optional_array("missing_information")?,
        &doc.field("missing_information"),
    )?;
    let recommendations = texts(
        doc.optional_array("recommendations")?,
        &doc.field("recommendations"),
    )?;
    let rationale = doc.optional_string("rationale")?.unwrap_or("").to_string();
    check_verifier_consistency(verdict, &claim_checks, &facts, &allowed_claims)?;

    Ok(VerifierResult {
        verdict,
        groundedness,
        claim_checks,
        facts,
        allowed_claims,
        missing_information,
        recommendations,
        rationale,
    })
}

/// The Verifier agrees with itself (openspec/specs/verified-evidence/spec.md): every allowed claim is one its own
/// `claim_checks` mark `supported: true` (a claim without a check is not supported), no fact
/// of its own with verification `contradicted` names an allowed claim, and a PASS verdict
/// allows at least one claim. The first violation in `allowed_claims` order is reported.
fn check_verifier_consistency(
    verdict: Verdict,
    claim_checks: &[ClaimCheck],
    facts: &[Fact],
    allowed_claims: &[String],
) -> Result<()> {
    for (i, id) in allowed_claims.iter().enumerate() {
        let field = || format!("allowed_claims[{i}]");
        let supported = claim_checks
            .iter()
            .any(|c| c.claim_id == *id && c.supported);
        if !supported {
            return Err(ContractViolation::AllowsUnsupportedClaim {
                field: field(),
                claim_id: snip(id),
            });
        }
        if let Some(f) = facts
            .iter()
            .position(|f| f.verification == Verification::Contradicted && f.claim_ids.contains(id))
        {
            return Err(ContractViolation::AllowsContradictedClaim {
                field: field(),
                claim_id: snip(id),
                fact: format!("facts[{f}]"),
            });
        }
    }
    if verdict == Verdict::Pass && allowed_claims.is_empty() {
        return Err(ContractViolation::PassWithoutAllowedClaims);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Composer.

/// Parses a `composer_answer_v1` or `composer_answer_v2` document. `answer_markdown` must be
/// non-blank; `cited_claims` is required (possibly empty), unique, and a subset of
/// `allowed_claims`.
///
/// A v1 document has no `derivations` member ([`ContractViolation::UnknownMember`]). A v2
/// document requires `derivations`, an array (possibly empty) of derivations read strictly
/// ([`parse_derivations`]).
///
/// What the answer says is checked after it is rendered (the text an operator sees), by
/// [`check_answer_citations_with_derivations`], [`check_answer_derivations`] and
/// [`check_answer_tokens`].
pub fn parse_composer(text: &str, allowed_claims: &[String]) -> Result<ComposerAnswer> {
    let map = json_document(text)?;
    let doc = Obj::root(&map);
    let v2 = doc.string("schema")? == composer::SCHEMA_V2;
    if !v2 {
        check_schema(&doc, composer::SCHEMA)?;
        if map.contains_key("derivations") {
            return Err(ContractViolation::UnknownMember {
                field: doc.field("derivations"),
                of: composer::SCHEMA,
            });
        }
    }
    let allowed: HashSet<&str> = allowed_claims.iter().map(String::as_str).collect();
    let answer_markdown = doc.text("answer_markdown")?.to_string();
    // `cited_claims` is a set: an id listed again says nothing new (a small model repeats
    // its last item), so repeats are dropped rather than refused; every id is still checked.
    let listed = doc.array("cited_claims")?;
    let mut unique: Vec<Value> = Vec::with_capacity(listed.len());
    for v in listed {
        if !(v.is_string() && unique.contains(v)) {
            unique.push(v.clone());
        }
    }
    let cited_claims = references(&unique, &doc.field("cited_claims"), &allowed)?;
    let derivations = if v2 {
        parse_derivations(&doc, &allowed)?
    } else {
        Vec::new()
    };
    Ok(ComposerAnswer {
        answer_markdown,
        cited_claims,
        derivations,
    })
}

/// The members of a derivation and of an operand.
const DERIVATION_MEMBERS: [&str; 5] = ["id", "value", "unit", "op", "operands"];
const OPERAND_MEMBERS: [&str; 3] = ["claim", "value", "unit"];

/// The `derivations` of a `composer_answer_v2` document: objects `{id, value, unit?, op,
/// operands: [{claim, value, unit?}]}` with no other member (a member the checker would
/// ignore, `rounding` or `scale`, could change what the arithmetic means, so it is refused:
/// [`ContractViolation::UnknownMember`]). Ids are derivation ids ([`is_derivation_id`]),
/// unique, and none is the id of an allowed claim, so a marker names one or the other.
/// `value`, `op`, an operand's `value` are non-blank; a `unit` is absent, `null` or
/// non-blank; an operand's `claim` is in the claim-id format. Whether the operation exists,
/// takes these operands and gives the stated result is [`check_answer_derivations`]'s.
fn parse_derivations(doc: &Obj<'_>, allowed: &HashSet<&str>) -> Result<Vec<Derivation>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for d in objects(doc.array("derivations")?, &doc.field("derivations"))? {
        only_members(&d, &DERIVATION_MEMBERS, "a derivation")?;
        let id = d.text("id")?;
        if !is_derivation_id(id) {
            return Err(ContractViolation::Derivation(DerivationError::BadId {
                id: snip(id),
            }));
        }
        if allowed.contains(id) {
            return Err(ContractViolation::DerivationIdIsClaim {
                field: d.field("id"),
                id: id.to_string(),
            });
        }
        if !seen.insert(id) {
            return Err(ContractViolation::Derivation(DerivationError::Duplicate {
                id: id.to_string(),
            }));
        }
        let mut operands = Vec::new();
        for o in objects(d.array("operands")?, &d.field("operands"))? {
            only_members(&o, &OPERAND_MEMBERS, "a derivation operand")?;
            let claim = o.text("claim")?;
            if !is_claim_id(claim) {
                return Err(ContractViolation::InvalidClaimId {
                    field: o.field("claim"),
                    found: snip(claim),
                });
            }
            operands.push(Operand {
                claim: claim.to_string(),
                value: o.text("value")?.to_string(),
                unit: optional_text(&o, "unit")?,
            });
        }
        out.push(Derivation {
            id: id.to_string(),
            value: d.text("value")?.to_string(),
            unit: optional_text(&d, "unit")?,
            op: d.text("op")?.to_string(),
            operands,
        });
    }
    Ok(out)
}

/// Refuses any member of `o` not in `members`.
fn only_members(o: &Obj<'_>, members: &[&str], of: &'static str) -> Result<()> {
    match o.map.keys().find(|k| !members.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(ContractViolation::UnknownMember {
            field: o.field(&snip(k)),
            of,
        }),
    }
}

/// An optional string that, when given, is not blank.
fn optional_text(o: &Obj<'_>, key: &str) -> Result<Option<String>> {
    match o.optional(key) {
        None => Ok(None),
        Some(_) => Ok(Some(o.text(key)?.to_string())),
    }
}

/// The citation rules of an answer (openspec/specs/verified-evidence/spec.md), over the answer
/// as its reader sees it ([`answer_markers`](super::grounding::answer_markers): citation
/// markers in running text, not in code blocks, links or their destinations): every id a
/// marker names is an allowed claim, the ids the markers name agree with `cited_claims`,
/// and when any claim is allowed the answer cites at least one.
///
/// A range `[c4–c6]` (an en or em dash, a spaced hyphen, or `c4-c6` when no claim has that
/// id) names its two ends, which must be allowed and cited, and the allowed claims between
/// them (same letters, numbers between), which `cited_claims` may list or leave out.
pub fn check_answer_citations(
    answer: &str,
    cited_claims: &[String],
    allowed_claims: &[String],
) -> Result<()> {
    check_answer_citations_with_derivations(answer, cited_claims, allowed_claims, &[])
}

/// [`check_answer_citations`] for an answer that lists derivations (`composer_answer_v2`):
/// an id a marker names that is one of `derivation_ids` cites that derivation, not a claim,
/// and is left out of the claim rules (`96 % [d1]`, `[c6, d1]`). An id that is neither an
/// allowed claim nor a listed derivation is refused as before
/// (`inline_citation_not_allowed`). Which derivations are cited is [`cited_derivations`].
pub fn check_answer_citations_with_derivations(
    answer: &str,
    cited_claims: &[String],
    allowed_claims: &[String],
    derivation_ids: &[String],
) -> Result<()> {
    let is_derivation = |id: &String| derivation_ids.contains(id);
    let is_allowed = |id: &str| allowed_claims.iter().any(|a| a == id);
    let mut required: Vec<String> = Vec::new();
    let mut optional: Vec<String> = Vec::new();
    let mut range = |a: &str, b: &str, required: &mut Vec<String>| {
        required.push(a.to_string());
        required.push(b.to_string());
        let split = |s: &str| {
            let l = s.bytes().take_while(u8::is_ascii_alphabetic).count();
            let (p, n) = s.split_at(l);
            n.parse::<u64>().ok().map(|n| (p.to_string(), n))
        };
        if let (Some((pa, na)), Some((pb, nb))) = (split(a), split(b)) {
            for id in allowed_claims {
                if let Some((p, n)) = split(id) {
                    if p == pa && p == pb && n > na && n < nb {
                        optional.push(id.clone());
                    }
                }
            }
        }
    };
    for marker in super::grounding::answer_markers(answer) {
        required.extend(marker.ids);
        for (first, last) in &marker.ranges {
            range(first, last, &mut required);
        }
        for (id, first, last) in &marker.hyphen_ranges {
            if is_allowed(id) {
                required.push(id.clone());
            } else {
                range(first, last, &mut required);
            }
        }
    }
    required.retain(|id| !is_derivation(id));
    if let Some(id) = required.iter().find(|id| !is_allowed(id)) {
        return Err(ContractViolation::InlineCitationNotAllowed { claim_id: snip(id) });
    }
    let disagreeing = required
        .iter()
        .map(String::as_str)
        .find(|id| !cited_claims.iter().any(|c| c == id))
        .or_else(|| {
            cited_claims
                .iter()
                .map(String::as_str)
                .find(|id| !required.iter().chain(optional.iter()).any(|r| r == id))
        });
    if let Some(id) = disagreeing {
        return Err(ContractViolation::CitationsDisagree { claim_id: snip(id) });
    }
    if !allowed_claims.is_empty() && cited_claims.is_empty() {
        return Err(ContractViolation::CitesNoClaim {
            allowed: allowed_claims.len(),
        });
    }
    Ok(())
}

/// The derivations an answer's markers cite: the ids among `derivation_ids` that a marker
/// names, alone, in a list or as the end of a range, as [`check_answer_citations`] reads
/// markers (the answer as rendered, outside code and links). Unique, in the order first
/// cited: the `cited` of [`check_derivations`].
pub fn cited_derivations(answer: &str, derivation_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for marker in super::grounding::answer_markers(answer) {
        for id in marker_ids(&marker) {
            if derivation_ids.contains(&id) && !out.contains(&id) {
                out.push(id);
            }
        }
    }
    out
}

/// Every id a marker names: its ids, the ends of its ranges, and a hyphenated id both whole
/// and as the ends of the range it may be.
fn marker_ids(marker: &Marker) -> Vec<String> {
    let mut ids = marker.ids.clone();
    for (first, last) in &marker.ranges {
        ids.extend([first.clone(), last.clone()]);
    }
    for (id, first, last) in &marker.hyphen_ranges {
        ids.extend([id.clone(), first.clone(), last.clone()]);
    }
    ids
}

/// The derivation rule of an answer (openspec/specs/verified-evidence/spec.md, "A computed
/// value SHALL reach an answer only with its arithmetic checked"): every derivation the
/// answer lists is cited by its markers ([`cited_derivations`] over `answer`, as rendered)
/// and holds ([`check_derivations`]; `evidence` gives the evidence context of an allowed
/// claim, `None` for any other id). The checked derivations extend the answer context
/// ([`context_with_derivations`](super::derivation::context_with_derivations)) the token
/// rule then reads the answer against.
pub fn check_answer_derivations<'e>(
    answer: &str,
    derivations: &[Derivation],
    evidence: &dyn Fn(&str) -> Option<&'e EvidenceContext>,
) -> Result<Vec<CheckedDerivation>> {
    let ids: Vec<String> = derivations.iter().map(|d| d.id.clone()).collect();
    let cited = cited_derivations(answer, &ids);
    check_derivations(derivations, evidence, &cited).map_err(ContractViolation::Derivation)
}

/// The token rule of an answer (openspec/specs/verified-evidence/spec.md), over the answer
/// as its reader sees it: every salient token
/// ([`salient_tokens`](super::grounding::salient_tokens); citation markers and Markdown are
/// not tokens) is shown by `context`, the question and the allowed claims' evidence.
/// Returns what was checked beside the verdict, so a refused answer's figures are kept too;
/// the violation names the first unbound token, its kind and its line.
pub fn check_answer_tokens(answer: &str, context: &EvidenceContext) -> (TokenCheck, Result<()>) {
    let check = context.check(answer);
    let verdict = match check.first() {
        Some(u) => Err(ContractViolation::UnboundAnswerToken {
            kind: u.token.kind,
            token: bounded_token_text(&u.token.text),
            line: u.line,
        }),
        None => Ok(()),
    };
    (check, verdict)
}

pub use super::gatekeeper::bounded_token_text;

// ---------------------------------------------------------------------------------------------
// Field access with paths, so every violation names where it happened.

struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    fn root(map: &'a Map<String, Value>) -> Self {
        Obj {
            map,
            path: String::new(),
        }
    }

    fn field(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn required(&self, key: &str) -> Result<&'a Value> {
        self.map
            .get(key)
            .ok_or_else(|| ContractViolation::MissingField {
                field: self.field(key),
            })
    }

    /// Present and not `null`: how optional fields are read.
    fn optional(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn wrong_type(&self, key: &str, expected: &'static str, found: &Value) -> ContractViolation {
        ContractViolation::WrongType {
            field: self.field(key),
            expected,
            found: kind(found),
        }
    }

    fn string(&self, key: &str) -> Result<&'a str> {
        let v = self.required(key)?;
        v.as_str()
            .ok_or_else(|| self.wrong_type(key, "a string", v))
    }

    /// A required string that is not empty or whitespace only.
    fn text(&self, key: &str) -> Result<&'a str> {
        let s = self.string(key)?;
        if s.trim().is_empty() {
            return Err(ContractViolation::Blank {
                field: self.field(key),
            });
        }
        Ok(s)
    }

    fn optional_string(&self, key: &str) -> Result<Option<&'a str>> {
        match self.optional(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.wrong_type(key, "a string", v)),
        }
    }

    fn boolean(&self, key: &str) -> Result<bool> {
        let v = self.required(key)?;
        v.as_bool()
            .ok_or_else(|| self.wrong_type(key, "a boolean", v))
    }

    fn number(&self, key: &str) -> Result<f64> {
        let v = self.required(key)?;
        v.as_f64()
            .ok_or_else(|| self.wrong_type(key, "a number", v))
    }

    fn object(&self, key: &str) -> Result<&'a Map<String, Value>> {
        let v = self.required(key)?;
        v.as_object()
            .ok_or_else(|| self.wrong_type(key, "an object", v))
    }

    fn array(&self, key: &str) -> Result<&'a [Value]> {
        let v = self.required(key)?;
        v.as_array()
            .map(Vec::as_slice)
            .ok_or_else(|| self.wrong_type(key, "an array", v))
    }

    fn optional_array(&self, key: &str) -> Result<&'a [Value]> {
        match self.optional(key) {
            None => Ok(&[]),
            Some(v) => v
                .as_array()
                .map(Vec::as_slice)
                .ok_or_else(|| self.wrong_type(key, "an array", v)),
        }
    }

    fn optional_objects(&self, key: &str) -> Result<Vec<Obj<'a>>> {
        objects(self.optional_array(key)?, &self.field(key))
    }

    /// A required string that must be one of a closed set: never guessed, never case-folded.
    fn enumerated<T>(
        &self,
        key: &str,
        expected: &'static str,
        pick: impl Fn(&str) -> Option<T>,
    ) -> Result<T> {
        let s = self.string(key)?;
        pick(s).ok_or_else(|| ContractViolation::InvalidValue {
            field: self.field(key),
            expected,
            found: snip(s),
        })
    }
}

fn objects<'a>(items: &'a [Value], path: &str) -> Result<Vec<Obj<'a>>> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let path = format!("{path}[{i}]");
            match v {
                Value::Object(map) => Ok(Obj { map, path }),
                other => Err(ContractViolation::WrongType {
                    field: path,
                    expected: "an object",
                    found: kind(other),
                }),
            }
        })
        .collect()
}

/// Non-blank strings, e.g. limitations or recommendations.
fn texts(items: &[Value], path: &str) -> Result<Vec<String>> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) if s.trim().is_empty() => Err(ContractViolation::Blank {
                field: format!("{path}[{i}]"),
            }),
            Value::String(s) => Ok(s.clone()),
            other => Err(ContractViolation::WrongType {
                field: format!("{path}[{i}]"),
                expected: "a string",
                found: kind(other),
            }),
        })
        .collect()
}

/// A list of unique ids, each of which must be in `known`.
fn references(items: &[Value], path: &str, known: &HashSet<&str>) -> Result<Vec<String>> {
    let mut seen = Seen::default();
    let mut out = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        let field = || format!("{path}[{i}]");
        let id = v.as_str().ok_or_else(|| ContractViolation::WrongType {
            field: field(),
            expected: "a string",
            found: kind(v),
        })?;
        reference(id, known, field)?;
        seen.insert(id, field)?;
        out.push(id.to_string());
    }
    Ok(out)
}

fn reference(id: &str, known: &HashSet<&str>, field: impl FnOnce() -> String) -> Result<()> {
    if known.contains(id) {
        Ok(())
    } else {
        Err(ContractViolation::UnknownReference {
            field: field(),
            id: snip(id),
        })
    }
}

/// Ids already seen in one list.
#[derive(Default)]
struct Seen<'a>(HashSet<&'a str>);

impl<'a> Seen<'a> {
    fn insert(&mut self, id: &'a str, field: impl FnOnce() -> String) -> Result<()> {
        if self.0.insert(id) {
            Ok(())
        } else {
            Err(ContractViolation::DuplicateId {
                field: field(),
                id: snip(id),
            })
        }
    }
}

fn check_schema(doc: &Obj<'_>, expected: &'static str) -> Result<()> {
    let found = doc.string("schema")?;
    if found == expected {
        Ok(())
    } else {
        Err(ContractViolation::WrongSchema {
            expected,
            found: snip(found),
        })
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// At most [`SNIPPET_CHARS`] characters of model text, marked when cut.
fn snip(s: &str) -> String {
    match s.char_indices().nth(SNIPPET_CHARS) {
        None => s.to_string(),
        Some((end, _)) => format!("{}…", &s[..end]),
    }
}

#[cfg(test)]
mod composer_v2_tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;
    use crate::derivation::context_with_derivations;
    use crate::grounding::salient_tokens;

    const ANSWER: &str =
        "96 % of the pool was held by the batch [d1] (48 of 50 connections [c6, c4])";

    fn allowed() -> Vec<String> {
        vec!["c4".into(), "c6".into()]
    }

    fn evidence() -> HashMap<String, EvidenceContext> {
        [
            ("c4", "pool max_connections=50"),
            ("c6", "48 of 50 connections held by settlement-batch"),
        ]
        .into_iter()
        .map(|(id, text)| {
            let mut cx = EvidenceContext::new();
            cx.push_text(text);
            (id.to_string(), cx)
        })
        .collect()
    }

    /// The answer context: the question and the allowed claims' evidence.
    fn answer_context() -> EvidenceContext {
        let mut cx = EvidenceContext::new();
        for text in [
            "why is the pool of payment-db full?",
            "pool max_connections=50",
            "48 of 50 connections held by settlement-batch",
        ] {
            cx.push_text(text);
        }
        cx
    }

    fn derivation(value: &str) -> Value {
        json!({"id": "d1", "value": value, "unit": "%", "op": "percentage",
               "operands": [{"claim": "c6", "value": "48"}, {"claim": "c4", "value": "50"}]})
    }

    fn v2(answer: &str, derivations: Value) -> String {
        json!({"schema": "composer_answer_v2", "answer_markdown": answer,
               "cited_claims": ["c6", "c4"], "derivations": derivations})
        .to_string()
    }

    fn v1(answer: &str) -> String {
        json!({"schema": "composer_answer_v1", "answer_markdown": answer,
               "cited_claims": ["c6", "c4"]})
        .to_string()
    }

    /// Parse, citations, derivations, tokens: the Composer's checks in order.
    fn run(text: &str) -> Result<(ComposerAnswer, Vec<CheckedDerivation>)> {
        let answer = parse_composer(text, &allowed())?;
        let md = &answer.answer_markdown;
        check_answer_citations_with_derivations(
            md,
            &answer.cited_claims,
            &allowed(),
            &answer.derivation_ids(),
        )?;
        let evidence = evidence();
        let lookup = |id: &str| evidence.get(id);
        let checked = check_answer_derivations(md, &answer.derivations, &lookup)?;
        let base = answer_context();
        let context = context_with_derivations(&base, &checked);
        check_answer_tokens(md, &context).1?;
        Ok((answer, checked))
    }

    fn reason(r: Result<impl std::fmt::Debug>) -> &'static str {
        r.expect_err("refused").reason()
    }

    #[test]
    fn a_checked_percentage_passes_every_check() {
        let (answer, checked) = run(&v2(ANSWER, json!([derivation("96")]))).unwrap();
        assert_eq!(answer.derivation_ids(), ["d1"]);
        assert_eq!(checked.len(), 1);
        assert_eq!(checked[0].shown(), "96 % = 48 / 50 × 100 (c6, c4)");
        assert_eq!(
            cited_derivations(ANSWER, &answer.derivation_ids()),
            ["d1"],
            "the marker [d1] cites the derivation"
        );
    }

    #[test]
    fn a_wrong_result_is_refused_with_its_arithmetic() {
        let text = v2(&ANSWER.replace("96", "98"), json!([derivation("98")]));
        let err = run(&text).unwrap_err();
        assert_eq!(err.reason(), "derivation_wrong");
        assert_eq!(
            err.to_string(),
            "derivation_wrong: d1: 48 / 50 × 100 (c6, c4) = 96 %, stated 98 %"
        );
    }

    #[test]
    fn without_a_derivation_the_computed_value_is_unbound() {
        let plain = ANSWER.replace(" [d1]", "");
        match run(&v1(&plain)) {
            Err(ContractViolation::UnboundAnswerToken { kind, token, .. }) => {
                assert_eq!((kind, token.as_str()), (TokenKind::Number, "96"));
            }
            other => panic!("{other:?}"),
        }
        // A v1 answer cannot cite a derivation: `d1` is no allowed claim.
        assert_eq!(reason(run(&v1(ANSWER))), "inline_citation_not_allowed");
        // A v2 answer that lists none is a v1 answer.
        assert_eq!(reason(run(&v2(&plain, json!([])))), "unbound_answer_token");
        // A derivation that does not hold extends nothing.
        let base = answer_context();
        assert!(matches!(
            context_with_derivations(&base, &[]),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_listed_derivation_must_be_cited() {
        let text = v2(&ANSWER.replace(" [d1]", ""), json!([derivation("96")]));
        assert_eq!(reason(run(&text)), "derivation_not_cited");
    }

    #[test]
    fn a_marker_naming_no_derivation_is_refused() {
        let answer = format!("{ANSWER}, twice the usual [d9]");
        let text = v2(&answer, json!([derivation("96")]));
        match run(&text) {
            Err(ContractViolation::InlineCitationNotAllowed { claim_id }) => {
                assert_eq!(claim_id, "d9")
            }
            other => panic!("{other:?}"),
        }
        // Cited together with claims, a derivation is still not a claim to list.
        let mixed = "96 % of the pool was held by the batch (48 of 50 connections [c6, c4, d1])";
        run(&v2(mixed, json!([derivation("96")]))).unwrap();
    }

    #[test]
    fn derivation_markers_are_no_tokens() {
        assert_eq!(salient_tokens("held [d1]"), salient_tokens("held"));
        assert_eq!(salient_tokens("held [c6, d1]"), salient_tokens("held"));
        assert_eq!(salient_tokens("held [d1-d2]"), salient_tokens("held"));
        let ids: Vec<String> = vec!["d1".into(), "d2".into(), "d3".into()];
        assert_eq!(
            cited_derivations("a [d2] b [c1, d1] d [d2]\n\n```\n[d3]\n```", &ids),
            ["d2", "d1"],
            "in order first cited, once each, not in code"
        );
        assert_eq!(cited_derivations("[d1–d3]", &ids), ["d1", "d3"]);
    }

    #[test]
    fn a_v1_document_has_no_derivations() {
        let mut doc: Value = serde_json::from_str(&v1(ANSWER)).unwrap();
        doc["derivations"] = json!([derivation("96")]);
        match parse_composer(&doc.to_string(), &allowed()) {
            Err(ContractViolation::UnknownMember { field, of }) => {
                assert_eq!((field.as_str(), of), ("derivations", "composer_answer_v1"));
            }
            other => panic!("{other:?}"),
        }
        doc["derivations"] = json!([]);
        assert_eq!(
            reason(parse_composer(&doc.to_string(), &allowed())),
            "unknown_member"
        );
    }

    #[test]
    fn v2_derivations_are_read_strictly() {
        let parse = |d: Value| parse_composer(&v2(ANSWER, d), &allowed());
        let with = |pointer: &str, v: Value| {
            let mut d = derivation("96");
            *d.pointer_mut(pointer).unwrap() = v;
            parse(json!([d]))
        };
        let mut extra = derivation("96");
        extra["rounding"] = json!("up");
        assert_eq!(reason(parse(json!([extra]))), "unknown_member");
        let mut extra = derivation("96");
        extra["operands"][0]["scale"] = json!(2);
        match parse(json!([extra])) {
            Err(ContractViolation::UnknownMember { field, .. }) => {
                assert_eq!(field, "derivations[0].operands[0].scale")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(reason(with("/id", json!("x1"))), "derivation_id_invalid");
        assert_eq!(reason(with("/id", json!("d01"))), "derivation_id_invalid");
        assert_eq!(reason(with("/id", json!(1))), "wrong_type");
        assert_eq!(reason(with("/value", json!(" "))), "blank_field");
        assert_eq!(reason(with("/value", json!(96))), "wrong_type");
        assert_eq!(reason(with("/unit", json!(""))), "blank_field");
        assert_eq!(reason(with("/op", json!(null))), "wrong_type");
        assert_eq!(reason(with("/operands", json!({}))), "wrong_type");
        assert_eq!(reason(with("/operands/0", json!("c6"))), "wrong_type");
        assert_eq!(
            reason(with("/operands/0/claim", json!("6c"))),
            "invalid_claim_id"
        );
        let mut d = derivation("96");
        d["operands"][1]["unit"] = json!(5);
        assert_eq!(reason(parse(json!([d]))), "wrong_type");
        assert_eq!(
            reason(parse(json!([derivation("96"), derivation("96")]))),
            "derivation_duplicate_id"
        );
        assert_eq!(reason(parse(json!({}))), "wrong_type");
        assert_eq!(reason(parse(json!([1]))), "wrong_type");
        let mut doc: Value = serde_json::from_str(&v2(ANSWER, json!([]))).unwrap();
        doc.as_object_mut().unwrap().remove("derivations");
        assert_eq!(
            reason(parse_composer(&doc.to_string(), &allowed())),
            "missing_field"
        );
        // An id is a derivation's or a claim's, never both.
        let claims: Vec<String> = vec!["c4".into(), "c6".into(), "d1".into()];
        match parse_composer(&v2(ANSWER, json!([derivation("96")])), &claims) {
            Err(ContractViolation::DerivationIdIsClaim { field, id }) => {
                assert_eq!((field.as_str(), id.as_str()), ("derivations[0].id", "d1"));
            }
            other => panic!("{other:?}"),
        }
        // `unit` and an operand's `unit` may be absent or null; the op is the checker's.
        let mut d = derivation("96");
        d["unit"] = json!(null);
        d["op"] = json!("median");
        d["operands"][0]["unit"] = json!(null);
        let parsed = parse(json!([d])).unwrap();
        assert_eq!(parsed.derivations[0].unit, None);
        assert_eq!(parsed.derivations[0].operands[0].unit, None);
        let evidence = evidence();
        let lookup = |id: &str| evidence.get(id);
        assert_eq!(
            reason(check_answer_derivations(
                ANSWER,
                &parsed.derivations,
                &lookup
            )),
            "derivation_op_unknown"
        );
    }

    #[test]
    fn v2_round_trips_and_v1_serializes_as_before() {
        let answer = parse_composer(&v2(ANSWER, json!([derivation("96")])), &allowed()).unwrap();
        assert_eq!(
            answer.derivations,
            [Derivation {
                id: "d1".into(),
                value: "96".into(),
                unit: Some("%".into()),
                op: "percentage".into(),
                operands: vec![
                    Operand {
                        claim: "c6".into(),
                        value: "48".into(),
                        unit: None
                    },
                    Operand {
                        claim: "c4".into(),
                        value: "50".into(),
                        unit: None
                    },
                ],
            }]
        );
        let json = serde_json::to_value(&answer).unwrap();
        assert_eq!(json["derivations"], json!([derivation("96")]));
        let back: ComposerAnswer = serde_json::from_value(json).unwrap();
        assert_eq!(back, answer);

        let plain = ANSWER.replace(" [d1]", "");
        let v1_answer = parse_composer(&v1(&plain), &allowed()).unwrap();
        assert!(v1_answer.derivations.is_empty());
        let text = serde_json::to_string(&v1_answer).unwrap();
        assert_eq!(
            text,
            format!(
                "{{\"answer_markdown\":{},\"cited_claims\":[\"c6\",\"c4\"]}}",
                json!(plain)
            )
        );
        // A record written before v2 reads back unchanged.
        let old: ComposerAnswer = serde_json::from_str(&text).unwrap();
        assert_eq!(old, v1_answer);
    }
}
