//! The OpenAI Chat Completions adapter against the mock server, alone and behind the retry gate.

use std::time::{Duration, Instant};

use deputy::llm::openai::{OpenAiConfig, OpenAiProvider};
use deputy::llm::{
    ContentBlock, HttpTimeouts, LlmErrorKind, Message, ModelRequest, Role, StopReason, StreamEvent, ToolSpec, Usage,
};
use serde_json::json;

use super::{retrying, run, short_idle, simple_request, text_deltas, text_of};
use crate::common::mock_llm::{Gate, MockLlm, MockResponse, openai};

const KEY: &str = "sk-openai-test-key";

fn provider_with(base_url: String, api_key: Option<&str>, timeouts: HttpTimeouts) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig { base_url, api_key: api_key.map(str::to_owned), timeouts })
}

fn provider(mock: &MockLlm) -> OpenAiProvider {
    provider_with(format!("{}/v1", mock.base_url()), Some(KEY), HttpTimeouts::default())
}

fn finished(reason: StopReason) -> StreamEvent {
    StreamEvent::Finished { stop_reason: reason }
}

#[tokio::test]
async fn streams_text_deltas() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(openai::text(&["Hel", "lo, ", "wörld 😀"])));
    let (events, err) = run(&provider(&mock), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_deltas(&events), ["Hel", "lo, ", "wörld 😀"]);
    assert_eq!(text_of(&events), "Hello, wörld 😀");
    assert_eq!(events.last(), Some(&finished(StopReason::EndTurn)));
}

#[tokio::test]
async fn streams_two_tool_calls_with_fragmented_arguments() {
    let mock = MockLlm::start().await;
    let first = json!({"location": "Paris", "unit": "celsius"});
    let second = json!({"query": "weather \"today\""});
    mock.push(MockResponse::sse(openai::tool_calls(
        None,
        &[("call_a", "get_weather", first.clone()), ("call_b", "search", second.clone())],
    )));
    let (events, err) = run(&provider(&mock), simple_request("go")).await;
    assert_eq!(err, None);
    for (id, input) in [("call_a", &first), ("call_b", &second)] {
        let fragments: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallDelta { id: i, fragment } if i == id => Some(fragment.as_str()),
                _ => None,
            })
            .collect();
        assert!(fragments.len() >= 2, "{id}: {fragments:?}");
        assert_eq!(fragments.concat(), input.to_string());
    }
    let calls: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCallStart { .. } | StreamEvent::ToolCallEnd { .. }))
        .cloned()
        .collect();
    assert_eq!(
        calls,
        [
            StreamEvent::ToolCallStart { id: "call_a".into(), name: "get_weather".into() },
            StreamEvent::ToolCallStart { id: "call_b".into(), name: "search".into() },
            StreamEvent::ToolCallEnd { id: "call_a".into(), name: "get_weather".into(), input: first },
            StreamEvent::ToolCallEnd { id: "call_b".into(), name: "search".into(), input: second },
        ]
    );
    assert_eq!(events.last(), Some(&finished(StopReason::ToolUse)));
}

#[tokio::test]
async fn reports_usage_with_cached_tokens() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(openai::text_with_usage(&["ok"], openai::usage(300, 25).cache(200, 0))));
    let (events, err) = run(&provider(&mock), simple_request("hi")).await;
    assert_eq!(err, None);
    let want = Usage {
        input_tokens: 300,
        output_tokens: 25,
        cache_read_input_tokens: 200,
        cache_creation_input_tokens: 0,
    };
    assert_eq!(events[events.len() - 2], StreamEvent::Usage(want));
    assert_eq!(events.iter().filter(|e| matches!(e, StreamEvent::Usage(_))).count(), 1);
}

#[tokio::test]
async fn sends_the_documented_request() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(openai::text(&["done"])));
    let request = ModelRequest {
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
        ],
        tools: vec![ToolSpec {
            name: "get_weather".into(),
            description: "Weather by city".into(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }],
        max_tokens: 512,
    };
    let (_, err) = run(&provider(&mock), request).await;
    assert_eq!(err, None);
    let req = &mock.requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
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
    let provider = provider_with(format!("{}/v1/", mock.base_url()), None, HttpTimeouts::default());
    let (events, err) = run(&provider, simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "local");
    let req = &mock.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), None);
}

#[tokio::test]
async fn rate_limit_honours_retry_after_ms_then_succeeds() {
    let mock = MockLlm::start().await;
    mock.push(
        MockResponse::json(429, openai::error_body("requests", Some("rate_limit_exceeded"), "Rate limit reached"))
            .header("retry-after-ms", "150"),
    );
    mock.push(MockResponse::sse(openai::text(&["after wait"])));
    let started = Instant::now();
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "after wait");
    assert!(started.elapsed() >= Duration::from_millis(150), "waited only {:?}", started.elapsed());
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn rate_limit_honours_retry_after_seconds() {
    let mock = MockLlm::start().await;
    mock.push(
        MockResponse::json(429, openai::error_body("requests", Some("rate_limit_exceeded"), "slow down"))
            .header("retry-after", "1"),
    );
    mock.push(MockResponse::sse(openai::text(&["ok"])));
    let started = Instant::now();
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "ok");
    assert!(started.elapsed() >= Duration::from_secs(1), "waited only {:?}", started.elapsed());
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn insufficient_quota_is_not_retried() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::json(
        429,
        openai::error_body("insufficient_quota", Some("insufficient_quota"), "You exceeded your current quota"),
    ));
    let (_, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    let err = err.unwrap();
    assert_eq!(err.kind, LlmErrorKind::QuotaExhausted);
    assert!(err.message.contains("exceeded your current quota"), "{}", err.message);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn context_length_exceeded_is_context_overflow() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::json(
        400,
        openai::error_body(
            "invalid_request_error",
            Some("context_length_exceeded"),
            "This model's maximum context length is 8192 tokens",
        ),
    ));
    let (_, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err.unwrap().kind, LlmErrorKind::ContextOverflow);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn overloaded_and_server_errors_are_retried() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::json(529, openai::error_body("overloaded", None, "Overloaded")));
    mock.push(MockResponse::json(503, openai::error_body("server_error", None, "try later")));
    mock.push(MockResponse::sse(openai::text(&["third time lucky"])));
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "third time lucky");
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn cut_after_content_surfaces_without_a_retry() {
    let mock = MockLlm::start().await;
    // role chunk and two content chunks, then the socket closes (no finish_reason, no [DONE]).
    mock.push(MockResponse::sse(openai::text(&["partial ", "answer", "never sent"])).cut_after(3));
    mock.push(MockResponse::sse(openai::text(&["must not be fetched"])));
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(text_of(&events), "partial answer");
    assert_eq!(err.unwrap().kind, LlmErrorKind::StreamBroken);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn cut_before_content_is_retried() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(openai::text(&["lost"])).cut_after(1));
    mock.push(MockResponse::sse(openai::text(&["second try"])));
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "second try");
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn mid_stream_error_chunk_after_content_is_passed_through() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(vec![
        openai::delta(json!({"role": "assistant", "content": "Hal"})),
        openai::error_chunk("server_error", None, "The server had an error while processing your request"),
    ]));
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(text_of(&events), "Hal");
    let err = err.unwrap();
    assert_eq!(err.kind, LlmErrorKind::Server);
    assert!(err.message.contains("server had an error"), "{}", err.message);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn mid_stream_error_chunk_before_content_is_retried() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(vec![openai::error_chunk(
        "rate_limit_error",
        Some("rate_limit_exceeded"),
        "busy",
    )]));
    mock.push(MockResponse::sse(openai::text(&["ok"])));
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "ok");
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_readable() {
    let mock = MockLlm::start().await;
    mock.push(
        MockResponse::json(
            401,
            openai::error_body("invalid_request_error", Some("invalid_api_key"), "Incorrect API key provided"),
        )
        .header("x-request-id", "req_xyz"),
    );
    let (_, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    let err = err.unwrap();
    assert_eq!(err.kind, LlmErrorKind::Auth);
    assert!(
        err.message.contains("Incorrect API key provided") && err.message.contains("req_xyz"),
        "{}",
        err.message
    );
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn finish_without_done_still_finishes() {
    let mock = MockLlm::start().await;
    let mut events = openai::text(&["no done"]);
    events.pop(); // drop [DONE]
    mock.push(MockResponse::sse(events));
    let (events, err) = run(&provider(&mock), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(events.last(), Some(&finished(StopReason::EndTurn)));
}

#[tokio::test]
async fn idle_read_timeout_is_a_timeout() {
    let mock = MockLlm::start().await;
    let never = Gate::new();
    mock.push(MockResponse::sse(openai::text(&["a", "b"])).pause_before_chunk(2, never.clone()));
    let provider = provider_with(format!("{}/v1", mock.base_url()), None, short_idle(Duration::from_millis(300)));
    let (events, err) = run(&provider, simple_request("hi")).await;
    assert_eq!(text_of(&events), "a");
    assert_eq!(err.unwrap().kind, LlmErrorKind::Timeout);
}

#[tokio::test]
async fn idle_timeout_before_content_is_retried() {
    let mock = MockLlm::start().await;
    let never = Gate::new();
    mock.push(MockResponse::sse(openai::text(&["slow"])).pause_before_chunk(0, never.clone()));
    mock.push(MockResponse::sse(openai::text(&["fast"])));
    let provider = provider_with(format!("{}/v1", mock.base_url()), None, short_idle(Duration::from_millis(300)));
    let (events, err) = run(&retrying(provider), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "fast");
    assert_eq!(mock.requests().len(), 2);
}
