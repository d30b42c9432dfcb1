//! Scenario 1: a thousand simultaneous `session_turn` over REST and two hundred over MCP stdio on
//! one session: exactly one wins the turn lock, every other caller gets `SESSION_BUSY` at once.

use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::DEADLINE;
use crate::common::deputy::{TestDeputy, error_of};
use crate::common::http_deputy::HttpDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{Gate, MockResponse, anthropic};

/// What one contender saw.
#[derive(Debug)]
enum Outcome {
    Won,
    Busy,
    Other(String),
}

/// Sorts outcomes as they arrive; once every contender but one is `Busy`, opens `gate` so the
/// winner's turn (held by the mock until then) can finish. Returns (winners, busy, others).
async fn tally(
    mut outcomes: mpsc::UnboundedReceiver<Outcome>,
    total: usize,
    gate: &Gate,
) -> (usize, usize, Vec<String>) {
    let (mut won, mut busy, mut other) = (0, 0, Vec::new());
    while won + busy + other.len() < total {
        match outcomes.recv().await.expect("every contender reports") {
            Outcome::Won => won += 1,
            Outcome::Busy => busy += 1,
            Outcome::Other(what) => other.push(what),
        }
        if busy + other.len() == total - 1 {
            gate.open();
        }
    }
    (won, busy, other)
}

/// Waits (within the deadline) for every contender's outcome; exactly one won and every other
/// one was told `SESSION_BUSY`. Returns (winners, busy).
async fn one_winner(outcomes: mpsc::UnboundedReceiver<Outcome>, total: usize, gate: &Gate) -> (usize, usize) {
    let (won, busy, other) = tokio::time::timeout(DEADLINE, tally(outcomes, total, gate)).await.expect("bounded");
    assert_eq!(
        (won, busy, other.as_slice()),
        (1, total - 1, &[][..] as &[String]),
        "one winner, the rest SESSION_BUSY"
    );
    (won, busy)
}

#[tokio::test]
async fn busy_1000_rest_turns_on_one_session_have_exactly_one_winner() {
    const N: usize = 1000;
    // Every contender holds a connection at once: lift the connection cap above N.
    let deputy = HttpDeputy::start(&["--max-connections", "2000"]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ready"])));
    let id = deputy.create_session("hi").await;
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["the", " winner"])), 2);

    let started = Instant::now();
    let (report, outcomes) = mpsc::unbounded_channel();
    let url = deputy.url(&format!("/v1/sessions/{id}/turns"));
    for n in 0..N {
        let (http, url, report) = (deputy.http.clone(), url.clone(), report.clone());
        tokio::spawn(async move {
            let body = json!({"prompt": format!("contender {n}"), "wait_ms": 120_000});
            let outcome = match http.post(&url).json(&body).send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let body: Value = response.json().await.unwrap_or(Value::Null);
                    match (status, body["code"].as_str(), body["status"].as_str()) {
                        (200, _, Some("completed")) => Outcome::Won,
                        (409, Some("SESSION_BUSY"), _) => Outcome::Busy,
                        _ => Outcome::Other(format!("{status} {body}")),
                    }
                }
                Err(err) => Outcome::Other(err.to_string()),
            };
            report.send(outcome).unwrap();
        });
    }
    let (won, busy) = one_winner(outcomes, N, &gate).await;
    let elapsed = started.elapsed();

    let (_, read) = deputy.rest(None, reqwest::Method::GET, &format!("/v1/sessions/{id}"), None).await;
    assert_eq!((read["state"]["turns"].as_u64(), read["state"]["status"].as_str()), (Some(2), Some("idle")));
    assert_eq!(deputy.mock.requests().len(), 2, "only the winner reached the model");
    report!(
        "reliability: busy: {N} REST attempts, {won} winner, {busy} SESSION_BUSY, {:.1} s",
        elapsed.as_secs_f64()
    );
}

#[tokio::test]
async fn busy_200_mcp_stdio_turns_on_one_session_have_exactly_one_winner() {
    const N: usize = 200;
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ready"])));
    let created = deputy.ok("session_create", json!({"prompt": "hi"})).await;
    let id = id_of(&created);
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["the", " winner"])), 2);

    let started = Instant::now();
    let (report, outcomes) = mpsc::unbounded_channel();
    for n in 0..N {
        let (peer, id, report) = (deputy.client.peer().clone(), id.clone(), report.clone());
        tokio::spawn(async move {
            let arguments = json!({"session_id": id, "prompt": format!("contender {n}"), "wait_ms": 120_000});
            let Value::Object(arguments) = arguments else { unreachable!() };
            let request = rmcp::model::CallToolRequestParams::new("session_turn").with_arguments(arguments);
            let outcome = match peer.call_tool(request).await {
                Ok(result) if result.is_error == Some(true) => match error_of(&result).0.as_str() {
                    "SESSION_BUSY" => Outcome::Busy,
                    code => Outcome::Other(code.to_owned()),
                },
                Ok(result) => match result.structured_content.as_ref().and_then(|c| c["status"].as_str()) {
                    Some("completed") => Outcome::Won,
                    status => Outcome::Other(format!("status {status:?}")),
                },
                Err(err) => Outcome::Other(err.to_string()),
            };
            report.send(outcome).unwrap();
        });
    }
    let (won, busy) = one_winner(outcomes, N, &gate).await;
    let elapsed = started.elapsed();
    let read = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!((read["state"]["turns"].as_u64(), read["state"]["status"].as_str()), (Some(2), Some("idle")));
    report!(
        "reliability: busy: {N} MCP stdio attempts, {won} winner, {busy} SESSION_BUSY, {:.1} s",
        elapsed.as_secs_f64()
    );
}
