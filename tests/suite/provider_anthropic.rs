//! The Anthropic adapter against the byte-accurate mock server, alone and behind the retry gate.

use std::time::{Duration, Instant};

use deputy::llm::anthropic::{AnthropicConfig, AnthropicProvider};
use deputy::llm::{
    ContentBlock, HttpTimeouts, LlmErrorKind, Message, ModelRequest, Role, StopReason, StreamEvent, ToolSpec, Usage,
};
use serde_json::json;

use super::{retrying, run, short_idle, simple_request, text_deltas, text_of};
use crate::common::mock_llm::{Gate, MockLlm, MockResponse, anthropic};

const KEY: &str = "sk-ant-test-key";

fn provider_with(base_url: String, timeouts: HttpTimeouts) -> AnthropicProvider {
    AnthropicProvider::new(AnthropicConfig { base_url, api_key: KEY.into(), timeouts })
}

fn provider(mock: &MockLlm) -> AnthropicProvider {
    provider_with(mock.base_url(), HttpTimeouts::default())
}

fn finished(reason: StopReason) -> StreamEvent {
    StreamEvent::Finished { stop_reason: reason }
}

#[tokio::test]
async fn streams_text_deltas() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(anthropic::text(&["Hel", "lo, ", "wörld 😀"])));
    let (events, err) = run(&provider(&mock), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_deltas(&events), ["Hel", "lo, ", "wörld 😀"]);
    assert_eq!(text_of(&events), "Hello, wörld 😀");
    assert_eq!(events.last(), Some(&finished(StopReason::EndTurn)));
}

#[tokio::test]
async fn survives_chunks_split_mid_line_and_mid_character() {
    let mock = MockLlm::start().await;
    let body = anthropic::text(&["naïve ", "☃"]).concat().into_bytes();
    // Three-byte chunks cut through lines, `\n\n` pairs and the multi-byte characters.
    let chunks = body.chunks(3).map(<[u8]>::to_vec).collect();
    mock.push(MockResponse::raw_chunks(200, "text/event-stream", chunks));
    let (events, err) = run(&provider(&mock), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "naïve ☃");
}

#[tokio::test]
async fn streams_two_tool_calls_with_fragmented_arguments() {
    let mock = MockLlm::start().await;
    let first = json!({"path": "src/main.rs", "lines": [1, 20]});
    let second = json!({"command": "ls -la", "cwd": "/tmp"});
    mock.push(MockResponse::sse(anthropic::tool_calls(
        Some("Let me look."),
        &[("toolu_1", "read_file", first.clone()), ("toolu_2", "shell", second.clone())],
    )));
    let (events, err) = run(&provider(&mock), simple_request("go")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "Let me look.");
    let starts: Vec<_> = events.iter().filter(|e| matches!(e, StreamEvent::ToolCallStart { .. })).collect();
    assert_eq!(
        starts,
        [
            &StreamEvent::ToolCallStart { id: "toolu_1".into(), name: "read_file".into() },
            &StreamEvent::ToolCallStart { id: "toolu_2".into(), name: "shell".into() },
        ]
    );
    for (id, input) in [("toolu_1", &first), ("toolu_2", &second)] {
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
    let ends: Vec<_> = events.iter().filter(|e| matches!(e, StreamEvent::ToolCallEnd { .. })).cloned().collect();
    assert_eq!(
        ends,
        [
            StreamEvent::ToolCallEnd { id: "toolu_1".into(), name: "read_file".into(), input: first },
            StreamEvent::ToolCallEnd { id: "toolu_2".into(), name: "shell".into(), input: second },
        ]
    );
    assert_eq!(events.last(), Some(&finished(StopReason::ToolUse)));
}

#[tokio::test]
async fn reports_usage_including_cache_fields() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(anthropic::text_with_usage(&["ok"], anthropic::usage(1200, 42).cache(800, 64))));
    let (events, err) = run(&provider(&mock), simple_request("hi")).await;
    assert_eq!(err, None);
    let usages: Vec<Usage> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Usage(u) => Some(*u),
            _ => None,
        })
        .collect();
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
    let provider = provider_with(format!("{}/anthropic/", mock.base_url()), HttpTimeouts::default());
    let request = ModelRequest {
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
        ],
        tools: vec![ToolSpec {
            name: "ls".into(),
            description: "List a directory".into(),
            input_schema: json!({"type": "object", "properties": {"dir": {"type": "string"}}}),
        }],
        max_tokens: 1024,
    };
    let (_, err) = run(&provider, request).await;
    assert_eq!(err, None);
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/anthropic/v1/messages");
    assert_eq!(req.header("x-api-key"), Some(KEY));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(
        req.body,
        json!({
            "model": "claude-test",
            "max_tokens": 1024,
            "stream": true,
            "system": "You are terse.",
            "tools": [{"name": "ls", "description": "List a directory",
                       "input_schema": {"type": "object", "properties": {"dir": {"type": "string"}}}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "list files"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_9", "name": "ls", "input": {"dir": "."}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_9", "content": "permission denied", "is_error": true}
                ]}
            ]
        })
    );
}

#[tokio::test]
async fn rate_limit_honours_retry_after_ms_then_succeeds() {
    let mock = MockLlm::start().await;
    mock.push(
        MockResponse::json(429, anthropic::error_body("rate_limit_error", "Number of requests exceeded"))
            .header("retry-after-ms", "150"),
    );
    mock.push(MockResponse::sse(anthropic::text(&["after wait"])));
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
        MockResponse::json(429, anthropic::error_body("rate_limit_error", "slow down")).header("retry-after", "1"),
    );
    mock.push(MockResponse::sse(anthropic::text(&["ok"])));
    let started = Instant::now();
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "ok");
    assert!(started.elapsed() >= Duration::from_secs(1), "waited only {:?}", started.elapsed());
    mock.wait_for_requests(2).await;
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn spend_limit_429_is_quota_and_not_retried() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::json(
        429,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "You have reached your spend limit",
               "details": {"error_code": "enforced_spend_limit_reached"}}}),
    ));
    let (_, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err.unwrap().kind, LlmErrorKind::QuotaExhausted);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn overloaded_529_is_retried() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::json(529, anthropic::error_body("overloaded_error", "Overloaded")));
    mock.push(MockResponse::sse(anthropic::text(&["fine now"])));
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "fine now");
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn overloaded_529_alone_is_classified() {
    let mock = MockLlm::start().await;
    mock.push(
        MockResponse::json(529, anthropic::error_body("overloaded_error", "Overloaded")).header("retry-after", "2"),
    );
    let err = run(&provider(&mock), simple_request("hi")).await.1.unwrap();
    assert_eq!(err.kind, LlmErrorKind::Overloaded);
    assert_eq!(err.retry_after, Some(Duration::from_secs(2)));
    assert!(err.message.contains("529") && err.message.contains("Overloaded"), "{}", err.message);
}

#[tokio::test]
async fn cut_after_content_surfaces_without_a_retry() {
    let mock = MockLlm::start().await;
    // message_start, block start, two deltas: then the socket closes.
    mock.push(MockResponse::sse(anthropic::text(&["partial ", "answer", "never sent"])).cut_after(4));
    mock.push(MockResponse::sse(anthropic::text(&["must not be fetched"])));
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(text_of(&events), "partial answer");
    assert_eq!(err.unwrap().kind, LlmErrorKind::StreamBroken);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn cut_before_content_is_retried() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(anthropic::text_with_usage(&["lost"], anthropic::usage(999, 1))).cut_after(1));
    mock.push(MockResponse::sse(anthropic::text_with_usage(&["second try"], anthropic::usage(10, 3))));
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "second try");
    // The first attempt's early usage was held back and dropped, never double-counted.
    assert!(events.iter().all(|e| !matches!(e, StreamEvent::Usage(u) if u.input_tokens == 999)));
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn in_band_overloaded_error_is_retried() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(vec![
        anthropic::message_start(anthropic::usage(10, 1)),
        anthropic::error("overloaded_error", "Overloaded"),
    ]));
    mock.push(MockResponse::sse(anthropic::text(&["recovered"])));
    let (events, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "recovered");
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn in_band_error_is_classified() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(vec![
        anthropic::message_start(anthropic::usage(10, 1)),
        anthropic::ping(),
        anthropic::error("overloaded_error", "Overloaded"),
    ]));
    let err = run(&provider(&mock), simple_request("hi")).await.1.unwrap();
    assert_eq!(err.kind, LlmErrorKind::Overloaded);
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_readable() {
    let mock = MockLlm::start().await;
    mock.push(
        MockResponse::json(401, anthropic::error_body("authentication_error", "invalid x-api-key"))
            .header("request-id", "req_abc"),
    );
    let (_, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    let err = err.unwrap();
    assert_eq!(err.kind, LlmErrorKind::Auth);
    assert!(err.message.contains("invalid x-api-key"), "{}", err.message);
    assert!(err.message.contains("401") && err.message.contains("req_abc"), "{}", err.message);
    assert!(!err.message.contains(KEY));
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn prompt_too_long_is_context_overflow() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::json(
        400,
        anthropic::error_body("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
    ));
    let (_, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert_eq!(err.unwrap().kind, LlmErrorKind::ContextOverflow);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn should_retry_false_header_stops_retries() {
    let mock = MockLlm::start().await;
    mock.push(
        MockResponse::json(500, anthropic::error_body("api_error", "boom")).header("x-should-retry", "false"),
    );
    let (_, err) = run(&retrying(provider(&mock)), simple_request("hi")).await;
    assert!(!err.unwrap().is_retryable());
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn idle_read_timeout_is_a_timeout() {
    let mock = MockLlm::start().await;
    let never = Gate::new();
    mock.push(MockResponse::sse(anthropic::text(&["never"])).pause_before_chunk(2, never.clone()));
    let provider = provider_with(mock.base_url(), short_idle(Duration::from_millis(300)));
    let started = Instant::now();
    let (events, err) = run(&provider, simple_request("hi")).await;
    assert_eq!(err.unwrap().kind, LlmErrorKind::Timeout);
    assert!(!events.iter().any(StreamEvent::is_content));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn slow_but_steady_stream_is_not_a_timeout() {
    let mock = MockLlm::start().await;
    let gate = Gate::new();
    gate.open(); // opening before the pause is reached also works
    mock.push(
        MockResponse::sse(anthropic::text(&["a", "b", "c"]))
            .chunk_delay(Duration::from_millis(100))
            .pause_before_chunk(3, gate),
    );
    // Total time (~700 ms) exceeds the idle timeout; no single gap does.
    let provider = provider_with(mock.base_url(), short_idle(Duration::from_millis(400)));
    let (events, err) = run(&provider, simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "abc");
}

#[tokio::test]
async fn refused_connection_is_connect() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let provider = provider_with(format!("http://{addr}"), HttpTimeouts::default());
    let err = run(&provider, simple_request("hi")).await.1.unwrap();
    assert_eq!(err.kind, LlmErrorKind::Connect);
}
