//! The Anthropic stream decoder fed event by event, without a server (the request body's tests
//! are in `request_tests`). The wire end to end is in `tests/suite/provider_*.rs`.

use serde_json::{Value, json};

use super::stream::*;
use crate::llm::http::WireDecoder;
use crate::llm::sse::SseEvent;
use crate::llm::{ContentBlock, LlmError, LlmErrorKind, StopReason, StreamEvent, Usage};

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

pub(super) fn start() -> (&'static str, Value) {
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

pub(super) fn message_delta(reason: &str, usage: Value) -> (&'static str, Value) {
    ("message_delta", json!({"type":"message_delta","delta":{"stop_reason":reason},"usage":usage}))
}

pub(super) fn message_stop() -> (&'static str, Value) {
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
