//! The score of one run against its scenario's label, and the aggregate of repeated runs.
//! Pure functions over plain data: no clock, no I/O, no randomness; the same answer and
//! evidence always score the same (`docs/EVAL.md`, `openspec/specs/eval/`).
//!
//! Rules, per run:
//! - **component named**: the answer names the label's component or one of its aliases
//!   (case-insensitive, whole name: no letter, digit or `_` right before or after it).
//! - **fault named**: the answer contains one of the fault keywords (case-insensitive,
//!   whitespace normalised).
//! - **named** = component named and fault named; **partial** = exactly one of the two.
//! - **grounded**: named, and some sentence of the answer names the component (or an alias)
//!   and cites (`[cN]`) a claim the Verifier allowed whose verified quote, from the labelled
//!   evidence's tool, contains that evidence's text (case-insensitive).
//! - **named, ungrounded**: named but not grounded. It is never rewarded.
//! - **fooled**: a red herring (component or alias) stands in the *cause position* of a
//!   sentence and is not negated there ([`fooled_by`]).
//! - **fallback**: the run's answer came from the Fallback (degraded); **failed**: the run
//!   ended FAILED with no answer.
//!
//! A run's single outcome takes the first that applies: failed, fallback, fooled, grounded,
//! named-ungrounded, partial, missed. Its score is 1 for `grounded`, else 0.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::scenario::Label;
use diag_core::protocol::composer::citation_markers;

/// One verified quote of a claim: the tool its binding came from and the text it matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifiedQuote {
    pub claim_id: String,
    pub tool: String,
    pub quote: String,
}

/// What a finished run is scored on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunFacts {
    /// The run ended FAILED (no answer).
    pub failed: bool,
    /// The answer shown to the operator (Composer or Fallback).
    pub answer: Option<String>,
    /// A Fallback answered.
    pub degraded: bool,
    /// The verified quotes of the run's claims (Verified Input's evidence).
    pub quotes: Vec<VerifiedQuote>,
    /// The claims the Verifier allowed.
    pub allowed_claims: Vec<String>,
}

/// One run's outcome, the first rule that applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Failed,
    Fallback,
    Fooled,
    Grounded,
    NamedUngrounded,
    Partial,
    Missed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Failed => "failed",
            Outcome::Fallback => "fallback",
            Outcome::Fooled => "fooled",
            Outcome::Grounded => "grounded",
            Outcome::NamedUngrounded => "named_ungrounded",
            Outcome::Partial => "partial",
            Outcome::Missed => "missed",
        }
    }
}

/// The score of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunScore {
    pub outcome: Outcome,
    /// 1 for a grounded root cause, else 0.
    pub score: f64,
    pub component_named: bool,
    pub fault_named: bool,
    pub named: bool,
    pub grounded: bool,
    pub named_ungrounded: bool,
    pub partial: bool,
    pub fooled: bool,
    /// The red herring (its label component) named as the cause.
    pub fooled_by: Option<String>,
    pub fallback: bool,
    pub failed: bool,
    /// The cited claims that ground the root cause, in answer order.
    pub grounding_claims: Vec<String>,
}

/// Scores one run against a label.
pub fn score_run(label: &Label, facts: &RunFacts) -> RunScore {
    let answer = facts.answer.as_deref().unwrap_or("");
    let lower = answer.to_lowercase();
    let names: Vec<String> = std::iter::once(&label.component)
        .chain(&label.component_aliases)
        .map(|n| normalize(n))
        .filter(|n| !n.is_empty())
        .collect();
    let component_named = names_any(&lower_normalized(&lower), &names);
    let fault_named = label
        .fault_keywords
        .iter()
        .map(|k| normalize(k))
        .any(|k| !k.is_empty() && lower_normalized(&lower).contains(&k));
    let named = component_named && fault_named;

    let grounding_claims = if named {
        grounding_claims(answer, &names, label, facts)
    } else {
        Vec::new()
    };
    let grounded = named && !grounding_claims.is_empty();
    let fooled_by = fooled_by(answer, label);
    let fooled = fooled_by.is_some();
    let failed = facts.failed;
    let fallback = !failed && facts.degraded;
    let outcome = if failed {
        Outcome::Failed
    } else if fallback {
        Outcome::Fallback
    } else if fooled {
        Outcome::Fooled
    } else if grounded {
        Outcome::Grounded
    } else if named {
        Outcome::NamedUngrounded
    } else if component_named || fault_named {
        Outcome::Partial
    } else {
        Outcome::Missed
    };
    RunScore {
        outcome,
        score: if outcome == Outcome::Grounded {
            1.0
        } else {
            0.0
        },
        component_named,
        fault_named,
        named,
        grounded,
        named_ungrounded: named && !grounded,
        partial: component_named != fault_named,
        fooled,
        fooled_by,
        fallback,
        failed,
        grounding_claims,
    }
}

/// Lowercase, whitespace runs as one space, trimmed.
fn normalize(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn lower_normalized(lower: &str) -> String {
    lower.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Byte offsets where `name` (lowercase, normalised) occurs in `text` (the same) as a whole
/// name.
fn occurrences(text: &str, name: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    if name.is_empty() {
        return out;
    }
    let mut from = 0;
    while let Some(i) = text.get(from..).and_then(|t| t.find(name)) {
        let start = from + i;
        let end = start + name.len();
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        let starts_word = name.chars().next().is_some_and(is_name_char);
        let ends_word = name.chars().next_back().is_some_and(is_name_char);
        let ok_before = !starts_word || !before.is_some_and(is_name_char);
        let ok_after = !ends_word || !after.is_some_and(is_name_char);
        if ok_before && ok_after {
            out.push((start, end));
        }
        from = start + name.chars().next().map_or(1, char::len_utf8);
    }
    out
}

fn names_any(text: &str, names: &[String]) -> bool {
    names.iter().any(|n| !occurrences(text, n).is_empty())
}

/// One sentence of an answer and the claims it cites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentence {
    pub text: String,
    pub cited: Vec<String>,
}

/// Splits an answer into sentences: a line break always ends one; `.`, `!` or `?` followed
/// by whitespace (or the end) ends one too. A citation marker that opens a sentence after
/// such a stop (`… exhausted. [c2]`) belongs to the sentence before it.
pub fn sentences(answer: &str) -> Vec<Sentence> {
    // (start, end, ended_by_line_break_before)
    let mut spans: Vec<(usize, usize, bool)> = Vec::new();
    let mut start = 0;
    let mut hard = true;
    let bytes: Vec<(usize, char)> = answer.char_indices().collect();
    for (k, &(i, c)) in bytes.iter().enumerate() {
        let next = bytes.get(k + 1).map(|&(_, n)| n);
        if c == '\n' {
            spans.push((start, i, hard));
            start = i + 1;
            hard = true;
        } else if matches!(c, '.' | '!' | '?') && next.is_none_or(char::is_whitespace) {
            spans.push((start, i + 1, hard));
            start = i + 1;
            hard = false;
        }
    }
    spans.push((start, answer.len(), hard));
    let mut out: Vec<Sentence> = spans
        .iter()
        .map(|&(s, e, _)| Sentence {
            text: answer.get(s..e).unwrap_or("").to_string(),
            cited: Vec::new(),
        })
        .collect();
    for marker in citation_markers(answer) {
        let Some(k) = spans
            .iter()
            .position(|&(s, e, _)| marker.range.start >= s && marker.range.start < e.max(s + 1))
        else {
            continue;
        };
        let (s, _, hard) = spans[k];
        let lead = answer.get(s..marker.range.start).unwrap_or("");
        let opens = citation_markers(lead)
            .last()
            .map_or(lead.trim().is_empty(), |m| {
                lead.get(m.range.end..).unwrap_or("").trim().is_empty()
                    && lead.get(..m.range.start).unwrap_or("").trim().is_empty()
            });
        let target = if opens && !hard && k > 0 { k - 1 } else { k };
        out[target].cited.extend(marker.ids);
    }
    out.into_iter()
        .filter(|s| !s.text.trim().is_empty() || !s.cited.is_empty())
        .collect()
}

/// The claims that ground the root cause: cited in a sentence that names the component,
/// allowed by the Verifier, with a verified quote from an evidence tool containing its text.
fn grounding_claims(
    answer: &str,
    names: &[String],
    label: &Label,
    facts: &RunFacts,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for sentence in sentences(answer) {
        if !names_any(&normalize(&sentence.text), names) {
            continue;
        }
        for id in &sentence.cited {
            if !facts.allowed_claims.contains(id) || out.contains(id) {
                continue;
            }
            let proves = facts.quotes.iter().any(|q| {
                q.claim_id == *id
                    && label.evidence.iter().any(|e| {
                        q.tool == e.tool && normalize(&q.quote).contains(&normalize(&e.text))
                    })
            });
            if proves {
                out.push(id.clone());
            }
        }
    }
    out
}

/// Words that put what follows them in the cause position.
const CAUSE_BEFORE: [&str; 16] = [
    "because of",
    "because",
    "caused by",
    "due to",
    "root cause is",
    "root cause was",
    "root cause:",
    "the cause is",
    "the cause was",
    "triggered by",
    "result of",
    "stems from",
    "driven by",
    "attributed to",
    "brought on by",
    "blame",
];
/// Words that put what precedes them in the cause position.
const CAUSE_AFTER: [&str; 14] = [
    "is the root cause",
    "was the root cause",
    "is the cause",
    "was the cause",
    "is responsible",
    "was responsible",
    "is to blame",
    "caused",
    "causes",
    "causing",
    "led to",
    "leads to",
    "broke",
    "triggered",
];
/// Words that, in the clause of a mention, say the component is *not* the cause.
const NEGATIONS: [&str; 18] = [
    "not",
    "n't",
    "never",
    "unrelated",
    "irrelevant",
    "ruled out",
    "rule out",
    "rules out",
    "coincidental",
    "coincidence",
    "red herring",
    "innocent",
    "rather than",
    "instead of",
    "nor",
    "neither",
    "unlikely",
    "no evidence",
];
/// What ends a clause for the negation check (besides `,` `;` `:` `(` `)`).
const CLAUSE_WORDS: [&str; 5] = [" but ", " while ", " whereas ", " although ", " and "];

/// The red herring an answer names as the cause, if any. A sentence's *cause spans* are the
/// text after a cause-before phrase (`because`, `caused by`, `due to`, `root cause is`, …) up
/// to the next cause phrase, `;` or the end of the sentence, and the text before a
/// cause-after phrase (`caused`, `is the root cause`, `led to`, `broke`, …) back to the
/// previous cause phrase, `;` or the start. A red herring mentioned inside a cause span is
/// named as the cause unless the clause around the mention (bounded by `, ; : ( )` and `but`,
/// `while`, `whereas`, `although`, `and`) holds a negation (`not`, `unrelated`, `ruled out`,
/// `rather than`, …).
pub fn fooled_by(answer: &str, label: &Label) -> Option<String> {
    for sentence in sentences(answer) {
        let text = normalize(&sentence.text);
        let spans = cause_spans(&text);
        if spans.is_empty() {
            continue;
        }
        for herring in &label.red_herrings {
            let names = std::iter::once(&herring.component)
                .chain(&herring.aliases)
                .map(|n| normalize(n));
            for name in names {
                for (s, e) in occurrences(&text, &name) {
                    let inside = spans.iter().any(|&(a, b)| s >= a && e <= b);
                    if inside && !negated(&text, s, e) {
                        return Some(herring.component.clone());
                    }
                }
            }
        }
    }
    None
}

/// Word-bounded occurrences of a phrase (a phrase's own punctuation ends it, as in
/// `root cause:`).
fn phrase_at(text: &str, phrase: &str) -> Vec<(usize, usize)> {
    occurrences(text, phrase)
}

fn cause_spans(text: &str) -> Vec<(usize, usize)> {
    // Every cause phrase, the longer ones first so `caused by` is not also `caused`.
    let mut marks: Vec<(usize, usize, bool)> = Vec::new(); // (start, end, cause follows)
    let overlaps = |marks: &[(usize, usize, bool)], s: usize, e: usize| {
        marks.iter().any(|&(a, b, _)| s < b && a < e)
    };
    let mut phrases: Vec<(&str, bool)> = CAUSE_BEFORE
        .iter()
        .map(|p| (*p, true))
        .chain(CAUSE_AFTER.iter().map(|p| (*p, false)))
        .collect();
    phrases.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    for (p, follows) in phrases {
        for (s, e) in phrase_at(text, p) {
            if !overlaps(&marks, s, e) {
                marks.push((s, e, follows));
            }
        }
    }
    marks.sort_by_key(|m| m.0);
    let semis: Vec<usize> = text.match_indices(';').map(|(i, _)| i).collect();
    let mut spans = Vec::new();
    for (k, &(s, e, follows)) in marks.iter().enumerate() {
        if follows {
            let next_mark = marks.get(k + 1).map_or(text.len(), |m| m.0);
            let next_semi = semis
                .iter()
                .copied()
                .find(|&i| i >= e)
                .unwrap_or(text.len());
            spans.push((e, next_mark.min(next_semi)));
        } else {
            let prev_mark = if k == 0 { 0 } else { marks[k - 1].1 };
            let prev_semi = semis
                .iter()
                .copied()
                .filter(|&i| i < s)
                .max()
                .map_or(0, |i| i + 1);
            spans.push((prev_mark.max(prev_semi), s));
        }
    }
    spans
}

/// Whether the clause around `text[s..e]` holds a negation.
fn negated(text: &str, s: usize, e: usize) -> bool {
    let is_stop = |c: char| matches!(c, ',' | ';' | ':' | '(' | ')');
    let mut a = text[..s].rfind(is_stop).map_or(0, |i| i + 1);
    let mut b = text[e..].find(is_stop).map_or(text.len(), |i| e + i);
    for w in CLAUSE_WORDS {
        if let Some(i) = text[a..s].rfind(w) {
            a = a + i + w.len() - 1;
        }
        if let Some(i) = text[e..b].find(w) {
            b = e + i;
        }
    }
    let clause = &text[a..b];
    NEGATIONS.iter().any(|n| {
        if *n == "n't" {
            clause.contains(n)
        } else {
            !occurrences(clause, n).is_empty()
        }
    })
}

/// Mean, spread (population standard deviation), minimum and maximum of a figure over runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub mean: f64,
    pub sd: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Stat> {
        if values.is_empty() {
            return None;
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        Some(Stat {
            mean,
            sd: var.sqrt(),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// What the aggregate needs of one run (failed runs included).
#[derive(Debug, Clone, PartialEq)]
pub struct RunFigures {
    pub score: RunScore,
    /// The effective verdict, or `None` when the Verifier did not complete.
    pub verdict: Option<String>,
    pub tokens: u64,
    pub model_calls: u64,
    pub wall_ms: u64,
    /// `None` when the model has no prices configured.
    pub cost: Option<f64>,
}

/// The repeated runs of one scenario with one model. Every run is counted, failed and
/// fallen-back ones included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    pub runs: u32,
    pub grounded: u32,
    pub named_ungrounded: u32,
    pub partial: u32,
    pub fooled: u32,
    pub fallback: u32,
    pub failed: u32,
    /// Runs by outcome.
    pub outcomes: BTreeMap<String, u32>,
    /// Runs by effective verdict (`none` when the Verifier did not complete).
    pub verdicts: BTreeMap<String, u32>,
    pub score: Option<Stat>,
    pub tokens: Option<Stat>,
    pub model_calls: Option<Stat>,
    pub wall_ms: Option<Stat>,
    /// Present only when every run has a cost.
    pub cost: Option<Stat>,
}

pub fn aggregate(runs: &[RunFigures]) -> Aggregate {
    let count = |f: &dyn Fn(&RunScore) -> bool| {
        u32::try_from(runs.iter().filter(|r| f(&r.score)).count()).unwrap_or(u32::MAX)
    };
    let mut outcomes = BTreeMap::new();
    let mut verdicts = BTreeMap::new();
    for r in runs {
        *outcomes
            .entry(r.score.outcome.as_str().to_string())
            .or_insert(0u32) += 1;
        *verdicts
            .entry(r.verdict.clone().unwrap_or_else(|| "none".into()))
            .or_insert(0u32) += 1;
    }
    let stat = |f: &dyn Fn(&RunFigures) -> f64| Stat::of(&runs.iter().map(f).collect::<Vec<_>>());
    let costs: Option<Vec<f64>> = runs.iter().map(|r| r.cost).collect();
    Aggregate {
        runs: u32::try_from(runs.len()).unwrap_or(u32::MAX),
        grounded: count(&|s| s.grounded),
        named_ungrounded: count(&|s| s.named_ungrounded),
        partial: count(&|s| s.partial),
        fooled: count(&|s| s.fooled),
        fallback: count(&|s| s.fallback),
        failed: count(&|s| s.failed),
        outcomes,
        verdicts,
        score: stat(&|r| r.score.score),
        tokens: stat(&|r| r.tokens as f64),
        model_calls: stat(&|r| r.model_calls as f64),
        wall_ms: stat(&|r| r.wall_ms as f64),
        cost: costs.and_then(|c| Stat::of(&c)),
    }
}

/// The cost of a run's tokens at prices per 1,000 tokens; `None` without both prices.
pub fn cost(
    prompt_tokens: u64,
    completion_tokens: u64,
    per_1k_prompt: Option<f64>,
    per_1k_completion: Option<f64>,
) -> Option<f64> {
    Some(
        prompt_tokens as f64 / 1000.0 * per_1k_prompt?
            + completion_tokens as f64 / 1000.0 * per_1k_completion?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Evidence, RedHerring, Window};

    fn label() -> Label {
        Label {
            component: "payment-service".into(),
            component_aliases: vec!["payment service".into()],
            fault: "database connection pool exhausted".into(),
            fault_keywords: vec![
                "pool exhausted".into(),
                "connection pool".into(),
                "no free database connection".into(),
            ],
            window: Window {
                start: "2026-11-30T14:00:00Z".into(),
                end: "2026-11-30T14:10:00Z".into(),
            },
            evidence: vec![
                Evidence {
                    tool: "search_logs".into(),
                    text: "Connection is not available".into(),
                },
                Evidence {
                    tool: "query_metrics".into(),
                    text: "payment_db_pool_active_connections".into(),
                },
            ],
            red_herrings: vec![RedHerring {
                component: "fraud-service".into(),
                aliases: vec!["fraud check".into()],
                why: None,
            }],
        }
    }

    fn quote(id: &str, tool: &str, text: &str) -> VerifiedQuote {
        VerifiedQuote {
            claim_id: id.into(),
            tool: tool.into(),
            quote: text.into(),
        }
    }

    /// c1 quotes the checkout symptom, c2 the labelled evidence.
    fn facts(answer: &str) -> RunFacts {
        RunFacts {
            failed: false,
            answer: Some(answer.into()),
            degraded: false,
            quotes: vec![
                quote(
                    "c1",
                    "search_logs",
                    "upstream returned 502 from payment-service",
                ),
                quote(
                    "c2",
                    "search_logs",
                    "HikariPool-1 - Connection is not available, request timed out after 5000ms",
                ),
            ],
            allowed_claims: vec!["c1".into(), "c2".into()],
        }
    }

    #[test]
    fn grounded_when_the_naming_sentence_cites_the_labelled_evidence() {
        let s = score_run(
            &label(),
            &facts(
                "checkout-service answers 502 because payment-service has no free database \
                 connection.\n\n- payment-service logged `Connection is not available` [c2]",
            ),
        );
        assert_eq!(s.outcome, Outcome::Grounded);
        assert!(s.grounded && s.named && !s.named_ungrounded && !s.fooled);
        assert_eq!(s.grounding_claims, ["c2"]);
        assert_eq!(s.score, 1.0);
        // The marker after the full stop belongs to the sentence before it.
        let s = score_run(
            &label(),
            &facts("The payment-service connection pool is exhausted. [c2]"),
        );
        assert_eq!(s.outcome, Outcome::Grounded);
    }

    #[test]
    fn named_but_ungrounded_is_not_rewarded() {
        // Cites only the symptom's claim, whose quote is not labelled evidence.
        let s = score_run(
            &label(),
            &facts("checkout answers 502 from payment-service [c1]. The payment-service connection pool is exhausted."),
        );
        assert_eq!(s.outcome, Outcome::NamedUngrounded);
        assert!(s.named && !s.grounded && s.named_ungrounded);
        assert_eq!(s.score, 0.0);
        // Citing the right claim in a sentence that does not name the component is not enough.
        let s = score_run(
            &label(),
            &facts("payment-service's connection pool is exhausted. It logged timeouts [c2]."),
        );
        assert_eq!(s.outcome, Outcome::NamedUngrounded);
        // A claim the Verifier did not allow grounds nothing.
        let mut f = facts("payment-service's connection pool is exhausted [c2].");
        f.allowed_claims = vec!["c1".into()];
        assert_eq!(score_run(&label(), &f).outcome, Outcome::NamedUngrounded);
        // Nor does a quote from another tool than the evidence's.
        let mut f = facts("payment-service's connection pool is exhausted [c2].");
        f.quotes[1].tool = "search_runbooks".into();
        assert_eq!(score_run(&label(), &f).outcome, Outcome::NamedUngrounded);
    }

    #[test]
    fn a_red_herring_named_as_the_cause_fools_the_run() {
        for answer in [
            "checkout-service answers 502 because the fraud-service deploy broke it [c1].",
            "The fraud-service deploy at 13:57 caused the 502s [c1].",
            "Root cause: fraud-service v3.2.0.",
            "payment-service is fine; fraud-service is the root cause.",
            "The 502s are due to the fraud check and the payment-service connection pool [c2].",
        ] {
            let s = score_run(&label(), &facts(answer));
            assert!(s.fooled, "{answer}");
            assert_eq!(s.fooled_by.as_deref(), Some("fraud-service"), "{answer}");
            assert_eq!(s.outcome, Outcome::Fooled, "{answer}");
            assert_eq!(s.score, 0.0);
        }
    }

    #[test]
    fn a_red_herring_mentioned_but_not_as_the_cause_does_not_fool() {
        for answer in [
            "fraud-service deployed v3.2.0 at 13:57.",
            "The 502s are not caused by fraud-service.",
            "The 502s are caused by the payment-service connection pool, not by fraud-service [c2].",
            "payment-service's connection pool is exhausted because of settlement-batch, and the fraud-service deploy is unrelated [c2].",
            "The fraud-service deploy is not the root cause.",
            "Because the payment-service connection pool is exhausted [c2]; fraud-service deployed at 13:57.",
        ] {
            let s = score_run(&label(), &facts(answer));
            assert!(!s.fooled, "{answer}");
        }
    }

    #[test]
    fn a_fallback_is_its_own_outcome_and_a_failed_run_counts() {
        let mut f = facts("payment-service's connection pool is exhausted [c2].");
        f.degraded = true;
        let s = score_run(&label(), &f);
        assert_eq!(s.outcome, Outcome::Fallback);
        assert!(s.fallback);
        assert_eq!(s.score, 0.0);
        // Its answer is still scored, in its own columns.
        assert!(s.grounded);

        let failed = RunFacts {
            failed: true,
            ..RunFacts::default()
        };
        let s = score_run(&label(), &failed);
        assert_eq!(s.outcome, Outcome::Failed);
        assert!(s.failed && !s.fallback && !s.named);
    }

    #[test]
    fn partial_names_the_component_without_the_fault_or_the_fault_without_the_component() {
        let s = score_run(&label(), &facts("payment-service is slow [c1]."));
        assert_eq!(s.outcome, Outcome::Partial);
        assert!(s.partial && s.component_named && !s.fault_named);
        let s = score_run(
            &label(),
            &facts("A connection pool is exhausted somewhere."),
        );
        assert_eq!(s.outcome, Outcome::Partial);
        assert!(s.partial && !s.component_named && s.fault_named);
        let s = score_run(&label(), &facts("Nothing is known."));
        assert_eq!(s.outcome, Outcome::Missed);
        assert!(!s.partial);
        // Whole names only: `payment-services2` is not `payment-service`.
        let s = score_run(
            &label(),
            &facts("payment-services2 has a connection pool issue."),
        );
        assert!(!s.component_named);
    }

    #[test]
    fn sentences_split_on_stops_and_lines_and_keep_their_citations() {
        let s = sentences("A is 0.95 [c1]. B [c2, c3]\n- C. [c4] D");
        let texts: Vec<&str> = s.iter().map(|s| s.text.trim()).collect();
        assert_eq!(texts, ["A is 0.95 [c1].", "B [c2, c3]", "- C.", "[c4] D"]);
        assert_eq!(s[0].cited, ["c1"]);
        assert_eq!(s[1].cited, ["c2", "c3"]);
        assert_eq!(s[2].cited, ["c4"]);
        assert!(s[3].cited.is_empty());
    }

    #[test]
    fn aggregates_count_every_run_and_give_mean_and_spread() {
        let l = label();
        let figures = |answer: Option<&str>, failed: bool, tokens: u64| RunFigures {
            score: score_run(
                &l,
                &RunFacts {
                    failed,
                    answer: answer.map(str::to_string),
                    ..facts("")
                },
            ),
            verdict: (!failed).then(|| "PASS".to_string()),
            tokens,
            model_calls: 5,
            wall_ms: 1000,
            cost: None,
        };
        let runs = [
            figures(
                Some("payment-service connection pool exhausted [c2]."),
                false,
                100,
            ),
            figures(None, true, 300),
        ];
        let a = aggregate(&runs);
        assert_eq!(a.runs, 2);
        assert_eq!(a.grounded, 1);
        assert_eq!(a.failed, 1);
        assert_eq!(a.verdicts["none"], 1);
        let t = a.tokens.unwrap();
        assert_eq!((t.mean, t.sd, t.min, t.max), (200.0, 100.0, 100.0, 300.0));
        assert_eq!(a.score.unwrap().mean, 0.5);
        assert!(a.cost.is_none());
        assert_eq!(cost(2000, 1000, Some(0.5), Some(1.0)), Some(2.0));
        assert_eq!(cost(2000, 1000, Some(0.5), None), None);
    }
}
