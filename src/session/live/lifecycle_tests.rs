//! Lifecycle edges (issue 12): a panicking turn, an archive racing turns, and reads that must
//! not wait behind a running turn.

use std::sync::Arc;
use std::time::Duration;

use super::test_support::*;
use super::*;
use crate::error::{ErrorCode, ErrorKind};
use crate::llm::scripted::{Gate, ScriptedProvider, ScriptedResponse, Step};
use crate::llm::{StopReason, StreamEvent};
use crate::model::SessionStatus;
use crate::model::TurnStatus;

/// How long a test waits for something that should be immediate before failing instead of
/// hanging.
const LIMIT: Duration = Duration::from_secs(20);

fn panicking(message: &str) -> ScriptedResponse {
    ScriptedResponse::new(vec![
        Step::Event(StreamEvent::TextDelta("about to".into())),
        Step::Panic(message.into()),
        Step::Event(StreamEvent::Finished { stop_reason: StopReason::EndTurn }),
    ])
}

/// Code review §5.1: a panic in a turn used to leave the lock taken (every later turn
/// `SESSION_BUSY`), the view `running`, and `archive` waiting for ever.
#[tokio::test]
async fn a_panicking_turn_fails_with_an_internal_error_and_the_session_goes_on() {
    let provider = ScriptedProvider::new([
        ScriptedResponse::text(&["ready"]),
        panicking("scripted adapter bug"),
        ScriptedResponse::text(&["recovered"]),
    ]);
    let service = scripted_service(provider, None, None);
    let id = service.create_session(create("hi")).await.unwrap().session_id;

    let error = tokio::time::timeout(LIMIT, service.start_turn(&id, turn("boom"))).await.unwrap().unwrap_err();
    assert_eq!(error.code(), ErrorCode::AgentError);
    assert_eq!(error.kind(), Some(ErrorKind::Internal));
    assert!(error.to_string().contains("scripted adapter bug"), "{error}");

    let view = service.read(&id, None).await.unwrap();
    assert_eq!((view.state.status, view.state.running_turn, view.state.turns), (SessionStatus::Idle, None, 2));
    let last = view.state.last_turn.unwrap();
    assert_eq!((last.status, last.error_kind), (TurnStatus::Failed, Some(ErrorKind::Internal)));

    let next = tokio::time::timeout(LIMIT, service.start_turn(&id, turn("again"))).await.unwrap().unwrap();
    assert_eq!((next.turn, next.text.as_str()), (3, "recovered"));
    let history = service.history(&id).await.unwrap().messages;
    let roles: Vec<_> = history.iter().map(|message| message.role).collect();
    use crate::llm::Role::{Assistant, User};
    // The failed turn's prompt stays as it was stored (a save only appends, G4); the wire
    // sends the two prompts as one user message.
    assert_eq!(roles, [User, Assistant, User, User, Assistant]);

    let archived = tokio::time::timeout(LIMIT, service.archive(&id)).await.unwrap().unwrap();
    assert!(archived.archived);
}

/// A panic while nobody waits for the turn any more (it outlived `wait_ms`): the turn's result
/// is still published, and archive and drain return.
#[tokio::test]
async fn a_panic_after_the_caller_stopped_waiting_still_releases_the_session() {
    let gate = Gate::new();
    let provider =
        ScriptedProvider::new([ScriptedResponse::text(&["ready"]), panicking("late bug").pause_before(0, &gate)]);
    let service = scripted_service(provider, None, None);
    let id = service.create_session(create("hi")).await.unwrap().session_id;
    let request = TurnRequest {
        prompt: "slow".into(),
        options: TurnOptions::waiting(Duration::ZERO),
        ..TurnRequest::default()
    };
    let running = service.start_turn(&id, request).await.unwrap();
    assert_eq!(running.status, TurnStatus::Running);
    gate.open();

    let view = tokio::time::timeout(LIMIT, service.read(&id, Some(LIMIT))).await.unwrap().unwrap();
    assert_eq!(view.state.last_turn.map(|turn| turn.status), Some(TurnStatus::Failed));
    tokio::time::timeout(LIMIT, service.drain(Duration::from_secs(5))).await.unwrap();
}

/// The history a panic cut short stays valid: a tool call left without a result gets one.
#[tokio::test]
async fn a_panicked_turn_closes_its_open_tool_calls() {
    use crate::agent::{AgentBuildConfig, EventSink, RestoredState, TurnEnd};
    use crate::llm::{ContentBlock, Message, Role};
    use crate::policy::AuditTag;
    use crate::policy::Grants;

    let provider = ScriptedProvider::new([]);
    let service = scripted_service(provider, None, None);
    let mut agent = service
        .factory
        .build_agent(AgentBuildConfig::default(), &Grants::local(), &AuditTag::local(SessionId::new()))
        .await
        .unwrap();
    let tool_use =
        ContentBlock::ToolUse { id: "t1".into(), name: "read_file".into(), input: serde_json::json!({}) };
    agent.restore(RestoredState {
        history: vec![Message::user_text("go"), Message::assistant(vec![tool_use])],
        turns: 1,
        ..RestoredState::default()
    });
    let report = agent.end_panicked_turn(1, "internal error: boom".into(), &EventSink::default());
    assert_eq!(report.end, TurnEnd::Panicked("internal error: boom".into()));
    let last = agent.history().last().unwrap();
    assert_eq!(last.role, Role::User);
    assert!(
        matches!(&last.content[..], [ContentBlock::ToolResult { tool_use_id, is_error: true, .. }] if tool_use_id == "t1"),
        "{last:?}"
    );
}

/// Code review §5.4: `session_tool_output` went through the actor's queue, so it waited for
/// the running turn to end. It reads the agent's outputs beside the actor now.
#[tokio::test]
async fn tool_output_answers_while_a_turn_runs() {
    use crate::agent::ContextOverrides;
    use crate::tools::Workspace;

    let dir = tempfile::tempdir().unwrap();
    let file: String = (0..2000).map(|n| format!("line {n}\n")).collect();
    std::fs::write(dir.path().join("log.txt"), &file).unwrap();
    let gate = Gate::new();
    let arrived = Gate::new();
    let provider = ScriptedProvider::new([
        ScriptedResponse::tool_calls(&[("t1", "read_file", serde_json::json!({"path": "log.txt"}))]),
        ScriptedResponse::text(&["read"]),
        ScriptedResponse::text(&["later"]).pause_before(0, &gate).signal_arrival(&arrived),
    ]);
    let service = Arc::new(scripted_service(provider, Some(Workspace::new(dir.path()).unwrap()), None));
    let mut request = create("read the log");
    request.build.context = ContextOverrides { tool_output_cap_bytes: Some(4096), ..ContextOverrides::default() };
    let id = service.create_session(request).await.unwrap().session_id;

    let running = tokio::spawn({
        let (service, id) = (service.clone(), id.clone());
        async move { service.start_turn(&id, turn("wait")).await }
    });
    arrived.wait().await;
    let whole = tokio::time::timeout(LIMIT, service.tool_output(&id, "t1")).await.unwrap().unwrap();
    assert_eq!(whole.content, file);
    gate.open();
    assert_eq!(running.await.unwrap().unwrap().text, "later");
}

#[cfg(feature = "session-store")]
mod stored {
    use super::*;
    use crate::ids::SessionId;
    use crate::store::{RedbStore, SessionStore};

    /// Turns racing one archive: whatever interleaving, once `archive` has answered no turn
    /// succeeds, the stored record says archived, and it still does after a restart. The
    /// session is not live when the race starts, so the turns race to resume it from the store
    /// (code review §5.2: a resume could slip in between the actor's removal and the store's
    /// archive, and run a turn on an archived session).
    #[tokio::test]
    async fn an_acknowledged_archive_holds_against_racing_turns_and_a_restart() {
        const TURNS: usize = 40;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let provider = ScriptedProvider::responding(|_| ScriptedResponse::text(&["ok"]));
        let open = |path: &std::path::Path| -> Arc<dyn SessionStore> { Arc::new(RedbStore::open(path).unwrap()) };

        for round in 0..3 {
            let service = Arc::new(scripted_service(provider.clone(), None, Some(open(&path))));
            let id: SessionId = service.create_session(create("hi")).await.unwrap().session_id;
            // A restart, so the racing turns must resume the session from the store.
            service.drain(Duration::from_secs(5)).await;
            drop(service);
            let service = Arc::new(scripted_service(provider.clone(), None, Some(open(&path))));

            let barrier = Arc::new(tokio::sync::Barrier::new(TURNS + 1));
            let turns: Vec<_> = (0..TURNS)
                .map(|_| {
                    let (service, id, barrier) = (service.clone(), id.clone(), barrier.clone());
                    tokio::spawn(async move {
                        barrier.wait().await;
                        service.start_turn(&id, turn("go")).await
                    })
                })
                .collect();
            barrier.wait().await;
            tokio::task::yield_now().await;
            let archived = tokio::time::timeout(LIMIT, service.archive(&id)).await.unwrap().unwrap();
            assert!(archived.archived);

            // After the acknowledgement, nothing gets through.
            let after = tokio::time::timeout(LIMIT, service.start_turn(&id, turn("after"))).await.unwrap();
            let error = after.unwrap_err();
            assert_eq!(error.code(), ErrorCode::SessionNotFound, "round {round}: {error}");
            assert!(error.to_string().contains("archived"), "{error}");

            let mut succeeded = 0u64;
            for racing in turns {
                match tokio::time::timeout(LIMIT, racing).await.unwrap().unwrap() {
                    Ok(_) => succeeded += 1,
                    Err(error) => assert!(
                        matches!(error.code(), ErrorCode::SessionNotFound | ErrorCode::SessionBusy),
                        "round {round}: {error}"
                    ),
                }
            }
            let stored = service.store.as_ref().unwrap().record(&id).await.unwrap().unwrap();
            assert!(stored.archived, "round {round}");
            assert_eq!(
                stored.turns,
                1 + succeeded,
                "round {round}: every turn that succeeded came before the archive"
            );
            service.drain(Duration::from_secs(5)).await;
            drop(service);

            let reopened = open(&path);
            assert!(reopened.record(&id).await.unwrap().unwrap().archived, "round {round}: after a restart");
            drop(reopened);
        }
    }
}

/// Security review F10: labels were unbounded and travel in every list page.
#[tokio::test]
async fn f10_labels_are_capped_in_count_and_size() {
    use super::{MAX_LABEL_KEY_BYTES, MAX_LABEL_VALUE_BYTES, MAX_LABELS};

    let provider = ScriptedProvider::responding(|_| ScriptedResponse::text(&["ok"]));
    let service = scripted_service(provider, None, None);
    let with_labels = |labels: Vec<(String, String)>| {
        let mut request = create("hi");
        request.labels = labels.into_iter().collect();
        request
    };
    let many = (0..=MAX_LABELS).map(|n| (format!("k{n}"), "v".to_owned())).collect();
    let long_key = vec![("k".repeat(MAX_LABEL_KEY_BYTES + 1), "v".to_owned())];
    let long_value = vec![("k".to_owned(), "v".repeat(MAX_LABEL_VALUE_BYTES + 1))];
    for (labels, limit) in
        [(many, "at most 32 labels"), (long_key, "at most 128 bytes"), (long_value, "at most 1024 bytes")]
    {
        let error = service.create_session(with_labels(labels)).await.unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidRequest);
        assert!(error.to_string().contains(limit), "{error}");
    }
    let at_the_limits = (0..MAX_LABELS)
        .map(|n| (format!("{n:0>width$}", width = MAX_LABEL_KEY_BYTES), "v".repeat(MAX_LABEL_VALUE_BYTES)))
        .collect();
    assert!(service.create_session(with_labels(at_the_limits)).await.is_ok());
}
