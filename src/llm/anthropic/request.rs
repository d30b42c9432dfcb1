//! The request body: written from borrowed wire structs straight to bytes, once per call.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::{AnthropicProvider, PROVIDER};
use crate::llm::body::{self, Resendable};
use crate::llm::structured::{self, FINAL_ANSWER_TOOL};
use crate::llm::{ContentBlock, LlmError, Message, ModelRequest, Role, ToolSpec};

impl AnthropicProvider {
    /// The JSON body an attempt of `request` sends: written by the first attempt, the same
    /// bytes for every later one.
    pub fn body(&self, request: &Resendable) -> Result<Bytes, LlmError> {
        request.body(encode)
    }
}

/// The JSON body of one streaming request, written straight from the request.
pub(crate) fn encode(request: &ModelRequest) -> Result<Bytes, LlmError> {
    // Structured output: a forced final tool whose input is the answer (see `structured`).
    let final_schema = request.output.as_ref().map(structured::final_answer_input_schema);
    let final_answer = final_schema.as_ref().map(|input_schema| Tool {
        description: structured::final_answer_description(),
        input_schema,
        name: FINAL_ANSWER_TOOL,
    });
    let body = Body {
        max_tokens: request.max_tokens,
        messages: Messages(&request.messages),
        model: &request.model,
        stream: true,
        system: request.system.as_deref().filter(|s| !s.is_empty()),
        tool_choice: request.output.as_ref().map(|_| ToolChoice { kind: "any" }),
        tools: Tools { specs: &request.tools, final_answer },
    };
    body::to_bytes(&body, body::size_hint(request), PROVIDER)
}

/// The request body, borrowed from the [`ModelRequest`]. Keys are listed in alphabetical order
/// here and in every wire struct below: the order serde_json writes a JSON object's keys in,
/// which the bodies have always had on the wire.
#[derive(Serialize)]
pub(super) struct Body<'a> {
    max_tokens: u32,
    messages: Messages<'a>,
    model: &'a str,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice>,
    #[serde(skip_serializing_if = "Tools::is_empty")]
    tools: Tools<'a>,
}

#[derive(Serialize)]
pub(super) struct ToolChoice {
    #[serde(rename = "type")]
    kind: &'static str,
}

pub(super) struct Messages<'a>(&'a [Message]);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|message| WireMessage {
            content: Content(&message.content),
            role: match message.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            },
        }))
    }
}

#[derive(Serialize)]
pub(super) struct WireMessage<'a> {
    content: Content<'a>,
    role: &'static str,
}

/// A message's blocks as Anthropic takes them. It rejects empty text blocks, and wants a user
/// message's tool_result blocks before any text. Both are fixed up here rather than trusted to
/// every history writer: empty text goes (unless nothing else is left), and tool results come
/// first, each group in its own order.
pub(super) struct Content<'a>(&'a [ContentBlock]);

impl Serialize for Content<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let empty_text = |block: &&ContentBlock| matches!(block, ContentBlock::Text { text } if text.is_empty());
        let keep_empty = self.0.iter().all(|block| empty_text(&block));
        let kept = move |block: &&ContentBlock| keep_empty || !empty_text(block);
        let is_result = |block: &&ContentBlock| matches!(block, ContentBlock::ToolResult { .. });
        let results = self.0.iter().filter(kept).filter(is_result);
        let others = self.0.iter().filter(kept).filter(|block| !is_result(block));
        serializer.collect_seq(results.chain(others).map(WireBlock::from))
    }
}

#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum WireBlock<'a> {
    Text {
        text: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    ToolUse {
        id: &'a str,
        input: &'a Value,
        name: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    ToolResult {
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        tool_use_id: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
}

impl<'a> From<&'a ContentBlock> for WireBlock<'a> {
    fn from(block: &'a ContentBlock) -> Self {
        match block {
            ContentBlock::Text { text } => Self::Text { text, kind: "text" },
            ContentBlock::ToolUse { id, name, input } => Self::ToolUse { id, input, name, kind: "tool_use" },
            ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                Self::ToolResult { content, is_error: *is_error, tool_use_id, kind: "tool_result" }
            }
        }
    }
}

/// The request's tools, then the final-answer tool when the answer is structured.
pub(super) struct Tools<'a> {
    specs: &'a [Arc<ToolSpec>],
    final_answer: Option<Tool<'a>>,
}

impl Tools<'_> {
    fn is_empty(&self) -> bool {
        self.specs.is_empty() && self.final_answer.is_none()
    }
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let specs = self.specs.iter().map(|spec| Tool {
            description: &spec.description,
            input_schema: &spec.input_schema,
            name: &spec.name,
        });
        serializer.collect_seq(specs.chain(self.final_answer))
    }
}

#[derive(Serialize, Clone, Copy)]
pub(super) struct Tool<'a> {
    description: &'a str,
    input_schema: &'a Value,
    name: &'a str,
}
