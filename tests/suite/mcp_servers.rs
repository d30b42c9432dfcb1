//! External MCP servers through deputy's `McpFactory`, against real third-party servers from npm
//! (`@modelcontextprotocol/server-everything`, `server-filesystem`, and a TypeScript-SDK probe):
//! discovery, calls, namespacing, sharing by key, the idle pool and its reaper, respawn after a
//! crash, cancellation reaching the server, and a session using them end to end.

use std::sync::Arc;
use std::time::Duration;

use deputy::tools::ToolScope;
use deputy::tools::mcp::{McpFactory, McpPoolConfig, Reach, session_tools};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::deputy::TestDeputy;
use crate::common::mcp_servers::{bin, cancel_probe, everything, marker, processes_with};
use crate::common::mock_llm::{MockResponse, anthropic};

/// Polls `check` every 20 ms for up to 10 s.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for: {what}");
}

#[tokio::test]
async fn tools_are_discovered_namespaced_and_called() {
    let factory = McpFactory::default();
    let tools = session_tools(&factory, &[everything("everything", &marker(), &[])], |_| Reach::Any).await.unwrap();
    let scope = ToolScope::new(tools);
    let names: Vec<String> = scope.specs().into_iter().map(|spec| spec.name).collect();
    for expected in ["everything__echo", "everything__get-sum", "everything__get-tiny-image"] {
        assert!(names.iter().any(|name| name == expected), "{expected} missing from {names:?}");
    }
    assert!(names.iter().all(|name| name.starts_with("everything__")), "{names:?}");
    let echo = scope.specs().into_iter().find(|spec| spec.name == "everything__echo").unwrap();
    assert!(echo.input_schema["properties"]["message"].is_object(), "{}", echo.input_schema);

    let none = CancellationToken::new();
    let echoed = scope.call("everything__echo", json!({"message": "hi"}), none.clone()).await;
    assert_eq!((echoed.content.as_str(), echoed.is_error), ("Echo: hi", false));
    let sum = scope.call("everything__get-sum", json!({"a": 2, "b": 40}), none.clone()).await;
    assert!(sum.content.contains("42"), "{sum:?}");
    let image = scope.call("everything__get-tiny-image", json!({}), none.clone()).await;
    assert!(image.content.contains("[image: image/png"), "non-text content is described: {image:?}");
    let bad = scope.call("everything__get-sum", json!({"a": "x"}), none).await;
    assert!(bad.is_error, "a server-side error stays an error: {bad:?}");
}

#[tokio::test]
async fn the_same_key_shares_one_process_and_another_env_gets_its_own() {
    let factory = McpFactory::default();
    let mark = marker();
    let tenant_a = everything("everything", &mark, &[("TENANT_TOKEN", "a")]);
    let first = factory.acquire(&tenant_a).await.unwrap();
    let second = factory.acquire(&tenant_a).await.unwrap();
    assert!(Arc::ptr_eq(&first, &second), "same key, same connection");
    assert_eq!(processes_with(&mark).len(), 1, "one process for two sessions");

    let tenant_b = everything("everything", &mark, &[("TENANT_TOKEN", "b")]);
    let other = factory.acquire(&tenant_b).await.unwrap();
    assert!(!Arc::ptr_eq(&first, &other));
    assert_eq!(processes_with(&mark).len(), 2, "different env, different process");
    let stats = factory.stats();
    assert_eq!((stats.spawned, stats.shared, stats.active), (2, 1, 2));

    // Each process sees its own tenant's env.
    let env_of = |tools: Vec<Arc<dyn deputy::tools::Tool>>| async move {
        let scope = ToolScope::new(tools);
        scope.call("everything__get-env", json!({}), CancellationToken::new()).await.content
    };
    let a = env_of(session_tools(&factory, &[tenant_a], |_| Reach::Any).await.unwrap()).await;
    let b = env_of(session_tools(&factory, &[tenant_b], |_| Reach::Any).await.unwrap()).await;
    assert!(a.contains(r#""TENANT_TOKEN": "a""#) && b.contains(r#""TENANT_TOKEN": "b""#));
    assert_eq!(factory.stats().spawned, 2, "tool sessions reused the running servers");
}

#[tokio::test]
async fn an_unused_server_idles_is_revived_without_a_spawn_and_is_reaped_after_its_timeout() {
    let config = McpPoolConfig {
        idle_timeout: Duration::from_millis(400),
        max_idle: 4,
        cleanup_interval: Duration::from_millis(50),
        ..McpPoolConfig::default()
    };
    let factory = McpFactory::new(config);
    let mark = marker();
    let spec = everything("everything", &mark, &[]);
    let connection = factory.acquire(&spec).await.unwrap();
    let pid = connection.pid().await.unwrap().unwrap();
    drop(connection);
    let stats = factory.stats();
    assert_eq!((stats.active, stats.idle), (0, 1), "the last user gone, the server idles");
    assert_eq!(factory.idle_pids(), [pid]);

    let revived = factory.acquire(&spec).await.unwrap();
    assert_eq!(revived.pid().await.unwrap(), Some(pid), "the same process");
    let stats = factory.stats();
    assert_eq!((stats.spawned, stats.revived), (1, 1), "revival spawns nothing");
    drop(revived);

    eventually("the reaper stops the idle server", || factory.stats().idle == 0).await;
    assert_eq!(factory.stats().reaped, 1);
    eventually("its process is gone", || processes_with(&mark).is_empty()).await;
}

#[tokio::test]
async fn the_idle_cap_and_a_zero_timeout_stop_servers_at_once() {
    let config = McpPoolConfig { max_idle: 1, ..McpPoolConfig::default() };
    let factory = McpFactory::new(config);
    let mark = marker();
    let (one, two) = (everything("one", &mark, &[]), everything("two", &mark, &[]));
    let (a, b) = (factory.acquire(&one).await.unwrap(), factory.acquire(&two).await.unwrap());
    drop(a);
    drop(b);
    let stats = factory.stats();
    assert_eq!((stats.idle, stats.reaped), (1, 1), "only one may idle; the longest idle went");
    eventually("one process left", || processes_with(&mark).len() == 1).await;

    let mut eager = everything("eager", &mark, &[]);
    eager.idle_timeout_secs = Some(0);
    drop(factory.acquire(&eager).await.unwrap());
    assert_eq!(factory.stats().idle, 1, "a zero idle timeout does not pool");
    eventually("the eager server stopped", || processes_with(&mark).len() == 1).await;
}

#[tokio::test]
async fn a_killed_server_is_respawned_on_next_use() {
    let factory = McpFactory::default();
    let mark = marker();
    let spec = everything("everything", &mark, &[]);
    let scope = ToolScope::new(session_tools(&factory, std::slice::from_ref(&spec), |_| Reach::Any).await.unwrap());
    let connection = factory.acquire(&spec).await.unwrap();
    let pid = connection.pid().await.unwrap().unwrap();
    assert!(deputy::tools::process_group::kill_group(pid));
    eventually("the server is gone", || processes_with(&mark).is_empty()).await;

    // The model gets either an error for this call or, if the death was already noticed, the
    // answer of a fresh process; the next call always works.
    let call = || scope.call("everything__echo", json!({"message": "again"}), CancellationToken::new());
    let first = call().await;
    let second = call().await;
    assert!(!second.is_error && second.content == "Echo: again", "{first:?} then {second:?}");
    let new_pid = connection.pid().await.unwrap().unwrap();
    assert_ne!(new_pid, pid);
    assert_eq!(factory.stats().spawned, 2);
    assert_eq!(processes_with(&mark).len(), 1);
}

#[tokio::test]
async fn an_interrupted_call_is_cancelled_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("probe.log");
    let factory = McpFactory::default();
    let scope = ToolScope::new(session_tools(&factory, &[cancel_probe(&log)], |_| Reach::Any).await.unwrap());
    let read = || std::fs::read_to_string(&log).unwrap_or_default();

    let cancel = CancellationToken::new();
    let call = scope.call("probe__wait", json!({}), cancel.clone());
    let interrupt = async {
        eventually("the call reached the server", || read().contains("started")).await;
        cancel.cancel();
    };
    let (output, ()) = tokio::join!(call, interrupt);
    assert!(output.is_error && output.content.contains("cancelled"), "{output:?}");
    eventually("the server saw notifications/cancelled", || read().contains("cancelled")).await;
}

#[tokio::test]
async fn a_session_uses_a_named_and_an_inline_server_end_to_end() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("notes.txt"), "the answer is 42\n").unwrap();
    let config =
        format!("[mcp_servers.everything]\ncommand = {:?}\nargs = [\"stdio\"]\n", bin("mcp-server-everything"));
    let deputy = TestDeputy::start_with_config(&config).await;
    let notes = data.path().canonicalize().unwrap().join("notes.txt");
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[
            ("toolu_1", "fs__read_text_file", json!({"path": notes})),
            ("toolu_2", "everything__echo", json!({"message": "hello"})),
        ],
    )));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["It is 42."])));
    let fs = json!({"name": "fs", "command": bin("mcp-server-filesystem"), "args": [data.path()]});
    let created = deputy
        .ok("session_create", json!({"prompt": "read it", "builtins": [], "mcp_servers": ["everything", fs]}))
        .await;
    assert_eq!(created["text"], "It is 42.");

    let requests = deputy.mock.requests();
    let offered: Vec<&str> =
        requests[0].body["tools"].as_array().unwrap().iter().map(|tool| tool["name"].as_str().unwrap()).collect();
    assert!(offered.contains(&"fs__read_text_file") && offered.contains(&"everything__echo"), "{offered:?}");
    assert!(offered.iter().all(|name| name.starts_with("fs__") || name.starts_with("everything__")));
    let messages = requests[1].body["messages"].as_array().unwrap();
    let results = messages.last().unwrap()["content"].as_array().unwrap();
    assert!(results[0]["content"].as_str().unwrap().contains("the answer is 42"), "{}", results[0]);
    assert_eq!(results[1]["content"], "Echo: hello");

    let (code, text) = deputy.err("session_create", json!({"prompt": "x", "mcp_servers": ["nope"]})).await;
    assert_eq!(code, "INVALID_REQUEST", "{text}");
    let missing = json!({"name": "gone", "command": "/nonexistent/mcp-server"});
    let (code, text) = deputy.err("session_create", json!({"prompt": "x", "mcp_servers": [missing]})).await;
    assert_eq!(code, "AGENT_ERROR", "{text}");
}
