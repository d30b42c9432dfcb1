//! OpenAI-only cases against the mock server: the request it sends, keyless local servers and a
//! missing `[DONE]` (a broken stream). What both wires must do is in `provider_contract.rs`, which also holds the
//! [`OpenAi`] dialect used here.

use deputy::llm::openai::{OpenAiConfig, OpenAiProvider};
use deputy::llm::{ContentBlock, HttpTimeouts, LlmErrorKind, Message, ModelRequest, Role, StreamEvent, ToolSpec};
use serde_json::json;

use super::provider_contract::{Dialect, OpenAi};
use super::{run, simple_request, text_of};
use crate::common::mock_llm::{MockLlm, MockResponse, openai};

fn provider(mock: &MockLlm) -> OpenAiProvider {
    OpenAi::provider(&mock.base_url(), HttpTimeouts::default())
}

#[tokio::test]
async fn sends_the_documented_request() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(openai::text(&["done"])));
    let request = ModelRequest {
        tool_choice: Default::default(),
        reasoning: None,
        cache_key: None,
        model: "gpt-test".into(),
        system: Some("You are terse.".into()),
        messages: vec![
            Message::user_text("weather?"),
            Message::assistant(vec![ContentBlock::ToolUse {
                id: "call_1".into(),
                name: "get_weather".into(),
                input: json!({"city": "Oslo"}),
            }]),
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "call_1".into(),
                        content: "-3 C".into(),
                        is_error: false,
                    },
                    ContentBlock::Text { text: "in fahrenheit please".into() },
                ],
            },
        ]
        .into(),
        tools: ToolSpec::list([ToolSpec {
            name: "get_weather".into(),
            description: "Weather by city".into(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}).into(),
        }]),
        max_tokens: 512,
        output: None,
        retries: Default::default(),
        encoded: Default::default(),
    };
    let (_, err) = run(&provider(&mock), request).await;
    assert_eq!(err, None);
    let req = &mock.requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), Some(format!("Bearer {}", OpenAi::KEY).as_str()));
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(
        req.body,
        json!({
            "model": "gpt-test",
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 512,
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"},
                {"role": "user", "content": "in fahrenheit please"}
            ]
        })
    );
}

#[tokio::test]
async fn no_key_means_no_authorization_header() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(openai::text(&["local"])));
    let provider = OpenAiProvider::new(OpenAiConfig {
        options: Default::default(),
        base_url: format!("{}/v1/", mock.base_url()),
        api_key: None,
        timeouts: HttpTimeouts::default(),
    });
    let (events, err) = run(&provider, simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "local");
    let req = &mock.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), None);
}

/// A stream that stops after its finish reason may have lost the usage chunk, and cannot be
/// told from one cut there: it is broken like any stream without its terminator.
#[tokio::test]
async fn finish_without_done_is_a_broken_stream() {
    let mock = MockLlm::start().await;
    let mut events = openai::text(&["no done"]);
    events.pop(); // drop [DONE]
    mock.push(MockResponse::sse(events));
    let (events, err) = run(&provider(&mock), simple_request("hi")).await;
    assert_eq!(err.unwrap().kind, LlmErrorKind::StreamBroken);
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::Finished { .. })));
}
