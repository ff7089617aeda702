//! How a failed model call is written in a store: [`ModelError`] as a JSON object and back.
//! Every store backend writes this one form, so a run copied between stores, or exported from
//! either, reads back the same error.

use serde_json::{json, Value};

use crate::model::{ErrorClass, ModelError};

/// The stored form of a model call's error.
pub fn error_json(e: &ModelError) -> Value {
    let mut v = json!({"class": e.class, "message": e.message});
    if let Some(after) = e.retry_after {
        v["retry_after_ms"] = json!(crate::clock::millis(after));
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
