//! One collection's index: its chunks in tantivy, and in each commit's payload the files they
//! came from (size, modification time, content hash), so a refresh reads again only the files
//! whose metadata changed and re-indexes only those whose content did.
//!
//! tantivy's readers are snapshots: a search holds the segments it started on, so a refresh
//! that commits meanwhile swaps the new chunks in without disturbing it.
//!
//! With an embedder, each chunk also keeps its vector (stored in the index, keyed by the
//! chunk's content hash): a chunk whose text is unchanged is never embedded again, even in a
//! changed file, and the vectors of the whole collection are held in memory for similarity
//! search (a brute-force scan: a few milliseconds at 10,000 chunks). A file whose chunks could
//! not be embedded (the embeddings server failed) is indexed for BM25 and tried again at the
//! next refresh.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tantivy::collector::DocSetCollector;
use tantivy::collector::TopDocs;
use tantivy::query::AllQuery;
use tantivy::schema::{Field, STORED, STRING, Schema, Value};
use tantivy::{IndexWriter, TantivyDocument, Term};

use super::chunk::chunks;
use super::files::{self, Found, Root};
use crate::retrieval::analyzer;
use crate::retrieval::embeddings::{Embedder, similarity};
pub use crate::retrieval::engine::IndexError;
use crate::retrieval::engine::{self, Engine};

/// Bumped when the schema, the chunker or the payload changes: an index of another version is
/// rebuilt.
const FORMAT: u32 = 3;
/// The stamp hash of a file whose chunks have no vectors yet: never a content's.
const UNEMBEDDED: &str = "unembedded";

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
    /// Chunks sent to the embeddings model (the others' vectors were known).
    pub embedded: usize,
}

struct Fields {
    path: Field,
    text: Field,
    chunk: Field,
    /// The chunk's content hash (what its vector is cached by).
    hash: Field,
    /// Its vector, little-endian f32s, when it has one.
    vector: Field,
}

/// A chunk with its vector, as similarity search scans them.
#[derive(Clone)]
struct Embedded {
    hash: String,
    vector: Arc<[f32]>,
    chunk: StoredChunk,
}

pub struct CollectionIndex {
    engine: Engine,
    fields: Fields,
    files: Mutex<BTreeMap<String, Stamp>>,
    /// Every chunk's vector, by file (empty without an embedder).
    vectors: RwLock<BTreeMap<String, Vec<Embedded>>>,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let fields = Fields {
        path: builder.add_text_field("path", STRING),
        text: builder.add_text_field("text", analyzer::text_options()),
        chunk: builder.add_text_field("chunk", STORED),
        hash: builder.add_text_field("hash", STRING | STORED),
        vector: builder.add_bytes_field("vector", STORED),
    };
    (builder.build(), fields)
}

impl CollectionIndex {
    pub fn in_ram() -> Result<Self, IndexError> {
        let (schema, fields) = schema();
        Self::with_engine(Engine::in_ram(schema, FORMAT)?, fields, BTreeMap::new())
    }

    /// Opens the index in `dir`, or a new one when there is none or it is of another format.
    pub fn open_in(dir: &Path) -> Result<Self, IndexError> {
        let (schema, fields) = schema();
        let (engine, payload) = Engine::open_in::<Payload>(dir, schema, FORMAT)?;
        Self::with_engine(engine, fields, payload.unwrap_or_default().files)
    }

    fn with_engine(engine: Engine, fields: Fields, files: BTreeMap<String, Stamp>) -> Result<Self, IndexError> {
        let this = Self { engine, fields, files: Mutex::new(files), vectors: RwLock::default() };
        this.load_vectors()?;
        Ok(this)
    }

    /// The vectors the index holds, into memory (at open).
    fn load_vectors(&self) -> Result<(), IndexError> {
        let searcher = self.engine.searcher();
        let mut vectors: BTreeMap<String, Vec<Embedded>> = BTreeMap::new();
        for address in searcher.search(&AllQuery, &DocSetCollector)? {
            let document: TantivyDocument = searcher.doc(address)?;
            let Some(embedded) = self.embedded_of(&document) else { continue };
            vectors.entry(embedded.chunk.path.clone()).or_default().push(embedded);
        }
        *self.vectors.write().unwrap_or_else(PoisonError::into_inner) = vectors;
        Ok(())
    }

    fn embedded_of(&self, document: &TantivyDocument) -> Option<Embedded> {
        let bytes = document.get_first(self.fields.vector)?.as_bytes()?;
        let hash = document.get_first(self.fields.hash)?.as_str()?.to_owned();
        let chunk: StoredChunk = serde_json::from_str(document.get_first(self.fields.chunk)?.as_str()?).ok()?;
        let vector: Arc<[f32]> = engine::vector_of(bytes);
        Some(Embedded { hash, vector, chunk })
    }

    /// Brings the index up to the files of `roots`: new and changed files (re)indexed, gone ones
    /// removed, unchanged ones (same size and time, or same content) left alone.
    pub fn refresh(
        &self,
        roots: &[Root],
        glob: Option<&crate::text::glob::Glob>,
        embedder: Option<&Embedder>,
    ) -> Result<Refreshed, IndexError> {
        let (found, stopped) = files::walk(roots, glob);
        if let Some(reason) = stopped {
            tracing::warn!("a document collection's walk stopped early ({reason}); the rest is not indexed");
        }
        let writer = self.engine.writer();
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        let mut report = Refreshed { files: found.len(), ..Refreshed::default() };
        let mut next: BTreeMap<String, Stamp> = BTreeMap::new();
        // Vectors known now, by content hash: a chunk seen before is not embedded again.
        let known_vectors: HashMap<String, Arc<[f32]>> = self
            .vectors
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .flatten()
            .map(|embedded| (embedded.hash.clone(), embedded.vector.clone()))
            .collect();
        let mut new_vectors: BTreeMap<String, Option<Vec<Embedded>>> = BTreeMap::new();
        for file in &found {
            let known = files.get(&file.path);
            if let Some(known) = known.filter(|known| known.size == file.size && known.modified == file.modified) {
                next.insert(file.path.clone(), known.clone());
                continue;
            }
            let Some(text) = files::read(roots, file) else { continue };
            let hash = content_hash(&text);
            let mut stamp = Stamp { size: file.size, modified: file.modified, hash };
            if known.is_some_and(|known| known.hash == stamp.hash) {
                next.insert(file.path.clone(), stamp);
                continue;
            }
            writer.delete_term(Term::from_field_text(self.fields.path, &file.path));
            let (chunks, embedded) = self.add_file(&writer, file, &text, embedder, &known_vectors, &mut report)?;
            if embedder.is_some() && embedded.is_none() {
                // Indexed for BM25 now; its vectors are tried again at the next refresh.
                stamp.hash = UNEMBEDDED.to_owned();
            }
            new_vectors.insert(file.path.clone(), embedded);
            report.chunks += chunks;
            report.indexed += 1;
            report.bytes += text.len() as u64;
            next.insert(file.path.clone(), stamp);
        }
        for gone in files.keys().filter(|path| !next.contains_key(*path)) {
            writer.delete_term(Term::from_field_text(self.fields.path, gone));
            new_vectors.insert(gone.clone(), None);
            report.removed += 1;
        }
        if report.indexed > 0 || report.removed > 0 || *files != next {
            self.engine.commit(writer, &Payload { files: next.clone() })?;
            *files = next;
            let mut vectors = self.vectors.write().unwrap_or_else(PoisonError::into_inner);
            for (path, embedded) in new_vectors {
                match embedded {
                    Some(embedded) if !embedded.is_empty() => vectors.insert(path, embedded),
                    _ => vectors.remove(&path),
                };
            }
        }
        Ok(report)
    }

    /// Indexes one file's chunks; with an embedder, with their vectors (`None` when they could
    /// not be had: the file is indexed without).
    fn add_file(
        &self,
        writer: &IndexWriter,
        file: &Found,
        text: &str,
        embedder: Option<&Embedder>,
        known: &HashMap<String, Arc<[f32]>>,
        report: &mut Refreshed,
    ) -> Result<(usize, Option<Vec<Embedded>>), IndexError> {
        let pieces = chunks(&file.path, text);
        // The path and the headings above a chunk are searched (and embedded) with it.
        let texts: Vec<String> =
            pieces.iter().map(|piece| format!("{}\n{}\n{}", file.path, piece.headings, piece.text)).collect();
        let hashes: Vec<String> = texts.iter().map(|text| content_hash(text)).collect();
        let vectors = embedder.and_then(|embedder| {
            let missing: Vec<String> =
                texts.iter().zip(&hashes).filter(|(_, hash)| !known.contains_key(*hash)).map(|(text, _)| text.clone()).collect();
            let fresh = match embedder.embed(&missing) {
                Ok(fresh) => fresh,
                Err(error) => {
                    tracing::warn!(path = %file.path, "embedding failed, the file is searched by words only for now: {error}");
                    return None;
                }
            };
            report.embedded += missing.len();
            let mut fresh = fresh.into_iter();
            hashes.iter().map(|hash| known.get(hash).cloned().or_else(|| fresh.next())).collect::<Option<Vec<_>>>()
        });
        let mut embedded = Vec::new();
        for (index, piece) in pieces.iter().enumerate() {
            let stored = StoredChunk {
                text: piece.text.clone(),
                path: file.path.clone(),
                start_line: piece.start_line,
                end_line: piece.end_line,
            };
            let mut document = TantivyDocument::default();
            document.add_text(self.fields.path, &file.path);
            document.add_text(self.fields.text, &texts[index]);
            document.add_text(self.fields.chunk, serde_json::to_string(&stored).unwrap_or_default());
            document.add_text(self.fields.hash, &hashes[index]);
            if let Some(vector) = vectors.as_ref().map(|vectors| vectors[index].clone()) {
                document.add_bytes(self.fields.vector, &engine::vector_bytes(&vector));
                embedded.push(Embedded { hash: hashes[index].clone(), vector, chunk: stored });
            }
            writer.add_document(document)?;
        }
        Ok((pieces.len(), vectors.map(|_| embedded)))
    }

    /// The `limit` chunks most similar to `query` (a unit vector), best first.
    pub fn nearest(&self, query: &[f32], limit: usize) -> Vec<(f32, StoredChunk)> {
        let vectors = self.vectors.read().unwrap_or_else(PoisonError::into_inner);
        let mut scored: Vec<(f32, &StoredChunk)> = vectors
            .values()
            .flatten()
            .map(|embedded| (similarity(query, &embedded.vector), &embedded.chunk))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.into_iter().take(limit).map(|(score, chunk)| (score, chunk.clone())).collect()
    }

    /// Whether any chunk has a vector.
    pub fn has_vectors(&self) -> bool {
        !self.vectors.read().unwrap_or_else(PoisonError::into_inner).is_empty()
    }

    /// The best `limit` chunks for `query`, best first.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<(f32, StoredChunk)>, IndexError> {
        let Some(words) = analyzer::any_word(self.engine.index(), self.fields.text, query)?.filter(|_| limit > 0)
        else {
            return Ok(Vec::new());
        };
        let searcher = self.engine.searcher();
        let top = searcher.search(&words, &TopDocs::with_limit(limit).order_by_score())?;
        let mut found = Vec::with_capacity(top.len());
        for (score, address) in top {
            if let Some(chunk) = engine::stored_json(&searcher, address, self.fields.chunk)? {
                found.push((score, chunk));
            }
        }
        Ok(found)
    }

    /// Chunks in the index now.
    pub fn chunks(&self) -> u64 {
        self.engine.searcher().num_docs()
    }
}

fn content_hash(text: &str) -> String {
    Sha256::digest(text.as_bytes())[..16].iter().map(|byte| format!("{byte:02x}")).collect()
}
