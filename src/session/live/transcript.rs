//! Transcript operations: `fork` copies a session's conversation up to a turn into a new
//! session, `rewind` drops the turns after one from a session's history, `export` writes a
//! session as one JSONL document and `import` makes a new session of one.
//!
//! Fork and rewind reach only the ends of turns the record marked
//! ([`crate::model::TurnMarks`]): places where the history is a whole conversation a provider
//! accepts. A fork or an import is a new session of its caller, built from the resolved spec
//! it copies with the caller's grants, as a resume would be: a spec beyond them is refused.
//! Neither takes the source's inbox, children or name. A rewind goes through the session's
//! actor under its turn lock, so it never races a turn.

use std::sync::Arc;

use chrono::Utc;

use super::LiveSessionService;
use super::admission::require_sessions_scope;
use super::registry::Lookup;
use crate::agent::AgentFactory;
use crate::caller::Caller;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::llm::Message;
use crate::model::export::SessionDocument;
use crate::model::{
    ExportResult, ForkOrigin, Lineage, MAX_EVENTS_PAGE, RewindResult, SessionRecord, SessionView, StoredEvent,
};
use crate::policy::{AuditTag, Grants};
use crate::session::actor::Snapshot;
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
        let Snapshot { record: source, history, .. } = self.snapshot(id).await?;
        let mark = source.turn_end(at_turn).map_err(SessionError::invalid)?;
        let fork_id = SessionId::new();
        let mut record =
            SessionRecord::empty(fork_id.clone(), source.agent.clone(), source.title.clone(), Utc::now());
        record.labels = source.labels.clone();
        record.host_mode = source.host_mode;
        record.forked_from = Some(ForkOrigin { session_id: id.clone(), turn: mark.turn });
        record.turns = mark.turn;
        record.turn_marks = source.turn_marks.clone();
        record.turn_marks.truncate_after(mark.turn);
        let messages = usize::try_from(mark.messages).unwrap_or(usize::MAX).min(history.len());
        let history: Vec<Message> = history.into_iter().take(messages).collect();
        let view = self.adopt(factory, caller, grants, record, history, Vec::new()).await?;
        tracing::info!(session_id = %view.session_id, forked_from = %id, turn = mark.turn, "session forked");
        Ok(view)
    }

    /// `rewind` with `factory`'s agent and `grants` should the session need resuming.
    pub async fn rewind_with(
        &self,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        id: &SessionId,
        to_turn: u64,
    ) -> Result<RewindResult, SessionError> {
        self.leased(factory, grants, id, async move |handle| handle.rewind(to_turn).await).await
    }

    /// `export`: the session's record, history and whole journal as one document.
    pub async fn export_of(&self, id: &SessionId) -> Result<ExportResult, SessionError> {
        let Snapshot { mut record, history, events: held } = self.snapshot(id).await?;
        let mut events = Vec::new();
        if let Some(store) = &self.store {
            // The store's part of the journal, then what the actor holds beyond it.
            while let Some(page) =
                store.events(id, events.last().map(|event: &StoredEvent| event.seq), MAX_EVENTS_PAGE).await?
                && !page.is_empty()
            {
                events.extend(page);
            }
        }
        let next = events.last().map_or(0, |event| event.seq + 1);
        events.extend(held.into_iter().filter(|event| event.seq >= next));
        // Without a store the journal keeps its newest events only: the document holds those.
        let first = events.first().map_or(0, |event| event.seq);
        record.event_seq = events.last().map_or(first, |event| event.seq + 1);
        let document = SessionDocument::new(record, history, events);
        let lines = 2 + document.header.messages + document.header.events;
        Ok(ExportResult { session_id: id.clone(), lines, document: document.render() })
    }

    /// `import` on behalf of `caller` (the new session's owner).
    pub async fn import_with(
        &self,
        factory: &Arc<AgentFactory>,
        caller: &Caller,
        grants: &Grants,
        document: &str,
    ) -> Result<SessionView, SessionError> {
        require_sessions_scope(caller)?;
        let SessionDocument { header, record: source, messages, mut events } = SessionDocument::parse(document)
            .map_err(|reason| SessionError::invalid(format!("import: {reason}")))?;
        let id = SessionId::new();
        let mut record = source;
        record.session_id = id.clone();
        record.name = None;
        record.peer_group = None;
        record.archived = false;
        record.auto_turns = 0;
        record.delegation = crate::model::DelegationBook::default();
        record.created_at = Utc::now();
        record.updated_at = record.created_at;
        if let Some(last) = &mut record.last_turn {
            Arc::make_mut(last).session_id = id.clone();
        }
        // The journal is the new session's: numbered from 0 whatever the document's began at.
        for (seq, event) in (0..).zip(&mut events) {
            event.seq = seq;
        }
        let view = self.adopt(factory, caller, grants, record, messages, events).await?;
        tracing::info!(session_id = %view.session_id, imported_from = %header.session_id, "session imported");
        Ok(view)
    }

    /// Makes `record` (with `history`, and its journal `events` so far) a live session of
    /// `caller`'s, saved first: the end of a fork or an import. The record's id, owner and
    /// lineage are made the new session's here.
    async fn adopt(
        &self,
        factory: &Arc<AgentFactory>,
        caller: &Caller,
        grants: &Grants,
        mut record: SessionRecord,
        history: Vec<Message>,
        events: Vec<StoredEvent>,
    ) -> Result<SessionView, SessionError> {
        self.check_room()?;
        self.check_owner_quota(caller).await?;
        let id = record.session_id.clone();
        record.owner = caller.subject().to_owned();
        record.lineage = Lineage::root(&id);
        record.event_seq = events.len() as u64;
        let audit = AuditTag { subject: caller.subject_arc(), session_id: id.clone() };
        let agent = factory
            .restore_agent(record.agent.clone(), record.restored_state(history.clone()), grants, &audit)
            .await?;
        record.absorb(&agent, false);
        if let Some(store) = &self.store {
            let save = SaveRequest { events, ..SaveRequest::new(record.clone(), 0, history) };
            store.save(save).await?;
        }
        let handle = self.spawn(agent, record, StoredInbox::default(), factory, grants, 0);
        self.register_new(&handle)?;
        self.announce_new(factory, &id).await;
        self.with_tree(handle.view()).await
    }

    /// A session as of one moment: from its actor when it is live (after a running turn), else
    /// from the store, archived sessions included (then it holds no journal events: the store
    /// has them all).
    async fn snapshot(&self, id: &SessionId) -> Result<Snapshot, SessionError> {
        // On a store replicas share, a copy behind it is dropped first (see `current_copy`).
        self.current_copy(id).await?;
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
        Ok(Snapshot { record, history, events: Vec::new() })
    }
}
