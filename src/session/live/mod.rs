//! [`LiveSessionService`]: live sessions in memory, one actor each, over an optional store.
//!
//! Without a store (Minimal builds, `--ephemeral`) a session lives as long as the process.
//! With one, every session is saved at creation and after each turn; a session that is not
//! live (after a restart, never touched since, or unloaded) is read from the store and
//! rehydrated on its next turn; archived sessions stay readable.
//!
//! One concept per file, all on the one service type:
//! - [`registry`]: the live map, its tombstones and the archive count that keeps a resume from
//!   racing an archive;
//! - [`hibernation`]: the bounded live set (idle reaper, `max_live`), unload and resume;
//! - [`admission`]: who may use a session, what a new one must be, and creating it;
//! - [`turn`]: a caller's turn or compaction, and waiting for it; [`lease`]: the turn lease
//!   that makes a turn exclusive across the processes sharing a database;
//! - [`archive`] and [`listing`];
//! - [`contexts`]: the context a session runs with when no caller brings one;
//! - [`comms`]: inboxes, names, peers and `send`; [`delegation`]: children, their budgets, caps,
//!   tree and notices; [`feed`]: the event journal's pages.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock, Weak};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::SessionService;
use super::actor::{Keep, Leasing, Provenance, SessionHandle};
use super::types::*;
use crate::agent::{Agent, AgentFactory, InboxLimits, MailQuota};
use crate::caller::Caller;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::memory::{Memory, SharedMemory};
use crate::model::SessionRecord;
use crate::model::caller_info::CallerInfo;
use crate::model::inbox::SendResult;
use crate::model::memory::MemoryBounds;
use crate::model::webhooks::WebhooksStatus;
use crate::model::{
    ArchiveResult, CompactResult, InterruptResult, RewindResult, RunResult, SessionHistory, SessionList,
    SessionView, ToolOutputResult,
};
use crate::peers::RemotePeers;
use crate::policy::{Grants, Owners, Surface};
use crate::store::{SharedStore, StoredInbox};
use crate::webhooks::Webhooks;
use registry::Registry;

/// How long `drain` waits for interrupted turns, then for the actors, to end.
const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

pub struct LiveSessionService {
    /// The agents of the service's own calls (the local caller); a [`super::ScopedService`]
    /// brings its caller's.
    factory: Arc<AgentFactory>,
    store: SharedStore,
    /// Every owner's memories: compacted history and what agents remembered.
    memory: SharedMemory,
    /// The lock is held for map lookups, never across an await.
    registry: RwLock<Registry>,
    /// Every actor task (and the idle reaper), so `drain` can wait for them to exit.
    actors: TaskTracker,
    limits: SessionLimits,
    /// Cancelled by `drain`: stops the idle reaper.
    stopping: CancellationToken,
    /// Every finished turn or compaction, by session ([`SessionService::changes`]).
    changes: broadcast::Sender<SessionId>,
    /// Bounds of every session's inbox.
    inbox_limits: InboxLimits,
    /// Held while a named session's name is checked and its record first saved, so two
    /// sessions can never take one name in a peer group.
    naming: tokio::sync::Mutex<()>,
    /// Peers on other deputy servers (`[peers.NAME]`).
    remote: RemotePeers,
    /// The service itself, once shared ([`Self::into_shared`]): what its sessions' comms tools
    /// reach it through.
    me: OnceLock<Weak<LiveSessionService>>,
    /// The `[delegation]` settings.
    delegation: DelegationLimits,
    /// Held from a child's cap check to its first save, so concurrent delegates count each
    /// other (see [`delegation`]).
    delegating: tokio::sync::Mutex<()>,
    /// Which children's results are being collected or were sent to their parents.
    followed: std::sync::Mutex<delegation::Followed>,
    /// The owners of stored sessions as callers now: a resumed session gets its owner's
    /// grants (G5). `None` (tests, embedders): the grants of whoever resumes it.
    owners: Option<RwLock<Owners>>,
    /// Each owner's waiting mail across its live sessions (G12); an owner with no live
    /// session has none.
    mail_quotas: std::sync::Mutex<HashMap<String, Weak<MailQuota>>>,
    /// The contexts unloaded sessions last ran with (see [`contexts`]).
    contexts: contexts::Contexts,
    /// Whether a session whose context is unknown runs with the service's own factory when no
    /// caller brings one (see [`contexts`]).
    server_context_for_unknown: bool,
    /// The `[[webhooks]]` the process delivers to, for `webhooks/status`.
    webhooks: Option<Arc<Webhooks>>,
    /// This process's name and lease length on a store several processes share.
    leasing: Leasing,
}

/// Announcements a slow listener of [`SessionService::changes`] may fall behind by before it
/// misses some (it is told it lagged).
const CHANGES_BUFFER: usize = 256;

impl LiveSessionService {
    pub fn new(factory: AgentFactory, store: SharedStore) -> Self {
        // By default the memory index lives in memory, rebuilt from the store at first use;
        // the server keeps it beside the store's file (`with_memory`).
        let memory = Arc::new(Memory::new(store.clone(), None, MemoryBounds::default()));
        Self {
            factory: Arc::new(factory),
            store,
            memory,
            registry: RwLock::default(),
            actors: TaskTracker::new(),
            limits: SessionLimits::default(),
            stopping: CancellationToken::new(),
            changes: broadcast::Sender::new(CHANGES_BUFFER),
            inbox_limits: InboxLimits::default(),
            naming: tokio::sync::Mutex::new(()),
            remote: RemotePeers::default(),
            me: OnceLock::new(),
            delegation: DelegationLimits::default(),
            delegating: tokio::sync::Mutex::new(()),
            followed: std::sync::Mutex::default(),
            owners: None,
            mail_quotas: std::sync::Mutex::default(),
            contexts: contexts::Contexts::default(),
            server_context_for_unknown: true,
            webhooks: None,
            leasing: Leasing::for_this_process(Leasing::DEFAULT_TTL),
        }
    }

    /// The same service holding turn leases for `ttl` (`[store] lease_secs`), on a store
    /// several processes share.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.leasing.ttl = ttl;
        self
    }

    /// The same service answering `webhooks/status` for `webhooks` (the server delivers them).
    pub fn with_webhooks(mut self, webhooks: Option<Arc<Webhooks>>) -> Self {
        self.webhooks = webhooks;
        self
    }

    /// The same service resuming stored sessions with their owners' grants as of now
    /// (security review G5), from the process's token table.
    pub fn with_owners(mut self, owners: Owners) -> Self {
        self.owners = Some(RwLock::new(owners));
        self
    }

    /// Adds subjects and scopes to the owners' table: the tokens of an HTTP listener the
    /// service gained (the background server's), whose callers' sessions must resume too.
    pub fn admit_owners<'a>(&self, tokens: impl IntoIterator<Item = (&'a str, &'a [crate::caller::Scope])>) {
        if let Some(owners) = &self.owners {
            owners.write().unwrap_or_else(std::sync::PoisonError::into_inner).admit(tokens);
        }
    }

    /// The same service with another memory (the server's: its index beside the store, its
    /// bounds from `[memory]`).
    pub fn with_memory(mut self, memory: SharedMemory) -> Self {
        self.memory = memory;
        self
    }

    /// The server's memories.
    pub fn memory(&self) -> &SharedMemory {
        &self.memory
    }

    /// The same service with peers on other deputy servers.
    pub fn with_remote_peers(mut self, remote: RemotePeers) -> Self {
        self.remote = remote;
        self
    }

    /// The same service with other bounds on every session's inbox.
    pub fn with_inbox_limits(mut self, limits: InboxLimits) -> Self {
        self.inbox_limits = InboxLimits { capacity: limits.capacity.max(1), ..limits };
        self
    }

    /// The same service with other bounds on its live set.
    pub fn with_limits(mut self, limits: SessionLimits) -> Self {
        self.limits = SessionLimits { max_live: limits.max_live.max(1), ..limits };
        self
    }

    /// The factory the service was built with (the server's own configuration).
    pub fn factory(&self) -> Arc<AgentFactory> {
        self.factory.clone()
    }

    /// What the local caller may do: the service's own calls (the command line, tests).
    fn local(&self) -> (Caller, Grants) {
        let caller = Caller::local();
        let grants = self.factory.grants(&caller, Surface::Local);
        (caller, grants)
    }

    /// Starts a session's actor; `factory` and `grants` built its agent (and build its
    /// children).
    fn spawn(
        &self,
        agent: Agent,
        record: SessionRecord,
        inbox: StoredInbox,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        fence: u64,
    ) -> SessionHandle {
        self.connect_tools(&agent);
        let inbox = (self.inbox_limits, inbox, self.mail_quota(&record.owner));
        let provenance =
            Arc::new(Provenance { factory: factory.clone(), grants: grants.clone(), spec: record.agent.clone() });
        SessionHandle::spawn(
            agent,
            record,
            Keep { store: self.store.clone(), memory: self.memory.clone(), fence, leasing: self.leasing.clone() },
            &self.actors,
            self.changes.clone(),
            inbox,
            provenance,
        )
    }
}

impl LiveSessionService {
    /// `owner`'s mail quota, shared by its live sessions' inboxes: created with the first,
    /// gone with the last.
    fn mail_quota(&self, owner: &str) -> Arc<MailQuota> {
        let mut quotas = self.mail_quotas.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(quota) = quotas.get(owner).and_then(Weak::upgrade) {
            return quota;
        }
        quotas.retain(|_, quota| quota.strong_count() > 0);
        let quota = Arc::new(MailQuota::new(self.inbox_limits.max_waiting_bytes_per_owner));
        quotas.insert(owner.to_owned(), Arc::downgrade(&quota));
        quota
    }
}

fn no_capped_output(id: &SessionId, tool_use_id: &str) -> SessionError {
    SessionError::invalid(format!(
        "session {id} has no capped tool output {tool_use_id:?}: outputs below the cap are already whole in the history"
    ))
}

impl SessionService for LiveSessionService {
    async fn create_session(&self, request: CreateSessionRequest) -> Result<RunResult, SessionError> {
        let (caller, grants) = self.local();
        self.create_session_with(&self.factory, &caller, &grants, request).await
    }

    async fn start_turn(&self, id: &SessionId, request: TurnRequest) -> Result<RunResult, SessionError> {
        self.start_turn_with(&self.factory, &self.local().1, id, request).await
    }

    async fn send(&self, id: &SessionId, request: SendRequest) -> Result<SendResult, SessionError> {
        let (caller, grants) = self.local();
        self.send_as(&self.factory, &caller, &grants, id, request).await
    }

    async fn interrupt(&self, id: &SessionId, cascade: bool) -> Result<InterruptResult, SessionError> {
        let mut interrupted = self.interrupt_tree(id, cascade).await?;
        let own = interrupted.first() == Some(id);
        if own || !interrupted.is_empty() {
            if own {
                interrupted.remove(0);
            }
            return Ok(InterruptResult { session_id: id.clone(), interrupted: own, cascaded: interrupted });
        }
        if self.interrupt_elsewhere(id, cascade).await? {
            return Ok(InterruptResult { session_id: id.clone(), interrupted: true, cascaded: Vec::new() });
        }
        if self.live(id).is_some() {
            return Err(SessionError::NotRunning(id.clone()));
        }
        // A stored session that is not live has no turn to interrupt.
        match &self.store {
            Some(store) if store.record(id).await?.is_some() => Err(SessionError::NotRunning(id.clone())),
            _ => Err(SessionError::not_found(id.clone())),
        }
    }

    async fn read(&self, id: &SessionId, wait: Option<Duration>) -> Result<SessionView, SessionError> {
        let (live, elsewhere) = self.current_copy(id).await?;
        let Some(handle) = live else {
            let Some(store) = &self.store else { return Err(SessionError::not_found(id.clone())) };
            let mut view = self
                .stored_view(id, elsewhere.as_ref())
                .await?
                .ok_or_else(|| SessionError::not_found(id.clone()))?;
            let inbox = store.inbox(id).await?;
            view.state.inbox.waiting = inbox.waiting.len();
            view.state.inbox.oldest_at = inbox.waiting.first().map(|message| message.at);
            view.state.inbox_parked = inbox.parked;
            return self.with_tree(view).await;
        };
        let view = handle.view();
        let view = match (wait, view.state.running_turn) {
            (Some(wait), Some(turn)) if !wait.is_zero() => {
                tokio::time::timeout(wait, handle.view_after_turn(turn)).await.unwrap_or_else(|_| handle.view())
            }
            _ => view,
        };
        self.with_tree(view).await
    }

    async fn list(&self, query: ListQuery) -> Result<SessionList, SessionError> {
        self.list_for(&Caller::local(), query).await
    }

    async fn memories(&self, query: MemoryQuery) -> Result<crate::model::memory::MemoryList, SessionError> {
        self.memories_of(Caller::local().subject(), query).await
    }

    async fn index_documents(
        &self,
        collection: Option<String>,
    ) -> Result<crate::model::documents::DocumentsIndexed, SessionError> {
        memory::index_documents_of(self.factory.documents(), collection).await
    }

    async fn forget_memory(&self, id: u64) -> Result<crate::model::memory::MemoryDeleted, SessionError> {
        self.forget_memory_of(Caller::local().subject(), id).await
    }

    async fn archive(&self, id: &SessionId) -> Result<ArchiveResult, SessionError> {
        self.archive_with(&self.factory, id).await
    }

    async fn compact(&self, id: &SessionId) -> Result<CompactResult, SessionError> {
        self.compact_with(&self.factory, &self.local().1, id).await
    }

    async fn fork(&self, id: &SessionId, at_turn: Option<u64>) -> Result<SessionView, SessionError> {
        let (caller, grants) = self.local();
        self.fork_with(&self.factory, &caller, &grants, id, at_turn).await
    }

    async fn rewind(&self, id: &SessionId, to_turn: u64) -> Result<RewindResult, SessionError> {
        self.rewind_with(&self.factory, &self.local().1, id, to_turn).await
    }

    async fn export(&self, id: &SessionId) -> Result<crate::model::ExportResult, SessionError> {
        self.export_of(id).await
    }

    async fn import(&self, document: &str) -> Result<SessionView, SessionError> {
        let (caller, grants) = self.local();
        self.import_with(&self.factory, &caller, &grants, document).await
    }

    async fn tool_output(&self, id: &SessionId, tool_use_id: &str) -> Result<ToolOutputResult, SessionError> {
        let handle = self.live(id);
        let held = handle.as_ref().and_then(|handle| handle.tool_output(tool_use_id));
        let content = match (held, &self.store) {
            (Some(content), _) => content,
            (None, Some(store)) => {
                if handle.is_none() && store.record(id).await?.is_none() {
                    return Err(SessionError::not_found(id.clone()));
                }
                store.tool_output(id, tool_use_id).await?.ok_or_else(|| no_capped_output(id, tool_use_id))?
            }
            (None, None) if handle.is_none() => return Err(SessionError::not_found(id.clone())),
            (None, None) => return Err(no_capped_output(id, tool_use_id)),
        };
        let bytes = content.len() as u64;
        Ok(ToolOutputResult { session_id: id.clone(), tool_use_id: tool_use_id.to_owned(), content, bytes })
    }

    async fn drain(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        self.stopping.cancel();
        let handles = self.live_handles();
        let all_idle = || futures::future::join_all(handles.iter().map(SessionHandle::wait_idle));
        if tokio::time::timeout_at(deadline, all_idle()).await.is_err() {
            let interrupted = handles.iter().filter(|handle| handle.interrupt()).count();
            tracing::warn!(interrupted, "drain timeout: interrupting the turns still running");
            // Cancellation is prompt; the bound only guards against a stuck tool.
            let _ = tokio::time::timeout(INTERRUPT_GRACE, all_idle()).await;
        }
        // Then the actors themselves: each exits after its turn's save.
        let stopping = futures::future::join_all(handles.iter().map(SessionHandle::stop));
        let _ = tokio::time::timeout(INTERRUPT_GRACE, stopping).await;
        self.actors.close();
        if tokio::time::timeout(INTERRUPT_GRACE, self.actors.wait()).await.is_err() {
            tracing::warn!(actors = self.actors.len(), "drain: session actors still running at exit");
        }
    }

    async fn gauges(&self) -> Result<crate::telemetry::metrics::Gauges, SessionError> {
        self.gauges_now().await
    }

    fn caller_info(&self) -> CallerInfo {
        CallerInfo::of(&Caller::local())
    }

    async fn webhooks(&self) -> Result<WebhooksStatus, SessionError> {
        Ok(self.webhooks.as_ref().map_or(WebhooksStatus { webhooks: Vec::new() }, |webhooks| webhooks.status()))
    }

    async fn ready(&self) -> Result<(), SessionError> {
        match &self.store {
            Some(store) => Ok(store.ping().await?),
            None => Ok(()),
        }
    }

    fn changes(&self) -> broadcast::Receiver<SessionId> {
        self.changes.subscribe()
    }

    fn agents(&self) -> crate::profiles::AgentList {
        self.factory.profiles().list()
    }

    fn agent(&self, name: &str) -> Result<crate::profiles::AgentDetail, SessionError> {
        self.factory.profiles().detail(name)
    }

    async fn events(
        &self,
        id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<crate::model::EventPage, SessionError> {
        self.events_of(id, after, limit).await
    }

    async fn provisional(&self, id: &SessionId, after: Option<u64>) -> Result<Option<Provisional>, SessionError> {
        Ok(self.live(id).map(|handle| {
            let (events, activity) = handle.provisional(after);
            Provisional { events, activity }
        }))
    }

    async fn history(&self, id: &SessionId) -> Result<SessionHistory, SessionError> {
        if let (Some(handle), _) = self.current_copy(id).await? {
            match handle.history().await {
                Ok(messages) => return Ok(SessionHistory { session_id: id.clone(), messages }),
                // Unloaded meanwhile: the store has it all.
                Err(_) if handle.is_unloaded() => {}
                Err(error) => return Err(error),
            }
        }
        let Some(store) = &self.store else { return Err(SessionError::not_found(id.clone())) };
        if store.record(id).await?.is_none() {
            return Err(SessionError::not_found(id.clone()));
        }
        Ok(SessionHistory { session_id: id.clone(), messages: store.history(id).await? })
    }
}

mod admission;
mod archive;
mod comms;
mod contexts;
pub(super) mod delegation;
mod feed;
mod gauges;
mod hibernation;
mod lease;
mod listing;
mod memory;
mod registry;
mod transcript;
mod turn;

pub use admission::{MAX_LABEL_KEY_BYTES, MAX_LABEL_VALUE_BYTES, MAX_LABELS};
use delegation::DelegationLimits;
pub use memory::index_documents_of;
pub use turn::turn_outcome;

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod capability_tests;

#[cfg(test)]
#[cfg(feature = "session-store")]
mod persistence_tests;

#[cfg(test)]
#[cfg(feature = "session-store")]
mod journal_tests;

#[cfg(test)]
mod lifecycle_tests;

#[cfg(test)]
mod hibernation_tests;

#[cfg(test)]
mod pending_tests;

#[cfg(test)]
mod inbox_tests;

#[cfg(test)]
mod contexts_tests;

#[cfg(test)]
mod delegation_tests;

#[cfg(test)]
mod structured_tests;

#[cfg(test)]
#[cfg(feature = "session-compaction")]
mod compaction_tests;
