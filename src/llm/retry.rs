//! The one place that waits and retries LLM requests.
//!
//! Adapters only classify failures. [`RetryingProvider`] wraps any [`Provider`] and re-sends a
//! request when the failure is retryable, within one budget of attempts per call:
//!
//! - **Before any content** the retry is invisible: non-content events of the failed attempt
//!   (e.g. Anthropic's early `Usage`) are held back and dropped, so it leaves no trace.
//! - **After content** (a stream cut, truncated or dropped mid-answer) the caller may already
//!   have shown text, so the retry is announced: a [`StreamEvent::Restarted`] says "what this
//!   response streamed so far is void", then the new attempt's events follow. A half answer
//!   is never passed off as a whole one, and a transient cut no longer fails the turn.
//!
//! The backoff follows the official Anthropic/OpenAI SDKs (see `llm-wire.md` §2.4).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream;

use super::{EventStream, LlmError, ModelRequest, Provider, Resendable, StreamEvent};

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

/// One retry about to happen, as told to the request's [`RetryReporter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryNotice {
    /// The attempt about to be sent: 2 for the first retry.
    pub attempt: u32,
    /// The wait before it.
    pub delay_ms: u64,
    /// Why the previous attempt failed (the provider's error text).
    pub reason: String,
}

/// Who hears about a request's retries (the agent, which records and streams them): nobody by
/// default. Called before each backoff, whether or not content was already streamed.
#[derive(Clone, Default)]
pub struct RetryReporter(Option<Arc<dyn Fn(RetryNotice) + Send + Sync>>);

impl RetryReporter {
    pub fn new(report: impl Fn(RetryNotice) + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(report)))
    }

    fn report(&self, notice: RetryNotice) {
        if let Some(report) = &self.0 {
            report(notice);
        }
    }
}

impl std::fmt::Debug for RetryReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "RetryReporter(set)" } else { "RetryReporter(none)" })
    }
}

/// A [`Provider`] that retries its inner provider per [`RetryPolicy`].
///
/// Its `stream` future resolves once the first content event (or a `Finished`) arrived, or
/// with the last error once retrying is pointless; a later retryable failure restarts the
/// response inside the returned stream (see the module docs).
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

/// One call's attempts: the provider, the request re-sent (its body serialized once), and the
/// retries spent so far.
struct Attempts {
    inner: Arc<dyn Provider>,
    policy: RetryPolicy,
    request: Resendable,
    retries: u32,
}

/// How one attempt ended before any content was forwarded.
enum Attempt {
    /// Content (or the end of the response) arrived: hand this stream to the caller.
    Forward(EventStream),
    Failed(LlmError),
}

/// Where a restartable stream is.
enum Phase {
    Streaming(EventStream),
    /// A retryable failure after content was announced; the next attempt opens after backoff.
    Reopening(LlmError),
    Done,
}

impl Attempts {
    async fn attempt(&self) -> Attempt {
        let mut inner = match self.inner.attempt(&self.request).await {
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

    /// Whether `error` may be retried, and if so spends a retry; otherwise marks the error as
    /// final (naming the attempts made when there were several).
    fn may_retry(&mut self, error: &mut LlmError) -> bool {
        if !error.is_retryable() {
            return false;
        }
        if self.retries >= self.policy.max_retries {
            if self.retries > 0 {
                error.message = format!("{} (gave up after {} attempts)", error.message, self.retries + 1);
            }
            return false;
        }
        self.retries += 1;
        true
    }

    /// Waits out the backoff before the retry just granted by [`Self::may_retry`].
    async fn back_off(&self, error: &LlmError, after_content: bool) {
        let delay = self.policy.delay(self.retries - 1, error);
        self.request.request().retries.report(RetryNotice {
            attempt: self.retries + 1,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            reason: error.message.clone(),
        });
        // Only the classification and the provider's own error text: never request content.
        tracing::warn!(
            attempt = self.retries,
            max_attempts = self.policy.max_retries + 1,
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            kind = ?error.kind,
            error = %error.message,
            after_content,
            "LLM request failed; retrying"
        );
        tokio::time::sleep(delay).await;
    }

    /// Opens a response, retrying failures that come before any content.
    async fn open(&mut self) -> Result<EventStream, LlmError> {
        loop {
            let mut error = match self.attempt().await {
                Attempt::Forward(stream) => return Ok(stream),
                Attempt::Failed(error) => error,
            };
            if !self.may_retry(&mut error) {
                return Err(error);
            }
            self.back_off(&error, false).await;
        }
    }

    /// The stream handed to the caller: `first`'s events, and after a retryable failure a
    /// `Restarted` marker followed by the next attempt's events.
    fn restartable(self, first: EventStream) -> EventStream {
        stream::unfold((self, Phase::Streaming(first)), |(mut attempts, mut phase)| async move {
            loop {
                match phase {
                    Phase::Done => return None,
                    Phase::Reopening(error) => {
                        attempts.back_off(&error, true).await;
                        match attempts.open().await {
                            Ok(next) => phase = Phase::Streaming(next),
                            Err(error) => return Some((Err(error), (attempts, Phase::Done))),
                        }
                    }
                    Phase::Streaming(mut current) => {
                        return match current.next().await {
                            Some(Err(mut error)) => {
                                if attempts.may_retry(&mut error) {
                                    let restarted = StreamEvent::Restarted { reason: error.message.clone() };
                                    Some((Ok(restarted), (attempts, Phase::Reopening(error))))
                                } else {
                                    Some((Err(error), (attempts, Phase::Done)))
                                }
                            }
                            Some(event) => Some((event, (attempts, Phase::Streaming(current)))),
                            None => None,
                        };
                    }
                }
            }
        })
        .boxed()
    }
}

impl Provider for RetryingProvider {
    fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<EventStream, LlmError>> {
        let request = Resendable::new(request);
        let mut attempts = Attempts { inner: self.inner.clone(), policy: self.policy, request, retries: 0 };
        Box::pin(async move {
            let first = attempts.open().await?;
            Ok(attempts.restartable(first))
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
        /// How often a body was serialized.
        encoded: AtomicUsize,
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

        /// As the wire adapters do: the body is serialized by the first attempt only.
        fn attempt(&self, request: &Resendable) -> BoxFuture<'_, Result<EventStream, LlmError>> {
            let _ = request.body(|_| {
                self.encoded.fetch_add(1, Ordering::SeqCst);
                Ok(bytes::Bytes::new())
            });
            self.stream(request.request().clone())
        }
    }

    fn fake(script: Vec<Script>) -> Arc<Fake> {
        Arc::new(Fake {
            script: Mutex::new(script.into()),
            calls: AtomicUsize::new(0),
            encoded: AtomicUsize::new(0),
        })
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
        ModelRequest {
            tool_choice: Default::default(),
            reasoning: None,
            cache_key: None,
            model: "m".into(),
            system: None,
            messages: Default::default(),
            tools: Default::default(),
            max_tokens: 10,
            output: None,
            retries: Default::default(),
            encoded: Default::default(),
        }
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
    async fn every_attempt_of_a_call_sends_the_body_serialized_once() {
        let fake = fake(vec![
            Script::OpenError(err(LlmErrorKind::Overloaded)),
            Script::Events(vec![Ok(text("par")), Err(err(LlmErrorKind::StreamBroken))]),
            Script::Events(ok_events()),
        ]);
        run(&fake, fast()).await.unwrap();
        assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
        assert_eq!(fake.encoded.load(Ordering::SeqCst), 1);
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
    async fn a_retryable_break_after_content_restarts_the_response_announced() {
        let fake = fake(vec![
            Script::Events(vec![Ok(usage(1)), Ok(text("par")), Err(err(LlmErrorKind::StreamBroken))]),
            Script::Events(ok_events()),
        ]);
        let events = run(&fake, fast()).await.unwrap();
        let mut expected =
            vec![Ok(usage(1)), Ok(text("par")), Ok(StreamEvent::Restarted { reason: "boom".into() })];
        expected.extend(ok_events());
        assert_eq!(events, expected);
        assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_non_retryable_error_after_content_is_passed_through_and_never_resent() {
        let fake = fake(vec![Script::Events(vec![Ok(text("par")), Err(err(LlmErrorKind::Decode))])]);
        let events = run(&fake, fast()).await.unwrap();
        assert_eq!(events, vec![Ok(text("par")), Err(err(LlmErrorKind::Decode))]);
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn restarts_share_the_call_s_retry_budget() {
        // One failure before content, then every attempt breaks after content: 4 attempts in all.
        let broken = || Script::Events(vec![Ok(text("x")), Err(err(LlmErrorKind::StreamBroken))]);
        let fake = fake(vec![Script::OpenError(err(LlmErrorKind::Overloaded)), broken(), broken(), broken()]);
        let events = run(&fake, fast()).await.unwrap();
        let restarts = events.iter().filter(|event| matches!(event, Ok(StreamEvent::Restarted { .. }))).count();
        assert_eq!(restarts, 2);
        let last = events.last().unwrap().as_ref().unwrap_err();
        assert_eq!(last.kind, LlmErrorKind::StreamBroken);
        assert!(last.message.contains("after 4 attempts"), "{}", last.message);
        assert_eq!(fake.calls.load(Ordering::SeqCst), 4);
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
