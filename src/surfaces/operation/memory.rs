//! What the agents remember and read: a caller's memories, the document collections.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Method, RestInput, RestRoute, Spec, TypeSchema, query};
use crate::error::ErrorCode::{InvalidRequest, PolicyDenied, SessionStoreError};
use crate::model::documents::DocumentsIndexed;
use crate::model::memory::{MemoryDeleted, MemoryList};
use crate::session::MemoryQuery;

operations! {
    /// The operations on memories and documents.
    pub enum Memory {
        MemoryList => MEMORY_LIST, |service, params: MemoryListParams| service.memories(params.into_query()).await,
        MemoryDelete => MEMORY_DELETE, |service, params: MemoryDeleteParams| {
            service.forget_memory(params.memory_id).await
        },
        DocumentsIndex => DOCUMENTS_INDEX, |service, params: DocumentsIndexParams| {
            service.index_documents(params.collection).await
        },
    }
}

static MEMORY_LIST: Spec = Spec {
    tool: "memory_list",
    method: "memory/list",
    read_only: true,
    mcp_tool: false,
    not_for_models: &[],
    description: "Your memories: what your sessions remembered and their compacted history. With `query`, the \
             best matches; without, the newest first.",
    params: TypeSchema::params::<MemoryListParams>(),
    result: TypeSchema::result::<MemoryList>(),
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/memories",
        input: RestInput::Query(query::<MemoryListParams>),
        operation_id: "listMemories",
        summary: "The caller's memories, newest first or searched",
        description: Some(
            "Only the caller's own (its token's subject), whatever its scopes. Page with `before` = the \
             previous page's `next_before`. MCP clients read them as the resource `deputy://memories`.",
        ),
        status: 200,
        answer: "A page of memories.",
        errors: &[InvalidRequest, SessionStoreError],
    },
};

static MEMORY_DELETE: Spec = Spec {
    tool: "memory_delete",
    method: "memory/delete",
    read_only: false,
    mcp_tool: false,
    not_for_models: &[],
    description: "Delete one of your memories by id; `deleted: false` when you have none of that id.",
    params: TypeSchema::params::<MemoryDeleteParams>(),
    result: TypeSchema::result::<MemoryDeleted>(),
    rest: RestRoute {
        method: Method::Delete,
        path: "/v1/memories/{memory_id}",
        input: RestInput::Path,
        operation_id: "deleteMemory",
        summary: "Delete one of the caller's memories",
        description: Some("Another subject's memory of that id is as absent as one that never was."),
        status: 200,
        answer: "Whether it was deleted.",
        errors: &[InvalidRequest, SessionStoreError],
    },
};

static DOCUMENTS_INDEX: Spec = Spec {
    tool: "documents_index",
    method: "documents/index",
    read_only: false,
    mcp_tool: false,
    not_for_models: &[],
    description: "Bring the document collections (or one) up to their files now; only what changed is read \
             again. Needs the admin scope.",
    params: TypeSchema::params::<DocumentsIndexParams>(),
    result: TypeSchema::result::<DocumentsIndexed>(),
    rest: RestRoute {
        method: Method::Post,
        path: "/v1/documents/index",
        input: RestInput::Query(query::<DocumentsIndexParams>),
        operation_id: "indexDocuments",
        summary: "Re-index the document collections",
        description: Some(
            "Collections also refresh when the server starts and when their files change; this is for a \
             refresh on demand (`deputy documents index`).",
        ),
        status: 200,
        answer: "Each collection's files, and what was indexed again.",
        errors: &[InvalidRequest, PolicyDenied],
    },
};

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryListParams {
    /// Words to search for (best matches first); absent: the newest memories first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// A page's `next_before`, to continue with older memories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<u64>,
    /// Page size (default 20, max 100; a search answers at most 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

impl MemoryListParams {
    pub fn into_query(self) -> MemoryQuery {
        MemoryQuery { query: self.query, before: self.before, limit: self.limit }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryDeleteParams {
    /// The memory's id (REST: in the path).
    #[serde(deserialize_with = "crate::text::json::deserialize")]
    pub memory_id: u64,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentsIndexParams {
    /// One collection (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection: Option<String>,
}
