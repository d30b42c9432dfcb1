//! Memory on the live service: what a session's `memory_search` and `remember` reach
//! ([`Recall`]), and the callers' own memories (list, search, delete).
//!
//! The owner is always the session's (for the tools) or the caller's (for the operations),
//! never an argument: this is where tenant isolation of memories is decided.

use futures::future::BoxFuture;

use super::LiveSessionService;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::SessionStatus;
use crate::model::documents::{CollectionIndexed, DocumentsIndexed, EmbeddingsSpent};
use crate::model::memory::{
    MAX_MEMORY_BYTES, MAX_TAG_CHARS, MAX_TAGS, MemoryDeleted, MemoryKind, MemoryList, MemoryRecord,
};
use crate::session::MemoryQuery;
use crate::tools::memory::{Recall, Recalled};

impl LiveSessionService {
    /// `owner`'s memories: the best matches of the query's words, or newest first.
    pub async fn memories_of(&self, owner: &str, query: MemoryQuery) -> Result<MemoryList, SessionError> {
        let limit = query.limit.unwrap_or(DEFAULT_MEMORY_PAGE);
        self.memory.list(owner, query.query.as_deref(), query.before, limit).await
    }

    /// Deletes `owner`'s memory `id`. Another owner's memory is as absent as one that never was.
    pub async fn forget_memory_of(&self, owner: &str, id: u64) -> Result<MemoryDeleted, SessionError> {
        let deleted = self.memory.forget(owner, id).await?;
        Ok(MemoryDeleted { id, deleted })
    }

    async fn recall_for(
        &self,
        session: &SessionId,
        query: &str,
        whole_owner: bool,
        limit: usize,
    ) -> Result<Vec<Recalled>, SessionError> {
        let handle = self.live(session).ok_or_else(|| SessionError::not_found(session.clone()))?;
        let owner = handle.view().state.owner;
        let only = (!whole_owner).then_some(session);
        let hits = self.memory.search(&owner, only, query, limit).await?;
        Ok(hits
            .into_iter()
            .map(|hit| Recalled {
                text: hit.text,
                score: hit.score,
                session_id: hit.session_id,
                turn: hit.turn,
                at: hit.at,
                kind: hit.kind.as_str().to_owned(),
            })
            .collect())
    }

    async fn remember_for(
        &self,
        session: &SessionId,
        text: String,
        tags: Vec<String>,
    ) -> Result<u64, SessionError> {
        let text = text.trim().to_owned();
        if text.is_empty() {
            return Err(SessionError::invalid("text: nothing to remember"));
        }
        if text.len() > MAX_MEMORY_BYTES {
            return Err(SessionError::invalid(format!(
                "text: {} bytes, more than the {MAX_MEMORY_BYTES} a memory may hold; remember the gist",
                text.len()
            )));
        }
        if tags.len() > MAX_TAGS || tags.iter().any(|tag| tag.chars().count() > MAX_TAG_CHARS) {
            return Err(SessionError::invalid(format!(
                "tags: at most {MAX_TAGS}, each at most {MAX_TAG_CHARS} characters"
            )));
        }
        let handle = self.live(session).ok_or_else(|| SessionError::not_found(session.clone()))?;
        let state = handle.view().state;
        // The turn running now, which the view counts once it ends.
        let turn = if state.status == SessionStatus::Running { state.turns + 1 } else { state.turns };
        let record = MemoryRecord {
            id: 0,
            owner: state.owner,
            kind: MemoryKind::Remembered,
            session_id: session.clone(),
            turn,
            at: chrono::Utc::now(),
            text,
            tags,
            agent: handle.provenance().spec.agent.as_ref().map(|agent| agent.name.clone()),
        };
        Ok(self.memory.remember(record).await?.id)
    }
}

/// Brings `documents`' collections (or one) up to their files, on the blocking pool.
pub async fn index_documents_of(
    documents: &std::sync::Arc<crate::retrieval::documents::Documents>,
    collection: Option<String>,
) -> Result<DocumentsIndexed, SessionError> {
    let indexing = documents.clone();
    let reports = tokio::task::spawn_blocking(move || indexing.index(collection.as_deref()))
        .await
        .map_err(|error| SessionError::invalid(format!("indexing failed: {error}")))?
        .map_err(SessionError::invalid)?;
    let collections = reports
        .into_iter()
        .map(|(name, report)| CollectionIndexed {
            name,
            files: report.files,
            indexed: report.indexed,
            removed: report.removed,
            chunks: report.chunks,
            embedded: report.embedded,
        })
        .collect();
    let embeddings = documents.embedder().map(|embedder| {
        let spent = embedder.spent();
        EmbeddingsSpent {
            model: embedder.model().to_owned(),
            calls: spent.calls,
            tokens: spent.tokens,
            cost_usd: spent.cost_usd,
        }
    });
    Ok(DocumentsIndexed { collections, embeddings })
}

/// Memories one page lists when the caller does not say.
const DEFAULT_MEMORY_PAGE: usize = 20;

/// The model reads an error as `CODE: message`, as callers do.
fn for_the_model(error: SessionError) -> String {
    format!("{}: {error}", error.code().as_str())
}

impl Recall for LiveSessionService {
    fn recall(
        &self,
        session: SessionId,
        query: String,
        whole_owner: bool,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Recalled>, String>> {
        Box::pin(async move { self.recall_for(&session, &query, whole_owner, limit).await.map_err(for_the_model) })
    }

    fn remember(&self, session: SessionId, text: String, tags: Vec<String>) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move { self.remember_for(&session, text, tags).await.map_err(for_the_model) })
    }
}
