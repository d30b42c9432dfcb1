//! Replicas: the processes sharing one store (`store::lease`). A turn that won this process's
//! turn lock also takes the session's lease in the database, or answers `SESSION_BUSY` at
//! once; a replica whose copy of the session is behind the store (another replica ran turns
//! since) drops it and loads the session again before the turn, and reads answer from the
//! store instead. Signals from the other replicas (interrupts, commits, mail) are acted on
//! here, and checks that must hold cluster-wide take an exclusive section.

use std::sync::{Arc, PoisonError, Weak};

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::LiveSessionService;
use super::registry::Slot;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::session::actor::{HeldLease, SessionHandle, TurnTicket};
use crate::store::lease::give_back;
use crate::store::{ExclusiveGuard, LeaseGrant, Leasing, Signal, Standing, TurnLeases};

/// What taking the lease for a won turn lock came to.
pub(super) enum Leased {
    /// The turn may run: the lease is held (or the store needs none).
    Held,
    /// The lease is taken, but this copy is behind the store: it was discarded, and the
    /// caller loads the session again and runs the turn with `grant`.
    Stale(LeaseGrant),
}

impl LiveSessionService {
    /// Takes the session's lease for the turn whose lock `ticket` is, when the store is
    /// shared. With `granted` (taken before this copy was loaded, so the copy is current),
    /// holds that one. Busy: the turn lock is given back and the caller gets `SESSION_BUSY`.
    pub(super) async fn lease_turn(
        &self,
        handle: &SessionHandle,
        ticket: &TurnTicket,
        granted: Option<LeaseGrant>,
    ) -> Result<Leased, SessionError> {
        let Some(store) = &self.store else { return Ok(Leased::Held) };
        let Some(leases) = store.leases() else { return Ok(Leased::Held) };
        let id = handle.id();
        let grant = match granted {
            Some(grant) => grant,
            None => {
                let taken = leases.take(id, &self.leasing.holder, self.leasing.ttl).await;
                match taken {
                    Ok(Some(grant)) if handle.is_current(grant.stored_event_seq) => grant,
                    Ok(Some(grant)) => {
                        tracing::info!(session_id = %id, epoch = grant.epoch, "the session moved on in another process; loading it again");
                        self.drop_copy(id, handle).await;
                        return Ok(Leased::Stale(grant));
                    }
                    Ok(None) => {
                        handle.abandon_turn();
                        return Err(SessionError::Busy(id.clone()));
                    }
                    Err(error) => {
                        handle.abandon_turn();
                        return Err(error.into());
                    }
                }
            }
        };
        if let Some(holder) = &grant.lost {
            handle.lost_turn(holder);
        }
        let lease = HeldLease::start(store.clone(), id.clone(), &self.leasing, grant.epoch, ticket.cancel.clone());
        handle.hold_lease(lease);
        Ok(Leased::Held)
    }

    /// The live copy a read may answer from: on a store several processes share, only one
    /// running a turn here or holding what the store holds with no turn elsewhere. A copy
    /// behind the store is unloaded (when idle), and the read answers from the store, with
    /// where the session stands there.
    pub(super) async fn current_copy(
        &self,
        id: &SessionId,
    ) -> Result<(Option<SessionHandle>, Option<Standing>), SessionError> {
        let live = self.live(id);
        let Some(leases) = self.leases() else { return Ok((live, None)) };
        if live.as_ref().is_some_and(SessionHandle::is_busy) {
            return Ok((live, None));
        }
        let standing = leases.standing(id).await?;
        match (live, standing) {
            (Some(handle), Some(standing))
                if self.leased_elsewhere(&standing) || !handle.is_current(Some(standing.event_seq)) =>
            {
                self.unload(id, &handle, "behind the store").await;
                Ok((None, Some(standing)))
            }
            (live, standing) => Ok((live, standing)),
        }
    }

    /// Session `id`'s view as the store holds it (`None`: not stored), `running` while
    /// `standing` shows a turn in another process; without its inbox.
    pub(super) async fn stored_view(
        &self,
        id: &SessionId,
        standing: Option<&Standing>,
    ) -> Result<Option<crate::model::SessionView>, SessionError> {
        let Some(store) = &self.store else { return Ok(None) };
        let Some(record) = store.record(id).await? else { return Ok(None) };
        Ok(Some(match standing {
            Some(standing) if self.leased_elsewhere(standing) && !record.archived => {
                record.view(crate::model::SessionStatus::Running, Some(record.turns + 1))
            }
            _ => record.view(record.resting_status(), None),
        }))
    }

    /// Whether another process holds the session's lease: a turn runs there.
    pub(super) fn leased_elsewhere(&self, standing: &Standing) -> bool {
        standing.holder.as_deref().is_some_and(|holder| holder != &*self.leasing.holder)
    }

    /// Sends an interrupt to the process whose turn holds the session's lease, if another
    /// does; whether one was sent. It arrives within the database's notification latency;
    /// the turn ends `cancelled` there, as it would here.
    pub(super) async fn interrupt_elsewhere(&self, id: &SessionId, cascade: bool) -> Result<bool, SessionError> {
        let Some(leases) = self.leases() else { return Ok(false) };
        let Some(standing) = leases.standing(id).await? else { return Ok(false) };
        if !self.leased_elsewhere(&standing) {
            return Ok(false);
        }
        leases.signal(Signal::Interrupt { id: id.clone(), cascade }).await?;
        tracing::info!(session_id = %id, holder = standing.holder.as_deref().unwrap_or_default(), "interrupt sent to the replica running the turn");
        Ok(true)
    }

    /// Acts on what the other processes sharing the store signal, until `drain`: interrupts
    /// of turns running here, and commits there, which wake this process's followers
    /// ([`SessionService::changes`](crate::session::SessionService::changes)). One task, no
    /// polling: it sleeps until the database notifies.
    pub fn start_replica_signals(self: &Arc<Self>) {
        let Some(leases) = self.leases() else { return };
        let mut signals = leases.signals();
        let service = Arc::downgrade(self);
        let stopping = self.stopping.clone();
        self.actors.spawn(async move {
            loop {
                let signal = tokio::select! {
                    () = stopping.cancelled() => return,
                    signal = signals.recv() => signal,
                };
                let Some(service) = Weak::upgrade(&service) else { return };
                match signal {
                    Ok(Signal::Interrupt { id, cascade }) => {
                        if let Err(error) = service.interrupt_tree(&id, cascade).await {
                            tracing::warn!(session_id = %id, "an interrupt from another replica: {error}");
                        }
                    }
                    Ok(Signal::Changed(id)) => {
                        // Nobody following is the usual case.
                        let _ = service.changes.send(id);
                    }
                    Ok(Signal::Mail(id)) => service.take_mail(&id).await,
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(
                            missed,
                            "fell behind other replicas' signals; followers catch up at their next wake-up"
                        );
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
    }

    /// Another process took mail for a session it could not run a turn of: when this one
    /// holds the session live, it admits the stored mail (once per message) and starts a
    /// turn for it, now or after the turn it runs.
    async fn take_mail(&self, id: &SessionId) {
        let (Some(handle), Some(store)) = (self.live(id), &self.store) else { return };
        match store.inbox(id).await {
            Ok(inbox) => {
                for message in inbox.waiting {
                    handle.mailbox().admit(message);
                }
                handle.start_auto_turn();
            }
            Err(error) => tracing::warn!(session_id = %id, "reading mail another replica took: {error}"),
        }
    }

    /// Runs `command` — one that takes the turn lock itself, a compaction or a rewind — under
    /// the session's lease, on a store several processes share: `SESSION_BUSY` while a turn
    /// runs anywhere, and on a copy as current as the store (a copy behind it is dropped, and
    /// the session loaded again). Without such a store, `command` as it is.
    pub(super) async fn leased<T>(
        &self,
        factory: &Arc<crate::agent::AgentFactory>,
        grants: &crate::policy::Grants,
        id: &SessionId,
        command: impl AsyncFnMut(&SessionHandle) -> Result<T, SessionError>,
    ) -> Result<T, SessionError> {
        let Some(store) = &self.store else { return self.with_handle(factory, grants, id, command).await };
        let Some(leases) = store.leases() else { return self.with_handle(factory, grants, id, command).await };
        let grant = leases.take(id, &self.leasing.holder, self.leasing.ttl).await?;
        let Some(grant) = grant else { return Err(SessionError::Busy(id.clone())) };
        // Renewed while the command runs; a lost lease fences its save out.
        let lease =
            HeldLease::start(store.clone(), id.clone(), &self.leasing, grant.epoch, CancellationToken::new());
        let current = match self.live(id) {
            Some(handle) if !handle.is_current(grant.stored_event_seq) => {
                self.unload(id, &handle, "behind the store").await
            }
            _ => true,
        };
        let result = if current {
            // A copy loaded from here on fences with the lease's epoch already.
            if let Some(handle) = self.live(id) {
                handle.set_fence(grant.epoch);
            }
            // A turn lost with its replica is recorded first, saved with the command's own
            // save, as a turn that takes such a lease records it.
            let recorded = match &grant.lost {
                Some(holder) => {
                    self.live_or_resumed(factory, grants, id).await.map(|handle| handle.lost_turn(holder))
                }
                None => Ok(()),
            };
            match recorded {
                Ok(()) => self.with_handle(factory, grants, id, command).await,
                Err(error) => Err(error),
            }
        } else {
            Err(SessionError::Busy(id.clone()))
        };
        lease.release().await;
        result
    }

    /// `name`'s section across the processes sharing the store (none without one): taken
    /// after the process's own mutex of the same check, so a check and its save hold
    /// cluster-wide — one peer name per group, the delegation caps.
    pub(super) async fn exclusive(&self, name: &str) -> Result<Option<ExclusiveGuard>, SessionError> {
        match self.leases() {
            Some(leases) => Ok(Some(leases.exclusive(name).await?)),
            None => Ok(None),
        }
    }

    /// Gives back a lease taken for a turn that will not run.
    pub(super) async fn release_lease(&self, id: &SessionId, grant: LeaseGrant) {
        if let Some(leases) = self.leases() {
            give_back(leases, id, &self.leasing.holder, grant.epoch).await;
        }
    }

    /// The store's leases, when several processes share it (`None`: this process alone
    /// decides, with its turn locks).
    pub(super) fn leases(&self) -> Option<&dyn TurnLeases> {
        self.store.as_ref().and_then(|store| store.leases())
    }

    /// Who holds leases here: the webhooks' workers hold theirs as this process, too.
    pub fn leasing(&self) -> &Leasing {
        &self.leasing
    }

    /// Drops a copy that is behind the store, from under the turn lock the caller holds: out
    /// of the live map, its actor stopped. The next lookup loads the session from the store.
    async fn drop_copy(&self, id: &SessionId, handle: &SessionHandle) {
        if !handle.discard() {
            // An archive began meanwhile: the copy stays for it, and the turn is refused there.
            handle.abandon_turn();
            return;
        }
        {
            let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
            if let Some(Slot::Live(current)) = registry.sessions.get(id)
                && current.same_actor(handle)
            {
                registry.sessions.remove(id);
            }
        }
        handle.stop().await;
    }
}
