//! Every lifecycle rule of the contract, against the scripted provider.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::json;

use super::test_support::*;
use super::*;
use crate::agent::AgentBuildConfig;
use crate::error::ErrorCode;
use crate::llm::scripted::{Gate, ScriptedProvider, ScriptedResponse, Step};
use crate::llm::{ContentBlock, LlmError, LlmErrorKind, Role, StopReason, StreamEvent, Usage};
use crate::model::Budget;
use crate::model::SessionStatus;
use crate::model::TurnStatus;
use crate::tools::Workspace;

fn service_with(provider: Arc<ScriptedProvider>, workspace: Option<Workspace>) -> Arc<LiveSessionService> {
    Arc::new(scripted_service(provider, workspace, None))
}

fn service(responses: Vec<ScriptedResponse>) -> (Arc<LiveSessionService>, Arc<ScriptedProvider>) {
    let provider = ScriptedProvider::new(responses);
    (service_with(provider.clone(), None), provider)
}

/// A response that streams `before`, then waits on `gate` before finishing with `after`.
fn paused_text(before: &str, gate: &Gate, after: &str) -> ScriptedResponse {
    ScriptedResponse::new(vec![
        Step::Event(StreamEvent::TextDelta(before.into())),
        Step::Wait(gate.clone()),
        Step::Event(StreamEvent::TextDelta(after.into())),
        Step::Event(StreamEvent::Finished { stop_reason: StopReason::EndTurn }),
    ])
}

/// A session whose second turn has streamed "a" and waits on `gate` before finishing "ab".
struct MidTurn {
    service: Arc<LiveSessionService>,
    id: crate::ids::SessionId,
    gate: Gate,
    running: tokio::task::JoinHandle<Result<RunResult, crate::error::SessionError>>,
}

async fn mid_turn() -> MidTurn {
    let gate = Gate::new();
    let arrived = Gate::new();
    let (service, _) =
        service(vec![ScriptedResponse::text(&["ready"]), paused_text("a", &gate, "b").signal_arrival(&arrived)]);
    let id = service.create_session(create("hi")).await.unwrap().session_id;
    let running = tokio::spawn({
        let (service, id) = (service.clone(), id.clone());
        async move { service.start_turn(&id, turn("go")).await }
    });
    arrived.wait().await;
    MidTurn { service, id, gate, running }
}

#[tokio::test]
async fn create_runs_the_first_turn_and_turns_continue_the_history() {
    let (service, provider) =
        service(vec![ScriptedResponse::text(&["Hel", "lo"]), ScriptedResponse::text(&["Again"])]);
    let first = service.create_session(create("hi")).await.unwrap();
    assert_eq!((first.status, first.turn, first.text.as_str()), (TurnStatus::Completed, 1, "Hello"));
    assert_eq!(first.stop_reason.as_ref().map(crate::model::StopReason::as_str), Some("end_turn"));
    assert_eq!(first.usage.tokens, Usage { input_tokens: 10, output_tokens: 5, ..Usage::default() });

    let second = service.start_turn(&first.session_id, turn("more")).await.unwrap();
    assert_eq!((second.turn, second.text.as_str()), (2, "Again"));

    let requests = provider.requests();
    assert_eq!(requests[1].messages.len(), 3, "user, assistant, user");
    assert_eq!(requests[1].messages[1].text(), "Hello");
    assert_eq!(requests[1].model, "model");

    let view = service.read(&first.session_id, None).await.unwrap();
    assert_eq!(view.state.turns, 2);
    assert_eq!(view.state.status, SessionStatus::Idle);
    assert_eq!(view.state.message_count, 4);
    assert_eq!(view.state.title, "hi");
    assert_eq!(view.billing.usage.input_tokens, 20);
    assert_eq!(view.billing.total_tokens, 30);
    assert_eq!(view.state.last_turn.as_ref().map(|t| t.text.as_str()), Some("Again"));
}

#[tokio::test]
async fn two_hundred_concurrent_turns_exactly_one_wins() {
    let gate = Gate::new();
    let (service, _) = service(vec![ScriptedResponse::text(&["ready"]), paused_text("a", &gate, "b")]);
    let id = service.create_session(create("hi")).await.unwrap().session_id;

    let barrier = Arc::new(tokio::sync::Barrier::new(200));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..200 {
        let (service, id, barrier, done_tx) = (service.clone(), id.clone(), barrier.clone(), done_tx.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            let _ = done_tx.send(service.start_turn(&id, turn("go")).await);
        });
    }
    // The 199 losers answer at once, while the winner is still paused on the gate.
    let mut busy = 0;
    for _ in 0..199 {
        let result = done_rx.recv().await.unwrap();
        assert_eq!(result.unwrap_err().code(), ErrorCode::SessionBusy);
        busy += 1;
    }
    gate.open();
    let winner = done_rx.recv().await.unwrap().unwrap();
    assert_eq!((busy, winner.text.as_str(), winner.turn), (199, "ab", 2));
}

#[tokio::test]
async fn interrupt_of_an_idle_session_is_not_running() {
    let (service, _) = service(vec![ScriptedResponse::text(&["x"])]);
    let id = service.create_session(create("hi")).await.unwrap().session_id;
    assert_eq!(service.interrupt(&id, true).await.unwrap_err().code(), ErrorCode::SessionNotRunning);
}

#[tokio::test]
async fn interrupt_mid_turn_cancels_it_and_the_next_turn_works() {
    let gate = Gate::new();
    let arrived = Gate::new();
    let (service, provider) = service(vec![
        ScriptedResponse::text(&["ready"]),
        paused_text("partial", &gate, " never").signal_arrival(&arrived),
        ScriptedResponse::text(&["recovered"]),
    ]);
    let id = service.create_session(create("hi")).await.unwrap().session_id;

    let running = tokio::spawn({
        let (service, id) = (service.clone(), id.clone());
        async move { service.start_turn(&id, turn("long job")).await }
    });
    arrived.wait().await;
    // The text delta is emitted before the pause; give the actor a moment to consume it.
    tokio::task::yield_now().await;
    let interrupted = service.interrupt(&id, true).await.unwrap();
    assert!(interrupted.interrupted);
    let cancelled = running.await.unwrap().unwrap();
    assert_eq!(cancelled.status, TurnStatus::Cancelled);
    assert_eq!(cancelled.stop_reason.as_ref().map(crate::model::StopReason::as_str), Some("cancelled"));

    let next = service.start_turn(&id, turn("again")).await.unwrap();
    assert_eq!(next.text, "recovered");
    // The interrupted turn left a valid history: its prompt, then the (marked) partial answer.
    let history = &provider.requests()[2].messages;
    assert_eq!(history[2].text(), "long job");
    assert_eq!(history[3].role, Role::Assistant);
    assert!(history[3].text().ends_with("[interrupted]"), "{:?}", history[3]);
    assert_eq!(history[4].text(), "again");
}

#[tokio::test]
async fn read_during_a_turn_answers_at_once_and_long_polls_on_request() {
    let MidTurn { service, id, gate, running } = mid_turn().await;

    let view = service.read(&id, None).await.unwrap();
    assert_eq!((view.state.status, view.state.running_turn), (SessionStatus::Running, Some(2)));
    let listed = service.list(ListQuery::default()).await.unwrap();
    assert_eq!(listed.sessions[0].status, SessionStatus::Running);

    let poll = tokio::spawn({
        let (service, id) = (service.clone(), id.clone());
        async move { service.read(&id, Some(Duration::from_secs(60))).await }
    });
    tokio::task::yield_now().await;
    assert!(!poll.is_finished(), "the long poll waits for the turn");
    gate.open();
    let view = poll.await.unwrap().unwrap();
    assert_eq!(view.state.status, SessionStatus::Idle);
    assert_eq!(view.state.last_turn.unwrap().text, "ab");
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_turn_that_outlives_wait_answers_running_and_read_collects_it() {
    let gate = Gate::new();
    let (service, _) = service(vec![paused_text("slow ", &gate, "answer")]);
    let mut request = create("hi");
    request.turn.wait = Some(Duration::from_millis(20));
    let running = service.create_session(request).await.unwrap();
    assert_eq!((running.status, running.turn), (TurnStatus::Running, 1));

    gate.open();
    let view = service.read(&running.session_id, Some(Duration::from_secs(60))).await.unwrap();
    let last = view.state.last_turn.unwrap();
    assert_eq!((last.status, last.text.as_str(), last.turn), (TurnStatus::Completed, "slow answer", 1));
}

#[tokio::test]
async fn a_caller_that_cancels_while_waiting_interrupts_the_turn() {
    let arrived = Gate::new();
    let (service, _) = service(vec![paused_text("x", &Gate::new(), "y").signal_arrival(&arrived)]);
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut request = create("hi");
    request.turn.cancel = Some(cancel.clone());
    let pending = tokio::spawn({
        let service = service.clone();
        async move { service.create_session(request).await }
    });
    arrived.wait().await;
    cancel.cancel();
    let result = pending.await.unwrap().unwrap();
    assert_eq!(result.status, TurnStatus::Cancelled);
}

#[tokio::test]
async fn archive_mid_turn_waits_for_the_turn_then_forgets_the_session() {
    let MidTurn { service, id, gate, running } = mid_turn().await;

    let mut archive = Box::pin(service.archive(&id));
    for _ in 0..10 {
        assert!((&mut archive).now_or_never().is_none(), "archive must wait for the running turn");
        tokio::task::yield_now().await;
    }
    // New turns are refused while the archive waits.
    assert_eq!(service.start_turn(&id, turn("no")).await.unwrap_err().code(), ErrorCode::SessionNotFound);
    gate.open();
    let archived = archive.await.unwrap();
    assert!(archived.archived);
    assert_eq!(running.await.unwrap().unwrap().text, "ab", "the running turn completed");
    assert_eq!(service.read(&id, None).await.unwrap_err().code(), ErrorCode::SessionNotFound);
    assert_eq!(service.list(ListQuery::default()).await.unwrap().total, 0);
}

#[tokio::test]
async fn unknown_ids_are_not_found_everywhere() {
    let (service, _) = service(vec![]);
    let id = crate::ids::SessionId::from_string("nope");
    assert_eq!(service.start_turn(&id, turn("x")).await.unwrap_err().code(), ErrorCode::SessionNotFound);
    assert_eq!(service.read(&id, None).await.unwrap_err().code(), ErrorCode::SessionNotFound);
    assert_eq!(service.interrupt(&id, true).await.unwrap_err().code(), ErrorCode::SessionNotFound);
    assert_eq!(service.archive(&id).await.unwrap_err().code(), ErrorCode::SessionNotFound);
}

#[tokio::test]
async fn bad_requests_are_invalid_and_create_nothing() {
    let (service, _) = service(vec![]);
    assert_eq!(service.create_session(create("  ")).await.unwrap_err().code(), ErrorCode::InvalidRequest);
    let mut request = create("hi");
    request.build.model = Some("nocolon".into());
    assert_eq!(service.create_session(request).await.unwrap_err().code(), ErrorCode::InvalidRequest);
    assert_eq!(service.list(ListQuery::default()).await.unwrap().total, 0);
}

#[tokio::test]
async fn a_failed_turn_reports_agent_error_and_leaves_the_session_usable() {
    let (service, provider) = service(vec![
        ScriptedResponse::text(&["ready"]),
        ScriptedResponse::new(vec![
            Step::Event(StreamEvent::TextDelta("half".into())),
            Step::Fail(LlmError::new(LlmErrorKind::StreamBroken, "connection reset")),
        ]),
        ScriptedResponse::text(&["fine"]),
    ]);
    let id = service.create_session(create("hi")).await.unwrap().session_id;
    let error = service.start_turn(&id, turn("go")).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::AgentError);
    assert_eq!(error.kind(), Some(crate::error::ErrorKind::StreamBroken));
    assert_eq!(error.session_id(), Some(&id));
    assert!(error.to_string().contains("connection reset"));

    let view = service.read(&id, None).await.unwrap();
    let last_turn = view.state.last_turn.as_ref().unwrap();
    assert_eq!(
        (last_turn.status, last_turn.error_kind),
        (TurnStatus::Failed, Some(crate::error::ErrorKind::StreamBroken))
    );
    assert_eq!(service.start_turn(&id, turn("retry")).await.unwrap().text, "fine");
    let history = &provider.requests()[2].messages;
    assert!(history[3].text().contains("[response cut off: connection reset]"));
}

/// A response the provider layer restarted after content (`StreamEvent::Restarted`): the turn
/// keeps only the new attempt's answer, charges both attempts' usage, and tells the caller.
#[tokio::test]
async fn a_restarted_response_keeps_only_the_new_answer_and_charges_both_attempts() {
    let usage = |output_tokens| Usage { input_tokens: 10, output_tokens, ..Usage::default() };
    let (service, _) = service(vec![ScriptedResponse::new(vec![
        Step::Event(StreamEvent::Usage(usage(1))),
        Step::Event(StreamEvent::TextDelta("half an ans".into())),
        Step::Event(StreamEvent::Restarted { reason: "stream cut".into() }),
        Step::Event(StreamEvent::Usage(usage(2))),
        Step::Event(StreamEvent::TextDelta("the whole answer".into())),
        Step::Event(StreamEvent::Finished { stop_reason: StopReason::EndTurn }),
    ])]);
    let result = service.create_session(create("hi")).await.unwrap();
    assert_eq!((result.status, result.text.as_str()), (TurnStatus::Completed, "the whole answer"));
    assert_eq!((result.usage.tokens.input_tokens, result.usage.tokens.output_tokens), (20, 3));
    let history = service.history(&result.session_id).await.unwrap();
    let answer = serde_json::to_string(&history).unwrap();
    assert!(!answer.contains("half an ans"), "{answer}");
}

#[tokio::test]
async fn the_tool_call_budget_ends_the_turn_with_every_call_answered() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "A").unwrap();
    let provider = ScriptedProvider::new(vec![ScriptedResponse::tool_calls(&[
        ("t1", "read_file", json!({"path": "a.txt"})),
        ("t2", "read_file", json!({"path": "a.txt"})),
    ])]);
    let service = service_with(provider.clone(), Some(Workspace::new(dir.path()).unwrap()));
    let mut request = create("read twice");
    request.build =
        AgentBuildConfig { budget: Budget { max_tool_calls: Some(1), ..Budget::default() }, ..request.build };
    let result = service.create_session(request).await.unwrap();
    assert_eq!(
        (result.status, result.stop_reason.as_ref().map(crate::model::StopReason::as_str)),
        (TurnStatus::Completed, Some("budget_exhausted"))
    );
    assert_eq!(result.tool_calls, 1);

    let view = service.read(&result.session_id, None).await.unwrap();
    assert_eq!(view.billing.tool_calls, 1);
    assert_eq!(view.billing.remaining.tool_calls, Some(0));
    assert_eq!(view.state.message_count, 3, "prompt, tool calls, both results");
    assert_eq!(provider.requests().len(), 1, "no model call after the budget ran out");
}

#[tokio::test]
async fn the_token_budget_stops_the_next_turn_before_calling_the_model() {
    let (service, provider) = service(vec![ScriptedResponse::text(&["one"])]);
    let mut request = create("hi");
    request.build.budget.max_tokens = Some(15);
    let id = service.create_session(request).await.unwrap().session_id;
    let result = service.start_turn(&id, turn("more")).await.unwrap();
    assert_eq!(result.stop_reason.as_ref().map(crate::model::StopReason::as_str), Some("budget_exhausted"));
    assert_eq!(provider.requests().len(), 1);
    // The turn still counts and the session still answers reads.
    assert_eq!(service.read(&id, None).await.unwrap().state.turns, 2);
}

#[tokio::test(start_paused = true)]
async fn the_time_budget_ends_a_slow_turn_cleanly() {
    let (service, _) = service(vec![ScriptedResponse::new(vec![
        Step::Event(StreamEvent::TextDelta("thinking".into())),
        Step::Sleep(Duration::from_secs(3600)),
        Step::Event(StreamEvent::Finished { stop_reason: StopReason::EndTurn }),
    ])]);
    let mut request = create("hi");
    request.build.budget.max_duration_ms = Some(1000);
    let result = service.create_session(request).await.unwrap();
    assert_eq!(
        (result.status, result.stop_reason.as_ref().map(crate::model::StopReason::as_str)),
        (TurnStatus::Completed, Some("budget_exhausted"))
    );
    assert_eq!(result.text, "thinking");
}

#[tokio::test]
async fn several_tool_calls_of_one_step_run_and_return_in_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let provider = ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(&[
            ("t1", "read_file", json!({"path": "a.txt"})),
            ("t2", "list_dir", json!({})),
            ("t3", "read_file", json!({"path": "/etc/passwd"})),
        ]),
        ScriptedResponse::text(&["done"]),
    ]);
    let service = service_with(provider.clone(), Some(Workspace::new(dir.path()).unwrap()));
    let (events_tx, mut events_rx) = crate::agent::event_channel();
    let mut request = create("look around");
    request.turn.events = Some(events_tx);
    let result = service.create_session(request).await.unwrap();
    assert_eq!((result.text.as_str(), result.tool_calls), ("done", 3));

    let results = &provider.requests()[1].messages[2].content;
    let contents: Vec<(&str, &str, bool)> = results
        .iter()
        .map(|block| match block {
            ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                (tool_use_id.as_str(), content.as_str(), *is_error)
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(contents[0], ("t1", "alpha", false));
    assert_eq!(contents[1], ("t2", "a.txt\nsub/", false));
    assert!(contents[2].2 && contents[2].1.contains("outside the workspace"), "{:?}", contents[2]);

    let mut kinds = Vec::new();
    while let Some(event) = events_rx.try_recv() {
        kinds.push(serde_json::to_value(&event).unwrap()["type"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        kinds,
        [
            "turn_started",
            "usage",
            "tool_call_requested",
            "tool_call_requested",
            "tool_call_requested",
            "tool_result",
            "tool_result",
            "tool_result",
            "text_delta",
            "usage",
            "turn_completed"
        ]
    );
}

#[tokio::test]
async fn list_pages_newest_first() {
    let responses = (0..5).map(|_| ScriptedResponse::text(&["x"])).collect();
    let (service, _) = service(responses);
    let mut ids = Vec::new();
    for n in 0..5 {
        let id = service.create_session(create(&format!("session {n}"))).await.unwrap().session_id;
        // The list orders by `updated_at` (ms): let the clock pass this session's stamp.
        let stamp = service.read(&id, None).await.unwrap().state.updated_at;
        while chrono::Utc::now().timestamp_millis() <= stamp.timestamp_millis() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        ids.push(id);
    }
    let page = service.list(ListQuery { offset: 1, limit: Some(2), ..ListQuery::default() }).await.unwrap();
    assert_eq!(page.total, 5);
    let got: Vec<_> = page.sessions.iter().map(|s| s.session_id.clone()).collect();
    assert_eq!(got, vec![ids[3].clone(), ids[2].clone()]);

    // The next page by cursor starts right after this one; the last page has no cursor.
    let cursor = page.next_cursor.expect("more sessions after this page");
    let after = Some(crate::model::ListPosition::from_cursor(&cursor).unwrap());
    let next = service.list(ListQuery { after, limit: Some(2), ..ListQuery::default() }).await.unwrap();
    let got: Vec<_> = next.sessions.iter().map(|s| s.session_id.clone()).collect();
    assert_eq!((got, next.next_cursor), (vec![ids[1].clone(), ids[0].clone()], None));
}

/// Each session's file tools see its own workspace only; a workspace that is not a directory
/// is refused before any session exists.
#[tokio::test]
async fn sessions_with_different_workspaces_see_only_their_own_files() {
    use crate::tools::ToolRequest;

    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    std::fs::write(first.path().join("one.txt"), "first's file").unwrap();
    std::fs::write(second.path().join("two.txt"), "second's file").unwrap();
    let provider = ScriptedProvider::new(vec![]);
    let mut registry = crate::llm::registry::ProviderRegistry::new();
    registry.insert("test", provider.clone());
    // Both workspaces are roots the operator allows; the server has none of its own.
    let policy = crate::tools::ToolDefaults {
        workspace_roots: Some(vec![first.path().into(), second.path().into()]),
        ..crate::tools::ToolDefaults::default()
    };
    let factory = AgentFactory::new(Arc::new(registry), Some("test:model".into()), None).with_tool_defaults(policy);
    let service = LiveSessionService::new(factory, None);
    let in_workspace = |dir: &std::path::Path| {
        let mut request = create("look");
        request.build.tools = ToolRequest { workspace: Some(dir.into()), ..ToolRequest::default() };
        request
    };
    for dir in [first.path(), second.path()] {
        provider.push(ScriptedResponse::tool_calls(&[
            ("t1", "list_dir", json!({})),
            ("t2", "read_file", json!({"path": "one.txt"})),
            ("t3", "read_file", json!({"path": "../one.txt"})),
        ]));
        provider.push(ScriptedResponse::text(&["done"]));
        service.create_session(in_workspace(dir)).await.unwrap();
    }
    let results = |index: usize| -> Vec<(String, bool)> {
        provider.requests()[index].messages[2]
            .content
            .iter()
            .map(|block| match block {
                ContentBlock::ToolResult { content, is_error, .. } => (content.clone(), *is_error),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    };
    let first_saw = results(1);
    assert_eq!(first_saw[0], ("one.txt".to_owned(), false));
    assert_eq!(first_saw[1], ("first's file".to_owned(), false));
    assert!(first_saw[2].1, "{:?}", first_saw[2]);
    let second_saw = results(3);
    assert_eq!(second_saw[0], ("two.txt".to_owned(), false));
    assert!(second_saw[1].1 && second_saw[2].1, "the other session's file is out of reach: {second_saw:?}");

    let missing = in_workspace(&first.path().join("missing"));
    assert_eq!(service.create_session(missing).await.unwrap_err().code(), ErrorCode::PolicyDenied);
    // With no workspace anywhere, a session gets no file tools rather than an error (only the
    // ones that need none: comms and delegation).
    provider.push(ScriptedResponse::text(&["plain"]));
    service.create_session(create("no tools")).await.unwrap();
    let tools = provider.requests().last().unwrap().tools.clone();
    assert!(
        tools.iter().all(|tool| !["read_file", "list_dir", "search"].contains(&tool.name.as_str())),
        "{tools:?}"
    );
}
