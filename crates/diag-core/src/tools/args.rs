//! Typed reading of a tool call's JSON arguments. Models send arguments that are missing,
//! mistyped or misspelt; every such case must become a [`ToolError::InvalidArguments`] naming
//! the parameter, never a panic and never a silently ignored value.

use serde_json::{Map, Value};

use super::ToolError;

/// The arguments of one call, checked to be a JSON object whose keys are all known.
pub struct Args<'a> {
    map: Option<&'a Map<String, Value>>,
}

impl<'a> Args<'a> {
    /// Accepts an object, or `null` for a call without arguments. Unknown keys are rejected so
    /// a misspelt parameter (`services` for `service`) is reported instead of being ignored.
    pub fn new(value: &'a Value, known: &[&str]) -> Result<Self, ToolError> {
        let map = match value {
            Value::Null => None,
            Value::Object(m) => Some(m),
            other => {
                return Err(invalid(format!(
                    "arguments must be a JSON object, got {}",
                    json_type(other)
                )))
            }
        };
        if let Some(m) = map {
            // BTreeMap-backed: the first unknown key reported is deterministic.
            if let Some(k) = m.keys().find(|k| !known.contains(&k.as_str())) {
                return Err(invalid(format!(
                    "unknown parameter '{}' (expected one of: {})",
                    bounded(k, 64),
                    known.join(", ")
                )));
            }
        }
        Ok(Args { map })
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        // An explicit `null` means "not given": models often send every optional key.
        self.map.and_then(|m| m.get(key)).filter(|v| !v.is_null())
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>, ToolError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(other) => Err(invalid(format!(
                "parameter '{key}' must be a string, got {}",
                json_type(other)
            ))),
        }
    }

    pub fn req_str(&self, key: &str) -> Result<&'a str, ToolError> {
        self.opt_str(key)?
            .ok_or_else(|| invalid(format!("missing required parameter '{key}'")))
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, ToolError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(invalid(format!(
                "parameter '{key}' must be a boolean, got {}",
                json_type(other)
            ))),
        }
    }

    /// A positive integer. `5.0` is accepted (some models write every number as a float);
    /// `5.5`, `0` and negatives are not.
    pub fn opt_positive_int(&self, key: &str) -> Result<Option<u64>, ToolError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let n = match v {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            }),
            _ => None,
        };
        match n {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(invalid(format!(
                "parameter '{key}' must be a positive integer, got {}",
                bounded(&v.to_string(), 64)
            ))),
        }
    }

    /// A value that may be a string or a number (Prometheus times and steps), as text.
    pub fn opt_str_or_number(&self, key: &str) -> Result<Option<String>, ToolError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(other) => Err(invalid(format!(
                "parameter '{key}' must be a string or a number, got {}",
                json_type(other)
            ))),
        }
    }
}

pub fn invalid(message: String) -> ToolError {
    ToolError::InvalidArguments(message)
}

pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

// Every text that comes from outside (a server's error, a model's argument) is bounded before
// it enters a message.
pub use crate::text::{bounded, prefix_at_boundary};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rejects_non_objects_and_unknown_keys() {
        assert!(Args::new(&json!([1]), &["a"]).is_err());
        assert!(Args::new(&json!("x"), &["a"]).is_err());
        let e = Args::new(&json!({"b": 1}), &["a"]).err().unwrap();
        assert!(e.to_string().contains("unknown parameter 'b'"));
        assert!(Args::new(&Value::Null, &["a"]).is_ok());
    }

    #[test]
    fn typed_getters() {
        let v = json!({"s": "x", "n": 5.0, "z": 0, "f": 1.5, "b": true, "nul": null});
        let a = Args::new(&v, &["s", "n", "z", "f", "b", "nul", "missing"]).unwrap();
        assert_eq!(a.req_str("s").unwrap(), "x");
        assert!(a.req_str("missing").is_err());
        assert!(a.req_str("nul").is_err());
        assert_eq!(a.opt_positive_int("n").unwrap(), Some(5));
        assert!(a.opt_positive_int("z").is_err());
        assert!(a.opt_positive_int("f").is_err());
        assert_eq!(a.opt_bool("b").unwrap(), Some(true));
        assert!(a.opt_bool("s").is_err());
        assert_eq!(a.opt_str_or_number("n").unwrap().as_deref(), Some("5.0"));
    }

    #[test]
    fn bounding_respects_char_boundaries() {
        assert_eq!(bounded("héllo", 2), "hé…");
        assert_eq!(bounded("hi", 2), "hi");
        assert_eq!(prefix_at_boundary("héllo", 2), "h");
        assert_eq!(prefix_at_boundary("héllo", 3), "hé");
    }
}
