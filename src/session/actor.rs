//! One live session: a cloneable [`SessionHandle`] in front of an actor task that owns the
//! [`Agent`].
//!
//! The actor is the only code that touches the agent, so the agent needs no lock. Everything
//! a caller may ask *without* waiting lives in [`Shared`] beside it: the turn lock (an atomic
//! compare-and-swap), the cancel token of the turn in flight, and the session's current
//! [`SessionView`] in a `watch` channel, which the actor refreshes after every turn. That is
//! why `read`, `list` and `interrupt` never wait behind a running turn.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::Utc;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::types::{Billing, BudgetRemaining, RunResult, SessionState, SessionStatus, SessionView};
use crate::agent::turn::millis;
use crate::agent::{Agent, EventSink};
use crate::error::SessionError;
use crate::ids::SessionId;

/// What the actor is asked to do. Only one `RunTurn` is ever queued: the turn lock is taken
/// before it is sent.
enum Command {
    RunTurn {
        prompt: String,
        cancel: CancellationToken,
        events: EventSink,
        reply: oneshot::Sender<RunResult>,
    },
    /// Stop after whatever is in flight (the channel is FIFO, so a running turn finishes).
    Shutdown,
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
}

#[derive(Clone)]
pub struct SessionHandle {
    id: SessionId,
    commands: mpsc::Sender<Command>,
    shared: Arc<Shared>,
}

/// Session facts fixed at creation.
pub struct SessionMeta {
    pub title: String,
    pub labels: BTreeMap<String, String>,
    pub host_mode: bool,
}

/// A won turn lock: the turn's cancel token and its number.
pub struct TurnTicket {
    pub cancel: CancellationToken,
    pub turn: u64,
}

impl SessionHandle {
    /// Starts the actor for a freshly built agent.
    pub fn spawn(id: SessionId, agent: Agent, meta: SessionMeta) -> Self {
        let now = Utc::now();
        let view = SessionView {
            session_id: id.clone(),
            state: SessionState {
                status: SessionStatus::Idle,
                model: agent.model_id().to_owned(),
                title: meta.title,
                labels: meta.labels,
                host_mode: meta.host_mode,
                turns: 0,
                running_turn: None,
                message_count: 0,
                created_at: now,
                updated_at: now,
                last_turn: None,
            },
            billing: billing_of(&agent),
        };
        let shared = Arc::new(Shared {
            turn_running: AtomicBool::new(false),
            turn_cancel: Mutex::new(None),
            closing: AtomicBool::new(false),
            view: watch::Sender::new(view),
            stopped: CancellationToken::new(),
        });
        let (commands, receiver) = mpsc::channel(4);
        tokio::spawn(run(id.clone(), agent, receiver, shared.clone()));
        Self { id, commands, shared }
    }

    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Takes the turn lock: exactly one concurrent caller wins, the others get `Busy` at once.
    pub fn try_begin_turn(&self) -> Result<TurnTicket, SessionError> {
        if self.shared.closing.load(Ordering::Acquire) {
            return Err(self.archived_error());
        }
        let mut slot = self.shared.turn_cancel.lock().unwrap_or_else(PoisonError::into_inner);
        if self.shared.turn_running.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Err(SessionError::Busy(self.id.clone()));
        }
        let cancel = CancellationToken::new();
        *slot = Some(cancel.clone());
        drop(slot);
        let mut turn = 0;
        self.shared.view.send_modify(|view| {
            turn = view.state.turns + 1;
            view.state.status = SessionStatus::Running;
            view.state.running_turn = Some(turn);
            view.state.updated_at = Utc::now();
        });
        Ok(TurnTicket { cancel, turn })
    }

    /// Hands a won turn to the actor; the result arrives on the returned channel.
    pub async fn run_turn(
        &self,
        ticket: &TurnTicket,
        prompt: String,
        events: EventSink,
    ) -> Result<oneshot::Receiver<RunResult>, SessionError> {
        let (reply, result) = oneshot::channel();
        let command = Command::RunTurn { prompt, cancel: ticket.cancel.clone(), events, reply };
        if self.commands.send(command).await.is_err() {
            self.shared.end_turn();
            return Err(self.archived_error());
        }
        Ok(result)
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

    /// The current view, without waiting.
    pub fn view(&self) -> SessionView {
        self.shared.view.borrow().clone()
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

    /// Stops the actor after the turn in flight and waits until it has exited.
    pub async fn shutdown(&self) {
        self.shared.closing.store(true, Ordering::Release);
        // A send error means the actor is already gone, which is what we want.
        let _ = self.commands.send(Command::Shutdown).await;
        self.shared.stopped.cancelled().await;
    }

    fn archived_error(&self) -> SessionError {
        SessionError::NotFound { session_id: self.id.clone(), message: format!("session {} is archived", self.id) }
    }
}

impl Shared {
    fn end_turn(&self) {
        let mut slot = self.turn_cancel.lock().unwrap_or_else(PoisonError::into_inner);
        *slot = None;
        self.turn_running.store(false, Ordering::Release);
    }
}

/// The actor loop: runs turns one at a time until shut down or every handle is gone.
async fn run(id: SessionId, mut agent: Agent, mut commands: mpsc::Receiver<Command>, shared: Arc<Shared>) {
    let span = tracing::info_span!("session", session_id = %id);
    while let Some(command) = commands.recv().await {
        match command {
            Command::RunTurn { prompt, cancel, events, reply } => {
                let report = {
                    let _entered = span.enter();
                    tracing::info!(turn = agent.turns() + 1, "turn started");
                    drop(_entered);
                    agent.run_turn(prompt, cancel, &events).await
                };
                let result = RunResult::from_report(id.clone(), &report);
                tracing::info!(parent: &span, turn = result.turn, status = ?result.status, stop_reason = ?result.stop_reason, "turn ended");
                // The view is refreshed before the lock is released, so whoever sees the
                // session idle also sees this turn's result.
                shared.view.send_modify(|view| {
                    view.state.status = SessionStatus::Idle;
                    view.state.running_turn = None;
                    view.state.turns = result.turn;
                    view.state.message_count = agent.history().len();
                    view.state.updated_at = Utc::now();
                    view.state.last_turn = Some(result.clone());
                    view.billing = billing_of(&agent);
                });
                shared.end_turn();
                // The caller may have stopped waiting; the result stays readable in the view.
                let _ = reply.send(result);
            }
            Command::Shutdown => break,
        }
    }
    shared.stopped.cancel();
}

fn billing_of(agent: &Agent) -> Billing {
    let usage = agent.usage();
    let used = agent.consumption();
    let budget = agent.budget();
    Billing {
        usage,
        total_tokens: usage.total_tokens(),
        tool_calls: used.tool_calls,
        active_ms: millis(used.active),
        budget,
        remaining: BudgetRemaining {
            tokens: budget.max_tokens.map(|max| max.saturating_sub(used.tokens)),
            tool_calls: budget.remaining_tool_calls(&used),
            duration_ms: budget.remaining_time(&used).map(millis),
        },
    }
}
