//! The wire contract of deputy's operations: parameter types and their conversion into service
//! requests, plus the error body every surface sends.
//!
//! Pure data: no I/O, no service calls, no knowledge of which surface is speaking. The same
//! parameter types serve MCP tool arguments, REST bodies and JSON-RPC params; the tool catalog
//! built from them lives in [`super::operation`], the checked-in schema files in
//! [`super::schemas`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agent::{AgentBuildConfig, ContextOverrides};
use crate::error::{ErrorKind, SessionError, TransportCode};
use crate::ids::{MessageId, SessionId};
use crate::llm::Reasoning;
use crate::model::{
    ApprovalAnswer, Budget, LabelFilter, ListPosition, SessionFilter, SessionStatus, ToolResultAnswer,
};
use crate::session::{
    CreateSessionRequest, DEFAULT_WAIT, ListQuery, RemoteSender, SendRequest, TurnOptions, TurnRequest, clamp_wait,
};
use crate::tools::mcp::McpServerRequest;
use crate::tools::{ApprovalPolicy, BuiltinTool, CallbackTool, ShellRequest, ToolRequest};

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCreateParams {
    /// The task for the agent: the first turn's prompt.
    pub prompt: String,
    /// A named agent to start from (listed below); fields here override its.
    #[serde(default)]
    pub agent: Option<String>,
    /// `provider:model`, e.g. `anthropic:claude-sonnet-4-5`. Default: the server's.
    #[serde(default)]
    pub model: Option<String>,
    /// System prompt, kept for the whole session.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Maximum tokens of each model response.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Session limits (a turn reaching one ends `budget_exhausted`).
    #[serde(default)]
    pub budget: Option<Budget>,
    /// Context window and compaction (default: the model's).
    #[serde(default)]
    pub context: Option<ContextOverrides>,
    /// Directory of the file tools and shell. Default: the server's.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    /// Builtin tools (default: the file tools).
    #[serde(default)]
    pub builtins: Option<Vec<BuiltinTool>>,
    /// The `shell` tool: `true`, `false` (default) or limits.
    #[serde(default)]
    pub shell: Option<ShellRequest>,
    /// Narrows the shell's sandbox.
    #[serde(default)]
    pub sandbox: Option<crate::sandbox::SandboxRequest>,
    /// Your own tools: a call ends the turn `pending_tool_calls`; answer with session_turn `tool_results`.
    #[serde(default)]
    pub callbacks: Option<Vec<CallbackTool>>,
    /// Calls held for approval: `"never"` (default), `"always"` (shell, file writes) or `{"tools": [names]}`.
    #[serde(default)]
    pub approval: Option<ApprovalPolicy>,
    /// Deny approvals unanswered this long (ms).
    #[serde(default)]
    pub approval_timeout_ms: Option<u64>,
    /// MCP servers whose tools the agent gets (`server__tool`): config names or inline servers.
    #[serde(default)]
    pub mcp_servers: Option<Vec<McpServerRequest>>,
    /// After each turn, wait for messages (session_send) and answer each.
    #[serde(default)]
    pub host_mode: Option<bool>,
    /// Its name among its peers: 1-64 letters, digits, `-`, `_`, `.`.
    #[serde(default)]
    pub name: Option<String>,
    /// Sessions of one peer_group can message each other.
    #[serde(default)]
    pub peer_group: Option<String>,
    /// Key/value labels, to find the session in session_list.
    #[serde(default, deserialize_with = "crate::text::json::option")]
    #[schemars(schema_with = "crate::text::json::option_schema::<BTreeMap<String, String>>")]
    pub labels: Option<BTreeMap<String, String>>,
    /// JSON Schema the answer must match; it is then parsed in `structured_output`.
    #[serde(default, deserialize_with = "crate::text::json::option")]
    #[schemars(schema_with = "crate::text::json::option_schema::<crate::text::json::AnyObject>")]
    pub output_schema: Option<serde_json::Value>,
    /// Retries of an answer not matching `output_schema` (default 2).
    #[serde(default)]
    pub structured_output_retries: Option<u32>,
    /// Extended thinking for every model call.
    #[serde(default)]
    pub reasoning: Option<Reasoning>,
    /// Only these skills (default: all).
    #[serde(default)]
    pub skills: Option<Vec<String>>,
    /// Wait this long (ms; default 30000) before answering `status: "running"`.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionTurnParams {
    /// The session to continue.
    pub session_id: SessionId,
    /// The next message; optional when answering pending calls.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Results of every pending callback call.
    #[serde(default)]
    pub tool_results: Option<Vec<ToolResultAnswer>>,
    /// Decisions on every pending approval.
    #[serde(default)]
    pub approvals: Option<Vec<ApprovalAnswer>>,
    /// This turn's output schema, instead of the session's.
    #[serde(default, deserialize_with = "crate::text::json::option")]
    #[schemars(schema_with = "crate::text::json::option_schema::<crate::text::json::AnyObject>")]
    pub output_schema: Option<serde_json::Value>,
    /// Retries of an answer not matching `output_schema` (default 2).
    #[serde(default)]
    pub structured_output_retries: Option<u32>,
    /// As in session_create.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionInterruptParams {
    /// The session whose running turn to cancel.
    pub session_id: SessionId,
    /// Also cancel its delegated sessions' turns (default true).
    #[serde(default)]
    pub cascade: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionReadParams {
    /// The session to read.
    pub session_id: SessionId,
    /// Wait up to this long (ms) for a running turn to end.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

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
    pub fn into_query(self) -> crate::session::MemoryQuery {
        crate::session::MemoryQuery { query: self.query, before: self.before, limit: self.limit }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentsIndexParams {
    /// One collection (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryDeleteParams {
    /// The memory's id (REST: in the path).
    #[serde(deserialize_with = "crate::text::json::deserialize")]
    pub memory_id: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionMessagesParams {
    /// The session whose conversation to read.
    pub session_id: SessionId,
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
pub struct SessionSendParams {
    /// The receiving session: its id, or its name with `peer_group`.
    pub session_id: SessionId,
    /// The message (at most 64 KiB).
    pub message: String,
    /// The id of the message this one answers.
    #[serde(default)]
    pub in_reply_to: Option<MessageId>,
    /// Find `session_id` by name in this peer group.
    #[serde(default)]
    pub peer_group: Option<String>,
    /// Relay hops (deputy to deputy).
    #[serde(default)]
    pub hops: Option<u32>,
    /// Another deputy's sending session (relays).
    #[serde(default)]
    pub sender: Option<RemoteSenderParams>,
}

/// A session of another deputy, as it names itself.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoteSenderParams {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

impl SessionSendParams {
    pub fn into_request(self) -> (SessionId, SendRequest) {
        let request = SendRequest {
            body: self.message,
            in_reply_to: self.in_reply_to,
            peer_group: self.peer_group,
            hops: self.hops.unwrap_or(0),
            sender: self.sender.map(|sender| RemoteSender { session_id: sender.session_id, name: sender.name }),
        };
        (self.session_id, request)
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionToolOutputParams {
    pub session_id: SessionId,
    /// The `tool_use_id` of the shortened result.
    pub tool_use_id: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionEventsParams {
    pub session_id: SessionId,
    /// Only events after this `seq` (a page's `next_seq`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    /// Events per page, 1 to 500 (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// The default page size of `session_events`.
pub const DEFAULT_EVENTS_LIMIT: usize = 100;

/// The `_meta` key under which an MCP error result carries its [`ErrorBody`].
pub const ERROR_META_KEY: &str = "deputy/error";

/// The error of every surface: an MCP error result's `_meta["deputy/error"]`, a REST error
/// body, JSON-RPC `error.data`, a streamed turn's `error` event.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ErrorBody {
    /// Stable code, e.g. `SESSION_BUSY`.
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// With `AGENT_ERROR`: how it failed (`rate_limited`, `context_overflow`, `credentials`, …),
    /// so a caller can decide to retry or compact without parsing `message`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
}

impl ErrorBody {
    /// The body of a refusal the HTTP transport makes before any session operation runs.
    pub fn transport(code: TransportCode, message: impl Into<String>) -> Self {
        Self { code: code.as_str().to_owned(), message: message.into(), session_id: None, error_kind: None }
    }
}

/// Every surface answers an error through this conversion, once per answer: where errors are
/// counted by code.
impl From<&SessionError> for ErrorBody {
    fn from(error: &SessionError) -> Self {
        crate::telemetry::spans::error_answered(error.code().as_str());
        Self {
            code: error.code().as_str().to_owned(),
            message: error.to_string(),
            session_id: error.session_id().cloned(),
            error_kind: error.kind(),
        }
    }
}

/// An error another deputy answered (the background server that owns a store), back as the
/// error it was there: the same code, session and message (the variants whose message deputy
/// composes are composed again from the numbers in it).
impl From<ErrorBody> for SessionError {
    fn from(body: ErrorBody) -> Self {
        let ErrorBody { code, message, session_id, error_kind } = body;
        let id = || session_id.clone().unwrap_or_else(|| SessionId::from_string(""));
        let numbers: Vec<usize> =
            message.split(|c: char| !c.is_ascii_digit()).filter_map(|digits| digits.parse().ok()).collect();
        let number = |at: usize| numbers.get(at).copied().unwrap_or_default();
        match code.as_str() {
            "SESSION_NOT_FOUND" => Self::NotFound { session_id: id(), message },
            "SESSION_BUSY" => Self::Busy(id()),
            "SESSION_NOT_RUNNING" => Self::NotRunning(id()),
            "SESSION_PERSISTENCE_DISABLED" => Self::PersistenceDisabled(message),
            "SESSION_COMPACTION_DISABLED" => Self::CompactionDisabled(message),
            "SESSION_STORE_ERROR" => {
                Self::store(message.strip_prefix("session store: ").map(str::to_owned).unwrap_or(message))
            }
            "SESSION_INBOX_FULL" if message.starts_with("the sessions of this owner") => {
                Self::MailQuotaFull { session_id: id(), held: number(0), limit: number(1) }
            }
            "SESSION_INBOX_FULL" => {
                Self::InboxFull { session_id: id(), capacity: number(numbers.len().saturating_sub(1)) }
            }
            "POLICY_DENIED" => Self::PolicyDenied(message),
            "AGENT_ERROR" => Self::Agent { session_id, kind: error_kind.unwrap_or(ErrorKind::Internal), message },
            _ => Self::InvalidRequest(message),
        }
    }
}

impl SessionCreateParams {
    pub fn into_request(self, turn: TurnOptions) -> CreateSessionRequest {
        CreateSessionRequest {
            build: AgentBuildConfig {
                model: self.model,
                system_prompt: self.system_prompt,
                max_tokens: self.max_tokens,
                budget: self.budget.unwrap_or_default(),
                context: self.context.unwrap_or_default(),
                tools: ToolRequest {
                    workspace: self.workspace,
                    builtins: self.builtins,
                    shell: self.shell,
                    callbacks: self.callbacks.unwrap_or_default(),
                    approval: self.approval,
                    approval_timeout_ms: self.approval_timeout_ms,
                    mcp_servers: self.mcp_servers.unwrap_or_default(),
                    network: self.sandbox.and_then(|sandbox| sandbox.network),
                },
                output_schema: self.output_schema,
                structured_output_retries: self.structured_output_retries,
                reasoning: self.reasoning,
                comms_by_default: false,
                delegation_by_default: false,
                agent: None,
                skills: self.skills,
                // Collections come from a named agent's `documents` (or are all of them).
                documents: None,
            },
            prompt: self.prompt,
            labels: self.labels.unwrap_or_default(),
            host_mode: self.host_mode,
            agent: self.agent,
            name: self.name,
            peer_group: self.peer_group,
            turn,
        }
    }
}

impl SessionTurnParams {
    pub fn into_request(self, options: TurnOptions) -> (SessionId, TurnRequest) {
        let request = TurnRequest {
            prompt: self.prompt.unwrap_or_default(),
            tool_results: self.tool_results.unwrap_or_default(),
            approvals: self.approvals.unwrap_or_default(),
            output_schema: self.output_schema,
            structured_output_retries: self.structured_output_retries,
            options,
        };
        (self.session_id, request)
    }
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

/// `caller_get`'s params: none.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallerGetParams {}

/// `webhooks_status`'s params: none.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhooksStatusParams {}

/// `agent_list`'s params: none.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentListParams {}

/// `agent_get`'s params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentGetParams {
    /// The agent's name.
    pub name: String,
}

/// How long `session_create` / `session_turn` wait for their turn (`wait_ms`: default 30 s,
/// at most 600 s), the same on every surface.
pub fn turn_wait(wait_ms: Option<u64>) -> Duration {
    clamp_wait(wait_ms, DEFAULT_WAIT)
}

/// How long `session_read` waits for a running turn (`wait_ms`: default 0, at most 600 s).
pub fn read_wait(wait_ms: Option<u64>) -> Duration {
    clamp_wait(wait_ms, Duration::ZERO)
}

/// Parses tool arguments, turning any mismatch into `INVALID_REQUEST` with serde's explanation.
pub fn parse_params<P: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: serde_json::Value,
) -> Result<P, SessionError> {
    serde_json::from_value(arguments)
        .map_err(|err| SessionError::invalid(format!("invalid arguments for {tool}: {err}")))
}
