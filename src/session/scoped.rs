//! [`ScopedService`]: one caller's view of a shared [`LiveSessionService`], and
//! [`CallerServices`], which makes one per caller.
//!
//! A shared service (one store, one set of live sessions) serves many callers, and each brings
//! its own context:
//!
//! - **who** it is, a [`Caller`] (subject and scopes): it owns the sessions it creates and sees
//!   only those unless it has `sessions:all` (security review F8). Every id-based operation
//!   checks ownership first, and a foreign session answers `SESSION_NOT_FOUND`;
//! - **what it may enable**, its [`Grants`] (shell, inline MCP servers: F3), computed once from
//!   the config file's `[policy]`, the surface it arrived on and its scopes;
//! - **how agents are built** for it, an [`AgentFactory`]: default model, workspace, config file
//!   and provider credentials (a background server's clients each bring their own).
//!
//! The surfaces stay generic over [`SessionService`] and never decide any of this: stdio makes
//! one view for the local user; HTTP asks [`CallerServices::for_caller`] for the view of the
//! caller its guard identified, per request.
//!
//! A live session keeps the agent (and so the credentials) it was built with, whoever continues
//! it; a stored session is rehydrated with the factory and grants of the caller that touches it
//! first.

use std::sync::Arc;
use std::time::Duration;

use super::SessionService;
use super::live::LiveSessionService;
use super::types::{CreateSessionRequest, ListQuery, MemoryQuery, Provisional, SendRequest, TurnRequest};
use crate::agent::AgentFactory;
use crate::caller::{Caller, Scope};
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::caller_info::CallerInfo;
use crate::model::inbox::SendResult;
use crate::model::webhooks::WebhooksStatus;
use crate::model::{
    ArchiveResult, CompactResult, InterruptResult, RewindResult, RunResult, SessionHistory, SessionList,
    SessionView, ToolOutputResult,
};
use crate::policy::{Grants, Surface};

/// Makes the view of one caller: what a surface serving many callers holds.
pub trait CallerServices: Send + Sync + 'static {
    type Service: SessionService;

    /// The sessions as `caller` may use them.
    fn for_caller(&self, caller: &Caller) -> Self::Service;
}

/// One caller's view of a shared live service. Cheap to make: a few `Arc` clones.
#[derive(Clone)]
pub struct ScopedService {
    inner: Arc<LiveSessionService>,
    factory: Arc<AgentFactory>,
    caller: Caller,
    grants: Grants,
}

impl ScopedService {
    /// What the whole service does (metrics, webhooks) is the operator's to see: the admin
    /// scope, or the anonymous caller, who exists only on a loopback server without tokens.
    fn require_operator_view(&self, refusal: &'static str) -> Result<(), SessionError> {
        if self.caller.has(Scope::Admin) || self.caller == Caller::anonymous() {
            return Ok(());
        }
        Err(SessionError::policy_denied(refusal))
    }

    /// The view of `caller`, arriving on `surface`, building agents with `factory`.
    pub fn new(
        inner: Arc<LiveSessionService>,
        factory: Arc<AgentFactory>,
        caller: Caller,
        surface: Surface,
    ) -> Self {
        let grants = factory.grants(&caller, surface);
        Self { inner, factory, caller, grants }
    }

    /// The local user's view (stdio, the background server's clients), with `factory`.
    pub fn local(inner: Arc<LiveSessionService>, factory: Arc<AgentFactory>) -> Self {
        Self::new(inner, factory, Caller::local(), Surface::Local)
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    pub fn grants(&self) -> &Grants {
        &self.grants
    }
}

/// Every caller's view of one shared service, on one surface: what the HTTP surface holds.
#[derive(Clone)]
pub struct PerCaller {
    inner: Arc<LiveSessionService>,
    factory: Arc<AgentFactory>,
    surface: Surface,
}

impl PerCaller {
    /// Views of `inner` for callers arriving on `surface`, with the service's own factory.
    pub fn new(inner: Arc<LiveSessionService>, surface: Surface) -> Self {
        let factory = inner.factory();
        Self { inner, factory, surface }
    }

    /// Views of `inner` whose agents `factory` builds: the background server's HTTP listener,
    /// with the configuration of the `serve --http` that asked for it.
    pub fn with_factory(inner: Arc<LiveSessionService>, factory: Arc<AgentFactory>, surface: Surface) -> Self {
        Self { inner, factory, surface }
    }
}

impl CallerServices for PerCaller {
    type Service = ScopedService;

    fn for_caller(&self, caller: &Caller) -> ScopedService {
        ScopedService::new(self.inner.clone(), self.factory.clone(), caller.clone(), self.surface)
    }
}

/// A view that is already one caller's serves that caller, whoever the surface says asks: the
/// background server's per-client service, where the transport is the caller's own.
impl CallerServices for ScopedService {
    type Service = ScopedService;

    fn for_caller(&self, _caller: &Caller) -> ScopedService {
        self.clone()
    }
}

impl SessionService for ScopedService {
    async fn create_session(&self, request: CreateSessionRequest) -> Result<RunResult, SessionError> {
        self.inner.create_session_with(&self.factory, &self.caller, &self.grants, request).await
    }

    async fn start_turn(&self, id: &SessionId, request: TurnRequest) -> Result<RunResult, SessionError> {
        self.inner.check_access(&self.caller, id).await?;
        self.inner.start_turn_with(&self.factory, &self.grants, id, request).await
    }

    async fn send(&self, id: &SessionId, request: SendRequest) -> Result<SendResult, SessionError> {
        // Access is checked once the target is known (a name resolves within the caller's own
        // sessions).
        self.inner.send_as(&self.factory, &self.caller, &self.grants, id, request).await
    }

    async fn interrupt(&self, id: &SessionId, cascade: bool) -> Result<InterruptResult, SessionError> {
        self.inner.check_access(&self.caller, id).await?;
        self.inner.interrupt(id, cascade).await
    }

    async fn read(&self, id: &SessionId, wait: Option<Duration>) -> Result<SessionView, SessionError> {
        self.inner.check_read(&self.caller, id).await?;
        self.inner.read(id, wait).await
    }

    async fn list(&self, query: ListQuery) -> Result<SessionList, SessionError> {
        self.inner.list_for(&self.caller, query).await
    }

    // A caller's memories are its subject's, whatever its scopes: `sessions:all` reads other
    // subjects' sessions, never their memories.
    async fn memories(&self, query: MemoryQuery) -> Result<crate::model::memory::MemoryList, SessionError> {
        self.inner.memories_of(self.caller.subject(), query).await
    }

    async fn index_documents(
        &self,
        collection: Option<String>,
    ) -> Result<crate::model::documents::DocumentsIndexed, SessionError> {
        if !self.caller.has(crate::caller::Scope::Admin) {
            return Err(SessionError::policy_denied(
                "documents/index: the document collections are the operator's (it needs the admin scope)",
            ));
        }
        super::live::index_documents_of(self.factory.documents(), collection).await
    }

    async fn forget_memory(&self, id: u64) -> Result<crate::model::memory::MemoryDeleted, SessionError> {
        if !self.caller.uses_sessions() {
            return Err(SessionError::policy_denied(
                "memory/delete: deleting memories needs the scope \"sessions\" (a viewer's token reads only)",
            ));
        }
        self.inner.forget_memory_of(self.caller.subject(), id).await
    }

    async fn archive(&self, id: &SessionId) -> Result<ArchiveResult, SessionError> {
        self.inner.check_access(&self.caller, id).await?;
        self.inner.archive_with(&self.factory, id).await
    }

    async fn compact(&self, id: &SessionId) -> Result<CompactResult, SessionError> {
        self.inner.check_access(&self.caller, id).await?;
        self.inner.compact_with(&self.factory, &self.grants, id).await
    }

    async fn fork(&self, id: &SessionId, at_turn: Option<u64>) -> Result<SessionView, SessionError> {
        self.inner.check_access(&self.caller, id).await?;
        self.inner.fork_with(&self.factory, &self.caller, &self.grants, id, at_turn).await
    }

    async fn rewind(&self, id: &SessionId, to_turn: u64) -> Result<RewindResult, SessionError> {
        self.inner.check_access(&self.caller, id).await?;
        self.inner.rewind_with(&self.factory, &self.grants, id, to_turn).await
    }

    async fn export(&self, id: &SessionId) -> Result<crate::model::ExportResult, SessionError> {
        self.inner.check_read(&self.caller, id).await?;
        self.inner.export_of(id).await
    }

    async fn import(&self, document: &str) -> Result<SessionView, SessionError> {
        self.inner.import_with(&self.factory, &self.caller, &self.grants, document).await
    }

    async fn tool_output(&self, id: &SessionId, tool_use_id: &str) -> Result<ToolOutputResult, SessionError> {
        self.inner.check_read(&self.caller, id).await?;
        self.inner.tool_output(id, tool_use_id).await
    }

    /// Draining belongs to whoever owns the shared service, not to one caller: a no-op here.
    async fn drain(&self, _timeout: Duration) {}

    async fn gauges(&self) -> Result<crate::telemetry::metrics::Gauges, SessionError> {
        self.require_operator_view("the service's metrics need the admin scope")?;
        self.inner.gauges().await
    }

    fn caller_info(&self) -> CallerInfo {
        CallerInfo::of(&self.caller)
    }

    async fn webhooks(&self) -> Result<WebhooksStatus, SessionError> {
        self.require_operator_view("webhooks/status: the webhooks are the operator's (it needs the admin scope)")?;
        self.inner.webhooks().await
    }

    async fn ready(&self) -> Result<(), SessionError> {
        self.inner.ready().await
    }

    async fn history(&self, id: &SessionId) -> Result<SessionHistory, SessionError> {
        self.inner.check_read(&self.caller, id).await?;
        self.inner.history(id).await
    }

    async fn events(
        &self,
        id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<crate::model::EventPage, SessionError> {
        self.inner.check_read(&self.caller, id).await?;
        self.inner.events(id, after, limit).await
    }

    async fn provisional(&self, id: &SessionId, after: Option<u64>) -> Result<Option<Provisional>, SessionError> {
        self.inner.check_read(&self.caller, id).await?;
        self.inner.provisional(id, after).await
    }

    /// Every session's, not only this caller's: ids only, and a listener reads (so checks
    /// access) before it tells anyone about one.
    fn changes(&self) -> tokio::sync::broadcast::Receiver<SessionId> {
        self.inner.changes()
    }

    /// Those of this caller's factory (a background server's client: its own config file's).
    fn agents(&self) -> crate::profiles::AgentList {
        self.factory.profiles().list()
    }

    fn agent(&self, name: &str) -> Result<crate::profiles::AgentDetail, SessionError> {
        self.factory.profiles().detail(name)
    }
}
