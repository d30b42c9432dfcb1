//! What the handle and the actor share, readable without waiting: above all the turn lock,
//! whose states are one type behind one mutex ([`TurnLock`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::Utc;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{TurnTicket, archived_error};
use crate::agent::{FullOutputs, Journal, Ledger, Mailbox};
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::{SessionStatus, SessionView};
use crate::store::HeldLease;

/// State shared by the handle and the actor, readable without waiting.
pub(super) struct Shared {
    /// The turn lock, and what decides who may take it.
    lock: Mutex<TurnLock>,
    /// The session as `read` shows it; refreshed at each turn start and end.
    pub(super) view: watch::Sender<SessionView>,
    /// Cancelled when the actor task has exited.
    pub(super) stopped: CancellationToken,
    /// The agent's full tool outputs not saved yet, read without waiting for the actor.
    pub(super) full_outputs: FullOutputs,
    /// When a turn or compaction last began or ended: the least recently used sessions are
    /// unloaded first, and sessions idle for long are unloaded (hibernation).
    last_used: Mutex<Instant>,
    /// Where the session says its view changed (a turn or a compaction ended): the service's
    /// feed of [`SessionService::changes`](crate::session::SessionService::changes).
    pub(super) changes: broadcast::Sender<SessionId>,
    /// The session's inbox; the agent takes its mail at step boundaries.
    pub(super) mailbox: Arc<Mailbox>,
    /// The session's journal: every event, committed with the turn's save.
    pub(super) journal: Journal,
    /// The agent's delegation ledger: the service carves children's budgets from it.
    pub(super) ledger: Arc<Ledger>,
    /// The lease epoch this copy of the session saves under, on a store several processes
    /// share (`store::lease`): the epoch it was loaded at, then each turn's.
    fence: AtomicU64,
    /// The journal watermark of the last save this copy made (or loaded): a lease's grant
    /// with another one means the store moved on without it.
    saved_seq: AtomicU64,
}

/// The turn lock, the two facts that decide whether it may be taken, and the running turn's
/// lease (with several processes on one store), under one mutex so they are never seen out of
/// step. Exactly one turn or compaction holds the lock at a time; unloading takes it for good.
#[derive(Debug, Default)]
struct TurnLock {
    turn: Turn,
    /// An archive began: no new turns, and no unload.
    closing: bool,
    /// The last save failed: the store is behind the actor, so the session must stay live
    /// (unloading it would lose what only the actor holds) until a save succeeds.
    unsaved: bool,
    /// The running turn's lease, on a store several processes share: released with the lock.
    lease: Option<HeldLease>,
}

#[derive(Debug, Default)]
enum Turn {
    #[default]
    Idle,
    /// A turn or compaction runs; `interrupt` cancels it through this token.
    Running(CancellationToken),
    /// The session was unloaded (hibernation) from this handle: the lock is taken for good,
    /// the handle takes no more turns, and a caller that holds it goes back to the registry,
    /// which resumes the session from the store.
    Unloaded,
}

impl Shared {
    pub(super) fn new(
        view: SessionView,
        full_outputs: FullOutputs,
        changes: broadcast::Sender<SessionId>,
        mailbox: Arc<Mailbox>,
        journal: Journal,
        ledger: Arc<Ledger>,
        (fence, saved_seq): (u64, u64),
    ) -> Self {
        Self {
            fence: AtomicU64::new(fence),
            saved_seq: AtomicU64::new(saved_seq),
            lock: Mutex::default(),
            view: watch::Sender::new(view),
            stopped: CancellationToken::new(),
            full_outputs,
            last_used: Mutex::new(Instant::now()),
            changes,
            mailbox,
            journal,
            ledger,
        }
    }

    fn lock(&self) -> MutexGuard<'_, TurnLock> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The published view, with the inbox as it is now.
    pub(super) fn view(&self) -> SessionView {
        let mut view = self.view.borrow().clone();
        let (waiting, oldest_at) = self.mailbox.waiting();
        view.state.inbox.waiting = waiting;
        view.state.inbox.oldest_at = oldest_at;
        view.state.inbox_parked = self.mailbox.parked();
        view
    }

    /// The turn lock: exactly one concurrent taker wins, the others get `Busy` at once. An
    /// unloaded handle answers `Busy` too; the service sees `is_unloaded` and goes back to the
    /// registry.
    pub(super) fn try_lock(&self, id: &SessionId) -> Result<CancellationToken, SessionError> {
        let mut lock = self.lock();
        if lock.closing {
            return Err(archived_error(id));
        }
        if !matches!(lock.turn, Turn::Idle) {
            return Err(SessionError::Busy(id.clone()));
        }
        let cancel = CancellationToken::new();
        lock.turn = Turn::Running(cancel.clone());
        drop(lock);
        self.touch();
        Ok(cancel)
    }

    /// Takes the turn lock for a turn and shows the session running.
    pub(super) fn try_begin_turn(&self, id: &SessionId) -> Result<TurnTicket, SessionError> {
        let cancel = self.try_lock(id)?;
        let mut turn = 0;
        self.view.send_modify(|view| {
            turn = view.state.turns + 1;
            view.state.status = SessionStatus::Running;
            view.state.running_turn = Some(turn);
            view.state.updated_at = Utc::now();
        });
        Ok(TurnTicket { cancel, turn })
    }

    /// Takes the turn lock for good, to unload the session: only when it is free, the store
    /// has everything (the last save succeeded) and no archive began.
    pub(super) fn try_unload(&self) -> bool {
        let mut lock = self.lock();
        if lock.closing || lock.unsaved || !matches!(lock.turn, Turn::Idle) {
            return false;
        }
        lock.turn = Turn::Unloaded;
        true
    }

    pub(super) fn is_unloaded(&self) -> bool {
        matches!(self.lock().turn, Turn::Unloaded)
    }

    /// Whether a turn (or a compaction) holds the lock.
    pub(super) fn is_busy(&self) -> bool {
        matches!(self.lock().turn, Turn::Running(_))
    }

    /// Cancels the turn in flight. Returns false when no turn runs.
    pub(super) fn interrupt(&self) -> bool {
        match &self.lock().turn {
            Turn::Running(cancel) => {
                cancel.cancel();
                true
            }
            Turn::Idle | Turn::Unloaded => false,
        }
    }

    /// Refuses turns (and unloads) from now on: an archive began.
    pub(super) fn mark_closing(&self) {
        self.lock().closing = true;
    }

    pub(super) fn is_closing(&self) -> bool {
        self.lock().closing
    }

    /// Notes whether the last save failed (see [`TurnLock::unsaved`]).
    pub(super) fn set_unsaved(&self, unsaved: bool) {
        self.lock().unsaved = unsaved;
    }

    /// Shows the session idle and releases the turn lock, with nothing run (or nothing more
    /// to publish): a refused request, an auto-turn whose mail went with a caller's turn, an
    /// actor that ended.
    pub(super) fn abandon_turn(&self) {
        self.view.send_modify(|view| {
            view.state.status = SessionStatus::Idle;
            view.state.running_turn = None;
        });
        self.end_turn();
    }

    pub(super) fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// When a turn or compaction last began or ended.
    pub(super) fn last_used(&self) -> Instant {
        *self.last_used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases the lock a turn or compaction held (an unloaded session keeps it for good),
    /// and with it the turn's lease.
    pub(super) fn end_turn(&self) {
        let mut lock = self.lock();
        if matches!(lock.turn, Turn::Running(_)) {
            lock.turn = Turn::Idle;
        }
        let lease = lock.lease.take();
        drop(lock);
        drop(lease);
    }

    /// Keeps the running turn's lease until the turn lock is released; its epoch fences the
    /// saves from now on. A lease for a turn that already ended is released at once.
    pub(super) fn hold_lease(&self, lease: HeldLease) {
        let mut lock = self.lock();
        if matches!(lock.turn, Turn::Running(_)) {
            self.fence.store(lease.epoch(), Ordering::Release);
            lock.lease = Some(lease);
        }
    }

    /// The running turn's lease, to release it before the turn lock.
    pub(super) fn take_lease(&self) -> Option<HeldLease> {
        self.lock().lease.take()
    }

    /// Saves carry `epoch` from now on: a lease taken for a command that takes the turn lock
    /// itself (a compaction, a rewind).
    pub(super) fn set_fence(&self, epoch: u64) {
        self.fence.store(epoch, Ordering::Release);
    }

    /// The lease epoch saves carry (see [`Shared::fence`]).
    pub(super) fn fence(&self) -> u64 {
        self.fence.load(Ordering::Acquire)
    }

    /// Whether this copy holds what the store holds: its last save's watermark is the
    /// stored one (a session not stored yet is current by definition).
    pub(super) fn is_current(&self, stored_seq: Option<u64>) -> bool {
        stored_seq.is_none_or(|stored| stored == self.saved_seq.load(Ordering::Acquire))
    }

    /// Records in the journal that the turn after the last one ran in another process, which
    /// stopped before it ended (its lease expired unreleased): nothing of it was saved, and
    /// the turn about to run takes its number.
    pub(super) fn lost_turn(&self, holder: &str) {
        let turn = self.view.borrow().state.turns + 1;
        let error = format!(
            "lost: the replica running this turn ({holder}) stopped before it ended, and its lease expired; \
             nothing of the turn was saved"
        );
        tracing::warn!(turn, holder, "a turn was lost with the replica running it");
        self.journal.record(crate::agent::AgentEvent::TurnFailed { turn, error });
    }

    /// Notes a save's watermark (see [`Shared::is_current`]).
    pub(super) fn saved(&self, event_seq: u64) {
        self.saved_seq.store(event_seq, Ordering::Release);
    }

    /// Gives up this copy from under a turn lock its caller holds: the store moved on
    /// elsewhere, so the copy is unloaded for good and the session is loaded again. Whatever
    /// this copy did not save is lost, as it would be if its process had died.
    pub(super) fn discard(&self) -> bool {
        let mut lock = self.lock();
        if lock.closing || !matches!(lock.turn, Turn::Running(_)) {
            return false;
        }
        lock.turn = Turn::Unloaded;
        true
    }
}
