//! A session as one self-describing JSONL document (`session export` / `session import`).
//!
//! Line 1 is a [`Header`]: the format's name and version, the exporting session's id and what
//! follows (so a reader can check it has everything), and which secret values were left out.
//! Line 2 is the session's record, then one line per message of its history, oldest first,
//! then one per event of its journal, in seq order. Every line is a JSON object tagged by
//! `type`; every object refuses fields it does not know, so a damaged or hand-edited document
//! is refused with the line that is wrong rather than half read.
//!
//! Secret values (MCP servers' `env` and `headers`) are never written: the record's serializer
//! writes `[redacted]` in their place outside the store ([`crate::secrets`]), and the header
//! names each one left out.
//!
//! Versions: a document is read when its version is at most [`EXPORT_VERSION`]; a newer one is
//! refused before any other line is read, saying so.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::journal::StoredEvent;
use super::record::SessionRecord;
use crate::ids::SessionId;
use crate::llm::Message;

/// What the header's `format` says.
pub const EXPORT_FORMAT: &str = "deputy.session";

/// The newest format version this build writes and reads.
pub const EXPORT_VERSION: u32 = 1;

/// The largest document an import reads (the REST body limit may be lower).
pub const MAX_EXPORT_BYTES: usize = 256 * 1024 * 1024;

/// The first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub format: String,
    pub version: u32,
    /// The session exported.
    pub session_id: SessionId,
    pub exported_at: DateTime<Utc>,
    /// How many message lines follow the record.
    pub messages: u64,
    /// How many event lines follow the messages.
    pub events: u64,
    /// The seq of the first event line: 0 when the journal is whole (without a store, deputy
    /// keeps a session's newest events only).
    #[serde(default)]
    pub events_from: u64,
    /// The secret values not written (`mcp_servers.NAME.env.KEY`, `…headers.NAME`): the
    /// document holds `[redacted]` in their place.
    #[serde(default)]
    pub secrets_left_out: Vec<String>,
}

/// One line of the document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Line {
    Header(Header),
    Record { record: Box<SessionRecord> },
    Message { message: Message },
    Event { event: StoredEvent },
}

/// What `session_export` answers: the document, and how many lines it has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExportResult {
    pub session_id: SessionId,
    pub lines: u64,
    /// The JSONL document: a header line, the record, the messages, the journal's events.
    pub document: String,
}

/// A session as a document holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionDocument {
    pub header: Header,
    pub record: SessionRecord,
    pub messages: Vec<Message>,
    pub events: Vec<StoredEvent>,
}

impl SessionDocument {
    /// A document of `record`'s session, exported now.
    pub fn new(record: SessionRecord, messages: Vec<Message>, events: Vec<StoredEvent>) -> Self {
        let header = Header {
            format: EXPORT_FORMAT.to_owned(),
            version: EXPORT_VERSION,
            session_id: record.session_id.clone(),
            exported_at: Utc::now(),
            messages: messages.len() as u64,
            events: events.len() as u64,
            events_from: events.first().map_or(record.event_seq, |event| event.seq),
            secrets_left_out: secret_names(&record),
        };
        Self { header, record, messages, events }
    }

    /// The document as JSONL: one object per line, each line ending with a newline.
    pub fn render(&self) -> String {
        let mut text = String::new();
        let mut push = |line: &Line| {
            // Plain data always serializes; secrets serialize as `[redacted]` out here.
            text.push_str(&serde_json::to_string(line).unwrap_or_default());
            text.push('\n');
        };
        push(&Line::Header(self.header.clone()));
        push(&Line::Record { record: Box::new(self.record.clone()) });
        for message in &self.messages {
            push(&Line::Message { message: message.clone() });
        }
        for event in &self.events {
            push(&Line::Event { event: event.clone() });
        }
        text
    }

    /// Reads a document, checking every line: its place, its fields, and that the header's
    /// counts, the record's and the journal's numbering agree. Errors name the line.
    pub fn parse(document: &str) -> Result<Self, String> {
        if document.len() > MAX_EXPORT_BYTES {
            return Err(format!("the document has {} bytes, more than {MAX_EXPORT_BYTES}", document.len()));
        }
        let mut lines = document.lines().enumerate().map(|(index, line)| (index + 1, line));
        let (_, first) = lines.next().ok_or("the document is empty")?;
        let header = read_header(first)?;
        let (number, text) = lines.next().ok_or("line 2: the record is missing")?;
        let Line::Record { record } = read_line(number, text)? else {
            return Err("line 2: the record must follow the header".to_owned());
        };
        let record = *record;
        let mut messages = Vec::new();
        let mut events = Vec::new();
        for (number, text) in lines {
            if text.is_empty() {
                return Err(format!("line {number}: empty"));
            }
            match read_line(number, text)? {
                Line::Message { message } if events.is_empty() => messages.push(message),
                Line::Message { .. } => return Err(format!("line {number}: a message after the events")),
                Line::Event { event } => {
                    let next = header.events_from + events.len() as u64;
                    if event.seq != next {
                        return Err(format!("line {number}: event seq {} where {next} was next", event.seq));
                    }
                    events.push(event);
                }
                Line::Header(_) | Line::Record { .. } => {
                    return Err(format!("line {number}: a second header or record"));
                }
            }
        }
        let counts = [
            ("messages", header.messages, messages.len() as u64),
            ("events", header.events, events.len() as u64),
            ("the record's messages", record.message_count, messages.len() as u64),
            ("the record's events", record.event_seq, header.events_from + events.len() as u64),
        ];
        for (what, said, found) in counts {
            if said != found {
                return Err(format!("{what}: {said} announced, {found} found (is the document cut short?)"));
            }
        }
        if record.session_id != header.session_id {
            return Err(format!(
                "line 2: the record is session {}, the header names {}",
                record.session_id, header.session_id
            ));
        }
        Ok(Self { header, record, messages, events })
    }
}

/// The header, version first: a newer document is refused before its other lines are read.
fn read_header(text: &str) -> Result<Header, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|err| format!("line 1: not a JSON object ({err})"))?;
    if value.get("type").and_then(serde_json::Value::as_str) != Some("header")
        || value.get("format").and_then(serde_json::Value::as_str) != Some(EXPORT_FORMAT)
    {
        return Err(format!("line 1: not a deputy session document (a header of format {EXPORT_FORMAT:?})"));
    }
    match value.get("version").and_then(serde_json::Value::as_u64) {
        Some(version) if version > u64::from(EXPORT_VERSION) => {
            return Err(format!(
                "the document is format version {version}, newer than this deputy reads ({EXPORT_VERSION}): \
                 import it with a newer deputy"
            ));
        }
        Some(_) => {}
        None => return Err("line 1: the header has no version".to_owned()),
    }
    match read_line(1, text)? {
        Line::Header(header) => Ok(header),
        _ => Err("line 1: not a header".to_owned()),
    }
}

fn read_line(number: usize, text: &str) -> Result<Line, String> {
    serde_json::from_str(text).map_err(|err| format!("line {number}: {err}"))
}

/// The secret values of a record's MCP servers, by where they are.
fn secret_names(record: &SessionRecord) -> Vec<String> {
    record
        .agent
        .tools
        .mcp_servers
        .iter()
        .flat_map(|server| {
            server.secret_names().into_iter().map(move |name| format!("mcp_servers.{}.{name}", server.name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Message;

    fn document() -> SessionDocument {
        let mut record = SessionRecord::for_test("s-1", Utc::now(), 2);
        record.event_seq = 1;
        let event =
            StoredEvent { seq: 0, turn: 0, at: Utc::now(), event: serde_json::json!({"type": "archived"}).into() };
        SessionDocument::new(
            record,
            vec![
                Message::user_text("hi"),
                Message::assistant(vec![crate::llm::ContentBlock::Text { text: "hello".into() }]),
            ],
            vec![event],
        )
    }

    #[test]
    fn a_document_reads_back_as_it_was_written() {
        let document = document();
        let text = document.render();
        assert_eq!(text.lines().count(), 5);
        assert_eq!(SessionDocument::parse(&text).unwrap(), document);
    }

    #[test]
    fn a_damaged_or_newer_document_is_refused_with_its_line() {
        let text = document().render();
        let lines: Vec<&str> = text.lines().collect();
        let newer = text.replacen("\"version\":1", "\"version\":2", 1);
        assert!(SessionDocument::parse(&newer).unwrap_err().contains("format version 2, newer"));
        let cut = lines[..4].join("\n");
        assert!(SessionDocument::parse(&cut).unwrap_err().contains("1 announced, 0 found"));
        let unknown = text.replacen("\"type\":\"message\"", "\"type\":\"message\",\"extra\":1", 1);
        assert!(SessionDocument::parse(&unknown).unwrap_err().starts_with("line 3:"));
        let swapped = [lines[0], lines[1], lines[4], lines[2], lines[3]].join("\n");
        assert!(SessionDocument::parse(&swapped).unwrap_err().contains("a message after the events"));
        assert!(SessionDocument::parse("{\"type\":\"record\"}").unwrap_err().contains("not a deputy session"));
        assert!(SessionDocument::parse("").is_err());
    }
}
