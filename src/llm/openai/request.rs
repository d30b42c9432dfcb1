//! The request body: the history brought into the providers' rules ([`conform`]), then written
//! from borrowed wire structs straight to bytes, once per call.
//!
//! This wire's own rules, beyond those every wire shares:
//! - the token limit goes out as `max_tokens`, which every compatible server understands,
//!   except where it must be `max_completion_tokens`: on `api.openai.com` (which deprecated the
//!   old name), for reasoning models on any host (o-series and gpt-5 reject `max_tokens`, on
//!   Azure as on OpenAI), or where the config says so (`token_limit_field`);
//! - reasoning: `reasoning_effort`, and the `reasoning_content` a server streamed is passed
//!   back on its assistant message (DeepSeek and Kimi require it within a tool loop; servers
//!   that never send it never get it);
//! - prompt caching is automatic on prefixes; a `prompt_cache_key` per session routes a
//!   session's requests to the same cache (off with `prompt_cache = "off"`);
//! - `stream_options` asks for usage unless the config says the server rejects it;
//! - the compaction summary forbids tool use with `tool_choice: "none"`.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{OpenAiProvider, PROVIDER};
use crate::llm::body::{self, Resendable};
use crate::llm::conform::{Turn, conform_after};
use crate::llm::options::{PromptCache, StreamUsage, TokenLimitField, WireOptions};
use crate::llm::structured::{self, FINAL_ANSWER_TOOL};
use crate::llm::tool_names::wire_name;
use crate::llm::{ContentBlock, LlmError, ModelRequest, Role, ToolChoice, ToolSpec};

impl OpenAiProvider {
    /// The JSON body an attempt of `request` sends: written by the first attempt, the same
    /// bytes for every later one.
    pub fn body(&self, request: &Resendable) -> Result<Bytes, LlmError> {
        request.body(|request| encode(request, &self.options, self.official))
    }
}

/// The reasoning blocks this wire takes back: its own.
fn keeps(block: &ContentBlock) -> bool {
    matches!(block, ContentBlock::Reasoning { .. })
}

/// Whether `model` is one of OpenAI's reasoning models (o1, o3, o4-mini, gpt-5…), whatever
/// prefix a gateway puts before it.
pub(super) fn is_reasoning_model(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    let mut chars = name.chars();
    name.starts_with("gpt-5") || (chars.next() == Some('o') && chars.next().is_some_and(|c| c.is_ascii_digit()))
}

/// The JSON body of one streaming request, written straight from the request. `official`:
/// the provider is `api.openai.com`.
pub(crate) fn encode(request: &ModelRequest, options: &WireOptions, official: bool) -> Result<Bytes, LlmError> {
    let mut kept = request.encoded.take(&request.messages, PROVIDER);
    let declared = |name: &str| request.tools.iter().any(|spec| spec.name == name);
    let conformed = conform_after(&request.messages, &kept.settled, &declared, keeps);
    let (newly, turns) = conformed.turns.split_at(conformed.newly_settled);
    for turn in newly {
        chat_messages(turn, |message| {
            kept.elements.push(body::raw(message, PROVIDER)?);
            Ok::<_, LlmError>(())
        })?;
    }
    // Structured output: `response_format` for an object root; any other root cannot go there,
    // so the system prompt asks for it and the agent parses the text (see `structured`).
    let instruction =
        request.output.as_ref().filter(|format| !format.is_object_root()).map(structured::instruction);
    let system = structured::system_with(request.system.as_deref(), instruction);
    let reasoning = request.reasoning.or(options.reasoning);
    let limit = request.max_tokens.saturating_add(reasoning.map_or(0, |reasoning| reasoning.budget_tokens()));
    let field = options.token_limit_field.unwrap_or(if official || is_reasoning_model(&request.model) {
        TokenLimitField::MaxCompletionTokens
    } else {
        TokenLimitField::MaxTokens
    });
    let tools = Tools { specs: &request.tools, stubs: &conformed.stubs };
    let body = Body {
        max_completion_tokens: (field == TokenLimitField::MaxCompletionTokens).then_some(limit),
        max_tokens: (field == TokenLimitField::MaxTokens).then_some(limit),
        messages: ChatMessages { system: system.as_deref(), settled: &kept.elements, turns },
        model: &request.model,
        prompt_cache_key: match options.prompt_cache {
            PromptCache::Auto => request.cache_key.as_deref(),
            PromptCache::Off => None,
        },
        reasoning_effort: reasoning.map(|reasoning| reasoning.effort().as_str()),
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
        stream_options: (options.stream_usage == StreamUsage::Requested)
            .then_some(StreamOptions { include_usage: true }),
        tool_choice: (request.tool_choice == ToolChoice::Forbidden && !tools.is_empty()).then_some("none"),
        tools,
    };
    let bytes = body::to_bytes(&body, body::size_hint(request), PROVIDER)?;
    kept.settled = conformed.settled;
    request.encoded.keep(kept);
    Ok(bytes)
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
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
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

/// The request's tools, then stubs for tools the history still names.
pub(super) struct Tools<'a> {
    specs: &'a [Arc<ToolSpec>],
    stubs: &'a [ToolSpec],
}

impl Tools<'_> {
    fn is_empty(&self) -> bool {
        self.specs.is_empty() && self.stubs.is_empty()
    }
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.specs.iter().map(AsRef::as_ref).chain(self.stubs).map(|tool| FunctionTool {
            function: Function {
                description: &tool.description,
                name: wire_name(&tool.name),
                parameters: tool.input_schema.json(),
            },
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
    name: Cow<'a, str>,
    parameters: &'a RawValue,
}

/// The system prompt, then the conformed turns as chat messages.
///
/// One turn becomes one or more chat messages: tool results are separate `tool` messages and
/// must directly follow the assistant message that called them; [`conform`] put them first in
/// their turn, so they come before any text of it.
pub(super) struct ChatMessages<'a> {
    system: Option<&'a str>,
    /// The settled turns' messages, as written before.
    settled: &'a [Box<RawValue>],
    turns: &'a [Turn<'a>],
}

impl Serialize for ChatMessages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        if let Some(content) = self.system {
            seq.serialize_element(&ChatMessage::System { content, role: "system" })?;
        }
        for message in self.settled {
            seq.serialize_element(message)?;
        }
        for turn in self.turns {
            chat_messages(turn, |message| seq.serialize_element(message))?;
        }
        seq.end()
    }
}

/// The chat messages `turn` becomes, each handed to `emit` in order.
fn chat_messages<E>(turn: &Turn<'_>, mut emit: impl FnMut(&ChatMessage<'_>) -> Result<(), E>) -> Result<(), E> {
    let blocks = Blocks(&turn.blocks);
    match turn.role {
        Role::User => {
            for block in blocks.iter() {
                if let ContentBlock::ToolResult { tool_use_id, content, is_error } = block {
                    let content = ToolContent { content, is_error: *is_error };
                    emit(&ChatMessage::Tool { content, role: "tool", tool_call_id: tool_use_id })?;
                }
            }
            if blocks.has_text() {
                emit(&ChatMessage::User { content: JoinedText(blocks), role: "user" })?;
            }
            Ok(())
        }
        Role::Assistant => emit(&ChatMessage::Assistant {
            content: blocks.has_text().then_some(JoinedText(blocks)),
            reasoning_content: blocks.has_reasoning().then_some(JoinedReasoning(blocks)),
            role: "assistant",
            tool_calls: ToolCalls(blocks),
        }),
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
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<JoinedReasoning<'a>>,
        role: &'static str,
        #[serde(skip_serializing_if = "ToolCalls::is_empty")]
        tool_calls: ToolCalls<'a>,
    },
}

/// A turn's blocks.
#[derive(Clone, Copy)]
pub(super) struct Blocks<'a>(&'a [Cow<'a, ContentBlock>]);

impl<'a> Blocks<'a> {
    fn iter(self) -> impl Iterator<Item = &'a ContentBlock> {
        self.0.iter().map(AsRef::as_ref)
    }

    fn texts(self) -> impl Iterator<Item = &'a str> {
        self.iter().filter_map(|block| match block {
            ContentBlock::Text { text } if !text.is_empty() => Some(text.as_str()),
            _ => None,
        })
    }

    fn reasonings(self) -> impl Iterator<Item = &'a str> {
        self.iter().filter_map(|block| match block {
            ContentBlock::Reasoning { text } => Some(text.as_str()),
            _ => None,
        })
    }

    fn has_text(self) -> bool {
        self.texts().next().is_some()
    }

    fn has_reasoning(self) -> bool {
        self.reasonings().next().is_some()
    }
}

/// Strings joined one per line, written as they are serialized, never collected (chat
/// messages carry a single content string).
fn write_joined<'a>(f: &mut std::fmt::Formatter<'_>, mut parts: impl Iterator<Item = &'a str>) -> std::fmt::Result {
    if let Some(first) = parts.next() {
        f.write_str(first)?;
    }
    for part in parts {
        f.write_str("\n")?;
        f.write_str(part)?;
    }
    Ok(())
}

/// A turn's non-empty text blocks as one string.
pub(super) struct JoinedText<'a>(Blocks<'a>);

impl std::fmt::Display for JoinedText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_joined(f, self.0.texts())
    }
}

impl Serialize for JoinedText<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A turn's reasoning as the one `reasoning_content` string it came as.
pub(super) struct JoinedReasoning<'a>(Blocks<'a>);

impl std::fmt::Display for JoinedReasoning<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_joined(f, self.0.reasonings())
    }
}

impl Serialize for JoinedReasoning<'_> {
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
pub(super) struct ToolCalls<'a>(Blocks<'a>);

impl ToolCalls<'_> {
    fn is_empty(&self) -> bool {
        !self.0.iter().any(|block| matches!(block, ContentBlock::ToolUse { .. }))
    }
}

impl Serialize for ToolCalls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some(ToolCall {
                function: FunctionCall { arguments: Arguments(input), name: wire_name(name) },
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
    name: Cow<'a, str>,
}

/// A call's arguments: its input as a string of compact JSON, written as it is serialized.
pub(super) struct Arguments<'a>(&'a Value);

impl Serialize for Arguments<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self.0)
    }
}
