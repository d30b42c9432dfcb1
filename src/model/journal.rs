//! The session journal's stored form: one [`StoredEvent`] per recorded agent event, numbered
//! per session from 0, and the page a feed answers ([`EventPage`]).
//!
//! The event itself is kept as JSON (an `AgentEvent` of `crate::agent`, tagged by `type`):
//! this layer and the store below it persist events without knowing their variants, so a
//! variant added above never needs a migration here. It is kept as *text* ([`EventJson`]),
//! written once when recorded: an event never changes after that, and nearly every reader
//! (the save, a feed page, a follower, the projector) only writes it out again.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

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
    #[schemars(with = "serde_json::Value")]
    pub event: EventJson,
}

impl StoredEvent {
    /// The `type` of the event, `""` if it has none.
    pub fn kind(&self) -> &str {
        self.event.kind()
    }
}

/// One event's JSON text, shared: cloning a recorded event (for a save, a feed page, a
/// follower) counts a reference instead of copying a tree of maps and strings, and writing it
/// out copies the text as it is. Fields are read by parsing ([`EventJson::parse`]), which only
/// the few readers that fold or render events do.
#[derive(Clone)]
pub struct EventJson(Arc<RawValue>);

impl EventJson {
    /// `value` written as JSON.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Self> {
        serde_json::value::to_raw_value(value).map(|raw| Self(Arc::from(raw)))
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The `type` of the event, `""` if it has none (or it is not a plain string). Events are
    /// written with their tag first, so that is read without parsing the rest.
    pub fn kind(&self) -> &str {
        let text = self.get();
        if let Some(rest) = text.strip_prefix(r#"{"type":""#)
            && let Some((kind, _)) = rest.split_once('"')
            && !kind.contains('\\')
        {
            return kind;
        }
        #[derive(Deserialize)]
        struct Tagged<'a> {
            #[serde(rename = "type", borrow)]
            kind: &'a str,
        }
        serde_json::from_str::<Tagged<'_>>(text).map_or("", |tagged| tagged.kind)
    }

    /// The event read as `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(self.get())
    }

    /// The event as a JSON value.
    pub fn to_value(&self) -> serde_json::Value {
        // The text was written by serde_json, so it parses.
        self.parse().unwrap_or_default()
    }
}

impl From<serde_json::Value> for EventJson {
    fn from(value: serde_json::Value) -> Self {
        // A JSON value always writes as JSON; the fallback is never taken.
        Self::of(&value).unwrap_or_else(|_| Self(Arc::from(RawValue::NULL.to_owned())))
    }
}

/// Equal when they are the same JSON value: the same event read back through a value has its
/// keys in another order.
impl PartialEq for EventJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get() || self.to_value() == other.to_value()
    }
}

impl std::fmt::Debug for EventJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

impl Serialize for EventJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Read through a JSON value, so any deserializer can produce one (a raw value can only be
/// taken from serde_json's own text reader, and events also arrive inside tagged enums and
/// from values). The stores read their rows as [`StoredEventRow`]s, which take the text as it
/// is.
impl<'de> Deserialize<'de> for EventJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(Self::from)
    }
}

/// A stored event as a store reads it back from its own JSON: the event's text is taken as it
/// is, no tree built and written again (serde_json's text reader only, which is what the
/// stores decode with).
#[derive(Deserialize)]
pub struct StoredEventRow {
    seq: u64,
    turn: u64,
    at: DateTime<Utc>,
    event: Box<RawValue>,
}

impl From<StoredEventRow> for StoredEvent {
    fn from(row: StoredEventRow) -> Self {
        Self { seq: row.seq, turn: row.turn, at: row.at, event: EventJson(Arc::from(row.event)) }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_kept_as_the_text_it_was_written_as_and_read_back_by_any_deserializer() {
        let event = EventJson::of(&serde_json::json!({"type": "text_delta", "text": "a \"quoted\" é"})).unwrap();
        let stored = StoredEvent { seq: 3, turn: 1, at: Utc::now(), event };
        let text = serde_json::to_string(&stored).unwrap();
        assert!(text.contains(r#""event":{"text":"a \"quoted\" é","type":"text_delta"}"#), "{text}");
        // From the stores' text, from a value, and inside a tagged enum, to the same event.
        let row: StoredEvent = serde_json::from_str::<StoredEventRow>(&text).unwrap().into();
        let from_value: StoredEvent = serde_json::from_value(serde_json::from_str(&text).unwrap()).unwrap();
        #[derive(Deserialize)]
        #[serde(tag = "type")]
        enum Line {
            Event { event: StoredEvent },
        }
        let Line::Event { event: tagged } =
            serde_json::from_str(&format!(r#"{{"type":"Event","event":{text}}}"#)).unwrap();
        assert_eq!((&row, &from_value, &tagged), (&stored, &stored, &stored));
        assert_eq!(row.event.to_value()["text"], "a \"quoted\" é");
    }

    #[test]
    fn the_kind_is_read_from_the_tag_first_or_wherever_it_is() {
        let kind = |json: &str| EventJson::from(serde_json::from_str::<serde_json::Value>(json).unwrap());
        // A value's keys are written in order, so `type` is not first here.
        assert_eq!(kind(r#"{"turn":1,"type":"turn_started"}"#).kind(), "turn_started");
        let tagged_first = EventJson::of(&Tagged { kind: "turn_completed", turn: 2 }).unwrap();
        assert_eq!(
            (tagged_first.get(), tagged_first.kind()),
            (r#"{"type":"turn_completed","turn":2}"#, "turn_completed")
        );
        assert_eq!(kind(r#"{"type":"a\"b"}"#).kind(), "", "an escaped tag is not a kind borrowed as it is");
        assert_eq!(kind(r#"{"type":7}"#).kind(), "");
        assert_eq!(kind(r#"{"turn":1}"#).kind(), "");

        #[derive(Serialize)]
        struct Tagged {
            #[serde(rename = "type")]
            kind: &'static str,
            turn: u64,
        }
    }
}
