//! A turn lease held by this process (`store::lease`): renewed while the turn runs, released
//! when the turn lock is released. Losing it (the database says another epoch, or renewals
//! fail for as long as the lease lasts) cancels the turn, which could not commit anyway.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::ids::SessionId;
use crate::store::SessionStore;

/// Who holds leases here, and for how long each lasts.
#[derive(Debug, Clone)]
pub struct Leasing {
    /// This process, as the lease rows name it: unique per process start.
    pub holder: Arc<str>,
    pub ttl: Duration,
}

impl Leasing {
    /// The default lease: a dead replica's turn is lost for at most this long.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

    /// A holder name for this process: host, pid and a random part, so a restarted process
    /// (same pid, say in a container) never passes for its predecessor.
    pub fn for_this_process(ttl: Duration) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let random = uuid::Uuid::new_v4().simple().to_string();
        let holder = format!("{}:{}:{}", host.trim(), std::process::id(), &random[..12]);
        Self { holder: holder.into(), ttl }
    }
}

/// A lease this process holds for a running turn. Dropped with the turn lock: the renewals
/// stop and the lease is released.
pub struct HeldLease {
    store: Arc<dyn SessionStore>,
    id: SessionId,
    holder: Arc<str>,
    epoch: u64,
    renewing: tokio::task::JoinHandle<()>,
    /// Released already ([`HeldLease::release`]): nothing left for `drop`.
    released: bool,
}

impl std::fmt::Debug for HeldLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLease").field("id", &self.id).field("epoch", &self.epoch).finish_non_exhaustive()
    }
}

impl HeldLease {
    /// Starts renewing `epoch` of `id`'s lease every third of its length; cancels `turn`
    /// when the lease is lost.
    pub fn start(
        store: Arc<dyn SessionStore>,
        id: SessionId,
        leasing: &Leasing,
        epoch: u64,
        turn: CancellationToken,
    ) -> Self {
        let (renewer, session, holder, ttl) = (store.clone(), id.clone(), leasing.holder.clone(), leasing.ttl);
        let renewing = tokio::spawn(async move {
            let period = ttl / 3;
            let mut held_until = tokio::time::Instant::now() + ttl;
            loop {
                tokio::time::sleep(period).await;
                let Some(leases) = renewer.leases() else { return };
                let asked = tokio::time::Instant::now();
                match leases.renew(&session, &holder, epoch, ttl).await {
                    Ok(true) => held_until = asked + ttl,
                    Ok(false) => {
                        tracing::warn!(session_id = %session, epoch, "the turn lease was lost; cancelling the turn");
                        turn.cancel();
                        return;
                    }
                    Err(error) if tokio::time::Instant::now() >= held_until => {
                        tracing::warn!(session_id = %session, epoch, "the turn lease could not be renewed before it expired ({error}); cancelling the turn");
                        turn.cancel();
                        return;
                    }
                    Err(error) => tracing::warn!(session_id = %session, epoch, "renewing the turn lease: {error}"),
                }
            }
        });
        Self { store, id, holder: leasing.holder.clone(), epoch, renewing, released: false }
    }

    /// Releases the lease now, before the turn lock is: the next turn, here or elsewhere,
    /// may take it at once.
    pub async fn release(mut self) {
        self.renewing.abort();
        self.released = true;
        if let Some(leases) = self.store.leases()
            && let Err(error) = leases.release(&self.id, &self.holder, self.epoch).await
        {
            tracing::warn!(session_id = %self.id, epoch = self.epoch, "releasing the turn lease: {error}; it expires on its own");
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        self.renewing.abort();
        if self.released {
            return;
        }
        let (store, id, holder, epoch) = (self.store.clone(), self.id.clone(), self.holder.clone(), self.epoch);
        // Released in the background: the turn lock is free already, and a release that
        // fails only leaves the lease to expire.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Some(leases) = store.leases()
                    && let Err(error) = leases.release(&id, &holder, epoch).await
                {
                    tracing::warn!(session_id = %id, epoch, "releasing the turn lease: {error}; it expires on its own");
                }
            });
        }
    }
}
