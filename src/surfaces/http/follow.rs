//! `GET /v1/sessions/{id}/events?follow=true`: the journal feed as Server-Sent Events that go on
//! as the session's turns end.
//!
//! One SSE event per journal event (`event: <type>`, `id: <seq>`, `data:` the `StoredEvent`),
//! from `after_seq` on. The first page is read before the response starts, so an unknown
//! session or a bad `limit` gets the plain JSON error and its status. After that the stream
//! waits on [`SessionService::changes`] (subscribed *before* the first read, so no commit is
//! missed) and reads the pages committed since. It ends after the session's `archived` event,
//! or when the client leaves (axum drops the stream), or after [`FollowLimits::max_duration`]
//! (600 s by default: the client resumes with `after_seq` = the last `id` it saw).
//!
//! Each subject holds at most [`FollowLimits::per_subject`] follow streams at once (16 by
//! default); one more is refused `429 TOO_MANY_STREAMS` before it starts. Without both bounds,
//! idle follows held the server's connection cap for ever (security review 2, G8).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast;

use super::api_error::ApiError;
use super::shares::{Share, Shares};
use crate::error::{SessionError, TransportCode};
use crate::ids::SessionId;
use crate::model::{MAX_EVENTS_PAGE, StoredEvent};
use crate::session::SessionService;

const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Follow streams one subject may hold at once, by default.
pub const DEFAULT_MAX_FOLLOWS_PER_SUBJECT: usize = 16;
/// How long one follow stream lasts at most, by default (as long as the longest long poll).
pub const DEFAULT_MAX_FOLLOW: Duration = crate::session::MAX_WAIT;

/// The bounds of follow streams (`serve --max-follows-per-subject`, `--max-follow-secs`).
#[derive(Debug, Clone, Copy)]
pub struct FollowLimits {
    pub per_subject: usize,
    pub max_duration: Duration,
}

impl Default for FollowLimits {
    fn default() -> Self {
        Self { per_subject: DEFAULT_MAX_FOLLOWS_PER_SUBJECT, max_duration: DEFAULT_MAX_FOLLOW }
    }
}

/// The follow streams open, per subject: one per router, shared by its requests.
#[derive(Debug)]
pub struct Follows {
    limits: FollowLimits,
    open: Arc<Shares>,
}

impl Follows {
    pub fn new(limits: FollowLimits) -> Self {
        Self { limits, open: Shares::new(limits.per_subject) }
    }
}

/// Answers the feed of `id` after `after` as a following event stream, if `subject` may open
/// one more.
pub async fn respond<S: SessionService>(
    service: S,
    id: SessionId,
    after: Option<u64>,
    follows: &Arc<Follows>,
    subject: Arc<str>,
) -> Response {
    let Some(permit) = follows.open.take(subject) else {
        let message = format!(
            "this caller holds {} follow streams already: close one, or page with after_seq",
            follows.limits.per_subject
        );
        return ApiError::refused(TransportCode::TooManyStreams, message).into_response();
    };
    let changes = service.changes();
    let first = match service.events(&id, after, MAX_EVENTS_PAGE).await {
        Ok(page) => page,
        Err(error) => return ApiError::from(error).into_response(),
    };
    let deadline = tokio::time::Instant::now() + follows.limits.max_duration;
    let state = Follow {
        service,
        id,
        after: first.next_seq,
        queued: first.events.into(),
        changes,
        done: false,
        deadline,
        _permit: permit,
    };
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
    /// When the stream ends whatever happens (the client resumes with `after_seq`).
    deadline: tokio::time::Instant,
    _permit: Share,
}

impl<S: SessionService> Follow<S> {
    async fn next(mut self) -> Option<(Event, Self)> {
        loop {
            if tokio::time::Instant::now() >= self.deadline {
                return None;
            }
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
                let Ok(changed) = tokio::time::timeout_at(self.deadline, self.changes.recv()).await else {
                    // The stream's time is up; the client resumes from the last id it saw.
                    return None;
                };
                match changed {
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
