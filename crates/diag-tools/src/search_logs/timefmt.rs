//! Line timestamps as services write them.
//!
//! A file's format is detected once, from its first lines ([`TimeReader::detect`]): every
//! known kind is tried after 0 to 4 leading whitespace-separated tokens (an access log's
//! `host ident user`, a BGL or Thunderbird line's `- 1131566461`), and the (kind, position)
//! that reads the most sample lines wins; ties go to the earlier position, then to the order
//! of [`KINDS`]. Every other line is then read with that one parser, which costs a few
//! comparisons. A file whose sample reads with none of them is read line by line with every
//! kind at the start of the line ([`FileFormat::Auto`]).
//!
//! Kinds, with what they read:
//!
//! | kind | example | zone | year |
//! | --- | --- | --- | --- |
//! | `json` | `{"ts": "2026-11-30T14:02:03Z", …}` (fields below) | the value's, else the source's | the value's |
//! | `logfmt` | `ts=2026-12-03T19:40:00.123Z caller=main.go:1 level=info`; `time=`, `t=`, quoted or not, anywhere after a space; epoch seconds or milliseconds too | written, else the source's | written |
//! | `apt` | `Start-Date: 2026-05-09  07:29:02`, `End-Date: …` (apt's history and term logs) | the source's | written |
//! | `rfc5424` | `<34>1 2026-11-30T14:02:03.003Z host app …` | the timestamp's | written |
//! | `iso8601` | `2026-11-30T14:02:03.363Z`, `2026-11-30 14:02:03,978`, `2026/11/30 14:02:03`, `20261130T140203Z`, `2026-11-30 14:02:03 +0100`, `20261130-14:02:03:606`, `2026-11-30-14.02.03.675872` | written, else the source's | written |
//! | `clf` | `[30/Nov/2026:14:02:03 +0100]` (Apache/nginx common and combined) | written | written |
//! | `apache_error` | `[Mon Nov 30 14:02:03.123456 2026]` | the source's | written |
//! | `rfc3164` | `Nov 30 14:02:03`, `<34>Nov  3 14:02:03`, `Nov 30 2026 14:02:03` | the source's | inferred, or written |
//! | `klog` | `I1130 14:02:03.123456` | the source's | inferred |
//! | `logcat` | `11-30 14:02:03.811` | the source's | inferred |
//! | `yymmdd_hhmmss` | `261130 140203` (HDFS) | the source's | 20yy (19yy from 70) |
//! | `yy/mm/dd` | `26/11/30 14:02:03` (Spark) | the source's | 20yy (19yy from 70) |
//! | `epoch_ms` | `1796047323363` (13 digits) | UTC | written |
//! | `epoch_s` | `1796047323` or `1796047323.363` (10 digits) | UTC | written |
//!
//! JSON lines: the first present of `ts`, `time`, `timestamp`, `@timestamp`, `@t`, `datetime`,
//! `date`, `asctime`, `eventTime`, `timeMillis`, `instant` (`{"epochSecond", "nanoOfSecond"}`):
//! a string read with the text kinds, or a number of epoch seconds, milliseconds,
//! microseconds or nanoseconds told apart by magnitude.
//!
//! A time written without an offset is in the log source's zone ([`LogZone`], UTC unless
//! configured). A zone abbreviation written after an ISO or CLF time is understood when it
//! has one meaning (`UTC`, `GMT`, `EST`, `EDT`, `PST`, `CET`, `CEST`, `BST`, … in
//! `zone_abbreviation`); one with several (`IST`, `CST`, `CDT`, `AST`, `GST`) is read in the
//! source's configured zone, and without one the line is untimed (counted in
//! `untimed_lines`, never read as UTC); any other word after the time is the line's text. A time written without a year gets the latest year that does not put it more
//! than a day after the reference time (the file's modification time), so a syslog file
//! written from December into January reads as two years. Times are kept to the millisecond;
//! a leap second (`:60`) reads as the last millisecond of its minute.

use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use diag_core::clock::Timestamp;

const MS_PER_DAY: i64 = 86_400_000;
/// Lines read from a file's head to detect its format.
pub const DETECT_LINES: usize = 200;
/// Bytes read at most from a file's head to detect its format.
pub const DETECT_BYTES: usize = 64 * 1024;
/// Leading tokens a timestamp may follow.
const MAX_SKIP: u8 = 4;

/// The zone of times written without an offset.
#[derive(Clone)]
pub enum LogZone {
    /// A fixed offset from UTC, in seconds east.
    Fixed(i32),
    /// An IANA zone from the system's tz database (daylight saving time included). Local
    /// times that fall in a gap or an overlap are read as the offset before the transition.
    Named(String, jiff::tz::TimeZone),
}

impl LogZone {
    pub const UTC: LogZone = LogZone::Fixed(0);

    /// `UTC`, `Z`, `+01:00`, `-0530`, `+02`, or an IANA name such as `Europe/Berlin`.
    pub fn parse(text: &str) -> Result<LogZone, String> {
        let s = text.trim();
        if s.eq_ignore_ascii_case("utc") || s.eq_ignore_ascii_case("gmt") || s == "Z" {
            return Ok(LogZone::UTC);
        }
        if let Some(sign) = s.strip_prefix(['+', '-']).map(|_| s.as_bytes()[0]) {
            let mut p = P::new(&s.as_bytes()[1..]);
            let secs = p
                .offset_digits()
                .filter(|_| p.done())
                .ok_or_else(|| format!("`{s}` is not an offset such as +01:00, -0530 or +02"))?;
            return Ok(LogZone::Fixed(if sign == b'-' { -secs } else { secs }));
        }
        jiff::tz::db()
            .get(s)
            .map(|tz| LogZone::Named(s.to_string(), tz))
            .map_err(|_| {
                format!(
                    "`{s}` is not a time zone: use UTC, an offset such as +01:00, or a name \
                     from the tz database such as Europe/Berlin"
                )
            })
    }

    fn to_utc_ms(&self, c: &Civil) -> Option<i64> {
        match self {
            LogZone::Fixed(secs) => Some(c.local_ms()? - i64::from(*secs) * 1000),
            LogZone::Named(_, tz) => {
                let dt = jiff::civil::DateTime::new(
                    i16::try_from(c.year).ok()?,
                    c.month as i8,
                    c.day as i8,
                    c.hour as i8,
                    c.minute as i8,
                    c.second as i8,
                    i32::from(c.milli) * 1_000_000,
                )
                .ok()?;
                let ts = tz.to_ambiguous_timestamp(dt).compatible().ok()?;
                Some(ts.as_millisecond())
            }
        }
    }
}

impl fmt::Debug for LogZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string())
    }
}

impl fmt::Display for LogZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogZone::Fixed(0) => f.write_str("UTC"),
            LogZone::Fixed(s) => {
                let sign = if *s < 0 { '-' } else { '+' };
                let a = s.unsigned_abs();
                write!(f, "{sign}{:02}:{:02}", a / 3600, a % 3600 / 60)
            }
            LogZone::Named(name, _) => f.write_str(name),
        }
    }
}

impl PartialEq for LogZone {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for LogZone {}

/// A timestamp kind (see the module doc for examples).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Json,
    Logfmt,
    Apt,
    Rfc5424,
    Iso,
    Clf,
    ApacheError,
    Rfc3164,
    Klog,
    Logcat,
    YyMmDdHhMmSs,
    YySlash,
    EpochMillis,
    EpochSeconds,
}

/// Every kind, in the order that breaks ties at detection.
pub const KINDS: [Kind; 14] = [
    Kind::Json,
    Kind::Rfc5424,
    Kind::Iso,
    Kind::Clf,
    Kind::ApacheError,
    Kind::Rfc3164,
    Kind::Klog,
    Kind::Logcat,
    Kind::YyMmDdHhMmSs,
    Kind::YySlash,
    Kind::EpochMillis,
    Kind::EpochSeconds,
    // Last: a line that also starts with a time of another kind is read by that kind.
    Kind::Logfmt,
    Kind::Apt,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Json => "json",
            Kind::Logfmt => "logfmt",
            Kind::Apt => "apt",
            Kind::Rfc5424 => "rfc5424",
            Kind::Iso => "iso8601",
            Kind::Clf => "clf",
            Kind::ApacheError => "apache_error",
            Kind::Rfc3164 => "rfc3164",
            Kind::Klog => "klog",
            Kind::Logcat => "logcat",
            Kind::YyMmDdHhMmSs => "yymmdd_hhmmss",
            Kind::YySlash => "yy/mm/dd",
            Kind::EpochMillis => "epoch_ms",
            Kind::EpochSeconds => "epoch_s",
        }
    }
}

/// How a file's lines carry their time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// One kind, after `skip` leading tokens.
    Fixed { kind: Kind, skip: u8 },
    /// Nothing in the sample was readable: every kind is tried at the start of each line.
    Auto,
}

impl fmt::Display for FileFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileFormat::Fixed { kind, skip: 0 } => f.write_str(kind.name()),
            FileFormat::Fixed { kind, skip } => write!(f, "{} after {skip} tokens", kind.name()),
            FileFormat::Auto => f.write_str("auto"),
        }
    }
}

/// Reads the time of one file's lines.
#[derive(Debug, Clone)]
pub struct TimeReader {
    pub format: FileFormat,
    zone: LogZone,
    /// Yearless times are placed at most a day after this (Unix ms).
    reference_ms: i64,
    reference_year: i32,
}

impl TimeReader {
    pub fn new(format: FileFormat, zone: LogZone, reference: Timestamp) -> TimeReader {
        let reference_ms = reference.unix_ms();
        TimeReader {
            format,
            zone,
            reference_ms,
            reference_year: civil_from_days(reference_ms.div_euclid(MS_PER_DAY)).0,
        }
    }

    /// Detects the format from the head of a file (at most [`DETECT_LINES`] lines).
    pub fn detect(head: &[u8], zone: LogZone, reference: Timestamp) -> TimeReader {
        let mut reader = TimeReader::new(FileFormat::Auto, zone, reference);
        reader.format = reader.detect_format(head);
        reader
    }

    fn detect_format(&self, head: &[u8]) -> FileFormat {
        // (count, -skip, -priority) is maximised.
        let mut scores: Vec<(usize, Kind, u8)> = Vec::new();
        let mut bump = |kind: Kind, skip: u8| match scores
            .iter_mut()
            .find(|(_, k, s)| *k == kind && *s == skip)
        {
            Some(e) => e.0 += 1,
            None => scores.push((1, kind, skip)),
        };
        for line in head.split(|&b| b == b'\n').take(DETECT_LINES) {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if self.parse_kind(line, Kind::Json, 0).is_some() {
                bump(Kind::Json, 0);
                continue;
            }
            for skip in 0..=MAX_SKIP {
                let Some(at) = after_tokens(line, skip) else {
                    break;
                };
                for kind in &KINDS[1..] {
                    if self.parse_at(at, *kind).is_some() {
                        bump(*kind, skip);
                    }
                }
            }
        }
        let priority = |k: Kind| KINDS.iter().position(|x| *x == k).unwrap_or(usize::MAX);
        scores
            .into_iter()
            .max_by(|a, b| {
                a.0.cmp(&b.0)
                    .then(b.2.cmp(&a.2))
                    .then(priority(b.1).cmp(&priority(a.1)))
            })
            .map_or(FileFormat::Auto, |(_, kind, skip)| FileFormat::Fixed {
                kind,
                skip,
            })
    }

    /// The time of a line (without its newline), or `None` when it has none this reader can
    /// read.
    pub fn line_time(&self, line: &[u8]) -> Option<Timestamp> {
        let ms = match self.format {
            FileFormat::Fixed { kind, skip } => self.parse_kind(line, kind, skip),
            FileFormat::Auto => KINDS.iter().find_map(|k| self.parse_kind(line, *k, 0)),
        }?;
        Some(Timestamp::from_unix_ms(ms))
    }

    /// Whether the line's time is written with a zone abbreviation of several meanings
    /// (`IST`, `CST`) and the source has no zone configured to read it in: the line is
    /// untimed, and the lines below it do not inherit a time from above it.
    pub fn unplaceable(&self, line: &[u8]) -> bool {
        if !matches!(self.zone, LogZone::Fixed(0)) {
            return false;
        }
        let ambiguous = |kind: Kind, skip: u8| -> bool {
            let Some(s) = after_tokens(line, skip) else {
                return false;
            };
            let mut p = P::new(s);
            let parsed = match kind {
                Kind::Iso => iso(&mut p).is_some(),
                Kind::Rfc5424 => {
                    p.priority().is_some()
                        && p.digits_1_to(2).is_some()
                        && p.lit(b' ').is_some()
                        && iso(&mut p).is_some()
                }
                Kind::Clf => clf(&mut p).is_some(),
                _ => false,
            };
            parsed && p.ambiguous_zone
        };
        match self.format {
            FileFormat::Fixed { kind, skip } => ambiguous(kind, skip),
            FileFormat::Auto => KINDS.iter().any(|k| ambiguous(*k, 0)),
        }
    }

    fn parse_kind(&self, line: &[u8], kind: Kind, skip: u8) -> Option<i64> {
        if kind == Kind::Json {
            return self.json_time(line);
        }
        self.parse_at(after_tokens(line, skip)?, kind)
    }

    /// Parses `kind` at the start of `s` (an optional `[` already skipped).
    fn parse_at(&self, s: &[u8], kind: Kind) -> Option<i64> {
        let mut p = P::new(s);
        let t = match kind {
            Kind::Json => return None,
            Kind::Logfmt => return self.logfmt(s),
            Kind::Apt => apt(&mut p)?,
            Kind::Iso => iso(&mut p)?,
            Kind::Rfc5424 => {
                p.priority()?;
                p.digits_1_to(2)?;
                p.lit(b' ')?;
                iso(&mut p)?
            }
            Kind::Clf => clf(&mut p)?,
            Kind::ApacheError => apache_error(&mut p)?,
            Kind::Rfc3164 => rfc3164(&mut p)?,
            Kind::Klog => klog(&mut p)?,
            Kind::Logcat => logcat(&mut p)?,
            Kind::YyMmDdHhMmSs => hdfs(&mut p)?,
            Kind::YySlash => yy_slash(&mut p)?,
            Kind::EpochMillis => return epoch(&mut p, 13),
            Kind::EpochSeconds => return epoch(&mut p, 10),
        };
        // `2026-11-30T14:02:03Z123` is not a timestamp followed by text.
        if p.peek().is_some_and(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        // An abbreviation with several meanings is read in the source's configured zone; a
        // source read as UTC has none configured, and the line is untimed: never a silent
        // shift.
        if p.ambiguous_zone && matches!(self.zone, LogZone::Fixed(0)) {
            return None;
        }
        self.resolve(&t)
    }

    /// A logfmt line's time: the first `ts=`, `time=` or `t=` key (at the line's start or
    /// after a space) whose value, quoted or not, is an ISO 8601 time or epoch seconds or
    /// milliseconds (`ts=2026-12-03T19:40:00.123Z caller=main.go:1 level=info`, the format
    /// of Prometheus, Alertmanager, Loki, Grafana and most Go services).
    fn logfmt(&self, s: &[u8]) -> Option<i64> {
        for key in [&b"ts="[..], b"time=", b"t="] {
            let mut from = 0;
            while let Some(pos) = s
                .get(from..)
                .and_then(|rest| rest.windows(key.len()).position(|w| w == key))
            {
                let at = from + pos;
                from = at + 1;
                if at > 0 && s[at - 1] != b' ' {
                    continue;
                }
                let mut value = &s[at + key.len()..];
                if let Some(v) = value.strip_prefix(b"\"") {
                    value = v;
                }
                let ends = |p: &P| !p.peek().is_some_and(|b| b.is_ascii_alphanumeric());
                let mut p = P::new(value);
                if let Some(t) = iso(&mut p) {
                    if ends(&p) {
                        return self.resolve(&t);
                    }
                }
                for digits in [13, 10] {
                    let mut p = P::new(value);
                    if let Some(ms) = epoch(&mut p, digits) {
                        return Some(ms);
                    }
                }
            }
        }
        None
    }

    fn resolve(&self, t: &Parsed) -> Option<i64> {
        let mut c = t.civil;
        if t.yearless {
            return self.infer_year(c);
        }
        if !c.valid() {
            return None;
        }
        match t.offset {
            Some(secs) => {
                c.leap_second();
                Some(c.local_ms()? - i64::from(secs) * 1000)
            }
            None => {
                c.leap_second();
                self.zone.to_utc_ms(&c)
            }
        }
    }

    /// The latest year, from the reference's next year back, that puts the time at most a
    /// day after the reference (eight years back at most, for 29 February).
    fn infer_year(&self, mut c: Civil) -> Option<i64> {
        c.leap_second();
        for year in (self.reference_year - 7..=self.reference_year + 1).rev() {
            c.year = year;
            if !c.valid() {
                continue;
            }
            let ms = self.zone.to_utc_ms(&c)?;
            if ms <= self.reference_ms.saturating_add(MS_PER_DAY) {
                return Some(ms);
            }
        }
        None
    }

    fn json_time(&self, line: &[u8]) -> Option<i64> {
        let first = line.iter().find(|b| !b.is_ascii_whitespace())?;
        if *first != b'{' {
            return None;
        }
        let fields: JsonTimeFields = serde_json::from_slice(line).ok()?;
        self.json_fields_time(&fields)
    }

    fn json_fields_time(&self, f: &JsonTimeFields) -> Option<i64> {
        [
            &f.ts,
            &f.time,
            &f.timestamp,
            &f.at_timestamp,
            &f.at_t,
            &f.datetime,
            &f.date,
            &f.asctime,
            &f.event_time,
            &f.time_millis,
            &f.instant,
        ]
        .into_iter()
        .flatten()
        .find_map(|v| self.json_value_time(v))
    }

    fn json_value_time(&self, v: &Value) -> Option<i64> {
        match v {
            Value::String(s) => {
                let s = s.trim().as_bytes();
                KINDS[1..].iter().find_map(|k| {
                    let at = s.strip_prefix(b"[").unwrap_or(s);
                    self.parse_at(at, *k)
                })
            }
            Value::Number(n) => {
                let x = n.as_f64()?;
                // Epoch numbers carry their unit only in their size; these ranges do not
                // overlap for any date between 1973 and 5138.
                let ms = match x.abs() {
                    a if a < 1e11 => x * 1e3,
                    a if a < 1e14 => x,
                    a if a < 1e17 => x / 1e3,
                    _ => x / 1e6,
                };
                ms.is_finite().then(|| ms.floor() as i64)
            }
            // log4j2's JsonLayout: {"epochSecond": 1796047323, "nanoOfSecond": 363000000}
            Value::Object(o) => {
                let s = o.get("epochSecond")?.as_i64()?;
                let n = o.get("nanoOfSecond").and_then(Value::as_i64).unwrap_or(0);
                Some(s.checked_mul(1000)? + n / 1_000_000)
            }
            _ => None,
        }
    }

    /// The time and `service` field of a JSON line, reading it once.
    pub fn json_meta(&self, line: &[u8]) -> Option<(Option<Timestamp>, Option<String>)> {
        let first = line.iter().find(|b| !b.is_ascii_whitespace())?;
        if *first != b'{' {
            return None;
        }
        let f: JsonTimeFields = serde_json::from_slice(line).ok()?;
        let service = match &f.service {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Object(o)) => o.get("name").and_then(Value::as_str).map(str::to_string),
            _ => None,
        };
        let time = match self.format {
            FileFormat::Fixed {
                kind: Kind::Json, ..
            }
            | FileFormat::Auto => self.json_fields_time(&f).map(Timestamp::from_unix_ms),
            FileFormat::Fixed { .. } => self.line_time(line),
        };
        Some((time, service))
    }
}

/// The fields of a JSON line that carry its time or service; serde skips the rest of the
/// object without building it.
#[derive(Deserialize)]
struct JsonTimeFields {
    ts: Option<Value>,
    time: Option<Value>,
    timestamp: Option<Value>,
    #[serde(rename = "@timestamp")]
    at_timestamp: Option<Value>,
    #[serde(rename = "@t")]
    at_t: Option<Value>,
    datetime: Option<Value>,
    date: Option<Value>,
    asctime: Option<Value>,
    #[serde(rename = "eventTime")]
    event_time: Option<Value>,
    #[serde(rename = "timeMillis")]
    time_millis: Option<Value>,
    instant: Option<Value>,
    service: Option<Value>,
}

/// What follows `skip` whitespace-separated tokens (leading whitespace skipped), without one
/// leading `[`.
fn after_tokens(line: &[u8], skip: u8) -> Option<&[u8]> {
    let mut i = line.iter().position(|b| !b.is_ascii_whitespace())?;
    for _ in 0..skip {
        i += line[i..].iter().position(|b| b.is_ascii_whitespace())?;
        i += line[i..].iter().position(|b| !b.is_ascii_whitespace())?;
    }
    let rest = &line[i..];
    Some(rest.strip_prefix(b"[").unwrap_or(rest))
}

/// A calendar date and wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Civil {
    year: i32,
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
    second: u8,
    milli: u16,
}

impl Civil {
    fn valid(&self) -> bool {
        (1..=12).contains(&self.month)
            && self.day >= 1
            && self.day <= days_in_month(self.year, self.month)
            && self.hour < 24
            && self.minute < 60
            && self.second < 61
            && (1..=9999).contains(&self.year)
    }

    fn leap_second(&mut self) {
        if self.second == 60 {
            self.second = 59;
            self.milli = 999;
        }
    }

    /// Milliseconds since the epoch of this wall-clock time read as UTC.
    fn local_ms(&self) -> Option<i64> {
        if !self.valid() {
            return None;
        }
        let days = days_from_civil(self.year, self.month, self.day);
        let secs =
            i64::from(self.hour) * 3600 + i64::from(self.minute) * 60 + i64::from(self.second);
        Some(days * MS_PER_DAY + secs * 1000 + i64::from(self.milli))
    }
}

fn is_leap(y: i32) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i32, m: u8) -> u8 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i32, m: u8, d: u8) -> i64 {
    let y = i64::from(y) - i64::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i32, u8, u8) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (i32::try_from(y).unwrap_or(i32::MAX), m, d)
}

/// A parsed time before its zone and year are settled.
struct Parsed {
    civil: Civil,
    /// Seconds east of UTC, when written.
    offset: Option<i32>,
    yearless: bool,
}

impl Parsed {
    fn local(civil: Civil) -> Parsed {
        Parsed {
            civil,
            offset: None,
            yearless: false,
        }
    }
}

/// A byte cursor for the parsers below.
struct P<'a> {
    s: &'a [u8],
    i: usize,
    /// A zone abbreviation with more than one meaning (`IST`, `CST`) followed the time.
    ambiguous_zone: bool,
}

impl<'a> P<'a> {
    fn new(s: &'a [u8]) -> Self {
        P {
            s,
            i: 0,
            ambiguous_zone: false,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn peek_at(&self, k: usize) -> Option<u8> {
        self.s.get(self.i + k).copied()
    }

    fn done(&self) -> bool {
        self.i >= self.s.len()
    }

    fn lit(&mut self, b: u8) -> Option<()> {
        (self.peek()? == b).then(|| self.i += 1)
    }

    fn one_of(&mut self, set: &[u8]) -> Option<u8> {
        let b = self.peek().filter(|b| set.contains(b))?;
        self.i += 1;
        Some(b)
    }

    /// Exactly `n` digits.
    fn num(&mut self, n: usize) -> Option<u32> {
        let d = self.s.get(self.i..self.i + n)?;
        if !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.i += n;
        Some(d.iter().fold(0, |acc, b| acc * 10 + u32::from(b - b'0')))
    }

    /// One to `max` digits.
    fn digits_1_to(&mut self, max: usize) -> Option<u32> {
        let n = self.s[self.i.min(self.s.len())..]
            .iter()
            .take(max + 1)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if n == 0 || n > max {
            return None;
        }
        self.num(n)
    }

    fn spaces(&mut self) -> usize {
        let n = self.s[self.i.min(self.s.len())..]
            .iter()
            .take_while(|b| **b == b' ')
            .count();
        self.i += n;
        n
    }

    /// `<PRI>` of syslog.
    fn priority(&mut self) -> Option<()> {
        self.lit(b'<')?;
        self.digits_1_to(3)?;
        self.lit(b'>')
    }

    /// English month abbreviation, any case.
    fn month_name(&mut self) -> Option<u8> {
        const M: [&[u8; 3]; 12] = [
            b"jan", b"feb", b"mar", b"apr", b"may", b"jun", b"jul", b"aug", b"sep", b"oct", b"nov",
            b"dec",
        ];
        let w = self.s.get(self.i..self.i + 3)?;
        let pos = M.iter().position(|m| w.eq_ignore_ascii_case(&m[..]))?;
        self.i += 3;
        Some(pos as u8 + 1)
    }

    fn weekday_name(&mut self) -> Option<()> {
        const D: [&[u8; 3]; 7] = [b"mon", b"tue", b"wed", b"thu", b"fri", b"sat", b"sun"];
        let w = self.s.get(self.i..self.i + 3)?;
        D.iter()
            .any(|d| w.eq_ignore_ascii_case(&d[..]))
            .then(|| self.i += 3)
    }

    /// `HH<sep>MM<sep>SS` with `sep` `:` (or the given one).
    fn hms(&mut self, sep: u8) -> Option<(u8, u8, u8)> {
        let h = self.num(2)? as u8;
        self.lit(sep)?;
        let m = self.num(2)? as u8;
        self.lit(sep)?;
        let s = self.num(2)? as u8;
        Some((h, m, s))
    }

    /// A fraction after `.` or `,` (when a digit follows), as milliseconds; 0 when absent.
    fn fraction(&mut self) -> u16 {
        if matches!(self.peek(), Some(b'.' | b','))
            && self.peek_at(1).is_some_and(|b| b.is_ascii_digit())
        {
            self.i += 1;
            return self.fraction_digits();
        }
        0
    }

    fn fraction_digits(&mut self) -> u16 {
        let mut milli: u16 = 0;
        let mut scale = 100u16;
        while let Some(d) = self.peek().filter(u8::is_ascii_digit) {
            milli += u16::from(d - b'0') * scale;
            scale /= 10;
            self.i += 1;
        }
        milli
    }

    /// `HH[:MM]` or `HHMM` after a sign, in seconds.
    fn offset_digits(&mut self) -> Option<i32> {
        let h = self.num(2)? as i32;
        let m = if self.peek() == Some(b':') {
            self.i += 1;
            self.num(2)? as i32
        } else {
            self.num(2).map_or(0, |m| m as i32)
        };
        (h <= 23 && m <= 59).then_some(h * 3600 + m * 60)
    }

    /// An optional zone after a time: `Z`, `±HH:MM`, `±HHMM`, `±HH`, or ` ±HHMM`, ` UTC`,
    /// ` GMT`. Leaves the cursor alone when there is none.
    fn zone(&mut self) -> Option<i32> {
        let save = self.i;
        match self.peek() {
            Some(b'Z' | b'z') => {
                self.i += 1;
                return Some(0);
            }
            Some(sign @ (b'+' | b'-')) => {
                self.i += 1;
                if let Some(secs) = self.offset_digits() {
                    return Some(if sign == b'-' { -secs } else { secs });
                }
            }
            Some(b' ') => {
                self.i += 1;
                if let Some(sign @ (b'+' | b'-')) = self.peek() {
                    self.i += 1;
                    if let Some(secs) = self.num(4).map(|v| (v / 100 * 3600 + v % 100 * 60) as i32)
                    {
                        if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
                            return Some(if sign == b'-' { -secs } else { secs });
                        }
                    }
                } else {
                    // A zone abbreviation: 2–5 capitals, then no letter or digit.
                    let len = self.s[self.i..]
                        .iter()
                        .take_while(|b| b.is_ascii_uppercase())
                        .count();
                    let end = self.i + len;
                    let ends = !self.s.get(end).is_some_and(|b| b.is_ascii_alphanumeric());
                    if (2..=5).contains(&len) && ends {
                        let word = &self.s[self.i..end];
                        match zone_abbreviation(word) {
                            Some(ZoneWord::Offset(secs)) => {
                                self.i = end;
                                return Some(secs);
                            }
                            Some(ZoneWord::Ambiguous) => {
                                self.i = end;
                                self.ambiguous_zone = true;
                                return None;
                            }
                            None => {}
                        }
                    }
                }
            }
            _ => {}
        }
        self.i = save;
        None
    }
}

/// What a zone abbreviation written after a time says.
enum ZoneWord {
    /// Seconds east of UTC.
    Offset(i32),
    /// More than one zone goes by it: read only with the source's configured `time_zone`.
    Ambiguous,
}

/// The zone abbreviations a log line may write after its time (openspec/specs/tools/spec.md,
/// "Zones written in a line"): UTC and GMT, the North American and European abbreviations
/// with one meaning, and a few others; `IST`, `CST`, `CDT`, `AST` and `GST` have several.
/// A word shaped like a standard or daylight-time abbreviation that is not in the table
/// (`BRST`, `IRDT`: 3–5 capitals ending in `ST` or `DT`, not a common word such as `POST`
/// or `LIST`) is an unknown zone, placed only by a configured `time_zone` as an ambiguous one
/// is. Any other word is the line's text, as before.
fn zone_abbreviation(word: &[u8]) -> Option<ZoneWord> {
    const H: i32 = 3600;
    let offset = match word {
        b"UTC" | b"GMT" | b"UT" | b"WET" => 0,
        b"WEST" | b"BST" | b"CET" | b"MET" => H,
        b"CEST" | b"MEST" | b"EET" | b"SAST" => 2 * H,
        b"EEST" | b"MSK" => 3 * H,
        b"PKT" => 5 * H,
        b"WIB" => 7 * H,
        b"HKT" | b"SGT" | b"AWST" => 8 * H,
        b"JST" | b"KST" => 9 * H,
        b"ACST" => 9 * H + 1800,
        b"AEST" => 10 * H,
        b"ACDT" => 10 * H + 1800,
        b"AEDT" => 11 * H,
        b"NZST" => 12 * H,
        b"NZDT" => 13 * H,
        b"NDT" => -2 * H - 1800,
        b"ADT" => -3 * H,
        b"NST" => -3 * H - 1800,
        b"EDT" => -4 * H,
        b"EST" => -5 * H,
        b"MDT" => -6 * H,
        b"MST" | b"PDT" => -7 * H,
        b"PST" | b"AKDT" => -8 * H,
        b"AKST" => -9 * H,
        b"HST" => -10 * H,
        b"IST" | b"CST" | b"CDT" | b"AST" | b"GST" => return Some(ZoneWord::Ambiguous),
        _ if unknown_zone_shape(word) => return Some(ZoneWord::Ambiguous),
        _ => return None,
    };
    Some(ZoneWord::Offset(offset))
}

/// 3–5 capitals ending in `ST` or `DT` (a standard or daylight time's abbreviation), and not
/// one of the common words of that shape a log line may start with after its time.
fn unknown_zone_shape(word: &[u8]) -> bool {
    const WORDS: &[&[u8]] = &[
        b"POST", b"LIST", b"REST", b"TEST", b"LAST", b"HOST", b"COST", b"BEST", b"MOST", b"JUST",
        b"PAST", b"FAST", b"MUST", b"LOST", b"EAST", b"WEST", b"FIRST", b"WORST", b"GHOST",
        b"BOOST", b"TRUST", b"BURST", b"EXIST", b"FEAST", b"TOAST", b"ROAST", b"BOAST", b"MIST",
        b"DUST", b"RUST", b"GUST", b"NEST", b"PEST", b"VEST", b"ZEST", b"HIST", b"DIST", b"INST",
        b"CAST", b"VAST", b"OAST", b"HOIST", b"JOIST", b"MOIST", b"WRIST", b"TWIST", b"GIST",
        b"FIST", b"CYST",
    ];
    (3..=5).contains(&word.len())
        && (word.ends_with(b"ST") || word.ends_with(b"DT"))
        && !WORDS.contains(&word)
}

fn civil(
    year: u32,
    month: u32,
    day: u32,
    (hour, minute, second): (u8, u8, u8),
    milli: u16,
) -> Civil {
    Civil {
        year: year as i32,
        month: month as u8,
        day: day as u8,
        hour,
        minute,
        second,
        milli,
    }
}

fn two_digit_year(yy: u32) -> u32 {
    if yy >= 70 {
        1900 + yy
    } else {
        2000 + yy
    }
}

/// ISO 8601 and its common relatives (see the module doc).
fn iso(p: &mut P) -> Option<Parsed> {
    let year = p.num(4)?;
    let (month, day, compact) = match p.one_of(b"-/") {
        Some(sep) => {
            let m = p.num(2)?;
            p.lit(sep)?;
            (m, p.num(2)?, false)
        }
        None => (p.num(2)?, p.num(2)?, true),
    };
    let date_sep = p.one_of(b"Tt -_")?;
    let (hms, milli) = if compact && date_sep == b'T' {
        // Basic format: 20261130T140203[.fff]
        let h = p.num(2)? as u8;
        let m = p.num(2)? as u8;
        let s = p.num(2)? as u8;
        ((h, m, s), p.fraction())
    } else {
        let h = p.num(2)? as u8;
        let sep = p.one_of(b":.")?;
        let m = p.num(2)? as u8;
        p.lit(sep)?;
        let s = p.num(2)? as u8;
        let milli = if sep == b'.' && p.peek() == Some(b'.') {
            p.fraction()
        } else if compact
            && p.peek() == Some(b':')
            && p.peek_at(1).is_some_and(|b| b.is_ascii_digit())
        {
            // 20171223-22:15:29:606
            p.i += 1;
            p.fraction_digits()
        } else {
            p.fraction()
        };
        ((h, m, s), milli)
    };
    if compact && date_sep != b'T' && date_sep != b'-' {
        return None;
    }
    let offset = p.zone();
    Some(Parsed {
        civil: civil(year, month, day, hms, milli),
        offset,
        yearless: false,
    })
}

/// apt's history and term logs: `Start-Date: 2026-05-09  07:29:02`, `End-Date: …`, in the
/// machine's local time (the source's zone).
fn apt(p: &mut P) -> Option<Parsed> {
    let rest = p.s.get(p.i..)?;
    let prefix = [&b"Start-Date:"[..], b"End-Date:"]
        .into_iter()
        .find(|k| rest.starts_with(k))?;
    p.i += prefix.len();
    if p.spaces() == 0 {
        return None;
    }
    let year = p.num(4)?;
    p.lit(b'-')?;
    let month = p.num(2)?;
    p.lit(b'-')?;
    let day = p.num(2)?;
    if p.spaces() == 0 {
        return None;
    }
    let hms = p.hms(b':')?;
    Some(Parsed::local(civil(year, month, day, hms, 0)))
}

/// `30/Nov/2026:14:02:03 +0100`
fn clf(p: &mut P) -> Option<Parsed> {
    let day = p.num(2)?;
    p.lit(b'/')?;
    let month = u32::from(p.month_name()?);
    p.lit(b'/')?;
    let year = p.num(4)?;
    p.lit(b':')?;
    let hms = p.hms(b':')?;
    let milli = p.fraction();
    let offset = p.zone();
    Some(Parsed {
        civil: civil(year, month, day, hms, milli),
        offset,
        yearless: false,
    })
}

/// `Mon Nov 30 14:02:03.123456 2026`
fn apache_error(p: &mut P) -> Option<Parsed> {
    p.weekday_name()?;
    p.lit(b' ')?;
    let month = u32::from(p.month_name()?);
    if p.spaces() == 0 {
        return None;
    }
    let day = p.digits_1_to(2)?;
    p.lit(b' ')?;
    let hms = p.hms(b':')?;
    let milli = p.fraction();
    p.lit(b' ')?;
    let year = p.num(4)?;
    Some(Parsed::local(civil(year, month, day, hms, milli)))
}

/// `Nov 30 14:02:03`, `<34>Nov  3 14:02:03`, `Nov 30 2026 14:02:03`
fn rfc3164(p: &mut P) -> Option<Parsed> {
    if p.peek() == Some(b'<') {
        p.priority()?;
    }
    let month = u32::from(p.month_name()?);
    if p.spaces() == 0 {
        return None;
    }
    let day = p.digits_1_to(2)?;
    p.lit(b' ')?;
    let year = if p.peek_at(4) == Some(b' ') {
        let y = p.num(4)?;
        p.lit(b' ')?;
        Some(y)
    } else {
        None
    };
    let hms = p.hms(b':')?;
    let milli = p.fraction();
    Some(Parsed {
        civil: civil(year.unwrap_or(0), month, day, hms, milli),
        offset: None,
        yearless: year.is_none(),
    })
}

/// `I1130 14:02:03.123456`
fn klog(p: &mut P) -> Option<Parsed> {
    p.one_of(b"IWEF")?;
    let month = p.num(2)?;
    let day = p.num(2)?;
    p.lit(b' ')?;
    let hms = p.hms(b':')?;
    let milli = p.fraction();
    Some(Parsed {
        civil: civil(0, month, day, hms, milli),
        offset: None,
        yearless: true,
    })
}

/// `11-30 14:02:03.811`
fn logcat(p: &mut P) -> Option<Parsed> {
    let month = p.num(2)?;
    p.lit(b'-')?;
    let day = p.num(2)?;
    p.lit(b' ')?;
    let hms = p.hms(b':')?;
    let milli = p.fraction();
    Some(Parsed {
        civil: civil(0, month, day, hms, milli),
        offset: None,
        yearless: true,
    })
}

/// `261130 140203`
fn hdfs(p: &mut P) -> Option<Parsed> {
    let yy = p.num(2)?;
    let month = p.num(2)?;
    let day = p.num(2)?;
    p.lit(b' ')?;
    let h = p.num(2)? as u8;
    let m = p.num(2)? as u8;
    let s = p.num(2)? as u8;
    Some(Parsed::local(civil(
        two_digit_year(yy),
        month,
        day,
        (h, m, s),
        0,
    )))
}

/// `26/11/30 14:02:03`
fn yy_slash(p: &mut P) -> Option<Parsed> {
    let yy = p.num(2)?;
    p.lit(b'/')?;
    let month = p.num(2)?;
    p.lit(b'/')?;
    let day = p.num(2)?;
    p.lit(b' ')?;
    let hms = p.hms(b':')?;
    let milli = p.fraction();
    Some(Parsed::local(civil(
        two_digit_year(yy),
        month,
        day,
        hms,
        milli,
    )))
}

/// Epoch seconds (10 digits, optional fraction) or milliseconds (13 digits), as a whole token.
fn epoch(p: &mut P, digits: usize) -> Option<i64> {
    let n = p.s.iter().take_while(|b| b.is_ascii_digit()).count();
    if n != digits {
        return None;
    }
    let v = i64::from(p.num(digits.min(9))?);
    let rest = i64::from(p.num(digits - 9)?);
    let mut value = v * 10i64.pow((digits - 9) as u32) + rest;
    if digits == 10 {
        value *= 1000;
        if p.peek() == Some(b'.') && p.peek_at(1).is_some_and(|b| b.is_ascii_digit()) {
            p.i += 1;
            value += i64::from(p.fraction_digits());
        }
    }
    if p.peek()
        .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'.')
    {
        return None;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn reader(kind: Kind, skip: u8) -> TimeReader {
        TimeReader::new(
            FileFormat::Fixed { kind, skip },
            LogZone::UTC,
            at("2026-12-01T15:00:00Z"),
        )
    }

    fn read(r: &TimeReader, line: &str) -> Option<String> {
        r.line_time(line.as_bytes()).map(|t| t.to_string())
    }

    #[test]
    fn civil_day_counts_round_trip() {
        for days in [-719_468, -1, 0, 1, 10_957, 20_787, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(days_from_civil(2026, 11, 30), 20_787);
    }

    #[test]
    fn a_zone_abbreviation_in_the_line_is_understood_or_the_line_is_untimed() {
        let r = reader(Kind::Iso, 0);
        // PostgreSQL with log_timezone = 'America/New_York', either side of the DST change.
        assert_eq!(
            read(
                &r,
                "2026-12-03 14:44:48.890 EST [24943] LOG:  checkpoint starting"
            )
            .as_deref(),
            Some("2026-12-03T19:44:48.890Z")
        );
        assert_eq!(
            read(&r, "2026-03-08 01:30:00.000 EST [1] LOG: a").as_deref(),
            Some("2026-03-08T06:30:00.000Z")
        );
        assert_eq!(
            read(&r, "2026-03-08 03:30:00.000 EDT [1] LOG: b").as_deref(),
            Some("2026-03-08T07:30:00.000Z")
        );
        assert_eq!(
            read(&r, "2026-07-01 09:00:00 PDT x").as_deref(),
            Some("2026-07-01T16:00:00.000Z")
        );
        assert_eq!(
            read(&r, "2026-07-01 09:00:00 CEST x").as_deref(),
            Some("2026-07-01T07:00:00.000Z")
        );
        assert_eq!(
            read(&r, "2026-07-01 09:00:00 GMT x").as_deref(),
            Some("2026-07-01T09:00:00.000Z")
        );
        // An abbreviation with several meanings, and no zone configured: untimed.
        assert_eq!(read(&r, "2026-07-01 09:00:00 IST x"), None);
        assert_eq!(read(&r, "2026-07-01 09:00:00 CST x"), None);
        // An abbreviation diag does not know (Brasília summer time): untimed, never UTC.
        assert_eq!(read(&r, "2026-01-10 09:00:00 BRST x"), None);
        assert_eq!(read(&r, "2026-07-01 09:00:00 IRDT x"), None);
        // Common words of that shape stay the line's text.
        assert_eq!(
            read(&r, "2026-07-01 09:00:00 POST /api/orders 502").as_deref(),
            Some("2026-07-01T09:00:00.000Z")
        );
        assert_eq!(
            read(&r, "2026-07-01 09:00:00 FIRST attempt").as_deref(),
            Some("2026-07-01T09:00:00.000Z")
        );
        // With the source's zone configured, it is read in that zone.
        let kolkata = TimeReader::new(
            FileFormat::Fixed {
                kind: Kind::Iso,
                skip: 0,
            },
            LogZone::parse("Asia/Kolkata").unwrap(),
            at("2026-12-01T15:00:00Z"),
        );
        assert_eq!(
            read(&kolkata, "2026-07-01 09:00:00 IST x").as_deref(),
            Some("2026-07-01T03:30:00.000Z")
        );
        // A word that is not a zone is the line's text, as before.
        assert_eq!(
            read(&r, "2026-07-01 09:00:00 INFO started").as_deref(),
            Some("2026-07-01T09:00:00.000Z")
        );
        assert_eq!(
            read(&r, "2026-07-01 09:00:00 GET /health").as_deref(),
            Some("2026-07-01T09:00:00.000Z")
        );
    }

    #[test]
    fn logfmt_and_apt_lines_are_read_and_detected() {
        let utc = at("2026-12-05T00:00:00Z");
        let prometheus = "ts=2026-12-03T19:40:00.123Z caller=main.go:1234 level=info \
                          msg=\"Starting Prometheus Server\"\n\
                          ts=2026-12-03T19:40:01.456Z caller=web.go:600 level=info msg=ready\n";
        let r = TimeReader::detect(prometheus.as_bytes(), LogZone::UTC, utc);
        assert_eq!(r.format.to_string(), "logfmt");
        assert_eq!(
            read(
                &r,
                "ts=2026-12-03T19:40:00.123Z caller=main.go:1234 level=info"
            )
            .as_deref(),
            Some("2026-12-03T19:40:00.123Z")
        );
        // `time=` quoted with an offset, `t=` anywhere after a space, epoch values.
        for (line, want) in [
            (
                "level=warn time=\"2026-12-03T20:40:00+01:00\" msg=x",
                "2026-12-03T19:40:00.000Z",
            ),
            (
                "level=info msg=x t=2026-12-03T19:40:00Z",
                "2026-12-03T19:40:00.000Z",
            ),
            ("level=info ts=1796327200 msg=x", "2026-12-03T19:46:40.000Z"),
            (
                "level=info ts=1796327200123 msg=x",
                "2026-12-03T19:46:40.123Z",
            ),
        ] {
            let r = TimeReader::detect(line.as_bytes(), LogZone::UTC, utc);
            assert_eq!(read(&r, line).as_deref(), Some(want), "{line}");
        }
        // `at=` is not `t=`.
        let r = reader(Kind::Logfmt, 0);
        assert_eq!(read(&r, "level=info at=2026-12-03T19:40:00Z"), None);
        let apt = "Start-Date: 2026-05-09  07:29:02\n\
                   Commandline: apt-get install -y prometheus\n\
                   Install: prometheus:amd64 (2.45.3+ds-2)\n\
                   End-Date: 2026-05-09  07:29:40\n";
        let berlin = LogZone::parse("Europe/Berlin").unwrap();
        let r = TimeReader::detect(apt.as_bytes(), berlin, utc);
        assert_eq!(r.format.to_string(), "apt");
        assert_eq!(
            read(&r, "Start-Date: 2026-05-09  07:29:02").as_deref(),
            Some("2026-05-09T05:29:02.000Z")
        );
        assert_eq!(
            read(&r, "End-Date: 2026-05-09  07:29:40").as_deref(),
            Some("2026-05-09T05:29:40.000Z")
        );
        assert_eq!(read(&r, "Commandline: apt-get install -y prometheus"), None);
    }

    #[test]
    fn iso_variants() {
        let r = reader(Kind::Iso, 0);
        for (line, want) in [
            (
                "2026-11-30T14:02:03Z error",
                Some("2026-11-30T14:02:03.000Z"),
            ),
            (
                "2026-11-30T14:02:03.456789Z x",
                Some("2026-11-30T14:02:03.456Z"),
            ),
            (
                "2026-11-30 14:02:03,120 ERROR",
                Some("2026-11-30T14:02:03.120Z"),
            ),
            (
                "[2026-11-30T16:02:03+02:00] x",
                Some("2026-11-30T14:02:03.000Z"),
            ),
            (
                "2026-11-30T16:02:03+0200 x",
                Some("2026-11-30T14:02:03.000Z"),
            ),
            ("2026-11-30T16:02:03+02 x", Some("2026-11-30T14:02:03.000Z")),
            (
                "2026-11-30 16:02:03.5 +0200 x",
                Some("2026-11-30T14:02:03.500Z"),
            ),
            (
                "2026-11-30 14:02:03 UTC x",
                Some("2026-11-30T14:02:03.000Z"),
            ),
            (
                "2026/11/30 14:02:03 [error] 7#7: x",
                Some("2026-11-30T14:02:03.000Z"),
            ),
            ("20261130T140203Z x", Some("2026-11-30T14:02:03.000Z")),
            (
                "20261130-14:02:03:606|Step",
                Some("2026-11-30T14:02:03.606Z"),
            ),
            (
                "2026-11-30-14.02.03.675872 R02",
                Some("2026-11-30T14:02:03.675Z"),
            ),
            (
                "2026-11-30 14:02:03, Info CBS",
                Some("2026-11-30T14:02:03.000Z"),
            ),
            ("2026-11-30 14:02:03 - x", Some("2026-11-30T14:02:03.000Z")),
            (
                "2026-12-31T23:59:60Z leap",
                Some("2026-12-31T23:59:59.999Z"),
            ),
            (
                "  2026-11-30T14:02:03-01:00",
                Some("2026-11-30T15:02:03.000Z"),
            ),
            ("2026-11-30T14:02:03Zabc", None),
            ("2026-13-30T14:02:03Z", None),
            ("2026-02-29T14:02:03Z", None),
            ("2026-11-30T24:02:03Z", None),
            ("Nov 30 14:02:03 host x", None),
            ("error at 2026-11-30T14:02:03Z", None),
            ("", None),
        ] {
            assert_eq!(read(&r, line).as_deref(), want, "{line}");
        }
    }

    #[test]
    fn zones_apply_to_local_times_only() {
        let berlin = LogZone::parse("Europe/Berlin").unwrap();
        let r = TimeReader::new(
            FileFormat::Fixed {
                kind: Kind::Iso,
                skip: 0,
            },
            berlin,
            at("2026-12-01T00:00:00Z"),
        );
        // Winter (+01:00), summer (+02:00), and a written offset that wins.
        assert_eq!(
            read(&r, "2026-11-30 15:02:03 x").unwrap(),
            "2026-11-30T14:02:03.000Z"
        );
        assert_eq!(
            read(&r, "2026-07-01 15:02:03 x").unwrap(),
            "2026-07-01T13:02:03.000Z"
        );
        assert_eq!(
            read(&r, "2026-07-01T15:02:03Z x").unwrap(),
            "2026-07-01T15:02:03.000Z"
        );
        let r = TimeReader::new(
            FileFormat::Fixed {
                kind: Kind::Iso,
                skip: 0,
            },
            LogZone::parse("-05:30").unwrap(),
            at("2026-12-01T00:00:00Z"),
        );
        assert_eq!(
            read(&r, "2026-11-30 08:32:03 x").unwrap(),
            "2026-11-30T14:02:03.000Z"
        );
        for ok in ["UTC", "Z", "+01:00", "-0530", "+02", "America/New_York"] {
            assert!(LogZone::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["Mars/Olympus", "+25:00", "+1", "1:00", ""] {
            assert!(LogZone::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(LogZone::parse("-0530").unwrap().to_string(), "-05:30");
    }

    #[test]
    fn syslog_years_come_from_the_reference_time() {
        let r = TimeReader::new(
            FileFormat::Fixed {
                kind: Kind::Rfc3164,
                skip: 0,
            },
            LogZone::UTC,
            at("2027-01-02T10:00:00Z"),
        );
        assert_eq!(
            read(&r, "Dec 31 23:59:58 host cron[1]: x").unwrap(),
            "2026-12-31T23:59:58.000Z"
        );
        assert_eq!(
            read(&r, "Jan  1 00:00:01 host cron[1]: x").unwrap(),
            "2027-01-01T00:00:01.000Z"
        );
        // A day of slack for clocks and zones; beyond that, the year before.
        assert_eq!(
            read(&r, "Jan  3 09:00:00 host x").unwrap(),
            "2027-01-03T09:00:00.000Z"
        );
        assert_eq!(
            read(&r, "Jan  3 11:00:00 host x").unwrap(),
            "2026-01-03T11:00:00.000Z"
        );
        assert_eq!(
            read(&r, "<34>Oct 11 22:14:15 mymachine su: x").unwrap(),
            "2026-10-11T22:14:15.000Z"
        );
        assert_eq!(
            read(&r, "Oct 11 2019 22:14:15 x").unwrap(),
            "2019-10-11T22:14:15.000Z"
        );
        // 29 February goes back to the last leap year.
        assert_eq!(
            read(&r, "Feb 29 12:00:00 x").unwrap(),
            "2024-02-29T12:00:00.000Z"
        );
        assert_eq!(read(&r, "Foo 29 12:00:00 x"), None);
    }

    #[test]
    fn every_kind_reads_its_example() {
        let cases: [(Kind, u8, &str, &str); 14] = [
            (
                Kind::Rfc5424,
                0,
                "<165>1 2026-11-30T14:02:03.003Z mymachine evntslog - ID47 x",
                "2026-11-30T14:02:03.003Z",
            ),
            (
                Kind::Clf,
                3,
                "127.0.0.1 - frank [30/Nov/2026:15:02:03 +0100] \"GET / HTTP/1.1\" 200 2326",
                "2026-11-30T14:02:03.000Z",
            ),
            (
                Kind::ApacheError,
                0,
                "[Mon Nov 30 14:02:03 2026] [error] x",
                "2026-11-30T14:02:03.000Z",
            ),
            (
                Kind::ApacheError,
                0,
                "[Mon Nov 30 14:02:03.123456 2026] [core:error] x",
                "2026-11-30T14:02:03.123Z",
            ),
            (
                Kind::ApacheError,
                0,
                "[Fri Dec  4 04:47:44 2026] [notice] x",
                "2026-12-04T04:47:44.000Z",
            ),
            (
                Kind::Iso,
                0,
                "2026-11-30 14:02:03,978 INFO [main] org.apache.X: y",
                "2026-11-30T14:02:03.978Z",
            ),
            (
                Kind::Klog,
                0,
                "I1130 14:02:03.123456    1 controller.go:42] x",
                "2026-11-30T14:02:03.123Z",
            ),
            (
                Kind::Logcat,
                0,
                "11-30 14:02:03.811  1702  2395 D WindowManager: x",
                "2026-11-30T14:02:03.811Z",
            ),
            (
                Kind::YyMmDdHhMmSs,
                0,
                "261130 140203 148 INFO dfs.DataNode: x",
                "2026-11-30T14:02:03.000Z",
            ),
            (
                Kind::YySlash,
                0,
                "26/11/30 14:02:03 INFO spark.X: y",
                "2026-11-30T14:02:03.000Z",
            ),
            (
                Kind::EpochSeconds,
                0,
                "1796047323 x",
                "2026-11-30T14:02:03.000Z",
            ),
            (
                Kind::EpochSeconds,
                0,
                "1796047323.363    921 192.168.0.68 TCP_MISS/200",
                "2026-11-30T14:02:03.363Z",
            ),
            (
                Kind::EpochSeconds,
                1,
                "- 1796047323 2026.11.30 R02-M1 x",
                "2026-11-30T14:02:03.000Z",
            ),
            (
                Kind::EpochMillis,
                0,
                "1796047323363 x",
                "2026-11-30T14:02:03.363Z",
            ),
        ];
        for (kind, skip, line, want) in cases {
            assert_eq!(
                read(&reader(kind, skip), line).as_deref(),
                Some(want),
                "{line}"
            );
        }
        assert_eq!(read(&reader(Kind::EpochSeconds, 0), "179604732 x"), None);
        assert_eq!(read(&reader(Kind::EpochSeconds, 0), "17960473231 x"), None);
    }

    #[test]
    fn json_fields() {
        let r = reader(Kind::Json, 0);
        for (line, want) in [
            (
                r#"{"ts":"2026-11-30T14:02:03Z","msg":"x"}"#,
                "2026-11-30T14:02:03.000Z",
            ),
            (
                r#"{"time":1796047323,"msg":"x"}"#,
                "2026-11-30T14:02:03.000Z",
            ),
            (r#"{"timestamp":1796047323363}"#, "2026-11-30T14:02:03.363Z"),
            (
                r#"{"@timestamp":"2026-11-30T15:02:03.363+01:00"}"#,
                "2026-11-30T14:02:03.363Z",
            ),
            (
                r#"{"@t":"2026-11-30T14:02:03.3630000Z","@mt":"x"}"#,
                "2026-11-30T14:02:03.363Z",
            ),
            (
                r#"{"asctime":"2026-11-30 14:02:03,363","levelname":"ERROR"}"#,
                "2026-11-30T14:02:03.363Z",
            ),
            (
                r#"{"instant":{"epochSecond":1796047323,"nanoOfSecond":363000000}}"#,
                "2026-11-30T14:02:03.363Z",
            ),
            (
                r#"{"timeMillis":1796047323363}"#,
                "2026-11-30T14:02:03.363Z",
            ),
        ] {
            assert_eq!(read(&r, line).as_deref(), Some(want), "{line}");
        }
        assert_eq!(read(&r, "{ broken"), None);
        assert_eq!(read(&r, r#"{"msg":"no time"}"#), None);
        let (t, svc) = r
            .json_meta(br#"{"ts":"2026-11-30T14:00:00Z","service":{"name":"pay"}}"#)
            .unwrap();
        assert_eq!(t.unwrap().to_string(), "2026-11-30T14:00:00.000Z");
        assert_eq!(svc.as_deref(), Some("pay"));
    }

    #[test]
    fn detection_picks_the_kind_and_position_that_read_most() {
        let cases: [(&str, FileFormat); 8] = [
            (
                "2026-11-30T14:02:03Z a\n\tat x\n2026-11-30T14:02:04Z b\n",
                FileFormat::Fixed {
                    kind: Kind::Iso,
                    skip: 0,
                },
            ),
            (
                "Nov 30 14:02:03 host a\nNov 30 14:02:04 host b\n",
                FileFormat::Fixed {
                    kind: Kind::Rfc3164,
                    skip: 0,
                },
            ),
            (
                "10.0.0.1 - - [30/Nov/2026:14:02:03 +0000] \"GET / HTTP/1.1\" 200 1\n",
                FileFormat::Fixed {
                    kind: Kind::Clf,
                    skip: 3,
                },
            ),
            (
                "- 1131566461 2005.11.09 dn228 Nov 9 12:01:01 dn228/dn228 crond: x\n",
                FileFormat::Fixed {
                    kind: Kind::EpochSeconds,
                    skip: 1,
                },
            ),
            (
                "nova-api.log.1.2017-05-16_13:53:08 2017-05-16 00:00:00.008 25746 INFO x\n",
                FileFormat::Fixed {
                    kind: Kind::Iso,
                    skip: 1,
                },
            ),
            (
                "{\"ts\":\"2026-11-30T14:02:03Z\"}\n{\"ts\":\"2026-11-30T14:02:04Z\"}\n",
                FileFormat::Fixed {
                    kind: Kind::Json,
                    skip: 0,
                },
            ),
            (
                "<34>1 2026-11-30T14:02:03Z host app - - - x\n",
                FileFormat::Fixed {
                    kind: Kind::Rfc5424,
                    skip: 0,
                },
            ),
            ("no times\nat all\n", FileFormat::Auto),
        ];
        for (head, want) in cases {
            let r = TimeReader::detect(head.as_bytes(), LogZone::UTC, at("2026-12-01T00:00:00Z"));
            assert_eq!(r.format, want, "{head}");
        }
    }
}
