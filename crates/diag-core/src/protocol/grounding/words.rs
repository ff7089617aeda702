//! Tokens of a read text: the words of each segment, classified by kind, with their values
//! (openspec/specs/verified-evidence/spec.md, "Salient tokens").

use std::borrow::Cow;
use std::ops::Range;

use super::prose::is_hyphenated_prose;
use super::read::{Segment, SegmentKind};
use super::values::{
    self, day_number, meridiem, month_number, parse_date_word, parse_number, parse_offset,
    parse_time, parse_zone_word, to_24h, year_number, Date, DateRead, Precision, TimeOfDay, Zone,
};
use super::TokenKind;

/// What a token says, as a value.
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    Number(String),
    Time(TimeOfDay),
    Date(Date),
    /// `14.02`: the time 14:02 or the number 14.02, whichever the evidence shows.
    TimeOrNumber(TimeOfDay, String),
    /// An identifier or reference, lowercased.
    Name(String),
    /// A verbatim line (or a part of one around an elision), whitespace-normalised and
    /// lowercased.
    Verbatim(String),
    /// A quotation or code span of more than one word (`` `HTTP 502` ``,
    /// `"settlement-batch started"`): shown when the evidence holds
    /// it verbatim (whitespace-normalised, lowercased), or holds each of its words: the
    /// facts of its numbers, times, dates and names as values, every other word as a word
    /// (a capitalised acronym such as `HTTP` excepted).
    Span(String, Vec<Fact>),
    /// What no evidence can show: an ambiguous date, an invisible character.
    Unreadable,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub kind: TokenKind,
    /// The token as the reader sees it.
    pub text: String,
    pub fact: Fact,
    /// Inside a code span or quotation marks: a quotation of what was searched may be
    /// bound by a search's arguments.
    pub quoted: bool,
    /// The source line (1-based).
    pub line: u32,
    /// Numbers of one digit are read (evidence needs them) but not salient.
    pub salient: bool,
}

/// How a text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// An answer: citation markers (`[c1]`, `[c1, c2]`, `[c4–c6]`) of short ids are
    /// Markdown, not tokens.
    Answer,
    /// A claim or a Verifier item: brackets are text.
    Claim,
    /// Evidence and the question: every number, time and date is collected.
    Evidence,
}

/// A citation marker found in a flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// Ids named one by one.
    pub ids: Vec<String>,
    /// Ranges `c4–c6` (first, last).
    pub ranges: Vec<(String, String)>,
    /// Ids written as `c4-c6` that read as a range unless a claim has that id.
    pub hyphen_ranges: Vec<(String, String, String)>,
}

struct Word<'a> {
    /// The word as the reader sees it: a literal `*` inside it (`**db-**1`, emphasis that
    /// CommonMark does not open) is read through.
    text: Cow<'a, str>,
    range: Range<usize>,
    /// A `#` directly before it.
    hash: bool,
}

fn is_connector(c: char) -> bool {
    matches!(c, '_' | '-' | '.' | '/' | ':')
}

/// Splits a flow into words: letters, digits and the connectors `_ - . / :`, a `,` inside
/// a number before a group of three digits, a `+` between digits (an offset).
fn words(text: &str) -> Vec<Word<'_>> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let n = chars.len();
    let c_at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let is_word = |i: usize| -> bool {
        let Some(c) = c_at(i) else { return false };
        if c.is_alphanumeric() || is_connector(c) {
            return true;
        }
        if c == '*' {
            let inner = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || is_connector(c));
            let before = chars[..i].iter().rev().map(|&(_, c)| c).find(|&c| c != '*');
            let after = chars[i + 1..].iter().map(|&(_, c)| c).find(|&c| c != '*');
            return inner(before) && inner(after);
        }
        let digit = |j: Option<usize>| j.and_then(c_at).is_some_and(|c| c.is_ascii_digit());
        match c {
            ',' => {
                digit(i.checked_sub(1))
                    && (1..=3).all(|k| digit(Some(i + k)))
                    && !digit(Some(i + 4))
            }
            '+' => digit(i.checked_sub(1)) && digit(Some(i + 1)),
            _ => false,
        }
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < n {
        if !is_word(i) {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && is_word(i) {
            i += 1;
        }
        let b = |k: usize| chars.get(k).map_or(text.len(), |&(b, _)| b);
        let (from, to) = (b(start), b(i));
        let hash = start > 0
            && c_at(start - 1) == Some('#')
            && !(start > 1 && c_at(start - 2).is_some_and(|c| c.is_alphanumeric() || c == '_'));
        let raw = &text[from..to];
        out.push(Word {
            text: if raw.contains('*') {
                Cow::Owned(raw.replace('*', ""))
            } else {
                Cow::Borrowed(raw)
            },
            range: from..to,
            hash,
        });
    }
    out
}

fn trim_word(w: &str) -> (&str, usize) {
    let t = w.trim_start_matches(['-', '.', '_', ':', ',', '+']);
    let lead = w.len() - t.len();
    (t.trim_end_matches(['-', '.', '_', '/', ':', ',']), lead)
}

/// Ranges of a flow between double quotation marks (`"…"`, `“…”`).
fn quotation_ranges(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut open: Option<usize> = None;
    for (i, c) in text.char_indices() {
        match c {
            '"' => match open.take() {
                Some(s) => out.push(s..i),
                None => open = Some(i + 1),
            },
            '\u{201C}' => open = Some(i + c.len_utf8()),
            '\u{201D}' => {
                if let Some(s) = open.take() {
                    out.push(s..i);
                }
            }
            '\n' => open = None,
            _ => {}
        }
    }
    out
}

/// A claim id as a citation marker may hold it (`^[A-Za-z][A-Za-z0-9_-]{0,31}$`).
pub fn is_claim_id(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && s.len() <= 32
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A short id (`c1`, `c12`, `claim-3`, `f_2`): the ids a citation marker may hide from the
/// token check. Any other id in brackets is read as text too.
pub fn is_short_id(s: &str) -> bool {
    let letters = s.bytes().take_while(u8::is_ascii_alphabetic).count();
    let rest = &s[letters..];
    let rest = rest.strip_prefix(['-', '_']).unwrap_or(rest);
    (1..=10).contains(&letters)
        && (1..=6).contains(&rest.len())
        && rest.bytes().all(|b| b.is_ascii_digit())
}

/// `c4-c6` read as a range: the same letters, numbers ascending.
fn hyphen_range(id: &str) -> Option<(String, String)> {
    let (a, b) = id.split_once('-')?;
    let split = |s: &str| {
        let l = s.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (p, n) = s.split_at(l);
        (!p.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .then(|| (p.to_string(), n.parse::<u64>().ok()))
    };
    let ((pa, na), (pb, nb)) = (split(a)?, split(b)?);
    (pa == pb && na? < nb?).then(|| (a.to_string(), b.to_string()))
}

/// The citation marker opening at byte `open` of `text`: its end and contents.
fn marker_at(text: &str, open: usize) -> Option<(usize, Marker)> {
    let bytes = text.as_bytes();
    let mut j = open + 1;
    let mut marker = Marker {
        ids: Vec::new(),
        ranges: Vec::new(),
        hyphen_ranges: Vec::new(),
    };
    let mut pending_range_start: Option<String> = None;
    loop {
        while bytes.get(j) == Some(&b' ') {
            j += 1;
        }
        let start = j;
        while bytes
            .get(j)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
        {
            j += 1;
        }
        let id = text.get(start..j)?;
        if !is_claim_id(id) {
            return None;
        }
        match pending_range_start.take() {
            Some(first) => marker.ranges.push((first, id.to_string())),
            None => match hyphen_range(id) {
                Some((a, b)) => marker.hyphen_ranges.push((id.to_string(), a, b)),
                None => marker.ids.push(id.to_string()),
            },
        }
        while bytes.get(j) == Some(&b' ') {
            j += 1;
        }
        let rest = text.get(j..)?;
        if rest.starts_with(']') {
            return Some((j + 1, marker));
        }
        if rest.starts_with([',', ';']) {
            j += 1;
            continue;
        }
        // An en or em dash (or a spaced hyphen) between two ids: a range.
        let dash = ['\u{2013}', '\u{2014}', '-']
            .into_iter()
            .find(|d| rest.starts_with(*d))?;
        let last = match (marker.ids.pop(), marker.hyphen_ranges.is_empty()) {
            (Some(last), _) => last,
            (None, _) => return None,
        };
        pending_range_start = Some(last);
        j += dash.len_utf8();
    }
}

/// Every citation marker of a flow.
pub fn markers(text: &str) -> Vec<(Range<usize>, Marker)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(pos) = text.get(i..).and_then(|t| t.find('[')) {
        let open = i + pos;
        match marker_at(text, open) {
            Some((end, m)) => {
                out.push((open..end, m));
                i = end;
            }
            None => i = open + 1,
        }
    }
    out
}

fn marker_hides_tokens(m: &Marker) -> bool {
    m.ids.iter().all(|id| is_short_id(id))
        && m.ranges
            .iter()
            .all(|(a, b)| is_short_id(a) && is_short_id(b))
        && m.hyphen_ranges
            .iter()
            .all(|(_, a, b)| is_short_id(a) && is_short_id(b))
}

/// The tokens of one segment.
pub fn segment_tokens(seg: &Segment, mode: Mode, out: &mut Vec<Token>) {
    match seg.kind {
        SegmentKind::CodeLine => verbatim_tokens(seg, out),
        SegmentKind::Address => {
            let text = seg.text.trim();
            if !text.is_empty() {
                out.push(Token {
                    kind: TokenKind::Identifier,
                    text: text.to_string(),
                    fact: Fact::Name(text.to_lowercase()),
                    quoted: false,
                    line: seg.line_at(0),
                    salient: true,
                });
            }
        }
        SegmentKind::Flow => flow_tokens(seg, mode, out),
    }
}

/// One quoted token per part of a code line split at an elision (`…`, `...`): each part is
/// a quotation the evidence must show.
fn verbatim_tokens(seg: &Segment, out: &mut Vec<Token>) {
    let line = seg.line_at(0);
    let text = seg.text.replace('\u{2026}', "...");
    for part in text.split("...") {
        let norm = super::normalize_ws(part);
        // A line of punctuation only shows nothing.
        if !norm.chars().any(char::is_alphanumeric) {
            continue;
        }
        out.push(Token {
            kind: TokenKind::Quoted,
            text: norm.clone(),
            fact: Fact::Verbatim(norm.to_lowercase()),
            quoted: true,
            line,
            salient: true,
        });
    }
}

fn flow_tokens(seg: &Segment, mode: Mode, out: &mut Vec<Token>) {
    let text = seg.text.as_str();
    let hidden: Vec<Range<usize>> = if mode == Mode::Answer {
        markers(text)
            .into_iter()
            .filter(|(_, m)| marker_hides_tokens(m))
            .map(|(r, _)| r)
            .collect()
    } else {
        Vec::new()
    };
    let quotes = quotation_ranges(text);
    let inside = |r: &Range<usize>, set: &[Range<usize>]| {
        set.iter().any(|q| r.start >= q.start && r.end <= q.end)
    };
    // A quotation or a code span of more than one word is one quoted token
    // ([`Fact::Span`]): the evidence shows it verbatim, or shows each of its words. A
    // quotation comes first, so a code span inside it is part of it.
    let spans: Vec<Range<usize>> = quotes
        .iter()
        .chain(seg.code.iter())
        .filter(|c| {
            mode != Mode::Evidence && text.get((*c).clone()).is_some_and(|s| words(s).len() > 1)
        })
        .cloned()
        .collect();
    let mut spans_done = vec![false; spans.len()];
    let all: Vec<Word<'_>> = words(text)
        .into_iter()
        .filter(|w| !inside(&w.range, &hidden))
        .collect();
    let mut i = 0;
    while i < all.len() {
        let w = &all[i];
        let line = seg.line_at(w.range.start);
        if let Some(k) = spans
            .iter()
            .position(|c| w.range.start >= c.start && w.range.start < c.end)
        {
            if !spans_done[k] {
                spans_done[k] = true;
                let span = text.get(spans[k].clone()).unwrap_or("");
                push_span(span, mode, seg.line_at(spans[k].start), out);
            }
            i += 1;
            continue;
        }
        let quoted = inside(&w.range, &seg.code) || inside(&w.range, &quotes);
        let mut emit = |kind: TokenKind, shown: &str, fact: Fact, salient: bool| {
            out.push(Token {
                kind,
                text: shown.to_string(),
                fact,
                quoted,
                line,
                salient,
            });
        };
        let gap_after = |k: usize| -> &str {
            let end = all[k].range.end;
            let next = all.get(k + 1).map_or(text.len(), |n| n.range.start);
            text.get(end..next).unwrap_or("")
        };
        let (word, lead) = trim_word(&w.text);
        if word.is_empty() {
            i += 1;
            continue;
        }
        // `#4411` is the number 4411; `#INC-12` a reference.
        if w.hash && lead == 0 {
            match parse_number(word) {
                Some((n, d)) if word.bytes().all(|b| b.is_ascii_digit()) => emit(
                    TokenKind::Number,
                    &format!("#{word}"),
                    Fact::Number(n),
                    // Written digits count: `#07` is salient, `#2` prose.
                    d >= 2,
                ),
                _ => emit(
                    TokenKind::Reference,
                    &format!("#{word}"),
                    Fact::Name(word.to_lowercase()),
                    true,
                ),
            }
            i += 1;
            continue;
        }
        // Dates written with a month name: `30 November 2026`, `Nov 30, 2026`, `30th Nov`.
        if let Some((date, used)) = month_date(&all, i, &gap_after) {
            let shown = all[i..i + used]
                .iter()
                .map(|w| trim_word(&w.text).0)
                .collect::<Vec<_>>()
                .join(" ");
            emit(TokenKind::Date, &shown, Fact::Date(date), true);
            i += used;
            continue;
        }
        // A time (or an hour) with `am`/`pm` and a zone after it.
        if let Some((time, used)) = clock_time(&all, i, &gap_after) {
            let shown = all[i..i + used]
                .iter()
                .map(|w| trim_word(&w.text).0)
                .collect::<Vec<_>>()
                .join(" ");
            emit(TokenKind::Time, &shown, time, true);
            i += used;
            continue;
        }
        let mut local = Vec::new();
        classify(word, mode, &mut local);
        // A single back-quoted word is a name: code formatting says it is literal.
        let whole_code_span = seg
            .code
            .iter()
            .any(|c| text.get(c.clone()).is_some_and(|s| s.trim() == word));
        if local.is_empty() && whole_code_span && word.chars().any(char::is_alphabetic) {
            local.push((
                TokenKind::Identifier,
                word.to_string(),
                Fact::Name(word.to_lowercase()),
                true,
            ));
        }
        for (kind, shown, fact, salient) in local {
            emit(kind, &shown, fact, salient);
        }
        i += 1;
    }
}

type Classified = (TokenKind, String, Fact, bool);

fn number_token(shown: &str, n: String, digits: usize) -> Classified {
    (
        TokenKind::Number,
        shown.to_string(),
        Fact::Number(n),
        digits >= 2,
    )
}

/// A quotation or code span of more than one word: one quoted token whose fact is the span
/// verbatim and the facts of its words (every word counts: a quoted plain word is literal).
fn push_span(span: &str, mode: Mode, line: u32, out: &mut Vec<Token>) {
    let norm = super::normalize_ws(span.trim());
    let mut parts = Vec::new();
    for w in words(&norm) {
        let (word, _) = trim_word(&w.text);
        if !word.chars().any(char::is_alphanumeric) {
            continue;
        }
        let mut local = Vec::new();
        classify(word, mode, &mut local);
        if local.iter().any(|(_, _, _, salient)| *salient) {
            parts.extend(local.into_iter().filter(|c| c.3).map(|c| c.2));
        } else if !is_acronym(word) {
            parts.push(Fact::Name(word.to_lowercase()));
        }
    }
    out.push(Token {
        kind: TokenKind::Quoted,
        text: norm.clone(),
        fact: Fact::Span(norm.to_lowercase(), parts),
        quoted: true,
        line,
        salient: true,
    });
}

/// A protocol or method written in capitals (`HTTP`, `GET`, `TLS`, `SQL`): in a code span
/// it names how something was asked, not a fact of the system.
fn is_acronym(word: &str) -> bool {
    (2..=5).contains(&word.len()) && word.bytes().all(|b| b.is_ascii_uppercase())
}

/// Classifies one trimmed word (openspec/specs/verified-evidence/spec.md).
fn classify(word: &str, mode: Mode, out: &mut Vec<Classified>) {
    // Date-time: `2026-11-30T14:02:03.363Z`, `30/Nov/2026:14:02:03`.
    if let Some((d, t)) = word.split_once(['T', 't']) {
        if let (Some(date), Some(time)) = (parse_date_word(d), parse_time(t)) {
            push_date(d, date, out);
            out.push((TokenKind::Time, t.to_string(), Fact::Time(time), true));
            return;
        }
    }
    if let Some((d, t)) = word.split_once(':') {
        if let (Some(date), Some(time)) = (parse_date_word(d), parse_time(t)) {
            push_date(d, date, out);
            out.push((TokenKind::Time, t.to_string(), Fact::Time(time), true));
            return;
        }
    }
    if let Some(date) = parse_date_word(word) {
        push_date(word, date, out);
        return;
    }
    if let Some(time) = parse_time(word) {
        out.push((TokenKind::Time, word.to_string(), Fact::Time(time), true));
        return;
    }
    // `14.02`: a time or a number.
    if let Some((h, m)) = word.split_once('.') {
        if (1..=2).contains(&h.len())
            && m.len() == 2
            && h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit())
        {
            if let Some(time) = parse_time(&format!("{h}:{m}")) {
                let n = values::canonical_number(h, m);
                out.push((
                    TokenKind::Time,
                    word.to_string(),
                    Fact::TimeOrNumber(time, n),
                    true,
                ));
                return;
            }
        }
    }
    if let Some((n, d)) = parse_number(word) {
        out.push(number_token(word, n, d));
        return;
    }
    if word.contains('-') {
        let parts: Vec<&str> = word.split('-').collect();
        // A range of numbers or times: `14:00-14:10`, `2-3`.
        if parts.len() == 2
            && parts
                .iter()
                .all(|p| parse_time(p).is_some() || parse_number(p).is_some())
        {
            for p in parts {
                classify(p, mode, out);
            }
            return;
        }
        // A number and a unit: `5-minute`, `30-second`.
        if let [num, unit] = parts.as_slice() {
            if unit.chars().all(char::is_alphabetic) && !unit.is_empty() {
                if let Some((n, d)) = parse_number(num) {
                    out.push(number_token(num, n, d));
                    return;
                }
            }
        }
    }
    if word.contains('/') && !word.starts_with('/') {
        let parts: Vec<&str> = word.split('/').collect();
        if word == "24/7" {
            return;
        }
        // `50/50`, `502/504`: numbers.
        if parts.iter().all(|p| parse_number(p).is_some()) {
            for p in parts {
                classify(p, mode, out);
            }
            return;
        }
        // `payment-service/HikariPool-1`: names each.
        if parts.len() >= 2 && parts.iter().all(|p| is_name_shaped(p)) {
            for p in parts {
                classify(p, mode, out);
            }
            return;
        }
    }
    if is_abbreviation(word) || is_slash_pair(word) {
        return;
    }
    if is_name_shaped(word) {
        out.push((
            TokenKind::Identifier,
            word.to_string(),
            Fact::Name(word.to_lowercase()),
            true,
        ));
        if mode == Mode::Evidence {
            // The number a name ends with (`p99`, `HikariPool-12`) is a number a reader
            // may repeat ("the 99th percentile").
            if let Some((n, d)) = trailing_number(word) {
                out.push(number_token(word, n, d));
            }
        }
    }
}

fn push_date(shown: &str, date: DateRead, out: &mut Vec<Classified>) {
    let fact = match date {
        DateRead::One(d) => Fact::Date(d),
        DateRead::Ambiguous => Fact::Unreadable,
    };
    out.push((TokenKind::Date, shown.to_string(), fact, true));
}

fn trailing_number(word: &str) -> Option<(String, usize)> {
    let digits = word.bytes().rev().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits == word.len() {
        return None;
    }
    let head = &word[..word.len() - digits];
    let before = head.chars().last()?;
    if !(before.is_alphabetic() || before == '-' || before == '_') {
        return None;
    }
    parse_number(&word[word.len() - digits..])
}

/// A word a reader takes for a name: a digit, an inner connector (unless hyphenated
/// English, see [`is_hyphenated_prose`]), letters of two scripts (`pаyment`, with a Cyrillic
/// `а`), or digits of another script.
fn is_name_shaped(word: &str) -> bool {
    let has_digit = word.chars().any(|c| c.is_numeric());
    let inner_connector = word
        .char_indices()
        .any(|(i, c)| i > 0 && is_connector(c) && i + c.len_utf8() < word.len());
    if has_digit {
        return true;
    }
    if mixed_script(word) {
        return true;
    }
    if !inner_connector {
        return false;
    }
    let only_hyphens = !word.contains(['_', '.', '/', ':']);
    !(only_hyphens && is_hyphenated_prose(word))
}

fn mixed_script(word: &str) -> bool {
    let latin = word
        .chars()
        .any(|c| c.is_ascii_alphabetic() || ('\u{00C0}'..='\u{024F}').contains(&c));
    let cyrillic = word.chars().any(|c| ('\u{0400}'..='\u{052F}').contains(&c));
    let greek = word.chars().any(|c| ('\u{0370}'..='\u{03FF}').contains(&c));
    u8::from(latin) + u8::from(cyrillic) + u8::from(greek) > 1
}

fn is_abbreviation(s: &str) -> bool {
    s.contains('.')
        && s.split('.')
            .all(|p| p.chars().count() == 1 && p.chars().all(char::is_alphabetic))
}

/// Plain words joined by one `/` (`and/or`, `N/A`): English, not a path.
fn is_slash_pair(s: &str) -> bool {
    !s.starts_with('/')
        && s.matches('/').count() == 1
        && s.chars().all(|c| c.is_alphabetic() || c == '/')
}

/// `30 November 2026`, `30th Nov`, `November 30, 2026`, `Nov. 30`: the date and how many
/// words it took. A month name counts only capitalised (`may` is a verb).
fn month_date<'a>(
    all: &[Word<'a>],
    i: usize,
    gap_after: &dyn Fn(usize) -> &'a str,
) -> Option<(Date, usize)> {
    let word = |k: usize| all.get(k).map(|w| trim_word(&w.text).0);
    let month = |k: usize| {
        word(k)
            .filter(|w| w.chars().next().is_some_and(char::is_uppercase))
            .and_then(month_number)
    };
    let year_after = |k: usize| -> Option<i32> {
        let gap = gap_after(k - 1);
        (gap.trim() == "," || gap.trim().is_empty())
            .then(|| word(k).and_then(year_number))
            .flatten()
    };
    // Day first.
    if let (Some(day), Some(m)) = (word(i).and_then(day_number), month(i + 1)) {
        if gap_after(i).trim().is_empty() {
            let year = year_after(i + 2);
            let date = values::month_day(year, m, day)?;
            return Some((date, if year.is_some() { 3 } else { 2 }));
        }
    }
    // Month first.
    if let (Some(m), Some(day)) = (month(i), word(i + 1).and_then(day_number)) {
        let gap = gap_after(i).trim();
        if gap.is_empty() || gap == "." {
            let year = year_after(i + 2);
            let date = values::month_day(year, m, day)?;
            return Some((date, if year.is_some() { 3 } else { 2 }));
        }
    }
    None
}

/// A time with what follows it: `2:02 PM`, `2 pm`, `2pm`, `14:02 UTC`, `2:02 PM UTC`,
/// `14:02:03 +01:00`, `09:44 EST`. Returns the fact and the words used; `None` for a time
/// with nothing after it (the plain classifier reads it).
fn clock_time<'a>(
    all: &[Word<'a>],
    i: usize,
    gap_after: &dyn Fn(usize) -> &'a str,
) -> Option<(Fact, usize)> {
    let word = |k: usize| all.get(k).map(|w| trim_word(&w.text).0);
    let first = word(i)?;
    let spaced = |k: usize| {
        let g = gap_after(k);
        !g.is_empty() && g.chars().all(|c| c == ' ')
    };
    // The time itself, with an attached meridiem (`2pm`, `2:02pm`).
    let lower = first.to_ascii_lowercase();
    let (body, attached_pm) = match lower
        .strip_suffix("pm")
        .or_else(|| lower.strip_suffix("am"))
    {
        Some(b) if !b.is_empty() && b.bytes().last().is_some_and(|c| c.is_ascii_digit()) => {
            (b.to_string(), Some(lower.ends_with("pm")))
        }
        _ => (first.to_string(), None),
    };
    let hour_only = |s: &str| -> Option<TimeOfDay> {
        let h: u32 = (s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()?;
        Some(TimeOfDay {
            secs: h * 3600,
            precision: Precision::Hour,
            zone: Zone::Unstated,
        })
    };
    let mut used = 1;
    let mut time = match attached_pm {
        Some(pm) => to_24h(parse_time(&body).or_else(|| hour_only(&body))?, pm)?,
        None => {
            let parsed = parse_time(&body);
            match word(i + 1).filter(|_| spaced(i)).and_then(meridiem) {
                Some(pm) => {
                    used = 2;
                    to_24h(parsed.or_else(|| hour_only(&body))?, pm)?
                }
                None => parsed?,
            }
        }
    };
    let had_meridiem = attached_pm.is_some() || used == 2;
    // A zone after it, as a word (`UTC`, `EST`, `UTC+1`) or an offset (`+01:00`).
    if time.zone == Zone::Unstated && spaced(i + used - 1) {
        if let Some(next) = all.get(i + used) {
            let raw = next.text.trim_end_matches(['.', ',', ':', ';']);
            let gap = gap_after(i + used - 1);
            let zone = if gap.ends_with('+') {
                parse_offset(&format!("+{raw}")).map(Zone::Offset)
            } else if raw.starts_with('-') || raw.starts_with('+') {
                parse_offset(raw).map(Zone::Offset)
            } else {
                parse_zone_word(raw)
            };
            if let Some(zone) = zone {
                time.zone = zone;
                used += 1;
            }
        }
    }
    if used == 1 && !had_meridiem {
        // A plain time: the classifier reads it (ranges, date-times).
        return None;
    }
    Some((Fact::Time(time), used))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_with_ranges() {
        let m = markers("see [c1] and [c4–c6] and [c2, c3] and [c7-c9] [x y]");
        assert_eq!(m.len(), 4);
        assert_eq!(m[1].1.ranges, vec![("c4".to_string(), "c6".to_string())]);
        assert_eq!(
            m[3].1.hyphen_ranges,
            vec![("c7-c9".to_string(), "c7".to_string(), "c9".to_string())]
        );
        assert!(is_short_id("c12") && is_short_id("claim-3") && !is_short_id("settlement-batch-7"));
    }
}
