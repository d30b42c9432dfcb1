//! What `documents/index` answers: each collection brought up to its files.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DocumentsIndexed {
    pub collections: Vec<CollectionIndexed>,
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
}
