//! The rules of the [`SessionStore`](super::SessionStore) contract that do not depend on how a
//! backend stores bytes: what a save may do given what is stored, and what an archive writes.
//! A backend reads the stored record, asks these functions, and only stores and fetches; so
//! every backend refuses the same saves with the same errors, and the contract suite
//! (`store::contract`, built for tests) holds each to them.

use std::collections::HashSet;
use std::ops::Range;

use chrono::{DateTime, Utc};

use super::{SaveRequest, StoreError, StoredListQuery, StoredPage};
use crate::ids::SessionId;
use crate::model::{ListPosition, SessionRecord, SessionSummary, StoredEvent};

/// The `type` of the journal event an archive appends, the session's last word
/// (`AgentEvent::Archived`, named by `AgentEvent::ARCHIVED_TYPE` in the layer above; a test
/// there keeps the two equal).
pub const ARCHIVED_EVENT: &str = "archived";

/// What one save changes beyond writing its record, messages and events, once checked against
/// the stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavePlan {
    /// A compaction's new history epoch: the stored history (`len` messages of `epoch`) moves
    /// to the discarded history, and the new one is written whole.
    pub discard: Option<DiscardedEpoch>,
    /// Stored messages the save replaces, removed before its messages are written from
    /// `replaced.start` on.
    pub replaced: Range<u64>,
    /// The journal sequence number of the save's first event: the stored record's watermark.
    pub events_from: u64,
    /// A named session saved for the first time joins its peer group: `(peer key, name)`.
    pub joins_peers: Option<(String, String)>,
    /// A delegated session saved for the first time is its parent's child, open.
    pub child_of: Option<SessionId>,
}

/// What a save needs of the record stored before it: whether it is archived, where its history
/// and journal end, and what its index entries are keyed by. Decoded from the stored bytes in
/// place of the whole [`SessionRecord`], whose agent settings, last result and pending step a
/// save never reads: serde skips them without building them, and no secret inside is opened.
/// Its defaults are the record's own.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct StoredHead {
    pub session_id: SessionId,
    #[serde(default = "crate::model::view::local_owner")]
    pub owner: String,
    pub updated_at: DateTime<Utc>,
    pub message_count: u64,
    #[serde(default)]
    pub history_epoch: u64,
    #[serde(default)]
    pub archived: bool,
    #[serde(default)]
    pub event_seq: u64,
}

impl From<&SessionRecord> for StoredHead {
    fn from(record: &SessionRecord) -> Self {
        Self {
            session_id: record.session_id.clone(),
            owner: record.owner.clone(),
            updated_at: record.updated_at,
            message_count: record.message_count,
            history_epoch: record.history_epoch,
            archived: record.archived,
            event_seq: record.event_seq,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscardedEpoch {
    pub epoch: u64,
    pub len: u64,
}

impl SavePlan {
    /// Checks `save` against `stored` (the record as stored now, if any).
    ///
    /// Errors: `Archived` (archiving is final: a save that raced an archive must not bring the
    /// session back), `Corrupt` (a new epoch not saved whole, a gap in the history, journal
    /// events that do not follow the stored watermark).
    pub fn check(stored: Option<&StoredHead>, save: &SaveRequest) -> Result<Self, StoreError> {
        let record = &save.record;
        let id = record.session_id.as_str();
        if stored.is_some_and(|stored| stored.archived) && !record.archived {
            return Err(StoreError::Archived(id.to_owned()));
        }
        let mut stored_len = stored.map_or(0, |stored| stored.message_count);
        let discard = match stored.filter(|stored| stored.history_epoch != record.history_epoch) {
            Some(stored) => {
                if save.replace_from != 0 {
                    return Err(StoreError::Corrupt(format!(
                        "session {id}: a new history epoch must be saved whole, not from message {}",
                        save.replace_from
                    )));
                }
                stored_len = 0;
                Some(DiscardedEpoch { epoch: stored.history_epoch, len: stored.message_count })
            }
            None => None,
        };
        if save.replace_from > stored_len {
            return Err(StoreError::Corrupt(format!(
                "session {id}: a save from message {} would leave a gap after message {stored_len}",
                save.replace_from
            )));
        }
        let events_from = stored.map_or(0, |stored| stored.event_seq);
        for (expected, event) in (events_from..).zip(&save.events) {
            if event.seq != expected {
                return Err(StoreError::Corrupt(format!(
                    "session {id}: journal event {} saved where event {expected} comes next",
                    event.seq
                )));
            }
        }
        let first_save = stored.is_none();
        Ok(Self {
            discard,
            replaced: save.replace_from..stored_len,
            events_from,
            joins_peers: record.name.as_ref().filter(|_| first_save).map(|name| (record.peer_key(), name.clone())),
            child_of: record.lineage.parent_id.clone().filter(|_| first_save),
        })
    }
}

/// Archives `stored` in place (archived, updated now, one more journal event) and returns the
/// journal's closing event, which the backend writes in the archive's own transaction. A
/// backend also drops the session from its peer group and from the open delegated sessions.
pub fn close_archive(stored: &mut SessionRecord) -> StoredEvent {
    stored.archived = true;
    stored.updated_at = Utc::now();
    let closing = StoredEvent {
        seq: stored.event_seq,
        turn: stored.turns,
        at: stored.updated_at,
        event: serde_json::json!({ "type": ARCHIVED_EVENT }).into(),
    };
    stored.event_seq += 1;
    closing
}

/// A filtered list's walk over stored summaries, in any order: every match is counted, the
/// newest `first` after the cursor kept. A filter is a predicate over summaries that no index
/// orders by, so a backend offers each summary the query reaches (not excluded, of the owner
/// asked for) and this keeps the page.
pub struct ListWalk<'a> {
    query: &'a StoredListQuery,
    excluded: HashSet<&'a str>,
    kept: Vec<(ListPosition, SessionSummary)>,
    total: usize,
}

impl<'a> ListWalk<'a> {
    pub fn new(query: &'a StoredListQuery) -> Self {
        let excluded = query.exclude.iter().map(SessionId::as_str).collect();
        Self { query, excluded, kept: Vec::new(), total: 0 }
    }

    /// One stored session indexed at `updated_ms`, its summary decoded by `summary` only when
    /// the query does not exclude it (a live session is listed from memory).
    pub fn offer(
        &mut self,
        updated_ms: u64,
        id: &str,
        summary: impl FnOnce() -> Result<SessionSummary, StoreError>,
    ) -> Result<(), StoreError> {
        if self.excluded.contains(id) {
            return Ok(());
        }
        let summary = summary()?;
        if !self.query.filter.matches(&summary) {
            return Ok(());
        }
        self.total += 1;
        let position = ListPosition { updated_ms, session_id: SessionId::from_string(id) };
        if self.query.after.as_ref().is_none_or(|after| after.is_before(&position)) {
            self.kept.push((position, summary));
            // Keep the newest `first` only: a long walk holds a page, not the whole list.
            if self.kept.len() > self.query.first.saturating_mul(2).max(64) {
                self.trim();
            }
        }
        Ok(())
    }

    fn trim(&mut self) {
        self.kept.sort_by(|a, b| b.0.cmp(&a.0));
        self.kept.truncate(self.query.first);
    }

    pub fn page(mut self) -> StoredPage {
        self.trim();
        StoredPage { summaries: self.kept.into_iter().map(|(_, summary)| summary).collect(), total: self.total }
    }
}
