//! The OpenAI adapter's pure parts: the stream decoder fed chunk by chunk and the request
//! body, without a server. The wire end to end is in `tests/suite/provider_*.rs`.

use serde_json::{Value, json};

use super::request::*;
use super::stream::*;
use super::*;
use crate::llm::http::WireDecoder;
use crate::llm::options::{PromptCache, StreamUsage, TokenLimitField, WireOptions};
use crate::llm::sse::SseEvent;
use crate::llm::{
    ContentBlock, LlmError, LlmErrorKind, Message, ModelRequest, Role, StopReason, StreamEvent, ToolSpec, Usage,
};

/// The body a request goes out with, as JSON.
fn request_body(request: &ModelRequest, max_tokens_field: &str) -> Value {
    serde_json::from_slice(&encode(request, &options_for(max_tokens_field), false).unwrap()).unwrap()
}

/// The options naming the token limit `max_tokens_field`, caching on, usage requested.
fn options_for(max_tokens_field: &str) -> WireOptions {
    let field = match max_tokens_field {
        "max_tokens" => TokenLimitField::MaxTokens,
        _ => TokenLimitField::MaxCompletionTokens,
    };
    WireOptions { token_limit_field: Some(field), ..WireOptions::default() }
}

/// The body with the provider's options as given, for a server at another host than OpenAI's.
fn body_with(request: &ModelRequest, options: &WireOptions) -> Value {
    serde_json::from_slice(&encode(request, options, false).unwrap()).unwrap()
}

fn feed(chunks: &[Value], eof: bool) -> (Vec<StreamEvent>, Option<LlmError>) {
    let mut decoder = StreamDecoder::default();
    let mut out = Vec::new();
    for chunk in chunks {
        let data = match chunk {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if let Err(err) = decoder.on_event(SseEvent { event: None, data }, &mut out) {
            return (out, Some(err));
        }
    }
    if eof && let Err(err) = decoder.on_eof(&mut out) {
        return (out, Some(err));
    }
    (out, None)
}

fn delta(delta: Value) -> Value {
    json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}], "usage": null})
}

fn finish(reason: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

fn usage_value() -> Value {
    json!({"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 40}})
}

const WANT_USAGE: Usage =
    Usage { input_tokens: 60, output_tokens: 7, cache_read_input_tokens: 40, cache_creation_input_tokens: 0 };

#[test]
fn usage_chunk_variants() {
    for usage_chunk in [
        json!({"choices": [], "usage": usage_value()}),
        json!({"choices": null, "usage": usage_value()}),
        json!({"usage": usage_value()}),
    ] {
        let (events, err) =
            feed(&[delta(json!({"content": "hi"})), finish("stop"), usage_chunk, json!("[DONE]")], false);
        assert_eq!(err, None);
        assert_eq!(
            events,
            vec![
                StreamEvent::TextDelta("hi".into()),
                StreamEvent::Usage(WANT_USAGE),
                StreamEvent::Finished { stop_reason: StopReason::EndTurn }
            ]
        );
    }
    let mut on_finish = finish("length");
    on_finish["usage"] = usage_value();
    let (events, err) = feed(&[on_finish, json!("[DONE]")], false);
    assert_eq!(err, None);
    assert_eq!(
        events,
        vec![StreamEvent::Usage(WANT_USAGE), StreamEvent::Finished { stop_reason: StopReason::MaxTokens }]
    );
}

#[test]
fn tool_calls_without_ids_or_index_get_synthesized_ids() {
    let (events, err) = feed(
        &[
            delta(json!({"tool_calls": [{"function": {"name": "a", "arguments": {"x": 1}}}]})),
            delta(json!({"tool_calls": [{"id": "given", "function": {"name": "b", "arguments": "{}"}}]})),
            finish("stop"),
            json!("[DONE]"),
        ],
        false,
    );
    assert_eq!(err, None);
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallEnd { id, name, input } => Some((id.clone(), name.clone(), input.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 2);
    assert!(ends[0].0.starts_with("call_") && ends[0].1 == "a" && ends[0].2 == json!({"x": 1}));
    assert_eq!(ends[1], ("given".into(), "b".into(), json!({})));
    // `stop` with tool calls is reported as tool use.
    assert_eq!(events.last(), Some(&StreamEvent::Finished { stop_reason: StopReason::ToolUse }));
}

#[test]
fn truncated_call_is_dropped_on_length_but_invalid_on_tool_calls() {
    let call =
        delta(json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "n", "arguments": "{\"a"}}]}));
    let (events, err) = feed(&[call.clone(), finish("length"), json!("[DONE]")], false);
    assert_eq!(err, None);
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::ToolCallEnd { .. })));
    let (_, err) = feed(&[call, finish("tool_calls")], false);
    assert_eq!(err.unwrap().kind, LlmErrorKind::Decode);
}

#[test]
fn late_name_defers_the_start() {
    let (events, err) = feed(
        &[
            delta(json!({"tool_calls": [{"index": 0, "id": "c", "function": {"arguments": "{\"a\""}}]})),
            delta(json!({"tool_calls": [{"index": 0, "function": {"name": "n", "arguments": ":1}"}}]})),
            finish("tool_calls"),
            json!("[DONE]"),
        ],
        false,
    );
    assert_eq!(err, None);
    assert_eq!(
        events[..3],
        [
            StreamEvent::ToolCallStart { id: "c".into(), name: "n".into() },
            StreamEvent::ToolCallDelta { id: "c".into(), fragment: "{\"a\":1}".into() },
            StreamEvent::ToolCallEnd { id: "c".into(), name: "n".into(), input: json!({"a": 1}) },
        ]
    );
}

#[test]
fn truncation_and_errors() {
    let (_, err) = feed(&[delta(json!({"content": "x"}))], true);
    assert_eq!(err.unwrap().kind, LlmErrorKind::StreamBroken);
    let (_, err) = feed(&[delta(json!({"content": "x"})), json!("[DONE]")], false);
    assert_eq!(err.unwrap().kind, LlmErrorKind::StreamBroken);
    let cases = [
        (json!({"message": "m", "type": "server_error"}), LlmErrorKind::Server),
        (json!({"message": "m", "code": "rate_limit_exceeded", "type": "requests"}), LlmErrorKind::RateLimited),
        (
            json!({"message": "m", "code": "context_length_exceeded", "type": "invalid_request_error"}),
            LlmErrorKind::ContextOverflow,
        ),
        (json!({"message": "m", "type": "whatever"}), LlmErrorKind::Server),
        (json!("plain string"), LlmErrorKind::Server),
    ];
    for (error, kind) in cases {
        let (_, err) = feed(&[delta(json!({"content": "x"})), json!({"error": error})], false);
        assert_eq!(err.unwrap().kind, kind);
    }
}

#[test]
fn request_body_splits_tool_results_and_text() {
    let request = ModelRequest {
        tool_choice: Default::default(),
        reasoning: None,
        cache_key: None,
        model: "m".into(),
        system: Some("sys".into()),
        messages: vec![
            Message::user_text("list"),
            Message::assistant(vec![
                ContentBlock::ToolUse { id: "a".into(), name: "ls".into(), input: json!({"p": 1}) },
                ContentBlock::ToolUse { id: "b".into(), name: "ls".into(), input: json!({}) },
            ]),
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::Text { text: "and now?".into() },
                    ContentBlock::ToolResult { tool_use_id: "a".into(), content: "one".into(), is_error: false },
                    ContentBlock::ToolResult { tool_use_id: "b".into(), content: "boom".into(), is_error: true },
                ],
            },
        ]
        .into(),
        tools: ToolSpec::list([ToolSpec {
            name: "ls".into(),
            description: "list".into(),
            input_schema: json!({"type":"object"}).into(),
        }]),
        max_tokens: 64,
        output: None,
        retries: Default::default(),
        encoded: Default::default(),
    };
    let body = request_body(&request, "max_tokens");
    assert_eq!(
        body,
        json!({
            "model": "m", "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 64,
            "tools": [{"type":"function","function":{"name":"ls","description":"list","parameters":{"type":"object"}}}],
            "messages": [
                {"role":"system","content":"sys"},
                {"role":"user","content":"list"},
                {"role":"assistant","content":null,"tool_calls":[
                    {"id":"a","type":"function","function":{"name":"ls","arguments":"{\"p\":1}"}},
                    {"id":"b","type":"function","function":{"name":"ls","arguments":"{}"}}
                ]},
                {"role":"tool","tool_call_id":"a","content":"one"},
                {"role":"tool","tool_call_id":"b","content":"Error: boom"},
                {"role":"user","content":"and now?"}
            ]
        })
    );
}

#[test]
fn structured_output_is_a_response_format_or_an_instruction_after_the_system_prompt() {
    let request = |schema: Value| ModelRequest {
        tool_choice: Default::default(),
        reasoning: None,
        cache_key: None,
        model: "m".into(),
        system: Some("sys".into()),
        messages: vec![Message::user_text("hi")].into(),
        tools: vec![].into(),
        max_tokens: 64,
        output: Some(crate::llm::OutputFormat::new(std::sync::Arc::new(schema))),
        retries: Default::default(),
        encoded: Default::default(),
    };
    let closed = json!({"type": "object", "additionalProperties": false, "required": ["a"],
                        "properties": {"a": {"type": "integer"}}});
    let body = request_body(&request(closed.clone()), "max_tokens");
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "deputy_final_answer", "schema": closed, "strict": true}})
    );
    assert_eq!(body["messages"][0], json!({"role": "system", "content": "sys"}));

    let list = json!({"type": "array", "items": {"type": "integer"}});
    let body = request_body(&request(list.clone()), "max_tokens");
    assert!(body.get("response_format").is_none());
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("sys\n\nYour final answer must be only a JSON value"), "{system}");
    assert!(system.ends_with(&list.to_string()), "{system}");
}

#[test]
fn official_host_uses_max_completion_tokens() {
    let config = |url: &str| OpenAiConfig {
        base_url: url.into(),
        api_key: None,
        timeouts: HttpTimeouts::default(),
        options: Default::default(),
    };
    assert!(OpenAiProvider::new(config("https://api.openai.com/v1")).official);
    assert!(!OpenAiProvider::new(config("http://127.0.0.1:11434/v1/")).official);
    let request = ModelRequest { model: "gpt-4o".into(), max_tokens: 64, ..ModelRequest::default() };
    let field_of = |request: &ModelRequest, official: bool| {
        let body: Value =
            serde_json::from_slice(&encode(request, &WireOptions::default(), official).unwrap()).unwrap();
        let fields = ["max_tokens", "max_completion_tokens"].map(|name| body.get(name).is_some());
        assert_eq!(fields.iter().filter(|present| **present).count(), 1, "{body}");
        if fields[0] { "max_tokens" } else { "max_completion_tokens" }
    };
    assert_eq!(field_of(&request, true), "max_completion_tokens");
    assert_eq!(field_of(&request, false), "max_tokens");
    // Reasoning models reject `max_tokens` on every host (Azure included).
    for model in ["gpt-5", "gpt-5.1-mini", "o3", "o4-mini", "azure/o1-preview"] {
        let reasoning = ModelRequest { model: model.into(), ..request.clone() };
        assert_eq!(field_of(&reasoning, false), "max_completion_tokens", "{model}");
    }
    for model in ["gpt-4o", "omni-local", "llama3"] {
        assert_eq!(field_of(&ModelRequest { model: model.into(), ..request.clone() }, false), "max_tokens");
    }
}

#[test]
fn the_body_goes_out_with_its_keys_sorted() {
    // As a JSON tree is written (serde_json's order), which bodies have always been: parsing
    // the body and writing it again changes no byte.
    let request = |schema: Option<Value>| ModelRequest {
        tool_choice: Default::default(),
        reasoning: None,
        cache_key: None,
        model: "m".into(),
        system: Some("Say \"hi\"\n\tthen stop.".into()),
        messages: vec![
            Message::user_text("hi"),
            Message::assistant(vec![
                ContentBlock::Text { text: "é \u{1}".into() },
                ContentBlock::Text { text: String::new() },
                ContentBlock::Text { text: "two".into() },
                ContentBlock::ToolUse {
                    id: "a".into(),
                    name: "ls".into(),
                    input: json!({"p": "\"q\"", "n": [1, 2.5]}),
                },
            ]),
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::Text { text: "and now?".into() },
                    ContentBlock::ToolResult { tool_use_id: "a".into(), content: "bo\"om".into(), is_error: true },
                ],
            },
            Message::assistant(vec![]),
        ]
        .into(),
        tools: ToolSpec::list([ToolSpec {
            name: "ls".into(),
            description: "list".into(),
            input_schema: json!({"type":"object"}).into(),
        }]),
        max_tokens: 64,
        output: schema.map(|schema| crate::llm::OutputFormat::new(std::sync::Arc::new(schema))),
        retries: Default::default(),
        encoded: Default::default(),
    };
    let closed = json!({"type": "object", "additionalProperties": false, "required": ["a"],
                        "properties": {"a": {"type": "integer"}}});
    let list = json!({"type": "array", "items": {"type": "integer"}});
    for request in [request(None), request(Some(closed)), request(Some(list))] {
        for field in ["max_tokens", "max_completion_tokens"] {
            let request = ModelRequest { cache_key: Some("ses_1".into()), ..request.clone() };
            let body = encode(&request, &options_for(field), false).unwrap();
            let tree: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(String::from_utf8_lossy(&body), serde_json::to_string(&tree).unwrap());
        }
    }
}

/// A tool loop in progress on a reasoning server: the model reasoned, called `ls`, and the
/// result is the last message.
fn tool_loop() -> ModelRequest {
    ModelRequest {
        model: "deepseek-reasoner".into(),
        messages: vec![
            Message::user_text("list"),
            Message::assistant(vec![
                ContentBlock::Reasoning { text: "look first".into() },
                ContentBlock::ToolUse { id: "a".into(), name: "ls".into(), input: json!({}) },
            ]),
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
        cache_key: Some("ses_1".into()),
        ..ModelRequest::default()
    }
}

#[test]
fn reasoning_goes_back_on_its_assistant_message_and_effort_is_asked_for() {
    let body = body_with(&tool_loop(), &WireOptions::default());
    assert_eq!(body["messages"][1]["reasoning_content"], "look first");
    assert!(body.get("reasoning_effort").is_none());
    let reasoning = Some(crate::llm::Reasoning { effort: None, budget_tokens: Some(2048) });
    let body = body_with(&ModelRequest { reasoning, ..tool_loop() }, &WireOptions::default());
    assert_eq!((body["reasoning_effort"].as_str(), body["max_tokens"].as_u64()), (Some("low"), Some(1000 + 2048)));
}

#[test]
fn provider_options_switch_the_cache_key_and_stream_usage() {
    let body = body_with(&tool_loop(), &WireOptions::default());
    assert_eq!(
        (body["prompt_cache_key"].as_str(), &body["stream_options"]),
        (Some("ses_1"), &json!({"include_usage": true}))
    );
    let off = WireOptions {
        prompt_cache: PromptCache::Off,
        stream_usage: StreamUsage::Omitted,
        ..WireOptions::default()
    };
    let body = body_with(&tool_loop(), &off);
    assert!(body.get("prompt_cache_key").is_none() && body.get("stream_options").is_none(), "{body}");
    let summary = body_with(&ModelRequest { tool_choice: crate::llm::ToolChoice::Forbidden, ..tool_loop() }, &off);
    assert_eq!(
        (summary["tool_choice"].as_str(), summary["tools"][0]["function"]["name"].as_str()),
        (Some("none"), Some("ls"))
    );
}

#[test]
fn a_reasoning_delta_stream_becomes_one_block_before_the_calls() {
    let (events, err) = feed(
        &[
            delta(json!({"reasoning_content": "look "})),
            delta(json!({"reasoning_content": "first"})),
            delta(json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "ls", "arguments": "{}"}}]})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!("[DONE]"),
        ],
        false,
    );
    assert_eq!(err, None);
    let reasoning = ContentBlock::Reasoning { text: "look first".into() };
    let at = events.iter().position(|event| *event == StreamEvent::Reasoning(reasoning.clone())).unwrap();
    let call = events.iter().position(|event| matches!(event, StreamEvent::ToolCallStart { .. })).unwrap();
    assert!(at < call, "{events:?}");
    assert!(!events.iter().any(|event| matches!(event, StreamEvent::TextDelta(_))));
}
