//! What `documents/index` answers: each collection brought up to its files.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DocumentsIndexed {
    pub collections: Vec<CollectionIndexed>,
    /// What the embeddings model (`[embeddings]`) has spent since the server started, if one
    /// is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<EmbeddingsSpent>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EmbeddingsSpent {
    pub model: String,
    pub calls: u64,
    pub tokens: u64,
    /// At the model's price, when deputy knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// One collection after a refresh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CollectionIndexed {
    pub name: String,
    /// Files the collection has now.
    pub files: usize,
    /// Files read and indexed again because their content is new or changed.
    pub indexed: usize,
    /// Files gone since the last refresh.
    pub removed: usize,
    /// Chunks the (re)indexed files gave.
    pub chunks: usize,
    /// Of those, how many were sent to the embeddings model (the others' vectors were known).
    #[serde(default)]
    pub embedded: usize,
}
