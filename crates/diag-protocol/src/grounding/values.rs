//! Facts as values: numbers, times of day and dates as a reader reads them, whatever the
//! notation (openspec/specs/verified-evidence/spec.md, "Prose SHALL be a closed set and
//! every other word a fact"): numbers read whole whatever joins their digits, number,
//! ordinal, month and weekday words, times with their zones, dates.
//!
//! Every function here is pure and total: text in, `Option` of a value out.

use std::cmp::Ordering;

/// A number as a value: its canonical decimal text (`5,000` and `5000` are `5000`; `0.950`
/// is `0.95`; `007` is `7`).
pub fn canonical_number(int: &str, frac: &str) -> String {
    let int: String = int.chars().filter(char::is_ascii_digit).collect();
    let int = int.trim_start_matches('0');
    let int = if int.is_empty() { "0" } else { int };
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        int.to_string()
    } else {
        format!("{int}.{frac}")
    }
}

/// How a number was written, beyond its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberRead {
    /// Canonical decimal value (`5,000` = `5000`, `154k` = `154000`, `2,5` = `2.5`).
    pub value: String,
    /// Digits written.
    pub digits: usize,
    /// Only digits with a unit, plural or ordinal suffix: nothing joined to them (no group
    /// or decimal separator, magnitude or multiplier). A lone single digit written so is not
    /// salient.
    pub plain: bool,
    /// Written with a multiplier (`50x`, `2\u{d7}`): a ratio, not a count.
    pub multiplier: bool,
}

impl NumberRead {
    /// The value as compared: a ratio is its value and `x` (`50x`), shown only by a ratio.
    pub fn fact_value(&self) -> String {
        if self.multiplier {
            format!("{}x", self.value)
        } else {
            self.value.clone()
        }
    }
}

/// Units a number may carry glued to it (`5000ms`, `12GB`, `50req/s`), compared without
/// case; any other letters after digits make the word an identifier. Ordinal and plural
/// suffixes (`99th`, `502s`) are read as the number.
pub const UNITS: &[&str] = &[
    "ms", "s", "sec", "secs", "second", "seconds", "m", "min", "mins", "minute", "minutes", "h",
    "hr", "hrs", "hour", "hours", "d", "day", "days", "w", "wk", "wks", "week", "weeks", "us",
    "\u{b5}s", "\u{3bc}s", "ns", "b", "kb", "mb", "gb", "tb", "pb", "kib", "mib", "gib", "tib",
    "bps", "kbps", "mbps", "gbps", "rps", "qps", "tps", "ops", "req/s", "reqs/s", "op/s", "ops/s",
    "r/s", "/s", "/min", "/h", "hz", "khz", "mhz", "ghz", "rpm", "st", "nd", "rd", "th",
];

/// Magnitude suffixes and their powers of ten, case-sensitive: `154k`, `2.5M`, `3bn`.
const MAGNITUDES: &[(&str, u32)] = &[("k", 3), ("K", 3), ("M", 6), ("bn", 9), ("Bn", 9)];

/// Characters that join groups of digits into one number (`5,000`, `50'154`, `50\u{2019}154`,
/// `50 154` after NFKC of U+202F/U+00A0/U+2009, `1_000`), and the decimal marks `.` `,`.
pub fn is_digit_joiner(c: char) -> bool {
    matches!(c, ',' | '.' | '\'' | '\u{2019}' | ' ' | '_')
}

/// A number written whole, whatever joins its digits, then an optional suffix from a closed
/// list (openspec/specs/verified-evidence/spec.md, "Numbers are read whole"): digit groups
/// joined by `,` `.` `'` `\u{2019}` space or `_` (thousands grouping when every later group
/// has three digits and the first one to three; a lone `.` or `,` otherwise is a decimal
/// mark; `1,234.5` and `1.234,5` both read 1234.5), then a unit ([`UNITS`]), a plural `s`, an
/// ordinal, a magnitude (`154k`, `2.5M`) or a multiplier `x`. ASCII digits only: digits of
/// another script make an identifier. `None` when the word is not such a number.
pub fn read_number(word: &str) -> Option<NumberRead> {
    let head_end = word
        .char_indices()
        .take_while(|&(_, c)| c.is_ascii_digit() || is_digit_joiner(c))
        .last()
        .map(|(i, c)| i + c.len_utf8())?;
    // The head ends at its last digit.
    let head = word[..head_end].trim_end_matches(|c: char| !c.is_ascii_digit());
    if head.is_empty() || !head.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let suffix = &word[head.len()..];
    let mut groups: Vec<&str> = Vec::new();
    let mut seps: Vec<char> = Vec::new();
    let mut start = 0;
    for (i, c) in head.char_indices() {
        if !c.is_ascii_digit() {
            if i == start {
                // Two joiners in a row: not one number.
                return None;
            }
            groups.push(&head[start..i]);
            seps.push(c);
            start = i + c.len_utf8();
        }
    }
    groups.push(&head[start..]);
    let digits: usize = groups.iter().map(|g| g.len()).sum();
    let grouped = |gs: &[&str]| {
        gs.first().is_some_and(|g| (1..=3).contains(&g.len()))
            && gs.iter().skip(1).all(|g| g.len() == 3)
    };
    let (int, frac): (String, String) = match seps.as_slice() {
        [] => (head.to_string(), String::new()),
        [s] if *s == '.' => (groups[0].to_string(), groups[1].to_string()),
        [s] if *s == ',' && !grouped(&groups) => (groups[0].to_string(), groups[1].to_string()),
        [s] if *s == '_' => (groups.concat(), String::new()),
        all if all.iter().all(|s| *s == all[0]) => {
            if !grouped(&groups) {
                return None;
            }
            (groups.concat(), String::new())
        }
        [init @ .., last] if matches!(last, '.' | ',') => {
            let t = init[0];
            if t == *last || !init.iter().all(|s| *s == t) || !grouped(&groups[..groups.len() - 1])
            {
                return None;
            }
            (
                groups[..groups.len() - 1].concat(),
                groups[groups.len() - 1].to_string(),
            )
        }
        _ => return None,
    };
    let plain_head = seps.is_empty();
    let read = |value: String, plain: bool| {
        Some(NumberRead {
            value,
            digits,
            plain,
            multiplier: false,
        })
    };
    if suffix.is_empty() {
        return read(canonical_number(&int, &frac), plain_head);
    }
    if let Some((_, pow)) = MAGNITUDES.iter().find(|(m, _)| *m == suffix) {
        return read(scaled_value(&int, &frac, *pow), false);
    }
    if matches!(suffix, "x" | "X" | "\u{d7}") {
        return Some(NumberRead {
            value: canonical_number(&int, &frac),
            digits,
            plain: false,
            multiplier: true,
        });
    }
    let lower = suffix.to_lowercase();
    if lower == "s" || UNITS.contains(&lower.as_str()) {
        let ordinal = matches!(lower.as_str(), "st" | "nd" | "rd" | "th");
        if ordinal && !frac.is_empty() {
            return None;
        }
        return read(canonical_number(&int, &frac), plain_head);
    }
    None
}

/// `int.frac` times ten to `pow`, canonical.
pub fn scaled_value(int: &str, frac: &str, pow: u32) -> String {
    let pow = pow as usize;
    let mut frac = frac.to_string();
    while frac.len() < pow {
        frac.push('0');
    }
    let (moved, rest) = frac.split_at(pow);
    canonical_number(&format!("{int}{moved}"), rest)
}

/// A number written with optional thousands separators and an optional fraction, then an
/// optional suffix ([`read_number`]): its canonical value and how many digits were written.
pub fn parse_number(word: &str) -> Option<(String, usize)> {
    read_number(word).map(|n| (n.value, n.digits))
}

/// How precisely a time of day was written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Precision {
    Hour,
    Minute,
    Second,
    /// Seconds and these fraction digits.
    Fraction(String),
}

/// The zone a time was written in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Zone {
    /// None written: the wall clock of whatever wrote it.
    Unstated,
    /// A fixed offset from UTC in minutes (`Z`, `UTC`, `+01:00`, `EST`).
    Offset(i32),
    /// An abbreviation that names several zones (`IST`, `CST`, `ET`): comparable only with
    /// the same abbreviation.
    Ambiguous(String),
    /// A zone diag does not know (`14:02 XYZT`): the time cannot be compared, so it is
    /// shown by nothing.
    Unknown(String),
}

/// A time of day: seconds since midnight as written, how precisely, and in which zone.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimeOfDay {
    pub secs: u32,
    pub precision: Precision,
    pub zone: Zone,
}

const DAY: i64 = 86_400;

impl TimeOfDay {
    /// Seconds since midnight UTC, when the zone says.
    fn utc(&self) -> Option<u32> {
        match self.zone {
            Zone::Offset(min) => {
                let s = (i64::from(self.secs) - i64::from(min) * 60).rem_euclid(DAY);
                u32::try_from(s).ok()
            }
            _ => None,
        }
    }

    /// Whether `self` (written in an answer or a claim) is shown by `evidence`: the same
    /// time at the answer's precision, compared in UTC when both zones are known, as wall
    /// clocks otherwise (an evidence time without a zone is whatever its writer's clock
    /// said, which an answer may repeat with or without `UTC`).
    pub fn shown_by(&self, evidence: &TimeOfDay) -> bool {
        let candidates: [Option<u32>; 2] = match (&self.zone, &evidence.zone) {
            (Zone::Unknown(_), _) | (_, Zone::Unknown(_)) => return false,
            (Zone::Ambiguous(a), Zone::Ambiguous(b)) if a == b => [Some(evidence.secs), None],
            (Zone::Ambiguous(_), _) => return false,
            (Zone::Offset(_), Zone::Offset(_)) => [evidence.utc(), None],
            (Zone::Offset(_), Zone::Unstated) => [Some(evidence.secs), None],
            (Zone::Offset(_), Zone::Ambiguous(_)) => return false,
            (Zone::Unstated, _) => [Some(evidence.secs), evidence.utc()],
        };
        let mine = match self.zone {
            Zone::Offset(_) => match self.utc() {
                Some(s) => s,
                None => return false,
            },
            _ => self.secs,
        };
        candidates
            .into_iter()
            .flatten()
            .any(|theirs| same_at(mine, theirs, &self.precision, &evidence.precision))
    }
}

fn same_at(mine: u32, theirs: u32, mine_p: &Precision, theirs_p: &Precision) -> bool {
    let unit = match mine_p {
        Precision::Hour => 3600,
        Precision::Minute => 60,
        Precision::Second | Precision::Fraction(_) => 1,
    };
    // The evidence must be at least as precise as the claim.
    if rank(theirs_p) < rank(mine_p) {
        return false;
    }
    if mine / unit != theirs / unit {
        return false;
    }
    match (mine_p, theirs_p) {
        (Precision::Fraction(a), Precision::Fraction(b)) => b.starts_with(a.as_str()),
        (Precision::Fraction(_), _) => false,
        _ => true,
    }
}

fn rank(p: &Precision) -> u8 {
    match p {
        Precision::Hour => 0,
        Precision::Minute => 1,
        Precision::Second => 2,
        Precision::Fraction(_) => 3,
    }
}

fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `14:02`, `9:05`, `14:02:03`, `14:02:03.363`, `14:02:03,363` (a comma before the
/// fraction, as log4j writes it), `14h02`; a trailing `Z` is the zone UTC, an attached
/// offset (`+01:00`, `-0500`, `-05:00` after seconds) its offset. Hours 0–23 (24 only as
/// `24:00`), minutes 0–59, seconds 0–60.
pub fn parse_time(word: &str) -> Option<TimeOfDay> {
    let (body, mut zone) = split_zone(word);
    let (hms, frac) = match body.split_once(['.', ',']) {
        Some((hms, frac)) => (hms, Some(frac)),
        None => (body, None),
    };
    let parts: Vec<&str> = if hms.contains(':') {
        hms.split(':').collect()
    } else if let Some((h, m)) = hms.split_once(['h', 'H']) {
        if frac.is_some() || zone != Zone::Unstated {
            return None;
        }
        vec![h, m]
    } else {
        return None;
    };
    let (h, m, s) = match parts.as_slice() {
        [h, m] if (1..=2).contains(&h.len()) && m.len() == 2 => (digits(h)?, digits(m)?, None),
        [h, m, s] if (1..=2).contains(&h.len()) && m.len() == 2 && s.len() == 2 => {
            (digits(h)?, digits(m)?, Some(digits(s)?))
        }
        _ => return None,
    };
    if h > 24 || m > 59 || s.is_some_and(|s| s > 60) || (h == 24 && (m > 0 || s.unwrap_or(0) > 0)) {
        return None;
    }
    let precision = match (s, frac) {
        (None, None) => Precision::Minute,
        (None, Some(_)) => return None,
        (Some(_), None) => Precision::Second,
        (Some(_), Some(f)) => {
            if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Precision::Fraction(f.to_string())
        }
    };
    if zone == Zone::Unstated && body.len() != word.len() {
        zone = Zone::Offset(0);
    }
    Some(TimeOfDay {
        secs: (h % 24) * 3600 + m * 60 + s.unwrap_or(0).min(59),
        precision,
        zone,
    })
}

/// Splits a trailing `Z` or numeric offset off a time word.
fn split_zone(word: &str) -> (&str, Zone) {
    if let Some(body) = word.strip_suffix(['Z', 'z']) {
        return (body, Zone::Offset(0));
    }
    // `+HH:MM`, `+HHMM`, `+HH` after the time.
    if let Some(pos) = word.rfind(['+', '-']) {
        if pos > 0 {
            let (body, off) = word.split_at(pos);
            let has_seconds = body.matches(':').count() >= 2;
            if let Some(min) = parse_offset(off) {
                if off.starts_with('+') || has_seconds {
                    return (body, Zone::Offset(min));
                }
            }
        }
    }
    (word, Zone::Unstated)
}

/// `+01:00`, `-0500`, `+05`: minutes east of UTC.
pub fn parse_offset(s: &str) -> Option<i32> {
    let sign = match s.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let rest = s.get(1..)?;
    // Digits only: a split by byte count below stays on character boundaries.
    if !rest.is_ascii() {
        return None;
    }
    let (h, m) = match rest.split_once(':') {
        Some((h, m)) => (h, m),
        None if rest.len() == 4 => rest.split_at(2),
        None if rest.len() <= 2 => (rest, "00"),
        None => return None,
    };
    if h.is_empty() || h.len() > 2 || m.len() != 2 {
        return None;
    }
    let (h, m) = (digits(h)?, digits(m)?);
    if h > 14 || m > 59 {
        return None;
    }
    Some(sign * i32::try_from(h * 60 + m).ok()?)
}

/// A zone written as a word after a time: `UTC`, `GMT`, `Z`, `UTC+1`, `GMT-05:00`, and the
/// abbreviations with one meaning (North American and European ones, and a few others);
/// `IST`, `CST`, `AST`, `BST`… each name one table entry: see [`ZONES`].
pub fn parse_zone_word(word: &str) -> Option<Zone> {
    let upper = word.to_ascii_uppercase();
    for base in ["UTC", "GMT", "UT"] {
        if let Some(rest) = upper.strip_prefix(base) {
            if rest.is_empty() {
                return Some(Zone::Offset(0));
            }
            return parse_offset(rest).map(Zone::Offset);
        }
    }
    if upper == "Z" {
        return Some(Zone::Offset(0));
    }
    ZONES
        .iter()
        .find(|(name, _)| *name == upper)
        .map(|(name, off)| match off {
            Some(min) => Zone::Offset(*min),
            None => Zone::Ambiguous((*name).to_string()),
        })
}

/// Zone abbreviations and their fixed offsets in minutes; `None` for an abbreviation that
/// names several zones (India, Israel and Irish Standard Time are all `IST`; China and US
/// Central are both `CST`; Atlantic and Arabia are both `AST`), read only against the same
/// abbreviation. `BST` is British Summer Time.
pub const ZONES: &[(&str, Option<i32>)] = &[
    ("WET", Some(0)),
    ("WEST", Some(60)),
    ("BST", Some(60)),
    ("IST", None),
    ("CET", Some(60)),
    ("CEST", Some(120)),
    ("MET", Some(60)),
    ("MEST", Some(120)),
    ("EET", Some(120)),
    ("EEST", Some(180)),
    ("MSK", Some(180)),
    ("EST", Some(-300)),
    ("EDT", Some(-240)),
    ("CST", None),
    ("CDT", Some(-300)),
    ("MST", Some(-420)),
    ("MDT", Some(-360)),
    ("PST", Some(-480)),
    ("PDT", Some(-420)),
    ("AKST", Some(-540)),
    ("AKDT", Some(-480)),
    ("HST", Some(-600)),
    ("AST", None),
    ("JST", Some(540)),
    ("KST", Some(540)),
    ("AEST", Some(600)),
    ("AEDT", Some(660)),
    ("ACST", Some(570)),
    ("AWST", Some(480)),
    ("NZST", Some(720)),
    ("NZDT", Some(780)),
    // US zones named without standard or daylight time: either of two offsets.
    ("ET", None),
    ("CT", None),
    ("MT", None),
    ("PT", None),
    ("SGT", Some(480)),
    ("HKT", Some(480)),
    ("PHT", Some(480)),
    ("WIB", Some(420)),
    ("ICT", Some(420)),
    ("PKT", Some(300)),
    ("NPT", Some(345)),
    ("BRT", Some(-180)),
    ("ART", Some(-180)),
    ("SAST", Some(120)),
    ("WAT", Some(60)),
    ("CAT", Some(120)),
    ("EAT", Some(180)),
    ("GST", None),
    ("NST", None),
];

/// `am`/`pm` in the forms people write them: `AM`, `pm`, `a.m.`, `P.M`.
pub fn meridiem(word: &str) -> Option<bool> {
    let w: String = word
        .chars()
        .filter(|c| *c != '.')
        .collect::<String>()
        .to_ascii_lowercase();
    match w.as_str() {
        "am" => Some(false),
        "pm" => Some(true),
        _ => None,
    }
}

/// A 12-hour time moved to 24 hours; `None` when the hour is not 1–12.
pub fn to_24h(mut t: TimeOfDay, pm: bool) -> Option<TimeOfDay> {
    let h = t.secs / 3600;
    if !(1..=12).contains(&h) {
        return None;
    }
    let rest = t.secs % 3600;
    let h24 = match (h, pm) {
        (12, false) => 0,
        (12, true) => 12,
        (h, false) => h,
        (h, true) => h + 12,
    };
    t.secs = h24 * 3600 + rest;
    Some(t)
}

/// A date: year when written, month, day when written (`November 2026` has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    pub year: Option<i32>,
    pub month: u8,
    pub day: Option<u8>,
}

impl Date {
    fn new(year: Option<i32>, month: u32, day: u32) -> Option<Date> {
        let days = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 => 29,
            _ => return None,
        };
        if day == 0 || day > days || year.is_some_and(|y| !(1900..=2200).contains(&y)) {
            return None;
        }
        Some(Date {
            year,
            month: u8::try_from(month).ok()?,
            day: Some(u8::try_from(day).ok()?),
        })
    }

    /// A month of a year, or of any year (`November 2026`, `November`).
    pub fn month_of(year: Option<i32>, month: u32) -> Option<Date> {
        if !(1..=12).contains(&month) || year.is_some_and(|y| !(1900..=2200).contains(&y)) {
            return None;
        }
        Some(Date {
            year,
            month: u8::try_from(month).ok()?,
            day: None,
        })
    }

    /// The day of the week (0 = Monday … 6 = Sunday) of a full date.
    pub fn weekday(&self) -> Option<u8> {
        let (y, m, d) = (
            i64::from(self.year?),
            i64::from(self.month),
            i64::from(self.day?),
        );
        // Days from 1970-01-01 (a Thursday), by the civil-from-days algorithm.
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        u8::try_from((days + 3).rem_euclid(7)).ok()
    }

    /// Whether `self` (written in an answer) is shown by `evidence`: same month, the same
    /// day when the answer writes one, and the same year when the answer writes one.
    pub fn shown_by(&self, evidence: &Date) -> bool {
        self.month == evidence.month
            && (self.day.is_none() || self.day == evidence.day)
            && match (self.year, evidence.year) {
                (None, _) => true,
                (Some(a), Some(b)) => a == b,
                (Some(_), None) => false,
            }
    }
}

/// A date read from one word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DateRead {
    One(Date),
    /// `05/11/2026`: day-month or month-day, a reader cannot tell which.
    Ambiguous,
}

/// `2026-11-30`, `2026/11/30`, `30.11.2026` (day first), `30/11/2026` and `11/30/2026`
/// (unambiguous only when one of the first two is above 12 or both are equal),
/// `30/Nov/2026` (web server logs).
pub fn parse_date_word(word: &str) -> Option<DateRead> {
    let parts: Vec<&str> = word.split(['-', '/', '.']).collect();
    let [a, b, c] = parts.as_slice() else {
        return None;
    };
    let sep_ok = {
        let seps: Vec<char> = word
            .chars()
            .filter(|c| matches!(c, '-' | '/' | '.'))
            .collect();
        seps.len() == 2 && seps[0] == seps[1]
    };
    if !sep_ok {
        return None;
    }
    let sep = word.chars().find(|c| matches!(c, '-' | '/' | '.'))?;
    if a.len() == 4 {
        let (y, m, d) = (digits(a)?, digits(b)?, digits(c)?);
        if b.len() > 2 || c.len() > 2 {
            return None;
        }
        return Date::new(Some(i32::try_from(y).ok()?), m, d).map(DateRead::One);
    }
    if c.len() != 4 || a.len() > 2 {
        return None;
    }
    let y = i32::try_from(digits(c)?).ok()?;
    if let Some(m) = month_number(b) {
        return Date::new(Some(y), m, digits(a)?).map(DateRead::One);
    }
    if b.len() > 2 {
        return None;
    }
    let (x, z) = (digits(a)?, digits(b)?);
    if sep == '.' {
        return Date::new(Some(y), z, x).map(DateRead::One);
    }
    let day_first = Date::new(Some(y), z, x);
    let month_first = Date::new(Some(y), x, z);
    match (day_first, month_first) {
        (Some(d), Some(m)) if d == m => Some(DateRead::One(d)),
        (Some(_), Some(_)) => Some(DateRead::Ambiguous),
        (Some(d), None) | (None, Some(d)) => Some(DateRead::One(d)),
        (None, None) => None,
    }
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// Month names of the languages an operator writes in besides English, read only beside a
/// day or a year (`30 de noviembre de 2026`, `30. November 2026`, `le 30 novembre`).
const OTHER_MONTHS: [&[&str]; 12] = [
    &[
        "enero", "janvier", "januar", "gennaio", "janeiro", "januari",
    ],
    &[
        "febrero",
        "f\u{e9}vrier",
        "februar",
        "febbraio",
        "fevereiro",
        "februari",
    ],
    &["marzo", "mars", "m\u{e4}rz", "mar\u{e7}o", "maart"],
    &["abril", "avril", "aprile"],
    &["mayo", "mai", "maggio", "maio", "mei"],
    &["junio", "juin", "juni", "giugno", "junho"],
    &["julio", "juillet", "juli", "luglio", "julho"],
    &["agosto", "ao\u{fb}t", "augustus"],
    &["septiembre", "setiembre", "settembre", "setembro"],
    &["octubre", "octobre", "oktober", "ottobre", "outubro"],
    &["noviembre", "novembre", "novembro"],
    &[
        "diciembre",
        "d\u{e9}cembre",
        "dezember",
        "dicembre",
        "dezembro",
    ],
];

/// `November`, `Nov`, `Nov.`, `Sept`: 1–12, any case.
pub fn month_number(word: &str) -> Option<u32> {
    let w = word.trim_end_matches('.').to_lowercase();
    if w.chars().count() < 3 {
        return None;
    }
    let idx = MONTHS.iter().position(|m| {
        *m == w || (w.len() == 3 && m.starts_with(&w)) || (w == "sept" && *m == "september")
    })?;
    u32::try_from(idx + 1).ok()
}

/// A month name in English or another language ([`OTHER_MONTHS`]).
pub fn any_month_number(word: &str) -> Option<u32> {
    month_number(word).or_else(|| {
        let w = word.trim_end_matches('.').to_lowercase();
        let idx = OTHER_MONTHS
            .iter()
            .position(|ms| ms.contains(&w.as_str()))?;
        u32::try_from(idx + 1).ok()
    })
}

const WEEKDAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// `Monday`, `mondays`, `Mon`, `Tues`: 0 (Monday) to 6. A three-letter abbreviation counts
/// only capitalised (`sat`, `sun` and `wed` are words).
pub fn weekday_number(word: &str) -> Option<u8> {
    let w = word.trim_end_matches('.').to_lowercase();
    let w = w
        .strip_suffix('s')
        .filter(|x| x.ends_with("day"))
        .unwrap_or(&w);
    if let Some(i) = WEEKDAYS.iter().position(|d| *d == w) {
        return u8::try_from(i).ok();
    }
    let capitalised = word.chars().next().is_some_and(char::is_uppercase);
    let abbr = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    let long = ["mon", "tues", "wed", "thur", "thurs", "fri", "sat", "sun"];
    if !capitalised {
        return None;
    }
    if let Some(i) = abbr.iter().position(|d| *d == w) {
        return u8::try_from(i).ok();
    }
    let i = long.iter().position(|d| *d == w)?;
    u8::try_from(match i {
        0 => 0,
        1 => 1,
        2 => 2,
        3 | 4 => 3,
        5 => 4,
        6 => 5,
        _ => 6,
    })
    .ok()
}

/// Cardinal number words: their value.
pub fn cardinal_word(word: &str) -> Option<u64> {
    const SMALL: [&str; 20] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ];
    const TENS: [&str; 8] = [
        "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    ];
    let w = word.to_lowercase();
    if let Some(i) = SMALL.iter().position(|x| *x == w) {
        return u64::try_from(i).ok();
    }
    if let Some(i) = TENS.iter().position(|x| *x == w) {
        return u64::try_from(20 + i * 10).ok();
    }
    match w.as_str() {
        "dozen" => Some(12),
        "fourty" => Some(40),
        // The tens in the other languages an operator writes in.
        "diez" | "dix" | "zehn" | "dieci" => Some(10),
        "doce" | "douze" | "zw\u{f6}lf" | "dodici" => Some(12),
        "veinte" | "vingt" | "zwanzig" | "venti" => Some(20),
        "treinta" | "trente" | "drei\u{df}ig" | "trenta" => Some(30),
        "cuarenta" | "quarante" | "vierzig" | "quaranta" => Some(40),
        "cincuenta" | "cinquante" | "f\u{fc}nfzig" | "cinquanta" => Some(50),
        "sesenta" | "soixante" | "sechzig" | "sessanta" => Some(60),
        "setenta" | "siebzig" | "settanta" => Some(70),
        "ochenta" | "achtzig" | "ottanta" => Some(80),
        "noventa" | "neunzig" | "novanta" => Some(90),
        "cien" | "ciento" | "hundert" | "cento" => Some(100),
        "mil" | "mille" | "tausend" => Some(1000),
        _ => None,
    }
}

/// Fractions and ratios in words: `half` (0.5), `quarter` (0.25) outside a time,
/// `double`/`doubled` (2x), `tripled` (3x), `quadrupled` (4x).
pub fn fraction_word(word: &str) -> Option<&'static str> {
    match word.to_lowercase().as_str() {
        "half" => Some("0.5"),
        "quarter" => Some("0.25"),
        "double" | "doubled" | "twofold" => Some("2x"),
        "triple" | "tripled" | "threefold" => Some("3x"),
        "quadruple" | "quadrupled" | "fourfold" => Some("4x"),
        "tenfold" => Some("10x"),
        _ => None,
    }
}

/// Acronyms written in the letters of Roman numerals (`CD`, `CLI`, `MD`, `XL`, `DC`).
const ROMAN_ACRONYMS: &[&str] = &[
    "CC", "CD", "CI", "CL", "CLI", "CM", "CV", "DC", "DI", "DL", "DIV", "LI", "MC", "MD", "MDX",
    "MI", "MIX", "ML", "MM", "VI", "XL", "XXL", "XXX",
];

/// A Roman numeral in capitals (`LXXX` 80, `XII` 12), written canonically, that is not a
/// common acronym.
pub fn roman_numeral(word: &str) -> Option<u64> {
    if word.len() < 2 || ROMAN_ACRONYMS.contains(&word) {
        return None;
    }
    let val = |c: char| -> Option<u64> {
        Some(match c {
            'I' => 1,
            'V' => 5,
            'X' => 10,
            'L' => 50,
            'C' => 100,
            'D' => 500,
            'M' => 1000,
            _ => return None,
        })
    };
    let digits: Vec<u64> = word.chars().map(val).collect::<Option<_>>()?;
    let mut signed = 0i64;
    for (i, d) in digits.iter().enumerate() {
        let d = i64::try_from(*d).ok()?;
        match digits.get(i + 1) {
            Some(next) if i64::try_from(*next).ok()? > d => signed -= d,
            _ => signed += d,
        }
    }
    let total = u64::try_from(signed).ok()?;
    // Only the canonical spelling of the value (`IIII`, `IC` are not numerals).
    let mut n = total;
    let mut canon = String::new();
    for (v, s) in [
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ] {
        while n >= v {
            canon.push_str(s);
            n -= v;
        }
    }
    (canon == word && total > 0).then_some(total)
}

/// Ordinal number words: their value (`first` 1, `thirtieth` 30, `hundredth` 100).
pub fn ordinal_word(word: &str) -> Option<u64> {
    const SMALL: [&str; 20] = [
        "zeroth",
        "first",
        "second",
        "third",
        "fourth",
        "fifth",
        "sixth",
        "seventh",
        "eighth",
        "ninth",
        "tenth",
        "eleventh",
        "twelfth",
        "thirteenth",
        "fourteenth",
        "fifteenth",
        "sixteenth",
        "seventeenth",
        "eighteenth",
        "nineteenth",
    ];
    const TENS: [&str; 8] = [
        "twentieth",
        "thirtieth",
        "fortieth",
        "fiftieth",
        "sixtieth",
        "seventieth",
        "eightieth",
        "ninetieth",
    ];
    let w = word.to_lowercase();
    if let Some(i) = SMALL.iter().position(|x| *x == w) {
        return u64::try_from(i).ok();
    }
    if let Some(i) = TENS.iter().position(|x| *x == w) {
        return u64::try_from(20 + i * 10).ok();
    }
    match w.as_str() {
        "hundredth" => Some(100),
        "thousandth" => Some(1000),
        "millionth" => Some(1_000_000),
        _ => None,
    }
}

/// Scale words: `hundred`, `thousand`, `million`, `billion`.
pub fn scale_word(word: &str) -> Option<u64> {
    match word.to_lowercase().as_str() {
        "hundred" => Some(100),
        "thousand" => Some(1000),
        "million" => Some(1_000_000),
        "billion" => Some(1_000_000_000),
        _ => None,
    }
}

/// Multiplier words: `twice` (2), `thrice` (3).
pub fn multiplier_word(word: &str) -> Option<u64> {
    match word.to_lowercase().as_str() {
        "twice" => Some(2),
        "thrice" => Some(3),
        _ => None,
    }
}

/// Words that name a quantity without a value a reader could check (`dozens`, `hundreds`,
/// `thousands`, `millions`): a fact with no value, shown only verbatim.
pub fn vague_quantity_word(word: &str) -> bool {
    matches!(
        word.to_lowercase().as_str(),
        "dozens" | "hundreds" | "thousands" | "millions" | "billions" | "tens"
    )
}

/// Days named relative to when the text was written (`today`, `yesterday`): a date no
/// reader can check without that moment, shown only verbatim.
pub fn relative_day_word(word: &str) -> bool {
    matches!(
        word.to_lowercase().as_str(),
        "today" | "yesterday" | "tomorrow" | "tonight" | "overnight"
    )
}

/// A day of the month as written before or after a month name: `30`, `30th`, `1st`.
pub fn day_number(word: &str) -> Option<u32> {
    let digits_end = word.bytes().take_while(u8::is_ascii_digit).count();
    let (d, suffix) = word.split_at(digits_end);
    if d.is_empty() || d.len() > 2 {
        return None;
    }
    if !matches!(
        suffix.to_ascii_lowercase().as_str(),
        "" | "st" | "nd" | "rd" | "th"
    ) {
        return None;
    }
    let n: u32 = d.parse().ok()?;
    (1..=31).contains(&n).then_some(n)
}

/// A four-digit year.
pub fn year_number(word: &str) -> Option<i32> {
    (word.len() == 4)
        .then(|| digits(word))
        .flatten()
        .and_then(|y| i32::try_from(y).ok())
        .filter(|y| (1900..=2200).contains(y))
}

/// A date from a month name and the words around it.
pub fn month_day(year: Option<i32>, month: u32, day: u32) -> Option<Date> {
    Date::new(year, month, day)
}

/// Orders evidence times for storage; any total order does.
pub fn cmp_times(a: &TimeOfDay, b: &TimeOfDay) -> Ordering {
    a.cmp(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_of_other_characters_is_none() {
        assert_eq!(parse_offset("+\u{30217}"), None);
        assert_eq!(parse_offset("-a\u{e9}b"), None);
        assert_eq!(parse_time("14:02+\u{30217}"), None);
        assert_eq!(parse_offset("+0100"), Some(60));
    }

    #[test]
    fn numbers_are_read_whole() {
        let v = |w: &str| read_number(w).map(|n| (n.value, n.plain));
        assert_eq!(v("50 154"), Some(("50154".into(), false)));
        assert_eq!(v("50'154"), Some(("50154".into(), false)));
        assert_eq!(v("50\u{2019}154"), Some(("50154".into(), false)));
        assert_eq!(v("2,5"), Some(("2.5".into(), false)));
        assert_eq!(v("1.234,5"), Some(("1234.5".into(), false)));
        assert_eq!(v("1,234.5"), Some(("1234.5".into(), false)));
        assert_eq!(v("154k"), Some(("154000".into(), false)));
        assert_eq!(v("2.5M"), Some(("2500000".into(), false)));
        assert_eq!(v("50x"), Some(("50".into(), false)));
        assert_eq!(v("2x"), Some(("2".into(), false)));
        assert_eq!(v("5s"), Some(("5".into(), true)));
        assert_eq!(v("12GB"), Some(("12".into(), true)));
        assert_eq!(v("50req/s"), Some(("50".into(), true)));
        assert_eq!(v("8O"), None);
        assert_eq!(v("80abc"), None);
        assert_eq!(v("1,23,4"), None);
        assert_eq!(v("\u{668}\u{660}"), None);
    }

    #[test]
    fn weekdays_of_dates() {
        let d = Date::new(Some(2026), 11, 30).unwrap();
        assert_eq!(d.weekday(), Some(0));
        assert_eq!(Date::new(Some(1970), 1, 1).unwrap().weekday(), Some(3));
        assert_eq!(Date::new(Some(2024), 2, 29).unwrap().weekday(), Some(3));
        assert_eq!(weekday_number("Sunday"), Some(6));
        assert_eq!(weekday_number("sun"), None);
        assert_eq!(weekday_number("Tues"), Some(1));
    }

    #[test]
    fn roman_numerals_in_their_canonical_spelling() {
        assert_eq!(roman_numeral("LXXX"), Some(80));
        assert_eq!(roman_numeral("XCIX"), Some(99));
        assert_eq!(roman_numeral("XC"), Some(90));
        assert_eq!(roman_numeral("IIII"), None);
        assert_eq!(roman_numeral("CLI"), None);
        assert_eq!(roman_numeral("HTTP"), None);
    }

    #[test]
    fn numbers_are_values() {
        assert_eq!(parse_number("5,000"), Some(("5000".into(), 4)));
        assert_eq!(parse_number("5000ms"), Some(("5000".into(), 4)));
        assert_eq!(parse_number("0.950"), Some(("0.95".into(), 4)));
        assert_eq!(parse_number("99th"), Some(("99".into(), 2)));
        assert_eq!(parse_number("007"), Some(("7".into(), 3)));
        assert_eq!(parse_number("1,234.50"), Some(("1234.5".into(), 6)));
        // A comma before other than three digits is a decimal comma.
        assert_eq!(parse_number("50,51"), Some(("50.51".into(), 4)));
        assert_eq!(parse_number("v2"), None);
        assert_eq!(parse_number("2.3.1"), None);
    }

    fn t(s: &str) -> TimeOfDay {
        parse_time(s).unwrap()
    }

    #[test]
    fn times_in_their_notations() {
        assert_eq!(t("14:02").secs, 14 * 3600 + 120);
        assert_eq!(t("14h02").secs, 14 * 3600 + 120);
        assert_eq!(
            t("14:02:03,363").precision,
            Precision::Fraction("363".into())
        );
        assert_eq!(t("14:02:03.363Z").zone, Zone::Offset(0));
        assert_eq!(t("15:02:03+01:00").zone, Zone::Offset(60));
        assert_eq!(t("09:02:03-05:00").zone, Zone::Offset(-300));
        assert_eq!(parse_time("25:00"), None);
        assert_eq!(parse_time("14:61"), None);
        assert_eq!(parse_time("14:02-14:05"), None);
        let pm = to_24h(t("2:02"), true).unwrap();
        assert!(pm.shown_by(&t("14:02:03.363Z")));
    }

    #[test]
    fn times_compare_at_the_claims_precision_and_in_utc_when_zoned() {
        let ev = t("2026-11-30T14:02:03.363Z".split_once('T').unwrap().1);
        assert!(t("14:02").shown_by(&ev));
        assert!(t("14:02:03").shown_by(&ev));
        assert!(t("14:02:03.36").shown_by(&ev));
        assert!(!t("14:02:04").shown_by(&ev));
        assert!(!t("02:03").shown_by(&ev));
        let cet = TimeOfDay {
            zone: Zone::Offset(60),
            ..t("15:02")
        };
        assert!(cet.shown_by(&ev));
        let wrong = TimeOfDay {
            zone: Zone::Offset(60),
            ..t("14:02")
        };
        assert!(!wrong.shown_by(&ev));
        // A more precise claim than the evidence is not shown.
        assert!(!t("14:02:03").shown_by(&t("14:02")));
    }

    #[test]
    fn dates_in_their_notations() {
        let d = |y, m, day| {
            DateRead::One(Date {
                year: Some(y),
                month: m,
                day: Some(day),
            })
        };
        assert_eq!(parse_date_word("2026-11-30"), Some(d(2026, 11, 30)));
        assert_eq!(parse_date_word("30/11/2026"), Some(d(2026, 11, 30)));
        assert_eq!(parse_date_word("11/30/2026"), Some(d(2026, 11, 30)));
        assert_eq!(parse_date_word("30.11.2026"), Some(d(2026, 11, 30)));
        assert_eq!(parse_date_word("30/Nov/2026"), Some(d(2026, 11, 30)));
        assert_eq!(parse_date_word("05/11/2026"), Some(DateRead::Ambiguous));
        assert_eq!(parse_date_word("11/11/2026"), Some(d(2026, 11, 11)));
        assert_eq!(parse_date_word("2026-13-01"), None);
        assert_eq!(parse_date_word("2026-11/30"), None);
    }

    #[test]
    fn zone_words() {
        assert_eq!(parse_zone_word("UTC"), Some(Zone::Offset(0)));
        assert_eq!(parse_zone_word("UTC+1"), Some(Zone::Offset(60)));
        assert_eq!(parse_zone_word("est"), Some(Zone::Offset(-300)));
        assert_eq!(parse_zone_word("IST"), Some(Zone::Ambiguous("IST".into())));
        assert_eq!(parse_zone_word("XYZ"), None);
    }
}
