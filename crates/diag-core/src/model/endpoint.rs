//! What an endpoint taught is keyed by [`Endpoint`]: the base URL of an OpenAI-compatible
//! server and the model name. The base URL is kept without what must never be stored or
//! shown (userinfo, query, fragment), so the key can go into a run store and a trace as it
//! is. What it taught is `super::structured`'s, which names this key and not the other way
//! round (the run store keeps it for the next process: `crate::store::learnings`).

use serde::{Deserialize, Serialize};

/// One model behind one server: the key of what it taught.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Endpoint {
    /// The base URL without userinfo, query or fragment, and without a trailing `/`
    /// (see [`Endpoint::new`]).
    pub base_url: String,
    pub model: String,
}

impl Endpoint {
    /// The key of `model` behind `base_url`, the URL stripped of `user:password@`, `?query`
    /// and `#fragment` (a gateway's query may hold a key) and of a trailing `/`.
    pub fn new(base_url: &str, model: &str) -> Endpoint {
        Endpoint {
            base_url: strip_url(base_url),
            model: model.trim().to_string(),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.base_url, self.model)
    }
}

/// `url` without userinfo, query, fragment and trailing `/`: only scheme, host, port and path
/// are kept.
pub fn strip_url(url: &str) -> String {
    let url = url.trim();
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let (scheme, rest) = match url.find("://") {
        Some(at) => (&url[..at + 3], &url[at + 3..]),
        None => ("", url),
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, ""),
    };
    // The userinfo ends at the last `@` of the authority (a password may hold an `@`).
    let host = authority.rsplit('@').next().unwrap_or_default();
    format!("{scheme}{host}{}", path.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_keeps_no_credentials_query_or_fragment() {
        let e = Endpoint::new(
            " https://user:p@ss@gw.example:8443/v1/?api-key=s3cret#x ",
            " m ",
        );
        assert_eq!(e.base_url, "https://gw.example:8443/v1");
        assert_eq!(e.model, "m");
        assert_eq!(strip_url("http://h:8080"), "http://h:8080");
        assert_eq!(strip_url("http://h/v1/"), "http://h/v1");
        assert_eq!(strip_url("http://k@h/v1?a=b"), "http://h/v1");
        assert_eq!(e.to_string(), "https://gw.example:8443/v1 m");
    }
}
