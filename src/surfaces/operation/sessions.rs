//! A caller's sessions as things to find and keep: list them, archive one, compact its history,
//! read a tool output its history holds shortened.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Method, RestInput, RestRoute, Spec, TypeSchema, query};
use crate::error::ErrorCode::{
    InvalidRequest, PolicyDenied, SessionBusy, SessionCompactionDisabled, SessionNotFound,
    SessionPersistenceDisabled, SessionStoreError,
};
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::{
    ArchiveResult, CompactResult, LabelFilter, ListPosition, SessionFilter, SessionList, SessionStatus,
    ToolOutputResult,
};
use crate::session::ListQuery;

operations! {
    /// The operations on sessions as a whole.
    pub enum Sessions {
        List => LIST, |service, params: SessionListParams| service.list(params.into_query()?).await,
        Archive => ARCHIVE, |service, params: SessionArchiveParams| service.archive(&params.session_id).await,
        Compact => COMPACT, |service, params: SessionCompactParams| service.compact(&params.session_id).await,
        ToolOutput => TOOL_OUTPUT, |service, params: SessionToolOutputParams| {
            service.tool_output(&params.session_id, &params.tool_use_id).await
        },
    }
}

static LIST: Spec = Spec {
    tool: "session_list",
    method: "session/list",
    read_only: true,
    mcp_tool: true,
    not_for_models: SessionListParams::NOT_FOR_MODELS,
    description: "List your sessions, most recently updated first, paged.",
    params: TypeSchema::params::<SessionListParams>(),
    result: TypeSchema::result::<SessionList>(),
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/sessions",
        input: RestInput::Query(query::<SessionListParams>),
        operation_id: "listSessions",
        summary: "List sessions, most recently updated first",
        description: None,
        status: 200,
        answer: "A page of sessions.",
        errors: &[InvalidRequest, SessionPersistenceDisabled, SessionStoreError, PolicyDenied],
    },
};

static ARCHIVE: Spec = Spec {
    tool: "session_archive",
    method: "session/archive",
    read_only: false,
    mcp_tool: true,
    not_for_models: &[],
    description: "Stop a session and archive it (a running turn finishes first).",
    params: TypeSchema::params::<SessionArchiveParams>(),
    result: TypeSchema::result::<ArchiveResult>(),
    rest: RestRoute {
        method: Method::Delete,
        path: "/v1/sessions/{id}",
        input: RestInput::Path,
        operation_id: "archiveSession",
        summary: "Archive a session (a running turn finishes first)",
        description: None,
        status: 200,
        answer: "The session is archived.",
        errors: &[SessionNotFound, SessionStoreError, PolicyDenied],
    },
};

static COMPACT: Spec = Spec {
    tool: "session_compact",
    method: "session/compact",
    read_only: false,
    mcp_tool: true,
    not_for_models: &[],
    description: "Compact a session's history now: summarize older turns, prune old tool outputs.",
    params: TypeSchema::params::<SessionCompactParams>(),
    result: TypeSchema::result::<CompactResult>(),
    rest: RestRoute {
        method: Method::Post,
        path: "/v1/sessions/{id}/compact",
        input: RestInput::Path,
        operation_id: "compactSession",
        summary: "Compact a session's history now",
        description: Some(
            "`SESSION_COMPACTION_DISABLED` (501) in builds without compaction; `SESSION_BUSY` (409) while a turn \
             runs.",
        ),
        status: 200,
        answer: "What compaction did.",
        // INVALID_REQUEST: the session holds pending tool calls, which must be answered first.
        errors: &[
            InvalidRequest,
            SessionNotFound,
            SessionBusy,
            SessionStoreError,
            SessionCompactionDisabled,
            PolicyDenied,
        ],
    },
};

static TOOL_OUTPUT: Spec = Spec {
    tool: "session_tool_output",
    method: "session/tool_output",
    read_only: true,
    mcp_tool: true,
    not_for_models: &[],
    description: "The whole output of a tool result that entered the history shortened.",
    params: TypeSchema::params::<SessionToolOutputParams>(),
    result: TypeSchema::result::<ToolOutputResult>(),
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/sessions/{id}/tool-outputs/{tool_use_id}",
        input: RestInput::Path,
        operation_id: "readToolOutput",
        summary: "The whole output of a capped tool result",
        description: None,
        status: 200,
        answer: "The tool result's whole output.",
        errors: &[InvalidRequest, SessionNotFound, SessionStoreError, PolicyDenied],
    },
};

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionListParams {
    /// A page's `next_cursor`, to continue after it.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Sessions to skip (default 0).
    #[serde(default)]
    pub offset: Option<usize>,
    /// Page size (default 50, max 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Also list archived sessions.
    #[serde(default)]
    pub include_archived: Option<bool>,
    /// Only the children of this session.
    #[serde(default)]
    pub parent_id: Option<SessionId>,
    /// Only this delegation tree, its root included.
    #[serde(default)]
    pub root_id: Option<SessionId>,
    /// Only sessions with this status (`archived` lists the archived ones).
    #[serde(default)]
    pub status: Option<SessionStatus>,
    /// Only this owner's sessions (another owner's needs `sessions:all` or `sessions:read_all`).
    #[serde(default)]
    pub owner: Option<String>,
    /// Only sessions with this label: `key` or `key=value`.
    #[serde(default)]
    pub label: Option<String>,
    /// Only sessions whose title contains this text (case-insensitive).
    #[serde(default)]
    pub title: Option<String>,
}

impl SessionListParams {
    /// The filters a model does not see in `session_list`'s input schema: every byte of the
    /// tool list costs each call of a client's model, and an agent finds its own few sessions
    /// without them. REST and JSON-RPC callers (the inspector) use them; MCP still accepts them.
    pub const NOT_FOR_MODELS: &'static [&'static str] = &["status", "owner", "label", "title"];
}

impl SessionListParams {
    /// An unknown cursor is `INVALID_REQUEST`: it was not made by this server.
    pub fn into_query(self) -> Result<ListQuery, SessionError> {
        let after = match &self.cursor {
            Some(cursor) => Some(ListPosition::from_cursor(cursor).ok_or_else(|| {
                SessionError::invalid(format!("cursor {cursor:?} is not a next_cursor of session_list"))
            })?),
            None => None,
        };
        Ok(ListQuery {
            after,
            offset: self.offset.unwrap_or(0),
            limit: self.limit,
            include_archived: self.include_archived.unwrap_or(false),
            parent_id: self.parent_id,
            root_id: self.root_id,
            owner: self.owner.filter(|owner| !owner.is_empty()),
            filter: SessionFilter::new(
                self.status,
                self.label.as_deref().filter(|label| !label.is_empty()).map(LabelFilter::parse),
                self.title.as_deref(),
            ),
        })
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionArchiveParams {
    /// The session to archive.
    pub session_id: SessionId,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCompactParams {
    /// The session to compact.
    pub session_id: SessionId,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionToolOutputParams {
    pub session_id: SessionId,
    /// The `tool_use_id` of the shortened result.
    pub tool_use_id: String,
}
