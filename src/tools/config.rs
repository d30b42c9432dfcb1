//! Which tools a session gets: what the caller asks for ([`ToolRequest`]), the server's
//! defaults ([`ToolDefaults`], the config file's `[tools]` section), and the resolved result
//! ([`ToolConfig`]) that is persisted with the session so a resumed session gets the same tools.
//!
//! Callback tools ([`CallbackTool`]), the approval policy ([`ApprovalPolicy`]) and external MCP
//! servers are resolved here too. MCP servers are resolved by the `AgentFactory` (they need
//! the config file's named servers), see [`super::mcp::config`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::approval::ApprovalPolicy;
use super::builtin::{self, OUTPUT_CAP_BYTES};
use super::callback::CallbackTool;
use super::delegation::DelegateArgs;
use super::mcp::{McpServerRequest, McpServerSpec, McpTransport};
use super::shell::{Shell, ShellConfig};
use super::{Tool, ToolScope, TypedTool, Workspace, WorkspaceError};
use crate::error::SessionError;
use crate::policy::{AuditTag, Grants, Guarded, PolicySwitches};

/// A builtin file tool, by the name the model sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BuiltinTool {
    ReadFile,
    WriteFile,
    EditFile,
    ListDir,
    Search,
    /// Comms: message another session (on by default in host mode).
    SendMessage,
    /// Comms: the sessions this one can message.
    ListPeers,
    /// Delegation: hand a task to a child session.
    Delegate,
    /// Delegation: wait for children working in the background.
    Wait,
    /// Delegation: stop (and archive) a child.
    CancelDelegate,
}

impl BuiltinTool {
    /// The comms tools, which host-mode sessions get by default.
    pub const COMMS: [BuiltinTool; 2] = [BuiltinTool::SendMessage, BuiltinTool::ListPeers];

    /// The delegation tools, which sessions get by default where `[delegation]` is enabled.
    pub const DELEGATION: [BuiltinTool; 3] =
        [BuiltinTool::Delegate, BuiltinTool::Wait, BuiltinTool::CancelDelegate];

    /// Whether this tool works through the session's link to the service (comms, delegation)
    /// rather than in a workspace, so it needs none.
    pub fn is_linked(self) -> bool {
        Self::COMMS.contains(&self) || Self::DELEGATION.contains(&self)
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
        }
    }

    /// The file tool in `workspace`; `None` for the linked tools (see [`Self::is_linked`]).
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
            | BuiltinTool::CancelDelegate => return None,
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
        })
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
        }
    }

    /// Opens the workspace and builds the builtin tools, the shell and the callback tools.
    /// `server_workspace` stands in for a missing `workspace`; without either, the session has
    /// only its callback tools. MCP tools are added by the `AgentFactory`, which owns the pool.
    /// `audit` names the session in the shell's audit lines.
    pub fn scope(
        &self,
        server_workspace: Option<&Workspace>,
        audit: &AuditTag,
    ) -> Result<ToolScope, ToolScopeError> {
        let callbacks = ToolScope::default().with_callbacks(&self.callbacks);
        if !self.builtins.iter().any(|tool| !tool.is_linked()) && self.shell.is_none() {
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
            tools.push(Arc::new(Shell::new(workspace, shell, audit.clone())));
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
    /// Default and maximum time of one command, in ms (default 60000). A command still running
    /// then is killed with its whole process group.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Bytes kept of each of stdout and stderr (default 65536).
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
}

/// The `[tools]` section of the config file: defaults for sessions that do not say.
///
/// ```toml
/// [tools]
/// builtins = ["read_file", "list_dir", "search"]   # default: all five
/// shell = false                                   # default: off
/// shell_timeout_ms = 60000
/// shell_max_output_bytes = 65536
/// max_tool_output_cap_bytes = 1048576            # ceiling of a session's tool_output_cap_bytes
/// ```
///
/// `shell_timeout_ms`, `shell_max_output_bytes` and `max_tool_output_cap_bytes` are ceilings
/// (security review F11): a session may ask for less, and asking for more is `INVALID_REQUEST`.
///
/// `allow_shell` and `allow_inline_mcp_servers` are deprecated aliases of `[policy] shell` and
/// `[policy] inline_mcp_commands` + `inline_mcp_urls` (`false`: deny, `true`: allow); `[policy]`
/// wins where both are set ([`crate::policy`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDefaults {
    pub builtins: Option<Vec<BuiltinTool>>,
    #[serde(default)]
    pub shell: bool,
    pub shell_timeout_ms: Option<u64>,
    pub shell_max_output_bytes: Option<usize>,
    /// Largest `context.tool_output_cap_bytes` a session may ask for; `None`: no ceiling.
    pub max_tool_output_cap_bytes: Option<u64>,
    /// Deprecated: `[policy] shell`.
    pub allow_shell: Option<bool>,
    /// Deprecated: `[policy] inline_mcp_commands` and `inline_mcp_urls`.
    pub allow_inline_mcp_servers: Option<bool>,
    /// Where a caller's `workspace` may be (the config file's `[policy] workspace_roots`);
    /// `None`: inside the server's own workspace only. Not part of `[tools]`: it is policy.
    #[serde(skip)]
    pub workspace_roots: Option<Vec<PathBuf>>,
    /// The config file's `[policy]` switches (the deprecated `allow_*` above not folded in:
    /// [`ToolDefaults::switches`] does that).
    #[serde(skip)]
    pub policy: PolicySwitches,
}

/// Directories no workspace may be in, whatever the roots: they expose the running system
/// (`/proc/self/environ` holds deputy's token and keys), not files to work on.
const NEVER_WORKSPACES: &[&str] = &["/proc", "/sys", "/dev"];

impl ToolDefaults {
    /// Resolves a request against these defaults and the server's workspace. Fails with
    /// `INVALID_REQUEST` for a workspace that is not an existing directory or a bad limit.
    pub fn resolve(
        &self,
        request: ToolRequest,
        server_workspace: Option<&Workspace>,
        grants: &Grants,
    ) -> Result<ToolConfig, SessionError> {
        let workspace = match &request.workspace {
            Some(dir) => {
                self.check_workspace(dir, server_workspace)?;
                Some(open_workspace(dir)?.root().to_path_buf())
            }
            None => server_workspace.map(|workspace| workspace.root().to_path_buf()),
        };
        let asked_for_builtins =
            request.builtins.as_ref().is_some_and(|asked| asked.iter().any(|tool| !tool.is_linked()));
        let mut builtins =
            request.builtins.or_else(|| self.builtins.clone()).unwrap_or_else(|| BuiltinTool::ALL.to_vec());
        builtins.sort();
        builtins.dedup();
        let limits = match request.shell {
            None if self.shell => Some(ShellLimits::default()),
            None | Some(ShellRequest::Enabled(false)) => None,
            Some(ShellRequest::Enabled(true)) => Some(ShellLimits::default()),
            Some(ShellRequest::Limits(limits)) => Some(limits),
        };
        let shell = match limits {
            Some(limits) => {
                grants.check(Guarded::Shell, "shell", false)?;
                Some(self.shell_config(limits)?)
            }
            None => None,
        };
        self.check_mcp_requests(&request.mcp_servers, grants)?;
        validate_callbacks(&request.callbacks)?;
        if request.approval_timeout_ms == Some(0) {
            return Err(SessionError::invalid("approval_timeout_ms must be at least 1"));
        }
        let caller_side = ToolConfig {
            callbacks: request.callbacks,
            approval: request.approval.unwrap_or_default(),
            approval_timeout_ms: request.approval_timeout_ms,
            ..ToolConfig::none()
        };
        if workspace.is_none() {
            if asked_for_builtins || shell.is_some() {
                return Err(SessionError::invalid(
                    "tools need a workspace: pass `workspace` or start deputy with --workspace",
                ));
            }
            // The linked tools need no workspace.
            builtins.retain(|tool| tool.is_linked());
            return Ok(ToolConfig { builtins, ..caller_side });
        }
        Ok(ToolConfig { workspace, builtins, shell, ..caller_side })
    }

    /// The roots a caller's workspace must be in: the configured ones, else the server's own
    /// workspace (for a client of the background server, that client's).
    fn workspace_roots(&self, server_workspace: Option<&Workspace>) -> Vec<PathBuf> {
        match &self.workspace_roots {
            Some(roots) => roots.iter().filter_map(|root| std::fs::canonicalize(root).ok()).collect(),
            None => server_workspace.map(|workspace| workspace.root().to_path_buf()).into_iter().collect(),
        }
    }

    /// A caller's workspace must canonicalize to an allowed root or below it, and never into
    /// `/proc`, `/sys` or `/dev` (security review F2). The refusal is the same whether the
    /// directory exists or not, so the field is no oracle for paths outside the roots.
    pub fn check_workspace(&self, dir: &Path, server_workspace: Option<&Workspace>) -> Result<(), SessionError> {
        let roots = self.workspace_roots(server_workspace);
        let allowed = std::fs::canonicalize(dir).ok().is_some_and(|canonical| {
            !NEVER_WORKSPACES.iter().any(|never| canonical.starts_with(never))
                && roots.iter().any(|root| canonical.starts_with(root))
        });
        if allowed {
            return Ok(());
        }
        let shown: Vec<String> = roots.iter().map(|root| root.display().to_string()).collect();
        Err(SessionError::invalid(format!(
            "workspace {}: not an allowed workspace; sessions may work in these directories or below: {shown:?} \
             (the operator sets them with [policy] workspace_roots)",
            dir.display()
        )))
    }

    /// The operator's switches: `[policy]`, else the deprecated `[tools] allow_*`.
    pub fn switches(&self) -> PolicySwitches {
        self.policy.with_legacy(self.allow_shell, self.allow_inline_mcp_servers)
    }

    /// Refuses inline MCP servers the caller may not bring (security review F1: the check must
    /// see the list the servers are started from; F3: per caller). Named servers always pass.
    pub fn check_mcp_requests(&self, requests: &[McpServerRequest], grants: &Grants) -> Result<(), SessionError> {
        for request in requests {
            let McpServerRequest::Inline(inline) = request else { continue };
            let guarded = if inline.server.url.is_some() { Guarded::InlineUrl } else { Guarded::InlineCommand };
            grants.check(guarded, &format!("mcp_servers: inline server {:?}", inline.name), false)?;
        }
        Ok(())
    }

    /// Refuses a `context.tool_output_cap_bytes` above `[tools] max_tool_output_cap_bytes` (F11).
    pub fn check_tool_output_cap(&self, asked: Option<u64>) -> Result<(), SessionError> {
        match (asked, self.max_tool_output_cap_bytes) {
            (Some(asked), Some(ceiling)) if asked > ceiling => Err(SessionError::invalid(format!(
                "context.tool_output_cap_bytes {asked} is above this deputy's ceiling of {ceiling} bytes \
                 ([tools] max_tool_output_cap_bytes)"
            ))),
            _ => Ok(()),
        }
    }

    /// Re-applies the operator's switches to a stored session's tools before it resumes
    /// (security review F18): a session created before `allow_shell = false` or
    /// `allow_inline_mcp_servers = false` must not keep the shell or start its inline servers.
    /// `is_configured` says whether a stored server is one of the config file's.
    pub fn check_resumed(
        &self,
        tools: &ToolConfig,
        server_workspace: Option<&Workspace>,
        grants: &Grants,
        is_configured: impl Fn(&McpServerSpec) -> bool,
    ) -> Result<(), SessionError> {
        // A session's own workspace, when it is not the server's, is checked like a new one.
        if let Some(dir) = &tools.workspace
            && server_workspace.is_none_or(|server| server.root() != dir.as_path())
        {
            self.check_workspace(dir, server_workspace)?;
        }
        if tools.shell.is_some() {
            grants.check(Guarded::Shell, "this session uses the shell", true)?;
        }
        for inline in tools.mcp_servers.iter().filter(|server| !is_configured(server)) {
            let guarded = match inline.transport {
                McpTransport::Stdio { .. } => Guarded::InlineCommand,
                McpTransport::Http { .. } => Guarded::InlineUrl,
            };
            let detail = format!("this session uses the inline MCP server {:?}", inline.name);
            grants.check(guarded, &detail, true)?;
        }
        Ok(())
    }

    /// The session's shell limits: what it asks for, within the config file's ceilings (F11),
    /// else the config file's values, else the defaults.
    fn shell_config(&self, limits: ShellLimits) -> Result<ShellConfig, SessionError> {
        let above = |asked: Option<u64>, ceiling: Option<u64>, field: &str, key: &str| match (asked, ceiling) {
            (Some(asked), Some(ceiling)) if asked > ceiling => Err(SessionError::invalid(format!(
                "shell.{field} {asked} is above this deputy's ceiling of {ceiling} ([tools] {key})"
            ))),
            _ => Ok(()),
        };
        above(limits.timeout_ms, self.shell_timeout_ms, "timeout_ms", "shell_timeout_ms")?;
        let as_u64 = |bytes: Option<usize>| bytes.map(|bytes| bytes as u64);
        above(
            as_u64(limits.max_output_bytes),
            as_u64(self.shell_max_output_bytes),
            "max_output_bytes",
            "shell_max_output_bytes",
        )?;
        let timeout_ms = limits.timeout_ms.or(self.shell_timeout_ms).unwrap_or(DEFAULT_SHELL_TIMEOUT_MS);
        let max_output_bytes = limits.max_output_bytes.or(self.shell_max_output_bytes).unwrap_or(OUTPUT_CAP_BYTES);
        if timeout_ms == 0 {
            return Err(SessionError::invalid("shell.timeout_ms must be at least 1"));
        }
        if max_output_bytes == 0 {
            return Err(SessionError::invalid("shell.max_output_bytes must be at least 1"));
        }
        Ok(ShellConfig { timeout_ms, max_output_bytes })
    }
}

/// Callback names must be unique and must not shadow deputy's own tools.
fn validate_callbacks(callbacks: &[CallbackTool]) -> Result<(), SessionError> {
    let mut seen = std::collections::BTreeSet::new();
    for callback in callbacks {
        callback.validate()?;
        let builtin = BuiltinTool::ALL.iter().any(|tool| tool.name() == callback.name);
        if builtin || callback.name == Shell::NAME {
            return Err(SessionError::invalid(format!(
                "callback {:?} has the name of a builtin tool",
                callback.name
            )));
        }
        if !seen.insert(callback.name.as_str()) {
            return Err(SessionError::invalid(format!("callback {:?} is declared twice", callback.name)));
        }
    }
    Ok(())
}

fn open_workspace(dir: &Path) -> Result<Workspace, SessionError> {
    Workspace::new(dir).map_err(|err| SessionError::invalid(format!("workspace {}: {err}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caller::Caller;
    use crate::error::ErrorCode;
    use crate::policy::Surface;

    #[test]
    fn an_operator_can_forbid_the_shell_and_inline_mcp_servers() {
        let dir = tempfile::tempdir().unwrap();
        let server = Workspace::new(dir.path()).unwrap();
        let inline: McpServerRequest =
            serde_json::from_value(serde_json::json!({"name": "x", "command": "true"})).unwrap();
        let inline_url: McpServerRequest =
            serde_json::from_value(serde_json::json!({"name": "u", "url": "http://127.0.0.1:9/mcp"})).unwrap();
        let named = McpServerRequest::Named("files".into());
        let with_shell = || ToolRequest { shell: Some(ShellRequest::Enabled(true)), ..ToolRequest::default() };
        let with =
            |server: &McpServerRequest| ToolRequest { mcp_servers: vec![server.clone()], ..ToolRequest::default() };

        let open = ToolDefaults::default();
        let local = open.switches().grants(&Caller::local(), Surface::Local);
        assert!(open.resolve(with_shell(), Some(&server), &local).is_ok(), "allowed unless the operator says no");
        assert!(open.resolve(with(&inline), Some(&server), &local).is_ok());

        // The deprecated [tools] switches still deny.
        let locked = ToolDefaults {
            allow_shell: Some(false),
            allow_inline_mcp_servers: Some(false),
            ..ToolDefaults::default()
        };
        let grants = locked.switches().grants(&Caller::local(), Surface::Local);
        let shell = locked.resolve(with_shell(), Some(&server), &grants).unwrap_err();
        assert_eq!(shell.code(), ErrorCode::InvalidRequest);
        assert!(shell.to_string().contains("[policy] shell = \"deny\""), "{shell}");
        let inline_refused = locked.resolve(with(&inline), Some(&server), &grants).unwrap_err();
        assert!(inline_refused.to_string().contains("inline_mcp_commands"), "{inline_refused}");
        let url_refused = locked.resolve(with(&inline_url), Some(&server), &grants).unwrap_err();
        assert!(url_refused.to_string().contains("inline_mcp_urls"), "{url_refused}");
        assert!(locked.resolve(with(&named), Some(&server), &grants).is_ok(), "named servers stay available");
        assert!(
            locked.resolve(ToolRequest::default(), Some(&server), &grants).is_ok(),
            "no shell asked, none refused"
        );
    }

    #[test]
    fn f11_the_config_files_limits_are_ceilings() {
        let dir = tempfile::tempdir().unwrap();
        let server = Workspace::new(dir.path()).unwrap();
        let capped = ToolDefaults {
            shell_timeout_ms: Some(2000),
            shell_max_output_bytes: Some(65536),
            max_tool_output_cap_bytes: Some(4096),
            ..ToolDefaults::default()
        };
        let shell = |timeout_ms, max_output_bytes| ToolRequest {
            shell: Some(ShellRequest::Limits(ShellLimits { timeout_ms, max_output_bytes })),
            ..ToolRequest::default()
        };
        let grants = Grants::local();
        let longer = capped.resolve(shell(Some(10_000), None), Some(&server), &grants).unwrap_err();
        assert!(longer.to_string().contains("ceiling of 2000 ([tools] shell_timeout_ms)"), "{longer}");
        let more = capped.resolve(shell(None, Some(1 << 30)), Some(&server), &grants).unwrap_err();
        assert!(more.to_string().contains("[tools] shell_max_output_bytes"), "{more}");
        let less = capped.resolve(shell(Some(500), Some(100)), Some(&server), &grants).unwrap();
        assert_eq!(less.shell, Some(ShellConfig { timeout_ms: 500, max_output_bytes: 100 }));
        assert!(capped.check_tool_output_cap(Some(8192)).is_err());
        assert!(capped.check_tool_output_cap(Some(4096)).is_ok() && capped.check_tool_output_cap(None).is_ok());
    }

    #[test]
    fn requests_resolve_against_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let server = Workspace::new(dir.path()).unwrap();
        let defaults = ToolDefaults::default();

        let all = defaults.resolve(ToolRequest::default(), Some(&server), &Grants::local()).unwrap();
        assert_eq!(all.builtins, BuiltinTool::ALL.to_vec());
        assert_eq!((all.workspace.as_deref(), all.shell), (Some(server.root()), None));

        let request = ToolRequest {
            builtins: Some(vec![BuiltinTool::Search, BuiltinTool::ReadFile, BuiltinTool::Search]),
            shell: Some(ShellRequest::Limits(ShellLimits { timeout_ms: Some(5), max_output_bytes: None })),
            ..ToolRequest::default()
        };
        let some = defaults.resolve(request, Some(&server), &Grants::local()).unwrap();
        assert_eq!(some.builtins, [BuiltinTool::ReadFile, BuiltinTool::Search]);
        assert_eq!(some.shell, Some(ShellConfig { timeout_ms: 5, max_output_bytes: OUTPUT_CAP_BYTES }));

        let configured = ToolDefaults {
            builtins: Some(vec![BuiltinTool::ListDir]),
            shell: true,
            shell_timeout_ms: Some(1000),
            shell_max_output_bytes: Some(10),
            ..ToolDefaults::default()
        };
        let from_file = configured.resolve(ToolRequest::default(), Some(&server), &Grants::local()).unwrap();
        assert_eq!(from_file.builtins, [BuiltinTool::ListDir]);
        assert_eq!(from_file.shell, Some(ShellConfig { timeout_ms: 1000, max_output_bytes: 10 }));
        let off = ToolRequest { shell: Some(ShellRequest::Enabled(false)), ..ToolRequest::default() };
        assert_eq!(configured.resolve(off, Some(&server), &Grants::local()).unwrap().shell, None);
    }

    #[test]
    fn a_bad_workspace_or_limit_is_an_invalid_request() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let defaults = ToolDefaults::default();
        for workspace in [dir.path().join("missing"), file] {
            let request = ToolRequest { workspace: Some(workspace), ..ToolRequest::default() };
            assert_eq!(
                defaults.resolve(request, None, &Grants::local()).unwrap_err().code(),
                ErrorCode::InvalidRequest
            );
        }
        let zero = ShellRequest::Limits(ShellLimits { timeout_ms: Some(0), max_output_bytes: None });
        let request =
            ToolRequest { shell: Some(zero), workspace: Some(dir.path().into()), ..ToolRequest::default() };
        assert_eq!(
            defaults.resolve(request, None, &Grants::local()).unwrap_err().code(),
            ErrorCode::InvalidRequest
        );
        // Without any workspace, asking for tools is an error; not asking gives none.
        let shell = ToolRequest { shell: Some(ShellRequest::Enabled(true)), ..ToolRequest::default() };
        assert_eq!(defaults.resolve(shell, None, &Grants::local()).unwrap_err().code(), ErrorCode::InvalidRequest);
        assert_eq!(defaults.resolve(ToolRequest::default(), None, &Grants::local()).unwrap(), ToolConfig::none());
    }

    #[test]
    fn callbacks_may_not_take_the_name_of_a_builtin_or_the_shell() {
        let callback = |name: &str| CallbackTool {
            name: name.into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
        };
        for taken in ["read_file", "search", "shell"] {
            let refused = validate_callbacks(&[callback(taken)]).unwrap_err();
            assert!(refused.to_string().contains("has the name of a builtin tool"), "{taken}: {refused}");
        }
        assert!(validate_callbacks(&[callback("read_files"), callback("notify")]).is_ok());
    }

    #[test]
    fn builtin_names_are_their_serde_names() {
        for tool in BuiltinTool::ALL {
            assert_eq!(serde_json::to_value(tool).unwrap(), tool.name());
        }
    }

    #[test]
    fn unknown_builtin_names_do_not_parse() {
        let parsed: Result<Vec<BuiltinTool>, _> = serde_json::from_str(r#"["read_file", "rm_rf"]"#);
        assert!(parsed.unwrap_err().to_string().contains("rm_rf"));
        let shell: ShellRequest = serde_json::from_str(r#"{"timeout_ms": 10}"#).unwrap();
        assert_eq!(shell, ShellRequest::Limits(ShellLimits { timeout_ms: Some(10), max_output_bytes: None }));
        assert!(serde_json::from_str::<ShellRequest>(r#"{"timeout": 10}"#).is_err());
    }
}
