//! The operator's switches hold through the built binary, as a caller meets them: security
//! review F1 (inline MCP servers refused before anything runs) and F18 (switches re-checked when
//! a stored session resumes).

use serde_json::json;

use crate::common::deputy::TestDeputy;
use crate::common::http_deputy::HttpDeputy;
use crate::common::mcp_servers::bin;
use crate::common::mock_llm::{MockResponse, anthropic};

const LOCKED: &str = "[tools]\nallow_shell = false\nallow_inline_mcp_servers = false\n";

/// F1's reproduction: under a locked config, an inline `command` server is refused with
/// `INVALID_REQUEST` and its program never runs; an inline `url` server is refused too.
#[tokio::test]
async fn f1_an_inline_mcp_server_is_refused_and_never_runs_when_denied() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, LOCKED).unwrap();
    let marker = dir.path().join("PWNED");
    let deputy = HttpDeputy::start(&["--config", config.to_str().unwrap()]).await;

    let inline_command =
        json!({"name": "x", "command": "/bin/sh", "args": ["-c", format!("id > {}", marker.display())]});
    let inline_url = json!({"name": "meta", "url": "http://127.0.0.1:9/mcp"});
    for server in [inline_command, inline_url] {
        let response = deputy
            .http
            .post(deputy.url("/v1/sessions"))
            .json(&json!({"prompt": "hi", "mcp_servers": [server]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["code"], "INVALID_REQUEST", "{body}");
        assert!(body["message"].as_str().unwrap().contains("allow_inline_mcp_servers"), "{body}");
    }
    assert!(!marker.exists(), "the refused server's command ran");
    assert!(deputy.mock.requests().is_empty(), "refused sessions reach no model");
}

/// A config-file server stays usable under the same lock: the switch refuses only what callers
/// bring.
#[tokio::test]
async fn f1_servers_named_in_the_config_file_stay_allowed() {
    let config = format!(
        "{LOCKED}[mcp_servers.everything]\ncommand = {:?}\nargs = [\"stdio\"]\n",
        bin("mcp-server-everything")
    );
    let deputy = TestDeputy::start_with_config(&config).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Ready."])));
    let created = deputy.ok("session_create", json!({"prompt": "hi", "mcp_servers": ["everything"]})).await;
    assert_eq!(created["text"], "Ready.");
}

/// F18: a session created with the shell before the operator set `allow_shell = false` does not
/// get it back when it resumes after the restart: the turn is refused, nothing runs.
#[cfg(feature = "session-store")]
#[tokio::test]
async fn f18_a_stored_session_is_rechecked_against_a_tightened_policy_on_resume() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Shell ready."])));
    let created = deputy.ok("session_create", json!({"prompt": "hi", "shell": true})).await;
    let id = created["session_id"].as_str().unwrap().to_owned();

    let stopped = deputy.stop().await;
    std::fs::create_dir_all(stopped.home.path().join("deputy")).unwrap();
    std::fs::write(stopped.home.path().join("deputy").join("config.toml"), LOCKED).unwrap();
    let deputy = TestDeputy::respawn_on(stopped.mock, stopped.workspace, stopped.home).await;
    let (code, text) = deputy.err("session_turn", json!({"session_id": id, "prompt": "run something"})).await;
    assert_eq!(code, "INVALID_REQUEST", "{text}");
    assert!(text.contains("allow_shell"), "{text}");
    assert_eq!(deputy.mock.requests().len(), 1, "the refused turn reached no model");
    // The session is still readable: only continuing it is refused.
    let read = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(read["state"]["turns"], 1);
}

/// F2: by default a caller's workspace must be the server's workspace or inside it; `/`,
/// `/proc/self` and any other directory are refused alike (the message does not say whether
/// they exist), and `[policy] workspace_roots` names the directories an operator allows instead.
#[tokio::test]
async fn f2_a_workspace_outside_the_roots_is_refused() {
    let elsewhere = tempfile::tempdir().unwrap();
    let deputy = TestDeputy::start().await;
    let inside = deputy.workspace.path().join("project");
    std::fs::create_dir(&inside).unwrap();
    for outside in [
        std::path::PathBuf::from("/"),
        "/proc/self".into(),
        elsewhere.path().into(),
        elsewhere.path().join("missing"),
    ] {
        let (code, text) = deputy.err("session_create", json!({"prompt": "hi", "workspace": outside})).await;
        assert_eq!(code, "INVALID_REQUEST", "{outside:?}: {text}");
        assert!(text.contains("not an allowed workspace"), "{text}");
    }
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Inside."])));
    let created = deputy.ok("session_create", json!({"prompt": "hi", "workspace": inside})).await;
    assert_eq!(created["text"], "Inside.");

    let config = format!("[policy]\nworkspace_roots = [{:?}]\n", elsewhere.path());
    let deputy = TestDeputy::start_with_config(&config).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Elsewhere."])));
    let created = deputy.ok("session_create", json!({"prompt": "hi", "workspace": elsewhere.path()})).await;
    assert_eq!(created["text"], "Elsewhere.");
    let (code, _) = deputy.err("session_create", json!({"prompt": "hi", "workspace": "/proc/self"})).await;
    assert_eq!(code, "INVALID_REQUEST", "/proc is never a workspace");
}
