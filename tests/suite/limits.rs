//! Bounds of the HTTP surface (issue 12, security review F4, F5), against the built binary.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::common::http_deputy::HttpDeputy;

/// Long enough for anything that should be prompt; a test fails rather than hang.
const LIMIT: Duration = Duration::from_secs(30);

/// F4: a batch's entries all ran at once, with no cap on their number.
#[tokio::test]
async fn f4_oversized_jsonrpc_batch_is_refused_whole() {
    let deputy = HttpDeputy::start(&[]).await;
    let list = |id: usize| json!({"jsonrpc": "2.0", "id": id, "method": "session/list"});

    let at_the_cap: Vec<Value> = (0..100).map(list).collect();
    let (status, answers) = deputy.rpc(&Value::Array(at_the_cap)).await;
    assert_eq!(status, 200);
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 100);
    assert!(answers.iter().enumerate().all(|(n, answer)| answer["id"] == n && answer["result"].is_object()));

    let over: Vec<Value> = (0..101).map(list).collect();
    let (status, refused) = deputy.rpc(&Value::Array(over)).await;
    assert_eq!(status, 200);
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

/// A stdio MCP server that records its pid and its child's (`sleep`, in its process group) in
/// `PIDFILE`, and ignores stdin's end, as a careless server would.
const STUBBORN_SERVER: &str = r#"
import json, os, subprocess, sys, time
child = subprocess.Popen(["sleep", "600"])
with open(os.environ["PIDFILE"], "w") as f:
    f.write(f"{os.getpid()} {child.pid}\n")
def send(o):
    sys.stdout.write(json.dumps(o) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    mid, method = msg.get("id"), msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "stubborn", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [{"name": "noop", "description": "noop",
              "inputSchema": {"type": "object"}}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
time.sleep(600)
"#;

/// Whether `pid` runs (a zombie waiting to be reaped counts as gone).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

/// F15: when deputy was SIGKILLed, its guards never ran: a stdio MCP server that ignores the
/// end of its stdin, and every server's own children, stayed. The server now dies with deputy
/// (`PR_SET_PDEATHSIG`) and a watcher in its process group kills the rest.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn f15_a_sigkilled_deputy_leaves_no_mcp_server_or_grandchild_behind() {
    use crate::common::deputy::TestDeputy;
    use crate::common::mock_llm::{MockResponse, anthropic};

    let dir = tempfile::tempdir().unwrap();
    let script = crate::common::file_in(dir.path(), "stubborn.py", STUBBORN_SERVER);
    let pidfile = dir.path().join("pids");
    let config = format!(
        // Out of the sandbox (the operator's opt-out): it records its pids in the test's dir.
        "[mcp_servers.stubborn]\ncommand = \"python3\"\nargs = [{:?}]\nenv = {{ PIDFILE = {:?} }}\nsandbox = false\n",
        script.to_string_lossy(),
        pidfile.to_string_lossy()
    );
    let mut deputy = TestDeputy::start_with_config(&config).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ok"])));
    let created =
        deputy.ok("session_create", serde_json::json!({"prompt": "hi", "mcp_servers": ["stubborn"]})).await;
    assert_eq!(created["text"], "ok");
    let pids: Vec<u32> =
        std::fs::read_to_string(&pidfile).unwrap().split_whitespace().map(|pid| pid.parse().unwrap()).collect();
    assert!(pids.len() == 2 && pids.iter().all(|&pid| running(pid)), "{pids:?}");

    deputy.child.start_kill().unwrap();
    deputy.child.wait().await.unwrap();
    // No event tells when the kernel has delivered the signals: poll, with a deadline.
    let deadline = tokio::time::Instant::now() + LIMIT;
    while pids.iter().any(|&pid| running(pid)) {
        assert!(tokio::time::Instant::now() < deadline, "still running after deputy died: {pids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// F10 through the binary: `--max-mcp-sessions 1` holds one legacy (2025-11-25) MCP transport
/// session; the next `initialize` is refused with the reason, and a closed session frees its
/// place.
#[tokio::test]
async fn f10_max_mcp_sessions_caps_legacy_mcp_sessions_end_to_end() {
    let deputy = HttpDeputy::start(&["--max-mcp-sessions", "1"]).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "limits", "version": "1"}}});
    let open = || {
        deputy
            .http
            .post(deputy.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
    };
    let first = tokio::time::timeout(LIMIT, open()).await.expect("bounded").unwrap();
    assert_eq!(first.status(), 200);
    let session = first.headers().get("mcp-session-id").expect("a legacy session id").to_str().unwrap().to_owned();
    let second = tokio::time::timeout(LIMIT, open()).await.expect("bounded").unwrap();
    assert_eq!(second.status(), 500);
    assert!(second.text().await.unwrap().contains("its limit"), "the refusal says why");

    let closed = deputy.http.delete(deputy.url("/mcp")).header("mcp-session-id", &session).send().await.unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    let third = tokio::time::timeout(LIMIT, open()).await.expect("bounded").unwrap();
    assert_eq!(third.status(), 200, "a closed session frees its place");
}

/// Security review 2, G4: a session whose budget is spent took every prompt into its history,
/// journal and store with no model call (4 MiB a request). Its turns now answer
/// `budget_exhausted` at once, and the prompt is kept nowhere.
#[tokio::test]
async fn g4_a_spent_budget_keeps_no_prompt() {
    let deputy = HttpDeputy::start(&[]).await;
    let big = |n: usize| format!("{n}{}", "x".repeat(256 * 1024));
    let (status, created) = deputy
        .rest(
            None,
            reqwest::Method::POST,
            "/v1/sessions",
            Some(json!({"prompt": big(0), "budget": {"max_tool_calls": 0}})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["stop_reason"], "budget_exhausted", "{created}");
    let id = created["session_id"].as_str().unwrap().to_owned();
    for n in 1..6 {
        let (status, answer) = deputy
            .rest(None, reqwest::Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": big(n)})))
            .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["stop_reason"], "budget_exhausted", "{answer}");
    }
    assert_eq!(deputy.mock.requests().len(), 0, "no model call");
    let (_, messages) = deputy.rest(None, reqwest::Method::GET, &format!("/v1/sessions/{id}/messages"), None).await;
    assert_eq!(messages["messages"], json!([]), "no prompt in the history");
    let (_, page) = deputy.rest(None, reqwest::Method::GET, &format!("/v1/sessions/{id}/events"), None).await;
    let events = page["events"].as_array().unwrap();
    assert!(events.iter().all(|event| event["event"]["type"] != "prompt_received"), "{page}");
    let bytes = serde_json::to_vec(events).unwrap().len();
    assert!(bytes < 64 * 1024, "the journal holds {bytes} bytes");
}

/// `GET …/events?follow=true` on `id` as `token`: the response, its headers read.
async fn follow(deputy: &HttpDeputy, token: &str, id: &str) -> reqwest::Response {
    let url = deputy.url(&format!("/v1/sessions/{id}/events?follow=true"));
    tokio::time::timeout(LIMIT, deputy.http.get(url).bearer_auth(token).send()).await.expect("answered").unwrap()
}

/// Security review 2, G8: idle follow streams never ended, so one tenant holding as many as the
/// connection cap locked everyone out. A subject now holds at most 16 follow streams (one more
/// is refused 429 at once, another subject's is not), and closing one frees its place.
#[tokio::test]
async fn g8_a_subject_holds_at_most_16_follow_streams() {
    use crate::suite::tenants::{ALICE, BOB, TENANTS};
    let deputy = HttpDeputy::start_with_config(TENANTS, &[], &[]).await;
    deputy.mock.respond_with(|_| {
        crate::common::mock_llm::MockResponse::sse(crate::common::mock_llm::anthropic::text(&["ok"]))
    });
    let session = |token: &'static str| {
        let deputy = &deputy;
        async move {
            let (status, created) = deputy
                .rest(Some(token), reqwest::Method::POST, "/v1/sessions", Some(json!({"prompt": "hi"})))
                .await;
            assert_eq!(status, 201, "{created}");
            created["session_id"].as_str().unwrap().to_owned()
        }
    };
    let (alices, bobs) = (session(ALICE).await, session(BOB).await);
    let mut held = Vec::new();
    for _ in 0..16 {
        let response = follow(&deputy, ALICE, &alices).await;
        assert_eq!(response.status(), 200);
        held.push(response);
    }
    let refused = follow(&deputy, ALICE, &alices).await;
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "TOO_MANY_STREAMS", "{body}");
    assert_eq!(follow(&deputy, BOB, &bobs).await.status(), 200, "another subject's share is its own");

    drop(held.pop());
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let response = follow(&deputy, ALICE, &alices).await;
        if response.status() == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "a closed stream's place never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Security review 2, G8, beyond follows: long polls and streamed turns held connections too.
/// A subject has at most `--max-requests-per-subject` requests in flight (a streaming response
/// holds its place while it streams); one more is refused 429 `TOO_MANY_REQUESTS` at once, and
/// another subject is not affected.
#[tokio::test]
async fn g8_a_subject_has_at_most_its_share_of_requests_in_flight() {
    use crate::suite::tenants::{ALICE, BOB, TENANTS};
    let deputy = HttpDeputy::start_with_config(TENANTS, &["--max-requests-per-subject", "3"], &[]).await;
    deputy.mock.respond_with(|_| {
        crate::common::mock_llm::MockResponse::sse(crate::common::mock_llm::anthropic::text(&["ok"]))
    });
    let (status, created) =
        deputy.rest(Some(ALICE), reqwest::Method::POST, "/v1/sessions", Some(json!({"prompt": "hi"}))).await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_owned();
    let mut held = Vec::new();
    for _ in 0..3 {
        let response = follow(&deputy, ALICE, &id).await;
        assert_eq!(response.status(), 200);
        held.push(response);
    }
    let (status, refused) = deputy.rest(Some(ALICE), reqwest::Method::GET, "/v1/sessions", None).await;
    assert_eq!((status, refused["code"].as_str()), (429, Some("TOO_MANY_REQUESTS")), "{refused}");
    let (status, _) = deputy.rest(Some(BOB), reqwest::Method::GET, "/v1/sessions", None).await;
    assert_eq!(status, 200, "another subject's share is its own");

    drop(held.pop());
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let (status, _) = deputy.rest(Some(ALICE), reqwest::Method::GET, "/v1/sessions", None).await;
        if status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "a closed stream's place never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Security review 2, G8: a follow stream ends after `--max-follow-secs` even when nothing
/// happens (the client resumes with `after_seq`).
#[tokio::test]
async fn g8_a_follow_stream_ends_after_its_maximum_duration() {
    let deputy = HttpDeputy::start(&["--max-follow-secs", "1"]).await;
    deputy.mock.respond_with(|_| {
        crate::common::mock_llm::MockResponse::sse(crate::common::mock_llm::anthropic::text(&["ok"]))
    });
    let id = deputy.create_session("hi").await;
    let response =
        deputy.http.get(deputy.url(&format!("/v1/sessions/{id}/events?follow=true"))).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body = tokio::time::timeout(LIMIT, response.text()).await.expect("the stream ended").unwrap();
    assert!(body.contains("event: session_created"), "{body}");
}

/// Security review 2, G4, the saves: a prompt into a session whose last turn failed used to
/// join the stored trailing user message, so each save rewrote an ever-growing message. Each
/// prompt is now a message of its own (a save only appends; what is stored is never changed),
/// and the wire still sends the run as one user message that real providers accept.
#[tokio::test]
async fn g4_prompts_after_failed_turns_are_appended_never_joined_to_a_stored_message() {
    use crate::common::mock_llm::{MockResponse, anthropic};
    use crate::common::provider_rules::Profile;
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.enforce(Profile::first_party());
    let refusal = || MockResponse::json(400, anthropic::error_body("invalid_request_error", "mock says no"));
    deputy.mock.push(refusal());
    let (status, created) =
        deputy.rest(None, reqwest::Method::POST, "/v1/sessions", Some(json!({"prompt": "first"}))).await;
    assert_eq!((status, created["code"].as_str()), (500, Some("AGENT_ERROR")), "{created}");
    let id = created["session_id"].as_str().unwrap().to_owned();
    deputy.mock.push(refusal());
    let turns = format!("/v1/sessions/{id}/turns");
    let (_, failed) = deputy.rest(None, reqwest::Method::POST, &turns, Some(json!({"prompt": "second"}))).await;
    assert_eq!(failed["code"], "AGENT_ERROR", "{failed}");
    deputy.mock.push(MockResponse::sse(anthropic::text(&["at last"])));
    let (_, done) = deputy.rest(None, reqwest::Method::POST, &turns, Some(json!({"prompt": "third"}))).await;
    assert_eq!(done["text"], "at last", "{done}");

    let (_, history) = deputy.rest(None, reqwest::Method::GET, &format!("/v1/sessions/{id}/messages"), None).await;
    let stored: Vec<(String, usize)> = history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| (message["role"].as_str().unwrap().to_owned(), message["content"].as_array().unwrap().len()))
        .collect();
    let expected = [("user", 1), ("user", 1), ("user", 1), ("assistant", 1)].map(|(role, n)| (role.to_owned(), n));
    assert_eq!(stored, expected, "{history}");
    let sent = &deputy.mock.requests()[2].body["messages"];
    assert_eq!(sent.as_array().unwrap().len(), 1, "one user message on the wire: {sent}");
    assert!(deputy.mock.violations().is_empty(), "{:?}", deputy.mock.violations());
}
