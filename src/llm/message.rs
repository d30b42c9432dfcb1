//! The provider-neutral conversation: what a session's history is made of.
//!
//! Both wire adapters translate from these types (Anthropic content blocks, OpenAI chat
//! messages), and the store persists them as they are, so they are plain serde data.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

/// One message of the history. The system prompt is not a message: it lives in the agent's
/// configuration and goes into every request verbatim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Self {
        Self { role: Role::User, content: vec![ContentBlock::Text { text: text.into() }] }
    }

    pub fn assistant(content: Vec<ContentBlock>) -> Self {
        Self { role: Role::Assistant, content }
    }

    /// The message's text blocks joined, without tool calls or results.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// A tool call the model made; `input` is the parsed JSON arguments.
    ToolUse {
        id: String,
        name: String,
        input: serde_json::Value,
    },
    /// The answer to a [`ContentBlock::ToolUse`], always in the next user message.
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// The model's reasoning on the Anthropic wire (extended thinking). Kept byte for byte with
    /// its signature: the API checks both when the block comes back in a tool loop, and
    /// Anthropic-compatible endpoints with thinking on refuse a history that drops it.
    Thinking {
        thinking: String,
        /// Absent only where a compatible endpoint sent none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Reasoning the provider encrypted (Anthropic `redacted_thinking`): opaque, sent back as is.
    RedactedThinking {
        data: String,
    },
    /// The model's reasoning on the OpenAI-compatible wire (`reasoning_content`, as DeepSeek
    /// and Kimi stream it), passed back on the assistant message it came with, which those
    /// servers require within a tool loop.
    Reasoning {
        text: String,
    },
}

impl ContentBlock {
    /// Reasoning of either wire: shown apart from the text, never sent to a wire it did not
    /// come from.
    pub fn is_reasoning(&self) -> bool {
        matches!(self, Self::Thinking { .. } | Self::RedactedThinking { .. } | Self::Reasoning { .. })
    }

    /// The reasoning's readable text: `None` for other blocks, and for redacted thinking,
    /// which has none.
    pub fn reasoning_text(&self) -> Option<&str> {
        match self {
            Self::Thinking { thinking, .. } => Some(thinking),
            Self::Reasoning { text } => Some(text),
            _ => None,
        }
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (an object schema), with its text for the wire.
    pub input_schema: super::ToolSchema,
}

impl ToolSpec {
    /// Declarations as a [`ModelRequest`](super::ModelRequest) carries them, for requests built
    /// by hand (the agent's come from its tool scope, shared).
    pub fn list(specs: impl IntoIterator<Item = ToolSpec>) -> std::sync::Arc<[std::sync::Arc<ToolSpec>]> {
        specs.into_iter().map(std::sync::Arc::new).collect()
    }
}
