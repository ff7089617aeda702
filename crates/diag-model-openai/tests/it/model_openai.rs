//! The OpenAI-compatible adapter against a real OpenAI-compatible server: aimock
//! (`@copilotkit/aimock`, installed by `scripts/install-peers`), started by each test on
//! 127.0.0.1 with `tests/fixtures/aimock/openai.json` and a required API key, so every request
//! also proves the `Authorization` header. Each test owns its server, so the request counts
//! read from aimock's journal (`GET /__aimock/journal`) are the test's own.
//!
//! A missing aimock fails the tests with the command that installs it: a skipped test would
//! hide that the adapter was never run against a real server.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use diag_core::model::{
    ChatModel, ChatRequest, ErrorClass, FinishReason, Message, ToolCall, Usage,
};
use diag_core::tools::ToolSpec;
use diag_model_openai::{ConfigError, OpenAiConfig, OpenAiModel};
use serde_json::json;

use diag_testkit::Aimock;

/// The key aimock requires and the adapter reads from [`KEY_VAR`]. It also appears in one
/// fixture's error message, to prove that the adapter redacts it.
const KEY: &str = "sk-diag-aimock-test-key-0001";
const KEY_VAR: &str = "DIAG_TEST_OPENAI_KEY";
const MODEL: &str = "diag-test-model";

fn config(base_url: String, retries: u32) -> OpenAiConfig {
    let mut c = OpenAiConfig::new(base_url, MODEL);
    c.api_key_env = Some(KEY_VAR.into());
    c.connect_timeout = Duration::from_secs(2);
    c.request_timeout = Duration::from_secs(5);
    c.max_transport_retries = retries;
    c
}

/// The adapter with `key` standing in for the environment variable, so tests never change the
/// process environment (which other test threads read concurrently).
fn model_with_key(config: OpenAiConfig, key: &str) -> OpenAiModel {
    OpenAiModel::new_with_env(config, |name| {
        (name == KEY_VAR).then(|| OsString::from(key))
    })
    .expect("valid config")
}

fn model(config: OpenAiConfig) -> OpenAiModel {
    model_with_key(config, KEY)
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::system("You diagnose incidents."),
            Message::user(text),
        ],
        tools: vec![search_logs_spec()],
        temperature: Some(0.0),
        max_tokens: Some(256),
        response_format: None,
        tool_choice: None,
        fit: None,
        evidence_turn: false,
    }
}

fn search_logs_spec() -> ToolSpec {
    ToolSpec {
        name: "search_logs".into(),
        description: "Search the configured log files.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"query": {"type": "string"}, "service": {"type": "string"}},
            "required": ["query"],
        }),
    }
}

// ---- answers ---------------------------------------------------------------------------------

#[tokio::test]
async fn plain_answer_with_usage() {
    let server = Aimock::start(Some(KEY));
    let r = model(config(server.base_url(), 2))
        .complete(&ask("plain answer"))
        .await
        .expect("answer");
    assert_eq!(
        r.content.as_deref(),
        Some("checkout-service returned 502 because payment-service timed out")
    );
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.finish_reason, FinishReason::Stop);
    assert_eq!(
        r.usage,
        Some(Usage {
            prompt_tokens: 12,
            completion_tokens: 9
        })
    );
    assert_eq!(server.chat_requests(1).await.len(), 1);
}

#[tokio::test]
async fn tool_call_with_null_content_and_string_arguments() {
    let server = Aimock::start(Some(KEY));
    let r = model(config(server.base_url(), 2))
        .complete(&ask("tool call with object arguments"))
        .await
        .expect("answer");
    // aimock sends `content: null` and the arguments as a compact JSON text.
    assert_eq!(r.content, None);
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        r.tool_calls,
        vec![ToolCall {
            id: "call_logs_1".into(),
            name: "search_logs".into(),
            arguments: json!({"query": "502", "service": "checkout"}),
        }]
    );
}

#[tokio::test]
async fn tool_calls_reported_as_stop_are_tool_calls() {
    let server = Aimock::start(Some(KEY));
    let r = model(config(server.base_url(), 2))
        .complete(&ask("tool call reported as stop"))
        .await
        .expect("answer");
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(r.content, None);
    let calls: Vec<_> = r
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.clone()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("call_time_1", "current_time", json!({})),
            (
                "call_logs_2",
                "search_logs",
                json!({"query": "timeout", "limit": 20})
            ),
        ]
    );
}

#[tokio::test]
async fn text_beside_tool_calls_is_kept() {
    let server = Aimock::start(Some(KEY));
    let r = model(config(server.base_url(), 2))
        .complete(&ask("text and tool call"))
        .await
        .expect("answer");
    assert_eq!(r.content.as_deref(), Some("Looking at the logs first."));
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].arguments, json!({"query": "502"}));
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
}

// ---- what goes on the wire -------------------------------------------------------------------

#[tokio::test]
async fn request_shape_and_the_key_only_in_the_authorization_header() {
    let server = Aimock::start(Some(KEY));
    let request = ChatRequest {
        messages: vec![
            Message::system("You diagnose incidents."),
            Message::user("conversation: why 502?"),
            Message::assistant(
                None,
                vec![ToolCall {
                    id: "call_logs_1".into(),
                    name: "search_logs".into(),
                    arguments: json!({"query": "502"}),
                }],
            ),
            Message::tool_result("call_logs_1", r#"{"matches":[{"line":"upstream 502"}]}"#),
        ],
        tools: vec![search_logs_spec()],
        temperature: None,
        max_tokens: None,
        response_format: None,
        tool_choice: None,
        fit: None,
        evidence_turn: false,
    };
    let r = model(config(server.base_url(), 2))
        .complete(&request)
        .await
        .expect("aimock accepted the key and matched the tool result");
    assert_eq!(
        r.content.as_deref(),
        Some("The logs show upstream 502s from payment-service.")
    );

    let journal = server.chat_requests(1).await;
    assert_eq!(journal.len(), 1);
    let entry = &journal[0];
    assert_eq!(entry["method"], "POST");
    assert_eq!(entry["path"], "/v1/chat/completions");

    // aimock redacts the key headers it knows in its journal; it answered 200 although it
    // requires `Bearer|Key <KEY>`, which proves the header. The exact header text is checked in
    // `the_authorization_header_is_exactly_bearer_key` below.
    let headers = entry["headers"].as_object().expect("headers");
    assert!(headers.contains_key("authorization"), "{headers:?}");
    for other in ["x-api-key", "api-key", "x-goog-api-key", "xi-api-key"] {
        assert!(!headers.contains_key(other), "{other} must not be sent");
    }
    let everything = entry.to_string();
    assert!(
        !everything.contains(KEY),
        "the key reached the journal: {everything}"
    );

    let body = &entry["body"];
    assert!(!body.to_string().contains(KEY));
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["stream"], false);
    assert!(body.get("temperature").is_none() && body.get("max_tokens").is_none());
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You diagnose incidents."},
            {"role": "user", "content": "conversation: why 502?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_logs_1", "type": "function",
                 "function": {"name": "search_logs", "arguments": "{\"query\":\"502\"}"}}]},
            {"role": "tool", "tool_call_id": "call_logs_1",
             "content": "{\"matches\":[{\"line\":\"upstream 502\"}]}"},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {
            "name": "search_logs",
            "description": "Search the configured log files.",
            "parameters": search_logs_spec().parameters,
        }}])
    );
}

/// aimock's journal hides the header value, so this one exchange goes to a listener in the
/// test that records the raw request bytes and answers a fixed completion.
#[tokio::test]
async fn the_authorization_header_is_exactly_bearer_key() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().unwrap().port();
    let capture = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("one connection");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        // Headers, then Content-Length bytes of body.
        loop {
            let n = stream.read(&mut buf).expect("read request");
            assert!(n > 0, "connection closed before the request ended");
            raw.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&raw).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if raw.len() >= end + 4 + length {
                    break;
                }
            }
        }
        let answer = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#;
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
            answer.len()
        )
        .unwrap();
        String::from_utf8(raw).expect("UTF-8 request")
    });

    let r = model(config(format!("http://127.0.0.1:{port}/v1"), 0))
        .complete(&ask("anything"))
        .await
        .expect("answer");
    assert_eq!(r.content.as_deref(), Some("ok"));
    let raw = capture.join().expect("capture thread");
    let (head, body) = raw.split_once("\r\n\r\n").expect("head and body");
    assert!(
        head.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
        "{head}"
    );
    let auth: Vec<_> = head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("authorization:"))
        .collect();
    assert_eq!(auth, vec![format!("authorization: Bearer {KEY}")]);
    assert_eq!(
        head.matches(KEY).count(),
        1,
        "the key is in one header only"
    );
    assert!(!body.contains(KEY), "the key is never in the body");
}

#[tokio::test]
async fn base_url_forms_reach_the_same_endpoint_and_no_key_means_no_header() {
    let server = Aimock::start(None);
    let forms = [
        server.base_url(),
        format!("{}/", server.base_url()),
        server.root(),
        format!("{}/chat/completions", server.base_url()),
    ];
    for base in &forms {
        let mut c = config(base.clone(), 0);
        c.api_key_env = None;
        let m = OpenAiModel::new(c).expect("valid config");
        assert_eq!(
            m.endpoint(),
            format!("{}/chat/completions", server.base_url())
        );
        m.complete(&ask("plain answer")).await.expect(base);
    }
    let journal = server.chat_requests(forms.len()).await;
    assert_eq!(journal.len(), forms.len());
    for entry in journal {
        assert_eq!(entry["path"], "/v1/chat/completions");
        assert!(entry["headers"].get("authorization").is_none());
    }
}

// ---- failures --------------------------------------------------------------------------------

#[tokio::test]
async fn rate_limit_is_retried_after_the_servers_wait() {
    let server = Aimock::start(Some(KEY));
    let r = model(config(server.base_url(), 2))
        .complete(&ask("rate limited once"))
        .await
        .expect("the transport retry gets the answer");
    assert_eq!(r.content.as_deref(), Some("served after the wait"));
    let journal = server.chat_requests(2).await;
    assert_eq!(journal.len(), 2, "one 429, then the answer");
    assert_eq!(journal[0]["response"]["status"], 429);
    assert_eq!(journal[1]["response"]["status"], 200);
    // Retry-After: 1 was honoured (the backoff alone would be 200 ms); generous bound.
    let gap = journal[1]["timestamp"].as_u64().unwrap() - journal[0]["timestamp"].as_u64().unwrap();
    assert!(
        gap >= 900,
        "retried after {gap} ms, the server asked for 1 s"
    );
}

#[tokio::test]
async fn rate_limit_reports_retry_after_when_retries_run_out() {
    let server = Aimock::start(Some(KEY));
    let err = model(config(server.base_url(), 1))
        .complete(&ask("rate limited always"))
        .await
        .expect_err("always 429");
    assert_eq!(err.class, ErrorClass::Transient);
    assert_eq!(err.retry_after, Some(Duration::from_secs(1)));
    assert!(
        err.message
            .starts_with("HTTP 429 Too Many Requests: Rate limit reached"),
        "{err}"
    );
    assert!(err.message.ends_with("(after 2 attempts)"), "{err}");
    assert_eq!(server.chat_requests(2).await.len(), 2);
}

#[tokio::test]
async fn rate_limit_longer_than_the_cap_goes_straight_to_the_caller() {
    let server = Aimock::start(Some(KEY));
    let err = model(config(server.base_url(), 2))
        .complete(&ask("rate limited for long"))
        .await
        .expect_err("429");
    assert_eq!(err.class, ErrorClass::Transient);
    assert_eq!(err.retry_after, Some(Duration::from_secs(30)));
    assert_eq!(
        server.chat_requests(1).await.len(),
        1,
        "no retry inside the cap"
    );
}

#[tokio::test]
async fn the_next_request_waits_out_a_retry_after_past_the_cap() {
    let server = Aimock::start(Some(KEY));
    let model = model(config(server.base_url(), 2));
    let err = model
        .complete(&ask("rate limited past the cap once"))
        .await
        .expect_err("429 with Retry-After: 6 goes to the caller");
    assert_eq!(err.retry_after, Some(Duration::from_secs(6)));
    // The caller's retry (the node's technical retry) is held back until the server's
    // pause is over, then served.
    let r = model
        .complete(&ask("rate limited past the cap once"))
        .await
        .expect("served after the pause");
    assert_eq!(r.content.as_deref(), Some("served after the long wait"));
    let journal = server.chat_requests(2).await;
    assert_eq!(journal.len(), 2, "one 429, then the answer");
    let gap = journal[1]["timestamp"].as_u64().unwrap() - journal[0]["timestamp"].as_u64().unwrap();
    assert!(
        gap >= 5_900,
        "the next request went out after {gap} ms, the server asked for 6 s"
    );
}

#[tokio::test]
async fn a_pause_longer_than_diag_waits_fails_the_next_call_without_sending_it() {
    let server = Aimock::start(Some(KEY));
    let model = model(config(server.base_url(), 2));
    let first = model
        .complete(&ask("rate limited for hours"))
        .await
        .expect_err("429");
    assert_eq!(first.retry_after, Some(Duration::from_secs(7200)));
    let second = model
        .complete(&ask("plain answer"))
        .await
        .expect_err("the server asked for two hours");
    assert_eq!(second.class, ErrorClass::Transient);
    assert!(
        second
            .message
            .starts_with("not sent: the server asked for ")
            && second.message.contains("Retry-After"),
        "{second}"
    );
    let left = second.retry_after.expect("the time still to wait");
    assert!(
        left > Duration::from_secs(7000) && left <= Duration::from_secs(7200),
        "{left:?}"
    );
    assert_eq!(
        server.chat_requests(1).await.len(),
        1,
        "nothing sent after the 429"
    );
}

#[tokio::test]
async fn server_error_is_transient_after_bounded_retries() {
    let server = Aimock::start(Some(KEY));
    let retries = 2;
    let err = model(config(server.base_url(), retries))
        .complete(&ask("server error"))
        .await
        .expect_err("always 500");
    assert_eq!(err.class, ErrorClass::Transient);
    assert_eq!(err.retry_after, None);
    assert_eq!(
        err.message,
        "HTTP 500 Internal Server Error: The server had an error while processing your request \
         (after 3 attempts)"
    );
    let journal = server.chat_requests(1 + retries as usize).await;
    assert_eq!(journal.len(), 1 + retries as usize);
}

#[tokio::test]
async fn dropped_connection_is_transient() {
    let server = Aimock::start(Some(KEY));
    let err = model(config(server.base_url(), 1))
        .complete(&ask("dropped connection"))
        .await
        .expect_err("aimock closes the connection without an answer");
    assert!(err.message.starts_with("connection failed"), "{err}");
    assert_eq!(err.class, ErrorClass::Transient, "{err}");
    assert_eq!(server.chat_requests(2).await.len(), 2, "retried once");
}

#[tokio::test]
async fn malformed_body_is_transient_truncated() {
    let server = Aimock::start(Some(KEY));
    let err = model(config(server.base_url(), 0))
        .complete(&ask("malformed body"))
        .await
        .expect_err("not JSON");
    assert_eq!(err.class, ErrorClass::Transient);
    assert!(
        err.message.starts_with("truncated or empty response"),
        "{err}"
    );
}

#[tokio::test]
async fn an_answer_slower_than_the_request_timeout_is_a_transient_timeout() {
    let server = Aimock::start(Some(KEY));
    let mut c = config(server.base_url(), 0);
    c.request_timeout = Duration::from_millis(300);
    let err = model(c)
        .complete(&ask("slow answer"))
        .await
        .expect_err("the answer takes 3 s");
    assert_eq!(err.class, ErrorClass::Transient);
    assert_eq!(err.message, "timed out after 300 ms");
}

#[tokio::test]
async fn wrong_api_key_is_permanent_and_never_retried() {
    let server = Aimock::start(Some(KEY));
    let wrong = "sk-wrong-key-for-this-server-9999";
    let err = model_with_key(config(server.base_url(), 2), wrong)
        .complete(&ask("plain answer"))
        .await
        .expect_err("401");
    assert_eq!(err.class, ErrorClass::Permanent);
    assert_eq!(
        err.message,
        "HTTP 401 Unauthorized: Invalid API key (the key is read from the environment variable \
         DIAG_TEST_OPENAI_KEY, named by api_key_env)"
    );
    assert_eq!(err.status, Some(401));
    assert!(err.is_authentication());
    assert!(!err.to_string().contains(wrong));
    // aimock refuses the key before journaling the request, so its counters tell.
    assert_eq!(server.chat_requests_answered(401).await, 1, "never retried");
    assert_eq!(server.chat_requests(0).await.len(), 0);
}

#[tokio::test]
async fn bad_request_is_permanent_and_the_echoed_key_is_redacted() {
    let server = Aimock::start(Some(KEY));
    let err = model(config(server.base_url(), 2))
        .complete(&ask("bad request echoing the key"))
        .await
        .expect_err("400");
    assert_eq!(err.class, ErrorClass::Permanent);
    assert!(!err.message.contains(KEY), "{err}");
    assert!(!format!("{err:?}").contains(KEY));
    assert!(
        err.message
            .starts_with("HTTP 400 Bad Request: Invalid parameter 'tools' for key ***"),
        "{err}"
    );
    assert!(err.message.chars().count() <= 230, "bounded: {err}");
    assert_eq!(server.chat_requests(1).await.len(), 1);
}

#[tokio::test]
async fn unmatched_request_is_a_permanent_404() {
    let server = Aimock::start(Some(KEY));
    let err = model(config(server.base_url(), 2))
        .complete(&ask("nothing matches this"))
        .await
        .expect_err("404");
    assert_eq!(err.class, ErrorClass::Permanent);
    assert!(err.message.starts_with("HTTP 404 Not Found"), "{err}");
    assert_eq!(server.chat_requests(1).await.len(), 1);
}

#[tokio::test]
async fn refused_connection_is_transient() {
    // A port that was free a moment ago: nothing listens there.
    let port = diag_testkit::free_port();
    let err = model(config(format!("http://127.0.0.1:{port}/v1"), 0))
        .complete(&ask("plain answer"))
        .await
        .expect_err("refused");
    assert_eq!(err.class, ErrorClass::Transient);
    assert!(err.message.starts_with("cannot connect"), "{err}");
}

#[test]
fn missing_api_key_variable_is_a_config_error_naming_it() {
    let var = "DIAG_TEST_OPENAI_KEY_THAT_IS_NEVER_SET";
    let mut c = OpenAiConfig::new("http://127.0.0.1:9/v1", MODEL);
    c.api_key_env = Some(var.into());
    let err = OpenAiModel::new(c).expect_err("the variable is not set");
    assert_eq!(err, ConfigError::MissingApiKey { var: var.into() });
    assert_eq!(
        err.to_string(),
        format!("the API key variable {var} (api_key_env) is not set in the environment")
    );
}
