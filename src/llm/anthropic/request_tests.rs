//! The Anthropic request body, without a server, and the connection a finished answer gives
//! back (the stream decoder's tests are in `tests`). The wire end to end is in
//! `tests/suite/provider_*.rs`.

use serde::Deserialize;
use serde_json::{Value, json};

use super::request::*;
use super::stream::*;
use super::tests::{message_delta, message_stop, start};
use crate::llm::options::{CacheTtl, PromptCache, WireOptions};
use crate::llm::{ContentBlock, Message, ModelRequest, Role, StreamEvent, ToolSpec};

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
        encoded: Default::default(),
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
        encoded: Default::default(),
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
        encoded: Default::default(),
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
