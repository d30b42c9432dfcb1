//! Delegation (issue 16) through the built binary over MCP stdio: a session's agent calls
//! `delegate`, `wait` and `cancel_delegate`, and the caller sees the tree with `session_list`,
//! `session_read`, `session_interrupt` and `session_archive`.
//!
//! One mock plays every agent. A request is recognised by its first message: a parent's
//! prompt begins with `PARENT`, a child's task with `CHILD`. A parent's next step is chosen by
//! the number of tool results in its conversation, so each script reads like a list of steps.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::deputy::TestDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{Gate, MockResponse, RecordedRequest, anthropic};

/// How long a test waits for a tree to settle before failing instead of hanging.
const LIMIT: Duration = Duration::from_secs(30);

/// Tokens of one scripted model call: the mock's default usage (12 in, 5 out).
const CALL_TOKENS: u64 = 17;

fn first_message(request: &RecordedRequest) -> String {
    request.body["messages"][0].to_string()
}

fn is_child(request: &RecordedRequest) -> bool {
    first_message(request).contains("CHILD")
}

fn is_parent(request: &RecordedRequest) -> bool {
    first_message(request).contains("PARENT")
}

/// Every `tool_result` block of a request's conversation, oldest first.
fn tool_results(request: &RecordedRequest) -> Vec<Value> {
    request.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|message| message["content"].as_array())
        .flatten()
        .filter(|block| block["type"] == "tool_result")
        .cloned()
        .collect()
}

/// A tool result's content parsed as JSON (a delegation tool's outcome), or the text as a
/// JSON string where it is not JSON (an error).
fn content_of(result: &Value) -> Value {
    let text = result["content"].as_str().unwrap_or_default();
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

fn is_error(result: &Value) -> bool {
    result["is_error"] == true
}

fn text(answer: &str) -> MockResponse {
    MockResponse::sse(anthropic::text(&[answer]))
}

/// One tool call, with an id unique in its conversation.
fn call(step: usize, tool: &str, input: Value) -> MockResponse {
    MockResponse::sse(anthropic::tool_calls(None, &[(&format!("toolu_{step}"), tool, input)]))
}

/// The ids of a `session_list` answer, sorted.
#[cfg(feature = "session-store")]
fn ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> = list["sessions"].as_array().unwrap().iter().map(id_of).collect();
    ids.sort();
    ids
}

/// Waits until a recorded request satisfies `matches`; returns it.
async fn request_where(deputy: &TestDeputy, matches: impl Fn(&RecordedRequest) -> bool) -> RecordedRequest {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        if let Some(request) = deputy.mock.requests().into_iter().find(|request| matches(request)) {
            return request;
        }
        assert!(tokio::time::Instant::now() < deadline, "no such request among {}", deputy.mock.requests().len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The last request of the parent's conversation (the one with the most tool results).
fn last_parent_request(deputy: &TestDeputy) -> RecordedRequest {
    deputy.mock.requests().into_iter().filter(is_parent).max_by_key(|request| tool_results(request).len()).unwrap()
}

/// Answers children with `answer`, held before its first chunk until the returned gate opens,
/// and parents with `parent` of the number of tool results they have had.
fn held_children(
    deputy: &TestDeputy,
    answer: &'static str,
    parent: impl Fn(usize) -> MockResponse + Send + Sync + 'static,
) -> Gate {
    let held = Gate::new();
    let gate = held.clone();
    deputy.mock.respond_with(move |request: &RecordedRequest| {
        if is_child(request) {
            return MockResponse::sse(anthropic::text(&[answer])).pause_before_chunk(1, gate.clone());
        }
        parent(tool_results(request).len())
    });
    held
}

/// Parents delegate `CHILD: <task>` (with `extra` arguments) on a caller's prompt and answer
/// `the child said: <its text>` once the result is in; children answer `child_answer`.
fn delegate_once(extra: Value, child_answer: &'static str) -> impl Fn(&RecordedRequest) -> MockResponse {
    move |request: &RecordedRequest| {
        if is_child(request) {
            return text(child_answer);
        }
        if request.last_message().contains("tool_result") {
            let outcome = content_of(tool_results(request).last().unwrap());
            return text(&format!("the child said: {}", outcome["text"].as_str().unwrap_or("(nothing)")));
        }
        let mut input = json!({"task": "CHILD: answer the question"});
        input.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
        call(tool_results(request).len(), "delegate", input)
    }
}

#[tokio::test]
async fn a_child_answers_its_parent_is_listed_under_it_and_is_billed_to_it() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(delegate_once(json!({"name": "worker"}), "pong from the child"));
    let done = deputy.ok("session_create", json!({"prompt": "PARENT: ask a child"})).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["text"], "the child said: pong from the child");
    let parent = id_of(&done);
    let first = deputy.mock.requests().into_iter().find(is_parent).unwrap();
    let tools: Vec<&str> =
        first.body["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(["delegate", "wait", "cancel_delegate"].iter().all(|tool| tools.contains(tool)), "{tools:?}");

    let list = deputy.ok("session_list", json!({"parent_id": parent})).await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "{list}");
    let listed = &list["sessions"][0];
    assert_eq!((listed["depth"].as_u64(), listed["parent_id"].as_str()), (Some(1), Some(parent.as_str())));
    assert_eq!(listed["name"], "worker");
    let child = id_of(listed);

    let child_view = deputy.ok("session_read", json!({"session_id": child})).await;
    let state = &child_view["state"];
    assert_eq!((state["parent_id"].as_str(), state["root_id"].as_str()), (Some(&*parent), Some(&*parent)));
    assert_eq!((state["depth"].as_u64(), state["origin"].as_str()), (Some(1), Some("delegated")));
    assert_eq!(state["last_turn"]["status"], "completed");
    let child_tokens = child_view["billing"]["total_tokens"].as_u64().unwrap();
    assert_eq!(child_tokens, CALL_TOKENS);

    let parent_view = deputy.ok("session_read", json!({"session_id": parent})).await;
    let billing = &parent_view["billing"];
    assert_eq!(billing["delegated_tokens"].as_u64(), Some(child_tokens), "{billing}");
    assert_eq!(billing["delegated_tool_calls"], 0);
    assert_eq!((billing["reserved_tokens"].as_u64(), billing["reserved_tool_calls"].as_u64()), (Some(0), Some(0)));
    assert_eq!(parent_view["state"]["depth"], 0);
    assert_eq!(parent_view["state"]["children"][0]["session_id"].as_str(), Some(child.as_str()));
    assert_eq!(parent_view["state"]["children"][0]["total_tokens"].as_u64(), Some(child_tokens));
}

#[tokio::test]
async fn an_over_budget_request_is_capped_to_what_the_parent_has_left_and_the_rest_comes_back() {
    let deputy = TestDeputy::start().await;
    let release = Gate::new();
    let gate = release.clone();
    let script = delegate_once(json!({"budget": {"max_tokens": 1_000_000}}), "cheap answer");
    deputy.mock.respond_with(move |request: &RecordedRequest| {
        let response = script(request);
        // The child answers once the test has seen its budget while it runs (a child's budget
        // closes to what it used when its turn ends).
        if is_child(request) { response.pause_before_chunk(1, gate.clone()) } else { response }
    });
    let started = deputy
        .ok(
            "session_create",
            json!({"prompt": "PARENT: delegate", "budget": {"max_tokens": 100_000}, "wait_ms": 0}),
        )
        .await;
    let parent = id_of(&started);
    request_where(&deputy, is_child).await;
    let child = id_of(&deputy.ok("session_list", json!({"parent_id": parent})).await["sessions"][0]);

    // The carve happened after the parent's first model call: 100,000 minus that call's tokens
    // (a carve holds a call's input, tool declarations included: G9).
    // (The parent's own view shows its step, and the hold, once the step's tools are done.)
    let child_view = deputy.ok("session_read", json!({"session_id": child})).await;
    let carved = child_view["billing"]["budget"]["max_tokens"].as_u64().unwrap();
    assert_eq!(carved, 100_000 - CALL_TOKENS, "capped to what the parent had left: {child_view}");

    release.open();
    let done = deputy.settled(&parent, |view| view["state"]["last_turn"]["status"].as_str().is_some()).await;
    assert_eq!(done["state"]["last_turn"]["text"], "the child said: cheap answer", "{done}");
    let child_tokens =
        deputy.ok("session_read", json!({"session_id": child})).await["billing"]["total_tokens"].as_u64().unwrap();
    assert_eq!(child_tokens, CALL_TOKENS);

    // The result is in: the hold is gone, only what the child used is charged.
    let billing = &done["billing"];
    assert_eq!(billing["reserved_tokens"], 0, "{billing}");
    assert_eq!(billing["delegated_tokens"].as_u64(), Some(child_tokens), "{billing}");
    let own = billing["total_tokens"].as_u64().unwrap();
    assert_eq!(own, 2 * CALL_TOKENS);
    assert_eq!(billing["remaining"]["tokens"].as_u64(), Some(100_000 - own - child_tokens), "{billing}");
}

#[tokio::test]
async fn a_grandchild_at_max_depth_is_refused_as_a_tool_error_the_child_sees() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(|request: &RecordedRequest| {
        if first_message(request).contains("GRANDCHILD") {
            return text("a grandchild should not exist");
        }
        if is_child(request) {
            return match tool_results(request).len() {
                0 => call(0, "delegate", json!({"task": "GRANDCHILD: go deeper"})),
                _ => text("did it myself"),
            };
        }
        match tool_results(request).len() {
            0 => call(0, "delegate", json!({"task": "CHILD: delegate further"})),
            _ => text("parent done"),
        }
    });
    let done = deputy.ok("session_create", json!({"prompt": "PARENT: go"})).await;
    assert_eq!(done["status"], "completed", "{done}");
    let parent = id_of(&done);

    let after = deputy
        .mock
        .requests()
        .into_iter()
        .find(|request| is_child(request) && !tool_results(request).is_empty())
        .expect("the child's request after its delegate call");
    let refusal = &tool_results(&after)[0];
    assert!(is_error(refusal), "{refusal}");
    let message = refusal["content"].as_str().unwrap();
    assert!(message.contains("delegation refused") && message.contains("max_depth"), "{message}");
    assert!(!deputy.mock.requests().iter().any(|request| first_message(request).contains("GRANDCHILD")));

    let tree = deputy.ok("session_list", json!({"root_id": parent})).await;
    assert_eq!(tree["sessions"].as_array().unwrap().len(), 2, "the root and its child only: {tree}");
    let outcome = content_of(&tool_results(&last_parent_request(&deputy))[0]);
    assert_eq!(outcome["text"], "did it myself");
}

#[tokio::test]
async fn max_children_per_session_refuses_and_an_archived_child_frees_its_slot() {
    let deputy = TestDeputy::start_with_config("[delegation]\nmax_children_per_session = 1\n").await;
    deputy.mock.respond_with(|request: &RecordedRequest| {
        if is_child(request) {
            return text("child ok");
        }
        let results = tool_results(request);
        match results.len() {
            0 => call(0, "delegate", json!({"task": "CHILD: one", "name": "one"})),
            1 => call(1, "delegate", json!({"task": "CHILD: two", "name": "two"})),
            2 => {
                let first = content_of(&results[0]);
                call(2, "cancel_delegate", json!({"session_id": first["session_id"], "archive": true}))
            }
            3 => call(3, "delegate", json!({"task": "CHILD: three", "name": "three"})),
            _ => text("parent done"),
        }
    });
    let done = deputy.ok("session_create", json!({"prompt": "PARENT: three children, one at a time"})).await;
    assert_eq!(done["status"], "completed", "{done}");
    let parent = id_of(&done);

    let results = tool_results(&last_parent_request(&deputy));
    assert_eq!(results.len(), 4);
    let one = content_of(&results[0]);
    assert_eq!((one["status"].as_str(), one["text"].as_str()), (Some("completed"), Some("child ok")), "{one}");
    assert!(is_error(&results[1]), "{}", results[1]);
    let refusal = results[1]["content"].as_str().unwrap();
    assert!(refusal.contains("delegation refused") && refusal.contains("max_children_per_session"), "{refusal}");
    let cancelled = content_of(&results[2]);
    assert_eq!(cancelled["archived"], true, "{cancelled}");
    assert!(!is_error(&results[3]), "the archived child no longer counts: {}", results[3]);
    assert_eq!(content_of(&results[3])["status"], "completed");

    let open = deputy.ok("session_list", json!({"parent_id": parent})).await;
    let names: Vec<&str> = open["sessions"].as_array().unwrap().iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, ["three"], "{open}");
    if cfg!(feature = "session-store") {
        let all = deputy.ok("session_list", json!({"parent_id": parent, "include_archived": true})).await;
        assert_eq!(all["sessions"].as_array().unwrap().len(), 2, "{all}");
    }
}

#[tokio::test]
async fn max_live_delegated_refuses_across_parents_until_a_child_is_archived() {
    let deputy = TestDeputy::start_with_config("[delegation]\nmax_live_delegated = 1\n").await;
    deputy.mock.respond_with(delegate_once(json!({}), "child ok"));
    let first = deputy.ok("session_create", json!({"prompt": "PARENT: first"})).await;
    assert_eq!(first["text"], "the child said: child ok", "{first}");
    let first_parent = id_of(&first);

    let second = deputy.ok("session_create", json!({"prompt": "PARENT: second"})).await;
    let second_parent = id_of(&second);
    let refused = tool_results(&last_parent_request_of(&deputy, "PARENT: second"))[0].clone();
    assert!(is_error(&refused), "{refused}");
    let message = refused["content"].as_str().unwrap();
    assert!(message.contains("delegation refused") && message.contains("max_live_delegated"), "{message}");
    let none = deputy.ok("session_list", json!({"parent_id": second_parent})).await;
    assert_eq!(none["sessions"].as_array().unwrap().len(), 0, "{none}");

    // Archiving the first parent's child frees the server's one slot.
    let child = id_of(&deputy.ok("session_list", json!({"parent_id": first_parent})).await["sessions"][0]);
    let archived = deputy.ok("session_archive", json!({"session_id": child})).await;
    assert_eq!(archived["archived"], true);
    let again = deputy.ok("session_turn", json!({"session_id": second_parent, "prompt": "try again"})).await;
    assert_eq!(again["text"], "the child said: child ok", "{again}");
    let listed = deputy.ok("session_list", json!({"parent_id": second_parent})).await;
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1, "{listed}");
}

/// The last request of the conversation that began with `prompt`.
fn last_parent_request_of(deputy: &TestDeputy, prompt: &str) -> RecordedRequest {
    deputy
        .mock
        .requests()
        .into_iter()
        .filter(|request| first_message(request).contains(prompt))
        .max_by_key(|request| request.body["messages"].as_array().map_or(0, Vec::len))
        .unwrap()
}

#[tokio::test]
async fn interrupting_the_parent_cancels_its_running_child() {
    let deputy = TestDeputy::start().await;
    // The child's answer never comes: it is still running when its parent is stopped.
    let held = held_children(&deputy, "too late", |results| match results {
        0 => call(0, "delegate", json!({"task": "CHILD: take your time", "wait": false})),
        1 => call(1, "wait", json!({"mode": "all", "timeout_ms": 60_000})),
        _ => text("parent done"),
    });
    let started = deputy.ok("session_create", json!({"prompt": "PARENT: start and wait", "wait_ms": 0})).await;
    assert_eq!(started["status"], "running", "{started}");
    let parent = id_of(&started);
    // The child's model call is under way and the parent has asked to wait for it.
    request_where(&deputy, is_child).await;
    request_where(&deputy, |request| is_parent(request) && tool_results(request).len() == 1).await;
    let child = id_of(&deputy.ok("session_list", json!({"parent_id": parent})).await["sessions"][0]);
    let child_view = deputy.ok("session_read", json!({"session_id": child})).await;
    assert_eq!(child_view["state"]["status"], "running", "{child_view}");

    let interrupted = deputy.ok("session_interrupt", json!({"session_id": parent})).await;
    assert_eq!(interrupted["interrupted"], true, "{interrupted}");
    assert_eq!(interrupted["cascaded"], json!([child]), "{interrupted}");

    let parent_view = deputy.settled(&parent, |view| view["state"]["last_turn"]["status"].as_str().is_some()).await;
    assert_eq!(parent_view["state"]["last_turn"]["status"], "cancelled", "{parent_view}");
    let child_view = deputy.settled(&child, |view| view["state"]["last_turn"]["status"].as_str().is_some()).await;
    assert_eq!(child_view["state"]["last_turn"]["status"], "cancelled", "{child_view}");
    held.open();
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn archiving_the_parent_archives_its_child() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(delegate_once(json!({}), "child ok"));
    let done = deputy.ok("session_create", json!({"prompt": "PARENT: delegate"})).await;
    let parent = id_of(&done);
    let child = id_of(&deputy.ok("session_list", json!({"parent_id": parent})).await["sessions"][0]);

    let archived = deputy.ok("session_archive", json!({"session_id": parent})).await;
    assert_eq!(archived["archived"], true);
    assert_eq!(archived["cascaded"], json!([child]), "{archived}");

    let open = deputy.ok("session_list", json!({"parent_id": parent})).await;
    assert_eq!(open["sessions"].as_array().unwrap().len(), 0, "{open}");
    let all = deputy.ok("session_list", json!({"parent_id": parent, "include_archived": true})).await;
    assert_eq!(all["sessions"][0]["status"], "archived", "{all}");
    let child_view = deputy.ok("session_read", json!({"session_id": child})).await;
    assert_eq!(child_view["state"]["status"], "archived", "{child_view}");
}

#[tokio::test]
async fn a_background_childs_result_reaches_its_parents_inbox_and_settles_the_hold() {
    let deputy = TestDeputy::start().await;
    let release = Gate::new();
    let gate = release.clone();
    deputy.mock.respond_with(move |request: &RecordedRequest| {
        if is_child(request) {
            return MockResponse::sse(anthropic::text(&["background answer"])).pause_before_chunk(1, gate.clone());
        }
        if request.last_message().contains("[child ") {
            return text("noted the child's result");
        }
        match tool_results(request).len() {
            0 => call(
                0,
                "delegate",
                json!({"task": "CHILD: in the background", "wait": false, "name": "bg", "budget": {"max_tokens": 20_000}}),
            ),
            _ => text("started it"),
        }
    });
    let done = deputy
        .ok("session_create", json!({"prompt": "PARENT: start a child", "budget": {"max_tokens": 100_000}}))
        .await;
    assert_eq!(done["text"], "started it", "{done}");
    let parent = id_of(&done);
    let outcome = content_of(&tool_results(&last_parent_request(&deputy))[0]);
    assert_eq!(outcome["status"], "running", "{outcome}");
    let child = id_of(&outcome);
    let held = deputy.ok("session_read", json!({"session_id": parent})).await["billing"].clone();
    assert_eq!(held["reserved_tokens"], 20_000, "held while the child works: {held}");

    release.open();
    let child_view = deputy.settled(&child, |view| view["state"]["last_turn"]["status"] == "completed").await;
    let child_tokens = child_view["billing"]["total_tokens"].as_u64().unwrap();
    deputy.settled(&parent, |view| view["state"]["inbox"]["waiting"] == 1).await;

    let next = deputy.ok("session_turn", json!({"session_id": parent, "prompt": "any news?"})).await;
    assert_eq!(next["text"], "noted the child's result", "{next}");
    let request = last_parent_request_of(&deputy, "PARENT: start a child");
    let last = request.last_message();
    assert!(last.contains(&format!("[child bg ({child}) finished: completed; {child_tokens} tokens")), "{last}");
    assert!(last.contains("background answer"), "{last}");
    let billing = deputy.ok("session_read", json!({"session_id": parent})).await["billing"].clone();
    assert_eq!(billing["reserved_tokens"], 0, "{billing}");
    assert_eq!(billing["delegated_tokens"].as_u64(), Some(child_tokens), "{billing}");
}

#[tokio::test]
async fn a_childs_approval_escalates_to_the_root_and_is_answered_on_the_child() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(|request: &RecordedRequest| {
        if is_child(request) {
            return match tool_results(request).len() {
                0 => MockResponse::sse(anthropic::tool_calls(
                    None,
                    &[(
                        "toolu_w",
                        "write_file",
                        json!({"path": "from-child.txt", "content": "written by the child"}),
                    )],
                )),
                _ => text("written"),
            };
        }
        if request.last_message().contains("[child ") {
            return text("the child is done");
        }
        match tool_results(request).len() {
            0 => call(0, "delegate", json!({"task": "CHILD: write the file"})),
            _ => text("my child waits for an approval"),
        }
    });
    let done =
        deputy.ok("session_create", json!({"prompt": "PARENT: have it written", "approval": "always"})).await;
    assert_eq!(done["status"], "completed", "{done}");
    let parent = id_of(&done);
    let outcome = content_of(&tool_results(&last_parent_request(&deputy))[0]);
    assert_eq!(outcome["status"], "pending_tool_calls", "{outcome}");
    assert_eq!(outcome["pending"][0]["tool_use_id"], "toolu_w", "{outcome}");
    let child = id_of(&outcome);
    assert!(!deputy.workspace.path().join("from-child.txt").exists());

    let root = deputy.ok("session_read", json!({"session_id": parent})).await;
    let escalations = root["state"]["escalations"].as_array().unwrap_or_else(|| panic!("no escalations: {root}"));
    assert_eq!(escalations.len(), 1, "{root}");
    assert_eq!(escalations[0]["session_id"].as_str(), Some(child.as_str()));
    assert_eq!(escalations[0]["depth"], 1);
    assert_eq!(escalations[0]["pending"][0]["kind"], "approval");
    assert_eq!(escalations[0]["pending"][0]["tool_use_id"], "toolu_w");

    let answered = deputy
        .ok(
            "session_turn",
            json!({"session_id": child, "approvals": [{"tool_use_id": "toolu_w", "decision": "allow"}]}),
        )
        .await;
    assert_eq!((answered["status"].as_str(), answered["text"].as_str()), (Some("completed"), Some("written")));
    let written = std::fs::read_to_string(deputy.workspace.path().join("from-child.txt")).unwrap();
    assert_eq!(written, "written by the child");
    let root = deputy.ok("session_read", json!({"session_id": parent})).await;
    assert!(root["state"].get("escalations").is_none_or(|e| e.as_array().is_some_and(Vec::is_empty)), "{root}");
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn the_tree_lists_the_same_after_kill_9_and_a_restart() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(|request: &RecordedRequest| {
        if is_child(request) {
            return text("child ok");
        }
        match tool_results(request).len() {
            0 => call(0, "delegate", json!({"task": "CHILD: one", "name": "one"})),
            1 => call(1, "delegate", json!({"task": "CHILD: two", "name": "two"})),
            _ => text("parent done"),
        }
    });
    let done = deputy.ok("session_create", json!({"prompt": "PARENT: two children"})).await;
    assert_eq!(done["status"], "completed", "{done}");
    let parent = id_of(&done);
    let children = ids(&deputy.ok("session_list", json!({"parent_id": parent})).await);
    let tree = ids(&deputy.ok("session_list", json!({"root_id": parent})).await);
    assert_eq!(children.len(), 2);
    assert_eq!(tree.len(), 3);
    let delegated =
        deputy.ok("session_read", json!({"session_id": parent})).await["billing"]["delegated_tokens"].clone();

    let deputy = deputy.crash_and_restart().await;
    assert_eq!(ids(&deputy.ok("session_list", json!({"parent_id": parent})).await), children);
    assert_eq!(ids(&deputy.ok("session_list", json!({"root_id": parent})).await), tree);
    let child = deputy.ok("session_read", json!({"session_id": children[0]})).await;
    assert_eq!((child["state"]["parent_id"].as_str(), child["state"]["depth"].as_u64()), (Some(&*parent), Some(1)));
    let root = deputy.ok("session_read", json!({"session_id": parent})).await;
    assert_eq!(root["state"]["children"].as_array().map(Vec::len), Some(2), "{root}");
    assert_eq!(root["billing"]["delegated_tokens"], delegated, "{root}");
}

/// `[delegation] enabled = false`: sessions are not offered the tools, and asking for them is
/// refused.
#[tokio::test]
async fn a_server_with_delegation_off_offers_no_delegation_tools() {
    let deputy = TestDeputy::start_with_config("[delegation]\nenabled = false\n").await;
    deputy.mock.respond_with(|_: &RecordedRequest| text("plain"));
    deputy.ok("session_create", json!({"prompt": "PARENT: hello"})).await;
    let first = deputy.mock.requests().into_iter().find(is_parent).unwrap();
    let tools: Vec<&str> =
        first.body["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(!tools.contains(&"delegate") && !tools.contains(&"wait"), "{tools:?}");
    let (code, message) =
        deputy.err("session_create", json!({"prompt": "PARENT: hello", "builtins": ["delegate"]})).await;
    assert_eq!(code, "INVALID_REQUEST", "{message}");
    assert!(message.contains("[delegation]"), "{message}");
}

/// `[delegation] default_child_budget` is what a child gets when `delegate` names no budget.
#[tokio::test]
async fn the_default_child_budget_applies_where_delegate_names_none() {
    let config = "[delegation]\ndefault_child_budget = { max_tokens = 20000, max_tool_calls = 4 }\n";
    let deputy = TestDeputy::start_with_config(config).await;
    // Held while the test reads the child's budget (it closes at what it used).
    let held = held_children(&deputy, "small answer", |results| match results {
        0 => call(0, "delegate", json!({"task": "CHILD: small", "wait": false})),
        _ => text("parent idle"),
    });
    let done =
        deputy.ok("session_create", json!({"prompt": "PARENT: delegate", "budget": {"max_tokens": 100_000}})).await;
    let parent = id_of(&done);
    let child = id_of(&deputy.ok("session_list", json!({"parent_id": parent})).await["sessions"][0]);
    let view = deputy.ok("session_read", json!({"session_id": child})).await;
    let budget = &view["billing"]["budget"];
    assert_eq!(
        (budget["max_tokens"].as_u64(), budget["max_tool_calls"].as_u64()),
        (Some(20_000), Some(4)),
        "{budget}"
    );
    let parent_view = deputy.ok("session_read", json!({"session_id": parent})).await;
    assert_eq!(parent_view["billing"]["reserved_tokens"].as_u64(), Some(20_000), "held from the parent");
    held.open();
    deputy.settled(&child, |view| view["state"]["last_turn"]["status"] == "completed").await;
}

/// `session_interrupt {cascade: false}` leaves a running child alone.
#[tokio::test]
async fn an_interrupt_without_cascade_leaves_the_children_running() {
    let deputy = TestDeputy::start().await;
    let held = held_children(&deputy, "late", |results| match results {
        0 => call(0, "delegate", json!({"task": "CHILD: slow", "wait": false})),
        _ => text("parent idle"),
    });
    let done = deputy.ok("session_create", json!({"prompt": "PARENT: start one"})).await;
    let parent = id_of(&done);
    request_where(&deputy, is_child).await;
    let child = id_of(&deputy.ok("session_list", json!({"parent_id": parent})).await["sessions"][0]);
    let (code, _) = deputy.err("session_interrupt", json!({"session_id": parent, "cascade": false})).await;
    assert_eq!(code, "SESSION_NOT_RUNNING", "the parent is idle and its child is left alone");
    assert_eq!(deputy.ok("session_read", json!({"session_id": child})).await["state"]["status"], "running");
    let interrupted = deputy.ok("session_interrupt", json!({"session_id": parent})).await;
    assert_eq!((interrupted["interrupted"].as_bool(), &interrupted["cascaded"]), (Some(false), &json!([child])));
    held.open();
}

/// `deputy sessions list --parent ID` and `--root ID` list a stored tree from the command line.
#[cfg(feature = "session-store")]
#[tokio::test]
async fn the_command_line_lists_a_tree() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(delegate_once(json!({"name": "cli-child"}), "ok"));
    let parent = id_of(&deputy.ok("session_create", json!({"prompt": "PARENT: delegate"})).await);
    let child = id_of(&deputy.ok("session_list", json!({"parent_id": parent})).await["sessions"][0]);
    let stopped = deputy.stop().await;
    let list = |flag: &str| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"));
        command.args(["sessions", "list", flag, &parent, "--json"]).env("XDG_CONFIG_HOME", stopped.home.path());
        crate::common::deputy::with_store(command.as_std_mut(), stopped.home.path());
        command
    };
    let output = list("--parent").output().await.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(ids(&listed), std::slice::from_ref(&child));
    let output = list("--root").output().await.unwrap();
    let tree: Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut both = vec![parent.clone(), child];
    both.sort();
    assert_eq!(ids(&tree), both);
}

/// Security review 2, G9: a parent with `max_tokens: 1000` starts 8 background children in one
/// step; each gets half of what is left (about 492, 246, … 4 tokens), and each child's first
/// model call used to be made whatever its carve (8 calls of 5,000 tokens each: 40× the
/// parent's budget). The check before a child's model call now sees its carve: a child whose
/// task alone does not fit makes no call, a call that is made asks for no more output than its
/// carve leaves, and a running child's spend counts on its parent's book at once.
/// (Lists the tree with `session_list`, as the other tree tests: Full and Persistent profiles.)
#[cfg(feature = "session-store")]
#[tokio::test]
async fn g9_background_children_are_bounded_by_their_carve_before_their_first_call() {
    let deputy = TestDeputy::start().await;
    // About 300 tokens of task: more than every carve but the first.
    let task = |n: usize| format!("CHILD {n}: {}", "summarise the repo. ".repeat(60));
    deputy.mock.respond_with(move |request: &RecordedRequest| {
        if is_child(request) {
            return MockResponse::sse(anthropic::text_with_usage(
                &["a summary"],
                crate::common::mock_llm::usage(5000, 5),
            ));
        }
        match tool_results(request).len() {
            0 => {
                let calls: Vec<(String, Value)> = (0..8)
                    .map(|n| {
                        (format!("toolu_{n}"), json!({"task": task(n), "wait": false, "name": format!("c{n}")}))
                    })
                    .collect();
                let calls: Vec<(&str, &str, Value)> =
                    calls.iter().map(|(id, input)| (id.as_str(), "delegate", input.clone())).collect();
                MockResponse::sse(anthropic::tool_calls(None, &calls))
            }
            _ => text("started them"),
        }
    });
    let done =
        deputy.ok("session_create", json!({"prompt": "PARENT: fan out", "budget": {"max_tokens": 1000}})).await;
    // The holds take nearly all the parent has: its own next call does not fit.
    assert_eq!(done["tool_calls"], 8, "{done}");
    let parent = id_of(&done);
    let children =
        deputy.ok("session_list", json!({"parent_id": parent})).await["sessions"].as_array().unwrap().clone();
    // Usually 8; 7 when the first child's spend reached the parent's book before the last
    // carve (a running child's spend counts at once), and the last delegate was refused.
    assert!((7..=8).contains(&children.len()), "{children:?}");
    let mut carves = Vec::new();
    let mut children_used = 0;
    for child in &children {
        let view = deputy.settled(&id_of(child), |view| view["state"]["last_turn"]["status"].is_string()).await;
        carves.push(view["billing"]["budget"]["max_tokens"].as_u64().unwrap_or(u64::MAX));
        children_used += view["billing"]["total_tokens"].as_u64().unwrap();
    }
    // The parent has not taken its children's results yet: its book still holds them, and
    // counts at least what they used.
    let billing = deputy.ok("session_read", json!({"session_id": parent})).await["billing"].clone();
    let counted =
        billing["reserved_tokens"].as_u64().unwrap_or(0) + billing["delegated_tokens"].as_u64().unwrap_or(0);
    assert!(
        counted >= children_used,
        "the parent counts {counted} of its children's {children_used} tokens: {billing}"
    );
    carves.sort_unstable();
    let child_calls: Vec<RecordedRequest> = deputy.mock.requests().into_iter().filter(is_child).collect();
    assert!(child_calls.len() <= 1, "{} children called the model; carves {carves:?}", child_calls.len());
    let biggest = carves.iter().copied().filter(|&carve| carve != u64::MAX).max().unwrap();
    for call in &child_calls {
        let asked = call.body["max_tokens"].as_u64().unwrap();
        assert!(asked < biggest, "a child asked for {asked} output tokens with a carve of at most {biggest}");
    }
}

/// G11: `max_live_delegated` is the server's, so one owner holds at most its share
/// (`max_live_delegated_per_owner`): alice's second child is refused while bob, another
/// tenant, still delegates.
#[tokio::test]
async fn g11_one_owner_holds_at_most_its_share_of_the_servers_delegated_sessions() {
    use crate::common::http_deputy::HttpDeputy;
    use crate::suite::tenants::{ALICE, BOB, TENANTS};
    let config = format!("{TENANTS}\n[delegation]\nmax_live_delegated = 3\nmax_live_delegated_per_owner = 1\n");
    let deputy = HttpDeputy::start_with_config(&config, &[], &[]).await;
    deputy.mock.respond_with(delegate_once(json!({}), "child ok"));
    let create = |token: &'static str, prompt: &'static str| {
        deputy.rest(Some(token), reqwest::Method::POST, "/v1/sessions", Some(json!({"prompt": prompt})))
    };
    let (status, first) = create(ALICE, "PARENT: alice first").await;
    assert_eq!((status, first["text"].as_str()), (201, Some("the child said: child ok")), "{first}");

    let (status, _) = create(ALICE, "PARENT: alice second").await;
    assert_eq!(status, 201);
    let requests = deputy.mock.requests();
    let second = requests
        .iter()
        .filter(|request| first_message(request).contains("PARENT: alice second"))
        .max_by_key(|request| request.body["messages"].as_array().map_or(0, Vec::len))
        .unwrap();
    let refused = tool_results(second)[0].clone();
    assert!(is_error(&refused), "{refused}");
    let message = refused["content"].as_str().unwrap();
    assert!(message.contains("max_live_delegated_per_owner"), "{message}");

    let (status, bobs) = create(BOB, "PARENT: bob first").await;
    assert_eq!(
        (status, bobs["text"].as_str()),
        (201, Some("the child said: child ok")),
        "bob's share is his: {bobs}"
    );
}
