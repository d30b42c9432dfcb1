//! The Anthropic Messages API (`POST /v1/messages`, streaming), hand-written on reqwest.
//!
//! Request: our [`Message`]s map one to one onto Anthropic messages with content blocks,
//! written from borrowed wire structs straight to bytes ([`super::body`]).
//! Response: the SSE event flow of `message_start` → blocks (`content_block_start` / `_delta` /
//! `_stop`, keyed by `index`) → `message_delta` → `message_stop`, normalized into
//! [`StreamEvent`]s. Structured output is a forced final tool ([`super::structured`]). Each event is read into a typed value (`Event`) whose fields are lenient:
//! a missing or odd field the decoder can do without never fails a stream. Failures are only
//! classified here; waiting and retrying happen in [`super::retry`].

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::future::BoxFuture;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Value, json};

use super::body::{self, Resendable};
use super::http::{self, ErrorResponse, HttpTimeouts, WireDecoder};
use super::sse::SseEvent;
use super::structured::{self, FINAL_ANSWER_TOOL};
use super::{
    ContentBlock, EventStream, LlmError, LlmErrorKind, Message, ModelRequest, Provider, Role, StopReason,
    StreamEvent, ToolSpec, Usage,
};

const PROVIDER: &str = "anthropic";
const API_VERSION: &str = "2023-06-01";

/// Where and how to reach the Anthropic API (or a compatible gateway).
#[derive(Clone)]
pub struct AnthropicConfig {
    /// E.g. `https://api.anthropic.com`; may carry a path prefix (`http://gw/anthropic`).
    pub base_url: String,
    pub api_key: String,
    pub timeouts: HttpTimeouts,
}

impl std::fmt::Debug for AnthropicConfig {
    /// Never prints the key: configs end up in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

/// A [`Provider`] speaking the Anthropic Messages wire format.
pub struct AnthropicProvider {
    url: String,
    api_key: String,
    client: Result<reqwest::Client, LlmError>,
}

impl AnthropicProvider {
    pub fn new(config: AnthropicConfig) -> Self {
        Self {
            url: http::join_url(&config.base_url, "/v1/messages"),
            api_key: config.api_key,
            client: http::build_client(config.timeouts),
        }
    }
}

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicProvider").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Provider for AnthropicProvider {
    fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<EventStream, LlmError>> {
        self.attempt(&Resendable::new(request))
    }

    fn attempt(&self, request: &Resendable) -> BoxFuture<'_, Result<EventStream, LlmError>> {
        let body = self.body(request);
        Box::pin(async move {
            let client = self.client.clone()?;
            let mut key = HeaderValue::from_str(&self.api_key).map_err(|_| {
                LlmError::new(LlmErrorKind::Config, "anthropic API key is not a valid header value")
            })?;
            key.set_sensitive(true);
            let response = client
                .post(&self.url)
                .header("x-api-key", key)
                .header("anthropic-version", API_VERSION)
                .header("accept", "text/event-stream")
                .header(CONTENT_TYPE, "application/json")
                .body(body?)
                .send()
                .await
                .map_err(|err| http::send_error(PROVIDER, &err))?;
            if !response.status().is_success() {
                let error = ErrorResponse::read(response).await;
                let kind = classify_http(&error);
                return Err(error.into_error(PROVIDER, kind));
            }
            Ok(http::drive(PROVIDER, response, StreamDecoder::default()))
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Request

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
struct Body<'a> {
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
struct ToolChoice {
    #[serde(rename = "type")]
    kind: &'static str,
}

struct Messages<'a>(&'a [Message]);

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
struct WireMessage<'a> {
    content: Content<'a>,
    role: &'static str,
}

/// A message's blocks as Anthropic takes them. It rejects empty text blocks, and wants a user
/// message's tool_result blocks before any text. Both are fixed up here rather than trusted to
/// every history writer: empty text goes (unless nothing else is left), and tool results come
/// first, each group in its own order.
struct Content<'a>(&'a [ContentBlock]);

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
enum WireBlock<'a> {
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
struct Tools<'a> {
    specs: &'a [ToolSpec],
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
struct Tool<'a> {
    description: &'a str,
    input_schema: &'a Value,
    name: &'a str,
}

// ---------------------------------------------------------------------------------------------
// Errors

fn classify_http(error: &ErrorResponse) -> LlmErrorKind {
    let message = error.message().to_lowercase();
    match error.status {
        429 if is_spend_limit(error) => LlmErrorKind::QuotaExhausted,
        400 | 413 if message.contains("prompt is too long") => LlmErrorKind::ContextOverflow,
        status => http::kind_for_status(status),
    }
}

/// A 429 for the monthly spend cap: waiting minutes will not help, so it must not be retried.
fn is_spend_limit(error: &ErrorResponse) -> bool {
    error.raw.contains("enforced_spend_limit_reached") || error.message().to_lowercase().contains("spend limit")
}

/// Classifies an `error.type` (in-band `event: error`, same names as the HTTP bodies).
fn kind_for_error_type(error_type: &str, message: &str) -> LlmErrorKind {
    match error_type {
        "overloaded_error" => LlmErrorKind::Overloaded,
        "api_error" | "timeout_error" => LlmErrorKind::Server,
        "rate_limit_error" if message.to_lowercase().contains("spend limit") => LlmErrorKind::QuotaExhausted,
        "rate_limit_error" => LlmErrorKind::RateLimited,
        "invalid_request_error" if message.contains("prompt is too long") => LlmErrorKind::ContextOverflow,
        "invalid_request_error" | "not_found_error" | "request_too_large" => LlmErrorKind::InvalidRequest,
        "authentication_error" | "permission_error" => LlmErrorKind::Auth,
        "billing_error" => LlmErrorKind::QuotaExhausted,
        // An unknown in-band failure is most likely transient on the provider's side.
        _ => LlmErrorKind::Server,
    }
}

fn decode_error(message: impl std::fmt::Display) -> LlmError {
    LlmError::new(LlmErrorKind::Decode, format!("{PROVIDER}: {message}"))
}

// ---------------------------------------------------------------------------------------------
// Response stream: the events as typed values

/// One SSE event of the Messages stream, as far as deputy reads it. The variant comes from the
/// SSE `event:` name (see [`tagged`]); `Unknown` covers `ping` and anything added later, which
/// the API documents may appear at any time.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
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
const KNOWN_EVENTS: &[&str] = &[
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
struct Lenient<T>(Option<T>);

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
struct MessageStart {
    message: Lenient<MessageStartBody>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MessageStartBody {
    usage: Lenient<WireUsage>,
}

/// Token counts as sent; each may be missing, and a later event's figure replaces an earlier.
#[derive(Deserialize, Default)]
#[serde(default)]
struct WireUsage {
    input_tokens: Lenient<u64>,
    output_tokens: Lenient<u64>,
    cache_read_input_tokens: Lenient<u64>,
    cache_creation_input_tokens: Lenient<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct BlockStart {
    index: Lenient<u64>,
    content_block: Lenient<ContentBlockStart>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentBlockStart {
    Text(TextStart),
    ToolUse(ToolUseStart),
    /// thinking, redacted_thinking, server tools, future types: not surfaced.
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TextStart {
    text: Lenient<String>,
}

/// The block's `input: {}` is a placeholder, so it is not read: arguments come as deltas.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ToolUseStart {
    id: Lenient<String>,
    name: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct BlockDelta {
    index: Lenient<u64>,
    delta: Lenient<ContentDelta>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentDelta {
    TextDelta(TextDelta),
    InputJsonDelta(InputJsonDelta),
    /// thinking, signature, citations, future delta types.
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TextDelta {
    text: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct InputJsonDelta {
    partial_json: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct BlockStop {
    index: Lenient<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MessageDelta {
    delta: Lenient<MessageDeltaBody>,
    usage: Lenient<WireUsage>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MessageDeltaBody {
    stop_reason: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorEvent {
    error: Lenient<ErrorDetail>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorDetail {
    #[serde(rename = "type")]
    error_type: Lenient<String>,
    message: Lenient<String>,
}

/// The event's data with its `type` set to the SSE event name, which wins over the data's own
/// `type` when both are sent; an unnamed event keeps the `type` it carries. `None` for an
/// unnamed event without a string `type`: there is nothing to dispatch on.
fn tagged(name: Option<String>, data: Value) -> Option<Value> {
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

fn required_index(index: Lenient<u64>) -> Result<u64, LlmError> {
    index.0.ok_or_else(|| decode_error("content block event without index"))
}

// ---------------------------------------------------------------------------------------------
// Response stream: the decoder

enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    /// thinking, redacted_thinking, server tools, future types: not surfaced.
    Other,
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
}

impl StreamDecoder {
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
                out.push(StreamEvent::ToolCallStart { id: id.clone(), name: name.clone() });
                Block::ToolUse { id, name, json: String::new() }
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
            Some(ContentDelta::Other) | None => {}
        }
        Ok(())
    }

    fn on_block_stop(&mut self, event: BlockStop, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let index = required_index(event.index)?;
        if let Some(Block::ToolUse { id, name, json }) = self.blocks.remove(&index) {
            self.close_tool(id, name, &json, out);
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
                if let Block::ToolUse { id, name, json } = block {
                    self.close_tool(id, name, &json, out);
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
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|err| decode_error(format_args!("event data is not JSON: {err}")))?;
        let Some(data) = tagged(event.event, data) else {
            return Ok(());
        };
        let event =
            Event::deserialize(data).map_err(|err| decode_error(format_args!("unreadable event: {err}")))?;
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

#[cfg(test)]
#[path = "anthropic_tests.rs"]
mod tests;
