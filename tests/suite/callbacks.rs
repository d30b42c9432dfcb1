//! End to end: callback tools and approvals through the `deputy` binary over stdio, driven by
//! the rmcp client, the model being the mock LLM.

use serde_json::json;

use crate::common::deputy::{TestDeputy, tool_results};
use crate::common::id_of;
use crate::common::mock_llm::{MockResponse, anthropic};
use crate::common::prompt_cache::without_cache_control;
use crate::common::scenarios::model_writes;

#[tokio::test]
async fn two_callback_calls_of_one_step_round_trip() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        Some("Asking you."),
        &[("toolu_1", "lookup", json!({"q": "weather"})), ("toolu_2", "lookup", json!({"q": "time"}))],
    )));
    let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
    let held = deputy
        .ok(
            "session_create",
            json!({"prompt": "weather and time?", "builtins": [],
                   "callbacks": [{"name": "lookup", "description": "Looks things up", "input_schema": schema}]}),
        )
        .await;
    assert_eq!(
        (held["status"].as_str(), held["stop_reason"].as_str()),
        (Some("pending_tool_calls"), Some("pending_tool_calls"))
    );
    let id = id_of(&held);
    let pending = held["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 2);
    assert_eq!(
        pending[0],
        json!({"tool_use_id": "toolu_1", "name": "lookup", "arguments": {"q": "weather"}, "kind": "callback"})
    );
    assert_eq!(pending[1]["tool_use_id"], "toolu_2");
    let offered = &without_cache_control(&deputy.mock.requests()[0].body["tools"]);
    assert_eq!(offered, &json!([{"name": "lookup", "description": "Looks things up", "input_schema": schema}]));

    let read = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(
        (read["state"]["status"].as_str(), read["state"]["pending"].as_array().map(Vec::len)),
        (Some("idle"), Some(2))
    );

    // One answer missing: refused, nothing lost.
    let (code, _) = deputy
        .err(
            "session_turn",
            json!({"session_id": id, "tool_results": [{"tool_use_id": "toolu_1", "content": "sunny"}]}),
        )
        .await;
    assert_eq!(code, "INVALID_REQUEST");
    let (code, _) = deputy.err("session_turn", json!({"session_id": id, "prompt": "hello?"})).await;
    assert_eq!(code, "INVALID_REQUEST");

    deputy.mock.push(MockResponse::sse(anthropic::text(&["Sunny, and noon."])));
    let done = deputy
        .ok(
            "session_turn",
            json!({"session_id": id, "tool_results": [
                {"tool_use_id": "toolu_2", "content": "noon"},
                {"tool_use_id": "toolu_1", "content": "sunny"}]}),
        )
        .await;
    assert_eq!((done["status"].as_str(), done["text"].as_str()), (Some("completed"), Some("Sunny, and noon.")));
    assert!(done.get("pending").is_none());
    let results = tool_results(&deputy, 1);
    assert_eq!(
        (results[0]["tool_use_id"].as_str(), results[0]["content"].as_str()),
        (Some("toolu_1"), Some("sunny"))
    );
    assert_eq!(
        (results[1]["tool_use_id"].as_str(), results[1]["content"].as_str()),
        (Some("toolu_2"), Some("noon"))
    );
    let read = deputy.ok("session_read", json!({"session_id": id})).await;
    assert!(read["state"].get("pending").is_none());
}

#[tokio::test]
async fn a_denied_approval_reaches_the_model_as_an_error_and_nothing_runs() {
    let deputy = TestDeputy::start().await;
    model_writes(&deputy.mock, "evil.txt", "x");
    let held = deputy.ok("session_create", json!({"prompt": "write it", "approval": "always"})).await;
    assert_eq!(held["status"], "pending_tool_calls");
    assert_eq!(held["pending"][0]["kind"], "approval");
    let id = id_of(&held);
    assert!(!deputy.workspace.path().join("evil.txt").exists());

    deputy.mock.push(MockResponse::sse(anthropic::text(&["Fine, I won't."])));
    let done = deputy
        .ok(
            "session_turn",
            json!({"session_id": id, "approvals": [{"tool_use_id": "toolu_1", "decision": "deny"}]}),
        )
        .await;
    assert_eq!(done["text"], "Fine, I won't.");
    assert_eq!(done["tool_calls"], 0);
    let results = tool_results(&deputy, 1);
    assert_eq!(
        (results[0]["content"].as_str(), results[0]["is_error"].as_bool()),
        (Some("denied by the caller"), Some(true))
    );
    assert!(!deputy.workspace.path().join("evil.txt").exists());
}
