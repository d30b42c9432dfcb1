//! Helpers shared by the integration suites.
// Each suite uses a different subset of the helpers; unused ones are not dead code.
#![allow(dead_code)]

pub mod browser;
#[cfg(feature = "session-store")]
pub mod database;
pub mod deputy;
pub mod http_deputy;
pub mod mcp_servers;
pub mod mock_llm;
pub mod prompt_cache;
pub mod provider_rules;
pub mod scenarios;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The `session_id` of a session's JSON (created, read, listed, or a turn's answer).
pub fn id_of(value: &Value) -> String {
    value["session_id"].as_str().unwrap_or_else(|| panic!("no session_id in {value}")).to_owned()
}

/// Writes `contents` to the file `name` in `dir`; its path.
pub fn file_in(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}
