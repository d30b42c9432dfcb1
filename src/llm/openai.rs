//! OpenAI Chat Completions (`POST {base}/chat/completions`, streaming), hand-written on reqwest.
//!
//! Also the adapter for the many compatible servers (Ollama, vLLM, llama.cpp, gateways), so
//! the stream parser is lenient where they are known to differ: usage on the finish chunk or on
//! a chunk with `choices` empty, null or missing; tool calls without ids. Not about the end: a
//! stream must close with `[DONE]` (OpenAI's and every major compatible server's do), since one
//! that stops after its finish reason may have lost its usage and cannot be told from a cut.
//! Chunks are walked as `serde_json::Value` rather than typed: those servers vary too much.
//! The request body is written from borrowed wire structs straight to bytes ([`super::body`]).
//! Failures are only classified here; waiting and retrying happen in [`super::retry`].

use std::borrow::Cow;
use std::collections::BTreeMap;

use bytes::Bytes;
use futures::future::BoxFuture;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::body::{self, Resendable};
use super::http::{self, ErrorResponse, HttpTimeouts, WireDecoder};
use super::sse::SseEvent;
use super::structured::{self, FINAL_ANSWER_TOOL};
use super::{
    ContentBlock, EventStream, LlmError, LlmErrorKind, Message, ModelRequest, Provider, Role, StopReason,
    StreamEvent, ToolSpec, Usage,
};

const PROVIDER: &str = "openai";

/// Where and how to reach an OpenAI-compatible Chat Completions endpoint.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// Including the version path: `https://api.openai.com/v1`, `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …`; local servers usually need none.
    pub api_key: Option<String>,
    pub timeouts: HttpTimeouts,
}

impl std::fmt::Debug for OpenAiConfig {
    /// Never prints the key: configs end up in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

/// A [`Provider`] speaking the OpenAI Chat Completions wire format.
pub struct OpenAiProvider {
    url: String,
    api_key: Option<String>,
    /// See [`encode`] for why the token limit's name depends on the host.
    max_tokens_field: &'static str,
    client: Result<reqwest::Client, LlmError>,
}

impl OpenAiProvider {
    pub fn new(config: OpenAiConfig) -> Self {
        let official = reqwest::Url::parse(&config.base_url)
            .ok()
            .and_then(|url| url.host_str().map(|h| h.eq_ignore_ascii_case("api.openai.com")))
            .unwrap_or(false);
        Self {
            url: http::join_url(&config.base_url, "/chat/completions"),
            api_key: config.api_key,
            max_tokens_field: if official { "max_completion_tokens" } else { "max_tokens" },
            client: http::build_client(config.timeouts),
        }
    }
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Provider for OpenAiProvider {
    fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<EventStream, LlmError>> {
        self.attempt(&Resendable::new(request))
    }

    fn attempt(&self, request: &Resendable) -> BoxFuture<'_, Result<EventStream, LlmError>> {
        let body = self.body(request);
        Box::pin(async move {
            let client = self.client.clone()?;
            let mut builder = client
                .post(&self.url)
                .header("accept", "text/event-stream")
                .header(CONTENT_TYPE, "application/json")
                .body(body?);
            if let Some(key) = &self.api_key {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    LlmError::new(LlmErrorKind::Config, "openai API key is not a valid header value")
                })?;
                value.set_sensitive(true);
                builder = builder.header("authorization", value);
            }
            let response = builder.send().await.map_err(|err| http::send_error(PROVIDER, &err))?;
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
struct Body<'a> {
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
struct ResponseFormat<'a> {
    json_schema: JsonSchema<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct JsonSchema<'a> {
    name: &'static str,
    schema: &'a Value,
    strict: bool,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

struct Tools<'a>(&'a [ToolSpec]);

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
struct FunctionTool<'a> {
    function: Function<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct Function<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a Value,
}

/// The system prompt, then our messages as chat messages.
///
/// One of our messages becomes one or more chat messages: tool results are separate `tool`
/// messages and must directly follow the assistant message that called them, so they go
/// before any text of the same user message.
struct ChatMessages<'a> {
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
enum ChatMessage<'a> {
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

fn has_text(blocks: &[ContentBlock]) -> bool {
    blocks.iter().any(|block| matches!(block, ContentBlock::Text { text } if !text.is_empty()))
}

/// A message's non-empty text blocks as one string, one per line (chat messages carry a
/// single content string). Written as it is serialized, never collected.
struct JoinedText<'a>(&'a [ContentBlock]);

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
struct ToolContent<'a> {
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
struct ToolCalls<'a>(&'a [ContentBlock]);

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
struct ToolCall<'a> {
    function: FunctionCall<'a>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    arguments: Arguments<'a>,
    name: &'a str,
}

/// A call's arguments: its input as a string of compact JSON, written as it is serialized.
struct Arguments<'a>(&'a Value);

impl Serialize for Arguments<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self.0)
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// Classifies an error `code` or `type` (HTTP bodies and in-band error chunks share them).
fn kind_for_code(code: &str) -> Option<LlmErrorKind> {
    Some(match code {
        "insufficient_quota" | "billing_hard_limit_reached" => LlmErrorKind::QuotaExhausted,
        "context_length_exceeded" => LlmErrorKind::ContextOverflow,
        "rate_limit_exceeded" | "rate_limit_error" | "requests" | "tokens" => LlmErrorKind::RateLimited,
        "invalid_api_key" | "authentication_error" | "permission_error" => LlmErrorKind::Auth,
        "server_error" | "api_error" | "internal_error" => LlmErrorKind::Server,
        "overloaded" | "overloaded_error" | "server_overloaded" => LlmErrorKind::Overloaded,
        "invalid_request_error" | "model_not_found" | "not_found_error" => LlmErrorKind::InvalidRequest,
        _ => return None,
    })
}

/// Compatible servers often report an overflow only in prose ("maximum context length").
fn mentions_context_overflow(message: &str) -> bool {
    let message = message.to_lowercase();
    message.contains("context length") || message.contains("context_length_exceeded")
}

fn error_field<'a>(error: &'a Value, name: &str) -> Option<&'a str> {
    error.get(name).and_then(Value::as_str)
}

fn classify_http(error: &ErrorResponse) -> LlmErrorKind {
    let body = error.json.get("error").unwrap_or(&Value::Null);
    let code = error_field(body, "code").or_else(|| error_field(body, "type")).and_then(kind_for_code);
    match error.status {
        429 if code == Some(LlmErrorKind::QuotaExhausted) => LlmErrorKind::QuotaExhausted,
        400 | 413 if code == Some(LlmErrorKind::ContextOverflow) || mentions_context_overflow(&error.message()) => {
            LlmErrorKind::ContextOverflow
        }
        status => http::kind_for_status(status),
    }
}

/// A data chunk carrying `error` after the HTTP 200: classified by code, then type; unknown
/// errors count as transient server trouble.
fn in_band_error(error: &Value) -> LlmError {
    let message = match error {
        Value::String(s) => s.clone(),
        _ => error_field(error, "message").unwrap_or("unknown error").to_owned(),
    };
    let kind = [error_field(error, "code"), error_field(error, "type")]
        .into_iter()
        .flatten()
        .find_map(kind_for_code)
        .or_else(|| mentions_context_overflow(&message).then_some(LlmErrorKind::ContextOverflow))
        .unwrap_or(LlmErrorKind::Server);
    LlmError::new(kind, format!("{PROVIDER} stream error: {message}"))
}

fn decode_error(message: impl std::fmt::Display) -> LlmError {
    LlmError::new(LlmErrorKind::Decode, format!("{PROVIDER}: {message}"))
}

// ---------------------------------------------------------------------------------------------
// Response stream

struct Call {
    id: String,
    name: String,
    arguments: String,
    /// `ToolCallStart` was emitted (it waits for the name, which some servers send late).
    started: bool,
}

/// The state of one streamed response.
#[derive(Default)]
pub(crate) struct StreamDecoder {
    /// Tool calls of choice 0 by their `index`.
    calls: BTreeMap<u64, Call>,
    /// Whether the response contained tool calls (see [`stop_reason`]).
    had_calls: bool,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl StreamDecoder {
    fn on_tool_call_fragment(&mut self, position: usize, fragment: &Value, out: &mut Vec<StreamEvent>) {
        let id = fragment.get("id").and_then(Value::as_str).filter(|s| !s.is_empty());
        let function = fragment.get("function").unwrap_or(&Value::Null);
        let name = function.get("name").and_then(Value::as_str).filter(|s| !s.is_empty());
        // Some servers send whole calls as objects instead of strings.
        let arguments = match function.get("arguments") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        // `index` keys the fragments. Servers that omit it (Ollama-like) send whole calls, so
        // a new id means a new call and a fragment without either continues the last one.
        let index = match fragment.get("index").and_then(Value::as_u64) {
            Some(index) => index,
            None => match id {
                Some(id) => self
                    .calls
                    .iter()
                    .find(|(_, c)| c.id == id)
                    .map(|(i, _)| *i)
                    .unwrap_or_else(|| self.calls.keys().next_back().map_or(position as u64, |last| last + 1)),
                None => self.calls.keys().next_back().copied().unwrap_or(position as u64),
            },
        };
        let call = self.calls.entry(index).or_insert_with(|| Call {
            // Ids are needed to pair results with calls; synthesize one when the server has none.
            id: id.map_or_else(|| format!("call_{}", uuid::Uuid::new_v4().simple()), str::to_owned),
            name: String::new(),
            arguments: String::new(),
            started: false,
        });
        if let Some(name) = name
            && call.name.is_empty()
        {
            call.name = name.to_owned();
        }
        call.arguments.push_str(&arguments);
        if !call.started && !call.name.is_empty() {
            call.started = true;
            out.push(StreamEvent::ToolCallStart { id: call.id.clone(), name: call.name.clone() });
            if !call.arguments.is_empty() {
                out.push(StreamEvent::ToolCallDelta { id: call.id.clone(), fragment: call.arguments.clone() });
            }
        } else if call.started && !arguments.is_empty() {
            out.push(StreamEvent::ToolCallDelta { id: call.id.clone(), fragment: arguments });
        }
    }

    /// `finish_reason` arrived: every call's arguments are complete.
    fn finish_calls(&mut self, reason: &str, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        for call in std::mem::take(&mut self.calls).into_values() {
            if !call.started {
                out.push(StreamEvent::ToolCallStart { id: call.id.clone(), name: call.name.clone() });
            }
            let text = if call.arguments.trim().is_empty() { "{}" } else { call.arguments.as_str() };
            match serde_json::from_str::<Value>(text) {
                Ok(input) => out.push(StreamEvent::ToolCallEnd { id: call.id, name: call.name, input }),
                // Cut off by the token limit: incomplete, so it must not run.
                Err(_) if reason == "length" => {}
                Err(err) => {
                    return Err(decode_error(format_args!(
                        "arguments of tool call {} ({}) are not JSON: {err}",
                        call.id, call.name
                    )));
                }
            }
        }
        Ok(())
    }

    fn finish(&self, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let Some(reason) = self.finish_reason.as_deref() else {
            return Err(LlmError::new(
                LlmErrorKind::StreamBroken,
                format!("{PROVIDER}: stream ended before a finish_reason"),
            ));
        };
        if let Some(usage) = self.usage {
            out.push(StreamEvent::Usage(usage));
        }
        out.push(StreamEvent::Finished { stop_reason: stop_reason(reason, self.had_calls) });
        Ok(())
    }
}

fn stop_reason(reason: &str, had_tool_calls: bool) -> StopReason {
    match reason {
        // Some compatible servers say `stop` even when the turn ended in tool calls.
        "stop" if had_tool_calls => StopReason::ToolUse,
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}

fn parse_usage(usage: &Value) -> Usage {
    let field = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    let prompt = field("/prompt_tokens");
    let cached = field("/prompt_tokens_details/cached_tokens").min(prompt);
    Usage {
        input_tokens: prompt - cached,
        output_tokens: field("/completion_tokens"),
        cache_read_input_tokens: cached,
        cache_creation_input_tokens: 0,
    }
}

impl WireDecoder for StreamDecoder {
    fn on_event(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return self.finish(out);
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|err| decode_error(format_args!("chunk is not JSON: {err}")))?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(in_band_error(error));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(parse_usage(usage));
        }
        let choices = chunk.get("choices").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        // We never ask for n > 1, so only the first choice is ours.
        let Some(choice) = choices.iter().find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0) else {
            return Ok(());
        };
        if self.finish_reason.is_some() {
            return Ok(()); // nothing but usage is expected after the finish
        }
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        for field in ["content", "refusal"] {
            if let Some(text) = delta.get(field).and_then(Value::as_str).filter(|t| !t.is_empty()) {
                out.push(StreamEvent::TextDelta(text.to_owned()));
            }
        }
        if let Some(fragments) = delta.get("tool_calls").and_then(Value::as_array) {
            for (position, fragment) in fragments.iter().enumerate() {
                self.on_tool_call_fragment(position, fragment, out);
                self.had_calls = true;
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_calls(reason, out)?;
            self.finish_reason = Some(reason.to_owned());
        }
        Ok(())
    }

    /// The body ended without `[DONE]`: broken, even after a `finish_reason` (see module docs).
    fn on_eof(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let after = if self.finish_reason.is_some() { "after its finish_reason but " } else { "" };
        Err(LlmError::new(LlmErrorKind::StreamBroken, format!("{PROVIDER}: stream ended {after}before [DONE]")))
    }
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
