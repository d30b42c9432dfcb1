//! [`RedbStore`]: the session store in one redb file.
//!
//! redb is synchronous, so every operation runs on tokio's blocking pool and never stalls the
//! async workers. redb's MVCC lets readers (`read`, `list`) run while a save commits.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;
use futures::future::BoxFuture;
use redb::{Database, DatabaseError, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableError};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::codec::{decode, decode_sealed, encode_sealed};
use super::sealer::{CHECK_PLAINTEXT, KeySealer, key_path};
use super::tables::{
    ACTIVE_INDEX, ARCHIVED_INDEX, CHILDREN, DELEGATED, DISCARDED, EVENTS, INBOX, MESSAGES, META,
    OWNER_ACTIVE_INDEX, OWNER_ARCHIVED_INDEX, PEERS, RECORDS, TOOL_OUTPUTS, index_key,
};
use super::{
    SaveRequest, SessionStore, StoreError, StoredChild, StoredInbox, StoredListQuery, StoredMail, StoredPage,
    StoredPeer,
};
use crate::ids::{MessageId, SessionId};
use crate::llm::Message;
use crate::model::SessionRecord;
use crate::model::{ListPosition, SessionSummary, StoredEvent};
use crate::secrets::SecretSealer;

#[derive(Debug, Clone)]
pub struct RedbStore {
    inner: Arc<Inner>,
    path: PathBuf,
}

/// The open database and the sealer of its secrets: what every operation works with.
struct Inner {
    db: Database,
    sealer: Arc<dyn SecretSealer>,
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
/// touched). Sessions are read whole and rarely, so a small cache costs little: 20,000
/// sessions of 50 KB stay under 200 MB (docs/RELIABILITY.md, scenario 5).
pub const PAGE_CACHE_BYTES: usize = 32 * 1024 * 1024;

impl RedbStore {
    /// Opens (or creates) the store at `path`. A file another process holds open is refused
    /// with [`StoreError::Locked`] at once, never waited on.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            private::create_dir(parent)
                .map_err(|err| StoreError::Backend(format!("creating {}: {err}", parent.display())))?;
        }
        private::create_file(&path)
            .map_err(|err| StoreError::Backend(format!("creating {}: {err}", path.display())))?;
        private::warn_if_shared(&path);
        let db = match redb::Builder::new().set_cache_size(PAGE_CACHE_BYTES).create(&path) {
            Ok(db) => db,
            Err(DatabaseError::DatabaseAlreadyOpen) => return Err(StoreError::Locked(path)),
            Err(err) => return Err(StoreError::Backend(format!("opening {}: {err}", path.display()))),
        };
        create_tables_once(&db)?;
        let sealer = open_sealer(&db, &path)?;
        Ok(Self { inner: Arc::new(Inner { db, sealer }), path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many messages of a session were replaced by compaction and kept in `discarded`.
    #[cfg(test)]
    pub fn discarded_len(&self, id: &SessionId) -> Result<usize, StoreError> {
        let read = self.inner.db.begin_read().map_err(backend)?;
        let table = read.open_table(DISCARDED).map_err(backend)?;
        let range = table.range((id.as_str(), 0u64, 0u64)..=(id.as_str(), u64::MAX, u64::MAX)).map_err(backend)?;
        Ok(range.count())
    }

    /// Writes many saves in one transaction (bulk import; benchmarks and tests that need
    /// thousands of sessions). Blocking: call it off the async workers.
    pub fn save_batch(&self, saves: &[SaveRequest]) -> Result<(), StoreError> {
        let write = self.inner.db.begin_write().map_err(backend)?;
        for save in saves {
            save_in(&self.inner, &write, save)?;
        }
        write.commit().map_err(backend)
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

/// Creates missing tables (a new file, or one written by an older deputy), so readers never
/// meet a missing table.
fn create_tables_once(db: &Database) -> Result<(), StoreError> {
    let read = db.begin_read().map_err(backend)?;
    let exists = |result: Result<(), TableError>| match result {
        Ok(()) => Ok(true),
        Err(TableError::TableDoesNotExist(_)) => Ok(false),
        Err(err) => Err(backend(err)),
    };
    let all_exist = exists(read.open_table(RECORDS).map(drop))?
        && exists(read.open_table(MESSAGES).map(drop))?
        && exists(read.open_table(ACTIVE_INDEX).map(drop))?
        && exists(read.open_table(ARCHIVED_INDEX).map(drop))?
        && exists(read.open_table(TOOL_OUTPUTS).map(drop))?
        && exists(read.open_table(DISCARDED).map(drop))?
        && exists(read.open_table(META).map(drop))?
        && exists(read.open_table(INBOX).map(drop))?
        && exists(read.open_table(PEERS).map(drop))?
        && exists(read.open_table(EVENTS).map(drop))?
        && exists(read.open_table(CHILDREN).map(drop))?
        && exists(read.open_table(DELEGATED).map(drop))?;
    let owner_indexes_exist = exists(read.open_table(OWNER_ACTIVE_INDEX).map(drop))?
        && exists(read.open_table(OWNER_ARCHIVED_INDEX).map(drop))?;
    drop(read);
    if all_exist && owner_indexes_exist {
        return Ok(());
    }
    let write = db.begin_write().map_err(backend)?;
    write.open_table(RECORDS).map_err(backend)?;
    write.open_table(MESSAGES).map_err(backend)?;
    write.open_table(ACTIVE_INDEX).map_err(backend)?;
    write.open_table(ARCHIVED_INDEX).map_err(backend)?;
    write.open_table(TOOL_OUTPUTS).map_err(backend)?;
    write.open_table(DISCARDED).map_err(backend)?;
    write.open_table(META).map_err(backend)?;
    write.open_table(INBOX).map_err(backend)?;
    write.open_table(PEERS).map_err(backend)?;
    write.open_table(EVENTS).map_err(backend)?;
    write.open_table(CHILDREN).map_err(backend)?;
    write.open_table(DELEGATED).map_err(backend)?;
    if !owner_indexes_exist {
        // A store from before tenants: every summary of the update-ordered indexes, by owner.
        backfill_owner_index(&write, ACTIVE_INDEX, OWNER_ACTIVE_INDEX)?;
        backfill_owner_index(&write, ARCHIVED_INDEX, OWNER_ARCHIVED_INDEX)?;
    }
    write.commit().map_err(backend)
}

fn backfill_owner_index(
    write: &redb::WriteTransaction,
    from: redb::TableDefinition<(u64, &str), &[u8]>,
    to: redb::TableDefinition<(&str, u64, &str), &[u8]>,
) -> Result<(), StoreError> {
    let from = write.open_table(from).map_err(backend)?;
    let mut to = write.open_table(to).map_err(backend)?;
    for entry in from.iter().map_err(backend)? {
        let (key, value) = entry.map_err(backend)?;
        let (updated, id) = key.value();
        let summary: SessionSummary = decode(value.value())?;
        to.insert((summary.owner.as_str(), updated, id), value.value()).map_err(backend)?;
    }
    Ok(())
}

/// The list indexes of a write transaction, kept in step: by update (every session) and by
/// owner then update (one tenant's sessions), each split into active and archived.
struct Indexes<'txn> {
    active: redb::Table<'txn, (u64, &'static str), &'static [u8]>,
    archived: redb::Table<'txn, (u64, &'static str), &'static [u8]>,
    owner_active: redb::Table<'txn, (&'static str, u64, &'static str), &'static [u8]>,
    owner_archived: redb::Table<'txn, (&'static str, u64, &'static str), &'static [u8]>,
}

impl<'txn> Indexes<'txn> {
    fn open(write: &'txn redb::WriteTransaction) -> Result<Self, StoreError> {
        Ok(Self {
            active: write.open_table(ACTIVE_INDEX).map_err(backend)?,
            archived: write.open_table(ARCHIVED_INDEX).map_err(backend)?,
            owner_active: write.open_table(OWNER_ACTIVE_INDEX).map_err(backend)?,
            owner_archived: write.open_table(OWNER_ARCHIVED_INDEX).map_err(backend)?,
        })
    }

    /// Removes the entries of `record` as it was stored.
    fn remove(&mut self, record: &SessionRecord) -> Result<(), StoreError> {
        let (updated, id, owner) =
            (index_key(record.updated_at), record.session_id.as_str(), record.owner.as_str());
        let (by_update, by_owner) = self.pick(record.archived);
        by_update.remove((updated, id)).map_err(backend)?;
        by_owner.remove((owner, updated, id)).map_err(backend)?;
        Ok(())
    }

    /// Inserts the entries of `record` with its summary.
    fn insert(&mut self, store: &Inner, record: &SessionRecord) -> Result<(), StoreError> {
        let (updated, id, owner) =
            (index_key(record.updated_at), record.session_id.as_str(), record.owner.as_str());
        let summary = store.encode(&record.summary(record.resting_status()))?;
        let (by_update, by_owner) = self.pick(record.archived);
        by_update.insert((updated, id), summary.as_slice()).map_err(backend)?;
        by_owner.insert((owner, updated, id), summary.as_slice()).map_err(backend)?;
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    fn pick(
        &mut self,
        archived: bool,
    ) -> (
        &mut redb::Table<'txn, (u64, &'static str), &'static [u8]>,
        &mut redb::Table<'txn, (&'static str, u64, &'static str), &'static [u8]>,
    ) {
        if archived {
            (&mut self.archived, &mut self.owner_archived)
        } else {
            (&mut self.active, &mut self.owner_active)
        }
    }
}

/// The sealer of the store at `path`, from its key file; see `sealer` for the rules. Runs
/// after the database is open, so this process holds the store's lock: two deputies cannot
/// both create a key for it.
fn open_sealer(db: &Database, path: &Path) -> Result<Arc<dyn SecretSealer>, StoreError> {
    let key_file = key_path(path);
    let check: Option<String> = {
        let read = db.begin_read().map_err(backend)?;
        let meta = read.open_table(META).map_err(backend)?;
        let value = meta.get("key_check").map_err(backend)?;
        value.map(|bytes| String::from_utf8_lossy(bytes.value()).into_owned())
    };
    let sealer = match (KeySealer::load(&key_file)?, &check) {
        (Some(sealer), _) => sealer,
        (None, None) => KeySealer::create(&key_file)?,
        (None, Some(_)) => {
            return Err(StoreError::Key {
                path: key_file,
                message:
                    "it is missing, and this store holds values sealed with it; restore the key file (or move \
                          the store aside to start afresh)"
                        .into(),
            });
        }
    };
    match check {
        Some(check) => {
            if sealer.open(&check).ok().as_deref() != Some(CHECK_PLAINTEXT) {
                return Err(StoreError::Key {
                    path: key_file,
                    message: "it is not the key this store was sealed with; restore the store's own key file"
                        .into(),
                });
            }
        }
        None => {
            let check = sealer.seal(CHECK_PLAINTEXT).map_err(StoreError::Backend)?;
            let write = db.begin_write().map_err(backend)?;
            write.open_table(META).map_err(backend)?.insert("key_check", check.as_bytes()).map_err(backend)?;
            write.commit().map_err(backend)?;
        }
    }
    Ok(Arc::new(sealer))
}

/// Writes one save inside an open write transaction.
fn save_in(store: &Inner, write: &redb::WriteTransaction, save: &SaveRequest) -> Result<(), StoreError> {
    let SaveRequest { record, replace_from, messages, tool_outputs, delivered, events } = save;
    let replace_from = *replace_from;
    let id = record.session_id.as_str();
    {
        let mut records = write.open_table(RECORDS).map_err(backend)?;
        let previous: Option<SessionRecord> = match records.get(id).map_err(backend)? {
            Some(bytes) => Some(store.decode(bytes.value())?),
            None => None,
        };

        // Archiving is final: a save that raced an archive must not bring the session back.
        if previous.as_ref().is_some_and(|previous| previous.archived) && !record.archived {
            return Err(StoreError::Archived(id.to_owned()));
        }

        let mut stored_len = previous.as_ref().map_or(0, |previous| previous.message_count);
        let mut history = write.open_table(MESSAGES).map_err(backend)?;
        // A compacted history: the old epoch moves to `discarded`, the new one is written whole.
        if let Some(previous) = previous.as_ref().filter(|previous| previous.history_epoch != record.history_epoch)
        {
            if replace_from != 0 {
                return Err(StoreError::Corrupt(format!(
                    "session {id}: a new history epoch must be saved whole, not from message {replace_from}"
                )));
            }
            let mut discarded = write.open_table(DISCARDED).map_err(backend)?;
            for seq in 0..previous.message_count {
                if let Some(bytes) = history.remove((id, seq)).map_err(backend)? {
                    discarded.insert((id, previous.history_epoch, seq), bytes.value()).map_err(backend)?;
                }
            }
            stored_len = 0;
        }
        if replace_from > stored_len {
            return Err(StoreError::Corrupt(format!(
                "session {id}: a save from message {replace_from} would leave a gap after message {stored_len}"
            )));
        }
        for seq in replace_from..stored_len {
            history.remove((id, seq)).map_err(backend)?;
        }
        for (seq, message) in (replace_from..).zip(messages) {
            history.insert((id, seq), store.encode(message)?.as_slice()).map_err(backend)?;
        }
        if !tool_outputs.is_empty() {
            let mut outputs = write.open_table(TOOL_OUTPUTS).map_err(backend)?;
            for (tool_use_id, content) in tool_outputs {
                outputs.insert((id, tool_use_id.as_str()), content.as_bytes()).map_err(backend)?;
            }
        }

        if !delivered.is_empty() {
            let mut inbox = write.open_table(INBOX).map_err(backend)?;
            for message_id in delivered {
                inbox.remove((id, message_id.as_str())).map_err(backend)?;
            }
        }
        if previous.is_none()
            && let Some(name) = &record.name
        {
            let group = record.peer_key();
            write
                .open_table(PEERS)
                .map_err(backend)?
                .insert((group.as_str(), id), name.as_str())
                .map_err(backend)?;
        }
        if previous.is_none()
            && let Some(parent) = &record.lineage.parent_id
        {
            write.open_table(CHILDREN).map_err(backend)?.insert((parent.as_str(), id), ()).map_err(backend)?;
            write.open_table(DELEGATED).map_err(backend)?.insert(id, parent.as_str()).map_err(backend)?;
        }
        if !events.is_empty() {
            let stored_seq = previous.as_ref().map_or(0, |previous| previous.event_seq);
            let mut journal = write.open_table(EVENTS).map_err(backend)?;
            for (expected, event) in (stored_seq..).zip(events) {
                if event.seq != expected {
                    return Err(StoreError::Corrupt(format!(
                        "session {id}: journal event {} saved where event {expected} comes next",
                        event.seq
                    )));
                }
                journal.insert((id, event.seq), store.encode(event)?.as_slice()).map_err(backend)?;
            }
        }

        let mut indexes = Indexes::open(write)?;
        if let Some(previous) = &previous {
            indexes.remove(previous)?;
        }
        indexes.insert(store, record)?;
        records.insert(id, store.encode(record)?.as_slice()).map_err(backend)?;
    }
    Ok(())
}

fn save(store: &Inner, save: SaveRequest) -> Result<(), StoreError> {
    let write = store.db.begin_write().map_err(backend)?;
    save_in(store, &write, &save)?;
    write.commit().map_err(backend)
}

fn record(store: &Inner, id: &str) -> Result<Option<SessionRecord>, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let records = read.open_table(RECORDS).map_err(backend)?;
    let bytes = records.get(id).map_err(backend)?;
    bytes.map(|bytes| store.decode(bytes.value())).transpose()
}

fn history(store: &Inner, id: &str) -> Result<Vec<Message>, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let table = read.open_table(MESSAGES).map_err(backend)?;
    let mut messages = Vec::new();
    for entry in table.range((id, 0u64)..=(id, u64::MAX)).map_err(backend)? {
        let (_, bytes) = entry.map_err(backend)?;
        messages.push(store.decode(bytes.value())?);
    }
    Ok(messages)
}

/// Up to `n` index entries, newest first: `(updated ms, id, encoded summary)`.
/// The `n` newest entries of an index, or the `n` newest after `after`: a range read, so a page
/// deep in the list costs what the first page costs.
fn newest(
    table: &redb::ReadOnlyTable<(u64, &'static str), &'static [u8]>,
    n: usize,
    after: Option<&ListPosition>,
) -> Result<Vec<(u64, String, Vec<u8>)>, StoreError> {
    let mut out = Vec::with_capacity(n.min(1024));
    let entries = match after {
        Some(after) => table.range(..(after.updated_ms, after.session_id.as_str())).map_err(backend)?,
        None => table.iter().map_err(backend)?,
    };
    for entry in entries.rev().take(n) {
        let (key, value) = entry.map_err(backend)?;
        let (updated, id) = key.value();
        out.push((updated, id.to_owned(), value.value().to_vec()));
    }
    Ok(out)
}

/// An owner index entry: `(updated ms, id, encoded summary)`.
type OwnedEntry = (u64, String, Vec<u8>);

/// One owner's entries of an owner index, newest first: the first `n` after `after` that are
/// not `excluded` (a range read, like [`newest`]), and how many it holds in all, not counting
/// `excluded` (a walk of the owner's keys only).
fn owned(
    table: &redb::ReadOnlyTable<(&'static str, u64, &'static str), &'static [u8]>,
    owner: &str,
    n: usize,
    after: Option<&ListPosition>,
    excluded: &HashSet<&str>,
) -> Result<(Vec<OwnedEntry>, u64), StoreError> {
    let all = (owner, 0u64, "")..=(owner, u64::MAX, "\u{10FFFF}");
    let mut total = 0;
    for entry in table.range(all.clone()).map_err(backend)? {
        let (key, _) = entry.map_err(backend)?;
        if !excluded.contains(key.value().2) {
            total += 1;
        }
    }
    let page = match after {
        Some(after) => table.range((owner, 0u64, "")..(owner, after.updated_ms, after.session_id.as_str())),
        None => table.range(all),
    }
    .map_err(backend)?;
    let mut out = Vec::with_capacity(n.min(1024));
    for entry in page.rev() {
        if out.len() == n {
            break;
        }
        let (key, value) = entry.map_err(backend)?;
        let (_, updated, id) = key.value();
        if !excluded.contains(id) {
            out.push((updated, id.to_owned(), value.value().to_vec()));
        }
    }
    Ok((out, total))
}

/// `list` for one owner ([`owned`]).
fn list_owned(store: &Inner, query: &StoredListQuery, owner: &str) -> Result<StoredPage, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let excluded: HashSet<&str> = query.exclude.iter().map(SessionId::as_str).collect();
    let active = read.open_table(OWNER_ACTIVE_INDEX).map_err(backend)?;
    let (mut candidates, mut total) = owned(&active, owner, query.first, query.after.as_ref(), &excluded)?;
    if query.include_archived {
        let archived = read.open_table(OWNER_ARCHIVED_INDEX).map_err(backend)?;
        let (more, more_total) = owned(&archived, owner, query.first, query.after.as_ref(), &excluded)?;
        candidates.extend(more);
        total += more_total;
        candidates.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
    }
    let summaries = candidates
        .into_iter()
        .take(query.first)
        .map(|(_, _, bytes)| store.decode::<SessionSummary>(&bytes))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StoredPage { summaries, total: usize::try_from(total).unwrap_or(usize::MAX) })
}

fn list(store: &Inner, query: StoredListQuery) -> Result<StoredPage, StoreError> {
    if let Some(owner) = &query.owner {
        return list_owned(store, &query, owner);
    }
    let read = store.db.begin_read().map_err(backend)?;
    let active = read.open_table(ACTIVE_INDEX).map_err(backend)?;
    let records = read.open_table(RECORDS).map_err(backend)?;

    // Excluded sessions that the query would otherwise count.
    let excluded: HashSet<&str> = query.exclude.iter().map(SessionId::as_str).collect();
    let mut excluded_here = 0;
    for id in &excluded {
        if let Some(bytes) = records.get(*id).map_err(backend)? {
            let record: SessionRecord = store.decode(bytes.value())?;
            if query.include_archived || !record.archived {
                excluded_here += 1;
            }
        }
    }

    // Each index holds at most `first + |exclude|` candidates for the page.
    let wanted = query.first.saturating_add(excluded.len());
    let mut candidates = newest(&active, wanted, query.after.as_ref())?;
    let mut total = active.len().map_err(backend)?;
    if query.include_archived {
        let archived = read.open_table(ARCHIVED_INDEX).map_err(backend)?;
        candidates.extend(newest(&archived, wanted, query.after.as_ref())?);
        total += archived.len().map_err(backend)?;
        // Newest first, then by id descending: the order of a reversed index walk.
        candidates.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
    }
    let summaries = candidates
        .into_iter()
        .filter(|(_, id, _)| !excluded.contains(id.as_str()))
        .take(query.first)
        .map(|(_, _, bytes)| store.decode::<SessionSummary>(&bytes))
        .collect::<Result<Vec<_>, _>>()?;
    let total = usize::try_from(total).unwrap_or(usize::MAX).saturating_sub(excluded_here);
    Ok(StoredPage { summaries, total })
}

fn events(
    store: &Inner,
    id: &str,
    after: Option<u64>,
    limit: usize,
) -> Result<Option<Vec<StoredEvent>>, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    if read.open_table(RECORDS).map_err(backend)?.get(id).map_err(backend)?.is_none() {
        return Ok(None);
    }
    let table = read.open_table(EVENTS).map_err(backend)?;
    let from = match after {
        None => 0,
        Some(u64::MAX) => return Ok(Some(Vec::new())),
        Some(after) => after + 1,
    };
    let mut out = Vec::with_capacity(limit.min(512));
    for entry in table.range((id, from)..=(id, u64::MAX)).map_err(backend)?.take(limit) {
        let (_, bytes) = entry.map_err(backend)?;
        out.push(store.decode(bytes.value())?);
    }
    Ok(Some(out))
}

fn tool_output(store: &Inner, id: &str, tool_use_id: &str) -> Result<Option<String>, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let outputs = read.open_table(TOOL_OUTPUTS).map_err(backend)?;
    let bytes = outputs.get((id, tool_use_id)).map_err(backend)?;
    bytes
        .map(|bytes| String::from_utf8(bytes.value().to_vec()).map_err(|err| StoreError::Corrupt(err.to_string())))
        .transpose()
}

/// Read-modify-write in one write transaction: redb serialises writers, so a save committing
/// at the same time lands either wholly before (its counters and index entry are archived with
/// it) or after (and [`save_in`] refuses to make the record active again).
fn archive(store: &Inner, id: &str) -> Result<Option<SessionRecord>, StoreError> {
    let write = store.db.begin_write().map_err(backend)?;
    let archived = {
        let mut records = write.open_table(RECORDS).map_err(backend)?;
        let stored: Option<SessionRecord> = match records.get(id).map_err(backend)? {
            Some(bytes) => Some(store.decode(bytes.value())?),
            None => None,
        };
        let Some(mut stored) = stored else { return Ok(None) };
        if stored.archived {
            return Ok(Some(stored));
        }
        let mut indexes = Indexes::open(&write)?;
        indexes.remove(&stored)?;
        stored.archived = true;
        stored.updated_at = Utc::now();
        // The journal's last word, in the archive's own transaction.
        let archived = StoredEvent {
            seq: stored.event_seq,
            turn: stored.turns,
            at: stored.updated_at,
            event: serde_json::json!({ "type": ARCHIVED_EVENT }),
        };
        write
            .open_table(EVENTS)
            .map_err(backend)?
            .insert((id, archived.seq), store.encode(&archived)?.as_slice())
            .map_err(backend)?;
        stored.event_seq += 1;
        indexes.insert(store, &stored)?;
        records.insert(id, store.encode(&stored)?.as_slice()).map_err(backend)?;
        if stored.name.is_some() {
            let group = stored.peer_key();
            write.open_table(PEERS).map_err(backend)?.remove((group.as_str(), id)).map_err(backend)?;
        }
        if stored.lineage.parent_id.is_some() {
            write.open_table(DELEGATED).map_err(backend)?.remove(id).map_err(backend)?;
        }
        stored
    };
    write.commit().map_err(backend)?;
    Ok(Some(archived))
}

fn post(store: &Inner, id: &str, mail: &StoredMail, evict: Option<&MessageId>) -> Result<(), StoreError> {
    let write = store.db.begin_write().map_err(backend)?;
    {
        let mut inbox = write.open_table(INBOX).map_err(backend)?;
        inbox.insert((id, mail.message.id.as_str()), store.encode(mail)?.as_slice()).map_err(backend)?;
        if let Some(evict) = evict {
            inbox.remove((id, evict.as_str())).map_err(backend)?;
        }
    }
    write.commit().map_err(backend)
}

fn inbox(store: &Inner, id: &str) -> Result<StoredInbox, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let table = read.open_table(INBOX).map_err(backend)?;
    let mut mail: Vec<StoredMail> = Vec::new();
    for entry in table.range((id, "")..).map_err(backend)? {
        let (key, value) = entry.map_err(backend)?;
        if key.value().0 != id {
            break;
        }
        mail.push(store.decode(value.value())?);
    }
    // Keys order by id; the inbox is in arrival order.
    mail.sort_by(|a, b| (a.message.at, &a.message.id).cmp(&(b.message.at, &b.message.id)));
    let (parked, waiting): (Vec<StoredMail>, Vec<StoredMail>) = mail.into_iter().partition(|mail| mail.parked);
    Ok(StoredInbox {
        waiting: waiting.into_iter().map(|mail| mail.message).collect(),
        parked: parked.into_iter().map(|mail| mail.message).collect(),
    })
}

fn peers(store: &Inner, group: &str) -> Result<Vec<StoredPeer>, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let table = read.open_table(PEERS).map_err(backend)?;
    let mut peers = Vec::new();
    for entry in table.range((group, "")..).map_err(backend)? {
        let (key, name) = entry.map_err(backend)?;
        let (entry_group, session_id) = key.value();
        if entry_group != group {
            break;
        }
        peers.push(StoredPeer { session_id: SessionId::from_string(session_id), name: name.value().to_owned() });
    }
    Ok(peers)
}

/// Every child of `parent`, and whether it is still open (not archived).
fn children(store: &Inner, parent: &str) -> Result<Vec<StoredChild>, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let table = read.open_table(CHILDREN).map_err(backend)?;
    let open = read.open_table(DELEGATED).map_err(backend)?;
    let mut children = Vec::new();
    for entry in table.range((parent, "")..).map_err(backend)? {
        let (key, _) = entry.map_err(backend)?;
        let (entry_parent, child) = key.value();
        if entry_parent != parent {
            break;
        }
        let is_open = open.get(child).map_err(backend)?.is_some();
        children.push(StoredChild { session_id: SessionId::from_string(child), open: is_open });
    }
    Ok(children)
}

fn open_delegated(store: &Inner) -> Result<usize, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let open = read.open_table(DELEGATED).map_err(backend)?;
    Ok(usize::try_from(open.len().map_err(backend)?).unwrap_or(usize::MAX))
}

/// The `type` of the journal event an archive appends (`AgentEvent::Archived`, named by
/// `AgentEvent::ARCHIVED_TYPE` in the layer above; a test there keeps the two equal).
pub const ARCHIVED_EVENT: &str = "archived";

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

    fn open_delegated(&self) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.blocking(open_delegated)
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

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.blocking(|store| store.db.begin_read().map(drop).map_err(backend))
    }

    fn save(&self, request: SaveRequest) -> BoxFuture<'_, Result<(), StoreError>> {
        self.blocking(move |store| save(store, request))
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

/// The store holds every conversation, the tool outputs the agent read and the settings of its
/// MCP servers, so only its owner may read it (security review F9): directories deputy creates
/// for it are 0700 and a new store file is 0600, whatever the umask. An existing file or
/// directory that others can read is left as the operator made it, with a warning.
mod private {
    use std::fs::{DirBuilder, OpenOptions};
    use std::io;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    use std::path::Path;

    /// Group and other permission bits.
    const SHARED_BITS: u32 = 0o077;

    pub fn create_dir(dir: &Path) -> io::Result<()> {
        DirBuilder::new().recursive(true).mode(0o700).create(dir)
    }

    /// Creates the file 0600 if it does not exist yet; redb then opens it as it is.
    pub fn create_file(path: &Path) -> io::Result<()> {
        match OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
            Ok(_) => Ok(()),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// The file is what holds the secrets: a directory others may list but whose store file is
    /// 0600 reveals nothing, so only the file's mode is checked.
    pub fn warn_if_shared(path: &Path) {
        if let Ok(metadata) = std::fs::metadata(path)
            && is_shared(metadata.mode())
        {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{:o}", metadata.mode() & 0o777),
                "the session store file is readable by other users; chmod go-rwx it"
            );
        }
    }

    pub fn is_shared(mode: u32) -> bool {
        mode & SHARED_BITS != 0
    }
}

#[cfg(test)]
#[path = "redb_store_tests.rs"]
mod tests;
