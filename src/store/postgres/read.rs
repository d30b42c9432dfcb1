//! Reads, each one statement (or one read-only snapshot where it takes several): a record, its
//! history, a page of the list, journal events, tool outputs, an inbox, peers and children,
//! memories and the store's numbers.

use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::{Inner, Prepared, backend, int, uint};
use crate::ids::SessionId;
use crate::llm::Message;
use crate::model::memory::MemoryRecord;
use crate::model::{SessionRecord, SessionStatus, SessionSummary, StoredEvent, StoredEventRow};
use crate::store::rules::ListWalk;
use crate::store::{
    JournalCommit, MemoryMarks, OpenDelegated, StoreError, StoredChild, StoredInbox, StoredListQuery, StoredMail,
    StoredPage, StoredPeer,
};

pub(super) async fn record(inner: &Inner, id: &str) -> Result<Option<SessionRecord>, StoreError> {
    let row = inner.row_if_any("SELECT record FROM sessions WHERE id = $1", &[&id]).await?;
    row.map(|row| inner.decode(row.get::<_, &[u8]>(0))).transpose()
}

pub(super) async fn history(inner: &Inner, id: &str) -> Result<Vec<Message>, StoreError> {
    let rows = inner.rows("SELECT body FROM messages WHERE session_id = $1 ORDER BY seq", &[&id]).await?;
    rows.iter().map(|row| inner.decode(row.get::<_, &[u8]>(0))).collect()
}

/// A page of the list: one indexed range read, newest first, with its total counted apart;
/// with a filter, every summary the query reaches goes through [`ListWalk`], as in redb.
pub(super) async fn list(inner: &Inner, query: &StoredListQuery) -> Result<StoredPage, StoreError> {
    let archived_only = query.filter.status == Some(SessionStatus::Archived);
    let mut states = Vec::new();
    if !archived_only {
        states.push(false);
    }
    if query.include_archived || archived_only {
        states.push(true);
    }
    let exclude: Vec<String> = query.exclude.iter().map(|id| id.as_str().to_owned()).collect();
    let mut clauses = vec!["archived = ANY($1)".to_owned(), "NOT (id = ANY($2))".to_owned()];
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> = vec![Box::new(states), Box::new(exclude)];
    if let Some(owner) = &query.owner {
        params.push(Box::new(owner.clone()));
        clauses.push(format!("owner = ${}", params.len()));
    }
    let client = inner.client().await?;
    let counted = clauses.join(" AND ");
    if !query.filter.is_empty() {
        let sql = format!("SELECT updated_ms, id, summary FROM sessions WHERE {counted}");
        let rows = client.query(&sql, &borrowed(&params)).await.map_err(backend)?;
        let mut walk = ListWalk::new(query);
        for row in &rows {
            walk.offer(uint(row.get(0)), row.get(1), || inner.decode(row.get::<_, &[u8]>(2)))?;
        }
        return Ok(walk.page());
    }
    let total_sql = format!("SELECT count(*) FROM sessions WHERE {counted}");
    let total: i64 = client.query_one(&total_sql, &borrowed(&params)).await.map_err(backend)?.get(0);
    let mut paged = clauses;
    if let Some(after) = &query.after {
        params.push(Box::new(int(after.updated_ms)));
        params.push(Box::new(after.session_id.as_str().to_owned()));
        paged.push(format!("(updated_ms, id) < (${}, ${})", params.len() - 1, params.len()));
    }
    params.push(Box::new(int(query.first as u64)));
    let sql = format!(
        "SELECT summary FROM sessions WHERE {} ORDER BY updated_ms DESC, id DESC LIMIT ${}",
        paged.join(" AND "),
        params.len()
    );
    let rows = client.query(&sql, &borrowed(&params)).await.map_err(backend)?;
    let summaries =
        rows.iter().map(|row| inner.decode::<SessionSummary>(row.get::<_, &[u8]>(0))).collect::<Result<_, _>>()?;
    Ok(StoredPage { summaries, total: usize::try_from(total).unwrap_or(0) })
}

fn borrowed(params: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|param| param.as_ref() as &(dyn ToSql + Sync)).collect()
}

pub(super) async fn tool_output(inner: &Inner, id: &str, tool_use_id: &str) -> Result<Option<String>, StoreError> {
    let row = inner
        .row_if_any(
            "SELECT content FROM tool_outputs WHERE session_id = $1 AND tool_use_id = $2",
            &[&id, &tool_use_id],
        )
        .await?;
    Ok(row.map(|row| row.get(0)))
}

pub(super) async fn inbox(inner: &Inner, id: &str) -> Result<StoredInbox, StoreError> {
    let rows = inner.rows("SELECT body FROM inbox WHERE session_id = $1", &[&id]).await?;
    let mail =
        rows.iter().map(|row| inner.decode::<StoredMail>(row.get::<_, &[u8]>(0))).collect::<Result<_, _>>()?;
    Ok(StoredInbox::arrived(mail))
}

pub(super) async fn peers(inner: &Inner, group: &str) -> Result<Vec<StoredPeer>, StoreError> {
    let rows = inner
        .rows("SELECT session_id, name FROM peers WHERE group_key = $1 ORDER BY session_id", &[&group.as_bytes()])
        .await?;
    Ok(rows
        .iter()
        .map(|row| StoredPeer { session_id: SessionId::from_string(row.get::<_, &str>(0)), name: row.get(1) })
        .collect())
}

/// Every child of `parent`, and whether it is still open (not archived).
pub(super) async fn children(inner: &Inner, parent: &str) -> Result<Vec<StoredChild>, StoreError> {
    let rows = inner
        .rows(
            "SELECT c.child_id, d.child_id IS NOT NULL FROM children c
             LEFT JOIN delegated d ON d.child_id = c.child_id WHERE c.parent_id = $1 ORDER BY c.child_id",
            &[&parent],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| StoredChild { session_id: SessionId::from_string(row.get::<_, &str>(0)), open: row.get(1) })
        .collect())
}

/// The open delegated sessions, and `owner`'s among them.
pub(super) async fn open_delegated(inner: &Inner, owner: &str) -> Result<OpenDelegated, StoreError> {
    let row = inner
        .one_row(
            "SELECT count(*), count(*) FILTER (WHERE s.owner = $1) FROM delegated d
             LEFT JOIN sessions s ON s.id = d.child_id",
            &[&owner],
        )
        .await?;
    let count = |index: usize| usize::try_from(row.get::<_, i64>(index)).unwrap_or(0);
    Ok(OpenDelegated { on_server: count(0), of_owner: count(1) })
}

/// Up to `limit` of session `id`'s journal events after `after`, bounded in bytes too;
/// `None` when the session is not stored.
pub(super) async fn events(
    inner: &Inner,
    id: &str,
    after: Option<u64>,
    limit: usize,
) -> Result<Option<Vec<StoredEvent>>, StoreError> {
    inner.in_transaction(true, async |snapshot| events_in(inner, snapshot, id, after, limit).await).await
}

async fn events_in(
    inner: &Inner,
    snapshot: &Transaction<'_>,
    id: &str,
    after: Option<u64>,
    limit: usize,
) -> Result<Option<Vec<StoredEvent>>, StoreError> {
    if snapshot.row_if_any("SELECT 1 FROM sessions WHERE id = $1", &[&id]).await?.is_none() {
        return Ok(None);
    }
    let from = match after {
        None => 0,
        Some(u64::MAX) => return Ok(Some(Vec::new())),
        Some(after) => after + 1,
    };
    let rows = snapshot
        .rows(
            "SELECT body FROM events WHERE session_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
            &[&id, &int(from), &int(limit as u64)],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    let mut taken = 0;
    for row in &rows {
        let bytes: &[u8] = row.get(0);
        if !crate::model::fits_page(&mut taken, bytes.len()) {
            break;
        }
        out.push(inner.decode::<StoredEventRow>(bytes)?.into());
    }
    Ok(Some(out))
}

/// How long a reader waits, at most, for the save holding a gap to end.
const GAP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Up to `limit` saves' journal events in commit order, from position `from`, up to the first
/// gap: a position whose row is not visible, because its save is still committing (saves take
/// positions from a sequence and commit side by side, `write::order`) or rolled back. So a
/// reader never passes a save that commits later. At a gap with nothing before it, the
/// reader waits (up to [`GAP_WAIT`]) for the save holding it by inserting an empty row there:
/// the insert waits on the save's own row and is then refused (it committed: read again), or
/// fills the gap a rollback left. An empty row reads as a commit with no events, so cursors
/// pass it.
pub(super) async fn journal_commits(
    inner: &Inner,
    from: u64,
    limit: usize,
) -> Result<Vec<JournalCommit>, StoreError> {
    let (commits, gap) =
        inner.in_transaction(true, async |snapshot| commits_in(inner, snapshot, from, limit).await).await?;
    let Some(gap) = gap.filter(|_| commits.is_empty()) else { return Ok(commits) };
    if !settle(inner, gap).await? {
        return Ok(commits);
    }
    let (commits, _) =
        inner.in_transaction(true, async |snapshot| commits_in(inner, snapshot, from, limit).await).await?;
    Ok(commits)
}

/// Waits for the saves holding positions `gap`, filling those they left empty; `false` when
/// one still runs after [`GAP_WAIT`].
async fn settle(inner: &Inner, gap: std::ops::Range<u64>) -> Result<bool, StoreError> {
    let mut client = inner.client().await?;
    let transaction = client.transaction().await.map_err(backend)?;
    let wait = format!("SET LOCAL lock_timeout = '{}ms'", GAP_WAIT.as_millis());
    let filled = match transaction.batch_execute(&wait).await {
        Ok(()) => {
            // Text, not prepared: this path needs PostgreSQL's own error (a lock timeout).
            transaction
                .execute(
                    "INSERT INTO journal_order (position, session_id, first_seq, end_seq)
                     SELECT position, '', 0, 0 FROM generate_series($1::bigint, $2::bigint) AS position
                     ON CONFLICT (position) DO NOTHING",
                    &[&int(gap.start), &int(gap.end - 1)],
                )
                .await
        }
        Err(error) => Err(error),
    };
    match filled {
        Ok(_) => transaction.commit().await.map(|()| true).map_err(backend),
        Err(error) => {
            transaction.rollback().await.map_err(backend)?;
            match error.code() {
                Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => Ok(false),
                _ => Err(backend(error)),
            }
        }
    }
}

/// The commits from `from` before the first gap, and the gap if there is one.
async fn commits_in(
    inner: &Inner,
    snapshot: &Transaction<'_>,
    from: u64,
    limit: usize,
) -> Result<(Vec<JournalCommit>, Option<std::ops::Range<u64>>), StoreError> {
    let order = snapshot
        .rows(
            "SELECT position, session_id, first_seq, end_seq FROM journal_order WHERE position >= $1
             ORDER BY position LIMIT $2",
            &[&int(from), &int(limit as u64)],
        )
        .await?;
    let mut commits = Vec::with_capacity(order.len());
    let mut expected = from;
    for row in &order {
        let position = uint(row.get(0));
        if position != expected {
            return Ok((commits, Some(expected..position)));
        }
        expected = position + 1;
        let id: &str = row.get(1);
        let events = snapshot
            .rows(
                "SELECT body FROM events WHERE session_id = $1 AND seq >= $2 AND seq < $3 ORDER BY seq",
                &[&id, &row.get::<_, i64>(2), &row.get::<_, i64>(3)],
            )
            .await?;
        commits.push(JournalCommit {
            position,
            session_id: SessionId::from_string(id),
            events: events
                .iter()
                .map(|event| inner.decode::<StoredEventRow>(event.get::<_, &[u8]>(0)).map(StoredEvent::from))
                .collect::<Result<_, _>>()?,
        });
    }
    Ok((commits, None))
}

/// The position the next save's events will take in the commit order.
pub(super) async fn journal_end(inner: &Inner) -> Result<u64, StoreError> {
    let row = inner.one_row("SELECT coalesce(max(position) + 1, 0) FROM journal_order", &[]).await?;
    Ok(uint(row.get(0)))
}

pub(super) async fn meta_num(inner: &Inner, key: &str) -> Result<Option<u64>, StoreError> {
    let row = inner.row_if_any("SELECT num FROM deputy_meta WHERE key = $1", &[&key]).await?;
    Ok(row.and_then(|row| row.get::<_, Option<i64>>(0)).map(uint))
}

/// Up to `limit` memories with an id after `after`, in id order.
pub(super) async fn memories(inner: &Inner, after: u64, limit: usize) -> Result<Vec<MemoryRecord>, StoreError> {
    let rows = inner
        .rows("SELECT body FROM memories WHERE id > $1 ORDER BY id LIMIT $2", &[&int(after), &int(limit as u64)])
        .await?;
    rows.iter().map(|row| inner.decode(row.get::<_, &[u8]>(0))).collect()
}

pub(super) async fn memory_marks(inner: &Inner) -> Result<MemoryMarks, StoreError> {
    let next = meta_num(inner, "memory_next").await?.unwrap_or(0);
    let deletes = meta_num(inner, "memory_deletes").await?.unwrap_or(0);
    Ok(MemoryMarks { last_id: next.saturating_sub(1), deletes })
}
