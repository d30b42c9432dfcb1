//! The turn lease: exactly one turn per session across every process that shares a store.
//!
//! In one process the actor's turn lock is the whole story. Replicas on one database each have
//! their own, so a store that several processes share also hands out a lease per session: a
//! row (holder, epoch, expiry) taken in a short transaction when a turn starts, renewed while
//! it runs and released when it ends. Peers' lesson (LangGraph, Letta): never hold a
//! transaction or a lock for a whole turn; answer busy at once.
//!
//! The epoch fences commits: every save carries the epoch its actor last took (or saw when it
//! loaded the session), and the store refuses a save whose epoch is not the lease's current
//! one. A holder that lost its lease (paused past its expiry, partitioned) can never commit
//! over a newer turn. The grant also says where the stored session stands (its journal
//! watermark), so a replica whose copy is behind reloads it before running the turn.
//!
//! The same leases make a worker cluster-wide: a webhook's deliveries run in whichever
//! process holds the lease named after it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::{SessionStore, StoreError, StoredMail};
use crate::ids::{MessageId, SessionId};

/// A lease won: the epoch the turn's saves carry, and the stored session's journal watermark
/// right after the lease was taken (`None` when the session is not stored yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrant {
    pub epoch: u64,
    pub stored_event_seq: Option<u64>,
    /// The holder whose lease this one replaced after it expired unreleased: what it ran was
    /// lost (its process died, or paused past its lease and is fenced out).
    pub lost: Option<String>,
}

/// Where a stored session stands, as any process sees it: its journal watermark, and who
/// holds its lease right now, if anyone (a turn runs there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub event_seq: u64,
    pub holder: Option<String>,
}

/// What a process tells the others sharing the store, through the store (PostgreSQL's
/// `NOTIFY`): no process polls for these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// Interrupt the turn running on the session wherever it runs (and, with `cascade`, the
    /// turns of its delegation tree there).
    Interrupt { id: SessionId, cascade: bool },
    /// A save or an archive of the session committed: followers read what came. Sent by the
    /// store itself, with the commit.
    Changed(SessionId),
    /// Mail waits in the session's stored inbox: a process holding the session live takes it.
    Mail(SessionId),
}

/// Leases of a store shared by several processes.
pub trait TurnLeases: Send + Sync + std::fmt::Debug {
    /// Takes `id`'s lease for `holder` until `ttl` from now, when nobody holds it (or the
    /// holder's lease expired): the new epoch, one more than the last. `None`: busy.
    fn take<'a>(
        &'a self,
        id: &'a SessionId,
        holder: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Option<LeaseGrant>, StoreError>>;

    /// Extends a lease still held (same holder and epoch) to `ttl` from now; whether it was.
    fn renew<'a>(
        &'a self,
        id: &'a SessionId,
        holder: &'a str,
        epoch: u64,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Ends a lease still held, so the next turn may take it at once (its epoch stays, and
    /// keeps fencing).
    fn release<'a>(
        &'a self,
        id: &'a SessionId,
        holder: &'a str,
        epoch: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The lease's current epoch (0: never taken): what a session loaded now fences its saves
    /// with. Read before the session's record, so a turn committed in between is caught.
    fn epoch<'a>(&'a self, id: &'a SessionId) -> BoxFuture<'a, Result<u64, StoreError>>;

    /// Where the stored session stands (`None`: not stored): a read checks a live copy
    /// against it, and shows a turn running in another process.
    fn standing<'a>(&'a self, id: &'a SessionId) -> BoxFuture<'a, Result<Option<Standing>, StoreError>>;

    /// Keeps `mail` for session `id` as [`SessionStore::post`] does, unless `capacity`
    /// messages wait in its inbox already (parked ones aside): counted in the database under
    /// a lock of that inbox, so one inbox's capacity holds whichever processes post to it.
    /// `false`: refused, nothing kept.
    fn post_within<'a>(
        &'a self,
        id: &'a SessionId,
        mail: &'a StoredMail,
        evict: Option<&'a MessageId>,
        capacity: usize,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Tells the other processes sharing the store.
    fn signal(&self, signal: Signal) -> BoxFuture<'_, Result<(), StoreError>>;

    /// What the other processes signal, from now on (this process's own signals are not
    /// echoed back). Lagging receivers miss some and are told so.
    fn signals(&self) -> broadcast::Receiver<Signal>;

    /// Waits until no other process holds `name`'s exclusive section, and holds it until the
    /// guard is dropped: what a check followed by a save (a peer name free, a delegation cap
    /// not reached) needs to hold across processes.
    fn exclusive<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<ExclusiveGuard, StoreError>>;
}

/// Gives back `epoch` of `id`'s lease held by `holder`. A release that fails only leaves the
/// lease to expire on its own (at most its length later), so it is logged, never returned:
/// every caller would do just that.
pub async fn give_back(leases: &dyn TurnLeases, id: &SessionId, holder: &str, epoch: u64) {
    if let Err(error) = leases.release(id, holder, epoch).await {
        tracing::warn!(lease = %id, epoch, "releasing a lease: {error}; it expires on its own");
    }
}

/// An exclusive section held across the processes sharing a store; left when dropped.
pub struct ExclusiveGuard(#[allow(dead_code)] Box<dyn Send + Sync>);

impl ExclusiveGuard {
    /// `held` keeps the section until it is dropped.
    pub fn new(held: Box<dyn Send + Sync>) -> Self {
        Self(held)
    }
}

impl std::fmt::Debug for ExclusiveGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExclusiveGuard")
    }
}

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

/// A lease this process holds: a running turn's (dropped with the turn lock), or a
/// cluster-wide worker's, such as a webhook's deliveries. Renewed every third of its length
/// while held; dropped, the renewals stop and the lease is released. Losing it (the database
/// says another epoch, or renewals fail for as long as the lease lasts) cancels `lost`.
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
    /// (the turn, or the worker) when the lease is lost.
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
                        tracing::warn!(lease = %session, epoch, "the lease was lost; stopping what held it");
                        turn.cancel();
                        return;
                    }
                    Err(error) if tokio::time::Instant::now() >= held_until => {
                        tracing::warn!(lease = %session, epoch, "the lease could not be renewed before it expired ({error}); stopping what held it");
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
        if let Some(leases) = self.store.leases() {
            give_back(leases, &self.id, &self.holder, self.epoch).await;
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
                if let Some(leases) = store.leases() {
                    give_back(leases, &id, &holder, epoch).await;
                }
            });
        }
    }
}
