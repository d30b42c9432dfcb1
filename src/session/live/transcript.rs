//! Transcript operations: `fork` copies a session's conversation up to a turn into a new
//! session, `rewind` drops the turns after one from a session's history.
//!
//! Both reach only the ends of turns the record marked ([`crate::model::TurnMarks`]): places
//! where the history is a whole conversation a provider accepts. A fork is a new session of
//! its caller, built from the source's resolved spec with the caller's grants, as a resume
//! would be; it starts with a fresh budget and no inbox, children or name. A rewind goes
//! through the session's actor under its turn lock, so it never races a turn.

use std::sync::{Arc, PoisonError};

use chrono::Utc;

use super::LiveSessionService;
use super::admission::require_sessions_scope;
use super::registry::{Lookup, Slot};
use crate::agent::AgentFactory;
use crate::caller::Caller;
use crate::error::SessionError;
use crate::hooks::{HookEvent, HookEventKind};
use crate::ids::SessionId;
use crate::llm::Message;
use crate::model::{ForkOrigin, Lineage, RewindResult, SessionRecord, SessionView};
use crate::policy::{AuditTag, Grants};
use crate::store::{SaveRequest, StoredInbox};

impl LiveSessionService {
    /// `fork` on behalf of `caller` (the fork's owner), its agent built by `factory` within
    /// `grants`.
    pub async fn fork_with(
        &self,
        factory: &Arc<AgentFactory>,
        caller: &Caller,
        grants: &Grants,
        id: &SessionId,
        at_turn: Option<u64>,
    ) -> Result<SessionView, SessionError> {
        require_sessions_scope(caller)?;
        let (source, history) = self.snapshot(id).await?;
        let mark = source.turn_end(at_turn).map_err(SessionError::invalid)?;
        self.check_room()?;
        self.check_owner_quota(caller).await?;
        let fork_id = SessionId::new();
        let mut record =
            SessionRecord::empty(fork_id.clone(), source.agent.clone(), source.title.clone(), Utc::now());
        record.owner = caller.subject().to_owned();
        record.labels = source.labels.clone();
        record.host_mode = source.host_mode;
        record.lineage = Lineage::root(&fork_id);
        record.forked_from = Some(ForkOrigin { session_id: id.clone(), turn: mark.turn });
        record.turns = mark.turn;
        record.turn_marks = source.turn_marks.clone();
        record.turn_marks.truncate_after(mark.turn);
        let messages = usize::try_from(mark.messages).unwrap_or(usize::MAX).min(history.len());
        let history: Vec<Message> = history.into_iter().take(messages).collect();
        let audit = AuditTag { subject: caller.subject_arc(), session_id: fork_id.clone() };
        let agent = factory
            .restore_agent(record.agent.clone(), record.restored_state(history.clone()), grants, &audit)
            .await?;
        record.absorb(&agent, false);
        if let Some(store) = &self.store {
            store.save(SaveRequest::new(record.clone(), 0, history)).await?;
        }
        let handle = self.spawn(agent, record, StoredInbox::default(), factory, grants);
        {
            let mut registry = self.registry.write().unwrap_or_else(PoisonError::into_inner);
            if self.refuses_new(&registry) {
                return Err(self.full());
            }
            registry.sessions.insert(fork_id.clone(), Slot::Live(handle.clone()));
        }
        tracing::info!(session_id = %fork_id, forked_from = %id, turn = mark.turn, subject = %caller.subject(), "session forked");
        factory.hooks().observe(HookEvent::new(HookEventKind::SessionStart, &fork_id, None)).await;
        self.enforce_cap(&fork_id).await;
        self.with_tree(handle.view()).await
    }

    /// `rewind` with `factory`'s agent and `grants` should the session need resuming.
    pub async fn rewind_with(
        &self,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        id: &SessionId,
        to_turn: u64,
    ) -> Result<RewindResult, SessionError> {
        self.with_handle(factory, grants, id, async move |handle| handle.rewind(to_turn).await).await
    }

    /// A session's record and history as of one moment: from its actor when it is live (after
    /// a running turn), else from the store, archived sessions included.
    async fn snapshot(&self, id: &SessionId) -> Result<(SessionRecord, Vec<Message>), SessionError> {
        if let Lookup::Live(handle) = self.lookup(id) {
            match handle.snapshot().await {
                Ok(snapshot) => return Ok(snapshot),
                // Unloaded meanwhile: the store has it all.
                Err(_) if handle.is_unloaded() => {}
                Err(error) => return Err(error),
            }
        }
        let Some(store) = &self.store else { return Err(SessionError::not_found(id.clone())) };
        let record = store.record(id).await?.ok_or_else(|| SessionError::not_found(id.clone()))?;
        let history = store.history(id).await?;
        if history.len() as u64 != record.message_count {
            return Err(SessionError::store(format!(
                "session {id}: the record counts {} messages but {} are stored (it changed while it was read: try again)",
                record.message_count,
                history.len()
            )));
        }
        Ok((record, history))
    }
}
