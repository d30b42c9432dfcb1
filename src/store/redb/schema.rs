//! The file's layout at open: its tables created once, older stores brought up to date
//! (the owner index back-filled), the summary indexes kept in step with records, and the
//! sealing key checked against the file.

use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableError};

use super::Inner;
use super::backend;
use super::tables::{
    ACTIVE_INDEX, ARCHIVED_INDEX, CHILDREN, DELEGATED, DISCARDED, EVENTS, INBOX, JOURNAL_ORDER, MEMORIES, MESSAGES,
    META, OWNER_ACTIVE_INDEX, OWNER_ARCHIVED_INDEX, PEERS, RECORDS, TOOL_OUTPUTS, index_key,
};
use crate::model::SessionRecord;
use crate::model::SessionSummary;
use crate::secrets::SecretSealer;
use crate::store::StoreError;
use crate::store::codec::decode;
use crate::store::rules::StoredHead;
use crate::store::sealer::{bind, key_path};

/// Creates missing tables (a new file, or one written by an older deputy), so readers never
/// meet a missing table.
pub(super) fn create_tables_once(db: &Database) -> Result<(), StoreError> {
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
        && exists(read.open_table(DELEGATED).map(drop))?
        && exists(read.open_table(MEMORIES).map(drop))?
        && exists(read.open_table(JOURNAL_ORDER).map(drop))?;
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
    write.open_table(MEMORIES).map_err(backend)?;
    write.open_table(JOURNAL_ORDER).map_err(backend)?;
    if !owner_indexes_exist {
        // A store from before tenants: every summary of the update-ordered indexes, by owner.
        backfill_owner_index(&write, ACTIVE_INDEX, OWNER_ACTIVE_INDEX)?;
        backfill_owner_index(&write, ARCHIVED_INDEX, OWNER_ARCHIVED_INDEX)?;
    }
    write.commit().map_err(backend)
}

pub(super) fn backfill_owner_index(
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
pub(super) struct Indexes<'txn> {
    active: redb::Table<'txn, (u64, &'static str), &'static [u8]>,
    archived: redb::Table<'txn, (u64, &'static str), &'static [u8]>,
    owner_active: redb::Table<'txn, (&'static str, u64, &'static str), &'static [u8]>,
    owner_archived: redb::Table<'txn, (&'static str, u64, &'static str), &'static [u8]>,
}

impl<'txn> Indexes<'txn> {
    pub(super) fn open(write: &'txn redb::WriteTransaction) -> Result<Self, StoreError> {
        Ok(Self {
            active: write.open_table(ACTIVE_INDEX).map_err(backend)?,
            archived: write.open_table(ARCHIVED_INDEX).map_err(backend)?,
            owner_active: write.open_table(OWNER_ACTIVE_INDEX).map_err(backend)?,
            owner_archived: write.open_table(OWNER_ARCHIVED_INDEX).map_err(backend)?,
        })
    }

    /// Removes the entries of a record as it was stored.
    pub(super) fn remove(&mut self, stored: &StoredHead) -> Result<(), StoreError> {
        let (updated, id, owner) =
            (index_key(stored.updated_at), stored.session_id.as_str(), stored.owner.as_str());
        let (by_update, by_owner) = self.pick(stored.archived);
        by_update.remove((updated, id)).map_err(backend)?;
        by_owner.remove((owner, updated, id)).map_err(backend)?;
        Ok(())
    }

    /// Inserts the entries of `record` with its summary.
    pub(super) fn insert(&mut self, store: &Inner, record: &SessionRecord) -> Result<(), StoreError> {
        let (updated, id, owner) =
            (index_key(record.updated_at), record.session_id.as_str(), record.owner.as_str());
        let summary = store.encode(&record.summary(record.resting_status()))?;
        let (by_update, by_owner) = self.pick(record.archived);
        by_update.insert((updated, id), summary.as_slice()).map_err(backend)?;
        by_owner.insert((owner, updated, id), summary.as_slice()).map_err(backend)?;
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    pub(super) fn pick(
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
pub(super) fn open_sealer(db: &Database, path: &Path) -> Result<Arc<dyn SecretSealer>, StoreError> {
    let check: Option<String> = {
        let read = db.begin_read().map_err(backend)?;
        let meta = read.open_table(META).map_err(backend)?;
        let value = meta.get("key_check").map_err(backend)?;
        value.map(|bytes| String::from_utf8_lossy(bytes.value()).into_owned())
    };
    let (sealer, new_check) = bind(&key_path(path), check.as_deref())?;
    if let Some(check) = new_check {
        let write = db.begin_write().map_err(backend)?;
        write.open_table(META).map_err(backend)?.insert("key_check", check.as_bytes()).map_err(backend)?;
        write.commit().map_err(backend)?;
    }
    Ok(Arc::new(sealer))
}
