//! Memory that outlives a turn's context: passages of history that compaction took out of a
//! session's context (recollections, kept so `memory_search` can find them again) and what an
//! agent chose to `remember` for its owner's later sessions.
//!
//! A memory belongs to an owner (the tenant subject of the session it came from) and nobody
//! else ever sees it. The rows are plain data: the store keeps them (a compaction's
//! recollections in the same transaction as the compacted history), and the search index
//! above it is rebuilt from them.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::SessionId;

/// Memories an owner may `remember` at most, by default (`[memory] max_per_owner`).
pub const DEFAULT_MAX_PER_OWNER: u64 = 10_000;
/// Bytes of remembered text an owner may keep at most, by default
/// (`[memory] max_bytes_per_owner`).
pub const DEFAULT_MAX_BYTES_PER_OWNER: u64 = 64 * 1024 * 1024;
/// Bytes of one remembered text at most: a memory is a fact or a note, not a document.
pub const MAX_MEMORY_BYTES: usize = 16 * 1024;
/// Tags of one memory at most, and characters of one tag.
pub const MAX_TAGS: usize = 16;
pub const MAX_TAG_CHARS: usize = 64;
/// Results one search returns at most.
pub const MAX_SEARCH_RESULTS: usize = 20;
/// Memories one page of a listing holds at most.
pub const MAX_LIST_PAGE: usize = 100;

/// A passage of history a summary took out of a session's context: the turn it was said in
/// and its text. The session layer makes it a [`MemoryRecord`] of the session's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recollection {
    pub turn: u64,
    pub text: String,
}

/// Where a memory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// An agent's `remember` call.
    Remembered,
    /// A passage of history a compaction took out of the session's context.
    History,
}

impl MemoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Remembered => "remembered",
            Self::History => "history",
        }
    }
}

/// One memory, as the store keeps it and callers list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryRecord {
    /// Unique on the server, increasing: newer memories have larger ids. 0 until stored.
    pub id: u64,
    /// The subject whose memory it is.
    pub owner: String,
    pub kind: MemoryKind,
    /// The session it came from.
    pub session_id: SessionId,
    /// The turn it was said (history) or remembered in.
    pub turn: u64,
    pub at: DateTime<Utc>,
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The named agent of the session it came from, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

impl MemoryRecord {
    /// The bytes it counts against its owner's bound.
    pub fn weight(&self) -> u64 {
        (self.text.len() + self.tags.iter().map(String::len).sum::<usize>()) as u64
    }
}

/// Which memories a search looks in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoryScope {
    /// The session's own: its compacted history and what it remembered.
    #[default]
    Session,
    /// Everything of the session's owner: every session's compacted history (archived ones
    /// too) and every remembered memory.
    Owner,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryHit {
    pub id: u64,
    pub kind: MemoryKind,
    pub text: String,
    /// BM25 relevance: higher is better, comparable only within one answer.
    pub score: f32,
    pub session_id: SessionId,
    pub turn: u64,
    pub at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

impl MemoryHit {
    pub fn new(record: MemoryRecord, score: f32) -> Self {
        Self {
            id: record.id,
            kind: record.kind,
            text: record.text,
            score,
            session_id: record.session_id,
            turn: record.turn,
            at: record.at,
            tags: record.tags,
        }
    }
}

/// A page of a caller's memories: newest first (`query` absent), or the best matches.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryList {
    pub memories: Vec<MemoryEntry>,
    /// Pass as `before` for the next (older) page; absent on the last page and on a search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_before: Option<u64>,
}

/// One memory of a listing, with its score when the listing was a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryEntry {
    #[serde(flatten)]
    pub record: MemoryRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
}

/// `memory_delete`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryDeleted {
    pub id: u64,
    pub deleted: bool,
}

/// The bounds of what one owner may remember.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBounds {
    pub max_per_owner: u64,
    pub max_bytes_per_owner: u64,
}

impl Default for MemoryBounds {
    fn default() -> Self {
        Self { max_per_owner: DEFAULT_MAX_PER_OWNER, max_bytes_per_owner: DEFAULT_MAX_BYTES_PER_OWNER }
    }
}
