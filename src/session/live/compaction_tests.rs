//! Compaction end to end through the live service and the scripted provider: the flow, its
//! events, its failure modes, its budget, the reactive path, persistence, and a long session.

use super::test_support::scripted_service;
#[cfg(feature = "session-store")]
use super::test_support::temp_store;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use crate::agent::compaction::{COMPACTION_PROMPT, PLACEHOLDER_PREFIX, SUMMARY_PREFIX};
use crate::agent::{AgentEvent, ContextOverrides};
use crate::error::ErrorCode;
use crate::ids::SessionId;
use crate::llm::scripted::{ScriptedProvider, ScriptedResponse};
use crate::llm::{ContentBlock, LlmError, LlmErrorKind, ModelRequest, Usage};
use crate::model::Budget;
use crate::model::context::{estimate_message, estimate_text};
use crate::session::{CreateSessionRequest, LiveSessionService, SessionService, TurnOptions, TurnRequest};
use crate::tools::Workspace;

const SYSTEM: &str = "You are a careful assistant.";

/// Prompt tokens of a request, estimated the way deputy estimates history.
fn request_tokens(request: &ModelRequest) -> u64 {
    request.messages.iter().map(estimate_message).sum::<u64>() + request.system.as_deref().map_or(0, estimate_text)
}

fn realistic_usage(request: &ModelRequest) -> Usage {
    Usage { input_tokens: request_tokens(request), output_tokens: 10, ..Usage::default() }
}

fn is_summary_request(request: &ModelRequest) -> bool {
    request.messages.last().is_some_and(|message| message.text().contains(COMPACTION_PROMPT))
}

/// The last user text of a request (the prompt the model answers).
fn last_prompt(request: &ModelRequest) -> String {
    match request.messages.last().and_then(|message| message.content.last()) {
        Some(ContentBlock::Text { text }) => text.clone(),
        _ => String::new(),
    }
}

fn create(prompt: &str, context: ContextOverrides) -> CreateSessionRequest {
    let mut request = CreateSessionRequest { prompt: prompt.into(), ..CreateSessionRequest::default() };
    request.build.system_prompt = Some(SYSTEM.into());
    request.build.max_tokens = Some(500);
    request.build.context = context;
    request
}

fn small_window() -> ContextOverrides {
    ContextOverrides {
        context_window: Some(10_000),
        threshold_tokens: Some(2_000),
        recent_turn_budget: Some(300),
        max_summary_tokens: Some(700),
        ..ContextOverrides::default()
    }
}

/// Answers "ok" (or `summary` to a compaction request), reporting realistic usage.
fn summarizing_model(summary: &'static str) -> Arc<ScriptedProvider> {
    ScriptedProvider::responding(move |request| {
        let text = if is_summary_request(request) { summary } else { "ok" };
        ScriptedResponse::text_with_usage(&[text], realistic_usage(request))
    })
}

async fn turn_with_events(service: &LiveSessionService, id: &SessionId, prompt: &str) -> Vec<AgentEvent> {
    let (events, mut received) = crate::agent::event_channel();
    let options = TurnOptions { events: Some(events), ..TurnOptions::default() };
    service.start_turn(id, TurnRequest { prompt: prompt.into(), options, ..TurnRequest::default() }).await.unwrap();
    let mut all = Vec::new();
    while let Some(event) = received.try_recv() {
        all.push(event);
    }
    all
}

fn kinds(events: &[AgentEvent]) -> Vec<String> {
    events.iter().map(|event| serde_json::to_value(event).unwrap()["type"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_long_history_is_summarized_in_order_keeping_the_system_prompt_verbatim() {
    let provider = summarizing_model("SUMMARY: the user sent a long text");
    let service = scripted_service(provider.clone(), None, None);
    let id = service.create_session(create(&"a".repeat(8000), small_window())).await.unwrap().session_id;

    let events = turn_with_events(&service, &id, "second").await;
    assert_eq!(
        kinds(&events),
        ["turn_started", "compaction_started", "compaction_completed", "text_delta", "usage", "turn_completed"]
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 3, "first turn, summary, second turn");
    let summary_request = &requests[1];
    assert!(is_summary_request(summary_request));
    // The session's tools stay declared (the history may call them; the prefix stays cached),
    // but the summary may not call them.
    assert_eq!(summary_request.tools, requests[0].tools);
    assert_eq!(summary_request.tool_choice, crate::llm::ToolChoice::Forbidden);
    assert_eq!(summary_request.max_tokens, 700);
    assert_eq!(summary_request.system.as_deref(), Some(SYSTEM));

    let after = &requests[2];
    assert_eq!(after.system.as_deref(), Some(SYSTEM), "the system prompt is sent verbatim");
    assert_eq!(after.messages.len(), 1, "the long first turn did not fit the recent-turn budget");
    let text = after.messages[0].text();
    assert!(text.starts_with(SUMMARY_PREFIX) && text.contains("SUMMARY: the user sent a long text"));
    assert!(text.ends_with("second"), "the prompt of the turn in progress is kept");

    let view = service.read(&id, None).await.unwrap();
    assert_eq!((view.state.context.compactions, view.state.context.history_epoch), (1, 1));
    let spent: u64 = requests.iter().map(|r| realistic_usage(r).total_tokens()).sum();
    assert_eq!(view.billing.total_tokens, spent, "the summary call is billed to the session");
    assert!(view.state.context.estimated_history_tokens < 500);
}

#[tokio::test]
async fn a_failed_summary_is_not_fatal_and_leaves_the_history_untouched() {
    let provider = ScriptedProvider::responding(|request| {
        if is_summary_request(request) {
            return ScriptedResponse::refused(LlmError::new(LlmErrorKind::Server, "summary service down"));
        }
        ScriptedResponse::text_with_usage(&["ok"], realistic_usage(request))
    });
    let service = scripted_service(provider.clone(), None, None);
    let id = service.create_session(create(&"a".repeat(8000), small_window())).await.unwrap().session_id;

    let events = turn_with_events(&service, &id, "second").await;
    assert!(kinds(&events).contains(&"compaction_failed".to_owned()));
    assert_eq!(kinds(&events).last().map(String::as_str), Some("turn_completed"));
    let requests = provider.requests();
    assert_eq!(requests[2].messages.len(), 3, "original prompt, answer, new prompt");
    assert_eq!(requests[2].messages[0].text(), "a".repeat(8000));
    assert_eq!(service.read(&id, None).await.unwrap().state.context.compactions, 0);
}

#[tokio::test]
async fn pruning_alone_avoids_the_summary_call_when_it_is_enough() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.txt"), "word ".repeat(1200)).unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let provider = ScriptedProvider::responding(move |request| {
        if last_prompt(request) == "read" {
            let id = format!("call-{}", counter.fetch_add(1, Ordering::SeqCst));
            return ScriptedResponse::tool_calls(&[(id.as_str(), "read_file", json!({"path": "big.txt"}))])
                .with_usage(realistic_usage(request));
        }
        ScriptedResponse::text_with_usage(&["ok"], realistic_usage(request))
    });
    let service = scripted_service(provider.clone(), Some(Workspace::new(dir.path()).unwrap()), None);
    let context =
        ContextOverrides { context_window: Some(20_000), threshold_tokens: Some(2_600), ..Default::default() };
    let id = service.create_session(create("read", context)).await.unwrap().session_id;
    // The second large result pushes the history over the threshold before the model answers.
    let events = turn_with_events(&service, &id, "read").await;
    let freed = events.iter().find_map(|e| match e {
        AgentEvent::Pruned { results: 1, tokens_freed } => Some(*tokens_freed),
        _ => None,
    });
    assert!(freed.is_some_and(|freed| freed > 1000), "one old result pruned: {events:?}");
    assert!(events.iter().any(|e| matches!(e, AgentEvent::CompactionCompleted { summarized: false, .. })));
    let requests = provider.requests();
    assert!(!requests.iter().any(is_summary_request), "no summary call was needed");
    let last = requests.last().unwrap();
    match &last.messages[2].content[0] {
        ContentBlock::ToolResult { tool_use_id, content, .. } => {
            assert_eq!(tool_use_id, "call-0", "ids stay");
            assert!(content.starts_with(PLACEHOLDER_PREFIX));
        }
        other => panic!("{other:?}"),
    }
    match &last.messages[6].content[0] {
        ContentBlock::ToolResult { content, .. } => assert!(content.starts_with("word"), "the recent result stays"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn compaction_is_billed_and_skipped_once_the_budget_is_spent() {
    let provider = summarizing_model("S");
    let service = scripted_service(provider.clone(), None, None);
    let id = service.create_session(create("hello", small_window())).await.unwrap().session_id;
    let before = service.read(&id, None).await.unwrap().billing.total_tokens;
    let done = service.compact(&id).await.unwrap();
    assert!(done.compacted && done.summarized);
    let after = service.read(&id, None).await.unwrap().billing.total_tokens;
    assert!(after > before, "the summary call counts in the session's usage");

    let mut spent = create("hello", small_window());
    spent.build.budget = Budget { max_tokens: Some(1), ..Budget::default() };
    let spent = service.create_session(spent).await.unwrap().session_id;
    let requests = provider.requests().len();
    let skipped = service.compact(&spent).await.unwrap();
    assert!(!skipped.compacted, "no budget left for a summary call");
    assert_eq!(provider.requests().len(), requests, "no model call was made");
}

#[tokio::test]
async fn a_context_overflow_compacts_once_and_sends_the_request_again() {
    let overflowed = Arc::new(AtomicU64::new(0));
    let counter = overflowed.clone();
    let provider = ScriptedProvider::responding(move |request| {
        if is_summary_request(request) {
            return ScriptedResponse::text_with_usage(&["S"], realistic_usage(request));
        }
        if last_prompt(request) == "too long" && counter.fetch_add(1, Ordering::SeqCst) == 0 {
            return ScriptedResponse::refused(LlmError::new(LlmErrorKind::ContextOverflow, "prompt is too long"));
        }
        ScriptedResponse::text_with_usage(&["ok"], realistic_usage(request))
    });
    let service = scripted_service(provider.clone(), None, None);
    let id = service.create_session(create("hello", ContextOverrides::default())).await.unwrap().session_id;
    let result = service.start_turn(&id, TurnRequest { prompt: "too long".into(), ..TurnRequest::default() }).await;
    assert_eq!(result.unwrap().text, "ok");
    let requests = provider.requests();
    assert_eq!(requests.iter().filter(|r| is_summary_request(r)).count(), 1);
    assert_eq!(requests.len(), 4, "first turn, refused request, summary, the request again");
}

#[tokio::test]
async fn a_persistent_overflow_fails_the_turn_after_one_compaction() {
    let provider = ScriptedProvider::responding(|request| {
        if is_summary_request(request) {
            return ScriptedResponse::text_with_usage(&["S"], realistic_usage(request));
        }
        if last_prompt(request) == "too long" {
            return ScriptedResponse::refused(LlmError::new(LlmErrorKind::ContextOverflow, "prompt is too long"));
        }
        ScriptedResponse::text_with_usage(&["ok"], realistic_usage(request))
    });
    let service = scripted_service(provider.clone(), None, None);
    let id = service.create_session(create("hello", ContextOverrides::default())).await.unwrap().session_id;
    let error = service
        .start_turn(&id, TurnRequest { prompt: "too long".into(), ..TurnRequest::default() })
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::AgentError);
    assert_eq!(provider.requests().iter().filter(|r| is_summary_request(r)).count(), 1, "never a loop");
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn a_compacted_history_is_a_new_epoch_that_survives_a_restart() {
    use crate::store::SessionStore;
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let provider = summarizing_model("SUMMARY");
    let before = scripted_service(provider.clone(), None, Some(store.clone()));
    let id = before.create_session(create(&"a".repeat(8000), small_window())).await.unwrap().session_id;
    before.start_turn(&id, TurnRequest { prompt: "second".into(), ..TurnRequest::default() }).await.unwrap();
    drop(before);

    let stored = store.history(&id).await.unwrap();
    assert_eq!(stored.len(), 2, "summary + second prompt, then the answer");
    assert!(stored[0].text().starts_with(SUMMARY_PREFIX));
    assert_eq!(store.discarded_len(&id).unwrap(), 2, "the replaced messages went to `discarded`");
    let record = store.record(&id).await.unwrap().unwrap();
    assert_eq!((record.history_epoch, record.context.compactions), (1, 1));

    let after = scripted_service(provider.clone(), None, Some(store));
    after.start_turn(&id, TurnRequest { prompt: "third".into(), ..TurnRequest::default() }).await.unwrap();
    let resumed = provider.requests().last().unwrap().clone();
    assert_eq!(resumed.messages.len(), 3);
    assert!(resumed.messages[0].text().starts_with(SUMMARY_PREFIX), "the restart sees the compacted history");
}

/// A delegated agent that reads a large file every turn for 300 turns: the history is pruned
/// and summarized along the way, no request ever exceeds the window, and every turn works.
#[tokio::test]
async fn three_hundred_turns_with_large_tool_outputs_stay_within_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let row = r#"{"id": 1, "path": "/srv/data/file.txt", "size": 12345},"#;
    std::fs::write(dir.path().join("data.json"), format!("[{}]", row.repeat(60))).unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let provider = ScriptedProvider::responding(move |request| {
        if is_summary_request(request) {
            return ScriptedResponse::text_with_usage(
                &["Goal: read data.json each turn. Progress: fine."],
                realistic_usage(request),
            );
        }
        if last_prompt(request).starts_with("task") {
            let id = format!("call-{}", counter.fetch_add(1, Ordering::SeqCst));
            return ScriptedResponse::tool_calls(&[(id.as_str(), "read_file", json!({"path": "data.json"}))])
                .with_usage(realistic_usage(request));
        }
        ScriptedResponse::text_with_usage(&["Read it; the rows look fine."], realistic_usage(request))
    });
    let service = scripted_service(provider.clone(), Some(Workspace::new(dir.path()).unwrap()), None);
    let window = 6_000;
    let context = ContextOverrides {
        context_window: Some(window),
        tool_output_cap_bytes: Some(2048),
        ..ContextOverrides::default()
    };
    let id = service.create_session(create("task 0", context)).await.unwrap().session_id;
    for n in 1..300 {
        let result = service.start_turn(&id, TurnRequest { prompt: format!("task {n}"), ..TurnRequest::default() });
        assert_eq!(result.await.unwrap().text, "Read it; the rows look fine.", "turn {n}");
    }
    let requests = provider.requests();
    for request in &requests {
        let needed = request_tokens(request) + u64::from(request.max_tokens);
        assert!(needed <= window, "a request needs {needed} tokens of a {window} window");
    }
    let view = service.read(&id, None).await.unwrap();
    assert_eq!(view.state.turns, 300);
    assert!(view.state.context.compactions >= 10, "{:?}", view.state.context);
    assert!(view.state.message_count < 60, "the history stays short: {}", view.state.message_count);
}

/// A `compaction_start` hook that answers `deny` skips the compaction: no summary call, the
/// history unchanged; the hook saw the trigger.
#[tokio::test]
async fn a_compaction_start_hook_may_skip_the_compaction() {
    use crate::agent::AgentFactory;
    use crate::hooks::Hooks;
    use crate::hooks::{HookConfig, HookEventKind};
    use crate::llm::registry::ProviderRegistry;

    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("event.json");
    let script = format!("cat > {}; echo '{{\"decision\": \"deny\", \"reason\": \"not now\"}}'", seen.display());
    let hook = HookConfig {
        event: HookEventKind::CompactionStart,
        matcher: None,
        command: Some(vec!["sh".into(), "-c".into(), script]),
        url: None,
        timeout_ms: None,
        on_error: None,
    };
    let provider = summarizing_model("S");
    let mut registry = ProviderRegistry::new();
    registry.insert("test", provider.clone());
    let factory = AgentFactory::new(Arc::new(registry), Some("test:model".into()), None)
        .with_hooks(Hooks::from_config(&[hook]).unwrap());
    let service = LiveSessionService::new(factory, None);
    let id = service.create_session(create("hello", small_window())).await.unwrap().session_id;
    let requests = provider.requests().len();
    let skipped = service.compact(&id).await.unwrap();
    assert!(!skipped.compacted, "{skipped:?}");
    assert_eq!(provider.requests().len(), requests, "no summary call");
    let event: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(
        event,
        json!({"event": "compaction_start", "session_id": id.to_string(), "turn": 1, "trigger": "manual"})
    );
}

/// A compaction replaces the history: the turns before it can no longer be forked at or
/// rewound to, and the compacted history is where the turn it happened in ends.
#[tokio::test]
async fn a_compacted_history_reaches_only_the_turns_since() {
    let provider = summarizing_model("SUMMARY: a long text");
    let service = scripted_service(provider.clone(), None, None);
    let id = service.create_session(create(&"a".repeat(8000), small_window())).await.unwrap().session_id;
    turn_with_events(&service, &id, "second").await;
    turn_with_events(&service, &id, "third").await;

    let refused = service.fork(&id, Some(1)).await.unwrap_err();
    assert_eq!(refused.code(), ErrorCode::InvalidRequest);
    assert!(refused.to_string().contains("ends of turns 2 to 3"), "{refused}");
    let fork = service.fork(&id, Some(2)).await.unwrap();
    let compacted = service.history(&id).await.unwrap().messages;
    let forked = service.history(&fork.session_id).await.unwrap().messages;
    assert_eq!(forked[..], compacted[..forked.len()], "the fork is the compacted history up to turn 2");
    assert_eq!(forked.len() + 2, compacted.len());

    let rewound = service.rewind(&id, 2).await.unwrap();
    assert_eq!((rewound.rewound_turns, rewound.message_count), (vec![3], forked.len() as u64));
    assert_eq!(service.rewind(&id, 1).await.unwrap_err().code(), ErrorCode::InvalidRequest);
}
