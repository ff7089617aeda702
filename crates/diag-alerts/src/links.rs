//! Report links that carry their own authority (openspec/specs/alerts/spec.md, "Report
//! links"): `…/runs/RUN_ID/report?expires=UNIX_SECONDS&sig=HEX`, where `sig` is
//! HMAC-SHA256, keyed by a secret only the server holds, over the run id and the expiry. A
//! link opens that one run's report until it expires, and nothing else: it is not a bearer
//! token, it does not post alerts, and changing the run id or the expiry breaks it.
//!
//! The key is never written anywhere: it comes from the environment variable `[serve]
//! link_key_env` names (so links survive a restart, every instance on one store opens the
//! others' links, and `diag investigate` signs links `diag serve` opens), or, when that
//! variable is not set, it is drawn at random when `diag serve` starts and dies with the
//! process.
//!
//! Plain functions over plain data; the clock is the caller's.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use diag_core::clock::Timestamp;

/// Fewest bytes of a link key taken from the environment.
pub const MIN_KEY_BYTES: usize = 32;

/// What the MAC covers besides the run id and the expiry: a link of another kind or version
/// never verifies as this one.
const DOMAIN: &str = "diag report link v1";

/// The secret that signs report links. Its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct LinkKey(Arc<[u8]>);

impl fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LinkKey(…)")
    }
}

/// Why a key was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("a report link key must be at least {MIN_KEY_BYTES} bytes (it has {0})")]
    TooShort(usize),
    #[error("no random key could be drawn: {0}")]
    NoRandomness(String),
}

impl LinkKey {
    /// A key from a secret the operator set (at least [`MIN_KEY_BYTES`] bytes).
    pub fn from_secret(secret: &[u8]) -> Result<LinkKey, KeyError> {
        if secret.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort(secret.len()));
        }
        Ok(LinkKey(Arc::from(secret)))
    }

    /// A key of 32 random bytes from the operating system.
    pub fn random() -> Result<LinkKey, KeyError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| KeyError::NoRandomness(e.to_string()))?;
        Ok(LinkKey(Arc::from(&bytes[..])))
    }

    /// The signature of a link to `run_id`'s report valid until `expires` (Unix seconds), as
    /// lower-case hex.
    pub fn sign(&self, run_id: &str, expires: i64) -> String {
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.0) {
            Ok(m) => m,
            // HMAC takes a key of any length.
            Err(_) => return String::new(),
        };
        mac.update(DOMAIN.as_bytes());
        mac.update(b"\n");
        mac.update(run_id.as_bytes());
        mac.update(b"\n");
        mac.update(expires.to_string().as_bytes());
        let tag = mac.finalize().into_bytes();
        tag.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// How a server makes report links: its key and how long a link opens.
#[derive(Debug, Clone)]
pub struct ReportLinks {
    pub key: LinkKey,
    pub ttl: Duration,
}

impl ReportLinks {
    /// The query (`?expires=…&sig=…`) of a link to `run_id`'s report made at `now`.
    pub fn query(&self, run_id: &str, now: Timestamp) -> String {
        let ttl = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
        let expires = (now.unix_ms() / 1000).saturating_add(ttl);
        format!("?expires={expires}&sig={}", self.key.sign(run_id, expires))
    }
}

/// What a link's `expires` and `sig` say of a request for `run_id`'s report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkCheck {
    /// Signed by this key for this run and expiry, and not expired.
    Valid,
    /// The signature does not match the run id and expiry (another run, a changed expiry,
    /// another key, or not a signature at all).
    Forged,
    /// Signed, but its expiry has passed.
    Expired,
}

/// Checks a link's parameters for `run_id` at `now`; the signature is compared in constant
/// time, and an expired link is told apart only once its signature holds.
pub fn check(key: &LinkKey, run_id: &str, expires: &str, sig: &str, now: Timestamp) -> LinkCheck {
    let Ok(expires) = expires.trim().parse::<i64>() else {
        return LinkCheck::Forged;
    };
    let expected = key.sign(run_id, expires);
    if !bool::from(expected.as_bytes().ct_eq(sig.trim().as_bytes())) {
        return LinkCheck::Forged;
    }
    if now.unix_ms() / 1000 >= expires {
        LinkCheck::Expired
    } else {
        LinkCheck::Valid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> LinkKey {
        LinkKey::from_secret(&[b; 32]).unwrap()
    }

    #[test]
    fn a_link_opens_its_run_until_it_expires_and_nothing_else() {
        let links = ReportLinks {
            key: key(7),
            ttl: Duration::from_secs(3600),
        };
        let now = Timestamp::from_unix_ms(1_800_000_000_000);
        let query = links.query("run-a", now);
        let (expires, sig) = query
            .strip_prefix("?expires=")
            .unwrap()
            .split_once("&sig=")
            .unwrap();
        assert_eq!(expires, "1800003600");
        assert_eq!(sig.len(), 64);
        let k = &links.key;
        assert_eq!(check(k, "run-a", expires, sig, now), LinkCheck::Valid);
        let later = Timestamp::from_unix_ms(1_800_003_599_999);
        assert_eq!(check(k, "run-a", expires, sig, later), LinkCheck::Valid);
        let at_expiry = Timestamp::from_unix_ms(1_800_003_600_000);
        assert_eq!(
            check(k, "run-a", expires, sig, at_expiry),
            LinkCheck::Expired
        );
        // Another run, a changed expiry, another key, a truncated or empty signature.
        assert_eq!(check(k, "run-b", expires, sig, now), LinkCheck::Forged);
        assert_eq!(check(k, "run-a", "1800003601", sig, now), LinkCheck::Forged);
        assert_eq!(
            check(&key(8), "run-a", expires, sig, now),
            LinkCheck::Forged
        );
        assert_eq!(
            check(k, "run-a", expires, &sig[..63], now),
            LinkCheck::Forged
        );
        assert_eq!(check(k, "run-a", expires, "", now), LinkCheck::Forged);
        assert_eq!(check(k, "run-a", "soon", sig, now), LinkCheck::Forged);
    }

    #[test]
    fn a_key_is_long_enough_and_never_shown() {
        assert_eq!(
            LinkKey::from_secret(b"short").unwrap_err(),
            KeyError::TooShort(5)
        );
        let k = LinkKey::from_secret(b"0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(format!("{k:?}"), "LinkKey(…)");
        let a = LinkKey::random().unwrap();
        let b = LinkKey::random().unwrap();
        assert_ne!(a.sign("r", 1), b.sign("r", 1));
    }
}
