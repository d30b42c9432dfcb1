//! What a session's agent is built from: a caller's [`AgentBuildConfig`] (every field
//! optional, the server's defaults fill the rest) or a delegated child's [`ChildBuild`]
//! (already resolved and narrowed from its parent's). Plain data; [`super::AgentFactory`]
//! builds from it.

use super::ContextOverrides;
use crate::llm::Reasoning;
use crate::model::{AgentRef, Budget};
use crate::tools::ToolRequest;

/// Everything that decides how a session's agent behaves. Unset fields take the server's
/// defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentBuildConfig {
    /// `provider:model`, e.g. `anthropic:claude-sonnet-4-5`.
    pub model: Option<String>,
    pub system_prompt: Option<String>,
    /// Upper bound on the tokens of each model response.
    pub max_tokens: Option<u32>,
    pub budget: Budget,
    pub context: ContextOverrides,
    /// Workspace, builtin tools, shell and MCP servers of the session.
    pub tools: ToolRequest,
    /// The session's default output schema (structured output), not compiled yet.
    pub output_schema: Option<serde_json::Value>,
    /// Retries of an answer that does not validate (default 2); only with `output_schema`.
    pub structured_output_retries: Option<u32>,
    /// Extended thinking / reasoning effort; `None`: the provider's configured default.
    pub reasoning: Option<Reasoning>,
    /// Add the comms tools (`send_message`, `list_peers`) unless `tools.builtins` names the
    /// tools explicitly: what a host-mode session gets.
    pub comms_by_default: bool,
    /// Add the delegation tools (and the comms tools, to talk to children) unless
    /// `tools.builtins` names the tools explicitly: where `[delegation]` is enabled.
    pub delegation_by_default: bool,
    /// The named agent this config was filled from (see [`AgentBuildConfig::apply_profile`]).
    pub agent: Option<AgentRef>,
    /// The skills the session may use, by name; `None`: all of the server's. Unknown names are
    /// `INVALID_REQUEST`.
    pub skills: Option<Vec<String>>,
    /// The document collections the session searches; `None`: all of the server's. Unknown
    /// names are `INVALID_REQUEST`.
    pub documents: Option<Vec<String>>,
}

/// What a delegated child is built from (see [`AgentFactory::build_child`]).
#[derive(Debug, Clone)]
pub struct ChildBuild {
    pub model: String,
    pub system_prompt: Option<String>,
    pub max_tokens: u32,
    pub budget: Budget,
    /// Already narrowed from the parent's.
    pub tools: crate::tools::ToolConfig,
    pub output_schema: Option<serde_json::Value>,
    /// The parent's: a child thinks as hard as the session that delegated to it.
    pub reasoning: Option<Reasoning>,
    /// Its named agent's context settings (none: the model's defaults).
    pub context: ContextOverrides,
    /// The named agent it was made from, if any.
    pub agent: Option<AgentRef>,
    /// The parent's: a child uses the skills its parent may (if its builtins include them).
    pub skills: Option<Vec<String>>,
    /// The parent's: a child searches the collections its parent may.
    pub documents: Option<Vec<String>>,
}
