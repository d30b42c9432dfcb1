//! The session journal's stored form: one [`StoredEvent`] per recorded agent event, numbered
//! per session from 0, and the page a feed answers ([`EventPage`]).
//!
//! The event itself is kept as JSON (an `AgentEvent` of `crate::agent`, tagged by `type`):
//! this layer and the store below it persist events without knowing their variants, so a
//! variant added above never needs a migration here.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::SessionId;

/// The most events one feed page returns.
pub const MAX_EVENTS_PAGE: usize = 500;

/// The most bytes of events (as JSON) one feed page returns: a page stops before the event
/// that would pass it, but always holds at least one event. Events carry whole prompts and
/// inbox deliveries, so 500 of them could be gigabytes (security review 2, G3).
pub const MAX_EVENTS_PAGE_BYTES: usize = 1024 * 1024;

/// The length of `value` serialized as JSON, without building the text.
pub fn json_len<T: Serialize + ?Sized>(value: &T) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing into a counter cannot fail; a value that cannot serialize counts what it wrote.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// Keeps taking events while they fit [`MAX_EVENTS_PAGE_BYTES`] (the first always does):
/// whether an event of `len` bytes joins a page that holds `taken` bytes so far (updated).
pub fn fits_page(taken: &mut usize, len: usize) -> bool {
    if *taken > 0 && taken.saturating_add(len) > MAX_EVENTS_PAGE_BYTES {
        return false;
    }
    *taken = taken.saturating_add(len).max(1);
    true
}

/// One recorded event of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StoredEvent {
    /// Its place in the session's journal, from 0, without gaps.
    pub seq: u64,
    /// The turn it belongs to: the last one started when it was recorded (0 before the first).
    pub turn: u64,
    /// When it was recorded (for merged text deltas: when the first of them was).
    pub at: DateTime<Utc>,
    /// The event: an object whose `type` names the variant (`turn_started`, `text_delta`,
    /// `tool_call_requested`, …), as the SSE stream of a turn sends it.
    pub event: serde_json::Value,
}

impl StoredEvent {
    /// The `type` of the event, `""` if it has none.
    pub fn kind(&self) -> &str {
        self.event.get("type").and_then(serde_json::Value::as_str).unwrap_or("")
    }
}

/// A page of a session's journal: at most 500 events, and at most 1 MiB of them (at least
/// one event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventPage {
    pub session_id: SessionId,
    /// The events after the requested `after_seq`, in order.
    pub events: Vec<StoredEvent>,
    /// The `after_seq` of the next page: the last event's seq, or the requested `after_seq`
    /// (or none) when the page is empty. Poll with it to follow the session.
    pub next_seq: Option<u64>,
}
