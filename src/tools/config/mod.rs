//! Which tools a session gets: what the caller asks for ([`ToolRequest`]), the server's
//! defaults ([`ToolDefaults`], the config file's `[tools]` section), and the resolved result
//! ([`ToolConfig`]) that is persisted with the session so a resumed session gets the same tools.
//!
//! Callback tools ([`CallbackTool`]), the approval policy ([`ApprovalPolicy`]) and external MCP
//! servers are resolved here too. MCP servers are resolved by the `AgentFactory` (they need
//! the config file's named servers), see [`super::mcp::config`].
//!
//! The server's side, [`ToolDefaults`] and how a request resolves against it, is in
//! [`defaults`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::approval::ApprovalPolicy;
use super::builtin::{self};
use super::callback::CallbackTool;
use super::delegation::DelegateArgs;
use super::mcp::{McpServerRequest, McpServerSpec};
use super::shell::{Shell, ShellConfig};
use super::{Tool, ToolScope, TypedTool, Workspace, WorkspaceError};
use crate::error::SessionError;
use crate::policy::AuditTag;
use crate::sandbox::{NetworkPolicy, SandboxSettings};

mod defaults;
#[cfg(test)]
mod tests;

pub use defaults::ToolDefaults;

/// A builtin tool, by the name the model sees. (Plain comments on the variants: the schema is
/// one `enum`, and `session_create`'s `builtins` says what they are.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BuiltinTool {
    ReadFile,
    WriteFile,
    EditFile,
    ListDir,
    Search,
    // Comms: message another session (on by default in host mode).
    SendMessage,
    // Comms: the sessions this one can message.
    ListPeers,
    // Delegation: hand a task to a child session.
    Delegate,
    // Delegation: wait for children working in the background.
    Wait,
    // Delegation: stop (and archive) a child.
    CancelDelegate,
    // Skills: read a skill's instructions (on by default where skills exist).
    LoadSkill,
    // Skills: read a file of a skill.
    ReadSkillFile,
    // Memory: search compacted history and remembered facts (on by default with compaction).
    MemorySearch,
    // Memory: keep a fact for the user's later sessions.
    Remember,
    // Documents: search the operator's document collections (on by default where there are).
    SearchDocuments,
}

impl BuiltinTool {
    /// The comms tools, which host-mode sessions get by default.
    pub const COMMS: [BuiltinTool; 2] = [BuiltinTool::SendMessage, BuiltinTool::ListPeers];

    /// The delegation tools, which sessions get by default where `[delegation]` is enabled.
    pub const DELEGATION: [BuiltinTool; 3] =
        [BuiltinTool::Delegate, BuiltinTool::Wait, BuiltinTool::CancelDelegate];

    /// The memory tools, which sessions get by default in builds with compaction.
    pub const MEMORY: [BuiltinTool; 2] = [BuiltinTool::MemorySearch, BuiltinTool::Remember];

    /// The skill tools, which sessions get by default when they have skills.
    pub const SKILLS: [BuiltinTool; 2] = [BuiltinTool::LoadSkill, BuiltinTool::ReadSkillFile];

    /// Whether this tool writes the workspace (what `[policy] anonymous_writes` guards).
    pub fn writes(self) -> bool {
        matches!(self, Self::WriteFile | Self::EditFile)
    }

    /// Whether this tool works through the session's link to the service (comms, delegation)
    /// rather than in a workspace, so it needs none.
    pub fn is_linked(self) -> bool {
        Self::COMMS.contains(&self) || Self::DELEGATION.contains(&self) || Self::MEMORY.contains(&self)
    }

    /// Whether this tool works in the session's workspace. The linked tools, the skill tools
    /// (which read the skills' folders) and `search_documents` (the operator's collections) do
    /// not, so a session without one keeps them.
    pub fn needs_workspace(self) -> bool {
        !self.is_linked() && !Self::SKILLS.contains(&self) && self != Self::SearchDocuments
    }

    /// Every builtin: the default set of a session.
    pub const ALL: [BuiltinTool; 5] = [
        BuiltinTool::ReadFile,
        BuiltinTool::WriteFile,
        BuiltinTool::EditFile,
        BuiltinTool::ListDir,
        BuiltinTool::Search,
    ];

    /// The name the model calls it by (the same as its serde name).
    pub fn name(self) -> &'static str {
        match self {
            BuiltinTool::ReadFile => builtin::ReadFile::NAME,
            BuiltinTool::WriteFile => builtin::WriteFile::NAME,
            BuiltinTool::EditFile => builtin::EditFile::NAME,
            BuiltinTool::ListDir => builtin::ListDir::NAME,
            BuiltinTool::Search => builtin::Search::NAME,
            BuiltinTool::SendMessage => super::comms::SendMessage::NAME,
            BuiltinTool::ListPeers => super::comms::ListPeers::NAME,
            BuiltinTool::Delegate => super::delegation::Delegate::NAME,
            BuiltinTool::Wait => super::delegation::Wait::NAME,
            BuiltinTool::CancelDelegate => super::delegation::CancelDelegate::NAME,
            BuiltinTool::LoadSkill => builtin::LoadSkill::NAME,
            BuiltinTool::ReadSkillFile => builtin::ReadSkillFile::NAME,
            BuiltinTool::MemorySearch => super::memory::MemorySearch::NAME,
            BuiltinTool::Remember => super::memory::Remember::NAME,
            BuiltinTool::SearchDocuments => builtin::SearchDocuments::NAME,
        }
    }

    /// The file tool in `workspace`; `None` for the tools that need none (see
    /// [`Self::needs_workspace`]), which the `AgentFactory` builds.
    fn build(self, workspace: &Workspace) -> Option<Arc<dyn Tool>> {
        let workspace = workspace.clone();
        Some(match self {
            BuiltinTool::ReadFile => Arc::new(builtin::ReadFile::new(workspace)),
            BuiltinTool::WriteFile => Arc::new(builtin::WriteFile::new(workspace)),
            BuiltinTool::EditFile => Arc::new(builtin::EditFile::new(workspace)),
            BuiltinTool::ListDir => Arc::new(builtin::ListDir::new(workspace)),
            BuiltinTool::Search => Arc::new(builtin::Search::new(workspace)),
            BuiltinTool::SendMessage
            | BuiltinTool::ListPeers
            | BuiltinTool::Delegate
            | BuiltinTool::Wait
            | BuiltinTool::CancelDelegate
            | BuiltinTool::LoadSkill
            | BuiltinTool::ReadSkillFile
            | BuiltinTool::MemorySearch
            | BuiltinTool::Remember
            | BuiltinTool::SearchDocuments => return None,
        })
    }
}

/// Used when neither the session nor the config file sets the shell's timeout.
pub const DEFAULT_SHELL_TIMEOUT_MS: u64 = 60_000;

/// The resolved tools of a session, as stored with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolConfig {
    /// Canonical root of the file tools and the shell's working directory. `None` only in
    /// records written before tools were per session: it means the server's workspace.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    #[serde(default)]
    pub builtins: Vec<BuiltinTool>,
    /// `None`: no shell.
    #[serde(default)]
    pub shell: Option<ShellConfig>,
    /// Tools the caller executes (see [`super::callback`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callbacks: Vec<CallbackTool>,
    /// Which calls wait for the caller's approval.
    #[serde(default, skip_serializing_if = "ApprovalPolicy::is_never")]
    pub approval: ApprovalPolicy,
    /// An approval left unanswered this long is denied when the next call finds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout_ms: Option<u64>,
    /// External MCP servers, resolved (named ones copied from the config file as they were).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerSpec>,
    /// Why the shell and stdio MCP servers of this session run outside the sandbox although
    /// it is on (`[sandbox] mode = "best_effort"` on a kernel without Landlock), as decided
    /// when the session was created; shown in `session_read`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unconfined: Option<String>,
    /// The session's own narrowing of the sandbox's network (`None`: the operator's). Applies
    /// to the shell; stdio MCP servers are shared and follow the operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkPolicy>,
}

/// Why a session's tools could not be built from its [`ToolConfig`].
#[derive(Debug, thiserror::Error)]
pub enum ToolScopeError {
    /// The session's workspace cannot be opened: it was valid when the session was created,
    /// but may have gone before the session resumed.
    #[error("workspace {}: {source}", dir.display())]
    Workspace {
        dir: PathBuf,
        #[source]
        source: WorkspaceError,
    },
}

impl ToolConfig {
    /// A delegated child's tools: these (its parent's resolved ones), narrowed by the `delegate`
    /// call: a workspace at or below this one, a subset of the builtins and MCP servers, the
    /// shell only if this has it; never callbacks; the same approval policy.
    pub fn narrow(&self, args: &DelegateArgs) -> Result<ToolConfig, SessionError> {
        let parent = self;
        let workspace = match (&args.workspace, &parent.workspace) {
            (None, workspace) => workspace.clone(),
            (Some(_), None) => {
                return Err(SessionError::invalid(
                    "workspace: this session has no workspace to give a child part of",
                ));
            }
            (Some(dir), Some(root)) => {
                let asked = Path::new(dir);
                let joined = if asked.is_absolute() { asked.to_path_buf() } else { root.join(asked) };
                let canonical = std::fs::canonicalize(&joined)
                    .map_err(|err| SessionError::invalid(format!("workspace {dir}: {err}")))?;
                if !canonical.starts_with(root) || !canonical.is_dir() {
                    return Err(SessionError::invalid(format!(
                        "workspace {dir}: a child's workspace is a directory at or below this session's ({})",
                        root.display()
                    )));
                }
                Some(canonical)
            }
        };
        let builtins = match &args.builtins {
            None => parent.builtins.clone(),
            Some(asked) => {
                if let Some(missing) = asked.iter().find(|tool| !parent.builtins.contains(tool)) {
                    return Err(SessionError::invalid(format!(
                        "builtins: {} is not among this session's tools, and a child gets only a subset",
                        missing.name()
                    )));
                }
                let mut builtins = asked.clone();
                builtins.sort();
                builtins.dedup();
                builtins
            }
        };
        let shell = match args.shell {
            None => parent.shell,
            Some(false) => None,
            Some(true) => Some(
                parent
                    .shell
                    .ok_or_else(|| SessionError::invalid("shell: this session has no shell to give a child"))?,
            ),
        };
        let mcp_servers = match &args.mcp_servers {
            None => parent.mcp_servers.clone(),
            Some(names) => names
                .iter()
                .map(|name| {
                    parent.mcp_servers.iter().find(|server| server.name == *name).cloned().ok_or_else(|| {
                        SessionError::invalid(format!("mcp_servers: {name:?} is not one of this session's servers"))
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(ToolConfig {
            workspace,
            builtins,
            shell,
            callbacks: Vec::new(),
            approval: parent.approval.clone(),
            approval_timeout_ms: parent.approval_timeout_ms,
            mcp_servers,
            unconfined: parent.unconfined.clone(),
            network: parent.network,
        })
    }

    /// The operator's sandbox narrowed by this session's own `network`.
    pub fn narrowed(&self, sandbox: SandboxSettings) -> SandboxSettings {
        let network = self.network.map_or(sandbox.network, |own| own.min(sandbox.network));
        SandboxSettings { network, ..sandbox }
    }

    /// What sessions stored before per-session tools had: read-only file tools in the
    /// server's workspace.
    pub fn legacy() -> Self {
        Self { builtins: vec![BuiltinTool::ReadFile, BuiltinTool::ListDir], ..Self::none() }
    }

    /// No tools at all.
    pub fn none() -> Self {
        Self {
            workspace: None,
            builtins: Vec::new(),
            shell: None,
            callbacks: Vec::new(),
            approval: ApprovalPolicy::default(),
            approval_timeout_ms: None,
            mcp_servers: Vec::new(),
            unconfined: None,
            network: None,
        }
    }

    /// Opens the workspace and builds the builtin tools, the shell and the callback tools.
    /// `server_workspace` stands in for a missing `workspace`; without either, the session has
    /// only its callback tools. MCP tools are added by the `AgentFactory`, which owns the pool.
    /// `audit` names the session in the shell's audit lines; `sandbox` is the operator's
    /// sandbox of its commands.
    pub fn scope(
        &self,
        server_workspace: Option<&Workspace>,
        audit: &AuditTag,
        sandbox: SandboxSettings,
    ) -> Result<ToolScope, ToolScopeError> {
        let callbacks = ToolScope::default().with_callbacks(&self.callbacks);
        if !self.builtins.iter().any(|tool| tool.needs_workspace()) && self.shell.is_none() {
            return Ok(callbacks);
        }
        let workspace = match (&self.workspace, server_workspace) {
            (Some(dir), _) => {
                Workspace::new(dir).map_err(|source| ToolScopeError::Workspace { dir: dir.clone(), source })?
            }
            (None, Some(workspace)) => workspace.clone(),
            (None, None) => return Ok(callbacks),
        };
        let mut tools: Vec<Arc<dyn Tool>> =
            self.builtins.iter().filter_map(|tool| tool.build(&workspace)).collect();
        if let Some(shell) = self.shell {
            tools.push(Arc::new(Shell::new(workspace, shell, audit.clone(), self.narrowed(sandbox))));
        }
        Ok(ToolScope::new(tools).with_callbacks(&self.callbacks))
    }
}

/// `shell` of `session_create`: `false` (off), `true` (on with the server's limits), or on with
/// limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ShellRequest {
    Enabled(bool),
    Limits(ShellLimits),
}

/// Limits of the shell; unset ones take the server's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellLimits {
    /// Time limit of a command in ms (default 60000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Bytes kept of stdout and of stderr (default 65536).
    #[serde(default)]
    pub max_output_bytes: Option<usize>,
}

/// The tools a caller asks for; unset fields take the server's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolRequest {
    pub workspace: Option<PathBuf>,
    pub builtins: Option<Vec<BuiltinTool>>,
    pub shell: Option<ShellRequest>,
    pub callbacks: Vec<CallbackTool>,
    pub approval: Option<ApprovalPolicy>,
    pub approval_timeout_ms: Option<u64>,
    /// Names of the config file's servers or inline servers; none by default.
    pub mcp_servers: Vec<McpServerRequest>,
    /// The session's network in the sandbox (`session_create`'s `sandbox.network`): only
    /// narrower than the operator's.
    pub network: Option<NetworkPolicy>,
}
