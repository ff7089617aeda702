//! Tokens of a read text: the words of each segment, classified by kind, with their values
//! (openspec/specs/verified-evidence/spec.md, "Prose SHALL be a closed set and every other
//! word a fact"). The reading denies by default: a word is prose only when it is letters of
//! one script that no reader could take for a value; every other word is a fact, read as a
//! value where it has one and otherwise an identifier that must be observed verbatim.

use std::borrow::Cow;
use std::ops::Range;

use super::prose::is_hyphenated_prose;
use super::read::{Segment, SegmentKind};
use super::values::{
    self, any_month_number, cardinal_word, day_number, fraction_word, is_digit_joiner, meridiem,
    month_number, multiplier_word, ordinal_word, parse_date_word, parse_number, parse_offset,
    parse_time, parse_zone_word, read_number, relative_day_word, roman_numeral, scale_word, to_24h,
    vague_quantity_word, weekday_number, year_number, Date, DateRead, Precision, TimeOfDay, Zone,
};
use super::TokenKind;
use std::sync::OnceLock;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
use unicode_security::{skeleton, MixedScript};

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
    /// A day of the week (0 = Monday): shown by an evidence date that falls on it.
    Weekday(u8),
    /// A status class (`5xx`): shown by a three-digit number of the evidence with that first
    /// digit.
    StatusClass(char),
    /// Any of several readings (`a quarter past two`: 02:15 or 14:15).
    AnyOf(Vec<Fact>),
    /// What no evidence can show: an ambiguous date, an invisible character, a time in a
    /// zone diag does not know.
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

/// Han, Hiragana, Katakana, Hangul, Bopomofo and their marks.
fn is_cjk(c: char) -> bool {
    matches!(
        u32::from(c),
        0x1100..=0x11FF
            | 0x2E80..=0x2FDF
            | 0x3005..=0x3007
            | 0x3021..=0x3029
            | 0x3031..=0x3035
            | 0x3038..=0x303C
            | 0x3040..=0x31FF
            | 0x3400..=0x4DBF
            | 0x4E00..=0x9FFF
            | 0xA960..=0xA97F
            | 0xAC00..=0xD7FF
            | 0xF900..=0xFAFF
            | 0xFF66..=0xFF9F
            | 0x20000..=0x3FFFF
    )
}

fn is_mark(c: char) -> bool {
    matches!(
        c.general_category(),
        GeneralCategory::NonspacingMark
            | GeneralCategory::SpacingMark
            | GeneralCategory::EnclosingMark
    )
}

/// Which spaces of `chars` join two digit groups of one number (`50 154`, `1 000 000`, and
/// U+202F, U+00A0 or U+2009 between digits, which NFKC reads as a space): a group of one to
/// three digits that starts a number, then groups of exactly three digits.
fn joining_spaces(chars: &[(usize, char)]) -> Vec<bool> {
    let c_at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let digit = |i: usize| c_at(i).is_some_and(|c| c.is_ascii_digit());
    let mut join = vec![false; chars.len()];
    for i in 0..chars.len() {
        if c_at(i) != Some(' ') || i == 0 || !digit(i - 1) {
            continue;
        }
        if !(1..=3).all(|k| digit(i + k)) || digit(i + 4) {
            continue;
        }
        let run = (0..i).rev().take_while(|&k| digit(k)).count();
        // The group before the space starts the number (after a plain space, an opening mark,
        // a currency or comparison sign, or nothing; not after `#` or `:`) or is a whole group
        // of three after a joining space.
        let starts = match i.checked_sub(run + 1) {
            None => true,
            Some(b) if join[b] => run == 3,
            Some(b) => {
                let c = c_at(b).unwrap_or(' ');
                c.is_whitespace()
                    || matches!(
                        c,
                        '(' | '['
                            | '{'
                            | '"'
                            | '\''
                            | '\u{201C}'
                            | '\u{2018}'
                            | '\u{AB}'
                            | '$'
                            | '\u{20AC}'
                            | '\u{A3}'
                            | '\u{A5}'
                            | '~'
                            | '\u{2248}'
                            | '<'
                            | '>'
                            | '='
                            | '\u{B1}'
                            | '*'
                    )
            }
        };
        join[i] = (1..=3).contains(&run) && starts;
    }
    join
}

/// Splits a flow into words: letters, digits, combining marks and the connectors
/// `_ - . / :`; between two digits also the group and decimal joiners `,` `'` `\u{2019}` and a
/// space between digit groups ([`joining_spaces`]); a `+` before a digit (an offset, `UTC+8`);
/// `x` or `\u{d7}` after a digit.
fn words(text: &str) -> Vec<Word<'_>> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let n = chars.len();
    let c_at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let spaces = joining_spaces(&chars);
    let is_word = |i: usize| -> bool {
        let Some(c) = c_at(i) else { return false };
        if c.is_alphanumeric() || is_connector(c) || is_mark(c) {
            return true;
        }
        if c == '*' {
            let inner = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || is_connector(c));
            let before = chars[..i].iter().rev().map(|&(_, c)| c).find(|&c| c != '*');
            let after = chars[i + 1..].iter().map(|&(_, c)| c).find(|&c| c != '*');
            return inner(before) && inner(after);
        }
        let digit = |j: Option<usize>| j.and_then(c_at).is_some_and(|c| c.is_ascii_digit());
        let alnum = |j: Option<usize>| j.and_then(c_at).is_some_and(char::is_alphanumeric);
        match c {
            // A dot or slash of another form glued between two letters or digits joins them
            // into one name (`billing·service`), never into two words of prose.
            '\u{B7}' | '\u{2022}' | '\u{2027}' | '\u{2219}' | '\u{22C5}' | '\u{2215}' => {
                alnum(i.checked_sub(1)) && alnum(Some(i + 1))
            }
            ' ' => spaces[i],
            ',' | '\'' | '\u{2019}' | '\u{2044}' => digit(i.checked_sub(1)) && digit(Some(i + 1)),
            '+' => alnum(i.checked_sub(1)) && digit(Some(i + 1)),
            '\u{d7}' => digit(i.checked_sub(1)),
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
            // Chinese, Japanese and Korean write no space between words: a change between
            // their scripts and any other ends a word (`14:02に`, `checkout-serviceが`).
            if i < n && c_at(i).map(is_cjk) != c_at(i - 1).map(is_cjk) {
                break;
            }
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

/// The closing marks of a quotation opened by `open`, or `None` when `open` opens none.
fn closers(open: char) -> Option<&'static [char]> {
    Some(match open {
        '"' => &['"', '\u{201D}'],
        '\'' => &['\'', '\u{2019}'],
        '\u{201C}' => &['\u{201D}', '\u{201C}', '"'],
        '\u{2018}' => &['\u{2019}', '\u{2018}', '\''],
        '\u{201E}' => &['\u{201C}', '\u{201D}', '"'],
        '\u{201A}' => &['\u{2018}', '\u{2019}', '\''],
        '\u{201D}' => &['\u{201D}'],
        '\u{2019}' => &['\u{2019}'],
        '\u{AB}' => &['\u{BB}'],
        '\u{BB}' => &['\u{AB}', '\u{BB}'],
        '\u{2039}' => &['\u{203A}'],
        '\u{203A}' => &['\u{2039}', '\u{203A}'],
        '\u{300C}' => &['\u{300D}'],
        '\u{300E}' => &['\u{300F}'],
        '\u{301D}' => &['\u{301E}', '\u{301F}'],
        '\u{FE41}' => &['\u{FE42}'],
        '\u{FE43}' => &['\u{FE44}'],
        _ => return None,
    })
}

/// Marks that are also apostrophes or closing marks: they open a quotation only at the start
/// of a word, and an unclosed one quotes nothing.
fn is_ambiguous_mark(c: char) -> bool {
    matches!(
        c,
        '\'' | '\u{2019}' | '\u{201D}' | '\u{BB}' | '\u{203A}' | '"'
    )
}

/// Ranges of a flow inside quotation marks: every pair Unicode knows (`"…"`, `“…”`, `‘…’`,
/// `«…»`, `»…«`, `‹…›`, `„…“`, `‚…‘`, `「…」`, `『…』`, `〝…〞`) and straight `'…'` opening
/// and closing at word boundaries, across line breaks. An unambiguous opening mark left
/// unclosed quotes the rest of the flow.
fn quotation_ranges(text: &str) -> Vec<Range<usize>> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let wordy = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || is_mark(c));
    let mut out = Vec::new();
    let mut open: Option<(char, usize)> = None;
    for (k, &(i, c)) in chars.iter().enumerate() {
        let before = k.checked_sub(1).and_then(at);
        let after = at(k + 1);
        match open {
            Some((o, start)) => {
                let Some(close) = closers(o) else { continue };
                if !close.contains(&c) {
                    continue;
                }
                // An apostrophe inside a word (`payment-service’s`, `rock ’n’ roll`) does
                // not close.
                if matches!(c, '\'' | '\u{2019}') && wordy(after) {
                    continue;
                }
                out.push(start..i);
                open = None;
            }
            None => {
                if closers(c).is_none() {
                    continue;
                }
                let at_word_start = !wordy(before) && after.is_some_and(|a| !a.is_whitespace());
                if is_ambiguous_mark(c) && !at_word_start {
                    continue;
                }
                open = Some((c, i + c.len_utf8()));
            }
        }
    }
    if let Some((o, start)) = open {
        if !is_ambiguous_mark(o) && !matches!(o, '\u{2018}' | '\u{201A}') {
            out.push(start..text.len());
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

/// `text` without the byte ranges of `hidden` (citation markers) that fall inside `range`.
fn without_hidden(text: &str, range: Range<usize>, hidden: &[Range<usize>]) -> String {
    let mut out = String::new();
    let mut at = range.start;
    let mut cuts: Vec<&Range<usize>> = hidden
        .iter()
        .filter(|h| h.start >= range.start && h.end <= range.end)
        .collect();
    cuts.sort_by_key(|h| h.start);
    for h in cuts {
        out.push_str(text.get(at..h.start).unwrap_or(""));
        at = h.end;
    }
    out.push_str(text.get(at..range.end).unwrap_or(""));
    out
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
    // A blockquote is a quotation, every line of it: the flow is one quoted token, its
    // citation markers aside.
    if seg.quote && mode != Mode::Evidence {
        let quoted = without_hidden(text, 0..text.len(), &hidden);
        if quoted.chars().any(char::is_alphanumeric) {
            push_span(&quoted, mode, seg.line_at(0), out);
        }
        return;
    }
    let inside = |r: &Range<usize>, set: &[Range<usize>]| {
        set.iter().any(|q| r.start >= q.start && r.end <= q.end)
    };
    // Quotation marks inside a code span are code, part of the span.
    let quotes: Vec<Range<usize>> = quotation_ranges(text)
        .into_iter()
        .filter(|q| {
            !seg.code
                .iter()
                .any(|c| q.start >= c.start && q.end <= c.end)
        })
        .collect();
    // A quotation (of any length) or a code span of more than one word is one quoted token
    // ([`Fact::Span`]): the evidence shows it verbatim, or shows each of its words. A
    // quotation comes first, so a code span inside it is part of it.
    let spans: Vec<Range<usize>> = quotes
        .iter()
        .filter(|q| text.get((*q).clone()).is_some_and(|s| !words(s).is_empty()))
        .chain(
            seg.code
                .iter()
                .filter(|c| text.get((*c).clone()).is_some_and(|s| words(s).len() > 1)),
        )
        .filter(|_| mode != Mode::Evidence)
        .cloned()
        .collect();
    let mut spans_done = vec![false; spans.len()];
    let all: Vec<Word<'_>> = words(text)
        .into_iter()
        .filter(|w| !inside(&w.range, &hidden))
        .collect();
    let gap_after = |k: usize| -> &str {
        let end = all[k].range.end;
        let next = all.get(k + 1).map_or(text.len(), |n| n.range.start);
        text.get(end..next).unwrap_or("")
    };
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
                let span = without_hidden(text, spans[k].clone(), &hidden);
                push_span(&span, mode, seg.line_at(spans[k].start), out);
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
        let (word, lead) = trim_word(&w.text);
        if word.is_empty() {
            i += 1;
            continue;
        }
        let shown_of = |used: usize| {
            all[i..i + used]
                .iter()
                .map(|w| trim_word(&w.text).0)
                .collect::<Vec<_>>()
                .join(" ")
        };
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
        // Dates written with a month name: `30 November 2026`, `Nov 30, 2026`, `30th Nov`,
        // `the 30th of November`, `November 2026`, `30 de noviembre de 2026`, `November`.
        if let Some((date, used)) = month_date(&all, i, &gap_after) {
            emit(TokenKind::Date, &shown_of(used), Fact::Date(date), true);
            i += used;
            continue;
        }
        // A zone before a time: `UTC 14:02`, `PST 14:02`.
        if let Some(fact) = zone_then_time(&all, i, &gap_after) {
            emit(TokenKind::Time, &shown_of(2), fact, true);
            i += 2;
            continue;
        }
        // A time (or an hour) with `am`/`pm` and a zone after it.
        if let Some((time, used)) = clock_time(&all, i, &gap_after) {
            emit(TokenKind::Time, &shown_of(used), time, true);
            i += used;
            continue;
        }
        // Value words: numbers, times and days in words.
        if let Some(((kind, fact, salient), used)) = value_phrase(&all, i, &gap_after) {
            emit(kind, &shown_of(used), fact, salient);
            i += used;
            continue;
        }
        // Numerals inside Chinese or Japanese text (`八十`).
        if word.chars().all(is_cjk) {
            for (shown, value) in cjk_numbers(word) {
                let salient = value >= 10;
                emit(
                    TokenKind::Number,
                    &shown,
                    Fact::Number(value.to_string()),
                    salient,
                );
            }
            i += 1;
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

/// A quotation, a blockquote or a code span of more than one word: one quoted token whose
/// fact is the span verbatim and the facts of its words (every word counts: a quoted plain
/// word is literal).
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

/// `5xx`, `4XX`: an HTTP status class.
fn status_class(word: &str) -> Option<char> {
    let mut chars = word.chars();
    let d = chars.next().filter(|c| ('1'..='5').contains(c))?;
    let rest: String = chars.collect();
    rest.eq_ignore_ascii_case("xx").then_some(d)
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
    if let Some(n) = read_number(word) {
        let salient = n.digits >= 2 || !n.plain;
        out.push((
            TokenKind::Number,
            word.to_string(),
            Fact::Number(n.fact_value()),
            salient,
        ));
        return;
    }
    if let Some(d) = status_class(word) {
        out.push((
            TokenKind::Number,
            word.to_string(),
            Fact::StatusClass(d),
            true,
        ));
        return;
    }
    if word.contains('-') {
        let parts: Vec<&str> = word.split('-').collect();
        // A range of numbers or times: `14:00-14:10`, `2-3`.
        if parts.len() == 2
            && parts
                .iter()
                .all(|p| parse_time(p).is_some() || read_number(p).is_some())
        {
            for p in parts {
                classify(p, mode, out);
            }
            return;
        }
        // A number and a unit: `5-minute`, `30-second`.
        if let [num, unit] = parts.as_slice() {
            if unit.chars().all(char::is_alphabetic) && !unit.is_empty() {
                if let Some(n) = read_number(num) {
                    let salient = n.digits >= 2 || !n.plain;
                    out.push((
                        TokenKind::Number,
                        num.to_string(),
                        Fact::Number(n.fact_value()),
                        salient,
                    ));
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
        if parts.iter().all(|p| read_number(p).is_some()) {
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
            // Numbers joined in a way the reader would not read as one (`500,502,504`):
            // the evidence shows each.
            if word.contains(|c: char| is_digit_joiner(c) && c != '.' && c != '_') {
                for part in word.split(|c: char| is_digit_joiner(c) && c != '.' && c != '_') {
                    if !part.is_empty() && part != word {
                        classify(part, mode, out);
                    }
                }
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

/// The characters the skeleton (UTS #39) of a digit is made of: a word made only of them
/// (`IOO`, `lO`) reads as a number.
fn digit_skeleton_chars() -> &'static [char] {
    static CHARS: OnceLock<Vec<char>> = OnceLock::new();
    CHARS.get_or_init(|| {
        let mut v: Vec<char> = ('0'..='9')
            .flat_map(|d| skeleton(&d.to_string()).collect::<Vec<char>>())
            .filter(|c| !c.is_ascii_digit())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    })
}

/// Whether a word of letters is not closed prose: a word of one script reads as prose only
/// when it cannot be taken for something else (openspec/specs/verified-evidence/spec.md,
/// "Prose is closed"). Mixed scripts (`pаyment`, with a Cyrillic `а`), a word of another
/// script that looks like Latin letters (its UTS #39 skeleton is ASCII), or a word of two or
/// more letters that look like digits (`IOO`, `lO`) are facts.
fn is_confusable(word: &str) -> bool {
    let letters: String = word.chars().filter(|c| !is_connector(*c)).collect();
    if !letters.as_str().is_single_script() {
        return true;
    }
    let skel: String = skeleton(&letters).collect();
    let latin = |c: char| {
        c.is_ascii()
            || is_mark(c)
            || matches!(u32::from(c), 0xC0..=0x24F | 0x1E00..=0x1EFF | 0x2C60..=0x2C7F | 0xA720..=0xA7FF)
    };
    if !letters.chars().all(latin)
        && !skel.is_empty()
        && skel.chars().all(|c| c.is_ascii_alphabetic())
    {
        return true;
    }
    // Contractions (`we'll` leaves `ll`) are prose.
    let digitlike = digit_skeleton_chars();
    letters.chars().count() >= 2
        && letters.chars().any(|c| c != 'l')
        && !skel.is_empty()
        && skel.chars().all(|c| digitlike.contains(&c))
}

/// A word a reader takes for a name: a digit of any script or any other character that is
/// not a letter, a mark or a connector, an inner connector (unless hyphenated English, see
/// [`is_hyphenated_prose`]), or letters that are not closed prose ([`is_confusable`]).
fn is_name_shaped(word: &str) -> bool {
    if word
        .chars()
        .any(|c| c.is_numeric() || !(c.is_alphabetic() || is_mark(c) || is_connector(c)))
    {
        return true;
    }
    if is_confusable(word) {
        return true;
    }
    // An inner capital after a small letter (`LedgerDB`, `gRPC`): how names are written.
    let chars: Vec<char> = word.chars().collect();
    if chars
        .windows(2)
        .any(|p| p[0].is_lowercase() && p[1].is_uppercase())
    {
        return true;
    }
    let inner_connector = word
        .char_indices()
        .any(|(i, c)| i > 0 && is_connector(c) && i + c.len_utf8() < word.len());
    if !inner_connector {
        return false;
    }
    let only_hyphens = !word.contains(['_', '.', '/', ':']);
    !(only_hyphens && is_hyphenated_prose(word))
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
        && s.replace('/', "").as_str().is_single_script()
}

/// Whether words `k` and `k + 1` are separated by spaces only (or, with `comma`, also a
/// comma).
fn spaced_gap(gap: &str, comma: bool) -> bool {
    let g = gap.trim();
    !gap.is_empty() && (g.is_empty() || (comma && g == ","))
}

/// A month name read as a month: English (a full name capitalised or in lowercase, except
/// `may`, `march` and `august` in lowercase and `May` alone; an abbreviation capitalised),
/// or another language's name ([`values::any_month_number`]) when `beside` a day or a year.
fn month_word(word: &str, beside: bool) -> Option<u32> {
    let capitalised = word.chars().next().is_some_and(char::is_uppercase);
    if let Some(m) = month_number(word) {
        let lower = word.to_lowercase();
        let full =
            lower.trim_end_matches('.').chars().count() > 4 || lower == "june" || lower == "july";
        if beside {
            return Some(m);
        }
        if capitalised && lower != "may" {
            return Some(m);
        }
        if full && !matches!(lower.as_str(), "may" | "march" | "august") {
            return Some(m);
        }
        return None;
    }
    let m = any_month_number(word)?;
    (beside || !matches!(word.to_lowercase().as_str(), "mars" | "mai" | "mei")).then_some(m)
}

/// `30 November 2026`, `30th Nov`, `the 30th of November`, `30 de noviembre de 2026`,
/// `November 30, 2026`, `Nov. 30`, `November 2026`, `noviembre de 2026`, `November`: the
/// date and how many words it took.
fn month_date<'a>(
    all: &[Word<'a>],
    i: usize,
    gap_after: &dyn Fn(usize) -> &'a str,
) -> Option<(Date, usize)> {
    let word = |k: usize| all.get(k).map(|w| trim_word(&w.text).0);
    let is_of = |k: usize| {
        word(k).is_some_and(|w| matches!(w.to_lowercase().as_str(), "of" | "de" | "del"))
    };
    // A year after word `k - 1`: `, 2026`, ` 2026`, ` de 2026`. Returns the year and the
    // words it took.
    let year_after = |k: usize| -> Option<(i32, usize)> {
        if k == 0 || k > all.len() {
            return None;
        }
        if is_of(k) && spaced_gap(gap_after(k - 1), false) && spaced_gap(gap_after(k), false) {
            return word(k + 1).and_then(year_number).map(|y| (y, 2));
        }
        spaced_gap(gap_after(k - 1), true)
            .then(|| word(k).and_then(year_number))
            .flatten()
            .map(|y| (y, 1))
    };
    // Day first: `30 November`, `30th of November`, `30 de noviembre`.
    if let Some(day) = word(i).and_then(day_number) {
        let (m_at, step) = if is_of(i + 1) && spaced_gap(gap_after(i), false) {
            (i + 2, 2)
        } else {
            (i + 1, 1)
        };
        if spaced_gap(gap_after(m_at - 1), false) || (step == 1 && gap_after(i).trim() == ".") {
            if let Some(m) = word(m_at).and_then(|w| month_word(w, true)) {
                let (year, used) = year_after(m_at + 1).map_or((None, 0), |(y, u)| (Some(y), u));
                let date = values::month_day(year, m, day)?;
                return Some((date, step + 1 + used));
            }
        }
    }
    let m = word(i).and_then(|w| month_word(w, true))?;
    // Month first: `November 30, 2026`, `Nov. 30`.
    if let Some(day) = word(i + 1).and_then(day_number) {
        let gap = gap_after(i).trim();
        if (gap.is_empty() || gap == ".") && !gap_after(i).is_empty() {
            let (year, used) = year_after(i + 2).map_or((None, 0), |(y, u)| (Some(y), u));
            let date = values::month_day(year, m, day)?;
            return Some((date, 2 + used));
        }
    }
    // A month of a year: `November 2026`, `noviembre de 2026`.
    if let Some((year, used)) = year_after(i + 1) {
        return Some((Date::month_of(Some(year), m)?, 1 + used));
    }
    // A month alone.
    let m = word(i).and_then(|w| month_word(w, false))?;
    Some((Date::month_of(None, m)?, 1))
}

/// Words after a time that are not zones, though shaped like one.
const NOT_ZONES: &[&str] = &[
    "AT", "IT", "GET", "PUT", "POST", "REST", "TEST", "LIST", "HOST", "PORT", "EXIT", "WAIT",
    "NOT", "BUT", "OUT", "SET", "LAST", "NEXT", "TEXT", "ALERT", "START", "FIRST", "LOST", "JUST",
    "BEST", "MOST", "SENT", "HIT",
];

/// A word shaped like a zone abbreviation: two to five capital letters ending in `T`
/// (`ET`, `PT`, `HKT`, `AEST`).
fn zone_shaped(word: &str) -> bool {
    (2..=5).contains(&word.len())
        && word.bytes().all(|b| b.is_ascii_uppercase())
        && word.ends_with('T')
        && !NOT_ZONES.contains(&word)
}

/// The zone written after a time, starting at word `k` with `gap` before it: a zone word
/// (`UTC`, `EST`, `UTC+8`, `GMT-5`), an offset (`+0800`), either in parentheses (`(PST)`), or
/// a word shaped like a zone diag does not know (`ET` is several, `XYZT` none). Returns the
/// zone and whether a closing parenthesis must follow.
fn zone_at(all: &[Word<'_>], k: usize, gap: &str, gap_after_k: &str) -> Option<Zone> {
    let next = all.get(k)?;
    let raw = next.text.trim_end_matches(['.', ',', ':', ';']);
    let in_parens = gap.trim() == "(" && gap_after_k.trim_start().starts_with(')');
    if !(in_parens || (!gap.is_empty() && gap.chars().all(|c| c == ' ')) || gap.trim() == "+") {
        return None;
    }
    if gap.trim() == "+" {
        return parse_offset(&format!("+{raw}")).map(Zone::Offset);
    }
    if raw.starts_with('-') || raw.starts_with('+') {
        return parse_offset(raw).map(Zone::Offset);
    }
    if let Some(zone) = parse_zone_word(raw) {
        return Some(zone);
    }
    // A zone named in words: `local` (whose?), `Pacific`, `Eastern`… (either of two offsets).
    if raw.eq_ignore_ascii_case("local") || raw.eq_ignore_ascii_case("localtime") {
        return Some(Zone::Unknown(raw.to_string()));
    }
    if matches!(
        raw,
        "Pacific" | "Eastern" | "Central" | "Mountain" | "Atlantic"
    ) {
        return Some(Zone::Ambiguous(raw.to_string()));
    }
    let upper_letters = (1..=6).contains(&raw.len()) && raw.bytes().all(|b| b.is_ascii_uppercase());
    (zone_shaped(raw) || (in_parens && upper_letters)).then(|| Zone::Unknown(raw.to_string()))
}

/// A time with what follows it: `2:02 PM`, `2 pm`, `2pm`, `14:02 UTC`, `2:02 PM UTC`,
/// `14:02:03 +01:00`, `09:44 EST`, `14:02 UTC+8`, `14:02 (PST)`. Returns the fact and the
/// words used; `None` for a time with nothing after it (the plain classifier reads it).
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
    // A zone after it.
    if time.zone == Zone::Unstated && i + used < all.len() {
        let k = i + used;
        if let Some(zone) = zone_at(all, k, gap_after(k - 1), gap_after(k)) {
            time.zone = zone;
            used += 1;
            // `UTC +8`, `GMT -5`: an offset after a spaced base.
            let base = word(k).is_some_and(|w| matches!(w, "UTC" | "GMT" | "UT"));
            if base && time.zone == Zone::Offset(0) && k + 1 < all.len() {
                let raw = all[k + 1].text.trim_end_matches(['.', ',', ':', ';']);
                let gap = gap_after(k);
                let offset = if gap.trim() == "+" && gap.starts_with(' ') {
                    parse_offset(&format!("+{raw}"))
                } else if gap.chars().all(|c| c == ' ') && raw.starts_with('-') {
                    parse_offset(raw)
                } else {
                    None
                };
                if let Some(min) = offset {
                    time.zone = Zone::Offset(min);
                    used += 1;
                }
            }
        }
    }
    if used == 1 && !had_meridiem {
        // A plain time: the classifier reads it (ranges, date-times).
        return None;
    }
    let fact = match time.zone {
        Zone::Unknown(_) => Fact::Unreadable,
        _ => Fact::Time(time),
    };
    Some((fact, used))
}

/// The numerals written in Chinese or Japanese inside a word of those scripts (`八十` 80,
/// `一百五十四` 154, `两千` 2000): runs of numeral characters with a value of ten or more, or
/// of two or more digits. A lone digit character is part of words (`一个`, `统一`) and is not
/// read.
fn cjk_numbers(word: &str) -> Vec<(String, u64)> {
    let digit = |c: char| -> Option<u64> {
        Some(match c {
            '\u{3007}' | '\u{96F6}' => 0,
            '\u{4E00}' => 1,
            '\u{4E8C}' | '\u{4E24}' => 2,
            '\u{4E09}' => 3,
            '\u{56DB}' => 4,
            '\u{4E94}' => 5,
            '\u{516D}' => 6,
            '\u{4E03}' => 7,
            '\u{516B}' => 8,
            '\u{4E5D}' => 9,
            _ => return None,
        })
    };
    let unit = |c: char| -> Option<u64> {
        Some(match c {
            '\u{5341}' => 10,
            '\u{767E}' => 100,
            '\u{5343}' => 1000,
            '\u{4E07}' => 10_000,
            '\u{4EBF}' => 100_000_000,
            _ => return None,
        })
    };
    let mut out = Vec::new();
    let chars: Vec<char> = word.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if digit(chars[i]).is_none() && unit(chars[i]).is_none() {
            i += 1;
            continue;
        }
        let start = i;
        let (mut total, mut section, mut number) = (0u64, 0u64, 0u64);
        let mut digits_only = true;
        while i < chars.len() {
            let c = chars[i];
            if let Some(d) = digit(c) {
                number = number.saturating_mul(if digits_only && i > start { 10 } else { 1 });
                number = number.saturating_add(d);
            } else if let Some(u) = unit(c) {
                digits_only = false;
                if u >= 10_000 {
                    total = total.saturating_add(section.saturating_add(number).saturating_mul(u));
                    section = 0;
                } else {
                    section = section.saturating_add(number.max(1).saturating_mul(u));
                }
                number = 0;
            } else {
                break;
            }
            i += 1;
        }
        let value = total.saturating_add(section).saturating_add(number);
        let run: String = chars[start..i].iter().collect();
        if i - start >= 2 || value >= 10 {
            out.push((run, value));
        }
    }
    out
}

/// A zone word before a time (`UTC 14:02`, `PST 14:02`, `XYZT 14:02`): the time in that zone.
fn zone_then_time<'a>(
    all: &[Word<'a>],
    i: usize,
    gap_after: &dyn Fn(usize) -> &'a str,
) -> Option<Fact> {
    let zone_word = trim_word(&all.get(i)?.text).0;
    let letters = zone_word.split(['+', '-']).next().unwrap_or("");
    if letters.len() < 2 || !letters.bytes().all(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let time_word = trim_word(&all.get(i + 1)?.text).0;
    if !spaced_gap(gap_after(i), false) || !gap_after(i).chars().all(|c| c == ' ') {
        return None;
    }
    let mut time = parse_time(time_word)?;
    if time.zone != Zone::Unstated {
        return None;
    }
    let zone = match parse_zone_word(zone_word) {
        Some(z) => z,
        None if zone_shaped(zone_word) => Zone::Unknown(zone_word.to_string()),
        None => return None,
    };
    if matches!(zone, Zone::Unknown(_)) {
        return Some(Fact::Unreadable);
    }
    time.zone = zone;
    Some(Fact::Time(time))
}

/// One part of a number written in words.
fn number_part(p: &str) -> bool {
    cardinal_word(p).is_some() || ordinal_word(p).is_some() || scale_word(p).is_some()
}

/// A number written in words from word `i` (`eighty`, `fifty-five`, `a dozen`,
/// `two hundred and fifty`, `thirtieth`, `50 thousand`, `twenty-minute`): its value, whether
/// a reader would take it for a lone single digit (`one`, `first`, `two-hour`), and the
/// words it took.
fn number_words<'a>(
    all: &[Word<'a>],
    i: usize,
    gap_after: &dyn Fn(usize) -> &'a str,
) -> Option<(String, bool, usize)> {
    let word = |k: usize| all.get(k).map(|w| trim_word(&w.text).0);
    // The parts of the words from `i`, each word split at its hyphens, while words are
    // separated by spaces: (word index, part).
    let mut parts: Vec<(usize, String)> = Vec::new();
    let mut k = i;
    while let Some(w) = word(k) {
        if k > i && !spaced_gap(gap_after(k - 1), false) {
            break;
        }
        if !w.chars().all(|c| c.is_alphabetic() || c == '-') && read_number(w).is_none() {
            break;
        }
        for p in w.split('-') {
            parts.push((k, p.to_lowercase()));
        }
        k += 1;
        if parts.len() > 12 {
            break;
        }
    }
    let (mut total, mut current): (u64, u64) = (0, 0);
    let mut any = false;
    let mut scaled = false;
    let mut last_word = i;
    let mut j = 0;
    // `50 thousand`, `2.5 million`: digits and a scale word.
    if let Some(n) = parts.first().and_then(|(_, p)| read_number(p)) {
        let scale = parts.get(1).and_then(|(_, p)| scale_word(p))?;
        let (int, frac) = n.value.split_once('.').unwrap_or((n.value.as_str(), ""));
        let pow = scale.ilog10();
        let value = values::scaled_value(int, frac, pow);
        return Some((value, false, parts[1].0 - i + 1));
    }
    while j < parts.len() {
        let (at, p) = &parts[j];
        let next = parts.get(j + 1).map(|(_, p)| p.as_str());
        let next_is_number = next.is_some_and(number_part);
        if (p == "a" || p == "an")
            && !any
            && next.is_some_and(|n| scale_word(n).is_some() || n == "dozen")
        {
            current = 1;
            j += 1;
            continue;
        }
        if p == "and" && any && next_is_number {
            j += 1;
            continue;
        }
        let ordinal = ordinal_word(p);
        let v = cardinal_word(p)
            .or(ordinal)
            .or_else(|| scale_word(p).map(|_| 0));
        let Some(v) = v else { break };
        if p == "dozen" {
            current = current.max(1) * 12;
            scaled = true;
        } else if let Some(s) = scale_word(p).or(match p.as_str() {
            "hundredth" => Some(100),
            "thousandth" => Some(1000),
            "millionth" => Some(1_000_000),
            _ => None,
        }) {
            if s == 100 {
                current = current.max(1) * 100;
            } else {
                total += current.max(1) * s;
                current = 0;
            }
            scaled = true;
        } else {
            let fits = current == 0
                || current % 100 == 0
                || (current % 10 == 0 && current % 100 >= 20 && v < 10);
            if !fits {
                break;
            }
            current += v;
        }
        any = true;
        last_word = *at;
        j += 1;
        if ordinal.is_some() {
            break;
        }
    }
    if !any {
        return None;
    }
    let value = total + current;
    Some((value.to_string(), value < 10 && !scaled, last_word - i + 1))
}

/// An hour written as a word or digits, 1–12.
fn hour_word(w: &str) -> Option<u32> {
    let h = cardinal_word(w)
        .and_then(|v| u32::try_from(v).ok())
        .or_else(|| w.parse::<u32>().ok().filter(|_| w.len() <= 2))?;
    (1..=12).contains(&h).then_some(h)
}

/// A time written in words: `noon`, `midnight`, `a quarter past two`, `half past two`,
/// `quarter to three`, `two o'clock`, with `am`/`pm` after it or else either half of the
/// day. `half past` without an hour is a time no evidence can show.
fn time_words<'a>(
    all: &[Word<'a>],
    i: usize,
    gap_after: &dyn Fn(usize) -> &'a str,
) -> Option<(Fact, usize)> {
    let word = |k: usize| all.get(k).map(|w| trim_word(&w.text).0.to_lowercase());
    let spaced = |k: usize| spaced_gap(gap_after(k), false);
    let at = |h: u32, m: u32| TimeOfDay {
        secs: (h % 24) * 3600 + m * 60,
        precision: Precision::Minute,
        zone: Zone::Unstated,
    };
    let first = word(i)?;
    match first.as_str() {
        "noon" | "midday" => return Some((Fact::Time(at(12, 0)), 1)),
        "midnight" => return Some((Fact::Time(at(0, 0)), 1)),
        _ => {}
    }
    // An hour and what is after it: `am`/`pm` or either half of the day.
    let either = |h: u32, m: u32, k: usize| -> (Fact, usize) {
        if spaced(k) {
            if let Some(pm) = word(k + 1).and_then(|w| meridiem(&w)) {
                let t = to_24h(at(h, m), pm).unwrap_or_else(|| at(h, m));
                return (Fact::Time(t), 2);
            }
        }
        let h12 = h % 12;
        (
            Fact::AnyOf(vec![Fact::Time(at(h12, m)), Fact::Time(at(h12 + 12, m))]),
            1,
        )
    };
    // `two o'clock`.
    if let Some(h) = hour_word(&first) {
        if word(i + 1).as_deref() == Some("o")
            && spaced(i)
            && matches!(gap_after(i + 1), "'" | "\u{2019}")
            && word(i + 2).as_deref() == Some("clock")
        {
            let (fact, more) = either(h, 0, i + 2);
            return Some((fact, 2 + more));
        }
        return None;
    }
    // `[a] quarter past|after|to|before H`, `half past H`.
    let mut k = i;
    if first == "a" {
        k += 1;
        if !spaced(i) {
            return None;
        }
    }
    let fraction = word(k)?;
    let minutes = match fraction.as_str() {
        "quarter" => 15,
        "half" if k == i => 30,
        _ => return None,
    };
    if !spaced(k) {
        return None;
    }
    let dir = word(k + 1)?;
    let forward = match dir.as_str() {
        "past" | "after" => true,
        "to" | "before" | "till" => false,
        _ => return None,
    };
    let hour = if spaced(k + 1) {
        word(k + 2).and_then(|w| hour_word(&w))
    } else {
        None
    };
    let Some(h) = hour else {
        return Some((Fact::Unreadable, k + 2 - i));
    };
    let (h, m) = if forward {
        (h, minutes)
    } else {
        (if h == 1 { 12 } else { h - 1 }, 60 - minutes)
    };
    let (fact, more) = either(h, m, k + 2);
    Some((fact, k + 2 - i + more))
}

/// Value words from word `i`: times in words, days (`today`, weekdays), quantities without a
/// checkable value (`hundreds`), multipliers (`twice`), numbers in words. Their kind, fact,
/// salience and the words they took.
fn value_phrase<'a>(
    all: &[Word<'a>],
    i: usize,
    gap_after: &dyn Fn(usize) -> &'a str,
) -> Option<((TokenKind, Fact, bool), usize)> {
    let first = trim_word(&all.get(i)?.text).0;
    if let Some((fact, used)) = time_words(all, i, gap_after) {
        return Some(((TokenKind::Time, fact, true), used));
    }
    if relative_day_word(first) {
        return Some(((TokenKind::Date, Fact::Name(first.to_lowercase()), true), 1));
    }
    if let Some(d) = weekday_number(first) {
        return Some(((TokenKind::Date, Fact::Weekday(d), true), 1));
    }
    if vague_quantity_word(first) {
        return Some((
            (TokenKind::Number, Fact::Name(first.to_lowercase()), true),
            1,
        ));
    }
    if let Some(n) = multiplier_word(first) {
        return Some(((TokenKind::Number, Fact::Number(format!("{n}x")), true), 1));
    }
    if let Some(v) = fraction_word(first) {
        return Some(((TokenKind::Number, Fact::Number(v.to_string()), true), 1));
    }
    // A Roman numeral is its value, or the same word where the evidence writes it.
    if let Some(n) = roman_numeral(first) {
        let fact = Fact::AnyOf(vec![
            Fact::Number(n.to_string()),
            Fact::Name(first.to_lowercase()),
        ]);
        return Some(((TokenKind::Number, fact, n >= 10), 1));
    }
    if first.chars().all(|c| c.is_alphabetic() || c == '-') || read_number(first).is_some() {
        if let Some((value, lone, used)) = number_words(all, i, gap_after) {
            return Some(((TokenKind::Number, Fact::Number(value), !lone), used));
        }
    }
    None
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
