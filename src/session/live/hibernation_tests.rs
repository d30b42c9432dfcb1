//! Hibernation: idle and least recently used sessions are unloaded to the store and come back
//! on their next turn, indistinguishable but for latency; without a store the bound refuses.

use std::time::Duration;

use super::test_support::*;
use super::*;
use crate::error::ErrorCode;
use crate::llm::scripted::{ScriptedProvider, ScriptedResponse};

fn limits(idle_secs: u64, max_live: usize) -> SessionLimits {
    SessionLimits { idle_unload: Duration::from_secs(idle_secs), max_live, ..SessionLimits::default() }
}

#[tokio::test]
async fn without_a_store_max_live_refuses_new_sessions() {
    let provider = ScriptedProvider::new((0..3).map(|_| ScriptedResponse::text(&["x"])));
    let service = scripted_service(provider, None, None).with_limits(limits(1, 2));
    let first = service.create_session(create("one")).await.unwrap().session_id;
    service.create_session(create("two")).await.unwrap();
    let error = service.create_session(create("three")).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::SessionPersistenceDisabled);
    assert!(error.to_string().contains("more than 2 live sessions (max_live_sessions)"), "{error}");
    assert_eq!(service.live_sessions(), 2, "nothing is unloaded without a store");
    service.archive(&first).await.unwrap();
    service.create_session(create("three")).await.unwrap();
}

/// Everything that needs a store to unload to.
#[cfg(feature = "session-store")]
mod stored {
    use std::sync::Arc;

    use super::*;
    use crate::llm::Role;
    use crate::model::TurnStatus;

    fn stored_service(
        provider: &Arc<ScriptedProvider>,
        limits: SessionLimits,
    ) -> (Arc<LiveSessionService>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(dir.path());
        let service = scripted_service(provider.clone(), None, Some(store)).with_limits(limits);
        (Arc::new(service), dir)
    }

    fn texts(provider: &ScriptedProvider) -> Vec<String> {
        provider.requests().last().unwrap().messages.iter().map(crate::llm::Message::text).collect()
    }

    /// What `read` and `list` show of a session, as JSON (what a caller could tell apart).
    async fn shown(service: &LiveSessionService, id: &SessionId) -> (serde_json::Value, serde_json::Value) {
        let view = service.read(id, None).await.unwrap();
        let list = service.list(ListQuery::default()).await.unwrap();
        let summary = list.sessions.iter().find(|summary| &summary.session_id == id).unwrap();
        (serde_json::to_value(view).unwrap(), serde_json::to_value(summary).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_session_is_unloaded_and_its_next_turn_sees_the_whole_history() {
        let provider = ScriptedProvider::new(["one", "two", "three"].map(|text| ScriptedResponse::text(&[text])));
        let (service, _dir) = stored_service(&provider, limits(60, 100));
        service.start_idle_reaper();
        let id = service.create_session(create("first")).await.unwrap().session_id;
        service.start_turn(&id, turn("second")).await.unwrap();
        let live = shown(&service, &id).await;
        assert_eq!(service.live_sessions(), 1);

        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(service.live_sessions(), 1, "not idle long enough yet");
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(service.live_sessions(), 0, "unloaded by the idle reaper");
        assert_eq!(shown(&service, &id).await, live, "read and list show the unloaded session as they did live");
        let history = service.history(&id).await.unwrap().messages;
        assert_eq!(history.len(), 4);

        let third = service.start_turn(&id, turn("third")).await.unwrap();
        assert_eq!((third.text.as_str(), third.turn), ("three", 3));
        assert_eq!(
            texts(&provider),
            ["first", "one", "second", "two", "third"],
            "the whole history went to the model"
        );
        assert_eq!(service.live_sessions(), 1, "rehydrated");
        let view = service.read(&id, None).await.unwrap();
        assert_eq!((view.state.turns, view.state.message_count), (3, 6));
        service.drain(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn beyond_max_live_the_least_recently_used_idle_session_is_unloaded() {
        let provider = ScriptedProvider::new((0..8).map(|n| ScriptedResponse::text(&[&format!("answer {n}")])));
        let (service, _dir) = stored_service(&provider, limits(0, 2));
        let mut ids = Vec::new();
        for n in 0..3 {
            ids.push(service.create_session(create(&format!("session {n}"))).await.unwrap().session_id);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let is_live = |service: &LiveSessionService| -> Vec<bool> {
            ids.iter().map(|id| service.live(id).is_some()).collect()
        };
        assert_eq!(is_live(&service), [false, true, true], "the oldest went when the third came");

        let before = shown(&service, &ids[0]).await;
        // Session 0 comes back with its history; session 1 is now the least recently used.
        service.start_turn(&ids[0], turn("again")).await.unwrap();
        assert_eq!(texts(&provider), ["session 0", "answer 0", "again"]);
        assert_eq!(is_live(&service), [true, false, true]);
        assert_eq!(service.live_sessions(), 2);
        let after = serde_json::to_value(service.read(&ids[0], None).await.unwrap()).unwrap();
        assert_eq!((&before.0["state"]["turns"], &after["state"]["turns"]), (&1.into(), &2.into()));
        assert_eq!(after["state"]["created_at"], before.0["state"]["created_at"]);
        // Every session stays readable and listed, live or not.
        assert_eq!(service.list(ListQuery::default()).await.unwrap().total, 3);
        for id in &ids {
            assert_eq!(service.read(id, None).await.unwrap().state.status, crate::model::SessionStatus::Idle);
        }

        // A busy session is skipped, however long ago it was used: the next one goes instead.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let busy = service.live(&ids[2]).unwrap();
        let ticket = busy.try_begin_turn().unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        service.start_turn(&ids[0], turn("more")).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        service.start_turn(&ids[1], turn("back")).await.unwrap();
        assert_eq!(is_live(&service), [false, true, true], "session 2 runs a turn, so session 0 went");
        drop(ticket);
        busy.abandon_turn();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_turn_racing_an_unload_waits_for_it_and_runs() {
        let rounds = 40;
        let provider = ScriptedProvider::new((0..=rounds).map(|n| ScriptedResponse::text(&[&format!("a{n}")])));
        let (service, _dir) = stored_service(&provider, limits(0, 100));
        let id = service.create_session(create("q0")).await.unwrap().session_id;
        for n in 1..=rounds {
            // The last round's unload may have landed after its turn: then this round's turn
            // resumes the session, and no unload races it.
            let unloading = service.live(&id).map(|handle| {
                let (service, id) = (service.clone(), id.clone());
                tokio::spawn(async move { service.unload(&id, &handle, "test").await })
            });
            let turned = service.start_turn(&id, turn(&format!("q{n}"))).await;
            let result = turned.unwrap_or_else(|error| panic!("round {n}: {error} ({})", error.code()));
            assert_eq!(result.turn, n + 1);
            if let Some(unloading) = unloading {
                unloading.await.unwrap();
            }
        }
        let history = service.history(&id).await.unwrap().messages;
        assert_eq!(history.len() as u64, 2 * (rounds + 1), "no turn lost");
    }

    /// The worst interleaving, made certain: the caller got the handle, then the session was
    /// unloaded, then the caller takes the turn lock. It gets the resumed session, not `Busy`.
    #[tokio::test]
    async fn a_handle_unloaded_under_a_caller_sends_it_back_to_the_store() {
        let provider = ScriptedProvider::new(["a", "b"].map(|text| ScriptedResponse::text(&[text])));
        let (service, _dir) = stored_service(&provider, limits(0, 100));
        let id = service.create_session(create("q")).await.unwrap().session_id;
        let stale = service.live(&id).unwrap();
        let mut attempts = 0;
        let won = service
            .with_handle(&service.factory, &crate::policy::Grants::local(), &id, async |handle| {
                attempts += 1;
                if attempts == 1 {
                    assert!(service.unload(&id, handle, "test").await);
                }
                let ticket = handle.try_begin_turn()?;
                handle.abandon_turn();
                Ok((ticket.turn, handle.clone()))
            })
            .await
            .unwrap();
        assert_eq!((attempts, won.0), (2, 2));
        assert!(!won.1.same_actor(&stale) && stale.is_unloaded() && !won.1.is_unloaded());
        assert!(matches!(stale.try_begin_turn(), Err(SessionError::Busy(_))), "a stale handle never runs a turn");
        assert!(!stale.is_busy(), "an unloaded actor runs nothing");
        assert_eq!(service.start_turn(&id, turn("again")).await.unwrap().text, "b");
    }

    #[tokio::test]
    async fn a_session_with_pending_tool_calls_survives_an_unload_and_its_answer_resumes_it() {
        use crate::model::ToolResultAnswer;
        use crate::tools::{CallbackTool, ToolRequest};
        let provider = ScriptedProvider::new([
            ScriptedResponse::tool_calls(&[("call_1", "lookup", serde_json::json!({"q": "weather"}))]),
            ScriptedResponse::text(&["It is sunny."]),
        ]);
        let (service, _dir) = stored_service(&provider, limits(0, 100));
        let mut request = create("go");
        request.build.tools = ToolRequest {
            callbacks: vec![CallbackTool {
                name: "lookup".into(),
                description: "run by the caller".into(),
                input_schema: serde_json::json!({"type": "object"}),
            }],
            ..ToolRequest::default()
        };
        let held = service.create_session(request).await.unwrap();
        assert_eq!(held.status, TurnStatus::PendingToolCalls);
        let id = held.session_id;
        let live = shown(&service, &id).await;
        let handle = service.live(&id).unwrap();
        assert!(service.unload(&id, &handle, "test").await, "a held step is in the record: it may be unloaded");
        assert_eq!(service.live_sessions(), 0);
        assert_eq!(shown(&service, &id).await, live);

        let answer = ToolResultAnswer { tool_use_id: "call_1".into(), content: "sunny".into(), is_error: false };
        let request = TurnRequest { tool_results: vec![answer], ..TurnRequest::default() };
        let done = service.start_turn(&id, request).await.unwrap();
        assert_eq!((done.status, done.text.as_str()), (TurnStatus::Completed, "It is sunny."));
        let last = provider.requests().last().unwrap().messages.last().unwrap().clone();
        assert_eq!(last.role, Role::User);
        assert!(format!("{:?}", last.content).contains("sunny"), "the answer reached the model");
    }

    #[tokio::test]
    async fn a_running_or_archived_session_is_not_unloaded() {
        let provider = ScriptedProvider::new([ScriptedResponse::text(&["a"])]);
        let (service, _dir) = stored_service(&provider, limits(0, 100));
        let id = service.create_session(create("q")).await.unwrap().session_id;
        let handle = service.live(&id).unwrap();
        let ticket = handle.try_begin_turn().unwrap();
        assert!(!service.unload(&id, &handle, "test").await, "a turn holds the lock");
        drop(ticket);
        handle.abandon_turn();
        handle.mark_closing();
        assert!(!service.unload(&id, &handle, "test").await, "an archive began");
        assert_eq!(service.live_sessions(), 1);
    }
}
