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

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::broadcast;

use super::StoreError;
use crate::ids::SessionId;

/// A lease won: the epoch the turn's saves carry, and the stored session's journal watermark
/// right after the lease was taken (`None` when the session is not stored yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    pub epoch: u64,
    pub stored_event_seq: Option<u64>,
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

    /// Tells the other processes sharing the store.
    fn signal(&self, signal: Signal) -> BoxFuture<'_, Result<(), StoreError>>;

    /// What the other processes signal, from now on (this process's own signals are not
    /// echoed back). Lagging receivers miss some and are told so.
    fn signals(&self) -> broadcast::Receiver<Signal>;
}
