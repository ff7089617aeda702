//! The tool registry: the catalog the Executor may call, and the one place where the per-call
//! limits of openspec/specs/tools/spec.md are enforced (catalog membership, per-call timeout,
//! output size), so no tool has to remember them and no model can talk its way past them.
//! The Executor's call budget is not here: the agent runtime (`agent/runtime.rs`) owns it,
//! because only it sees one Executor invocation's calls in the model's order.
//!
//! A call always ends in a [`ToolOutcome`] (never a panic, never a Rust error), because every
//! call, good or bad, is recorded as a ToolInvocation:
//!
//! | situation | status | output |
//! | --- | --- | --- |
//! | name not in the catalog | `blocked` | `{"error": "tool 'x' is not available; …"}` |
//! | arguments not an object, or a required parameter missing | `error` | `{"error": "invalid arguments: …"}` |
//! | the tool returned a [`ToolError`] | `error` | `{"error": "<its message>"}` (≤ 1000 chars) |
//! | the tool ran past the timeout | `error` | `{"error": "timed out after N ms"}` |
//! | the tool panicked | `error` | `{"error": "tool 'x' failed unexpectedly"}` |
//! | success | `ok` | the tool's output, capped (below) |
//!
//! **Output cap.** An output whose compact JSON serialization exceeds `max_output_bytes` is
//! cut deterministically and says so. If it is an object with a `matches`, `hits` or `result`
//! array (the first of these present), trailing items are dropped until it fits and
//! `"output_truncated": true` and `"<key>_shown": N` (`matches_shown`, `hits_shown`,
//! `result_shown`: the items kept) are set on the object (Prometheus `data` gains those keys
//! too). The tool's own flags keep their meaning: `search_logs`'s `more_matches` still says
//! whether more lines matched than its `limit`, whatever the cap kept. If not even one item
//! fits, or the output has no such array, it is replaced by `{"output_truncated": true,
//! "original_bytes": N, "preview": "<the serialized output, cut to fit>"}`.
//!
//! The registry needs a Tokio runtime with its time driver enabled (for the timeout).

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::args::{bounded, json_type, prefix_at_boundary};
use super::{Tool, ToolContext, ToolError, ToolFuture, ToolSpec};
use crate::protocol::InvocationStatus;

/// Longest error message put into an output.
const MAX_ERROR_CHARS: usize = 1000;
/// Array keys whose trailing items may be dropped to fit the output cap, in order of priority.
const LIST_KEYS: [&str; 3] = ["matches", "hits", "result"];

pub use crate::limits::ToolLimits;

/// How one call ended: what is recorded as the invocation's status and output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutcome {
    pub status: InvocationStatus,
    pub output: Value,
    pub duration_ms: u64,
}

impl ToolOutcome {
    fn blocked(message: String) -> Self {
        ToolOutcome {
            status: InvocationStatus::Blocked,
            output: json!({ "error": message }),
            duration_ms: 0,
        }
    }

    fn error(message: &str, duration_ms: u64) -> Self {
        ToolOutcome {
            status: InvocationStatus::Error,
            output: json!({ "error": bounded(message, MAX_ERROR_CHARS) }),
            duration_ms,
        }
    }
}

/// The outcome of a call to a tool that is not in the catalog `available` (names in catalog
/// order): `blocked`, with an output naming the tools there are. A replay blocks a recorded
/// call outside the run file's catalog with this same outcome.
pub fn unknown_tool(name: &str, available: &[&str]) -> ToolOutcome {
    ToolOutcome::blocked(format!(
        "tool '{}' is not available; available tools: {}",
        bounded(name, 64),
        if available.is_empty() {
            "none".to_string()
        } else {
            available.join(", ")
        }
    ))
}

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("tool '{0}' is registered twice")]
    Duplicate(String),
    #[error("invalid tool name '{0}': use 1 to 64 letters, digits, '_' or '-'")]
    InvalidName(String),
}

struct Entry {
    spec: ToolSpec,
    tool: Arc<dyn Tool>,
}

/// The tools offered to the Executor, in registration order, with their limits.
pub struct ToolRegistry {
    entries: Vec<Entry>,
    limits: ToolLimits,
}

impl ToolRegistry {
    pub fn new(limits: ToolLimits) -> Self {
        ToolRegistry {
            entries: Vec::new(),
            limits,
        }
    }

    /// Adds a tool under the name its spec gives. The spec is read once, here: the catalog a
    /// run shows the model must not change while the run goes on.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let spec = tool.spec();
        let valid = (1..=64).contains(&spec.name.len())
            && spec
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(RegistryError::InvalidName(bounded(&spec.name, 80)));
        }
        if self.entries.iter().any(|e| e.spec.name == spec.name) {
            return Err(RegistryError::Duplicate(spec.name));
        }
        self.entries.push(Entry { spec, tool });
        Ok(())
    }

    /// The catalog, in registration order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.entries.iter().map(|e| e.spec.clone()).collect()
    }

    pub fn limits(&self) -> &ToolLimits {
        &self.limits
    }

    fn find(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.spec.name == name)
    }
}

impl ToolRegistry {
    /// Checks a call against the catalog. The `Err` is the blocked outcome to record.
    pub fn admit(&self, name: &str) -> Result<AdmittedCall<'_>, ToolOutcome> {
        let Some(entry) = self.find(name) else {
            let available: Vec<&str> = self.entries.iter().map(|e| e.spec.name.as_str()).collect();
            return Err(unknown_tool(name, &available));
        };
        Ok(AdmittedCall {
            entry,
            limits: &self.limits,
        })
    }

    /// Admits and runs one call.
    pub async fn call(&self, name: &str, arguments: &Value, cx: &ToolContext<'_>) -> ToolOutcome {
        match self.admit(name) {
            Ok(call) => call.run(arguments, cx).await,
            Err(blocked) => blocked,
        }
    }
}

/// A call that passed the catalog check and may now run.
pub struct AdmittedCall<'r> {
    entry: &'r Entry,
    limits: &'r ToolLimits,
}

impl AdmittedCall<'_> {
    pub fn name(&self) -> &str {
        &self.entry.spec.name
    }

    /// Runs the tool under the timeout and caps its output.
    pub async fn run(self, arguments: &Value, cx: &ToolContext<'_>) -> ToolOutcome {
        let started = cx.clock.elapsed();
        let elapsed_ms = || {
            let d = cx.clock.elapsed().saturating_sub(started);
            crate::clock::millis(d)
        };
        if let Err(e) = check_arguments(&self.entry.spec.parameters, arguments) {
            return ToolOutcome::error(&e.to_string(), elapsed_ms());
        }
        let tool = &self.entry.tool;
        let Ok(future) = catch_unwind(AssertUnwindSafe(|| tool.call(arguments, cx))) else {
            return self.panicked(elapsed_ms());
        };
        let result = tokio::time::timeout(self.limits.timeout, CatchUnwind(future)).await;
        let duration_ms = elapsed_ms();
        match result {
            Err(_) => {
                let ms = crate::clock::millis(self.limits.timeout);
                ToolOutcome::error(&ToolError::Timeout(ms).to_string(), duration_ms)
            }
            Ok(Err(Panicked)) => self.panicked(duration_ms),
            Ok(Ok(Err(e))) => ToolOutcome::error(&e.to_string(), duration_ms),
            Ok(Ok(Ok(output))) => ToolOutcome {
                status: InvocationStatus::Ok,
                output: cap_output(output, self.limits.max_output_bytes),
                duration_ms,
            },
        }
    }

    fn panicked(&self, duration_ms: u64) -> ToolOutcome {
        ToolOutcome::error(
            &format!("tool '{}' failed unexpectedly", self.entry.spec.name),
            duration_ms,
        )
    }
}

/// The checks every tool needs and a JSON Schema can state: an object (or nothing) and the
/// required keys present. Types and unknown keys are left to the tool, which knows which
/// leniencies are safe (a number where a time string is declared, say).
fn check_arguments(schema: &Value, arguments: &Value) -> Result<(), ToolError> {
    let object = match arguments {
        Value::Object(m) => Some(m),
        Value::Null => None,
        other => {
            return Err(ToolError::InvalidArguments(format!(
                "arguments must be a JSON object, got {}",
                json_type(other)
            )))
        }
    };
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    for key in required {
        if object.and_then(|m| m.get(key)).is_none_or(Value::is_null) {
            return Err(ToolError::InvalidArguments(format!(
                "missing required parameter '{key}'"
            )));
        }
    }
    Ok(())
}

struct Panicked;

/// Turns a panic inside a tool's future into a value, so one broken tool cannot take the run
/// down with it.
struct CatchUnwind<'a>(ToolFuture<'a>);

impl Future for CatchUnwind<'_> {
    type Output = Result<Result<Value, ToolError>, Panicked>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(Poll::Ready(r)) => Poll::Ready(Ok(r)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(Panicked)),
        }
    }
}

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(usize::MAX, |b| b.len())
}

/// Cuts `output` to at most `max` serialized bytes as the module doc describes.
pub fn cap_output(output: Value, max: usize) -> Value {
    let size = json_len(&output);
    if size <= max {
        return output;
    }
    if let Value::Object(map) = &output {
        if let Some(capped) = drop_trailing_items(map, max) {
            return capped;
        }
    }
    preview(&output, size, max)
}

fn drop_trailing_items(map: &Map<String, Value>, max: usize) -> Option<Value> {
    let (key, items) = LIST_KEYS
        .iter()
        .find_map(|k| map.get(*k).and_then(Value::as_array).map(|a| (*k, a)))?;
    let mut shell = map.clone();
    let shown_key = format!("{key}_shown");
    shell.insert(key.to_string(), Value::Array(Vec::new()));
    shell.insert("output_truncated".to_string(), Value::Bool(true));
    // The widest count the shell can carry, so the size computed below is an upper bound.
    shell.insert(shown_key.clone(), Value::from(items.len()));
    // Compact JSON of `[a,b,c]` is 2 + |a| + |b| + |c| + 2 commas, so each prefix's size is
    // known without serializing it.
    let mut size = json_len(&Value::Object(shell.clone()));
    let mut keep = 0;
    for (i, item) in items.iter().enumerate() {
        let grown = size + json_len(item) + usize::from(i > 0);
        if grown > max {
            break;
        }
        size = grown;
        keep = i + 1;
    }
    if keep == 0 {
        return None;
    }
    shell.insert(key.to_string(), Value::Array(items[..keep].to_vec()));
    shell.insert(shown_key, Value::from(keep));
    Some(Value::Object(shell))
}

fn preview(output: &Value, size: usize, max: usize) -> Value {
    let text = serde_json::to_string(output).unwrap_or_default();
    let wrap = |p: &str| json!({ "output_truncated": true, "original_bytes": size, "preview": p });
    let mut budget = max.saturating_sub(json_len(&wrap("")));
    // Escaping can make the preview longer than its source text; shrink by the excess until
    // it fits (each round removes at least one byte, and escapes at most double the length).
    loop {
        let candidate = wrap(prefix_at_boundary(&text, budget));
        let over = json_len(&candidate).saturating_sub(max);
        if over == 0 || budget == 0 {
            return candidate;
        }
        budget = budget.saturating_sub(over.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_outputs_are_untouched() {
        let v = json!({"matches": [1, 2], "more_matches": false});
        assert_eq!(cap_output(v.clone(), 1000), v);
    }

    #[test]
    fn list_outputs_lose_trailing_items_exactly_to_fit() {
        let items: Vec<Value> = (0..100)
            .map(|i| json!({"line": format!("line {i}")}))
            .collect();
        let v = json!({"matches": items, "more_matches": true});
        for max in [100, 257, 1000] {
            let capped = cap_output(v.clone(), max);
            let len = json_len(&capped);
            assert!(len <= max, "{len} > {max}");
            assert_eq!(capped["output_truncated"], true);
            // The tool's own flag is left as it was.
            assert_eq!(capped["more_matches"], true);
            let n = capped["matches"].as_array().unwrap().len();
            assert!(n > 0);
            assert_eq!(capped["matches_shown"], n);
            // One more item would not have fitted.
            let mut more = capped.clone();
            more["matches"]
                .as_array_mut()
                .unwrap()
                .push(v["matches"][n].clone());
            assert!(json_len(&more) > max);
        }
    }

    #[test]
    fn other_outputs_become_a_bounded_preview() {
        let v = json!({"blob": "\"\"\"\"".repeat(1000)});
        for max in [80, 200, 1000] {
            let capped = cap_output(v.clone(), max);
            assert!(json_len(&capped) <= max, "{}", json_len(&capped));
            assert_eq!(capped["output_truncated"], true);
            assert_eq!(capped["original_bytes"], json_len(&v));
            let p = capped["preview"].as_str().unwrap();
            assert!(serde_json::to_string(&v).unwrap().starts_with(p));
        }
    }

    #[test]
    fn argument_checks() {
        let schema = json!({"required": ["query"]});
        assert!(check_arguments(&schema, &json!({"query": "x"})).is_ok());
        assert!(check_arguments(&schema, &json!({"query": null})).is_err());
        assert!(check_arguments(&schema, &json!({})).is_err());
        assert!(check_arguments(&schema, &json!("query")).is_err());
        assert!(check_arguments(&json!({}), &Value::Null).is_ok());
    }
}
