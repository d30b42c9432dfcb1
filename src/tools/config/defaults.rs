//! The `[tools]` section: the server's defaults and ceilings, and how a caller's
//! [`ToolRequest`] resolves against them into a [`ToolConfig`].

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{BuiltinTool, DEFAULT_SHELL_TIMEOUT_MS, ShellLimits, ShellRequest, ToolConfig, ToolRequest};
use crate::error::SessionError;
use crate::policy::{Grants, Guarded, PolicySwitches};
use crate::sandbox::{NetworkPolicy, SandboxMode, SandboxSettings};
use crate::tools::builtin::OUTPUT_CAP_BYTES;
use crate::tools::callback::CallbackTool;
use crate::tools::mcp::{McpServerRequest, McpServerSpec, McpTransport};
use crate::tools::shell::{Shell, ShellConfig};
use crate::tools::{TypedTool, Workspace};

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
    /// The config file's `[sandbox]`, resolved for the transport. Not part of `[tools]`.
    #[serde(skip)]
    pub sandbox: SandboxSettings,
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
            request.builtins.as_ref().is_some_and(|asked| asked.iter().any(|tool| tool.needs_workspace()));
        // A caller who may not write (G6) is refused the writing tools it names, and does not
        // get them by default.
        if request.builtins.as_ref().is_some_and(|asked| asked.iter().any(|tool| tool.writes())) {
            grants.check(Guarded::Writes, "builtins: write_file, edit_file", false)?;
        }
        let mut builtins =
            request.builtins.or_else(|| self.builtins.clone()).unwrap_or_else(|| BuiltinTool::ALL.to_vec());
        builtins.sort();
        builtins.dedup();
        if !grants.writes.allowed() {
            builtins.retain(|tool| !tool.writes());
        }
        let limits = match request.shell {
            None if self.shell => Some(ShellLimits::default()),
            None | Some(ShellRequest::Enabled(false)) => None,
            Some(ShellRequest::Enabled(true)) => Some(ShellLimits::default()),
            Some(ShellRequest::Limits(limits)) => Some(limits),
        };
        let shell = match limits {
            Some(limits) => {
                grants.check(Guarded::Shell, "shell", false)?;
                self.check_sandbox()?;
                Some(self.shell_config(limits)?)
            }
            None => None,
        };
        self.check_mcp_requests(&request.mcp_servers, grants)?;
        if request.network == Some(NetworkPolicy::Allow)
            && self.sandbox.mode != SandboxMode::Off
            && self.sandbox.network == NetworkPolicy::Deny
        {
            return Err(SessionError::policy_denied(
                "sandbox.network \"allow\": the operator's sandbox denies the network ([sandbox] network), and a \
                 session may only narrow it",
            ));
        }
        validate_callbacks(&request.callbacks)?;
        if request.approval_timeout_ms == Some(0) {
            return Err(SessionError::invalid("approval_timeout_ms must be at least 1"));
        }
        let caller_side = ToolConfig {
            callbacks: request.callbacks,
            approval: request.approval.unwrap_or_default(),
            approval_timeout_ms: request.approval_timeout_ms,
            network: request.network,
            ..ToolConfig::none()
        };
        if workspace.is_none() {
            if asked_for_builtins || shell.is_some() {
                return Err(SessionError::invalid(
                    "tools need a workspace: pass `workspace` or start deputy with --workspace",
                ));
            }
            // The linked and skill tools need no workspace.
            builtins.retain(|tool| !tool.needs_workspace());
            return Ok(ToolConfig { builtins, ..caller_side });
        }
        Ok(ToolConfig { workspace, builtins, shell, ..caller_side })
    }

    /// The roots a caller's workspace must be in: the configured ones, else the server's own
    /// workspace (for a client of the background server, that client's).
    pub fn workspace_roots(&self, server_workspace: Option<&Workspace>) -> Vec<PathBuf> {
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
        Err(SessionError::policy_denied(format!(
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

    /// `[sandbox] mode = "required"` on a kernel that cannot confine: no shell
    /// (`POLICY_DENIED`).
    pub fn check_sandbox(&self) -> Result<(), SessionError> {
        self.sandbox.plan().map(drop).map_err(|refusal| SessionError::policy_denied(refusal.to_string()))
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
            self.check_sandbox()?;
        }
        if tools
            .mcp_servers
            .iter()
            .any(|server| matches!(server.transport, McpTransport::Stdio { .. }) && !server.unconfined)
        {
            self.check_sandbox()?;
        }
        if tools.builtins.iter().any(|tool| tool.writes()) {
            grants.check(Guarded::Writes, "this session writes files", true)?;
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
pub(super) fn validate_callbacks(callbacks: &[CallbackTool]) -> Result<(), SessionError> {
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
