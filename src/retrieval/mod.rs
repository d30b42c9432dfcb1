//! Finding text again: what every index of deputy shares (the engine around tantivy,
//! [`engine`], and its full-text [`analyzer`]), and the operator's document collections
//! ([`documents`]) that sessions search with `search_documents`.
//!
//! Built on tantivy (BM25): an embedded engine, so search needs no service and no network.
//! With an embeddings model (`[embeddings]`, [`embeddings`]), document search is hybrid: BM25
//! and vector similarity fused by reciprocal rank ([`fusion`]).

pub mod analyzer;
pub mod documents;
pub mod embeddings;
pub mod engine;
pub mod fusion;
