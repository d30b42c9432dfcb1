//! What the live service holds at this moment, as `/metrics` reports it.

use super::LiveSessionService;
use crate::error::SessionError;
use crate::store::StoredListQuery;
use crate::telemetry::metrics::Gauges;

impl LiveSessionService {
    /// Sessions live and hibernated, turns running, mail waiting in live sessions' inboxes.
    /// O(live sessions): the hibernated ones are the store's count of unarchived sessions less
    /// the live ones, never a walk of the store.
    pub async fn gauges_now(&self) -> Result<Gauges, SessionError> {
        let handles = self.live_handles();
        let inbox_waiting = handles.iter().map(|handle| handle.view().state.inbox.waiting as u64).sum();
        let running_turns = handles.iter().filter(|handle| handle.is_busy()).count() as u64;
        let hibernated_sessions = match &self.store {
            Some(store) => {
                let live = handles.iter().map(|handle| handle.id().clone()).collect();
                let query = StoredListQuery { first: 0, exclude: live, ..StoredListQuery::default() };
                store.list(query).await?.total as u64
            }
            None => 0,
        };
        Ok(Gauges { live_sessions: handles.len() as u64, hibernated_sessions, running_turns, inbox_waiting })
    }
}
