//! What an agent can do besides talking: the [`Tool`] trait and the per-session [`ToolScope`].
//!
//! A tool never fails the turn: whatever goes wrong is reported to the model as an error
//! result ([`ToolOutput::error`]), so the model can correct itself. Builtin tools live in
//! [`builtin`], one file each, and are confined to the session's [`workspace::Workspace`]; the
//! opt-in [`shell`] runs commands there; both are [`TypedTool`]s, whose argument type gives
//! their schema and their parsing. [`mcp`] brings in the tools of external MCP servers.
//! [`callback`] tools are only declared: the caller runs them. [`config`] decides which of them
//! a session gets.

pub mod approval;
pub mod builtin;
pub mod callback;
pub mod child_env;
pub mod comms;
pub mod config;
pub mod delegation;
pub mod link;
pub mod mcp;
pub mod memory;
pub mod process_group;
pub mod scope;
pub mod shared_specs;
pub mod shell;
pub mod typed;
pub mod workspace;

#[cfg(test)]
mod tests;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub use approval::ApprovalPolicy;
pub use callback::CallbackTool;
pub use config::{BuiltinTool, ShellRequest, ToolConfig, ToolDefaults, ToolRequest, ToolScopeError};
pub use scope::ToolScope;
pub use shell::ShellConfig;
pub use typed::TypedTool;
pub use workspace::{Workspace, WorkspaceError};

use crate::llm::ToolSpec;

/// What a tool call produced, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> Self {
        Self { content: content.into(), is_error: false }
    }

    pub fn error(content: impl Into<String>) -> Self {
        Self { content: content.into(), is_error: true }
    }
}

/// A tool the model may call.
pub trait Tool: Send + Sync {
    fn spec(&self) -> ToolSpec;

    /// The declaration as live sessions share it ([`shared_specs`]). Typed tools answer from
    /// the table by their type, without building the declaration again.
    fn shared_spec(&self) -> std::sync::Arc<ToolSpec> {
        shared_specs::shared(self.spec())
    }

    /// Runs one call. `cancel` fires when the turn is interrupted; long-running tools must
    /// stop promptly (the scope also stops waiting on them).
    fn call(&self, input: serde_json::Value, cancel: CancellationToken) -> BoxFuture<'_, ToolOutput>;
}
