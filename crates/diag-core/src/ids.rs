//! Run and session identifiers. They enter through [`IdSource`] so tests and replays can pin
//! them; the real source draws them from the operating system's random generator.

use std::sync::atomic::{AtomicU64, Ordering};

/// Where new run and session ids come from.
pub trait IdSource: Send + Sync {
    fn run_id(&self) -> String;
    fn session_id(&self) -> String;
}

/// Time-ordered random ids: `run-` or `ses-` followed by 20 hex digits, the creation time in
/// milliseconds since the Unix epoch (12 digits) and 32 random bits (8 digits).
///
/// Every table of the run store is keyed by run id first (a run's trace is stored
/// contiguously). Ids that sort by creation time make each new run's rows land at the end of
/// those B-trees, where SQLite appends to one page, instead of at a random place, where an
/// insert into a full page rebalances it with its siblings and writes three or four pages:
/// with time-ordered ids the stored-run benchmark runs about a third faster than with
/// uniformly random ones. They also list in creation order.
///
/// Within one process ids are strictly increasing, so never equal: an id made in the same
/// millisecond as the previous one (or after the wall clock stepped back) continues from it,
/// its 32 low bits counted up by one, as monotonic ULIDs do. Ids of different processes
/// collide only when both are made in the same millisecond and draw the same 32 bits.
pub struct RandomIds;

/// The last id this process made, as `(ms << 32) | random` (80 bits).
static LAST: std::sync::Mutex<u128> = std::sync::Mutex::new(0);

fn time_ordered_hex() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let ms = crate::clock::millis(now) & 0xffff_ffff_ffff;
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        // The OS generator is unavailable only on exotic platforms; fall back to the clock's
        // nanoseconds and the process id, which still separate runs of one machine.
        bytes = (now.subsec_nanos() ^ std::process::id().rotate_left(16)).to_be_bytes();
    }
    let drawn = (u128::from(ms) << 32) | u128::from(u32::from_be_bytes(bytes));
    // A poisoned lock only means another thread panicked while holding a plain integer.
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let value = next_id(*last, drawn);
    *last = value;
    // 48 bits of milliseconds and 32 random bits: 20 hex digits (a saturated value stays 20).
    format!("{:020x}", value & ((1u128 << 80) - 1))
}

/// The id after `last` given a freshly drawn `(ms << 32) | random`: the drawn one when it is
/// later, otherwise `last + 1` (the same millisecond, or a clock that stepped back).
fn next_id(last: u128, drawn: u128) -> u128 {
    if drawn > last {
        drawn
    } else {
        last.saturating_add(1)
    }
}

impl IdSource for RandomIds {
    fn run_id(&self) -> String {
        format!("run-{}", time_ordered_hex())
    }

    fn session_id(&self) -> String {
        format!("ses-{}", time_ordered_hex())
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
    fn random_ids_are_distinct_well_formed_and_time_ordered() {
        let hex = |id: &str, prefix: &str| {
            let rest = id.strip_prefix(prefix).unwrap_or_else(|| panic!("{id}"));
            assert_eq!(rest.len(), 20, "{id}");
            assert!(rest
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            u64::from_str_radix(&rest[..12], 16).unwrap()
        };
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let a = RandomIds.run_id();
        let a_ms = hex(&a, "run-");
        assert!(a_ms >= before && a_ms < before + 60_000, "{a} at {before}");
        hex(&RandomIds.session_id(), "ses-");
        let ids: Vec<String> = (0..10_000).map(|_| RandomIds.run_id()).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids made one after another strictly increase, so no two are the same"
        );
        assert!(ids[0] > a, "{} sorts after {a}", ids[0]);
    }

    #[test]
    fn an_id_in_the_same_millisecond_or_after_the_clock_stepped_back_counts_up() {
        let ms = 0x0190_0000_0000u128 << 32;
        assert_eq!(
            next_id(ms | 7, ms | 3),
            ms | 8,
            "same millisecond, smaller draw"
        );
        assert_eq!(
            next_id(ms | 7, ms | 7),
            ms | 8,
            "same millisecond, same draw"
        );
        assert_eq!(
            next_id(ms | 7, ms | 9),
            ms | 9,
            "same millisecond, larger draw"
        );
        let earlier = (0x018f_ffff_ffffu128 << 32) | 0xffff_ffff;
        assert_eq!(next_id(ms | 7, earlier), ms | 8, "the clock stepped back");
        assert_eq!(
            next_id(ms | 0xffff_ffff, ms),
            (ms + (1 << 32)),
            "carries into the ms"
        );
        let later = (0x0190_0000_0001u128 << 32) | 2;
        assert_eq!(next_id(ms | 7, later), later);
    }

    #[test]
    fn sequential_ids_count_up() {
        let ids = SequentialIds::default();
        assert_eq!(ids.run_id(), "run-0001");
        assert_eq!(ids.run_id(), "run-0002");
        assert_eq!(ids.session_id(), "ses-0001");
    }
}
