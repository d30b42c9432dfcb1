//! `search_documents`: the operator's document collections (`[documents.NAME]`), searched
//! (BM25) for passages with their path and lines. A session searches the collections its named
//! agent lists, else all of them; it names a collection, never a path.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::retrieval::documents::{Documents, MAX_RESULTS};
use crate::tools::{ToolOutput, TypedTool};

pub struct SearchDocuments {
    documents: Arc<Documents>,
    /// The collections this session may search (`None`: all).
    allowed: Option<Vec<String>>,
}

impl SearchDocuments {
    pub const NAME: &'static str = "search_documents";

    pub fn new(documents: Arc<Documents>, allowed: Option<Vec<String>>) -> Self {
        Self { documents, allowed }
    }

    fn collections(&self) -> Vec<&str> {
        let names = self.documents.names();
        match &self.allowed {
            Some(allowed) => names.into_iter().filter(|name| allowed.iter().any(|known| known == name)).collect(),
            None => names,
        }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchDocumentsArgs {
    /// Words to look for.
    query: String,
    /// One collection to search (default: all of yours).
    collection: Option<String>,
    /// Results, 1-20 (default 5).
    #[schemars(range(min = 1, max = 20))]
    limit: Option<usize>,
}

impl TypedTool for SearchDocuments {
    type Args = SearchDocumentsArgs;
    const NAME: &'static str = Self::NAME;

    fn description(&self) -> String {
        format!(
            "Search the document collections ({}) for passages about a question; answers the best passages with \
             their path and line range.",
            self.collections().join(", ")
        )
    }

    async fn run(&self, args: SearchDocumentsArgs, _cancel: CancellationToken) -> ToolOutput {
        let limit = args.limit.unwrap_or(5);
        if !(1..=MAX_RESULTS).contains(&limit) {
            return ToolOutput::error(format!("limit must be 1-{MAX_RESULTS}"));
        }
        let (documents, allowed) = (self.documents.clone(), self.allowed.clone());
        // Indexing and searching read files and the index: off the async workers.
        let found = tokio::task::spawn_blocking(move || {
            documents.search(allowed.as_deref(), args.collection.as_deref(), &args.query, limit)
        })
        .await;
        match found {
            Ok(Ok(hits)) => ToolOutput::ok(serde_json::to_string(&hits).unwrap_or_default()),
            Ok(Err(message)) => ToolOutput::error(message),
            Err(error) => ToolOutput::error(format!("search_documents failed: {error}")),
        }
    }
}
