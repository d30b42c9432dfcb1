//! One running MCP server: the rmcp client session plus, for a stdio server, its process group.
//! Dropping a [`LiveServer`] stops it: the rmcp session closes and the child's whole group is
//! killed, so shims (`npx`, `sh -c`) cannot leave grandchildren behind.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, JsonObject,
    ProtocolVersion, Tool as McpToolInfo,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceError, ServiceExt};
use tokio::io::AsyncBufReadExt;

use super::error::McpServerError;
use super::spec::{McpServerKey, McpTransport};
use crate::mcp_transport::BoxedTransport;
use crate::sandbox::{Plan, PrivateTmp, SandboxMode, SandboxPolicy, SandboxSettings};
use crate::tools::process_group::GroupGuard;
#[cfg(target_os = "linux")]
use crate::tools::process_group::die_with_deputy;

/// Longest wait for a server to start and answer `initialize` and `tools/list`.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// A connected server and the tools it listed when it started.
pub struct LiveServer {
    /// The key's display form, for errors (the key itself may hold secrets).
    name: String,
    // Field order matters: the session closes (stdin EOF) before the group is killed.
    service: RunningService<RoleClient, ClientConfig>,
    tools: Vec<McpToolInfo>,
    /// Holds the group's death watch, which kills the group if deputy dies without running
    /// its guards (SIGKILL).
    group: GroupGuard,
    /// A call failed on the transport itself (a broken pipe, a closed connection): the server
    /// is gone even if rmcp has not noticed yet, so the next use starts a new one.
    broken: std::sync::atomic::AtomicBool,
    /// A confined stdio server's private TMPDIR, removed after the group was killed.
    _tmp: Option<PrivateTmp>,
}

fn client_config() -> ClientConfig {
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("deputy", env!("CARGO_PKG_VERSION")))
        // The newest version with an `initialize` handshake: what third-party servers speak.
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
}

impl LiveServer {
    /// Spawns (stdio) or connects to (HTTP) the server, handshakes and lists its tools.
    /// A stdio server starts in `sandbox` unless the operator let it out (`key.unconfined`).
    pub async fn start(key: &McpServerKey, sandbox: SandboxSettings) -> Result<Self, McpServerError> {
        match tokio::time::timeout(STARTUP_TIMEOUT, Self::connect(key, sandbox)).await {
            Ok(result) => result,
            Err(_) => {
                Err(McpServerError::StartTimeout { server: key.to_string(), secs: STARTUP_TIMEOUT.as_secs() })
            }
        }
    }

    async fn connect(key: &McpServerKey, sandbox: SandboxSettings) -> Result<Self, McpServerError> {
        let server = key.to_string();
        let handshake = |err| McpServerError::Handshake { server: server.clone(), source: Box::new(err) };
        let (service, group, tmp) = match &key.transport {
            McpTransport::Stdio { command, args, env } => {
                let sandbox = if key.unconfined { SandboxSettings::off() } else { sandbox };
                let plan = sandbox
                    .plan()
                    .map_err(|refusal| McpServerError::Sandbox { server: server.clone(), refusal })?;
                let spawn_error =
                    |source| McpServerError::Spawn { server: server.clone(), command: command.clone(), source };
                let (mut cmd, tmp) = if plan == Plan::Confined {
                    // Writes only in its own private TMPDIR: a pooled server is shared by
                    // sessions of different workspaces, so it gets none of them.
                    let tmp = PrivateTmp::create().map_err(spawn_error)?;
                    let policy = SandboxPolicy {
                        writable: vec![tmp.path().to_path_buf()],
                        network: sandbox.network,
                        required: sandbox.mode == SandboxMode::Required,
                    };
                    let mut cmd = crate::sandbox::launcher_command(&policy, command, args).map_err(spawn_error)?;
                    crate::tools::child_env::clean(&mut cmd, env);
                    cmd.env("TMPDIR", tmp.path());
                    (cmd, Some(tmp))
                } else {
                    let mut cmd = tokio::process::Command::new(command);
                    cmd.args(args);
                    crate::tools::child_env::clean(&mut cmd, env);
                    (cmd, None)
                };
                // Its own process group, so the whole tree can be killed at once (rmcp 3.9's
                // TokioChildProcess does not do this).
                #[cfg(unix)]
                cmd.process_group(0);
                #[cfg(target_os = "linux")]
                let mut death_watch = die_with_deputy(&mut cmd).map_err(|source| McpServerError::Spawn {
                    server: server.clone(),
                    command: command.clone(),
                    source,
                })?;
                // stderr is a pipe read into deputy's log, never deputy's own stdout/stderr
                // (deputy's stdout is an MCP transport itself).
                let (transport, stderr) =
                    TokioChildProcess::builder(cmd).stderr(Stdio::piped()).spawn().map_err(|source| {
                        McpServerError::Spawn { server: server.clone(), command: command.clone(), source }
                    })?;
                #[allow(unused_mut, reason = "only Linux gives the guard a death watch")]
                let mut group = GroupGuard::new(transport.id());
                #[cfg(target_os = "linux")]
                {
                    death_watch.spawned();
                    group.hold(death_watch);
                }
                if let Some(stderr) = stderr {
                    let name = key.name.clone();
                    tokio::spawn(async move {
                        let mut lines = tokio::io::BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            tracing::debug!(server = %name, "mcp stderr: {line}");
                        }
                    });
                }
                let service = client_config().serve(BoxedTransport::new(transport)).await.map_err(handshake)?;
                (service, group, tmp)
            }
            McpTransport::Http { url, headers } => {
                super::reach::check(url, key.reach)
                    .await
                    .map_err(|source| McpServerError::Unreachable { server: server.clone(), source })?;
                let mut custom = HashMap::new();
                for (name, value) in headers {
                    let name = reqwest::header::HeaderName::try_from(name.as_str()).map_err(|source| {
                        McpServerError::HeaderName { server: server.clone(), name: name.clone(), source }
                    })?;
                    let value = reqwest::header::HeaderValue::try_from(value.expose()).map_err(|source| {
                        McpServerError::HeaderValue { server: server.clone(), name: name.clone(), source }
                    })?;
                    custom.insert(name, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
                let transport = StreamableHttpClientTransport::with_client(super::reach::client(key.reach), config);
                let service = client_config().serve(BoxedTransport::new(transport)).await.map_err(|err| {
                    // What the URL answered may be an internal service's data (security
                    // review F6): the log has it, the caller gets no quote of it.
                    tracing::debug!(server = %server, "MCP handshake over HTTP failed: {err}");
                    McpServerError::HttpHandshake { server: server.clone() }
                })?;
                (service, GroupGuard::new(None), None)
            }
        };
        let tools = service
            .list_all_tools()
            .await
            .map_err(|source| McpServerError::ListTools { server: server.clone(), source })?;
        tracing::info!(server = %key, tools = tools.len(), pid = ?group.pgid(), "MCP server started");
        Ok(Self {
            name: server,
            service,
            tools,
            group,
            broken: std::sync::atomic::AtomicBool::new(false),
            _tmp: tmp,
        })
    }

    /// The tools the server listed when it started.
    pub fn tools(&self) -> &[McpToolInfo] {
        &self.tools
    }

    /// The process group (= pid of the child) of a stdio server.
    pub fn pid(&self) -> Option<u32> {
        self.group.pgid()
    }

    /// Whether the server has gone (crashed, killed, closed the connection).
    pub fn is_closed(&self) -> bool {
        self.service.is_closed()
            || self.service.is_transport_closed()
            || self.broken.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Calls a tool. Dropping the future before it completes sends `notifications/cancelled`
    /// to the server (rmcp ≥ 3.6), which is how an interrupted turn reaches the server. A
    /// failure is [`McpServerError::Closed`] if the server is gone by then, else
    /// [`McpServerError::Call`].
    pub async fn call(&self, tool: &str, arguments: Option<JsonObject>) -> Result<CallToolResult, McpServerError> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        self.service.call_tool(params).await.map_err(|source| {
            if matches!(source, ServiceError::TransportSend(_) | ServiceError::TransportClosed) {
                self.broken.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            if self.is_closed() {
                McpServerError::Closed { server: self.name.clone(), source }
            } else {
                McpServerError::Call(source)
            }
        })
    }
}
