//! What is known about the size of a session's context, as stored and shown: the resolved
//! settings, the running token state, and the estimates both use.
//!
//! Plain data with pure arithmetic, below the agent and the store: the agent keeps it current
//! (`crate::agent::context` resolves the settings from a caller's overrides), the record
//! persists it, and views report it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::llm::{ContentBlock, Message, Usage};

/// Resolved context settings of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ContextSettings {
    pub context_window: u64,
    pub threshold_tokens: u64,
    pub min_turns_between_compactions: u64,
    pub recent_turn_budget: u64,
    pub max_summary_tokens: u32,
    pub tool_output_cap_bytes: u64,
    /// Tool results within this many tokens of the end are never pruned.
    pub prune_protect_tokens: u64,
    /// Tokens kept free for the model's answer (its `max_tokens`): a history above
    /// `context_window - output_reserve_tokens` would not fit.
    #[serde(default)]
    pub output_reserve_tokens: u64,
    /// The project's `AGENTS.md` files go with the system prompt (see
    /// `crate::agent::instructions`). Sessions stored before this setting existed get them.
    #[serde(default = "yes")]
    pub project_instructions: bool,
}

fn yes() -> bool {
    true
}

/// The settings of an unknown model with the default `max_tokens`: what a record saved before
/// these settings existed gets.
impl Default for ContextSettings {
    fn default() -> Self {
        let threshold_tokens = (DEFAULT_CONTEXT_WINDOW - 8192) * 4 / 5;
        Self {
            context_window: DEFAULT_CONTEXT_WINDOW,
            threshold_tokens,
            min_turns_between_compactions: 3,
            recent_turn_budget: (threshold_tokens / 4).min(20_000),
            max_summary_tokens: 4096,
            tool_output_cap_bytes: DEFAULT_TOOL_OUTPUT_CAP_BYTES,
            prune_protect_tokens: (threshold_tokens / 2).min(40_000),
            output_reserve_tokens: 8192,
            project_instructions: true,
        }
    }
}

impl ContextSettings {
    /// The history size that no longer fits next to the answer.
    pub fn hard_limit(&self) -> u64 {
        self.context_window.saturating_sub(self.output_reserve_tokens)
    }
}

pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;
pub const DEFAULT_TOOL_OUTPUT_CAP_BYTES: u64 = 16 * 1024;

/// Token estimate of a piece of text: bytes/4, or bytes/3 for JSON-looking or mostly
/// non-ASCII text, which tokenizes denser (see `llm-wire.md` §4). Rounds up.
pub fn estimate_text(text: &str) -> u64 {
    let bytes = text.len() as u64;
    let ascii = text.bytes().filter(u8::is_ascii).count() as u64;
    let trimmed = text.trim_start();
    let dense = trimmed.starts_with('{') || trimmed.starts_with('[') || ascii * 10 < bytes * 9;
    let per_token = if dense { 3 } else { 4 };
    bytes.div_ceil(per_token)
}

/// Token estimate of one message, with a small per-message overhead.
pub fn estimate_message(message: &Message) -> u64 {
    4 + message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => estimate_text(text),
            ContentBlock::ToolUse { name, input, .. } => {
                8 + estimate_text(name) + estimate_text(&input.to_string())
            }
            ContentBlock::ToolResult { content, .. } => 8 + estimate_text(content),
            // The signature and redacted data are opaque bytes sent back; providers count them.
            ContentBlock::Thinking { thinking, signature } => {
                estimate_text(thinking) + signature.as_deref().map_or(0, estimate_text)
            }
            ContentBlock::RedactedThinking { data } => estimate_text(data),
            ContentBlock::Reasoning { text } => estimate_text(text),
        })
        .sum::<u64>()
}

/// What is known about the size of the history, kept by the agent between model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextState {
    /// Prompt tokens of the last model response, as the provider reported them.
    pub last_input_tokens: u64,
    /// Output tokens of that response.
    pub last_output_tokens: u64,
    /// History length the last report covers; messages after it are estimated.
    pub measured_len: u64,
    /// Turn (1-based) of the last compaction, if any.
    pub last_compaction_turn: Option<u64>,
    pub compactions: u64,
}

impl ContextState {
    /// Records a response's usage once its message is in a history of `history_len` messages.
    pub fn measured(&mut self, usage: &Usage, history_len: usize) {
        self.last_input_tokens = usage.prompt_tokens();
        self.last_output_tokens = usage.output_tokens;
        self.measured_len = history_len as u64;
    }

    /// Forgets the provider's figures after the history was rewritten: everything is estimated
    /// until the next response.
    pub fn history_rewritten(&mut self) {
        self.last_input_tokens = 0;
        self.last_output_tokens = 0;
        self.measured_len = 0;
    }

    /// Last reported prompt + output tokens, plus estimates of what was appended since.
    pub fn estimated_history_tokens(&self, history: &[Message]) -> u64 {
        let from = usize::try_from(self.measured_len).unwrap_or(usize::MAX).min(history.len());
        self.last_input_tokens + self.last_output_tokens + history[from..].iter().map(estimate_message).sum::<u64>()
    }
}

/// Caller-chosen context settings; every absent field gets a default from the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextOverrides {
    /// The model's context window, in tokens.
    pub context_window: Option<u64>,
    /// Compact at this many history tokens.
    pub threshold_tokens: Option<u64>,
    /// Turns between compactions (default 3).
    pub min_turns_between_compactions: Option<u64>,
    /// Tokens of recent turns kept after a summary.
    pub recent_turn_budget: Option<u64>,
    /// Maximum tokens of a summary.
    pub max_summary_tokens: Option<u32>,
    /// Longer tool outputs are shortened in the history (default 16384).
    pub tool_output_cap_bytes: Option<u64>,
    /// The project's AGENTS.md files go with the system prompt (default true).
    pub project_instructions: Option<bool>,
}

impl ContextOverrides {
    /// Whether any setting that only compaction uses was given.
    pub fn asks_for_compaction(&self) -> bool {
        self.threshold_tokens.is_some()
            || self.min_turns_between_compactions.is_some()
            || self.recent_turn_budget.is_some()
            || self.max_summary_tokens.is_some()
    }
}
