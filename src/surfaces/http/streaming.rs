//! A turn answered as Server-Sent Events (REST `"stream": true`).
//!
//! One SSE event per [`AgentEvent`] (`event: <type>`, `data: <the event as JSON>`), then
//! `event: result` with the [`RunResult`], or `event: error` with `{code, message}`.
//!
//! - **The status is decided by the first thing the turn produces.** The service answers
//!   errors that come before the turn starts (unknown session, `SESSION_BUSY`, a bad model) at
//!   once and without events, so those get the plain JSON error and its status, like the
//!   non-streamed call; once the first event is out, the answer is a 200 stream and a later
//!   failure is an `error` event.
//! - **A client that goes away cancels its turn.** The response stream owns a drop guard of the
//!   turn's cancellation token, which is the caller's cancellation of [`TurnOptions`]: when the
//!   server drops the stream (the connection closed), the turn is interrupted and ends
//!   `cancelled`, as a cancelled MCP call does. The guard is disarmed once the result is out.
//! - The turn runs in its own task, so the service call is never dropped halfway; the stream
//!   only listens to it.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::api_error::ApiError;
use crate::agent::{AgentEvent, EventReceiver, event_channel};
use crate::error::{ErrorKind, SessionError};
use crate::session::{RunResult, TurnOptions};
use crate::surfaces::wire::ErrorBody;

/// A comment line this often keeps proxies from closing a quiet stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The listening half of a streamed turn; [`StreamedTurn::prepare`] hands out the other half.
pub struct StreamedTurn {
    events: EventReceiver,
    /// Armed from the start, so a client that leaves before the first event also cancels.
    guard: DropGuard,
}

type TurnCall = JoinHandle<Result<RunResult, SessionError>>;

impl StreamedTurn {
    /// The options to run the turn with (no wait limit, events to this stream, cancelled when
    /// the stream is dropped), and the stream's half.
    pub fn prepare() -> (TurnOptions, Self) {
        let (sender, events) = event_channel();
        let cancel = CancellationToken::new();
        let options = TurnOptions { wait: None, events: Some(sender), cancel: Some(cancel.clone()) };
        (options, Self { events, guard: cancel.drop_guard() })
    }

    /// Waits for the first event or the end of `call`, then answers: a JSON error if the call
    /// failed before the turn produced anything, else the event stream.
    pub async fn respond(mut self, mut call: TurnCall) -> Response {
        let first = tokio::select! {
            biased;
            Some(event) = self.events.recv() => First::Event(event),
            joined = &mut call => First::Finished(joined),
        };
        let live = match first {
            First::Event(event) => Live::new(self, Some(event), Some(call), None),
            First::Finished(joined) => {
                let outcome = flatten(joined);
                match (outcome, self.events.try_recv()) {
                    (Err(error), None) => {
                        self.guard.disarm();
                        return ApiError::from(error).into_response();
                    }
                    (outcome, first) => Live::new(self, first, None, Some(outcome)),
                }
            }
        };
        let stream = futures::stream::unfold(live, Live::next);
        Sse::new(futures::StreamExt::map(stream, Ok::<_, Infallible>))
            .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
            .into_response()
    }
}

enum First {
    Event(AgentEvent),
    Finished(Result<Result<RunResult, SessionError>, JoinError>),
}

/// The stream's state: events still to come, and the call until it has answered.
struct Live {
    events: EventReceiver,
    guard: Option<DropGuard>,
    first: Option<AgentEvent>,
    call: Option<TurnCall>,
    outcome: Option<Result<RunResult, SessionError>>,
}

enum Step {
    Event(AgentEvent),
    Finished(Result<RunResult, SessionError>),
}

impl Live {
    fn new(
        turn: StreamedTurn,
        first: Option<AgentEvent>,
        call: Option<TurnCall>,
        outcome: Option<Result<RunResult, SessionError>>,
    ) -> Self {
        Self { events: turn.events, guard: Some(turn.guard), first, call, outcome }
    }

    async fn next(mut self) -> Option<(Event, Self)> {
        if let Some(event) = self.first.take() {
            return Some((event_frame(&event), self));
        }
        if let Some(call) = self.call.as_mut() {
            let step = tokio::select! {
                biased;
                Some(event) = self.events.recv() => Step::Event(event),
                joined = call => Step::Finished(flatten(joined)),
            };
            match step {
                Step::Event(event) => return Some((event_frame(&event), self)),
                Step::Finished(outcome) => {
                    self.call = None;
                    self.outcome = Some(outcome);
                }
            }
        }
        // The call has answered: the events it sent before answering go first.
        if let Some(event) = self.events.try_recv() {
            return Some((event_frame(&event), self));
        }
        let outcome = self.outcome.take()?;
        if let Some(guard) = self.guard.take() {
            guard.disarm();
        }
        let frame = match outcome {
            Ok(result) => json_frame("result", &result),
            Err(error) => json_frame("error", &ErrorBody::from(&error)),
        };
        Some((frame, self))
    }
}

fn flatten(joined: Result<Result<RunResult, SessionError>, JoinError>) -> Result<RunResult, SessionError> {
    joined.unwrap_or_else(|err| {
        Err(SessionError::agent(None, ErrorKind::Internal, format!("the turn's task ended abnormally: {err}")))
    })
}

/// `event: <type>` (the event's own `type` tag), `data: <the event>`.
fn event_frame(event: &AgentEvent) -> Event {
    let value = serde_json::to_value(event).unwrap_or_default();
    let kind = value.get("type").and_then(serde_json::Value::as_str).unwrap_or("event").to_owned();
    json_frame(&kind, &value)
}

fn json_frame<T: serde::Serialize>(kind: &str, data: &T) -> Event {
    let data = serde_json::to_string(data).unwrap_or_else(|_| "null".to_owned());
    Event::default().event(kind).data(data)
}
