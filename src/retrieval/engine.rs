//! What every index of deputy's has in common: a tantivy index with deputy's analyzer, one
//! writer, a reader that moves only when a commit says so, and a versioned JSON payload in each
//! commit saying how far the index has followed its source.
//!
//! Indexes are derived data (the store's memories, the operator's files), so an index that
//! cannot be read, or was written by another format or schema, is wiped and built again rather
//! than repaired: [`Engine::open_in`] says which happened by returning the payload or not.
//!
//! tantivy is synchronous; callers run these methods on the blocking pool.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tantivy::schema::{Field, Schema, Value};
use tantivy::{DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument};

use super::analyzer;

/// The writer's arena: tantivy's minimum. Changes arrive a few records or files at a time.
const WRITER_BYTES: usize = 15_000_000;

/// Why an index failed; its owner logs it and answers without it rather than fail a turn.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct IndexError(pub String);

impl From<tantivy::TantivyError> for IndexError {
    fn from(error: tantivy::TantivyError) -> Self {
        Self(error.to_string())
    }
}

/// A commit's payload: the owner's `body`, under the `format` it was written with. (Nested,
/// not flattened: serde's flattening buffers values in a form without 128-bit integers, which
/// a file's modification time is.)
#[derive(Serialize, serde::Deserialize)]
struct Versioned<P> {
    format: u32,
    body: P,
}

/// One open index: a reader for searches, one writer for changes.
pub struct Engine {
    index: Index,
    reader: IndexReader,
    writer: Mutex<IndexWriter>,
    /// Bumped by the owner when its schema or payload changes.
    format: u32,
}

impl Engine {
    /// An index that lives only as long as the process.
    pub fn in_ram(schema: Schema, format: u32) -> Result<Self, IndexError> {
        Self::with_index(Index::create_in_ram(schema), format)
    }

    /// Opens the index in `dir` with its last commit's payload, or makes a new empty one (and
    /// no payload) when there is none, it cannot be read, or it is of another `format` or
    /// schema: the caller then fills it from its source.
    pub fn open_in<P: DeserializeOwned>(
        dir: &Path,
        schema: Schema,
        format: u32,
    ) -> Result<(Self, Option<P>), IndexError> {
        if let Ok(index) = Index::open_in_dir(dir)
            && index.schema() == schema
            && let Some(payload) = payload_of::<P>(&index, format)
        {
            return Ok((Self::with_index(index, format)?, Some(payload)));
        }
        if dir.exists() {
            tracing::info!(dir = %dir.display(), "an index is unreadable or of another version: rebuilding it");
            std::fs::remove_dir_all(dir).map_err(|err| IndexError(format!("removing {}: {err}", dir.display())))?;
        }
        std::fs::create_dir_all(dir).map_err(|err| IndexError(format!("creating {}: {err}", dir.display())))?;
        Ok((Self::with_index(Index::create_in_dir(dir, schema)?, format)?, None))
    }

    fn with_index(index: Index, format: u32) -> Result<Self, IndexError> {
        analyzer::register(&index);
        let options = tantivy::indexer::IndexWriterOptions::builder()
            .memory_budget_per_thread(WRITER_BYTES)
            .num_merge_threads(1)
            .build();
        let writer = index.writer_with_options(options)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        Ok(Self { index, reader, writer: Mutex::new(writer), format })
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// A snapshot of the last commit: a search holds the segments it started on, so a commit
    /// meanwhile does not disturb it.
    pub fn searcher(&self) -> Searcher {
        self.reader.searcher()
    }

    /// The writer, held by one change at a time.
    pub fn writer(&self) -> MutexGuard<'_, IndexWriter> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commits what `writer` holds with `payload`, then shows it to new searches.
    pub fn commit<P: Serialize>(
        &self,
        mut writer: MutexGuard<'_, IndexWriter>,
        payload: &P,
    ) -> Result<(), IndexError> {
        let payload = serde_json::to_string(&Versioned { format: self.format, body: payload })
            .map_err(|err| IndexError(format!("encoding the commit payload: {err}")))?;
        let mut prepared = writer.prepare_commit()?;
        prepared.set_payload(&payload);
        prepared.commit()?;
        drop(writer);
        self.reader.reload()?;
        Ok(())
    }
}

/// The last commit's payload, if it was written in `format`.
fn payload_of<P: DeserializeOwned>(index: &Index, format: u32) -> Option<P> {
    let metas = index.load_metas().ok()?;
    let payload: Versioned<P> = serde_json::from_str(metas.payload.as_deref()?).ok()?;
    (payload.format == format).then_some(payload.body)
}

/// The JSON value stored in `field` of the document at `address`, `None` when it has none.
pub fn stored_json<T: DeserializeOwned>(
    searcher: &Searcher,
    address: DocAddress,
    field: Field,
) -> Result<Option<T>, IndexError> {
    let document: TantivyDocument = searcher.doc(address)?;
    let Some(json) = document.get_first(field).and_then(|value| value.as_str().map(str::to_owned)) else {
        return Ok(None);
    };
    serde_json::from_str(&json).map(Some).map_err(|err| IndexError(format!("a stored record: {err}")))
}

/// A vector as an index stores it: little-endian f32s.
pub fn vector_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The vector of [`vector_bytes`].
pub fn vector_of<V: FromIterator<f32>>(bytes: &[u8]) -> V {
    bytes.chunks_exact(4).map(|four| f32::from_le_bytes([four[0], four[1], four[2], four[3]])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_through_bytes() {
        let vector = [0.25_f32, -1.5, 3.0e-7];
        assert_eq!(vector_of::<Vec<f32>>(&vector_bytes(&vector)), vector);
    }

    #[test]
    fn an_index_of_another_format_is_rebuilt() -> Result<(), IndexError> {
        #[derive(Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Seen {
            seen: u128,
        }
        let dir = tempfile::tempdir().map_err(|err| IndexError(err.to_string()))?;
        let path = dir.path().join("index");
        let schema = || {
            let mut builder = Schema::builder();
            builder.add_text_field("text", analyzer::text_options());
            builder.build()
        };
        let (engine, payload) = Engine::open_in::<Seen>(&path, schema(), 1)?;
        assert_eq!(payload, None);
        engine.commit(engine.writer(), &Seen { seen: 7 })?;
        drop(engine);
        let (_, payload) = Engine::open_in::<Seen>(&path, schema(), 1)?;
        assert_eq!(payload, Some(Seen { seen: 7 }));
        let (_, payload) = Engine::open_in::<Seen>(&path, schema(), 2)?;
        assert_eq!(payload, None, "another format is not read");
        Ok(())
    }
}
