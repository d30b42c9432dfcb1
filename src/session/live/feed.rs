//! The journal feed of [`LiveSessionService`] (`session_events`): a page of a session's
//! committed events.
//!
//! With a store the feed reads the `events` table, which holds exactly what was committed with
//! the session's turns (a failed save's events appear once a later save writes them). Without
//! one (Minimal builds, `--ephemeral`) it reads the live session's in-memory journal, which
//! publishes a turn's events when the turn ends and keeps the newest
//! [`IN_MEMORY_EVENTS`](crate::agent::journal::IN_MEMORY_EVENTS) of them; an archived or
//! never-live session then has no feed. Either way a turn's events appear here when it ends,
//! never half a turn at a time; a running turn's progress is the provisional events
//! (`SessionService::provisional`), which only a follower asking for them gets.

use super::LiveSessionService;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::{EventPage, MAX_EVENTS_PAGE};

/// Refuses a page size the feed does not serve.
pub fn check_limit(limit: usize) -> Result<(), SessionError> {
    if limit == 0 || limit > MAX_EVENTS_PAGE {
        return Err(SessionError::invalid(format!("limit must be between 1 and {MAX_EVENTS_PAGE}, not {limit}")));
    }
    Ok(())
}

impl LiveSessionService {
    /// `SessionService::events` (see the module docs).
    pub async fn events_of(
        &self,
        id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<EventPage, SessionError> {
        check_limit(limit)?;
        let events = match &self.store {
            Some(store) => {
                store.events(id, after, limit).await?.ok_or_else(|| SessionError::not_found(id.clone()))?
            }
            None => self.live(id).ok_or_else(|| SessionError::not_found(id.clone()))?.events(after, limit),
        };
        let next_seq = events.last().map(|event| event.seq).or(after);
        Ok(EventPage { session_id: id.clone(), events, next_seq })
    }
}
