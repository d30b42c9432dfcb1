//! What happens during a turn, as a stream of events any surface can render.
//!
//! The loop emits them into an optional per-turn channel supplied by the caller; nothing in
//! the loop waits on a consumer, so a slow or absent renderer never slows a turn.

use schemars::JsonSchema;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::llm::Usage;
use crate::model::StopReason;

/// Serializable (and described by a JSON Schema) because REST streams it to clients as is.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    TurnStarted {
        turn: u64,
    },
    /// Assistant text as it streams in.
    TextDelta {
        text: String,
    },
    /// The model asked for a tool; it runs next.
    ToolCallRequested {
        id: String,
        name: String,
        input: serde_json::Value,
    },
    /// A tool finished; `content` is what the model will see.
    ToolResult {
        id: String,
        name: String,
        content: String,
        is_error: bool,
    },
    /// Usage of one model response.
    Usage {
        usage: Usage,
    },
    /// Compaction began; `reason` is `threshold`, `overflow` or `manual`.
    CompactionStarted {
        reason: String,
        estimated_tokens: u64,
    },
    /// Old tool results were replaced by placeholders (stage 1).
    Pruned {
        results: u64,
        tokens_freed: u64,
    },
    /// The history was rebuilt around a summary (or pruning alone was enough).
    CompactionCompleted {
        tokens_before: u64,
        tokens_after: u64,
        summarized: bool,
    },
    /// The summary call failed; the session goes on with its history as it was.
    CompactionFailed {
        error: String,
    },
    TurnCompleted {
        turn: u64,
        stop_reason: StopReason,
    },
    TurnCancelled {
        turn: u64,
    },
    TurnFailed {
        turn: u64,
        error: String,
    },
}

/// The sending half of a turn's event channel. Unbounded so the loop never blocks; the
/// consumer owns the receiver and drops it when it stops caring.
pub type EventSender = mpsc::UnboundedSender<AgentEvent>;

/// Where the loop sends its events: nowhere, or one caller's channel.
#[derive(Debug, Clone, Default)]
pub struct EventSink(Option<EventSender>);

impl EventSink {
    pub fn new(sender: Option<EventSender>) -> Self {
        Self(sender)
    }

    pub fn emit(&self, event: AgentEvent) {
        if let Some(sender) = &self.0 {
            // A dropped receiver means the caller stopped listening; the turn goes on.
            let _ = sender.send(event);
        }
    }
}
