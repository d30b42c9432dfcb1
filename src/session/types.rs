//! Requests and results of [`SessionService`](super::SessionService) operations.
//!
//! The result types are also the structured output of deputy's MCP tools (and later of REST
//! and JSON-RPC), so they derive `Serialize` + `JsonSchema` and their field names are the wire
//! contract: snake_case, the same on every surface.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::agent::pending::{ApprovalAnswer, PendingCall, ToolResultAnswer};
use crate::agent::{AgentBuildConfig, Budget, EventSender, TurnEnd, TurnReport};
use crate::ids::SessionId;
use crate::llm::{Message, Usage};

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
    /// Keep the session alive for inter-agent messages after the prompt (stored; comms come later).
    pub host_mode: bool,
    pub turn: TurnOptions,
}

#[derive(Debug, Default)]
pub struct TurnRequest {
    /// May be empty when the request answers pending tool calls.
    pub prompt: String,
    /// Results of the pending callback calls.
    pub tool_results: Vec<ToolResultAnswer>,
    /// Decisions on the pending approvals.
    pub approvals: Vec<ApprovalAnswer>,
    pub options: TurnOptions,
}

#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub offset: usize,
    /// Page size; `None` means [`DEFAULT_PAGE`], and at most [`MAX_PAGE`].
    pub limit: Option<usize>,
    /// Also list archived sessions (needs the store).
    pub include_archived: bool,
}

pub const DEFAULT_PAGE: usize = 50;
pub const MAX_PAGE: usize = 1000;

/// Where a turn stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// The turn ended normally (including `stop_reason: "budget_exhausted"`).
    Completed,
    /// Still running: collect the result with `session_read` and `wait_ms`.
    Running,
    /// Interrupted by the caller; the session is ready for the next turn.
    Cancelled,
    /// The provider failed; the session is ready for the next turn.
    Failed,
    /// The turn stopped on tool calls the caller must answer (`pending`): callback results
    /// with `tool_results`, approvals with `approvals`, in the next `session_turn`.
    PendingToolCalls,
}

/// The result of a turn (or of waiting for one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunResult {
    pub session_id: SessionId,
    pub status: TurnStatus,
    /// 1-based number of the turn in its session.
    pub turn: u64,
    /// The assistant's answer (for a running turn: empty).
    pub text: String,
    /// `end_turn`, `max_tokens`, `budget_exhausted`, `cancelled`, `error`, … (absent while running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Tokens this turn used.
    pub usage: Usage,
    /// Tool calls this turn ran.
    pub tool_calls: u64,
    /// Why the turn failed, when `status` is `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The tool calls waiting for the caller, when `status` is `pending_tool_calls`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingCall>,
}

impl RunResult {
    pub fn running(session_id: SessionId, turn: u64) -> Self {
        Self {
            session_id,
            status: TurnStatus::Running,
            turn,
            text: String::new(),
            stop_reason: None,
            usage: Usage::default(),
            tool_calls: 0,
            error: None,
            pending: Vec::new(),
        }
    }

    pub fn from_report(session_id: SessionId, report: &TurnReport) -> Self {
        let (status, error) = match &report.end {
            TurnEnd::Completed { .. } | TurnEnd::BudgetExhausted(_) => (TurnStatus::Completed, None),
            TurnEnd::Cancelled => (TurnStatus::Cancelled, None),
            TurnEnd::Failed(error) => (TurnStatus::Failed, Some(error.message.clone())),
            TurnEnd::PendingToolCalls => (TurnStatus::PendingToolCalls, None),
        };
        Self {
            session_id,
            status,
            turn: report.turn,
            text: report.text.clone(),
            stop_reason: Some(report.stop_reason().to_owned()),
            usage: report.usage,
            tool_calls: report.tool_calls,
            error,
            pending: report.pending.clone(),
        }
    }
}

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InterruptResult {
    pub session_id: SessionId,
    pub interrupted: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArchiveResult {
    pub session_id: SessionId,
    pub archived: bool,
}

/// A session's whole conversation.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SessionHistory {
    pub session_id: SessionId,
    pub messages: Vec<Message>,
}

/// What `session_compact` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CompactResult {
    pub session_id: SessionId,
    /// The history was rewritten (pruned, summarized, or both).
    pub compacted: bool,
    /// A summary replaced the older turns.
    pub summarized: bool,
    /// Old tool results whose bodies were replaced by placeholders.
    pub pruned_results: u64,
    /// Estimated history tokens before and after.
    pub tokens_before: u64,
    pub tokens_after: u64,
}

/// The whole output of a tool result that entered the history capped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolOutputResult {
    pub session_id: SessionId,
    pub tool_use_id: String,
    pub content: String,
    pub bytes: u64,
}
