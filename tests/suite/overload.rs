//! Graceful overload through the built binary: beyond `--max-connections`, a connection is
//! answered `503 OVERLOADED` with `Retry-After` at once (never a silent close after a timeout),
//! and a burst of 1,000 turns on one session at the default cap answers every request.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockResponse, anthropic};

#[tokio::test]
async fn beyond_the_connection_cap_a_request_is_answered_503_with_retry_after() {
    let deputy = HttpDeputy::start(&["--max-connections", "2"]).await;
    // Two connections that never finish their request header hold both places.
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", deputy.port)).await.unwrap();
        stream.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        holders.push(stream);
    }
    // Accepted in order: the third connection is beyond the cap.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let response = reqwest::Client::new().get(deputy.url("/healthz")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "OVERLOADED", "{body}");
    eprintln!("refused in {:?}", started.elapsed());

    drop(holders);
    let healthy = async {
        loop {
            let response = reqwest::Client::new().get(deputy.url("/healthz")).send().await.unwrap();
            if response.status().as_u16() == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), healthy).await.expect("served again once places are free");
}

#[tokio::test]
async fn a_burst_of_a_thousand_turns_on_one_session_is_answered_whole() {
    raise_open_files();
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ready"])));
    let id = deputy.create_session("first").await;
    // The winning turn is held until every request has its answer.
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["won"])), 1);
    // A client each: a connection each, as a burst of separate callers (built beforehand, so
    // the burst is the requests, not the clients' setup).
    let clients: Vec<reqwest::Client> = (0..1000)
        .map(|_| reqwest::Client::builder().pool_max_idle_per_host(0).no_proxy().build().unwrap())
        .collect();
    let started = Instant::now();
    let url = deputy.url(&format!("/v1/sessions/{id}/turns"));
    let requests = clients.into_iter().enumerate().map(|(index, client)| {
        let url = url.clone();
        tokio::spawn(async move {
            let response = client.post(url).json(&json!({"prompt": format!("turn {index}"), "wait_ms": 0})).send();
            match tokio::time::timeout(Duration::from_secs(60), response).await {
                Ok(Ok(response)) => response.status().as_u16(),
                Ok(Err(error)) => panic!("request {index} failed: {error:?}"),
                Err(_) => panic!("request {index} left hanging for 60 s"),
            }
        })
    });
    let statuses = futures::future::join_all(requests).await;
    let elapsed = started.elapsed();
    gate.open();
    let mut counts = std::collections::BTreeMap::new();
    for status in statuses {
        *counts.entry(status.unwrap()).or_insert(0) += 1;
    }
    eprintln!("1000 turns answered in {elapsed:?}: {counts:?}");
    assert_eq!(counts.get(&200), Some(&1), "one winner: {counts:?}");
    assert!(counts.keys().all(|status| [200, 409, 429, 503].contains(status)), "{counts:?}");
}

/// Up to the hard limit: a thousand client sockets beside the server's.
fn raise_open_files() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max.min(65_536), rlim_max: limit.rlim_max };
            libc::setrlimit(libc::RLIMIT_NOFILE, &raised);
        }
    }
}
