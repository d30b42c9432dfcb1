//! Hibernation: the live set stays bounded ([`SessionLimits`]). With a store, a session idle for
//! `idle_unload` (the idle reaper) or beyond `max_live` (least recently used first) is unloaded:
//! its actor stops and its slot leaves the registry, and its next call resumes it from the
//! store. Without a store `max_live` refuses new sessions.

use std::collections::HashSet;
use std::collections::hash_map::Entry;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use super::LiveSessionService;
use super::archive::archived;
use super::registry::{Lookup, Registry, Slot};
use crate::agent::AgentFactory;
use crate::allocator;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::policy::AuditTag;
use crate::policy::Grants;
use crate::session::actor::SessionHandle;
use crate::store::persistence_disabled;

impl LiveSessionService {
    /// Starts the idle reaper (with a store and a non-zero `idle_unload`): one task that wakes
    /// every quarter of `idle_unload` (30 s at most) and unloads the sessions idle that long.
    /// One cheap scan per tick rather than a timer per session. It holds the service weakly
    /// and stops at `drain`.
    pub fn start_idle_reaper(self: &Arc<Self>) {
        let idle = self.limits.idle_unload;
        if self.store.is_none() || idle.is_zero() {
            return;
        }
        let tick = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(30));
        let service = Arc::downgrade(self);
        let stopping = self.stopping.clone();
        self.actors.spawn(async move {
            let mut ticker = tokio::time::interval(tick);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stopping.cancelled() => return,
                    _ = ticker.tick() => {}
                }
                let Some(service) = Weak::upgrade(&service) else { return };
                service.unload_idle(idle).await;
            }
        });
    }

    /// Unloads every session idle for `idle` or longer.
    pub(super) async fn unload_idle(&self, idle: Duration) {
        let now = tokio::time::Instant::now();
        let idle_ones: Vec<(SessionId, SessionHandle)> = {
            let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
            registry
                .sessions
                .iter()
                .filter_map(|(id, slot)| match slot {
                    Slot::Live(handle) if now.duration_since(handle.last_used()) >= idle => {
                        Some((id.clone(), handle.clone()))
                    }
                    Slot::Live(_) | Slot::Archiving => None,
                })
                .collect()
        };
        for (id, handle) in idle_ones {
            self.unload(&id, &handle, "idle").await;
        }
    }

    /// After `just_live` became live: with a store, unloads the least recently used other
    /// sessions while more than `max_live` are live. Busy ones are skipped, so the bound is
    /// met as soon as enough sessions are idle.
    ///
    /// Every admission past the bound comes here, so a round picks only the oldest sessions it
    /// needs (a partial sort over borrowed entries) and copies just those out of the registry,
    /// not every live handle; further rounds replace the ones found busy.
    pub(super) async fn enforce_cap(&self, just_live: &SessionId) {
        if self.store.is_none() {
            return;
        }
        let mut tried: HashSet<SessionId> = HashSet::new();
        loop {
            let oldest: Vec<(SessionId, SessionHandle)> = {
                let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
                let excess = registry.sessions.len().saturating_sub(self.limits.max_live);
                if excess == 0 {
                    return;
                }
                let mut untried: Vec<(tokio::time::Instant, &SessionId, &SessionHandle)> = registry
                    .sessions
                    .iter()
                    .filter_map(|(id, slot)| match slot {
                        Slot::Live(handle) if id != just_live && !tried.contains(id) => {
                            Some((handle.last_used(), id, handle))
                        }
                        Slot::Live(_) | Slot::Archiving => None,
                    })
                    .collect();
                let take = excess.min(untried.len());
                if take == 0 {
                    return;
                }
                untried.select_nth_unstable_by_key(take - 1, |(last_used, _, _)| *last_used);
                untried.truncate(take);
                untried.sort_unstable_by_key(|(last_used, _, _)| *last_used);
                untried.into_iter().map(|(_, id, handle)| (id.clone(), handle.clone())).collect()
            };
            for (id, handle) in oldest {
                if self.live_sessions() <= self.limits.max_live {
                    return;
                }
                self.unload(&id, &handle, "least recently used beyond max_live_sessions").await;
                tried.insert(id);
            }
        }
    }

    /// Unloads one session if it is still `handle`'s and idle with nothing unsaved (see
    /// [`SessionHandle::try_unload`]); waits for its actor to exit. Taken under the registry's
    /// lock, so it never races an archive's or a resume's registration.
    pub(super) async fn unload(&self, id: &SessionId, handle: &SessionHandle, why: &'static str) -> bool {
        {
            let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
            match registry.sessions.get(id) {
                Some(Slot::Live(current)) if current.same_actor(handle) => {}
                Some(Slot::Live(_) | Slot::Archiving) | None => return false,
            }
            if !handle.try_unload() {
                return false;
            }
            registry.sessions.remove(id);
        }
        handle.stop().await;
        // What the session held goes back to the system, not only to the heap (throttled).
        allocator::release_freed();
        // Unattended resumes (mail, a child's result) run with what it ran with (G14).
        self.contexts.remember(id, super::contexts::Context::from(&**handle.provenance()));
        tracing::info!(session_id = %id, reason = why, "session unloaded");
        true
    }

    /// The live session, or the stored one brought back to life with `factory`'s agent.
    pub(super) async fn live_or_resumed(
        &self,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        id: &SessionId,
    ) -> Result<SessionHandle, SessionError> {
        let mut archives_seen = match self.lookup(id) {
            Lookup::Live(handle) => return Ok(handle),
            Lookup::Archiving => return Err(archived(id)),
            Lookup::Absent(archives_committed) => archives_committed,
        };
        let Some(store) = &self.store else { return Err(SessionError::not_found(id.clone())) };
        // Before the record: a turn that commits in between is then fenced out or seen.
        let fence = match store.leases() {
            Some(leases) => leases.epoch(id).await?,
            None => 0,
        };
        let record = store.record(id).await?.ok_or_else(|| SessionError::not_found(id.clone()))?;
        if record.archived {
            return Err(archived(id));
        }
        let history = store.history(id).await?;
        // A concurrent resume may have registered, run a turn and saved between the two reads:
        // its handle is the session now.
        match self.lookup(id) {
            Lookup::Live(handle) => return Ok(handle),
            Lookup::Archiving => return Err(archived(id)),
            Lookup::Absent(_) => {}
        }
        if history.len() as u64 != record.message_count {
            return Err(SessionError::store(format!(
                "session {id}: the record counts {} messages but {} are stored",
                record.message_count,
                history.len()
            )));
        }
        // Whoever resumes it, the session runs with its owner's grants as of now (G5).
        let owner_grants = self.owner_grants(factory, &record.owner, id)?;
        let grants = owner_grants.as_ref().unwrap_or(grants);
        let audit = AuditTag { subject: record.owner.as_str().into(), session_id: id.clone() };
        let inbox = store.inbox(id).await?;
        let agent =
            factory.restore_agent(record.agent.clone(), record.restored_state(history), grants, &audit).await?;
        let handle = self.spawn(agent, record, inbox, factory, grants, fence);
        loop {
            {
                let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
                let archives_committed = registry.archives_committed;
                match registry.sessions.entry(id.clone()) {
                    // Two callers may resume the same session at once: the first registration
                    // wins and the other's handle is dropped, which stops its actor.
                    Entry::Occupied(existing) => match existing.get() {
                        Slot::Live(existing) => return Ok(existing.clone()),
                        Slot::Archiving => return Err(archived(id)),
                    },
                    Entry::Vacant(slot) if archives_committed == archives_seen => {
                        tracing::info!(session_id = %id, "session resumed from the store");
                        slot.insert(Slot::Live(handle.clone()));
                        break;
                    }
                    Entry::Vacant(_) => archives_seen = archives_committed,
                }
            }
            // An archive committed since the record was read; it may have been this session's.
            if store.record(id).await?.is_none_or(|record| record.archived) {
                return Err(archived(id));
            }
        }
        self.enforce_cap(id).await;
        Ok(handle)
    }

    /// Runs `attempt` on the session's handle; when the handle turns out unloaded (it answered
    /// `Busy` because an unload took its lock), asks the registry again, which resumes the
    /// session from the store. So a turn racing an unload waits for it and runs, never `Busy`.
    pub(super) async fn with_handle<T>(
        &self,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        id: &SessionId,
        mut attempt: impl AsyncFnMut(&SessionHandle) -> Result<T, SessionError>,
    ) -> Result<T, SessionError> {
        loop {
            let handle = self.live_or_resumed(factory, grants, id).await?;
            match attempt(&handle).await {
                Err(SessionError::Busy(_)) if handle.is_unloaded() => continue,
                other => return other,
            }
        }
    }

    /// The grants of `owner` as of now, from the token table (security review G5); `None`
    /// when the service has no table (the resumer's grants apply). `POLICY_DENIED` when no
    /// token gives `owner` the scope `sessions` any more.
    fn owner_grants(
        &self,
        factory: &AgentFactory,
        owner: &str,
        id: &SessionId,
    ) -> Result<Option<Grants>, SessionError> {
        let Some(owners) = &self.owners else { return Ok(None) };
        let now = owners.read().unwrap_or_else(PoisonError::into_inner).caller(owner);
        match now {
            Some((caller, surface)) if caller.uses_sessions() => Ok(Some(factory.grants(&caller, surface))),
            _ => {
                tracing::info!(target: "deputy::audit", subject = %owner, session_id = %id, what = "policy_refusal", refused = "sessions", "refused: the owner may no longer use sessions");
                Err(SessionError::policy_denied(format!(
                    "session {id}: its owner {owner:?} has no token with the scope \"sessions\" on this deputy \
                     any more; this session can no longer continue"
                )))
            }
        }
    }

    /// Refuses early, before an agent is built, when the live set is already full.
    pub(super) fn check_room(&self) -> Result<(), SessionError> {
        if self.refuses_new(&self.registry.read().unwrap_or_else(PoisonError::into_inner)) {
            return Err(self.full());
        }
        Ok(())
    }

    /// Without a store nothing can be unloaded, so a full live set refuses new sessions.
    pub(super) fn refuses_new(&self, registry: &Registry) -> bool {
        self.store.is_none() && registry.sessions.len() >= self.limits.max_live
    }

    /// `SESSION_PERSISTENCE_DISABLED`: the session would fit if idle ones could be unloaded to
    /// a store, which is what this deployment lacks.
    pub(super) fn full(&self) -> SessionError {
        persistence_disabled(&format!(
            "more than {} live sessions (max_live_sessions): without a store idle sessions cannot be unloaded; \
             archive a session or run with a store",
            self.limits.max_live
        ))
    }
}
