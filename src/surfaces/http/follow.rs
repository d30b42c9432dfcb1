//! `GET /v1/sessions/{id}/events?follow=true`: the journal feed as Server-Sent Events that go on
//! as the session's turns end.
//!
//! One SSE event per journal event (`event: <type>`, `id: <seq>`, `data:` the `StoredEvent`),
//! from `after_seq` on. The first page is read before the response starts, so an unknown
//! session or a bad `limit` gets the plain JSON error and its status. After that the stream
//! waits on [`SessionService::changes`] (subscribed *before* the first read, so no commit is
//! missed) and reads the pages committed since. It ends after the session's `archived` event,
//! or when the client leaves (axum drops the stream).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast;

use super::api_error::ApiError;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::{MAX_EVENTS_PAGE, StoredEvent};
use crate::session::SessionService;

const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Answers the feed of `id` after `after` as a following event stream.
pub async fn respond<S: SessionService>(service: S, id: SessionId, after: Option<u64>) -> Response {
    let changes = service.changes();
    let first = match service.events(&id, after, MAX_EVENTS_PAGE).await {
        Ok(page) => page,
        Err(error) => return ApiError::from(error).into_response(),
    };
    let state = Follow { service, id, after: first.next_seq, queued: first.events.into(), changes, done: false };
    let stream = futures::stream::unfold(state, Follow::next);
    Sse::new(futures::StreamExt::map(stream, Ok::<_, Infallible>))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

struct Follow<S> {
    service: S,
    id: SessionId,
    /// The last seq read.
    after: Option<u64>,
    queued: VecDeque<StoredEvent>,
    changes: broadcast::Receiver<SessionId>,
    done: bool,
}

impl<S: SessionService> Follow<S> {
    async fn next(mut self) -> Option<(Event, Self)> {
        loop {
            if let Some(event) = self.queued.pop_front() {
                self.done = event.kind() == crate::agent::AgentEvent::ARCHIVED_TYPE;
                let sse = Event::default()
                    .event(event.kind())
                    .id(event.seq.to_string())
                    .data(serde_json::to_string(&event).unwrap_or_default());
                return Some((sse, self));
            }
            if self.done {
                return None;
            }
            // A full page may have more behind it; otherwise wait for this session to change.
            match self.read().await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(error) => {
                    tracing::debug!(session_id = %self.id, "following the journal stopped: {error}");
                    return None;
                }
            }
            loop {
                match self.changes.recv().await {
                    Ok(changed) if changed == self.id => break,
                    Ok(_) => {}
                    // Fell behind: whatever changed, reading costs one page.
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }
    }

    /// Reads the next page into the queue; whether it brought anything.
    async fn read(&mut self) -> Result<bool, SessionError> {
        let page = self.service.events(&self.id, self.after, MAX_EVENTS_PAGE).await?;
        self.after = page.next_seq;
        let read = !page.events.is_empty();
        self.queued.extend(page.events);
        Ok(read)
    }
}
