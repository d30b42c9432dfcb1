//! [`Embedder`]: an embeddings model (`[embeddings] model`) as the document index uses it —
//! batched, called from the index's blocking threads, with what it spent counted. Vectors of
//! chunks are cached by the index (by content hash, in the index itself); queries here, for
//! the last few hundred asked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::llm::Usage;
use crate::llm::embeddings::{EmbeddingModel, MAX_BATCH};
use crate::llm::pricing::Price;

/// Query vectors kept (a session asking again costs no call).
const QUERY_CACHE: usize = 512;

pub struct Embedder {
    model: EmbeddingModel,
    /// What a token costs, when deputy knows (`None`: tokens are counted, not priced).
    price: Option<Price>,
    runtime: tokio::runtime::Handle,
    queries: Mutex<HashMap<String, Arc<[f32]>>>,
    calls: AtomicU64,
    tokens: AtomicU64,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder").field("model", &self.model).finish_non_exhaustive()
    }
}

/// What an embedder has spent since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Spent {
    pub calls: u64,
    pub tokens: u64,
    /// At the model's price, when known.
    pub cost_usd: Option<f64>,
}

impl Embedder {
    /// `runtime` runs the HTTP calls; the methods block on it (call them off the async workers).
    pub fn new(model: EmbeddingModel, price: Option<Price>, runtime: tokio::runtime::Handle) -> Self {
        Self {
            model,
            price,
            runtime,
            queries: Mutex::new(HashMap::new()),
            calls: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
        }
    }

    pub fn model(&self) -> &str {
        self.model.model()
    }

    pub fn spent(&self) -> Spent {
        let tokens = self.tokens.load(Ordering::Relaxed);
        let usage = Usage { input_tokens: tokens, ..Usage::default() };
        let cost_usd = self.price.map(|price| price.cost(&usage).dollars());
        Spent { calls: self.calls.load(Ordering::Relaxed), tokens, cost_usd }
    }

    /// The vectors of `texts`, in order, in batches. Blocking.
    pub fn embed(&self, texts: &[String]) -> Result<Vec<Arc<[f32]>>, String> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(MAX_BATCH) {
            let embedded = self.runtime.block_on(self.model.embed(batch)).map_err(|error| error.message)?;
            self.calls.fetch_add(1, Ordering::Relaxed);
            self.tokens.fetch_add(embedded.tokens, Ordering::Relaxed);
            vectors.extend(embedded.vectors.into_iter().map(|vector| Arc::from(normalized(vector))));
        }
        Ok(vectors)
    }

    /// A query's vector (cached). Blocking.
    pub fn embed_query(&self, query: &str) -> Result<Arc<[f32]>, String> {
        if let Some(known) = self.queries.lock().unwrap_or_else(PoisonError::into_inner).get(query) {
            return Ok(known.clone());
        }
        let vector = self.embed(&[query.to_owned()])?.pop().ok_or_else(|| "no vector for the query".to_owned())?;
        let mut queries = self.queries.lock().unwrap_or_else(PoisonError::into_inner);
        if queries.len() >= QUERY_CACHE {
            queries.clear();
        }
        queries.insert(query.to_owned(), vector.clone());
        Ok(vector)
    }
}

/// Unit length, so a dot product is the cosine.
fn normalized(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

/// The cosine of two unit vectors (0 when their lengths differ: another model's vector).
pub fn similarity(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
