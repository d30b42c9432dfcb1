//! What identifies an external MCP server: [`McpServerSpec`] is both the resolved, persisted
//! description of one server of a session and (through [`McpServerKey`]) the key under which
//! [`super::McpFactory`] shares its process.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::reach::Reach;
use crate::secrets::Secret;

/// How deputy reaches a server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum McpTransport {
    /// A child process speaking MCP over stdin/stdout.
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        /// Added to the child's environment. Part of the key: two tenants with different
        /// tokens get two processes. Values are [`Secret`]s: redacted when shown, sealed at rest.
        #[serde(default)]
        env: BTreeMap<String, Secret>,
    },
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        /// Sent with every request. Values are [`Secret`]s, like `env`'s.
        #[serde(default)]
        headers: BTreeMap<String, Secret>,
    },
}

/// One resolved MCP server of a session, as stored with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerSpec {
    /// Prefix of its tools' names (`name__tool`).
    pub name: String,
    #[serde(flatten)]
    pub transport: McpTransport,
    /// How long the server stays warm in the idle pool once no session uses it; `None`: the
    /// pool's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_secs: Option<u64>,
    /// Longest time one tool call may take; `None`: [`DEFAULT_CALL_TIMEOUT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_timeout_secs: Option<u64>,
    /// A stdio server the operator let out of the sandbox (`[mcp_servers.NAME] sandbox =
    /// false`); never an inline one. Part of the key.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unconfined: bool,
}

/// Used when a server does not set `call_timeout_secs`.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

impl McpServerSpec {
    /// Where its secret values are (`env.KEY`, `headers.NAME`): what an export leaves out.
    pub fn secret_names(&self) -> Vec<String> {
        match &self.transport {
            McpTransport::Stdio { env, .. } => env.keys().map(|key| format!("env.{key}")).collect(),
            McpTransport::Http { headers, .. } => headers.keys().map(|name| format!("headers.{name}")).collect(),
        }
    }

    /// The sharing key: everything that makes two processes behave differently. Timeouts are
    /// deputy-side policy and do not split the pool.
    pub fn key(&self) -> McpServerKey {
        self.key_reaching(Reach::Any)
    }

    /// The key of a connection limited to `reach` (an HTTP server's; a stdio server reaches no
    /// address). A limited and an unlimited connection to one URL are never shared.
    pub fn key_reaching(&self, reach: Reach) -> McpServerKey {
        let reach = match self.transport {
            McpTransport::Stdio { .. } => Reach::Any,
            McpTransport::Http { .. } => reach,
        };
        McpServerKey {
            name: self.name.clone(),
            transport: self.transport.clone(),
            reach,
            unconfined: self.unconfined,
        }
    }

    pub fn call_timeout(&self) -> Duration {
        self.call_timeout_secs.map_or(DEFAULT_CALL_TIMEOUT, Duration::from_secs)
    }

    pub fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout_secs.map(Duration::from_secs)
    }
}

/// Server name + command + args + env (or url + headers): equal keys share one process,
/// different keys never do.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct McpServerKey {
    pub name: String,
    pub transport: McpTransport,
    /// Where an HTTP server's connection may go (security review F6).
    pub reach: Reach,
    /// Started outside the sandbox (the operator's opt-out).
    pub unconfined: bool,
}

impl std::fmt::Display for McpServerKey {
    /// Names the server without its env or headers, which may hold secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.transport {
            McpTransport::Stdio { command, .. } => write!(f, "{} ({command})", self.name),
            McpTransport::Http { url, .. } => write!(f, "{} ({url})", self.name),
        }
    }
}
