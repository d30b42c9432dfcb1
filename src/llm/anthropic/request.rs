//! The request body: the history brought into the Messages API's rules ([`conform`]), then
//! written from borrowed wire structs straight to bytes, once per call.
//!
//! Beyond the rules every wire shares, this wire adds its own here:
//! - **prompt caching** (on unless `prompt_cache = "off"`): breakpoints on the last tool, on the
//!   system prompt and on the last block of the last message (three of the four allowed). The
//!   last one moves with the conversation; the API finds the previous request's prefix by
//!   looking back from it, so every step reads all that came before and writes only its own
//!   new blocks.
//! - **thinking**: `thinking: {type: "enabled", budget_tokens}` when the request (or the
//!   provider's default) asks for reasoning, with `max_tokens` raised by the budget so the
//!   answer keeps its own room. The API then wants the assistant message of an unfinished tool
//!   loop to start with its thinking block; when that message has none (it was written before
//!   thinking was on, or cut off), this request goes without thinking rather than fail.
//!   Thinking refuses a forced tool, so structured output asks for the final-answer tool in the
//!   system prompt instead of forcing it.
//! - the compaction summary forbids tool use with `tool_choice: {type: "none"}`.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{AnthropicProvider, PROVIDER};
use crate::llm::body::{self, Resendable};
use crate::llm::conform::{Conformed, Turn, conform_after};
use crate::llm::options::{CacheTtl, PromptCache, WireOptions};
use crate::llm::structured::{self, FINAL_ANSWER_TOOL};
use crate::llm::tool_names::wire_name;
use crate::llm::{ContentBlock, LlmError, ModelRequest, Role, ToolChoice, ToolSchema, ToolSpec};

impl AnthropicProvider {
    /// The JSON body an attempt of `request` sends: written by the first attempt, the same
    /// bytes for every later one.
    pub fn body(&self, request: &Resendable) -> Result<Bytes, LlmError> {
        request.body(|request| encode(request, &self.options))
    }
}

/// The reasoning blocks this wire takes back: its own.
fn keeps(block: &ContentBlock) -> bool {
    matches!(block, ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. })
}

/// The JSON body of one streaming request, written straight from the request.
pub(crate) fn encode(request: &ModelRequest, options: &WireOptions) -> Result<Bytes, LlmError> {
    // Structured output: a final tool whose input is the answer (see `structured`).
    let final_schema =
        request.output.as_ref().map(|output| ToolSchema::new(structured::final_answer_input_schema(output)));
    let declared = |name: &str| {
        request.tools.iter().any(|spec| spec.name == name) || (final_schema.is_some() && name == FINAL_ANSWER_TOOL)
    };
    let mut kept = request.encoded.take(&request.messages, PROVIDER);
    let conformed = conform_after(&request.messages, &kept.settled, &declared, keeps);
    let (newly, turns) = conformed.turns.split_at(conformed.newly_settled);
    for turn in newly {
        kept.elements.push(body::raw(&WireMessage::new(turn, None), PROVIDER)?);
    }
    let thinking = request
        .reasoning
        .or(options.reasoning)
        .filter(|_| open_tool_loop_thinks(&conformed))
        .map(|reasoning| Thinking { budget_tokens: reasoning.budget_tokens(), kind: "enabled" });
    let cache = match options.prompt_cache {
        PromptCache::Auto => Some(CacheControl::new(options.prompt_cache_ttl)),
        PromptCache::Off => None,
    };
    let final_answer = final_schema.as_ref().map(|input_schema| Tool {
        cache_control: None,
        description: structured::final_answer_description(),
        input_schema: input_schema.json(),
        name: Cow::Borrowed(FINAL_ANSWER_TOOL),
    });
    let tools = Tools { specs: &request.tools, stubs: &conformed.stubs, final_answer, cache };
    let tool_choice = match (&request.output, thinking, request.tool_choice) {
        (Some(_), None, _) => Some(ToolChoiceWire { kind: "any" }),
        (Some(_), Some(_), _) => None,
        (None, _, ToolChoice::Forbidden) if !tools.is_empty() => Some(ToolChoiceWire { kind: "none" }),
        (None, _, _) => None,
    };
    let instruction = (request.output.is_some() && thinking.is_some()).then(structured::tool_instruction);
    let system = structured::system_with(request.system.as_deref(), instruction);
    let body = Body {
        max_tokens: request.max_tokens.saturating_add(thinking.map_or(0, |thinking| thinking.budget_tokens)),
        messages: Messages { settled: &kept.elements, turns, cache },
        model: &request.model,
        stream: true,
        system: system.as_deref().map(|text| System { text, cache }),
        thinking,
        tool_choice,
        tools,
    };
    let bytes = body::to_bytes(&body, body::size_hint(request), PROVIDER)?;
    kept.settled = conformed.settled;
    request.encoded.keep(kept);
    Ok(bytes)
}

/// Whether thinking may be on: the API wants the assistant message of an unfinished tool loop
/// (the last user message opens with tool results) to start with a thinking block. Turns
/// settled at earlier calls are not in `conformed`; they never change the answer, as an
/// assistant turn always follows them.
fn open_tool_loop_thinks(conformed: &Conformed<'_>) -> bool {
    let [.., assistant, last] = conformed.turns.as_slice() else {
        return true;
    };
    let in_tool_loop = last.role == Role::User
        && last.blocks.first().is_some_and(|block| matches!(block.as_ref(), ContentBlock::ToolResult { .. }));
    !in_tool_loop
        || assistant.blocks.first().is_some_and(|block| {
            matches!(block.as_ref(), ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. })
        })
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
    system: Option<System<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoiceWire>,
    #[serde(skip_serializing_if = "Tools::is_empty")]
    tools: Tools<'a>,
}

#[derive(Serialize, Clone, Copy)]
pub(super) struct Thinking {
    budget_tokens: u32,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
pub(super) struct ToolChoiceWire {
    #[serde(rename = "type")]
    kind: &'static str,
}

/// A cache breakpoint.
#[derive(Serialize, Clone, Copy)]
pub(super) struct CacheControl {
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'static str>,
    #[serde(rename = "type")]
    kind: &'static str,
}

impl CacheControl {
    fn new(ttl: CacheTtl) -> Self {
        let ttl = match ttl {
            CacheTtl::FiveMinutes => None,
            CacheTtl::OneHour => Some("1h"),
        };
        Self { ttl, kind: "ephemeral" }
    }
}

/// The system prompt: a plain string, or one text block carrying a cache breakpoint.
pub(super) struct System<'a> {
    text: &'a str,
    cache: Option<CacheControl>,
}

impl Serialize for System<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.cache {
            None => serializer.serialize_str(self.text),
            Some(cache) => serializer.collect_seq([WireBlock::Text {
                cache_control: Some(cache),
                text: self.text,
                kind: "text",
            }]),
        }
    }
}

/// The conformed messages: the settled ones as written before, then the others; the last
/// one's last block carries the moving cache breakpoint.
pub(super) struct Messages<'a> {
    settled: &'a [Box<RawValue>],
    turns: &'a [Turn<'a>],
    cache: Option<CacheControl>,
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.settled.len() + self.turns.len()))?;
        for message in self.settled {
            seq.serialize_element(message)?;
        }
        let last = self.turns.len().saturating_sub(1);
        for (index, turn) in self.turns.iter().enumerate() {
            let cache = self.cache.filter(|_| index == last);
            seq.serialize_element(&WireMessage::new(turn, cache))?;
        }
        seq.end()
    }
}

/// The last block of `turn` that may carry a breakpoint (thinking blocks may not).
fn breakpoint(turn: &Turn<'_>) -> Option<usize> {
    turn.blocks.iter().rposition(|block| !block.is_reasoning())
}

#[derive(Serialize)]
pub(super) struct WireMessage<'a> {
    content: Content<'a>,
    role: &'static str,
}

impl<'a> WireMessage<'a> {
    /// `turn`, its last block carrying `cache` where one may.
    fn new(turn: &'a Turn<'a>, cache: Option<CacheControl>) -> Self {
        Self {
            content: Content {
                blocks: &turn.blocks,
                breakpoint: cache.and_then(|cache| breakpoint(turn).map(|at| (at, cache))),
            },
            role: match turn.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            },
        }
    }
}

pub(super) struct Content<'a> {
    blocks: &'a [Cow<'a, ContentBlock>],
    breakpoint: Option<(usize, CacheControl)>,
}

impl Serialize for Content<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.blocks.iter().enumerate().map(|(index, block)| {
            let cache = self.breakpoint.filter(|(at, _)| *at == index).map(|(_, cache)| cache);
            WireBlock::new(block, cache)
        }))
    }
}

#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum WireBlock<'a> {
    Text {
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
        text: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    ToolUse {
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
        id: &'a str,
        input: &'a Value,
        name: Cow<'a, str>,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    ToolResult {
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        tool_use_id: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    Thinking {
        #[serde(skip_serializing_if = "Option::is_none")]
        signature: Option<&'a str>,
        thinking: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    RedactedThinking {
        data: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
}

impl<'a> WireBlock<'a> {
    fn new(block: &'a ContentBlock, cache_control: Option<CacheControl>) -> Self {
        match block {
            ContentBlock::Text { text } => Self::Text { cache_control, text, kind: "text" },
            ContentBlock::ToolUse { id, name, input } => {
                Self::ToolUse { cache_control, id, input, name: wire_name(name), kind: "tool_use" }
            }
            ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                Self::ToolResult { cache_control, content, is_error: *is_error, tool_use_id, kind: "tool_result" }
            }
            ContentBlock::Thinking { thinking, signature } => {
                Self::Thinking { signature: signature.as_deref(), thinking, kind: "thinking" }
            }
            ContentBlock::RedactedThinking { data } => Self::RedactedThinking { data, kind: "redacted_thinking" },
            // Another wire's reasoning never gets here (`keeps`); were it to, it is only text.
            ContentBlock::Reasoning { text } => Self::Text { cache_control, text, kind: "text" },
        }
    }
}

/// The request's tools, stubs for tools the history still names, then the final-answer tool
/// when the answer is structured; the last carries the tools' cache breakpoint.
pub(super) struct Tools<'a> {
    specs: &'a [Arc<ToolSpec>],
    stubs: &'a [ToolSpec],
    final_answer: Option<Tool<'a>>,
    cache: Option<CacheControl>,
}

impl Tools<'_> {
    fn is_empty(&self) -> bool {
        self.specs.is_empty() && self.stubs.is_empty() && self.final_answer.is_none()
    }
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let declared = self.specs.iter().map(AsRef::as_ref).chain(self.stubs).map(|spec| Tool {
            cache_control: None,
            description: &spec.description,
            input_schema: spec.input_schema.json(),
            name: wire_name(&spec.name),
        });
        let mut tools: Vec<Tool<'_>> = declared.chain(self.final_answer.clone()).collect();
        if let Some(last) = tools.last_mut() {
            last.cache_control = self.cache;
        }
        serializer.collect_seq(tools)
    }
}

#[derive(Serialize, Clone)]
pub(super) struct Tool<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
    description: &'a str,
    input_schema: &'a RawValue,
    name: Cow<'a, str>,
}
