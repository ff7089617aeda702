//! Content grounding (openspec/specs/verified-evidence/spec.md): no number, time, date,
//! identifier or quoted line reaches a reader unless a recorded tool output (or the
//! operator's question) shows it. What is compared is what a reader sees, as values:
//!
//! - [`read`]: one canonical reading of every text a reader sees (claim text, answers,
//!   Verifier items): invisible characters refused or dropped, Markdown read as the reports
//!   render it, Unicode NFKC.
//! - [`words`]: the tokens of that reading, each with its kind and value. The reading denies
//!   by default: prose is a closed set (letters of one script, not a value word, not a
//!   lookalike; hyphenated English, [`prose`]), and every other word is a fact: numbers read
//!   whole (`5,000`, `50 154`, `2,5`, `154k`, `fifty-five`), times with their zones
//!   (`2:02 PM UTC`, `14:02 UTC+8`, `a quarter past two`), dates and weekdays
//!   (`the 30th of November`, `November 2026`, `Sunday`), identifiers (names, paths,
//!   versions, anything else), `#` references, quotations in any marks and blockquotes,
//!   verbatim lines of code blocks.
//! - [`values`]: how each kind is normalised and compared.
//! - [`EvidenceContext`]: what a text may draw its tokens from, read by the same tokenizer:
//!   the numbers, times and dates of the evidence strings as values, the strings themselves
//!   for names and verbatim lines. What a tool was *asked* (a search's arguments) is kept
//!   apart: it binds only a quotation of what was searched, or the window's time and date,
//!   and only in a claim bound to the search's own figures.
//!
//! Everything here is pure and deterministic: plain data in, plain data out, no I/O, no
//! panics.

mod prose;
pub mod read;
pub mod values;
pub mod words;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::invocation::ToolInvocation;
use super::json_pointer;
use super::verified::VerifiedEvidence;
use super::whitespace::normalize_whitespace;
use read::{normalize_plain, read_markdown, read_plain, Reading};
use values::{Date, TimeOfDay};
use words::{segment_tokens, Fact, Mode, Token};

pub use prose::is_hyphenated_prose;
pub use words::{is_claim_id, is_short_id, Marker};

/// What kind of salient token (openspec/specs/verified-evidence/spec.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenKind {
    Number,
    Time,
    Date,
    Identifier,
    Reference,
    Quoted,
    /// An invisible character that changes what a token reads as (`U+200B`).
    Invisible,
}

impl TokenKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Number => "number",
            TokenKind::Time => "time",
            TokenKind::Date => "date",
            TokenKind::Identifier => "identifier",
            TokenKind::Reference => "reference",
            TokenKind::Quoted => "quoted",
            TokenKind::Invisible => "invisible",
        }
    }
}

impl std::fmt::Display for TokenKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A salient token as it is reported: its kind and its text as the reader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SalientToken {
    pub kind: TokenKind,
    pub text: String,
}

impl SalientToken {
    pub fn new(kind: TokenKind, text: impl Into<String>) -> Self {
        SalientToken {
            kind,
            text: text.into(),
        }
    }
}

/// An unbound token and where it was: the line of the text (1-based).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unbound {
    pub token: SalientToken,
    pub line: u32,
}

/// (tokens checked, tokens unbound) of one text against one context.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCheck {
    pub checked: u32,
    pub unbound: Vec<SalientToken>,
    /// The line of each unbound token, in the same order.
    #[serde(default)]
    pub lines: Vec<u32>,
}

impl TokenCheck {
    /// The first unbound token with its line.
    pub fn first(&self) -> Option<Unbound> {
        self.unbound.first().map(|t| Unbound {
            token: t.clone(),
            line: self.lines.first().copied().unwrap_or(1),
        })
    }
}

/// Runs of whitespace collapsed, as every comparison reads text.
pub(crate) fn normalize_ws(s: &str) -> String {
    normalize_whitespace(s)
}

/// The tokens of a reading in `mode`, salient ones only, without duplicates (same kind and
/// value), in order of appearance; an invisible character first.
fn reading_tokens(reading: &Reading, mode: Mode) -> Vec<Token> {
    let mut all = Vec::new();
    if let Some(inv) = &reading.invisible {
        all.push(Token {
            kind: TokenKind::Invisible,
            text: inv.code_point.clone(),
            fact: Fact::Unreadable,
            quoted: false,
            line: inv.line,
            salient: true,
        });
    }
    for seg in &reading.segments {
        segment_tokens(seg, mode, &mut all);
    }
    let mut seen: Vec<(TokenKind, String, bool)> = Vec::new();
    all.into_iter()
        .filter(|t| t.salient)
        .filter(|t| {
            let key = (t.kind, format!("{:?}", t.fact), t.quoted);
            if seen.contains(&key) {
                false
            } else {
                seen.push(key);
                true
            }
        })
        .collect()
}

/// The salient tokens of an answer, as [`EvidenceContext::check`] reads it.
pub fn salient_tokens(text: &str) -> Vec<SalientToken> {
    tokens_of(text, Mode::Answer)
        .into_iter()
        .map(|t| SalientToken::new(t.kind, t.text))
        .collect()
}

/// The salient tokens of a claim's text (brackets are text, not citations).
pub fn claim_tokens(text: &str) -> Vec<SalientToken> {
    tokens_of(text, Mode::Claim)
        .into_iter()
        .map(|t| SalientToken::new(t.kind, t.text))
        .collect()
}

fn tokens_of(text: &str, mode: Mode) -> Vec<Token> {
    reading_tokens(&read_markdown(text), mode)
}

/// The citation markers of an answer as the reader sees it (outside code blocks, link
/// destinations and reference definitions), in order.
pub fn answer_markers(markdown: &str) -> Vec<Marker> {
    read_markdown(markdown)
        .segments
        .iter()
        .filter(|s| s.kind == read::SegmentKind::Flow)
        .flat_map(|s| words::markers(&s.text).into_iter().map(|(_, m)| m))
        .collect()
}

/// What a set of strings shows, read by the same tokenizer as what is checked against it.
#[derive(Debug, Clone, Default)]
struct Facts {
    /// NFKC, whitespace-normalised, lowercased; one entry per distinct string, so a name or
    /// a verbatim line never matches across two strings.
    texts: BTreeSet<String>,
    numbers: BTreeSet<String>,
    times: BTreeSet<TimeOfDay>,
    dates: BTreeSet<Date>,
    /// The days of the week of the full dates shown, and weekdays named.
    weekdays: BTreeSet<u8>,
}

impl Facts {
    fn push_text(&mut self, s: &str) {
        let norm = normalize_whitespace(&normalize_plain(s)).to_lowercase();
        if norm.is_empty() || !self.texts.insert(norm) {
            return;
        }
        let reading = read_plain(s);
        let mut tokens = Vec::new();
        for seg in &reading.segments {
            segment_tokens(seg, Mode::Evidence, &mut tokens);
        }
        for t in tokens {
            self.push_fact(t.fact);
        }
    }

    fn push_fact(&mut self, fact: Fact) {
        match fact {
            Fact::Number(n) => {
                self.numbers.insert(n);
            }
            Fact::Time(time) => {
                self.times.insert(time);
            }
            Fact::TimeOrNumber(time, n) => {
                self.times.insert(time);
                self.numbers.insert(n);
            }
            Fact::Date(d) => {
                if let Some(w) = d.weekday() {
                    self.weekdays.insert(w);
                }
                self.dates.insert(d);
            }
            Fact::Weekday(w) => {
                self.weekdays.insert(w);
            }
            // A time in words (`a quarter past two`) shows neither of its readings.
            Fact::AnyOf(_)
            | Fact::StatusClass(_)
            | Fact::Name(_)
            | Fact::Verbatim(_)
            | Fact::Span(..)
            | Fact::Unreadable => {}
        }
    }

    fn holds(&self, t: &Token) -> bool {
        self.holds_fact(&t.fact)
    }

    fn holds_fact(&self, fact: &Fact) -> bool {
        match fact {
            Fact::Number(n) => self.numbers.contains(n),
            Fact::Time(x) => self.times.iter().any(|e| x.shown_by(e)),
            Fact::TimeOrNumber(x, n) => {
                self.numbers.contains(n) || self.times.iter().any(|e| x.shown_by(e))
            }
            Fact::Date(d) => self.dates.iter().any(|e| d.shown_by(e)),
            Fact::Weekday(w) => self.weekdays.contains(w),
            Fact::StatusClass(d) => self.numbers.iter().any(|n| {
                n.len() == 3 && n.starts_with(*d) && n.bytes().all(|b| b.is_ascii_digit())
            }),
            Fact::AnyOf(facts) => facts.iter().any(|f| self.holds_fact(f)),
            Fact::Name(name) => self.texts.iter().any(|h| occurs_word(h, name)),
            Fact::Verbatim(v) => self.texts.iter().any(|h| occurs_bounded(h, v)),
            // A quotation of acronyms only (`‘OOM’`) has no word to show: only verbatim.
            Fact::Span(v, parts) => {
                self.texts.iter().any(|h| occurs_bounded(h, v))
                    || (!parts.is_empty() && parts.iter().all(|p| self.holds_fact(p)))
            }
            Fact::Unreadable => false,
        }
    }
}

/// The arguments that bound a search in time.
const WINDOW_ARGUMENTS: &[&str] = &["since", "until", "start", "end", "time"];

/// What a text may draw its salient tokens from: what was *observed* (tool outputs, the
/// question) and what was *asked* (the arguments of a search whose figures a claim binds).
#[derive(Debug, Clone, Default)]
pub struct EvidenceContext {
    observed: Facts,
    asked: Facts,
}

impl EvidenceContext {
    pub fn new() -> Self {
        EvidenceContext::default()
    }

    /// Number of distinct observed strings.
    pub fn len(&self) -> usize {
        self.observed.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.observed.texts.is_empty()
    }

    /// An observed string (a tool output's string, the question).
    pub fn push_text(&mut self, s: &str) {
        self.observed.push_text(s);
    }

    /// Every scalar leaf (strings, numbers, bools as text) of a JSON value, and the member
    /// names of its objects, as observed.
    pub fn push_json(&mut self, v: &Value) {
        push_json_into(&mut self.observed, v);
    }

    /// Adds the evidence context of one binding (openspec/specs/verified-evidence/spec.md,
    /// "The evidence context of a binding"):
    ///
    /// - a binding to a figure of the output itself (a top-level scalar: `/matches_found`,
    ///   `/more_matches`, `/untimed_lines`, `/now`) observes the output's top-level
    ///   scalars, and makes the invocation's arguments *asked*;
    /// - any other binding observes its enclosing record: the deepest object on the path
    ///   that encloses the bound value, with its scalar members, its nested objects (wholly,
    ///   without their arrays), and of its arrays only the elements along the bound path. A
    ///   Prometheus series (`/result/N/value/…`, `/result/N/values/K/…` in an output with
    ///   `resultType`) adds its labels and the whole bound sample tuple, and the query's
    ///   metric name and equality matchers (every series returned carries them);
    /// - a path that does not resolve adds nothing.
    pub fn push_binding(&mut self, output: &Value, raw_path: &str, arguments: &Value) {
        let Ok(tokens) = json_pointer::tokens(raw_path) else {
            return;
        };
        // The search window (`since`, `until`, `start`, `end`, `time`) is asked by every
        // binding of the call: "the 502s since 14:00" may name the window it searched.
        if let Value::Object(args) = arguments {
            for key in WINDOW_ARGUMENTS {
                if let Some(v) = args.get(*key) {
                    push_scalar(&mut self.asked, v);
                }
            }
        }
        let mut chain: Vec<&Value> = vec![output];
        let mut cur = output;
        for t in &tokens {
            let next = match cur {
                Value::Object(map) => map.get(t.as_str()),
                Value::Array(items) => array_index(t).and_then(|i| items.get(i)),
                _ => None,
            };
            let Some(next) = next else {
                return;
            };
            chain.push(next);
            cur = next;
        }
        if let (Value::Object(map), [_]) = (output, tokens.as_slice()) {
            if !cur.is_object() && !cur.is_array() {
                // A figure of the output: the search itself.
                for (k, v) in map {
                    if !v.is_object() && !v.is_array() {
                        self.observed.push_text(k);
                        push_scalar(&mut self.observed, v);
                    }
                }
                push_json_into(&mut self.asked, arguments);
                return;
            }
        }
        let depth = (0..chain.len().saturating_sub(1))
            .rev()
            .find(|&d| chain[d].is_object());
        if depth.is_none() || cur.is_object() || cur.is_array() {
            push_json_into(&mut self.observed, cur);
        }
        let Some(depth) = depth else {
            return;
        };
        let rest = tokens.get(depth..).unwrap_or(&[]);
        push_record(&mut self.observed, chain[depth], rest);
        if output.get("resultType").is_some() {
            if let Some(sample) = prometheus_sample(output, &tokens) {
                push_json_into(&mut self.observed, sample);
            }
            if let Some(query) = arguments.get("query").and_then(Value::as_str) {
                for s in promql_selectors(query) {
                    self.observed.push_text(&s);
                }
            }
        }
    }

    /// Whether a token of a checked text is shown: observed, or asked where a question of
    /// what was searched may quote it (a quotation, or the window's time or date).
    fn holds(&self, t: &Token) -> bool {
        self.observed.holds(t)
            || ((t.quoted || matches!(t.kind, TokenKind::Time | TokenKind::Date))
                && self.asked.holds(t))
    }

    fn check_tokens(&self, tokens: Vec<Token>) -> TokenCheck {
        let checked = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        let mut unbound = Vec::new();
        let mut lines = Vec::new();
        for t in tokens {
            if !self.holds(&t) {
                lines.push(t.line);
                unbound.push(SalientToken::new(t.kind, t.text));
            }
        }
        TokenCheck {
            checked,
            unbound,
            lines,
        }
    }

    /// Whether an observed text writes the number `value` with a unit `is_unit` accepts,
    /// glued (`5000ms`) or as the next word (`5000 ms`), or alone when `is_unit("")`: how a
    /// derivation's operand shows its unit (and a single digit, which is no salient token). A JSON member's name (`"timeout_ms": 5000`) does not count: its value and name
    /// are observed apart.
    pub fn shows_quantity(&self, value: &str, is_unit: &dyn Fn(&str) -> bool) -> bool {
        let Some(wanted) = values::read_number(value.trim()).map(|n| n.value) else {
            return false;
        };
        let trim = |w: &str| {
            w.trim_matches(|c: char| {
                matches!(
                    c,
                    ',' | ';'
                        | ':'
                        | '.'
                        | '!'
                        | '?'
                        | '('
                        | ')'
                        | '['
                        | ']'
                        | '"'
                        | '\''
                        | '='
                        | '{'
                        | '}'
                )
            })
            .to_string()
        };
        self.observed.texts.iter().any(|text| {
            let words: Vec<String> = text.split_whitespace().map(trim).collect();
            words.iter().enumerate().any(|(i, w)| {
                let head = w
                    .char_indices()
                    .find(|&(_, c)| !(c.is_ascii_digit() || values::is_digit_joiner(c)))
                    .map_or(w.len(), |(at, _)| at);
                let (number, unit) = w.split_at(head);
                if values::read_number(number).map(|n| n.value).as_deref() != Some(wanted.as_str())
                {
                    return false;
                }
                if unit.is_empty() {
                    is_unit("") || words.get(i + 1).is_some_and(|next| is_unit(next))
                } else {
                    is_unit(unit)
                }
            })
        })
    }

    /// (tokens checked, tokens unbound) of an answer (Markdown, citation markers skipped).
    pub fn check(&self, text: &str) -> TokenCheck {
        self.check_tokens(tokens_of(text, Mode::Answer))
    }

    /// (tokens checked, tokens unbound) of a claim's text or a Verifier item (brackets are
    /// text).
    pub fn check_claim(&self, text: &str) -> TokenCheck {
        self.check_tokens(tokens_of(text, Mode::Claim))
    }

    /// The first salient token of an answer not in this context.
    pub fn first_unbound(&self, text: &str) -> Option<SalientToken> {
        self.check(text).unbound.into_iter().next()
    }

    /// The first salient token of a claim's text or a Verifier item not in this context.
    pub fn first_unbound_claim(&self, text: &str) -> Option<SalientToken> {
        self.check_claim(text).unbound.into_iter().next()
    }
}

fn push_json_into(facts: &mut Facts, v: &Value) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    facts.push_text(k);
                    stack.push(v);
                }
            }
            Value::Array(items) => stack.extend(items.iter()),
            scalar => push_scalar(facts, scalar),
        }
    }
}

fn push_scalar(facts: &mut Facts, v: &Value) {
    match v {
        Value::String(s) => facts.push_text(s),
        Value::Number(n) => facts.push_text(&n.to_string()),
        Value::Bool(b) => facts.push_text(if *b { "true" } else { "false" }),
        Value::Null | Value::Array(_) | Value::Object(_) => {}
    }
}

/// An object of the record: scalars, nested objects, and arrays only along `path`.
fn push_record(facts: &mut Facts, record: &Value, path: &[String]) {
    match record {
        Value::Object(map) => {
            for (k, v) in map {
                facts.push_text(k);
                let on_path = path.first().is_some_and(|p| p == k);
                let rest = if on_path { &path[1..] } else { &[] };
                match v {
                    Value::Object(_) => push_record(facts, v, rest),
                    Value::Array(_) if on_path => push_record(facts, v, rest),
                    Value::Array(_) => {}
                    scalar => push_scalar(facts, scalar),
                }
            }
        }
        Value::Array(items) => {
            let Some(item) = path
                .first()
                .and_then(|p| array_index(p))
                .and_then(|i| items.get(i))
            else {
                return;
            };
            match item {
                Value::Object(_) | Value::Array(_) => push_record(facts, item, &path[1..]),
                scalar => push_scalar(facts, scalar),
            }
        }
        scalar => push_scalar(facts, scalar),
    }
}

/// The metric names and `label="value"` equality matchers of a PromQL query: every series
/// the server returns for it carries them.
fn promql_selectors(query: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = query.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'=' {
            let neg_or_re = (i > 0 && matches!(bytes[i - 1], b'!' | b'=' | b'<' | b'>'))
                || matches!(bytes.get(i + 1), Some(b'~') | Some(b'='));
            let quote = bytes.get(i + 1).copied();
            if !neg_or_re && matches!(quote, Some(b'"') | Some(b'\'')) {
                let start = i + 2;
                if let Some(len) = query
                    .get(start..)
                    .and_then(|r| r.find(char::from(quote.unwrap_or(b'"'))))
                {
                    if let Some(v) = query.get(start..start + len) {
                        out.push(v.to_string());
                    }
                    i = start + len + 1;
                    continue;
                }
            }
        }
        i += 1;
    }
    // Metric names: identifiers directly before `{`, `[` or at the end, that are not
    // functions (followed by `(`) or keywords.
    for word in query.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
        if word.contains('_') && word.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
            out.push(word.to_string());
        }
    }
    out
}

/// An RFC 6901 array index: decimal digits without a leading zero.
fn array_index(token: &str) -> Option<usize> {
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    if !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

/// The whole sample a Prometheus-shaped path points into: `/result/N/value/…` or
/// `/result/N/values/K/…` in an output that has `resultType` and a series with `metric`, or
/// `/result/…` of a scalar or string result.
fn prometheus_sample<'v>(output: &'v Value, tokens: &[String]) -> Option<&'v Value> {
    let result_type = output.get("resultType")?.as_str()?;
    if matches!(result_type, "scalar" | "string") {
        return (tokens.first().map(String::as_str) == Some("result"))
            .then(|| output.get("result"))
            .flatten()
            .filter(|v| v.is_array());
    }
    let [result, n, field, rest @ ..] = tokens else {
        return None;
    };
    if result != "result" {
        return None;
    }
    let series = output.get("result")?.get(array_index(n)?)?;
    series.get("metric")?.as_object()?;
    match (field.as_str(), rest) {
        ("value", _) => series.get("value").filter(|v| v.is_array()),
        ("values", [k, ..]) => series
            .get("values")?
            .get(array_index(k)?)
            .filter(|v| v.is_array()),
        _ => None,
    }
}

/// Whether `needle` (a name, lowercased) occurs in `hay` as a whole word: no letter or
/// digit right before or after it, so `hikaripool-1` is not in `hikaripool-12` and
/// `billing-service` not in `rebilling-service`.
fn occurs_word(hay: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return true;
    }
    let mut from = 0usize;
    while let Some(pos) = hay.get(from..).and_then(|h| h.find(needle)) {
        let start = from + pos;
        let end = start + needle.len();
        let before_ok = !hay[..start]
            .chars()
            .next_back()
            .is_some_and(char::is_alphanumeric);
        let after_ok = !hay[end..].chars().next().is_some_and(char::is_alphanumeric);
        if before_ok && after_ok {
            return true;
        }
        from = start + hay[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// Whether a verbatim line occurs in `hay`, with digit boundaries at its ends (a quoted
/// `0 connections` is not in `50 connections`).
fn occurs_bounded(hay: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return true;
    }
    let starts_digit = needle.starts_with(|c: char| c.is_ascii_digit());
    let ends_digit = needle.ends_with(|c: char| c.is_ascii_digit());
    let mut from = 0usize;
    while let Some(pos) = hay.get(from..).and_then(|h| h.find(needle)) {
        let start = from + pos;
        let end = start + needle.len();
        let before_ok = !starts_digit
            || !hay[..start]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_digit());
        let after_ok = !ends_digit
            || !hay[end..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit());
        if before_ok && after_ok {
            return true;
        }
        from = start + hay[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// The evidence context of verified evidence entries (invocation id, tool name, raw_path),
/// looked up among `invocations` of `run_id` only: used by the Composer check and the
/// Verifier free-text filter (allowed claims' evidence). An entry whose invocation is not
/// recorded exactly once for the run under that tool name adds nothing.
pub fn context_of_evidence(
    run_id: &str,
    evidence: &[VerifiedEvidence],
    invocations: &[ToolInvocation],
) -> EvidenceContext {
    let mut cx = EvidenceContext::new();
    for e in evidence {
        let mut found = invocations
            .iter()
            .filter(|i| i.run_id == run_id && i.invocation_id == e.source_invocation_id);
        let (Some(inv), None) = (found.next(), found.next()) else {
            continue;
        };
        if inv.tool_name != e.tool_name {
            continue;
        }
        cx.push_binding(&inv.output, &e.raw_path, &inv.arguments);
    }
    cx
}
