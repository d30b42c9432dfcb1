//! The request body: written from borrowed wire structs straight to bytes, once per call.

use std::sync::Arc;

use std::borrow::Cow;

use bytes::Bytes;
use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::{OpenAiProvider, PROVIDER};
use crate::llm::body::{self, Resendable};
use crate::llm::structured::{self, FINAL_ANSWER_TOOL};
use crate::llm::{ContentBlock, LlmError, Message, ModelRequest, Role, ToolSpec};

impl OpenAiProvider {
    /// The JSON body an attempt of `request` sends: written by the first attempt, the same
    /// bytes for every later one.
    pub fn body(&self, request: &Resendable) -> Result<Bytes, LlmError> {
        request.body(|request| encode(request, self.max_tokens_field))
    }
}

/// The JSON body of one streaming request, written straight from the request.
///
/// The token limit goes out as `max_tokens`, which every compatible server understands. Only
/// for `api.openai.com` it is `max_completion_tokens`: OpenAI deprecated `max_tokens` there and
/// its reasoning models reject it, while several compatible servers ignore the newer name.
pub(crate) fn encode(request: &ModelRequest, max_tokens_field: &str) -> Result<Bytes, LlmError> {
    // Structured output: `response_format` for an object root; any other root cannot go there,
    // so the system prompt asks for it and the agent parses the text (see `structured`).
    let instruction =
        request.output.as_ref().filter(|format| !format.is_object_root()).map(structured::instruction);
    let system = match (request.system.as_deref().filter(|s| !s.is_empty()), instruction) {
        (Some(system), Some(instruction)) => Some(Cow::Owned(format!("{system}\n\n{instruction}"))),
        (Some(system), None) => Some(Cow::Borrowed(system)),
        (None, instruction) => instruction.map(Cow::Owned),
    };
    let completion_field = max_tokens_field == "max_completion_tokens";
    let body = Body {
        max_completion_tokens: completion_field.then_some(request.max_tokens),
        max_tokens: (!completion_field).then_some(request.max_tokens),
        messages: ChatMessages { system: system.as_deref(), messages: &request.messages },
        model: &request.model,
        response_format: request.output.as_ref().filter(|format| format.is_object_root()).map(|format| {
            ResponseFormat {
                json_schema: JsonSchema {
                    name: FINAL_ANSWER_TOOL,
                    schema: &format.schema,
                    strict: structured::fits_openai_strict(&format.schema),
                },
                kind: "json_schema",
            }
        }),
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        tools: Tools(&request.tools),
    };
    body::to_bytes(&body, body::size_hint(request), PROVIDER)
}

/// The request body, borrowed from the [`ModelRequest`]. Keys are listed in alphabetical order
/// here and in every wire struct below: the order serde_json writes a JSON object's keys in,
/// which the bodies have always had on the wire.
#[derive(Serialize)]
pub(super) struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    messages: ChatMessages<'a>,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Tools::is_empty")]
    tools: Tools<'a>,
}

#[derive(Serialize)]
pub(super) struct ResponseFormat<'a> {
    json_schema: JsonSchema<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
pub(super) struct JsonSchema<'a> {
    name: &'static str,
    schema: &'a Value,
    strict: bool,
}

#[derive(Serialize)]
pub(super) struct StreamOptions {
    include_usage: bool,
}

pub(super) struct Tools<'a>(&'a [Arc<ToolSpec>]);

impl Tools<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|tool| FunctionTool {
            function: Function { description: &tool.description, name: &tool.name, parameters: &tool.input_schema },
            kind: "function",
        }))
    }
}

#[derive(Serialize)]
pub(super) struct FunctionTool<'a> {
    function: Function<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
pub(super) struct Function<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a Value,
}

/// The system prompt, then our messages as chat messages.
///
/// One of our messages becomes one or more chat messages: tool results are separate `tool`
/// messages and must directly follow the assistant message that called them, so they go
/// before any text of the same user message.
pub(super) struct ChatMessages<'a> {
    system: Option<&'a str>,
    messages: &'a [Message],
}

impl Serialize for ChatMessages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        if let Some(content) = self.system {
            seq.serialize_element(&ChatMessage::System { content, role: "system" })?;
        }
        for message in self.messages {
            let blocks = &message.content;
            match message.role {
                Role::User => {
                    for block in blocks {
                        if let ContentBlock::ToolResult { tool_use_id, content, is_error } = block {
                            let content = ToolContent { content, is_error: *is_error };
                            seq.serialize_element(&ChatMessage::Tool {
                                content,
                                role: "tool",
                                tool_call_id: tool_use_id,
                            })?;
                        }
                    }
                    if has_text(blocks) {
                        seq.serialize_element(&ChatMessage::User { content: JoinedText(blocks), role: "user" })?;
                    }
                }
                Role::Assistant => seq.serialize_element(&ChatMessage::Assistant {
                    content: has_text(blocks).then_some(JoinedText(blocks)),
                    role: "assistant",
                    tool_calls: ToolCalls(blocks),
                })?,
            }
        }
        seq.end()
    }
}

#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum ChatMessage<'a> {
    System {
        content: &'a str,
        role: &'static str,
    },
    User {
        content: JoinedText<'a>,
        role: &'static str,
    },
    Tool {
        content: ToolContent<'a>,
        role: &'static str,
        tool_call_id: &'a str,
    },
    Assistant {
        content: Option<JoinedText<'a>>,
        role: &'static str,
        #[serde(skip_serializing_if = "ToolCalls::is_empty")]
        tool_calls: ToolCalls<'a>,
    },
}

pub(super) fn has_text(blocks: &[ContentBlock]) -> bool {
    blocks.iter().any(|block| matches!(block, ContentBlock::Text { text } if !text.is_empty()))
}

/// A message's non-empty text blocks as one string, one per line (chat messages carry a
/// single content string). Written as it is serialized, never collected.
pub(super) struct JoinedText<'a>(&'a [ContentBlock]);

impl std::fmt::Display for JoinedText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut texts = self.0.iter().filter_map(|block| match block {
            ContentBlock::Text { text } if !text.is_empty() => Some(text),
            _ => None,
        });
        if let Some(first) = texts.next() {
            f.write_str(first)?;
        }
        for text in texts {
            f.write_str("\n")?;
            f.write_str(text)?;
        }
        Ok(())
    }
}

impl Serialize for JoinedText<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A tool result's content. Chat Completions has no error flag on tool results; an error
/// says so in the text.
pub(super) struct ToolContent<'a> {
    content: &'a str,
    is_error: bool,
}

impl Serialize for ToolContent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.is_error {
            serializer.collect_str(&format_args!("Error: {}", self.content))
        } else {
            serializer.serialize_str(self.content)
        }
    }
}

/// The tool calls of an assistant message.
pub(super) struct ToolCalls<'a>(&'a [ContentBlock]);

impl ToolCalls<'_> {
    fn is_empty(&self) -> bool {
        !self.0.iter().any(|block| matches!(block, ContentBlock::ToolUse { .. }))
    }
}

impl Serialize for ToolCalls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some(ToolCall {
                function: FunctionCall { arguments: Arguments(input), name },
                id,
                kind: "function",
            }),
            _ => None,
        }))
    }
}

#[derive(Serialize)]
pub(super) struct ToolCall<'a> {
    function: FunctionCall<'a>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
pub(super) struct FunctionCall<'a> {
    arguments: Arguments<'a>,
    name: &'a str,
}

/// A call's arguments: its input as a string of compact JSON, written as it is serialized.
pub(super) struct Arguments<'a>(&'a Value);

impl Serialize for Arguments<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self.0)
    }
}
