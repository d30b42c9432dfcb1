//! Anthropic-only cases against the byte-accurate mock server: the request it sends and the
//! cache-creation tokens only Anthropic reports. What both wires must do is in
//! `provider_contract.rs`, which also holds the [`Anthropic`] dialect used here.

use deputy::llm::{ContentBlock, HttpTimeouts, Message, ModelRequest, Role, StreamEvent, ToolSpec, Usage};
use serde_json::json;

use super::provider_contract::{Anthropic, Dialect};
use super::{run, simple_request, usages};
use crate::common::mock_llm::{MockLlm, MockResponse, anthropic, usage};

#[tokio::test]
async fn reports_usage_including_cache_fields() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(anthropic::text_with_usage(&["ok"], usage(1200, 42).cache(800, 64))));
    let (events, err) =
        run(&Anthropic::provider(&mock.base_url(), HttpTimeouts::default()), simple_request("hi")).await;
    assert_eq!(err, None);
    let usages = usages(&events);
    let want = Usage {
        input_tokens: 1200,
        output_tokens: 42,
        cache_read_input_tokens: 800,
        cache_creation_input_tokens: 64,
    };
    assert_eq!(usages.last(), Some(&want));
    assert_eq!(want.prompt_tokens(), 2064);
    // The final usage comes right before Finished.
    assert_eq!(events[events.len() - 2], StreamEvent::Usage(want));
}

#[tokio::test]
async fn sends_the_documented_request() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(anthropic::text(&["done"])));
    let provider = Anthropic::provider(&format!("{}/anthropic/", mock.base_url()), HttpTimeouts::default());
    let request = ModelRequest {
        tool_choice: Default::default(),
        reasoning: None,
        cache_key: None,
        model: "claude-test".into(),
        system: Some("You are terse.".into()),
        messages: vec![
            Message::user_text("list files"),
            Message::assistant(vec![
                ContentBlock::Text { text: "Checking.".into() },
                ContentBlock::ToolUse { id: "toolu_9".into(), name: "ls".into(), input: json!({"dir": "."}) },
            ]),
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "toolu_9".into(),
                    content: "permission denied".into(),
                    is_error: true,
                }],
            },
        ]
        .into(),
        tools: ToolSpec::list([ToolSpec {
            name: "ls".into(),
            description: "List a directory".into(),
            input_schema: json!({"type": "object", "properties": {"dir": {"type": "string"}}}).into(),
        }]),
        max_tokens: 1024,
        output: None,
        retries: Default::default(),
        encoded: Default::default(),
    };
    let (_, err) = run(&provider, request).await;
    assert_eq!(err, None);
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/anthropic/v1/messages");
    assert_eq!(req.header("x-api-key"), Some(Anthropic::KEY));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(
        req.body,
        json!({
            "model": "claude-test",
            "max_tokens": 1024,
            "stream": true,
            // Prompt caching (on by default): breakpoints on the last tool, the system prompt
            // and the last block of the last message.
            "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "ls", "description": "List a directory",
                       "input_schema": {"type": "object", "properties": {"dir": {"type": "string"}}},
                       "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "list files"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_9", "name": "ls", "input": {"dir": "."}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_9", "content": "permission denied", "is_error": true,
                     "cache_control": {"type": "ephemeral"}}
                ]}
            ]
        })
    );
}
