//! The run's clock as every agent is shown it (openspec/specs/agent-runtime/spec.md, "The
//! run's clock in every prompt"): the run's start time in UTC, which is "now" for the
//! question, and its UTC date, the day a time written without a date means ("since 14:00").
//!
//! It is built from the run's recorded `started_at` only, so a replay, whose clock is pinned to
//! the recorded start, shows every agent the same bytes. diag derives no time window from the
//! question's words: a window the question states (an alert's question names its window as
//! RFC 3339 times) reaches the agents as the question says it.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;

/// The `run_clock` member of every agent's declared input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunClock {
    /// The run's start time (RFC 3339, UTC, milliseconds): "now" for the question.
    pub now: Timestamp,
    /// The UTC date of `now` (`YYYY-MM-DD`).
    pub today: String,
}

impl RunClock {
    /// The clock of a run that started at `started_at`.
    pub fn at(started_at: Timestamp) -> RunClock {
        let text = started_at.to_string();
        // `Timestamp`'s text is `YYYY-MM-DDThh:mm:ss.mmmZ`; its date is what comes before `T`.
        let today = text.split('T').next().unwrap_or_default().to_string();
        RunClock {
            now: started_at,
            today,
        }
    }
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
}
