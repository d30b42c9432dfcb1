//! End to end: the `deputy` binary over stdio, driven by the rmcp client, its provider a
//! byte-accurate mock LLM server. Each test starts its own deputy and mock.

use std::time::Duration;

use rmcp::model::ProtocolVersion;
use serde_json::json;

use crate::common::deputy::{TestDeputy, stateless};
use crate::common::id_of;
use crate::common::mock_llm::{MockResponse, anthropic, openai};
use crate::common::scenarios::{cancelled_turn, capped_log_read};

#[tokio::test]
async fn serves_the_session_tools_with_schemas_under_its_own_name() {
    let deputy = TestDeputy::start().await;
    let info = deputy.client.peer_info().expect("server info");
    let server = info.server_info.as_ref().expect("serverInfo");
    assert_eq!((server.name.as_str(), server.version.as_str()), ("deputy", env!("CARGO_PKG_VERSION")));

    let tools = deputy.client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "session_create",
            "session_turn",
            "session_interrupt",
            "session_read",
            "session_list",
            "session_archive",
            "session_compact",
            "session_tool_output",
            "session_send",
            "session_events",
            "session_fork",
            "session_rewind"
        ]
    );
    for tool in &tools {
        let output = tool.output_schema.as_ref().expect("every tool declares its output");
        assert_eq!(output.get("type"), Some(&json!("object")), "{} output must be an object", tool.name);
        assert_eq!(tool.input_schema.get("type"), Some(&json!("object")));
        let read_only = tool.annotations.as_ref().and_then(|a| a.read_only_hint);
        let expected = matches!(
            tool.name.as_ref(),
            "session_read" | "session_list" | "session_tool_output" | "session_events"
        );
        assert_eq!(read_only, Some(expected), "{}", tool.name);
        assert!(tool.description.as_ref().is_some_and(|d| d.len() > 40));
    }
}

/// What a client's model sees of deputy on every turn when the client loads MCP tools eagerly:
/// each tool's name, description and input schema (compact JSON), from a real `tools/list`
/// (output schemas and annotations stay with the client). Printed, and bounded: 12 KiB for the
/// ten session tools (issue 33), 12.5 KiB since `session_fork` and `session_rewind` (issue 28)
/// joined them. A new tool or parameter has to fit, or something moves to the README, the
/// output schema or a resource.
#[tokio::test]
async fn the_tool_list_a_model_sees_fits_in_12_5_kib() {
    const BUDGET: usize = 12 * 1024 + 512;
    let deputy = TestDeputy::start().await;
    let tools = deputy.client.list_all_tools().await.unwrap();
    let mut total = 0;
    for tool in &tools {
        let description = tool.description.as_deref().unwrap_or_default();
        let schema = serde_json::to_string(&*tool.input_schema).unwrap();
        let bytes = tool.name.len() + description.len() + schema.len();
        eprintln!(
            "{:<22}{bytes:>6} bytes (description {}, input schema {})",
            tool.name,
            description.len(),
            schema.len()
        );
        total += bytes;
    }
    eprintln!("model-visible tool list: {total} bytes for {} tools (budget {BUDGET})", tools.len());
    assert!(total <= BUDGET, "the tools cost a model {total} bytes, over {BUDGET}");
}

#[tokio::test]
async fn the_whole_lifecycle_with_a_two_tool_call_turn() {
    let deputy = TestDeputy::start().await;
    std::fs::write(deputy.workspace.path().join("notes.txt"), "the answer is 42\n").unwrap();

    deputy.mock.push(MockResponse::sse(anthropic::text(&["Hello", " there"])));
    let created = deputy.ok("session_create", json!({"prompt": "hi", "labels": {"team": "qa"}})).await;
    assert_eq!(created["status"], "completed");
    assert_eq!(created["text"], "Hello there");
    assert_eq!(created["turn"], 1);
    let id = id_of(&created);

    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        Some("Let me look."),
        &[("toolu_1", "list_dir", json!({})), ("toolu_2", "read_file", json!({"path": "notes.txt"}))],
    )));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["It is 42."])));
    let turn = deputy.ok("session_turn", json!({"session_id": id, "prompt": "what does notes.txt say?"})).await;
    assert_eq!(
        (turn["text"].as_str(), turn["tool_calls"].as_u64(), turn["turn"].as_u64()),
        (Some("It is 42."), Some(2), Some(2))
    );

    // The third request carried both tool results back to the model, in order.
    let requests = deputy.mock.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].path, "/anthropic/v1/messages");
    let messages = requests[2].body["messages"].as_array().unwrap();
    let results = &messages.last().unwrap()["content"];
    assert_eq!(results[0]["tool_use_id"], "toolu_1");
    assert_eq!(results[0]["content"], "notes.txt");
    assert_eq!(results[1]["tool_use_id"], "toolu_2");
    assert_eq!(results[1]["content"], "the answer is 42\n");

    let read = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(read["state"]["turns"], 2);
    assert_eq!(read["state"]["status"], "idle");
    assert_eq!(read["state"]["labels"]["team"], "qa");
    assert_eq!(read["billing"]["tool_calls"], 2);
    assert!(read["billing"]["usage"]["input_tokens"].as_u64().unwrap() > 0);

    let list = deputy.ok("session_list", json!({})).await;
    assert_eq!(list["total"], 1);
    assert_eq!(list["sessions"][0]["session_id"], id.as_str());

    let (code, text) = deputy.err("session_interrupt", json!({"session_id": id})).await;
    assert_eq!(code, "SESSION_NOT_RUNNING");
    assert!(text.contains(&id), "the session id is in the text: {text}");

    let archived = deputy.ok("session_archive", json!({"session_id": id})).await;
    assert_eq!(archived, json!({"session_id": id, "archived": true}));
    assert_eq!(deputy.ok("session_list", json!({})).await["total"], 0);
    if cfg!(feature = "session-store") {
        // Archived sessions are read-only history in the store.
        let read = deputy.ok("session_read", json!({"session_id": id})).await;
        assert_eq!(read["state"]["status"], "archived");
        assert_eq!(read["state"]["last_turn"]["text"], "It is 42.");
        let (code, text) = deputy.err("session_turn", json!({"session_id": id, "prompt": "more"})).await;
        assert_eq!(code, "SESSION_NOT_FOUND");
        assert!(text.contains(&id) && text.contains("archived"), "{text}");
        let all = deputy.ok("session_list", json!({"include_archived": true})).await;
        assert_eq!((all["total"].as_u64(), all["sessions"][0]["status"].as_str()), (Some(1), Some("archived")));
    } else {
        let (code, text) = deputy.err("session_read", json!({"session_id": id})).await;
        assert_eq!(code, "SESSION_NOT_FOUND");
        assert!(text.contains(&id));
        let (code, _) = deputy.err("session_list", json!({"include_archived": true})).await;
        assert_eq!(code, "SESSION_PERSISTENCE_DISABLED");
    }
}

#[tokio::test]
async fn an_openai_compatible_model_works_end_to_end() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(openai::text(&["Bonjour"])));
    let created = deputy.ok("session_create", json!({"prompt": "salut", "model": "openai:gpt-test"})).await;
    assert_eq!(created["text"], "Bonjour");
    let request = &deputy.mock.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.body["model"], "gpt-test");
}

#[tokio::test]
async fn bad_arguments_are_invalid_request_and_the_server_keeps_serving() {
    let deputy = TestDeputy::start().await;
    for (tool, arguments) in [
        ("session_turn", json!({"session_id": 5, "prompt": "x"})),
        ("session_turn", json!({"session_id": "abc"})),
        ("session_create", json!({"prompt": "x", "budget": {"max_tokens": "lots"}})),
        ("session_create", json!({"prompt": "x", "unknown_field": true})),
        ("session_list", json!({"limit": -1})),
        ("session_create", json!({"prompt": "   "})),
        ("session_create", json!({"prompt": "x", "model": "no-provider-prefix"})),
    ] {
        let (code, text) = deputy.err(tool, arguments.clone()).await;
        assert_eq!(code, "INVALID_REQUEST", "{tool} {arguments}: {text}");
    }
    let (code, _) = deputy.err("session_read", json!({"session_id": "missing"})).await;
    assert_eq!(code, "SESSION_NOT_FOUND");
    assert_eq!(deputy.ok("session_list", json!({})).await["total"], 0);
}

#[tokio::test]
async fn a_provider_failure_is_agent_error_and_the_session_stays_usable() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ok"])));
    let id = id_of(&deputy.ok("session_create", json!({"prompt": "hi"})).await);

    // Content was forwarded, then the model failed for good (not retryable): the turn fails.
    let mut failing =
        vec![crate::common::mock_llm::anthropic::message_start(crate::common::mock_llm::usage(10, 1))];
    failing.extend(anthropic::text_block(0, &["partial answer"]));
    failing.push(anthropic::error("invalid_request_error", "the request is malformed"));
    deputy.mock.push(MockResponse::sse(failing));
    let (code, text) = deputy.err("session_turn", json!({"session_id": id, "prompt": "go"})).await;
    assert_eq!(code, "AGENT_ERROR");
    assert!(text.contains(&id), "{text}");
    assert_eq!(deputy.mock.requests().len(), 2, "a failure no retry can fix is never re-sent");

    deputy.mock.push(MockResponse::sse(anthropic::text(&["fine again"])));
    let turn = deputy.ok("session_turn", json!({"session_id": id, "prompt": "again"})).await;
    assert_eq!(turn["text"], "fine again");
}

/// A connection dropped mid-answer is a transient fault: the response is sent again and the
/// turn completes with the whole second answer, never the cut-off first one.
#[tokio::test]
async fn a_stream_cut_after_content_is_sent_again_and_the_turn_completes() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["partial answer that never ends"])).cut_after(4));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["the whole answer"])));
    let turn = deputy.ok("session_create", json!({"prompt": "hi"})).await;
    assert_eq!((turn["status"].as_str(), turn["text"].as_str()), (Some("completed"), Some("the whole answer")));
    let requests = deputy.mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body, "the same request, sent again");
}

#[tokio::test]
async fn two_concurrent_turns_one_is_busy() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ready"])));
    let id = id_of(&deputy.ok("session_create", json!({"prompt": "hi"})).await);

    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["slow", " answer"])), 3);
    let first = deputy.call("session_turn", json!({"session_id": id, "prompt": "one"}));
    let second = async {
        deputy.mock.wait_for_requests(2).await;
        let busy = deputy.err("session_turn", json!({"session_id": id, "prompt": "two"})).await;
        gate.open();
        busy
    };
    let (first, (code, text)) = tokio::join!(first, second);
    assert_eq!(code, "SESSION_BUSY");
    assert!(text.contains(&id));
    assert_eq!(first.structured_content.unwrap()["text"], "slow answer");
}

#[tokio::test]
async fn a_long_turn_answers_running_then_session_read_long_polls_it() {
    let deputy = TestDeputy::start().await;
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["finally", " done"])), 3);
    let running = deputy.ok("session_create", json!({"prompt": "long job", "wait_ms": 100})).await;
    assert_eq!(running["status"], "running");
    assert_eq!(running["turn"], 1);
    let id = id_of(&running);

    let now = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(now["state"]["status"], "running");

    let poll = deputy.ok("session_read", json!({"session_id": id, "wait_ms": 60000}));
    let release = async {
        deputy.mock.wait_for_requests(1).await;
        gate.open();
    };
    let (read, ()) = tokio::join!(poll, release);
    assert_eq!(read["state"]["status"], "idle");
    assert_eq!(read["state"]["last_turn"]["text"], "finally done");
    assert_eq!(read["state"]["last_turn"]["status"], "completed");
}

#[tokio::test]
async fn progress_notifications_report_a_long_turn() {
    let deputy = TestDeputy::start().await;
    let deltas = ["The ", "answer ", "is ", "coming ", "along ", "nicely."];
    deputy.mock.push(MockResponse::sse(anthropic::text(&deltas)).chunk_delay(Duration::from_millis(350)));
    let created = deputy.ok("session_create", json!({"prompt": "write slowly"})).await;
    assert_eq!(created["text"], deltas.concat());

    let progress = deputy.progress();
    assert!(!progress.is_empty(), "a turn of several seconds reports progress");
    assert!(progress.iter().any(|p| p.message.as_deref().is_some_and(|m| m.contains("answer"))), "{progress:?}");
    assert!(progress.windows(2).all(|w| w[0].progress < w[1].progress), "progress increases");
}

/// A caller that sends a progress token (rmcp's client sends one with every request, Claude
/// Code too) and names no `wait_ms` waits `PROGRESS_WAIT` (4 min), not 30 s: a turn of 31 s
/// comes back inline. The same call with a `wait_ms` keeps it (`running`, with the session).
#[tokio::test]
async fn a_progress_caller_gets_a_turn_longer_than_30_s_inline() {
    let deputy = TestDeputy::start().await;
    let longer = Duration::from_secs(31);
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["worth", " the wait"])), 3);
    let opener = tokio::spawn(async move {
        tokio::time::sleep(longer).await;
        gate.open();
    });
    let started = std::time::Instant::now();
    let created = deputy.ok("session_create", json!({"prompt": "long"})).await;
    assert!(started.elapsed() >= longer, "answered after {:?}", started.elapsed());
    assert_eq!((created["status"].as_str(), created["text"].as_str()), (Some("completed"), Some("worth the wait")));
    opener.await.unwrap();

    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["later"])), 3);
    let id = id_of(&created);
    let running = deputy.ok("session_turn", json!({"session_id": id, "prompt": "again", "wait_ms": 200})).await;
    assert_eq!((running["status"].as_str(), running["session_id"].as_str()), (Some("running"), Some(id.as_str())));
    gate.open();
}

#[tokio::test]
async fn a_cancelled_call_interrupts_its_turn() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ready"])));
    let id = id_of(&deputy.ok("session_create", json!({"prompt": "hi"})).await);

    cancelled_turn(&deputy.mock, deputy.client.peer(), &id, "long", "user pressed stop").await;

    let read = deputy.ok("session_read", json!({"session_id": id, "wait_ms": 30000})).await;
    assert_eq!(read["state"]["status"], "idle");
    assert_eq!(read["state"]["last_turn"]["status"], "cancelled");

    deputy.mock.push(MockResponse::sse(anthropic::text(&["after"])));
    let turn = deputy.ok("session_turn", json!({"session_id": id, "prompt": "next"})).await;
    assert_eq!(turn["text"], "after");
}

#[tokio::test]
async fn a_2026_07_28_client_gets_the_same_tools_and_results() {
    let deputy = TestDeputy::start_with(stateless()).await;
    let info = deputy.client.peer_info().expect("server info");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    assert_eq!(
        deputy.client.list_all_tools().await.unwrap().len(),
        deputy::surfaces::operation::mcp_tool_catalog().len()
    );

    deputy.mock.push(MockResponse::sse(anthropic::text(&["modern"])));
    let created = deputy.ok("session_create", json!({"prompt": "hi"})).await;
    assert_eq!(created["text"], "modern");
    let (code, _) = deputy.err("session_turn", json!({"session_id": "nope", "prompt": "x"})).await;
    assert_eq!(code, "SESSION_NOT_FOUND");
}

#[tokio::test]
async fn a_capped_tool_output_is_readable_and_compaction_answers_per_profile() {
    let deputy = TestDeputy::start().await;
    let log = capped_log_read(&deputy.mock, deputy.workspace.path());
    let created = deputy
        .ok("session_create", json!({"prompt": "read log.txt", "context": {"tool_output_cap_bytes": 2048}}))
        .await;
    let id = id_of(&created);
    let sent = &deputy.mock.requests()[1].body["messages"][2]["content"][0]["content"];
    assert!(sent.as_str().is_some_and(|text| text.len() < 2600 && text.contains("toolu_log")), "{sent}");

    let whole = deputy.ok("session_tool_output", json!({"session_id": id, "tool_use_id": "toolu_log"})).await;
    assert_eq!(whole["content"].as_str(), Some(log.as_str()));
    let (code, _) = deputy.err("session_tool_output", json!({"session_id": id, "tool_use_id": "nope"})).await;
    assert_eq!(code, "INVALID_REQUEST");

    deputy.mock.push(MockResponse::sse(anthropic::text(&["Goal: read the log. Done."])));
    if cfg!(feature = "session-compaction") {
        let compacted = deputy.ok("session_compact", json!({"session_id": id})).await;
        assert_eq!((compacted["compacted"].as_bool(), compacted["summarized"].as_bool()), (Some(true), Some(true)));
        let read = deputy.ok("session_read", json!({"session_id": id})).await;
        assert_eq!(read["state"]["context"]["compactions"], 1);
    } else {
        let (code, _) = deputy.err("session_compact", json!({"session_id": id})).await;
        assert_eq!(code, "SESSION_COMPACTION_DISABLED");
    }
}
