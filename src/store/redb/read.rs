//! Reads, each on one redb read transaction (MVCC: they never wait for a save): a record, its
//! history, a page of the list (keyset paging over the indexes), journal events, tool
//! outputs, an inbox, peers and children.

use std::collections::HashSet;

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::Inner;
use super::backend;
use super::tables::{
    ACTIVE_INDEX, ARCHIVED_INDEX, CHILDREN, DELEGATED, EVENTS, INBOX, JOURNAL_ORDER, MESSAGES, META,
    OWNER_ACTIVE_INDEX, OWNER_ARCHIVED_INDEX, PEERS, RECORDS, TOOL_OUTPUTS,
};
use crate::ids::SessionId;
use crate::llm::Message;
use crate::model::SessionRecord;
use crate::model::{ListPosition, SessionSummary, StoredEvent, StoredEventRow};
use crate::store::rules::ListWalk;
use crate::store::{
    JournalCommit, OpenDelegated, StoreError, StoredChild, StoredInbox, StoredListQuery, StoredMail, StoredPage,
    StoredPeer,
};

pub(super) fn record(store: &Inner, id: &str) -> Result<Option<SessionRecord>, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let records = read.open_table(RECORDS).map_err(backend)?;
    let bytes = records.get(id).map_err(backend)?;
    bytes.map(|bytes| store.decode(bytes.value())).transpose()
}

pub(super) fn history(store: &Inner, id: &str) -> Result<Vec<Message>, StoreError> {
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
pub(super) fn newest(
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
pub(super) fn owned(
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
pub(super) fn list_owned(store: &Inner, query: &StoredListQuery, owner: &str) -> Result<StoredPage, StoreError> {
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

pub(super) fn list(store: &Inner, query: StoredListQuery) -> Result<StoredPage, StoreError> {
    if !query.filter.is_empty() {
        return list_filtered(store, &query);
    }
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

/// `list` with a [`SessionFilter`](crate::model::SessionFilter): the filter is a predicate
/// over summaries, which no index orders by, so this walks every summary of the indexes the
/// query reaches (one owner's, where it names one) once, keeping the first `first` matches
/// after the cursor and counting them all. The cost is a read of the caller's sessions, and
/// no more than that.
fn list_filtered(store: &Inner, query: &StoredListQuery) -> Result<StoredPage, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let mut walk = ListWalk::new(query);
    let archived_only = query.filter.status == Some(crate::model::SessionStatus::Archived);
    let indexes = [(!archived_only, false), (query.include_archived || archived_only, true)];
    for (wanted, archived) in indexes {
        if !wanted {
            continue;
        }
        match &query.owner {
            Some(owner) => {
                let index = read
                    .open_table(if archived { OWNER_ARCHIVED_INDEX } else { OWNER_ACTIVE_INDEX })
                    .map_err(backend)?;
                for entry in index
                    .range((owner.as_str(), 0u64, "")..=(owner.as_str(), u64::MAX, "\u{10FFFF}"))
                    .map_err(backend)?
                {
                    let (key, value) = entry.map_err(backend)?;
                    let (_, updated, id) = key.value();
                    walk.offer(updated, id, || store.decode(value.value()))?;
                }
            }
            None => {
                let index =
                    read.open_table(if archived { ARCHIVED_INDEX } else { ACTIVE_INDEX }).map_err(backend)?;
                for entry in index.iter().map_err(backend)? {
                    let (key, value) = entry.map_err(backend)?;
                    let (updated, id) = key.value();
                    walk.offer(updated, id, || store.decode(value.value()))?;
                }
            }
        }
    }
    Ok(walk.page())
}

pub(super) fn events(
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
    // Bounded by bytes too, measured on the stored JSON before decoding (security review 2, G3).
    let mut taken = 0;
    for entry in table.range((id, from)..=(id, u64::MAX)).map_err(backend)?.take(limit) {
        let (_, bytes) = entry.map_err(backend)?;
        if !crate::model::fits_page(&mut taken, bytes.value().len()) {
            break;
        }
        out.push(store.decode::<StoredEventRow>(bytes.value())?.into());
    }
    Ok(Some(out))
}

/// Up to `limit` saves' journal events in commit order, from position `from`.
pub(super) fn journal_commits(store: &Inner, from: u64, limit: usize) -> Result<Vec<JournalCommit>, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let order = read.open_table(JOURNAL_ORDER).map_err(backend)?;
    let events = read.open_table(EVENTS).map_err(backend)?;
    let mut commits = Vec::new();
    for entry in order.range(from..).map_err(backend)?.take(limit) {
        let (position, row) = entry.map_err(backend)?;
        let (id, first, end) = row.value();
        let mut taken = Vec::new();
        for event in events.range((id, first)..(id, end)).map_err(backend)? {
            taken.push(store.decode::<StoredEventRow>(event.map_err(backend)?.1.value())?.into());
        }
        commits.push(JournalCommit {
            position: position.value(),
            session_id: SessionId::from_string(id),
            events: taken,
        });
    }
    Ok(commits)
}

/// The position the next save's events will take in the commit order.
pub(super) fn journal_end(store: &Inner) -> Result<u64, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    super::write::next_position(&read.open_table(JOURNAL_ORDER).map_err(backend)?)
}

/// Reader `name`'s position in the commit order, if it ever set one.
pub(super) fn cursor(store: &Inner, name: &str) -> Result<Option<u64>, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    super::meta::meta_u64(&read.open_table(META).map_err(backend)?, &super::write::cursor_key(name))
}

pub(super) fn tool_output(store: &Inner, id: &str, tool_use_id: &str) -> Result<Option<String>, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let outputs = read.open_table(TOOL_OUTPUTS).map_err(backend)?;
    let bytes = outputs.get((id, tool_use_id)).map_err(backend)?;
    bytes
        .map(|bytes| String::from_utf8(bytes.value().to_vec()).map_err(|err| StoreError::Corrupt(err.to_string())))
        .transpose()
}

pub(super) fn inbox(store: &Inner, id: &str) -> Result<StoredInbox, StoreError> {
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
    Ok(StoredInbox::arrived(mail))
}

pub(super) fn peers(store: &Inner, group: &str) -> Result<Vec<StoredPeer>, StoreError> {
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
pub(super) fn children(store: &Inner, parent: &str) -> Result<Vec<StoredChild>, StoreError> {
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

/// The open delegated sessions, and `owner`'s among them: one record read per open child,
/// which the server-wide cap (`max_live_delegated`) keeps few.
pub(super) fn open_delegated(store: &Inner, owner: &str) -> Result<OpenDelegated, StoreError> {
    let read = store.db.begin_read().map_err(backend)?;
    let open = read.open_table(DELEGATED).map_err(backend)?;
    let records = read.open_table(RECORDS).map_err(backend)?;
    let mut counts = OpenDelegated::default();
    for entry in open.iter().map_err(backend)? {
        let (child, _) = entry.map_err(backend)?;
        counts.on_server += 1;
        let Some(bytes) = records.get(child.value()).map_err(backend)? else { continue };
        let record: SessionRecord = store.decode(bytes.value())?;
        if record.owner == owner {
            counts.of_owner += 1;
        }
    }
    Ok(counts)
}
