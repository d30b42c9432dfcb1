//! A group's saves encoded once. The rows of a save (its record, messages and journal events)
//! are encoded for the tables; the write-ahead log's record of the group is the same JSON,
//! spliced from those rows, rather than every save encoded a second time. A record decodes as
//! the saves themselves (`Vec<SaveRequest>`), so replaying a log does not depend on how it was
//! written.

use serde::Serialize;

use super::Inner;
use crate::ids::MessageId;
use crate::model::memory::MemoryRecord;
use crate::secrets::with_sealer;
use crate::store::{SaveRequest, StoreError, codec};

/// One save's rows, encoded (secrets sealed) as its tables keep them.
pub(super) struct EncodedSave {
    pub record: Vec<u8>,
    pub messages: Vec<Vec<u8>>,
    pub events: Vec<Vec<u8>>,
    /// The save's other fields, a JSON object of their own: what the log's record adds.
    rest: Vec<u8>,
}

/// The fields of a [`SaveRequest`] that are not rows, under the same names.
#[derive(Serialize)]
struct Rest<'a> {
    replace_from: u64,
    tool_outputs: &'a [(String, String)],
    delivered: &'a [MessageId],
    memories: &'a [MemoryRecord],
    fence: Option<u64>,
}

impl EncodedSave {
    pub fn new(store: &Inner, save: &SaveRequest) -> Result<Self, StoreError> {
        let SaveRequest { record, replace_from, messages, tool_outputs, delivered, events, memories, fence } = save;
        with_sealer(store.sealer.clone(), || {
            let rest = Rest { replace_from: *replace_from, tool_outputs, delivered, memories, fence: *fence };
            Ok(Self {
                record: codec::encode(record)?,
                messages: messages.iter().map(codec::encode).collect::<Result<_, _>>()?,
                events: events.iter().map(codec::encode).collect::<Result<_, _>>()?,
                rest: codec::encode(&rest)?,
            })
        })
    }

    /// At most the length of this save's JSON in a log record (a separator counted per row).
    fn logged_len(&self) -> usize {
        let rows = |values: &[Vec<u8>]| values.iter().map(|value| codec::json_of(value).len() + 1).sum::<usize>();
        let frame = r#"{"record":,"messages":[],"events":[],"#.len();
        frame
            + codec::json_of(&self.record).len()
            + rows(&self.messages)
            + rows(&self.events)
            + codec::json_of(&self.rest).len()
    }

    fn write_logged(&self, out: &mut Vec<u8>) {
        let rows = |out: &mut Vec<u8>, values: &[Vec<u8>]| {
            for (index, value) in values.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(codec::json_of(value));
            }
        };
        out.extend_from_slice(br#"{"record":"#);
        out.extend_from_slice(codec::json_of(&self.record));
        out.extend_from_slice(br#","messages":["#);
        rows(out, &self.messages);
        out.extend_from_slice(br#"],"events":["#);
        rows(out, &self.events);
        out.extend_from_slice(b"],");
        // `rest` is an object with at least one field: its members follow without its `{`.
        out.extend_from_slice(&codec::json_of(&self.rest)[1..]);
    }
}

/// The log's record of a group, gathered save by save while the group is written, up to a
/// limit: past it the saves are dropped at once (the group will be a checkpoint), so a group of
/// long sessions never holds more than that in memory.
pub(super) struct LogRecord {
    saves: Vec<EncodedSave>,
    len: usize,
    /// `None` once past it, or when nothing is to be recorded.
    limit: Option<usize>,
}

impl LogRecord {
    /// A record of at most `limit` bytes; `None` records nothing.
    pub fn within(limit: Option<usize>) -> Self {
        Self { saves: Vec::new(), len: b"v[]".len(), limit }
    }

    pub fn push(&mut self, save: EncodedSave) {
        let Some(limit) = self.limit else { return };
        self.len += save.logged_len() + 1;
        if self.len > limit {
            self.limit = None;
            self.saves = Vec::new();
            return;
        }
        self.saves.push(save);
    }

    /// The record's payload, encoded as `Vec<SaveRequest>` would be; `None` past the limit.
    pub fn finish(self) -> Option<Vec<u8>> {
        self.limit?;
        let mut payload = codec::encoded_json(self.len);
        payload.push(b'[');
        for (index, save) in self.saves.iter().enumerate() {
            if index > 0 {
                payload.push(b',');
            }
            save.write_logged(&mut payload);
        }
        payload.push(b']');
        Some(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Message;
    use crate::store::contract::{record, record_with_secrets, stored_event};
    use crate::store::redb::RedbStore;

    fn saves() -> Vec<SaveRequest> {
        let mut first = SaveRequest::new(record_with_secrets(1, "env-secret", "header-secret"), 0, vec![]);
        first.messages = vec![
            Message::user_text("a \"quoted\" question"),
            Message::assistant(vec![crate::llm::ContentBlock::Text { text: "an answer".into() }]),
        ];
        first.record.message_count = 2;
        first.tool_outputs = vec![("toolu_1".into(), "the whole output".into())];
        first.delivered = vec![MessageId::from_string("msg-1")];
        first.fence = Some(7);
        first.events = vec![stored_event(0, "turn_started"), stored_event(1, "text_delta")];
        let second = SaveRequest::new(record(2, 0), 0, vec![]);
        vec![first, second]
    }

    /// The record spliced from the rows decodes as the saves themselves, secrets opened.
    #[test]
    fn a_log_record_decodes_as_the_saves_it_was_spliced_from() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path().join("sessions.redb")).unwrap();
        let saves = saves();
        let mut log = LogRecord::within(Some(1 << 20));
        for save in &saves {
            log.push(EncodedSave::new(&store.inner, save).unwrap());
        }
        let payload = log.finish().unwrap();
        let decoded: Vec<SaveRequest> = store.inner.decode(&payload).unwrap();
        let json = |saves: &[SaveRequest]| serde_json::to_value(saves).unwrap();
        assert_eq!(json(&decoded), json(&saves));
        assert!(!String::from_utf8_lossy(&payload).contains("env-secret"), "secrets stay sealed in the log");
    }

    /// Past its limit a record is none, and what it held is dropped.
    #[test]
    fn a_log_record_past_its_limit_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path().join("sessions.redb")).unwrap();
        let saves = saves();
        let encoded = EncodedSave::new(&store.inner, &saves[0]).unwrap();
        let mut exact = LogRecord::within(Some(1 << 20));
        exact.push(EncodedSave::new(&store.inner, &saves[0]).unwrap());
        let len = exact.finish().unwrap().len();
        assert!(encoded.logged_len() + 3 >= len, "the bound is at least the length");

        let mut small = LogRecord::within(Some(len / 2));
        small.push(encoded);
        assert!(small.saves.is_empty());
        assert_eq!(small.finish(), None);
        let mut none = LogRecord::within(None);
        none.push(EncodedSave::new(&store.inner, &saves[1]).unwrap());
        assert_eq!(none.finish(), None);
    }
}
