//! [`RedbStore`]: the session store in one redb file.
//!
//! redb is synchronous, so every operation runs on tokio's blocking pool and never stalls the
//! async workers. redb's MVCC lets readers (`read`, `list`) run while a save commits.
//!
//! [`schema`] lays the file out, [`write`] and [`read`] run the operations, [`group`] commits
//! concurrent saves together; this module opens the store and puts each operation on the
//! blocking pool.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use redb::{Database, DatabaseError, ReadableDatabase};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ids::{MessageId, SessionId};
use crate::llm::Message;
use crate::model::SessionRecord;
use crate::model::StoredEvent;
use crate::model::memory::MemoryRecord;
use crate::secrets::SecretSealer;
use crate::store::codec::{decode_sealed, encode_sealed};
use crate::store::{
    JournalCommit, MemoryMarks, OpenDelegated, SaveRequest, SessionStore, StoreError, StoredChild, StoredInbox,
    StoredListQuery, StoredMail, StoredPage, StoredPeer,
};
use read::{children, events, history, inbox, list, open_delegated, peers, record, tool_output};
use schema::{create_tables_once, open_sealer};
use write::{archive, post};

mod encoded;
mod files;
mod group;
mod memories;
mod meta;
mod read;
mod schema;
mod tables;
mod wal;
mod write;

#[derive(Debug, Clone)]
pub struct RedbStore {
    inner: Arc<Inner>,
    path: PathBuf,
}

/// The open database and the sealer of its secrets: what every operation works with.
struct Inner {
    db: Database,
    sealer: Arc<dyn SecretSealer>,
    /// Saves waiting to be committed together ([`group`]).
    commits: group::Queue,
    /// What makes a save durable ([`wal`]).
    wal: wal::Wal,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").field("db", &self.db).finish_non_exhaustive()
    }
}

impl Inner {
    /// Every value goes through the sealer, so no code path can store a secret redacted
    /// (what a `Secret` serializes to without one) or in plaintext.
    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, StoreError> {
        encode_sealed(&self.sealer, value)
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, StoreError> {
        decode_sealed(&self.sealer, bytes)
    }
}

/// Folds every redb error into the store's one backend variant.
fn backend(error: impl Into<redb::Error>) -> StoreError {
    StoreError::Backend(error.into().to_string())
}

/// redb's page cache. Its default, 1 GiB, fills as sessions are written and read, so with
/// hibernation it became most of a long-running deputy's memory (about 100 KB per session ever
/// touched). Sessions are read whole and rarely, so a small cache costs little: it needs to
/// hold the tables' upper pages, not the sessions, and 16 MiB does (32 MiB bought nothing in
/// scenario 5 but memory): 20,000 sessions of 50 KB stay under 200 MB (docs/RELIABILITY.md).
pub const PAGE_CACHE_BYTES: usize = 16 * 1024 * 1024;

impl RedbStore {
    /// Opens (or creates) the store at `path`. A file another process holds open is refused
    /// with [`StoreError::Locked`] at once, never waited on.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            files::create_dir(parent)
                .map_err(|err| StoreError::Backend(format!("creating {}: {err}", parent.display())))?;
        }
        files::create_file(&path)
            .map_err(|err| StoreError::Backend(format!("creating {}: {err}", path.display())))?;
        files::warn_if_shared(&path);
        let db = match redb::Builder::new().set_cache_size(PAGE_CACHE_BYTES).create(&path) {
            Ok(db) => db,
            Err(DatabaseError::DatabaseAlreadyOpen) => return Err(StoreError::Locked(path)),
            Err(err) => return Err(StoreError::Backend(format!("opening {}: {err}", path.display()))),
        };
        create_tables_once(&db)?;
        let sealer = open_sealer(&db, &path)?;
        let log = wal::path_of(&path);
        let (wal, records) = wal::Wal::open(&log, write::log_salt(&db)?)
            .map_err(|err| StoreError::Backend(format!("opening {}: {err}", log.display())))?;
        let inner = Inner { db, sealer, commits: group::Queue::default(), wal };
        let next = write::replay(&inner, records, &log)?;
        inner.wal.restart(next);
        Ok(Self { inner: Arc::new(inner), path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many messages of a session were replaced by compaction and kept in `discarded`.
    #[cfg(test)]
    pub fn discarded_len(&self, id: &SessionId) -> Result<usize, StoreError> {
        let read = self.inner.db.begin_read().map_err(backend)?;
        let table = read.open_table(tables::DISCARDED).map_err(backend)?;
        let range = table.range((id.as_str(), 0u64, 0u64)..=(id.as_str(), u64::MAX, u64::MAX)).map_err(backend)?;
        Ok(range.count())
    }

    /// Writes many saves in one transaction (bulk import; benchmarks and tests that need
    /// thousands of sessions), as a group commit does. Blocking: call it off the async workers.
    pub fn save_batch(&self, saves: &[SaveRequest]) -> Result<(), StoreError> {
        write::save_all(&self.inner, &saves.iter().collect::<Vec<_>>())
    }

    /// Runs `work` on the blocking pool.
    fn blocking<T, F>(&self, work: F) -> BoxFuture<'_, Result<T, StoreError>>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = self.inner.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || work(&inner))
                .await
                .map_err(|err| StoreError::Backend(format!("store task failed: {err}")))?
        })
    }
}

impl SessionStore for RedbStore {
    fn post(
        &self,
        id: &SessionId,
        mail: StoredMail,
        evict: Option<MessageId>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let id = id.clone();
        self.blocking(move |store| post(store, id.as_str(), &mail, evict.as_ref()))
    }

    fn inbox(&self, id: &SessionId) -> BoxFuture<'_, Result<StoredInbox, StoreError>> {
        let id = id.clone();
        self.blocking(move |store| inbox(store, id.as_str()))
    }

    fn peers(&self, group: &str) -> BoxFuture<'_, Result<Vec<StoredPeer>, StoreError>> {
        let group = group.to_owned();
        self.blocking(move |store| peers(store, &group))
    }

    fn children(&self, parent: &SessionId) -> BoxFuture<'_, Result<Vec<StoredChild>, StoreError>> {
        let parent = parent.clone();
        self.blocking(move |store| children(store, parent.as_str()))
    }

    fn open_delegated(&self, owner: &str) -> BoxFuture<'_, Result<OpenDelegated, StoreError>> {
        let owner = owner.to_owned();
        self.blocking(move |store| open_delegated(store, &owner))
    }

    fn events(
        &self,
        id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Option<Vec<StoredEvent>>, StoreError>> {
        let id = id.clone();
        self.blocking(move |store| events(store, id.as_str(), after, limit))
    }

    fn journal_commits(&self, from: u64, limit: usize) -> BoxFuture<'_, Result<Vec<JournalCommit>, StoreError>> {
        self.blocking(move |store| read::journal_commits(store, from, limit))
    }

    fn journal_end(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.blocking(read::journal_end)
    }

    fn cursor(&self, name: &str) -> BoxFuture<'_, Result<Option<u64>, StoreError>> {
        let name = name.to_owned();
        self.blocking(move |store| read::cursor(store, &name))
    }

    fn set_cursor(&self, name: &str, position: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        let name = name.to_owned();
        self.blocking(move |store| write::set_cursor(store, &name, position))
    }

    fn remember(&self, memory: MemoryRecord) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.blocking(move |store| memories::remember(store, &memory))
    }

    fn forget(&self, id: u64, owner: &str) -> BoxFuture<'_, Result<bool, StoreError>> {
        let owner = owner.to_owned();
        self.blocking(move |store| memories::forget(store, id, &owner))
    }

    fn memories(&self, after: u64, limit: usize) -> BoxFuture<'_, Result<Vec<MemoryRecord>, StoreError>> {
        self.blocking(move |store| memories::memories(store, after, limit))
    }

    fn memory_marks(&self) -> BoxFuture<'_, Result<MemoryMarks, StoreError>> {
        self.blocking(memories::marks)
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.blocking(|store| store.db.begin_read().map(drop).map_err(backend))
    }

    /// Committed with the saves that arrive while another commits ([`group`]).
    fn save(&self, request: SaveRequest) -> BoxFuture<'_, Result<(), StoreError>> {
        let (lead, outcome) = self.inner.commits.push(request);
        if lead {
            let inner = self.inner.clone();
            tokio::task::spawn_blocking(move || group::lead(inner));
        }
        Box::pin(async move {
            outcome.await.map_err(|_| StoreError::Backend("the save's commit did not finish".to_owned()))?
        })
    }

    fn record(&self, id: &SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, StoreError>> {
        let id = id.clone();
        self.blocking(move |store| record(store, id.as_str()))
    }

    fn history(&self, id: &SessionId) -> BoxFuture<'_, Result<Vec<Message>, StoreError>> {
        let id = id.clone();
        self.blocking(move |store| history(store, id.as_str()))
    }

    fn list(&self, query: StoredListQuery) -> BoxFuture<'_, Result<StoredPage, StoreError>> {
        self.blocking(move |store| list(store, query))
    }

    fn tool_output(&self, id: &SessionId, tool_use_id: &str) -> BoxFuture<'_, Result<Option<String>, StoreError>> {
        let (id, tool_use_id) = (id.clone(), tool_use_id.to_owned());
        self.blocking(move |store| tool_output(store, id.as_str(), &tool_use_id))
    }

    fn archive(&self, id: &SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, StoreError>> {
        let id = id.clone();
        self.blocking(move |store| archive(store, id.as_str()))
    }
}

#[cfg(test)]
mod tests;
