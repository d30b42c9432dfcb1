//! Every table of the store, declared once, with its key encoding.
//!
//! Values are `codec`-encoded bytes (a version byte, then JSON), so records can
//! gain fields without a migration.

use redb::TableDefinition;

/// `session id → SessionRecord`: the small per-session record.
pub const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("records");

/// `(session id, seq) → Message`: the history, append-only; seq counts from 0.
pub const MESSAGES: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("messages");

/// `(updated_at in ms, session id) → SessionSummary` of sessions not archived. Iterated from
/// the end for "newest first"; its length is the number of active sessions.
pub const ACTIVE_INDEX: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("index_active");

/// The same for archived sessions, which `list` shows only on request.
pub const ARCHIVED_INDEX: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("index_archived");

/// `(owner, updated_at in ms, session id) → SessionSummary` of sessions not archived: one
/// tenant's sessions are a range of it, so a tenant's page costs what an unfiltered one does.
pub const OWNER_ACTIVE_INDEX: TableDefinition<(&str, u64, &str), &[u8]> =
    TableDefinition::new("index_owner_active");

/// The same for archived sessions.
pub const OWNER_ARCHIVED_INDEX: TableDefinition<(&str, u64, &str), &[u8]> =
    TableDefinition::new("index_owner_archived");

/// `(session id, tool_use id) → full output` of tool results that entered the history capped.
pub const TOOL_OUTPUTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("tool_outputs");

/// `(session id, history epoch, seq) → Message`: histories replaced by compaction, kept for
/// later use (memory indexing, audits) but never sent to the model again.
pub const DISCARDED: TableDefinition<(&str, u64, u64), &[u8]> = TableDefinition::new("discarded");

/// `(session id, seq) → StoredEvent`: the session journal, append-only; seq counts from 0 and
/// the record's `event_seq` is its length. Written in the same transaction as the messages and
/// record of the turn the events belong to.
pub const EVENTS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("events");

/// `position → (session id, first seq, end seq)`: every save's journal events, in the order
/// the saves committed (positions count from 0). One row per save, not per event, so a turn
/// pays one more small insert; readers across sessions (webhooks) follow it with a cursor of
/// their own kept in `META`.
pub const JOURNAL_ORDER: TableDefinition<u64, (&str, u64, u64)> = TableDefinition::new("journal_order");

/// Inbox messages not delivered yet (and parked ones), `(session, message id)` → [`super::StoredMail`].
/// A message is written when it is sent and removed in the transaction of the save that follows
/// its delivery, so a crash in between delivers it again rather than losing it.
pub const INBOX: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("inbox");

/// Named sessions by peer group, `(peer group, session id)` → name: who `list_peers` shows and
/// `send_message {to: NAME}` finds. Written when a named session is created, removed when it is
/// archived.
pub const PEERS: TableDefinition<(&str, &str), &str> = TableDefinition::new("peers");

/// `(parent id, child id) → ()`: every session a session delegated, archived ones too;
/// written in the child's first save. `session_list {parent_id}` and `{root_id}` walk it.
pub const CHILDREN: TableDefinition<(&str, &str), ()> = TableDefinition::new("children");

/// `child id → parent id` of delegated sessions not archived: what the delegation caps count
/// (`max_children_per_session` per parent, `max_live_delegated` for its length).
pub const DELEGATED: TableDefinition<&str, &str> = TableDefinition::new("delegated");

/// `memory id → MemoryRecord`: every owner's memories (remembered, and passages of compacted
/// history), ids increasing. A compaction's passages are written in the transaction of the
/// save that compacts; `META`'s `memory_next` is the next id, and `memory_deletes` counts
/// deletions, so the search index beside the store knows whether it is behind.
pub const MEMORIES: TableDefinition<u64, &[u8]> = TableDefinition::new("memories");

/// `name → value`: facts about the store itself. `key_check` holds a value sealed with the
/// store's key (see `sealer`), so a missing or different key file is noticed at open.
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// The index key of a record: when it was last updated, then its id (unique).
pub fn index_key(updated_at: chrono::DateTime<chrono::Utc>) -> u64 {
    crate::model::view::updated_ms(updated_at)
}
