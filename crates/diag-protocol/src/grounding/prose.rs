//! Names versus prose: when a hyphenated word is English (`root-cause`, `follow-up`,
//! `read-only`, `5-minute`) and when it is a name to check (`payment-service`,
//! `settlement-batch`, `nightly-reconcile`). openspec/specs/verified-evidence/spec.md,
//! "Hyphenated English SHALL be prose".
//!
//! The rule is fail-closed: a hyphenated word is prose only when it is made of plain
//! lowercase (or capitalised, or all-capital) letters and one of these holds; anything else
//! with an inner hyphen is a name and must be observed.
//! - it is a listed English compound ([`COMPOUNDS`]);
//! - it has two parts and the first is an English prefix ([`PREFIXES`]: `non-`, `re-`,
//!   `pre-`, `self-`…) or a number word (`two-hour`, `one-off`);
//! - it has two parts and the second is an adverb particle ([`PARTICLES`]: `follow-up`,
//!   `knock-on`, `roll-out`) or an adjective-forming word ([`SUFFIXES`]: `time-based`,
//!   `user-facing`, `read-only`);
//! - it has three or more parts and an inner part is a function word (`up-to-date`,
//!   `end-to-end`, `out-of-memory`, `state-of-the-art`).
//!
//! Service, job, host and pool names are made of English words too (`payment-service`,
//! `settlement-batch`), which is why no rule looks at whether the parts are English words.

/// Hyphenated English compounds an incident summary uses.
pub const COMPOUNDS: &[&str] = &[
    "ad-hoc",
    "after-hours",
    "all-time",
    "auto-scaling",
    "back-end",
    "back-fill",
    "back-pressure",
    "best-case",
    "best-effort",
    "big-picture",
    "break-even",
    "brute-force",
    "built-in",
    "business-critical",
    "by-product",
    "check-in",
    "clean-up",
    "client-side",
    "co-located",
    "cold-start",
    "connection-pool",
    "cool-down",
    "cross-check",
    "cut-off",
    "de-facto",
    "dead-lock",
    "dead-end",
    "deep-dive",
    "double-check",
    "drill-down",
    "dry-run",
    "e-mail",
    "error-prone",
    "fail-over",
    "fail-safe",
    "fast-path",
    "fine-grained",
    "first-party",
    "front-end",
    "full-text",
    "garbage-collection",
    "go-live",
    "half-open",
    "hard-coded",
    "health-check",
    "heart-beat",
    "high-level",
    "high-traffic",
    "high-volume",
    "hot-fix",
    "hot-path",
    "in-flight",
    "in-memory",
    "in-place",
    "in-progress",
    "jump-start",
    "kick-off",
    "knock-on",
    "last-resort",
    "lead-time",
    "left-over",
    "live-lock",
    "load-balancer",
    "load-balancing",
    "lock-wait",
    "long-held",
    "long-lived",
    "long-running",
    "long-standing",
    "long-term",
    "low-level",
    "low-traffic",
    "man-hours",
    "mid-flight",
    "mission-critical",
    "near-term",
    "no-op",
    "off-hours",
    "off-peak",
    "on-call",
    "on-disk",
    "on-peak",
    "on-prem",
    "on-premise",
    "on-premises",
    "one-off",
    "open-source",
    "opt-in",
    "opt-out",
    "peak-hour",
    "peak-hours",
    "peak-time",
    "play-book",
    "post-incident",
    "post-mortem",
    "pre-flight",
    "rate-limit",
    "rate-limited",
    "rate-limiting",
    "read-only",
    "read-write",
    "real-time",
    "rolling-restart",
    "root-cause",
    "root-caused",
    "round-trip",
    "row-level",
    "run-book",
    "run-time",
    "same-day",
    "second-order",
    "server-side",
    "short-circuit",
    "short-lived",
    "short-term",
    "side-effect",
    "side-effects",
    "single-threaded",
    "slow-query",
    "so-called",
    "sold-out",
    "spot-check",
    "stand-by",
    "start-up",
    "step-by-step",
    "table-level",
    "thread-pool",
    "third-party",
    "time-out",
    "time-outs",
    "top-level",
    "trade-off",
    "trade-offs",
    "up-front",
    "user-facing",
    "well-defined",
    "well-known",
    "what-if",
    "wide-spread",
    "work-around",
    "worst-case",
    "write-ahead",
    "write-only",
    "x-axis",
    "y-axis",
    "zero-downtime",
];

/// English prefixes that make a two-part word prose (`non-critical`, `re-run`).
pub const PREFIXES: &[&str] = &[
    "anti", "auto", "bi", "co", "counter", "cross", "de", "ex", "half", "hyper", "ill", "inter",
    "intra", "macro", "mega", "micro", "mid", "mis", "multi", "non", "off", "on", "out", "over",
    "post", "pre", "pro", "pseudo", "quasi", "re", "self", "semi", "sub", "super", "ultra", "un",
    "under", "well",
];

/// Adverb particles that make a two-part word a phrasal noun or adjective (`follow-up`).
pub const PARTICLES: &[&str] = &[
    "up", "down", "on", "off", "in", "out", "over", "back", "by", "away", "through", "around",
];

/// Second parts that form adjectives (`time-based`, `read-only`, `user-facing`).
pub const SUFFIXES: &[&str] = &[
    "aware",
    "based",
    "bound",
    "critical",
    "driven",
    "facing",
    "free",
    "friendly",
    "heavy",
    "induced",
    "intensive",
    "level",
    "like",
    "only",
    "oriented",
    "proof",
    "ready",
    "related",
    "safe",
    "sensitive",
    "specific",
    "term",
    "wide",
    "worthy",
];

/// Function words that make a word of three or more parts prose (`up-to-date`).
const FUNCTION_WORDS: &[&str] = &[
    "a", "and", "by", "for", "in", "of", "on", "or", "the", "to", "with",
];

/// Number words (`two-hour`, `one-off`, `twenty-five`).
const NUMBER_WORDS: &[&str] = &[
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "fifteen", "twenty", "thirty", "forty", "fifty", "sixty", "ninety", "hundred",
    "half", "single", "double", "triple", "multi", "first", "second", "third",
];

/// One part as prose sees it: plain letters in lowercase, capitalised or all capitals.
fn plain_part(p: &str) -> Option<String> {
    if p.is_empty() || !p.chars().all(|c| c.is_ascii_alphabetic()) {
        return None;
    }
    let rest_lower = p.chars().skip(1).all(|c| c.is_ascii_lowercase());
    let all_upper = p.chars().all(|c| c.is_ascii_uppercase());
    (rest_lower || all_upper).then(|| p.to_ascii_lowercase())
}

/// Whether a word with inner hyphens only reads as English prose.
pub fn is_hyphenated_prose(word: &str) -> bool {
    let Some(parts) = word
        .split('-')
        .map(plain_part)
        .collect::<Option<Vec<String>>>()
    else {
        return false;
    };
    if parts.len() < 2 {
        return false;
    }
    let lower = parts.join("-");
    if COMPOUNDS.contains(&lower.as_str()) {
        return true;
    }
    let contains = |list: &[&str], w: &str| list.contains(&w);
    match parts.as_slice() {
        [first, second] => {
            contains(PREFIXES, first)
                || contains(NUMBER_WORDS, first)
                || contains(PARTICLES, second)
                || contains(SUFFIXES, second)
        }
        [_, inner @ .., _] => inner.iter().any(|p| contains(FUNCTION_WORDS, p)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prose_words() {
        for w in [
            "root-cause",
            "Root-Cause",
            "follow-up",
            "off-peak",
            "read-only",
            "short-term",
            "knock-on",
            "double-check",
            "non-critical",
            "re-run",
            "up-to-date",
            "end-to-end",
            "out-of-memory",
            "two-hour",
            "user-facing",
            "time-based",
            "ROOT-CAUSE",
            "connection-pool",
            "long-running",
        ] {
            assert!(is_hyphenated_prose(w), "{w}");
        }
    }

    #[test]
    fn names() {
        for w in [
            "payment-service",
            "settlement-batch",
            "billing-service",
            "nightly-reconcile",
            "checkout-service",
            "HikariPool-main",
            "ledger-db",
            "payment-api",
            "db-primary",
            "order-worker",
            "pg-bouncer",
            "nightly-settlement",
        ] {
            assert!(!is_hyphenated_prose(w), "{w}");
        }
    }
}
