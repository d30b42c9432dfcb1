//! The capability matrix of DESIGN.md, one test per cell, compiled and run in every build
//! profile: each test states what its operation does with and without the session store.

use std::sync::Arc;

use super::test_support::*;
use super::*;
use crate::agent::AgentFactory;
use crate::error::ErrorCode;
use crate::ids::SessionId;
use crate::llm::registry::ProviderRegistry;
use crate::llm::scripted::{Gate, ScriptedProvider, ScriptedResponse, Step};
use crate::llm::{StopReason, StreamEvent};
use crate::model::SessionStatus;
use crate::model::TurnStatus;
use crate::store::SharedStore;

const PERSISTENT: bool = cfg!(feature = "session-store");

/// A store in a temporary directory when the build has one.
struct Harness {
    provider: Arc<ScriptedProvider>,
    store: SharedStore,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        #[cfg(feature = "session-store")]
        let store: SharedStore = Some(temp_store(dir.path()));
        #[cfg(not(feature = "session-store"))]
        let store: SharedStore = None;
        assert_eq!(store.is_some(), PERSISTENT, "a store exactly in the profiles that have one");
        Self { provider: ScriptedProvider::new([]), store, _dir: dir }
    }

    /// Whether this profile persists sessions.
    fn persistent(&self) -> bool {
        self.store.is_some()
    }

    /// A service over the harness's provider and store; a second call is a "restart".
    fn service(&self) -> LiveSessionService {
        scripted_service(self.provider.clone(), None, self.store.clone())
    }

    fn answer(&self, text: &str) {
        self.provider.push(ScriptedResponse::text(&[text]));
    }
}

#[tokio::test]
async fn create_session_works_in_every_profile() {
    let harness = Harness::new();
    harness.answer("hi");
    let result = harness.service().create_session(create("hello")).await.unwrap();
    assert_eq!((result.status, result.text.as_str()), (TurnStatus::Completed, "hi"));
}

#[tokio::test]
async fn start_turn_works_and_is_saved_with_a_store() {
    let harness = Harness::new();
    let service = harness.service();
    harness.answer("one");
    let id = service.create_session(create("first")).await.unwrap().session_id;
    harness.answer("two");
    assert_eq!(service.start_turn(&id, turn("second")).await.unwrap().text, "two");
    // Without a store (other profiles) there is no snapshot to check.
    if let Some(store) = &harness.store {
        let record = store.record(&id).await.unwrap().expect("saved");
        assert_eq!((record.turns, record.message_count), (2, 4));
        assert_eq!(store.history(&id).await.unwrap()[3].text(), "two");
    }
}

#[tokio::test]
async fn interrupt_works_in_every_profile() {
    let harness = Harness::new();
    let service = Arc::new(harness.service());
    let (gate, arrived) = (Gate::new(), Gate::new());
    harness.provider.push(
        ScriptedResponse::new(vec![
            Step::Wait(gate.clone()),
            Step::Event(StreamEvent::Finished { stop_reason: StopReason::EndTurn }),
        ])
        .signal_arrival(&arrived),
    );
    let mut request = create("long");
    request.turn.wait = Some(std::time::Duration::ZERO);
    let id = service.create_session(request).await.unwrap().session_id;
    arrived.wait().await;
    assert!(service.interrupt(&id, true).await.unwrap().interrupted);
    let view = service.read(&id, Some(std::time::Duration::from_secs(30))).await.unwrap();
    assert_eq!(view.state.last_turn.unwrap().status, TurnStatus::Cancelled);
}

#[tokio::test]
async fn read_of_a_live_session_works_in_every_profile() {
    let harness = Harness::new();
    let service = harness.service();
    harness.answer("x");
    let id = service.create_session(create("hello")).await.unwrap().session_id;
    let view = service.read(&id, None).await.unwrap();
    assert_eq!((view.state.status, view.state.turns), (SessionStatus::Idle, 1));
}

#[tokio::test]
async fn read_of_an_archived_session_falls_back_to_the_store_or_is_not_found() {
    let harness = Harness::new();
    let service = harness.service();
    harness.answer("kept");
    let id = service.create_session(create("hello")).await.unwrap().session_id;
    service.archive(&id).await.unwrap();
    match service.read(&id, None).await {
        Ok(view) if harness.persistent() => {
            assert_eq!(view.state.status, SessionStatus::Archived);
            assert_eq!(view.state.last_turn.unwrap().text, "kept");
        }
        Err(error) if !harness.persistent() => assert_eq!(error.code(), ErrorCode::SessionNotFound),
        other => panic!("unexpected {other:?}"),
    }
    // An archived session takes no turns, in any profile.
    assert_eq!(service.start_turn(&id, turn("more")).await.unwrap_err().code(), ErrorCode::SessionNotFound);
}

#[tokio::test]
async fn list_shows_live_sessions_and_with_a_store_the_stored_ones() {
    let harness = Harness::new();
    let before_restart = harness.service();
    harness.answer("a");
    let stored = before_restart.create_session(create("from the last run")).await.unwrap().session_id;
    drop(before_restart);

    let service = harness.service();
    harness.answer("b");
    let live = service.create_session(create("this run")).await.unwrap().session_id;
    let listed = service.list(ListQuery::default()).await.unwrap();
    let ids: Vec<SessionId> = listed.sessions.iter().map(|s| s.session_id.clone()).collect();
    if harness.persistent() {
        assert_eq!((listed.total, ids), (2, vec![live, stored]), "live first (newest), stored deduplicated");
    } else {
        assert_eq!((listed.total, ids), (1, vec![live]));
    }
}

#[tokio::test]
async fn listing_archived_sessions_needs_the_store() {
    let harness = Harness::new();
    let service = harness.service();
    let query = ListQuery { include_archived: true, ..ListQuery::default() };
    match service.list(query).await {
        Ok(list) => assert!(harness.persistent() && list.total == 0),
        Err(error) => {
            assert!(!harness.persistent());
            assert_eq!(error.code(), ErrorCode::SessionPersistenceDisabled);
        }
    }
}

#[tokio::test]
async fn archive_removes_from_memory_and_keeps_the_snapshot_with_a_store() {
    let harness = Harness::new();
    let service = harness.service();
    harness.answer("x");
    let id = service.create_session(create("hello")).await.unwrap().session_id;
    assert!(service.archive(&id).await.unwrap().archived);
    assert!(service.live(&id).is_none(), "removed from memory");
    // Without a store (other profiles) there is no snapshot to check.
    if let Some(store) = &harness.store {
        assert!(store.record(&id).await.unwrap().unwrap().archived, "snapshot kept");
    }
}

#[tokio::test]
async fn a_stored_session_resumes_after_a_restart() {
    let harness = Harness::new();
    let before_restart = harness.service();
    harness.answer("one");
    let id = before_restart.create_session(create("first")).await.unwrap().session_id;
    drop(before_restart);

    let service = harness.service();
    harness.answer("two");
    match service.start_turn(&id, turn("second")).await {
        Ok(result) => {
            assert!(harness.persistent());
            assert_eq!((result.turn, result.text.as_str()), (2, "two"));
            assert_eq!(harness.provider.requests()[1].messages.len(), 3, "the old history came back");
        }
        Err(error) => {
            assert!(!harness.persistent());
            assert_eq!(error.code(), ErrorCode::SessionNotFound);
        }
    }
}

const COMPACTING: bool = cfg!(feature = "session-compaction");

#[tokio::test]
async fn session_compact_needs_the_compaction_feature() {
    let harness = Harness::new();
    let service = harness.service();
    harness.answer("x");
    let id = service.create_session(create("hello")).await.unwrap().session_id;
    harness.answer("summary");
    let expected = if COMPACTING { Ok((true, true)) } else { Err(ErrorCode::SessionCompactionDisabled) };
    let outcome = service.compact(&id).await.map(|done| (done.compacted, done.summarized)).map_err(|e| e.code());
    assert_eq!(outcome, expected);
}

#[tokio::test]
async fn compaction_settings_need_the_compaction_feature() {
    let harness = Harness::new();
    harness.answer("x");
    let mut request = create("hello");
    request.build.context.threshold_tokens = Some(50_000);
    let expected = if COMPACTING { Ok(()) } else { Err(ErrorCode::SessionCompactionDisabled) };
    let outcome = harness.service().create_session(request).await.map(|_| ()).map_err(|e| e.code());
    assert_eq!(outcome, expected);
}

/// Stage 0 works in every profile: a huge tool output enters the history capped, and the
/// caller can read all of it, from the live session and (with a store) after a restart.
#[tokio::test]
async fn a_capped_tool_output_can_be_read_whole() {
    use crate::agent::{AgentFactory as Factory, ContextOverrides};
    use crate::llm::ContentBlock;
    use crate::tools::Workspace;

    let dir = tempfile::tempdir().unwrap();
    let file: String = (0..2000).map(|n| format!("line {n}\n")).collect();
    std::fs::write(dir.path().join("log.txt"), &file).unwrap();
    let harness = Harness::new();
    let service = || {
        let mut registry = ProviderRegistry::new();
        registry.insert("test", harness.provider.clone());
        let workspace = Some(Workspace::new(dir.path()).unwrap());
        LiveSessionService::new(
            Factory::new(Arc::new(registry), Some("test:model".into()), workspace),
            harness.store.clone(),
        )
    };
    harness.provider.push(ScriptedResponse::tool_calls(&[(
        "t1",
        "read_file",
        serde_json::json!({"path": "log.txt"}),
    )]));
    harness.answer("read it");
    let live = service();
    let mut request = create("read the log");
    request.build.context = ContextOverrides { tool_output_cap_bytes: Some(4096), ..ContextOverrides::default() };
    let id = live.create_session(request).await.unwrap().session_id;

    let seen = &harness.provider.requests()[1].messages[2].content[0];
    let ContentBlock::ToolResult { content, .. } = seen else { panic!("{seen:?}") };
    assert!(content.len() < 4500 && content.contains("elided") && content.contains("tool_use_id t1"));
    let whole = live.tool_output(&id, "t1").await.unwrap();
    assert_eq!((whole.content.as_str(), whole.bytes), (file.as_str(), file.len() as u64));
    assert_eq!(live.tool_output(&id, "t9").await.unwrap_err().code(), ErrorCode::InvalidRequest);
    drop(live);

    let after_restart = service().tool_output(&id, "t1").await;
    match after_restart {
        Ok(whole) => assert!(harness.persistent() && whole.content == file),
        Err(error) => assert!(!harness.persistent() && error.code() == ErrorCode::SessionNotFound),
    }
}

/// A session's tools are part of its stored spec: resumed after a restart, it has the same
/// workspace, builtins and shell, even though the restarted server's defaults differ.
#[tokio::test]
async fn a_resumed_session_keeps_its_tools() {
    use crate::llm::ContentBlock;
    use crate::tools::{BuiltinTool, ShellRequest, ToolRequest, Workspace};

    let chosen = tempfile::tempdir().unwrap();
    std::fs::write(chosen.path().join("mine.txt"), "chosen workspace").unwrap();
    let server_default = tempfile::tempdir().unwrap();
    let harness = Harness::new();
    let service = || {
        let mut registry = ProviderRegistry::new();
        registry.insert("test", harness.provider.clone());
        let workspace = Some(Workspace::new(server_default.path()).unwrap());
        // The chosen workspace is outside the server's, so the operator allows it as a root.
        let policy = crate::tools::ToolDefaults {
            workspace_roots: Some(vec![chosen.path().into()]),
            ..crate::tools::ToolDefaults::default()
        };
        LiveSessionService::new(
            AgentFactory::new(Arc::new(registry), Some("test:model".into()), workspace).with_tool_defaults(policy),
            harness.store.clone(),
        )
    };
    let mut request = create("remember your tools");
    request.build.tools = ToolRequest {
        workspace: Some(chosen.path().into()),
        builtins: Some(vec![BuiltinTool::ReadFile]),
        shell: Some(ShellRequest::Enabled(true)),
        ..ToolRequest::default()
    };
    harness.answer("ok");
    let before = service();
    let id = before.create_session(request).await.unwrap().session_id;
    drop(before);

    harness.provider.push(ScriptedResponse::tool_calls(&[(
        "t1",
        "read_file",
        serde_json::json!({"path": "mine.txt"}),
    )]));
    harness.answer("read");
    let resumed = service().start_turn(&id, turn("again")).await;
    if !harness.persistent() {
        assert_eq!(resumed.unwrap_err().code(), ErrorCode::SessionNotFound);
        return;
    }
    assert_eq!(resumed.unwrap().text, "read");
    let requests = harness.provider.requests();
    let names = |index: usize| requests[index].tools.iter().map(|tool| tool.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(0), ["read_file", "shell"]);
    assert_eq!(names(1), names(0), "the resumed session has the tools it was created with");
    let last = requests.last().unwrap().messages.last().unwrap();
    let ContentBlock::ToolResult { content, is_error, .. } = &last.content[0] else { panic!("{last:?}") };
    assert_eq!((content.as_str(), *is_error), ("chosen workspace", false));
}
