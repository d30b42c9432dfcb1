//! The journal end to end: a scripted session (plain turns, tool calls, a capped output, a held
//! approval, a retry, a failed save, a compaction, the archive) recorded in the store, fed back
//! page by page, and projected: incrementally after every turn, in full, and after a crash, all
//! byte-identical.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;

use super::persistence_tests::FaultyStore;
use super::*;
use crate::agent::{AgentFactory, ContextOverrides};
use crate::error::ErrorCode;
use crate::llm::registry::ProviderRegistry;
use crate::llm::retry::{RetryPolicy, RetryingProvider};
use crate::llm::scripted::{ScriptedProvider, ScriptedResponse};
use crate::llm::{LlmError, LlmErrorKind};
use crate::model::TurnStatus;
use crate::model::{ApprovalAnswer, Decision, MAX_EVENTS_PAGE, StoredEvent};
use crate::session::projection::{CHECKPOINT_FILE, EVENTS_FILE, Projector, TRANSCRIPT_FILE, project_session};
use crate::store::{RedbStore, SessionStore};
use crate::tools::{ApprovalPolicy, BuiltinTool, ShellRequest, ToolRequest, Workspace};

fn service(provider: Arc<ScriptedProvider>, store: Arc<FaultyStore>, workspace: &Path) -> LiveSessionService {
    let policy = RetryPolicy {
        max_retries: 2,
        initial_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(1),
        max_retry_after: Duration::from_millis(1),
    };
    let mut registry = ProviderRegistry::new();
    registry.insert("test", Arc::new(RetryingProvider::new(provider, policy)));
    let factory =
        AgentFactory::new(Arc::new(registry), Some("test:model".into()), Some(Workspace::new(workspace).unwrap()));
    LiveSessionService::new(factory, Some(store))
}

async fn all_events(service: &LiveSessionService, id: &SessionId) -> Vec<StoredEvent> {
    let mut events = Vec::new();
    let mut after = None;
    loop {
        let page = service.events(id, after, 3).await.unwrap();
        if page.events.is_empty() {
            return events;
        }
        after = page.next_seq;
        events.extend(page.events);
    }
}

async fn project(service: &LiveSessionService, projector: &Projector, id: &SessionId) {
    let fetch = |after| async move {
        service.events(id, after, MAX_EVENTS_PAGE).await.map(|page| page.events).map_err(|err| err.to_string())
    };
    project_session(projector, id, fetch).await.unwrap();
}

fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else {
                let name = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

#[tokio::test]
async fn journal_replay_is_byte_identical_incremental_full_and_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let file: String = (0..2000).map(|n| format!("line {n}\n")).collect();
    std::fs::write(dir.path().join("log.txt"), &file).unwrap();
    let store = Arc::new(FaultyStore {
        inner: RedbStore::open(dir.path().join("s.redb")).unwrap(),
        fail_saves: AtomicBool::new(false),
    });
    let overloaded = LlmError::new(LlmErrorKind::Overloaded, "overloaded, try again");
    let provider = ScriptedProvider::new([
        // 1: a plain turn, streamed in pieces.
        ScriptedResponse::text(&["Hel", "lo, ", "world"]),
        // 2: a tool call whose output is capped.
        ScriptedResponse::tool_calls(&[("t1", "read_file", json!({"path": "log.txt"}))]),
        ScriptedResponse::text(&["read it"]),
        // 3: a shell call held for approval, then answered.
        ScriptedResponse::tool_calls(&[("s1", "shell", json!({"command": "echo hi"}))]),
        ScriptedResponse::text(&["ran it"]),
        // 4: a retry before any content.
        ScriptedResponse::refused(overloaded),
        ScriptedResponse::text(&["after a retry"]),
        // 5: a turn whose save fails, then one that saves both.
        ScriptedResponse::text(&["unsaved"]),
        ScriptedResponse::text(&["saved again"]),
        // 6: inbox mail joined to the next prompt.
        ScriptedResponse::text(&["read the mail"]),
        // 7: the summary of a compaction (feature session-compaction).
        ScriptedResponse::text(&["the summary"]),
    ]);
    let service = service(provider, store.clone(), dir.path());
    let out = dir.path().join("projection");
    let projector = Projector::new(&out);

    let mut request = CreateSessionRequest { prompt: "first".into(), ..CreateSessionRequest::default() };
    request.build.tools = ToolRequest {
        builtins: Some(vec![BuiltinTool::ReadFile]),
        shell: Some(ShellRequest::Enabled(true)),
        approval: Some(ApprovalPolicy::Tools { tools: vec!["shell".into()] }),
        ..ToolRequest::default()
    };
    request.build.context = ContextOverrides { tool_output_cap_bytes: Some(4096), ..ContextOverrides::default() };
    let id = service.create_session(request).await.unwrap().session_id;
    project(&service, &projector, &id).await;

    assert_eq!(service.start_turn(&id, test_support::turn("read the log")).await.unwrap().text, "read it");
    project(&service, &projector, &id).await;
    let early_checkpoint = std::fs::read(projector.session_dir(&id).join(CHECKPOINT_FILE)).unwrap();

    let held = service.start_turn(&id, test_support::turn("run it")).await.unwrap();
    assert_eq!(held.status, TurnStatus::PendingToolCalls);
    project(&service, &projector, &id).await;
    let approvals = vec![ApprovalAnswer { tool_use_id: "s1".into(), decision: Decision::Allow }];
    let answer = TurnRequest { approvals, ..TurnRequest::default() };
    assert_eq!(service.start_turn(&id, answer).await.unwrap().text, "ran it");
    project(&service, &projector, &id).await;

    assert_eq!(service.start_turn(&id, test_support::turn("again")).await.unwrap().text, "after a retry");
    project(&service, &projector, &id).await;

    // Store variant: the failed save's events are not in the journal; the next save writes them.
    let before = all_events(&service, &id).await;
    store.fail_saves.store(true, Ordering::SeqCst);
    let failed = service.start_turn(&id, test_support::turn("lost?")).await.unwrap_err();
    assert_eq!(failed.code(), ErrorCode::SessionStoreError);
    assert_eq!(all_events(&service, &id).await, before, "a failed save's events do not appear");
    project(&service, &projector, &id).await;
    store.fail_saves.store(false, Ordering::SeqCst);
    assert_eq!(service.start_turn(&id, test_support::turn("and now")).await.unwrap().text, "saved again");
    project(&service, &projector, &id).await;
    let after = all_events(&service, &id).await;
    let fields: Vec<serde_json::Value> = after.iter().map(|event| event.event.to_value()).collect();
    let prompts: Vec<&str> = fields.iter().filter_map(|event| event["prompt"].as_str()).collect();
    assert_eq!(prompts, ["first", "read the log", "run it", "again", "lost?", "and now"]);

    // Comms: a message waits in the inbox and is delivered with the next prompt.
    service
        .send(&id, SendRequest { body: "a note from the caller".into(), ..SendRequest::default() })
        .await
        .unwrap();
    assert_eq!(service.start_turn(&id, test_support::turn("any mail?")).await.unwrap().text, "read the mail");
    project(&service, &projector, &id).await;

    #[cfg(feature = "session-compaction")]
    {
        service.compact(&id).await.unwrap();
        project(&service, &projector, &id).await;
    }
    service.archive(&id).await.unwrap();
    project(&service, &projector, &id).await;

    // The journal: numbered without gaps, every kind the script produced, deltas merged.
    let events = all_events(&service, &id).await;
    assert_eq!(
        events.iter().map(|event| event.seq).collect::<Vec<_>>(),
        (0..events.len() as u64).collect::<Vec<_>>()
    );
    let kinds: std::collections::BTreeSet<&str> = events.iter().map(StoredEvent::kind).collect();
    for kind in [
        "session_created",
        "prompt_received",
        "turn_started",
        "text_delta",
        "tool_call_requested",
        "tool_result",
        "approvals_answered",
        "inbox_delivered",
        "retry",
        "turn_completed",
        "archived",
    ] {
        assert!(kinds.contains(kind), "{kind} missing from {kinds:?}");
    }
    #[cfg(feature = "session-compaction")]
    assert!(kinds.contains("compaction_started") && kinds.contains("compaction_completed"), "{kinds:?}");
    let first_answer: Vec<String> = events
        .iter()
        .filter(|event| event.kind() == "text_delta")
        .map(|event| event.event.to_value()["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(first_answer[0], "Hello, world", "one merged event per block");
    let capped = events.iter().find(|event| event.kind() == "tool_result").unwrap();
    assert!(
        capped.event.to_value()["content"].as_str().unwrap().contains("elided"),
        "the capped output, as the model saw it"
    );
    assert_eq!(store.inner.record(&id).await.unwrap().unwrap().event_seq, events.len() as u64);

    // Replay in full into an empty tree: byte-identical.
    let incremental = tree(&out);
    assert!(incremental.contains_key(&format!("sessions/{id}/session.json")));
    std::fs::remove_dir_all(&out).unwrap();
    project(&service, &projector, &id).await;
    assert_eq!(tree(&out), incremental, "a full replay writes what the incremental projection wrote");

    // Crash variant: an older checkpoint, garbage after it; resuming repairs the tree.
    let session_dir = projector.session_dir(&id);
    std::fs::write(session_dir.join(CHECKPOINT_FILE), &early_checkpoint).unwrap();
    for name in [EVENTS_FILE, TRANSCRIPT_FILE] {
        let mut file = std::fs::OpenOptions::new().append(true).open(session_dir.join(name)).unwrap();
        std::io::Write::write_all(&mut file, b"{\"half a line").unwrap();
    }
    project(&service, &projector, &id).await;
    assert_eq!(tree(&out), incremental, "a resumed crash neither duplicates nor loses lines");

    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&session_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}
