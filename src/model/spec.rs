//! [`AgentSpec`]: how a session's agent was built, with every default resolved.

use serde::{Deserialize, Serialize};

use super::budget::Budget;
use super::context::ContextSettings;
use crate::llm::Reasoning;
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
    #[serde(default = "ToolConfig::legacy")]
    pub tools: ToolConfig,
    /// The session's default output schema (structured output): every turn's final answer must
    /// validate against it, unless the turn gives its own. Older records have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<StructuredOutput>,
    /// Extended thinking / reasoning effort of every model call; `None` leaves it to the
    /// provider's configured default. Older records have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
    /// The skills the session may use, by name; `None`: every skill the server has at each
    /// turn. Older records have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    /// The document collections the session searches, by name; `None`: every collection of
    /// the server. Older records have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<Vec<String>>,
    /// The named agent (profile) the session was created from, as its file was then: the
    /// fields above already hold what it resolved to, so an edit of the file changes only the
    /// sessions created after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentRef>,
}

/// A named agent (profile) as one session was created from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentRef {
    pub name: String,
    /// The hash of the profile's file when the session was created.
    pub version: String,
}

/// An output schema and how often a final answer that does not validate is sent back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructuredOutput {
    /// A JSON Schema (2020-12 unless its `$schema` says otherwise) that compiled when it was given.
    pub schema: serde_json::Value,
    /// Model calls after the first answer that did not validate (each one counts in the budget).
    pub retries: u32,
}

impl StructuredOutput {
    /// Retries when the caller names none.
    pub const DEFAULT_RETRIES: u32 = 2;
    /// The most retries a caller may ask for.
    pub const MAX_RETRIES: u32 = 10;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::BuiltinTool;

    #[test]
    fn records_without_tools_load_as_the_old_read_only_set() {
        let old: AgentSpec = serde_json::from_str(
            r#"{"model": "test:model", "system_prompt": null, "max_tokens": 100, "budget": {}}"#,
        )
        .unwrap();
        assert_eq!(old.tools.builtins, [BuiltinTool::ReadFile, BuiltinTool::ListDir]);
        assert_eq!((old.tools.workspace, old.tools.shell), (None, None));
        assert_eq!(old.context, ContextSettings::default());
        assert_eq!(old.structured_output, None);
        assert_eq!(old.skills, None);
    }
}
