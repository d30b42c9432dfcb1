//! The operator's document collections (`[documents.NAME]`): files chunked along their
//! structure, indexed once per process and shared by every session that searches them (seed
//! 004's cache: one index per collection, rebuilt without disturbing readers).
//!
//! A collection loads on first use (or when the server starts): it opens its index (beside the
//! store, else in memory), brings it up to the files (only what changed is read again), and
//! starts watching them, so the next search after an edit finds the edit. Collections are the
//! operator's: a session names one, never a path.

pub mod chunk;
pub mod files;
pub mod index;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use notify::Watcher;
use serde::Serialize;

use crate::retrieval::embeddings::Embedder;
use crate::retrieval::fusion::fuse;
use crate::text::glob::Glob;
use files::Root;
use index::{CollectionIndex, Refreshed, StoredChunk};

/// Results one search answers at most.
pub const MAX_RESULTS: usize = 20;
/// Candidates each ranking gives the fusion.
const CANDIDATES: usize = 50;

/// One collection as the config file gives it, its paths resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionSpec {
    pub name: String,
    /// `(absolute path, as configured)`.
    pub paths: Vec<(PathBuf, PathBuf)>,
    pub glob: Option<String>,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct DocumentHit {
    pub text: String,
    pub path: String,
    pub start_line: usize,
    pub end_line: usize,
    /// Relevance: BM25 within its collection, or, where the collections have vectors, the
    /// reciprocal-rank fusion of BM25 and vector similarity. Higher is better.
    pub score: f32,
    pub collection: String,
}

/// A collection: its spec, and its index once loaded.
struct Collection {
    spec: CollectionSpec,
    glob: Option<Glob>,
    /// Where its index lives (`None`: in memory).
    dir: Option<PathBuf>,
    loaded: OnceLock<Loaded>,
    /// One load or refresh at a time.
    refreshing: Mutex<()>,
}

struct Loaded {
    index: CollectionIndex,
    /// Set by the watcher when a file may have changed: the next search refreshes first.
    dirty: Arc<AtomicBool>,
    /// Kept alive as long as the collection (dropping it stops watching).
    _watcher: Option<notify::RecommendedWatcher>,
}

/// Every collection of the server.
#[derive(Default)]
pub struct Documents {
    collections: BTreeMap<String, Collection>,
    /// Collections loaded (index opened and brought up to the files), ever: one per collection
    /// per process, whatever the number of sessions searching it.
    loads: AtomicU64,
    /// With an embeddings model: hybrid search.
    embedder: Option<Arc<Embedder>>,
}

impl std::fmt::Debug for Documents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Documents").field("collections", &self.names()).finish_non_exhaustive()
    }
}

impl Documents {
    /// The collections of `specs`, their indexes under `dir` (`dir/NAME/`), or in memory.
    pub fn new(specs: Vec<CollectionSpec>, dir: Option<PathBuf>) -> Result<Self, String> {
        let mut collections = BTreeMap::new();
        for spec in specs {
            let glob = match spec.glob.as_deref().map(Glob::new).transpose() {
                Ok(glob) => glob,
                Err(error) => return Err(format!("[documents.{}] glob: {error}", spec.name)),
            };
            let dir = dir.as_ref().map(|dir| dir.join(&spec.name));
            let collection = Collection { glob, dir, loaded: OnceLock::new(), refreshing: Mutex::new(()), spec };
            collections.insert(collection.spec.name.clone(), collection);
        }
        Ok(Self { collections, loads: AtomicU64::new(0), embedder: None })
    }

    /// The same collections searched hybrid: BM25 and `embedder`'s vectors, fused.
    pub fn with_embedder(mut self, embedder: Arc<Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    pub fn embedder(&self) -> Option<&Arc<Embedder>> {
        self.embedder.as_ref()
    }

    pub fn names(&self) -> Vec<&str> {
        self.collections.keys().map(String::as_str).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.collections.is_empty()
    }

    /// How many times a collection was loaded.
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    /// Unknown names, as the error a caller or a profile is told.
    pub fn check_names(&self, names: &[String]) -> Result<(), String> {
        match names.iter().find(|name| !self.collections.contains_key(*name)) {
            Some(unknown) => Err(format!("no document collection {unknown:?}; known: {}", self.names().join(", "))),
            None => Ok(()),
        }
    }

    /// Loads every collection (or `only`) and brings it up to its files. Blocking.
    pub fn index(&self, only: Option<&str>) -> Result<Vec<(String, Refreshed)>, String> {
        if let Some(name) = only {
            self.check_names(&[name.to_owned()])?;
        }
        let mut reports = Vec::new();
        for (name, collection) in &self.collections {
            if only.is_some_and(|only| only != name) {
                continue;
            }
            let report = self.refresh(collection, true).map_err(|error| format!("{name}: {error}"))?;
            reports.push((name.clone(), report));
        }
        Ok(reports)
    }

    /// The best `limit` chunks for `query` in `collection`, or in every collection `allowed`
    /// (`None`: all). Blocking.
    pub fn search(
        &self,
        allowed: Option<&[String]>,
        collection: Option<&str>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<DocumentHit>, String> {
        let permitted = |name: &str| allowed.is_none_or(|allowed| allowed.iter().any(|known| known == name));
        let names: Vec<&String> = match collection {
            Some(name) if self.collections.contains_key(name) && permitted(name) => {
                self.collections.keys().filter(|known| *known == name).collect()
            }
            Some(name) => {
                let usable: Vec<&str> = self.names().into_iter().filter(|known| permitted(known)).collect();
                return Err(format!(
                    "no document collection {name:?}; this session searches: {}",
                    usable.join(", ")
                ));
            }
            None => self.collections.keys().filter(|name| permitted(name)).collect(),
        };
        let limit = limit.clamp(1, MAX_RESULTS);
        let mut hits = Vec::new();
        for name in names {
            let collection = &self.collections[name];
            let loaded = self.loaded(collection).map_err(|error| format!("{name}: {error}"))?;
            if loaded.dirty.swap(false, Ordering::AcqRel) {
                self.refresh(collection, false).map_err(|error| format!("{name}: {error}"))?;
            }
            let dense = self.nearest(&loaded.index, query);
            // Words alone need only the best `limit`: every candidate is a stored chunk read and
            // decoded, and a shorter top list lets BM25 skip more blocks. Fusion wants more.
            let wanted = if dense.is_empty() { limit } else { CANDIDATES };
            let lexical = loaded.index.search(query, wanted).map_err(|error| format!("{name}: {error}"))?;
            if dense.is_empty() {
                hits.extend(lexical.into_iter().map(|(score, chunk)| hit(name, score, chunk)));
                continue;
            }
            let rankings = [
                lexical.into_iter().map(|(_, chunk)| chunk).collect::<Vec<_>>(),
                dense.into_iter().map(|(_, chunk)| chunk).collect(),
            ];
            let fused = fuse(&rankings, |chunk| (chunk.path.clone(), chunk.start_line));
            hits.extend(fused.into_iter().take(limit).map(|(score, chunk)| hit(name, score, chunk)));
        }
        // Scores of different collections are not comparable; each one's best come first.
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        hits.truncate(limit);
        Ok(hits)
    }

    /// The chunks nearest `query` by vector, when there are vectors and the query can be
    /// embedded; an embeddings failure leaves the search to BM25, with a warning.
    fn nearest(&self, index: &CollectionIndex, query: &str) -> Vec<(f32, StoredChunk)> {
        let Some(embedder) = self.embedder.as_ref().filter(|_| index.has_vectors()) else { return Vec::new() };
        match embedder.embed_query(query) {
            Ok(vector) => index.nearest(&vector, CANDIDATES),
            Err(error) => {
                tracing::warn!("embedding the query failed, searching by words only: {error}");
                Vec::new()
            }
        }
    }

    /// The collection's index, loaded on first use.
    fn loaded<'a>(&self, collection: &'a Collection) -> Result<&'a Loaded, String> {
        if let Some(loaded) = collection.loaded.get() {
            return Ok(loaded);
        }
        self.refresh(collection, true)?;
        collection.loaded.get().ok_or_else(|| "the collection did not load".to_owned())
    }

    /// Loads the collection if it is not, and brings its index up to its files.
    fn refresh(&self, collection: &Collection, announce: bool) -> Result<Refreshed, String> {
        let _one = collection.refreshing.lock().unwrap_or_else(PoisonError::into_inner);
        // Opened again at each refresh: a path that appeared since is indexed, one that went is
        // emptied.
        let roots = open_roots(&collection.spec);
        let refresh = |loaded: &Loaded| {
            loaded
                .index
                .refresh(&roots, collection.glob.as_ref(), self.embedder.as_deref())
                .map_err(|error| error.to_string())
        };
        // A collection is published only once its first refresh is committed: a search that
        // finds it loaded never meets an index still being filled.
        let (loaded, report, first) = match collection.loaded.get() {
            Some(loaded) => (loaded, refresh(loaded)?, false),
            None => {
                let loaded = load(collection)?;
                let report = refresh(&loaded)?;
                let _ = collection.loaded.set(loaded);
                self.loads.fetch_add(1, Ordering::Relaxed);
                let loaded = collection.loaded.get().ok_or_else(|| "the collection did not load".to_owned())?;
                (loaded, report, true)
            }
        };
        let name = &collection.spec.name;
        if first {
            tracing::info!(
                collection = %name, files = report.files, indexed = report.indexed, chunks = loaded.index.chunks(),
                embedded = report.embedded,
                "document collection loaded"
            );
        } else if announce || report.indexed > 0 || report.removed > 0 {
            tracing::info!(
                collection = %name, indexed = report.indexed, removed = report.removed, embedded = report.embedded,
                "document collection refreshed"
            );
        }
        Ok(report)
    }
}

fn hit(collection: &str, score: f32, chunk: StoredChunk) -> DocumentHit {
    DocumentHit {
        text: chunk.text,
        path: chunk.path,
        start_line: chunk.start_line,
        end_line: chunk.end_line,
        score,
        collection: collection.to_owned(),
    }
}

/// The collection's paths that can be opened now. One that is missing is left out, not fatal:
/// the others are still searchable.
fn open_roots(spec: &CollectionSpec) -> Vec<Root> {
    let mut roots = Vec::new();
    for (path, shown) in &spec.paths {
        match Root::open(path, shown.clone()) {
            Ok(root) => roots.push(root),
            Err(error) => tracing::warn!(collection = %spec.name, path = %path.display(), "{error}"),
        }
    }
    roots
}

/// Opens a collection's index, and starts watching its paths.
fn load(collection: &Collection) -> Result<Loaded, String> {
    let index = match &collection.dir {
        Some(dir) => CollectionIndex::open_in(dir),
        None => CollectionIndex::in_ram(),
    }
    .map_err(|error| error.to_string())?;
    let dirty = Arc::new(AtomicBool::new(false));
    let flag = dirty.clone();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|event| !event.kind.is_access()) {
            flag.store(true, Ordering::Release);
        }
    });
    let watcher = match watcher {
        Ok(mut watcher) => {
            for (path, _) in &collection.spec.paths {
                if let Err(error) = watcher.watch(path, notify::RecursiveMode::Recursive) {
                    tracing::warn!(path = %path.display(), "not watching for changes: {error}");
                }
            }
            Some(watcher)
        }
        Err(error) => {
            tracing::warn!(collection = %collection.spec.name, "not watching for changes: {error}");
            None
        }
    };
    Ok(Loaded { index, dirty, _watcher: watcher })
}
