//! Sessions outlive the process (feature `session-store`): restarts, `kill -9` mid-turn, one
//! process per store, and the CLI's view of stored sessions. Every test drives the real binary.

use std::process::Output;

use serde_json::{Value, json};

use std::path::Path;

use crate::common::deputy::TestDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{Gate, MockLlm, MockResponse, anthropic};

/// The `messages` of the model request number `index` (0-based).
fn sent_messages(deputy: &TestDeputy, index: usize) -> Vec<Value> {
    deputy.mock.requests()[index].body["messages"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_restart_keeps_every_session_and_its_history() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["one"])));
    let id = id_of(&deputy.ok("session_create", json!({"prompt": "first", "labels": {"k": "v"}})).await);
    deputy.mock.push(MockResponse::sse(anthropic::text(&["two"])));
    deputy.ok("session_turn", json!({"session_id": id, "prompt": "second"})).await;

    let deputy = deputy.restart().await;
    let read = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(read["state"]["status"], "idle");
    assert_eq!(read["state"]["turns"], 2);
    assert_eq!(read["state"]["message_count"], 4);
    assert_eq!(read["state"]["labels"]["k"], "v");
    assert_eq!(read["state"]["last_turn"]["text"], "two");
    assert_eq!(read["billing"]["usage"]["output_tokens"].as_u64().map(|n| n > 0), Some(true));
    let list = deputy.ok("session_list", json!({})).await;
    assert_eq!((list["total"].as_u64(), list["sessions"][0]["session_id"].as_str()), (Some(1), Some(id.as_str())));

    deputy.mock.push(MockResponse::sse(anthropic::text(&["three"])));
    let turn = deputy.ok("session_turn", json!({"session_id": id, "prompt": "third"})).await;
    assert_eq!((turn["turn"].as_u64(), turn["text"].as_str()), (Some(3), Some("three")));
    let history = sent_messages(&deputy, 2);
    let texts: Vec<&str> = history.iter().map(|m| m["content"][0]["text"].as_str().unwrap_or("")).collect();
    assert_eq!(texts, ["first", "one", "second", "two", "third"], "the resumed turn sees the old history");
}

/// Where a `kill -9` lands during a turn.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// During the session's very first turn: the session exists, with no turn.
    FirstTurnStreaming,
    /// Mid-stream of the third turn, after two completed ones.
    LaterTurnStreaming,
    /// After the turn's tool calls ran, while the model writes its answer.
    AfterToolCalls,
}

async fn crash_at(point: KillPoint) {
    let deputy = TestDeputy::start().await;
    let gate = Gate::new();
    let paused = || MockResponse::sse(anthropic::text(&["never", " finished"])).pause_before_chunk(4, gate.clone());
    let (id, completed_turns, stored_messages) = match point {
        KillPoint::FirstTurnStreaming => {
            deputy.mock.push(paused());
            let running = deputy.ok("session_create", json!({"prompt": "doomed", "wait_ms": 50})).await;
            assert_eq!(running["status"], "running");
            (id_of(&running), 0, 0)
        }
        KillPoint::LaterTurnStreaming => {
            deputy.mock.push(MockResponse::sse(anthropic::text(&["a"])));
            let id = id_of(&deputy.ok("session_create", json!({"prompt": "one"})).await);
            deputy.mock.push(MockResponse::sse(anthropic::text(&["b"])));
            deputy.ok("session_turn", json!({"session_id": id, "prompt": "two"})).await;
            deputy.mock.push(paused());
            let running =
                deputy.ok("session_turn", json!({"session_id": id, "prompt": "doomed", "wait_ms": 50})).await;
            assert_eq!(running["status"], "running");
            (id, 2, 4)
        }
        KillPoint::AfterToolCalls => {
            deputy.mock.push(MockResponse::sse(anthropic::text(&["a"])));
            let id = id_of(&deputy.ok("session_create", json!({"prompt": "one"})).await);
            deputy.mock.push(MockResponse::sse(anthropic::tool_calls(None, &[("t1", "list_dir", json!({}))])));
            deputy.mock.push(paused());
            let running =
                deputy.ok("session_turn", json!({"session_id": id, "prompt": "doomed", "wait_ms": 50})).await;
            assert_eq!(running["status"], "running");
            (id, 1, 2)
        }
    };
    // The doomed turn's last model request has arrived and is streaming when deputy dies.
    let requests_before = match point {
        KillPoint::FirstTurnStreaming => 1,
        KillPoint::LaterTurnStreaming => 3,
        KillPoint::AfterToolCalls => 3,
    };
    deputy.mock.wait_for_requests(requests_before).await;
    let deputy = deputy.crash_and_restart().await;

    let read = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(read["state"]["turns"], completed_turns, "{point:?}: {read}");
    assert_eq!(read["state"]["message_count"], stored_messages, "{point:?}");
    assert_eq!(read["state"]["status"], "idle");

    deputy.mock.push(MockResponse::sse(anthropic::text(&["alive"])));
    let turn = deputy.ok("session_turn", json!({"session_id": id, "prompt": "after the crash"})).await;
    assert_eq!((turn["text"].as_str(), turn["turn"].as_u64()), (Some("alive"), Some(completed_turns + 1)));
    let sent = sent_messages(&deputy, requests_before);
    assert_eq!(sent.len(), stored_messages as usize + 1, "{point:?}: exactly the completed turns, then the prompt");
    gate.open();
}

#[tokio::test]
async fn a_crash_during_the_first_turn_leaves_the_session_empty_and_usable() {
    crash_at(KillPoint::FirstTurnStreaming).await;
}

#[tokio::test]
async fn a_crash_mid_stream_loses_only_the_turn_in_flight() {
    crash_at(KillPoint::LaterTurnStreaming).await;
}

#[tokio::test]
async fn a_crash_after_tool_calls_loses_only_the_turn_in_flight() {
    crash_at(KillPoint::AfterToolCalls).await;
}

/// `deputy ARGS` on the store, mock and workspace of a (running or stopped) test deputy.
pub(super) fn deputy_cli(mock: &MockLlm, workspace: &Path, home: &Path, args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"));
    command
        .args(args)
        .env("DEPUTY_STORE", home.join("sessions.redb"))
        .env("XDG_CONFIG_HOME", home)
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", format!("{}/anthropic", mock.base_url()))
        .env("DEPUTY_WORKSPACE", workspace)
        .env_remove("DEPUTY_CONFIG")
        .env_remove("DEPUTY_MODEL");
    command
}

pub(super) async fn run(command: std::process::Command) -> Output {
    tokio::process::Command::from(command).output().await.unwrap()
}

pub(super) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn one_process_per_store_and_the_cli_sees_stored_sessions() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["stored answer"])));
    let id = id_of(&deputy.ok("session_create", json!({"prompt": "remember me"})).await);

    // While `deputy serve` holds the store, another process is refused at once, clearly.
    let refused =
        run(deputy_cli(&deputy.mock, deputy.workspace.path(), deputy.home.path(), &["sessions", "list"])).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("in use by another deputy process"), "{stderr}");

    let stopped = deputy.stop().await;
    let cli = |args: &[&str]| deputy_cli(&stopped.mock, stopped.workspace.path(), stopped.home.path(), args);
    let list = run(cli(&["sessions", "list"])).await;
    assert!(list.status.success(), "{}", String::from_utf8_lossy(&list.stderr));
    assert!(stdout(&list).contains(&id) && stdout(&list).contains("remember me"), "{}", stdout(&list));

    let show = run(cli(&["sessions", "show", &id])).await;
    let text = stdout(&show);
    assert!(text.contains("── user\nremember me") && text.contains("── assistant\nstored answer"), "{text}");
    let json: Value = serde_json::from_slice(&run(cli(&["sessions", "show", &id, "--json"])).await.stdout).unwrap();
    assert_eq!(json["session"]["state"]["turns"], 1);
    assert_eq!(json["messages"][1]["content"][0]["text"], "stored answer");

    stopped.mock.push(MockResponse::sse(anthropic::text(&["resumed", " from the CLI"])));
    let turn = run(cli(&["turn", &id, "and now?"])).await;
    assert!(turn.status.success(), "{}", String::from_utf8_lossy(&turn.stderr));
    assert_eq!(stdout(&turn), "resumed from the CLI\n");
    let sent = stopped.mock.requests()[1].body["messages"].as_array().unwrap().len();
    assert_eq!(sent, 3, "the CLI turn saw the stored history");

    // Paging by cursor: one session per page, the second page named by the first's cursor.
    stopped.mock.push(MockResponse::sse(anthropic::text(&["a second session"])));
    assert!(run(cli(&["run", "--model", "anthropic:claude-test", "another one"])).await.status.success());
    let first = stdout(&run(cli(&["sessions", "list", "--limit", "1"])).await);
    let cursor = first.lines().find_map(|line| line.strip_prefix("next page: --cursor ")).expect(&first).to_owned();
    let second = stdout(&run(cli(&["sessions", "list", "--limit", "1", "--cursor", &cursor])).await);
    assert!(first.contains("another one") && second.contains(&id), "{first}{second}");
    assert!(!second.contains("next page"), "the last page has no cursor: {second}");

    let archive = run(cli(&["sessions", "archive", &id])).await;
    assert_eq!(stdout(&archive), format!("archived {id}\n"));
    assert!(!stdout(&run(cli(&["sessions", "list"])).await).contains(&id));
    let all = stdout(&run(cli(&["sessions", "list", "--all"])).await);
    assert!(all.contains(&id) && all.contains("archived"), "{all}");
    // The filters: by status, and by words of the title.
    let archived = stdout(&run(cli(&["sessions", "list", "--status", "archived", "--json"])).await);
    let archived: Value = serde_json::from_str(&archived).unwrap();
    assert_eq!((archived["total"].as_u64(), &archived["sessions"][0]["session_id"]), (Some(1), &json!(id)));
    let titled = stdout(&run(cli(&["sessions", "list", "--all", "--title", "ANOTHER", "--json"])).await);
    let titled: Value = serde_json::from_str(&titled).unwrap();
    assert_eq!((titled["total"].as_u64(), titled["sessions"][0]["title"].as_str()), (Some(1), Some("another one")));

    let refused = run(cli(&["turn", &id, "more"])).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr.contains("SESSION_NOT_FOUND: ") && stderr.contains("archived"), "{stderr}");
    let missing = run(cli(&["sessions", "show", "no-such-id"])).await;
    assert!(String::from_utf8_lossy(&missing.stderr).contains("SESSION_NOT_FOUND: "));
}
