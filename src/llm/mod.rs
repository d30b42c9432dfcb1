//! Talking to LLMs: one [`Provider`] trait, normalized streaming events, and the wire adapters.
//!
//! Adapters (`anthropic`, `openai`) translate a [`ModelRequest`] into their wire format and the
//! provider's SSE stream back into [`StreamEvent`]s. They only *classify* failures into
//! [`LlmError`]; the single place that waits and retries is [`retry::RetryingProvider`], which
//! retries only while no content has been forwarded yet. A request's body is serialized once
//! per call, whatever the number of attempts ([`body`]). [`registry`] resolves `provider:model`
//! ids. `scripted` is an in-process provider for tests and benches of the agent loop, built only
//! under `cfg(test)` or the `test-support` feature.

pub mod anthropic;
pub mod body;
pub mod catalog;
pub mod conform;
pub mod embeddings;
pub mod encoded_history;
mod http;
pub mod message;
pub mod openai;
pub mod options;
pub mod pricing;
pub mod reasoning;
pub mod registry;
pub mod retry;
#[cfg(any(test, feature = "test-support"))]
pub mod scripted;
pub mod sse;
pub mod structured;
pub mod tool_names;
pub mod tool_schema;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use body::Resendable;
pub use http::HttpTimeouts;
pub use message::{ContentBlock, Message, Role, ToolSpec};
pub use reasoning::{Effort, Reasoning};
pub use structured::{FINAL_ANSWER_TOOL, OutputFormat};
pub use tool_schema::ToolSchema;

/// One call to the model.
#[derive(Debug, Clone, Default)]
pub struct ModelRequest {
    /// The model name as the provider knows it (without the `provider:` prefix).
    pub model: String,
    pub system: Option<String>,
    /// The history, shared with the agent that holds it: building a request, and copying it,
    /// copies no message. A caller that changes a request's messages gets its own copy of them
    /// (`Arc::make_mut`).
    pub messages: Arc<Vec<Message>>,
    /// The tools the model may call, shared the same way; each declaration is the one copy
    /// every session declaring it shares (`tools::shared_specs`), never a copy per session.
    pub tools: Arc<[Arc<ToolSpec>]>,
    /// Whether the model may call the declared tools in this response. The compaction summary
    /// declares the session's tools (so a history holding tool calls stays valid, and the whole
    /// prefix reads from the prompt cache) but forbids calling them.
    pub tool_choice: ToolChoice,
    /// Upper bound on the tokens of this one response (its visible part: a thinking budget
    /// comes on top, see [`reasoning`]).
    pub max_tokens: u32,
    /// Extended thinking / reasoning effort for this call; `None` leaves it to the provider's
    /// configured default.
    pub reasoning: Option<Reasoning>,
    /// What identifies the conversation to the provider's prompt cache (OpenAI
    /// `prompt_cache_key`): the session, so sessions never share a cache routing key.
    pub cache_key: Option<String>,
    /// The final answer must be JSON valid against this schema (structured output); each
    /// adapter asks for it its own way ([`structured`]).
    pub output: Option<OutputFormat>,
    /// Who hears about retries of this call ([`retry::RetryingProvider`]); adapters ignore it.
    pub retries: retry::RetryReporter,
    /// What the wire wrote of `messages` at the session's earlier calls, to write only what
    /// follows ([`encoded_history`]): the agent's, shared by its requests; a fresh one keeps
    /// nothing from before.
    pub encoded: Arc<encoded_history::EncodedHistory>,
}

/// Whether a response may call tools (structured output's forced final tool aside, which each
/// wire asks for its own way).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolChoice {
    #[default]
    Allowed,
    Forbidden,
}

/// Normalized streaming events, the same for every wire format.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Visible assistant text.
    TextDelta(String),
    /// A fragment of the model's reasoning (thinking), shown apart from the text.
    ReasoningDelta(String),
    /// A reasoning block complete, as the history keeps it and the wire wants it back
    /// ([`ContentBlock::Thinking`], [`ContentBlock::RedactedThinking`] or
    /// [`ContentBlock::Reasoning`]).
    Reasoning(ContentBlock),
    /// The model began a tool call; arguments follow.
    ToolCallStart { id: String, name: String },
    /// A fragment of a tool call's JSON arguments, as streamed (for progress only).
    ToolCallDelta { id: String, fragment: String },
    /// A tool call whose arguments are complete and parsed.
    ToolCallEnd { id: String, name: String, input: serde_json::Value },
    /// Token usage so far for this response (cumulative within one response).
    Usage(Usage),
    /// The response ended normally.
    Finished { stop_reason: StopReason },
    /// The response broke after content and is being sent again ([`retry`]): everything it
    /// streamed so far is void, and the new attempt's events follow. Usage reported before
    /// this was spent all the same.
    Restarted { reason: String },
}

impl StreamEvent {
    /// Content is what a caller may already have seen: after it, a request is never re-sent.
    pub fn is_content(&self) -> bool {
        matches!(
            self,
            Self::TextDelta(_)
                | Self::ReasoningDelta(_)
                | Self::Reasoning(_)
                | Self::ToolCallStart { .. }
                | Self::ToolCallDelta { .. }
                | Self::ToolCallEnd { .. }
        )
    }
}

/// Why a model response ended, normalized across wire formats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    Refusal,
    /// A provider value we do not know; treated like the end of the turn.
    Other(String),
}

impl StopReason {
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::Refusal => "refusal",
            Self::Other(other) => other,
        }
    }
}

/// Token usage. Input counts every prompt token, cached or not, split out for billing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// Prompt tokens that were neither read from nor written to a cache.
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
}

impl Usage {
    /// All tokens of the prompt, whichever way they were billed.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens
    }

    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens() + self.output_tokens
    }

    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
    }
}

/// What went wrong talking to a provider. Adapters classify; [`retry`] decides.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct LlmError {
    pub kind: LlmErrorKind,
    pub message: String,
    /// The provider's `retry-after-ms` / `retry-after`, when it sent one.
    pub retry_after: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlmErrorKind {
    /// 429 rate limit (retryable, honouring `retry_after`).
    RateLimited,
    /// 529 / `overloaded_error` (retryable).
    Overloaded,
    /// 5xx, 408, 409 and in-band `api_error` (retryable).
    Server,
    /// Could not connect, or the connection broke before any byte of the body (retryable).
    Connect,
    /// No byte arrived within the idle timeout (retryable before content).
    Timeout,
    /// The stream ended early or broke mid-way (retryable only before content).
    StreamBroken,
    /// The prompt does not fit the model's window: compact, never retry as is.
    ContextOverflow,
    /// 401/403: wrong or missing key.
    Auth,
    /// Spend limit or quota exhausted (a 429 that must not be retried).
    QuotaExhausted,
    /// 400/404/413 and other refusals of the request itself.
    InvalidRequest,
    /// The provider's bytes made no sense.
    Decode,
    /// Not configured: missing credentials, unknown provider.
    Config,
}

/// Each provider failure keeps its classification when it reaches a caller as `error_kind`.
impl From<LlmErrorKind> for crate::error::ErrorKind {
    fn from(kind: LlmErrorKind) -> Self {
        match kind {
            LlmErrorKind::RateLimited => Self::RateLimited,
            LlmErrorKind::Overloaded => Self::Overloaded,
            LlmErrorKind::Server => Self::Server,
            LlmErrorKind::Connect => Self::Connect,
            LlmErrorKind::Timeout => Self::Timeout,
            LlmErrorKind::StreamBroken => Self::StreamBroken,
            LlmErrorKind::ContextOverflow => Self::ContextOverflow,
            LlmErrorKind::Auth => Self::Auth,
            LlmErrorKind::QuotaExhausted => Self::QuotaExhausted,
            LlmErrorKind::InvalidRequest => Self::InvalidRequest,
            LlmErrorKind::Decode => Self::Decode,
            LlmErrorKind::Config => Self::Config,
        }
    }
}

impl LlmError {
    pub fn new(kind: LlmErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), retry_after: None }
    }

    pub fn with_retry_after(mut self, retry_after: Option<Duration>) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// Whether sending the same request again may succeed.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

impl LlmErrorKind {
    /// Whether a failure of this kind may go away if the same request is sent again. A property
    /// of the kind alone, so classification code can ask before it has built an error.
    pub fn is_retryable(self) -> bool {
        match self {
            Self::RateLimited
            | Self::Overloaded
            | Self::Server
            | Self::Connect
            | Self::Timeout
            | Self::StreamBroken => true,
            Self::ContextOverflow
            | Self::Auth
            | Self::QuotaExhausted
            | Self::InvalidRequest
            | Self::Decode
            | Self::Config => false,
        }
    }
}

/// The normalized event stream of one model response. It ends after `Finished`, or with an
/// error; a stream that ends without `Finished` was truncated and the adapter reports
/// `StreamBroken`.
pub type EventStream = BoxStream<'static, Result<StreamEvent, LlmError>>;

/// A model endpoint. Implementations must be cheap to share (`Arc<dyn Provider>`).
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// Opens one streaming response. Errors before the first event (HTTP status, connect)
    /// come back as `Err`; later ones as `Err` items of the stream.
    fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<EventStream, LlmError>>;

    /// One attempt of a request that may be sent again ([`retry::RetryingProvider`]'s attempts),
    /// opened like [`Self::stream`]. The wire adapters serialize the body on the first attempt
    /// and send the same bytes on every later one. By default an attempt streams a copy of the
    /// request, which copies no message (they are shared).
    fn attempt(&self, request: &Resendable) -> BoxFuture<'_, Result<EventStream, LlmError>> {
        self.stream(request.request().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn a_provider_failure_keeps_its_kind_as_the_snake_case_error_kind() {
        let cases = [
            (LlmErrorKind::RateLimited, "rate_limited"),
            (LlmErrorKind::Overloaded, "overloaded"),
            (LlmErrorKind::Server, "server"),
            (LlmErrorKind::Connect, "connect"),
            (LlmErrorKind::Timeout, "timeout"),
            (LlmErrorKind::StreamBroken, "stream_broken"),
            (LlmErrorKind::ContextOverflow, "context_overflow"),
            (LlmErrorKind::Auth, "auth"),
            (LlmErrorKind::QuotaExhausted, "quota_exhausted"),
            (LlmErrorKind::InvalidRequest, "invalid_request"),
            (LlmErrorKind::Decode, "decode"),
            (LlmErrorKind::Config, "config"),
        ];
        for (kind, wire) in cases {
            assert_eq!(serde_json::to_value(ErrorKind::from(kind)).unwrap(), wire, "{kind:?}");
        }
    }
}
