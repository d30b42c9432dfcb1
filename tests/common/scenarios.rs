//! Scripted situations several suites use.

use std::path::Path;

use serde_json::json;

use super::mock_llm::{MockLlm, MockResponse, anthropic};

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
