//! How a record is written as text in a store and read back, one form for every backend, so a
//! run copied between stores, or exported from either, reads back the same: a value as its
//! canonical JSON ([`canonical`]), a model exchange's texts ([`exchange_text`]), a failed model
//! call as a JSON object ([`error_json`], [`model_error`]), an evaluation ([`EvaluationText`]),
//! a count as a signed 64-bit integer ([`stored_int`]), and the decoding of stored text back into records ([`json`], [`enum_str`],
//! [`time`], [`outcome`]), each failure a [`RecordError::Decode`] naming what was read.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::RecordError;
use diag_graph::clock::Timestamp;
use diag_records::hash::sha256_hex;
use diag_records::json::canonical_json;
use diag_records::model::{ChatResponse, ErrorClass, ModelError};
use diag_records::step::ModelExchange;

/// A value as the text a store keeps: the canonical JSON of its serialized form. A value that
/// cannot be serialized is an invalid record.
pub fn canonical<T: Serialize + ?Sized>(value: &T) -> Result<String, RecordError> {
    let value = serde_json::to_value(value).map_err(|e| RecordError::Invalid(e.to_string()))?;
    Ok(canonical_json(&value))
}

/// A count, duration or token total as a store's signed 64-bit integer: one past that (only a
/// saturated reading could be) is stored as the largest one instead of failing the write.
pub fn stored_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A model exchange's texts as a store keeps them, built before any transaction opens.
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeText {
    /// The canonical request ([`diag_records::hash::canonical_request`]).
    pub request: String,
    /// The sha256 of `request`.
    pub request_sha256: String,
    /// The canonical response, for a call that answered.
    pub response: Option<String>,
    /// The error ([`error_json`]), for a call that failed.
    pub error: Option<String>,
}

/// The texts of `exchange` ([`ExchangeText`]); a request or response that cannot be
/// serialized is an invalid record.
pub fn exchange_text(exchange: &ModelExchange) -> Result<ExchangeText, RecordError> {
    let request = diag_records::hash::canonical_request(&exchange.request)
        .map_err(|e| RecordError::Invalid(e.to_string()))?;
    let (response, error) = match &exchange.outcome {
        Ok(r) => (Some(canonical(r)?), None),
        Err(e) => (None, Some(canonical_json(&error_json(e)))),
    };
    Ok(ExchangeText {
        request_sha256: sha256_hex(request.as_bytes()),
        request,
        response,
        error,
    })
}

/// An evaluation as a store keeps it: its metrics as canonical JSON and when it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvaluationText {
    pub metrics: String,
    /// RFC 3339.
    pub created_at: String,
}

impl EvaluationText {
    pub fn new(metrics: &Value, created_at: Timestamp) -> EvaluationText {
        EvaluationText {
            metrics: canonical_json(metrics),
            created_at: created_at.to_string(),
        }
    }
}

/// A stored JSON text read back as a `T`.
pub fn json<T: DeserializeOwned>(what: &'static str, text: &str) -> Result<T, RecordError> {
    serde_json::from_str(text).map_err(|e| RecordError::decode(what, e))
}

/// A stored enum read back from its string form, through its serde representation.
pub fn enum_str<T: DeserializeOwned>(what: &'static str, text: &str) -> Result<T, RecordError> {
    serde_json::from_value(Value::String(text.to_string()))
        .map_err(|e| RecordError::decode(what, e))
}

/// A stored RFC 3339 time read back.
pub fn time(what: &'static str, text: &str) -> Result<Timestamp, RecordError> {
    Timestamp::parse_rfc3339(text).map_err(|e| RecordError::decode(what, e))
}

/// A model call's outcome read back from its stored response or error text: exactly one of
/// the two is set.
pub fn outcome(
    response: Option<String>,
    error: Option<String>,
) -> Result<Result<ChatResponse, ModelError>, RecordError> {
    match (response, error) {
        (Some(response), None) => Ok(Ok(json("model response", &response)?)),
        (None, Some(error)) => {
            let v: Value = json("model error", &error)?;
            Ok(Err(
                model_error(&v).map_err(|e| RecordError::decode("model error", e))?
            ))
        }
        _ => Err(RecordError::decode(
            "model exchange",
            "neither or both of response and error are set",
        )),
    }
}

/// The stored form of a model call's error.
pub fn error_json(e: &ModelError) -> Value {
    let mut v = json!({"class": e.class, "message": e.message});
    if let Some(after) = e.retry_after {
        v["retry_after_ms"] = json!(diag_graph::clock::millis(after));
    }
    if let Some(status) = e.status {
        v["status"] = json!(status);
    }
    if let Some(n) = e.context_tokens {
        v["context_tokens"] = json!(n);
    }
    if let Some(usage) = e.usage {
        v["usage"] = json!(usage);
    }
    if let Some(form) = e.structured_output {
        v["structured_output"] = json!(form);
    }
    v
}

/// A stored error read back ([`error_json`]'s inverse); `Err` names what is wrong with it.
pub fn model_error(v: &Value) -> Result<ModelError, String> {
    let class: ErrorClass =
        serde_json::from_value(v["class"].clone()).map_err(|e| format!("class: {e}"))?;
    let message = v["message"]
        .as_str()
        .ok_or_else(|| "no message".to_string())?
        .to_string();
    let mut e = ModelError::permanent(message);
    e.class = class;
    e.retry_after = v["retry_after_ms"]
        .as_u64()
        .map(std::time::Duration::from_millis);
    e.status = v["status"].as_u64().and_then(|s| u16::try_from(s).ok());
    e.context_tokens = v["context_tokens"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok());
    e.usage = serde_json::from_value(v["usage"].clone()).ok();
    e.structured_output = serde_json::from_value(v["structured_output"].clone()).ok();
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_value_is_canonical_and_a_count_saturates() {
        assert_eq!(
            canonical(&json!({"b": [1, {"d": 0, "c": 1}], "a": null})).unwrap(),
            r#"{"a":null,"b":[1,{"c":1,"d":0}]}"#
        );
        assert_eq!(stored_int(7), 7);
        assert_eq!(stored_int(u64::MAX), i64::MAX);
    }

    #[test]
    fn a_stored_outcome_is_exactly_one_of_response_and_error() {
        let error = canonical_json(&error_json(&ModelError::permanent("no")));
        match outcome(None, Some(error.clone())) {
            Ok(Err(e)) => assert_eq!(e.message, "no"),
            other => panic!("{other:?}"),
        }
        for (response, error) in [(None, None), (Some("{}".to_string()), Some(error))] {
            assert_eq!(
                outcome(response, error).unwrap_err().to_string(),
                "stored model exchange cannot be read back: neither or both of response and \
                 error are set"
            );
        }
        assert!(outcome(None, Some("{}".into()))
            .unwrap_err()
            .to_string()
            .starts_with("stored model error cannot be read back: class: "));
        assert!(matches!(
            outcome(Some("[".into()), None),
            Err(RecordError::Decode {
                what: "model response",
                ..
            })
        ));
    }

    #[test]
    fn stored_text_that_does_not_decode_names_what_was_read() {
        assert_eq!(
            time("run started_at", "yesterday").unwrap_err().kind(),
            crate::StoreErrorKind::Decode
        );
        assert!(time("t", "1970-01-01T00:00:00Z").is_ok());
        let status: Result<crate::RunStatus, _> = enum_str("run status", "RUNNING");
        assert!(status.is_ok());
        let e = enum_str::<crate::RunStatus>("run status", "NOPE").unwrap_err();
        assert!(e
            .to_string()
            .starts_with("stored run status cannot be read back: "));
    }
}
