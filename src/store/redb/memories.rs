//! Memories in the store: written by a save (a compaction's passages), by `remember` and
//! deleted by their owner; read in id order by the search index that follows them.

use redb::{ReadableDatabase, ReadableTable, WriteTransaction};

use super::meta::{meta_u64, set_meta_u64};
use super::tables::{MEMORIES, META};
use super::{Inner, backend};
use crate::model::memory::MemoryRecord;
use crate::store::{MemoryMarks, StoreError};

const NEXT_ID: &str = "memory_next";
const DELETES: &str = "memory_deletes";

fn counter(write: &WriteTransaction, name: &str) -> Result<u64, StoreError> {
    let meta = write.open_table(META).map_err(backend)?;
    Ok(meta_u64(&meta, name)?.unwrap_or(0))
}

/// Stores `records` with the next ids (their own `id` is ignored) inside an open write
/// transaction; returns the ids given.
pub(super) fn insert_in(
    store: &Inner,
    write: &WriteTransaction,
    records: &[MemoryRecord],
) -> Result<Vec<u64>, StoreError> {
    if records.is_empty() {
        return Ok(Vec::new());
    }
    // Ids start at 1, so `after: 0` reads from the first.
    let first = counter(write, NEXT_ID)?.max(1);
    let mut table = write.open_table(MEMORIES).map_err(backend)?;
    let mut ids = Vec::with_capacity(records.len());
    for (id, record) in (first..).zip(records) {
        let stored = MemoryRecord { id, ..record.clone() };
        table.insert(id, store.encode(&stored)?.as_slice()).map_err(backend)?;
        ids.push(id);
    }
    drop(table);
    set_meta_u64(write, NEXT_ID, first + records.len() as u64)?;
    Ok(ids)
}

pub(super) fn remember(store: &Inner, record: &MemoryRecord) -> Result<u64, StoreError> {
    let write = store.db.begin_write().map_err(backend)?;
    let ids = insert_in(store, &write, std::slice::from_ref(record))?;
    write.commit().map_err(backend)?;
    ids.first().copied().ok_or_else(|| StoreError::Corrupt("a remembered memory got no id".into()))
}

/// Deletes memory `id` if `owner` owns it.
pub(super) fn forget(store: &Inner, id: u64, owner: &str) -> Result<bool, StoreError> {
    let write = store.db.begin_write().map_err(backend)?;
    {
        let mut table = write.open_table(MEMORIES).map_err(backend)?;
        let stored: Option<MemoryRecord> = match table.get(id).map_err(backend)? {
            Some(bytes) => Some(store.decode(bytes.value())?),
            None => None,
        };
        if stored.is_none_or(|stored| stored.owner != owner) {
            return Ok(false);
        }
        table.remove(id).map_err(backend)?;
    }
    let deletes = counter(&write, DELETES)?;
    set_meta_u64(&write, DELETES, deletes + 1)?;
    write.commit().map_err(backend)?;
    Ok(true)
}

/// Up to `limit` memories with an id after `after`, in id order.
pub(super) fn memories(store: &Inner, after: u64, limit: usize) -> Result<Vec<MemoryRecord>, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let table = read.open_table(MEMORIES).map_err(backend)?;
    let mut found = Vec::new();
    for entry in table.range(after.saturating_add(1)..).map_err(backend)?.take(limit) {
        let (_, bytes) = entry.map_err(backend)?;
        found.push(store.decode(bytes.value())?);
    }
    Ok(found)
}

pub(super) fn marks(store: &Inner) -> Result<MemoryMarks, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let meta = read.open_table(META).map_err(backend)?;
    let next_id = meta_u64(&meta, NEXT_ID)?.unwrap_or(0);
    let deletes = meta_u64(&meta, DELETES)?.unwrap_or(0);
    Ok(MemoryMarks { last_id: next_id.saturating_sub(1), deletes })
}
