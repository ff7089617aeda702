//! The run's clock as every agent is shown it (openspec/specs/agent-runtime/spec.md, "The
//! run's clock in every prompt"): the run's start time in UTC, which is "now" for the
//! question, its UTC date, the day a time written without a date means ("since 14:00"), and,
//! when the question states one in a form read exactly, the question's time window.
//!
//! It is built from the run's recorded `started_at` and question only, so a replay, whose clock
//! is pinned to the recorded start, shows every agent the same bytes.
//!
//! The window ([`question_window`]) is read from a few plain forms: "since 14:00", "since
//! 2:30pm UTC", "between 13:50 and 14:10", "from 13:50 to 14:10", "in the last 30 minutes",
//! "the past hour", "since 20 minutes ago", and RFC 3339 times ("since
//! 2026-12-03T19:43:00Z", "2026-12-03T19:43:00.000Z and later", as an alert's question says).
//! A clock time is on the latest day on which it is not after `now`. Anything the reading
//! cannot place exactly leaves the window out, and the Planner chooses one from the clock and
//! the question's words as before: a time in another zone ("14:00 CET"), a named day
//! ("yesterday", "Monday", "Nov 29", a date), or two readings that disagree.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::grounding::values::{self, Zone};

/// The `run_clock` member of every agent's declared input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunClock {
    /// The run's start time (RFC 3339, UTC, milliseconds): "now" for the question.
    pub now: Timestamp,
    /// The UTC date of `now` (`YYYY-MM-DD`).
    pub today: String,
    /// The time window the question states, as diag reads it; absent when it states none
    /// or one diag cannot place exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<QuestionWindow>,
}

/// A time window the question states: `since` to `until`, both in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionWindow {
    pub since: Timestamp,
    pub until: Timestamp,
}

impl RunClock {
    /// The clock of a run that started at `started_at`, without a window.
    pub fn at(started_at: Timestamp) -> RunClock {
        let text = started_at.to_string();
        // `Timestamp`'s text is `YYYY-MM-DDThh:mm:ss.mmmZ`; its date is what comes before `T`.
        let today = text.split('T').next().unwrap_or_default().to_string();
        RunClock {
            now: started_at,
            today,
            window: None,
        }
    }

    /// The clock of a run that started at `started_at` to answer `question`, with the
    /// question's window when [`question_window`] reads one.
    pub fn for_question(started_at: Timestamp, question: &str) -> RunClock {
        RunClock {
            window: question_window(question, started_at),
            ..RunClock::at(started_at)
        }
    }
}

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// Words for a part of a day or a span of days, which the grounding reader's month, weekday
/// and relative-day words ([`values`]) do not cover: a clock time beside them cannot be placed
/// on a day without guessing.
const DAY_PARTS: &[&str] = &[
    "night",
    "morning",
    "afternoon",
    "evening",
    "weekend",
    "week",
    "weeks",
    "days",
];

/// Words after a clock time that say its clock is the writer's own.
const LOCAL_WORDS: &[&str] = &["local", "localtime"];

/// One reading of the question: a window, or a sign that none can be read exactly.
enum Reading {
    Window(QuestionWindow),
    Unplaceable,
}

/// The time window `question` states, read against the run's clock `now` (module docs).
pub fn question_window(question: &str, now: Timestamp) -> Option<QuestionWindow> {
    let tokens = tokens(question);
    let mut windows: Vec<QuestionWindow> = Vec::new();
    let mut clock_read = false;
    let mut i = 0;
    while i < tokens.len() {
        let (reading, used, clock) = read_at(&tokens, i, now);
        match reading {
            Some(Reading::Window(w)) => {
                if w.since > w.until || w.until > now {
                    return None;
                }
                windows.push(w);
                clock_read |= clock;
            }
            Some(Reading::Unplaceable) => return None,
            None => {}
        }
        i += used.max(1);
    }
    // A clock time beside a named day is on that day, not on the run's. Read on the words as
    // written: a weekday's abbreviation counts only capitalised (`sat`, `sun` are words).
    if clock_read && question.split_whitespace().map(trim_word).any(names_a_day) {
        return None;
    }
    let first = *windows.first()?;
    windows.iter().all(|w| *w == first).then_some(first)
}

/// The question's words, lower-case, with surrounding punctuation removed.
fn tokens(question: &str) -> Vec<String> {
    question
        .split_whitespace()
        .map(|w| trim_word(w).to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

fn trim_word(w: &str) -> &str {
    w.trim_matches(|c: char| matches!(c, ',' | ';' | '!' | '?' | '(' | ')' | '"' | '\'' | '`'))
        .trim_end_matches('.')
}

/// A month, a weekday or a day named relative to another (today aside: it is the run's), read
/// as grounding reads them, a part of a day, or a date.
fn names_a_day(word: &str) -> bool {
    let lower = word.to_lowercase();
    values::any_month_number(word).is_some()
        || values::weekday_number(word).is_some()
        || (values::relative_day_word(word) && lower != "today")
        || DAY_PARTS.contains(&lower.as_str())
        || is_date(word)
}

/// `YYYY-MM-DD` or a `YYYY/MM/DD` date on its own.
fn is_date(token: &str) -> bool {
    let b = token.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-' || *c == b'/',
            _ => c.is_ascii_digit(),
        })
}

/// What starts at `tokens[i]`: a reading (or none), how many tokens it used, and whether it
/// placed a clock time on the run's day.
fn read_at(tokens: &[String], i: usize, now: Timestamp) -> (Option<Reading>, usize, bool) {
    let word = tokens[i].as_str();
    let rest = &tokens[i + 1..];
    match word {
        "since" | "after" => {
            if let Some((since, used)) = absolute(rest) {
                return (Some(window(since, now)), 1 + used, false);
            }
            if let Some((ago, used)) = ago(rest) {
                return (Some(window(minus(now, ago), now)), 1 + used, false);
            }
            match clock(rest, now) {
                Some((Some(since), used)) => (Some(window(since, now)), 1 + used, true),
                Some((None, used)) => (Some(Reading::Unplaceable), 1 + used, false),
                None => (None, 1, false),
            }
        }
        "between" | "from" => {
            if let Some((since, used)) = absolute(rest) {
                let rest = &rest[used..];
                if rest.first().is_some_and(|w| is_joint(w)) {
                    if let Some((until, more)) = absolute(&rest[1..]) {
                        return (Some(window(since, until)), 2 + used + more, false);
                    }
                    return (Some(Reading::Unplaceable), 1 + used, false);
                }
                return match word {
                    "from" => (Some(window(since, now)), 1 + used, false),
                    _ => (Some(Reading::Unplaceable), 1 + used, false),
                };
            }
            let Some((start, used)) = clock_of_day(rest) else {
                return (None, 1, false);
            };
            let rest = &rest[used..];
            if !rest.first().is_some_and(|w| is_joint(w)) {
                // "from 14:00" alone reads as "since 14:00"; "between 14:00" says too little.
                return match (word, start) {
                    ("from", Some(start)) => (
                        Some(window(latest_on_or_before(start, now), now)),
                        1 + used,
                        true,
                    ),
                    _ => (Some(Reading::Unplaceable), 1 + used, false),
                };
            }
            let Some((end, more)) = clock_of_day(&rest[1..]) else {
                return (Some(Reading::Unplaceable), 1 + used, false);
            };
            match (start, end) {
                (Some(start), Some(end)) => {
                    let until = latest_on_or_before(end, now);
                    let mut since = day_start(until) + start;
                    if since > until.unix_ms() {
                        since -= DAY_MS;
                    }
                    (
                        Some(window(Timestamp::from_unix_ms(since), until)),
                        2 + used + more,
                        true,
                    )
                }
                _ => (Some(Reading::Unplaceable), 2 + used + more, false),
            }
        }
        "last" | "past" => match span(rest) {
            Some((ms, used)) => (Some(window(minus(now, ms), now)), 1 + used, false),
            None => (None, 1, false),
        },
        _ => {
            // "2026-12-03T19:43:00Z and later" / "or later" / "onwards".
            if let Some((since, used)) = absolute(&tokens[i..]) {
                let after = &tokens[i + used..];
                let later = matches!(
                    after.first().map(String::as_str),
                    Some("onwards" | "onward")
                ) || (matches!(after.first().map(String::as_str), Some("and" | "or"))
                    && after.get(1).map(String::as_str) == Some("later"));
                if later {
                    return (Some(window(since, now)), used, false);
                }
            }
            (None, 1, false)
        }
    }
}

fn is_joint(word: &str) -> bool {
    matches!(word, "and" | "to" | "until" | "till" | "-" | "–")
}

fn window(since: Timestamp, until: Timestamp) -> Reading {
    Reading::Window(QuestionWindow { since, until })
}

/// An RFC 3339 time at the start of `rest`: the time and the tokens used.
fn absolute(rest: &[String]) -> Option<(Timestamp, usize)> {
    let word = rest.first()?;
    // Tokens are lower-case; RFC 3339 allows `t` and `z`.
    Timestamp::parse_rfc3339(word).ok().map(|t| (t, 1))
}

/// "20 minutes ago", "an hour ago": the span in milliseconds and the tokens used.
fn ago(rest: &[String]) -> Option<(i64, usize)> {
    let (ms, used) = span(rest)?;
    (rest.get(used).map(String::as_str) == Some("ago")).then_some((ms, used + 1))
}

/// "30 minutes", "2 hours", "hour", "an hour", "30m", "2h", "15 min": milliseconds and tokens.
fn span(rest: &[String]) -> Option<(i64, usize)> {
    let first = rest.first()?;
    if let Some(ms) = unit(first) {
        return Some((ms, 1));
    }
    let count = |w: &str| -> Option<i64> {
        match w {
            "a" | "an" | "one" => Some(1),
            "two" => Some(2),
            "three" => Some(3),
            "five" => Some(5),
            "ten" => Some(10),
            "fifteen" => Some(15),
            "thirty" => Some(30),
            _ => w.parse::<i64>().ok().filter(|n| (1..=10_000).contains(n)),
        }
    };
    if let Some(n) = count(first) {
        let ms = unit(rest.get(1)?)?;
        return Some((n.checked_mul(ms)?, 2));
    }
    // "30m", "2h", "90min".
    let digits: String = first.chars().take_while(char::is_ascii_digit).collect();
    let n = digits
        .parse::<i64>()
        .ok()
        .filter(|n| (1..=10_000).contains(n))?;
    let ms = unit(&first[digits.len()..])?;
    Some((n.checked_mul(ms)?, 1))
}

fn unit(word: &str) -> Option<i64> {
    match word {
        "minute" | "minutes" | "min" | "mins" | "m" => Some(MINUTE_MS),
        "hour" | "hours" | "hr" | "hrs" | "h" => Some(HOUR_MS),
        _ => None,
    }
}

/// A clock time at the start of `rest` placed on the latest day on which it is not after
/// `now`: `Some((Some(time), used))`, or `Some((None, used))` for a clock time in another
/// zone; `None` when `rest` does not start with a clock time.
fn clock(rest: &[String], now: Timestamp) -> Option<(Option<Timestamp>, usize)> {
    let (of_day, used) = clock_of_day(rest)?;
    Some((of_day.map(|ms| latest_on_or_before(ms, now)), used))
}

/// A clock time at the start of `rest` as milliseconds into a UTC day (`None` when a zone
/// other than UTC follows it or is attached) and the tokens used. The time, `am`/`pm` and the
/// zone are read by grounding's readers ([`values::parse_time`], [`values::meridiem`],
/// [`values::parse_zone_word`]), so a zone it knows is never taken for UTC here.
fn clock_of_day(rest: &[String]) -> Option<(Option<i64>, usize)> {
    let word = rest.first()?.as_str();
    // "2pm", "2:30pm", "2 pm", "2:30 p.m.".
    let (body, pm, mut used) = match (word.strip_suffix("am"), word.strip_suffix("pm")) {
        (Some(b), _) if !b.is_empty() => (b, Some(false), 1),
        (_, Some(b)) if !b.is_empty() => (b, Some(true), 1),
        _ => match rest.get(1).and_then(|w| values::meridiem(w)) {
            Some(pm) => (word, Some(pm), 2),
            None => (word, None, 1),
        },
    };
    let time = match values::parse_time(body) {
        Some(t) => t,
        // A bare hour only with `am`/`pm`.
        None if pm.is_some() && !body.is_empty() && body.bytes().all(|b| b.is_ascii_digit()) => {
            values::TimeOfDay {
                secs: body.parse::<u32>().ok()?.checked_mul(3600)?,
                precision: values::Precision::Minute,
                zone: Zone::Unstated,
            }
        }
        None => return None,
    };
    let time = match pm {
        Some(pm) => values::to_24h(time, pm)?,
        None => time,
    };
    let mut zone = time.zone.clone();
    if zone == Zone::Unstated {
        match rest.get(used).map(String::as_str) {
            Some(w) if LOCAL_WORDS.contains(&w) => return Some((None, used + 1)),
            Some(w) => {
                let zone_word = values::parse_zone_word(w)
                    .or_else(|| values::parse_offset(w).map(Zone::Offset));
                if let Some(z) = zone_word {
                    zone = z;
                    used += 1;
                }
            }
            None => {}
        }
    }
    match zone {
        Zone::Unstated | Zone::Offset(0) => Some((Some(i64::from(time.secs) * 1000), used)),
        _ => Some((None, used)),
    }
}

fn minus(t: Timestamp, ms: i64) -> Timestamp {
    Timestamp::from_unix_ms(t.unix_ms().saturating_sub(ms))
}

/// Midnight UTC of the day `t` is on, in milliseconds.
fn day_start(t: Timestamp) -> i64 {
    t.unix_ms().div_euclid(DAY_MS) * DAY_MS
}

/// The time `of_day` milliseconds into the latest UTC day on which it is not after `now`.
fn latest_on_or_before(of_day: i64, now: Timestamp) -> Timestamp {
    let today = day_start(now) + of_day;
    Timestamp::from_unix_ms(if today > now.unix_ms() {
        today - DAY_MS
    } else {
        today
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_clock_is_the_start_time_and_its_utc_date() {
        let started = Timestamp::parse_rfc3339("2026-11-30T23:30:00-02:00").unwrap();
        let clock = RunClock::at(started);
        assert_eq!(
            serde_json::to_string(&clock).unwrap(),
            r#"{"now":"2026-12-01T01:30:00.000Z","today":"2026-12-01"}"#,
            "UTC, whatever offset the time was given in"
        );
        let back: RunClock = serde_json::from_str(&serde_json::to_string(&clock).unwrap()).unwrap();
        assert_eq!(back, clock);
    }

    fn at(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    /// The window read from `question` at `now`, as `since..until` text.
    fn read(question: &str, now: &str) -> Option<String> {
        question_window(question, at(now)).map(|w| format!("{}..{}", w.since, w.until))
    }

    #[test]
    fn a_clock_time_is_on_the_latest_day_it_is_not_after_now() {
        let now = "2026-11-30T14:11:00Z";
        let want = Some("2026-11-30T14:00:00.000Z..2026-11-30T14:11:00.000Z".to_string());
        for q in [
            "why does checkout return 502 since 14:00?",
            "why does checkout return 502 since 14:00 UTC?",
            "checkout 502s since 14:00z",
            "502 since 2pm",
            "502 since 2:00 pm",
            "Since 14:00:00, checkout fails.",
            "what failed after 14:00",
            "checkout errors from 14:00",
        ] {
            assert_eq!(read(q, now), want, "{q}");
        }
        // Later than now today: yesterday's.
        assert_eq!(
            read("errors since 23:30", "2026-12-01T00:10:00Z").as_deref(),
            Some("2026-11-30T23:30:00.000Z..2026-12-01T00:10:00.000Z")
        );
    }

    #[test]
    fn spans_end_now() {
        let now = "2026-11-30T14:11:00Z";
        for (q, since) in [
            ("502s in the last 30 minutes", "2026-11-30T13:41:00.000Z"),
            ("what broke in the past hour?", "2026-11-30T13:11:00.000Z"),
            ("errors over the last 2 hours", "2026-11-30T12:11:00.000Z"),
            ("errors in the last 15m", "2026-11-30T13:56:00.000Z"),
            ("errors since 20 minutes ago", "2026-11-30T13:51:00.000Z"),
            ("errors since an hour ago", "2026-11-30T13:11:00.000Z"),
        ] {
            assert_eq!(
                read(q, now),
                Some(format!("{since}..2026-11-30T14:11:00.000Z")),
                "{q}"
            );
        }
    }

    #[test]
    fn stated_windows_and_alert_times() {
        let now = "2026-12-03T20:00:00Z";
        assert_eq!(
            read(
                "what happened between 13:50 and 14:10?",
                "2026-11-30T14:11:00Z"
            )
            .as_deref(),
            Some("2026-11-30T13:50:00.000Z..2026-11-30T14:10:00.000Z")
        );
        assert_eq!(
            read("errors from 23:50 to 00:10", "2026-12-01T00:30:00Z").as_deref(),
            Some("2026-11-30T23:50:00.000Z..2026-12-01T00:10:00.000Z")
        );
        assert_eq!(
            read(
                "Alert CheckoutErrors fired for checkout. Look at 2026-12-03T19:43:00.000Z and later.",
                now
            )
            .as_deref(),
            Some("2026-12-03T19:43:00.000Z..2026-12-03T20:00:00.000Z")
        );
        assert_eq!(
            read("since 2026-12-03T19:43:00+01:00", now).as_deref(),
            Some("2026-12-03T18:43:00.000Z..2026-12-03T20:00:00.000Z")
        );
    }

    #[test]
    fn what_cannot_be_placed_exactly_leaves_the_window_out() {
        let now = "2026-11-30T14:11:00Z";
        for q in [
            "why does checkout return 502?",
            "502 since 14:00 CET",
            "502 since 14:00 +01:00",
            "502 since 9am local",
            "502 since 14:00 SAST",
            "502 since 2 p.m. EST",
            "502 since 14:00+01:00",
            "502 since 14:00 yesterday",
            "what happened on Monday after 14:00",
            "502 since 14:00 on 2026-11-29",
            "502 since 14:00, and in the last 5 minutes?",
            "between 14:00 and the deploy",
            "since 2026-12-24T00:00:00Z",
            "since the deploy",
            "the last deploy broke checkout",
            "HTTP 502 from payment-service",
            "since 25:00",
        ] {
            assert_eq!(read(q, now), None, "{q}");
        }
        // Agreeing readings are one window.
        assert!(read("since 14:00 (since 2pm UTC)", now).is_some());
    }

    #[test]
    fn a_window_is_in_the_clock_only_when_read() {
        let started = at("2026-11-30T14:11:00Z");
        let with = RunClock::for_question(started, "502 since 14:00?");
        assert_eq!(
            serde_json::to_string(&with).unwrap(),
            r#"{"now":"2026-11-30T14:11:00.000Z","today":"2026-11-30","window":{"since":"2026-11-30T14:00:00.000Z","until":"2026-11-30T14:11:00.000Z"}}"#
        );
        let without = RunClock::for_question(started, "why 502?");
        assert_eq!(without, RunClock::at(started));
        assert_eq!(
            serde_json::to_string(&without).unwrap(),
            r#"{"now":"2026-11-30T14:11:00.000Z","today":"2026-11-30"}"#,
            "a question without a window sends the clock as before"
        );
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        /// Whatever the question, a window read from it is ordered and never ends after now.
        #[test]
        fn a_window_is_ordered_and_not_after_now(
            words in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::string::string_regex("[a-z0-9:+-]{1,8}").unwrap(),
                    proptest::sample::select(vec![
                        "since", "between", "and", "from", "to", "last", "past", "ago", "pm",
                        "am", "utc", "cet", "14:00", "23:59", "0:00", "12pm", "12am", "30",
                        "minutes", "hour", "2026-11-30T14:00:00Z", "later", "yesterday",
                    ]).prop_map(str::to_string),
                ],
                0..10,
            ),
            now_ms in 0i64..4_000_000_000_000,
        ) {
            let now = Timestamp::from_unix_ms(now_ms);
            if let Some(w) = question_window(&words.join(" "), now) {
                proptest::prop_assert!(w.since <= w.until && w.until <= now, "{:?} {:?}", words, w);
            }
        }
    }
}
