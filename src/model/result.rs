//! What session operations answer: a turn's result and the small results of the others.
//!
//! These are also the structured output of deputy's MCP tools, REST and JSON-RPC, so they derive
//! `Serialize` + `JsonSchema` and their field names are the wire contract: snake_case, the same
//! on every surface.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::pending::PendingCall;
use super::stop_reason::StopReason;
use crate::error::ErrorKind;
use crate::ids::SessionId;
use crate::llm::pricing::Usd;
use crate::llm::{Message, Usage};

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

impl TurnStatus {
    /// The name it has on every wire (its serde name), for text that shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Running => "running",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
            Self::PendingToolCalls => "pending_tool_calls",
        }
    }
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
    /// The model's reasoning (thinking) in the response that gave the answer, where the
    /// provider shows it (redacted thinking has no text); never part of `text`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
    /// `end_turn`, `max_tokens`, `budget_exhausted`, `cancelled`, `error`, … (absent while running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// Tokens this turn used, and what they cost.
    pub usage: TurnUsage,
    /// Tool calls this turn ran.
    pub tool_calls: u64,
    /// Why the turn failed, when `status` is `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How the turn failed, when `status` is `failed`: `rate_limited`, `overloaded`,
    /// `context_overflow`, `auth`, … (the `error_kind` table of the docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// The tool calls waiting for the caller, when `status` is `pending_tool_calls`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingCall>,
    /// With an `output_schema`: the final answer, parsed and valid against the schema (`text`
    /// then holds the same value as JSON text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<serde_json::Value>,
    /// With an `output_schema` and `stop_reason: "structured_output_invalid"` (or a budget that
    /// ran out during the retries): the validation errors of the last answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub structured_output_errors: Vec<String>,
}

impl RunResult {
    pub fn running(session_id: SessionId, turn: u64) -> Self {
        Self {
            session_id,
            status: TurnStatus::Running,
            turn,
            text: String::new(),
            reasoning: String::new(),
            stop_reason: None,
            usage: TurnUsage::default(),
            tool_calls: 0,
            error: None,
            error_kind: None,
            pending: Vec::new(),
            structured_output: None,
            structured_output_errors: Vec::new(),
        }
    }
}

/// A turn's tokens (`input_tokens`, `output_tokens`, the cache counts) and what they cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TurnUsage {
    #[serde(flatten)]
    pub tokens: Usage,
    /// US dollars, at the price of the session's model (the config file's, else the list
    /// price); `null` where deputy knows no price for the model: unknown, never guessed.
    #[serde(default)]
    pub cost_usd: Option<Usd>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InterruptResult {
    pub session_id: SessionId,
    /// Whether this session's own turn was running and is now cancelled.
    pub interrupted: bool,
    /// Its descendants (delegated sessions) whose running turns were cancelled with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cascaded: Vec<SessionId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArchiveResult {
    pub session_id: SessionId,
    pub archived: bool,
    /// Its descendants, archived before it (leaves first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cascaded: Vec<SessionId>,
}

/// A session's whole conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
