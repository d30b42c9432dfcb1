//! Messages to a session's inbox, from a caller or another session (of this deputy or another).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Method, RestInput, RestRoute, Spec, TypeSchema};
use crate::error::ErrorCode::{InvalidRequest, PolicyDenied, SessionInboxFull, SessionNotFound, SessionStoreError};
use crate::ids::MessageId;
use crate::ids::SessionId;
use crate::model::inbox::SendResult;
use crate::session::{RemoteSender, SendRequest};

operations! {
    /// The inbox's operation.
    pub enum Inbox {
        Send => SEND, |service, params: SessionSendParams| {
            let (id, request) = params.into_request();
            service.send(&id, request).await
        },
    }
}

static SEND: Spec = Spec {
    tool: "session_send",
    method: "session/send",
    read_only: false,
    mcp_tool: true,
    not_for_models: &[],
    description: "Send a message to a session's inbox without waiting; the agent reads it at its next step or \
             turn.",
    params: TypeSchema::params::<SessionSendParams>(),
    result: TypeSchema::result::<SendResult>(),
    rest: RestRoute {
        method: Method::Post,
        path: "/v1/sessions/{id}/inbox",
        input: RestInput::Body,
        operation_id: "sendMessage",
        summary: "Send a message to a session's inbox",
        description: Some(
            "Never waits for the session: the message is delivered at its next boundary (between two steps of a \
             running turn, or before the next turn's prompt). An idle host-mode session starts a turn for it \
             (`delivered: \"started_turn\"`). `SESSION_INBOX_FULL` (429) when 256 messages already wait.",
        ),
        status: 202,
        answer: "The message was taken in.",
        errors: &[InvalidRequest, SessionNotFound, SessionInboxFull, SessionStoreError, PolicyDenied],
    },
};

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionSendParams {
    /// The receiving session: its id, or its name with `peer_group`.
    pub session_id: SessionId,
    /// The message (at most 64 KiB).
    pub message: String,
    /// The id of the message this one answers.
    #[serde(default)]
    pub in_reply_to: Option<MessageId>,
    /// Find `session_id` by name in this peer group.
    #[serde(default)]
    pub peer_group: Option<String>,
    /// Relay hops (deputy to deputy).
    #[serde(default)]
    pub hops: Option<u32>,
    /// Another deputy's sending session (relays).
    #[serde(default)]
    pub sender: Option<RemoteSenderParams>,
}

impl SessionSendParams {
    pub fn into_request(self) -> (SessionId, SendRequest) {
        let request = SendRequest {
            body: self.message,
            in_reply_to: self.in_reply_to,
            peer_group: self.peer_group,
            hops: self.hops.unwrap_or(0),
            sender: self.sender.map(|sender| RemoteSender { session_id: sender.session_id, name: sender.name }),
        };
        (self.session_id, request)
    }
}

/// A session of another deputy, as it names itself.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoteSenderParams {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}
