//! Whose context a session runs with when no caller brings one.
//!
//! A caller's call resumes a stored session with the caller's context: its configuration,
//! hooks, policy and provider credentials (its [`AgentFactory`]). Some resumes have no caller:
//! a peer session's message to a session that was unloaded, a child's result for an unloaded
//! parent. They run with the context the session last ran with, remembered when it was
//! unloaded ([`Contexts`]), never with whichever client happened to start the server
//! (security review 2, G14: the background server serves many clients, and its own factory is
//! its first client's, keys and hooks included).
//!
//! Where no context is remembered (the server restarted since), a service built
//! [`LiveSessionService::without_server_context`] keeps the message in the session's stored
//! inbox without resuming it: the next caller that touches the session resumes it with its own
//! context and the message is delivered then. Other services (`serve --http`, `--no-daemon`)
//! have one context, the server's, and use it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::LiveSessionService;
use super::registry::Lookup;
use crate::agent::AgentFactory;
use crate::caller::Caller;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::inbox::{Delivery, InboxMessage, SendResult};
use crate::policy::{Grants, Surface};
use crate::session::actor::Provenance;
use crate::store::StoredMail;

/// Contexts of unloaded sessions kept at most; beyond, the longest-remembered is forgotten
/// (its session then waits for a caller, as after a restart).
pub(super) const MAX_REMEMBERED: usize = 4096;

/// The contexts of unloaded sessions, by session.
#[derive(Default)]
pub(super) struct Contexts {
    entries: Mutex<Remembered>,
}

/// What a session runs with: its client's factory (shared by all of that client's sessions)
/// and its grants. Not the session's whole [`Provenance`]: its resolved spec is in the store,
/// and thousands of unloaded sessions must not keep theirs in memory.
#[derive(Clone)]
pub(super) struct Context {
    pub(super) factory: Arc<AgentFactory>,
    pub(super) grants: Grants,
}

impl From<&Provenance> for Context {
    fn from(provenance: &Provenance) -> Self {
        Self { factory: provenance.factory.clone(), grants: provenance.grants.clone() }
    }
}

#[derive(Default)]
struct Remembered {
    by_session: HashMap<SessionId, (u64, Context)>,
    /// Stamps entries in the order they were remembered.
    next: u64,
}

impl Contexts {
    /// Keeps `context` as `id`'s until it is forgotten or pushed out.
    pub(super) fn remember(&self, id: &SessionId, context: Context) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let stamp = entries.next;
        entries.next += 1;
        entries.by_session.insert(id.clone(), (stamp, context));
        if entries.by_session.len() > MAX_REMEMBERED {
            let oldest = entries.by_session.iter().min_by_key(|(_, (stamp, _))| *stamp).map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                entries.by_session.remove(&oldest);
            }
        }
    }

    pub(super) fn forget(&self, id: &SessionId) {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).by_session.remove(id);
    }

    pub(super) fn of(&self, id: &SessionId) -> Option<Context> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.by_session.get(id).map(|(_, context)| context.clone())
    }

    #[cfg(all(test, feature = "session-store"))]
    pub(super) fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).by_session.len()
    }
}

impl LiveSessionService {
    /// The same service never running a session with its own factory where the session's
    /// context is unknown: the background server's (its factory is its first client's).
    pub fn without_server_context(mut self) -> Self {
        self.server_context_for_unknown = false;
        self
    }

    /// The context `id` runs with when no caller brings one: its live agent's, the one it last
    /// ran with, or (where the service has one context) the server's.
    fn unattended_context(&self, id: &SessionId) -> Option<(Arc<AgentFactory>, Grants)> {
        let context =
            self.live(id).map(|handle| Context::from(&**handle.provenance())).or_else(|| self.contexts.of(id));
        match context {
            Some(Context { factory, grants }) => Some((factory, grants)),
            None if self.server_context_for_unknown => {
                Some((self.factory.clone(), self.factory.grants(&Caller::local(), Surface::Local)))
            }
            None => None,
        }
    }

    /// Delivers `message` to `id` with no caller's context: resumed with the session's own
    /// (see the module documentation), or kept in its stored inbox for the next caller.
    pub(super) async fn deliver_unattended(
        &self,
        id: &SessionId,
        message: InboxMessage,
    ) -> Result<SendResult, SessionError> {
        match self.unattended_context(id) {
            Some((factory, grants)) => self.deliver(&factory, &grants, id, message).await,
            None => self.keep_for_later(id, message).await,
        }
    }

    /// Puts `message` into the stored inbox of `id` without resuming it. A resume that read
    /// the inbox before this wrote it is handed the message as well (admission is idempotent
    /// by message id), so it is never left behind.
    async fn keep_for_later(&self, id: &SessionId, message: InboxMessage) -> Result<SendResult, SessionError> {
        let not_found = || SessionError::not_found(id.clone());
        let store = self.store.as_ref().ok_or_else(not_found)?;
        let record = store.record(id).await?.ok_or_else(not_found)?;
        if record.archived {
            return Err(super::archive::archived(id));
        }
        let waiting = store.inbox(id).await?.waiting.len();
        if waiting >= self.inbox_limits.capacity {
            return Err(SessionError::InboxFull { session_id: id.clone(), capacity: self.inbox_limits.capacity });
        }
        let message_id = message.id.clone();
        store.post(id, StoredMail { parked: false, message: message.clone() }, None).await?;
        if let Lookup::Live(handle) = self.lookup(id) {
            handle.deliver(message, &self.store).await?;
        }
        tracing::info!(session_id = %id, message_id = %message_id, "message kept for the session's next caller: its context is unknown");
        Ok(SendResult { session_id: id.clone(), message_id, delivered: Delivery::Queued })
    }
}
