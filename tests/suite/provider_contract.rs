//! The contract every wire adapter meets, written once and run against each wire.
//!
//! A scenario is a generic `async fn` over a [`Dialect`]: the few things that differ between
//! the wires (the mock's bytes, how a failure is worded, where a response's text starts). The
//! `contract_for!` lines at the end turn every scenario into one test per wire, named
//! `provider_contract::<wire>::<scenario>`. Cases only one wire has (its request body, thinking
//! blocks, a missing `[DONE]`) stay in `provider_<wire>.rs`.

use std::time::{Duration, Instant};

use deputy::llm::anthropic::{AnthropicConfig, AnthropicProvider};
use deputy::llm::openai::{OpenAiConfig, OpenAiProvider};
use deputy::llm::{HttpTimeouts, LlmErrorKind, Provider, StopReason, StreamEvent, Usage};
use serde_json::{Value, json};

use super::{restarts, retrying, run, short_idle, simple_request, text_deltas, text_of, usages};
use crate::common::mock_llm::{self, Gate, MockLlm, MockResponse, MockUsage, usage};

/// A failure the contract provokes; each dialect words it the way its wire does.
#[derive(Debug, Clone, Copy)]
pub enum Failure {
    RateLimited,
    QuotaExhausted,
    Overloaded,
    Server,
    Unauthorized,
    PromptTooLong,
}

/// What differs between two wires, as far as the contract is concerned.
pub trait Dialect {
    type Provider: Provider + 'static;

    /// The key the provider sends; no error may ever repeat it.
    const KEY: &'static str;
    /// The response header a request id comes back in.
    const REQUEST_ID_HEADER: &'static str;
    /// How many chunks of [`Dialect::text`] come before the first text delta.
    const CHUNKS_BEFORE_TEXT: usize;
    /// How many `Usage` events one response carries; the last is always the total.
    const USAGE_REPORTS: usize;
    /// Whether the wire completes every tool call at the finish (rather than each call before
    /// the next one starts).
    const ENDS_CALLS_AT_FINISH: bool;

    /// The provider for a server at `base_url` (`http://host:port`, no path).
    fn provider(base_url: &str, timeouts: HttpTimeouts) -> Self::Provider;
    fn text(chunks: &[&str]) -> Vec<String>;
    fn text_with_usage(chunks: &[&str], usage: MockUsage) -> Vec<String>;
    fn tool_calls(text: Option<&str>, calls: &[(&str, &str, Value)]) -> Vec<String>;
    /// The JSON body of an HTTP error response; both wires put the message at `/error/message`.
    fn error_body(failure: Failure) -> Value;
    /// A 200 response that fails in band: right away, or after streaming `text`.
    fn failing(text: Option<&str>, failure: Failure, message: &str) -> Vec<String>;
}

/// A dialect's `text`, `text_with_usage` and `tool_calls`: those of its wire's module of
/// `mock_llm`.
macro_rules! mock_streams {
    ($wire:ident) => {
        fn text(chunks: &[&str]) -> Vec<String> {
            mock_llm::$wire::text(chunks)
        }

        fn text_with_usage(chunks: &[&str], usage: MockUsage) -> Vec<String> {
            mock_llm::$wire::text_with_usage(chunks, usage)
        }

        fn tool_calls(text: Option<&str>, calls: &[(&str, &str, Value)]) -> Vec<String> {
            mock_llm::$wire::tool_calls(text, calls)
        }
    };
}

pub struct Anthropic;

impl Dialect for Anthropic {
    type Provider = AnthropicProvider;

    const KEY: &'static str = "sk-ant-test-key";
    const REQUEST_ID_HEADER: &'static str = "request-id";
    /// `message_start`, then the text block's `content_block_start`.
    const CHUNKS_BEFORE_TEXT: usize = 2;
    /// At `message_start` and at `message_stop`.
    const USAGE_REPORTS: usize = 2;
    /// Each `tool_use` block ends at its own `content_block_stop`.
    const ENDS_CALLS_AT_FINISH: bool = false;

    fn provider(base_url: &str, timeouts: HttpTimeouts) -> AnthropicProvider {
        AnthropicProvider::new(AnthropicConfig {
            options: Default::default(),
            base_url: base_url.to_owned(),
            api_key: Self::KEY.into(),
            timeouts,
        })
    }

    mock_streams!(anthropic);

    fn error_body(failure: Failure) -> Value {
        match failure {
            Failure::RateLimited => {
                mock_llm::anthropic::error_body("rate_limit_error", "Number of requests exceeded")
            }
            // The spend cap comes as a 429 like any rate limit; only its details tell it apart.
            Failure::QuotaExhausted => json!({"type": "error", "error": {"type": "rate_limit_error",
                "message": "You have reached your spend limit",
                "details": {"error_code": "enforced_spend_limit_reached"}}}),
            Failure::Overloaded => mock_llm::anthropic::error_body("overloaded_error", "Overloaded"),
            Failure::Server => mock_llm::anthropic::error_body("api_error", "boom"),
            Failure::Unauthorized => mock_llm::anthropic::error_body("authentication_error", "invalid x-api-key"),
            Failure::PromptTooLong => mock_llm::anthropic::error_body(
                "invalid_request_error",
                "prompt is too long: 210000 tokens > 200000 maximum",
            ),
        }
    }

    fn failing(text: Option<&str>, failure: Failure, message: &str) -> Vec<String> {
        let error_type = match failure {
            Failure::RateLimited => "rate_limit_error",
            Failure::QuotaExhausted => "billing_error",
            Failure::Overloaded => "overloaded_error",
            Failure::Server => "api_error",
            Failure::Unauthorized => "authentication_error",
            Failure::PromptTooLong => "invalid_request_error",
        };
        let mut chunks = vec![mock_llm::anthropic::message_start(usage(10, 1)), mock_llm::anthropic::ping()];
        if let Some(text) = text {
            chunks.extend(mock_llm::anthropic::text_block(0, &[text]));
        }
        chunks.push(mock_llm::anthropic::error(error_type, message));
        chunks
    }
}

pub struct OpenAi;

impl Dialect for OpenAi {
    type Provider = OpenAiProvider;

    const KEY: &'static str = "sk-openai-test-key";
    const REQUEST_ID_HEADER: &'static str = "x-request-id";
    /// The `role` delta.
    const CHUNKS_BEFORE_TEXT: usize = 1;
    /// Once, on the `include_usage` chunk.
    const USAGE_REPORTS: usize = 1;
    /// Tool-call deltas carry no end marker: `finish_reason` completes them all.
    const ENDS_CALLS_AT_FINISH: bool = true;

    fn provider(base_url: &str, timeouts: HttpTimeouts) -> OpenAiProvider {
        OpenAiProvider::new(OpenAiConfig {
            options: Default::default(),
            base_url: format!("{base_url}/v1"),
            api_key: Some(Self::KEY.into()),
            timeouts,
        })
    }

    mock_streams!(openai);

    fn error_body(failure: Failure) -> Value {
        match failure {
            Failure::RateLimited => {
                mock_llm::openai::error_body("requests", Some("rate_limit_exceeded"), "Rate limit reached")
            }
            Failure::QuotaExhausted => mock_llm::openai::error_body(
                "insufficient_quota",
                Some("insufficient_quota"),
                "You exceeded your current quota",
            ),
            Failure::Overloaded => mock_llm::openai::error_body("overloaded", None, "Overloaded"),
            Failure::Server => mock_llm::openai::error_body("server_error", None, "try later"),
            Failure::Unauthorized => mock_llm::openai::error_body(
                "invalid_request_error",
                Some("invalid_api_key"),
                "Incorrect API key provided",
            ),
            Failure::PromptTooLong => mock_llm::openai::error_body(
                "invalid_request_error",
                Some("context_length_exceeded"),
                "This model's maximum context length is 8192 tokens",
            ),
        }
    }

    fn failing(text: Option<&str>, failure: Failure, message: &str) -> Vec<String> {
        let (error_type, code) = match failure {
            Failure::RateLimited => ("rate_limit_error", Some("rate_limit_exceeded")),
            Failure::QuotaExhausted => ("insufficient_quota", Some("insufficient_quota")),
            Failure::Overloaded => ("overloaded_error", None),
            Failure::Server => ("server_error", None),
            Failure::Unauthorized => ("invalid_request_error", Some("invalid_api_key")),
            Failure::PromptTooLong => ("invalid_request_error", Some("context_length_exceeded")),
        };
        let mut chunks = Vec::new();
        if let Some(text) = text {
            chunks.push(mock_llm::openai::delta(json!({"role": "assistant", "content": text})));
        }
        chunks.push(mock_llm::openai::error_chunk(error_type, code, message));
        chunks
    }
}

fn provider<D: Dialect>(mock: &MockLlm) -> D::Provider {
    D::provider(&mock.base_url(), HttpTimeouts::default())
}

fn finished(reason: StopReason) -> StreamEvent {
    StreamEvent::Finished { stop_reason: reason }
}

/// The message a dialect put in an HTTP error body; the error must repeat it.
fn message_of(body: &Value) -> &str {
    body.pointer("/error/message").and_then(Value::as_str).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Streaming

async fn streams_text_deltas<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(D::text(&["Hel", "lo, ", "wörld 😀"])));
    let (events, err) = run(&provider::<D>(&mock), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_deltas(&events), ["Hel", "lo, ", "wörld 😀"]);
    assert_eq!(text_of(&events), "Hello, wörld 😀");
    assert_eq!(events.last(), Some(&finished(StopReason::EndTurn)));
}

async fn survives_chunks_split_mid_line_and_mid_character<D: Dialect>() {
    let mock = MockLlm::start().await;
    let body = D::text(&["naïve ", "☃"]).concat().into_bytes();
    // Three-byte chunks cut through lines, `\n\n` pairs and the multi-byte characters.
    let chunks = body.chunks(3).map(<[u8]>::to_vec).collect();
    mock.push(MockResponse::raw_chunks(200, "text/event-stream", chunks));
    let (events, err) = run(&provider::<D>(&mock), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "naïve ☃");
}

async fn streams_two_tool_calls_with_fragmented_arguments<D: Dialect>() {
    let mock = MockLlm::start().await;
    let first = json!({"path": "src/main.rs", "lines": [1, 20]});
    let second = json!({"query": "weather \"today\"", "cwd": "/tmp"});
    mock.push(MockResponse::sse(D::tool_calls(
        Some("Let me look."),
        &[("call_1", "read_file", first.clone()), ("call_2", "search", second.clone())],
    )));
    let (events, err) = run(&provider::<D>(&mock), simple_request("go")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "Let me look.");
    for (id, input) in [("call_1", &first), ("call_2", &second)] {
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
    let start_1 = StreamEvent::ToolCallStart { id: "call_1".into(), name: "read_file".into() };
    let start_2 = StreamEvent::ToolCallStart { id: "call_2".into(), name: "search".into() };
    let end_1 = StreamEvent::ToolCallEnd { id: "call_1".into(), name: "read_file".into(), input: first };
    let end_2 = StreamEvent::ToolCallEnd { id: "call_2".into(), name: "search".into(), input: second };
    // Starts and ends each in call order; how they interleave is the wire's.
    let want =
        if D::ENDS_CALLS_AT_FINISH { [start_1, start_2, end_1, end_2] } else { [start_1, end_1, start_2, end_2] };
    let calls: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCallStart { .. } | StreamEvent::ToolCallEnd { .. }))
        .cloned()
        .collect();
    assert_eq!(calls, want);
    assert_eq!(events.last(), Some(&finished(StopReason::ToolUse)));
}

async fn reports_usage_with_cached_tokens<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(D::text_with_usage(&["ok"], usage(300, 25).cache(200, 0))));
    let (events, err) = run(&provider::<D>(&mock), simple_request("hi")).await;
    assert_eq!(err, None);
    let want = Usage {
        input_tokens: 300,
        output_tokens: 25,
        cache_read_input_tokens: 200,
        cache_creation_input_tokens: 0,
    };
    let usages = usages(&events);
    assert_eq!(usages.len(), D::USAGE_REPORTS);
    assert_eq!(usages.last(), Some(&want));
    assert_eq!(want.prompt_tokens(), 500);
    // The final usage comes right before Finished.
    assert_eq!(events[events.len() - 2], StreamEvent::Usage(want));
}

// ---------------------------------------------------------------------------------------------
// HTTP errors, alone and behind the retry gate

async fn rate_limit_honours_retry_after_ms_then_succeeds<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::json(429, D::error_body(Failure::RateLimited)).header("retry-after-ms", "150"));
    mock.push(MockResponse::sse(D::text(&["after wait"])));
    let started = Instant::now();
    let (events, err) = run(&retrying(provider::<D>(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "after wait");
    assert!(started.elapsed() >= Duration::from_millis(150), "waited only {:?}", started.elapsed());
    assert_eq!(mock.requests().len(), 2);
}

async fn rate_limit_honours_retry_after_seconds<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::json(429, D::error_body(Failure::RateLimited)).header("retry-after", "1"));
    mock.push(MockResponse::sse(D::text(&["ok"])));
    let started = Instant::now();
    let (events, err) = run(&retrying(provider::<D>(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "ok");
    assert!(started.elapsed() >= Duration::from_secs(1), "waited only {:?}", started.elapsed());
    mock.wait_for_requests(2).await;
    assert_eq!(mock.requests().len(), 2);
}

/// A spend cap or exhausted quota also comes as a 429, but waiting will not lift it.
async fn quota_429_is_not_retried<D: Dialect>() {
    let mock = MockLlm::start().await;
    let body = D::error_body(Failure::QuotaExhausted);
    mock.push(MockResponse::json(429, body.clone()));
    let (_, err) = run(&retrying(provider::<D>(&mock)), simple_request("hi")).await;
    let err = err.unwrap();
    assert_eq!(err.kind, LlmErrorKind::QuotaExhausted);
    assert!(err.message.contains(message_of(&body)), "{}", err.message);
    assert_eq!(mock.requests().len(), 1);
}

async fn overloaded_and_server_errors_are_retried<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::json(529, D::error_body(Failure::Overloaded)));
    mock.push(MockResponse::json(503, D::error_body(Failure::Server)));
    mock.push(MockResponse::sse(D::text(&["third time lucky"])));
    let (events, err) = run(&retrying(provider::<D>(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "third time lucky");
    assert_eq!(mock.requests().len(), 3);
}

async fn overloaded_529_alone_is_classified<D: Dialect>() {
    let mock = MockLlm::start().await;
    let body = D::error_body(Failure::Overloaded);
    mock.push(MockResponse::json(529, body.clone()).header("retry-after", "2"));
    let err = run(&provider::<D>(&mock), simple_request("hi")).await.1.unwrap();
    assert_eq!(err.kind, LlmErrorKind::Overloaded);
    assert_eq!(err.retry_after, Some(Duration::from_secs(2)));
    assert!(err.message.contains("529") && err.message.contains(message_of(&body)), "{}", err.message);
}

async fn prompt_too_long_is_context_overflow<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::json(400, D::error_body(Failure::PromptTooLong)));
    let (_, err) = run(&retrying(provider::<D>(&mock)), simple_request("hi")).await;
    assert_eq!(err.unwrap().kind, LlmErrorKind::ContextOverflow);
    assert_eq!(mock.requests().len(), 1);
}

async fn unauthorized_is_not_retried_and_readable<D: Dialect>() {
    let mock = MockLlm::start().await;
    let body = D::error_body(Failure::Unauthorized);
    mock.push(MockResponse::json(401, body.clone()).header(D::REQUEST_ID_HEADER, "req_abc"));
    let (_, err) = run(&retrying(provider::<D>(&mock)), simple_request("hi")).await;
    let err = err.unwrap();
    assert_eq!(err.kind, LlmErrorKind::Auth);
    assert!(err.message.contains(message_of(&body)), "{}", err.message);
    assert!(err.message.contains("401") && err.message.contains("req_abc"), "{}", err.message);
    assert!(!err.message.contains(D::KEY));
    assert_eq!(mock.requests().len(), 1);
}

async fn should_retry_false_header_stops_retries<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::json(500, D::error_body(Failure::Server)).header("x-should-retry", "false"));
    let (_, err) = run(&retrying(provider::<D>(&mock)), simple_request("hi")).await;
    assert!(!err.unwrap().is_retryable());
    assert_eq!(mock.requests().len(), 1);
}

async fn refused_connection_is_connect<D: Dialect>() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let provider = D::provider(&format!("http://{addr}"), HttpTimeouts::default());
    let err = run(&provider, simple_request("hi")).await.1.unwrap();
    assert_eq!(err.kind, LlmErrorKind::Connect);
}

// ---------------------------------------------------------------------------------------------
// Broken streams: retried silently before content, announced (`Restarted`) after it

async fn cut_after_content_restarts_the_response<D: Dialect>() {
    let mock = MockLlm::start().await;
    // Two text deltas get through, then the socket closes.
    mock.push(
        MockResponse::sse(D::text(&["partial ", "answer", "never sent"])).cut_after(D::CHUNKS_BEFORE_TEXT + 2),
    );
    mock.push(MockResponse::sse(D::text(&["the whole ", "answer"])));
    let (events, err) = run(&retrying(provider::<D>(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_deltas(&events), ["partial ", "answer", "the whole ", "answer"]);
    assert_eq!(restarts(&events), 1);
    assert_eq!(text_of(&events), "the whole answer");
    assert_eq!(mock.requests().len(), 2);
    assert_eq!(mock.requests()[0].body, mock.requests()[1].body, "the same request is sent again");
}

async fn cut_after_content_without_retries_surfaces<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push(
        MockResponse::sse(D::text(&["partial ", "answer", "never sent"])).cut_after(D::CHUNKS_BEFORE_TEXT + 2),
    );
    let (events, err) = run(&provider::<D>(&mock), simple_request("hi")).await;
    assert_eq!(text_of(&events), "partial answer");
    assert_eq!(err.unwrap().kind, LlmErrorKind::StreamBroken);
    assert_eq!(mock.requests().len(), 1);
}

async fn cut_before_content_is_retried<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(D::text_with_usage(&["lost"], usage(999, 1))).cut_after(1));
    mock.push(MockResponse::sse(D::text_with_usage(&["second try"], usage(10, 3))));
    let (events, err) = run(&retrying(provider::<D>(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "second try");
    // An early usage of the first attempt is held back and dropped, never double-counted.
    assert!(events.iter().all(|e| !matches!(e, StreamEvent::Usage(u) if u.input_tokens == 999)));
    assert_eq!(mock.requests().len(), 2);
}

async fn in_band_error_before_content_is_retried<D: Dialect>() {
    for (failure, message) in [(Failure::Overloaded, "Overloaded"), (Failure::RateLimited, "busy")] {
        let mock = MockLlm::start().await;
        mock.push(MockResponse::sse(D::failing(None, failure, message)));
        mock.push(MockResponse::sse(D::text(&["recovered"])));
        let (events, err) = run(&retrying(provider::<D>(&mock)), simple_request("hi")).await;
        assert_eq!(err, None, "{failure:?}");
        assert_eq!(text_of(&events), "recovered");
        assert_eq!(mock.requests().len(), 2);
    }
}

async fn in_band_error_is_classified<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(D::failing(None, Failure::Overloaded, "Overloaded")));
    let err = run(&provider::<D>(&mock), simple_request("hi")).await.1.unwrap();
    assert_eq!(err.kind, LlmErrorKind::Overloaded);
}

async fn in_band_error_after_content_restarts_the_response<D: Dialect>() {
    let mock = MockLlm::start().await;
    let message = "The server had an error while processing your request";
    mock.push(MockResponse::sse(D::failing(Some("Hal"), Failure::Server, message)));
    mock.push(MockResponse::sse(D::text(&["Hello"])));
    let (events, err) = run(&retrying(provider::<D>(&mock)), simple_request("hi")).await;
    assert_eq!(err, None);
    let reason = events.iter().find_map(|e| match e {
        StreamEvent::Restarted { reason } => Some(reason.clone()),
        _ => None,
    });
    assert!(reason.is_some_and(|reason| reason.contains(message)));
    assert_eq!(text_of(&events), "Hello");
    assert_eq!(mock.requests().len(), 2);
}

// ---------------------------------------------------------------------------------------------
// The idle read timeout

async fn idle_read_timeout_before_content_is_a_timeout<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push_held(MockResponse::sse(D::text(&["never"])), D::CHUNKS_BEFORE_TEXT);
    let provider = D::provider(&mock.base_url(), short_idle(Duration::from_millis(300)));
    let started = Instant::now();
    let (events, err) = run(&provider, simple_request("hi")).await;
    assert_eq!(err.unwrap().kind, LlmErrorKind::Timeout);
    assert!(!events.iter().any(StreamEvent::is_content));
    assert!(started.elapsed() < Duration::from_secs(5));
}

async fn idle_read_timeout_after_content_keeps_the_text<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push_held(MockResponse::sse(D::text(&["a", "b"])), D::CHUNKS_BEFORE_TEXT + 1);
    let provider = D::provider(&mock.base_url(), short_idle(Duration::from_millis(300)));
    let (events, err) = run(&provider, simple_request("hi")).await;
    assert_eq!(text_of(&events), "a");
    assert_eq!(err.unwrap().kind, LlmErrorKind::Timeout);
}

async fn idle_timeout_before_content_is_retried<D: Dialect>() {
    let mock = MockLlm::start().await;
    mock.push_held(MockResponse::sse(D::text(&["slow"])), 0);
    mock.push(MockResponse::sse(D::text(&["fast"])));
    let provider = D::provider(&mock.base_url(), short_idle(Duration::from_millis(300)));
    let (events, err) = run(&retrying(provider), simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "fast");
    assert_eq!(mock.requests().len(), 2);
}

async fn slow_but_steady_stream_is_not_a_timeout<D: Dialect>() {
    let mock = MockLlm::start().await;
    let gate = Gate::new();
    gate.open(); // opening before the pause is reached also works
    mock.push(
        MockResponse::sse(D::text(&["a", "b", "c"]))
            .chunk_delay(Duration::from_millis(100))
            .pause_before_chunk(3, gate),
    );
    // The whole response (600 ms or more) outlasts the idle timeout; no single gap does.
    let provider = D::provider(&mock.base_url(), short_idle(Duration::from_millis(400)));
    let (events, err) = run(&provider, simple_request("hi")).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "abc");
}

// ---------------------------------------------------------------------------------------------
// One test per scenario and wire

/// One `#[tokio::test]` per scenario in module `$wire`, each running it with `$dialect`.
macro_rules! tests_for {
    ($wire:ident, $dialect:ty, $($scenario:ident),* $(,)?) => {
        mod $wire {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario::<$dialect>().await;
                }
            )*
        }
    };
}

/// Every scenario of the contract, for one wire.
macro_rules! contract_for {
    ($wire:ident, $dialect:ty) => {
        tests_for!(
            $wire,
            $dialect,
            streams_text_deltas,
            survives_chunks_split_mid_line_and_mid_character,
            streams_two_tool_calls_with_fragmented_arguments,
            reports_usage_with_cached_tokens,
            rate_limit_honours_retry_after_ms_then_succeeds,
            rate_limit_honours_retry_after_seconds,
            quota_429_is_not_retried,
            overloaded_and_server_errors_are_retried,
            overloaded_529_alone_is_classified,
            prompt_too_long_is_context_overflow,
            unauthorized_is_not_retried_and_readable,
            should_retry_false_header_stops_retries,
            refused_connection_is_connect,
            cut_after_content_restarts_the_response,
            cut_after_content_without_retries_surfaces,
            cut_before_content_is_retried,
            in_band_error_before_content_is_retried,
            in_band_error_is_classified,
            in_band_error_after_content_restarts_the_response,
            idle_read_timeout_before_content_is_a_timeout,
            idle_read_timeout_after_content_keeps_the_text,
            idle_timeout_before_content_is_retried,
            slow_but_steady_stream_is_not_a_timeout,
        );
    };
}

contract_for!(anthropic, super::Anthropic);
contract_for!(openai, super::OpenAi);
