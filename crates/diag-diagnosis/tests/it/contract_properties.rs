//! Property tests of the evidence contract: for arbitrary Executor outputs (random claims and
//! bindings, many of them forged) over arbitrary recorded tool outputs (random JSON whose every
//! string is made of distinctive tokens), nothing that is not bound to a passed binding ever
//! reaches the Verifier input, the Composer input or an answer.
//!
//! - `no_unverified_material_crosses_the_pipeline` runs the deterministic stages directly:
//!   `validate_run` → `build_verified_input` → Verifier input JSON → a Verifier result allowing
//!   a random subset → Composer input JSON → `fallback_pre` and `fallback_post`.
//! - `no_unverified_material_crosses_the_real_graph` runs the same worlds through the real
//!   compiled graph and real nodes, with a `ScriptedInvoker` answering as the agents.
//!
//! Both first check the Gatekeeper against an independent oracle (the generator knows which
//! bindings are genuine, what text they must cut, and which claims name a token no evidence
//! holds), then check every produced text:
//! - the text of a claim the Gatekeeper must refuse (no binding, any failed binding, a
//!   foreign token) never appears (nor, past the Verifier, the text of a claim it did not
//!   allow), and a foreign token never appears at all;
//! - a tool-output token appears only inside a passed binding's `matched_text` (past the
//!   Verifier: of an allowed claim); tokens of another run never appear;
//! - hypotheses, no-evidence reasons, limitations and forged quotes never appear.
//!
//! The number of cases comes from `PROPTEST_CASES` (CI sets 10000; 256 otherwise). Note that
//! `ProptestConfig::with_cases(n)` overrides the variable, so it is read here explicitly, and
//! each property asserts it really ran that many cases.

use diag_testkit::builders::binding;
use diag_testkit::seeded;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use diag_core::agent::{AgentRole, InvokeError, ScriptedInvoker};
use diag_core::clock::{FixedClock, Timestamp};
use diag_core::graph::{InvokeOptions, NoopObserver, RunConfig};
use diag_core::protocol::gatekeeper::normalize;
use diag_core::protocol::{
    ceiling, effective_verdict, validate_run, Claim, ExecutorHypothesis, ExecutorOutput,
    GateStatus, InvocationStatus, NoEvidence, ToolInvocation, Verdict, VerifierResult,
};
use diag_core::tools::{InvocationLog, MemoryInvocationLog, ToolSpec};
use diag_diagnosis::composer_input::{allowed_claims, answer_material_from_state};
use diag_diagnosis::nodes::{real_nodes, NodeDeps};
use diag_diagnosis::topology::{self, STEP_LIMIT};
use diag_diagnosis::{
    build_verified_input, composer_input_json, consulted_tools, fallback_post, fallback_pre,
    verifier_input_json, AgentStatus, DiagnosisState, FallbackKind,
};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{TestCaseError, TestRunner};
use serde_json::{json, Map, Value};

const SESSION: &str = "sess-1";
const RUN: &str = "run-A";
const OTHER_RUN: &str = "run-B";
const QUESTION: &str = "why does checkout-service return 502 since 14:00?";
const TOOLS: [&str; 3] = ["search_logs", "query_metrics", "search_runbooks"];
/// A tool only the other run calls.
const OTHER_TOOL: &str = "other_run_only_tool";
/// Object keys, some needing RFC 6901 escapes.
const KEYS: [&str; 5] = ["k0", "a/b", "t~x", "k 3", "line"];
/// Separators between the words of a tool-output string (all Unicode whitespace).
const SEPS: [&str; 5] = [" ", "  ", "\n", "\t ", " \u{a0}"];
const MISSING: &str = "missing pool metrics";
const RECOMMENDATION: &str = "raise the pool size";
const COMPOSED: &str = "composed answer over the allowed claims";

// Distinctive, fixed-width tokens: none is a substring of another or of any fixed text.
fn tool_token(n: u32) -> String {
    format!("tok{n:05}x")
}
/// Letters only, so a claim's text has no salient token of its own (SPEC §2.9): whether it is
/// grounded is decided by its bindings and, where the world says so, one foreign token.
fn claim_text(i: usize) -> String {
    let letter = |d: usize| char::from(b'a' + (d % 26) as u8);
    format!("clm{}{}{}q", letter(i / 676), letter(i / 26), letter(i))
}
/// A `#` reference that no tool output of any world holds (outputs hold only `tok…x`
/// strings, numbers, booleans and the fixed keys).
fn foreign_token(i: usize) -> String {
    format!("#44{i:02}")
}
fn hypothesis_text(i: usize) -> String {
    format!("hyp{i:03}q")
}
fn no_evidence_text(i: usize) -> String {
    format!("nev{i:03}q")
}
fn limitation_text(i: usize) -> String {
    format!("lim{i:03}q")
}
fn absent_quote(i: usize) -> String {
    format!("abs{i:03}q")
}

/// Every `prefix` + `width` chars + `end` occurrence in `text`.
fn find_tokens<'t>(text: &'t str, prefix: &str, width: usize, end: u8) -> Vec<&'t str> {
    let bytes = text.as_bytes();
    text.match_indices(prefix)
        .filter_map(|(i, _)| {
            let stop = i + prefix.len() + width;
            let body = bytes.get(i + prefix.len()..stop)?;
            (body.iter().all(u8::is_ascii_digit) && bytes.get(stop) == Some(&end))
                .then(|| &text[i..=stop])
        })
        .collect()
}

fn tool_tokens(text: &str) -> Vec<&str> {
    find_tokens(text, "tok", 5, b'x')
}

// ---------------------------------------------------------------------------------------------
// Generated worlds
// ---------------------------------------------------------------------------------------------

/// The shape of a tool output; strings become tokens when the world is built.
#[derive(Debug, Clone)]
enum Tree {
    /// A string of `seps.len() + 1` tokens joined by these separators.
    Text(Vec<usize>),
    Num(i64),
    Bool(bool),
    Null,
    List(Vec<Tree>),
    /// Keys are `KEYS` in order.
    Map(Vec<Tree>),
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = prop_oneof![
        5 => prop::collection::vec(0..SEPS.len(), 0..4).prop_map(Tree::Text),
        1 => any::<i64>().prop_map(Tree::Num),
        1 => any::<bool>().prop_map(Tree::Bool),
        1 => Just(Tree::Null),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Tree::List),
            prop::collection::vec(inner, 0..KEYS.len()).prop_map(Tree::Map),
        ]
    })
}

#[derive(Debug, Clone)]
struct InvSpec {
    tool: usize,
    ok: bool,
    /// Fields of the root object.
    root: Vec<Tree>,
}

fn inv_spec() -> impl Strategy<Value = InvSpec> {
    (
        0..TOOLS.len() + 1,
        prop::bool::weighted(0.85),
        prop::collection::vec(tree(), 1..KEYS.len()),
    )
        .prop_map(|(tool, ok, root)| InvSpec { tool, ok, root })
}

/// How a binding is made; all but `Genuine` must fail.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Genuine,
    /// An id no run recorded.
    UnknownId,
    /// An id only the other run recorded, with a path and quote genuine there.
    OtherRunId,
    /// This run's id and tool, with a path and quote from the other run's output.
    OtherRunQuote,
    WrongTool,
    /// A path that names nothing.
    BadPointer,
    /// A path to a number, bool, null, array or object.
    NotAString,
    /// A quote that occurs nowhere, or the genuine quote in another case.
    QuoteAbsent,
    /// The right path, and a quote that occurs only in another field.
    QuoteInAnotherField,
    /// The right path and a genuine quote of one word from a string of several: shorter than
    /// 12 characters and not the whole string (`quote_too_short`).
    ShortQuote,
}

const KINDS: [Kind; 10] = [
    Kind::Genuine,
    Kind::UnknownId,
    Kind::OtherRunId,
    Kind::OtherRunQuote,
    Kind::WrongTool,
    Kind::BadPointer,
    Kind::NotAString,
    Kind::QuoteAbsent,
    Kind::QuoteInAnotherField,
    Kind::ShortQuote,
];

#[derive(Debug, Clone)]
struct BindingSpec {
    kind: Kind,
    picks: [Index; 5],
}

fn binding_spec() -> impl Strategy<Value = BindingSpec> {
    let kind = prop_oneof![
        4 => Just(Kind::Genuine),
        4 => prop::sample::select(KINDS[1..].to_vec()),
    ];
    (kind, any::<[Index; 5]>()).prop_map(|(kind, picks)| BindingSpec { kind, picks })
}

#[derive(Debug, Clone)]
struct Spec {
    run: Vec<InvSpec>,
    other: Vec<InvSpec>,
    /// Per other-run invocation after the first: reuse this run's id `inv-{i}`.
    other_reuses_id: Vec<bool>,
    claims: Vec<Vec<BindingSpec>>,
    /// Per claim: it has no binding at all (ignored when `honest`).
    unbound: Vec<bool>,
    /// Per claim: its text names a token no evidence holds (ignored when `honest`).
    foreign: Vec<bool>,
    /// Every claim is bound, every binding made genuine and every invocation of the run ok,
    /// so Gatekeeper PASS and evidence retries happen often.
    honest: bool,
    hypotheses: usize,
    no_evidence: usize,
    limitations: usize,
    verdict: Verdict,
    /// Which verified claims the Verifier allows.
    allow: Vec<bool>,
    /// The Verifier also allows one unverified claim (the graph run only): INVALID_OUTPUT.
    allow_unverified: bool,
    /// The Verifier reports a critical gap (may start an evidence retry in the graph run).
    critical_gap: bool,
    /// 0: the Composer answers; 1: it fails permanently; 2: it answers with prose twice.
    composer: u8,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(inv_spec(), 1..=4),
        prop::collection::vec(inv_spec(), 1..=3),
        prop::collection::vec(any::<bool>(), 3),
        prop::collection::vec(prop::collection::vec(binding_spec(), 1..=3), 0..=6),
        (
            prop::collection::vec(prop::bool::weighted(0.15), 6),
            prop::bool::weighted(0.3),
            prop::collection::vec(prop::bool::weighted(0.15), 6),
        ),
        (0..3usize, 0..3usize, 0..3usize),
        prop::sample::select(vec![Verdict::Pass, Verdict::LowConfid, Verdict::Reject]),
        prop::collection::vec(any::<bool>(), 6),
        (prop::bool::weighted(0.1), any::<bool>(), 0..3u8),
    )
        .prop_map(
            |(
                run,
                other,
                other_reuses_id,
                claims,
                (unbound, honest, foreign),
                (hypotheses, no_evidence, limitations),
                verdict,
                allow,
                (allow_unverified, critical_gap, composer),
            )| Spec {
                run,
                other,
                other_reuses_id,
                claims,
                unbound,
                foreign,
                honest,
                hypotheses,
                no_evidence,
                limitations,
                verdict,
                allow,
                allow_unverified,
                critical_gap,
                composer,
            },
        )
}

/// One string of a tool output: where it is, its text, and its tokens with their byte spans.
#[derive(Debug, Clone)]
struct Leaf {
    pointer: String,
    text: String,
    words: Vec<(String, usize, usize)>,
}

#[derive(Debug, Clone)]
struct Inv {
    record: ToolInvocation,
    leaves: Vec<Leaf>,
    /// Pointers to values that are not strings (the root object included).
    non_strings: Vec<String>,
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn realize(
    t: &Tree,
    pointer: &str,
    next: &mut u32,
    leaves: &mut Vec<Leaf>,
    non: &mut Vec<String>,
) -> Value {
    match t {
        Tree::Text(seps) => {
            let mut text = String::new();
            let mut words = Vec::new();
            for i in 0..=seps.len() {
                if i > 0 {
                    text.push_str(SEPS[seps[i - 1]]);
                }
                let token = tool_token(*next);
                *next += 1;
                let start = text.len();
                text.push_str(&token);
                words.push((token, start, text.len()));
            }
            leaves.push(Leaf {
                pointer: pointer.to_string(),
                text: text.clone(),
                words,
            });
            Value::String(text)
        }
        Tree::Num(n) => {
            non.push(pointer.to_string());
            json!(n)
        }
        Tree::Bool(b) => {
            non.push(pointer.to_string());
            json!(b)
        }
        Tree::Null => {
            non.push(pointer.to_string());
            Value::Null
        }
        Tree::List(items) => {
            non.push(pointer.to_string());
            Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, t)| realize(t, &format!("{pointer}/{i}"), next, leaves, non))
                    .collect(),
            )
        }
        Tree::Map(fields) => {
            non.push(pointer.to_string());
            let mut map = Map::new();
            for (t, key) in fields.iter().zip(KEYS) {
                let v = realize(t, &format!("{pointer}/{}", escape(key)), next, leaves, non);
                map.insert(key.to_string(), v);
            }
            Value::Object(map)
        }
    }
}

fn build_inv(run: &str, id: String, spec: &InvSpec, next: &mut u32) -> Inv {
    let mut leaves = Vec::new();
    let mut non = Vec::new();
    let output = realize(
        &Tree::Map(spec.root.clone()),
        "",
        next,
        &mut leaves,
        &mut non,
    );
    let tool = if run == RUN {
        TOOLS[spec.tool % TOOLS.len()]
    } else {
        [TOOLS[0], TOOLS[1], TOOLS[2], OTHER_TOOL][spec.tool]
    };
    Inv {
        record: ToolInvocation {
            run_id: run.into(),
            session_id: SESSION.into(),
            invocation_id: id,
            agent: "executor".into(),
            round: 1,
            tool_name: tool.into(),
            arguments: json!({"q": "x"}),
            output,
            status: if spec.ok {
                InvocationStatus::Ok
            } else {
                InvocationStatus::Error
            },
            duration_ms: 1,
        },
        leaves,
        non_strings: non,
    }
}

/// What the binding must produce, according to how it was made.
#[derive(Debug, Clone)]
struct Expect {
    /// `Some(matched_text)` when the binding must pass.
    pass: Option<String>,
}

#[derive(Debug)]
struct World {
    spec: Spec,
    invocations: Vec<ToolInvocation>,
    output: ExecutorOutput,
    /// Per claim, per binding.
    expect: Vec<Vec<Expect>>,
    /// Quotes of forged bindings that are in no tool output at all.
    forged_quotes: Vec<String>,
    /// Tokens claims name that no evidence holds: such a claim is refused.
    foreign_tokens: Vec<String>,
    /// Every token of the other run's outputs.
    other_tokens: HashSet<String>,
}

/// A genuine (path, quote, matched_text) in `inv`, if it has a string. The quote is strong
/// (SPEC §2.9): the whole string, or at least two tokens (19 characters).
fn genuine(inv: &Inv, picks: &[Index]) -> Option<(String, String, String)> {
    if inv.leaves.is_empty() {
        return None;
    }
    let leaf = picks[0].get(&inv.leaves);
    let n = leaf.words.len();
    let from = picks[1].index(n);
    let len = 1 + picks[2].index(n - from);
    let (from, len) = match (n, len) {
        (1, _) => (0, 1),
        (_, 1) if from + 1 < n => (from, 2),
        (_, 1) => (from - 1, 2),
        _ => (from, len),
    };
    let words = &leaf.words[from..from + len];
    let quote = words
        .iter()
        .map(|(w, ..)| w.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let matched = leaf.text[words[0].1..words[len - 1].2].to_string();
    Some((leaf.pointer.clone(), quote, matched))
}

fn build(spec: Spec) -> World {
    let mut next = 0u32;
    let run: Vec<Inv> = spec
        .run
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut s = s.clone();
            s.ok |= spec.honest;
            build_inv(RUN, format!("inv-{}", i + 1), &s, &mut next)
        })
        .collect();
    let other: Vec<Inv> = spec
        .other
        .iter()
        .enumerate()
        .map(|(i, s)| {
            // The first id is only the other run's; later ones may reuse this run's ids.
            let id = if i > 0 && spec.other_reuses_id[i] {
                format!("inv-{i}")
            } else {
                format!("inv-9{i}")
            };
            build_inv(OTHER_RUN, id, s, &mut next)
        })
        .collect();

    let mut claims = Vec::new();
    let mut expect = Vec::new();
    let mut forged_quotes = Vec::new();
    let mut foreign_tokens = Vec::new();
    for (ci, bindings) in spec.claims.iter().enumerate() {
        let mut bs = Vec::new();
        let mut es = Vec::new();
        let bindings = if spec.unbound[ci] && !spec.honest {
            &[][..]
        } else {
            &bindings[..]
        };
        for b in bindings {
            let p = &b.picks;
            let inv = p[0].get(&run);
            let id = inv.record.invocation_id.as_str();
            let tool = inv.record.tool_name.as_str();
            let absent = absent_quote(forged_quotes.len());
            let kind = if spec.honest { Kind::Genuine } else { b.kind };
            let (made, pass) = match (kind, genuine(inv, &p[1..4])) {
                (Kind::Genuine, Some((path, quote, matched))) => {
                    let ok = inv.record.status == InvocationStatus::Ok;
                    (binding(id, tool, &path, &quote), ok.then_some(matched))
                }
                (Kind::Genuine | Kind::NotAString, g) => {
                    let quote = g.map_or(absent.clone(), |(_, q, _)| q);
                    let path = p[4].get(&inv.non_strings).clone();
                    (binding(id, tool, &path, &quote), None)
                }
                (Kind::UnknownId, g) => {
                    let (path, quote, _) = g.unwrap_or(("/k0".into(), absent.clone(), "".into()));
                    (binding("inv-77", tool, &path, &quote), None)
                }
                (Kind::OtherRunId, _) => {
                    let o = &other[0];
                    let (path, quote, _) =
                        genuine(o, &p[1..4]).unwrap_or(("/k0".into(), absent.clone(), "".into()));
                    let b = binding(&o.record.invocation_id, &o.record.tool_name, &path, &quote);
                    (b, None)
                }
                (Kind::OtherRunQuote, g) => {
                    let o = p[4].get(&other);
                    let (path, quote, _) = genuine(o, &p[1..4]).or(g).unwrap_or((
                        "/k0".into(),
                        absent.clone(),
                        "".into(),
                    ));
                    // Unless the other run had no string at all, the quote is its own.
                    let quote = if o.leaves.is_empty() {
                        absent.clone()
                    } else {
                        quote
                    };
                    (binding(id, tool, &path, &quote), None)
                }
                (Kind::WrongTool, g) => {
                    let (path, quote, _) = g.unwrap_or(("/k0".into(), absent.clone(), "".into()));
                    let wrong = TOOLS
                        .iter()
                        .find(|t| **t != tool)
                        .expect("three tool names");
                    (binding(id, wrong, &path, &quote), None)
                }
                (Kind::BadPointer, g) => {
                    let (path, quote, _) = g.unwrap_or(("".into(), absent.clone(), "".into()));
                    (binding(id, tool, &format!("{path}/zz"), &quote), None)
                }
                (Kind::QuoteAbsent, g) => {
                    let (path, quote, _) = g.unwrap_or(("/k0".into(), absent.clone(), "".into()));
                    // Half the time the genuine quote in upper case (matching is case-sensitive).
                    let quote = if p[4].index(2) == 0 {
                        absent.clone()
                    } else {
                        quote.to_uppercase()
                    };
                    (binding(id, tool, &path, &quote), None)
                }
                (Kind::ShortQuote, g) => {
                    let several: Vec<&Leaf> =
                        inv.leaves.iter().filter(|l| l.words.len() > 1).collect();
                    match several.is_empty() {
                        false => {
                            let l = p[1].get(&several);
                            let word = p[2].get(&l.words).0.clone();
                            (binding(id, tool, &l.pointer, &word), None)
                        }
                        true => {
                            let (path, _, _) =
                                g.unwrap_or(("/k0".into(), absent.clone(), "".into()));
                            (binding(id, tool, &path, &absent), None)
                        }
                    }
                }
                (Kind::QuoteInAnotherField, g) => {
                    let (path, _, _) = g.unwrap_or(("/k0".into(), absent.clone(), "".into()));
                    // A quote from another string of this run (another field or invocation).
                    let elsewhere: Vec<&Leaf> = run
                        .iter()
                        .flat_map(|i| i.leaves.iter().map(move |l| (i, l)))
                        .filter(|(i, l)| !(std::ptr::eq(*i, inv) && l.pointer == path))
                        .map(|(_, l)| l)
                        .collect();
                    let quote = if elsewhere.is_empty() {
                        absent.clone()
                    } else {
                        let l = p[4].get(&elsewhere);
                        l.words[0].0.clone()
                    };
                    (binding(id, tool, &path, &quote), None)
                }
            };
            if made.quote == absent || made.quote.chars().any(|c| c.is_ascii_uppercase()) {
                forged_quotes.push(made.quote.clone());
            }
            bs.push(made);
            es.push(Expect { pass });
        }
        let text = if spec.foreign[ci] && !spec.honest {
            foreign_tokens.push(foreign_token(ci));
            format!("{} {}", claim_text(ci), foreign_token(ci))
        } else {
            claim_text(ci)
        };
        claims.push(Claim {
            claim_id: format!("c{}", ci + 1),
            text,
            bindings: bs,
        });
        expect.push(es);
    }

    let output = ExecutorOutput {
        claims,
        hypotheses: (0..spec.hypotheses)
            .map(|i| ExecutorHypothesis {
                id: format!("h{i}"),
                text: hypothesis_text(i),
                status: "unverified".into(),
            })
            .collect(),
        no_evidence: (0..spec.no_evidence)
            .map(|i| NoEvidence {
                query_ref: "inv-1".into(),
                reason: no_evidence_text(i),
            })
            .collect(),
        limitations: (0..spec.limitations).map(limitation_text).collect(),
    };
    let mut invocations: Vec<ToolInvocation> = run.iter().map(|i| i.record.clone()).collect();
    invocations.extend(other.iter().map(|i| i.record.clone()));
    let other_tokens = other
        .iter()
        .flat_map(|i| &i.leaves)
        .flat_map(|l| l.words.iter().map(|(w, ..)| w.clone()))
        .collect();
    World {
        spec,
        other_tokens,
        invocations,
        output,
        expect,
        forged_quotes,
        foreign_tokens,
    }
}

// ---------------------------------------------------------------------------------------------
// Oracles
// ---------------------------------------------------------------------------------------------

/// What a text may contain: the claims it may show and the tool tokens it may quote.
#[derive(Debug, Default)]
struct Allowance {
    claims: HashSet<String>,
    tokens: HashSet<String>,
}

impl World {
    /// Claim ids the Gatekeeper must accept: bound, every binding passing, and no foreign
    /// token in the text (SPEC §2.9).
    fn verified_ids(&self) -> Vec<String> {
        self.output
            .claims
            .iter()
            .zip(&self.expect)
            .filter(|(c, e)| {
                !e.is_empty()
                    && e.iter().all(|e| e.pass.is_some())
                    && !self
                        .foreign_tokens
                        .iter()
                        .any(|t| c.text.contains(t.as_str()))
            })
            .map(|(c, _)| c.claim_id.clone())
            .collect()
    }

    /// The claims in `ids` and the tokens of their passed bindings' matched text.
    fn allowance(&self, ids: &[String]) -> Allowance {
        let mut a = Allowance::default();
        for (claim, expect) in self.output.claims.iter().zip(&self.expect) {
            if !ids.contains(&claim.claim_id) {
                continue;
            }
            let passed: Vec<&String> = expect.iter().filter_map(|e| e.pass.as_ref()).collect();
            if passed.is_empty() {
                continue;
            }
            a.claims.insert(claim.claim_id.clone());
            for m in passed {
                a.tokens
                    .extend(tool_tokens(m).into_iter().map(str::to_string));
            }
        }
        a
    }

    /// Checks that `text` holds nothing `allowed` does not permit.
    fn check(&self, text: &str, allowed: &Allowance, what: &str) -> Result<(), TestCaseError> {
        for claim in &self.output.claims {
            if !allowed.claims.contains(&claim.claim_id) {
                prop_assert!(
                    !text.contains(&claim.text),
                    "{what} shows claim {} ({}) without a passed, allowed binding:\n{text}",
                    claim.claim_id,
                    claim.text
                );
            }
        }
        for token in tool_tokens(text) {
            prop_assert!(
                allowed.tokens.contains(token),
                "{what} shows tool output {token} outside an allowed matched_text:\n{text}"
            );
        }
        let never = self
            .output
            .hypotheses
            .iter()
            .map(|h| h.text.as_str())
            .chain(self.output.no_evidence.iter().map(|n| n.reason.as_str()))
            .chain(self.output.limitations.iter().map(String::as_str))
            .chain(self.forged_quotes.iter().map(String::as_str))
            .chain(self.foreign_tokens.iter().map(String::as_str));
        for marker in never {
            prop_assert!(!text.contains(marker), "{what} shows {marker}:\n{text}");
        }
        // Another run's output is never anyone's evidence here (also implied by the
        // allowance, which only ever holds this run's matched text).
        for token in tool_tokens(text) {
            prop_assert!(
                !self.other_tokens.contains(token),
                "{what} shows other-run {token}"
            );
        }
        Ok(())
    }

    /// The Gatekeeper agrees with the oracle on every binding.
    fn check_gatekeeper(&self) -> Result<diag_core::protocol::GatekeeperRaw, TestCaseError> {
        let raw = validate_run(RUN, &self.output, &self.invocations);
        let expected: Vec<(&str, &Expect)> = self
            .output
            .claims
            .iter()
            .zip(&self.expect)
            .flat_map(|(c, es)| es.iter().map(move |e| (c.claim_id.as_str(), e)))
            .collect();
        prop_assert_eq!(raw.checked_bindings.len(), expected.len());
        for (cb, (id, e)) in raw.checked_bindings.iter().zip(&expected) {
            prop_assert_eq!(cb.claim_id.as_str(), *id);
            prop_assert_eq!(
                cb.matched_text.as_ref(),
                e.pass.as_ref(),
                "binding {:?} of {} (failure {:?})",
                cb,
                id,
                cb.failure
            );
            prop_assert_eq!(cb.passed, e.pass.is_some());
        }
        Ok(raw)
    }
}

// ---------------------------------------------------------------------------------------------
// Runner
// ---------------------------------------------------------------------------------------------

/// Cases per property: `PROPTEST_CASES` if set (CI: 10000), else 256.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(256)
}

/// Runs `property` over generated worlds drawn from `seed` and asserts that at least `cases()` of them ran
/// (more only when a persisted regression seed is replayed first).
fn check_property(seed: u64, property: impl Fn(&World) -> Result<(), TestCaseError>) {
    let mut config = seeded::config_with_cases(seed, cases());
    config.source_file = Some(file!());
    let want = config.cases;
    let mut runner = TestRunner::new(config);
    let ran = AtomicU32::new(0);
    let result = runner.run(&spec(), |s| {
        ran.fetch_add(1, Ordering::Relaxed);
        property(&build(s))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        ran.load(Ordering::Relaxed) >= want,
        "ran {} of {want} cases",
        ran.load(Ordering::Relaxed)
    );
}

// ---------------------------------------------------------------------------------------------
// Property 1: the deterministic stages
// ---------------------------------------------------------------------------------------------

fn pipeline(w: &World) -> Result<(), TestCaseError> {
    let raw = w.check_gatekeeper()?;
    let status = normalize(Some(&raw));
    let nothing = Allowance::default();

    // Pre-verification Fallback: codes and this run's tool names only.
    let tools = consulted_tools(RUN, &w.invocations);
    for t in &tools {
        prop_assert!(TOOLS.contains(&t.as_str()), "consulted {t}");
    }
    let reason = status.as_str().to_ascii_lowercase();
    for stage in ["gatekeeper", "verified_input", "verifier"] {
        let pre = fallback_pre(stage, &reason, &tools, "run-1");
        w.check(&pre, &nothing, "the pre-verification fallback")?;
        prop_assert!(!pre.contains(OTHER_TOOL));
    }

    let verified = w.verified_ids();
    let projection = build_verified_input(&w.output, &raw, status);
    let (vout, evidence) = match projection {
        Ok(p) => p,
        Err(_) => {
            // Only a PASS or a LOW_CONFID with an accepted claim may be projected.
            prop_assert!(
                !matches!(status, GateStatus::Pass | GateStatus::LowConfid)
                    || raw.accepted_claims().is_empty()
            );
            prop_assert!(verified.is_empty());
            return Ok(());
        }
    };
    prop_assert!(matches!(status, GateStatus::Pass | GateStatus::LowConfid));
    let projected: Vec<String> = vout.claims.iter().map(|c| c.claim_id.clone()).collect();
    prop_assert_eq!(&projected, &verified);

    let mut state = DiagnosisState::new(
        QUESTION,
        diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0)),
    );
    state.round.executor_output = Some(w.output.clone());
    state.round.gatekeeper_raw = Some(raw.clone());
    state.round.gatekeeper_status = Some(status);
    state.round.ceiling = Some(ceiling(status));
    state.round.verified_executor_output = Some(vout.clone());
    state.round.verified_evidence = evidence.clone();
    let verifier_input = verifier_input_json(&mut state).expect("verifier input");
    w.check(
        &verifier_input,
        &w.allowance(&verified),
        "the verifier input",
    )?;

    let allowed: Vec<String> = verified
        .iter()
        .zip(w.spec.allow.iter().cycle())
        .filter(|(_, a)| **a)
        .map(|(id, _)| id.clone())
        .collect();
    let result = VerifierResult {
        verdict: w.spec.verdict,
        groundedness: 0.5,
        claim_checks: Vec::new(),
        facts: Vec::new(),
        allowed_claims: allowed.clone(),
        missing_information: vec![MISSING.into()],
        recommendations: vec![RECOMMENDATION.into()],
        rationale: String::new(),
    };
    let effective = effective_verdict(w.spec.verdict, ceiling(status));
    prop_assert!(effective <= ceiling(status) && effective <= w.spec.verdict);
    state.round.verifier_status = Some(AgentStatus::Completed);
    state.round.verifier_model_verdict = Some(w.spec.verdict);
    state.round.effective_verdict = Some(effective);
    state.round.verifier_result = Some(result.clone());
    let allowance = w.allowance(&allowed);
    let material = answer_material_from_state(&state, RUN, &w.invocations).expect("material");
    let composer_input = composer_input_json(&mut state, &material).expect("composer input");
    w.check(&composer_input, &allowance, "the composer input")?;

    let post = fallback_post(
        Some(effective),
        &allowed_claims(&result, &vout, &evidence),
        &material.missing_information,
        &material.recommendations,
    );
    w.check(&post, &allowance, "the post-verification fallback")?;
    // Every allowed claim is shown.
    for id in &allowed {
        let i: usize = id[1..].parse().expect("claim ids are c<n>");
        prop_assert!(post.contains(&claim_text(i - 1)), "allowed {id} missing");
    }
    Ok(())
}

#[test]
fn no_unverified_material_crosses_the_pipeline() {
    check_property(0xD1A6_0701, pipeline);
}

// ---------------------------------------------------------------------------------------------
// Property 2: the real graph
// ---------------------------------------------------------------------------------------------

fn catalog() -> Vec<ToolSpec> {
    TOOLS
        .iter()
        .map(|name| ToolSpec {
            name: name.to_string(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        })
        .collect()
}

/// `composer_answers` counts the runs that ended with the Composer's answer.
fn graph_run(w: &World, composer_answers: &AtomicU32) -> Result<(), TestCaseError> {
    let _ = w.check_gatekeeper()?;
    let model = Arc::new(ScriptedInvoker::new());
    let log = Arc::new(MemoryInvocationLog::new());
    for i in &w.invocations {
        log.record(
            &RunConfig::new(i.session_id.clone(), i.run_id.clone()),
            i.clone(),
        )
        .expect("the memory log keeps it");
    }

    model.reply(
        AgentRole::Planner,
        json!({"schema": "planner_plan_v1", "mode": "NORMAL",
               "steps": [{"id": "s1", "goal": "look", "tool": "search_logs",
                          "arguments": {"query": "502"}}]})
        .to_string(),
    );
    let mut doc = serde_json::to_value(&w.output).expect("executor output");
    doc["schema"] = json!("executor_evidence_v2");
    model.reply(AgentRole::Executor, doc.to_string());

    let verified = w.verified_ids();
    let mut allowed: Vec<String> = verified
        .iter()
        .zip(w.spec.allow.iter().cycle())
        .filter(|(_, a)| **a)
        .map(|(id, _)| id.clone())
        .collect();
    let unverified = w
        .output
        .claims
        .iter()
        .map(|c| c.claim_id.clone())
        .find(|id| !verified.contains(id));
    let invalid = match (&unverified, w.spec.allow_unverified) {
        (Some(id), true) if !verified.is_empty() => {
            allowed.push(id.clone());
            true
        }
        _ => false,
    };
    let facts = if w.spec.critical_gap {
        json!([{"fact": "cause not shown", "is_critical": true,
                "verification": "no_evidence", "claim_ids": []}])
    } else {
        json!([])
    };
    // The Verifier agrees with itself: it checks every verified claim, supported exactly
    // when it allows it. A PASS that allows nothing breaks its contract like an allowed
    // unverified claim does.
    let checks: Vec<Value> = verified
        .iter()
        .map(|id| json!({"claim_id": id, "supported": allowed.contains(id)}))
        .collect();
    let invalid =
        invalid || (w.spec.verdict == Verdict::Pass && allowed.is_empty() && !verified.is_empty());
    let verdict = w.spec.verdict.as_str();
    let reply = json!({"schema": "verifier_verdict_v1", "verdict": verdict,
                       "groundedness": 0.5, "claim_checks": checks, "facts": facts,
                       "allowed_claims": allowed, "missing_information": [MISSING],
                       "recommendations": [RECOMMENDATION]})
    .to_string();
    model.reply(AgentRole::Verifier, reply.clone());
    model.reply(AgentRole::Verifier, reply);
    // An evidence retry gets a gap-only plan and the same complete snapshot again, which the
    // Gatekeeper checks anew; the second Verifier reply judges it.
    model.reply(
        AgentRole::Planner,
        json!({"schema": "planner_plan_v1", "mode": "EVIDENCE_GAP_ONLY",
               "steps": [{"id": "s1", "goal": "close the gap", "tool": "search_logs",
                          "arguments": {"query": "gap"}, "gap_id": "g1"}]})
        .to_string(),
    );
    model.reply(AgentRole::Executor, doc.to_string());
    // It cites the first allowed claim inline and in `cited_claims`, as it must.
    let cited: Vec<&String> = allowed.iter().take(1).collect();
    let composed = match cited.first() {
        Some(id) => format!("{COMPOSED} [{id}]"),
        None => COMPOSED.to_string(),
    };
    let answer = json!({"schema": "composer_answer_v1", "answer_markdown": composed,
                        "cited_claims": cited})
    .to_string();
    match w.spec.composer {
        0 => {
            model.reply(AgentRole::Composer, answer);
        }
        1 => {
            model.fail(
                AgentRole::Composer,
                InvokeError::Permanent("HTTP 403".into()),
            );
        }
        _ => {
            model.reply(AgentRole::Composer, format!("Sure: {answer}"));
            model.reply(AgentRole::Composer, format!("Sure: {answer}"));
        }
    }

    let graph = topology::compile(real_nodes(NodeDeps {
        invoker: model.clone(),
        log: log.clone(),
        catalog: Arc::new(catalog()),
        composer: diag_core::protocol::ComposerContract::CURRENT,
    }))
    .expect("the diagnosis topology compiles");
    let config = RunConfig::new(SESSION, RUN);
    let clock = FixedClock(Timestamp::from_unix_ms(1_790_000_000_000));
    let state = futures::executor::block_on(graph.invoke(
        DiagnosisState::new(
            QUESTION,
            diag_core::protocol::RunClock::at(diag_core::clock::Timestamp::from_unix_ms(0)),
        ),
        &config,
        InvokeOptions {
            step_limit: STEP_LIMIT,
            clock: &clock,
            cancel: None,
            observer: &mut NoopObserver,
        },
    ))
    .map_err(|f| TestCaseError::fail(format!("engine error {:?}", f.error)))?;

    let nothing = Allowance::default();
    let verified_allowance = w.allowance(&verified);
    let allowed_allowance = w.allowance(&allowed);
    for (request, cfg) in model.requests() {
        prop_assert_eq!(&cfg, &config);
        let what = format!("the {} input (round {})", request.role, request.round);
        let allowance = match (request.role, request.round) {
            (AgentRole::Planner | AgentRole::Executor, 1) => &nothing,
            // Round 2 carries the prior verified material.
            (AgentRole::Planner | AgentRole::Executor, _) => &verified_allowance,
            (AgentRole::Verifier, _) => &verified_allowance,
            (AgentRole::Composer, _) => &allowed_allowance,
        };
        w.check(&request.input, allowance, &what)?;
    }
    prop_assert!(log.lookups().iter().all(|r| r == RUN));

    let answer = state.final_answer.as_deref().unwrap_or_default();
    prop_assert!(!answer.trim().is_empty());
    match state.fallback_kind {
        Some(FallbackKind::PreVerification) => {
            w.check(answer, &nothing, "the pre-verification answer")?;
            prop_assert_eq!(state.round.effective_verdict, None);
            prop_assert_eq!(state.round.verifier_model_verdict, None);
        }
        Some(FallbackKind::PostVerification) => {
            prop_assert!(!invalid);
            w.check(answer, &allowed_allowance, "the post-verification answer")?;
        }
        None => {
            composer_answers.fetch_add(1, Ordering::Relaxed);
            prop_assert_eq!(answer, composed.as_str());
            prop_assert_eq!(w.spec.composer, 0);
        }
    }
    if state.round.verifier_status != Some(AgentStatus::Completed) {
        prop_assert_eq!(state.round.effective_verdict, None);
    }
    // With verified material the Verifier always runs; allowing an unverified claim is
    // INVALID_OUTPUT on both attempts.
    if !verified.is_empty() {
        prop_assert!(!model.requests_for(AgentRole::Verifier).is_empty());
    }
    if invalid {
        prop_assert_eq!(
            state.round.verifier_status,
            Some(AgentStatus::InvalidOutput)
        );
        prop_assert_eq!(state.fallback_kind, Some(FallbackKind::PreVerification));
    }
    // A refusal names the token it refused (the Gatekeeper's `token` of the first claim
    // refused for its content): that token is a foreign one, and it is the only material of
    // a claim an event may show.
    let mut events = serde_json::to_value(&state.events).expect("events");
    for event in events.as_array_mut().expect("events are a list") {
        let node = event["node"].as_str().unwrap_or_default().to_string();
        let Some(detail) = event.get_mut("detail").and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(token) = detail.remove("token") {
            prop_assert_eq!(
                node.as_str(),
                "gatekeeper",
                "only the Gatekeeper names a token here"
            );
            let token = token.as_str().unwrap_or_default();
            prop_assert!(
                w.foreign_tokens.iter().any(|f| f == token),
                "the Gatekeeper names {token}, not a foreign token of a refused claim"
            );
            prop_assert!(detail.contains_key("refused_claim"));
        }
    }
    let events = events.to_string();
    w.check(&events, &nothing, "the events")?;
    Ok(())
}

#[test]
fn no_unverified_material_crosses_the_real_graph() {
    // This test's own count (not a static the other tests of the binary could touch): the
    // property must reach the Composer's answer.
    let composer_answers = AtomicU32::new(0);
    check_property(0xD1A6_0702, |w| graph_run(w, &composer_answers));
    assert!(
        composer_answers.load(Ordering::Relaxed) > 0,
        "no run reached the Composer's answer"
    );
}
