//! What a client and the background server say before MCP starts: one JSON line each way.
//!
//! The client's first line is a [`Hello`]: the protocol number and what it wants, which is to
//! attach (with its [`ClientContext`]), to hear the server's status, or to stop it. The server
//! answers one [`Answer`] line. After an accepted attach, the socket carries newline-delimited
//! MCP JSON-RPC in both directions, exactly what the client reads from its stdin and writes to
//! its stdout; after an accepted `rpc`, deputy's own JSON-RPC methods, one message per line.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Raised when a frame's meaning changes; a server answers a client of another protocol with an
/// error that says how to replace the server.
pub const PROTOCOL: u32 = 1;

/// The longest first line accepted: a context with a generous environment fits many times over.
pub const MAX_FRAME_BYTES: usize = 1 << 20;

#[derive(Debug, Serialize, Deserialize)]
pub struct Hello {
    /// [`PROTOCOL`] of the sender.
    pub deputy: u32,
    /// The sender's deputy version, for the log and for `status`.
    pub version: String,
    #[serde(flatten)]
    pub request: Request,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Request {
    /// Serve MCP to this client, with its context.
    Attach(ClientContext),
    /// Serve deputy's JSON-RPC (the methods of `POST /rpc`, one message per line, as
    /// `serve --rpc`) to this client, with its context: how a command (`deputy sessions`,
    /// `turn`, `project`, …) reaches a store this server owns. Its turns are interrupted when
    /// the connection closes (the command was stopped).
    Rpc(ClientContext),
    /// Listen on HTTP too (`serve --http` on this server's store), with this client's context
    /// and flags, for as long as this connection stays open.
    Http { context: ClientContext, flags: crate::surfaces::http::HttpFlags },
    /// Answer [`ServerStatus`] and close.
    Status,
    /// Drain and exit; the connection closes when the server has.
    Stop,
}

/// What a client brings: everything that makes two in-process servers started in two projects
/// differ, apart from the store they now share.
#[derive(Clone, Serialize, Deserialize)]
pub struct ClientContext {
    /// `--workspace`, else the client's working directory; absolute.
    pub workspace: PathBuf,
    /// `--model` / `DEPUTY_MODEL`.
    pub model: Option<String>,
    /// The config file the client would read (`--config`, or the default file if it exists);
    /// absolute.
    pub config: Option<PathBuf>,
    /// The provider variables the client was started with: credentials for the turns it
    /// starts; and where its configuration is (`XDG_CONFIG_HOME`, `HOME`). No others.
    pub env: BTreeMap<String, String>,
    /// Attach: the client can hand its stdin and stdout over rather than relay them
    /// (`stdio_handover`); it does when the answer says [`Answer::take_stdio`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hand_over_stdio: bool,
}

/// Never prints the environment's values: they are credentials.
impl std::fmt::Debug for ClientContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientContext")
            .field("workspace", &self.workspace)
            .field("model", &self.model)
            .field("config", &self.config)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Answer {
    pub ok: bool,
    /// Why the request was refused; the client prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ServerStatus>,
    /// An accepted attach: send stdin and stdout now, the server serves MCP over them. A server
    /// that predates the handover never says so, and its clients relay.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub take_stdio: bool,
}

impl Answer {
    pub fn ok() -> Self {
        Self { ok: true, ..Self::default() }
    }

    pub fn refused(error: impl Into<String>) -> Self {
        Self { ok: false, error: Some(error.into()), ..Self::default() }
    }
}

/// `deputy background status`, as the server sees itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerStatus {
    pub pid: u32,
    pub version: String,
    pub store: PathBuf,
    pub log: PathBuf,
    /// Connections open right now (attached clients, and this status request).
    pub connections: usize,
    pub running_turns: usize,
    /// Where it serves HTTP (`http://ADDR`), if it does (`serve --http`); the inspector is at
    /// `/ui` there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
}

/// One frame as a JSON line.
pub fn encode<T: Serialize>(frame: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(frame).unwrap_or_default();
    line.push(b'\n');
    line
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_is_one_flat_line_and_its_debug_hides_the_credentials() {
        let context = ClientContext {
            workspace: "/work".into(),
            model: Some("anthropic:claude-test".into()),
            config: None,
            env: BTreeMap::from([("ANTHROPIC_API_KEY".to_owned(), "sk-secret".to_owned())]),
            hand_over_stdio: false,
        };
        let hello = Hello { deputy: PROTOCOL, version: "0.1.0".into(), request: Request::Attach(context) };
        let line = encode(&hello);
        assert_eq!(line.iter().filter(|byte| **byte == b'\n').count(), 1);
        let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!((value["kind"].as_str(), value["deputy"].as_u64()), (Some("attach"), Some(1)));
        assert_eq!(value["env"]["ANTHROPIC_API_KEY"], "sk-secret");
        let back: Hello = serde_json::from_slice(&line).unwrap();
        assert!(!format!("{back:?}").contains("sk-secret"), "{back:?}");
        let stop: Hello = serde_json::from_str(r#"{"deputy": 1, "version": "x", "kind": "stop"}"#).unwrap();
        assert!(matches!(stop.request, Request::Stop));
    }
}
