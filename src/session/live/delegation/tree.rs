//! The delegation tree: children, descendants, the tree's listing and views, a forked
//! child's starting history, and interrupts cascading down.

use std::collections::{HashSet, VecDeque};

use super::super::LiveSessionService;
use crate::caller::Caller;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::llm::Message;
use crate::model::lineage::MAX_CHILDREN_SHOWN;
use crate::model::{ChildView, Escalation, SessionView};
use crate::model::{SessionList, SessionStatus, SessionSummary};
use crate::session::types::{DEFAULT_PAGE, ListQuery, MAX_PAGE};
use crate::store::persistence_disabled;

use super::MAX_TREE;

impl LiveSessionService {
    /// The children of `parent`: every one ever with a store (archived too), the live ones
    /// without.
    pub(in super::super) async fn children_of(
        &self,
        parent: &SessionId,
        open_only: bool,
    ) -> Result<Vec<SessionId>, SessionError> {
        if let Some(store) = &self.store {
            let children = store.children(parent).await?;
            return Ok(children
                .into_iter()
                .filter(|child| child.open || !open_only)
                .map(|child| child.session_id)
                .collect());
        }
        Ok(self
            .live_handles()
            .iter()
            .filter(|handle| handle.lineage().parent_id.as_ref() == Some(parent))
            .map(|handle| handle.id().clone())
            .collect())
    }

    /// `id`'s descendants not archived, breadth first (so every parent before its children).
    pub(in super::super) async fn descendants(&self, id: &SessionId) -> Result<Vec<SessionId>, SessionError> {
        self.tree_below(id, true).await
    }

    /// `id`'s descendants, breadth first; archived ones too unless `open_only`.
    pub(in super::super) async fn tree_below(
        &self,
        id: &SessionId,
        open_only: bool,
    ) -> Result<Vec<SessionId>, SessionError> {
        let mut found = Vec::new();
        let mut queue = VecDeque::from([id.clone()]);
        let mut seen = HashSet::from([id.clone()]);
        while let Some(next) = queue.pop_front() {
            for child in self.children_of(&next, open_only).await? {
                if found.len() >= MAX_TREE {
                    return Ok(found);
                }
                if seen.insert(child.clone()) {
                    found.push(child.clone());
                    queue.push_back(child);
                }
            }
        }
        Ok(found)
    }

    /// A session's view, live or stored.
    pub(in super::super) async fn view_of(&self, id: &SessionId) -> Result<Option<SessionView>, SessionError> {
        // On a store replicas share, a copy behind it is not shown (see `current_copy`).
        match self.current_copy(id).await? {
            (Some(handle), _) => Ok(Some(handle.view())),
            (None, elsewhere) => self.stored_view(id, elsewhere.as_ref()).await,
        }
    }

    /// `list` filtered to a tree (`parent_id`, `root_id`): the tree's sessions the caller may
    /// see, paged like any list.
    pub(in super::super) async fn list_tree(
        &self,
        caller: &Caller,
        query: ListQuery,
    ) -> Result<SessionList, SessionError> {
        let open_only = !query.include_archived;
        let ids = match (&query.parent_id, &query.root_id) {
            (Some(parent), _) => self.children_of(parent, open_only).await?,
            (None, Some(root)) => {
                let mut ids = vec![root.clone()];
                ids.extend(self.tree_below(root, open_only).await?);
                ids
            }
            (None, None) => Vec::new(),
        };
        let mut summaries = Vec::new();
        for id in ids {
            let Some(view) = self.view_of(&id).await? else { continue };
            let lineage = &view.state.lineage;
            let fits = caller.may_read(&view.state.owner)
                && query.owner.as_ref().is_none_or(|owner| view.state.owner == *owner)
                && (query.include_archived || view.state.status != SessionStatus::Archived)
                && query.root_id.as_ref().is_none_or(|root| lineage.root_id.as_ref() == Some(root));
            let summary = SessionSummary::from(&view);
            if fits && query.filter.matches(&summary) {
                summaries.push(summary);
            }
        }
        summaries.sort_by_key(|summary| std::cmp::Reverse(summary.list_position()));
        let total = summaries.len();
        let after = query.after.as_ref();
        let limit = query.limit.unwrap_or(DEFAULT_PAGE).min(MAX_PAGE);
        let candidates: Vec<SessionSummary> = summaries
            .into_iter()
            .filter(|summary| after.is_none_or(|after| after.is_before(&summary.list_position())))
            .skip(query.offset)
            .collect();
        let more = candidates.len() > limit;
        let sessions: Vec<SessionSummary> = candidates.into_iter().take(limit).collect();
        let next_cursor = if more { sessions.last().map(|summary| summary.list_position().cursor()) } else { None };
        Ok(SessionList { sessions, total, next_cursor })
    }

    /// Adds the session's children and the escalations below it to its view.
    pub(in super::super) async fn with_tree(&self, mut view: SessionView) -> Result<SessionView, SessionError> {
        let id = view.session_id.clone();
        let children = self.children_of(&id, false).await?;
        if children.is_empty() {
            return Ok(view);
        }
        let mut shown = Vec::new();
        for child in &children {
            if let Some(child_view) = self.view_of(child).await? {
                shown.push((child_view.state.created_at, child_view));
            }
        }
        shown.sort_by_key(|(created_at, _)| std::cmp::Reverse(*created_at));
        view.state.children = shown
            .iter()
            .take(MAX_CHILDREN_SHOWN)
            .map(|(_, child)| ChildView {
                session_id: child.session_id.clone(),
                name: child.state.name.clone(),
                status: child.state.status,
                last_turn: child.state.last_turn.as_ref().map(|turn| turn.status),
                total_tokens: child.billing.total_tokens,
            })
            .collect();
        for descendant in self.descendants(&id).await? {
            let Some(below) = self.view_of(&descendant).await? else { continue };
            if !below.state.pending.is_empty() {
                view.state.escalations.push(Escalation {
                    session_id: descendant,
                    depth: below.state.lineage.depth,
                    pending: below.state.pending,
                });
            }
        }
        Ok(view)
    }

    /// The history a forked child starts from: its parent's up to the last completed turn,
    /// which is what the store holds while the parent's turn runs (a held step's `tool_use`,
    /// still unanswered, is left out).
    pub(in super::super) async fn fork_history(&self, parent: &SessionId) -> Result<Vec<Message>, SessionError> {
        let Some(store) = &self.store else {
            return Err(persistence_disabled("delegate {context: \"fork\"} (it copies the stored conversation)"));
        };
        let record = store.record(parent).await?.ok_or_else(|| SessionError::not_found(parent.clone()))?;
        let mut history = store.history(parent).await?;
        if record.pending.is_some() {
            history.pop();
        }
        Ok(history)
    }

    /// Cancels the running turns of `id` and (with `cascade`) of its descendants; returns the
    /// sessions whose turn was cancelled.
    pub(in super::super) async fn interrupt_tree(
        &self,
        id: &SessionId,
        cascade: bool,
    ) -> Result<Vec<SessionId>, SessionError> {
        let mut interrupted = Vec::new();
        if self.live(id).is_some_and(|handle| handle.interrupt()) {
            interrupted.push(id.clone());
        }
        if cascade {
            for descendant in self.descendants(id).await? {
                if self.live(&descendant).is_some_and(|handle| handle.interrupt()) {
                    interrupted.push(descendant);
                }
            }
        }
        Ok(interrupted)
    }
}
