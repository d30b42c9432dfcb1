//! Listing: live and stored sessions merged into one page, newest first, as the caller may see
//! them.

use super::LiveSessionService;
use super::admission::require_read_scope;
use crate::caller::Caller;
use crate::error::SessionError;
use crate::model::{ListPosition, SessionList, SessionStatus, SessionSummary};
use crate::session::actor::SessionHandle;
use crate::session::types::*;
use crate::store::{StoredListQuery, persistence_disabled};

impl LiveSessionService {
    /// `list` as `caller` sees it: its own sessions, or every one with `sessions:all`. The
    /// owner filter applies before paging (live sessions here, stored ones in the store), so
    /// pages, cursors and `total` count only what the caller may see.
    ///
    /// The query's filters apply before paging too.
    ///
    /// Errors: `PersistenceDisabled`, `InvalidRequest` (no `sessions` scope), `PolicyDenied`
    /// (another owner's sessions without `sessions:all` or `sessions:read_all`), `Store`.
    pub async fn list_for(&self, caller: &Caller, mut query: ListQuery) -> Result<SessionList, SessionError> {
        require_read_scope(caller)?;
        query.owner = visible_owner(caller, query.owner.take())?;
        let archived_wanted = query.filter.status == Some(SessionStatus::Archived);
        query.include_archived |= archived_wanted;
        if query.include_archived && self.store.is_none() {
            return Err(persistence_disabled("listing archived sessions"));
        }
        if query.parent_id.is_some() || query.root_id.is_some() {
            return self.list_tree(caller, query).await;
        }
        let owner = query.owner.clone();
        // On a store replicas share, an idle copy may be behind it: the store answers for
        // every session but those running a turn here.
        let shared = self.leases().is_some();
        let live: Vec<SessionSummary> = self
            .live_handles()
            .iter()
            .filter(|handle| !shared || handle.is_busy())
            .map(SessionHandle::summary)
            .filter(|summary| owner.as_ref().is_none_or(|owner| summary.owner == *owner))
            .filter(|summary| query.filter.matches(summary))
            .collect();
        let limit = query.limit.unwrap_or(DEFAULT_PAGE).min(MAX_PAGE);
        // One more than the page, to know whether a next page exists.
        let wanted = query.offset.saturating_add(limit).saturating_add(1);
        let mut total = live.len();
        let exclude = live.iter().map(|summary| summary.session_id.clone()).collect();
        let after = query.after.as_ref();
        let mut candidates: Vec<(ListPosition, SessionSummary)> = live
            .into_iter()
            .map(|summary| (summary.list_position(), summary))
            .filter(|(position, _)| after.is_none_or(|after| after.is_before(position)))
            .collect();
        if let Some(store) = &self.store {
            let stored = store
                .list(StoredListQuery {
                    first: wanted,
                    after: query.after.clone(),
                    include_archived: query.include_archived,
                    exclude,
                    owner,
                    filter: query.filter.clone(),
                })
                .await?;
            total += stored.total;
            candidates.extend(stored.summaries.into_iter().map(|summary| (summary.list_position(), summary)));
        }
        // Newest first, then by id descending: the store's index order.
        candidates.sort_by(|a, b| b.0.cmp(&a.0));
        let more = candidates.len() > query.offset.saturating_add(limit);
        let page: Vec<(ListPosition, SessionSummary)> =
            candidates.into_iter().skip(query.offset).take(limit).collect();
        let next_cursor = if more { page.last().map(|(position, _)| position.cursor()) } else { None };
        Ok(SessionList { sessions: page.into_iter().map(|(_, summary)| summary).collect(), total, next_cursor })
    }
}

/// Whose sessions a list shows: the owner asked for where the caller may read that owner's
/// sessions, the caller's own where it may not read others' and asked for none (or itself).
fn visible_owner(caller: &Caller, asked: Option<String>) -> Result<Option<String>, SessionError> {
    if caller.reads_all() {
        return Ok(asked);
    }
    match asked {
        Some(owner) if owner != caller.subject() => Err(SessionError::policy_denied(
            "listing another owner's sessions needs the sessions:all or sessions:read_all scope",
        )),
        _ => Ok(Some(caller.subject().to_owned())),
    }
}
