//! The `deputy` command line as a user meets it.

use std::path::Path;
use std::process::Command;

use crate::common::deputy::with_store;
use crate::common::file_in;
use crate::common::mock_llm::{MockLlm, MockResponse, anthropic};

/// `deputy` isolated from the user's config and store; its store (if the build has one) lives
/// in `home`.
fn deputy(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_deputy"));
    command.env_remove("DEPUTY_MODEL").env_remove("DEPUTY_CONFIG").env("XDG_CONFIG_HOME", home);
    with_store(&mut command, home);
    command
}

/// `deputy ARGS` (isolated as [`deputy`]) with the `anthropic` provider pointed at `mock`.
#[cfg(feature = "session-store")]
fn anthropic_on(home: &Path, mock: &MockLlm, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::from(deputy(home));
    command.args(args).env("ANTHROPIC_API_KEY", "k").env("ANTHROPIC_BASE_URL", mock.base_url());
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

/// `--output-schema` reaches the model (the forced final tool) and stdout gets the validated
/// value alone; an answer that never validates exits 1 with the errors on stderr.
#[tokio::test]
async fn run_with_an_output_schema_prints_the_validated_json() {
    use deputy::llm::FINAL_ANSWER_TOOL;
    use serde_json::json;

    let mock = MockLlm::start().await;
    let home = tempfile::tempdir().unwrap();
    let schema = json!({"type": "object", "required": ["answer"], "properties": {"answer": {"type": "integer"}}});
    let schema_file = file_in(home.path(), "schema.json", &schema.to_string());
    let run = |retries: &str| {
        let mut command = tokio::process::Command::from(deputy(home.path()));
        command
            .args(["run", "--model", "anthropic:claude-test", "--output-schema"])
            .arg(&schema_file)
            .args(["--structured-output-retries", retries, "six times seven?"])
            .env("ANTHROPIC_API_KEY", "k")
            .env("ANTHROPIC_BASE_URL", mock.base_url());
        command
    };

    let wrong = [("toolu_1", FINAL_ANSWER_TOOL, json!({"answer": "forty-two"}))];
    mock.push(MockResponse::sse(anthropic::tool_calls(Some("Thinking aloud."), &wrong)));
    let right = [("toolu_2", FINAL_ANSWER_TOOL, json!({"answer": 42}))];
    mock.push(MockResponse::sse(anthropic::tool_calls(None, &right)));
    let output = run("1").output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "{\"answer\":42}\n", "no narration, no rejected answer");
    let request = &mock.requests()[0];
    assert_eq!(request.body["tool_choice"], json!({"type": "any"}));
    assert_eq!(request.body["tools"].as_array().unwrap().last().unwrap()["input_schema"], schema);

    mock.push(MockResponse::sse(anthropic::tool_calls(None, &wrong)));
    let output = run("0").output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(output.stdout.is_empty());
    assert!(stderr.contains("structured output invalid") && stderr.contains("/answer: "), "{stderr}");

    std::fs::write(&schema_file, "{not json").unwrap();
    let output = run("0").output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("INVALID_REQUEST: ") && stderr.contains("not JSON"), "{stderr}");
    assert_eq!(mock.requests().len(), 3, "a bad schema file reaches no model");
}

/// `deputy turn --output-schema` gives one turn of a stored session its schema (OpenAI's
/// `response_format` here), and prints the validated value alone.
#[cfg(feature = "session-store")]
#[tokio::test]
async fn turn_with_an_output_schema_gives_that_turn_its_schema() {
    use crate::common::mock_llm::openai;

    let mock = MockLlm::start().await;
    let home = tempfile::tempdir().unwrap();
    let env = |command: &mut tokio::process::Command| {
        command.env("OPENAI_API_KEY", "k").env("OPENAI_BASE_URL", format!("{}/v1", mock.base_url()));
    };
    mock.push(MockResponse::sse(openai::text(&["Noted."])));
    let mut run = tokio::process::Command::from(deputy(home.path()));
    run.args(["run", "--model", "openai:gpt-test", "remember 42"]);
    env(&mut run);
    let output = run.output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let id = stderr.lines().find_map(|line| line.strip_prefix("session ")).unwrap().to_owned();

    let schema_file = file_in(home.path(), "schema.json", r#"{"type": "array", "items": {"type": "integer"}}"#);
    mock.push(MockResponse::sse(openai::text(&["[42]"])));
    let mut turn = tokio::process::Command::from(deputy(home.path()));
    turn.args(["turn", &id, "the number, as a list"]).arg("--output-schema").arg(&schema_file);
    env(&mut turn);
    let output = turn.output().await.unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "[42]\n");
    let request = &mock.requests()[1];
    let system = request.body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("only a JSON value"), "{system}");
    assert_eq!(mock.requests()[0].body.get("response_format"), None);
    assert_eq!(mock.requests().len(), 2);
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn send_puts_a_message_in_a_stored_sessions_inbox_for_its_next_turn() {
    let mock = MockLlm::start().await;
    let home = tempfile::tempdir().unwrap();
    let command = |args: &[&str]| anthropic_on(home.path(), &mock, args);
    mock.push(MockResponse::sse(anthropic::text(&["Ready."])));
    let output = command(&["run", "--model", "anthropic:claude-test", "wait for notes"]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let id = stderr.lines().find_map(|line| line.strip_prefix("session ")).unwrap().to_owned();

    let output = command(&["send", &id, "the deadline moved to Friday"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(stdout.starts_with("m-") && stdout.trim_end().ends_with(" queued"), "{stdout}");

    mock.push(MockResponse::sse(anthropic::text(&["Noted: Friday."])));
    let output = command(&["turn", &id, "what changed?"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let prompt = mock.requests()[1].body["messages"][2].to_string();
    assert!(prompt.contains("the deadline moved to Friday") && prompt.contains("what changed?"), "{prompt}");

    let output = command(&["send", "no-such-session", "hello"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("SESSION_NOT_FOUND"));
}

/// `deputy call`: any operation of the table every surface shares, by its tool or its
/// JSON-RPC method name, with JSON arguments; the result on stdout, errors as every command's.
#[cfg(feature = "session-store")]
#[tokio::test]
async fn call_reaches_every_operation_by_tool_or_method_name() {
    let mock = MockLlm::start().await;
    let home = tempfile::tempdir().unwrap();
    let command = |args: &[&str]| anthropic_on(home.path(), &mock, args);
    mock.push(MockResponse::sse(anthropic::text(&["Created."])));
    let create = r#"{"prompt": "hello", "model": "anthropic:claude-test"}"#;
    let output = command(&["call", "session_create", create]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let created: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!((created["status"].as_str(), created["text"].as_str()), (Some("completed"), Some("Created.")));
    let id = created["session_id"].as_str().unwrap().to_owned();

    let read = serde_json::json!({"session_id": id}).to_string();
    let output = command(&["call", "session/read", &read]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let view: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(view["state"]["turns"], 1);

    let output = command(&["call", "session_list"]).output().await.unwrap();
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(list["sessions"][0]["session_id"].as_str(), Some(id.as_str()));

    let output = command(&["call", "session_read", r#"{"session_id": "no-such-session"}"#]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("SESSION_NOT_FOUND"));
    let output = command(&["call", "session_fly", "{}"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("INVALID_REQUEST: unknown operation"));
    let output = command(&["call", "session_list", "not json"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("arguments are not JSON"));
}
