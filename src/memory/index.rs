//! The memory search index: BM25 over every owner's memories, with tantivy.
//!
//! The index is derived data. Its rows are the store's (or, without a store, only its own), and
//! each commit records in its payload how far it has followed the store ([`MemoryMarks`]), so a
//! process that died between the store's commit and the index's catches up at the next open,
//! and one that died in the middle of a deletion rebuilds. Every query is filtered by owner
//! before it is scored: nothing here can answer one owner with another's memory.
//!
//! tantivy is synchronous; the caller ([`super::Memory`]) runs these methods on the blocking
//! pool.

use std::ops::Bound;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use tantivy::collector::{DocSetCollector, TopDocs};
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{FAST, Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, Value};
use tantivy::{Order, TantivyDocument, Term};

use crate::ids::SessionId;
use crate::model::memory::{MemoryKind, MemoryRecord};
use crate::retrieval::analyzer;
use crate::retrieval::embeddings::{Embedder, similarity};
pub use crate::retrieval::engine::IndexError;
use crate::retrieval::engine::{self, Engine};
use crate::store::MemoryMarks;

/// Bumped when the schema or the payload changes: an index of another version is rebuilt.
const FORMAT: u32 = 3;

/// What an index's commit says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Payload {
    marks: MemoryMarks,
}

struct Fields {
    id: Field,
    owner: Field,
    session: Field,
    kind: Field,
    text: Field,
    record: Field,
    /// Its vector (little-endian f32s), with an embeddings model.
    vector: Field,
}

impl Fields {
    fn schema() -> (Schema, Self) {
        let mut builder = Schema::builder();
        let text_options = analyzer::text_options();
        let fields = Self {
            id: builder.add_u64_field("id", INDEXED | FAST | STORED),
            owner: builder.add_text_field("owner", STRING),
            session: builder.add_text_field("session", STRING),
            kind: builder.add_text_field("kind", STRING),
            text: builder.add_text_field("text", text_options),
            record: builder.add_text_field("record", STORED),
            vector: builder.add_bytes_field("vector", STORED),
        };
        (builder.build(), fields)
    }
}

/// One open index: a reader for searches, one writer for changes.
pub struct MemoryIndex {
    engine: Engine,
    fields: Fields,
    /// How far the last commit followed the store.
    marks: Mutex<MemoryMarks>,
}

impl std::fmt::Debug for MemoryIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryIndex").field("marks", &self.marks()).finish_non_exhaustive()
    }
}

impl MemoryIndex {
    /// An index that lives only as long as the process (a server without a store).
    pub fn in_ram() -> Result<Self, IndexError> {
        let (schema, fields) = Fields::schema();
        Ok(Self::with_engine(Engine::in_ram(schema, FORMAT)?, fields, MemoryMarks::default()))
    }

    /// Opens the index in `dir`, or makes a new one when there is none, it cannot be read or it
    /// is of another format (the caller then fills it from the store).
    pub fn open_in(dir: &Path) -> Result<Self, IndexError> {
        let (schema, fields) = Fields::schema();
        let (engine, payload) = Engine::open_in::<Payload>(dir, schema, FORMAT)?;
        Ok(Self::with_engine(engine, fields, payload.map(|payload| payload.marks).unwrap_or_default()))
    }

    fn with_engine(engine: Engine, fields: Fields, marks: MemoryMarks) -> Self {
        Self { engine, fields, marks: Mutex::new(marks) }
    }

    /// How far the index has followed the store.
    pub fn marks(&self) -> MemoryMarks {
        *self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `records` (their ids given) and commits, recording `marks`. With `embedder`, each
    /// gets its vector; an embeddings failure leaves them to BM25, with a warning.
    pub fn add(
        &self,
        records: &[MemoryRecord],
        marks: MemoryMarks,
        embedder: Option<&Embedder>,
    ) -> Result<(), IndexError> {
        let texts: Vec<String> = records.iter().map(searched_text).collect();
        let vectors = embedder.and_then(|embedder| match embedder.embed(&texts) {
            Ok(vectors) => Some(vectors),
            Err(error) => {
                tracing::warn!("embedding memories failed, they are searched by words only: {error}");
                None
            }
        });
        let writer = self.engine.writer();
        for (index, record) in records.iter().enumerate() {
            let mut document = self.document(record, &texts[index]);
            if let Some(vector) = vectors.as_ref().and_then(|vectors| vectors.get(index)) {
                document.add_bytes(self.fields.vector, &engine::vector_bytes(vector));
            }
            writer.add_document(document)?;
        }
        self.commit(writer, marks)
    }

    /// Deletes memory `id` and commits, recording `marks`.
    pub fn delete(&self, id: u64, marks: MemoryMarks) -> Result<(), IndexError> {
        let writer = self.engine.writer();
        writer.delete_term(Term::from_field_u64(self.fields.id, id));
        self.commit(writer, marks)
    }

    /// Empties the index (before a rebuild from the store).
    pub fn clear(&self) -> Result<(), IndexError> {
        let writer = self.engine.writer();
        writer.delete_all_documents()?;
        self.commit(writer, MemoryMarks::default())
    }

    fn commit(
        &self,
        writer: std::sync::MutexGuard<'_, tantivy::IndexWriter>,
        marks: MemoryMarks,
    ) -> Result<(), IndexError> {
        self.engine.commit(writer, &Payload { marks })?;
        *self.marks.lock().unwrap_or_else(PoisonError::into_inner) = marks;
        Ok(())
    }

    fn document(&self, record: &MemoryRecord, text: &str) -> TantivyDocument {
        let mut document = TantivyDocument::default();
        document.add_u64(self.fields.id, record.id);
        document.add_text(self.fields.owner, &record.owner);
        document.add_text(self.fields.session, record.session_id.as_str());
        document.add_text(self.fields.kind, record.kind.as_str());
        document.add_text(self.fields.text, text);
        document.add_text(self.fields.record, serde_json::to_string(record).unwrap_or_default());
        document
    }

    /// A filter that does not score.
    fn filter(&self, field: Field, value: &str) -> Box<dyn Query> {
        let term = TermQuery::new(Term::from_field_text(field, value), IndexRecordOption::Basic);
        Box::new(ConstScoreQuery::new(Box::new(term), 0.0))
    }

    /// The best `limit` matches of `query` among `owner`'s memories (of `session` only, when
    /// given), best first.
    pub fn search(
        &self,
        owner: &str,
        session: Option<&SessionId>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(f32, MemoryRecord)>, IndexError> {
        let Some(words) = analyzer::any_word(self.engine.index(), self.fields.text, query)?.filter(|_| limit > 0)
        else {
            return Ok(Vec::new());
        };
        let mut clauses = self.scope(owner, session);
        clauses.push((Occur::Must, words));
        let searcher = self.engine.searcher();
        let top = searcher.search(&BooleanQuery::new(clauses), &TopDocs::with_limit(limit).order_by_score())?;
        let mut found = Vec::with_capacity(top.len());
        for (score, address) in top {
            if let Some(record) = self.record_at(&searcher, address)? {
                found.push((score, record));
            }
        }
        Ok(found)
    }

    /// The clauses that keep a query to `owner`'s memories (of `session` only, when given).
    fn scope(&self, owner: &str, session: Option<&SessionId>) -> Vec<(Occur, Box<dyn Query>)> {
        let mut clauses = vec![(Occur::Must, self.filter(self.fields.owner, owner))];
        if let Some(session) = session {
            clauses.push((Occur::Must, self.filter(self.fields.session, session.as_str())));
        }
        clauses
    }

    /// The `limit` memories of `owner` (of `session`) most similar to `query` (a unit vector),
    /// best first: a scan of their stored vectors.
    pub fn nearest(
        &self,
        owner: &str,
        session: Option<&SessionId>,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(f32, MemoryRecord)>, IndexError> {
        let searcher = self.engine.searcher();
        let mut scored = Vec::new();
        for address in searcher.search(&BooleanQuery::new(self.scope(owner, session)), &DocSetCollector)? {
            let document: TantivyDocument = searcher.doc(address)?;
            let Some(bytes) = document.get_first(self.fields.vector).and_then(|value| value.as_bytes()) else {
                continue;
            };
            let vector: Vec<f32> = engine::vector_of(bytes);
            scored.push((similarity(query, &vector), address));
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut found = Vec::new();
        for (score, address) in scored.into_iter().take(limit) {
            if let Some(record) = self.record_at(&searcher, address)? {
                found.push((score, record));
            }
        }
        Ok(found)
    }

    /// `owner`'s memories newest first: up to `limit` with an id below `before`.
    pub fn list(&self, owner: &str, before: Option<u64>, limit: usize) -> Result<Vec<MemoryRecord>, IndexError> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, self.filter(self.fields.owner, owner))];
        if let Some(before) = before {
            let range =
                RangeQuery::new(Bound::Unbounded, Bound::Excluded(Term::from_field_u64(self.fields.id, before)));
            clauses.push((Occur::Must, Box::new(range)));
        }
        let searcher = self.engine.searcher();
        let collector = TopDocs::with_limit(limit.max(1)).order_by_fast_field::<u64>("id", Order::Desc);
        let top = searcher.search(&BooleanQuery::new(clauses), &collector)?;
        let mut found = Vec::with_capacity(top.len());
        for (_, address) in top.into_iter().take(limit) {
            if let Some(record) = self.record_at(&searcher, address)? {
                found.push(record);
            }
        }
        Ok(found)
    }

    /// Memory `id`, whoever owns it.
    pub fn get(&self, id: u64) -> Result<Option<MemoryRecord>, IndexError> {
        let searcher = self.engine.searcher();
        let query = TermQuery::new(Term::from_field_u64(self.fields.id, id), IndexRecordOption::Basic);
        let top = searcher.search(&query, &TopDocs::with_limit(1).order_by_score())?;
        match top.first() {
            Some((_, address)) => self.record_at(&searcher, *address),
            None => Ok(None),
        }
    }

    /// How many memories `owner` remembered, and their bytes (see [`MemoryRecord::weight`]).
    pub fn remembered_by(&self, owner: &str) -> Result<(u64, u64), IndexError> {
        let searcher = self.engine.searcher();
        let query = BooleanQuery::new(vec![
            (Occur::Must, self.filter(self.fields.owner, owner)),
            (Occur::Must, self.filter(self.fields.kind, MemoryKind::Remembered.as_str())),
        ]);
        let (mut count, mut bytes) = (0, 0);
        for address in searcher.search(&query, &DocSetCollector)? {
            if let Some(record) = self.record_at(&searcher, address)? {
                count += 1;
                bytes += record.weight();
            }
        }
        Ok((count, bytes))
    }

    fn record_at(
        &self,
        searcher: &tantivy::Searcher,
        address: tantivy::DocAddress,
    ) -> Result<Option<MemoryRecord>, IndexError> {
        engine::stored_json(searcher, address, self.fields.record)
    }
}

/// What is searched of a memory: its text, and its tags like words of it.
fn searched_text(record: &MemoryRecord) -> String {
    let mut text = record.text.clone();
    for tag in &record.tags {
        text.push(' ');
        text.push_str(tag);
    }
    text
}
