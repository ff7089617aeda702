//! The canonical JSON text diag stores, hashes and compares.

/// Compact JSON with object keys sorted, so equal arguments compare equal as text.
pub fn canonical_json(v: &serde_json::Value) -> String {
    // serde_json's Map is a BTreeMap (the preserve_order feature is not enabled), so keys
    // serialize sorted; the test below guards that assumption.
    serde_json::to_string(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_at_every_depth() {
        let v = serde_json::json!({"b": 1, "a": {"y": 2, "x": [3, {"d": 4, "c": 5}]}});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"x":[3,{"c":5,"d":4}],"y":2},"b":1}"#
        );
    }
}
