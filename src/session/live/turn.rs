//! Turns: a caller's turn (or compaction) on a live or resumed session, and how the caller waits
//! for it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::LiveSessionService;
use super::admission::require_prompt;
use super::lease::Leased;
use crate::agent::factory::output_contract;
use crate::agent::pending::resolve;
use crate::agent::{AgentFactory, EventSink, TurnInput};
use crate::error::{ErrorKind, SessionError};
use crate::ids::SessionId;
use crate::model::{CompactResult, RunResult, TurnStatus};
use crate::policy::Grants;
use crate::session::actor::{SessionHandle, TurnReply, TurnTicket};
use crate::session::types::*;
use crate::telemetry::caller_trace;

impl LiveSessionService {
    /// `start_turn`; a session that is not live is resumed with `factory`'s providers and
    /// workspace. A live session keeps the agent it was built with.
    pub async fn start_turn_with(
        &self,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        id: &SessionId,
        request: TurnRequest,
    ) -> Result<RunResult, SessionError> {
        let answers = !request.tool_results.is_empty() || !request.approvals.is_empty();
        if !answers {
            require_prompt(&request.prompt)?;
        }
        // Compiled once, before the turn is even locked: a bad schema changes nothing.
        let output = output_contract(request.output_schema, request.structured_output_retries)?;
        let (handle, ticket) = self.begin_turn(factory, grants, id).await?;
        // Checked under the turn lock, against the view the last turn published: nobody can
        // answer the same calls in between. A refusal changes nothing.
        let waiting = handle.view().state.pending;
        let resolution = match resolve(&waiting, request.tool_results, request.approvals, chrono::Utc::now()) {
            Ok(resolution) => resolution,
            Err(error) => {
                handle.abandon_turn();
                return Err(error);
            }
        };
        let input = TurnInput { prompt: Some(request.prompt), resolution, output, trace: None };
        self.drive_turn(&handle, ticket, input, request.options).await
    }

    /// Wins the session's turn: this process's turn lock, then, on a store several processes
    /// share, the session's lease (see [`super::lease`]). A copy found behind the store is
    /// loaded again under the lease already taken.
    async fn begin_turn(
        &self,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        id: &SessionId,
    ) -> Result<(SessionHandle, TurnTicket), SessionError> {
        let mut granted = None;
        loop {
            let won = self
                .with_handle(factory, grants, id, async |handle| Ok((handle.clone(), handle.try_begin_turn()?)));
            let (handle, ticket) = match won.await {
                Ok(won) => won,
                Err(error) => {
                    if let Some(grant) = granted {
                        self.release_lease(id, grant).await;
                    }
                    return Err(error);
                }
            };
            match self.lease_turn(&handle, &ticket, granted.take()).await? {
                Leased::Held => return Ok((handle, ticket)),
                Leased::Stale(grant) => granted = Some(grant),
            }
        }
    }

    /// `compact`; a session that is not live is resumed with `factory`.
    pub async fn compact_with(
        &self,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        id: &SessionId,
    ) -> Result<CompactResult, SessionError> {
        #[cfg(feature = "session-compaction")]
        {
            self.leased(factory, grants, id, async |handle| handle.compact().await).await
        }
        #[cfg(not(feature = "session-compaction"))]
        {
            let _ = (factory, grants, id);
            Err(SessionError::CompactionDisabled("session_compact".into()))
        }
    }

    /// Sends a won turn to the actor and waits for it as the caller asked.
    pub(super) async fn drive_turn(
        &self,
        handle: &SessionHandle,
        ticket: TurnTicket,
        input: TurnInput,
        options: TurnOptions,
    ) -> Result<RunResult, SessionError> {
        // The turn runs in its session's task: it takes the request's trace context along.
        let input = TurnInput { trace: input.trace.or_else(caller_trace::current), ..input };
        let reply = handle.run_turn(&ticket, input, EventSink::new(options.events)).await?;
        let finished = wait_for_turn(handle, &ticket, reply, options.wait, options.cancel).await?;
        turn_outcome(finished)
    }
}

/// What a caller of `create_session` / `start_turn` gets for a turn that has ended (or still
/// runs): the result, except that a failed turn is an `Agent` error. Also for surfaces that
/// collect a turn later (an MCP task), so they answer exactly what the call would have.
pub fn turn_outcome(finished: RunResult) -> Result<RunResult, SessionError> {
    match finished.status {
        TurnStatus::Failed => Err(SessionError::agent(
            Some(finished.session_id.clone()),
            finished.error_kind.unwrap_or(ErrorKind::Internal),
            format!(
                "turn {} of session {} failed: {}",
                finished.turn,
                finished.session_id,
                finished.error.as_deref().unwrap_or("unknown error")
            ),
        )),
        TurnStatus::Completed | TurnStatus::Running | TurnStatus::Cancelled | TurnStatus::PendingToolCalls => {
            Ok(finished)
        }
    }
}

/// Waits for a turn's result; answers `running` once `wait` runs out, and interrupts the turn
/// if the caller cancels while still waiting.
pub(super) async fn wait_for_turn(
    handle: &SessionHandle,
    ticket: &TurnTicket,
    mut reply: oneshot::Receiver<TurnReply>,
    wait: Option<Duration>,
    caller_cancel: Option<tokio_util::sync::CancellationToken>,
) -> Result<RunResult, SessionError> {
    let timeout = async {
        match wait {
            Some(wait) => tokio::time::sleep(wait).await,
            None => std::future::pending().await,
        }
    };
    let caller_gone = async {
        match &caller_cancel {
            Some(cancel) => cancel.cancelled().await,
            None => std::future::pending().await,
        }
    };
    // The actor stopped before running the turn: it was queued behind an archive or a drain.
    let lost = |_| handle.stopped_error();
    let reply = tokio::select! {
        finished = &mut reply => finished.map_err(lost)?,
        () = timeout => return Ok(RunResult::running(handle.id().clone(), ticket.turn)),
        () = caller_gone => {
            ticket.cancel.cancel();
            reply.await.map_err(lost)?
        }
    };
    match reply.save_error {
        None => Ok(reply.result),
        Some(error) => Err(SessionError::Store {
            message: format!(
                "turn {} of session {} finished but could not be saved ({error}); the session stays live and \
                 the next turn saves it again",
                reply.result.turn,
                handle.id()
            ),
            source: Some(Arc::new(error)),
        }),
    }
}
