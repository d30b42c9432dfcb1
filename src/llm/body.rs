//! Request bodies, serialized once per model call.
//!
//! A model call copies no message on its way to the network: the request shares the agent's
//! history ([`ModelRequest::messages`]), each wire adapter writes its body from borrowed wire
//! structs straight to bytes, and [`Resendable`] keeps those bytes for every later attempt of
//! the call ([`super::retry`]), which sends them again without serializing anything.

use std::sync::OnceLock;

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{ContentBlock, LlmError, LlmErrorKind, ModelRequest};

/// A [`ModelRequest`] that may be sent more than once, and the body its first attempt wrote.
///
/// The bytes live here, beside the request, rather than in the adapter or in the request
/// itself: the retry layer holds one `Resendable` per call and hands it to each attempt, so the
/// body is serialized once however many attempts there are; and a `Resendable` never changes
/// its request, so the bytes cannot go stale (a `ModelRequest` is plain data that its callers
/// edit, compaction's summary call for one). A `Resendable` goes to one provider: the bytes of
/// its first attempt are the bytes of every attempt.
pub struct Resendable {
    request: ModelRequest,
    body: OnceLock<Result<Bytes, LlmError>>,
}

impl Resendable {
    pub fn new(request: ModelRequest) -> Self {
        Self { request, body: OnceLock::new() }
    }

    pub fn request(&self) -> &ModelRequest {
        &self.request
    }

    /// The body an attempt sends: the one an earlier attempt wrote, else `encode`d now.
    pub(crate) fn body(
        &self,
        encode: impl FnOnce(&ModelRequest) -> Result<Bytes, LlmError>,
    ) -> Result<Bytes, LlmError> {
        self.body.get_or_init(|| encode(&self.request)).clone()
    }
}

/// `body` as JSON bytes, written into one buffer of about the right size ([`size_hint`]). A
/// wire struct that would not serialize (none does: every key is a string) is a `Config` error,
/// as reqwest's `.json` reported one.
pub(crate) fn to_bytes(body: &impl Serialize, size_hint: usize, provider: &str) -> Result<Bytes, LlmError> {
    let mut out = Vec::with_capacity(size_hint);
    serde_json::to_writer(&mut out, body).map_err(|err| unserializable(provider, &err))?;
    Ok(Bytes::from(out))
}

fn unserializable(provider: &str, err: &serde_json::Error) -> LlmError {
    LlmError::new(LlmErrorKind::Config, format!("{provider}: cannot serialize the request: {err}"))
}

/// `value` as JSON text of its own: a message a session's later requests write as it is
/// ([`super::encoded_history`]). An error as [`to_bytes`] reports one.
pub(crate) fn raw(value: &impl Serialize, provider: &str) -> Result<Box<RawValue>, LlmError> {
    serde_json::value::to_raw_value(value).map_err(|err| unserializable(provider, &err))
}

/// About the size of a request's body on either wire, a little over rather than under: its
/// text, ids and JSON values, what each wire wraps them in, and room for JSON escapes. Only
/// the size of the first buffer: a low guess costs a reallocation, never an error.
pub(crate) fn size_hint(request: &ModelRequest) -> usize {
    const PER_MESSAGE: usize = 48;
    const PER_BLOCK: usize = 64;
    let blocks: usize = request
        .messages
        .iter()
        .flat_map(|message| &message.content)
        .map(|block| {
            PER_BLOCK
                + match block {
                    ContentBlock::Text { text } => text.len(),
                    ContentBlock::ToolUse { id, name, input } => id.len() + name.len() + json_len(input),
                    ContentBlock::ToolResult { tool_use_id, content, .. } => tool_use_id.len() + content.len(),
                    ContentBlock::Thinking { thinking, signature } => {
                        thinking.len() + signature.as_ref().map_or(0, String::len)
                    }
                    ContentBlock::RedactedThinking { data } => data.len(),
                    ContentBlock::Reasoning { text } => text.len(),
                }
        })
        .sum();
    let tools: usize = request
        .tools
        .iter()
        .map(|tool| PER_BLOCK + tool.name.len() + tool.description.len() + tool.input_schema.json().get().len())
        .sum();
    let output = request.output.as_ref().map_or(0, |format| 2 * json_len(&format.schema) + 1024);
    let system = request.system.as_ref().map_or(0, String::len);
    let raw = 256 + request.messages.len() * PER_MESSAGE + blocks + tools + output + system;
    // Quotes, newlines and tabs take two bytes once escaped.
    raw + raw / 4
}

/// About the length of `value` as compact JSON (escapes aside).
fn json_len(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 20,
        Value::String(text) => text.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|item| json_len(item) + 1).sum::<usize>(),
        Value::Object(fields) => {
            2 + fields.iter().map(|(key, value)| key.len() + 4 + json_len(value)).sum::<usize>()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use serde_json::json;

    use super::*;
    use crate::llm::{Message, Role, ToolSpec, anthropic, openai};

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            tool_choice: Default::default(),
            reasoning: None,
            cache_key: None,
            model: "m".into(),
            system: Some("Be brief.".into()),
            messages: messages.into(),
            tools: ToolSpec::list([ToolSpec {
                name: "read_file".into(),
                description: "Read a file.".into(),
                input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}).into(),
            }]),
            max_tokens: 100,
            output: None,
            retries: Default::default(),
            encoded: Default::default(),
        }
    }

    #[test]
    fn every_attempt_sends_the_bytes_the_first_one_wrote() {
        let call = Resendable::new(request(vec![Message::user_text("hi")]));
        let encoded = Cell::new(0);
        let encode = |request: &ModelRequest| {
            encoded.set(encoded.get() + 1);
            Ok(Bytes::from(request.model.clone()))
        };
        let first = call.body(encode).unwrap();
        let second = call.body(encode).unwrap();
        assert_eq!(encoded.get(), 1);
        assert_eq!(first.as_ptr(), second.as_ptr(), "the same bytes, not a copy");
    }

    #[test]
    fn the_size_hint_covers_a_typical_body_on_either_wire() {
        let output: String =
            (0..200).map(|line| format!("{line:>4}\tlet x = get(\"/items/{line}\").await?;\n")).collect();
        let mut messages = Vec::new();
        for turn in 0..20 {
            let id = format!("toolu_{turn}");
            messages.push(Message::user_text(format!("Fix the \"page\" parameter, turn {turn}.")));
            messages.push(Message::assistant(vec![
                ContentBlock::Text { text: "Reading it.".into() },
                ContentBlock::ToolUse { id: id.clone(), name: "read_file".into(), input: json!({"path": "a.rs"}) },
            ]));
            messages.push(Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: id,
                    content: output.clone(),
                    is_error: false,
                }],
            });
        }
        let request = request(messages);
        let hint = size_hint(&request);
        for body in [
            anthropic::encode(&request, &Default::default()).unwrap(),
            openai::encode(&request, &Default::default(), false).unwrap(),
        ] {
            assert!(hint >= body.len(), "hint {hint} < body {}", body.len());
            assert!(hint < body.len() * 3 / 2, "hint {hint} far above body {}", body.len());
        }
    }
}
