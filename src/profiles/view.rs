//! What the surfaces show of the named agents: `agent/list` and `agent/get` (MCP resources
//! `deputy://agents`, REST `/v1/agents`, JSON-RPC, `deputy agents`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Every profile file the server reads, valid or not, in the order they are looked up.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentList {
    pub agents: Vec<AgentSummary>,
}

impl AgentList {
    /// The valid agents as `- name: description` lines for a tool's description (the first
    /// line of each description, cut at 160 characters), at most `max_bytes`, the rest counted
    /// and pointed at; empty when there are none.
    pub fn menu(&self, max_bytes: usize) -> String {
        let valid: Vec<&AgentSummary> = self.agents.iter().filter(|agent| agent.invalid.is_none()).collect();
        let mut menu = String::new();
        for (index, agent) in valid.iter().enumerate() {
            let description = agent.description.lines().next().unwrap_or_default();
            let line = format!("\n- {}: {}", agent.name, crate::text::excerpt(description, MENU_DESCRIPTION_CHARS));
            if menu.len() + line.len() > max_bytes {
                menu.push_str(&format!("\n- … {} more (deputy://agents)", valid.len() - index));
                break;
            }
            menu.push_str(&line);
        }
        menu
    }
}

/// Characters of a description a tool's menu of agents shows.
const MENU_DESCRIPTION_CHARS: usize = 160;

/// One profile file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentSummary {
    /// The agent's name (for a file that is not a valid profile: its file name).
    pub name: String,
    /// What the agent is for (empty for an invalid file).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The hash of the file: a session keeps the version it was created with.
    pub version: String,
    /// The file.
    pub path: String,
    /// Why the file is not used, when it is not: it does not parse, or an earlier directory
    /// has an agent of that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
}

/// One valid profile, whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentDetail {
    #[serde(flatten)]
    pub summary: AgentSummary,
    /// The body of the file: its sessions' system prompt.
    pub system_prompt: String,
    /// The frontmatter as written (the `session_create` fields it sets).
    pub fields: Map<String, Value>,
}
