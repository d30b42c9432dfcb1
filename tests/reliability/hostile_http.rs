//! Scenario 6: hostile HTTP clients at once against one deputy: 300 silent connections, a
//! JSON-RPC batch far over the cap and a body over the limit, and an SSE reader that stops
//! reading while the model streams 16 MiB. Memory stays bounded (VmRSS under a stated bound),
//! the turn still completes, and `/healthz` answers throughout. (`tests/suite/limits.rs` checks
//! each refusal's exact shape; this checks them together, under load, for memory.)

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::DEADLINE;
use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockResponse, anthropic};

/// The bound on deputy's resident memory this scenario asserts, in MiB. A 16 MiB answer alone
/// costs about 200 MiB (history, result, view, the store's write, the JSON of a read), with a
/// reader that keeps up or not.
///
/// The cost of a stalled reader against one that keeps up is printed, not asserted: two runs'
/// end-of-run RSS differ by allocator noise of −21 to +55 MiB, more than the 16 MiB a stalled
/// reader would cost if the stream were buffered whole, so such a comparison could neither
/// pass reliably nor catch that defect. The event channel's bound is proven deterministically by
/// `agent::events`' `f14_a_stalled_consumer_…` unit test.
const RSS_BOUND_MIB: u64 = 384;
/// The model's answer: 256 chunks of 64 KiB.
const CHUNKS: usize = 256;
const CHUNK: usize = 64 * 1024;

async fn healthz(deputy: &HttpDeputy) {
    let health =
        tokio::time::timeout(Duration::from_secs(30), deputy.http.get(deputy.url("/healthz")).send()).await;
    assert_eq!(health.expect("healthz answers in time").unwrap().status(), 200);
}

#[tokio::test]
async fn hostile_http_keeps_memory_bounded_and_healthz_answering() {
    tokio::time::timeout(DEADLINE, hostile_http()).await.expect("bounded");
}

async fn hostile_http() {
    let started = Instant::now();
    let (control_base, control_peak) = run(false).await;
    let (baseline, peak) = run(true).await;
    assert!(peak < RSS_BOUND_MIB * 1024, "deputy's RSS is {peak} KiB, over {RSS_BOUND_MIB} MiB");
    assert!(control_peak < RSS_BOUND_MIB * 1024, "with a reader that keeps up: {control_peak} KiB");
    report!(
        "reliability: hostile HTTP: 300 silent connections, a 40,000-entry batch (refused -32600), a 6 MiB body (413), an SSE reader stalled during a {} MiB answer: VmRSS {} MiB (baseline {} MiB, bound {RSS_BOUND_MIB} MiB; {} MiB from {} MiB with a reader that keeps up), /healthz answered throughout; {:.1} s",
        (CHUNKS * CHUNK) >> 20,
        peak / 1024,
        baseline / 1024,
        control_peak / 1024,
        control_base / 1024,
        started.elapsed().as_secs_f64()
    );
}

/// The whole scenario against a fresh deputy; returns its VmRSS (KiB) at start and at the end.
async fn run(stall: bool) -> (u64, u64) {
    let deputy = HttpDeputy::start(&[]).await;
    let baseline = deputy.rss_kib();
    let address = format!("127.0.0.1:{}", deputy.port);

    // 300 connections that never send a byte.
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    healthz(&deputy).await;

    // A batch of 40,000 entries (3 MiB, under the body limit) is refused whole before anything
    // runs; a 6 MiB body is refused by its size.
    let batch: Vec<Value> =
        (0..40_000).map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "session/list"})).collect();
    let (_, refused) = deputy.rpc(&Value::Array(batch)).await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let huge = vec![b' '; 6 << 20];
    // Its own connection: the server refuses before reading the body and closes the
    // connection, which a pooled client could otherwise reuse for the next request.
    let once = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().unwrap();
    let sent = once.post(deputy.url("/rpc")).header("content-type", "application/json").body(huge).send().await;
    match sent {
        Ok(response) => assert_eq!(response.status(), 413),
        // The server answered 413 and closed while the client was still writing the body: the
        // client sees the pipe break before it reads the answer. Refused either way, unread.
        Err(error) => assert!(error.is_request(), "{error}"),
    }
    healthz(&deputy).await;

    // A streamed turn whose reader stops after the first bytes while the model streams 16 MiB.
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ready"])));
    let id = deputy.create_session("hi").await;
    let chunk = "x".repeat(CHUNK);
    let chunks: Vec<&str> = (0..CHUNKS).map(|_| chunk.as_str()).collect();
    deputy.mock.push(MockResponse::sse(anthropic::text(&chunks)));
    let body = json!({"prompt": "flood me", "stream": true}).to_string();
    let mut reader = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "POST /v1/sessions/{id}/turns HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    reader.write_all(request.as_bytes()).await.unwrap();
    let mut first = [0u8; 4096];
    let n = reader.read(&mut first).await.unwrap();
    assert!(
        String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&first[..n])
    );
    // From here on the stalled reader reads nothing; the control reader drains everything. The
    // turn ends either way (its events are bounded).
    let (stalled, drain) = if stall {
        (Some(reader), None)
    } else {
        let drain = tokio::spawn(async move {
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink).await;
            sink.len()
        });
        (None, Some(drain))
    };
    let (_, read) =
        deputy.rest(None, reqwest::Method::GET, &format!("/v1/sessions/{id}?wait_ms=120000"), None).await;
    assert_eq!(
        (read["state"]["turns"].as_u64(), read["state"]["status"].as_str()),
        (Some(2), Some("idle")),
        "{read}"
    );
    let text_len = read["state"]["last_turn"]["text"].as_str().map(str::len);
    let mut summary = read["state"]["last_turn"].clone();
    summary["text"] = json!(text_len);
    assert_eq!(
        text_len,
        Some(CHUNKS * CHUNK),
        "stalled reader: {stall}; the turn's result has the whole text: {summary}"
    );
    healthz(&deputy).await;
    let peak = deputy.rss_kib();
    drop((silent, stalled));
    if let Some(drain) = drain {
        drain.abort();
    }
    healthz(&deputy).await;
    (baseline, peak)
}
