//! Tool calls a model writes in its content. Some servers do not parse a small model's tool
//! call out of its text (llama.cpp's server with a model that writes a fenced JSON object
//! instead of its chat format's tags), so the call arrives as the answer's content. The
//! runtime takes such content as the call it is when it parses exactly and its arguments are
//! valid under the offered tool's parameter schema; anything else stays content.
//!
//! Plain functions over plain data: a replay, an export and a report derive the same calls
//! from the recorded request and response.

use serde_json::{Map, Value};

use crate::model::{ChatResponse, ToolCall};
use crate::tools::ToolSpec;

/// Content longer than this is never read as tool calls (a call is a few hundred bytes).
pub const MAX_CONTENT_BYTES: usize = 16 * 1024;

/// The most calls one answer's content is read as (`<tool_call>` tags in a row).
pub const MAX_CONTENT_CALLS: usize = 8;

/// The tool calls of a model answer to a request that offered `offered`: its own
/// `tool_calls`, or, when it has none, the calls written in its content
/// ([`content_tool_calls`]). A request that offered no tools has none of the latter.
pub fn answer_tool_calls(offered: &[ToolSpec], response: &ChatResponse) -> Vec<ToolCall> {
    if !response.tool_calls.is_empty() {
        return response.tool_calls.clone();
    }
    response
        .content
        .as_deref()
        .and_then(|content| content_tool_calls(content, offered))
        .unwrap_or_default()
}

/// The tool calls `content` is, in one of the forms small models write them, or `None` when it
/// is not exactly that:
/// - one JSON object `{"name": …, "arguments": {…}}`, bare or as the only fenced block
///   (```` ```json ```` or ```` ``` ````);
/// - one or more Hermes/Qwen `<tool_call>{…}</tool_call>` blocks with only whitespace around
///   and between them.
///
/// The object has exactly the members `name` (an offered tool) and `arguments` (an object
/// valid under that tool's `parameters` schema). Calls get the ids `call_0`, `call_1`, … in
/// order, as the OpenAI adapter names calls that come without one.
pub fn content_tool_calls(content: &str, offered: &[ToolSpec]) -> Option<Vec<ToolCall>> {
    if offered.is_empty() || content.len() > MAX_CONTENT_BYTES {
        return None;
    }
    let text = content.trim();
    let objects: Vec<&str> = if text.starts_with("<tool_call>") {
        tagged(text)?
    } else if let Some(rest) = text.strip_prefix("```") {
        vec![fenced(rest)?]
    } else {
        vec![text]
    };
    if objects.is_empty() || objects.len() > MAX_CONTENT_CALLS {
        return None;
    }
    objects
        .into_iter()
        .enumerate()
        .map(|(i, body)| call(body, offered).map(|(name, arguments)| (i, name, arguments)))
        .map(|c| {
            c.map(|(i, name, arguments)| ToolCall {
                id: format!("call_{i}"),
                name,
                arguments,
            })
        })
        .collect()
}

/// The bodies of `<tool_call>…</tool_call>` blocks that make up all of `text`.
fn tagged(mut text: &str) -> Option<Vec<&str>> {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let mut bodies = Vec::new();
    while !text.is_empty() {
        let rest = text.strip_prefix(OPEN)?;
        let end = rest.find(CLOSE)?;
        bodies.push(&rest[..end]);
        text = rest[end + CLOSE.len()..].trim_start();
    }
    Some(bodies)
}

/// The body of the one fenced block that is all of the text (after its opening backticks):
/// an info string of `json` or nothing, and nothing after the closing fence.
fn fenced(rest: &str) -> Option<&str> {
    let (info, body) = rest.split_once('\n')?;
    let info = info.trim();
    if !(info.is_empty() || info.eq_ignore_ascii_case("json")) {
        return None;
    }
    let body = body.trim_end().strip_suffix("```")?;
    // One block only: a closing fence inside would end it early.
    (!body.contains("```")).then_some(body)
}

/// One `{"name": …, "arguments": {…}}` object naming an offered tool with valid arguments.
fn call(body: &str, offered: &[ToolSpec]) -> Option<(String, Value)> {
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(body.trim()) else {
        return None;
    };
    if object.len() != 2 {
        return None;
    }
    let name = object.get("name")?.as_str()?;
    let arguments = object.get("arguments")?;
    if !arguments.is_object() {
        return None;
    }
    let tool = offered.iter().find(|t| t.name == name)?;
    valid_arguments(&tool.parameters, arguments).then(|| (name.to_string(), arguments.clone()))
}

/// Whether `arguments` is valid under a tool's `parameters` schema. A schema that cannot be
/// compiled here (an external `$ref`, a malformed schema) accepts nothing.
pub fn valid_arguments(parameters: &Value, arguments: &Value) -> bool {
    let empty = Value::Object(Map::new());
    let schema = if parameters.is_null() {
        &empty
    } else {
        parameters
    };
    match jsonschema::validator_for(schema) {
        Ok(validator) => validator.is_valid(arguments),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FinishReason;
    use proptest::prelude::*;
    use serde_json::json;

    fn catalog() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "search_logs".into(),
                description: "Search logs".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 500},
                        "service": {"type": "string"}
                    },
                    "required": ["query"],
                    "additionalProperties": false
                }),
            },
            ToolSpec {
                name: "current_time".into(),
                description: "Now".into(),
                parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            },
        ]
    }

    fn one(name: &str, arguments: Value) -> Option<Vec<ToolCall>> {
        Some(vec![ToolCall {
            id: "call_0".into(),
            name: name.into(),
            arguments,
        }])
    }

    #[test]
    fn each_common_form_is_read_as_the_call_it_is() {
        let tools = catalog();
        let call = r#"{"name": "search_logs", "arguments": {"query": "502", "limit": 5}}"#;
        let want = one("search_logs", json!({"query": "502", "limit": 5}));
        for content in [
            call.to_string(),
            format!("  {call}\n"),
            format!("```json\n{call}\n```"),
            format!("```JSON\n{call}\n```\n"),
            format!("```\n{call}\n```"),
            format!("<tool_call>\n{call}\n</tool_call>"),
            format!("<tool_call>{call}</tool_call>"),
        ] {
            assert_eq!(content_tool_calls(&content, &tools), want, "{content}");
        }
        // Hermes tags in a row are several calls, numbered in order.
        let two = format!(
            "<tool_call>\n{call}\n</tool_call>\n<tool_call>\n{}\n</tool_call>",
            r#"{"name": "current_time", "arguments": {}}"#
        );
        let calls = content_tool_calls(&two, &tools).unwrap();
        let ids: Vec<(&str, &str)> = calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(ids, [("call_0", "search_logs"), ("call_1", "current_time")]);
    }

    #[test]
    fn near_misses_stay_content() {
        let tools = catalog();
        let call = r#"{"name": "search_logs", "arguments": {"query": "502"}}"#;
        for content in [
            // Prose around the call.
            format!("I will search the logs: {call}"),
            format!("{call}\nThen I will answer."),
            format!("```json\n{call}\n```\nDone."),
            format!("<tool_call>{call}</tool_call> and more"),
            // Not closed, or a second block.
            format!("```json\n{call}\n"),
            format!("<tool_call>{call}"),
            format!("```json\n{call}\n```\n```json\n{call}\n```"),
            format!("```python\n{call}\n```"),
            // Other shapes: an evidence document, an array, extra members, a string.
            r#"{"schema": "executor_evidence_v2", "claims": []}"#.to_string(),
            format!("[{call}]"),
            r#"{"name": "search_logs", "arguments": {"query": "502"}, "id": "x"}"#.to_string(),
            r#"{"name": "search_logs", "parameters": {"query": "502"}}"#.to_string(),
            r#"{"name": "search_logs", "arguments": "{\"query\": \"502\"}"}"#.to_string(),
            r#"{"name": "search_logs"}"#.to_string(),
            r#""search_logs""#.to_string(),
            String::new(),
            "   ".to_string(),
            "<tool_call></tool_call>".to_string(),
        ] {
            assert_eq!(content_tool_calls(&content, &tools), None, "{content}");
        }
    }

    #[test]
    fn an_unknown_tool_or_bad_arguments_stay_content() {
        let tools = catalog();
        for content in [
            r#"{"name": "delete_logs", "arguments": {"query": "502"}}"#,
            r#"{"name": "Search_Logs", "arguments": {"query": "502"}}"#,
            // Missing a required member, a wrong type, out of range, an unknown member.
            r#"{"name": "search_logs", "arguments": {}}"#,
            r#"{"name": "search_logs", "arguments": {"query": 502}}"#,
            r#"{"name": "search_logs", "arguments": {"query": "502", "limit": 0}}"#,
            r#"{"name": "search_logs", "arguments": {"query": "502", "grep": true}}"#,
            r#"{"name": "current_time", "arguments": {"tz": "UTC"}}"#,
            // One bad call among tags spoils them all.
            "<tool_call>{\"name\": \"current_time\", \"arguments\": {}}</tool_call>\
             <tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>",
        ] {
            assert_eq!(content_tool_calls(content, &tools), None, "{content}");
        }
        // Nothing offered: nothing is a call.
        let call = r#"{"name": "current_time", "arguments": {}}"#;
        assert_eq!(content_tool_calls(call, &[]), None);
        assert_eq!(
            content_tool_calls(call, &tools),
            one("current_time", json!({}))
        );
        // A schema that cannot be compiled accepts nothing.
        let broken = vec![ToolSpec {
            name: "x".into(),
            description: String::new(),
            parameters: json!({"type": 7}),
        }];
        assert_eq!(
            content_tool_calls(r#"{"name": "x", "arguments": {}}"#, &broken),
            None
        );
    }

    #[test]
    fn an_answer_with_tool_calls_keeps_them_and_content_is_read_only_without() {
        let tools = catalog();
        let own = ToolCall {
            id: "abc".into(),
            name: "current_time".into(),
            arguments: json!({}),
        };
        let mut response = ChatResponse {
            content: Some(r#"{"name": "search_logs", "arguments": {"query": "x"}}"#.into()),
            tool_calls: vec![own.clone()],
            finish_reason: FinishReason::ToolCalls,
            usage: None,
            structured_output: None,
        };
        assert_eq!(answer_tool_calls(&tools, &response), vec![own]);
        response.tool_calls.clear();
        assert_eq!(
            answer_tool_calls(&tools, &response),
            one("search_logs", json!({"query": "x"})).unwrap()
        );
        assert!(answer_tool_calls(&[], &response).is_empty());
        response.content = None;
        assert!(answer_tool_calls(&tools, &response).is_empty());
    }

    proptest! {
        /// Reading content never panics, and whatever it reads is a call to an offered tool
        /// with arguments valid under its schema.
        #[test]
        fn whatever_is_read_is_an_offered_valid_call(content in ".{0,200}") {
            let tools = catalog();
            if let Some(calls) = content_tool_calls(&content, &tools) {
                for c in calls {
                    let tool = tools.iter().find(|t| t.name == c.name).unwrap();
                    prop_assert!(valid_arguments(&tool.parameters, &c.arguments));
                }
            }
        }

        /// Any valid `search_logs` call round-trips through each form.
        #[test]
        fn valid_calls_round_trip(query in "[a-zA-Z0-9 _.:-]{1,40}", limit in 1u32..=500) {
            let tools = catalog();
            let arguments = json!({"query": query, "limit": limit});
            let call = json!({"name": "search_logs", "arguments": arguments}).to_string();
            for content in [call.clone(), format!("```json\n{call}\n```"),
                            format!("<tool_call>\n{call}\n</tool_call>")] {
                prop_assert_eq!(
                    content_tool_calls(&content, &tools),
                    one("search_logs", arguments.clone())
                );
            }
        }
    }
}
