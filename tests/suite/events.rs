//! The session journal's feed on every surface, against the real binary: `session_events`
//! over MCP, `GET /v1/sessions/{id}/events` over REST and `session/events` over JSON-RPC page
//! the same events, and `follow=true` streams a live turn's events as Server-Sent Events.

use std::time::Duration;

use futures::StreamExt;
use rmcp::ClientLifecycleMode;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockResponse, anthropic};

/// Every event of a session, paged `limit` at a time with `page(after_seq)`.
async fn every_page<F, Fut>(limit: usize, mut page: F) -> Vec<Value>
where
    F: FnMut(Option<u64>) -> Fut,
    Fut: Future<Output = Value>,
{
    let mut events = Vec::new();
    let mut after = None;
    loop {
        let answer = page(after).await;
        let batch = answer["events"].as_array().unwrap_or_else(|| panic!("{answer}")).clone();
        assert!(batch.len() <= limit, "{answer}");
        if batch.is_empty() {
            return events;
        }
        after = answer["next_seq"].as_u64();
        events.extend(batch);
    }
}

async fn rpc(deputy: &HttpDeputy, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let answer: Value =
        deputy.http.post(deputy.url("/rpc")).json(&body).send().await.unwrap().json().await.unwrap();
    answer
}

#[tokio::test]
async fn session_events_pages_the_same_journal_over_mcp_rest_and_jsonrpc() {
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Hel", "lo"])));
    let id = deputy.create_session("hi").await;
    for (prompt, answer) in [("more", "Again"), ("last", "Done")] {
        deputy.mock.push(MockResponse::sse(anthropic::text(&[answer, "!"])));
        let (status, _) = deputy
            .rest(None, reqwest::Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": prompt})))
            .await;
        assert_eq!(status, 200);
    }

    let rest = every_page(2, |after| {
        let path = match after {
            Some(after) => format!("/v1/sessions/{id}/events?limit=2&after_seq={after}"),
            None => format!("/v1/sessions/{id}/events?limit=2"),
        };
        let deputy = &deputy;
        async move {
            let (status, body) = deputy.rest(None, reqwest::Method::GET, &path, None).await;
            assert_eq!(status, 200, "{body}");
            body
        }
    })
    .await;
    let jsonrpc = every_page(2, |after| {
        let (deputy, id) = (&deputy, id.clone());
        async move {
            rpc(deputy, "session/events", json!({"session_id": id, "after_seq": after, "limit": 2})).await["result"]
                .clone()
        }
    })
    .await;
    let client = deputy.mcp(ClientLifecycleMode::Initialize).await;
    let mcp = every_page(2, |after| {
        let (client, id) = (&client, id.clone());
        async move {
            let arguments = json!({"session_id": id, "after_seq": after, "limit": 2});
            let Value::Object(arguments) = arguments else { unreachable!() };
            let result = client
                .call_tool(CallToolRequestParams::new("session_events".to_owned()).with_arguments(arguments))
                .await
                .unwrap();
            result.structured_content.unwrap()
        }
    })
    .await;

    assert_eq!(rest, jsonrpc);
    assert_eq!(rest, mcp);
    let kinds: Vec<&str> = rest.iter().map(|event| event["event"]["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[..4], ["session_created", "prompt_received", "turn_started", "text_delta"], "{kinds:?}");
    assert_eq!(kinds.iter().filter(|kind| **kind == "turn_completed").count(), 3, "{kinds:?}");
    let seqs: Vec<u64> = rest.iter().map(|event| event["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..rest.len() as u64).collect::<Vec<_>>());
    let text: Vec<&str> = rest
        .iter()
        .filter(|event| event["event"]["type"] == "text_delta")
        .map(|event| event["event"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, ["Hello", "Again!", "Done!"], "deltas merged per block");
    assert!(rest.iter().all(|event| event["at"].is_string()), "events carry their timestamps");

    // The page size is bounded, and an unknown session is not found, on every surface.
    let (status, body) =
        deputy.rest(None, reqwest::Method::GET, &format!("/v1/sessions/{id}/events?limit=501"), None).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("INVALID_REQUEST")));
    let (status, _) = deputy.rest(None, reqwest::Method::GET, "/v1/sessions/nope/events", None).await;
    assert_eq!(status, 404);
    let answer = rpc(&deputy, "session/events", json!({"session_id": "nope"})).await;
    assert_eq!(answer["error"]["data"]["code"], "SESSION_NOT_FOUND", "{answer}");
}

#[tokio::test]
async fn follow_streams_a_live_turns_events() {
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["first"])));
    let id = deputy.create_session("hi").await;
    let (_, page) = deputy.rest(None, reqwest::Method::GET, &format!("/v1/sessions/{id}/events"), None).await;
    let last = page["next_seq"].as_u64().unwrap();

    let response = deputy
        .http
        .get(deputy.url(&format!("/v1/sessions/{id}/events?follow=true&after_seq={last}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.bytes_stream();

    deputy.mock.push(MockResponse::sse(anthropic::text(&["live", " answer"])));
    let (status, _) = deputy
        .rest(None, reqwest::Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": "go"})))
        .await;
    assert_eq!(status, 200);

    let mut text = String::new();
    let frames = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let chunk = body.next().await.expect("the stream goes on").unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
            if text.contains("event: turn_completed") {
                return text.clone();
            }
        }
    })
    .await
    .expect("the turn's events arrive");
    let events: Vec<Value> = frames
        .split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|line| line.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|event| event["event"]["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["prompt_received", "turn_started", "text_delta", "usage", "turn_completed"], "{frames}");
    assert_eq!(events[0]["seq"].as_u64(), Some(last + 1));
    assert_eq!(events[2]["event"]["text"], "live answer");
}
