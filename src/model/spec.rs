//! [`AgentSpec`]: how a session's agent was built, with every default resolved.

use serde::{Deserialize, Serialize};

use super::budget::Budget;
use super::context::ContextSettings;
use crate::tools::ToolConfig;

/// How an agent was built, with every default resolved: what a store keeps, so a session
/// resumed after a restart behaves as it did even if the server's defaults changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSpec {
    /// `provider:model`.
    pub model: String,
    pub system_prompt: Option<String>,
    pub max_tokens: u32,
    pub budget: Budget,
    #[serde(default)]
    pub context: ContextSettings,
    /// Records from before per-session tools load as what those sessions had.
    #[serde(default)]
    pub tools: ToolConfig,
}
