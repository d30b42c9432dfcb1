//! Writes, each one transaction: a turn's save, an archive, mail, memories, the store's
//! numbers, and the sealing key's check value.

use std::path::Path;

use deadpool_postgres::Transaction;
use serde::de::DeserializeOwned;
use tokio_postgres::Client;

use super::{Inner, Prepared, backend, int, uint};
use crate::ids::MessageId;
use crate::model::SessionRecord;
use crate::model::memory::MemoryRecord;
use crate::store::rules::{DiscardedEpoch, SavePlan, StoredHead, close_archive};
use crate::store::sealer::{KeySealer, bind};
use crate::store::{SaveRequest, Signal, StoreError, StoredMail};

const NEXT_MEMORY: &str = "memory_next";
const MEMORY_DELETES: &str = "memory_deletes";

/// The session's stored record, its row locked until the transaction ends: the whole
/// [`SessionRecord`], or only what a save needs of it ([`StoredHead`]).
async fn locked_record<T: DeserializeOwned>(
    inner: &Inner,
    transaction: &Transaction<'_>,
    id: &str,
) -> Result<Option<T>, StoreError> {
    let row = transaction.row_if_any("SELECT record FROM sessions WHERE id = $1 FOR UPDATE", &[&id]).await?;
    row.map(|row| inner.decode(row.get::<_, &[u8]>(0))).transpose()
}

/// Writes the record and its list summary.
async fn put_record(
    inner: &Inner,
    transaction: &Transaction<'_>,
    record: &SessionRecord,
) -> Result<(), StoreError> {
    let summary = inner.encode(&record.summary(record.resting_status()))?;
    let updated_ms = int(crate::model::view::updated_ms(record.updated_at));
    transaction
        .run(
            "INSERT INTO sessions (id, owner, archived, updated_ms, record, summary, event_seq)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, archived = EXCLUDED.archived,
                 updated_ms = EXCLUDED.updated_ms, record = EXCLUDED.record, summary = EXCLUDED.summary,
                 event_seq = EXCLUDED.event_seq",
            &[
                &record.session_id.as_str(),
                &record.owner,
                &record.archived,
                &updated_ms,
                &inner.encode(record)?,
                &summary,
                &int(record.event_seq),
            ],
        )
        .await?;
    Ok(())
}

/// Positions a save tries before it gives up: each is lost only to a reader that took it for
/// a gap in the moment between the sequence giving it and the row's insert.
const POSITION_TRIES: usize = 8;

/// Appends journal events `first..end` of session `id` to the commit order, at the next
/// position of a sequence. Nothing is held to the commit, so saves of different sessions
/// commit side by side; positions may then become visible out of order, and readers hold back
/// at a gap while its save runs (`read::journal_commits`). A position a reader filled first
/// (taking it for a rolled-back save's) is passed over for the next.
async fn order(transaction: &Transaction<'_>, id: &str, first: u64, end: u64) -> Result<(), StoreError> {
    for _ in 0..POSITION_TRIES {
        let placed = transaction
            .row_if_any(
                "INSERT INTO journal_order (position, session_id, first_seq, end_seq)
                 VALUES (nextval('journal_position'), $1, $2, $3) ON CONFLICT (position) DO NOTHING
                 RETURNING position",
                &[&id, &int(first), &int(end)],
            )
            .await?;
        if placed.is_some() {
            return Ok(());
        }
    }
    Err(StoreError::Backend(format!("no free position in the journal's order after {POSITION_TRIES} tries")))
}

pub(super) async fn save(inner: &Inner, save: SaveRequest) -> Result<(), StoreError> {
    inner.in_transaction(false, async |transaction| save_in(inner, transaction, &save).await).await
}

async fn save_in(inner: &Inner, transaction: &Transaction<'_>, save: &SaveRequest) -> Result<(), StoreError> {
    let SaveRequest { record, replace_from, messages, tool_outputs, delivered, events, memories, fence } = save;
    let id = record.session_id.as_str();
    if let Some(fence) = fence {
        super::lease::check_fence(transaction, id, *fence).await?;
    }
    let stored: Option<StoredHead> = locked_record(inner, transaction, id).await?;
    let plan = SavePlan::check(stored.as_ref(), save)?;

    if let Some(DiscardedEpoch { epoch, len }) = plan.discard {
        transaction
            .run(
                "INSERT INTO discarded (session_id, epoch, seq, body)
                 SELECT session_id, $2, seq, body FROM messages WHERE session_id = $1 AND seq < $3",
                &[&id, &int(epoch), &int(len)],
            )
            .await?;
        transaction.run("DELETE FROM messages WHERE session_id = $1", &[&id]).await?;
    }
    if !plan.replaced.is_empty() {
        transaction
            .run(
                "DELETE FROM messages WHERE session_id = $1 AND seq >= $2 AND seq < $3",
                &[&id, &int(plan.replaced.start), &int(plan.replaced.end)],
            )
            .await?;
    }
    if !messages.is_empty() {
        let seqs: Vec<i64> = (*replace_from..).take(messages.len()).map(int).collect();
        let bodies = messages.iter().map(|message| inner.encode(message)).collect::<Result<Vec<_>, _>>()?;
        transaction
            .run(
                "INSERT INTO messages (session_id, seq, body) SELECT $1, * FROM unnest($2::bigint[], $3::bytea[])",
                &[&id, &seqs, &bodies],
            )
            .await?;
    }
    for (tool_use_id, content) in tool_outputs {
        transaction
            .run(
                "INSERT INTO tool_outputs (session_id, tool_use_id, content) VALUES ($1, $2, $3)
                 ON CONFLICT (session_id, tool_use_id) DO UPDATE SET content = EXCLUDED.content",
                &[&id, tool_use_id, content],
            )
            .await?;
    }
    if !delivered.is_empty() {
        let delivered: Vec<&str> = delivered.iter().map(MessageId::as_str).collect();
        transaction
            .run("DELETE FROM inbox WHERE session_id = $1 AND message_id = ANY($2)", &[&id, &delivered])
            .await?;
    }
    if let Some((group, name)) = &plan.joins_peers {
        transaction
            .run(
                "INSERT INTO peers (group_key, session_id, name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                &[&group.as_bytes(), &id, name],
            )
            .await?;
    }
    if let Some(parent) = &plan.child_of {
        transaction
            .run(
                "INSERT INTO children (parent_id, child_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&parent.as_str(), &id],
            )
            .await?;
        transaction
            .run(
                "INSERT INTO delegated (child_id, parent_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&id, &parent.as_str()],
            )
            .await?;
    }
    if !events.is_empty() {
        let seqs: Vec<i64> = events.iter().map(|event| int(event.seq)).collect();
        let bodies = events.iter().map(|event| inner.encode(event)).collect::<Result<Vec<_>, _>>()?;
        transaction
            .run(
                "INSERT INTO events (session_id, seq, body) SELECT $1, * FROM unnest($2::bigint[], $3::bytea[])",
                &[&id, &seqs, &bodies],
            )
            .await?;
    }
    insert_memories(inner, transaction, memories).await?;
    put_record(inner, transaction, record).await?;
    inner.notify(transaction, &Signal::Changed(record.session_id.clone())).await?;
    // Last: the row it adds is what readers wait on at a gap, for as short as can be.
    if !events.is_empty() {
        order(transaction, id, plan.events_from, plan.events_from + events.len() as u64).await?;
    }
    Ok(())
}

/// The row lock makes archive and save of one session serialize: a save committing first is
/// archived with it, one committing after finds the record archived and is refused.
pub(super) async fn archive(inner: &Inner, id: &str) -> Result<Option<SessionRecord>, StoreError> {
    inner.in_transaction(false, async |transaction| archive_in(inner, transaction, id).await).await
}

async fn archive_in(
    inner: &Inner,
    transaction: &Transaction<'_>,
    id: &str,
) -> Result<Option<SessionRecord>, StoreError> {
    let Some(mut stored) = locked_record::<SessionRecord>(inner, transaction, id).await? else { return Ok(None) };
    if stored.archived {
        return Ok(Some(stored));
    }
    let closing = close_archive(&mut stored);
    transaction
        .run(
            "INSERT INTO events (session_id, seq, body) VALUES ($1, $2, $3)",
            &[&id, &int(closing.seq), &inner.encode(&closing)?],
        )
        .await?;
    put_record(inner, transaction, &stored).await?;
    inner.notify(transaction, &Signal::Changed(stored.session_id.clone())).await?;
    if stored.name.is_some() {
        transaction
            .run(
                "DELETE FROM peers WHERE group_key = $1 AND session_id = $2",
                &[&stored.peer_key().as_bytes(), &id],
            )
            .await?;
    }
    if stored.lineage.parent_id.is_some() {
        transaction.run("DELETE FROM delegated WHERE child_id = $1", &[&id]).await?;
    }
    // Last, as for a save.
    order(transaction, id, closing.seq, stored.event_seq).await?;
    Ok(Some(stored))
}

/// Keeps `mail` (dropping `evict`, a parked message it pushed out). With `capacity`, only while
/// fewer messages wait (parked ones aside), counted under a transaction lock of the inbox so
/// posts from every replica are counted one after another; `false`: refused, nothing kept.
pub(super) async fn post(
    inner: &Inner,
    id: &str,
    mail: &StoredMail,
    evict: Option<&MessageId>,
    capacity: Option<usize>,
) -> Result<bool, StoreError> {
    inner
        .in_transaction(false, async |transaction| {
            if let Some(capacity) = capacity.filter(|_| !mail.parked) {
                transaction
                    .run("SELECT pg_advisory_xact_lock(hashtextextended('deputy:inbox:' || $1, 0))", &[&id])
                    .await?;
                let waiting: i64 = transaction
                    .one_row("SELECT count(*) FROM inbox WHERE session_id = $1 AND NOT parked", &[&id])
                    .await?
                    .get(0);
                if usize::try_from(waiting).unwrap_or(usize::MAX) >= capacity {
                    return Ok(false);
                }
            }
            transaction
                .run(
                    "INSERT INTO inbox (session_id, message_id, body, parked) VALUES ($1, $2, $3, $4)
             ON CONFLICT (session_id, message_id) DO UPDATE SET body = EXCLUDED.body, parked = EXCLUDED.parked",
                    &[&id, &mail.message.id.as_str(), &inner.encode(mail)?, &mail.parked],
                )
                .await?;
            if let Some(evict) = evict {
                transaction
                    .run("DELETE FROM inbox WHERE session_id = $1 AND message_id = $2", &[&id, &evict.as_str()])
                    .await?;
            }
            Ok(true)
        })
        .await
}

/// Adds `by` to the number `key` (absent: `start`), and answers the new value.
async fn add_to_meta(transaction: &Transaction<'_>, key: &str, start: i64, by: i64) -> Result<i64, StoreError> {
    let row = transaction
        .one_row(
            "INSERT INTO deputy_meta (key, num) VALUES ($1, $2::bigint + $3::bigint) ON CONFLICT (key)
             DO UPDATE SET num = coalesce(deputy_meta.num, $2::bigint) + $3::bigint RETURNING num",
            &[&key, &start, &by],
        )
        .await?;
    Ok(row.get(0))
}

/// Stores `memories` with the next ids (their own `id` is ignored); returns the ids given.
/// Ids start at 1, so `after: 0` reads from the first.
async fn insert_memories(
    inner: &Inner,
    transaction: &Transaction<'_>,
    memories: &[MemoryRecord],
) -> Result<Vec<u64>, StoreError> {
    if memories.is_empty() {
        return Ok(Vec::new());
    }
    let count = int(memories.len() as u64);
    let end = add_to_meta(transaction, NEXT_MEMORY, 1, count).await?;
    let mut ids = Vec::with_capacity(memories.len());
    for (id, memory) in ((end - count)..end).zip(memories) {
        let stored = MemoryRecord { id: uint(id), ..memory.clone() };
        transaction
            .run(
                "INSERT INTO memories (id, owner, body) VALUES ($1, $2, $3)",
                &[&id, &stored.owner, &inner.encode(&stored)?],
            )
            .await?;
        ids.push(uint(id));
    }
    Ok(ids)
}

pub(super) async fn remember(inner: &Inner, memory: MemoryRecord) -> Result<u64, StoreError> {
    let ids = inner
        .in_transaction(false, async |transaction| {
            insert_memories(inner, transaction, std::slice::from_ref(&memory)).await
        })
        .await?;
    ids.first().copied().ok_or_else(|| StoreError::Corrupt("a remembered memory got no id".into()))
}

/// Deletes memory `id` if `owner` owns it.
pub(super) async fn forget(inner: &Inner, id: u64, owner: &str) -> Result<bool, StoreError> {
    inner
        .in_transaction(false, async |transaction| {
            let deleted =
                transaction.run("DELETE FROM memories WHERE id = $1 AND owner = $2", &[&int(id), &owner]).await?;
            if deleted == 0 {
                return Ok(false);
            }
            add_to_meta(transaction, MEMORY_DELETES, 0, 1).await?;
            Ok(true)
        })
        .await
}

/// The `deputy_meta` key of reader `name`'s cursor.
pub(super) fn cursor_key(name: &str) -> String {
    format!("cursor:{name}")
}

pub(super) async fn set_meta_num(inner: &Inner, key: &str, value: u64) -> Result<(), StoreError> {
    inner
        .run(
            "INSERT INTO deputy_meta (key, num) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET num = EXCLUDED.num",
            &[&key, &int(value)],
        )
        .await?;
    Ok(())
}

/// The sealer of the database's secrets from `key_file`, bound by the check value the
/// database keeps (written here the first time; the first of several replicas to write it
/// wins, and the others are checked against it).
pub(super) async fn bind_key(client: &Client, key_file: &Path) -> Result<KeySealer, StoreError> {
    let check_of = async || -> Result<Option<String>, StoreError> {
        let row =
            client.query_opt("SELECT text FROM deputy_meta WHERE key = 'key_check'", &[]).await.map_err(backend)?;
        Ok(row.and_then(|row| row.get::<_, Option<String>>(0)))
    };
    let check = check_of().await?;
    let (sealer, new_check) = bind(key_file, check.as_deref())?;
    if let Some(new_check) = new_check {
        client
            .execute(
                "INSERT INTO deputy_meta (key, text) VALUES ('key_check', $1) ON CONFLICT (key) DO NOTHING",
                &[&new_check],
            )
            .await
            .map_err(backend)?;
        if check_of().await?.as_deref() != Some(new_check.as_str()) {
            // Another process bound the database first, to its own key: check against it.
            let stored = check_of().await?;
            return Ok(bind(key_file, stored.as_deref())?.0);
        }
    }
    Ok(sealer)
}
