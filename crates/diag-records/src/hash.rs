//! The one place diag hashes: sha256 in lowercase hex, and the hash of a model request that
//! the store keeps (`model_exchange.request_sha256`), run files carry and replay checks.

use sha2::{Digest, Sha256};

use crate::json::canonical_json;
use crate::model::ChatRequest;

/// Lowercase hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The canonical form of a model request: its normalized JSON, compact, keys sorted at every
/// depth. This exact text is stored and hashed.
pub fn canonical_request(request: &ChatRequest) -> Result<String, serde_json::Error> {
    Ok(canonical_json(&serde_json::to_value(request)?))
}

/// The sha256 of a model request's canonical JSON: the hash the store keeps, a recording
/// writes and a replay recomputes (with this same function) to detect a changed request.
pub fn request_sha256(request: &ChatRequest) -> Result<String, serde_json::Error> {
    Ok(sha256_hex(canonical_request(request)?.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_hex_is_lowercase_hex_of_the_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
