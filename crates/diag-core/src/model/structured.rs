//! What an OpenAI-compatible server is asked for and what diag learns from its refusals:
//! `response_format` in the forms servers take, the strict form of a contract schema, the
//! recognition of a refused `response_format` and of a context-length error, and the
//! [`EndpointMemory`] of what each endpoint taught (the `auto` structured-output rung and the
//! context size).
//!
//! The memory is a value, not process state: whoever sets up the models (`diag-ask`'s
//! `setup`, once per `diag ask`, `diag mcp` or `diag eval` process) makes one and hands it to
//! every model adapter, so the models sharing an endpoint share what it taught; a test makes
//! its own.
//!
//! The forms, in the order `auto` tries them:
//! 1. `json_schema`: `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`
//!    (OpenAI, vLLM, Ollama), with the schema in its strict form (see [`strict_schema`]);
//! 2. `json_object` with `schema`: `{"type": "json_object", "schema": …}` (llama.cpp's
//!    server compiles the schema to a grammar);
//! 3. plain `json_object`;
//! 4. nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::endpoint::Endpoint;
use super::{OutputSchema, StructuredOutput};

/// The per-model `structured_output` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutputSetting {
    /// Start with `json_schema` and step down, once per endpoint (for every model sharing the
    /// [`EndpointMemory`]), each time the server refuses the form it was sent.
    #[default]
    Auto,
    /// Always `json_schema` (strict where the schema allows it).
    JsonSchema,
    /// `json_object` with the schema; plain `json_object` if the server refuses the schema.
    JsonObject,
    /// Never send `response_format`.
    Off,
}

impl StructuredOutputSetting {
    pub fn as_str(self) -> &'static str {
        match self {
            StructuredOutputSetting::Auto => "auto",
            StructuredOutputSetting::JsonSchema => "json_schema",
            StructuredOutputSetting::JsonObject => "json_object",
            StructuredOutputSetting::Off => "off",
        }
    }

    /// The form to try first.
    pub fn first(self) -> StructuredOutput {
        match self {
            StructuredOutputSetting::Auto | StructuredOutputSetting::JsonSchema => {
                StructuredOutput::JsonSchema
            }
            StructuredOutputSetting::JsonObject => StructuredOutput::JsonObjectSchema,
            StructuredOutputSetting::Off => StructuredOutput::Off,
        }
    }

    /// The form to use after the server refused `refused`, if this setting allows one.
    pub fn after_refusal(self, refused: StructuredOutput) -> Option<StructuredOutput> {
        let next = match refused {
            StructuredOutput::JsonSchema => StructuredOutput::JsonObjectSchema,
            StructuredOutput::JsonObjectSchema => StructuredOutput::JsonObject,
            StructuredOutput::JsonObject => StructuredOutput::Off,
            StructuredOutput::Off => return None,
        };
        match (self, next) {
            (StructuredOutputSetting::Auto, next) => Some(next),
            (StructuredOutputSetting::JsonObject, StructuredOutput::JsonObject) => Some(next),
            _ => None,
        }
    }
}

/// The `response_format` member for `schema` in `form`; `None` for [`StructuredOutput::Off`].
pub fn response_format(schema: &OutputSchema, form: StructuredOutput) -> Option<Value> {
    match form {
        StructuredOutput::JsonSchema => {
            let (strict_form, strict) = strict_schema(&schema.schema);
            Some(json!({
                "type": "json_schema",
                "json_schema": {"name": schema.name, "schema": strict_form, "strict": strict},
            }))
        }
        StructuredOutput::JsonObjectSchema => Some(json!({
            "type": "json_object",
            "schema": schema.grammar.as_ref().unwrap_or(&schema.schema),
        })),
        StructuredOutput::JsonObject => Some(json!({"type": "json_object"})),
        StructuredOutput::Off => None,
    }
}

/// Keywords strict structured-output servers refuse or do not promise to honour; the parser
/// checks what they expressed anyway.
const NOT_STRICT: [&str; 15] = [
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "default",
];

/// The strict form of a schema and whether it qualifies for `strict: true`: every object
/// closed (`additionalProperties: false`) with every property required, an optional property
/// made nullable instead (the parsers read `null` as absent), and the keywords of
/// [`NOT_STRICT`] removed. A schema with an open object (no `properties`, or
/// `additionalProperties` other than `false`) or a `$ref` is sent with `strict: false`.
pub fn strict_schema(schema: &Value) -> (Value, bool) {
    let mut strict = true;
    let out = strict_node(schema, &mut strict);
    (out, strict)
}

fn strict_node(v: &Value, strict: &mut bool) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(|i| strict_node(i, strict)).collect()),
        Value::Object(m) => {
            if m.contains_key("$ref") {
                *strict = false;
            }
            let is_object = m.get("type").and_then(Value::as_str) == Some("object");
            let mut out = Map::new();
            for (k, v) in m {
                if NOT_STRICT.contains(&k.as_str()) || k == "required" || k == "properties" {
                    continue;
                }
                out.insert(k.clone(), strict_node(v, strict));
            }
            if let Some(props) = m.get("properties").and_then(Value::as_object) {
                let required: Vec<&str> = m
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut new_props = Map::new();
                for (name, prop) in props {
                    let prop = strict_node(prop, strict);
                    let prop = if required.contains(&name.as_str()) {
                        prop
                    } else {
                        nullable(prop)
                    };
                    new_props.insert(name.clone(), prop);
                }
                out.insert(
                    "required".into(),
                    Value::Array(props.keys().map(|k| Value::String(k.clone())).collect()),
                );
                out.insert("properties".into(), Value::Object(new_props));
                match m.get("additionalProperties") {
                    None => {
                        out.insert("additionalProperties".into(), Value::Bool(false));
                    }
                    Some(Value::Bool(false)) => {}
                    Some(_) => *strict = false,
                }
            } else if is_object {
                *strict = false;
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// `prop` that also accepts `null`.
fn nullable(prop: Value) -> Value {
    let Value::Object(mut m) = prop else {
        return json!({"anyOf": [prop, {"type": "null"}]});
    };
    let typed = match m.get("type").cloned() {
        Some(Value::String(t)) => {
            m.insert("type".into(), json!([t, "null"]));
            true
        }
        Some(Value::Array(mut ts)) => {
            if !ts.contains(&json!("null")) {
                ts.push(json!("null"));
            }
            m.insert("type".into(), Value::Array(ts));
            true
        }
        _ => false,
    };
    if !typed {
        return json!({"anyOf": [Value::Object(m), {"type": "null"}]});
    }
    if let Some(Value::Array(values)) = m.get_mut("enum") {
        if !values.contains(&Value::Null) {
            values.push(Value::Null);
        }
    }
    Value::Object(m)
}

/// Whether an error answer refuses the `response_format` that was sent: a 4xx other than
/// authentication, not-found, timeout, conflict and rate limit, or a 500 (llama.cpp's server
/// answers a request it cannot validate with 500), whose text names `response_format` or a
/// form of it.
pub fn refuses_response_format(status: u16, text: &str) -> bool {
    let status_fits = matches!(status, 400..=499)
        && !matches!(status, 401 | 403 | 404 | 408 | 409 | 429)
        || status == 500;
    let lower = text.to_ascii_lowercase();
    status_fits
        && [
            "response_format",
            "json_schema",
            "json_object",
            "response format",
        ]
        .iter()
        .any(|w| lower.contains(w))
}

/// A context-length error, read from an error answer: `(context_tokens, prompt_tokens)` as far
/// as the server stated them, or `None` when the error is about something else. Recognised:
/// OpenAI's and vLLM's "maximum context length is N tokens" (with "(P in the messages" or
/// "your request has P input tokens"), llama-cpp-python's same wording and its raw "Requested
/// tokens (P) exceed context window of N", and llama.cpp's `exceed_context_size_error` with
/// `n_ctx` and `n_prompt_tokens`.
pub fn context_overflow(body: &Value, text: &str) -> Option<(Option<u32>, Option<u64>)> {
    let error = body.get("error").unwrap_or(body);
    let lower = text.to_ascii_lowercase();
    let code = |k: &str| error.get(k).and_then(Value::as_str).unwrap_or("");
    let signalled = [
        "maximum context length",
        "context_length_exceeded",
        "exceed context window",
        "exceeds the available context size",
        "exceed_context_size",
        "context window of",
    ]
    .iter()
    .any(|w| lower.contains(w))
        || code("code") == "context_length_exceeded"
        || code("type") == "exceed_context_size_error";
    if !signalled {
        return None;
    }
    let field = |k: &str| error.get(k).and_then(Value::as_u64);
    let limit = field("n_ctx")
        .or_else(|| {
            number_after(
                &lower,
                &["maximum context length is ", "context window of "],
            )
        })
        .and_then(|n| u32::try_from(n).ok());
    let prompt = field("n_prompt_tokens").or_else(|| {
        number_after(
            &lower,
            &[
                "tokens (",
                "requested tokens (",
                "your request has ",
                "messages resulted in ",
            ],
        )
    });
    Some((limit, prompt))
}

/// The number right after the first of `markers` that is followed by one.
fn number_after(text: &str, markers: &[&str]) -> Option<u64> {
    markers.iter().find_map(|m| {
        text.match_indices(m).find_map(|(at, _)| {
            let digits: String = text[at + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            digits.parse().ok()
        })
    })
}

/// Told what an endpoint taught, each time it teaches something new: `learned` is all that
/// endpoint taught so far. Implemented at the edge (the run store keeps it); a sink must not
/// fail the model call that taught it, so it reports its own failures.
pub trait LearnedSink: Send + Sync {
    fn learned(&self, endpoint: &Endpoint, learned: Learned);
}

/// What one endpoint taught.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Learned {
    /// The structured-output form to use from now on (after refusals).
    pub form: Option<StructuredOutput>,
    /// The context size a context-length error stated.
    pub context_tokens: Option<u32>,
    /// The sampling parameters it refused (`super::sampling`): never sent to it again.
    pub refused_sampling: super::RefusedSampling,
}

/// What each endpoint (its base URL and model name, [`Endpoint`]) taught, shared by the
/// models that hold a clone: cloning is cheap and every clone reads and writes the same table.
/// A new one (`default`) knows nothing and tells no one; [`EndpointMemory::remembering`]
/// starts from what was learned before and tells its [`LearnedSink`] what is learned anew.
#[derive(Clone, Default)]
pub struct EndpointMemory {
    table: Arc<Mutex<HashMap<Endpoint, Learned>>>,
    sink: Option<Arc<dyn LearnedSink>>,
}

impl std::fmt::Debug for EndpointMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointMemory")
            .field("table", &self.table)
            .field("sink", &self.sink.is_some())
            .finish()
    }
}

impl EndpointMemory {
    /// A memory that starts from `known` (what the endpoints taught before) and tells `sink`
    /// each change that is learned from now on.
    pub fn remembering(
        known: impl IntoIterator<Item = (Endpoint, Learned)>,
        sink: Option<Arc<dyn LearnedSink>>,
    ) -> EndpointMemory {
        EndpointMemory {
            table: Arc::new(Mutex::new(known.into_iter().collect())),
            sink,
        }
    }

    /// What `endpoint` taught so far.
    pub fn learned(&self, endpoint: &Endpoint) -> Learned {
        self.table
            .lock()
            .map(|t| t.get(endpoint).copied().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Records what `endpoint` taught; a change is told to the sink (outside the lock).
    pub fn learn(&self, endpoint: &Endpoint, update: impl FnOnce(&mut Learned)) {
        let changed = match self.table.lock() {
            Ok(mut t) => {
                let entry = t.entry(endpoint.clone()).or_default();
                let before = *entry;
                update(entry);
                (*entry != before).then_some(*entry)
            }
            Err(_) => None,
        };
        if let (Some(learned), Some(sink)) = (changed, &self.sink) {
            sink.learned(endpoint, learned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_memory_is_shared_by_its_clones_only() {
        let memory = EndpointMemory::default();
        let clone = memory.clone();
        let m = Endpoint::new("http://h/v1", "m");
        let other = Endpoint::new("http://h/v1", "other");
        assert_eq!(memory.learned(&m), Learned::default());
        clone.learn(&m, |l| {
            l.form = Some(StructuredOutput::JsonObject);
        });
        memory.learn(&m, |l| l.context_tokens = Some(2048));
        let both = Learned {
            form: Some(StructuredOutput::JsonObject),
            context_tokens: Some(2048),
            ..Learned::default()
        };
        assert_eq!(memory.learned(&m), both);
        assert_eq!(clone.learned(&m), both);
        assert_eq!(memory.learned(&other), Learned::default());
        assert_eq!(
            EndpointMemory::default().learned(&m),
            Learned::default(),
            "another memory knows nothing of it"
        );
    }

    #[test]
    fn a_remembering_memory_starts_from_what_it_knew_and_tells_its_sink_each_change() {
        struct Told(Mutex<Vec<(Endpoint, Learned)>>);
        impl LearnedSink for Told {
            fn learned(&self, endpoint: &Endpoint, learned: Learned) {
                self.0.lock().unwrap().push((endpoint.clone(), learned));
            }
        }
        let told = Arc::new(Told(Mutex::new(Vec::new())));
        let m = Endpoint::new("http://h/v1", "m");
        let known = Learned {
            form: Some(StructuredOutput::JsonObjectSchema),
            ..Learned::default()
        };
        let memory = EndpointMemory::remembering([(m.clone(), known)], Some(told.clone()));
        assert_eq!(
            memory.learned(&m),
            known,
            "what was known is not told again"
        );
        assert!(told.0.lock().unwrap().is_empty());
        memory.learn(&m, |l| l.form = Some(StructuredOutput::JsonObjectSchema));
        assert!(told.0.lock().unwrap().is_empty(), "no change, nothing told");
        memory
            .clone()
            .learn(&m, |l| l.form = Some(StructuredOutput::JsonObject));
        let now = Learned {
            form: Some(StructuredOutput::JsonObject),
            ..Learned::default()
        };
        assert_eq!(*told.0.lock().unwrap(), vec![(m, now)]);
    }

    #[test]
    fn auto_steps_down_one_form_at_a_time_and_explicit_settings_do_not() {
        use StructuredOutput::*;
        let auto = StructuredOutputSetting::Auto;
        assert_eq!(auto.first(), JsonSchema);
        assert_eq!(auto.after_refusal(JsonSchema), Some(JsonObjectSchema));
        assert_eq!(auto.after_refusal(JsonObjectSchema), Some(JsonObject));
        assert_eq!(auto.after_refusal(JsonObject), Some(Off));
        assert_eq!(auto.after_refusal(Off), None);
        let schema = StructuredOutputSetting::JsonSchema;
        assert_eq!(schema.after_refusal(JsonSchema), None);
        let object = StructuredOutputSetting::JsonObject;
        assert_eq!(object.first(), JsonObjectSchema);
        assert_eq!(object.after_refusal(JsonObjectSchema), Some(JsonObject));
        assert_eq!(object.after_refusal(JsonObject), None);
        assert_eq!(StructuredOutputSetting::Off.first(), Off);
    }

    #[test]
    fn the_strict_form_closes_objects_and_makes_optional_fields_nullable() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string"},
            "b": {"type": "array", "items": {"type": "string", "enum": ["x"]}, "maxItems": 3},
            "c": {"type": "string", "enum": ["p", "q"]},
            "d": {"anyOf": [{"type": "string"}]}},
            "required": ["a"], "additionalProperties": false});
        let (strict, ok) = strict_schema(&schema);
        assert!(ok);
        assert_eq!(strict["required"], json!(["a", "b", "c", "d"]));
        assert_eq!(strict["properties"]["a"], json!({"type": "string"}));
        assert_eq!(
            strict["properties"]["b"],
            json!({"type": ["array", "null"], "items": {"type": "string", "enum": ["x"]}})
        );
        assert_eq!(
            strict["properties"]["c"],
            json!({"type": ["string", "null"], "enum": ["p", "q", null]})
        );
        assert_eq!(
            strict["properties"]["d"],
            json!({"anyOf": [{"anyOf": [{"type": "string"}]}, {"type": "null"}]})
        );
        let open = json!({"type": "object", "properties": {"args": {"type": "object"}}, "required": ["args"]});
        let (strict, ok) = strict_schema(&open);
        assert!(!ok, "an open object cannot be strict");
        assert_eq!(strict["additionalProperties"], json!(false));
    }

    #[test]
    fn refusals_of_response_format_are_told_from_other_errors() {
        assert!(refuses_response_format(
            400,
            "Invalid parameter: 'response_format' of type 'json_schema' is not supported"
        ));
        assert!(refuses_response_format(500, "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}]"));
        assert!(refuses_response_format(422, "json_schema is not supported"));
        assert!(!refuses_response_format(401, "response_format"));
        assert!(!refuses_response_format(429, "response_format"));
        assert!(!refuses_response_format(503, "response_format"));
        assert!(!refuses_response_format(
            400,
            "maximum context length is 2048 tokens"
        ));
    }

    #[test]
    fn context_length_errors_give_their_numbers() {
        let llama = "This model's maximum context length is 2048 tokens. However, you requested 2169 tokens (2069 in the messages, 100 in the completion). Please reduce the length of the messages or completion.";
        assert_eq!(
            context_overflow(&json!({}), llama),
            Some((Some(2048), Some(2069)))
        );
        let vllm = "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce the length of the input messages.";
        assert_eq!(
            context_overflow(&json!({}), vllm),
            Some((Some(4096), Some(5000)))
        );
        let raw = "Requested tokens (3000) exceed context window of 2048";
        assert_eq!(
            context_overflow(&json!({}), raw),
            Some((Some(2048), Some(3000)))
        );
        let cpp = json!({"error": {"code": 400, "type": "exceed_context_size_error",
            "message": "the request exceeds the available context size, try increasing it",
            "n_prompt_tokens": 9000, "n_ctx": 8192}});
        assert_eq!(
            context_overflow(
                &cpp,
                "the request exceeds the available context size, try increasing it"
            ),
            Some((Some(8192), Some(9000)))
        );
        let coded = json!({"error": {"code": "context_length_exceeded", "message": "too long"}});
        assert_eq!(context_overflow(&coded, "too long"), Some((None, None)));
        assert_eq!(context_overflow(&json!({}), "model not found"), None);
    }
}
