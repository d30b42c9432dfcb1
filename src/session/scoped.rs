//! [`ScopedService`]: one caller's view of a shared [`LiveSessionService`].
//!
//! A background server serves many clients from one service (one store, one set of live
//! sessions), but each client brings its own context: default model, workspace, config file
//! and provider credentials. That context is an [`AgentFactory`]; the scoped service passes it
//! wherever an agent is built (creating a session, resuming a stored one) and delegates
//! everything else unchanged. The surfaces stay generic over [`SessionService`] and never learn
//! about it.
//!
//! A live session keeps the agent (and so the credentials) it was built with, whoever continues
//! it; a stored session is rehydrated with the factory of the caller that touches it first.
//! The seam is deliberately small and general: a later per-caller subject or scope check
//! belongs here too.

use std::sync::Arc;
use std::time::Duration;

use super::SessionService;
use super::live::LiveSessionService;
use super::types::{CreateSessionRequest, ListQuery, TurnRequest};
use crate::agent::AgentFactory;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::{
    ArchiveResult, CompactResult, InterruptResult, RunResult, SessionHistory, SessionList, SessionView,
    ToolOutputResult,
};

pub struct ScopedService {
    inner: Arc<LiveSessionService>,
    factory: Arc<AgentFactory>,
}

impl ScopedService {
    pub fn new(inner: Arc<LiveSessionService>, factory: Arc<AgentFactory>) -> Self {
        Self { inner, factory }
    }
}

impl SessionService for ScopedService {
    async fn create_session(&self, request: CreateSessionRequest) -> Result<RunResult, SessionError> {
        self.inner.create_session_with(&self.factory, request).await
    }

    async fn start_turn(&self, id: &SessionId, request: TurnRequest) -> Result<RunResult, SessionError> {
        self.inner.start_turn_with(&self.factory, id, request).await
    }

    async fn interrupt(&self, id: &SessionId) -> Result<InterruptResult, SessionError> {
        self.inner.interrupt(id).await
    }

    async fn read(&self, id: &SessionId, wait: Option<Duration>) -> Result<SessionView, SessionError> {
        self.inner.read(id, wait).await
    }

    async fn list(&self, query: ListQuery) -> Result<SessionList, SessionError> {
        self.inner.list(query).await
    }

    async fn archive(&self, id: &SessionId) -> Result<ArchiveResult, SessionError> {
        self.inner.archive(id).await
    }

    async fn compact(&self, id: &SessionId) -> Result<CompactResult, SessionError> {
        self.inner.compact_with(&self.factory, id).await
    }

    async fn tool_output(&self, id: &SessionId, tool_use_id: &str) -> Result<ToolOutputResult, SessionError> {
        self.inner.tool_output(id, tool_use_id).await
    }

    /// Draining belongs to whoever owns the shared service, not to one caller: a no-op here.
    async fn drain(&self, _timeout: Duration) {}

    async fn ready(&self) -> Result<(), SessionError> {
        self.inner.ready().await
    }

    async fn history(&self, id: &SessionId) -> Result<SessionHistory, SessionError> {
        self.inner.history(id).await
    }
}
