//! `GET /v1/sessions/{id}/events?follow=true`: the journal feed as Server-Sent Events that go on
//! as the session's turns end.
//!
//! One SSE event per journal event (`event: <type>`, `id: <seq>`, `data:` the `StoredEvent`),
//! from `after_seq` on. With `provisional=true` the running turn's events come too, as they
//! are recorded and before the turn is saved: without an `id`, with `"provisional": true`, and
//! sent again (same `seq`) as they grow; the committed event with that `seq` follows once the
//! turn is saved and replaces it (a turn lost to a crash never commits them).
//!
//! The first page is read before the response starts, so an unknown session or a bad `limit`
//! gets the plain JSON error and its status. After that the stream waits on
//! [`SessionService::changes`] (subscribed *before* the first read, so no commit is missed),
//! or on the running turn's journal when following provisional events, and reads what came. It ends after the session's `archived` event,
//! or when the client leaves (axum drops the stream), or after [`FollowLimits::max_duration`]
//! (600 s by default: the client resumes with `after_seq` = the last `id` it saw).
//!
//! Each subject holds at most [`FollowLimits::per_subject`] follow streams at once (16 by
//! default); one more is refused `429 TOO_MANY_STREAMS` before it starts. Without both bounds,
//! idle follows held the server's connection cap for ever (security review 2, G8).

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::{broadcast, watch};

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
/// one more; with `provisional`, the running turn's events too, as they are recorded.
pub async fn respond<S: SessionService>(
    service: S,
    id: SessionId,
    after: Option<u64>,
    provisional: bool,
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
        queued: first.events.into_iter().map(|event| (event, false)).collect(),
        changes,
        done: false,
        deadline,
        provisional,
        activity: None,
        sent: HashMap::new(),
        _permit: permit,
    };
    let stream = futures::stream::unfold(state, Follow::next);
    Sse::new(futures::StreamExt::map(stream, Ok::<_, Infallible>))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// How long a follower of provisional events lets a running turn's events gather after one
/// is recorded (a streamed answer grows token by token), and how often it looks whether a
/// session that is not live has started a turn.
const PROVISIONAL_GATHER: Duration = Duration::from_millis(150);
const PROVISIONAL_LOOK: Duration = Duration::from_secs(1);

struct Follow<S> {
    service: S,
    id: SessionId,
    /// The last committed seq read.
    after: Option<u64>,
    /// Events to send, each with whether it is provisional.
    queued: VecDeque<(StoredEvent, bool)>,
    changes: broadcast::Receiver<SessionId>,
    done: bool,
    /// When the stream ends whatever happens (the client resumes with `after_seq`).
    deadline: tokio::time::Instant,
    /// Whether the running turn's events are sent before they are committed.
    provisional: bool,
    /// The running turn's journal activity, while the session is live.
    activity: Option<watch::Receiver<u64>>,
    /// The provisional events sent and not committed yet, by seq, as sent: one that grew
    /// (a streamed answer) is sent again.
    sent: HashMap<u64, String>,
    _permit: Share,
}

impl<S: SessionService> Follow<S> {
    async fn next(mut self) -> Option<(Event, Self)> {
        loop {
            if tokio::time::Instant::now() >= self.deadline {
                return None;
            }
            if let Some((event, provisional)) = self.queued.pop_front() {
                return Some((self.frame(event, provisional), self));
            }
            if self.done {
                return None;
            }
            // A full page may have more behind it; otherwise wait for this session to change.
            let read = match self.read().await {
                Ok(false) if self.provisional => self.read_provisional().await,
                read => read,
            };
            match read {
                Ok(true) => continue,
                Ok(false) => {}
                Err(error) => {
                    tracing::debug!(session_id = %self.id, "following the journal stopped: {error}");
                    return None;
                }
            }
            if !self.wait().await {
                return None;
            }
        }
    }

    /// One SSE event. A committed one carries its seq as the SSE id (what a client resumes
    /// from); a provisional one carries none, and `"provisional": true` in its data.
    fn frame(&mut self, event: StoredEvent, provisional: bool) -> Event {
        let frame = Event::default().event(event.kind());
        if provisional {
            let mut data = serde_json::to_value(&event).unwrap_or_default();
            data["provisional"] = serde_json::Value::Bool(true);
            return frame.data(data.to_string());
        }
        self.done = event.kind() == crate::agent::AgentEvent::ARCHIVED_TYPE;
        frame.id(event.seq.to_string()).data(serde_json::to_string(&event).unwrap_or_default())
    }

    /// Waits for this session to change (or, following provisional events, for its running
    /// turn to record one); whether the stream goes on.
    async fn wait(&mut self) -> bool {
        loop {
            let activity = async {
                match self.activity.as_mut() {
                    Some(activity) => {
                        if activity.changed().await.is_err() {
                            // The session went to sleep; look for it again later.
                            tokio::time::sleep(PROVISIONAL_LOOK).await;
                        }
                        tokio::time::sleep(PROVISIONAL_GATHER).await;
                    }
                    None if self.provisional => tokio::time::sleep(PROVISIONAL_LOOK).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep_until(self.deadline) => {
                    // The stream's time is up; the client resumes from the last id it saw.
                    return false;
                }
                () = activity => return true,
                changed = self.changes.recv() => match changed {
                    Ok(changed) if changed == self.id => return true,
                    Ok(_) => {}
                    // Fell behind: whatever changed, reading costs one page.
                    Err(broadcast::error::RecvError::Lagged(_)) => return true,
                    Err(broadcast::error::RecvError::Closed) => return false,
                },
            }
        }
    }

    /// Reads the next page into the queue; whether it brought anything.
    async fn read(&mut self) -> Result<bool, SessionError> {
        let page = self.service.events(&self.id, self.after, MAX_EVENTS_PAGE).await?;
        self.after = page.next_seq;
        let read = !page.events.is_empty();
        self.queued.extend(page.events.into_iter().map(|event| (event, false)));
        let after = self.after;
        self.sent.retain(|seq, _| after.is_none_or(|after| *seq > after));
        Ok(read)
    }

    /// Queues the running turn's events not committed yet that are new or grew since sent;
    /// whether there were any.
    async fn read_provisional(&mut self) -> Result<bool, SessionError> {
        let Some(running) = self.service.provisional(&self.id, self.after).await? else {
            self.activity = None;
            return Ok(false);
        };
        self.activity = Some(running.activity);
        let mut read = false;
        for event in running.events {
            let shown = serde_json::to_string(&event).unwrap_or_default();
            if self.sent.get(&event.seq) != Some(&shown) {
                self.sent.insert(event.seq, shown);
                self.queued.push_back((event, true));
                read = true;
            }
        }
        Ok(read)
    }
}
