//! JSON Schemas of the agent output contracts, generated from the same rules the parsers in
//! [`super::parse`] enforce, for servers that can constrain decoding (`response_format`).
//!
//! This is the only place the contracts are written as JSON Schema. Each function takes what
//! the matching parser checks against (the tool catalog, the mode and retry context, the ids a
//! Verifier or Composer may reference), so the schema is as tight as the parse: enums of the
//! real tool names, claim ids and gap ids rather than bare strings. The parser stays the
//! authority: a schema constrains what a model is likely to produce, and the parser still
//! checks everything (non-blank text, unique ids, JSON Pointers, completed queries).
//!
//! The schemas are written in the common subset that grammar-based servers (llama.cpp) and
//! strict structured-output servers (OpenAI, vLLM) understand: `type`, `properties`,
//! `required`, `additionalProperties: false` on every object diag defines, `items`, `enum`,
//! `anyOf`, plus `minItems`/`maxItems`, `minLength` and `minimum`/`maximum`, which a strict
//! server does not take and which the adapter removes for it. Optional fields are left out of `required`; the
//! adapter's strict form makes them required and nullable, which every parser reads as absent.
//!
//! List bounds (`maxItems`) keep a constrained small model from generating without end; they
//! are generous for a real diagnosis and only apply where a server enforces the schema.

use serde_json::{json, Map, Value};

use super::planner::PlannerMode;
use super::retry::RetryContext;
use super::{composer, executor, planner, verifier};

/// Most hypotheses a plan or evidence document lists under the schema.
pub const MAX_HYPOTHESES: usize = 6;
/// Most steps of a plan (the Planner prompt asks for at most 6).
pub const MAX_STEPS: usize = 8;
/// Most claims, facts, checks and list entries of one document.
pub const MAX_ITEMS: usize = 12;
/// Most bindings of one claim.
pub const MAX_BINDINGS: usize = 4;

/// A string the parser requires to be non-blank (`minLength` keeps a grammar from producing
/// `""`; blank text of spaces is still the parser's to refuse).
fn text() -> Value {
    json!({"type": "string", "minLength": 1})
}

/// A string the parser takes as it is, empty included.
fn any_text() -> Value {
    json!({"type": "string"})
}

fn texts(max: usize) -> Value {
    json!({"type": "array", "items": text(), "maxItems": max})
}

/// A string that must be one of `values`; with none to choose from, a string (the parser
/// refuses any value there, and an empty `enum` is not valid JSON Schema).
fn one_of(values: &[&str]) -> Value {
    if values.is_empty() {
        any_text()
    } else {
        json!({"type": "string", "enum": values})
    }
}

/// A list of ids taken from `ids`; with none to take, an empty list.
fn ids(ids: &[&str], max: usize) -> Value {
    if ids.is_empty() {
        json!({"type": "array", "items": any_text(), "maxItems": 0})
    } else {
        json!({"type": "array", "items": one_of(ids), "maxItems": max.min(ids.len())})
    }
}

/// An object with exactly these properties; `required` lists the ones that must be present.
fn object(properties: Vec<(&str, Value)>, required: &[&str]) -> Value {
    let mut props = Map::new();
    for (k, v) in properties {
        props.insert(k.to_string(), v);
    }
    json!({
        "type": "object",
        "properties": Value::Object(props),
        "required": required,
        "additionalProperties": false,
    })
}

/// The `schema` member every contract opens with.
fn schema_name(name: &str) -> Value {
    json!({"type": "string", "enum": [name]})
}

/// A tool's parameter schema as the type of a plan step's `arguments`: its `properties` and
/// `required`, closed (the tools refuse unknown parameters anyway), descriptions and defaults
/// dropped. A schema this cannot take over as it is (no `properties`, `$ref`s that would
/// resolve against the wrong root, other shapes) becomes any object, which the parser accepts.
pub fn tool_arguments(parameters: &Value) -> Value {
    let any_object = || json!({"type": "object"});
    let Some(params) = parameters.as_object() else {
        return any_object();
    };
    if params.get("type").and_then(Value::as_str) != Some("object")
        || contains_key(parameters, "$ref")
    {
        return any_object();
    }
    let Some(properties) = params.get("properties").and_then(Value::as_object) else {
        return any_object();
    };
    let mut props = Map::new();
    for (name, prop) in properties {
        props.insert(name.clone(), without_annotations(prop));
    }
    let required: Vec<Value> = params
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter(|n| n.as_str().is_some_and(|n| properties.contains_key(n)))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    json!({
        "type": "object",
        "properties": Value::Object(props),
        "required": required,
        "additionalProperties": false,
    })
}

fn contains_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.contains_key(key) || m.values().any(|v| contains_key(v, key)),
        Value::Array(a) => a.iter().any(|v| contains_key(v, key)),
        _ => false,
    }
}

/// The schema without `description`, `title`, `default` and `examples` at any depth: they
/// constrain nothing and only lengthen the request.
fn without_annotations(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "description" | "title" | "default" | "examples")
                })
                .map(|(k, v)| (k.clone(), without_annotations(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_annotations).collect()),
        other => other.clone(),
    }
}

/// `planner_plan_v1` for the tools of the catalog (`(name, parameters)`), in `mode`. Each step
/// is one of the tools with that tool's own arguments. In EVIDENCE_GAP_ONLY mode every step
/// names one of the retry context's critical gaps in `gap_id`.
pub fn planner(tools: &[(&str, &Value)], mode: PlannerMode, retry: Option<&RetryContext>) -> Value {
    let gaps: Vec<&str> = retry
        .map(|r| r.critical_gaps.iter().map(|g| g.id.as_str()).collect())
        .unwrap_or_default();
    let gap_only = mode == PlannerMode::EvidenceGapOnly;
    let step = |tool: Option<(&str, &Value)>| {
        let (tool_type, arguments) = match tool {
            Some((name, params)) => (one_of(&[name]), tool_arguments(params)),
            None => (any_text(), json!({"type": "object"})),
        };
        let mut properties = vec![
            ("id", text()),
            ("goal", text()),
            ("tool", tool_type),
            ("arguments", arguments),
        ];
        let mut required = vec!["id", "goal", "tool", "arguments"];
        if gap_only {
            properties.push(("gap_id", one_of(&gaps)));
            required.push("gap_id");
        }
        object(properties, &required)
    };
    let steps_items = match tools {
        // No tool at all: the parser refuses every step; the schema stays valid.
        [] => step(None),
        [one] => step(Some(*one)),
        many => json!({"anyOf": many.iter().map(|t| step(Some(*t))).collect::<Vec<_>>()}),
    };
    object(
        vec![
            ("schema", schema_name(planner::SCHEMA)),
            ("mode", one_of(&[mode.as_str()])),
            (
                "hypotheses",
                json!({
                    "type": "array",
                    "items": object(vec![("id", text()), ("statement", text())], &["id", "statement"]),
                    "maxItems": MAX_HYPOTHESES,
                }),
            ),
            (
                "steps",
                json!({"type": "array", "items": steps_items, "minItems": 1, "maxItems": MAX_STEPS}),
            ),
        ],
        &["schema", "mode", "steps"],
    )
}

/// The grammar form of `planner_plan_v1` (`diag_core::model::OutputSchema::grammar`, for
/// servers that compile the schema to a grammar): hypotheses and steps carry no `id` (the
/// parser numbers them by position, so a model held to a grammar cannot repeat one), at most
/// [`GRAMMAR_HYPOTHESES`] hypotheses and between 1 and [`GRAMMAR_STEPS`] steps.
pub fn planner_grammar(
    tools: &[(&str, &Value)],
    mode: PlannerMode,
    retry: Option<&RetryContext>,
) -> Value {
    let mut plan = planner(tools, mode, retry);
    strip_ids(&mut plan["properties"]["hypotheses"]["items"]);
    plan["properties"]["hypotheses"]["maxItems"] = json!(GRAMMAR_HYPOTHESES);
    plan["properties"]["steps"]["maxItems"] = json!(GRAMMAR_STEPS);
    let steps = &mut plan["properties"]["steps"]["items"];
    match steps.get_mut("anyOf").and_then(Value::as_array_mut) {
        Some(alternatives) => alternatives.iter_mut().for_each(strip_ids),
        None => strip_ids(steps),
    }
    plan
}

/// Most steps the Planner's grammar form allows, as its prompt asks: a small model held to a
/// grammar repeats its last step until the list is full, and every step is a tool call.
pub const GRAMMAR_STEPS: usize = 6;

/// Most hypotheses the Planner's grammar form allows: a small model held to a grammar fills a
/// list to its bound, and every hypothesis costs tokens before the first step.
pub const GRAMMAR_HYPOTHESES: usize = 3;

/// An object schema without its `id` property.
fn strip_ids(item: &mut Value) {
    if let Some(props) = item.get_mut("properties").and_then(Value::as_object_mut) {
        props.remove("id");
    }
    if let Some(required) = item.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| r != "id");
    }
}

/// `executor_evidence_v2`, with `tool_name` one of the catalog's tools.
pub fn executor(tool_names: &[&str]) -> Value {
    let binding = object(
        vec![
            ("source_invocation_id", text()),
            ("tool_name", one_of(tool_names)),
            ("raw_path", any_text()),
            ("quote", text()),
        ],
        &["source_invocation_id", "tool_name", "raw_path", "quote"],
    );
    let claim = object(
        vec![
            ("claim_id", text()),
            ("text", text()),
            (
                "bindings",
                json!({"type": "array", "items": binding, "maxItems": MAX_BINDINGS}),
            ),
        ],
        &["claim_id", "text", "bindings"],
    );
    object(
        vec![
            ("schema", schema_name(executor::SCHEMA)),
            (
                "claims",
                json!({"type": "array", "items": claim, "maxItems": MAX_ITEMS}),
            ),
            (
                "hypotheses",
                json!({
                    "type": "array",
                    "items": object(
                        vec![("id", text()), ("text", text()), ("status", any_text())],
                        &["id", "text", "status"],
                    ),
                    "maxItems": MAX_HYPOTHESES,
                }),
            ),
            (
                "no_evidence",
                json!({
                    "type": "array",
                    "items": object(vec![("query_ref", text()), ("reason", text())], &["query_ref", "reason"]),
                    "maxItems": MAX_ITEMS,
                }),
            ),
            ("limitations", texts(MAX_ITEMS)),
        ],
        &["schema", "claims"],
    )
}

/// Longest free text (a limitation, a hypothesis, a reason) in the evidence turn's grammar
/// form, in characters.
pub const GRAMMAR_TEXT_CHARS: usize = 240;
/// Most entries of a list of free text in the evidence turn's grammar form.
pub const GRAMMAR_LIST_ITEMS: usize = 3;

/// Most pointers the evidence turn's schema offers ([`evidence_leaves`]): the leaves most
/// relevant to the plan, across every successful invocation of the run.
pub const MAX_EVIDENCE_LEAVES: usize = 24;
/// Longest target string the grammar form of the evidence turn's schema offers as a whole
/// quote; a longer one is offered by its pointer with a free quote.
pub const MAX_WHOLE_QUOTE_CHARS: usize = 240;

/// A value a binding can cite: a string, number or boolean leaf of a successful invocation's
/// output, with the text the Gatekeeper matches quotes against (a figure's JSON text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceLeaf {
    pub invocation_id: String,
    pub tool_name: String,
    /// An RFC 6901 pointer into the invocation's output.
    pub pointer: String,
    /// The whole target text.
    pub text: String,
}

/// Words of `text` that say something (lowercase, letters and digits, three characters or
/// more), for ranking leaves by what the plan looks for.
fn words(text: &str) -> std::collections::BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .collect()
}

/// The leaves of the run's successful invocations a binding can cite, at most `cap`: ranked
/// by how many distinct words of `relevance` (the plan's hypotheses and step goals) they
/// contain, then strings before numbers and booleans, then by invocation and document order;
/// returned in invocation and document order. Blank strings, pointers longer than the parser takes and invocations that did not
/// end `ok` are left out, since the Gatekeeper would refuse a binding to them.
pub fn evidence_leaves(
    invocations: &[super::ToolInvocation],
    relevance: &[String],
    cap: usize,
) -> Vec<EvidenceLeaf> {
    let wanted: std::collections::BTreeSet<String> =
        relevance.iter().flat_map(|r| words(r)).collect();
    let mut all: Vec<(usize, EvidenceLeaf)> = Vec::new();
    let mut seen_ids = std::collections::BTreeSet::new();
    for inv in invocations {
        // An id recorded twice is ambiguous to the Gatekeeper: neither record is offered.
        if !seen_ids.insert(inv.invocation_id.as_str()) {
            all.retain(|(_, l)| l.invocation_id != inv.invocation_id);
            continue;
        }
        if inv.status != super::InvocationStatus::Ok {
            continue;
        }
        let mut leaves = Vec::new();
        collect_leaves(&inv.output, &mut String::new(), &mut leaves);
        for (pointer, text, is_text) in leaves {
            if text.trim().is_empty() || pointer.len() > super::parse::MAX_POINTER_BYTES {
                continue;
            }
            // Relevance first; at equal relevance, text before a figure or a flag.
            let score = words(&text).intersection(&wanted).count() * 2 + usize::from(is_text);
            all.push((
                score,
                EvidenceLeaf {
                    invocation_id: inv.invocation_id.clone(),
                    tool_name: inv.tool_name.clone(),
                    pointer,
                    text,
                },
            ));
        }
    }
    let mut order: Vec<usize> = (0..all.len()).collect();
    // Stable: equal scores keep invocation and document order.
    order.sort_by(|a, b| all[*b].0.cmp(&all[*a].0));
    let mut keep: Vec<usize> = order.into_iter().take(cap).collect();
    keep.sort_unstable();
    keep.into_iter().map(|i| all[i].1.clone()).collect()
}

/// Every string, number and boolean under `v` with its pointer, its text and whether it is a
/// string, in document order.
fn collect_leaves(v: &Value, at: &mut String, out: &mut Vec<(String, String, bool)>) {
    match v {
        Value::String(s) => out.push((at.clone(), s.clone(), true)),
        Value::Number(n) => out.push((at.clone(), n.to_string(), false)),
        Value::Bool(b) => out.push((at.clone(), b.to_string(), false)),
        Value::Null => {}
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = at.len();
                at.push('/');
                at.push_str(&i.to_string());
                collect_leaves(item, at, out);
                at.truncate(len);
            }
        }
        Value::Object(members) => {
            for (name, item) in members {
                let len = at.len();
                at.push('/');
                at.push_str(&super::json_pointer::escape_token(name));
                collect_leaves(item, at, out);
                at.truncate(len);
            }
        }
    }
}

/// The evidence turn's `executor_evidence_v2`, built from what the run recorded: each
/// binding names one of `leaves` (its invocation, that invocation's tool and one of its
/// pointers), `no_evidence` names one of `invocation_ids` (every invocation of the run, as
/// the parser takes them), and a claim's id is one of `kept_claim_ids` (the prior verified
/// claims an evidence retry keeps) or `c1` … `c12`. Returns the form for servers that take a
/// schema as guidance (free text and quotes) and the form for servers that compile it to a
/// grammar (each claim restates one leaf, quoting it whole; with a leaf to cite at least one
/// claim is asked for, and at least one limitation always, so no document it allows is an
/// empty result). With no leaf to cite, the only documents either form allows have no claims.
pub fn executor_evidence(
    leaves: &[EvidenceLeaf],
    invocation_ids: &[&str],
    kept_claim_ids: &[&str],
) -> (Value, Value) {
    // Claim ids: the ones an evidence retry must keep, then `c1` … `c12`, all of the shape
    // the parser takes (a small model left to write one invents shapes it refuses).
    let numbered: Vec<String> = (1..=MAX_ITEMS).map(|n| format!("c{n}")).collect();
    let mut claim_ids: Vec<&str> = kept_claim_ids.to_vec();
    for id in &numbered {
        if !claim_ids.contains(&id.as_str()) {
            claim_ids.push(id);
        }
    }
    let binding = |id: &str, tool: &str, pointers: Vec<&str>, quote: Value| {
        object(
            vec![
                ("source_invocation_id", one_of(&[id])),
                ("tool_name", one_of(&[tool])),
                ("raw_path", one_of(&pointers)),
                ("quote", quote),
            ],
            &["source_invocation_id", "tool_name", "raw_path", "quote"],
        )
    };
    // Guidance form: one alternative per invocation, its pointers enumerated.
    let mut by_invocation: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    for leaf in leaves {
        match by_invocation
            .iter_mut()
            .find(|(id, _, _)| *id == leaf.invocation_id)
        {
            Some((_, _, pointers)) => pointers.push(&leaf.pointer),
            None => by_invocation.push((&leaf.invocation_id, &leaf.tool_name, vec![&leaf.pointer])),
        }
    }
    let guidance: Vec<Value> = by_invocation
        .into_iter()
        .map(|(id, tool, pointers)| binding(id, tool, pointers, text()))
        .collect();
    // An empty list, the only one a schema with nothing to offer allows.
    let none = || json!({"type": "array", "items": {"type": "null"}, "maxItems": 0});
    let guidance_claims = match guidance.len() {
        0 => none(),
        n => {
            let binding = if n == 1 {
                guidance.into_iter().next().unwrap_or(Value::Null)
            } else {
                json!({"anyOf": guidance})
            };
            let claim = object(
                vec![
                    ("claim_id", one_of(&claim_ids)),
                    ("text", text()),
                    (
                        "bindings",
                        json!({"type": "array", "items": binding, "minItems": 1, "maxItems": MAX_BINDINGS}),
                    ),
                ],
                &["claim_id", "text", "bindings"],
            );
            json!({"type": "array", "items": claim, "maxItems": MAX_ITEMS})
        }
    };
    // Grammar form: each claim restates one leaf, bound to it and quoting it whole, so every
    // figure, time and name of its text is in what it binds; a long target keeps a free text
    // and quote. One new claim per document (beside the kept ones): a small model held to a
    // grammar repeats its last item until a list is full, and repeated ids are refused.
    let grammar_claims = match leaves.len() {
        0 => none(),
        _ => {
            let alternatives: Vec<Value> = leaves
                .iter()
                .map(|leaf| {
                    let whole = leaf.text.chars().count() <= MAX_WHOLE_QUOTE_CHARS;
                    let said = || {
                        if whole {
                            json!({"type": "string", "enum": [leaf.text]})
                        } else {
                            text()
                        }
                    };
                    let bound = binding(
                        &leaf.invocation_id,
                        &leaf.tool_name,
                        vec![&leaf.pointer],
                        said(),
                    );
                    object(
                        vec![
                            ("claim_id", one_of(&claim_ids)),
                            ("text", said()),
                            (
                                "bindings",
                                json!({"type": "array", "items": bound, "minItems": 1, "maxItems": 1}),
                            ),
                        ],
                        &["claim_id", "text", "bindings"],
                    )
                })
                .collect();
            let claim = if alternatives.len() == 1 {
                alternatives.into_iter().next().unwrap_or(Value::Null)
            } else {
                json!({"anyOf": alternatives})
            };
            // At least one claim: with something to cite, a small model held to a grammar
            // otherwise answers `claims: []` beside a limitation however much the outputs
            // show, and the run ends before the Verifier. A claim it is held to restates a
            // recorded value whole, so the Gatekeeper and the Verifier judge it like any.
            json!({"type": "array", "items": claim, "minItems": 1, "maxItems": kept_claim_ids.len() + 1})
        }
    };
    // `grammar`: the form a server holds the model to token by token, where one more rule
    // costs nothing in the prompt.
    let document = |claims: Value, grammar: bool| {
        // Under a grammar, free text is bounded and lists are short: a small model held to a
        // grammar repeats a sentence until the token limit if nothing ends it.
        let (prose, list_max) = if grammar {
            (
                json!({"type": "string", "minLength": 1, "maxLength": GRAMMAR_TEXT_CHARS}),
                GRAMMAR_LIST_ITEMS,
            )
        } else {
            (text(), MAX_ITEMS)
        };
        let no_evidence = if invocation_ids.is_empty() {
            none()
        } else {
            json!({
                "type": "array",
                "items": object(
                    vec![("query_ref", one_of(invocation_ids)), ("reason", prose.clone())],
                    &["query_ref", "reason"],
                ),
                "maxItems": list_max,
            })
        };
        object(
            vec![
                ("schema", schema_name(executor::SCHEMA)),
                ("claims", claims),
                (
                    "hypotheses",
                    json!({
                        "type": "array",
                        "items": object(
                            vec![
                                ("id", text()),
                                ("text", prose.clone()),
                                ("status", one_of(&["unverified", "supported", "refuted"])),
                            ],
                            &["id", "text", "status"],
                        ),
                        "maxItems": list_max.min(MAX_HYPOTHESES),
                    }),
                ),
                ("no_evidence", no_evidence),
                (
                    "limitations",
                    if grammar {
                        json!({"type": "array", "items": prose, "minItems": 1, "maxItems": list_max})
                    } else {
                        texts(MAX_ITEMS)
                    },
                ),
            ],
            // Zero claims are legal only beside a stated gap or limitation: under a grammar
            // the model states at least one limitation, so a document with no claim is
            // still a no-evidence answer rather than an empty one.
            if grammar {
                &["schema", "claims", "limitations"]
            } else {
                &["schema", "claims"]
            },
        )
    };
    (
        document(guidance_claims, false),
        document(grammar_claims, true),
    )
}

/// `verifier_verdict_v1` over the verified claim ids the Verifier is shown.
pub fn verifier(verified_claim_ids: &[String]) -> Value {
    let known: Vec<&str> = verified_claim_ids.iter().map(String::as_str).collect();
    let check = object(
        vec![
            ("claim_id", one_of(&known)),
            ("supported", json!({"type": "boolean"})),
        ],
        &["claim_id", "supported"],
    );
    let fact = object(
        vec![
            ("fact", text()),
            ("is_critical", json!({"type": "boolean"})),
            (
                "verification",
                one_of(&[
                    "supported",
                    "indirect_support",
                    "no_evidence",
                    "contradicted",
                ]),
            ),
            ("claim_ids", ids(&known, MAX_ITEMS)),
        ],
        &["fact", "is_critical", "verification"],
    );
    object(
        vec![
            ("schema", schema_name(verifier::SCHEMA)),
            ("verdict", one_of(&["PASS", "LOW_CONFID", "REJECT"])),
            (
                "groundedness",
                json!({"type": "number", "minimum": 0, "maximum": 1}),
            ),
            (
                "claim_checks",
                json!({"type": "array", "items": check, "maxItems": MAX_ITEMS.min(known.len())}),
            ),
            (
                "facts",
                json!({"type": "array", "items": fact, "maxItems": MAX_ITEMS}),
            ),
            ("allowed_claims", ids(&known, MAX_ITEMS)),
            ("missing_information", texts(MAX_ITEMS)),
            ("recommendations", texts(MAX_ITEMS)),
            ("rationale", any_text()),
        ],
        &[
            "schema",
            "verdict",
            "groundedness",
            "claim_checks",
            "facts",
            "allowed_claims",
        ],
    )
}

/// `groundedness` in the Verifier's grammar form: one of eleven tenths, so a model held to a
/// grammar writes a number in range and stops.
fn tenths() -> Value {
    json!({"enum": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]})
}

/// The grammar form of `verifier_verdict_v1`: a `PASS` allows at least one claim (the
/// parser refuses a PASS that allows none), `LOW_CONFID` and `REJECT` may allow none;
/// `groundedness` is one of eleven tenths; every list is bounded as in [`verifier`].
pub fn verifier_grammar(verified_claim_ids: &[String]) -> Value {
    let base = verifier(verified_claim_ids);
    let mut other = base.clone();
    other["properties"]["verdict"] = one_of(&["LOW_CONFID", "REJECT"]);
    other["properties"]["groundedness"] = tenths();
    if verified_claim_ids.is_empty() {
        // Nothing to allow: no PASS is possible, so only the other verdicts are offered.
        return other;
    }
    let mut pass = base;
    pass["properties"]["verdict"] = one_of(&["PASS"]);
    pass["properties"]["groundedness"] = tenths();
    pass["properties"]["allowed_claims"]["minItems"] = json!(1);
    json!({"anyOf": [pass, other]})
}

/// Longest `answer_markdown` the Composer's grammar form allows, in characters: well under
/// 300 words of Markdown, so an answer held to a grammar ends before the token limit.
pub const GRAMMAR_ANSWER_CHARS: usize = 1800;

/// The grammar form of `composer_answer_v1`: the answer bounded to [`GRAMMAR_ANSWER_CHARS`]
/// and `cited_claims` to one entry per allowed claim.
pub fn composer_grammar(allowed_claims: &[String]) -> Value {
    let mut answer = composer(allowed_claims);
    answer["properties"]["answer_markdown"]["maxLength"] = json!(GRAMMAR_ANSWER_CHARS);
    answer
}

/// `composer_answer_v1` citing only the Verifier-allowed claims.
pub fn composer(allowed_claims: &[String]) -> Value {
    let allowed: Vec<&str> = allowed_claims.iter().map(String::as_str).collect();
    object(
        vec![
            ("schema", schema_name(composer::SCHEMA)),
            ("answer_markdown", text()),
            ("cited_claims", ids(&allowed, MAX_ITEMS)),
        ],
        &["schema", "answer_markdown", "cited_claims"],
    )
}

/// Most derivations of one answer under the schema.
pub const MAX_DERIVATIONS: usize = 6;
/// Most operands of one derivation under the schema (`sum`, `min`, `max` and `count` take
/// any number; the others two or one).
pub const MAX_OPERANDS: usize = 6;

/// The contract's schema for `contract`: [`composer`] or [`composer_v2`].
pub fn composer_contract(contract: composer::ComposerContract, allowed_claims: &[String]) -> Value {
    match contract {
        composer::ComposerContract::V1 => composer(allowed_claims),
        composer::ComposerContract::V2 => composer_v2(allowed_claims),
    }
}

/// The grammar form for `contract`: [`composer_grammar`] or [`composer_v2_grammar`].
pub fn composer_contract_grammar(
    contract: composer::ComposerContract,
    allowed_claims: &[String],
) -> Value {
    match contract {
        composer::ComposerContract::V1 => composer_grammar(allowed_claims),
        composer::ComposerContract::V2 => composer_v2_grammar(allowed_claims),
    }
}

/// `composer_answer_v2`: `composer_answer_v1` plus `derivations`, each naming its id
/// (`d1`…), an operation of the closed set, its result and the operands, each an allowed
/// claim's value. Operand claims are enumerated from the allowed claims; with none allowed
/// no operand can be named, so no derivation can be listed.
pub fn composer_v2(allowed_claims: &[String]) -> Value {
    let allowed: Vec<&str> = allowed_claims.iter().map(String::as_str).collect();
    let ops: Vec<&str> = super::derivation::Op::ALL
        .iter()
        .map(|op| op.name())
        .collect();
    let numbered: Vec<String> = (1..=MAX_DERIVATIONS).map(|n| format!("d{n}")).collect();
    let derivation_ids: Vec<&str> = numbered.iter().map(String::as_str).collect();
    let operand = object(
        vec![
            ("claim", one_of(&allowed)),
            ("value", text()),
            ("unit", text()),
        ],
        &["claim", "value"],
    );
    let derivation = object(
        vec![
            ("id", one_of(&derivation_ids)),
            ("value", text()),
            ("unit", text()),
            ("op", one_of(&ops)),
            (
                "operands",
                json!({"type": "array", "items": operand, "minItems": 1,
                       "maxItems": MAX_OPERANDS}),
            ),
        ],
        &["id", "value", "op", "operands"],
    );
    let derivations = if allowed.is_empty() {
        json!({"type": "array", "items": derivation, "maxItems": 0})
    } else {
        json!({"type": "array", "items": derivation, "maxItems": MAX_DERIVATIONS})
    };
    object(
        vec![
            ("schema", schema_name(composer::SCHEMA_V2)),
            ("answer_markdown", text()),
            ("cited_claims", ids(&allowed, MAX_ITEMS)),
            ("derivations", derivations),
        ],
        &["schema", "answer_markdown", "cited_claims", "derivations"],
    )
}

/// The grammar form of `composer_answer_v2`: the answer bounded to
/// [`GRAMMAR_ANSWER_CHARS`], the lists as in [`composer_v2`].
pub fn composer_v2_grammar(allowed_claims: &[String]) -> Value {
    let mut answer = composer_v2(allowed_claims);
    answer["properties"]["answer_markdown"]["maxLength"] = json!(GRAMMAR_ANSWER_CHARS);
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_object_diag_defines_is_closed_and_requires_only_known_properties() {
        fn check(v: &Value, at: &str) {
            if let Some(m) = v.as_object() {
                if let Some(props) = m.get("properties").and_then(Value::as_object) {
                    assert_eq!(m.get("additionalProperties"), Some(&json!(false)), "{at}");
                    for r in m["required"].as_array().unwrap() {
                        assert!(props.contains_key(r.as_str().unwrap()), "{at}: {r}");
                    }
                }
                for (k, v) in m {
                    check(v, &format!("{at}/{k}"));
                }
            } else if let Some(a) = v.as_array() {
                for (i, v) in a.iter().enumerate() {
                    check(v, &format!("{at}/{i}"));
                }
            }
        }
        let params = json!({"type": "object", "properties": {"query": {"type": "string",
            "description": "x"}, "limit": {"type": "integer", "default": 5}},
            "required": ["query", "ghost"]});
        let tools = [("search_logs", &params)];
        check(&planner(&tools, PlannerMode::Normal, None), "planner");
        check(&executor(&["search_logs"]), "executor");
        check(&verifier(&["c1".into()]), "verifier");
        check(&composer(&[]), "composer");
        check(&composer_v2(&["c1".into()]), "composer_v2");
        let args = tool_arguments(&params);
        assert_eq!(args["required"], json!(["query"]));
        assert_eq!(args["properties"]["limit"], json!({"type": "integer"}));
    }

    #[test]
    fn tool_schemas_that_cannot_be_embedded_become_any_object() {
        for params in [
            json!(null),
            json!({"type": "object"}),
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}}),
            json!({"type": "array"}),
        ] {
            assert_eq!(
                tool_arguments(&params),
                json!({"type": "object"}),
                "{params}"
            );
        }
    }
}
