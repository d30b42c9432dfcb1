//! Bounds of the HTTP surface (issue 12, security review F4, F5), against the built binary.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::common::http_deputy::HttpDeputy;

/// Long enough for anything that should be prompt; a test fails rather than hang.
const LIMIT: Duration = Duration::from_secs(30);

async fn rpc(deputy: &HttpDeputy, body: &Value) -> Value {
    let response = deputy.http.post(deputy.url("/rpc")).json(body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// F4: a batch's entries all ran at once, with no cap on their number.
#[tokio::test]
async fn f4_oversized_jsonrpc_batch_is_refused_whole() {
    let deputy = HttpDeputy::start(&[]).await;
    let list = |id: usize| json!({"jsonrpc": "2.0", "id": id, "method": "session/list"});

    let at_the_cap: Vec<Value> = (0..100).map(list).collect();
    let answers = rpc(&deputy, &Value::Array(at_the_cap)).await;
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 100);
    assert!(answers.iter().enumerate().all(|(n, answer)| answer["id"] == n && answer["result"].is_object()));

    let over: Vec<Value> = (0..101).map(list).collect();
    let refused = rpc(&deputy, &Value::Array(over)).await;
    assert_eq!((refused["error"]["code"].as_i64(), &refused["id"]), (Some(-32600), &Value::Null), "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("at most 100") && message.contains("101"), "{message}");
    assert_eq!(deputy.mock.requests().len(), 0, "no entry of the refused batch ran");
}

/// F5: connections that send nothing held a task and a descriptor for ever, before the guard.
/// `/healthz` answers while 300 of them are open, and a silent connection is closed once the
/// header-read timeout has passed.
#[tokio::test]
async fn f5_healthz_answers_while_300_silent_connections_are_held() {
    let deputy = HttpDeputy::start(&["--header-read-timeout-secs", "2"]).await;
    let address = format!("127.0.0.1:{}", deputy.port);
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    let half_header = {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stream, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .unwrap();
        stream
    };

    let health = tokio::time::timeout(LIMIT, deputy.http.get(deputy.url("/healthz")).send()).await;
    assert_eq!(health.expect("healthz answers in time").unwrap().status(), 200);

    // The server hangs up on both kinds of silence: read() sees the end of the stream.
    // (A refusal the server may write first is read past.)
    for (what, mut stream) in [("silent", silent.pop().unwrap()), ("half a header", half_header)] {
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(LIMIT, stream.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "the server did not close a connection that sent {what}");
    }
    drop(silent);
    let health = tokio::time::timeout(LIMIT, deputy.http.get(deputy.url("/healthz")).send()).await;
    assert_eq!(health.unwrap().unwrap().status(), 200);
}
