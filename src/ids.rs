//! Run and session identifiers. They enter through [`IdSource`] so tests and replays can pin
//! them; the real source draws them from the operating system's random generator.

use std::sync::atomic::{AtomicU64, Ordering};

/// Where new run and session ids come from.
pub trait IdSource: Send + Sync {
    fn run_id(&self) -> String;
    fn session_id(&self) -> String;
}

/// Random ids: `run-` or `ses-` followed by 16 hex digits (64 random bits).
pub struct RandomIds;

fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // The OS generator is unavailable only on exotic platforms; fall back to time and
        // process id, which still separates runs of one machine.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        bytes = (nanos ^ (u64::from(std::process::id()) << 32)).to_be_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl IdSource for RandomIds {
    fn run_id(&self) -> String {
        format!("run-{}", random_hex())
    }

    fn session_id(&self) -> String {
        format!("ses-{}", random_hex())
    }
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
    fn random_ids_are_distinct_and_well_formed() {
        let a = RandomIds.run_id();
        let b = RandomIds.run_id();
        assert_ne!(a, b);
        assert!(a.starts_with("run-") && a.len() == 20, "{a}");
        assert!(RandomIds.session_id().starts_with("ses-"));
    }

    #[test]
    fn sequential_ids_count_up() {
        let ids = SequentialIds::default();
        assert_eq!(ids.run_id(), "run-0001");
        assert_eq!(ids.run_id(), "run-0002");
        assert_eq!(ids.session_id(), "ses-0001");
    }
}
