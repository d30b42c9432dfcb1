//! The response stream: its events as typed values, and the decoder that normalizes them into
//! [`StreamEvent`](crate::llm::StreamEvent)s.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use serde_json::{Value, json};

use super::{PROVIDER, decode_error, kind_for_error_type};
use crate::llm::http::WireDecoder;
use crate::llm::sse::SseEvent;
use crate::llm::tool_names::WireNames;
use crate::llm::{ContentBlock, LlmError, LlmErrorKind, StopReason, StreamEvent, Usage};

/// One SSE event of the Messages stream, as far as deputy reads it. The variant comes from the
/// SSE `event:` name (see [`tagged`]); `Unknown` covers `ping` and anything added later, which
/// the API documents may appear at any time.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Event {
    MessageStart(MessageStart),
    ContentBlockStart(BlockStart),
    ContentBlockDelta(BlockDelta),
    ContentBlockStop(BlockStop),
    MessageDelta(MessageDelta),
    MessageStop,
    Error(ErrorEvent),
    #[serde(other)]
    Unknown,
}

/// The event names [`Event`] has a variant for. A named event outside this list is skipped
/// before its data is even parsed, so a future event cannot fail the stream with odd data.
pub(super) const KNOWN_EVENTS: &[&str] = &[
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "error",
];

/// A field that counts as absent when it is missing, `null` or of an unexpected type. The
/// decoder needs few fields and the API grows new ones; a field of the wrong shape must not
/// fail a stream unless the decoder needs it, and then the decoder says so in its own words.
/// An array never fits: serde would read a struct out of one by position, but fields are
/// only ever found by name.
pub(super) struct Lenient<T>(Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        if value.is_array() {
            return Ok(Self(None));
        }
        Ok(Self(T::deserialize(value).ok()))
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct MessageStart {
    message: Lenient<MessageStartBody>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct MessageStartBody {
    usage: Lenient<WireUsage>,
}

/// Token counts as sent; each may be missing, and a later event's figure replaces an earlier.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct WireUsage {
    input_tokens: Lenient<u64>,
    output_tokens: Lenient<u64>,
    cache_read_input_tokens: Lenient<u64>,
    cache_creation_input_tokens: Lenient<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct BlockStart {
    index: Lenient<u64>,
    content_block: Lenient<ContentBlockStart>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum ContentBlockStart {
    Text(TextStart),
    ToolUse(ToolUseStart),
    Thinking(ThinkingStart),
    RedactedThinking(RedactedThinkingStart),
    /// Server tools, future types: not surfaced.
    #[serde(other)]
    Other,
}

/// A thinking block usually starts empty; its text and signature come as deltas.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ThinkingStart {
    thinking: Lenient<String>,
    signature: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RedactedThinkingStart {
    data: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct TextStart {
    text: Lenient<String>,
}

/// The block's `input: {}` is a placeholder, so it is not read: arguments come as deltas.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ToolUseStart {
    id: Lenient<String>,
    name: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct BlockDelta {
    index: Lenient<u64>,
    delta: Lenient<ContentDelta>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum ContentDelta {
    TextDelta(TextDelta),
    InputJsonDelta(InputJsonDelta),
    ThinkingDelta(ThinkingDelta),
    SignatureDelta(SignatureDelta),
    /// Citations, future delta types.
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ThinkingDelta {
    thinking: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct SignatureDelta {
    signature: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct TextDelta {
    text: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct InputJsonDelta {
    partial_json: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct BlockStop {
    index: Lenient<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct MessageDelta {
    delta: Lenient<MessageDeltaBody>,
    usage: Lenient<WireUsage>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct MessageDeltaBody {
    stop_reason: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ErrorEvent {
    error: Lenient<ErrorDetail>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ErrorDetail {
    #[serde(rename = "type")]
    error_type: Lenient<String>,
    message: Lenient<String>,
}

/// The event's data with its `type` set to the SSE event name, which wins over the data's own
/// `type` when both are sent; an unnamed event keeps the `type` it carries. `None` for an
/// unnamed event without a string `type`: there is nothing to dispatch on.
pub(super) fn tagged(name: Option<String>, data: Value) -> Option<Value> {
    match (name, data) {
        (Some(name), Value::Object(mut fields)) => {
            fields.insert("type".to_owned(), Value::String(name));
            Some(Value::Object(fields))
        }
        // A payload that is not an object has none of the fields an event reads.
        (Some(name), _) => Some(json!({ "type": name })),
        (None, data) => data.get("type").and_then(Value::as_str).is_some().then_some(data),
    }
}

/// The common case read straight from the text: a named event whose data is an object,
/// parsed into the event's own type without the tree of [`Value`]s and the buffered copy an
/// internally tagged enum makes (together 6% of an in-memory turn's CPU). `None` for anything
/// else, and for an object the event's type does not read (a field twice, say): [`tagged`]
/// and [`Event`] read those as before, to the same result.
fn named(name: Option<&str>, data: &str) -> Result<Option<Event>, LlmError> {
    fn read<T: DeserializeOwned>(data: &str) -> Result<Option<T>, LlmError> {
        match serde_json::from_str(data) {
            Ok(event) => Ok(Some(event)),
            Err(err) if err.classify() == serde_json::error::Category::Data => Ok(None),
            Err(err) => Err(decode_error(format_args!("event data is not JSON: {err}"))),
        }
    }
    let Some(name) = name.filter(|_| data.trim_start().starts_with('{')) else { return Ok(None) };
    Ok(match name {
        "message_start" => read(data)?.map(Event::MessageStart),
        "content_block_start" => read(data)?.map(Event::ContentBlockStart),
        "content_block_delta" => read(data)?.map(Event::ContentBlockDelta),
        "content_block_stop" => read(data)?.map(Event::ContentBlockStop),
        "message_delta" => read(data)?.map(Event::MessageDelta),
        "message_stop" => read::<serde::de::IgnoredAny>(data)?.map(|_| Event::MessageStop),
        "error" => read(data)?.map(Event::Error),
        _ => None,
    })
}

pub(super) fn required_index(index: Lenient<u64>) -> Result<u64, LlmError> {
    index.0.ok_or_else(|| decode_error("content block event without index"))
}

// ---------------------------------------------------------------------------------------------
// Response stream: the decoder

pub(super) enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    /// Kept whole for the history: the API wants it back byte for byte, signature included.
    Thinking {
        thinking: String,
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
    /// Server tools, future types: not surfaced.
    Other,
}

impl Block {
    /// A thinking block complete, as the history keeps it.
    fn into_reasoning(self) -> Option<ContentBlock> {
        match self {
            Self::Thinking { thinking, signature } => Some(ContentBlock::Thinking { thinking, signature }),
            Self::RedactedThinking { data } => Some(ContentBlock::RedactedThinking { data }),
            _ => None,
        }
    }
}

/// The state of one streamed response.
#[derive(Default)]
pub(crate) struct StreamDecoder {
    usage: Usage,
    /// Open content blocks by `index`.
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<String>,
    /// Tool calls closed with arguments that do not parse. Truncation by `max_tokens` explains
    /// (and excuses) them, and that is only known at `message_delta`, so the verdict waits.
    unparsable_tools: Vec<String>,
    /// The request's shortened tool names, to give calls their own names back.
    names: WireNames,
}

impl StreamDecoder {
    pub(super) fn new(names: WireNames) -> Self {
        Self { names, ..Self::default() }
    }

    fn truncated(&self) -> bool {
        self.stop_reason.as_deref() == Some("max_tokens")
    }

    fn merge_usage(&mut self, usage: WireUsage) {
        if let Some(n) = usage.input_tokens.0 {
            self.usage.input_tokens = n;
        }
        if let Some(n) = usage.cache_read_input_tokens.0 {
            self.usage.cache_read_input_tokens = n;
        }
        if let Some(n) = usage.cache_creation_input_tokens.0 {
            self.usage.cache_creation_input_tokens = n;
        }
        if let Some(n) = usage.output_tokens.0 {
            self.usage.output_tokens = n; // cumulative, so replace
        }
    }

    fn close_tool(&mut self, id: String, name: String, json: &str, out: &mut Vec<StreamEvent>) {
        let name = self.names.restore(name);
        let text = if json.trim().is_empty() { "{}" } else { json };
        match serde_json::from_str::<Value>(text) {
            Ok(input) => out.push(StreamEvent::ToolCallEnd { id, name, input }),
            Err(err) => {
                self.unparsable_tools.push(format!("arguments of tool call {id} ({name}) are not JSON: {err}"))
            }
        }
    }

    fn check_unparsable(&mut self) -> Result<(), LlmError> {
        if self.truncated() {
            self.unparsable_tools.clear();
        }
        match self.unparsable_tools.first() {
            Some(problem) => Err(decode_error(problem)),
            None => Ok(()),
        }
    }

    fn stop_reason(&self) -> StopReason {
        match self.stop_reason.as_deref() {
            Some("end_turn") => StopReason::EndTurn,
            Some("tool_use") => StopReason::ToolUse,
            Some("max_tokens") => StopReason::MaxTokens,
            Some("stop_sequence") => StopReason::StopSequence,
            Some("refusal") => StopReason::Refusal,
            Some(other) => StopReason::Other(other.to_owned()),
            None => StopReason::Other("unknown".to_owned()),
        }
    }

    fn on_message_start(&mut self, event: MessageStart, out: &mut Vec<StreamEvent>) {
        if let Some(usage) = event.message.0.and_then(|message| message.usage.0) {
            self.merge_usage(usage);
        }
        out.push(StreamEvent::Usage(self.usage));
    }

    fn on_block_start(&mut self, event: BlockStart, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let index = required_index(event.index)?;
        let block = match event.content_block.0 {
            Some(ContentBlockStart::Text(start)) => {
                if let Some(text) = start.text.0.filter(|t| !t.is_empty()) {
                    out.push(StreamEvent::TextDelta(text));
                }
                Block::Text
            }
            Some(ContentBlockStart::ToolUse(start)) => {
                let (Some(id), Some(name)) = (start.id.0, start.name.0) else {
                    return Err(decode_error("tool_use block without id or name"));
                };
                out.push(StreamEvent::ToolCallStart { id: id.clone(), name: self.names.restore(name.clone()) });
                Block::ToolUse { id, name, json: String::new() }
            }
            Some(ContentBlockStart::Thinking(start)) => {
                let thinking = start.thinking.0.unwrap_or_default();
                if !thinking.is_empty() {
                    out.push(StreamEvent::ReasoningDelta(thinking.clone()));
                }
                Block::Thinking { thinking, signature: start.signature.0.filter(|s| !s.is_empty()) }
            }
            Some(ContentBlockStart::RedactedThinking(start)) => {
                Block::RedactedThinking { data: start.data.0.unwrap_or_default() }
            }
            Some(ContentBlockStart::Other) | None => Block::Other,
        };
        self.blocks.insert(index, block);
        Ok(())
    }

    fn on_block_delta(&mut self, event: BlockDelta, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let index = required_index(event.index)?;
        match event.delta.0 {
            Some(ContentDelta::TextDelta(delta)) => {
                if let Some(text) = delta.text.0.filter(|t| !t.is_empty()) {
                    out.push(StreamEvent::TextDelta(text));
                }
            }
            Some(ContentDelta::InputJsonDelta(delta)) => {
                let Some(Block::ToolUse { id, json, .. }) = self.blocks.get_mut(&index) else {
                    return Err(decode_error(format_args!("input_json_delta for block {index}, not a tool_use")));
                };
                let fragment = delta.partial_json.0.unwrap_or_default();
                if !fragment.is_empty() {
                    json.push_str(&fragment);
                    out.push(StreamEvent::ToolCallDelta { id: id.clone(), fragment });
                }
            }
            Some(ContentDelta::ThinkingDelta(delta)) => {
                let fragment = delta.thinking.0.unwrap_or_default();
                if let Some(Block::Thinking { thinking, .. }) = self.blocks.get_mut(&index)
                    && !fragment.is_empty()
                {
                    thinking.push_str(&fragment);
                    out.push(StreamEvent::ReasoningDelta(fragment));
                }
            }
            Some(ContentDelta::SignatureDelta(delta)) => {
                if let Some(Block::Thinking { signature, .. }) = self.blocks.get_mut(&index) {
                    let fragment = delta.signature.0.unwrap_or_default();
                    signature.get_or_insert_with(String::new).push_str(&fragment);
                }
            }
            Some(ContentDelta::Other) | None => {}
        }
        Ok(())
    }

    fn on_block_stop(&mut self, event: BlockStop, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let index = required_index(event.index)?;
        match self.blocks.remove(&index) {
            Some(Block::ToolUse { id, name, json }) => self.close_tool(id, name, &json, out),
            Some(block) => out.extend(block.into_reasoning().map(StreamEvent::Reasoning)),
            None => {}
        }
        Ok(())
    }

    fn on_message_delta(&mut self, event: MessageDelta) -> Result<(), LlmError> {
        if let Some(reason) = event.delta.0.and_then(|delta| delta.stop_reason.0) {
            self.stop_reason = Some(reason);
            self.check_unparsable()?;
        }
        if let Some(usage) = event.usage.0 {
            self.merge_usage(usage);
        }
        Ok(())
    }

    fn on_message_stop(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        // Blocks still open here were cut off: by max_tokens they are incomplete and must
        // not run; otherwise close them as if their stop had arrived.
        let open = std::mem::take(&mut self.blocks);
        if !self.truncated() {
            for block in open.into_values() {
                match block {
                    Block::ToolUse { id, name, json } => self.close_tool(id, name, &json, out),
                    block => out.extend(block.into_reasoning().map(StreamEvent::Reasoning)),
                }
            }
        }
        self.check_unparsable()?;
        out.push(StreamEvent::Usage(self.usage));
        out.push(StreamEvent::Finished { stop_reason: self.stop_reason() });
        Ok(())
    }

    /// An in-band failure always ends the stream, classified like the HTTP error bodies.
    fn on_error(event: ErrorEvent) -> LlmError {
        let (error_type, message) = match event.error.0 {
            Some(error) => (error.error_type.0, error.message.0),
            None => (None, None),
        };
        let error_type = error_type.unwrap_or_default();
        let message = message.unwrap_or_else(|| "unknown error".to_owned());
        let kind = kind_for_error_type(&error_type, &message);
        LlmError::new(kind, format!("{PROVIDER} stream error ({error_type}): {message}"))
    }
}

impl WireDecoder for StreamDecoder {
    fn on_event(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        if event.event.as_deref().is_some_and(|name| !KNOWN_EVENTS.contains(&name)) {
            return Ok(());
        }
        let event = match named(event.event.as_deref(), &event.data)? {
            Some(event) => event,
            None => {
                let data: Value = serde_json::from_str(&event.data)
                    .map_err(|err| decode_error(format_args!("event data is not JSON: {err}")))?;
                let Some(data) = tagged(event.event, data) else {
                    return Ok(());
                };
                Event::deserialize(data).map_err(|err| decode_error(format_args!("unreadable event: {err}")))?
            }
        };
        match event {
            Event::MessageStart(event) => self.on_message_start(event, out),
            Event::ContentBlockStart(event) => self.on_block_start(event, out)?,
            Event::ContentBlockDelta(event) => self.on_block_delta(event, out)?,
            Event::ContentBlockStop(event) => self.on_block_stop(event, out)?,
            Event::MessageDelta(event) => self.on_message_delta(event)?,
            Event::MessageStop => self.on_message_stop(out)?,
            Event::Error(event) => return Err(Self::on_error(event)),
            Event::Unknown => {}
        }
        Ok(())
    }

    fn on_eof(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        Err(LlmError::new(LlmErrorKind::StreamBroken, format!("{PROVIDER}: stream ended before message_stop")))
    }
}
