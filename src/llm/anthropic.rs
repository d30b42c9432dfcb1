//! The Anthropic Messages API (`POST /v1/messages`, streaming), hand-written on reqwest.
//!
//! Request: our [`Message`]s map one to one onto Anthropic messages with content blocks.
//! Response: the SSE event flow of `message_start` → blocks (`content_block_start` / `_delta` /
//! `_stop`, keyed by `index`) → `message_delta` → `message_stop`, normalized into
//! [`StreamEvent`]s. Failures are only classified here; waiting and retrying happen in
//! [`super::retry`].

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use reqwest::header::HeaderValue;
use serde_json::{Value, json};

use super::http::{self, ErrorResponse, HttpTimeouts, WireDecoder};
use super::sse::SseEvent;
use super::{
    ContentBlock, EventStream, LlmError, LlmErrorKind, Message, ModelRequest, Provider, Role, StopReason,
    StreamEvent, Usage,
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
        let body = request_body(&request);
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
                .json(&body)
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

/// The JSON body of one streaming request.
pub(crate) fn request_body(request: &ModelRequest) -> Value {
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": request.messages.iter().map(message_json).collect::<Vec<_>>(),
        "stream": true,
    });
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        body["system"] = json!(system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
    }
    body
}

fn message_json(message: &Message) -> Value {
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    // Anthropic rejects empty text blocks, and wants a user message's tool_result blocks
    // before any text. Both are fixed up here rather than trusted to every history writer.
    let mut blocks: Vec<&ContentBlock> =
        message.content.iter().filter(|b| !matches!(b, ContentBlock::Text { text } if text.is_empty())).collect();
    if blocks.is_empty() {
        blocks = message.content.iter().collect();
    }
    blocks.sort_by_key(|b| !matches!(b, ContentBlock::ToolResult { .. }));
    json!({"role": role, "content": blocks.into_iter().map(block_json).collect::<Vec<_>>()})
}

fn block_json(block: &ContentBlock) -> Value {
    match block {
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        ContentBlock::ToolResult { tool_use_id, content, is_error } => {
            let mut v = json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": content});
            if *is_error {
                v["is_error"] = json!(true);
            }
            v
        }
    }
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
// Response stream

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

    fn merge_usage(&mut self, usage: &Value) {
        let field = |name: &str| usage.get(name).and_then(Value::as_u64);
        if let Some(n) = field("input_tokens") {
            self.usage.input_tokens = n;
        }
        if let Some(n) = field("cache_read_input_tokens") {
            self.usage.cache_read_input_tokens = n;
        }
        if let Some(n) = field("cache_creation_input_tokens") {
            self.usage.cache_creation_input_tokens = n;
        }
        if let Some(n) = field("output_tokens") {
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
}

const KNOWN_EVENTS: &[&str] = &[
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "error",
];

fn index_of(data: &Value) -> Result<u64, LlmError> {
    data.get("index").and_then(Value::as_u64).ok_or_else(|| decode_error("content block event without index"))
}

fn str_field(value: &Value, pointer: &str) -> Option<String> {
    value.pointer(pointer).and_then(Value::as_str).map(str::to_owned)
}

impl WireDecoder for StreamDecoder {
    fn on_event(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        // New event types may appear at any time (doc): skip named events we do not know
        // without even parsing them. Unnamed events are dispatched on their `type` field.
        if event.event.as_deref().is_some_and(|name| !KNOWN_EVENTS.contains(&name)) {
            return Ok(());
        }
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|err| decode_error(format_args!("event data is not JSON: {err}")))?;
        let kind = event.event.or_else(|| str_field(&data, "/type")).unwrap_or_default();
        match kind.as_str() {
            "message_start" => {
                if let Some(usage) = data.pointer("/message/usage") {
                    self.merge_usage(usage);
                }
                out.push(StreamEvent::Usage(self.usage));
            }
            "content_block_start" => {
                let index = index_of(&data)?;
                let block = data.get("content_block").unwrap_or(&Value::Null);
                let block = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(text) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                            out.push(StreamEvent::TextDelta(text.to_owned()));
                        }
                        Block::Text
                    }
                    Some("tool_use") => {
                        let (Some(id), Some(name)) = (str_field(block, "/id"), str_field(block, "/name")) else {
                            return Err(decode_error("tool_use block without id or name"));
                        };
                        // The block's `input: {}` is a placeholder: arguments come as deltas.
                        out.push(StreamEvent::ToolCallStart { id: id.clone(), name: name.clone() });
                        Block::ToolUse { id, name, json: String::new() }
                    }
                    _ => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let index = index_of(&data)?;
                let delta = data.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(text) = delta.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                            out.push(StreamEvent::TextDelta(text.to_owned()));
                        }
                    }
                    Some("input_json_delta") => {
                        let Some(Block::ToolUse { id, json, .. }) = self.blocks.get_mut(&index) else {
                            return Err(decode_error(format_args!(
                                "input_json_delta for block {index}, not a tool_use"
                            )));
                        };
                        let fragment = delta.get("partial_json").and_then(Value::as_str).unwrap_or_default();
                        if !fragment.is_empty() {
                            json.push_str(fragment);
                            out.push(StreamEvent::ToolCallDelta { id: id.clone(), fragment: fragment.to_owned() });
                        }
                    }
                    _ => {} // thinking, signature, citations, future delta types
                }
            }
            "content_block_stop" => {
                let index = index_of(&data)?;
                if let Some(Block::ToolUse { id, name, json }) = self.blocks.remove(&index) {
                    self.close_tool(id, name, &json, out);
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                    self.check_unparsable()?;
                }
                if let Some(usage) = data.get("usage") {
                    self.merge_usage(usage);
                }
            }
            "message_stop" => {
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
            }
            "error" => {
                let error_type = str_field(&data, "/error/type").unwrap_or_default();
                let message = str_field(&data, "/error/message").unwrap_or_else(|| "unknown error".to_owned());
                let kind = kind_for_error_type(&error_type, &message);
                return Err(LlmError::new(kind, format!("{PROVIDER} stream error ({error_type}): {message}")));
            }
            _ => {} // ping and unknown unnamed events
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
