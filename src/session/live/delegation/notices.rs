//! Notices: a finished child whose result nobody collected tells its parent through its
//! inbox, exactly once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, MutexGuard, PoisonError};

use super::super::LiveSessionService;
use super::{bounded, finished, usage_of};
use crate::ids::{MessageId, SessionId};
use crate::model::SessionView;
use crate::model::inbox::{InboxMessage, MessageSender};

/// Children whose results are being collected, and children whose notice was sent.
#[derive(Debug, Default)]
pub(in super::super) struct Followed {
    /// Children a `delegate` or `wait` call collects itself, with the number of such calls.
    pub(super) collecting: HashMap<SessionId, usize>,
    /// Children whose notice is in their parent's inbox (removed when they are archived).
    pub(super) noticed: HashSet<SessionId>,
}

impl Followed {
    /// An archived session leaves the bookkeeping.
    pub(in super::super) fn forget(&mut self, id: &SessionId) {
        self.noticed.remove(id);
    }
}

impl LiveSessionService {
    pub(in super::super) fn followed(&self) -> MutexGuard<'_, Followed> {
        self.followed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the watcher that sends a finished child's notice to its parent (with delegation
    /// on). One task for every session, woken by [`Self::changes`]; it stops at `drain`.
    pub(in super::super) fn start_notices(self: &Arc<Self>) {
        if !self.delegation.enabled || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let service = Arc::downgrade(self);
        let mut changes = self.changes.subscribe();
        let stopping = self.stopping.clone();
        self.actors.spawn(async move {
            loop {
                let changed = tokio::select! {
                    () = stopping.cancelled() => return,
                    changed = changes.recv() => match changed {
                        Ok(id) => Some(id),
                        // Missed announcements: every live child is looked at instead.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                };
                let Some(service) = service.upgrade() else { return };
                let handles = match changed {
                    Some(id) => service.live(&id).into_iter().collect(),
                    None => service.live_handles(),
                };
                // Most changes are not a child's: those cost one small clone.
                for handle in handles.iter().filter(|handle| handle.lineage().is_delegated()) {
                    let view = handle.view();
                    if finished(&view) {
                        service.notify_parent(&view, "finished").await;
                    }
                }
            }
        });
    }

    /// Sends a delegated session's result to its parent's inbox, unless a call collects it,
    /// it was sent before, or the parent's ledger no longer holds the child (settled).
    pub(in super::super) async fn notify_parent(&self, view: &SessionView, what: &str) {
        let Some(parent_id) = view.state.lineage.parent_id.clone() else { return };
        let child = &view.session_id;
        let parent = self.live(&parent_id);
        let stored_hold = match (&parent, &self.store) {
            (Some(_), _) => None,
            (None, Some(store)) => match store.record(&parent_id).await {
                Ok(Some(record)) if !record.archived => Some(record.delegation.reserved.contains_key(child)),
                _ => Some(false),
            },
            (None, None) => Some(false),
        };
        {
            let mut followed = self.followed();
            let held = match (&parent, stored_hold) {
                (Some(parent), _) => parent.ledger().holds(child),
                (None, held) => held.unwrap_or(false),
            };
            if followed.collecting.contains_key(child) || followed.noticed.contains(child) || !held {
                return;
            }
            followed.noticed.insert(child.clone());
        }
        let used = usage_of(view);
        let name = view.state.name.clone().unwrap_or_else(|| child.to_string());
        let (status, text) = match &view.state.last_turn {
            Some(turn) => (turn.status.as_str(), bounded(&turn.text).0),
            None => ("archived", String::new()),
        };
        let body = format!(
            "[child {name} ({child}) {what}: {status}; {} tokens; {} tool calls]\n{text}",
            used.tokens, used.tool_calls
        );
        let message = InboxMessage {
            id: MessageId::new(),
            from: MessageSender::Session { session_id: child.clone(), name: view.state.name.clone() },
            body,
            in_reply_to: None,
            hops: 0,
            at: chrono::Utc::now(),
            report: Some(used),
        };
        // The parent's own context, live or remembered (G14).
        if let Err(error) = self.deliver_unattended(&parent_id, message).await {
            tracing::warn!(session_id = %child, parent_id = %parent_id, %error, "a child's result could not reach its parent");
        }
    }

    /// Archived descendants leave the notice bookkeeping.
    pub(in super::super) fn forget_children(&self, archived: &[SessionId]) {
        let mut followed = self.followed();
        for id in archived {
            followed.forget(id);
        }
    }

    /// After a child was archived on its own: its result goes to its parent if it has not
    /// (so the parent's hold is settled), and it leaves the notice bookkeeping.
    pub(in super::super) async fn archived_child(&self, view: &SessionView) {
        self.notify_parent(view, "archived").await;
        self.followed().forget(&view.session_id);
    }
}
