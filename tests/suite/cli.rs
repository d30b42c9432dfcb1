//! The `deputy` command line as a user meets it.

use std::path::Path;
use std::process::Command;

use crate::common::mock_llm::{MockLlm, MockResponse, anthropic};

/// `deputy` isolated from the user's config and store; its store (if the build has one) lives
/// in `home`.
fn deputy(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_deputy"));
    command.env_remove("DEPUTY_MODEL").env_remove("DEPUTY_CONFIG").env("XDG_CONFIG_HOME", home);
    if cfg!(feature = "session-store") {
        command.env("DEPUTY_STORE", home.join("sessions.redb"));
    } else {
        command.env_remove("DEPUTY_STORE");
    }
    command
}

#[test]
fn help_explains_the_commands() {
    let home = tempfile::tempdir().unwrap();
    let output = deputy(home.path()).arg("--help").output().unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    for needle in ["serve", "run", "ANTHROPIC_API_KEY", "provider:model"] {
        assert!(help.contains(needle), "--help mentions {needle}:\n{help}");
    }
}

#[tokio::test]
async fn run_streams_the_answer_to_stdout_and_the_session_to_stderr() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(anthropic::text(&["Hello", " from", " deputy"])));
    let home = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::from(deputy(home.path()))
        .args(["run", "--model", "anthropic:claude-test", "say hello"])
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "Hello from deputy\n");
    assert!(stderr.starts_with("session "), "{stderr}");
}

#[test]
fn missing_credentials_name_the_variable_to_set() {
    let home = tempfile::tempdir().unwrap();
    let output = deputy(home.path())
        .args(["run", "--model", "anthropic:claude-test", "hi"])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("AGENT_ERROR: ") && stderr.contains("ANTHROPIC_API_KEY"), "{stderr}");
    assert!(output.stdout.is_empty());
}

#[tokio::test]
async fn an_exhausted_budget_exits_2() {
    let mock = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let calls = [("t1", "list_dir", serde_json::json!({})), ("t2", "list_dir", serde_json::json!({}))];
    mock.push(MockResponse::sse(anthropic::tool_calls(None, &calls)));
    let output = tokio::process::Command::from(deputy(dir.path()))
        .args(["run", "--model", "anthropic:claude-test", "--budget-tool-calls", "1", "look"])
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .env("DEPUTY_WORKSPACE", dir.path())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
}
