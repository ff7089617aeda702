//! Unit tests of the OpenAI-compatible adapter that need no server: the lenient parser on
//! hand-written bodies in the shapes real servers send, the wire format, URL rule, retry
//! timing, `Retry-After` parsing and secret handling. The HTTP behaviour is tested against a
//! real server in this crate's `tests/it/model_openai.rs`.

use super::*;

const KEY: &str = "sk-unit-test-0123456789abcdef";

fn parse(body: &str) -> Result<ChatResponse, ModelError> {
    parse_chat_completion(body.as_bytes())
}

fn model_with_key() -> OpenAiModel {
    let mut config = OpenAiConfig::new("http://127.0.0.1:9/v1", "test-model");
    config.api_key_env = Some("DIAG_UNIT_KEY".into());
    OpenAiModel::new_with_env(config, |name| {
        (name == "DIAG_UNIT_KEY").then(|| OsString::from(KEY))
    })
    .expect("config is valid")
}

// ---- lenient parsing -------------------------------------------------------------------------

#[test]
fn openai_plain_answer() {
    let r = parse(
        r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o",
            "choices":[{"index":0,"message":{"role":"assistant","content":"Hello","refusal":null},
                        "logprobs":null,"finish_reason":"stop"}],
            "usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,
                     "prompt_tokens_details":{"cached_tokens":0}}}"#,
    )
    .unwrap();
    assert_eq!(r.content.as_deref(), Some("Hello"));
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.finish_reason, FinishReason::Stop);
    assert_eq!(
        r.usage,
        Some(Usage {
            prompt_tokens: 9,
            completion_tokens: 2
        })
    );
}

#[test]
fn ollama_style_tool_call_with_object_arguments_and_stop() {
    // Ollama reports `stop` on tool-call turns and may send arguments as an object.
    let r = parse(
        r#"{"id":"chatcmpl-42","object":"chat.completion","model":"qwen2.5:7b",
            "choices":[{"index":0,"message":{"role":"assistant","content":"",
              "tool_calls":[{"id":"call_abc","index":0,"type":"function",
                "function":{"name":"search_logs","arguments":{"query":"502","service":"checkout"}}}]},
              "finish_reason":"stop"}],
            "usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150}}"#,
    )
    .unwrap();
    assert_eq!(r.content, None, "empty content is None");
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].id, "call_abc");
    assert_eq!(r.tool_calls[0].name, "search_logs");
    assert_eq!(
        r.tool_calls[0].arguments,
        json!({"query": "502", "service": "checkout"})
    );
}

#[test]
fn vllm_style_tool_calls_with_null_content_and_string_arguments() {
    let r = parse(
        r#"{"id":"chatcmpl-vllm","object":"chat.completion","created":1,"model":"meta-llama",
            "choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning_content":null,
              "tool_calls":[
                {"id":"chatcmpl-tool-1","type":"function","function":{"name":"current_time","arguments":"{}"}},
                {"id":"chatcmpl-tool-2","type":"function","function":{"name":"search_logs",
                  "arguments":"{\"query\": \"timeout\", \"limit\": 20}"}}]},
              "logprobs":null,"finish_reason":"tool_calls","stop_reason":128008}],
            "usage":{"prompt_tokens":300,"total_tokens":340,"completion_tokens":40},
            "prompt_logprobs":null}"#,
    )
    .unwrap();
    assert_eq!(r.content, None);
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    let names: Vec<_> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["current_time", "search_logs"]);
    assert_eq!(r.tool_calls[0].arguments, json!({}));
    assert_eq!(
        r.tool_calls[1].arguments,
        json!({"query": "timeout", "limit": 20})
    );
}

#[test]
fn llamacpp_style_empty_content_without_usage() {
    let r = parse(
        r#"{"choices":[{"finish_reason":"length","index":0,"message":{"content":"","role":"assistant"}}],
            "created":1,"model":"gguf","object":"chat.completion","id":"chatcmpl-x",
            "timings":{"prompt_n":10,"predicted_n":0}}"#,
    )
    .unwrap();
    assert_eq!(r.content, None);
    assert_eq!(r.finish_reason, FinishReason::Length);
    assert_eq!(r.usage, None, "missing usage is None");
}

#[test]
fn finish_reason_variants() {
    let with = |reason: &str, tool: bool| {
        let calls = if tool {
            r#","tool_calls":[{"id":"c","function":{"name":"t","arguments":"{}"}}]"#
        } else {
            ""
        };
        parse(&format!(
            r#"{{"choices":[{{"message":{{"content":"x"{calls}}},"finish_reason":{reason}}}]}}"#
        ))
        .unwrap()
        .finish_reason
    };
    assert_eq!(with(r#""stop""#, false), FinishReason::Stop);
    assert_eq!(with(r#""eos""#, false), FinishReason::Stop);
    assert_eq!(with(r#""length""#, false), FinishReason::Length);
    assert_eq!(
        with(r#""content_filter""#, false),
        FinishReason::ContentFilter
    );
    assert_eq!(with("null", false), FinishReason::Other);
    assert_eq!(with(r#""weird""#, false), FinishReason::Other);
    // Tool calls present mean tool calls, whatever the server says about stopping.
    assert_eq!(with(r#""stop""#, true), FinishReason::ToolCalls);
    assert_eq!(with("null", true), FinishReason::ToolCalls);
    assert_eq!(with(r#""function_call""#, true), FinishReason::ToolCalls);
    // A cut-off answer stays visible as such.
    assert_eq!(with(r#""length""#, true), FinishReason::Length);
    // "tool_calls" without any call is not trusted.
    assert_eq!(with(r#""tool_calls""#, false), FinishReason::Other);
}

#[test]
fn arguments_variants() {
    let args = |raw: &str| {
        parse(&format!(
            r#"{{"choices":[{{"message":{{"content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":"t","arguments":{raw}}}}}]}},"finish_reason":"tool_calls"}}]}}"#
        ))
        .map(|r| r.tool_calls[0].arguments.clone())
    };
    assert_eq!(args(r#""{\"a\":1}""#).unwrap(), json!({"a": 1}));
    assert_eq!(args(r#"{"a":1}"#).unwrap(), json!({"a": 1}));
    assert_eq!(
        args(r#""""#).unwrap(),
        json!({}),
        "empty text means no arguments"
    );
    assert_eq!(args(r#""  ""#).unwrap(), json!({}));
    assert_eq!(args("null").unwrap(), json!({}));
    // Double-encoded (seen from some llama.cpp templates).
    assert_eq!(args(r#""\"{\\\"a\\\":1}\"""#).unwrap(), json!({"a": 1}));

    let err = args(r##""{\"query\": \"502\", \"serv""##).unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient);
    assert!(err.message.contains("malformed tool arguments"), "{err}");
    assert!(err.message.contains("c1"), "{err}");
    assert!(
        !err.message.contains("serv"),
        "arguments are not echoed: {err}"
    );
}

#[test]
fn missing_tool_call_id_and_legacy_function_call() {
    let r = parse(
        r#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"a","arguments":"{}"}},
            {"id":"","function":{"name":"b"}}]},"finish_reason":"tool_calls"}]}"#,
    )
    .unwrap();
    assert_eq!(r.tool_calls[0].id, "call_0");
    assert_eq!(r.tool_calls[1].id, "call_1");
    assert_eq!(r.tool_calls[1].arguments, json!({}));

    let legacy = parse(
        r#"{"choices":[{"message":{"content":null,"function_call":{"name":"a","arguments":"{\"x\":2}"}},
            "finish_reason":"function_call"}]}"#,
    )
    .unwrap();
    assert_eq!(legacy.tool_calls.len(), 1);
    assert_eq!(legacy.tool_calls[0].arguments, json!({"x": 2}));
    assert_eq!(legacy.finish_reason, FinishReason::ToolCalls);
}

#[test]
fn content_as_parts_is_joined() {
    let r = parse(
        r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
            "finish_reason":"stop"}]}"#,
    )
    .unwrap();
    assert_eq!(r.content.as_deref(), Some("ab"));
    let empty =
        parse(r#"{"choices":[{"message":{"content":[]},"finish_reason":"stop"}]}"#).unwrap();
    assert_eq!(empty.content, None);
}

#[test]
fn usage_variants() {
    let usage = |u: &str| {
        parse(&format!(
            r#"{{"choices":[{{"message":{{"content":"x"}},"finish_reason":"stop"}}],"usage":{u}}}"#
        ))
        .unwrap()
        .usage
    };
    assert_eq!(usage("null"), None);
    assert_eq!(usage("{}"), None);
    assert_eq!(
        usage(r#"{"input_tokens":3,"output_tokens":4}"#),
        Some(Usage {
            prompt_tokens: 3,
            completion_tokens: 4
        })
    );
    assert_eq!(
        usage(r#"{"prompt_tokens":3}"#),
        Some(Usage {
            prompt_tokens: 3,
            completion_tokens: 0
        })
    );
}

#[test]
fn empty_missing_and_cut_off_answers_are_transient() {
    for body in [
        "",
        "  \n",
        r#"{"id":"x","object":"chat.completion","choices":[]}"#,
        r#"{"id":"x","object":"chat.completion"}"#,
        r#"{"choices":[{"index":0,"finish_reason":"stop"}]}"#,
        r#"{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":"Hel"#,
        "{malformed json: <<<chaos>>>",
        "<html><body>502 Bad Gateway</body></html>",
        "[1,2]",
    ] {
        let err = parse(body).unwrap_err();
        assert_eq!(err.class, ErrorClass::Transient, "{body:?}: {err}");
        assert!(
            err.message.starts_with("truncated or empty response"),
            "{body:?}: {err}"
        );
    }
}

#[test]
fn malformed_message_parts_are_transient() {
    for body in [
        r#"{"choices":[{"message":{"content":42},"finish_reason":"stop"}]}"#,
        r#"{"choices":[{"message":{"tool_calls":{"a":1}},"finish_reason":"stop"}]}"#,
        r#"{"choices":[{"message":{"tool_calls":[{"id":"c"}]},"finish_reason":"stop"}]}"#,
        r#"{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"arguments":"{}"}}]}}]}"#,
    ] {
        let err = parse(body).unwrap_err();
        assert_eq!(err.class, ErrorClass::Transient, "{body}: {err}");
        assert!(err.message.starts_with("malformed answer"), "{body}: {err}");
    }
}

#[test]
fn an_error_inside_a_2xx_answer_is_classified() {
    let rate = parse(r#"{"error":{"message":"Rate limit exceeded","code":429}}"#).unwrap_err();
    assert_eq!(rate.class, ErrorClass::Transient);
    assert!(rate.message.contains("Rate limit exceeded"), "{rate}");
    let other = parse(r#"{"error":"model not loaded"}"#).unwrap_err();
    assert_eq!(other.class, ErrorClass::Permanent);
    assert!(other.message.contains("model not loaded"), "{other}");
}

// ---- wire format -----------------------------------------------------------------------------

#[test]
fn wire_request_has_the_openai_shape() {
    let mut config = OpenAiConfig::new("http://127.0.0.1:9/v1", "m1");
    config.temperature = Some(0.5);
    config.max_tokens = Some(100);
    let model = OpenAiModel::new(config).unwrap();
    let request = ChatRequest {
        messages: vec![
            Message::system("be brief"),
            Message::user("why 502?"),
            Message::assistant(
                None,
                vec![ToolCall {
                    id: "call_1".into(),
                    name: "search_logs".into(),
                    arguments: json!({"query": "502"}),
                }],
            ),
            Message::tool_result("call_1", r#"{"matches":[]}"#),
            Message::assistant(Some("nothing found".into()), Vec::new()),
        ],
        tools: vec![ToolSpec {
            name: "search_logs".into(),
            description: "search the logs".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
        }],
        temperature: None,
        max_tokens: Some(7),
        response_format: None,
        tool_choice: Some(diag_core::model::ToolChoice::Auto),
        fit: None,
        evidence_turn: false,
    };
    let body = model.wire_request(&request);
    assert_eq!(
        body,
        json!({
            "model": "m1",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "why 502?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "search_logs", "arguments": "{\"query\":\"502\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"matches\":[]}"},
                {"role": "assistant", "content": "nothing found"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "search_logs", "description": "search the logs",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}],
            "tool_choice": "auto",
            "temperature": 0.5,
            "max_tokens": 7,
            "stream": false,
        })
    );

    let mut bare = ChatRequest::new(vec![Message::user("hi")]);
    bare.temperature = Some(0.0);
    bare.tool_choice = Some(diag_core::model::ToolChoice::None);
    let body = model.wire_request(&bare);
    assert!(body.get("tools").is_none(), "no empty tools array");
    assert!(
        body.get("tool_choice").is_none(),
        "tool_choice only goes beside tools"
    );
    assert_eq!(body["temperature"], json!(0.0));
    assert_eq!(body["max_tokens"], json!(100));
    // The model's max_tokens caps what a request asks for.
    bare.max_tokens = Some(1000);
    assert_eq!(model.wire_request(&bare)["max_tokens"], json!(100));
}

#[test]
fn sampling_goes_as_configured_less_what_the_endpoint_refused() {
    use diag_core::model::{EndpointMemory, SamplingParameter};
    let mut config = OpenAiConfig::new("http://127.0.0.1:9/v1", "m1");
    config.temperature = Some(0.0);
    config.seed = Some(42);
    let memory = EndpointMemory::default();
    let model = OpenAiModel::new(config.clone())
        .unwrap()
        .with_endpoint_memory(memory.clone());
    let request = ChatRequest::new(vec![Message::user("hi")]);
    let body = model.wire_request(&request);
    assert_eq!(
        (&body["temperature"], &body["seed"]),
        (&json!(0.0), &json!(42))
    );
    let key = learned_key("http://127.0.0.1:9/v1", "m1").unwrap();
    memory.learn(&key, |l| {
        l.refused_sampling = l.refused_sampling.with(SamplingParameter::Temperature);
    });
    let body = model.wire_request(&request);
    assert!(body.get("temperature").is_none(), "{body}");
    assert_eq!(body["seed"], json!(42), "only what was refused is left out");
    // Another model on the same endpoint shares what it taught.
    let sibling = OpenAiModel::new(config)
        .unwrap()
        .with_endpoint_memory(memory.clone());
    memory.learn(&key, |l| {
        l.refused_sampling = l.refused_sampling.with(SamplingParameter::Seed);
    });
    let body = sibling.wire_request(&request);
    assert!(body.get("temperature").is_none() && body.get("seed").is_none());
}

#[test]
fn output_contracts_go_on_the_wire_in_the_configured_form() {
    use diag_core::model::{OutputSchema, StructuredOutputSetting};
    let schema = OutputSchema {
        name: "composer_answer_v1".into(),
        schema: json!({"type": "object", "properties": {
            "schema": {"type": "string", "enum": ["composer_answer_v1"]},
            "cited_claims": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
            "required": ["schema"], "additionalProperties": false}),
        grammar: None,
    };
    let mut request = ChatRequest::new(vec![Message::user("hi")]);
    request.response_format = Some(schema.clone());
    let wire = |setting: StructuredOutputSetting, request: &ChatRequest| {
        let mut config = OpenAiConfig::new(format!("http://127.0.0.1:9/{}", setting.as_str()), "m");
        config.structured_output = setting;
        OpenAiModel::new(config).unwrap().wire_request(request)
    };
    let strict = wire(StructuredOutputSetting::Auto, &request);
    assert_eq!(
        strict["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "composer_answer_v1",
            "strict": true, "schema": {"type": "object", "properties": {
                "schema": {"type": "string", "enum": ["composer_answer_v1"]},
                "cited_claims": {"type": ["array", "null"], "items": {"type": "string"}}},
                "required": ["cited_claims", "schema"], "additionalProperties": false}}})
    );
    let object = wire(StructuredOutputSetting::JsonObject, &request);
    assert_eq!(
        object["response_format"],
        json!({"type": "json_object", "schema": schema.schema})
    );
    assert!(wire(StructuredOutputSetting::Off, &request)
        .get("response_format")
        .is_none());
    // Beside tools no contract is sent in any form: a grammar over the whole answer leaves the
    // model no way to call a tool.
    request.tools = vec![ToolSpec {
        name: "t".into(),
        description: String::new(),
        parameters: json!(null),
    }];
    for setting in [
        StructuredOutputSetting::Auto,
        StructuredOutputSetting::JsonSchema,
        StructuredOutputSetting::JsonObject,
        StructuredOutputSetting::Off,
    ] {
        assert!(
            wire(setting, &request).get("response_format").is_none(),
            "{setting:?}"
        );
    }
}

#[test]
fn a_llama_cpp_server_is_told_by_its_model_list() {
    use crate::is_llama_cpp_server;
    let llama = json!({"models": [{"name": "qwen"}], "object": "list", "data": [
        {"id": "qwen", "object": "model", "created": 1, "owned_by": "llamacpp",
         "meta": {"n_ctx_train": 32768}}]});
    assert!(is_llama_cpp_server(&llama));
    for other in [
        json!({"object": "list", "data": [{"id": "gpt-4o", "owned_by": "openai"}]}),
        json!({"object": "list", "data": []}),
        json!({"object": "list", "data": [{"id": "a", "owned_by": "llamacpp"},
            {"id": "b", "owned_by": "vllm"}]}),
        json!({"data": "llamacpp"}),
        json!(null),
    ] {
        assert!(!is_llama_cpp_server(&other), "{other}");
    }
}

#[test]
fn base_url_rule() {
    let url = |base: &str| chat_completions_url(base).map(|u| u.to_string());
    let want = "http://127.0.0.1:8000/v1/chat/completions";
    for base in [
        "http://127.0.0.1:8000/v1",
        "http://127.0.0.1:8000/v1/",
        " http://127.0.0.1:8000/v1// ",
        "http://127.0.0.1:8000",
        "http://127.0.0.1:8000/",
        "http://127.0.0.1:8000/v1/chat/completions",
        "http://127.0.0.1:8000/v1/chat/completions/",
    ] {
        assert_eq!(url(base).unwrap(), want, "{base}");
    }
    assert_eq!(
        url("https://gw.example/openai/deployments/x?api-version=2024-10-21").unwrap(),
        "https://gw.example/openai/deployments/x/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(
        url("https://api.openai.com/v1").unwrap(),
        "https://api.openai.com/v1/chat/completions"
    );
    assert!(url("127.0.0.1:8000").is_err());
    assert!(url("ftp://host/v1").is_err());
    assert!(url("").is_err());
    let creds = url("https://user:sk-secret-in-url-000@gw.example/v1").unwrap_err();
    assert!(!creds.to_string().contains("sk-secret"), "{creds}");
}

// ---- retries ---------------------------------------------------------------------------------

#[test]
fn backoff_grows_is_capped_and_honours_retry_after() {
    let ms = Duration::from_millis;
    assert_eq!(retry_wait(0, None), Some(ms(200)));
    assert_eq!(retry_wait(1, None), Some(ms(400)));
    assert_eq!(retry_wait(2, None), Some(ms(800)));
    assert_eq!(retry_wait(5, None), Some(RETRY_MAX_BACKOFF));
    assert_eq!(retry_wait(u32::MAX, None), Some(RETRY_MAX_BACKOFF));
    assert_eq!(retry_wait(0, Some(ms(1000))), Some(ms(1000)));
    assert_eq!(
        retry_wait(1, Some(ms(100))),
        Some(ms(400)),
        "never sooner than backoff"
    );
    assert_eq!(retry_wait(0, Some(MAX_RETRY_WAIT)), Some(MAX_RETRY_WAIT));
    assert_eq!(
        retry_wait(0, Some(ms(5001))),
        None,
        "longer waits go to the caller"
    );
}

#[test]
fn retry_after_seconds_and_http_dates() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // 1994-11-06 08:49:37 UTC
    assert_eq!(parse_retry_after("1", now), Some(Duration::from_secs(1)));
    assert_eq!(
        parse_retry_after(" 120 ", now),
        Some(Duration::from_secs(120))
    );
    assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
    assert_eq!(
        parse_retry_after("99999999999999999999999", now),
        Some(Duration::from_secs(u64::MAX))
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
        Some(Duration::ZERO),
        "a date in the past means no wait"
    );
    for bad in [
        "",
        "-1",
        "1.5",
        "soon",
        "Sun, 06 Nov 1994 08:49:47 PST",
        "Sun, 31 Feb 1994 08:49:47 GMT",
        "Sun, 06 Nov 1994 25:49:47 GMT",
    ] {
        assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
    }
}

// ---- secrets and messages --------------------------------------------------------------------

#[test]
fn secrets_are_redacted() {
    let text = format!(
        "Incorrect API key provided: {KEY}. Header was Authorization: Bearer abc.def-ghi; also sk-otherkey12345678"
    );
    let out = redact_secrets(&text, Some(KEY));
    assert!(!out.contains(KEY), "{out}");
    assert!(!out.contains("abc.def-ghi"), "{out}");
    assert!(!out.contains("sk-otherkey"), "{out}");
    assert!(out.contains("Incorrect API key provided: ***"), "{out}");
    assert_eq!(
        redact_secrets("Authorization: Basic dXNlcjpwYXNz was refused", None),
        "Authorization: Basic *** was refused"
    );
    assert_eq!(redact_secrets("model not found", None), "model not found");
    assert_eq!(
        redact_secrets("tokens sk-short ok", None),
        "tokens sk-short ok",
        "short words are not keys"
    );
}

#[test]
fn error_excerpts_are_bounded_single_lines() {
    assert_eq!(
        error_excerpt(br#"{"error":{"message":"slow down","type":"rate_limit"}}"#),
        "slow down"
    );
    assert_eq!(
        error_excerpt(br#"{"error":"model \"x\" not found"}"#),
        "model \"x\" not found"
    );
    assert_eq!(error_excerpt(br#"{"detail":"Not Found"}"#), "Not Found");
    assert_eq!(
        error_excerpt(b"upstream\nconnect\x1b[31m error"),
        "upstream connect [31m error"
    );
    let long = "x".repeat(5000);
    let cut = error_excerpt(long.as_bytes());
    assert_eq!(cut.chars().count(), ERROR_EXCERPT_CHARS);
    assert!(cut.ends_with('…'));
    assert_eq!(
        status_message(StatusCode::TOO_MANY_REQUESTS, "slow down"),
        "HTTP 429 Too Many Requests: slow down"
    );
    assert_eq!(
        status_message(StatusCode::from_u16(599).unwrap(), ""),
        "HTTP 599"
    );
}

#[test]
fn the_key_never_shows_in_debug_output() {
    let model = model_with_key();
    let debug = format!("{model:?}");
    assert!(!debug.contains(KEY), "{debug}");
    assert!(debug.contains("api_key: Some(\"***\")"), "{debug}");
    assert!(!format!("{:?}", ApiKey(KEY.into())).contains(KEY));
    assert_eq!(model.name(), "test-model");
    assert_eq!(model.endpoint(), "http://127.0.0.1:9/v1/chat/completions");
}

#[test]
fn config_errors_name_the_variable_never_the_value() {
    let config = |var: &str| {
        let mut c = OpenAiConfig::new("http://127.0.0.1:9/v1", "m");
        c.api_key_env = Some(var.into());
        c
    };
    let missing = OpenAiModel::new_with_env(config("DIAG_NOT_SET"), |_| None).unwrap_err();
    assert_eq!(
        missing,
        ConfigError::MissingApiKey {
            var: "DIAG_NOT_SET".into()
        }
    );
    assert!(missing.to_string().contains("DIAG_NOT_SET"));

    let empty =
        OpenAiModel::new_with_env(config("K"), |_| Some(OsString::from("  \n"))).unwrap_err();
    assert_eq!(empty, ConfigError::EmptyApiKey { var: "K".into() });

    let bad = OpenAiModel::new_with_env(config("K"), |_| {
        Some(OsString::from("sk-a\u{7}bcdefghijkl"))
    })
    .unwrap_err();
    assert_eq!(bad, ConfigError::InvalidApiKey { var: "K".into() });
    assert!(!bad.to_string().contains("bcdefghijkl"));

    assert!(matches!(
        OpenAiModel::new_with_env(config(""), |_| None).unwrap_err(),
        ConfigError::InvalidApiKeyEnv { .. }
    ));

    // A trailing newline from a pasted key is not part of it.
    let trimmed =
        OpenAiModel::new_with_env(config("K"), |_| Some(OsString::from(format!("{KEY}\n"))))
            .unwrap();
    assert_eq!(trimmed.api_key.as_ref().unwrap().0, KEY);

    assert_eq!(
        OpenAiModel::new(OpenAiConfig::new("http://h/v1", " ")).unwrap_err(),
        ConfigError::EmptyModel
    );
    let mut zero = OpenAiConfig::new("http://h/v1", "m");
    zero.request_timeout = Duration::ZERO;
    assert_eq!(
        OpenAiModel::new(zero).unwrap_err(),
        ConfigError::ZeroTimeout
    );
}

#[test]
fn error_messages_from_the_adapter_are_redacted() {
    let model = model_with_key();
    let msg = model.redact(&format!("echo of {KEY} and Bearer {KEY}"));
    assert!(!msg.contains(KEY), "{msg}");
    let msg = with_attempts(ModelError::transient("HTTP 500"), 3);
    assert_eq!(msg.message, "HTTP 500 (after 3 attempts)");
    assert_eq!(with_attempts(ModelError::transient("x"), 1).message, "x");
}
