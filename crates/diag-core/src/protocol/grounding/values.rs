//! Facts as values: numbers, times of day and dates as a reader reads them, whatever the
//! notation (openspec/specs/verified-evidence/spec.md, "Facts are compared as values").
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

/// A number written with optional thousands separators and an optional fraction, then an
/// optional unit, plural or ordinal suffix of letters (`502`, `5,000`, `0.95`, `502s`,
/// `5000ms`, `99th`, `12GB`): its canonical value and how many digits were written.
pub fn parse_number(word: &str) -> Option<(String, usize)> {
    let bytes = word.as_bytes();
    let mut i = 0;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    if i == 0 {
        return None;
    }
    let mut int_end = i;
    // Thousands groups: `,ddd` after 1–3 leading digits.
    if i <= 3 {
        let mut j = i;
        while bytes.get(j) == Some(&b',')
            && bytes
                .get(j + 1..j + 4)
                .is_some_and(|g| g.iter().all(u8::is_ascii_digit))
            && !bytes.get(j + 4).is_some_and(u8::is_ascii_digit)
        {
            j += 4;
        }
        int_end = j;
    }
    let mut k = int_end;
    let mut frac_range = k..k;
    if bytes.get(k) == Some(&b'.') && bytes.get(k + 1).is_some_and(u8::is_ascii_digit) {
        let start = k + 1;
        k = start;
        while k < bytes.len() && bytes[k].is_ascii_digit() {
            k += 1;
        }
        frac_range = start..k;
    }
    let suffix = word.get(k..)?;
    if !suffix.chars().all(char::is_alphabetic) {
        return None;
    }
    let int = word.get(..int_end)?;
    let frac = word.get(frac_range)?;
    let digits = int.bytes().filter(u8::is_ascii_digit).count() + frac.len();
    Some((canonical_number(int, frac), digits))
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
    /// An abbreviation that names several zones (`IST`, `CST`): comparable only with the
    /// same abbreviation.
    Ambiguous(String),
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

/// A date: year when written, month, day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    pub year: Option<i32>,
    pub month: u8,
    pub day: u8,
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
            day: u8::try_from(day).ok()?,
        })
    }

    /// Whether `self` (written in an answer) is shown by `evidence`: same month and day, and
    /// the same year when the answer writes one.
    pub fn shown_by(&self, evidence: &Date) -> bool {
        self.month == evidence.month
            && self.day == evidence.day
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

/// `November`, `Nov`, `Nov.`, `Sept`: 1–12, any case.
pub fn month_number(word: &str) -> Option<u32> {
    let w = word.trim_end_matches('.').to_lowercase();
    if w.len() < 3 {
        return None;
    }
    let idx = MONTHS.iter().position(|m| {
        *m == w || (w.len() == 3 && m.starts_with(&w)) || (w == "sept" && *m == "september")
    })?;
    u32::try_from(idx + 1).ok()
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
    fn numbers_are_values() {
        assert_eq!(parse_number("5,000"), Some(("5000".into(), 4)));
        assert_eq!(parse_number("5000ms"), Some(("5000".into(), 4)));
        assert_eq!(parse_number("0.950"), Some(("0.95".into(), 4)));
        assert_eq!(parse_number("99th"), Some(("99".into(), 2)));
        assert_eq!(parse_number("007"), Some(("7".into(), 3)));
        assert_eq!(parse_number("1,234.50"), Some(("1234.5".into(), 6)));
        assert_eq!(parse_number("50,51"), None);
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
                day,
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
