//! The Anthropic adapter's pure parts: the request body and the stream decoder fed event by
//! event, without a server. The wire end to end is in `tests/suite/provider_*.rs`.

use serde::Deserialize;
use serde_json::{Value, json};

use super::request::*;
use super::stream::*;
use crate::llm::http::WireDecoder;
use crate::llm::options::{CacheTtl, PromptCache, WireOptions};
use crate::llm::sse::SseEvent;
use crate::llm::{
    ContentBlock, LlmError, LlmErrorKind, Message, ModelRequest, Role, StopReason, StreamEvent, ToolSpec, Usage,
};

/// The body a request goes out with, as JSON, without prompt caching (the tests of the
/// cache breakpoints turn it on).
fn request_body(request: &ModelRequest) -> Value {
    let options = WireOptions { prompt_cache: PromptCache::Off, ..WireOptions::default() };
    serde_json::from_slice(&encode(request, &options).unwrap()).unwrap()
}

/// The body with the provider's options as given.
fn body_with(request: &ModelRequest, options: &WireOptions) -> Value {
    serde_json::from_slice(&encode(request, options).unwrap()).unwrap()
}

fn feed(events: &[(&str, Value)]) -> (Vec<StreamEvent>, Option<LlmError>) {
    let mut decoder = StreamDecoder::default();
    let mut out = Vec::new();
    for (name, data) in events {
        let event = SseEvent { event: Some((*name).to_owned()), data: data.to_string() };
        if let Err(err) = decoder.on_event(event, &mut out) {
            return (out, Some(err));
        }
    }
    (out, None)
}

fn start() -> (&'static str, Value) {
    (
        "message_start",
        json!({"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":3,"cache_creation_input_tokens":2,"output_tokens":1}}}),
    )
}

fn tool_start(index: u64, id: &str) -> (&'static str, Value) {
    (
        "content_block_start",
        json!({"type":"content_block_start","index":index,"content_block":{"type":"tool_use","id":id,"name":"t","input":{}}}),
    )
}

fn json_delta(index: u64, partial: &str) -> (&'static str, Value) {
    (
        "content_block_delta",
        json!({"type":"content_block_delta","index":index,"delta":{"type":"input_json_delta","partial_json":partial}}),
    )
}

fn stop(index: u64) -> (&'static str, Value) {
    ("content_block_stop", json!({"type":"content_block_stop","index":index}))
}

fn message_delta(reason: &str, usage: Value) -> (&'static str, Value) {
    ("message_delta", json!({"type":"message_delta","delta":{"stop_reason":reason},"usage":usage}))
}

fn message_stop() -> (&'static str, Value) {
    ("message_stop", json!({"type":"message_stop"}))
}

#[test]
fn max_tokens_inside_a_tool_call_drops_it() {
    let (events, err) = feed(&[
        start(),
        tool_start(0, "a"),
        json_delta(0, "{\"x\": 1}"),
        stop(0),
        tool_start(1, "b"),
        json_delta(1, "{\"path\": \"/tm"),
        stop(1),
        message_delta("max_tokens", json!({"output_tokens": 50})),
        message_stop(),
    ]);
    assert_eq!(err, None);
    let ends: Vec<_> = events.iter().filter(|e| matches!(e, StreamEvent::ToolCallEnd { .. })).collect();
    assert_eq!(ends, vec![&StreamEvent::ToolCallEnd { id: "a".into(), name: "t".into(), input: json!({"x": 1}) }]);
    assert_eq!(events.last(), Some(&StreamEvent::Finished { stop_reason: StopReason::MaxTokens }));
}

#[test]
fn max_tokens_with_a_block_never_stopped_drops_it() {
    let (events, err) = feed(&[
        start(),
        tool_start(0, "a"),
        json_delta(0, "{\"x\""),
        message_delta("max_tokens", json!({"output_tokens": 50})),
        message_stop(),
    ]);
    assert_eq!(err, None);
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::ToolCallEnd { .. })));
}

#[test]
fn invalid_arguments_without_truncation_are_a_decode_error() {
    let (_, err) = feed(&[
        start(),
        tool_start(0, "a"),
        json_delta(0, "{\"x\": "),
        stop(0),
        message_delta("tool_use", json!({"output_tokens": 5})),
    ]);
    assert_eq!(err.unwrap().kind, LlmErrorKind::Decode);
}

#[test]
fn empty_arguments_are_an_empty_object_and_empty_fragments_are_skipped() {
    let (events, err) = feed(&[
        start(),
        tool_start(0, "a"),
        json_delta(0, ""),
        stop(0),
        message_delta("tool_use", json!({"output_tokens": 5})),
        message_stop(),
    ]);
    assert_eq!(err, None);
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::ToolCallDelta { .. })));
    assert!(events.contains(&StreamEvent::ToolCallEnd { id: "a".into(), name: "t".into(), input: json!({}) }));
}

#[test]
fn usage_is_cumulative_and_takes_repeated_input_fields() {
    let (events, err) = feed(&[
        start(),
        ("ping", json!({"type":"ping"})),
        ("some_future_event", json!({"type":"some_future_event"})),
        message_delta("end_turn", json!({"output_tokens": 7, "input_tokens": 11, "cache_read_input_tokens": 4})),
        message_delta("end_turn", json!({"output_tokens": 9})),
        message_stop(),
    ]);
    assert_eq!(err, None);
    let want =
        Usage { input_tokens: 11, output_tokens: 9, cache_read_input_tokens: 4, cache_creation_input_tokens: 2 };
    assert_eq!(
        events,
        vec![
            StreamEvent::Usage(Usage {
                input_tokens: 10,
                output_tokens: 1,
                cache_read_input_tokens: 3,
                cache_creation_input_tokens: 2
            }),
            StreamEvent::Usage(want),
            StreamEvent::Finished { stop_reason: StopReason::EndTurn },
        ]
    );
}

#[test]
fn thinking_blocks_are_kept_whole_with_their_signature_and_unknown_stop_reasons_kept() {
    let (events, err) = feed(&[
        start(),
        (
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}),
        ),
        (
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}),
        ),
        (
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"x"}}),
        ),
        stop(0),
        message_delta("pause_turn", json!({"output_tokens": 3})),
        message_stop(),
    ]);
    assert_eq!(err, None);
    let reasoning: Vec<&StreamEvent> = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::ReasoningDelta(_) | StreamEvent::Reasoning(_)))
        .collect();
    assert_eq!(
        reasoning,
        [
            &StreamEvent::ReasoningDelta("hmm".into()),
            &StreamEvent::Reasoning(ContentBlock::Thinking { thinking: "hmm".into(), signature: Some("x".into()) })
        ]
    );
    assert!(!events.iter().any(|event| matches!(event, StreamEvent::TextDelta(_))), "never mixed into the text");
    assert_eq!(events.last(), Some(&StreamEvent::Finished { stop_reason: StopReason::Other("pause_turn".into()) }));
}

#[test]
fn in_band_errors_are_classified() {
    let cases = [
        ("overloaded_error", "Overloaded", LlmErrorKind::Overloaded),
        ("api_error", "Internal", LlmErrorKind::Server),
        ("rate_limit_error", "slow down", LlmErrorKind::RateLimited),
        ("invalid_request_error", "bad", LlmErrorKind::InvalidRequest),
        ("invalid_request_error", "prompt is too long: 1 > 0", LlmErrorKind::ContextOverflow),
        ("authentication_error", "key", LlmErrorKind::Auth),
        ("brand_new_error", "?", LlmErrorKind::Server),
    ];
    for (error_type, message, kind) in cases {
        let (_, err) =
            feed(&[start(), ("error", json!({"type":"error","error":{"type":error_type,"message":message}}))]);
        let err = err.unwrap();
        assert_eq!(err.kind, kind, "{error_type}");
        assert!(err.message.contains(message));
    }
}

#[test]
fn unnamed_events_dispatch_on_their_type() {
    let mut decoder = StreamDecoder::default();
    let mut out = Vec::new();
    let event = SseEvent { event: None, data: json!({"type":"message_stop"}).to_string() };
    decoder.on_event(event, &mut out).unwrap();
    assert!(matches!(out.last(), Some(StreamEvent::Finished { .. })));
    let garbage = SseEvent { event: Some("content_block_delta".into()), data: "{not json".into() };
    assert_eq!(decoder.on_event(garbage, &mut out).unwrap_err().kind, LlmErrorKind::Decode);
}

/// Feeds raw SSE events (name, data text) and returns what came out, or the error.
fn feed_raw(events: &[(Option<&str>, &str)]) -> (Vec<StreamEvent>, Option<LlmError>) {
    let mut decoder = StreamDecoder::default();
    let mut out = Vec::new();
    for (name, data) in events {
        let event = SseEvent { event: name.map(str::to_owned), data: (*data).to_owned() };
        if let Err(err) = decoder.on_event(event, &mut out) {
            return (out, Some(err));
        }
    }
    (out, None)
}

#[test]
fn the_event_name_wins_over_the_data_type_and_odd_payloads_have_no_fields() {
    let (events, err) = feed_raw(&[
        (Some("message_start"), "5"),
        (None, r#"{"no_type": true}"#),
        (None, "[1, 2]"),
        (None, r#"{"type": 7}"#),
        (Some("message_stop"), r#"{"type": "ping"}"#),
    ]);
    assert_eq!(err, None);
    assert_eq!(
        events,
        vec![
            StreamEvent::Usage(Usage::default()),
            StreamEvent::Usage(Usage::default()),
            StreamEvent::Finished { stop_reason: StopReason::Other("unknown".into()) },
        ]
    );
    let (_, err) = feed_raw(&[(Some("content_block_start"), "[]")]);
    assert_eq!(err.unwrap().message, "anthropic: content block event without index");
}

#[test]
fn a_field_sent_twice_reads_as_a_json_tree_does_the_last_one() {
    // Named events with object data are read straight into their type, which refuses a field
    // twice; those go the way of every other payload, where the last one wins.
    let (events, err) = feed_raw(&[
        (Some("message_start"), r#"{"message": {"usage": {"input_tokens": 1, "input_tokens": 2}}}"#),
        (Some("content_block_start"), r#"{"index": 0, "index": 0, "content_block": {"type": "text", "text": ""}}"#),
        (Some("content_block_delta"), r#"{"index": 0, "delta": {"type": "text_delta", "text": "a", "text": "b"}}"#),
        (Some("content_block_stop"), r#"{"index": 0}"#),
        (Some("message_stop"), r#"{"type": "message_stop", "type": "x"}"#),
    ]);
    assert_eq!(err, None);
    assert_eq!(events[0], StreamEvent::Usage(Usage { input_tokens: 2, ..Usage::default() }));
    assert!(events.contains(&StreamEvent::TextDelta("b".into())), "{events:?}");
    assert!(matches!(events.last(), Some(StreamEvent::Finished { .. })), "{events:?}");
    let (_, err) = feed_raw(&[(Some("message_delta"), r#"{"delta": {"#)]);
    assert!(err.unwrap().message.contains("event data is not JSON"));
}

#[test]
fn fields_of_an_unexpected_type_count_as_absent() {
    let (events, err) = feed_raw(&[
        (
            Some("message_start"),
            r#"{"message": {"usage": {"input_tokens": "10", "output_tokens": 1.5, "cache_read_input_tokens": -1, "cache_creation_input_tokens": 4}}}"#,
        ),
        (Some("content_block_start"), r#"{"index": 0, "content_block": {"type": "text", "text": 5}}"#),
        (Some("content_block_delta"), r#"{"index": 0, "delta": {"type": "text_delta", "text": ["a"]}}"#),
        (Some("content_block_delta"), r#"{"index": 0, "delta": {"type": 3}}"#),
        (Some("content_block_delta"), r#"{"index": 0, "delta": null}"#),
        (Some("content_block_start"), r#"{"index": 1, "content_block": ["tool_use", "id", "name"]}"#),
        (Some("content_block_stop"), r#"{"index": 0}"#),
        (Some("message_delta"), r#"{"delta": {"stop_reason": 1}, "usage": [1, 2, 3, 4]}"#),
        (Some("message_delta"), r#"{"delta": ["end_turn"], "usage": {"output_tokens": 9}}"#),
        (Some("message_stop"), "{}"),
    ]);
    assert_eq!(err, None);
    let usage =
        Usage { input_tokens: 0, output_tokens: 9, cache_read_input_tokens: 0, cache_creation_input_tokens: 4 };
    assert_eq!(
        events,
        vec![
            StreamEvent::Usage(Usage { output_tokens: 0, ..usage }),
            StreamEvent::Usage(usage),
            StreamEvent::Finished { stop_reason: StopReason::Other("unknown".into()) },
        ]
    );
}

#[test]
fn a_required_field_of_an_unexpected_type_is_a_decode_error() {
    let cases = [
        (r#"{"index": "0", "content_block": {"type": "text"}}"#, "anthropic: content block event without index"),
        (
            r#"{"index": 0, "content_block": {"type": "tool_use", "id": 1, "name": "t"}}"#,
            "anthropic: tool_use block without id or name",
        ),
    ];
    for (data, message) in cases {
        let (_, err) = feed_raw(&[(Some("content_block_start"), data)]);
        let err = err.unwrap();
        assert_eq!((err.kind, err.message.as_str()), (LlmErrorKind::Decode, message), "{data}");
    }
    let (_, err) = feed_raw(&[
        (Some("content_block_start"), r#"{"index": 0, "content_block": {"type": "text"}}"#),
        (Some("content_block_delta"), r#"{"index": 0, "delta": {"type": "input_json_delta"}}"#),
    ]);
    assert_eq!(err.unwrap().message, "anthropic: input_json_delta for block 0, not a tool_use");
}

#[test]
fn an_in_band_error_without_details_is_a_server_error() {
    let (_, err) = feed_raw(&[(Some("error"), r#"{"error": {"type": 5, "message": null}}"#)]);
    let err = err.unwrap();
    assert_eq!(
        (err.kind, err.message.as_str()),
        (LlmErrorKind::Server, "anthropic stream error (): unknown error")
    );
    let (_, err) = feed_raw(&[(Some("error"), r#"{"error": ["overloaded_error", "busy"]}"#)]);
    assert_eq!(err.unwrap().message, "anthropic stream error (): unknown error");
}

#[test]
fn request_body_puts_tool_results_first_and_skips_empty_text() {
    let request = ModelRequest {
        tool_choice: Default::default(),
        reasoning: None,
        cache_key: None,
        model: "m".into(),
        system: Some("sys".into()),
        messages: vec![
            Message::user_text("hi"),
            Message::assistant(vec![
                ContentBlock::Text { text: String::new() },
                ContentBlock::ToolUse { id: "t1".into(), name: "ls".into(), input: json!({"p": "."}) },
            ]),
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::Text { text: "also".into() },
                    ContentBlock::ToolResult { tool_use_id: "t1".into(), content: "out".into(), is_error: true },
                ],
            },
        ]
        .into(),
        tools: ToolSpec::list([ToolSpec {
            name: "ls".into(),
            description: "list".into(),
            input_schema: json!({"type":"object"}).into(),
        }]),
        max_tokens: 100,
        output: None,
        retries: Default::default(),
    };
    let body = request_body(&request);
    assert_eq!(
        body,
        json!({
            "model": "m", "max_tokens": 100, "stream": true, "system": "sys",
            "tools": [{"name":"ls","description":"list","input_schema":{"type":"object"}}],
            "messages": [
                {"role":"user","content":[{"type":"text","text":"hi"}]},
                {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ls","input":{"p":"."}}]},
                {"role":"user","content":[
                    {"type":"tool_result","tool_use_id":"t1","content":"out","is_error":true},
                    {"type":"text","text":"also"}
                ]}
            ]
        })
    );
}

#[test]
fn structured_output_adds_the_final_tool_after_the_sessions_and_forces_a_tool_call() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let request = ModelRequest {
        tool_choice: Default::default(),
        reasoning: None,
        cache_key: None,
        model: "m".into(),
        system: None,
        messages: vec![Message::user_text("hi")].into(),
        tools: ToolSpec::list([ToolSpec {
            name: "ls".into(),
            description: "list".into(),
            input_schema: json!({"type":"object"}).into(),
        }]),
        max_tokens: 100,
        output: Some(crate::llm::OutputFormat::new(std::sync::Arc::new(schema.clone()))),
        retries: Default::default(),
    };
    let body = request_body(&request);
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
    assert_eq!(
        body["tools"],
        json!([
            {"name": "ls", "description": "list", "input_schema": {"type": "object"}},
            {"name": "deputy_final_answer", "description": crate::llm::structured::final_answer_description(),
             "input_schema": schema}
        ])
    );
    let plain = request_body(&ModelRequest { output: None, tools: Vec::new().into(), ..request });
    assert!(plain.get("tool_choice").is_none() && plain.get("tools").is_none(), "{plain}");
}

#[test]
fn every_known_event_name_has_a_variant() {
    for name in KNOWN_EVENTS {
        let event = Event::deserialize(json!({ "type": name })).unwrap();
        assert!(!matches!(event, Event::Unknown), "{name}");
    }
}

#[test]
fn the_body_goes_out_with_its_keys_sorted() {
    // As a JSON tree is written (serde_json's order), which bodies have always been: parsing
    // the body and writing it again changes no byte.
    let schema = json!({"type": "array", "items": {"type": "string"}});
    let request = ModelRequest {
        tool_choice: Default::default(),
        reasoning: None,
        cache_key: None,
        model: "m".into(),
        system: Some("Say \"hi\"\n\tthen stop.".into()),
        messages: vec![
            Message::user_text("hi"),
            Message::assistant(vec![
                ContentBlock::Text { text: String::new() },
                ContentBlock::Text { text: "é \u{1}".into() },
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "ls".into(),
                    input: json!({"p": ".", "n": [1, 2.5]}),
                },
            ]),
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::Text { text: "also".into() },
                    ContentBlock::ToolResult { tool_use_id: "t1".into(), content: "out".into(), is_error: true },
                    ContentBlock::ToolResult { tool_use_id: "t2".into(), content: "ok".into(), is_error: false },
                ],
            },
            Message::assistant(vec![ContentBlock::Text { text: String::new() }]),
        ]
        .into(),
        tools: ToolSpec::list([ToolSpec {
            name: "ls".into(),
            description: "list".into(),
            input_schema: json!({"type":"object"}).into(),
        }]),
        max_tokens: 100,
        output: Some(crate::llm::OutputFormat::new(std::sync::Arc::new(schema))),
        retries: Default::default(),
    };
    let plain = ModelRequest { output: None, system: None, tools: Vec::new().into(), ..request.clone() };
    for request in [request, plain] {
        let body = encode(&request, &WireOptions::default()).unwrap();
        let tree: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(String::from_utf8_lossy(&body), serde_json::to_string(&tree).unwrap());
    }
}

/// A tool loop in progress: the model called `ls` (after thinking, if `thinking`), and the
/// result is the last message.
fn tool_loop(thinking: bool) -> ModelRequest {
    let mut answer = Vec::new();
    if thinking {
        answer.push(ContentBlock::Thinking { thinking: "look first".into(), signature: Some("sig".into()) });
    }
    answer.push(ContentBlock::ToolUse { id: "a".into(), name: "ls".into(), input: json!({}) });
    ModelRequest {
        model: "claude-test".into(),
        system: Some("Be brief.".into()),
        messages: vec![
            Message::user_text("list"),
            Message::assistant(answer),
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "a".into(),
                    content: "x".into(),
                    is_error: false,
                }],
            },
        ]
        .into(),
        tools: ToolSpec::list([ToolSpec {
            name: "ls".into(),
            description: "list".into(),
            input_schema: json!({"type": "object"}).into(),
        }]),
        max_tokens: 1000,
        ..ModelRequest::default()
    }
}

#[test]
fn prompt_caching_marks_the_tools_the_system_prompt_and_the_last_block() {
    let body = body_with(&tool_loop(true), &WireOptions::default());
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(body["tools"][0]["cache_control"], ephemeral);
    assert_eq!(body["system"], json!([{"type": "text", "text": "Be brief.", "cache_control": ephemeral}]));
    assert_eq!(body["messages"][2]["content"][0]["cache_control"], ephemeral);
    assert_eq!(body.to_string().matches("cache_control").count(), 3, "three of the four allowed");
    // Thinking blocks may not carry a breakpoint: it goes on the last block that may.
    let thinking_last = ModelRequest {
        messages: vec![
            Message::user_text("hi"),
            Message::assistant(vec![
                ContentBlock::Text { text: "a".into() },
                ContentBlock::Thinking { thinking: "t".into(), signature: Some("s".into()) },
            ]),
        ]
        .into(),
        ..tool_loop(false)
    };
    let body = body_with(&thinking_last, &WireOptions::default());
    assert_eq!(body["messages"][1]["content"][0]["cache_control"], ephemeral);
    assert!(body["messages"][1]["content"][1].get("cache_control").is_none());
    let hour = WireOptions { prompt_cache_ttl: CacheTtl::OneHour, ..WireOptions::default() };
    assert_eq!(
        body_with(&tool_loop(false), &hour)["tools"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );
    let off = request_body(&tool_loop(false));
    assert!(!off.to_string().contains("cache_control") && off["system"] == "Be brief.");
}

#[test]
fn thinking_gets_its_budget_on_top_of_max_tokens_and_its_block_back_first() {
    let reasoning = Some(crate::llm::Reasoning { effort: Some(crate::llm::Effort::High), budget_tokens: None });
    let body = request_body(&ModelRequest { reasoning, ..tool_loop(true) });
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 16384}));
    assert_eq!(body["max_tokens"], 1000 + 16384);
    assert_eq!(
        body["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "look first", "signature": "sig"}),
        "sent back byte for byte"
    );
    // A tool loop opened without thinking cannot go on with it: this request goes without.
    let body = request_body(&ModelRequest { reasoning, ..tool_loop(false) });
    assert!(body.get("thinking").is_none(), "{body}");
    assert_eq!(body["max_tokens"], 1000);
    // Structured output with thinking: not forced (thinking refuses that), asked for instead.
    let schema = std::sync::Arc::new(json!({"type": "object"}));
    let structured = ModelRequest {
        reasoning,
        output: Some(crate::llm::OutputFormat::new(schema)),
        messages: vec![Message::user_text("go")].into(),
        ..tool_loop(false)
    };
    let body = request_body(&structured);
    assert!(body.get("tool_choice").is_none() && body["thinking"]["type"] == "enabled");
    assert!(body["system"].as_str().unwrap().ends_with(&crate::llm::structured::tool_instruction()));
    let forced = request_body(&ModelRequest { reasoning: None, ..structured });
    assert_eq!(forced["tool_choice"], json!({"type": "any"}));
}

#[test]
fn the_summary_call_declares_the_tools_but_forbids_calling_them() {
    let body = request_body(&ModelRequest { tool_choice: crate::llm::ToolChoice::Forbidden, ..tool_loop(false) });
    assert_eq!(body["tool_choice"], json!({"type": "none"}));
    assert_eq!(body["tools"][0]["name"], "ls");
}

/// A finished answer gives its connection back to the pool: three calls to a keep-alive server
/// use one connection (each used to pay a new one, a TCP and TLS handshake to the real API).
/// The server ends each body a moment after `message_stop`, as a streaming server does, so the
/// body's end is read after the answer was taken.
#[tokio::test]
async fn calls_reuse_one_connection() {
    use axum::serve::ListenerExt;
    use futures::StreamExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::llm::{HttpTimeouts, Provider};

    let connections = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let listener = listener.tap_io(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    let answer: String = [start(), message_delta("end_turn", json!({"output_tokens": 1})), message_stop()]
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    let app = axum::Router::new().fallback(move || {
        let answer = answer.clone();
        async move {
            let end = async {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                Ok::<_, std::convert::Infallible>(": end\n\n".to_owned())
            };
            let chunks = futures::stream::once(async move { Ok(answer) }).chain(futures::stream::once(end));
            ([("content-type", "text/event-stream")], axum::body::Body::from_stream(chunks))
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let provider = super::AnthropicProvider::new(super::AnthropicConfig {
        base_url: format!("http://{address}"),
        api_key: "key".into(),
        timeouts: HttpTimeouts::default(),
        options: WireOptions::default(),
    });
    for _ in 0..3 {
        let mut stream = provider.stream(tool_loop(false)).await.unwrap();
        let mut finished = false;
        while !finished && let Some(event) = stream.next().await {
            finished = matches!(event.unwrap(), StreamEvent::Finished { .. });
        }
        assert!(finished);
        drop(stream);
        // Time for the body's end (20 ms away) to be read, many times over.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1, "calls opened connections of their own");
}
