//! Tool calls held for the caller, as stored and shown: the open step of a session and the
//! caller's answers to it.
//!
//! The rules that settle a held step live with the agent loop (`crate::agent::pending`); these
//! are the values the session record persists and the surfaces exchange.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a held call waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PendingKind {
    /// A callback tool: answer with `tool_results`.
    Callback,
    /// A call needing approval: answer with `approvals`.
    Approval,
}

/// One call of an open step, as persisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepCall {
    pub tool_use_id: String,
    pub name: String,
    pub arguments: serde_json::Value,
    pub state: CallState,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CallState {
    /// Ran (or was refused); the output waits for the rest of the step.
    Done {
        content: String,
        is_error: bool,
    },
    Waiting {
        kind: PendingKind,
    },
}

/// A model step whose tool calls are not all answered yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingStep {
    pub calls: Vec<StepCall>,
    /// When the calls were held: the start of the approval timeout.
    pub since: DateTime<Utc>,
}

/// A held call as callers see it (`pending` of a turn's result and of `session_read`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PendingCall {
    pub tool_use_id: String,
    pub name: String,
    pub arguments: serde_json::Value,
    pub kind: PendingKind,
    /// For approvals under `approval_timeout_ms`: from then on, the next `session_turn`
    /// denies it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

impl PendingStep {
    /// The calls still waiting, in call order.
    pub fn waiting(&self, approval_timeout_ms: Option<u64>) -> Vec<PendingCall> {
        let expires_at = approval_timeout_ms
            .and_then(|ms| i64::try_from(ms).ok())
            .and_then(|ms| self.since.checked_add_signed(chrono::Duration::milliseconds(ms)));
        self.calls
            .iter()
            .filter_map(|call| match call.state {
                CallState::Waiting { kind } => Some(PendingCall {
                    tool_use_id: call.tool_use_id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                    kind,
                    expires_at: if kind == PendingKind::Approval { expires_at } else { None },
                }),
                CallState::Done { .. } => None,
            })
            .collect()
    }
}

/// The caller's result for a callback call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResultAnswer {
    pub tool_use_id: String,
    /// What the model sees as the tool's output.
    pub content: String,
    /// The call failed; the model sees an error result.
    #[serde(default)]
    pub is_error: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Deny,
}

/// The caller's decision on a call waiting for approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAnswer {
    pub tool_use_id: String,
    pub decision: Decision,
}
