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

    pub fn parse_rfc3339(s: &str) -> Result<Self, time::error::Parse> {
        let t = OffsetDateTime::parse(s, &Rfc3339)?;
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
    fn malformed_timestamp_is_an_error() {
        assert!(Timestamp::parse_rfc3339("yesterday").is_err());
    }
}
