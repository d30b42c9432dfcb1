//! MCP streamable HTTP at `/mcp`, the HTTP guard, and shutdown, against the real binary.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorCode};
use rmcp::{ClientLifecycleMode, ServiceError};
use serde_json::{Value, json};

use crate::common::deputy::{RecordingClient, error_of, stateless};
use crate::common::http_deputy::{HttpDeputy, free_port};
use crate::common::id_of;
use crate::common::mock_llm::{Gate, MockResponse, anthropic};
use crate::common::scenarios::cancelled_turn;

type Client = rmcp::service::RunningService<rmcp::RoleClient, RecordingClient>;

async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else { panic!("object") };
    client.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)).await.unwrap()
}

async fn ok(client: &Client, tool: &str, arguments: Value) -> Value {
    let result = call(client, tool, arguments).await;
    assert_ne!(result.is_error, Some(true), "{tool}: {:?}", result.content);
    result.structured_content.unwrap()
}

#[tokio::test]
async fn both_protocol_eras_run_sessions_over_http() {
    let deputy = HttpDeputy::start(&[]).await;
    let modern = stateless();
    for (era, lifecycle) in [("2025-11-25", ClientLifecycleMode::Initialize), ("2026-07-28", modern)] {
        let client = deputy.mcp(lifecycle).await;
        assert_eq!(client.peer_info().unwrap().protocol_version.to_string(), era);
        assert_eq!(
            client.list_all_tools().await.unwrap().len(),
            deputy::surfaces::operation::mcp_tool_catalog().len()
        );
        deputy.mock.push(MockResponse::sse(anthropic::text(&["over ", "http"])));
        let created = ok(&client, "session_create", json!({"prompt": format!("hi in {era}")})).await;
        assert_eq!(created["text"], "over http");
        let id = id_of(&created);
        deputy.mock.push(MockResponse::sse(anthropic::text(&["again"])));
        assert_eq!(ok(&client, "session_turn", json!({"session_id": id, "prompt": "more"})).await["turn"], 2);
        let (code, _) = error_of(&call(&client, "session_interrupt", json!({"session_id": id})).await);
        assert_eq!(code, "SESSION_NOT_RUNNING");
        let (code, _) = error_of(&call(&client, "session_turn", json!({"session_id": 7})).await);
        assert_eq!(code, "INVALID_REQUEST");
        client.cancel().await.unwrap();
    }
    // Sessions are application handles: a new MCP connection sees both.
    let client = deputy.mcp(ClientLifecycleMode::Initialize).await;
    assert_eq!(ok(&client, "session_list", json!({})).await["total"], 2);
}

#[tokio::test]
async fn progress_and_cancellation_work_over_http() {
    let deputy = HttpDeputy::start(&[]).await;
    let client = deputy.mcp(ClientLifecycleMode::Initialize).await;
    let deltas = ["Slowly ", "the ", "answer ", "comes ", "in."];
    deputy.mock.push(MockResponse::sse(anthropic::text(&deltas)).chunk_delay(Duration::from_millis(400)));
    let created = ok(&client, "session_create", json!({"prompt": "slow"})).await;
    let id = id_of(&created);
    let progress = client.service().progress.lock().unwrap().clone();
    assert!(!progress.is_empty(), "progress notifications reach the HTTP client");

    cancelled_turn(&deputy.mock, client.peer(), &id, "never ends", "stop").await;
    let read = ok(&client, "session_read", json!({"session_id": id, "wait_ms": 30000})).await;
    assert_eq!(read["state"]["last_turn"]["status"], "cancelled");
}

#[tokio::test]
async fn the_guard_refuses_what_it_must_and_nothing_else() {
    let token = "s3cret-token-0123456789";
    let deputy = HttpDeputy::start_with_token(Some(token), &["--max-body-bytes", "65536"]).await;
    let http = reqwest::Client::new();
    let status = |request: reqwest::RequestBuilder| async move { request.send().await.unwrap().status().as_u16() };

    assert_eq!(status(http.get(deputy.url("/healthz"))).await, 200, "liveness needs no token");
    assert_eq!(status(http.get(deputy.url("/readyz"))).await, 401, "missing token");
    assert_eq!(status(http.get(deputy.url("/readyz")).bearer_auth("wrong-token-0123456789")).await, 401);
    assert_eq!(status(http.get(deputy.url("/readyz")).bearer_auth(token)).await, 200);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let mcp =
        || http.post(deputy.url("/mcp")).header("accept", "application/json, text/event-stream").json(&initialize);
    assert_eq!(status(mcp()).await, 401, "/mcp needs the token too");
    assert_eq!(status(mcp().bearer_auth(token).header("origin", "https://evil.example")).await, 403);
    assert_eq!(status(mcp().bearer_auth(token).header("host", "evil.example")).await, 403);
    let oversized = json!({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"pad": "x".repeat(100_000)}});
    let big = http
        .post(deputy.url("/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&oversized);
    assert_eq!(status(big).await, 413);
    let refusal: Value = http.get(deputy.url("/readyz")).send().await.unwrap().json().await.unwrap();
    assert_eq!(refusal["code"], "UNAUTHORIZED");

    // After all the refusals, a proper client works.
    let client = deputy.mcp(ClientLifecycleMode::Initialize).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["still fine"])));
    assert_eq!(ok(&client, "session_create", json!({"prompt": "hi"})).await["text"], "still fine");
}

#[tokio::test]
async fn a_public_address_without_a_token_is_refused() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .args(["serve", "--ephemeral", "--http", &format!("0.0.0.0:{}", free_port())])
        .env_remove("DEPUTY_TOKEN")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("without a token"));
}

#[tokio::test]
async fn sigterm_lets_the_running_turn_finish_then_exits_cleanly() {
    let mut deputy = HttpDeputy::start(&[]).await;
    let client = deputy.mcp(ClientLifecycleMode::Initialize).await;
    let gate = Gate::new();
    deputy
        .mock
        .push(MockResponse::sse(anthropic::text(&["finished", " anyway"])).pause_before_chunk(3, gate.clone()));
    let running = ok(&client, "session_create", json!({"prompt": "long", "wait_ms": 100})).await;
    assert_eq!(running["status"], "running");
    let id = id_of(&running);
    deputy.mock.wait_for_requests(1).await;
    client.cancel().await.unwrap();

    // The gate opens only once deputy is draining, so the turn is still running when the
    // signal lands and the drain is what waits for it.
    let log = deputy.log.clone();
    let opener = tokio::spawn(async move {
        log.wait_for("draining running turns").await;
        gate.open();
    });
    let status = deputy.terminate().await;
    assert!(status.success(), "exit status {status:?}");
    opener.await.unwrap();
    if let Some(shown) = stored_session(deputy.home.path(), &id).await {
        assert_eq!(shown["session"]["state"]["last_turn"]["status"], "completed");
        assert_eq!(shown["session"]["state"]["last_turn"]["text"], "finished anyway");
    }
}

/// `deputy sessions show ID --json` on a stopped deputy's store (`None` without a store).
async fn stored_session(home: &std::path::Path, id: &str) -> Option<Value> {
    if !cfg!(feature = "session-store") {
        return None;
    }
    let show = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .args(["sessions", "show", id, "--json"])
        .env("DEPUTY_STORE", home.join("sessions.redb"))
        .env("XDG_CONFIG_HOME", home)
        .output()
        .await
        .unwrap();
    let shown = serde_json::from_slice(&show.stdout)
        .unwrap_or_else(|_| panic!("sessions show: {}", String::from_utf8_lossy(&show.stderr)));
    Some(shown)
}

#[tokio::test]
async fn a_turn_still_running_at_the_drain_timeout_is_interrupted_and_the_process_exits() {
    let mut deputy = HttpDeputy::start(&["--drain-timeout-secs", "1"]).await;
    let client = deputy.mcp(ClientLifecycleMode::Initialize).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["never"])).pause_before_chunk(3, Gate::new()));
    let running = ok(&client, "session_create", json!({"prompt": "stuck", "wait_ms": 100})).await;
    let id = id_of(&running);
    deputy.mock.wait_for_requests(1).await;
    client.cancel().await.unwrap();
    let status = deputy.terminate().await;
    assert!(status.success(), "exit status {status:?}");
    if let Some(shown) = stored_session(deputy.home.path(), &id).await {
        assert_eq!(shown["session"]["state"]["last_turn"]["status"], "cancelled", "saved as interrupted");
    }
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_answer_json() {
    let deputy = HttpDeputy::start(&[]).await;
    let missing = deputy.http.get(deputy.url("/v1/nope")).send().await.unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    assert_eq!(missing.json::<Value>().await.unwrap()["code"], "NOT_FOUND");
    let wrong = deputy.http.delete(deputy.url("/rpc")).send().await.unwrap();
    assert_eq!(wrong.status().as_u16(), 405);
    assert_eq!(wrong.json::<Value>().await.unwrap()["code"], "METHOD_NOT_ALLOWED");
    let foreign = deputy.http.get(deputy.url("/v1/nope")).header("host", "evil.example").send().await.unwrap();
    assert_eq!(foreign.status().as_u16(), 403, "unknown paths are guarded too");
}

/// deputy declares no prompts and no completions, so those are "method not found" in both eras
/// instead of rmcp's empty answers; resources (its sessions) it declares and answers.
#[tokio::test]
async fn undeclared_capabilities_are_method_not_found() {
    let deputy = HttpDeputy::start(&[]).await;
    let modern = stateless();
    for lifecycle in [ClientLifecycleMode::Initialize, modern] {
        let client = deputy.mcp(lifecycle).await;
        let capabilities = client.peer_info().unwrap().capabilities.clone();
        assert!(capabilities.prompts.is_none() && capabilities.completions.is_none());
        assert!(capabilities.resources.is_some());
        let not_found = |what: &str, result: Result<(), ServiceError>| match result {
            Err(ServiceError::McpError(error)) => {
                assert_eq!(error.code, ErrorCode::METHOD_NOT_FOUND, "{what}: {error:?}");
                assert!(error.message.starts_with("Method not found: "), "{what}: {error:?}");
            }
            other => panic!("{what}: {other:?}"),
        };
        not_found("prompts/list", client.list_prompts(None).await.map(drop));
        assert!(client.list_resources(None).await.unwrap().resources.is_empty(), "no sessions yet");
        assert_eq!(client.list_resource_templates(None).await.unwrap().resource_templates.len(), 5);
        not_found("completion/complete", client.complete_prompt_simple("p", "a", "v").await.map(drop));
        assert_eq!(
            client.list_all_tools().await.unwrap().len(),
            deputy::surfaces::operation::mcp_tool_catalog().len(),
            "tools still answer"
        );
        client.cancel().await.unwrap();
    }
}

/// `POST /mcp` with `body`, as a legacy client (`session` and `version` headers when given);
/// the response's status, `Mcp-Session-Id` and body.
async fn post_mcp(
    deputy: &HttpDeputy,
    body: Value,
    session: Option<&str>,
    version: Option<&str>,
) -> (u16, Option<String>, String) {
    let mut request =
        deputy.http.post(deputy.url("/mcp")).header("accept", "application/json, text/event-stream").json(&body);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    if let Some(version) = version {
        request = request.header("mcp-protocol-version", version);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let session = response.headers().get("mcp-session-id").map(|value| value.to_str().unwrap().to_owned());
    // A request's stream ends with its response; the initialize stream too.
    let text = tokio::time::timeout(Duration::from_secs(10), response.text()).await.unwrap().unwrap();
    (status, session, text)
}

fn initialize(version: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": version,
        "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
}

/// The SSE priming event (SEP-1699, protocol 2025-11-25) goes only to clients that negotiated
/// 2025-11-25 or later; older ones get their messages alone. Stateless 2026-07-28 requests have
/// no priming event in rmcp at all.
#[tokio::test]
async fn only_clients_that_know_it_get_the_sse_priming_event() {
    let deputy = HttpDeputy::start(&[]).await;
    let primed = |body: &str| body.starts_with("data:") && body.split("\n\n").next().unwrap().contains("retry:");
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});

    let (status, session, body) = post_mcp(&deputy, initialize("2025-11-25"), None, None).await;
    assert_eq!(status, 200);
    assert!(primed(&body), "2025-11-25 initialize is primed: {body:?}");
    let session = session.unwrap();
    let (_, _, body) = post_mcp(&deputy, list.clone(), Some(&session), Some("2025-11-25")).await;
    assert!(primed(&body), "2025-11-25 request is primed: {body:?}");
    // What the session negotiated counts, not a request's header (the conformance suite sends
    // 2025-03-26 on a 2025-11-25 session).
    let (_, _, body) = post_mcp(&deputy, list.clone(), Some(&session), Some("2025-03-26")).await;
    assert!(primed(&body), "a request in a 2025-11-25 session is primed: {body:?}");

    for old in ["2025-03-26", "2025-06-18"] {
        let (status, session, body) = post_mcp(&deputy, initialize(old), None, None).await;
        assert_eq!(status, 200);
        assert!(body.starts_with("data: {"), "{old} initialize starts with its answer: {body:?}");
        assert!(body.contains(&format!("\"protocolVersion\":\"{old}\"")), "{body}");
        let session = session.unwrap();
        // 2025-06-18 clients send the header; 2025-03-26 ones do not have it.
        let header = (old != "2025-03-26").then_some(old);
        let (status, _, body) = post_mcp(&deputy, list.clone(), Some(&session), header).await;
        assert_eq!(status, 200);
        assert!(body.starts_with("data: {") && body.contains("session_create"), "{old} request: {body:?}");
    }
}

/// `DELETE /mcp` ends a legacy MCP session with 204, and answers 404 for a session that does
/// not exist (any more), like every other request naming it.
#[tokio::test]
async fn deleting_an_mcp_session_answers_204_then_404() {
    let deputy = HttpDeputy::start(&[]).await;
    let (_, session, _) = post_mcp(&deputy, initialize("2025-11-25"), None, None).await;
    let session = session.unwrap();
    let delete = |id: String| {
        deputy
            .http
            .delete(deputy.url("/mcp"))
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", "2025-11-25")
    };
    assert_eq!(delete(session.clone()).send().await.unwrap().status().as_u16(), 204);
    let again = delete(session.clone()).send().await.unwrap();
    assert_eq!(again.status().as_u16(), 404);
    assert_eq!(again.json::<Value>().await.unwrap()["code"], "NOT_FOUND");
    assert_eq!(delete("no-such-session".into()).send().await.unwrap().status().as_u16(), 404);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(post_mcp(&deputy, list, Some(&session), Some("2025-11-25")).await.0, 404, "the session is gone");
}
