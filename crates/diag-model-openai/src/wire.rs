//! What an OpenAI-compatible server is asked for and how its refusals read: `response_format`
//! in the forms servers take, the strict form of a contract schema, the recognition of a
//! refused `response_format`, of a refused sampling parameter and of a context-length error.
//! What the adapter learns from them goes into the endpoint's `EndpointMemory` (diag-core).
//!
//! The forms, in the order `auto` tries them:
//! 1. `json_schema`: `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`
//!    (OpenAI, vLLM, Ollama), with the schema in its strict form (see [`strict_schema`]);
//! 2. `json_object` with `schema`: `{"type": "json_object", "schema": …}` (llama.cpp's
//!    server compiles the schema to a grammar);
//! 3. plain `json_object`;
//! 4. nothing.

use serde_json::{json, Map, Value};

use diag_core::model::{OutputSchema, RefusedSampling, SamplingParameter, StructuredOutput};

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

/// The sampling parameters, of those `sent`, that an error answer refuses: an HTTP 400 or 422
/// whose text names the parameter as a word (OpenAI's reasoning models: "Unsupported value:
/// 'temperature' does not support 0 with this model"; a strict server: "Unrecognized request
/// argument supplied: seed"). Nothing for any other status, or a text that names none of them.
pub fn refused_sampling(status: u16, text: &str, sent: &[SamplingParameter]) -> RefusedSampling {
    if !matches!(status, 400 | 422) {
        return RefusedSampling::default();
    }
    let lower = text.to_ascii_lowercase();
    sent.iter()
        .filter(|p| names_word(&lower, p.as_str()))
        .fold(RefusedSampling::default(), |r, p| r.with(*p))
}

/// Whether `word` occurs in `text` with no letter, digit or `_` on either side.
fn names_word(text: &str, word: &str) -> bool {
    let inside = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(word).any(|(at, _)| {
        !inside(text[..at].chars().next_back()) && !inside(text[at + word.len()..].chars().next())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use SamplingParameter::{Seed, Temperature};

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

    #[test]
    fn a_refusal_names_a_sent_parameter_in_a_400_or_422() {
        let openai = "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported.";
        assert_eq!(
            refused_sampling(400, openai, &[Temperature, Seed]).parameters(),
            vec![Temperature]
        );
        assert_eq!(
            refused_sampling(
                422,
                "Unrecognized request argument supplied: seed",
                &[Temperature, Seed]
            )
            .parameters(),
            vec![Seed]
        );
        // Not sent, other statuses, other words.
        assert!(refused_sampling(400, openai, &[Seed]).is_empty());
        assert!(refused_sampling(500, openai, &[Temperature]).is_empty());
        assert!(refused_sampling(429, openai, &[Temperature]).is_empty());
        assert!(refused_sampling(
            400,
            "the seeded cache is full; temperatures vary",
            &[Temperature, Seed]
        )
        .is_empty());
        assert!(refused_sampling(
            400,
            "maximum context length is 2048 tokens",
            &[Temperature, Seed]
        )
        .is_empty());
    }
}
