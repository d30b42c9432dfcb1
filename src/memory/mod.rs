//! [`Memory`]: every owner's memories, searchable — passages of history compaction took out of a
//! session's context, and what agents chose to `remember` — for the `memory_search` and
//! `remember` tools and the callers' `memory_*` operations.
//!
//! The store keeps the rows (a compaction's passages in the same transaction as the compacted
//! history, so neither can exist without the other); the [`index`] beside it is derived and
//! follows the store: opened on first use, caught up after each save that kept memories,
//! rebuilt when it is lost or a deletion did not reach it. Without a store the index holds the
//! rows itself, for the life of the process. One process owns a store, so one `Memory` is the
//! only writer, and the per-owner bounds are checked here under its lock.

pub mod index;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OnceCell;

use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::memory::{
    MAX_LIST_PAGE, MAX_SEARCH_RESULTS, MemoryBounds, MemoryEntry, MemoryHit, MemoryKind, MemoryList, MemoryRecord,
};
use crate::retrieval::embeddings::Embedder;
use crate::retrieval::fusion::fuse;
use crate::store::{MemoryMarks, SharedStore};
use index::{IndexError, MemoryIndex};

/// Memories read from the store per batch while the index catches up.
const CATCH_UP_BATCH: usize = 512;

/// The server's memories: one per process, shared by every session.
pub struct Memory {
    store: SharedStore,
    /// Where the index lives; `None`: in memory (no store).
    dir: Option<PathBuf>,
    bounds: MemoryBounds,
    /// Opened on first use, so a server whose sessions never search pays nothing.
    index: OnceCell<Arc<MemoryIndex>>,
    /// One change of the index at a time: catching up, remembering, forgetting.
    writing: tokio::sync::Mutex<()>,
    /// Remembered memories per owner (count, bytes), counted from the index on first need.
    remembered: Mutex<HashMap<String, (u64, u64)>>,
    /// The ids of a store-less server.
    next_id: AtomicU64,
    /// How many times an index was opened (tests check that sessions share one).
    opened: AtomicU64,
    /// With an embeddings model (`[embeddings]`): vectors for memories, hybrid search.
    embedder: Option<Arc<Embedder>>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").field("dir", &self.dir).field("bounds", &self.bounds).finish_non_exhaustive()
    }
}

fn index_failed(error: IndexError) -> SessionError {
    SessionError::Store { message: format!("memory index: {error}"), source: None }
}

fn blocking_failed(error: tokio::task::JoinError) -> SessionError {
    SessionError::Store { message: format!("memory index task failed: {error}"), source: None }
}

impl Memory {
    /// `dir`: where the index is kept beside the store (`None` without one: in memory).
    pub fn new(store: SharedStore, dir: Option<PathBuf>, bounds: MemoryBounds) -> Self {
        Self {
            store,
            dir,
            bounds,
            index: OnceCell::new(),
            writing: tokio::sync::Mutex::new(()),
            remembered: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            opened: AtomicU64::new(0),
            embedder: None,
        }
    }

    /// The same memory searched hybrid: BM25 and `embedder`'s vectors, fused by rank.
    pub fn with_embedder(mut self, embedder: Option<Arc<Embedder>>) -> Self {
        self.embedder = embedder;
        self
    }

    pub fn bounds(&self) -> MemoryBounds {
        self.bounds
    }

    /// How many times the index was opened (once per process, at first use).
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// The index, opened (and caught up with the store) on first use.
    async fn index(&self) -> Result<Arc<MemoryIndex>, SessionError> {
        self.index
            .get_or_try_init(|| async {
                let dir = self.dir.clone();
                let index = tokio::task::spawn_blocking(move || match dir {
                    Some(dir) => MemoryIndex::open_in(&dir),
                    None => MemoryIndex::in_ram(),
                })
                .await
                .map_err(blocking_failed)?
                .map_err(index_failed)?;
                self.opened.fetch_add(1, Ordering::Relaxed);
                let index = Arc::new(index);
                let _writing = self.writing.lock().await;
                self.catch_up(&index).await?;
                Ok(index)
            })
            .await
            .cloned()
    }

    /// The index when it can hold anything. While a process's store has never kept a memory
    /// (and, without a store, before the first is added), searches and lists answer empty
    /// without opening one: a server that never uses memory never makes its directory, and
    /// `resources/list` stays cheap.
    ///
    /// On a store other processes share (replicas), an open index first catches up with
    /// what they kept: one cheap read of the store's marks when nothing is new.
    async fn index_if_any(&self) -> Result<Option<Arc<MemoryIndex>>, SessionError> {
        if let Some(index) = self.index.get() {
            if let Some(store) = self.store.as_ref().filter(|store| store.leases().is_some())
                && store.memory_marks().await? != index.marks()
            {
                // Searches never wait on a writer when the store has nothing new.
                let _writing = self.writing.lock().await;
                self.catch_up(index).await?;
            }
            return Ok(Some(index.clone()));
        }
        let any = match &self.store {
            Some(store) => store.memory_marks().await?.last_id > 0,
            None => false,
        };
        if any { self.index().await.map(Some) } else { Ok(None) }
    }

    /// Brings the index up to the store: the memories after the last it holds, or all of them
    /// when the store deleted one the index may still hold. Call with `writing` held.
    async fn catch_up(&self, index: &Arc<MemoryIndex>) -> Result<(), SessionError> {
        let Some(store) = &self.store else { return Ok(()) };
        let stored = store.memory_marks().await?;
        let mut marks = index.marks();
        if marks.deletes != stored.deletes || marks.last_id > stored.last_id {
            tracing::info!("the memory index is behind a deletion: rebuilding it from the store");
            let index = index.clone();
            tokio::task::spawn_blocking(move || index.clear())
                .await
                .map_err(blocking_failed)?
                .map_err(index_failed)?;
            marks = MemoryMarks::default();
        }
        while marks.last_id < stored.last_id {
            let batch = store.memories(marks.last_id, CATCH_UP_BATCH).await?;
            let Some(last) = batch.last() else { break };
            marks = MemoryMarks { last_id: last.id, deletes: stored.deletes };
            let (index, embedder) = (index.clone(), self.embedder.clone());
            tokio::task::spawn_blocking(move || index.add(&batch, marks, embedder.as_deref()))
                .await
                .map_err(blocking_failed)?
                .map_err(index_failed)?;
        }
        Ok(())
    }

    /// After a save kept memories in the store: the index follows, if it is open (otherwise
    /// it catches up when it opens). A failure is logged, never a failed turn: the next open
    /// catches up.
    pub async fn caught_up(&self) {
        let Some(index) = self.index.get() else { return };
        let _writing = self.writing.lock().await;
        if let Err(error) = self.catch_up(index).await {
            tracing::warn!("indexing compacted history failed: {error}");
        }
    }

    /// Without a store, the index is where memories are kept: a compaction's passages go
    /// straight into it. A failure is logged, never a failed turn.
    pub async fn kept(&self, records: Vec<MemoryRecord>) {
        if records.is_empty() {
            return;
        }
        if let Err(error) = self.add_unstored(records).await {
            tracing::warn!("indexing compacted history failed: {error}");
        }
    }

    /// A store-less server's memories: ids given here, kept by the index alone.
    async fn add_unstored(&self, records: Vec<MemoryRecord>) -> Result<Vec<MemoryRecord>, SessionError> {
        let index = self.index().await?;
        let _writing = self.writing.lock().await;
        self.add_unstored_locked(index, records).await
    }

    /// [`Self::add_unstored`] with `writing` held.
    async fn add_unstored_locked(
        &self,
        index: Arc<MemoryIndex>,
        mut records: Vec<MemoryRecord>,
    ) -> Result<Vec<MemoryRecord>, SessionError> {
        for record in &mut records {
            record.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        }
        let marks = MemoryMarks { last_id: records.last().map_or(0, |record| record.id), deletes: 0 };
        let (added, embedder) = (records.clone(), self.embedder.clone());
        tokio::task::spawn_blocking(move || index.add(&added, marks, embedder.as_deref()))
            .await
            .map_err(blocking_failed)?
            .map_err(index_failed)?;
        Ok(records)
    }

    /// Keeps what an agent chose to remember, within its owner's bounds (beyond them:
    /// `INVALID_REQUEST`).
    pub async fn remember(&self, record: MemoryRecord) -> Result<MemoryRecord, SessionError> {
        let index = self.index().await?;
        let owner = record.owner.clone();
        let weight = record.weight();
        let _writing = self.writing.lock().await;
        let (count, bytes) = self.remembered_by(&index, &owner).await?;
        if count + 1 > self.bounds.max_per_owner {
            return Err(SessionError::invalid(format!(
                "memory is full: {owner} keeps {count} memories, the most allowed ([memory] max_per_owner); delete \
                 some (memory_delete) before remembering more"
            )));
        }
        if bytes + weight > self.bounds.max_bytes_per_owner {
            return Err(SessionError::invalid(format!(
                "memory is full: {owner}'s memories hold {bytes} bytes and this one {weight} more, past the {} \
                 allowed ([memory] max_bytes_per_owner); delete some (memory_delete) before remembering more",
                self.bounds.max_bytes_per_owner
            )));
        }
        let stored = match &self.store {
            Some(store) => {
                let id = store.remember(record.clone()).await?;
                self.catch_up(&index).await?;
                MemoryRecord { id, ..record }
            }
            None => {
                let mut added = self.add_unstored_locked(index, vec![record]).await?;
                added.pop().ok_or_else(|| SessionError::invalid("the memory was not kept"))?
            }
        };
        let mut remembered = self.remembered.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = remembered.entry(owner).or_default();
        *entry = (entry.0 + 1, entry.1 + weight);
        Ok(stored)
    }

    async fn remembered_by(&self, index: &Arc<MemoryIndex>, owner: &str) -> Result<(u64, u64), SessionError> {
        if let Some(known) = self.remembered.lock().unwrap_or_else(PoisonError::into_inner).get(owner) {
            return Ok(*known);
        }
        let (index, who) = (index.clone(), owner.to_owned());
        let counted = tokio::task::spawn_blocking(move || index.remembered_by(&who))
            .await
            .map_err(blocking_failed)?
            .map_err(index_failed)?;
        self.remembered.lock().unwrap_or_else(PoisonError::into_inner).insert(owner.to_owned(), counted);
        Ok(counted)
    }

    /// The best matches of `query` among `owner`'s memories (`session`'s only, when given).
    pub async fn search(
        &self,
        owner: &str,
        session: Option<&SessionId>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<MemoryHit>, SessionError> {
        let Some(index) = self.index_if_any().await? else { return Ok(Vec::new()) };
        let (owner, session, query) = (owner.to_owned(), session.cloned(), query.to_owned());
        let limit = limit.clamp(1, MAX_SEARCH_RESULTS);
        let embedder = self.embedder.clone();
        let found = tokio::task::spawn_blocking(move || {
            hybrid(&index, embedder.as_deref(), &owner, session.as_ref(), &query, limit)
        })
        .await
        .map_err(blocking_failed)?
        .map_err(index_failed)?;
        Ok(found.into_iter().map(|(score, record)| MemoryHit::new(record, score)).collect())
    }

    /// `owner`'s memories: the best matches of `query`, or newest first from `before` on.
    pub async fn list(
        &self,
        owner: &str,
        query: Option<&str>,
        before: Option<u64>,
        limit: usize,
    ) -> Result<MemoryList, SessionError> {
        let Some(index) = self.index_if_any().await? else { return Ok(MemoryList::default()) };
        let (who, limit) = (owner.to_owned(), limit.clamp(1, MAX_LIST_PAGE));
        if let Some(query) = query.filter(|query| !query.trim().is_empty()) {
            let query = query.to_owned();
            let limit = limit.min(MAX_SEARCH_RESULTS);
            let found = tokio::task::spawn_blocking(move || index.search(&who, None, &query, limit))
                .await
                .map_err(blocking_failed)?
                .map_err(index_failed)?;
            let memories =
                found.into_iter().map(|(score, record)| MemoryEntry { record, score: Some(score) }).collect();
            return Ok(MemoryList { memories, next_before: None });
        }
        // One more than asked, to know whether an older page exists.
        let mut found = tokio::task::spawn_blocking(move || index.list(&who, before, limit + 1))
            .await
            .map_err(blocking_failed)?
            .map_err(index_failed)?;
        let more = found.len() > limit;
        found.truncate(limit);
        let next_before = more.then(|| found.last().map(|record| record.id)).flatten();
        let memories = found.into_iter().map(|record| MemoryEntry { record, score: None }).collect();
        Ok(MemoryList { memories, next_before })
    }

    /// Deletes `owner`'s memory `id`; `false` when there is none (or it is another's: nobody
    /// learns another owner's ids exist).
    pub async fn forget(&self, owner: &str, id: u64) -> Result<bool, SessionError> {
        let Some(index) = self.index_if_any().await? else { return Ok(false) };
        let _writing = self.writing.lock().await;
        let found = {
            let index = index.clone();
            tokio::task::spawn_blocking(move || index.get(id))
                .await
                .map_err(blocking_failed)?
                .map_err(index_failed)?
        };
        let deleted = match &self.store {
            Some(store) => store.forget(id, owner).await?,
            None => found.as_ref().is_some_and(|record| record.owner == owner),
        };
        if !deleted {
            return Ok(false);
        }
        let marks = match &self.store {
            Some(store) => {
                MemoryMarks { last_id: index.marks().last_id, deletes: store.memory_marks().await?.deletes }
            }
            None => index.marks(),
        };
        let deleting = index.clone();
        let result =
            tokio::task::spawn_blocking(move || deleting.delete(id, marks)).await.map_err(blocking_failed)?;
        if let Err(error) = result {
            // The store has deleted it; the index is rebuilt at its next open.
            tracing::warn!("removing memory {id} from the index failed: {error}");
        }
        if let Some(record) = found.filter(|record| record.kind == MemoryKind::Remembered) {
            let mut remembered = self.remembered.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(entry) = remembered.get_mut(owner) {
                *entry = (entry.0.saturating_sub(1), entry.1.saturating_sub(record.weight()));
            }
        }
        Ok(true)
    }
}

/// Candidates each ranking gives the fusion.
const CANDIDATES: usize = 50;

/// BM25 alone, or, with an embedder and a query it can embed, BM25 and vector similarity fused
/// by reciprocal rank. Blocking.
fn hybrid(
    index: &MemoryIndex,
    embedder: Option<&Embedder>,
    owner: &str,
    session: Option<&SessionId>,
    query: &str,
    limit: usize,
) -> Result<Vec<(f32, MemoryRecord)>, IndexError> {
    let query_vector = embedder.and_then(|embedder| match embedder.embed_query(query) {
        Ok(vector) => Some(vector),
        Err(error) => {
            tracing::warn!("embedding the query failed, searching memories by words only: {error}");
            None
        }
    });
    let Some(query_vector) = query_vector else { return index.search(owner, session, query, limit) };
    let lexical = index.search(owner, session, query, CANDIDATES)?;
    let dense = index.nearest(owner, session, &query_vector, CANDIDATES)?;
    let rankings = [
        lexical.into_iter().map(|(_, record)| record).collect::<Vec<_>>(),
        dense.into_iter().map(|(_, record)| record).collect(),
    ];
    Ok(fuse(&rankings, |record| record.id).into_iter().take(limit).collect())
}

/// The memories of a session's compacted history, as its owner's.
pub fn recollections_of(
    record: &crate::model::SessionRecord,
    passages: &[crate::model::memory::Recollection],
) -> Vec<MemoryRecord> {
    let at = chrono::Utc::now();
    passages
        .iter()
        .map(|passage| MemoryRecord {
            id: 0,
            owner: record.owner.clone(),
            kind: MemoryKind::History,
            session_id: record.session_id.clone(),
            turn: passage.turn,
            at,
            text: passage.text.clone(),
            tags: Vec::new(),
            agent: record.agent.agent.as_ref().map(|agent| agent.name.clone()),
        })
        .collect()
}

/// Shared by the service and every session's tools.
pub type SharedMemory = Arc<Memory>;

#[cfg(test)]
mod tests;
