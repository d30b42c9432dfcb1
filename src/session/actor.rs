//! One live session: a cloneable [`SessionHandle`] in front of an actor task that owns the
//! [`Agent`].
//!
//! The actor is the only code that touches the agent, so the agent needs no lock. Everything
//! a caller may ask *without* waiting lives in `Shared` beside it: the turn lock (an atomic
//! compare-and-swap), the cancel token of the turn in flight, and the session's current
//! [`SessionView`] in a `watch` channel, which the actor refreshes after every turn. That is
//! why `read`, `list` and `interrupt` never wait behind a running turn.
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

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::Utc;
use futures::FutureExt;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::{Agent, AgentFactory, EventSink, FullOutputs, InboxLimits, Journal, Ledger, Mailbox, TurnInput};
use crate::error::{ErrorKind, SessionError};
use crate::ids::SessionId;
use crate::llm::Message;
#[cfg(feature = "session-compaction")]
use crate::model::CompactResult;
use crate::model::inbox::{Delivery, InboxMessage};
use crate::model::{AgentSpec, RunResult, SessionRecord, SessionStatus, SessionSummary, SessionView};
use crate::policy::Grants;
use crate::store::{SaveRequest, SharedStore, StoreError, StoredInbox, StoredMail};

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

/// State shared by the handle and the actor, readable without waiting.
struct Shared {
    /// The turn lock. Taken by compare-and-swap; the mutex below only keeps the token in step
    /// with it so an `interrupt` never misses a turn that has just started.
    turn_running: AtomicBool,
    turn_cancel: Mutex<Option<CancellationToken>>,
    /// Set once `archive` began: no new turns.
    closing: AtomicBool,
    /// The session as `read` shows it; refreshed at each turn start and end.
    view: watch::Sender<SessionView>,
    /// Cancelled when the actor task has exited.
    stopped: CancellationToken,
    /// The agent's full tool outputs not saved yet, read without waiting for the actor.
    full_outputs: FullOutputs,
    /// When a turn or compaction last began or ended: the least recently used sessions are
    /// unloaded first, and sessions idle for long are unloaded (hibernation).
    last_used: Mutex<Instant>,
    /// The last save failed: the store is behind the actor, so the session must stay live
    /// (unloading it would lose what only the actor holds) until a save succeeds.
    unsaved: AtomicBool,
    /// Set, together with the turn lock (which is then never released), when the session is
    /// unloaded: the handle takes no more turns, and a caller that holds it goes back to the
    /// registry, which resumes the session from the store.
    unloaded: AtomicBool,
    /// Where the session says its view changed (a turn or a compaction ended): the service's
    /// feed of [`SessionService::changes`](super::SessionService::changes).
    changes: broadcast::Sender<SessionId>,
    /// The session's inbox; the agent takes its mail at step boundaries.
    mailbox: Arc<Mailbox>,
    /// The session's journal: every event, committed with the turn's save.
    journal: Journal,
    /// The agent's delegation ledger: the service carves children's budgets from it.
    ledger: Arc<Ledger>,
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

/// A won turn lock: the turn's cancel token and its number.
pub struct TurnTicket {
    pub cancel: CancellationToken,
    pub turn: u64,
}

impl SessionHandle {
    /// Starts the actor for an agent and its record (new, or rehydrated from the store), on
    /// `tasks`, so shutdown can wait for it to exit.
    /// Each finished turn or compaction is announced on `changes`.
    /// The inbox starts with `inbox` (what the store kept) and is bounded by `limits`.
    pub fn spawn(
        mut agent: Agent,
        record: SessionRecord,
        store: SharedStore,
        tasks: &TaskTracker,
        changes: broadcast::Sender<SessionId>,
        inbox: (InboxLimits, StoredInbox),
        provenance: Arc<Provenance>,
    ) -> Self {
        let id = record.session_id.clone();
        let (limits, stored) = inbox;
        let mailbox = Arc::new(Mailbox::new(limits, agent.handling_hops(), stored.waiting, stored.parked));
        agent.attach_mailbox(mailbox.clone());
        let shared = Arc::new(Shared {
            turn_running: AtomicBool::new(false),
            turn_cancel: Mutex::new(None),
            closing: AtomicBool::new(false),
            view: watch::Sender::new(record.view(SessionStatus::Idle, None)),
            stopped: CancellationToken::new(),
            full_outputs: agent.full_outputs(),
            last_used: Mutex::new(Instant::now()),
            unsaved: AtomicBool::new(false),
            unloaded: AtomicBool::new(false),
            changes,
            mailbox,
            journal: Journal::open(&record, store.is_none()),
            ledger: agent.ledger(),
        });
        let (commands, receiver) = mpsc::channel(4);
        let actor = run(agent, record, store, receiver, shared.clone());
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
    /// under the same mutex as the turn lock (`Shared::try_lock`), so a concurrent turn either wins the lock
    /// first (and the unload gives up) or sees the handle unloaded. Pending tool calls do not
    /// hold the lock: the held step is in the saved record, and answering it resumes the
    /// session.
    pub fn try_unload(&self) -> bool {
        let _slot = self.shared.turn_cancel.lock().unwrap_or_else(PoisonError::into_inner);
        if self.shared.closing.load(Ordering::Acquire) || self.shared.unsaved.load(Ordering::Acquire) {
            return false;
        }
        if self.shared.turn_running.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return false;
        }
        self.shared.unloaded.store(true, Ordering::Release);
        true
    }

    /// Whether the session was unloaded from this handle: it lives on in the store only.
    pub fn is_unloaded(&self) -> bool {
        self.shared.unloaded.load(Ordering::Acquire)
    }

    /// When a turn or compaction last began or ended.
    pub fn last_used(&self) -> Instant {
        *self.shared.last_used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses turns from now on (an archive began). Set under the registry's lock by
    /// `archive`, so an unload and an archive never both take the same session.
    pub fn mark_closing(&self) {
        self.shared.closing.store(true, Ordering::Release);
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

    /// Cancels the turn in flight. Returns false when no turn runs.
    pub fn interrupt(&self) -> bool {
        let slot = self.shared.turn_cancel.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.as_ref() {
            Some(cancel) if self.shared.turn_running.load(Ordering::Acquire) => {
                cancel.cancel();
                true
            }
            _ => false,
        }
    }

    /// Whether the turn lock is held: a turn (or a compaction) is running. An unloaded
    /// session holds the lock but runs nothing.
    pub fn is_busy(&self) -> bool {
        self.shared.turn_running.load(Ordering::Acquire) && !self.is_unloaded()
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
    /// Errors: `InboxFull`, `NotFound` (archived), `Store`.
    pub async fn deliver(
        &self,
        message: InboxMessage,
        store: &SharedStore,
    ) -> Result<Option<Delivery>, SessionError> {
        let mailbox = &self.shared.mailbox;
        {
            let _sending = mailbox.sending().await;
            if self.shared.closing.load(Ordering::Acquire) {
                return Err(archived_error(&self.id));
            }
            let parked = mailbox.parks(&message);
            if !parked && !mailbox.has_room() {
                return Err(SessionError::InboxFull {
                    session_id: self.id.clone(),
                    capacity: mailbox.limits().capacity,
                });
            }
            if let Some(store) = store {
                let evict = if parked { mailbox.would_evict() } else { None };
                store.post(&self.id, StoredMail { parked, message: message.clone() }, evict).await?;
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
        self.shared.closing.store(true, Ordering::Release);
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
        if self.shared.closing.load(Ordering::Acquire) {
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
    let exhausted =
        remaining.tokens == Some(0) || remaining.tool_calls == Some(0) || remaining.duration_ms == Some(0);
    state.host_mode
        && state.running_turn.is_none()
        && state.pending.is_empty()
        && state.inbox.auto_turns < limits.max_auto_turns
        && !exhausted
}

impl Shared {
    /// The published view, with the inbox as it is now.
    fn view(&self) -> SessionView {
        let mut view = self.view.borrow().clone();
        let (waiting, oldest_at) = self.mailbox.waiting();
        view.state.inbox.waiting = waiting;
        view.state.inbox.oldest_at = oldest_at;
        view.state.inbox_parked = self.mailbox.parked();
        view
    }

    /// The turn lock: exactly one concurrent taker wins, the others get `Busy` at once.
    fn try_lock(&self, id: &SessionId) -> Result<CancellationToken, SessionError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(archived_error(id));
        }
        let mut slot = self.turn_cancel.lock().unwrap_or_else(PoisonError::into_inner);
        // An unloaded handle answers `Busy` (its actor may have released the lock on exit);
        // the service sees `is_unloaded` and goes back to the registry.
        if self.unloaded.load(Ordering::Acquire)
            || self.turn_running.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err()
        {
            return Err(SessionError::Busy(id.clone()));
        }
        let cancel = CancellationToken::new();
        *slot = Some(cancel.clone());
        self.touch();
        Ok(cancel)
    }

    /// Takes the turn lock for a turn and shows the session running.
    fn try_begin_turn(&self, id: &SessionId) -> Result<TurnTicket, SessionError> {
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

    /// Shows the session idle and releases the turn lock, with nothing run (or nothing more
    /// to publish): a refused request, an auto-turn whose mail went with a caller's turn, an
    /// actor that ended.
    fn abandon_turn(&self) {
        self.view.send_modify(|view| {
            view.state.status = SessionStatus::Idle;
            view.state.running_turn = None;
        });
        self.end_turn();
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    fn end_turn(&self) {
        let mut slot = self.turn_cancel.lock().unwrap_or_else(PoisonError::into_inner);
        *slot = None;
        self.turn_running.store(false, Ordering::Release);
    }
}

/// Runs the actor and, however it ends (shut down, every handle gone, a panic outside a turn,
/// the runtime dropping it), leaves the session unlocked, idle and marked stopped.
async fn supervised(id: SessionId, shared: Arc<Shared>, actor: impl Future<Output = ()>) {
    let _stopped = ActorGuard(shared);
    if let Err(panic) = AssertUnwindSafe(actor).catch_unwind().await {
        tracing::error!(session_id = %id, "the session actor panicked: {}", panic_message(&*panic));
    }
}

/// Dropped when the actor task ends, on every path (unwinding included).
struct ActorGuard(Arc<Shared>);

impl Drop for ActorGuard {
    fn drop(&mut self) {
        let shared = &self.0;
        if shared.turn_running.load(Ordering::Acquire) && !shared.unloaded.load(Ordering::Acquire) {
            shared.abandon_turn();
        }
        shared.stopped.cancel();
    }
}

/// The text of a panic's payload (`panic!` with a literal or a formatted message).
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// The actor loop: runs turns one at a time until shut down or every handle is gone.
async fn run(
    mut agent: Agent,
    mut record: SessionRecord,
    store: SharedStore,
    mut commands: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
) {
    let span = tracing::info_span!("session", session_id = %record.session_id, owner = %record.owner);
    loop {
        // Mail that arrived during the last turn (after its last step boundary), or that a
        // rehydrated host session kept, starts the next turn here: the loop goes round only
        // while mail waits, so an idle host costs nothing.
        if shared.mailbox.has_mail()
            && may_auto_turn(&shared.view(), shared.mailbox.limits())
            && let Ok(ticket) = shared.try_begin_turn(&record.session_id)
        {
            let events = EventSink::new(None);
            let input = TurnInput::default();
            run_one_turn(&mut agent, &mut record, &store, &shared, &span, (input, ticket.cancel, &events), true)
                .await;
            continue;
        }
        let Some(command) = commands.recv().await else { break };
        match command {
            Command::RunTurn { input, cancel, events, reply, auto } => {
                // The mail an auto-turn was started for may have gone with a caller's turn.
                if auto && !shared.mailbox.has_mail() {
                    shared.abandon_turn();
                    continue;
                }
                let reply_value =
                    run_one_turn(&mut agent, &mut record, &store, &shared, &span, (input, cancel, &events), auto)
                        .await;
                // The caller may have stopped waiting; the result stays readable in the view.
                let _ = reply.send(reply_value);
            }
            Command::History { reply } => {
                let _ = reply.send(agent.history().to_vec());
            }
            #[cfg(feature = "session-compaction")]
            Command::Compact { cancel, reply } => {
                // A held step's tool_use must stay the last message until it is answered.
                if agent.pending_step().is_some() {
                    shared.end_turn();
                    let _ = reply.send(Err(SessionError::invalid(format!(
                        "session {} has pending tool calls: answer them with session_turn before compacting",
                        record.session_id
                    ))));
                    continue;
                }
                let report = match AssertUnwindSafe(
                    agent.compact_now(&cancel, &EventSink::default().with_journal(shared.journal.clone())),
                )
                .catch_unwind()
                .await
                {
                    Ok(crate::agent::compaction::Outcome::Done(report)) => Ok(report),
                    Ok(crate::agent::compaction::Outcome::Cancelled) => {
                        Ok(crate::agent::compaction::Report::default())
                    }
                    Err(panic) => {
                        let panic = panic_message(&*panic);
                        tracing::error!(parent: &span, "the compaction panicked: {panic}");
                        Err(SessionError::agent(
                            Some(record.session_id.clone()),
                            ErrorKind::Internal,
                            format!("internal error: the compaction panicked ({panic})"),
                        ))
                    }
                };
                let saved = finish(&mut agent, &mut record, &store, &shared, None).await;
                let result = report.and_then(|report| {
                    saved.map_err(SessionError::from).map(|()| CompactResult {
                        session_id: record.session_id.clone(),
                        compacted: report.compacted,
                        summarized: report.summarized,
                        pruned_results: report.pruned.results,
                        tokens_before: report.tokens_before,
                        tokens_after: report.tokens_after,
                    })
                });
                let _ = reply.send(result);
            }
            Command::Shutdown => break,
        }
    }
}

/// Runs one turn whose lock is held, saves it and publishes it. A caller's turn resets the
/// count of auto-turns; an auto-turn (started by mail) adds one.
async fn run_one_turn(
    agent: &mut Agent,
    record: &mut SessionRecord,
    store: &SharedStore,
    shared: &Shared,
    span: &tracing::Span,
    (input, cancel, events): (TurnInput, CancellationToken, &EventSink),
    auto: bool,
) -> TurnReply {
    let turn = agent.turns() + 1;
    tracing::info!(parent: span, turn, auto, "turn started");
    record.auto_turns = if auto { record.auto_turns.saturating_add(1) } else { 0 };
    shared.journal.turn_input(turn, &input);
    let events = &events.clone().with_journal(shared.journal.clone());
    let report = match AssertUnwindSafe(agent.run_turn(input, cancel, events)).catch_unwind().await {
        Ok(report) => report,
        Err(panic) => {
            let panic = panic_message(&*panic);
            tracing::error!(parent: span, turn, "the turn panicked: {panic}");
            let message = format!("internal error: the turn panicked ({panic})");
            agent.end_panicked_turn(turn, message, events)
        }
    };
    let result = RunResult::from_report(record.session_id.clone(), &report);
    tracing::info!(parent: span, turn = result.turn, status = ?result.status, stop_reason = ?result.stop_reason, "turn ended");
    let save_error = finish(agent, record, store, shared, Some(Arc::new(result.clone()))).await.err();
    if let Some(error) = &save_error {
        tracing::error!(parent: span, turn = result.turn, "saving the turn failed: {error}");
    }
    TurnReply { result, save_error }
}

/// The epilogue of everything that held the turn lock (a turn, a compaction): take the agent's
/// counters into the record, save, then publish the idle view *before* releasing the lock, so
/// whoever sees the session idle also sees what the command did. A turn also leaves its result.
async fn finish(
    agent: &mut Agent,
    record: &mut SessionRecord,
    store: &SharedStore,
    shared: &Shared,
    // Shared by the record and the published view: a long answer is held once, not twice.
    last_turn: Option<Arc<RunResult>>,
) -> Result<(), StoreError> {
    record.absorb(agent);
    if let Some(result) = last_turn {
        record.last_turn = Some(result);
    }
    record.updated_at = Utc::now();
    record.event_seq = shared.journal.next_seq();
    let saved = save(store, agent, record, &shared.journal, &shared.mailbox).await;
    shared.unsaved.store(saved.is_err(), Ordering::Release);
    shared.view.send_replace(record.view(SessionStatus::Idle, None));
    shared.touch();
    shared.end_turn();
    // Nobody listening is the usual case, not an error.
    let _ = shared.changes.send(record.session_id.clone());
    saved
}

/// Writes what changed since the last save. On failure nothing is marked saved, so the next
/// save writes it again: a failed save loses nothing while the session stays live.
async fn save(
    store: &SharedStore,
    agent: &mut Agent,
    record: &SessionRecord,
    journal: &Journal,
    mailbox: &Mailbox,
) -> Result<(), StoreError> {
    let events = journal.unsaved();
    let delivered = mailbox.delivered_unsaved();
    let Some(store) = store else {
        journal.mark_saved(events.len());
        mailbox.mark_delivered_saved(delivered.len());
        return Ok(());
    };
    let (replace_from, messages) = agent.unsaved();
    let delivered_count = delivered.len();
    let request = SaveRequest {
        record: record.clone(),
        replace_from: replace_from as u64,
        messages: messages.to_vec(),
        tool_outputs: agent.unsaved_tool_outputs(),
        delivered,
        events,
    };
    let saved_events = request.events.len();
    store.save(request).await?;
    agent.mark_saved();
    mailbox.mark_delivered_saved(delivered_count);
    journal.mark_saved(saved_events);
    Ok(())
}
