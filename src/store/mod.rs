//! Where sessions outlive the process: the [`SessionStore`] contract and its redb
//! implementation (feature `session-store`).
//!
//! Layout (see [`tables`]): an append-only history keyed by `(session, seq)`, one small
//! [`SessionRecord`] per session, and two indexes ordered by last update (active and archived)
//! whose values are the list summaries, so listing never reads a record or a history. A save
//! writes, in one transaction, the messages the turn added and the new record; its cost follows
//! what the turn added, never the size of the session.
//!
//! Secret values of a record (MCP servers' `env` and `headers`) are sealed with a key kept
//! beside the store ([`sealer`]); everything else is stored as JSON.
//!
//! Implementations:
//! - `RedbStore` (feature `session-store`): a redb file, opened once per process.

#[cfg(feature = "session-store")]
mod codec;
#[cfg(test)]
#[cfg(feature = "session-store")]
mod contract;
pub mod lease;
#[cfg(feature = "session-store")]
mod postgres;
#[cfg(feature = "session-store")]
mod redb;
#[cfg(feature = "session-store")]
pub mod rules;
#[cfg(feature = "session-store")]
pub mod sealer;

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;

#[cfg(feature = "session-store")]
pub use postgres::PostgresStore;
#[cfg(all(feature = "session-store", any(test, feature = "test-support")))]
pub use postgres::test_schema;
#[cfg(feature = "session-store")]
pub use redb::RedbStore;
#[cfg(feature = "session-store")]
pub use rules::ARCHIVED_EVENT;

pub use lease::{ExclusiveGuard, HeldLease, LeaseGrant, Leasing, Signal, Standing, TurnLeases};

use crate::error::SessionError;
use crate::ids::{MessageId, SessionId};
use crate::llm::Message;
use crate::model::SessionRecord;
use crate::model::inbox::InboxMessage;
use crate::model::memory::MemoryRecord;
use crate::model::{ListPosition, SessionFilter, SessionSummary, StoredEvent};

/// One save: the session's record, and its history from index `replace_from` on. Stored
/// messages at or after `replace_from` are replaced; earlier ones are left untouched. When the
/// record's `history_epoch` is newer than the stored one (compaction), the whole stored history
/// moves to `discarded` and `replace_from` must be 0. Serializable: the redb store's
/// write-ahead log holds saves as they were asked for.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SaveRequest {
    pub record: SessionRecord,
    pub replace_from: u64,
    pub messages: Vec<Message>,
    /// Full outputs of tool results that were capped, `(tool_use_id, content)`.
    pub tool_outputs: Vec<(String, String)>,
    /// Inbox messages the saved turns delivered: removed from the inbox in this transaction.
    pub delivered: Vec<MessageId>,
    /// Journal events not stored yet, in order: the first must be the stored record's
    /// `event_seq`, and the saved record's `event_seq` must follow the last.
    pub events: Vec<StoredEvent>,
    /// Memories to keep with this save (a compaction's passages); ids are given by the store.
    pub memories: Vec<MemoryRecord>,
    /// The lease epoch the saving actor holds (or loaded the session at), on a store with
    /// [`TurnLeases`]: the save is refused ([`StoreError::Fenced`]) unless it is the lease's
    /// current one. `None`: unfenced (a store one process owns, a session's first save).
    pub fence: Option<u64>,
}

impl SaveRequest {
    /// A save without capped tool outputs or events.
    pub fn new(record: SessionRecord, replace_from: u64, messages: Vec<Message>) -> Self {
        Self {
            record,
            replace_from,
            messages,
            tool_outputs: Vec::new(),
            delivered: Vec::new(),
            events: Vec::new(),
            memories: Vec::new(),
            fence: None,
        }
    }
}

/// A message as the inbox table keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredMail {
    /// Parked past `max_hops`: shown, never delivered.
    #[serde(default)]
    pub parked: bool,
    pub message: InboxMessage,
}

/// A session's stored inbox, each list oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredInbox {
    pub waiting: Vec<InboxMessage>,
    pub parked: Vec<InboxMessage>,
}

impl StoredInbox {
    /// A session's stored mail, in any order, as its inbox: waiting and parked apart, each in
    /// arrival order (by time, then by id).
    pub fn arrived(mut mail: Vec<StoredMail>) -> Self {
        mail.sort_by(|a, b| (a.message.at, &a.message.id).cmp(&(b.message.at, &b.message.id)));
        let (parked, waiting): (Vec<StoredMail>, Vec<StoredMail>) = mail.into_iter().partition(|mail| mail.parked);
        Self {
            waiting: waiting.into_iter().map(|mail| mail.message).collect(),
            parked: parked.into_iter().map(|mail| mail.message).collect(),
        }
    }
}

/// A named session of a peer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPeer {
    pub session_id: SessionId,
    pub name: String,
}

/// A session's child, as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredChild {
    pub session_id: SessionId,
    /// Not archived: it counts against the delegation caps.
    pub open: bool,
}

/// One save's journal events, at its place in the order saves committed
/// ([`SessionStore::journal_commits`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JournalCommit {
    pub position: u64,
    pub session_id: SessionId,
    pub events: Vec<StoredEvent>,
}

/// Delegated sessions not archived ([`SessionStore::open_delegated`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenDelegated {
    pub on_server: usize,
    /// Those whose owner is the one asked about.
    pub of_owner: usize,
}

/// How far the store's memories have gone: what a search index compares with its own marks
/// to know whether it must catch up (`last_id`) or be rebuilt (`deletes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryMarks {
    /// The largest id ever given (0: none).
    pub last_id: u64,
    /// How many memories were deleted, ever.
    pub deletes: u64,
}

/// A page of stored summaries, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredPage {
    pub summaries: Vec<SessionSummary>,
    /// Stored sessions matching the query (not only this page), excluding `exclude`.
    pub total: usize,
}

/// Which stored sessions to list.
#[derive(Debug, Clone, Default)]
pub struct StoredListQuery {
    /// How many summaries to return at most, from the newest.
    pub first: usize,
    /// Only sessions after this place in the list (keyset paging); `None`: from the newest.
    pub after: Option<ListPosition>,
    pub include_archived: bool,
    /// Sessions the caller lists from elsewhere (the live ones): skipped and not counted.
    pub exclude: Vec<SessionId>,
    /// Only the sessions of this owner (a subject); `None`: every session. Filtered before
    /// paging, so pages and `total` count only the owner's sessions.
    pub owner: Option<String>,
    /// Only the sessions it lets through; also before paging.
    pub filter: SessionFilter,
}

/// Why the store failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the session store {0} is in use by another deputy process; stop it, or give this one another file \
         with --store (or --ephemeral)"
    )]
    Locked(PathBuf),
    #[error("stored data could not be read: {0}")]
    Corrupt(String),
    /// The key file that seals the store's secrets is missing, unsafe or not the store's.
    #[error("the session store's key file {}: {message}", path.display())]
    Key { path: PathBuf, message: String },
    /// A save of a session that was archived meanwhile; archiving is final, so it is refused.
    #[error("session {0} is archived: its history can be read, but it takes no more turns")]
    Archived(String),
    /// A save fenced by a lease epoch that is no longer the lease's: another process took the
    /// session's lease since, so this copy of the session is behind and must not commit.
    #[error(
        "session {id} moved on elsewhere: its turn lease is at epoch {current}, this save holds {fence}; it was \
         not saved, and the session continues from the store"
    )]
    Fenced { id: String, fence: u64, current: u64 },
    #[error("{0}")]
    Backend(String),
}

impl From<StoreError> for SessionError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Archived(id) => {
                let message = StoreError::Archived(id.clone()).to_string();
                SessionError::NotFound { session_id: SessionId::from_string(id), message }
            }
            error => SessionError::Store { message: error.to_string(), source: Some(std::sync::Arc::new(error)) },
        }
    }
}

/// Persistence of sessions. Methods return `StoreError`s; the service maps them to
/// `SESSION_STORE_ERROR`.
pub trait SessionStore: Send + Sync + std::fmt::Debug {
    /// Writes a save in one transaction.
    fn save(&self, save: SaveRequest) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The record of a session, archived or not.
    fn record(&self, id: &SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, StoreError>>;

    /// The current history of a session, in order.
    fn history(&self, id: &SessionId) -> BoxFuture<'_, Result<Vec<Message>, StoreError>>;

    /// Summaries newest first, from the indexes only.
    fn list(&self, query: StoredListQuery) -> BoxFuture<'_, Result<StoredPage, StoreError>>;

    /// The full output of a capped tool result, if stored.
    fn tool_output(&self, id: &SessionId, tool_use_id: &str) -> BoxFuture<'_, Result<Option<String>, StoreError>>;

    /// Marks a session archived; returns its record, or `None` if it is not stored.
    fn archive(&self, id: &SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, StoreError>>;

    /// Keeps a message sent to the session (and drops `evict`, a parked message it pushed out),
    /// before the sender is told it was taken.
    fn post(
        &self,
        id: &SessionId,
        mail: StoredMail,
        evict: Option<MessageId>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The messages a session's inbox holds.
    fn inbox(&self, id: &SessionId) -> BoxFuture<'_, Result<StoredInbox, StoreError>>;

    /// The named, non-archived sessions of a peer group, by its key
    /// ([`SessionRecord::peer_key`]).
    fn peers(&self, group: &str) -> BoxFuture<'_, Result<Vec<StoredPeer>, StoreError>>;

    /// Every session `parent` delegated, in id order, archived ones too.
    fn children(&self, parent: &SessionId) -> BoxFuture<'_, Result<Vec<StoredChild>, StoreError>>;

    /// How many delegated sessions are not archived: server-wide, and of those, `owner`'s.
    fn open_delegated(&self, owner: &str) -> BoxFuture<'_, Result<OpenDelegated, StoreError>>;

    /// Up to `limit` journal events of a session with a seq after `after` (from the first when
    /// `None`), in order, within [`crate::model::MAX_EVENTS_PAGE_BYTES`] (at least one);
    /// `None` when the session is not stored.
    fn events(
        &self,
        id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Option<Vec<StoredEvent>>, StoreError>>;

    /// Up to `limit` saves' journal events across every session, in the order the saves
    /// committed, from position `from` (a reader's cursor: what it has not handled yet). A
    /// position may carry no events (one a rolled-back save left, in a database store).
    fn journal_commits(&self, from: u64, limit: usize) -> BoxFuture<'_, Result<Vec<JournalCommit>, StoreError>>;

    /// The position the next save's journal events will take: where a new reader starts.
    fn journal_end(&self) -> BoxFuture<'_, Result<u64, StoreError>>;

    /// Reader `name`'s persisted position in the commit order (`None`: never set).
    fn cursor(&self, name: &str) -> BoxFuture<'_, Result<Option<u64>, StoreError>>;

    fn set_cursor(&self, name: &str, position: u64) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Stores a memory (its `id` is ignored) and returns the id it was given.
    fn remember(&self, memory: MemoryRecord) -> BoxFuture<'_, Result<u64, StoreError>>;

    /// Deletes memory `id` if `owner` owns it; whether it did.
    fn forget(&self, id: u64, owner: &str) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Up to `limit` memories with an id after `after`, in id order (every owner's: the search
    /// index reads them all).
    fn memories(&self, after: u64, limit: usize) -> BoxFuture<'_, Result<Vec<MemoryRecord>, StoreError>>;

    fn memory_marks(&self) -> BoxFuture<'_, Result<MemoryMarks, StoreError>>;

    /// Whether the store answers: one read transaction, opened and dropped, whatever it holds
    /// (`/readyz` must not cost more with more sessions).
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The store's turn leases, when several processes may share it (a database). A store
    /// one process owns has none: the actor's turn lock is enough.
    fn leases(&self) -> Option<&dyn TurnLeases> {
        None
    }
}

/// The store a service uses, if any. `None` means ephemeral: a build without the
/// `session-store` feature, or a run with `--ephemeral`.
pub type SharedStore = Option<Arc<dyn SessionStore>>;

/// Why an operation that needs the store cannot run without one.
pub fn persistence_disabled(operation: &str) -> SessionError {
    if cfg!(feature = "session-store") {
        SessionError::PersistenceDisabled(format!("{operation} (deputy runs with --ephemeral)"))
    } else {
        SessionError::PersistenceDisabled(operation.to_owned())
    }
}
