//! How a session is shown: `session_read`'s view (state and billing, kept apart) and
//! `session_list`'s summaries.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::budget::Budget;
use super::inbox::{InboxMessage, InboxView};
use super::lineage::{ChildView, Escalation, Lineage};
use super::pending::PendingCall;
use super::result::RunResult;
use crate::ids::SessionId;
use crate::llm::Usage;
use crate::llm::pricing::Usd;

/// What a session is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Idle,
    Running,
    /// Stopped by `session_archive`; its history stays readable (with a session store).
    Archived,
}

impl SessionStatus {
    /// The name it has on every wire (its serde name), for text that shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Running => "running",
            Self::Archived => "archived",
        }
    }
}

/// A session as `session_read` shows it: conversation state and billing, kept apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionView {
    pub session_id: SessionId,
    pub state: SessionState,
    pub billing: Billing,
}

/// Where a session stands: its status, model, place in its delegation tree, inbox, held calls
/// and context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionState {
    pub status: SessionStatus,
    /// `provider:model`.
    pub model: String,
    /// The start of the first prompt, to recognise the session in a list.
    pub title: String,
    /// The subject of the caller that created the session (`local` for stdio and the command
    /// line, and for sessions stored before owners were recorded); only it, and callers with
    /// the scope `sessions:all`, see the session.
    #[serde(default = "local_owner")]
    pub owner: String,
    pub labels: BTreeMap<String, String>,
    /// Host mode: mail that arrives while the session is idle starts a turn by itself.
    pub host_mode: bool,
    /// The session's name among its peers (`send_message {to}` and `list_peers` use it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The sessions that see each other as peers share this group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_group: Option<String>,
    /// Where the session sits in its delegation tree: `parent_id`, `root_id`, `depth`, `origin`.
    #[serde(flatten)]
    pub lineage: Lineage,
    /// Its children (delegated sessions), newest first, at most 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildView>,
    /// Sessions below this one whose tool calls wait for a human (answer each with
    /// `session_turn` on that session).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalations: Vec<Escalation>,
    /// Messages waiting for delivery.
    #[serde(default)]
    pub inbox: InboxView,
    /// Messages that went through more than `max_hops` agents: kept here, never delivered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inbox_parked: Vec<InboxMessage>,
    /// Turns finished so far.
    pub turns: u64,
    /// Number of the turn in flight, while one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_turn: Option<u64>,
    /// Messages in the history.
    pub message_count: usize,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The result of the last finished turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn: Option<std::sync::Arc<RunResult>>,
    /// Tool calls waiting for the caller (the session is idle, but its next `session_turn`
    /// must answer them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingCall>,
    /// How full the model's context is, and how often it was compacted.
    pub context: ContextView,
    /// The project instruction files (`AGENTS.md`, else `CLAUDE.md`) the last turn gave the
    /// model, root first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub project_instructions: Vec<InstructionFile>,
    /// The named agent (profile) the session was created from: its name and file version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<super::AgentRef>,
    /// The session and turn this session was forked from (`session_fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<super::ForkOrigin>,
    /// Set when this session's shell and stdio MCP servers run outside the sandbox although
    /// it is on (`[sandbox] mode = "best_effort"` on a kernel without Landlock): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unconfined: Option<String>,
}

/// A project instruction file a session's prompt carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InstructionFile {
    /// Relative to the repository's root (the workspace where there is no repository).
    pub path: String,
    /// The file's size (at most 32 KiB of all files reach the model).
    pub bytes: u64,
}

/// The size of a session's history as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ContextView {
    pub context_window: u64,
    /// Compaction starts when the history reaches this many tokens.
    pub threshold_tokens: u64,
    /// Prompt tokens of the last model call, as the provider reported them.
    pub last_input_tokens: u64,
    /// The last reported figures plus an estimate of everything added since.
    pub estimated_history_tokens: u64,
    pub compactions: u64,
    /// Bumped each time compaction replaced the history.
    pub history_epoch: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Billing {
    /// Tokens over every model call of the session.
    pub usage: Usage,
    pub total_tokens: u64,
    /// What the session cost in US dollars: its own model calls at its model's price, plus
    /// what its children cost (`delegated_cost_usd`). `null` where a price is unknown (its
    /// model's, or a child's): never guessed.
    #[serde(default)]
    pub cost_usd: Option<Usd>,
    pub tool_calls: u64,
    /// Time spent running turns, in milliseconds.
    pub active_ms: u64,
    /// Tokens its children used, charged to this session as their results arrived.
    #[serde(default)]
    pub delegated_tokens: u64,
    #[serde(default)]
    pub delegated_tool_calls: u64,
    /// Tokens and tool calls held for children still working (refunded, minus what they use,
    /// when their results arrive).
    #[serde(default)]
    pub reserved_tokens: u64,
    #[serde(default)]
    pub reserved_tool_calls: u64,
    /// What its children cost, charged as their results arrived (included in `cost_usd`);
    /// `null` once a child without a known price reported.
    #[serde(default)]
    pub delegated_cost_usd: Option<Usd>,
    /// Dollars held for children still working, where the session has a cost limit.
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub reserved_cost_usd: Usd,
    /// The session's limits (absent fields are unlimited).
    pub budget: Budget,
    pub remaining: BudgetRemaining,
}

/// What is left of each limited budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BudgetRemaining {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// US dollars, where the budget has `max_cost_usd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<Usd>,
}

/// One line of `session_list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionSummary {
    pub session_id: SessionId,
    pub status: SessionStatus,
    pub model: String,
    pub title: String,
    /// The subject that created the session.
    #[serde(default = "local_owner")]
    pub owner: String,
    pub labels: BTreeMap<String, String>,
    pub turns: u64,
    /// What the session cost so far in US dollars, its children's included (as
    /// `billing.cost_usd`); `null` where a price is unknown.
    #[serde(default)]
    pub cost_usd: Option<Usd>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Host mode: an idle host session waits for mail and answers it on its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_mode: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The session that delegated this one, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<SessionId>,
    /// 0 for a caller's session, 1 for its children, …
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
}

fn is_zero(depth: &u32) -> bool {
    *depth == 0
}

/// The owner of sessions recorded before owners were: the local user's.
pub fn local_owner() -> String {
    crate::caller::LOCAL_SUBJECT.to_owned()
}

impl From<&SessionView> for SessionSummary {
    fn from(view: &SessionView) -> Self {
        let state = &view.state;
        Self {
            session_id: view.session_id.clone(),
            status: state.status,
            model: state.model.clone(),
            title: state.title.clone(),
            owner: state.owner.clone(),
            labels: state.labels.clone(),
            turns: state.turns,
            cost_usd: view.billing.cost_usd,
            created_at: state.created_at,
            updated_at: state.updated_at,
            host_mode: state.host_mode,
            name: state.name.clone(),
            parent_id: state.lineage.parent_id.clone(),
            depth: state.lineage.depth,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionList {
    /// Newest first (by last update).
    pub sessions: Vec<SessionSummary>,
    /// All the sessions the list shows (its filters applied), not only this page.
    pub total: usize,
    /// Pass as `cursor` for the page after this one; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

impl SessionSummary {
    /// Where the session stands in every list: newest update first, then by id (descending),
    /// at the millisecond resolution the store indexes.
    pub fn list_position(&self) -> ListPosition {
        ListPosition { updated_ms: updated_ms(self.updated_at), session_id: self.session_id.clone() }
    }
}

/// A place in the order of `session_list`, and the opaque `cursor` that names it: the page
/// after a cursor holds the sessions that come after that place. Keyset paging costs the same
/// at any depth, where an offset makes the store walk every session before the page.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListPosition {
    pub updated_ms: u64,
    pub session_id: SessionId,
}

impl ListPosition {
    const PREFIX: &'static str = "c1.";

    /// The cursor string; callers pass it back unchanged and never parse it.
    pub fn cursor(&self) -> String {
        format!("{}{}.{}", Self::PREFIX, self.updated_ms, self.session_id)
    }

    /// The position a cursor names, or `None` if the string is not a cursor of this server.
    pub fn from_cursor(cursor: &str) -> Option<Self> {
        let (updated_ms, session_id) = cursor.strip_prefix(Self::PREFIX)?.split_once('.')?;
        if session_id.is_empty() {
            return None;
        }
        Some(Self { updated_ms: updated_ms.parse().ok()?, session_id: SessionId::from_string(session_id) })
    }

    /// Whether a session at `other` comes after this place in the list (newest first, so:
    /// updated earlier, or at the same millisecond with a smaller id).
    pub fn is_before(&self, other: &ListPosition) -> bool {
        other < self
    }
}

/// The millisecond a session was last updated, as lists order and the store indexes it.
pub fn updated_ms(at: DateTime<Utc>) -> u64 {
    u64::try_from(at.timestamp_millis()).unwrap_or(0)
}
