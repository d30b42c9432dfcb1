//! [`LiveSessionService`]: live sessions in memory, one actor each, over an optional store.
//!
//! Without a store (Minimal builds, `--ephemeral`) a session lives as long as the process.
//! With one, every session is saved at creation and after each turn; a session that is not
//! live (after a restart, never touched since, or unloaded) is read from the store and
//! rehydrated on its next turn; archived sessions stay readable.
//!
//! Hibernation bounds the live set ([`SessionLimits`]): with a store, a session idle for
//! `idle_unload` (the idle reaper) or beyond `max_live` (least recently used first) is unloaded.
//! Its actor stops and its slot leaves the registry; the store already holds everything, so the
//! session is then exactly a stored one. Without a store `max_live` refuses new sessions.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, OnceLock, PoisonError, RwLock, Weak};
use std::time::Duration;

use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::SessionService;
use super::actor::{SessionHandle, TurnReply, TurnTicket};
use super::types::*;
use crate::agent::factory::output_contract;
use crate::agent::pending::resolve;
use crate::agent::{Agent, AgentFactory, EventSink, InboxLimits, TurnInput};
use crate::caller::Caller;
use crate::error::{ErrorKind, SessionError};
use crate::ids::SessionId;
use crate::model::inbox::SendResult;
use crate::model::{
    ArchiveResult, CompactResult, InterruptResult, ListPosition, RunResult, SessionHistory, SessionList,
    SessionStatus, SessionSummary, SessionView, ToolOutputResult, TurnStatus,
};
use crate::model::{Lineage, SessionRecord};
use crate::store::{SaveRequest, SharedStore, StoredInbox, StoredListQuery, persistence_disabled};
use crate::tools::hooks::{HookEvent, HookEventKind};
use crate::tools::peers::RemotePeers;
use crate::tools::policy::AuditTag;
use crate::tools::{Grants, Surface};

/// How long `drain` waits for interrupted turns, then for the actors, to end.
const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

/// Labels a session may carry, and the size of each key and value: labels travel in every list
/// page and every record, so they stay small (security review F10).
pub const MAX_LABELS: usize = 32;
pub const MAX_LABEL_KEY_BYTES: usize = 128;
pub const MAX_LABEL_VALUE_BYTES: usize = 1024;

/// Characters of the first prompt kept as the session's title.
const TITLE_CHARS: usize = 80;

pub struct LiveSessionService {
    /// The agents of the service's own calls (the local caller); a [`super::ScopedService`]
    /// brings its caller's.
    factory: Arc<AgentFactory>,
    store: SharedStore,
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
}

/// What a new session is, besides its agent.
pub(super) struct NewSession {
    pub title: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub host_mode: bool,
    pub name: Option<String>,
    pub peer_group: Option<String>,
    pub lineage: Lineage,
}

/// A session about to start: its id, built agent, what it starts from and its first turn.
pub(super) struct Launch {
    pub id: SessionId,
    pub agent: Agent,
    pub new: NewSession,
    /// Messages it starts with (a forked child's copy of its parent's conversation).
    pub history: Vec<crate::llm::Message>,
    pub prompt: String,
    pub options: TurnOptions,
}

/// Announcements a slow listener of [`SessionService::changes`] may fall behind by before it
/// misses some (it is told it lagged).
const CHANGES_BUFFER: usize = 256;

/// The live sessions, and what keeps a resume from racing an archive.
#[derive(Default)]
struct Registry {
    sessions: HashMap<SessionId, Slot>,
    /// Archives committed to the store so far. A resume notes it before reading the record
    /// and registers only if it has not moved, so a record read before an archive committed
    /// can never bring the session back after it.
    archives_committed: u64,
}

/// An entry of the live map.
enum Slot {
    /// A running actor (while it is being archived, its handle refuses turns).
    Live(SessionHandle),
    /// `archive` of a session that was not live is committing: the tombstone that keeps a
    /// racing turn from resuming it from the store meanwhile.
    Archiving,
}

/// What the live map says about a session.
enum Lookup {
    Live(SessionHandle),
    Archiving,
    /// Not in the map; the number of archives committed when it was looked at.
    Absent(u64),
}

impl LiveSessionService {
    pub fn new(factory: AgentFactory, store: SharedStore) -> Self {
        Self {
            factory: Arc::new(factory),
            store,
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
        }
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

    /// Starts the idle reaper (with a store and a non-zero `idle_unload`): one task that wakes
    /// every quarter of `idle_unload` (30 s at most) and unloads the sessions idle that long.
    /// One cheap scan per tick rather than a timer per session. It holds the service weakly
    /// and stops at `drain`.
    pub fn start_idle_reaper(self: &Arc<Self>) {
        let idle = self.limits.idle_unload;
        if self.store.is_none() || idle.is_zero() {
            return;
        }
        let tick = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(30));
        let service = Arc::downgrade(self);
        let stopping = self.stopping.clone();
        self.actors.spawn(async move {
            let mut ticker = tokio::time::interval(tick);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stopping.cancelled() => return,
                    _ = ticker.tick() => {}
                }
                let Some(service) = Weak::upgrade(&service) else { return };
                service.unload_idle(idle).await;
            }
        });
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

    /// Whether `caller` may use session `id` (F8): its own sessions, or every one with
    /// `sessions:all`. Another owner's session answers `SESSION_NOT_FOUND`, as an unknown id
    /// does, so its existence is not revealed. An id that is nowhere passes: the operation
    /// itself answers `SESSION_NOT_FOUND`.
    ///
    /// Errors: `NotFound`, `InvalidRequest` (a caller without the `sessions` scope), `Store`.
    pub async fn check_access(&self, caller: &Caller, id: &SessionId) -> Result<(), SessionError> {
        require_sessions_scope(caller)?;
        if caller.sees_all() {
            return Ok(());
        }
        let owner = match (self.live(id), &self.store) {
            (Some(handle), _) => Some(handle.owner()),
            (None, Some(store)) => store.record(id).await?.map(|record| record.owner),
            (None, None) => None,
        };
        match owner {
            Some(owner) if !caller.may_use(&owner) => {
                tracing::info!(target: "deputy::audit", subject = %caller.subject(), session_id = %id, what = "policy_refusal", refused = "foreign_session", "refused: the session belongs to another subject");
                Err(SessionError::not_found(id.clone()))
            }
            _ => Ok(()),
        }
    }

    /// How many sessions are live (actors running), unloaded ones not counted.
    pub fn live_sessions(&self) -> usize {
        let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
        registry.sessions.values().filter(|slot| matches!(slot, Slot::Live(_))).count()
    }

    /// Unloads every session idle for `idle` or longer.
    async fn unload_idle(&self, idle: Duration) {
        let now = tokio::time::Instant::now();
        let idle_ones: Vec<(SessionId, SessionHandle)> = {
            let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
            registry
                .sessions
                .iter()
                .filter_map(|(id, slot)| match slot {
                    Slot::Live(handle) if now.duration_since(handle.last_used()) >= idle => {
                        Some((id.clone(), handle.clone()))
                    }
                    Slot::Live(_) | Slot::Archiving => None,
                })
                .collect()
        };
        for (id, handle) in idle_ones {
            self.unload(&id, &handle, "idle").await;
        }
    }

    /// After `just_live` became live: with a store, unloads the least recently used other
    /// sessions while more than `max_live` are live. Busy ones are skipped, so the bound is
    /// met as soon as enough sessions are idle.
    async fn enforce_cap(&self, just_live: &SessionId) {
        if self.store.is_none() {
            return;
        }
        let mut candidates: Vec<(tokio::time::Instant, SessionId, SessionHandle)> = {
            let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
            if registry.sessions.len() <= self.limits.max_live {
                return;
            }
            registry
                .sessions
                .iter()
                .filter_map(|(id, slot)| match slot {
                    Slot::Live(handle) if id != just_live => Some((handle.last_used(), id.clone(), handle.clone())),
                    Slot::Live(_) | Slot::Archiving => None,
                })
                .collect()
        };
        candidates.sort_unstable_by_key(|(last_used, _, _)| *last_used);
        for (_, id, handle) in candidates {
            if self.live_sessions() <= self.limits.max_live {
                break;
            }
            self.unload(&id, &handle, "least recently used beyond max_live_sessions").await;
        }
    }

    /// Unloads one session if it is still `handle`'s and idle with nothing unsaved (see
    /// [`SessionHandle::try_unload`]); waits for its actor to exit. Taken under the registry's
    /// lock, so it never races an archive's or a resume's registration.
    async fn unload(&self, id: &SessionId, handle: &SessionHandle, why: &'static str) -> bool {
        {
            let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
            match registry.sessions.get(id) {
                Some(Slot::Live(current)) if current.same_actor(handle) => {}
                Some(Slot::Live(_) | Slot::Archiving) | None => return false,
            }
            if !handle.try_unload() {
                return false;
            }
            registry.sessions.remove(id);
        }
        handle.stop().await;
        tracing::info!(session_id = %id, reason = why, "session unloaded");
        true
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
    ) -> SessionHandle {
        self.connect_tools(&agent);
        let inbox = (self.inbox_limits, inbox);
        let provenance =
            Arc::new(Provenance { factory: factory.clone(), grants: grants.clone(), spec: record.agent.clone() });
        SessionHandle::spawn(
            agent,
            record,
            self.store.clone(),
            &self.actors,
            self.changes.clone(),
            inbox,
            provenance,
        )
    }

    fn lookup(&self, id: &SessionId) -> Lookup {
        let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
        match registry.sessions.get(id) {
            Some(Slot::Live(handle)) => Lookup::Live(handle.clone()),
            Some(Slot::Archiving) => Lookup::Archiving,
            None => Lookup::Absent(registry.archives_committed),
        }
    }

    fn live(&self, id: &SessionId) -> Option<SessionHandle> {
        match self.lookup(id) {
            Lookup::Live(handle) => Some(handle),
            Lookup::Archiving | Lookup::Absent(_) => None,
        }
    }

    fn live_handles(&self) -> Vec<SessionHandle> {
        let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
        registry
            .sessions
            .values()
            .filter_map(|slot| match slot {
                Slot::Live(handle) => Some(handle.clone()),
                Slot::Archiving => None,
            })
            .collect()
    }

    /// How many sessions are running a turn (or compacting) right now. Cheap: one atomic per
    /// live session; the background server asks it before exiting idle.
    pub fn running_turns(&self) -> usize {
        self.live_handles().iter().filter(|handle| handle.is_busy()).count()
    }

    /// The live session, or the stored one brought back to life with `factory`'s agent.
    async fn live_or_resumed(
        &self,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        id: &SessionId,
    ) -> Result<SessionHandle, SessionError> {
        let mut archives_seen = match self.lookup(id) {
            Lookup::Live(handle) => return Ok(handle),
            Lookup::Archiving => return Err(archived(id)),
            Lookup::Absent(archives_committed) => archives_committed,
        };
        let Some(store) = &self.store else { return Err(SessionError::not_found(id.clone())) };
        let record = store.record(id).await?.ok_or_else(|| SessionError::not_found(id.clone()))?;
        if record.archived {
            return Err(archived(id));
        }
        let history = store.history(id).await?;
        // A concurrent resume may have registered, run a turn and saved between the two reads:
        // its handle is the session now.
        match self.lookup(id) {
            Lookup::Live(handle) => return Ok(handle),
            Lookup::Archiving => return Err(archived(id)),
            Lookup::Absent(_) => {}
        }
        if history.len() as u64 != record.message_count {
            return Err(SessionError::store(format!(
                "session {id}: the record counts {} messages but {} are stored",
                record.message_count,
                history.len()
            )));
        }
        let audit = AuditTag { subject: record.owner.as_str().into(), session_id: id.clone() };
        let inbox = store.inbox(id).await?;
        let agent =
            factory.restore_agent(record.agent.clone(), record.restored_state(history), grants, &audit).await?;
        let handle = self.spawn(agent, record, inbox, factory, grants);
        loop {
            {
                let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
                let archives_committed = registry.archives_committed;
                match registry.sessions.entry(id.clone()) {
                    // Two callers may resume the same session at once: the first registration
                    // wins and the other's handle is dropped, which stops its actor.
                    Entry::Occupied(existing) => match existing.get() {
                        Slot::Live(existing) => return Ok(existing.clone()),
                        Slot::Archiving => return Err(archived(id)),
                    },
                    Entry::Vacant(slot) if archives_committed == archives_seen => {
                        tracing::info!(session_id = %id, "session resumed from the store");
                        slot.insert(Slot::Live(handle.clone()));
                        break;
                    }
                    Entry::Vacant(_) => archives_seen = archives_committed,
                }
            }
            // An archive committed since the record was read; it may have been this session's.
            if store.record(id).await?.is_none_or(|record| record.archived) {
                return Err(archived(id));
            }
        }
        self.enforce_cap(id).await;
        Ok(handle)
    }

    /// Runs `attempt` on the session's handle; when the handle turns out unloaded (it answered
    /// `Busy` because an unload took its lock), asks the registry again, which resumes the
    /// session from the store. So a turn racing an unload waits for it and runs, never `Busy`.
    async fn with_handle<T>(
        &self,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        id: &SessionId,
        mut attempt: impl AsyncFnMut(&SessionHandle) -> Result<T, SessionError>,
    ) -> Result<T, SessionError> {
        loop {
            let handle = self.live_or_resumed(factory, grants, id).await?;
            match attempt(&handle).await {
                Err(SessionError::Busy(_)) if handle.is_unloaded() => continue,
                other => return other,
            }
        }
    }

    /// `create_session` on behalf of `caller` (the session's owner), with the agent built by
    /// `factory` rather than the service's own: the defaults and credentials of whoever asks,
    /// within `grants` (see [`super::ScopedService`]).
    pub async fn create_session_with(
        &self,
        factory: &Arc<AgentFactory>,
        caller: &Caller,
        grants: &Grants,
        mut request: CreateSessionRequest,
    ) -> Result<RunResult, SessionError> {
        require_sessions_scope(caller)?;
        require_prompt(&request.prompt)?;
        check_labels(&request.labels)?;
        // Host sessions talk: they get the comms tools unless the caller chose the builtins.
        request.build.comms_by_default |= request.host_mode;
        self.offer_delegation(&mut request.build)?;
        if let Some(name) = &request.name {
            comms::check_name(name)?;
        }
        if let Some(group) = &request.peer_group {
            comms::check_group(group)?;
        }
        self.check_room()?;
        // Minted before the agent is built, so the session's tools know whose they are.
        let id = SessionId::new();
        let audit = AuditTag { subject: caller.subject_arc(), session_id: id.clone() };
        let agent = factory.build_agent(request.build, grants, &audit).await?;
        let launch = Launch {
            new: NewSession {
                title: title_of(&request.prompt),
                labels: request.labels,
                host_mode: request.host_mode,
                name: request.name,
                peer_group: request.peer_group,
                lineage: Lineage::root(&id),
            },
            id,
            agent,
            history: Vec::new(),
            prompt: request.prompt,
            options: request.turn,
        };
        self.start_session(factory, grants, caller, launch).await
    }

    /// Saves, registers and runs the first turn of a session whose agent is built: a caller's
    /// or a delegated child's (whose caps are checked here, under `delegating`, right before
    /// its first save).
    pub(super) async fn start_session(
        &self,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        owner: &Caller,
        launch: Launch,
    ) -> Result<RunResult, SessionError> {
        let Launch { id, agent, new, history, prompt, options } = launch;
        let mut record =
            SessionRecord::new(id.clone(), &agent, new.title, new.labels, new.host_mode, owner.subject());
        record.name = new.name;
        record.peer_group = new.peer_group;
        record.lineage = new.lineage;
        // A name is checked and taken (saved, or registered without a store) under one lock.
        let naming = match &record.name {
            Some(_) => Some(self.naming.lock().await),
            None => None,
        };
        self.check_name_free(&record).await?;
        let delegating = match &record.lineage.parent_id {
            Some(parent) => {
                let guard = self.delegating.lock().await;
                self.check_caps(parent).await?;
                Some(guard)
            }
            None => None,
        };
        // Saved before the first turn, so a crash during it leaves the session, empty.
        if let Some(store) = &self.store {
            let save = SaveRequest::new(record.clone(), 0, history);
            store.save(save).await?;
        }
        let handle = self.spawn(agent, record, StoredInbox::default(), factory, grants);
        // Nobody else knows the id yet, so the first turn always wins the lock.
        let ticket = handle.try_begin_turn()?;
        {
            let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
            // Checked again under the lock: concurrent creates cannot overshoot the bound.
            if self.refuses_new(&registry) {
                return Err(self.full());
            }
            registry.sessions.insert(id.clone(), Slot::Live(handle.clone()));
        }
        drop(delegating);
        drop(naming);
        tracing::info!(session_id = %id, subject = %owner.subject(), "session created");
        // Observe only, before the first turn (whose `turn_start` follows it).
        factory.hooks().observe(HookEvent::new(HookEventKind::SessionStart, &id, None)).await;
        self.enforce_cap(&id).await;
        self.drive_turn(&handle, ticket, prompt.into(), options).await
    }

    /// `archive`, with the `session_end` hooks of `factory` (the caller's configuration).
    ///
    /// Errors: `SessionNotFound`, `Store`.
    pub async fn archive_with(
        &self,
        factory: &Arc<AgentFactory>,
        id: &SessionId,
    ) -> Result<ArchiveResult, SessionError> {
        // Its descendants first, leaves first: a child never outlives its parent's archive.
        let mut cascaded = self.descendants(id).await?;
        cascaded.reverse();
        for descendant in &cascaded {
            match self.archive_one(factory, descendant).await {
                Ok(_) | Err(SessionError::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        let view = self.archive_one(factory, id).await?;
        // A child archived on its own: its parent learns, and gets back what it held for it.
        if view.state.lineage.is_delegated() {
            self.archived_child(&view).await;
        }
        self.forget_children(&cascaded);
        Ok(ArchiveResult { session_id: id.clone(), archived: true, cascaded })
    }

    /// Archives one session; returns its last view.
    async fn archive_one(&self, factory: &Arc<AgentFactory>, id: &SessionId) -> Result<SessionView, SessionError> {
        // The session stays in the map until the store has committed: its live handle (which
        // refuses turns from now on) or a tombstone, so no turn can resume it from the store
        // in between.
        let (live, tombstone) = {
            let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
            match registry.sessions.entry(id.clone()) {
                Entry::Occupied(slot) => match slot.get() {
                    Slot::Live(handle) => {
                        // Under the lock, so an unload cannot take the session meanwhile.
                        handle.mark_closing();
                        (Some(handle.clone()), false)
                    }
                    Slot::Archiving => (None, false),
                },
                Entry::Vacant(slot) => {
                    slot.insert(Slot::Archiving);
                    (None, true)
                }
            }
        };
        if let Some(handle) = &live {
            handle.shutdown().await;
        }
        let stored = match &self.store {
            Some(store) => store.archive(id).await,
            None => Ok(None),
        };
        {
            let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
            let ours = match registry.sessions.get(id) {
                Some(Slot::Live(handle)) => live.as_ref().is_some_and(|live| live.same_actor(handle)),
                Some(Slot::Archiving) => tombstone,
                None => false,
            };
            if ours {
                registry.sessions.remove(id);
            }
            if matches!(stored, Ok(Some(_))) {
                registry.archives_committed += 1;
            }
        }
        let view = match (stored?, &live) {
            (Some(record), _) => record.view(SessionStatus::Archived, None),
            (None, Some(handle)) => {
                let mut view = handle.view();
                view.state.status = SessionStatus::Archived;
                view
            }
            (None, None) => return Err(SessionError::not_found(id.clone())),
        };
        tracing::info!(session_id = %id, "session archived");
        // The journal gained its `archived` event: followers and the projector look.
        let _ = self.changes.send(id.clone());
        factory.hooks().observe(HookEvent::new(HookEventKind::SessionEnd, id, None)).await;
        Ok(view)
    }

    /// `list` as `caller` sees it: its own sessions, or every one with `sessions:all`. The
    /// owner filter applies before paging (live sessions here, stored ones in the store), so
    /// pages, cursors and `total` count only what the caller may see.
    ///
    /// Errors: `PersistenceDisabled`, `InvalidRequest` (no `sessions` scope), `Store`.
    pub async fn list_for(&self, caller: &Caller, query: ListQuery) -> Result<SessionList, SessionError> {
        require_sessions_scope(caller)?;
        if query.include_archived && self.store.is_none() {
            return Err(persistence_disabled("listing archived sessions"));
        }
        if query.parent_id.is_some() || query.root_id.is_some() {
            return self.list_tree(caller, query).await;
        }
        let owner = (!caller.sees_all()).then(|| caller.subject().to_owned());
        let live: Vec<SessionSummary> = self
            .live_handles()
            .iter()
            .map(SessionHandle::summary)
            .filter(|summary| owner.as_ref().is_none_or(|owner| summary.owner == *owner))
            .collect();
        let limit = query.limit.unwrap_or(DEFAULT_PAGE).min(MAX_PAGE);
        // One more than the page, to know whether a next page exists.
        let wanted = query.offset.saturating_add(limit).saturating_add(1);
        let mut total = live.len();
        let exclude = live.iter().map(|summary| summary.session_id.clone()).collect();
        let after = query.after.as_ref();
        let mut candidates: Vec<(ListPosition, SessionSummary)> = live
            .into_iter()
            .map(|summary| (summary.list_position(), summary))
            .filter(|(position, _)| after.is_none_or(|after| after.is_before(position)))
            .collect();
        if let Some(store) = &self.store {
            let stored = store
                .list(StoredListQuery {
                    first: wanted,
                    after: query.after.clone(),
                    include_archived: query.include_archived,
                    exclude,
                    owner,
                })
                .await?;
            total += stored.total;
            candidates.extend(stored.summaries.into_iter().map(|summary| (summary.list_position(), summary)));
        }
        // Newest first, then by id descending: the store's index order.
        candidates.sort_by(|a, b| b.0.cmp(&a.0));
        let more = candidates.len() > query.offset.saturating_add(limit);
        let page: Vec<(ListPosition, SessionSummary)> =
            candidates.into_iter().skip(query.offset).take(limit).collect();
        let next_cursor = if more { page.last().map(|(position, _)| position.cursor()) } else { None };
        Ok(SessionList { sessions: page.into_iter().map(|(_, summary)| summary).collect(), total, next_cursor })
    }

    /// Refuses early, before an agent is built, when the live set is already full.
    fn check_room(&self) -> Result<(), SessionError> {
        if self.refuses_new(&self.registry.read().unwrap_or_else(PoisonError::into_inner)) {
            return Err(self.full());
        }
        Ok(())
    }

    /// Without a store nothing can be unloaded, so a full live set refuses new sessions.
    fn refuses_new(&self, registry: &Registry) -> bool {
        self.store.is_none() && registry.sessions.len() >= self.limits.max_live
    }

    /// `SESSION_PERSISTENCE_DISABLED`: the session would fit if idle ones could be unloaded to
    /// a store, which is what this deployment lacks.
    fn full(&self) -> SessionError {
        persistence_disabled(&format!(
            "more than {} live sessions (max_live_sessions): without a store idle sessions cannot be unloaded; \
             archive a session or run with a store",
            self.limits.max_live
        ))
    }

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
        let (handle, ticket) = self
            .with_handle(factory, grants, id, async |handle| Ok((handle.clone(), handle.try_begin_turn()?)))
            .await?;
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
        let input = TurnInput { prompt: Some(request.prompt), resolution, output };
        self.drive_turn(&handle, ticket, input, request.options).await
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
            self.with_handle(factory, grants, id, async |handle| handle.compact().await).await
        }
        #[cfg(not(feature = "session-compaction"))]
        {
            let _ = (factory, grants, id);
            Err(SessionError::CompactionDisabled("session_compact".into()))
        }
    }

    /// Sends a won turn to the actor and waits for it as the caller asked.
    async fn drive_turn(
        &self,
        handle: &SessionHandle,
        ticket: TurnTicket,
        input: TurnInput,
        options: TurnOptions,
    ) -> Result<RunResult, SessionError> {
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

fn no_capped_output(id: &SessionId, tool_use_id: &str) -> SessionError {
    SessionError::invalid(format!(
        "session {id} has no capped tool output {tool_use_id:?}: outputs below the cap are already whole in the history"
    ))
}

fn archived(id: &SessionId) -> SessionError {
    SessionError::NotFound {
        session_id: id.clone(),
        message: format!("session {id} is archived: its history can be read, but it takes no more turns"),
    }
}

/// Waits for a turn's result; answers `running` once `wait` runs out, and interrupts the turn
/// if the caller cancels while still waiting.
async fn wait_for_turn(
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

pub(super) fn title_of(prompt: &str) -> String {
    let line = prompt.trim();
    let mut title: String = line.chars().take(TITLE_CHARS).collect();
    if line.chars().nth(TITLE_CHARS).is_some() {
        title.push('…');
    }
    title
}

fn check_labels(labels: &std::collections::BTreeMap<String, String>) -> Result<(), SessionError> {
    if labels.len() > MAX_LABELS {
        return Err(SessionError::invalid(format!(
            "labels: at most {MAX_LABELS} labels per session, got {}",
            labels.len()
        )));
    }
    for (key, value) in labels {
        if key.len() > MAX_LABEL_KEY_BYTES {
            return Err(SessionError::invalid(format!(
                "labels: a key is at most {MAX_LABEL_KEY_BYTES} bytes, {:?}… has {}",
                crate::text::truncate_at_char_boundary(key, 32),
                key.len()
            )));
        }
        if value.len() > MAX_LABEL_VALUE_BYTES {
            return Err(SessionError::invalid(format!(
                "labels: a value is at most {MAX_LABEL_VALUE_BYTES} bytes, the value of {:?} has {}",
                crate::text::truncate_at_char_boundary(key, 32),
                value.len()
            )));
        }
    }
    Ok(())
}

/// Every operation on sessions needs the scope `sessions` (or `sessions:all`).
fn require_sessions_scope(caller: &Caller) -> Result<(), SessionError> {
    if caller.uses_sessions() {
        return Ok(());
    }
    tracing::info!(target: "deputy::audit", subject = %caller.subject(), what = "policy_refusal", refused = "sessions", "refused: no sessions scope");
    Err(SessionError::invalid(format!(
        "the caller {:?} may not use sessions: its token lacks the scope \"sessions\"",
        caller.subject()
    )))
}

fn require_prompt(prompt: &str) -> Result<(), SessionError> {
    if prompt.trim().is_empty() {
        return Err(SessionError::invalid("prompt must not be empty"));
    }
    Ok(())
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
        let Some(handle) = self.live(id) else {
            let Some(store) = &self.store else { return Err(SessionError::not_found(id.clone())) };
            let record = store.record(id).await?.ok_or_else(|| SessionError::not_found(id.clone()))?;
            let mut view = record.view(record.resting_status(), None);
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

    async fn archive(&self, id: &SessionId) -> Result<ArchiveResult, SessionError> {
        self.archive_with(&self.factory, id).await
    }

    async fn compact(&self, id: &SessionId) -> Result<CompactResult, SessionError> {
        self.compact_with(&self.factory, &self.local().1, id).await
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

    async fn ready(&self) -> Result<(), SessionError> {
        match &self.store {
            Some(store) => Ok(store.ping().await?),
            None => Ok(()),
        }
    }

    fn changes(&self) -> broadcast::Receiver<SessionId> {
        self.changes.subscribe()
    }

    async fn events(
        &self,
        id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<crate::model::EventPage, SessionError> {
        self.events_of(id, after, limit).await
    }

    async fn history(&self, id: &SessionId) -> Result<SessionHistory, SessionError> {
        if let Some(handle) = self.live(id) {
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

#[path = "comms.rs"]
mod comms;

#[path = "delegation.rs"]
pub(super) mod delegation;
use delegation::{DelegationLimits, Provenance};

#[path = "feed.rs"]
mod feed;

#[cfg(test)]
#[path = "test_support.rs"]
mod test_support;

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "capability_tests.rs"]
mod capability_tests;

#[cfg(test)]
#[cfg(feature = "session-store")]
#[path = "persistence_tests.rs"]
mod persistence_tests;

#[cfg(test)]
#[cfg(feature = "session-store")]
#[path = "journal_tests.rs"]
mod journal_tests;

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod lifecycle_tests;

#[cfg(test)]
#[path = "hibernation_tests.rs"]
mod hibernation_tests;

#[cfg(test)]
#[path = "pending_tests.rs"]
mod pending_tests;

#[cfg(test)]
#[path = "inbox_tests.rs"]
mod inbox_tests;

#[cfg(test)]
#[path = "delegation_tests.rs"]
mod delegation_tests;

#[cfg(test)]
#[path = "structured_tests.rs"]
mod structured_tests;

#[cfg(test)]
#[cfg(feature = "session-compaction")]
#[path = "compaction_tests.rs"]
mod compaction_tests;
