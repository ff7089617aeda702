//! The configuration of every property test in the gating suite.
//!
//! A gating run must be reproducible bit for bit, so each property draws its cases from a
//! fixed seed recorded beside it, not from a fresh random one: the same commit passes or fails
//! the same way on every machine. The case count still comes from `PROPTEST_CASES` (10,000
//! in `scripts/test`). Failures found earlier are replayed first from
//! `<module>.proptest-regressions` beside the test's source (`tests/it/` of the crate whose
//! binary holds it), committed files that proptest appends a line to whenever a property
//! fails.
//!
//! Exploration with new seeds is `scripts/fuzz`'s job: it sets `PROPTEST_RNG_SEED`, which
//! takes precedence over the fixed seed here, and raises the case count.

use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};

/// A proptest configuration with `seed` (unless `PROPTEST_RNG_SEED` names another) and the
/// regression file beside the test's source.
pub fn config(seed: u64) -> Config {
    let default = Config::default();
    Config {
        rng_seed: match default.rng_seed {
            RngSeed::Random => RngSeed::Fixed(seed),
            explicit => explicit,
        },
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..default
    }
}

/// [`config`] with at least `min_cases` cases.
pub fn config_with_min_cases(seed: u64, min_cases: u32) -> Config {
    let mut c = config(seed);
    c.cases = c.cases.max(min_cases);
    c
}

/// [`config`] with exactly `cases` cases, for a property whose cases are expensive; the macro
/// still lets `PROPTEST_CASES` override it, as it did before.
pub fn config_with_cases(seed: u64, cases: u32) -> Config {
    let mut c = config(seed);
    c.cases = cases;
    c
}
