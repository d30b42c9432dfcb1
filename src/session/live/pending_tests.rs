//! Callback tools and approvals through the live service, against the scripted provider: the
//! turn stops on held calls, the caller's answers resume the loop exactly there.

use serde_json::json;

use super::test_support::*;
use super::*;
use crate::error::ErrorCode;
use crate::llm::scripted::{ScriptedProvider, ScriptedResponse};
use crate::model::TurnStatus;
use crate::model::{ApprovalAnswer, Decision, PendingKind, ToolResultAnswer};
use crate::model::{SessionStatus, StopReason};
use crate::tools::{ApprovalPolicy, BuiltinTool, CallbackTool, ShellRequest, ToolRequest, Workspace};

fn callback(name: &str) -> CallbackTool {
    CallbackTool {
        name: name.into(),
        description: format!("{name}, run by the caller"),
        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }
}

fn create_with(tools: ToolRequest) -> CreateSessionRequest {
    let mut request = CreateSessionRequest { prompt: "go".into(), ..CreateSessionRequest::default() };
    request.build.tools = tools;
    request
}

fn callbacks(names: &[&str]) -> ToolRequest {
    ToolRequest { callbacks: names.iter().map(|name| callback(name)).collect(), ..ToolRequest::default() }
}

fn result(id: &str, content: &str) -> ToolResultAnswer {
    ToolResultAnswer { tool_use_id: id.into(), content: content.into(), is_error: false }
}

fn answer(results: Vec<ToolResultAnswer>, approvals: Vec<ApprovalAnswer>) -> TurnRequest {
    TurnRequest { tool_results: results, approvals, ..TurnRequest::default() }
}

fn decide(id: &str, decision: Decision) -> ApprovalAnswer {
    ApprovalAnswer { tool_use_id: id.into(), decision }
}

#[tokio::test]
async fn a_callback_round_trip_resumes_the_loop_where_it_stopped() {
    let provider = ScriptedProvider::new([
        ScriptedResponse::tool_calls(&[("call_1", "lookup", json!({"q": "weather"}))]),
        ScriptedResponse::text(&["It is sunny."]),
    ]);
    let service = scripted_service(provider.clone(), None, None);
    let held = service.create_session(create_with(callbacks(&["lookup"]))).await.unwrap();
    assert_eq!(
        (held.status, held.stop_reason.as_ref().map(StopReason::as_str)),
        (TurnStatus::PendingToolCalls, Some("pending_tool_calls"))
    );
    assert_eq!(held.pending.len(), 1);
    let pending = &held.pending[0];
    assert_eq!((pending.tool_use_id.as_str(), pending.name.as_str()), ("call_1", "lookup"));
    assert_eq!((pending.kind, &pending.arguments), (PendingKind::Callback, &json!({"q": "weather"})));
    let tools: Vec<String> = provider.requests()[0].tools.iter().map(|t| t.name.clone()).collect();
    assert!(tools.iter().any(|t| t == "lookup") && !tools.iter().any(|t| t == "read_file"), "{tools:?}");

    let view = service.read(&held.session_id, None).await.unwrap();
    assert_eq!((view.state.status, view.state.pending.len()), (SessionStatus::Idle, 1));
    assert_eq!(view.state.message_count, 2, "the prompt and the assistant's tool_use, no result yet");

    let done = service.start_turn(&held.session_id, answer(vec![result("call_1", "sunny, 24°C")], vec![])).await;
    let done = done.unwrap();
    assert_eq!((done.status, done.text.as_str(), done.turn), (TurnStatus::Completed, "It is sunny.", 2));
    assert!(done.pending.is_empty());
    assert_eq!(results_sent(&provider, 1), [("call_1".to_owned(), "sunny, 24°C".to_owned(), false)]);
    assert!(service.read(&held.session_id, None).await.unwrap().state.pending.is_empty());
}

#[tokio::test]
async fn two_calls_of_one_step_are_answered_together_in_call_order() {
    let provider = ScriptedProvider::new([
        ScriptedResponse::tool_calls(&[("a", "lookup", json!({"q": "1"})), ("b", "notify", json!({}))]),
        ScriptedResponse::text(&["both done"]),
    ]);
    let service = scripted_service(provider.clone(), None, None);
    let held = service.create_session(create_with(callbacks(&["lookup", "notify"]))).await.unwrap();
    let ids: Vec<&str> = held.pending.iter().map(|call| call.tool_use_id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    // Answered in the other order, with a prompt: the history keeps the call order.
    let mut request =
        answer(vec![result("b", "sent"), ToolResultAnswer { is_error: true, ..result("a", "no") }], vec![]);
    request.prompt = "thanks".into();
    let done = service.start_turn(&held.session_id, request).await.unwrap();
    assert_eq!(done.text, "both done");
    assert_eq!(
        results_sent(&provider, 1),
        [("a".to_owned(), "no".to_owned(), true), ("b".to_owned(), "sent".to_owned(), false)]
    );
    let last = provider.requests()[1].messages.last().unwrap().clone();
    assert_eq!(last.text(), "thanks", "the prompt follows the results in the same user message");
}

#[tokio::test]
async fn a_mixed_step_runs_the_builtin_and_holds_the_callback() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "forty-two").unwrap();
    let provider = ScriptedProvider::new([
        ScriptedResponse::tool_calls(&[
            ("r", "read_file", json!({"path": "notes.txt"})),
            ("c", "lookup", json!({"q": "x"})),
        ]),
        ScriptedResponse::text(&["merged"]),
    ]);
    let service = scripted_service(provider.clone(), Some(Workspace::new(dir.path()).unwrap()), None);
    let tools = ToolRequest { builtins: Some(vec![BuiltinTool::ReadFile]), ..callbacks(&["lookup"]) };
    let held = service.create_session(create_with(tools)).await.unwrap();
    assert_eq!(held.tool_calls, 1, "the builtin ran");
    let ids: Vec<&str> = held.pending.iter().map(|call| call.tool_use_id.as_str()).collect();
    assert_eq!(ids, ["c"], "only the callback waits");
    let done = service.start_turn(&held.session_id, answer(vec![result("c", "found")], vec![])).await.unwrap();
    assert_eq!(done.text, "merged");
    assert_eq!(
        results_sent(&provider, 1),
        [("r".to_owned(), "forty-two".to_owned(), false), ("c".to_owned(), "found".to_owned(), false)]
    );
}

#[tokio::test]
async fn wrong_answers_are_invalid_and_lose_nothing() {
    let provider = ScriptedProvider::new([
        ScriptedResponse::text(&["plain"]),
        ScriptedResponse::tool_calls(&[("a", "lookup", json!({})), ("b", "lookup", json!({}))]),
        ScriptedResponse::text(&["finally"]),
    ]);
    let service = scripted_service(provider.clone(), None, None);
    let id = service.create_session(create_with(callbacks(&["lookup"]))).await.unwrap().session_id;
    // Answers while nothing is pending.
    let error = service.start_turn(&id, answer(vec![result("a", "x")], vec![])).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidRequest);

    let held = service.start_turn(&id, TurnRequest { prompt: "use it".into(), ..TurnRequest::default() }).await;
    assert_eq!(held.unwrap().pending.len(), 2);
    let before = service.read(&id, None).await.unwrap();
    for bad in [
        answer(vec![result("a", "x")], vec![]),
        answer(vec![result("a", "x"), result("b", "y"), result("zz", "?")], vec![]),
        answer(vec![result("a", "x"), result("a", "x"), result("b", "y")], vec![]),
        answer(vec![result("a", "x")], vec![decide("b", Decision::Allow)]),
        TurnRequest { prompt: "a plain prompt".into(), ..TurnRequest::default() },
    ] {
        let error = service.start_turn(&id, bad).await.unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidRequest, "{error}");
    }
    let after = service.read(&id, None).await.unwrap();
    assert_eq!(after.state.pending, before.state.pending, "the pending calls stay");
    assert_eq!((after.state.turns, after.state.message_count), (before.state.turns, before.state.message_count));
    assert_eq!(after.state.status, SessionStatus::Idle, "a refusal leaves the session idle, not running");
    assert_eq!(provider.requests().len(), 2, "no refused answer reached the model");

    let done = service.start_turn(&id, answer(vec![result("a", "x"), result("b", "y")], vec![])).await.unwrap();
    assert_eq!(done.text, "finally");
}

fn approval_session(policy: ApprovalPolicy, timeout_ms: Option<u64>) -> ToolRequest {
    ToolRequest {
        builtins: Some(vec![BuiltinTool::ReadFile]),
        shell: Some(ShellRequest::Enabled(true)),
        approval: Some(policy),
        approval_timeout_ms: timeout_ms,
        ..ToolRequest::default()
    }
}

#[tokio::test]
async fn an_allowed_call_runs_and_a_denied_one_is_an_error_for_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let provider = ScriptedProvider::new([
        ScriptedResponse::tool_calls(&[
            ("s1", "shell", json!({"command": "echo allowed > allowed.txt"})),
            ("s2", "shell", json!({"command": "echo denied > denied.txt"})),
            ("r", "read_file", json!({"path": "nothing-here"})),
        ]),
        ScriptedResponse::text(&["ok"]),
    ]);
    let service = scripted_service(provider.clone(), Some(Workspace::new(dir.path()).unwrap()), None);
    let request = create_with(approval_session(serde_json::from_value(json!("always")).unwrap(), None));
    let held = service.create_session(request).await.unwrap();
    assert_eq!(held.status, TurnStatus::PendingToolCalls);
    let kinds: Vec<(&str, PendingKind)> = held.pending.iter().map(|c| (c.tool_use_id.as_str(), c.kind)).collect();
    assert_eq!(kinds, [("s1", PendingKind::Approval), ("s2", PendingKind::Approval)], "read_file needs none");
    assert!(!dir.path().join("allowed.txt").exists(), "nothing runs before the approval");

    let approvals = vec![decide("s1", Decision::Allow), decide("s2", Decision::Deny)];
    let done = service.start_turn(&held.session_id, answer(vec![], approvals)).await.unwrap();
    assert_eq!((done.text.as_str(), done.tool_calls), ("ok", 1));
    assert!(dir.path().join("allowed.txt").exists());
    assert!(!dir.path().join("denied.txt").exists());
    let sent = results_sent(&provider, 1);
    assert_eq!(sent.iter().map(|(id, _, _)| id.as_str()).collect::<Vec<_>>(), ["s1", "s2", "r"]);
    assert!(!sent[0].2 && sent[0].1.starts_with("exit code 0"));
    assert_eq!((sent[1].1.as_str(), sent[1].2), ("denied by the caller", true));
}

#[tokio::test]
async fn an_approved_callback_then_waits_for_its_result() {
    let provider = ScriptedProvider::new([
        ScriptedResponse::tool_calls(&[("d", "deploy", json!({}))]),
        ScriptedResponse::text(&["deployed"]),
    ]);
    let service = scripted_service(provider.clone(), None, None);
    let tools = ToolRequest {
        approval: Some(ApprovalPolicy::Tools { tools: vec!["deploy".into()] }),
        ..callbacks(&["deploy"])
    };
    let held = service.create_session(create_with(tools)).await.unwrap();
    assert_eq!(held.pending[0].kind, PendingKind::Approval);
    let next = service.start_turn(&held.session_id, answer(vec![], vec![decide("d", Decision::Allow)])).await;
    let next = next.unwrap();
    assert_eq!((next.status, next.pending[0].kind), (TurnStatus::PendingToolCalls, PendingKind::Callback));
    let done = service.start_turn(&held.session_id, answer(vec![result("d", "v2 live")], vec![])).await.unwrap();
    assert_eq!(done.text, "deployed");
    assert_eq!(provider.requests().len(), 2, "the model was called once the step closed, not before");
}

#[tokio::test]
async fn an_expired_approval_is_denied_by_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    let provider = ScriptedProvider::new([
        ScriptedResponse::tool_calls(&[("s", "shell", json!({"command": "echo late > late.txt"}))]),
        ScriptedResponse::text(&["understood"]),
    ]);
    let service = scripted_service(provider.clone(), Some(Workspace::new(dir.path()).unwrap()), None);
    let policy = ApprovalPolicy::Tools { tools: vec!["shell".into()] };
    let held = service.create_session(create_with(approval_session(policy, Some(20)))).await.unwrap();
    let expires_at = held.pending[0].expires_at.unwrap();
    while chrono::Utc::now() <= expires_at {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Too late: even an "allow" is overridden, and a plain prompt is enough to go on.
    let done = service.start_turn(&held.session_id, answer(vec![], vec![decide("s", Decision::Allow)])).await;
    assert_eq!(done.unwrap().text, "understood");
    assert!(!dir.path().join("late.txt").exists());
    let sent = results_sent(&provider, 1);
    assert!(sent[0].2 && sent[0].1.contains("timed out"), "{sent:?}");
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn a_pending_step_survives_a_restart_with_the_store() {
    use crate::ids::SessionId;
    use crate::llm::Message;

    let dir = tempfile::tempdir().unwrap();
    let store: crate::store::SharedStore = Some(temp_store(dir.path()));
    let provider = ScriptedProvider::new([ScriptedResponse::tool_calls(&[("a", "lookup", json!({"q": "1"}))])]);
    let id: SessionId = {
        let before = scripted_service(provider.clone(), None, store.clone());
        before.create_session(create_with(callbacks(&["lookup"]))).await.unwrap().session_id
    };
    let after = scripted_service(provider.clone(), None, store);
    let view = after.read(&id, None).await.unwrap();
    assert_eq!(view.state.pending.iter().map(|c| c.tool_use_id.as_str()).collect::<Vec<_>>(), ["a"]);
    let error = after.start_turn(&id, TurnRequest { prompt: "hi".into(), ..TurnRequest::default() }).await;
    assert_eq!(error.unwrap_err().code(), ErrorCode::InvalidRequest);
    provider.push(ScriptedResponse::text(&["resumed"]));
    let done = after.start_turn(&id, answer(vec![result("a", "one")], vec![])).await.unwrap();
    assert_eq!(done.text, "resumed");
    let history: Vec<Message> = after.history(&id).await.unwrap().messages;
    assert_eq!(history.len(), 4, "prompt, tool_use, tool_result, answer");
    assert_eq!(results_sent(&provider, 1), [("a".to_owned(), "one".to_owned(), false)]);
    let restored = provider.requests()[1].tools.iter().any(|tool| tool.name == "lookup");
    assert!(restored, "the callback declaration was restored");
}
