//! Peers on other deputy servers (`[peers.NAME]` in the config file): `send_message {to:
//! "NAME:reviewer"}` calls that deputy's own `session_send` tool over MCP streamable HTTP.
//!
//! No transport or crypto of deputy's own: the connection is an ordinary MCP client from the
//! shared [`McpFactory`] pool (so it is reused across messages and sessions), and identity is
//! the operator's per-peer bearer token. Delivery is at most once: a failed call is an error
//! the model sees, never retried behind its back.

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::caller::LOCAL_SUBJECT;
use crate::error::SessionError;
use crate::secrets::Secret;
use crate::tools::comms::{Outgoing, Sent};
use crate::tools::mcp::{McpFactory, McpServerSpec, McpTransport};

/// `[peers.NAME]`: another deputy's MCP endpoint and the environment variable holding the
/// bearer token it gave this server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeerServerConfig {
    /// The peer's streamable HTTP endpoint, e.g. `https://host:8080/mcp`.
    pub url: String,
    /// Environment variable with the token (sent as `Authorization: Bearer …`).
    #[serde(default)]
    pub token_env: Option<String>,
    /// The subjects whose sessions may send through this peer (security review G1: the token
    /// is the operator's, not every tenant's). Default: `["local"]`, the user's own sessions
    /// (stdio, the background server, `--token`).
    #[serde(default)]
    pub owners: Option<Vec<String>>,
}

/// The configured peer servers.
#[derive(Debug, Clone, Default)]
pub struct RemotePeers {
    servers: BTreeMap<String, PeerServer>,
    pool: Arc<McpFactory>,
}

/// One peer server: how to reach it, and whose sessions may.
#[derive(Debug, Clone)]
struct PeerServer {
    spec: McpServerSpec,
    owners: Vec<String>,
}

/// Longest a call to a peer's `session_send` may take.
const SEND_TIMEOUT_SECS: u64 = 30;

impl RemotePeers {
    /// Reads each peer's token from its environment variable now, so a missing one fails at
    /// start rather than at the first message.
    pub fn new(
        configs: &BTreeMap<String, PeerServerConfig>,
        pool: Arc<McpFactory>,
        variable: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut servers = BTreeMap::new();
        for (name, config) in configs {
            if name.is_empty() || name.contains(':') {
                return Err(format!("[peers.{name}]: a peer's name is not empty and has no ':'"));
            }
            let mut headers = BTreeMap::new();
            if let Some(variable_name) = &config.token_env {
                let token = variable(variable_name).ok_or_else(|| {
                    format!("[peers.{name}] token_env: the environment variable {variable_name} is not set")
                })?;
                headers.insert("Authorization".to_owned(), Secret::new(format!("Bearer {token}")));
            }
            let spec = McpServerSpec {
                name: format!("peer-{name}"),
                transport: McpTransport::Http { url: config.url.clone(), headers },
                idle_timeout_secs: None,
                call_timeout_secs: Some(SEND_TIMEOUT_SECS),
                unconfined: false,
            };
            let owners = config.owners.clone().unwrap_or_else(|| vec![LOCAL_SUBJECT.to_owned()]);
            servers.insert(name.clone(), PeerServer { spec, owners });
        }
        Ok(Self { servers, pool })
    }

    /// Sends `outgoing` to session `target` (a name in the peer group `group` there, or a
    /// session id) of peer server `peer`. `sender_name` is the sending session's name, `owner`
    /// its owner: `POLICY_DENIED` unless the peer's `owners` name it (G1); `INVALID_REQUEST`
    /// for an unknown peer or a failed send.
    pub async fn send(
        &self,
        peer: &str,
        target: &str,
        group: &str,
        outgoing: &Outgoing,
        sender_name: Option<&str>,
        owner: &str,
    ) -> Result<Sent, SessionError> {
        let Some(server) = self.servers.get(peer) else {
            return Err(SessionError::invalid(format!("no peer server {peer:?} is configured")));
        };
        if !server.owners.iter().any(|allowed| allowed == owner) {
            tracing::info!(target: "deputy::audit", subject = %owner, what = "policy_refusal", refused = "peer", peer, "refused: the peer server is not the owner's");
            return Err(SessionError::policy_denied(format!(
                "peer server {peer:?} may not be used by the sessions of {owner:?} (the operator names the \
                 subjects who may in [peers.{peer}] owners)"
            )));
        }
        let spec = &server.spec;
        let mut arguments = serde_json::json!({
            "session_id": target,
            "peer_group": group,
            "message": outgoing.body,
            "hops": outgoing.hops,
            "sender": { "session_id": outgoing.from, "name": sender_name },
        });
        if let Some(original) = &outgoing.in_reply_to {
            arguments["in_reply_to"] = serde_json::Value::String(original.clone());
        }
        let serde_json::Value::Object(arguments) = arguments else { unreachable!("a JSON object literal") };
        let connection = self
            .pool
            .acquire(spec)
            .await
            .map_err(|error| invalid(format!("peer {peer} cannot be reached: {error}")))?;
        let result = connection
            .call("session_send", Some(arguments))
            .await
            .map_err(|error| invalid(format!("peer {peer}: session_send failed: {error}")))?;
        let text: String =
            result.content.iter().filter_map(|content| content.as_text()).map(|text| text.text.as_str()).collect();
        if result.is_error == Some(true) {
            return Err(invalid(format!("peer {peer} refused the message: {text}")));
        }
        let answer = match result.structured_content.clone() {
            Some(value) => serde_json::from_value::<Sent>(value),
            None => serde_json::from_str::<Sent>(&text),
        };
        answer.map_err(|error| invalid(format!("peer {peer} answered what is not a session_send result ({error})")))
    }
}

fn invalid(message: String) -> SessionError {
    SessionError::invalid(message)
}
