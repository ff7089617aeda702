//! Content grounding (openspec/specs/verified-evidence/spec.md): the *salient tokens* of a text (numbers, times, dates,
//! identifiers, `#` references, back-quoted spans) and the *evidence context* they must occur
//! in. The Gatekeeper checks every claim's text against the context of its bindings; the
//! Composer check and the Verifier free-text filter check answers against the context of the
//! allowed claims' evidence.
//!
//! Everything here is pure and deterministic: plain data in, plain data out, no I/O, no
//! panics. The rules, in the order the scanner applies them:
//!
//! - **Back-quoted spans** (`` `x` ``, ``` ``x`` ```, CommonMark code spans) are one
//!   [`TokenKind::Quoted`] token each, their inner text whitespace-normalised; an elided span
//!   (`` `UPDATE ledger … 'nightly'` ``, with `…` or `...`) is one token per part. Text inside
//!   a span yields no other token. An unmatched back-quote run is Markdown syntax.
//! - **Citation markers** (`[c1]`, `[c1, c2]`: brackets around ids in the claim-id format)
//!   and **ordered-list markers** (`10.` at the start of a line) are Markdown, not tokens.
//! - **`#` references**: `#` not preceded by a letter, digit or `_`, followed by a word
//!   (`#4411`, `#INC-12`); a `#` followed by space or `#` is a heading.
//! - Every other token is a *word*: a run of letters, digits and the connectors `_ - . / :`,
//!   with leading `-._:` and trailing `-._/:` stripped (sentence punctuation, emphasis). A
//!   word is
//!   - a date-time `2026-11-30T14:02:03.363Z`: a [`TokenKind::Date`] and a
//!     [`TokenKind::Time`] token;
//!   - a date `2026-11-30` or a time `14:02`, `14:02:03`, `14:02:03.363` (an optional `Z`);
//!   - a range of numbers, times or dates joined by `-` (`14:00-14:10`, `2-3`): its parts;
//!   - a number `502`, `0.95`, with an optional unit or plural suffix of letters (`502s`,
//!     `5000ms`, `12GB`; `48%` is the number `48` before a `%`): a [`TokenKind::Number`] whose
//!     text is the number, salient only with two or more digits;
//!   - an abbreviation (single letters joined by dots: `e.g.`, `i.e.`, `a.m.`) or two plain
//!     words joined by one `/` (`and/or`, `N/A`): not salient;
//!   - a word holding a digit or an inner connector (`payment-service`, `HikariPool-1`,
//!     `/v1/charges`, `v2.3.1`, `pg_stat_activity`): a [`TokenKind::Identifier`];
//!   - anything else (plain words, single digits): not salient.
//!
//! Matching ([`EvidenceContext::contains`]): case-insensitive substring of one evidence
//! string (never across two strings), both sides whitespace-normalised, with *digit
//! boundaries*: a token starting (ending) with a digit matches only where the evidence has no
//! digit before (after) it, so `50` does not match `1500` and `HikariPool-1` does not match
//! `HikariPool-12`. A number also does not match inside a decimal (`50` is not in `1.50` or
//! `50.5`), and a time does not match the tail of a longer time (`02:03` is not in
//! `14:02:03`), while a time matches the head of a longer one (`14:02:03` is in
//! `2026-11-30T14:02:03.363Z`).

use std::collections::{BTreeSet, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::gatekeeper::normalize_whitespace;
use super::invocation::ToolInvocation;
use super::json_pointer;
use super::verified::VerifiedEvidence;

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
        }
    }
}

impl std::fmt::Display for TokenKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SalientToken {
    pub kind: TokenKind,
    /// The token as it is checked: `502` for `502s`, `48` for `48%`, the inner text of a
    /// back-quoted span, `#4411`, `payment-service`, `14:02:03`, `2026-11-30`.
    pub text: String,
}

impl SalientToken {
    fn new(kind: TokenKind, text: impl Into<String>) -> Self {
        SalientToken {
            kind,
            text: text.into(),
        }
    }
}

/// (tokens checked, tokens unbound) of one text against one context.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCheck {
    pub checked: u32,
    pub unbound: Vec<SalientToken>,
}

/// The salient tokens of a text, in order of appearance (duplicates, compared
/// case-insensitively, kept out).
pub fn salient_tokens(text: &str) -> Vec<SalientToken> {
    let mut raw = Vec::new();
    scan(text, &mut raw);
    let mut seen = HashSet::new();
    raw.into_iter()
        .filter(|t| seen.insert((t.kind, t.text.to_lowercase())))
        .collect()
}

/// Connectors that may join the parts of a word.
fn is_connector(c: char) -> bool {
    matches!(c, '_' | '-' | '.' | '/' | ':')
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || is_connector(c)
}

/// The claim-id format (`^[A-Za-z][A-Za-z0-9_-]{0,31}$`), shared with the Executor parser.
pub fn is_claim_id(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && s.len() <= 32
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn scan(text: &str, out: &mut Vec<SalientToken>) {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let n = chars.len();
    let at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let byte = |i: usize| chars.get(i).map_or(text.len(), |&(b, _)| b);
    let mut i = 0usize;
    let mut line_start = true;
    while i < n {
        let c = at(i).unwrap_or(' ');
        if c == '\n' {
            line_start = true;
            i += 1;
            continue;
        }
        if line_start && c.is_whitespace() {
            i += 1;
            continue;
        }
        let was_line_start = line_start;
        line_start = false;

        // Back-quoted span: a run of k back-quotes closed by the next run of exactly k.
        if c == '`' {
            let k = run_len(&chars, i, '`');
            match find_closing_run(&chars, i + k, k) {
                Some(close) => {
                    let inner = text.get(byte(i + k)..byte(close)).unwrap_or("");
                    quoted_tokens(inner, out);
                    i = close + k;
                }
                // An unmatched run is literal Markdown, never a token.
                None => i += k,
            }
            continue;
        }

        // Citation marker: `[` ids `]`.
        if c == '[' {
            if let Some(end) = citation_marker_end(&chars, i) {
                i = end;
                continue;
            }
            i += 1;
            continue;
        }

        // `#` reference.
        if c == '#' {
            let prev_ok = i == 0 || !at(i - 1).is_some_and(|p| p.is_alphanumeric() || p == '_');
            if prev_ok && at(i + 1).is_some_and(char::is_alphanumeric) {
                let end = word_end(&chars, i + 1);
                let word = trim_word(text.get(byte(i + 1)..byte(end)).unwrap_or(""));
                if !word.is_empty() {
                    out.push(SalientToken::new(TokenKind::Reference, format!("#{word}")));
                }
                i = end;
                continue;
            }
            i += 1;
            continue;
        }

        if is_word_char(c) {
            let end = word_end(&chars, i);
            let word = text.get(byte(i)..byte(end)).unwrap_or("");
            // Ordered-list marker: `10.` or `10)` at the start of a line, then a space.
            let is_list_marker = was_line_start && ordered_list_marker(word, at(end), at(end + 1));
            if !is_list_marker {
                classify_word(trim_word(word), out);
            }
            i = end;
            continue;
        }
        i += 1;
    }
}

fn ordered_list_marker(word: &str, next: Option<char>, after_next: Option<char>) -> bool {
    let digits = |d: &str| !d.is_empty() && d.len() <= 9 && all_digits(d);
    let ends = |c: Option<char>| c.is_none_or(char::is_whitespace);
    match word.strip_suffix('.') {
        Some(d) => digits(d) && ends(next),
        None => digits(word) && next == Some(')') && ends(after_next),
    }
}

fn run_len(chars: &[(usize, char)], from: usize, c: char) -> usize {
    chars[from..].iter().take_while(|&&(_, x)| x == c).count()
}

fn find_closing_run(chars: &[(usize, char)], from: usize, k: usize) -> Option<usize> {
    let mut j = from;
    while j < chars.len() {
        if chars[j].1 == '`' {
            let len = run_len(chars, j, '`');
            if len == k {
                return Some(j);
            }
            j += len;
        } else {
            j += 1;
        }
    }
    None
}

/// The index after the closing `]` if `[` at `i` opens a citation marker.
fn citation_marker_end(chars: &[(usize, char)], i: usize) -> Option<usize> {
    let mut j = i + 1;
    let mut ids = 0usize;
    loop {
        while chars.get(j).is_some_and(|&(_, c)| c == ' ') {
            j += 1;
        }
        let start = j;
        while chars
            .get(j)
            .is_some_and(|&(_, c)| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            j += 1;
        }
        let id: String = chars[start..j].iter().map(|&(_, c)| c).collect();
        if !is_claim_id(&id) {
            return None;
        }
        ids += 1;
        while chars.get(j).is_some_and(|&(_, c)| c == ' ') {
            j += 1;
        }
        match chars.get(j).map(|&(_, c)| c) {
            Some(']') if ids > 0 => return Some(j + 1),
            Some(',') | Some(';') => j += 1,
            _ => return None,
        }
    }
}

fn word_end(chars: &[(usize, char)], from: usize) -> usize {
    from + chars[from..]
        .iter()
        .take_while(|&&(_, c)| is_word_char(c))
        .count()
}

fn trim_word(word: &str) -> &str {
    word.trim_start_matches(['-', '.', '_', ':'])
        .trim_end_matches(['-', '.', '_', '/', ':'])
}

fn quoted_tokens(inner: &str, out: &mut Vec<SalientToken>) {
    let inner = inner.replace("...", "\u{2026}");
    for part in inner.split('\u{2026}') {
        let part = normalize_whitespace(part);
        if !part.is_empty() {
            out.push(SalientToken::new(TokenKind::Quoted, part));
        }
    }
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `2026-11-30`.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && all_digits(&s[0..4])
        && all_digits(&s[5..7])
        && all_digits(&s[8..10])
}

/// `14:02`, `14:02:03`, `14:02:03.363`, each with an optional `Z`; returns the time without
/// the `Z`.
fn as_time(s: &str) -> Option<&str> {
    let t = s
        .strip_suffix('Z')
        .or_else(|| s.strip_suffix('z'))
        .unwrap_or(s);
    let (hms, frac) = match t.split_once('.') {
        Some((hms, frac)) => (hms, Some(frac)),
        None => (t, None),
    };
    let parts: Vec<&str> = hms.split(':').collect();
    let ok = match parts.as_slice() {
        [h, m] => (1..=2).contains(&h.len()) && all_digits(h) && m.len() == 2 && all_digits(m),
        [h, m, sec] => {
            (1..=2).contains(&h.len())
                && all_digits(h)
                && m.len() == 2
                && all_digits(m)
                && sec.len() == 2
                && all_digits(sec)
        }
        _ => false,
    };
    let frac_ok = match frac {
        None => true,
        Some(f) => parts.len() == 3 && all_digits(f),
    };
    (ok && frac_ok).then_some(t)
}

/// A number with an optional unit suffix of letters: returns the number.
fn as_number(s: &str) -> Option<&str> {
    let digits_end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.'))
        .map_or(s.len(), |(i, _)| i);
    let (num, suffix) = s.split_at(digits_end);
    let num_ok = match num.split_once('.') {
        None => all_digits(num),
        Some((a, b)) => all_digits(a) && all_digits(b),
    };
    (num_ok && suffix.chars().all(|c| c.is_alphabetic())).then_some(num)
}

fn is_abbreviation(s: &str) -> bool {
    s.contains('.')
        && s.split('.')
            .all(|p| p.chars().count() == 1 && p.chars().all(char::is_alphabetic))
}

/// Plain words joined by one `/` (`and/or`, `N/A`, `read/write`): English, not a path. A path
/// starts with `/` or has two or more (`/api/checkout`, `fixtures/demo/logs`); a digit makes
/// any word salient.
fn is_slash_pair(s: &str) -> bool {
    !s.starts_with('/')
        && s.matches('/').count() == 1
        && s.chars().all(|c| c.is_alphabetic() || c == '/')
}

fn classify_word(word: &str, out: &mut Vec<SalientToken>) {
    if word.is_empty() {
        return;
    }
    // Date-time: `2026-11-30T14:02:03.363Z`.
    if let Some((date, time)) = word.split_once(['T', 't']) {
        if is_date(date) {
            if let Some(time) = as_time(time) {
                out.push(SalientToken::new(TokenKind::Date, date));
                out.push(SalientToken::new(TokenKind::Time, time));
                return;
            }
        }
    }
    if is_date(word) {
        out.push(SalientToken::new(TokenKind::Date, word));
        return;
    }
    if let Some(time) = as_time(word) {
        out.push(SalientToken::new(TokenKind::Time, time));
        return;
    }
    if let Some(num) = as_number(word) {
        push_number(num, out);
        return;
    }
    // A range: numbers, times or dates joined by `-`.
    if word.contains('-') && !word.starts_with('-') {
        let parts: Vec<&str> = word.split('-').collect();
        let part_ok = |p: &&str| as_time(p).is_some() || as_number(p).is_some();
        if parts.len() == 2 && parts.iter().all(part_ok) {
            for p in parts {
                classify_word(p, out);
            }
            return;
        }
        // Two dates joined by `-` (`2026-11-29-2026-11-30` is too odd to split; leave it).
    }
    if is_abbreviation(word) || is_slash_pair(word) {
        return;
    }
    let has_digit = word.bytes().any(|b| b.is_ascii_digit());
    let inner_connector = word
        .char_indices()
        .any(|(i, c)| i > 0 && is_connector(c) && i + c.len_utf8() < word.len());
    if has_digit || inner_connector {
        out.push(SalientToken::new(TokenKind::Identifier, word));
    }
}

fn push_number(num: &str, out: &mut Vec<SalientToken>) {
    let digits = num.bytes().filter(u8::is_ascii_digit).count();
    if digits >= 2 {
        out.push(SalientToken::new(TokenKind::Number, num));
    }
}

/// A set of strings a text may draw its salient tokens from (normalised once on insert).
#[derive(Debug, Clone, Default)]
pub struct EvidenceContext {
    /// Whitespace-normalised, lowercased; one entry per distinct source string, so a token
    /// never matches across two strings.
    texts: BTreeSet<String>,
}

impl EvidenceContext {
    pub fn new() -> Self {
        EvidenceContext::default()
    }

    /// Number of distinct strings in the context.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    pub fn push_text(&mut self, s: &str) {
        let n = normalize_whitespace(s).to_lowercase();
        if !n.is_empty() {
            self.texts.insert(n);
        }
    }

    /// Adds every scalar leaf (strings, numbers, bools as text) of a JSON value, and the
    /// member names of its objects.
    pub fn push_json(&mut self, v: &Value) {
        let mut stack = vec![v];
        while let Some(v) = stack.pop() {
            match v {
                Value::Object(map) => {
                    for (k, v) in map {
                        self.push_text(k);
                        stack.push(v);
                    }
                }
                Value::Array(items) => stack.extend(items.iter()),
                scalar => self.push_scalar(scalar),
            }
        }
    }

    fn push_scalar(&mut self, v: &Value) {
        match v {
            Value::String(s) => self.push_text(s),
            Value::Number(n) => self.push_text(&n.to_string()),
            Value::Bool(b) => self.push_text(if *b { "true" } else { "false" }),
            Value::Null | Value::Array(_) | Value::Object(_) => {}
        }
    }

    /// Adds the evidence context of one binding: the bound string, its enclosing record in
    /// `output` (per tool output shape, see the spec), and the invocation's `arguments`.
    ///
    /// The enclosing record is the deepest object on the path that encloses the bound value:
    /// its scalar members, its nested objects (wholly, without their arrays), and of its
    /// arrays only the elements along the bound path. So a `search_logs` binding at
    /// `/matches/3/line` adds match 3 (`file`, `line_no`, `timestamp`, `line`), a
    /// `search_runbooks` binding at `/hits/0/text` adds hit 0, and a `current_time` binding
    /// adds `now`. A Prometheus series (`/result/N/value/…` or `/result/N/values/K/…` in an
    /// output with `resultType`) adds its labels and the whole bound sample tuple (time,
    /// value, time string), never another sample. A path that does not resolve adds nothing
    /// from the output.
    pub fn push_binding(&mut self, output: &Value, raw_path: &str, arguments: &Value) {
        self.push_json(arguments);
        let Ok(tokens) = json_pointer::tokens(raw_path) else {
            return;
        };
        // The values along the path, root first.
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
        // The bound value itself: a scalar is part of its record (below), so it is added
        // here only when it has none or is itself a container.
        let depth = (0..chain.len().saturating_sub(1))
            .rev()
            .find(|&d| chain[d].is_object());
        if depth.is_none() || cur.is_object() || cur.is_array() {
            self.push_json(cur);
        }
        // The deepest object strictly above the bound value.
        let Some(depth) = depth else {
            return;
        };
        let rest = tokens.get(depth..).unwrap_or(&[]);
        self.push_record(chain[depth], rest);
        if let Some(sample) = prometheus_sample(output, &tokens) {
            self.push_json(sample);
        }
    }

    /// An object of the record: scalars, nested objects, and arrays only along `path`.
    fn push_record(&mut self, record: &Value, path: &[String]) {
        match record {
            Value::Object(map) => {
                for (k, v) in map {
                    self.push_text(k);
                    let on_path = path.first().is_some_and(|p| p == k);
                    let rest = if on_path { &path[1..] } else { &[] };
                    match v {
                        Value::Object(_) => self.push_record(v, rest),
                        Value::Array(_) if on_path => self.push_record(v, rest),
                        Value::Array(_) => {}
                        scalar => self.push_scalar(scalar),
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
                    Value::Object(_) | Value::Array(_) => self.push_record(item, &path[1..]),
                    scalar => self.push_scalar(scalar),
                }
            }
            scalar => self.push_scalar(scalar),
        }
    }

    /// Numbers on digit boundaries, everything else case-insensitively on normalised
    /// whitespace.
    pub fn contains(&self, token: &SalientToken) -> bool {
        let needle = normalize_whitespace(&token.text).to_lowercase();
        if needle.is_empty() {
            return true;
        }
        self.texts
            .iter()
            .any(|hay| occurs_bounded(hay, &needle, token.kind))
    }

    /// The first salient token of `text` not in this context.
    pub fn first_unbound(&self, text: &str) -> Option<SalientToken> {
        salient_tokens(text).into_iter().find(|t| !self.contains(t))
    }

    /// (tokens checked, tokens unbound) for `text`.
    pub fn check(&self, text: &str) -> TokenCheck {
        let tokens = salient_tokens(text);
        let checked = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        let unbound = tokens.into_iter().filter(|t| !self.contains(t)).collect();
        TokenCheck { checked, unbound }
    }
}

/// An RFC 6901 array index: decimal digits without a leading zero.
fn array_index(token: &str) -> Option<usize> {
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    if !all_digits(token) {
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
        // The result is itself one sample.
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

/// Whether `needle` occurs in `hay` with the digit boundaries of its kind.
fn occurs_bounded(hay: &str, needle: &str, kind: TokenKind) -> bool {
    let starts_digit = needle.starts_with(|c: char| c.is_ascii_digit());
    let ends_digit = needle.ends_with(|c: char| c.is_ascii_digit());
    let bytes = hay.as_bytes();
    let mut from = 0usize;
    while let Some(pos) = hay.get(from..).and_then(|h| h.find(needle)) {
        let start = from + pos;
        let end = start + needle.len();
        let before_ok = !starts_digit || !bound_before(bytes, start, kind);
        let after_ok = !ends_digit || !bound_after(bytes, end, kind);
        if before_ok && after_ok {
            return true;
        }
        // Next candidate start: one char further.
        let step = hay
            .get(start..)
            .and_then(|s| s.chars().next())
            .map_or(1, char::len_utf8);
        from = start + step;
    }
    false
}

fn digit_at(bytes: &[u8], i: Option<usize>) -> bool {
    i.and_then(|i| bytes.get(i)).is_some_and(u8::is_ascii_digit)
}

/// Whether the digits at `start` continue a longer value to their left: a digit, the
/// fraction of a number (`1.50`), the tail of a time (`14:02:03`).
fn bound_before(bytes: &[u8], start: usize, kind: TokenKind) -> bool {
    let prev = start.checked_sub(1);
    if digit_at(bytes, prev) {
        return true;
    }
    let sep = prev.and_then(|i| bytes.get(i)).copied();
    let joined = match kind {
        TokenKind::Number => sep == Some(b'.'),
        TokenKind::Time => sep == Some(b':'),
        _ => false,
    };
    joined && digit_at(bytes, start.checked_sub(2))
}

/// Whether the digits ending at `end` continue to their right: a digit, or for a number a
/// decimal fraction (`50.5`).
fn bound_after(bytes: &[u8], end: usize, kind: TokenKind) -> bool {
    digit_at(bytes, Some(end))
        || (kind == TokenKind::Number
            && bytes.get(end) == Some(&b'.')
            && digit_at(bytes, end.checked_add(1)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(text: &str) -> Vec<(TokenKind, String)> {
        salient_tokens(text)
            .into_iter()
            .map(|t| (t.kind, t.text))
            .collect()
    }

    fn tok(kind: TokenKind, text: &str) -> (TokenKind, String) {
        (kind, text.to_string())
    }

    use TokenKind::*;

    #[test]
    fn numbers_with_two_or_more_digits_and_their_unit_suffixes() {
        assert_eq!(
            texts("the 502s since 14:00, 5000ms, 48% and 312s; 0.95 of 5 s"),
            vec![
                tok(Number, "502"),
                tok(Time, "14:00"),
                tok(Number, "5000"),
                tok(Number, "48"),
                tok(Number, "312"),
                tok(Number, "0.95"),
            ]
        );
        assert_eq!(texts("5 s, 1 of 3, 2xx"), vec![]);
        assert_eq!(texts("50 of 50 connections"), vec![tok(Number, "50")]);
    }

    #[test]
    fn times_dates_and_date_times() {
        assert_eq!(
            texts("at 14:02:03 on 2026-11-30, stamped 2026-11-30T14:02:03.363Z, 9:05."),
            vec![
                tok(Time, "14:02:03"),
                tok(Date, "2026-11-30"),
                tok(Time, "14:02:03.363"),
                tok(Time, "9:05"),
            ]
        );
        assert_eq!(
            texts("from 14:00-14:10 in 2-3 minutes"),
            vec![tok(Time, "14:00"), tok(Time, "14:10")]
        );
    }

    #[test]
    fn identifiers_references_and_quoted_spans() {
        assert_eq!(
            texts(
                "payment-service's HikariPool-1 on /v1/charges (v2.3.1, pg_stat_activity), \
                 ticket #4411, `settlement-batch started` and C# code"
            ),
            vec![
                tok(Identifier, "payment-service"),
                tok(Identifier, "HikariPool-1"),
                tok(Identifier, "/v1/charges"),
                tok(Identifier, "v2.3.1"),
                tok(Identifier, "pg_stat_activity"),
                tok(Reference, "#4411"),
                tok(Quoted, "settlement-batch started"),
            ]
        );
        assert_eq!(
            texts("`UPDATE ledger … 'nightly-settlement'` and ``a ` b``"),
            vec![
                tok(Quoted, "UPDATE ledger"),
                tok(Quoted, "'nightly-settlement'"),
                tok(Quoted, "a ` b"),
            ]
        );
    }

    #[test]
    fn markdown_citations_and_abbreviations_are_not_tokens() {
        assert_eq!(
            texts(
                "## Timeline\n\n1. e.g. the pool, i.e. this [c1] [c2, c3]\n10. **bold** \
                 _it_ | --- |\n- a.m. only"
            ),
            vec![]
        );
        // A bracket that is not a list of claim ids keeps its content.
        assert_eq!(
            texts("[HikariPool-1 main]"),
            vec![tok(Identifier, "HikariPool-1")]
        );
        // Slash pairs of plain words are English; paths are identifiers.
        assert_eq!(
            texts("and/or N/A read/write, /api/checkout and fixtures/demo/logs"),
            vec![
                tok(Identifier, "/api/checkout"),
                tok(Identifier, "fixtures/demo/logs")
            ]
        );
        // A number that is not a list marker is a number.
        assert_eq!(texts("we saw 10. Then"), vec![tok(Number, "10")]);
    }

    #[test]
    fn duplicates_are_kept_out_in_order() {
        assert_eq!(
            texts("502 then 502s then Payment-Service and payment-service"),
            vec![tok(Number, "502"), tok(Identifier, "Payment-Service")]
        );
    }

    fn cx(strings: &[&str]) -> EvidenceContext {
        let mut cx = EvidenceContext::new();
        for s in strings {
            cx.push_text(s);
        }
        cx
    }

    #[test]
    fn natural_cases_pass() {
        let line = "2026-11-30T14:02:03.363Z ERROR checkout-service POST /api/checkout 502 in \
                    5002ms: upstream returned 502 from payment-service";
        let c = cx(&[line, "2026-11-30T14:00:00Z"]);
        assert_eq!(c.first_unbound("the 502s since 14:00"), None);
        assert_eq!(c.first_unbound("at 14:02:03"), None);
        assert_eq!(c.first_unbound("at 14:02 on 2026-11-30"), None);
        assert_eq!(c.first_unbound("5002 ms to answer"), None);
        assert_eq!(
            c.first_unbound("CHECKOUT-SERVICE called Payment-Service"),
            None
        );
        let pool = cx(&["(total=50, active=50, idle=0, waiting=154)"]);
        assert_eq!(
            pool.first_unbound("50 of 50 connections, 154 waiting"),
            None
        );
    }

    #[test]
    fn failing_cases_name_the_token() {
        let c = cx(&[
            "took 1500ms",
            "in 5002ms",
            "HikariPool-12",
            "at 14:02:03.363Z",
            "1.50",
        ]);
        assert_eq!(
            c.first_unbound("50 connections"),
            Some(SalientToken::new(Number, "50"))
        );
        assert_eq!(c.first_unbound("5002"), None);
        assert_eq!(
            c.first_unbound("500"),
            Some(SalientToken::new(Number, "500"))
        );
        assert_eq!(
            c.first_unbound("HikariPool-1"),
            Some(SalientToken::new(Identifier, "HikariPool-1"))
        );
        assert_eq!(
            c.first_unbound("at 02:03"),
            Some(SalientToken::new(Time, "02:03"))
        );
        assert_eq!(
            c.first_unbound("ticket #4411"),
            Some(SalientToken::new(Reference, "#4411"))
        );
        let check = c.check("5002 and 1500 but 50 and 99");
        assert_eq!(check.checked, 4);
        assert_eq!(
            check.unbound,
            vec![
                SalientToken::new(Number, "50"),
                SalientToken::new(Number, "99")
            ]
        );
    }

    #[test]
    fn tokens_never_match_across_two_strings() {
        let c = cx(&["payment", "-service"]);
        assert!(!c.contains(&SalientToken::new(Identifier, "payment-service")));
    }

    #[test]
    fn log_match_context_is_the_match_and_the_arguments() {
        let output = json!({"matches": [
            {"file": "a.log", "line_no": 43, "timestamp": "2026-11-30T14:02:03.363Z",
             "line": "upstream returned 502"},
            {"file": "b.log", "line_no": 44, "timestamp": null, "line": "HikariPool-9 full"}],
            "truncated": true});
        let mut c = EvidenceContext::new();
        c.push_binding(
            &output,
            "/matches/0/line",
            &json!({"query": "502", "since": "14:00"}),
        );
        assert_eq!(
            c.first_unbound("502 at 14:02:03 in a.log line 43 since 14:00"),
            None
        );
        assert_eq!(
            c.first_unbound("HikariPool-9"),
            Some(SalientToken::new(Identifier, "HikariPool-9"))
        );
    }

    #[test]
    fn metric_context_is_labels_and_the_bound_sample_only() {
        let output = json!({"resultType": "matrix", "result": [
            {"metric": {"__name__": "pool_active", "service": "payment-service"},
             "values": [[1796047140, "11", "2026-11-30T13:59:00Z"],
                        [1796047200, "31", "2026-11-30T14:00:00Z"]]}]});
        let mut c = EvidenceContext::new();
        c.push_binding(
            &output,
            "/result/0/values/0/1",
            &json!({"query": "pool_active"}),
        );
        assert_eq!(
            c.first_unbound("pool_active of payment-service was 11 at 13:59"),
            None
        );
        assert_eq!(c.first_unbound("31"), Some(SalientToken::new(Number, "31")));
        assert_eq!(
            c.first_unbound("14:00"),
            Some(SalientToken::new(Time, "14:00"))
        );
    }

    #[test]
    fn other_shapes_take_the_deepest_object_and_arrays_only_along_the_path() {
        let output = json!({"content": [
            {"type": "text", "text": "disk 91% full", "meta": {"host": "db-1"},
             "rows": ["row-7"]},
            {"type": "text", "text": "node-2 ok"}]});
        let mut c = EvidenceContext::new();
        c.push_binding(&output, "/content/0/text", &json!({}));
        assert_eq!(c.first_unbound("disk 91 on db-1"), None);
        assert!(c.first_unbound("row-7").is_some());
        assert!(c.first_unbound("node-2").is_some());
        let mut now = EvidenceContext::new();
        now.push_binding(
            &json!({"now": "2026-11-30T14:10:00.000Z"}),
            "/now",
            &json!({}),
        );
        assert_eq!(now.first_unbound("it is 14:10 on 2026-11-30"), None);
    }

    #[test]
    fn unresolvable_paths_add_only_the_arguments() {
        let mut c = EvidenceContext::new();
        c.push_binding(&json!({"a": "x-1"}), "/b", &json!({"q": "y-2"}));
        assert_eq!(c.first_unbound("y-2"), None);
        assert!(c.first_unbound("x-1").is_some());
    }
}
