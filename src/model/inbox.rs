//! Messages between sessions and their callers (host mode and comms): what an inbox holds, who
//! sent it, and how `session_read` shows the inbox.
//!
//! A message is plain text for the model; delivery renders it as a text block on a user
//! message ([`InboxMessage::render`]), never as a fake tool result, so every provider accepts
//! the history it lands in.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::{MessageId, SessionId};

/// Waiting messages a session holds at most; one more is refused with `SESSION_INBOX_FULL`.
pub const DEFAULT_INBOX_CAPACITY: usize = 256;
/// How many times a message may have been passed on (a reply to a reply …) before it is parked
/// instead of delivered: the guard against two agents answering each other for ever.
pub const DEFAULT_MAX_HOPS: u32 = 8;
/// Turns a host-mode session starts on its own between two turns of its caller.
pub const DEFAULT_MAX_AUTO_TURNS: u32 = 50;
/// Parked messages kept for `session_read`; older ones are dropped.
pub const MAX_PARKED: usize = 16;
/// Bytes of one message's body at most.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Bytes of waiting mail the live sessions of one owner hold together, by default
/// (`[inbox] max_waiting_bytes_per_owner`; security review 2, G12).
pub const DEFAULT_MAX_WAITING_BYTES_PER_OWNER: usize = 64 * 1024 * 1024;

/// One message in a session's inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InboxMessage {
    pub id: MessageId,
    pub from: MessageSender,
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<MessageId>,
    /// 0 for a message from a caller; a message an agent sends while handling a message carries
    /// that message's hops + 1.
    #[serde(default)]
    pub hops: u32,
    pub at: DateTime<Utc>,
    /// On a delegated child's notice to its parent: what the child used, which the parent is
    /// charged (and the rest of its reservation refunded) when it takes the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<super::lineage::ChildUsage>,
}

/// Who sent a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MessageSender {
    /// A caller of deputy's surfaces (`session_send`), by its subject.
    Caller { subject: String },
    /// Another session of this server (its `send_message` tool).
    Session {
        session_id: SessionId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// A session of another deputy server, as that server's token (`peer`, the subject this
    /// server knows it by) says and as it names its sender.
    Remote {
        peer: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
}

impl MessageSender {
    /// How the model is told who wrote.
    fn describe(&self) -> String {
        match self {
            Self::Caller { subject } => format!("the caller ({subject})"),
            Self::Session { session_id, name: Some(name) } => format!("{name} (session {session_id})"),
            Self::Session { session_id, name: None } => format!("session {session_id}"),
            Self::Remote { peer, session_id, name } => {
                let who = name.as_deref().or(session_id.as_deref()).unwrap_or("a session");
                format!("{peer}:{who} (remote)")
            }
        }
    }
}

impl InboxMessage {
    /// The text block the model sees: who wrote, what it answers, and the body.
    pub fn render(&self) -> String {
        let reply = match &self.in_reply_to {
            Some(original) => format!(", in reply to {original}"),
            None => String::new(),
        };
        format!("[message {} from {}{reply}]\n{}", self.id, self.from.describe(), self.body)
    }

    /// A batch of messages as one text, oldest first.
    pub fn render_all(messages: &[InboxMessage]) -> String {
        messages.iter().map(InboxMessage::render).collect::<Vec<_>>().join("\n\n")
    }
}

/// How a message was taken in by `send`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// It waits in the inbox for the next step boundary or turn.
    Queued,
    /// The session is in host mode and was idle: the message started a turn.
    StartedTurn,
    /// It had passed through more than `max_hops` agents: kept for `session_read`, never
    /// delivered (it would only feed a loop).
    Parked,
}

impl Delivery {
    /// The name it has on every wire (its serde name), for text that shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::StartedTurn => "started_turn",
            Self::Parked => "parked",
        }
    }
}

/// What `send` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SendResult {
    pub session_id: SessionId,
    pub message_id: MessageId,
    pub delivered: Delivery,
}

/// The inbox as `session_read` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InboxView {
    /// Messages waiting for delivery.
    pub waiting: usize,
    /// When the oldest waiting message arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_at: Option<DateTime<Utc>>,
    /// Turns started by mail since the caller's last turn (host mode).
    #[serde(default)]
    pub auto_turns: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_are_the_wire_names() {
        for delivery in [Delivery::Queued, Delivery::StartedTurn, Delivery::Parked] {
            assert_eq!(serde_json::to_value(delivery).unwrap(), delivery.as_str());
        }
        use crate::model::SessionStatus;
        for status in [SessionStatus::Idle, SessionStatus::Running, SessionStatus::Archived] {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        use crate::model::TurnStatus;
        let turns = [
            TurnStatus::Completed,
            TurnStatus::Running,
            TurnStatus::Cancelled,
            TurnStatus::Failed,
            TurnStatus::PendingToolCalls,
        ];
        for status in turns {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
    }

    #[test]
    fn a_rendered_message_names_its_sender_and_what_it_answers() {
        let message = InboxMessage {
            id: MessageId::from_string("m-2"),
            from: MessageSender::Session {
                session_id: SessionId::from_string("s-1"),
                name: Some("reviewer".into()),
            },
            body: "looks good".into(),
            in_reply_to: Some(MessageId::from_string("m-1")),
            hops: 1,
            at: Utc::now(),
            report: None,
        };
        assert_eq!(message.render(), "[message m-2 from reviewer (session s-1), in reply to m-1]\nlooks good");
    }
}
