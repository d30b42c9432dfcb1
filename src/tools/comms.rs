//! The agent's side of comms: `send_message` and `list_peers`.
//!
//! Both tools only know their own session's id; what a name means, who may be reached and how
//! mail is delivered is decided by the [`PeerDirectory`] (the session service, a layer above,
//! which implements it), reached through the session's [`SessionLink`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::link::{SessionLink, hub};
use super::{ToolOutput, TypedTool};
use crate::ids::SessionId;

/// A message an agent sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The sending session.
    pub from: SessionId,
    /// A peer's name, a session id, or `PEER:NAME` for a session on another deputy.
    pub to: String,
    pub body: String,
    pub in_reply_to: Option<String>,
    /// Hops of the mail the sender is handling, plus one.
    pub hops: u32,
}

/// What the receiving side said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Sent {
    pub message_id: String,
    /// `queued`, `started_turn` or `parked`.
    pub delivered: String,
}

/// One peer as `list_peers` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PeerInfo {
    pub name: String,
    pub session_id: SessionId,
    pub title: String,
    /// `idle`, `running` or `archived`.
    pub status: String,
    pub host_mode: bool,
}

/// Where the comms tools send and look peers up.
pub trait PeerDirectory: Send + Sync {
    /// Delivers a message; the error is the text the model sees.
    fn send(&self, message: Outgoing) -> BoxFuture<'_, Result<Sent, String>>;

    /// The other named sessions of `of`'s peer group.
    fn peers(&self, of: SessionId) -> BoxFuture<'_, Result<Vec<PeerInfo>, String>>;
}

/// `send_message`: never waits for an answer; replies arrive in the inbox.
pub struct SendMessage {
    session: SessionId,
    link: SessionLink,
    /// The hops of the mail the running turn handles (see `agent::inbox::Mailbox`).
    handling_hops: Arc<AtomicU32>,
}

impl SendMessage {
    pub const NAME: &'static str = "send_message";

    pub fn new(session: SessionId, link: SessionLink, handling_hops: Arc<AtomicU32>) -> Self {
        Self { session, link, handling_hops }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessageArgs {
    /// The recipient: a peer's name (see list_peers), a session id, `parent` (the session that
    /// delegated to you), or PEER:NAME for a session on another deputy server configured as PEER.
    to: String,
    /// The message.
    body: String,
    /// The id of the message this one answers, if any.
    in_reply_to: Option<String>,
}

impl TypedTool for SendMessage {
    type Args = SendMessageArgs;
    const NAME: &'static str = Self::NAME;

    fn description(&self) -> String {
        "Send a message to another agent session (a peer). Returns at once with the message id; \
         the peer's answer, if any, arrives later as a message in your conversation."
            .into()
    }

    async fn run(&self, args: SendMessageArgs, _cancel: CancellationToken) -> ToolOutput {
        let directory = match hub(&self.link) {
            Ok(directory) => directory,
            Err(message) => return ToolOutput::error(message),
        };
        let message = Outgoing {
            from: self.session.clone(),
            to: args.to,
            body: args.body,
            in_reply_to: args.in_reply_to,
            hops: self.handling_hops.load(Ordering::Acquire).saturating_add(1),
        };
        match directory.send(message).await {
            Ok(sent) => ToolOutput::ok(serde_json::to_string(&sent).unwrap_or_default()),
            Err(message) => ToolOutput::error(message),
        }
    }
}

/// `list_peers`: the named sessions this one can message.
pub struct ListPeers {
    session: SessionId,
    link: SessionLink,
}

impl ListPeers {
    pub const NAME: &'static str = "list_peers";

    pub fn new(session: SessionId, link: SessionLink) -> Self {
        Self { session, link }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListPeersArgs {}

impl TypedTool for ListPeers {
    type Args = ListPeersArgs;
    const NAME: &'static str = Self::NAME;

    fn description(&self) -> String {
        "List the other agent sessions you can send messages to: name, session id, title, status \
         and whether they run in host mode (answer messages on their own)."
            .into()
    }

    async fn run(&self, _args: ListPeersArgs, _cancel: CancellationToken) -> ToolOutput {
        let directory = match hub(&self.link) {
            Ok(directory) => directory,
            Err(message) => return ToolOutput::error(message),
        };
        match directory.peers(self.session.clone()).await {
            Ok(peers) => ToolOutput::ok(serde_json::to_string(&peers).unwrap_or_default()),
            Err(message) => ToolOutput::error(message),
        }
    }
}
