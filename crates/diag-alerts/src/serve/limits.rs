//! What bounds a request to `diag serve`: the bearer token (compared in constant time), the
//! body's size (read up to the limit, never past it) and the request rate (one token bucket
//! for the whole server).
//!
//! Decision: the token bucket is these few lines rather than a rate-limiting crate: one
//! bucket, one rate, one mutex taken for a few instructions per request; a crate (`governor`)
//! would bring keyed limiters, clocks and a dependency tree for what this does not need.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::HeaderMap;
use futures::StreamExt;
use subtle::ConstantTimeEq;

/// Whether `headers` carry `Authorization: Bearer <token>` with this token. The scheme is
/// case-insensitive (RFC 9110); the token is compared in constant time.
pub fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, given)) = value.trim().split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer")
        && bool::from(given.trim().as_bytes().ct_eq(token.as_bytes()))
}

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Larger than the limit (declared or sent).
    TooLarge,
    /// The connection failed while it was read.
    Unreadable(String),
}

/// Reads a body of at most `limit` bytes: a `Content-Length` past it is refused before
/// anything is read, and a body sent without one is read no further than the limit.
pub async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Vec<u8>, BodyError> {
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| BodyError::Unreadable(diag_core::text::one_line(&e.to_string(), 200)))?;
        if bytes.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// A token bucket: `rate` requests a second, a burst of `rate`.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    /// A bucket of `per_sec` tokens (at least 1), full.
    pub fn new(per_sec: u32) -> RateLimiter {
        let rate = f64::from(per_sec.max(1));
        RateLimiter {
            rate,
            bucket: Mutex::new(Bucket {
                tokens: rate,
                at: Instant::now(),
            }),
        }
    }

    /// Takes one token at `now`; `Err` holds how long until one is there.
    pub fn take(&self, now: Instant) -> Result<(), Duration> {
        let mut b = match self.bucket.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        };
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.rate).min(self.rate);
        b.at = now.max(b.at);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / self.rate))
        }
    }
}

/// Seconds for a `Retry-After` header: at least 1, rounded up.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_takes_a_burst_of_rate_then_refills_at_rate() {
        let limiter = RateLimiter::new(4);
        let t0 = Instant::now();
        for _ in 0..4 {
            assert!(limiter.take(t0).is_ok());
        }
        let wait = limiter.take(t0).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(250),
            "{wait:?}"
        );
        assert_eq!(retry_after_secs(wait), 1);
        assert!(limiter.take(t0 + Duration::from_millis(250)).is_ok());
        assert!(limiter.take(t0 + Duration::from_millis(250)).is_err());
        // A long pause fills the bucket to its burst, no further.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..4 {
            assert!(limiter.take(later).is_ok());
        }
        assert!(limiter.take(later).is_err());
    }

    #[test]
    fn only_the_bearer_token_itself_is_accepted() {
        let with = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(axum::http::header::AUTHORIZATION, value.parse().unwrap());
            h
        };
        assert!(authorized(&with("Bearer s3cret"), "s3cret"));
        assert!(authorized(&with("bearer s3cret"), "s3cret"));
        for bad in [
            "Bearer s3cre",
            "Bearer s3cret2",
            "Basic s3cret",
            "s3cret",
            "Bearer ",
        ] {
            assert!(!authorized(&with(bad), "s3cret"), "{bad}");
        }
        assert!(!authorized(&HeaderMap::new(), "s3cret"));
        assert_eq!(retry_after_secs(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }

    #[tokio::test]
    async fn a_body_is_read_no_further_than_the_limit() {
        let h = HeaderMap::new();
        assert_eq!(read_body(&h, Body::from("abc"), 3).await.unwrap(), b"abc");
        assert_eq!(
            read_body(&h, Body::from("abcd"), 3).await,
            Err(BodyError::TooLarge)
        );
        let mut declared = HeaderMap::new();
        declared.insert(axum::http::header::CONTENT_LENGTH, "10".parse().unwrap());
        assert_eq!(
            read_body(&declared, Body::from("ab"), 3).await,
            Err(BodyError::TooLarge)
        );
    }
}
