//! Time as `diag` sees it. Every timestamp and duration enters through [`Clock`], so a replay
//! can pin the clock and print byte-identical output.

use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// A point in time with millisecond precision, written as RFC 3339 in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    unix_ms: i64,
}

impl Timestamp {
    pub const fn from_unix_ms(unix_ms: i64) -> Self {
        Timestamp { unix_ms }
    }

    pub const fn unix_ms(self) -> i64 {
        self.unix_ms
    }

    /// Parses an RFC 3339 `date-time` (§5.6) strictly: `YYYY-MM-DD`, then `T` or `t`, then
    /// `hh:mm:ss`, an optional fraction, and `Z`, `z` or `±hh:mm`. The `time` crate's parser
    /// takes any character as the separator (RFC 3339's note allows a space "by mutual
    /// agreement"); diag's run files, stored rows and tool arguments are JSON Schema
    /// `date-time` values, which allow only `T`/`t`, so the shape is checked here first.
    pub fn parse_rfc3339(s: &str) -> Result<Self, TimestampError> {
        check_rfc3339_shape(s.as_bytes()).map_err(TimestampError::Shape)?;
        let t = OffsetDateTime::parse(s, &Rfc3339).map_err(TimestampError::Value)?;
        let ms = t.unix_timestamp_nanos() / 1_000_000;
        Ok(Timestamp {
            unix_ms: i64::try_from(ms).unwrap_or(i64::MAX),
        })
    }

    pub fn saturating_add(self, d: Duration) -> Self {
        let add = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp {
            unix_ms: self.unix_ms.saturating_add(add),
        }
    }
}

/// Why a text is not an RFC 3339 date-time.
#[derive(Debug, thiserror::Error)]
pub enum TimestampError {
    /// The text does not have the shape of RFC 3339 §5.6 (the message names the part).
    #[error("expected YYYY-MM-DDThh:mm:ss[.frac](Z|±hh:mm): {0}")]
    Shape(&'static str),
    /// The shape is right but a field is out of range (a 13th month, a 25th hour, …).
    #[error("{0}")]
    Value(time::error::Parse),
}

/// The grammar of RFC 3339 §5.6 `date-time`, with the lower-case `t` and `z` its note
/// allows; ranges are left to the `time` crate.
fn check_rfc3339_shape(b: &[u8]) -> Result<(), &'static str> {
    let digits = |from: usize, n: usize| {
        b.get(from..from + n)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(digits(0, 4) && at(4, b'-') && digits(5, 2) && at(7, b'-') && digits(8, 2)) {
        return Err("the date is not YYYY-MM-DD");
    }
    if !matches!(b.get(10), Some(b'T' | b't')) {
        return Err("the date and the time are not separated by `T`");
    }
    if !(digits(11, 2) && at(13, b':') && digits(14, 2) && at(16, b':') && digits(17, 2)) {
        return Err("the time is not hh:mm:ss");
    }
    let mut i = 19;
    if at(i, b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return Err("the fraction has no digits");
        }
    }
    match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => Ok(()),
        Some(b'+' | b'-')
            if i + 6 == b.len() && digits(i + 1, 2) && at(i + 3, b':') && digits(i + 4, 2) =>
        {
            // time-numoffset is hh:mm with hh ≤ 23 and mm ≤ 59 (the `time` crate allows ±25h).
            let two = |j: usize| (b[j] - b'0') * 10 + (b[j + 1] - b'0');
            if two(i + 1) > 23 || two(i + 4) > 59 {
                return Err("the offset is out of range");
            }
            Ok(())
        }
        _ => Err("the offset is not `Z` or ±hh:mm at the end"),
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = i128::from(self.unix_ms) * 1_000_000;
        match OffsetDateTime::from_unix_timestamp_nanos(nanos) {
            Ok(t) => {
                // RFC 3339 with exactly three fractional digits.
                write!(
                    f,
                    "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                    t.year(),
                    u8::from(t.month()),
                    t.day(),
                    t.hour(),
                    t.minute(),
                    t.second(),
                    t.millisecond()
                )
            }
            Err(_) => write!(f, "invalid-time({})", self.unix_ms),
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&s)
            .map_err(|e| serde::de::Error::custom(format_args!("not an RFC 3339 date-time ({e})")))
    }
}

/// The source of wall time and elapsed time.
/// A duration in whole milliseconds, saturating at `u64::MAX` (a duration that long is a
/// clock fault, not a figure to wrap).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub trait Clock: Send + Sync {
    /// The current wall time.
    fn now(&self) -> Timestamp;
    /// A monotonic reading, used only for durations.
    fn elapsed(&self) -> Duration;
}

/// The real clock: wall time anchored once, advanced monotonically.
pub struct SystemClock {
    anchor: Timestamp,
    started: Instant,
}

impl SystemClock {
    pub fn new() -> Self {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        SystemClock {
            anchor: Timestamp::from_unix_ms(unix_ms),
            started: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        self.anchor.saturating_add(self.started.elapsed())
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// A clock that reads `start` at its first reading and advances with real time from then: the
/// clock of a run pinned to an earlier instant (`diag ask --at`), whose recorded start is
/// exactly that instant and whose durations are still real.
#[derive(Debug)]
pub struct StartingClock {
    start: Timestamp,
    first_read: std::sync::OnceLock<Instant>,
}

impl StartingClock {
    pub fn new(start: Timestamp) -> Self {
        StartingClock {
            start,
            first_read: std::sync::OnceLock::new(),
        }
    }

    /// The time since the first reading; zero at the first reading itself, so it reads
    /// `start` exactly.
    fn since_first_read(&self) -> Duration {
        let mut first = false;
        let at = self.first_read.get_or_init(|| {
            first = true;
            Instant::now()
        });
        if first {
            Duration::ZERO
        } else {
            at.elapsed()
        }
    }
}

impl Clock for StartingClock {
    fn now(&self) -> Timestamp {
        self.start.saturating_add(self.since_first_read())
    }

    fn elapsed(&self) -> Duration {
        self.since_first_read()
    }
}

/// A clock pinned to one instant: every reading is the same, every duration zero.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub Timestamp);

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        self.0
    }

    fn elapsed(&self) -> Duration {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_round_trips_through_rfc3339() {
        let t = Timestamp::parse_rfc3339("2026-11-30T14:02:03.456Z").unwrap();
        assert_eq!(t.to_string(), "2026-11-30T14:02:03.456Z");
        let offset = Timestamp::parse_rfc3339("2026-11-30T16:02:03+02:00").unwrap();
        assert_eq!(offset.to_string(), "2026-11-30T14:02:03.000Z");
    }

    #[test]
    fn fixed_clock_never_moves() {
        let c = FixedClock(Timestamp::from_unix_ms(1_000));
        assert_eq!(c.now(), c.now());
        assert_eq!(c.elapsed(), Duration::ZERO);
    }

    #[test]
    fn a_starting_clock_reads_its_start_first_and_never_goes_back() {
        let start = Timestamp::parse_rfc3339("2026-11-30T14:11:00Z").unwrap();
        let c = StartingClock::new(start);
        assert_eq!(c.now(), start, "the first reading is the start itself");
        assert!(c.now() >= start);
        assert_eq!(StartingClock::new(start).elapsed(), Duration::ZERO);
    }

    #[test]
    fn malformed_timestamp_is_an_error() {
        assert!(Timestamp::parse_rfc3339("yesterday").is_err());
    }

    /// RFC 3339 §5.6 with its note: `T` or `t` between date and time, `Z` or `z`; the run-file
    /// schema (`format: date-time`) draws the same line, so the loader refuses what it refuses.
    #[test]
    fn only_rfc3339_date_times_parse() {
        for ok in [
            "2026-11-30T14:10:00Z",
            "2026-11-30t14:10:00z",
            "2026-11-30T14:10:00.5Z",
            "2026-11-30T14:10:00.123456789+05:30",
            "2026-11-30T14:10:00-00:00",
            "2016-12-31T23:59:60Z",
        ] {
            assert!(Timestamp::parse_rfc3339(ok).is_ok(), "{ok}");
        }
        for bad in [
            "2026-11-30A14:10:00Z",
            "2026-11-30 14:10:00Z",
            "2026-11-30_14:10:00Z",
            "2026-11-30\t14:10:00Z",
            "2026-11-30TT14:10:00Z",
            "2026-11-30T14:10:00",
            "2026-11-30T14:10Z",
            "2026-11-30T14:10:00.Z",
            "2026-11-30T14:10:00+0200",
            "2026-11-30T14:10:00+02",
            "2026-11-30T14:10:00Z ",
            " 2026-11-30T14:10:00Z",
            "2026-11-30T14:10:00ZZ",
            "26-11-30T14:10:00Z",
            "2026-1-30T14:10:00Z",
            "2026-11-30T4:10:00Z",
            "2026-13-30T14:10:00Z",
            "2026-11-30T24:10:00Z",
            "2026-11-30T14:10:00+24:00",
            "２026-11-30T14:10:00Z",
            "",
        ] {
            let err = Timestamp::parse_rfc3339(bad).expect_err(bad);
            assert!(!err.to_string().is_empty(), "{bad}");
        }
        let shape = Timestamp::parse_rfc3339("2026-11-30A14:10:00Z").unwrap_err();
        assert!(shape.to_string().contains("`T`"), "{shape}");
    }
}
