//! Structured output against a real OpenAI-compatible server (aimock): the contract's schema
//! goes out as `response_format` (checked in aimock's journal of what it received), the
//! `auto` setting steps down, once per endpoint for the models sharing an endpoint memory,
//! through the forms a server refuses, an explicit setting does not, and a context-length
//! error is its own class that teaches the model's context size.

use std::time::Duration;

use diag_core::model::{
    ChatModel, ChatRequest, EndpointMemory, ErrorClass, Message, OutputSchema, StructuredOutput,
    StructuredOutputSetting, ToolChoice,
};
use diag_core::protocol::schema;
use diag_core::tools::ToolSpec;
use diag_model_openai::wire::strict_schema;
use diag_model_openai::{OpenAiConfig, OpenAiModel};
use serde_json::{json, Value};

use diag_testkit::Aimock;

fn model(server: &Aimock, setting: StructuredOutputSetting) -> OpenAiModel {
    let mut c = OpenAiConfig::new(server.base_url(), "diag-structured-model");
    c.structured_output = setting;
    c.request_timeout = Duration::from_secs(5);
    c.max_transport_retries = 2;
    OpenAiModel::new(c).unwrap()
}

/// A model that shares `memory` with the others made with it, as the models of one setup do.
fn model_sharing(
    server: &Aimock,
    setting: StructuredOutputSetting,
    memory: &EndpointMemory,
) -> OpenAiModel {
    model(server, setting).with_endpoint_memory(memory.clone())
}

fn composer_contract() -> OutputSchema {
    OutputSchema {
        name: "composer_answer_v1".into(),
        schema: schema::composer(&["c1".to_string()]),
        grammar: None,
    }
}

fn ask(text: &str) -> ChatRequest {
    let mut r = ChatRequest::new(vec![
        Message::system("You write the answer."),
        Message::user(text),
    ]);
    r.response_format = Some(composer_contract());
    r.tool_choice = Some(ToolChoice::None);
    r.max_tokens = Some(300);
    r
}

fn format_of(body: &Value) -> Value {
    body["body"]["response_format"].clone()
}

#[tokio::test]
async fn auto_sends_the_contract_as_strict_json_schema_and_none_beside_tools() {
    let server = Aimock::start_with("structured.json", None);
    let m = model(&server, StructuredOutputSetting::Auto);
    let answer = m.complete(&ask("structured composer")).await.unwrap();
    assert_eq!(answer.structured_output, Some(StructuredOutput::JsonSchema));
    assert!(answer.content.unwrap().contains("composer_answer_v1"));

    let mut executor = ChatRequest::new(vec![Message::user("executor with tools")]);
    executor.tools = vec![ToolSpec {
        name: "search_logs".into(),
        description: "search".into(),
        parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
    }];
    executor.tool_choice = Some(ToolChoice::Auto);
    executor.response_format = Some(OutputSchema {
        name: "executor_evidence_v2".into(),
        schema: schema::executor(&["search_logs"]),
        grammar: None,
    });
    let calls = m.complete(&executor).await.unwrap();
    assert_eq!(calls.tool_calls.len(), 1);

    let sent = server.chat_requests(2).await;
    assert_eq!(sent.len(), 2);
    let (strict, ok) = strict_schema(&composer_contract().schema);
    assert!(ok);
    assert_eq!(
        format_of(&sent[0]),
        json!({"type": "json_schema", "json_schema": {"name": "composer_answer_v1",
            "schema": strict, "strict": true}})
    );
    assert!(
        sent[0]["body"].get("tool_choice").is_none(),
        "no tool_choice without tools"
    );
    assert_eq!(sent[0]["body"]["max_tokens"], 300);
    assert_eq!(sent[1]["body"]["tool_choice"], "auto");
    assert_eq!(
        sent[1]["body"]["tools"][0]["function"]["name"],
        "search_logs"
    );
    assert_eq!(
        format_of(&sent[1]),
        Value::Null,
        "no contract beside tools, in any form"
    );
    assert_eq!(calls.structured_output, Some(StructuredOutput::Off));
}

#[tokio::test]
async fn auto_steps_down_once_per_endpoint_memory_when_the_server_refuses_json_schema() {
    let server = Aimock::start_with("structured.json", None);
    let memory = EndpointMemory::default();
    let answer = model_sharing(&server, StructuredOutputSetting::Auto, &memory)
        .complete(&ask("refuses json_schema once"))
        .await
        .unwrap();
    assert_eq!(
        answer.structured_output,
        Some(StructuredOutput::JsonObjectSchema)
    );
    let sent = server.chat_requests(2).await;
    assert_eq!(sent.len(), 2, "the refusal is not retried as it was");
    assert_eq!(format_of(&sent[0])["type"], "json_schema");
    assert_eq!(
        format_of(&sent[1]),
        json!({"type": "json_object", "schema": composer_contract().schema})
    );

    // Learned in the memory: another model on the same endpoint sharing it starts where it
    // stopped; a model with a memory of its own starts over.
    assert_eq!(
        model(&server, StructuredOutputSetting::Auto).structured_form(),
        StructuredOutput::JsonSchema
    );
    let again = model_sharing(&server, StructuredOutputSetting::Auto, &memory)
        .complete(&ask("refuses json_schema once"))
        .await
        .unwrap();
    assert_eq!(
        again.structured_output,
        Some(StructuredOutput::JsonObjectSchema)
    );
    let sent = server.chat_requests(3).await;
    assert_eq!(sent.len(), 3);
    assert_eq!(format_of(&sent[2])["type"], "json_object");

    // An explicit setting is not moved by what `auto` learned.
    let explicit = model_sharing(&server, StructuredOutputSetting::JsonSchema, &memory)
        .complete(&ask("refuses json_schema once"))
        .await
        .unwrap();
    assert_eq!(
        explicit.structured_output,
        Some(StructuredOutput::JsonSchema)
    );
    let sent = server.chat_requests(4).await;
    assert_eq!(format_of(&sent[3])["type"], "json_schema");
}

#[tokio::test]
async fn auto_steps_down_to_no_response_format_through_a_500_and_a_422() {
    let server = Aimock::start_with("structured.json", None);
    let answer = model(&server, StructuredOutputSetting::Auto)
        .complete(&ask("refuses three forms"))
        .await
        .unwrap();
    assert_eq!(answer.structured_output, Some(StructuredOutput::Off));
    let sent = server.chat_requests(4).await;
    let forms: Vec<Value> = sent.iter().map(format_of).collect();
    assert_eq!(sent.len(), 4, "{forms:#?}");
    assert_eq!(forms[0]["type"], "json_schema");
    assert_eq!(forms[1]["type"], "json_object");
    assert!(forms[1].get("schema").is_some());
    assert_eq!(forms[2], json!({"type": "json_object"}));
    assert_eq!(forms[3], Value::Null, "at last, nothing");
}

#[tokio::test]
async fn an_explicit_json_schema_setting_is_not_stepped_down() {
    let server = Aimock::start_with("structured.json", None);
    let err = model(&server, StructuredOutputSetting::JsonSchema)
        .complete(&ask("refuses json_schema once"))
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent);
    assert_eq!(err.status, Some(400));
    assert_eq!(err.structured_output, Some(StructuredOutput::JsonSchema));
    assert!(
        err.message
            .contains("structured_output = \"json_schema\" for this model"),
        "{}",
        err.message
    );
    assert_eq!(server.chat_requests(1).await.len(), 1);
}

#[tokio::test]
async fn off_sends_no_response_format() {
    let server = Aimock::start_with("structured.json", None);
    let answer = model(&server, StructuredOutputSetting::Off)
        .complete(&ask("structured composer"))
        .await
        .unwrap();
    assert_eq!(answer.structured_output, Some(StructuredOutput::Off));
    let sent = server.chat_requests(1).await;
    assert!(sent[0]["body"].get("response_format").is_none());
}

#[tokio::test]
async fn a_context_length_error_is_its_own_class_and_teaches_the_context_size() {
    let server = Aimock::start_with("structured.json", None);
    let memory = EndpointMemory::default();
    let m = model_sharing(&server, StructuredOutputSetting::Auto, &memory);
    assert_eq!(m.context_tokens(), None);
    let err = m.complete(&ask("context too long")).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::ContextOverflow);
    assert_eq!(err.status, Some(400));
    assert_eq!(err.context_tokens, Some(2048));
    assert_eq!(err.usage.map(|u| u.prompt_tokens), Some(2069));
    assert!(err
        .message
        .starts_with("HTTP 400 Bad Request: This model's maximum context length is 2048 tokens."));
    assert_eq!(server.chat_requests(1).await.len(), 1, "never retried");
    assert_eq!(m.context_tokens(), Some(2048));
    // Learned for the endpoint, by the models sharing the memory.
    assert_eq!(
        model_sharing(&server, StructuredOutputSetting::Auto, &memory).context_tokens(),
        Some(2048)
    );
    assert_eq!(
        model(&server, StructuredOutputSetting::Auto).context_tokens(),
        None
    );
    // A configured size wins over what was learned.
    let mut c = OpenAiConfig::new(server.base_url(), "diag-structured-model");
    c.context_tokens = Some(4096);
    let configured = OpenAiModel::new(c)
        .unwrap()
        .with_endpoint_memory(memory.clone());
    assert_eq!(configured.context_tokens(), Some(4096));
}
