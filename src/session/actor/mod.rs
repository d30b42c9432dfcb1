//! One live session: a cloneable [`SessionHandle`] in front of an actor task that owns the
//! [`Agent`].
//!
//! The actor is the only code that touches the agent, so the agent needs no lock. Everything
//! a caller may ask *without* waiting lives in `Shared` beside it ([`shared`]): the turn lock
//! (one mutex over its states: idle, running with the turn's cancel token, or unloaded for
//! good, beside whether an archive began and whether the last save failed), and the session's
//! current [`SessionView`] in a `watch` channel, which the actor refreshes after every turn.
//! That is why `read`, `list` and `interrupt` never wait behind a running turn.
//!
//! With a store, the actor saves after every turn (never during one), before it releases the
//! turn lock: only what the turn added is written, together with the session's record.
//!
//! A panic inside a turn (a tool, a provider adapter, the loop) is caught around the turn's
//! future: the turn ends `failed` with `error_kind: internal`, its history is closed as for an
//! interrupt, and the session goes on. Whatever ends the actor task, a guard releases the turn
//! lock, shows the session idle and marks the actor stopped, so no caller waits for ever.
//!
//! Hibernation unloads an idle session by taking its turn lock for good
//! ([`SessionHandle::try_unload`]) and stopping the actor; a caller still holding the handle
//! sees it unloaded and goes back to the service, which resumes the session from the store.

use std::sync::{Arc, PoisonError};

use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::{
    Agent, AgentFactory, EventSink, InboxLimits, Journal, Ledger, MailQuota, Mailbox, NoRoom, TurnInput,
};
use crate::error::{ErrorKind, SessionError};
use crate::ids::SessionId;
use crate::llm::Message;
use crate::memory::SharedMemory;
#[cfg(feature = "session-compaction")]
use crate::model::CompactResult;
use crate::model::inbox::{Delivery, InboxMessage};
use crate::model::{AgentSpec, RewindResult, RunResult, SessionRecord, SessionStatus, SessionSummary, SessionView};
use crate::policy::Grants;
use crate::store::{SharedStore, StoreError, StoredInbox, StoredMail};

mod shared;
mod task;

pub use crate::store::{HeldLease, Leasing};
use shared::Shared;
use task::{run, supervised};

/// What the actor is asked to do. Only one `RunTurn` or `Compact` is ever queued: the turn
/// lock is taken before either is sent.
enum Command {
    RunTurn {
        input: TurnInput,
        cancel: CancellationToken,
        events: EventSink,
        reply: oneshot::Sender<TurnReply>,
        /// Started by mail on a host-mode session rather than by a caller.
        auto: bool,
    },
    /// The history, for callers that want the whole conversation (answered between turns).
    History { reply: oneshot::Sender<Vec<Message>> },
    /// Compact the history now (`session_compact`); the turn lock is held by the sender.
    #[cfg(feature = "session-compaction")]
    Compact { cancel: CancellationToken, reply: oneshot::Sender<Result<CompactResult, SessionError>> },
    /// Drop the history after a turn's end (`session_rewind`); the turn lock is held by the
    /// sender.
    Rewind { to_turn: u64, reply: oneshot::Sender<Result<RewindResult, SessionError>> },
    /// The record, the whole history and the journal events held in memory, as of one moment
    /// (what a fork or an export copies), answered between turns.
    Snapshot { reply: oneshot::Sender<Snapshot> },
    /// Stop after whatever is in flight (the channel is FIFO, so a running turn finishes).
    Shutdown,
}

/// How a live session's agent was built: its children are built with the same factory and
/// grants, from its resolved spec.
pub struct Provenance {
    pub factory: Arc<AgentFactory>,
    pub grants: Grants,
    pub spec: AgentSpec,
}

#[derive(Clone)]
pub struct SessionHandle {
    id: SessionId,
    commands: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    /// How the session's agent was built (what its children are built with).
    provenance: Arc<Provenance>,
}

/// What the actor answers for a turn: its result, and whether saving it failed.
pub struct TurnReply {
    pub result: RunResult,
    pub save_error: Option<StoreError>,
}

/// A session as of one moment, between turns.
pub struct Snapshot {
    pub record: SessionRecord,
    pub history: Vec<Message>,
    /// Journal events the actor holds: not in the store (not committed yet, or no store).
    pub events: Vec<crate::model::StoredEvent>,
}

/// Where an actor keeps what its turns did: the store (none: the session lives only in this
/// process), and the server's memory, which indexes the history compaction takes out of the
/// session's context.
#[derive(Clone, Debug)]
pub struct Keep {
    pub store: SharedStore,
    pub memory: SharedMemory,
    /// The lease epoch the session was loaded at (0: never leased), on a store several
    /// processes share: its saves are fenced by it until a turn takes the lease.
    pub fence: u64,
    /// This process's name and lease length: an auto-turn takes the lease in the actor.
    pub leasing: Leasing,
}

/// A won turn lock: the turn's cancel token and its number.
pub struct TurnTicket {
    pub cancel: CancellationToken,
    pub turn: u64,
}

impl SessionHandle {
    /// Starts the actor for an agent and its record (new, or rehydrated from the store), on
    /// `tasks`, so shutdown can wait for it to exit.
    /// Each finished turn or compaction is announced on `changes`.
    /// The inbox starts with `inbox` (what the store kept) and is bounded by `limits` and its
    /// owner's mail quota.
    pub fn spawn(
        mut agent: Agent,
        record: SessionRecord,
        keep: Keep,
        tasks: &TaskTracker,
        changes: broadcast::Sender<SessionId>,
        inbox: (InboxLimits, StoredInbox, Arc<MailQuota>),
        provenance: Arc<Provenance>,
    ) -> Self {
        let id = record.session_id.clone();
        let (limits, stored, quota) = inbox;
        let mailbox = Arc::new(Mailbox::new(limits, agent.handling_hops(), (stored.waiting, stored.parked), quota));
        agent.attach_mailbox(mailbox.clone());
        let shared = Arc::new(Shared::new(
            record.view(SessionStatus::Idle, None),
            agent.full_outputs(),
            changes,
            mailbox,
            Journal::open(&record, keep.store.is_none()),
            agent.ledger(),
            (keep.fence, record.event_seq),
        ));
        let (commands, receiver) = mpsc::channel(4);
        // Boxed: `supervised` keeps its argument beside the future it makes of it, so an actor
        // passed by value would take its room twice in every live session's task.
        let actor = Box::pin(run(agent, record, keep, receiver, shared.clone()));
        tasks.spawn(supervised(id.clone(), shared.clone(), actor));
        Self { id, commands, shared, provenance }
    }

    /// How the session's agent was built.
    pub fn provenance(&self) -> &Arc<Provenance> {
        &self.provenance
    }

    /// The agent's delegation ledger.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.shared.ledger
    }

    /// The session's inbox.
    pub fn mailbox(&self) -> &Arc<Mailbox> {
        &self.shared.mailbox
    }

    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Whether both handles front the same actor (a session resumed twice has two).
    pub fn same_actor(&self, other: &SessionHandle) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Takes the turn lock for good, to unload the session: only when no turn or compaction
    /// runs, the store has everything (the last save succeeded) and no archive began. Done
    /// under the turn lock's mutex (see `shared`), so a concurrent turn either wins the lock
    /// first (and the unload gives up) or sees the handle unloaded. Pending tool calls do not
    /// hold the lock: the held step is in the saved record, and answering it resumes the
    /// session.
    pub fn try_unload(&self) -> bool {
        self.shared.try_unload()
    }

    /// Whether the session was unloaded from this handle: it lives on in the store only.
    pub fn is_unloaded(&self) -> bool {
        self.shared.is_unloaded()
    }

    /// When a turn or compaction last began or ended.
    pub fn last_used(&self) -> Instant {
        self.shared.last_used()
    }

    /// Refuses turns from now on (an archive began). Set under the registry's lock by
    /// `archive`, so an unload and an archive never both take the same session.
    pub fn mark_closing(&self) {
        self.shared.mark_closing();
    }

    /// Takes the turn lock for a turn and shows the session running.
    pub fn try_begin_turn(&self) -> Result<TurnTicket, SessionError> {
        self.shared.try_begin_turn(&self.id)
    }

    /// Gives back a won turn lock without running anything (the request was refused after
    /// the lock was taken, e.g. answers that do not match the pending calls).
    pub fn abandon_turn(&self) {
        self.shared.abandon_turn();
    }

    /// Keeps a won turn's lease (on a store several processes share) until its lock is
    /// released; the turn's saves carry its epoch.
    pub fn hold_lease(&self, lease: HeldLease) {
        self.shared.hold_lease(lease);
    }

    /// Records a turn lost with the replica that ran it (see [`crate::store::LeaseGrant::lost`]).
    pub fn lost_turn(&self, holder: &str) {
        self.shared.lost_turn(holder);
    }

    /// Saves carry `epoch` from now on (a lease taken for a compaction or a rewind).
    pub fn set_fence(&self, epoch: u64) {
        self.shared.set_fence(epoch);
    }

    /// Whether this copy holds what the store holds, as a lease's grant gives the stored
    /// journal watermark.
    pub fn is_current(&self, stored_event_seq: Option<u64>) -> bool {
        self.shared.is_current(stored_event_seq)
    }

    /// Gives up this copy from under the turn lock the caller won: the store moved on
    /// elsewhere. The service then drops it from the live map and loads the session again.
    pub fn discard(&self) -> bool {
        self.shared.discard()
    }

    /// Hands a won turn to the actor; the result arrives on the returned channel.
    pub async fn run_turn(
        &self,
        ticket: &TurnTicket,
        input: TurnInput,
        events: EventSink,
    ) -> Result<oneshot::Receiver<TurnReply>, SessionError> {
        let (reply, result) = oneshot::channel();
        let command = Command::RunTurn { input, cancel: ticket.cancel.clone(), events, reply, auto: false };
        if self.commands.send(command).await.is_err() {
            self.shared.end_turn();
            return Err(self.stopped_error());
        }
        Ok(result)
    }

    /// Without a store: the session's published journal events after `after` (see
    /// [`Journal::page`]). Never waits for a running turn.
    pub fn events(&self, after: Option<u64>, limit: usize) -> Vec<crate::model::StoredEvent> {
        self.shared.journal.page(after, limit)
    }

    /// The running turn's events not committed yet, after `after` (see
    /// [`Journal::provisional`]), and what changes when more are recorded.
    pub fn provisional(&self, after: Option<u64>) -> (Vec<crate::model::StoredEvent>, watch::Receiver<u64>) {
        let activity = self.shared.journal.activity();
        (self.shared.journal.provisional(after), activity)
    }

    /// The whole history; waits for a running turn to end.
    pub async fn history(&self) -> Result<Vec<Message>, SessionError> {
        let (reply, history) = oneshot::channel();
        if self.commands.send(Command::History { reply }).await.is_err() {
            return Err(self.stopped_error());
        }
        history.await.map_err(|_| self.stopped_error())
    }

    /// The full output of a capped tool result, while the live agent holds it (until a store
    /// has saved it). Never waits for a running turn.
    pub fn tool_output(&self, tool_use_id: &str) -> Option<String> {
        self.shared.full_outputs.lock().unwrap_or_else(PoisonError::into_inner).get(tool_use_id).cloned()
    }

    /// Compacts the history now. Holds the turn lock meanwhile, so a turn can neither run
    /// during a compaction nor be compacted under: both answer `Busy`.
    #[cfg(feature = "session-compaction")]
    pub async fn compact(&self) -> Result<CompactResult, SessionError> {
        let cancel = self.shared.try_lock(&self.id)?;
        let (reply, result) = oneshot::channel();
        if self.commands.send(Command::Compact { cancel, reply }).await.is_err() {
            self.shared.end_turn();
            return Err(self.stopped_error());
        }
        result.await.map_err(|_| self.stopped_error())?
    }

    /// Drops the history after turn `to_turn`'s end. Holds the turn lock meanwhile, so it is
    /// refused (`Busy`) while a turn or a compaction runs.
    pub async fn rewind(&self, to_turn: u64) -> Result<RewindResult, SessionError> {
        self.shared.try_lock(&self.id)?;
        let (reply, result) = oneshot::channel();
        if self.commands.send(Command::Rewind { to_turn, reply }).await.is_err() {
            self.shared.end_turn();
            return Err(self.stopped_error());
        }
        result.await.map_err(|_| self.stopped_error())?
    }

    /// The session as of one moment; waits for a running turn to end.
    pub async fn snapshot(&self) -> Result<Snapshot, SessionError> {
        let (reply, snapshot) = oneshot::channel();
        if self.commands.send(Command::Snapshot { reply }).await.is_err() {
            return Err(self.stopped_error());
        }
        snapshot.await.map_err(|_| self.stopped_error())
    }

    /// Cancels the turn in flight. Returns false when no turn runs.
    pub fn interrupt(&self) -> bool {
        self.shared.interrupt()
    }

    /// Whether the turn lock is held: a turn (or a compaction) is running. An unloaded
    /// session holds the lock but runs nothing.
    pub fn is_busy(&self) -> bool {
        self.shared.is_busy()
    }

    /// The current view, without waiting.
    pub fn view(&self) -> SessionView {
        self.shared.view()
    }

    /// Takes a message into the inbox: kept by the store first (when there is one), so a
    /// sender told it was taken can count on it. On an idle host-mode session it starts a
    /// turn. `None` when the handle turned out unloaded meanwhile: the store has the message,
    /// and the caller must deliver it again through the session's new handle.
    ///
    /// Errors: `InboxFull`, `MailQuotaFull`, `NotFound` (archived), `Store`.
    pub async fn deliver(
        &self,
        message: InboxMessage,
        store: &SharedStore,
    ) -> Result<Option<Delivery>, SessionError> {
        let mailbox = &self.shared.mailbox;
        {
            let _sending = mailbox.sending().await;
            if self.shared.is_closing() {
                return Err(archived_error(&self.id));
            }
            let parked = mailbox.parks(&message);
            if !parked && let Err(no_room) = mailbox.room_for(&message) {
                return Err(match no_room {
                    NoRoom::Messages { capacity } => {
                        SessionError::InboxFull { session_id: self.id.clone(), capacity }
                    }
                    NoRoom::OwnerBytes { held, limit } => {
                        SessionError::MailQuotaFull { session_id: self.id.clone(), held, limit }
                    }
                });
            }
            if let Some(store) = store {
                let evict = if parked { mailbox.would_evict() } else { None };
                let mail = StoredMail { parked, message: message.clone() };
                match store.leases() {
                    // Shared with other processes: the capacity is counted where all of them post.
                    Some(leases) => {
                        let capacity = mailbox.limits().capacity;
                        if !leases.post_within(&self.id, &mail, evict.as_ref(), capacity).await? {
                            return Err(SessionError::InboxFull { session_id: self.id.clone(), capacity });
                        }
                    }
                    None => store.post(&self.id, mail, evict).await?,
                }
            }
            if let crate::agent::inbox::Admitted::Parked { .. } = mailbox.admit(message) {
                return Ok(Some(Delivery::Parked));
            }
        }
        if self.is_unloaded() {
            return Ok(None);
        }
        Ok(Some(if self.start_auto_turn() { Delivery::StartedTurn } else { Delivery::Queued }))
    }

    /// Starts a turn for the waiting mail if the session may take one on its own
    /// ([`may_auto_turn`]) and nobody holds the turn lock. Never waits.
    pub fn start_auto_turn(&self) -> bool {
        if !self.shared.mailbox.has_mail() || !may_auto_turn(&self.view(), self.shared.mailbox.limits()) {
            return false;
        }
        let Ok(ticket) = self.try_begin_turn() else { return false };
        // Nobody waits for an auto-turn's reply: its result is in the view, as any turn's.
        let (reply, _) = oneshot::channel();
        let command = Command::RunTurn {
            input: TurnInput::default(),
            cancel: ticket.cancel,
            events: EventSink::new(None),
            reply,
            auto: true,
        };
        if self.commands.try_send(command).is_err() {
            self.abandon_turn();
            return false;
        }
        true
    }

    /// The session's summary, read in place from the published view: `list` copies a few
    /// fields per session, never a whole view (its last turn, pending calls, context).
    pub fn summary(&self) -> SessionSummary {
        SessionSummary::from(&*self.shared.view.borrow())
    }

    /// Where the session sits in its delegation tree (it never changes).
    pub fn lineage(&self) -> crate::model::Lineage {
        self.shared.view.borrow().state.lineage.clone()
    }

    /// The subject that owns the session (it never changes).
    pub fn owner(&self) -> String {
        self.shared.view.borrow().state.owner.clone()
    }

    /// Waits until turn `turn` has finished (or the actor stopped), then returns the view.
    pub async fn view_after_turn(&self, turn: u64) -> SessionView {
        let mut updates = self.shared.view.subscribe();
        let finished = updates.wait_for(|view| view.state.turns >= turn || view.state.running_turn.is_none());
        tokio::select! {
            _ = finished => {}
            () = self.shared.stopped.cancelled() => {}
        }
        self.view()
    }

    /// Resolves once no turn runs (its result published and saved).
    pub async fn wait_idle(&self) {
        let mut updates = self.shared.view.subscribe();
        tokio::select! {
            _ = updates.wait_for(|view| view.state.running_turn.is_none()) => {}
            () = self.shared.stopped.cancelled() => {}
        }
    }

    /// Archiving: refuses turns from now on, stops the actor after the turn in flight, and
    /// waits until it has exited.
    pub async fn shutdown(&self) {
        self.shared.mark_closing();
        self.stop().await;
    }

    /// At process shutdown: stops the actor after the turn in flight; [`TaskTracker::wait`]
    /// tells when it has exited.
    pub async fn stop(&self) {
        // A send error means the actor is already gone, which is what we want.
        let _ = self.commands.send(Command::Shutdown).await;
        self.shared.stopped.cancelled().await;
    }

    fn archived_error(&self) -> SessionError {
        archived_error(&self.id)
    }

    /// Why a command got no answer: the actor stopped before it ran. After `archive` began,
    /// that is the archive (the command was queued behind it); otherwise deputy is stopping.
    pub fn stopped_error(&self) -> SessionError {
        if self.shared.is_closing() {
            return self.archived_error();
        }
        SessionError::agent(
            Some(self.id.clone()),
            ErrorKind::Internal,
            format!("session {} stopped before answering (deputy is shutting down)", self.id),
        )
    }
}

fn archived_error(id: &SessionId) -> SessionError {
    SessionError::NotFound {
        session_id: id.clone(),
        message: format!("session {id} is archived: its history can be read, but it takes no more turns"),
    }
}

/// Whether a host-mode session may start a turn on its own for waiting mail: it is idle,
/// holds no step for its caller (mail then waits for the caller's answer), has budget left,
/// and has not yet taken `max_auto_turns` turns since its caller's last one.
pub fn may_auto_turn(view: &SessionView, limits: InboxLimits) -> bool {
    let (state, remaining) = (&view.state, &view.billing.remaining);
    // A spent budget keeps no mail either (its turn would end at once): the mail waits.
    let exhausted = remaining.tokens == Some(0)
        || remaining.tool_calls == Some(0)
        || remaining.duration_ms == Some(0)
        || remaining.cost_usd == Some(crate::llm::pricing::Usd::ZERO);
    state.host_mode
        && state.running_turn.is_none()
        && state.pending.is_empty()
        && state.inbox.auto_turns < limits.max_auto_turns
        && !exhausted
}
