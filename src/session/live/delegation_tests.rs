//! Delegation (issue 16) with the scripted provider: a responder plays every session, telling
//! parent from child by the first prompt, so concurrent children need no fixed order.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::delegation::DelegationLimits;
use super::test_support::*;
use super::*;
use crate::error::ErrorCode;
use crate::llm::scripted::{Gate, ScriptedProvider, ScriptedResponse};
use crate::llm::{ContentBlock, ModelRequest};
use crate::model::TurnStatus;
use crate::model::{Budget, Origin, SessionStatus};
use crate::tools::BuiltinTool;

const LIMIT: Duration = Duration::from_secs(20);

/// Every text and tool result of a message, joined.
fn message_text(request: &ModelRequest, index: usize) -> String {
    request.messages[index]
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.clone()),
            ContentBlock::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn first(request: &ModelRequest) -> String {
    message_text(request, 0)
}

fn last(request: &ModelRequest) -> String {
    message_text(request, request.messages.len() - 1)
}

fn answered(request: &ModelRequest) -> bool {
    request
        .messages
        .last()
        .is_some_and(|message| message.content.iter().any(|block| matches!(block, ContentBlock::ToolResult { .. })))
}

fn call(tool: &str, input: Value) -> ScriptedResponse {
    ScriptedResponse::tool_calls(&[("call_1", tool, input)])
}

fn shared(
    provider: Arc<ScriptedProvider>,
    limits: DelegationLimits,
    store: crate::store::SharedStore,
) -> Arc<LiveSessionService> {
    scripted_service(provider, None, store).with_delegation(limits).into_shared()
}

async fn settle(service: &LiveSessionService, id: &SessionId) -> SessionView {
    tokio::time::timeout(LIMIT, service.read(id, Some(LIMIT))).await.unwrap().unwrap()
}

fn children(list: &crate::model::SessionList) -> Vec<SessionId> {
    list.sessions.iter().map(|summary| summary.session_id.clone()).collect()
}

fn by_parent(parent: &SessionId) -> ListQuery {
    ListQuery { parent_id: Some(parent.clone()), ..ListQuery::default() }
}

/// Parent: delegates `task` (with `extra` arguments), then answers with what it was told.
/// Child (first prompt `task`): answers "child says 42".
fn parent_and_child(extra: Value) -> Arc<ScriptedProvider> {
    ScriptedProvider::responding(move |request| {
        if first(request).starts_with("count the files") {
            return ScriptedResponse::text(&["child says 42"]);
        }
        if answered(request) {
            return ScriptedResponse::text(&[&format!("parent heard: {}", last(request))]);
        }
        let mut input = json!({"task": "count the files", "name": "counter"});
        input.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
        call("delegate", input)
    })
}

#[tokio::test]
async fn a_waited_child_answers_its_parent_and_is_billed_to_it() {
    let service = shared(parent_and_child(json!({})), DelegationLimits::default(), None);
    let parent = service.create_session(create("do it with a helper")).await.unwrap();
    assert!(parent.text.contains("child says 42"), "{}", parent.text);
    assert!(parent.text.contains("\"status\":\"completed\""), "{}", parent.text);

    let listed = service.list(by_parent(&parent.session_id)).await.unwrap();
    assert_eq!(listed.sessions.len(), 1);
    let child_id = listed.sessions[0].session_id.clone();
    assert_eq!(listed.sessions[0].depth, 1);
    assert_eq!(listed.sessions[0].name.as_deref(), Some("counter"));

    let child = service.read(&child_id, None).await.unwrap();
    let lineage = &child.state.lineage;
    assert_eq!(lineage.parent_id.as_ref(), Some(&parent.session_id));
    assert_eq!(lineage.root_id.as_ref(), Some(&parent.session_id));
    assert_eq!(lineage.origin, Origin::Delegated);
    let view = service.read(&parent.session_id, None).await.unwrap();
    assert_eq!(view.state.children.len(), 1);
    assert_eq!(view.state.children[0].session_id, child_id);
    assert_eq!(view.billing.delegated_tokens, child.billing.total_tokens);
    assert!(child.billing.total_tokens > 0);
    assert_eq!(view.billing.reserved_tokens, 0);
    let tree = service.list(ListQuery { root_id: Some(parent.session_id.clone()), ..ListQuery::default() }).await;
    assert_eq!(tree.unwrap().total, 2, "the root and its child");
}

#[tokio::test]
async fn an_over_budget_request_is_capped_and_the_refund_lands() {
    let service =
        shared(parent_and_child(json!({"budget": {"max_tokens": 1_000_000}})), DelegationLimits::default(), None);
    let mut request = create("do it with a helper");
    request.build.budget = Budget { max_tokens: Some(10_000), ..Budget::default() };
    let parent = service.create_session(request).await.unwrap();
    let child_id = children(&service.list(by_parent(&parent.session_id)).await.unwrap())[0].clone();
    let child = service.read(&child_id, None).await.unwrap();
    // The parent had used 15 tokens (its first call) when it delegated: 9,985 were left (a
    // carve must hold a call's input, tool declarations included: G9).
    assert_eq!(child.state.model, "test:model");
    let used = child.billing.total_tokens;
    assert_eq!(child.billing.budget.max_tokens, Some(used), "the child's budget closed at what it used");
    let view = service.read(&parent.session_id, None).await.unwrap();
    assert_eq!((view.billing.reserved_tokens, view.billing.delegated_tokens), (0, used), "the refund landed");
    assert_eq!(view.billing.remaining.tokens, Some(10_000 - view.billing.total_tokens - used));
    assert!(parent.text.contains("child says 42"));
}

#[tokio::test]
async fn the_carve_is_capped_to_what_the_parent_has_left() {
    let gate = Gate::new();
    let child_gate = gate.clone();
    let provider = ScriptedProvider::responding(move |request| {
        if first(request).starts_with("count the files") {
            return ScriptedResponse::text(&["done"]).pause_before(0, &child_gate);
        }
        if answered(request) {
            return ScriptedResponse::text(&["ok"]);
        }
        call("delegate", json!({"task": "count the files", "wait": false, "budget": {"max_tokens": 1_000_000}}))
    });
    let service = shared(provider, DelegationLimits::default(), None);
    let mut request = create("do it with a helper");
    request.build.budget = Budget { max_tokens: Some(10_000), ..Budget::default() };
    let parent = service.create_session(request).await.unwrap();
    let child_id = children(&service.list(by_parent(&parent.session_id)).await.unwrap())[0].clone();
    let child = service.read(&child_id, None).await.unwrap();
    assert_eq!(child.billing.budget.max_tokens, Some(9_985), "10,000 minus the 15 the parent had used");
    let view = service.read(&parent.session_id, None).await.unwrap();
    assert_eq!(view.billing.reserved_tokens, 9_985, "held while the child works");
    gate.open();
    settle(&service, &child_id).await;
}

/// G9: the tool declarations are part of a call's input. A child whose carve holds its task
/// and system prompt but not the declarations of its tools makes no call at all.
#[tokio::test]
async fn a_carve_too_small_for_the_tool_declarations_makes_no_call() {
    let provider = ScriptedProvider::responding(|request| {
        if answered(request) {
            return ScriptedResponse::text(&["ok"]);
        }
        call("delegate", json!({"task": "tiny", "budget": {"max_tokens": 200}}))
    });
    let service = shared(provider.clone(), DelegationLimits::default(), None);
    let parent = service.create_session(create("do it with a helper")).await.unwrap();
    let child_id = children(&service.list(by_parent(&parent.session_id)).await.unwrap())[0].clone();
    let child = settle(&service, &child_id).await;
    let declarations: usize =
        provider.requests()[0].tools.iter().map(|spec| spec.input_schema.to_string().len()).sum();
    assert!(declarations > 800, "the child has tools that take more than its carve: {declarations} bytes");
    assert_eq!(
        child.state.last_turn.as_ref().map(|turn| turn.stop_reason.clone()),
        Some(Some(crate::model::StopReason::BudgetExhausted))
    );
    assert!(provider.requests().iter().all(|request| first(request) != "tiny"), "the child never called the model");
}

#[tokio::test]
async fn a_grandchild_beyond_max_depth_is_refused_as_a_tool_error() {
    let provider = ScriptedProvider::responding(|request| {
        let task = first(request);
        if answered(request) {
            return ScriptedResponse::text(&[&format!("heard: {}", last(request))]);
        }
        if task.starts_with("child task") {
            return call("delegate", json!({"task": "grandchild task"}));
        }
        call("delegate", json!({"task": "child task"}))
    });
    let service = shared(provider.clone(), DelegationLimits::default(), None);
    let parent = service.create_session(create("root task")).await.unwrap();
    assert!(parent.text.contains("delegation refused"), "{}", parent.text);
    assert!(parent.text.contains("max_depth"), "{}", parent.text);
    let tree = service.list(ListQuery { root_id: Some(parent.session_id.clone()), ..ListQuery::default() }).await;
    assert_eq!(tree.unwrap().total, 2, "no grandchild was created");
    assert!(!provider.requests().iter().any(|request| first(request).starts_with("grandchild")));
}

#[tokio::test]
async fn caps_refuse_at_once_and_archived_children_stop_counting() {
    let provider = ScriptedProvider::responding(|request| {
        if first(request).starts_with("small task") {
            return ScriptedResponse::text(&["small done"]);
        }
        let prompt = last(request);
        if answered(request) {
            return ScriptedResponse::text(&[&format!("result: {prompt}")]);
        }
        if let Some(id) = prompt.strip_prefix("archive ") {
            return call("cancel_delegate", json!({"session_id": id, "archive": true}));
        }
        call("delegate", json!({"task": "small task"}))
    });
    let limits = DelegationLimits { max_children_per_session: 1, ..DelegationLimits::default() };
    let service = shared(provider, limits, None);
    let parent = service.create_session(create("first")).await.unwrap();
    let id = parent.session_id.clone();
    let first_child = children(&service.list(by_parent(&id)).await.unwrap())[0].clone();

    let refused = service.start_turn(&id, turn("second")).await.unwrap();
    assert!(refused.text.contains("max_children_per_session"), "{}", refused.text);
    assert_eq!(service.list(by_parent(&id)).await.unwrap().total, 1);

    let archived = service.start_turn(&id, turn(&format!("archive {first_child}"))).await.unwrap();
    assert!(archived.text.contains("\"archived\":true"), "{}", archived.text);
    let again = service.start_turn(&id, turn("third")).await.unwrap();
    assert!(again.text.contains("small done"), "the archived child freed its slot: {}", again.text);

    // The server-wide cap counts every parent's children.
    let limits = DelegationLimits { max_live_delegated: 1, ..DelegationLimits::default() };
    let provider = ScriptedProvider::responding(|request| {
        if first(request).starts_with("small task") {
            return ScriptedResponse::text(&["small done"]);
        }
        if answered(request) {
            return ScriptedResponse::text(&[&format!("result: {}", last(request))]);
        }
        call("delegate", json!({"task": "small task"}))
    });
    let service = shared(provider, limits, None);
    service.create_session(create("one")).await.unwrap();
    let other = service.create_session(create("two")).await.unwrap();
    assert!(other.text.contains("max_live_delegated"), "{}", other.text);
}

#[tokio::test]
async fn background_children_run_at_once_and_wait_all_collects_them() {
    let provider = ScriptedProvider::responding(|request| {
        let task = first(request);
        if let Some(letter) = task.strip_prefix("part ") {
            return ScriptedResponse::text(&[&format!("part {letter} done")]);
        }
        let prompt = last(request);
        if prompt.contains("\"finished\"") {
            return ScriptedResponse::text(&[&format!("all: {prompt}")]);
        }
        if answered(request) {
            // The two `delegate` results name the children (their results may have arrived
            // as messages already: waiting on them by id still reports them).
            let ids: Vec<Value> = prompt
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .map(|outcome| outcome["session_id"].clone())
                .collect();
            return call("wait", json!({"session_ids": ids, "mode": "all", "timeout_ms": 10_000}));
        }
        ScriptedResponse::tool_calls(&[
            ("d1", "delegate", json!({"task": "part a", "wait": false})),
            ("d2", "delegate", json!({"task": "part b", "wait": false})),
        ])
    });
    let service = shared(provider, DelegationLimits::default(), None);
    let parent = service.create_session(create("split the work")).await.unwrap();
    assert!(parent.text.contains("part a done") && parent.text.contains("part b done"), "{}", parent.text);
    let view = settle(&service, &parent.session_id).await;
    assert_eq!(view.billing.reserved_tokens, 0);
    assert_eq!(view.billing.delegated_tokens, 30, "both children's 15 tokens");
}

#[tokio::test]
async fn a_background_childs_notice_reaches_the_parents_inbox_and_settles_it() {
    let gate = Gate::new();
    let child_gate = gate.clone();
    let provider = ScriptedProvider::responding(move |request| {
        if first(request).starts_with("slow task") {
            return ScriptedResponse::text(&["slow result"]).pause_before(0, &child_gate);
        }
        if answered(request) {
            return ScriptedResponse::text(&["started it"]);
        }
        if first(request).starts_with("start") && request.messages.len() == 1 {
            return call("delegate", json!({"task": "slow task", "wait": false, "name": "slowpoke"}));
        }
        ScriptedResponse::text(&[&format!("noted: {}", last(request))])
    });
    let service = shared(provider.clone(), DelegationLimits::default(), None);
    let parent = service.create_session(create("start")).await.unwrap();
    assert!(parent.text.contains("started it"));
    let id = parent.session_id;
    assert!(
        service.read(&id, None).await.unwrap().billing.reserved_tokens == 0,
        "an unlimited parent holds nothing"
    );
    let child_id = children(&service.list(by_parent(&id)).await.unwrap())[0].clone();
    gate.open();
    settle(&service, &child_id).await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    while service.read(&id, None).await.unwrap().state.inbox.waiting == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no notice arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let next = service.start_turn(&id, turn("anything new?")).await.unwrap();
    assert!(next.text.contains("[child slowpoke"), "{}", next.text);
    assert!(next.text.contains("finished: completed"), "{}", next.text);
    assert!(next.text.contains("slow result"), "{}", next.text);
    let view = service.read(&id, None).await.unwrap();
    assert_eq!(view.billing.delegated_tokens, 15, "settled when the parent took the notice");
}

#[tokio::test]
async fn interrupting_a_parent_cancels_its_running_children_and_archiving_it_archives_them() {
    let gate = Gate::new();
    let child_gate = gate.clone();
    let provider = ScriptedProvider::responding(move |request| {
        if first(request).starts_with("endless") {
            return ScriptedResponse::text(&["never"]).pause_before(0, &child_gate);
        }
        if answered(request) {
            return ScriptedResponse::text(&["started"]);
        }
        call("delegate", json!({"task": "endless", "wait": false}))
    });
    let service = shared(provider, DelegationLimits::default(), None);
    let parent = service.create_session(create("go")).await.unwrap();
    let id = parent.session_id;
    let child_id = children(&service.list(by_parent(&id)).await.unwrap())[0].clone();
    assert_eq!(service.read(&child_id, None).await.unwrap().state.status, SessionStatus::Running);

    let alone = service.interrupt(&id, false).await.unwrap_err();
    assert_eq!(alone.code(), ErrorCode::SessionNotRunning, "without cascade only the parent counts");
    let interrupted = service.interrupt(&id, true).await.unwrap();
    assert_eq!((interrupted.interrupted, interrupted.cascaded.clone()), (false, vec![child_id.clone()]));
    let child = settle(&service, &child_id).await;
    assert_eq!(child.state.last_turn.unwrap().status, TurnStatus::Cancelled);

    let archived = service.archive(&id).await.unwrap();
    assert_eq!(archived.cascaded, vec![child_id.clone()]);
    assert_eq!(service.read(&child_id, None).await.unwrap_err().code(), ErrorCode::SessionNotFound);
    gate.open();
}

#[tokio::test]
async fn a_childs_approval_escalates_to_the_root_and_is_answered_on_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let provider = ScriptedProvider::responding(|request| {
        if first(request).starts_with("write it") {
            if answered(request) {
                return ScriptedResponse::text(&["written"]);
            }
            return call("write_file", json!({"path": "out.txt", "content": "hello"}));
        }
        if answered(request) {
            return ScriptedResponse::text(&[&format!("child reported: {}", last(request))]);
        }
        call("delegate", json!({"task": "write it"}))
    });
    let workspace = crate::tools::Workspace::new(dir.path()).unwrap();
    let service = scripted_service(provider, Some(workspace), None).into_shared();
    let mut request = create("have it written");
    request.build.tools.approval = Some(serde_json::from_value(json!("always")).unwrap());
    let parent = service.create_session(request).await.unwrap();
    assert!(parent.text.contains("pending_tool_calls"), "the parent learns the child waits: {}", parent.text);
    let id = parent.session_id;
    let root = service.read(&id, None).await.unwrap();
    assert_eq!(root.state.escalations.len(), 1);
    let escalation = &root.state.escalations[0];
    assert_eq!((escalation.depth, escalation.pending[0].name.as_str()), (1, "write_file"));
    assert!(!dir.path().join("out.txt").exists());

    let child_id = escalation.session_id.clone();
    let answer = crate::model::ApprovalAnswer {
        tool_use_id: escalation.pending[0].tool_use_id.clone(),
        decision: crate::model::Decision::Allow,
    };
    let request = TurnRequest { approvals: vec![answer], ..TurnRequest::default() };
    let done = service.start_turn(&child_id, request).await.unwrap();
    assert_eq!(done.text, "written");
    assert_eq!(std::fs::read_to_string(dir.path().join("out.txt")).unwrap(), "hello");
    assert!(service.read(&id, None).await.unwrap().state.escalations.is_empty());
}

#[tokio::test]
async fn tools_only_narrow_and_a_disabled_server_offers_none() {
    let provider = ScriptedProvider::responding(|request| {
        if answered(request) {
            return ScriptedResponse::text(&[&format!("heard: {}", last(request))]);
        }
        match last(request).as_str() {
            "shell" => call("delegate", json!({"task": "t", "shell": true})),
            _ => call("delegate", json!({"task": "t", "builtins": ["write_file"]})),
        }
    });
    let service = shared(provider.clone(), DelegationLimits::default(), None);
    let mut request = create("builtins");
    request.build.tools.builtins = Some(vec![BuiltinTool::Delegate]);
    let parent = service.create_session(request).await.unwrap();
    assert!(parent.text.contains("write_file is not among this session's tools"), "{}", parent.text);
    let shell = service.start_turn(&parent.session_id, turn("shell")).await.unwrap();
    assert!(shell.text.contains("no shell to give a child"), "{}", shell.text);

    let off = DelegationLimits { enabled: false, ..DelegationLimits::default() };
    let service = shared(ScriptedProvider::new([ScriptedResponse::text(&["plain"])]), off, None);
    service.create_session(create("no delegation")).await.unwrap();
    let mut request = create("asks for it");
    request.build.tools.builtins = Some(vec![BuiltinTool::Delegate]);
    assert_eq!(service.create_session(request).await.unwrap_err().code(), ErrorCode::InvalidRequest);
}

#[cfg(feature = "session-store")]
mod stored {
    use super::*;
    use crate::store::{RedbStore, SessionStore};

    fn store(dir: &std::path::Path) -> Arc<dyn SessionStore> {
        Arc::new(RedbStore::open(dir.join("sessions.redb")).unwrap())
    }

    #[tokio::test]
    async fn a_fork_starts_from_the_parents_conversation_and_the_tree_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let provider = ScriptedProvider::responding(|request| {
            if last(request) == "summarize what you know" {
                return ScriptedResponse::text(&[&format!("I saw {} messages", request.messages.len())]);
            }
            if answered(request) {
                return ScriptedResponse::text(&[&format!("heard: {}", last(request))]);
            }
            if last(request) == "remember: the code word is plum" {
                return ScriptedResponse::text(&["remembered"]);
            }
            call("delegate", json!({"task": "summarize what you know", "context": "fork"}))
        });
        let service = shared(provider.clone(), DelegationLimits::default(), Some(store(dir.path())));
        let parent = service.create_session(create("remember: the code word is plum")).await.unwrap();
        let id = parent.session_id;
        let forked = service.start_turn(&id, turn("ask a helper")).await.unwrap();
        assert!(
            forked.text.contains("I saw 3 messages"),
            "the two of the first turn, then the task: {}",
            forked.text
        );
        let child_request = provider.requests().into_iter().find(|r| last(r) == "summarize what you know").unwrap();
        assert!(first(&child_request).contains("plum"));
        let before = children(&service.list(by_parent(&id)).await.unwrap());
        service.drain(Duration::from_secs(5)).await;
        drop(service);

        // A restart: the same store, a new service.
        let again = shared(provider, DelegationLimits::default(), Some(store(dir.path())));
        assert_eq!(children(&again.list(by_parent(&id)).await.unwrap()), before);
        let tree = again.list(ListQuery { root_id: Some(id.clone()), ..ListQuery::default() }).await.unwrap();
        assert_eq!(tree.total, 2);
        let view = again.read(&id, None).await.unwrap();
        assert_eq!(view.state.children.len(), 1);
        assert!(view.billing.delegated_tokens > 0, "the book survived the restart");
    }
}

#[tokio::test]
async fn a_child_reaches_its_unnamed_parent_as_parent() {
    let provider = ScriptedProvider::responding(|request| {
        if first(request).starts_with("report back") {
            if answered(request) {
                return ScriptedResponse::text(&[&format!("child saw: {}", last(request))]);
            }
            return ScriptedResponse::tool_calls(&[
                ("p1", "list_peers", json!({})),
                ("p2", "send_message", json!({"to": "parent", "body": "halfway there"})),
            ]);
        }
        if answered(request) {
            return ScriptedResponse::text(&[&format!("parent saw: {}", last(request))]);
        }
        call("delegate", json!({"task": "report back", "name": "scout"}))
    });
    let service = shared(provider, DelegationLimits::default(), None);
    let parent = service.create_session(create("send a scout")).await.unwrap();
    // The child's list_peers showed its parent; its message reached the parent's next step.
    assert!(parent.text.contains(r#"\"name\":\"parent\""#), "{}", parent.text);
    assert!(parent.text.contains("from scout"), "{}", parent.text);
    assert!(parent.text.contains("halfway there"), "{}", parent.text);
}
