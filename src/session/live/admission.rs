//! What a caller may do and what a new session must be: the owner check (F8), the `sessions`
//! scope, labels and prompts; then creating a session: saved, registered and its first turn
//! run, for a caller or for a delegated child.

use std::sync::{Arc, PoisonError};

use super::LiveSessionService;
use super::comms;
use super::registry::Slot;
use crate::agent::{Agent, AgentFactory};
use crate::caller::Caller;
use crate::error::SessionError;
use crate::hooks::{HookEvent, HookEventKind};
use crate::ids::SessionId;
use crate::model::RunResult;
use crate::model::{Lineage, SessionRecord};
use crate::policy::AuditTag;
use crate::policy::Grants;
use crate::session::actor::SessionHandle;
use crate::session::types::*;
use crate::store::{SaveRequest, StoredInbox, StoredListQuery};

/// Labels a session may carry, and the size of each key and value: labels travel in every list
/// page and every record, so they stay small (security review F10).
pub const MAX_LABELS: usize = 32;
pub const MAX_LABEL_KEY_BYTES: usize = 128;
pub const MAX_LABEL_VALUE_BYTES: usize = 1024;

/// Characters of the first prompt kept as the session's title.
const TITLE_CHARS: usize = 80;

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

impl LiveSessionService {
    /// Whether `caller` may act on session `id` (F8): its own sessions, or every one with
    /// `sessions:all`. Another owner's session answers `SESSION_NOT_FOUND`, as an unknown id
    /// does, so its existence is not revealed, unless the caller may read it (then
    /// `POLICY_DENIED`). A viewer (`sessions:read` or `sessions:read_all` alone) acts on none,
    /// refused alike whatever the id. An id that is nowhere passes: the operation itself
    /// answers `SESSION_NOT_FOUND`.
    ///
    /// Errors: `NotFound`, `PolicyDenied`, `Store`.
    pub async fn check_access(&self, caller: &Caller, id: &SessionId) -> Result<(), SessionError> {
        if !caller.uses_sessions() && caller.reads_sessions() {
            return Err(read_only(caller));
        }
        require_sessions_scope(caller)?;
        if caller.sees_all() {
            return Ok(());
        }
        match self.owner_of(id).await? {
            Some(owner) if caller.may_use(&owner) => Ok(()),
            Some(owner) if caller.may_read(&owner) => Err(read_only(caller)),
            Some(_) => Err(foreign(caller, id)),
            None => Ok(()),
        }
    }

    /// Whether `caller` may see session `id`: as [`Self::check_access`], with the viewers'
    /// scopes counted.
    ///
    /// Errors: `NotFound`, `PolicyDenied` (no scope to see sessions), `Store`.
    pub async fn check_read(&self, caller: &Caller, id: &SessionId) -> Result<(), SessionError> {
        require_read_scope(caller)?;
        if caller.reads_all() {
            return Ok(());
        }
        match self.owner_of(id).await? {
            Some(owner) if !caller.may_read(&owner) => Err(foreign(caller, id)),
            _ => Ok(()),
        }
    }

    /// The owner of session `id`, live or stored; `None` when it is nowhere.
    async fn owner_of(&self, id: &SessionId) -> Result<Option<String>, SessionError> {
        Ok(match (self.live(id), &self.store) {
            (Some(handle), _) => Some(handle.owner()),
            (None, Some(store)) => store.record(id).await?.map(|record| record.owner),
            (None, None) => None,
        })
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
        if let Some(name) = &request.agent {
            let named = factory.profiles().get(name)?;
            request.host_mode = request.host_mode.or(named.profile.fields.host_mode);
            request.build.apply_profile(&named);
        }
        let host_mode = request.host_mode.unwrap_or(false);
        // Host sessions talk: they get the comms tools unless the caller chose the builtins.
        request.build.comms_by_default |= host_mode;
        self.offer_delegation(&mut request.build)?;
        if let Some(name) = &request.name {
            comms::check_name(name)?;
        }
        if let Some(group) = &request.peer_group {
            comms::check_group(group)?;
        }
        self.check_room()?;
        self.check_owner_quota(caller).await?;
        // Minted before the agent is built, so the session's tools know whose they are.
        let id = SessionId::new();
        let audit = AuditTag { subject: caller.subject_arc(), session_id: id.clone() };
        let agent = factory.build_agent(request.build, grants, &audit).await?;
        let launch = Launch {
            new: NewSession {
                title: title_of(&request.prompt),
                labels: request.labels,
                host_mode,
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

    /// Refuses a session over the owner's `max_open_per_owner` (G12): counted in the store's
    /// index of the owner's open sessions, so without a store there is nothing to count (and
    /// `max_live` bounds every owner together).
    pub(super) async fn check_owner_quota(&self, owner: &Caller) -> Result<(), SessionError> {
        let (Some(store), Some(limit)) = (&self.store, self.limits.max_open_per_owner) else { return Ok(()) };
        let query =
            StoredListQuery { first: 0, owner: Some(owner.subject().to_owned()), ..StoredListQuery::default() };
        let open = store.list(query).await?.total;
        if open >= limit {
            return Err(SessionError::policy_denied(format!(
                "this caller has {open} sessions not archived, its limit ([sessions] max_open_per_owner = {limit}): \
                 archive some first"
            )));
        }
        Ok(())
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
            Some(_) => Some((self.naming.lock().await, self.exclusive("deputy:naming").await?)),
            None => None,
        };
        self.check_name_free(&record).await?;
        let delegating = match &record.lineage.parent_id {
            Some(parent) => {
                let guard = (self.delegating.lock().await, self.exclusive("deputy:delegating").await?);
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
        let handle = self.spawn(agent, record, StoredInbox::default(), factory, grants, 0);
        // Nobody else knows the id yet, so the first turn always wins the lock, and its lease.
        let ticket = handle.try_begin_turn()?;
        if let super::lease::Leased::Stale(grant) = self.lease_turn(&handle, &ticket, None).await? {
            self.release_lease(&id, grant).await;
            return Err(SessionError::store(format!(
                "session {id} was changed by another process as it was created"
            )));
        }
        self.register_new(&handle)?;
        drop(delegating);
        drop(naming);
        tracing::info!(session_id = %id, subject = %owner.subject(), "session created");
        // Observe only, before the first turn (whose `turn_start` follows it).
        self.announce_new(factory, &id).await;
        self.drive_turn(&handle, ticket, prompt.into(), options).await
    }

    /// Puts a new session's handle in the live map, unless the live set is full: checked again
    /// under the lock, so concurrent creates (and forks, imports) cannot overshoot the bound.
    pub(super) fn register_new(&self, handle: &SessionHandle) -> Result<(), SessionError> {
        let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
        if self.refuses_new(&registry) {
            return Err(self.full());
        }
        registry.sessions.insert(handle.id().clone(), Slot::Live(handle.clone()));
        Ok(())
    }

    /// After a new session is registered: the operator's `session_start` hooks hear of it, and
    /// the live set is brought back within its bound (hibernating the least recently used).
    pub(super) async fn announce_new(&self, factory: &Arc<AgentFactory>, id: &SessionId) {
        factory.hooks().observe(HookEvent::new(HookEventKind::SessionStart, id, None)).await;
        self.enforce_cap(id).await;
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

pub(super) fn check_labels(labels: &std::collections::BTreeMap<String, String>) -> Result<(), SessionError> {
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
pub(super) fn require_sessions_scope(caller: &Caller) -> Result<(), SessionError> {
    if caller.uses_sessions() {
        return Ok(());
    }
    tracing::info!(target: "deputy::audit", subject = %caller.subject(), what = "policy_refusal", refused = "sessions", "refused: no sessions scope");
    Err(SessionError::policy_denied(format!(
        "the caller {:?} may not use sessions: its token lacks the scope \"sessions\"",
        caller.subject()
    )))
}

/// Reading sessions needs `sessions`, `sessions:all`, `sessions:read` or `sessions:read_all`.
pub(super) fn require_read_scope(caller: &Caller) -> Result<(), SessionError> {
    if caller.reads_sessions() {
        return Ok(());
    }
    require_sessions_scope(caller)
}

/// A caller that may see a session but not act on it.
fn read_only(caller: &Caller) -> SessionError {
    tracing::info!(target: "deputy::audit", subject = %caller.subject(), what = "policy_refusal", refused = "read_only", "refused: the caller may only read sessions");
    SessionError::policy_denied(format!(
        "the caller {:?} may only read this session: acting on it needs the scope \"sessions\" (its own) or \
         \"sessions:all\"",
        caller.subject()
    ))
}

/// Another owner's session, answered as if it did not exist.
fn foreign(caller: &Caller, id: &SessionId) -> SessionError {
    tracing::info!(target: "deputy::audit", subject = %caller.subject(), session_id = %id, what = "policy_refusal", refused = "foreign_session", "refused: the session belongs to another subject");
    SessionError::not_found(id.clone())
}

pub(super) fn require_prompt(prompt: &str) -> Result<(), SessionError> {
    if prompt.trim().is_empty() {
        return Err(SessionError::invalid("prompt must not be empty"));
    }
    Ok(())
}
