//! Requests of [`SessionService`](super::SessionService) operations, and how long a caller waits.
//!
//! The results are plain data in [`crate::model`]: the store persists some of them, so they
//! live below both.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::agent::{AgentBuildConfig, EventSender};
use crate::ids::MessageId;
use crate::model::{ApprovalAnswer, ListPosition, ToolResultAnswer};

/// How long `session_create` / `session_turn` wait for the turn before answering `running`.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// Upper bound of any `wait_ms`: long enough for long polls, short enough that a forgotten
/// call does not hang around for ever.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// Turns a caller's `wait_ms` into a wait, defaulting and clamping it.
pub fn clamp_wait(wait_ms: Option<u64>, default: Duration) -> Duration {
    wait_ms.map(Duration::from_millis).unwrap_or(default).min(MAX_WAIT)
}

/// How the caller waits for a turn and what it wants to hear while waiting.
#[derive(Debug, Default)]
pub struct TurnOptions {
    /// Answer `running` after this long; `None` waits until the turn ends.
    pub wait: Option<Duration>,
    /// Receives the turn's events while it runs.
    pub events: Option<EventSender>,
    /// The caller's own cancellation: while the caller still waits, cancelling it interrupts
    /// the turn. Once the caller stopped waiting (`running`), it no longer affects the turn.
    pub cancel: Option<CancellationToken>,
}

impl TurnOptions {
    /// Waits up to `wait`, without events or caller cancellation.
    pub fn waiting(wait: Duration) -> Self {
        Self { wait: Some(wait), ..Self::default() }
    }
}

#[derive(Debug, Default)]
pub struct CreateSessionRequest {
    /// Everything the agent is built from.
    pub build: AgentBuildConfig,
    /// The first turn's prompt.
    pub prompt: String,
    pub labels: BTreeMap<String, String>,
    /// Host mode: once idle, mail starts a turn by itself (the comms tools come by default).
    /// Unset: the named agent's, else off.
    pub host_mode: Option<bool>,
    /// The named agent (profile) whose fields fill what `build` leaves unset.
    pub agent: Option<String>,
    /// The session's name among its peers: unique in its peer group.
    pub name: Option<String>,
    /// Sessions created with the same group (by the same owner) see each other as peers;
    /// without one, the session is a group of its own.
    pub peer_group: Option<String>,
    pub turn: TurnOptions,
}

/// A message for a session's inbox (`send`).
#[derive(Debug, Clone, Default)]
pub struct SendRequest {
    pub body: String,
    pub in_reply_to: Option<MessageId>,
    /// Look the target up by name in this peer group (of the caller's sessions); without it
    /// the target is a session id.
    pub peer_group: Option<String>,
    /// Hops the message made before (another deputy passing on an agent's message).
    pub hops: u32,
    /// The sending session as another deputy names it: the message is then recorded as a
    /// remote peer's, with the caller's subject as the peer.
    pub sender: Option<RemoteSender>,
}

/// A session of another deputy, as it names itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteSender {
    pub session_id: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Default)]
pub struct TurnRequest {
    /// May be empty when the request answers pending tool calls.
    pub prompt: String,
    /// Results of the pending callback calls.
    pub tool_results: Vec<ToolResultAnswer>,
    /// Decisions on the pending approvals.
    pub approvals: Vec<ApprovalAnswer>,
    /// This turn's output schema, instead of the session's (structured output).
    pub output_schema: Option<serde_json::Value>,
    /// Retries of an answer that does not validate (default 2); only with `output_schema`.
    pub structured_output_retries: Option<u32>,
    pub options: TurnOptions,
}

#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Start after this place (a `next_cursor` of an earlier page); `offset` then skips from there.
    pub after: Option<ListPosition>,
    pub offset: usize,
    /// Page size; `None` means [`DEFAULT_PAGE`], and at most [`MAX_PAGE`].
    pub limit: Option<usize>,
    /// Also list archived sessions (needs the store).
    pub include_archived: bool,
    /// Only the children of this session.
    pub parent_id: Option<crate::ids::SessionId>,
    /// Only the sessions of this tree (the root itself included).
    pub root_id: Option<crate::ids::SessionId>,
    /// Only this owner's sessions: any owner for a caller who reads all sessions, its own
    /// subject for any other.
    pub owner: Option<String>,
    /// Only the sessions with this status, label or words in the title.
    pub filter: crate::model::SessionFilter,
}

/// Which of a caller's memories to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryQuery {
    /// Words to search for; `None`: the newest first.
    pub query: Option<String>,
    /// Only memories older than this id (a `next_before` of an earlier page).
    pub before: Option<u64>,
    /// Page size (default 20, at most 100; a search answers at most 20).
    pub limit: Option<usize>,
}

pub const DEFAULT_PAGE: usize = 50;
pub const MAX_PAGE: usize = 1000;

/// How many sessions stay live, and for how long (hibernation). With a store, a session idle
/// for `idle_unload`, or beyond `max_live` (least recently used first), is unloaded: its actor
/// stops and it lives on in the store, rehydrated by its next turn. Without a store nothing can
/// be unloaded, so `max_live` refuses new sessions instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Unload a session after this long without a turn; zero never unloads for idleness.
    pub idle_unload: Duration,
    /// Live sessions at most (at least 1).
    pub max_live: usize,
    /// Sessions not archived that one owner (subject) may have in the store; one more is
    /// refused (security review 2, G12: the store's growth per tenant). Counted where there is
    /// a store (a walk of the owner's index per new session, so only where it is asked for:
    /// one user may well keep tens of thousands); without one, `max_live` bounds every owner
    /// together. `None`: no limit.
    pub max_open_per_owner: Option<usize>,
}

impl SessionLimits {
    pub const DEFAULT_IDLE_UNLOAD_SECS: u64 = 600;
    pub const DEFAULT_MAX_LIVE: usize = 1000;
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            idle_unload: Duration::from_secs(Self::DEFAULT_IDLE_UNLOAD_SECS),
            max_live: Self::DEFAULT_MAX_LIVE,
            max_open_per_owner: None,
        }
    }
}

/// A running turn's progress ([`super::SessionService::provisional`]): its journal events not
/// committed yet, and what changes when more are recorded, grow or are committed.
#[derive(Debug)]
pub struct Provisional {
    pub events: Vec<crate::model::StoredEvent>,
    pub activity: tokio::sync::watch::Receiver<u64>,
}
