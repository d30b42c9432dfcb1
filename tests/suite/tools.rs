//! End to end: per-session tools through the `deputy` binary over stdio, the model being the
//! mock LLM. What the model does through its tools shows on disk.

use serde_json::json;

use crate::common::deputy::{TestDeputy, tool_results};
use crate::common::mock_llm::{MockResponse, anthropic};

#[tokio::test]
async fn the_model_writes_then_edits_a_file_in_the_session_workspace() {
    let deputy = TestDeputy::start().await;
    let project = deputy.workspace.path().join("project");
    std::fs::create_dir(&project).unwrap();

    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        Some("Writing it."),
        &[("toolu_1", "write_file", json!({"path": "src/hello.txt", "content": "hello world\n"}))],
    )));
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        Some("Now the edit."),
        &[("toolu_2", "edit_file", json!({"path": "src/hello.txt", "old_text": "world", "new_text": "deputy"}))],
    )));
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[("toolu_3", "shell", json!({"command": "echo should not run > ran.txt"}))],
    )));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Done."])));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "create src/hello.txt", "workspace": project, "builtins": ["write_file", "edit_file"]}),
        )
        .await;
    assert_eq!((created["text"].as_str(), created["tool_calls"].as_u64()), (Some("Done."), Some(3)));
    assert_eq!(std::fs::read_to_string(project.join("src/hello.txt")).unwrap(), "hello deputy\n");

    let requests = deputy.mock.requests();
    let offered: Vec<&str> =
        requests[0].body["tools"].as_array().unwrap().iter().map(|tool| tool["name"].as_str().unwrap()).collect();
    assert_eq!(offered, ["edit_file", "write_file"], "only the chosen builtins, and no shell by default");
    assert_eq!(tool_results(&deputy, 1)[0]["content"], "created with 12 bytes to src/hello.txt");
    assert_eq!(tool_results(&deputy, 2)[0]["content"], "replaced 1 occurrence in src/hello.txt");
    let shell = &tool_results(&deputy, 3)[0];
    assert_eq!(shell["is_error"], true);
    assert!(shell["content"].as_str().unwrap().contains("unknown tool"), "{shell}");
    assert!(!project.join("ran.txt").exists());
}

#[tokio::test]
async fn an_enabled_shell_runs_in_the_workspace_and_bad_tool_config_is_refused() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[("toolu_1", "shell", json!({"command": "echo from the shell > made.txt; cat made.txt"}))],
    )));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Ran it."])));
    let created = deputy.ok("session_create", json!({"prompt": "run it", "shell": {"timeout_ms": 5000}})).await;
    assert_eq!(created["text"], "Ran it.");
    assert_eq!(tool_results(&deputy, 1)[0]["content"], "exit code 0\n--- stdout ---\nfrom the shell\n");
    assert_eq!(std::fs::read_to_string(deputy.workspace.path().join("made.txt")).unwrap(), "from the shell\n");

    // A workspace that does not resolve below the roots is the operator's refusal, missing or
    // not (so the field is no oracle for paths).
    let missing = deputy.workspace.path().join("missing");
    let (code, text) = deputy.err("session_create", json!({"prompt": "x", "workspace": missing})).await;
    assert_eq!(code, "POLICY_DENIED", "{text}");
    for bad in [
        json!({"prompt": "x", "builtins": ["read_file", "delete_everything"]}),
        json!({"prompt": "x", "shell": {"timeout": 5}}),
    ] {
        let (code, text) = deputy.err("session_create", bad.clone()).await;
        assert_eq!(code, "INVALID_REQUEST", "{bad}: {text}");
    }
    assert_eq!(deputy.mock.requests().len(), 2, "refused requests reach no model");
}

/// Security review F12: the shell (the model's code) gets a short allowlist of deputy's
/// environment, never its provider keys or `DEPUTY_*` settings.
#[tokio::test]
async fn f12_a_shell_command_sees_no_provider_key_or_deputy_setting() {
    let deputy = TestDeputy::start().await;
    deputy
        .mock
        .push(MockResponse::sse(anthropic::tool_calls(None, &[("toolu_1", "shell", json!({"command": "env"}))])));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Looked."])));
    deputy.ok("session_create", json!({"prompt": "look around", "shell": {"timeout_ms": 5000}})).await;
    let output = tool_results(&deputy, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(output.contains("\nPATH="), "the allowlist reaches the shell: {output}");
    for secret in ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "test-key", "DEPUTY_"] {
        assert!(!output.contains(secret), "{secret} leaked into the shell: {output}");
    }
}
