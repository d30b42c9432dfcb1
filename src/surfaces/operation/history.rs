//! A session's history as data: fork it, rewind it, export and import it, read it whole.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Method, OwnRoute, RestInput, RestRoute, Spec, TypeSchema};
use crate::error::ErrorCode::{
    AgentError, InvalidRequest, PolicyDenied, SessionBusy, SessionNotFound, SessionPersistenceDisabled,
    SessionStoreError,
};
use crate::ids::SessionId;
use crate::model::{ExportResult, RewindResult, SessionHistory, SessionView};

operations! {
    /// The operations on a session's history.
    pub enum History {
        Fork => FORK, |service, params: SessionForkParams| service.fork(&params.session_id, params.at_turn).await,
        Rewind => REWIND, |service, params: SessionRewindParams| {
            service.rewind(&params.session_id, params.to_turn).await
        },
        Export => EXPORT, |service, params: SessionExportParams| service.export(&params.session_id).await,
        Import => IMPORT, |service, params: SessionImportParams| service.import(&params.document).await,
        Messages => MESSAGES, |service, params: SessionMessagesParams| service.history(&params.session_id).await,
    }
}

static FORK: Spec = Spec {
    tool: "session_fork",
    method: "session/fork",
    read_only: false,
    mcp_tool: true,
    not_for_models: &[],
    description: "Copy a session up to a turn into a new session.",
    params: TypeSchema::params::<SessionForkParams>(),
    result: TypeSchema::result::<SessionView>(),
    rest: RestRoute {
        method: Method::Post,
        path: "/v1/sessions/{id}/fork",
        input: RestInput::Body,
        operation_id: "forkSession",
        summary: "Fork a session at a turn",
        description: Some(
            "A new session with the source's configuration, a fresh budget and its conversation up to the end of \
             turn `at_turn`; `state.forked_from` names the source. Waits for a running turn of the source. Turns \
             before the last compaction, or rewound, cannot be reached (`INVALID_REQUEST`).",
        ),
        status: 201,
        answer: "The new session, idle; `Location` names it.",
        errors: &[
            InvalidRequest,
            SessionNotFound,
            AgentError,
            SessionPersistenceDisabled,
            SessionStoreError,
            PolicyDenied,
        ],
    },
};

static REWIND: Spec = Spec {
    tool: "session_rewind",
    method: "session/rewind",
    read_only: false,
    mcp_tool: true,
    not_for_models: &[],
    description: "Drop the turns of a session after `to_turn`.",
    params: TypeSchema::params::<SessionRewindParams>(),
    result: TypeSchema::result::<RewindResult>(),
    rest: RestRoute {
        method: Method::Post,
        path: "/v1/sessions/{id}/rewind",
        input: RestInput::Body,
        operation_id: "rewindSession",
        summary: "Rewind a session to a turn",
        description: Some(
            "The dropped turns' events stay in the journal, followed by a `rewound` event; turn numbers keep \
             counting up. `SESSION_BUSY` (409) while a turn runs.",
        ),
        status: 200,
        answer: "What the rewind dropped.",
        errors: &[InvalidRequest, SessionNotFound, SessionBusy, SessionStoreError, PolicyDenied],
    },
};

static EXPORT: Spec = Spec {
    tool: "session_export",
    method: "session/export",
    read_only: true,
    mcp_tool: false,
    not_for_models: &[],
    description: "A session as one JSONL document: its record, messages and journal (secret values left out).",
    params: TypeSchema::params::<SessionExportParams>(),
    result: TypeSchema::result::<ExportResult>(),
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/sessions/{id}/export",
        input: RestInput::Own(OwnRoute::Export),
        operation_id: "exportSession",
        summary: "Export a session as JSONL",
        description: Some(
            "The answer is the document itself (`application/jsonl`): a header line (format `deputy.session`, \
             its version, counts, the secret values left out), the record, one line per message, one per journal \
             event. MCP clients read it as the resource `deputy://sessions/{id}/export`.",
        ),
        status: 200,
        answer: "The document.",
        errors: &[SessionNotFound, SessionStoreError, PolicyDenied],
    },
};

static IMPORT: Spec = Spec {
    tool: "session_import",
    method: "session/import",
    read_only: false,
    mcp_tool: false,
    not_for_models: &[],
    description: "A new session of yours from an exported document.",
    params: TypeSchema::params::<SessionImportParams>(),
    result: TypeSchema::result::<SessionView>(),
    rest: RestRoute {
        method: Method::Post,
        path: "/v1/sessions/import",
        input: RestInput::Own(OwnRoute::Import),
        operation_id: "importSession",
        summary: "Import an exported session",
        description: Some(
            "The body is the document (`application/jsonl`, within `--max-body-bytes`). Every line is checked \
             before anything is created: a damaged document, or one of a newer format version, is \
             `INVALID_REQUEST` and creates nothing. The new session has its own id and the caller as owner.",
        ),
        status: 201,
        answer: "The new session, idle; `Location` names it.",
        errors: &[InvalidRequest, AgentError, SessionPersistenceDisabled, SessionStoreError, PolicyDenied],
    },
};

static MESSAGES: Spec = Spec {
    tool: "session_messages",
    method: "session/messages",
    read_only: true,
    mcp_tool: false,
    not_for_models: &[],
    description: "A session's whole conversation, oldest message first (waits for a running turn).",
    params: TypeSchema::params::<SessionMessagesParams>(),
    result: TypeSchema::result::<SessionHistory>(),
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/sessions/{id}/messages",
        input: RestInput::Path,
        operation_id: "readMessages",
        summary: "A session's whole conversation",
        description: Some(
            "Waits for a running turn to end. MCP clients read it as the resource \
             `deputy://sessions/{id}/transcript` (Markdown).",
        ),
        status: 200,
        answer: "The messages, oldest first.",
        errors: &[SessionNotFound, SessionStoreError, PolicyDenied],
    },
};

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionForkParams {
    /// The session to copy.
    pub session_id: SessionId,
    /// Last turn copied (default: last; 0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_turn: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionRewindParams {
    /// The session to rewind.
    pub session_id: SessionId,
    /// Last turn kept (0: none).
    pub to_turn: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionExportParams {
    /// The session to export.
    pub session_id: SessionId,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionImportParams {
    /// A document `session/export` wrote (JSONL).
    pub document: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionMessagesParams {
    /// The session whose conversation to read.
    pub session_id: SessionId,
}
