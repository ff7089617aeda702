//! Run and session identifiers. They enter through [`IdSource`] so tests and replays can pin
//! them. The real source, time-ordered and drawn from the operating system's random
//! generator, is an edge of this port: `diag-ask`'s `setup::RandomIds`. This crate holds no
//! process state for ids.

use std::sync::atomic::{AtomicU64, Ordering};

/// Where new run and session ids come from.
pub trait IdSource: Send + Sync {
    fn run_id(&self) -> String;
    fn session_id(&self) -> String;
}

/// Deterministic ids for tests: `run-0001`, `run-0002`, … and `ses-0001`, ….
#[derive(Default)]
pub struct SequentialIds {
    runs: AtomicU64,
    sessions: AtomicU64,
}

impl IdSource for SequentialIds {
    fn run_id(&self) -> String {
        format!("run-{:04}", self.runs.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn session_id(&self) -> String {
        format!(
            "ses-{:04}",
            self.sessions.fetch_add(1, Ordering::Relaxed) + 1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_count_up() {
        let ids = SequentialIds::default();
        assert_eq!(ids.run_id(), "run-0001");
        assert_eq!(ids.run_id(), "run-0002");
        assert_eq!(ids.session_id(), "ses-0001");
    }
}
