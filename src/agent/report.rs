//! What a turn starts from and what it ends with: its input, its running totals, how it ended
//! and the report the session turns into a result.

use super::OutputContract;
use super::pending::Resolution;
use crate::llm::pricing::Usd;
use crate::llm::{LlmError, Usage};
use crate::model::{Exhausted, PendingCall, StopReason};
use crate::telemetry::caller_trace::TraceParent;

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    /// The model finished its answer.
    Completed { stop_reason: StopReason },
    /// A budget limit ended the turn early; the history is valid.
    BudgetExhausted(Exhausted),
    /// The caller interrupted the turn.
    Cancelled,
    /// The provider failed; the history is valid and the next turn may succeed.
    Failed(LlmError),
    /// Tool calls wait for the caller (callbacks, approvals); the step stays open.
    PendingToolCalls,
    /// The turn's code panicked (a bug in deputy, a tool or a provider adapter); the history
    /// was closed as for an interrupt, and the next turn may succeed.
    Panicked(String),
}

impl TurnEnd {
    /// How the turn ended, as its telemetry span says it.
    pub fn telemetry_status(&self) -> &'static str {
        match self {
            Self::Completed { .. } => "completed",
            Self::BudgetExhausted(_) => "budget_exhausted",
            Self::Cancelled => "cancelled",
            Self::Failed(_) | Self::Panicked(_) => "failed",
            Self::PendingToolCalls => "pending",
        }
    }
}

/// The outcome of one turn, whatever way it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnReport {
    /// 1-based number of this turn in the session.
    pub turn: u64,
    /// The assistant's answer: the text of the turn's last model response that had text.
    pub text: String,
    /// The reasoning of that response, apart from its text.
    pub reasoning: String,
    /// Tokens of this turn's model calls.
    pub usage: Usage,
    /// What they cost; `None` where the session's model has no price.
    pub cost: Option<Usd>,
    /// Tool calls this turn ran.
    pub tool_calls: u64,
    pub end: TurnEnd,
    /// The calls waiting for the caller when the turn ended `PendingToolCalls`.
    pub pending: Vec<PendingCall>,
    /// With an output schema: the final answer, valid against it.
    pub structured_output: Option<serde_json::Value>,
    /// With an output schema: why the last answer was not valid (empty once one was).
    pub structured_output_errors: Vec<String>,
}

impl TurnReport {
    /// The `stop_reason` reported to callers.
    pub fn stop_reason(&self) -> StopReason {
        match &self.end {
            TurnEnd::Completed { stop_reason } => stop_reason.clone(),
            TurnEnd::BudgetExhausted(_) => StopReason::BudgetExhausted,
            TurnEnd::Cancelled => StopReason::Cancelled,
            TurnEnd::Failed(_) | TurnEnd::Panicked(_) => StopReason::Error,
            TurnEnd::PendingToolCalls => StopReason::PendingToolCalls,
        }
    }
}

/// What a turn starts from: a prompt, the caller's answers to a held step, or both.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnInput {
    /// Appended after the held step's results, if any; required when nothing is held.
    pub prompt: Option<String>,
    /// Settles every waiting call of the held step (see [`super::pending::resolve`]).
    pub resolution: Resolution,
    /// This turn's output schema, instead of the session's (structured output).
    pub output: Option<OutputContract>,
    /// The trace of the request that started the turn, which the turn's span continues.
    pub trace: Option<TraceParent>,
}

impl From<String> for TurnInput {
    fn from(prompt: String) -> Self {
        Self { prompt: Some(prompt), ..Self::default() }
    }
}

/// How a step's tool calls ended.
pub(super) enum StepOutcome {
    /// Some calls wait for the caller; the step is held in `Agent::pending`.
    Held,
    /// Every call has a result in the history; `skipped` were refused for lack of budget.
    Closed { skipped: u64 },
}

/// Running totals of one turn.
#[derive(Default)]
pub(super) struct TurnTotals {
    pub(super) usage: Usage,
    pub(super) tool_calls: u64,
    pub(super) text: String,
    pub(super) reasoning: String,
    pub(super) structured_output: Option<serde_json::Value>,
    pub(super) structured_output_errors: Vec<String>,
}
