//! Archiving: a session (and its descendants, leaves first) stops taking turns and stays
//! readable; the registry keeps it from being resumed while the store commits.

use std::collections::hash_map::Entry;
use std::sync::{Arc, PoisonError};

use super::LiveSessionService;
use super::registry::Slot;
use crate::agent::AgentFactory;
use crate::error::SessionError;
use crate::hooks::{HookEvent, HookEventKind};
use crate::ids::SessionId;
use crate::model::{ArchiveResult, SessionStatus, SessionView};

impl LiveSessionService {
    /// `archive`, with the `session_end` hooks of `factory` (the caller's configuration).
    ///
    /// Errors: `SessionNotFound`, `Store`.
    pub async fn archive_with(
        &self,
        factory: &Arc<AgentFactory>,
        id: &SessionId,
    ) -> Result<ArchiveResult, SessionError> {
        // Its descendants first, leaves first: a child never outlives its parent's archive.
        let mut cascaded = self.descendants(id).await?;
        cascaded.reverse();
        for descendant in &cascaded {
            match self.archive_one(factory, descendant).await {
                Ok(_) | Err(SessionError::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        let view = self.archive_one(factory, id).await?;
        // A child archived on its own: its parent learns, and gets back what it held for it.
        if view.state.lineage.is_delegated() {
            self.archived_child(&view).await;
        }
        self.forget_children(&cascaded);
        Ok(ArchiveResult { session_id: id.clone(), archived: true, cascaded })
    }

    /// Archives one session; returns its last view.
    pub(super) async fn archive_one(
        &self,
        factory: &Arc<AgentFactory>,
        id: &SessionId,
    ) -> Result<SessionView, SessionError> {
        // The session stays in the map until the store has committed: its live handle (which
        // refuses turns from now on) or a tombstone, so no turn can resume it from the store
        // in between.
        let (live, tombstone) = {
            let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
            match registry.sessions.entry(id.clone()) {
                Entry::Occupied(slot) => match slot.get() {
                    Slot::Live(handle) => {
                        // Under the lock, so an unload cannot take the session meanwhile.
                        handle.mark_closing();
                        (Some(handle.clone()), false)
                    }
                    Slot::Archiving => (None, false),
                },
                Entry::Vacant(slot) => {
                    slot.insert(Slot::Archiving);
                    (None, true)
                }
            }
        };
        if let Some(handle) = &live {
            handle.shutdown().await;
        }
        let stored = match &self.store {
            Some(store) => store.archive(id).await,
            None => Ok(None),
        };
        {
            let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
            let ours = match registry.sessions.get(id) {
                Some(Slot::Live(handle)) => live.as_ref().is_some_and(|live| live.same_actor(handle)),
                Some(Slot::Archiving) => tombstone,
                None => false,
            };
            if ours {
                registry.sessions.remove(id);
            }
            if matches!(stored, Ok(Some(_))) {
                registry.archives_committed += 1;
            }
        }
        let view = match (stored?, &live) {
            (Some(record), _) => record.view(SessionStatus::Archived, None),
            (None, Some(handle)) => {
                let mut view = handle.view();
                view.state.status = SessionStatus::Archived;
                view
            }
            (None, None) => return Err(SessionError::not_found(id.clone())),
        };
        self.contexts.forget(id);
        tracing::info!(session_id = %id, "session archived");
        // The journal gained its `archived` event: followers and the projector look.
        let _ = self.changes.send(id.clone());
        factory.hooks().observe(HookEvent::new(HookEventKind::SessionEnd, id, None)).await;
        Ok(view)
    }
}

pub(super) fn archived(id: &SessionId) -> SessionError {
    SessionError::NotFound {
        session_id: id.clone(),
        message: format!("session {id} is archived: its history can be read, but it takes no more turns"),
    }
}
