//! One collection's index: its chunks in tantivy, and in each commit's payload the files they
//! came from (size, modification time, content hash), so a refresh reads again only the files
//! whose metadata changed and re-indexes only those whose content did.
//!
//! tantivy's readers are snapshots: a search holds the segments it started on, so a refresh
//! that commits meanwhile swaps the new chunks in without disturbing it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, STORED, STRING, Schema, Value};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use super::chunk::chunks;
use super::files::{self, Found, Root};
use crate::retrieval::analyzer;

/// Bumped when the schema, the chunker or the payload changes: an index of another version is
/// rebuilt.
const FORMAT: u32 = 1;
const WRITER_BYTES: usize = 15_000_000;

/// A file as the index last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub size: u64,
    pub modified: u128,
    /// The first 16 bytes of its SHA-256, hex.
    pub hash: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Payload {
    format: u32,
    files: BTreeMap<String, Stamp>,
}

/// One chunk as a search answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredChunk {
    pub text: String,
    pub path: String,
    pub start_line: usize,
    pub end_line: usize,
}

/// What a refresh did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Refreshed {
    pub files: usize,
    /// Files (re)indexed because their content is new or changed.
    pub indexed: usize,
    pub removed: usize,
    pub chunks: usize,
    /// Bytes of the files read and indexed.
    pub bytes: u64,
}

struct Fields {
    path: Field,
    text: Field,
    chunk: Field,
}

pub struct CollectionIndex {
    index: Index,
    reader: IndexReader,
    writer: Mutex<IndexWriter>,
    fields: Fields,
    files: Mutex<BTreeMap<String, Stamp>>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct IndexError(pub String);

impl From<tantivy::TantivyError> for IndexError {
    fn from(error: tantivy::TantivyError) -> Self {
        Self(error.to_string())
    }
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let fields = Fields {
        path: builder.add_text_field("path", STRING),
        text: builder.add_text_field("text", analyzer::text_options()),
        chunk: builder.add_text_field("chunk", STORED),
    };
    (builder.build(), fields)
}

impl CollectionIndex {
    pub fn in_ram() -> Result<Self, IndexError> {
        let (schema, fields) = schema();
        Self::with_index(Index::create_in_ram(schema), fields, BTreeMap::new())
    }

    /// Opens the index in `dir`, or a new one when there is none or it is of another format.
    pub fn open_in(dir: &Path) -> Result<Self, IndexError> {
        let (schema, fields) = schema();
        if let Ok(index) = Index::open_in_dir(dir)
            && let Some(payload) = index
                .load_metas()
                .ok()
                .and_then(|metas| serde_json::from_str::<Payload>(metas.payload.as_deref()?).ok())
            && payload.format == FORMAT
            && index.schema() == schema
        {
            return Self::with_index(index, fields, payload.files);
        }
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|err| IndexError(format!("removing {}: {err}", dir.display())))?;
        }
        std::fs::create_dir_all(dir).map_err(|err| IndexError(format!("creating {}: {err}", dir.display())))?;
        Self::with_index(Index::create_in_dir(dir, schema)?, fields, BTreeMap::new())
    }

    fn with_index(index: Index, fields: Fields, files: BTreeMap<String, Stamp>) -> Result<Self, IndexError> {
        analyzer::register(&index);
        let options = tantivy::indexer::IndexWriterOptions::builder()
            .memory_budget_per_thread(WRITER_BYTES)
            .num_merge_threads(1)
            .build();
        let writer = index.writer_with_options(options)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        Ok(Self { index, reader, writer: Mutex::new(writer), fields, files: Mutex::new(files) })
    }

    /// Brings the index up to the files of `roots`: new and changed files (re)indexed, gone ones
    /// removed, unchanged ones (same size and time, or same content) left alone.
    pub fn refresh(&self, roots: &[Root], glob: Option<&crate::text::glob::Glob>) -> Result<Refreshed, IndexError> {
        let (found, stopped) = files::walk(roots, glob);
        if let Some(reason) = stopped {
            tracing::warn!("a document collection's walk stopped early ({reason}); the rest is not indexed");
        }
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        let mut report = Refreshed { files: found.len(), ..Refreshed::default() };
        let mut next: BTreeMap<String, Stamp> = BTreeMap::new();
        for file in &found {
            let known = files.get(&file.path);
            if let Some(known) = known.filter(|known| known.size == file.size && known.modified == file.modified) {
                next.insert(file.path.clone(), known.clone());
                continue;
            }
            let Some(text) = files::read(roots, file) else { continue };
            let hash = content_hash(&text);
            let stamp = Stamp { size: file.size, modified: file.modified, hash };
            if known.is_some_and(|known| known.hash == stamp.hash) {
                next.insert(file.path.clone(), stamp);
                continue;
            }
            writer.delete_term(Term::from_field_text(self.fields.path, &file.path));
            report.chunks += self.add_file(&writer, file, &text)?;
            report.indexed += 1;
            report.bytes += text.len() as u64;
            next.insert(file.path.clone(), stamp);
        }
        for gone in files.keys().filter(|path| !next.contains_key(*path)) {
            writer.delete_term(Term::from_field_text(self.fields.path, gone));
            report.removed += 1;
        }
        if report.indexed > 0 || report.removed > 0 || *files != next {
            let payload = serde_json::to_string(&Payload { format: FORMAT, files: next.clone() })
                .map_err(|err| IndexError(format!("encoding the payload: {err}")))?;
            let mut prepared = writer.prepare_commit()?;
            prepared.set_payload(&payload);
            prepared.commit()?;
            self.reader.reload()?;
            *files = next;
        }
        Ok(report)
    }

    fn add_file(&self, writer: &IndexWriter, file: &Found, text: &str) -> Result<usize, IndexError> {
        let pieces = chunks(&file.path, text);
        for piece in &pieces {
            let mut document = TantivyDocument::default();
            document.add_text(self.fields.path, &file.path);
            // The path and the headings above a chunk are searched with it.
            document.add_text(self.fields.text, format!("{}\n{}\n{}", file.path, piece.headings, piece.text));
            let stored = StoredChunk {
                text: piece.text.clone(),
                path: file.path.clone(),
                start_line: piece.start_line,
                end_line: piece.end_line,
            };
            document.add_text(self.fields.chunk, serde_json::to_string(&stored).unwrap_or_default());
            writer.add_document(document)?;
        }
        Ok(pieces.len())
    }

    /// The best `limit` chunks for `query`, best first.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<(f32, StoredChunk)>, IndexError> {
        let terms: Vec<(Occur, Box<dyn Query>)> = analyzer::terms(&self.index, self.fields.text, query)?
            .into_iter()
            .map(|token| -> (Occur, Box<dyn Query>) {
                let term = Term::from_field_text(self.fields.text, &token);
                (Occur::Should, Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)))
            })
            .collect();
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let searcher = self.reader.searcher();
        let top = searcher.search(&BooleanQuery::new(terms), &TopDocs::with_limit(limit).order_by_score())?;
        let mut found = Vec::with_capacity(top.len());
        for (score, address) in top {
            let document: TantivyDocument = searcher.doc(address)?;
            let Some(json) =
                document.get_first(self.fields.chunk).and_then(|value| value.as_str().map(str::to_owned))
            else {
                continue;
            };
            if let Ok(chunk) = serde_json::from_str(&json) {
                found.push((score, chunk));
            }
        }
        Ok(found)
    }

    /// Chunks in the index now.
    pub fn chunks(&self) -> u64 {
        self.reader.searcher().num_docs()
    }
}

fn content_hash(text: &str) -> String {
    Sha256::digest(text.as_bytes())[..16].iter().map(|byte| format!("{byte:02x}")).collect()
}
