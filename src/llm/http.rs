//! What both wire adapters share about HTTP: the client with its timeouts, classifying
//! transport failures and error responses, `retry-after` parsing, and the loop that turns an
//! SSE body into an [`EventStream`].
//!
//! Nothing here waits or retries: that is [`super::retry::RetryingProvider`]'s job alone.

use std::collections::VecDeque;
use std::time::Duration;

use futures::FutureExt;
use futures::stream::{self, BoxStream, StreamExt};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};

use super::sse::{self, SseEvent};
use super::{EventStream, LlmError, LlmErrorKind, StreamEvent};

/// Network timeouts of one provider.
///
/// There is deliberately no total timeout: a long answer may stream for many minutes, and what
/// matters is that bytes keep coming. `idle_read` bounds each wait for the next bytes (the
/// response head included), so a silent connection fails as [`LlmErrorKind::Timeout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpTimeouts {
    pub connect: Duration,
    pub idle_read: Duration,
}

impl Default for HttpTimeouts {
    fn default() -> Self {
        Self { connect: Duration::from_secs(10), idle_read: Duration::from_secs(120) }
    }
}

/// Builds the client of one provider. A build failure (e.g. the TLS backend cannot start) is
/// kept as a `Config` error and reported by every request instead of panicking in `new`.
pub(crate) fn build_client(timeouts: HttpTimeouts) -> Result<reqwest::Client, LlmError> {
    crate::tls::http_client()
        .connect_timeout(timeouts.connect)
        .read_timeout(timeouts.idle_read)
        .build()
        .map_err(|err| LlmError::new(LlmErrorKind::Config, format!("cannot build HTTP client: {err}")))
}

/// `base_url` joined with `path`, tolerating a trailing slash on the base (which may carry a
/// path prefix such as a gateway's `/anthropic`).
pub(crate) fn join_url(base_url: &str, path: &str) -> String {
    format!("{}{}", base_url.trim_end_matches('/'), path)
}

/// Classifies a failure of sending the request (before any response head arrived).
pub(crate) fn send_error(provider: &str, err: &reqwest::Error) -> LlmError {
    let kind = if err.is_builder() {
        LlmErrorKind::Config
    } else if err.is_connect() {
        LlmErrorKind::Connect
    } else if err.is_timeout() {
        LlmErrorKind::Timeout
    } else {
        // Connection reset or closed before the response head: nothing was received.
        LlmErrorKind::Connect
    };
    LlmError::new(kind, format!("{provider}: request failed: {}", error_chain(err)))
}

/// Classifies a failure while reading the streamed body.
pub(crate) fn body_error(provider: &str, err: &reqwest::Error) -> LlmError {
    if err.is_timeout() {
        LlmError::new(LlmErrorKind::Timeout, format!("{provider}: no data within the idle timeout"))
    } else {
        LlmError::new(LlmErrorKind::StreamBroken, format!("{provider}: stream broke: {}", error_chain(err)))
    }
}

/// reqwest's top-level message is often just "error sending request"; the cause is below it.
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// The wait a provider asked for: `retry-after-ms` (float milliseconds) first, then
/// `retry-after` as float seconds. The HTTP-date form is ignored; backoff covers it.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let positive = |secs: f64| (secs.is_finite() && secs > 0.0).then(|| Duration::from_secs_f64(secs));
    if let Some(ms) =
        header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()).and_then(|ms| positive(ms / 1000.0))
    {
        return Some(ms);
    }
    header("retry-after").and_then(|v| v.parse::<f64>().ok()).and_then(positive)
}

/// An error response as received, before the wire-specific classification.
#[derive(Debug)]
pub(crate) struct ErrorResponse {
    pub status: u16,
    pub headers: HeaderMap,
    /// The parsed JSON body, or `Null` when the body was not JSON.
    pub json: serde_json::Value,
    pub raw: String,
}

impl ErrorResponse {
    /// Reads the body of a non-success response. A body that cannot be read still yields an
    /// error with the status (the status is what classification needs most).
    pub async fn read(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let raw = response.text().await.unwrap_or_default();
        let json = serde_json::from_str(&raw).unwrap_or(serde_json::Value::Null);
        Self { status, headers, json, raw }
    }

    /// `error.message` of the JSON body (both wire formats use it), else a short raw excerpt.
    pub fn message(&self) -> String {
        if let Some(msg) = self.json.pointer("/error/message").and_then(|m| m.as_str()) {
            return msg.to_owned();
        }
        let raw = self.raw.trim();
        if raw.is_empty() {
            return reqwest::StatusCode::from_u16(self.status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no details")
                .to_owned();
        }
        crate::text::excerpt(raw, 500)
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Turns the classified kind into the final error: message with status and request id,
    /// `retry_after`, and the `x-should-retry` override.
    ///
    /// `x-should-retry: false` (the Stainless SDKs' override) makes a retryable kind
    /// non-retryable without inventing a new field on [`LlmError`]: a 429 becomes
    /// `QuotaExhausted` (a rate limit we must not wait out), anything else `InvalidRequest`;
    /// the message says why. `x-should-retry: true` is not used to retry kinds we consider
    /// permanent (auth, context overflow): resending those cannot help.
    pub fn into_error(self, provider: &str, kind: LlmErrorKind) -> LlmError {
        let request_id = self.header("request-id").or_else(|| self.header("x-request-id"));
        let mut message = match request_id {
            Some(id) => format!("{provider} HTTP {} (request {id}): {}", self.status, self.message()),
            None => format!("{provider} HTTP {}: {}", self.status, self.message()),
        };
        let mut kind = kind;
        if self.header("x-should-retry").is_some_and(|v| v.trim().eq_ignore_ascii_case("false"))
            && kind.is_retryable()
        {
            kind = if kind == LlmErrorKind::RateLimited {
                LlmErrorKind::QuotaExhausted
            } else {
                LlmErrorKind::InvalidRequest
            };
            message.push_str(" (provider sent x-should-retry: false)");
        }
        LlmError::new(kind, message).with_retry_after(retry_after(&self.headers))
    }
}

/// The status-only part of classification shared by both wire formats.
pub(crate) fn kind_for_status(status: u16) -> LlmErrorKind {
    match status {
        401 | 403 => LlmErrorKind::Auth,
        402 => LlmErrorKind::QuotaExhausted,
        429 => LlmErrorKind::RateLimited,
        529 => LlmErrorKind::Overloaded,
        408 | 409 => LlmErrorKind::Server,
        500..=599 => LlmErrorKind::Server,
        _ => LlmErrorKind::InvalidRequest,
    }
}

/// A wire format's stream state machine: SSE events in, normalized events out.
pub(crate) trait WireDecoder: Send + 'static {
    /// Handles one SSE event, pushing what it produced. Returning `Err` ends the stream after
    /// the pushed events.
    fn on_event(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), LlmError>;
    /// The body ended. Must either push `Finished` or fail (usually `StreamBroken`).
    fn on_eof(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), LlmError>;
}

/// Posts one streaming request's JSON `body` (headers already set on `request`) and drives its
/// answer: a refusal becomes the provider's error, classified by `classify`; a success is
/// decoded by `decoder`. What both wires share once their request is built.
pub(crate) async fn post_stream<D: WireDecoder>(
    provider: &'static str,
    request: reqwest::RequestBuilder,
    body: bytes::Bytes,
    classify: fn(&ErrorResponse) -> LlmErrorKind,
    decoder: D,
) -> Result<EventStream, LlmError> {
    let response = request
        .header("accept", "text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|err| send_error(provider, &err))?;
    if !response.status().is_success() {
        let error = ErrorResponse::read(response).await;
        let kind = classify(&error);
        return Err(error.into_error(provider, kind));
    }
    Ok(drive(provider, response, decoder))
}

/// A credential as a header value, marked sensitive so it never shows in logs or debug output.
pub(crate) fn secret_header(provider: &str, value: &str) -> Result<HeaderValue, LlmError> {
    let mut header = HeaderValue::from_str(value).map_err(|_| {
        LlmError::new(LlmErrorKind::Config, format!("{provider} API key is not a valid header value"))
    })?;
    header.set_sensitive(true);
    Ok(header)
}

/// Drives `decoder` over the SSE body of `response`. The stream ends right after `Finished`
/// or the first error, so callers never see anything after either.
pub(crate) fn drive<D: WireDecoder>(
    provider: &'static str,
    response: reqwest::Response,
    decoder: D,
) -> EventStream {
    struct State<D> {
        sse: futures::stream::BoxStream<'static, Result<SseEvent, reqwest::Error>>,
        decoder: D,
        queue: VecDeque<Result<StreamEvent, LlmError>>,
        done: bool,
    }
    let state =
        State { sse: sse::decode(response.bytes_stream()).boxed(), decoder, queue: VecDeque::new(), done: false };
    stream::unfold(state, move |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                return Some((item, st));
            }
            if st.done {
                return None;
            }
            let mut out = Vec::new();
            let mut eof = false;
            let result = match st.sse.next().await {
                Some(Ok(event)) => st.decoder.on_event(event, &mut out),
                Some(Err(err)) => Err(body_error(provider, &err)),
                None => {
                    eof = true;
                    st.decoder.on_eof(&mut out)
                }
            };
            let mut finished = false;
            for event in out {
                finished = matches!(event, StreamEvent::Finished { .. });
                st.queue.push_back(Ok(event));
                if finished {
                    break;
                }
            }
            let failed = result.is_err();
            if let Err(err) = result
                && !finished
            {
                st.queue.push_back(Err(err));
            }
            if finished && !eof {
                finish_body(std::mem::replace(&mut st.sse, stream::empty().boxed()));
            }
            st.done = eof || finished || failed;
        }
    })
    .boxed()
}

/// How long a finished answer's body is read on in the background for its end.
const BODY_END_LIMIT: Duration = Duration::from_secs(5);

/// Reads the rest of a finished answer's body (after `message_stop` or `[DONE]`, normally only
/// the end of the body), so its connection goes back to the client's pool: hyper reuses a
/// connection only once its body was read to the end, and a dropped one is closed. Without it
/// every model call paid a new connection (a TCP and TLS handshake to a real provider). What
/// has already arrived is read at once; a server slow to end the body is read on in the
/// background, for at most [`BODY_END_LIMIT`].
fn finish_body(mut body: BoxStream<'static, Result<SseEvent, reqwest::Error>>) {
    for _ in 0..64 {
        match body.next().now_or_never() {
            Some(Some(_)) => {}
            Some(None) => return,
            None => break,
        }
    }
    tokio::spawn(async move {
        let _ = tokio::time::timeout(BODY_END_LIMIT, async { while body.next().await.is_some() {} }).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn retry_after_prefers_ms_then_seconds() {
        assert_eq!(retry_after(&headers(&[("retry-after-ms", "250.5")])), Some(Duration::from_micros(250_500)));
        assert_eq!(
            retry_after(&headers(&[("retry-after-ms", "100"), ("retry-after", "7")])),
            Some(Duration::from_millis(100))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "1.5")])), Some(Duration::from_millis(1500)));
        assert_eq!(retry_after(&headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")])), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-3")])), None);
        assert_eq!(
            retry_after(&headers(&[("retry-after-ms", "nan"), ("retry-after", "2")])),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_after(&headers(&[])), None);
    }

    #[test]
    fn x_should_retry_false_makes_errors_permanent() {
        let response = |status, extra: &[(&'static str, &'static str)]| ErrorResponse {
            status,
            headers: headers(extra),
            json: serde_json::json!({"error": {"message": "nope"}}),
            raw: String::new(),
        };
        let err = response(429, &[("x-should-retry", "false")]).into_error("test", LlmErrorKind::RateLimited);
        assert_eq!(err.kind, LlmErrorKind::QuotaExhausted);
        let err = response(503, &[("x-should-retry", "false")]).into_error("test", LlmErrorKind::Server);
        assert_eq!(err.kind, LlmErrorKind::InvalidRequest);
        assert!(err.message.contains("x-should-retry"));
        let err = response(503, &[("request-id", "req_1")]).into_error("test", LlmErrorKind::Server);
        assert_eq!(err.kind, LlmErrorKind::Server);
        assert_eq!(err.message, "test HTTP 503 (request req_1): nope");
    }

    #[test]
    fn url_join_strips_trailing_slash() {
        assert_eq!(join_url("http://h:1/anthropic/", "/v1/messages"), "http://h:1/anthropic/v1/messages");
        assert_eq!(join_url("http://h:1", "/v1/messages"), "http://h:1/v1/messages");
    }
}
