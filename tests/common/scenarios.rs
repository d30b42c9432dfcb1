//! Scripted situations several suites use.

use std::path::Path;

use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient};
use serde_json::json;

use super::mock_llm::{MockLlm, MockResponse, anthropic};

/// Scripts the model to call `write_file` (tool_use id `toolu_1`) with `path` and `content`.
pub fn model_writes(mock: &MockLlm, path: &str, content: &str) {
    mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[("toolu_1", "write_file", json!({"path": path, "content": content}))],
    )));
}

/// Writes a 35 KB `log.txt` into `workspace` and scripts the model to read it with
/// `read_file` (tool_use id `toolu_log`) and then answer "It is long.". Returns the file's text.
pub fn capped_log_read(mock: &MockLlm, workspace: &Path) -> String {
    let log: String = (0..3000).map(|n| format!("entry {n}\n")).collect();
    std::fs::write(workspace.join("log.txt"), &log).unwrap();
    mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[("toolu_log", "read_file", json!({"path": "log.txt"}))],
    )));
    mock.push(MockResponse::sse(anthropic::text(&["It is long."])));
    log
}

/// A client's stop button: scripts a model answer that never finishes, sends `session_turn
/// {session_id: id, prompt}` as a cancellable request and, once the turn's model call has
/// arrived, cancels the request with `reason`.
pub async fn cancelled_turn(mock: &MockLlm, peer: &Peer<RoleClient>, id: &str, prompt: &str, reason: &str) {
    let model_call = mock.requests().len() + 1;
    mock.push_held(MockResponse::sse(anthropic::text(&["started"])), 3);
    let arguments = json!({"session_id": id, "prompt": prompt}).as_object().unwrap().clone();
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("session_turn").with_arguments(arguments),
    ));
    let handle = peer.send_cancellable_request(request, PeerRequestOptions::no_options()).await.unwrap();
    mock.wait_for_requests(model_call).await;
    handle.cancel(Some(reason.into())).await.unwrap();
}
