//! The one place that waits and retries LLM requests.
//!
//! Adapters only classify failures. [`RetryingProvider`] wraps any [`Provider`] and re-sends a
//! request when the failure is retryable *and nothing the caller could have shown yet was
//! forwarded*: once a content event went out, a retry would duplicate text or tool calls, so
//! every later error is passed through untouched. Non-content events that arrive before the
//! first content (e.g. Anthropic's early `Usage`) are held back, so a failed attempt leaves no
//! trace in the caller's accounting.
//!
//! The backoff follows the official Anthropic/OpenAI SDKs (see `llm-wire.md` §2.4).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream;

use super::{EventStream, LlmError, ModelRequest, Provider, StreamEvent};

/// How often and how long to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so at most `max_retries + 1` requests).
    pub max_retries: u32,
    /// Backoff before the first retry; doubled for each further one.
    pub initial_delay: Duration,
    /// Cap of the exponential backoff.
    pub max_delay: Duration,
    /// A provider's `retry-after` longer than this is not waited out (backoff is used instead):
    /// a turn should fail visibly rather than hang for minutes.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 4,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0 for the first retry) after `error`: the
    /// provider's `retry_after` when it is positive and reasonable, else exponential backoff
    /// with up to 25 % jitter *downwards* (so `max_delay` is a true cap).
    pub fn delay(&self, retry: u32, error: &LlmError) -> Duration {
        if let Some(wait) = error.retry_after
            && !wait.is_zero()
            && wait <= self.max_retry_after
        {
            return wait;
        }
        let factor = 2u32.checked_pow(retry).unwrap_or(u32::MAX);
        let backoff = self.initial_delay.saturating_mul(factor).min(self.max_delay);
        backoff.mul_f64(1.0 - 0.25 * fastrand::f64())
    }
}

/// A [`Provider`] that retries its inner provider per [`RetryPolicy`], only before content.
///
/// Its `stream` future resolves once the first content event (or a `Finished`) arrived, or
/// with the final error; the returned stream replays the held-back events, then passes the
/// inner stream through.
#[derive(Debug)]
pub struct RetryingProvider {
    inner: Arc<dyn Provider>,
    policy: RetryPolicy,
}

impl RetryingProvider {
    pub fn new(inner: Arc<dyn Provider>, policy: RetryPolicy) -> Self {
        Self { inner, policy }
    }
}

/// How one attempt ended before any content was forwarded.
enum Attempt {
    /// Content (or the end of the response) arrived: hand this stream to the caller.
    Forward(EventStream),
    Failed(LlmError),
}

impl RetryingProvider {
    async fn attempt(&self, request: ModelRequest) -> Attempt {
        let mut inner = match self.inner.stream(request).await {
            Ok(inner) => inner,
            Err(error) => return Attempt::Failed(error),
        };
        let mut held = Vec::new();
        loop {
            match inner.next().await {
                Some(Ok(event)) if event.is_content() => {
                    held.push(Ok(event));
                    return Attempt::Forward(stream::iter(held).chain(inner).boxed());
                }
                Some(Ok(event)) => {
                    let finished = matches!(event, StreamEvent::Finished { .. });
                    held.push(Ok(event));
                    if finished {
                        return Attempt::Forward(stream::iter(held).boxed());
                    }
                }
                Some(Err(error)) => return Attempt::Failed(error),
                // Adapters never end without `Finished` or an error; pass whatever came through.
                None => return Attempt::Forward(stream::iter(held).boxed()),
            }
        }
    }
}

impl Provider for RetryingProvider {
    fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<EventStream, LlmError>> {
        Box::pin(async move {
            let mut retry = 0;
            loop {
                let mut error = match self.attempt(request.clone()).await {
                    Attempt::Forward(stream) => return Ok(stream),
                    Attempt::Failed(error) => error,
                };
                if !error.is_retryable() {
                    return Err(error);
                }
                if retry >= self.policy.max_retries {
                    if retry > 0 {
                        error.message = format!("{} (gave up after {} attempts)", error.message, retry + 1);
                    }
                    return Err(error);
                }
                let delay = self.policy.delay(retry, &error);
                retry += 1;
                // Only the classification and the provider's own error text: never request content.
                tracing::warn!(
                    attempt = retry,
                    max_attempts = self.policy.max_retries + 1,
                    delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    kind = ?error.kind,
                    error = %error.message,
                    "LLM request failed before any content; retrying"
                );
                tokio::time::sleep(delay).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use super::*;
    use crate::llm::{LlmErrorKind, StopReason, Usage};

    /// What the fake answers to one request.
    enum Script {
        OpenError(LlmError),
        Events(Vec<Result<StreamEvent, LlmError>>),
    }

    #[derive(Debug, Default)]
    struct Fake {
        script: Mutex<VecDeque<Script>>,
        calls: AtomicUsize,
    }

    impl std::fmt::Debug for Script {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Script")
        }
    }

    impl Provider for Fake {
        fn stream(&self, _request: ModelRequest) -> BoxFuture<'_, Result<EventStream, LlmError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let next = self.script.lock().unwrap().pop_front().expect("fake provider: script exhausted");
            Box::pin(async move {
                match next {
                    Script::OpenError(error) => Err(error),
                    Script::Events(events) => Ok(stream::iter(events).boxed()),
                }
            })
        }
    }

    fn fake(script: Vec<Script>) -> Arc<Fake> {
        Arc::new(Fake { script: Mutex::new(script.into()), calls: AtomicUsize::new(0) })
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            initial_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(4),
            max_retry_after: Duration::from_secs(1),
        }
    }

    fn request() -> ModelRequest {
        ModelRequest { model: "m".into(), system: None, messages: vec![], tools: vec![], max_tokens: 10 }
    }

    fn err(kind: LlmErrorKind) -> LlmError {
        LlmError::new(kind, "boom")
    }

    fn usage(output_tokens: u64) -> StreamEvent {
        StreamEvent::Usage(Usage { output_tokens, ..Usage::default() })
    }

    fn text(t: &str) -> StreamEvent {
        StreamEvent::TextDelta(t.into())
    }

    fn finished() -> StreamEvent {
        StreamEvent::Finished { stop_reason: StopReason::EndTurn }
    }

    fn ok_events() -> Vec<Result<StreamEvent, LlmError>> {
        vec![Ok(usage(1)), Ok(text("hi")), Ok(usage(2)), Ok(finished())]
    }

    async fn run(fake: &Arc<Fake>, policy: RetryPolicy) -> Result<Vec<Result<StreamEvent, LlmError>>, LlmError> {
        let provider = RetryingProvider::new(fake.clone(), policy);
        let stream = provider.stream(request()).await?;
        Ok(stream.collect().await)
    }

    #[tokio::test]
    async fn retries_open_errors_then_succeeds() {
        let fake = fake(vec![
            Script::OpenError(err(LlmErrorKind::Overloaded)),
            Script::OpenError(err(LlmErrorKind::Connect)),
            Script::Events(ok_events()),
        ]);
        assert_eq!(run(&fake, fast()).await.unwrap(), ok_events());
        assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn non_retryable_errors_are_returned_at_once() {
        let fake = fake(vec![Script::OpenError(err(LlmErrorKind::Auth))]);
        assert_eq!(run(&fake, fast()).await.unwrap_err().kind, LlmErrorKind::Auth);
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
        let fake = self::fake(vec![Script::Events(vec![Ok(usage(1)), Err(err(LlmErrorKind::ContextOverflow))])]);
        assert_eq!(run(&fake, fast()).await.unwrap_err().kind, LlmErrorKind::ContextOverflow);
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn stream_error_before_content_is_retried_without_leaking_held_events() {
        let fake = fake(vec![
            Script::Events(vec![Ok(usage(99)), Err(err(LlmErrorKind::StreamBroken))]),
            Script::Events(ok_events()),
        ]);
        // The 99 of the failed attempt never reaches the caller.
        assert_eq!(run(&fake, fast()).await.unwrap(), ok_events());
        assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn error_after_content_is_passed_through_and_never_resent() {
        let fake =
            fake(vec![Script::Events(vec![Ok(usage(1)), Ok(text("par")), Err(err(LlmErrorKind::StreamBroken))])]);
        let events = run(&fake, fast()).await.unwrap();
        assert_eq!(events, vec![Ok(usage(1)), Ok(text("par")), Err(err(LlmErrorKind::StreamBroken))]);
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn gives_up_after_max_retries() {
        let fake = fake((0..4).map(|_| Script::OpenError(err(LlmErrorKind::Server))).collect());
        let error = run(&fake, fast()).await.unwrap_err();
        assert_eq!(error.kind, LlmErrorKind::Server);
        assert!(error.message.contains("after 4 attempts"), "{}", error.message);
        assert_eq!(fake.calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn finished_without_content_is_forwarded() {
        let fake = fake(vec![Script::Events(vec![Ok(usage(1)), Ok(finished())])]);
        assert_eq!(run(&fake, fast()).await.unwrap(), vec![Ok(usage(1)), Ok(finished())]);
    }

    #[tokio::test]
    async fn honours_retry_after() {
        let limited = err(LlmErrorKind::RateLimited).with_retry_after(Some(Duration::from_millis(60)));
        let fake = fake(vec![Script::OpenError(limited), Script::Events(ok_events())]);
        let started = Instant::now();
        run(&fake, fast()).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(60));
    }

    #[test]
    fn delay_uses_reasonable_retry_after_else_jittered_backoff() {
        let policy = RetryPolicy::default();
        let after = |d| err(LlmErrorKind::RateLimited).with_retry_after(Some(d));
        assert_eq!(policy.delay(0, &after(Duration::from_secs(3))), Duration::from_secs(3));
        assert_eq!(policy.delay(2, &after(Duration::from_secs(60))), Duration::from_secs(60));
        for retry in 0..40 {
            let want =
                Duration::from_millis(500).saturating_mul(2u32.saturating_pow(retry)).min(Duration::from_secs(8));
            for error in [err(LlmErrorKind::Server), after(Duration::from_secs(61)), after(Duration::ZERO)] {
                let got = policy.delay(retry, &error);
                assert!(got <= want && got >= want.mul_f64(0.75), "retry {retry}: {got:?} vs {want:?}");
            }
        }
    }
}
