//! The actor task: runs turns one at a time, saves what each added, then publishes the idle
//! view before it releases the turn lock; a guard leaves the session unlocked and stopped
//! however the task ends.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use chrono::Utc;
use futures::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Keep;
use super::shared::Shared;
use super::{Command, TurnReply, may_auto_turn};
use crate::agent::{Agent, AgentEvent, EventSink, TurnInput};
#[cfg(feature = "session-compaction")]
use crate::error::ErrorKind;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::memory::recollections_of;
#[cfg(feature = "session-compaction")]
use crate::model::CompactResult;
use crate::model::{RewindResult, RunResult, SessionRecord, SessionStatus};
use crate::store::{HeldLease, SaveRequest, Signal, StoreError};

/// Runs the actor and, however it ends (shut down, every handle gone, a panic outside a turn,
/// the runtime dropping it), leaves the session unlocked, idle and marked stopped.
pub(super) async fn supervised(id: SessionId, shared: Arc<Shared>, actor: impl Future<Output = ()>) {
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
        if shared.is_busy() {
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
///
/// Every live session holds this future as long as it is loaded, so it is kept small: an
/// `async move` block rather than an `async fn`, whose arguments rustc stores twice (the agent
/// and the record, 2.3 KB, once as arguments and once as the body's locals), and each command's
/// work boxed while it runs, since a future is as large as the largest state it can be in (a
/// turn's: several KB).
#[expect(clippy::manual_async_fn, reason = "an async fn would store its arguments twice")]
pub(super) fn run(
    mut agent: Agent,
    mut record: SessionRecord,
    keep: Keep,
    mut commands: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
) -> impl Future<Output = ()> + Send {
    async move {
        let span = tracing::info_span!("session", session_id = %record.session_id, owner = %record.owner);
        // An auto-turn refused its lease (a turn runs in another process, which was told about
        // the mail): not tried again until something new happens here.
        let mut auto_refused = false;
        loop {
            // Mail that arrived during the last turn (after its last step boundary), or that a
            // rehydrated host session kept, starts the next turn here: the loop goes round only
            // while mail waits, so an idle host costs nothing.
            if !auto_refused
                && shared.mailbox.has_mail()
                && may_auto_turn(&shared.view(), shared.mailbox.limits())
                && let Ok(ticket) = shared.try_begin_turn(&record.session_id)
            {
                if !lease_auto_turn(&keep, &shared, &record.session_id, &ticket.cancel).boxed().await {
                    auto_refused = true;
                    continue;
                }
                let events = EventSink::new(None);
                let input = TurnInput::default();
                run_one_turn(&mut agent, &mut record, &keep, &shared, &span, (input, ticket.cancel, &events), true)
                    .boxed()
                    .await;
                continue;
            }
            let Some(command) = commands.recv().await else { break };
            auto_refused = false;
            match command {
                Command::RunTurn { input, cancel, events, reply, auto } => {
                    // The mail an auto-turn was started for may have gone with a caller's turn.
                    if auto && !shared.mailbox.has_mail() {
                        shared.abandon_turn();
                        continue;
                    }
                    if auto && !lease_auto_turn(&keep, &shared, &record.session_id, &cancel).boxed().await {
                        auto_refused = true;
                        continue;
                    }
                    let reply_value = run_one_turn(
                        &mut agent,
                        &mut record,
                        &keep,
                        &shared,
                        &span,
                        (input, cancel, &events),
                        auto,
                    )
                    .boxed()
                    .await;
                    // The caller may have stopped waiting; the result stays readable in the view.
                    let _ = reply.send(reply_value);
                }
                Command::History { reply } => {
                    let _ = reply.send(agent.history().to_vec());
                }
                #[cfg(feature = "session-compaction")]
                Command::Compact { cancel, reply } => {
                    let compacted = compact(&mut agent, &mut record, &keep, &shared, &span, &cancel).boxed().await;
                    let _ = reply.send(compacted);
                }
                Command::Rewind { to_turn, reply } => {
                    let result = match rewind(&mut agent, &mut record, &shared, to_turn) {
                        Ok(done) => finish(&mut agent, &mut record, &keep, &shared, None)
                            .boxed()
                            .await
                            .map_err(SessionError::from)
                            .map(|()| done),
                        Err(refused) => {
                            shared.end_turn();
                            Err(refused)
                        }
                    };
                    let _ = reply.send(result);
                }
                Command::Snapshot { reply } => {
                    let snapshot = super::Snapshot {
                        record: record.clone(),
                        history: agent.history().to_vec(),
                        events: shared.journal.held(),
                    };
                    let _ = reply.send(snapshot);
                }
                Command::Shutdown => break,
            }
        }
    }
}

/// Compacts the history now (`session_compact`), under the turn lock the caller took, and
/// saves it.
#[cfg(feature = "session-compaction")]
async fn compact(
    agent: &mut Agent,
    record: &mut SessionRecord,
    keep: &Keep,
    shared: &Shared,
    span: &tracing::Span,
    cancel: &CancellationToken,
) -> Result<CompactResult, SessionError> {
    // A held step's tool_use must stay the last message until it is answered.
    if agent.pending_step().is_some() {
        shared.end_turn();
        return Err(SessionError::invalid(format!(
            "session {} has pending tool calls: answer them with session_turn before compacting",
            record.session_id
        )));
    }
    let report = match AssertUnwindSafe(
        agent.compact_now(cancel, &EventSink::default().with_journal(shared.journal.clone())),
    )
    .catch_unwind()
    .await
    {
        Ok(crate::agent::compaction::Outcome::Done(report)) => Ok(report),
        Ok(crate::agent::compaction::Outcome::Cancelled) => Ok(crate::agent::compaction::Report::default()),
        Err(panic) => {
            let panic = panic_message(&*panic);
            tracing::error!(parent: span, "the compaction panicked: {panic}");
            Err(SessionError::agent(
                Some(record.session_id.clone()),
                ErrorKind::Internal,
                format!("internal error: the compaction panicked ({panic})"),
            ))
        }
    };
    let saved = finish(agent, record, keep, shared, None).await;
    report.and_then(|report| {
        saved.map_err(SessionError::from).map(|()| CompactResult {
            session_id: record.session_id.clone(),
            compacted: report.compacted,
            summarized: report.summarized,
            pruned_results: report.pruned.results,
            tokens_before: report.tokens_before,
            tokens_after: report.tokens_after,
        })
    })
}

/// Drops the history after turn `to_turn`'s end and journals it; [`finish`] saves it. The
/// turns dropped keep their journal events; their numbers are not given again, so the journal
/// and every waiter on a turn number stay unambiguous.
fn rewind(
    agent: &mut Agent,
    record: &mut SessionRecord,
    shared: &Shared,
    to_turn: u64,
) -> Result<RewindResult, SessionError> {
    let mark = record.turn_end(Some(to_turn)).map_err(SessionError::invalid)?;
    let mut rewound_turns = record.turn_marks.after(to_turn);
    if record.pending.is_some() && record.turns > to_turn {
        rewound_turns.push(record.turns);
    }
    let before = agent.history().len() as u64;
    agent.rewind(usize::try_from(mark.messages).unwrap_or(usize::MAX));
    record.turn_marks.truncate_after(to_turn);
    let dropped_messages = before.saturating_sub(mark.messages);
    shared.journal.record(AgentEvent::Rewound { to_turn, rewound_turns: rewound_turns.clone(), dropped_messages });
    Ok(RewindResult {
        session_id: record.session_id.clone(),
        to_turn,
        rewound_turns,
        dropped_messages,
        message_count: agent.history().len() as u64,
    })
}

/// Runs one turn whose lock is held, saves it and publishes it. A caller's turn resets the
/// count of auto-turns; an auto-turn (started by mail) adds one.
async fn run_one_turn(
    agent: &mut Agent,
    record: &mut SessionRecord,
    keep: &Keep,
    shared: &Shared,
    span: &tracing::Span,
    (input, cancel, events): (TurnInput, CancellationToken, &EventSink),
    auto: bool,
) -> TurnReply {
    let turn = agent.turns() + 1;
    tracing::info!(parent: span, turn, auto, "turn started");
    record.auto_turns = if auto { record.auto_turns.saturating_add(1) } else { 0 };
    // A spent budget keeps no prompt, in the journal as in the history (security review 2, G4).
    if agent.refuses_prompts().is_none() {
        shared.journal.turn_input(turn, &input);
    }
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
    let save_error = finish(agent, record, keep, shared, Some(Arc::new(result.clone()))).await.err();
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
    keep: &Keep,
    shared: &Shared,
    // Shared by the record and the published view: a long answer is held once, not twice.
    last_turn: Option<Arc<RunResult>>,
) -> Result<(), StoreError> {
    record.absorb(agent, last_turn.is_some());
    if let Some(result) = last_turn {
        record.last_turn = Some(result);
    }
    record.updated_at = Utc::now();
    record.event_seq = shared.journal.next_seq();
    let saved = save(keep, agent, record, shared).await;
    // A fenced save has nothing to keep: the store moved on elsewhere, and this copy is
    // dropped at its next turn.
    shared.set_unsaved(matches!(&saved, Err(error) if !matches!(error, StoreError::Fenced { .. })));
    // Released once saved, before anyone sees the session idle: whoever does may start the
    // next turn, here or in another process, at once.
    if let Some(lease) = shared.take_lease() {
        lease.release().await;
    }
    shared.view.send_replace(record.view(SessionStatus::Idle, None));
    shared.touch();
    shared.end_turn();
    // Nobody listening is the usual case, not an error.
    let _ = shared.changes.send(record.session_id.clone());
    saved
}

/// Takes the session's lease for an auto-turn whose turn lock is held, on a store several
/// processes share (a caller's turn took it before it was sent here). Refused — busy in
/// another process, or this copy behind the store — the turn lock is given back and the other
/// processes are told mail waits, so one holding a current copy takes it after its turn.
async fn lease_auto_turn(keep: &Keep, shared: &Shared, id: &SessionId, cancel: &CancellationToken) -> bool {
    let Some(store) = &keep.store else { return true };
    let Some(leases) = store.leases() else { return true };
    let refused = match leases.take(id, &keep.leasing.holder, keep.leasing.ttl).await {
        Ok(Some(grant)) if shared.is_current(grant.stored_event_seq) => {
            if let Some(holder) = &grant.lost {
                shared.lost_turn(holder);
            }
            shared.hold_lease(HeldLease::start(
                store.clone(),
                id.clone(),
                &keep.leasing,
                grant.epoch,
                cancel.clone(),
            ));
            return true;
        }
        Ok(Some(grant)) => {
            crate::store::lease::give_back(leases, id, &keep.leasing.holder, grant.epoch).await;
            "this copy is behind the store"
        }
        Ok(None) => "a turn runs in another process",
        Err(error) => {
            tracing::warn!(session_id = %id, "taking the turn lease for mail: {error}");
            "the store did not answer"
        }
    };
    shared.abandon_turn();
    tracing::info!(session_id = %id, "mail waits: {refused}");
    if let Err(error) = leases.signal(Signal::Mail(id.clone())).await {
        tracing::warn!(session_id = %id, "telling other replicas that mail waits: {error}");
    }
    false
}

/// Writes what changed since the last save. On failure nothing is marked saved, so the next
/// save writes it again: a failed save loses nothing while the session stays live.
async fn save(keep: &Keep, agent: &mut Agent, record: &SessionRecord, shared: &Shared) -> Result<(), StoreError> {
    let (journal, mailbox) = (&shared.journal, &shared.mailbox);
    let events = journal.unsaved();
    let delivered = mailbox.delivered_unsaved();
    let Some(store) = &keep.store else {
        journal.mark_saved(events.len());
        mailbox.mark_delivered_saved(delivered.len());
        // Without a store, the memory index is where compacted history is kept.
        keep.memory.kept(recollections_of(record, &agent.take_recollections())).await;
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
        memories: recollections_of(record, agent.unsaved_recollections()),
        fence: store.leases().map(|_| shared.fence()),
    };
    let saved_events = request.events.len();
    let kept_memories = !request.memories.is_empty();
    store.save(request).await?;
    shared.saved(record.event_seq);
    agent.mark_saved();
    mailbox.mark_delivered_saved(delivered_count);
    journal.mark_saved(saved_events);
    if kept_memories {
        keep.memory.caught_up().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::future::Ready;
    use std::pin::Pin;

    use super::*;

    /// What `SessionHandle::spawn` hands `supervised`, in shape.
    type BoxedActor = Pin<Box<Ready<()>>>;

    /// Every live session's task holds its actor for as long as it is loaded. With a turn's
    /// state inline and its arguments stored twice, the actor was 9.4 KB, and twice that in the
    /// task (19 KB a session, heaptrack in scenario 5): at rest it is its agent, its record and
    /// a few handles, and the supervisor holds it boxed.
    #[test]
    fn the_actor_at_rest_is_little_more_than_its_agent_and_record() {
        fn run_size<A, B, C, D, E, F>(_run: fn(A, B, C, D, E) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        fn supervised_size<A, B, C, F>(_supervised: fn(A, B, C) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let actor = run_size(run);
        let own = std::mem::size_of::<Agent>() + std::mem::size_of::<SessionRecord>();
        assert!(actor < own + 1024, "the actor's future takes {actor} bytes, its agent and record {own}");
        let boxed: fn(SessionId, Arc<Shared>, BoxedActor) -> _ = |id, shared, actor| supervised(id, shared, actor);
        let supervisor = supervised_size(boxed);
        assert!(supervisor < 256, "the supervisor takes {supervisor} bytes beside the boxed actor");
    }
}
