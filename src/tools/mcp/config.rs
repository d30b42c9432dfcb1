//! Where MCP servers come from: the config file's named servers (`[mcp_servers.NAME]`), the
//! pool settings (`[mcp_pool]`), and the `mcp_servers` entries of `session_create` (a name
//! from the config file or an inline server), resolved into [`McpServerSpec`]s.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::spec::{McpServerSpec, McpTransport};
use crate::error::SessionError;
use crate::sandbox::SandboxSettings;
use crate::secrets::Secret;

/// One server in the config file, or inline in `session_create`: exactly one of `command`
/// (stdio child) and `url` (streamable HTTP).
///
/// ```toml
/// [mcp_servers.files]
/// command = "npx"
/// args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]
/// env = { LOG_LEVEL = "warn" }
/// idle_timeout_secs = 60
///
/// [mcp_servers.search]
/// url = "https://mcp.example.com/mcp"
/// headers = { Authorization = "Bearer ..." }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// A stdio server's program.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// A stdio server's environment (kept secret).
    #[serde(default, deserialize_with = "crate::text::json::deserialize")]
    #[schemars(schema_with = "crate::text::json::schema::<BTreeMap<String, String>>")]
    pub env: BTreeMap<String, Secret>,
    /// A streamable HTTP server's URL.
    #[serde(default)]
    pub url: Option<String>,
    /// HTTP headers (kept secret).
    #[serde(default, deserialize_with = "crate::text::json::deserialize")]
    #[schemars(schema_with = "crate::text::json::schema::<BTreeMap<String, String>>")]
    pub headers: BTreeMap<String, Secret>,
    /// Seconds it stays warm after its last use.
    #[serde(default)]
    pub idle_timeout_secs: Option<u64>,
    /// Time limit of a tool call in seconds (default 120).
    #[serde(default)]
    pub call_timeout_secs: Option<u64>,
    /// `false`: this stdio server runs outside the sandbox ([`crate::sandbox`]). Only the
    /// config file's entries may say so; an inline server that does is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub sandbox: Option<bool>,
}

/// An inline server of `session_create`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InlineMcpServer {
    /// Its tools' prefix (`name__tool`).
    pub name: String,
    #[serde(flatten)]
    pub server: McpServerConfig,
}

/// An entry of `session_create`'s `mcp_servers`: the name of a server of the config file, or
/// an inline `{name, command, args?, env?}` / `{name, url, headers?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum McpServerRequest {
    Named(String),
    Inline(InlineMcpServer),
}

/// The `[mcp_pool]` section: how long unused servers stay warm.
///
/// ```toml
/// [mcp_pool]
/// idle_timeout_secs = 300     # default 5 min
/// max_idle_servers = 32       # default 32; the longest idle go first
/// cleanup_interval_secs = 10  # how often the reaper looks (default 10)
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpPoolSettings {
    pub idle_timeout_secs: Option<u64>,
    pub max_idle_servers: Option<usize>,
    pub cleanup_interval_secs: Option<u64>,
}

/// The pool's resolved policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McpPoolConfig {
    pub idle_timeout: Duration,
    pub max_idle: usize,
    pub cleanup_interval: Duration,
    /// The sandbox stdio servers start in (the config file's `[sandbox]`); off by default.
    pub sandbox: SandboxSettings,
}

impl Default for McpPoolConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(300),
            max_idle: 32,
            cleanup_interval: Duration::from_secs(10),
            sandbox: SandboxSettings::off(),
        }
    }
}

impl From<McpPoolSettings> for McpPoolConfig {
    fn from(settings: McpPoolSettings) -> Self {
        let default = Self::default();
        Self {
            idle_timeout: settings.idle_timeout_secs.map_or(default.idle_timeout, Duration::from_secs),
            max_idle: settings.max_idle_servers.unwrap_or(default.max_idle),
            cleanup_interval: settings
                .cleanup_interval_secs
                .map_or(default.cleanup_interval, |secs| Duration::from_secs(secs.max(1))),
            sandbox: default.sandbox,
        }
    }
}

/// Resolves a session's `mcp_servers` against the config file's named servers. Fails with
/// `INVALID_REQUEST` for an unknown name, a bad inline server or a name used twice (their
/// tools would collide).
pub fn resolve_servers(
    requests: &[McpServerRequest],
    named: &BTreeMap<String, McpServerConfig>,
) -> Result<Vec<McpServerSpec>, SessionError> {
    let mut specs: Vec<McpServerSpec> = Vec::with_capacity(requests.len());
    for request in requests {
        let spec = match request {
            McpServerRequest::Named(name) => {
                let Some(config) = named.get(name) else {
                    let known: Vec<&str> = named.keys().map(String::as_str).collect();
                    return Err(SessionError::invalid(format!(
                        "mcp_servers: no server named {name:?} in the config file (known: {known:?})"
                    )));
                };
                spec_of(name, config)?
            }
            McpServerRequest::Inline(inline) => {
                if inline.server.sandbox.is_some() {
                    return Err(SessionError::invalid(format!(
                        "mcp_servers: {:?}: `sandbox` is the operator's to set ([mcp_servers.NAME] in the config \
                         file); an inline server always runs in the sandbox",
                        inline.name
                    )));
                }
                spec_of(&inline.name, &inline.server)?
            }
        };
        if specs.iter().any(|known| known.name == spec.name) {
            return Err(SessionError::invalid(format!("mcp_servers: {:?} is listed twice", spec.name)));
        }
        specs.push(spec);
    }
    Ok(specs)
}

/// One server's spec; also validates the config file's entries at start-up.
pub fn spec_of(name: &str, config: &McpServerConfig) -> Result<McpServerSpec, SessionError> {
    let valid_name = !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid_name {
        return Err(SessionError::invalid(format!(
            "mcp_servers: name {name:?} must be 1-32 letters, digits, '-' or '_' without \"__\" (it prefixes tool \
             names as name__tool)"
        )));
    }
    let transport = match (&config.command, &config.url) {
        (Some(command), None) if config.headers.is_empty() => {
            McpTransport::Stdio { command: command.clone(), args: config.args.clone(), env: config.env.clone() }
        }
        (None, Some(url)) if config.args.is_empty() && config.env.is_empty() => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(SessionError::invalid(format!("mcp_servers.{name}: url must be http(s)")));
            }
            McpTransport::Http { url: url.clone(), headers: config.headers.clone() }
        }
        _ => {
            return Err(SessionError::invalid(format!(
                "mcp_servers.{name}: give either `command` (with optional `args`, `env`) or `url` (with optional \
                 `headers`)"
            )));
        }
    };
    if config.call_timeout_secs == Some(0) {
        return Err(SessionError::invalid(format!("mcp_servers.{name}: call_timeout_secs must be at least 1")));
    }
    Ok(McpServerSpec {
        name: name.to_owned(),
        transport,
        idle_timeout_secs: config.idle_timeout_secs,
        call_timeout_secs: config.call_timeout_secs,
        unconfined: config.sandbox == Some(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn names_and_inline_servers_resolve_and_mistakes_are_invalid_requests() {
        let named = BTreeMap::from([(
            "files".to_owned(),
            McpServerConfig { command: Some("fs-server".into()), idle_timeout_secs: Some(7), ..Default::default() },
        )]);
        let requests: Vec<McpServerRequest> = serde_json::from_value(serde_json::json!([
            "files",
            {"name": "web", "url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "k"}},
            {"name": "local", "command": "srv", "args": ["-v"], "env": {"TOKEN": "t"}},
        ]))
        .unwrap();
        let specs = resolve_servers(&requests, &named).unwrap();
        assert_eq!(specs[0].idle_timeout_secs, Some(7));
        assert!(
            matches!(&specs[1].transport, McpTransport::Http { headers, .. } if headers["X-Key"].expose() == "k")
        );
        assert!(matches!(&specs[2].transport, McpTransport::Stdio { env, .. } if env["TOKEN"].expose() == "t"));
        // Shown anywhere (a log, an error, a rendered spec), values are redacted and names stay.
        let shown = serde_json::to_value(&specs).unwrap();
        assert_eq!(shown[1]["headers"], serde_json::json!({"X-Key": "[redacted]"}));
        assert_eq!(shown[2]["env"], serde_json::json!({"TOKEN": "[redacted]"}));
        assert!(!format!("{specs:?}").contains("\"t\""), "{specs:?}");

        for bad in [
            serde_json::json!(["nope"]),
            serde_json::json!(["files", "files"]),
            serde_json::json!([{"name": "a__b", "command": "x"}]),
            serde_json::json!([{"name": "both", "command": "x", "url": "http://h/mcp"}]),
            serde_json::json!([{"name": "neither"}]),
            serde_json::json!([{"name": "ftp", "url": "ftp://h"}]),
        ] {
            let requests: Vec<McpServerRequest> = serde_json::from_value(bad.clone()).unwrap();
            let error = resolve_servers(&requests, &named).unwrap_err();
            assert_eq!(error.code(), ErrorCode::InvalidRequest, "{bad}");
        }
    }

    #[test]
    fn the_same_server_with_another_env_is_another_key() {
        let config = |token: &str| McpServerConfig {
            command: Some("srv".into()),
            env: BTreeMap::from([("TOKEN".into(), token.into())]),
            ..Default::default()
        };
        let a = spec_of("s", &config("a")).unwrap();
        let mut a_later = spec_of("s", &config("a")).unwrap();
        a_later.idle_timeout_secs = Some(1);
        assert_eq!(a.key(), a_later.key(), "timeouts do not split the pool");
        assert_ne!(a.key(), spec_of("s", &config("b")).unwrap().key());
        assert_ne!(a.key(), spec_of("t", &config("a")).unwrap().key());
    }
}
