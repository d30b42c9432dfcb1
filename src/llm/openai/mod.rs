//! OpenAI Chat Completions (`POST {base}/chat/completions`, streaming), hand-written on reqwest.
//!
//! Also the adapter for the many compatible servers (Ollama, vLLM, llama.cpp, gateways), so
//! the stream parser is lenient where they are known to differ: usage on the finish chunk or on
//! a chunk with `choices` empty, null or missing; tool calls without ids. Not about the end: a
//! stream must close with `[DONE]` (OpenAI's and every major compatible server's do), since one
//! that stops after its finish reason may have lost its usage and cannot be told from a cut.
//! Chunks are walked as `serde_json::Value` rather than typed: those servers vary too much.
//! The request body ([`request`]) is written from borrowed wire structs straight to bytes
//! ([`super::body`]); the stream decoder is [`stream`].
//! Failures are only classified here; waiting and retrying happen in [`super::retry`].

use futures::future::BoxFuture;
use serde_json::Value;

use super::body::Resendable;
use super::http::{self, ErrorResponse, HttpTimeouts};
use super::options::WireOptions;
use super::tool_names::WireNames;
use super::{EventStream, LlmError, LlmErrorKind, ModelRequest, Provider};

const PROVIDER: &str = "openai";

/// Where and how to reach an OpenAI-compatible Chat Completions endpoint.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// Including the version path: `https://api.openai.com/v1`, `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …`; local servers usually need none.
    pub api_key: Option<String>,
    pub timeouts: HttpTimeouts,
    pub options: WireOptions,
}

impl std::fmt::Debug for OpenAiConfig {
    /// Never prints the key: configs end up in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeouts", &self.timeouts)
            .field("options", &self.options)
            .finish()
    }
}

/// A [`Provider`] speaking the OpenAI Chat Completions wire format.
pub struct OpenAiProvider {
    url: String,
    api_key: Option<String>,
    /// The provider is `api.openai.com` itself (see [`request`] for what that changes).
    official: bool,
    options: WireOptions,
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
            official,
            options: config.options,
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
        let decoder = StreamDecoder::new(WireNames::of(request.request()));
        Box::pin(async move {
            let client = self.client.clone()?;
            let mut request = client.post(&self.url);
            if let Some(key) = &self.api_key {
                request = request.header("authorization", http::secret_header(PROVIDER, &format!("Bearer {key}"))?);
            }
            http::post_stream(PROVIDER, request, body?, classify_http, decoder).await
        })
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

mod request;
mod stream;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use request::encode;
use stream::StreamDecoder;
