//! The Anthropic Messages API (`POST /v1/messages`, streaming), hand-written on reqwest.
//!
//! Request ([`request`]): our [`Message`](super::Message)s map one to one onto Anthropic
//! messages with content blocks, written from borrowed wire structs straight to bytes
//! ([`super::body`]). Structured output is a forced final tool ([`super::structured`]).
//! Response ([`stream`]): the SSE event flow of `message_start` → blocks
//! (`content_block_start` / `_delta` / `_stop`, keyed by `index`) → `message_delta` →
//! `message_stop`, normalized into [`StreamEvent`](super::StreamEvent)s. Each event is read into
//! a typed value (`Event`) whose fields are lenient: a missing or odd field the decoder can do
//! without never fails a stream. Failures are only classified here; waiting and retrying happen
//! in [`super::retry`].

use futures::future::BoxFuture;

use super::body::Resendable;
use super::http::{self, ErrorResponse, HttpTimeouts};
use super::options::WireOptions;
use super::tool_names::WireNames;
use super::{EventStream, LlmError, LlmErrorKind, ModelRequest, Provider};

const PROVIDER: &str = "anthropic";
const API_VERSION: &str = "2023-06-01";
/// Lets thinking happen between tool calls, not only before the first (Claude 4 models; later
/// ones do it anyway, and the header is harmless to them).
const INTERLEAVED_THINKING: &str = "interleaved-thinking-2025-05-14";

/// Where and how to reach the Anthropic API (or a compatible gateway).
#[derive(Clone)]
pub struct AnthropicConfig {
    /// E.g. `https://api.anthropic.com`; may carry a path prefix (`http://gw/anthropic`).
    pub base_url: String,
    pub api_key: String,
    pub timeouts: HttpTimeouts,
    pub options: WireOptions,
}

impl std::fmt::Debug for AnthropicConfig {
    /// Never prints the key: configs end up in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("timeouts", &self.timeouts)
            .field("options", &self.options)
            .finish()
    }
}

/// A [`Provider`] speaking the Anthropic Messages wire format.
pub struct AnthropicProvider {
    url: String,
    api_key: String,
    options: WireOptions,
    client: Result<reqwest::Client, LlmError>,
}

impl AnthropicProvider {
    pub fn new(config: AnthropicConfig) -> Self {
        Self {
            url: http::join_url(&config.base_url, "/v1/messages"),
            api_key: config.api_key,
            options: config.options,
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
        let thinks = request.request().reasoning.or(self.options.reasoning).is_some();
        let decoder = StreamDecoder::new(WireNames::of(request.request()));
        Box::pin(async move {
            let client = self.client.clone()?;
            let mut request = client
                .post(&self.url)
                .header("x-api-key", http::secret_header(PROVIDER, &self.api_key)?)
                .header("anthropic-version", API_VERSION);
            if thinks {
                request = request.header("anthropic-beta", INTERLEAVED_THINKING);
            }
            http::post_stream(PROVIDER, request, body?, classify_http, decoder).await
        })
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

mod request;
#[cfg(test)]
mod request_tests;
mod stream;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use request::encode;
use stream::StreamDecoder;
