//! The response stream: its events as typed values, and the decoder that normalizes them into
//! [`StreamEvent`](crate::llm::StreamEvent)s.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{PROVIDER, decode_error, in_band_error};
use crate::llm::http::WireDecoder;
use crate::llm::sse::SseEvent;
use crate::llm::tool_names::WireNames;
use crate::llm::{ContentBlock, LlmError, LlmErrorKind, StopReason, StreamEvent, Usage};

pub(super) struct Call {
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
    /// `reasoning_content` streamed so far, not yet closed into a block.
    reasoning: String,
    /// The request's shortened tool names, to give calls their own names back.
    names: WireNames,
}

impl StreamDecoder {
    pub(super) fn new(names: WireNames) -> Self {
        Self { names, ..Self::default() }
    }

    /// The reasoning streamed so far becomes a block of the answer once anything else comes
    /// (it always comes first), so the history keeps it on the message it belongs to.
    fn close_reasoning(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.reasoning.is_empty() {
            let text = std::mem::take(&mut self.reasoning);
            out.push(StreamEvent::Reasoning(ContentBlock::Reasoning { text }));
        }
    }

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
            call.name = self.names.restore(name.to_owned());
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

pub(super) fn stop_reason(reason: &str, had_tool_calls: bool) -> StopReason {
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

pub(super) fn parse_usage(usage: &Value) -> Usage {
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
        if let Some(text) = delta.get("reasoning_content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            self.reasoning.push_str(text);
            out.push(StreamEvent::ReasoningDelta(text.to_owned()));
        }
        let answers = ["content", "refusal", "tool_calls"].iter().any(|field| {
            delta
                .get(field)
                .is_some_and(|value| value.as_str().is_none_or(|text| !text.is_empty()) && !value.is_null())
        });
        if answers || choice.get("finish_reason").is_some_and(|reason| !reason.is_null()) {
            self.close_reasoning(out);
        }
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
