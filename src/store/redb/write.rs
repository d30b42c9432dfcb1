//! Writes, each one redb write transaction: a turn's save (the record, the new messages, a
//! compaction's discarded ones, tool outputs, journal events and the delivered mail), an
//! archive, and mail posted to an inbox. Saves are made durable through the write-ahead log
//! ([`super::wal`]); every other write commits durably in redb, which makes every save before
//! it durable too.

use redb::{Durability, ReadableDatabase, ReadableTable, Table};

use super::Inner;
use super::backend;
use super::encoded::{EncodedSave, LogRecord};
use super::meta::{meta_u64, set_meta_u64};
use super::schema::Indexes;
use super::tables::{
    CHILDREN, DELEGATED, DISCARDED, EVENTS, INBOX, JOURNAL_ORDER, MESSAGES, META, PEERS, RECORDS, TOOL_OUTPUTS,
};
use super::wal::{MAX_RECORD_BYTES, Record};
use crate::ids::MessageId;
use crate::model::SessionRecord;
use crate::store::rules::{DiscardedEpoch, SavePlan, StoredHead, close_archive};
use crate::store::{SaveRequest, StoreError, StoredMail, codec};

/// The tables every save writes, opened once for a group of saves: opening one looks it up in
/// the transaction's table of tables, and closing it writes its root back.
pub(super) struct SaveTables<'txn> {
    records: Table<'txn, &'static str, &'static [u8]>,
    messages: Table<'txn, (&'static str, u64), &'static [u8]>,
    events: Table<'txn, (&'static str, u64), &'static [u8]>,
    order: Table<'txn, u64, (&'static str, u64, u64)>,
    indexes: Indexes<'txn>,
}

impl<'txn> SaveTables<'txn> {
    pub(super) fn open(write: &'txn redb::WriteTransaction) -> Result<Self, StoreError> {
        Ok(Self {
            records: write.open_table(RECORDS).map_err(backend)?,
            messages: write.open_table(MESSAGES).map_err(backend)?,
            events: write.open_table(EVENTS).map_err(backend)?,
            order: write.open_table(JOURNAL_ORDER).map_err(backend)?,
            indexes: Indexes::open(write)?,
        })
    }
}

/// Writes one save inside an open write transaction, as [`SavePlan::check`] allows; `encoded`
/// holds its rows. The tables a save rarely writes are opened here, when it does.
pub(super) fn save_in(
    store: &Inner,
    write: &redb::WriteTransaction,
    tables: &mut SaveTables<'_>,
    save: &SaveRequest,
    encoded: &EncodedSave,
) -> Result<(), StoreError> {
    // One process owns a redb file: its actors' turn locks are the only lease, so no fence.
    let SaveRequest { record, replace_from, messages: _, tool_outputs, delivered, events, memories, fence: _ } =
        save;
    let id = record.session_id.as_str();
    let previous: Option<StoredHead> = match tables.records.get(id).map_err(backend)? {
        Some(bytes) => Some(codec::decode(bytes.value())?),
        None => None,
    };
    let plan = SavePlan::check(previous.as_ref(), save)?;

    let history = &mut tables.messages;
    if let Some(DiscardedEpoch { epoch, len }) = plan.discard {
        let mut discarded = write.open_table(DISCARDED).map_err(backend)?;
        for seq in 0..len {
            if let Some(bytes) = history.remove((id, seq)).map_err(backend)? {
                discarded.insert((id, epoch, seq), bytes.value()).map_err(backend)?;
            }
        }
    }
    for seq in plan.replaced.clone() {
        history.remove((id, seq)).map_err(backend)?;
    }
    for (seq, message) in (*replace_from..).zip(&encoded.messages) {
        history.insert((id, seq), message.as_slice()).map_err(backend)?;
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
    if let Some((group, name)) = &plan.joins_peers {
        write.open_table(PEERS).map_err(backend)?.insert((group.as_str(), id), name.as_str()).map_err(backend)?;
    }
    if let Some(parent) = &plan.child_of {
        write.open_table(CHILDREN).map_err(backend)?.insert((parent.as_str(), id), ()).map_err(backend)?;
        write.open_table(DELEGATED).map_err(backend)?.insert(id, parent.as_str()).map_err(backend)?;
    }
    if !events.is_empty() {
        for (event, bytes) in events.iter().zip(&encoded.events) {
            tables.events.insert((id, event.seq), bytes.as_slice()).map_err(backend)?;
        }
        order_in(&mut tables.order, id, plan.events_from, plan.events_from + events.len() as u64)?;
    }

    super::memories::insert_in(store, write, memories)?;

    if let Some(previous) = &previous {
        tables.indexes.remove(previous)?;
    }
    tables.indexes.insert(store, record)?;
    tables.records.insert(id, encoded.record.as_slice()).map_err(backend)?;
    Ok(())
}

/// Appends the journal events `first..end` of session `id` to the commit order.
fn order_in(
    order: &mut Table<'_, u64, (&'static str, u64, u64)>,
    id: &str,
    first: u64,
    end: u64,
) -> Result<(), StoreError> {
    let next = next_position(order)?;
    order.insert(next, (id, first, end)).map_err(backend)?;
    Ok(())
}

/// The position the next save's events take in the commit order.
pub(super) fn next_position(order: &impl ReadableTable<u64, (&'static str, u64, u64)>) -> Result<u64, StoreError> {
    Ok(order.last().map_err(backend)?.map_or(0, |(position, _)| position.value() + 1))
}

/// Sets reader `name`'s position in the commit order.
pub(super) fn set_cursor(store: &Inner, name: &str, position: u64) -> Result<(), StoreError> {
    let write = store.db.begin_write().map_err(backend)?;
    set_meta_u64(&write, &cursor_key(name), position)?;
    write.commit().map_err(backend)
}

/// The `META` key of reader `name`'s cursor.
pub(super) fn cursor_key(name: &str) -> String {
    format!("cursor:{name}")
}

/// The `META` key of the last group's sequence number that redb holds: every logged record
/// after it is what a crash took from redb.
const WAL_APPLIED: &str = "wal_applied";

/// The `META` key of the number that seeds the log's checksums: the log of another store (one
/// deleted and made again beside an old log) then reads as empty instead of being replayed
/// into this one.
const WAL_SALT: &str = "wal_salt";

/// This store's log salt, chosen when the store first opens with a log.
pub(super) fn log_salt(db: &redb::Database) -> Result<u64, StoreError> {
    let read = db.begin_read().map_err(backend)?;
    if let Some(salt) = meta_u64(&read.open_table(META).map_err(backend)?, WAL_SALT)? {
        return Ok(salt);
    }
    drop(read);
    let salt = uuid::Uuid::new_v4().as_u64_pair().0;
    let write = db.begin_write().map_err(backend)?;
    set_meta_u64(&write, WAL_SALT, salt)?;
    write.commit().map_err(backend)?;
    Ok(salt)
}

/// Commits `saves` in one transaction, durable when this returns: logged and committed without
/// a flush, or, at a checkpoint, committed durably by redb. Either way the group takes the
/// log's next sequence number and the transaction marks it applied.
pub(super) fn save_all(store: &Inner, saves: &[&SaveRequest]) -> Result<(), StoreError> {
    let mut write = store.db.begin_write().map_err(backend)?;
    let mut log = LogRecord::within((!store.wal.wants_checkpoint()).then_some(MAX_RECORD_BYTES));
    let mut tables = SaveTables::open(&write)?;
    for save in saves {
        let encoded = EncodedSave::new(store, save)?;
        save_in(store, &write, &mut tables, save, &encoded)?;
        log.push(encoded);
    }
    drop(tables);
    let sequence = store.wal.next_sequence();
    set_meta_u64(&write, WAL_APPLIED, sequence)?;
    let Some(payload) = log.finish() else {
        write.commit().map_err(backend)?;
        store.wal.restart(sequence + 1);
        return Ok(());
    };
    write.set_durability(Durability::None).map_err(backend)?;
    let appended = store.wal.append(sequence, &payload).map_err(log_error)?;
    write.commit().map_err(backend)?;
    appended.keep();
    Ok(())
}

pub(super) fn save(store: &Inner, save: &SaveRequest) -> Result<(), StoreError> {
    save_all(store, &[save])
}

fn log_error(error: std::io::Error) -> StoreError {
    StoreError::Backend(format!("writing the write-ahead log: {error}"))
}

/// Commits again, durably and in one transaction, the logged groups after the store's
/// `wal_applied`: what a crash took from redb. The log's next sequence number.
///
/// Those records are every group committed since redb's last durable commit, in order, so
/// each applies to what the one before left. A log that skips a number after `wal_applied`,
/// or a save that no longer applies, refuses the open rather than dropping saves that were
/// answered.
pub(super) fn replay(store: &Inner, records: Vec<Record>, log: &std::path::Path) -> Result<u64, StoreError> {
    let applied = {
        let read = store.db.begin_read().map_err(backend)?;
        meta_u64(&read.open_table(META).map_err(backend)?, WAL_APPLIED)?.unwrap_or(0)
    };
    let pending: Vec<Record> = records.into_iter().filter(|record| record.sequence > applied).collect();
    let (Some(first), Some(last)) = (pending.first(), pending.last()) else { return Ok(applied + 1) };
    if first.sequence != applied + 1 {
        return Err(StoreError::Corrupt(format!(
            "{} does not continue the store: its records start at {}, the store holds up to {applied}",
            log.display(),
            first.sequence
        )));
    }
    let last = last.sequence;
    let write = store.db.begin_write().map_err(backend)?;
    let mut tables = SaveTables::open(&write)?;
    for record in &pending {
        let saves: Vec<SaveRequest> = store.decode(&record.payload)?;
        for save in &saves {
            let encoded = EncodedSave::new(store, save)?;
            save_in(store, &write, &mut tables, save, &encoded).map_err(|error| {
                StoreError::Corrupt(format!("replaying {} record {}: {error}", log.display(), record.sequence))
            })?;
        }
    }
    drop(tables);
    set_meta_u64(&write, WAL_APPLIED, last)?;
    write.commit().map_err(backend)?;
    tracing::info!(records = pending.len(), "committed again the saves a crash took from the store");
    Ok(last + 1)
}

/// Read-modify-write in one write transaction: redb serialises writers, so a save committing
/// at the same time lands either wholly before (its counters and index entry are archived with
/// it) or after (and [`save_in`] refuses to make the record active again).
pub(super) fn archive(store: &Inner, id: &str) -> Result<Option<SessionRecord>, StoreError> {
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
        indexes.remove(&StoredHead::from(&stored))?;
        let closing = close_archive(&mut stored);
        write
            .open_table(EVENTS)
            .map_err(backend)?
            .insert((id, closing.seq), store.encode(&closing)?.as_slice())
            .map_err(backend)?;
        order_in(&mut write.open_table(JOURNAL_ORDER).map_err(backend)?, id, closing.seq, stored.event_seq)?;
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

pub(super) fn post(
    store: &Inner,
    id: &str,
    mail: &StoredMail,
    evict: Option<&MessageId>,
) -> Result<(), StoreError> {
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
