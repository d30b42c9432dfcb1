//! The inbox rules (issue 15) with the scripted provider: where mail is delivered, host mode's
//! auto-turns and their guards, a full inbox, and mail kept by the store.

use std::time::Duration;

use super::test_support::*;
use super::*;
use crate::agent::InboxLimits;
use crate::error::ErrorCode;
use crate::llm::scripted::{Gate, ScriptedProvider, ScriptedResponse};
use crate::llm::{ContentBlock, ModelRequest, Role};
use crate::model::SessionStatus;
use crate::model::inbox::Delivery;
use crate::tools::BuiltinTool;

/// How long a test waits for what should be prompt before failing instead of hanging.
const LIMIT: Duration = Duration::from_secs(20);

fn message(body: &str) -> SendRequest {
    SendRequest { body: body.into(), ..SendRequest::default() }
}

fn host(prompt: &str) -> CreateSessionRequest {
    CreateSessionRequest { host_mode: Some(true), ..create(prompt) }
}

/// The text blocks of a request's last message, joined.
fn last_text(request: &ModelRequest) -> String {
    let last = request.messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    last.content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn settle(service: &LiveSessionService, id: &SessionId) -> SessionView {
    tokio::time::timeout(LIMIT, service.read(id, Some(LIMIT))).await.unwrap().unwrap()
}

#[tokio::test]
async fn mail_sent_during_a_step_reaches_the_next_model_call_after_the_tool_results() {
    let gate = Gate::new();
    let provider = ScriptedProvider::new([
        ScriptedResponse::tool_calls(&[("t1", "list_peers", serde_json::json!({}))]).pause_before(1, &gate),
        ScriptedResponse::text(&["done"]),
    ]);
    let service = scripted_service(provider.clone(), None, None);
    let mut request = create("look around");
    request.build.tools.builtins = Some(vec![BuiltinTool::ListPeers]);
    request.turn = TurnOptions::waiting(Duration::ZERO);
    let id = service.create_session(request).await.unwrap().session_id;

    let sent = service.send(&id, message("the build is green")).await.unwrap();
    assert_eq!(sent.delivered, Delivery::Queued, "a session that is not in host mode only queues");
    gate.open();
    let view = settle(&service, &id).await;
    assert_eq!(view.state.last_turn.unwrap().text, "done");
    assert_eq!(view.state.inbox.waiting, 0);

    let second = &provider.requests()[1];
    let last = second.messages.last().unwrap();
    assert!(matches!(last.content[0], ContentBlock::ToolResult { .. }), "results first, then the mail");
    let text = last_text(second);
    assert!(text.contains(&format!("[message {} from the caller (local)]", sent.message_id)), "{text}");
    assert!(text.ends_with("the build is green"), "{text}");
}

#[tokio::test]
async fn mail_to_an_idle_session_joins_the_front_of_its_next_prompt() {
    let provider = ScriptedProvider::new([ScriptedResponse::text(&["hi"]), ScriptedResponse::text(&["ok"])]);
    let service = scripted_service(provider.clone(), None, None);
    let id = service.create_session(create("hello")).await.unwrap().session_id;
    service.send(&id, message("first note")).await.unwrap();
    service.send(&id, message("second note")).await.unwrap();
    let view = service.read(&id, None).await.unwrap();
    assert_eq!((view.state.inbox.waiting, view.state.status), (2, SessionStatus::Idle));
    assert!(view.state.inbox.oldest_at.is_some());

    service.start_turn(&id, turn("now the task")).await.unwrap();
    let text = last_text(&provider.requests()[1]);
    let (first, second, prompt) =
        (text.find("first note").unwrap(), text.find("second note").unwrap(), text.find("now the task").unwrap());
    assert!(first < second && second < prompt, "oldest first, the prompt last: {text}");
    assert_eq!(service.read(&id, None).await.unwrap().state.inbox.waiting, 0);
}

#[tokio::test]
async fn mail_starts_a_turn_on_an_idle_host_session_which_then_goes_idle() {
    let provider =
        ScriptedProvider::new([ScriptedResponse::text(&["waiting"]), ScriptedResponse::text(&["got it"])]);
    let service = scripted_service(provider.clone(), None, None);
    let id = service.create_session(host("stand by")).await.unwrap().session_id;

    let sent = service.send(&id, message("please review PR 7")).await.unwrap();
    assert_eq!(sent.delivered, Delivery::StartedTurn);
    let view = settle(&service, &id).await;
    assert_eq!((view.state.turns, view.state.status), (2, SessionStatus::Idle));
    assert_eq!(view.state.last_turn.unwrap().text, "got it");
    assert_eq!(view.state.inbox.auto_turns, 1);
    assert!(last_text(&provider.requests()[1]).ends_with("please review PR 7"));
    // The host tools came by default (and the delegation tools, on by default; the memory
    // tools too, in builds with compaction).
    let tools: Vec<String> = provider.requests()[0].tools.iter().map(|tool| tool.name.clone()).collect();
    let mut expected = vec!["cancel_delegate", "delegate", "list_peers", "send_message", "wait"];
    if cfg!(feature = "session-compaction") {
        expected.extend(["memory_search", "remember"]);
    }
    expected.sort();
    assert_eq!(tools, expected);
}

#[tokio::test]
async fn a_callers_turn_racing_an_auto_turn_is_busy() {
    let (gate, arrived) = (Gate::new(), Gate::new());
    let provider = ScriptedProvider::new([
        ScriptedResponse::text(&["waiting"]),
        ScriptedResponse::text(&["answered"]).signal_arrival(&arrived).pause_before(0, &gate),
        ScriptedResponse::text(&["and you"]),
        ScriptedResponse::text(&["sure"]),
    ]);
    let service = scripted_service(provider, None, None);
    let id = service.create_session(host("stand by")).await.unwrap().session_id;
    assert_eq!(service.send(&id, message("ping")).await.unwrap().delivered, Delivery::StartedTurn);

    let error = service.start_turn(&id, turn("me too")).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::SessionBusy);
    tokio::time::timeout(LIMIT, arrived.wait()).await.unwrap();
    // A second message while the auto-turn runs waits, and a turn of its own follows.
    assert_eq!(service.send(&id, message("ping again")).await.unwrap().delivered, Delivery::Queued);
    gate.open();
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let view = settle(&service, &id).await;
        if view.state.turns == 3 && view.state.status == SessionStatus::Idle {
            assert_eq!(view.state.inbox.auto_turns, 2);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the queued mail got no turn: {view:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(service.start_turn(&id, turn("me")).await.unwrap().text, "sure");
}

#[tokio::test]
async fn mail_past_max_hops_is_parked_and_shown_never_delivered() {
    let provider = ScriptedProvider::new([ScriptedResponse::text(&["waiting"])]);
    let service = scripted_service(provider.clone(), None, None)
        .with_inbox_limits(InboxLimits { max_hops: 2, ..InboxLimits::default() });
    let id = service.create_session(host("stand by")).await.unwrap().session_id;
    let looping = SendRequest { hops: 3, ..message("re: re: re: thanks") };
    assert_eq!(service.send(&id, looping).await.unwrap().delivered, Delivery::Parked);
    let view = service.read(&id, None).await.unwrap();
    assert_eq!((view.state.turns, view.state.inbox.waiting), (1, 0));
    assert_eq!(view.state.inbox_parked.len(), 1);
    assert_eq!(view.state.inbox_parked[0].hops, 3);
    assert_eq!(provider.requests().len(), 1, "no turn ran for parked mail");
}

#[tokio::test]
async fn a_host_session_takes_at_most_max_auto_turns_between_two_caller_turns() {
    let provider = ScriptedProvider::new((0..6).map(|n| ScriptedResponse::text(&[&format!("answer {n}")])));
    let limits = InboxLimits { max_auto_turns: 2, ..InboxLimits::default() };
    let service = scripted_service(provider.clone(), None, None).with_inbox_limits(limits);
    let id = service.create_session(host("stand by")).await.unwrap().session_id;
    for n in 0..2 {
        assert_eq!(
            service.send(&id, message(&format!("mail {n}"))).await.unwrap().delivered,
            Delivery::StartedTurn
        );
        settle(&service, &id).await;
    }
    assert_eq!(service.send(&id, message("mail 2")).await.unwrap().delivered, Delivery::Queued);
    let view = service.read(&id, None).await.unwrap();
    assert_eq!((view.state.turns, view.state.inbox.auto_turns, view.state.inbox.waiting), (3, 2, 1));

    // The caller's turn takes the waiting mail and resets the count.
    service.start_turn(&id, turn("carry on")).await.unwrap();
    assert!(last_text(&provider.requests()[3]).contains("mail 2"));
    assert_eq!(service.read(&id, None).await.unwrap().state.inbox.auto_turns, 0);
    assert_eq!(service.send(&id, message("mail 3")).await.unwrap().delivered, Delivery::StartedTurn);
    settle(&service, &id).await;
}

#[tokio::test]
async fn a_full_inbox_refuses_with_session_inbox_full_and_loses_nothing() {
    let provider = ScriptedProvider::new([ScriptedResponse::text(&["hi"]), ScriptedResponse::text(&["ok"])]);
    let limits = InboxLimits { capacity: 2, ..InboxLimits::default() };
    let service = scripted_service(provider.clone(), None, None).with_inbox_limits(limits);
    let id = service.create_session(create("hello")).await.unwrap().session_id;
    service.send(&id, message("one")).await.unwrap();
    service.send(&id, message("two")).await.unwrap();
    let error = service.send(&id, message("three")).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::SessionInboxFull);
    assert_eq!(error.session_id(), Some(&id));
    service.start_turn(&id, turn("go")).await.unwrap();
    let text = last_text(&provider.requests()[1]);
    assert!(text.contains("one") && text.contains("two") && !text.contains("three"), "{text}");
    service.send(&id, message("three")).await.unwrap();
}

#[tokio::test]
async fn a_session_never_receives_its_own_messages_and_bad_messages_are_refused() {
    let provider = ScriptedProvider::new([ScriptedResponse::text(&["hi"])]);
    let service = scripted_service(provider, None, None);
    let id = service.create_session(create("hello")).await.unwrap().session_id;
    for body in ["", "   ", &"x".repeat(crate::model::inbox::MAX_MESSAGE_BYTES + 1)] {
        assert_eq!(service.send(&id, message(body)).await.unwrap_err().code(), ErrorCode::InvalidRequest);
    }
    let unknown = SessionId::from_string("nope");
    assert_eq!(service.send(&unknown, message("hi")).await.unwrap_err().code(), ErrorCode::SessionNotFound);
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn mail_survives_a_restart_and_is_delivered_once() {
    let dir = tempfile::tempdir().unwrap();
    let store: std::sync::Arc<dyn crate::store::SessionStore> = temp_store(dir.path());
    let provider = ScriptedProvider::new([ScriptedResponse::text(&["hi"])]);
    let first = scripted_service(provider, None, Some(store.clone()));
    let id = first.create_session(create("hello")).await.unwrap().session_id;
    first.send(&id, message("kept by the store")).await.unwrap();
    // A new process over the same store: nothing is live, the store has the mail.
    let provider = ScriptedProvider::new([ScriptedResponse::text(&["ok"]), ScriptedResponse::text(&["ok"])]);
    let second = scripted_service(provider.clone(), None, Some(store.clone()));
    assert_eq!(second.read(&id, None).await.unwrap().state.inbox.waiting, 1);
    second.start_turn(&id, turn("go")).await.unwrap();
    assert!(last_text(&provider.requests()[0]).contains("kept by the store"));
    // Delivered and saved: a third process finds the inbox empty.
    let third = scripted_service(ScriptedProvider::new([]), None, Some(store));
    assert_eq!(third.read(&id, None).await.unwrap().state.inbox.waiting, 0);
}
