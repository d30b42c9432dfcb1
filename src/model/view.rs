//! How a session is shown: `session_read`'s view (state and billing, kept apart) and
//! `session_list`'s summaries.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::budget::Budget;
use super::pending::PendingCall;
use super::result::RunResult;
use crate::ids::SessionId;
use crate::llm::Usage;

/// What a session is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Idle,
    Running,
    /// Stopped by `session_archive`; its history stays readable (with a session store).
    Archived,
}

/// A session as `session_read` shows it: conversation state and billing, kept apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionView {
    pub session_id: SessionId,
    pub state: SessionState,
    pub billing: Billing,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionState {
    pub status: SessionStatus,
    /// `provider:model`.
    pub model: String,
    /// The start of the first prompt, to recognise the session in a list.
    pub title: String,
    pub labels: BTreeMap<String, String>,
    /// Reserved for host mode, not built yet: as the session was created, no effect today.
    pub host_mode: bool,
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
    pub last_turn: Option<RunResult>,
    /// Tool calls waiting for the caller (the session is idle, but its next `session_turn`
    /// must answer them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingCall>,
    /// How full the model's context is, and how often it was compacted.
    pub context: ContextView,
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
    pub tool_calls: u64,
    /// Time spent running turns, in milliseconds.
    pub active_ms: u64,
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
}

/// One line of `session_list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionSummary {
    pub session_id: SessionId,
    pub status: SessionStatus,
    pub model: String,
    pub title: String,
    pub labels: BTreeMap<String, String>,
    pub turns: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<&SessionView> for SessionSummary {
    fn from(view: &SessionView) -> Self {
        let state = &view.state;
        Self {
            session_id: view.session_id.clone(),
            status: state.status,
            model: state.model.clone(),
            title: state.title.clone(),
            labels: state.labels.clone(),
            turns: state.turns,
            created_at: state.created_at,
            updated_at: state.updated_at,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionList {
    /// Newest first (by last update).
    pub sessions: Vec<SessionSummary>,
    /// All sessions, not only this page.
    pub total: usize,
}
