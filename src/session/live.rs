//! [`LiveSessionService`]: sessions held in memory, one actor each.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::oneshot;

use super::SessionService;
use super::actor::{SessionHandle, SessionMeta, TurnTicket};
use super::types::*;
use crate::agent::{AgentFactory, EventSink};
use crate::error::SessionError;
use crate::ids::SessionId;

/// Characters of the first prompt kept as the session's title.
const TITLE_CHARS: usize = 80;

pub struct LiveSessionService {
    factory: AgentFactory,
    /// Only handles live here; the lock is held for map lookups, never across an await.
    sessions: RwLock<HashMap<SessionId, SessionHandle>>,
}

impl LiveSessionService {
    pub fn new(factory: AgentFactory) -> Self {
        Self { factory, sessions: RwLock::default() }
    }

    fn handle(&self, id: &SessionId) -> Result<SessionHandle, SessionError> {
        let sessions = self.sessions.read().unwrap_or_else(PoisonError::into_inner);
        sessions.get(id).cloned().ok_or_else(|| SessionError::not_found(id.clone()))
    }

    /// Sends a won turn to the actor and waits for it as the caller asked.
    async fn drive_turn(
        &self,
        handle: &SessionHandle,
        ticket: TurnTicket,
        prompt: String,
        options: TurnOptions,
    ) -> Result<RunResult, SessionError> {
        let result = handle.run_turn(&ticket, prompt, EventSink::new(options.events)).await?;
        let finished = wait_for_turn(handle, &ticket, result, options.wait, options.cancel).await?;
        match finished.status {
            TurnStatus::Failed => Err(SessionError::agent(
                Some(handle.id().clone()),
                format!(
                    "turn {} of session {} failed: {}",
                    finished.turn,
                    handle.id(),
                    finished.error.as_deref().unwrap_or("unknown error")
                ),
            )),
            TurnStatus::Completed | TurnStatus::Running | TurnStatus::Cancelled => Ok(finished),
        }
    }
}

/// Waits for a turn's result; answers `running` once `wait` runs out, and interrupts the turn
/// if the caller cancels while still waiting.
async fn wait_for_turn(
    handle: &SessionHandle,
    ticket: &TurnTicket,
    mut result: oneshot::Receiver<RunResult>,
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
    let lost = |_| {
        SessionError::agent(Some(handle.id().clone()), format!("session {} stopped during the turn", handle.id()))
    };
    tokio::select! {
        finished = &mut result => finished.map_err(lost),
        () = timeout => Ok(RunResult::running(handle.id().clone(), ticket.turn)),
        () = caller_gone => {
            ticket.cancel.cancel();
            result.await.map_err(lost)
        }
    }
}

fn title_of(prompt: &str) -> String {
    let line = prompt.trim();
    let mut title: String = line.chars().take(TITLE_CHARS).collect();
    if line.chars().nth(TITLE_CHARS).is_some() {
        title.push('…');
    }
    title
}

fn require_prompt(prompt: &str) -> Result<(), SessionError> {
    if prompt.trim().is_empty() {
        return Err(SessionError::invalid("prompt must not be empty"));
    }
    Ok(())
}

impl SessionService for LiveSessionService {
    async fn create_session(&self, request: CreateSessionRequest) -> Result<RunResult, SessionError> {
        require_prompt(&request.prompt)?;
        let agent = self.factory.build_agent(request.build)?;
        let id = SessionId::new();
        let meta =
            SessionMeta { title: title_of(&request.prompt), labels: request.labels, host_mode: request.host_mode };
        let handle = SessionHandle::spawn(id.clone(), agent, meta);
        // Nobody else knows the id yet, so the first turn always wins the lock.
        let ticket = handle.try_begin_turn()?;
        self.sessions.write().unwrap_or_else(PoisonError::into_inner).insert(id.clone(), handle.clone());
        tracing::info!(session_id = %id, "session created");
        self.drive_turn(&handle, ticket, request.prompt, request.turn).await
    }

    async fn start_turn(&self, id: &SessionId, request: TurnRequest) -> Result<RunResult, SessionError> {
        let handle = self.handle(id)?;
        require_prompt(&request.prompt)?;
        let ticket = handle.try_begin_turn()?;
        self.drive_turn(&handle, ticket, request.prompt, request.options).await
    }

    async fn interrupt(&self, id: &SessionId) -> Result<InterruptResult, SessionError> {
        let handle = self.handle(id)?;
        if handle.interrupt() {
            Ok(InterruptResult { session_id: id.clone(), interrupted: true })
        } else {
            Err(SessionError::NotRunning(id.clone()))
        }
    }

    async fn read(&self, id: &SessionId, wait: Option<Duration>) -> Result<SessionView, SessionError> {
        let handle = self.handle(id)?;
        let view = handle.view();
        match (wait, view.state.running_turn) {
            (Some(wait), Some(turn)) if !wait.is_zero() => {
                Ok(tokio::time::timeout(wait, handle.view_after_turn(turn)).await.unwrap_or_else(|_| handle.view()))
            }
            _ => Ok(view),
        }
    }

    async fn list(&self, query: ListQuery) -> Result<SessionList, SessionError> {
        let mut sessions: Vec<SessionSummary> = {
            let live = self.sessions.read().unwrap_or_else(PoisonError::into_inner);
            live.values().map(|handle| SessionSummary::from(&handle.view())).collect()
        };
        sessions.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.session_id.cmp(&b.session_id)));
        let total = sessions.len();
        let limit = query.limit.unwrap_or(DEFAULT_PAGE).min(MAX_PAGE);
        let page = sessions.into_iter().skip(query.offset).take(limit).collect();
        Ok(SessionList { sessions: page, total })
    }

    async fn archive(&self, id: &SessionId) -> Result<ArchiveResult, SessionError> {
        let handle = self.handle(id)?;
        handle.shutdown().await;
        self.sessions.write().unwrap_or_else(PoisonError::into_inner).remove(id);
        tracing::info!(session_id = %id, "session archived");
        Ok(ArchiveResult { session_id: id.clone(), archived: true })
    }
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
