//! The sandbox of the shell and stdio MCP servers (issue 25), through the `deputy` binary: the
//! model (the mock LLM) runs `shell` commands, and what they could do shows on disk and in
//! their results.
//!
//! The confinement tests need a kernel with Landlock (this suite's machines have ABI 7); the
//! refusals simulate a kernel without it through the test seam
//! `DEPUTY_TEST_PRETEND_NO_LANDLOCK` (see `deputy::sandbox::PRETEND_NO_LANDLOCK_ENV`).

use std::path::Path;
use std::time::Duration;

use rmcp::ClientLifecycleMode;
use serde_json::{Value, json};

use crate::common::deputy::{RecordingClient, TestDeputy, connect, deputy_serve, tool_results};
use crate::common::http_deputy::HttpDeputy;
use crate::common::mcp_servers::bin;
use crate::common::mock_llm::{MockLlm, MockResponse, anthropic};

const PRETEND: &str = deputy::sandbox::PRETEND_NO_LANDLOCK_ENV;

/// `deputy serve` over stdio (so the sandbox defaults to `best_effort`), with `config` as its
/// config file and `env` added to its environment.
async fn stdio_deputy(config: &str, env: &[(&str, &str)]) -> TestDeputy {
    let mock = MockLlm::start().await;
    let workspace = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("deputy")).unwrap();
    std::fs::write(home.path().join("deputy").join("config.toml"), config).unwrap();
    let mut command = deputy_serve(&mock, workspace.path(), home.path());
    command.envs(env.iter().copied());
    let recorder = RecordingClient::default();
    let (client, child) = connect(&recorder, command, ClientLifecycleMode::Initialize).await;
    TestDeputy { client, child, recorder, mock, workspace, home }
}

/// Runs `commands` as the model's shell calls of one step in a new session; their results in
/// order, as `(is_error, content)`, and the session's view.
async fn run_shell(deputy: &TestDeputy, commands: &[String]) -> (Vec<(bool, String)>, Value) {
    let calls: Vec<(String, Value)> = commands
        .iter()
        .enumerate()
        .map(|(index, command)| (format!("toolu_{index}"), json!({"command": command})))
        .collect();
    let calls: Vec<(&str, &str, Value)> =
        calls.iter().map(|(id, arguments)| (id.as_str(), "shell", arguments.clone())).collect();
    deputy.mock.forget_requests();
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(None, &calls)));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["done"])));
    let created = deputy.ok("session_create", json!({"prompt": "run", "shell": {"timeout_ms": 10_000}})).await;
    assert_eq!(created["text"], "done", "{created}");
    let results = tool_results(deputy, 1)
        .iter()
        .map(|result| {
            (result["is_error"].as_bool().unwrap_or(false), result["content"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    let view = deputy.ok("session_read", json!({"session_id": created["session_id"]})).await;
    (results, view)
}

/// A TCP listener on loopback, and a command that connects to it.
fn loopback() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let command = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port})); print(\"connected\")'"
    );
    (listener, command)
}

fn writes_outside(outside: &Path) -> Vec<String> {
    vec![
        format!("touch '{}/x'", outside.display()),
        // Through a symlink that leads out of the workspace.
        "echo x > escape/y".to_owned(),
        "touch /tmp/../etc/deputy-sandbox-test".to_owned(),
    ]
}

#[tokio::test]
async fn a_confined_shell_writes_only_its_workspace_and_tmp_and_reaches_no_network() {
    let deputy = stdio_deputy("", &[]).await;
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), deputy.workspace.path().join("escape")).unwrap();
    let (_listener, connect) = loopback();
    let mut commands = vec![
        "touch ok && echo wrote".to_owned(),
        "echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && case \"$TMPDIR\" in */deputy-sandbox-*) echo private;; esac"
            .to_owned(),
        connect,
    ];
    commands.extend(writes_outside(outside.path()));
    let (results, view) = run_shell(&deputy, &commands).await;

    assert_eq!(results[0], (false, "exit code 0\n--- stdout ---\nwrote\n".to_owned()));
    assert!(deputy.workspace.path().join("ok").exists());
    assert_eq!(results[1], (false, "exit code 0\n--- stdout ---\nt\nprivate\n".to_owned()));
    assert!(results[2].0 && results[2].1.contains("Operation not permitted"), "network: {:?}", results[2]);
    for (result, command) in results[3..].iter().zip(&commands[3..]) {
        assert!(result.0 && result.1.contains("ermission denied"), "{command}: {result:?}");
    }
    assert!(!outside.path().join("x").exists() && !outside.path().join("y").exists());
    assert!(!Path::new("/etc/deputy-sandbox-test").exists());
    assert_eq!(view["state"]["unconfined"], Value::Null, "confined: {view}");
}

#[tokio::test]
async fn network_allow_opens_the_network_and_nothing_else() {
    let deputy = stdio_deputy("[sandbox]\nnetwork = \"allow\"\n", &[]).await;
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), deputy.workspace.path().join("escape")).unwrap();
    let (_listener, connect) = loopback();
    let mut commands = vec![connect];
    commands.extend(writes_outside(outside.path()));
    let (results, _) = run_shell(&deputy, &commands).await;
    assert_eq!(results[0], (false, "exit code 0\n--- stdout ---\nconnected\n".to_owned()));
    for (result, command) in results[1..].iter().zip(&commands[1..]) {
        assert!(result.0 && result.1.contains("ermission denied"), "{command}: {result:?}");
    }
    assert!(!outside.path().join("x").exists() && !outside.path().join("y").exists());

    // A session may narrow the operator's network, never widen it.
    let (_listener, connect) = loopback();
    deputy.mock.forget_requests();
    deputy
        .mock
        .push(MockResponse::sse(anthropic::tool_calls(None, &[("toolu_1", "shell", json!({"command": connect}))])));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["done"])));
    let narrowed = json!({"prompt": "run", "shell": true, "sandbox": {"network": "deny"}});
    deputy.ok("session_create", narrowed).await;
    let result = &tool_results(&deputy, 1)[0];
    assert_eq!(result["is_error"], true, "{result}");
    assert!(result["content"].as_str().unwrap().contains("Operation not permitted"), "{result}");
}

#[tokio::test]
async fn a_session_cannot_widen_the_operators_network() {
    let deputy = stdio_deputy("", &[]).await;
    let wider = json!({"prompt": "run", "shell": true, "sandbox": {"network": "allow"}});
    let (code, text) = deputy.err("session_create", wider).await;
    assert_eq!(code, "POLICY_DENIED", "{text}");
    assert!(deputy.mock.requests().is_empty());
}

#[tokio::test]
async fn a_confined_command_still_times_out_and_dies_with_its_process_group() {
    let deputy = stdio_deputy("", &[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[("toolu_1", "shell", json!({"command": "sleep 30 & echo $! > bg.pid; sleep 30", "timeout_ms": 500}))],
    )));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["done"])));
    deputy.ok("session_create", json!({"prompt": "run", "shell": {"timeout_ms": 10_000}})).await;
    let result = &tool_results(&deputy, 1)[0];
    assert_eq!(result["content"], "killed: timed out after 500 ms (with its whole process group)", "{result}");
    let pid: u32 = std::fs::read_to_string(deputy.workspace.path().join("bg.pid")).unwrap().trim().parse().unwrap();
    let running = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while running() {
        assert!(tokio::time::Instant::now() < deadline, "the background sleep {pid} outlived the call");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_stdio_mcp_server_writes_only_its_private_tmp() {
    // deputy's TMPDIR is the test's, so the server's private directory can be found in it.
    let tmp = tempfile::tempdir().unwrap();
    let deputy = stdio_deputy("", &[("TMPDIR", tmp.path().to_str().unwrap())]).await;
    let outside = tempfile::tempdir().unwrap();
    let script = format!(
        "touch '{}/from-mcp'; touch \"$TMPDIR/from-mcp\"; exec '{}' stdio",
        outside.path().display(),
        bin("mcp-server-everything")
    );
    let server = json!({"name": "escaper", "command": "sh", "args": ["-c", script]});
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ok"])));
    let created = deputy.ok("session_create", json!({"prompt": "hi", "mcp_servers": [server]})).await;
    assert_eq!(created["text"], "ok");
    assert!(!outside.path().join("from-mcp").exists(), "the server wrote outside its sandbox");
    let private: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("deputy-sandbox-"))
        .collect();
    assert!(
        private.iter().any(|entry| entry.path().join("from-mcp").exists()),
        "the server writes its own TMPDIR: {private:?}"
    );

    // An inline server cannot opt out.
    let out = json!({"name": "free", "command": "sh", "args": ["-c", "true"], "sandbox": false});
    let (code, text) = deputy.err("session_create", json!({"prompt": "hi", "mcp_servers": [out]})).await;
    assert_eq!(code, "INVALID_REQUEST", "{text}");
}

#[tokio::test]
async fn required_refuses_the_shell_where_landlock_is_missing() {
    let deputy = stdio_deputy("[sandbox]\nmode = \"required\"\n", &[(PRETEND, "1")]).await;
    let (code, text) = deputy.err("session_create", json!({"prompt": "x", "shell": true})).await;
    assert_eq!(code, "POLICY_DENIED", "{text}");
    assert!(text.contains("Landlock"), "{text}");
    assert!(deputy.mock.requests().is_empty(), "a refused session reaches no model");

    // A stdio MCP server is refused the same way, before it starts.
    let outside = tempfile::tempdir().unwrap();
    let script =
        format!("touch '{}/started'; exec '{}' stdio", outside.path().display(), bin("mcp-server-everything"));
    let server = json!({"name": "srv", "command": "sh", "args": ["-c", script]});
    let (code, text) = deputy.err("session_create", json!({"prompt": "x", "mcp_servers": [server]})).await;
    assert_eq!(code, "POLICY_DENIED", "{text}");
    assert!(!outside.path().join("started").exists(), "the server was started");
}

#[tokio::test]
async fn serve_http_requires_the_sandbox_by_default() {
    const TOKEN: &str = "deputy-token-sandbox-7f21c9";
    let deputy = HttpDeputy::start_with_token_and_env(Some(TOKEN), &[], &[(PRETEND, "1")]).await;
    let body = json!({"prompt": "x", "shell": true});
    let (status, answer) = deputy.rest(Some(TOKEN), reqwest::Method::POST, "/v1/sessions", Some(body)).await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.to_string().contains("POLICY_DENIED"), "{answer}");
}

#[tokio::test]
async fn best_effort_runs_unconfined_where_landlock_is_missing_and_says_so() {
    let deputy = stdio_deputy("", &[(PRETEND, "1")]).await;
    let outside = tempfile::tempdir().unwrap();
    let (results, view) = run_shell(&deputy, &[format!("touch '{}/x'", outside.path().display())]).await;
    assert_eq!(results[0], (false, "exit code 0".to_owned()));
    assert!(outside.path().join("x").exists());
    let unconfined = view["state"]["unconfined"].as_str().unwrap_or_else(|| panic!("{view}"));
    assert!(unconfined.contains("Landlock"), "{unconfined}");
}
